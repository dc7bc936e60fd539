"""SceneFacts ↔ class indices: the label space of the pixel captioner's heads.

Every slot of `facts.SceneFacts` becomes one small classification target; -1 marks a slot that
does not apply (an object the task does not use, a bucket of an object lying in a bin, …) and is
left out of the loss. `decode` turns head outputs back into SceneFacts for the shared renderer.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from robo_prm.describe.facts import BUCKETS, EDGE_NAMES, QUADRANTS, GripperFacts, ObjectFacts, SceneFacts
from robo_prm.envs.scene import CONTAINERS, OBJECT_KIND, OBJECTS
from robo_prm.envs.state import SceneState

# One class per (place, detail): the object-place head.
PLACES = (("held", None), ("fallen", None)) + tuple(("in", c) for c in CONTAINERS) + (("lifted", None),) \
    + tuple(("near_edge", e) for e in EDGE_NAMES) + (("middle", None),) + tuple(("quadrant", q) for q in QUADRANTS)
RELATIONS = ("at", "above", "distance")
HELD = (None,) + OBJECTS  # gripper-held head: nothing or one object
_BUCKETED = {"held", "lifted", "near_edge"}

# A carried (held / lifted) object within NEAR_EDGE_M of an edge: which edge and how far (ObjectFacts.edge, edge_gap).
EDGE_GAPS = ("beyond",) + tuple(b for b in BUCKETS if b in ("touching", "3 cm", "5 cm", "10 cm"))
CARRIED_EDGE = (None,) + tuple((e, g) for e in EDGE_NAMES for g in EDGE_GAPS)
TARGET_GAPS = ("over",) + BUCKETS  # a carried object's way to its container (ObjectFacts.target_gap)

# name → number of classes; binary slots are 2-class heads as well (one softmax code path).
GRIPPER_SLOTS = {"held": len(HELD), "opened": 2, "nearest": len(OBJECTS), "relation": len(RELATIONS), "bucket": len(BUCKETS)}
OBJECT_SLOTS = {"place": len(PLACES), "bucket": len(BUCKETS), "upright": 2, "moving": 2}
# The carried object's clauses: heads of models trained with `carried` slots (the shipped model before them has none).
CARRIED_SLOTS = {"edge": len(CARRIED_EDGE), "target": len(TARGET_GAPS)}
STATE_DIM = 4 + 7 * len(OBJECTS)  # gripper xyz + width; per object xyz, up axis, fingers/2


def slot_names(carried: bool = True) -> list[str]:
    return list(slot_sizes(carried))


def slot_sizes(carried: bool = True) -> dict[str, int]:
    """Every slot head's class count; `carried`: with the carried object's edge and target heads."""
    out = {f"gripper.{k}": n for k, n in GRIPPER_SLOTS.items()}
    per_object = OBJECT_SLOTS | (CARRIED_SLOTS if carried else {})
    out.update({f"{o}.{k}": n for o in OBJECTS for k, n in per_object.items()})
    return out


def encode(f: SceneFacts) -> dict[str, int]:
    """Facts → {slot name: class index or -1} for every slot (`slot_names()`); objects the facts do not mention,
    and clauses that do not apply (a carried-object slot of an object not carried), are -1."""
    g = f.gripper
    out = {
        "gripper.held": HELD.index(g.held),
        "gripper.opened": int(g.opened) if g.held is None else -1,
        "gripper.nearest": OBJECTS.index(g.nearest) if g.nearest else -1,
        "gripper.relation": RELATIONS.index(g.relation) if g.relation else -1,
        "gripper.bucket": BUCKETS.index(g.bucket) if g.bucket else -1,
    }
    for sim in OBJECTS:
        for k in OBJECT_SLOTS | CARRIED_SLOTS:
            out[f"{sim}.{k}"] = -1
    for o in f.objects:
        detail = o.container or (o.edge if o.place == "near_edge" else None) or o.quadrant  # a carried one: the edge head
        out[f"{o.sim}.place"] = PLACES.index((o.place, detail))
        out[f"{o.sim}.bucket"] = BUCKETS.index(o.bucket) if o.place in _BUCKETED else -1
        out[f"{o.sim}.upright"] = int(o.upright) if OBJECT_KIND[o.sim] == "fragile" else -1
        out[f"{o.sim}.moving"] = int(o.moving)
        if o.place in ("held", "lifted"):
            out[f"{o.sim}.edge"] = CARRIED_EDGE.index((o.edge, o.edge_gap) if o.edge_gap else None)
        if o.target is not None:
            out[f"{o.sim}.target"] = TARGET_GAPS.index(o.target_gap)
    return out


def expressible(f: SceneFacts) -> SceneFacts:
    """The part of `f` a model without the carried slots' heads (`NetConfig.carried_slots` false: those trained before
    them) can say: everything but a carried object's edge and its way to its container (`ObjectFacts.edge_gap`,
    `target_gap`)."""
    def said(o):
        o = replace(o, edge=None, edge_gap=None) if o.edge_gap else o
        return replace(o, target=None, target_gap=None) if o.target_gap else o

    return replace(f, objects=tuple(said(o) for o in f.objects))


def _argmax(logits: np.ndarray, allowed: list[int] | None = None) -> int:
    if allowed is None:
        return int(np.argmax(logits))
    return allowed[int(np.argmax(logits[allowed]))]


def decode(logits: dict[str, np.ndarray], movable: tuple[str, ...], milestones: tuple[int, int] | None = None,
           targets: dict[str, str] | None = None) -> SceneFacts:
    """Head outputs of one frame → SceneFacts for a task's objects (choices limited to what the task has);
    `targets`: the task's carry targets (Task.carry_targets), whose gap a carried object's target head reads. Without
    the carried slots' heads (older models) a carried object's edge and target clauses are left out (`expressible`)."""
    held_ok = [0] + [1 + OBJECTS.index(s) for s in movable]
    held = HELD[_argmax(logits["gripper.held"], held_ok)]
    if held is not None:
        g = GripperFacts(False, held, None, None, None)
    else:
        nearest = OBJECTS[_argmax(logits["gripper.nearest"], [OBJECTS.index(s) for s in movable])]
        relation = RELATIONS[_argmax(logits["gripper.relation"])]
        bucket = None if relation == "at" else BUCKETS[_argmax(logits["gripper.bucket"])]
        g = GripperFacts(bool(_argmax(logits["gripper.opened"])), None, nearest, relation, bucket)
    objects = []
    for sim in movable:
        place_ok = [i for i, (p, _) in enumerate(PLACES) if p != "held" or sim == held]
        place, detail = PLACES[_argmax(logits[f"{sim}.place"], place_ok)]
        if held == sim:
            place, detail = "held", None
        bucket = BUCKETS[_argmax(logits[f"{sim}.bucket"])] if place in _BUCKETED else None
        upright = bool(_argmax(logits[f"{sim}.upright"])) if OBJECT_KIND[sim] == "fragile" else True
        carried = {"edge": detail if place == "near_edge" else None}
        if place in ("held", "lifted") and f"{sim}.edge" in logits:
            near = CARRIED_EDGE[_argmax(logits[f"{sim}.edge"])]
            carried = {"edge": near[0], "edge_gap": near[1]} if near else carried
            target = (targets or {}).get(sim)
            if target is not None:
                carried |= {"target": target, "target_gap": TARGET_GAPS[_argmax(logits[f"{sim}.target"])]}
        objects.append(ObjectFacts(
            sim=sim, place=place,
            container=detail if place == "in" else None,
            quadrant=detail if place == "quadrant" else None,
            bucket=bucket, upright=upright, moving=bool(_argmax(logits[f"{sim}.moving"])), **carried,
        ))
    reached, total = milestones if milestones is not None else (None, None)
    return SceneFacts(g, tuple(objects), reached, total)


def state_vector(s: SceneState) -> np.ndarray:
    """The regression target of the state head (used to check task predicates the heads were not trained on)."""
    parts = [s.gripper_pos, [s.gripper_width]]
    for sim in OBJECTS:
        o = s.objects[sim]
        parts += [o.pos, o.up, [min(o.fingers_touching, 2) / 2.0]]
    return np.concatenate(parts).astype(np.float32)


def state_from_vector(v: np.ndarray) -> SceneState:
    """Inverse of state_vector (velocities unknown: zero; orientation only through the up axis)."""
    from robo_prm.envs.state import ObjectState

    v = np.asarray(v, dtype=np.float64)
    objects = {}
    for i, sim in enumerate(OBJECTS):
        base = 4 + 7 * i
        up = v[base + 3: base + 6]
        up = up / max(np.linalg.norm(up), 1e-6)
        objects[sim] = ObjectState(pos=v[base: base + 3].copy(), vel=np.zeros(3), up=up, quat=np.array([1.0, 0, 0, 0]),
                                   fingers_touching=2 if v[base + 6] > 0.75 else 0)
    return SceneState(gripper_pos=v[:3].copy(), gripper_vel=np.zeros(3), gripper_width=float(v[3]), objects=objects)


@dataclass(frozen=True)
class SlotLabels:
    """One frame's labels in array form (what a data shard stores per frame)."""

    slots: np.ndarray  # (len(slot_names()),) int16, -1 = not applicable
    state: np.ndarray  # (STATE_DIM,) float32

    @classmethod
    def of(cls, facts: SceneFacts, state: SceneState) -> "SlotLabels":
        enc = encode(facts)
        return cls(np.array([enc[k] for k in slot_names()], dtype=np.int16), state_vector(state))

