"""com.microsoft's DynamicQuantizeLSTM: what onnxruntime's ``quantize_dynamic`` writes for every
ONNX LSTM by default (torch exports ``nn.LSTM`` as one), imported with the numbers of
onnxruntime 1.32's CPU kernel. Over a static length of up to :data:`QUANTIZED_UNROLLED_STEPS`
steps the import unrolls (:mod:`.recurrent`), one group of glue ops per step, as it unrolls an
LSTM with peepholes; over a longer or run-time one, each direction is one ABI
``quantized_lstm``, the recurrence below as one op (the numpy backend's loop of the same
numpy operations, the onnxruntime backend's Scan computing what the same onnxruntime kernels
compute: bit for bit with the unrolled steps on each). Registered in :data:`.ops.MAPPERS` under
``com.microsoft.DynamicQuantizeLSTM`` on import.

The kernel (onnxruntime's CPU LSTM with quantized weights), per direction:

- X's projection, every step at once: the whole ``(seq, batch, input)`` X quantized to uint8
  as DynamicQuantizeLinear quantizes (:func:`.dynamic.quantized_at_run_time`: one scale and
  zero point for the whole sequence), the exact int32 sum of its codes less their zero point
  by W's less its own (:func:`.dynamic.integer_sum`), times the float32 ``x_scale *
  w_scale``.
- each step: the hidden state ``(batch, hidden)`` quantized the same way (its own scale and
  zero point at every step, the initial state's too), its exact sum by R, times ``h_scale *
  r_scale``, added to the step's projection (the product and the sum each rounded, as MLAS's
  output processor).
- the gates in ONNX's blocks i, o, f, c (:func:`.recurrent.lstm_gates`): with peepholes
  ``+ P * C`` to i, f and o first, then ``+ (Wb + Rb)`` (the bias halves added once, in
  float32); sigmoid of i, f and o, tanh of c; ``C' = C * f + i * c`` (o's peephole reads C');
  ``H' = tanh(C') * o``.

Every operation but sigmoid and tanh is the kernel's float32 operation in its order. The
onnxruntime backend runs the kernel's own (MLAS) sigmoid and tanh, so it gives onnxruntime's
outputs bit for bit; the numpy backend's differ from them in the last bit at times, and where a
hidden value lands that close to half a quantization step the two quantize it to neighbouring
codes, a one-step difference the following steps carry (:mod:`.quantized_rounding`).

W ``(directions, input, 4*hidden)`` and R ``(directions, hidden, 4*hidden)`` are int8 or uint8
constants; their scales float32 constants of one value or one per gate column of each
direction; their zero points one value per direction, or one per column all equal (0 for int8
weights: onnxruntime reads the first and refuses others, and so does the import,
ModelFileError; bidirectional, of the scale's shape, which onnxruntime's offsets assume).
onnxruntime on more than one thread quantizes each thread's share of a batch apart where it
splits the batch (more than 4 sequences, or 2 or more with at most 256 hidden units), so its
own outputs then depend on its thread count; the import quantizes the whole batch at once, as
onnxruntime on one thread does (the reference's setting).

``sequence_lens`` (torch's packed sequences), as the kernel runs it: X quantized over the steps
before the longest length only (the later ones set to 0, which the range holds anyway; over a
run-time length the steps counted when the call runs); the reverse direction run forward over each
sequence reversed within its length (:meth:`_QuantizedLstm.reversed_within`, or the op's
``reverse`` with its lengths: which sequences a step quantizes together), its Y reversed back; each
step quantizing the previous step's output, which is 0 for a sequence that has ended, or where the
node has no Y the kept state (onnxruntime reads it from where it writes Y_h, which for a sequence
of length 0 it never writes: the import takes the initial state and adds a note); the final states
0 for a sequence of length 0 (:mod:`.recurrent`).
"""

from __future__ import annotations

import numpy as np

from ..errors import ModelFileError
from .dynamic import as_uint8, integer_sum, integer_weight, quantized_at_run_time
from .ops import maps
from .recurrent import _Rnn, lstm_gates
from .run_time_sizes import run_time_arange

_F32 = np.float32


#: The longest static length a DynamicQuantizeLSTM is unrolled over: a longer one is one ABI
#: ``quantized_lstm`` per direction (64 units: the op faster on the numpy backend at every
#: length, 0.63 against 0.84 ms at 8 steps; on the onnxruntime backend from some 8 steps,
#: 0.125 against 0.138 ms, at 4 steps as fast).
QUANTIZED_UNROLLED_STEPS = 4


class _QuantizedLstm(_Rnn):
    """An LSTM whose W and R are quantized (inputs 8 to 11: their scales and zero points)."""

    def __init__(self, imp, node, attrs: dict) -> None:
        super().__init__(imp, node, attrs, op="LSTM")
        #: Y is an output of the node (named, read or not): onnxruntime then quantizes a
        #: finished sequence's zeroed output at the next steps, else its kept state
        self.y_present = bool(node.output) and bool(node.output[0])
        self._reversal: str | None = None  # (:meth:`reversed_within`)
        if self.lens is not None and not self.y_present:
            imp.notes.append(
                f"node {imp.node_name!r} (DynamicQuantizeLSTM) has sequence_lens and no Y: "
                f"where a sequence has length 0, onnxruntime quantizes the others' hidden "
                f"states with memory it never wrote (where it writes Y_h), taken as the initial "
                f"state here (0 without one): the outputs can differ there; with Y as an "
                f"output they cannot")

    def unrolled_steps(self) -> int:
        return QUANTIZED_UNROLLED_STEPS

    def weights(self, attrs: dict, shape: list, direction: str) -> None:
        """W and R per direction as their codes, ``(input, 4*hidden)`` and ``(hidden,
        4*hidden)``, and zero point (:attr:`w`, :attr:`r`), their scales (:attr:`w_scale`,
        :attr:`r_scale`: per direction one value or one per column), and B."""
        imp, node, d = self.imp, self.node, len(self.directions)
        w, r = imp.const(node.input[1], "W"), imp.const(node.input[2], "R")
        hidden = r.shape[1] if r.ndim == 3 else None
        if not hidden or attrs.get("hidden_size", hidden) != hidden or \
                w.shape != (d, shape[2], 4 * hidden) or r.shape != (d, hidden, 4 * hidden):
            raise imp.unsupported(
                f"W {w.shape} and R {r.shape} must be ({d}, input, 4*hidden) and "
                f"({d}, hidden, 4*hidden) for X {shape}, direction={direction}, "
                f"hidden_size={attrs.get('hidden_size')}")
        self.hidden, self.dtype = hidden, np.dtype(_F32)
        self.w, self.w_scale = self._quantized(w, 8, "W")
        self.r, self.r_scale = self._quantized(r, 10, "R")
        self.b = self.bias(hidden)
        if self.b is not None and self.b.dtype != self.dtype:
            raise imp.unsupported(f"B of dtype {self.b.dtype}: DynamicQuantizeLSTM takes "
                                  f"float32")

    def _quantized(self, codes: np.ndarray, at: int, what: str) -> tuple[list, np.ndarray]:
        """Per direction, ``codes`` and its zero point (input ``at + 1``: one value), and
        the scales (input ``at``) as float32 ``(directions, 1 or 4*hidden)``."""
        imp, node, d, columns = self.imp, self.node, len(self.directions), codes.shape[2]
        if codes.dtype not in (np.int8, np.uint8):
            raise imp.unsupported(f"{what} of dtype {codes.dtype}: only int8 and uint8 are "
                                  f"supported")
        scale, zp = (imp.const(node.input[i], f"{what}_{n}")
                     for i, n in ((at, "scale"), (at + 1, "zero_point")))
        for a, n in ((scale, "scale"), (zp, "zero_point")):
            if a.shape not in ((d,), (d, columns)):
                raise ModelFileError(f"{what}_{n} of shape {list(a.shape)}: must be ({d},) or "
                                     f"({d}, {columns})", node=imp.node_name, op=node.op_type)
        if scale.dtype != _F32 or zp.dtype != codes.dtype:
            raise ModelFileError(f"{what}_scale of {scale.dtype} and {what}_zero_point of "
                                 f"{zp.dtype}: must be float32 and {codes.dtype}",
                                 node=imp.node_name, op=node.op_type)
        if zp.ndim == 2 and (np.any(zp != zp[:, :1]) or codes.dtype == np.int8 and zp.any()):
            raise ModelFileError(f"{what}_zero_point {zp.tolist()}: onnxruntime refuses a zero "
                                 f"point per column that varies, or is not 0 for int8 weights",
                                 node=imp.node_name, op=node.op_type)
        if d == 2 and zp.shape != scale.shape:
            raise imp.unsupported(f"{what}_zero_point of shape {list(zp.shape)} beside "
                                  f"{what}_scale of shape {list(scale.shape)}: onnxruntime reads "
                                  f"the reverse direction's zero point where its scale is")
        zp = zp.reshape(d, -1)  # onnxruntime reads each direction's first
        return [(codes[k], zp[k, 0]) for k in range(d)], scale.reshape(d, -1)

    def scale(self, scales: np.ndarray, what: str) -> str:
        """One direction's weight scales as a graph constant: one value, or one per column."""
        return self.constant(scales if scales.size > 1 else scales.reshape(()), what)

    def quantized(self, x: str, what: str) -> tuple[tuple[str, str], str]:
        """``x`` quantized at run time as DynamicQuantizeLinear: its uint8 codes and zero
        point (:func:`.dynamic.as_uint8`), and its scale, named after ``what``."""
        imp = self.imp
        codes, scale, zp = quantized_at_run_time(imp, self.node, value=x, tag=what)
        return as_uint8(imp, codes, zp, what), scale

    def time_positions(self, rank: int) -> str:
        """``arange(steps)`` along the time axis of a rank-``rank`` value (int64): a constant,
        or over a run-time length counted when the call runs (:func:`.run_time_arange`)."""
        shape = [1] * rank
        shape[self.layout] = self.steps
        if type(self.steps) is not int:
            return run_time_arange(self.imp, shape, self.layout)
        return self.constant(np.arange(self.steps, dtype=np.int64).reshape(shape),
                             f".positions{rank}")

    def within_longest(self, x: str) -> str:
        """X with the steps from the longest sequence on set to 0: onnxruntime quantizes X
        over the steps before the longest sequence's length only (a 0 leaves the range, which
        holds 0, as it is). Over a run-time length the lengths are read as they are: one
        outside [0, steps] keeps every step or none here, and the ``quantized_lstm`` op
        refuses it."""
        imp = self.imp
        if type(self.steps) is int:
            lens = self.lengths()
        else:
            [lens] = imp.emit("cast", [imp.tensor(self.lens)], [None], {"dtype": "int64"},
                              suffix=".x.lens")
        [longest] = imp.emit("amax", [lens], [None],
                             {"axes": list(range(len(imp.types[lens].shape)))},
                             suffix=".x.longest")
        [before] = imp.emit("less", [self.time_positions(3), longest], [None],
                            suffix=".x.before_longest")
        return imp.emit("where", [before, x, self.zero()], [None], suffix=".x.used")[0]

    def reversed_within(self, name: str, tag: str) -> str:
        """``name`` (X's layout, its last axis of any size) with each sequence's steps
        reversed within its length (onnxruntime's ReverseSequence: position t of sequence b
        from ``length[b] - 1 - t``, and from t past the length): a ``gather_elements`` along
        time at indices computed once from the lengths, broadcast over the last axis."""
        imp = self.imp
        if self._reversal is None:
            t, lens = self.time_positions(2), self.lengths()  # lens (batch, 1)
            if self.layout == 0:
                [lens] = imp.emit("reshape", [lens], [None], {"shape": [1, -1]},
                                  suffix=".reversal.lens")
            one = self.constant(np.array(1, np.int64), ".one")
            [last] = imp.emit("sub", [lens, one], [None], suffix=".reversal.last")
            [mirrored] = imp.emit("sub", [last, t], [None], suffix=".reversal.mirrored")
            [inside] = imp.emit("less", [t, lens], [None], suffix=".reversal.inside")
            [index] = imp.emit("where", [inside, mirrored, t], [None], suffix=".reversal")
            [self._reversal] = imp.emit("unflatten", [index], [None],
                                        {"axis": 1, "sizes": [-1, 1]}, suffix=".reversal3")
        columns = imp.types[name].shape[2]
        wide = self.constant(np.zeros(columns, np.int64), f"{tag}.columns")
        [index] = imp.emit("add", [self._reversal, wide], [None], suffix=f"{tag}.reversal")
        return imp.emit("gather_elements", [name, index], [None], {"axis": self.layout},
                        suffix=f"{tag}.reversed")[0]

    def reversed_steps(self, values: list[str], tag: str) -> list[str]:
        """Per-step ``(batch, hidden)`` values, each sequence's reversed within its length
        (:meth:`reversed_within`): the reverse direction's outputs back in their places."""
        imp, t = self.imp, self.layout
        shape = [1, -1, self.hidden] if t == 0 else [-1, 1, self.hidden]
        parts = [imp.emit("reshape", [v], [None], {"shape": shape}, suffix=f"{tag}.t{i}")[0]
                 for i, v in enumerate(values)]
        [whole] = (parts if len(parts) == 1 else
                   imp.emit("concat", parts, [None], {"axis": t}, suffix=f"{tag}.whole"))
        return self.inputs(self.reversed_within(whole, tag), f"{tag}.back")

    def product(self, quantized: tuple[str, str], weight, scale: str, what: str) -> str:
        """The exact sum of :meth:`quantized`'s codes by ``weight``
        (:class:`.dynamic.IntegerWeight`), times ``x_scale * scale``: float32, ``4*hidden``
        columns."""
        imp = self.imp
        codes, x_scale = quantized
        [total] = imp.emit("cast", [integer_sum(imp, codes, weight, tag=what)], [None],
                           {"dtype": "float32"}, suffix=f"{what}/float32")
        [multiplier] = imp.emit("mul", [x_scale, scale], [None], suffix=f"{what}/multiplier")
        return imp.emit("mul", [total, multiplier], [None], suffix=f"{what}/scaled")[0]


@maps("com.microsoft.DynamicQuantizeLSTM")
def _dynamic_quantize_lstm(imp, node, attrs):
    """The quantized LSTM with the kernel's numbers (module doc): X's projection, then the
    steps unrolled, or one ABI ``quantized_lstm`` per direction (:attr:`_Rnn.sequence`)."""
    rnn = _QuantizedLstm(imp, node, attrs)
    hid, name = rnn.hidden, imp.node_name
    h0, c0 = rnn.initial(5, "initial_h"), rnn.initial(6, "initial_c")
    x = imp.tensor(node.input[0])
    if rnn.lens is not None:
        x = rnn.within_longest(x)
    # X quantized once for every direction, named after the first
    x = rnn.quantized(x, f"{rnn.directions[0]}.x")
    # Wb + Rb, added once in float32 as the kernel does, in the gate blocks i, o, f, c
    bias = None if rnn.b is None else (rnn.b[:, :4 * hid] + rnn.b[:, 4 * hid:]).astype(_F32)
    ys, finals_h, finals_c = [], [], []
    for d, s in enumerate(rnn.directions):
        w = integer_weight(imp, *rnn.w[d], f"{name}{s}.W")
        w_scale, r_scale = rnn.scale(rnn.w_scale[d], f"{s}.W_scale"), rnn.scale(
            rnn.r_scale[d], f"{s}.R_scale")
        projection = rnn.product(x, w, w_scale, f"{s}.x")
        run = _over_the_sequence if rnn.sequence else _unrolled
        y, h, c = run(rnn, d, s, projection, h0[d], c0[d], r_scale, bias)
        ys.append(y)
        finals_h.append(h)
        finals_c.append(c)
    rnn.outputs(ys, [finals_h, finals_c])


def _unrolled(rnn: _QuantizedLstm, d: int, s: str, projection: str, h: str, c: str,
              r_scale: str, bias: np.ndarray | None) -> tuple[list[str], str, str]:
    """Direction ``d``'s steps unrolled: per step its outputs, and the final states."""
    imp, hid = rnn.imp, rnn.hidden
    r = integer_weight(imp, *rnn.r[d], f"{imp.node_name}{s}.R")
    # with sequence_lens the reverse direction runs forward over each sequence reversed
    # within its length, as onnxruntime does (which sequences a step quantizes together)
    within = bool(s) and rnn.lens is not None
    if within:
        projection = rnn.reversed_within(projection, f"{s}.x")
    xs = rnn.inputs(projection, f"{s}.x")
    biases = rnn.blocks(bias, d, "iofc", f"{s}.bias")
    peepholes = rnn.blocks(rnn.peepholes, d, "iof", f"{s}.peephole")
    hs = [None] * rnn.steps
    state = h  # what the next step quantizes: onnxruntime's previous output
    for t in (range(rnn.steps) if within else rnn.order(s)):
        step = rnn.step_emitter(f"{s}.t{t}")
        what = f"{s}.t{t}.h"
        gates = step("add", [xs[t], rnn.product(rnn.quantized(state, what), r, r_scale,
                                                what)])
        hs[t], (h, c) = rnn.masked(t, s, lstm_gates(step, gates, c, hid, peepholes, biases),
                                   [h, c])
        state = hs[t] if rnn.y_present else h
    return (rnn.reversed_steps(hs, f"{s}.y") if within else hs), h, c


def _over_the_sequence(rnn: _QuantizedLstm, d: int, s: str, projection: str, h: str, c: str,
                       r_scale: str, bias: np.ndarray | None) -> tuple[str, str, str]:
    """Direction ``d`` as one ABI ``quantized_lstm`` (its reverse within each sequence's
    length, as the unrolled steps run it): its y ``(seq, batch, hidden)`` and final states."""
    imp = rnn.imp
    codes, zp = rnn.r[d]
    weight = rnn.constant(np.ascontiguousarray(codes.T), f"{s}.R")
    zero_point = None if not zp else rnn.constant(np.asarray(zp).reshape(()), f"{s}.R_zero")
    ins = [rnn.sequence_first(projection), h, c, weight, r_scale, zero_point,
           None if bias is None else rnn.constant(bias[d], f"{s}.bias"),
           None if rnn.lens is None else imp.tensor(rnn.lens),
           None if rnn.peepholes is None else rnn.constant(rnn.peepholes[d], f"{s}.peepholes")]
    y, h, c = imp.emit("quantized_lstm", ins, [None] * 3,
                       {"reverse": bool(s), "quantize_y": rnn.y_present}, suffix=s)
    return y, h, c
