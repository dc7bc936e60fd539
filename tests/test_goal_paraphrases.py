"""Goal paraphrases for the score head's labels (robo_prm/finetune/goal_paraphrases.py)."""
from __future__ import annotations

import re

from robo_prm.envs.generate import load_data
from robo_prm.finetune.goal_paraphrases import GoalParaphraser, goal_bank, paraphrased_labels
from robo_prm.finetune.labels import Label

FIELDS = {"obj": "claw hammer", "target": "green tray", "table": "workbench", "edge": "front lip"}


def _goals(split: str) -> dict[str, list[str]]:
    return {family: [t["text"] for t in templates if t["split"] == split]
            for family, templates in load_data()["phrasing"]["goal"].items()}


def test_every_train_goal_is_reworded_within_its_family_with_its_own_words():
    para = GoalParaphraser(seed=0)
    bank = goal_bank()
    for family, templates in _goals("train").items():
        for t in templates:
            goal = t.format(**FIELDS)
            new = para(goal)
            assert new is not None and new != goal
            assert para.family_and_fields(goal)[0] == family
            assert any(new == (o.format(**FIELDS)[0].upper() + o.format(**FIELDS)[1:]) for o in bank[family])
            assert "claw hammer" in new  # the object keeps its name


def test_the_goal_bank_keeps_the_heldout_goals_words_out():
    heldout = [t for ts in _goals("heldout").values() for t in ts]
    words = {"stow", "relocate", "shove", "approach", "untouched", "resting"}
    assert all(any(w in t.lower() for w in words) or "or more" in t or "open the gripper" in t for t in heldout)
    for lines in goal_bank().values():
        for line in lines:
            low = line.lower()
            assert not any(re.search(rf"\b{w}\b", low) for w in words) and "or more" not in low
            assert "open the gripper" not in low and line not in heldout


def test_only_train_labels_of_generated_goals_get_copies():
    text = {"background": "b", "goal": "Put the mallet down in the blue bin and release it.", "dimensions": ["d"]}
    labels = [Label(task="gen_a", scene="s1", target=3.0, task_text=text, split="train"),
              Label(task="gen_a", scene="s2", target=5.0, task_text=text, split="heldout"),
              Label(task="reach_tool", scene="s3", target=5.0, task_text={**text, "goal": "Touch the hammer."}, split="train")]
    copies = paraphrased_labels(labels, copies=2, seed=1)
    assert [c.scene for c in copies] == ["s1", "s1"] and all(c.task == "gen_a" and c.target == 3.0 for c in copies)
    assert all(c.task_text["goal"] != text["goal"] and "mallet" in c.task_text["goal"] for c in copies)
    assert [c.variant for c in copies] == ["orig+goal0", "orig+goal1"]
    assert labels[0].task_text["goal"] == text["goal"]  # the label itself is left as it was
    assert paraphrased_labels(labels, copies=0) == []
