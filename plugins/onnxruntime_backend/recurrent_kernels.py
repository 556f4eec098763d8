"""onnxruntime's own LSTM, GRU and RNN kernels for the ABI's ``lstm``, ``gru`` and ``rnn`` (tanh),
and its DynamicQuantizeLSTM for ``quantized_lstm``, where they give the ops' numbers.

The ABI's recurrences run as an ONNX Scan of element-wise ops (:func:`.layers._recurrence`),
which keeps a nan or an infinity where the numpy backend and torch keep it: onnxruntime's
kernels clamp what their activations read, so a nan input comes out as finite numbers (and
its RNN's Relu makes a nan 0). On finite values a kernel computes the same function in one
call (its float32 sums and activations within float32 rounding of torch's), where the Scan
pays some ten to twenty kernel launches a step: over 1,024 steps of 64 units, an LSTM takes
some 1.2 ms against the Scan's 6 ms (``bench/bench_recurrent.py``).

So the op is an ONNX ``If``: the kernel where the call's values cannot reach a nan or an
infinity, else the Scan. The test is one sum, made when the call runs: ``S = sum|x| +
sum|h| (+ sum|c|)`` below ``LIMIT / k``, where ``k`` (from the constant weights, at
conversion) bounds what one unit of input moves a gate: at least 1, each weight matrix's
largest row sum of magnitudes, the largest bias and peephole. Every gate sum is then at most
some ``3 * k * S`` (an LSTM's or a tanh RNN's hidden state is at most 1 after the first step,
a GRU's at most the larger of 1 and its start, an LSTM's cell state grows by at most 1 a
step), far inside float32's range; a nan or an infinity makes S nan or infinite, and the
comparison false. An empty x (no steps, or no sequences) takes the Scan, whose answer for it
is the op's (onnxruntime's GRU aborts the process on no steps).

A kernel is used only where the conversion can prepare it: float32 values, constant weights,
biases and peepholes, all finite, ``k`` at most ``LIMIT`` (the hidden state's share of a gate,
up to ``k``, stays inside float32's range), a hidden size and an input size above 0, an rnn of
tanh (a relu RNN's state can grow past any bound the sum could set); else the op is the Scan
alone.
The weights go to the kernel in ONNX's gate order, prepared once. The lengths are guarded as
the Scan guards them (before the If, so the check after the run sees them), and clipped into
[0, T] for the kernel. onnxruntime gives a sequence of length 0 zero final states where the
ABI keeps the states given: a Where puts them back.

The quantized LSTM of a projection (``fusion.ProjectedLstm``) takes the same If with
com.microsoft's DynamicQuantizeLSTM, and one more condition, one sequence
(:func:`quantized_kernel`).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import onnx

from .emitter import MS, Emitter, moved_codes

#: the largest gate sum the test allows for, some 2**99 (float32 reaches 2**128)
LIMIT = np.float32(1e30)

_F32 = onnx.TensorProto.FLOAT


def _finite(*arrays) -> bool:
    return all(a is None or bool(np.isfinite(a).all()) for a in arrays)


def _reach(weights: list, vectors: list) -> float:
    """``k`` of the module doc: what one unit of input can add to a gate."""
    k = [1.0] + [float(np.abs(w).astype(np.float64).sum(axis=1).max()) for w in weights]
    return max(k + [float(np.abs(v).max()) for v in vectors if v is not None and v.size])


def _gates(array: np.ndarray, order: list[int]) -> np.ndarray:
    """``array``'s gate blocks along axis 0 in ``order``."""
    return np.concatenate([np.split(array, len(order), axis=0)[k] for k in order], axis=0)


#: ABI op -> (onnxruntime's kernel, the ABI's gate blocks in the kernel's order, the number of
#: states): lstm's i, f, g, o as ONNX's i, o, f, c; gru's r, z, n as z, r, h
KERNELS = {"lstm": ("LSTM", [0, 3, 1, 2], 2), "gru": ("GRU", [1, 0, 2], 1),
           "rnn": ("RNN", [0], 1)}


def recurrence_kernel(e: Emitter, op: str, ins: list, attrs: dict) -> tuple | None:
    """``(kernel, limit)``: ``kernel(b, outs)`` writes the ABI recurrence ``op`` (lstm, gru,
    rnn) through onnxruntime's kernel into the branch ``b`` (its outputs ``outs``: y and the
    final states); ``limit`` the test's bound (module doc). None where the kernel cannot be
    prepared: another dtype than float32, weights, biases or peepholes computed at run time
    or not finite, a size of 0, an rnn of relu (whose state can grow without bound)."""
    kind, order, count = KERNELS[op]
    x, states = ins[0], ins[1:1 + count]
    w_ih, w_hh, b_ih, b_hh, lengths, peepholes = (ins[1 + count:] + [None] * 6)[:6]
    if e.types[x].dtype != "float32" or attrs.get("nonlinearity", "tanh") != "tanh":
        return None
    w, r = e.array(w_ih), e.array(w_hh)
    given = [e.array(n) if n is not None else None for n in (b_ih, b_hh, peepholes)]
    if w is None or r is None or any(n is not None and a is None
                                     for n, a in zip((b_ih, b_hh, peepholes), given)):
        return None
    bi, bh, p = given
    if not _finite(w, r, bi, bh, p) or 0 in w.shape or 0 in r.shape:
        return None
    reach = _reach([w, r], [bi, bh, p])
    if reach > LIMIT:  # the state's own share of a gate (up to k) could then overflow
        return None
    hidden = r.shape[1]
    zeros = np.zeros(len(order) * hidden, np.float32)
    weight = e.derived(f"{op}.W", [w_ih], lambda: _gates(w, order)[None], np.float32)
    recurrent = e.derived(f"{op}.R", [w_hh], lambda: _gates(r, order)[None], np.float32)
    bias = e.derived(f"{op}.B({hidden})", [b_ih, b_hh], lambda: np.concatenate([
        _gates(zeros if bi is None else bi, order),
        _gates(zeros if bh is None else bh, order)])[None], np.float32)
    holes = None if p is None else e.derived(  # the ABI's i, f, o as ONNX's i, o, f
        f"{op}.P", [peepholes], lambda: _gates(p, [0, 2, 1])[None], np.float32)
    limit = LIMIT / np.float32(reach)
    options = {"hidden_size": hidden, "direction": "reverse" if attrs["reverse"] else "forward"}
    if op == "gru":
        options["linear_before_reset"] = int(attrs["linear_before_reset"])

    def kernel(b: Emitter, outs: list[str]) -> None:
        zero = b.const([0], np.int64)
        lens = "" if lengths is None else b.op("Cast", [clipped_lengths(
            b, lengths, b.op("Shape", [x], start=0, end=1)[0])], to=onnx.TensorProto.INT32)[0]
        initial = [b.op("Unsqueeze", [s, zero])[0] for s in states]
        extra = [holes or ""] if op == "lstm" else []
        y, *finals = b.op(kind, [x, weight, recurrent, bias, lens, *initial, *extra],
                          1 + count, **options)
        b.op("Squeeze", [y, b.const([1], np.int64)], [outs[0]])
        if lengths is not None:  # (B, 1): a sequence of length 0 keeps the states given
            empty = b.op("Equal", [b.op("Unsqueeze", [lens, b.const([1], np.int64)])[0],
                                   b.const(0, np.int32)])[0]
        for given_state, last, out in zip(states, finals, outs[1:]):
            last = b.op("Squeeze", [last, zero], 1 if lengths is not None else [out])[0]
            if lengths is not None:
                b.op("Where", [empty, given_state, last], [out])

    return kernel, limit


def quantized_kernel(e: Emitter, projection, node, u8s8_exact: bool) -> tuple | None:
    """``(kernel, limit[, one_sequence])`` for :func:`kernel_or_scan`: the ABI's ``quantized_lstm``
    ``node`` through com.microsoft's DynamicQuantizeLSTM, whose x is ``projection``'s
    (``fusion.DynamicMatMul``: the input's share of the gates, x quantized once by its weight),
    so the kernel takes that x and weight. It gives the op's numbers bit for bit where one
    sequence runs (``one_sequence``, the third entry where the batch is known only when the
    call runs: the batch is 1): the chain and the op follow its arithmetic, and it quantizes
    each thread's share of a batch, which for one sequence is the whole.
    None where it cannot be prepared: lengths, a batch that is not 1, a weight, scale, zero
    point, bias or peephole computed at run time or not finite, zero points that differ (the
    kernel takes one per weight), a size of 0, ``k`` (of the weights as their codes mean
    them) past ``LIMIT``. int8 weights go as they are where onnxruntime's u8 x s8 kernels are
    exact (``u8s8_exact``: ``layers.u8s8_exact()``), else moved to uint8, as are both where
    one is uint8; the bias is the kernel's W half, its R half -0.0 (so ``b + -0.0`` is b, a
    -0.0 too)."""
    h, c, r, r_scale, r_zp, bias, lengths, peepholes = (list(node.inputs[1:]) + [None] * 8)[:8]
    batch = e.types[h].shape[0]
    if lengths is not None or (type(batch) is int and batch != 1):
        return None
    names = (projection.weight, projection.w_scale, projection.w_zp, r, r_scale, r_zp, bias,
             peepholes)
    w, w_scale, w_zp, r_codes, scale, zp, b, p = (e.array(n) if n is not None else None
                                                  for n in names)
    if any(n is not None and a is None for n, a in zip(names, (w, w_scale, w_zp, r_codes,
                                                               scale, zp, b, p))):
        return None
    if (not _finite(w_scale, scale, b, p) or 0 in w.shape or 0 in r_codes.shape
            or any(z is not None and np.any(z != z.reshape(-1)[0]) for z in (w_zp, zp))):
        return None
    gates, hidden = r_codes.shape
    real = [(codes.astype(np.float64) - (0 if z is None else z.reshape(-1, 1)))
            * s.astype(np.float64).reshape(-1, 1)
            for codes, s, z in ((w, w_scale, w_zp), (r_codes, scale, zp))]
    reach = _reach(real, [b, p])
    if reach > LIMIT:
        return None
    moved = not u8s8_exact or {w.dtype, r_codes.dtype} == {np.dtype("int8"),
                                                              np.dtype("uint8")}

    def weight(tag: str, codes, s, z, sources) -> tuple[str, str, str]:
        """The kernel's weight (1, in, 4*hidden), its scale ((1,) or (1, 4*hidden)) and its
        one zero point ((1,): the kernel refuses int8 ones per column that are not 0)."""
        shift = 128 if moved and codes.dtype == np.int8 else 0
        weights = e.derived(f"dq_lstm.{tag}.{shift}", sources[:1],
                            lambda: moved_codes(codes.T, shift)[None], None)
        scales = e.derived(f"dq_lstm.{tag}_scale", sources[1:2], lambda: s.reshape(
            (1,) if s.size == 1 else (1, -1)))
        zeros = e.derived(  # keyed by its dtype too: without a zero point it holds a 0 only
            f"dq_lstm.{tag}_zero_point.{shift}.{codes.dtype}", sources[2:], lambda: moved_codes(
                np.zeros(1, codes.dtype) if z is None else z.reshape(-1)[:1], shift), None)
        return weights, scales, zeros

    w_k = weight("W", w, w_scale, w_zp, names[:3])
    r_k = weight("R", r_codes, scale, zp, names[3:6])
    both = e.derived(f"dq_lstm.B({gates})", [bias], lambda: np.concatenate([
        np.zeros(gates, np.float32) if b is None else b.reshape(-1),
        np.full(gates, -0.0, np.float32)])[None])
    holes = None if p is None else e.derived("dq_lstm.P", [peepholes],
                                             lambda: p.reshape(1, -1))
    x = projection.x
    options = {"hidden_size": hidden,
               "direction": "reverse" if node.attrs["reverse"] else "forward"}

    def kernel(k: Emitter, outs: list[str]) -> None:
        zero = k.const([0], np.int64)
        initial = [k.op("Unsqueeze", [s, zero])[0] for s in (h, c)]
        y, *finals = k.op("DynamicQuantizeLSTM", [
            x, w_k[0], r_k[0], both, "", *initial, holes or "", w_k[1], w_k[2], r_k[1],
            r_k[2]], 3, domain=MS, **options)
        k.op("Squeeze", [y, k.const([1], np.int64)], [outs[0]])
        for last, out in zip(finals, outs[1:]):
            k.op("Squeeze", [last, zero], [out])

    def one_sequence(k: Emitter) -> str:
        size = k.op("Shape", [h], start=0, end=1)[0]
        return k.op("Squeeze", k.op("Equal", [size, k.const([1], np.int64)]))[0]

    limit = LIMIT / np.float32(reach)
    return (kernel, limit) if type(batch) is int else (kernel, limit, one_sequence)


def guard_lengths(e: Emitter, node, lengths: str, steps: str) -> None:
    """Guard a recurrence's lengths as indices into [0, T + 1) (``steps``: T, shape (1,)),
    reported by the check after the run."""
    size = e.op("Add", [steps, e.const([1], np.int64)])[0]
    e.checks.guards.append((lengths, size, f"node {node.name!r}", "sequence length"))


def clipped_lengths(e: Emitter, lengths: str, steps: str) -> str:
    """A recurrence's lengths as int64 within [0, T] (``steps``: T, shape (1,)), for the run;
    :func:`guard_lengths` reports one outside after it."""
    lens = e.op("Cast", [lengths], to=onnx.TensorProto.INT64)[0]
    return e.op("Max", [e.op("Min", [lens, steps])[0], e.const(0, np.int64)])[0]


def kernel_or_scan(e: Emitter, node, x: str, states: list[str], lengths: str | None,
                   outs: list[str], prepared,
                   scan: Callable[[Emitter, list[str], bool], None]) -> None:
    """The op into ``outs``: ``If`` the sum test (module doc) passes, the kernel ``prepared``
    (:func:`recurrence_kernel`'s or :func:`quantized_kernel`'s answer; a third entry, a
    function of the emitter giving a bool scalar, is one more condition) writes it, else
    ``scan(b, outs, guard)`` does (``guard`` False: the lengths are guarded here, outside the
    If); ``scan`` alone where nothing is prepared."""
    if prepared is None:
        scan(e, outs, True)
        return
    kernel, limit, *only_if = prepared
    if lengths is not None:
        guard_lengths(e, node, lengths, e.op("Shape", [x], start=0, end=1)[0])
    total = None
    for v in [x, *states]:
        part = e.op("ReduceSum", [e.op("Abs", [v])[0]], keepdims=0)[0]
        total = part if total is None else e.op("Add", [total, part])[0]
    below = e.op("Less", [total, e.const(limit, np.float32)])[0]
    some = e.op("Greater", [e.op("Size", [x])[0], e.const(0, np.int64)])[0]
    fast = e.op("And", [below, some])[0]
    for condition in only_if:
        fast = e.op("And", [fast, condition(e)])[0]
    branches = []
    for tag, write in (("kernel", kernel), ("scan", lambda b, names: scan(b, names, False))):
        b = e.subgraph(tag)
        names = [b.fresh() for _ in outs]
        write(b, names)
        branches.append(b.branch([(n, _F32) for n in names]))
    e.op("If", [fast], outs, then_branch=branches[0], else_branch=branches[1])
