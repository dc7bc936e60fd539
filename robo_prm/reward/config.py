"""Settings of the blended reward (the `reward:` section of a train config)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from robo_prm.config_flags import opt


@dataclass
class Stage:
    """Weights that hold from `start_step` (total env steps) until the next stage."""

    start_step: int
    env: float
    llm: float
    explore: float


def method_stages() -> list[Stage]:
    # The write-up's staged table: the LLM weight decays but a tenth of it stays late.
    return [Stage(0, 0.5, 0.4, 0.1), Stage(1_000_000, 0.7, 0.25, 0.05), Stage(3_000_000, 0.9, 0.08, 0.02)]


@dataclass
class RewardConfig:
    schedule: Literal["staged", "linear", "constant"] = opt("staged", "how the stage weights change with env steps")
    stages: list[Stage] = opt(factory=method_stages, help="weights env, llm, explore from start_step on (YAML list); linear interpolates between stage starts")
    safety_weight: float = opt(0.5, min=0.0, help="× Σ severity of the hazards the judge reports")
    progress: Literal["potential", "raw"] = opt("potential", "γΦ(s′) − Φ(s), or the method's raw score")
    # Why 1.0 and not the learner's γ: with γ < 1 every step spent at a high-progress scene costs
    # (1 − γ)Φ; normalised, that was −0.66 per held step near the hammer against 0 far from it, and
    # the one-off gain of approaching was clipped at +5 (README, The reward).
    gamma: float | None = opt(1.0, "γ of the potential shaping; 1.0: the progress delta (a held judgement adds 0); "
                                   "null: the learner's own discount (exact policy invariance)")
    judge_every: int = opt(4, min=1, help="judge every k-th step of an episode; hold the last judgement in between")
    normalize: bool = opt(True, "running z-score of the progress term")
    center: bool | None = opt(None, "subtract the running mean (null: only for progress raw; see normalize.py)")
    ema: float = opt(0.99, help="decay of the normaliser's running mean and variance")
    clip: float = opt(5.0, gt=0.0, help="|z| bound after normalisation")
    # Why count is ≤ 0: episodes end on success, so a positive per-step bonus pays the agent to put
    # success off (see novelty.py); the shifted form ranks scenes the same way.
    novelty: Literal["count", "count_bonus", "none"] = opt(
        "count", "exploration term: count = 1/sqrt(N) − 1 over described states (new scenes cost nothing, "
        "familiar ones up to 1); count_bonus = the plain 1/sqrt(N); none")
    cache: bool = opt(True, "reuse judgements of identical descriptions and near-identical features")
    cache_radius: float = opt(0.05, min=0.0, help="feature distance under which a cached judgement is reused")
    cache_size: int = opt(50_000, min=0, help="judgements kept in the cache")
    # Spelt `async` in YAML and flags (config_io.spelt). Off by default: sync is the reference.
    async_: bool = opt(False, "judge off the step path: scenes wait in a bounded queue for a judge worker thread, a step "
                              "whose judgement is not back yet gets a provisional reward that is relabelled in the replay / "
                              "rollout buffer when it arrives (docs/ARCHITECTURE.md, Async judging)")
    async_batch: int = opt(8, min=1, help="async: scenes per judge call of the worker")
    # Why a bound, and why 1000: on a loaded 2-core machine an unbounded worker fell 12,000 steps behind in a 20k-step
    # reach_tool run (resolved-only batches then drew on its first 8k steps: 0.10 success vs 0.80 sync). At 1000,
    # 3 seeds: 0.88 vs sync 0.84; at 2000: 0.76, SAC's first ~570 updates found no resolved row and drew pending
    # ones. The price: in a 3k-step run 5 steps waited 4.5 s at the bound (0.82x env-only speed there, 0.96x at
    # 2000; docs/BENCHMARKS.md, session 12).
    async_max_lag: int = opt(1000, min=0, help="async: a step that finds more than this many steps still waiting for "
                                               "their judgements waits for the oldest (async_lag_waits); 0: no bound")
    # Why resolved: a provisional row's progress term is the held judgement (0 at γ = 1); trained on, the
    # zeros cost async 0.09 success at 20k steps on reach_tool when the worker fell behind (docs/BENCHMARKS.md).
    async_sample: Literal["resolved", "any"] = opt(
        "resolved", "async, SAC: which replay rows a batch draws — resolved: only rows whose judgement is in "
                    "(a pending one is redrawn, relabel_redrawn); any: pending rows too, with their provisional reward")
    async_queue: int = opt(1024, min=1, help="async: scenes waiting for the judge at most; a step that finds the queue "
                                             "full waits for room (async_queue_full_waits) or, with async_overflow: drop, "
                                             "pushes the oldest skippable scene out")
    # Why drop exists: a judge slower than the envs (PPO with many envs on a CPU) otherwise sets the pace of
    # training; with the potential-delta progress term a skipped judgement only coarsens credit (the next
    # judgement pays the whole change), it does not bias the episode's sum.
    async_overflow: Literal["wait", "drop"] = opt(
        "wait", "async: a full queue makes the step wait (wait: every due scene is judged, sync's rewards), or "
                "(drop: the write-up's ring buffer) the oldest queued scene that is neither the first nor the last "
                "of its episode is skipped — its step holds the last judgement as on a step that is not due (async_dropped); "
                "so is such a scene held back for the cache that the cache cannot answer (async_deferred_skipped)")
    # Why 10: on a machine where training already uses every core, the worker would take CPU from the updates;
    # niced, it takes what they leave over (docs/BENCHMARKS.md, training speed: 0.88× vs 0.77× env-only speed).
    async_nice: int = opt(10, min=0, max=19, help="async: the judge worker thread's niceness (Linux; 0: the training "
                                                  "thread's priority): the judge takes the CPU time training leaves over")

    def shaping_gamma(self, learner_gamma: float = 0.99) -> float:
        """γ of the potential shaping: `gamma`, or with `gamma: null` the learner's discount (SB3's
        default 0.99 where no learner is known, e.g. the wrapper used outside `robo-prm train`)."""
        return float(learner_gamma if self.gamma is None else self.gamma)

    def __post_init__(self):
        if self.judge_every < 1:
            raise ValueError("judge_every must be at least 1")
        if not 0.0 < self.ema < 1.0:
            raise ValueError(f"ema must be in (0, 1), got {self.ema}")
        if not self.stages:
            raise ValueError("stages: give at least one stage")
        starts = [s.start_step for s in self.stages]
        if starts != sorted(starts) or starts[0] != 0:
            raise ValueError("stages: start_step must begin at 0 and increase")
