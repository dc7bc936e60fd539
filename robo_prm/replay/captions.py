"""Pixel captions beside the state captions in the replay (`robo-prm replay EP --pixel_captions`): what the
perception model reads off each recorded frame, so a user sees where describing from pixels gets a scene wrong."""
from __future__ import annotations

import dataclasses

import cv2
import numpy as np

from robo_prm.replay.episode import Episode, EpisodeError


def add_pixel_captions(ep: Episode, weights: str | None = None, task: str | None = None, batch: int = 32,
                       caption_model: str | None = None) -> Episode:
    """`ep` with `pixel_captions`: the perception model (`weights`: a folder; null: the shipped one) describing each
    frame, resized to the model's frame size. `task`: the task file when the episode's task is not a shipped one.
    `caption_model`: a CoCa captioner folder whose captions are shown instead of the slot heads'."""
    from robo_prm.envs.task import load_task
    from robo_prm.perception.weights import load_perception

    try:
        t = load_task(task or ep.meta.task)
    except (FileNotFoundError, ValueError) as exc:
        raise EpisodeError(f"--pixel_captions: cannot load the episode's task {task or ep.meta.task!r} ({exc}); "
                           "give its file with --task") from None
    bundle = load_perception(weights)
    try:
        captioner = bundle.captioner(t, caption_model=caption_model)
    except (FileNotFoundError, ValueError) as exc:
        raise EpisodeError(f"--caption_model: {exc}") from None
    size, views = captioner.size, len(getattr(captioner, "views", ("front",)))
    h, w = ep.frames.shape[1:3]
    if w != views * h:
        raise EpisodeError(f"--pixel_captions: the perception model reads {'+'.join(captioner.views)} camera views side "
                           f"by side; the episode's frames are {w}×{h} (record them with --record.views "
                           f"{','.join(captioner.views)})")
    frames = np.stack([cv2.resize(f, (views * size, size), interpolation=cv2.INTER_AREA) if f.shape[:2] != (size, views * size)
                       else f for f in ep.frames])
    if getattr(captioner, "reads_previous", False):  # a motion model: each frame with the one before (the reset frame's
        before = np.concatenate([frames[:1], frames[:-1]])  # is its own: nothing has moved yet)
        describe = lambda i: captioner.describe(frames[i:i + batch], before[i:i + batch])  # noqa: E731
    else:
        describe = lambda i: captioner.describe(frames[i:i + batch])  # noqa: E731
    texts = [d.text for i in range(0, len(frames), batch) for d in describe(i)]
    return dataclasses.replace(ep, pixel_captions=texts)


def differing_sentences(state: str, pixels: str) -> int:
    """Sentences of the pixel caption the state caption does not have (the milestone line aside)."""
    def split(text: str) -> list[str]:
        return [s.strip() for s in text.replace("\n", " ").split(". ") if s.strip() and not s.startswith("Milestones")]

    have = {s.rstrip(".") for s in split(state)}
    return sum(s.rstrip(".") not in have for s in split(pixels))
