"""Scripted plans in task files: the `expert:` list, parsed into the steps `ScriptedExpert` follows.

    expert:
      - reach hammer                 # bring the open gripper to the object
      - move hammer to green tray    # grasp it, carry it over the place, set it down, let go
      - push cup to middle           # slide it there with the fingers closed

Words are the task's vocabulary words (several words allowed, "green tray"; quoted or not) or sim names.
A step becomes a tuple: ``("reach", obj)`` or ``(verb, obj, place, dy)`` with sim names; `dy` spreads
objects that go to the same place along y (two objects: −3.5 cm and +3.5 cm), so they do not land on
each other.
"""
from __future__ import annotations

import re

from robo_prm.envs.predicates import ident_key, word_key
from robo_prm.envs.scene import CONTAINERS, PLACES

PlanStep = tuple  # ("reach", obj) | ("move" | "push", obj, place, dy)
VERBS = ("reach", "move", "push")
SPREAD = 0.07  # metres between objects set down in the same place
MAX_STEPS = 20
GRAMMAR = "reach OBJECT, move OBJECT to PLACE, push OBJECT to PLACE"


class PlanError(ValueError):
    def __init__(self, where: str, message: str):
        super().__init__(message)
        self.where = where


def _lookup(text: str, names: dict[str, str]) -> str | None:
    text = text.strip().strip("\"'")
    return names.get(word_key(text)) or names.get(ident_key(text))


def _thing(text: str, names: dict[str, str], movable: set[str], line: str, where: str) -> str:
    sim = _lookup(text, names)
    if sim is None or sim not in movable:
        what = "unknown object" if sim is None else "not a movable object of this task:"
        known = ", ".join(sorted(k for k, v in names.items() if v in movable))
        raise PlanError(where, f"{what} '{text.strip()}' in '{line}' (objects here: {known})")
    return sim


def _object_and_place(rest: str, verb: str, names: dict[str, str], movable: set[str], line: str, where: str):
    """Split 'OBJECT to PLACE' at the ' to ' where both sides are names (a word may itself hold 'to')."""
    cuts = [m for m in re.finditer(r"\s+to\s+", rest)]
    if not cuts:
        raise PlanError(where, f"'{line}': write '{verb} OBJECT to PLACE'")
    for m in cuts:
        obj, place = _lookup(rest[: m.start()], names), _lookup(rest[m.end():], names)
        if obj in movable and place in PLACES:
            if verb == "push" and place in CONTAINERS:
                raise PlanError(where, f"'{line}': an object cannot be pushed over a container's wall; use 'move'")
            return obj, place
    m = cuts[0]
    obj = _thing(rest[: m.start()], names, movable, line, where)
    known = ", ".join(sorted(k for k, v in names.items() if v in PLACES))
    raise PlanError(where, f"unknown place '{rest[m.end():].strip()}' in '{line}' (places: {known})")


def parse_plan(lines, names: dict[str, str], movable: set[str]) -> list[PlanStep]:
    """The steps of an `expert:` list; `names` maps the task's words to sim names (Task.names)."""
    if not isinstance(lines, list) or not lines:
        raise PlanError("expert", f"list the plan's steps ({GRAMMAR})")
    if len(lines) > MAX_STEPS:
        raise PlanError("expert", f"at most {MAX_STEPS} steps, got {len(lines)}")
    steps: list[list] = []
    for i, line in enumerate(lines):
        where = f"expert[{i}]"
        if not isinstance(line, str) or not line.split():
            raise PlanError(where, f"expected a step as text ({GRAMMAR}), got {line!r}")
        verb, _, rest = line.strip().partition(" ")
        verb = verb.lower()
        if verb == "reach":
            steps.append(["reach", _thing(rest, names, movable, line, where)])
        elif verb in ("move", "push"):
            steps.append([verb, *_object_and_place(rest, verb, names, movable, line, where), 0.0])
        else:
            raise PlanError(where, f"unknown step '{verb}' in '{line}' (steps: {GRAMMAR})")
    for place in PLACES:  # objects set down in one place: spread along y, in plan order
        sharing = [s for s in steps if len(s) == 4 and s[2] == place]
        for k, s in enumerate(sharing):
            s[3] = round((k - (len(sharing) - 1) / 2) * SPREAD, 6)
    return [tuple(s) for s in steps]


def plan_lines(plan: list[PlanStep], word) -> list[str]:
    """A plan written back as `expert:` lines in a task's words (`word`: Task.word)."""
    return [f"reach {word(s[1])}" if s[0] == "reach" else f"{s[0]} {word(s[1])} to {word(s[2])}" for s in plan]
