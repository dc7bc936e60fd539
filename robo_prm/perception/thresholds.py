"""Hazard thresholds: above which probability a hazard head says yes.

One number for every head (what training picks: the largest that keeps recall ≥ 0.98 on training frames), or one per
hazard predicate key ("task:hazard/name") chosen on frames the model did not train on, with "*" for any other key.
`config.json` of a perception folder holds the number as `hazard_threshold` and the per-key choice, where one was
made, as `hazard_thresholds` (`robo-prm perception calibrate-hazards`).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

Thresholds = float | Mapping[str, float]
GRID = (0.9, 0.8, 0.7, 0.6, 0.5, 0.45, 0.4, 0.35, 0.3, 0.25, 0.2, 0.15, 0.1, 0.07, 0.05, 0.03, 0.02)


def threshold_of(thresholds: Thresholds, key: str) -> float:
    if isinstance(thresholds, Mapping):
        return float(thresholds.get(key, thresholds.get("*", 0.5)))
    return float(thresholds)


def thresholds_for(thresholds: Thresholds, keys: Sequence[str]) -> np.ndarray:
    return np.array([threshold_of(thresholds, k) for k in keys], dtype=np.float64)


def pooled_counts(p: np.ndarray, truth: np.ndarray, thresholds: Sequence[float]) -> tuple[int, int, int]:
    """(true positives, flagged, positives) pooled over hazard heads (columns), on the frames where each is checked
    (truth ≥ 0)."""
    known, hit, pos = truth >= 0, p > np.asarray(thresholds)[None], truth == 1
    return int((hit & pos & known).sum()), int((hit & known).sum()), int((pos & known).sum())


def pooled_pr(p: np.ndarray, truth: np.ndarray, thresholds: Sequence[float]) -> dict:
    """{"precision", "recall"} of the hazard heads pooled (pooled_counts)."""
    tp, flagged, positives = pooled_counts(p, truth, thresholds)
    return {"precision": tp / max(flagged, 1), "recall": tp / max(positives, 1)}


def fit_for_precision(p: np.ndarray, truth: np.ndarray, floor: float = 0.9, start: float = 0.5) -> list[float]:
    """Per head (column) a threshold from GRID: from `start` everywhere, keep moving the one head whose change buys
    the most pooled recall per false alarm while pooled precision stays ≥ floor (greedy)."""
    per = [[(int(((p[:, c] > g) & (truth[:, c] == 1)).sum()), int(((p[:, c] > g) & (truth[:, c] == 0)).sum())) for g in GRID]
           for c in range(p.shape[1])]
    idx = [GRID.index(start)] * p.shape[1]

    def total(ix):
        return sum(per[c][i][0] for c, i in enumerate(ix)), sum(per[c][i][1] for c, i in enumerate(ix))

    while True:
        tp, fp = total(idx)
        best = None
        for c in range(p.shape[1]):
            for j in range(len(GRID)):
                trial = idx[:c] + [j] + idx[c + 1:]
                tp2, fp2 = total(trial)
                if tp2 <= tp or tp2 / max(tp2 + fp2, 1) < floor:
                    continue
                gain = (tp2 - tp) / max(fp2 - fp, 0.5)
                if best is None or gain > best[0]:
                    best = (gain, trial)
        if best is None:
            return [GRID[i] for i in idx]
        idx = best[1]

