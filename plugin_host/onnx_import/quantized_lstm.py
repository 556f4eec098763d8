"""com.microsoft's DynamicQuantizeLSTM: what onnxruntime's ``quantize_dynamic`` writes for every
ONNX LSTM by default (torch exports ``nn.LSTM`` as one), imported with the numbers of
onnxruntime 1.32's CPU kernel and unrolled over a static sequence length, one group of glue ops
per step, as :mod:`.recurrent` unrolls an LSTM with peepholes. Registered in
:data:`.ops.MAPPERS` under ``com.microsoft.DynamicQuantizeLSTM`` on import.

The kernel (onnxruntime's CPU LSTM with quantized weights), per direction:

- X's projection, every step at once: the whole ``(seq, batch, input)`` X quantized to uint8
  as DynamicQuantizeLinear quantizes (:func:`.dynamic.quantized_at_run_time`: one scale and
  zero point for the whole sequence), the exact int32 sum of its codes less their zero point
  by W's less its own (:func:`.dynamic.weight_sum`), times the float32 ``x_scale * w_scale``.
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
onnxruntime on one thread does (the reference's setting). Refused naming the node, beyond what
:mod:`.recurrent` refuses for an LSTM: a sequence length known only at run time (the ABI's
``lstm`` computes in float32) and ``sequence_lens`` (onnxruntime quantizes a finished
sequence's zeroed state with the others).
"""

from __future__ import annotations

import numpy as np

from ..errors import ModelFileError
from .dynamic import quantized_at_run_time, weight_runs, weight_sum
from .ops import maps
from .recurrent import _Rnn, lstm_gates

_F32 = np.float32


class _QuantizedLstm(_Rnn):
    """An LSTM whose W and R are quantized (inputs 8 to 11: their scales and zero points)."""

    def __init__(self, imp, node, attrs: dict) -> None:
        super().__init__(imp, node, attrs, op="LSTM")
        if self.sequence:
            raise imp.unsupported(f"a sequence length known only at run time "
                                  f"({self.steps!r}): only a static length is unrolled with "
                                  f"its quantized steps (--dim NAME=SIZE fixes an input's "
                                  f"run-time dim)")
        if self.lens is not None:
            raise imp.unsupported(f"sequence_lens {self.lens!r}: onnxruntime quantizes the "
                                  f"zeroed state of a finished sequence with the others, "
                                  f"which is not reproduced")

    def weights(self, attrs: dict, shape: list, direction: str) -> None:
        """W and R as int32 codes less their zero point per direction, ``(input, 4*hidden)``
        and ``(hidden, 4*hidden)`` (:attr:`w`, :attr:`r`), their scales (:attr:`w_scale`,
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
        """Per direction, ``codes`` less its zero point (input ``at + 1``) as int32, and the
        scales (input ``at``) as float32 ``(directions, 1 or 4*hidden)``."""
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
        shifted = [codes[k].astype(np.int32) - np.int32(zp[k, 0]) for k in range(d)]
        return shifted, scale.reshape(d, -1)

    def scale(self, scales: np.ndarray, what: str) -> str:
        """One direction's weight scales as a graph constant: one value, or one per column."""
        return self.constant(scales if scales.size > 1 else scales.reshape(()), what)

    def quantized(self, x: str, what: str) -> tuple[str, str]:
        """``x`` quantized at run time as DynamicQuantizeLinear: its codes less their zero
        point (float32 integers) and its scale, named after ``what``."""
        imp = self.imp
        codes, scale, zp = quantized_at_run_time(imp, self.node, f"{imp.node_name}{what}",
                                                 value=x, tag=what)
        return imp.emit("sub", [codes, zp], [None], suffix=f"{what}/less_zero_point")[0], scale

    def product(self, quantized: tuple[str, str], weight, scale: str, what: str) -> str:
        """The exact sum of :meth:`quantized`'s codes by ``weight``
        (:class:`.dynamic.WeightRuns`), times ``x_scale * scale``: float32, ``4*hidden``
        columns."""
        imp = self.imp
        shifted, x_scale = quantized
        total, kind = weight_sum(imp, shifted, weight, tag=what)
        if kind != "float32":
            [total] = imp.emit("cast", [total], [None], {"dtype": "float32"},
                               suffix=f"{what}/float32")
        [multiplier] = imp.emit("mul", [x_scale, scale], [None], suffix=f"{what}/multiplier")
        return imp.emit("mul", [total, multiplier], [None], suffix=f"{what}/scaled")[0]


@maps("com.microsoft.DynamicQuantizeLSTM")
def _dynamic_quantize_lstm(imp, node, attrs):
    """The quantized LSTM unrolled with the kernel's numbers (module doc)."""
    rnn = _QuantizedLstm(imp, node, attrs)
    hid, name = rnn.hidden, imp.node_name
    h0, c0 = rnn.initial(5, "initial_h"), rnn.initial(6, "initial_c")
    # X quantized once for every direction, named after the first
    x = rnn.quantized(imp.tensor(node.input[0]), f"{rnn.directions[0]}.x")
    # Wb + Rb, added once in float32 as the kernel does, in the gate blocks i, o, f, c
    bias = None if rnn.b is None else (rnn.b[:, :4 * hid] + rnn.b[:, 4 * hid:]).astype(_F32)
    ys, finals_h, finals_c = [], [], []
    for d, s in enumerate(rnn.directions):
        w = weight_runs(imp, node, rnn.w[d], f"{name}{s}.W")
        r = weight_runs(imp, node, rnn.r[d], f"{name}{s}.R")
        w_scale, r_scale = rnn.scale(rnn.w_scale[d], f"{s}.W_scale"), rnn.scale(
            rnn.r_scale[d], f"{s}.R_scale")
        xs = rnn.inputs(rnn.product(x, w, w_scale, f"{s}.x"), f"{s}.x")
        biases = rnn.blocks(bias, d, "iofc", f"{s}.bias")
        peepholes = rnn.blocks(rnn.peepholes, d, "iof", f"{s}.peephole")
        h, c, hs = h0[d], c0[d], [None] * rnn.steps
        for t in rnn.order(s):
            step = rnn.step_emitter(f"{s}.t{t}")
            what = f"{s}.t{t}.h"
            gates = step("add", [xs[t], rnn.product(rnn.quantized(h, what), r, r_scale, what)])
            h, c = lstm_gates(step, gates, c, hid, peepholes, biases)
            hs[t] = h
        ys.append(hs)
        finals_h.append(h)
        finals_c.append(c)
    rnn.outputs(ys, [finals_h, finals_c])

