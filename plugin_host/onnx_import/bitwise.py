"""ONNX bit operations as glue ops: BitwiseAnd, BitwiseOr, BitwiseXor and BitwiseNot (torch's
``&``, ``|``, ``^`` and ``~`` on integer tensors, opset 18) as ``bitwise_and``, ``bitwise_or``,
``bitwise_xor`` and ``bitwise_not``; BitShift (``<<`` and ``>>`` of unsigned integers; the
dynamo exporter writes an arithmetic ``>>`` of a signed tensor as a shift of its bits cast to
unsigned, a sign mask and a Where) as ``bit_shift``, and opset 28's BitShift of signed
integers through it (:func:`_signed_shift`); Xor, the logical one of bool tensors, as
``not(equal(a, b))``, which is exact; and opset 26's BitCast, a value's bits read as another
numeric type of its width (float32 and int32 ...), as ``bitcast``. Registered in
:data:`.ops.MAPPERS` on import; each but BitCast folds on constant inputs
(:func:`.fold.register`), so shape arithmetic through them stays constant.

A shift by the bit width of the dtype or more gives 0, as onnxruntime and torch (C leaves it
undefined); the ABI's ``bit_shift`` says the same, and both backends follow it.
"""

from __future__ import annotations

import numpy as np

from abi import dtypes

from ..errors import UnsupportedModelError
from .fold import register as register_fold
from .ops import _only, maps
from .reader import ONNX_DTYPES, element_type

#: ONNX op -> (glue op, numpy function), for the integer ones
_BITWISE = {"BitwiseAnd": ("bitwise_and", np.bitwise_and),
            "BitwiseOr": ("bitwise_or", np.bitwise_or),
            "BitwiseXor": ("bitwise_xor", np.bitwise_xor),
            "BitwiseNot": ("bitwise_not", np.invert)}

#: ONNX op -> (the dtypes it takes, how the refusal names them)
_TAKES = {**{op: (dtypes.INT_DTYPES, "integer tensors (int8 to int64, uint8 to uint64)")
             for op in _BITWISE},
          "BitShift": (frozenset(d for d in dtypes.INT_DTYPES if d.startswith("uint")),
                       "unsigned integer tensors (uint8 to uint64) before opset 28, as ONNX: "
                       "torch's exporters shift a signed tensor's bits cast to unsigned"),
          "Xor": (frozenset({"bool"}), "bool tensors (the integer one is BitwiseXor)")}


#: The opset from which BitShift takes signed integers too (an arithmetic right shift)
SIGNED_SHIFTS = 28


def _check(op: str, named_dtypes, opset: int = 0) -> None:
    """UnsupportedModelError unless every (input name, dtype) is one ``op`` takes (at
    ``opset``), all one."""
    takes, what = _TAKES[op]
    if op == "BitShift" and opset >= SIGNED_SHIFTS:
        takes, what = dtypes.INT_DTYPES, "integer tensors (int8 to int64, uint8 to uint64)"
    for name, dtype in named_dtypes:
        if dtype not in takes:
            raise UnsupportedModelError(f"input {name!r} has dtype {dtype}: {op} takes {what}")
    if len({dtype for _, dtype in named_dtypes}) > 1:
        raise UnsupportedModelError(f"inputs of dtypes {[d for _, d in named_dtypes]}: {op} "
                                    f"takes one dtype")


def _direction(attrs: dict) -> str:
    """BitShift's direction, "left" or "right" (required, as ONNX)."""
    direction = attrs.get("direction")
    if direction not in ("LEFT", "RIGHT"):
        raise UnsupportedModelError(f"attribute direction={direction!r} must be 'LEFT' or "
                                    f"'RIGHT'")
    return direction.lower()


def shift(a: np.ndarray, b: np.ndarray, direction: str) -> np.ndarray:
    """a << b or a >> b of unsigned integers, 0 where b is the bit width or more; of signed
    ones (opset 28) as :func:`_signed_shift` computes it in the graph."""
    if a.dtype.kind == "i":
        unsigned = np.dtype(f"u{a.dtype.itemsize}")
        ua, ub = a.astype(unsigned), b.astype(unsigned)
        if direction == "left":
            return shift(ua, ub, "left").astype(a.dtype)
        spread = np.invert(shift(np.invert(ua), ub, "right"))
        return np.where(a < 0, spread, shift(ua, ub, "right")).astype(a.dtype)
    inside = b < a.dtype.itemsize * 8
    moved = (np.left_shift if direction == "left" else np.right_shift)(a, np.where(inside, b, 0))
    return np.where(inside, moved, np.zeros((), a.dtype)).astype(a.dtype)


def _fold(op: str):
    def folder(ins, a, cap):
        _check(op, [(f"input {i}", dtypes.from_numpy(x.dtype)) for i, x in enumerate(ins)],
               a.get("_opset", 0))
        if op == "BitShift":
            return [shift(ins[0], ins[1], _direction(a))]
        if op == "Xor":
            return [np.logical_xor(ins[0], ins[1])]
        return [_BITWISE[op][1](*ins).astype(ins[0].dtype)]
    return folder


for _op in _TAKES:
    register_fold(_op, _fold(_op), broadcasting=_op != "BitwiseNot",
                  by_opset=_op == "BitShift")


def _inputs(imp, node) -> list[str]:
    """The node's inputs as graph tensors, after checking their dtypes."""
    _check(node.op_type, [(x, imp.type_of(x).dtype) for x in node.input], imp.opset)
    return [imp.tensor(x) for x in node.input]


@maps(*_BITWISE)
def _bitwise(imp, node, attrs):
    _only(imp, attrs, {})
    imp.emit(_BITWISE[node.op_type][0], _inputs(imp, node), [node.output[0]])


@maps("BitShift")
def _bit_shift(imp, node, attrs):
    _only(imp, attrs, {"direction": ...})
    a, b = _inputs(imp, node)
    if imp.types[a].dtype.startswith("uint"):
        imp.emit("bit_shift", [a, b], [node.output[0]], {"direction": _direction(attrs)})
    else:
        _signed_shift(imp, node, a, b, _direction(attrs))


def _signed_shift(imp, node, a: str, b: str, direction: str) -> None:
    """Opset 28's BitShift of signed integers through the unsigned ``bit_shift`` of their bits
    (``cast``, which wraps): a left shift is that of the bits, bits past the sign bit lost; a
    right shift is arithmetic, ``~(~a >> b)`` where a is negative (the complement's logical
    shift, complemented back, fills with ones). A shift b that is negative (a large unsigned
    one) or the bit width or more gives -1 for a negative a shifted right and 0 otherwise, as
    the spec and onnxruntime."""
    dtype = imp.types[a].dtype

    ua, ub = (imp.step("cast", [t], f"{what}_bits", {"dtype": "u" + dtype})
              for t, what in ((a, "a"), (b, "b")))
    shifted = imp.step("bit_shift", [ua, ub], "shift", {"direction": direction})
    if direction == "right":
        flipped = imp.step("bit_shift", [imp.step("bitwise_not", [ua], "flip"), ub],
                           "flipped_shift", {"direction": "right"})
        spread = imp.step("bitwise_not", [flipped], "sign_fill")
        zero = imp.add_constant(np.zeros((), dtypes.to_numpy(dtype)), f"{imp.node_name}.zero")
        shifted = imp.step("where", [imp.step("less", [a, zero], "negative"), spread, shifted],
                           "arithmetic")
    imp.emit("cast", [shifted], [node.output[0]], {"dtype": dtype})


@maps("Xor")
def _xor(imp, node, attrs):
    """a != b of bool tensors: ``not(equal(a, b))``."""
    _only(imp, attrs, {})
    [same] = imp.emit("equal", _inputs(imp, node), [None], suffix="/equal")
    imp.emit("not", [same], [node.output[0]])


@maps("BitCast")
def _bitcast(imp, node, attrs):
    """``bitcast`` to ``to``: numeric types of one width (the ABI's refusal names a bool one
    or another width)."""
    _only(imp, attrs, {"to": ...})
    to = ONNX_DTYPES.get(attrs.get("to"))
    if to is None:
        raise imp.unsupported(f"bitcast to ONNX element type {element_type(attrs.get('to'))} "
                              f"(not an ABI dtype)")
    imp.emit("bitcast", [imp.tensor(node.input[0])], [node.output[0]], {"dtype": to})
