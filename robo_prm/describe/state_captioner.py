"""State → plain English, deterministically.

Facts are task-independent (where each named object is relative to the gripper, the bins and
the table edges; what is grasped, lifted, tipped or fallen); the task only supplies the words.
Distances are bucketed into words so that equal situations give equal text: this text is what
the LLM judge reads and what the exact-match judgement cache keys on.
"""
from __future__ import annotations

import numpy as np

from robo_prm.envs.predicates import edge_distance_xy
from robo_prm.envs.scene import CONTAINERS, OBJECT_KIND, PLACES, TABLE_TOP_Z
from robo_prm.envs.state import SceneState
from robo_prm.task import Task, TaskStatus
from robo_prm.types import SceneDescription

_CM_BUCKETS = (3, 5, 10, 15, 20, 30)
NEAR_EDGE_M = 0.10  # closer than this to an edge, the edge is worth a sentence


def distance_words(d: float) -> str:
    """0.034 → '5 cm'; below 2 cm 'touching'; beyond 30 cm 'far'."""
    cm = d * 100.0
    if cm < 2.0:
        return "touching"
    for b in _CM_BUCKETS:
        if cm <= b:
            return f"{b} cm"
    return "far"


def _an(word: str) -> str:
    return f"the {word}"


class StateCaptioner:
    """Describe a SceneState for one task. `milestone_line=False` hides the milestone count
    (held-out evaluation: the judge must read the goal from the task text alone)."""

    def __init__(self, task: Task, milestone_line: bool = True):
        self.task = task
        self.milestone_line = milestone_line and bool(task.milestone_checks)
        self.places = {p: task.word(p) for p in PLACES}

    def __call__(self, state: SceneState, features: np.ndarray | None = None, status: TaskStatus | None = None) -> SceneDescription:
        task = self.task
        status = status or task.status(state)
        facts: list[str] = []
        sentences: list[str] = [self._gripper_sentence(state, facts)]
        for sim in task.movable:
            sentences.append(self._object_sentence(sim, state, facts))
        reached = total = None
        if task.milestone_checks:
            reached, total = status.reached, len(task.milestone_checks)
            if self.milestone_line:
                sentences.append(f"Milestones reached: {reached} of {total}.")
        return SceneDescription(
            text=" ".join(sentences),
            facts=tuple(facts),
            milestones_reached=reached,
            milestones_total=total,
            hazards=status.hazards,
            rule_progress=status.rule_progress,
            features=features,
        )

    # ---- sentences ------------------------------------------------------------
    def _gripper_sentence(self, s: SceneState, facts: list[str]) -> str:
        task = self.task
        held = [sim for sim in task.movable if s.objects[sim].fingers_touching >= 2]
        opened = "open" if s.gripper_width > 0.03 and not held else "closed"  # fingers around a cup stay 4 cm apart
        facts.append(f"gripper_{opened}")
        if held:
            return f"The gripper is closed around {_an(task.word(held[0]))}."
        nearest = min(task.movable, key=lambda sim: np.linalg.norm(s.objects[sim].pos - s.gripper_pos))
        rel = s.gripper_pos - s.objects[nearest].pos
        word = task.word(nearest)
        horizontal = float(np.linalg.norm(rel[:2]))
        if horizontal < 0.03 and rel[2] < 0.025:
            facts.append(f"at(gripper, {word})")
            where = f"at {_an(word)}"
        elif horizontal < 0.03:
            facts.append(f"above(gripper, {word})")
            where = f"{distance_words(rel[2])} above {_an(word)}"
        else:
            d = distance_words(float(np.linalg.norm(rel)))
            facts.append(f"distance(gripper, {word}) = {d}")
            where = f"far from {_an(word)}" if d == "far" else f"{d} from {_an(word)}"
        return f"The gripper is {opened}, {where}."

    def _object_sentence(self, sim: str, s: SceneState, facts: list[str]) -> str:
        task = self.task
        o = s.objects[sim]
        word = task.word(sim)
        upright = bool(o.up[2] > 0.9)
        if OBJECT_KIND[sim] == "fragile":
            verb = "stands" if upright else "lies tipped over"
            if not upright:
                facts.append(f"tipped({word})")
        else:
            verb = "lies"
        extra = ""
        if float(np.linalg.norm(o.vel)) > 0.3:
            facts.append(f"moving({word})")
            extra = " It is moving fast."
        if o.fingers_touching >= 2:
            facts.append(f"grasped({word})")
            height = o.pos[2] - TABLE_TOP_Z
            above = "just above the table" if distance_words(height) == "touching" else f"{distance_words(height)} above the table"
            return f"The {word} is held {above}.{extra}"
        p = o.pos
        over_table = p[2] > TABLE_TOP_Z - 0.01 and edge_distance_xy(p[:2])[0] > 0
        if not over_table:
            facts.append(f"fallen({word})")
            return f"The {word} has fallen off the table.{extra}"
        for c in CONTAINERS:
            if PLACES[c].contains_xy(p[:2]) and p[2] < TABLE_TOP_Z + 0.1:
                facts.append(f"in({word}, {self.places[c]})")
                return f"The {word} {verb} in the {self.places[c]}.{extra}"
        if p[2] > TABLE_TOP_Z + 0.06:
            facts.append(f"lifted({word})")
            return f"The {word} is in the air, {distance_words(p[2] - TABLE_TOP_Z)} above the table.{extra}"
        d, edge = edge_distance_xy(p[:2])
        if d < NEAR_EDGE_M:
            facts.append(f"near_edge({word}, {edge})")
            where = f"at the very {edge} edge" if distance_words(d) == "touching" else f"{distance_words(d)} from the {edge} edge"
            return f"The {word} {verb} {where} of the table.{extra}"
        if PLACES["middle"].contains_xy(p[:2]):
            facts.append(f"in_zone({word}, middle)")
            return f"The {word} {verb} in the middle of the table.{extra}"
        depth = "front" if p[0] > PLACES["middle"].center[0] else "back"
        side = "left" if p[1] < PLACES["middle"].center[1] else "right"
        facts.append(f"on_table({word}, {depth}-{side})")
        return f"The {word} {verb} on the {depth} {side} part of the table.{extra}"


def describe_state(task: Task, state: SceneState, milestone_line: bool = True) -> SceneDescription:
    return StateCaptioner(task, milestone_line)(state)
