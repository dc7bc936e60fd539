"""Recorded episodes on disk: one folder per episode, written atomically, read with clear errors.

Format (version 1; also in docs/EPISODES.md)::

    ep_0007/
      meta.json     {"format": 1, "task": "push_tool_from_edge", "goal": "...", "hazards": ["..."],
                     "seed": 3, "run": "push_tool_from_edge__sac__3__1700000000", "algo": "sac",
                     "fps": 20.0, "frame_size": [H, W], "success": true, "env_steps": 40000,
                     "num_steps": 12, "extra": {}}
      frames.npz    key "frames": uint8 array T×H×W×3 (RGB), np.savez_compressed, T = num_steps + 1;
                    frames[0] is the reset frame, frames[i + 1] the frame after step i
      steps.jsonl   one JSON object per step, in order:
                    {"step": 0, "action": [..], "env_reward": 0.0,
                     "reward_terms": {"term/env": .., "term/llm": .., "weight/env": .., "total": ..},
                     "judgement": {"progress": 0.41, "score": 4.69, "confidence": 0.9,
                                   "reason": "..." | null,
                                   "hazards": [{"name": .., "severity": .., "probability": ..}],
                                   "backend": "llama_cpp", "fallback": false} | null,
                     "description": "...", "predicates": {"near_edge(hammer)": true, "dist": 0.12},
                     "success": false, "hazards_true": ["near_edge(hammer)"]}

Step i's judgement scores the state after the step, i.e. frames[i + 1]. "score" is written for people
reading the file (1 + 9·progress) and ignored on load. A step without a judgement (the judge runs
every k-th step) has "judgement": null; every key except "step" is optional when reading.
Non-finite floats are written as JSON NaN/Infinity (Python's json reads them back).
"""
from __future__ import annotations

import json
import logging
import math
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from robo_prm.types import HazardReport, Judgement

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
META_FILE = "meta.json"
FRAMES_FILE = "frames.npz"
STEPS_FILE = "steps.jsonl"


class EpisodeError(ValueError):
    """An episode folder is missing or unreadable. The message is one line: 'path/file: what'."""


@dataclass
class EpisodeMeta:
    task: str
    goal: str = ""
    hazards: list[str] = field(default_factory=list)  # hazard descriptions in words, as the judge read them
    seed: int | None = None
    run: str = ""
    algo: str = ""
    fps: float = 20.0  # env control rate: the replay video's default speed
    frame_size: tuple[int, int] | None = None  # (H, W); filled from the frames on close
    success: bool | None = None  # None on writing means "any step reported success"
    env_steps: int = 0  # training env steps when the episode was recorded
    num_steps: int = 0  # filled on close
    extra: dict[str, Any] = field(default_factory=dict)  # anything else a caller wants kept

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["frame_size"] = list(self.frame_size) if self.frame_size else None
        return {"format": FORMAT_VERSION, **d}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EpisodeMeta:
        if "task" not in d:
            raise KeyError("task")
        size = d.get("frame_size")
        return cls(
            task=str(d["task"]),
            goal=str(d.get("goal", "")),
            hazards=[str(h) for h in d.get("hazards", [])],
            seed=d.get("seed"),
            run=str(d.get("run", "")),
            algo=str(d.get("algo", "")),
            fps=float(d.get("fps", 20.0)),
            frame_size=(int(size[0]), int(size[1])) if size else None,
            success=d.get("success"),
            env_steps=int(d.get("env_steps", 0)),
            num_steps=int(d.get("num_steps", 0)),
            extra=dict(d.get("extra", {})),
        )


def judgement_to_dict(j: Judgement) -> dict[str, Any]:
    # latency_ms and cached are run-time facts about the judge, not about the scene: not recorded.
    return {
        "progress": j.progress,
        "score": round(j.score, 3),
        "confidence": j.confidence,
        "reason": j.reason,
        "hazards": [{"name": h.name, "severity": h.severity, "probability": h.probability} for h in j.hazards],
        "backend": j.backend,
        "fallback": j.fallback,
        "unbanded": j.unbanded,  # the LLM's own progress where milestone_band kept it within the state's stage
    }


def judgement_from_dict(d: dict[str, Any]) -> Judgement:
    return Judgement(
        progress=float(d["progress"]),
        confidence=float(d.get("confidence", 1.0)),
        hazards=tuple(
            HazardReport(str(h["name"]), float(h.get("severity", 1.0)), float(h.get("probability", 1.0)))
            for h in d.get("hazards", [])
        ),
        reason=d.get("reason") or None,  # "" and null both mean "no reason generated"
        backend=str(d.get("backend", "")),
        fallback=bool(d.get("fallback", False)),
        unbanded=None if d.get("unbanded") is None else float(d["unbanded"]),
    )


@dataclass
class StepRecord:
    """One env step as recorded; `reward_terms` is `RewardBreakdown.as_info()` of that step."""

    step: int
    action: list[float] = field(default_factory=list)
    env_reward: float = 0.0
    reward_terms: dict[str, float] = field(default_factory=dict)
    judgement: Judgement | None = None
    description: str = ""
    predicates: dict[str, bool | float] = field(default_factory=dict)
    success: bool = False
    hazards_true: list[str] = field(default_factory=list)  # simulator hazard predicates that hold
    rule_progress: float | None = None  # the task's rule progress (milestones, distances): labels from a run's states

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": int(self.step),
            "action": [float(a) for a in np.asarray(self.action, dtype=float).ravel()],
            "env_reward": float(self.env_reward),
            "reward_terms": {k: float(v) for k, v in self.reward_terms.items()},
            "judgement": judgement_to_dict(self.judgement) if self.judgement is not None else None,
            "description": self.description,
            "predicates": {k: v if isinstance(v, (bool, np.bool_)) else float(v) for k, v in self.predicates.items()},
            "success": bool(self.success),
            "hazards_true": [str(h) for h in self.hazards_true],
            "rule_progress": None if self.rule_progress is None else float(self.rule_progress),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StepRecord:
        j = d.get("judgement")
        return cls(
            step=int(d["step"]),
            action=[float(a) for a in d.get("action", [])],
            env_reward=float(d.get("env_reward", 0.0)),
            reward_terms={k: float(v) for k, v in d.get("reward_terms", {}).items()},
            judgement=judgement_from_dict(j) if j else None,
            description=str(d.get("description", "")),
            predicates={k: v if isinstance(v, bool) else float(v) for k, v in d.get("predicates", {}).items()},
            success=bool(d.get("success", False)),
            hazards_true=[str(h) for h in d.get("hazards_true", [])],
            rule_progress=None if d.get("rule_progress") is None else float(d["rule_progress"]),
        )


@dataclass
class Episode:
    meta: EpisodeMeta
    frames: np.ndarray  # uint8 T×H×W×3, T = len(steps) + 1
    steps: list[StepRecord]
    pixel_captions: list[str] | None = None  # per frame, from the perception model (replay/captions.py); not stored

    def __eq__(self, other: object) -> bool:  # ndarray fields break the generated __eq__
        return (
            isinstance(other, Episode)
            and self.meta == other.meta
            and self.steps == other.steps
            and np.array_equal(self.frames, other.frames)
        )

    @property
    def num_frames(self) -> int:
        return int(self.frames.shape[0])

    def step_for_frame(self, t: int) -> StepRecord | None:
        """The step whose result frame t shows; None for the reset frame."""
        return self.steps[t - 1] if t >= 1 else None

    def progress(self) -> np.ndarray:
        """Judged progress per frame (length T), NaN where no judgement was made."""
        out = np.full(self.num_frames, np.nan)
        for i, s in enumerate(self.steps):
            if s.judgement is not None:
                out[i + 1] = s.judgement.progress
        return out


def _check_frame(frame: np.ndarray, size: tuple[int, int] | None) -> np.ndarray:
    frame = np.asarray(frame)
    if frame.ndim != 3 or frame.shape[2] != 3:
        raise ValueError(f"frame must be H×W×3 RGB, got shape {frame.shape}")
    if frame.dtype != np.uint8:
        raise ValueError(f"frame must be uint8, got {frame.dtype} (render with uint8 output)")
    if size is not None and frame.shape[:2] != size:
        raise ValueError(f"frame size {frame.shape[:2]} differs from the episode's first frame {size}")
    return frame


def _json_default(o: Any) -> Any:
    # callers pass numpy scalars and arrays straight from env info dicts
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


class EpisodeWriter:
    """Collects one episode in memory and writes its folder on close().

    Frames stay in memory until close (savez_compressed needs the whole array anyway): about
    T·H·W·3 bytes, e.g. 500 steps of 128×128 is 25 MB. Record at a modest render size.

    The folder appears all at once (written to a hidden sibling, then renamed), so a reader never sees
    a half-written episode and a crash leaves no folder at all. Use as a context manager to discard the
    episode when an exception escapes.
    """

    def __init__(self, dir: str | Path, meta: EpisodeMeta, *, overwrite: bool = False) -> None:
        self.dir = Path(dir)
        self.meta = meta
        self.overwrite = overwrite
        self._frames: list[np.ndarray] = []
        self._steps: list[StepRecord] = []
        self._closed = False

    def add_frame(self, frame: np.ndarray) -> None:
        size = self._frames[0].shape[:2] if self._frames else None
        self._frames.append(_check_frame(frame, size).copy())  # envs may reuse their render buffer

    def add_step(self, step: StepRecord) -> None:
        self._steps.append(step)

    def __len__(self) -> int:
        return len(self._steps)

    def close(self) -> Path:
        """Write the folder and return its path. Needs exactly one more frame than steps."""
        if self._closed:
            return self.dir
        if len(self._frames) != len(self._steps) + 1:
            raise ValueError(
                f"{self.dir}: {len(self._frames)} frames for {len(self._steps)} steps; "
                "expected steps + 1 (the reset frame, then one frame per step)"
            )
        if self.dir.exists() and not self.overwrite:
            raise FileExistsError(f"{self.dir}: episode folder exists (pass overwrite=True to replace it)")
        meta = self.meta
        meta.frame_size = tuple(self._frames[0].shape[:2])
        meta.num_steps = len(self._steps)
        if meta.success is None:
            meta.success = any(s.success for s in self._steps)

        self.dir.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.dir.parent / f".{self.dir.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            np.savez_compressed(tmp / FRAMES_FILE, frames=np.stack(self._frames))
            lines = (json.dumps(s.to_dict(), default=_json_default) for s in self._steps)
            (tmp / STEPS_FILE).write_text("".join(line + "\n" for line in lines))
            (tmp / META_FILE).write_text(json.dumps(meta.to_dict(), indent=2, default=_json_default) + "\n")
            if self.dir.exists():  # overwrite: move the old one aside first so a rename can still be atomic
                old = self.dir.parent / f".{self.dir.name}.old-{os.getpid()}"
                self.dir.rename(old)
                tmp.rename(self.dir)
                shutil.rmtree(old, ignore_errors=True)
            else:
                tmp.rename(self.dir)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self._closed = True
        self._frames.clear()  # free the memory: the callback may keep the writer object around
        return self.dir

    def discard(self) -> None:
        self._frames.clear()
        self._steps.clear()
        self._closed = True

    def __enter__(self) -> EpisodeWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.discard()


def _read_steps(path: Path) -> list[StepRecord]:
    """One StepRecord per line. A run killed mid-write leaves a truncated last line: that one step is
    dropped with a warning; a bad line anywhere else is an EpisodeError naming the line."""
    try:
        text = path.read_bytes().decode("utf-8", errors="replace")  # a stray byte spoils one line, not the file
    except FileNotFoundError:
        raise EpisodeError(f"{path}: file not found") from None
    lines = [(n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
    steps: list[StepRecord] = []
    for k, (n, line) in enumerate(lines):
        try:
            steps.append(StepRecord.from_dict(json.loads(line)))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            what = f"not valid JSON: {exc.msg}" if isinstance(exc, json.JSONDecodeError) else f"bad or missing field: {exc}"
            if k == len(lines) - 1 and k > 0:
                log.warning("%s: line %d dropped (%s): a truncated last line loses one step", path, n, what)
                break
            raise EpisodeError(f"{path}: line {n}: {what}") from None
    return steps


def load_episode(dir: str | Path) -> Episode:
    """Read an episode folder; any problem raises EpisodeError naming the file."""
    dir = Path(dir)
    if not dir.is_dir():
        raise EpisodeError(f"{dir}: episode folder not found")

    path = dir / META_FILE
    try:
        meta = EpisodeMeta.from_dict(json.loads(path.read_text()))
    except FileNotFoundError:
        raise EpisodeError(f"{path}: file not found") from None
    except json.JSONDecodeError as exc:
        raise EpisodeError(f"{path}: not valid JSON (line {exc.lineno}): {exc.msg}") from None
    except UnicodeDecodeError:
        raise EpisodeError(f"{path}: not UTF-8 text") from None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise EpisodeError(f"{path}: bad or missing field: {exc}") from None

    path = dir / FRAMES_FILE
    try:
        with np.load(path) as npz:
            frames = npz["frames"]
    except FileNotFoundError:
        raise EpisodeError(f"{path}: file not found") from None
    except KeyError:
        raise EpisodeError(f"{path}: no 'frames' array inside") from None
    except Exception as exc:  # zipfile/pickle/zlib errors all mean the same thing to a user
        raise EpisodeError(f"{path}: not a readable .npz file ({type(exc).__name__}: {exc})") from None
    if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[3] != 3:
        raise EpisodeError(f"{path}: expected uint8 T×H×W×3 frames, got {frames.dtype} {frames.shape}")

    steps = _read_steps(dir / STEPS_FILE)
    if len(frames) == len(steps) + 2:  # the last step's line was dropped (see _read_steps): drop its frame too
        frames = frames[: len(steps) + 1]
    if len(frames) != len(steps) + 1:
        raise EpisodeError(f"{dir / FRAMES_FILE}: {len(frames)} frames for {len(steps)} steps in {STEPS_FILE}; expected steps + 1")
    if not math.isfinite(meta.fps) or meta.fps <= 0:
        meta.fps = 20.0  # a bad fps should not stop a replay
    return Episode(meta=meta, frames=frames, steps=steps)
