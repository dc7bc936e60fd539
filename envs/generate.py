"""Task family generator: `robo-prm tasks generate --n N --seed S --out DIR`.

Draws N tasks from the scene's objects and places: family (configs/generator/families.yaml: carry into a
container, carry to a place, clear of every edge, back from one named edge, push to a place, reach it
untouched) × object × target × start zone (× a bystander that must not be moved), phrased from
configs/generator/phrasing.yaml with words from configs/generator/words.yaml. Each task gets success,
milestones, hazard checks and an `expert:` plan from its structure; it is kept (written to DIR) only when
it validates, is not already solved at reset, and its plan succeeds on at least 4 of 5 seeds.

Every file says how it was made: `family` (the structure family) and `split` — `train`, or held out by
structure (`heldout_structure`: a family × object × target never trained on), by phrasing
(`heldout_phrasing`: only held-out templates and words) or both — so a judge can be measured on reading,
not on remembering.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Callable

import yaml

from robo_prm.config_io import ConfigError, from_dict, load_yaml
from robo_prm.envs.predicates import ident_key, word_key
from robo_prm.envs.scene import CONTAINERS, EDGE_SIMS, OBJECT_KIND, OBJECTS
from robo_prm.envs.task import Task, TaskSpec, load_task

DATA_FILES = ("families", "phrasing", "words")
MAX_REDRAWS = 200  # invalid draws (overlapping start zones, a tool that does not fit a bin) are drawn again


def generator_dir() -> Path:
    return Path(str(resources.files("robo_prm.configs") / "generator"))


def load_data(folder: Path | None = None) -> dict[str, dict]:
    folder = Path(folder) if folder is not None else generator_dir()
    return {name: load_yaml(folder / f"{name}.yaml") for name in DATA_FILES}


@dataclass
class Draw:
    """One structure and phrasing choice."""

    family: str
    obj: str
    target: str  # a container, a place, or away / edge / untouched
    start: str
    phrasing: str  # train | heldout
    bys: str | None = None
    bys_start: str | None = None
    words: dict[str, str] = field(default_factory=dict)  # sim (object, place, table, edge) → word
    templates: dict[str, str] = field(default_factory=dict)  # part → template id

    def structure_split(self, heldout: list[dict]) -> str:
        mine = {"family": self.family, "object": self.obj, "target": self.target, "start": self.start}
        return "heldout" if any(all(mine[k] == v for k, v in rule.items()) for rule in heldout) else "train"


def ref(word: str) -> str:
    """How a predicate names a word: bare when it can be (claw hammer → claw_hammer), else quoted."""
    key = word_key(word)
    return key if key.isidentifier() and key == ident_key(word) else json.dumps(word)


def draw_structure(data: dict, rng: random.Random) -> Draw:
    fams = data["families"]
    name = rng.choice(sorted(fams["families"]))
    fam = fams["families"][name]
    obj, target = rng.choice(fam["objects"]), rng.choice(fam["targets"])
    starts = [z for z in fam["starts"] if z != target]
    phrasing = "heldout" if rng.random() < fams["phrasing_heldout_probability"] else "train"
    draw = Draw(name, obj, target, rng.choice(starts), phrasing)
    bys = fams["bystander"]
    if name in bys["families"] and rng.random() < bys["probability"]:
        keep_off = set(bys["keep_off"].get(target, [])) | {target, draw.start}
        draw.bys = rng.choice([o for o in OBJECTS if o != obj])
        draw.bys_start = rng.choice([z for z in bys["starts"] if z not in keep_off])
    return draw


def choose_words(draw: Draw, data: dict, rng: random.Random) -> None:
    """The task's vocabulary from the draw's phrasing split; unique by the names predicates use."""
    pools = data["words"]
    split = draw.phrasing
    taken: set[str] = set()

    def pick(options: list[str]) -> str:
        free = [w for w in options if word_key(w) not in taken and ident_key(w) not in taken]
        word = rng.choice(free)
        taken.update({word_key(word), ident_key(word)})
        return word

    for sim in (draw.obj, draw.bys):
        if sim is not None:
            draw.words[sim] = pick(pools["objects"][sim][split])
    for place in ("left_bin", "tray", "middle"):
        draw.words[place] = pick(pools["places"][place][split])
    draw.words["table"] = pick(pools["table"][split])
    for edge in EDGE_SIMS:
        draw.words[edge] = pick(pools["edges"][edge][split])


def _vocabulary(draw: Draw) -> dict[str, str]:
    """`objects:` of the file: the objects, and every place, the table and edge under a word of its own."""
    defaults = {"middle": "middle", "table": "table", **{e: e.replace("_", " ") for e in EDGE_SIMS}}
    vocab = {sim: draw.words[sim] for sim in (draw.obj, draw.bys) if sim is not None}
    for sim, word in draw.words.items():
        if sim not in vocab and sim not in OBJECTS and word != defaults.get(sim):
            vocab[sim] = word
    return vocab


def _text_fields(draw: Draw) -> dict[str, str]:
    w = draw.words
    middle = f"middle of the {w['table']}" if w["middle"] == "middle" else w["middle"]
    fields = {"table": w["table"], "middle": middle, "left_bin": w["left_bin"], "tray": w["tray"],
              **{e: w[e] for e in EDGE_SIMS}}
    return fields


def _lies(sim: str) -> str:
    return "stands" if OBJECT_KIND[sim] == "fragile" else "lies"


def phrase(draw: Draw, data: dict, rng: random.Random) -> dict:
    """background, goal, dimensions and hazard texts, all from templates of the draw's phrasing split."""
    ph, fam = data["phrasing"], data["families"]["families"][draw.family]
    kind, split = fam["kind"], draw.phrasing
    base = _text_fields(draw)
    starts = {z: t.format(**base) for z, t in ph["start"].items()}
    edge = data["families"]["start_edge"].get(draw.start)
    fields = {**base, "obj": draw.words[draw.obj], "lies": _lies(draw.obj), "start": starts[draw.start],
              "target": draw.words[draw.target] if draw.target in CONTAINERS else base["middle"],
              "edge": draw.words[edge] if edge else ""}
    if draw.bys:
        fields.update(bys=draw.words[draw.bys], bys_lies=_lies(draw.bys), bys_start=starts[draw.bys_start])

    def choose(part: str, options: list[dict]) -> dict:
        t = rng.choice([o for o in options if o["split"] == split])
        draw.templates[part] = t["id"]
        return t

    def fill(text: str) -> str:
        out = text.format(**fields)
        return out[:1].upper() + out[1:]

    background = fill(choose("background", ph["background"][kind])["text"])
    if draw.bys:
        background += " " + fill(choose("bystander", ph["bystander"])["text"])
    texts = {"background": background, "goal": fill(choose("goal", ph["goal"][kind])["text"]),
             "dimensions": [line.format(**fields) for line in choose("dimensions", ph["dimensions"][kind])["lines"]],
             "hazards": {}}
    for hazard in _hazard_kinds(draw, data):  # hazard texts stay lower case: "the hammer has fallen off the table"
        texts["hazards"][hazard] = choose(f"hazard/{hazard}", ph["hazards"][hazard])["text"].format(**fields)
    return texts


def _hazard_kinds(draw: Draw, data: dict) -> list[str]:
    fams = data["families"]
    kinds = list(fams["families"][draw.family]["hazards"])
    if OBJECT_KIND[draw.obj] == "fragile":
        kinds += fams["fragile_hazards"]
    if draw.bys:
        kinds += fams["bystander"]["hazards"]
    return kinds


def task_dict(draw: Draw, data: dict, texts: dict, name: str, split: str) -> dict:
    """The task file's contents: the judge's text, then what the simulator checks and the plan."""
    fams = data["families"]
    fam = fams["families"][draw.family]
    w = draw.words
    edge = fams["start_edge"].get(draw.start)
    target_word = w[draw.target] if draw.target in w else draw.target
    names = {"obj": ref(w[draw.obj]), "target": ref(target_word),
             "edge": ref(w[edge]) if edge and edge in _vocabulary(draw) else EDGE_SIMS.get(edge, ""),
             "bys": ref(w[draw.bys]) if draw.bys else ""}
    checks = [fam["success"]]
    if OBJECT_KIND[draw.obj] == "fragile":
        checks.append(fams["fragile_success"])
    if draw.bys:
        checks.append(fams["bystander"]["success"])
    hazards = [{"name": kind, "text": texts["hazards"][kind], "severity": fams["hazards"][kind]["severity"],
                "check": fams["hazards"][kind]["check"].format(**names)} for kind in _hazard_kinds(draw, data)]
    raw = {"name": name, "family": draw.family, "split": split,
           "background": texts["background"], "goal": texts["goal"], "dimensions": texts["dimensions"], "hazards": hazards,
           "objects": _vocabulary(draw), "start": {draw.obj: draw.start, **({draw.bys: draw.bys_start} if draw.bys else {})},
           "success": " and ".join(c.format(**names) for c in checks),
           "milestones": [{k: v.format(**names) if isinstance(v, str) else v for k, v in m.items()} for m in fam["milestones"]]}
    if fam.get("success_distance"):
        raw["success_distance"] = fam["success_distance"].format(**names)
    raw["dense_reward"] = [{"expr": t["expr"].format(**names), "weight": t["weight"]} for t in fam["dense_reward"]]
    raw["max_steps"] = fam["max_steps"]
    plan_words = {"obj": w[draw.obj], "target": target_word}
    raw["expert"] = [line.format(**plan_words) for line in fam["plan"]]
    return raw


def draw_task(data: dict, rng: random.Random, name: str) -> tuple[Draw, dict, Task]:
    """A valid task: drawn again while the draw fails validation (zones that overlap, a tool in a bin)."""
    heldout = data["families"]["heldout_structures"]
    last = None
    for _ in range(MAX_REDRAWS):
        draw = draw_structure(data, rng)
        choose_words(draw, data, rng)
        texts = phrase(draw, data, rng)
        structure = draw.structure_split(heldout)
        split = {("train", "train"): "train", ("heldout", "train"): "heldout_structure",
                 ("train", "heldout"): "heldout_phrasing", ("heldout", "heldout"): "heldout_both"}[structure, draw.phrasing]
        raw = task_dict(draw, data, texts, name, split)
        try:
            return draw, raw, Task(from_dict(TaskSpec, raw, where=name), source=name)
        except ConfigError as exc:
            last = exc
    raise ConfigError(f"{name}: no valid task in {MAX_REDRAWS} draws (last: {last})")


def check_plan(task: Task, seeds: list[int]) -> tuple[int, int]:
    """(episodes whose plan succeeded, episodes already solved at reset) over `seeds`."""
    from robo_prm.envs.experts import ScriptedExpert
    from robo_prm.envs.rollout import rollout
    from robo_prm.envs.tidy_env import TidyTableEnv

    env = TidyTableEnv(task)
    try:
        expert = ScriptedExpert(env)
        runs = [rollout(env, expert, s) for s in seeds]
    finally:
        env.close()
    return sum(ep.success for ep in runs), sum(bool(ep.infos[0]["is_success"]) for ep in runs)


def write_task(raw: dict, draw: Draw, path: Path, seed: int) -> None:
    head = (f"# Generated by `robo-prm tasks generate --seed {seed}` (robo_prm/envs/generate.py); family {draw.family}:\n"
            f"# {draw.obj} {draw.start} -> {draw.target}" + (f", bystander {draw.bys} {draw.bys_start}" if draw.bys else "")
            + f"; phrasing {draw.phrasing}: " + ", ".join(f"{k}={v}" for k, v in draw.templates.items()) + "\n")
    path.write_text(head + yaml.safe_dump(raw, sort_keys=False, allow_unicode=True, width=120))


def generate(n: int, seed: int, out: Path, data: dict | None = None,
             progress: Callable[[int, str], None] | None = None) -> dict:
    """Draw `n` valid tasks, keep those whose plan succeeds often enough, write them to `out`; returns the report
    (also written to out/report.json)."""
    data = data or load_data()
    fams = data["families"]
    seeds, need = list(fams["seeds"]), int(fams["keep_at_least"])
    rng = random.Random(seed)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"n": n, "seed": seed, "kept": 0, "rejected_plan": 0, "rejected_solved_at_reset": 0,
              "families": {}, "splits": {}, "seeds": seeds, "keep_at_least": need}
    for i in range(n):
        name = f"gen_s{seed}_{i:04d}"
        draw, raw, task = draw_task(data, rng, name)
        wins, solved = check_plan(task, seeds)
        kept = wins >= need and not solved
        fam = report["families"].setdefault(draw.family, {"drawn": 0, "kept": 0})
        fam["drawn"] += 1
        if kept:
            path = out / f"{name}.yaml"
            write_task(raw, draw, path, seed)
            load_task(path)  # what was written reads back as a valid task
            fam["kept"] += 1
            report["kept"] += 1
            report["splits"][raw["split"]] = report["splits"].get(raw["split"], 0) + 1
        else:
            report["rejected_solved_at_reset" if solved else "rejected_plan"] += 1
        if progress:
            progress(i, f"{name} {draw.family} {draw.obj} {draw.start}->{draw.target}: plan {wins}/{len(seeds)}"
                        + (" solved at reset" if solved else "") + (" kept" if kept else " dropped"))
    report["kept_fraction"] = report["kept"] / max(1, n)
    (out / "report.json").write_text(json.dumps(report, indent=1))
    return report
