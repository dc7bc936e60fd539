"""Judge speed per local backend: judgements/s, p50/p95 ms per judgement, peak RSS.

    python benchmarks/judge_speed.py            # all rows, writes benchmarks/results/judge_speed.json
    python benchmarks/judge_speed.py --n 8      # fewer scenes per row (quicker, noisier)

Scenes are `info["description"]` from a random-policy rollout of
robo_prm/PushToolFromEdge-v0 (hand-written texts if the envs cannot load). Every row runs
in its own subprocess, one at a time, so peak RSS (getrusage) is that backend's alone.
A judgement = the score pass, plus one yes/no pass per task hazard in the "union" row (the
default hazards_from=auto asks the LLM only about hazards the simulator cannot check; this
task has none). The answer cache is off in these rows; `--rollout` measures it separately:
backend answers per 1,000 env steps of a random policy through the blended reward (judge every 4th step).
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "judge_speed.json"
TASK = "push_tool_from_edge"

ROWS = {  # name → (JudgeConfig fields, note); the answer cache is off so every row computes every scene
    "rules": ({"backend": "rules", "cache_size": 0}, "simulator progress + hazards"),
    "llamacpp": ({"backend": "llamacpp", "cache_size": 0}, "default: prefix reuse, hazards_from=auto (score pass only here)"),
    "llamacpp-union": ({"backend": "llamacpp", "hazards_from": "union", "cache_size": 0}, "prefix reuse + one LLM yes/no pass per hazard"),
    "llamacpp-no-reuse": ({"backend": "llamacpp", "prefix_reuse": False, "cache_size": 0}, "every prompt evaluated in full"),
    "transformers": ({"backend": "transformers", "cache_size": 0}, "bundled GGUF dequantised to fp32, batched"),
}

FALLBACK_TEXTS = [
    "The gripper is open 10 cm above the hammer. The hammer lies 3 cm from the front edge of the table. Milestones reached: 0 of 2.",
    "The gripper is closed, 30 cm from the hammer. The hammer lies 5 cm from the front edge of the table. Milestones reached: 0 of 2.",
    "The gripper touches the hammer. The hammer lies 6 cm from the front edge of the table. Milestones reached: 1 of 2.",
    "The hammer lies in the middle of the table. The gripper is open 8 cm above it. Milestones reached: 2 of 2.",
]


def scenes(n: int, seed: int = 0):
    from robo_prm.types import SceneDescription

    try:
        import gymnasium as gym

        import robo_prm  # noqa: F401  (registers the envs)
        from robo_prm.describe import DescribeWrapper

        from robo_prm.envs.rollout import rollout

        env = DescribeWrapper(gym.make("robo_prm/PushToolFromEdge-v0"))
        env.action_space.seed(seed)
        out, seen, taken = [], set(), 0

        def keep(step) -> bool:
            nonlocal taken
            if step.t == 0:
                return False
            taken += 1
            d = step.info["description"]
            if d.text not in seen:  # distinct texts: no row profits from repeated prompts
                seen.add(d.text)
                out.append(d)
            return len(out) == n or taken == 20 * n

        s = seed
        while len(out) < n and taken < 20 * n:  # random episodes, seeded once
            rollout(env, lambda obs: env.action_space.sample(), s, on_step=keep)
            s = None
        env.close()
        if len(out) == n:
            return out, "random-policy rollout of robo_prm/PushToolFromEdge-v0"
    except Exception as exc:  # envs missing: hand-written scenes
        print(f"envs unavailable ({exc}); using hand-written scenes", file=sys.stderr)
    return [SceneDescription(FALLBACK_TEXTS[i % len(FALLBACK_TEXTS)] + f" Step {i}.", ()) for i in range(n)], "hand-written"


def run_row(name: str, n: int, threads: int) -> dict:
    """In a fresh process: load the backend, warm up, time batch 1 and batch 8."""
    import numpy as np
    import torch

    torch.set_num_threads(threads)
    from robo_prm.judge import JudgeConfig, make_judge
    from robo_prm.envs.task import load_task

    task = load_task(TASK).text
    data, source = scenes(n)
    t0 = time.perf_counter()
    judge = make_judge(JudgeConfig(n_threads=threads, **ROWS[name][0]))
    load_s = time.perf_counter() - t0
    judge.judge(task, data[:1])  # warm-up: task prefix, allocations
    result = {"row": name, "note": ROWS[name][1], "load_s": load_s, "scenes": source, "n": n}
    for batch in (1, 8):
        per, t_all = [], time.perf_counter()
        for i in range(0, n, batch):
            part = data[i:i + batch]
            t = time.perf_counter()
            judge.judge(task, part)
            per += [(time.perf_counter() - t) * 1e3 / len(part)] * len(part)
        wall = time.perf_counter() - t_all
        result[f"batch{batch}"] = {"judgements_per_s": n / wall, "p50_ms": float(np.percentile(per, 50)),
                                   "p95_ms": float(np.percentile(per, 95))}
    result["stats"] = judge.stats()
    judge.close()
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


def run_rollout(steps: int, threads: int) -> dict:
    """Random policy through the blended reward with the default judge: how often the model runs."""
    import gymnasium as gym
    import numpy as np
    import torch

    torch.set_num_threads(threads)
    import robo_prm  # noqa: F401
    from robo_prm.describe import DescribeWrapper
    from robo_prm.envs.rollout import rollout
    from robo_prm.judge import JudgeConfig, make_judge
    from robo_prm.reward import LLMRewardWrapper, RewardConfig

    out = {}
    for task_name, env_id in (("reach_tool", "robo_prm/ReachTool-v0"), (TASK, "robo_prm/PushToolFromEdge-v0")):
        judge = make_judge(JudgeConfig(n_threads=threads))
        env = LLMRewardWrapper(DescribeWrapper(gym.make(env_id)), judge, RewardConfig())
        env.action_space.seed(0)
        t0, taken, seed = time.perf_counter(), 0, 0
        while taken < steps:  # random episodes (seeded once) until `steps` env steps
            taken += rollout(env, lambda obs: env.action_space.sample(), seed, max_steps=steps - taken).steps
            seed = None
        wall = time.perf_counter() - t0
        st = judge.stats()
        computed = st["calls"] - st["answer_cache_hits"]
        out[task_name] = {"env_steps": steps, "judged_scenes": st["calls"], "model_answers_computed": computed,
                          "model_calls_per_1k_steps": 1000 * computed / steps,
                          "answer_cache_hit_rate": st["answer_cache_hits"] / max(1, st["calls"]),
                          "fallback_rate": st["fallback_rate"], "env_steps_per_s": steps / wall}
        env.close()
        judge.close()
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def table(results: list[dict]) -> str:
    lines = ["| backend | what | batch | judgements/s | p50 ms | p95 ms | peak RSS MB | load s |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        for b in (1, 8):
            m = r[f"batch{b}"]
            lines.append(f"| {r['row']} | {r['note']} | {b} | {m['judgements_per_s']:.1f} | {m['p50_ms']:.1f} | "
                         f"{m['p95_ms']:.1f} | {r['peak_rss_mb']:.0f} | {r['load_s']:.1f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=16, help="scenes per row (each judged at batch 1 and batch 8)")
    ap.add_argument("--threads", type=int, default=2, help="llama.cpp and torch threads (the judge's default: 2)")
    ap.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated subset of: {', '.join(ROWS)}")
    ap.add_argument("--rollout", type=int, default=2000, help="env steps of the cache measurement (0: skip)")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one row, print JSON
    args = ap.parse_args()
    if args.one:
        result = run_rollout(args.rollout, args.threads) if args.one == "rollout" else run_row(args.one, args.n, args.threads)
        print("RESULT " + json.dumps(result))
        return
    from robo_prm.provenance import load_average, provenance

    results = []
    prov = provenance()
    rollout = None
    for name in args.rows.split(",") + (["rollout"] if args.rollout else []):
        proc = subprocess.run([sys.executable, __file__, "--one", name, "--n", str(args.n), "--threads", str(args.threads),
                               "--rollout", str(args.rollout)], capture_output=True, text=True, cwd=ROOT)
        line = next((l for l in proc.stdout.splitlines() if l.startswith("RESULT ")), None)
        if line is None:
            print(f"{name}: failed\n{proc.stderr[-2000:]}", file=sys.stderr)
            continue
        if name == "rollout":
            rollout = json.loads(line[7:])
        else:
            results.append(json.loads(line[7:]))
        print(f"{name}: done", file=sys.stderr)
    meta = {**prov, "load_at_end": load_average(), "task": TASK, "threads": args.threads}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"meta": meta, "results": results, "rollout": rollout}, indent=2))
    print(table(results))
    if rollout:
        print("\n| task | env steps | judged scenes | model answers computed | model calls / 1k steps | answer-cache hit rate | fallback rate | env steps/s |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for task_name, r in rollout.items():
            if isinstance(r, dict):
                print(f"| {task_name} | {r['env_steps']} | {r['judged_scenes']} | {r['model_answers_computed']} | "
                      f"{r['model_calls_per_1k_steps']:.0f} | {r['answer_cache_hit_rate']:.2f} | {r['fallback_rate']:.2f} | {r['env_steps_per_s']:.0f} |")
    print(f"\n{meta['command']} (threads={args.threads}, load avg {meta['load']:.1f} → {meta['load_at_end']:.1f}); "
          f"JSON: {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
