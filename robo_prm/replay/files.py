"""Episode folders → files on disk: the MP4 (and GIF, summary PNG) of one episode or one reel of several, with the
perception model's pixel captions beside the scene text where asked. `robo-prm replay` and `robo-prm enjoy` call it."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from robo_prm.replay.episode import Episode, load_episode


def with_pixel_captions(ep: Episode, pixel_captions: bool, perception: str | None = None,
                        task: str | None = None, caption_model: str | None = None) -> Episode:
    if not pixel_captions:
        return ep
    from robo_prm.replay.captions import add_pixel_captions

    return add_pixel_captions(ep, perception, task, caption_model=caption_model)


def render_files(episodes: Sequence[str | Path], out: Path, gif: bool = False, summary: Path | None = None,
                 fps: float | None = None, pixel_captions: bool = False, perception: str | None = None,
                 task: str | None = None, caption_model: str | None = None) -> list[Path]:
    """One episode: its video (+ GIF, + summary PNG); several: one reel MP4. Returns the paths written."""
    from robo_prm.replay.video import render_episode, render_reel

    eps = [with_pixel_captions(load_episode(Path(e)), pixel_captions, perception, task, caption_model)
           for e in episodes]
    if len(eps) > 1:
        return [render_reel(eps, out, fps=fps, hold_s=1.0)]
    written = render_episode(eps[0], out, fps=fps, gif=gif)
    if summary:
        from robo_prm.replay.plots import render_summary_png

        written.append(render_summary_png(eps[0], summary))
    return written
