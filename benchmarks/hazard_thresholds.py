"""Can a threshold choice alone meet issue 18's hazard target (recall ≥ 0.95 at precision ≥ 0.9)?

On frames the model never trained on (a collection with its own --seed, every frame of it), the perception
model's hazard heads are read at:
* one threshold for every hazard head (a sweep), pooled precision / recall;
* per hazard head, the largest threshold whose recall reaches R (R = 0.95 … 0.98), pooled;
* per hazard head, thresholds chosen greedily on these same frames for the most pooled recall while pooled
  precision stays ≥ 0.9 (optimistic: a choice fitted to the frames it is scored on; greedy, so not proven best).

    python benchmarks/hazard_thresholds.py --data FRAMES --weights FOLDER --out result.json [--cache probs.npz]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

GRID = (0.9, 0.8, 0.7, 0.6, 0.5, 0.45, 0.4, 0.35, 0.3, 0.25, 0.2, 0.15, 0.1, 0.07, 0.05, 0.03, 0.02)


def hazard_probs(data: str, weights: str | None, threads: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    import torch

    from robo_prm.perception.dataset import load_frames
    from robo_prm.perception.train import hazard_columns, predict
    from robo_prm.perception.weights import load_perception

    torch.set_num_threads(threads)
    bundle = load_perception(weights)
    frames = load_frames(data, list(bundle.net.cfg.views))
    if frames.meta["predicate_keys"] != list(bundle.net.cfg.predicate_keys):
        raise SystemExit(f"{data}: other predicate columns than the model's")
    cols = hazard_columns(frames.meta["predicate_keys"])
    logits = predict(bundle.net, frames.arrays["frames"])["preds"][:, cols]
    return 1 / (1 + np.exp(-logits)), frames.arrays["preds"][:, cols], [frames.meta["predicate_keys"][c] for c in cols]


def counts(p: np.ndarray, truth: np.ndarray, thresholds) -> tuple[int, int, int]:
    """(true positives, flagged, positives) pooled over the heads, on frames where each hazard is checked."""
    known, hit, pos = truth >= 0, p > np.asarray(thresholds)[None], truth == 1
    return int((hit & pos & known).sum()), int((hit & known).sum()), int((pos & known).sum())


def pr(p, truth, thresholds) -> dict:
    tp, flagged, positives = counts(p, truth, thresholds)
    return {"precision": tp / max(flagged, 1), "recall": tp / max(positives, 1)}


def per_head_for_recall(p, truth, target: float, min_positives: int = 20) -> list[float]:
    out = []
    for c in range(p.shape[1]):
        pos = p[truth[:, c] == 1, c]
        ok = [g for g in GRID if len(pos) >= min_positives and (pos > g).mean() >= target]
        out.append(ok[0] if ok else 0.5 if len(pos) < min_positives else GRID[-1])
    return out


def best_at_precision(p, truth, floor: float = 0.9) -> list[float]:
    """Greedy: from 0.5 everywhere, keep moving the one head whose change buys the most recall per false alarm
    while pooled precision stays ≥ floor."""
    per = [[(int(((p[:, c] > g) & (truth[:, c] == 1)).sum()), int(((p[:, c] > g) & (truth[:, c] == 0)).sum())) for g in GRID]
           for c in range(p.shape[1])]
    idx = [GRID.index(0.5)] * p.shape[1]

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="collected frames the model did not train on")
    ap.add_argument("--weights", default=None, help="perception folder (default: the shipped one)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--cache", default=None, help="npz of the probabilities: read if it exists, else written")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    if args.cache and Path(args.cache).exists():
        z = np.load(args.cache)
        p, truth, keys = z["p"], z["truth"], [str(k) for k in z["keys"]]
    else:
        p, truth, keys = hazard_probs(args.data, args.weights, args.threads)
        if args.cache:
            np.savez(args.cache, p=p, truth=truth, keys=np.array(keys))
    result = {
        "data": args.data, "weights": args.weights or "shipped", "frames": int(len(p)),
        "positives": {k: int((truth[:, c] == 1).sum()) for c, k in enumerate(keys)},
        "uniform": {str(g): pr(p, truth, [g] * len(keys)) for g in GRID},
        "per_head_recall": {str(r): {"thresholds": dict(zip(keys, th)), **pr(p, truth, th)}
                            for r in (0.95, 0.96, 0.97, 0.98) for th in [per_head_for_recall(p, truth, r)]},
    }
    th = best_at_precision(p, truth)
    result["best_at_precision_0.9"] = {"thresholds": dict(zip(keys, th)), **pr(p, truth, th)}
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"0.5 everywhere: {result['uniform']['0.5']}\nbest per head at precision ≥ 0.9: "
          f"{ {k: round(v, 3) for k, v in result['best_at_precision_0.9'].items() if k != 'thresholds'} }")


if __name__ == "__main__":
    main()
