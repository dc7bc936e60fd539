"""How a labelling episode is rolled out: the policy of each label source (scripted, perturbed, random, nudged)
on a task variant's own simulator, and the states it passes through (robo_prm/finetune/labels.py describes them)."""
from __future__ import annotations

import numpy as np

ROLLOUT_SOURCES = ("scripted", "perturbed", "random", "nudged")  # the ones `label auto` rolls out


def episode_policy(env, source: str, seed: int, plan: list, perturb: tuple[float, float] = (0.3, 0.6)):
    """The labelling policy of one episode: the scripted expert (with the variant's plan: variants have their
    own names), the perturbed expert, or uniform random actions."""
    from robo_prm.envs.experts import ScriptedExpert
    from robo_prm.envs.rollout import RandomPolicy

    rng = np.random.default_rng(seed)
    p = float(rng.uniform(*perturb))  # drawn for every source: the random policy's stream continues after it
    if source == "scripted":
        return ScriptedExpert(env, seed=seed, plan=plan)
    if source in ("perturbed", "nudged"):
        return ScriptedExpert(env, noise=0.1, perturb=p, seed=seed + 1, plan=plan)
    if source == "random":
        return RandomPolicy(rng)
    raise ValueError(f"unknown label source '{source}' (have: {', '.join(ROLLOUT_SOURCES)})")


def rollout_states(variant, source: str, seed: int, perturb=(0.3, 0.6)) -> list:
    """SceneStates of one episode of `source` policy on the variant's task (its own simulator semantics)."""
    from robo_prm.envs.experts import PLANS
    from robo_prm.envs.rollout import rollout
    from robo_prm.envs.tidy_env import TidyTableEnv

    env = TidyTableEnv(variant.task)
    try:
        states: list = []
        plan = variant.plan or variant.task.plan or PLANS[variant.base]  # a variant's own words, else the base task's
        policy = episode_policy(env, source, seed, plan, perturb)
        nudge = _nudge(env, variant.task, seed) if source == "nudged" else (lambda t: None)
        rollout(env, policy, seed, on_step=lambda step: states.append(nudge(step.t) or env.scene_state))
        return states
    finally:
        env.close()


def _nudge(env, task, seed: int):
    """The `nudged` source's disturbance: once, at one of the first five steps, one of the
    task's objects lying on the table slides 1–15 cm (still standing if it stood; it may end near an edge or
    off the table). Without it "has the cup been moved?" has almost no positives whose object still stands in its
    place (32 of 1,061 training rows of the generated labels, 2 of them standing), and the hazard reader read
    "stands in the middle" as "not moved"."""
    rng = np.random.default_rng(seed + 7)
    when = int(rng.integers(1, 6))  # early: a scripted episode of a short task is over in ~8 steps
    who = str(rng.choice(task.movable))
    r, a = rng.uniform(0.01, 0.15), rng.uniform(0.0, 2.0 * np.pi)

    def at(t: int):
        if t == when and env.scene_state.objects[who].fingers_touching == 0:  # never pulled out of the gripper
            return env.shift(who, (r * np.cos(a), r * np.sin(a)))
        return None
    return at
