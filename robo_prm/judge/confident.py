"""`ConfidentJudge`: the one place where a model's raw answer becomes a Judgement.

Every backend goes through it: a missing answer, a backend exception or a backend past its
deadline (`JudgeDeadline`) → the rules judgement (Judgement.fallback=True); confidence below the
threshold → what `JudgeConfig.fallback` says (default milestone_band: at any confidence the LLM's score is kept within
the stage the task's milestones place the state in, `milestone_band`, and 1.0 at success — only an answer with no usable score gets the rules;
milestones_only: the rules only where they know more than success, `rules_informed`; elsewhere the LLM's own score
stands, fallback=False; reader / reader_blend:
the progress reader, a second opinion that reads the task text, answers or shares it — not a fallback). Fallbacks
are counted by cause in `stats()` (fallback_low_confidence, fallback_error, fallback_deadline).
A failing backend logs one warning per outage (`OutageLog`).
Hazards are merged here as `hazards_from` says (llm / rules / union); the hazards the model would be asked go to
the hazard reader when the judge has one (`hazard_answerer: reader`, one small pass for all of them); every backend's reason is
cleaned here (`parse.clean_reason`).
"""
from __future__ import annotations

import dataclasses
import logging
import time
from collections import OrderedDict
from typing import Any, Callable, Sequence

from robo_prm.judge.backends.rules import RulesJudge
from robo_prm.judge.base import Backend, JudgeDeadline, Scored
from robo_prm.judge.config import JudgeConfig
from robo_prm.judge.faithfulness import drop_contradictions
from robo_prm.judge.outage import OutageLog
from robo_prm.judge.parse import clean_reason
from robo_prm.judge.scoring import summarize
from robo_prm.types import HazardReport, Judgement, SceneDescription, TaskText

log = logging.getLogger(__name__)
CAUSES = ("error", "deadline", "low_confidence")  # why a scene got the rules judgement


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


def rules_informed(scene: SceneDescription) -> bool:
    """Whether the rules know more than "not yet successful" about this state: the task has milestones,
    or its rules progress is above 0 (shaped by a `success_distance`, or a success). A text-only task's
    rules say 0 at every state before success: falling back to them mid-episode destroys the LLM's ordering."""
    if scene.milestones_total:
        return True
    p = scene.rule_progress
    return p is not None and p == p and p > 0.0


def milestone_band(scene: SceneDescription) -> tuple[float, float]:
    """The progress the rules allow this state: 1.0 at success; with milestones, the stage between the last one
    reached and the next, [k, k + 1] / (n + 1) of n milestones (the rules' own scale, `Task._rule_progress`);
    else [0, 1]. The milestones know which stage a state is in; within it only the LLM orders states."""
    p = scene.rule_progress
    if p is not None and p == p and p >= 1.0:
        return 1.0, 1.0
    n, k = scene.milestones_total, scene.milestones_reached
    if n and k is not None:
        k = min(max(k, 0), n)
        return k / (n + 1), (k + 1) / (n + 1)
    return 0.0, 1.0


def within_band(progress: float, scene: SceneDescription) -> float:
    lo, hi = milestone_band(scene)
    return min(max(progress, lo), hi)


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
                 calibrator: Callable[[float], float] | None = None, reader=None, second_opinion=None):
        self.backend = backend
        self.reader = reader  # a HazardReader answers the asked hazards instead of the backend (hazard_answerer reader)
        # a ProgressReader answers (fallback reader) or shares (reader_blend) an unconfident score instead of the rules
        self.second_opinion = second_opinion
        self._second = 0  # judgements whose score the progress reader gave or shared
        self._second_down = self._second_failures = 0
        self.cfg = cfg or JudgeConfig()
        self.rules = RulesJudge()
        self.calibrator = calibrator
        self.name = backend.name if backend is not None else self.rules.name
        self._calls = self._fallbacks = self._hits = self._guarded = 0
        self._banded = 0  # scores milestone_band moved into their stage
        self._by_cause = dict.fromkeys(CAUSES, 0)
        self.outage = OutageLog(self.name, getattr(backend, "where", None))
        self._answers: OrderedDict[tuple, Scored] = OrderedDict()  # ((task key, hazards asked), scene text) → raw answer
        self._latency_ms = 0.0
        self._reader_down = self._reader_failures = 0  # failed reader calls: of the outage in progress, in all

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
        read = self._read_hazards(task, scenes, asked)
        scored, cause = self._score_cached(task, scenes, [] if read is not None else asked, explain)
        per_scene_ms = (time.perf_counter() - t0) * 1e3 / len(scenes)
        out = []
        for i, (s, r, scene) in enumerate(zip(scored, rules, scenes)):
            if s is None:  # only when the backend call failed: `cause` says how
                fb = self._fallback(r, mode, per_scene_ms, None, cause or "error")
                if read is not None:  # the reader still answered: its hazards stand beside the simulator's
                    fb = dataclasses.replace(fb, hazards=merge_hazards(self._reports(task, read[i]), r.hazards, mode))
                out.append(fb)
                self._by_cause[cause or "error"] += 1
            else:
                if read is not None:
                    s = dataclasses.replace(s, hazards=read[i])
                out.append(self._one(task, s, r, mode, scene, rescale_hazards=read is None))
                self._by_cause["low_confidence"] += out[-1].fallback
        self._count(out)
        return out

    def _read_hazards(self, task: TaskText, scenes: list[SceneDescription], asked: list[str]) -> list[dict] | None:
        """The hazard reader's P(present) per scene for the asked hazards; None when there is no reader, nothing
        to ask, or the reader failed (logged once per outage: the backend is asked instead)."""
        if self.reader is None or not asked:
            return None
        texts = {h.name: h.text for h in task.hazards}
        try:
            p = self.reader.probabilities([texts[n] for n in asked], [s.text for s in scenes], edges=task.edges,
                                           table=task.table)
        except Exception as exc:  # never stop training over the reader: the backend answers instead
            if not self._reader_down:  # one warning per outage, as for the backend
                log.warning("hazard reader failed (%s: %s); the judge backend answers the hazards until it recovers",
                            type(exc).__name__, exc)
            self._reader_down += 1
            self._reader_failures += 1
            return None
        self._reader_down = 0
        return [dict(zip(asked, map(float, row))) for row in p]

    @staticmethod
    def _reports(task: TaskText, hazards: dict[str, float]) -> tuple[HazardReport, ...]:
        return tuple(HazardReport(n, task.severity(n), float(p)) for n, p in hazards.items())

    def _score_cached(self, task: TaskText, scenes: list[SceneDescription], asked: list[str],
                      explain: bool) -> tuple[list[Scored | None], str | None]:
        """The backend's raw answers, reusing earlier answers for the same (task, scene text), and
        the cause ("error", "deadline") when the backend call failed (its scenes are None then).

        A model sees only the task and the scene text, so equal text means an equal answer; the
        confidence test and the rules fallback still run per scene (rules read the exact state)."""
        # the hazards asked are part of the key: an answer given while the reader answered them carries none
        key = (task.key, tuple(asked))
        out: list[Scored | None] = [None] * len(scenes)
        todo: list[int] = []
        # a backend that reads more than the text (the CLIP judge reads the frame) gets every scene: no text reuse
        by_text_ok = getattr(self.backend, "reads_text_only", True)
        for i, scene in enumerate(scenes if by_text_ok else ()):
            hit = self._answers.get((key, scene.text))
            if hit is not None and (hit.reason is not None or not explain):
                self._answers.move_to_end((key, scene.text))
                self._hits += 1
                out[i] = dataclasses.replace(hit, latency_ms=0.0, reason=hit.reason if explain else None)
            else:
                todo.append(i)
        if not by_text_ok:
            todo = list(range(len(scenes)))
        if not todo:
            return out, None
        unique = sorted({scenes[i].text: i for i in todo[::-1]}.values()) if by_text_ok else todo  # equal texts once
        cause = None
        try:
            fresh = list(self.backend.score(task, [scenes[i] for i in unique], hazards=asked, explain=explain))
            if len(fresh) != len(unique) or not all(isinstance(s, Scored) for s in fresh):
                raise RuntimeError(f"backend returned {len(fresh)} answers for {len(unique)} scenes")
        except JudgeDeadline as exc:  # keep what was finished in time; the rest get rules
            fresh, cause = [s for s in exc.answered[:len(unique)] if isinstance(s, Scored)], "deadline"
            self.outage.failed(exc, len(unique) - len(fresh))
        except Exception as exc:  # never stop training over the judge: rules answer instead
            fresh, cause = [], "error"
            self.outage.failed(exc, len(unique))
        else:
            self.outage.ok()
        if not by_text_ok:
            out[:len(fresh)] = fresh
            return out, cause
        by_text = {scenes[i].text: s for i, s in zip(unique, fresh)}
        for i in todo:
            out[i] = by_text.get(scenes[i].text)
        for text, s in by_text.items():
            if self.cfg.cache_size > 0:
                self._answers[(key, text)] = s
                if len(self._answers) > self.cfg.cache_size:
                    self._answers.popitem(last=False)
        return out, cause

    def _one(self, task: TaskText, s: Scored, rules: Judgement, mode: str, scene: SceneDescription,
             rescale_hazards: bool = True) -> Judgement:
        if s.digits is None:
            progress, conf = 0.0, 0.0
        else:
            progress, conf = summarize(s.digits, s.digit_mass)
            if s.progress is not None:
                progress = min(max(float(s.progress), 0.0), 1.0) if s.progress == s.progress else progress
        if self.calibrator is not None:
            progress = self.calibrator(progress)
        rescale = getattr(self.calibrator, "hazard", None)  # per-kind thresholds fitted with the calibrator
        if rescale is not None and s.hazards and rescale_hazards:  # the reader's threshold is in its own bias
            texts = {h.name: h.text for h in task.hazards}
            s = dataclasses.replace(s, hazards={n: rescale(n, p, texts.get(n, "")) for n, p in s.hazards.items()})
        llm_hazards = self._reports(task, s.hazards)
        reason = clean_reason(s.reason)
        if self.cfg.reason_guard and reason:
            reason, dropped = drop_contradictions(reason, scene.facts, scene.text)
            self._guarded += bool(dropped)
        policy, threshold = self.cfg.fallback, self.cfg.confidence_threshold
        other = self._second_opinion(task, scene) if conf < threshold and policy in ("reader", "reader_blend") else None
        if other is not None:
            w = conf / threshold if policy == "reader_blend" else 0.0
            self._second += 1
            return Judgement(progress=w * progress + (1.0 - w) * other, confidence=conf,
                             hazards=merge_hazards(llm_hazards, rules.hazards, mode), reason=reason,
                             backend=f"{self.name}+progress_reader", latency_ms=s.latency_ms)
        unbanded = None
        if policy == "milestone_band" and s.digits is not None:  # at any confidence: within the milestones' stage
            unbanded, progress = progress, within_band(progress, scene)
            self._banded += progress != unbanded
        elif conf < threshold and (policy in ("rules", "reader", "reader_blend")  # reader: only when it failed
                                   or policy == "milestone_band"  # no usable answer to band: the rules
                                   or (policy != "none" and rules_informed(scene))):
            fb = self._fallback(rules, mode, s.latency_ms, (conf, llm_hazards, reason))
            if policy == "blend_by_confidence":  # the LLM keeps a share c/threshold of the score
                w = conf / threshold
                fb = dataclasses.replace(fb, progress=w * progress + (1.0 - w) * fb.progress)
            return fb
        return Judgement(progress=progress, confidence=conf, hazards=merge_hazards(llm_hazards, rules.hazards, mode),
                         reason=reason, backend=self.name, latency_ms=s.latency_ms, unbanded=unbanded)

    def _second_opinion(self, task: TaskText, scene: SceneDescription) -> float | None:
        """The progress reader's score, or None (no reader, or it failed: logged once per outage, the rules answer)."""
        if self.second_opinion is None:
            return None
        try:
            p = float(self.second_opinion.progress(task, [scene.text])[0])
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"progress {p} outside [0, 1]")
        except Exception as exc:  # never stop training over the second opinion
            if not self._second_down:
                log.warning("progress reader failed (%s: %s); the rules answer unconfident scores until it recovers",
                            type(exc).__name__, exc)
            self._second_down += 1
            self._second_failures += 1
            return None
        self._second_down = 0
        return p

    def _fallback(self, rules: Judgement, mode: str, latency_ms: float,
                  llm: tuple[float, tuple[HazardReport, ...], str | None] | None, cause: str = "low_confidence") -> Judgement:
        # The LLM's hazard answers stay usable when only its score was unsure; a failed
        # backend has none, so the simulator's hazards stand in even in "llm" mode.
        llm_hazards = llm[1] if llm is not None else None
        hazards = rules.hazards if llm_hazards is None else merge_hazards(llm_hazards, rules.hazards, mode)
        reason = rules.reason  # set only when explain=True
        if reason is not None:
            why = (f"LLM confidence {llm[0]:.2f}" if llm is not None
                   else "LLM past its deadline" if cause == "deadline" else "LLM unavailable")
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
        """calls (scenes judged), fallbacks (scenes the rules answered) = fallback_error +
        fallback_deadline + fallback_low_confidence, errors (failed backend calls, deadlines
        included), outages (runs of failed calls; one warning each), answer_cache_hits,
        fallback_rate, mean latency_ms per scene, reasons_guarded (reasons that lost a sentence contradicting
        the scene), hazard_reader_failures (reader calls that failed; the backend answered those hazards),
        second_opinions / second_opinion_rate (unconfident scores the progress reader gave or shared: not fallbacks,
        the rules did not answer), progress_reader_failures (the rules answered those), banded / banded_rate (scores
        `milestone_band` moved into the stage the milestones place the state in: not fallbacks, the LLM's score is
        kept at the stage's nearer end)."""
        return {"calls": self._calls, "fallbacks": self._fallbacks,
                **{f"fallback_{c}": n for c, n in self._by_cause.items()},
                "errors": self.outage.failures, "outages": self.outage.outages, "answer_cache_hits": self._hits,
                "reasons_guarded": self._guarded, "hazard_reader_failures": self._reader_failures,
                "second_opinions": self._second, "progress_reader_failures": self._second_failures,
                "second_opinion_rate": self._second / self._calls if self._calls else 0.0,
                "banded": self._banded, "banded_rate": self._banded / self._calls if self._calls else 0.0,
                "fallback_rate": self._fallbacks / self._calls if self._calls else 0.0,
                "mean_latency_ms": self._latency_ms / self._calls if self._calls else 0.0}

    def close(self) -> None:
        self.outage.close()
        if self.backend is not None:
            self.backend.close()
