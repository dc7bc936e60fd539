"""Scene caption → SceneFacts for a task: the renderer's inverse.

Built by enumeration rather than by a grammar: every gripper sentence and every object sentence the renderer
(`render.py`) can write with the task's words is rendered once into a lookup table, and so is each "It …"
sentence that may follow an object's (moved, way to its container, moving). A parse is therefore exact whenever
`render()` could have written the text, and a change to the renderer changes the parser with it
(tests/test_caption_parse.py round-trips the state captions of rollouts). Used to score a caption against the
pixel captioner's head outputs (perception/retrieve.py): text → frame retrieval by the captioner's likelihood.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import lru_cache
from itertools import product

from robo_prm.describe.facts import BUCKETS, EDGE_NAMES, QUADRANTS, GripperFacts, ObjectFacts, SceneFacts
from robo_prm.describe.render import _gripper, _object, render  # the renderer's own sentence makers
from robo_prm.envs.scene import CONTAINERS, OBJECT_KIND

_SENTENCE = re.compile(r"(?<=\.)\s+")
_MILESTONES = re.compile(r"Milestones reached: (\d+) of (\d+)\.")
EDGE_GAPS = ("beyond",) + BUCKETS  # a carried object near an edge: past it, or distance words to it
TARGET_GAPS = ("over",) + BUCKETS  # a carried object's way to its container


def _gripper_options(movable: tuple[str, ...]):
    for held in movable:
        yield GripperFacts(False, held, None, None, None)
    for opened, nearest in product((True, False), movable):
        yield GripperFacts(opened, None, nearest, "at", None)
        for relation, bucket in product(("above", "distance"), BUCKETS):
            yield GripperFacts(opened, None, nearest, relation, bucket)


def _object_options(sim: str):
    """Every (place, details, upright) an object's first sentence can state; moved / target / moving left out."""
    carried_edges = [{}] + [{"edge": e, "edge_gap": g} for e, g in product(EDGE_NAMES, EDGE_GAPS)]
    places = [{"place": p, "bucket": b, **over} for p, b, over in product(("held", "lifted"), BUCKETS, carried_edges)]
    places += [{"place": "fallen"}, {"place": "middle"}]
    places += [{"place": "in", "container": c} for c in CONTAINERS]
    places += [{"place": "near_edge", "edge": e, "bucket": b} for e, b in product(EDGE_NAMES, BUCKETS)]
    places += [{"place": "quadrant", "quadrant": q} for q in QUADRANTS]
    for fields, upright in product(places, (True, False) if OBJECT_KIND[sim] == "fragile" else (True,)):
        yield ObjectFacts(sim=sim, upright=upright, **fields)


def _follow_ups(sim: str, word, target: str | None) -> dict[str, dict]:
    """'It …' sentence → the ObjectFacts fields it states, each rendered beside a plain object sentence."""
    base = ObjectFacts(sim=sim, place="middle")
    plain = _object(base, word, [])
    options = [{"moving": True}] + [{"moved": b} for b in BUCKETS[1:]]  # moved: from 2 cm on, never "touching"
    options += [{"target": target, "target_gap": g} for g in TARGET_GAPS] if target else []
    out = {}
    for fields in options:
        extra = _object(replace(base, **fields), word, [])[len(plain):].strip()
        out[extra] = fields
    return out


@dataclass(frozen=True)
class CaptionReadings:
    """Every reading of a caption (or of some of its sentences): the facts it states, with each object's alternatives
    where its text leaves a slot open (a carried glass says nothing of being upright). What it does not mention is
    None / absent."""

    gripper: GripperFacts | None
    objects: tuple[tuple[ObjectFacts, ...], ...]  # per object mentioned, in the task's order: every reading of it
    milestones: tuple[int, int] | None  # (reached, total)

    def first(self) -> SceneFacts:
        reached, total = self.milestones or (None, None)
        return SceneFacts(self.gripper, tuple(o[0] for o in self.objects), reached, total)


class CaptionParser:
    """`parser(text)` → the SceneFacts `render(facts, task.word)` turns into `text`, or None if it cannot have;
    `parser.readings(text, partial=True)`: the facts stated by any of a caption's sentences, in any order
    ("The glass cup has fallen off the table.")."""

    def __init__(self, task):
        self.task = task
        word = task.word
        self.gripper: dict[str, GripperFacts] = {}
        for g in _gripper_options(task.movable):
            self.gripper.setdefault(_gripper(g, word, []), g)
        self.first: dict[str, tuple[ObjectFacts, ...]] = {}  # an object's first sentence → every reading of it
        self.follow = {}  # per object: its 'It …' sentences → the fields they state
        for sim in task.movable:
            for o in _object_options(sim):
                text = _object(o, word, [])
                self.first[text] = self.first.get(text, ()) + (o,)
            self.follow[sim] = _follow_ups(sim, word, task.carry_targets.get(sim))

    def __call__(self, text: str) -> SceneFacts | None:
        readings = self.readings(text)
        return None if readings is None else readings.first()

    def readings(self, text: str, partial: bool = False) -> CaptionReadings | None:
        """None unless every sentence is one the renderer writes for this task (each object and the gripper at most
        once); unless `partial`, the text must also be a whole caption exactly as `render` writes it."""
        gripper, objects, milestones, last = None, {}, None, None
        for sentence in (s for s in _SENTENCE.split(text.strip()) if s):
            if m := _MILESTONES.fullmatch(sentence):
                reached, total = int(m.group(1)), int(m.group(2))
                if milestones or total != len(self.task.milestone_checks) or reached > total:
                    return None
                milestones, last = (reached, total), None
            elif sentence in self.gripper and gripper is None:
                gripper, last = self.gripper[sentence], None
            elif last is not None and sentence in self.follow[last]:
                objects[last] = tuple(replace(f, **self.follow[last][sentence]) for f in objects[last])
            elif sentence in self.first and self.first[sentence][0].sim not in objects:
                last = self.first[sentence][0].sim
                objects[last] = self.first[sentence]
            else:
                return None
        readings = CaptionReadings(gripper, tuple(objects[s] for s in self.task.movable if s in objects), milestones)
        if partial:
            return readings if gripper or objects or milestones else None
        whole = gripper is not None and len(objects) == len(self.task.movable)
        return readings if whole and render(readings.first(), self.task.word)[0] == text.strip() else None


@lru_cache(maxsize=32)
def parser_for(task_name: str) -> CaptionParser:
    """The parser of a shipped or generated task, by name (built once: a few thousand renders)."""
    from robo_prm.envs.task import load_task

    return CaptionParser(load_task(task_name))
