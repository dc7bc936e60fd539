"""The open_clip CoCa captioner: caption tokens round-trip, a tiny model learns its frames' captions, saves and
loads, and describes frames for training and replay."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from robo_prm.perception.coca import CaptionTokens, load_coca, restore


@pytest.fixture(scope="module")
def few(tiny_data):
    """8 training frames of tiny_data."""
    from robo_prm.perception.dataset import load_frames

    data = load_frames(tiny_data[0])
    return data.subset(np.flatnonzero(~data.arrays["heldout"])[:8])


@pytest.fixture(scope="module")
def tiny_coca(few, tmp_path_factory):
    from robo_prm.perception.train_coca import CocaTrainConfig, train

    cfg = CocaTrainConfig(out=str(tmp_path_factory.mktemp("coca")), width=64, heads=2, embed_dim=32, epochs=100, batch=8,
                          lr=3e-3, eval_frames=0)
    return train(cfg, data=few, progress=False, command="test")


def test_restore_puts_back_the_captions_casing_and_spacing():
    assert restore("the hammer lies 1 0 cm from the front edge . it is moving fast . milestones reached : 2 of 5 . ") == \
        "The hammer lies 10 cm from the front edge. It is moving fast. Milestones reached: 2 of 5."


def test_caption_tokens_round_trip_every_collected_caption(tiny_data):
    from robo_prm.perception.dataset import load_frames

    captions = sorted(set(load_frames(tiny_data[0]).arrays["caption"].tolist()))
    tok = CaptionTokens.fit(captions, context_length=96)
    ids = tok.encode(captions)
    assert tok.vocab_size < 100  # a compact vocabulary, not open_clip's 49,408
    assert [tok.decode(row[1:]) for row in ids] == captions
    assert tok.decode(tok.encode(["the bucket lies"])[0][1:]) != "The bucket lies"  # an unknown word is not made up


def test_a_tiny_coca_learns_its_frames_captions_and_reloads(tiny_coca, few, tmp_path):
    import open_clip

    from robo_prm.perception.train_coca import exact_match

    bundle = load_coca(tiny_coca)
    assert isinstance(bundle.model, open_clip.CoCa)
    # the captions of the frames it was trained on come back word for word (an untrained model writes none)
    assert exact_match(bundle, few)["caption_exact_match"] >= 0.75
    emb = bundle.encode_image(few.arrays["frames"][:2])
    assert emb.shape == (2, 32) and torch.allclose(emb.norm(dim=-1), torch.ones(2), atol=1e-5)
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_coca(tmp_path / "nothing")


def test_the_coca_caption_is_the_text_the_rest_stays_the_perception_models(tiny_coca, tiny_model, few):
    from robo_prm.envs.task import load_task
    from robo_prm.perception.weights import load_perception

    bundle = load_perception(str(tiny_model))
    task = load_task("reach_tool")
    frames = few.arrays["frames"][few.arrays["task"] == 0][:3]
    slots = bundle.captioner(task).describe(frames)
    coca = bundle.captioner(task, caption_model=str(tiny_coca)).describe(frames)
    no_line = bundle.captioner(task, milestone_line=False, caption_model=str(tiny_coca)).describe(frames)
    bodies = [c.split(" Milestones reached:")[0] for c in load_coca(tiny_coca).caption(frames)]
    # CoCa's sentences, the perception model's milestone line (it agrees with milestones_reached)
    assert [d.text for d in coca] == [f"{b} Milestones reached: {s.milestones_reached} of 1." for b, s in zip(bodies, slots)]
    assert [d.text for d in no_line] == bodies
    for a, b in zip(slots, coca):
        assert (a.hazards, a.rule_progress, a.milestones_reached) == (b.hazards, b.rule_progress, b.milestones_reached)
        assert np.array_equal(a.features, b.features)


def test_train_and_replay_take_the_caption_model(tiny_coca, tiny_model, tmp_path):
    """`--describe.caption_model DIR` in pixels mode, `robo-prm replay --pixel_captions --caption_model DIR`."""
    from robo_prm.config import load_train_config
    from robo_prm.config_io import ConfigError
    from robo_prm.envs.task import load_task
    from robo_prm.replay import EpisodeMeta, EpisodeWriter, StepRecord, load_episode
    from robo_prm.replay.captions import add_pixel_captions
    from robo_prm.train.envs import make_tidy_env

    cfg = load_train_config(None, {"describe.source": "pixels", "describe.weights": str(tiny_model),
                                   "describe.caption_model": str(tiny_coca), "describe.every": 1})
    env = make_tidy_env(load_task("reach_tool"), cfg)
    try:
        _, info = env.reset(seed=0)
        coca = load_coca(tiny_coca)
        with EpisodeWriter(tmp_path / "ep_0000", EpisodeMeta(task="reach_tool", algo="sac", seed=0)) as w:
            w.add_frame(env.render())
            for i in range(2):
                *_, info = env.step(np.zeros(4, dtype=np.float32))
                frame = env.render()
                assert info["description"].text.split(" Milestones")[0] == coca.caption(frame)[0].split(" Milestones")[0]
                w.add_step(StepRecord(step=i, description=info["description"].text))
                w.add_frame(frame)
    finally:
        env.close()
    ep = add_pixel_captions(load_episode(tmp_path / "ep_0000"), str(tiny_model), caption_model=str(tiny_coca))

    with pytest.raises(ConfigError, match="describe.caption_model: .*needs describe.source pixels"):
        load_train_config(None, {"describe.caption_model": str(tiny_coca)}).check_combination()
    assert [c.split(" Milestones")[0] for c in ep.pixel_captions] == \
        [c.split(" Milestones")[0] for c in coca.caption(np.stack(ep.frames))]


def test_perception_caption_cli_takes_the_caption_model(tiny_coca, tiny_model, capsys):
    from robo_prm.cli import main

    assert main(["perception", "caption", "--task", "reach_tool", "--weights", str(tiny_model),
                 "--caption_model", str(tiny_coca)]) == 0
    assert capsys.readouterr().out.startswith("pixels: The gripper")
    with pytest.raises(SystemExit, match="--caption_model: .*config.json: no such file"):
        main(["perception", "caption", "--task", "reach_tool", "--weights", str(tiny_model), "--caption_model", "/nope"])
