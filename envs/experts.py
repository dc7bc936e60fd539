"""Scripted experts: waypoint controllers that solve the shipped tasks from simulator state.

They make demonstrations (the method uses ~50 per task) and the successful episodes judges
are evaluated on; `noise`/`perturb` make the failed ones. Run one with `robo_prm.envs.rollout.rollout`. An expert reads the env's
`scene_state`, so it only works on a TidyTableEnv (not from pixels).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from robo_prm.envs.rollout import uniform_action
from robo_prm.envs.scene import OBJECT_REST_Z, PLACES, TABLE_TOP_Z
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


# Which object goes where for each shipped task; y offsets keep two tools apart in the tray.
PLANS: dict[str, list[tuple]] = {
    "reach_tool": [("reach", "tool0")],
    "push_tool_from_edge": [("move", "tool0", "middle", 0.0)],
    "place_cup_in_bin": [("move", "cup0", "left_bin", 0.0)],
    "tidy_table": [("move", "tool0", "tray", -0.035), ("move", "tool1", "tray", 0.035), ("move", "cup0", "left_bin", 0.0)],
}


class ScriptedExpert:
    """Call with nothing; returns the next 4-D action for the env it was built on.

    noise: std of Gaussian action noise. perturb: probability per step of a random action
    (perturbed experts fail often and make the 'failed episode' set). plan: the steps to follow
    (PLANS' format) instead of PLANS[task name], for a task known by another name (a text variant)."""

    def __init__(self, env, noise: float = 0.0, perturb: float = 0.0, seed: int | None = None, plan: list[tuple] | None = None):
        self.env = env.unwrapped
        name = self.env.task.name
        if plan is None and name not in PLANS:
            raise ValueError(f"no scripted expert for task '{name}' (have: {', '.join(PLANS)})")
        self.plan = plan if plan is not None else PLANS[name]
        self.noise, self.perturb = noise, perturb
        self.rng = np.random.default_rng(seed)
        self.reset()

    def reset(self):
        self._stage = 0
        self._queue: list[Waypoint] = []
        self._held = 0

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
        if not self._queue and self._stage < len(self.plan):
            self._queue = self._waypoints(s, self.plan[self._stage])
            self._stage += 1
        if self._queue:
            wp = self._queue[0]
            delta = wp.target - s.gripper_pos
            if np.linalg.norm(delta) < wp.tol:
                if self._held >= wp.hold:
                    self._queue.pop(0)
                    self._held = 0
                else:
                    self._held += 1
            action = np.concatenate([np.clip(delta / 0.05 * 1.5, -1.0, 1.0), [wp.grip]])
        else:
            action = np.array([0.0, 0.0, 0.0, 1.0])
        if self.perturb and self.rng.random() < self.perturb:
            action = uniform_action(self.rng)
        if self.noise:
            action = action + self.rng.normal(0.0, self.noise, size=4)
        return np.clip(action, -1.0, 1.0).astype(np.float32)
