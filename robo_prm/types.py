"""Dataclasses that cross stage boundaries: env → describe → judge → reward → SB3 → replay."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np


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
