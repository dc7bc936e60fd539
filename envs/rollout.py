"""The one episode loop, with a pluggable policy.

`rollout(env, policy, seed)` resets the env with `seed`, calls `policy(obs)` until the episode ends
(or `max_steps` actions were taken) and returns a `Trajectory`. A policy is any callable obs → action:
`ScriptedExpert` (clean or perturbed, `robo_prm.envs.experts`), `RandomPolicy` below, a trained SB3
model (`robo_prm.train.rollouts.TrainedPolicy`) or a plain function; one with a `reset()` method is
reset at the start of each episode.

`on_step(step)` sees every state as it happens, the reset state first (`step.t == 0`, no action), and
ends the episode early by returning True. Evaluation, labelling, perception data, the judge
benchmarks and the experts' success rates all run through here. The env returns state, never text:
callers that want descriptions pass an env wrapped in `DescribeWrapper` and read `info["description"]`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

Policy = Callable[[Any], np.ndarray]


@dataclass
class Step:
    """One state of an episode, as `on_step` sees it."""

    t: int  # actions taken so far: 0 is the state after reset
    obs: Any
    info: dict
    action: np.ndarray | None = None  # the action that led here (None after reset)
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    frame: np.ndarray | None = None  # env.render() of this state, when rendering

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


@dataclass
class Trajectory:
    """One episode: `infos` and `frames` hold the reset state first, then one entry per action."""

    seed: int | None
    infos: list[dict] = field(default_factory=list)
    actions: list[np.ndarray] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    frames: list[np.ndarray] | None = None
    terminated: bool = False
    truncated: bool = False

    @property
    def steps(self) -> int:
        return len(self.actions)

    @property
    def success(self) -> bool:
        return bool(self.infos[-1].get("is_success", False))


def rollout(env, policy: Policy, seed: int | None, on_step: Callable[[Step], Any] | None = None,
            max_steps: int | None = None, render: bool | tuple[str, ...] = False,
            start: tuple[Any, dict] | None = None) -> Trajectory:
    """Run one episode of `policy` on `env`.

    render: keep `env.render()` of every state in `Trajectory.frames` (and `Step.frame`); a tuple of camera view
    names keeps those views side by side (`TidyTableEnv.render_views`).
    start: `(obs, info)` of an env the caller has already reset (and perhaps changed, as perception's
    scattered scenes are); the episode starts there instead of at `env.reset(seed=seed)`."""
    obs, info = start if start is not None else env.reset(seed=seed)
    if hasattr(policy, "reset"):
        policy.reset()
    frame = (lambda: env.unwrapped.render_views(render)) if isinstance(render, tuple) else env.render
    step = Step(0, obs, info, frame=frame() if render else None)
    traj = Trajectory(seed, [info], frames=[step.frame] if render else None)
    stop = on_step is not None and bool(on_step(step))
    while not (stop or step.done or (max_steps is not None and step.t >= max_steps)):
        action = policy(step.obs)
        obs, reward, terminated, truncated, info = env.step(action)
        step = Step(step.t + 1, obs, info, action, float(reward), bool(terminated), bool(truncated),
                    frame() if render else None)
        traj.infos.append(info)
        traj.actions.append(action)
        traj.rewards.append(step.reward)
        if render:
            traj.frames.append(step.frame)
        stop = on_step is not None and bool(on_step(step))
    traj.terminated, traj.truncated = step.terminated, step.truncated
    return traj


def uniform_action(rng: np.random.Generator) -> np.ndarray:
    """A uniform random action in [-1, 1]⁴ (float64, as drawn)."""
    return rng.uniform(-1, 1, size=4)


class RandomPolicy:
    """Uniform random actions in [-1, 1]⁴ (float32).

    rng: a Generator (shared with the caller: its draws continue the caller's stream) or a seed.
    smooth > 0: a random walk a ← smooth·a + (1 − smooth)·u, restarted at every episode, which covers
    the workspace better than independent actions. binary_grip: the gripper command is ±1 with equal
    odds (fingers open or close instead of hovering)."""

    def __init__(self, rng: np.random.Generator | int | None = None, smooth: float = 0.0, binary_grip: bool = False):
        self.rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        self.smooth, self.binary_grip = float(smooth), binary_grip
        self.reset()

    def reset(self):
        self._a = np.zeros(4)

    def __call__(self, obs=None) -> np.ndarray:
        u = uniform_action(self.rng)
        self._a = self.smooth * self._a + (1.0 - self.smooth) * u if self.smooth else u
        a = self._a.copy()
        if self.binary_grip:
            a[3] = 1.0 if self.rng.uniform() < 0.5 else -1.0
        return a.astype(np.float32)
