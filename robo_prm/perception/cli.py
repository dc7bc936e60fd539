"""CLI wiring for `robo-prm perception collect | train-clip | train-captioner | caption | goal-sim`.

    robo-prm perception collect --tasks reach_tool,tidy_table --frames 14000 --size 128 --out DIR
    robo-prm perception train-clip --data DIR --out CLIP_DIR [--epochs 8 --lr 2e-3 ...]
    robo-prm perception train-captioner --data DIR --init CLIP_DIR --out DIR
    robo-prm perception caption --task tidy_table --seed 0 [--weights DIR]      # pixel vs state caption
    robo-prm perception goal-sim --task place_cup_in_bin [--clip.arch ViT-B-32 --clip.weights /path]
"""
from __future__ import annotations

import json
import shlex
import sys
from dataclasses import fields

from robo_prm.config_io import parse_overrides


def _train_config(args, extra, stage: str):
    from robo_prm.config_io import from_dict
    from robo_prm.perception.train import PerceptionTrainConfig, captioner_defaults, clip_defaults

    base = PerceptionTrainConfig()
    base = clip_defaults(base) if stage == "clip" else captioner_defaults(base)
    data = {f.name: getattr(base, f.name) for f in fields(base)}
    for key in ("data", "out", "init"):
        if getattr(args, key, None) is not None:
            data[key] = getattr(args, key)
    data.update(parse_overrides(extra))
    return from_dict(PerceptionTrainConfig, data)


def cmd_collect(args, extra) -> int:
    import torch

    from robo_prm.perception.dataset import CollectConfig, collect

    torch.set_num_threads(1)
    cfg = CollectConfig(tasks=[t for t in args.tasks.split(",") if t], frames=args.frames, size=args.size,
                        stride=args.stride, seed=args.seed, max_steps=args.max_steps, heldout_every=args.heldout_every)
    if extra:
        raise SystemExit(f"robo-prm perception collect: unknown option {extra[0]}")
    meta = collect(cfg, args.out)
    print(json.dumps({k: meta[k] for k in ("frames", "episodes", "splits", "policies", "seconds")}, indent=1))
    print(f"wrote {meta['shards']} shard(s) to {args.out}")
    return 0


def cmd_train(args, extra, stage: str) -> int:
    from robo_prm.perception.train import train

    cfg = _train_config(args, extra, stage)
    command = "robo-prm perception " + " ".join(shlex.quote(a) for a in sys.argv[2:]) if len(sys.argv) > 2 else ""
    out = train(cfg, command=command)
    manifest = json.loads((out / "manifest.json").read_text())
    print(json.dumps({k: v for k, v in manifest["metrics_heldout"].items() if k != "slot_accuracy"}, indent=1))
    print(f"wrote {out}")
    return 0


def cmd_caption(args, extra) -> int:
    """Render a seeded reset (or an expert step) and print the pixel caption next to the state caption."""
    from robo_prm.describe.state_captioner import StateCaptioner
    from robo_prm.perception.weights import load_perception
    from robo_prm.envs.experts import ScriptedExpert
    from robo_prm.envs.tidy_env import TidyTableEnv
    from robo_prm.envs.task import load_task

    if extra:
        raise SystemExit(f"robo-prm perception caption: unknown option {extra[0]}")
    bundle = load_perception(args.weights)
    task = load_task(args.task)
    env = TidyTableEnv(task, render_mode="rgb_array", width=bundle.net.cfg.size, height=bundle.net.cfg.size)
    try:
        obs, _ = env.reset(seed=args.seed)
        expert = ScriptedExpert(env, seed=args.seed) if args.steps else None
        for _ in range(args.steps):
            obs, *_ = env.step(expert(obs))
        pixel = bundle.captioner(task)(env.render())
        state = StateCaptioner(task)(env.scene_state)
    finally:
        env.close()
    print(f"pixels: {pixel.text}\n        hazards={list(pixel.hazards)} rule_progress={pixel.rule_progress:.2f}")
    print(f"state:  {state.text}\n        hazards={list(state.hazards)} rule_progress={state.rule_progress:.2f}")
    print("match" if pixel.text == state.text else "differs")
    return 0


def cmd_goal_sim(args, extra) -> int:
    """Goal-text similarity along one scripted episode (VLM-RM style), with Spearman ρ against time."""
    import numpy as np
    from scipy.stats import spearmanr

    from robo_prm.perception.clip import ClipConfig
    from robo_prm.perception.weights import goal_similarity, make_clip
    from robo_prm.envs.experts import ScriptedExpert, rollout
    from robo_prm.envs.tidy_env import TidyTableEnv
    from robo_prm.envs.task import load_task

    over = parse_overrides(extra)
    cfg = ClipConfig(arch=over.pop("clip.arch", "robo_prm"), weights=over.pop("clip.weights", None))
    if over:
        raise SystemExit(f"robo-prm perception goal-sim: unknown option --{next(iter(over))}")
    try:
        clip = make_clip(cfg)
    except ImportError as exc:  # open_clip (or the MiniLM text tower) not installed: one line, not a traceback
        raise SystemExit(f"robo-prm: error: {exc}") from None
    size = clip.net.cfg.size if hasattr(clip, "net") else 224
    task = load_task(args.task)
    env = TidyTableEnv(task, render_mode="rgb_array", width=size, height=size)
    try:
        infos, _, frames, success = rollout(env, ScriptedExpert(env, seed=args.seed), seed=args.seed, render=True)
    finally:
        env.close()
    text = args.text or task.spec.goal
    sim = goal_similarity(np.stack(frames), text, clip)
    rho = spearmanr(np.arange(len(sim)), sim).statistic
    print(f"text: {text}\nsteps: {len(sim)}  success: {success}  spearman(time, similarity): {rho:.3f}")
    print("similarity every 5th step:", " ".join(f"{s:.2f}" for s in sim[::5]))
    return 0


def add_perception_commands(sub) -> None:
    p = sub.add_parser("perception", help="frames → captions and CLIP features: collect data, train, inspect")
    ps = p.add_subparsers(dest="perception_command", required=True)

    c = ps.add_parser("collect", help="rendered frames + slot, caption, predicate, progress labels (npz shards)")
    c.add_argument("--tasks", default="reach_tool,push_tool_from_edge,place_cup_in_bin,tidy_table")
    c.add_argument("--frames", type=int, default=14_000, help="frames in total (train + held-out)")
    c.add_argument("--size", type=int, default=128, help="frame width = height in pixels")
    c.add_argument("--stride", type=int, default=3, help="keep every n-th step")
    c.add_argument("--max-steps", type=int, default=240, help="cap on episode length")
    c.add_argument("--heldout-every", type=int, default=6, help="every n-th episode (by seed) is held out")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--out", required=True, help="output folder")
    c.set_defaults(func=cmd_collect)

    for name, stage, helptext in (("train-clip", "clip", "contrastive frame ↔ caption training (open_clip's loss)"),
                                  ("train-captioner", "captioner", "caption-slot, predicate, progress heads (+ contrastive term)")):
        t = ps.add_parser(name, help=helptext, description="Any training field can be set as --field VALUE "
                          "(epochs, batch, lr, freeze_blocks, clip_weight, max_minutes, …; see robo_prm/describe/train.py).")
        t.add_argument("--data", help="a folder written by `perception collect`")
        t.add_argument("--out", help="output folder for the trained weights")
        t.add_argument("--init", help="start from a trained perception folder (e.g. the train-clip output)")
        t.set_defaults(func=lambda a, e, s=stage: cmd_train(a, e, s))

    k = ps.add_parser("caption", help="caption a rendered frame from pixels and compare with the state caption")
    k.add_argument("--task", default="tidy_table")
    k.add_argument("--seed", type=int, default=0)
    k.add_argument("--steps", type=int, default=0, help="scripted-expert steps before the frame")
    k.add_argument("--weights", help="perception folder (default: shipped)")
    k.set_defaults(func=cmd_caption)

    g = ps.add_parser("goal-sim", help="frame ↔ goal-text similarity along a scripted episode",
                      description="--clip.arch ViT-B-32 --clip.weights /path loads a pretrained open_clip model instead.")
    g.add_argument("--task", default="place_cup_in_bin")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--text", help="text to compare with (default: the task's goal)")
    g.set_defaults(func=cmd_goal_sim)
