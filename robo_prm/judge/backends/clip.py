"""The CLIP judge backend (`judge.backend: clip`, what `--reward_source clip` uses): the VLM-RM-style baseline the
write-up's language reward is compared with. Progress is (cos + 1) / 2 of the cosine between the frame's CLIP image
embedding and the task's goal text, with confidence 1; there are no reasons and no hazard answers (hazards come from
the describe stage's checks — predicted from the frame in pixels mode).

The cosine is computed by the describe stage (the pixel captioner with `describe.goal_similarity`, one perception
model embedding both the frame and the goal) and carried in `SceneDescription.goal_similarity`; the judge reads it,
as it reads everything else, from the description.
"""
from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from robo_prm.judge.base import Scored
from robo_prm.judge.scoring import digits_around
from robo_prm.types import SceneDescription, TaskText


class ClipBackend:
    name = "clip"
    where = "SceneDescription.goal_similarity (the pixel captioner's CLIP model)"
    reads_text_only = False  # two frames with one caption score differently: ConfidentJudge must not reuse by text

    def score(self, task: TaskText, scenes: Sequence[SceneDescription], hazards: Sequence[str], explain: bool) -> list[Scored]:
        t0 = time.perf_counter()
        if any(s.goal_similarity is None for s in scenes):
            raise ValueError("judge.backend clip scores the frame's similarity to the goal and this scene has none: "
                             "describe from pixels with describe.goal_similarity (--reward_source clip sets both)")
        cos = np.array([float(s.goal_similarity) for s in scenes])
        if not np.isfinite(cos).all():  # the caller counts the error and the rules answer these scenes
            raise ValueError(f"judge.backend clip: a goal similarity is not finite ({cos.tolist()})")
        progress = np.clip((cos + 1.0) / 2.0, 0.0, 1.0)
        ms = (time.perf_counter() - t0) * 1e3 / max(len(scenes), 1)
        return [Scored(digits_around(float(p)), 1.0, {}, None, ms, progress=float(p)) for p in progress]

    def close(self) -> None:
        pass
