"""The keypoint head: camera geometry, the heatmap loss, captions from positions, and train-/calibrate-keypoints."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from robo_prm.perception.keypoints import CENTER, POINTS, KeypointHead, Triangulate, keypoint_loss, point_positions, project
from robo_prm.perception.placed import candidates, choose, decode_placed, placed_state, slot_log_probs
from robo_prm.perception.slots import decode, encode, slot_sizes
from robo_prm.describe.facts import scene_facts
from robo_prm.envs.tidy_env import VIEWS


def test_projection_and_triangulation_invert_each_other():
    rng = np.random.default_rng(0)
    points = np.stack([rng.uniform(1.05, 1.55, 300), rng.uniform(0.4, 1.1, 300), rng.uniform(0.4, 0.8, 300)], 1)
    uv = np.stack([project(points, v) for v in ("front", "side")])[None]  # (1, views, P, 2)
    back = Triangulate(["front", "side"]).double()(torch.tensor(uv))[0].numpy() / 100 + CENTER
    assert np.abs(back - points).max() < 1e-6


def test_projection_follows_the_camera():
    for view, cam in VIEWS.items():
        centre = project(cam["lookat"], view)
        above = project(cam["lookat"] + np.array([0, 0, 0.05]), view)
        assert np.abs(centre).max() < 1e-9  # the camera looks at its lookat point
        assert above[1] < -0.01  # higher in the world is higher in the image (smaller y)
    # the front camera looks along -x (azimuth 180): +y in the world (towards the tray, away from the blue bin) is to
    # the image's right, as the rendered frames show
    assert project(VIEWS["front"]["lookat"] + np.array([0, 0.1, 0]), "front")[0] > 0.01


def test_heatmap_loss_teaches_the_head_where_a_bright_cell_is():
    """Feature maps with one lit cell per point: after training, the soft-argmax finds each cell to within a cell."""
    torch.manual_seed(0)
    size, views = 8, ["front", "side"]
    head = KeypointHead(len(POINTS), size, views, width=16)
    opt = torch.optim.Adam(head.parameters(), lr=1e-2)

    def batch(n):
        cells = torch.randint(0, size, (n, len(views), len(POINTS), 2))
        maps = torch.zeros(n, len(views), len(POINTS), size, size)
        b, v, p = torch.meshgrid(torch.arange(n), torch.arange(len(views)), torch.arange(len(POINTS)), indexing="ij")
        maps[b, v, p, cells[..., 1], cells[..., 0]] = 1.0
        uv = (cells.float() + 0.5) / size * 2 - 1
        return maps, uv

    for _ in range(300):
        maps, uv = batch(32)
        out = head(maps)
        n = len(maps)
        terms = keypoint_loss(out, uv, torch.ones(n, len(views), len(POINTS), dtype=torch.bool),
                              out["positions"].detach(), torch.zeros(n, len(POINTS), dtype=torch.bool), size)
        opt.zero_grad()
        terms["image"].backward()
        opt.step()
    head.eval()
    maps, uv = batch(64)
    with torch.no_grad():
        err_cells = (head(maps)["uv"] - uv).abs().max(-1).values * size / 2
    assert float(err_cells.median()) < 0.5 and float((err_cells < 1).float().mean()) > 0.9


def _one_hot_logits(facts) -> dict[str, np.ndarray]:
    enc = encode(facts)
    out = {}
    for k, n in slot_sizes().items():
        x = np.zeros(n)
        if enc[k] >= 0:
            x[enc[k]] = 8.0
        out[k] = x
    return out


@pytest.mark.parametrize("task_name", ["reach_tool", "push_tool_from_edge", "place_cup_in_bin", "tidy_table"])
def test_true_positions_and_heads_give_the_state_captions_facts(make_env, task_name):
    """Along an expert episode: heads reading the true facts plus the true positions decode to exactly the state
    describer's facts (held, open, upright and moving carried over from the heads, the rest re-derived)."""
    from robo_prm.envs.experts import ScriptedExpert
    from robo_prm.envs.state import snapshot

    env = make_env(task_name, describe=False)
    task = env.unwrapped.task
    env.reset(seed=0)
    expert = ScriptedExpert(env, noise=0.05, seed=0)
    checked = 0
    for step in range(60):
        state = snapshot(env.unwrapped.model, env.unwrapped.data)
        truth = scene_facts(task.movable, state, None, (), task.carry_targets)
        positions = np.stack([state.gripper_pos] + [state.objects[s].pos for s in POINTS[1:]])
        assert decode_placed(_one_hot_logits(truth), positions, task.movable, None, task.carry_targets) == truth, step
        checked += 1
        _, _, term, trunc, _ = env.step(expert())
        if term or trunc:
            break
    assert checked >= 5


def test_choice_between_heads_and_positions():
    """Heads leaning to one gripper distance, every draw of the estimate giving another: weight 0 keeps the heads,
    a large weight the estimate."""
    from robo_prm.describe.facts import GripperFacts, SceneFacts
    from robo_prm.envs.task import load_task

    task = load_task("reach_tool")
    hammer = np.array([1.30, 0.75, 0.425])
    positions = np.stack([hammer + np.array([0.0, 0.12, 0.0])] + [hammer] * (len(POINTS) - 1))  # 12 cm from it
    nothing_held = SceneFacts(GripperFacts(True, None, None, None, None), ())
    truth = scene_facts(task.movable, placed_state(positions, nothing_held), None, (), task.carry_targets)
    assert truth.gripper.bucket == "15 cm"
    logits = _one_hot_logits(truth)
    logits["gripper.bucket"] = np.array([-4.0, -4.0, -4.0, 1.0, 0.0, -4.0, -4.0, -4.0])  # "10 cm" over "15 cm"
    heads = decode(logits, task.movable)
    assert heads.gripper.bucket == "10 cm"
    counts = candidates(heads, positions, task.movable, None, task.carry_targets, sigma=0.002, samples=16)
    assert choose(counts, slot_log_probs(logits), 0.0).gripper.bucket == "10 cm"
    assert choose(counts, slot_log_probs(logits), 10.0) == truth


def test_train_and_calibrate_keypoints_cli(tiny_two_view_model, tmp_path):
    """`train-keypoints` adds a head to a folder (its other weights unchanged), the folder loads and captions from
    the positions; `calibrate-keypoints` writes its choice; a folder without a head is a one-line error."""
    from robo_prm.cli import main
    from robo_prm.perception.dataset import CollectConfig, collect, load_frames
    from robo_prm.perception.weights import load_perception
    from robo_prm.envs.task import load_task

    data = tmp_path / "frames"
    collect(CollectConfig(tasks=["reach_tool"], frames=24, size=48, views=["front", "side"], stride=2, heldout_every=3,
                          max_steps=12, seed=7), data, progress=False)
    out = tmp_path / "with_head"
    assert main(["perception", "train-keypoints", "--data", str(data), "--init", str(tiny_two_view_model), "--out", str(out),
                 "--epochs", "1", "--batch", "8", "--width", "8", "--sigmas", "0.003", "--share_weights", "0,1"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest["keypoints"]["heldout_error"]) <= set(POINTS) and manifest["keypoints"]["decoding"]["frames"] > 0
    assert manifest["keypoints"]["decoding"]["chosen_on"] == f"{data} (heldout frames)"
    bundle, before = load_perception(out), load_perception(tiny_two_view_model)
    assert bundle.net.cfg.keypoint_blocks == 3 and bundle.net.cfg.keypoint_readout
    decoding = manifest["keypoints"]["decoding"]
    assert bundle.net.cfg.keypoint_slot_mix == decoding["slot_mix"] and len(decoding["readout_slots_right"]) == 5
    assert torch.equal(bundle.net.slots.weight, before.net.slots.weight)
    frames = load_frames(data).arrays["frames"][:3]
    with torch.no_grad():
        assert bundle.net(torch.from_numpy(frames).permute(0, 3, 1, 2).float())["positions"].shape == (3, len(POINTS), 3)
    text = bundle.captioner(load_task("reach_tool"))(frames[0]).text
    assert text.startswith("The gripper")
    other = bundle.captioner(load_task("place_cup_in_bin"))(frames[0])  # no heads for it: predicates on the estimate
    assert other.text.startswith("The gripper") and 0.0 <= other.rule_progress <= 1.0
    assert main(["perception", "calibrate-keypoints", "--weights", str(out), "--data", str(data), "--split", "all",
                 "--sigmas", "0.004", "--share_weights", "2"]) == 0
    assert json.loads((out / "config.json").read_text())["net"]["keypoint_sigma"] == 0.004
    with pytest.raises(SystemExit, match="no keypoint head"):
        main(["perception", "calibrate-keypoints", "--weights", str(tiny_two_view_model), "--data", str(data)])


def test_the_perception_benchmark_measures_position_errors_over_the_points_a_task_uses(load_benchmark):
    from types import SimpleNamespace

    b = load_benchmark("perception")
    rng = np.random.default_rng(0)
    state = rng.uniform(0.4, 1.4, (6, 25)).astype(np.float32)
    held = SimpleNamespace(arrays={"state": state, "task": np.array([0, 0, 0, 1, 1, 1])},
                           meta={"tasks": ["reach_tool", "tidy_table"], "views": ["front", "side"]})
    positions = point_positions(state) + np.array([0.0, 0.03, 0.04])  # 5 cm off everywhere
    r = b.position_errors({"positions": positions}, held)
    assert r["gripper"]["frames"] == 6 and r["tool0"]["frames"] == 6 and r["cup0"]["frames"] == 3  # reach: hammer only
    assert all(abs(v["median_cm"] - 5.0) < 1e-3 and abs(v["p90_cm"] - 5.0) < 1e-3 for v in r.values())


def test_search_counts_the_position_draws_that_state_a_caption():
    """Two frames the heads read alike (10 or 15 cm, undecided); their positions differ: each distance's caption
    finds the frame whose positions say it."""
    from types import SimpleNamespace

    from robo_prm.describe.facts import GripperFacts, SceneFacts
    from robo_prm.describe.render import render
    from robo_prm.perception.model import NetConfig
    from robo_prm.perception.retrieve import CaptionRetriever
    from robo_prm.envs.task import load_task

    task = load_task("reach_tool")
    hammer = np.array([1.30, 0.75, 0.425])
    nothing_held = SceneFacts(GripperFacts(True, None, None, None, None), ())
    frames, texts = [], []
    for gap in (0.12, 0.08):
        positions = np.stack([hammer + np.array([0.0, gap, 0.0])] + [hammer] * (len(POINTS) - 1))
        truth = scene_facts(task.movable, placed_state(positions, nothing_held), None, (), task.carry_targets)
        frames.append((positions, _one_hot_logits(truth)))
        texts.append(render(truth, task.word)[0])
    assert "15 cm" in texts[0] and "10 cm" in texts[1]
    outputs = {f"slot/{k}": np.stack([logits[k] for _, logits in frames]) for k in slot_sizes()}
    outputs["slot/gripper.bucket"][:, 3:5] = 0.0  # undecided between 10 and 15 cm
    outputs |= {"positions": np.stack([p for p, _ in frames]), "embed": np.zeros((2, 4)), "preds": np.zeros((2, 1))}
    net = SimpleNamespace(cfg=NetConfig(predicate_keys=[], keypoint_blocks=3))
    retriever = CaptionRetriever(net, outputs, ["reach_tool"] * 2)
    assert list(retriever.search(texts[0], 2)) == [0, 1] and list(retriever.search(texts[1], 2)) == [1, 0]
    plain = CaptionRetriever(net, {k: v for k, v in outputs.items() if k != "positions"}, ["reach_tool"] * 2)
    assert plain.log_likelihood(texts[0])[0] == plain.log_likelihood(texts[0])[1]  # the heads alone cannot tell


def test_caption_precision_benchmark_is_exact_without_noise_and_not_with_much(load_benchmark, tiny_data):
    from robo_prm.perception.dataset import load_frames
    from robo_prm.envs.task import load_task

    b = load_benchmark("caption_precision")
    frames = load_frames(tiny_data[0]).arrays
    tasks = [load_task(t) for t in tiny_data[1]["tasks"]]
    r = b.precision_table(frames["state"], frames["slots"], frames["task"], tasks, tiny_data[1]["slot_names"], [0.0, 0.1])
    assert r["0"]["all_slots_right"] == 1.0 and all(v == 1.0 for v in r["0"]["slot_accuracy"].values())
    assert r["0.1"]["all_slots_right"] < 0.5


def test_with_positions_replaces_only_the_points():
    rng = np.random.default_rng(1)
    state = rng.normal(size=25).astype(np.float32)
    positions = rng.normal(size=(len(POINTS), 3))
    from robo_prm.perception.keypoints import with_positions

    out = with_positions(state, positions)
    assert np.allclose(point_positions(out[None])[0], positions, atol=1e-6)
    moved = np.r_[0, 1, 2, [4 + 7 * i + k for i in range(3) for k in range(3)]]
    assert np.array_equal(np.delete(out, moved), np.delete(state, moved))


def test_weighted_triangulation_is_the_midpoint_with_both_rays_and_meets_the_height_with_one():
    rng = np.random.default_rng(1)
    points = np.stack([rng.uniform(1.05, 1.55, 50), rng.uniform(0.4, 1.1, 50), rng.uniform(0.4, 0.8, 50)], 1)
    uv = torch.tensor(np.stack([project(points, v) for v in ("front", "side")])[None])  # (1, views, P, 2)
    tri = Triangulate(["front", "side"]).double()
    both = tri.weighted(uv, torch.ones(1, 2, 50, dtype=torch.float64), torch.zeros(1, 50, dtype=torch.float64),
                        torch.zeros(50, dtype=torch.float64))
    assert (both - tri(uv)).abs().max() < 0.05  # cm: the ridge that keeps the solve defined pulls a fraction of a mm
    # only the side view trusted, a height prior 3 cm below the truth: the point on the side ray at that height
    height = torch.tensor((points[:, 2] - CENTER[2]) * 100 - 3.0)[None]
    one = tri.weighted(uv, torch.tensor([0.0, 1.0], dtype=torch.float64)[None, :, None].expand(1, 2, 50), height,
                       torch.full((50,), 10.0, dtype=torch.float64))[0].numpy() / 100 + CENTER
    assert np.abs(one[:, 2] - (points[:, 2] - 0.03)).max() < 1e-3
    assert np.abs(project(one, "side") - uv[0, 1].numpy()).max() < 1e-3  # still on the side camera's ray
    assert np.abs(one - points).max() > 0.02  # the front view would have said otherwise; it was not trusted


def _readout_net(mix: float):
    from robo_prm.perception.model import NetConfig, PerceptionNet

    torch.manual_seed(0)
    return PerceptionNet(NetConfig(size=32, trunk_blocks=4, views=["front", "side"], keypoint_blocks=3, keypoint_width=8,
                                   keypoint_readout=True, keypoint_slot_mix=mix), imagenet=False).eval()


def test_a_readout_adds_its_slot_logits_to_the_slot_heads():
    from robo_prm.perception.keypoints import READOUT_SLOTS

    images = torch.rand(2, 3, 32, 64)
    with torch.no_grad():
        alone, mixed = _readout_net(0.0)(images), _readout_net(1.0)(images)
        net = _readout_net(1.0)
        points = net.keypoints(net.per_frame(net.trunk.prefix(net.tiles(images), 3), 2))
    for name in READOUT_SLOTS:
        assert torch.allclose(mixed[f"slot/{name}"], alone[f"slot/{name}"] + points[f"slot/{name}"], atol=1e-5)
    assert torch.equal(mixed["slot/gripper.nearest"], alone["slot/gripper.nearest"])  # decided by positions, not read
    assert torch.allclose(mixed["positions"], alone["positions"])


def test_readout_losses_skip_what_does_not_apply():
    from robo_prm.perception.keypoints import READOUT_SLOTS

    torch.manual_seed(0)
    head = KeypointHead(24, 8, ["front", "side"], width=8, readout=True)
    out = head(torch.randn(4, 2, 24, 8, 8))
    uv, pos = torch.zeros(4, 2, len(POINTS), 2), torch.as_tensor(np.tile(CENTER, (4, len(POINTS), 1)), dtype=torch.float32)
    seen, used = torch.ones(4, 2, len(POINTS), dtype=torch.bool), torch.ones(4, len(POINTS), dtype=torch.bool)
    none = {k: torch.full((4,), -1) for k in READOUT_SLOTS}
    assert float(keypoint_loss(out, uv, seen, pos, used, 8, none)["slots"]) == 0.0
    some = dict(none, **{"gripper.opened": torch.tensor([1, -1, -1, -1])})
    expect = torch.nn.functional.cross_entropy(out["slot/gripper.opened"][:1], torch.tensor([1]))
    assert torch.isclose(keypoint_loss(out, uv, seen, pos, used, 8, some)["slots"], expect)
    # a point the task does not use: its views' visibility is not scored
    unused = used.clone()
    unused[:, 1:] = False
    vis = torch.nn.functional.binary_cross_entropy_with_logits(out["visible"][:, :, 0], torch.ones(4, 2))
    assert torch.isclose(keypoint_loss(out, uv, seen, pos, unused, 8, none)["visible"], vis)


def test_warm_start_keeps_the_trained_heatmaps_and_starts_a_new_readout():
    from robo_prm.perception.train_keypoints import _warm_start

    old, new = _readout_net(1.0), _readout_net(1.0)
    plain = KeypointHead(24, 8, ["front", "side"], width=8)
    old.keypoints = plain
    before = new.keypoints.readout.mlp[0].weight.clone()
    _warm_start(new, old)
    assert torch.equal(new.keypoints.heat.weight, plain.heat.weight)
    assert torch.equal(new.keypoints.readout.mlp[0].weight, before)
