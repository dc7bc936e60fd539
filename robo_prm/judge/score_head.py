"""The score head: the judge LLM's score read from its last hidden state by a small trained layer (`judge.score_head`).

The LLM answers "Score: d" through its next-token distribution over the digits, which is the tied output matrix W
(vocabulary × hidden) applied to the last position's hidden state h. The head reads h itself — the whole state the
model built from the task text and the scene, not just the ten digit rows of W — with a layer trained on judge labels
of many task families (`robo-prm finetune-head`, robo_prm/finetune/score_head.py), while the LLM's weights stay as
they are. It is the value head of a process reward model, fitted on a frozen LLM: a forward pass costs nothing more
than the LLM's own score pass.

h is recovered from the next-token logits, which every local backend already reads: logits = W h and W has full
column rank, so h = (WᵀW)⁻¹ Wᵀ logits. The first layer of the head is folded into that map once at load
(`bind`, cached per model and head by `bind_to_model`), so a judgement costs one (hidden units × vocabulary) product
on top of the LLM pass. With a quantized output matrix llama.cpp quantizes h to 8 bits before the product; the h
recovered is that one (correlation > 0.999 with llama.cpp's own embedding output: tests/test_score_head.py).

`llm_share` (head.json) mixes the LLM's own digit distribution into the answer. The shipped head uses 0: a mixture
ordered held-out labels a little better but, being wider, made the judge unconfident more often (docs/FINETUNE.md,
"Score head").

Folder: head.json (architecture, input standardisation, llm_share, training record) + head.safetensors.
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np

from robo_prm.judge.weights import model_files, models_dir

log = logging.getLogger(__name__)


def shipped_score_head_folder() -> Path:
    return models_dir() / "score_head"


def output_matrix(gguf_path: str | Path) -> np.ndarray:
    """The model's output matrix (vocabulary × hidden), float32: `output.weight`, or the token embeddings where the
    output is tied to them (SmolLM2)."""
    import gguf

    reader = gguf.GGUFReader(str(gguf_path))
    tensors = {t.name: t for t in reader.tensors}
    t = tensors.get("output.weight") or tensors.get("token_embd.weight")
    if t is None:
        raise ValueError(f"{gguf_path}: no output.weight or token_embd.weight tensor")
    w = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
    return w.reshape(-1, int(t.shape[0]))  # gguf shapes are (hidden, vocabulary); rows are tokens


class HiddenFromLogits:
    """h = (WᵀW)⁻¹ Wᵀ logits for an output matrix W: the hidden state behind a row of next-token logits."""

    def __init__(self, w: np.ndarray):
        self.w = np.asarray(w, dtype=np.float32)
        gram = np.zeros((self.w.shape[1],) * 2)
        for i in range(0, len(self.w), 8192):  # WᵀW in float64 without a float64 copy of W (~230 MB for SmolLM2)
            block = self.w[i:i + 8192].astype(np.float64)
            gram += block.T @ block
        self.gram_inv = np.linalg.inv(gram)

    def __call__(self, logits: np.ndarray) -> np.ndarray:
        wt_logits = self.w.T @ np.asarray(logits, dtype=np.float32)
        return (self.gram_inv @ wt_logits.astype(np.float64)).astype(np.float32)

    def fold(self, a: np.ndarray) -> np.ndarray:
        """A linear map `a` (k × hidden) of h as a map of the logits (k × vocabulary)."""
        return (np.asarray(a, dtype=np.float64) @ self.gram_inv).astype(np.float32) @ self.w.T


class ScoreHead:
    """digits(logits) → distribution over 0–9; weights: standardise h, [Linear → GELU] × (hidden > 0), Linear → 10."""

    def __init__(self, weights: dict[str, np.ndarray], info: dict):
        self.weights = {k: np.asarray(v, dtype=np.float32) for k, v in weights.items()}
        self.info = info
        self._first: tuple[np.ndarray, np.ndarray] | None = None  # the first layer folded onto the logits (bind)

    @classmethod
    def load(cls, folder: str | Path | None = None) -> "ScoreHead":
        from safetensors.numpy import load_file

        folder = Path(folder or shipped_score_head_folder())
        meta, weights = model_files(folder, "head", "score head", "finetune-head")
        try:
            info = json.loads(meta.read_text())
            head = cls(load_file(str(weights)), info)
            head._check()
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{folder}: not a score head this version can load ({exc})") from None
        return head

    def save(self, folder: str | Path) -> Path:
        from safetensors.numpy import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        save_file({k: np.ascontiguousarray(v) for k, v in self.weights.items()}, str(folder / "head.safetensors"))
        (folder / "head.json").write_text(json.dumps(self.info, indent=1))
        return folder

    def _check(self) -> None:
        w = self.weights
        n = w["mean"].shape[0]
        if w["std"].shape != (n,) or w["w0"].shape[1] != n or w[f"w{self.layers - 1}"].shape[0] != 10:
            raise ValueError("weight shapes do not chain from the hidden size to 10 digits")

    @property
    def layers(self) -> int:
        return sum(1 for k in self.weights if k.startswith("w") and k[1:].isdigit())

    @property
    def hidden_size(self) -> int:
        return int(self.weights["mean"].shape[0])

    def _first_layer(self) -> tuple[np.ndarray, np.ndarray]:
        """The first layer with the standardisation folded in: z = A h + c."""
        w = self.weights
        a = w["w0"] / w["std"][None, :]
        return a, w["b0"] - a @ w["mean"]

    def bind(self, recover: HiddenFromLogits) -> "ScoreHead":
        """Fold the first layer onto the logits of the model whose output matrix `recover` holds."""
        if recover.w.shape[1] != self.hidden_size:
            raise ValueError(f"the head reads hidden states of size {self.hidden_size}, the model has {recover.w.shape[1]}")
        a, c = self._first_layer()
        self._first = (recover.fold(a), c)
        return self

    def bind_to_model(self, gguf_path: str | Path) -> "ScoreHead":
        """`bind` to a GGUF's output matrix; the folded layer is cached in ~/.cache/robo_prm (2 MB for a linear head),
        since reading and dequantizing the matrix costs seconds and a few hundred MB once."""
        import hashlib

        from robo_prm.judge.merge import cache_dir

        path = Path(gguf_path)
        digest = hashlib.sha256(f"{path.name}:{path.stat().st_size}".encode())
        for k in sorted(self.weights):
            digest.update(k.encode() + self.weights[k].tobytes())
        cached = cache_dir() / f"score_head-{digest.hexdigest()[:16]}.npy"
        if cached.exists():
            self._first = (np.load(cached), self._first_layer()[1])
            return self
        self.bind(HiddenFromLogits(output_matrix(path)))
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            tmp = cached.with_suffix(f".{os.getpid()}.tmp.npy")
            np.save(tmp, self._first[0])
            tmp.replace(cached)  # whole or absent, whoever reads it
        except OSError as exc:  # a read-only cache costs the next load its seconds, nothing else
            log.warning("score head: could not cache the folded layer in %s (%s)", cached.parent, exc)
        return self

    def _rest(self, z: np.ndarray) -> np.ndarray:
        for i in range(1, self.layers):
            z = _gelu(z)
            z = z @ self.weights[f"w{i}"].T + self.weights[f"b{i}"]
        return z

    def digits_from_hidden(self, h: np.ndarray) -> np.ndarray:
        """(n, hidden) hidden states → (n, 10) distributions over the score digits."""
        a, c = self._first_layer()
        return _softmax(self._rest(np.atleast_2d(h).astype(np.float32) @ a.T + c))

    @property
    def llm_share(self) -> float:
        return float(self.info.get("llm_share", 0.0))

    def mix(self, head_digits: np.ndarray, llm_digits: np.ndarray | None) -> np.ndarray:
        """The answer: `llm_share` of the LLM's own digit distribution, the rest the head's."""
        s = self.llm_share
        return head_digits if llm_digits is None or s <= 0.0 else (1.0 - s) * head_digits + s * np.asarray(llm_digits)

    def digits(self, logits: np.ndarray, llm_digits: np.ndarray | None = None) -> np.ndarray:
        """One row of next-token logits at the score position (and the LLM's digit distribution read from it) →
        distribution over 0–9 (after `bind`)."""
        if self._first is None:
            raise RuntimeError("ScoreHead.bind(HiddenFromLogits(output_matrix)) first")
        m, c = self._first
        z = m @ np.asarray(logits, dtype=np.float32) + c
        return self.mix(_softmax(self._rest(z[None, :]))[0].astype(np.float64), llm_digits)


def _gelu(x: np.ndarray) -> np.ndarray:  # torch.nn.GELU's exact (erf) form
    from scipy.special import erf

    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)
