"""The predicate language on hand-placed states: every function, arithmetic, and/or/not,
the hazard checks a task builds from them, and the errors a bad expression gets."""
from __future__ import annotations

import mujoco
import numpy as np
import pytest

from robo_prm.envs.experts import ScriptedExpert
from robo_prm.envs.predicates import FUNCTIONS, PredicateError, compile_predicate
from robo_prm.envs.scene import OBJECT_REST_Z, PLACES, TABLE_TOP_Z, TABLE_X
from robo_prm.envs.state import SceneState, snapshot

TOP = TABLE_TOP_Z
HAMMER_Z = TOP + OBJECT_REST_Z["tool0"]  # 0.42: tool0's origin lying on the table
CUP_Z = TOP + OBJECT_REST_Z["cup0"]  # 0.44
BIN_FLOOR = 0.006
FRONT = TABLE_X[1]  # 1.55


@pytest.fixture(scope="module")
def tidy():
    """The tidy_table env: every object in play, words hammer, screwdriver, glass_cup, blue_bin, green_tray."""
    import robo_prm

    env = robo_prm.make_env("tidy_table")
    yield env.unwrapped
    env.close()


@pytest.fixture
def scene(tidy):
    """A known layout: hammer mid-table, screwdriver at the back, cup upright in the middle."""
    tidy.reset(seed=0)
    tidy.place("tool0", (1.35, 0.70, HAMMER_Z))
    tidy.place("tool1", (1.15, 0.90, TOP + OBJECT_REST_Z["tool1"]))
    tidy.place("cup0", (1.35, 0.82, CUP_Z))
    return tidy


def check(env, source: str, kind: str = "bool", state: SceneState | None = None):
    return compile_predicate(source, env.task.names, kind)(state or env.scene_state)


# ---- edges ------------------------------------------------------------------------------
def test_hammer_2cm_from_front_edge_is_near_edge(scene):
    s = scene.place("tool0", (FRONT - 0.02, 0.75, HAMMER_Z))
    assert check(scene, "near_edge(hammer, 0.05)", state=s)
    assert check(scene, "near_edge(tool0)", state=s)  # sim name, default 5 cm
    assert not check(scene, "near_edge(hammer, 0.01)", state=s)
    assert check(scene, "edge_distance(hammer)", "num", s) == pytest.approx(0.02, abs=1e-9)
    assert check(scene, "edge_distance(hammer) < 0.05", state=s)


def test_hammer_20cm_from_front_edge_is_not_near_edge(scene):
    s = scene.place("tool0", (FRONT - 0.20, 0.75, HAMMER_Z))
    assert not check(scene, "near_edge(hammer, 0.05)", state=s)
    assert check(scene, "edge_distance(hammer)", "num", s) == pytest.approx(0.20, abs=1e-9)


def test_push_task_edge_hazard_fires_only_near_the_edge(make_env):
    env = make_env("push_tool_from_edge")
    env.reset(seed=0)
    u = env.unwrapped
    near = u.place("tool0", (FRONT - 0.02, 0.75, HAMMER_Z))
    assert u.task.active_hazards(near) == ("tool_near_edge",)
    assert u.task.predicate_values(near)["hazard/tool_near_edge"] is True
    safe = u.place("tool0", (FRONT - 0.20, 0.75, HAMMER_Z))
    assert u.task.active_hazards(safe) == ()
    fell = u.place("tool0", (FRONT + 0.15, 0.75, 0.02))  # on the floor in front of the table
    assert u.task.active_hazards(fell) == ("tool_fell",)  # off the table is no longer "near the edge"


@pytest.mark.parametrize(
    "xy, edge_distance",
    [((1.50, 0.75), 0.05), ((1.10, 0.75), 0.05), ((1.30, 0.43), 0.03), ((1.30, 1.06), 0.04), ((1.58, 0.75), -0.03)],
)
def test_edge_distance_to_each_edge(scene, xy, edge_distance):
    s = scene.place("tool0", (*xy, HAMMER_Z))
    assert check(scene, "edge_distance(hammer)", "num", s) == pytest.approx(edge_distance, abs=1e-9)


# ---- containers, table, pose ---------------------------------------------------------------
def test_cup_inside_left_bin(scene):
    s = scene.place("cup0", (*PLACES["left_bin"].center, CUP_Z + BIN_FLOOR))
    assert check(scene, "inside(glass_cup, left_bin)", state=s)
    assert check(scene, "inside(cup0, blue_bin)", state=s)  # the task's word for the bin
    assert not check(scene, "inside(glass_cup, tray)", state=s)
    assert not check(scene, "in_zone(glass_cup, middle)", state=s)
    assert check(scene, "distance(glass_cup, left_bin)", "num", s) == pytest.approx(0.0, abs=1e-9)


def test_cup_beside_or_above_the_bin_is_not_inside(scene):
    cx, cy = PLACES["left_bin"].center
    beside = scene.place("cup0", (cx + 0.10, cy, CUP_Z))
    assert not check(scene, "inside(glass_cup, left_bin)", state=beside)
    above = scene.place("cup0", (cx, cy, CUP_Z + 0.10))
    assert not check(scene, "inside(glass_cup, left_bin)", state=above)
    assert check(scene, "near(glass_cup, left_bin, 0.05) and lifted(glass_cup, 0.02)", state=above)


def test_in_zone_middle(scene):
    s = scene.place("tool0", (*PLACES["middle"].center, HAMMER_Z))
    assert check(scene, "in_zone(hammer, middle)", state=s)
    s = scene.place("tool0", (1.15, 0.50, HAMMER_Z))
    assert not check(scene, "in_zone(hammer, middle)", state=s)


@pytest.mark.parametrize("pos", [(1.75, 0.75, 0.04), (FRONT + 0.05, 0.75, CUP_Z), (1.30, 1.20, 0.20)])
def test_cup_off_the_table(scene, pos):
    s = scene.place("cup0", pos)
    assert check(scene, "off_table(glass_cup)", state=s)
    assert not check(scene, "near_edge(glass_cup)", state=s)
    assert not check(scene, "in_zone(glass_cup, middle)", state=s)


def test_cup_on_the_table_is_not_off_it(scene):
    assert not check(scene, "off_table(glass_cup)")
    assert not check(scene, "off_table(hammer) or off_table(screwdriver)")


def test_cup_tipped_over(scene):
    assert check(scene, "upright(glass_cup)")
    assert check(scene, "upright(glass_cup)", state=scene.place("cup0", (1.35, 0.82, CUP_Z), yaw=1.3))  # yaw is irrelevant
    # lay the cup on its side: 90° about the world x axis, set straight into qpos
    qadr = scene.model.joint("cup0:joint").qposadr[0]
    scene.data.qpos[qadr : qadr + 3] = (1.35, 0.82, TOP + 0.024)
    scene.data.qpos[qadr + 3 : qadr + 7] = (np.cos(np.pi / 4), np.sin(np.pi / 4), 0.0, 0.0)
    mujoco.mj_forward(scene.model, scene.data)
    s = snapshot(scene.model, scene.data)
    assert abs(s.objects["cup0"].up[2]) < 1e-9
    assert not check(scene, "upright(glass_cup)", state=s)
    assert check(scene, "not upright(glass_cup)", state=s)
    assert scene.task.active_hazards(s) == ("cup_tipped",)
    # upside down is not upright either
    scene.data.qpos[qadr + 3 : qadr + 7] = (0.0, 1.0, 0.0, 0.0)
    mujoco.mj_forward(scene.model, scene.data)
    assert not check(scene, "upright(glass_cup)", state=snapshot(scene.model, scene.data))


def test_lifted_and_height(scene):
    assert not check(scene, "lifted(glass_cup)")
    assert check(scene, "height(glass_cup)", "num") == pytest.approx(0.0, abs=1e-9)
    s = scene.place("cup0", (1.35, 0.82, CUP_Z + 0.05))
    assert check(scene, "lifted(glass_cup)", state=s)  # default 2 cm
    assert check(scene, "lifted(glass_cup, 0.04)", state=s)
    assert not check(scene, "lifted(glass_cup, 0.06)", state=s)
    assert check(scene, "height(glass_cup)", "num", s) == pytest.approx(0.05, abs=1e-9)


def test_speed_of_a_resting_and_a_falling_object(scene):
    assert check(scene, "speed(hammer)", "num") == pytest.approx(0.0, abs=1e-9)
    scene.place("cup0", (1.35, 0.82, CUP_Z + 0.15))
    for _ in range(3):
        scene.step(np.array([0, 0, 0, 0], dtype=np.float32))
    assert check(scene, "speed(glass_cup)", "num") > 0.5  # falling: ~g·t after 0.12 s
    assert check(scene, "speed(glass_cup) > 0.5")


# ---- distances and arithmetic ---------------------------------------------------------------
def test_distances(scene):
    s = scene.scene_state
    hammer, cup, grip = s.objects["tool0"].pos, s.objects["cup0"].pos, s.gripper_pos
    assert check(scene, "distance(hammer, glass_cup)", "num") == pytest.approx(np.linalg.norm(hammer - cup))
    assert check(scene, "distance(gripper, hammer)", "num") == pytest.approx(np.linalg.norm(grip - hammer))
    # to a place: horizontal distance to its centre, either argument order
    expected = np.linalg.norm(hammer[:2] - np.asarray(PLACES["middle"].center))
    assert check(scene, "distance(hammer, middle)", "num") == pytest.approx(expected)
    assert check(scene, "distance(middle, hammer)", "num") == pytest.approx(expected)
    assert check(scene, "near(hammer, middle, 0.06)") == (expected < 0.06)
    assert check(scene, "near(gripper, hammer, 1.0)") and not check(scene, "near(gripper, hammer, 0.01)")


def test_arithmetic(scene):
    s = scene.scene_state
    d = float(np.linalg.norm(s.gripper_pos - s.objects["tool0"].pos))
    edge = check(scene, "edge_distance(hammer)", "num")
    assert check(scene, "distance(gripper, hammer) - 0.03", "num") == pytest.approx(d - 0.03)
    assert check(scene, "2 * edge_distance(hammer) + 0.01", "num") == pytest.approx(2 * edge + 0.01)
    assert check(scene, "-distance(gripper, hammer)", "num") == pytest.approx(-d)
    assert check(scene, "distance(gripper, hammer) - 0.03 > 0")
    assert check(scene, "edge_distance(hammer) >= edge_distance(hammer)")
    assert check(scene, "0.5", "num") == 0.5


def test_and_or_not(scene):
    s = scene.place("cup0", (*PLACES["left_bin"].center, CUP_Z + BIN_FLOOR))
    assert check(scene, "inside(glass_cup, left_bin) and not grasped(glass_cup)", state=s)
    assert check(scene, "inside(glass_cup, left_bin) and upright(glass_cup) and not lifted(hammer)", state=s)
    assert not check(scene, "inside(glass_cup, left_bin) and near_edge(hammer)", state=s)
    assert check(scene, "near_edge(hammer) or inside(glass_cup, left_bin)", state=s)
    assert not check(scene, "near_edge(hammer) or inside(glass_cup, tray)", state=s)
    assert check(scene, "not (near_edge(hammer) or off_table(hammer))", state=s)
    assert check(scene, "not not upright(glass_cup)", state=s)


def test_gripper_open_and_grasped_on_a_real_grasp(make_env):
    """grasped() needs finger contacts, so drive the scripted expert until it closes on the cup."""
    env = make_env("place_cup_in_bin")
    env.reset(seed=0)
    u = env.unwrapped
    assert not check(u, "gripper_open()")  # Fetch starts with the fingers closed
    expert = ScriptedExpert(env)
    seen_open = seen_grasp = False
    for _ in range(40):
        env.step(expert())
        seen_open |= check(u, "gripper_open()")
        if check(u, "grasped(glass_cup)"):
            seen_grasp = True
            assert u.scene_state.objects["cup0"].fingers_touching == 2
            break
    assert seen_open and seen_grasp


def test_predicate_reports_its_objects_and_kind(scene):
    p = compile_predicate("near(gripper, hammer) and inside(glass_cup, left_bin)", scene.task.names)
    assert p.objects == ("tool0", "cup0") and p.kind == "bool"
    assert isinstance(p(scene.scene_state), bool)
    q = compile_predicate("distance(hammer, tray)", scene.task.names, "num")
    assert isinstance(q(scene.scene_state), float)


def test_every_function_is_documented():
    import robo_prm.envs.predicates as module

    for name in FUNCTIONS:
        assert f"| {name}(" in module.__doc__


# ---- errors -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "source, kind, message",
    [
        ("nearr(gripper, hammer)", "bool", "unknown predicate 'nearr'"),
        ("near(gripper, wrench)", "bool", "unknown object 'wrench'"),
        ("inside(hammer, middle)", "bool", "'middle' cannot be used where a bin or tray is expected"),
        ("grasped(gripper)", "bool", "'gripper' cannot be used where a movable object is expected"),
        ("near(gripper)", "bool", "'near' takes 3 argument(s)"),
        ("near(gripper, hammer, d=0.1)", "bool", "positional arguments only"),
        ("lifted(hammer, hammer)", "bool", "expected a number, got 'hammer'"),
        ("distance(gripper, hammer)", "bool", "gives a number, expected a true/false condition"),
        ("upright(hammer)", "num", "gives a true/false condition, expected a number"),
        ("upright(hammer) + 1", "num", "arithmetic needs numbers on both sides"),
        ("distance(gripper, hammer) and upright(hammer)", "bool", "and/or need true/false conditions"),
        ("not distance(gripper, hammer)", "bool", "'not' needs a true/false condition"),
        ("upright(hammer) < 1", "bool", "comparisons need numbers"),
        ("height(hammer) == 0", "bool", "use one of < <= > >="),
        ("0 < height(hammer) < 1", "bool", "use one of < <= > >="),
        ("hammer.pos", "bool", "not allowed in a predicate"),
        ("distance(gripper, hammer) / 2", "num", "not allowed in a predicate"),
        ("near(gripper, hammer", "bool", "cannot parse"),
    ],
)
def test_compile_errors(scene, source, kind, message):
    with pytest.raises(PredicateError) as exc:
        compile_predicate(source, scene.task.names, kind)
    assert message in str(exc.value)


def test_distance_between_two_places(scene):
    # compiles (both are 'thing's), so it must evaluate: the centres are 0.46 m apart
    assert check(scene, "distance(left_bin, tray)", "num") == pytest.approx(0.46)


# ---- issue 13: a named edge, moved, quoted words --------------------------------------------------
@pytest.mark.parametrize("edge, expected", [("front", 0.10), ("back", 0.40), ("left", 0.20), ("right", 0.50),
                                            ("front_edge", 0.10), ("left_edge", 0.20)])
def test_edge_distance_to_a_named_edge(scene, edge, expected):
    # x 1.45: 10 cm from the front edge (1.55), 40 cm from the back (1.05); y 0.60: 20 cm from the left (0.40), 50 from the right
    s = scene.place("tool0", (1.45, 0.60, HAMMER_Z))
    assert check(scene, f"edge_distance(hammer, {edge})", "num", s) == pytest.approx(expected, abs=1e-9)
    assert check(scene, "edge_distance(hammer)", "num", s) == pytest.approx(0.10, abs=1e-9)  # the nearest: front


def test_near_a_named_edge(scene):
    s = scene.place("tool0", (1.45, 0.43, HAMMER_Z))  # 10 cm from the front edge, 3 cm from the left one
    assert check(scene, "near_edge(hammer, 0.05, left)", state=s)
    assert not check(scene, "near_edge(hammer, 0.05, front)", state=s)  # 10 cm away from that one
    assert check(scene, "near_edge(hammer, 0.12, front)", state=s) and not check(scene, "near_edge(hammer, 0.12, back)", state=s)
    assert check(scene, "near_edge(hammer, 0.05)", state=s)  # any edge: the left one
    beyond = scene.place("tool0", (1.45, 0.38, 0.02))  # fallen past the left edge: no longer "near" it
    assert not check(scene, "near_edge(hammer, 0.05, left)", state=beyond)
    assert check(scene, "edge_distance(hammer, left)", "num", beyond) == pytest.approx(-0.02, abs=1e-9)


def test_moved_from_the_reset_pose(scene):
    start = scene.scene_state.start_pos["cup0"].copy()  # where reset(seed=0) put the cup, not where the fixture moved it
    s = scene.place("cup0", start + np.array([0.03, 0.0, 0.0]))
    assert check(scene, "moved(glass_cup)", state=s)  # default 2 cm
    assert check(scene, "moved(glass_cup, 0.025)", state=s) and not check(scene, "moved(glass_cup, 0.035)", state=s)
    s = scene.place("cup0", start + np.array([0.0, 0.0, 0.015]))  # lifted 1.5 cm: under 2 cm
    assert not check(scene, "moved(glass_cup)", state=s)
    assert check(scene, "moved(glass_cup, 0.01)", state=s)
    s = scene.place("cup0", (1.20, 0.80, CUP_Z), as_start=True)  # a hand-made scene can say where things stood
    assert not check(scene, "moved(glass_cup, 0.001)", state=s)
    assert check(scene, "moved(glass_cup)", state=scene.place("cup0", (1.20, 0.85, CUP_Z)))


def test_quoted_and_hyphenated_words():
    from robo_prm.config_io import from_dict
    from robo_prm.envs.task import Task, TaskSpec

    spec = from_dict(TaskSpec, {"name": "t", "background": "b.", "goal": "g", "dimensions": ["d"], "success": "upright(cup0)",
                                "objects": {"cup0": "drinking glass", "left_bin": "left-hand bin", "tray": "tray-for tools"}})
    names = Task(spec).names
    for source in ('inside(drinking_glass, "left-hand bin")', "inside(drinking_glass, left_hand_bin)",
                   'inside("drinking glass", left_bin)', 'inside("cup0", "left-hand bin")', 'inside(cup0, "Left-Hand  Bin")'):
        assert compile_predicate(source, names).objects == ("cup0",), source
    assert compile_predicate('distance("tray-for tools", tray_for_tools)', names, "num").objects == ()
    with pytest.raises(PredicateError, match="quote a word with spaces or hyphens"):
        compile_predicate("inside(drinking_glass, left-hand_bin)", names)
    with pytest.raises(PredicateError, match="unknown object 'right-hand bin'"):
        compile_predicate('inside(drinking_glass, "right-hand bin")', names)


def test_predicate_knows_which_objects_it_asks_moved_about(scene):
    p = compile_predicate("near(gripper, hammer) and not moved(glass_cup, 0.03)", scene.task.names)
    assert p.objects == ("tool0", "cup0") and p.moved == ("cup0",)
    assert compile_predicate("near_edge(hammer)", scene.task.names).moved == ()


@pytest.mark.parametrize(
    "source, kind, message",
    [
        ("edge_distance(hammer, middle)", "num", "'middle' cannot be used where a table edge (front, back, left, right) is expected"),
        ("near_edge(hammer, 0.05, top)", "bool", "unknown object 'top'"),
        ("near_edge(hammer, front)", "bool", "expected a number, got 'front'"),
        ("moved(gripper)", "bool", "'gripper' cannot be used where a movable object is expected"),
        ("moved(front, 0.02)", "bool", "'front' cannot be used where a movable object is expected"),
        ("moved(hammer)", "num", "gives a true/false condition, expected a number"),
    ],
)
def test_new_predicate_errors(scene, source, kind, message):
    with pytest.raises(PredicateError) as exc:
        compile_predicate(source, scene.task.names, kind)
    assert message in str(exc.value)
