"""SB3 SAC and PPO train on the blended reward through the Python API; the default judge is the real bundled LLM."""
import json

import numpy as np
import pytest

from robo_prm.config import load_train_config
from robo_prm.train import train


def _cfg(tmp_path, **over):
    base = {"task": "reach_tool", "steps": 300, "runs_dir": str(tmp_path), "run_name": "t", "progress_bar": False,
            "record.every_episodes": 0, "eval.every_steps": 0, "eval.episodes": 1, "eval.record": 0,
            "checkpoint_every": 0, "judge.n_threads": 1, "sac.learning_starts": 100}
    base.update(over)
    return load_train_config(None, base)


def test_sac_trains_a_few_hundred_steps_with_the_real_default_judge(tmp_path):
    pytest.importorskip("llama_cpp")
    cfg = _cfg(tmp_path)
    assert cfg.judge.backend == "llamacpp" and cfg.judge.model is None  # the embedded default: bundled SmolLM2
    run = train(cfg)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["env_steps"] == 300
    judge = summary["judge"]
    judged = judge["cache_hits_exact"] + judge["cache_hits_nn"] + judge["cache_misses"]
    assert judged >= 300 / cfg.reward.judge_every  # every 4th step, plus episode ends
    # the blend sends the judge what its cache cannot answer; the judge counts the same scenes (own keys, none overwritten)
    assert judge["blend_judge_calls"] >= 1 and judge["blend_judge_calls"] == judge["cache_misses"] == judge["judge_calls"]
    assert judge["blend_judge_errors"] == judge["judge_errors"] == judge["judge_outages"] == 0 and judge["nan_rewards"] == 0
    # the rate is the counted fallbacks over the judge's calls, and the LLM itself answered some of them
    assert judge["judge_fallback_rate"] == pytest.approx(judge["judge_fallbacks"] / judge["judge_calls"])
    assert judge["judge_fallbacks"] < judge["judge_calls"]


def test_ppo_trains_on_two_envs_with_the_rules_judge(tmp_path):
    cfg = _cfg(tmp_path, algo="ppo", n_envs=2, **{"judge.backend": "rules", "ppo.n_steps": 64, "ppo.batch_size": 32})
    run = train(cfg)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["env_steps"] >= 300 and summary["judge"]["nan_rewards"] == 0


@pytest.mark.parametrize("source", ["env", "dense"])
def test_baseline_rewards_train_without_a_judge(tmp_path, source):
    run = train(_cfg(tmp_path, reward_source=source, steps=200))
    assert "judge" not in json.loads((run / "summary.json").read_text())


def test_showcase_picks_a_success_a_hazard_and_a_failure():
    from robo_prm.train.rollouts import EpisodeResult
    from robo_prm.train.showcase import pick_showcase

    def ep(seed, success, hazard_steps=0):
        return EpisodeResult(seed, success, float(success), 0, 10, hazard_steps)

    results = [ep(1, False), ep(2, True), ep(3, True), ep(4, True, hazard_steps=3), ep(5, False, hazard_steps=1)]
    assert pick_showcase(results) == [2, 4, 1]
    assert pick_showcase(results, k=5) == [2, 4, 1, 3, 5]
    assert pick_showcase([ep(1, True, 2), ep(2, True)]) == [1, 2]  # one episode can be the success and the hazard
    assert pick_showcase([]) == []


def test_null_reward_gamma_follows_the_learner():
    from robo_prm.config import TrainConfig
    from robo_prm.reward import RewardConfig
    from robo_prm.train.run import sync_gamma

    assert sync_gamma(TrainConfig(algo="sac", reward=RewardConfig(gamma=None))).reward.gamma == 0.95  # DEFAULTS["sac"]
    assert sync_gamma(TrainConfig(algo="ppo", ppo={"gamma": 0.9}, reward=RewardConfig(gamma=None))).reward.gamma == 0.9
    assert sync_gamma(TrainConfig(algo="sac", reward=RewardConfig(gamma=1.0))).reward.gamma == 1.0  # set: kept
    assert RewardConfig(gamma=None).shaping_gamma() == 0.99  # outside `train`: SB3's default discount


def test_a_recording_starts_with_a_frame_of_the_views_it_records(make_env):
    """EpisodeRecorder's first frame comes from render(), the others from info["frame"]: one size for both, also when
    a pixel model reads two views side by side (before, `--describe.source pixels` failed at its first recording)."""
    from robo_prm.train.envs import FrameCapture

    env = FrameCapture(make_env("reach_tool", render_mode="rgb_array", width=32, height=32), ("front", "side"))
    env.reset(seed=0)
    env.set_capture(True)
    first = env.render()
    info = env.step(env.action_space.sample())[-1]
    assert first.shape == info["frame"].shape == (32, 64, 3)
    front = FrameCapture(make_env("reach_tool", render_mode="rgb_array", width=32, height=32))
    front.reset(seed=0)
    assert np.array_equal(front.render(), front.unwrapped.render())  # the front view alone: the env's own frame
