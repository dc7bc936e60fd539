"""Task files: validation errors (one line, naming the file and the field), milestone semantics,
the `robo-prm tasks` commands, and tasks written from docs/TASKS.md alone (tests/data/)."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from robo_prm.cli import main as cli
from robo_prm.config_io import ConfigError
from robo_prm.envs.scene import OBJECT_REST_Z, PLACES, TABLE_TOP_Z
from robo_prm.envs.task import Task, count_sentences, load_task, shipped_tasks

DATA = Path(__file__).parent / "data"

NEW_TASK = DATA / "screwdriver_to_tray.yaml"
TEXT_ONLY = DATA / "text_only.yaml"
BASE = yaml.safe_load(NEW_TASK.read_text())


def write(tmp_path, data, name="task.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False) if not isinstance(data, str) else data)
    return path


def _apply(node: dict, changes: dict) -> None:
    for key, value in changes.items():
        if value is None:
            node.pop(key)
        else:
            node[key] = value


def edited(**changes):
    """BASE with top-level fields replaced (None deletes the field)."""
    data = copy.deepcopy(BASE)
    _apply(data, changes)
    return data


def with_item(field, index, **changes):
    """BASE with one list item's fields replaced (None deletes the field)."""
    data = copy.deepcopy(BASE)
    _apply(data[field][index], changes)
    return data


# ---- the shipped tasks -------------------------------------------------------------------------
@pytest.mark.parametrize("name", shipped_tasks())
def test_shipped_task_is_valid(name):
    task = load_task(name)
    assert task.name == name
    assert count_sentences(task.spec.background) <= 3
    assert task.movable and task.spec.dimensions
    assert all(0.0 <= h.severity <= 1.0 for h in task.spec.hazards)


def test_count_sentences():
    assert count_sentences("One. Two! Three?") == 3
    assert count_sentences("A cup stands at 0.5 m. It is glass.") == 2
    assert count_sentences("") == 0


# ---- validation errors ------------------------------------------------------------------------
BAD = {
    "unknown object": (edited(objects={"tool7": "wrench"}), ["objects.tool7", "unknown object 'tool7'", "tool0, tool1, cup0"]),
    "unknown object in a predicate": (edited(success="inside(wrench, green_tray)"), ["success", "unknown object 'wrench'", "screwdriver"]),
    "object not in this task": (edited(success="inside(hammer, green_tray)"), ["success", "unknown object 'hammer'"]),
    "unknown predicate": (with_item("milestones", 1, when="grabbed(screwdriver)"), ["milestones[1].when", "unknown predicate 'grabbed'", "grasped"]),
    "background of 4 sentences": (
        edited(background="The table is messy. A screwdriver lies on it. The tray is green. Tidy it."),
        ["background", "at most 3 sentences, found 4"],
    ),
    "empty goal": (edited(goal="  "), ["goal", "must not be empty"]),
    "no dimensions": (edited(dimensions=[]), ["dimensions", "at least one"]),
    "missing field": (edited(goal=None), ["goal", "missing required field"]),
    "missing nested field": (with_item("hazards", 0, text=None), ["hazards[0].text", "missing required field"]),
    "misspelled field": (edited(success=None, sucess="inside(screwdriver, green_tray)"), ["unknown field 'sucess'", "did you mean 'success'?"]),
    "misspelled nested field": (with_item("milestones", 0, when=None, wen="near(gripper, screwdriver)"), ["milestones[0]", "unknown field 'wen'", "did you mean 'when'?"]),
    "wrong type: integer": (edited(max_steps="eighty"), ["max_steps", "expected an integer", "'eighty'"]),
    "wrong type: fractional integer": (edited(max_steps=80.5), ["max_steps", "expected an integer"]),
    "wrong type: list": (edited(dimensions="how close the screwdriver is"), ["dimensions", "expected a list"]),
    "wrong type: mapping": (edited(objects=["tool1"]), ["objects", "expected a mapping"]),
    "wrong type: text": (edited(goal=["pick", "place"]), ["goal", "expected text"]),
    "wrong type: weight": (with_item("dense_reward", 1, weight="heavy"), ["dense_reward[1].weight", "expected a number"]),
    "bad severity": (with_item("hazards", 1, severity=1.5), ["hazards[1].severity", "must be in [0, 1], got 1.5"]),
    "severity in words": (with_item("hazards", 0, severity="high"), ["hazards[0].severity", "expected a number", "'high'"]),
    "duplicate hazard": (with_item("hazards", 1, name="tool_near_edge"), ["].name: duplicate hazard name 'tool_near_edge'"]),
    "unknown start zone": (edited(start={"tool1": "shelf"}), ["start.tool1", "unknown zone 'shelf'", "front_edge", "left_bin"]),
    "start for an object not in the task": (edited(start={"tool0": "middle"}), ["start.tool0", "not a movable object of this task"]),
    "number where a condition is expected": (
        edited(success="distance(screwdriver, green_tray)"),
        ["success", "'distance(screwdriver, green_tray)' gives a number, expected a true/false condition"],
    ),
    "number as a hazard check": (with_item("hazards", 0, check="edge_distance(screwdriver)"), ["hazards[0].check", "gives a number"]),
    "condition as a milestone distance": (
        with_item("milestones", 0, distance="near(gripper, screwdriver)"),
        ["milestones[0].distance", "gives a true/false condition, expected a number"],
    ),
    "condition as a dense term": (with_item("dense_reward", 0, expr="grasped(screwdriver)"), ["dense_reward[0].expr", "expected a number"]),
    "unparsable predicate": (edited(success="inside(screwdriver, green_tray"), ["success", "cannot parse"]),
    "place used as an object": (edited(success="grasped(green_tray)"), ["success", "'green_tray' cannot be used"]),
    "no movable object": (edited(objects={"tray": "green tray"}, start={}, success="gripper_open()", milestones=[], hazards=[], dense_reward=[]), ["objects", "at least one movable object"]),
    "bad name": (edited(name="screwdriver to tray"), ["name", "letters, digits"]),
    "max_steps below 1": (edited(max_steps=0), ["max_steps", "must be in 1..10000, got 0"]),
    "max_steps absurd": (edited(max_steps=1e30), ["max_steps", "must be in 1..10000"]),
    "two objects, one word": (edited(objects={"tool1": "screwdriver", "tool0": "Screwdriver"}), ["objects.tool0", "'Screwdriver' already names tool1"]),
    "reserved word": (edited(objects={"tool1": "gripper", "tray": "green tray"}), ["objects.tool1", "'gripper' is a reserved word"]),
    "a predicate name as a word": (edited(objects={"tool1": "near", "tray": "green tray"}), ["objects.tool1", "reserved word"]),
    "infinite distance": (edited(success="distance(screwdriver, green_tray) < 1e400"), ["success", "numbers must be finite"]),
    "huge predicate": (edited(success=" or ".join(["grasped(screwdriver)"] * 5000)), ["success", "too long (119996 characters"]),
    "deeply nested predicate": (edited(success="not " * 30 + "grasped(screwdriver)"), ["success", "nested too deeply"]),
    "unknown scene": (edited(scene="kitchen"), ["scene", "unknown scene family 'kitchen'"]),
    # issue 13: plans, splits, renamed table parts, start zones
    "plan: unknown step": (edited(expert=["grab screwdriver"]), ["expert[0]", "unknown step 'grab'", "reach OBJECT, move OBJECT to PLACE"]),
    "plan: unknown object": (edited(expert=["reach screwdriver", "move wrench to green tray"]), ["expert[1]", "unknown object 'wrench'", "screwdriver"]),
    "plan: unknown place": (edited(expert=["move screwdriver to shelf"]), ["expert[0]", "unknown place 'shelf'", "green_tray"]),
    "plan: no place": (edited(expert=["move screwdriver"]), ["expert[0]", "write 'move OBJECT to PLACE'"]),
    "plan: push over a wall": (edited(expert=["push screwdriver to green tray"]), ["expert[0]", "cannot be pushed over a container's wall"]),
    "plan: empty": (edited(expert=[]), ["expert", "list the plan's steps"]),
    "plan: not a list": (edited(expert="move screwdriver to green tray"), ["expert", "expected a list"]),
    "unknown split": (edited(split="test"), ["split", "unknown split 'test'", "heldout_phrasing"]),
    "unknown table part": (edited(objects={"tool1": "screwdriver", "tray": "green tray", "top_edge": "rim"}),
                           ["objects.top_edge", "unknown object 'top_edge'", "table, front_edge"]),
    "an edge named by a direction": (edited(objects={"tool1": "screwdriver", "tray": "green tray", "front_edge": "front"}),
                                     ["objects.front_edge", "'front' is a reserved word"]),
    "a table word used twice": (edited(objects={"tool1": "screwdriver", "tray": "green tray", "table": "Green Tray"}),
                                ["objects.table", "'Green Tray' already names tray"]),
    "a tool that does not fit a container": (edited(start={"tool1": "tray"}), ["start.tool1", "the screwdriver does not fit in the green tray (tray)"]),
    "two objects' zones overlap": (
        edited(objects={"tool1": "screwdriver", "cup0": "glass cup", "tray": "green tray"}, start={"tool1": "anywhere", "cup0": "middle"}),
        ["start.cup0", "zone 'middle' overlaps zone 'anywhere' of screwdriver (tool1)"],
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_validation_error_names_file_and_field(tmp_path, case):
    data, fragments = BAD[case]
    path = write(tmp_path, data)
    with pytest.raises(ConfigError) as exc:
        load_task(path)
    message = str(exc.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("name: [unclosed\n", "not valid YAML (line"),
        ("- just\n- a list\n", "expected a mapping at the top level"),
        ("", "missing required field"),
    ],
)
def test_unreadable_files(tmp_path, text, fragment):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as exc:
        load_task(path)
    assert str(path) in str(exc.value) and fragment in str(exc.value) and "\n" not in str(exc.value)


def test_missing_file_and_unknown_name(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        load_task(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="unknown task 'nope'.*reach_tool"):
        load_task("nope")


# ---- milestone semantics and the rules progress ------------------------------------------------
def test_milestones_are_cumulative_and_rule_progress(make_env):
    env = make_env("place_cup_in_bin")
    env.reset(seed=0)
    u = env.unwrapped
    task = u.task
    s = u.scene_state
    assert task.milestones_reached(s) == 0
    # approaching the first milestone: up to 0.9 of a step, linear in its `distance`, zero at 30 cm
    d = float(np.linalg.norm(s.gripper_pos - s.objects["cup0"].pos)) - 0.03
    assert task.rule_progress(s) == pytest.approx(0.9 * max(0.0, 1 - d / 0.30) / 6)
    # the cup put straight into the bin: only the last milestone holds, and the count is 5 (1 + its index)
    cup_in_bin = (*PLACES["left_bin"].center, TABLE_TOP_Z + 0.006 + OBJECT_REST_Z["cup0"])
    s = u.place("cup0", cup_in_bin)
    assert task.predicate_values(s)["milestone/cup_reached"] is False
    assert task.milestones_reached(s) == 5
    assert task.is_success(s) and task.rule_progress(s) == 1.0
    # tipped in the bin: all milestones, no success → 5 of 6 steps
    s = u.place("cup0", cup_in_bin)
    qadr = u.model.joint("cup0:joint").qposadr[0]
    u.data.qpos[qadr + 3 : qadr + 7] = (np.cos(np.pi / 4), np.sin(np.pi / 4), 0.0, 0.0)
    import mujoco

    mujoco.mj_forward(u.model, u.data)
    s = u._snapshot()
    assert not task.is_success(s) and task.milestones_reached(s) == 5
    assert task.rule_progress(s) == pytest.approx(5 / 6)
    assert task.active_hazards(s) == ("cup_tipped",)


def test_severity_lookup():
    task = load_task(NEW_TASK)
    assert task.text.severity("tool_fell") == 1.0 and task.text.severity("tool_near_edge") == 0.5
    assert task.text.severity("not_a_hazard") == 0.0


# ---- a new task written from docs/TASKS.md ------------------------------------------------------
def test_new_task_validates():
    task = load_task(NEW_TASK)
    assert isinstance(task, Task)
    assert task.movable == ("tool1",)
    assert task.words == {"tool1": "screwdriver", "tray": "green tray"}
    assert [m.name for m in task.spec.milestones] == ["screwdriver_reached", "screwdriver_grasped", "screwdriver_over_tray"]
    assert set(task.hazard_checks) == {"tool_near_edge", "tool_fell"}


def test_new_task_env_renders_and_describes_itself(make_env):
    env = make_env(NEW_TASK, render_mode="rgb_array", width=64, height=64, reward_mode="dense")
    obs, info = env.reset(seed=0)
    u = env.unwrapped
    assert u.task.name == "screwdriver_to_tray"
    frame = env.render()
    assert frame.shape == (64, 64, 3) and frame.dtype == np.uint8 and frame.std() > 5
    d = info["description"]
    assert "screwdriver" in d.text and "hammer" not in d.text and "cup" not in d.text
    assert d.text.endswith("Milestones reached: 0 of 3.")
    assert d.milestones_total == 3
    x, y = u.scene_state.objects["tool1"].pos[:2]
    assert 1.14 <= x <= 1.25 and 0.68 <= y <= 0.86  # its start zone: back_half
    for _ in range(5):
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        assert reward == pytest.approx(u.task.dense_reward(u.scene_state) + float(info["is_success"]))
    assert set(info["predicates"]) == {
        "success",
        "milestone/screwdriver_reached",
        "milestone/screwdriver_grasped",
        "milestone/screwdriver_over_tray",
        "hazard/tool_near_edge",
        "hazard/tool_fell",
    }


def test_new_task_success_when_placed_in_the_tray(make_env):
    env = make_env(NEW_TASK)
    env.reset(seed=0)
    u = env.unwrapped
    s = u.place("tool1", (*PLACES["tray"].center, TABLE_TOP_Z + 0.006 + OBJECT_REST_Z["tool1"]))
    assert u.task.is_success(s)
    assert env.describer(s).text.startswith("The gripper is closed")
    assert "The screwdriver lies in the green tray." in env.describer(s).text


def test_text_only_task_end_to_end(make_env):
    task = load_task(TEXT_ONLY)
    assert task.milestone_checks == [] and task.hazard_checks == {} and task.dense_terms == []
    assert [h.name for h in task.spec.hazards] == ["cup_knocked"]  # the judge still reads it
    env = make_env(TEXT_ONLY, reward_mode="dense")
    obs, info = env.reset(seed=0)
    assert info["milestones_total"] == 0 and info["milestones_reached"] == 0
    assert set(info["predicates"]) == {"success"}
    d = info["description"]
    assert d.milestones_reached is None and d.milestones_total is None
    assert "Milestones" not in d.text and "glass cup" in d.text
    rng = np.random.default_rng(0)
    for _ in range(8):
        obs, reward, terminated, truncated, info = env.step(rng.uniform(-1, 1, 4).astype(np.float32))
        assert info["hazards"] == () and info["description"].rule_progress in (0.0, 1.0)
        # no dense terms and no milestones: the rules progress is 0 until success, then 1 (+1 for success)
        assert reward == (2.0 if info["is_success"] else 0.0)
        if terminated:
            break


def test_text_only_task_reaches_success_by_hand(make_env):
    env = make_env(TEXT_ONLY)
    obs, info = env.reset(seed=0)
    u = env.unwrapped
    cup = u.scene_state.objects["cup0"].pos
    for _ in range(15):  # hover 6 cm above the cup's origin
        delta = cup + np.array([0, 0, 0.06]) - u.scene_state.gripper_pos
        obs, reward, terminated, truncated, info = env.step(np.append(np.clip(delta / 0.05, -1, 1), 1.0).astype(np.float32))
        if terminated:
            break
    assert terminated and reward == 1.0 and info["is_success"]


# ---- robo-prm tasks ...  ---------------------------------------------------------------------------
def test_cli_tasks_list(capsys):
    assert cli(["tasks", "list"]) == 0
    out = capsys.readouterr().out
    for name in shipped_tasks():
        assert name in out


def test_cli_tasks_validate(capsys, tmp_path):
    assert cli(["tasks", "validate", str(NEW_TASK)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ok: ") and "'screwdriver_to_tray', 1 object(s), 3 milestone(s), 2 hazard(s)" in out
    bad = write(tmp_path, with_item("hazards", 1, severity=1.5))
    assert cli(["tasks", "validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("robo-prm: error: ") and str(bad) in err and "hazards[1].severity" in err


def test_cli_tasks_show(capsys):
    assert cli(["tasks", "show", str(TEXT_ONLY)]) == 0
    out = capsys.readouterr().out
    assert "Bring the gripper to hover just above the glass cup" in out
    assert "the gripper has touched or knocked the glass cup" in out


def test_cli_tasks_render(capsys, tmp_path):
    out_png = tmp_path / "new_task.png"
    assert cli(["tasks", "render", str(NEW_TASK), "--size", "64", "--out", str(out_png)]) == 0
    assert out_png.stat().st_size > 1000
    out = capsys.readouterr().out
    assert "screwdriver" in out and f"wrote {out_png}" in out


def test_start_zone_over_a_container_wall(tmp_path, monkeypatch):
    """The old left_edge zone (x 1.25–1.40) put the hammer's head inside the blue bin's wall: the physics threw it
    off the table. A zone like that is a one-line error naming the file and the field."""
    from robo_prm.envs.scene import START_ZONES

    monkeypatch.setitem(START_ZONES, "left_edge", ((1.25, 1.40), (0.43, 0.445)))
    path = write(tmp_path, edited(objects={"tool0": "hammer", "tray": "green tray"}, start={"tool0": "left_edge"},
                                  success="inside(hammer, green_tray)", milestones=[], hazards=[], dense_reward=[]))
    with pytest.raises(ConfigError) as exc:
        load_task(path)
    message = str(exc.value)
    assert message.startswith(f"{path}: start.tool0: zone 'left_edge' overlaps the left bin (left_bin): the hammer could start ")
    assert "cm inside its wall" in message and "\n" not in message


def test_shipped_zones_clear_every_container():
    from robo_prm.envs.scene import CONTAINERS, OBJECTS, START_ZONES, footprint_overlap

    for zone in START_ZONES:
        for obj in OBJECTS:
            assert max(footprint_overlap(obj, zone, c) for c in CONTAINERS) <= 0.01, (zone, obj)
    assert footprint_overlap("tool0", "middle", "left_bin") == 0.0  # 6 cm between the zone's edge and the bin: never touches


def test_shipped_plans_are_the_old_waypoints():
    """The plans that were Python (envs/experts.py PLANS) read from the task files, offsets in the tray included."""
    assert load_task("reach_tool").plan == [("reach", "tool0")]
    assert load_task("push_tool_from_edge").plan == [("move", "tool0", "middle", 0.0)]
    assert load_task("place_cup_in_bin").plan == [("move", "cup0", "left_bin", 0.0)]
    assert load_task("tidy_table").plan == [("move", "tool0", "tray", -0.035), ("move", "tool1", "tray", 0.035),
                                            ("move", "cup0", "left_bin", 0.0)]
    assert load_task(NEW_TASK).plan is None


# ---- the complete example of docs/TASKS.md: a named edge, a renamed table, a cup that must not move ----------
EXAMPLE = DATA / "screwdriver_off_the_lip.yaml"
SCREWDRIVER_Z = TABLE_TOP_Z + OBJECT_REST_Z["tool1"]
CUP_Z = TABLE_TOP_Z + OBJECT_REST_Z["cup0"]


def test_example_validates():
    task = load_task(EXAMPLE)
    assert task.movable == ("tool1", "cup0") and task.moved_objects == ("cup0",)
    assert task.words["table"] == "workbench" and task.words["front_edge"] == "lip"
    assert task.names["lip"] == "front_edge" and task.plan == [("move", "tool1", "middle", 0.0)]
    assert set(task.hazard_checks) == {"tool_at_the_lip", "tool_fell", "cup_moved"}


def test_example_describes_itself_with_its_words(make_env):
    env = make_env(EXAMPLE)
    env.reset(seed=0)
    u = env.unwrapped
    # the cup 7 cm from the back edge (x 1.05), where it stood; the screwdriver 2.5 cm from the lip (x 1.55);
    # the gripper (1.342, 0.749, 0.535) is 21.7 cm from the screwdriver and 24.6 cm from the cup
    u.place("cup0", (1.12, 0.70, CUP_Z), as_start=True)
    s = u.place("tool1", (1.525, 0.75, SCREWDRIVER_Z))
    d = env.describer(s)
    assert d.text == ("The gripper is closed, 30 cm from the screwdriver. The screwdriver lies 3 cm from the lip of the workbench. "
                      "The glass cup stands 10 cm from the back edge of the workbench. Milestones reached: 0 of 2.")
    assert d.hazards == ("tool_at_the_lip",)
    # moved 1.5 cm: not yet worth a sentence, and under the hazard's 3 cm
    d = env.describer(u.place("cup0", (1.12, 0.715, CUP_Z)))
    assert "moved" not in d.text and d.hazards == ("tool_at_the_lip",)
    # moved 4 cm: the 5 cm bucket, and the "do not move the cup" hazard
    d = env.describer(u.place("cup0", (1.12, 0.74, CUP_Z)))
    assert "The glass cup stands 10 cm from the back edge of the workbench. It has moved 5 cm from where it stood." in d.text
    assert "moved(glass cup) = 5 cm" in d.facts and d.hazards == ("tool_at_the_lip", "cup_moved")
    assert not u.task.is_success(u.scene_state)
    d = env.describer(u.place("tool1", (1.54, 0.75, SCREWDRIVER_Z)))
    assert "The screwdriver lies at the very lip of the workbench." in d.text


def test_example_success_by_hand(make_env):
    env = make_env(EXAMPLE)
    env.reset(seed=0)
    u = env.unwrapped
    s = u.place("tool1", (1.32, 0.75, SCREWDRIVER_Z))  # 23 cm back from the lip; the cup where reset put it
    assert u.task.is_success(s)
    assert "The screwdriver lies in the middle of the workbench." in env.describer(s).text
    s = u.place("tool1", (1.42, 0.75, SCREWDRIVER_Z))  # 13 cm from the lip: not far enough
    assert not u.task.is_success(s)


def test_example_cli_end_to_end(capsys, tmp_path):
    assert cli(["tasks", "validate", str(EXAMPLE)]) == 0
    assert "'screwdriver_off_the_lip', 2 object(s), 2 milestone(s), 3 hazard(s)" in capsys.readouterr().out
    assert cli(["tasks", "render", str(EXAMPLE), "--size", "64", "--out", str(tmp_path / "ex.png")]) == 0
    out = capsys.readouterr().out
    assert "from the lip of the workbench" in out and "table" not in out
    out_json = tmp_path / "expert.json"
    assert cli(["tasks", "expert", str(EXAMPLE), "--episodes", "3", "--json", str(out_json)]) == 0
    assert "screwdriver_off_the_lip: plan succeeded 3 / 3 (100 %)" in capsys.readouterr().out
    result = json.loads(out_json.read_text())
    assert result["success_rate"] == 1.0 and result["episodes"] == 3 and 10 < result["mean_length"] < 80


def test_cli_tasks_expert_without_a_plan(capsys):
    assert cli(["tasks", "expert", str(NEW_TASK)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "task 'screwdriver_to_tray' has no scripted plan" in err
