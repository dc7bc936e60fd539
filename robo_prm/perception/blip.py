"""A local BLIP captioning folder (transformers `BlipForConditionalGeneration` + `BlipProcessor`).

For users who have BLIP weights on disk (e.g. Salesforce/blip-image-captioning-base saved with
`save_pretrained`): frames → free-form captions, wrapped as SceneDescriptions. BLIP was trained on
web photos, knows nothing of the task's slots, hazards or progress, so its descriptions carry only
text (no facts, hazards or rule progress): use it with an LLM judge, not with the rules judge.
The in-domain captioner (captioner.py) is the default.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from robo_prm.types import SceneDescription


class BlipCaptioner:
    def __init__(self, folder: str | Path, prompt: str | None = None, max_new_tokens: int = 30, device: str = "cpu"):
        from transformers import BlipForConditionalGeneration, BlipProcessor

        folder = Path(folder)
        if not (folder / "config.json").exists():
            raise FileNotFoundError(f"{folder}: not a BLIP folder (no config.json); save one with save_pretrained()")
        self.processor = BlipProcessor.from_pretrained(str(folder), local_files_only=True)
        self.model = BlipForConditionalGeneration.from_pretrained(str(folder), local_files_only=True).to(device).eval()
        self.prompt, self.max_new_tokens, self.device = prompt, max_new_tokens, device

    @torch.no_grad()
    def caption(self, frames) -> list[str]:
        """uint8 frames (B,H,W,3) or one (H,W,3) → one caption each (greedy decoding)."""
        frames = np.asarray(frames)
        if frames.ndim == 3:
            frames = frames[None]
        images = list(frames)
        if self.prompt:
            inputs = self.processor(images=images, text=[self.prompt] * len(images), return_tensors="pt")
        else:
            inputs = self.processor(images=images, return_tensors="pt")
        inputs = {k: v.to(self.device) for k, v in inputs.items()}
        ids = self.model.generate(**inputs, max_new_tokens=self.max_new_tokens, do_sample=False)
        return [t.strip() for t in self.processor.batch_decode(ids, skip_special_tokens=True)]

    def describe(self, frames: Sequence[np.ndarray]) -> list[SceneDescription]:
        return [SceneDescription(text=t, facts=(), source="pixels") for t in self.caption(frames)]
