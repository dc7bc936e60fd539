"""Calibration of the judge's progress: an isotonic (monotone) map from raw to target progress, saved
in `robo_prm.judge.scoring.Calibrator`'s JSON format. Its measure, ECE, is `robo_prm.metrics.ece`."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np

from robo_prm.judge.scoring import Calibrator


def isotonic_fit(x: Sequence[float], y: Sequence[float], w: Sequence[float] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Pool-adjacent-violators: the non-decreasing step fit of y on x. Returns (block x means, block y means)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    w = np.ones_like(y) if w is None else np.asarray(w, float)
    order = np.argsort(x, kind="stable")
    x, y, w = x[order], y[order], w[order]
    vals, wts, xs = [], [], []  # blocks: mean y, weight, weighted sum of x
    for xi, yi, wi in zip(x, y, w):
        vals.append(yi)
        wts.append(wi)
        xs.append(xi * wi)
        while len(vals) > 1 and vals[-2] > vals[-1]:
            v2, w2, x2 = vals.pop(), wts.pop(), xs.pop()
            tot = wts[-1] + w2
            vals[-1] = (vals[-1] * wts[-1] + v2 * w2) / tot
            xs[-1] += x2
            wts[-1] = tot
    return np.array(xs) / np.array(wts), np.array(vals)


def fit_calibrator(raw: Sequence[float], target: Sequence[float]) -> Calibrator:
    """Isotonic map raw progress → target progress (both in [0, 1]), as a piecewise-linear Calibrator
    through the blocks' centres, extended flat to 0 and 1."""
    bx, by = isotonic_fit(raw, target)
    bx, by = list(np.clip(bx, 0, 1)), list(np.clip(by, 0, 1))
    if bx[0] > 0.0:
        bx, by = [0.0] + bx, [by[0]] + by
    if bx[-1] < 1.0:
        bx, by = bx + [1.0], by + [by[-1]]
    keep = [0] + [i for i in range(1, len(bx)) if bx[i] > bx[i - 1]]  # strictly increasing x for interp
    return Calibrator(tuple(float(bx[i]) for i in keep), tuple(float(by[i]) for i in keep))


def fit_hazard_thresholds(records: Sequence[tuple[str, float, bool]], min_each: int = 8) -> dict[str, dict]:
    """Per hazard kind ("*": all records), the P(yes) threshold with the best F1 on (kind, p, present) records;
    a kind with fewer than `min_each` positives or negatives gets none (it falls back to "*").
    Returns {kind: {"threshold", "f1", "precision", "recall", "positives", "negatives"}}."""
    by_kind: dict[str, list[tuple[float, bool]]] = {"*": []}
    for kind, p, present in records:
        by_kind.setdefault(kind, []).append((float(p), bool(present)))
        by_kind["*"].append((float(p), bool(present)))
    out = {}
    for kind, rows in by_kind.items():
        p = np.array([r[0] for r in rows])
        y = np.array([r[1] for r in rows])
        if y.sum() < min_each or (~y).sum() < min_each:
            continue
        best = None
        for t in np.unique(np.clip(p, 0.02, 0.98)):
            hit = p >= t
            tp = float((hit & y).sum())
            prec, rec = tp / max(hit.sum(), 1), tp / y.sum()
            f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
            if best is None or f1 > best["f1"] + 1e-12:
                best = {"threshold": float(t), "f1": f1, "precision": prec, "recall": rec}
        out[kind] = {**best, "positives": int(y.sum()), "negatives": int((~y).sum())}
    return out


def save_calibrator(cal: Calibrator, path: str | Path, info: dict | None = None) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    th = {"hazard_thresholds": dict(cal.hazard_thresholds)} if cal.hazard_thresholds else {}
    path.write_text(json.dumps({"x": list(cal.x), "y": list(cal.y), **th, **(info or {})}, indent=1))
    return path

