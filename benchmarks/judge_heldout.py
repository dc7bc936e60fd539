"""Held-out evaluation of the fine-tuned judge against rules, a MiniLM-cosine baseline and the zero-shot LLM.

    python benchmarks/judge_heldout.py                     # shipped artefacts (robo_prm/models/), all held-out variants
    python benchmarks/judge_heldout.py --episodes 1        # quicker

Held-out = place_cup_in_bin (never trained on, incl. its new place_cup_in_tray variant) and the held-out
text variants (held-out object words and paraphrases) of the training tasks; scenes are described with
milestone_line=False, so judges read the goal from the task text alone. Same code as
`robo-prm evaluate-judge` (robo_prm/finetune/evaluate.py); writes benchmarks/results/judge_heldout.json.
"""
from __future__ import annotations

import sys
from pathlib import Path

from robo_prm.cli import build_parser
from robo_prm.judge.weights import models_dir, shipped_adapter, shipped_calibrator, shipped_distilled

OUT = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "judge_heldout.json"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    defaults = ["--adapter", str(shipped_adapter()), "--out", str(OUT)]
    if shipped_calibrator():
        defaults += ["--calibrator", str(shipped_calibrator())]
    if shipped_distilled():
        defaults += ["--distilled", str(shipped_distilled())]
    else:
        defaults += ["--judges", "rules,minilm-cosine,zero-shot,lora,lora+cal"]
    args, extra = build_parser().parse_known_args(["evaluate-judge", *defaults, *argv])
    args.command_line = "python benchmarks/judge_heldout.py " + " ".join(argv)
    print(f"artefacts: {models_dir()}")
    return args.func(args, extra)


if __name__ == "__main__":
    sys.exit(main())
