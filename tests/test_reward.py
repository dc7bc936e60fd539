"""The blended reward: schedule tables, z-score, novelty, cache, potential shaping, wrappers, NaN safety."""
import math

import gymnasium as gym
import numpy as np
import pytest

import robo_prm  # noqa: F401  (registers envs)
from robo_prm.judge import make_judge
from robo_prm.judge.config import JudgeConfig
from robo_prm.reward import BlendedReward, LLMRewardVecEnv, LLMRewardWrapper, RewardConfig, Stage, blend_weights
from robo_prm.describe import DescribeWrapper
from robo_prm.reward.cache import JudgementCache
from robo_prm.reward.normalize import RunningZScore
from robo_prm.reward.novelty import CountNovelty
from robo_prm.envs.task import load_task
from robo_prm.types import HazardReport, Judgement, SceneDescription


@pytest.mark.parametrize(
    "step, expected",
    [(0, (0.5, 0.4, 0.1)), (999_999, (0.5, 0.4, 0.1)), (1_000_000, (0.7, 0.25, 0.05)), (2_999_999, (0.7, 0.25, 0.05)),
     (3_000_000, (0.9, 0.08, 0.02)), (50_000_000, (0.9, 0.08, 0.02))],
)
def test_staged_schedule_is_the_method_table(step, expected):
    w = blend_weights(RewardConfig(), step)
    assert (w["env"], w["llm"], w["explore"]) == pytest.approx(expected)


def test_linear_schedule_interpolates_between_stages():
    cfg = RewardConfig(schedule="linear")
    w = blend_weights(cfg, 500_000)
    assert w["env"] == pytest.approx(0.6) and w["llm"] == pytest.approx(0.325)
    assert blend_weights(cfg, 10**8)["llm"] == pytest.approx(0.08)  # the late LLM weight stays


def test_stages_must_start_at_zero_and_increase():
    with pytest.raises(ValueError, match="start_step"):
        RewardConfig(stages=[Stage(10, 1, 0, 0)])
    with pytest.raises(ValueError, match="judge_every"):
        RewardConfig(judge_every=0)


def test_running_zscore_normalises_and_ignores_nan():
    z = RunningZScore(ema=0.99)
    rng = np.random.default_rng(0)
    out = [z(x) for x in rng.normal(5.0, 2.0, size=3000)]
    assert abs(np.mean(out[-1000:])) < 0.3 and 0.6 < np.std(out[-1000:]) < 1.4
    state = z.state_dict()
    assert z(float("nan")) == 0.0 and z.state_dict() == state
    z2 = RunningZScore()
    z2.load_state_dict(state)
    assert z2(3.0) == pytest.approx(z(3.0))


def test_uncentered_normaliser_keeps_sign_and_zero():
    """Potential differences are scaled, never shifted: a held judgement (Δ = 0) stays 0."""
    z = RunningZScore(ema=0.99, center=False)
    rng = np.random.default_rng(0)
    xs = rng.normal(-0.01, 0.03, size=3000)
    out = np.array([z(x) for x in xs])
    assert np.all(np.sign(out) == np.sign(xs))
    assert z(0.0) == 0.0
    assert 0.6 < np.sqrt(np.mean(out[-1000:] ** 2)) < 1.4


def test_blend_centres_only_raw_progress():
    task = load_task("reach_tool")
    assert not BlendedReward(task.text, None, RewardConfig(), 1).z.center
    assert BlendedReward(task.text, None, RewardConfig(progress="raw"), 1).z.center
    assert BlendedReward(task.text, None, RewardConfig(center=True), 1).z.center


def test_count_novelty_decays():
    n = CountNovelty()
    assert [n("a"), n("a"), n("a"), n("b")] == pytest.approx([1, 1 / math.sqrt(2), 1 / math.sqrt(3), 1])


def test_default_novelty_is_never_positive():
    """Success ends an episode: a positive per-step bonus would pay the agent to put it off."""
    task = load_task("reach_tool")
    blend = BlendedReward(task.text, None, RewardConfig(), 1)
    assert [blend.novelty(k) for k in "aab"] == pytest.approx([0, 1 / math.sqrt(2) - 1, 0])
    assert BlendedReward(task.text, None, RewardConfig(novelty="count_bonus"), 1).novelty("a") == pytest.approx(1)


def _scene(text, features=None, progress=0.5, hazards=()):
    return SceneDescription(text=text, facts=(), hazards=hazards, rule_progress=progress, features=features)


def test_cache_exact_and_nearest_neighbour_hits():
    cache = JudgementCache(radius=0.05)
    j = Judgement(progress=0.7, confidence=0.9, backend="llamacpp")
    cache.put("t", _scene("a", np.zeros(3, np.float32)), j)
    assert cache.get("t", _scene("a")).progress == 0.7  # exact text
    assert cache.get("t", _scene("b", np.array([0.01, 0, 0], np.float32))).cached  # near features
    assert cache.get("t", _scene("c", np.array([1.0, 0, 0], np.float32))) is None  # far
    assert cache.get("other", _scene("a")) is None  # keyed by task
    assert cache.get("t", _scene("a"), need_reason=True) is None  # a reason was asked and none is cached
    assert cache.stats()["hits_exact"] == 1 and cache.stats()["hits_nn"] == 1 and cache.stats()["misses"] == 3
    cache.put("t", _scene("r"), Judgement(progress=0.1, confidence=1.0, backend="rules"))
    assert cache.get("t", _scene("r")) is None  # rules answers read the state, never reused


def test_a_cached_banded_judgement_is_banded_again_for_the_state_it_answers():
    cache = JudgementCache()
    stage0 = SceneDescription("same words", (), milestones_reached=0, milestones_total=1, rule_progress=0.2)
    stage1 = SceneDescription("same words", (), milestones_reached=1, milestones_total=1, rule_progress=0.6)
    cache.put("t", stage0, Judgement(progress=0.5, confidence=0.9, backend="llamacpp", unbanded=0.8))
    assert cache.get("t", stage1).progress == 0.8  # the LLM's 0.8 lies in stage 1's band [0.5, 1]
    assert cache.get("t", stage0).progress == 0.5
    plain = Judgement(progress=0.8, confidence=0.9, backend="llamacpp")  # another policy: reused as it is
    cache.put("t", _scene("other"), plain)
    assert cache.get("t", SceneDescription("other", (), 0, 1, rule_progress=0.2)).progress == 0.8


class FixedJudge:
    """Answers a fixed progress sequence, for arithmetic tests of the blend."""

    def __init__(self, progress, hazards=()):
        self.progress, self.hazards, self.calls = list(progress), hazards, 0

    def judge(self, task, scenes, explain=False):
        out = []
        for _ in scenes:
            p = self.progress[min(self.calls, len(self.progress) - 1)]
            self.calls += 1
            out.append(Judgement(progress=p, confidence=1.0, hazards=self.hazards, backend="fixed"))
        return out


def _infos(n, texts):
    return [{"description": _scene(t)} for t in texts[:n]]


def test_potential_shaping_telescopes_over_an_episode():
    task = load_task("reach_tool")
    progress = [0.1, 0.3, 0.2, 0.6, 0.9]
    cfg = RewardConfig(judge_every=1, normalize=False, novelty="none", cache=False, gamma=1.0, schedule="constant",
                       stages=[Stage(0, 0.0, 1.0, 0.0)])
    blend = BlendedReward(task.text, FixedJudge(progress), cfg, 1)
    total = 0.0
    for t in range(len(progress)):
        info = {"description": _scene(f"s{t}")}
        total += float(blend([0.0], [t == len(progress) - 1], [info])[0])
        assert info["reward_terms"]["term/llm"] == pytest.approx(info["reward_terms"]["term/llm_raw"])
    assert total == pytest.approx(progress[-1] - progress[0])


def test_judge_every_k_holds_the_last_judgement():
    task = load_task("reach_tool")
    judge = FixedJudge([0.1, 0.5, 0.9])
    cfg = RewardConfig(judge_every=4, cache=False)
    blend = BlendedReward(task.text, judge, cfg, 1)
    for t in range(8):
        blend([0.0], [False], [{"description": _scene(f"s{t}")}])
    assert judge.calls == 3  # step 1 (no judgement yet), step 4, step 8


def test_blend_terms_weights_safety_and_total_in_info():
    task = load_task("push_tool_from_edge")
    hazard = (HazardReport("tool_near_edge", 0.5, 1.0),)
    cfg = RewardConfig(progress="raw", normalize=False, cache=False, novelty="count_bonus")
    blend = BlendedReward(task.text, FixedJudge([0.4], hazard), cfg, 1)
    info = {"description": _scene("x")}
    r = blend([1.0], [False], [info])[0]
    terms = info["reward_terms"]
    expected = 0.5 * 1.0 + 0.4 * 0.4 + 0.1 * 1.0 - 0.5 * 0.5
    assert r == pytest.approx(expected) and terms["total"] == pytest.approx(expected)
    assert terms["term/safety"] == pytest.approx(0.5) and terms["weight/llm"] == pytest.approx(0.4)


def test_success_counts_as_full_progress_whatever_the_judge_says():
    task = load_task("reach_tool")
    cfg = RewardConfig(judge_every=1, normalize=False, novelty="none", cache=False, schedule="constant")
    blend = BlendedReward(task.text, FixedJudge([0.9, 0.8]), cfg, 1)
    blend([0.0], [False], [{"description": _scene("a")}])
    info = {"description": _scene("b"), "is_success": True}
    blend([1.0], [True], [info])
    assert info["reward_terms"]["term/llm_raw"] == pytest.approx(0.1)


def test_nan_progress_never_reaches_sb3():
    task = load_task("reach_tool")
    blend = BlendedReward(task.text, FixedJudge([float("nan")]), RewardConfig(cache=False), 1)
    r = blend([0.0], [False], [{"description": _scene("x")}])
    assert np.isfinite(r).all()


class BrokenJudge:
    def judge(self, task, scenes, explain=False):
        raise ConnectionError("judge server is down")


def test_a_failing_judge_falls_back_to_rules_and_is_counted():
    task = load_task("reach_tool")
    blend = BlendedReward(task.text, BrokenJudge(), RewardConfig(cache=False), 1)
    info = {"description": _scene("x", progress=0.8)}
    r = blend([0.0], [False], [info])
    assert np.isfinite(r).all() and info["judgement"].progress == pytest.approx(0.8)
    assert blend.stats()["blend_judge_errors"] == 1 and blend.stats()["blend_judge_calls"] == 1


def test_vec_env_wrapper_batches_all_envs_with_the_rules_judge():
    from stable_baselines3.common.vec_env import DummyVecEnv

    task = load_task("reach_tool")
    venv = DummyVecEnv([lambda: DescribeWrapper(gym.make("robo_prm/ReachTool-v0")) for _ in range(2)])
    wrapped = LLMRewardVecEnv(venv, task.text, make_judge(JudgeConfig(backend="rules")), RewardConfig())
    wrapped.reset()
    for _ in range(6):
        obs, rewards, dones, infos = wrapped.step(np.stack([venv.action_space.sample() for _ in range(2)]))
        assert rewards.shape == (2,) and np.isfinite(rewards).all()
        assert {"term/env", "term/llm", "term/explore", "term/safety", "total"} <= set(infos[0]["reward_terms"])
    assert wrapped.blend.total_steps == 12
    wrapped.close()


def test_gym_wrapper_puts_terms_in_info():
    env = LLMRewardWrapper(DescribeWrapper(gym.make("robo_prm/PushToolFromEdge-v0")), make_judge(JudgeConfig(backend="rules")))
    env.reset(seed=0)
    _, r, _, _, info = env.step(env.action_space.sample())
    assert math.isfinite(r) and info["judgement"].backend == "rules" and "tool_near_edge" in info["judgement"].hazard_names()
    env.close()
