"""Labels of generated tasks read with their goal in other words, to train the score head (`robo-prm finetune-head
--goal_paraphrases K`).

A generated task's goal is one of two or three train templates per family (configs/generator/phrasing.yaml), so a head
trained on those labels can learn the sentences rather than what they ask: on held-out wordings ("Stow the driver in
the blue crate, then open the gripper.") its ordering of successful episodes drops (docs/BENCHMARKS.md, "Judge on any
task file"). Each train-split label whose goal a train template made gets K copies with the goal re-worded by a line
of configs/reader/goals.yaml of the same family, filled with the words the template matched — same scene, same
target, same task name, so the task keeps its weight (`row_weights`) and its rows now speak in more ways. Held-out
labels are never re-worded.
"""
from __future__ import annotations

import dataclasses
import random
import re

from robo_prm.finetune.hazard_kinds import reader_yaml, template_fields, template_pattern


def goal_bank() -> dict[str, list[str]]:
    """configs/reader/goals.yaml: generator family → extra goal wordings."""
    return reader_yaml("goals")


class GoalParaphraser:
    """A generated goal in other words of its family, or None for a goal no train template made."""

    def __init__(self, seed: int = 0, bank: dict[str, list[str]] | None = None):
        from robo_prm.envs.generate import load_data

        self.rng = random.Random(seed)
        self.bank = bank if bank is not None else goal_bank()
        self.patterns: list[tuple[str, re.Pattern]] = []
        for family, templates in load_data()["phrasing"]["goal"].items():
            for t in templates:
                if t["split"] != "train" or family not in self.bank:
                    continue
                self.patterns.append((family, template_pattern(t["text"])))

    def family_and_fields(self, goal: str) -> tuple[str, dict[str, str]] | None:
        for family, rx in self.patterns:
            m = rx.match(goal)
            if m:
                return family, m.groupdict()
        return None

    def __call__(self, goal: str) -> str | None:
        found = self.family_and_fields(goal)
        if found is None:
            return None
        family, fields = found
        options = [o for o in self.bank[family] if all(f in fields for f in template_fields(o)) and o.format(**fields) != goal]
        if not options:
            return None
        text = self.rng.choice(options).format(**fields)
        return text[0].upper() + text[1:]


def paraphrased_labels(labels, copies: int, seed: int = 0) -> list:
    """`copies` re-worded copies of each train-split label whose goal a generator train template made (variant
    "<variant>+goal<k>"); the labels themselves are not returned."""
    if copies <= 0:
        return []
    para = GoalParaphraser(seed)
    out = []
    for lab in labels:
        if lab.split != "train" or not lab.task_text or not isinstance(lab.task_text.get("goal"), str):
            continue
        for k in range(copies):
            goal = para(lab.task_text["goal"])
            if goal is None:
                break
            out.append(dataclasses.replace(lab, task_text={**lab.task_text, "goal": goal},
                                           variant=f"{lab.variant or 'orig'}+goal{k}"))
    return out
