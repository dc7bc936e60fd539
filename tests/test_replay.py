"""Replay stage: episode round trip, clear errors, overlay video / GIF / summary PNG that really show the data."""
from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import cv2
import numpy as np
import pytest

from robo_prm.replay import (
    EpisodeError,
    EpisodeMeta,
    EpisodeWriter,
    StepRecord,
    load_episode,
    render_episode,
    render_frame,
    render_reel,
    render_summary_png,
)
from robo_prm.replay import video as video_mod
from robo_prm.types import HazardReport, Judgement

STEPS = 12
SIZE = 64
WORDS = "the gripper moves the hammer away from the table edge toward the left bin slowly".split()


def synthetic_frames(n: int, rng: np.random.Generator) -> list[np.ndarray]:
    """A grey table with a square sliding right: frames differ, so frame order is checkable."""
    frames = []
    for t in range(n):
        f = np.full((SIZE, SIZE, 3), 90, np.uint8)
        f[40:, :] = (120, 100, 80)
        x = 4 + 4 * t
        f[20:32, x : x + 12] = (200, 60, 60)
        f += rng.integers(0, 8, f.shape, dtype=np.uint8)
        frames.append(f)
    return frames


def synthetic_steps(n: int, rng: np.random.Generator) -> list[StepRecord]:
    steps = []
    for i in range(n):
        judged = i % 2 == 0 or i == n - 1  # judge every 2nd step, like k > 1 in training
        hazards = (HazardReport("near_edge(hammer)", 0.8, float(rng.uniform(0.5, 1.0))),) if i in (3, 4, 7) else ()
        reason = " ".join(rng.choice(WORDS, size=int(rng.integers(5, 25)))) if i % 4 == 0 else None
        judgement = Judgement(progress=min(1.0, i / (n - 1)), confidence=float(rng.uniform(0.5, 1)),
                              hazards=hazards, reason=reason, backend="stub",
                              unbanded=0.9 if i == 2 else None) if judged else None  # i=2: held to its stage
        terms = {"term/env": 0.0, "term/llm": float(rng.normal()), "term/explore": 0.01, "term/safety": -0.5 * bool(hazards),
                 "weight/env": 1.0, "weight/llm": 0.5, "weight/explore": 0.1, "weight/safety": 1.0}
        terms["total"] = sum(terms[f"term/{k}"] * terms[f"weight/{k}"] for k in ("env", "llm", "explore", "safety"))
        steps.append(StepRecord(
            step=i, action=[float(a) for a in rng.uniform(-1, 1, 4)], env_reward=float(i == n - 1), reward_terms=terms,
            judgement=judgement, description=f"hammer at x={i * 0.05:.2f}",
            predicates={"near_edge(hammer)": i in (3, 4), "dist_to_bin": 0.6 - i * 0.05},
            success=i == n - 1, hazards_true=["near_edge(hammer)"] if i in (3, 4) else [],
        ))
    return steps


def write_episode(path: Path, seed: int = 0, fps: float = 20.0) -> Path:
    rng = np.random.default_rng(seed)
    meta = EpisodeMeta(task="push_tool_from_edge", goal="Move the hammer away from the edge into the left bin.",
                       hazards=["the glass cup falls off the table"], seed=seed, run="push__sac__0__1", algo="sac",
                       fps=fps, env_steps=4000)
    frames = synthetic_frames(STEPS + 1, rng)
    with EpisodeWriter(path, meta) as w:
        w.add_frame(frames[0])
        for f, s in zip(frames[1:], synthetic_steps(STEPS, rng)):
            w.add_step(s)
            w.add_frame(f)
    return path


@pytest.fixture(scope="module")
def episode_dir(tmp_path_factory) -> Path:
    return write_episode(tmp_path_factory.mktemp("ep") / "ep_0000")


# --- episode files ---------------------------------------------------------------------------------

def test_round_trip(tmp_path):
    path = write_episode(tmp_path / "ep")
    ep = load_episode(path)
    rng = np.random.default_rng(0)  # same draws as write_episode
    frames = synthetic_frames(STEPS + 1, rng)
    steps = synthetic_steps(STEPS, rng)
    assert ep.frames.shape == (STEPS + 1, SIZE, SIZE, 3) and ep.frames.dtype == np.uint8
    assert np.array_equal(ep.frames, np.stack(frames))
    assert ep.steps == steps
    assert ep.meta.success is True and ep.meta.num_steps == STEPS and ep.meta.frame_size == (SIZE, SIZE)
    assert load_episode(path) == ep
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ep"]  # no temp folders left behind
    line = json.loads((path / "steps.jsonl").read_text().splitlines()[0])
    assert line["judgement"]["score"] == pytest.approx(1.0)  # human-readable 1–10 score is on disk
    assert ep.steps[2].judgement.unbanded == 0.9 and ep.steps[0].judgement.unbanded is None


def test_step_record_tolerates_missing_keys():
    s = StepRecord.from_dict({"step": 5, "judgement": {"progress": 0.5}})
    assert s.action == [] and s.reward_terms == {} and not s.success
    assert s.judgement == Judgement(progress=0.5, confidence=1.0)
    assert StepRecord.from_dict(s.to_dict()) == s


def test_writer_checks_counts_and_is_atomic(tmp_path):
    w = EpisodeWriter(tmp_path / "ep", EpisodeMeta(task="t"))
    w.add_frame(np.zeros((8, 8, 3), np.uint8))
    w.add_step(StepRecord(step=0))
    assert not (tmp_path / "ep").exists()  # nothing on disk before close
    with pytest.raises(ValueError, match="frames for 1 steps"):
        w.close()
    with pytest.raises(ValueError, match="uint8"):
        w.add_frame(np.zeros((8, 8, 3), np.float32))
    with pytest.raises(RuntimeError):
        with EpisodeWriter(tmp_path / "ep2", EpisodeMeta(task="t")) as w2:
            w2.add_frame(np.zeros((8, 8, 3), np.uint8))
            raise RuntimeError("env crashed")
    assert list(tmp_path.iterdir()) == []  # an aborted episode leaves nothing behind


@pytest.mark.parametrize("damage, message", [
    (lambda p: (p / "frames.npz").unlink(), r"frames\.npz: file not found"),
    (lambda p: (p / "frames.npz").write_bytes(b"not a zip"), r"frames\.npz: not a readable"),
    (lambda p: (p / "meta.json").write_text("{oops"), r"meta\.json: not valid JSON"),
    (lambda p: (p / "steps.jsonl").write_text('{"step": 0}\n{"step": 1, "action": [1,\n{"step": 2}\n'), r"steps\.jsonl: line 2"),
    (lambda p: (p / "meta.json").write_bytes(b'{"task": "t\xff\xfe"}'), r"meta\.json: not UTF-8 text"),
    (lambda p: (p / "steps.jsonl").write_text('{"step": 0}\n'), r"frames\.npz: 13 frames for 1 steps"),
])
def test_corrupt_episode_names_the_file(tmp_path, damage, message):
    path = write_episode(tmp_path / "ep")
    damage(path)
    with pytest.raises(EpisodeError, match=message):
        load_episode(path)


def test_a_truncated_last_line_loses_one_step_not_the_episode(tmp_path, caplog):
    path = write_episode(tmp_path / "ep")
    whole = load_episode(path)
    lines = (path / "steps.jsonl").read_bytes().splitlines(keepends=True)
    (path / "steps.jsonl").write_bytes(b"".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])  # killed mid-write
    ep = load_episode(path)
    assert ep.steps == whole.steps[:-1] and np.array_equal(ep.frames, whole.frames[:-1])
    assert "line 12 dropped" in caplog.text


def test_a_stray_byte_spoils_nothing_but_its_characters(tmp_path):
    path = write_episode(tmp_path / "ep")
    whole = load_episode(path)
    text = (path / "steps.jsonl").read_bytes()
    (path / "steps.jsonl").write_bytes(text.replace(b'"hammer at', b'"\xff hammer at', 1))
    ep = load_episode(path)
    assert ep.steps[0].description == "\ufffd " + whole.steps[0].description and ep.steps[1:] == whole.steps[1:]


def test_missing_folder(tmp_path):
    with pytest.raises(EpisodeError, match="episode folder not found"):
        load_episode(tmp_path / "nope")


# --- video, GIF, summary ---------------------------------------------------------------------------

def _read_video(path: Path) -> list[np.ndarray]:
    cap = cv2.VideoCapture(str(path))
    frames = []
    ok, f = cap.read()
    while ok:
        frames.append(cv2.cvtColor(f, cv2.COLOR_BGR2RGB))
        ok, f = cap.read()
    cap.release()
    return frames


def test_mp4_has_every_frame_and_the_overlay(episode_dir, tmp_path, caplog):
    ep = load_episode(episode_dir)
    with caplog.at_level(logging.WARNING):
        (out,) = render_episode(ep, tmp_path / "ep.mp4")
    assert not any("mp4v" in r.message for r in caplog.records), "H.264 path failed"
    frames = _read_video(out)
    expected = render_frame(ep, 5)
    assert len(frames) == ep.num_frames == STEPS + 1
    assert frames[0].shape == expected.shape and expected.shape[1] >= 480 + 64
    assert expected.shape[0] % 2 == 0 and expected.shape[1] % 2 == 0
    # the encoded frame is the overlay (lossy codec: close, not equal), and frames come in order
    assert np.abs(frames[5].astype(int) - expected).mean() < 6
    assert np.abs(frames[5].astype(int) - render_frame(ep, 9)).mean() > np.abs(frames[5].astype(int) - expected).mean()


def test_reel_plays_episodes_in_order_and_holds_each_ending(tmp_path):
    a = load_episode(write_episode(tmp_path / "a", seed=1))
    b = load_episode(write_episode(tmp_path / "b", seed=2))
    b = dataclasses.replace(b, frames=255 - b.frames)  # a scene unlike a's, so the order is checkable
    out = render_reel([a, b], tmp_path / "reel.mp4", fps=4, hold_s=0.5)  # hold: 2 frames at 4 fps
    frames = _read_video(out)
    assert len(frames) == a.num_frames + 2 + b.num_frames + 2
    close = lambda f, ep, t: np.abs(f.astype(int) - render_frame(ep, t)).mean() < 6  # noqa: E731
    last_a = a.num_frames - 1
    assert close(frames[0], a, 0) and close(frames[last_a + 2], a, last_a)  # a's ending, held
    assert close(frames[last_a + 3], b, 0) and close(frames[-1], b, b.num_frames - 1)
    assert not close(frames[last_a + 3], a, 0)  # b really is the second episode, not a again
    cap = cv2.VideoCapture(str(out))
    assert cap.get(cv2.CAP_PROP_FPS) == pytest.approx(4, abs=0.01)


def test_reel_rejects_mixed_frame_sizes(tmp_path, episode_dir):
    small = load_episode(episode_dir)
    big = dataclasses.replace(small, frames=np.zeros((small.num_frames, 32, 32, 3), np.uint8))
    with pytest.raises(ValueError, match="different frame sizes"):
        render_reel([small, big], tmp_path / "x.mp4")


def _red_pixels(img: np.ndarray) -> int:
    r, g, b = (img[..., c].astype(int) for c in range(3))
    return int(((r > 180) & (g < 110) & (b < 110)).sum())


def test_overlay_shows_hazards_reason_and_score(episode_dir):
    ep = load_episode(episode_dir)
    scene_w = 480
    with_hazard = render_frame(ep, 5)  # step 4: judged, hazard p ≥ 0.5
    clean = dataclasses.replace(ep, steps=[
        dataclasses.replace(s, judgement=dataclasses.replace(s.judgement, hazards=()) if s.judgement else None,
                            hazards_true=[]) for s in ep.steps])
    without = render_frame(clean, 5)
    panel_h, panel_w = with_hazard[:, scene_w:], without[:, scene_w:]
    differ = (panel_h != panel_w).any(axis=2)
    assert differ.sum() > 500  # the hazard lines are drawn...
    assert _red_pixels(panel_h[differ]) > 100 and _red_pixels(panel_w[differ]) == 0  # ...in red
    # a reason and a score change the panel: compare against an episode with no judgements at all
    blank = render_frame(dataclasses.replace(ep, steps=[dataclasses.replace(s, judgement=None, reward_terms={}) for s in ep.steps]), 5)
    assert np.abs(panel_w.astype(int) - blank[:, scene_w:]).sum(axis=2).astype(bool).sum() > 2000
    # the scene area holds the upscaled env frame, not the panel
    scene = cv2.resize(ep.frames[5], (scene_w, scene_w), interpolation=cv2.INTER_NEAREST)
    assert np.abs(with_hazard[:scene_w, :scene_w].astype(int) - scene).mean() < 2
    # success banner only once success happened (last step)
    assert not np.array_equal(render_frame(ep, STEPS)[:20, :scene_w], cv2.resize(ep.frames[STEPS], (scene_w, scene_w), interpolation=cv2.INTER_NEAREST)[:20])


def test_gif_and_summary_png(episode_dir, tmp_path):
    Image = pytest.importorskip("PIL.Image")
    ep = load_episode(episode_dir)
    written = render_episode(ep, tmp_path / "ep.mp4", gif=True)
    assert [p.suffix for p in written] == [".mp4", ".gif"]
    with Image.open(written[1]) as im:
        assert im.size[0] <= 320
        n = im.n_frames
    assert n == 7  # 13 frames at 20 fps → every 2nd (≤ 10 fps), ending on the last one
    png = render_summary_png(ep, tmp_path / "summary.png")
    img = cv2.imread(str(png))
    assert img is not None and img.shape[1] == 1000 and img.std() > 10


def test_gif_without_pillow_uses_ffmpeg(episode_dir, tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "PIL", None)  # import PIL now raises ImportError
    (out,) = render_episode(load_episode(episode_dir), tmp_path / "ep.gif")
    assert out.read_bytes()[:6] == b"GIF89a"
    cap = cv2.VideoCapture(str(out))
    assert cap.get(cv2.CAP_PROP_FRAME_WIDTH) <= 320 and len(_read_video(out)) == 7


def test_mp4_falls_back_to_opencv(episode_dir, tmp_path, monkeypatch, caplog):
    import imageio_ffmpeg

    def broken(*a, **k):
        raise RuntimeError("no libx264 here")

    monkeypatch.setattr(imageio_ffmpeg, "write_frames", broken)
    with caplog.at_level(logging.WARNING, logger=video_mod.__name__):
        (out,) = render_episode(load_episode(episode_dir), tmp_path / "ep.mp4")
    assert any("mp4v" in r.message for r in caplog.records)
    assert len(_read_video(out)) == STEPS + 1
