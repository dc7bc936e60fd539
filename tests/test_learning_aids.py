"""The sparse-reward aids (demos, curriculum, novelty switch), the SAC+HER goal view and n_envs > 1, on tiny budgets."""
import json
import pickle

import gymnasium
import numpy as np
import pytest
from gymnasium import spaces

from robo_prm.config import load_train_config
from robo_prm.config_io import ConfigError
from robo_prm.envs.experts import ScriptedExpert
from robo_prm.envs.goal_env import GoalTidyEnv, GoalView, goal_tasks
from robo_prm.envs.task import load_task
from robo_prm.envs.tidy_env import TidyTableEnv
from robo_prm.train import train


def _cfg(tmp_path, **over):
    base = {"task": "push_tool_from_edge", "steps": 250, "runs_dir": str(tmp_path), "run_name": "t", "progress_bar": False,
            "record.every_episodes": 0, "eval.every_steps": 0, "eval.episodes": 1, "eval.record": 0,
            "checkpoint_every": 0, "judge.backend": "rules", "sac.learning_starts": 100, "sac.batch_size": 64}
    base.update(over)
    return load_train_config(None, base)


# ---- curriculum ---------------------------------------------------------------------------------------------
def test_expert_start_begins_along_the_plan_and_zero_is_the_real_start():
    env = TidyTableEnv("place_cup_in_bin")
    expert = ScriptedExpert(env)
    plain, _ = env.reset(seed=4)
    again, info0 = env.reset(seed=4, options={"expert_start": 0.0, "expert": expert})
    assert np.array_equal(plain, again) and info0["milestones_reached"] == 0
    _, near = env.reset(seed=4, options={"expert_start": 1.0, "expert": expert})
    assert near["milestones_reached"] >= 4 and not near["is_success"] and near["step"] == 0  # carried to the bin, not yet let go
    _, mid = env.reset(seed=4, options={"expert_start": 0.6, "expert": expert})
    assert 0 < mid["milestones_reached"] <= near["milestones_reached"]
    _, repeat = env.reset(seed=4, options={"expert_start": 1.0, "expert": expert})
    assert repeat["milestones_reached"] == near["milestones_reached"]  # same seed, same start
    with pytest.raises(ValueError, match="expert_start"):
        env.reset(seed=4, options={"expert_start": 1.5, "expert": expert})
    with pytest.raises(ValueError, match="needs options\\['expert'\\]"):
        env.reset(seed=4, options={"expert_start": 0.5})
    env.close()


def test_curriculum_widens_when_the_near_starts_succeed(tmp_path):
    cfg = _cfg(tmp_path, steps=400, **{"reward_source": "env", "curriculum.enabled": True, "curriculum.window": 3,
                                       "curriculum.promote_at": 0.3, "curriculum.real_starts": 0.0, "curriculum.step": 0.5})
    run = train(cfg)
    cur = json.loads((run / "curriculum.json").read_text())
    # from 2 steps before success a few random actions finish the task, so the starts widen at least once
    assert cur["promotions"] and cur["width"] > 0.0
    assert [w for _, w in cur["promotions"]] == sorted(w for _, w in cur["promotions"])


def test_a_resumed_run_goes_on_at_the_curriculum_width_it_reached(tmp_path):
    from robo_prm.train.checkpoints import latest_checkpoint, read_state
    from robo_prm.train.run import resume

    cfg = _cfg(tmp_path, steps=400, checkpoint_every=400, **{"reward_source": "env", "curriculum.enabled": True,
                                                              "curriculum.window": 3, "curriculum.promote_at": 0.3,
                                                              "curriculum.real_starts": 0.0, "curriculum.step": 0.25})
    run = train(cfg)
    saved = read_state(latest_checkpoint(run / "checkpoints"))["curriculum"]
    assert saved["width"] > 0.0 and saved["promotions"]
    resume(run, steps=500)
    cur = json.loads((run / "curriculum.json").read_text())
    assert cur["promotions"][:len(saved["promotions"])] == saved["promotions"] and cur["width"] >= saved["width"]


def test_curriculum_needs_a_plan(tmp_path):
    from robo_prm.train.curriculum import CurriculumStart
    from robo_prm.config import CurriculumConfig

    task = load_task("push_tool_from_edge")
    task.plan = None
    with pytest.raises(ValueError, match="curriculum.enabled: task 'push_tool_from_edge' has no `expert:` plan"):
        CurriculumStart(TidyTableEnv(task), CurriculumConfig(enabled=True))


# ---- demonstrations -----------------------------------------------------------------------------------------
def test_demo_buffer_keeps_demos_and_samples_them_at_the_ratio():
    from robo_prm.train.demos import DemoReplayBuffer

    box = spaces.Box(-1, 1, (3,), np.float32)
    buf = DemoReplayBuffer(50, box, box, n_envs=1, demo_ratio=0.25)
    buf.add_demos([(np.ones(3, np.float32), np.ones(3, np.float32), np.ones(3, np.float32), 1.0, False, {})] * 10)
    for _ in range(200):  # wraps the replay rows four times: the demos stay
        buf.add(np.zeros((1, 3)), np.zeros((1, 3)), np.zeros((1, 3)), np.zeros(1), np.zeros(1), [{}])
    batch = buf.sample(64)
    assert batch.rewards.shape == (64, 1) and int(batch.rewards.sum()) == 16
    assert pickle.loads(pickle.dumps(buf)).demos.size() == 10  # a checkpoint keeps them
    prop = DemoReplayBuffer(50, box, box, n_envs=1, demo_ratio=None)
    prop.add_demos([(np.ones(3, np.float32), np.ones(3, np.float32), np.ones(3, np.float32), 1.0, False, {})] * 50)
    for _ in range(50):
        prop.add(np.zeros((1, 3)), np.zeros((1, 3)), np.zeros((1, 3)), np.zeros(1), np.zeros(1), [{}])
    share = np.mean([prop.sample(100).rewards.mean().item() for _ in range(20)])
    assert 0.4 < share < 0.6  # as if the 50 demos were rows beside the 50 replay rows


@pytest.mark.parametrize("async_", [False, True])
def test_demos_go_through_the_training_reward(tmp_path, async_):
    from robo_prm.train.demos import collect_demos
    from robo_prm.train.envs import make_vec_env

    cfg = _cfg(tmp_path, demos=2, **{"reward.async": async_})
    venv = make_vec_env(load_task(cfg.task), cfg)
    rows, stats = collect_demos(venv, 2)
    venv.close()
    assert stats["demo_episodes"] == 2 and stats["demo_successes"] == 2 and stats["demo_transitions"] == len(rows)
    rewards = np.array([r[3] for r in rows])
    assert not set(np.unique(rewards)) <= {0.0, 1.0}  # blended rewards, not the sparse env reward
    assert sum(r[4] for r in rows) == 2 and all("reward_pending" not in r[5] for r in rows)
    if async_:  # the async judge's final rewards replaced the provisional ones: the same as judging in step
        sync_venv = make_vec_env(load_task(cfg.task), _cfg(tmp_path, demos=2))
        sync_rows, _ = collect_demos(sync_venv, 2)
        sync_venv.close()
        np.testing.assert_allclose(rewards, [r[3] for r in sync_rows], rtol=1e-5, atol=1e-6)


class _ScriptedOutcomesVecEnv:
    """One env whose expert episodes last 3 steps and succeed where `succeeds(episode)` says."""
    num_envs = 1

    def __init__(self, succeeds=lambda episode: episode % 2 == 1):
        self.t, self.episode, self.succeeds = 0, 0, succeeds

    def reset(self):
        return np.zeros((1, 2), np.float32)

    def env_method(self, name):
        assert name == "expert_action"
        return [np.zeros(2, np.float32)]

    def step(self, actions):
        self.t += 1
        done = self.t % 3 == 0
        info = {"is_success": done and self.succeeds(self.episode)}
        if done:
            info["terminal_observation"] = np.full(2, self.episode, np.float32)
            self.episode += 1
        return np.zeros((1, 2), np.float32), np.zeros(1, np.float32), np.array([done]), [info]


def test_only_successful_demos_are_kept_when_asked():
    from robo_prm.train.demos import collect_demos

    rows, stats = collect_demos(_ScriptedOutcomesVecEnv(), 2, successful_only=True)
    assert stats["demo_episodes"] == 2 and stats["demo_episodes_run"] == 4 and stats["demo_successes"] == 2
    assert len(rows) == 6 and [r[1][0] for r in rows if r[4]] == [1.0, 3.0]  # the 2nd and 4th episodes
    rows, stats = collect_demos(_ScriptedOutcomesVecEnv(), 2)  # by default every episode is kept
    assert stats["demo_episodes"] == 2 and stats["demo_successes"] == 1 and len(rows) == 6
    rows, stats = collect_demos(_ScriptedOutcomesVecEnv(lambda episode: episode == 0), 3, successful_only=True)
    assert stats["demo_episodes_run"] == 6 and stats["demo_episodes"] == 1 and len(rows) == 3  # at most 2 × asked run


def test_sac_trains_with_demos_in_its_buffer(tmp_path):
    run = train(_cfg(tmp_path, demos=3, demo_ratio=0.5))
    demos = json.loads((run / "demos.json").read_text())
    assert demos["demo_episodes"] == 3 and demos["demo_successes"] == 3
    assert json.loads((run / "summary.json").read_text())["env_steps"] == 250  # demo steps are not agent steps


# ---- SAC+HER --------------------------------------------------------------------------------------------
def test_goal_view_is_registered_and_matches_the_sparse_success():
    from stable_baselines3.common.env_checker import check_env

    assert set(goal_tasks()) == {"push_tool_from_edge", "place_cup_in_bin"}
    env = gymnasium.make("robo_prm/PlaceCupInBinGoal-v0")
    check_env(env, warn=False, skip_render_check=True)
    for seed in range(2):
        obs, _ = env.reset(seed=seed)
        expert = ScriptedExpert(env)
        done = False
        while not done:
            obs, reward, term, trunc, info = env.step(expert())
            goal_reward = env.get_wrapper_attr("compute_reward")(obs["achieved_goal"], obs["desired_goal"], info)
            assert reward <= goal_reward  # wherever the task succeeds, the goal is reached
            done = term or trunc
        assert info["is_success"] and goal_reward == 1.0
    view = GoalView(load_task("push_tool_from_edge"))
    achieved = np.array([view.goal, view.goal + [0.2, 0, 0], view.goal + [0, 0, 0.05]])
    assert view.compute_reward(achieved, np.broadcast_to(view.goal, (3, 3)), [{}] * 3).tolist() == [1.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="not a single-object task"):
        GoalView(load_task("tidy_table"))


def test_sac_her_trains_evaluates_and_loads(tmp_path):
    from robo_prm.train.rollouts import run_episodes
    from robo_prm.train.run import load_policy

    run = train(_cfg(tmp_path, reward_source="her", **{"eval.episodes": 2}))
    assert json.loads((run / "summary.json").read_text())["final_eval"]["episodes"] == 2
    cfg, task, policy = load_policy(run)
    assert len(run_episodes(policy, task, cfg, [3])) == 1


def test_aids_that_do_not_fit_together_fail_in_one_line(tmp_path):
    for over, msg in [({"algo": "ppo", "demos": 2}, "demos: needs algo sac"),
                      ({"algo": "ppo", "reward_source": "her"}, "reward_source: her needs algo sac"),
                      ({"reward_source": "her", "demos": 2}, "demos: not with reward_source her"),
                      ({"reward_source": "her", "task": "tidy_table"}, "reward_source her: task 'tidy_table' is not a single-object")]:
        with pytest.raises(ConfigError, match=msg):
            train(_cfg(tmp_path, **over))
    assert not list(tmp_path.iterdir())  # refused before a run folder was made


# ---- throughput and the novelty switch -----------------------------------------------------------------
def test_gradient_steps_follow_updates_per_step():
    from robo_prm.train.algos import algo_kwargs

    assert algo_kwargs(load_train_config(None, {"n_envs": 4, "updates_per_step": 0.5}))["gradient_steps"] == 2
    assert algo_kwargs(load_train_config(None, {"n_envs": 1}))["gradient_steps"] == 1
    assert algo_kwargs(load_train_config(None, {"n_envs": 4, "sac": {"gradient_steps": 7}}))["gradient_steps"] == 7


def test_sac_on_subprocess_envs_with_novelty_off(tmp_path):
    run = train(_cfg(tmp_path, n_envs=2, vec_env="subproc", updates_per_step=0.5, **{"reward.novelty": "none"}))
    summary = json.loads((run / "summary.json").read_text())
    assert summary["env_steps"] >= 250 and summary["judge"]["nan_rewards"] == 0
