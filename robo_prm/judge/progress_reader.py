"""The progress reader: the judge's second opinion where the LLM is unsure (`judge.fallback: reader | reader_blend`).

A cross-encoder over frozen MiniLM token states — the hazard reader's network (`ReaderNet`, no kind token) —
reading `[CLS; goal and evaluation dimensions; SEP; scene]` → one logit → progress in [0, 1]. It is trained by
`robo-prm finetune-progress` (robo_prm/finetune/progress_reader.py) on the same labels as the LLM's adapter. Like
the LLM it reads only the task text and the scene text, so on a task without milestones it still knows more than
"not yet successful" — which the rules do not: it is the better-informed fallback issue 14 asks for, measured in
docs/BENCHMARKS.md. The milestone line is stripped: a file without milestones has none.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from robo_prm.judge.hazard_reader import ReaderNet, TokenStates, load_net_folder, pad, save_net_folder, strip_milestones
from robo_prm.judge.weights import models_dir
from robo_prm.types import TaskText


def shipped_progress_reader_folder() -> Path:
    return models_dir() / "progress_reader"


def task_words(task: TaskText) -> str:
    """What the reader reads of a task: its goal and evaluation dimensions (the background names no progress)."""
    return " ".join([task.goal, *task.dimensions])


class ProgressReader:
    """progress(task, scene texts) → (N,) in [0, 1]; `folder` holds reader.json + reader.safetensors."""

    def __init__(self, net: ReaderNet, info: dict | None = None, tokens: TokenStates | None = None):
        self.net = net.eval()
        self.info = info or {}
        self.tokens = tokens or TokenStates()
        self._memo: OrderedDict[tuple[str, str], float] = OrderedDict()
        self.seconds = 0.0  # wall time spent answering, for ms-per-judgement figures

    @classmethod
    def load(cls, folder: str | Path | None = None) -> "ProgressReader":
        net, info = load_net_folder(folder or shipped_progress_reader_folder(), "progress reader", "finetune-progress",
                                    kind="progress")
        return cls(net, info)

    def save(self, folder: str | Path, info: dict) -> None:
        save_net_folder(self.net, folder, {"kind": "progress", **info})

    @torch.no_grad()
    def logits(self, tasks: Sequence[str], scenes: Sequence[str], batch: int = 256) -> np.ndarray:
        """One logit per (task words, scene text) pair (equal-length lists)."""
        tk = self.tokens(list(tasks))
        sc = self.tokens([strip_milestones(s) for s in scenes])
        out = []
        for i in range(0, len(tk), batch):
            a, am = pad(tk[i:i + batch])
            b, bm = pad(sc[i:i + batch])
            out.append(self.net(a, am, b, bm).numpy())
        return np.concatenate(out) if out else np.zeros(0, dtype=np.float32)

    def progress(self, task: TaskText, scenes: Sequence[str]) -> np.ndarray:
        """Progress in [0, 1] of each scene text for `task` (memoised per (task words, scene))."""
        t0 = time.perf_counter()
        words = task_words(task)
        todo = [s for s in dict.fromkeys(scenes) if (words, s) not in self._memo]
        if todo:
            p = 1.0 / (1.0 + np.exp(-self.logits([words] * len(todo), todo).astype(np.float64)))
            for s, v in zip(todo, p):
                self._memo[(words, s)] = float(v)
            while len(self._memo) > 20_000:
                self._memo.popitem(last=False)
        self.seconds += time.perf_counter() - t0
        return np.array([self._memo[(words, s)] for s in scenes])
