"""Sub-pixel keypoints: a small CNN reads the raw pixels around each heatmap keypoint and moves it.

Why: the caption's distance words need the gripper and the objects placed to a few millimetres (keypoints.py), and
the 3D error is all in the image coordinates — triangulated from the true ones the positions are 0.4–0.6 mm off in
the median, from the heatmaps' soft-argmax (a stride-4 map: a cell is 4 px, 2.5–3 cm of the table) 3–4 mm off, and
more than 1 cm for 11–17 % of the objects both cameras see (docs/BENCHMARKS.md, session 32). The frame
itself has four times the heatmap's resolution, so for each view and point a `patch`-pixel window of the frame is
cut around the coarse position (bilinear, so the window sits on the sub-pixel estimate) and `PatchRefiner` says how
far the point is from the window's centre, in pixels. Its last layer starts at zero: an untrained refiner moves
nothing. The head's readout (visibility, height) and its correction are unchanged; only the rays move.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

PATCH = 24  # pixels a side: ±12 px (±8 cm at the table) around the coarse position


def _half(n: int) -> int:
    return (n + 1) // 2  # a 3×3 convolution with stride 2 and padding 1


def _block(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1), nn.BatchNorm2d(cout), nn.ReLU())


class PatchRefiner(nn.Module):
    """(patches (N, 3, PATCH, PATCH) 0–255, coarse uv (N, 2), pair (N,) = view · points + point) → the point's
    offset from the patch centre in pixels (N, 2). One output pair per (view, point): each learns its own object's
    shape as that camera sees it."""

    def __init__(self, views: int, points: int, width: int = 64, patch: int = PATCH):
        super().__init__()
        self.patch = patch
        self.conv = nn.Sequential(_block(3 + 2, 16), _block(16, 32, 2), _block(32, width), _block(width, width, 2),
                                  _block(width, width))
        cells = _half(_half(patch)) ** 2  # after the two stride-2 convolutions
        self.fc = nn.Sequential(nn.Linear(width * cells + 2, 256), nn.ReLU(), nn.Linear(256, views * points * 2))
        nn.init.zeros_(self.fc[-1].weight)  # starts as the heatmaps' own positions
        nn.init.zeros_(self.fc[-1].bias)
        g = torch.linspace(-1, 1, patch)
        self.register_buffer("coords", torch.stack(torch.meshgrid(g, g, indexing="xy"))[None], persistent=False)

    def forward(self, patches: torch.Tensor, uv: torch.Tensor, pair: torch.Tensor) -> torch.Tensor:
        x = (patches.float() - 127.0) / 128.0
        h = self.conv(torch.cat([x, self.coords.expand(len(x), -1, -1, -1)], 1)).flatten(1)
        y = self.fc(torch.cat([h, uv.float()], 1)).reshape(len(x), -1, 2)
        return y[torch.arange(len(x)), pair]


def crop_patches(tiles: torch.Tensor, uv: torch.Tensor, patch: int = PATCH) -> torch.Tensor:
    """Camera tiles (B·V, 3, S, S) and image coordinates (B, V, P, 2) in [-1, 1] (keypoints.project's) → a window of
    `patch` pixels centred on each point (B, V, P, 3, patch, patch), sampled bilinearly (zeros outside the frame)."""
    b, v, p = uv.shape[:3]
    size = tiles.shape[-1]
    off = (torch.arange(patch, dtype=torch.float32) - (patch - 1) / 2) * 2 / size
    window = torch.stack(torch.meshgrid(off, off, indexing="xy"), -1)  # (patch, patch, 2): x right, y down
    grid = (uv.reshape(b * v, p, 1, 1, 2).float() + window).reshape(b * v, p * patch, patch, 2)
    out = F.grid_sample(tiles.float(), grid, align_corners=False, padding_mode="zeros")  # (B·V, 3, P·patch, patch)
    return out.reshape(b, v, 3, p, patch, patch).transpose(2, 3)


def output_pairs(b: int, v: int, p: int) -> torch.Tensor:
    """Each (frame, view, point)'s output pair in PatchRefiner, flattened in crop_patches' order."""
    return torch.arange(v * p).repeat(b)


def refine_uv(refiner: PatchRefiner, tiles: torch.Tensor, uv: torch.Tensor) -> torch.Tensor:
    """Coarse image coordinates (B, V, P, 2) → refined ones, read from the tiles (B·V, 3, S, S) they came from."""
    b, v, p = uv.shape[:3]
    patches = crop_patches(tiles, uv, refiner.patch).reshape(b * v * p, 3, refiner.patch, refiner.patch)
    delta = refiner(patches, uv.reshape(-1, 2), output_pairs(b, v, p).to(uv.device))
    return uv + delta.reshape(b, v, p, 2) * (2.0 / tiles.shape[-1])
