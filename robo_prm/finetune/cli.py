"""CLI wiring for `robo-prm label | finetune | finetune-head | distill | evaluate-judge` (added by `add_finetune_commands`).

Every flag is a field of the `*Args` dataclasses below (`FinetuneArgs` = `LoraTrainConfig` + files)."""
from __future__ import annotations

import json
import time
from collections import defaultdict
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Literal

from robo_prm.config_flags import add_config_args, config_command, opt
from robo_prm.finetune.hazard_reader import HazardTrainConfig
from robo_prm.finetune.progress_reader import ProgressTrainConfig
from robo_prm.finetune.score_head import ScoreHeadTrainConfig
from robo_prm.finetune.labels import HELDOUT_TASKS, TRAIN_TASKS
from robo_prm.finetune.lora import LoraTrainConfig
from robo_prm.judge.config import JudgeConfig


def _csv(text: str | list[str] | None) -> list[str]:
    return [t for t in (text.split(",") if isinstance(text, str) else text or []) if t]


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
    """Raw config of the fine-tuned judge (threshold 0, every hazard asked of the LLM itself, not the hazard
    reader): merged GGUF via llama.cpp, or the transformers backend with the adapter."""
    from robo_prm.judge import JudgeConfig, TransformersConfig

    if backend == "transformers":
        return JudgeConfig(backend="transformers", confidence_threshold=0.0, hazards_from="llm", hazard_answerer="backend",
                           transformers=TransformersConfig(adapter=adapter, calibrator=calibrator))
    if gguf is None:
        from robo_prm.judge.merge import merged_judge_gguf

        gguf = merged_judge_gguf(adapter)
    return JudgeConfig(model=gguf, confidence_threshold=0.0, hazards_from="llm", hazard_answerer="backend",
                       n_threads=threads, transformers=TransformersConfig(calibrator=calibrator))


def zero_shot_judge_config(model: str | None = None, threads: int = 1):
    """Raw config of the base model, never the shipped fine-tuned one (a None model would resolve to it)."""
    from robo_prm.judge import JudgeConfig

    return JudgeConfig(model=model, finetuned=False, confidence_threshold=0.0, hazards_from="llm",
                       hazard_answerer="backend", n_threads=threads)


# ---- label ---------------------------------------------------------------------------
def cmd_label(args) -> int:
    if args.action == "ui":
        from robo_prm.finetune.ui import serve

        if not args.queue:
            raise SystemExit("label ui: give --queue LABELS.jsonl (e.g. from `robo-prm label auto`)")
        judge = None
        if args.compare:
            from robo_prm.judge import make_judge

            judge = make_judge(args.judge)
        serve(args.queue, args.out, args.port, judge=judge)
        return 0
    from robo_prm.finetune.label_rollouts import ROLLOUT_SOURCES
    from robo_prm.finetune.labels import auto_labels, write_labels

    unknown = [s for s in _csv(args.sources) if s not in ROLLOUT_SOURCES]
    if unknown or not _csv(args.sources):
        raise SystemExit(f"label auto: --sources {','.join(unknown)}: each must be one of {', '.join(ROLLOUT_SOURCES)}")
    tasks = _csv(args.tasks) or list(TRAIN_TASKS)
    n = 0
    if args.split in ("train", "both"):
        n += write_labels(auto_labels(tasks, args.episodes, "train", args.seed, args.stride, sources=args.sources),
                          args.out)
    if args.split in ("heldout", "both"):
        held = list(dict.fromkeys(tasks + _csv(args.heldout_tasks)))
        n += write_labels(auto_labels(held, args.heldout_episodes, "heldout", args.seed + 1, args.stride,
                                      sources=args.sources), args.out,
                          append=args.split == "both")
    if args.generated:  # generated task families: each file's split is its own (held-out files → held-out labels)
        from robo_prm.finetune.labels import generated_labels

        for split, seed in (("train", args.seed), ("heldout", args.seed + 1)):
            if args.split in (split, "both"):
                n += write_labels(generated_labels(args.generated, split, args.generated_episodes, seed, args.stride,
                                                   args.sources), args.out, append=True)
    if args.from_run:  # states learning policies visited (train split): label rounds aggregate by appending
        from robo_prm.finetune.labels import run_labels

        for run in _csv(args.from_run):
            n += write_labels(run_labels(run, args.from_run_per_scene), args.out, append=True)
    print(f"wrote {n} labels to {args.out}")
    return 0


# ---- finetune --------------------------------------------------------------------------
def cmd_finetune(args) -> int:
    from robo_prm.finetune.lora import finetune

    out = Path(args.out)
    if not args.skip_train:
        cfg = LoraTrainConfig(**{f.name: getattr(args, f.name) for f in fields(LoraTrainConfig)})
        finetune(args.labels, out, cfg)
    if args.calibrate:
        calibrate_adapter(args.labels, out, threads=args.threads, max_labels=args.calibrate_labels, seed=args.seed)
    return 0


def calibrate_adapter(labels_path, adapter_dir, threads: int = 1, echo=print, max_labels: int = 0, seed: int = 0) -> dict:
    """Fit the fine-tuned judge's calibrator on the held-out labels → ADAPTER/calibrator.json: the isotonic map of
    progress, and one P(yes) threshold per hazard kind (best F1; every hazard of a label's task is asked)."""
    import dataclasses
    import random

    import numpy as np

    from robo_prm.finetune.calibrate import fit_calibrator, fit_hazard_thresholds, save_calibrator
    from robo_prm.finetune.labels import read_labels
    from robo_prm.judge import make_judge
    from robo_prm.judge.scoring import hazard_kind
    from robo_prm.metrics import ece
    from robo_prm.provenance import provenance

    labels = read_labels(labels_path, split="heldout")
    if max_labels and len(labels) > max_labels:
        labels = random.Random(seed).sample(labels, max_labels)
    # an adapter trained without hazard rows (hazard_weight 0: the hazard reader answers hazards) gets no hazard
    # passes and no thresholds: its yes/no answers were never taught
    info_path = Path(adapter_dir) / "train_info.json"
    trained = json.loads(info_path.read_text()).get("config", {}) if info_path.exists() else {}
    ask = "llm" if trained.get("hazard_weight", 0.5) > 0 else "rules"
    judge = make_judge(dataclasses.replace(lora_judge_config(str(adapter_dir), threads=threads), hazards_from=ask))
    t0 = time.perf_counter()
    judged = judge_labels(judge, labels)
    judge.close()
    raw = np.array([j.progress for j in judged])
    target = np.array([(lab.target - 1.0) / 9.0 for lab in labels])
    records = []
    for lab, j in zip(labels, judged):
        texts = {h.name: h.text for h in lab.judge_text().hazards}
        records += [(hazard_kind(h.name, texts.get(h.name, "")), h.probability, h.name in lab.hazards) for h in j.hazards]
    hazards = fit_hazard_thresholds(records)
    cal = dataclasses.replace(fit_calibrator(raw, target),
                              hazard_thresholds=tuple(sorted((k, v["threshold"]) for k, v in hazards.items())))
    after = np.array([cal(p) for p in raw])
    info = {"fitted_on": f"{labels_path} (split heldout, {len(labels)} labels)", "ece_before": ece(raw, target),
            "ece_after_in_sample": ece(after, target), "hazard_fit": hazards,
            "seconds": round(time.perf_counter() - t0, 1), "provenance": provenance()}
    save_calibrator(cal, Path(adapter_dir) / "calibrator.json", info)
    echo(json.dumps(info))
    return info


# ---- distill ---------------------------------------------------------------------------
def cmd_distill(args) -> int:
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


# ---- finetune-hazards --------------------------------------------------------------------
def cmd_finetune_hazards(cfg) -> int:
    from robo_prm.finetune.hazard_reader import refit_kind_classifier, refit_kind_thresholds, train_reader

    info = (refit_kind_thresholds if cfg.kind_thresholds_only else
            refit_kind_classifier if cfg.kind_classifier_only else train_reader)(cfg)
    keys = ("train_pairs", "heldout_pairs", "threshold_folded", "heldout_at_threshold", "kind_offsets",
            "heldout_at_kind_thresholds", "heldout_route_before", "heldout_route_after", "seconds")
    print(json.dumps({k: info[k] for k in keys if k in info}))
    return 0


# ---- finetune-progress -------------------------------------------------------------------
def cmd_finetune_progress(cfg) -> int:
    from robo_prm.finetune.progress_reader import train_progress_reader

    info = train_progress_reader(cfg)
    print(json.dumps({k: info[k] for k in ("train_labels", "heldout_labels", "seconds")} | {"last": info["history"][-1]}))
    return 0


# ---- finetune-head -----------------------------------------------------------------------
def cmd_finetune_head(cfg) -> int:
    from robo_prm.finetune.score_head import train_score_head

    info = train_score_head(cfg)
    print(json.dumps({k: info[k] for k in ("train_labels", "heldout_labels", "seconds", "heldout_llm_voc")}
                     | {"last": info["history"][-1]}))
    return 0


# ---- evaluate-judge ----------------------------------------------------------------------
def cmd_evaluate(args) -> int:
    if args.task:  # any task file: robo_prm/finetune/any_task.py
        from robo_prm.finetune.any_task import cmd_any_task

        return cmd_any_task(args)
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
    from robo_prm.provenance import provenance

    meta = {**provenance(args.command_line), "threads": args.threads,
            "heldout_variants": sorted({f"{e.variant.base}/{e.variant.name}" for e in eps}),
            "episodes": len(eps), "states": sum(len(e.scenes) for e in eps), "seconds": round(time.perf_counter() - t0, 1)}
    table = markdown(rows)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows, "table": table}, indent=1))
    print(table)
    return 0


@dataclass
class LabelArgs:
    action: Literal["auto", "ui"] = opt(help="auto: labels from rollouts of the tasks; ui: a local labelling page", positional=True)
    out: str = opt(help="output JSONL (ui appends)")
    tasks: list[str] = opt(list(TRAIN_TASKS), "auto: training tasks")
    heldout_tasks: list[str] = opt(list(HELDOUT_TASKS), "auto: tasks only ever held out")
    episodes: int = opt(4, "auto: episodes per source (scripted/perturbed/random) per 2 text variants")
    heldout_episodes: int = opt(3, "auto: the same for the held-out split")
    split: Literal["train", "heldout", "both"] = opt("both", "auto: which split(s) to write")
    stride: int = opt(2, "auto: label every n-th step")
    sources: list[str] = opt(["scripted", "perturbed", "random"],
                             "auto: the rollout policies (nudged: the perturbed expert, and one object slid 1–15 cm "
                             "early on, so \"has it moved?\" has positives)")
    seed: int = opt(0, "auto: seed of the first episode (held out: seed + 1)")
    generated: str | None = opt(None, "auto: also label every task file of this `tasks generate` folder (its split)")
    generated_episodes: int = opt(1, "auto: episodes per source per generated task")
    from_run: list[str] = opt([], "auto: also label the recorded states of these run folders (source policy)")
    from_run_per_scene: int = opt(8, min=1, help="auto: --from_run keeps at most this many visits of one scene text "
                                                 "(how often the policy is there is what training sees)")
    queue: str | None = opt(None, "ui: label JSONL of scenes to label")
    port: int = opt(8765, "ui: port of the page on 127.0.0.1")
    compare: bool = opt(True, "ui: once a scene is answered, show the judge's score, reason and hazards beside it")
    judge: JudgeConfig = opt(factory=JudgeConfig, help="ui: the judge shown for comparison (--judge.backend rules: the simulator's rules)")


@dataclass(kw_only=True)
class FinetuneArgs(LoraTrainConfig):
    labels: str = opt(help="label JSONL (train split: training; heldout split: the calibrator)")
    out: str = opt(help="adapter folder")
    calibrate: bool = opt(False, "fit OUT/calibrator.json on the held-out labels")
    calibrate_labels: int = opt(600, "held-out labels the calibrator is fitted on (a random draw; 0: all)")
    skip_train: bool = opt(False, "only calibrate an existing adapter")


@dataclass
class DistillArgs:
    labels: str = opt(help="label JSONL (train split)")
    out: str = opt(help="output folder")
    adapter: str | None = opt(None, "LoRA folder of the teacher (merged into a cached GGUF)")
    gguf: str | None = opt(None, "an already merged GGUF instead of --adapter")
    calibrator: str | None = opt(None, "imitate the calibrated judge")
    max_labels: int = opt(0, "labels used (a seeded shuffle); 0: all")
    threads: int = opt(1, "llama.cpp threads")


@dataclass
class EvaluateArgs:
    judges: list[str] = opt(["rules", "minilm-cosine", "zero-shot", "lora", "lora+cal", "distilled"], "judges to compare")
    tasks: list[str] = opt([], "base tasks whose held-out variants are used (empty: all shipped)")
    episodes: int = opt(2, "successful scripted and random episodes per variant")
    max_states: int = opt(20, "judged states per episode (evenly spaced)")
    seed: int = opt(5000, "seed of the first episode")
    adapter: str | None = opt(None, "LoRA folder (null: the shipped one)")
    gguf: str | None = opt(None, "merged GGUF (skips merging)")
    lora_backend: Literal["llamacpp", "transformers"] = opt("llamacpp", "how the lora judges run")
    calibrator: str | None = opt(None, "calibrator JSON of lora+cal")
    distilled: str | None = opt(None, "distilled-head folder of the distilled judge")
    base_model: str | None = opt(None, "zero-shot model (null: the bundled one)")
    threads: int = opt(1, "torch and llama.cpp threads")
    out: str | None = opt(None, "results JSON")
    command_line: str | None = opt(None, "the command recorded in the results (null: this one)")
    task: list[str] = opt([], "task files or shipped names (--task A.yaml --task B.yaml): evaluate --judge.* on each "
                              "file's expert and random/perturbed episodes instead (hazards asked in words, scored "
                              "against the file's checks); --episodes, --max_states, --seed apply")
    json: str | None = opt(None, "--task: results JSON {overall, tasks}; the counts behind them go to *.details.json")
    reasons: int = opt(3, "--task: states per episode judged again with a reason (reason_faithfulness); 0: none")
    text_only: bool = opt(False, "--task: drop the files' milestones and success_distance (rules then know only success)")
    judge: JudgeConfig = opt(factory=JudgeConfig, help="--task: the judge evaluated (default: the product's default judge)")


def add_finetune_commands(sub) -> None:
    for name, cls, run, helptext in (
            ("label", LabelArgs, cmd_label, "make judge labels: auto (rollouts of the tasks) or ui (a local labelling page)"),
            ("finetune", FinetuneArgs, cmd_finetune, "LoRA-tune the judge on labels (train split), then calibrate on the held-out split"),
            ("distill", DistillArgs, cmd_distill, "train a MiniLM-embedding MLP to imitate the fine-tuned judge"),
            ("finetune-hazards", HazardTrainConfig, cmd_finetune_hazards,
             "train the hazard reader (hazards in words → P(present)) on labels' checked hazards"),
            ("finetune-progress", ProgressTrainConfig, cmd_finetune_progress,
             "train the progress reader (task + scene text → progress), the judge's second opinion (fallback reader)"),
            ("finetune-head", ScoreHeadTrainConfig, cmd_finetune_head,
             "fit the score head (the judge LLM's last hidden state → score digits) on labels, the LLM frozen"),
            ("evaluate-judge", EvaluateArgs, cmd_evaluate,
             "held-out tasks/texts: VOC, hazard P/R, ECE, confidence, ms per judgement")):
        p = sub.add_parser(name, help=helptext)
        add_config_args(p, cls)
        if cls is EvaluateArgs:  # --task A --task B (and --task A B) collect every file
            import argparse

            next(a for a in p._actions if "--task" in a.option_strings).__class__ = argparse._ExtendAction
        p.set_defaults(func=config_command(cls, run))
