"""Reason faithfulness of the default judge alone (robo_prm/judge/faithfulness.py), on the same states as
benchmarks/judge_any_task.py: `reasons` evenly spaced states per episode, judged with explain=True.

    python benchmarks/judge_reasons.py --name shipped reach_tool push_tool_from_edge place_cup_in_bin tidy_table

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
    args = ap.parse_args(argv)
    from robo_prm.finetune.any_task import _subsample, task_case
    from robo_prm.judge import JudgeConfig, make_judge
    from robo_prm.metrics import reason_faithfulness
    from robo_prm.provenance import provenance

    judge = make_judge(JudgeConfig(n_threads=args.threads))
    out = {"meta": {**provenance("python benchmarks/judge_reasons.py " + " ".join(argv or sys.argv[1:])),
                    "uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()}, "tasks": {}}
    every = []
    for path in args.tasks:
        case = task_case(path, args.episodes, args.seed, args.max_states)
        triples = []
        for ep in case.episodes:
            for i in _subsample(len(ep.scenes), args.reasons):
                [j] = judge.judge(case.text, [ep.scenes[i]], explain=True)
                triples.append((j.reason, list(ep.scenes[i].facts), ep.scenes[i].text))
        every += triples
        out["tasks"][case.name] = {"figure": reason_faithfulness(triples), "reasons": triples}
        out["overall"] = reason_faithfulness(every)
        RESULTS.joinpath(f"judge_reasons_{args.name}.json").write_text(json.dumps(out, indent=1))
        print(case.name, out["tasks"][case.name]["figure"], flush=True)
    judge.close()
    print("overall", out["overall"])
    return 0


def rescore(name: str) -> dict:
    """Recompute the figures of a saved run with the current claim reader (`judge_reasons.py rescore NAME`)."""
    from robo_prm.metrics import reason_faithfulness

    path = RESULTS / f"judge_reasons_{name}.json"
    out = json.loads(path.read_text())
    every = []
    for t in out["tasks"].values():
        triples = [tuple(x) for x in t["reasons"]]
        t["figure"] = reason_faithfulness(triples)
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
