"""`ConfidentJudge`: the one place where a model's raw answer becomes a Judgement.

Every backend goes through it: confidence below the threshold, a missing answer, or a
backend exception → the rules judgement (Judgement.fallback=True), counted in `stats()`.
Hazards are merged here as `hazards_from` says (llm / rules / union).
"""
from __future__ import annotations

import dataclasses
import logging
import time
from collections import OrderedDict
from typing import Any, Callable, Sequence

from robo_prm.judge.backends.rules import RulesJudge
from robo_prm.judge.base import Backend, Scored
from robo_prm.judge.config import JudgeConfig
from robo_prm.judge.parse import tidy_reason
from robo_prm.judge.scoring import summarize
from robo_prm.types import HazardReport, Judgement, SceneDescription, TaskText

log = logging.getLogger(__name__)


def hazards_to_ask(task: TaskText, mode: str) -> list[str]:
    """Which of the task's hazards the model is asked about: all ('llm', 'union'), none
    ('rules'), or only those the simulator cannot check ('auto', the default: an LLM pass per
    hazard costs as much as the score itself, and for checked hazards the simulator is ground truth)."""
    hazards = task.hazards
    if mode == "rules":
        return []
    if mode == "auto":
        return [h.name for h in hazards if not h.checked]
    return [h.name for h in hazards]


def merge_hazards(llm: Sequence[HazardReport], rules: Sequence[HazardReport], mode: str) -> tuple[HazardReport, ...]:
    if mode == "llm":
        return tuple(llm)  # "auto" merges like "union": the LLM asked only what rules cannot see
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
        self._calls = self._fallbacks = self._errors = self._hits = 0
        self._answers: OrderedDict[tuple, Scored] = OrderedDict()  # (task key, scene text) → raw answer
        self._latency_ms = 0.0

    def judge(self, task: TaskText, scenes: Sequence[SceneDescription], explain: bool = False) -> list[Judgement]:
        scenes = list(scenes)
        if not scenes:
            return []
        rules = self.rules.judge(task, scenes, explain=explain)
        if self.backend is None:
            self._count(rules)
            return rules
        mode = self.cfg.hazards_from
        asked = hazards_to_ask(task, mode)
        t0 = time.perf_counter()
        scored = self._score_cached(task, scenes, asked, explain)
        per_scene_ms = (time.perf_counter() - t0) * 1e3 / len(scenes)
        out = [self._one(task, s, r, mode) if s is not None else self._fallback(r, mode, per_scene_ms, None)
               for s, r in zip(scored, rules)]
        self._count(out)
        return out

    def _score_cached(self, task: TaskText, scenes: list[SceneDescription], asked: list[str], explain: bool) -> list[Scored | None]:
        """The backend's raw answers, reusing earlier answers for the same (task, scene text).

        A model sees only the task and the scene text, so equal text means an equal answer; the
        confidence test and the rules fallback still run per scene (rules read the exact state)."""
        key = task.key
        out: list[Scored | None] = [None] * len(scenes)
        todo: list[int] = []
        for i, scene in enumerate(scenes):
            hit = self._answers.get((key, scene.text))
            if hit is not None and (hit.reason is not None or not explain):
                self._answers.move_to_end((key, scene.text))
                self._hits += 1
                out[i] = dataclasses.replace(hit, latency_ms=0.0, reason=hit.reason if explain else None)
            else:
                todo.append(i)
        if not todo:
            return out
        try:
            fresh = list(self.backend.score(task, [scenes[i] for i in todo], hazards=asked, explain=explain))
            if len(fresh) != len(todo):
                raise RuntimeError(f"backend returned {len(fresh)} answers for {len(todo)} scenes")
        except Exception as exc:  # never stop training over the judge: rules answer instead
            self._errors += 1
            log.warning("judge backend %s failed (%s: %s); using the rules judgement for %d scene(s)",
                        self.name, type(exc).__name__, exc, len(todo))
            return out
        for i, s in zip(todo, fresh):
            out[i] = s
            if self.cfg.cache_size > 0:
                self._answers[(key, scenes[i].text)] = s
                if len(self._answers) > self.cfg.cache_size:
                    self._answers.popitem(last=False)
        return out

    def _one(self, task: TaskText, s: Scored, rules: Judgement, mode: str) -> Judgement:
        if s.digits is None:
            progress, conf = 0.0, 0.0
        else:
            progress, conf = summarize(s.digits, s.digit_mass)
            if s.progress is not None:
                progress = min(max(float(s.progress), 0.0), 1.0) if s.progress == s.progress else progress
        if self.calibrator is not None:
            progress = self.calibrator(progress)
        llm_hazards = tuple(HazardReport(n, task.severity(n), float(p)) for n, p in s.hazards.items())
        reason = tidy_reason(s.reason)
        if conf < self.cfg.confidence_threshold:
            return self._fallback(rules, mode, s.latency_ms, (conf, llm_hazards, reason))
        return Judgement(progress=progress, confidence=conf, hazards=merge_hazards(llm_hazards, rules.hazards, mode),
                         reason=reason, backend=self.name, latency_ms=s.latency_ms)

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
        return {"calls": self._calls, "fallbacks": self._fallbacks, "errors": self._errors, "answer_cache_hits": self._hits,
                "fallback_rate": self._fallbacks / self._calls if self._calls else 0.0,
                "mean_latency_ms": self._latency_ms / self._calls if self._calls else 0.0}

    def close(self) -> None:
        if self.backend is not None:
            self.backend.close()
