"""Reward-model evaluation on held-out tasks and task texts, judged from their text alone.

Episodes: for every held-out text variant (`labels.task_variants(task, "heldout")`), scripted episodes
that succeed and random-policy episodes, described with `StateCaptioner(task, milestone_line=False)`
(no milestone count in the scene: the judge must read the goal). Metrics per judge:

* VOC: Spearman ρ of progress vs time step, mean over successful episodes (high is good) and random ones;
* hazard precision / recall against the simulator's hazard checks (judges that report hazards);
* ECE and MAE of progress vs the simulator's rule_progress (10 equal-width bins);
* confidence: mean, and the share below 0.7 (where the default judge falls back to rules);
* ms per judgement (the judge's own latency, cached answers excluded).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from robo_prm.finetune.labels import HELDOUT_TASKS, TRAIN_TASKS, Variant, rollout_states, task_variants
from robo_prm.metrics import ece, mae, precision_recall_f1, set_confusion, voc
from robo_prm.types import Judgement, SceneDescription, TaskText


@dataclass
class Episode:
    variant: Variant
    kind: str  # "success" | "random"
    scenes: list[SceneDescription]


def _subsample(n: int, k: int) -> list[int]:
    if n <= k:
        return list(range(n))
    return sorted(set(np.linspace(0, n - 1, k).round().astype(int).tolist()))


def heldout_episodes(tasks: Sequence[str] = TRAIN_TASKS + HELDOUT_TASKS, n_success: int = 2, n_random: int = 2,
                     seed: int = 5000, max_states: int = 20, variants: Sequence[Variant] | None = None) -> list[Episode]:
    """Held-out variants' episodes (seeds from `seed` on, away from the labelling seeds)."""
    from robo_prm.describe.state_captioner import StateCaptioner

    if variants is None:
        variants = [v for t in tasks for v in task_variants(t, "heldout")]
    out = []
    for v in variants:
        cap = StateCaptioner(v.task, milestone_line=False)
        got, s = 0, seed
        while got < n_success and s < seed + 5 * max(n_success, 1):
            states = rollout_states(v, "scripted", s)
            s += 1
            if v.task.is_success(states[-1]):
                out.append(Episode(v, "success", [cap(states[i]) for i in _subsample(len(states), max_states)]))
                got += 1
        for k in range(n_random):
            states = rollout_states(v, "random", seed + 1000 + k)
            out.append(Episode(v, "random", [cap(states[i]) for i in _subsample(len(states), max_states)]))
    return out


class CosineJudge:
    """ELLM-style baseline: progress = cosine similarity of MiniLM embeddings of the goal and the scene."""

    name = "minilm-cosine"

    def __init__(self, embed=None):
        from robo_prm.finetune.distill import Embedder

        self.embed = embed or Embedder()

    def judge(self, task: TaskText, scenes: Sequence[SceneDescription], explain: bool = False) -> list[Judgement]:
        
        t0 = time.perf_counter()
        s = self.embed([x.text for x in scenes])
        g = self.embed([task.goal])[0]
        ms = (time.perf_counter() - t0) * 1e3 / max(len(scenes), 1)
        return [Judgement(progress=float(np.clip(c, 0, 1)), confidence=1.0, backend=self.name, latency_ms=ms) for c in s @ g]

    def close(self):
        pass


def run_judge(judge, episodes: Sequence[Episode], calibrator: Callable[[float], float] | None = None,
              hazards: bool = True) -> list[list[Judgement]]:
    out = []
    for ep in episodes:
        js = judge.judge(ep.variant.task.text, ep.scenes)
        if calibrator is not None:
            import dataclasses

            js = [dataclasses.replace(j, progress=calibrator(j.progress)) for j in js]
        out.append(js)
    return out


def metrics(episodes: Sequence[Episode], judged: Sequence[Sequence[Judgement]], hazards: bool = True,
            threshold: float = 0.7) -> dict:
    vs = [voc([j.progress for j in js]) for ep, js in zip(episodes, judged) if ep.kind == "success"]
    vr = [voc([j.progress for j in js]) for ep, js in zip(episodes, judged) if ep.kind == "random"]
    pairs = [(scene, j) for ep, js in zip(episodes, judged) for scene, j in zip(ep.scenes, js)]
    pred = np.array([j.progress for _, j in pairs])
    true = np.array([scene.rule_progress or 0.0 for scene, _ in pairs])
    conf = [j.confidence for _, j in pairs]
    ms = [j.latency_ms for _, j in pairs if not j.cached]
    tp, fp, fn = set_confusion((j.hazard_names(), scene.hazards) for scene, j in pairs)
    hz = precision_recall_f1(tp, fp, fn)
    return {
        "voc_success": float(np.mean(vs)) if vs else None, "voc_random": float(np.mean(vr)) if vr else None,
        "hazard_precision": hz["precision"] if hazards else None,
        "hazard_recall": hz["recall"] if hazards else None,
        "hazard_positives": tp + fn if hazards else None,
        "ece": ece(pred, true), "mae": mae(pred, true),
        "mean_confidence": float(np.mean(conf)) if conf else None,
        "low_confidence_rate": float(np.mean(np.array(conf) < threshold)) if conf else None,
        "ms_per_judgement": float(np.mean(ms)) if ms else None,
        "episodes_success": len(vs), "episodes_random": len(vr), "states": int(len(pred)),
    }


def evaluate(judges: dict[str, tuple[Any, Callable | None, bool]], episodes: Sequence[Episode], echo=print) -> list[dict]:
    """judges: name → (judge, calibrator or None, reports hazards). Rows pooled over all variants
    ("task": "all") and per base task."""
    rows = []
    for name, (judge, cal, hz) in judges.items():
        t0 = time.perf_counter()
        judged = run_judge(judge, episodes, cal)
        row = {"judge": name, "task": "all", **metrics(episodes, judged, hz), "seconds": round(time.perf_counter() - t0, 1)}
        rows.append(row)
        echo(f"{name}: " + ", ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()
                                     if k not in ("judge", "task")))
        for base in dict.fromkeys(ep.variant.base for ep in episodes):
            idx = [i for i, ep in enumerate(episodes) if ep.variant.base == base]
            rows.append({"judge": name, "task": base, **metrics([episodes[i] for i in idx], [judged[i] for i in idx], hz)})
    return rows


def markdown(rows: Sequence[dict], task: str = "all") -> str:
    f = lambda v, d=2: "n/a" if v is None else (f"{v:.{d}f}" if isinstance(v, float) else str(v))  # noqa: E731
    lines = ["| judge | VOC success ↑ | VOC random | hazard P | hazard R | ECE ↓ | MAE ↓ | mean conf | conf < 0.7 | ms/judgement |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r["task"] != task:
            continue
        lines.append(f"| {r['judge']} | {f(r['voc_success'])} | {f(r['voc_random'])} | {f(r['hazard_precision'])} | "
                     f"{f(r['hazard_recall'])} | {f(r['ece'], 3)} | {f(r['mae'], 3)} | {f(r['mean_confidence'])} | "
                     f"{f(r['low_confidence_rate'])} | {f(r['ms_per_judgement'], 1)} |")
    return "\n".join(lines)
