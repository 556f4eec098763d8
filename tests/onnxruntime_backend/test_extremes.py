"""amax and amin on the onnxruntime backend: onnxruntime's ReduceMax / ReduceMin (which skip a
nan) times Clip(sum of squares, 1, 1), so nan exactly where the reduced values hold one, as
numpy and the numpy backend give, and elsewhere onnxruntime's extreme bit for bit."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from plugin_host.builder import GraphBuilder
from plugin_host.executor import Executor
from plugins.numpy_backend import NumpyBackend
from plugins.onnxruntime_backend import OnnxruntimeBackend
from tests.onnxruntime_backend.test_ops import model_ops

SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 3e38, -3e38, 1e-45],
                    np.float32)


def extreme_graph(op, shape, axes, keepdim):
    b = GraphBuilder(op)
    x = b.input("x", shape, "float32", "ANY")
    b.output(b.op(op, x, name="node", axes=axes, keepdim=keepdim), "y", "ANY")
    return b.build()


def onnxruntime_alone(op, x, axes, keepdim):
    """onnxruntime's own ReduceMax / ReduceMin of ``x`` (no nan check)."""
    op_type = {"amax": "ReduceMax", "amin": "ReduceMin"}[op]
    graph = helper.make_graph(
        [helper.make_node(op_type, ["x", "axes"], ["y"], keepdims=int(keepdim))], "alone",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [helper.make_tensor("axes", TensorProto.INT64, [len(axes)], axes)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    run = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return run.run(None, {"x": x})[0]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["amax", "amin"]),
       st.lists(st.integers(1, 6), min_size=1, max_size=4),
       st.data(), st.booleans(), st.floats(0.0, 0.2))
def test_extremes_are_onnxruntimes_with_numpys_nans(op, shape, data, keepdim, nan_share):
    """Over special values (nan in a share of the elements, infinities, float32's extremes,
    both zeros, a denormal) and any axes: nan where numpy's max / min is nan, elsewhere
    onnxruntime's own kernel's value bit for bit, and the same number as numpy's (the sign of
    a zero tie is onnxruntime's, as before the check)."""
    axes = sorted(data.draw(st.sets(st.integers(0, len(shape) - 1), min_size=1)))
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1)))
    rest = (1 - nan_share) / (len(SPECIALS) - 1)
    x = rng.choice(SPECIALS, size=shape, p=[nan_share] + [rest] * (len(SPECIALS) - 1))
    graph = extreme_graph(op, tuple(shape), axes, keepdim)
    assert "IsNaN" not in model_ops(graph)
    got = Executor(graph, OnnxruntimeBackend()).run({"x": x})["y"]
    want = Executor(graph, NumpyBackend()).run({"x": x})["y"]
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got, want)  # nan where nan; -0.0 == 0.0
    alone = onnxruntime_alone(op, x, axes, keepdim)
    np.testing.assert_array_equal(got[~nan].view(np.int32), alone[~nan].view(np.int32))


@pytest.mark.parametrize("op", ["amax", "amin"])
def test_one_nan_anywhere_in_a_long_row(op):
    """One nan at each position of a row of 67 (whole SIMD blocks and a tail), the rest
    infinities of both signs and float32's extremes: nan in that row alone."""
    x = np.resize(np.array([np.inf, -np.inf, 3e38, -3e38, -0.0], np.float32), (67, 67)).copy()
    x[np.arange(67), np.arange(67)] = np.nan
    x = np.concatenate([x, np.resize(x[0], (1, 67))])  # one row with no nan
    x[-1, 0] = np.float32(-np.inf)
    graph = extreme_graph(op, x.shape, [1], False)
    got = Executor(graph, OnnxruntimeBackend()).run({"x": x})["y"]
    assert np.isnan(got[:67]).all() and not np.isnan(got[67])
    assert got[67] == (np.inf if op == "amax" else -np.inf)


def arg_graph(op, shape, axis, keepdim):
    b = GraphBuilder(op)
    x = b.input("x", shape, "float32", "ANY")
    b.output(b.op(op, x, name="node", axis=axis, keepdim=keepdim), "y", "ANY")
    return b.build()


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["argmax", "argmin"]),
       st.lists(st.integers(1, 6), min_size=1, max_size=4),
       st.data(), st.booleans(), st.sampled_from([0.0, 0.0, 0.02, 0.3]))
def test_arg_extremes_are_numpys_with_and_without_a_nan(op, shape, data, keepdim, nan_share):
    """argmax / argmin over special values and ties (both zeros, infinities, float32's
    extremes), with no nan (the If's branch of the op alone) or some (the first nan along
    the axis wins): numpy's index, as the numpy backend gives it, everywhere."""
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1)))
    rest = (1 - nan_share) / (len(SPECIALS) - 1)
    x = rng.choice(SPECIALS, size=shape, p=[nan_share] + [rest] * (len(SPECIALS) - 1))
    graph = arg_graph(op, tuple(shape), axis, keepdim)
    assert model_ops(graph) == {"ReduceSumSquare", "IsNaN", "If"}  # the mask in a branch
    got = Executor(graph, OnnxruntimeBackend()).run({"x": x})["y"]
    want = Executor(graph, NumpyBackend()).run({"x": x})["y"]
    np.testing.assert_array_equal(got, want)
    reference = getattr(np, op)(x, axis=axis)
    np.testing.assert_array_equal(got.reshape(reference.shape), reference)


@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_one_nan_is_found_wherever_it_is(op):
    """One nan in the whole tensor, at each of 67 positions along the axis in turn (the rest
    infinities, so onnxruntime's own kernel would answer otherwise): its index, in its row
    alone; the other rows the op's own answer."""
    graph = arg_graph(op, (3, 67), 1, False)
    executor = Executor(graph, OnnxruntimeBackend())
    base = np.resize(np.array([-np.inf, np.inf, 3e38, -0.0, 0.0], np.float32), (3, 67))
    for at in range(67):
        x = base.copy()
        x[1, at] = np.nan
        got = executor.run({"x": x})["y"]
        np.testing.assert_array_equal(got, getattr(np, op)(x, axis=1))
        assert got[1] == at
