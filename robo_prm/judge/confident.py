"""`ConfidentJudge`: the one place where a model's raw answer becomes a Judgement.

Every backend goes through it: confidence below the threshold, a missing answer, or a
backend exception → the rules judgement (Judgement.fallback=True), counted in `stats()`.
Hazards are merged here as `hazards_from` says (llm / rules / union).
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Sequence

from robo_prm.judge.backends.rules import RulesJudge
from robo_prm.judge.base import Backend, Scored
from robo_prm.judge.config import JudgeConfig
from robo_prm.judge.prompt import severity, task_spec
from robo_prm.judge.scoring import summarize
from robo_prm.types import HazardReport, Judgement, SceneDescription

log = logging.getLogger(__name__)


def merge_hazards(llm: Sequence[HazardReport], rules: Sequence[HazardReport], mode: str) -> tuple[HazardReport, ...]:
    if mode == "llm":
        return tuple(llm)
    if mode == "rules":
        return tuple(rules)
    best: dict[str, HazardReport] = {h.name: h for h in llm}
    for h in rules:  # union: the simulator's ground truth wins where it sees the hazard
        if h.name not in best or h.probability > best[h.name].probability:
            best[h.name] = h
    return tuple(best.values())


class ConfidentJudge:
    """A `Judge` over a `Backend` (or over rules alone when backend is None)."""

    def __init__(self, backend: Backend | None, cfg: JudgeConfig | None = None,
                 calibrator: Callable[[float], float] | None = None):
        self.backend = backend
        self.cfg = cfg or JudgeConfig()
        self.rules = RulesJudge()
        self.calibrator = calibrator
        self.name = backend.name if backend is not None else self.rules.name
        self._calls = self._fallbacks = self._errors = 0
        self._latency_ms = 0.0

    def judge(self, task: Any, scenes: Sequence[SceneDescription], explain: bool = False) -> list[Judgement]:
        scenes = list(scenes)
        if not scenes:
            return []
        rules = self.rules.judge(task, scenes, explain=explain)
        if self.backend is None:
            self._count(rules)
            return rules
        mode = self.cfg.hazards_from
        ask_hazards = mode != "rules" and bool(task_spec(task).hazards)
        t0 = time.perf_counter()
        try:
            scored: list[Scored | None] = list(self.backend.score(task, scenes, hazards=ask_hazards, explain=explain))
            if len(scored) != len(scenes):
                raise RuntimeError(f"backend returned {len(scored)} answers for {len(scenes)} scenes")
        except Exception as exc:  # never stop training over the judge: rules answer instead
            self._errors += 1
            log.warning("judge backend %s failed (%s: %s); using the rules judgement for %d scene(s)",
                        self.name, type(exc).__name__, exc, len(scenes))
            scored = [None] * len(scenes)
        per_scene_ms = (time.perf_counter() - t0) * 1e3 / len(scenes)
        out = [self._one(task, s, r, mode) if s is not None else self._fallback(r, mode, per_scene_ms, None)
               for s, r in zip(scored, rules)]
        self._count(out)
        return out

    def _one(self, task: Any, s: Scored, rules: Judgement, mode: str) -> Judgement:
        if s.digits is None:
            progress, conf = 0.0, 0.0
        else:
            progress, conf = summarize(s.digits, s.digit_mass)
            if s.progress is not None:
                progress = min(max(float(s.progress), 0.0), 1.0) if s.progress == s.progress else progress
        if self.calibrator is not None:
            progress = self.calibrator(progress)
        llm_hazards = tuple(HazardReport(n, severity(task, n), float(p)) for n, p in s.hazards.items())
        if conf < self.cfg.confidence_threshold:
            return self._fallback(rules, mode, s.latency_ms, (conf, llm_hazards, s.reason))
        return Judgement(progress=progress, confidence=conf, hazards=merge_hazards(llm_hazards, rules.hazards, mode),
                         reason=s.reason, backend=self.name, latency_ms=s.latency_ms)

    def _fallback(self, rules: Judgement, mode: str, latency_ms: float,
                  llm: tuple[float, tuple[HazardReport, ...], str | None] | None) -> Judgement:
        # The LLM's hazard answers stay usable when only its score was unsure; a failed
        # backend has none, so the simulator's hazards stand in even in "llm" mode.
        llm_hazards = llm[1] if llm is not None else None
        hazards = rules.hazards if llm_hazards is None else merge_hazards(llm_hazards, rules.hazards, mode)
        reason = rules.reason  # set only when explain=True
        if reason is not None:
            why = f"LLM confidence {llm[0]:.2f}" if llm is not None else "LLM unavailable"
            reason = f"[{why}; rules fallback] {reason}"
            if llm is not None and llm[2]:
                reason += f" LLM said: {llm[2]}"
        return Judgement(progress=rules.progress, confidence=rules.confidence, hazards=hazards, reason=reason,
                         backend=self.name, latency_ms=latency_ms + rules.latency_ms, fallback=True)

    def _count(self, judgements: Sequence[Judgement]) -> None:
        self._calls += len(judgements)
        self._fallbacks += sum(j.fallback for j in judgements)
        self._latency_ms += sum(j.latency_ms for j in judgements)

    def stats(self) -> dict[str, float]:
        """calls (scenes judged), fallbacks, errors (failed backend batches), mean latency_ms per scene."""
        return {"calls": self._calls, "fallbacks": self._fallbacks, "errors": self._errors,
                "fallback_rate": self._fallbacks / self._calls if self._calls else 0.0,
                "mean_latency_ms": self._latency_ms / self._calls if self._calls else 0.0}

    def close(self) -> None:
        if self.backend is not None:
            self.backend.close()
