"""A layer whose input x is a constant of the graph (an imported Gemm of two weights, a hostile
artifact): the prepared kernels (conv, linear, batchnorm, layer_norm, embedding, gather, and
the fused conv and dense chains) take x at run time, so a node of constants only is computed
once when it is prepared. Each gives what the same layer gives with x fed at run time, and
onnxruntime's result."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.builder import GraphBuilder
from plugin_host.executor import Executor
from plugins.numpy_backend import NumpyBackend

RNG = np.random.default_rng(3)


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


CONV = {"stride": [1, 1], "padding": [[1, 1], [1, 1]], "dilation": [1, 1], "groups": 1}
#: id -> (op, x, parameters, attrs, the op after it (a fused chain) or None)
LAYERS = {
    "linear": ("linear", _f32(2, 3), [_f32(4, 3), _f32(4)], {}, None),
    "linear_relu": ("linear", _f32(2, 3), [_f32(4, 3), None], {}, "relu"),
    "conv_relu": ("conv", _f32(1, 2, 4, 4), [_f32(3, 2, 3, 3), None], CONV, "relu"),
    "batchnorm": ("batchnorm", _f32(2, 3, 4), [_f32(3), _f32(3), _f32(3), np.abs(_f32(3)) + 1],
                  {"eps": 1e-5, "momentum": 0.1, "track_running_stats": True}, None),
    "layer_norm": ("layer_norm", _f32(2, 5), [_f32(5), _f32(5)],
                   {"normalized_shape": [5], "eps": 1e-5}, None),
    "embedding": ("embedding", np.array([[1, 4], [0, 0]]), [_f32(5, 3)], {}, None),
    # LeViT's attention biases: a constant table at constant indices (an unfolded GatherND)
    "gather": ("gather", _f32(4, 3), [np.array([[2, 0], [3, 3]])], {"axis": 0}, None),
}


def _graph(case: str, *, x_constant: bool):
    op, x, params, attrs, then = LAYERS[case]
    b = GraphBuilder(case)
    shift = b.input("shift", (1,), "float32", "ANY")
    given = (b.constant("x", x) if x_constant
             else b.input("x", x.shape, "int64" if x.dtype.kind == "i" else "float32", "ANY"))
    names = [b.constant(f"p{i}", p) if p is not None else None for i, p in enumerate(params)]
    y = b.op(op, given, *names, name="layer", **attrs)
    if then is not None:
        y = b.op(then, y, name="then")
    b.output(b.op("add", y, shift, name="shifted"), "y", "ANY")
    return b.build()


@pytest.mark.parametrize("case", sorted(LAYERS))
def test_a_layer_of_constants_runs_as_with_x_at_run_time(case):
    from plugins.onnxruntime_backend import OnnxruntimeBackend

    x = LAYERS[case][1]
    shift = np.array([0.5], np.float32)
    want = Executor(_graph(case, x_constant=False), NumpyBackend()).run(
        {"x": x, "shift": shift})["y"]
    for backend in (NumpyBackend(), OnnxruntimeBackend()):
        got = Executor(_graph(case, x_constant=True), backend).run({"shift": shift})["y"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=backend.name)


def test_a_conv_whose_output_is_a_graph_output_is_not_fused_with_its_relu():
    """The numpy backend proposes conv -> relu as one chain only where the conv's output is
    read by the relu alone and is no graph output (the executor refuses the chain otherwise:
    a model whose output was renamed to the conv's, its relu read by nothing)."""
    b = GraphBuilder("dead_relu")
    x = b.input("x", (1, 2, 4, 4), "float32", "NCHW")
    y = b.op("conv", x, b.constant("w", _f32(3, 2, 3, 3)), None, name="conv", **CONV)
    b.op("relu", y, name="relu")
    b.output(y, "y", "NCHW")
    graph = b.build()
    assert NumpyBackend().fuse(graph) == []
    x_value = _f32(1, 2, 4, 4)
    got = Executor(graph, NumpyBackend()).run({"x": x_value})["y"]
    assert (got < 0).any()  # the conv's output, not the relu's
