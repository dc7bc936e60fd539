"""Dataclasses that cross stage boundaries: env → describe → judge → reward → SB3 → replay.

    SceneState, TaskStatus   env → describe        (what the simulator knows, what the task checks)
    TaskText                 task file → judge     (the words the judge reads; no predicates)
    SceneDescription         describe → judge      (text, facts, features)
    Judgement                judge → reward        (progress, confidence, hazards, reason)
    RewardBreakdown          reward → SB3, replay  (every term, weight and the total)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np


@dataclass(frozen=True)
class ObjectState:
    pos: np.ndarray  # (3,) origin of the body (its grasp point)
    vel: np.ndarray  # (3,) linear velocity, m/s
    up: np.ndarray  # (3,) the body's z axis in world coordinates (upright cup: ~[0, 0, 1])
    quat: np.ndarray  # (4,)
    fingers_touching: int  # 0, 1 or 2 fingers in contact


@dataclass(frozen=True)
class SceneState:
    """A read-only snapshot of the simulator, taken once per step (robo_prm.envs.state.snapshot)."""

    gripper_pos: np.ndarray  # (3,) grip site
    gripper_vel: np.ndarray  # (3,)
    gripper_width: float  # distance between the fingers' joints, 0 (closed) … ~0.1 (open)
    objects: dict[str, ObjectState]
    start_pos: dict[str, np.ndarray] = field(default_factory=dict)  # each object's origin at reset (for `moved`)

    def position(self, name: str) -> np.ndarray:
        return self.gripper_pos if name == "gripper" else self.objects[name].pos


@dataclass(frozen=True)
class TaskStatus:
    """Every check of a task evaluated once on one state (ManiSkill's `evaluate()`): the env puts
    it in info["status"]; the describer, the rules judge and the dense reward read it."""

    success: bool
    milestones: tuple[bool, ...]
    hazards: tuple[str, ...]  # names of the hazard checks that hold
    reached: int  # cumulative milestone count: 1 + index of the last milestone that holds
    rule_progress: float  # the simulator's progress in [0, 1]


@dataclass(frozen=True)
class HazardText:
    name: str
    text: str  # in words, for the judge
    severity: float  # 0..1; the safety penalty is severity × weight
    checked: bool = False  # the simulator has a check for it (the judge is not shown the check)


@dataclass(frozen=True)
class TaskText:
    """What a judge reads of a task: the text half of a task file, nothing the simulator checks."""

    name: str
    background: str
    goal: str
    dimensions: tuple[str, ...]
    hazards: tuple[HazardText, ...] = ()
    # the task's words for the table's four edges ("front edge", or the file's own: "near rim") and the table: a
    # hazard about a named edge names one of them (the hazard reader's route, robo_prm/judge/hazard_reader.py);
    # not in any prompt
    edges: tuple[str, ...] = ()
    table: str | None = None

    @property
    def key(self) -> tuple:
        """Everything of the task a prompt depends on: the cache key of a task's prompt prefix."""
        return (self.name, self.background, self.goal, self.dimensions, tuple((h.name, h.text) for h in self.hazards))

    def severity(self, hazard: str) -> float:
        return next((h.severity for h in self.hazards if h.name == hazard), 0.0)


# How an object's sentence in SceneDescription.text goes on after "The <object>" (robo_prm/describe/render.py
# writes them; the hazard reader finds each object's sentences by them, robo_prm/judge/hazard_reader.py): a new
# phrasing in the describer needs its verb here.
OBJECT_VERBS = ("lies", "stands", "is held", "has fallen", "is in the air")


@dataclass(frozen=True)
class SceneDescription:
    """What the describe stage says about one state; the only thing a judge sees of it."""

    text: str  # plain English; equal situations give equal text (the exact-match cache key)
    facts: tuple[str, ...]  # named predicates, e.g. "near_edge(hammer)", "in(glass cup, left_bin)"
    milestones_reached: int | None = None  # None when the task defines no milestones
    milestones_total: int | None = None
    hazards: tuple[str, ...] = ()  # hazard names whose check holds (simulator truth; predicted in pixels mode); not shown to the LLM
    rule_progress: float | None = None  # the simulator's progress in [0, 1] (milestones + approach; predicted in pixels mode); None if unknown
    features: np.ndarray | None = field(default=None, compare=False, repr=False)  # image/state embedding for NN cache, novelty
    # cosine between the frame's CLIP embedding and the task's goal text (pixels describing with describe.goal_similarity):
    # what the CLIP judge (judge.backend clip, the VLM-RM baseline) scores
    goal_similarity: float | None = field(default=None, compare=False)
    source: Literal["state", "pixels"] = "state"  # where hazards, milestones, rule_progress came from


@dataclass(frozen=True)
class HazardReport:
    name: str
    severity: float  # 0..1, from the task file
    probability: float = 1.0  # the judge's belief that it is present (1.0 for rules)


@dataclass(frozen=True)
class Judgement:
    """A judge's answer for one scene."""

    progress: float  # in [0, 1]: expected score over the score tokens, rescaled
    confidence: float  # in [0, 1]; below the threshold the rules judgement is used instead
    hazards: tuple[HazardReport, ...] = ()
    reason: str | None = None  # generated only on request (recorded episodes, replay, --explain)
    backend: str = ""
    latency_ms: float = 0.0
    fallback: bool = False  # True when this came from the rules fallback after a low-confidence LLM answer
    cached: bool = False
    # the LLM's progress before judge.fallback milestone_band kept it within the state's stage (None: not banded);
    # the band reads the exact state, so a cached judgement is banded again for the state it answers
    unbanded: float | None = None

    @property
    def score(self) -> float:
        """Progress on the method's 1–10 scale."""
        return 1.0 + 9.0 * self.progress

    def hazard_names(self, min_probability: float = 0.5) -> tuple[str, ...]:
        return tuple(h.name for h in self.hazards if h.probability >= min_probability)


@dataclass(frozen=True)
class RewardBreakdown:
    """Every term of the blended reward, its weight, and the total, as put in info["reward_terms"]."""

    terms: dict[str, float]  # env, llm, explore, safety (unweighted, after normalisation)
    weights: dict[str, float]
    total: float

    def as_info(self) -> dict[str, float]:
        out = {f"term/{k}": v for k, v in self.terms.items()}
        out.update({f"weight/{k}": v for k, v in self.weights.items()})
        out["total"] = self.total
        return out
