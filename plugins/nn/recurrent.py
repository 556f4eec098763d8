"""LSTM cell kernel and layer. Carrying state across time steps is the caller's job."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from abi.errors import ShapeError

from ._common import check_f32, check_ndim, check_param, shape_str, uniform

__all__ = ["lstm_cell", "LSTMCell"]


def _sigmoid(z: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", under="ignore"):  # exp(-z) = inf or 0: right limits
        return 1.0 / (1.0 + np.exp(-z))


def lstm_cell(x: np.ndarray, h: np.ndarray | None, c: np.ndarray | None,
              weight_ih: np.ndarray, weight_hh: np.ndarray, bias_ih: np.ndarray | None,
              bias_hh: np.ndarray | None, *, where: str = "LSTMCell",
              ) -> tuple[np.ndarray, np.ndarray]:
    """One LSTM step (gates i, f, g, o, as torch and tinygrad); returns new ``(h, c)``.

    ``x`` ``(batch, input_size)``; ``h``, ``c`` ``(batch, hidden)`` or None for zeros;
    ``weight_ih`` ``(4*hidden, input_size)``, ``weight_hh`` ``(4*hidden, hidden)``, biases
    ``(4*hidden,)`` or None. All float32.
    """
    check_f32(weight_ih, "weight_ih", where)
    check_ndim(weight_ih, "weight_ih", where, ndim=2, rule="(4*hidden, input_size)")
    four_h, in_f = weight_ih.shape
    if four_h % 4:
        raise ShapeError(f"{where}: weight_ih {shape_str(weight_ih.shape)} must have 4*hidden "
                         f"rows", where=where, expected="(4*hidden, input_size)",
                         got=weight_ih.shape)
    hid = four_h // 4
    check_param(weight_hh, "weight_hh", where, (four_h, hid))
    if weight_hh is None:
        raise ShapeError(f"{where}: weight_hh is required", where=where,
                         expected=(four_h, hid), got=None)
    check_param(bias_ih, "bias_ih", where, (four_h,))
    check_param(bias_hh, "bias_hh", where, (four_h,))
    check_f32(x, "input", where)
    check_ndim(x, "input", where, ndim=2, rule="(batch, input_size)")
    if x.shape[1] != in_f:
        raise ShapeError(f"{where}: input {shape_str(x.shape)} must be (batch, {in_f}) for "
                         f"weight_ih {shape_str(weight_ih.shape)}", where=where,
                         expected=(x.shape[0], in_f), got=x.shape)
    state_shape = (x.shape[0], hid)
    check_param(h, "h", where, state_shape)
    check_param(c, "c", where, state_shape)

    gates = np.matmul(x, weight_ih.T)
    if bias_ih is not None:
        gates += bias_ih
    if h is not None:
        gates += np.matmul(h, weight_hh.T)
    if bias_hh is not None:
        gates += bias_hh
    i, f, g, o = (gates[:, k * hid:(k + 1) * hid] for k in range(4))
    c_new = _sigmoid(i) * np.tanh(g)
    if c is not None:
        c_new += _sigmoid(f) * c
    h_new = _sigmoid(o) * np.tanh(c_new)
    return h_new, c_new


class LSTMCell:
    """A long short-term memory cell (tinygrad ``nn.LSTMCell``).

    ``weight_ih`` ``(4*hidden_size, input_size)`` and ``weight_hh`` ``(4*hidden_size,
    hidden_size)`` are U(-1/sqrt(hidden), 1/sqrt(hidden)); ``bias_ih``, ``bias_hh``
    ``(4*hidden_size,)`` start at zero (tinygrad), or are None without ``bias``.
    ``self(x, (h, c))`` returns the new ``(h, c)``; omitting ``hc`` means zeros.
    """

    abi_op = "lstm_cell"

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, *,
                 rng: np.random.Generator | None = None) -> None:
        stdv = 1.0 / math.sqrt(hidden_size)
        self.weight_ih: np.ndarray = uniform(rng, (hidden_size * 4, input_size), stdv)
        self.weight_hh: np.ndarray = uniform(rng, (hidden_size * 4, hidden_size), stdv)
        self.bias_ih: np.ndarray | None = np.zeros(hidden_size * 4, np.float32) if bias else None
        self.bias_hh: np.ndarray | None = np.zeros(hidden_size * 4, np.float32) if bias else None

    def __call__(self, x: np.ndarray, hc: tuple[np.ndarray, np.ndarray] | None = None,
                 ) -> tuple[np.ndarray, np.ndarray]:
        h, c = (None, None) if hc is None else hc
        return lstm_cell(x, h, c, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)

    def abi_attrs(self) -> dict[str, Any]:
        return {}

    def abi_tensors(self) -> dict[str, np.ndarray | None]:
        return {"weight_ih": self.weight_ih, "weight_hh": self.weight_hh,
                "bias_ih": self.bias_ih, "bias_hh": self.bias_hh}
