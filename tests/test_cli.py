"""CLI smoke tests in subprocesses, tiny budgets: train → checkpoint → resume → eval → enjoy → replay."""
import json
import os
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

# One env (reach_tool ships two): these tests count one env's episodes and steps; tests/test_learning_aids.py trains two.
TINY = ["--judge.backend", "rules", "--sac.learning_starts", "50", "--record.every_episodes", "2", "--record.frame_size", "64",
        "--eval.every_steps", "0", "--eval.episodes", "1", "--eval.record", "1", "--checkpoint_every", "100", "--progress_bar", "false",
        "--n_envs", "1", "--updates_per_step", "1"]


def cli(*args, cwd=None, check=True):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-m", "robo_prm.cli", *map(str, args)], capture_output=True, text=True, cwd=cwd, env=env, timeout=600)
    if check and p.returncode != 0:
        raise AssertionError(f"robo-prm {' '.join(map(str, args))} failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
    return p


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs")
    cli("train", "--task", "reach_tool", "--algo", "sac", "--steps", 150, "--seed", 3, "--runs_dir", runs, "--run_name", "tiny", *TINY, "--eval.episodes", 2,
        "--replay")
    return runs / "tiny"


def test_train_leaves_a_complete_run_directory(run_dir):
    assert (run_dir / "config.yaml").exists() and (run_dir / "final_model.zip").exists()
    assert (run_dir / "checkpoints" / "latest").read_text().strip() == "step_000000150"
    assert (run_dir / "checkpoints" / "step_000000150" / "replay_buffer.pkl").exists()
    assert sorted(p.name for p in (run_dir / "episodes").iterdir())[:1] == ["ep_0000"]
    assert list((run_dir).glob("tb*/events.out.tfevents.*")) or list(run_dir.glob("tb*/**/events.*"))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == 150 and summary["judge"]["nan_rewards"] == 0


def test_resume_continues_step_count_and_schedule(run_dir):
    before = json.loads((run_dir / "checkpoints" / "step_000000150" / "state.json").read_text())
    cli("train", "--resume", run_dir, "--steps", 250)
    after = json.loads((run_dir / "checkpoints" / "step_000000250" / "state.json").read_text())
    assert after["num_timesteps"] == 250
    assert after["blend"]["total_steps"] == before["blend"]["total_steps"] + 100  # the schedule clock went on
    assert json.loads((run_dir / "summary.json").read_text())["env_steps"] == 250


def test_eval_prints_a_table_and_writes_json(run_dir):
    p = cli("eval", run_dir, "--episodes", 2)
    assert "success_rate" in p.stdout and "hazard_events_per_episode" in p.stdout
    assert json.loads((run_dir / "eval.json").read_text())["summary"]["episodes"] == 2


def test_replay_writes_a_decodable_mp4_with_an_overlay(run_dir, tmp_path):
    ep = sorted((run_dir / "episodes").iterdir())[0]
    out = tmp_path / "ep.mp4"
    cli("replay", ep, "--out", out, "--summary", tmp_path / "ep.png")
    steps = len((ep / "steps.jsonl").read_text().splitlines())
    cap = cv2.VideoCapture(str(out))
    frames = []
    while True:
        ok, f = cap.read()
        if not ok:
            break
        frames.append(f)
    assert len(frames) == steps + 1
    h, w = frames[0].shape[:2]
    assert w >= 480 and h > w // 2
    raw = np.load(ep / "frames.npz")["frames"]
    assert frames[0].shape != raw[0].shape  # the overlay panel is there, not just the raw frame
    assert (tmp_path / "ep.png").stat().st_size > 1000


def test_train_replay_joins_the_showcase_episodes_into_one_video(run_dir):
    shown = sorted((run_dir / "showcase").iterdir())
    assert 1 <= len(shown) <= 2  # the picks among the 2 evaluation seeds
    steps = [json.loads(line) for ep in shown for line in (ep / "steps.jsonl").read_text().splitlines()]
    assert steps and steps[0]["judgement"]["reason"]  # recorded with the judge's reasons
    cap = cv2.VideoCapture(str(run_dir / "replay.mp4"))
    fps, n = cap.get(cv2.CAP_PROP_FPS), int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
    held = round(1.5 * fps)  # each ending held 1.5 s
    assert fps == pytest.approx(5, abs=0.01) and n == len(steps) + len(shown) * (1 + held)
    assert (run_dir / "replay_summary.png").stat().st_size > 1000


def test_replay_of_several_episodes_is_one_mp4(run_dir, tmp_path):
    eps = sorted((run_dir / "episodes").iterdir())[:2]
    out = tmp_path / "two.mp4"
    cli("replay", *eps, "--out", out, "--fps", 10)
    frames = sum(len((ep / "steps.jsonl").read_text().splitlines()) + 1 for ep in eps)
    cap = cv2.VideoCapture(str(out))
    assert int(cap.get(cv2.CAP_PROP_FRAME_COUNT)) == frames + 2 * 10  # plus 1 s hold after each


def test_enjoy_records_judged_episodes_with_reasons(run_dir, tmp_path):
    p = cli("enjoy", run_dir, "--episodes", 1, "--out", tmp_path / "enjoy")
    assert "success=" in p.stdout
    steps = [json.loads(line) for line in (tmp_path / "enjoy" / "ep_0000" / "steps.jsonl").read_text().splitlines()]
    assert all(s["judgement"] is not None for s in steps) and steps[0]["judgement"]["reason"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "--task", "no_such_task"], "unknown task 'no_such_task'"),
        (["train", "--judge.backendd", "rules"], "unknown option '--judge.backendd' (did you mean '--judge.backend'?)"),
        (["finetune", "--labels", "l", "--out", "o", "--max-labels", "5"], "unknown option '--max-labels' (did you mean '--max_labels'?)"),
        (["train", "--resume", "/no/such/run", "--seed", "1"], "only --steps may change"),
        (["train", "--reward.judge_every", "0"], "reward.judge_every: must be at least 1, got 0"),
        (["train", "--steps", "0"], "steps: must be at least 1, got 0"),
        (["train", "--n_envs", "0"], "n_envs: must be at least 1, got 0"),
        (["train", "--reward.clip", "-1"], "reward.clip: must be greater than 0.0, got -1.0"),
        (["train", "--algo", "dqn"], "argument --algo: must be one of 'sac', 'ppo', got 'dqn'"),
        (["train", "--steps", "many"], "argument --steps: expected an integer, got 'many'"),
        (["label", "auto"], "the following arguments are required: --out"),
        (["eval", "/no/such/run"], "no such run directory"),
        (["replay", "/no/such/episode", "--out", "x.mp4"], "no/such/episode"),
        (["replay", "a", "b", "--out", "x.gif"], "several episodes make one MP4"),
        (["replay", "a", "--out", "x.mp4", "--fps", "0"], "--fps must be positive"),
        (["tasks", "validate", "/no/such.yaml"], "file not found"),
    ],
)
def test_bad_input_gives_a_one_line_error(args, message, tmp_path):
    p = cli(*args, cwd=tmp_path, check=False)
    assert p.returncode == 2, p.stderr
    last = p.stderr.strip().splitlines()[-1]
    assert message in last, p.stderr
    assert last.startswith("robo-prm: error: ") and "Traceback" not in p.stderr and "usage:" not in p.stderr
