"""State → discrete scene facts: the slots every captioner fills and one renderer turns into text.

The state captioner reads the slots off the simulator; the pixel captioner predicts the same
slots from a frame (one classification head per slot). Both render through `render.py`, so the
judge reads the same kind of sentence whichever side made it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from robo_prm.envs.predicates import edge_distance_xy
from robo_prm.envs.scene import CONTAINERS, OBJECT_KIND, PLACES, TABLE_TOP_Z
from robo_prm.envs.state import SceneState

# Distance words, nearest first; every bucket slot takes one of these values.
BUCKETS = ("touching", "3 cm", "5 cm", "10 cm", "15 cm", "20 cm", "30 cm", "far")
_CM_BUCKETS = (3, 5, 10, 15, 20, 30)
NEAR_EDGE_M = 0.10  # closer than this to an edge, the edge is worth a sentence
MOVING_MS = 0.3  # faster than this, "It is moving fast."
MOVED_M = 0.02  # from this far from its reset pose on, "It has moved 3 cm from where it stood." (tasks that check `moved`)

Relation = Literal["at", "above", "distance"]
# Where an object is, in the order the renderer checks; the values of ObjectFacts.place.
PLACE_KINDS = ("held", "fallen", "in", "lifted", "near_edge", "middle", "quadrant")
QUADRANTS = ("front-left", "front-right", "back-left", "back-right")
EDGE_NAMES = ("front", "back", "left", "right")


def distance_words(d: float) -> str:
    """0.034 → '5 cm'; below 2 cm 'touching'; beyond 30 cm 'far'."""
    cm = d * 100.0
    if cm < 2.0:
        return "touching"
    for b in _CM_BUCKETS:
        if cm <= b:
            return f"{b} cm"
    return "far"


@dataclass(frozen=True)
class GripperFacts:
    opened: bool  # fingers apart (and nothing held)
    held: str | None  # sim name of the held object (the first of the task's objects with two fingers on it)
    nearest: str | None  # sim name of the nearest object (None while holding)
    relation: Relation | None  # at / above / some distance from `nearest` (None while holding)
    bucket: str | None  # distance words: height above `nearest` (above) or 3-D distance (distance)


@dataclass(frozen=True)
class ObjectFacts:
    sim: str  # sim name (tool0, tool1, cup0)
    place: str  # one of PLACE_KINDS
    container: str | None = None  # place == "in": left_bin / tray
    edge: str | None = None  # near_edge: front / back / left / right; held / lifted: the edge it is over or near
    quadrant: str | None = None  # place == "quadrant": front-left, …
    bucket: str | None = None  # held / lifted: height above the table; near_edge: distance to the edge
    upright: bool = True  # read for fragile objects only
    moving: bool = False
    moved: str | None = None  # distance words from its reset pose, once ≥ MOVED_M (only objects a task checks `moved` on)
    # held / lifted within NEAR_EDGE_M of an edge: distance words to it, "beyond" once past it. An edge hazard holds
    # for an object carried low near an edge, so the text has to say where a carried object is.
    edge_gap: str | None = None
    # held / lifted, in a task that puts it in a container: that container, and "over" once above it, else the
    # horizontal distance words to its centre ("how close the cup is to the bin" is a goal dimension of such tasks)
    target: str | None = None
    target_gap: str | None = None


@dataclass(frozen=True)
class SceneFacts:
    """Everything the renderer needs; equal facts give equal text."""

    gripper: GripperFacts
    objects: tuple[ObjectFacts, ...]  # in the task's object order
    milestones_reached: int | None = None  # None: no milestone line
    milestones_total: int | None = None


def gripper_facts(movable: tuple[str, ...], s: SceneState) -> GripperFacts:
    held = [sim for sim in movable if s.objects[sim].fingers_touching >= 2]
    opened = s.gripper_width > 0.03 and not held  # fingers around a cup stay 4 cm apart
    if held:
        return GripperFacts(opened=False, held=held[0], nearest=None, relation=None, bucket=None)
    nearest = min(movable, key=lambda sim: np.linalg.norm(s.objects[sim].pos - s.gripper_pos))
    rel = s.gripper_pos - s.objects[nearest].pos
    horizontal = float(np.linalg.norm(rel[:2]))
    if horizontal < 0.03 and rel[2] < 0.025:
        return GripperFacts(opened, None, nearest, "at", None)
    if horizontal < 0.03:
        return GripperFacts(opened, None, nearest, "above", distance_words(rel[2]))
    return GripperFacts(opened, None, nearest, "distance", distance_words(float(np.linalg.norm(rel))))


def moved_words(sim: str, s: SceneState) -> str | None:
    """How far `sim` is from its reset pose, in distance words, once that is at least MOVED_M."""
    start = s.start_pos.get(sim)
    d = float(np.linalg.norm(s.objects[sim].pos - start)) if start is not None else 0.0
    return distance_words(d) if d >= MOVED_M else None


def target_facts(xy: np.ndarray, container: str | None) -> dict:
    if container is None:
        return {}
    place = PLACES[container]
    gap = "over" if place.contains_xy(xy) else distance_words(float(np.linalg.norm(xy - np.asarray(place.center))))
    return {"target": container, "target_gap": gap}


def object_facts(sim: str, s: SceneState, watch_moved: bool = False, target: str | None = None) -> ObjectFacts:
    """`target`: the container the task puts `sim` in (Task.carry_targets), said of it while carried."""
    o = s.objects[sim]
    upright = bool(o.up[2] > 0.9) if OBJECT_KIND[sim] == "fragile" else True
    moving = float(np.linalg.norm(o.vel)) > MOVING_MS
    common = {"sim": sim, "upright": upright, "moving": moving, "moved": moved_words(sim, s) if watch_moved else None}
    p = o.pos
    d, edge = edge_distance_xy(p[:2])
    over = {"edge": edge, "edge_gap": "beyond" if d < 0 else distance_words(d)} if d < NEAR_EDGE_M else {}
    carried = target_facts(p[:2], target)
    if o.fingers_touching >= 2:
        return ObjectFacts(place="held", bucket=distance_words(p[2] - TABLE_TOP_Z), **over, **carried, **common)
    if not (p[2] > TABLE_TOP_Z - 0.01 and edge_distance_xy(p[:2])[0] > 0):
        return ObjectFacts(place="fallen", **common)
    for c in CONTAINERS:
        if PLACES[c].contains_xy(p[:2]) and p[2] < TABLE_TOP_Z + 0.1:
            return ObjectFacts(place="in", container=c, **common)
    if p[2] > TABLE_TOP_Z + 0.06:
        return ObjectFacts(place="lifted", bucket=distance_words(p[2] - TABLE_TOP_Z), **over, **carried, **common)
    if d < NEAR_EDGE_M:
        return ObjectFacts(place="near_edge", edge=edge, bucket=distance_words(d), **common)
    if PLACES["middle"].contains_xy(p[:2]):
        return ObjectFacts(place="middle", **common)
    depth = "front" if p[0] > PLACES["middle"].center[0] else "back"
    side = "left" if p[1] < PLACES["middle"].center[1] else "right"
    return ObjectFacts(place="quadrant", quadrant=f"{depth}-{side}", **common)


def scene_facts(movable: tuple[str, ...], s: SceneState, milestones: tuple[int, int] | None = None,
                moved: tuple[str, ...] = (), targets: dict[str, str] | None = None) -> SceneFacts:
    """The facts of a state for a task's objects; `milestones` = (reached, total) or None; `moved`: the objects
    whose distance from their reset pose is a fact (Task.moved_objects); `targets`: Task.carry_targets."""
    reached, total = milestones if milestones is not None else (None, None)
    objects = tuple(object_facts(sim, s, sim in moved, (targets or {}).get(sim)) for sim in movable)
    return SceneFacts(gripper_facts(movable, s), objects, reached, total)
