"""ONNX bit operations as glue ops: BitwiseAnd, BitwiseOr, BitwiseXor and BitwiseNot (torch's
``&``, ``|``, ``^`` and ``~`` on integer tensors, opset 18) as ``bitwise_and``, ``bitwise_or``,
``bitwise_xor`` and ``bitwise_not``; BitShift (``<<`` and ``>>`` of unsigned integers; the
dynamo exporter writes an arithmetic ``>>`` of a signed tensor as a shift of its bits cast to
unsigned, a sign mask and a Where) as ``bit_shift``; and Xor, the logical one of bool tensors,
as ``not(equal(a, b))``, which is exact. Registered in :data:`.ops.MAPPERS` on import; each
folds on constant inputs (:func:`.fold.register`), so shape arithmetic through them stays
constant.

A shift by the bit width of the dtype or more gives 0, as onnxruntime and torch (C leaves it
undefined); the ABI's ``bit_shift`` says the same, and both backends follow it.
"""

from __future__ import annotations

import numpy as np

from abi import dtypes

from ..errors import UnsupportedModelError
from .fold import register as register_fold
from .ops import _only, maps

#: ONNX op -> (glue op, numpy function), for the integer ones
_BITWISE = {"BitwiseAnd": ("bitwise_and", np.bitwise_and),
            "BitwiseOr": ("bitwise_or", np.bitwise_or),
            "BitwiseXor": ("bitwise_xor", np.bitwise_xor),
            "BitwiseNot": ("bitwise_not", np.invert)}

#: ONNX op -> (the dtypes it takes, how the refusal names them)
_TAKES = {**{op: (dtypes.INT_DTYPES, "integer tensors (int8 to int64, uint8 to uint64)")
             for op in _BITWISE},
          "BitShift": (frozenset(d for d in dtypes.INT_DTYPES if d.startswith("uint")),
                       "unsigned integer tensors (uint8 to uint64), as ONNX: torch's exporters "
                       "shift a signed tensor's bits cast to unsigned"),
          "Xor": (frozenset({"bool"}), "bool tensors (the integer one is BitwiseXor)")}


def _check(op: str, named_dtypes) -> None:
    """UnsupportedModelError unless every (input name, dtype) is one ``op`` takes, all one."""
    takes, what = _TAKES[op]
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
    """a << b or a >> b of unsigned integers, 0 where b is the bit width or more."""
    inside = b < a.dtype.itemsize * 8
    moved = (np.left_shift if direction == "left" else np.right_shift)(a, np.where(inside, b, 0))
    return np.where(inside, moved, np.zeros((), a.dtype)).astype(a.dtype)


def _fold(op: str):
    def folder(ins, a, cap):
        _check(op, [(f"input {i}", dtypes.from_numpy(x.dtype)) for i, x in enumerate(ins)])
        if op == "BitShift":
            return [shift(ins[0], ins[1], _direction(a))]
        if op == "Xor":
            return [np.logical_xor(ins[0], ins[1])]
        return [_BITWISE[op][1](*ins).astype(ins[0].dtype)]
    return folder


for _op in _TAKES:
    register_fold(_op, _fold(_op), broadcasting=_op != "BitwiseNot")


def _inputs(imp, node) -> list[str]:
    """The node's inputs as graph tensors, after checking their dtypes."""
    _check(node.op_type, [(x, imp.type_of(x).dtype) for x in node.input])
    return [imp.tensor(x) for x in node.input]


@maps(*_BITWISE)
def _bitwise(imp, node, attrs):
    _only(imp, attrs, {})
    imp.emit(_BITWISE[node.op_type][0], _inputs(imp, node), [node.output[0]])


@maps("BitShift")
def _bit_shift(imp, node, attrs):
    _only(imp, attrs, {"direction": ...})
    imp.emit("bit_shift", _inputs(imp, node), [node.output[0]],
             {"direction": _direction(attrs)})


@maps("Xor")
def _xor(imp, node, attrs):
    """a != b of bool tensors: ``not(equal(a, b))``."""
    _only(imp, attrs, {})
    [same] = imp.emit("equal", _inputs(imp, node), [None], suffix="/equal")
    imp.emit("not", [same], [node.output[0]])
