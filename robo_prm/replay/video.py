"""Replay video: each env frame with the judge's view of it (score, reason, hazards, reward terms).

Layout (MP4)::

    +--------------------------+------------------+
    | scene (upscaled, ≥480 w) | step 7/12        |
    |  [SUCCESS banner]        | score 7.3/10 ███ |
    |                          | reason (wrapped) |
    +--------------------------+ hazards (red)    |
    | progress over episode  | | reward terms     |
    +--------------------------+------------------+

GIFs use a compact vertical layout (scene, strip, short panel) so they stay ≤ 320 px wide and readable.
Frame t of the video is episode frame t: frame 0 is the reset frame, frame t ≥ 1 shows step t-1's result
and judgement (see episode.py), so a video has exactly T = steps + 1 frames.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

import cv2
import numpy as np

from robo_prm.replay import draw
from robo_prm.replay.episode import Episode, StepRecord
from robo_prm.replay.panel import Pen, panel_captions, panel_hazards, panel_header, panel_reason, panel_terms
from robo_prm.types import Judgement

log = logging.getLogger(__name__)

MIN_SCENE_WIDTH = 480
GIF_MAX_WIDTH = 320
GIF_MAX_FPS = 10.0


def _even(n: float) -> int:
    n = int(round(n))
    return n + (n % 2)  # yuv420p needs even sizes


@dataclass(frozen=True)
class _Layout:
    scene_w: int
    scene_h: int
    strip_h: int
    panel_w: int
    panel_h: int
    side: bool  # panel right of scene+strip (MP4) or below them (compact GIF)
    scale: float  # base font scale

    @property
    def size(self) -> tuple[int, int]:  # (W, H)
        if self.side:
            return self.scene_w + self.panel_w, max(self.scene_h + self.strip_h, self.panel_h)
        return self.scene_w, self.scene_h + self.strip_h + self.panel_h

    @staticmethod
    def make(frame_hw: tuple[int, int], width: int, compact: bool, captions: bool = False) -> _Layout:
        h, w = frame_hw
        if compact:
            sw = _even(min(width, GIF_MAX_WIDTH))
            return _Layout(sw, _even(h * sw / w), 56, sw, 176, side=False, scale=0.38)
        sw = _even(max(width, MIN_SCENE_WIDTH))
        sh = _even(h * sw / w)
        # the panel needs ~520 px for 6 reason lines, 4 hazards and ~10 reward terms; state + pixel captions ~190 more
        return _Layout(sw, sh, 110, 420, _even(max(sh + 110, 520 + 190 * captions)), side=True, scale=0.5)


@dataclass(frozen=True)
class FrameInfo:
    """What frame t shows, with holds applied (the judge runs every k-th step; reasons are lazy).
    The MP4 overlay and the HTML viewer (html.py) both read these: one source for what a frame shows."""

    step: StepRecord | None
    judgement: Judgement | None  # the latest judgement at or before t
    judged_at: int | None  # the frame that judgement belongs to
    reason: str | None
    reason_at: int | None
    success: bool


def frame_infos(ep: Episode) -> list[FrameInfo]:
    out: list[FrameInfo] = []
    judgement = reason = None
    judged_at = reason_at = None
    success_from = next((i + 1 for i, s in enumerate(ep.steps) if s.success), None)
    if success_from is None and ep.meta.success:
        success_from = ep.num_frames - 1  # success known only from meta: mark the last frame
    for t in range(ep.num_frames):
        step = ep.step_for_frame(t)
        if step is not None and step.judgement is not None:
            judgement, judged_at = step.judgement, t
            if step.judgement.reason:
                reason, reason_at = step.judgement.reason, t
        out.append(FrameInfo(step, judgement, judged_at, reason, reason_at, success_from is not None and t >= success_from))
    return out




class _Renderer:
    def __init__(self, ep: Episode, layout: _Layout) -> None:
        self.ep = ep
        self.lay = layout
        self.infos = frame_infos(ep)
        self.progress = draw.forward_fill(ep.progress())
        self.strip = self._static_strip()

    # --- progress strip: drawn once, a cursor added per frame -------------------------------------
    def _strip_geometry(self) -> tuple[int, int, int, int]:
        lay = self.lay
        return 34, lay.scene_w - 10, 10, lay.strip_h - 20  # x0, x1, y_top (progress 1), y_bottom (progress 0)

    def _xy(self, t: float, p: float) -> tuple[float, float]:
        x0, x1, yt, yb = self._strip_geometry()
        n = max(self.ep.num_frames - 1, 1)
        return x0 + (x1 - x0) * t / n, yb - (yb - yt) * p

    def _static_strip(self) -> np.ndarray:
        lay = self.lay
        img = np.full((lay.strip_h, lay.scene_w, 3), 18, np.uint8)
        x0, x1, yt, yb = self._strip_geometry()
        s = lay.scale * 0.8
        for p in (0.0, 0.5, 1.0):
            y = int(self._xy(0, p)[1])
            cv2.line(img, (x0, y), (x1, y), (50, 50, 50), 1)
        draw.put(img, "1", 6, yt - 4, s, draw.GREY)
        draw.put(img, "0", 6, yb - 8, s, draw.GREY)
        draw.put(img, "progress", x0 + 4, yt + 3, s, draw.DIM)  # top-left: curves usually start low
        # hazard events along the bottom: red = judge (p ≥ 0.5), orange = simulator ground truth
        for t, info in enumerate(self.infos):
            if info.step is None:
                continue
            x = int(self._xy(t, 0)[0])
            if info.step.judgement is not None and info.step.judgement.hazard_names():
                cv2.line(img, (x, yb + 4), (x, yb + 9), draw.RED, 2)
            if info.step.hazards_true:
                cv2.line(img, (x, yb + 12), (x, yb + 17), draw.ORANGE, 2)
        ts = np.arange(self.ep.num_frames)
        xs, ys = self._xy(ts, self.progress)  # type: ignore[arg-type]  # arrays broadcast
        draw.polyline(img, xs, ys, draw.BLUE, 2)
        success_t = next((t for t, i in enumerate(self.infos) if i.success), None)
        if success_t is not None:
            x = int(self._xy(success_t, 0)[0])
            cv2.line(img, (x, yt), (x, yb), draw.GREEN, 1)
        return img

    def _strip_at(self, t: int) -> np.ndarray:
        img = self.strip.copy()
        x0, x1, yt, yb = self._strip_geometry()
        x = int(round(self._xy(t, 0)[0]))
        cv2.line(img, (x, yt - 4), (x, yb + 2), draw.WHITE, 1)
        p = self.progress[t]
        if np.isfinite(p):
            cv2.circle(img, (x, int(round(self._xy(t, p)[1]))), 4, draw.WHITE, -1, cv2.LINE_AA)
        return img

    # --- scene -------------------------------------------------------------------------------------
    def _scene_at(self, t: int) -> np.ndarray:
        lay = self.lay
        frame = self.ep.frames[t]
        # nearest keeps small sim renders crisp when the upscale is large; area/linear otherwise
        interp = cv2.INTER_NEAREST if lay.scene_w >= 4 * frame.shape[1] else cv2.INTER_LINEAR
        img = cv2.resize(frame, (lay.scene_w, lay.scene_h), interpolation=interp)
        if self.infos[t].success:
            bh = max(24, lay.scene_h // 10)
            band = img[:bh].astype(np.float32)
            img[:bh] = (0.35 * band + 0.65 * np.array(draw.GREEN, np.float32)).astype(np.uint8)
            scale = lay.scale * 1.6
            tw, th = draw.text_size("SUCCESS", scale, 2)
            cv2.putText(img, "SUCCESS", ((lay.scene_w - tw) // 2, (bh + th) // 2), draw.FONT, scale, (255, 255, 255), 2, cv2.LINE_AA)
        return img

    # --- panel -------------------------------------------------------------------------------------
    def _panel_at(self, t: int) -> np.ndarray:
        lay = self.lay
        img = np.full((lay.panel_h, lay.panel_w, 3), draw.PANEL_BG, np.uint8)
        pen = Pen(img, x=12, w=lay.panel_w - 24, s=lay.scale, compact=not lay.side)
        title = f"{self.ep.meta.task}  {self.ep.meta.algo}  seed {self.ep.meta.seed}"
        info = self.infos[t]
        y = panel_header(pen, title, t, self.ep.num_frames - 1, info)
        y = panel_reason(pen, y + 2, info, t)
        y = panel_hazards(pen, y + 4, info)
        if self.ep.pixel_captions is not None and lay.side:
            y = panel_captions(pen, y + 4, info, self.ep.pixel_captions[t])
        panel_terms(pen, y + 4, info)
        return img

    def frame(self, t: int) -> np.ndarray:
        lay = self.lay
        W, H = lay.size
        out = np.full((H, W, 3), draw.PANEL_BG, np.uint8)
        out[: lay.scene_h, : lay.scene_w] = self._scene_at(t)
        out[lay.scene_h : lay.scene_h + lay.strip_h, : lay.scene_w] = self._strip_at(t)
        if lay.side:
            out[: lay.panel_h, lay.scene_w :] = self._panel_at(t)
        else:
            out[lay.scene_h + lay.strip_h :, :] = self._panel_at(t)
        return out

    def frames(self, ts: range | None = None) -> Iterator[np.ndarray]:
        for t in ts if ts is not None else range(self.ep.num_frames):
            yield self.frame(t)


def render_frame(episode: Episode, t: int, width: int = MIN_SCENE_WIDTH, compact: bool = False) -> np.ndarray:
    """One overlay frame (RGB uint8) exactly as render_episode writes it; for previews and tests."""
    lay = _Layout.make(episode.frames.shape[1:3], width, compact, episode.pixel_captions is not None)
    return _Renderer(episode, lay).frame(t)


def _write_mp4(frames: Callable[[], Iterator[np.ndarray]], path: Path, size: tuple[int, int], fps: float) -> str:
    """H.264 via the ffmpeg inside imageio-ffmpeg (plays in browsers); OpenCV mp4v if that fails."""
    try:
        import imageio_ffmpeg

        gen = imageio_ffmpeg.write_frames(
            str(path), size, fps=fps, codec="libx264", pix_fmt_in="rgb24", pix_fmt_out="yuv420p",
            quality=None, macro_block_size=2,  # sizes are already even; never let it rescale
            output_params=["-crf", "20", "-preset", "fast", "-movflags", "+faststart"],
        )
        gen.send(None)
        try:
            for f in frames():
                gen.send(np.ascontiguousarray(f))
        finally:
            gen.close()  # raises if ffmpeg exited with an error
        return "libx264"
    except Exception as exc:  # missing binary, no libx264, broken pipe: the video still matters more
        log.warning("H.264 via imageio-ffmpeg failed (%s: %s); writing mp4v with OpenCV, which browsers may not play",
                    type(exc).__name__, exc)
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, size)
    if not writer.isOpened():
        raise RuntimeError(f"{path}: could not open a video writer (neither libx264 nor mp4v)")
    for f in frames():
        writer.write(cv2.cvtColor(f, cv2.COLOR_RGB2BGR))
    writer.release()
    return "mp4v"


def _write_gif(frames: list[np.ndarray], path: Path, fps: float) -> None:
    """Pillow (one adaptive palette); else ffmpeg's palettegen, which imageio-ffmpeg always ships."""
    duration_ms = int(round(1000 / fps))
    try:
        from PIL import Image
    except ImportError:
        Image = None
    if Image is not None:
        # one palette from a few sampled frames: far faster than quantising every frame, and no flicker
        sample = np.concatenate(frames[:: max(1, len(frames) // 6)][:6] + frames[-1:], axis=0)  # last: success colours
        palette = Image.fromarray(sample).quantize(colors=255, method=Image.Quantize.MEDIANCUT)
        images = [Image.fromarray(f).quantize(palette=palette, dither=Image.Dither.NONE) for f in frames]
        images[0].save(path, save_all=True, append_images=images[1:], duration=duration_ms, loop=0)
        return
    import imageio_ffmpeg

    h, w = frames[0].shape[:2]
    gen = imageio_ffmpeg.write_frames(
        str(path), (w, h), fps=fps, codec="gif", pix_fmt_in="rgb24", pix_fmt_out="pal8", quality=None,
        macro_block_size=1, ffmpeg_log_level="error", output_params=["-vf", "split[a][b];[a]palettegen[p];[b][p]paletteuse", "-loop", "0"],
    )
    gen.send(None)
    for f in frames:
        gen.send(np.ascontiguousarray(f))
    gen.close()


def render_episode(
    episode: Episode, out_path: str | Path, fps: float | None = None, gif: bool = False, width: int = MIN_SCENE_WIDTH
) -> list[Path]:
    """Write the overlay video; return the files written.

    out_path ending in .gif writes only a GIF; otherwise an MP4 at out_path, plus out_path.with_suffix(".gif")
    when gif=True. fps defaults to the episode's recorded fps. width is the scene's width in the MP4
    (at least 480); GIFs are ≤ 320 px wide and ≤ 10 fps (frames subsampled) in a compact layout.
    """
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fps = float(fps or episode.meta.fps or 20.0)
    hw = episode.frames.shape[1:3]
    written: list[Path] = []

    if out_path.suffix.lower() != ".gif":
        written.append(render_reel([episode], out_path, fps, width))

    if gif or out_path.suffix.lower() == ".gif":
        gif_path = out_path.with_suffix(".gif")
        stride = max(1, math.ceil(fps / GIF_MAX_FPS - 1e-9))
        r = _Renderer(episode, _Layout.make(hw, GIF_MAX_WIDTH, compact=True))
        ts = list(range(0, episode.num_frames, stride))
        if ts[-1] != episode.num_frames - 1:
            ts.append(episode.num_frames - 1)  # always show how it ended
        _write_gif([r.frame(t) for t in ts], gif_path, fps / stride)
        written.append(gif_path)
    return written


def render_reel(episodes: Sequence[Episode], out_path: str | Path, fps: float | None = None,
                width: int = MIN_SCENE_WIDTH, hold_s: float = 0.0) -> Path:
    """Several episodes one after another in one MP4, each with its own overlay and progress strip;
    each episode's last frame is held hold_s seconds so a viewer sees how it ended. fps defaults to
    the first episode's recorded fps."""
    if not episodes:
        raise ValueError("render_reel: no episodes")
    sizes = {tuple(ep.frames.shape[1:3]) for ep in episodes}
    if len(sizes) > 1:
        raise ValueError(f"render_reel: episodes have different frame sizes {sorted(sizes)}")
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fps = float(fps or episodes[0].meta.fps or 20.0)
    lay = _Layout.make(sizes.pop(), width, compact=False, captions=any(ep.pixel_captions is not None for ep in episodes))
    hold = int(round(hold_s * fps))

    def frames() -> Iterator[np.ndarray]:
        for ep in episodes:
            frame = None
            for frame in _Renderer(ep, lay).frames():
                yield frame
            for _ in range(hold):
                yield frame

    codec = _write_mp4(frames, out_path, lay.size, fps)
    n = sum(ep.num_frames + hold for ep in episodes)
    log.info("wrote %s (%s, %d episode(s), %d frames, %dx%d)", out_path, codec, len(episodes), n, *lay.size)
    return out_path
