"""The judge interface (what reward code calls) and the backend interface (what a model
answers). Backends only report raw answers; `ConfidentJudge` turns them into Judgements,
so confidence, fallback and hazard merging live in one place."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

from robo_prm.types import Judgement, SceneDescription, TaskText


@runtime_checkable
class Judge(Protocol):
    def judge(self, task: TaskText, scenes: Sequence[SceneDescription], explain: bool = False) -> list[Judgement]:
        """One Judgement per scene, in order. Never raises for a model failure (falls back)."""

    def close(self) -> None: ...


@dataclass
class Scored:
    """A model's raw answer for one scene."""

    digits: np.ndarray | None  # distribution over 0–9 (sums to 1); None = no usable answer
    digit_mass: float = 1.0  # share of the next-token mass on digits (vote share for text answers)
    hazards: dict[str, float] = field(default_factory=dict)  # hazard name → P(present), only those asked
    reason: str | None = None
    latency_ms: float = 0.0
    progress: float | None = None  # set by text-vote backends (median of votes); None = E[digit] / 9


class JudgeDeadline(TimeoutError):
    """A backend ran out of its wall-clock budget. `answered` holds the answers it finished, for
    the first scenes in order; `ConfidentJudge` keeps them and gives the rest the rules judgement."""

    def __init__(self, message: str, answered: Sequence[Scored] = ()):
        super().__init__(message)
        self.answered = list(answered)


class Backend(Protocol):
    name: str
    # Optional `reads_text_only` (default True): the answer depends on the scene text alone, so ConfidentJudge reuses
    # it for an equal text. The CLIP judge sets it False (it reads the frame's embedding).

    def score(self, task: TaskText, scenes: Sequence[SceneDescription], hazards: Sequence[str], explain: bool) -> list[Scored]:
        """Raw answers, one per scene, with P(present) for each hazard named in `hazards`.
        May raise (`JudgeDeadline` when out of time): the caller falls back to rules."""

    def close(self) -> None: ...
