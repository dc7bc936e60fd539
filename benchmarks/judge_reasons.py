"""Reason faithfulness of the default judge alone (robo_prm/judge/faithfulness.py), on the same states as
benchmarks/judge_any_task.py: `reasons` evenly spaced states per episode, judged with explain=True.

    python benchmarks/judge_reasons.py --name shipped reach_tool push_tool_from_edge place_cup_in_bin tidy_table

Whole episodes as training and replay describe them (`--every K`: every K-th step of `--episodes` scripted and
`--episodes` perturbed episodes per task, the milestone line shown), with `--reason_mode copy|free`:

    python benchmarks/judge_reasons.py --name whole_copy --every 10 --reason_mode copy reach_tool … tidy_table

adds per task the share of `grounded` reasons, distinct reasons, and `stale` (judged steps whose reason is the
previous judged step's though the scene text changed: a replay whose caption does not follow the arm).

Writes benchmarks/results/judge_reasons_<name>.json (every reason with its scene, so the figure can be recomputed).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("tasks", nargs="+")
    ap.add_argument("--name", required=True)
    ap.add_argument("--episodes", type=int, default=2)
    ap.add_argument("--max_states", type=int, default=8)
    ap.add_argument("--reasons", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--every", type=int, default=0, help="whole episodes: judge every K-th step (0: sampled states)")
    ap.add_argument("--reason_mode", choices=("copy", "free"), default="copy")
    args = ap.parse_args(argv)
    from robo_prm.finetune.any_task import _subsample, task_case
    from robo_prm.judge import JudgeConfig, make_judge
    from robo_prm.metrics import reason_faithfulness
    from robo_prm.provenance import provenance

    judge = make_judge(JudgeConfig(n_threads=args.threads, reason_mode=args.reason_mode))
    out = {"meta": {**provenance("python benchmarks/judge_reasons.py " + " ".join(argv or sys.argv[1:])),
                    "uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()}, "tasks": {}}
    every = []
    for path in args.tasks:
        if args.every:
            name, triples, extra = whole_episodes(judge, path, args.episodes, args.seed, args.every)
        else:
            case = task_case(path, args.episodes, args.seed, args.max_states)
            name, triples, extra = case.name, [], {}
            for ep in case.episodes:
                for i in _subsample(len(ep.scenes), args.reasons):
                    [j] = judge.judge(case.text, [ep.scenes[i]], explain=True)
                    triples.append((j.reason, list(ep.scenes[i].facts), ep.scenes[i].text))
        every += triples
        out["tasks"][name] = {"figure": {**reason_faithfulness(triples), **extra}, "reasons": triples}
        out["overall"] = reason_faithfulness(every)
        RESULTS.joinpath(f"judge_reasons_{args.name}.json").write_text(json.dumps(out, indent=1))
        print(name, out["tasks"][name]["figure"], flush=True)
    judge.close()
    print("overall", out["overall"])
    return 0


def whole_episodes(judge, path: str, episodes: int, seed: int, every: int) -> tuple[str, list, dict]:
    """(task name, (reason, facts, text) at every `every`-th step of `episodes` scripted and `episodes` perturbed
    episodes, {distinct, stale, ms_per_reason}): the scenes as training describes them (milestone line on)."""
    import time

    from robo_prm.describe.state_captioner import StateCaptioner
    from robo_prm.envs.experts import ScriptedExpert
    from robo_prm.envs.rollout import rollout
    from robo_prm.envs.tidy_env import TidyTableEnv
    from robo_prm.finetune.any_task import load_case_task

    task = load_case_task(path)
    env, cap = TidyTableEnv(task), StateCaptioner(task, True)
    triples, stale, pairs, wall = [], 0, 0, 0.0
    for e in range(2 * episodes):
        s = seed + e // 2
        policy = ScriptedExpert(env, seed=s) if e % 2 == 0 else ScriptedExpert(env, noise=0.1, perturb=0.5, seed=s)
        states: list = []
        rollout(env, policy, s, on_step=lambda step: states.append(env.scene_state))
        before = None
        for i in range(0, len(states), every):
            scene = cap(states[i])
            t0 = time.perf_counter()
            [j] = judge.judge(task.text, [scene], explain=True)
            wall += time.perf_counter() - t0
            if before is not None and before[1] != scene.text:
                pairs, stale = pairs + 1, stale + (before[0] == j.reason)
            before = (j.reason, scene.text)
            triples.append((j.reason, list(scene.facts), scene.text))
    return task.name, triples, {"distinct": len({t[0] for t in triples}), "stale": stale / pairs if pairs else None,
                                "ms_per_reason": 1e3 * wall / max(len(triples), 1)}


def rescore(name: str) -> dict:
    """Recompute the figures of a saved run with the current claim reader (`judge_reasons.py rescore NAME`)."""
    from robo_prm.metrics import reason_faithfulness

    path = RESULTS / f"judge_reasons_{name}.json"
    out = json.loads(path.read_text())
    every = []
    for t in out["tasks"].values():
        triples = [tuple(x) for x in t["reasons"]]
        t["figure"] = {**t["figure"], **reason_faithfulness(triples)}  # whole-episode figures kept
        every += triples
    out["overall"] = reason_faithfulness(every)
    path.write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    if sys.argv[1:2] == ["rescore"]:
        o = rescore(sys.argv[2])
        print({n: t["figure"]["faithfulness"] for n, t in o["tasks"].items()}, o["overall"])
        sys.exit(0)
    sys.exit(main())
