"""`DescribeWrapper(env, describer)`: the describe stage as a gymnasium wrapper.

The env returns simulator state and the task's status (info["status"]) and nothing else; this
wrapper adds info["description"], a SceneDescription, for any describer: the state captioner
(the default), the pixel captioner of `describe.source: pixels`, or one of your own. Training,
evaluation, labelling and replay all build their envs through it.

`every`: describe on reset, on the first step, on every `every`-th step and on the last step of an
episode, and hold the last description in between, exactly as the blended reward holds the last
judgement (a pixel describer renders a frame each time it describes; the state describer is cheap
enough for every step).

A describer with `reads_previous` true (a pixel model that reads motion) also gets the frame of the env step before
each planned description (`previous`): the wrapper renders it one step ahead of the schedule (with `every` > 1, one
more frame per `every` steps; with `every` 1 it is the last described frame). A description the schedule did not plan
(the episode's last step, reset) gets none and the model reads the frame alone.
"""
from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

import gymnasium
import numpy as np

from robo_prm.describe.state_captioner import StateCaptioner
from robo_prm.types import SceneDescription, SceneState, TaskStatus


@runtime_checkable
class Describer(Protocol):
    needs_frame: bool  # True: describe_step gets the env's rendered frame (its `render_frame(env)` if it has one)

    def describe_step(self, state: SceneState, status: TaskStatus, frame: np.ndarray | None) -> SceneDescription:
        """The description of one env state (the frame is None unless needs_frame)."""


def render_frame(env: gymnasium.Env, describer) -> np.ndarray:
    """The frame a describer reads: its own `render_frame(env)` (a pixel model may read several camera views), or
    the env's rendered frame."""
    own = getattr(describer, "render_frame", None)
    return own(env) if own is not None else env.render()


class DescribeWrapper(gymnasium.Wrapper):
    def __init__(self, env: gymnasium.Env, describer: Describer | None = None, every: int = 1):
        super().__init__(env)
        self.describer = describer if describer is not None else StateCaptioner(env.unwrapped.task)
        if self.describer.needs_frame and env.render_mode != "rgb_array":
            raise ValueError("this describer reads frames: make the env with render_mode='rgb_array'")
        self.every = max(1, int(every))
        self.reads_previous = bool(getattr(self.describer, "reads_previous", False))
        self._t = 0
        self._last: SceneDescription | None = None
        self._previous: tuple[int, np.ndarray] | None = None  # (step, frame) rendered for the next description
        self.described = 0  # descriptions made so far
        self.describe_s = 0.0  # seconds spent rendering + describing

    def _describe(self, info: dict) -> SceneDescription:
        t0 = time.perf_counter()
        frame = render_frame(self.env, self.describer) if self.describer.needs_frame else None
        state = self.env.unwrapped.scene_state
        if self.reads_previous:
            before = self._previous[1] if self._previous is not None and self._previous[0] == self._t - 1 else None
            self._last = self.describer.describe_step(state, info["status"], frame, previous=before)
            self._previous = (self._t, frame)  # the next step's previous frame, when that step is described
        else:
            self._last = self.describer.describe_step(state, info["status"], frame)
        self.described += 1
        self.describe_s += time.perf_counter() - t0
        return self._last

    def _planned(self, t: int) -> bool:
        return t == 1 or t % self.every == 0

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self._t, self._previous = 0, None
        info["description"] = self._describe(info)
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._t += 1
        due = self._planned(self._t) or terminated or truncated
        info["description"] = self._describe(info) if due or self._last is None else self._last
        if self.reads_previous and not due and self._planned(self._t + 1):  # the next description's previous frame
            t0 = time.perf_counter()
            self._previous = (self._t, render_frame(self.env, self.describer))
            self.describe_s += time.perf_counter() - t0
        return obs, reward, terminated, truncated, info

    def stats(self) -> dict[str, float]:
        return {"described": self.described, "ms_per_description": 1e3 * self.describe_s / max(1, self.described)}
