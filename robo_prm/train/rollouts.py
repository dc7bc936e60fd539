"""Run a policy for N seeded episodes: success, return, hazard events; optionally judged and recorded."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from robo_prm.config import TrainConfig
from robo_prm.envs.goal_env import GoalView
from robo_prm.envs.rollout import Step, rollout
from robo_prm.replay.episode import EpisodeWriter
from robo_prm.reward import LLMRewardWrapper
from robo_prm.envs.task import Task
from robo_prm.train.envs import make_tidy_env
from robo_prm.train.recorder import episode_meta, step_record


@dataclass
class EpisodeResult:
    seed: int
    success: bool
    env_return: float
    hazard_events: int  # hazard onsets (a hazard switching on), per the task's hazard checks
    steps: int
    hazard_steps: int = 0  # steps on which any hazard check held (including hazards present from the start)
    path: str | None = None


def hazard_onsets(hazards_per_step: list[tuple], initial: tuple = ()) -> int:
    """How often a hazard switches on during the episode; hazards already present at the start
    state (a tool placed at the edge by the task) are not the policy's doing."""
    prev: set = set(initial)
    n = 0
    for h in hazards_per_step:
        n += len(set(h) - prev)
        prev = set(h)
    return n


class TrainedPolicy:
    """A trained SB3 model as a rollout policy (`robo_prm.envs.rollout`): its deterministic action. `view` maps the
    tidy env's observation to the model's (a HER model's goal Dict: `goal_view`)."""

    def __init__(self, model, view: Callable | None = None):
        self.model, self.view = model, view

    def __call__(self, obs) -> np.ndarray:
        return self.model.predict(self.view(obs) if self.view is not None else obs, deterministic=True)[0]


def goal_view(cfg: TrainConfig, task: Task) -> Callable | None:
    """The observation map of a `reward_source: her` policy (None for every other)."""
    return GoalView(task).observation if cfg.reward_source == "her" else None


def env_reward(info: dict, reward: float) -> float:
    """The environment's own reward of a step (the blended reward's env term when a judge wraps the env)."""
    return float(info.get("reward_terms", {}).get("term/env", reward))


def _record(writer: EpisodeWriter, env, step: Step) -> None:
    writer.add_frame(env.render())
    if step.t > 0:
        writer.add_step(step_record(step.t - 1, step.action, step.info, env_reward(step.info, step.reward)))


def run_episodes(
    policy: Callable[[np.ndarray], np.ndarray],
    task: Task,
    cfg: TrainConfig,
    seeds: Sequence[int],
    judge=None,
    record_dir: Path | None = None,
    n_record: int = 0,
    run: str = "",
    env_steps: int = 0,
    prefix: str = "ep",
) -> list[EpisodeResult]:
    """One episode per seed; the first n_record are judged with reasons and written to record_dir/{prefix}_{k:04d}."""
    render = record_dir is not None and n_record > 0
    env = make_tidy_env(task, cfg, render=render, reward_mode="sparse")
    judged = LLMRewardWrapper(env, judge, cfg.reward, task.text) if (judge is not None and render) else None
    results = []
    try:
        for k, seed in enumerate(seeds):
            recording = render and k < n_record
            e = judged if (recording and judged is not None) else env
            if judged is not None:
                judged.blend.explain[0] = recording
            writer = None
            if recording:
                writer = EpisodeWriter(record_dir / f"{prefix}_{k:04d}", episode_meta(task, run, cfg.algo, seed, env_steps), overwrite=True)
            ep = rollout(e, policy, seed, on_step=(lambda step, w=writer: _record(w, env, step)) if writer is not None else None)
            hazards = [tuple(info.get("hazards", ())) for info in ep.infos[1:]]
            ret = sum(env_reward(info, r) for info, r in zip(ep.infos[1:], ep.rewards))
            path = str(writer.close()) if writer is not None else None
            results.append(EpisodeResult(seed, ep.success, ret, hazard_onsets(hazards, tuple(ep.infos[0].get("hazards", ()))),
                                         ep.steps, sum(1 for h in hazards if h), path))
    finally:
        env.close()
    return results


def summarize(results: list[EpisodeResult]) -> dict[str, float]:
    return {
        "episodes": len(results),
        "success_rate": float(np.mean([r.success for r in results])) if results else 0.0,
        "mean_return": float(np.mean([r.env_return for r in results])) if results else 0.0,
        "hazard_events_per_episode": float(np.mean([r.hazard_events for r in results])) if results else 0.0,
        "mean_length": float(np.mean([r.steps for r in results])) if results else 0.0,
    }
