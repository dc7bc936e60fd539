"""Would two frames tell "It is moving fast." better than one? The keypoint head's motion between described frames.

    python benchmarks/motion_cue.py [--episodes 80] [--seed 900000] [--every 4] [--out benchmarks/results/motion_cue.json]

`moving` (an object faster than describe/facts.py's MOVING_MS) is the fact the single-frame slot heads miss most on
held-out frames (docs/BENCHMARKS.md). Training describes every `every`-th step, so a pixel describer could also
compare where the keypoint head puts each object now and one description earlier. Episodes are rolled out as
`perception collect` rolls them (random / scripted / perturbed-scripted policies, a third from scattered scenes;
seeds from --seed, none in the collected data); at each described step the frame is rendered and the true `moving`
fact kept. For every object the task moves, over consecutive described frames of one episode:

* `head`: the slot head's own reading (logit > 0);
* `estimated_speed > v`: the keypoint head's displacement / elapsed seconds above v m/s;
* `true_speed > v`: the same from the true positions (what a perfect keypoint head would give);
* a logistic fit of the head's logit + the estimated speed (+ the true speed), fitted on even episodes, scored on odd.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

import robo_prm  # noqa: F401  (sets MUJOCO_GL)
from robo_prm.describe.state_captioner import StateCaptioner
from robo_prm.envs.rollout import rollout
from robo_prm.envs.task import load_task
from robo_prm.envs.tidy_env import TidyTableEnv
from robo_prm.perception.dataset import CollectConfig, start_episode
from robo_prm.perception.keypoints import POINTS
from robo_prm.perception.train import predict
from robo_prm.perception.weights import load_perception
from robo_prm.provenance import provenance

TASKS = ("reach_tool", "push_tool_from_edge", "place_cup_in_bin", "tidy_table")
SPEEDS = (0.05, 0.1, 0.2, 0.3)


def described_frames(episodes: int, seed0: int, every: int, views: tuple[str, ...], size: int):
    """(frames, rows): each described step's rendered views and {episode, seconds, moving, positions}."""
    cfg = CollectConfig()
    frames, rows = [], []
    for ep in range(episodes):
        task = load_task(TASKS[ep % len(TASKS)])
        env = TidyTableEnv(task, render_mode="rgb_array", width=size, height=size)
        cap, seed = StateCaptioner(task), seed0 + ep
        start = start_episode(cfg, env, seed, np.random.default_rng(seed))

        def keep(step, env=env, task=task, cap=cap, ep=ep):
            if step.t == 0 or step.t % every == 0:
                s = env.unwrapped.scene_state
                facts = cap.facts(s, task.status(s))
                frames.append(env.unwrapped.render_views(views))
                rows.append({"episode": ep, "seconds": step.t * env.unwrapped.dt,
                             "moving": {o.sim: bool(o.moving) for o in facts.objects},
                             "positions": {sim: s.objects[sim].pos.copy() for sim in task.movable}})

        rollout(env, start.policy, seed, on_step=keep, max_steps=min(task.spec.max_steps, cfg.max_steps),
                start=(start.obs, start.info))
        env.close()
    return np.stack(frames), rows


def pairs(rows, out) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per (described frame with an earlier one in its episode, object): [head logit, estimated speed, true speed],
    the true `moving`, the episode."""
    x, y, episode = [], [], []
    for i in range(1, len(rows)):
        now, before = rows[i], rows[i - 1]
        if now["episode"] != before["episode"]:
            continue
        seconds = now["seconds"] - before["seconds"]
        for sim, moving in now["moving"].items():
            j = POINTS.index(sim)
            logits = out[f"slot/{sim}.moving"][i]
            estimated = np.linalg.norm(out["positions"][i, j] - out["positions"][i - 1, j]) / seconds
            true = np.linalg.norm(now["positions"][sim] - before["positions"][sim]) / seconds
            x.append([float(logits[1] - logits[0]), float(estimated), float(true)])
            y.append(int(moving))
            episode.append(now["episode"])
    return np.array(x), np.array(y), np.array(episode)


def logistic(x: np.ndarray, y: np.ndarray, iters: int = 100) -> np.ndarray:
    """Weights (features…, bias) by Newton's method (a tiny ridge keeps separable data finite)."""
    f = np.c_[x, np.ones(len(x))]
    w = np.zeros(f.shape[1])
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-np.clip(f @ w, -30, 30)))
        hess = (f * (p * (1 - p))[:, None]).T @ f + 1e-3 * np.eye(len(w))
        w -= np.linalg.solve(hess, f.T @ (p - y) + 1e-3 * w)
    return w


def scores(x: np.ndarray, y: np.ndarray, episode: np.ndarray) -> dict:
    odd = episode % 2 == 1
    res = {"pairs": int(len(y)), "moving_share": float(y.mean()), "test_pairs": int(odd.sum()),
           "head": float(((x[:, 0] > 0) == y).mean()), "head_test": float(((x[odd, 0] > 0) == y[odd]).mean())}
    for v in SPEEDS:
        res[f"estimated_speed>{v}"] = float(((x[:, 1] > v) == y).mean())
        res[f"true_speed>{v}"] = float(((x[:, 2] > v) == y).mean())
    for name, cols in {"head+estimated": [0, 1], "head+estimated+true": [0, 1, 2], "estimated": [1]}.items():
        w = logistic(x[~odd][:, cols], y[~odd])
        res[f"fit_{name}_test"] = float(((np.c_[x[odd][:, cols], np.ones(odd.sum())] @ w > 0) == y[odd]).mean())
        res[f"fit_{name}_weights"] = [round(float(v), 4) for v in w]
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=80)
    ap.add_argument("--seed", type=int, default=900_000, help="first episode seed (the collections use seed × 1,000,003 + episode)")
    ap.add_argument("--every", type=int, default=4, help="describe every n-th step (training's reward.judge_every)")
    ap.add_argument("--weights", help="perception folder (default: the shipped one)")
    ap.add_argument("--out", default="benchmarks/results/motion_cue.json")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    net = load_perception(args.weights).net
    t0 = time.perf_counter()
    frames, rows = described_frames(args.episodes, args.seed, args.every, tuple(net.cfg.views), net.cfg.size)
    x, y, episode = pairs(rows, predict(net, frames))
    result = {**provenance(None if argv is None else "python benchmarks/motion_cue.py " + " ".join(argv)),
              "torch_threads": 1, "episodes": args.episodes, "every": args.every, "frames": len(frames),
              **scores(x, y, episode), "seconds": round(time.perf_counter() - t0, 1)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
