"""`robo-prm` — train, replay, evaluate and manage tasks.

    robo-prm train --task push_tool_from_edge --algo sac [--steps N] [--judge.backend rules] ...
    robo-prm train --resume runs/<run>
    robo-prm replay runs/<run>/episodes/ep_0007 --out ep7.mp4 [--gif] [--summary ep7.png] [--fps 5]
    robo-prm replay EP1 EP2 ... --out reel.mp4         # several episodes, one video
    robo-prm enjoy runs/<run> [--episodes 3] [--replay]
    robo-prm eval runs/<run> [--episodes 20]
    robo-prm tasks list | show NAME|FILE | validate FILE | render NAME|FILE --out x.png
    robo-prm perception collect | train-clip | train-captioner | caption | goal-sim
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from robo_prm.config_io import ConfigError, parse_overrides


class CliError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


# ---- train -------------------------------------------------------------------------
def cmd_train(args, extra: list[str]) -> int:
    from robo_prm.config import config_to_yaml, load_train_config
    from robo_prm.train import resume, train

    if args.resume:
        if extra:
            raise CliError("--resume continues a run with its saved config; only --steps may change")
        if not Path(args.resume).is_dir():
            raise CliError(f"{args.resume}: no such run directory")
        run_dir = resume(Path(args.resume), args.steps)
    else:
        overrides = parse_overrides(extra)
        for key in ("task", "algo", "steps", "seed", "device"):
            value = getattr(args, key)
            if value is not None:
                overrides[key] = value
        config = args.config or _task_train_config(overrides.get("task"), overrides.get("algo"))
        cfg = load_train_config(config, overrides)
        from robo_prm.envs.task import load_task
        from robo_prm.train.run import sync_gamma

        load_task(cfg.task)
        print(config_to_yaml(sync_gamma(cfg)), end="")
        run_dir = train(cfg)
    summary = json.loads((run_dir / "summary.json").read_text())
    print(json.dumps(summary, indent=1))
    print(f"run directory: {run_dir}")
    if args.replay:
        from robo_prm.train.showcase import record_showcase

        out = record_showcase(run_dir)
        if out is not None:
            print(f"replay video: {out} (episodes in {run_dir / 'showcase'})")
    return 0


def _task_train_config(task: str | None, algo: str | None) -> str | None:
    """The shipped per-task train config (configs/train/<task>.yaml) when it fits the asked algorithm."""
    from robo_prm.config import train_configs_dir
    from robo_prm.config_io import load_yaml

    path = train_configs_dir() / f"{task or 'reach_tool'}.yaml"
    if path.exists() and algo in (None, load_yaml(path).get("algo")):
        return str(path)
    return None


# ---- replay ------------------------------------------------------------------------
def _replay(episode_dir: Path, out: Path, gif: bool, summary: Path | None, fps: float | None = None):
    from robo_prm.replay.episode import load_episode
    from robo_prm.replay.plots import render_summary_png
    from robo_prm.replay.video import render_episode

    ep = load_episode(episode_dir)
    written = render_episode(ep, out, fps=fps, gif=gif)
    if summary:
        written.append(render_summary_png(ep, summary))
    return written


def cmd_replay(args, extra) -> int:
    from robo_prm.replay.episode import EpisodeError, load_episode
    from robo_prm.replay.video import render_reel

    if extra:
        raise CliError(f"unknown option '{extra[0]}'")
    if args.fps is not None and not args.fps > 0:
        raise CliError(f"--fps must be positive, got {args.fps}")
    out = Path(args.out)
    try:
        if len(args.episode) > 1:
            if args.gif or args.summary or out.suffix.lower() == ".gif":
                raise CliError("--gif, --summary and .gif take one episode; several episodes make one MP4")
            written = [render_reel([load_episode(Path(e)) for e in args.episode], out, fps=args.fps, hold_s=1.0)]
        else:
            written = _replay(Path(args.episode[0]), out, args.gif, Path(args.summary) if args.summary else None, args.fps)
    except EpisodeError as exc:
        raise CliError(str(exc)) from None
    for p in written:
        print(p)
    return 0


# ---- eval / enjoy ----------------------------------------------------------------------
def _load_run(run_dir: str):
    from robo_prm.train import load_policy

    if not Path(run_dir).is_dir():
        raise CliError(f"{run_dir}: no such run directory")
    return load_policy(Path(run_dir))


def cmd_eval(args, extra) -> int:
    from robo_prm.train.rollouts import run_episodes, summarize

    cfg, task, policy = _load_run(args.run)
    results = run_episodes(policy, task, cfg, range(args.seed, args.seed + args.episodes))
    summary = summarize(results)
    print(f"{'seed':>6} {'success':>8} {'return':>8} {'hazards':>8} {'steps':>6}")
    for r in results:
        print(f"{r.seed:>6} {str(r.success):>8} {r.env_return:>8.2f} {r.hazard_events:>8} {r.steps:>6}")
    print(json.dumps(summary, indent=1))
    out = Path(args.run) / "eval.json"
    out.write_text(json.dumps({"summary": summary, "episodes": [r.__dict__ for r in results]}, indent=1))
    return 0


def cmd_enjoy(args, extra) -> int:
    from robo_prm.judge import make_judge
    from robo_prm.train.rollouts import run_episodes, summarize

    cfg, task, policy = _load_run(args.run)
    out_dir = Path(args.out or Path(args.run) / "enjoy")
    judge = make_judge(cfg.judge)
    results = run_episodes(policy, task, cfg, range(args.seed, args.seed + args.episodes), judge=judge, record_dir=out_dir, n_record=args.episodes, run=Path(args.run).name)
    for r in results:
        line = f"seed {r.seed}: success={r.success} hazard_events={r.hazard_events} steps={r.steps} → {r.path}"
        if args.replay and r.path:
            _replay(Path(r.path), Path(r.path).with_suffix(".mp4"), gif=False, summary=None)
            line += f" (+ {Path(r.path).with_suffix('.mp4')})"
        print(line)
    print(json.dumps(summarize(results), indent=1))
    return 0


# ---- tasks -------------------------------------------------------------------------
def cmd_tasks(args, extra) -> int:
    from robo_prm.envs.task import load_task, shipped_tasks

    if extra:
        raise CliError(f"unknown option '{extra[0]}'")
    if args.action == "list":
        from robo_prm.envs import env_id

        for name in shipped_tasks():
            t = load_task(name)
            print(f"{name:<22} {env_id(name):<32} {t.spec.goal}")
        return 0
    if not args.target:
        raise CliError(f"tasks {args.action} needs a task name or file")
    task = load_task(args.target)
    if args.action == "validate":
        s = task.spec
        print(f"ok: {task.source} — task '{s.name}', {len(task.movable)} object(s), {len(s.milestones)} milestone(s), {len(s.hazards)} hazard(s)")
        return 0
    if args.action == "show":
        from robo_prm.judge.prompt import task_text

        print(task_text(task.text))
        return 0
    if args.action == "render":
        return _render_task(task, args)
    raise CliError(f"unknown tasks action '{args.action}'")


def _render_task(task, args) -> int:
    import cv2
    import numpy as np

    from robo_prm.describe import DescribeWrapper
    from robo_prm.envs.tidy_env import TidyTableEnv
    from robo_prm.replay.draw import put, wrap

    env = DescribeWrapper(TidyTableEnv(task, render_mode="rgb_array", width=args.size, height=args.size))
    try:
        _, info = env.reset(seed=args.seed)
        frame = env.render()
    finally:
        env.close()
    text = info["description"].text
    width = max(480, args.size)
    scale = 0.5
    img = cv2.resize(frame, (width, int(frame.shape[0] * width / frame.shape[1])), interpolation=cv2.INTER_NEAREST)
    lines = wrap(text, width - 20, scale)
    panel = np.full((22 * len(lines) + 20, width, 3), 30, dtype=np.uint8)
    for i, line in enumerate(lines):
        put(panel, line, 10, 24 + 22 * i, scale)
    out = np.vstack([img, panel])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    if not cv2.imwrite(str(args.out), cv2.cvtColor(out, cv2.COLOR_RGB2BGR)):
        raise CliError(f"{args.out}: could not write the image (use a .png or .jpg name)")
    print(text)
    print(f"wrote {args.out}")
    return 0


# ---- entry point -------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="robo-prm", description="Robot-manipulation RL with language-model progress rewards.")
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="train SAC/PPO on a task with the blended LLM reward",
                       description="Any config field can be set as --section.field VALUE, e.g. --judge.backend rules --reward.judge_every 8.")
    t.add_argument("--task", help="shipped task name or path to a task YAML (default: reach_tool)")
    t.add_argument("--algo", choices=["sac", "ppo"])
    t.add_argument("--steps", type=int, help="total env steps")
    t.add_argument("--seed", type=int)
    t.add_argument("--device", help="torch device (default cpu)")
    t.add_argument("--config", help="train config YAML, or a name under robo_prm/configs/train/")
    t.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its latest checkpoint")
    t.add_argument("--replay", action="store_true", help="write replay.mp4: a success, a hazard and a failure of the final policy, with the judge's reasons")
    t.set_defaults(func=cmd_train)

    r = sub.add_parser("replay", help="episode folder → video with the judge's score, reason and hazards")
    r.add_argument("episode", nargs="+", help="an episode folder (runs/<run>/episodes/ep_0007); several make one MP4")
    r.add_argument("--out", required=True, help="output .mp4 (H.264) or .gif")
    r.add_argument("--fps", type=float, help="env steps per second of video (default: the recorded control rate)")
    r.add_argument("--gif", action="store_true", help="also write a GIF next to the MP4")
    r.add_argument("--summary", help="also write a PNG plot of progress, reward terms and hazards")
    r.set_defaults(func=cmd_replay)

    for name, helptext, func in (("eval", "success rate, return and hazard events of a trained policy", cmd_eval),
                                 ("enjoy", "run a trained policy, judge and record its episodes", cmd_enjoy)):
        e = sub.add_parser(name, help=helptext)
        e.add_argument("run", help="a run directory")
        e.add_argument("--episodes", type=int, default=20 if name == "eval" else 3)
        e.add_argument("--seed", type=int, default=100_000)
        if name == "enjoy":
            e.add_argument("--out", help="where to write episodes (default RUN/enjoy)")
            e.add_argument("--replay", action="store_true", help="write an MP4 next to each episode")
        e.set_defaults(func=func)

    k = sub.add_parser("tasks", help="list, show, validate or render task files")
    k.add_argument("action", choices=["list", "show", "validate", "render"])
    k.add_argument("target", nargs="?", help="task name or YAML path")
    k.add_argument("--out", default="task.png", help="render: output image")
    k.add_argument("--seed", type=int, default=0)
    k.add_argument("--size", type=int, default=480, help="render: frame size in pixels")
    k.set_defaults(func=cmd_tasks)
    from robo_prm.finetune.cli import add_finetune_commands
    add_finetune_commands(sub)
    from robo_prm.perception.cli import add_perception_commands
    add_perception_commands(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    try:
        return args.func(args, extra)
    except (CliError, ConfigError, FileNotFoundError) as exc:
        print(f"robo-prm: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
