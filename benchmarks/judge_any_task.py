"""The judge on any task file, under each low-confidence fallback policy (issue 14; docs/BENCHMARKS.md,
"Judge on any task file"). One LLM pass serves every policy (`MemoBackend`): the policies differ only
in what replaces an unconfident score, so they are compared on the same answers.

    robo-prm tasks generate --n 30 --seed 1 --out generated_s1
    python benchmarks/judge_any_task.py --name heldout generated_s1/gen_s1_00{02,07,13,10,18}.yaml
    python benchmarks/judge_any_task.py --name shipped reach_tool push_tool_from_edge place_cup_in_bin tidy_table

Each task is measured as written and as a text-only task (milestones and success_distance dropped:
the rules then know only success); the scene texts are equal, so the LLM is asked once. Results go to
benchmarks/results/judge_any_task_<name>.json after every task (an interrupted run keeps what it has):
{"meta", "ms_per_judgement", "runs": {"<policy>[/text_only]": {"overall", "tasks"}}, "details": …}.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
# "+raw_reasons": the same policy with judge.reason_guard off — the model's own reasons, before the judge drops
# sentences that contradict the scene (the same LLM answers: the memo serves both)
POLICIES = ("rules", "milestones_only", "blend_by_confidence", "none", "milestones_only+raw_reasons")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tasks", nargs="+")
    ap.add_argument("--name", required=True)
    ap.add_argument("--episodes", type=int, default=2)
    ap.add_argument("--max_states", type=int, default=10)
    ap.add_argument("--reasons", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--backend", default="llamacpp", help="judge.backend (llamacpp: the shipped fine-tuned judge)")
    ap.add_argument("--distilled", default=None, help="judge.distilled (backend distilled)")
    ap.add_argument("--hazard_answerer", default="reader", help="judge.hazard_answerer (reader | backend)")
    ap.add_argument("--hazard_reader", default=None, help="judge.hazard_reader (null: the shipped one)")
    ap.add_argument("--model", default=None, help="judge.model: a GGUF (null: the shipped fine-tuned judge)")
    ap.add_argument("--calibrator", default=None, help="judge.transformers.calibrator (with --model: that model's)")
    ap.add_argument("--progress_reader", default=None, help="judge.progress_reader, for the reader / reader_blend "
                                                            "policies (null: the shipped one)")
    ap.add_argument("--score_head", default=None, help="judge.score_head: a head folder, or none (null: the shipped "
                                                       "one with the shipped judge)")
    args = ap.parse_args(argv)

    import torch

    from robo_prm.finetune.any_task import MemoBackend, figures, hot_seconds, judge_case, task_case
    from robo_prm.judge import ConfidentJudge, JudgeConfig, make_judge
    from robo_prm.provenance import provenance

    torch.set_num_threads(args.threads)
    cfg = JudgeConfig(backend=args.backend, n_threads=args.threads, hazard_answerer=args.hazard_answerer,
                      hazard_reader=args.hazard_reader, model=args.model,
                      score_head=args.score_head)
    if args.calibrator:
        cfg = dataclasses.replace(cfg, transformers=dataclasses.replace(cfg.transformers, calibrator=args.calibrator))
    if args.distilled:
        cfg = dataclasses.replace(cfg, distilled=args.distilled)
    base = make_judge(cfg)
    memo = MemoBackend(base.backend)
    policies = args.policies.split(",")
    second = None
    if any(p.split("+")[0] in ("reader", "reader_blend") for p in policies):
        from robo_prm.judge import make_progress_reader

        second = make_progress_reader(dataclasses.replace(cfg, fallback="reader", progress_reader=args.progress_reader))
    judges = {p: ConfidentJudge(memo, dataclasses.replace(base.cfg, fallback=p.split("+")[0],
                                                          reason_guard="+raw_reasons" not in p), base.calibrator,
                                base.reader, second)
              for p in policies}
    out_path = RESULTS / f"judge_any_task_{args.name}.json"
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    meta = {**provenance("python benchmarks/judge_any_task.py " + " ".join(argv or sys.argv[1:])), "uptime_start": load,
            "threads": args.threads, "episodes": args.episodes, "max_states": args.max_states, "reasons": args.reasons}
    cases: dict[str, list] = {"": [], "/text_only": []}
    records: dict[str, list] = {}
    per_task: dict[str, dict] = {}
    t0 = time.perf_counter()
    for path in args.tasks:
        task_ms = None
        for suffix, text_only in (("", False), ("/text_only", True)):
            case = task_case(path, args.episodes, args.seed, args.max_states, text_only)
            cases[suffix].append(case)
            before = (memo.fresh, hot_seconds(memo, base))
            for p in policies:
                rec = judge_case(judges[p], case, args.reasons)
                records.setdefault(p + suffix, []).append(rec)
                per_task.setdefault(p + suffix, {})[case.name] = figures([case], [rec], None)
            if memo.fresh > before[0]:  # the text-only pass reads the same texts: it reuses these answers
                task_ms = (hot_seconds(memo, base) - before[1]) * 1e3 / (memo.fresh - before[0])
            for p in policies:
                per_task[p + suffix][case.name]["ms_per_judgement"] = task_ms
        ms_all = hot_seconds(memo, base) * 1e3 / memo.fresh if memo.fresh else None
        runs, details = {}, {}
        for key, recs in records.items():
            overall = figures(cases["/text_only" if key.endswith("/text_only") else ""][:len(recs)], recs, ms_all)
            details[key] = {"overall": overall.pop("_details"),
                            "tasks": {n: r["_details"] for n, r in per_task[key].items()}}
            runs[key] = {"overall": overall, "tasks": {n: {k: v for k, v in r.items() if k != "_details"}
                                                       for n, r in per_task[key].items()}}
        meta.update(seconds=round(time.perf_counter() - t0, 1), tasks_done=len(cases[""]),
                    uptime_now=subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
        RESULTS.mkdir(parents=True, exist_ok=True)
        out_path.write_text(json.dumps({"meta": meta, "ms_per_judgement": ms_all, "fresh_judgements": memo.fresh,
                                        "runs": runs, "details": details,
                                        "stats": {p: j.stats() for p, j in judges.items()}}, indent=1, default=str))
        print(f"[{time.perf_counter() - t0:.0f} s] {path}: " + "; ".join(
            f"{k}: voc_s={_f(r['overall']['voc_success'])} voc_r={_f(r['overall']['voc_random'])} "
            f"fb={_f(r['overall']['fallback_rate'])}" for k, r in runs.items()), flush=True)
    base.close()
    return 0


def _f(v):
    return "null" if v is None else f"{v:.2f}"


def table(names: list[str]) -> str:
    """Markdown rows of saved results: `python benchmarks/judge_any_task.py table heldout shipped …`."""
    lines = ["| tasks | judge.fallback | VOC success ↑ | VOC random | fallback rate | hazard P | hazard R | "
             "reason faithfulness (repeated / reasons) | ms/judgement |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name in names:
        d = json.loads((RESULTS / f"judge_any_task_{name}.json").read_text())
        for key, run in d["runs"].items():
            o, rs = run["overall"], d["details"][key]["overall"]["reasons"]
            ms = "n/a" if o["ms_per_judgement"] is None else f"{o['ms_per_judgement']:.0f}"
            faith = "n/a" if o["reason_faithfulness"] is None else f"{o['reason_faithfulness']:.2f} ({rs['repeated']} / {rs['reasons']})"
            lines.append(f"| {name}{' (text-only)' if key.endswith('/text_only') else ''} | {key.split('/')[0]} | "
                         f"{_f(o['voc_success'])} | {_f(o['voc_random'])} | {_f(o['fallback_rate'])} | "
                         f"{_f(o['hazard_precision'])} | {_f(o['hazard_recall'])} | {faith} | {ms} |")
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:2] == ["table"]:
        print(table(sys.argv[2:]))
        sys.exit(0)
    sys.exit(main())
