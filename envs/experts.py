"""Scripted experts: waypoint controllers that follow a task's `expert:` plan from simulator state.

They make demonstrations (the method uses ~50 per task) and the successful episodes judges
are evaluated on; `noise`/`perturb` make the failed ones. Run one with `robo_prm.envs.rollout.rollout`. An expert reads the env's
`scene_state`, so it only works on a TidyTableEnv (not from pixels). The plan is the task file's
(`expert:` lines, parsed by `robo_prm.envs.plan`); `plan=` overrides it for a task under another name.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from robo_prm.envs.rollout import uniform_action
from robo_prm.envs.plan import PlanStep
from robo_prm.envs.scene import OBJECT_FOOTPRINT, OBJECT_REST_Z, PLACES, TABLE_TOP_Z
from robo_prm.envs.state import SceneState

CARRY_Z = TABLE_TOP_Z + 0.16  # clears the bin walls with a cup hanging below the fingers
HOVER = 0.08
GRASP_OFFSET = {"tool0": np.array([-0.02, 0.0, 0.0]), "tool1": np.array([-0.01, 0.0, 0.0]), "cup0": np.zeros(3)}


@dataclass
class Waypoint:
    target: np.ndarray
    grip: float  # +1 open, -1 close
    tol: float = 0.01
    hold: int = 0  # extra steps to wait once reached (closing the fingers takes time)
    speed: float = 1.0  # largest action component (pushing goes slower than carrying)


PUSH_Z = TABLE_TOP_Z + 0.03  # grip site height while pushing: fingertips just clear the table
PUSH_DONE = 0.04  # a push is repeated (up to PUSH_TRIES times) until the object is this close to its target
PUSH_TRIES = 4
MOVE_TRIES = 3  # a pick-and-place whose object did not end up in its place (a grasp that slipped) is tried again
PLAN_PASSES = 2  # at the plan's end, steps undone since (a placed tool knocked out by the next) are gone through again


def shipped_plans() -> dict[str, list[PlanStep]]:
    """The plans of the shipped tasks (their `expert:` lines), by task name."""
    return dict(_shipped_plans())


@functools.lru_cache(maxsize=1)
def _shipped_plans() -> dict[str, list[PlanStep]]:
    from robo_prm.envs.task import load_task, shipped_tasks

    return {name: plan for name in shipped_tasks() if (plan := load_task(name).plan) is not None}


def __getattr__(name: str):
    if name == "PLANS":  # the shipped tasks' plans, now read from their task files
        return shipped_plans()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class ScriptedExpert:
    """Call with nothing; returns the next 4-D action for the env it was built on.

    noise: std of Gaussian action noise. perturb: probability per step of a random action
    (perturbed experts fail often and make the 'failed episode' set). plan: steps to follow
    (`robo_prm.envs.plan` tuples) instead of the task file's `expert:` plan."""

    def __init__(self, env, noise: float = 0.0, perturb: float = 0.0, seed: int | None = None, plan: list[tuple] | None = None):
        self.env = env.unwrapped
        task = self.env.task
        if plan is None and task.plan is None:
            raise ValueError(f"no scripted expert for task '{task.name}': {task.source} has no `expert:` plan")
        self.plan = [tuple(step) for step in (plan if plan is not None else task.plan)]
        self.noise, self.perturb = noise, perturb
        self.rng = np.random.default_rng(seed)
        self.reset()

    def reset(self):
        """Start the plan again from the state the env is in whenever the expert next acts: steps whose object is
        already in its place are skipped, and a pick-and-place whose object is already held starts at the lift — so
        an expert reset mid-episode takes over from wherever another policy left the scene."""
        self._stage = 0
        self._queue: list[Waypoint] = []
        self._held = 0
        self._current: tuple | None = None  # the push or move under way (repeated until the object arrives)
        self._tries = 0
        self._passes = 1

    def _next(self, s: SceneState) -> list[Waypoint]:
        """Waypoints for what comes next: the current push or move again, or the plan's next step not yet done."""
        step = self._current
        if step is not None and self._tries < (PUSH_TRIES if step[0] == "push" else MOVE_TRIES) and not _done(s, step):
            self._tries += 1
            return _push_waypoints(s, step) if step[0] == "push" else self._waypoints(s, step)
        self._current = None
        while self._stage < len(self.plan) and _done(s, self.plan[self._stage]):
            self._stage += 1
        if self._stage >= len(self.plan) and self._passes < PLAN_PASSES and any(not _done(s, st) for st in self.plan if st[0] != "reach"):
            self._stage, self._passes = 0, self._passes + 1
            return self._next(s)
        if self._stage >= len(self.plan):
            return []
        step = self.plan[self._stage]
        self._stage += 1
        if step[0] == "reach":
            return self._waypoints(s, step)
        self._current, self._tries = step, 1
        return _push_waypoints(s, step) if step[0] == "push" else self._waypoints(s, step)

    def _waypoints(self, s: SceneState, step: tuple) -> list[Waypoint]:
        kind, obj = step[0], step[1]
        p = s.objects[obj].pos + GRASP_OFFSET[obj]
        grasp_z = max(p[2], TABLE_TOP_Z + 0.025)  # lower and the fingers drag on the table
        if kind == "reach":
            return [Waypoint(np.array([p[0], p[1], grasp_z + HOVER]), 1.0, 0.02), Waypoint(np.array([p[0], p[1], grasp_z + 0.01]), 1.0)]
        place, dy = step[2], step[3]
        c = np.array([*PLACES[place].center, 0.0]) + np.array([0.0, dy, 0.0])
        base = TABLE_TOP_Z + (0.006 if PLACES[place].wall else 0.0)
        release_z = base + OBJECT_REST_Z[obj] + 0.015
        if s.objects[obj].fingers_touching >= 2:  # already held (taking over mid-carry): lift from where it is
            g = s.gripper_pos
            return [
                Waypoint(np.array([g[0], g[1], CARRY_Z]), -1.0, 0.03),
                Waypoint(np.array([c[0], c[1], CARRY_Z]), -1.0, 0.02),
                Waypoint(np.array([c[0], c[1], release_z]), -1.0, 0.01),
                Waypoint(np.array([c[0], c[1], release_z]), 1.0, 0.02, hold=3),
                Waypoint(np.array([c[0], c[1], CARRY_Z]), 1.0, 0.03),
            ]
        return [
            Waypoint(np.array([p[0], p[1], grasp_z + HOVER]), 1.0, 0.015),
            Waypoint(np.array([p[0], p[1], grasp_z]), 1.0, 0.008),
            Waypoint(np.array([p[0], p[1], grasp_z]), -1.0, 0.02, hold=6),
            Waypoint(np.array([p[0], p[1], CARRY_Z]), -1.0, 0.03),
            Waypoint(np.array([c[0], c[1], CARRY_Z]), -1.0, 0.02),
            Waypoint(np.array([c[0], c[1], release_z]), -1.0, 0.01),
            Waypoint(np.array([c[0], c[1], release_z]), 1.0, 0.02, hold=3),
            Waypoint(np.array([c[0], c[1], CARRY_Z]), 1.0, 0.03),
        ]

    def __call__(self, obs=None) -> np.ndarray:
        s = self.env.scene_state
        if not self._queue:
            self._queue = self._next(s)
        if self._queue:
            wp = self._queue[0]
            delta = wp.target - s.gripper_pos
            if np.linalg.norm(delta) < wp.tol:
                if self._held >= wp.hold:
                    self._queue.pop(0)
                    self._held = 0
                else:
                    self._held += 1
            move = delta / 0.05 * 1.5
            if wp.speed < 1.0:  # a slow leg (a push) keeps its direction: scaled, not clipped per axis
                move = move * min(1.0, wp.speed / max(1e-9, float(np.abs(move).max())))
            action = np.concatenate([np.clip(move, -1.0, 1.0), [wp.grip]])
        else:
            action = np.array([0.0, 0.0, 0.0, 1.0])
        if self.perturb and self.rng.random() < self.perturb:
            action = uniform_action(self.rng)
        if self.noise:
            action = action + self.rng.normal(0.0, self.noise, size=4)
        return np.clip(action, -1.0, 1.0).astype(np.float32)


def _done(s: SceneState, step: tuple) -> bool:
    """Whether a plan step's object is already where the step puts it (a reach is never done in advance)."""
    if step[0] == "reach":
        return False
    if step[0] == "push":
        return _push_left(s, step) <= PUSH_DONE
    obj, place = s.objects[step[1]], PLACES[step[2]]
    resting = obj.pos[2] < TABLE_TOP_Z + 0.006 + OBJECT_REST_Z[step[1]] + 0.03
    return bool(place.contains_xy(obj.pos[:2]) and resting and obj.fingers_touching < 2)


def _push_target(step: tuple) -> np.ndarray:
    return np.asarray(PLACES[step[2]].center) + np.array([0.0, step[3]])


def _push_left(s: SceneState, step: tuple) -> float:
    """Horizontal distance still to push the object."""
    return float(np.linalg.norm(_push_target(step) - s.objects[step[1]].pos[:2]))


def _push_waypoints(s: SceneState, step: tuple) -> list[Waypoint]:
    """Slide the object toward its place with the fingers closed: come down behind it (on the far side from the
    target, clear of its footprint), push along the line to the target at 40 % speed, back off, rise."""
    obj = step[1]
    p = s.objects[obj].pos
    target = _push_target(step)
    u = target - p[:2]
    u = u / max(1e-9, float(np.linalg.norm(u)))
    back = _extent_along(s, obj, -u)
    start, end = p[:2] - u * (back + 0.035), target - u * (back + 0.012)
    retreat = end - u * 0.03
    return [
        Waypoint(np.array([*start, PUSH_Z + HOVER]), -1.0, 0.015),
        Waypoint(np.array([*start, PUSH_Z]), -1.0, 0.008),
        Waypoint(np.array([*end, PUSH_Z]), -1.0, 0.01, speed=0.4),
        Waypoint(np.array([*retreat, PUSH_Z]), -1.0, 0.015),
        Waypoint(np.array([*retreat, PUSH_Z + HOVER]), -1.0, 0.02),
    ]


def _extent_along(s: SceneState, obj: str, direction: np.ndarray) -> float:
    """How far the object's footprint reaches from its origin along a horizontal direction, at its current yaw."""
    w, x, y, z = s.objects[obj].quat
    yaw = np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))
    rot = np.array([[np.cos(yaw), -np.sin(yaw)], [np.sin(yaw), np.cos(yaw)]])
    a = rot.T @ direction  # the direction in the body frame
    return max(gx * a[0] + gy * a[1] + hx * abs(a[0]) + hy * abs(a[1]) for gx, gy, hx, hy in OBJECT_FOOTPRINT[obj])


def run_expert(task, episodes: int = 20, seed: int = 0, perturb: float = 0.0) -> dict:
    """Run a task's `expert:` plan on seeds seed..seed+episodes-1 (one expert carried across the episodes;
    perturbed with its own seed 0, as docs/TASKS.md measures) → success rate and mean episode length."""
    from robo_prm.envs.rollout import rollout
    from robo_prm.envs.tidy_env import TidyTableEnv

    env = TidyTableEnv(task)
    try:
        expert = ScriptedExpert(env, perturb=perturb, seed=0)
        runs = [rollout(env, expert, s) for s in range(seed, seed + episodes)]
    finally:
        env.close()
    wins = sum(ep.success for ep in runs)
    return {"task": env.task.name, "success_rate": wins / max(1, episodes), "successes": wins, "episodes": episodes,
            # a success that already holds at reset teaches nothing (the generator drops such tasks)
            "solved_at_reset": sum(bool(ep.infos[0]["is_success"]) for ep in runs),
            "mean_length": float(np.mean([ep.steps for ep in runs])) if runs else 0.0, "seed": seed, "perturb": perturb,
            "lengths": [ep.steps for ep in runs]}
