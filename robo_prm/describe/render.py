"""SceneFacts → (text, named facts): the one renderer behind every captioner.

The text is what the LLM judge reads and what the exact-match judgement cache keys on; the
shipped fine-tuned judge was trained on it, so a change here is a change of the judge's input
(tests/test_describe.py freezes it).
"""
from __future__ import annotations

from robo_prm.describe.facts import GripperFacts, ObjectFacts, SceneFacts
from robo_prm.envs.scene import OBJECT_KIND


def _gripper(g: GripperFacts, word, facts: list[str]) -> str:
    opened = "open" if g.opened else "closed"
    facts.append(f"gripper_{opened}")
    if g.held is not None:
        return f"The gripper is closed around the {word(g.held)}."
    w = word(g.nearest)
    if g.relation == "at":
        facts.append(f"at(gripper, {w})")
        where = f"at the {w}"
    elif g.relation == "above":
        facts.append(f"above(gripper, {w})")
        where = f"{g.bucket} above the {w}"
    else:
        facts.append(f"distance(gripper, {w}) = {g.bucket}")
        where = f"far from the {w}" if g.bucket == "far" else f"{g.bucket} from the {w}"
    return f"The gripper is {opened}, {where}."


def _object(o: ObjectFacts, word, facts: list[str]) -> str:
    w = word(o.sim)
    if OBJECT_KIND[o.sim] == "fragile":
        verb = "stands" if o.upright else "lies tipped over"
        if not o.upright:
            facts.append(f"tipped({w})")
    else:
        verb = "lies"
    extra = ""
    if o.moving:
        facts.append(f"moving({w})")
        extra = " It is moving fast."
    if o.place == "held":
        facts.append(f"grasped({w})")
        above = "just above the table" if o.bucket == "touching" else f"{o.bucket} above the table"
        return f"The {w} is held {above}.{extra}"
    if o.place == "fallen":
        facts.append(f"fallen({w})")
        return f"The {w} has fallen off the table.{extra}"
    if o.place == "in":
        facts.append(f"in({w}, {word(o.container)})")
        return f"The {w} {verb} in the {word(o.container)}.{extra}"
    if o.place == "lifted":
        facts.append(f"lifted({w})")
        return f"The {w} is in the air, {o.bucket} above the table.{extra}"
    if o.place == "near_edge":
        facts.append(f"near_edge({w}, {o.edge})")
        where = f"at the very {o.edge} edge" if o.bucket == "touching" else f"{o.bucket} from the {o.edge} edge"
        return f"The {w} {verb} {where} of the table.{extra}"
    if o.place == "middle":
        facts.append(f"in_zone({w}, middle)")
        return f"The {w} {verb} in the middle of the table.{extra}"
    depth, side = o.quadrant.split("-")
    facts.append(f"on_table({w}, {o.quadrant})")
    return f"The {w} {verb} on the {depth} {side} part of the table.{extra}"


def render(facts: SceneFacts, word, milestone_line: bool = True) -> tuple[str, tuple[str, ...]]:
    """`word(sim_name) → the task's word` (Task.word). Returns the text and the named facts."""
    named: list[str] = []
    sentences = [_gripper(facts.gripper, word, named)]
    sentences += [_object(o, word, named) for o in facts.objects]
    if milestone_line and facts.milestones_total:
        sentences.append(f"Milestones reached: {facts.milestones_reached} of {facts.milestones_total}.")
    return " ".join(sentences), tuple(named)
