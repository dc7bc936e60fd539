"""Async judging (`reward.async`): with a deterministic judge the final rewards equal the synchronous
blend's, step for step; SAC's replay buffer and PPO's rollout buffer hold the same rewards as in a
synchronous run; rows sampled before their judgement are counted."""
from __future__ import annotations

import threading
import time
import zlib

import numpy as np
import pytest
import torch

from robo_prm.envs.task import load_task
from robo_prm.reward import BlendedReward, RewardConfig
from robo_prm.reward.relabel import RelabelCallback, RelabelReplayBuffer
from robo_prm.types import HazardReport, Judgement, SceneDescription


class HashJudge:
    """Deterministic: the progress is a function of the text; every 5th text is unsure, and then the
    rules answer from the state (here: the first feature), as `ConfidentJudge` does. `gate`, when given,
    holds every call until it is set; `delay` slows each call down."""

    name = "hash"

    def __init__(self, delay: float = 0.0, gate: threading.Event | None = None):
        self.delay, self.gate, self.calls, self.batches, self.seen = delay, gate, 0, [], []

    def judge(self, task, scenes, explain=False):
        if self.gate is not None:
            assert self.gate.wait(120), "the test never opened the gate"
        time.sleep(self.delay)
        self.batches.append(len(scenes))
        out = []
        for s in scenes:
            self.calls += 1
            self.seen.append(id(s))
            h = zlib.crc32(s.text.encode())
            hazards = (HazardReport("tool_near_edge", 0.5, 1.0),) if h % 3 == 0 else ()
            if h % 5 == 0:  # unsure: the state decides, so equal texts may get different judgements
                out.append(Judgement(progress=float(s.features[0]) % 1.0, confidence=1.0, hazards=hazards,
                                     backend="rules", fallback=True, reason="why" if explain else None))
            else:
                out.append(Judgement(progress=(h % 1000) / 999.0, confidence=0.9, hazards=hazards, backend="hash",
                                     reason="why" if explain else None))
        return out


def _stream(n_steps: int, n_envs: int, seed: int = 0):
    """(env rewards, dones, infos) per vector step: texts from a small pool (exact cache hits), features
    on a coarse grid (nearest-neighbour hits), episodes ending at random, some successes."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_steps):
        dones = rng.random(n_envs) < 0.06
        infos = []
        for i in range(n_envs):
            k = int(rng.integers(0, 40))
            feats = np.round(rng.random(3) * 4) / 4 + (0.01 * rng.random(3) if k % 2 else 0.0)
            infos.append({"description": SceneDescription(f"The gripper is {k} cm from the hammer.", (), features=feats),
                          "is_success": bool(dones[i] and rng.random() < 0.3)})
        out.append((rng.normal(size=n_envs).astype(np.float32), dones, infos))
    return out


def _episode_start(stream, t: int, k: int) -> int:
    """The vector step at which env k's episode that holds step t began."""
    while t > 0 and not stream[t - 1][1][k]:
        t -= 1
    return t


def _copy(infos):
    return [dict(i) for i in infos]


@pytest.mark.parametrize("progress", ["potential", "raw"])
def test_async_final_rewards_equal_sync_step_for_step(progress):
    task = load_task("push_tool_from_edge").text
    n_envs, stream = 3, _stream(300, 3)
    cfg = RewardConfig(progress=progress, judge_every=2, cache_radius=0.05)
    sync = BlendedReward(task, HashJudge(), cfg, n_envs)
    want = [sync(r, d, _copy(i)) for r, d, i in stream]

    gate = threading.Event()
    acfg = RewardConfig(progress=progress, judge_every=2, cache_radius=0.05, async_=True, async_batch=4, async_queue=4096)
    blend = BlendedReward(task, HashJudge(gate=gate), acfg, n_envs)
    finals: dict[int, np.ndarray] = {}
    blend.asynchronous.add_listener(lambda step, final, provisional: finals.__setitem__(step, final.copy()))
    handed, pending = [], []
    for t, (r, d, i) in enumerate(stream):
        if t == 120:
            gate.set()  # the first 120 steps run ahead of a stalled judge
        infos = _copy(i)
        handed.append(blend(r, d, infos))
        pending.append(infos[0]["reward_pending"])
        assert all(info["reward_step"] == t for info in infos)
    blend.asynchronous.flush()
    got = [finals[t] if p else h for t, (h, p) in enumerate(zip(handed, pending))]
    np.testing.assert_array_equal(np.stack(got), np.stack(want))  # exact: same arithmetic, same order
    st = blend.stats()
    assert st["async_provisional_steps"] == sum(pending) >= 120 and st["async_relabelled"] == sum(pending)
    assert not np.array_equal(np.stack(handed), np.stack(want))  # the provisional rewards did differ
    for k in ("cache_hits_exact", "cache_hits_nn", "cache_misses", "blend_judge_calls"):
        assert st[k] == sync.stats()[k]  # the cache answered the same scenes in both
    # scenes the cache would answer are held back, not judged twice: the model sees what it sees synchronously
    assert blend.judge.inner.calls == sync.judge.calls and st["async_speculative"] == st["async_late_judged"] == 0
    assert st["async_deferred"] > st["async_deferred_sent"] > 0 and max(blend.judge.inner.batches) <= 4
    blend.close()


def test_a_step_too_far_ahead_of_the_judge_waits_and_the_rewards_stay_the_syncs():
    task = load_task("push_tool_from_edge").text
    n_envs, stream = 2, _stream(150, 2, seed=3)
    cfg = RewardConfig(judge_every=2, cache_radius=0.05)
    sync = BlendedReward(task, HashJudge(), cfg, n_envs)
    want = [sync(r, d, _copy(i)) for r, d, i in stream]
    acfg = RewardConfig(judge_every=2, cache_radius=0.05, async_=True, async_batch=2, async_max_lag=10)
    blend = BlendedReward(task, HashJudge(delay=0.01), acfg, n_envs)
    finals: dict[int, np.ndarray] = {}
    blend.asynchronous.add_listener(lambda step, final, provisional: finals.__setitem__(step, final.copy()))
    got, lines = [], []
    for r, d, i in stream:
        infos = _copy(i)
        handed = blend(r, d, infos)
        got.append((infos[0]["reward_step"], infos[0]["reward_pending"], handed))
        lines.append(len(blend.asynchronous.pending))
    blend.asynchronous.flush()
    final = [finals[t] if pending else h for t, pending, h in got]
    np.testing.assert_array_equal(np.stack(final), np.stack(want))
    st = blend.stats()
    assert max(lines) <= 10 and st["async_max_pending"] == 11  # the step that found 10 ahead of it waited
    assert st["async_lag_waits"] > 0 and st["async_lag_wait_s"] > 0
    blend.close()


def test_a_full_ring_skips_the_oldest_mid_episode_scene_and_never_waits():
    """async_overflow: drop — with the judge stalled, steps go on; the oldest skippable scene leaves a full
    queue, episode starts and ends are always judged, judged + skipped scenes are the due ones."""
    task = load_task("push_tool_from_edge").text
    n_envs, stream = 2, _stream(200, 2, seed=5)
    gate = threading.Event()
    safety = threading.Timer(60, gate.set)  # a bug that waits would hang the test without this
    safety.start()
    judge = HashJudge(gate=gate)
    cfg = RewardConfig(judge_every=2, cache=False, async_=True, async_batch=2, async_queue=96, async_overflow="drop")
    blend = BlendedReward(task, judge, cfg, n_envs)
    for r, d, i in stream:
        assert np.isfinite(blend(r, d, _copy(i))).all()
    assert not gate.is_set(), "a step waited for the stalled judge"
    st = blend.stats()
    assert st["async_queue_full_waits"] == 0 and st["async_dropped"] > 50
    queued = list(blend.asynchronous.worker.queue)
    assert 90 <= len(queued) <= 96 and any(not t.skippable for t in queued)
    gate.set()
    safety.cancel()
    blend.asynchronous.flush()
    st = blend.stats()
    assert st["async_relabelled"] == st["async_provisional_steps"] == len(stream) and not blend.asynchronous.pending
    # each env's first scene, the scenes after an episode ended and those that ended one were all judged
    starts = [{k for k in range(n_envs) if t == 0 or stream[t - 1][1][k] or d[k]} for t, (_, d, _) in enumerate(stream)]
    anchors = {id(i[k]["description"]) for (_, _, i), ks in zip(stream, starts) for k in ks}
    assert anchors <= set(judge.seen)
    due = sum(1 for t in range(len(stream)) for k in range(n_envs) if k in starts[t] or (t + 1 - _episode_start(stream, t, k)) % 2 == 0)
    assert st["async_worker_scenes"] == len(judge.seen) and st["async_worker_scenes"] + st["async_dropped"] == due
    blend.close()


def _run_async(task, cfg, stream, n_envs, judge, release_at=None, gate=None):
    finals: dict[int, np.ndarray] = {}
    blend = BlendedReward(task, judge, cfg, n_envs)
    blend.asynchronous.add_listener(lambda step, final, provisional: finals.__setitem__(step, final.copy()))
    handed, pending = [], []
    for t, (r, d, i) in enumerate(stream):
        if gate is not None and t == release_at:
            gate.set()
        infos = _copy(i)
        handed.append(blend(r, d, infos))
        pending.append(infos[0]["reward_pending"])
    blend.asynchronous.flush()
    return blend, np.stack([finals[t] if p else h for t, (h, p) in enumerate(zip(handed, pending))])


def test_drop_skips_nothing_while_the_queue_has_room():
    """async_overflow: drop with a queue that never fills (and no cache, so nothing is deferred) is sync."""
    task = load_task("push_tool_from_edge").text
    stream = _stream(200, 3, seed=7)
    sync = BlendedReward(task, HashJudge(), RewardConfig(judge_every=2, cache=False), 3)
    want = np.stack([sync(r, d, _copy(i)) for r, d, i in stream])
    gate = threading.Event()
    cfg = RewardConfig(judge_every=2, cache=False, async_=True, async_batch=4, async_queue=4096, async_overflow="drop")
    blend, got = _run_async(task, cfg, stream, 3, HashJudge(gate=gate), release_at=80, gate=gate)
    np.testing.assert_array_equal(got, want)
    assert blend.stats()["async_dropped"] == 0
    blend.close()


def test_drop_skips_a_deferred_scene_the_cache_cannot_answer_instead_of_waiting():
    """With the cache on, a scene held back for an earlier one with the same text is, if that one's answer is
    not cacheable (an unsure judgement the rules answered), skipped under drop and judged under wait."""
    task = load_task("push_tool_from_edge").text
    stream = _stream(300, 3, seed=9)
    runs = {}
    for overflow in ("wait", "drop"):
        gate = threading.Event()
        cfg = RewardConfig(judge_every=2, async_=True, async_batch=4, async_queue=4096, async_overflow=overflow)
        judge = HashJudge(gate=gate)
        blend, got = _run_async(task, cfg, stream, 3, judge, release_at=100, gate=gate)
        assert np.isfinite(got).all()
        runs[overflow] = (blend.stats(), judge.calls)
        blend.close()
    (wait, wait_calls), (drop, drop_calls) = runs["wait"], runs["drop"]
    assert wait["async_deferred_sent"] > 0 and wait["async_deferred_skipped"] == 0
    assert drop["async_deferred_skipped"] > 0 and drop["async_deferred_sent"] < wait["async_deferred_sent"]  # anchors are still sent
    assert drop_calls < wait_calls  # the skipped scenes were never judged


def test_an_explained_step_is_judged_at_once_with_its_terms():
    task = load_task("push_tool_from_edge").text
    blend = BlendedReward(task, HashJudge(delay=0.01), RewardConfig(async_=True), 1)
    stream = _stream(12, 1, seed=3)
    for r, d, i in stream[:8]:
        blend(r, [False], _copy(i))
    blend.explain[0] = True
    infos = _copy(stream[8][2])
    blend(stream[8][0], [False], infos)
    assert infos[0]["reward_pending"] is False and infos[0]["judgement"] is not None
    assert len(blend.asynchronous.pending) == 0 and blend.stats()["async_explain_syncs"] == 1
    blend.close()


def test_replay_buffer_relabels_counts_and_survives_a_checkpoint(tmp_path):
    import pickle

    from gymnasium import spaces

    box = spaces.Box(-1.0, 1.0, (2,), np.float32)
    buf = RelabelReplayBuffer(100, box, box, n_envs=1, sample="any")
    obs = np.zeros((1, 2), np.float32)
    for t in range(4):  # steps 0 and 2 pending
        buf.add(obs, obs, obs, np.array([0.5]), np.array([False]), [{"reward_step": t, "reward_pending": t % 2 == 0}])
    np.random.seed(0)
    buf.sample(64)
    assert buf.relabel_counts["sampled"] == 64 and 0 < buf.relabel_counts["sampled_pending"] < 64
    buf.relabel(0, np.array([2.0], np.float32), np.array([0.5], np.float32))
    assert buf.rewards[0, 0] == 2.0 and buf.rewards[1, 0] == 0.5 and not buf._pending_rows[0] and buf._pending_rows[2]
    buf.relabel(7, np.array([1.0]), np.array([0.5]))  # never stored as pending (no blend): lost, nothing changes
    assert buf.relabel_counts == {"relabelled": 1, "lost": 1, "sampled": 64, "sampled_pending": buf.relabel_counts["sampled_pending"],
                                  "redrawn": 0}
    again = pickle.loads(pickle.dumps(buf))
    assert again._blend is None and again.rewards[0, 0] == 2.0 and 2 in again._rows


def test_replay_buffer_draws_only_resolved_rows_once_there_are_any():
    from gymnasium import spaces

    box = spaces.Box(-1.0, 1.0, (2,), np.float32)
    buf = RelabelReplayBuffer(100, box, box, n_envs=1)  # sample="resolved", the default
    np.random.seed(0)
    for t in range(3):  # nothing resolved yet: the pending rows are all there is to draw
        buf.add(np.full((1, 2), t, np.float32), np.zeros((1, 2), np.float32), np.zeros((1, 2), np.float32),
                np.array([0.0]), np.array([False]), [{"reward_step": t, "reward_pending": True}])
    assert len(set(buf.sample(32).observations[:, 0].tolist())) > 1 and buf.relabel_counts["sampled_pending"] == 32
    buf.relabel(1, np.array([1.0], np.float32), np.array([0.0], np.float32))
    for t in range(3, 60):  # a long line of pending rows beside one resolved row
        buf.add(np.full((1, 2), t, np.float32), np.zeros((1, 2), np.float32), np.zeros((1, 2), np.float32),
                np.array([0.0]), np.array([False]), [{"reward_step": t, "reward_pending": True}])
    batch = buf.sample(64)
    assert set(batch.observations[:, 0].tolist()) == {1.0} and set(batch.rewards[:, 0].tolist()) == {1.0}
    assert buf.relabel_counts["sampled_pending"] == 32 and buf.relabel_counts["redrawn"] >= 64


def _vec_run(tmp_path, algo: str, async_: bool, steps: int, delay: float = 0.004, **extra):
    from robo_prm.config import load_train_config
    from robo_prm.train.algos import make_algo
    from robo_prm.train.envs import make_vec_env
    from robo_prm.train.run import sync_gamma

    over = {"task": "reach_tool", "algo": algo, "steps": steps, "runs_dir": str(tmp_path), "reward.async": async_,
            "reward.async_batch": 4, "record.every_episodes": 0, **extra}
    cfg = sync_gamma(load_train_config(None, over))
    torch.set_num_threads(1)  # as `robo-prm train` does (cfg.torch_threads)
    judge = HashJudge(delay=delay if async_ else 0.0)
    venv = make_vec_env(load_task(cfg.task), cfg, judge=judge)
    model = make_algo(cfg, venv, None)
    seen = []

    class Snap(RelabelCallback):  # what PPO's update sees: the buffer right after returns were computed
        def _on_rollout_end(self):
            buf = getattr(self.model, "rollout_buffer", None)
            if buf is not None:
                seen.append((buf.rewards.copy(), buf.advantages.copy()))

    model.learn(steps, callback=Snap())
    blend = venv.blend
    stats = blend.stats()
    venv.close()
    return model, seen, stats


def test_sac_replay_buffer_holds_the_sync_rewards(tmp_path):
    steps = 240  # random actions only (learning_starts ≥ steps): both runs see the same transitions
    over = {"sac.learning_starts": 1000, "sac.buffer_size": 1000}
    sync, _, _ = _vec_run(tmp_path, "sac", False, steps, **over)
    asyn, _, st = _vec_run(tmp_path, "sac", True, steps, **over)
    assert type(asyn.replay_buffer).__name__ == "RelabelReplayBuffer"
    np.testing.assert_array_equal(asyn.replay_buffer.observations[:steps], sync.replay_buffer.observations[:steps])
    np.testing.assert_array_equal(asyn.replay_buffer.rewards[:steps], sync.replay_buffer.rewards[:steps])
    assert st["async_provisional_steps"] > 0 and st["relabel_relabelled"] == st["async_relabelled"] > 0
    assert st["relabel_lost"] == 0


def test_sac_counts_rows_sampled_before_their_judgement(tmp_path):
    over = {"sac.learning_starts": 40, "sac.batch_size": 64, "reward.async_sample": "any"}
    _, _, st = _vec_run(tmp_path, "sac", True, 120, **over)
    assert st["relabel_sampled"] == 80 * 64 and st["relabel_sampled_pending"] > 0 and st["relabel_redrawn"] == 0
    assert st["relabel_sampled_pending_rate"] == pytest.approx(st["relabel_sampled_pending"] / st["relabel_sampled"])


def test_sac_trains_on_resolved_rows_by_default(tmp_path):
    model, _, st = _vec_run(tmp_path, "sac", True, 120, **{"sac.learning_starts": 40, "sac.batch_size": 64})
    assert model.replay_buffer.sample_rows == "resolved"
    assert st["relabel_sampled"] == 80 * 64 and st["relabel_redrawn"] > 0
    assert st["relabel_sampled_pending"] < st["relabel_redrawn"]  # a pending row is drawn only while none is resolved


def test_ppo_rollouts_hold_the_sync_rewards_and_advantages(tmp_path):
    over = {"n_envs": 2, "ppo.n_steps": 32, "ppo.batch_size": 32, "ppo.n_epochs": 2}
    _, sync, _ = _vec_run(tmp_path, "ppo", False, 128, **over)
    model, asyn, st = _vec_run(tmp_path, "ppo", True, 128, delay=0.03, **over)  # the judge lags the rollout
    assert type(model.rollout_buffer).__name__ == "RelabelRolloutBuffer" and len(sync) == len(asyn) == 2
    for (r0, a0), (r1, a1) in zip(sync, asyn):
        # equal up to float32 rounding where PPO added its time-limit bootstrap to a provisional reward
        np.testing.assert_allclose(r1, r0, rtol=0, atol=1e-5)
        np.testing.assert_allclose(a1, a0, rtol=0, atol=1e-4)
    assert st["async_provisional_steps"] > 0 and st["relabel_lost"] == 0


def test_the_worker_thread_runs_at_the_niceness_asked():
    import os

    from robo_prm.reward.async_judge import JudgeWorker

    if not hasattr(os, "getpriority"):
        pytest.skip("no thread priorities here")
    worker = JudgeWorker(lambda scenes: [None] * len(scenes), batch=2, capacity=4, nice=7)
    try:
        [ticket] = [worker.submit(SceneDescription("x", ()))]
        worker.wait([ticket])  # a broken judge_fn: the ticket still gets a (fallback) judgement
        assert ticket.judgement.fallback and os.getpriority(os.PRIO_PROCESS, worker.thread.native_id) == 7
        assert os.getpriority(os.PRIO_PROCESS, 0) == 0  # the training thread keeps its own
    finally:
        worker.close()
