"""How precisely must a perception model place things for its captions to be exact?

    python benchmarks/caption_precision.py --data DIR[,DIR2] [--frames 3000] [--sigmas 0,0.002,0.005,0.01,0.02]
        [--out benchmarks/results/caption_precision.json]

On held-out frames of `robo-prm perception collect` folders: the true state with Gaussian noise of sigma metres on
every coordinate of the gripper's and the objects' positions, through the state describer's own rules
(facts.scene_facts, with what is held, open or upright kept true), against the frame's true caption slots. Reports,
per sigma, the share of frames with every slot right (`moving` left out: a position says nothing of speed) and each
slot kind's accuracy, so a model's per-slot accuracy can be read as an equivalent position error.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

import robo_prm  # noqa: F401
from robo_prm.describe.facts import scene_facts
from robo_prm.perception.dataset import load_frames
from robo_prm.perception.slots import encode, state_from_vector
from robo_prm.envs.scene import OBJECTS
from robo_prm.envs.task import load_task
from robo_prm.provenance import provenance

POSITION_COLUMNS = [0, 1, 2] + [4 + 7 * i + k for i in range(len(OBJECTS)) for k in range(3)]  # slots.state_vector


def precision_table(states: np.ndarray, slots: np.ndarray, task_ids: np.ndarray, tasks: list, names: list[str],
                    sigmas: list[float], seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    kept = [j for j, n in enumerate(names) if not n.endswith(".moving")]
    res = {}
    for sigma in sigmas:
        right = np.zeros(len(names))
        applies = np.zeros(len(names))
        exact = 0
        for v, y, t in zip(states, slots, task_ids):
            noisy = v.copy()
            noisy[POSITION_COLUMNS] += rng.normal(0.0, sigma, len(POSITION_COLUMNS))
            task = tasks[t]
            enc = encode(scene_facts(task.movable, state_from_vector(noisy), None, (), task.carry_targets))
            got = np.array([enc[n] for n in names])
            on = y[kept] >= 0
            ok = got[kept] == y[kept]
            exact += bool(ok[on].all())
            right[kept] += ok & on
            applies[kept] += on
        res[f"{sigma:g}"] = {"all_slots_right": exact / len(states),
                             "slot_accuracy": {names[j]: right[j] / applies[j] for j in kept if applies[j]}}
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="collected folders (comma-separated); their held-out split is used")
    ap.add_argument("--frames", type=int, default=3000, help="held-out frames drawn (evenly spaced)")
    ap.add_argument("--sigmas", default="0,0.002,0.003,0.005,0.01,0.02", help="position noise per coordinate, metres")
    ap.add_argument("--out", default="benchmarks/results/caption_precision.json")
    args = ap.parse_args(argv)
    held = load_frames(args.data, heldout=True)
    idx = np.linspace(0, len(held) - 1, min(args.frames, len(held))).astype(int)
    a = held.arrays
    table = precision_table(a["state"][idx], a["slots"][idx], a["task"][idx], [load_task(t) for t in held.meta["tasks"]],
                            list(held.meta["slot_names"]), [float(s) for s in args.sigmas.split(",")])
    result = {**provenance("python benchmarks/caption_precision.py " + " ".join(argv if argv is not None else sys.argv[1:])),
              "frames": len(idx), "by_sigma": table}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print("| sigma per coordinate | every slot right (moving aside) | gripper distance | object places | object distances |")
    print("|---:|---:|---:|---:|---:|")
    for s, r in table.items():
        acc = r["slot_accuracy"]
        mean = lambda suffix: np.mean([v for k, v in acc.items() if k.startswith(("tool", "cup")) and k.endswith(suffix)])
        print(f"| {float(s) * 100:g} cm | {r['all_slots_right']:.3f} | {acc.get('gripper.bucket', float('nan')):.3f} | "
              f"{mean('.place'):.3f} | {mean('.bucket'):.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
