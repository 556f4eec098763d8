"""Quantized models: the imported artifact on both backends against bare onnxruntime on the
quantized ONNX file, in one run (:mod:`bench.onnx_sides`: each side in its own child process,
blocks alternating).

Exports torch models and quantizes each. With ``quantize_dynamic`` (uint8 weights: exact on
every CPU, see README "Quantized models"): an MLP 512-1024-1024-10 on a batch of 8 (its weights
dominate: integer GEMMs on one byte per weight; the graph the import writes:
``dynamic_quantize`` and ``integer_linear``), torch's ``TransformerEncoderLayer(256, 4, 512)``
over 64 tokens (exported by the dynamo exporter), and torch's LSTM of 64 units over 1,024 steps
(one ``quantized_lstm``, where onnxruntime runs one DynamicQuantizeLSTM kernel; a 20th of the
runs), and the benchmark model's conv tower (``cnn_dynamic``, below; ConvInteger, which the
import makes float32 convs of the integers); the MLP with int8 weights too, the quantizer's
default, which builds only where onnxruntime's u8 x s8 kernels sum exactly (x86-64 with VNNI;
elsewhere the build is refused and the benchmark says so). With ``quantize_static`` (uint8
activations, calibrated on four random inputs): the benchmark model's conv tower
(12-32-64-128-256 channels, 3x3 stride 2, then a 1x1 to 32) over a 12x128x256 input, in the QDQ
format with uint8 and with int8 weights (``quantize_linear`` and float32 convs, each pair of
quantize and dequantize one QuantizeLinear and one DequantizeLinear on the onnxruntime backend;
bare onnxruntime fuses QDQ into its integer convs, so the outputs may differ by a rounding step)
and in the QOperator format (``qlinear_conv``: onnxruntime's QLinearConv, bit for bit) with
uint8 and with int8 weights (the int8 one built only where the MLP's int8 one is); the two QDQ
ones also built with ``--onnxruntime-optimized`` (``cnn_qdq_optimized``,
``cnn_qdq_int8_optimized``: the graph onnxruntime's extended optimizations make of the file,
its QLinearConvs imported as ``qlinear_conv``, so what bare onnxruntime runs, bit for bit;
bare onnxruntime still runs the file as quantized); and a small detector of YOLOv8's parts
over a 256x256 image (``detector_qdq_optimized``: QDQ, int8 weights of 7 bits per channel,
built so: its SiLUs, residual add, concats and softmax onnxruntime's QLinearSigmoid,
QLinearMul, QLinearAdd, QLinearConcat and QLinearSoftmax, the ABI's ``qlinear_*`` ops); and a
small classifier of MobileNetV3's and EfficientNet's parts over a 224x224 image in the
QOperator format (``classifier_qoperator``: its max pool of codes, depthwise convs, SiLUs,
squeeze-and-excitation gates' global pools, residual adds and head: onnxruntime's kernels),
and one of DenseNet's parts (``densenet_qoperator``: concatenated dense layers, transitions'
2x2 average pools of codes, onnxruntime's QLinearAveragePool; ``densenet_qdq_optimized``: the
same in the QDQ format built so, onnxruntime's optimizer writing those pools).
Bare onnxruntime runs with its own fusions. There is no target for these: the ratios say what a
quantized model costs through the host, and the outputs' agreement is printed beside them.

    .venv/bin/python bench/bench_quantized.py [--runs 200] [--rounds 6] [--models mlp ...]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.onnx_sides import Model, main  # noqa: E402


def _float_model(net_of: Callable, x: np.ndarray, path: Path, dynamo: bool) -> str:
    """torch's ``net_of()`` (seeded) exported for input ``x`` beside ``path``: its file."""
    import torch

    torch.manual_seed(0)
    float_path = str(path.with_suffix(".float.onnx"))
    torch.onnx.export(net_of().eval(), (torch.from_numpy(x),), float_path,
                      input_names=["x"], output_names=["y"], dynamo=dynamo)
    return float_path


def _quantized(net_of: Callable, dynamo: bool = False, weights: str = "QUInt8") -> Callable:
    """``export`` of :class:`Model`: torch's ``net_of()`` exported, then quantized by
    ``quantize_dynamic`` (``weights`` as the quantizer's QuantType names them)."""
    def export(x: np.ndarray, path: Path) -> None:
        from onnxruntime import quantization

        quantization.quantize_dynamic(_float_model(net_of, x, path, dynamo), str(path),
                                      weight_type=getattr(quantization.QuantType, weights))
    return export


def _statically_quantized(net_of: Callable, quant_format: str,
                          weights: str = "QUInt8", **options) -> Callable:
    """``export`` of :class:`Model`: torch's ``net_of()`` exported, then quantized by
    ``quantize_static`` in ``quant_format`` (uint8 activations, ``weights`` as the
    quantizer's QuantType names them, ``options`` its others), calibrated on four random
    inputs of x's shape."""
    def export(x: np.ndarray, path: Path) -> None:
        from onnxruntime import quantization

        float_path = _float_model(net_of, x, path, dynamo=False)
        rng = np.random.default_rng(0)
        batches = iter([{"x": rng.standard_normal(x.shape).astype(np.float32)}
                        for _ in range(4)])

        class Batches(quantization.CalibrationDataReader):
            def get_next(self):
                return next(batches, None)

        quantization.quantize_static(
            float_path, str(path), Batches(),
            quant_format=getattr(quantization.QuantFormat, quant_format),
            activation_type=quantization.QuantType.QUInt8,
            weight_type=getattr(quantization.QuantType, weights), **options)
    return export


def _conv_tower():
    """The benchmark model's conv stack (bench/torch_demo.py) without its batch norms (which
    the export folds into the convs)."""
    import torch

    chans, layers = (12, 32, 64, 128, 256), []
    for a, b in zip(chans, chans[1:]):
        layers += [torch.nn.Conv2d(a, b, 3, 2, 1), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers, torch.nn.Conv2d(256, 32, 1))


def _detector():
    """A small one-stage detector of YOLOv8's parts: conv and SiLU blocks, a split, a residual
    add and a concat (C2f), three max pools concatenated (SPPF), a 2x upsampling concatenated
    with an earlier map, and a box head's softmax over 16 bins (DFL)."""
    import torch

    def block(a, b, stride=1):
        return torch.nn.Sequential(torch.nn.Conv2d(a, b, 3, stride, 1), torch.nn.SiLU())

    class Detector(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.stem, self.down = block(3, 32, 2), block(32, 64, 2)
            self.inner, self.join = block(32, 32), block(96, 64)
            self.deep, self.pool = block(64, 64, 2), torch.nn.MaxPool2d(5, 1, 2)
            self.spp, self.neck = block(256, 64), block(128, 64)
            self.head = torch.nn.Conv2d(64, 64, 1)

        def forward(self, x):
            y = self.down(self.stem(x))
            a, b = y.chunk(2, 1)
            y = self.join(torch.cat([a, b, b + self.inner(b)], 1))
            p1 = self.pool(z := self.deep(y))
            p2 = self.pool(p1)
            z = self.spp(torch.cat([z, p1, p2, self.pool(p2)], 1))
            y = self.neck(torch.cat([torch.nn.functional.interpolate(z, scale_factor=2.0), y],
                                    1))
            boxes = self.head(y).flatten(2).view(1, 4, 16, -1)
            return boxes.transpose(1, 2).softmax(1)

    return Detector()


def _se_classifier():
    """A small classifier of MobileNetV3's and EfficientNet's parts: a strided stem conv, a max
    pool, blocks of a depthwise conv with squeeze-and-excitation (a global average pool, two
    1x1 convs, SiLU, a sigmoid gate) and a residual add, a global pool and a Linear."""
    import torch

    class Block(torch.nn.Module):
        def __init__(self, c):
            super().__init__()
            self.depthwise = torch.nn.Conv2d(c, c, 3, 1, 1, groups=c)
            self.squeeze = torch.nn.Conv2d(c, c // 4, 1)
            self.excite = torch.nn.Conv2d(c // 4, c, 1)
            self.project = torch.nn.Conv2d(c, c, 1)

        def forward(self, x):
            y = torch.nn.functional.silu(self.depthwise(x))
            gate = torch.nn.functional.adaptive_avg_pool2d(y, 1)
            gate = torch.sigmoid(self.excite(torch.nn.functional.silu(self.squeeze(gate))))
            return x + self.project(y * gate)

    class Classifier(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = torch.nn.Conv2d(3, 32, 3, 2, 1)
            self.blocks = torch.nn.Sequential(Block(32), Block(32), Block(32))
            self.head = torch.nn.Linear(32, 10)

        def forward(self, x):
            y = torch.nn.functional.max_pool2d(torch.relu(self.stem(x)), 3, 2, 1)
            y = torch.nn.functional.adaptive_avg_pool2d(self.blocks(y), 1)
            return self.head(torch.flatten(y, 1))

    return Classifier()


def _dense_classifier():
    """A small classifier of DenseNet's parts: a strided stem conv, dense layers (a 3x3 conv
    and ReLU concatenated to their input) and transitions of a 1x1 conv and a 2x2 average
    pool, a global pool and a Linear."""
    import torch

    class Dense(torch.nn.Module):
        def __init__(self, c):
            super().__init__()
            self.conv = torch.nn.Conv2d(c, 12, 3, 1, 1)

        def forward(self, x):
            return torch.cat([x, torch.relu(self.conv(x))], 1)

    def transition():
        return torch.nn.Sequential(torch.nn.Conv2d(48, 24, 1), torch.nn.ReLU(),
                                   torch.nn.AvgPool2d(2))

    class Classifier(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = torch.nn.Conv2d(3, 24, 3, 2, 1)
            self.blocks = torch.nn.Sequential(Dense(24), Dense(36), transition(),
                                              Dense(24), Dense(36), transition())
            self.head = torch.nn.Linear(24, 10)

        def forward(self, x):
            y = self.blocks(torch.relu(self.stem(x)))
            return self.head(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(y, 1), 1))

    return Classifier()


def _mlp():
    import torch

    return torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(),
                               torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                               torch.nn.Linear(1024, 10))


def _encoder():
    import torch

    return torch.nn.TransformerEncoderLayer(256, 4, 512, batch_first=True, dropout=0.0)


def _lstm():
    import torch

    class Lstm(torch.nn.Module):
        """torch's LSTM (64 units) over a batch-first sequence: its outputs only."""

        def __init__(self):
            super().__init__()
            self.lstm = torch.nn.LSTM(64, 64, batch_first=True)

        def forward(self, x):
            return self.lstm(x)[0]

    return Lstm()


#: the LSTM's calls are some 100 times longer: a 20th of the runs
MODELS = {
    "mlp": Model(_quantized(_mlp), (8, 512), 1, "quantize_dynamic, uint8 weights"),
    "mlp_int8": Model(_quantized(_mlp, weights="QInt8"), (8, 512), 1,
                      "quantize_dynamic, int8 weights"),
    "encoder": Model(_quantized(_encoder, dynamo=True), (1, 64, 256), 1,
                     "quantize_dynamic, uint8 weights"),
    "lstm": Model(_quantized(_lstm), (1, 1024, 64), 20, "quantize_dynamic, uint8 weights"),
    "cnn_dynamic": Model(_quantized(_conv_tower), (1, 12, 128, 256), 4,
                         "quantize_dynamic, uint8 weights"),
    "cnn_qdq": Model(_statically_quantized(_conv_tower, "QDQ"), (1, 12, 128, 256), 4,
                     "quantize_static, QDQ, uint8"),
    "cnn_qdq_int8": Model(_statically_quantized(_conv_tower, "QDQ", "QInt8"),
                          (1, 12, 128, 256), 4,
                          "quantize_static, QDQ, uint8 activations, int8 weights"),
    "cnn_qdq_optimized": Model(_statically_quantized(_conv_tower, "QDQ"), (1, 12, 128, 256), 4,
                               "quantize_static, QDQ, uint8, built --onnxruntime-optimized",
                               {"onnxruntime_optimized": True}),
    "cnn_qdq_int8_optimized": Model(
        _statically_quantized(_conv_tower, "QDQ", "QInt8"), (1, 12, 128, 256), 4,
        "quantize_static, QDQ, uint8 activations, int8 weights, built --onnxruntime-optimized",
        {"onnxruntime_optimized": True}),
    "detector_qdq_optimized": Model(
        _statically_quantized(_detector, "QDQ", "QInt8", per_channel=True, reduce_range=True),
        (1, 3, 256, 256), 4, "quantize_static, QDQ, uint8 activations, int8 weights of 7 bits, "
        "built --onnxruntime-optimized", {"onnxruntime_optimized": True}),
    "cnn_qoperator": Model(_statically_quantized(_conv_tower, "QOperator"), (1, 12, 128, 256), 4,
                           "quantize_static, QOperator, uint8"),
    "cnn_qoperator_int8": Model(_statically_quantized(_conv_tower, "QOperator", "QInt8"),
                                (1, 12, 128, 256), 4,
                                "quantize_static, QOperator, uint8 activations, int8 weights"),
    "classifier_qoperator": Model(_statically_quantized(_se_classifier, "QOperator"),
                                  (1, 3, 224, 224), 4, "quantize_static, QOperator, uint8"),
    "densenet_qoperator": Model(_statically_quantized(_dense_classifier, "QOperator"),
                                (1, 3, 224, 224), 4, "quantize_static, QOperator, uint8"),
    "densenet_qdq_optimized": Model(_statically_quantized(_dense_classifier, "QDQ"),
                                    (1, 3, 224, 224), 4,
                                    "quantize_static, QDQ, uint8, built --onnxruntime-optimized",
                                    {"onnxruntime_optimized": True}),
}

if __name__ == "__main__":
    sys.exit(main(__file__, __doc__, MODELS))
