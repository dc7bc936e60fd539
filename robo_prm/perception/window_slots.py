"""The slots that sit at a point, read from the frame's own pixels around it: the gripper open or holding something, a
cup upright, an object moving (keypoints.READOUT_SLOTS).

Why: the slot heads read them from one pooled vector of the frame, the keypoint readout from stride-4 features at the
point; the gap between the fingers is a few pixels of a 128-px frame. The windows the refiner reads (refine.py: 24 px
of each view around each point's coarse position) go through one small CNN, all of a frame's windows together (what
the gripper holds is in the object's windows too). Its log-probabilities are added to the slot logits: a product of
experts, each reading's evidence counts. Its last layer starts at zero: an untrained head changes no caption.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from robo_prm.perception.keypoints import READOUT_SLOTS
from robo_prm.perception.refine import PATCH, _block, _half


class WindowSlotHead(nn.Module):
    """Windows (B, V, P, 3, PATCH, PATCH) 0–255 → {"slot/<name>": logits (B, classes)} for every READOUT_SLOTS name."""

    def __init__(self, views: int, points: int, width: int = 32, feat: int = 64, patch: int = PATCH):
        super().__init__()
        self.conv = nn.Sequential(_block(3, 16), _block(16, width, 2), _block(width, width), _block(width, width, 2))
        self.proj = nn.Linear(width * _half(_half(patch)) ** 2, feat)  # one window → one vector
        self.fc = nn.Sequential(nn.ReLU(), nn.Linear(views * points * feat, 256), nn.ReLU(),
                                nn.Linear(256, sum(READOUT_SLOTS.values())))
        nn.init.zeros_(self.fc[-1].weight)
        nn.init.zeros_(self.fc[-1].bias)

    def forward(self, windows: torch.Tensor) -> dict[str, torch.Tensor]:
        b = windows.shape[0]
        x = (windows.flatten(0, 2).float() - 127.0) / 128.0
        y = self.fc(self.proj(self.conv(x).flatten(1)).reshape(b, -1))
        return {f"slot/{k}": v for k, v in zip(READOUT_SLOTS, torch.split(y, list(READOUT_SLOTS.values()), -1))}


def add_window_slots(out: dict[str, torch.Tensor], head: WindowSlotHead, windows: torch.Tensor) -> None:
    """Add the head's log-probabilities to `out`'s slot logits, in place."""
    for name, logits in head(windows).items():
        out[name] = out[name] + F.log_softmax(logits, -1)
