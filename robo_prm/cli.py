"""`robo-prm` — train, replay, evaluate and manage tasks.

    robo-prm train --task push_tool_from_edge --algo sac [--steps N] [--judge.backend rules] ...
    robo-prm train --resume runs/<run>
    robo-prm replay runs/<run>/episodes/ep_0007 --out ep7.mp4 [--gif] [--summary ep7.png] [--fps 5]
    robo-prm replay EP1 EP2 ... --out reel.mp4         # several episodes, one video
    robo-prm replay runs/<run>/episodes --html eps.html # the episodes in one page: scrubber, curve, reasons
    robo-prm enjoy runs/<run> [--episodes 3] [--replay]
    robo-prm eval runs/<run> [--episodes 20]
    robo-prm tasks list | show NAME|FILE | validate FILE | render NAME|FILE --out x.png
    robo-prm tasks expert NAME|FILE [--episodes 20] [--perturb 0.5] [--json out.json]
    robo-prm tasks generate --n 200 --seed 0 --out generated/
    robo-prm perception collect | train-clip | train-captioner | caption | goal-sim

Every flag is a field of a config dataclass, spelt as the field (`robo_prm.config_flags`): the
`*Args` classes below, `TrainConfig` (robo_prm/config.py), and the finetune/perception ones.
"""
from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from robo_prm.config_flags import (ConfigParser, add_config_args, config_command, config_fields, config_from_args, free_flags,
                                   given_flags, opt)
from robo_prm.config_io import ConfigError


@dataclass
class TrainArgs:
    """`robo-prm train` options beside the TrainConfig fields."""

    config: str | None = opt(None, "train config YAML, or a name under robo_prm/configs/train/; "
                                   "unset, configs/train/<task>.yaml is used when it fits --algo")
    resume: str | None = opt(None, "continue the run folder RESUME from its latest checkpoint (only --steps may change)")
    trust_run: bool = opt(False, "with --resume: load SB3's pickled files (model.zip fields, replay buffer) of a run folder "
                                 "this machine did not sign; loading a pickle can run code, so only for run folders you trust")
    replay: bool = opt(False, "after training write replay.mp4: a success, a hazard and a failure of the final policy, "
                              "with the judge's reasons")


@dataclass
class ReplayArgs:
    episode: list[str] = opt(help="an episode folder (runs/<run>/episodes/ep_0007); several make one MP4", positional=True)
    out: str | None = opt(None, "output .mp4 (H.264) or .gif")
    html: str | None = opt(None, "write a self-contained HTML viewer here (frames, scrubber, progress curve, reasons, "
                                 "hazards, reward terms); EPISODE may also be a folder of episodes")
    fps: float | None = opt(None, "env steps per second of video (null: the recorded control rate)")
    gif: bool = opt(False, "also write a GIF next to the MP4")
    summary: str | None = opt(None, "also write a PNG plot of progress, reward terms and hazards here")
    pixel_captions: bool = opt(False, "MP4: show beside the scene text the judge read what the perception model reads "
                                      "off each frame (orange where they differ)")
    perception: str | None = opt(None, "with --pixel_captions: a perception folder (null: the shipped one)")
    task: str | None = opt(None, "with --pixel_captions: the episode's task file, when it is not a shipped task")
    caption_model: str | None = opt(None, "with --pixel_captions: an open_clip CoCa captioner folder (`robo-prm perception "
                                          "train-coca`) whose captions are shown (null: the perception model's)")


@dataclass
class EvalArgs:
    run: str = opt(help="a run directory", positional=True)
    episodes: int = opt(20, "episodes to run, one per seed")
    seed: int = opt(100_000, "seed of the first episode")
    best: bool = opt(False, "the run's best evaluated policy (best_model.zip) instead of its final one")


@dataclass
class EnjoyArgs(EvalArgs):
    episodes: int = opt(3, "episodes to run, judge and record")
    out: str | None = opt(None, "where to write the episodes (null: RUN/enjoy)")
    replay: bool = opt(False, "write an MP4 next to each episode")


@dataclass
class TasksArgs:
    action: Literal["list", "show", "validate", "render", "expert", "generate"] = opt(help="what to do", positional=True)
    target: str | None = opt(None, "task name or YAML path", positional=True)
    out: str | None = opt(None, "render: output image (null: task.png); generate: output folder (null: generated_tasks)")
    seed: int = opt(0, "render: reset seed; expert: seed of the first episode; generate: the generator's seed")
    size: int = opt(480, "render: the frame is rendered at this many pixels square (the image is scaled to at least 480 "
                         "wide so its caption reads)")
    episodes: int = opt(20, "expert: episodes to run, one per seed", min=1)
    perturb: float = opt(0.0, "expert: probability of a random action per step", min=0.0, max=1.0)
    json: str | None = opt(None, "expert: also write {success_rate, mean_length, episodes} as JSON here")
    n: int = opt(20, "generate: tasks to draw (those whose plan succeeds on 4 of 5 seeds are kept)", min=1)


class CliError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


# ---- train -------------------------------------------------------------------------
def _train_overrides(args, extra: list[str]) -> dict:
    """{dotted field: value} of the TrainConfig flags given (free keys under --sac. / --ppo. included)."""
    from robo_prm.config import TrainConfig

    return {**given_flags(args, TrainConfig),
            **free_flags(extra, TrainConfig, known=tuple(path for path, _, _ in config_fields(TrainArgs)))}


def train_config_from_args(args, extra: list[str]):
    """The TrainConfig of `robo-prm train`: dataclass defaults ← configs/train/<task>.yaml when it fits
    the algorithm ← --config FILE ← the flags given."""
    from robo_prm.config import load_train_config, task_train_config

    overrides = _train_overrides(args, extra)
    config = config_from_args(TrainArgs, args).config or task_train_config(overrides.get("task"), overrides.get("algo"))
    return load_train_config(config, overrides)


def cmd_train(args, extra: list[str]) -> int:
    from robo_prm.config import config_to_yaml
    from robo_prm.train import resume, train

    opts = config_from_args(TrainArgs, args)
    if opts.resume:
        given = _train_overrides(args, extra)
        if set(given) - {"steps"} or opts.config:
            raise CliError("--resume continues a run with its saved config; only --steps may change")
        if not Path(opts.resume).is_dir():
            raise CliError(f"{opts.resume}: no such run directory")
        run_dir = resume(Path(opts.resume), given.get("steps"), trust=opts.trust_run)
    else:
        cfg = train_config_from_args(args, extra)
        from robo_prm.envs.task import load_task
        from robo_prm.train.run import sync_gamma

        load_task(cfg.task)
        print(config_to_yaml(sync_gamma(cfg)), end="")
        run_dir = train(cfg)
    summary = json.loads((run_dir / "summary.json").read_text())
    print(json.dumps(summary, indent=1))
    print(f"run directory: {run_dir}")
    if opts.replay:
        from robo_prm.train.showcase import record_showcase

        out = record_showcase(run_dir)
        if out is not None:
            print(f"replay video: {out} (episodes in {run_dir / 'showcase'})")
    return 0


# ---- replay ------------------------------------------------------------------------
def cmd_replay(args: ReplayArgs) -> int:
    from robo_prm.replay.episode import EpisodeError
    from robo_prm.replay.files import render_files

    if args.fps is not None and not args.fps > 0:
        raise CliError(f"--fps must be positive, got {args.fps}")
    if args.out is None and args.html is None:
        raise CliError("replay: give --out (video) and/or --html (viewer page)")
    if args.html is not None:
        from robo_prm.replay.html import write_viewer

        try:
            print(write_viewer(args.episode, args.html))
        except EpisodeError as exc:
            raise CliError(str(exc)) from None
        if args.out is None:
            return 0
    out = Path(args.out)
    if len(args.episode) > 1 and (args.gif or args.summary or out.suffix.lower() == ".gif"):
        raise CliError("--gif, --summary and .gif take one episode; several episodes make one MP4")
    try:
        written = render_files(args.episode, out, args.gif, Path(args.summary) if args.summary else None,
                               args.fps, args.pixel_captions, args.perception, args.task, args.caption_model)
    except EpisodeError as exc:
        raise CliError(str(exc)) from None
    for p in written:
        print(p)
    return 0


# ---- eval / enjoy ----------------------------------------------------------------------
def _load_run(run_dir: str, best: bool = False):
    from robo_prm.train import load_policy

    if not Path(run_dir).is_dir():
        raise CliError(f"{run_dir}: no such run directory")
    return load_policy(Path(run_dir), best)


def cmd_eval(args: EvalArgs) -> int:
    from robo_prm.train.rollouts import run_episodes, summarize

    cfg, task, policy = _load_run(args.run, args.best)
    results = run_episodes(policy, task, cfg, range(args.seed, args.seed + args.episodes))
    summary = summarize(results)
    print(f"{'seed':>6} {'success':>8} {'return':>8} {'hazards':>8} {'steps':>6}")
    for r in results:
        print(f"{r.seed:>6} {str(r.success):>8} {r.env_return:>8.2f} {r.hazard_events:>8} {r.steps:>6}")
    print(json.dumps(summary, indent=1))
    out = Path(args.run) / ("eval_best.json" if args.best else "eval.json")
    out.write_text(json.dumps({"summary": summary, "episodes": [r.__dict__ for r in results]}, indent=1))
    return 0


def cmd_enjoy(args: EnjoyArgs) -> int:
    from robo_prm.judge import make_judge
    from robo_prm.train.rollouts import run_episodes, summarize

    cfg, task, policy = _load_run(args.run, args.best)
    out_dir = Path(args.out or Path(args.run) / "enjoy")
    judge = make_judge(cfg.judge)
    results = run_episodes(policy, task, cfg, range(args.seed, args.seed + args.episodes), judge=judge, record_dir=out_dir, n_record=args.episodes, run=Path(args.run).name)
    for r in results:
        line = f"seed {r.seed}: success={r.success} hazard_events={r.hazard_events} steps={r.steps} → {r.path}"
        if args.replay and r.path:
            from robo_prm.replay.files import render_files

            render_files([Path(r.path)], Path(r.path).with_suffix(".mp4"))
            line += f" (+ {Path(r.path).with_suffix('.mp4')})"
        print(line)
    print(json.dumps(summarize(results), indent=1))
    return 0


# ---- tasks -------------------------------------------------------------------------
def cmd_tasks(args: TasksArgs) -> int:
    from robo_prm.envs.task import load_task, shipped_tasks

    if args.action == "list":
        from robo_prm.envs import env_id

        for name in shipped_tasks():
            t = load_task(name)
            print(f"{name:<22} {env_id(name):<32} {t.spec.goal}")
        return 0
    if args.action == "generate":
        return _generate_tasks(args)
    if not args.target:
        raise CliError(f"tasks {args.action} needs a task name or file")
    task = load_task(args.target)
    if args.action == "expert":
        return _run_expert(task, args)
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


def _run_expert(task, args) -> int:
    from robo_prm.envs.experts import run_expert

    if task.plan is None:
        raise CliError(f"{task.source}: task '{task.name}' has no scripted plan (add an `expert:` list, docs/TASKS.md)")
    r = run_expert(task, args.episodes, args.seed, args.perturb)
    print(f"{r['task']}: plan succeeded {r['successes']} / {r['episodes']} ({100 * r['success_rate']:.0f} %), mean length "
          f"{r['mean_length']:.1f} steps (seeds {args.seed}..{args.seed + args.episodes - 1}, perturb {args.perturb})")
    if r["solved_at_reset"]:
        print(f"warning: {task.source}: the success already holds at reset in {r['solved_at_reset']} of {r['episodes']} "
              f"episodes (a start zone overlaps the goal's place? docs/TASKS.md, 'The scene')")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(r, indent=1))
    return 0


def _generate_tasks(args) -> int:
    from robo_prm.envs.generate import generate

    out = Path(args.out or "generated_tasks")
    r = generate(args.n, args.seed, out, progress=lambda i, line: print(line, flush=True))
    print(f"kept {r['kept']} of {r['n']} tasks ({100 * r['kept_fraction']:.0f} %) in {out}; splits {r['splits']}")
    return 0


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
    path = Path(args.out or "task.png")
    path.parent.mkdir(parents=True, exist_ok=True)
    if not cv2.imwrite(str(path), cv2.cvtColor(out, cv2.COLOR_RGB2BGR)):
        raise CliError(f"{path}: could not write the image (use a .png or .jpg name)")
    print(text)
    print(f"wrote {path}")
    return 0


# ---- entry point -------------------------------------------------------------------
TRAIN_HELP = """Every TrainConfig field (robo_prm/config.py) is a flag: --field VALUE, or --section.field VALUE for
the sections, e.g. --judge.backend rules --reward.judge_every 8. Values are read as in YAML (null, true,
a,b for lists). Layers, later wins: the defaults shown ← configs/train/<task>.yaml when it fits --algo
(reach_tool.yaml: 20000 steps) ← --config FILE; then the file's when_pixels section when the run describes
from pixels ← flags. The run folder's config.yaml holds the result."""


def _train_flags(parser) -> None:
    from robo_prm.config import TrainConfig

    add_config_args(parser, TrainArgs, "command")
    add_config_args(parser, TrainConfig, "TrainConfig")


def build_parser() -> ConfigParser:
    p = ConfigParser(prog="robo-prm", description="Robot-manipulation RL with language-model progress rewards.")
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="train SAC/PPO on a task with the blended LLM reward", description=TRAIN_HELP,
                       usage="robo-prm train [--config FILE | --resume RUN_DIR [--steps N]] [--replay] "
                             "[--field VALUE] [--section.field VALUE] ...")
    t.defer(_train_flags)
    t.set_defaults(func=cmd_train)
    for name, cls, run, helptext in (
            ("replay", ReplayArgs, cmd_replay, "episode folder → video with the judge's score, reason and hazards"),
            ("eval", EvalArgs, cmd_eval, "success rate, return and hazard events of a trained policy"),
            ("enjoy", EnjoyArgs, cmd_enjoy, "run a trained policy, judge and record its episodes"),
            ("tasks", TasksArgs, cmd_tasks, "list, show, validate, render task files; run their plans; generate tasks")):
        c = sub.add_parser(name, help=helptext)
        c.defer(lambda parser, cls=cls: add_config_args(parser, cls))
        c.set_defaults(func=config_command(cls, run))
    from robo_prm.finetune.cli import add_finetune_commands
    add_finetune_commands(sub)
    tune = sub.add_parser("tune", help="Optuna study of the blend's LLM weight, judge_every, safety_weight and learning rate",
                          usage="robo-prm tune [--task T] [--trials N] [--study NAME] [--storage URL] [--workers K] [--steps S] "
                                "[--seeds 0,1,2] [--field VALUE] ... | robo-prm tune --report NAME [--storage URL]")
    tune.defer(_tune_args)
    tune.set_defaults(func=cmd_tune)
    perception = sub.add_parser("perception", help="frames → captions and CLIP features: collect data, train, inspect")
    perception.defer(_perception_commands)
    return p


def _tune_args(parser) -> None:
    from robo_prm.train.tune import add_tune_args

    add_tune_args(parser)


def cmd_tune(args, extra: list[str]) -> int:
    from robo_prm.train.tune import cmd_tune as run

    return run(args, extra)


def _perception_commands(parser) -> None:
    from robo_prm.perception.cli import add_perception_commands

    add_perception_commands(parser)


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
