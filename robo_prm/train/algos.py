"""SB3 algorithms with per-task defaults from configs/train, used unmodified."""
from __future__ import annotations

import io
import pickle
import zipfile
from pathlib import Path

import torch
from stable_baselines3 import PPO, SAC, HerReplayBuffer
from stable_baselines3.common.buffers import ReplayBuffer
from stable_baselines3.common.base_class import BaseAlgorithm

from robo_prm.config import TrainConfig
from robo_prm.config_io import ConfigError
from robo_prm.reward.relabel import relabel_kwargs
from robo_prm.train.bc import ClonePolicy, ResidualPolicy, StandardizedObs
from robo_prm.train.demos import demo_buffer_class

ALGOS = {"sac": SAC, "ppo": PPO}
DEFAULTS = {
    "sac": {"learning_starts": 1000, "batch_size": 256, "gamma": 0.95, "learning_rate": 1e-3, "train_freq": 1, "gradient_steps": 1},
    "ppo": {"n_steps": 512, "batch_size": 64, "gamma": 0.98, "learning_rate": 3e-4, "ent_coef": 0.0},
}
HER = {"n_sampled_goal": 4, "goal_selection_strategy": "future"}  # SB3's and the HER paper's defaults


def algo_kwargs(cfg: TrainConfig) -> dict:
    """The keywords SB3 gets: DEFAULTS[algo] (SAC's gradient_steps from `updates_per_step` × n_envs) under the
    config's `sac:` / `ppo:` section (one place)."""
    if cfg.algo == "ppo":
        return {**DEFAULTS["ppo"], **cfg.ppo}
    out = {**DEFAULTS["sac"], "gradient_steps": max(1, round(cfg.updates_per_step * cfg.n_envs)), **cfg.sac}
    if cfg.demo_bc.enabled:  # the clone needs standardised inputs (train/bc.py)
        out.update(learning_starts=cfg.demo_bc.learning_starts, ent_coef=cfg.demo_bc.ent_coef)
        out["policy_kwargs"] = {"features_extractor_class": StandardizedObs, **(out.get("policy_kwargs") or {})}
    return out


def buffer_kwargs(cfg: TrainConfig) -> dict:
    """replay_buffer_class/_kwargs of the aids: HER's buffer (reward_source her), the demo store (demos) on the
    async judge's relabelling buffer or SB3's own; keywords under `sac: replay_buffer_kwargs` win."""
    # reward.async: SB3's buffer classes that take the late judgements (reward/relabel.py)
    out = relabel_kwargs(cfg.algo, cfg.reward_source in ("blend", "clip") and cfg.reward.async_, cfg.reward.async_sample)
    if cfg.algo != "sac":
        return out
    if cfg.reward_source == "her":
        out = {"replay_buffer_class": HerReplayBuffer, "replay_buffer_kwargs": dict(HER)}
    elif cfg.demos:
        out = {"replay_buffer_class": demo_buffer_class(out.get("replay_buffer_class", ReplayBuffer)),
               "replay_buffer_kwargs": {**out.get("replay_buffer_kwargs", {}), "demo_ratio": cfg.demo_ratio}}
    if "replay_buffer_kwargs" in out:
        out["replay_buffer_kwargs"].update(cfg.sac.get("replay_buffer_kwargs") or {})
    return out


def make_algo(cfg: TrainConfig, venv, log_dir: Path | None, **override) -> BaseAlgorithm:
    kwargs = {**algo_kwargs(cfg), **buffer_kwargs(cfg), **override}
    policy = "MultiInputPolicy" if cfg.reward_source == "her" else "MlpPolicy"
    if cfg.algo == "sac" and cfg.demo_bc.enabled and cfg.demo_bc.keep_clone:
        policy = ClonePolicy  # SAC's MlpPolicy + the frozen clone (train/bc.py)
    if cfg.algo == "sac" and cfg.demo_bc.enabled and cfg.demo_bc.residual > 0:
        policy = ResidualPolicy  # the actor learns a residual on the frozen clone (train/bc.py)
    return ALGOS[cfg.algo](policy, venv, seed=cfg.seed, device=cfg.device, tensorboard_log=str(log_dir) if log_dir else None,
                           verbose=0, **kwargs)


def load_algo(algo: str, path: Path, venv=None, device: str = "cpu") -> BaseAlgorithm:
    """SB3's own load: it unpickles the zip's `:serialized:` fields, so only for a trusted file (trust.py)."""
    return ALGOS[algo].load(str(path), env=venv, device=device)


def load_weights(cfg: TrainConfig, env, path: Path) -> BaseAlgorithm:
    """A fresh model built from `cfg` for `env`'s spaces, with the policy weights of the SB3 zip `path`.

    Reads only the zip's policy.pth, with torch.load(weights_only=True): no pickle runs, so this is
    safe on a run folder from anywhere. The zip's `:serialized:` fields are never looked at."""
    small = {"buffer_size": 1, "replay_buffer_class": None, "replay_buffer_kwargs": None}  # no buffer is needed here
    model = make_algo(cfg, env, None, **(small if cfg.algo == "sac" else {}))
    try:
        with zipfile.ZipFile(path) as archive:
            raw = archive.read("policy.pth")
        weights = torch.load(io.BytesIO(raw), map_location=model.device, weights_only=True)  # 'auto' resolved
    except (OSError, zipfile.BadZipFile, KeyError, EOFError) as exc:
        raise ConfigError(f"{path}: not a readable SB3 model ({str(exc).splitlines()[0]})") from None
    except pickle.UnpicklingError:
        raise ConfigError(f"{path}: policy.pth holds more than tensors; refusing to unpickle it") from None
    try:
        model.policy.load_state_dict(weights)
    except (RuntimeError, TypeError, AttributeError):
        raise ConfigError(f"{path}: policy.pth does not fit a {cfg.algo} MlpPolicy built from the run's config.yaml") from None
    return model
