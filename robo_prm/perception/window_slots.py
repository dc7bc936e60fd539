"""The slots that sit at a point, read from the frame's own pixels around it: the gripper open or holding something, a
cup upright, an object moving (keypoints.READOUT_SLOTS).

Why: the slot heads read them from one pooled vector of the frame, the keypoint readout from stride-4 features at the
point; the gap between the fingers is a few pixels of a 128-px frame. The windows the refiner reads (refine.py: 24 px
of each view around each point's coarse position) go through one small CNN, all of a frame's windows together (what
the gripper holds is in the object's windows too). Its log-probabilities are added to the slot logits: a product of
experts, each reading's evidence counts. Its last layer starts at zero: an untrained head changes no caption.

A still frame does not show speed ("It is moving fast." is more than 0.3 m/s, 12 mm in one 40 ms env step, a pixel
or two here). A head with `motion` also reads the previous env step's frame in the same windows (the change, and a
channel saying whether there was a previous frame: without one it reads the frame alone, as trained with frames
whose previous one was dropped).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from robo_prm.perception.keypoints import READOUT_SLOTS
from robo_prm.perception.refine import PATCH, _block, _half


class WindowSlotHead(nn.Module):
    """Windows (B, V, P, 3, PATCH, PATCH) 0–255 → {"slot/<name>": logits (B, classes)} for every READOUT_SLOTS name."""

    def __init__(self, views: int, points: int, width: int = 32, feat: int = 64, patch: int = PATCH,
                 motion: bool = False):
        super().__init__()
        self.motion = motion
        self.conv = nn.Sequential(_block(7 if motion else 3, 16), _block(16, width, 2), _block(width, width), _block(width, width, 2))
        self.proj = nn.Linear(width * _half(_half(patch)) ** 2, feat)  # one window → one vector
        self.fc = nn.Sequential(nn.ReLU(), nn.Linear(views * points * feat, 256), nn.ReLU(),
                                nn.Linear(256, sum(READOUT_SLOTS.values())))
        nn.init.zeros_(self.fc[-1].weight)
        nn.init.zeros_(self.fc[-1].bias)

    def forward(self, windows: torch.Tensor, previous: torch.Tensor | None = None, known: torch.Tensor | None = None
                ) -> dict[str, torch.Tensor]:
        """`previous`: the previous frame's windows at the same places (a motion head); `known` (B,) bool: which
        frames have one (default: all when `previous` is given, none otherwise)."""
        b = windows.shape[0]
        x = (windows.flatten(0, 2).float() - 127.0) / 128.0
        if self.motion:
            x = torch.cat([x, *self._change(windows, previous, known)], 1)
        y = self.fc(self.proj(self.conv(x).flatten(1)).reshape(b, -1))
        return {f"slot/{k}": v for k, v in zip(READOUT_SLOTS, torch.split(y, list(READOUT_SLOTS.values()), -1))}


    @staticmethod
    def _change(windows, previous, known) -> tuple[torch.Tensor, torch.Tensor]:
        """(previous − current) / 128 per window (zero where no previous frame is known), and the known channel."""
        b, v, p, _, h, w = windows.shape
        known = torch.full((b,), previous is not None, device=windows.device) if known is None \
            else known.to(windows.device, torch.bool)
        if previous is None:
            previous = windows
        per_window = known[:, None, None].expand(b, v, p).reshape(-1, 1, 1, 1).float()
        delta = (previous.flatten(0, 2).float() - windows.flatten(0, 2).float()) / 128.0 * per_window
        return delta, per_window.expand(-1, 1, h, w)


def add_window_slots(out: dict[str, torch.Tensor], head: WindowSlotHead, windows: torch.Tensor,
                     previous: torch.Tensor | None = None) -> None:
    """Add the head's log-probabilities to `out`'s slot logits, in place (`previous`: a motion head's previous
    windows)."""
    for name, logits in head(windows, previous).items():
        out[name] = out[name] + F.log_softmax(logits, -1)
