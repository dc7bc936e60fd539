"""The write-up's tuning experiment: an Optuna study on push_tool_from_edge, then its best settings against
the shipped defaults over 3 seeds, same budget and flags.

    python benchmarks/tune_push.py                     # the full experiment: 20 trials × 30k SAC steps, then 2 × 3 runs
    python benchmarks/tune_push.py --steps 10000 --eval_every 2500 --workers 2 --parallel 2 \\
        --extra "--judge.backend rules"                 # the 2-core study of docs/BENCHMARKS.md (one process per core)
    python benchmarks/tune_push.py --trials 6 --steps 4000 --eval_every 1000 --eval_episodes 5 \\
        --extra "--judge.backend rules --sac.learning_starts 500"       # the small study of docs/BENCHMARKS.md

It resumes: trials live in the study's storage (`--storage`, default sqlite:///<runs_dir>/tune.db) and a
comparison run whose summary.json exists is not run again, so the same command after a stop goes on.
Steps: (1) `robo-prm tune` until the study holds `--trials` trials; (2) `robo-prm tune --report` →
<runs_dir>/tune/<study>/report/ (best_config.yaml, PNGs); (3) for each seed, `robo-prm train` with the
defaults (configs/train/push_tool_from_edge.yaml) and with `--config best_config.yaml`, alternating.
Writes benchmarks/results/tune_push.json and prints a markdown table. `--phases` picks steps
(study,report,compare); `--variants default` runs only the defaults' side of the comparison.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from robo_prm.provenance import load_average, provenance

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "tune_push.json"
TASK = "push_tool_from_edge"


def common(args) -> list[str]:
    return ["--task", TASK, "--steps", str(args.steps), "--eval.every_steps", str(args.eval_every), "--eval.episodes",
            str(args.eval_episodes), "--eval.record", "0", "--record.every_episodes", "0", "--progress_bar", "false",
            *args.extra.split()]


def cli(*words: str) -> None:
    cmd = [sys.executable, "-m", "robo_prm.cli", *words]
    print("$ robo-prm " + " ".join(words), file=sys.stderr, flush=True)
    if subprocess.run(cmd, cwd=ROOT).returncode != 0:
        raise SystemExit(f"failed: robo-prm {' '.join(words)}")


def compare_dir(variant: str, seed: int, args) -> Path:
    return Path(args.runs_dir) / "tune" / args.study / f"compare_{variant}__seed{seed}"


def train_compare_runs(jobs: list[tuple[str, int]], args, report: Path) -> None:
    """Train the comparison runs not finished yet, `--parallel` at a time (one process per core)."""
    todo = [(v, s) for v, s in jobs if not (compare_dir(v, s, args) / "summary.json").exists()]
    running: list[tuple[subprocess.Popen, Path, float]] = []
    while todo or running:
        while todo and len(running) < args.parallel:
            variant, seed = todo.pop(0)
            run_dir = compare_dir(variant, seed, args)
            config = ["--config", str(report / "best_config.yaml")] if variant == "tuned" else []
            words = ["train", *config, *common(args), "--seed", str(seed), "--runs_dir", str(run_dir.parent),
                     "--run_name", run_dir.name, "--checkpoint_every", "0"]
            print("$ robo-prm " + " ".join(words), file=sys.stderr, flush=True)
            running.append((subprocess.Popen([sys.executable, "-m", "robo_prm.cli", *words], cwd=ROOT), run_dir,
                            time.perf_counter()))
        proc, run_dir, t0 = running.pop(0)
        if proc.wait() != 0:
            raise SystemExit(f"failed: comparison run {run_dir.name}")
        (run_dir / "wall_s.txt").write_text(f"{time.perf_counter() - t0:.1f}\n")
        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)  # ~1 GB of replay buffer each; final_model.zip stays


def compare_run(variant: str, seed: int, args) -> dict:
    run_dir = compare_dir(variant, seed, args)
    from robo_prm.train.tune import objective_value

    history = json.loads((run_dir / "eval" / "eval_history.json").read_text())
    wall = run_dir / "wall_s.txt"
    return {"variant": variant, "seed": seed, "run": str(run_dir), "wall_s": float(wall.read_text()) if wall.exists() else None,
            "success": [(h["env_steps"], h["success_rate"]) for h in history],
            "hazards": [(h["env_steps"], h["hazard_events_per_episode"]) for h in history],
            **objective_value(history, args.steps, args.hazard_weight)}


def table(rows: list[dict]) -> str:
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    lines = ["| settings | seed | success at each evaluation | success-curve area | hazard-curve area | objective |",
             "|---|---:|---|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['variant']} | {r['seed']} | {' / '.join(f'{s:.1f}' for _, s in r['success'])} | "
                     f"{r['success_auc']:.3f} | {r['hazard_area']:.3f} | {r['value']:.3f} |")
    for v in dict.fromkeys(r["variant"] for r in rows):
        rs = [r for r in rows if r["variant"] == v]
        lines.append(f"| **{v} (mean)** | {len(rs)} seeds | final {mean([r['success'][-1][1] for r in rs]):.2f} | "
                     f"{mean([r['success_auc'] for r in rs]):.3f} | {mean([r['hazard_area'] for r in rs]):.3f} | "
                     f"**{mean([r['value'] for r in rs]):.3f}** |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--steps", type=int, default=30_000)
    ap.add_argument("--eval_every", type=int, default=5000)
    ap.add_argument("--eval_episodes", type=int, default=10)
    ap.add_argument("--hazard_weight", type=float, default=0.1)
    ap.add_argument("--study", default="push_tool_from_edge__sac")
    ap.add_argument("--storage", default=None, help="default: sqlite:///<runs_dir>/tune.db")
    ap.add_argument("--runs_dir", default=str(ROOT / "runs" / "bench_tune"))
    ap.add_argument("--seeds", default="0,1,2", help="seeds of the comparison (the study trains seed 0)")
    ap.add_argument("--workers", type=int, default=1, help="study processes on this machine (robo-prm tune --workers)")
    ap.add_argument("--parallel", type=int, default=1, help="comparison runs trained at once")
    ap.add_argument("--extra", default="", help="flags for every trial and comparison run")
    ap.add_argument("--phases", default="study,report,compare")
    ap.add_argument("--variants", default="default,tuned")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    from robo_prm.train.tune import default_storage

    storage = args.storage or default_storage(args.runs_dir)
    report = Path(args.runs_dir) / "tune" / args.study / "report"
    phases = args.phases.split(",")
    if "study" in phases:
        cli("tune", *common(args), "--trials", str(args.trials), "--study", args.study, "--storage", storage,
            "--runs_dir", args.runs_dir, "--hazard_weight", str(args.hazard_weight), "--checkpoint_every", "0", "--workers", str(args.workers))
    if "report" in phases:
        cli("tune", "--report", args.study, "--storage", storage, "--out", str(report))
    if "compare" not in phases:
        return
    jobs = [(v, int(s)) for s in args.seeds.split(",") for v in args.variants.split(",")]
    train_compare_runs(jobs, args, report)
    rows = [compare_run(v, s, args) for v, s in jobs]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {**provenance(), "load_at_end": load_average(), "task": TASK, "steps": args.steps, "trials": args.trials,
            "study": args.study, "storage": storage, "extra": args.extra, "eval_every": args.eval_every,
            "eval_episodes": args.eval_episodes, "hazard_weight": args.hazard_weight, "workers": args.workers,
            "parallel": args.parallel}
    trials = report / "trials.json"
    out.write_text(json.dumps({"meta": meta, "rows": rows,
                               "trials": json.loads(trials.read_text()) if trials.exists() else None}, indent=1))
    print(table(rows))


if __name__ == "__main__":
    main()
