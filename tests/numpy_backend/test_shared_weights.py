"""Nodes reading the same constant tensors share one prepared copy of them (an ONNX LSTM or GRU
unrolled over time: one node per step, all reading the same weights): the memory an executor
holds does not grow with the number of steps, and the numbers are torch's."""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pytest
import torch

from plugin_host.backend import prepare_pass, prepared_once
from plugin_host.builder import GraphBuilder
from plugin_host.executor import Executor
from plugins.numpy_backend import NumpyBackend

RNG = np.random.default_rng(0)
BATCH, INPUT, HIDDEN = 2, 384, 128  # the stacked LSTM weight: (512, 512) float32, 1 MB
MB = 1 << 20


def f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def lstm_params(bias=True):
    params = {"w_ih": f32(4 * HIDDEN, INPUT, scale=0.1),
              "w_hh": f32(4 * HIDDEN, HIDDEN, scale=0.1)}
    if bias:
        params |= {"b_ih": f32(4 * HIDDEN, scale=0.1), "b_hh": f32(4 * HIDDEN, scale=0.1)}
    return params


def lstm_graph(steps, params):
    """``steps`` lstm_cell nodes chained through h and c, all reading the same constants."""
    b = GraphBuilder(f"lstm{steps}")
    w = [b.constant(n, params[n]) if n in params else None
         for n in ("w_ih", "w_hh", "b_ih", "b_hh")]
    h = b.state("h", (BATCH, HIDDEN), "float32", "NC")
    c = b.state("c", (BATCH, HIDDEN), "float32", "NC")
    h0, c0 = h, c
    for t in range(steps):
        x = b.input(f"x{t}", (BATCH, INPUT), "float32", "NC")
        h, c = b.op("lstm_cell", x, h, c, *w, name=f"step{t}")
    b.output(h, "h_next", "NC", state_of=h0)
    b.output(c, "c_next", "NC", state_of=c0)
    return b.build()


def linear_graph(steps, weight, bias):
    """``steps`` linear nodes, each followed by tanh, all reading the same weight and bias."""
    b = GraphBuilder(f"linear{steps}")
    y = b.input("x", (BATCH, weight.shape[1]), "float32", "NC")
    wn, bn = b.constant("w", weight), b.constant("b", bias)
    for t in range(steps):
        y = b.op("tanh", b.op("linear", y, wn, bn, name=f"linear{t}"), name=f"tanh{t}")
    b.output(y, "y", "NC")
    return b.build()


def held_by_executor(graph):
    """``(bytes, executor)``: the memory allocated while preparing ``graph`` and still held
    afterwards (tracemalloc traces numpy's allocations)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        executor = Executor(graph, NumpyBackend())
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before, executor
    finally:
        tracemalloc.stop()


def torch_lstm(params, xs, h, c):
    cell = torch.nn.LSTMCell(INPUT, HIDDEN, bias="b_ih" in params)
    with torch.no_grad():
        for name, p in cell.named_parameters():
            short = name.replace("weight_", "w_").replace("bias_", "b_")
            p.copy_(torch.from_numpy(params[short]))
        ht, ct = torch.from_numpy(h), torch.from_numpy(c)
        for x in xs:
            ht, ct = cell(torch.from_numpy(x), (ht, ct))
    return ht.numpy(), ct.numpy()


@pytest.mark.parametrize("bias", [True, False])
def test_lstm_steps_share_one_prepared_weight(bias):
    params = lstm_params(bias)
    few, few_ex = held_by_executor(lstm_graph(2, params))
    many, many_ex = held_by_executor(lstm_graph(30, params))
    # unshared, each of the 28 extra steps would hold its own 1 MB stacked weight
    assert few > MB  # the one prepared copy is counted
    assert many - few < MB / 4, (few, many)
    xs = [f32(BATCH, INPUT) for _ in range(30)]
    h, c = f32(BATCH, HIDDEN), f32(BATCH, HIDDEN)
    out = many_ex.run({f"x{t}": x for t, x in enumerate(xs)} | {"h": h, "c": c})
    want_h, want_c = torch_lstm(params, xs, h, c)
    np.testing.assert_allclose(out["h_next"], want_h, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out["c_next"], want_c, rtol=1e-5, atol=1e-5)
    # the state carried to the next call runs through the same shared weights
    out2 = many_ex.run({f"x{t}": x for t, x in enumerate(xs)})
    want_h, want_c = torch_lstm(params, xs, want_h, want_c)
    np.testing.assert_allclose(out2["h_next"], want_h, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out2["c_next"], want_c, rtol=1e-5, atol=1e-5)


def test_linear_steps_share_one_prepared_weight():
    weight, bias = f32(512, 512, scale=0.05), f32(512, scale=0.1)
    few, _ = held_by_executor(linear_graph(2, weight, bias))
    many, ex = held_by_executor(linear_graph(30, weight, bias))
    assert few > MB
    assert many - few < MB / 4, (few, many)
    x = f32(BATCH, 512)
    y = torch.from_numpy(x)
    for _ in range(30):
        y = torch.tanh(torch.nn.functional.linear(y, torch.from_numpy(weight),
                                                  torch.from_numpy(bias)))
    np.testing.assert_allclose(ex.run({"x": x})["y"], y.numpy(), rtol=1e-5, atol=1e-5)


def test_graphs_with_the_same_tensor_names_do_not_share():
    """Sharing is by the very arrays, within one load: a second graph with the same tensor
    names and other weights gets its own."""
    xs = [f32(BATCH, INPUT) for _ in range(3)]
    h, c = f32(BATCH, HIDDEN), f32(BATCH, HIDDEN)
    for params in (lstm_params(), lstm_params()):
        out = Executor(lstm_graph(3, params), NumpyBackend()).run(
            {f"x{t}": x for t, x in enumerate(xs)} | {"h": h, "c": c})
        want_h, _ = torch_lstm(params, xs, h, c)
        np.testing.assert_allclose(out["h_next"], want_h, rtol=1e-5, atol=1e-5)


def test_prepared_once_is_per_pass_and_by_identity():
    a, b = np.ones(3), np.ones(3)
    calls = []

    def make():
        calls.append(1)
        return object()

    assert prepared_once("t", (a,), make) is not prepared_once("t", (a,), make)  # no pass
    with prepare_pass():
        first = prepared_once("t", (a, None), make)
        assert prepared_once("t", (a, None), make) is first
        assert prepared_once("t", (b, None), make) is not first  # equal values, other array
        assert prepared_once("u", (a, None), make) is not first  # another transformation
        with prepare_pass():  # a nested load has its own
            assert prepared_once("t", (a, None), make) is not first
    with prepare_pass():  # the next load does not see the last one's
        assert prepared_once("t", (a, None), make) is not first
    assert len(calls) == 7


def test_prepared_weights_are_freed_with_the_executor():
    """Nothing outlives the executor: the pass's cache is dropped when loading ends."""
    graph = lstm_graph(4, lstm_params())
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        executor = Executor(graph, NumpyBackend())
        assert tracemalloc.get_traced_memory()[0] - before > MB
        del executor
        gc.collect()
        assert tracemalloc.get_traced_memory()[0] - before < MB / 4
    finally:
        tracemalloc.stop()
