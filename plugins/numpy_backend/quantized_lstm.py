"""The numpy backend's ``quantized_lstm``: onnxruntime's quantized LSTM recurrence, each step the
same numpy operations, in the same order, as the glue ops the ONNX import unrolls a short
DynamicQuantizeLSTM into (``dynamic_quantize``, ``cast``, ``integer_linear``, ``mul``, ``add``,
``sigmoid``, ``tanh``), so the op and the unrolled steps agree bit for bit."""

from __future__ import annotations

from typing import Callable

import numpy as np

from abi.quantization import dynamic_quantization, need_values
from plugins.nn.recurrent import _by_lengths, _kept, _order, _put_back

from . import glue

_F32 = np.float32


def make_quantized_lstm(weight_hh: np.ndarray, weight_scale: np.ndarray,
                        weight_zero_point: np.ndarray | None, *, reverse: bool,
                        quantize_y: bool, where: str) -> Callable:
    """Prepare the op's recurrent weight once (:func:`.glue.integer_weight`); return
    ``run(x, h, c, bias, lengths, peepholes) -> (y, h_last, c_last)``."""
    runs = glue.integer_weight(weight_hh, weight_zero_point)
    hidden = weight_hh.shape[1]

    def run(x, h, c, bias=None, lengths=None, peepholes=None):
        x, valid, back = _by_lengths(x, lengths, reverse, where)
        y = np.empty((x.shape[0], x.shape[1], hidden), _F32)
        if len(y):  # a step quantizes the state
            need_values(where, h.shape, "the state")
        biases = None if bias is None else np.split(bias, 4)
        holes = None if peepholes is None else np.split(peepholes, 3)
        state = h
        for t in _order(len(y), reverse and valid is None):
            codes, scale, zp = dynamic_quantization(state)
            total = glue.integer_sums(codes.astype(np.uint8), zp.astype(np.uint8), runs)
            gates = glue.add(x[t], glue.mul(total.astype(_F32), glue.mul(scale, weight_scale)))
            h_next, c_next = _gates(gates, c, hidden, holes, biases)
            out = h_next if valid is None else np.where(valid[t], h_next, _F32(0))
            h, c = _kept(valid, t, h_next, h), _kept(valid, t, c_next, c)
            y[t] = h
            state = out if quantize_y else h
        return _put_back(y, valid, back), h, c

    return run


def _gates(gates, c, hidden: int, peepholes, bias) -> tuple[np.ndarray, np.ndarray]:
    """One step after its gates (batch, 4*hidden), blocks i, o, f, c (the op's doc)."""
    g_i, g_o, g_f, g_c = np.split(gates, 4, axis=1)

    def gate(g, k, state):
        if peepholes is not None and k < 3:
            g = glue.add(g, glue.mul(state, peepholes[k]))
        return g if bias is None else glue.add(g, bias[k])

    i = glue.sigmoid(gate(g_i, 0, c))
    f = glue.sigmoid(gate(g_f, 2, c))
    cell = glue.add(glue.mul(c, f), glue.mul(i, glue.tanh(gate(g_c, 3, c))))
    o = glue.sigmoid(gate(g_o, 1, cell))
    return glue.mul(glue.tanh(cell), o), cell
