"""Running z-score with exponential moving averages (the method's EMA 0.99 normaliser).

`center=False` divides by the running root-mean-square and keeps the sign and zero of the
input. That is the right normaliser for a potential difference γΦ(s′) − Φ(s): subtracting a
running mean would add a constant to every step's reward, and in episodes that end on
success a constant per-step bonus pays the agent to put success off.
"""
from __future__ import annotations

import math


class RunningZScore:
    def __init__(self, ema: float = 0.99, clip: float = 5.0, eps: float = 1e-4, center: bool = True):
        self.ema, self.clip, self.eps, self.center = ema, clip, eps, center
        self.mean, self.var, self.count = 0.0, 1.0, 0

    def __call__(self, x: float) -> float:
        """Update with x, then return x normalised (clipped; NaN/inf in → 0 out, stats untouched)."""
        if not math.isfinite(x):
            return 0.0
        if not self.center:  # mean stays 0: var is the EMA of x²
            self.var = x * x if self.count == 0 else self.ema * self.var + (1 - self.ema) * x * x
        elif self.count == 0:
            self.mean, self.var = x, 1.0
        else:
            d = x - self.mean
            self.mean += (1 - self.ema) * d
            self.var = self.ema * (self.var + (1 - self.ema) * d * d)
        self.count += 1
        z = (x - self.mean) / math.sqrt(self.var + self.eps)
        return max(-self.clip, min(self.clip, z))

    def peek(self, x: float) -> float:
        """x normalised by the statistics as they stand, without updating them (an async step's provisional
        reward: the update happens when the step is resolved, in env-step order)."""
        if not math.isfinite(x):
            return 0.0
        mean, var = (0.0, x * x if self.count == 0 else self.var) if not self.center else (
            (x, 1.0) if self.count == 0 else (self.mean, self.var))
        z = (x - mean) / math.sqrt(var + self.eps)
        return max(-self.clip, min(self.clip, z))

    def state_dict(self) -> dict:
        return {"mean": self.mean, "var": self.var, "count": self.count}

    def load_state_dict(self, d: dict):
        self.mean, self.var, self.count = float(d["mean"]), float(d["var"]), int(d["count"])
