"""Choosing per-hazard thresholds for a trained perception folder (`robo-prm perception calibrate-hazards`): the heads'
probabilities on frames the model did not train on, and the choice written into the folder's config.json."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from robo_prm.perception.dataset import FrameSet, load_frames
from robo_prm.perception.train import hazard_columns, predict
from robo_prm.perception.weights import CONFIG_FILE, MANIFEST_FILE, _load

SPLITS = {"all": None, "heldout": True, "train": False}  # --split → load_frames(heldout=…)


def frames_for(bundle, data: str, split: str = "all") -> FrameSet:
    """The frames of `data` (comma-separated folders) that the model reads: its camera views, one split or all."""
    return load_frames(data, list(bundle.net.cfg.views), heldout=SPLITS[split])


def hazard_probs(bundle, frames) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(P(hazard) per frame and hazard head, truth (-1: not checked), the heads' keys) of a perception bundle on a
    FrameSet with the model's predicate columns."""
    keys = list(frames.meta["predicate_keys"])
    if keys != list(bundle.net.cfg.predicate_keys):
        raise ValueError(f"{frames.meta.get('folders') or 'the frames'}: other predicate columns than the model's")
    cols = hazard_columns(keys)
    logits = predict(bundle.net, frames.arrays["frames"])["preds"][:, cols]
    return 1 / (1 + np.exp(-logits)), frames.arrays["preds"][:, cols], [keys[c] for c in cols]


def write_thresholds(folder, per_key: dict[str, float], chosen_on: dict) -> None:
    """Store per-key thresholds in a perception folder's config.json (and how they were chosen in manifest.json)."""
    folder = Path(folder)
    cfg = json.loads((folder / CONFIG_FILE).read_text())
    cfg["hazard_thresholds"] = per_key
    (folder / CONFIG_FILE).write_text(json.dumps(cfg, indent=1))
    if (folder / MANIFEST_FILE).exists():
        manifest = json.loads((folder / MANIFEST_FILE).read_text())
        manifest["hazard_thresholds"] = {"values": per_key, **chosen_on}
        (folder / MANIFEST_FILE).write_text(json.dumps(manifest, indent=1))
    _load.cache_clear()
