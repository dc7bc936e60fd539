"""Training callbacks: TensorBoard metrics of every reward term, progress bar, atomic checkpoints."""
from __future__ import annotations

import os
import pickle
import random
import time
from collections import defaultdict, deque
from pathlib import Path

import numpy as np
import torch
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm

from robo_prm.train.envs import find_blend


class RewardLogger(BaseCallback):
    """Logs mean reward terms and weights, judge/cache/fallback counters, success rate and hazard events."""

    def __init__(self, every: int = 500):
        super().__init__()
        self.every = every
        self.sums: dict[str, float] = defaultdict(float)
        self.n = 0
        self.successes: deque[float] = deque(maxlen=50)
        self.hazard_events: deque[int] = deque(maxlen=50)
        self._ep_hazards: dict[int, int] = defaultdict(int)
        self._prev_hazards: dict[int, tuple | None] = defaultdict(lambda: None)

    @property
    def success_rate(self) -> float:
        return float(np.mean(self.successes)) if self.successes else 0.0

    def _on_step(self) -> bool:
        for i, (info, done) in enumerate(zip(self.locals["infos"], self.locals["dones"])):
            for k, v in info.get("reward_terms", {}).items():
                self.sums[k] += v
            self.n += 1
            hazards = tuple(info.get("hazards", ()))
            if self._prev_hazards[i] is not None:  # onsets, not durations; an episode's first step is its baseline
                self._ep_hazards[i] += len(set(hazards) - set(self._prev_hazards[i]))
            self._prev_hazards[i] = hazards
            if done:
                self.successes.append(float(info.get("is_success", False)))
                self.hazard_events.append(self._ep_hazards[i])
                self._ep_hazards[i], self._prev_hazards[i] = 0, None
        if self.num_timesteps % self.every < self.training_env.num_envs:
            self.flush()
        return True

    def flush(self):
        for k, v in self.sums.items():
            self.logger.record(f"reward/{k}", v / max(1, self.n))
        self.sums.clear()
        self.n = 0
        self.logger.record("rollout/success_rate", self.success_rate)
        if self.hazard_events:
            self.logger.record("rollout/hazard_events_per_episode", float(np.mean(self.hazard_events)))
        blend = find_blend(self.training_env)
        if blend is not None:
            stats = blend.stats()
            for k, v in stats.items():
                self.logger.record(f"judge/{k}", v)
            calls = stats.get("blend_judge_calls", 0)  # scenes the cache could not answer
            self.logger.record("judge/calls_per_1k_steps", 1000.0 * calls / max(1, self.num_timesteps))


class ProgressBar(BaseCallback):
    """tqdm bar with ETA, recent success rate and judge calls per second."""

    def __init__(self, total: int, stats: RewardLogger):
        super().__init__()
        self.total, self.stats = total, stats
        self.bar = None

    def _on_training_start(self):
        from tqdm.auto import tqdm

        self.bar = tqdm(total=self.total, initial=self.model.num_timesteps, unit="step", dynamic_ncols=True)
        self.t0, self.start_steps = time.time(), self.model.num_timesteps

    def _on_step(self) -> bool:
        self.bar.update(self.training_env.num_envs)
        if self.n_calls % 50 == 0:
            blend = find_blend(self.training_env)
            post = {"success": f"{self.stats.success_rate:.2f}"}
            if blend is not None:
                post["judge/s"] = f"{blend.judge_calls / max(1e-6, time.time() - self.t0):.1f}"
            self.bar.set_postfix(post)
        return True

    def _on_training_end(self):
        if self.bar is not None:
            self.bar.close()


def save_checkpoint(model, ckpt_dir: Path, blend=None, extra: dict | None = None) -> Path:
    """Write policy (+ replay buffer for SAC) + reward state + RNG state; `latest` flips atomically.

    Each checkpoint is written into a fresh folder, then a `latest` file is replaced with
    os.replace, so a crash mid-write never leaves `latest` pointing at half a checkpoint."""
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    name = f"step_{model.num_timesteps:09d}"
    tmp = ckpt_dir / f".{name}.tmp"
    tmp.mkdir(exist_ok=True)
    model.save(tmp / "model.zip")
    if isinstance(model, OffPolicyAlgorithm):
        model.save_replay_buffer(tmp / "replay_buffer.pkl")
    state = {
        "num_timesteps": model.num_timesteps,
        "blend": blend.state_dict() if blend is not None else None,
        "rng": {"numpy": np.random.get_state(), "python": random.getstate(), "torch": torch.get_rng_state()},
        **(extra or {}),
    }
    with open(tmp / "state.pkl", "wb") as f:
        pickle.dump(state, f)
    final = ckpt_dir / name
    if final.exists():
        import shutil

        shutil.rmtree(final)
    os.replace(tmp, final)
    latest_tmp = ckpt_dir / ".latest.tmp"
    latest_tmp.write_text(name)
    os.replace(latest_tmp, ckpt_dir / "latest")
    return final


def latest_checkpoint(ckpt_dir: Path) -> Path | None:
    marker = ckpt_dir / "latest"
    if not marker.exists():
        return None
    path = ckpt_dir / marker.read_text().strip()
    return path if (path / "model.zip").exists() else None


class CheckpointEvery(BaseCallback):
    def __init__(self, ckpt_dir: Path, every: int, extra_state=None):
        super().__init__()
        self.ckpt_dir, self.every, self.extra_state = ckpt_dir, every, extra_state
        self._last = 0

    def _on_step(self) -> bool:
        if self.every > 0 and self.num_timesteps - self._last >= self.every:
            self._last = self.num_timesteps
            save_checkpoint(self.model, self.ckpt_dir, find_blend(self.training_env), self.extra_state() if self.extra_state else None)
        return True
