"""What `robo-prm train --replay` shows: a few evaluation episodes of the final policy, picked so the
video tells the story — a success (the score rising), one where a hazard held (flagged in red) and a
failure, where the policy has any — recorded with the judge's reasons and joined into one MP4."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from robo_prm.train.rollouts import EpisodeResult, run_episodes

SHOWCASE_FPS = 5.0  # env steps per second of video: the recorded 25 fps is too fast to read the reasons
HOLD_S = 1.5  # each episode's last frame stays this long


def pick_showcase(results: Sequence[EpisodeResult], k: int = 3) -> list[int]:
    """Seeds of up to k episodes: the first success, the first with a hazard, the first failure, then
    the rest in order. A seed is picked once, so one episode can stand for two kinds."""
    picks: list[int] = []
    for wanted in (lambda r: r.success, lambda r: r.hazard_steps > 0, lambda r: not r.success):
        found = next((r.seed for r in results if wanted(r) and r.seed not in picks), None)
        if found is not None:
            picks.append(found)
    picks += [r.seed for r in results if r.seed not in picks]
    return picks[:k]


def record_showcase(run_dir: Path, k: int = 3) -> Path | None:
    """Run the final policy unjudged (cheap) on the evaluation seeds, record the picked episodes with
    reasons under run_dir/showcase/, write run_dir/replay.mp4 and replay_summary.png; the MP4's path."""
    from robo_prm.judge import make_judge
    from robo_prm.replay import load_episode, render_reel, render_summary_png
    from robo_prm.train.run import eval_seeds, load_policy

    cfg, task, policy = load_policy(run_dir)
    picked = pick_showcase(run_episodes(policy, task, cfg, eval_seeds(cfg)), k)
    if not picked:
        return None
    judge = make_judge(cfg.judge)
    try:
        recorded = run_episodes(policy, task, cfg, picked, judge=judge, record_dir=run_dir / "showcase",
                                n_record=len(picked), run=run_dir.name, env_steps=cfg.steps)
    finally:
        judge.close()
    episodes = [load_episode(Path(r.path)) for r in recorded if r.path]
    out = render_reel(episodes, run_dir / "replay.mp4", fps=SHOWCASE_FPS, hold_s=HOLD_S)
    render_summary_png(episodes[0], run_dir / "replay_summary.png")
    return out
