"""How well SAC's own actor clones each task's scripted expert under `demo_bc`'s choices (robo_prm/train/bc.py):
the loss (the squashed action, or the pre-tanh mean against atanh of the action clipped to ±0.97), the floor of a
slot's scale in `StandardizedObs`, and the clip of a standardised input.

    python benchmarks/clone_actor.py --tasks tidy_table --specs squashed:0.05:10:5000,atanh:0.05:0:5000

A spec is LOSS:FLOOR:CLIP:STEPS[:ARCH] (CLIP 0: none; ARCH the actor's hidden layers, e.g. 512x512x512, default
SB3's 256x256). For each, three fits (torch seeds 0, 1, 2) of an SB3 SAC actor on
the inputs standardised as `standardize_inputs` does, to `--demos` scripted episodes (seeds 0..N−1, every episode
kept, as `--demos N` keeps them), each run deterministically on 30 fresh seeds (1000 on). `--demo_noise S` collects
the demos DART-style (Laskey et al., 2017): the expert's action plus Gaussian noise of std S is executed, the clean
action is the label. One JSON line per task
and spec, appended to benchmarks/results/clone_actor.jsonl. benchmarks/clone_check.py is the same question for a
plain MLP.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch as th

OUT = Path(__file__).resolve().parent / "results" / "clone_actor.jsonl"


def fit_and_run(env, rows, loss_kind: str, floor: float, clip: float, steps: int, seed: int, episodes: int,
                arch: list[int] | None = None) -> float:
    from stable_baselines3 import SAC

    import robo_prm.train.bc as bc
    from robo_prm.envs.rollout import rollout
    from robo_prm.train.demos import DemoReplayBuffer

    if loss_kind not in ("squashed", "atanh"):
        raise SystemExit(f"unknown loss {loss_kind!r} (squashed, atanh)")
    bc.MIN_STD, bc.CLIP = floor, (clip or float("inf"))
    kwargs = {"features_extractor_class": bc.StandardizedObs, **({"net_arch": arch} if arch else {})}
    model = SAC("MlpPolicy", env, replay_buffer_class=DemoReplayBuffer, seed=seed, device="cpu", policy_kwargs=kwargs)
    model.replay_buffer.add_demos(rows)
    bc.standardize_inputs(model)
    if loss_kind == "squashed":  # the shipped clone
        bc.clone_actor(model, steps, std=0.3)
    else:  # session 11's: the pre-tanh mean against atanh of the action clipped to ±0.97
        _clone_pre_tanh(model, steps)
    policy = lambda obs: model.predict(obs, deterministic=True)[0]  # noqa: E731
    return sum(rollout(env, policy, s).success for s in range(1000, 1000 + episodes)) / episodes


def _clone_pre_tanh(model, steps: int, std: float = 0.3) -> None:
    demos, actor = model.replay_buffer.demos, model.actor
    opt = th.optim.Adam(actor.parameters(), lr=1e-3)
    actor.set_training_mode(True)
    for _ in range(steps):
        batch = demos.sample(256)
        mean, log_std, _ = actor.get_action_dist_params(batch.observations)
        loss = ((mean - th.atanh(batch.actions.clamp(-0.97, 0.97))) ** 2).mean() + ((log_std - np.log(std)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    actor.set_training_mode(False)


def main() -> None:
    import clone_check

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="tidy_table")
    ap.add_argument("--specs", default="squashed:0.05:10:5000,atanh:0.05:0:5000")
    ap.add_argument("--demos", type=int, default=50)
    ap.add_argument("--episodes", type=int, default=30)
    ap.add_argument("--demo_noise", type=float, default=0.0, help="DART: executed action = expert + N(0, S²)")
    args = ap.parse_args()
    th.set_num_threads(1)
    for task in args.tasks.split(","):
        env, obs, actions, expert_success = clone_check.demos(task, args.demos, args.demo_noise)
        rows = [(o, o, a, 0.0, False, {}) for o, a in zip(obs, actions)]
        for spec in args.specs.split(","):
            loss_kind, floor, clip, steps, *rest = spec.split(":")
            arch = [int(w) for w in rest[0].split("x")] if rest else None
            t0 = time.perf_counter()
            success = [fit_and_run(env, rows, loss_kind, float(floor), float(clip), int(steps), seed, args.episodes, arch)
                       for seed in (0, 1, 2)]
            row = {"task": task, "loss": loss_kind, "floor": float(floor), "clip": float(clip), "steps": int(steps),
                   "arch": arch or [256, 256], "demos": args.demos, "demo_noise": args.demo_noise,
                   "expert_success": expert_success, "episodes": args.episodes,
                   "clone_success": success, "mean": round(float(np.mean(success)), 3),
                   "wall_s": round(time.perf_counter() - t0, 1), "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            print(json.dumps(row), flush=True)
            with OUT.open("a") as f:
                f.write(json.dumps(row) + "\n")
        env.close()


if __name__ == "__main__":
    main()
