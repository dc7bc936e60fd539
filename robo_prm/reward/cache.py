"""Reuse judgements: exact (task, description text) matches, then nearest neighbours on features."""
from __future__ import annotations

import dataclasses
from collections import OrderedDict

import numpy as np

from robo_prm.judge.confident import within_band
from robo_prm.types import Judgement, SceneDescription


class JudgementCache:
    """An LRU map text → Judgement plus a brute-force nearest-neighbour index on feature vectors.

    Brute force over a few thousand rows is a single matrix product, cheaper here than keeping
    a KD-tree current under constant inserts."""

    def __init__(self, radius: float = 0.05, max_size: int = 50_000, max_features: int = 4096):
        self.radius, self.max_size, self.max_features = radius, max_size, max_features
        self._exact: OrderedDict[tuple[str, str], Judgement] = OrderedDict()
        self._feats: list[np.ndarray] = []
        self._feat_judgements: list[Judgement] = []
        self._matrix: np.ndarray | None = None
        self.hits_exact = self.hits_nn = self.misses = 0

    def get(self, task: str, scene: SceneDescription, need_reason: bool = False) -> Judgement | None:
        hit, kind = self._find(task, scene, need_reason)
        if kind == "exact":
            self._exact.move_to_end((task, scene.text))
            self.hits_exact += 1
        elif kind == "nn":
            self.hits_nn += 1
        else:
            self.misses += 1
        if hit is None:
            return None
        if hit.unbanded is not None:  # banded for the state it was asked about: band it again for this one
            hit = dataclasses.replace(hit, progress=within_band(hit.unbanded, scene))
        return dataclasses.replace(hit, cached=True)

    def peek(self, task: str, scene: SceneDescription, need_reason: bool = False) -> bool:
        """Whether `get` would answer now, without counting or reordering anything (async judging asks
        at step time which scenes to send to the worker; `get` runs later, in env-step order)."""
        return self._find(task, scene, need_reason)[0] is not None

    def _find(self, task: str, scene: SceneDescription, need_reason: bool) -> tuple[Judgement | None, str]:
        hit = self._exact.get((task, scene.text))
        if hit is not None and (hit.reason or not need_reason):
            return hit, "exact"
        if not need_reason and scene.features is not None and self._feats:
            if self._matrix is None:
                self._matrix = np.stack(self._feats)
            d = np.linalg.norm(self._matrix - scene.features[None, :], axis=1)
            i = int(np.argmin(d))
            if d[i] <= self.radius:
                return self._feat_judgements[i], "nn"
        return None, "miss"

    def put(self, task: str, scene: SceneDescription, judgement: Judgement):
        if judgement.fallback or judgement.backend == "rules":
            return  # rules read the exact state (not only its text): never reuse them for another state
        self._exact[(task, scene.text)] = judgement
        if len(self._exact) > self.max_size:
            self._exact.popitem(last=False)
        if scene.features is not None and len(self._feats) < self.max_features:
            self._feats.append(np.asarray(scene.features, dtype=np.float32))
            self._feat_judgements.append(judgement)
            self._matrix = None

    @property
    def hit_rate(self) -> float:
        total = self.hits_exact + self.hits_nn + self.misses
        return (self.hits_exact + self.hits_nn) / total if total else 0.0

    def stats(self) -> dict[str, float]:
        return {"hits_exact": self.hits_exact, "hits_nn": self.hits_nn, "misses": self.misses, "hit_rate": self.hit_rate}
