"""Run folders: opening one runs no code from it, resume is exact after a kill -9 anywhere in a
checkpoint write, damaged checkpoints fall back, pruning keeps K, and short runs reach TensorBoard.

Trainings are tiny (reach_tool, rules judge, a few hundred steps, 64 px recordings, a 2000-step
replay buffer). The kill tests run the training in a subprocess and kill it with SIGKILL, either at a
named point inside the checkpoint writer (ROBO_PRM_TEST_CRASH_AT) or after a random delay.
"""
from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import pickle
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robo_prm.cli import main
from robo_prm.config import load_train_config
from robo_prm.config_io import ConfigError
from robo_prm.train import resume, train
from robo_prm.train.checkpoints import (BUFFER, CRASH_ENV, checkpoint_damage, checkpoint_dirs, clean_stale, latest_checkpoint,
                                        load_replay_buffer, prune)
from robo_prm.train.trust import KEY_DIR_ENV, MANIFEST, UntrustedRunError, key_path, sha256, sign_folder, signed, write_manifest

TINY = {"task": "reach_tool", "algo": "sac", "judge.backend": "rules", "checkpoint_every": 100, "keep_checkpoints": 2,
        "eval.every_steps": 0, "eval.episodes": 1, "eval.record": 0, "record.every_episodes": 1, "record.frame_size": 64,
        "progress_bar": False, "sac.learning_starts": 100, "sac.buffer_size": 2000, "sac.batch_size": 32}


class Evil:
    """Unpickling this creates the folder `marker`: proof that a file's code ran."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A finished 300-step run: checkpoints at 100, 200, 300 (keep 2), episodes, final_model.zip."""
    runs = tmp_path_factory.mktemp("runs")
    return train(load_train_config(None, {**TINY, "steps": 300, "runs_dir": str(runs), "run_name": "tiny"}))


@pytest.fixture
def run(trained, tmp_path) -> Path:
    """A copy of the trained run folder to damage."""
    return Path(shutil.copytree(trained, tmp_path / "run"))


def _patch_zip(path: Path, **members):
    with zipfile.ZipFile(path) as z:
        files = {n: z.read(n) for n in z.namelist()}
    for name, change in members.items():
        files[name.replace("__", ".")] = change(files[name.replace("__", ".")]) if callable(change) else change
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)


def _serialized_payload(marker: Path):
    """Put an Evil object into the zip's cloudpickled `observation_space` field."""
    def change(raw: bytes) -> bytes:
        data = json.loads(raw)
        data["observation_space"][":serialized:"] = base64.b64encode(pickle.dumps(Evil(marker))).decode()
        return json.dumps(data).encode()
    return change


def _one_line_error(capsys, rc, *words):
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "Traceback" not in err and "\n" not in err, err
    for w in words:
        assert w in err, err
    return err


# ---- opening a run folder runs none of its code ---------------------------------------------
def test_the_run_key_is_private_and_signs_each_checkpoint(trained, tmp_path, monkeypatch):
    assert key_path().stat().st_mode & 0o777 == 0o600
    newest = checkpoint_dirs(trained / "checkpoints")[0]
    assert signed(newest, "model.zip") and signed(newest, BUFFER)
    monkeypatch.setenv(KEY_DIR_ENV, str(tmp_path / "other_machine"))
    assert not signed(newest, "model.zip")  # another machine's key: the same files are not vouched for


def test_a_crafted_state_pickle_is_refused_by_the_cli_and_never_loaded(run, tmp_path):
    newest = checkpoint_dirs(run / "checkpoints")[0]
    marker = tmp_path / "pwned"
    for name in (MANIFEST, "state.json"):
        (newest / name).unlink()
    (newest / "state.pkl").write_bytes(pickle.dumps(Evil(marker)))  # an older run's layout, made by an attacker
    p = subprocess.run([sys.executable, "-m", "robo_prm.cli", "train", "--resume", str(run)], capture_output=True, text=True,
                       timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    err = p.stderr.strip()
    assert p.returncode == 2 and "\n" not in err and "Traceback" not in err, err
    assert str(newest / "model.zip") in err and "--trust_run" in err
    assert not marker.exists()


def test_trust_run_is_the_opt_in_that_unpickles(run, tmp_path):
    newest = checkpoint_dirs(run / "checkpoints")[0]
    marker = tmp_path / "pwned"
    for name in (MANIFEST, "state.json"):
        (newest / name).unlink()
    (newest / "state.pkl").write_bytes(pickle.dumps(Evil(marker)))
    with pytest.raises(UntrustedRunError):
        resume(run)
    assert not marker.exists()
    with pytest.raises(ConfigError, match="not a checkpoint state"):
        resume(run, trust=True)  # the user said they trust it: the pickle runs
    assert marker.exists()


def test_a_patched_model_zip_is_not_unpickled_by_eval_or_resume(run, tmp_path, capsys):
    from stable_baselines3 import SAC

    marker = tmp_path / "pwned"
    _patch_zip(run / "final_model.zip", data=_serialized_payload(marker))
    with pytest.raises(Exception):
        SAC.load(run / "final_model.zip")  # control: SB3's own loader runs the payload
    assert marker.exists()
    marker.rmdir()
    assert main(["eval", str(run), "--episodes", "1"]) == 0  # the weights alone are read: eval works
    assert not marker.exists()
    # the same patch inside the newest checkpoint: its hash no longer matches → the previous checkpoint
    ckpts = run / "checkpoints"
    newest, previous = checkpoint_dirs(ckpts)[:2]
    shutil.copy(run / "final_model.zip", newest / "model.zip")
    assert latest_checkpoint(ckpts) == previous
    # ... and with a forged manifest (right hashes, no valid signature): refused, one line
    write_manifest(newest, {n: sha256(newest / n) for n in ("model.zip", "state.json", BUFFER)}, sign=False)
    capsys.readouterr()
    _one_line_error(capsys, main(["train", "--resume", str(run)]), str(newest / "model.zip"), "--trust_run")
    assert not marker.exists()


def test_a_pickle_in_policy_pth_is_refused_by_eval(run, tmp_path, capsys):
    marker = tmp_path / "pwned"
    _patch_zip(run / "final_model.zip", policy__pth=pickle.dumps(Evil(marker)))
    capsys.readouterr()
    _one_line_error(capsys, main(["eval", str(run), "--episodes", "1"]), "final_model.zip", "policy.pth")
    assert not marker.exists()


def test_a_swapped_replay_buffer_is_never_loaded(run, tmp_path, caplog):
    newest = checkpoint_dirs(run / "checkpoints")[0]
    marker = tmp_path / "pwned"
    (newest / BUFFER).write_bytes(pickle.dumps(Evil(marker)))

    class Model:
        def load_replay_buffer(self, path):
            pickle.loads(Path(path).read_bytes())

    with caplog.at_level(logging.WARNING):
        assert load_replay_buffer(Model(), newest) is False  # hash differs: empty buffer, one warning
    assert "empty replay buffer" in caplog.text and not marker.exists()
    write_manifest(newest, {n: sha256(newest / n) for n in ("model.zip", "state.json", BUFFER)}, sign=False)
    with pytest.raises(UntrustedRunError, match="--trust_run"):
        load_replay_buffer(Model(), newest)
    assert not marker.exists()


def test_a_foreign_run_folder_evaluates_but_resumes_only_with_trust_run(run, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(KEY_DIR_ENV, str(tmp_path / "other_machine"))
    assert main(["eval", str(run), "--episodes", "1"]) == 0
    capsys.readouterr()
    _one_line_error(capsys, main(["train", "--resume", str(run)]), "model.zip", "--trust_run")
    assert main(["train", "--resume", str(run), "--steps", "300", "--trust_run"]) == 0


# ---- damaged checkpoints ----------------------------------------------------------------------
@pytest.mark.parametrize("victim", ["model.zip", "state.json"])
def test_a_truncated_latest_checkpoint_falls_back_with_one_warning(run, caplog, victim):
    ckpts = run / "checkpoints"
    newest, previous = checkpoint_dirs(ckpts)[:2]
    data = (newest / victim).read_bytes()
    (newest / victim).write_bytes(data[: len(data) // 2])
    with caplog.at_level(logging.WARNING):
        assert latest_checkpoint(ckpts) == previous
    [record] = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "\n" not in record.getMessage() and newest.name in record.getMessage() and victim in record.getMessage()


def test_a_truncated_replay_buffer_resumes_with_an_empty_one(run, caplog):
    newest = checkpoint_dirs(run / "checkpoints")[0]
    (newest / BUFFER).write_bytes((newest / BUFFER).read_bytes()[:100])
    assert latest_checkpoint(run / "checkpoints") == newest  # the policy and state are intact

    class Model:
        def load_replay_buffer(self, path):
            raise AssertionError("a damaged buffer must not be read")

    with caplog.at_level(logging.WARNING):
        assert load_replay_buffer(Model(), newest) is False
    assert BUFFER in caplog.text


def test_resume_after_a_truncated_model_continues_from_the_previous_checkpoint(run, capsys):
    ckpts = run / "checkpoints"
    newest, previous = checkpoint_dirs(ckpts)[:2]
    (newest / "model.zip").write_bytes(b"PK")
    assert main(["train", "--resume", str(run), "--steps", "300"]) == 0
    assert "Traceback" not in capsys.readouterr().err
    assert json.loads((run / "summary.json").read_text())["env_steps"] == 300
    assert checkpoint_damage(ckpts / newest.name) is None  # step 300 written again, intact


@pytest.mark.parametrize("pointer", ["", None, "step_000000100"])
def test_the_latest_pointer_is_only_a_hint(run, pointer):
    ckpts = run / "checkpoints"
    if pointer is None:
        (ckpts / "latest").unlink()
    else:
        (ckpts / "latest").write_text(pointer)
    assert latest_checkpoint(ckpts) == ckpts / "step_000000300"


def test_stale_temporary_checkpoints_are_removed(tmp_path):
    stale = tmp_path / ".step_000000400.tmp"
    stale.mkdir()
    (stale / "model.zip").write_bytes(b"half")
    (tmp_path / "step_000000300").mkdir()
    clean_stale(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["step_000000300"]


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 6), keep=st.integers(0, 4))
def test_pruning_keeps_the_newest_k_and_one_replay_buffer(n, keep):
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        for k in range(1, n + 1):
            folder = d / f"step_{100 * k:09d}"
            folder.mkdir()
            for name in ("model.zip", "state.json", BUFFER):
                (folder / name).write_text(f"{name} {k}")
            sign_folder(folder, ["model.zip", "state.json", BUFFER])
        prune(d, keep)
        left = checkpoint_dirs(d)
        assert [p.name for p in left] == [f"step_{100 * k:09d}" for k in range(n, n - min(n, max(1, keep)), -1)]
        assert [(p / BUFFER).exists() for p in left] == [True] + [False] * (len(left) - 1)
        assert all(checkpoint_damage(p) is None and signed(p, "model.zip") for p in left)  # still intact and signed
        assert not list(d.glob(".*"))


# ---- kill -9 at any point, then resume ------------------------------------------------------------
def _tree_hash(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


def _train_cmd(runs: Path, steps: int) -> list[str]:
    flags = [f"--{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in TINY.items()]
    return [sys.executable, "-m", "robo_prm.cli", "train", *flags, f"--steps={steps}", f"--runs_dir={runs}", "--run_name=k"]


def _check_resume_after_kill(run: Path, steps: int, keep: int, caplog):
    ckpts, episodes = run / "checkpoints", run / "episodes"
    before = {p.name: _tree_hash(p) for p in episodes.glob("ep_*")}
    intact = [p for p in checkpoint_dirs(ckpts) if checkpoint_damage(p) is None]
    assert intact, "the kill came before the first checkpoint"
    start = int(intact[0].name[5:])
    with caplog.at_level(logging.WARNING):
        resume(run, steps)
    assert all("\n" not in r.getMessage() for r in caplog.records)
    after = sorted(p.name for p in episodes.glob("ep_*"))
    assert {name: _tree_hash(episodes / name) for name in before} == before  # nothing overwritten
    first_new = max((int(n[3:]) for n in before), default=-1) + 1
    new = [n for n in after if n not in before]
    assert new == [f"ep_{i:04d}" for i in range(first_new, first_new + len(new))] and new  # the counter went on
    assert all(json.loads((episodes / n / "meta.json").read_text())["env_steps"] >= start for n in new)
    grid = sorted({start, *range(100 * (start // 100 + 1), steps + 1, 100)}, reverse=True)
    left = checkpoint_dirs(ckpts)
    assert [int(p.name[5:]) for p in left] == grid[:keep]  # resumed from the newest intact one, no step+1 extra
    assert all(checkpoint_damage(p) is None for p in left)
    assert [(p / BUFFER).exists() for p in left] == [True] + [False] * (len(left) - 1)
    assert not list(ckpts.glob(".*tmp")) and not list(episodes.glob(".*"))
    state = json.loads((left[0] / "state.json").read_text())
    assert state["num_timesteps"] == steps and state["episode_index"] >= first_new + len(new) - 1
    assert json.loads((run / "summary.json").read_text())["env_steps"] == steps


@pytest.mark.parametrize("stage", ["replay_buffer", "rename", "prune"])
def test_kill_inside_a_checkpoint_write_then_resume(tmp_path, caplog, stage):
    env = {**os.environ, "OMP_NUM_THREADS": "1", CRASH_ENV: f"300:{stage}"}
    p = subprocess.run(_train_cmd(tmp_path, 400), capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]
    run = tmp_path / "k"
    if stage == "replay_buffer":
        assert (run / "checkpoints" / ".step_000000300.tmp").is_dir()  # half written, never renamed
    if stage == "rename":
        assert (run / "checkpoints" / "latest").read_text() == "step_000000200"  # renamed, pointer not flipped yet
    _check_resume_after_kill(run, 400, 2, caplog)


def test_kill_after_a_random_delay_then_resume(tmp_path, caplog):
    delay = random.uniform(0.0, 2.0)
    proc = subprocess.Popen(_train_cmd(tmp_path, 500), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    first = tmp_path / "k" / "checkpoints" / "step_000000100"
    t0 = time.time()
    while not first.exists() and proc.poll() is None and time.time() - t0 < 300:
        time.sleep(0.05)
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    _check_resume_after_kill(tmp_path / "k", 500, 2, caplog)


# ---- TensorBoard, hazard onsets ---------------------------------------------------------------------------
def test_a_short_run_writes_reward_judge_and_final_eval_scalars(trained):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    [events] = trained.glob("tb*/events.out.tfevents.*")
    acc = EventAccumulator(str(events))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert "reward/total" in tags and "judge/judge_calls" in tags and "eval/success_rate" in tags  # 300 < the 500-step interval
    assert [e.step for e in acc.Scalars("eval/success_rate")] == [300]
    assert acc.Scalars("reward/total")[-1].step == 300


def test_reward_logger_counts_hazard_onsets_like_the_evaluation():
    from types import SimpleNamespace

    from robo_prm.train.callbacks import RewardLogger
    from robo_prm.train.rollouts import hazard_onsets

    at_reset = ("near_edge(hammer)",)  # present from the start: not the policy's doing
    steps = [("near_edge(hammer)",), (), ("near_edge(hammer)",), ("near_edge(hammer)", "tipped(cup)"), ()]
    venv = SimpleNamespace(num_envs=1, reset_infos=[{"hazards": list(at_reset)}])
    cb = RewardLogger(every=10**9)
    cb.model = SimpleNamespace(num_timesteps=0, get_env=lambda: venv)
    cb._on_training_start()
    for t, hazards in enumerate(steps):
        cb.locals = {"infos": [{"hazards": list(hazards)}], "dones": [t == len(steps) - 1]}
        cb.num_timesteps = t + 1
        cb._on_step()
    assert list(cb.hazard_events) == [hazard_onsets(steps, at_reset)] == [2]
