"""Frames for label-queue items that were saved without one: re-run the labelling episode and render it.

A label keeps the scene text, not the simulator state (a `SceneState` has no arm joint angles, so a state
cannot be restored). What it does keep is how its episode was made: `label auto` names each episode
`{base}/{variant}/{source}/{seed}`, and its rollouts are seeded and deterministic. So the labelling page
re-runs that episode once with rendering on and keeps the frames of the labelled steps.

Every rendered frame is checked against its label before it is shown: the re-simulated state must give the
label's progress (`rule_progress`) and, where the variant's words were found, the same scene text. A frame
that does not match (a changed task file, another MuJoCo build) is refused rather than shown as the scene.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from robo_prm.finetune.labels import Label, Variant, make_variant, task_variants

log = logging.getLogger(__name__)
SOURCES = ("scripted", "perturbed", "random")


@dataclass(frozen=True)
class EpisodeKey:
    """How `label auto` made a label's episode (parsed from `Label.episode`)."""

    base: str
    variant: str
    source: str
    seed: int
    split: str

    @staticmethod
    def of(lab: Label) -> EpisodeKey | None:
        parts = (lab.episode or "").split("/")
        if len(parts) != 4 or parts[2] not in SOURCES or not parts[3].lstrip("-").isdigit():
            return None
        return EpisodeKey(parts[0], parts[1], parts[2], int(parts[3]), lab.split)


def find_variant(key: EpisodeKey) -> tuple[Variant, bool]:
    """The variant the episode ran on, and whether its words are exactly the label's (a word swap paired with
    a random paraphrase depends on `label auto --seed`, which the label does not keep: a few seeds are tried;
    the simulator is the same for every variant of a base task, so the base text still renders it)."""
    for seed in range(4):
        for v in task_variants(key.base, key.split, seed=seed):
            if v.name == key.variant:
                return v, True
    return make_variant(key.base, "orig", key.split), False


def render_labelled_steps(key: EpisodeKey, labels: list[Label], size: int = 320) -> dict[int, np.ndarray | None]:
    """Frames (RGB uint8) of the labelled steps of one episode; None for a step whose state did not match."""
    from robo_prm.describe.state_captioner import StateCaptioner
    from robo_prm.envs.experts import PLANS
    from robo_prm.envs.rollout import rollout
    from robo_prm.envs.tidy_env import TidyTableEnv
    from robo_prm.finetune.label_rollouts import episode_policy

    variant, exact = find_variant(key)
    want = {lab.step: lab for lab in labels if lab.step is not None}
    caps = [StateCaptioner(variant.task, milestone_line=m) for m in (False, True)]
    out: dict[int, np.ndarray | None] = {}
    env = TidyTableEnv(variant.task, render_mode="rgb_array", width=size, height=size)
    try:
        plan = variant.plan or getattr(variant.task, "plan", None) or PLANS[variant.base]
        policy = episode_policy(env, key.source, key.seed, plan)

        def on_step(step):
            lab = want.get(step.t)
            if lab is not None:
                out[step.t] = env.render().copy() if _matches(lab, env.scene_state, caps, exact) else None
            return len(out) == len(want)  # stop once every labelled step is seen

        rollout(env, policy, key.seed, on_step=on_step)
    finally:
        env.close()
    missing = [s for s in want if out.get(s) is None]
    if missing:
        log.warning("%s/%s/%s/%d: steps %s did not reproduce their labels; no frame shown for them",
                    key.base, key.variant, key.source, key.seed, missing)
    return out


def _matches(lab: Label, state, caps, exact: bool) -> bool:
    descs = [cap(state) for cap in caps]
    if exact and lab.scene not in {d.text for d in descs}:
        return False
    if lab.rule_progress is None:
        return exact
    return abs(float(descs[0].rule_progress or 0.0) - float(lab.rule_progress)) < 1e-6
