"""The progress reader: the judge's second opinion where the LLM is unsure (`judge.fallback: reader | reader_blend`).

A cross-encoder over frozen MiniLM token states — the hazard reader's network (`ReaderNet`, no kind token) —
reading `[CLS; goal and evaluation dimensions; SEP; scene]` → one logit → progress in [0, 1]. It is trained by
`robo-prm finetune-progress` (robo_prm/finetune/progress_reader.py) on the same labels as the LLM's adapter. Like
the LLM it reads only the task text and the scene text, so on a task without milestones it still knows more than
"not yet successful" — which the rules do not: it is the better-informed fallback issue 14 asks for, measured in
docs/BENCHMARKS.md. The milestone line is stripped: a file without milestones has none.
"""
from __future__ import annotations

import json
import time
from collections import OrderedDict
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from robo_prm.judge.hazard_reader import ReaderNet, TokenStates, pad, strip_milestones
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
        from safetensors.torch import load_file

        folder = Path(folder) if folder else shipped_progress_reader_folder()
        meta_path, weights = folder / "reader.json", folder / "reader.safetensors"
        for p in (meta_path, weights):
            if not p.exists():
                raise FileNotFoundError(f"{p}: no progress reader there (train one with `robo-prm finetune-progress`)")
        try:
            info = json.loads(meta_path.read_text())
            if info.get("kind") != "progress":
                raise ValueError("reader.json does not say kind: progress")
            net = ReaderNet(**info["net"])
            net.load_state_dict(load_file(str(weights)))
        except (KeyError, TypeError, ValueError, RuntimeError) as exc:
            raise ValueError(f"{folder}: not a progress reader this version can load ({exc})") from None
        return cls(net, info)

    def save(self, folder: str | Path, info: dict) -> None:
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in self.net.state_dict().items()}, str(folder / "reader.safetensors"))
        (folder / "reader.json").write_text(json.dumps({"kind": "progress", "net": self.net.config, **info}, indent=1))

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
