"""The README's main command, measured against its cheaper variants in one session.

    python benchmarks/train_main.py                      # 4 variants × the main command's budget
    python benchmarks/train_main.py --steps 3000 --variants llm,rules
    python benchmarks/train_main.py --seeds 0,1,2 --extra "--reward.normalize false"   # one flag set for all

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
import subprocess
import sys
import time
from pathlib import Path

from robo_prm.provenance import load_average, provenance

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "train_main.json"
VARIANTS = {
    "llm": [],
    "rules": ["--judge.backend", "rules"],
    "env": ["--reward_source", "env"],
    "dense": ["--reward_source", "dense"],
}


def run(variant: str, seed: int, args, runs_dir: Path) -> dict:
    name = f"bench_{variant}_{seed}"
    cmd = [sys.executable, "-m", "robo_prm.cli", "train", "--task", args.task, "--algo", args.algo, "--steps", str(args.steps),
           "--seed", str(seed), "--runs_dir", str(runs_dir), "--run_name", name, "--progress_bar", "false",
           "--record.every_episodes", "0", "--eval.every_steps", str(args.eval_every), "--eval.episodes", str(args.eval_episodes),
           "--eval.record", "0", *VARIANTS[variant], *args.extra.split()]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{variant} failed:\n{proc.stderr[-3000:]}")
    summary = json.loads((runs_dir / name / "summary.json").read_text())
    history = json.loads((runs_dir / name / "eval" / "eval_history.json").read_text())
    return {
        "variant": variant, "seed": seed, "wall_s": wall, "env_steps_per_s": args.steps / wall,
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
    ap.add_argument("--steps", type=int, default=20_000)
    ap.add_argument("--seeds", default="0", help="comma-separated; every variant runs every seed")
    ap.add_argument("--extra", default="", help="flags added to every variant's command")
    ap.add_argument("--eval_every", type=int, default=5000)
    ap.add_argument("--eval_episodes", type=int, default=20)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--runs_dir", default="/tmp/robo_prm_bench_runs")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    runs_dir = Path(args.runs_dir)
    prov = provenance()
    seeds = [int(x) for x in args.seeds.split(",")]
    rows = []
    for seed in seeds:  # seed-major: a slow drift of the machine's load hits every variant alike
        for v in args.variants.split(","):
            rows.append(run(v, seed, args, runs_dir))
            print(json.dumps({k: rows[-1][k] for k in ("variant", "seed", "wall_s", "final_success_rate", "eval_history")}),
                  file=sys.stderr, flush=True)
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    per = {v: [r for r in rows if r["variant"] == v] for v in variants}
    base = per.get("env")
    meta = {**prov, "load_at_end": load_average(), "task": args.task, "algo": args.algo, "steps": args.steps,
            "seeds": seeds, "extra": args.extra}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print("| variant | wall s | env steps/s | speed vs env | peak RSS MB | final success (mean) | per seed | hazard events/ep | model calls / 1k steps | fallback rate |")
    print("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|")
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    for v, rs in per.items():
        sps = mean([r["env_steps_per_s"] for r in rs])
        ratio = f"{sps / mean([r['env_steps_per_s'] for r in base]):.2f}" if base else "n/a"
        js = [r["judge"] or {} for r in rs]
        calls = mean([j.get("judge_calls", 0) - j.get("judge_answer_cache_hits", 0) for j in js])
        calls_1k = f"{1000 * calls / args.steps:.0f}" if any(js) else "–"
        fb = f"{mean([j['judge_fallback_rate'] for j in js]):.2f}" if all("judge_fallback_rate" in j for j in js) else "–"
        succ = [r["final_success_rate"] for r in rs]
        print(f"| {v} | {mean([r['wall_s'] for r in rs]):.0f} | {sps:.1f} | {ratio} | {max(r['peak_rss_mb'] for r in rs):.0f} | "
              f"{mean(succ):.2f} | {' / '.join(f'{x:.2f}' for x in succ)} | {mean([r['final_hazard_events'] for r in rs]):.2f} | {calls_1k} | {fb} |")


if __name__ == "__main__":
    main()
