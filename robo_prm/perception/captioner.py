"""Frame → SceneDescription: PerceptionNet's heads → SceneFacts → the shared renderer.

The text comes out of the same `render()` as the state captioner's, so the judge reads the same
kind of sentence. Hazards, milestones and rule progress (which the rules judge and the fallback
need, and pixels have no simulator to ask) come from the predicate and progress heads for the
tasks the model was trained on, and from the task's own predicates checked on the state head's
estimate for any other task.
"""
from __future__ import annotations

import numpy as np
import torch

from robo_prm.perception.backbone import to_tensor
from robo_prm.describe.render import render
from robo_prm.perception.keypoints import with_positions
from robo_prm.perception.placed import decode_placed
from robo_prm.perception.slots import decode, state_from_vector
from robo_prm.perception.thresholds import Thresholds, thresholds_for
from robo_prm.envs.task import Task
from robo_prm.types import SceneDescription


class PixelCaptioner:
    """A `Describer` (robo_prm.describe) that reads the rendered frame only."""

    needs_frame = True

    def __init__(self, task: Task, net, milestone_line: bool = True, hazard_threshold: Thresholds = 0.5,
                 goal_embedding: np.ndarray | None = None):
        """goal_embedding: the task goal's CLIP text embedding; given, each description carries goal_similarity.
        hazard_threshold: one number, or per hazard key ("task:hazard/name", "*" for the rest)."""
        self.task, self.net = task, net.eval()
        self.goal = None if goal_embedding is None else goal_embedding / max(float(np.linalg.norm(goal_embedding)), 1e-8)
        self.milestone_line = milestone_line and bool(task.milestone_checks)
        self.hazard_cut = thresholds_for(hazard_threshold, [f"{task.name}:hazard/{h}" for h in task.hazard_checks])
        keys = list(net.cfg.predicate_keys)
        wanted = [f"{task.name}:{k}" for k in self._task_keys()]
        self.columns = [keys.index(k) for k in wanted] if all(k in keys for k in wanted) and task.name in net.cfg.tasks else None
        self.task_index = net.cfg.tasks.index(task.name) if self.columns is not None else None

    def _task_keys(self) -> list[str]:
        t = self.task
        return ["success"] + [f"milestone/{m.name}" for m in t.spec.milestones] + [f"hazard/{h}" for h in t.hazard_checks]

    @property
    def size(self) -> int:
        """Width = height of each camera view (envs made for this describer render at this size)."""
        return self.net.cfg.size

    @property
    def views(self) -> tuple[str, ...]:
        return tuple(self.net.cfg.views)

    def render_frame(self, env) -> np.ndarray:
        """The frame this model reads: its camera views of the env's scene, side by side."""
        return env.unwrapped.render_views(self.views)

    @property
    def reads_previous(self) -> bool:
        """Whether the model also reads the previous env step's frame (a motion head: "It is moving fast.")."""
        return self.net.reads_motion

    @torch.no_grad()
    def outputs(self, frames, previous=None) -> dict[str, np.ndarray]:
        """`previous`: each frame's previous env step's frame (read by a motion model; None: the frames alone)."""
        out = self.net(to_tensor(frames), None if previous is None else to_tensor(previous))
        return {k: v.float().numpy() for k, v in out.items()}

    def describe(self, frames, previous=None) -> list[SceneDescription]:
        """A batch of uint8 frames (B,S,S,3) → one SceneDescription each."""
        out = self.outputs(frames, previous)
        return [self.from_outputs(out, i) for i in range(len(out["embed"]))]

    def check_frame(self, frame: np.ndarray | None) -> None:
        width = self.size * len(self.views)
        if frame is None or frame.shape[0] != self.size or frame.shape[1] != width:
            got = "no frame" if frame is None else f"{frame.shape[1]}×{frame.shape[0]} frames"
            raise ValueError(f"the perception model reads {width}×{self.size} frames ({'+'.join(self.views)} views of "
                             f"{self.size} px), got {got} (make the env with width=height={self.size}; render_frame(env))")

    def describe_step(self, state, status, frame: np.ndarray | None, previous: np.ndarray | None = None
                      ) -> SceneDescription:
        self.check_frame(frame)
        if previous is not None:
            self.check_frame(previous)
        return self(frame, previous)

    def __call__(self, frame, previous=None) -> SceneDescription:
        before = None if previous is None or not self.reads_previous else np.asarray(previous)[None]
        return self.describe(np.asarray(frame)[None], before)[0]

    def from_outputs(self, out: dict[str, np.ndarray], i: int) -> SceneDescription:
        """The description of frame i of a batch of network outputs (`outputs()`)."""
        task = self.task
        n_ms = len(task.milestone_checks)
        if self.columns is not None:
            p = 1.0 / (1.0 + np.exp(-out["preds"][i, self.columns]))
            ms = p[1:1 + n_ms] > 0.5
            hz = p[1 + n_ms:] > self.hazard_cut
            reached = max((k + 1 for k, held in enumerate(ms) if held), default=0)
            hazards = tuple(h for h, on in zip(task.hazard_checks, hz) if on)
            rule_progress = float(1.0 / (1.0 + np.exp(-out["progress"][i, self.task_index])))
        else:  # a task without heads: check its predicates on the estimated state (positions from a keypoint head)
            vec = out["state"][i] if "positions" not in out else with_positions(out["state"][i], out["positions"][i])
            status = task.status(state_from_vector(vec))
            reached, hazards, rule_progress = status.reached, status.hazards, status.rule_progress
        logits = {k[5:]: v[i] for k, v in out.items() if k.startswith("slot/")}
        milestones = (reached, n_ms) if n_ms else None
        if "positions" in out:  # a keypoint head: distances from where things are (keypoints.py)
            c = self.net.cfg
            facts = decode_placed(logits, out["positions"][i], task.movable, milestones, task.carry_targets,
                                  c.keypoint_sigma, c.keypoint_weight, c.keypoint_samples)
        else:
            facts = decode(logits, task.movable, milestones, task.carry_targets)
        text, named = render(facts, task.word, self.milestone_line)
        return SceneDescription(
            text=text,
            facts=named,
            milestones_reached=reached if n_ms else None,
            milestones_total=n_ms or None,
            hazards=hazards,
            rule_progress=rule_progress,
            features=out["embed"][i].astype(np.float32),
            goal_similarity=None if self.goal is None else float(out["embed"][i] @ self.goal),  # embed is unit-norm
            source="pixels",
        )
