"""Training speed with and without the LLM judge, synchronous and asynchronous, in one interleaved run;
and the default judge's throughput at batch 1 and batch 8.

    python benchmarks/train_speed.py                        # writes benchmarks/results/train_speed.json
    python benchmarks/train_speed.py --rounds 1 --sac_steps 1500 --ppo_steps 4096   # quicker, noisier

Variants, each `robo-prm train` on reach_tool in a fresh child process (`train(cfg)`, the product path;
no evaluation during training, no recordings, no checkpoints):
  env        the environment's own (sparse) reward: no judge, the speed reference
  llm_sync   the default blended reward with the bundled fine-tuned LLM judge, judged on the step path
  llm_async  the same with `--reward.async true` (judge worker thread at niceness 10, relabelled buffers)
  (with `--variants`, details file only: llm_async_nice0, the worker at the training thread's priority;
   llm_async_ring, `--reward.async_overflow drop --reward.async_queue 32`: scenes the judge cannot keep up
   with are skipped, not waited for — the row's judge stats hold async_dropped and async_worker_scenes;
   llm_async_unbounded, `--reward.async_max_lag 0 --reward.async_sample any`: async as it was before session 12)
for SAC (1 env) and PPO with 8 envs ("ppo8"); `--algos` may add SAC with 2 envs in one process ("sac_n2") or in
subprocesses ("sac_n2_subproc", "sac_n4_subproc"; the details file only). Steps/s = env steps of `model.learn` over its wall time
(the async variant's final flush included). Rounds alternate the variant order (env, sync, async, then
async, sync, env, …) so a drift of the shared machine's load hits every variant alike; the figures are
means over rounds. Every finished variant is appended to benchmarks/results/train_speed_runs.jsonl and
the JSON rewritten, so an interrupted run keeps what it measured.

judge_batch: judgements/s of the default judge (llama.cpp, the shipped fine-tuned GGUF, answer cache
off) on distinct scene texts from random-policy episodes of reach_tool, judged for reach_tool, 1 scene per
call vs 8 per call (one multi-sequence batch), at each of `--judge_threads` (judge_batch reports the
first). `--hf` adds the transformers backend's figures to the details file
(benchmarks/results/train_speed_detail.json, with every row and the ratios to `env`).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
VARIANTS = {"env": ["--reward_source", "env"], "llm_sync": [], "llm_async": ["--reward.async", "true"]}
EXTRA_VARIANTS = {"llm_async_nice0": ["--reward.async", "true", "--reward.async_nice", "0"],  # details only
                  # the write-up's ring buffer: a full queue skips its oldest mid-episode scene instead of waiting
                  "llm_async_ring": ["--reward.async", "true", "--reward.async_overflow", "drop", "--reward.async_queue", "32"],
                  # before session 12: no bound on the line of unresolved steps, SAC trained on rows still waiting
                  "llm_async_unbounded": ["--reward.async", "true", "--reward.async_max_lag", "0", "--reward.async_sample", "any"]}
ALGOS = {"sac": ["--algo", "sac"], "ppo8": ["--algo", "ppo", "--n_envs", "8"]}
# issue 15's steps/s against n_envs (SAC, gradient steps = n_envs per vector step: the same updates per env step);
# details file only, with `--algos`
EXTRA_ALGOS = {"sac_n2": ["--algo", "sac", "--n_envs", "2"],
               "sac_n2_subproc": ["--algo", "sac", "--n_envs", "2", "--vec_env", "subproc"],
               "sac_n4_subproc": ["--algo", "sac", "--n_envs", "4", "--vec_env", "subproc"]}
COMMON = ["--task", "reach_tool", "--eval.every_steps", "0", "--eval.episodes", "1", "--eval.record", "0",
          "--record.every_episodes", "0", "--checkpoint_every", "0", "--progress_bar", "false"]


# ---- child processes -----------------------------------------------------------------------
def child_train(argv: list[str]) -> dict:
    """`robo-prm train ARGV` in this process, timing `model.learn`."""
    import stable_baselines3 as sb3

    from robo_prm.cli import build_parser, train_config_from_args
    from robo_prm.train import train

    timing: list[tuple[float, int]] = []
    for cls in (sb3.SAC, sb3.PPO):
        def timed(self, *a, _orig=cls.learn, **k):
            t0, n0 = time.perf_counter(), self.num_timesteps
            out = _orig(self, *a, **k)
            timing.append((time.perf_counter() - t0, self.num_timesteps - n0))
            return out
        cls.learn = timed
    args, extra = build_parser().parse_known_args(["train", *argv])
    cfg = train_config_from_args(args, extra)
    load0 = os.getloadavg()[0]
    run = train(cfg)
    learn_s, steps = timing[0]
    summary = json.loads((run / "summary.json").read_text())
    return {"learn_s": learn_s, "steps": steps, "sps": steps / learn_s, "load_before": load0,
            "load_after": os.getloadavg()[0], "judge": summary.get("judge"), "peak_rss_mb": summary.get("peak_rss_mb")}


def child_judge(n: int, backend: str, threads: int) -> dict:
    """Judgements/s of the default judge (or `backend`) at 1 and 8 scenes per call, answer cache off."""
    from robo_prm.envs.task import load_task
    from robo_prm.judge import JudgeConfig, make_judge

    task = load_task("reach_tool").text
    data, source = distinct_scenes(n + 8)
    warm, data = data[:8], data[8:]
    import torch

    torch.set_num_threads(threads)
    judge = make_judge(JudgeConfig(backend=backend, cache_size=0, n_threads=threads))
    judge.judge(task, warm[:1])
    judge.judge(task, warm)  # the prefix, the batch path's allocations
    out = {"scenes": source, "n": n, "threads": threads, "load_before": os.getloadavg()[0]}
    for batch in (1, 8):
        t0 = time.perf_counter()
        for i in range(0, n, batch):
            judge.judge(task, data[i:i + batch])
        out[str(batch)] = n / (time.perf_counter() - t0)
    out["load_after"] = os.getloadavg()[0]
    judge.close()
    return out


def distinct_scenes(n: int, seed: int = 0) -> tuple[list, str]:
    """`n` distinct scene descriptions from random-policy episodes of reach_tool (seeded), in a shuffled order."""
    import gymnasium as gym
    import numpy as np

    import robo_prm  # noqa: F401  (registers the envs)
    from robo_prm.describe import DescribeWrapper
    from robo_prm.envs.rollout import rollout

    env = DescribeWrapper(gym.make("robo_prm/ReachTool-v0"))
    env.action_space.seed(seed)
    found: dict[str, object] = {}

    def keep(step) -> bool:
        if step.t:
            found.setdefault(step.info["description"].text, step.info["description"])
        return len(found) >= n

    s = seed
    for _ in range(200):
        if len(found) >= n:
            break
        rollout(env, lambda obs: env.action_space.sample(), s, on_step=keep)
        s = None
    env.close()
    if len(found) < n:
        raise SystemExit(f"only {len(found)} distinct scenes from 200 random episodes")
    out = list(found.values())[:n]
    np.random.default_rng(seed).shuffle(out)
    return out, "distinct descriptions from random-policy episodes of robo_prm/ReachTool-v0"


def spawn(args: list[str]) -> dict:
    proc = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, cwd=ROOT)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"child {args} failed:\n{proc.stderr[-3000:]}")
    return json.loads(line[7:])


# ---- the parent --------------------------------------------------------------------------------
def rows_threads(rows: list[dict]) -> int | None:
    """The thread count of the first judge row: judge_batch reports that setting (the details hold the others)."""
    return next((r["threads"] for r in rows if r.get("kind") == "judge"), None)


def summarize(rows: list[dict], prov: dict) -> tuple[dict, dict]:
    """(the results JSON, the details JSON) from the rows measured so far."""
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    out: dict = {}
    for algo in ALGOS:
        sps = {v: [r["sps"] for r in rows if r.get("algo") == algo and r.get("variant") == v] for v in VARIANTS}
        if any(sps.values()):
            out[algo] = {v: round(mean(x), 2) for v, x in sps.items() if x}
    judge = [r for r in rows if r.get("kind") == "judge" and r.get("backend") == "llamacpp"
             and r.get("threads") == rows_threads(rows)]
    every = {algo: {v: round(mean(x), 2) for v in {**VARIANTS, **EXTRA_VARIANTS}
                    if (x := [r["sps"] for r in rows if r.get("algo") == algo and r.get("variant") == v])}
             for algo in {**ALGOS, **EXTRA_ALGOS}}
    if judge:
        out["judge_batch"] = {b: round(mean([r[b] for r in judge]), 2) for b in ("1", "8")}
    out["provenance"] = {**prov, "load_at_end": round(os.getloadavg()[0], 2)}
    ratios = {algo: {v: round(x / every[algo]["env"], 3) for v, x in every[algo].items()}
              for algo in every if "env" in every[algo]}
    batches = {}
    for r in rows:
        if r.get("kind") == "judge":
            batches.setdefault(f"{r['backend']}_threads{r['threads']}", []).append(r)
    batches = {k: {b: round(mean([r[b] for r in v]), 2) for b in ("1", "8")} for k, v in batches.items()}
    detail = {"steps_per_s": every, "ratios_vs_env": ratios, "judge_batch": batches, "rows": rows}
    return out, detail


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sac_steps", type=int, default=3000)
    ap.add_argument("--ppo_steps", type=int, default=8192)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--judge_n", type=int, default=32, help="scenes per judge_batch measurement")
    ap.add_argument("--algos", default=",".join(ALGOS), help=f"comma-separated, of {', '.join({**ALGOS, **EXTRA_ALGOS})}; "
                                                            "empty: only the judge_batch rows")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {', '.join({**VARIANTS, **EXTRA_VARIANTS})}")
    ap.add_argument("--reuse_train_rows", action="store_true",
                    help="start from the train rows already in train_speed_runs.jsonl (a judge-only rerun)")
    ap.add_argument("--extra", default="", help="flags added to every training variant (e.g. --judge.n_threads 1)")
    ap.add_argument("--hf", action="store_true", help="also measure the transformers backend's batch 1 / 8")
    ap.add_argument("--judge_threads", default="2", help="llama.cpp (torch) threads of the judge_batch rows, comma-separated; "
                                                         "judge_batch reports the first")
    ap.add_argument("--runs_dir", default="/tmp/robo_prm_train_speed")
    ap.add_argument("--results", default=str(RESULTS), help="folder of train_speed.json, _runs.jsonl, _detail.json")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--child_judge", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        print("RESULT " + json.dumps(child_train(json.loads(args.child)), default=float))
        return
    if args.child_judge is not None:
        print("RESULT " + json.dumps(child_judge(args.judge_n, args.child_judge, int(args.judge_threads)), default=float))
        return
    from robo_prm.provenance import provenance

    prov = provenance()
    results = Path(args.results)
    results.mkdir(parents=True, exist_ok=True)
    out_json, runs, details = results / "train_speed.json", results / "train_speed_runs.jsonl", results / "train_speed_detail.json"
    rows: list[dict] = []

    def record(row: dict) -> None:
        rows.append(row)
        with open(runs, "a") as f:
            f.write(json.dumps({**row, "date": prov["date"], "command": prov["command"]}, default=float) + "\n")
        out, detail = summarize(rows, prov)
        out_json.write_text(json.dumps(out, indent=1) + "\n")
        details.write_text(json.dumps(detail, indent=1, default=float) + "\n")
        print(json.dumps({k: row[k] for k in row if k not in ("judge",)}, default=float), file=sys.stderr, flush=True)

    if args.reuse_train_rows and runs.exists():
        rows += [r for r in map(json.loads, runs.read_text().splitlines()) if r.get("kind") == "train"]
    variants = args.variants.split(",")
    for rnd in range(args.rounds):
        order = variants if rnd % 2 == 0 else variants[::-1]
        for algo in [a for a in args.algos.split(",") if a]:
            steps = args.ppo_steps if algo == "ppo8" else args.sac_steps
            for v in order:
                name = f"{algo}_{v}_r{rnd}"
                argv = [*COMMON, *{**ALGOS, **EXTRA_ALGOS}[algo], *{**VARIANTS, **EXTRA_VARIANTS}[v], "--steps", str(steps), "--seed", str(args.seed),
                        "--runs_dir", args.runs_dir, "--run_name", name, *args.extra.split()]
                row = spawn(["--child", json.dumps(argv)])
                record({"kind": "train", "algo": algo, "variant": v, "round": rnd, "argv": argv, **row})
        for backend in ["llamacpp"] + (["transformers"] if args.hf else []):
            for threads in args.judge_threads.split(","):
                row = spawn(["--child_judge", backend, "--judge_n", str(args.judge_n), "--judge_threads", threads])
                record({"kind": "judge", "backend": backend, "round": rnd, **row})
    print(json.dumps(summarize(rows, prov)[0], indent=1))


if __name__ == "__main__":
    main()
