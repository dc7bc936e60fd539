"""CLI wiring for `robo-prm label | finetune | distill | evaluate-judge` (added by `add_finetune_commands`)."""
from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections import defaultdict
from pathlib import Path

from robo_prm.finetune.labels import HELDOUT_TASKS, TRAIN_TASKS


def _csv(text: str | None) -> list[str]:
    return [t for t in (text or "").split(",") if t]


def _scene(lab):
    from robo_prm.types import SceneDescription

    return SceneDescription(text=lab.scene, facts=(), hazards=tuple(lab.hazards), rule_progress=lab.rule_progress)


def judge_labels(judge, labels) -> list:
    """Judgements for labels (grouped by task text, in the labels' order)."""

    groups = defaultdict(list)
    for i, lab in enumerate(labels):
        groups[lab.judge_text().key].append(i)
    out = [None] * len(labels)
    for idx in groups.values():
        for i, j in zip(idx, judge.judge(labels[idx[0]].judge_text(), [_scene(labels[i]) for i in idx])):
            out[i] = j
    return out


def lora_judge_config(adapter: str | None, gguf: str | None = None, backend: str = "llamacpp", threads: int = 1,
                      calibrator: str | None = None):
    """Raw (threshold 0, hazards from the LLM) config of the fine-tuned judge: merged GGUF via llama.cpp,
    or the transformers backend with the adapter."""
    from robo_prm.judge import JudgeConfig, TransformersConfig

    if backend == "transformers":
        return JudgeConfig(backend="transformers", confidence_threshold=0.0, hazards_from="llm",
                           transformers=TransformersConfig(adapter=adapter, calibrator=calibrator))
    if gguf is None:
        from robo_prm.judge.merge import merged_judge_gguf

        gguf = merged_judge_gguf(adapter)
    return JudgeConfig(model=gguf, confidence_threshold=0.0, hazards_from="llm", n_threads=threads,
                       transformers=TransformersConfig(calibrator=calibrator))


def zero_shot_judge_config(model: str | None = None, threads: int = 1):
    """Raw config of the base model, never the shipped fine-tuned one (a None model would resolve to it)."""
    from robo_prm.judge import JudgeConfig

    return JudgeConfig(model=model, finetuned=False, confidence_threshold=0.0, hazards_from="llm", n_threads=threads)


# ---- label ---------------------------------------------------------------------------
def cmd_label(args, extra) -> int:
    if extra:
        raise SystemExit(f"robo-prm label: unknown option {extra[0]}")
    if args.action == "ui":
        from robo_prm.finetune.ui import serve

        serve(args.queue, args.out, args.port)
        return 0
    from robo_prm.finetune.labels import auto_labels, write_labels

    tasks = _csv(args.tasks) or list(TRAIN_TASKS)
    n = 0
    if args.split in ("train", "both"):
        n += write_labels(auto_labels(tasks, args.episodes, "train", args.seed, args.stride), args.out)
    if args.split in ("heldout", "both"):
        held = list(dict.fromkeys(tasks + _csv(args.heldout_tasks)))
        n += write_labels(auto_labels(held, args.heldout_episodes, "heldout", args.seed + 1, args.stride), args.out,
                          append=args.split == "both")
    print(f"wrote {n} labels to {args.out}")
    return 0


# ---- finetune --------------------------------------------------------------------------
def cmd_finetune(args, extra) -> int:
    from robo_prm.finetune.lora import LoraTrainConfig, finetune

    out = Path(args.out)
    if not args.skip_train:
        cfg = LoraTrainConfig(model=args.model, r=args.r, alpha=args.alpha, targets=_csv(args.targets), lr=args.lr,
                              epochs=args.epochs, batch_size=args.batch_size, max_labels=args.max_labels,
                              threads=args.threads, max_minutes=args.max_minutes, seed=args.seed,
                              hazard_weight=args.hazard_weight, resume=args.resume)
        finetune(args.labels, out, cfg)
    if args.calibrate:
        calibrate_adapter(args.labels, out, threads=args.threads)
    return 0


def calibrate_adapter(labels_path, adapter_dir, threads: int = 1, echo=print) -> dict:
    """Fit the isotonic calibrator of the fine-tuned judge on the held-out labels → ADAPTER/calibrator.json."""
    import numpy as np

    from robo_prm.finetune.calibrate import ece, fit_calibrator, save_calibrator
    from robo_prm.finetune.labels import read_labels
    from robo_prm.judge import make_judge

    import dataclasses

    labels = read_labels(labels_path, split="heldout")
    judge = make_judge(dataclasses.replace(lora_judge_config(str(adapter_dir), threads=threads), hazards_from="rules"))
    t0 = time.perf_counter()
    raw = np.array([j.progress for j in judge_labels(judge, labels)])
    judge.close()
    target = np.array([(lab.target - 1.0) / 9.0 for lab in labels])
    cal = fit_calibrator(raw, target)
    after = np.array([cal(p) for p in raw])
    info = {"fitted_on": f"{labels_path} (split heldout, {len(labels)} labels)", "ece_before": ece(raw, target),
            "ece_after_in_sample": ece(after, target), "seconds": round(time.perf_counter() - t0, 1)}
    save_calibrator(cal, Path(adapter_dir) / "calibrator.json", info)
    echo(json.dumps(info))
    return info


# ---- distill ---------------------------------------------------------------------------
def cmd_distill(args, extra) -> int:
    from robo_prm.finetune.distill import distill
    from robo_prm.finetune.labels import read_labels
    from robo_prm.judge import make_judge

    labels = read_labels(args.labels, split="train")
    if args.max_labels:
        import random

        random.Random(0).shuffle(labels)
        labels = labels[: args.max_labels]
    import dataclasses

    cfg = lora_judge_config(args.adapter, args.gguf, threads=args.threads, calibrator=args.calibrator)
    judge = make_judge(dataclasses.replace(cfg, hazards_from="rules"))  # progress only: no hazard passes
    t0 = time.perf_counter()
    teacher = [j.progress for j in judge_labels(judge, labels)]
    judge.close()
    print(f"teacher judged {len(labels)} scenes in {time.perf_counter() - t0:.0f} s")
    m = distill([lab.scene for lab in labels], [lab.judge_text().goal for lab in labels], teacher, args.out,
                info={"teacher": args.adapter or args.gguf, "labels": args.labels})
    print(json.dumps(m))
    return 0


# ---- evaluate-judge ----------------------------------------------------------------------
def cmd_evaluate(args, extra) -> int:
    from robo_prm.finetune.evaluate import CosineJudge, evaluate, heldout_episodes, markdown
    from robo_prm.judge import JudgeConfig, make_judge
    from robo_prm.judge.scoring import Calibrator

    import torch

    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    eps = heldout_episodes(_csv(args.tasks) or list(TRAIN_TASKS + HELDOUT_TASKS), args.episodes, args.episodes,
                           args.seed, args.max_states)
    print(f"{len(eps)} held-out episodes, {sum(len(e.scenes) for e in eps)} states ({time.perf_counter() - t0:.0f} s)")
    names = _csv(args.judges)
    judges: dict = {}
    rows: list = []

    def run(name, judge, cal=None, hazards=True):
        rows.extend(evaluate({name: (judge, cal, hazards)}, eps))
        judge.close()

    for name in names:
        if name == "rules":
            run(name, make_judge(JudgeConfig(backend="rules")))
        elif name == "minilm-cosine":
            run(name, CosineJudge(), hazards=False)
        elif name == "zero-shot":
            run(name, make_judge(zero_shot_judge_config(args.base_model, args.threads)))
        elif name in ("lora", "lora+cal"):
            continue
        elif name == "distilled":
            from robo_prm.finetune.distill import DistilledBackend
            from robo_prm.judge import ConfidentJudge

            if not args.distilled:
                raise SystemExit("evaluate-judge: 'distilled' needs --distilled DIR")
            run(name, ConfidentJudge(DistilledBackend(args.distilled), JudgeConfig(confidence_threshold=0.0)), hazards=False)
        else:
            raise SystemExit(f"evaluate-judge: unknown judge '{name}'")
    if "lora" in names or "lora+cal" in names:
        from robo_prm.finetune.evaluate import metrics, run_judge

        judge = make_judge(lora_judge_config(args.adapter, args.gguf, args.lora_backend, args.threads))
        t1 = time.perf_counter()
        judged = run_judge(judge, eps)
        secs = round(time.perf_counter() - t1, 1)
        judge.close()
        variants = [("lora", None)]
        if "lora+cal" in names:
            if not args.calibrator:
                raise SystemExit("evaluate-judge: 'lora+cal' needs --calibrator FILE")
            variants.append(("lora+cal", Calibrator.load(args.calibrator)))
        import dataclasses

        for name, cal in variants:
            if name not in names:
                continue
            js = judged if cal is None else [[dataclasses.replace(j, progress=cal(j.progress)) for j in e] for e in judged]
            rows.append({"judge": name, "task": "all", **metrics(eps, js), "seconds": secs})
            for base in dict.fromkeys(e.variant.base for e in eps):
                idx = [i for i, e in enumerate(eps) if e.variant.base == base]
                rows.append({"judge": name, "task": base, **metrics([eps[i] for i in idx], [js[i] for i in idx])})
            print(name, json.dumps(rows[-len(set(e.variant.base for e in eps)) - 1]))
    meta = {"command": "robo-prm evaluate-judge " + " ".join(sys.argv[2:]) if args.command_line is None else args.command_line,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": f"{os.cpu_count()} CPU, {platform.processor() or platform.machine()}, {args.threads} thread(s)",
            "load_avg_1m": os.getloadavg()[0], "heldout_variants": sorted({f"{e.variant.base}/{e.variant.name}" for e in eps}),
            "episodes": len(eps), "states": sum(len(e.scenes) for e in eps), "seconds": round(time.perf_counter() - t0, 1)}
    table = markdown(rows)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows, "table": table}, indent=1))
    print(table)
    return 0


def add_finetune_commands(sub) -> None:
    lab = sub.add_parser("label", help="make judge labels: auto (rollouts of the tasks) or ui (a local labelling page)")
    lab.add_argument("action", choices=["auto", "ui"])
    lab.add_argument("--tasks", help=f"auto: comma-separated training tasks (default {','.join(TRAIN_TASKS)})")
    lab.add_argument("--heldout-tasks", default=",".join(HELDOUT_TASKS), help="auto: tasks only ever held out")
    lab.add_argument("--episodes", type=int, default=4, help="auto: episodes per source (scripted/perturbed/random) per 2 text variants")
    lab.add_argument("--heldout-episodes", type=int, default=3)
    lab.add_argument("--split", choices=["train", "heldout", "both"], default="both")
    lab.add_argument("--stride", type=int, default=2, help="auto: label every n-th step")
    lab.add_argument("--seed", type=int, default=0)
    lab.add_argument("--queue", help="ui: label JSONL of scenes to label")
    lab.add_argument("--out", required=True, help="output JSONL (ui appends)")
    lab.add_argument("--port", type=int, default=8765)
    lab.set_defaults(func=cmd_label)

    ft = sub.add_parser("finetune", help="LoRA-tune the judge on labels (train split), then calibrate on the held-out split")
    ft.add_argument("--labels", required=True)
    ft.add_argument("--out", required=True, help="adapter folder")
    ft.add_argument("--model", help="base GGUF/HF folder (default: bundled SmolLM2)")
    ft.add_argument("--r", type=int, default=8)
    ft.add_argument("--alpha", type=int, default=16)
    ft.add_argument("--targets", default="q_proj,v_proj,o_proj")
    ft.add_argument("--lr", type=float, default=1e-3)
    ft.add_argument("--epochs", type=float, default=1.0)
    ft.add_argument("--batch-size", type=int, default=8)
    ft.add_argument("--max-labels", type=int, default=960)
    ft.add_argument("--hazard-weight", type=float, default=0.5)
    ft.add_argument("--threads", type=int, default=1)
    ft.add_argument("--max-minutes", type=float, default=20.0)
    ft.add_argument("--seed", type=int, default=0)
    ft.add_argument("--calibrate", action="store_true", help="fit OUT/calibrator.json on the held-out labels")
    ft.add_argument("--resume", help="continue training this adapter folder")
    ft.add_argument("--skip-train", action="store_true", help="only calibrate an existing adapter")
    ft.set_defaults(func=cmd_finetune)

    d = sub.add_parser("distill", help="train a MiniLM-embedding MLP to imitate the fine-tuned judge")
    d.add_argument("--labels", required=True)
    d.add_argument("--adapter", help="LoRA folder (merged into a cached GGUF)")
    d.add_argument("--gguf", help="an already merged GGUF instead of --adapter")
    d.add_argument("--calibrator", help="imitate the calibrated judge")
    d.add_argument("--max-labels", type=int, default=0)
    d.add_argument("--threads", type=int, default=1)
    d.add_argument("--out", required=True)
    d.set_defaults(func=cmd_distill)

    e = sub.add_parser("evaluate-judge", help="held-out tasks/texts: VOC, hazard P/R, ECE, confidence, ms per judgement")
    e.add_argument("--judges", default="rules,minilm-cosine,zero-shot,lora,lora+cal,distilled")
    e.add_argument("--tasks", help="base tasks whose held-out variants are used (default: all shipped)")
    e.add_argument("--episodes", type=int, default=2, help="successful scripted and random episodes per variant")
    e.add_argument("--max-states", type=int, default=20, help="judged states per episode (evenly spaced)")
    e.add_argument("--seed", type=int, default=5000)
    e.add_argument("--adapter", help="LoRA folder (default: the shipped one)")
    e.add_argument("--gguf", help="merged GGUF (skips merging)")
    e.add_argument("--lora-backend", choices=["llamacpp", "transformers"], default="llamacpp")
    e.add_argument("--calibrator")
    e.add_argument("--distilled")
    e.add_argument("--base-model", help="zero-shot model (default: bundled)")
    e.add_argument("--threads", type=int, default=1)
    e.add_argument("--out", help="results JSON")
    e.set_defaults(func=cmd_evaluate, command_line=None)
