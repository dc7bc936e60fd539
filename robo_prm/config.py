"""The train config: defaults ← configs/train/<x>.yaml ← CLI dotted overrides, validated into dataclasses.

Every field is a `robo-prm train` flag (``--steps``, ``--reward.judge_every``) with the help text given here."""
from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from robo_prm.config_flags import opt
from robo_prm.config_io import ConfigError, dotted_to_nested, from_dict, load_yaml, merge, to_dict
from robo_prm.judge.config import JudgeConfig
from robo_prm.reward.config import RewardConfig


@dataclass
class DescribeConfig:
    source: Literal["state", "pixels"] = opt("state", "what the judge's scene text is made from: simulator state, or rendered frames only")
    milestone_line: bool = opt(True, 'show "Milestones reached: i of n" to the judge')
    weights: str | None = opt(None, "pixels: a trained perception folder (null: the shipped robo_prm/models/perception)")
    caption_model: str | None = opt(None, "pixels: an open_clip CoCa captioner folder (`robo-prm perception train-coca`) "
                                          "whose caption is the scene text (null: the perception model's slot heads)")
    every: int = opt(0, min=0, help="pixels: describe every n-th step and hold the description between (0: reward.judge_every)")
    goal_similarity: bool = opt(False, "pixels: each description also carries the frame's CLIP similarity to the goal "
                                       "text (what judge.backend clip scores; set by reward_source clip)")


@dataclass
class RecordConfig:
    every_episodes: int = opt(50, min=0, help="record every n-th training episode (0: never)")
    frame_size: int = opt(224, min=16, max=2048, help="recorded frame width = height, pixels")
    views: list[str] = opt(["front"], "camera views recorded side by side (front, side; `replay --pixel_captions` needs "
                           "the perception model's views); a run described from pixels records the model's views")
    explain: bool = opt(True, "ask the judge for reasons on recorded episodes")


@dataclass
class EvalConfig:
    every_steps: int = opt(2_500, min=0, help="evaluate every n env steps (0: never during training)")
    episodes: int = opt(10, min=1, help="episodes per evaluation")
    record: int = opt(1, min=0, help="how many of the evaluation episodes to record")


@dataclass
class CurriculumConfig:
    """Start states along the task's scripted plan, near the goal first, widening as training succeeds (docs/LEARNING.md)."""

    enabled: bool = opt(False, "start training episodes part-way along the task's `expert:` plan (the object already "
                               "grasped, lifted or near its place) and widen the starts back to the real one as the "
                               "rollout success rate rises; evaluation always uses the real starts")
    start_width: float = opt(0.0, min=0.0, max=1.0, help="the first level: starts drawn from the last `width` of the expert's "
                                                         "path (0: just before success)")
    step: float = opt(0.25, gt=0.0, max=1.0, help="how much the width grows per promotion; past width 1 the real starts alone")
    promote_at: float = opt(0.7, gt=0.0, max=1.0, help="rollout success rate over the last `window` episodes that widens the starts")
    window: int = opt(20, min=1, help="training episodes the promotion success rate is measured over")
    real_starts: float = opt(0.2, min=0.0, max=1.0, help="share of episodes that start from the real start at every level")


@dataclass
class DemoBCConfig:
    """Behaviour cloning from the demonstrations (SAC with demos > 0; robo_prm/train/bc.py, docs/LEARNING.md).
    `pretrain_steps` > 0 switches it on; the other fields are its settings (defaults: measured on place_cup_in_bin)."""

    pretrain_steps: int = opt(0, min=0, help="fit the actor to the demos for N gradient steps before learning, with its "
                                             "inputs standardised by the demos' statistics (0: off)")
    std: float = opt(0.3, gt=0.0, help="exploration width (pre-tanh σ) the cloned actor starts with")
    weight: float = opt(10.0, min=0.0, help="after each SAC update, an actor step on this weight × the Q-filtered "
                                            "behaviour-cloning loss on a demo batch (0: none)")
    # Why a switch: on tidy_table only ~10 % of demo rows passed the filter right after the actor's release (the
    # clone's actions are close to the demos', so an untrained critic's noise decides), and the clone collapsed.
    q_filter: bool = opt(True, "apply the BC step only where the critic rates the demo's action above the actor's "
                               "(Nair et al.); false: on every demo row")
    keep_clone: bool = opt(False, "keep a frozen copy of the clone and act with the actor's or the clone's action, "
                                  "whichever the critics rate higher (IBRL's action selection; train/bc.py)")
    residual: float = opt(0.0, min=0.0, max=2.0, help="act with the frozen clone's action + this × the actor's, the "
                                                        "actor learning a residual that starts at zero (residual policy "
                                                        "learning; train/bc.py); 0: the actor is the policy. Like every "
                                                        "demo_bc field, inert while cloning is off")
    select_fits: int = opt(1, min=1, max=50, help="fit the clone this many times from fresh initialisations and keep "
                                                  "the fit that succeeds most on select_episodes validation rollouts "
                                                  "(fits of one demo set differ widely on tidy_table); 1: one fit")
    select_episodes: int = opt(10, min=1, help="validation episodes per clone fit (seeds 50,000 + 100 × seed on)")
    critic_warmup: int = opt(2_000, min=0, help="env steps after learning_starts during which SAC updates the critic only "
                                                "and the cloned actor is held still")
    learning_starts: int = opt(1_000, min=0, help="SAC's learning_starts when cloning (replaces sac.learning_starts: "
                                                  "the clone could act from step 0)")
    ent_coef: str = opt("auto_0.01", "SAC's ent_coef when cloning (replaces sac.ent_coef): a small starting entropy "
                                     "bonus, so SAC's entropy term does not pull the clone's actions off the box edges")

    @property
    def enabled(self) -> bool:
        return self.pretrain_steps > 0


@dataclass
class TrainConfig:
    task: str = opt("reach_tool", "shipped task name or path to a task YAML")
    algo: Literal["sac", "ppo"] = opt("sac", "the SB3 algorithm")
    steps: int = opt(10_000, "total env steps", min=1)
    seed: int = opt(0, "seed of the envs (env k: seed + k) and the learner")
    n_envs: int = opt(1, "parallel envs", min=1, max=256)
    device: str = opt("cpu", "torch device of the policy: cpu, cuda, cuda:1, or auto (a GPU where there is one, as "
                             "SB3 picks; small MLP policies often train as fast on the CPU)")
    torch_threads: int = opt(1, min=1, help="torch threads (1 whenever a judge or env workers share the cores)")
    reward_source: Literal["blend", "env", "dense", "her", "clip"] = opt(
        "blend", "blend: the LLM reward; env (sparse success), dense (hand-written), her (sparse, goal-conditioned "
                 "observation + SB3's HerReplayBuffer, SAC on single-object tasks) and clip (the blend with the "
                 "frame's CLIP similarity to the goal text in the LLM's place: VLM-RM; describes from pixels) "
                 "are the baselines")
    vec_env: Literal["dummy", "subproc"] = opt("dummy", "n_envs > 1: step the envs in this process (dummy) or one "
                                                        "subprocess each (subproc: SB3's SubprocVecEnv)")
    updates_per_step: float = opt(1.0, gt=0.0, help="SAC gradient steps per env step: gradient_steps = "
                                                    "round(updates_per_step × n_envs) per vector step (sac.gradient_steps wins)")
    demos: int = opt(0, min=0, help="SAC: run the task's `expert:` plan for N episodes through the training envs and reward "
                                    "before learning and keep them in a demo buffer that is never overwritten")
    demos_successful_only: bool = opt(False, "keep only the expert's successful episodes, until `demos` of them (at "
                                             "most 2 × demos run): the demo store and the clone see no failed retries")
    demo_ratio: float | None = opt(0.25, min=0.0, max=1.0, help="share of every SAC batch drawn from the demos (null: in "
                                                                "proportion to their count, as if kept in the replay buffer)")
    demo_bc: DemoBCConfig = opt(factory=DemoBCConfig, help="behaviour cloning from the demos")
    curriculum: CurriculumConfig = opt(factory=CurriculumConfig, help="start states near the goal first")
    checkpoint_every: int = opt(5_000, min=0, help="save a checkpoint every n env steps")
    keep_checkpoints: int = opt(2, min=1, help="keep the newest k checkpoints (at least 1); only the newest keeps its replay buffer")
    runs_dir: str = opt("runs", "folder that holds the run folders")
    run_name: str | None = opt(None, "run folder name (null: {task}__{algo}__{seed}__{time})")
    progress_bar: bool = opt(True, "show a progress bar")
    describe: DescribeConfig = opt(factory=DescribeConfig, help="scene descriptions the judge reads")
    judge: JudgeConfig = opt(factory=JudgeConfig, help="the LLM judge")
    reward: RewardConfig = opt(factory=RewardConfig, help="the blended reward")
    record: RecordConfig = opt(factory=RecordConfig, help="episodes recorded during training")
    eval: EvalConfig = opt(factory=EvalConfig, help="evaluation of the policy during training")
    sac: dict[str, Any] = opt({}, "extra SB3 SAC(...) keyword arguments")
    ppo: dict[str, Any] = opt({}, "extra SB3 PPO(...) keyword arguments")

    def resolve(self) -> None:
        """Set the fields another field implies, where training starts (the run's config.yaml shows the result).
        reward_source clip: the blend scored by the CLIP judge on frames — describe.source pixels with
        describe.goal_similarity, judge.backend clip, and no caches keyed by caption text (the score is the frame's)."""
        if self.reward_source == "clip":
            self.describe.source, self.describe.goal_similarity, self.judge.backend = "pixels", True, "clip"
            self.judge.cache_size, self.reward.cache = 0, False

    def check_combination(self) -> None:
        """Fields that only work together, checked where training starts (each field alone is valid anywhere)."""
        if self.reward_source == "her" and self.algo != "sac":
            raise ConfigError(f"reward_source: her needs algo sac (HerReplayBuffer is off-policy), got algo {self.algo}")
        if self.demos and self.algo != "sac":
            raise ConfigError(f"demos: needs algo sac (a replay buffer to keep them in), got algo {self.algo}")
        if self.demo_bc.enabled and not self.demos:
            raise ConfigError("demo_bc: clones the demonstrations: needs demos > 0")
        if self.demo_bc.enabled and self.demo_bc.residual > 0 and self.demo_bc.keep_clone:
            raise ConfigError("demo_bc.residual: not with demo_bc.keep_clone (two ways of acting with the clone)")
        if self.demos and self.reward_source == "her":
            raise ConfigError("demos: not with reward_source her (HerReplayBuffer keeps whole episodes of its own)")
        if self.describe.caption_model and self.describe.source != "pixels":
            raise ConfigError("describe.caption_model: captions frames: needs describe.source pixels")
        if self.judge.backend == "clip" and not (self.describe.source == "pixels" and self.describe.goal_similarity):
            raise ConfigError("judge.backend: clip scores frames: needs describe.source pixels and describe.goal_similarity "
                              "true (--reward_source clip sets both)")


def train_configs_dir() -> Path:
    return Path(str(resources.files("robo_prm.configs") / "train"))


def task_train_config(task: str | None, algo: str | None) -> str | None:
    """The shipped per-task train config (configs/train/<task>.yaml) when it fits the asked algorithm."""
    path = train_configs_dir() / f"{task or 'reach_tool'}.yaml"
    if path.exists() and algo in (None, load_yaml(path).get("algo")):
        return str(path)
    return None


# A train YAML's optional section of settings that apply only when the scene text comes from pixels
# (describe.source pixels, from the file or the command line): a task can ship the setting that learns from the
# noisier pixel captions without a second file. The command line still wins over it. reward_source clip, which
# implies pixels only where training starts (TrainConfig.resolve), does not take it: the CLIP baseline's figures
# were measured with the file's own settings, and one env was chosen for captions, not for a frame's cosine.
PIXELS_SECTION = "when_pixels"


def load_train_config(path: str | None = None, overrides: dict[str, Any] | None = None) -> TrainConfig:
    """Defaults, then the YAML file (a path or a name under configs/train/), then its `when_pixels`
    section if the run describes from pixels, then dotted overrides."""
    data: dict = {}
    when_pixels: dict = {}
    where = "defaults"
    if path:
        p = Path(path)
        if not p.exists() and not path.endswith((".yaml", ".yml")):
            p = train_configs_dir() / f"{path}.yaml"
        data = load_yaml(p)
        where = str(p)
        when_pixels = data.pop(PIXELS_SECTION, None) or {}
        if not isinstance(when_pixels, dict):
            raise ConfigError(f"{where}: {PIXELS_SECTION}: expected a mapping of train settings, "
                              f"got {type(when_pixels).__name__}")
    command_line = dotted_to_nested(overrides) if overrides else {}
    if command_line:
        where += " + command line"
    try:
        if when_pixels:  # checked in every run, so a typo in it shows before anyone trains from pixels
            from_dict(TrainConfig, merge(data, when_pixels))
    except ConfigError as exc:
        raise ConfigError(f"{where}: {PIXELS_SECTION}: {exc}") from None
    try:
        cfg = from_dict(TrainConfig, merge(data, command_line))
        if when_pixels and cfg.describe.source == "pixels":
            cfg = from_dict(TrainConfig, merge(merge(data, when_pixels), command_line))
        return cfg
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def config_to_yaml(cfg: TrainConfig) -> str:
    import yaml

    return yaml.safe_dump(to_dict(cfg), sort_keys=False)
