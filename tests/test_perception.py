"""Perception from pixels: slots cover every caption, collect → train → embed → caption on tiny data,
CLIP shapes and normalisation, the BLIP loader on a tiny random BLIP, pixels-only SB3 training.

Models here are tiny and built in-process (a 1-layer BERT text tower, 64-px frames, a few steps);
no network. The shipped weights are checked only for loading and shapes."""
from __future__ import annotations

from dataclasses import replace

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from robo_prm.describe.facts import scene_facts  # noqa: E402
from robo_prm.describe.render import render  # noqa: E402
from robo_prm.perception.slots import decode, encode, expressible, slot_names, slot_sizes, state_from_vector, state_vector  # noqa: E402
from robo_prm.describe.state_captioner import StateCaptioner  # noqa: E402
from robo_prm.envs.experts import ScriptedExpert  # noqa: E402

TASKS = ["reach_tool", "place_cup_in_bin"]


def _one_hot_logits(enc: dict[str, int], carried: bool = True) -> dict[str, np.ndarray]:
    out = {}
    for name, n in slot_sizes(carried).items():
        v = np.zeros(n)
        if enc[name] >= 0:
            v[enc[name]] = 5.0
        out[name] = v
    return out


@pytest.mark.parametrize("task", ["tidy_table", "place_cup_in_bin", "push_tool_from_edge"])
def test_slots_encode_every_caption(make_env, task):
    """State → facts → class indices → facts → text gives back the state caption, step by step of
    a perturbed expert episode: the heads' label space can say everything the state captioner says; a model without
    the carried slots' heads says all but a carried object's edge and target clauses (`expressible`)."""
    env = make_env(task)
    u = env.unwrapped
    cap = StateCaptioner(u.task)
    obs, _ = env.reset(seed=3)
    expert = ScriptedExpert(env, noise=0.2, perturb=0.2, seed=3)
    carried_clauses = 0
    for t in range(120):
        facts = cap.facts(u.scene_state)
        ms = (facts.milestones_reached, facts.milestones_total)
        back = decode(_one_hot_logits(encode(facts)), u.task.movable, ms, u.task.carry_targets)
        assert render(back, u.task.word)[0] == render(facts, u.task.word)[0]
        assert back == facts
        older = decode(_one_hot_logits(encode(facts), carried=False), u.task.movable, ms, u.task.carry_targets)
        assert older == expressible(facts)
        carried_clauses += older != facts
        obs, _, term, trunc, _ = env.step(expert(obs))
        if term or trunc:
            break
    if task != "push_tool_from_edge":  # place and tidy carry an object toward its container
        assert carried_clauses > 0


def test_state_vector_round_trip(make_env):
    env = make_env("tidy_table")
    env.reset(seed=0)
    s = env.unwrapped.scene_state
    back = state_from_vector(state_vector(s))
    assert np.allclose(back.gripper_pos, s.gripper_pos, atol=1e-6)
    task = env.unwrapped.task
    assert task.status(back).hazards == task.status(s).hazards
    assert scene_facts(task.movable, back).objects == scene_facts(task.movable, s).objects


# ---- a tiny pipeline: collect → train → load → embed → caption (fixtures: tests/conftest.py) -----------------
def test_collect_writes_labelled_shards(tiny_data):
    from robo_prm.perception.dataset import load_frames

    folder, meta = tiny_data
    fs = load_frames(folder)
    n = meta["frames"]
    assert n == 40 and len(fs) == n and meta["splits"]["heldout"] > 0 and meta["splits"]["train"] > 0
    a = fs.arrays
    assert a["frames"].shape == (n, 64, 64, 3) and a["frames"].dtype == np.uint8
    assert a["slots"].shape == (n, len(slot_names())) and a["preds"].shape == (n, len(meta["predicate_keys"]))
    assert set(a["task"]) == {0, 1} and all(c.startswith("The gripper is") for c in a["caption"])
    # held-out is by episode: no episode in both splits
    assert not set(a["episode"][a["heldout"]]) & set(a["episode"][~a["heldout"]])
    # a task's predicate columns are set, the other task's are -1
    keys = meta["predicate_keys"]
    reach = [i for i, k in enumerate(keys) if k.startswith("reach_tool:")]
    assert (a["preds"][a["task"] == 0][:, reach] >= 0).all() and (a["preds"][a["task"] == 1][:, reach] == -1).all()


def test_collect_keeps_the_previous_frame_and_a_split_alone(tmp_path):
    """--previous: each row also holds the frame one env step before (at stride 1, the row before's frame; an episode's
    first row its own); --split heldout: exactly the held-out rows of the full collection, nothing else rendered."""
    from robo_prm.perception.dataset import CollectConfig, collect, load_frames

    cfg = CollectConfig(tasks=["reach_tool"], frames=16, size=32, views=["front", "side"], stride=1, heldout_every=2,
                        max_steps=4, seed=3, scatter=0.0, previous=True)
    collect(cfg, tmp_path / "full", progress=False)
    full = load_frames(tmp_path / "full")
    a = full.arrays
    assert a["prev_frames"].shape == a["frames"].shape
    for k in range(len(full)):
        if a["step"][k] == 0:
            assert np.array_equal(a["prev_frames"][k], a["frames"][k])
        else:
            assert a["episode"][k - 1] == a["episode"][k] and a["step"][k - 1] == a["step"][k] - 1
            assert np.array_equal(a["prev_frames"][k], a["frames"][k - 1])
    moved = [k for k in range(len(full)) if a["step"][k] > 0]
    assert any(not np.array_equal(a["prev_frames"][k], a["frames"][k]) for k in moved)  # the arm moves between steps
    assert np.array_equal(full.with_views(["side"]).arrays["prev_frames"], a["prev_frames"][:, :, 32:])

    meta = collect(replace(cfg, split="heldout"), tmp_path / "held", progress=False)
    held, want = load_frames(tmp_path / "held"), full.split(True)
    assert meta["splits"] == {"train": 0, "heldout": len(want)} == {"train": 0, "heldout": meta["frames"]}
    assert held.arrays.keys() == want.arrays.keys()
    assert all(np.array_equal(held.arrays[k], want.arrays[k]) for k in want.arrays)
    with pytest.raises(ValueError, match="split: 'test'"):
        collect(replace(cfg, split="test"), tmp_path / "bad", progress=False)


def test_load_frames_merges_folders(tiny_data, tmp_path):
    import shutil

    from robo_prm.perception.dataset import load_frames

    folder, meta = tiny_data
    with pytest.raises(ValueError, match="share episode seeds"):
        load_frames(f"{folder},{folder}")
    other = tmp_path / "other"  # the same frames as if collected with another --seed
    other.mkdir()
    shutil.copy(Path(folder) / "meta.json", other / "meta.json")
    for shard in sorted(Path(folder).glob("shard_*.npz")):
        with np.load(shard) as z:
            arrays = {k: z[k] for k in z.files}
        arrays["seed"] = arrays["seed"] + 1_000_003
        np.savez(other / shard.name, **arrays)
    one, both = load_frames(folder), load_frames([folder, str(other)])
    assert len(both) == 2 * len(one) and both.meta["frames"] == 2 * meta["frames"]
    assert both.meta["splits"]["heldout"] == 2 * meta["splits"]["heldout"] == int(both.arrays["heldout"].sum())
    assert len(set(both.arrays["episode"])) == 2 * len(set(one.arrays["episode"]))  # episode numbers stay distinct
    assert not set(both.arrays["episode"][both.arrays["heldout"]]) & set(both.arrays["episode"][~both.arrays["heldout"]])


def test_train_embed_caption_round_trip(tiny_model, tiny_data, make_env):
    import json

    from robo_prm.perception.weights import goal_similarity
    from robo_prm.perception.weights import load_perception
    from robo_prm.envs.task import load_task

    from robo_prm.perception.dataset import load_frames
    from robo_prm.perception.train import caption_matches, predict

    manifest = json.loads((tiny_model / "manifest.json").read_text())
    assert manifest["command"] == "test" and manifest["train"]["steps"] >= 1
    assert {"git_commit", "date", "machine", "load", "python", "torch"} <= set(manifest)  # robo_prm.provenance
    bundle = load_perception(tiny_model)
    # the manifest's held-out figure is what the saved model scores on the held-out frames (fp16 weights: ±1 frame)
    held = load_frames(tiny_data[0]).split(heldout=True)
    hits = [h for hs in caption_matches(bundle.net, held, predict(bundle.net, held.arrays["frames"]),
                                        bundle.hazard_threshold).values() for h in hs]
    metrics = manifest["metrics_heldout"]
    assert metrics["frames"] == len(hits) == len(held) > 0
    assert abs(metrics["caption_exact_match"] - np.mean(hits)) <= 1.0 / len(hits) + 1e-9
    task = load_task("place_cup_in_bin")
    env = make_env("place_cup_in_bin", render_mode="rgb_array", width=64, height=64)
    env.reset(seed=0)
    frames = np.stack([env.render(), env.render()])
    clip = bundle.clip()
    img = clip.encode_image(frames)
    txt = clip.encode_text(["The glass cup stands in the blue bin.", task.spec.goal])
    assert img.shape == (2, 16) and txt.shape == (2, 16)
    assert torch.allclose(img.norm(dim=-1), torch.ones(2), atol=1e-5)
    assert torch.allclose(txt.norm(dim=-1), torch.ones(2), atol=1e-5)
    sim = goal_similarity(frames, task.spec.goal, clip)
    assert sim.shape == (2,) and np.all(np.abs(sim) <= 1.0 + 1e-5) and sim[0] == pytest.approx(sim[1], abs=1e-5)
    d = bundle.captioner(task)(frames[0])
    assert d.text.startswith("The gripper is") and d.text.endswith("of 5.") and "glass cup" in d.text
    assert d.features.shape == (16,) and abs(np.linalg.norm(d.features) - 1.0) < 1e-5
    assert set(d.hazards) <= set(task.hazard_checks) and 0.0 <= d.rule_progress <= 1.0
    assert d.milestones_total == 5


def test_captioner_on_a_task_without_heads_uses_the_state_estimate(tiny_model):
    from robo_prm.perception.weights import load_perception
    from robo_prm.envs.task import load_task

    bundle = load_perception(tiny_model)
    task = load_task("tidy_table")  # not in TASKS: no predicate heads for it
    cap = bundle.captioner(task)
    assert cap.columns is None
    d = cap(np.zeros((64, 64, 3), dtype=np.uint8))
    assert d.milestones_total == 5 and 0.0 <= d.rule_progress <= 1.0 and set(d.hazards) <= set(task.hazard_checks)
    assert all(w in d.text for w in ("hammer", "screwdriver", "glass cup"))


def test_clip_loss_matches_open_clip_formula():
    from robo_prm.perception.clip import clip_loss

    torch.manual_seed(0)
    img = torch.nn.functional.normalize(torch.randn(4, 8), dim=-1)
    txt = torch.nn.functional.normalize(torch.randn(4, 8), dim=-1)
    scale = torch.tensor(10.0)
    logits = scale * img @ txt.T
    labels = torch.arange(4)
    want = (torch.nn.functional.cross_entropy(logits, labels) + torch.nn.functional.cross_entropy(logits.T, labels)) / 2
    assert torch.allclose(clip_loss(img, txt, scale), want)
    # distinct captions given as ids reduce to the same loss
    assert torch.allclose(clip_loss(img, txt, scale, torch.arange(4)), want)
    # two frames sharing a caption: one text row, no false negative
    # two frames sharing a caption: one text row, no false negative; the text side's target is
    # spread over the caption's frames (written out by hand here)
    shared = clip_loss(img, txt[:3], scale, torch.tensor([0, 1, 2, 2]))
    lg = scale * img @ txt[:3].T
    per_image = torch.nn.functional.cross_entropy(lg, torch.tensor([0, 1, 2, 2]))
    lt = torch.log_softmax(lg.T, dim=1)
    per_text = -(lt[0, 0] + lt[1, 1] + (lt[2, 2] + lt[2, 3]) / 2) / 3
    assert torch.allclose(shared, (per_image + per_text) / 2)
    # and it is not the loss that takes the repeat for a negative
    assert not torch.allclose(shared, clip_loss(img, txt[[0, 1, 2, 2]], scale))


def test_clip_loss_is_open_clips_cliploss_on_distinct_captions():
    import open_clip

    from robo_prm.perception.clip import clip_loss

    torch.manual_seed(1)
    img = torch.nn.functional.normalize(torch.randn(6, 8), dim=-1)
    txt = torch.nn.functional.normalize(torch.randn(6, 8), dim=-1)
    scale = torch.tensor(7.0)
    assert torch.allclose(clip_loss(img, txt, scale), open_clip.ClipLoss()(img, txt, scale))


def test_a_pretrained_open_clip_folder_loads_and_embeds_like_the_model_that_saved_it(tmp_path):
    """`--clip.arch NAME --clip.weights FILE`: a tiny open_clip config registered here, saved, loaded back."""
    import json

    import open_clip

    from robo_prm.perception.clip import ClipConfig
    from robo_prm.perception.weights import make_clip

    (tmp_path / "robo-test-tiny.json").write_text(json.dumps({
        "embed_dim": 16, "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 16, "head_width": 16},
        "text_cfg": {"context_length": 16, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1}}))
    open_clip.add_model_config(tmp_path)
    torch.manual_seed(0)
    original = open_clip.create_model("robo-test-tiny").eval()
    torch.save(original.state_dict(), tmp_path / "w.pt")
    clip = make_clip(ClipConfig(arch="robo-test-tiny", weights=str(tmp_path / "w.pt")))
    texts = ["The gripper is open, far from the hammer.", "The hammer lies in the middle of the table."]
    want = original.encode_text(open_clip.get_tokenizer("robo-test-tiny")(texts), normalize=True)
    assert torch.allclose(clip.encode_text(texts), want, atol=1e-6)
    frames = np.random.default_rng(0).integers(0, 255, (3, 48, 48, 3), dtype=np.uint8)
    img = clip.encode_image(frames)
    assert img.shape == (3, 16) and torch.allclose(img.norm(dim=-1), torch.ones(3), atol=1e-5)
    with pytest.raises(FileNotFoundError, match="no such open_clip checkpoint"):
        make_clip(ClipConfig(arch="robo-test-tiny", weights=str(tmp_path / "missing.pt")))


# ---- BLIP ------------------------------------------------------------------------------------------
def test_blip_loader_on_a_tiny_random_model(tmp_path, tiny_text):
    from transformers import (BertTokenizerFast, BlipConfig, BlipForConditionalGeneration, BlipProcessor)

    try:
        from transformers import BlipImageProcessorPil as ImageProcessor
    except ImportError:  # older transformers
        from transformers import BlipImageProcessor as ImageProcessor

    from robo_prm.perception.blip import BlipCaptioner

    tok = BertTokenizerFast.from_pretrained(tiny_text)
    tok.add_special_tokens({"bos_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]"})
    cfg = BlipConfig(
        text_config={"vocab_size": len(tok), "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
                     "intermediate_size": 32, "max_position_embeddings": 64, "bos_token_id": tok.cls_token_id,
                     "sep_token_id": tok.sep_token_id, "pad_token_id": tok.pad_token_id, "eos_token_id": tok.sep_token_id},
        vision_config={"hidden_size": 16, "image_size": 32, "patch_size": 8, "num_hidden_layers": 1,
                       "num_attention_heads": 2, "intermediate_size": 32},
        projection_dim=16,
    )
    torch.manual_seed(0)
    BlipForConditionalGeneration(cfg).save_pretrained(tmp_path)
    BlipProcessor(ImageProcessor(size={"height": 32, "width": 32}), tok).save_pretrained(tmp_path)
    blip = BlipCaptioner(tmp_path, max_new_tokens=5)
    frames = np.random.default_rng(0).integers(0, 255, size=(2, 48, 48, 3), dtype=np.uint8)
    caps = blip.caption(frames)
    # exactly the model's own greedy decoding of these frames, special tokens stripped
    proc, model = BlipProcessor.from_pretrained(tmp_path), BlipForConditionalGeneration.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        ids = model.generate(**proc(images=list(frames), return_tensors="pt"), max_new_tokens=5, do_sample=False)
    assert caps == [t.strip() for t in proc.batch_decode(ids, skip_special_tokens=True)] and len(caps) == 2
    d = blip.describe(frames[:1])[0]
    assert d.facts == () and d.hazards == () and d.rule_progress is None
    with pytest.raises(FileNotFoundError):
        BlipCaptioner(tmp_path / "missing")


# ---- pixels-only mode ---------------------------------------------------------------------------------
def test_pixels_only_mode_drives_sb3(tiny_model, tmp_path):
    import json

    from robo_prm.config import load_train_config
    from robo_prm.describe import DescribeWrapper
    from robo_prm.perception.captioner import PixelCaptioner
    from robo_prm.train import train
    from robo_prm.train.envs import make_tidy_env
    from robo_prm.envs.task import load_task

    over = {"task": "reach_tool", "steps": 200, "describe.source": "pixels", "describe.weights": str(tiny_model),
            "judge.backend": "rules", "eval.every_steps": 0, "eval.episodes": 1, "eval.record": 0,
            "record.every_episodes": 0, "progress_bar": False, "runs_dir": str(tmp_path), "run_name": "pix",
            "checkpoint_every": 0, "sac.learning_starts": 50}
    cfg = load_train_config(None, over)
    env = make_tidy_env(load_task("reach_tool"), cfg)
    try:
        assert isinstance(env, DescribeWrapper) and isinstance(env.describer, PixelCaptioner)
        assert env.every == cfg.reward.judge_every
        _, info = env.reset(seed=0)
        assert info["description"].features.shape == (16,)
        texts = []
        for _ in range(8):
            *_, info = env.step(np.zeros(4, dtype=np.float32))  # the arm holds still: no episode end
            texts.append(info["description"])
        assert env.described == 1 + 1 + 2  # reset, step 1, steps 4 and 8
        assert texts[1] is texts[2]  # held between described steps
    finally:
        env.close()
    run = train(cfg)
    summary = json.loads((run / "summary.json").read_text())
    judge = summary["judge"]
    assert summary["env_steps"] == 200 and judge["judge_errors"] == 0 and judge["nan_rewards"] == 0
    assert judge["cache_hits_exact"] + judge["cache_hits_nn"] + judge["cache_misses"] >= 200 / cfg.reward.judge_every


def test_clip_backend_scores_the_goal_similarity_the_describer_gives():
    """judge.backend clip: progress = (cos + 1) / 2 of SceneDescription.goal_similarity, confidence 1, never reused
    by caption text; a scene without a similarity (or a NaN one) is a backend error: the rules answer, counted."""
    import dataclasses

    from robo_prm.judge import JudgeConfig, make_judge
    from robo_prm.judge.backends.clip import ClipBackend
    from robo_prm.envs.task import load_task
    from robo_prm.types import SceneDescription

    task = load_task("reach_tool").text
    scene = SceneDescription(text="The gripper is open, far from the hammer.", facts=(), source="pixels")
    sims = [1.0, 0.0, -1.0, 0.5]
    got = ClipBackend().score(task, [dataclasses.replace(scene, goal_similarity=c) for c in sims], [], False)
    assert [s.progress for s in got] == [1.0, 0.5, 0.0, 0.75]
    with pytest.raises(ValueError, match="goal_similarity"):
        ClipBackend().score(task, [scene], [], False)
    judge = make_judge(JudgeConfig(backend="clip", cache_size=0))
    same_text = judge.judge(task, [dataclasses.replace(scene, goal_similarity=c) for c in sims[:2]])
    assert [j.progress for j in same_text] == pytest.approx([1.0, 0.5], abs=0.02)  # one caption, two frames, two scores
    assert not any(j.fallback for j in same_text)
    bad = judge.judge(task, [dataclasses.replace(scene, goal_similarity=float("nan"))])
    assert bad[0].fallback and judge.stats()["fallback_error"] == 1


def test_the_pixel_captioner_gives_the_goal_similarity_of_its_own_clip(tiny_model, make_env):
    import torch

    from robo_prm.perception.weights import load_perception

    env = make_env("reach_tool", render_mode="rgb_array", width=64, height=64)
    env.reset(seed=0)
    frame = env.render()
    bundle = load_perception(tiny_model)
    task = env.unwrapped.task
    d = bundle.captioner(task, goal_similarity=True)(frame)
    clip = bundle.clip()
    with torch.no_grad():
        want = float(clip.encode_image(frame[None]) @ clip.encode_text([task.text.goal]).T)
    assert d.goal_similarity == pytest.approx(want, abs=1e-4)
    assert bundle.captioner(task)(frame).goal_similarity is None  # only when asked: no text tower otherwise


def test_reward_source_clip_trains_on_frames_with_the_clip_judge(tiny_model, tmp_path):
    """`--reward_source clip` (the VLM-RM baseline): pixels describing with the goal similarity, the CLIP judge, no
    caption-keyed caches; it runs SB3 end to end and its config.yaml says so."""
    import json

    import yaml

    from robo_prm.config import ConfigError, load_train_config
    from robo_prm.train import train

    over = {"task": "reach_tool", "steps": 120, "reward_source": "clip", "describe.weights": str(tiny_model),
            "eval.every_steps": 0, "eval.episodes": 1, "eval.record": 0, "record.every_episodes": 0,
            "progress_bar": False, "runs_dir": str(tmp_path), "run_name": "clip", "checkpoint_every": 0,
            "sac.learning_starts": 50}
    run = train(load_train_config(None, over))
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert cfg["describe"]["source"] == "pixels" and cfg["describe"]["goal_similarity"] is True
    assert cfg["judge"]["backend"] == "clip" and cfg["judge"]["cache_size"] == 0 and cfg["reward"]["cache"] is False
    judge = json.loads((run / "summary.json").read_text())["judge"]
    assert judge["judge_errors"] == 0 and judge["nan_rewards"] == 0 and judge["judge_fallbacks"] == 0
    assert "cache_hits_exact" not in judge and judge["blend_judge_calls"] >= 120 / 4  # every judged step scored
    bad = load_train_config(None, {"judge.backend": "clip"})
    with pytest.raises(ConfigError, match="describe.source pixels"):
        bad.check_combination()


def test_replay_shows_the_pixel_caption_beside_the_state_caption(tiny_model, make_env, tmp_path):
    """`robo-prm replay EP --pixel_captions --perception DIR`: each frame's pixel caption (from the recorded frame,
    resized to the model's size) beside the scene text the judge read; the panel grows to hold both."""
    from robo_prm.cli import main
    from robo_prm.replay import EpisodeMeta, EpisodeWriter, StepRecord, load_episode, render_frame
    from robo_prm.replay.captions import add_pixel_captions, differing_sentences

    env = make_env("reach_tool", render_mode="rgb_array", width=96, height=96)
    _, info = env.reset(seed=0)
    with EpisodeWriter(tmp_path / "ep_0000", EpisodeMeta(task="reach_tool", algo="sac", seed=0)) as w:
        w.add_frame(env.render())
        for i in range(3):
            *_, info = env.step(np.zeros(4, dtype=np.float32))
            w.add_step(StepRecord(step=i, description=info["description"].text))
            w.add_frame(env.render())
    ep = add_pixel_captions(load_episode(tmp_path / "ep_0000"), str(tiny_model))
    assert len(ep.pixel_captions) == ep.num_frames and all(c.startswith("The gripper is") for c in ep.pixel_captions)
    plain = render_frame(load_episode(tmp_path / "ep_0000"), 1)
    shown = render_frame(ep, 1)
    assert shown.shape[0] > plain.shape[0] and shown.shape[1] == plain.shape[1]
    assert differing_sentences("The gripper is open. The hammer lies in the middle of the table.",
                               "The gripper is open. The hammer lies 5 cm from the front edge of the table.") == 1
    out = tmp_path / "ep.mp4"
    assert main(["replay", str(tmp_path / "ep_0000"), "--out", str(out), "--pixel_captions",
                 "--perception", str(tiny_model)]) == 0 and out.stat().st_size > 0


# ---- several camera views -------------------------------------------------------------------------------------
def test_render_views_puts_each_camera_side_by_side(make_env):
    env = make_env("tidy_table", describe=False, render_mode="rgb_array", width=48, height=48)
    env.reset(seed=0)
    u = env.unwrapped
    front = u.render()
    both = u.render_views(("front", "side"))
    assert both.shape == (48, 96, 3) and both.dtype == np.uint8
    assert np.array_equal(both[:, :48], front) and not np.array_equal(both[:, 48:], front)
    assert np.array_equal(u.render(), front)  # the front camera is put back
    assert np.array_equal(u.render_views(("front",)), front)
    with pytest.raises(ValueError, match="unknown camera view.*'nadir'"):
        u.render_views(("front", "nadir"))


def test_split_views_gives_the_trunk_each_view_in_order():
    from robo_prm.perception.backbone import split_views

    a, b = torch.zeros(2, 3, 8, 8), torch.ones(2, 3, 8, 8)
    a[1] += 5
    tiles = split_views(torch.cat([a, b], dim=3), 2)
    assert tiles.shape == (4, 3, 8, 8)
    assert torch.equal(tiles[0], a[0]) and torch.equal(tiles[1], b[0]) and torch.equal(tiles[2], a[1])
    with pytest.raises(ValueError, match="2 views of 8×8"):
        split_views(a, 2)


def test_a_two_view_model_describes_from_pixels_records_its_views_and_captions_them(tiny_two_view_model, make_env, tmp_path):
    """A model trained on front + side frames: the describe stage renders both cameras for it (training envs and
    recorded frames alike), and replay captions frames recorded that way; a front-only episode gets a clear error."""
    from robo_prm.config import load_train_config
    from robo_prm.envs.task import load_task
    from robo_prm.replay import EpisodeMeta, EpisodeWriter, load_episode, render_frame
    from robo_prm.replay.captions import add_pixel_captions
    from robo_prm.replay.episode import EpisodeError
    from robo_prm.train.envs import make_vec_env

    from robo_prm.perception.weights import load_perception

    from robo_prm.perception.dataset import load_frames

    bundle = load_perception(tiny_two_view_model)
    assert bundle.net.cfg.views == ["front", "side"] and bundle.net.cfg.carried_slots
    data = bundle.manifest["config"]["data"]
    full, front = load_frames(data), load_frames(data, views=["front"], heldout=True)  # cut while loading
    want = full.split(heldout=True)
    assert front.meta["views"] == ["front"] and np.array_equal(front.arrays["frames"], want.arrays["frames"][:, :, :48])
    assert np.array_equal(front.arrays["caption"], want.arrays["caption"]) and len(front) < len(full)
    cfg = load_train_config(None, {"task": "reach_tool", "describe.source": "pixels", "describe.weights": str(tiny_two_view_model),
                                   "judge.backend": "rules", "progress_bar": False})
    venv = make_vec_env(load_task("reach_tool"), cfg)
    try:
        venv.env_method("set_capture", True)
        venv.reset()
        _, _, _, infos = venv.step(np.zeros((1, 4), dtype=np.float32))
        assert infos[0]["frame"].shape == (48, 96, 3)
        assert infos[0]["description"].text.startswith("The gripper is")
    finally:
        venv.close()
    cap = bundle.captioner(load_task("reach_tool"))
    with pytest.raises(ValueError, match=r"reads 96×48 frames \(front\+side views"):
        cap.describe_step(None, None, np.zeros((48, 48, 3), dtype=np.uint8))
    with pytest.raises(ValueError, match="2 views of 48×48 side by side"):
        cap(np.zeros((48, 48, 3), dtype=np.uint8))
    env = make_env("reach_tool", describe=False, render_mode="rgb_array", width=48, height=48)
    env.reset(seed=0)
    for name, views in (("wide", ("front", "side")), ("front", ("front",))):
        with EpisodeWriter(tmp_path / name, EpisodeMeta(task="reach_tool", algo="sac", seed=0)) as w:
            w.add_frame(env.unwrapped.render_views(views))
    ep = add_pixel_captions(load_episode(tmp_path / "wide"), str(tiny_two_view_model))
    assert len(ep.pixel_captions) == 1 and ep.pixel_captions[0].startswith("The gripper is")
    shown = render_frame(ep, 0)  # the replay video lays both views out like any frame
    assert shown.ndim == 3 and shown.shape[1] >= 96
    with pytest.raises(EpisodeError, match="--record.views front,side"):
        add_pixel_captions(load_episode(tmp_path / "front"), str(tiny_two_view_model))
    with pytest.raises(ValueError, match="record.views: unknown camera view"):
        make_vec_env(load_task("reach_tool"), load_train_config(None, {"task": "reach_tool", "record.views": ["top"]}))


# ---- the shipped weights -------------------------------------------------------------------------------
def test_shipped_weights_describe_a_frame_and_embed_shipped_goals(make_env):
    """The default pixels path needs no training and no text encoder: weights ship with the package,
    the shipped tasks' goal embeddings are cached with them."""
    import json

    from robo_prm.perception.weights import goal_similarity
    from robo_prm.perception.weights import load_perception, shipped_folder
    from robo_prm.envs.task import load_task

    manifest = json.loads((shipped_folder() / "manifest.json").read_text())
    assert manifest["command"] and manifest["data"]["frames"] > 0 and "caption_exact_match" in manifest["metrics_heldout"]
    bundle = load_perception()
    size = bundle.net.cfg.size
    task = load_task("place_cup_in_bin")
    env = make_env("place_cup_in_bin", render_mode="rgb_array", width=size, height=size)
    env.reset(seed=0)
    cap = bundle.captioner(task)
    frame = cap.render_frame(env)
    assert frame.shape == (size, size * len(cap.views), 3)
    d = cap(frame)
    assert d.text.startswith("The gripper is") and "glass cup" in d.text and d.features.shape == (bundle.net.cfg.embed_dim,)
    clip = bundle.clip()
    sim = goal_similarity(np.stack([frame]), task.spec.goal, clip)
    # the cached goal embedding against the captioner's own image embedding of the same frame
    goal = clip.encode_text([task.spec.goal])[0].detach().float().numpy()
    assert sim.shape == (1,) and sim[0] == pytest.approx(float(d.features @ goal), abs=1e-4)


def test_perception_cli_caption_and_goal_sim(capsys):
    from robo_prm.cli import main

    assert main(["perception", "caption", "--task", "reach_tool", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("pixels: The gripper is") and "state:  The gripper is" in out
    assert main(["perception", "goal-sim", "--task", "reach_tool", "--seed", "0"]) == 0
    assert "spearman(time, similarity)" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="nonexistent.pt"):  # a missing checkpoint: one line, no traceback
        main(["perception", "goal-sim", "--clip.arch", "ViT-B-32", "--clip.weights", "/nonexistent.pt"])


def test_train_clip_then_captioner_from_it(tiny_data, tiny_text, tmp_path):
    """The two CLI stages: contrastive only, then the heads starting from that folder (`--init`)."""
    from robo_prm.perception.train import PerceptionTrainConfig, captioner_defaults, clip_defaults, train
    from robo_prm.perception.weights import load_perception

    data, _ = tiny_data
    base = dict(data=str(data), text_model=tiny_text, epochs=1, batch=16, hidden=32, embed_dim=16)
    clip_dir = train(clip_defaults(PerceptionTrainConfig(out=str(tmp_path / "clip"), **base)), progress=False)
    assert load_perception(clip_dir).net.cfg.embed_dim == 16
    cap_dir = train(captioner_defaults(PerceptionTrainConfig(out=str(tmp_path / "cap"), init=str(clip_dir), **base)), progress=False)
    a, b = load_perception(clip_dir).net, load_perception(cap_dir).net
    assert not torch.equal(a.slots.weight, b.slots.weight)  # the heads trained in the second stage


def test_per_hazard_thresholds_are_calibrated_on_unseen_frames_and_read_by_the_captioner(tiny_model, tiny_data, make_env, tmp_path):
    """`perception calibrate-hazards` writes one threshold per hazard key into config.json; the captioner flags a hazard
    by its own key's threshold and by "*" (the folder's single threshold) for keys without one."""
    import json
    import shutil

    from robo_prm.cli import main
    from robo_prm.perception.weights import _load, load_perception
    from robo_prm.envs.task import load_task

    folder = tmp_path / "model"
    shutil.copytree(tiny_model, folder)
    assert main(["perception", "calibrate-hazards", "--weights", str(folder), "--data", str(tiny_data[0]),
                 "--split", "heldout", "--floor", "0.0"]) == 0
    cfg = json.loads((folder / "config.json").read_text())
    keys = [k for k in cfg["net"]["predicate_keys"] if ":hazard/" in k]
    assert set(cfg["hazard_thresholds"]) == set(keys) and all(0.0 < v < 1.0 for v in cfg["hazard_thresholds"].values())
    assert json.loads((folder / "manifest.json").read_text())["hazard_thresholds"]["floor"] == 0.0

    task = load_task("place_cup_in_bin")
    env = make_env("place_cup_in_bin", render_mode="rgb_array", width=64, height=64)
    env.reset(seed=0)
    frame = env.render()
    names = list(task.hazard_checks)
    first = f"place_cup_in_bin:hazard/{names[0]}"
    for per_key, star, want in (({first: 0.0}, 1.0, {names[0]}),  # only the first key is ever flagged
                                ({first: 1.0}, 0.0, set(names[1:]))):  # every key but the first
        cfg["hazard_thresholds"], cfg["hazard_threshold"] = per_key, star
        (folder / "config.json").write_text(json.dumps(cfg))
        _load.cache_clear()
        assert set(load_perception(folder).captioner(task)(frame).hazards) == want
    _load.cache_clear()


def test_search_lists_the_frames_that_fit_a_caption_and_writes_them_as_one_image(tiny_model, tiny_data, tmp_path, capsys):
    """`perception search`: a frame's own caption lists k frames with the frame's state captions, as one PNG; a
    sentence of a caption is enough; other wording goes to the CLIP embedding; a missing folder is one line naming
    --data."""
    import imageio.v3 as iio

    from robo_prm.cli import main
    from robo_prm.perception.dataset import load_frames

    frames = load_frames(str(tiny_data[0]))
    caption = str(frames.arrays["caption"][0])
    out = tmp_path / "hits.png"
    assert main(["perception", "search", "--weights", str(tiny_model), "--data", str(tiny_data[0]), "--query", caption,
                 "--k", "3", "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "scored by the captioner" in lines[0] and len([ln for ln in lines if " episode " in ln]) == 3
    assert iio.imread(out).shape == (frames.arrays["frames"].shape[1], 3 * frames.arrays["frames"].shape[2], 3)
    first_sentence = caption.split(". ")[1] + "."  # the object's sentence alone
    assert main(["perception", "search", "--weights", str(tiny_model), "--data", str(tiny_data[0]),
                 "--query", first_sentence, "--k", "2"]) == 0
    assert "scored by the captioner" in capsys.readouterr().out
    assert main(["perception", "search", "--weights", str(tiny_model), "--data", str(tiny_data[0]),
                 "--query", "the cup is on the floor", "--k", "2"]) == 0  # no renderer words it so: the CLIP cosine
    assert "scored by CLIP cosine" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="--data"):
        main(["perception", "search", "--weights", str(tiny_model), "--data", str(tmp_path / "nothing"), "--query", "x"])
