"""The blended reward: r = w_env·r_env + w_llm·z(progress term) + w_explore·novelty − w_safety·penalty.

One `BlendedReward` serves a batch of envs; the VecEnv and gymnasium wrappers only feed it.
Per env it keeps the last judgement (held between judged steps) and the previous potential.
"""
from __future__ import annotations

import logging
import math
from typing import Sequence

import numpy as np

from robo_prm.reward.cache import JudgementCache
from robo_prm.reward.config import RewardConfig
from robo_prm.reward.normalize import RunningZScore
from robo_prm.reward.novelty import CountNovelty
from robo_prm.reward.schedule import blend_weights
from robo_prm.types import Judgement, RewardBreakdown, SceneDescription, TaskText

log = logging.getLogger(__name__)


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
        self.judge_calls = 0  # scenes sent to the judge (cache misses)
        self.judge_errors = 0
        self.nan_rewards = 0
        self.explain = [False] * n_envs  # set by the episode recorder for envs whose episode is recorded
        self._reset_envs(range(n_envs))

    def _reset_envs(self, envs):
        if not hasattr(self, "last"):
            self.last: list[Judgement | None] = [None] * self.n
            self.prev_potential: list[float | None] = [None] * self.n
            self.ep_step = [0] * self.n
        for i in envs:
            self.last[i], self.prev_potential[i], self.ep_step[i] = None, None, 0

    def reset(self):
        self._reset_envs(range(self.n))

    # ---- judging ----------------------------------------------------------------
    def _judge(self, scenes: list[SceneDescription], explain: bool) -> list[Judgement]:
        out: list[Judgement | None] = [None] * len(scenes)
        todo = []
        for i, scene in enumerate(scenes):
            hit = self.cache.get(self.task.name, scene, need_reason=explain) if self.cache else None
            if hit is not None:
                out[i] = hit
            else:
                todo.append(i)
        if todo:
            batch = [scenes[i] for i in todo]
            try:
                answers = self.judge.judge(self.task, batch, explain=explain)
            except Exception as exc:  # a judge must never crash training: fall back, count, log
                self.judge_errors += 1
                log.warning("judge failed (%s: %s); using the rules judge for %d scene(s)", type(exc).__name__, exc, len(batch))
                if self.fallback_judge is None:
                    from robo_prm.judge import make_judge
                    from robo_prm.judge.config import JudgeConfig

                    self.fallback_judge = make_judge(JudgeConfig(backend="rules"))
                answers = self.fallback_judge.judge(self.task, batch, explain=False)
            self.judge_calls += len(batch)
            for i, j in zip(todo, answers):
                out[i] = j
                if self.cache is not None:
                    self.cache.put(self.task.name, scenes[i], j)
        return out  # type: ignore[return-value]

    # ---- one vector step ----------------------------------------------------------
    def __call__(self, env_rewards: Sequence[float], dones: Sequence[bool], infos: Sequence[dict]) -> np.ndarray:
        cfg = self.cfg
        need: dict[bool, list[int]] = {True: [], False: []}
        for i, info in enumerate(infos):
            self.ep_step[i] += 1
            if self.last[i] is None or dones[i] or self.ep_step[i] % cfg.judge_every == 0:
                need[self.explain[i]].append(i)
        for explain, envs in need.items():
            if envs:
                answers = self._judge([infos[i]["description"] for i in envs], explain)
                for i, j in zip(envs, answers):
                    self.last[i] = j
        weights = blend_weights(cfg, self.total_steps)
        rewards = np.zeros(len(infos), dtype=np.float32)
        for i, info in enumerate(infos):
            j = self.last[i]
            progress = float(j.progress) if math.isfinite(j.progress) else 0.0
            if info.get("is_success"):
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
            explore = self.novelty(info["description"].text) if cfg.novelty != "none" else 0.0
            safety = float(sum(h.severity for h in j.hazards if h.probability >= 0.5))  # the judge filled in each severity
            env = float(env_rewards[i])
            terms = {"env": env, "llm": llm, "explore": explore, "safety": safety}
            total = weights["env"] * env + weights["llm"] * llm + weights["explore"] * explore - weights["safety"] * safety
            if not math.isfinite(total):  # never hand SB3 a NaN: keep the env reward alone
                self.nan_rewards += 1
                log.warning("non-finite blended reward %r (terms %r); using the env reward", total, terms)
                total = env if math.isfinite(env) else 0.0
            rewards[i] = total
            info["reward_terms"] = RewardBreakdown(terms=terms, weights=weights, total=float(total)).as_info()
            info["reward_terms"]["term/llm_raw"] = llm_raw
            info["judgement"] = j
        done_envs = [i for i, d in enumerate(dones) if d]
        self._reset_envs(done_envs)
        for i in done_envs:
            self.explain[i] = False
        self.total_steps += len(infos)
        return rewards

    # ---- logging and checkpoints ------------------------------------------------------
    def stats(self) -> dict[str, float]:
        """The blend's own counts (blend_judge_calls: scenes sent to the judge, i.e. cache misses;
        blend_judge_errors: judge calls that raised; nan_rewards), cache_* from the judgement cache and
        judge_* from the judge's stats(): three prefixes, so no count overwrites another."""
        out = {"blend_judge_calls": self.judge_calls, "blend_judge_errors": self.judge_errors, "nan_rewards": self.nan_rewards}
        if self.cache is not None:
            out.update({f"cache_{k}": v for k, v in self.cache.stats().items()})
        judge_stats = getattr(self.judge, "stats", None)
        if callable(judge_stats):
            out.update({f"judge_{k}": v for k, v in judge_stats().items() if isinstance(v, (int, float))})
        return out

    def state_dict(self) -> dict:
        return {"total_steps": self.total_steps, "z": self.z.state_dict(), "novelty": self.novelty.state_dict()}

    def load_state_dict(self, d: dict):
        self.total_steps = int(d["total_steps"])
        self.z.load_state_dict(d["z"])
        self.novelty.load_state_dict(d["novelty"])
