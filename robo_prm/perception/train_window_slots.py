"""Add a window slot head (window_slots.py) to a perception folder with a keypoint head:
`robo-prm perception train-window-slots`.

Nothing else in the model changes: the keypoint head's coarse positions and the windows around them are computed
once per frame (train_refine.windows), and the head learns the READOUT_SLOTS' classes from all of a frame's windows
(cross-entropy per slot, slots that do not apply left out). Frames are drawn from the training rounds of each `--data`
folder; on the held-out rounds the manifest records each slot's accuracy from the windows alone.

`--motion true`: the head also reads the previous env step's frame at the same windows (folders collected with
`--previous true`); a share of the frames (`--drop_previous`) is shown without one, so that the head still reads a
frame that has none (an episode's first, or a step the describer did not plan for), and so are all the frames of
folders collected without them.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from robo_prm.config_flags import opt
from robo_prm.perception.dataset import load_frames
from robo_prm.perception.keypoints import READOUT_SLOTS
from robo_prm.perception.model import PerceptionNet
from robo_prm.perception.train_keypoints import labels, save_trained
from robo_prm.perception.train_refine import WindowTrainConfig, fit, prepared, windows
from robo_prm.provenance import provenance


@dataclass
class WindowSlotTrainConfig(WindowTrainConfig):
    out: str = opt("runs/perception_window_slots", "where the folder with the window slot head goes")
    batch: int = opt(256, "frames per step (each with all its windows)")
    motion: bool = opt(False, "also read the previous env step's frame (a new head; --data collected with --previous)")
    drop_previous: float = opt(0.2, "with --motion: share of training frames shown without their previous frame")


def frame_windows(net: PerceptionNet, folder: str, heldout: bool, n: int, rng: np.random.Generator
                  ) -> dict[str, torch.Tensor] | None:
    """Up to n frames of a folder's split → each frame's windows (N, V, P, 3, S, S) uint8 and its READOUT_SLOTS'
    classes (N, slots), -1 where a slot does not apply; for a motion head also the previous frame's windows at the same
    places ("previous"). None: the split has no frames."""
    frames = load_frames(folder, list(net.cfg.views), heldout=heldout)
    if not len(frames):
        return None
    frames = frames.subset(np.sort(rng.choice(len(frames), min(n, len(frames)), replace=False)))
    w = windows(net, frames.arrays["frames"], previous=frames.arrays.get("prev_frames") if net.reads_motion else None)
    rows = {"windows": torch.from_numpy(w["patches"]), "slots": labels(frames, list(net.cfg.views))["slots"]}
    if not net.reads_motion:
        return rows
    known = "previous_patches" in w  # a folder without previous frames: its windows stand in, never read
    return rows | {"previous": torch.from_numpy(w["previous_patches"] if known else w["patches"]),
                   "known": torch.full((len(rows["slots"]),), known)}


def slot_loss(out: dict[str, torch.Tensor], slots: torch.Tensor) -> torch.Tensor:
    """Σ over READOUT_SLOTS of the cross-entropy on the frames the slot applies to."""
    total = torch.zeros(())
    for j, name in enumerate(READOUT_SLOTS):
        m = slots[:, j] >= 0
        if m.any():
            total = total + F.cross_entropy(out[f"slot/{name}"][m], slots[m, j])
    return total


def accuracy(head, rows: dict[str, torch.Tensor], previous: bool = True) -> dict[str, dict]:
    """Per slot, on the frames it applies to: the share the windows alone read right (a motion head: with the
    previous frames if `previous`, else without)."""
    before = rows.get("previous") if previous else None
    known = rows.get("known", torch.ones(len(rows["slots"]), dtype=torch.bool))
    with torch.no_grad():
        parts = [head(rows["windows"][s:s + 256], None if before is None else before[s:s + 256],
                      None if before is None else known[s:s + 256]) for s in range(0, len(rows["slots"]), 256)]
    res = {}
    for j, name in enumerate(READOUT_SLOTS):
        guess, truth = torch.cat([p[f"slot/{name}"] for p in parts]).argmax(1), rows["slots"][:, j]
        m = truth >= 0
        if m.any():
            res[name] = {"accuracy": round(float((guess[m] == truth[m]).float().mean()), 4), "n": int(m.sum())}
    return res


def train_window_slots(cfg: WindowSlotTrainConfig, progress: bool = True, command: str = "") -> Path:
    """Write cfg.out: the init folder's model with a trained window slot head (its thresholds and manifest kept)."""
    bundle, net, train, held, windows_s = prepared(cfg, {"window_slots": True, "window_motion": cfg.motion},
                                                   "window_slots", frame_windows, "to read windows at")
    t0 = time.perf_counter()
    head = net.window_slots
    if cfg.motion and not train["known"].any():
        raise ValueError(f"--data {cfg.data}: no previous frames to learn motion from (collect with --previous true)")
    drop = torch.Generator().manual_seed(cfg.seed)

    def loss(i):
        if not cfg.motion:
            return slot_loss(head(train["windows"][i]), train["slots"][i])
        known = train["known"][i] & (torch.rand(len(i), generator=drop) >= cfg.drop_previous)
        return slot_loss(head(train["windows"][i], train["previous"][i], known), train["slots"][i])

    steps = fit(head, len(train["slots"]), loss, cfg, "train-window-slots", progress)
    report = {}
    if held is not None:
        report["heldout_accuracy"] = accuracy(head, held)
        if cfg.motion:
            report["heldout_accuracy_without_previous"] = accuracy(head, held, previous=False)
    return save_trained(bundle, net, cfg.out, "window_slots", {
        **provenance(command or None), "config": asdict(cfg), "frames": int(len(train["slots"])), "steps": steps,
        "seconds_windows": round(windows_s, 1), "seconds": round(windows_s + time.perf_counter() - t0, 1), **report})
