"""Replay stage: recorded episode folders (episode.py), overlay videos (video.py), summary plots (plots.py)."""
from robo_prm.replay.episode import Episode, EpisodeError, EpisodeMeta, EpisodeWriter, StepRecord, load_episode
from robo_prm.replay.plots import render_summary_png
from robo_prm.replay.video import render_episode, render_frame, render_reel

__all__ = [
    "Episode", "EpisodeError", "EpisodeMeta", "EpisodeWriter", "StepRecord", "load_episode",
    "render_episode", "render_frame", "render_reel", "render_summary_png",
]
