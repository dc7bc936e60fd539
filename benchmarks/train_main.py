"""The README's main command, measured against its cheaper variants in one session.

    python benchmarks/train_main.py                      # 4 variants × the main command's budget
    python benchmarks/train_main.py --steps 3000 --variants llm,rules

Variants (same task, algorithm, seed and step budget; one after another, never in parallel):
  llm    the default: blended reward with the bundled LLM judge (rules fallback when unsure)
  rules  blended reward with the rules judge (`--judge.backend rules`)
  env    the sparse environment reward alone (`--reward_source env`)
  dense  the task's hand-written dense reward (`--reward_source dense`)
For each: wall time, env steps/s, peak RSS of the training process, final evaluation success
rate and hazard events per episode, judge statistics. Writes benchmarks/results/train_main.json
and prints a markdown table; ratios are against the `env` variant of the same run.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "train_main.json"
VARIANTS = {
    "llm": [],
    "rules": ["--judge.backend", "rules"],
    "env": ["--reward_source", "env"],
    "dense": ["--reward_source", "dense"],
}


def run(variant: str, args, runs_dir: Path) -> dict:
    name = f"bench_{variant}_{args.seed}"
    cmd = [sys.executable, "-m", "robo_prm.cli", "train", "--task", args.task, "--algo", args.algo, "--steps", str(args.steps),
           "--seed", str(args.seed), "--runs_dir", str(runs_dir), "--run_name", name, "--progress_bar", "false",
           "--record.every_episodes", "0", "--eval.every_steps", str(args.eval_every), "--eval.episodes", str(args.eval_episodes),
           "--eval.record", "0", *VARIANTS[variant]]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{variant} failed:\n{proc.stderr[-3000:]}")
    summary = json.loads((runs_dir / name / "summary.json").read_text())
    history = json.loads((runs_dir / name / "eval" / "eval_history.json").read_text())
    return {
        "variant": variant, "wall_s": wall, "env_steps_per_s": args.steps / wall,
        "peak_rss_mb": summary.get("peak_rss_mb"),
        "final_success_rate": summary.get("final_eval", {}).get("success_rate"),
        "final_hazard_events": summary.get("final_eval", {}).get("hazard_events_per_episode"),
        "eval_history": [(h["env_steps"], h["success_rate"]) for h in history],
        "judge": summary.get("judge"),
        "command": " ".join(["robo-prm"] + cmd[3:]),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="reach_tool")
    ap.add_argument("--algo", default="sac")
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval_every", type=int, default=2500)
    ap.add_argument("--eval_episodes", type=int, default=20)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--runs_dir", default="/tmp/robo_prm_bench_runs")
    args = ap.parse_args()
    runs_dir = Path(args.runs_dir)
    rows = []
    for v in args.variants.split(","):
        rows.append(run(v, args, runs_dir))
        print(json.dumps({k: rows[-1][k] for k in ("variant", "wall_s", "final_success_rate")}), file=sys.stderr)
    base = next((r for r in rows if r["variant"] == "env"), None)
    meta = {"command": "python benchmarks/train_main.py " + " ".join(sys.argv[1:]), "task": args.task, "algo": args.algo,
            "steps": args.steps, "seed": args.seed, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": f"{os.cpu_count()} CPU, {platform.processor() or platform.machine()}"}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print("| variant | wall s | env steps/s | speed vs env | peak RSS MB | final success | hazard events/ep | model calls / 1k steps | fallback rate |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        ratio = f"{r['env_steps_per_s'] / base['env_steps_per_s']:.2f}" if base else "n/a"
        j = r["judge"] or {}
        calls = j.get("judge_calls", 0) - j.get("judge_answer_cache_hits", 0)
        calls_1k = f"{1000 * calls / args.steps:.0f}" if j else "–"
        fb = f"{j['judge_fallback_rate']:.2f}" if "judge_fallback_rate" in j else "–"
        print(f"| {r['variant']} | {r['wall_s']:.0f} | {r['env_steps_per_s']:.1f} | {ratio} | {r['peak_rss_mb']:.0f} | {r['final_success_rate']:.2f} | "
              f"{r['final_hazard_events']:.2f} | {calls_1k} | {fb} |")


if __name__ == "__main__":
    main()
