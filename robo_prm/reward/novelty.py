"""Count-based exploration bonus over described states: 1/sqrt(N(description))."""
from __future__ import annotations

import math
from collections import Counter


class CountNovelty:
    def __init__(self):
        self.counts: Counter[str] = Counter()

    def __call__(self, key: str) -> float:
        self.counts[key] += 1
        return 1.0 / math.sqrt(self.counts[key])

    def state_dict(self) -> dict:
        return {"counts": dict(self.counts)}

    def load_state_dict(self, d: dict):
        self.counts = Counter(d["counts"])
