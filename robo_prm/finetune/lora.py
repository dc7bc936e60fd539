"""LoRA fine-tuning of the judge on exactly its own prompt format.

The prompt rows come from `TransformersBackend` itself (prefix = system + task text, then the scene,
then the ``Score:`` tail or a hazard question's ``Answer:`` tail), so the expected-score-over-digits
scoring applies unchanged to the tuned model. Loss only on the answer token:

* score rows: cross-entropy of the full next-token distribution against a *soft* target, a narrow
  Gaussian over the digits 0–9 around ``target − 1`` (σ = `sigma`). Its mean is the target, so the
  expected digit is calibrated; nearly all its mass is within ±1 of the median and on digit tokens,
  so the judge's confidence (P(|d − median| ≤ 1) × digit mass) becomes high where it has learned;
* hazard rows (optional, `hazard_weight` > 0): cross-entropy on " yes" / " no";
* reason rows (optional, `reason_weight` > 0, labels with a `reason`): teacher-forced cross-entropy of the
  reason after ``Score: <target digit>\nReason:`` — the scene's own sentences about the goal's objects
  (`labels.reason_target`), ended by a newline, so greedy decoding learns to state facts the scene states
  and to stop instead of looping.

Speed: labels are grouped by task text; each batch evaluates its shared task prefix once (batch 1,
with gradients) and runs every row's scene + tail against that prefix's KV cache, expanded to the
batch: the same function as the full prompt, at ~1/3 of the tokens.
"""
from __future__ import annotations

import json
import logging
import math
import os
import random
import resource
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from robo_prm.config_flags import opt
from robo_prm.finetune.labels import Label, read_labels
from robo_prm.judge.prompt import scene_text
from robo_prm.provenance import provenance

log = logging.getLogger(__name__)


@dataclass
class LoraTrainConfig:
    # targets and max_labels: what the shipped adapter was trained with (robo_prm/models/judge_lora/train_info.json).
    model: str | None = opt(None, "GGUF file or HF folder (null: the bundled SmolLM2 GGUF)")
    r: int = opt(8, "LoRA rank")
    alpha: int = opt(16, "LoRA alpha")
    dropout: float = opt(0.0, "LoRA dropout")
    targets: list[str] = opt(["q_proj", "v_proj", "o_proj"], "modules that get an adapter")
    lr: float = opt(1e-3, "peak learning rate (AdamW, warm-up then cosine decay)")
    epochs: float = opt(1.0, "passes over the selected labels (fractions allowed)")
    batch_size: int = opt(8, "scenes per step (all of one task text)")
    max_labels: int = opt(960, "labels used (balanced over base tasks / generated families and score digits); 0: all")
    sigma: float = opt(0.6, "width of the soft target over digits")
    hazard_weight: float = opt(0.5, "weight of the hazard rows (0: none)")
    hazard_rows: int = opt(2, "hazard questions per scene (sampled, yes-answers preferred)")
    reason_weight: float = opt(0.3, "weight of the reason rows (0: none; labels without a reason get none)")
    reason_share: float = opt(0.3, "share of the scenes that also get a reason row")
    threads: int = opt(1, "torch threads")
    seed: int = opt(0, "seed of the label draw and the batches")
    max_minutes: float = opt(40.0, "stop (and save) after this much training wall time (the learning rate's cosine "
                                   "decay follows it when it ends training before the plan does)")
    resume: str | None = opt(None, "continue training this adapter folder (its r, alpha and targets win)")


def soft_target(target: float, sigma: float) -> np.ndarray:
    """Gaussian weights over digits 0–9 around `target − 1` (the 1–10 scale → 0–9), summing to 1."""
    t = float(np.clip(target - 1.0, 0.0, 9.0))
    w = np.exp(-0.5 * ((np.arange(10) - t) / max(sigma, 1e-3)) ** 2)
    return w / w.sum()


def balance_group(lab: Label) -> str:
    """What the draw balances over: the base task of a shipped task's text variants, the structure family of a
    generated task (each generated file is its own base task; its labels carry `family:<name>` as variant)."""
    if lab.variant and lab.variant.startswith("family:"):
        return lab.variant
    return lab.base_task or lab.task


def select_labels(labels: Sequence[Label], n: int, seed: int = 0) -> list[Label]:
    """Up to n training labels, balanced over base tasks / generated families (`balance_group`: equal shares,
    smaller groups give all they have) and, within a group, spread over score digits (round robin)."""
    labels = [lab for lab in labels if lab.split == "train"]
    if not n or n >= len(labels):
        return list(labels)
    rng = random.Random(seed)
    by_task: dict[str, list[Label]] = defaultdict(list)
    for lab in labels:
        by_task[balance_group(lab)].append(lab)
    quota, left, tasks = {}, n, sorted(by_task, key=lambda t: len(by_task[t]))
    for i, t in enumerate(tasks):
        quota[t] = min(len(by_task[t]), left // (len(tasks) - i))
        left -= quota[t]
    out = []
    for t in tasks:
        buckets: dict[int, list[Label]] = defaultdict(list)
        for lab in by_task[t]:
            buckets[lab.digit].append(lab)
        for b in buckets.values():
            rng.shuffle(b)
        got: list[Label] = []
        while len(got) < quota[t]:
            for d in sorted(buckets):
                if buckets[d] and len(got) < quota[t]:
                    got.append(buckets[d].pop())
        out += got
    return out


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class LoraTrainer:
    """Wraps a `TransformersBackend`'s model in peft LoRA and trains it on labels."""

    def __init__(self, cfg: LoraTrainConfig, backend=None):
        import torch
        from peft import LoraConfig, get_peft_model

        from robo_prm.judge import JudgeConfig
        from robo_prm.judge.backends.hf import TransformersBackend

        self.cfg, self.torch = cfg, torch
        torch.manual_seed(cfg.seed)
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.backend = backend or TransformersBackend(JudgeConfig(backend="transformers", model=cfg.model))
        lcfg = LoraConfig(r=cfg.r, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout, target_modules=list(cfg.targets),
                          bias="none", task_type="CAUSAL_LM")
        if cfg.resume:
            from peft import PeftModel

            self.model = PeftModel.from_pretrained(self.backend.model, cfg.resume, is_trainable=True)
        else:
            self.model = get_peft_model(self.backend.model, lcfg)
        self.backend.model = self.model  # the backend now scores with the adapter (for evaluation)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(self.params, lr=cfg.lr, weight_decay=0.0)
        self.history: list[dict] = []

    # ---- rows ------------------------------------------------------------------------
    def _rows(self, labels: Sequence[Label], rng: random.Random):
        """(prefix ids, suffix rows, per-row (kind, target)) for labels sharing one task text."""
        spec = labels[0].judge_text()
        prompt, prefix, score_tail, digits, hz = self.backend._task(spec)
        rows, targets = [], []
        for lab in labels:
            scene = self.backend.tokenize(scene_text(_Scene(lab.scene)))
            rows.append(scene + score_tail)
            targets.append(("score", soft_target(lab.target, self.cfg.sigma), digits))
            if self.cfg.reason_weight > 0 and lab.reason and rng.random() < self.cfg.reason_share:
                head = scene + self.backend.tokenize(prompt.reason_tails[lab.digit])
                answer = self.backend.tokenize(" " + lab.reason) + self.backend.tokenize("\n")
                rows.append(head + answer)
                targets.append(("reason", answer, len(head)))
            if self.cfg.hazard_weight > 0 and hz:
                names = list(hz)
                present = [n for n in names if n in lab.hazards]
                picks = []
                for _ in range(min(self.cfg.hazard_rows, len(names))):
                    pool = [n for n in (present if present and rng.random() < 0.5 else names) if n not in picks] or \
                           [n for n in names if n not in picks]
                    picks.append(rng.choice(pool))
                for n in picks:
                    tail, yes, no = hz[n]
                    rows.append(scene + tail)
                    targets.append(("hazard", (yes[0] if n in lab.hazards else no[0]), None))
        return prefix, rows, targets

    def loss(self, labels: Sequence[Label], rng: random.Random | None = None):
        """Mean answer-token loss over one same-task batch (a torch scalar with grad)."""
        torch = self.torch
        rng = rng or random.Random(0)
        prefix, rows, targets = self._rows(labels, rng)
        # score and hazard rows read their last position; a reason row every position that predicts its answer
        reads = [list(range(t[2] - 1, len(r) - 1)) if t[0] == "reason" else [len(r) - 1] for r, t in zip(rows, targets)]
        logps = self.logprobs_at(prefix, rows, reads)
        losses = []
        for logp, (kind, tgt, extra) in zip(logps, targets):
            if kind == "score":
                q = torch.tensor(tgt, dtype=logp.dtype)
                losses.append(-(q * logp[0, extra]).sum())
            elif kind == "hazard":
                losses.append(self.cfg.hazard_weight * -logp[0, tgt])
            else:
                losses.append(self.cfg.reason_weight * -logp[torch.arange(len(tgt)), torch.tensor(tgt)].mean())
        return torch.stack(losses).mean()

    def answer_logprobs(self, prefix: list[int], rows: list[list[int]]):
        """log softmax of the next token after prefix + each row (n × vocab); the prefix is evaluated once."""
        return self.torch.cat(self.logprobs_at(prefix, rows, [[len(r) - 1] for r in rows]))

    def logprobs_at(self, prefix: list[int], rows: list[list[int]], reads: list[list[int]]):
        """Per row, log softmax of the next token at the row positions `reads[i]` (k_i × vocab), all rows
        against one evaluation of the shared prefix."""
        torch = self.torch
        n, lp = len(rows), len(prefix)
        out = self.model(input_ids=torch.tensor([prefix]), use_cache=True, logits_to_keep=1)
        cache = out.past_key_values
        cache.batch_repeat_interleave(n)
        width = max(len(r) for r in rows)
        ids = torch.full((n, width), self.backend.pad_id, dtype=torch.long)
        mask = torch.zeros((n, lp + width), dtype=torch.long)
        mask[:, :lp] = 1
        for i, r in enumerate(rows):
            ids[i, :len(r)] = torch.tensor(r)
            mask[i, lp:lp + len(r)] = 1
        pos = (lp + torch.arange(width)).unsqueeze(0).expand(n, -1)
        # the decoder body, then the LM head only at each row's last real position (the head is 49k wide)
        causal = self.model.get_base_model()
        hidden = causal.model(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=cache).last_hidden_state
        which = torch.tensor([i for i, r in enumerate(reads) for _ in r])
        at = torch.tensor([p for r in reads for p in r])
        logp = torch.log_softmax(causal.lm_head(hidden[which, at]).float(), dim=-1)
        return list(torch.split(logp, [len(r) for r in reads]))

    # ---- training --------------------------------------------------------------------
    def batches(self, labels: Sequence[Label], rng: random.Random) -> list[list[Label]]:
        groups: dict[tuple, list[Label]] = defaultdict(list)
        for lab in labels:
            groups[lab.judge_text().key].append(lab)
        out = []
        for g in groups.values():
            rng.shuffle(g)
            out += [g[i:i + self.cfg.batch_size] for i in range(0, len(g), self.cfg.batch_size)]
        rng.shuffle(out)
        return out

    def train(self, labels: Sequence[Label], log_every: int = 10, echo=print) -> dict:
        cfg, torch = self.cfg, self.torch
        rng = random.Random(cfg.seed)
        plan: list[list[Label]] = []
        epochs = cfg.epochs
        while epochs > 0:
            bs = self.batches(labels, rng)
            plan += bs[: max(1, int(round(len(bs) * min(1.0, epochs))))]
            epochs -= 1.0
        total = len(plan)
        budget_s = cfg.max_minutes * 60
        self.model.train()
        t0, run = time.perf_counter(), []
        step = 0
        for step, batch in enumerate(plan, 1):
            # warm-up, then cosine decay over whichever ends first, the plan or the time budget: a run that the
            # budget stops still ends at a low learning rate instead of being cut at its peak
            done = max((step - 1) / total, (time.perf_counter() - t0) / budget_s if budget_s > 0 else 0.0)
            warm = min(1.0, 0.05 + 10 * done)  # warm-up over the first tenth of the plan or the budget
            for group in self.opt.param_groups:
                group["lr"] = cfg.lr * warm * 0.5 * (1 + math.cos(math.pi * min(done, 1.0)))
            loss = self.loss(batch, rng)
            self.opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.params, 1.0)
            self.opt.step()
            run.append(float(loss.detach()))
            elapsed = time.perf_counter() - t0
            if step % log_every == 0 or step == total:
                rec = {"step": step, "of": total, "loss": float(np.mean(run[-log_every:])), "s": round(elapsed, 1),
                       "rss_mb": round(_rss_mb())}
                self.history.append(rec)
                echo(json.dumps(rec))
            if elapsed > cfg.max_minutes * 60:
                echo(f"stopping after {elapsed / 60:.1f} min (max_minutes={cfg.max_minutes}) at step {step}/{total}")
                break
        self.model.eval()
        return {"steps": step, "planned_steps": total, "train_seconds": round(time.perf_counter() - t0, 1),
                "max_rss_mb": round(_rss_mb()), "labels": len(labels), "final_loss": float(np.mean(run[-20:])) if run else None,
                "threads": torch.get_num_threads()}

    def save(self, out: str | Path, info: dict | None = None) -> Path:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(str(out))
        meta = {"config": asdict(self.cfg), "history": self.history, **(info or {})}
        (out / "train_info.json").write_text(json.dumps(meta, indent=1))
        return out


@dataclass(frozen=True)
class _Scene:  # scene_text() needs only .text
    text: str


def finetune(labels_path: str | Path, out: str | Path, cfg: LoraTrainConfig | None = None, echo=print) -> dict:
    """Train a LoRA adapter on the train split of a label file; writes OUT/adapter_model.safetensors,
    adapter_config.json and train_info.json."""
    cfg = cfg or LoraTrainConfig()
    labels = select_labels(read_labels(labels_path), cfg.max_labels, cfg.seed)
    if not labels:
        raise ValueError(f"{labels_path}: no train-split labels")
    t0 = time.perf_counter()
    trainer = LoraTrainer(cfg)
    load_s = time.perf_counter() - t0
    echo(f"model loaded in {load_s:.0f} s; {len(labels)} labels, {sum(p.numel() for p in trainer.params):,} trainable parameters")
    info = trainer.train(labels, echo=echo)
    info.update(load_seconds=round(load_s, 1), labels_file=str(labels_path), pid=os.getpid(), provenance=provenance())
    trainer.save(out, info)
    echo(json.dumps(info))
    return info
