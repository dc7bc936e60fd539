"""The blended reward: r = w_env·r_env + w_llm·z(progress term) + w_explore·novelty − w_safety·penalty.

One `BlendedReward` serves a batch of envs; the VecEnv and gymnasium wrappers only feed it.
Per env it keeps the last judgement (held between judged steps) and the previous potential.

A vector step is handled in two halves. `_record` (at step time, in env-step order): which envs are
judged now, the novelty counts, the schedule's weights, the env rewards. `_resolve` + `_finish` (in the
same env-step order, once the step's judgements are known): cache lookups and the judge, the progress
potential, the normaliser, the total. Synchronously the halves run back to back; with `reward.async`
(`async_judge.AsyncJudging`) the judge works on a thread between them and a step whose judgement is not
back yet gets a provisional reward, relabelled later. The normaliser, novelty and schedule see the
same values in the same order either way, so a deterministic judge gives the same final rewards.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from robo_prm.reward.cache import JudgementCache
from robo_prm.reward.config import RewardConfig
from robo_prm.reward.normalize import RunningZScore
from robo_prm.reward.novelty import CountNovelty
from robo_prm.reward.schedule import blend_weights
from robo_prm.types import Judgement, RewardBreakdown, SceneDescription, TaskText

log = logging.getLogger(__name__)


@dataclass
class StepRecord:
    """One vector step as known at step time: everything its reward needs but the judgements."""

    id: int
    env: np.ndarray  # env rewards
    dones: list[bool]
    success: list[bool]
    explore: list[float]
    weights: dict[str, float]
    need: dict[bool, list[int]]  # explain flag → envs judged at this step
    scenes: dict[int, SceneDescription]  # env → its description, for the judged envs
    tickets: dict = field(default_factory=dict)  # async: env → ticket of the judge worker
    provisional: np.ndarray | None = None  # async: the rewards handed out before the judgements came
    explained: bool = False  # an env's episode is recorded with reasons (async: resolved at once)
    checked: bool = False  # async: its deferred scenes were looked up again at the front of the line
    anchors: frozenset = frozenset()  # envs judged because their episode begins or ends here (never skipped)


class BlendedReward:
    def __init__(self, task: TaskText, judge, cfg: RewardConfig, n_envs: int = 1, fallback_judge=None):
        self.task, self.judge, self.cfg, self.n = task, judge, cfg, n_envs
        self.fallback_judge = fallback_judge
        self.gamma = cfg.shaping_gamma()
        center = cfg.progress == "raw" if cfg.center is None else cfg.center
        self.z = RunningZScore(cfg.ema, cfg.clip, center=center)
        self.novelty = CountNovelty(shift=-1.0 if cfg.novelty == "count" else 0.0)
        self.cache = JudgementCache(cfg.cache_radius, cfg.cache_size) if cfg.cache else None
        self.total_steps = 0
        self.steps_recorded = 0  # vector steps; a step's id
        self.judge_calls = 0  # scenes sent to the judge (cache misses)
        self.judge_errors = 0
        self.nan_rewards = 0
        self.explain = [False] * n_envs  # set by the episode recorder for envs whose episode is recorded
        self.last: list[Judgement | None] = [None] * n_envs
        self.prev_potential: list[float | None] = [None] * n_envs
        self.ep_step = [0] * n_envs
        self.fresh = [True] * n_envs  # no judgement asked since the episode began (step-time state)
        self.asynchronous = None
        if cfg.async_:
            from robo_prm.reward.async_judge import AsyncJudging

            self.asynchronous = AsyncJudging(self)

    def reset(self):
        if self.asynchronous is not None:
            self.asynchronous.flush()  # steps taken before the reset are resolved first, in order
        for i in range(self.n):
            self.last[i], self.prev_potential[i], self.ep_step[i], self.fresh[i] = None, None, 0, True

    # ---- judging ----------------------------------------------------------------
    def call_judge(self, scenes: list[SceneDescription], explain: bool) -> list[Judgement]:
        """The judge's answers; a judge that raises gets the rules judge's (counted, logged)."""
        try:
            return self.judge.judge(self.task, scenes, explain=explain)
        except Exception as exc:  # a judge must never crash training: fall back, count, log
            self.judge_errors += 1
            log.warning("judge failed (%s: %s); using the rules judge for %d scene(s)", type(exc).__name__, exc, len(scenes))
            if self.fallback_judge is None:
                from robo_prm.judge import make_judge
                from robo_prm.judge.config import JudgeConfig

                self.fallback_judge = make_judge(JudgeConfig(backend="rules"))
            return self.fallback_judge.judge(self.task, scenes, explain=False)

    def _judge(self, scenes: list[SceneDescription], explain: bool,
               ready: Sequence[Judgement | None] | None = None) -> list[Judgement]:
        """Cache, then the judge for the misses (`ready[i]`: the async worker's answer for scene i)."""
        out: list[Judgement | None] = [None] * len(scenes)
        todo = []
        for i, scene in enumerate(scenes):
            hit = self.cache.get(self.task.name, scene, need_reason=explain) if self.cache else None
            if hit is not None:
                out[i] = hit
            else:
                todo.append(i)
        if ready is not None and self.asynchronous is not None:  # worker answers the cache made unnecessary
            self.asynchronous.speculative += sum(ready[i] is not None for i in range(len(scenes)) if out[i] is not None)
        if todo:
            late = [i for i in todo if ready is None or ready[i] is None]
            answers = dict(zip(late, self.call_judge([scenes[i] for i in late], explain))) if late else {}
            if ready is not None and self.asynchronous is not None:
                self.asynchronous.late_judged += len(late)
            self.judge_calls += len(todo)
            for i in todo:
                out[i] = answers[i] if i in answers else ready[i]
                if self.cache is not None:
                    self.cache.put(self.task.name, scenes[i], out[i])
        return out  # type: ignore[return-value]

    # ---- one vector step ----------------------------------------------------------
    def __call__(self, env_rewards: Sequence[float], dones: Sequence[bool], infos: Sequence[dict]) -> np.ndarray:
        step = self._record(env_rewards, dones, infos)
        if self.asynchronous is not None:
            return self.asynchronous.step(step, infos)
        self._resolve(step)
        return self._finish(step, infos)

    def _record(self, env_rewards: Sequence[float], dones: Sequence[bool], infos: Sequence[dict]) -> StepRecord:
        """The step-time half: who is judged now, novelty, schedule weights (all in env-step order)."""
        cfg = self.cfg
        need: dict[bool, list[int]] = {True: [], False: []}
        scenes, anchors = {}, set()
        for i, info in enumerate(infos):
            self.ep_step[i] += 1
            if self.fresh[i] or dones[i]:
                anchors.add(i)
            if i in anchors or self.ep_step[i] % cfg.judge_every == 0:
                need[self.explain[i]].append(i)
                scenes[i] = info["description"]
                self.fresh[i] = False
        explore = [self.novelty(info["description"].text) if cfg.novelty != "none" else 0.0 for info in infos]
        step = StepRecord(self.steps_recorded, np.asarray(env_rewards, dtype=np.float64).copy(), [bool(d) for d in dones],
                          [bool(info.get("is_success")) for info in infos], explore, blend_weights(cfg, self.total_steps),
                          need, scenes, explained=any(self.explain), anchors=frozenset(anchors))
        for i, d in enumerate(dones):
            if d:
                self.ep_step[i], self.fresh[i], self.explain[i] = 0, True, False
        self.steps_recorded += 1
        self.total_steps += len(infos)
        return step

    def _resolve(self, step: StepRecord, ready: dict[int, Judgement] | None = None) -> None:
        """The judgements of `step`'s judged envs (cache, `ready` answers, else the judge) → `last`."""
        for explain, envs in step.need.items():
            if envs:
                answers = self._judge([step.scenes[i] for i in envs], explain,
                                      None if ready is None else [ready.get(i) for i in envs])
                for i, j in zip(envs, answers):
                    self.last[i] = j

    def _finish(self, step: StepRecord, infos: Sequence[dict] | None = None) -> np.ndarray:
        """The resolved half: potentials, normaliser (updated here, in env-step order) and totals."""
        cfg = self.cfg
        rewards = np.zeros(len(step.dones), dtype=np.float32)
        for i in range(len(step.dones)):
            j = self.last[i]
            progress = float(j.progress) if math.isfinite(j.progress) else 0.0
            if step.success[i]:
                # The environment's success check is ground truth: a finished task is full progress,
                # whatever the judge read (otherwise a judge that rates "at the hammer" below
                # "10 cm above it" charges the agent for finishing).
                progress = 1.0
            if cfg.progress == "potential":
                prev = progress if self.prev_potential[i] is None else self.prev_potential[i]
                llm_raw = self.gamma * progress - prev
            else:
                llm_raw = progress
            self.prev_potential[i] = progress
            llm = self.z(llm_raw) if cfg.normalize else llm_raw
            rewards[i] = self._total(step, i, llm, llm_raw, j, infos)
        for i, d in enumerate(step.dones):
            if d:
                self.last[i], self.prev_potential[i] = None, None
        return rewards

    def provisional(self, step: StepRecord, infos: Sequence[dict] | None = None) -> np.ndarray:
        """Rewards of a step whose judgements are not back: each env's last resolved judgement held (the
        potential unchanged, so the progress term is (γ − 1)Φ: 0 at the default γ = 1; a success step still
        counts as full progress), normalised by the statistics as they stand, which are not updated."""
        rewards = np.zeros(len(step.dones), dtype=np.float32)
        for i in range(len(step.dones)):
            j = self.last[i]
            phi = float(j.progress) if j is not None and math.isfinite(j.progress) else 0.0
            progress = 1.0 if step.success[i] else phi
            llm_raw = self.gamma * progress - phi if self.cfg.progress == "potential" else progress
            llm = self.z.peek(llm_raw) if self.cfg.normalize else llm_raw
            rewards[i] = self._total(step, i, llm, llm_raw, j, infos)
        return rewards

    def _total(self, step: StepRecord, i: int, llm: float, llm_raw: float, j: Judgement | None,
               infos: Sequence[dict] | None) -> float:
        w = step.weights
        safety = float(sum(h.severity for h in j.hazards if h.probability >= 0.5)) if j is not None else 0.0
        env, explore = float(step.env[i]), step.explore[i]
        terms = {"env": env, "llm": llm, "explore": explore, "safety": safety}
        total = w["env"] * env + w["llm"] * llm + w["explore"] * explore - w["safety"] * safety
        if not math.isfinite(total):  # never hand SB3 a NaN: keep the env reward alone
            self.nan_rewards += 1
            log.warning("non-finite blended reward %r (terms %r); using the env reward", total, terms)
            total = env if math.isfinite(env) else 0.0
        if infos is not None:
            infos[i]["reward_terms"] = RewardBreakdown(terms=terms, weights=w, total=float(total)).as_info()
            infos[i]["reward_terms"]["term/llm_raw"] = llm_raw
            infos[i]["judgement"] = j
        return float(total)

    # ---- logging and checkpoints ------------------------------------------------------
    def stats(self) -> dict[str, float]:
        """The blend's own counts (blend_judge_calls: scenes sent to the judge, i.e. cache misses;
        blend_judge_errors: judge calls that raised; nan_rewards), cache_* from the judgement cache,
        judge_* from the judge's stats() and, with reward.async, async_* (async_judge.py) and relabel_*
        (the buffers, relabel.py): prefixes, so no count overwrites another."""
        out = {"blend_judge_calls": self.judge_calls, "blend_judge_errors": self.judge_errors, "nan_rewards": self.nan_rewards}
        if self.cache is not None:
            out.update({f"cache_{k}": v for k, v in self.cache.stats().items()})
        judge_stats = getattr(self.judge, "stats", None)
        if callable(judge_stats):
            out.update({f"judge_{k}": v for k, v in judge_stats().items() if isinstance(v, (int, float))})
        if self.asynchronous is not None:
            out.update(self.asynchronous.stats())
        return out

    def state_dict(self) -> dict:
        if self.asynchronous is not None:
            self.asynchronous.flush()  # a checkpoint holds resolved steps only
        return {"total_steps": self.total_steps, "z": self.z.state_dict(), "novelty": self.novelty.state_dict()}

    def load_state_dict(self, d: dict):
        self.total_steps = int(d["total_steps"])
        self.z.load_state_dict(d["z"])
        self.novelty.load_state_dict(d["novelty"])

    def close(self) -> None:
        """Stops the async worker (pending steps are resolved first); the judge stays open (its owner closes it)."""
        if self.asynchronous is not None:
            self.asynchronous.close()
