"""Nodes reading the same constant tensors share one initializer for what is derived from them
(an ONNX LSTM unrolled over time: one lstm_cell per step, all reading the same weights): the
ONNX model does not grow with the number of steps beyond each node's own ops."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from plugin_host.builder import GraphBuilder
from plugin_host.executor import Executor
from plugins.onnxruntime_backend import OnnxruntimeBackend
from tests.numpy_backend.test_shared_weights import (BATCH, HIDDEN, INPUT, MB, f32, lstm_graph,
                                                     lstm_params, torch_lstm)
from tests.onnxruntime_backend.test_ops import onnx_model

RTOL, ATOL = 1e-4, 1e-5


def linear_3d_graph(steps, weight):
    """``steps`` linear nodes over a 3-D input (MatMul with the transposed weight), chained."""
    b = GraphBuilder(f"linear3d{steps}")
    y = b.input("x", (BATCH, 3, weight.shape[1]), "float32", "ANY")
    wn = b.constant("w", weight)
    for t in range(steps):
        y = b.op("tanh", b.op("linear", y, wn, None, name=f"linear{t}"), name=f"tanh{t}")
    b.output(y, "y", "ANY")
    return b.build()


@pytest.mark.parametrize("bias", [True, False])
def test_lstm_steps_share_one_initializer(bias):
    params = lstm_params(bias)
    few, many = onnx_model(lstm_graph(2, params)), onnx_model(lstm_graph(30, params))
    assert len(many.graph.initializer) == len(few.graph.initializer)
    assert few.ByteSize() > MB  # the one stacked weight
    assert many.ByteSize() - few.ByteSize() < MB / 4, (few.ByteSize(), many.ByteSize())
    xs = [f32(BATCH, INPUT) for _ in range(30)]
    h, c = f32(BATCH, HIDDEN), f32(BATCH, HIDDEN)
    out = Executor(lstm_graph(30, params), OnnxruntimeBackend()).run(
        {f"x{t}": x for t, x in enumerate(xs)} | {"h": h, "c": c})
    want_h, want_c = torch_lstm(params, xs, h, c)
    np.testing.assert_allclose(out["h_next"], want_h, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(out["c_next"], want_c, rtol=RTOL, atol=ATOL)


def test_linear_steps_share_one_transposed_weight():
    weight = f32(512, 512, scale=0.05)
    few, many = onnx_model(linear_3d_graph(2, weight)), onnx_model(linear_3d_graph(30, weight))
    assert len(many.graph.initializer) == len(few.graph.initializer) == 1
    assert many.ByteSize() - few.ByteSize() < MB / 4, (few.ByteSize(), many.ByteSize())
    x = f32(BATCH, 3, 512)
    y = torch.from_numpy(x)
    for _ in range(30):
        y = torch.tanh(torch.nn.functional.linear(y, torch.from_numpy(weight)))
    out = Executor(linear_3d_graph(30, weight), OnnxruntimeBackend()).run({"x": x})
    np.testing.assert_allclose(out["y"], y.numpy(), rtol=RTOL, atol=ATOL)


def test_cells_with_other_weights_get_their_own():
    """Cells reading p's, q's, then p's constants again: one initializer per distinct source."""
    p, q = lstm_params(), lstm_params()
    b = GraphBuilder("two")
    x = b.input("x", (BATCH, INPUT), "float32", "NC")
    h = b.input("h", (BATCH, HIDDEN), "float32", "NC")
    c = b.input("c", (BATCH, HIDDEN), "float32", "NC")
    names = [[b.constant(f"{n}.{k}", a) for n, a in params.items()]
             for k, params in enumerate((p, q))]
    for k, w in enumerate(names + names[:1]):
        h, c = b.op("lstm_cell", x, h, c, *w, name=f"cell{k}")
    b.output(h, "h3", "NC")
    graph = b.build()
    assert len(onnx_model(graph).graph.initializer) == 4  # p's weight and bias, q's
    feed = {"x": f32(BATCH, INPUT), "h": f32(BATCH, HIDDEN), "c": f32(BATCH, HIDDEN)}
    want = feed["h"], feed["c"]
    for params in (p, q, p):
        want = torch_lstm(params, [feed["x"]], *want)
    got = Executor(graph, OnnxruntimeBackend()).run(feed)["h3"]
    np.testing.assert_allclose(got, want[0], rtol=RTOL, atol=ATOL)


def test_cells_without_bias_of_other_sizes_get_their_own_zero_bias():
    """The summed bias of a cell without biases is zeros of its own size (4 * hidden)."""
    b = GraphBuilder("sizes")
    x = b.input("x", (BATCH, 6), "float32", "NC")
    y = x
    for k, (size, hidden) in enumerate(((6, 3), (3, 5))):
        z = b.constant(f"zero{k}", np.zeros((BATCH, hidden), np.float32))
        w = [b.constant(f"w_ih{k}", f32(4 * hidden, size)),
             b.constant(f"w_hh{k}", f32(4 * hidden, hidden))]
        y, _ = b.op("lstm_cell", y, z, z, *w, name=f"cell{k}")
    b.output(y, "y", "NC")
    graph = b.build()
    feed = {"x": f32(BATCH, 6)}
    want = feed["x"]
    for k in range(2):
        cell = torch.nn.LSTMCell(graph.tensors[f"w_ih{k}"].shape[1],
                                 graph.tensors[f"w_hh{k}"].shape[1], bias=False)
        with torch.no_grad():
            cell.weight_ih.copy_(torch.tensor(graph.tensors[f"w_ih{k}"]))
            cell.weight_hh.copy_(torch.tensor(graph.tensors[f"w_hh{k}"]))
            want = cell(torch.as_tensor(want))[0].numpy()
    got = Executor(graph, OnnxruntimeBackend()).run(feed)["y"]
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
