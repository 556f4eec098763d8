"""The ops whose nan the onnxruntime backend checks itself, in float32 conv nets (max pools,
a max over each channel, an argmax over classes): the imported artifact on both backends
against bare onnxruntime on the exported ONNX file, in one run (:mod:`bench.onnx_sides`:
each side in its own child process, blocks alternating).

The ABI's ``max_pool``, ``amax`` and ``argmax`` give nan (the first nan's index) where their
window or axis holds one, as torch and the numpy backend do; onnxruntime's MaxPool, ReduceMax
and ArgMax skip it. So the onnxruntime backend adds a check to each (``glue.py``): to a max
pool of 8 channels or more the pool times a depthwise Conv of HardSigmoid(x) (weights
0, bias 1: exactly 1, or nan where the window holds one; of an x without -inf, after a
ReLU or a SiLU, a Conv of x itself, weights 2^-5 for a 3x3 window, and a fused Clip to [1, 1]),
ops that onnxruntime keeps in its blocked-channel (NCHWc) layout with the convs around
(elsewhere an IsNaN mask, whose ops take the tensors out of that layout and back); to
``amax`` a Clip to [1, 1] of the sum of squares over the same axes; around ``argmax`` an If
on whether x holds a nan at all, the mask that finds the first one only in the branch where
one is. This measures what the checks cost.

Models, exported by torch's legacy exporter: a ResNet-like net (a 7x7 stride-2 conv, batch
norm, ReLU, a 3x3 stride-2 max pool, three pairs of 3x3 convs) on a 3x224x224 input; a
VGG-like one (three 3x3 convs of 32, 64 and 128 channels, each followed by a 2x2 max pool)
on 3x128x128; YOLO's SPPF block (a 1x1 conv, three 5x5 stride-1 max pools in a row, their
concatenation, a 1x1 conv) on 64x40x40, once of plain convs and once as YOLOv5 and YOLOv8
write it (each conv with batch norm and a SiLU, so the pools take a SiLU's output); CBAM's
channel attention (a 3x3 conv, a shared MLP of each channel's mean and of its max,
``amax``, a 3x3 conv) on 32x56x56; a segmentation head (a 3x3 conv, a 1x1 conv to 19
classes, the argmax over them) on 32x128x256. There is no target for these: the ratios say
what such a net costs through the host.

    .venv/bin/python bench/bench_extremes.py [--runs 200] [--rounds 6] [--models vgg ...]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.onnx_sides import Model, main  # noqa: E402


def _export(net_of: Callable) -> Callable:
    """``export`` of :class:`Model`: torch's ``net_of()`` (seeded), in eval mode, exported by
    the legacy exporter."""
    def export(x: np.ndarray, path: Path) -> None:
        import torch

        torch.manual_seed(0)
        torch.onnx.export(net_of().eval(), (torch.from_numpy(x),), str(path),
                          input_names=["x"], output_names=["y"], dynamo=False)
    return export


def _resnet():
    from torch import nn

    def pair(c_in: int, c: int, stride: int):
        return nn.Sequential(nn.Conv2d(c_in, c, 3, stride, 1, bias=False), nn.BatchNorm2d(c),
                             nn.ReLU(), nn.Conv2d(c, c, 3, 1, 1, bias=False),
                             nn.BatchNorm2d(c), nn.ReLU())
    return nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                         nn.MaxPool2d(3, 2, 1), pair(64, 64, 1), pair(64, 128, 2),
                         pair(128, 256, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(256, 10))


def _vgg():
    from torch import nn

    layers, channels = [], 3
    for width in (32, 64, 128):
        layers += [nn.Conv2d(channels, width, 3, 1, 1), nn.ReLU(), nn.MaxPool2d(2)]
        channels = width
    return nn.Sequential(*layers)


def _sppf(yolo: bool = False):
    import torch
    from torch import nn

    def conv(c_in: int, c: int):  # YOLO's Conv: with batch norm and SiLU
        return (nn.Sequential(nn.Conv2d(c_in, c, 1, bias=False), nn.BatchNorm2d(c), nn.SiLU())
                if yolo else nn.Conv2d(c_in, c, 1))

    class Sppf(nn.Module):
        """YOLO's spatial pyramid pooling, fast: one 5x5 pool applied three times."""

        def __init__(self):
            super().__init__()
            self.reduce, self.pool = conv(64, 32), nn.MaxPool2d(5, 1, 2)
            self.out = conv(128, 64)

        def forward(self, x):
            x = self.reduce(x)
            a = self.pool(x)
            b = self.pool(a)
            return self.out(torch.cat([x, a, b, self.pool(b)], 1))

    return Sppf()


def _channel_attention():
    from torch import nn

    class Attention(nn.Module):
        """CBAM's channel attention: a shared MLP of each channel's mean and max, summed,
        a sigmoid, the features scaled by it."""

        def __init__(self, c: int):
            super().__init__()
            self.mlp = nn.Sequential(nn.Conv2d(c, c // 8, 1), nn.ReLU(), nn.Conv2d(c // 8, c, 1))

        def forward(self, x):
            both = self.mlp(x.mean((2, 3), keepdim=True)) + self.mlp(x.amax((2, 3), keepdim=True))
            return x * both.sigmoid()

    return nn.Sequential(nn.Conv2d(32, 64, 3, 1, 1), nn.ReLU(), Attention(64),
                         nn.Conv2d(64, 64, 3, 1, 1))


def _segmentation_head():
    from torch import nn

    class Head(nn.Module):
        """Per-pixel class scores and the class of each pixel."""

        def __init__(self):
            super().__init__()
            self.scores = nn.Sequential(nn.Conv2d(32, 64, 3, 1, 1), nn.ReLU(),
                                        nn.Conv2d(64, 19, 1))

        def forward(self, x):
            return self.scores(x).argmax(1)

    return Head()


MODELS = {
    "resnet": Model(_export(_resnet), (1, 3, 224, 224), 4, "float32, one 3x3 max pool"),
    "vgg": Model(_export(_vgg), (1, 3, 128, 128), 4, "float32, three 2x2 max pools"),
    "sppf": Model(_export(_sppf), (1, 64, 40, 40), 4, "float32, three 5x5 max pools"),
    "yolo_sppf": Model(_export(lambda: _sppf(yolo=True)), (1, 64, 40, 40), 4,
                       "float32, three 5x5 max pools of a SiLU's output"),
    "attention": Model(_export(_channel_attention), (1, 32, 56, 56), 4,
                       "float32, a max over each channel"),
    "segmentation": Model(_export(_segmentation_head), (1, 32, 128, 256), 4,
                          "float32, an argmax over 19 classes"),
}

if __name__ == "__main__":
    sys.exit(main(__file__, __doc__, MODELS))
