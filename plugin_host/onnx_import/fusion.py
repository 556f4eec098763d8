"""Glue chains recognized as one layer op, and an ``add`` of zeros taken into a bias, after the
walk (on the ABI nodes, not the ONNX ones).

torch writes ``nn.LSTMCell`` and ``nn.GroupNorm`` as chains of ops the ABI also has as glue
ops, so the walk maps them one to one and the numbers are already right. Recognizing the chain
gives the artifact the layer itself (``lstm_cell``, ``group_norm``) with its weights under the
layer's names, as ``plugins/demo_model.py`` builds it. A chain is replaced only when it matches
exactly and none of its intermediate tensors is read outside it or is a graph output; otherwise
the glue ops stay.

LSTMCell: ``linear(x, W_ih, b_ih)``, ``linear(h, W_hh, b_hh)``, ``add``, ``split`` into four
equal parts on axis 1 (gates i, f, g, o), ``sigmoid``/``sigmoid``/``tanh``/``sigmoid``,
``c' = f*c + i*g``, ``h' = o*tanh(c')``.

Linear on a 3-D input: ``linear`` without bias (from MatMul) then ``add`` of a ``(out,)``
constant.

GroupNorm: ``reshape(x, (N, G, -1))``, ``instance_norm`` with unit scale and zero shift,
``reshape`` back to x's shape, ``mul`` by a ``(C, 1, ...)`` weight, ``add`` a ``(C, 1, ...)``
bias.

GELU (torch's ``nn.GELU`` before opset 20, under either exporter, and the
``x * 0.5 * (1 + erf(x / sqrt(2)))`` of many transformers' code): ``div`` of x by sqrt(2) (or
``mul`` by its reciprocal), ``erf``, ``add`` of 1, and x and 0.5 multiplied in, in any of the
three orders the exporters write; the constants float32's values exactly. onnxruntime's graph
optimizer makes such a chain its Gelu kernel (from the basic level on: a bare session at its
defaults), which the onnxruntime backend runs for ``gelu``, so the two give the same bits; the
build's reference, its optimizations off, runs the five ops, a rounding step from the kernel in
places. The numpy backend's ``gelu`` is one pass in float64 where the chain took five.

An ``add`` of a constant of zeros onto a conv's output (or a conv_transpose's, a batchnorm's, a
linear's), directly or through ``add`` nodes (timm's MobileOne sums its branches onto ``0``):
the op's bias takes the zeros and the ``add`` goes. Both backends add such a bias into what the
op computed, and ``(sums + b) + 0`` is ``sums + (b + 0)`` bit for bit: ``b + 0`` is ``b`` but
where ``b`` is -0.0, whose 0 then does what the ``add`` did to a -0.0; no bias is a bias of -0.0
(adding -0.0 changes nothing). An ``add`` of two values is -0.0 only where both are, so zeros
added to one operand of a sum give what they give added to the sum. A kernel may still sum a
conv that gained a bias in another order (the numpy backend's GEMM takes the bias as one more
column), which can move an output by a rounding step, as between any two conv kernels; a conv
that had a bias keeps its kernel. The onnxruntime backend would keep such an ``add``
(``NoopElimination`` is off there for that -0.0), and it splits onnxruntime's blocked layout:
MobileOne-S0 ran 1.7 times as long as on bare onnxruntime before this.
"""

from __future__ import annotations

import math
from typing import Iterable

import numpy as np

from abi import TensorType, dtypes

from ..graph import Node

__all__ = ["fuse"]


class _Nodes:
    """The node list with producer/consumer lookups."""

    def __init__(self, nodes: list[Node], tensors: dict, types: dict, keep: Iterable[str]):
        self.nodes, self.tensors, self.types = nodes, tensors, types
        self.keep = set(keep)  # tensors read from outside the node list (graph outputs)
        self.producer = {t: n for n in nodes for t in n.outputs}
        self.readers: dict[str, list[Node]] = {}
        for n in nodes:
            for t in n.inputs:
                if t:
                    self.readers.setdefault(t, []).append(n)

    def made_by(self, tensor: str | None, op: str) -> Node | None:
        n = self.producer.get(tensor) if tensor else None
        return n if n is not None and n.op == op else None

    def private(self, tensor: str, *users: Node) -> bool:
        """Read only by ``users`` and not a graph output."""
        return tensor not in self.keep and {id(n) for n in self.readers.get(tensor, [])} <= \
            {id(u) for u in users}

    def only_reader(self, tensor: str, op: str) -> Node | None:
        """The one node reading ``tensor``, if it is an ``op`` and ``tensor`` is private to it."""
        readers = self.readers.get(tensor, [])
        if len(readers) == 1 and readers[0].op == op and self.private(tensor, readers[0]):
            return readers[0]
        return None

    def replace(self, chain: list[Node], fused: Node) -> None:
        """Put ``fused`` where the last node of ``chain`` was and drop the chain."""
        gone = {id(n) for n in chain}
        last = max(self.nodes.index(n) for n in chain)
        out = []
        for i, n in enumerate(self.nodes):
            if i == last:
                out.append(fused)
            if id(n) not in gone:
                out.append(n)
        self.nodes[:] = out


def _lstm(g: _Nodes, split: Node, fresh) -> bool:
    gates = split.outputs
    sizes = split.attrs["sizes"]
    if len(gates) != 4 or split.attrs["axis"] != 1 or len(set(sizes)) != 1:
        return False
    add = g.made_by(split.inputs[0], "add")
    if add is None or not g.private(split.inputs[0], split):
        return False
    lin = [g.made_by(t, "linear") for t in add.inputs]
    if None in lin or not all(g.private(t, add) for t in add.inputs):
        return False
    acts = []
    for t, op in zip(gates, ("sigmoid", "sigmoid", "tanh", "sigmoid")):
        act = g.only_reader(t, op)
        if act is None:
            return False
        acts.append(act)
    i, f, gg, o = (a.outputs[0] for a in acts)
    mul_f = next((n for n in g.readers.get(f, []) if n.op == "mul"), None)
    mul_i = next((n for n in g.readers.get(i, []) if n.op == "mul" and gg in n.inputs), None)
    if mul_f is None or mul_i is None:
        return False
    c = next(t for t in mul_f.inputs if t != f)
    add_c = [n for n in g.readers.get(mul_f.outputs[0], []) if n.op == "add"]
    if len(add_c) != 1 or set(add_c[0].inputs) != {mul_f.outputs[0], mul_i.outputs[0]} or \
            not g.private(mul_f.outputs[0], add_c[0]) or not g.private(mul_i.outputs[0], add_c[0]):
        return False
    c_next = add_c[0].outputs[0]
    tanh_c = next((n for n in g.readers.get(c_next, []) if n.op == "tanh"), None)
    if tanh_c is None or not g.private(tanh_c.outputs[0], *g.readers.get(tanh_c.outputs[0], [])):
        return False
    mul_h = g.readers.get(tanh_c.outputs[0], [])
    if len(mul_h) != 1 or mul_h[0].op != "mul" or set(mul_h[0].inputs) != {o, tanh_c.outputs[0]}:
        return False
    mul_h = mul_h[0]
    if not (g.private(i, mul_i) and g.private(gg, mul_i) and g.private(f, mul_f)
            and g.private(o, mul_h)):
        return False
    hidden = sizes[0]
    # which linear reads x and which reads h: W_hh is (4h, h); prefer the name when both fit
    shapes = [g.types[n.inputs[1]].shape for n in lin]
    order = [0, 1]
    fits = [s == (4 * hidden, hidden) for s in shapes]
    if fits == [True, False] or (all(fits) and str(lin[0].inputs[1]).endswith("weight_hh")):
        order = [1, 0]
    ih, hh = lin[order[0]], lin[order[1]]
    if g.types[hh.inputs[1]].shape != (4 * hidden, hidden):
        return False
    chain = [*lin, add, split, *acts, mul_f, mul_i, add_c[0], tanh_c, mul_h]
    # c' must not be read between its add and the final mul by a node outside the chain
    at = g.nodes.index(add_c[0])
    end = g.nodes.index(mul_h)
    inside = {id(n) for n in chain}
    if any(c_next in n.inputs and id(n) not in inside for n in g.nodes[at:end]):
        return False
    stem = str(ih.inputs[1])
    name = stem[: -len(".weight_ih")] if stem.endswith(".weight_ih") else f"{split.name}.lstm"
    fused = Node(fresh(name), "lstm_cell", 1,
                 (ih.inputs[0], hh.inputs[0], c, ih.inputs[1], hh.inputs[1], ih.inputs[2],
                  hh.inputs[2]), (mul_h.outputs[0], c_next), {})
    g.replace(chain, fused)
    return True


def _group_norm(g: _Nodes, norm: Node, fresh, constant) -> bool:
    first = g.made_by(norm.inputs[0], "reshape")
    if first is None or not g.private(norm.inputs[0], norm):
        return False
    x = first.inputs[0]
    shape, grouped = g.types[x].shape, g.types[norm.inputs[0]].shape
    if len(shape) < 3 or len(grouped) != 3 or grouped[0] != shape[0]:
        return False
    groups, channels = grouped[1], shape[1]
    scale, shift = (g.tensors.get(t) if t else None for t in norm.inputs[1:3])
    if scale is None or shift is None or not (np.all(scale == 1) and np.all(shift == 0)):
        return False
    back = g.only_reader(norm.outputs[0], "reshape")
    if back is None or g.types[back.outputs[0]].shape != shape:
        return False
    mul = g.only_reader(back.outputs[0], "mul")
    add = mul and g.only_reader(mul.outputs[0], "add")
    if add is None:
        return False
    per_channel = (channels,) + (1,) * (len(shape) - 2)
    w = next((t for t in mul.inputs if t != back.outputs[0]), None)
    b = next((t for t in add.inputs if t != mul.outputs[0]), None)
    wv, bv = g.tensors.get(w), g.tensors.get(b)
    if wv is None or bv is None or wv.shape != per_channel or bv.shape != per_channel:
        return False
    chain = [first, norm, back, mul, add]
    name = w[: -len(".weight")] if w.endswith(".weight") else f"{norm.name}.group_norm"
    weight = _channels_constant(g, w, wv.reshape(channels), mul, constant)
    bias = _channels_constant(g, b, bv.reshape(channels), add, constant)
    g.replace(chain, Node(fresh(name), "group_norm", 1, (x, weight, bias), add.outputs,
                          {"num_groups": groups, "eps": norm.attrs["eps"]}))
    return True


def _linear_bias(g: _Nodes, lin: Node, fresh) -> bool:
    """``linear(x, W)`` then ``add`` of a constant ``(out,)``: one linear with that bias
    (torch exports a Linear on a 3-D input as MatMul + Add)."""
    if lin.inputs[2] is not None:
        return False
    y = lin.outputs[0]
    add = g.only_reader(y, "add")
    if add is None:
        return False
    bias = next((t for t in add.inputs if t != y), None)
    value = g.tensors.get(bias)
    w = g.tensors.get(lin.inputs[1])
    if value is None or w is None or value.shape != (w.shape[0],) or value.dtype != w.dtype \
            or g.types[add.outputs[0]].shape != g.types[y].shape:
        return False
    g.replace([lin, add], Node(lin.name, "linear", 1, (lin.inputs[0], lin.inputs[1], bias),
                               add.outputs, lin.attrs))
    return True


def _is(g: _Nodes, tensor: str | None, value: float) -> bool:
    """``tensor`` is a constant of one float32 value equal to ``value`` rounded to float32."""
    v = g.tensors.get(tensor) if tensor else None
    return v is not None and v.size == 1 and v.dtype == np.float32 and \
        v.reshape(()) == np.float32(value)


def _other(node: Node, tensor: str) -> str | None:
    """The input of the two-input ``node`` that is not ``tensor`` (None if neither is)."""
    if len(node.inputs) != 2 or tensor not in node.inputs:
        return None
    return node.inputs[1] if node.inputs[0] == tensor else node.inputs[0]


def _gelu(g: _Nodes, erf: Node, fresh) -> bool:
    """``0.5 * x * (1 + erf(x / sqrt(2)))`` as the exporters write it: one ``gelu``."""
    scaled = erf.inputs[0]
    first = g.producer.get(scaled)
    if first is None or not g.private(scaled, erf) or first.op not in ("div", "mul"):
        return False
    if first.op == "div":
        x = first.inputs[0] if _is(g, first.inputs[1], math.sqrt(2)) else None
    else:
        x = next((_other(first, c) for c in first.inputs if _is(g, c, 1 / math.sqrt(2))), None)
    add = g.only_reader(erf.outputs[0], "add")
    if x is None or add is None or not _is(g, _other(add, erf.outputs[0]), 1.0):
        return False
    times = g.only_reader(add.outputs[0], "mul")
    factor = _other(times, add.outputs[0]) if times else None
    if factor == x or _is(g, factor, 0.5):  # (x * a) * 0.5 or (a * 0.5) * x
        last = g.only_reader(times.outputs[0], "mul")
        rest = _other(last, times.outputs[0]) if last else None
        if rest is None or not (_is(g, rest, 0.5) if factor == x else rest == x):
            return False
        chain = [first, erf, add, times, last]
    else:  # (x * 0.5) * a
        half = g.producer.get(factor) if factor else None
        if half is None or half.op != "mul" or not g.private(factor, times) or \
                not _is(g, _other(half, x), 0.5):
            return False
        chain = [half, first, erf, add, times]
    y = chain[-1].outputs[0]
    if g.types[y] != g.types[x]:  # a constant of more dims broadcasts x up
        return False
    g.replace(chain, Node(fresh(f"{erf.name}.gelu"), "gelu", 1, (x,), (y,),
                          {"approximate": "none"}))
    return True


#: how many ``add`` nodes deep :func:`_zeros_taker` looks for a node that takes the zeros
ZEROS_DEPTH = 16
#: ops whose input 2 is a bias added to what they computed last, on both backends: op -> the
#: output axis the bias runs along
BIASED = {"conv": 1, "conv_transpose": 1, "batchnorm": 1, "linear": -1}


def _zero_add(g: _Nodes, add: Node, constant) -> bool:
    """``add(x, zeros)`` whose ``x`` is made by an op of :data:`BIASED` (or by an ``add``
    leading to one, each value read by the next node alone): the zeros go into its bias."""
    if len(add.inputs) != 2:
        return False
    zeros = next((t for t in add.inputs if t in g.tensors), None)
    x = next((t for t in add.inputs if t != zeros), None)
    value = g.tensors.get(zeros)
    if value is None or x is None or x in g.tensors or value.dtype.kind != "f" or \
            not value.size or np.any(value != 0) or g.types[x] != g.types[add.outputs[0]]:
        return False
    negative = np.signbit(value)
    if negative.any() and not negative.all():
        return False  # +0.0 and -0.0 mixed: no one bias value per channel holds both
    taker = _zeros_taker(g, x, add, ZEROS_DEPTH)
    if taker is None:
        return False
    out = g.types[taker.outputs[0]]
    channels, dtype = out.shape[BIASED[taker.op]], value.dtype
    if type(channels) is not int or dtypes.from_numpy(dtype) != out.dtype:
        return False
    inputs = tuple(taker.inputs) + (None,) * (3 - len(taker.inputs))
    # no bias adds nothing, as a bias of -0.0 does (x + -0.0 is x, whatever x)
    bias = g.tensors[inputs[2]] if inputs[2] else np.full(channels, -0.0, dtype)
    zero = dtype.type(-0.0 if negative.all() else 0.0)
    name = constant(np.add(bias, zero, dtype=dtype), inputs[2] or f"{taker.name}.bias")
    biased = Node(taker.name, taker.op, taker.version, inputs[:2] + (name,) + inputs[3:],
                  taker.outputs, taker.attrs)
    producer = g.producer[x]
    if producer is not taker:
        g.replace([taker], biased)
    last = biased if producer is taker else producer  # x's producer now writes the add's output
    g.replace([producer, add], Node(last.name, last.op, last.version, last.inputs, add.outputs,
                                    last.attrs))
    return True


def _zeros_taker(g: _Nodes, x: str, reader: Node, depth: int) -> Node | None:
    """The node of :data:`BIASED` whose bias can take zeros added to ``x``, which only
    ``reader`` reads."""
    node = g.producer.get(x)
    if node is None or depth == 0 or not g.private(x, reader) or len(node.outputs) != 1:
        return None
    if node.op in BIASED:
        bias = node.inputs[2] if len(node.inputs) > 2 else None
        return node if bias is None or bias in g.tensors else None
    if node.op != "add":
        return None
    for operand in node.inputs:
        if operand not in g.tensors:
            taker = _zeros_taker(g, operand, node, depth - 1)
            if taker is not None:
                return taker
    return None


def _channels_constant(g: _Nodes, name: str, array: np.ndarray, reader: Node,
                       constant) -> str:
    """Constant ``name``, read by ``reader`` (which is being replaced), as ``array``: re-pointed
    where ``reader`` reads it alone, else a new constant of ``array`` (the exporter writes a
    single tensor for weights that are equal, a GroupNorm's ones and zeros as initialized)."""
    if g.private(name, reader):
        g.tensors[name] = np.require(array, requirements="C")
        g.types[name] = TensorType(array.shape, dtypes.from_numpy(array.dtype))
        return name
    return constant(array, name)


def fuse(nodes: list[Node], tensors: dict, types: dict, graph_outputs: Iterable[str],
         fresh, constant) -> list[Node]:
    """``nodes`` with every recognized chain replaced by its layer op; ``fresh`` names a node,
    ``constant(array, origin)`` adds a graph constant and returns its name."""
    g = _Nodes(list(nodes), tensors, types, graph_outputs)
    changed = True
    while changed:
        changed = False
        for node in list(g.nodes):
            if node.op == "split" and _lstm(g, node, fresh) or \
                    node.op == "instance_norm" and _group_norm(g, node, fresh, constant) or \
                    node.op == "erf" and _gelu(g, node, fresh) or \
                    node.op == "linear" and _linear_bias(g, node, fresh) or \
                    node.op == "add" and _zero_add(g, node, constant):
                g = _Nodes(g.nodes, tensors, types, graph_outputs)
                changed = True
                break
    return g.nodes
