"""The blended reward as an SB3 VecEnvWrapper (all envs of a step judged in one batch) and a gymnasium wrapper."""
from __future__ import annotations

import dataclasses

import gymnasium
import numpy as np
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper

from robo_prm.reward.blend import BlendedReward
from robo_prm.reward.config import RewardConfig
from robo_prm.types import TaskText


class LLMRewardVecEnv(VecEnvWrapper):
    """Replaces each step's reward with the blended reward; the env reward stays in
    info["reward_terms"]["term/env"] and the judgement in info["judgement"]."""

    def __init__(self, venv: VecEnv, task: TaskText, judge, cfg: RewardConfig | None = None):
        super().__init__(venv)
        self.blend = BlendedReward(task, judge, cfg or RewardConfig(), venv.num_envs)

    def reset(self):
        self.blend.reset()
        return self.venv.reset()

    def step_wait(self):
        obs, rewards, dones, infos = self.venv.step_wait()
        blended = self.blend(rewards, dones, infos)
        return obs, blended, dones, infos

    def close(self):
        self.blend.close()  # stops the async judge worker, if any (the judge itself belongs to the caller)
        return self.venv.close()


class LLMRewardWrapper(gymnasium.Wrapper):
    """The same for a single gymnasium env, always judged synchronously (no buffer here to relabel)."""

    def __init__(self, env: gymnasium.Env, judge, cfg: RewardConfig | None = None, task: TaskText | None = None):
        super().__init__(env)
        # Always synchronous: a single env's caller (evaluation, replay, labelling) has no buffer to relabel.
        cfg = dataclasses.replace(cfg, async_=False) if cfg is not None else RewardConfig()
        self.blend = BlendedReward(task or env.unwrapped.task.text, judge, cfg, 1)

    def reset(self, **kwargs):
        self.blend.reset()
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        total = self.blend(np.array([reward]), [terminated or truncated], [info])
        return obs, float(total[0]), terminated, truncated, info
