"""`robo-prm evaluate-judge --task FILE.yaml …`: does a judge read *this* task file?

For each task (a shipped name or any task file, generated ones too):

* successes: the file's `expert:` plan, clean, on seeds from `seed` (episodes that succeed are kept);
* failures: uniform-random actions and a perturbed expert (a random action with probability 0.5, noise 0.1),
  alternating, episodes that do not succeed;
* states described with `StateCaptioner(task, milestone_line=False)` (no milestone count in the text),
  `max_states` evenly spaced per episode;
* hazards: the judge is asked about every hazard of the file as if it had no `check:` (the checks are
  the ground truth it is scored against; they are not shown to it, and the scenes it reads carry no
  simulator hazards, so no fallback can leak them). Only hazards with a check are scored.
* reasons: `reasons` evenly spaced states per episode are judged again with explain=True.

Figures (robo_prm/metrics.py): voc_success, voc_random (mean Spearman ρ of progress vs time),
fallback_rate (share of judgements with Judgement.fallback), hazard_precision / hazard_recall (at
p ≥ 0.5), reason_faithfulness (robo_prm/judge/faithfulness.py), ms_per_judgement (the backend's
wall time per fresh scene, hazard questions included, explain off). None where a figure has no data.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from robo_prm.metrics import auroc, precision_recall_f1, reason_faithfulness, set_confusion, voc
from robo_prm.types import Judgement, SceneDescription, TaskText

KEYS = ("voc_success", "voc_random", "fallback_rate", "hazard_precision", "hazard_recall", "reason_faithfulness",
        "ms_per_judgement")


@dataclass
class TaskEpisode:
    kind: str  # "success" | "random"
    policy: str  # "expert" | "random" | "perturbed"
    scenes: list[SceneDescription]  # as the judge reads them: no simulator hazards
    truth: list[tuple[str, ...]]  # the simulator's hazard checks that hold, per scene


@dataclass
class TaskCase:
    name: str
    source: str
    text: TaskText  # the judge's view: every hazard as if described only in words
    checked: tuple[str, ...]  # hazards with a `check:` (the scored ones)
    episodes: list[TaskEpisode] = field(default_factory=list)


def load_case_task(path: str, text_only: bool = False):
    from robo_prm.envs.task import Task, load_task

    task = load_task(path)
    if text_only:  # what the rules know of a text-only task: success and nothing else
        spec = dataclasses.replace(task.spec, milestones=[], success_distance=None)
        task = Task(spec, source=task.source)
    return task


def _subsample(n: int, k: int) -> list[int]:
    return list(range(n)) if n <= k else sorted(set(np.linspace(0, n - 1, k).round().astype(int).tolist()))


def _episode(env, task, policy, seed: int, max_states: int) -> tuple[bool, list, list]:
    from robo_prm.describe.state_captioner import StateCaptioner
    from robo_prm.envs.rollout import rollout

    states: list = []
    rollout(env, policy, seed, on_step=lambda step: states.append(env.scene_state))
    cap = StateCaptioner(task, milestone_line=False)
    described = [cap(states[i]) for i in _subsample(len(states), max_states)]
    return task.is_success(states[-1]), [dataclasses.replace(d, hazards=()) for d in described], [d.hazards for d in described]


def task_case(path: str, episodes: int = 2, seed: int = 0, max_states: int = 12, text_only: bool = False) -> TaskCase:
    """`episodes` successful expert episodes and `episodes` failed ones (random / perturbed) of one task file."""
    from robo_prm.envs.experts import ScriptedExpert
    from robo_prm.envs.rollout import RandomPolicy
    from robo_prm.envs.tidy_env import TidyTableEnv

    task = load_case_task(path, text_only)
    text = task.text
    view = dataclasses.replace(text, hazards=tuple(dataclasses.replace(h, checked=False) for h in text.hazards))
    case = TaskCase(task.name, task.source, view, tuple(h.name for h in text.hazards if h.checked))
    env = TidyTableEnv(task)
    try:
        s = seed
        while sum(e.kind == "success" for e in case.episodes) < episodes and s < seed + 3 * max(episodes, 1):
            ok, scenes, truth = _episode(env, task, ScriptedExpert(env, seed=s), s, max_states)
            if ok:
                case.episodes.append(TaskEpisode("success", "expert", scenes, truth))
            s += 1
        k = 0
        while sum(e.kind == "random" for e in case.episodes) < episodes and k < 3 * max(episodes, 1):
            s = seed + 1000 + k
            policy, name = ((RandomPolicy(s), "random") if k % 2 == 0
                            else (ScriptedExpert(env, noise=0.1, perturb=0.5, seed=s), "perturbed"))
            ok, scenes, truth = _episode(env, task, policy, s, max_states)
            if not ok:
                case.episodes.append(TaskEpisode("random", name, scenes, truth))
            k += 1
    finally:
        env.close()
    return case


class MemoBackend:
    """Wraps a backend: the same (task, scene text, hazards asked, explain) is scored once, so several
    fallback policies are measured on one set of LLM answers; counts fresh scenes and their wall time."""

    def __init__(self, backend):
        self.backend, self.name = backend, backend.name
        self.where = getattr(backend, "where", None)
        self._memo: dict[tuple, Any] = {}
        self.fresh = 0
        self.seconds = 0.0

    def score(self, task, scenes, hazards, explain):
        keys = [(task.key, s.text, tuple(hazards), explain) for s in scenes]
        todo = [i for i, k in enumerate(keys) if k not in self._memo]
        if todo:
            t0 = time.perf_counter()
            got = self.backend.score(task, [scenes[i] for i in todo], hazards, explain)
            if not explain:  # the hot path's cost: reasons are generated off it
                self.seconds += time.perf_counter() - t0
                self.fresh += len(todo)
            for i, g in zip(todo, got):
                self._memo[keys[i]] = g
        return [self._memo[k] for k in keys]

    def close(self):
        self.backend.close()


def judge_case(judge, case: TaskCase, reasons: int = 3) -> dict:
    """Judge every episode of a case; returns the per-state records the figures are computed from."""
    judged: list[list[Judgement]] = [judge.judge(case.text, ep.scenes) for ep in case.episodes]
    explained: list[tuple[str | None, tuple, str]] = []
    for ep in case.episodes:
        if reasons <= 0:
            break
        for i in _subsample(len(ep.scenes), reasons):
            [j] = judge.judge(case.text, [ep.scenes[i]], explain=True)
            explained.append((j.reason, ep.scenes[i].facts, ep.scenes[i].text))
    return {"judged": judged, "explained": explained}


def figures(cases: Sequence[TaskCase], records: Sequence[dict], ms: float | None) -> dict:
    """The seven figures (KEYS) pooled over cases, plus the details behind them under "_details"."""
    vs, vr, fb, second, pairs, reasons = [], [], [], [], [], []
    per_hazard: dict[str, tuple[list, list]] = {}  # name → (P(present) asked, truth) for AUROC
    for case, rec in zip(cases, records):
        for ep, js in zip(case.episodes, rec["judged"]):
            (vs if ep.kind == "success" else vr).append(voc([j.progress for j in js]))
            fb += [j.fallback for j in js]
            second += [j.backend.endswith("+progress_reader") for j in js]
            for j, truth in zip(js, ep.truth):
                for h in j.hazards:
                    if h.name in case.checked:
                        ps, ts = per_hazard.setdefault(f"{case.name}/{h.name}", ([], []))
                        ps.append(h.probability)
                        ts.append(h.name in truth)
            pairs += [(tuple(n for n in j.hazard_names() if n in case.checked), truth) for j, truth in zip(js, ep.truth)]
        reasons += rec["explained"]
    scored = any(case.checked for case in cases)
    hz = precision_recall_f1(*set_confusion(pairs)) if scored else {"precision": None, "recall": None}
    rf = reason_faithfulness(reasons)
    out = {"voc_success": float(np.mean(vs)) if vs else None, "voc_random": float(np.mean(vr)) if vr else None,
           "fallback_rate": float(np.mean(fb)) if fb else None,
           "hazard_precision": hz["precision"], "hazard_recall": hz["recall"],
           "reason_faithfulness": rf["faithfulness"], "ms_per_judgement": ms}
    tp, fp, fn = set_confusion(pairs) if scored else (0, 0, 0)
    from robo_prm.judge.faithfulness import check_reason

    wrong = [{"reason": r, "scene": text, "wrong": check_reason(r, facts, text)["wrong"]} for r, facts, text in reasons
             if r is not None and not check_reason(r, facts, text)["faithful"]]
    out["_details"] = {"episodes_success": len(vs), "episodes_random": len(vr), "states": len(fb),
                       "second_opinion_rate": float(np.mean(second)) if second else None,
                       "hazard_tp_fp_fn": [tp, fp, fn], "reasons": rf,
                       "hazard_auroc": {n: {"auroc": auroc(p, t), "positives": int(sum(t)), "n": len(t),
                                            "mean_p": float(np.mean(p))} for n, (p, t) in per_hazard.items()},
                       "unfaithful_examples": wrong[:4], "reasons_judged": [[r, list(f), t] for r, f, t in reasons]}
    return out


def hot_seconds(memo: MemoBackend, judge) -> float:
    """Wall time of fresh judgements: the backend's (memo) plus the hazard and progress readers', where the judge
    has them."""
    readers = [getattr(judge, "reader", None), getattr(judge, "second_opinion", None)]
    return memo.seconds + sum(r.seconds for r in readers if r is not None)


def evaluate_tasks(judge, cases: Sequence[TaskCase], reasons: int = 3, memo: MemoBackend | None = None,
                   echo=print) -> tuple[dict, dict]:
    """→ (result, details): result is exactly {"overall": {KEYS}, "tasks": {name: {KEYS}}}; details holds the
    counts behind each figure (episodes, states, hazard tp/fp/fn, reason claims, repeated sentences)."""
    records, per_task = [], {}
    for case in cases:
        before = (memo.fresh, hot_seconds(memo, judge)) if memo else (0, 0.0)
        rec = judge_case(judge, case, reasons)
        records.append(rec)
        ms = ((hot_seconds(memo, judge) - before[1]) * 1e3 / (memo.fresh - before[0])
              if memo and memo.fresh > before[0] else None)
        per_task[case.name] = figures([case], [rec], ms)
        echo(f"{case.name}: " + ", ".join(f"{k}={_fmt(per_task[case.name][k])}" for k in KEYS))
    total_ms = hot_seconds(memo, judge) * 1e3 / memo.fresh if memo and memo.fresh else None
    overall = figures(cases, records, total_ms)
    details = {"overall": overall.pop("_details"), "tasks": {n: r.pop("_details") for n, r in per_task.items()}}
    return {"overall": overall, "tasks": per_task}, details


def _fmt(v) -> str:
    return "null" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)


def cmd_any_task(args) -> int:
    import json
    from pathlib import Path

    import torch

    from robo_prm.judge import make_judge
    from robo_prm.provenance import provenance

    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    cases = [task_case(p, args.episodes, args.seed, args.max_states, args.text_only) for p in args.task]
    print(f"{len(cases)} task(s), {sum(len(c.episodes) for c in cases)} episodes, "
          f"{sum(len(e.scenes) for c in cases for e in c.episodes)} states ({time.perf_counter() - t0:.0f} s)")
    judge = make_judge(args.judge)
    memo = None
    if judge.backend is not None:
        memo = judge.backend = MemoBackend(judge.backend)
    try:
        result, details = evaluate_tasks(judge, cases, args.reasons, memo)
        details["judge_stats"] = judge.stats()
    finally:
        judge.close()
    details["meta"] = {**provenance(args.command_line), "tasks": {c.name: c.source for c in cases},
                       "judge": dataclasses.asdict(args.judge), "text_only": args.text_only,
                       "episodes": args.episodes, "max_states": args.max_states, "seed": args.seed,
                       "reasons": args.reasons, "seconds": round(time.perf_counter() - t0, 1)}
    print(json.dumps(result["overall"]))
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1))
        out.with_suffix(".details.json").write_text(json.dumps(details, indent=1, default=str))
    return 0
