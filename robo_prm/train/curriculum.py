"""Curriculum of start states (`curriculum.enabled`): training episodes begin part-way along the task's scripted
plan — the object grasped, lifted, near its place — and the starts widen back to the real one as the rollout
success rate rises.

A start is the env's `reset(options={"expert_start": f, "expert": ScriptedExpert})` (envs/tidy_env.py): the scripted expert's state a
fraction f of the way from the real start to just before success. At width w, f is drawn uniformly from
[1 − w, 1] (width 0: just before success; width 1: anywhere along the plan); `real_starts` of the episodes
start from the real start at every width, and past width 1 all do. `CurriculumCallback` widens by `step`
whenever `promote_at` of the last `window` training episodes succeeded. Evaluation never sees these starts.
"""
from __future__ import annotations

import json
from collections import deque
from pathlib import Path

import gymnasium
import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

from robo_prm.config import CurriculumConfig
from robo_prm.envs.experts import ScriptedExpert


DONE = 2.0  # a width past 1: every episode starts from the real start


class CurriculumStart(gymnasium.Wrapper):
    """Passes an `expert_start` fraction to every reset, drawn at the current width (module doc)."""

    def __init__(self, env: gymnasium.Env, cfg: CurriculumConfig, seed: int = 0):
        super().__init__(env)
        if env.unwrapped.task.plan is None:
            raise ValueError(f"curriculum.enabled: task '{env.unwrapped.task.name}' has no `expert:` plan to start along")
        self.cfg = cfg
        self.width = cfg.start_width
        self.rng = np.random.default_rng(seed)
        self.last_start = 0.0
        self.expert = ScriptedExpert(env)

    def set_curriculum_width(self, width: float) -> None:
        self.width = float(width)

    def draw(self) -> float:
        """The fraction of the plan this episode starts at (0: the real start)."""
        if self.width > 1.0 or self.rng.random() < self.cfg.real_starts:
            return 0.0
        return float(self.rng.uniform(1.0 - self.width, 1.0))

    def reset(self, *, seed=None, options=None):
        self.last_start = self.draw()
        if self.last_start > 0:
            options = {**(options or {}), "expert_start": self.last_start, "expert": self.expert}
        obs, info = self.env.reset(seed=seed, options=options)
        info["curriculum_start"] = self.last_start
        return obs, info


class CurriculumCallback(BaseCallback):
    """Widens the training envs' starts when the recent rollout success rate reaches `promote_at`."""

    def __init__(self, cfg: CurriculumConfig, out: Path | None = None, state: dict | None = None):
        super().__init__()
        self.cfg, self.out = cfg, out
        self.width = cfg.start_width
        self.recent: deque[float] = deque(maxlen=cfg.window)
        self.promotions: list[tuple[int, float]] = []  # (env steps, new width)
        if state:  # a resumed run goes on at the width it had reached, not back at the start
            self.width = float(state["width"])
            self.promotions = [(int(t), float(w)) for t, w in state.get("promotions", [])]
            self.recent.extend(float(x) for x in state.get("recent", []))

    def state(self) -> dict:
        """What a checkpoint keeps (state.json): the width, the promotions so far, the recent outcomes."""
        return {"width": self.width, "promotions": self.promotions, "recent": list(self.recent)}

    def _on_training_start(self) -> None:
        self.training_env.env_method("set_curriculum_width", self.width)

    def _on_step(self) -> bool:
        for info, done in zip(self.locals["infos"], self.locals["dones"]):
            if done:
                self.recent.append(float(info.get("is_success", False)))
        if self.width <= 1.0 and len(self.recent) == self.cfg.window and np.mean(self.recent) >= self.cfg.promote_at:
            self.width = min(1.0, self.width + self.cfg.step) if self.width < 1.0 else DONE
            self.recent.clear()
            self.promotions.append((self.num_timesteps, self.width))
            self.training_env.env_method("set_curriculum_width", self.width)
        self.logger.record("curriculum/width", self.width)
        return True

    def _on_training_end(self) -> None:
        if self.out is not None:  # run_dir/curriculum.json: where the starts ended and when they widened
            self.out.write_text(json.dumps({"width": self.width, "promotions": self.promotions}, indent=1))
