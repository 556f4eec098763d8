"""com.microsoft's MatMulNBits: a MatMul by weights quantized to 2, 4 or 8 bits in blocks along
K, what onnxruntime's ``MatMulNBitsQuantizer`` (``quant_format=QOperator``, its default) writes
for each MatMul by a constant; and GatherBlockQuantized, what it writes for a Gather from a
constant table (an embedding) when asked to quantize Gathers. Registered in
:data:`.ops.MAPPERS` on import. (The same quantizer's QDQ format writes a blocked
DequantizeLinear of 4-bit weights instead, folded at import: :mod:`.quantize`.)

GatherBlockQuantized's table (int4 or uint4; or uint8 holding 2, 4 or 8 ``bits`` per value,
packed along the last axis lowest bits first) is dequantized at import in blocks of
``block_size`` along ``quantize_axis``, ``float32(q - zero_point) * scale`` (zero points 0 for
int4 and uint4 where absent, 2 ** (bits - 1) for uint8), and the node becomes a Gather from it
along ``gather_axis``: an Embedding where that is 0 of a 2-D table. Its indices are then
checked at entry like any Embedding's, a negative or out-of-range one refused, where
onnxruntime wraps a negative one and gives zeros for one out of range.

The weights are dequantized at import as onnxruntime's kernel does, ``float32(q - zero_point) *
scale`` per block (``q`` unpacked from B's bytes lowest bits first; the zero points likewise,
2 ** (bits - 1) where absent), cut to K rows, and the node becomes a MatMul by that constant
(plus the bias): onnxruntime's CPU kernel at ``accuracy_level`` 0 to 3 computes A in float32
by the dequantized weights, which the artifact then holds in float32. At ``accuracy_level`` 4
(onnxruntime's model builder's default for int4 on CPU) the kernel quantizes A to int8 in the
same blocks along K, symmetric, ``round(a / (max|a| / 127))``, and sums int8 dot products: A is
quantized so and given back in float32 before the MatMul by the dequantized weights
(:func:`_int8_blocks`), which sums the same products in float32 (some 1e-7 from onnxruntime's
integer sums, where A in float is some 5e-3 away). Probed for 4 and 8 bits and block sizes 16
to 256 on an x86 CPU with AVX2; where onnxruntime's build has no int8 kernel for the machine
it computes in float32, and the build's comparison with it shows the difference. For 2 bits
its choice depends on the block size (here 32 to 128 only), so that is refused.

GPTQ's act-order ``g_idx`` (input 4) names the block whose scale each of B's K rows takes
(:func:`_groups`); onnxruntime takes it with 4-bit weights and no zero points only, and then
computes A in float32 at every accuracy_level, as the import does.

Refused naming the node: prepacked weights, an omitted projection (B with a zero dim), bits
other than 2, 4 and 8, ``g_idx`` with zero points or other than 4 bits, or naming no block,
float zero points, and B, scales or zero points computed at run time or of shapes that do not
match K, N, bits and block_size.
"""

from __future__ import annotations

import numpy as np

from ..errors import ModelFileError, UnsupportedModelError
from .ops import _only, _opt, maps
from .written import Written


@maps("com.microsoft.MatMulNBits")
def _matmul_nbits(imp, node, attrs):
    """``A @ dequantized(B) (+ bias)`` as a MatMul by a constant (module doc)."""
    _only(imp, attrs, {"K": ..., "N": ..., "bits": ..., "block_size": ...,
                       "accuracy_level": ..., "weight_prepacked": 0})
    k, n, bits, block = (attrs.get(a) for a in ("K", "N", "bits", "block_size"))
    bits = 4 if bits is None else bits
    if bits not in (2, 4, 8):
        raise imp.unsupported(f"attribute bits={bits!r} is not supported (2, 4 and 8 are)")
    for name, value in (("K", k), ("N", n), ("block_size", block)):
        if type(value) is not int or value < 1:
            raise ModelFileError(f"attribute {name}={value!r} must be a positive count",
                                 node=imp.node_name, op=node.op_type)
    level = attrs.get("accuracy_level", 0)
    if level not in (0, 1, 2, 3, 4):
        raise imp.unsupported(f"attribute accuracy_level={level!r} is not supported (0 to 4 "
                              f"are)")
    if level == 4 and bits == 2:
        raise imp.unsupported("2-bit weights at accuracy_level=4: whether onnxruntime then "
                              "quantizes A to int8 depends on the int8 kernels its build has "
                              "for the block size on the machine; quantize with "
                              "accuracy_level 0 (its default)")
    blocks = -(-k // block)
    groups = _groups(imp, node, k, bits, blocks) if _opt(node, 4) else None
    q = _constant(imp, node, 1, "B", np.uint8, (n, blocks, block * bits // 8))
    scale = _constant(imp, node, 2, "scales", np.float32, (n, blocks))
    if _opt(node, 3) and imp.type_of(node.input[3]).dtype != "uint8":
        raise imp.unsupported(f"zero_points of dtype {imp.type_of(node.input[3]).dtype}: "
                              f"packed uint8 zero points are supported")
    zero = _unpacked(_constant(imp, node, 3, "zero_points", np.uint8,
                               (n, -(-blocks * bits // 8))), bits)[:, :blocks] \
        if _opt(node, 3) else np.full((n, blocks), 2 ** (bits - 1), np.uint8)
    values = _unpacked(q.reshape(n, -1), bits)[:, :k].astype(np.float32)  # (n, k)
    rows = np.arange(k) // block if groups is None else groups  # row i's block
    weights = (values - zero[:, rows].astype(np.float32)) * scale[:, rows]
    w = Written(imp, node)
    table = w.const("weights", np.ascontiguousarray(weights.T))
    a = node.input[0]
    if level == 4 and groups is None:  # with g_idx onnxruntime computes A in float32
        a = _int8_blocks(imp, w, a, k, block)
    product = w.add("MatMul", [a, table], "matmul",
                    out=None if _opt(node, 5) else node.output[0])
    if _opt(node, 5):
        w.add("Add", [product, node.input[5]], "bias", out=node.output[0])
    w.inline()


def _groups(imp, node, k: int, bits: int, blocks: int) -> np.ndarray:
    """g_idx (GPTQ's act-order): the block whose scale each of B's K rows takes, a constant of
    K int32 values in [0, blocks), with 4-bit weights. onnxruntime then ignores packed zero
    points (taking 8 for every block), so those are refused with it; it fails on 8-bit
    weights and reads 2-bit ones otherwise, so those are refused too."""
    if bits != 4:
        raise imp.unsupported(f"g_idx with {bits}-bit weights: onnxruntime's kernel takes g_idx "
                              f"with 4-bit weights only")
    if _opt(node, 3):
        raise imp.unsupported("g_idx with zero_points: onnxruntime's kernel ignores the zero "
                              "points there (it takes 8 for every block), so "
                              "the model would not compute what it says")
    groups = _constant(imp, node, 4, "g_idx", np.int32, (k,)).astype(np.int64)
    outside = np.flatnonzero((groups < 0) | (groups >= blocks))
    if outside.size:
        raise ModelFileError(f"g_idx[{outside[0]}] = {groups[outside[0]]} names no block: "
                             f"K={k} in blocks of the block size make {blocks}",
                             node=imp.node_name, op=node.op_type)
    return groups


def _int8_blocks(imp, w: Written, a: str, k: int, block: int) -> str:
    """``a`` as onnxruntime's kernel takes it at accuracy_level 4: in blocks of ``block``
    along K (the last padded with zeros), each quantized to int8 by ``scale = max|a| / 127``,
    ``round(a * (1 / scale))`` (half to even; 0 where the scale is 0), and given back as
    ``q * scale``, so that the float32 MatMul after it sums what its int8 dot products sum."""
    t = imp.type_of(a)
    if not t.shape or t.shape[-1] != k or t.dtype != "float32":
        raise imp.unsupported(f"input A {a!r} of {t.dtype} {list(t.shape)}: accuracy_level 4 "
                              f"takes float32 A of K={k} columns")
    rank, blocks = len(t.shape), -(-k // block)
    if blocks * block != k:
        pads = np.zeros(2 * rank, np.int64)
        pads[-1] = blocks * block - k
        a = w.add("Pad", [a, w.const("pads", pads)], "padded")
    rows = w.reshape(a, [0] * (rank - 1) + [blocks, block], "blocks")
    amax = w.with_axes("ReduceMax", w.add("Abs", [rows], "abs"), [-1], "amax", keepdims=1)
    scale = w.add("Div", [amax, w.const("levels", np.float32(127))], "scale")
    zero = w.const("zero", np.float32(0))
    inverse = w.add("Where", [w.add("Equal", [scale, zero], "empty"), zero,
                              w.add("Reciprocal", [scale], "reciprocal")], "inverse")
    codes = w.add("Round", [w.add("Mul", [rows, inverse], "scaled")], "codes")
    back = w.reshape(w.add("Mul", [codes, scale], "dequantized"),
                     [0] * (rank - 1) + [blocks * block], "quantized")
    if blocks * block == k:
        return back
    return w.add("Slice", [back, w.const("start", np.zeros(1, np.int64)),
                           w.const("end", np.array([k], np.int64)),
                           w.const("axis", np.array([-1], np.int64))], "cut")


def _constant(imp, node, i: int, what: str, dtype, shape: tuple) -> np.ndarray:
    """Input ``i``: a constant of ``dtype`` holding ``shape``'s count of values (any shape of
    that count, as onnxruntime reads it), reshaped to ``shape``."""
    name = node.input[i]
    if not imp.is_const(name):
        raise imp.unsupported(f"{what} {name!r} is computed at run time: it must be a constant")
    value = imp.const(name)
    if value.dtype != dtype or value.size != int(np.prod(shape)):
        raise ModelFileError(f"{what} of {value.dtype} {list(value.shape)}: K, N, bits and "
                             f"block_size need {np.dtype(dtype)} {list(shape)}",
                             node=imp.node_name, op=node.op_type)
    return value.reshape(shape)


def _unpacked(packed: np.ndarray, bits: int) -> np.ndarray:
    """Each byte's 8 / ``bits`` values, lowest bits first, along the last axis."""
    per = 8 // bits
    shifts = np.arange(per, dtype=np.uint8) * bits
    values = (packed[..., None] >> shifts) & np.uint8((1 << bits) - 1)
    return values.reshape(*packed.shape[:-1], packed.shape[-1] * per)


@maps("com.microsoft.GatherBlockQuantized")
def _gather_block_quantized(imp, node, attrs):
    """A Gather from the table dequantized at import (module doc)."""
    from .quantize import blocked_parameters

    _only(imp, attrs, {"bits": ..., "block_size": ..., "quantize_axis": ...,
                       "gather_axis": ...})
    data = node.input[0]
    for i, what in ((0, "data"), (2, "scales"), (3, "zero_points")):
        if _opt(node, i) and not imp.is_const(node.input[i]):
            raise imp.unsupported(f"{what} {node.input[i]!r} is computed at run time: it must "
                                  f"be a constant")
    table, four_bit = imp.const(data), data in imp.four_bit
    bits = attrs.get("bits", 4)
    if not four_bit and (table.dtype != np.uint8 or bits not in (2, 4, 8)):
        raise imp.unsupported(f"data of {table.dtype} with bits={bits!r}: int4, uint4 or uint8 "
                              f"of 2, 4 or 8 bits are supported")
    zero = imp.const(node.input[3]) if _opt(node, 3) else None
    if not four_bit and bits < 8:
        table = _unpacked(table, bits)
        zero = None if zero is None else _unpacked(zero, bits)
    rank = table.ndim
    axes = []
    for name in ("quantize_axis", "gather_axis"):
        axis = attrs.get(name, 1 if name == "quantize_axis" else 0)
        if type(axis) is not int or not -rank <= axis < rank:
            raise ModelFileError(f"attribute {name}={axis!r} is outside the table's {rank} "
                                 f"axes", node=imp.node_name, op=node.op_type)
        axes.append(axis % rank)
    scale = imp.const(node.input[2])
    if zero is not None and zero.shape != scale.shape:  # a packed zero point's padding
        zero = zero[tuple(slice(0, d) for d in scale.shape)]
    if zero is None and not four_bit:
        zero = np.full(scale.shape, 2 ** (bits - 1), np.uint8)
    try:
        s, z = blocked_parameters(table.shape, scale, zero, axes[0],
                                  attrs.get("block_size", 128), str(table.dtype))
    except (ModelFileError, UnsupportedModelError) as exc:
        raise type(exc)(exc.message, node=imp.node_name, op=node.op_type) from None
    values = table.astype(np.int32) - (0 if z is None else z.astype(np.int32))
    w = Written(imp, node)
    w.add("Gather", [w.const("table", values.astype(np.float32) * s), node.input[1]], "gather",
          out=node.output[0], axis=axes[1])
    w.inline()
