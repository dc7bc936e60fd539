"""Where things are, from the cameras' geometry: per-view keypoint heatmaps, triangulated to 3D.

The caption's distance words are centimetre buckets (3 / 5 / 10 / 15 / 20 / 30 cm), so a caption is exact only
when the gripper and every object are placed to a few millimetres (docs/PERCEPTION.md, "Why the distance words are
hard"). Classifying a bucket from a pooled feature vector reads them at about 1 cm. Here each camera view gets one
heatmap per tracked point (the gripper and each object) on an early, stride-4 feature map of the trunk, supervised
by where the simulator's camera projects the point; the soft-argmax of a heatmap is a sub-pixel image position, the
two views' rays are intersected (their closest approach) into a 3D point, and a small learned correction covers
points one camera cannot see. A head with a *readout* (`NetConfig.keypoint_readout`) also pools each point's
features from its heatmap and reads from them whether each view sees the point (the triangulation weighs each
view's ray by it), the point's height (a prior that places a point one view cannot see on its ray), and the caption
slots that sit at the point: the gripper open or holding, a cup upright, an object moving (`READOUT_SLOTS`).
The positions go through the state describer's own rules (facts.scene_facts), so the
pixel caption uses the same thresholds as the state caption.

Cameras are the env's `VIEWS` (lookat, distance, azimuth, elevation) with the model's vertical field of view.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from robo_prm.envs.scene import OBJECTS
from robo_prm.envs.tidy_env import VIEWS
from robo_prm.perception.slots import HELD

POINTS = ("gripper",) + OBJECTS  # what the head tracks, in this order
# caption slots a readout head reads at the points (class counts as slots.slot_sizes)
READOUT_SLOTS = {"gripper.held": len(HELD), "gripper.opened": 2, **{f"{o}.upright": 2 for o in OBJECTS},
                 **{f"{o}.moving": 2 for o in OBJECTS}}
FOVY_DEG = 45.0  # the Fetch scene's vis.global.fovy (MuJoCo's default)
CENTER = np.array([1.30, 0.75, 0.40])  # the table top's centre: positions are learned as cm from here


def camera_axes(view: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(position, forward, up, right) of a free MuJoCo camera in world metres (mjv_updateCamera's convention)."""
    c = VIEWS[view]
    az, el = np.radians(c["azimuth"]), np.radians(c["elevation"])
    forward = np.array([np.cos(el) * np.cos(az), np.cos(el) * np.sin(az), np.sin(el)])
    up = np.array([-np.sin(el) * np.cos(az), -np.sin(el) * np.sin(az), np.cos(el)])
    return np.asarray(c["lookat"]) - c["distance"] * forward, forward, up, np.cross(forward, up)


def project(points: np.ndarray, view: str) -> np.ndarray:
    """World points (..., 3) → image coordinates (..., 2) in [-1, 1] (x right, y down; ±1 = the frame's edges)."""
    pos, forward, up, right = camera_axes(view)
    d = np.asarray(points, dtype=np.float64) - pos
    depth = d @ forward
    scale = 1.0 / (np.tan(np.radians(FOVY_DEG) / 2) * depth)
    return np.stack([(d @ right) * scale, -(d @ up) * scale], -1)


class Triangulate(nn.Module):
    """Image coordinates in two views (B, 2, P, 2) → 3D points (B, P, 3), cm from CENTER: the midpoint of the two
    rays' closest approach (differentiable, closed form)."""

    def __init__(self, views: list[str]):
        super().__init__()
        if len(views) != 2:
            raise ValueError(f"keypoints triangulate two camera views, the model reads {len(views)} ({'+'.join(views)})")
        axes = [camera_axes(v) for v in views]
        # derived from the camera constants, so not saved (fp16 weight files would round them)
        self.register_buffer("origin", torch.tensor(np.stack([(a[0] - CENTER) * 100 for a in axes]), dtype=torch.float32),
                             persistent=False)
        self.register_buffer("basis", torch.tensor(np.stack([np.stack(a[1:]) for a in axes]), dtype=torch.float32),
                             persistent=False)
        self.tan = float(np.tan(np.radians(FOVY_DEG) / 2))

    def forward(self, uv: torch.Tensor) -> torch.Tensor:
        x, y = uv[..., 0:1] * self.tan, -uv[..., 1:2] * self.tan
        fwd, up, right = (self.basis[:, k][None, :, None] for k in range(3))  # (1, 2, 1, 3)
        d = F.normalize(fwd + x * right + y * up, dim=-1)
        o = self.origin[None, :, None]
        d0, d1, w = d[:, 0], d[:, 1], (o[:, 0] - o[:, 1])
        b = (d0 * d1).sum(-1)
        e0, e1 = (d0 * w).sum(-1), (d1 * w).sum(-1)
        den = (1 - b * b).clamp_min(1e-6)  # unit directions: a = c = 1
        s, t = (b * e1 - e0) / den, (e1 - b * e0) / den
        return 0.5 * (o[:, 0] + s[..., None] * d0 + o[:, 1] + t[..., None] * d1)

    def weighted(self, uv: torch.Tensor, weight: torch.Tensor, height: torch.Tensor, strength: torch.Tensor) -> torch.Tensor:
        """The point nearest, in the least-squares sense, to each view's ray weighted by `weight` (B, 2, P) and to the
        plane at `height` (B, P, cm) weighted by `strength` (P): with both rays trusted it is the rays' midpoint
        (`forward`), with one it is where that ray meets the height plane."""
        x, y = uv[..., 0:1] * self.tan, -uv[..., 1:2] * self.tan
        fwd, up, right = (self.basis[:, k][None, :, None] for k in range(3))
        d = F.normalize(fwd + x * right + y * up, dim=-1)  # (B, 2, P, 3)
        off_ray = torch.eye(3, dtype=d.dtype) - d[..., :, None] * d[..., None, :]  # projects onto a ray's normal plane
        w = weight[..., None, None]
        ez = torch.tensor([0.0, 0.0, 1.0], dtype=d.dtype)
        plane = strength[:, None, None] * ez[:, None] * ez[None, :]
        a = (w * off_ray).sum(1) + plane + 1e-4 * torch.eye(3, dtype=d.dtype)  # the ridge: defined with no ray trusted
        b = (w * off_ray @ self.origin[None, :, None, :, None]).sum(1)[..., 0] + (strength * height)[..., None] * ez
        return torch.linalg.solve(a, b)


def _conv(cin: int, cout: int, dilation: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=dilation, dilation=dilation), nn.BatchNorm2d(cout), nn.ReLU())


class KeypointHead(nn.Module):
    """(B, views, C, h, w) feature maps → {"uv": (B, views, P, 2), "heat": (B, views, P, h·w) logits,
    "positions": (B, P, 3) metres}. Dilated convolutions give each cell a view of the whole table; coordinate
    channels let a heatmap know where it is."""

    def __init__(self, channels: int, size: int, views: list[str], width: int = 48, readout: bool = False):
        super().__init__()
        self.views, self.size = list(views), size
        self.conv = nn.Sequential(_conv(channels + 2, width, 1), _conv(width, width, 2), _conv(width, width, 4),
                                  _conv(width, width, 8), _conv(width, width, 1))
        self.heat = nn.Conv2d(width, len(POINTS), 1)
        n = len(views) * (len(POINTS) * 3 + width)
        self.correct = nn.Sequential(nn.Linear(n, 256), nn.ReLU(), nn.Linear(256, len(POINTS) * 3))
        nn.init.zeros_(self.correct[-1].weight)  # starts as pure triangulation
        nn.init.zeros_(self.correct[-1].bias)
        self.triangulate = Triangulate(views)
        self.register_buffer("grid", cell_centres(size), persistent=False)
        self.readout = Readout(len(views), width, n) if readout else None

    def forward(self, fmap: torch.Tensor, refine: Callable[[torch.Tensor], torch.Tensor] | None = None
                ) -> dict[str, torch.Tensor]:
        """`refine`: coarse image coordinates → finer ones (refine.py), which the rays go through."""
        b, v = fmap.shape[:2]
        x = fmap.flatten(0, 1).float()
        grid = self.grid.reshape(2, self.size, self.size)[None].expand(len(x), -1, -1, -1)
        h = self.conv(torch.cat([x, grid], 1))
        heat = self.heat(h).flatten(2)  # (B·V, P, h·w)
        p = F.softmax(heat, -1)
        uv = torch.einsum("bpn,cn->bpc", p, self.grid).reshape(b, v, len(POINTS), 2)
        peak = p.max(-1).values.reshape(b, v, len(POINTS), 1)
        z = torch.cat([torch.cat([uv, peak], -1).flatten(2), h.mean((2, 3)).reshape(b, v, -1)], -1).flatten(1)
        out = {"uv": uv, "heat": heat.reshape(b, v, len(POINTS), -1)}
        rays = uv if refine is None else refine(uv)
        if self.readout is None:
            cm = self.triangulate(rays)
        else:
            local = torch.einsum("bpn,bcn->bpc", p, h.flatten(2)).reshape(b, v, len(POINTS), -1)  # features at the point
            out |= self.readout(local, peak, z)
            cm = self.triangulate.weighted(rays, torch.sigmoid(out["visible"]), out["height"], self.readout.strength())
        cm = cm + self.correct(z).reshape(b, len(POINTS), 3)
        return out | {"positions": cm / 100.0 + torch.as_tensor(CENTER, dtype=cm.dtype)}


class Readout(nn.Module):
    """Per point, from its heatmap-pooled features: whether each view sees it ("visible" logits (B, V, P)), its height
    ("height" (B, P), cm from CENTER) and the READOUT_SLOTS' logits ("slot/<name>")."""

    def __init__(self, views: int, width: int, context: int):
        super().__init__()
        self.visible = nn.Linear(width + 1, 1)
        self.mlp = nn.Sequential(nn.Linear(views * len(POINTS) * width + context, 256), nn.ReLU(),
                                 nn.Linear(256, len(POINTS) + sum(READOUT_SLOTS.values())))
        # how much the height prior counts against a ray (1/cm² per unit ray weight): starts at 0.02, learned
        self.log_strength = nn.Parameter(torch.full((len(POINTS),), float(np.log(0.02))))

    def strength(self) -> torch.Tensor:
        return self.log_strength.exp()

    def forward(self, local: torch.Tensor, peak: torch.Tensor, context: torch.Tensor) -> dict[str, torch.Tensor]:
        visible = self.visible(torch.cat([local, peak], -1))[..., 0]
        y = self.mlp(torch.cat([local.flatten(1), context], -1))
        out = {"visible": visible, "height": y[:, :len(POINTS)]}
        for name, logits in zip(READOUT_SLOTS, torch.split(y[:, len(POINTS):], list(READOUT_SLOTS.values()), -1)):
            out[f"slot/{name}"] = logits
        return out


def cell_centres(size: int) -> torch.Tensor:
    """(2, size·size): x and y of each cell's centre in [-1, 1]."""
    g = torch.linspace(-1 + 1 / size, 1 - 1 / size, size)
    yy, xx = torch.meshgrid(g, g, indexing="ij")
    return torch.stack([xx.flatten(), yy.flatten()])


def point_positions(state: np.ndarray) -> np.ndarray:
    """State vectors (N, STATE_DIM) (slots.state_vector) → the tracked points' positions (N, P, 3)."""
    return np.stack([state[:, 0:3]] + [state[:, 4 + 7 * i: 7 + 7 * i] for i in range(len(OBJECTS))], 1)


def with_positions(state: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """A state vector (slots.state_vector) with its points' positions replaced by `positions` (P, 3)."""
    out = np.array(state, dtype=np.float32, copy=True)
    out[0:3] = positions[0]
    for i in range(len(OBJECTS)):
        out[4 + 7 * i: 7 + 7 * i] = positions[1 + i]
    return out


def keypoint_loss(out: dict[str, torch.Tensor], uv: torch.Tensor, seen: torch.Tensor, positions: torch.Tensor,
                  used: torch.Tensor, size: int, slots: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """Heatmap cross-entropy against a Gaussian (σ = one cell) at the true projection, plus the soft-argmax's L1
    distance to it, over points in the frame (`seen` (B, V, P)); smooth L1 on the 3D position (cm) over the points the
    task uses (`used` (B, P)). With a readout: cross-entropy of each view seeing each used point, smooth L1 on the
    height, and the readout slots' cross-entropy against `slots` (name → class (B,), -1: does not apply)."""
    grid = cell_centres(size)
    d2 = ((grid[None, None, None] - uv[..., None]) ** 2).sum(3)  # (B, V, P, h·w)
    target = torch.exp(-d2 / (2 * (2.0 / size) ** 2))
    target = target / target.sum(-1, keepdim=True).clamp_min(1e-9)
    ce = -(target * F.log_softmax(out["heat"], -1)).sum(-1)
    l1 = (out["uv"] - uv).abs().sum(-1) * size / 2  # in cells
    seen = seen.float()
    image = ((ce + l1) * seen).sum() / seen.sum().clamp_min(1)
    cm = (out["positions"] - torch.as_tensor(CENTER, dtype=out["positions"].dtype)) * 100
    target_cm = (positions - torch.as_tensor(CENTER, dtype=positions.dtype)) * 100
    used = used.float()
    space = (F.smooth_l1_loss(cm, target_cm, reduction="none", beta=0.5).mean(-1) * used).sum() / used.sum().clamp_min(1)
    terms = {"image": image, "space": space}
    if "visible" in out:
        per_view = used[:, None].expand_as(seen)
        vis = F.binary_cross_entropy_with_logits(out["visible"], seen, reduction="none")
        height = F.smooth_l1_loss(out["height"], target_cm[..., 2], reduction="none", beta=0.5)
        ce = [F.cross_entropy(out[f"slot/{k}"], t.clamp_min(0), reduction="none")[t >= 0] for k, t in (slots or {}).items()]
        terms |= {"visible": (vis * per_view).sum() / per_view.sum().clamp_min(1),
                  "height": (height * used).sum() / used.sum().clamp_min(1),
                  "slots": torch.cat(ce).mean() if ce and sum(len(c) for c in ce) else cm.new_zeros(())}
    return terms
