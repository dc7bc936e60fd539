"""Facts from where things are: a keypoint head's positions (keypoints.py) through the state describer's own rules,
weighed against the slot heads.

The positions are a few millimetres off, and a distance word changes at a bucket edge, so one estimate can land on
the wrong side of an edge the heads read right (or the other way round). The caption is chosen among candidate scenes:
the heads' own reading (`slots.decode`) and the facts of the estimate with Gaussian noise of `sigma` metres added
(`samples` draws, the estimate itself first); each candidate scores its log-likelihood under the slot heads plus
`weight` × the log of the share of draws that gave it. `weight` 0 is the heads alone; a large weight, the estimate
alone. The draws use a fixed seed, so a frame always gets the same caption (the judge's caches match text).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from robo_prm.describe.facts import SceneFacts, scene_facts
from robo_prm.perception.slots import decode, encode
from robo_prm.envs.scene import OBJECTS
from robo_prm.envs.state import ObjectState, SceneState

# the slot kinds the positions decide; the others (held, opened, upright, moving) are the heads' in every candidate
FROM_POSITIONS = ("nearest", "relation", "bucket", "place", "edge", "target")


def placed_state(positions: np.ndarray, heads: SceneFacts) -> SceneState:
    """A SceneState at estimated positions ((1 + len(OBJECTS), 3): the gripper, then OBJECTS, keypoints.POINTS) with
    what the slot heads read for the rest: which object the fingers hold, the gripper open or closed, a fragile
    object upright or tipped (velocities zero: `moving` stays the heads' own)."""
    upright = {o.sim: o.upright for o in heads.objects}
    objects = {}
    for i, sim in enumerate(OBJECTS):
        up = np.array([0.0, 0.0, 1.0]) if upright.get(sim, True) else np.array([1.0, 0.0, 0.0])
        objects[sim] = ObjectState(pos=np.asarray(positions[1 + i], dtype=np.float64), vel=np.zeros(3), up=up,
                                   quat=np.array([1.0, 0, 0, 0]), fingers_touching=2 if heads.gripper.held == sim else 0)
    width = 0.08 if heads.gripper.opened else 0.0  # open: wider than facts' 3 cm; closed: narrower
    return SceneState(gripper_pos=np.asarray(positions[0], dtype=np.float64), gripper_vel=np.zeros(3),
                      gripper_width=width, objects=objects)


def candidates(heads: SceneFacts, positions: np.ndarray, movable: tuple[str, ...], milestones, targets,
               sigma: float, samples: int, seed: int = 0) -> dict[SceneFacts, int]:
    """Facts of the estimate and of `samples - 1` noisy copies → how many draws gave each; the heads' reading is
    always a candidate (count 0 unless a draw gave it too)."""
    moving = {o.sim: o.moving for o in heads.objects}
    noise = np.random.default_rng(seed).normal(0.0, sigma, (max(samples, 1) - 1, *np.shape(positions)))
    counts: dict[SceneFacts, int] = {}
    for p in [np.asarray(positions)] + list(positions + noise):
        f = scene_facts(movable, placed_state(p, heads), milestones, (), targets)
        f = replace(f, objects=tuple(replace(o, moving=moving[o.sim]) for o in f.objects))
        counts[f] = counts.get(f, 0) + 1
    counts.setdefault(heads, 0)
    return counts


def log_likelihood(log_probs: dict[str, np.ndarray], facts: SceneFacts) -> float:
    """Σ over the slots the facts fill of the heads' log-probability of their class (`moving` left out: the
    candidates all take it from the heads)."""
    return float(sum(log_probs[k][c] for k, c in encode(facts).items()
                     if c >= 0 and k in log_probs and not k.endswith(".moving")))


def choose(counts: dict[SceneFacts, int], log_probs: dict[str, np.ndarray], weight: float) -> SceneFacts:
    n = sum(counts.values())
    return max(counts, key=lambda f: log_likelihood(log_probs, f) + weight * np.log((counts[f] + 0.5) / (n + 0.5)))


def log_softmax(x: np.ndarray) -> np.ndarray:
    """Along the last axis (one frame's logits, or a batch's)."""
    z = x - x.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def slot_log_probs(logits: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: log_softmax(x) for k, x in logits.items()}


def decode_placed(logits: dict[str, np.ndarray], positions: np.ndarray, movable: tuple[str, ...],
                  milestones: tuple[int, int] | None = None, targets: dict[str, str] | None = None,
                  sigma: float = 0.003, weight: float = 1.0, samples: int = 24) -> SceneFacts:
    """One frame's facts from its slot-head logits and the keypoint head's positions (module docstring)."""
    heads = decode(logits, movable, milestones, targets)
    counts = candidates(heads, positions, movable, milestones, targets, sigma, samples)
    return choose(counts, slot_log_probs(logits), weight)
