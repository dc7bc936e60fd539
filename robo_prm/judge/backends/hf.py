"""transformers backend: a local HF folder, or a GGUF loaded with `gguf_file=` (dequantised
to fp32; needs `gguf`), optionally with a peft LoRA adapter merged in.

All rows of a batch – one per scene for the score, one per (scene, hazard) question – go
through one forward pass per `batch_size` rows, reading only the last position's logits. Every
row starts with the task prefix, whose KV cache is computed once per task and shared by the
rows of a pass (expanded to the batch); only the rows' own tokens are evaluated, left-padded
after the prefix (the padding masked out, positions counted from the prefix), so a row's
logits are those of its whole prompt alone (tested). Uses the process's torch thread setting
(training decides it).

Bounds: no clock. A call's work is fixed by token counts: one forward pass per `batch_size` rows
(a scene's score and each hazard asked are one row each, at most the prompt's tokens long), plus
one `generate` of at most `reason_tokens` new tokens when `explain` is set (with `reason_mode` copy: two passes over
the prompt and the scene's sentences instead); nothing waits on I/O.
"""
from __future__ import annotations

import copy
import os
import time
from typing import Any, Sequence

import numpy as np

from robo_prm.judge.base import Scored
from robo_prm.judge.config import JudgeConfig
from robo_prm.judge.copy_reason import copied_reason, log_softmax, reason_units
from robo_prm.judge.prompt import build_prompt, chatml, scene_text
from robo_prm.judge.scoring import digit_ids, digit_probs, expected_digit, yes_no_ids, yes_probability
from robo_prm.types import SceneDescription, TaskText


def _locate(cfg: JudgeConfig) -> tuple[str, str | None]:
    """(folder, gguf file name or None) from `model` (file or folder) and `transformers.gguf_file`."""
    from robo_prm.judge.weights import bundled_model_path

    path = cfg.model or bundled_model_path()
    if os.path.isfile(path):
        return os.path.dirname(os.path.abspath(path)), os.path.basename(path)
    return path, cfg.transformers.gguf_file


class TransformersBackend:
    name = "transformers"

    def __init__(self, cfg: JudgeConfig):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.cfg, self.torch = cfg, torch
        folder, gguf = _locate(cfg)
        self.where = os.path.join(folder, gguf) if gguf else folder
        kw = {"gguf_file": gguf} if gguf else {}
        self.tok = AutoTokenizer.from_pretrained(folder, **kw)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, **kw)
        if cfg.transformers.adapter:
            from peft import PeftModel

            # Merged once: inference then costs the same as the base model.
            model = PeftModel.from_pretrained(model, cfg.transformers.adapter).merge_and_unload()
        self.model = model.eval()
        pad = self.tok.pad_token_id if self.tok.pad_token_id is not None else self.tok.eos_token_id
        self.pad_id = 0 if pad is None else int(pad)
        if self.tok.chat_template:
            self.render = lambda msgs: self.tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        else:
            self.render = chatml
        self._tasks: dict[tuple, Any] = {}
        self._prefix_kv: dict[tuple, Any] = {}  # task key → the prefix's KV cache (batch 1)

    def tokenize(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False))

    def _task(self, task: TaskText):
        key = task.key
        if key not in self._tasks:
            prompt = build_prompt(task, self.render)
            prefix = self.tokenize(prompt.prefix)
            bos = self.tok.bos_token_id
            # Models whose template leaves BOS to the tokenizer (Llama-2 style) get it here.
            if bos is not None and getattr(self.tok, "add_bos_token", False) and prefix[:1] != [bos]:
                prefix = [bos] + prefix
            score_tail, digits = digit_ids(self.tokenize, prompt.score_tail)
            hazards = {n: yes_no_ids(self.tokenize, t) for n, t in prompt.hazard_tails.items()}
            self._tasks[key] = (prompt, prefix, score_tail, digits, hazards)
        return self._tasks[key]

    def _batch(self, rows: list[list[int]]):
        """Left-padded ids, attention mask and position ids (positions start at 0 after the padding)."""
        torch = self.torch
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, width - len(r):] = torch.tensor(r, dtype=torch.long)
            mask[i, width - len(r):] = 1
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        return ids, mask, pos

    def last_logits(self, rows: list[list[int]]) -> np.ndarray:
        """Next-token logits after each row (whole prompts), `batch_size` rows per left-padded forward pass."""
        out = []
        bs = max(1, self.cfg.transformers.batch_size)
        with self.torch.inference_mode():
            for i in range(0, len(rows), bs):
                ids, mask, pos = self._batch(rows[i:i + bs])
                logits = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=1).logits
                out.append(logits[:, -1, :].double().numpy())
        return np.concatenate(out, axis=0)

    def prefixed_logits(self, key: tuple, prefix: list[int], rows: list[list[int]]) -> np.ndarray:
        """`last_logits` for rows that all start with `prefix`: its KV cache is computed once (per task `key`)
        and each pass evaluates only the rows' own tokens after it."""
        torch, n = self.torch, len(prefix)
        if any(r[:n] != prefix or len(r) <= n for r in rows):
            return self.last_logits(rows)
        with torch.inference_mode():
            if key not in self._prefix_kv:
                self._prefix_kv[key] = self.model(input_ids=torch.tensor([prefix]), use_cache=True).past_key_values
            out = []
            bs = max(1, self.cfg.transformers.batch_size)
            for i in range(0, len(rows), bs):
                part = [r[n:] for r in rows[i:i + bs]]
                ids, mask, pos = self._batch(part)
                cache = copy.deepcopy(self._prefix_kv[key])
                cache.batch_repeat_interleave(len(part))
                mask = torch.cat([torch.ones((len(part), n), dtype=mask.dtype), mask], dim=1)
                logits = self.model(input_ids=ids, attention_mask=mask, position_ids=pos + n, past_key_values=cache,
                                    use_cache=True, logits_to_keep=1).logits
                out.append(logits[:, -1, :].double().numpy())
        return np.concatenate(out, axis=0)

    def score(self, task: TaskText, scenes: Sequence[SceneDescription], hazards: Sequence[str], explain: bool) -> list[Scored]:
        t0 = time.perf_counter()
        prompt, prefix, score_tail, digits, hz = self._task(task)
        heads = [prefix + self.tokenize(scene_text(s)) for s in scenes]
        rows = [h + score_tail for h in heads]
        asked = [(name, hz[name]) for name in hazards]
        for h in heads:
            rows += [h + tail for _, (tail, _, _) in asked]
        logits = self.prefixed_logits(task.key, prefix, rows)
        n, k = len(scenes), len(asked)
        out = []
        for i in range(n):
            d, mass = digit_probs(logits[i], digits)
            probs = {name: yes_probability(logits[n + i * k + j], yes, no) for j, (name, (_, yes, no)) in enumerate(asked)}
            out.append(Scored(d, mass, probs))
        if explain:
            reasons = (self._reasons(prompt, heads, out) if self.cfg.reason_mode == "free"
                       else [self._copied(prompt, h, s, scene.text) for h, s, scene in zip(heads, out, scenes)])
            for s, h in zip(out, reasons):
                s.reason = h
        ms = (time.perf_counter() - t0) * 1e3 / max(n, 1)
        for s in out:
            s.latency_ms = ms
        return out

    def _reasons(self, prompt, heads: list[list[int]], scored: list[Scored]) -> list[str]:
        """Greedy reasons after 'Score: <expected digit>\\nReason:', one batched generate (raw text;
        ConfidentJudge cleans it)."""
        rows = [h + self.tokenize(prompt.reason_tails[expected_digit(s.digits)]) for h, s in zip(heads, scored)]
        ids, mask, _ = self._batch(rows)
        with self.torch.inference_mode():
            gen = self.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=self.cfg.reason_tokens,
                                      do_sample=False, pad_token_id=self.pad_id)
        texts = self.tok.batch_decode(gen[:, ids.shape[1]:], skip_special_tokens=True)
        return list(texts)

    def _copied(self, prompt, head: list[int], scored: Scored, scene: str) -> str:
        """reason_mode copy: the scene's sentences likeliest after 'Reason:' (copy_reason.py)."""
        units = reason_units(scene)
        rows = head + self.tokenize(prompt.reason_tails[expected_digit(scored.digits)])
        return copied_reason(units, self._continuations(rows, [self.tokenize(" " + u) for u in units])) or ""

    def _continuations(self, row: list[int], conts: list[list[int]]) -> list[list[float]]:
        """Each continuation's token log-probabilities after `row`: one forward pass over the row, one over the
        continuations side by side on its KV cache (left-padded, as `prefixed_logits` does)."""
        torch = self.torch
        with torch.inference_mode():
            first = self.model(input_ids=torch.tensor([row]), use_cache=True)
            lsm0 = log_softmax(first.logits[0, -1].double().numpy())
            out = [[lsm0[c[0]]] if c else [] for c in conts]
            longer = [k for k, c in enumerate(conts) if len(c) > 1]
            if not longer:
                return out
            ids, mask, pos = self._batch([conts[k][:-1] for k in longer])
            cache = copy.deepcopy(first.past_key_values)
            cache.batch_repeat_interleave(len(longer))
            mask = torch.cat([torch.ones((len(longer), len(row)), dtype=mask.dtype), mask], dim=1)
            logits = self.model(input_ids=ids, attention_mask=mask, position_ids=pos + len(row),
                                past_key_values=cache, use_cache=True).logits
            lsm = torch.log_softmax(logits.double(), dim=-1).numpy()
        for i, k in enumerate(longer):
            c = conts[k]
            start = ids.shape[1] - (len(c) - 1)  # left-padded: the continuation's tokens end the row
            out[k] += [lsm[i, start + j, c[j + 1]] for j in range(len(c) - 1)]
        return out

    def close(self) -> None:
        self.model = None
        self._tasks.clear()
        self._prefix_kv.clear()
