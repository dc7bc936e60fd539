"""The predicate language that task files use for success, milestones, hazards and dense rewards.

An expression is a small Python-like formula over named things, checked when the task file is
loaded and then evaluated on a `SceneState` every step:

    inside(cup, left_bin) and not grasped(cup)
    edge_distance(hammer) < 0.05
    near(gripper, hammer, 0.04)

Things are object words from the task's vocabulary (``hammer``, ``glass_cup`` for "glass cup",
``right_hand_bin`` or ``"right-hand bin"`` quoted), sim names (``tool0``), ``gripper``, and places
(``left_bin``, ``tray``, ``middle``). An edge is ``front``, ``back``, ``left`` or ``right``, its sim name
(``front_edge``) or the task's word for it (``lip``).
Functions (argument kinds in brackets; distances in metres, speeds in m/s):

| function                        | value | meaning                                                        |
|---------------------------------|-------|----------------------------------------------------------------|
| near(a, b, d=0.05)              | bool  | a is within d of b (a place: horizontal distance to its centre) |
| grasped(obj)                    | bool  | both fingers touch obj                                          |
| inside(obj, container)          | bool  | obj rests within a bin or tray                                  |
| in_zone(obj, place)             | bool  | obj is on the table over the place's rectangle                  |
| lifted(obj, h=0.02)             | bool  | obj is more than h above its resting height on the table        |
| off_table(obj)                  | bool  | obj has fallen below the table top or off its edges             |
| near_edge(obj, d=0.05, edge)    | bool  | obj is on the table within d of any edge (or of the named edge) |
| upright(obj)                    | bool  | obj's axis points up (cos > 0.9)                                |
| gripper_open()                  | bool  | fingers more than 3 cm apart                                    |
| distance(a, b)                  | num   | distance between a and b                                        |
| edge_distance(obj, edge)        | num   | horizontal distance to the nearest (or the named) table edge (<0: beyond it) |
| speed(obj)                      | num   | linear speed                                                    |
| height(obj)                     | num   | height above its resting height on the table                    |
| moved(obj, d=0.02)              | bool  | obj's origin is more than d from where it was at reset          |

Combine with ``and``, ``or``, ``not``, parentheses, comparisons ``< <= > >=`` and ``+ - *`` between numbers.
"""
from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

from robo_prm.envs.scene import CONTAINERS, EDGE_SIMS, EDGES, OBJECT_REST_Z, OBJECTS, PLACES, TABLE_TOP_Z, TABLE_X, TABLE_Y
from robo_prm.envs.state import SceneState


class PredicateError(ValueError):
    pass


def edge_distance_xy(xy: np.ndarray, edge: str | None = None) -> tuple[float, str]:
    """Signed horizontal distance from xy to the nearest table edge (or to `edge`), and that edge's name."""
    best = (np.inf, "front")
    for name, (axis, coord, sign) in EDGES.items():
        if edge is not None and name != edge:
            continue
        d = (coord - xy[axis]) * sign
        if d < best[0]:
            best = (float(d), name)
    return best


def _rest_height(s: SceneState, obj: str) -> float:
    return float(s.objects[obj].pos[2] - TABLE_TOP_Z - OBJECT_REST_Z[obj])


def _on_table(s: SceneState, obj: str) -> bool:
    p = s.objects[obj].pos
    over = TABLE_X[0] <= p[0] <= TABLE_X[1] and TABLE_Y[0] <= p[1] <= TABLE_Y[1]
    return bool(over and p[2] > TABLE_TOP_Z - 0.01)


def _distance(s: SceneState, a: str, b: str) -> float:
    if a in PLACES and b in PLACES:
        return float(np.linalg.norm(np.asarray(PLACES[a].center) - np.asarray(PLACES[b].center)))
    if b in PLACES:
        return float(np.linalg.norm(s.position(a)[:2] - np.asarray(PLACES[b].center)))
    if a in PLACES:
        return _distance(s, b, a)
    return float(np.linalg.norm(s.position(a) - s.position(b)))


def _inside(s: SceneState, obj: str, container: str) -> bool:
    place = PLACES[container]
    p = s.objects[obj].pos
    low_enough = p[2] < TABLE_TOP_Z + 0.006 + OBJECT_REST_Z[obj] + 0.03
    return bool(place.contains_xy(p[:2]) and low_enough)


def _moved(s: SceneState, obj: str, d: float) -> bool:
    start = s.start_pos.get(obj)
    return start is not None and float(np.linalg.norm(s.objects[obj].pos - start)) > d


def _off_table(s: SceneState, obj: str) -> bool:
    return bool(s.objects[obj].pos[2] < TABLE_TOP_Z - 0.03 or (not _on_table(s, obj) and s.objects[obj].pos[2] < TABLE_TOP_Z + 0.05))


# name → (argument kinds, optional defaults for trailing args, value kind, implementation)
# Argument kinds: obj (a movable object), thing (object, gripper or place), container, place, edge, num.
FUNCTIONS: dict[str, tuple[tuple[str, ...], tuple, str, Callable]] = {
    "near": (("thing", "thing", "num"), (0.05,), "bool", lambda s, a, b, d: _distance(s, a, b) < d),
    "grasped": (("obj",), (), "bool", lambda s, a: s.objects[a].fingers_touching >= 2),
    "inside": (("obj", "container"), (), "bool", _inside),
    "in_zone": (("obj", "place"), (), "bool", lambda s, a, z: PLACES[z].contains_xy(s.objects[a].pos[:2]) and _on_table(s, a)),
    "lifted": (("obj", "num"), (0.02,), "bool", lambda s, a, h: _rest_height(s, a) > h),
    "off_table": (("obj",), (), "bool", _off_table),
    "near_edge": (("obj", "num", "edge"), (0.05, None), "bool",
                  lambda s, a, d, e: _on_table(s, a) and edge_distance_xy(s.objects[a].pos[:2], e)[0] < d),
    "upright": (("obj",), (), "bool", lambda s, a: bool(s.objects[a].up[2] > 0.9)),
    "gripper_open": ((), (), "bool", lambda s: s.gripper_width > 0.03),
    "distance": (("thing", "thing"), (), "num", _distance),
    "edge_distance": (("obj", "edge"), (None,), "num", lambda s, a, e: edge_distance_xy(s.objects[a].pos[:2], e)[0]),
    "speed": (("obj",), (), "num", lambda s, a: float(np.linalg.norm(s.objects[a].vel))),
    "height": (("obj",), (), "num", _rest_height),
    "moved": (("obj", "num"), (0.02,), "bool", _moved),
}

_ARITH = {ast.Add: np.add, ast.Sub: np.subtract, ast.Mult: np.multiply}
_COMPARE = {ast.Lt: np.less, ast.LtE: np.less_equal, ast.Gt: np.greater, ast.GtE: np.greater_equal}


@dataclass(frozen=True)
class Predicate:
    """A checked expression; call it on a SceneState."""

    source: str
    kind: str  # "bool" or "num"
    fn: Callable[[SceneState], object]
    objects: tuple[str, ...]  # sim names of the movable objects it mentions
    moved: tuple[str, ...] = ()  # sim names of the objects it asks `moved` about
    puts: tuple[tuple[str, str], ...] = ()  # (object, container) of each `inside(obj, container)` it asks

    def __call__(self, state: SceneState):
        value = self.fn(state)
        return bool(value) if self.kind == "bool" else float(value)


def word_key(word: str) -> str:
    return "_".join(word.lower().split())


def ident_key(word: str) -> str:
    """The word as a bare name: every run of characters other than letters and digits → '_'
    ("right-hand bin" → right_hand_bin)."""
    return re.sub(r"[^0-9a-z]+", "_", word.lower()).strip("_")


MAX_SOURCE_CHARS = 500  # a task's longest shipped predicate is ~90 characters
MAX_DEPTH = 24  # nesting of and/or/not/arithmetic/calls; bounded before the recursive compile


def _one_line(text: str) -> str:
    """The text as an error message quotes it: whitespace runs (newlines of a YAML block) as one space."""
    return " ".join(text.split())


def compile_predicate(source: str, names: dict[str, str], want: str = "bool") -> Predicate:
    """Parse and type-check `source`. `names` maps every word usable in it to a sim name.

    Size and nesting are bounded before anything recursive runs, so a hostile task file costs a
    one-line error, not a RecursionError or MemoryError."""
    if not isinstance(source, str):
        raise PredicateError(f"expected a predicate as text, got {type(source).__name__}")
    if len(source) > MAX_SOURCE_CHARS:
        raise PredicateError(f"too long ({len(source)} characters; at most {MAX_SOURCE_CHARS})")
    try:
        tree = ast.parse(source.strip(), mode="eval").body
    except SyntaxError as exc:
        raise PredicateError(f"cannot parse '{_one_line(source)}': {_one_line(exc.msg)}") from None
    except (RecursionError, MemoryError, ValueError):
        raise PredicateError("cannot parse: nested too deeply") from None
    if _depth(tree) > MAX_DEPTH:
        raise PredicateError(f"nested too deeply (at most {MAX_DEPTH} levels)")
    mentioned: list[str] = []
    fn, kind = _compile(tree, names, mentioned)
    if kind != want:
        raise PredicateError(f"'{_one_line(source)}' gives a {kind_word(kind)}, expected a {kind_word(want)}")
    moved = [_resolve(c.args[0], "obj", names, []) for c in _calls(tree, "moved")]
    puts = [(_resolve(c.args[0], "obj", names, []), _resolve(c.args[1], "container", names, []))
            for c in _calls(tree, "inside")]
    return Predicate(source=source.strip(), kind=kind, fn=fn, objects=tuple(dict.fromkeys(mentioned)),
                     moved=tuple(dict.fromkeys(moved)), puts=tuple(dict.fromkeys(puts)))


def _calls(tree: ast.AST, name: str) -> list[ast.Call]:
    """Every call of the function `name` in a compiled (so type-checked) expression."""
    return [node for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name]


def _depth(tree: ast.AST) -> int:
    """Nesting depth of an expression tree, without recursion."""
    deepest, todo = 0, [(tree, 1)]
    while todo:
        node, d = todo.pop()
        deepest = max(deepest, d)
        todo.extend((child, d + 1) for child in ast.iter_child_nodes(node))
    return deepest


def kind_word(kind: str) -> str:
    return {"bool": "true/false condition", "num": "number"}[kind]


def _finite(value) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError, OverflowError):
        raise PredicateError(f"expected a number, got {value!r}") from None
    if not math.isfinite(out):
        raise PredicateError(f"numbers must be finite, got {value!r}")
    return out


def _resolve(node: ast.AST, arg_kind: str, names: dict[str, str], mentioned: list[str]):
    if arg_kind == "num":
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return _finite(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
            return -_finite(node.operand.value)
        raise PredicateError(f"expected a number, got '{ast.unparse(node)}'")
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a quoted word: "right-hand bin"
        word = node.value
        sim = names.get(word_key(word)) or names.get(ident_key(word))
    elif isinstance(node, ast.Name):
        word = node.id
        sim = names.get(word.lower())
    else:
        raise PredicateError(f"expected a name, got '{ast.unparse(node)}' (quote a word with spaces or hyphens)")
    if sim is None:
        known = ", ".join(sorted(names))
        raise PredicateError(f"unknown object '{word}' (known here: {known})")
    ok = {
        "obj": sim in OBJECTS,
        "thing": sim in OBJECTS or sim == "gripper" or sim in PLACES,
        "container": sim in CONTAINERS,
        "place": sim in PLACES,
        "edge": sim in EDGE_SIMS,
    }[arg_kind]
    if not ok:
        raise PredicateError(f"'{word}' cannot be used where {_KIND_WORDS[arg_kind]} is expected")
    if sim in OBJECTS:
        mentioned.append(sim)
    return EDGE_SIMS.get(sim, sim)


_KIND_WORDS = {"obj": "a movable object", "thing": "an object, the gripper or a place", "container": "a bin or tray", "place": "a place",
               "edge": "a table edge (front, back, left, right)"}


def _compile(node: ast.AST, names: dict[str, str], mentioned: list[str]) -> tuple[Callable, str]:
    if isinstance(node, ast.BoolOp):
        parts = [_compile(v, names, mentioned) for v in node.values]
        if any(k != "bool" for _, k in parts):
            raise PredicateError(f"'{ast.unparse(node)}': and/or need true/false conditions on both sides")
        fns = [f for f, _ in parts]
        if isinstance(node.op, ast.And):
            return (lambda s: all(f(s) for f in fns)), "bool"
        return (lambda s: any(f(s) for f in fns)), "bool"
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        f, k = _compile(node.operand, names, mentioned)
        if k != "bool":
            raise PredicateError(f"'{ast.unparse(node)}': 'not' needs a true/false condition")
        return (lambda s: not f(s)), "bool"
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        f, k = _compile(node.operand, names, mentioned)
        if k != "num":
            raise PredicateError(f"'{ast.unparse(node)}': '-' needs a number")
        return (lambda s: -f(s)), "num"
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITH:
        (lf, lk), (rf, rk) = _compile(node.left, names, mentioned), _compile(node.right, names, mentioned)
        if lk != "num" or rk != "num":
            raise PredicateError(f"'{ast.unparse(node)}': arithmetic needs numbers on both sides")
        op = _ARITH[type(node.op)]
        return (lambda s: op(lf(s), rf(s))), "num"
    if isinstance(node, ast.Compare):
        if len(node.ops) != 1 or type(node.ops[0]) not in _COMPARE:
            raise PredicateError(f"'{ast.unparse(node)}': use one of < <= > >= between two numbers")
        (lf, lk), (rf, rk) = _compile(node.left, names, mentioned), _compile(node.comparators[0], names, mentioned)
        if lk != "num" or rk != "num":
            raise PredicateError(f"'{ast.unparse(node)}': comparisons need numbers on both sides")
        op = _COMPARE[type(node.ops[0])]
        return (lambda s: bool(op(lf(s), rf(s)))), "bool"
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        value = _finite(node.value)
        return (lambda s: value), "num"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        name = node.func.id
        if name not in FUNCTIONS:
            raise PredicateError(f"unknown predicate '{name}' (known: {', '.join(FUNCTIONS)})")
        arg_kinds, defaults, kind, impl = FUNCTIONS[name]
        if node.keywords:
            raise PredicateError(f"'{name}' takes positional arguments only")
        n_required = len(arg_kinds) - len(defaults)
        if not n_required <= len(node.args) <= len(arg_kinds):
            raise PredicateError(f"'{name}' takes {len(arg_kinds)} argument(s) ({', '.join(arg_kinds) or 'none'}), got {len(node.args)}")
        args = [_resolve(a, k, names, mentioned) for a, k in zip(node.args, arg_kinds)]
        args += list(defaults[len(args) - n_required :])
        return (lambda s: impl(s, *args)), kind
    raise PredicateError(f"not allowed in a predicate: '{ast.unparse(node)}'")
