"""The quantized element-wise ops as onnxruntime's com.microsoft kernels, which compute them
with the numbers the ops define (their docs in ``abi/ops/glue.py``): ``qlinear_sigmoid`` and
``qlinear_leaky_relu`` as QLinearSigmoid and QLinearLeakyRelu (a table of the 256 codes, built
once where the scales and zero points are constants), ``qlinear_mul`` as QLinearMul,
``qlinear_concat`` as QLinearConcat."""

from __future__ import annotations

from abi import mlas
from abi.errors import BackendError

from .emitter import MS, Converter


def _unary(op_type: str) -> Converter:
    def convert(e, node, ins, outs, a):
        attrs = {"alpha": float(a["alpha"])} if "alpha" in a else {}
        e.op(op_type, ins, outs, domain=MS, **attrs)
    return convert


def qlinear_mul(e, node, ins, outs, a):
    """QLinearMul, its scales and zero points constants whose products stay within int32
    (past it onnxruntime's conversion gives the type's minimum, not the op's saturated
    codes): anything else is refused naming the node."""
    a_, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp = ins
    values = [e.array(v) for v in (a_scale, a_zp, b_scale, b_zp, y_scale, y_zp)]
    if any(v is None for v in values):
        raise BackendError(f"onnxruntime backend: node {node.name!r}: qlinear_mul with scales "
                           f"or zero points computed when the call runs: onnxruntime's "
                           f"QLinearMul is used only where its products are known to stay "
                           f"within int32", node=node.name)
    sa, za, sb, zb, sy, zy = values
    ratio = mlas.mul_ratio(sa, sb, sy)
    reach = mlas.mul_reach(e.types[a_].dtype, int(za), int(zb), ratio, int(zy))
    if not reach < mlas.INT32_LIMIT:
        raise BackendError(f"onnxruntime backend: node {node.name!r}: qlinear_mul whose "
                           f"scaled products reach {reach:.4g} in magnitude, beyond int32: "
                           f"onnxruntime's QLinearMul converts them to the type's minimum",
                           node=node.name)
    e.op("QLinearMul", ins, outs, domain=MS)


def qlinear_concat(e, node, ins, outs, a):
    """QLinearConcat, whose kernel builds its tables when the session is made: scales and zero
    points computed when the call runs are refused naming the node."""
    if any(e.array(v) is None for k, v in enumerate(ins) if k < 2 or (k - 2) % 3):
        raise BackendError(f"onnxruntime backend: node {node.name!r}: qlinear_concat with "
                           f"scales or zero points computed when the call runs: onnxruntime's "
                           f"QLinearConcat takes constants", node=node.name)
    e.op("QLinearConcat", ins, outs, domain=MS, axis=a["axis"])


CONVERTERS: dict[str, Converter] = {
    "qlinear_concat": qlinear_concat,
    "qlinear_sigmoid": _unary("QLinearSigmoid"),
    "qlinear_leaky_relu": _unary("QLinearLeakyRelu"),
    "qlinear_mul": qlinear_mul,
}
