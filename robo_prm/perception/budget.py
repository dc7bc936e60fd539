"""A one-cycle learning rate over whichever ends first: the planned steps or the `--max_minutes` budget.

torch's OneCycleLR is tied to a step count, so a run that `--max_minutes` stops early is cut wherever its cycle had
got to — near the peak rate a third of the way in — and keeps the noisiest weights of the run. Here the cycle's
position is the larger of steps done / steps planned and seconds spent / the budget: a run the budget stops still
warms up, peaks and anneals, in fewer steps (on a slower CPU the same command then ends in the same time, with a
finished cycle). The rate follows OneCycleLR's cosine shape (start max_lr / 25, end 1e-4 of that) when no budget
binds. Ctrl-C ends a loop the same way (`train_loop`): the trainers save what they have. `shuffled_batches` is the
trainers' shared batch order.
"""
from __future__ import annotations

import logging
import math
import time
from typing import Callable, Iterator

import numpy as np
import torch

log = logging.getLogger(__name__)


def _cos(start: float, end: float, frac: float) -> float:
    return end + (start - end) / 2.0 * (1.0 + math.cos(math.pi * min(max(frac, 0.0), 1.0)))


class BudgetedCycle:
    """Sets the optimiser's rate before each step; `advance()` after it says whether to go on."""

    def __init__(self, optimizer, max_lr: float, steps: int, pct_start: float, max_minutes: float = 0.0,
                 div_factor: float = 25.0, final_div_factor: float = 1e4, clock: Callable[[], float] = time.perf_counter):
        self.optimizer, self.max_lr, self.steps = optimizer, max_lr, max(1, int(steps))
        # where the warm-up ends, as a position: OneCycleLR's step pct_start·steps − 1 of steps − 1
        self.peak = min(1.0, max(0.0, (pct_start * self.steps - 1) / max(1, self.steps - 1)))
        self.initial_lr = max_lr / div_factor
        self.min_lr = self.initial_lr / final_div_factor
        self.budget_s = 60.0 * max_minutes
        self.clock, self.t0 = clock, clock()
        self.taken = 0  # optimiser steps taken
        self.by_budget = False  # the budget, not the plan, ended the cycle
        self._set(0.0)

    def position(self) -> float:
        """Where in the cycle the next step is, 0 → 1: steps (as OneCycleLR counts them) or the budget's share."""
        by_steps = self.taken / max(1, self.steps - 1)
        by_time = (self.clock() - self.t0) / self.budget_s if self.budget_s > 0 else 0.0
        return max(by_steps, by_time)

    def lr_at(self, p: float) -> float:
        if p <= self.peak:
            return _cos(self.initial_lr, self.max_lr, p / self.peak if self.peak > 0 else 1.0)
        return _cos(self.max_lr, self.min_lr, (p - self.peak) / max(1e-12, 1.0 - self.peak))

    def _set(self, p: float) -> None:
        lr = self.lr_at(p)
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def advance(self) -> bool:
        """Count the step just taken; set the next rate and return True, or False once the cycle is over."""
        self.taken += 1
        if self.taken >= self.steps:
            return False
        p = self.position()
        if p > 1.0:
            self.by_budget = True
            log.warning("the %.1f-minute budget ended the learning-rate cycle after %d of %d planned steps",
                        self.budget_s / 60, self.taken, self.steps)
            return False
        self._set(p)
        return True


def train_loop(cycle: BudgetedCycle) -> Iterator[int]:
    """Step indices until the cycle ends. The loop body runs in the caller's frame, so the caller catches a Ctrl-C
    there: `try: for step in train_loop(cycle): … except KeyboardInterrupt: interrupted(cycle, "what")`."""
    while True:
        yield cycle.taken
        if not cycle.advance():
            return


def interrupted(cycle: BudgetedCycle, what: str) -> None:
    """Log a Ctrl-C that ended a training loop (the weights are as the last finished step left them, unless the
    Ctrl-C came inside an optimiser step, which may then be half applied)."""
    log.warning("%s interrupted after %d of %d steps: saving what is trained", what, cycle.taken, cycle.steps)


def shuffled_batches(n: int, batch: int, rng: np.random.Generator) -> Iterator[torch.Tensor]:
    """Index tensors of `batch` rows, without replacement until fewer than a batch are left, then a new permutation
    (the rest of the old one is dropped). Endless: zip it after `train_loop`, which then decides when to stop."""
    order, at = rng.permutation(n), 0
    while True:
        if at + batch > n:
            order, at = rng.permutation(n), 0
        yield torch.as_tensor(order[at:at + batch])
        at += batch
