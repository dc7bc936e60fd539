"""CLI wiring for `robo-prm perception collect | train-clip | train-captioner | train-keypoints | train-refiner |
train-window-slots | calibrate-hazards | calibrate-keypoints | caption | search | goal-sim`.

Every flag is a field: `CollectConfig` (+ `--out`), `PerceptionTrainConfig`, `CalibrateArgs`, `CaptionArgs`, `SearchArgs`,
`GoalSimArgs`, `KeypointTrainConfig`, `RefineTrainConfig`, `WindowSlotTrainConfig`, `KeypointChoiceArgs`.

    robo-prm perception collect --tasks reach_tool,tidy_table --frames 14000 --size 128 --out DIR
    robo-prm perception train-clip --data DIR --out CLIP_DIR [--epochs 8 --lr 2e-3 ...]
    robo-prm perception train-captioner --data DIR --init CLIP_DIR --out DIR
    robo-prm perception train-coca --data DIR --out COCA_DIR                    # open_clip CoCa captioner
    robo-prm perception train-keypoints --data DIR --out DIR [--init DIR]       # add a keypoint head (positions)
    robo-prm perception train-refiner --data DIR --out DIR [--init DIR]         # sub-pixel keypoints from the frame's pixels
    robo-prm perception train-window-slots --data DIR --out DIR [--init DIR]    # open / held / upright / moving from them
    robo-prm perception calibrate-keypoints --weights DIR --data FRAMES          # its caption decoding, chosen on frames
    robo-prm perception calibrate-hazards --weights DIR --data FRAMES            # per-hazard thresholds on unseen frames
    robo-prm perception caption --task tidy_table --seed 0 [--weights DIR]      # pixel vs state caption
    robo-prm perception search --data FRAMES --query "The glass cup has fallen off the table." [--out hits.png]
    robo-prm perception goal-sim --task place_cup_in_bin [--clip.arch ViT-B-32 --clip.weights /path]
"""
from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass, fields
from typing import Literal

from robo_prm.config_flags import add_config_args, config_command, opt
from robo_prm.perception.clip import ClipConfig
from robo_prm.perception.dataset import CollectConfig
from robo_prm.perception.train import PerceptionTrainConfig, captioner_defaults, clip_defaults
from robo_prm.perception.train_keypoints import DecodingGrid


@dataclass(kw_only=True)
class CollectArgs(CollectConfig):
    out: str = opt(help="output folder")


@dataclass
class CaptionArgs:
    task: str = opt("tidy_table", "task name or YAML path")
    seed: int = opt(0, "reset seed")
    steps: int = opt(0, "scripted-expert steps before the frame")
    weights: str | None = opt(None, "perception folder (null: the shipped one)")
    caption_model: str | None = opt(None, "a CoCa captioner folder (`train-coca`): its caption is the pixel caption")


@dataclass
class CalibrateArgs:
    data: str = opt(help="collected frames the model did not train on (several: comma-separated)")
    weights: str = opt(help="the perception folder whose config.json gets the thresholds")
    split: Literal["all", "heldout", "train"] = opt("all", "which frames of --data: all (collections the model never "
                                                    "saw), or the heldout / train split of its folders")
    floor: float = opt(0.91, "pooled hazard precision to keep on these frames (the aim on unseen ones: 0.9, plus a margin)",
                       min=0.0, max=1.0)
    threads: int = opt(1, "torch threads")


@dataclass(kw_only=True)
class KeypointChoiceArgs(DecodingGrid):
    data: str = opt(help="collected frames the model did not train on (several: comma-separated)")
    weights: str = opt(help="the perception folder (with a keypoint head) whose config.json gets the choice")
    split: Literal["all", "heldout", "train"] = opt("heldout", "which frames of --data (as calibrate-hazards)")
    threads: int = opt(1, "torch threads")


@dataclass
class SearchArgs:
    data: str = opt(help="collected frames to search (several folders: comma-separated)")
    query: str = opt(help="a scene caption, or some of its sentences (\"The glass cup has fallen off the table.\"); "
                     "other wording is matched by the CLIP embedding")
    weights: str | None = opt(None, "perception folder (null: the shipped one)")
    split: Literal["all", "heldout", "train"] = opt("all", "which frames of --data")
    k: int = opt(8, "frames to list, best first", min=1)
    limit: int = opt(4000, "frames searched at most (a seeded sample of --data; 0: all)", min=0)
    out: str | None = opt(None, "PNG file: the k frames side by side, best first")
    threads: int = opt(1, "torch threads")


@dataclass
class GoalSimArgs:
    task: str = opt("place_cup_in_bin", "task name or YAML path")
    seed: int = opt(0, "seed of the scripted episode")
    text: str | None = opt(None, "text to compare with (null: the task's goal)")
    clip: ClipConfig = opt(factory=ClipConfig, help="the CLIP model (arch ViT-B-32 + weights FILE: a pretrained open_clip one)")


def cmd_collect(args: CollectArgs) -> int:
    import torch

    from robo_prm.perception.dataset import collect

    torch.set_num_threads(1)
    cfg = CollectConfig(**{f.name: getattr(args, f.name) for f in fields(CollectConfig)})
    meta = collect(cfg, args.out)
    print(json.dumps({k: meta[k] for k in ("frames", "episodes", "splits", "policies", "seconds")}, indent=1))
    print(f"wrote {meta['shards']} shard(s) to {args.out}")
    return 0


def _command() -> str:
    """The command line as run, for a trained folder's manifest."""
    return "robo-prm perception " + " ".join(shlex.quote(a) for a in sys.argv[2:]) if len(sys.argv) > 2 else ""


def cmd_train(cfg: PerceptionTrainConfig) -> int:
    from robo_prm.perception.train import train

    out = train(cfg, command=_command())
    manifest = json.loads((out / "manifest.json").read_text())
    print(json.dumps({k: v for k, v in manifest["metrics_heldout"].items() if k != "slot_accuracy"}, indent=1))
    print(f"wrote {out}")
    return 0


def cmd_train_coca(cfg) -> int:
    from robo_prm.perception.train_coca import train

    out = train(cfg, command=_command())
    print(json.dumps(json.loads((out / "manifest.json").read_text())["metrics_heldout_sample"], indent=1))
    print(f"wrote {out}")
    return 0


def cmd_train_keypoints(cfg) -> int:
    from robo_prm.perception.train_keypoints import train_keypoints

    out = train_keypoints(cfg, command=_command())
    print(json.dumps(json.loads((out / "manifest.json").read_text())["keypoints"]["heldout_error"], indent=1))
    print(f"wrote {out}")
    return 0


def _train_head(train, cfg, command: str, manifest_key: str, report: str) -> int:
    """Run a head's trainer; print its held-out figures (manifest[manifest_key][report]) and where it wrote."""
    try:
        out = train(cfg, command=_command())
    except ValueError as e:  # no keypoint head, weights that do not fit: one line
        raise SystemExit(f"{command}: {e}") from None
    print(json.dumps(json.loads((out / "manifest.json").read_text())[manifest_key][report], indent=1))
    print(f"wrote {out}")
    return 0


def cmd_train_refiner(cfg) -> int:
    from robo_prm.perception.train_refine import train_refiner

    return _train_head(train_refiner, cfg, "train-refiner", "refine", "heldout_error")


def cmd_train_window_slots(cfg) -> int:
    from robo_prm.perception.train_window_slots import train_window_slots

    return _train_head(train_window_slots, cfg, "train-window-slots", "window_slots", "heldout_accuracy")


def cmd_calibrate_keypoints(args: KeypointChoiceArgs) -> int:
    """How captions weigh the keypoint head's positions against the slot heads (placed.py): the (sigma, weight) that
    gets every slot right on the most frames of --data, written into the folder's config.json."""
    from robo_prm.perception.train_keypoints import choose_decoding, write_decoding

    bundle, frames = _model_and_frames(args)
    if not bundle.net.cfg.keypoint_blocks:
        raise SystemExit(f"robo-prm: error: --weights {args.weights}: the model has no keypoint head "
                         "(add one: robo-prm perception train-keypoints)")
    choice = choose_decoding(bundle.net, frames, args)
    write_decoding(args.weights, choice | {"chosen_on": f"{args.data} ({args.split} frames)"})
    print(json.dumps(choice, indent=1))
    return 0


def _model_and_frames(args):
    """(the perception bundle of --weights, the frames of --data it reads: --split of them), torch at --threads;
    a missing or unreadable folder is one line naming its flag."""
    import torch

    from robo_prm.perception.calibrate import frames_for
    from robo_prm.perception.weights import load_perception

    torch.set_num_threads(args.threads)
    try:
        bundle = load_perception(args.weights)
    except FileNotFoundError as exc:
        raise SystemExit(f"robo-prm: error: --weights: {exc}") from None
    try:
        return bundle, frames_for(bundle, args.data, args.split)
    except (FileNotFoundError, ValueError) as exc:
        raise SystemExit(f"robo-prm: error: --data: {exc}") from None


def cmd_calibrate(args: CalibrateArgs) -> int:
    """Per hazard head, the threshold that reads the most hazards while pooled precision stays ≥ --floor on frames
    the model did not train on; written into the folder's config.json (`hazard_thresholds`)."""
    from robo_prm.perception.calibrate import hazard_probs, write_thresholds
    from robo_prm.perception.thresholds import fit_for_precision, pooled_pr

    bundle, frames = _model_and_frames(args)
    try:
        p, truth, keys = hazard_probs(bundle, frames)
    except ValueError as exc:
        raise SystemExit(f"robo-prm: error: --data: {exc}") from None
    chosen = fit_for_precision(p, truth, args.floor)
    fit = {**pooled_pr(p, truth, chosen), "frames": len(frames)}
    write_thresholds(args.weights, dict(zip(keys, chosen)),
                     {"chosen_on": f"{args.data} ({args.split} frames)", "floor": args.floor, "there": fit})
    print(json.dumps({"thresholds": dict(zip(keys, chosen)), "there": fit}, indent=1))
    return 0


def cmd_caption(args: CaptionArgs) -> int:
    """Render a seeded reset (or an expert step) and print the pixel caption next to the state caption."""
    from robo_prm.describe.state_captioner import StateCaptioner
    from robo_prm.perception.weights import load_perception
    from robo_prm.envs.experts import ScriptedExpert
    from robo_prm.envs.rollout import rollout
    from robo_prm.envs.tidy_env import TidyTableEnv
    from robo_prm.envs.task import load_task

    bundle = load_perception(args.weights)
    task = load_task(args.task)
    env = TidyTableEnv(task, render_mode="rgb_array", width=bundle.net.cfg.size, height=bundle.net.cfg.size)
    try:
        if args.steps:  # the expert's first steps (fewer when the episode ends before)
            rollout(env, ScriptedExpert(env, seed=args.seed), args.seed, max_steps=args.steps)
        else:
            env.reset(seed=args.seed)
        try:
            captioner = bundle.captioner(task, caption_model=args.caption_model)
            pixel = captioner(captioner.render_frame(env))
        except (FileNotFoundError, ValueError) as exc:
            raise SystemExit(f"robo-prm: error: --caption_model: {exc}") from None
        state = StateCaptioner(task)(env.scene_state)
    finally:
        env.close()
    print(f"pixels: {pixel.text}\n        hazards={list(pixel.hazards)} rule_progress={pixel.rule_progress:.2f}")
    print(f"state:  {state.text}\n        hazards={list(state.hazards)} rule_progress={state.rule_progress:.2f}")
    print("match" if pixel.text == state.text else "differs")
    return 0


def cmd_search(args: SearchArgs) -> int:
    """The frames whose pixel reading best fits a caption (perception/retrieve.py), with their true captions."""
    import numpy as np

    from robo_prm.perception.retrieve import CaptionRetriever, top_k
    from robo_prm.perception.train import predict

    bundle, frames = _model_and_frames(args)
    if args.limit and len(frames) > args.limit:
        frames = frames.subset(np.sort(np.random.default_rng(0).choice(len(frames), args.limit, replace=False)))
    a, tasks = frames.arrays, np.asarray(frames.meta["tasks"])[frames.arrays["task"]]
    retriever = CaptionRetriever(bundle.net, predict(bundle.net, a["frames"]), tasks, clip=bundle.clip())
    scores, by_captioner = retriever.scores(args.query)
    top = top_k(scores, args.k)
    print(f"{len(frames)} frames; scored by {'the captioner' if by_captioner else 'CLIP cosine (no task words it so)'}; "
          f"{sum(args.query in str(c) for c in a['caption'])} frames' state captions say it (marked =)")
    for rank, i in enumerate(top, 1):
        mark = "=" if args.query in str(a["caption"][i]) else " "
        print(f"{rank:>2} {mark} {scores[i]:8.2f}  {tasks[i]} episode {a['episode'][i]} step {a['step'][i]}: {a['caption'][i]}")
    if args.out:
        import imageio.v3 as iio

        iio.imwrite(args.out, np.concatenate([a["frames"][i] for i in top], axis=0 if a["frames"].shape[2] > a["frames"].shape[1] else 1))
        print(f"wrote {args.out}")
    return 0


def cmd_goal_sim(args: GoalSimArgs) -> int:
    """Goal-text similarity along one scripted episode (VLM-RM style), with Spearman ρ against time."""
    import numpy as np

    from robo_prm.metrics import voc
    from robo_prm.perception.weights import goal_similarity, make_clip
    from robo_prm.envs.experts import ScriptedExpert
    from robo_prm.envs.rollout import rollout
    from robo_prm.envs.tidy_env import TidyTableEnv
    from robo_prm.envs.task import load_task

    try:
        clip = make_clip(args.clip)
    except (ImportError, FileNotFoundError) as exc:  # the MiniLM text tower not installed, a missing checkpoint
        raise SystemExit(f"robo-prm: error: {exc}") from None
    size = clip.net.cfg.size if hasattr(clip, "net") else 224
    task = load_task(args.task)
    env = TidyTableEnv(task, render_mode="rgb_array", width=size, height=size)
    try:
        views = tuple(clip.net.cfg.views) if hasattr(clip, "net") else True  # the in-domain model may read several cameras
        ep = rollout(env, ScriptedExpert(env, seed=args.seed), args.seed, render=views)
    finally:
        env.close()
    text = args.text or task.spec.goal
    sim = goal_similarity(np.stack(ep.frames), text, clip)
    print(f"text: {text}\nsteps: {len(sim)}  success: {ep.success}  spearman(time, similarity): {voc(sim):.3f}")
    print("similarity every 5th step:", " ".join(f"{s:.2f}" for s in sim[::5]))
    return 0


def add_perception_commands(p) -> None:
    """The `robo-prm perception` subcommands, on the `perception` parser."""
    from robo_prm.perception.train_coca import CocaTrainConfig
    from robo_prm.perception.train_keypoints import KeypointTrainConfig
    from robo_prm.perception.train_refine import RefineTrainConfig
    from robo_prm.perception.train_window_slots import WindowSlotTrainConfig

    ps = p.add_subparsers(dest="perception_command", required=True)

    def add(name: str, args: type, cmd, helptext: str, stage=None) -> None:
        """One subcommand whose flags are the fields of `args`; `stage`: a function setting a training stage's defaults."""
        sub = ps.add_parser(name, help=helptext)
        add_config_args(sub, args, defaults=stage(args()) if stage else None)
        sub.set_defaults(func=config_command(args, cmd, base=(lambda: stage(args())) if stage else None))

    add("collect", CollectArgs, cmd_collect, "rendered frames + slot, caption, predicate, progress labels (npz shards)")
    add("train-clip", PerceptionTrainConfig, cmd_train, "contrastive frame ↔ caption training (open_clip's loss)", clip_defaults)
    add("train-captioner", PerceptionTrainConfig, cmd_train, "caption-slot, predicate, progress heads (+ contrastive term)",
        captioner_defaults)
    add("train-coca", CocaTrainConfig, cmd_train_coca, "open_clip CoCa captioner: frame → the state caption, word for word")
    add("train-keypoints", KeypointTrainConfig, cmd_train_keypoints,
        "a keypoint head on a trained folder: where the gripper and objects are, for the distance words")
    add("train-refiner", RefineTrainConfig, cmd_train_refiner,
        "a refiner on a keypoint head: each point moved to sub-pixel precision by the frame's own pixels")
    add("train-window-slots", WindowSlotTrainConfig, cmd_train_window_slots,
        "a window slot head on a keypoint head: gripper open or holding, cup upright, moving, from the pixels at the points")
    add("calibrate-keypoints", KeypointChoiceArgs, cmd_calibrate_keypoints,
        "how captions weigh the keypoint head's positions against the slot heads, chosen on frames")
    add("caption", CaptionArgs, cmd_caption, "caption a rendered frame from pixels and compare with the state caption")
    add("calibrate-hazards", CalibrateArgs, cmd_calibrate, "per hazard head, the threshold for the most recall at a precision floor")
    add("search", SearchArgs, cmd_search, "the collected frames whose pixel reading best fits a caption")
    add("goal-sim", GoalSimArgs, cmd_goal_sim, "frame ↔ goal-text similarity along a scripted episode")
