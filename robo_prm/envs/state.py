"""A read-only snapshot of what the simulator knows, taken once per step.

Predicates, the scene describer, the scripted experts and the observation vector all read
this one snapshot, so MuJoCo is queried once per step, not once per consumer.
"""
from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

from robo_prm.envs.scene import OBJECTS

_FINGERS = ("robot0:l_gripper_finger_link", "robot0:r_gripper_finger_link")


@dataclass(frozen=True)
class ObjectState:
    pos: np.ndarray  # (3,) origin of the body (its grasp point)
    vel: np.ndarray  # (3,) linear velocity, m/s
    up: np.ndarray  # (3,) the body's z axis in world coordinates (upright cup: ~[0, 0, 1])
    quat: np.ndarray  # (4,)
    fingers_touching: int  # 0, 1 or 2 fingers in contact


@dataclass(frozen=True)
class SceneState:
    gripper_pos: np.ndarray  # (3,) grip site
    gripper_vel: np.ndarray  # (3,)
    gripper_width: float  # distance between the fingers' joints, 0 (closed) … ~0.1 (open)
    objects: dict[str, ObjectState]

    @classmethod
    def from_sim(cls, model: mujoco.MjModel, data: mujoco.MjData) -> "SceneState":
        finger_ids = {model.body(n).id for n in _FINGERS}
        body_of = model.geom_bodyid
        touching: dict[int, set[int]] = {}
        for i in range(data.ncon):
            c = data.contact[i]
            b1, b2 = int(body_of[c.geom1]), int(body_of[c.geom2])
            if b1 in finger_ids:
                touching.setdefault(b2, set()).add(b1)
            elif b2 in finger_ids:
                touching.setdefault(b1, set()).add(b2)
        objects = {}
        vel6 = np.zeros(6)
        for name in OBJECTS:
            body = model.body(name)
            mujoco.mj_objectVelocity(model, data, mujoco.mjtObj.mjOBJ_BODY, body.id, vel6, 0)
            xmat = data.xmat[body.id].reshape(3, 3)
            objects[name] = ObjectState(
                pos=data.xpos[body.id].copy(),
                vel=vel6[3:].copy(),
                up=xmat[:, 2].copy(),
                quat=data.xquat[body.id].copy(),
                fingers_touching=len(touching.get(body.id, ())),
            )
        site = model.site("robot0:grip").id
        mujoco.mj_objectVelocity(model, data, mujoco.mjtObj.mjOBJ_SITE, site, vel6, 0)
        width = float(
            data.joint("robot0:l_gripper_finger_joint").qpos[0] + data.joint("robot0:r_gripper_finger_joint").qpos[0]
        )
        return cls(
            gripper_pos=data.site_xpos[site].copy(),
            gripper_vel=vel6[3:].copy(),
            gripper_width=width,
            objects=objects,
        )

    def position(self, name: str) -> np.ndarray:
        return self.gripper_pos if name == "gripper" else self.objects[name].pos
