"""A read-only snapshot of what the simulator knows, taken once per step.

Predicates, the scene describer, the scripted experts and the observation vector all read
this one snapshot, so MuJoCo is queried once per step, not once per consumer. The dataclasses
live in robo_prm.types (they cross into the describe stage); this module reads them off MuJoCo.
"""
from __future__ import annotations

import mujoco
import numpy as np

from robo_prm.envs.scene import OBJECTS
from robo_prm.types import ObjectState, SceneState

__all__ = ["ObjectState", "SceneState", "snapshot"]

_FINGERS = ("robot0:l_gripper_finger_link", "robot0:r_gripper_finger_link")


def snapshot(model: mujoco.MjModel, data: mujoco.MjData, start_pos: dict[str, np.ndarray] | None = None) -> SceneState:
    """The state now; `start_pos`: each object's origin at reset (what `moved` measures from)."""
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
    width = float(data.joint("robot0:l_gripper_finger_joint").qpos[0] + data.joint("robot0:r_gripper_finger_joint").qpos[0])
    return SceneState(gripper_pos=data.site_xpos[site].copy(), gripper_vel=vel6[3:].copy(), gripper_width=width,
                      objects=objects, start_pos=dict(start_pos or {}))
