"""The train config: defaults ← configs/train/<x>.yaml ← CLI dotted overrides, validated into dataclasses."""
from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from robo_prm.config_io import ConfigError, dotted_to_nested, from_dict, load_yaml, merge, to_dict
from robo_prm.judge.config import JudgeConfig
from robo_prm.reward.config import RewardConfig


@dataclass
class DescribeConfig:
    source: Literal["state", "pixels"] = "state"  # what the judge's scene text is made from: simulator state, or rendered frames only
    milestone_line: bool = True  # show "Milestones reached: i of n" to the judge
    weights: str | None = None  # pixels: a trained perception folder (default: the shipped robo_prm/models/perception)
    every: int = 0  # pixels: describe every n-th step and hold the description between (0: reward.judge_every)


@dataclass
class RecordConfig:
    every_episodes: int = 50  # record every N-th training episode (0: never)
    frame_size: int = 224
    explain: bool = True  # ask the judge for reasons on recorded episodes


@dataclass
class EvalConfig:
    every_steps: int = 2_500  # 0: never during training
    episodes: int = 10
    record: int = 1  # how many of the evaluation episodes to record


@dataclass
class TrainConfig:
    task: str = "reach_tool"  # shipped task name or path to a task YAML
    algo: Literal["sac", "ppo"] = "sac"
    steps: int = 10_000  # total env steps
    seed: int = 0
    n_envs: int = 1
    device: str = "cpu"
    torch_threads: int = 1  # 1 whenever a judge or env workers share the cores
    reward_source: Literal["blend", "env", "dense"] = "blend"  # blend = LLM reward; env/dense are the baselines
    checkpoint_every: int = 5_000
    runs_dir: str = "runs"
    run_name: str | None = None  # default {task}__{algo}__{seed}__{time}
    progress_bar: bool = True
    describe: DescribeConfig = field(default_factory=DescribeConfig)
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    record: RecordConfig = field(default_factory=RecordConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    sac: dict[str, Any] = field(default_factory=dict)  # extra SB3 SAC(...) keyword arguments
    ppo: dict[str, Any] = field(default_factory=dict)  # extra SB3 PPO(...) keyword arguments


def train_configs_dir() -> Path:
    return Path(str(resources.files("robo_prm.configs") / "train"))


def load_train_config(path: str | None = None, overrides: dict[str, Any] | None = None) -> TrainConfig:
    """Defaults, then the YAML file (a path or a name under configs/train/), then dotted overrides."""
    data: dict = {}
    where = "defaults"
    if path:
        p = Path(path)
        if not p.exists() and not path.endswith((".yaml", ".yml")):
            p = train_configs_dir() / f"{path}.yaml"
        data = load_yaml(p)
        where = str(p)
    if overrides:
        data = merge(data, dotted_to_nested(overrides))
        where += " + command line"
    try:
        return from_dict(TrainConfig, data)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def config_to_yaml(cfg: TrainConfig) -> str:
    import yaml

    return yaml.safe_dump(to_dict(cfg), sort_keys=False)
