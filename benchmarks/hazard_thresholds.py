"""Can a threshold choice alone meet issue 18's hazard target (recall ≥ 0.95 at precision ≥ 0.9)?

On frames the model never trained on (a collection with its own --seed, every frame of it; or the held-out split of
the folders it trained on, `--split heldout`), the perception model's hazard heads are read at:
* one threshold for every hazard head (a sweep), pooled precision / recall;
* per hazard head, the largest threshold whose recall reaches R (R = 0.95 … 0.98), pooled;
* per hazard head, thresholds chosen greedily on these same frames for the most pooled recall while pooled
  precision stays ≥ 0.9 (optimistic: a choice fitted to the frames it is scored on; greedy, so not proven best).

    python benchmarks/hazard_thresholds.py --data FRAMES --weights FOLDER --out result.json [--split heldout] [--cache probs.npz]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from robo_prm.perception.thresholds import GRID, fit_for_precision, pooled_pr


def hazard_probs_of(data: str, weights: str | None, threads: int, split: str = "all"):
    import torch

    from robo_prm.perception.calibrate import frames_for, hazard_probs
    from robo_prm.perception.weights import load_perception

    torch.set_num_threads(threads)
    bundle = load_perception(weights)
    return hazard_probs(bundle, frames_for(bundle, data, split))


def per_head_for_recall(p, truth, target: float, min_positives: int = 20) -> list[float]:
    out = []
    for c in range(p.shape[1]):
        pos = p[truth[:, c] == 1, c]
        ok = [g for g in GRID if len(pos) >= min_positives and (pos > g).mean() >= target]
        out.append(ok[0] if ok else 0.5 if len(pos) < min_positives else GRID[-1])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="collected frames the model did not train on")
    ap.add_argument("--weights", default=None, help="perception folder (default: the shipped one)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--cache", default=None, help="npz of the probabilities: read if it exists, else written")
    ap.add_argument("--split", choices=("all", "heldout", "train"), default="all",
                    help="which frames of --data: all (a collection the model never saw), or one split of its folders")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    if args.cache and Path(args.cache).exists():
        z = np.load(args.cache)
        p, truth, keys = z["p"], z["truth"], [str(k) for k in z["keys"]]
    else:
        p, truth, keys = hazard_probs_of(args.data, args.weights, args.threads, args.split)
        if args.cache:
            np.savez(args.cache, p=p, truth=truth, keys=np.array(keys))
    result = {
        "data": args.data, "split": args.split, "weights": args.weights or "shipped", "frames": int(len(p)),
        "positives": {k: int((truth[:, c] == 1).sum()) for c, k in enumerate(keys)},
        "uniform": {str(g): pooled_pr(p, truth, [g] * len(keys)) for g in GRID},
        "per_head_recall": {str(r): {"thresholds": dict(zip(keys, th)), **pooled_pr(p, truth, th)}
                            for r in (0.95, 0.96, 0.97, 0.98) for th in [per_head_for_recall(p, truth, r)]},
    }
    th = fit_for_precision(p, truth, 0.9)
    result["best_at_precision_0.9"] = {"thresholds": dict(zip(keys, th)), **pooled_pr(p, truth, th)}
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"0.5 everywhere: {result['uniform']['0.5']}\nbest per head at precision ≥ 0.9: "
          f"{ {k: round(v, 3) for k, v in result['best_at_precision_0.9'].items() if k != 'thresholds'} }")


if __name__ == "__main__":
    main()
