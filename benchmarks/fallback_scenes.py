"""Which scenes does the judge fall back on in training? (issue 14: "fallback ≤ 15 % on the main command's states")

    python benchmarks/fallback_scenes.py --steps 10000 --out benchmarks/results/fallback_scenes.json

Runs `robo-prm train --task TASK` (the task's train config, evaluation and recording off) in this process and logs
every judgement the judge decides: the scene text, the model's confidence, whether the fallback answered. Writes the
counts per distinct scene text (most frequent first) and the fallback rate with and without the scenes matching
`--exclude` (default: the tool has fallen off the table or is in the air — states after the episode has failed).
"""
from __future__ import annotations

import argparse
import json
import re
import time
from collections import Counter
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="reach_tool")
    ap.add_argument("--steps", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--score_head", default=None, help="judge.score_head (null: the shipped head)")
    ap.add_argument("--exclude", default=r"has fallen off the table|is in the air",
                    help="regex of scene texts counted apart (states after a failure)")
    ap.add_argument("--out", default="benchmarks/results/fallback_scenes.json")
    args = ap.parse_args(argv)

    import robo_prm.judge.confident as confident
    from robo_prm.config import load_train_config
    from robo_prm.judge.scoring import summarize
    from robo_prm.provenance import provenance
    from robo_prm.train.run import train

    decisions: list[tuple[str, float | None, bool]] = []
    one = confident.ConfidentJudge._one

    def logged(self, task, s, rules, mode, scene, rescale_hazards=True):
        out = one(self, task, s, rules, mode, scene, rescale_hazards)
        conf = summarize(s.digits, s.digit_mass)[1] if s.digits is not None else None
        decisions.append((scene.text, conf, bool(out.fallback)))
        return out

    confident.ConfidentJudge._one = logged  # a probe: the run itself is the shipped code path
    t0 = time.perf_counter()
    cfg = load_train_config(args.task, {"steps": args.steps, "seed": args.seed, "runs_dir": "/tmp/fallback_scenes",
                                        "run_name": f"{args.task}_{args.seed}", "progress_bar": False,
                                        "record.every_episodes": 0, "eval.every_steps": 0, "checkpoint_every": 0,
                                        "judge.score_head": args.score_head})
    train(cfg)
    apart = re.compile(args.exclude)
    rest = [d for d in decisions if not apart.search(d[0])]
    rate = lambda ds: sum(d[2] for d in ds) / len(ds) if ds else None  # noqa: E731
    per_text = Counter((t, f) for t, _, f in decisions)
    conf = {t: c for t, c, _ in decisions}
    scenes = [{"text": t, "judged": per_text[(t, False)] + per_text[(t, True)], "fallbacks": per_text[(t, True)],
               "confidence": None if conf[t] is None else round(conf[t], 3)}
              for t in dict.fromkeys(t for t, _, _ in decisions)]
    scenes.sort(key=lambda r: (-r["fallbacks"], -r["judged"]))
    result = {"task": args.task, "steps": args.steps, "seed": args.seed, "score_head": args.score_head,
              "decisions": len(decisions), "fallback_rate": rate(decisions), "exclude": args.exclude,
              "decisions_apart": len(decisions) - len(rest), "fallback_rate_without_apart": rate(rest),
              "wall_s": round(time.perf_counter() - t0, 1), "provenance": provenance(), "scenes": scenes}
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k not in ("scenes", "provenance")}))
    for r in scenes[:10]:
        print(r["fallbacks"], r["judged"], r["confidence"], r["text"][:110])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
