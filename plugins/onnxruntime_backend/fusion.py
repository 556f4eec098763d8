"""Chains of our ops that one onnxruntime kernel computes with the same numbers, converted as
that kernel: onnxruntime fuses what it recognises in the converted model, but the ABI's rules
(a nan's answer, the casts between float32 codes and integer tensors) put ops between the
links that it does not see through.

:func:`fused` finds what ``quantize_dynamic`` writes for each MatMul and the importer turns
into ``dynamic_quantize`` of x; ``cast`` of its codes and of its zero point to uint8;
``integer_linear`` of them by a constant weight; ``cast`` of the int32 sums to float32;
``mul`` by ``mul(x's scale, the weight's constant scale)``; and, where one follows, ``add`` of
a constant bias. onnxruntime's com.microsoft DynamicQuantizeMatMul computes that chain in one
kernel: x quantized as DynamicQuantizeLinear quantizes it, the exact integer sums, each times
``x_scale * w_scale``, then plus the bias, rounded apart; bit for bit the chain's numbers.
Where x holds a nan, the chain's scale is nan and so is every output, which the kernel's
quantization need not see: the weight's scale is made nan then. An x whose size is known only
when the call runs is refused empty after the run, as ``dynamic_quantize`` refuses it.

A chain's inner ops go where nothing else reads their outputs; one x quantized for several
chains (attention's query, key and value projections, in one ``dynamic_quantize``) gives each
its own kernel, and the ``dynamic_quantize`` stays only where something else reads it.

A chain whose product only a ``quantized_lstm`` without lengths reads (what the importer makes
of a DynamicQuantizeLSTM: the chain is its input's share of the gates) is, with the op,
onnxruntime's DynamicQuantizeLSTM of the chain's x where it gives their numbers (one sequence,
values far from float32's limits), else the chain's kernel and the op's Scan, behind an ONNX
If (:func:`recurrent_kernels.quantized_kernel`).

What the importer makes of quantize_dynamic's ConvInteger where every sum is exact in float32
(``dynamic_quantize``, ``sub`` of the zero point from the codes, a float32 ``conv``, ``mul`` by
x's scale times the weight's: :class:`DynamicConv`) is DynamicQuantizeLinear, one
DequantizeLinear of its uint8 codes by a scale of 1 and its zero point (the exact difference,
as float32), the same Conv, and the product by the scale made nan where x holds a nan.

What the importer makes of a QDQ model's QuantizeLinear and the DequantizeLinear after it
(``quantize_linear``, ``sub`` of a constant zero point from its float32 codes or none, ``mul``
by a constant scale: :class:`Dequantized`) is onnxruntime's QuantizeLinear and
DequantizeLinear, the codes in their integer type between the two.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

import numpy as np

from abi import TensorType

from . import glue, layers, recurrent_kernels
from .emitter import MS, Emitter


@dataclass(frozen=True)
class DynamicMatMul:
    """A chain :func:`fused` found: ``y`` from float32 ``x`` by the constant ``weight`` (out,
    in), its zero point (constant or None) and its constant scale (one value, or one per
    output), plus the constant ``bias`` (None: no ``add``); ``quantize``: the chain's
    ``dynamic_quantize`` (named by its refusals); ``links``: the chain's ops before its last,
    which go where nothing else reads them; ``name``: its ``integer_linear``'s (the ONNX
    nodes' prefix)."""

    name: str
    quantize: Any
    links: tuple
    x: str
    weight: str
    w_zp: str | None
    w_scale: str
    bias: str | None
    y: str

    @property
    def inputs(self) -> tuple[str | None, ...]:
        return self.x, self.weight, self.w_zp, self.w_scale, self.bias

    @property
    def outputs(self) -> tuple[str]:
        return self.y,


@dataclass(frozen=True)
class ProjectedLstm:
    """A ``quantized_lstm`` (``node``) without lengths whose x is the y of ``projection`` (a
    :class:`DynamicMatMul` without bias) and read by nothing else: onnxruntime's
    DynamicQuantizeLSTM of the projection's x where it gives the op's numbers, else the
    projection and the op as they are (:func:`recurrent_kernels.quantized_kernel`)."""

    node: Any
    projection: DynamicMatMul
    links: tuple

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def inputs(self) -> tuple[str | None, ...]:
        return self.projection.inputs + tuple(self.node.inputs[1:])

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(self.node.outputs)


@dataclass(frozen=True)
class DynamicConv:
    """A ``conv`` of ``sub(codes, zero point)`` of a ``dynamic_quantize`` of float32 ``x``,
    its output times ``mul(x's scale, w_scale)``, into ``y``: what the importer makes of
    quantize_dynamic's ConvInteger where every sum is exact in float32 (:func:`_conv_chain`).
    ``conv``: the conv node (its other inputs and attributes, its output's name); ``links``:
    the chain's ops before its last."""

    name: str
    quantize: Any
    conv: Any
    links: tuple
    x: str
    w_scale: str
    y: str

    @property
    def inputs(self) -> tuple[str | None, ...]:
        return self.x, *self.conv.inputs[1:], self.w_scale

    @property
    def outputs(self) -> tuple[str]:
        return self.y,


@dataclass(frozen=True)
class Dequantized:
    """A ``quantize_linear`` that onnxruntime's QuantizeLinear computes
    (:func:`glue.quantize_linear_kernel`), its codes less a constant zero point (a ``sub``;
    none where there is none) times a constant scale (a ``mul``), into ``y``: what the
    importer makes of a QDQ model's QuantizeLinear and the DequantizeLinear after it
    (:func:`_dequantized`). ``axis``: the one axis of the codes along which the scale or the
    zero point differ, None where both are one value."""

    name: str
    quantize: Any
    links: tuple
    zero_point: str | None
    scale: str
    axis: int | None
    y: str

    @property
    def inputs(self) -> tuple[str | None, ...]:
        return *self.quantize.inputs, self.zero_point, self.scale

    @property
    def outputs(self) -> tuple[str]:
        return self.y,


def fused(nodes: Sequence[Any], consts: Mapping[str, np.ndarray],
          types: Mapping[str, TensorType], outputs: Sequence[str]) -> list:
    """``nodes`` with each chain of a dynamically quantized MatMul one :class:`DynamicMatMul`
    in the place of its last op (with the ``quantized_lstm`` that alone reads it, one
    :class:`ProjectedLstm` in the op's place), each of a dynamically quantized conv one
    :class:`DynamicConv`, each QDQ pair one :class:`Dequantized`, and the chains' other ops
    that nothing else reads left out
    (``outputs``: the graph's, read by the caller)."""
    producer = {out: node for node in nodes for out in node.outputs}
    readers: dict[str, list] = {name: [None] for name in outputs}  # None: the caller
    for node in nodes:
        for name in node.inputs:
            readers.setdefault(name, []).append(node)
    chains: dict[int, Any] = {}
    for node in nodes:
        chain = _chain(node, producer, consts, types)
        if chain is not None:
            chain = _biased(chain, node, readers.get(chain.y, []), consts, types) or chain
            chains[id(producer[chain.y])] = chain
        elif (conv := _conv_chain(node, producer)) is not None:
            chains[id(node)] = conv
        elif (pair := _dequantized(node, producer, consts, types)) is not None:
            chains[id(node)] = pair
    for node in nodes:  # a quantized_lstm of a projection: the two one item
        if node.op != "quantized_lstm" or (tuple(node.inputs) + (None,) * 9)[7] is not None:
            continue  # (lengths)
        last = producer.get(node.inputs[0])
        chain = chains.get(id(last))
        if chain is not None and chain.bias is None and readers[chain.y] == [node]:
            del chains[id(last)]
            chains[id(node)] = ProjectedLstm(node, chain, chain.links + (last,))
    if not chains:
        return list(nodes)
    result = [chains.get(id(node), node) for node in nodes]
    reads = Counter(outputs)
    reads.update(name for item in result for name in item.inputs if name is not None)
    inner = {id(node) for chain in chains.values() for node in chain.links}
    kept = {id(item) for item in result}
    changed = True
    while changed:  # an inner op whose outputs nothing reads goes, then what only it read
        changed = False
        for item in result:
            if (id(item) in inner and id(item) in kept
                    and not any(reads[out] for out in item.outputs)):
                kept.discard(id(item))
                reads.subtract(name for name in item.inputs if name is not None)
                changed = True
    return [item for item in result if id(item) in kept]


def _chain(mul, producer: Mapping[str, Any], consts: Mapping[str, np.ndarray],
           types: Mapping[str, TensorType]) -> DynamicMatMul | None:
    """The chain ending in ``mul`` (:func:`fused`, without a bias), or None where ``mul``
    ends none."""
    if mul.op != "mul":
        return None
    for sums, scales in (mul.inputs, mul.inputs[::-1]):
        cast = producer.get(sums)
        if cast is None or cast.op != "cast" or cast.attrs["dtype"] != "float32":
            continue
        linear = producer.get(cast.inputs[0])
        if linear is None or linear.op != "integer_linear":
            continue
        codes, weight, zero_point, w_zp = (tuple(linear.inputs) + (None,) * 4)[:4]
        quantize = _quantized_by(producer, codes, zero_point)
        if (quantize is None or weight not in consts
                or (w_zp is not None and w_zp not in consts)):
            continue
        product = producer.get(scales)
        if product is None or product.op != "mul":
            continue
        w_scale = _other(product.inputs, quantize.outputs[1])
        if (w_scale is None or not _per_output(w_scale, consts, types, consts[weight].shape[0])
                or types[mul.outputs[0]].shape != types[linear.outputs[0]].shape):
            continue
        links = (cast, linear, producer[codes], producer[zero_point], quantize, product)
        return DynamicMatMul(linear.name, quantize, links, quantize.inputs[0], weight, w_zp,
                             w_scale, None, mul.outputs[0])
    return None


def _conv_chain(mul, producer: Mapping[str, Any]) -> DynamicConv | None:
    """The :class:`DynamicConv` ending in ``mul``, or None where ``mul`` ends none (the
    products are written as the chain has them, so their shapes need no test)."""
    if mul.op != "mul":
        return None
    for result, scales in (mul.inputs, mul.inputs[::-1]):
        conv, product = producer.get(result), producer.get(scales)
        if conv is None or conv.op != "conv" or product is None or product.op != "mul":
            continue
        difference = producer.get(conv.inputs[0])
        if difference is None or difference.op != "sub":
            continue
        quantize = producer.get(difference.inputs[0])
        if (quantize is None or quantize.op != "dynamic_quantize"
                or tuple(difference.inputs) != (quantize.outputs[0], quantize.outputs[2])):
            continue
        w_scale = _other(product.inputs, quantize.outputs[1])
        if w_scale is None:
            continue
        return DynamicConv(conv.name, quantize, conv, (quantize, difference, conv, product),
                           quantize.inputs[0], w_scale, mul.outputs[0])
    return None


def _dequantized(mul, producer: Mapping[str, Any], consts: Mapping[str, np.ndarray],
                 types: Mapping[str, TensorType]) -> Dequantized | None:
    """The :class:`Dequantized` ending in ``mul``, or None where ``mul`` ends none: the zero
    point integers of the codes' range, the scale any float32 values, each one value or one
    per entry of one axis (the same axis for both), neither adding entries to the codes."""
    if mul.op != "mul":
        return None
    for codes, scale in (mul.inputs, mul.inputs[::-1]):
        if scale not in consts:  # float32, as the codes (the ABI's sub and mul)
            continue
        quantize, zero_point, links = producer.get(codes), None, ()
        if quantize is not None and quantize.op == "sub" and quantize.inputs[1] in consts:
            zero_point, links = quantize.inputs[1], (quantize,)
            quantize = producer.get(quantize.inputs[0])
        if quantize is None or quantize.op != "quantize_linear":
            continue
        x, q_scale, q_zp = (tuple(quantize.inputs) + (None,) * 3)[:3]
        dtype, shape = quantize.attrs["dtype"], types[quantize.outputs[0]].shape
        if (glue.quantize_linear_kernel(types[x].shape, consts.get(q_scale), q_zp,
                                        consts.get(q_zp), dtype) is None
                or types[mul.outputs[0]].shape != shape):
            continue
        z = None if zero_point is None else consts[zero_point]
        if z is not None and not glue.are_codes(z, dtype):
            continue
        axes = {glue.quantization_axis(shape, value) for value in (consts[scale], z)
                if value is not None and value.size > 1}  # None: along several axes
        if None in axes or len(axes) > 1:
            continue
        return Dequantized(mul.name, quantize, (quantize, *links), zero_point, scale,
                           axes.pop() if axes else None, mul.outputs[0])
    return None


def _biased(chain: DynamicMatMul, mul, readers: Sequence[Any],
            consts: Mapping[str, np.ndarray],
            types: Mapping[str, TensorType]) -> DynamicMatMul | None:
    """``chain`` (ending in ``mul``) with the ``add`` of a constant bias (one value or one
    per output) that alone reads its output, ending in that ``add``; None where there is
    none."""
    if len(readers) != 1 or readers[0] is None or readers[0].op != "add":
        return None
    add = readers[0]
    bias = _other(add.inputs, chain.y)
    if (bias is None or types[add.outputs[0]].shape != types[chain.y].shape
            or not _per_output(bias, consts, types, consts[chain.weight].shape[0])):
        return None
    return replace(chain, links=chain.links + (mul,), bias=bias, y=add.outputs[0])


def _quantized_by(producer: Mapping[str, Any], codes: str | None, zero_point: str | None):
    """The ``dynamic_quantize`` whose codes and zero point, each cast to uint8, are ``codes``
    and ``zero_point``; None where they are not such."""
    sources = []
    for name in codes, zero_point:
        cast = producer.get(name) if name is not None else None
        if cast is None or cast.op != "cast" or cast.attrs["dtype"] != "uint8":
            return None
        sources.append(cast.inputs[0])
    quantize = producer.get(sources[0])
    if (quantize is None or quantize.op != "dynamic_quantize"
            or sources != [quantize.outputs[0], quantize.outputs[2]]):
        return None
    return quantize


def _other(pair: Sequence[str], one: str) -> str | None:
    """The name of ``pair`` beside ``one``, or None where ``one`` is not in it."""
    return pair[1] if pair[0] == one else pair[0] if pair[1] == one else None


def _per_output(name: str, consts: Mapping[str, np.ndarray], types: Mapping[str, TensorType],
                outputs: int) -> bool:
    """Whether ``name`` is a float32 constant of one value, or of one per output along its
    last axis."""
    value = consts.get(name)
    return value is not None and types[name].dtype == "float32" and (
        value.size == 1 or (value.ndim >= 1 and value.shape[-1] == value.size == outputs))


#: what :func:`fused` puts in the place of a chain
FUSED = (DynamicMatMul, ProjectedLstm, DynamicConv, Dequantized)


def convert(e: Emitter, item) -> None:
    """Write ``item`` (of :data:`FUSED`) into ``e``."""
    if isinstance(item, ProjectedLstm):
        _projected_lstm(e, item)
        return
    if isinstance(item, Dequantized):
        _dequantize(e, item)
        return
    glue.values_needed(e, item.quantize, item.x)
    if isinstance(item, DynamicConv):
        _dynamic_conv(e, item)
    else:
        _dynamic_matmul(e, item)


def _nan_scale(e: Emitter, scale: str, x: str, *, clips: bool) -> str:
    """``scale`` itself, or nan where x holds a nan (:func:`glue.sum_of_squares` is nan
    exactly then). ``clips``: the scale is one value, never -0.0, and nan only where x holds
    a nan, so :func:`glue.bound_or_nan`, one kernel after the sum. Otherwise (a scale per
    output) the scale less the min of 0 and the sum (s - 0 is s, a -0.0 too), two."""
    total = glue.sum_of_squares(e, x)
    if clips:
        return glue.bound_or_nan(e, total, scale)
    return e.op("Sub", [scale, *e.op("Min", [total, e.const(0.0)])])[0]


def _one_plain_value(s: np.ndarray) -> bool:
    """Whether constant ``s`` can bound a Clip in :func:`_nan_scale`: one value, not nan
    and not -0.0."""
    return s.size == 1 and not np.isnan(s).any() and not ((s == 0) & np.signbit(s)).any()


def _dequantize(e: Emitter, pair: Dequantized) -> None:
    """onnxruntime's QuantizeLinear and DequantizeLinear: ``(codes - zero point) * scale``,
    the difference of integers exact as the ``sub``'s of float32 codes is, then one product,
    so bit for bit the pair's numbers (onnxruntime's fusion of the two with a conv or a
    matmul, which would round apart, is off in our sessions: :mod:`session`). The scale and
    the zero point flat, one value or one per entry along the axis (one of them broadcast to
    the other's length)."""
    dtype = pair.quantize.attrs["dtype"]
    codes = glue.quantize_linear_codes(e, list(pair.quantize.inputs), dtype)
    s, z = e.array(pair.scale), e.array(pair.zero_point)
    n = max(s.size, 1 if z is None else z.size)
    shape = () if pair.axis is None else (n,)
    scale = e.derived(f"dequantize.scale({n})", [pair.scale],
                      lambda: np.broadcast_to(s.reshape(-1), (n,)).reshape(shape))
    zero = None if z is None else e.derived(
        f"dequantize.zero_point.{dtype}({n})", [pair.zero_point],
        lambda: np.broadcast_to(z.reshape(-1), (n,)).reshape(shape).astype(dtype), None)
    e.op("DequantizeLinear", [codes, scale, zero], [pair.y],
         **({} if pair.axis is None else {"axis": pair.axis}))


def _dynamic_conv(e: Emitter, chain: DynamicConv) -> None:
    """onnxruntime's DynamicQuantizeLinear; DequantizeLinear of its codes by a scale of 1 and
    its zero point, the exact ``codes - zero point`` of the chain's sub as float32 in one
    kernel; the same Conv; the product by the scale made nan where x holds a nan (the chain's
    codes and zero point are 0 and 255 then and its scale nan, so every output is nan, as
    here, whatever onnxruntime's quantization made of the nan)."""
    codes, scale, zero_point = e.op("DynamicQuantizeLinear", [chain.x], 3)
    # values of their own: the chain's sub and conv stay where something else reads them
    [difference] = e.op("DequantizeLinear", [codes, e.const(1.0), zero_point])
    result = e.fresh()
    layers.conv(e, chain.conv, [difference, *chain.conv.inputs[1:]], [result],
                dict(chain.conv.attrs))
    # the quantization's scale: one value, (max - min) / 255 or 1, so never -0.0
    product = e.op("Mul", [_nan_scale(e, scale, chain.x, clips=True), chain.w_scale])[0]
    e.op("Mul", [result, product], [chain.y])


def _projected_lstm(e: Emitter, item: ProjectedLstm) -> None:
    """``If`` the values allow, DynamicQuantizeLSTM, else the projection's kernel and the
    op's Scan (:func:`recurrent_kernels.kernel_or_scan`); both checks of the sizes outside."""
    chain, node = item.projection, item.node
    x, h, c = chain.x, node.inputs[1], node.inputs[2]
    glue.values_needed(e, chain.quantize, x)
    layers.quantized_state_checked(e, node, x, h)
    attrs = dict(node.attrs)

    def scan(b: Emitter, outs: list[str], guard: bool) -> None:
        _dynamic_matmul(b, chain)  # its y a value of the branch where there is an If
        layers.quantized_lstm(b, node, [chain.y, *node.inputs[1:]], outs, attrs,
                              checked=False)

    prepared = recurrent_kernels.quantized_kernel(e, chain, node, layers.u8s8_exact())
    recurrent_kernels.kernel_or_scan(e, node, x, [h, c], None, list(node.outputs), prepared,
                                     scan)


def _dynamic_matmul(e: Emitter, chain: DynamicMatMul) -> None:
    """One DynamicQuantizeMatMul for ``chain``: the weight prepared once as integer_linear
    prepares it (an int8 one as it is where onnxruntime's u8 x s8 kernel is exact); the
    weight's scale flat, made nan where x holds a nan (:func:`_nan_scale`); the bias one per
    output. An empty x: the caller's :func:`glue.values_needed`."""
    wt, w_zp = layers.integer_weight(e, chain.weight, chain.w_zp)
    s, b = e.array(chain.w_scale), e.array(chain.bias)
    scale = e.derived("dynamic_matmul.scale", [chain.w_scale],
                      lambda: s.reshape(() if s.size == 1 else (-1,)))
    outputs = e.array(chain.weight).shape[0]
    bias = None if b is None else e.derived(
        f"dynamic_matmul.bias({outputs})", [chain.bias],
        lambda: np.broadcast_to(b.reshape(-1), (outputs,)).copy())
    e.op("DynamicQuantizeMatMul",
         [chain.x, wt, _nan_scale(e, scale, chain.x, clips=_one_plain_value(s)), w_zp, bias],
         [chain.y], domain=MS)
