"""Add a keypoint head (keypoints.py) to a trained perception folder: `robo-prm perception train-keypoints`.

The rest of the model is left as it is: the head reads the trunk's first `blocks` blocks, which every shipped
model keeps frozen at their ImageNet weights, so their output is computed once per frame (fp16) and the other heads'
outputs do not change. Labels need no new collection: the frames' state vectors hold every point's position, and
the env's cameras say where each lands in the image.
"""
from __future__ import annotations

import json
import logging
import math
import shutil
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch

from robo_prm.config_flags import opt
from robo_prm.perception.budget import BudgetedCycle, interrupted, shuffled_batches, train_loop
from robo_prm.perception.dataset import FrameSet, load_frames
from robo_prm.perception.keypoints import POINTS, READOUT_SLOTS, keypoint_loss, point_positions, project
from robo_prm.perception.model import PerceptionNet
from robo_prm.perception.train import _Prefix, precompute, predict
from robo_prm.perception.weights import CONFIG_FILE, MANIFEST_FILE, load_perception, save_perception
from robo_prm.envs.task import load_task
from robo_prm.provenance import provenance

log = logging.getLogger(__name__)


@dataclass
class DecodingGrid:
    """What `choose_decoding` tries: how captions weigh a keypoint head's positions against the slot heads."""

    sigmas: list[float] = opt([0.002, 0.003, 0.005], "position noise (m) of the caption's candidate draws to choose from "
                              "(placed.py)")
    share_weights: list[float] = opt([0.0, 0.5, 1.0, 2.0, 4.0], "weights of the draws' share against the slot heads to "
                                     "choose from (0: the heads alone)")
    choose_frames: int = opt(3000, "held-out frames the choice reads (at most, evenly spaced; 0: no choice, the folder "
                             "keeps its decoding — choose it on other frames with calibrate-keypoints)")
    slot_mixes: list[float] = opt([0.0, 0.5, 1.0, 2.0, 4.0], "weights of a readout's slot logits beside the slot heads' "
                                  "to choose from (keypoints.READOUT_SLOTS; 0: the heads alone)")


@dataclass
class KeypointTrainConfig(DecodingGrid):
    data: str = opt("data/perception", "folders written by `robo-prm perception collect` (comma-separated)")
    init: str | None = opt(None, "the perception folder to add the head to (null: the shipped model)")
    out: str = opt("runs/perception_keypoints", "where the folder with the head goes")
    blocks: int = opt(3, "the head reads the trunk after this many blocks (3: stride 4, 24 channels)")
    width: int = opt(48, "channels of the head's convolutions")
    epochs: float = opt(6.0, "passes over the training frames")
    batch: int = opt(128, "frames per step")
    lr: float = opt(2e-3, "peak learning rate (AdamW, one-cycle)")
    space_weight: float = opt(0.2, "weight of the 3D position and height losses beside the image loss")
    readout: bool = opt(True, "the head also reads each view's visibility, each point's height and the slots at the "
                        "points (keypoints.READOUT_SLOTS)")
    warm: bool = opt(True, "start from the init folder's keypoint head where it has one (same blocks and width)")
    threads: int = opt(1, "torch threads")
    seed: int = opt(0, "seed of the initialisation and the batches")
    max_minutes: float = opt(0.0, "minutes of training steps at most: the learning-rate cycle is fitted into them "
                              "(perception/budget.py; 0: the planned steps)")


def labels(frames: FrameSet, views: list[str]) -> dict[str, torch.Tensor]:
    """Per frame: each point's position (P, 3), whether the frame's task uses it (P), its image coordinates in each
    view (V, P, 2), whether it lands inside that view (V, P), and the READOUT_SLOTS' classes (-1: does not apply)."""
    tasks = [load_task(t) for t in frames.meta["tasks"]]
    pos = point_positions(frames.arrays["state"])
    used = np.ones(pos.shape[:2], bool)
    for i, sim in enumerate(POINTS[1:]):
        used[:, 1 + i] = [sim in tasks[t].movable for t in frames.arrays["task"]]
    uv = np.stack([project(pos, v) for v in views], 1)
    seen = used[:, None] & (np.abs(uv) < 1).all(-1)
    names = list(frames.meta.get("slot_names", []))  # frames without slot labels: none apply
    slots = np.stack([frames.arrays["slots"][:, names.index(k)] if k in names else np.full(len(pos), -1)
                      for k in READOUT_SLOTS], 1)
    return {"positions": torch.tensor(pos, dtype=torch.float32), "used": torch.tensor(used),
            "uv": torch.tensor(uv, dtype=torch.float32), "seen": torch.tensor(seen),
            "slots": torch.tensor(slots, dtype=torch.long)}


def _features(net: PerceptionNet, data: str, heldout: bool, blocks: int, progress: bool) -> tuple[torch.Tensor, dict]:
    """Frozen prefix maps and labels, one folder at a time (frames are gigabytes; their maps are kept instead)."""
    prefix = _Prefix(net, blocks).eval()
    maps, labs = [], []
    for folder in [f for f in data.split(",") if f]:
        frames = load_frames(folder, list(net.cfg.views), heldout=heldout)
        if len(frames):
            maps.append(precompute(prefix, frames.arrays["frames"], progress=progress))
            labs.append(labels(frames, list(net.cfg.views)))
    if not maps:
        return torch.zeros(0), {}
    return torch.cat(maps), {k: torch.cat([lab[k] for lab in labs]) for k in labs[0]}


def _warm_start(net: PerceptionNet, trained: PerceptionNet) -> None:
    """Copy the trained head's weights that fit the new head (a readout, if new, starts fresh)."""
    mine = net.keypoints.state_dict()
    fits = {k: v for k, v in trained.keypoints.state_dict().items() if k in mine and mine[k].shape == v.shape}
    net.keypoints.load_state_dict(fits, strict=False)
    log.info("keypoint head: %d of %d tensors from the trained head", len(fits), len(mine))


def point_errors(net: PerceptionNet, maps: torch.Tensor, lab: dict) -> dict:
    """Median and mean 3D error (cm) per point over the points the frames' tasks use."""
    with torch.no_grad():
        pos = torch.cat([net.keypoints(maps[i:i + 512].float())["positions"] for i in range(0, len(maps), 512)])
    err = (pos - lab["positions"]).norm(dim=-1) * 100
    out = {}
    for j, name in enumerate(POINTS):
        e = err[:, j][lab["used"][:, j]]
        if len(e):
            out[name] = {"median_cm": round(float(e.median()), 3), "mean_cm": round(float(e.mean()), 3), "n": len(e)}
    return out


def _fit(net: PerceptionNet, maps: torch.Tensor, lab: dict, cfg: KeypointTrainConfig, progress: bool) -> int:
    head = net.keypoints
    opt_ = torch.optim.AdamW(head.parameters(), lr=cfg.lr, weight_decay=1e-4)
    steps = max(1, int(math.ceil(cfg.epochs * len(maps) / cfg.batch)))
    cycle = BudgetedCycle(opt_, cfg.lr, steps, 0.15, cfg.max_minutes)  # the budget shortens the cycle, not cuts it
    rng = np.random.default_rng(cfg.seed)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=steps, desc="keypoints", unit="step")
    head.train()
    try:
        for _, idx in zip(train_loop(cycle), shuffled_batches(len(maps), cfg.batch, rng)):
            out = head(maps[idx].float())
            slots = {k: lab["slots"][idx, j] for j, k in enumerate(READOUT_SLOTS)}
            terms = keypoint_loss(out, lab["uv"][idx], lab["seen"][idx], lab["positions"][idx], lab["used"][idx],
                                  head.size, slots)
            loss = sum(v * (cfg.space_weight if k in ("space", "height") else 1.0) for k, v in terms.items())
            opt_.zero_grad()
            loss.backward()
            opt_.step()
            if bar is not None:
                bar.update(1)
                bar.set_postfix({k: f"{float(v.detach()):.3f}" for k, v in terms.items()})
    except KeyboardInterrupt:
        interrupted(cycle, "train-keypoints")
    head.eval()
    return cycle.taken


def frame_inputs(frames: FrameSet, idx: np.ndarray) -> dict[str, np.ndarray | None]:
    """predict()'s frames and previous frames (where collected) for frames[idx]."""
    before = frames.arrays.get("prev_frames")
    return {"frames": frames.arrays["frames"][idx], "previous": None if before is None else before[idx]}


def choose_decoding(net: PerceptionNet, frames: FrameSet, cfg: DecodingGrid) -> dict:
    """The (sigma, weight) of placed.py whose captions get every slot right on the most held-out frames (up to
    `choose_frames`, evenly spaced), with the heads alone and the estimate alone beside them for the record."""
    from robo_prm.perception.placed import candidates, choose, slot_log_probs
    from robo_prm.perception.slots import decode, encode

    if not len(frames) or cfg.choose_frames <= 0:
        return {}
    idx = np.linspace(0, len(frames) - 1, min(cfg.choose_frames, len(frames))).astype(int)
    mix = choose_slot_mix(net, frames, idx, cfg.slot_mixes) if net.cfg.keypoint_readout else {}
    out = predict(net, **frame_inputs(frames, idx))
    tasks = [load_task(t) for t in frames.meta["tasks"]]
    names = [k for k in frames.meta["slot_names"] if f"slot/{k}" in out]
    truth = frames.arrays["slots"][idx][:, [frames.meta["slot_names"].index(k) for k in names]]

    def right(f, j) -> bool:
        enc = encode(f)
        return all(t < 0 or enc[k] == t for k, t in zip(names, truth[j]))

    score = {"heads": 0, "estimate": 0, **{f"sigma={s} weight={w}": 0 for s in cfg.sigmas for w in cfg.share_weights}}
    for j in range(len(idx)):
        task = tasks[frames.arrays["task"][idx[j]]]
        logits = {k: out[f"slot/{k}"][j] for k in names}
        ms = (int(frames.arrays["milestones"][idx[j]]), len(task.milestone_checks)) if task.milestone_checks else None
        heads = decode(logits, task.movable, ms, task.carry_targets)
        score["heads"] += right(heads, j)
        logp = slot_log_probs(logits)
        for s in cfg.sigmas:
            counts = candidates(heads, out["positions"][j], task.movable, ms, task.carry_targets, s,
                                net.cfg.keypoint_samples)
            score["estimate"] += right(next(iter(counts)), j) if s == cfg.sigmas[0] else 0  # the first draw: no noise
            for w in cfg.share_weights:
                score[f"sigma={s} weight={w}"] += right(choose(counts, logp, w), j)
    best = max(((s, w) for s in cfg.sigmas for w in cfg.share_weights), key=lambda sw: score[f"sigma={sw[0]} weight={sw[1]}"])
    return {"sigma": best[0], "weight": best[1], "frames": len(idx),
            "all_slots_right": {k: round(v / len(idx), 4) for k, v in score.items()}, **mix}


def choose_slot_mix(net: PerceptionNet, frames: FrameSet, idx: np.ndarray, mixes: list[float]) -> dict:
    """The `keypoint_slot_mix` whose READOUT_SLOTS are right most often on frames[idx] (set on `net`), with each
    mix's accuracy for the record."""
    net.cfg.keypoint_slot_mix = 0.0
    heads = predict(net, **frame_inputs(frames, idx))
    net.cfg.keypoint_slot_mix = 1.0
    both = predict(net, **frame_inputs(frames, idx))
    names = list(frames.meta["slot_names"])
    right = {}
    for m in mixes:
        hits = total = 0
        for k in (k for k in READOUT_SLOTS if k in names):  # older collections may lack a slot
            truth = frames.arrays["slots"][idx, names.index(k)]
            guess = (heads[f"slot/{k}"] + m * (both[f"slot/{k}"] - heads[f"slot/{k}"])).argmax(1)
            hits, total = hits + int(((guess == truth) & (truth >= 0)).sum()), total + int((truth >= 0).sum())
        right[m] = hits / max(total, 1)
    net.cfg.keypoint_slot_mix = max(mixes, key=lambda m: right[m])
    return {"slot_mix": net.cfg.keypoint_slot_mix, "readout_slots_right": {str(m): round(a, 4) for m, a in right.items()}}


def train_keypoints(cfg: KeypointTrainConfig, progress: bool = True, command: str = "") -> Path:
    """Write cfg.out: the init folder's model with a trained keypoint head (its thresholds and manifest kept)."""
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    bundle = load_perception(cfg.init)
    if bundle.net.cfg.keypoint_blocks:
        log.warning("%s already has a keypoint head: %s", bundle.folder,
                    "training on from it" if cfg.warm else "training a new one (--warm false)")
    for head, command in ((bundle.net.refiner, "train-refiner"), (bundle.net.window_slots, "train-window-slots")):
        if head is not None:  # it learned on windows at the old head's positions: mostly still right, but not measured
            log.warning("%s has a %s head, kept as trained on windows at the old head's positions: run %s again",
                        bundle.folder, command.removeprefix("train-"), command)
    net = PerceptionNet(replace(bundle.net.cfg, keypoint_blocks=cfg.blocks, keypoint_width=cfg.width,
                                keypoint_readout=cfg.readout), imagenet=False)
    kept = {k: v for k, v in bundle.net.state_dict().items() if not k.startswith("keypoints.")}
    missing = [k for k in net.load_state_dict(kept, strict=False).missing_keys if not k.startswith("keypoints.")]
    if missing:
        raise ValueError(f"{bundle.folder}: weights lack {missing[:3]}")
    if cfg.warm and bundle.net.keypoints is not None:
        _warm_start(net, bundle.net)
    t0 = time.perf_counter()
    maps, lab = _features(net, cfg.data, False, cfg.blocks, progress)
    if not len(maps):
        raise ValueError(f"--data {cfg.data}: no training frames")
    held_maps, held_lab = _features(net, cfg.data, True, cfg.blocks, progress)
    prefix_s = time.perf_counter() - t0
    steps, n_train = _fit(net, maps, lab, cfg, progress), len(maps)
    errors = point_errors(net, held_maps, held_lab) if len(held_maps) else {}
    del maps, held_maps
    out = save_trained(bundle, net, cfg.out, "keypoints", {
        **provenance(command or None), "config": asdict(cfg), "train_frames": n_train, "steps": steps,
        "seconds_frozen_trunk": round(prefix_s, 1), "seconds": round(time.perf_counter() - t0, 1), "heldout_error": errors})
    choice = choose_decoding(net, load_frames(cfg.data, list(net.cfg.views), heldout=True), cfg)
    write_decoding(out, choice | {"chosen_on": f"{cfg.data} (heldout frames)"} if choice else choice)
    return out


def save_trained(bundle, net: PerceptionNet, out, key: str, entry: dict) -> Path:
    """Write `net` to `out` as a copy of its init folder (`bundle`): the folder's per-hazard thresholds, other config
    keys and manifest kept, the manifest's `key` set to `entry`."""
    out = Path(out)
    if out.resolve() != Path(bundle.folder).resolve():
        shutil.copytree(bundle.folder, out, dirs_exist_ok=True)
    extra = {k: v for k, v in _config(out).items() if k not in ("net", "hazard_threshold", "cached_texts")}
    base = bundle.hazard_threshold.get("*", 0.5) if isinstance(bundle.hazard_threshold, dict) else bundle.hazard_threshold
    save_perception(out, net, bundle.text, dict(bundle.manifest or {}) | {key: entry}, base,
                    cache_texts=[load_task(t).spec.goal for t in net.cfg.tasks])
    _write_config(out, _config(out) | extra)
    return out


def write_decoding(folder, choice: dict) -> None:
    """Store a `choose_decoding` result in a folder: its config's net fields and its manifest's keypoints entry
    (an empty choice — no held-out frames — keeps the defaults)."""
    folder = Path(folder)
    if choice:
        cfg = _config(folder)
        cfg["net"] |= {"keypoint_sigma": choice["sigma"], "keypoint_weight": choice["weight"]}
        if "slot_mix" in choice:
            cfg["net"]["keypoint_slot_mix"] = choice["slot_mix"]
        _write_config(folder, cfg)
    manifest = json.loads((folder / MANIFEST_FILE).read_text()) if (folder / MANIFEST_FILE).exists() else {}
    manifest.setdefault("keypoints", {})["decoding"] = choice
    (folder / MANIFEST_FILE).write_text(json.dumps(manifest, indent=1))
    from robo_prm.perception import weights as _w

    _w._load.cache_clear()


def _config(folder: Path) -> dict:
    return json.loads((folder / CONFIG_FILE).read_text())


def _write_config(folder: Path, cfg: dict) -> None:
    (folder / CONFIG_FILE).write_text(json.dumps(cfg, indent=1))
