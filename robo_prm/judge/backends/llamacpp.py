"""llama.cpp backend (the default): the bundled SmolLM2 GGUF or any GGUF file.

Per task the shared prefix (system + task text) is evaluated once; per scene only the
scene tokens and the short tails are evaluated. Within one task the prefix's KV cells stay
in the context and are kept by rewinding `n_tokens` (llama.cpp drops the cells past it on
the next eval – the same mechanism its own prompt cache uses). When another task was
evaluated in between, the task's `save_state()` snapshot is restored with `load_state()`.
Rewinding instead of `load_state()` on every scene saves copying the KV state each time
and gives the same logits as evaluating the whole prompt (tested to 1e-4). Scene tokens
the previous scene shared ("The gripper is …") and the scene itself between the score
pass and the hazard questions are reused the same way (longest common token prefix).

Several prompts at once (`batch_seqs` > 1, the default 8; more than one prompt in a call): they are
scored side by side in one multi-sequence decode that shares the prefix's KV cells and the prompts'
common tokens (`llama_batch.py`); the answers are those of the one-at-a-time path up to the last bits
llama.cpp's kernels leave (see there). Reasons are generated one scene at a time either way.

Bounds: no clock. A call's work is fixed by token counts: per scene one evaluation of at most
`n_ctx` prompt tokens for the score and one per hazard asked, plus at most `reason_tokens` greedy
steps when `explain` is set; nothing waits on I/O. (A deadline checked between scenes would make
which scenes fall back depend on the machine's load, so rewards would differ run to run.)
"""
from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from robo_prm.judge.backends.llama_batch import TokenTree, context_params, decode_tree
from robo_prm.judge.base import Scored
from robo_prm.judge.config import JudgeConfig
from robo_prm.judge.copy_reason import copied_reason, log_softmax, reason_units
from robo_prm.judge.prompt import TaskPrompt, build_prompt, chatml, jinja_renderer, scene_text
from robo_prm.judge.scoring import digit_ids, digit_probs, expected_digit, yes_no_ids, yes_probability
from robo_prm.types import SceneDescription, TaskText

log = logging.getLogger(__name__)


def _params_without_extra_buffers(orig):
    def params():
        p = orig()
        p.use_extra_bufts = False
        return p

    params.robo_prm_wrapped = True
    return params


@contextlib.contextmanager
def extra_buffers(enabled: bool):
    """Construct `Llama` models with llama.cpp's extra weight buffers (AMX/repack) on or off.

    llama-cpp-python has no argument for `use_extra_bufts`, so the default-params factory it
    calls is wrapped while the model loads. Off is our default: on CPUs that advertise AMX
    where the OS/VM does not grant it, every multi-token decode segfaults in
    `ggml_backend_amx_mul_mat` (seen on this project's machines with 0.3.36).
    """
    import llama_cpp.llama_cpp as lc

    orig = lc.llama_model_default_params
    if enabled or getattr(orig, "robo_prm_wrapped", False):
        yield
        return
    lc.llama_model_default_params = _params_without_extra_buffers(orig)
    try:
        yield
    finally:
        lc.llama_model_default_params = orig


def disable_extra_buffers() -> None:
    """Process-wide `extra_buffers(False)`, e.g. before running `llama_cpp.server` in-process."""
    import llama_cpp.llama_cpp as lc

    if not getattr(lc.llama_model_default_params, "robo_prm_wrapped", False):
        lc.llama_model_default_params = _params_without_extra_buffers(lc.llama_model_default_params)


@dataclass
class _TaskTokens:
    prompt: TaskPrompt
    prefix: list[int]
    score_tail: list[int]
    digits: list[int]
    hazards: dict[str, tuple[list[int], list[int], list[int]]]  # name → (tail, yes ids, no ids)
    state: Any = None  # LlamaState after the prefix
    reason_tails: dict[int, list[int]] = field(default_factory=dict)


class LlamaCppBackend:
    name = "llamacpp"

    def __init__(self, cfg: JudgeConfig):
        from llama_cpp import Llama

        from robo_prm.judge.weights import bundled_model_path

        self.cfg = cfg
        self.model_path = cfg.model or bundled_model_path()
        self.where = self.model_path
        # logits_all=False: only the last position's logits are computed, which is all we read.
        # batch_seqs > 1: sequences 1 … batch_seqs score prompts side by side (llama_batch.py).
        self._batch_seqs = cfg.batch_seqs if cfg.prefix_reuse and cfg.batch_seqs > 1 else 1
        with extra_buffers(cfg.extra_buffers), context_params(self._batch_seqs + 1 if self._batch_seqs > 1 else 1):
            self.llm = Llama(model_path=self.model_path, n_ctx=cfg.n_ctx, n_threads=cfg.n_threads,
                             n_threads_batch=cfg.n_threads, seed=cfg.seed, logits_all=False, verbose=False)
        self._n_vocab = self.llm.n_vocab()
        self._eos = self.llm.token_eos()
        template = self.llm.metadata.get("tokenizer.chat_template")
        bos = self._piece(self.llm.token_bos())
        self.render = jinja_renderer(template, bos_token=bos, eos_token=self._piece(self._eos)) if template else chatml
        # Recurrent models cannot drop KV cells: there every scene restores the saved state (and nothing is batched).
        self._can_rewind = not (getattr(self.llm, "_is_recurrent", False) or getattr(self.llm, "_is_hybrid", False))
        if not self._can_rewind:
            self._batch_seqs = 1
        self._tasks: dict[tuple, _TaskTokens] = {}
        self.score_head = self._load_score_head(cfg.score_head)

    def _load_score_head(self, folder: str | None):
        """The trained head that reads the score from the hidden state (judge.score_head), bound to this model."""
        if not folder or folder == "none":
            return None
        from pathlib import Path

        from robo_prm.judge.score_head import ScoreHead

        try:
            head = ScoreHead.load(folder).bind_to_model(self.model_path)
        except (FileNotFoundError, ValueError) as exc:
            raise ValueError(f"judge.score_head: {exc}") from None
        if head.info.get("model") not in (None, Path(self.model_path).name):
            log.warning("judge.score_head %s was fitted to %s, the judge model is %s: its scores mean little here",
                        folder, head.info.get("model"), Path(self.model_path).name)
        return head

    def _digits(self, logits: np.ndarray, tt: _TaskTokens) -> tuple[np.ndarray, float]:
        """(distribution over 0–9, share of the mass on digits) at the score position: the score head's answer
        where there is one (its reading of the hidden state mixed with the next-token digits; it always answers
        with a digit), else the next-token digits."""
        head = self.score_head
        if head is None:
            return digit_probs(logits, tt.digits)
        llm = digit_probs(logits, tt.digits)[0] if head.llm_share > 0 else None  # a full-vocabulary softmax: only if mixed
        return head.digits(logits, llm), 1.0

    # ---- tokens --------------------------------------------------------------------
    def _piece(self, token: int) -> str:
        try:
            return self.llm.detokenize([token], special=True).decode("utf-8", errors="ignore") if token >= 0 else ""
        except TypeError:  # older llama-cpp-python without `special`
            return self.llm.detokenize([token]).decode("utf-8", errors="ignore")

    def tokenize(self, text: str, bos: bool = False) -> list[int]:
        return self.llm.tokenize(text.encode("utf-8"), add_bos=bos, special=True)

    def _task(self, task: TaskText) -> _TaskTokens:
        key = task.key
        tt = self._tasks.get(key)
        if tt is None:
            prompt = build_prompt(task, self.render)
            score_tail, digits = digit_ids(self.tokenize, prompt.score_tail)
            hazards = {name: yes_no_ids(self.tokenize, tail) for name, tail in prompt.hazard_tails.items()}
            tt = self._tasks[key] = _TaskTokens(prompt, self.tokenize(prompt.prefix, bos=True), score_tail, digits, hazards)
        return tt

    # ---- evaluation ----------------------------------------------------------------
    def _logits(self) -> np.ndarray:
        """Next-token logits of the last evaluated position (no logits_all needed)."""
        ptr = self.llm._ctx.get_logits_ith(-1)
        return np.ctypeslib.as_array(ptr, shape=(self._n_vocab,)).astype(np.float64)

    def _eval(self, tt: _TaskTokens, tokens: list[int]) -> np.ndarray:
        """Logits after `tokens` (= task prefix + …), evaluating only what the context lacks."""
        llm = self.llm
        if not self.cfg.prefix_reuse:  # the baseline: every prompt from scratch
            llm.reset()
            llm.eval(tokens)
            return self._logits()
        self._seat(tt, tokens)
        llm.eval(tokens[llm.n_tokens:])
        return self._logits()

    def _seat(self, tt: _TaskTokens, tokens: list[int]) -> None:
        """Leave in the context the longest start of `tokens` it can keep (the task prefix at least; at
        least one token of `tokens` left to evaluate), restoring or evaluating the prefix if needed."""
        llm, n_prefix = self.llm, len(tt.prefix)
        have = llm.input_ids[: llm.n_tokens]
        m = min(len(have), len(tokens) - 1)  # at least one token is evaluated, to get its logits
        same = np.flatnonzero(have[:m] != np.asarray(tokens[:m], dtype=have.dtype))
        common = int(same[0]) if same.size else m
        if self._can_rewind and common >= n_prefix:
            llm.n_tokens = common  # the next eval drops the KV cells past `common`
        elif tt.state is not None:
            llm.load_state(tt.state)
        else:
            llm.reset()
            llm.eval(tt.prefix)
            tt.state = llm.save_state()
            # save_state copies one logits row per prefix token (~50 MB for 250 tokens), rows
            # nothing reads without logits_all; one row broadcasts back in load_state.
            tt.state.scores = tt.state.scores[-1:].copy()

    def _eval_many(self, tt: _TaskTokens, prompts: list[list[int]]) -> list[np.ndarray]:
        """Logits after each prompt (each = task prefix + …): `batch_seqs` prompts per multi-sequence decode."""
        import llama_cpp

        n_prefix = len(tt.prefix)
        self._seat(tt, tt.prefix + [-1])  # the context holds exactly the prefix
        llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(self.llm._ctx.ctx), -1, n_prefix, -1)
        self.llm.n_tokens = n_prefix
        out: list[np.ndarray] = []
        for i in range(0, len(prompts), self._batch_seqs):
            tree = TokenTree.build([p[n_prefix:] for p in prompts[i:i + self._batch_seqs]])
            out += decode_tree(self.llm, n_prefix, tree, self._n_vocab)
        return out

    def score(self, task: TaskText, scenes: Sequence[SceneDescription], hazards: Sequence[str], explain: bool) -> list[Scored]:
        tt = self._task(task)
        if self._batch_seqs > 1 and len(scenes) * (1 + len(hazards)) > 1:
            return self._score_batched(tt, scenes, hazards, explain)
        out = []
        for scene in scenes:
            t0 = time.perf_counter()
            head = tt.prefix + self.tokenize(scene_text(scene))
            digits, mass = self._digits(self._eval(tt, head + tt.score_tail), tt)
            probs = {}
            for name in hazards:  # each question continues from the scene's KV cells
                tail, yes, no = tt.hazards[name]
                probs[name] = yes_probability(self._eval(tt, head + tail), yes, no)
            reason = self._reason(tt, head, digits, scene.text) if explain else None
            out.append(Scored(digits, mass, probs, reason, (time.perf_counter() - t0) * 1e3))
        return out

    def score_logits(self, task: TaskText, scenes: Sequence[SceneDescription],
                     batched: bool = False) -> tuple[_TaskTokens, list[np.ndarray]]:
        """(the task's tokens, the next-token logits at each scene's score position): what the score head reads.
        `batched`: in multi-sequence batches, as the judge reads several scenes (slightly other 8-bit rounding)."""
        tt = self._task(task)
        prompts = [tt.prefix + self.tokenize(scene_text(s)) + tt.score_tail for s in scenes]
        if batched:
            return tt, self._eval_many(tt, prompts)
        return tt, [self._eval(tt, p) for p in prompts]

    def _score_batched(self, tt: _TaskTokens, scenes: Sequence[SceneDescription], hazards: Sequence[str],
                       explain: bool) -> list[Scored]:
        """The same answers as the one-at-a-time loop, from multi-sequence batches (llama_batch.py)."""
        t0 = time.perf_counter()
        heads = [tt.prefix + self.tokenize(scene_text(scene)) for scene in scenes]
        prompts = []
        for head in heads:  # a scene's prompts side by side: they share its tokens in the tree
            prompts.append(head + tt.score_tail)
            prompts += [head + tt.hazards[name][0] for name in hazards]
        logits = iter(self._eval_many(tt, prompts))
        out = []
        for head in heads:
            digits, mass = self._digits(next(logits), tt)
            probs = {}
            for name in hazards:
                _, yes, no = tt.hazards[name]
                probs[name] = yes_probability(next(logits), yes, no)
            out.append(Scored(digits, mass, probs))
        for head, s, scene in zip(heads, out, scenes):
            s.reason = self._reason(tt, head, s.digits, scene.text) if explain else None
        ms = (time.perf_counter() - t0) * 1e3 / max(len(scenes), 1)
        for s in out:
            s.latency_ms = ms
        return out

    def _reason(self, tt: _TaskTokens, head: list[int], digits: np.ndarray, scene: str) -> str:
        """The reason after 'Score: <expected digit>\nReason:' (raw text; ConfidentJudge cleans it): with
        reason_mode copy the scene's sentences the model finds likeliest there (copy_reason.py), else greedy text
        up to reason_tokens or a newline."""
        d = expected_digit(digits)
        if d not in tt.reason_tails:
            tt.reason_tails[d] = self.tokenize(tt.prompt.reason_tails[d])
        tokens = head + tt.reason_tails[d]
        logits = self._eval(tt, tokens)
        if self.cfg.reason_mode == "copy":
            units = reason_units(scene)
            conts = [self.tokenize(" " + u) for u in units]
            return copied_reason(units, self._continuations(tt, tokens, logits, conts)) or ""
        pieces: list[int] = []
        for _ in range(min(self.cfg.reason_tokens, self.cfg.n_ctx - len(tokens) - 1)):
            tok = int(np.argmax(logits))
            if tok == self._eos or self._is_eog(tok):
                break
            text = self.llm.detokenize(pieces + [tok]).decode("utf-8", errors="ignore")
            if "\n" in text.lstrip():
                break
            pieces.append(tok)
            self.llm.eval([tok])
            logits = self._logits()
        return self.llm.detokenize(pieces).decode("utf-8", errors="ignore")

    def _continuations(self, tt: _TaskTokens, tokens: list[int], logits: np.ndarray,
                       conts: list[list[int]]) -> list[list[float]]:
        """Each continuation's token log-probabilities after `tokens` (whose next-token `logits` are given and
        which the context holds): side by side in multi-sequence batches, else one token at a time."""
        conts = [c[:max(0, self.cfg.n_ctx - len(tokens) - 1)] for c in conts]
        first = log_softmax(logits)
        out = [[first[c[0]]] if c else [] for c in conts]
        if self._batch_seqs <= 1 or len(tokens) + sum(map(len, conts)) >= self.cfg.n_ctx:  # side by side: one cell each
            for c, lp in zip(conts, out):
                for i in range(1, len(c)):
                    lp.append(log_softmax(self._eval(tt, tokens + c[:i]))[c[i]])
            return out
        import llama_cpp

        llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(self.llm._ctx.ctx), -1, len(tokens), -1)
        longer = [k for k, c in enumerate(conts) if len(c) > 1]
        for i in range(0, len(longer), self._batch_seqs):
            part = longer[i:i + self._batch_seqs]
            tree = TokenTree.build([conts[k][:-1] for k in part])
            nxt: dict[int, list[tuple[int, int]]] = {}  # node → (continuation, the token that follows it there)
            for s, k in enumerate(part, start=1):
                path = sorted((n for n in range(len(tree.tokens)) if s in tree.seqs[n]), key=tree.depth.__getitem__)
                for node, tok in zip(path, conts[k][1:]):
                    nxt.setdefault(node, []).append((k, tok))

            def read(node: int, row: np.ndarray) -> None:
                lsm = log_softmax(row)
                for k, tok in nxt.get(node, ()):
                    out[k].append(lsm[tok])

            decode_tree(self.llm, len(tokens), tree, self._n_vocab, on_node=read)
        return out

    def _is_eog(self, tok: int) -> bool:
        import llama_cpp

        return bool(llama_cpp.llama_vocab_is_eog(self.llm._model.vocab, tok))

    def close(self) -> None:
        llm, self.llm = getattr(self, "llm", None), None
        self._tasks.clear()
        if llm is not None:
            llm.close()
