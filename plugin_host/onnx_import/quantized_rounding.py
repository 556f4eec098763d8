"""Why a quantized model's outputs can differ from onnxruntime's by whole steps.

A quantized model rounds float values to integer steps (QuantizeLinear, DynamicQuantizeLinear,
the QLinear ops' requantization, ...). The imported graph and onnxruntime compute the float
values before such a rounding in different summation orders, so they differ by float32
rounding there; a value that lands within that of half a step rounds to neighbouring steps on
the two, and the one-step difference then grows through the layers after it. ORT's
``quantize_static`` (QDQ, per tensor) of torchvision's ResNet-18 and ConvNeXt-Tiny and of
timm's DeiT-Tiny, random weights, differ so by 0.063, 0.015 and 0.028 on outputs up to 4.5,
1.8 and 0.7, where the float models build at the default tolerance: in ResNet-18 the first
difference was a convolution's 2e-6, the next one step of the QuantizeLinear after it. The
quantized models differ from their float originals by 0.12, 0.075 and 0.17 on the same
inputs, so these are smaller than what quantization changes anyway. :func:`explain` adds to
the build's refusal of a model that quantizes what it can be and what to do; it cannot tell
it from an import bug, and says so.
"""

from __future__ import annotations

from collections import Counter

__all__ = ["ROUNDING_OPS", "rounding_ops", "explain"]

#: Ops that round float values to integer steps: ONNX's, and com.microsoft's that requantize
#: (or quantize their float input) inside
ROUNDING_OPS = frozenset({
    "QuantizeLinear", "DynamicQuantizeLinear", "QLinearConv", "QLinearMatMul", "QGemm",
    "QLinearAdd", "QLinearMul", "QLinearAveragePool", "QLinearGlobalAveragePool",
    "QLinearConcat", "QLinearLeakyRelu", "QLinearSigmoid", "QLinearSoftmax", "QLinearWhere",
    "DynamicQuantizeMatMul", "QAttention", "DynamicQuantizeLSTM"})


def rounding_ops(model) -> Counter:
    """How many nodes of each :data:`ROUNDING_OPS` type the model's graph has."""
    return Counter(node.op_type for node in model.graph.node
                   if node.op_type in ROUNDING_OPS and node.domain in ("", "ai.onnx",
                                                                        "com.microsoft"))


def explain(model) -> str:
    """What the build's refusal of a comparison adds for ``model``: "" unless it rounds to
    integer steps."""
    counts = rounding_ops(model)
    if not counts:
        return ""
    ops = ", ".join(f"{n} {op}" for op, n in sorted(counts.items(), key=lambda c: (-c[1], c[0])))
    return (f"; the model rounds float values to integer steps ({ops}): where a value lands "
            f"within float32 rounding of half a step, the imported graph and onnxruntime, which "
            f"sum in different orders, can round it to neighbouring steps, and that step grows "
            f"through the layers after it (a difference of the size quantization makes against "
            f"the float model, which --atol can accept; an import bug looks the same)")
