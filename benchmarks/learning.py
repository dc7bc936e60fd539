"""Learning benchmark: success against env steps for the language reward, its aids and the baselines.

    python benchmarks/learning.py                                      # every task × variant × seed (hours of CPU)
    python benchmarks/learning.py --tasks push_tool_from_edge --variants sparse,her,llm_demos --seeds 0 --budget 2000
    python benchmarks/learning.py --plot                               # learning curves → docs/img/learning_<task>.png

Each run is `robo-prm train --task T --seed S --steps BUDGET <the variant's flags>` (the task's shipped train
config underneath), evaluated every `--eval_every` steps on `--eval_episodes` (≥ 10) fresh seeds, and at the end
on `--final_episodes` (≥ 30: hazard counts are small) other fresh seeds. Runs go one after another, never in
parallel. Each finished run is appended to benchmarks/results/learning.json at once (read-modify-write,
atomic), so an interrupted benchmark loses nothing; a run already there (same task, variant, seed, budget) is
skipped unless --rerun. The file is exactly a JSON list of runs:

    {"task", "variant", "seed", "budget",
     "curve": [[env_steps, success_rate, hazard_events_per_episode], ...],
     "steps_to_80": first env_steps whose evaluation reached success ≥ 0.8 (null: never),
     "final_success": success of the last point, "wall_s": seconds of the training command}

The commands, demo/curriculum/judge statistics and episode counts go beside it to <out>_detail.jsonl.

Variants (docs/LEARNING.md):
  shipped           `robo-prm train --task T` as shipped: the task's train config, no aid switched on or off
  shipped_no_safety the same without the safety term (`--reward.safety_weight 0`)
  shipped_successful_demos  the same with only the expert's successful episodes as demos (`--demos_successful_only true`)
  sparse            SAC on the sparse env reward (`--reward_source env`)
  her               SAC + HerReplayBuffer on the sparse reward, goal-conditioned view (`--reward_source her`)
  dense             the task's hand-written dense reward (`--reward_source dense`)
  rules             blended reward, rules judge (`--judge.backend rules`)
  llm               the default: blended reward, bundled LLM judge
  llm_no_safety     the default without the safety term (`--reward.safety_weight 0`)
  llm_demos         the default + 50 scripted demonstrations (`--demos 50`)
  llm_demos_bc      the default + 50 demonstrations + the clone, warm-up and Q-filtered BC (`--demo_bc.pretrain_steps 5000`)
  llm_demos_no_safety, llm_demos_bc_no_safety, sparse_demos_bc   the same aids without the safety term / on the sparse reward
  llm_demos_clone   llm_demos_bc with the actor never released: the clone is the policy (a reference for tidy_table)
  llm_demos_bc_keep llm_demos_bc acting with the clone's action where the critics rate it higher (`--demo_bc.keep_clone`)
  llm_demos_residual llm_demos_bc whose actor learns a residual within ±0.2 of the frozen clone's action
                    (`--demo_bc.residual 0.2`: place_cup_in_bin's shipped config)
  llm_curriculum    the default + curriculum of start states (`--curriculum.enabled true`)
  llm_no_novelty    the default without the count-based novelty term (`--reward.novelty none`)
  llm_async         the default with the judge off the step path (`--reward.async true`; issue 16's sync vs async)
  llm_async_any     the same, SAC also trained on rows still waiting for their judgement (`--reward.async_sample any`)
  shipped_pixels    the shipped config with scene texts from the rendered frame alone, its `when_pixels:` section
                    applied (issue 18, as a user runs it)
  llm_pixels        the default with scene texts from the rendered frame alone (`--describe.source pixels`; issue 18)
  clip              the blend with the frame's CLIP similarity to the goal in the LLM's place (VLM-RM, `--reward_source clip`)
  rules_demos, rules_curriculum, dense_demos, sparse_demos   the aids on the cheaper rewards
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "learning.json"
IMG = ROOT / "docs" / "img"
TASKS = ("push_tool_from_edge", "place_cup_in_bin")
NO_DEMOS = ["--demos", "0", "--demo_bc.pretrain_steps", "0"]  # a task's train config may ship demos (place_cup_in_bin)
DEMOS = ["--demos", "50", "--demo_bc.pretrain_steps", "0"]  # demos as replay rows only
DEMOS_BC = ["--demos", "50", "--demo_bc.pretrain_steps", "5000",  # + the clone, warm-up and Q-filtered BC (train/bc.py),
            "--demo_bc.residual", "0"]  # the actor free (place_cup_in_bin ships a residual on the clone)
# every variant states its aids, so a variant means the same on every task whatever its train config ships
VARIANTS = {
    "shipped": [],  # the task's train config as shipped, nothing overridden (issue 15's "defaults that work")
    "shipped_no_safety": ["--reward.safety_weight", "0"],  # the same without the safety term (issue 15's safety target)
    "shipped_successful_demos": ["--demos_successful_only", "true"],  # the same, the expert's failed episodes left out
    "shipped_pixels": ["--describe.source", "pixels"],  # the same, the judge reading scene texts from the frame (issue 18)
    "sparse": ["--reward_source", "env", *NO_DEMOS],
    "her": ["--reward_source", "her", *NO_DEMOS],
    "dense": ["--reward_source", "dense", *NO_DEMOS],
    "clip": ["--reward_source", "clip", *NO_DEMOS],
    "rules": ["--judge.backend", "rules", *NO_DEMOS],
    "llm": NO_DEMOS,
    "llm_no_safety": ["--reward.safety_weight", "0", *NO_DEMOS],
    "llm_demos": DEMOS,
    "llm_demos_bc": DEMOS_BC,
    "sparse_demos_bc": ["--reward_source", "env", *DEMOS_BC],
    # the clone alone: the actor is never released (SAC trains only its critics), the demonstrations as the policy
    "llm_demos_clone": [*DEMOS_BC, "--demo_bc.critic_warmup", "100000000"],
    "llm_demos_bc_keep": [*DEMOS_BC, "--demo_bc.keep_clone", "true"],
    # the actor learns a residual of at most ±0.2 around the frozen clone's action (`--demo_bc.residual`)
    "llm_demos_residual": [*DEMOS_BC, "--demo_bc.residual", "0.2"],
    "llm_demos_no_safety": ["--reward.safety_weight", "0", *DEMOS],
    "llm_demos_bc_no_safety": ["--reward.safety_weight", "0", *DEMOS_BC],
    "llm_curriculum": ["--curriculum.enabled", "true", *NO_DEMOS],
    "llm_no_novelty": ["--reward.novelty", "none", *NO_DEMOS],
    "llm_async": ["--reward.async", "true", *NO_DEMOS],
    # the judge reads scene texts made from the rendered frame alone (the shipped perception model), not the state
    "llm_pixels": ["--describe.source", "pixels", *NO_DEMOS],
    "llm_async_any": ["--reward.async", "true", "--reward.async_sample", "any", *NO_DEMOS],
    "rules_demos": ["--judge.backend", "rules", *DEMOS],
    "rules_curriculum": ["--judge.backend", "rules", "--curriculum.enabled", "true", *NO_DEMOS],
    "dense_demos": ["--reward_source", "dense", *DEMOS],
    "sparse_demos": ["--reward_source", "env", *DEMOS],
}
DEFAULT_VARIANTS = ("sparse", "her", "dense", "rules", "llm", "llm_no_safety", "llm_demos")
SUCCESS = 0.8


def steps_to(curve: list[list[float]], level: float = SUCCESS) -> int | None:
    """First env_steps of the curve whose success rate reached `level`."""
    return next((int(steps) for steps, success, _ in curve if success >= level), None)


def final_eval(run_dir: Path, seed: int, episodes: int) -> dict:
    """The finished policy on `episodes` fresh seeds (30,000 + 1,000·seed on: away from training and the periodic evaluations)."""
    from robo_prm.train.rollouts import run_episodes, summarize
    from robo_prm.train.run import load_policy

    cfg, task, policy = load_policy(run_dir)
    start = 30_000 + 1_000 * seed
    return summarize(run_episodes(policy, task, cfg, range(start, start + episodes)))


def final_eval_fresh(run_dir: Path, seed: int, episodes: int) -> dict:
    """`final_eval` in a fresh process: a benchmark that runs for hours may predate a config field that the run's
    config.yaml (written by the code on disk) has, and then could not read it (sessions 13, 15 and 18 lost a row so)."""
    code = ("import json, sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); import learning; "
            "print(json.dumps(learning.final_eval(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))))")
    proc = subprocess.run([sys.executable, "-c", code, str(Path(__file__).resolve().parent), str(run_dir), str(seed),
                           str(episodes)], capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"final evaluation of {run_dir} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_one(task: str, variant: str, seed: int, args) -> tuple[dict, dict]:
    name = f"learning__{task}__{variant}__{seed}__{args.budget}"
    run_dir = Path(args.runs_dir) / name
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = [sys.executable, "-m", "robo_prm.cli", "train", "--task", task, "--steps", str(args.budget), "--seed", str(seed),
           "--runs_dir", args.runs_dir, "--run_name", name, "--progress_bar", "false", "--record.every_episodes", "0",
           "--eval.every_steps", str(args.eval_every), "--eval.episodes", str(args.eval_episodes), "--eval.record", "0",
           "--checkpoint_every", "0", *VARIANTS[variant], *args.extra.split()]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{task} {variant} seed {seed} failed:\n{proc.stderr[-3000:]}")
    history = json.loads((run_dir / "eval" / "eval_history.json").read_text())
    curve = [[h["env_steps"], h["success_rate"], h["hazard_events_per_episode"]] for h in history if h["env_steps"] < args.budget]
    last = final_eval_fresh(run_dir, seed, args.final_episodes)
    curve.append([args.budget, last["success_rate"], last["hazard_events_per_episode"]])
    row = {"task": task, "variant": variant, "seed": seed, "budget": args.budget, "curve": curve,
           "steps_to_80": steps_to(curve), "final_success": last["success_rate"], "wall_s": round(wall, 1)}
    detail = {"task": task, "variant": variant, "seed": seed, "budget": args.budget,
              "command": " ".join(["robo-prm", *cmd[3:]]), "eval_episodes": args.eval_episodes,
              "final_episodes": args.final_episodes, "final_eval": last, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    for extra in ("summary.json", "demos.json", "curriculum.json"):
        if (run_dir / extra).exists():
            detail[extra.removesuffix(".json")] = json.loads((run_dir / extra).read_text())
    if not args.keep_runs:
        shutil.rmtree(run_dir, ignore_errors=True)  # a run's checkpoint holds its replay buffer (up to ~1 GB)
    return row, detail


def load_rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    rows = json.loads(path.read_text())
    if not isinstance(rows, list):
        raise SystemExit(f"{path}: not a JSON list of runs")
    return rows


def append_row(path: Path, row: dict) -> None:
    """Read, append, write to a temporary file and rename over: the file is always a whole list."""
    rows = [r for r in load_rows(path) if _key(r) != _key(row)] + [row]
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(rows, indent=1))
    os.replace(tmp, path)


def _key(row: dict) -> tuple:
    return row["task"], row["variant"], row["seed"], row["budget"]


def plot(path: Path, out_dir: Path) -> list[Path]:
    """Per task: mean success over seeds and its min–max band, one line per variant (runs of the largest budget)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = load_rows(path)
    written = []
    for task in sorted({r["task"] for r in rows}):
        mine = [r for r in rows if r["task"] == task]
        budget = max(r["budget"] for r in mine)
        fig, ax = plt.subplots(figsize=(7, 4.2))
        for variant in sorted({r["variant"] for r in mine if r["budget"] == budget}):
            runs = [r for r in mine if r["variant"] == variant and r["budget"] == budget]
            grid = sorted({p[0] for r in runs for p in r["curve"]})
            ys = np.array([np.interp(grid, [p[0] for p in r["curve"]], [p[1] for p in r["curve"]]) for r in runs])
            line, = ax.plot(grid, ys.mean(0), marker="o", ms=3, label=f"{variant} (n={len(runs)})")
            if len(runs) > 1:
                ax.fill_between(grid, ys.min(0), ys.max(0), color=line.get_color(), alpha=0.15)
        ax.axhline(SUCCESS, color="grey", lw=0.8, ls="--")
        ax.set(xlabel="env steps", ylabel="evaluation success rate", ylim=(-0.02, 1.02), title=f"{task} (SAC, budget {budget})")
        ax.legend(fontsize=8, loc="upper left")
        fig.tight_layout()
        out_dir.mkdir(parents=True, exist_ok=True)
        target = out_dir / f"learning_{task}.png"
        fig.savefig(target, dpi=110)
        plt.close(fig)
        written.append(target)
    return written


def table(rows: list[dict]) -> str:
    lines = ["| task | variant | seeds | budget | success at end (mean, min–max) | steps to 80 % (mean of reached) | "
             "hazard events / ep at end | wall min / run |", "|---|---|---|---|---|---|---|---|"]
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["task"], r["variant"], r["budget"]), []).append(r)
    for (task, variant, budget), runs in sorted(groups.items()):
        fin = [r["final_success"] for r in runs]
        reached = [r["steps_to_80"] for r in runs if r["steps_to_80"] is not None]
        hz = [r["curve"][-1][2] for r in runs]
        to80 = f"{sum(reached) / len(reached):.0f} ({len(reached)}/{len(runs)})" if reached else f"— (0/{len(runs)})"
        lines.append(f"| {task} | {variant} | {len(runs)} | {budget} | {sum(fin) / len(fin):.2f} ({min(fin):.2f}–{max(fin):.2f}) | "
                     f"{to80} | {sum(hz) / len(hz):.2f} | {sum(r['wall_s'] for r in runs) / len(runs) / 60:.1f} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--variants", default=",".join(DEFAULT_VARIANTS), help=f"comma-separated, of: {', '.join(VARIANTS)}")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--budget", type=int, default=60_000, help="env steps per run")
    ap.add_argument("--eval_every", type=int, default=5_000)
    ap.add_argument("--eval_episodes", type=int, default=10)
    ap.add_argument("--final_episodes", type=int, default=30)
    ap.add_argument("--extra", default="", help="flags added to every run's command")
    ap.add_argument("--runs_dir", default="/tmp/robo_prm_learning_runs")
    ap.add_argument("--keep_runs", action="store_true", help="keep the run folders (checkpoints hold the replay buffer)")
    ap.add_argument("--rerun", action="store_true", help="run again what learning.json already has (the new run replaces it)")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--plot", action="store_true", help="only draw docs/img/learning_<task>.png and print the table")
    args = ap.parse_args()
    out = Path(args.out)
    if args.plot:
        for p in plot(out, IMG):
            print(p)
        print(table(load_rows(out)))
        return
    unknown = [v for v in args.variants.split(",") if v not in VARIANTS]
    if unknown:
        ap.error(f"--variants: unknown variant '{unknown[0]}' (known: {', '.join(VARIANTS)})")
    if args.eval_episodes < 10 or args.final_episodes < 30:
        ap.error("--eval_episodes must be at least 10 and --final_episodes at least 30")
    done = {_key(r) for r in load_rows(out)}
    for seed in [int(s) for s in args.seeds.split(",")]:  # seed-major: a drift of the machine's load hits every variant alike
        for task in args.tasks.split(","):
            for variant in args.variants.split(","):
                if (task, variant, seed, args.budget) in done and not args.rerun:
                    print(f"skip {task} {variant} seed {seed} (in {out.name})", flush=True)
                    continue
                row, detail = run_one(task, variant, seed, args)
                append_row(out, row)
                with open(out.with_name(f"{out.stem}_detail.jsonl"), "a") as f:
                    f.write(json.dumps(detail, default=float) + "\n")
                print(json.dumps(row), flush=True)
    print(table(load_rows(out)))


if __name__ == "__main__":
    main()
