"""group_norm and instance_norm on the onnxruntime backend are onnxruntime's
LayerNormalization over each group's (or channel's) row: within float32 rounding of torch's
values in float64 where a long row's mean is large against its spread (where ReduceMean's
sums lost the digits), over sizes the call gives and empty ones, and, for one group, with its
weight and bias inside the op (no Mul or Add after it) up to ``FOLDED_ROW_LIMIT``. A batchnorm
by the batch's own statistics is such rows too (each channel's values over the batch), and
rms_norm ONNX's RMSNormalization where its last axis is fixed."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.builder import GraphBuilder
from plugin_host.executor import Executor
from plugins.numpy_backend import NumpyBackend
from plugins.onnxruntime_backend import OnnxruntimeBackend, layers
from tests.onnxruntime_backend.test_ops import model_ops

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(11)


def norm_graph(op: str, shape, channels: int, *, weight=True, bias=True, **attrs):
    b = GraphBuilder(op)
    x = b.input("x", shape, "float32", "ANY")
    w = b.constant("w", RNG.uniform(0.5, 1.5, channels).astype(np.float32)) if weight else None
    s = b.constant("b", RNG.standard_normal(channels).astype(np.float32)) if bias else None
    b.output(b.op(op, x, w, s, name="norm", eps=1e-5, **attrs), "y", "ANY")
    return b.build()


def torch_float64(graph, x: np.ndarray) -> np.ndarray:
    """What torch computes for the graph's one norm, in float64."""
    node = graph.nodes[0]
    w, b = (None if t is None else torch.from_numpy(graph.tensors[t].astype(np.float64))
            for t in node.inputs[1:3])
    v = torch.from_numpy(x.astype(np.float64))
    if node.op == "group_norm":
        y = torch.nn.functional.group_norm(v, node.attrs["num_groups"], w, b, eps=1e-5)
    else:
        y = torch.nn.functional.instance_norm(v, weight=w, bias=b, eps=1e-5)
    return y.numpy()


def both(graph, x: np.ndarray) -> list[np.ndarray]:
    return [Executor(graph, backend).run({"x": x})["y"]
            for backend in (NumpyBackend(), OnnxruntimeBackend())]


@pytest.mark.parametrize("op, shape, attrs", [
    ("group_norm", (1, 4, 224, 224), {"num_groups": 1}),
    ("group_norm", (1, 8, 224, 224), {"num_groups": 2}),
    ("instance_norm", (1, 2, 448, 448), {}),
], ids=["one_group", "two_groups", "instance"])
def test_long_rows_of_a_large_mean_keep_their_digits(op, shape, attrs):
    """Rows of 200,704 values of spread 1 about a mean of 1,000: onnxruntime's ReduceMean,
    Sub, Mul and ReduceMean (the conversion before LayerNormalization) came 1.5e-03 from the
    values; LayerNormalization and the numpy backend 3e-05 (a float32 mean of 1,000 is itself
    within 3e-05 of the mean)."""
    x = (1e3 + RNG.standard_normal(shape)).astype(np.float32)
    graph = norm_graph(op, shape, shape[1], **attrs)
    want = torch_float64(graph, x)
    for got in both(graph, x):
        assert np.abs(got - want).max() < 1e-4


@pytest.mark.parametrize("op, attrs", [("group_norm", {"num_groups": 1}),
                                       ("group_norm", {"num_groups": 3}),
                                       ("instance_norm", {})])
def test_sizes_the_call_gives_and_empty_ones(op, attrs):
    graph = norm_graph(op, ("N", 6, "H", "W"), 6, **attrs)
    runs = [Executor(graph, backend) for backend in (NumpyBackend(), OnnxruntimeBackend())]
    for size in [(2, 6, 5, 7), (1, 6, 0, 3), (0, 6, 4, 4), (1, 6, 1, 1), (3, 6, 9, 2)]:
        x = (3 + RNG.standard_normal(size)).astype(np.float32)
        numpy_y, onnxruntime_y = (run.run({"x": x})["y"] for run in runs)
        assert onnxruntime_y.shape == numpy_y.shape == size
        np.testing.assert_allclose(onnxruntime_y, numpy_y, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op, attrs", [("group_norm", {"num_groups": 1}),
                                       ("group_norm", {"num_groups": 2}),
                                       ("instance_norm", {})])
@pytest.mark.parametrize("shape, size", [(("N", 4, 3, 3), (0, 4, 3, 3)),
                                         ((2, 4, 0, 3), (2, 4, 0, 3))],
                         ids=["batch_of_0", "fixed_plane_of_0"])
def test_empty_fixed_sizes(op, attrs, shape, size):
    """A batch of 0 over fixed (C, H, W) (the conversion before LayerNormalization gave
    onnxruntime's refusal), and a plane of no values in the graph (which LayerNormalization
    refuses as a row: there is nothing to normalize)."""
    graph = norm_graph(op, shape, 4, **attrs)
    x = np.zeros(size, np.float32)
    assert [y.shape for y in both(graph, x)] == [size, size]


@pytest.mark.parametrize("weight, bias", [(True, True), (True, False), (False, True),
                                          (False, False)])
def test_one_group_takes_its_weight_and_bias_into_the_op(weight, bias, monkeypatch):
    monkeypatch.setattr(layers, "FOLDED_ROW_LIMIT", 4 * 5 * 6)  # the row's length: at most
    graph = norm_graph("group_norm", (2, 4, 5, 6), 4, weight=weight, bias=bias, num_groups=1)
    ops = model_ops(graph)
    assert "LayerNormalization" in ops and not ops & {"Mul", "Add", "ReduceMean"}, ops
    x = RNG.standard_normal((2, 4, 5, 6)).astype(np.float32)
    numpy_y, onnxruntime_y = both(graph, x)
    np.testing.assert_allclose(onnxruntime_y, numpy_y, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["two_groups", "instance", "past_the_limit", "run_time_dims"])
def test_otherwise_the_weight_and_bias_follow_the_op(case, monkeypatch):
    op, attrs, shape = "group_norm", {"num_groups": 1}, (2, 4, 5, 6)
    if case == "two_groups":
        attrs = {"num_groups": 2}
    elif case == "instance":
        op, attrs = "instance_norm", {}
    elif case == "past_the_limit":
        monkeypatch.setattr(layers, "FOLDED_ROW_LIMIT", 4 * 5 * 6 - 1)
    else:
        shape = (2, 4, "H", 6)
    graph = norm_graph(op, shape, 4, **attrs)
    ops = model_ops(graph)
    assert {"LayerNormalization", "Mul", "Add"} <= ops and "ReduceMean" not in ops, ops
    x = RNG.standard_normal((2, 4, 5, 6)).astype(np.float32)
    numpy_y, onnxruntime_y = both(graph, x)
    np.testing.assert_allclose(onnxruntime_y, numpy_y, rtol=1e-5, atol=1e-5)


def rms_graph(shape, *, weight: bool):
    b = GraphBuilder("rms_norm")
    x = b.input("x", shape, "float32", "ANY")
    w = b.constant("w", RNG.uniform(0.5, 1.5, shape[-1]).astype(np.float32)) if weight else None
    b.output(b.op("rms_norm", x, w, name="norm", eps=1e-6), "y", "ANY")
    return b.build()


@pytest.mark.parametrize("weight", [True, False])
def test_rms_norm_is_one_kernel(weight):
    """ONNX's RMSNormalization (opset 23), within float32 rounding of torch's values in
    float64, as the numpy backend."""
    graph = rms_graph((2, 7, 48), weight=weight)
    assert model_ops(graph) == {"RMSNormalization"}
    x = (3 * RNG.standard_normal((2, 7, 48))).astype(np.float32)
    w = None if not weight else torch.from_numpy(graph.tensors["w"].astype(np.float64))
    want = torch.nn.functional.rms_norm(torch.from_numpy(x.astype(np.float64)), (48,), w,
                                        eps=1e-6).numpy()
    for got in both(graph, x):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shape, sizes", [((2, "T", "D"), [(2, 3, 5), (2, 4, 0), (2, 0, 6)]),
                                         ((2, 3, 0), [(2, 3, 0)])], ids=["call_s", "of_0"])
def test_rms_norm_over_a_last_axis_the_call_gives_or_of_0(shape, sizes):
    """The kernel refuses a row of no values, which a last axis the call gives may be: there
    the six ops of its formula, whose mean over nothing is nan, over an output of no value."""
    graph = rms_graph(shape, weight=False)
    assert "RMSNormalization" not in model_ops(graph)
    runs = [Executor(graph, backend) for backend in (NumpyBackend(), OnnxruntimeBackend())]
    for size in sizes:
        x = RNG.standard_normal(size).astype(np.float32)
        numpy_y, onnxruntime_y = (run.run({"x": x})["y"] for run in runs)
        assert onnxruntime_y.shape == numpy_y.shape == size
        np.testing.assert_allclose(onnxruntime_y, numpy_y, rtol=1e-6, atol=1e-6)


def batch_stats_graph(shape):
    b = GraphBuilder("batchnorm")
    x = b.input("x", shape, "float32", "ANY")
    c = shape[1]
    w, s = (b.constant(n, RNG.uniform(0.5, 1.5, c).astype(np.float32)) for n in ("w", "b"))
    b.output(b.op("batchnorm", x, w, s, name="norm", eps=1e-5, track_running_stats=False),
             "y", "ANY")
    return b.build()


@pytest.mark.parametrize("shape", [(1, 3, 256, 256), (4, 3, 128, 128), (512, 3)],
                         ids=["batch_of_1", "batch_of_4", "rank_2"])
def test_batch_statistics_keep_their_digits(shape):
    """A batchnorm by the batch's own statistics: each channel's values over the batch and
    the planes one LayerNormalization row (ReduceMean's sums lost the digits of a mean large
    against the spread, as the group norms' did). The numpy backend's float32 means of
    (512, 3)'s columns are themselves 2.5e-04 off (four of float32's steps at 1,000), which
    its x - mean carries: 2.8e-04 here, not checked."""
    graph = batch_stats_graph(shape)
    assert "LayerNormalization" in model_ops(graph) and "ReduceMean" not in model_ops(graph)
    x = (1e3 + RNG.standard_normal(shape)).astype(np.float32)
    w, b = (torch.from_numpy(graph.tensors[n].astype(np.float64)) for n in ("w", "b"))
    want = torch.nn.functional.batch_norm(torch.from_numpy(x.astype(np.float64)), None, None,
                                          w, b, training=True, eps=1e-5).numpy()
    got = Executor(graph, OnnxruntimeBackend()).run({"x": x})["y"]
    assert np.abs(got - want).max() < 1e-4


def test_batch_statistics_over_sizes_the_call_gives():
    graph = batch_stats_graph(("N", 3, "H", 4))
    runs = [Executor(graph, backend) for backend in (NumpyBackend(), OnnxruntimeBackend())]
    for size in [(2, 3, 5, 4), (1, 3, 7, 4), (3, 3, 1, 4)]:
        x = (5 + RNG.standard_normal(size)).astype(np.float32)
        numpy_y, onnxruntime_y = (run.run({"x": x})["y"] for run in runs)
        np.testing.assert_allclose(onnxruntime_y, numpy_y, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("size", [(0, 3, 5, 4), (2, 3, 0, 4)], ids=["batch_of_0", "plane_of_0"])
def test_batch_statistics_of_no_values(size):
    """An input of no values gives an output of none on both backends, as torch's
    batch_norm(training=True) gives it (the numpy backend refused it: statistics of nothing)."""
    graph = batch_stats_graph(("N", 3, "H", 4))
    x = np.zeros(size, np.float32)
    want = torch.nn.functional.batch_norm(torch.from_numpy(x), None, None, training=True)
    for backend in (NumpyBackend(), OnnxruntimeBackend()):
        assert Executor(graph, backend).run({"x": x})["y"].shape == tuple(want.shape) == size
