"""benchmarks/hazard_words.py's rewording: a hazard re-worded from a wording set takes the file's own names."""
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_rewording_fills_the_files_names(tmp_path, load_benchmark):
    task = tmp_path / "t.yaml"
    task.write_text(
        "hazards:\n"
        "- {name: named_edge, text: x, check: 'near_edge(club_hammer, 0.05, front)'}\n"
        "- {name: fell, text: y, check: off_table(club_hammer)}\n"
        "- {name: tipped, text: z}\n"  # no check: not scored, not re-worded
        "objects: {tool0: club hammer, table: counter, front_edge: near side}\n")
    bank = {"named_edge": ["the {obj} is by the {edge} of the {table}"], "fell": ["{obj} on the floor"],
            "tipped": ["the {obj} tipped"]}
    out = load_benchmark("hazard_words").reworded(str(task), bank, random.Random(0))
    assert out == {"named_edge": "the club hammer is by the near side of the counter", "fell": "club hammer on the floor"}


def test_the_wording_sets_cover_every_generated_hazard_kind():
    import yaml

    from robo_prm.finetune.hazard_kinds import KIND_OF

    for name in ("hazards_fresh.yaml", "hazards_fresh2.yaml"):
        sets = yaml.safe_load((ROOT / "benchmarks" / "data" / name).read_text())["hazards"]
        assert set(sets) == set(KIND_OF) and all(len(v) >= 10 for v in sets.values())
