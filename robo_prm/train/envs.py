"""Build the training VecEnv: tidy envs (+ frame capture, curriculum starts, expert hook, goal view) →
DummyVecEnv or SubprocVecEnv → blended-reward wrapper."""
from __future__ import annotations

import gymnasium
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecEnv

from robo_prm.config import TrainConfig
from robo_prm.describe import DescribeWrapper, StateCaptioner
from robo_prm.envs.tidy_env import VIEWS, TidyTableEnv
from robo_prm.judge import make_judge
from robo_prm.reward import LLMRewardVecEnv
from robo_prm.envs.task import Task
from robo_prm.envs.goal_env import GoalTidyEnv
from robo_prm.train.curriculum import CurriculumStart
from robo_prm.train.demos import ExpertHook


class FrameCapture(gymnasium.Wrapper):
    """Puts the rendered frame into info["frame"] while `capture` is on (episodes being recorded).

    Rendering inside step() is the only way to see an episode's last frame: the VecEnv resets
    the env before the callback runs."""

    def __init__(self, env: gymnasium.Env, views: tuple[str, ...] = ("front",)):
        super().__init__(env)
        self.capture = False
        self.views = tuple(views)  # camera views side by side (envs.tidy_env.VIEWS)

    def set_capture(self, on: bool):
        self.capture = bool(on)

    def render(self):
        """The same views as info["frame"]: a recording starts with this frame (EpisodeRecorder), and an episode's
        frames must all have one size (a pixel model's views side by side are wider than the env's own render)."""
        return self.env.unwrapped.render_views(self.views)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self.capture:
            info["frame"] = self.env.unwrapped.render_views(self.views)
        return obs, reward, terminated, truncated, info


def make_tidy_env(task: Task, cfg: TrainConfig, render: bool = True, reward_mode: str | None = None) -> DescribeWrapper:
    """The tidy env behind the describe stage, as training, evaluation, labelling and replay use it.

    `describe.source: pixels`: the env renders at the perception model's frame size (recorded
    episodes too) and info["description"] is made from that frame alone, every
    `describe.every` (default `reward.judge_every`) steps."""
    mode = reward_mode or ("dense" if cfg.reward_source == "dense" else "sparse")
    if cfg.describe.source == "pixels":
        from robo_prm.perception.weights import load_perception

        bundle = load_perception(cfg.describe.weights)
        size = bundle.net.cfg.size
        env = TidyTableEnv(task, reward_mode=mode, render_mode="rgb_array", width=size, height=size)
        every = cfg.describe.every or cfg.reward.judge_every
        return DescribeWrapper(env, bundle.captioner(task, cfg.describe.milestone_line, cfg.describe.goal_similarity,
                                                        cfg.describe.caption_model), every)
    size = cfg.record.frame_size
    env = TidyTableEnv(task, reward_mode=mode, render_mode="rgb_array" if render else None, width=size, height=size)
    return DescribeWrapper(env, StateCaptioner(task, cfg.describe.milestone_line))


def recorded_views(cfg: TrainConfig) -> tuple[str, ...]:
    """cfg.record.views, checked against the env's cameras before any env starts."""
    unknown = [v for v in cfg.record.views if v not in VIEWS]
    if unknown or not cfg.record.views:
        raise ValueError(f"record.views: unknown camera view(s) {unknown or '(none)'}; known are {sorted(VIEWS)}")
    return tuple(cfg.record.views)


def make_vec_env(task: Task, cfg: TrainConfig, judge=None) -> VecEnv:
    views = recorded_views(cfg)

    def factory(rank: int):
        def _make():
            described = make_tidy_env(task, cfg)
            env = FrameCapture(described, getattr(described.describer, "views", None) or views)
            if cfg.curriculum.enabled:
                env = CurriculumStart(env, cfg.curriculum, seed=cfg.seed + rank)
            if cfg.demos:
                env = ExpertHook(env)
            if cfg.reward_source == "her":
                env = GoalTidyEnv(env)
            env.reset(seed=cfg.seed + rank)
            return Monitor(env)

        return _make

    vec_cls = SubprocVecEnv if cfg.vec_env == "subproc" and cfg.n_envs > 1 else DummyVecEnv
    venv = vec_cls([factory(i) for i in range(cfg.n_envs)])
    venv.seed(cfg.seed)
    if cfg.reward_source in ("blend", "clip"):  # clip: the blend, scored by the CLIP judge (TrainConfig.resolve)
        venv = LLMRewardVecEnv(venv, task.text, judge if judge is not None else make_judge(cfg.judge), cfg.reward)
    return venv


def find_blend(venv):
    """The BlendedReward inside a (possibly wrapped) VecEnv, or None for env-reward baselines."""
    while venv is not None:
        if isinstance(venv, LLMRewardVecEnv):
            return venv.blend
        venv = getattr(venv, "venv", None)
    return None
