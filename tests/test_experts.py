"""Scripted experts reach their documented success rates (docs/TASKS.md, measured on seeds 0..19);
perturbed experts fail more often. Bounds here are conservative, on a handful of seeds."""
from __future__ import annotations

import numpy as np
import pytest

from robo_prm.envs.experts import PLANS, ScriptedExpert, rollout

# Measured with `rollout` on seeds 0..19 (docs/TASKS.md, "Scripted experts"): clean, perturb=0.5.
MEASURED = {
    "reach_tool": (20, 19),
    "push_tool_from_edge": (20, 4),
    "place_cup_in_bin": (20, 0),
    "tidy_table": (18, 0),  # 89 / 100 on seeds 0..99
}
SEEDS = {"tidy_table": range(4)}  # ~0.15 s an episode; the others are quick
DEFAULT_SEEDS = range(5)


def test_every_expert_plan_has_a_measured_rate():
    assert set(MEASURED) == set(PLANS)


def _rate(env, expert, seeds) -> tuple[int, list[int]]:
    wins, lengths = 0, []
    for seed in seeds:
        infos, actions, _, ok = rollout(env, expert, seed)
        wins += ok
        lengths.append(len(actions))
    return wins, lengths


@pytest.mark.parametrize("task", list(PLANS))
def test_clean_expert_success_rate(make_env, task):
    env = make_env(task)
    seeds = SEEDS.get(task, DEFAULT_SEEDS)
    wins, _ = _rate(env, ScriptedExpert(env), seeds)
    assert wins >= len(seeds) - 1, f"{task}: {wins}/{len(seeds)}"


@pytest.mark.parametrize("task", list(PLANS))
def test_perturbed_expert_fails_more_often(make_env, task):
    env = make_env(task)
    seeds = range(2) if task == "tidy_table" else DEFAULT_SEEDS  # a perturbed tidy_table episode runs all 300 steps
    clean, clean_len = _rate(env, ScriptedExpert(env), seeds)
    noisy, noisy_len = _rate(env, ScriptedExpert(env, perturb=0.5, seed=0), seeds)
    if task == "reach_tool":
        # one waypoint: random actions half the time still get there, only later
        assert noisy >= len(seeds) - 2 and np.mean(noisy_len) > np.mean(clean_len)
    else:
        assert noisy < clean, f"{task}: perturbed {noisy} vs clean {clean}"


def test_clean_episode_contract(make_env):
    """Same seed → same episode; milestones only go up until success; the cup is never in danger."""
    env = make_env("place_cup_in_bin")
    expert = ScriptedExpert(env)
    infos, actions, frames, ok = rollout(env, expert, 2)
    again, actions_again, _, _ = rollout(env, expert, 2)
    assert ok and frames is None
    assert len(infos) == len(actions) + 1 and len(actions) < env.unwrapped.task.spec.max_steps
    np.testing.assert_array_equal(np.array(actions), np.array(actions_again))
    assert [i["description"].text for i in infos] == [i["description"].text for i in again]
    reached = [i["milestones_reached"] for i in infos]
    assert reached == sorted(reached) and reached[-1] == 5
    assert all(i["hazards"] == () for i in infos)
    assert all(a.shape == (4,) and a.dtype == np.float32 and np.abs(a).max() <= 1 for a in actions)


def test_push_expert_clears_the_edge_hazard(make_env):
    env = make_env("push_tool_from_edge")
    infos, _, _, ok = rollout(env, ScriptedExpert(env), 0)
    assert ok
    assert infos[0]["hazards"] == ("tool_near_edge",)  # starts 3-4.5 cm from the front edge
    assert infos[-1]["hazards"] == ()


def test_rollout_with_frames(make_env):
    env = make_env("reach_tool", render_mode="rgb_array", width=64, height=64)
    infos, actions, frames, ok = rollout(env, ScriptedExpert(env), 0, render=True)
    assert ok and len(frames) == len(actions) + 1
    assert all(f.shape == (64, 64, 3) and f.dtype == np.uint8 for f in frames)


def test_perturbed_expert_is_reproducible(make_env):
    env = make_env("push_tool_from_edge")
    a = rollout(env, ScriptedExpert(env, perturb=0.5, noise=0.1, seed=3), 1)[1]
    b = rollout(env, ScriptedExpert(env, perturb=0.5, noise=0.1, seed=3), 1)[1]
    np.testing.assert_array_equal(np.array(a), np.array(b))


def test_no_expert_for_an_unplanned_task(make_env):
    from pathlib import Path

    env = make_env(Path(__file__).parent / "data" / "screwdriver_to_tray.yaml")
    with pytest.raises(ValueError, match="no scripted expert for task 'screwdriver_to_tray'"):
        ScriptedExpert(env)
