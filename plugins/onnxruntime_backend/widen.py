"""Integer ops onnxruntime has no kernel for, computed in a wider integer dtype.

onnxruntime's CPU provider registers many ops for some integer dtypes only (Max and Min lack
int16 and uint16, MatMul and ReduceSum the 8- and 16-bit ones, ...). :data:`INT_KERNELS` says,
for each ONNX op the converter emits that lacks some, which of the eight integer dtypes have a
kernel. :func:`widen` rewrites every node whose data (the inputs and outputs of the schema's
type ``T``) has a dtype without one: each such input is Cast to the narrowest dtype that
holds all its values and has the kernel, the node computes there, and each such output is
Cast back. Cast between integers wraps (it keeps the low bits, as numpy's ``astype``), so

* add, sub, mul, matmul, sum, prod and cumsum give the narrow dtype's wrapped result: the low
  bits of a sum or product do not depend on the bits above them;
* comparisons, max, min, clip, argmax, topk, pad and where see the same values, and division
  and modulus give quotients and remainders that fit (the one that does not, the minimum / -1,
  is refused before the Div: ``glue.int_div``);
* an op that only moves values (:data:`MOVES`) may also go through the dtype of the same width
  and the other signedness, a reinterpretation both ways (uint64's Where through int64), and
  bools through uint8 (onnxruntime has no bool Where: a ``where`` that picks between two
  masks, as the importer writes a bool ConstantOfShape over run-time dims, casts 0 and 1
  there and back).

uint64 has no wider dtype; an op that only orders values (:data:`ORDERS`: TopK, ReduceMax,
ReduceMin, ArgMax, ArgMin, which lack it) computes it as int64 with the top bit flipped (an
order-keeping map: 0 becomes int64's minimum, 2**64 - 1 its maximum; ``BitwiseXor`` then a
wrapping ``Cast``), and its uint64 outputs are flipped back, exactly. What has no dtype to go
through (ReduceSum of uint64, ...) is left as it is, and onnxruntime refuses it when the
session is created, naming the node.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import onnx
from onnx import helper

from abi import dtypes

_INTS = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")


def _ints(names: str) -> frozenset[str]:
    return frozenset(names.split())


#: ONNX op -> the integer dtypes onnxruntime's CPU provider has a kernel for, for each op the
#: converter may emit on integers that lacks some (an op not listed has all eight). Measured
#: on onnxruntime 1.32 by creating and running a one-node session per op and dtype (opset 26);
#: tests/onnxruntime_backend/test_dtypes.py measures it again against the installed version.
INT_KERNELS: dict[str, frozenset[str]] = {
    "Max": _ints("int8 int32 int64 uint8 uint32 uint64"),
    "Min": _ints("int8 int32 int64 uint8 uint32 uint64"),
    "Clip": _ints("int8 int32 int64 uint8 uint32 uint64"),
    "Pad": _ints("int8 int32 int64 uint8 uint32 uint64"),
    "Where": _ints("int8 int32 int64 uint8 uint32"),
    "Relu": _ints("int8 int32"),  # (relu of integers is converted to Max)
    "Neg": _ints("int8 int16 int32 int64"),
    "MatMul": _ints("int32 int64 uint32 uint64"),
    "ReduceSum": _ints("int32 int64"),
    "ReduceProd": _ints("int32 int64"),
    "CumSum": _ints("int32 int64"),
    "ReduceMax": _ints("int8 int32 int64 uint8"),
    "ReduceMin": _ints("int8 int32 int64 uint8"),
    "ArgMax": _ints("int8 int32 int64 uint8"),
    "ArgMin": _ints("int8 int32 int64 uint8"),
    "TopK": _ints("int8 int16 int32 int64 uint8"),
    "BitShift": _ints("uint8 uint16 uint32 uint64"),
}

#: Ops that move values without looking at them: a same-width reinterpretation is exact.
MOVES = frozenset({"Where"})
#: Ops that only order values: uint64 goes through int64 with its top bit flipped.
ORDERS = frozenset({"TopK", "ReduceMax", "ReduceMin", "ArgMax", "ArgMin"})


def _holds(wide: str, narrow: str) -> bool:
    w, n = np.iinfo(dtypes.to_numpy(wide)), np.iinfo(dtypes.to_numpy(narrow))
    return w.min <= n.min and w.max >= n.max


def wider(op_type: str, dtype: str) -> str | None:
    """The dtype ``op_type`` computes ``dtype`` in: ``dtype`` itself when it has a kernel (or
    is not an integer), else the narrowest one with a kernel holding every value of it (for
    :data:`MOVES`, one of the same width too); None when there is none."""
    kernels = INT_KERNELS.get(op_type)
    if kernels is None or dtype in kernels:
        return dtype
    if dtype == "bool":  # moved as uint8's 0 and 1
        return "uint8" if op_type in MOVES and "uint8" in kernels else dtype
    if dtype not in _INTS:
        return dtype
    size = dtypes.to_numpy(dtype).itemsize
    for wide in _INTS:  # narrowest first, signed before unsigned
        if wide in kernels and (_holds(wide, dtype) or (
                op_type in MOVES and dtypes.to_numpy(wide).itemsize == size)):
            return wide
    return None


def _data_positions(node: onnx.NodeProto, opset: int) -> tuple[list[int], list[int]]:
    """The positions of ``node``'s inputs and outputs of the schema's type ``T``."""
    schema = onnx.defs.get_schema(node.op_type, opset, "")

    def typed(params, count):  # past the last parameter: the variadic last one
        return [i for i in range(count) if params[min(i, len(params) - 1)].type_str == "T"]

    return typed(schema.inputs, len(node.input)), typed(schema.outputs, len(node.output))


def widen(nodes: list[onnx.NodeProto], elem_types: Mapping[str, int],
          opset: int) -> list[onnx.NodeProto]:
    """``nodes`` with every integer op lacking a kernel computed in a wider dtype (see the
    module docstring). ``elem_types`` maps tensor names to ONNX element types; a node whose
    data type is unknown there is kept as it is."""
    out: list[onnx.NodeProto] = []
    for node in nodes:
        if node.op_type not in INT_KERNELS:
            out.append(node)
            continue
        ins, outs = _data_positions(node, opset)
        code = next((elem_types.get(node.input[i]) for i in ins if node.input[i]), None)
        dtype = _NAMES.get(code)
        wide = wider(node.op_type, dtype) if dtype is not None else None
        if wide is None and dtype == "uint64" and node.op_type in ORDERS:
            out.extend(_flipped(node, ins, outs))
            continue
        if wide is None or wide == dtype:
            out.append(node)
            continue
        to, back = _CODES[wide], _CODES[dtype]
        new = onnx.NodeProto()
        new.CopyFrom(node)
        for i in ins:
            if node.input[i]:
                name = f"{node.name}.in{i}"
                out.append(helper.make_node("Cast", [node.input[i]], [name], name=name, to=to))
                new.input[i] = name
        casts = []
        for i in outs:
            name = f"{node.name}.out{i}"
            casts.append(helper.make_node("Cast", [name], [node.output[i]], name=name, to=back))
            new.output[i] = name
        out.append(new)
        out.extend(casts)
    return out


def _flipped(node: onnx.NodeProto, ins: list[int], outs: list[int]) -> list[onnx.NodeProto]:
    """``node`` of uint64 data computed in int64: each data input's top bit flipped and the
    bits read as int64 (order kept), each data output read back as uint64 and flipped."""
    top = f"{node.name}.top_bit"
    nodes = [helper.make_node("Constant", [], [top], name=top, value=helper.make_tensor(
        top, onnx.TensorProto.UINT64, [], [1 << 63]))]
    new = onnx.NodeProto()
    new.CopyFrom(node)
    for i in ins:
        if node.input[i]:
            name = f"{node.name}.in{i}"
            nodes += [helper.make_node("BitwiseXor", [node.input[i], top], [f"{name}.flip"],
                                       name=f"{name}.flip"),
                      helper.make_node("Cast", [f"{name}.flip"], [name], name=name,
                                       to=onnx.TensorProto.INT64)]
            new.input[i] = name
    back = []
    for i in outs:
        name = f"{node.name}.out{i}"
        back += [helper.make_node("Cast", [name], [f"{name}.bits"], name=f"{name}.bits",
                                  to=onnx.TensorProto.UINT64),
                 helper.make_node("BitwiseXor", [f"{name}.bits", top], [node.output[i]],
                                  name=name)]
        new.output[i] = name
    return nodes + [new] + back


_CODES: dict[str, int] = {name: helper.np_dtype_to_tensor_dtype(dtypes.to_numpy(name))
                          for name in (*_INTS, "bool")}
_NAMES: dict[int, str] = {code: name for name, code in _CODES.items()}
