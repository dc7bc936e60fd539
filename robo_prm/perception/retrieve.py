"""Text → frames by the captioner's likelihood: how probable the pixel captioner finds a caption for each frame.

A scene caption (describe/render.py) is parsed back into the facts it states (describe/parse.py); each frame's
score is the log-probability its slot heads give those facts, plus the milestone line's count under the predicate
heads. This is the caption model's image–text matching score (as BLIP and CoCa rank by their captioning heads),
against the CLIP embedding's cosine (`ClipModel`), which has to squeeze a whole scene into one vector: captions
differing in one distance word sit close together there. With a keypoint head (placed.py) a frame's score also
counts how many of its position draws state the caption's distances and places, weighed as a caption is chosen.
Text no renderer could have written (free wording) falls back to the CLIP cosine. benchmarks/perception.py measures
both.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from robo_prm.describe.facts import GripperFacts, SceneFacts
from robo_prm.describe.parse import CaptionReadings, parser_for
from robo_prm.perception.placed import FROM_POSITIONS, candidates, log_softmax
from robo_prm.perception.slots import decode, encode


def _log_sigmoid(x: np.ndarray) -> np.ndarray:
    return -np.logaddexp(0.0, -x)


def slot_classes(readings: CaptionReadings) -> dict[str, tuple[int, ...]]:
    """Slot → the classes the caption allows (one, or several where its text leaves the slot open; slots that do not
    apply are left out)."""
    allowed: dict[str, set[int]] = {}
    if readings.gripper is not None:
        allowed = {k: {v} for k, v in encode(SceneFacts(readings.gripper, ())).items() if k.startswith("gripper.")}
    g = readings.gripper or GripperFacts(False, None, None, None, None)  # an object's slots do not depend on it
    for alternatives in readings.objects:
        sim = alternatives[0].sim
        for o in alternatives:
            for k, v in encode(SceneFacts(g, (o,))).items():
                if k.startswith(f"{sim}."):
                    allowed.setdefault(k, set()).add(v)
    # a slot that applies in one reading and not in another is left open, as is one that allows several classes
    return {k: tuple(sorted(v)) for k, v in allowed.items() if -1 not in v}


def milestone_log_prob(logits: np.ndarray, reached: int) -> np.ndarray:
    """log P(the highest milestone reached is `reached`) per frame, from the milestone predicates' logits (N, M),
    read as independent: the captioner says the highest milestone whose probability passes 0.5."""
    none_above = _log_sigmoid(-logits[:, reached:]).sum(axis=1)  # no milestone after the `reached`-th one
    return none_above if reached == 0 else none_above + _log_sigmoid(logits[:, reached - 1])


class CaptionRetriever:
    """Scores captions against a gallery of frames through the perception model's head outputs.

    `outputs`: `predict(net, frames)` (or PixelCaptioner.outputs) for the gallery; `frame_tasks`: each frame's task
    name (the task's words and objects decide how a caption reads); `clip`: the model whose text tower scores text
    that no task's renderer writes (None: such text scores -inf everywhere)."""

    def __init__(self, net, outputs: dict[str, np.ndarray], frame_tasks: Sequence[str], clip=None):
        self.clip = clip
        self.tasks = np.asarray(frame_tasks)
        self.embed = outputs["embed"]
        logp = {k[5:]: log_softmax(v) for k, v in outputs.items() if k.startswith("slot/")}
        self.rows = {str(t): np.flatnonzero(self.tasks == t) for t in np.unique(self.tasks)}
        # per task, sliced once (not per query): its frames' slot log-probabilities and milestone logits
        self.logp = {t: {k: v[rows] for k, v in logp.items()} for t, rows in self.rows.items()}
        keys = list(net.cfg.predicate_keys)
        self.milestones = {}  # task → (frames, milestones) logits; absent for a task the model has no heads for
        for t, rows in self.rows.items():
            wanted = [f"{t}:milestone/{m.name}" for m in parser_for(t).task.spec.milestones]
            if all(k in keys for k in wanted):
                self.milestones[t] = outputs["preds"][rows][:, [keys.index(k) for k in wanted]]
        self.placed = {}  # task → (slot names, candidate slot classes, candidate's frame, count, draws per frame)
        if "positions" in outputs:
            c = net.cfg
            for t, rows in self.rows.items():
                self.placed[t] = placed_candidates(outputs, rows, parser_for(t).task, c.keypoint_sigma, c.keypoint_samples)
            self.weight = c.keypoint_weight

    def log_likelihood(self, text: str) -> np.ndarray:
        """(N,) log-probability of `text` per gallery frame: -inf where the frame's task cannot word it so. A whole
        caption of some task scores that task's frames only; some of a caption's sentences ("The glass cup has fallen
        off the table.") score the frames of every task that can say them, on the facts they state."""
        score = np.full(len(self.tasks), -np.inf)
        whole = {t: parser_for(t).readings(text) for t in self.rows}
        if not any(whole.values()):
            whole = {t: parser_for(t).readings(text, partial=True) for t in self.rows}
        for task_name, rows in self.rows.items():
            readings = whole[task_name]
            if readings is None:
                continue
            logp, s = self.logp[task_name], np.zeros(len(rows))
            for slot, classes in slot_classes(readings).items():
                if slot in logp:  # models trained before a slot existed leave it out
                    s += logp[slot][:, classes[0]] if len(classes) == 1 else np.logaddexp.reduce(logp[slot][:, list(classes)], axis=1)
            if readings.milestones and task_name in self.milestones:
                s += milestone_log_prob(self.milestones[task_name], readings.milestones[0])
            if task_name in self.placed:
                s += self.weight * self._draw_share(task_name, readings, len(rows))
            score[rows] = s
        return score

    def _draw_share(self, task_name: str, readings: CaptionReadings, frames: int) -> np.ndarray:
        """log((draws stating the caption's distances and places + 0.5) / (draws + 0.5)) per frame of a task."""
        names, classes, frame, count, draws = self.placed[task_name]
        match = np.ones(len(frame), bool)
        for slot, allowed in slot_classes(readings).items():
            if slot in names and slot.split(".")[1] in FROM_POSITIONS:
                match &= np.isin(classes[:, names.index(slot)], allowed)
        agree = np.bincount(frame, weights=count * match, minlength=frames)
        return np.log((agree + 0.5) / (draws + 0.5))

    def scores(self, text: str) -> tuple[np.ndarray, bool]:
        """(N,) scores and whether the captioner gave them: the caption likelihood, or the CLIP cosine for text no
        task's renderer writes."""
        ll = self.log_likelihood(text)
        if np.isfinite(ll).any() or self.clip is None:
            return ll, True
        return (self.embed @ self.clip.encode_text([text])[0].detach().numpy()).astype(np.float64), False

    def search(self, text: str, k: int = 5) -> np.ndarray:
        """Indices of the k best-matching gallery frames, best first."""
        return top_k(self.scores(text)[0], k)


def placed_candidates(outputs: dict[str, np.ndarray], rows: np.ndarray, task, sigma: float, samples: int):
    """Every frame's candidate scenes from its position draws (placed.candidates), as slot classes: (slot names,
    (C, slots) classes, (C,) the candidate's frame among `rows`, (C,) its count, draws per frame)."""
    names = [k[5:] for k in outputs if k.startswith("slot/")]
    classes, frame, count = [], [], []
    for j, i in enumerate(rows):
        logits = {k: outputs[f"slot/{k}"][i] for k in names}
        heads = decode(logits, task.movable, None, task.carry_targets)
        for f, n in candidates(heads, outputs["positions"][i], task.movable, None, task.carry_targets, sigma,
                               samples).items():
            enc = encode(f)
            classes.append([enc[k] for k in names])
            frame.append(j)
            count.append(n)
    return names, np.array(classes).reshape(len(frame), len(names)), np.array(frame, int), np.array(count, float), samples


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k highest scores, highest first."""
    top = np.argpartition(-scores, min(k, len(scores) - 1))[:k]
    return top[np.argsort(-scores[top], kind="stable")]
