"""The hazard reader: trained on labels, saved and loaded, and wired into the judge (hazard_answerer reader)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from robo_prm.finetune.hazard_reader import HazardTrainConfig, best_threshold, pairs, train_reader
from robo_prm.finetune.labels import read_labels
from robo_prm.judge import ConfidentJudge, JudgeConfig, Scored, make_judge
from robo_prm.judge.hazard_reader import HazardReader, ReaderNet, shipped_reader_folder, strip_milestones
from robo_prm.types import HazardText, SceneDescription, TaskText

TASK = {"background": "A hammer lies on a table.", "goal": "Bring the gripper to the hammer.", "dimensions": ["distance"],
        "hazards": [{"name": "fell", "text": "the hammer has fallen off the table", "severity": 1.0},
                    {"name": "edge", "text": "the hammer lies within 5 cm of a table edge", "severity": 0.5}]}
SCENES = {  # scene → the hazards that hold
    "The gripper is open, 20 cm from the hammer. The hammer has fallen off the table.": ["fell"],
    "The gripper is open, 10 cm from the hammer. The hammer lies 5 cm from the front edge of the table.": ["edge"],
    "The gripper is closed, far from the hammer. The hammer lies in the middle of the table.": [],
    "The gripper is open, 15 cm from the hammer. The hammer lies at the very back edge of the table.": ["edge"],
    "The gripper is closed, 30 cm from the hammer. The hammer lies 25 cm from the left edge of the table.": [],
}


def _labels(path, split_every: int = 0):
    rows = []
    for k, (scene, on) in enumerate(SCENES.items()):
        for split in ("train", "heldout"):
            rows.append({"task": "t", "scene": scene + " Milestones reached: 0 of 2.", "target": 5.0, "hazards": on,
                         "task_text": TASK, "split": split})
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_pairs_ask_every_hazard_of_the_task_and_drop_the_milestone_line(tmp_path):
    hz, sc, y = pairs(read_labels(_labels(tmp_path / "l.jsonl"), split="train"))
    assert len(hz) == 2 * len(SCENES) and y.sum() == 3
    assert all("Milestones" not in s for s in sc)
    assert strip_milestones("A. Milestones reached: 1 of 3.") == "A."


def test_best_threshold_finds_the_separating_cut():
    t, m = best_threshold(np.array([0.1, 0.2, 0.35, 0.4, 0.9]), np.array([0, 0, 1, 1, 1.0]))
    assert t == pytest.approx(0.35) and m["f1"] == 1.0


@pytest.fixture(scope="module")
def reader(tmp_path_factory):
    """A reader trained in-process on five scenes (real MiniLM token states, a tiny encoder). No word dropout: with
    five scenes it can hide the one token ("25" vs "5") that tells two of them apart. Whether 60 epochs separate all
    five hangs on the seed and on the CPU's float rounding (seed 0 does on AMD EPYC, not on Intel Xeon), so the first
    of three seeds that learns them is kept."""
    tmp = tmp_path_factory.mktemp("reader")
    labels = _labels(tmp / "l.jsonl")
    for seed in range(3):
        cfg = HazardTrainConfig(labels=str(labels), out=str(tmp / f"reader{seed}"), epochs=60, batch_size=4, lr=3e-3,
                                dim=32, layers=1, word_dropout=0.0, rename=0.0, seed=seed)
        if train_reader(cfg, echo=lambda *_: None)["heldout_at_threshold"]["f1"] == 1.0:  # it learned the five scenes
            return HazardReader.load(tmp / f"reader{seed}")
    pytest.fail("no seed of three learned the five scenes")


def test_a_trained_reader_separates_what_it_learned_and_decides_at_one_half(reader):
    texts = [h["text"] for h in TASK["hazards"]]
    p = reader.probabilities(texts, list(SCENES))
    want = np.array([[h["name"] in on for h in TASK["hazards"]] for on in SCENES.values()])
    assert ((p >= 0.5) == want).all(), p  # the fitted threshold sits in the head's bias
    again = reader.probabilities(texts, list(SCENES)[:1])
    assert np.allclose(again, p[:1]) and reader.seconds > 0


class _Backend:
    name = "fixed"

    def __init__(self):
        self.asked = []

    def score(self, task, scenes, hazards, explain):
        self.asked.append(list(hazards))
        return [Scored(np.eye(10)[5], 1.0, {h: 0.5 for h in hazards}) for _ in scenes]

    def close(self):
        pass


class _BrokenReader:
    seconds = 0.0

    def probabilities(self, hazards, scenes, **names):
        raise RuntimeError("reader weights unreadable")


def _task() -> TaskText:
    return TaskText("t", TASK["background"], TASK["goal"], ("distance",),
                    tuple(HazardText(h["name"], h["text"], h["severity"]) for h in TASK["hazards"]))


def test_the_judge_asks_the_reader_not_the_backend(reader):
    backend = _Backend()
    judge = ConfidentJudge(backend, JudgeConfig(hazards_from="llm", confidence_threshold=0.0), reader=reader)
    scenes = [SceneDescription(text=t, facts=()) for t in SCENES]
    out = judge.judge(_task(), scenes)
    assert backend.asked == [[]]  # no yes/no pass per hazard
    assert [sorted(h.name for h in o.hazards if h.probability >= 0.5) for o in out] == [sorted(v) for v in SCENES.values()]


def test_a_failing_reader_hands_the_hazards_back_to_the_backend(caplog):
    backend = _Backend()
    judge = ConfidentJudge(backend, JudgeConfig(hazards_from="llm", confidence_threshold=0.0), reader=_BrokenReader())
    [out] = judge.judge(_task(), [SceneDescription(text=next(iter(SCENES)), facts=())])
    assert backend.asked == [["fell", "edge"]] and {h.name: h.probability for h in out.hazards} == {"fell": 0.5, "edge": 0.5}
    assert "reader weights unreadable" in caplog.text


def test_a_missing_reader_folder_is_a_one_line_error(tmp_path):
    with pytest.raises(ValueError, match="judge.hazard_reader: .*reader.json"):
        make_judge(JudgeConfig(backend="openai", hazard_reader=str(tmp_path / "nowhere")))


def test_a_broken_kind_route_is_a_one_line_error(tmp_path):
    import shutil

    folder = tmp_path / "reader"
    shutil.copytree(shipped_reader_folder(), folder)
    meta = json.loads((folder / "reader.json").read_text())
    meta["kind_classifier"]["weight"] = meta["kind_classifier"]["weight"][:2]  # two rows for five kinds
    (folder / "reader.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="judge.hazard_reader: .*kind route is unreadable"):
        make_judge(JudgeConfig(backend="openai", hazard_reader=str(folder)))


def test_the_shipped_reader_loads():
    r = HazardReader.load(shipped_reader_folder())
    assert r.info["heldout_pairs"] > 0 and 0.0 < r.info["threshold_folded"] < 1.0
    assert r.tokens._model is None  # MiniLM loads only when a hazard is read (the main command never reads one)
    p = r.probabilities(["the hammer has fallen off the table"], ["The gripper is open, far from the hammer. The hammer "
                                                                "has fallen off the table.", "The gripper is open, far "
                                                                "from the hammer. The hammer lies in the middle of the table."])
    assert p[0, 0] > 0.5 > p[1, 0]


def test_the_kind_bank_and_paraphrases_keep_the_generators_heldout_wordings_out():
    from robo_prm.envs.generate import load_data
    from robo_prm.finetune.hazard_kinds import FILLERS, Paraphraser, kind_bank

    heldout = {t["text"].format(**FILLERS) for ts in load_data()["phrasing"]["hazards"].values()
               for t in ts if t["split"] == "heldout"}
    bank = {t for texts in kind_bank().values() for t in texts}
    assert bank and not heldout & bank
    p = Paraphraser(seed=0)
    out = p("fell", "the claw hammer has fallen off the bench")  # a train template of kind fell
    assert out and "claw hammer" in out and out != "the claw hammer has fallen off the bench"
    assert p("fell", "the claw hammer is no longer on the bench") is None  # a held-out wording is never rewritten


def test_a_reader_outage_does_not_serve_cached_answers_without_hazards(reader):
    class _Flaky:  # answers, then fails
        seconds, broken = 0.0, False

        def probabilities(self, hazards, scenes, **names):
            if self.broken:
                raise RuntimeError("reader gone")
            return reader.probabilities(hazards, scenes)

    backend, flaky = _Backend(), _Flaky()
    judge = ConfidentJudge(backend, JudgeConfig(hazards_from="llm", confidence_threshold=0.0), reader=flaky)
    scene = [SceneDescription(text=next(iter(SCENES)), facts=())]
    judge.judge(_task(), scene)
    flaky.broken = True
    [out] = judge.judge(_task(), scene)  # the cached answer was given without hazards: the backend is asked again
    assert backend.asked == [[], ["fell", "edge"]] and {h.name for h in out.hazards} == {"fell", "edge"}


def test_kind_thresholds_fit_per_kind_and_an_offset_moves_only_its_kind(reader, tmp_path):
    from robo_prm.finetune.hazard_reader import fit_kind_offsets

    texts = [h["text"] for h in TASK["hazards"]]
    assert reader.kind_of(texts) == ["fell", "edge"]
    held = read_labels(_labels(tmp_path / "l.jsonl"), split="heldout")
    offsets, m = fit_kind_offsets(reader, held, min_positives=1)
    assert set(offsets) == {"fell", "edge"} and m["f1"] == 1.0  # per-kind cuts keep the separation
    assert fit_kind_offsets(reader, held, min_positives=3)[0] == {}  # too few positives: the global cut stays
    before = reader.probabilities(texts, list(SCENES))
    muted = HazardReader(reader.net, {**reader.info, "kind_offsets": {"fell": -50.0}}, tokens=reader.tokens)
    after = muted.probabilities(texts, list(SCENES))
    assert (after[:, 0] < 1e-6).all() and np.allclose(after[:, 1], before[:, 1], atol=1e-6)


def test_renames_are_the_same_in_scene_and_hazard_and_never_a_heldout_word():
    from robo_prm.envs.generate import load_data
    from robo_prm.finetune.hazard_kinds import Renamer

    words = load_data()["words"]
    heldout = {w.lower() for group in ("objects", "places", "edges") for v in words[group].values() for w in v["heldout"]}
    heldout |= {w.lower() for w in words["table"]["heldout"]}
    renamer = Renamer(p=1.0, seed=0)
    assert not heldout & {w.lower() for pool in renamer.pool.values() for w in pool}
    scene = "The claw hammer lies 5 cm from the front edge of the bench. The glass cup stands in the blue bin."
    hazard = "keep clear of the front edge: the claw hammer is within 5 cm of it"
    for _ in range(20):
        s, h = renamer([scene, hazard])
        assert "claw hammer" not in s and "front edge" not in s and " bench" not in s and "blue bin" not in s
        thing = h.split(": the ")[1].split(" is within")[0]
        edge = h[len("keep clear of the "):].split(":")[0]
        assert s.startswith(f"The {thing} lies 5 cm from the {edge} of the ")  # one name each
        assert thing.lower() not in s.split(". ")[1].lower()  # the cup got a name of its own
    assert Renamer(p=0.0)([scene, hazard]) == [scene, hazard]


def test_the_kind_classifier_routes_train_wordings_whatever_the_names():
    from robo_prm.finetune.hazard_kinds import fit_kind_classifier, kind_bank
    from robo_prm.judge.hazard_reader import KindBank, TokenStates

    tokens = TokenStates()
    route = fit_kind_classifier(tokens, fills=4)
    kinds = KindBank(kind_bank(), tokens, classifier=route)
    texts = ["the phillips screwdriver is close to an edge of the bench",  # the nearest-wording route said "moved"
             "the ball-peen hammer has fallen off the work table", "the glass tumbler has tipped over",
             "the mallet has been pushed or moved"]
    p = kinds(texts)
    assert _rows_sum_to_one(p) and [kinds.kinds[i] for i in p.argmax(1).tolist()] == ["edge", "fell", "tipped", "moved"]
    with pytest.raises(ValueError, match="kind_classifier kinds"):
        KindBank({"edge": ["x"]}, tokens, classifier=route)


def _rows_sum_to_one(p) -> bool:
    return bool(np.allclose(p.sum(1).numpy(), 1.0, atol=1e-5))


def test_a_focused_reader_reads_only_the_hazards_own_object():
    from robo_prm.judge.hazard_reader import about_its_object

    scene = ("The gripper is closed, 30 cm from the glass cup. The claw hammer lies 5 cm from the right edge of the "
             "bench. The glass cup stands in the green tray. It has moved 3 cm from where it stood.")
    cup = about_its_object("the glass cup is close to an edge of the bench", scene)
    assert cup == ("The gripper is closed, 30 cm from the glass cup. The glass cup stands in the green tray. "
                   "It has moved 3 cm from where it stood.")
    assert "glass cup stands" not in about_its_object("the claw hammer has fallen off the bench", scene)
    assert about_its_object("something fell off the bench", scene) == scene  # names no object: the whole scene


def test_every_object_sentence_of_the_describer_is_found_by_the_focus():
    from robo_prm.describe.render import _PHRASES
    from robo_prm.types import OBJECT_VERBS

    for place, (_, sentence) in _PHRASES.items():
        rest = sentence.removeprefix("The {w} ")
        for verb in ("stands", "lies", "lies tipped over"):
            assert rest.format(verb=verb, height="", bucket="", table="", container="", from_edge="", middle="",
                               depth="", side="", fallen_pose="").startswith(OBJECT_VERBS), place


class _FixedKinds:
    """A kind route answering fixed vectors: kinds edge, fell, moved, named_edge, tipped."""
    kinds = ["edge", "fell", "moved", "named_edge", "tipped"]

    def __init__(self, rows):
        self.rows = torch.tensor(rows)

    def __call__(self, texts):
        return self.rows[:len(texts)].clone()


def test_a_hazard_naming_none_of_the_tasks_edges_is_not_a_named_edge_hazard():
    r = HazardReader(ReaderNet(kinds=5))
    r.kinds = _FixedKinds([[0.05, 0.0, 0.05, 0.5, 0.4]] * 3)
    edges, hazards = ("near rim", "far rim", "left rim", "right rim"), [
        "keep the bowl off the near rim",       # names an edge of the task: stays named_edge
        "the vase is lying on its side",        # names no edge and not the table: the share spreads
        "the vase sits at the border of the counter"]  # names the table only: an edge, unnamed
    k = r.kind_vectors(hazards, edges, table="counter")
    assert torch.allclose(k[0], r.kinds.rows[0])
    assert k[1, 3] == 0 and torch.allclose(k[1], torch.tensor([0.1, 0.0, 0.1, 0.0, 0.8]))
    assert torch.allclose(k[2], torch.tensor([0.55, 0.0, 0.05, 0.0, 0.4]))
    assert torch.allclose(r.kind_vectors(hazards), r.kinds.rows)  # no edges known (labels, old callers): as routed
    assert r.kind_of(hazards, edges, "counter") == ["named_edge", "tipped", "edge"]


def test_a_task_tells_the_reader_its_edge_and_table_words():
    from robo_prm.envs.task import load_task

    text = load_task("reach_tool").text
    assert text.edges == ("front edge", "back edge", "left edge", "right edge") and text.table == "table"
    r = HazardReader.load(shipped_reader_folder())  # "side" alone sent this wording to named_edge
    assert r.kind_of(["the vase is lying on its side"], ("near side", "far side", "left side", "right side"),
                     "workbench") == ["tipped"]
