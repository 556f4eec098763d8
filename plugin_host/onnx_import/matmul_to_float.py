"""com.microsoft's DynamicQuantizeMatMul and MatMulIntegerToFloat: what onnxruntime's graph
optimizer fuses ``quantize_dynamic``'s DynamicQuantizeLinear, MatMulInteger, Cast, Mul and the
bias Add into, and so what a model saved from an onnxruntime session
(``SessionOptions.optimized_model_filepath``) holds. DynamicQuantizeMatMul takes the float32
A and quantizes it itself; MatMulIntegerToFloat is left where one DynamicQuantizeLinear feeds
several MatMulIntegers. Registered in :data:`.ops.MAPPERS` under ``com.microsoft.<op>`` on
import.

Imported with onnxruntime 1.32's CPU kernel's numbers, bit for bit:

- DynamicQuantizeMatMul quantizes A as DynamicQuantizeLinear does
  (:func:`.dynamic.quantized_at_run_time`): onnxruntime's kernel computes the same scale and
  zero point in the same order.
- The int32 sum ``(A - a_zero_point) x (B - b_zero_point)`` is MatMulInteger's
  (:func:`.dynamic.matmul_sum`: the ABI's ``integer_linear``, exact in int32), converted to
  float32.
- It is multiplied by the float32 ``a_scale * b_scale`` (one value, or one per column of B),
  then the bias is added: two roundings, as MLAS's output processor (no fused
  multiply-add).

B must be a constant 2-D int8 or uint8 matrix whose zero point is one value or one per column;
b_scale a float32 constant of one value or one per column (onnxruntime scales the output
afterwards for other shapes, which is refused); MatMulIntegerToFloat's A uint8 (onnxruntime's
CPU provider has no kernel for an int8 A) with an a_scale and a zero point of one value each,
constants or computed (a DynamicQuantizeLinear's); the bias one float32 per column of B (the
kernel reads that many whatever the bias's shape). uint8 A by int8 B saturates in
onnxruntime on x86-64 CPUs without VNNI, as MatMulInteger does (:mod:`.saturation`).
"""

from __future__ import annotations

import numpy as np

from ..errors import ModelFileError
from .dynamic import _integer_dtype, as_uint8, matmul_sum, quantized_at_run_time
from .ops import _only, maps

_MS = "com.microsoft."


def _columns(imp, node) -> int:
    """B's column count (N), after refusing a B that is no static 2-D matrix."""
    shape = imp.type_of(node.input[1]).shape
    if len(shape) != 2 or type(shape[1]) is not int:
        raise imp.unsupported(f"B of shape {list(shape)}: only a 2-D constant B is supported")
    return shape[1]


def _float_input(imp, node, i: int, what: str) -> tuple:
    """Input ``i`` (float32, or absent: None): (a constant array or None, its name)."""
    name = node.input[i] if len(node.input) > i else ""
    if not name:
        return None, None
    t = imp.type_of(name)
    if t.dtype != "float32":
        raise ModelFileError(f"{what} of dtype {t.dtype}: {node.op_type} takes float32",
                             node=imp.node_name, op=node.op_type)
    return (imp.const(name) if imp.is_const(name) else None), name


def _b_scale(imp, node, i: int, columns: int) -> np.ndarray:
    """b_scale (input ``i``): a float32 constant, one value or one per column."""
    scale, name = _float_input(imp, node, i, "b_scale")
    if name is None:
        raise ModelFileError("b_scale is missing", node=imp.node_name, op=node.op_type)
    if scale is None:
        raise imp.unsupported(f"b_scale {name!r} must be a constant (known at import), but it "
                              f"is computed at run time")
    if scale.size != 1 and scale.shape != (columns,):
        raise imp.unsupported(f"b_scale of shape {list(scale.shape)}: only one value or one "
                              f"per column of B ({columns}) is supported")
    return scale.reshape(-1) if scale.size > 1 else scale.reshape(())


def _a_scale(imp, node, i: int) -> np.ndarray | str:
    """a_scale (input ``i``): one float32 value, a constant or a run-time graph tensor."""
    scale, name = _float_input(imp, node, i, "a_scale")
    if name is None:
        raise ModelFileError("a_scale is missing", node=imp.node_name, op=node.op_type)
    shape = list(np.shape(scale)) if scale is not None else list(imp.type_of(name).shape)
    if shape not in ([], [1]):
        raise imp.unsupported(f"a_scale of shape {shape}: only one value is supported")
    return scale.reshape(()) if scale is not None else imp.tensor(name)


def _scaled(imp, node, y: str, a_scale, b_scale: np.ndarray, bias_at: int,
            columns: int) -> None:
    """Bind output 0 to the int32 sum ``y`` as float32, times ``a_scale *
    b_scale`` (float32), plus the bias (input ``bias_at``) where there is one."""
    out = node.output[0]
    bias, name = _float_input(imp, node, bias_at, "bias")
    if name is not None:
        shape = list(np.shape(bias)) if bias is not None else list(imp.type_of(name).shape)
        if shape != [columns]:
            raise ModelFileError(f"bias of shape {shape}: must be one value per column of B "
                                 f"([{columns}]), which onnxruntime reads whatever its shape",
                                 node=imp.node_name, op=node.op_type)
    y = imp.emit("cast", [y], [None], {"dtype": "float32"}, suffix="/float32")[0]
    if isinstance(a_scale, np.ndarray):
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            product = (a_scale * b_scale).astype(np.float32)
        multiplier = imp.add_constant(product, f"{out}.multiplier")
    else:
        b = imp.add_constant(b_scale, f"{out}.b_scale")
        multiplier = imp.emit("mul", [a_scale, b], [None], suffix="/multiplier")[0]
    y = imp.emit("mul", [y, multiplier], [None if name else out], suffix="/scale")[0]
    if name is not None:
        imp.emit("add", [y, imp.tensor(name)], [out], suffix="/bias")


@maps(_MS + "MatMulIntegerToFloat")
def _matmul_integer_to_float(imp, node, attrs):
    """``(A - a_zero_point) x (B - b_zero_point)`` times ``a_scale * b_scale``, plus the bias
    (module doc)."""
    _only(imp, attrs, {})
    dtype = _integer_dtype(imp, node, node.input[0], "A")
    if dtype != "uint8":
        raise imp.unsupported(f"A of dtype {dtype}: onnxruntime's CPU provider runs "
                              f"MatMulIntegerToFloat on a uint8 A only")
    columns = _columns(imp, node)
    b_scale = _b_scale(imp, node, 3, columns)
    a_scale = _a_scale(imp, node, 2)
    _scaled(imp, node, matmul_sum(imp, node, zp_at=(4, 5)), a_scale, b_scale, 6, columns)


@maps(_MS + "DynamicQuantizeMatMul")
def _dynamic_quantize_matmul(imp, node, attrs):
    """A quantized as DynamicQuantizeLinear, then as MatMulIntegerToFloat (module doc)."""
    _only(imp, attrs, {})
    columns = _columns(imp, node)
    b_scale = _b_scale(imp, node, 2, columns)
    codes, scale, zp = quantized_at_run_time(imp, node)
    y = matmul_sum(imp, node, zp_at=(None, 3), a=as_uint8(imp, codes, zp))
    _scaled(imp, node, y, scale, b_scale, 4, columns)
