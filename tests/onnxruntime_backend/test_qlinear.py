"""qlinear_sigmoid, qlinear_leaky_relu, qlinear_mul and qlinear_concat on the onnxruntime backend:
onnxruntime's com.microsoft kernels, their outputs the numpy backend's bit for bit (itself onnxruntime's
reference numbers, tests/numpy_backend/test_qlinear.py), and refusals naming the node where
QLinearMul would not give the op's codes or QLinearConcat cannot take the parameters."""

from __future__ import annotations

import numpy as np
import pytest

from abi.errors import BackendError
from plugin_host.executor import Executor
from plugins.onnxruntime_backend import OnnxruntimeBackend
from tests.numpy_backend.test_qlinear import (MUL_NAMES, SHAPES, UNARY, UNARY_NAMES,
                                              concat_case, graph_of, numpy_run, parameters)
from tests.numpy_backend.test_qlinear_conv import codes

from .test_ops import model_ops


def _onnxruntime_run(op, names, values, attrs, codes_at, constant=True):
    graph, feed = graph_of(op, names, values, attrs, codes_at, constant)
    return graph, Executor(graph, OnnxruntimeBackend()).run(feed)["y"]


@pytest.mark.parametrize("case", sorted(UNARY))
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("constant", [True, False], ids=["constant", "run_time"])
def test_tables_give_the_numpy_backend_bits(case, dtype, constant):
    op_type, attrs = UNARY[case]
    op = case.removesuffix("_default")
    rng = np.random.default_rng(len(case) + len(dtype))
    info = np.iinfo(dtype)
    x = np.arange(info.min, info.max + 1).astype(dtype).reshape(2, 2, 64)
    for _ in range(6):
        values = [x, *parameters(rng, dtype, 2)]
        graph, got = _onnxruntime_run(op, UNARY_NAMES, values, attrs, (0,), constant)
        assert model_ops(graph) == {op_type}
        want = numpy_run(op, UNARY_NAMES, values, attrs, (0,), constant)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("shapes", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_mul_gives_the_numpy_backend_bits(shapes, dtype):
    rng = np.random.default_rng(7 + len(str(shapes)))
    for _ in range(10):
        a, b = (codes(rng, dtype, s) for s in shapes)
        sa, za, sb, zb, sc, zc = parameters(rng, dtype, 3)
        sc = np.float32(sa * sb * 2.0 ** rng.uniform(4, 14))
        values = [a, sa, za, b, sb, zb, sc, zc]
        graph, got = _onnxruntime_run("qlinear_mul", MUL_NAMES, values, {}, (0, 3))
        assert model_ops(graph) == {"QLinearMul"}
        want = numpy_run("qlinear_mul", MUL_NAMES, values, {}, (0, 3))
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_mul_past_int32_or_of_run_time_scales_is_refused_naming_the_node():
    a = np.zeros((2, 3), np.uint8)
    zero = np.uint8(0)
    huge = [a, np.float32(1.0), zero, a, np.float32(1.0), zero, np.float32(1e-5), zero]
    with pytest.raises(BackendError, match="'node'.*reach 6.502e\\+09.*beyond int32"):
        _onnxruntime_run("qlinear_mul", MUL_NAMES, huge, {}, (0, 3))
    fine = [a, np.float32(1.0), zero, a, np.float32(1.0), zero, np.float32(1.0), zero]
    _onnxruntime_run("qlinear_mul", MUL_NAMES, fine, {}, (0, 3))  # within int32: runs
    with pytest.raises(BackendError, match="'node'.*computed when the call runs"):
        _onnxruntime_run("qlinear_mul", MUL_NAMES, fine, {}, (0, 3), constant=False)


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_concat_gives_the_numpy_backend_bits(dtype):
    rng = np.random.default_rng(5 + len(dtype))
    for same in ((1,), (), (0, 2)):
        names, values, at = concat_case(rng, dtype, same)
        graph, got = _onnxruntime_run("qlinear_concat", names, values, {"axis": 1}, at)
        assert model_ops(graph) == {"QLinearConcat"}
        want = numpy_run("qlinear_concat", names, values, {"axis": 1}, at)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_concat_of_run_time_parameters_is_refused_naming_the_node():
    names, values, at = concat_case(np.random.default_rng(2), "uint8")
    with pytest.raises(BackendError, match="'node'.*computed when the call runs"):
        _onnxruntime_run("qlinear_concat", names, values, {"axis": 1}, at, constant=False)
