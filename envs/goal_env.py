"""A goal-conditioned view of single-object tasks, for SB3's `HerReplayBuffer` (the SAC+HER baseline).

`GoalTidyEnv(env)` wraps a TidyTableEnv whose task moves one object to one place (its `expert:` plan's last
step is `move`/`push OBJECT to PLACE`: push_tool_from_edge, place_cup_in_bin):

* observation: `Dict(observation=<the Box observation>, achieved_goal=<the object's position>,
  desired_goal=<the place's centre at the object's resting height>)`;
* `compute_reward(achieved_goal, desired_goal, info)`, vectorised over leading axes: 1.0 where the object lies
  over the place's rectangle centred on the desired goal (the place's half-extents) and within `Z_TOL` of
  the goal's height (not lifted), else 0.0. At the task's own goal this is the geometric part of the success
  predicate (`in_zone(hammer, middle) and not lifted(hammer, 0.03)`; `inside(glass_cup, blue_bin)`); the
  parts a position cannot show (`not grasped`, `upright`) are left to the env: the reward of a real step is
  the env's sparse success, and the episode still ends on it.

`GoalView(task)` is the observation map alone (a trained HER policy evaluated on the plain env uses it).
Registered as `robo_prm/<CamelName>Goal-v0` for every shipped task that has such a plan.
"""
from __future__ import annotations

import gymnasium
import numpy as np
from gymnasium import spaces

from robo_prm.envs.scene import OBJECT_REST_Z, OBJECTS, PLACES, TABLE_TOP_Z
from robo_prm.envs.task import Task, load_task

Z_TOL = 0.03  # `lifted(obj, 0.03)` and `inside`'s 3 cm above the floor: the goal's height tolerance
_OBS_HEAD, _OBJ_FEATURES = 7, 12  # TidyTableEnv's observation: gripper (7), then 12 per object


class GoalView:
    """Where a task's single object must go, and the Box observation → goal Dict observation map."""

    def __init__(self, task: Task):
        plan = task.plan or []
        steps = [s for s in plan if s[0] in ("move", "push")]
        if len(task.movable) != 1 or not steps or len(steps) != len(plan):
            raise ValueError(f"reward_source her: task '{task.name}' is not a single-object task whose `expert:` plan "
                             f"moves it to a place (movable: {list(task.movable)}, plan: {plan})")
        _, self.obj, place, dy = steps[-1][:4]
        self.place = PLACES[place]
        base = TABLE_TOP_Z + (0.006 if self.place.wall else 0.0)
        self.goal = np.array([self.place.center[0], self.place.center[1] + dy, base + OBJECT_REST_Z[self.obj]], dtype=np.float32)
        self.half = np.asarray(self.place.half, dtype=np.float32)
        k = _OBS_HEAD + _OBJ_FEATURES * OBJECTS.index(self.obj)
        self.pos = slice(k, k + 3)

    def observation(self, obs: np.ndarray) -> dict[str, np.ndarray]:
        obs = np.asarray(obs, dtype=np.float32)
        return {"observation": obs, "achieved_goal": obs[..., self.pos].copy(),
                "desired_goal": np.broadcast_to(self.goal, obs.shape[:-1] + (3,)).copy()}

    def compute_reward(self, achieved_goal, desired_goal, info=None) -> np.ndarray:
        d = np.abs(np.asarray(achieved_goal, dtype=np.float64) - np.asarray(desired_goal, dtype=np.float64))
        hit = (d[..., 0] <= self.half[0]) & (d[..., 1] <= self.half[1]) & (d[..., 2] < Z_TOL)
        return hit.astype(np.float32)


class GoalTidyEnv(gymnasium.Wrapper):
    """The Dict-observation, `compute_reward` view of a tidy env (module doc)."""

    def __init__(self, env: gymnasium.Env):
        super().__init__(env)
        self.view = GoalView(env.unwrapped.task)
        box = env.observation_space
        goal = spaces.Box(-np.inf, np.inf, shape=(3,), dtype=np.float32)
        self.observation_space = spaces.Dict({"observation": box, "achieved_goal": goal, "desired_goal": goal})

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return self.view.observation(obs), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self.view.observation(obs), reward, terminated, truncated, info

    def compute_reward(self, achieved_goal, desired_goal, info) -> np.ndarray:
        return self.view.compute_reward(achieved_goal, desired_goal, info)


def make_goal_env(task: str = "push_tool_from_edge", **kwargs) -> GoalTidyEnv:
    """Entry point of the `robo_prm/<CamelName>Goal-v0` ids: a sparse TidyTableEnv in the goal view."""
    from robo_prm.envs.tidy_env import TidyTableEnv

    return GoalTidyEnv(TidyTableEnv(task, **kwargs))


def goal_tasks() -> list[str]:
    """Shipped tasks with a goal view."""
    from robo_prm.envs.task import shipped_tasks

    out = []
    for name in shipped_tasks():
        try:
            GoalView(load_task(name))
        except ValueError:
            continue
        out.append(name)
    return out
