"""Checkpoints of a run: checkpoints/step_XXXXXXXXX/ + a `latest` pointer.

    model.zip          SB3's save (some fields cloudpickled: loaded only when signed, see trust.py)
    replay_buffer.pkl  SAC's replay buffer (a pickle; only the newest checkpoint keeps one)
    state.json         our own state: step, reward normaliser + schedule clock + novelty counts,
                       RNG states, episode counter (JSON: reading it runs no code)
    MANIFEST.json      sha256 of each file, HMAC-signed with this machine's run key

A checkpoint is written into `.step_X.tmp`, hashed and signed, then renamed; `latest` flips after.
A process killed at any point leaves either the complete folder or a `.tmp` one, which the next start
removes. Resume takes the newest folder whose files match their hashes (the `latest` file is a hint
for people; an empty or missing one changes nothing). The newest `keep` checkpoints are kept.
"""
from __future__ import annotations

import json
import logging
import os
import pickle
import random
import re
import shutil
import signal
from pathlib import Path

import numpy as np
import torch
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm

from robo_prm.config_io import ConfigError
from robo_prm.train.envs import find_blend
from robo_prm.train.trust import MANIFEST, damage, manifest_signed, read_manifest, require_trust, sign_folder, write_manifest

log = logging.getLogger(__name__)

MODEL, BUFFER, STATE, LEGACY_STATE = "model.zip", "replay_buffer.pkl", "state.json", "state.pkl"
STEP_DIR = re.compile(r"step_(\d{9})")
CRASH_ENV = "ROBO_PRM_TEST_CRASH_AT"  # tests only: "STEP:STAGE" makes the writer SIGKILL its own process there


def _crash_point(step: int, stage: str) -> None:
    if os.environ.get(CRASH_ENV) == f"{step}:{stage}":
        os.kill(os.getpid(), signal.SIGKILL)


def rng_state() -> dict:
    """numpy, Python and torch RNG states as JSON-able lists."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    version, internal, py_gauss = random.getstate()
    return {"numpy": [kind, keys.tolist(), int(pos), int(has_gauss), float(gauss)],
            "python": [version, list(internal), py_gauss], "torch": torch.get_rng_state().tolist()}


def set_rng_state(rng: dict) -> None:
    n, p = rng["numpy"], rng["python"]
    np.random.set_state((n[0], np.asarray(n[1], dtype=np.uint32), *n[2:]))
    random.setstate((p[0], tuple(p[1]), p[2]))
    torch.set_rng_state(torch.as_tensor(rng["torch"], dtype=torch.uint8))


def checkpoint_dirs(ckpt_dir: Path) -> list[Path]:
    """step_* folders, newest first."""
    found = [p for p in Path(ckpt_dir).glob("step_*") if p.is_dir() and STEP_DIR.fullmatch(p.name)]
    return sorted(found, key=lambda p: int(p.name[5:]), reverse=True)


def clean_stale(ckpt_dir: Path) -> None:
    """Remove what a killed writer left: .step_*.tmp folders and a half-written pointer."""
    for p in Path(ckpt_dir).glob(".step_*.tmp"):
        shutil.rmtree(p, ignore_errors=True)
        log.info("removed %s, left by an interrupted checkpoint", p)
    Path(ckpt_dir, ".latest.tmp").unlink(missing_ok=True)


def save_checkpoint(model, ckpt_dir: Path, blend=None, extra: dict | None = None, keep: int = 2) -> Path:
    """Write model, replay buffer (off-policy), state.json and the signed manifest; flip `latest`; prune."""
    ckpt_dir = Path(ckpt_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    step = model.num_timesteps
    name = f"step_{step:09d}"
    tmp = ckpt_dir / f".{name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    model.save(tmp / MODEL)
    _crash_point(step, "model")
    names = [MODEL, STATE]
    if isinstance(model, OffPolicyAlgorithm):
        model.save_replay_buffer(tmp / BUFFER)
        names.append(BUFFER)
        _crash_point(step, "replay_buffer")
    state = {"num_timesteps": step, "blend": blend.state_dict() if blend is not None else None,
             "rng": rng_state(), **(extra or {})}
    (tmp / STATE).write_text(json.dumps(state))
    sign_folder(tmp, names)
    _crash_point(step, "manifest")
    final = ckpt_dir / name
    old = ckpt_dir / f".{name}.old.tmp"  # the same step written before (a resumed run reached it again)
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)
    _crash_point(step, "rename")
    pointer = ckpt_dir / ".latest.tmp"
    pointer.write_text(name)
    os.replace(pointer, ckpt_dir / "latest")
    _crash_point(step, "latest")
    prune(ckpt_dir, keep, step)
    return final


def prune(ckpt_dir: Path, keep: int, step: int = -1) -> None:
    """Keep the newest `keep` checkpoints (at least one); only the newest keeps its replay buffer."""
    dirs = checkpoint_dirs(ckpt_dir)
    for folder in dirs[max(1, keep):]:
        gone = folder.parent / f".{folder.name}.tmp"
        os.replace(folder, gone)  # one rename: a kill leaves the folder whole or a .tmp the next start removes
        _crash_point(step, "prune")
        shutil.rmtree(gone, ignore_errors=True)
    for folder in dirs[1:max(1, keep)]:
        manifest = read_manifest(folder)
        if manifest is not None and BUFFER in manifest["files"]:
            files = {k: v for k, v in manifest["files"].items() if k != BUFFER}
            write_manifest(folder, files, sign=manifest_signed(manifest))  # unlist first, then delete
        (folder / BUFFER).unlink(missing_ok=True)


def checkpoint_damage(folder: Path) -> str | None:
    """Why `folder` cannot be resumed from, or None. The replay buffer is optional (older checkpoints lose it)."""
    if (folder / MANIFEST).exists() or not (folder / LEGACY_STATE).exists():
        return damage(folder, (MODEL, STATE))
    return None if (folder / MODEL).is_file() else f"{MODEL} missing"  # an older run's unsigned checkpoint


def latest_checkpoint(ckpt_dir: Path) -> Path | None:
    """The newest intact checkpoint; one warning line names any newer damaged one passed over."""
    passed = []
    for folder in checkpoint_dirs(ckpt_dir):
        why = checkpoint_damage(folder)
        if why is None:
            if passed:
                log.warning("%s: skipping damaged checkpoint(s) %s; resuming from %s", ckpt_dir, "; ".join(passed), folder.name)
            return folder
        passed.append(f"{folder.name} ({why})")
    if passed:
        log.warning("%s: no intact checkpoint: %s", ckpt_dir, "; ".join(passed))
    return None


def read_state(folder: Path, trust: bool = False) -> dict:
    """state.json; an older run's state.pkl only when signed or trusted (it is a pickle)."""
    path = folder / STATE
    if path.exists():
        try:
            state = json.loads(path.read_text())
        except ValueError as exc:
            raise ConfigError(f"{path}: not valid JSON ({exc})") from None
    elif (folder / LEGACY_STATE).exists():
        path = folder / LEGACY_STATE
        require_trust(folder, LEGACY_STATE, trust)
        with open(path, "rb") as f:
            state = pickle.load(f)
    else:
        raise ConfigError(f"{folder}: no {STATE}")
    if not isinstance(state, dict) or not isinstance(state.get("num_timesteps"), int):
        raise ConfigError(f"{path}: not a checkpoint state")
    return state


def load_replay_buffer(model, folder: Path, trust: bool = False) -> bool:
    """Load the checkpoint's replay buffer when it is there and intact; warn and start empty otherwise."""
    path = folder / BUFFER
    legacy = not (folder / MANIFEST).exists()
    why = None if legacy and path.is_file() else damage(folder, (BUFFER,))
    if why is not None:
        log.warning("%s: %s; resuming with an empty replay buffer", folder, why)
        return False
    require_trust(folder, BUFFER, trust)
    model.load_replay_buffer(path)
    return True


class CheckpointEvery(BaseCallback):
    """A checkpoint each time the step count passes a multiple of `every` (a resumed run keeps the grid)."""

    def __init__(self, ckpt_dir: Path, every: int, extra_state=None, keep: int = 2):
        super().__init__()
        self.ckpt_dir, self.every, self.extra_state, self.keep = ckpt_dir, every, extra_state, keep
        self._last = 0
        self.saved_at: int | None = None

    def _on_training_start(self):
        self._last = self.num_timesteps

    def save(self) -> Path:
        self.saved_at = self._last = self.model.num_timesteps
        extra = self.extra_state() if self.extra_state else None
        return save_checkpoint(self.model, self.ckpt_dir, find_blend(self.training_env), extra, self.keep)

    def _on_step(self) -> bool:
        if self.every > 0 and self.num_timesteps // self.every > self._last // self.every:
            self.save()
        return True
