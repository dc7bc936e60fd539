"""EpisodeRecorder: an SB3 callback that saves every N-th training episode of env 0 as an episode folder."""
from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

from robo_prm.replay.episode import EpisodeMeta, EpisodeWriter, StepRecord
from robo_prm.envs.task import Task
from robo_prm.train.envs import find_blend

log = logging.getLogger(__name__)


def step_record(t: int, action, info: dict, env_reward: float | None = None) -> StepRecord:
    """One StepRecord from a step's info (shared by training, eval and enjoy recordings)."""
    terms = info.get("reward_terms", {})
    return StepRecord(
        step=t,
        action=list(np.asarray(action, dtype=float).ravel()),
        env_reward=float(terms.get("term/env", env_reward if env_reward is not None else 0.0)),
        reward_terms=dict(terms),
        judgement=info.get("judgement"),
        description=info["description"].text if "description" in info else "",
        predicates=dict(info.get("predicates", {})),
        success=bool(info.get("is_success", False)),
        hazards_true=list(info.get("hazards", ())),
        rule_progress=getattr(info.get("description"), "rule_progress", None),
    )


def episode_meta(task: Task, run: str, algo: str, seed: int | None, env_steps: int) -> EpisodeMeta:
    return EpisodeMeta(
        task=task.name,
        goal=task.spec.goal,
        hazards=[h.text for h in task.spec.hazards],
        seed=seed,
        run=run,
        algo=algo,
        fps=25.0,
        env_steps=env_steps,
    )


def next_episode_index(out_dir: Path) -> int:
    """One past the highest ep_NNNN folder in out_dir (0 when there is none)."""
    found = [int(m.group(1)) for p in Path(out_dir).glob("ep_*") if (m := re.fullmatch(r"ep_(\d+)", p.name))]
    return max(found) + 1 if found else 0


class EpisodeRecorder(BaseCallback):
    """Records every `every`-th episode of env 0. A resumed run continues the counter past every folder
    already there (episodes recorded after the checkpoint it resumes from included): nothing is overwritten."""

    def __init__(self, out_dir: Path, task: Task, every: int, run: str, algo: str, explain: bool = True, start_index: int = 0):
        super().__init__()
        self.out_dir, self.task, self.every, self.run, self.algo, self.explain = Path(out_dir), task, every, run, algo, explain
        for stale in self.out_dir.glob(".ep_*.tmp-*"):  # a killed writer's half episode
            shutil.rmtree(stale, ignore_errors=True)
        self.episode_index = max(start_index, next_episode_index(self.out_dir))
        self.writer: EpisodeWriter | None = None

    def _maybe_start(self):
        if self.every <= 0 or self.episode_index % self.every != 0:
            self.training_env.env_method("set_capture", False, indices=[0])
            return
        frame = self.training_env.env_method("render", indices=[0])[0]
        meta = episode_meta(self.task, self.run, self.algo, None, self.num_timesteps)
        self.writer = EpisodeWriter(self.out_dir / f"ep_{self.episode_index:04d}", meta)
        self.writer.add_frame(frame)
        self.training_env.env_method("set_capture", True, indices=[0])
        blend = find_blend(self.training_env)
        if blend is not None and self.explain:
            blend.explain[0] = True

    def _on_training_start(self):
        self._maybe_start()

    def _on_step(self) -> bool:
        info = self.locals["infos"][0]
        done = bool(self.locals["dones"][0])
        if self.writer is not None and "frame" in info:
            self.writer.add_frame(info["frame"])
            self.writer.add_step(step_record(len(self.writer), self.locals["actions"][0], info))
        if done:
            if self.writer is not None:
                try:
                    self.writer.close()
                except Exception as exc:  # a recording must never stop training
                    log.warning("could not write episode %d: %s", self.episode_index, exc)
                self.writer = None
            self.episode_index += 1
            self._maybe_start()
        return True

    def _on_training_end(self):
        if self.writer is not None:
            self.writer.discard()  # an unfinished episode is not a recording
            self.writer = None
