"""Float32 conv nets normalized per group or per channel (``group_norm``, ``instance_norm``):
the imported artifact on both backends against bare onnxruntime on the exported ONNX file, in
one run (:mod:`bench.onnx_sides`: each side in its own child process, blocks alternating).

torch exports a GroupNorm as a Reshape to (N, groups, -1), an InstanceNormalization of unit
scale, a Reshape back, a Mul and an Add, and an InstanceNorm as InstanceNormalization; the
import makes them one ``group_norm`` or ``instance_norm``, which the onnxruntime backend runs
as onnxruntime's LayerNormalization over each group's (or channel's) values, a GroupNorm of one
group with its weight and bias inside that op (``plugins/onnxruntime_backend/layers.py``).

Models, exported by torch's legacy exporter, their norms' weights and biases drawn (as trained
ones would be, rather than the ones and zeros they start with): PoolFormer's blocks (a 7x7
stride-4 stem, blocks of a GroupNorm of one group, a 3x3 average pool less its input, a
GroupNorm, a 1x1 conv MLP with GELU, two blocks at 64 channels, a stride-2 conv, two at 128)
on 3x224x224; a detection head's tower (four 3x3 convs of 128 channels, each with a GroupNorm
of 32 groups and a ReLU, as FCOS and RetinaNet heads with GroupNorm) on 128x40x40; a style
transfer net's encoder (a 9x9 conv, InstanceNorm, ReLU, a 3x3 stride-2 conv, InstanceNorm,
ReLU) on 3x128x128. There is no target for these: the ratios say what such a net costs
through the host.

    .venv/bin/python bench/bench_norms.py [--runs 200] [--rounds 6] [--models poolformer ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_extremes import _export  # noqa: E402
from bench.onnx_sides import Model, main  # noqa: E402


def _drawn(net):
    """``net`` with each norm's weight and bias drawn (seeded by the export)."""
    import torch
    from torch import nn

    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, (nn.GroupNorm, nn.InstanceNorm2d)) and m.affine:
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.3)
    return net


def _poolformer():
    from torch import nn

    class Block(nn.Module):
        """PoolFormer's block: x + pool(norm(x)) - norm(x), then x + mlp(norm(x))."""

        def __init__(self, c: int):
            super().__init__()
            self.n1, self.n2 = nn.GroupNorm(1, c), nn.GroupNorm(1, c)
            self.pool = nn.AvgPool2d(3, 1, 1, count_include_pad=False)
            self.mlp = nn.Sequential(nn.Conv2d(c, 4 * c, 1), nn.GELU(), nn.Conv2d(4 * c, c, 1))

        def forward(self, x):
            y = self.n1(x)
            x = x + self.pool(y) - y
            return x + self.mlp(self.n2(x))

    return _drawn(nn.Sequential(nn.Conv2d(3, 64, 7, 4, 2), Block(64), Block(64),
                                nn.Conv2d(64, 128, 3, 2, 1), Block(128), Block(128)))


def _head():
    from torch import nn

    layers = []
    for _ in range(4):
        layers += [nn.Conv2d(128, 128, 3, 1, 1), nn.GroupNorm(32, 128), nn.ReLU()]
    return _drawn(nn.Sequential(*layers))


def _style():
    from torch import nn

    return _drawn(nn.Sequential(nn.Conv2d(3, 32, 9, 1, 4), nn.InstanceNorm2d(32, affine=True),
                                nn.ReLU(), nn.Conv2d(32, 64, 3, 2, 1),
                                nn.InstanceNorm2d(64, affine=True), nn.ReLU()))


MODELS = {
    "poolformer": Model(_export(_poolformer), (1, 3, 224, 224), 4,
                        "float32, GroupNorms of one group"),
    "gn_head": Model(_export(_head), (1, 128, 40, 40), 4, "float32, GroupNorms of 32 groups"),
    "style": Model(_export(_style), (1, 3, 128, 128), 4, "float32, InstanceNorms"),
}

if __name__ == "__main__":
    sys.exit(main(__file__, __doc__, MODELS))
