"""Caption → facts (describe/parse.py) and text → frame retrieval by the captioner's likelihood
(perception/retrieve.py): the parser inverts the renderer on real rollouts of every shipped task and on random
facts; the retriever ranks the frame whose heads say a caption above the frames whose heads say another."""
from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from robo_prm.describe.facts import BUCKETS, EDGE_NAMES, QUADRANTS, GripperFacts, ObjectFacts, SceneFacts
from robo_prm.describe.parse import CaptionParser, parser_for
from robo_prm.describe.render import render
from robo_prm.envs.experts import ScriptedExpert
from robo_prm.envs.scene import CONTAINERS, OBJECT_KIND
from robo_prm.envs.task import load_task
from robo_prm.perception.retrieve import CaptionRetriever, milestone_log_prob, slot_classes
from robo_prm.perception.slots import encode, slot_sizes

SHIPPED = ["reach_tool", "push_tool_from_edge", "place_cup_in_bin", "tidy_table"]


def _stated(f: SceneFacts) -> SceneFacts:
    """What the text says: a held or lifted object's sentence does not say whether it stands upright."""
    return replace(f, objects=tuple(replace(o, upright=True) if o.place in ("held", "lifted") else o for o in f.objects))


@pytest.mark.parametrize("task_name", SHIPPED)
def test_parser_inverts_the_state_captions_of_expert_and_perturbed_rollouts(make_env, task_name):
    env = make_env(task_name)
    task, parse = env.unwrapped.task, parser_for(task_name)
    seen = 0
    for seed, perturb in ((0, 0.0), (1, 0.5)):
        _, info = env.reset(seed=seed)
        expert = ScriptedExpert(env, perturb=perturb, seed=seed)
        for _ in range(80):
            _, _, term, trunc, info = env.step(expert())
            d = info["description"]
            facts = parse(d.text)
            assert facts is not None, d.text
            assert render(facts, task.word)[0] == d.text
            seen += 1
            if term or trunc:
                break
    assert seen > 10


def _random_facts(task, rng: random.Random) -> SceneFacts:
    movable = task.movable
    if rng.random() < 0.3:
        g = GripperFacts(False, rng.choice(movable), None, None, None)
    else:
        relation = rng.choice(("at", "above", "distance"))
        g = GripperFacts(rng.random() < 0.5, None, rng.choice(movable), relation, None if relation == "at" else rng.choice(BUCKETS))
    objects = []
    for sim in movable:
        place = rng.choice(("held", "fallen", "in", "lifted", "near_edge", "middle", "quadrant"))
        f = {"sim": sim, "place": place, "moving": rng.random() < 0.3,
             "upright": rng.random() < 0.5 if OBJECT_KIND[sim] == "fragile" else True}
        if sim in task.moved_objects and rng.random() < 0.5:
            f["moved"] = rng.choice(BUCKETS[1:])
        if place in ("held", "lifted"):
            f["bucket"] = rng.choice(BUCKETS)
            if rng.random() < 0.5:
                f |= {"edge": rng.choice(EDGE_NAMES), "edge_gap": rng.choice(("beyond",) + BUCKETS)}
            if sim in task.carry_targets:
                f |= {"target": task.carry_targets[sim], "target_gap": rng.choice(("over",) + BUCKETS)}
        elif place == "in":
            f["container"] = rng.choice(CONTAINERS)
        elif place == "near_edge":
            f |= {"edge": rng.choice(EDGE_NAMES), "bucket": rng.choice(BUCKETS)}
        elif place == "quadrant":
            f["quadrant"] = rng.choice(QUADRANTS)
        objects.append(ObjectFacts(**f))
    total = len(task.milestone_checks)
    return SceneFacts(g, tuple(objects), rng.randint(0, total) if total else None, total or None)


# a user's task file whose checks ask whether the glass cup has moved (its captions say how far)
MOVED_TASK = str(Path(__file__).parent / "data" / "screwdriver_off_the_lip.yaml")


@pytest.mark.parametrize("task_name", SHIPPED + [MOVED_TASK])
def test_parser_recovers_random_facts(task_name):
    task, rng = load_task(task_name), random.Random(0)
    parse = CaptionParser(task)
    assert task_name != MOVED_TASK or task.moved_objects == ("cup0",)
    for _ in range(300):
        facts = _random_facts(task, rng)
        assert parse(render(facts, task.word)[0]) == _stated(facts)


def test_parser_rejects_text_the_renderer_cannot_write():
    parse = parser_for("place_cup_in_bin")
    good = render(_random_facts(parse.task, random.Random(3)), parse.task.word)[0]
    assert parse(good) is not None
    for bad in ("", "Put the cup in the bin.", good.replace("The gripper", "A gripper"), good + " The sky is blue.",
                good.replace("Milestones reached", "Milestones")):
        assert parse(bad) is None, bad


def test_a_carried_glass_leaves_upright_open_and_a_standing_one_states_it():
    parse = parser_for("place_cup_in_bin")
    task = parse.task
    g = GripperFacts(False, "cup0", None, None, None)
    held = SceneFacts(g, (ObjectFacts("cup0", "held", bucket="5 cm", upright=False, target="left_bin", target_gap="10 cm"),))
    assert slot_classes(parse.readings(render(held, task.word)[0]))["cup0.upright"] == (0, 1)  # either: no evidence
    tipped = SceneFacts(GripperFacts(True, None, "cup0", "distance", "10 cm"), (ObjectFacts("cup0", "middle", upright=False),))
    assert slot_classes(parse.readings(render(tipped, task.word)[0]))["cup0.upright"] == (0,)


def test_milestone_log_prob_is_a_distribution_over_the_count():
    logits = np.random.default_rng(0).normal(size=(7, 4))
    total = np.logaddexp.reduce([milestone_log_prob(logits, k) for k in range(5)], axis=0)
    assert np.allclose(total, 0.0)


class _Net:
    class cfg:
        predicate_keys = ["reach_tool:success", "reach_tool:milestone/close_to_hammer"]


def _outputs_saying(facts_per_frame: list[SceneFacts], milestone_logits: list[float]) -> dict[str, np.ndarray]:
    """Head outputs of a model that is sure of each frame's facts (logit 4 on the true class, 0 elsewhere)."""
    out = {f"slot/{name}": np.zeros((len(facts_per_frame), n)) for name, n in slot_sizes().items()}
    for i, f in enumerate(facts_per_frame):
        for name, c in encode(f).items():
            if c >= 0:
                out[f"slot/{name}"][i, c] = 4.0
    preds = np.zeros((len(facts_per_frame), 2))
    preds[:, 1] = milestone_logits
    return out | {"preds": preds, "embed": np.eye(len(facts_per_frame), 4)}


def test_retriever_ranks_the_frame_that_says_the_caption_first():
    task = load_task("reach_tool")
    far = SceneFacts(GripperFacts(True, None, "tool0", "distance", "20 cm"), (ObjectFacts("tool0", "middle"),), 0, 1)
    near = SceneFacts(GripperFacts(True, None, "tool0", "distance", "5 cm"), (ObjectFacts("tool0", "middle"),), 1, 1)
    near_closed = replace(near, gripper=replace(near.gripper, opened=False))
    frames = [far, near_closed, near]
    retriever = CaptionRetriever(_Net(), _outputs_saying(frames, [-3.0, 3.0, 3.0]), ["reach_tool"] * 3)
    for i, f in enumerate(frames):
        assert retriever.search(render(f, task.word)[0], k=3)[0] == i
    # the milestone line counts: the same slots with the milestone said unreached prefer the frame whose head agrees
    unreached = render(replace(near, milestones_reached=0), task.word)[0]
    ll = retriever.log_likelihood(unreached)
    assert ll[2] < retriever.log_likelihood(render(near, task.word)[0])[2]
    # a frame of another task cannot say a reach_tool caption; text no renderer writes scores -inf without a CLIP model
    other = CaptionRetriever(_Net(), _outputs_saying(frames, [0.0] * 3), ["reach_tool", "push_tool_from_edge", "reach_tool"])
    assert np.isneginf(other.log_likelihood(render(far, task.word)[0])[1])
    scores, by_captioner = retriever.scores("a hammer somewhere")
    assert np.isneginf(scores).all() and by_captioner


def test_partial_captions_state_only_their_sentences():
    parse = parser_for("tidy_table")
    word = parse.task.word
    cup = word("cup0")
    fallen = f"The {cup} has fallen off the table. It is moving fast."
    assert parse(fallen) is None  # not a whole caption
    r = parse.readings(fallen, partial=True)
    assert r.gripper is None and r.milestones is None and [o[0].sim for o in r.objects] == ["cup0"]
    assert r.objects[0][0].place == "fallen" and r.objects[0][0].moving
    assert set(slot_classes(r)) == {"cup0.place", "cup0.upright", "cup0.moving"}
    # an object said twice, a sentence of no task, an 'It …' sentence with nothing before it: no reading
    for bad in (fallen + " " + fallen, f"The {cup} flies.", "It is moving fast."):
        assert parse.readings(bad, partial=True) is None, bad


def test_a_partial_query_scores_every_task_that_can_say_it():
    tidy, reach = load_task("tidy_table"), load_task("reach_tool")
    frames = [SceneFacts(GripperFacts(True, None, "tool0", "distance", "20 cm"), (ObjectFacts("tool0", "middle"),), 0, 1),
              SceneFacts(GripperFacts(True, None, "tool0", "distance", "20 cm"), (ObjectFacts("tool0", "fallen"),), 0, 1)]
    retriever = CaptionRetriever(_Net(), _outputs_saying(frames, [0.0, 0.0]), ["reach_tool", "tidy_table"])
    assert tidy.word("tool0") == reach.word("tool0")  # both call tool0 the same
    query = f"The {tidy.word('tool0')} has fallen off the table."
    ll = retriever.log_likelihood(query)
    assert np.isfinite(ll).all() and ll[1] > ll[0]


def test_the_perception_benchmark_counts_a_hit_only_for_a_frame_with_exactly_the_caption(load_benchmark):
    """benchmarks/perception.py's search figures: every distinct caption a query, a hit when the best frame has it."""
    from types import SimpleNamespace

    b = load_benchmark("perception")
    task = load_task("reach_tool")
    near = SceneFacts(GripperFacts(True, None, "tool0", "distance", "5 cm"), (ObjectFacts("tool0", "middle"),), 1, 1)
    far = replace(near, gripper=replace(near.gripper, bucket="20 cm"), milestones_reached=0)
    # frames 0 and 1 truly show `near`, frame 2 `far`; the heads read frame 1 as `far`, unsure of its milestone
    said = [near, far, far]
    caps = np.array([render(f, task.word)[0] for f in (near, near, far)])
    held = SimpleNamespace(arrays={"caption": caps, "task": np.zeros(3, int)}, meta={"tasks": ["reach_tool"]})
    r = b.retrieval_by_caption(_outputs_saying(said, [3.0, 0.0, -3.0]), held, _Net())
    assert (r["queries"], r["text_to_image_recall@1"], r["text_to_image_recall@5"]) == (2, 1.0, 1.0)
    top = np.array([[1, 0, 2, 2, 2], [0, 1, 2, 2, 2]])  # the near caption's best frame is frame 1, the far one's frame 0
    assert b._recall(top, caps, sorted(set(caps))) == (0.5, 1.0)
