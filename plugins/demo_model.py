"""The benchmark model of the design (openpilot-like), built from the project's own layers.

Inputs ``img float32 (1,12,128,256) NCHW`` (two stacked YUV420 frames), ``desire int64 (1,)``
in ``[0, 8)``, and the recurrent ``h, c float32 (1,512)``. Vision: four
``Conv2d 3x3 s2 p1 -> BatchNorm2d -> ReLU`` blocks (12 -> 32 -> 64 -> 128 -> 256 channels),
then ``Conv2d 1x1 256 -> 32``; flatten (4096) -> ``Linear 4096 -> 512`` -> ReLU; concat with
``Embedding(8, 32)(desire)`` -> ``LayerNorm(544)`` -> ``LSTMCell(544, 512)`` ->
``Linear 512 -> 66`` (the plan). Outputs ``plan (1,66)`` and the next ``h, c`` (``h_next``,
``c_next``), which the executor carries as recurrent state.

Weights are random (seeded); BatchNorm gets non-trivial running statistics so that inference
really depends on them. The tensor names (``vision.0.conv.weight`` ...) are the state-dict
keys of the equivalent torch module in ``bench/torch_demo.py``.

Registered through the ``plugin_host_add_model_builders`` hook as ``"demo"``.
"""

from __future__ import annotations

import math

import numpy as np

from plugin_host.builder import GraphBuilder
from plugin_host.graph import Graph
from plugin_host.hooks import hookimpl

from . import nn

CHANNELS = (12, 32, 64, 128, 256)
IMG_SHAPE = (1, 12, 128, 256)
HIDDEN = 512
DESIRES = 8


def _randomize(layer, rng: np.random.Generator) -> None:
    """Seeded weights in torch's default ranges; non-trivial BatchNorm statistics."""
    if isinstance(layer, nn.BatchNorm):
        c = layer.running_mean.shape[0]
        layer.weight = rng.uniform(0.5, 1.5, c).astype(np.float32)
        layer.bias = rng.normal(0.0, 0.2, c).astype(np.float32)
        layer.running_mean = rng.normal(0.0, 0.5, c).astype(np.float32)
        layer.running_var = rng.uniform(0.25, 4.0, c).astype(np.float32)
        layer.num_batches_tracked = np.array(1000, dtype=np.int64)
        return
    if isinstance(layer, nn.LayerNorm):
        shape = layer.weight.shape
        layer.weight = rng.uniform(0.5, 1.5, shape).astype(np.float32)
        layer.bias = rng.normal(0.0, 0.2, shape).astype(np.float32)
        return
    if isinstance(layer, nn.Embedding):
        layer.weight = rng.normal(0.0, 1.0, layer.weight.shape).astype(np.float32)
        return
    for name, array in layer.abi_tensors().items():
        if array is None:
            continue
        fan_in = array[0].size if name.startswith("weight") else None
        if isinstance(layer, nn.LSTMCell):
            fan_in = HIDDEN
        bound = 1.0 / math.sqrt(fan_in or array.size)
        setattr(layer, name, rng.uniform(-bound, bound, array.shape).astype(np.float32))


def build_demo_graph(seed: int = 0) -> Graph:
    """The benchmark model with weights drawn from ``seed``."""
    rng = np.random.default_rng(seed)

    def layer(name, module, *data):
        _randomize(module, rng)
        return b.layer(name, module, *data)

    b = GraphBuilder("demo")
    x = b.input("img", IMG_SHAPE, "float32", "NCHW")
    desire = b.input("desire", (1,), "int64", "N")
    h = b.state("h", (1, HIDDEN), "float32", "NC")
    c = b.state("c", (1, HIDDEN), "float32", "NC")
    for i, (cin, cout) in enumerate(zip(CHANNELS, CHANNELS[1:])):
        x = layer(f"vision.{i}.conv", nn.Conv2d(cin, cout, 3, stride=2, padding=1), x)
        x = b.op("relu", layer(f"vision.{i}.bn", nn.BatchNorm2d(cout), x))
    x = b.op("flatten", layer("vision.4.conv", nn.Conv2d(256, 32, 1), x), start_dim=1)
    x = b.op("relu", layer("fc", nn.Linear(4096, HIDDEN), x))
    x = b.op("concat", x, layer("desire_emb", nn.Embedding(DESIRES, 32), desire), axis=1)
    x = layer("ln", nn.LayerNorm(HIDDEN + 32), x)
    h_next, c_next = layer("lstm", nn.LSTMCell(HIDDEN + 32, HIDDEN), x, h, c)
    b.output(layer("plan", nn.Linear(HIDDEN, 66), h_next), "plan", "NC")
    b.output(h_next, "h_next", "NC", state_of="h")
    b.output(c_next, "c_next", "NC", state_of="c")
    return b.build()


def demo_inputs(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """One synthetic frame's feed inputs for the demo model."""
    return {
        "img": rng.standard_normal(IMG_SHAPE, dtype=np.float32),
        "desire": rng.integers(0, DESIRES, size=(1,), dtype=np.int64),
    }


@hookimpl
def plugin_host_add_model_builders():
    return {"demo": build_demo_graph}
