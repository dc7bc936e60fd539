"""Heads on the keypoints' windows. The refiner: windows cut where the points are, an untrained refiner moves nothing,
training moves points to where the pixels say. The window slot head: untrained it changes no slot, trained it reads a
slot from the pixels, and a motion head reads `moving` from the previous frame. `train-refiner` and `train-window-slots`
add them to a folder."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch

from robo_prm.perception.keypoints import POINTS, READOUT_SLOTS
from robo_prm.perception.refine import PatchRefiner, crop_patches, output_pairs, refine_uv
from robo_prm.perception.train_refine import RefineTrainConfig, _fit, fit, pixel_errors
from robo_prm.perception.train_window_slots import WindowSlotTrainConfig, accuracy, slot_loss
from robo_prm.perception.window_slots import WindowSlotHead


def _lit(size: int, rows, cols) -> torch.Tensor:
    """(len, 3, size, size) tiles, each black with one white pixel."""
    tiles = torch.zeros(len(rows), 3, size, size)
    for k, (r, c) in enumerate(zip(rows, cols)):
        tiles[k, :, r, c] = 255.0
    return tiles


def _uv(size: int, rows, cols) -> torch.Tensor:
    """Pixel centres → keypoints.project's image coordinates (x right, y down, ±1 the frame's edges)."""
    return torch.tensor([[(c + 0.5) * 2 / size - 1, (r + 0.5) * 2 / size - 1] for r, c in zip(rows, cols)])


def test_windows_are_cut_around_each_point():
    size = 32
    tiles = _lit(size, [5, 20], [9, 30])  # one frame, two views
    uv = _uv(size, [5, 20], [9, 30]).reshape(1, 2, 1, 2).repeat(1, 1, 3, 1)  # three points on the lit pixel
    uv[0, 0, 1] += torch.tensor([2 * 2 / size, 0.0])  # point 1 of view 0 sits two pixels right of it
    patches = crop_patches(tiles, uv, patch=5)
    assert patches.shape == (1, 2, 3, 3, 5, 5)
    assert patches[0, 0, 0, 0, 2, 2] == 255 and patches[0, 0, 0].sum() == 3 * 255  # the window's centre, nothing else
    assert patches[0, 0, 1, 0, 2, 0] == 255  # seen two pixels left of that point's centre
    assert patches[0, 1, 2, 0, 2, 2] == 255  # the other view's own pixel, at the frame's right edge (zeros beyond)
    assert output_pairs(2, 2, 3).tolist() == [0, 1, 2, 3, 4, 5] * 2


def test_untrained_window_heads_change_nothing():
    """A refiner moves no point, a window slot head changes no slot's class probabilities."""
    from robo_prm.perception.model import NetConfig, PerceptionNet

    cfg = NetConfig(size=32, views=["front", "side"], hidden=16, embed_dim=8, keypoint_blocks=3, keypoint_width=8,
                    keypoint_readout=True)
    torch.manual_seed(0)
    plain = PerceptionNet(cfg, imagenet=False).eval()
    refined = PerceptionNet(replace(cfg, keypoint_refine=True, window_slots=True), imagenet=False).eval()
    motion = PerceptionNet(replace(cfg, keypoint_refine=True, window_slots=True, window_motion=True), imagenet=False).eval()
    assert not refined.load_state_dict(plain.state_dict(), strict=False).unexpected_keys
    assert not motion.load_state_dict(plain.state_dict(), strict=False).unexpected_keys
    images, previous = torch.rand(2, 3, 32, 64) * 255, torch.rand(2, 3, 32, 64) * 255
    with torch.no_grad():
        a, b = plain(images), refined(images)
        c, d = motion(images, previous), motion(images)
    assert torch.allclose(a["positions"], b["positions"])
    assert refined.refiner is not None and plain.refiner is None and plain.window_slots is None
    assert motion.reads_motion and not refined.reads_motion and not plain.reads_motion
    for k in (f"slot/{name}" for name in READOUT_SLOTS):
        for out in (b, c, d):
            assert torch.allclose(a[k].softmax(-1), out[k].softmax(-1), atol=1e-6)


def test_the_window_slot_head_reads_a_slot_from_the_pixels():
    """Gripper windows with a white pixel left of centre are 'open', right of it 'closed': the head learns it."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    n, patch = 256, 9
    opened = rng.integers(0, 2, n)
    windows = torch.zeros(n, 1, 2, 3, patch, patch, dtype=torch.uint8)  # one view, the gripper and one object
    windows[np.arange(n), 0, 0, :, 4, np.where(opened == 1, 2, 6)] = 255
    windows[:, 0, 1] = torch.randint(0, 256, (n, 3, patch, patch), dtype=torch.uint8)  # the object: noise
    slots = torch.full((n, len(READOUT_SLOTS)), -1, dtype=torch.long)
    slots[:, list(READOUT_SLOTS).index("gripper.opened")] = torch.from_numpy(opened)
    rows = {"windows": windows, "slots": slots}
    head = WindowSlotHead(views=1, points=2, width=8, feat=8, patch=patch)
    before = accuracy(head, rows)
    fit(head, n, lambda i: slot_loss(head(windows[i]), slots[i]), WindowSlotTrainConfig(epochs=30, batch=64), "test",
        progress=False)
    after = accuracy(head, rows)
    assert set(after) == {"gripper.opened"} and after["gripper.opened"]["n"] == n
    assert before["gripper.opened"]["accuracy"] < 0.65 < 0.95 < after["gripper.opened"]["accuracy"]


def test_a_motion_head_reads_moving_from_the_previous_frame():
    """Object windows with a white pixel that the previous frame shows 2 px away ('moving') or in the same place: the
    frame alone cannot tell them apart, the change can; without a previous frame the head reads the frame alone."""
    torch.manual_seed(0)
    rng = np.random.default_rng(1)
    n, patch = 384, 9
    moving = rng.integers(0, 2, n)
    r, c = rng.integers(2, 7, n), rng.integers(2, 7, n)
    windows = torch.zeros(n, 1, 1, 3, patch, patch, dtype=torch.uint8)  # one view, one point
    previous = torch.zeros_like(windows)
    windows[np.arange(n), 0, 0, :, r, c] = 255
    previous[np.arange(n), 0, 0, :, r, np.where(moving == 1, c - 2, c)] = 255
    slots = torch.full((n, len(READOUT_SLOTS)), -1, dtype=torch.long)
    slots[:, list(READOUT_SLOTS).index("tool0.moving")] = torch.from_numpy(moving)
    rows = {"windows": windows, "previous": previous, "known": torch.ones(n, dtype=torch.bool), "slots": slots}
    head = WindowSlotHead(views=1, points=1, width=8, feat=8, patch=patch, motion=True)
    drop = torch.Generator().manual_seed(0)

    def loss(i):
        known = torch.rand(len(i), generator=drop) >= 0.2
        return slot_loss(head(windows[i], previous[i], known), slots[i])

    fit(head, n, loss, WindowSlotTrainConfig(epochs=40, batch=64), "test", progress=False)
    seen, alone = accuracy(head, rows)["tool0.moving"], accuracy(head, rows, previous=False)["tool0.moving"]
    assert seen["n"] == alone["n"] == n
    assert alone["accuracy"] < 0.65 < 0.95 < seen["accuracy"]


def test_training_moves_points_to_where_the_pixels_are():
    """Windows around a white pixel, cut at coarse positions up to 3 px off: the refiner learns the offsets."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    size, n = 32, 256
    rows, cols = rng.integers(8, 24, n), rng.integers(8, 24, n)
    tiles = _lit(size, rows, cols)
    truth = _uv(size, rows, cols)
    coarse = truth + torch.tensor(rng.uniform(-3, 3, (n, 2)), dtype=torch.float32) * 2 / size
    refiner = PatchRefiner(views=1, points=1, width=8, patch=9)
    patches = crop_patches(tiles, coarse.reshape(n, 1, 1, 2), patch=9).reshape(n, 3, 9, 9)
    rows_ = {"patches": patches.round().to(torch.uint8), "uv": coarse, "pair": output_pairs(n, 1, 1),
             "delta": (truth - coarse) * size / 2, "seen": torch.ones(n, dtype=torch.bool)}
    before = pixel_errors(refiner, rows_)
    _fit(refiner, rows_, RefineTrainConfig(epochs=150, batch=64, lr=3e-3), progress=False)
    after = pixel_errors(refiner, rows_)
    assert before["refined_median_px"] == before["coarse_median_px"] > 1.5  # untrained: the coarse positions
    assert after["refined_median_px"] < 0.5 * before["coarse_median_px"]
    moved = refine_uv(refiner, tiles, coarse.reshape(n, 1, 1, 2)).reshape(n, 2)
    assert (moved - truth).norm(dim=-1).median() < 0.5 * (coarse - truth).norm(dim=-1).median()


def test_train_refiner_and_window_slots_cli_add_heads_and_keep_the_rest(tiny_two_view_model, tmp_path):
    from robo_prm.cli import main
    from robo_prm.perception.dataset import CollectConfig, collect, load_frames
    from robo_prm.perception.weights import load_perception
    from robo_prm.envs.task import load_task

    data = tmp_path / "frames"
    collect(CollectConfig(tasks=["reach_tool"], frames=24, size=48, views=["front", "side"], stride=2, heldout_every=3,
                          max_steps=12, seed=8), data, progress=False)
    head = tmp_path / "with_head"
    assert main(["perception", "train-keypoints", "--data", str(data), "--init", str(tiny_two_view_model), "--out",
                 str(head), "--epochs", "1", "--batch", "8", "--width", "8", "--sigmas", "0.003", "--share_weights", "1"]) == 0
    out = tmp_path / "refined"
    assert main(["perception", "train-refiner", "--data", str(data), "--init", str(head), "--out", str(out),
                 "--epochs", "1", "--batch", "16", "--frames", "12", "--sigmas", "0.002", "--share_weights", "1"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["refine"]["windows"] > 0 and manifest["refine"]["heldout_error"]["windows"] > 0
    assert "keypoints" in manifest and manifest["keypoints"]["decoding"]["chosen_on"] == f"{data} (heldout frames)"
    bundle, before = load_perception(out), load_perception(head)
    assert bundle.net.cfg.keypoint_refine and bundle.net.refiner is not None and bundle.net.cfg.keypoint_sigma == 0.002
    assert torch.equal(bundle.net.keypoints.heat.weight, before.net.keypoints.heat.weight)
    frames = load_frames(data).arrays["frames"][:2]
    with torch.no_grad():
        out_ = bundle.net(torch.from_numpy(frames).permute(0, 3, 1, 2).float())
    assert out_["positions"].shape == (2, len(POINTS), 3)
    assert bundle.captioner(load_task("reach_tool"))(frames[0]).text.startswith("The gripper")
    with pytest.raises(SystemExit, match="no keypoint head"):
        main(["perception", "train-refiner", "--data", str(data), "--init", str(tiny_two_view_model), "--out", str(tmp_path / "x")])

    both = tmp_path / "window_slots"
    assert main(["perception", "train-window-slots", "--data", str(data), "--init", str(out), "--out", str(both),
                 "--epochs", "1", "--batch", "4", "--frames", "12"]) == 0
    manifest = json.loads((both / "manifest.json").read_text())
    assert manifest["window_slots"]["frames"] > 0 and "gripper.held" in manifest["window_slots"]["heldout_accuracy"]
    assert "refine" in manifest
    bundle = load_perception(both)
    assert bundle.net.window_slots is not None and bundle.net.refiner is not None
    assert torch.equal(bundle.net.refiner.fc[-1].weight, load_perception(out).net.refiner.fc[-1].weight)
    assert bundle.captioner(load_task("reach_tool"))(frames[0]).text.startswith("The gripper")
    with pytest.raises(SystemExit, match="no keypoint head"):
        main(["perception", "train-window-slots", "--data", str(data), "--init", str(tiny_two_view_model), "--out",
              str(tmp_path / "y")])
    with pytest.raises(SystemExit, match="no previous frames"):
        main(["perception", "train-window-slots", "--data", str(data), "--init", str(out), "--out", str(tmp_path / "z"),
              "--motion", "true"])

    moving = tmp_path / "frames_previous"  # a motion head replaces the folder's window slot head; a folder without
    # previous frames adds frames read alone
    collect(CollectConfig(tasks=["reach_tool"], frames=24, size=48, views=["front", "side"], stride=2, heldout_every=3,
                          max_steps=12, seed=9, previous=True), moving, progress=False)
    motion = tmp_path / "motion"
    assert main(["perception", "train-window-slots", "--data", f"{moving},{data}", "--init", str(both), "--out", str(motion),
                 "--epochs", "1", "--batch", "4", "--frames", "12", "--motion", "true"]) == 0
    manifest = json.loads((motion / "manifest.json").read_text())["window_slots"]
    assert manifest["config"]["motion"] and "tool0.moving" in manifest["heldout_accuracy_without_previous"]
    bundle = load_perception(motion)
    assert bundle.net.reads_motion and bundle.net.window_slots.conv[0][0].in_channels == 7
    cap = bundle.captioner(load_task("reach_tool"))
    assert cap.reads_previous and cap(frames[1], frames[0]).text.startswith("The gripper")
