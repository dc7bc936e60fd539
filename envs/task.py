"""Task files: what the judge reads and what the simulator checks, validated into a `Task`.

A task is one YAML file (see docs/TASKS.md). Two parts:

* text for the judge — ``name``, ``background`` (at most 3 sentences), ``goal``,
  ``dimensions`` (what to evaluate), ``hazards`` (each: ``name``, ``text``, ``severity``);
* what the simulator checks — ``objects`` (sim name → words; the table and its edges may be renamed
  too), ``success`` (a predicate; it is the environment reward), optional ordered ``milestones``,
  optional hazard ``check`` predicates, optional ``dense_reward`` terms, ``start`` zones and ``max_steps``;
* optionally a scripted plan, ``expert:`` (steps ``reach OBJECT``, ``move OBJECT to PLACE``,
  ``push OBJECT to PLACE``; see `robo_prm.envs.plan`), and, in generated files, ``family`` and ``split``.
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from functools import cached_property
from importlib import resources
from pathlib import Path

from robo_prm.config_io import ConfigError, load_dataclass
from robo_prm.envs.plan import PlanError, PlanStep, parse_plan
from robo_prm.envs.predicates import FUNCTIONS, Predicate, PredicateError, compile_predicate, ident_key, word_key
from robo_prm.envs.scene import (CONTAINERS, EDGE_SIMS, OBJECTS, PLACES, SCENE_FAMILIES, START_ZONES, TABLE_PARTS,
                                 footprint_overlap, footprint_spill, rects_overlap, zone_rect)
from robo_prm.types import HazardText, SceneState, TaskStatus, TaskText


@dataclass
class HazardSpec:
    name: str
    text: str  # in words, for the judge
    severity: float = 0.5  # 0..1; the safety penalty is severity × weight
    check: str | None = None  # predicate; without it only the judge can see this hazard


@dataclass
class MilestoneSpec:
    name: str
    when: str  # predicate
    distance: str | None = None  # optional number: how far the state is from this milestone (for the rules progress)


@dataclass
class DenseTerm:
    expr: str  # numeric predicate expression, e.g. "-distance(gripper, hammer)"
    weight: float = 1.0


@dataclass
class TaskSpec:
    name: str
    background: str
    goal: str
    dimensions: list[str]
    objects: dict[str, str]
    success: str
    hazards: list[HazardSpec] = field(default_factory=list)
    milestones: list[MilestoneSpec] = field(default_factory=list)
    success_distance: str | None = None  # optional number: how far the state is from success once every milestone holds
    dense_reward: list[DenseTerm] = field(default_factory=list)
    start: dict[str, str] = field(default_factory=dict)
    max_steps: int = 50
    scene: str = "tidy_table"
    expert: list[str] | None = None  # scripted plan, steps in order: "reach hammer", "move hammer to middle"
    family: str | None = None  # generated tasks: the structure family they were made from
    split: str | None = None  # generated tasks: one of SPLITS


SPLITS = ("train", "heldout_structure", "heldout_phrasing", "heldout_both")
START_OVERLAP_TOLERANCE = 0.01  # a zone's extreme corner at the extreme yaw may graze a wall by this much (anywhere: 6 mm)
MAX_EPISODE_STEPS = 10_000  # 50–300 in the shipped tasks; a bound keeps a typo from making endless episodes

_SENTENCE_END = re.compile(r"[.!?]+(?=\s|$)")


def count_sentences(text: str) -> int:
    return len([s for s in _SENTENCE_END.split(text.strip()) if s.strip()])


class Task:
    """A validated task with its predicates compiled."""

    def __init__(self, spec: TaskSpec, source: str = "<task>"):
        self.spec = spec
        self.source = source
        self._validate_text()
        self.words = self._vocabulary()
        self.names = self._names()
        self.success_check = self._compile(spec.success, "success")
        self.milestone_checks = [self._compile(m.when, f"milestones[{i}].when") for i, m in enumerate(spec.milestones)]
        self.milestone_distances = [
            self._compile(m.distance, f"milestones[{i}].distance", want="num") if m.distance else None
            for i, m in enumerate(spec.milestones)
        ]
        self.success_distance = (
            self._compile(spec.success_distance, "success_distance", want="num") if spec.success_distance else None
        )
        self.hazard_checks = {
            h.name: self._compile(h.check, f"hazards[{i}].check") for i, h in enumerate(spec.hazards) if h.check
        }
        self.dense_terms = [
            (self._compile(t.expr, f"dense_reward[{i}].expr", want="num"), t.weight) for i, t in enumerate(spec.dense_reward)
        ]
        self._validate_start()
        self.plan = self._plan()

    # ---- validation -------------------------------------------------------------
    def _fail(self, where: str, msg: str):
        raise ConfigError(f"{self.source}: {where}: {msg}")

    def _validate_text(self):
        s = self.spec
        n = count_sentences(s.background)
        if n > 3:
            self._fail("background", f"at most 3 sentences, found {n}")
        if not s.background.strip():
            self._fail("background", "must not be empty")
        if not s.goal.strip():
            self._fail("goal", "must not be empty")
        if not s.dimensions:
            self._fail("dimensions", "list at least one evaluation dimension")
        if s.scene not in SCENE_FAMILIES:
            self._fail("scene", f"unknown scene family '{s.scene}' (known: {', '.join(SCENE_FAMILIES)})")
        if not 1 <= s.max_steps <= MAX_EPISODE_STEPS:
            self._fail("max_steps", f"must be in 1..{MAX_EPISODE_STEPS}, got {s.max_steps}")
        if not re.fullmatch(r"[A-Za-z0-9_\-]+", s.name):
            self._fail("name", f"use letters, digits, '_' or '-' only, got '{s.name}'")
        if s.split is not None and s.split not in SPLITS:
            self._fail("split", f"unknown split '{s.split}' (known: {', '.join(SPLITS)})")
        seen: set[str] = set()
        for i, h in enumerate(s.hazards):
            if not 0.0 <= h.severity <= 1.0:
                self._fail(f"hazards[{i}].severity", f"must be in [0, 1], got {h.severity}")
            if h.name in seen:
                self._fail(f"hazards[{i}].name", f"duplicate hazard name '{h.name}'")
            seen.add(h.name)

    def _vocabulary(self) -> dict[str, str]:
        words: dict[str, str] = {}
        reserved = {"gripper", *OBJECTS, *PLACES, *FUNCTIONS, *TABLE_PARTS, *EDGE_SIMS.values()}
        for sim, word in self.spec.objects.items():
            if sim not in OBJECTS and sim not in PLACES and sim not in TABLE_PARTS:
                known = ", ".join(OBJECTS + tuple(PLACES) + TABLE_PARTS)
                self._fail(f"objects.{sim}", f"unknown object '{sim}' (scene objects: {known})")
            word = str(word).strip()
            if not word:
                self._fail(f"objects.{sim}", "needs a word, e.g. 'hammer'")
            if len(word) > 40:
                self._fail(f"objects.{sim}", f"a word of at most 40 characters, got {len(word)}")
            key = word_key(word)
            if (key in reserved or ident_key(word) in reserved) and sim not in (key, ident_key(word)):
                self._fail(f"objects.{sim}", f"'{word}' is a reserved word (the gripper, a sim name, a place, an edge or a predicate)")
            twin = next((other for other, w in words.items() if word_key(w) == key or ident_key(w) == ident_key(word)), None)
            if twin is not None:
                self._fail(f"objects.{sim}", f"'{word}' already names {twin}: each object needs its own word")
            words[sim] = word
        if not any(sim in OBJECTS for sim in words):
            self._fail("objects", "name at least one movable object (tool0, tool1, cup0)")
        return words

    def _names(self) -> dict[str, str]:
        names = {"gripper": "gripper"}
        for place in PLACES:
            names[place] = place
        for edge, direction in EDGE_SIMS.items():
            names[edge] = names[direction] = edge
        for sim, word in self.words.items():
            names[sim] = sim
            names[ident_key(word)] = sim  # right-hand bin → right_hand_bin; quoted, "right-hand bin"
            names[word_key(word)] = sim
        return names

    def _compile(self, source: str, where: str, want: str = "bool") -> Predicate:
        try:
            pred = compile_predicate(source, self.names, want)
        except PredicateError as exc:
            self._fail(where, str(exc))
        for sim in pred.objects:
            if sim not in self.words:
                self._fail(where, f"'{sim}' is not in this task's objects")
        return pred

    def _validate_start(self):
        for sim, zone in self.spec.start.items():
            if sim not in self.words or sim not in OBJECTS:
                self._fail(f"start.{sim}", f"'{sim}' is not a movable object of this task")
            if zone not in START_ZONES and zone not in CONTAINERS:
                self._fail(f"start.{sim}", f"unknown zone '{zone}' (known: {', '.join(list(START_ZONES) + list(CONTAINERS))})")
        zones = {sim: self.spec.start.get(sim, "anywhere") for sim in self.movable}
        for sim, zone in zones.items():
            spill = footprint_spill(sim, zone) if zone in CONTAINERS else 0.0
            if spill > START_OVERLAP_TOLERANCE:
                self._fail(f"start.{sim}", f"the {self.word(sim)} does not fit in the {self.word(zone)} ({zone}): it could "
                                           f"start {100 * spill:.0f} cm inside its wall")
            for c in CONTAINERS:
                depth = footprint_overlap(sim, zone, c) if c != zone else 0.0
                if depth > START_OVERLAP_TOLERANCE:
                    self._fail(f"start.{sim}", f"zone '{zone}' overlaps the {self.word(c)} ({c}): the {self.word(sim)} "
                                               f"could start {100 * depth:.0f} cm inside its wall")
        for a, b in itertools.combinations(zones, 2):
            za, zb = zones[a], zones[b]
            if (za != zb or za in CONTAINERS) and rects_overlap(zone_rect(za), zone_rect(zb)):
                self._fail(f"start.{b}", f"zone '{zb}' overlaps zone '{za}' of {self.word(a)} ({a}): give both objects "
                                         f"one table zone (drawn at least 9 cm apart) or zones that do not overlap")

    def _plan(self) -> list[PlanStep] | None:
        if self.spec.expert is None:
            return None
        try:
            return parse_plan(self.spec.expert, self.names, set(self.movable))
        except PlanError as exc:
            self._fail(exc.where, str(exc))

    # ---- what the env and judges use --------------------------------------------
    @property
    def name(self) -> str:
        return self.spec.name

    @cached_property
    def text(self) -> TaskText:
        """The half of the task file the judge reads (no predicates)."""
        s = self.spec
        hazards = tuple(HazardText(h.name, h.text, float(h.severity), h.check is not None) for h in s.hazards)
        return TaskText(s.name, s.background, s.goal, tuple(s.dimensions), hazards,
                        edges=tuple(self.word(edge) for edge in EDGE_SIMS), table=self.word("table"))

    @cached_property
    def movable(self) -> tuple[str, ...]:
        return tuple(sim for sim in OBJECTS if sim in self.words)

    @cached_property
    def moved_objects(self) -> tuple[str, ...]:
        """Objects some check of this task asks `moved` about: the describer says how far they have moved."""
        checks = [self.success_check, self.success_distance, *self.milestone_checks, *self.milestone_distances,
                  *self.hazard_checks.values(), *(f for f, _ in self.dense_terms)]
        return tuple(sim for sim in OBJECTS if any(sim in c.moved for c in checks if c is not None))

    @cached_property
    def carry_targets(self) -> dict[str, str]:
        """Object → the container its success check puts it in: the describer says how far a carried object is
        from it (the goal's "how close the cup is to the bin" dimension, which otherwise no sentence carries)."""
        targets: dict[str, str] = {}
        for obj, container in self.success_check.puts:
            targets.setdefault(obj, container)
        return targets

    def word(self, sim: str) -> str:
        return self.words.get(sim, sim.replace("_", " "))

    def status(self, state: SceneState) -> TaskStatus:
        success = self.is_success(state)
        milestones = tuple(check(state) for check in self.milestone_checks)
        reached = max((i + 1 for i, held in enumerate(milestones) if held), default=0)
        return TaskStatus(success, milestones, self.active_hazards(state), reached,
                          self._rule_progress(state, success, reached))

    def is_success(self, state: SceneState) -> bool:
        return self.success_check(state)

    def milestones_reached(self, state: SceneState) -> int:
        """Ordered milestones are cumulative: the count is 1 + the index of the last one that holds."""
        for i in range(len(self.milestone_checks) - 1, -1, -1):
            if self.milestone_checks[i](state):
                return i + 1
        return 0

    def rule_progress(self, state: SceneState) -> float:
        return self._rule_progress(state, self.is_success(state), self.milestones_reached(state))

    def _rule_progress(self, state: SceneState, success: bool, reached: int) -> float:
        """Progress in [0, 1] from the simulator: milestones reached, plus up to 0.9 of a step
        toward the next one (or toward success after the last) when it has a `distance`
        (linear in distance, zero at 30 cm). Without that partial step the stretch between two
        checks is flat, and flat stretches are where a policy learning from this signal stalls."""
        if success:
            return 1.0
        total = len(self.milestone_checks)
        to_next = self.milestone_distances[reached] if reached < total else self.success_distance
        partial = 0.0
        if to_next is not None:
            d = to_next(state)
            partial = 0.9 * min(1.0, max(0.0, 1.0 - d / 0.30))
        # success is the last step: milestones fill [0, total/(total+1)]
        return min(1.0, (reached + partial) / (total + 1))

    def active_hazards(self, state: SceneState) -> tuple[str, ...]:
        return tuple(name for name, check in self.hazard_checks.items() if check(state))

    def dense_reward(self, state: SceneState) -> float:
        return float(sum(w * f(state) for f, w in self.dense_terms))

    def predicate_values(self, state: SceneState, status: TaskStatus | None = None) -> dict[str, bool | float]:
        st = status or self.status(state)
        values: dict[str, bool | float] = {"success": st.success}
        for m, held in zip(self.spec.milestones, st.milestones):
            values[f"milestone/{m.name}"] = held
        for name in self.hazard_checks:
            values[f"hazard/{name}"] = name in st.hazards
        return values


def tasks_dir() -> Path:
    return Path(str(resources.files("robo_prm.configs") / "tasks"))


def shipped_tasks() -> list[str]:
    return sorted(p.stem for p in tasks_dir().glob("*.yaml"))


def load_task(name_or_path: str | Path) -> Task:
    """A shipped task by name, or any task YAML by path."""
    if isinstance(name_or_path, Task):
        return name_or_path
    text = str(name_or_path)
    path = Path(text)
    if not (text.endswith((".yaml", ".yml")) or path.exists()):
        path = tasks_dir() / f"{text}.yaml"
        if not path.exists():
            raise ConfigError(f"unknown task '{text}' (shipped: {', '.join(shipped_tasks())}; or give a path to a .yaml file)")
    return Task(load_dataclass(TaskSpec, path), source=str(path))
