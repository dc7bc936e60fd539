"""Tidy-table tasks as gymnasium environments.

Every shipped task file becomes `robo_prm/<CamelName>-v0` (reach_tool → robo_prm/ReachTool-v0);
`robo_prm/Tidy-v0` takes any task: `gymnasium.make("robo_prm/Tidy-v0", task="my_task.yaml")`.
Single-object tasks also get a goal-conditioned view for SAC+HER, `robo_prm/<CamelName>Goal-v0` (goal_env.py).
"""
from __future__ import annotations

import gymnasium

from robo_prm.envs.task import shipped_tasks

ENTRY_POINT = "robo_prm.envs.tidy_env:TidyTableEnv"


def env_id(task_name: str) -> str:
    return "robo_prm/" + "".join(part.capitalize() for part in task_name.split("_")) + "-v0"


def register_all() -> list[str]:
    ids = []
    if "robo_prm/Tidy-v0" not in gymnasium.registry:
        gymnasium.register("robo_prm/Tidy-v0", entry_point=ENTRY_POINT)
    for name in shipped_tasks():
        eid = env_id(name)
        if eid not in gymnasium.registry:
            gymnasium.register(eid, entry_point=ENTRY_POINT, kwargs={"task": name})
        ids.append(eid)
    return ids


def register_goal_views() -> list[str]:
    """`robo_prm/<CamelName>Goal-v0`: the goal-conditioned view (goal_env.py) of each single-object shipped task."""
    from robo_prm.envs.goal_env import goal_tasks

    ids = []
    for name in goal_tasks():
        gid = env_id(name).replace("-v0", "Goal-v0")
        if gid not in gymnasium.registry:
            gymnasium.register(gid, entry_point="robo_prm.envs.goal_env:make_goal_env", kwargs={"task": name})
        ids.append(gid)
    return ids


REGISTERED_IDS = register_all()
GOAL_IDS = register_goal_views()


def make_env(task: str, **kwargs) -> gymnasium.Env:
    """A tidy env for a shipped task name or any task YAML path."""
    return gymnasium.make("robo_prm/Tidy-v0", task=task, **kwargs)
