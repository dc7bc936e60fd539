"""Pixels-only describing (`describe.source: pixels`): info["description"] made from the rendered frame.

The wrapper renders the env's camera frame and replaces info["description"] with the pixel
captioner's SceneDescription (caption text, facts, predicted hazards and rule progress, CLIP
image embedding as features). Nothing of the simulator state reaches the judge. The env's own
ground truth (info["predicates"], info["hazards"], info["is_success"]) stays in info for
evaluation and logging, as it does in state mode.

Cost: a frame is rendered and described only on the steps the reward judges (the first step of
an episode, every `every`-th step, the last step); in between, the last description is held,
exactly as the blended reward holds the last judgement.
"""
from __future__ import annotations

import time

import gymnasium

from robo_prm.describe.captioner import PixelCaptioner


class PixelDescriber(gymnasium.Wrapper):
    def __init__(self, env: gymnasium.Env, captioner: PixelCaptioner, every: int = 1):
        super().__init__(env)
        if env.render_mode != "rgb_array":
            raise ValueError("pixels-only describing needs an env with render_mode='rgb_array'")
        self.captioner, self.every = captioner, max(1, int(every))
        self._t = 0
        self._last = None
        self.described = 0  # frames described so far
        self.describe_s = 0.0  # seconds spent rendering + describing

    def describe_now(self):
        t0 = time.perf_counter()
        frame = self.env.render()
        if frame.shape[0] != self.captioner.size or frame.shape[1] != self.captioner.size:
            raise ValueError(f"the env renders {frame.shape[1]}×{frame.shape[0]} frames; the perception model reads "
                             f"{self.captioner.size}×{self.captioner.size} (make the env with width=height={self.captioner.size})")
        self._last = self.captioner(frame)
        self.described += 1
        self.describe_s += time.perf_counter() - t0
        return self._last

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self._t = 0
        info["description"] = self.describe_now()
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._t += 1
        if self._t == 1 or self._t % self.every == 0 or terminated or truncated:
            info["description"] = self.describe_now()
        else:
            info["description"] = self._last
        return obs, reward, terminated, truncated, info

    def stats(self) -> dict[str, float]:
        return {"described": self.described, "ms_per_description": 1e3 * self.describe_s / max(1, self.described)}
