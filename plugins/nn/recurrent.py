"""LSTM cell kernel and layer (carrying state across time steps is the caller's job), and the
kernels of the recurrences over a whole sequence: :func:`lstm` / :func:`make_lstm` (the cell
at each step), :func:`gru` / :func:`make_gru` and :func:`rnn` / :func:`make_rnn` (torch's
nn.GRU and nn.RNN), each one layer and direction. The ``make_`` forms prepare the weights once
(transposed, the biases that can be folded added up): the input's share of every step is then
one GEMM over the whole sequence, and each step one GEMV of the state."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from abi.errors import ContractError, ShapeError
from abi.indices import check_indices

from ._common import check_f32, check_ndim, check_param, shape_str, uniform

__all__ = ["gru", "lstm", "lstm_cell", "lstm_gates", "make_gru", "make_lstm", "make_rnn", "rnn",
           "LSTMCell"]


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


def _sequence_weights(weight_ih: np.ndarray, weight_hh: np.ndarray, bias_ih: np.ndarray | None,
                      bias_hh: np.ndarray | None, gates: int, where: str) -> int:
    """Check a recurrence's weights ((gates*hidden, input), (gates*hidden, hidden)) and
    biases; return hidden."""
    check_f32(weight_hh, "weight_hh", where)
    check_ndim(weight_hh, "weight_hh", where, ndim=2, rule=f"({gates}*hidden, hidden)")
    rows, hidden = weight_hh.shape
    if rows != gates * hidden:
        raise ShapeError(f"{where}: weight_hh {shape_str(weight_hh.shape)} must be "
                         f"({gates}*hidden, hidden)", where=where,
                         expected=(gates * hidden, hidden), got=weight_hh.shape)
    check_f32(weight_ih, "weight_ih", where)
    check_ndim(weight_ih, "weight_ih", where, ndim=2, rule=f"({gates}*hidden, input_size)")
    check_param(weight_ih, "weight_ih", where, (rows, weight_ih.shape[1]))
    check_param(bias_ih, "bias_ih", where, (rows,))
    check_param(bias_hh, "bias_hh", where, (rows,))
    return hidden


def _sequence_start(x: np.ndarray, h: np.ndarray | None, inputs: int, hidden: int,
                    where: str) -> np.ndarray:
    """Check ``x`` (seq, batch, inputs) and ``h``; return the state to start from (a copy)."""
    check_f32(x, "input", where)
    check_ndim(x, "input", where, ndim=3, rule="(seq, batch, input_size)")
    if x.shape[2] != inputs:
        raise ShapeError(f"{where}: input {shape_str(x.shape)} must be (seq, batch, {inputs})",
                         where=where, expected=(x.shape[0], x.shape[1], inputs), got=x.shape)
    check_param(h, "h", where, (x.shape[1], hidden))
    return np.zeros((x.shape[1], hidden), np.float32) if h is None else np.array(h, np.float32)


def _input_shares(x: np.ndarray, w_x: np.ndarray, b: np.ndarray, hidden: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Every step's share of its gates from ``x`` (seq, batch, input), ``x @ w_x + b`` in one
    GEMM over the sequence, as (seq, batch, gates*hidden); and the empty y (seq, batch,
    hidden) the steps fill in."""
    steps, batch, inputs = x.shape
    shares = np.matmul(x.reshape(steps * batch, inputs), w_x)
    shares += b
    return (shares.reshape(steps, batch, w_x.shape[1]),
            np.empty((steps, batch, hidden), np.float32))


def _by_lengths(x: np.ndarray, lengths: np.ndarray | None, reverse: bool, where: str
                ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """For the op's ``lengths`` (one per sequence of ``x`` (seq, batch, input), or None):
    ``(x, valid, back)``, x in the order the steps run, ``valid`` (seq, batch, 1) whether each
    step is within its sequence (None without lengths), and for reverse the (seq, batch)
    positions that put the steps back (:func:`_put_back`). With lengths, reverse runs forward
    over each sequence reversed within its own length (so it starts at its own last step)."""
    if lengths is None:
        return x, None, None
    steps, batch = x.shape[:2]
    if not isinstance(lengths, np.ndarray) or lengths.shape != (batch,):
        got = getattr(lengths, "shape", type(lengths).__name__)
        raise ShapeError(f"{where}: lengths {got} must be ({batch},), one per sequence of x "
                         f"{shape_str(x.shape)}", where=where, expected=(batch,), got=got)
    check_indices(lengths, steps + 1, where, "sequence length")
    lengths = lengths.astype(np.int64)
    step = np.arange(steps)[:, None]
    valid = step < lengths
    back = None
    if reverse:  # step t of sequence b is its step lengths[b] - 1 - t; past the length, kept
        back = np.where(valid, lengths - 1 - step, step)
        x = x[back, np.arange(batch)]
    return x, valid[:, :, None], back


def _kept(valid: np.ndarray | None, t: int, new: np.ndarray, old: np.ndarray) -> np.ndarray:
    """A state after step ``t``: ``new``, but ``old`` where the step is past a sequence's
    length."""
    return new if valid is None else np.where(valid[t], new, old)


def _put_back(y: np.ndarray, valid: np.ndarray | None, back: np.ndarray | None) -> np.ndarray:
    """Every step's h (:func:`_by_lengths`' order) as the op's y: 0 past each sequence's
    length, the reverse direction's steps back in their places."""
    if valid is None:
        return y
    y = np.where(valid, y, np.float32(0))
    return y if back is None else y[back, np.arange(y.shape[1])]


def _order(steps: int, reverse: bool) -> range:
    """The steps' order: from the first, or with ``reverse`` from the last."""
    return range(steps - 1, -1, -1) if reverse else range(steps)


def _sigmoid_in_place(z: np.ndarray) -> np.ndarray:
    """sigmoid(z) = 0.5 * tanh(0.5 * z) + 0.5, in place: it never overflows."""
    z *= 0.5
    np.tanh(z, out=z)
    z *= 0.5
    z += 0.5
    return z


def lstm_gates(gates: np.ndarray, c: np.ndarray, peepholes: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
    """The next (h, c) of an LSTM step from its gates (batch, 4 * hidden) in the order i, f,
    o, g (the three sigmoid gates one block, so one in-place pass computes them), computed in
    place in ``gates``. ``peepholes`` (3, hidden), rows i, f, o: ``p_i * c`` and ``p_f * c``
    added to i and f before their sigmoid, ``p_o * c'`` to o after c' is computed."""
    hidden = gates.shape[1] // 4
    i, f, o, g = (gates[:, k * hidden:(k + 1) * hidden] for k in range(4))
    if peepholes is None:
        _sigmoid_in_place(gates[:, :3 * hidden])
    else:
        i += peepholes[0] * c
        f += peepholes[1] * c
        _sigmoid_in_place(gates[:, :2 * hidden])
    np.tanh(g, out=g)
    c_next = f * c
    g *= i
    c_next += g
    if peepholes is not None:
        o += peepholes[2] * c_next
        _sigmoid_in_place(o)
    h_next = np.tanh(c_next)
    h_next *= o
    return h_next, c_next


def make_lstm(weight_ih: np.ndarray, weight_hh: np.ndarray, bias_ih: np.ndarray | None,
              bias_hh: np.ndarray | None, *, reverse: bool = False, where: str = "LSTM"):
    """Prepare an LSTM over a sequence (the ``lstm`` op: :func:`lstm_cell` at each step, gates
    i, f, g, o); return ``run(x, h, c, lengths=None, peepholes=None) -> (y, h_last, c_last)``
    over ``x`` (seq, batch, input_size), ``h``, ``c`` (batch, hidden) or None for zeros,
    ``lengths`` and ``peepholes`` (3*hidden,) the op's. The gates are reordered to i, f, o, g
    here (:func:`lstm_gates`) and the biases added up."""
    hidden = _sequence_weights(weight_ih, weight_hh, bias_ih, bias_hh, 4, where)
    inputs = weight_ih.shape[1]
    order = np.r_[0:2 * hidden, 3 * hidden:4 * hidden, 2 * hidden:3 * hidden]  # i f o g
    w_x = np.ascontiguousarray(weight_ih[order].T)
    w_h = np.ascontiguousarray(weight_hh[order].T)
    b = np.zeros(4 * hidden, np.float32)
    for extra in (bias_ih, bias_hh):
        if extra is not None:
            b += extra[order]

    def run(x: np.ndarray, h: np.ndarray | None, c: np.ndarray | None,
            lengths: np.ndarray | None = None, peepholes: np.ndarray | None = None
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        h = _sequence_start(x, h, inputs, hidden, where)
        check_param(c, "c", where, h.shape)
        c = np.zeros_like(h) if c is None else np.array(c, np.float32)
        if peepholes is not None:
            peepholes = check_param(peepholes, "peepholes", where, (3 * hidden,)
                                    ).reshape(3, hidden)
        x, valid, back = _by_lengths(x, lengths, reverse, where)
        gates_x, y = _input_shares(x, w_x, b, hidden)
        for t in _order(len(y), reverse and valid is None):
            gates = gates_x[t]
            gates += np.matmul(h, w_h)
            h_next, c_next = lstm_gates(gates, c, peepholes)
            h, c = _kept(valid, t, h_next, h), _kept(valid, t, c_next, c)
            y[t] = h
        return _put_back(y, valid, back), h, c

    return run


def lstm(x: np.ndarray, h: np.ndarray | None, c: np.ndarray | None, weight_ih: np.ndarray,
         weight_hh: np.ndarray, bias_ih: np.ndarray | None, bias_hh: np.ndarray | None,
         lengths: np.ndarray | None = None, peepholes: np.ndarray | None = None, *,
         reverse: bool = False, where: str = "LSTM",
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`make_lstm` and its run on ``x``, ``h``, ``c``, ``lengths``, ``peepholes``:
    ``(y, h_last, c_last)``, ``y`` holding each step's h at its position; an empty sequence
    gives the state as given."""
    return make_lstm(weight_ih, weight_hh, bias_ih, bias_hh, reverse=reverse,
                     where=where)(x, h, c, lengths, peepholes)


def make_gru(weight_ih: np.ndarray, weight_hh: np.ndarray, bias_ih: np.ndarray | None,
             bias_hh: np.ndarray | None, *, reverse: bool = False,
             linear_before_reset: bool = True, where: str = "GRU"):
    """Prepare a GRU (the ``gru`` op: gates r, z, n as torch's nn.GRU); return
    ``run(x, h, lengths=None) -> (y, h_last)`` over ``x`` (seq, batch, input_size), ``h``
    (batch, hidden) or None for zeros, ``lengths`` the op's."""
    hidden = _sequence_weights(weight_ih, weight_hh, bias_ih, bias_hh, 3, where)
    inputs = weight_ih.shape[1]
    w_x = np.ascontiguousarray(weight_ih.T)
    b_x = np.zeros(3 * hidden, np.float32) if bias_ih is None else bias_ih.astype(np.float32)
    b_hn = np.zeros(hidden, np.float32)
    if bias_hh is not None:
        b_x[:2 * hidden] += bias_hh[:2 * hidden]  # r's and z's hidden biases fold into x's
        b_hn = bias_hh[2 * hidden:].astype(np.float32)
    w_h = np.ascontiguousarray(weight_hh.T)  # (hidden, 3*hidden): r, z, n
    w_rz = np.ascontiguousarray(w_h[:, :2 * hidden])
    w_n = np.ascontiguousarray(w_h[:, 2 * hidden:])

    def run(x: np.ndarray, h: np.ndarray | None, lengths: np.ndarray | None = None
            ) -> tuple[np.ndarray, np.ndarray]:
        h = _sequence_start(x, h, inputs, hidden, where)
        x, valid, back = _by_lengths(x, lengths, reverse, where)
        gates_x, y = _input_shares(x, w_x, b_x, hidden)
        for t in _order(len(y), reverse and valid is None):
            g = gates_x[t]
            if linear_before_reset:
                gh = np.matmul(h, w_h)
                g[:, :2 * hidden] += gh[:, :2 * hidden]
                state_n = gh[:, 2 * hidden:]
                state_n += b_hn
                r, z = np.split(_sigmoid_in_place(g[:, :2 * hidden]), 2, axis=1)
                state_n *= r
            else:
                g[:, :2 * hidden] += np.matmul(h, w_rz)
                r, z = np.split(_sigmoid_in_place(g[:, :2 * hidden]), 2, axis=1)
                state_n = np.matmul(r * h, w_n)
                state_n += b_hn
            n = g[:, 2 * hidden:]
            n += state_n
            np.tanh(n, out=n)
            h_next = h - n  # h' = (1 - z) * n + z * h = n + z * (h - n)
            h_next *= z
            h_next += n
            h = _kept(valid, t, h_next, h)
            y[t] = h
        return _put_back(y, valid, back), h

    return run


def gru(x: np.ndarray, h: np.ndarray | None, weight_ih: np.ndarray, weight_hh: np.ndarray,
        bias_ih: np.ndarray | None, bias_hh: np.ndarray | None,
        lengths: np.ndarray | None = None, *, reverse: bool = False,
        linear_before_reset: bool = True, where: str = "GRU") -> tuple[np.ndarray, np.ndarray]:
    """:func:`make_gru` and its run on ``x``, ``h``, ``lengths``: ``(y, h_last)``."""
    return make_gru(weight_ih, weight_hh, bias_ih, bias_hh, reverse=reverse,
                    linear_before_reset=linear_before_reset, where=where)(x, h, lengths)


def make_rnn(weight_ih: np.ndarray, weight_hh: np.ndarray, bias_ih: np.ndarray | None,
             bias_hh: np.ndarray | None, *, reverse: bool = False, nonlinearity: str = "tanh",
             where: str = "RNN"):
    """Prepare an Elman RNN (the ``rnn`` op, torch's nn.RNN: h' = tanh or relu of W_ih x +
    b_ih + W_hh h + b_hh); return ``run(x, h, lengths=None) -> (y, h_last)`` as
    :func:`make_gru`'s."""
    if nonlinearity not in ("tanh", "relu"):
        raise ContractError(f"{where}: nonlinearity={nonlinearity!r} must be 'tanh' or 'relu'",
                            where=where, attr="nonlinearity")
    hidden = _sequence_weights(weight_ih, weight_hh, bias_ih, bias_hh, 1, where)
    inputs = weight_ih.shape[1]
    w_x, w_h = np.ascontiguousarray(weight_ih.T), np.ascontiguousarray(weight_hh.T)
    b = np.zeros(hidden, np.float32)
    for extra in (bias_ih, bias_hh):
        if extra is not None:
            b += extra

    def run(x: np.ndarray, h: np.ndarray | None, lengths: np.ndarray | None = None
            ) -> tuple[np.ndarray, np.ndarray]:
        h = _sequence_start(x, h, inputs, hidden, where)
        x, valid, back = _by_lengths(x, lengths, reverse, where)
        pre, y = _input_shares(x, w_x, b, hidden)
        for t in _order(len(y), reverse and valid is None):
            h_next = pre[t] + np.matmul(h, w_h)
            if nonlinearity == "tanh":
                np.tanh(h_next, out=h_next)
            else:
                np.maximum(h_next, 0.0, out=h_next)
            h = _kept(valid, t, h_next, h)
            y[t] = h
        return _put_back(y, valid, back), h

    return run


def rnn(x: np.ndarray, h: np.ndarray | None, weight_ih: np.ndarray, weight_hh: np.ndarray,
        bias_ih: np.ndarray | None, bias_hh: np.ndarray | None,
        lengths: np.ndarray | None = None, *, reverse: bool = False,
        nonlinearity: str = "tanh", where: str = "RNN") -> tuple[np.ndarray, np.ndarray]:
    """:func:`make_rnn` and its run on ``x``, ``h``, ``lengths``: ``(y, h_last)``."""
    return make_rnn(weight_ih, weight_hh, bias_ih, bias_hh, reverse=reverse,
                    nonlinearity=nonlinearity, where=where)(x, h, lengths)


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
