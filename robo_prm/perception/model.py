"""PerceptionNet: one image tower shared by the CLIP embedding and the caption heads.

frame (one camera view, or several side by side: each through the trunk) → Trunk (EfficientNet-Lite0, stride 16)
→ Neck (shared vector z) →
  * `embed`: the CLIP image embedding (L2-normalised), for the judge cache, novelty and goal similarity;
  * one classification head per caption slot (slots.py), rendered to text by render.py;
  * `preds`: task predicates (success, milestones, hazards) of the tasks it was trained on;
  * `progress`: the simulator's rule progress per trained task;
  * `state`: a coarse state vector, to check the predicates of tasks it was not trained on;
  * `positions` (models with a keypoint head): the gripper's and each object's 3D position, from heatmaps on an
    early, fine feature map of each view, triangulated (keypoints.py); a head with a readout adds its logits for the
    slots read at the points (gripper open / holding, upright, moving) to the slot heads'; a window slot head
    (window_slots.py) reads the same slots again from the frame's pixels around the points.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from robo_prm.perception.backbone import BLOCK_CHANNELS, BLOCK_STRIDE, Neck, Trunk, split_views
from robo_prm.perception.keypoints import POINTS, KeypointHead
from robo_prm.perception.refine import PatchRefiner, crop_patches, refine_uv
from robo_prm.perception.slots import STATE_DIM, slot_sizes
from robo_prm.perception.window_slots import WindowSlotHead, add_window_slots


@dataclass
class NetConfig:
    size: int = 128  # input frame width = height
    trunk_blocks: int = 11  # Lite0 blocks kept (11: stride 16, 112 channels)
    neck_width: int = 32
    hidden: int = 384
    embed_dim: int = 128
    tasks: list[str] = field(default_factory=list)  # tasks with predicate / progress heads
    predicate_keys: list[str] = field(default_factory=list)  # 'task:key' columns of the predicate head
    text_model: str = "minilm"  # text tower the embedding is aligned with (see clip.py)
    text_dim: int = 384
    views: list[str] = field(default_factory=lambda: ["front"])  # camera views side by side (envs.tidy_env.VIEWS)
    carried_slots: bool = False  # heads for a carried object's edge and target clauses (slots.CARRIED_SLOTS)
    keypoint_blocks: int = 0  # > 0: a keypoint head (keypoints.py) reads the trunk after this many blocks; 0: none
    keypoint_width: int = 48
    keypoint_readout: bool = False  # the head also reads visibility, height and READOUT_SLOTS at its points
    keypoint_slot_mix: float = 1.0  # READOUT_SLOTS' logits = the slot heads' + this × the readout's (0: heads alone)
    keypoint_refine: bool = False  # a PatchRefiner moves each keypoint by the frame's own pixels (refine.py)
    window_slots: bool = False  # a WindowSlotHead reads the READOUT_SLOTS from those pixels too (window_slots.py)
    window_motion: bool = False  # … and the previous env step's frame at the same places (forward's `previous`)
    # how captions weigh the positions against the slot heads (placed.py); chosen by train-keypoints on held-out frames
    keypoint_sigma: float = 0.003
    keypoint_weight: float = 1.0
    keypoint_samples: int = 24


class PerceptionNet(nn.Module):
    def __init__(self, cfg: NetConfig, imagenet: bool = True):
        super().__init__()
        self.cfg = cfg
        self.trunk = Trunk(cfg.size, cfg.trunk_blocks, imagenet=imagenet)
        self.neck = Neck(self.trunk.channels, self.trunk.out_size, cfg.neck_width, cfg.hidden, views=len(cfg.views))
        h = self.neck.dim
        self.embed = nn.Linear(h, cfg.embed_dim)
        sizes = slot_sizes(cfg.carried_slots)
        self.slot_names = list(sizes)
        self.slots = nn.Linear(h, sum(sizes.values()))  # all slot heads as one matrix, split by slot_sizes
        self._splits = list(sizes.values())
        self.preds = nn.Linear(h, max(1, len(cfg.predicate_keys)))
        self.progress = nn.Linear(h, max(1, len(cfg.tasks)))
        self.state = nn.Linear(h, STATE_DIM)
        # open_clip's learnable temperature, init log(1/0.07)
        self.logit_scale = nn.Parameter(torch.tensor(2.6592))
        k = cfg.keypoint_blocks
        self.keypoints = KeypointHead(BLOCK_CHANNELS[k - 1], -(-cfg.size // BLOCK_STRIDE[k - 1]), cfg.views,
                                      cfg.keypoint_width, cfg.keypoint_readout) if k else None
        self.refiner = PatchRefiner(len(cfg.views), len(POINTS)) if k and cfg.keypoint_refine else None
        self.window_slots = WindowSlotHead(len(cfg.views), len(POINTS), motion=cfg.window_motion) \
            if k and cfg.window_slots else None

    def tiles(self, images: torch.Tensor) -> torch.Tensor:
        """(B, 3, S, views·S) → (B·views, 3, S, S): what the trunk reads."""
        return split_views(images, len(self.cfg.views))

    def features(self, images: torch.Tensor) -> torch.Tensor:
        return self.neck(self.trunk(self.tiles(images)))

    def encode_image(self, images: torch.Tensor, normalize: bool = True) -> torch.Tensor:
        e = self.embed(self.features(images))
        return F.normalize(e, dim=-1) if normalize else e

    @property
    def reads_motion(self) -> bool:
        """Whether forward reads a `previous` frame (a window slot head with motion)."""
        return self.window_slots is not None and self.window_slots.motion

    def forward(self, images: torch.Tensor, previous: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """`previous`: each frame's previous env step (same shape as images), read by a motion head, ignored
        otherwise; None: the frames alone."""
        if self.keypoints is None:
            return self.heads(self.features(images))
        tiles = self.tiles(images)
        early = self.trunk.prefix(tiles, self.cfg.keypoint_blocks)  # the keypoint head's map, on the way
        out = self.heads(self.neck(self.trunk.rest(early, self.cfg.keypoint_blocks)))
        refine = None if self.refiner is None else partial(refine_uv, self.refiner, tiles)
        points = self.keypoints(self.per_frame(early, len(images)), refine)
        out["positions"] = points["positions"]
        for name in (k for k in points if k.startswith("slot/")):  # read where the points are, with the heads' view
            out[name] = out[name] + self.cfg.keypoint_slot_mix * points[name]
        if self.window_slots is not None:  # windows at the heatmaps' own positions, as the head was trained on
            before = crop_patches(self.tiles(previous), points["uv"]) if previous is not None and self.reads_motion \
                else None
            add_window_slots(out, self.window_slots, crop_patches(tiles, points["uv"]), before)
        return out

    @staticmethod
    def per_frame(fmap: torch.Tensor, frames: int) -> torch.Tensor:
        """(B·views, C, h, w) maps of the views' tiles → (B, views, C, h, w)."""
        return fmap.reshape(frames, -1, *fmap.shape[1:])

    def heads(self, z: torch.Tensor) -> dict[str, torch.Tensor]:
        """The shared vector → every head's output (the CLIP embedding unit-norm)."""
        out = {"embed": F.normalize(self.embed(z), dim=-1), "preds": self.preds(z), "progress": self.progress(z),
               "state": self.state(z)}
        for name, logits in zip(self.slot_names, torch.split(self.slots(z), self._splits, dim=-1)):
            out[f"slot/{name}"] = logits
        return out
