"""How well a plain behaviour-cloning MLP imitates each task's scripted expert, with and without standardised inputs.

    python benchmarks/clone_check.py --tasks place_cup_in_bin,push_tool_from_edge,tidy_table --demos 50 --steps 4000

The check behind `robo_prm/train/bc.py`'s `StandardizedObs`: N scripted episodes (seeds 0..N-1), an MLP (256, 256,
tanh output, the size of SAC's actor) fitted to their actions by squared error for `--steps` Adam steps (batch 256),
then run deterministically on `--episodes` fresh seeds (1000 on). Prints one JSON line per task and input scaling and
appends them to benchmarks/results/clone_check.json.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

OUT = Path(__file__).resolve().parent / "results" / "clone_check.json"


def demos(task: str, n: int, noise: float = 0.0):
    """(env, observations, expert actions, expert success) of n scripted episodes, seeds 0..n-1. noise > 0: DART
    (Laskey et al., 2017) — each step executes the expert's action plus N(0, noise²); the clean action is the label."""
    from robo_prm.envs import make_env
    from robo_prm.envs.experts import ScriptedExpert
    from robo_prm.envs.rollout import rollout

    env, rng = make_env(task), np.random.default_rng(0)
    expert = ScriptedExpert(env)
    obs_rows, labels, wins = [], [], 0

    def act(obs):
        action = expert()
        labels.append(action)
        return np.clip(action + rng.normal(0.0, noise, action.shape), -1, 1) if noise > 0 else action

    act.reset = expert.reset  # rollout resets its policy with every episode
    for seed in range(n):
        seen = []
        traj = rollout(env, act, seed, on_step=lambda step: seen.append(step.obs))
        obs_rows += seen[:-1]  # the state each action was taken in
        wins += traj.success
    return env, np.array(obs_rows), np.array(labels, dtype=np.float32), wins / n


def clone(obs: np.ndarray, actions: np.ndarray, standardize: bool, steps: int, seed: int = 0):
    torch.manual_seed(seed)
    x, y = torch.as_tensor(obs), torch.as_tensor(actions)
    mean, std = (x.mean(0), x.std(0) + 1e-6) if standardize else (torch.zeros(x.shape[1]), torch.ones(x.shape[1]))
    net = torch.nn.Sequential(torch.nn.Linear(x.shape[1], 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(),
                              torch.nn.Linear(256, y.shape[1]), torch.nn.Tanh())
    opt = torch.optim.Adam(net.parameters(), 1e-3)
    for _ in range(steps):
        idx = torch.randint(0, len(x), (256,))
        loss = ((net((x[idx] - mean) / std) - y[idx]) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return lambda o: net((torch.as_tensor(o)[None] - mean) / std)[0].detach().numpy(), float(loss.detach())


def success(env, policy, episodes: int) -> float:
    from robo_prm.envs.rollout import rollout

    return sum(rollout(env, policy, seed).success for seed in range(1000, 1000 + episodes)) / episodes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="place_cup_in_bin,push_tool_from_edge,tidy_table")
    ap.add_argument("--demos", type=int, default=50)
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--episodes", type=int, default=30)
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = json.loads(OUT.read_text()) if OUT.exists() else []
    for task in args.tasks.split(","):
        env, obs, actions, expert_success = demos(task, args.demos)
        for standardize in (False, True):
            t0 = time.perf_counter()
            policy, loss = clone(obs, actions, standardize, args.steps)
            row = {"task": task, "standardized": standardize, "demos": args.demos, "transitions": len(obs),
                   "expert_success": expert_success, "fit_steps": args.steps, "final_loss": round(loss, 6),
                   "clone_success": success(env, policy, args.episodes), "episodes": args.episodes,
                   "wall_s": round(time.perf_counter() - t0, 1), "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            print(json.dumps(row), flush=True)
            rows.append(row)
            OUT.write_text(json.dumps(rows, indent=1))
        env.close()


if __name__ == "__main__":
    main()
