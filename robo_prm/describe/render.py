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


# Every object sentence goes on after "The {w}" with one of robo_prm.types.OBJECT_VERBS (the hazard reader
# finds an object's sentences by them; tests/test_hazard_reader.py checks).
# Each place (facts.PLACE_KINDS) → (its named fact, its sentence), filled in by `_object`: w is the object's word,
# verb "stands" / "lies" / "lies tipped over", table the task's word for the table, the rest the place's details.
_PHRASES = {
    "held": ("grasped({w})", "The {w} is held {height} above the {table}"),
    "fallen": ("fallen({w})", "The {w} has fallen off the {table}{fallen_pose}"),
    "in": ("in({w}, {container})", "The {w} {verb} in the {container}"),
    "lifted": ("lifted({w})", "The {w} is in the air, {bucket} above the {table}"),
    "near_edge": ("near_edge({w}, {edge})", "The {w} {verb} {from_edge} of the {table}"),
    "middle": ("in_zone({w}, middle)", "The {w} {verb} in the {middle}"),
    "quadrant": ("on_table({w}, {quadrant})", "The {w} {verb} on the {depth} {side} part of the {table}"),
}


def _object(o: ObjectFacts, word, facts: list[str]) -> str:
    w = word(o.sim)
    if OBJECT_KIND[o.sim] == "fragile":
        verb = "stands" if o.upright else "lies tipped over"
        if not o.upright:
            facts.append(f"tipped({w})")
    else:
        verb = "lies"
    extra = ""
    if o.moved is not None:
        facts.append(f"moved({w}) = {o.moved}")
        extra += " It has moved " + ("more than 30 cm" if o.moved == "far" else o.moved) + " from where it stood."
    if o.target_gap is not None:  # a carried object, toward the container its task puts it in
        target = word(o.target)
        facts.append(f"target_gap({w}, {target}) = {o.target_gap}")
        extra += f" It is over the {target}." if o.target_gap == "over" else f" It is {o.target_gap} from the {target}."
    if o.moving:
        facts.append(f"moving({w})")
        extra += " It is moving fast."
    gap = o.edge_gap or o.bucket  # to the edge: a carried object's edge_gap, a lying one's bucket
    depth, side = o.quadrant.split("-") if o.quadrant else ("", "")
    table, edge = word("table"), word(f"{o.edge}_edge") if o.edge else None  # "table", "front edge" unless renamed
    middle = f"middle of the {table}" if word("middle") == "middle" else word("middle")
    fields = {"w": w, "verb": verb, "bucket": o.bucket, "edge": o.edge, "quadrant": o.quadrant, "depth": depth, "side": side,
              "container": word(o.container) if o.container else None, "height": "just" if o.bucket == "touching" else o.bucket,
              "table": table, "middle": middle,
              # a fallen glass that lies on the floor has tipped too: say so, or a "tipped over" hazard cannot be read
              "fallen_pose": " and lies tipped over" if verb == "lies tipped over" else "",
              "from_edge": f"at the very {edge}" if gap == "touching" else f"{gap} from the {edge}"}
    fact, sentence = _PHRASES[o.place]
    facts.append(fact.format(**fields))
    sentence = sentence.format(**fields)
    if o.edge_gap is not None:  # a held / lifted object near an edge (near_edge objects say it in their sentence)
        facts.append(f"over_edge({w}, {o.edge})")
        sentence += f", out past the {edge}" if o.edge_gap == "beyond" else f", {fields['from_edge']}"
    return f"{sentence}.{extra}"


def render(facts: SceneFacts, word, milestone_line: bool = True) -> tuple[str, tuple[str, ...]]:
    """`word(sim_name) → the task's word` (Task.word). Returns the text and the named facts."""
    named: list[str] = []
    sentences = [_gripper(facts.gripper, word, named)]
    sentences += [_object(o, word, named) for o in facts.objects]
    if milestone_line and facts.milestones_total:
        sentences.append(f"Milestones reached: {facts.milestones_reached} of {facts.milestones_total}.")
    return " ".join(sentences), tuple(named)
