"""Training callbacks: TensorBoard metrics of every reward term, progress bar (checkpoints: checkpoints.py)."""
from __future__ import annotations

import time
from collections import defaultdict, deque

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

from robo_prm.train.envs import find_blend
from robo_prm.train.rollouts import hazard_onsets


class RewardLogger(BaseCallback):
    """Logs mean reward terms and weights, judge/cache/fallback counters, success rate and hazard events.

    Written to TensorBoard every `every` steps and, through `flush(dump=True)`, when training ends,
    so a run shorter than `every` has them too."""

    def __init__(self, every: int = 500):
        super().__init__()
        self.every = every
        self.sums: dict[str, float] = defaultdict(float)
        self.n = 0
        self.successes: deque[float] = deque(maxlen=50)
        self.hazard_events: deque[int] = deque(maxlen=50)
        self._episodes: dict[int, list[tuple]] = {}  # env index → [hazards at reset, hazards after each step]

    @property
    def success_rate(self) -> float:
        return float(np.mean(self.successes)) if self.successes else 0.0

    def _on_training_start(self):
        self._episodes = {i: [self._reset_hazards(i)] for i in range(self.training_env.num_envs)}

    def _reset_hazards(self, i: int) -> tuple:
        """Hazards of env i's reset state: present from the start, so not the policy's doing."""
        venv = self.training_env
        while hasattr(venv, "venv"):  # the DummyVecEnv keeps each env's last reset info
            venv = venv.venv
        infos = getattr(venv, "reset_infos", None) or []
        return tuple(infos[i].get("hazards", ())) if i < len(infos) else ()

    def _on_step(self) -> bool:
        for i, (info, done) in enumerate(zip(self.locals["infos"], self.locals["dones"])):
            for k, v in info.get("reward_terms", {}).items():
                self.sums[k] += v
            self.n += 1
            episode = self._episodes.setdefault(i, [self._reset_hazards(i)])
            episode.append(tuple(info.get("hazards", ())))
            if done:
                self.successes.append(float(info.get("is_success", False)))
                self.hazard_events.append(hazard_onsets(episode[1:], episode[0]))
                self._episodes[i] = [self._reset_hazards(i)]
        if self.num_timesteps % self.every < self.training_env.num_envs:
            self.flush(dump=True)
        return True

    def flush(self, dump: bool = False):
        """Record the means since the last flush (and write them to TensorBoard now with `dump`)."""
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
        if dump:
            self.logger.dump(self.num_timesteps)


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
