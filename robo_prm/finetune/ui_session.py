"""The state behind the labelling page: the queue, the answers file, frames and the judge's answers.

Answers are a journal: one `source: "human"` label line per answer, appended in one `write` (O_APPEND, then
fsync), so a crash leaves whole lines and a reader never sees half an answer; a later answer to the same
scene wins (`answer_key`). Undo (`u` on the page) takes back this session's answers, newest first, by
cutting the file back to its length before that answer — only while nobody else has appended since.
"""
from __future__ import annotations

import dataclasses
import io
import logging
import os
import secrets
import threading
from pathlib import Path
from typing import Any

import numpy as np

from robo_prm.finetune.labels import Label, read_labels
from robo_prm.types import SceneDescription

log = logging.getLogger(__name__)
HAZARD_KEYS = "hjklgfdsqwertyiopzxcvbm"  # not u (undo), n (next unanswered) or a (auto-advance)


def answer_key(lab: Label) -> tuple:
    """Which scene an answer is about: later answers with the same key replace earlier ones."""
    return lab.task, lab.scene, lab.episode, lab.step


def latest_answers(labels: list[Label]) -> dict[tuple, Label]:
    return {answer_key(lab): lab for lab in labels}  # dict keeps the last one written


def _png(frame: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(frame).save(buf, format="PNG")
    return buf.getvalue()


@dataclasses.dataclass
class _Done:
    """One appended answer, for undo: where the file ended before and after it, and what it replaced."""

    i: int
    before: int
    after: int
    replaced: Label | None


class LabelSession:
    def __init__(self, queue: list[Label], out: str | Path, judge=None, frame_size: int = 320):
        self.queue, self.out, self.judge, self.frame_size = queue, Path(out), judge, frame_size
        self.token = secrets.token_urlsafe(16)
        self.lock = threading.Lock()  # the server answers requests on threads
        self._judge_lock = threading.Lock()  # a reason takes the LLM seconds: answers and frames need not wait
        self.index = {}
        for i, lab in enumerate(queue):
            self.index.setdefault(answer_key(lab), i)
        self.answers: dict[int, Label] = {}
        if self.out.exists():
            for key, lab in latest_answers(read_labels(self.out)).items():
                if key in self.index:
                    self.answers[self.index[key]] = lab
        self._undo: list[_Done] = []
        self._judged: dict[int, dict] = {}
        self._frames: dict[int, bytes | None] = {}

    @property
    def done(self) -> int:
        return len(self.answers)

    # ---- answers ----------------------------------------------------------------------------
    def record(self, i: int, score: float, hazards: list[str]) -> Label:
        src = self.queue[i]
        known = {h.name for h in src.judge_text().hazards}
        bad = [h for h in hazards if h not in known]
        if bad:
            raise ValueError(f"unknown hazard(s) {bad}")
        # replace() keeps every field of the queue item (episode, step, frame, split, ...), whatever Label holds
        lab = dataclasses.replace(src, target=float(score), hazards=list(dict.fromkeys(hazards)), source="human")
        line = (lab.to_json() + "\n").encode("utf-8")
        with self.lock:
            self.out.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                before = os.fstat(fd).st_size
                if before and not self._ends_with_newline():
                    line = b"\n" + line  # a line cut short by a crash stays alone on its line
                view = memoryview(line)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
                after = os.fstat(fd).st_size
            finally:
                os.close(fd)
            self._undo.append(_Done(i, before, after, self.answers.get(i)))
            self.answers[i] = lab
        return lab

    def _ends_with_newline(self) -> bool:
        with self.out.open("rb") as f:
            f.seek(-1, os.SEEK_END)
            return f.read(1) == b"\n"

    def undo(self) -> int:
        """Take back this session's newest answer; the index of its item."""
        with self.lock:
            if not self._undo:
                raise LookupError("nothing to undo in this session")
            last = self._undo[-1]
            if not self.out.exists() or self.out.stat().st_size != last.after:
                raise LookupError(f"{self.out} changed since the last answer; not cutting it")
            os.truncate(self.out, last.before)
            self._undo.pop()
            if last.replaced is None:
                self.answers.pop(last.i, None)
            else:
                self.answers[last.i] = last.replaced
            return last.i

    # ---- what the page reads ------------------------------------------------------------------
    def items(self) -> dict[str, Any]:
        from robo_prm.finetune.frames import EpisodeKey

        tasks: dict[str, dict] = {}
        items = []
        for i, lab in enumerate(self.queue):
            if lab.task not in tasks:
                t = lab.judge_text()
                tasks[lab.task] = {"goal": t.goal, "background": t.background, "dimensions": list(t.dimensions),
                                   "hazards": [{"name": h.name, "text": h.text, "key": k}
                                               for h, k in zip(t.hazards, HAZARD_KEYS)]}
            ans = self.answers.get(i)
            items.append({"i": i, "task": lab.task, "scene": lab.scene, "episode": lab.episode, "step": lab.step,
                          "source": lab.source, "frame": bool(lab.frame) or EpisodeKey.of(lab) is not None,
                          "answer": {"score": ans.target, "hazards": ans.hazards} if ans else None})
        return {"tasks": tasks, "items": items, "out": str(self.out), "judge": self.judge is not None}

    def judged(self, i: int) -> dict:
        """The judge's answer for item i (with a reason), computed once; only for answered items, so the
        page never shows it before the person has made up their own mind."""
        if i not in self.answers:
            raise PermissionError("answer the item first")
        if self.judge is None:
            raise LookupError("no judge in this session (label ui --compare false)")
        with self._judge_lock:
            if i not in self._judged:
                lab = self.queue[i]
                scene = SceneDescription(text=lab.scene, facts=(), hazards=tuple(lab.hazards), rule_progress=lab.rule_progress)
                j = self.judge.judge(lab.judge_text(), [scene], explain=True)[0]
                self._judged[i] = {"score": round(j.score, 2), "progress": j.progress, "confidence": j.confidence,
                                   "reason": j.reason, "backend": j.backend, "fallback": j.fallback,
                                   "hazards": [{"name": h.name, "p": h.probability} for h in j.hazards]}
            return self._judged[i]

    def frame_png(self, i: int) -> bytes | None:
        """Item i's frame: the file the queue names, else rendered by re-running its episode (frames.py)."""
        lab = self.queue[i]
        if lab.frame:
            path = Path(lab.frame)
            return path.read_bytes() if path.exists() else None
        from robo_prm.finetune.frames import EpisodeKey, render_labelled_steps

        key = EpisodeKey.of(lab)
        if key is None:
            return None
        with self.lock:
            if i not in self._frames:  # render the whole episode's labelled steps at once: one rollout
                same = [j for j, other in enumerate(self.queue) if other.episode == lab.episode and other.split == lab.split]
                try:
                    frames = render_labelled_steps(key, [self.queue[j] for j in same], self.frame_size)
                except Exception as exc:  # e.g. a generated task's file is not shipped: no frame, not a 500
                    log.warning("%s: cannot re-run the episode (%s: %s); no frames", lab.episode, type(exc).__name__, exc)
                    frames = {}
                for j in same:
                    f = frames.get(self.queue[j].step)
                    self._frames[j] = _png(f) if f is not None else None
            return self._frames.get(i)
