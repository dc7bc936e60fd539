"""TidyTableEnv: the Fetch arm at a table with tools, a glass cup, a bin and a tray."""
from __future__ import annotations

import os
from typing import Any

import gymnasium
import mujoco
import numpy as np
from gymnasium import spaces
from gymnasium.utils import EzPickle
from gymnasium_robotics.envs.fetch.fetch_env import MujocoFetchEnv

from robo_prm.envs.scene import (
    CONTAINER_START,
    CONTAINERS,
    OBJECT_REST_Z,
    OBJECTS,
    PARKED_XY,
    PLACES,
    START_YAW,
    START_ZONES,
    TABLE_TOP_Z,
    scene_xml_path,
)
from robo_prm.envs.state import SceneState, snapshot
from robo_prm.envs.task import Task, load_task


def load_triton_before_egl() -> None:
    """Import triton (if installed) before MuJoCo makes its first EGL context.

    torch's CUDA build ships triton, whose bundled LLVM clashes with the one Mesa's llvmpipe loads for headless
    EGL: `import triton` after a context exists segfaults (transformers reaches it through torch._dynamo when it
    loads MiniLM). Imported first, both work and frames are unchanged (checked pixel for pixel)."""
    try:
        import triton  # noqa: F401
    except Exception:  # noqa: BLE001 - no triton (a CPU torch) or a broken one: nothing to order
        pass


# A fixed camera in front of the table, looking back at the robot: the front edge is nearest.
CAMERA = {"distance": 1.05, "azimuth": 180.0, "elevation": -42.0, "lookat": np.array([1.30, 0.75, 0.42])}
# The cameras a perception model may read (`render_views`): the front camera above, and one at the table's side,
# which sees front-to-back distances and heights that the front camera sees end-on. (A camera looking straight
# down was tried: the arm hides most of the table from it.)
VIEWS = {"front": CAMERA, "side": {"distance": 0.95, "azimuth": 270.0, "elevation": -35.0, "lookat": np.array([1.30, 0.75, 0.45])}}
REWARD_MODES = ("sparse", "dense")
_OBJ_FEATURES = 12  # pos(3), pos - gripper(3), velocity(3), up axis(3)


class TidyTableEnv(MujocoFetchEnv, EzPickle):
    """
    ## Description
    The gymnasium-robotics Fetch arm (mocap-controlled end effector, two-finger gripper) at a
    table whose front edge faces the camera. The scene holds a hammer (`tool0`), a screwdriver
    (`tool1`), a glass cup (`cup0`), a blue bin (`left_bin`) and a green tray (`tray`). A task
    file (see docs/TASKS.md) names the objects it uses, where they start, and the success,
    milestone and hazard predicates; objects a task does not name wait on the floor out of view.

    ## Action Space
    `Box(-1, 1, (4,))`: end-effector displacement dx, dy, dz (×5 cm per step) and the gripper
    command (-1 closes, +1 opens), exactly as Fetch.

    ## Observation Space
    `Box(-inf, inf, (7 + 12·3,), float32)`: gripper position (3), gripper velocity (3), finger
    opening (1); then for each of tool0, tool1, cup0: position (3), position relative to the
    gripper (3), linear velocity (3), the body's up axis (3).

    ## Rewards
    `reward_mode="sparse"`: 1.0 on the step the task's success predicate holds, else 0.0 (the
    "environment reward" of the blended reward). `reward_mode="dense"`: the task's hand-written
    `dense_reward` terms (or, when it has none, the simulator's milestone progress) + 1.0 on success.
    `info` carries `status` (a TaskStatus: every task check evaluated once), `predicates` (success,
    each milestone, each hazard check by name), `milestones_reached`, `hazards` (active hazard names)
    and `is_success`. The env says nothing in words: `robo_prm.describe.DescribeWrapper` adds
    `info["description"]`.

    ## Starting State
    The arm starts above the table centre; each named object is placed uniformly at random in
    its task `start` zone (default `anywhere`), non-overlapping, yaw jittered by ±0.15 rad.
    Same seed → same episode.

    ## Episode End
    Terminates on success; truncates after the task's `max_steps` (default 50).

    ## Arguments
    `task` (shipped name or YAML path), `reward_mode`, `render_mode` (`rgb_array`/`human`),
    `width`, `height` (frame size).
    """

    # "human" needs a window (MUJOCO_GL=glfw); offered only then, since checkers open every listed mode.
    metadata = {"render_modes": ["rgb_array"] + (["human"] if os.environ.get("MUJOCO_GL") == "glfw" else []), "render_fps": 25}
    compute_reward = property()  # hide Fetch's GoalEnv compute_reward: SB3 would take this Box-obs env for a goal env

    def __init__(
        self,
        task: str | Task = "reach_tool",
        reward_mode: str = "sparse",
        render_mode: str | None = None,
        width: int = 224,
        height: int = 224,
    ):
        task_arg = task.source if isinstance(task, Task) else str(task)
        EzPickle.__init__(self, task_arg, reward_mode, render_mode, width, height)
        if reward_mode not in REWARD_MODES:
            raise ValueError(f"reward_mode must be one of {REWARD_MODES}, got '{reward_mode}'")
        self.task = task if isinstance(task, Task) else load_task(task)
        self.reward_mode = reward_mode
        self._steps = 0
        self._state: SceneState | None = None
        self._start_pos: dict[str, np.ndarray] = {}  # each object's origin at reset: `moved` measures from here
        if render_mode is not None:
            load_triton_before_egl()
        MujocoFetchEnv.__init__(
            self,
            model_path=scene_xml_path(self.task.spec.scene),
            has_object=False,
            block_gripper=False,
            n_substeps=20,
            gripper_extra_height=0.2,
            target_in_the_air=False,
            target_offset=0.0,
            obj_range=0.0,
            target_range=0.0,
            distance_threshold=0.05,
            initial_qpos={"robot0:slide0": 0.405, "robot0:slide1": 0.48, "robot0:slide2": 0.0},
            reward_type="sparse",
            render_mode=render_mode,
            width=width,
            height=height,
            default_camera_config=CAMERA,
        )
        n = 7 + _OBJ_FEATURES * len(OBJECTS)
        self.observation_space = spaces.Box(-np.inf, np.inf, shape=(n,), dtype=np.float32)
        self._joint_qpos_adr = {name: self.model.joint(f"{name}:joint").qposadr[0] for name in OBJECTS}
        self._joint_qvel_adr = {name: self.model.joint(f"{name}:joint").dofadr[0] for name in OBJECTS}
        self._hide_unused_objects()

    # ---- gymnasium API ----------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """`options={"expert_start": f, "expert": policy}` (0 ≤ f ≤ 1): start part-way along a policy's path (the
        task's scripted `expert:` plan), f of the way from the real start to just before success (the curriculum of
        robo_prm/train/curriculum.py). `policy` is called with the observation, and reset first if it can be."""
        # gymnasium.Env.reset seeds np_random; the GoalEnv reset in between insists on Dict observations.
        gymnasium.Env.reset(self, seed=seed, options=options)
        self._reset_sim()
        self._steps = 0
        fraction = float((options or {}).get("expert_start", 0.0))
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"options['expert_start'] must be in [0, 1], got {fraction}")
        if fraction > 0.0:
            if not callable((options or {}).get("expert")):
                raise ValueError("options['expert_start'] needs options['expert'], the policy to follow")
            self._expert_start(options["expert"], fraction)
        state = self._snapshot()
        return self._observe(state), self._info(state)

    def step(self, action):
        action = np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0)
        if action.shape != (4,):
            raise ValueError(f"action must have shape (4,), got {action.shape}")
        self._set_action(action)
        self._mujoco_step(action)
        self._step_callback()
        self._steps += 1
        state = self._snapshot()
        info = self._info(state)
        success = info["is_success"]
        if self.reward_mode == "sparse":
            reward = float(success)
        else:
            dense = self.task.dense_reward(state) if self.task.dense_terms else self._status.rule_progress
            reward = float(dense) + float(success)
        terminated = bool(success)
        truncated = bool(self._steps >= self.task.spec.max_steps and not terminated)
        if self.render_mode == "human":
            self.render()
        return self._observe(state), reward, terminated, truncated, info

    # ---- gymnasium-robotics hooks --------------------------------------------------
    def _sample_goal(self):
        return np.zeros(0)

    def _get_obs(self):
        # Called by the Fetch base class while building spaces; our own observation is _observe().
        return {"observation": np.zeros(0), "achieved_goal": np.zeros(0), "desired_goal": np.zeros(0)}

    def render_views(self, views: tuple[str, ...] = ("front",)) -> np.ndarray:
        """The frame of each named camera (`VIEWS`), side by side: (height, len(views)·width, 3) uint8. The front
        camera alone is `render()`'s frame."""
        unknown = [v for v in views if v not in VIEWS]
        if unknown or not views:
            raise ValueError(f"unknown camera view(s) {unknown or '(none)'}: known are {sorted(VIEWS)}")
        if tuple(views) == ("front",):
            return self.render()
        cam = self.mujoco_renderer._get_viewer("rgb_array").cam  # gymnasium keeps one free camera per viewer
        tiles = []
        try:
            for v in views:
                cfg = VIEWS[v]
                cam.distance, cam.azimuth, cam.elevation = cfg["distance"], cfg["azimuth"], cfg["elevation"]
                cam.lookat[:] = cfg["lookat"]
                tiles.append(self.render())
        finally:
            cam.distance, cam.azimuth, cam.elevation = CAMERA["distance"], CAMERA["azimuth"], CAMERA["elevation"]
            cam.lookat[:] = CAMERA["lookat"]
        return np.concatenate(tiles, axis=1)

    def _render_callback(self):
        pass  # no goal marker to draw

    def _reset_sim(self):
        mujoco.mj_resetData(self.model, self.data)
        self.data.time = self.initial_time
        self.data.qpos[:] = self.initial_qpos
        self.data.qvel[:] = self.initial_qvel
        placed: list[np.ndarray] = []
        for name in OBJECTS:
            if name not in self.task.movable:
                self._set_pose(name, np.array([*PARKED_XY[name], OBJECT_REST_Z[name]]))
                continue
            zone = self.task.spec.start.get(name, "anywhere")
            xy, on_z = self._sample_xy(zone, placed)
            placed.append(xy)
            yaw = self.np_random.uniform(-START_YAW, START_YAW)
            self._set_pose(name, np.array([*xy, on_z + OBJECT_REST_Z[name]]), yaw)
        mujoco.mj_forward(self.model, self.data)
        self._start_pos = {name: self.data.body(name).xpos.copy() for name in OBJECTS}
        return True

    def _expert_start(self, expert, fraction: float, margin: int = 2):
        """Follow `expert` from the real start (to success or max_steps), then restore the state `fraction` of the
        way to `margin` steps before success. The step counter and what `moved` measures from stay those of the
        real start."""
        obs = self._observe(self._snapshot())  # a scripted expert reads scene_state: this reset's, not the last episode's
        if hasattr(expert, "reset"):
            expert.reset()
        spec = mujoco.mjtState.mjSTATE_INTEGRATION
        states = []
        for _ in range(self.task.spec.max_steps):
            buf = np.empty(mujoco.mj_stateSize(self.model, spec))
            mujoco.mj_getState(self.model, self.data, buf, spec)
            states.append(buf)
            obs = self.step(expert(obs))[0]
            if self._status.success:
                break
        last = max(0, len(states) - margin) if self._status.success else len(states) - 1
        mujoco.mj_setState(self.model, self.data, states[int(round(fraction * last))], spec)
        mujoco.mj_forward(self.model, self.data)
        self._steps = 0

    # ---- helpers ------------------------------------------------------------------
    def _hide_unused_objects(self):
        """Objects the task does not name are parked, invisible and without collisions (this
        env's own model copy), so frames and physics show only what the task talks about."""
        for name in OBJECTS:
            if name in self.task.movable:
                continue
            body = self.model.body(name).id
            for g in np.flatnonzero(self.model.geom_bodyid == body):
                self.model.geom_rgba[g, 3] = 0.0
                self.model.geom_contype[g] = 0
                self.model.geom_conaffinity[g] = 0
                self.model.geom_matid[g] = -1
            self.model.body_gravcomp[body] = 1.0  # stays where parked

    def _sample_xy(self, zone: str, placed: list[np.ndarray]) -> tuple[np.ndarray, float]:
        if zone in CONTAINERS:
            c = np.asarray(PLACES[zone].center)
            return c + self.np_random.uniform(-CONTAINER_START, CONTAINER_START, size=2), TABLE_TOP_Z + 0.006
        (x0, x1), (y0, y1) = START_ZONES[zone]
        for _ in range(100):
            xy = np.array([self.np_random.uniform(x0, x1), self.np_random.uniform(y0, y1)])
            if all(np.linalg.norm(xy - p) > 0.09 for p in placed):
                return xy, TABLE_TOP_Z
        return xy, TABLE_TOP_Z  # crowded zone: accept the last draw rather than loop forever

    def _set_pose(self, name: str, pos: np.ndarray, yaw: float = 0.0):
        adr, vadr = self._joint_qpos_adr[name], self._joint_qvel_adr[name]
        self.data.qpos[adr : adr + 3] = pos
        self.data.qpos[adr + 3 : adr + 7] = [np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)]
        self.data.qvel[vadr : vadr + 6] = 0.0

    def place(self, name: str, pos, yaw: float = 0.0, as_start: bool = False) -> SceneState:
        """Put object `name` (sim name) at `pos` at rest; for tests and hand-made scenes. The pose it had at
        reset stays what `moved` measures from, unless `as_start` makes `pos` that pose."""
        self._set_pose(name, np.asarray(pos, dtype=np.float64), yaw)
        mujoco.mj_forward(self.model, self.data)
        if as_start:
            self._start_pos[name] = self.data.body(name).xpos.copy()
        return self._snapshot()

    def shift(self, name: str, dxy) -> SceneState:
        """Slide object `name` (sim name) by `dxy` (metres) across the table, orientation kept, at rest: a
        disturbance (someone bumps the table) that labelling uses so "has it moved?" has positives that stand."""
        adr = self._joint_qpos_adr[name]
        self.data.qpos[adr : adr + 2] += np.asarray(dxy, dtype=np.float64)[:2]
        self.data.qvel[self._joint_qvel_adr[name] : self._joint_qvel_adr[name] + 6] = 0.0
        mujoco.mj_forward(self.model, self.data)
        return self._snapshot()

    def _snapshot(self) -> SceneState:
        self._state = snapshot(self.model, self.data, self._start_pos)
        return self._state

    @property
    def scene_state(self) -> SceneState:
        return self._state if self._state is not None else self._snapshot()

    def _observe(self, s: SceneState) -> np.ndarray:
        parts = [s.gripper_pos, s.gripper_vel, [s.gripper_width]]
        for name in OBJECTS:
            o = s.objects[name]
            parts += [o.pos, o.pos - s.gripper_pos, o.vel, o.up]
        obs = np.concatenate(parts).astype(np.float32)
        return np.nan_to_num(obs, nan=0.0, posinf=0.0, neginf=0.0)

    def _info(self, s: SceneState) -> dict[str, Any]:
        status = self._status = self.task.status(s)  # every predicate evaluated once per step
        info: dict[str, Any] = {
            "status": status,
            "is_success": status.success,
            "predicates": self.task.predicate_values(s, status),
            "milestones_reached": status.reached,
            "milestones_total": len(self.task.milestone_checks),
            "hazards": status.hazards,
            "step": self._steps,
        }
        return info
