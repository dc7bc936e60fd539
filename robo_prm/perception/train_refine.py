"""Add a keypoint refiner (refine.py) to a perception folder with a keypoint head: `robo-prm perception train-refiner`.

Nothing else in the model changes: the keypoint head's coarse positions are computed once per frame (it stays
frozen), a window of the frame is cut around each, and the refiner learns the offset to where the camera projects
the simulator's position (labels from the frames' state vectors, as for the keypoint head). Frames are drawn from
the training rounds of each `--data` folder; the held-out rounds measure the pixel error before and after, and the
captions' decoding (placed.py's noise and weight) is chosen again on them, since finer positions want less noise
(`--choose_frames 0`: not here — when those rounds are frames a benchmark scores, choose it on other frames with
`calibrate-keypoints`).
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from robo_prm.config_flags import opt
from robo_prm.perception.backbone import to_tensor
from robo_prm.perception.budget import BudgetedCycle, interrupted, shuffled_batches, train_loop
from robo_prm.perception.dataset import load_frames
from robo_prm.perception.model import PerceptionNet
from robo_prm.perception.refine import crop_patches, output_pairs
from robo_prm.perception.train_keypoints import DecodingGrid, choose_decoding, labels, save_trained, write_decoding
from robo_prm.perception.weights import load_perception
from robo_prm.provenance import provenance


@dataclass
class WindowTrainConfig:
    """What a trainer of a head on the keypoints' windows (the refiner, the window slot head) reads and writes."""

    data: str = opt("data/perception", "folders written by `robo-prm perception collect` (comma-separated)")
    init: str | None = opt(None, "the perception folder (with a keypoint head) to add the head to (null: the shipped "
                           "model)")
    out: str = opt("runs/perception_windows", "where the folder with the new head goes")
    frames: int = opt(10000, "training frames drawn from each folder at most")
    heldout_frames: int = opt(3000, "held-out frames of all folders together at most, for the errors in the manifest")
    epochs: float = opt(6.0, "passes over the training windows")
    batch: int = opt(512, "windows per step")
    lr: float = opt(2e-3, "peak learning rate (AdamW, one-cycle)")
    threads: int = opt(1, "torch threads")
    seed: int = opt(0, "seed of the frames drawn, the initialisation and the batches")
    max_minutes: float = opt(0.0, "minutes of training steps at most (perception/budget.py; 0: the planned steps)")


@dataclass
class RefineTrainConfig(DecodingGrid, WindowTrainConfig):
    out: str = opt("runs/perception_refine", "where the folder with the refiner goes")
    window: float = opt(8.0, "pixels: a point further than this from its window's centre is left out of the loss")


def windows(net: PerceptionNet, frames: np.ndarray, batch: int = 64, previous: np.ndarray | None = None
            ) -> dict[str, np.ndarray]:
    """The keypoint head's coarse image coordinates (N, V, P, 2) and the frame's window around each (N, V, P, 3, S, S),
    uint8 — what the refiner and the window slot head read; with `previous` frames also their windows at the same
    places ("previous_patches", what a motion head reads)."""
    out: dict[str, list] = {"uv": [], "patches": []}
    as_uint8 = lambda t: t.round().clamp(0, 255).to(torch.uint8).numpy()  # noqa: E731
    with torch.no_grad():
        for s in range(0, len(frames), batch):
            tiles = net.tiles(to_tensor(frames[s:s + batch]))
            early = net.trunk.prefix(tiles, net.cfg.keypoint_blocks)
            coarse = net.keypoints(net.per_frame(early, len(tiles) // len(net.cfg.views)))["uv"]
            out["uv"].append(coarse.numpy())
            out["patches"].append(as_uint8(crop_patches(tiles, coarse)))
            if previous is not None:
                before = net.tiles(to_tensor(previous[s:s + batch]))
                out.setdefault("previous_patches", []).append(as_uint8(crop_patches(before, coarse)))
    return {k: np.concatenate(v) for k, v in out.items()}


def samples(net: PerceptionNet, folder: str, heldout: bool, n: int, rng: np.random.Generator
            ) -> dict[str, torch.Tensor] | None:
    """Up to n frames of a folder's split → one row per (frame, view, point): window, coarse uv, output pair, the offset to
    the true projection in pixels, and whether the point is in the frame. None: the split has no frames."""
    frames = load_frames(folder, list(net.cfg.views), heldout=heldout)
    if not len(frames):
        return None
    frames = frames.subset(np.sort(rng.choice(len(frames), min(n, len(frames)), replace=False)))
    w = windows(net, frames.arrays["frames"])
    lab = labels(frames, list(net.cfg.views))
    b, v, p = w["uv"].shape[:3]
    return {"patches": torch.from_numpy(w["patches"].reshape(b * v * p, *w["patches"].shape[3:])),
            "uv": torch.from_numpy(w["uv"].reshape(-1, 2)), "pair": output_pairs(b, v, p),
            "delta": (lab["uv"].reshape(-1, 2) - torch.from_numpy(w["uv"].reshape(-1, 2))) * (net.cfg.size / 2),
            "seen": lab["seen"].reshape(-1)}


def merged(parts: list[dict[str, torch.Tensor] | None]) -> dict[str, torch.Tensor] | None:
    parts = [p for p in parts if p is not None]
    return {k: torch.cat([p[k] for p in parts]) for k in parts[0]} if parts else None


def fit(module: torch.nn.Module, rows: int, batch_loss, cfg: WindowTrainConfig, desc: str, progress: bool) -> int:
    """Train `module` on `batch_loss(indices)` over `rows` rows: cfg.epochs passes, AdamW on a one-cycle schedule within
    cfg.max_minutes (Ctrl-C stops early and keeps what was learned); the steps taken."""
    opt_ = torch.optim.AdamW(module.parameters(), lr=cfg.lr, weight_decay=1e-4)
    steps = max(1, int(math.ceil(cfg.epochs * rows / cfg.batch)))
    cycle = BudgetedCycle(opt_, cfg.lr, steps, 0.1, cfg.max_minutes)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=steps, desc=desc, unit="step")
    module.train()
    try:
        for _, i in zip(train_loop(cycle), shuffled_batches(rows, cfg.batch, np.random.default_rng(cfg.seed))):
            loss = batch_loss(i)
            opt_.zero_grad()
            loss.backward()
            opt_.step()
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{float(loss.detach()):.3f}")
    except KeyboardInterrupt:
        interrupted(cycle, desc)
    module.eval()
    return cycle.taken


def _fit(refiner, rows: dict[str, torch.Tensor], cfg: RefineTrainConfig, progress: bool) -> int:
    keep = rows["seen"] & (rows["delta"].abs() < cfg.window).all(-1)  # a point far outside its window: not learnable
    rows = {k: v[keep] for k, v in rows.items()}

    def loss(i):
        pred = refiner(rows["patches"][i], rows["uv"][i], rows["pair"][i])
        return F.smooth_l1_loss(pred, rows["delta"][i], beta=0.25)  # pixels

    return fit(refiner, len(rows["pair"]), loss, cfg, "train-refiner", progress)


def pixel_errors(refiner, rows: dict[str, torch.Tensor]) -> dict:
    """On the windows of points in the frame: the coarse and the refined position's distance to the true projection,
    in pixels (median, and the share over 1 px)."""
    seen = rows["seen"]
    with torch.no_grad():
        pred = torch.cat([refiner(rows["patches"][s:s + 2048], rows["uv"][s:s + 2048], rows["pair"][s:s + 2048])
                          for s in range(0, len(seen), 2048)])
    coarse = rows["delta"][seen].norm(dim=-1)
    fine = (rows["delta"] - pred)[seen].norm(dim=-1)
    return {"windows": int(seen.sum()), "coarse_median_px": round(float(coarse.median()), 3),
            "refined_median_px": round(float(fine.median()), 3), "coarse_over_1px": round(float((coarse > 1).float().mean()), 4),
            "refined_over_1px": round(float((fine > 1).float().mean()), 4)}


def prepared(cfg: WindowTrainConfig, flags: dict, module: str, rows_of, what: str):
    """Shared start of the window trainers: the init folder's model with the head (NetConfig `flags` set: the net's
    `module`, the only weights the folder may lack — new, or the folder's own to train on where their shapes fit), and
    `rows_of(net, folder, heldout, n, rng)` over each --data folder's training and held-out rounds → (bundle, net,
    train rows, held-out rows or None, seconds spent)."""
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    bundle = load_perception(cfg.init)
    if bundle.net.keypoints is None:
        raise ValueError(f"{bundle.folder}: no keypoint head {what} (add one: robo-prm perception train-keypoints)")
    net = PerceptionNet(replace(bundle.net.cfg, **flags), imagenet=False)
    mine = net.state_dict()
    state = {k: v for k, v in bundle.net.state_dict().items()  # a head of another shape: trained afresh
             if not (k.startswith(f"{module}.") and (k not in mine or mine[k].shape != v.shape))}
    missing = [k for k in net.load_state_dict(state, strict=False).missing_keys if not k.startswith(f"{module}.")]
    if missing:
        raise ValueError(f"{bundle.folder}: weights lack {missing[:3]}")
    net.eval()
    t0 = time.perf_counter()
    rng = np.random.default_rng(cfg.seed)
    folders = [f for f in cfg.data.split(",") if f]
    train = merged([rows_of(net, f, False, cfg.frames, rng) for f in folders])
    if train is None:
        raise ValueError(f"--data {cfg.data}: no training frames")
    held = merged([rows_of(net, f, True, max(1, cfg.heldout_frames // len(folders)), rng) for f in folders])
    return bundle, net, train, held, time.perf_counter() - t0


def train_refiner(cfg: RefineTrainConfig, progress: bool = True, command: str = "") -> Path:
    """Write cfg.out: the init folder's model with a trained refiner (its thresholds and manifest kept)."""
    bundle, net, train, held, windows_s = prepared(cfg, {"keypoint_refine": True}, "refiner", samples, "to refine")
    t0 = time.perf_counter()
    steps = _fit(net.refiner, train, cfg, progress)
    errors = pixel_errors(net.refiner, held) if held is not None and held["seen"].any() else {}
    out = save_trained(bundle, net, cfg.out, "refine", {
        **provenance(command or None), "config": asdict(cfg), "windows": int(len(train["pair"])), "steps": steps,
        "seconds_windows": round(windows_s, 1), "seconds": round(windows_s + time.perf_counter() - t0, 1),
        "heldout_error": errors})
    if cfg.choose_frames > 0:  # 0: the folder keeps its decoding (calibrate-keypoints chooses one on other frames)
        choice = choose_decoding(net, load_frames(cfg.data, list(net.cfg.views), heldout=True), cfg)
        write_decoding(out, choice | {"chosen_on": f"{cfg.data} (heldout frames)"} if choice else choice)
    return out
