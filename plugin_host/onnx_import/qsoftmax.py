"""com.microsoft's QLinearSoftmax, imported as the ABI's ``qlinear_softmax``, whose meaning is
onnxruntime 1.32's CPU kernel's (the op table's doc; its table :func:`abi.mlas.softmax_table`):
bit for bit with onnxruntime, which the onnxruntime backend runs as that kernel.

The kernel was read in onnxruntime's source and checked against it over random scales, zero
points, shapes, both 8-bit dtypes and both of its ``opset`` modes. Its attribute ``opset``
below 13 normalizes over the flattened dims from ``axis`` (default 1) on (the op's
``trailing``), 13 and above over ``axis`` alone (default -1); the count of values one softmax
takes may be known only when the call runs (attention's softmax over a run-time sequence
length): the table is then built for it then.
"""

from __future__ import annotations

from ..errors import ModelFileError
from .ops import _only, maps
from .qlinear import integer_op
from .qoperator import _MS, _codes, unary_parameters


@maps(_MS + "QLinearSoftmax")
def _qlinear_softmax(imp, node, attrs):
    """One ``qlinear_softmax`` of X's codes (module doc)."""
    _only(imp, attrs, {"axis": ..., "opset": ...})
    opset = attrs.get("opset")
    if type(opset) is not int:
        got = "missing" if opset is None else f"{opset!r}"
        raise ModelFileError(f"attribute opset {got}: onnxruntime's kernel needs the opset "
                             f"(an integer) whose Softmax it follows", node=imp.node_name,
                             op=node.op_type)
    x, dtype = _codes(imp, node, 0, "X", integer=True)
    shape = list(imp.type_of(node.input[0]).shape)
    rank = len(shape)
    axis = attrs.get("axis", 1 if opset < 13 else -1)
    if type(axis) is not int or not -rank <= axis < rank:
        raise ModelFileError(f"attribute axis={axis!r} is outside X's {rank} dims",
                             node=imp.node_name, op=node.op_type)
    if any(type(d) is int and d < 1 for d in shape):
        raise imp.unsupported(f"X of shape {shape}: no values to normalize")
    integer_op(imp, node, "qlinear_softmax", [x, *unary_parameters(imp, node, dtype)],
               {"axis": axis % rank, "trailing": opset < 13}, dtype)
