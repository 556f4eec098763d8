"""Branches summed onto a constant 0 (MobileOne's blocks before reparameterization): the
imported artifact on both backends against bare onnxruntime on the exported ONNX file, in one
run (:mod:`bench.onnx_sides`: each side in its own child process, blocks alternating).

timm's MobileOne sums a block's branches onto ``0`` where the block has no identity branch
(``out += identity``, ``identity = 0``) or no scale branch (``out = 0``, then ``out +=`` each
conv branch), which torch exports as an Add of a constant 0 after a Conv (the BatchNorm folded
into it) or after the Add of two branches. Bare onnxruntime drops those Adds (its no-op
elimination); the onnxruntime backend leaves that optimization off (README, "The onnxruntime
backend"), and an Add left between the convs splits onnxruntime's blocked layout. The import
folds each such Add into a conv's bias (``plugin_host/onnx_import/fusion.py``), so neither
backend runs it. The model: MobileOne's blocks as timm writes them (a depthwise 3x3 block with
its 1x1 scale branch, then a pointwise one; four conv branches each, an identity BatchNorm
where the shape allows), a stem and four stages of 2, 4, 4 and 1 at MobileOne-S0's widths (48
to 1024 channels), over a 3x160x160 input, random weights, exported by torch's legacy exporter.
There is no target: the ratio says what such a model costs through the host; ``--keep-adds``
builds the artifact with the fold turned off, for the comparison.

    .venv/bin/python bench/bench_branches.py [--runs 200] [--rounds 6] [--keep-adds]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.onnx_sides import Model, main  # noqa: E402

#: (out channels, blocks) of each stage after the stem (MobileOne-S0's widths, fewer blocks)
STAGES = [(48, 2), (128, 4), (256, 4), (1024, 1)]
#: conv branches of each block (MobileOne-S0's)
BRANCHES = 4


def _export(x: np.ndarray, path: Path) -> None:
    """``export`` of :class:`Model`: the network of :data:`STAGES`, seeded, exported."""
    import torch

    def bn(channels):
        norm = torch.nn.BatchNorm2d(channels)
        norm.running_mean.uniform_(-0.5, 0.5)
        norm.running_var.uniform_(0.5, 2.0)
        return norm

    def conv_bn(cin, cout, kernel, stride, groups):
        return torch.nn.Sequential(torch.nn.Conv2d(cin, cout, kernel, stride, kernel // 2,
                                                   groups=groups, bias=False), bn(cout))

    class Block(torch.nn.Module):
        """timm's MobileOneBlock before reparameterization: a 1x1 scale branch where the
        kernel is larger, an identity BatchNorm where the shape allows, conv branches."""

        def __init__(self, cin, cout, kernel, stride, groups):
            super().__init__()
            self.identity = bn(cout) if cin == cout and stride == 1 else None
            self.scale = conv_bn(cin, cout, 1, stride, groups) if kernel > 1 else None
            self.branches = torch.nn.ModuleList(conv_bn(cin, cout, kernel, stride, groups)
                                                for _ in range(BRANCHES))

        def forward(self, x):  # as timm's: the sums start at 0 where a branch is missing
            identity = self.identity(x) if self.identity is not None else 0
            out = self.scale(x) if self.scale is not None else 0
            for branch in self.branches:
                out += branch(x)
            out += identity
            return torch.relu(out)

    torch.manual_seed(0)
    blocks, cin = [Block(3, 48, 3, 2, 1)], 48
    for cout, count in STAGES:
        for i in range(count):
            stride = 2 if i == 0 else 1
            blocks += [Block(cin, cin, 3, stride, cin), Block(cin, cout, 1, 1, 1)]
            cin = cout
    net = torch.nn.Sequential(*blocks).eval()
    torch.onnx.export(net, (torch.from_numpy(x),), str(path), input_names=["x"],
                      output_names=["y"], dynamo=False)


MODELS = {"mobileone": Model(_export, (1, 3, 160, 160), 1,
                             "MobileOne-S0-like, branches summed onto 0, 3x160x160")}

if __name__ == "__main__":
    if "--keep-adds" in sys.argv:  # the children load the artifact the parent built
        sys.argv.remove("--keep-adds")
        os.environ["BENCH_BRANCHES_KEEP_ADDS"] = "1"
    if os.environ.get("BENCH_BRANCHES_KEEP_ADDS"):
        from plugin_host.onnx_import import fusion

        fusion._zero_add = lambda *args: False  # the build keeps every Add of zeros
    sys.exit(main(__file__, __doc__, MODELS))
