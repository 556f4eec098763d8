"""The recurrences over a sequence of run-time length against torch: the lstm op (lstm_cell
over the sequence) against torch's LSTM, gru against its GRU, rnn against its RNN (tanh and
relu); the numpy backend's prepared kernels (constant weights) and its generic ones (a weight
computed at run time, ``plugins.nn.functional``), forward and reversed, with and without
biases; with the ops' lengths against torch run on each sequence alone, and lengths outside
the sequence refused. gru without linear_before_reset, which torch has not, is checked against
onnxruntime's GRU by the ONNX import's tests."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from abi.errors import DTypeError, IndexRangeError, ShapeError
from plugin_host.builder import GraphBuilder
from plugin_host.executor import Executor
from plugins.nn import functional as fn
from plugins.numpy_backend import NumpyBackend

RNG = np.random.default_rng(7)
BATCH, INPUT, HIDDEN = 3, 5, 4


def f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def params(bias: bool) -> list:
    weights = [f32(4 * HIDDEN, INPUT, scale=0.5), f32(4 * HIDDEN, HIDDEN, scale=0.5)]
    return weights + ([f32(4 * HIDDEN, scale=0.5), f32(4 * HIDDEN, scale=0.5)] if bias
                      else [None, None])


def torch_lstm(x, h, c, w, reverse):
    """torch's LSTM over x (reversed in time and back for ``reverse``): y, h_n, c_n."""
    seq = torch.from_numpy(x)
    if reverse:
        seq = seq.flip(0)
    weights = [torch.from_numpy(a) for a in w if a is not None]
    y, h_n, c_n = torch.lstm(seq, (torch.from_numpy(h)[None], torch.from_numpy(c)[None]),
                             weights, w[2] is not None, 1, 0.0, False, False, False)
    if reverse:
        y = y.flip(0)
    return y.numpy(), h_n[0].numpy(), c_n[0].numpy()


def lstm_graph(w, reverse: bool, run_time_weight: bool, lengths: bool = False):
    """x ("t", B, I), h and c graph inputs; weight_ih a graph input when ``run_time_weight``;
    with ``lengths`` an int32 'lengths' input, the op's."""
    b = GraphBuilder("lstm")
    x = b.input("x", ("t", BATCH, INPUT), "float32", "ANY")
    h, c = (b.input(n, (BATCH, HIDDEN), "float32", "NC") for n in ("h", "c"))
    names = ("w_ih", "w_hh", "b_ih", "b_hh")
    ins = [b.input("w_ih", w[0].shape, "float32", "ANY") if run_time_weight else
           b.constant("w_ih", w[0])]
    ins += [None if a is None else b.constant(n, a) for n, a in zip(names[1:], w[1:])]
    if lengths:
        ins.append(b.input("lengths", (BATCH,), "int32", "ANY"))
    for out, name in zip(b.op("lstm", x, h, c, *ins, name="node", reverse=reverse),
                         ("y", "h_last", "c_last")):
        b.output(out, name, "ANY")
    return b.build()


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("run_time_weight", [False, True], ids=["prepared", "generic"])
def test_lstm_matches_torch(reverse, bias, run_time_weight):
    w = params(bias)
    executor = Executor(lstm_graph(w, reverse, run_time_weight), NumpyBackend())
    for steps in (1, 2, 9):
        x, h, c = f32(steps, BATCH, INPUT), f32(BATCH, HIDDEN), f32(BATCH, HIDDEN)
        feed = {"x": x, "h": h, "c": c} | ({"w_ih": w[0]} if run_time_weight else {})
        got = executor.run(feed)
        want = torch_lstm(x, h, c, w, reverse)
        for name, value in zip(("y", "h_last", "c_last"), want):
            np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-5, err_msg=name)
        # the kernel over the same sequence, one cell at a time
        direct = fn.lstm(x, h, c, *w, reverse=reverse)
        for got_one, value in zip(direct, want):
            np.testing.assert_allclose(got_one, value, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(feed["h"], h)  # the inputs are left as they were


@pytest.mark.parametrize("run_time_weight", [False, True], ids=["prepared", "generic"])
def test_an_empty_sequence_gives_the_state_as_given(run_time_weight):
    w = params(True)
    executor = Executor(lstm_graph(w, False, run_time_weight), NumpyBackend())
    h, c = f32(BATCH, HIDDEN), f32(BATCH, HIDDEN)
    feed = {"x": f32(0, BATCH, INPUT), "h": h, "c": c} | (
        {"w_ih": w[0]} if run_time_weight else {})
    got = executor.run(feed)
    assert got["y"].shape == (0, BATCH, HIDDEN)
    np.testing.assert_array_equal(got["h_last"], h)
    np.testing.assert_array_equal(got["c_last"], c)
    assert not np.shares_memory(got["h_last"], h)


def test_the_kernel_checks_the_state_of_an_empty_sequence():
    """With no step to run, the kernel still refuses a state of the wrong shape."""
    w = params(True)
    with pytest.raises(ShapeError, match=r"^LSTM: h has shape \(3, 5\), expected \(3, 4\)"):
        fn.lstm(f32(0, BATCH, INPUT), f32(BATCH, HIDDEN + 1), f32(BATCH, HIDDEN), *w)
    with pytest.raises(ShapeError, match=r"^LSTM: c has shape \(3, 5\), expected \(3, 4\)"):
        fn.lstm(f32(0, BATCH, INPUT), f32(BATCH, HIDDEN), f32(BATCH, HIDDEN + 1), *w)


GATES = {"gru": 3, "rnn": 1}


def torch_recurrence(op, x, h, w, reverse, nonlinearity):
    """torch's GRU or RNN over x (reversed in time and back for ``reverse``): y, h_n."""
    seq = torch.from_numpy(x).flip(0) if reverse else torch.from_numpy(x)
    weights = [torch.from_numpy(a) for a in w if a is not None]
    fn = torch.gru if op == "gru" else getattr(torch, f"rnn_{nonlinearity}")
    y, h_n = fn(seq, torch.from_numpy(h)[None], weights, w[2] is not None, 1, 0.0, False,
                False, False)
    return (y.flip(0) if reverse else y).numpy(), h_n[0].numpy()


def recurrence_graph(op, w, run_time_weight: bool, lengths: bool = False, **attrs):
    """x ("t", B, I) and h graph inputs; weight_hh a graph input when ``run_time_weight``;
    with ``lengths`` an int32 'lengths' input, the op's."""
    b = GraphBuilder(op)
    x = b.input("x", ("t", BATCH, INPUT), "float32", "ANY")
    h = b.input("h", (BATCH, HIDDEN), "float32", "NC")
    ins = [b.constant("w_ih", w[0]),
           b.input("w_hh", w[1].shape, "float32", "ANY") if run_time_weight else
           b.constant("w_hh", w[1])]
    ins += [None if a is None else b.constant(n, a) for n, a in zip(("b_ih", "b_hh"), w[2:])]
    if lengths:
        ins.append(b.input("lengths", (BATCH,), "int32", "ANY"))
    for out, name in zip(b.op(op, x, h, *ins, name="node", **attrs), ("y", "h_last")):
        b.output(out, name, "ANY")
    return b.build()


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("run_time_weight", [False, True], ids=["prepared", "generic"])
@pytest.mark.parametrize("op, nonlinearity", [("gru", None), ("rnn", "tanh"), ("rnn", "relu")],
                         ids=["gru", "rnn_tanh", "rnn_relu"])
def test_gru_and_rnn_match_torch(op, nonlinearity, reverse, bias, run_time_weight):
    rows = GATES[op] * HIDDEN
    w = [f32(rows, INPUT, scale=0.5), f32(rows, HIDDEN, scale=0.5)] + (
        [f32(rows, scale=0.5), f32(rows, scale=0.5)] if bias else [None, None])
    attrs = {"reverse": reverse} | ({"nonlinearity": nonlinearity} if nonlinearity else {})
    executor = Executor(recurrence_graph(op, w, run_time_weight, **attrs), NumpyBackend())
    kernel = fn.gru if op == "gru" else fn.rnn
    for steps in (1, 2, 9):
        x, h = f32(steps, BATCH, INPUT), f32(BATCH, HIDDEN)
        feed = {"x": x, "h": h} | ({"w_hh": w[1]} if run_time_weight else {})
        got = executor.run(feed)
        want = torch_recurrence(op, x, h, w, reverse, nonlinearity)
        for name, value in zip(("y", "h_last"), want):
            np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-5, err_msg=name)
        for got_one, value in zip(kernel(x, h, *w, **attrs), want):
            np.testing.assert_allclose(got_one, value, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(feed["h"], h)


@pytest.mark.parametrize("op", ["gru", "rnn"])
def test_gru_and_rnn_over_no_steps_give_the_state_as_given(op):
    rows = GATES[op] * HIDDEN
    w = [f32(rows, INPUT), f32(rows, HIDDEN), f32(rows), f32(rows)]
    h = f32(BATCH, HIDDEN)
    got = Executor(recurrence_graph(op, w, False), NumpyBackend()).run(
        {"x": f32(0, BATCH, INPUT), "h": h})
    assert got["y"].shape == (0, BATCH, HIDDEN)
    np.testing.assert_array_equal(got["h_last"], h)
    assert not np.shares_memory(got["h_last"], h)


@pytest.mark.parametrize("make, args, message", [
    (fn.make_gru, ((12, 5), (10, 3)), r"^GRU: weight_hh \(10, 3\) must be \(3\*hidden, "
                                      r"hidden\)"),
    (fn.make_rnn, ((4, 5), (4, 3)), r"^RNN: weight_hh \(4, 3\) must be \(1\*hidden, hidden\)"),
    (fn.make_gru, ((9, 5), (12, 4)), r"^GRU: weight_ih has shape \(9, 5\), expected \(12, 5\)"),
], ids=["gru_hidden", "rnn_hidden", "gru_input"])
def test_gru_and_rnn_refuse_weights_of_the_wrong_shape(make, args, message):
    with pytest.raises(ShapeError, match=message):
        make(f32(*args[0]), f32(*args[1]), None, None)


def test_gru_and_rnn_refuse_an_input_of_the_wrong_width():
    run = fn.make_rnn(f32(HIDDEN, INPUT), f32(HIDDEN, HIDDEN), None, None)
    with pytest.raises(ShapeError, match=r"^RNN: input \(2, 3, 6\) must be \(seq, batch, 5\)"):
        run(f32(2, BATCH, INPUT + 1), None)


def per_sequence(reference, x, states, lengths):
    """The recurrence with lengths from ``reference(x, *states) -> (y, *finals)`` (torch's)
    run on each sequence alone over its own steps: y 0 past them, the states after them (as
    given for a length of 0)."""
    y = np.zeros((x.shape[0], x.shape[1], HIDDEN), np.float32)
    finals = [s.copy() for s in states]
    for b, n in enumerate(lengths):
        if n:
            one = reference(x[:n, b:b + 1], *(s[b:b + 1] for s in states))
            y[:n, b] = one[0][:, 0]
            for final, value in zip(finals, one[1:]):
                final[b] = value[0]
    return [y, *finals]


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("run_time_weight", [False, True], ids=["prepared", "generic"])
@pytest.mark.parametrize("op", ["lstm", "gru", "rnn"])
def test_lengths_match_torch_on_each_sequence_alone(op, run_time_weight, reverse):
    """lengths: each sequence its own number of steps (0 to all of them); reverse starts at
    each one's own last step. Against torch run on each sequence alone, through the graph and
    the kernel."""
    rows = {"lstm": 4, "gru": 3, "rnn": 1}[op] * HIDDEN
    w = [f32(rows, INPUT, scale=0.5), f32(rows, HIDDEN, scale=0.5), f32(rows, scale=0.5),
         f32(rows, scale=0.5)]
    names = ["x", "h", "c"] if op == "lstm" else ["x", "h"]
    if op == "lstm":
        graph, kernel = lstm_graph(w, reverse, run_time_weight, lengths=True), fn.lstm

        def reference(x, h, c):
            return torch_lstm(x, h, c, w, reverse)
    else:
        graph = recurrence_graph(op, w, run_time_weight, lengths=True, reverse=reverse)
        kernel = fn.gru if op == "gru" else fn.rnn

        def reference(x, h):
            return torch_recurrence(op, x, h, w, reverse, "tanh")
    executor = Executor(graph, NumpyBackend())
    for steps, lengths in ((5, [5, 2, 0]), (5, [1, 5, 3]), (1, [0, 1, 1]), (0, [0, 0, 0])):
        x = f32(steps, BATCH, INPUT)
        x[lengths[0]:, 0] = np.nan  # past the first sequence's length: never read
        states = [f32(BATCH, HIDDEN) for _ in names[1:]]
        lengths = np.array(lengths, np.int32)
        want = per_sequence(reference, x, states, lengths)
        feed = dict(zip(names, [x, *states])) | {"lengths": lengths} | (
            {("w_ih" if op == "lstm" else "w_hh"): w[0 if op == "lstm" else 1]}
            if run_time_weight else {})
        got = executor.run(feed)
        direct = kernel(x, *states, *w, lengths, reverse=reverse)
        for k, name in enumerate(["y", "h_last", "c_last"][:len(names)]):
            np.testing.assert_allclose(got[name], want[k], rtol=1e-5, atol=1e-5, err_msg=name)
            np.testing.assert_allclose(direct[k], want[k], rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("lengths, error, message", [
    ([4, 1, 2], IndexRangeError, r"^LSTM: 1 sequence length index\(es\) outside \[0, 4\): "
                                 r"\(0,\)=4"),
    ([-1, 1, 2], IndexRangeError, r"^LSTM: 1 sequence length index\(es\) outside \[0, 4\)"),
    ([1.0, 1.0, 2.0], DTypeError, r"^LSTM: indices have dtype float32, expected an integer"),
    ([1, 2], ShapeError, r"^LSTM: lengths \(2,\) must be \(3,\), one per sequence of x "
                         r"\(3, 3, 5\)"),
], ids=["past-the-end", "negative", "float", "one-short"])
def test_lengths_outside_the_sequence_are_refused(lengths, error, message):
    w = params(True)
    x, h, c = f32(3, BATCH, INPUT), f32(BATCH, HIDDEN), f32(BATCH, HIDDEN)
    dtype = np.float32 if isinstance(lengths[0], float) else np.int64
    with pytest.raises(error, match=message):
        fn.lstm(x, h, c, *w, np.array(lengths, dtype))


@pytest.mark.parametrize("peepholes, error, message", [
    (np.zeros(4 * HIDDEN, np.float32), ShapeError,
     rf"^LSTM: peepholes has shape \({4 * HIDDEN},\), expected \({3 * HIDDEN},\)"),
    (np.zeros(3 * HIDDEN, np.float64), DTypeError, r"^LSTM: peepholes"),
], ids=["four-blocks", "float64"])
def test_peepholes_of_the_wrong_shape_or_dtype_are_refused(peepholes, error, message):
    x, h, c = f32(3, BATCH, INPUT), f32(BATCH, HIDDEN), f32(BATCH, HIDDEN)
    with pytest.raises(error, match=message):
        fn.lstm(x, h, c, *params(True), None, peepholes)
