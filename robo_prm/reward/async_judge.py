"""Judging off the step path (`reward.async: true`): a judge worker thread, a bounded scene queue, and
provisional rewards that are relabelled when the judgements arrive.

At each vector step `BlendedReward` records what the step's reward needs but the judgements
(`StepRecord`). The scenes the blend's cache cannot answer yet go to a bounded FIFO queue
(`reward.async_queue` scenes) that one worker thread serves (a scene whose text, or features within the cache's
radius, an earlier unresolved scene has is held back instead: the cache will likely answer it; if not, it is
sent, ahead of the queue, when its step reaches the front of the line), `reward.async_batch` scenes per judge call
(the backend scores them as one batch). The step then goes to the back of the line of pending steps,
and every step at the front whose judgements are all back is resolved, in env-step order, by the same
code as the synchronous blend: cache lookups (a scene the cache can answer by now takes the cached
judgement, exactly as the synchronous blend would; the worker's answer is then unused and counted as
`async_speculative`), the progress potential, the normaliser update, the total. So with a deterministic
judge, sync and async give the same final rewards.

A step resolved within its own `step` call returns its final reward. Otherwise it returns a
provisional one (`BlendedReward.provisional`: each env's last resolved judgement held, the normaliser
as it stands) and `info["reward_pending"] = True`, `info["reward_step"] = <step id>`; when it is
resolved later, every listener gets `(step id, final rewards, provisional rewards)`: the replay and
rollout buffers of `relabel.py` put the final rewards into the stored rows. Env steps never wait on the model, except:
a step of an episode being recorded with reasons (`explain`) first resolves every pending step and is
then judged synchronously (`async_explain_syncs`); a step that finds the queue full waits for room
(`async_queue_full_waits`); a step that finds more than `reward.async_max_lag` steps unresolved waits for the
oldest (`async_lag_waits`: a judge slower than the envs sets the pace instead of leaving SAC's newest rows
unjudged for thousands of steps); `flush()` (reset, checkpoint, end of a PPO rollout) waits for everything.

The judge is shared by the worker and the main thread (evaluation, explained steps): `LockedJudge`
serialises its calls.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter, deque
from typing import Callable, Sequence

import numpy as np

from robo_prm.types import Judgement, SceneDescription

log = logging.getLogger(__name__)


class LockedJudge:
    """The judge behind a lock: one call at a time from the worker thread and the main thread."""

    def __init__(self, judge):
        self.inner, self.lock = judge, threading.RLock()

    def judge(self, task, scenes, explain: bool = False):
        with self.lock:
            return self.inner.judge(task, scenes, explain=explain)

    def stats(self) -> dict:
        # Not under the lock: counters read mid-batch are at most one batch stale, and a logger must not wait
        # for the model (a stalled judge would stall training's logging with it).
        stats = getattr(self.inner, "stats", None)
        return stats() if callable(stats) else {}

    def close(self) -> None:
        with self.lock:
            close = getattr(self.inner, "close", None)
            if callable(close):
                close()

    def __getattr__(self, name):  # backend, cfg, name, … of the wrapped judge
        return getattr(self.inner, name)


class Ticket:
    """One scene waiting for the worker; `judgement` is set once, by the worker, unless the scene is
    pushed out of a full queue first (`dropped`; only a `skippable` one)."""

    __slots__ = ("scene", "judgement", "skippable", "dropped")

    def __init__(self, scene: SceneDescription, skippable: bool = False):
        self.scene, self.judgement, self.skippable, self.dropped = scene, None, skippable, False

    @property
    def settled(self) -> bool:
        return self.judgement is not None or self.dropped


class JudgeWorker:
    """A thread that judges queued tickets, up to `batch` per call of `judge_fn` (list of scenes → list of
    Judgements, never raising: the blend's `call_judge` falls back to rules itself)."""

    def __init__(self, judge_fn: Callable[[list[SceneDescription]], list[Judgement]], batch: int, capacity: int,
                 nice: int = 0, drop: bool = False):
        self.judge_fn, self.batch, self.capacity, self.nice, self.drop = judge_fn, batch, capacity, nice, drop
        self.cond = threading.Condition()
        self.queue: deque[Ticket] = deque()
        self.busy = 0  # tickets taken off the queue and not yet answered
        self.stopped = False
        self.batches = self.scenes = self.full_waits = self.dropped = 0
        self.busy_s = 0.0
        self.thread = threading.Thread(target=self._run, name="robo_prm-judge-worker", daemon=True)
        self.thread.start()

    def submit(self, scene: SceneDescription, skippable: bool = False, urgent: bool = False) -> Ticket:
        """Queue a scene (at the front when `urgent`: the oldest pending step waits on it, and every later
        step waits on that step)."""
        ticket = Ticket(scene, skippable)
        with self.cond:
            if len(self.queue) >= self.capacity and not (self.drop and self._drop_oldest()):
                self.full_waits += 1
                self.cond.wait_for(lambda: len(self.queue) < self.capacity or self.stopped)
            if urgent:
                self.queue.appendleft(ticket)
            else:
                self.queue.append(ticket)
            self.cond.notify_all()
        return ticket

    def _drop_oldest(self) -> bool:
        """Ring-buffer overflow (under the lock): the oldest skippable queued ticket leaves unanswered."""
        for k, t in enumerate(self.queue):
            if t.skippable:
                del self.queue[k]
                t.dropped = True
                self.dropped += 1
                return True
        return False

    def wait(self, tickets: Sequence[Ticket]) -> None:
        with self.cond:
            while not all(t.settled for t in tickets):
                if not self.thread.is_alive():
                    raise RuntimeError("the judge worker thread died with scenes still queued")
                self.cond.wait(timeout=1.0)

    def _run(self) -> None:
        if self.nice > 0:  # Linux: a thread's niceness is its own (and inherited by threads it starts)
            try:
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), self.nice)
            except (AttributeError, OSError) as exc:
                log.info("could not lower the judge worker's priority: %s", exc)
        while True:
            with self.cond:
                self.cond.wait_for(lambda: self.queue or self.stopped)
                if not self.queue:  # stopped and nothing left
                    return
                take = [self.queue.popleft() for _ in range(min(self.batch, len(self.queue)))]
                self.busy = len(take)
                self.cond.notify_all()  # room in the queue
            t0 = time.perf_counter()
            answers: list = []
            try:
                answers = list(self.judge_fn([t.scene for t in take]))
            except Exception:  # judge_fn falls back itself; this is a bug, not a model failure
                log.exception("the judge worker failed on %d scene(s)", len(take))
            finally:
                with self.cond:
                    for t, j in zip(take, answers + [None] * (len(take) - len(answers))):
                        t.judgement = j if j is not None else _unanswered(t.scene)
                    self.busy = 0
                    self.batches += 1
                    self.scenes += len(take)
                    self.busy_s += time.perf_counter() - t0
                    self.cond.notify_all()

    def close(self) -> None:
        with self.cond:
            self.stopped = True
            self.cond.notify_all()
        self.thread.join(timeout=60)


def _unanswered(scene: SceneDescription) -> Judgement:
    """What a scene gets when the worker itself broke: no progress, zero confidence, marked fallback."""
    return Judgement(progress=0.0, confidence=0.0, backend="none", fallback=True)


class AsyncJudging:
    """The pending steps of one `BlendedReward`, its worker and the relabel listeners."""

    def __init__(self, blend):
        self.blend = blend
        cfg = blend.cfg
        if not isinstance(blend.judge, LockedJudge):
            blend.judge = LockedJudge(blend.judge)
        self.worker = JudgeWorker(lambda scenes: blend.call_judge(scenes, explain=False), cfg.async_batch, cfg.async_queue,
                                  cfg.async_nice, drop=cfg.async_overflow == "drop")
        self.pending: deque = deque()  # StepRecords, oldest first
        self.listeners: list[Callable[[int, np.ndarray, np.ndarray], None]] = []
        self.stat_sources: list[Callable[[], dict]] = []
        self.steps = self.provisional_steps = self.relabelled = self.explain_syncs = 0
        self.speculative = self.late_judged = self.max_pending = self.deferred = self.deferred_sent = 0
        self.deferred_skipped = self.lag_waits = 0
        self.lag_wait_s = 0.0
        self.max_lag = cfg.async_max_lag
        self._inflight: deque = deque()  # (step id, text, features) of judged scenes of unresolved steps
        self._texts: Counter = Counter()
        self._matrix: np.ndarray | None = None

    # ---- the step path ---------------------------------------------------------------
    def step(self, step, infos: Sequence[dict]) -> np.ndarray:
        blend = self.blend
        self.steps += 1
        if step.explained:  # an episode recorded with reasons: exact terms in its info, judged here
            self.flush()
            self.explain_syncs += 1
            blend._resolve(step)
            return self._mark(blend._finish(step, infos), step, infos, pending=False)
        cache = blend.cache
        for i in step.need[False]:
            scene = step.scenes[i]
            if cache is None:
                step.tickets[i] = self.worker.submit(scene, i not in step.anchors)
            elif cache.peek(blend.task.name, scene) or self._near_inflight(scene):
                self.deferred += 1  # the cache will most likely answer it by the time the step is resolved
            else:
                step.tickets[i] = self.worker.submit(scene, i not in step.anchors)
        if cache is not None:
            for i in step.need[False]:  # later steps' scenes compare against these
                self._inflight.append((step.id, step.scenes[i].text, step.scenes[i].features))
                self._texts[step.scenes[i].text] += 1
            self._matrix = None
        self.pending.append(step)
        self.max_pending = max(self.max_pending, len(self.pending))
        final = self._drain(upto=step, infos=infos)
        if final is None and self.max_lag and len(self.pending) > self.max_lag:  # too far behind: wait for the front
            t0 = time.perf_counter()
            self.lag_waits += 1
            final = self._drain(upto=step, infos=infos, block=True, keep=self.max_lag)
            self.lag_wait_s += time.perf_counter() - t0
        if final is not None:
            return self._mark(final, step, infos, pending=False)
        step.provisional = blend.provisional(step, infos)
        self.provisional_steps += 1
        # a copy: SB3 may add to the array it gets (PPO's time-limit bootstrap); the relabel keeps that part
        return self._mark(step.provisional.copy(), step, infos, pending=True)

    @staticmethod
    def _mark(rewards: np.ndarray, step, infos: Sequence[dict], pending: bool) -> np.ndarray:
        for info in infos:
            info["reward_step"] = step.id
            info["reward_pending"] = pending
        return rewards

    def _drain(self, upto=None, infos=None, block: bool = False, keep: int = 0) -> np.ndarray | None:
        """Resolve pending steps from the front while their judgements are back (with `block`, waiting for them
        until at most `keep` steps are left pending). Returns the final rewards of `upto` when it was resolved here
        (its infos get the final terms)."""
        blend = self.blend
        while self.pending:
            step = self.pending[0]
            skipped: list[int] = []
            if not step.checked:  # deferred scenes the cache cannot answer after all go to the worker now
                step.checked = True
                for i in step.need[False]:
                    if i not in step.tickets and not blend.cache.peek(blend.task.name, step.scenes[i]):
                        if self.worker.drop and i not in step.anchors:
                            skipped.append(i)  # the ring never holds the line up for a mid-episode scene
                            self.deferred_skipped += 1
                            continue
                        # urgent: the line is held up by this step, so this scene goes before later steps' scenes
                        step.tickets[i] = self.worker.submit(step.scenes[i], i not in step.anchors, urgent=True)
                        self.deferred_sent += 1
            tickets = list(step.tickets.values())
            if not all(t.settled for t in tickets):
                if not block or len(self.pending) <= keep:
                    return None
                self.worker.wait(tickets)
            self.pending.popleft()
            skipped += [i for i, t in step.tickets.items() if t.dropped]
            if skipped:  # pushed out of the full queue: these envs hold their last judgement, as on a step not due
                step.need[False] = [i for i in step.need[False] if i not in skipped]
            ready = {i: t.judgement for i, t in step.tickets.items() if not t.dropped}
            blend._resolve(step, ready)
            self._forget(step.id)
            final = blend._finish(step, infos if step is upto else None)
            if step is upto:
                return final
            for listener in self.listeners:
                listener(step.id, final, step.provisional)
            self.relabelled += 1
        return None

    def _near_inflight(self, scene: SceneDescription) -> bool:
        """Whether a scene of an earlier, unresolved step has this text or features within the cache's
        radius: once that step is resolved, the cache answers this one (unless the judge was unsure there)."""
        if self._texts[scene.text] > 0:
            return True
        if scene.features is None or not self._inflight:
            return False
        if self._matrix is None:
            feats = [f for _, _, f in self._inflight if f is not None and np.shape(f) == np.shape(scene.features)]
            self._matrix = np.stack(feats) if feats else np.zeros((0, np.size(scene.features)))
        if not len(self._matrix):
            return False
        return float(np.linalg.norm(self._matrix - scene.features[None, :], axis=1).min()) <= self.blend.cache.radius

    def _forget(self, step_id: int) -> None:
        while self._inflight and self._inflight[0][0] <= step_id:
            _, text, _ = self._inflight.popleft()
            self._texts[text] -= 1
            self._matrix = None

    def flush(self) -> None:
        """Wait for every queued judgement and resolve every pending step (relabels included)."""
        self._drain(block=True)

    # ---- plumbing ----------------------------------------------------------------------
    def add_listener(self, relabel: Callable[[int, np.ndarray, np.ndarray], None], stats: Callable[[], dict] | None = None) -> None:
        if relabel not in self.listeners:
            self.listeners.append(relabel)
        if stats is not None and stats not in self.stat_sources:
            self.stat_sources.append(stats)

    def stats(self) -> dict[str, float]:
        """async_steps (vector steps), async_provisional_steps (handed out before their judgements) and
        async_relabelled (resolved later, final rewards sent to the buffers), async_explain_syncs, async_queue_full_waits,
        async_speculative (worker answers unused: the cache answered by resolution time), async_deferred (scenes
        not sent at step time: an unresolved earlier scene had their text or was within the cache's radius) and
        async_deferred_sent (of those, sent when their step reached the front: the cache could not answer), async_late_judged
        (cache misses at resolution with no worker answer, judged on the main thread), async_max_pending,
        async_worker_batches / _scenes / _busy_s, async_dropped (scenes pushed out of the full queue with
        `async_overflow: drop`: their steps held the last judgement), async_deferred_skipped (with drop: deferred
        scenes the cache could not answer after all, skipped rather than sent while the line waited), async_lag_waits /
        _wait_s (steps that found more than `async_max_lag` steps unresolved and waited for the oldest, and the
        seconds spent so); then what the buffers report (relabel_*)."""
        w = self.worker
        out = {"async_steps": self.steps, "async_provisional_steps": self.provisional_steps,
               "async_relabelled": self.relabelled, "async_explain_syncs": self.explain_syncs,
               "async_queue_full_waits": w.full_waits, "async_speculative": self.speculative,
               "async_late_judged": self.late_judged, "async_max_pending": self.max_pending,
               "async_deferred": self.deferred, "async_deferred_sent": self.deferred_sent,
               "async_worker_batches": w.batches, "async_worker_scenes": w.scenes, "async_worker_busy_s": w.busy_s,
               "async_dropped": w.dropped, "async_deferred_skipped": self.deferred_skipped,
               "async_lag_waits": self.lag_waits, "async_lag_wait_s": self.lag_wait_s}
        for source in self.stat_sources:
            out.update(source())
        return out

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self.worker.close()
