"""SB3 algorithms with per-task defaults from configs/train, used unmodified."""
from __future__ import annotations

from pathlib import Path

from stable_baselines3 import PPO, SAC
from stable_baselines3.common.base_class import BaseAlgorithm

from robo_prm.config import TrainConfig

ALGOS = {"sac": SAC, "ppo": PPO}
DEFAULTS = {
    "sac": {"learning_starts": 1000, "batch_size": 256, "gamma": 0.95, "learning_rate": 1e-3, "train_freq": 1, "gradient_steps": 1},
    "ppo": {"n_steps": 512, "batch_size": 64, "gamma": 0.98, "learning_rate": 3e-4, "ent_coef": 0.0},
}


def make_algo(cfg: TrainConfig, venv, log_dir: Path) -> BaseAlgorithm:
    kwargs = {**DEFAULTS[cfg.algo], **(cfg.sac if cfg.algo == "sac" else cfg.ppo)}
    return ALGOS[cfg.algo]("MlpPolicy", venv, seed=cfg.seed, device=cfg.device, tensorboard_log=str(log_dir), verbose=0, **kwargs)


def load_algo(algo: str, path: Path, venv=None, device: str = "cpu") -> BaseAlgorithm:
    return ALGOS[algo].load(str(path), env=venv, device=device)
