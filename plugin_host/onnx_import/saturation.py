"""onnxruntime's u8 x s8 integer kernels on x86-64 CPUs without VNNI (AVX2, AVX512 without
VNNI) multiply uint8 activations by int8 weights with ``vpmaddubsw``, which adds each pair of
products into an int16 and saturates there: 255 * -128 * 2 gives -32768, not -65280. So the
reference's MatMulInteger and ConvInteger of a uint8 input by int8 weights (what
``quantize_dynamic`` writes with its default int8 weights), and QLinearMatMul, QLinearConv and
com.microsoft's QGemm likewise (``quantize_static``'s QOperator format), and QAttention
(``quantize_dynamic`` of a BERT model onnxruntime.transformers optimized), are not the model's
exact int32 sums on such a CPU, while the import computes them exactly. The build's comparison
then fails; :func:`explain` says why, where the model has such a node and the reference's
onnxruntime is seen to saturate (a two-element probe run by the reference process, once), and
what builds instead: a CPU with VNNI, or uint8 weights (``weight_type=QuantType.QUInt8``, a
u8 x u8 kernel that does not saturate) or ``reduce_range=True`` (7-bit weights, whose pairs fit
in int16).
"""

from __future__ import annotations

import numpy as np

from .reference import run_reference

#: the integer ops onnxruntime runs with that kernel -> the input holding their weights
_INTEGER_OPS = {"MatMulInteger": 1, "ConvInteger": 1, "QLinearMatMul": 3, "QLinearConv": 3,
                "QGemm": 3, "MatMulIntegerToFloat": 1, "DynamicQuantizeMatMul": 1,
                "QAttention": 1, "DynamicQuantizeLSTM": 1}
_INT8 = 3  # ONNX TensorProto.INT8

#: whether the reference's onnxruntime saturates u8 x s8 sums (None: not probed yet)
_SATURATES: bool | None = None


def int8_weight_node(model) -> tuple[str, str] | None:
    """(name, op) of the first of ``model``'s integer ops (:data:`_INTEGER_OPS`: MatMulInteger,
    ConvInteger, QLinearMatMul, QLinearConv, QGemm and com.microsoft's fused ones) whose
    weights are an int8 initializer, else None."""
    int8 = {t.name for t in model.graph.initializer if t.data_type == _INT8}
    for node in model.graph.node:
        at = _INTEGER_OPS.get(node.op_type)
        if at is not None and len(node.input) > at and node.input[at] in int8:
            return node.name or node.output[0], node.op_type
    return None


def _probe_model():
    import onnx

    helper, tp = onnx.helper, onnx.TensorProto
    node = helper.make_node("MatMulInteger", ["a", "w"], ["y"], name="probe")
    graph = helper.make_graph([node], "probe", [helper.make_tensor_value_info("a", tp.UINT8,
                                                                            [1, 2])],
                              [helper.make_tensor_value_info("y", tp.INT32, [1, 1])],
                              [onnx.numpy_helper.from_array(np.full((2, 1), -128, np.int8),
                                                            "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def reference_saturates() -> bool:
    """Whether the reference's onnxruntime gives 255 * -128 * 2 as anything but -65280."""
    global _SATURATES
    if _SATURATES is None:
        [out] = run_reference(_probe_model(), {"a": "a"}, {"y": "y"},
                              [{"a": np.full((1, 2), 255, np.uint8)}])
        _SATURATES = int(out["y"].reshape(())) != -65280
    return _SATURATES


def explain(model, mismatch: str) -> str | None:
    """The build's refusal for ``mismatch`` (its comparison's message) where the reference's
    u8 x s8 saturation explains it, else None."""
    found = int8_weight_node(model)
    if found is None or not reference_saturates():
        return None
    name, op = found
    shown = mismatch.split("; widen --rtol")[0]
    return (f"{shown}: onnxruntime's u8 x s8 integer kernel on this CPU (x86-64 without VNNI) "
            f"saturates each pair of products at int16, so its outputs are not the exact int32 "
            f"sums of node {name!r} ({op}) and the rest of that kind, which the import computes; "
            f"build on a CPU with AVX-VNNI or AVX512-VNNI, or quantize with "
            f"weight_type=QuantType.QUInt8 or reduce_range=True")
