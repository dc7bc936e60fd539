"""The state describer: frozen texts of seeded and hand-placed scenes, equal states → equal text,
distance words. The texts are what the LLM judge reads and what the judgement cache keys on, so a
change here is a change of the judge's input: update the snapshots on purpose, never casually."""
from __future__ import annotations

import mujoco
import numpy as np
import pytest

import robo_prm
from robo_prm.describe.state_captioner import StateCaptioner, describe_state, distance_words
from robo_prm.envs.experts import ScriptedExpert
from robo_prm.envs.state import SceneState, snapshot
from robo_prm.envs.task import load_task

# reset(seed=k) → description text, per shipped task. Generated once, read, then frozen.
# One object placed by hand per task, the gripper where reset leaves it (1.342, 0.749, 0.535), closed.
# Expected words worked out from the bucket rules (distance_words, NEAR_EDGE_M, the middle zone
# x 1.22–1.42, y 0.62–0.88), not copied from a run.
PLACED_PER_TASK = [
    # hammer 12 cm away diagonally (horizontal 4 cm, so not "above"): the 15 cm bucket; in the middle zone
    ("reach_tool", "tool0", (1.30, 0.75, 0.42),
     "The gripper is closed, 15 cm from the hammer. The hammer lies in the middle of the table. Milestones reached: 0 of 1.",
     ("gripper_closed", "distance(gripper, hammer) = 15 cm", "in_zone(hammer, middle)")),
    # straight below the gripper, 11.5 cm down: "above", 15 cm; within 12 cm, so close_to_hammer holds
    ("reach_tool", "tool0", (1.342, 0.749, 0.42),
     "The gripper is closed, 15 cm above the hammer. The hammer lies in the middle of the table. Milestones reached: 1 of 1.",
     ("gripper_closed", "above(gripper, hammer)", "in_zone(hammer, middle)")),
    # 2.5 cm from the front edge (x 1.55); the gripper 21.6 cm away: the 30 cm bucket
    ("push_tool_from_edge", "tool0", (1.525, 0.75, 0.42),
     "The gripper is closed, 30 cm from the hammer. The hammer lies 3 cm from the front edge of the table. Milestones reached: 0 of 2.",
     ("gripper_closed", "distance(gripper, hammer) = 30 cm", "near_edge(hammer, front)")),
    # y 0.90 is past the middle zone, x 1.30 behind its centre: the back right part; 20 cm from the gripper
    ("place_cup_in_bin", "cup0", (1.30, 0.90, 0.44),
     "The gripper is closed, 20 cm from the glass cup. The glass cup stands on the back right part of the table. "
     "Milestones reached: 0 of 5.",
     ("gripper_closed", "distance(gripper, glass cup) = 20 cm", "on_table(glass cup, back-right)")),
]


@pytest.mark.parametrize("task, sim, pos, text, facts", PLACED_PER_TASK)
def test_hand_placed_scene_per_task(make_env, task, sim, pos, text, facts):
    env = make_env(task)
    env.reset(seed=0)
    s = env.unwrapped.place(sim, pos)
    d = env.describer(s)
    assert (d.text, d.facts) == (text, facts)


@pytest.mark.parametrize("task", ["reach_tool", "push_tool_from_edge", "place_cup_in_bin", "tidy_table"])
def test_reset_description_agrees_with_the_task_status(make_env, task):
    env = make_env(task)
    _, info = env.reset(seed=0)
    d, status = info["description"], info["status"]
    t, s = env.unwrapped.task, env.unwrapped.scene_state
    assert d == env.describer(s)  # the wrapper's description is the describer's, of the state the env holds
    assert d.hazards == status.hazards == t.active_hazards(s) and d.rule_progress == status.rule_progress
    assert d.milestones_reached == status.reached == 0 and d.milestones_total == len(t.milestone_checks)


# ---- hand-placed scenes on the tidy table (all three objects) ------------------------------------
LAYOUT = {"tool0": (1.35, 0.70, 0.42), "tool1": (1.15, 0.90, 0.419), "cup0": (1.35, 0.82, 0.44)}
PLACED = {
    "layout": (
        {},
        "The gripper is closed, 15 cm from the glass cup. The hammer lies in the middle of the table. "
        "The screwdriver lies 10 cm from the back edge of the table. The glass cup stands in the middle of the table. "
        "Milestones reached: 0 of 5.",
    ),
    "hammer at the front edge": (
        {"tool0": (1.525, 0.75, 0.42)},
        "The gripper is closed, 15 cm from the glass cup. The hammer lies 3 cm from the front edge of the table. "
        "The screwdriver lies 10 cm from the back edge of the table. The glass cup stands in the middle of the table. "
        "Milestones reached: 0 of 5.",
    ),
    "cup in the bin": (
        {"cup0": (1.22, 0.52, 0.446)},
        "The gripper is closed, 15 cm from the hammer. The hammer lies in the middle of the table. "
        "The screwdriver lies 10 cm from the back edge of the table. The glass cup stands in the blue bin. "
        "Milestones reached: 0 of 5.",
    ),
    "tools in the tray": (
        {"tool0": (1.22, 0.95, 0.426), "tool1": (1.22, 1.01, 0.425)},
        "The gripper is closed, 15 cm from the glass cup. The hammer lies in the green tray. "
        "The screwdriver lies in the green tray. The glass cup stands in the middle of the table. "
        "Milestones reached: 4 of 5.",
    ),
    "cup fell": (
        {"cup0": (1.75, 0.75, 0.04)},
        "The gripper is closed, 15 cm from the hammer. The hammer lies in the middle of the table. "
        "The screwdriver lies 10 cm from the back edge of the table. The glass cup has fallen off the table. "
        "Milestones reached: 0 of 5.",
    ),
    "cup in the air": (
        {"cup0": (1.35, 0.82, 0.54)},
        "The gripper is closed, 10 cm from the glass cup. The hammer lies in the middle of the table. "
        "The screwdriver lies 10 cm from the back edge of the table. The glass cup is in the air, 15 cm above the table. "
        "It is far from the blue bin. Milestones reached: 0 of 5.",
    ),
    "quadrants": (
        {"tool0": (1.42, 0.60, 0.42), "tool1": (1.18, 0.95, 0.419), "cup0": (1.20, 0.62, 0.44)},
        "The gripper is closed, 30 cm from the hammer. The hammer lies on the front left part of the table. "
        "The screwdriver lies in the green tray. The glass cup stands on the back left part of the table. "
        "Milestones reached: 0 of 5.",
    ),
}


@pytest.fixture(scope="module")
def tidy():
    env = robo_prm.make_env("tidy_table")
    tidy = env.unwrapped
    tidy.captioner = StateCaptioner(tidy.task)  # the describer DescribeWrapper would use
    yield tidy
    env.close()


def placed(env, **moves) -> SceneState:
    env.reset(seed=0)
    for name, pos in {**LAYOUT, **moves}.items():
        env.place(name, pos)
    return env.scene_state


@pytest.mark.parametrize("case", list(PLACED))
def test_placed_snapshot(tidy, case):
    moves, text = PLACED[case]
    assert tidy.captioner(placed(tidy, **moves)).text == text


def test_placed_facts_and_hazards(tidy):
    d = tidy.captioner(placed(tidy, tool0=(1.525, 0.75, 0.42), cup0=(1.75, 0.75, 0.04)))
    assert d.facts == (
        "gripper_closed",
        "distance(gripper, hammer) = 30 cm",
        "near_edge(hammer, front)",
        "near_edge(screwdriver, back)",
        "fallen(glass cup)",
    )
    assert d.hazards == ("tool_near_edge", "something_fell")


def test_tipped_cup(tidy):
    placed(tidy)
    q = tidy.model.joint("cup0:joint").qposadr[0]
    tidy.data.qpos[q : q + 3] = (1.35, 0.82, 0.424)
    tidy.data.qpos[q + 3 : q + 7] = (np.cos(np.pi / 4), np.sin(np.pi / 4), 0.0, 0.0)
    mujoco.mj_forward(tidy.model, tidy.data)
    d = tidy.captioner(snapshot(tidy.model, tidy.data))
    assert "The glass cup lies tipped over in the middle of the table." in d.text
    assert "tipped(glass cup)" in d.facts and d.hazards == ("cup_tipped",)
    tidy.data.qpos[q : q + 3] = (1.75, 0.75, 0.04)  # on the floor, on its side: both hazards, both said
    mujoco.mj_forward(tidy.model, tidy.data)
    d = tidy.captioner(snapshot(tidy.model, tidy.data))
    assert "The glass cup has fallen off the table and lies tipped over." in d.text
    assert set(d.hazards) == {"cup_tipped", "something_fell"}


def test_place_words_come_from_the_task(make_env):
    """push_tool_from_edge does not name the bin, so the describer falls back to its sim name."""
    env = make_env("push_tool_from_edge")
    env.reset(seed=0)
    s = env.unwrapped.place("tool0", (1.22, 0.52, 0.426))
    assert env.describer(s).text == "The gripper is closed, 30 cm from the hammer. The hammer lies in the left bin. Milestones reached: 2 of 2."


# ---- a scripted episode: held objects, movement, milestones ------------------------------------------
def test_expert_episode_reads_as_a_story(make_env):
    env = make_env("place_cup_in_bin")
    env.reset(seed=0)
    expert = ScriptedExpert(env)
    texts = []
    for _ in range(80):
        _, _, terminated, truncated, info = env.step(expert())
        texts.append(info["description"].text)
        if terminated or truncated:
            break
    assert terminated
    joined = " | ".join(texts)
    for sentence in (
        "The gripper is open, at the glass cup.",
        "The gripper is closed around the glass cup.",
        "The glass cup is held 20 cm above the table.",
        "Milestones reached: 5 of 5.",
    ):
        assert sentence in joined
    assert "The glass cup stands in the blue bin." in texts[-1]
    # milestones, as the describer reports them, never go backwards on a clean expert run
    counts = [int(t.split("Milestones reached: ")[1].split(" ")[0]) for t in texts]
    assert counts == sorted(counts)


# ---- equal states → equal text -----------------------------------------------------------------------
def test_same_seed_same_description(make_env):
    a, b = make_env("tidy_table"), make_env("tidy_table")
    da, db = a.reset(seed=5)[1]["description"], b.reset(seed=5)[1]["description"]
    assert da == db  # text, facts, milestones, hazards, rule progress (features are not compared)
    np.testing.assert_array_equal(da.features, db.features)


def test_nearby_states_share_a_text(tidy):
    one = tidy.captioner(placed(tidy, cup0=(1.35, 0.82, 0.44))).text
    two = tidy.captioner(placed(tidy, cup0=(1.36, 0.81, 0.44), tool0=(1.34, 0.71, 0.42))).text
    assert one == two


def test_captioner_is_a_pure_function_of_the_state(tidy):
    s = placed(tidy, tool0=(1.525, 0.75, 0.42))
    fresh = StateCaptioner(tidy.task)(s)
    assert fresh == tidy.captioner(s) == describe_state(tidy.task, s)
    assert fresh == StateCaptioner(load_task("tidy_table"))(s)


def test_milestone_line_can_be_hidden(tidy):
    s = placed(tidy)
    hidden = StateCaptioner(tidy.task, milestone_line=False)(s)
    assert "Milestones" not in hidden.text
    assert hidden.text == PLACED["layout"][1].removesuffix(" Milestones reached: 0 of 5.")
    assert hidden.milestones_reached == 0 and hidden.milestones_total == 5  # still there for the rules judge


def test_features_are_the_task_positions(make_env):
    env = make_env("place_cup_in_bin")
    _, info = env.reset(seed=0)
    s = env.unwrapped.scene_state
    np.testing.assert_allclose(
        info["description"].features, np.concatenate([s.gripper_pos, [s.gripper_width], s.objects["cup0"].pos]), rtol=1e-6
    )


# ---- distance words ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "metres, words",
    [
        (0.0, "touching"),
        (0.019, "touching"),
        (0.021, "3 cm"),
        (0.03, "3 cm"),
        (0.034, "5 cm"),
        (0.05, "5 cm"),
        (0.07, "10 cm"),
        (0.10, "10 cm"),
        (0.12, "15 cm"),
        (0.18, "20 cm"),
        (0.25, "30 cm"),
        (0.30, "30 cm"),
        (0.31, "far"),
        (3.0, "far"),
    ],
)
def test_distance_words(metres, words):
    assert distance_words(metres) == words


def test_distance_words_are_monotone():
    order = ["touching", "3 cm", "5 cm", "10 cm", "15 cm", "20 cm", "30 cm", "far"]
    ranks = [order.index(distance_words(d)) for d in np.linspace(0.0, 0.5, 501)]
    assert ranks == sorted(ranks) and set(ranks) == set(range(len(order)))


# ---- "touching" must read well in every sentence -------------
def test_object_very_close_to_an_edge_reads_well(tidy):
    text = tidy.captioner(placed(tidy, tool0=(1.535, 0.75, 0.42))).text
    assert "touching from" not in text


def test_object_held_low_reads_well(tidy):
    # what the tidy_table expert produces at its screwdriver grasp (seed 0, step 55): rebuild it
    # deterministically from the state the describer sees.
    s = placed(tidy)
    objects = dict(s.objects)
    o = objects["tool1"]
    objects["tool1"] = type(o)(pos=o.pos, vel=o.vel, up=o.up, quat=o.quat, fingers_touching=2)
    held = SceneState(gripper_pos=o.pos.copy(), gripper_vel=s.gripper_vel, gripper_width=0.04, objects=objects)
    assert "held touching above" not in tidy.captioner(held).text


def test_facts_agree_with_text_while_holding(tidy):
    s = placed(tidy)
    objects = dict(s.objects)
    o = objects["cup0"]
    objects["cup0"] = type(o)(pos=o.pos, vel=o.vel, up=o.up, quat=o.quat, fingers_touching=2)
    held = SceneState(gripper_pos=o.pos.copy(), gripper_vel=s.gripper_vel, gripper_width=0.042, objects=objects)
    d = tidy.captioner(held)
    assert d.text.startswith("The gripper is closed around the glass cup.")
    assert "gripper_open" not in d.facts


def test_a_carried_object_says_which_edge_it_is_near(tidy):
    """near_edge(obj) holds for an object held low over the table near an edge, so the text must say so; past
    the edge it says that instead; over the middle nothing is added."""
    s = placed(tidy, cup0=(1.52, 0.75, 0.45))  # near the front edge, just above the table
    objects = dict(s.objects)
    o = objects["cup0"]
    objects["cup0"] = type(o)(pos=o.pos, vel=o.vel, up=o.up, quat=o.quat, fingers_touching=2)
    held = SceneState(gripper_pos=o.pos.copy(), gripper_vel=s.gripper_vel, gripper_width=0.042, objects=objects)
    d = tidy.captioner(held)
    assert "The glass cup is held 5 cm above the table, 5 cm from the front edge." in d.text
    assert "over_edge(glass cup, front)" in d.facts and "grasped(glass cup)" in d.facts
    past = placed(tidy, cup0=(1.60, 0.75, 0.45))
    objects["cup0"] = type(o)(pos=past.objects["cup0"].pos, vel=o.vel, up=o.up, quat=o.quat, fingers_touching=2)
    d = tidy.captioner(SceneState(gripper_pos=objects["cup0"].pos.copy(), gripper_vel=s.gripper_vel,
                                  gripper_width=0.042, objects=objects))
    assert "The glass cup is held 5 cm above the table, out past the front edge." in d.text
    middle = placed(tidy, cup0=(1.30, 0.75, 0.45))
    objects["cup0"] = type(o)(pos=middle.objects["cup0"].pos, vel=o.vel, up=o.up, quat=o.quat, fingers_touching=2)
    d = tidy.captioner(SceneState(gripper_pos=objects["cup0"].pos.copy(), gripper_vel=s.gripper_vel,
                                  gripper_width=0.042, objects=objects))
    assert "The glass cup is held 5 cm above the table." in d.text and not any("over_edge" in f for f in d.facts)


def _held(tidy, sim: str, xyz) -> SceneState:
    s = placed(tidy, **{sim: xyz})
    objects = dict(s.objects)
    o = objects[sim]
    objects[sim] = type(o)(pos=o.pos, vel=o.vel, up=o.up, quat=o.quat, fingers_touching=2)
    return SceneState(gripper_pos=o.pos.copy(), gripper_vel=s.gripper_vel, gripper_width=0.042, objects=objects)


def test_a_carried_object_says_how_far_its_container_is(tidy):
    """tidy_table puts the cup in the bin and the tools in the tray: while carried, each says how far its own
    container is (the goal's "how close" dimension), "over" once above it; objects the task puts nowhere say nothing."""
    assert tidy.task.carry_targets == {"tool0": "tray", "tool1": "tray", "cup0": "left_bin"}
    d = tidy.captioner(_held(tidy, "cup0", (1.22, 0.72, 0.55)))  # 20 cm to the bin's side of it
    assert "The glass cup is held 20 cm above the table. It is 20 cm from the blue bin." in d.text
    assert "target_gap(glass cup, blue bin) = 20 cm" in d.facts
    d = tidy.captioner(_held(tidy, "cup0", (1.22, 0.53, 0.55)))
    assert "It is over the blue bin." in d.text
    d = tidy.captioner(_held(tidy, "tool0", (1.22, 0.53, 0.55)))  # the hammer over the bin: its place is the tray
    assert "The hammer is held 20 cm above the table. It is far from the green tray." in d.text
    reach = robo_prm.make_env("reach_tool")
    assert reach.unwrapped.task.carry_targets == {}
    reach.close()


# ---- issue 13: renamed table, edges and middle; "moved" only where a task checks it -------------------------
RENAMED = """name: renamed
background: A hammer lies on the bench.
goal: Leave it.
dimensions: [where the hammer is]
objects: {tool0: hammer, table: bench, middle: painted square, back_edge: far side, front_edge: lip}
success: in_zone(hammer, painted_square)
"""


@pytest.mark.parametrize("pos, sentence", [
    ((1.32, 0.75, 0.42), "The hammer lies in the painted square."),  # the middle, renamed: no "of the bench"
    ((1.12, 0.75, 0.42), "The hammer lies 10 cm from the far side of the bench."),  # 7 cm from the back edge (x 1.05)
    ((1.54, 0.75, 0.42), "The hammer lies at the very lip of the bench."),  # 1 cm from the front edge: "touching"
    ((1.40, 0.95, 0.42), "The hammer lies on the front right part of the bench."),  # 15 cm from the front and right edges
    ((1.20, 0.75, 0.52), "The hammer is in the air, 15 cm above the bench."),  # 12 cm up, clear of the gripper
    # in the air near an edge: where it is over the table is said (an edge hazard holds for it)
    ((1.505, 0.75, 0.52), "The hammer is in the air, 15 cm above the bench, 5 cm from the lip."),
    ((1.75, 0.75, 0.02), "The hammer has fallen off the bench."),
])
def test_renamed_table_edges_and_middle(make_env, tmp_path, pos, sentence):
    path = tmp_path / "renamed.yaml"
    path.write_text(RENAMED)
    env = make_env(path)
    env.reset(seed=0)
    d = env.describer(env.unwrapped.place("tool0", pos))
    assert sentence in d.text and "table" not in d.text


def test_shipped_tasks_never_say_moved(make_env):
    """No shipped task checks `moved`, so their texts (what the shipped judge was trained on) stay as they were."""
    env = make_env("place_cup_in_bin")
    env.reset(seed=0)
    u = env.unwrapped
    start = u.scene_state.start_pos["cup0"]
    d = env.describer(u.place("cup0", start + np.array([0.0, 0.12, 0.0])))
    assert "moved" not in d.text and not any(f.startswith("moved") for f in d.facts)
    assert u.task.moved_objects == ()


def test_moved_far_reads_more_than_30_cm(make_env):
    from pathlib import Path

    env = make_env(Path(__file__).parent / "data" / "screwdriver_off_the_lip.yaml")  # checks moved(glass_cup, 0.03)
    env.reset(seed=0)
    u = env.unwrapped
    u.place("cup0", (1.12, 0.70, 0.44), as_start=True)
    d = env.describer(u.place("cup0", (1.12, 1.02, 0.44)))  # 32 cm along y
    assert "It has moved more than 30 cm from where it stood." in d.text and "moved(glass cup) = far" in d.facts
    d = env.describer(u.place("cup0", (1.12, 0.72, 0.44)))  # exactly 2 cm: from here on it is said, in the 3 cm bucket
    assert "It has moved 3 cm from where it stood." in d.text


class _Counting:
    """A describer that reads motion: its 'frame' is the env step it was rendered at, so what it is given is known."""

    needs_frame = True
    reads_previous = True

    def __init__(self):
        self.env, self.seen, self.renders = None, [], 0

    def render_frame(self, env):
        self.renders += 1
        return np.full((2, 2, 3), self.env._t, dtype=np.uint8)

    def describe_step(self, state, status, frame, previous=None):
        self.seen.append((int(frame[0, 0, 0]), None if previous is None else int(previous[0, 0, 0])))
        from robo_prm.types import SceneDescription

        return SceneDescription(text=str(len(self.seen)), facts=())


@pytest.mark.parametrize("every", [1, 4])
def test_a_motion_describer_gets_the_frame_of_the_step_before(every):
    """Each planned description comes with the frame rendered one step before it; the reset has none; with every 4
    one more frame is rendered per description, with every 1 none."""
    import robo_prm
    from robo_prm.describe import DescribeWrapper

    describer = _Counting()
    env = DescribeWrapper(robo_prm.make_env("reach_tool", render_mode="rgb_array", width=32, height=32), describer,
                          every=every)
    describer.env = env
    env.reset(seed=0)
    for _ in range(9):
        env.step(env.action_space.sample())
    env.close()
    planned = [t for t in range(1, 10) if t == 1 or t % every == 0]
    assert describer.seen == [(0, None)] + [(t, t - 1) for t in planned]
    assert describer.renders == 1 + len(planned) + (0 if every == 1 else len([t for t in planned if t > 1]))
