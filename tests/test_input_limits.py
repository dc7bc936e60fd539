"""Hostile or broken input files cost a one-line error naming the file, never a traceback,
a MemoryError or minutes of work: size, alias expansion and expression depth are bounded
before anything walks them; the parsers are fuzzed."""
from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from robo_prm.config_io import ConfigError, load_yaml
from robo_prm.envs.predicates import PredicateError, compile_predicate
from robo_prm.envs.task import load_task

NAMES = {"hammer": "tool0", "tool0": "tool0", "gripper": "gripper", "left_bin": "left_bin"}
TASK = """name: t
background: A hammer lies on a table.
goal: Reach the hammer.
dimensions: [distance]
objects: {tool0: hammer}
success: near(gripper, hammer, 0.04)
"""


def _one_line_error(path, exc_info):
    msg = str(exc_info.value)
    assert "\n" not in msg and msg.startswith(str(path)) and len(msg) < 500
    return msg


def test_an_alias_bomb_is_refused_quickly(tmp_path):
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for k in "bcdefghi":
        prev = chr(ord(k) - 1)
        lines.append(f"{k}: &{k} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]")
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join("x" + ln for ln in lines) + "\n" + TASK.replace("name: t\n", "name: *i\n"))
    assert path.stat().st_size < 1000
    t0 = time.perf_counter()
    with pytest.raises(ConfigError) as exc:
        load_task(path)
    assert "once its aliases are expanded" in _one_line_error(path, exc)
    assert time.perf_counter() - t0 < 5.0  # it is refused, not expanded (it would take minutes and gigabytes)


def test_a_huge_file_is_refused_before_parsing(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text(TASK + "# " + "x" * 1_100_000 + "\n")
    with pytest.raises(ConfigError) as exc:
        load_yaml(path)
    assert "a config file is at most" in _one_line_error(path, exc)


def test_non_utf8_bytes(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(TASK.replace("hammer", "h\xe4mmer", 1).encode("latin-1"))
    with pytest.raises(ConfigError) as exc:
        load_task(path)
    assert "not UTF-8 text" in _one_line_error(path, exc)


def test_a_huge_value_is_cut_in_the_error(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(TASK.replace("name: t", "name: [" + ", ".join(["x" * 50] * 2000) + "]"))
    with pytest.raises(ConfigError) as exc:
        load_task(path)
    assert "expected text" in _one_line_error(path, exc)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=600))
def test_predicate_parser_fuzz(source):
    """Any text: a compiled predicate or a PredicateError, nothing else."""
    try:
        compile_predicate(source, NAMES)
    except PredicateError as exc:
        assert "\n" not in str(exc)  # one line, whatever the text held


_ATOMS = st.sampled_from(["grasped(hammer)", "near(gripper, hammer)", "distance(gripper, hammer) < 0.1",
                          "inside(hammer, left_bin)", "1e308 * 1e308 > 1", "hammer", "(", ")", "not", "and", "or",
                          "-", "+", "*", "0.5", "1e400", "nan", "near(gripper)", "x y"])


@settings(max_examples=300, deadline=None)
@given(st.lists(_ATOMS, max_size=60).map(" ".join))
def test_predicate_parser_fuzz_with_its_own_words(source):
    try:
        pred = compile_predicate(source, NAMES)
    except PredicateError:
        return
    assert pred.kind == "bool"


_FIELDS = st.dictionaries(
    st.sampled_from(["name", "background", "goal", "dimensions", "objects", "success", "max_steps", "hazards",
                     "milestones", "start", "scene", "sucess"]),
    st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
                 lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=8), kids, max_size=3),
                 max_leaves=10),
    max_size=12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_FIELDS)
def test_task_file_fuzz(tmp_path, data):
    """Any YAML mapping as a task file: a Task or a one-line ConfigError naming the file."""
    import yaml

    path = tmp_path / "fuzz.yaml"
    path.write_text(yaml.safe_dump(data))
    try:
        load_task(path)
    except ConfigError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(str(path))
