"""Blend weights as a function of total env steps (staged, linear or constant)."""
from __future__ import annotations

import bisect

from robo_prm.reward.config import RewardConfig


def blend_weights(cfg: RewardConfig, step: int) -> dict[str, float]:
    """{'env', 'llm', 'explore', 'safety'} weights in force at total env step `step`."""
    stages = cfg.stages
    if cfg.schedule == "constant":
        s = stages[0]
        w = (s.env, s.llm, s.explore)
    else:
        i = bisect.bisect_right([s.start_step for s in stages], step) - 1
        s = stages[max(i, 0)]
        w = (s.env, s.llm, s.explore)
        if cfg.schedule == "linear" and i + 1 < len(stages):
            nxt = stages[i + 1]
            t = (step - s.start_step) / max(1, nxt.start_step - s.start_step)
            w = tuple(a + t * (b - a) for a, b in zip(w, (nxt.env, nxt.llm, nxt.explore)))
    return {"env": float(w[0]), "llm": float(w[1]), "explore": float(w[2]), "safety": float(cfg.safety_weight)}
