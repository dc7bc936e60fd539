"""SB3 buffers that take the async judge's late rewards (`reward.async: true`), through SB3's own extension
points: `replay_buffer_class` (SAC) and `rollout_buffer_class` (PPO), attached to the blend by
`RelabelCallback` when training starts.

SAC — `RelabelReplayBuffer`: a transition enters the buffer with the reward the blend handed out at
step time; for a pending step (`info["reward_pending"]`) the buffer notes which row holds which step
id, and when the blend resolves that step it sets the row's reward to the final one, in place
(a row overwritten in the meantime is skipped: `relabel_lost`). What a row still waiting for its judgement
does in a batch is `reward.async_sample`:

* `resolved` (the default): it is not drawn. A batch index that lands on a pending row is drawn again among the
  resolved ones, so no SAC update trains on a provisional reward, as no PPO update does; the freshest rows join
  the batches when their judgements arrive (`relabel_redrawn` counts the redrawn indices). Only while no row is
  resolved yet are pending rows drawn. Why: a provisional row carries the progress term of the last judgement
  held, 0 at the default γ = 1, where a held judgement pays nothing; under load the worker fell 4–8k steps
  behind and SAC trained on those zeros (reach_tool 20k: 0.80 success async against 0.89 sync, BENCHMARKS).
* `any`: it is drawn and trained on with its provisional reward — the env, exploration and safety terms as they
  will stay and the held progress term.

How often a drawn row was still provisional: `relabel_sampled_pending` of `relabel_sampled`
(`relabel_sampled_pending_rate`, in TensorBoard under judge/ and in summary.json).

PPO — `RelabelRolloutBuffer`: before returns and advantages are computed at the end of a rollout it
waits for the rollout's outstanding judgements (`flush`) and patches its rewards the same way; no
update ever sees a provisional reward.

Pickling a replay buffer (a checkpoint) flushes the blend first, so the saved rows are final.
"""
from __future__ import annotations

import numpy as np
from stable_baselines3.common.buffers import ReplayBuffer, RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback


def _relabelled(stored: np.ndarray, final: np.ndarray, provisional: np.ndarray) -> np.ndarray:
    """final + (stored − provisional) in the buffer's float32: exactly `final` where SB3 stored the reward as
    handed out (SAC; PPO away from time limits)."""
    stored = np.asarray(stored, dtype=np.float32)
    extra = stored - np.asarray(provisional, dtype=np.float32).reshape(stored.shape)
    return np.asarray(final, dtype=np.float32).reshape(stored.shape) + extra


class _Relabels:
    """Which rows wait for which step, and the final rewards that arrive for them."""

    def _init_relabel(self) -> None:
        self._blend = None
        self._rows: dict[int, tuple[int, int]] = {}  # step id → (row, adds before it)
        self._early: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # (final, provisional) that came before the row
        self._adds = 0
        self._pending_rows = np.zeros(self.buffer_size, dtype=bool)
        self.relabel_counts = {"relabelled": 0, "lost": 0, "sampled": 0, "sampled_pending": 0, "redrawn": 0}

    def attach(self, blend) -> None:
        self._blend = blend
        if blend.asynchronous is not None:
            blend.asynchronous.add_listener(self.relabel, self.relabel_stats)

    def _store(self, row: int, step: int | None, pending: bool, reward: np.ndarray) -> np.ndarray:
        """Called before the row is written: notes a pending row, applies a final reward that came early."""
        reward = np.array(reward, dtype=np.float32, copy=True)
        self._pending_rows[row] = False
        if step is not None:
            early = self._early.pop(step, None)
            if early is not None:
                reward = _relabelled(reward, *early)
                self.relabel_counts["relabelled"] += 1
            elif pending:
                self._rows[step] = (row, self._adds)
                self._pending_rows[row] = True
        self._adds += 1
        return reward

    def relabel(self, step: int, final: np.ndarray, provisional: np.ndarray) -> None:
        """Give the row that holds `step` its final reward (per env; what SB3 added to the provisional one,
        e.g. PPO's bootstrap at a time limit, stays added)."""
        where = self._rows.pop(step, None)
        if where is None:
            if self._blend is not None and step >= self._next_step():
                self._early[step] = (np.asarray(final), np.asarray(provisional))  # resolved before SB3 stored it
            else:
                self.relabel_counts["lost"] += 1
            return
        row, adds = where
        if self._adds - adds > self.buffer_size:  # the row was overwritten since
            self.relabel_counts["lost"] += 1
            return
        self.rewards[row] = _relabelled(self.rewards[row], final, provisional)
        self._pending_rows[row] = False
        self.relabel_counts["relabelled"] += 1

    def _next_step(self) -> int:
        """Id of the blend's most recent step: one not stored yet when its final reward comes."""
        return self._blend.steps_recorded - 1

    def relabel_stats(self) -> dict[str, float]:
        c = self.relabel_counts
        return {**{f"relabel_{k}": v for k, v in c.items()},
                "relabel_sampled_pending_rate": c["sampled_pending"] / c["sampled"] if c["sampled"] else 0.0}


REDRAWS = 8  # rounds of redrawing pending indices before the resolved rows are listed outright


class RelabelReplayBuffer(_Relabels, ReplayBuffer):
    """SAC's replay buffer with rewards that are relabelled when the async judge answers (module doc)."""

    def __init__(self, *args, sample: str = "resolved", **kwargs):
        super().__init__(*args, **kwargs)
        if sample not in ("resolved", "any"):
            raise ValueError(f"reward.async_sample must be 'resolved' or 'any', got {sample!r}")
        self.sample_rows = sample
        self._init_relabel()

    def sample(self, batch_size: int, env=None):
        if self.sample_rows == "any" or self.optimize_memory_usage:
            return super().sample(batch_size, env)
        upper = self.buffer_size if self.full else self.pos
        inds = np.random.randint(0, upper, size=batch_size)
        pending = self._pending_rows[inds]
        for _ in range(REDRAWS):  # rejection: pending rows are a small share of a grown buffer
            if not pending.any():
                break
            self.relabel_counts["redrawn"] += int(pending.sum())
            inds[pending] = np.random.randint(0, upper, size=int(pending.sum()))
            pending = self._pending_rows[inds]
        if pending.any():  # most rows still wait (early in training): draw among the resolved ones, if any
            resolved = np.flatnonzero(~self._pending_rows[:upper])
            if len(resolved):
                self.relabel_counts["redrawn"] += int(pending.sum())
                inds[pending] = resolved[np.random.randint(0, len(resolved), size=int(pending.sum()))]
        return self._get_samples(inds, env=env)

    def add(self, obs, next_obs, action, reward, done, infos) -> None:
        info = infos[0] if infos else {}
        reward = self._store(self.pos, info.get("reward_step"), bool(info.get("reward_pending")), reward)
        super().add(obs, next_obs, action, reward, done, infos)

    def _get_samples(self, batch_inds: np.ndarray, env=None):
        # A vector step is pending for all its envs at once, so the row tells (SB3 draws the env column).
        self.relabel_counts["sampled"] += len(batch_inds)
        self.relabel_counts["sampled_pending"] += int(self._pending_rows[batch_inds].sum())
        return super()._get_samples(batch_inds, env)

    def __getstate__(self):
        if self._blend is not None and self._blend.asynchronous is not None:
            self._blend.asynchronous.flush()  # a saved buffer holds final rewards
        state = self.__dict__.copy()
        state["_blend"] = None
        return state

    def __setstate__(self, state):  # a buffer saved before async_sample existed sampled every row
        self.__dict__.update({"sample_rows": "any", **state})
        self.relabel_counts.setdefault("redrawn", 0)


class RelabelRolloutBuffer(_Relabels, RolloutBuffer):
    """PPO's rollout buffer: the rollout's judgements are waited for, and its rewards patched, before
    returns and advantages are computed (module doc)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._init_relabel()

    def reset(self) -> None:
        super().reset()
        if hasattr(self, "_rows"):
            self._rows.clear()
            self._pending_rows[:] = False

    def add(self, obs, action, reward, episode_start, value, log_prob) -> None:
        step, pending = None, False
        if self._blend is not None:  # the rollout buffer gets no infos: the blend's newest step is this one
            step = self._blend.steps_recorded - 1
            waiting = self._blend.asynchronous.pending if self._blend.asynchronous is not None else ()
            pending = bool(waiting) and waiting[-1].id == step
        reward = self._store(self.pos, step, pending, reward)
        super().add(obs, action, reward, episode_start, value, log_prob)

    def compute_returns_and_advantage(self, last_values, dones) -> None:
        if self._blend is not None and self._blend.asynchronous is not None:
            self._blend.asynchronous.flush()  # every reward of the rollout is final from here on
        super().compute_returns_and_advantage(last_values, dones)

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_blend"] = None
        return state


def relabel_kwargs(algo: str, async_judging: bool, sample: str = "resolved") -> dict:
    """The SB3 keywords that install the relabelling buffer: only with async judging (sync is the reference)."""
    if not async_judging:
        return {}
    if algo == "sac":
        return {"replay_buffer_class": RelabelReplayBuffer, "replay_buffer_kwargs": {"sample": sample}}
    return {"rollout_buffer_class": RelabelRolloutBuffer}


class RelabelCallback(BaseCallback):
    """Connects the training env's async blend to the model's buffer when training starts; at the end
    resolves what is still pending (the buffer's last rows get their final rewards)."""

    def _on_training_start(self) -> None:
        from robo_prm.reward.wrappers import LLMRewardVecEnv

        venv, blend = self.training_env, None
        while venv is not None and blend is None:
            blend = venv.blend if isinstance(venv, LLMRewardVecEnv) else None
            venv = getattr(venv, "venv", None)
        self.blend = blend
        if blend is None or blend.asynchronous is None:
            return
        buffer = getattr(self.model, "replay_buffer", None) or getattr(self.model, "rollout_buffer", None)
        if not isinstance(buffer, _Relabels):
            raise TypeError(f"reward.async needs {RelabelReplayBuffer.__name__} / {RelabelRolloutBuffer.__name__} "
                            f"(relabel_kwargs), not {type(buffer).__name__}")
        buffer.attach(blend)

    def _on_step(self) -> bool:
        return True

    def _on_training_end(self) -> None:
        if self.blend is not None and self.blend.asynchronous is not None:
            self.blend.asynchronous.flush()
