"""State → plain English, deterministically: state → SceneFacts (facts.py) → text (render.py).

Facts are task-independent (where each named object is relative to the gripper, the bins and
the table edges; what is grasped, lifted, tipped or fallen); the task only supplies the words.
Distances are bucketed into words so that equal situations give equal text: this text is what
the LLM judge reads and what the exact-match judgement cache keys on.
"""
from __future__ import annotations

import numpy as np

from robo_prm.describe.facts import NEAR_EDGE_M, SceneFacts, distance_words, scene_facts
from robo_prm.describe.render import render
from robo_prm.envs.task import Task
from robo_prm.types import SceneDescription, SceneState, TaskStatus

__all__ = ["NEAR_EDGE_M", "StateCaptioner", "describe_state", "distance_words"]


class StateCaptioner:
    """Describe a SceneState for one task. `milestone_line=False` hides the milestone count
    (held-out evaluation: the judge must read the goal from the task text alone)."""

    needs_frame = False

    def __init__(self, task: Task, milestone_line: bool = True):
        self.task = task
        self.milestone_line = milestone_line and bool(task.milestone_checks)

    def facts(self, state: SceneState, status: TaskStatus | None = None) -> SceneFacts:
        task = self.task
        milestones = None
        if task.milestone_checks:
            status = status or task.status(state)
            milestones = (status.reached, len(task.milestone_checks))
        return scene_facts(task.movable, state, milestones, moved=task.moved_objects, targets=task.carry_targets)

    def features(self, s: SceneState) -> np.ndarray:
        """Positions that matter to this task, for the judgement cache's nearest-neighbour reuse."""
        parts = [s.gripper_pos, [s.gripper_width]] + [s.objects[n].pos for n in self.task.movable]
        return np.concatenate(parts).astype(np.float32)

    def describe_step(self, state: SceneState, status: TaskStatus, frame: np.ndarray | None = None) -> SceneDescription:
        return self(state, status=status)

    def __call__(self, state: SceneState, features: np.ndarray | None = None, status: TaskStatus | None = None) -> SceneDescription:
        status = status or self.task.status(state)
        facts = self.facts(state, status)
        text, named = render(facts, self.task.word, self.milestone_line)
        return SceneDescription(
            text=text,
            facts=named,
            milestones_reached=facts.milestones_reached,
            milestones_total=facts.milestones_total,
            hazards=status.hazards,
            rule_progress=status.rule_progress,
            features=features if features is not None else self.features(state),
        )


def describe_state(task: Task, state: SceneState, milestone_line: bool = True) -> SceneDescription:
    return StateCaptioner(task, milestone_line)(state)
