"""Labels for the judge: one JSONL format, written by auto-labelling and by the labelling UI.

One line per labelled scene::

    {"task": "push_tool_from_edge__mallet_p1",     # task name (a variant's name for generated text)
     "task_text": {"background": ..., "goal": ..., "dimensions": [...],
                   "hazards": [{"name": ..., "text": ..., "severity": ...}]},   # what the judge reads
     "task_file": null,                             # or a task YAML path (then task_text may be null)
     "scene": "The gripper is open, 5 cm from the mallet. ...",
     "frame": null,                                 # optional image path (UI labels)
     "target": 4.6,                                 # progress on the 1-10 scale
     "hazards": ["tool_near_edge"],                 # hazard names present
     "source": "scripted" | "perturbed" | "random" | "nudged" | "policy" | "human",
     "split": "train" | "heldout",                  # held-out labels are never trained on
     "base_task": "push_tool_from_edge", "variant": "mallet_p1", "rule_progress": 0.4, "episode": "...", "step": 12}

Auto-labels: target = 1 + 9 · rule_progress (`Task.rule_progress`, in [0, 1]), so the judge's score
digit is round(target − 1) = round(9 · rule_progress) and its expected digit / 9 reads directly as
rule progress. Hazards are the simulator's hazard checks (`SceneDescription.hazards`).
"""
from __future__ import annotations

import copy
import json
import random
import re
import zlib
from collections import Counter
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from robo_prm.config_io import from_dict, load_yaml
from robo_prm.envs.task import Task, TaskSpec, load_task, tasks_dir
from robo_prm.finetune.label_rollouts import rollout_states
from robo_prm.types import HazardText, TaskText

TRAIN_TASKS = ("reach_tool", "push_tool_from_edge", "tidy_table")
HELDOUT_TASKS = ("place_cup_in_bin",)
SOURCES = ("scripted", "perturbed", "random", "nudged", "policy", "human")


def progress_to_target(progress: float) -> float:
    """rule_progress in [0, 1] → target on the 1–10 scale."""
    return 1.0 + 9.0 * float(np.clip(progress, 0.0, 1.0))


def target_to_digit(target: float) -> int:
    """The score digit the judge should answer (0–9)."""
    return int(np.clip(round(float(target) - 1.0), 0, 9))


@dataclass
class Label:
    task: str
    scene: str
    target: float  # 1..10
    hazards: list[str] = field(default_factory=list)
    source: str = "scripted"
    task_text: dict | None = None
    task_file: str | None = None
    frame: str | None = None
    split: str = "train"
    base_task: str | None = None
    variant: str | None = None
    rule_progress: float | None = None
    episode: str | None = None
    step: int | None = None
    reason: str | None = None  # a reason target: the scene's own sentences about the goal's objects (`reason_target`)

    def __post_init__(self):
        if not 1.0 <= float(self.target) <= 10.0:
            raise ValueError(f"label target must be in [1, 10], got {self.target}")
        if self.task_text is None and self.task_file is None:
            raise ValueError("a label needs task_text or task_file")

    @property
    def digit(self) -> int:
        return target_to_digit(self.target)

    def judge_text(self) -> TaskText:
        """What the judge reads of this label's task."""
        if self.task_text is None:
            return load_task(self.task_file).text
        return text_from_dict(self.task, self.task_text)

    def to_json(self) -> str:
        return json.dumps({k: v for k, v in asdict(self).items()}, ensure_ascii=False)


def text_of(spec: TaskSpec) -> dict:
    return {"background": spec.background, "goal": spec.goal, "dimensions": list(spec.dimensions),
            "hazards": [{"name": h.name, "text": h.text, "severity": h.severity} for h in spec.hazards]}


def text_from_dict(name: str, text: dict) -> TaskText:
    hazards = tuple(HazardText(h["name"], h["text"], float(h.get("severity", 0.5))) for h in text.get("hazards", []))
    return TaskText(name, text["background"], text["goal"], tuple(text["dimensions"]), hazards)


def write_labels(labels: Iterable[Label], path: str | Path, append: bool = False) -> int:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with path.open("a" if append else "w", encoding="utf-8") as f:
        for lab in labels:
            f.write(lab.to_json() + "\n")
            n += 1
    return n


def read_labels(path: str | Path, split: str | None = None) -> list[Label]:
    out = []
    for i, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines()):
        if not line.strip():
            continue
        try:
            lab = Label(**json.loads(line))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{path}:{i + 1}: bad label ({exc})") from None
        if split is None or lab.split == split:
            out.append(lab)
    return out


# ---- task-text variants ------------------------------------------------------------------
# Each variant edits the task's words consistently: the `objects` vocabulary (so the describer says
# "mallet"), the predicates (which name objects by their words) and the text the judge reads.
# Paraphrases replace background/goal. Held-out words and paraphrases are never trained on.
# The words, paraphrases and held-out-only tasks are data: configs/variants/*.yaml.
def variants_dir() -> Path:
    return Path(str(resources.files("robo_prm.configs") / "variants"))


WORD_SWAPS: dict[str, dict[str, list[str]]] = load_yaml(variants_dir() / "word_swaps.yaml")  # word → {"train": [...], "heldout": [...]}
PARAPHRASES: dict[str, dict[str, list[tuple[str, str]]]] = {  # task → split → [(background, goal)]; words swapped after
    task: {split: [(p["background"], p["goal"]) for p in items] for split, items in splits.items()}
    for task, splits in load_yaml(variants_dir() / "paraphrases.yaml").items()
}


def _swap(obj: Any, pairs: list[tuple[str, str]]) -> Any:
    """Replace words in every string (and mapping value) of a raw task dict; `a b` also as `a_b`."""
    if isinstance(obj, str):
        for old, new in pairs:
            for o, n in ((old, new), (old.replace(" ", "_"), new.replace(" ", "_"))):
                obj = re.sub(rf"\b{re.escape(o)}\b", n, obj)
        return obj
    if isinstance(obj, list):
        return [_swap(x, pairs) for x in obj]
    if isinstance(obj, dict):
        return {k: _swap(v, pairs) for k, v in obj.items()}
    return obj


@dataclass
class Variant:
    base: str  # base task name (its simulator semantics and scripted expert)
    name: str  # variant id
    split: str
    task: Task
    plan: list | None = None  # scripted-expert plan when it differs from the base task's


def raw_task(name: str) -> dict:
    return load_yaml(tasks_dir() / f"{name}.yaml")


def make_variant(base: str, name: str, split: str, swaps: list[tuple[str, str]] = (),
                 paraphrase: tuple[str, str] | None = None, raw: dict | None = None, plan=None) -> Variant:
    raw = copy.deepcopy(raw if raw is not None else raw_task(base))
    if paraphrase:
        raw["background"], raw["goal"] = paraphrase
    raw = _swap(raw, list(swaps))
    raw["name"] = f"{base}__{name}" if name != "orig" else base
    spec = from_dict(TaskSpec, raw, where=raw["name"])
    return Variant(base, name, split, Task(spec, source=f"<variant {raw['name']}>"), plan)


def heldout_only_variants(base: str) -> list[Variant]:
    """The new tasks made from `base` that are only ever held out (configs/variants/heldout_tasks.yaml)."""
    listed = load_yaml(variants_dir() / "heldout_tasks.yaml").get(base, {})
    return [make_variant(base, name, "heldout", raw=load_yaml(variants_dir() / v["task"]),
                         plan=[tuple(step) for step in v["expert"]]) for name, v in listed.items()]


def task_variants(base: str, split: str, n_words: int | None = None, seed: int = 0) -> list[Variant]:
    """The base text and its word/paraphrase variants of one split ('train' or 'heldout').

    Train: the original text, each training paraphrase and each training word swap (paired with a random
    paraphrase). Held-out: each held-out word swap and each held-out paraphrase (with original words), plus the
    base task's held-out-only tasks (heldout_tasks.yaml: place_cup_in_bin's cup-to-tray task). A held-out task
    (HELDOUT_TASKS) has no train variants."""
    rng = random.Random(f"{base}/{split}/{seed}")
    raw = raw_task(base)
    words = [w for w in WORD_SWAPS if _mentions(raw, w)]
    paras = PARAPHRASES.get(base, {}).get(split, [])
    out: list[Variant] = []
    if split == "train":
        if base in HELDOUT_TASKS:
            return []
        out.append(make_variant(base, "orig", "train"))
        for i, p in enumerate(paras):
            out.append(make_variant(base, f"p{i}", "train", paraphrase=p))
        for w in words:
            for new in WORD_SWAPS[w]["train"][:n_words]:
                choice = [None] + list(range(len(paras)))
                pi = rng.choice(choice)
                tag = f"{new.replace(' ', '-')}" + (f"_p{pi}" if pi is not None else "")
                out.append(make_variant(base, tag, "train", [(w, new)], paras[pi] if pi is not None else None))
        return out
    if base in HELDOUT_TASKS:
        out.append(make_variant(base, "orig", "heldout"))
    for i, p in enumerate(paras):
        out.append(make_variant(base, f"hp{i}", "heldout", paraphrase=p))
    swaps = [(w, WORD_SWAPS[w]["heldout"][0]) for w in words]
    if swaps:
        out.append(make_variant(base, "hwords", "heldout", swaps))
    return out + heldout_only_variants(base)


def _mentions(raw: dict, word: str) -> bool:
    return bool(re.search(rf"\b{re.escape(word)}\b", json.dumps(raw)))


# ---- auto-labelling ------------------------------------------------------------------------
def label_states(variant: Variant, states: list, source: str, episode: str, stride: int = 1,
                 milestone_line: bool = False) -> list[Label]:
    from robo_prm.describe.state_captioner import StateCaptioner

    cap = StateCaptioner(variant.task, milestone_line=milestone_line)
    focus = goal_words(variant.task)
    out = []
    for i in sorted(set(range(0, len(states), stride)) | {len(states) - 1}):
        d = cap(states[i])
        out.append(Label(task=variant.task.name, scene=d.text, target=progress_to_target(d.rule_progress or 0.0),
                         hazards=list(d.hazards), source=source, task_text=text_of(variant.task.spec),
                         split=variant.split, base_task=variant.base, variant=variant.name,
                         rule_progress=float(d.rule_progress or 0.0), episode=episode, step=i,
                         reason=reason_target(d.text, focus)))
    return out


def goal_words(task: Task) -> list[str]:
    """The words of the task's objects and places that its goal names (longest first), else all its words."""
    words = sorted({w for sim, w in task.words.items() if sim != "table"}, key=len, reverse=True)
    goal = task.spec.goal.lower()
    named = [w for w in words if w.lower() in goal]
    return named or words


def reason_target(scene: str, focus: Sequence[str], max_sentences: int = 2) -> str | None:
    """What a reason should say: the scene's own sentences that drive the score — about the gripper while it
    holds nothing it needs, and about the objects the goal names — at most `max_sentences`, copied verbatim so
    every claim agrees with the scene (reason_faithfulness) and nothing repeats."""
    sents = [s.strip() for s in re.split(r"(?<=[.!?])\s+", scene.strip()) if s.strip()]
    about = [s for s in sents if any(re.search(rf"\b{re.escape(w.lower())}\b", s.lower()) for w in focus)]
    gripper = [s for s in sents if s.lower().startswith("the gripper")]
    picked = list(dict.fromkeys(gripper[:1] + about))  # the scene states the gripper first
    return " ".join(picked[:max_sentences]) or None


def auto_labels(tasks: Iterable[str] = TRAIN_TASKS, episodes: int = 4, split: str = "train", seed: int = 0,
                stride: int = 2, max_per_variant: int | None = None, milestone_share: float = 0.25,
                sources: Iterable[str] = ("scripted", "perturbed", "random"), log=print) -> Iterator[Label]:
    """Labels from scripted, perturbed and random rollouts of every variant of each task.

    Each episode runs on one variant (round robin), so every variant's text is paired with real states;
    scenes are de-duplicated per (variant, scene text), keeping the first label."""
    rng = random.Random(seed)
    for base in tasks:
        variants = task_variants(base, split, seed=seed)
        if not variants:
            log(f"{base}: no {split} variants (held-out task?)")
            continue
        yield from variant_labels(base, variants, episodes * max(1, len(variants) // 2), seed, stride, sources, rng,
                                  max_per_variant, milestone_share, log=lambda n: log(
                                      f"{base} ({split}): {n} labels over {len(variants)} text variants"))


def variant_labels(base: str, variants: Sequence[Variant], n_episodes: int, seed: int, stride: int,
                   sources: Iterable[str], rng: random.Random, max_per_variant: int | None = None,
                   milestone_share: float = 0.25, log=None) -> Iterator[Label]:
    """n_episodes per source, round robin over the variants; de-duplicated per (variant, scene text)."""
    seen: dict[str, set] = {v.name: set() for v in variants}
    count = {v.name: 0 for v in variants}
    k = 0
    for source in sources:
        for e in range(n_episodes):
            v = variants[k % len(variants)]
            k += 1
            ep_seed = seed * 100_003 + zlib.crc32(f"{base}/{source}/{e}".encode()) % 100_000
            states = rollout_states(v, source, ep_seed)
            ml = rng.random() < milestone_share and bool(v.task.milestone_checks)
            labs = label_states(v, states, source, f"{base}/{v.name}/{source}/{ep_seed}", stride, milestone_line=ml)
            for lab in labs:
                if lab.scene in seen[v.name] or (max_per_variant and count[v.name] >= max_per_variant):
                    continue
                seen[v.name].add(lab.scene)
                count[v.name] += 1
                yield lab
    if log:
        log(sum(count.values()))


def generated_variants(folder: str | Path) -> list[Variant]:
    """The task files of a `robo-prm tasks generate` folder, each its own base task; split from the file
    (`train`, else held out: by structure, phrasing or both)."""
    out = []
    for path in sorted(Path(folder).glob("*.yaml")):
        task = load_task(str(path))
        split = "train" if (task.spec.split or "train") == "train" else "heldout"
        out.append(Variant(task.name, f"family:{task.spec.family or 'none'}", split, task))
    if not out:
        raise ValueError(f"{folder}: no task files (*.yaml); make some with `robo-prm tasks generate --out {folder}`")
    return out


def generated_labels(folder: str | Path, split: str = "train", episodes: int = 1, seed: int = 0, stride: int = 3,
                     sources: Iterable[str] = ("scripted", "perturbed", "random"), log=print) -> Iterator[Label]:
    """Labels from `episodes` rollouts per source of every generated task of `split` (held-out files only ever
    make held-out labels). The label's split is the file's."""
    rng = random.Random(seed)
    variants = [v for v in generated_variants(folder) if v.split == split]
    total = 0
    for v in variants:
        for lab in variant_labels(v.base, [v], episodes, seed, stride, sources, rng, milestone_share=0.0):
            total += 1
            yield lab
    log(f"{folder} ({split}): {total} labels over {len(variants)} generated tasks")


def run_labels(run_dir: str | Path, per_scene: int = 8, log=print) -> Iterator[Label]:
    """Labels from the states a learning policy visited: every recorded step (training and evaluation episodes)
    of a run folder, with the run's task text; target from the rule progress the recorder stored (episodes
    recorded before it was stored are skipped, and said so). Source `policy`, split `train`; at most `per_scene`
    visits of one scene text are kept, each with its own target: a state the policy keeps returning to (a tool
    knocked to the floor, visited every step until the time limit) weighs as it does in training, and where one
    text covers several distances the head learns that spread. A run's replay buffer holds observation vectors,
    not scenes, so it is not read."""
    from robo_prm.replay.episode import load_episode

    run_dir = Path(run_dir)
    cfg = run_dir / "config.yaml"
    if not cfg.exists():
        raise ValueError(f"{run_dir}: not a run folder (no config.yaml)")
    task = load_task(str(load_yaml(cfg)["task"]))
    focus, text, seen, skipped = goal_words(task), text_of(task.spec), Counter(), 0
    folders = sorted({p.parent for p in run_dir.glob("**/steps.jsonl")})
    for folder in folders:
        ep = load_episode(folder)
        for rec in ep.steps:
            if rec.rule_progress is None:
                skipped += 1
                continue
            if not rec.description or seen[rec.description] >= per_scene:
                continue
            seen[rec.description] += 1
            yield Label(task=task.name, scene=rec.description, target=progress_to_target(rec.rule_progress),
                        hazards=list(rec.hazards_true), source="policy", task_text=text, split="train",
                        base_task=task.name, variant="policy", rule_progress=float(rec.rule_progress),
                        episode=f"{run_dir.name}/{folder.relative_to(run_dir)}", step=rec.step,
                        reason=reason_target(rec.description, focus))
    log(f"{run_dir}: {sum(seen.values())} policy-state labels ({len(seen)} scene texts) from {len(folders)} episodes"
        + (f" ({skipped} steps recorded without rule progress skipped)" if skipped else ""))
