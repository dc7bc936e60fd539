"""Copied reasons (robo_prm/judge/copy_reason.py): the scene's sentences as units, the likeliest two in the scene's
order; and the reason checks that tell a copied reason from a free one (grounded, absence claims)."""
from __future__ import annotations

from robo_prm.judge.copy_reason import copied_reason, reason_units
from robo_prm.judge.faithfulness import check_reason, grounded, reason_faithfulness

SCENE = ("The gripper is closed around the hammer. The hammer is held 10 cm above the table. It is over the green "
         "tray. It is moving fast. The screwdriver lies on the table. The screwdriver lies on the table. "
         "Milestones reached: 1 of 5.")
FACTS = ("gripper_closed", "grasped(hammer)", "moving(hammer)", "on_table(screwdriver)")


def test_units_are_the_scene_sentences_each_standing_alone():
    assert reason_units(SCENE) == ["The gripper is closed around the hammer.", "The hammer is held 10 cm above the table.",
                                   "The hammer is over the green tray.", "The hammer is moving fast.",
                                   "The screwdriver lies on the table.", "Milestones reached: 1 of 5."]
    assert reason_units("It is far.") == ["It is far."] and reason_units("") == []


def test_the_likeliest_units_by_mean_log_probability_in_scene_order():
    units = ["A one.", "B two.", "C three."]
    lps = [[-1.0, -1.0], [-0.1, -5.0, -0.1, -0.1, -0.1, -0.1], [-0.5]]  # means -1.0, -0.9, -0.5
    assert copied_reason(units, lps) == "B two. C three."
    assert copied_reason(units, lps, k=1) == "C three."
    assert copied_reason(units[:1], [[]]) is None and copied_reason([], []) is None


def test_grounded_needs_every_sentence_to_be_the_scenes_or_a_claim_that_agrees():
    assert grounded("The hammer is over the green tray. Milestones reached: 1 of 5.", FACTS, SCENE)
    assert grounded("The gripper is holding the hammer.", FACTS, SCENE)  # a claim that agrees
    assert not grounded("The previous scene was not started.", FACTS, SCENE)  # claims nothing: faithful, not grounded
    assert check_reason("The previous scene was not started.", FACTS, SCENE)["faithful"]
    assert not grounded("The gripper is holding the screwdriver.", FACTS, SCENE) and not grounded(None, FACTS, SCENE)


def test_an_object_said_to_have_left_the_scene_contradicts_it():
    r = check_reason("The hammer is no longer in the scene.", FACTS, SCENE)
    assert not r["faithful"] and r["wrong"] == [(("hammer", "present"), False, True)]
    pooled = reason_faithfulness([("The hammer has disappeared.", FACTS, SCENE),
                                  ("The hammer is over the green tray.", FACTS, SCENE)])
    assert pooled["faithfulness"] == 0.5 and pooled["grounded"] == 0.5


def test_the_guard_keeps_copied_sentences_that_open_alike_and_drops_a_repeat():
    from robo_prm.judge.faithfulness import drop_contradictions

    two = "The hammer is held 10 cm above the table. The hammer is over the green tray."
    assert drop_contradictions(two, FACTS, SCENE) == (two, 0)  # the scene's own: not an echo of each other
    assert drop_contradictions(two + " The hammer is over the green tray.", FACTS, SCENE) == (two, 1)
    free = "The hammer is far away. The hammer is far away now."  # free text: the echo rule still applies
    assert drop_contradictions(free, FACTS, SCENE)[1] == 1


def test_a_held_objects_edge_distance_is_read_from_the_scene():
    text = "The gripper is closed around the hammer. The hammer is held 15 cm above the table, 5 cm from the front edge."
    facts = ("gripper_closed", "grasped(hammer)", "over_edge(hammer, front)")
    assert check_reason("The hammer is 5 cm from the front edge.", facts, text)["faithful"]
    assert not check_reason("The hammer is 20 cm from the front edge.", facts, text)["faithful"]
