"""onnxruntime's own recurrence kernels for the ABI's ``lstm`` where they give its numbers.

The ABI's recurrences run as an ONNX Scan of element-wise ops (:func:`.layers._recurrence`),
which keeps a nan or an infinity where the numpy backend and torch keep it: onnxruntime's LSTM
kernel clamps what its activations read, so a nan input comes out as finite numbers. On
finite values the kernel computes the same function in one call (its float32 sums and
activations within float32 rounding of torch's), where the Scan pays some twenty kernel
launches a step: over 1,024 steps of 64 units, 7 ms against 1 ms.

So the op is an ONNX ``If``: the kernel where the call's values cannot reach a nan or an
infinity, else the Scan. The test is one sum, made when the call runs: ``S = sum|x| +
sum|h| + sum|c|`` below ``LIMIT / k``, where ``k`` (from the constant weights, at
conversion) bounds what one unit of input moves a gate: at least 1, each weight matrix's
largest row sum of magnitudes, the largest bias and peephole. Every gate sum is then at most
some ``3 * k * S`` (a hidden state is at most 1 after the first step, the cell state grows
by at most 1 a step), far inside float32's range; a nan or an infinity makes S nan or
infinite, and the comparison false. An empty x (no steps, or no sequences) takes the Scan,
whose answer for it is the op's (onnxruntime's kernel refuses some of those shapes).

The kernel is used only where the conversion can prepare it: float32 values, constant
weights, biases and peepholes, all finite, a hidden size and an input size above 0; else the
op is the Scan alone. The lengths are guarded as the Scan guards them (before the If, so the
check after the run sees them), and clipped into [0, T] for the kernel. onnxruntime gives a
sequence of length 0 zero final states where the ABI keeps the states given: a Where puts
them back.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import onnx
from onnx import helper

from .emitter import Emitter

#: the largest gate sum the test allows for, some 2**99 (float32 reaches 2**128)
LIMIT = np.float32(1e30)

_F32 = onnx.TensorProto.FLOAT


def branch(e: Emitter, tag: str) -> Emitter:
    """An Emitter for a subgraph of ``e``'s model (an If's branch): its constants and derived
    initializers go to ``e``'s (a subgraph reads them by name), its checks are ``e``'s."""
    b = Emitter(e.consts, e.types)
    b.initializers, b._derived, b.checks = e.initializers, e._derived, e.checks
    b.prefix = f"{e.prefix}/{tag}"
    return b


def _finite(*arrays) -> bool:
    return all(a is None or bool(np.isfinite(a).all()) for a in arrays)


def _reach(weights: list, vectors: list) -> float:
    """``k`` of the module doc: what one unit of input can add to a gate."""
    k = [1.0] + [float(np.abs(w).astype(np.float64).sum(axis=1).max()) for w in weights]
    return max(k + [float(np.abs(v).max()) for v in vectors if v is not None and v.size])


def _gates(array: np.ndarray, order: list[int]) -> np.ndarray:
    """``array``'s gate blocks along axis 0 in ``order``."""
    return np.concatenate([np.split(array, 4, axis=0)[k] for k in order], axis=0)


def lstm_kernel(e: Emitter, ins: list, reverse: bool) -> Callable | None:
    """``kernel(b, outs)``: the op through onnxruntime's LSTM into ``outs`` (y, h_last,
    c_last), written into the branch ``b``; with the test's bound, ``(kernel, limit)``; None
    where the kernel cannot be prepared (module doc)."""
    x, h, c, w_ih, w_hh, b_ih, b_hh, lengths, peepholes = (ins + [None] * 9)[:9]
    if e.types[x].dtype != "float32":
        return None
    w, r = e.array(w_ih), e.array(w_hh)
    given = [e.array(n) if n is not None else None for n in (b_ih, b_hh, peepholes)]
    if w is None or r is None or any(n is not None and a is None
                                     for n, a in zip((b_ih, b_hh, peepholes), given)):
        return None
    bi, bh, p = given
    if not _finite(w, r, bi, bh, p) or 0 in w.shape or 0 in r.shape:
        return None
    hidden = r.shape[1]
    order = [0, 3, 1, 2]  # the ABI's gates i, f, g, o as ONNX's i, o, f, c
    zeros = np.zeros(4 * hidden, np.float32)
    weight = e.derived("lstm.W", [w_ih], lambda: _gates(w, order)[None], np.float32)
    recurrent = e.derived("lstm.R", [w_hh], lambda: _gates(r, order)[None], np.float32)
    bias = e.derived("lstm.B", [b_ih, b_hh], lambda: np.concatenate([
        _gates(zeros if bi is None else bi, order),
        _gates(zeros if bh is None else bh, order)])[None], np.float32)
    holes = None if p is None else e.derived(
        "lstm.P", [peepholes], lambda: np.concatenate([np.split(p, 3)[k] for k in (0, 2, 1)])[
            None], np.float32)
    limit = LIMIT / np.float32(_reach([w, r], [bi, bh, p]))

    def kernel(b: Emitter, outs: list[str]) -> None:
        zero = b.const([0], np.int64)
        lens = "" if lengths is None else _clipped(b, lengths, x)
        states = [b.op("Unsqueeze", [s, zero])[0] for s in (h, c)]
        y, h_last, c_last = b.op(
            "LSTM", [x, weight, recurrent, bias, lens, *states, holes or ""], 3,
            hidden_size=hidden, direction="reverse" if reverse else "forward")
        b.op("Squeeze", [y, b.const([1], np.int64)], [outs[0]])
        for given_state, last, out in zip((h, c), (h_last, c_last), outs[1:]):
            last = b.op("Squeeze", [last, zero], 1 if lengths is not None else [out])[0]
            if lengths is not None:  # a sequence of length 0 keeps the state given
                empty = b.op("Equal", [b.op("Unsqueeze", [lens, b.const([1], np.int64)])[0],
                                       b.const(0, np.int32)])[0]
                b.op("Where", [empty, given_state, last], [out])

    return kernel, limit


def guard_lengths(e: Emitter, node, lengths: str, steps: str) -> None:
    """Guard a recurrence's lengths as indices into [0, T + 1) (``steps``: T, shape (1,)),
    reported by the check after the run."""
    size = e.op("Add", [steps, e.const([1], np.int64)])[0]
    e.checks.guards.append((lengths, size, f"node {node.name!r}", "sequence length"))


def _clipped(b: Emitter, lengths: str, x: str) -> str:
    """The lengths as int32 within [0, T] (the guard reports one outside after the run)."""
    steps = b.op("Squeeze", [b.op("Shape", [x], start=0, end=1)[0]])[0]
    lens = b.op("Cast", [lengths], to=onnx.TensorProto.INT64)[0]
    lens = b.op("Max", [b.op("Min", [lens, steps])[0], b.const(0, np.int64)])[0]
    return b.op("Cast", [lens], to=onnx.TensorProto.INT32)[0]


def kernel_or_scan(e: Emitter, node, x: str, states: list[str], lengths: str | None,
                   outs: list[str], prepared,
                   scan: Callable[[Emitter, list[str], bool], None]) -> None:
    """The op into ``outs``: ``If`` the sum test (module doc) passes, the kernel ``prepared``
    (:func:`lstm_kernel`'s answer) writes it, else ``scan(b, outs, guard)`` does (``guard``
    False: the lengths are guarded here, outside the If); ``scan`` alone where nothing is
    prepared."""
    if prepared is None:
        scan(e, outs, True)
        return
    kernel, limit = prepared
    if lengths is not None:
        guard_lengths(e, node, lengths, e.op("Shape", [x], start=0, end=1)[0])
    total = None
    for v in [x, *states]:
        part = e.op("ReduceSum", [e.op("Abs", [v])[0]], keepdims=0)[0]
        total = part if total is None else e.op("Add", [total, part])[0]
    below = e.op("Less", [total, e.const(limit, np.float32)])[0]
    some = e.op("Greater", [e.op("Size", [x])[0], e.const(0, np.int64)])[0]
    fast = e.op("And", [below, some])[0]
    branches = []
    for tag, write in (("kernel", kernel), ("scan", scan)):
        b = branch(e, tag)
        names = [b.fresh() for _ in outs]
        write(b, names) if tag == "kernel" else write(b, names, False)
        branches.append(helper.make_graph(
            b.nodes, b.prefix, [], [helper.make_tensor_value_info(n, _F32, None)
                                    for n in names]))
    e.op("If", [fast], outs, then_branch=branches[0], else_branch=branches[1])
