"""Count-based exploration bonus over described states: 1/sqrt(N(description)).

Our episodes terminate on success, and every per-step reward c > 0 is worth up to c/(1−γ) to an
agent that keeps the episode going; with 1/sqrt(N) ≈ 0.25 on average that rivalled the success
reward itself. `shift=-1` keeps the ranking of scenes (new > familiar) with values ≤ 0.
"""
from __future__ import annotations

import math
from collections import Counter


class CountNovelty:
    def __init__(self, shift: float = 0.0):
        self.counts: Counter[str] = Counter()
        self.shift = shift

    def __call__(self, key: str) -> float:
        self.counts[key] += 1
        return 1.0 / math.sqrt(self.counts[key]) + self.shift

    def state_dict(self) -> dict:
        return {"counts": dict(self.counts)}

    def load_state_dict(self, d: dict):
        self.counts = Counter(d["counts"])
