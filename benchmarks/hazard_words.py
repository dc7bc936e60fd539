"""Hazards in words, read by the hazard reader alone (issue 14; docs/BENCHMARKS.md, "Judge on any task file").

The reader decides each task hazard from its text and the scene text (P ≥ 0.5), exactly as the judge asks it
(ConfidentJudge._read_hazards); no LLM pass is needed, so many files and wordings are cheap. Each task file's
episodes (`task_case`: 2 scripted successes, 2 failures, 8 states each) are rolled out once; the hazards are then
asked in each phrasing set:

* `as_written` — the file's own texts;
* `NAME=PATH.yaml` — every checked hazard re-worded with a random line of that kind from the YAML
  (`hazards: {near_edge: [{text: "the {obj} ..."}], named_edge: …, fell, tipped, disturbed, bystander_moved}`),
  filled with the file's own names for the object, the table, the edge and the bystander. The seed fixes the draw,
  made file after file in the order given: list the files in the same order to compare runs (the published
  commands list them sorted).

    python benchmarks/hazard_words.py --name s17 --readers shipped,/tmp/reader \\
        --phrasings as_written,fresh=/tmp/fresh_phrasings/hazards_fresh.yaml generated_s1/gen_s1_00{02,05}.yaml

Results: benchmarks/results/hazard_words_<name>.json — per reader × phrasing set: precision, recall, F1, the
share of hazard texts the reader routes to their own kind, and per kind figures.
"""
from __future__ import annotations

import argparse
import json
import random
import re
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


def names_of(raw: dict, check: str) -> dict[str, str]:
    """A hazard's {obj} / {bys} / {edge} / {table} words, from its check expression and the file's `objects:`."""
    from robo_prm.envs.predicates import ident_key

    objects = {str(k): str(v) for k, v in (raw.get("objects") or {}).items()}
    display = {ident_key(v): v for v in objects.values()}  # a check names an object by its ident (club_hammer)
    args = re.search(r"\((.*)\)", check).group(1).split(",")
    first = display.get(args[0].strip(), args[0].strip().replace("_", " "))
    edge = args[2].strip() if len(args) > 2 else "front"  # a direction (front) or the file's edge word (right_side)
    return {"obj": first, "bys": first, "table": objects.get("table", "table"),
            "edge": display.get(edge) or objects.get(f"{edge}_edge", f"{edge} edge")}


def reworded(path: str, bank: dict[str, list[str]], rng: random.Random) -> dict[str, str]:
    """hazard name → a text of its kind from `bank`, filled with the file's names."""
    import yaml

    raw = yaml.safe_load(Path(path).read_text())
    out = {}
    for h in raw.get("hazards") or []:
        if h.get("check") and h["name"] in bank:
            out[h["name"]] = rng.choice(bank[h["name"]]).format(**names_of(raw, h["check"]))
    return out


def measure(reader, cases, texts_per_case, errors: list | None = None) -> dict:
    """Precision / recall at P ≥ 0.5 pooled over every (scene, checked hazard), kind routing, per-kind figures."""
    from robo_prm.finetune.hazard_kinds import KIND_OF
    from robo_prm.metrics import precision_recall_f1

    per_kind: dict[str, list[int]] = {}
    routed = []
    for case, texts in zip(cases, texts_per_case):
        names = [n for n in case.checked if n in texts]
        if not names:
            continue
        kinds = reader.kind_of([texts[n] for n in names], edges=case.text.edges, table=case.text.table)
        routed += [k == KIND_OF[n] for n, k in zip(names, kinds) if k is not None and n in KIND_OF]
        scenes = [s.text for ep in case.episodes for s in ep.scenes]
        truth = [t for ep in case.episodes for t in ep.truth]
        p = reader.probabilities([texts[n] for n in names], scenes, edges=case.text.edges, table=case.text.table)
        for scene, row, true in zip(scenes, p, truth):
            for n, prob in zip(names, row):
                c = per_kind.setdefault(n, [0, 0, 0])  # tp, fp, fn
                said, held = bool(prob >= 0.5), n in true
                if errors is not None and said != held:
                    errors.append({"task": case.name, "kind": n, "hazard": texts[n], "p": round(float(prob), 3),
                                   "miss": held, "scene": scene})
                c[0] += said and held
                c[1] += said and not held
                c[2] += held and not said
    tp, fp, fn = (sum(c[i] for c in per_kind.values()) for i in range(3))
    return {**precision_recall_f1(tp, fp, fn), "tp": tp, "fp": fp, "fn": fn,
            "routed_to_own_kind": sum(routed) / len(routed) if routed else None, "hazard_texts": len(routed),
            "per_kind": {n: {**precision_recall_f1(*c), "tp": c[0], "fp": c[1], "fn": c[2]} for n, c in per_kind.items()}}


def grouped(errors: list[dict]) -> list[dict]:
    """Wrong decisions grouped by (kind, hazard text, miss or false alarm), most frequent first, one example scene each."""
    groups: dict[tuple, dict] = {}
    for e in errors:
        g = groups.setdefault((e["kind"], e["hazard"], e["miss"]), {**e, "n": 0})
        g["n"] += 1
    return sorted(groups.values(), key=lambda g: -g["n"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tasks", nargs="+")
    ap.add_argument("--name", required=True)
    ap.add_argument("--readers", default="shipped", help="comma-separated reader folders (shipped: the packaged one); "
                    "FOLDER+bank: that reader with the kind bank of today's configs/reader/paraphrases.yaml; "
                    "FOLDER+no_edge_names: without the task's edge and table words (HazardReader.kind_vectors)")
    ap.add_argument("--phrasings", default="as_written", help="comma-separated: as_written and/or NAME=PATH.yaml")
    ap.add_argument("--episodes", type=int, default=2)
    ap.add_argument("--max_states", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)

    import torch
    import yaml

    from robo_prm.finetune.any_task import task_case
    from robo_prm.finetune.hazard_kinds import kind_bank
    from robo_prm.judge.hazard_reader import HazardReader, KindBank
    from robo_prm.provenance import provenance

    torch.set_num_threads(args.threads)
    cases = []
    for path in args.tasks:
        cases.append(task_case(path, episodes=args.episodes, max_states=args.max_states, seed=args.seed))
        print(f"{cases[-1].name}: {sum(len(e.scenes) for e in cases[-1].episodes)} states", file=sys.stderr)
    sets: dict[str, list[dict[str, str]]] = {}
    for spec in args.phrasings.split(","):
        if spec == "as_written":
            sets[spec] = [{h.name: h.text for h in c.text.hazards} for c in cases]
            continue
        label, path = spec.split("=", 1)
        bank = {k: [v["text"] for v in vs] for k, vs in yaml.safe_load(Path(path).read_text())["hazards"].items()}
        rng = random.Random(args.seed)
        sets[label] = [reworded(p, bank, rng) for p in args.tasks]
    out = {"meta": {**provenance(), "tasks": args.tasks, "episodes": args.episodes, "max_states": args.max_states},
           "texts": {label: [{"task": c.name, **t} for c, t in zip(cases, texts)] for label, texts in sets.items()},
           "runs": {}}
    for spec in args.readers.split(","):
        folder, _, bank = spec.partition("+")
        reader = HazardReader.load(None if folder == "shipped" else folder)
        if bank == "bank":  # the reader with the kind bank of today's configs/reader/paraphrases.yaml
            reader.kinds = KindBank(kind_bank(), reader.tokens)
        if bank == "no_edge_names":  # the route before session 19: the task's edge and table words unused
            reader.kind_vectors = lambda hazards, edges=(), table=None, route=reader.kind_vectors: route(hazards)
        for label, texts in sets.items():
            errors: list[dict] = []
            r = measure(reader, cases, texts, errors)
            out["runs"][f"{spec}/{label}"] = {**r, "errors": grouped(errors)}
            f = {k: "—" if r[k] is None else f"{r[k]:.2f}" for k in ("precision", "recall", "f1", "routed_to_own_kind")}
            print(f"{spec:>30} {label:>12}: P {f['precision']} R {f['recall']} F1 {f['f1']} "
                  f"(tp {r['tp']} fp {r['fp']} fn {r['fn']}), routed to own kind {f['routed_to_own_kind']}")
    path = RESULTS / f"hazard_words_{args.name}.json"
    path.write_text(json.dumps(out, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
