"""The qlinear element-wise ops on the onnxruntime backend (qlinear_sigmoid,
qlinear_leaky_relu, qlinear_mul, qlinear_add, qlinear_concat, qlinear_softmax,
qlinear_global_average_pool, qlinear_average_pool): onnxruntime's com.microsoft kernels, their
outputs the numpy backend's bit for bit (itself onnxruntime's reference numbers,
tests/numpy_backend/test_qlinear.py), and refusals naming the node where QLinearMul,
QLinearAdd or QLinearAveragePool would not give the op's codes or QLinearConcat or a pool
cannot take the parameters, where a softmax has no values, a pool's window none, or a global
pool's scale or count is one onnxruntime's kernel refuses."""

from __future__ import annotations

import numpy as np
import pytest

from abi.errors import BackendError, DomainError, ShapeError
from plugin_host.builder import GraphBuilder
from plugin_host.executor import Executor
from plugins.numpy_backend import NumpyBackend
from plugins.onnxruntime_backend import OnnxruntimeBackend
from tests.numpy_backend.test_qlinear import (AVERAGE_POOLS, BINARY, GLOBAL_POOLS, MUL_NAMES,
                                              SHAPES, SOFTMAXES, UNARY, UNARY_NAMES,
                                              average_pool, binary_values, concat_case,
                                              global_pool_values, graph_of, numpy_run,
                                              parameters, softmax_values, wrapping_global_pool)

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
@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_ops_give_the_numpy_backend_bits(op, shapes, dtype):
    rng = np.random.default_rng(7 + len(str(shapes)) + len(op))
    for _ in range(10):
        values = binary_values(rng, op, dtype, shapes)
        graph, got = _onnxruntime_run(op, MUL_NAMES, values, {}, (0, 3))
        assert model_ops(graph) == {BINARY[op]}
        want = numpy_run(op, MUL_NAMES, values, {}, (0, 3))
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_results_past_int32_or_run_time_scales_are_refused_naming_the_node():
    a = np.zeros((2, 3), np.uint8)
    zero = np.uint8(0)
    huge = [a, np.float32(1.0), zero, a, np.float32(1.0), zero, np.float32(1e-5), zero]
    with pytest.raises(BackendError, match="'node'.*reach 6.502e\\+09.*beyond int32"):
        _onnxruntime_run("qlinear_mul", MUL_NAMES, huge, {}, (0, 3))
    fine = [a, np.float32(1.0), zero, a, np.float32(1.0), zero, np.float32(1.0), zero]
    _onnxruntime_run("qlinear_mul", MUL_NAMES, fine, {}, (0, 3))  # within int32: runs
    with pytest.raises(BackendError, match="'node'.*computed when the call runs"):
        _onnxruntime_run("qlinear_mul", MUL_NAMES, fine, {}, (0, 3), constant=False)
    sum_past = [a, np.float32(1.0), zero, a, np.float32(1.0), zero, np.float32(1e-7), zero]
    with pytest.raises(BackendError, match="'node'.*qlinear_add whose results reach 5.1e\\+09"):
        _onnxruntime_run("qlinear_add", MUL_NAMES, sum_past, {}, (0, 3))


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


@pytest.mark.parametrize("case", SOFTMAXES, ids=str)
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("constant", [True, False], ids=["constant", "run_time"])
def test_softmax_gives_the_numpy_backend_bits(case, dtype, constant):
    shape, axis, trailing = case
    rng = np.random.default_rng(3 + len(str(case)))
    attrs = {"axis": axis, "trailing": trailing}
    for _ in range(4):
        values = softmax_values(rng, dtype, shape)
        graph, got = _onnxruntime_run("qlinear_softmax", UNARY_NAMES, values, attrs, (0,),
                                      constant)
        assert model_ops(graph) == {"QLinearSoftmax"}
        want = numpy_run("qlinear_softmax", UNARY_NAMES, values, attrs, (0,), constant)
        np.testing.assert_array_equal(got, want)


def _uint8_parameters(b, x_scale: float, x_zero_point: int, y_scale: float,
                      y_zero_point: int) -> list[str]:
    """x's and y's scales and uint8 zero points as constants of the graph ``b`` builds."""
    return [b.constant(name, np.asarray(value)) for name, value in (
        ("xs", np.float32(x_scale)), ("xz", np.uint8(x_zero_point)),
        ("ys", np.float32(y_scale)), ("yz", np.uint8(y_zero_point)))]


def test_a_softmax_of_no_values_at_run_time_is_refused_on_both_backends():
    b = GraphBuilder("softmax")
    x = b.input("x", ("N", 4), "uint8", "ANY")
    parameters_ = _uint8_parameters(b, 0.1, 0, 1 / 256, 0)
    b.output(b.op("qlinear_softmax", x, *parameters_, name="node", axis=-1), "y", "ANY")
    graph = b.build()
    for backend in (NumpyBackend(), OnnxruntimeBackend()):
        executor = Executor(graph, backend)
        with pytest.raises(ShapeError, match=r"qlinear_softmax: x of shape \(0, 4\) is empty"):
            executor.run({"x": np.zeros((0, 4), np.uint8)})
        assert executor.run({"x": np.full((1, 4), 9, np.uint8)})["y"].tolist() == [[64] * 4]


@pytest.mark.parametrize("case", GLOBAL_POOLS, ids=str)
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_global_average_pool_gives_the_numpy_backend_bits(case, dtype):
    shape, last = case
    rng = np.random.default_rng(11 + len(str(case)))
    for _ in range(6):
        values = global_pool_values(rng, dtype, shape)
        graph, got = _onnxruntime_run("qlinear_global_average_pool", UNARY_NAMES, values,
                                      {"channels_last": last}, (0,))
        assert model_ops(graph) == {"QLinearGlobalAveragePool"}
        want = numpy_run("qlinear_global_average_pool", UNARY_NAMES, values,
                         {"channels_last": last}, (0,))
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_global_average_pool_wraps_its_sum_as_the_numpy_backend(dtype):
    values = wrapping_global_pool(dtype)
    _, got = _onnxruntime_run("qlinear_global_average_pool", UNARY_NAMES, values, {}, (0,))
    np.testing.assert_array_equal(got, numpy_run("qlinear_global_average_pool", UNARY_NAMES,
                                                 values, {}, (0,)))


def _global_pool(shape, x_scale: float, y_scale: float):
    b = GraphBuilder("pool")
    x = b.input("x", shape, "uint8", "ANY")
    parameters_ = _uint8_parameters(b, x_scale, 10, y_scale, 3)
    b.output(b.op("qlinear_global_average_pool", x, *parameters_, name="node"), "y", "ANY")
    return b.build()


@pytest.mark.parametrize("x_scale, y_scale, refused, taken", [
    (3.0, 0.01, (1, 1), (2, 2)),  # 300 at a window of 1, 75 at 4
    (2.0 ** -10, 1.0, (2048, 2049), (2048, 2048))])  # below 2**-32 past 2**22 values
def test_a_global_pool_scale_out_of_range_at_the_calls_count_is_refused_on_both_backends(
        x_scale, y_scale, refused, taken):
    """Where the scale leaves onnxruntime's range at some counts the pooled dims can take, the
    onnxruntime backend gives the kernel a scale it takes at those counts and refuses the call
    after the run, as the numpy backend does, with the op's DomainError naming the node; at
    other counts both run, bit for bit; an empty window is a ShapeError on both."""
    graph = _global_pool(("N", 2, "h", "w"), x_scale, y_scale)
    assert "Where" in model_ops(graph)  # the guard
    rng = np.random.default_rng(2)
    for backend in (NumpyBackend(), OnnxruntimeBackend()):
        executor = Executor(graph, backend)
        for shape, error, says in (((1, 2, *refused), DomainError, "outside"),
                                   ((1, 2, 0, 3), ShapeError, "pools 0 values")):
            with pytest.raises(error, match=says) as caught:
                executor.run({"x": np.zeros(shape, np.uint8)})
            assert caught.value.context["node"] == "node"
        x = rng.integers(0, 256, (3, 2, *taken)).astype(np.uint8)
        np.testing.assert_array_equal(executor.run({"x": x})["y"], Executor(
            graph, NumpyBackend()).run({"x": x})["y"])
    assert "Where" not in model_ops(_global_pool(("N", 2, "h", "w"), 0.5, 0.25))  # usual
    static = _global_pool((1, 2, 1, 1), 3.0, 0.01)  # known to be refused: every call is
    for backend in (NumpyBackend(), OnnxruntimeBackend()):
        with pytest.raises(DomainError, match="= 300.0 for windows of 1 values"):
            Executor(static, backend).run({"x": np.zeros((1, 2, 1, 1), np.uint8)})


def test_a_global_pool_of_run_time_scales_is_refused_naming_the_node():
    values = global_pool_values(np.random.default_rng(4), "uint8", (1, 2, 3, 3))
    graph, _ = graph_of("qlinear_global_average_pool", UNARY_NAMES, values, {}, (0,), False)
    with pytest.raises(BackendError, match="node .node.: qlinear_global_average_pool with "
                                           "scales or zero points computed when the call "
                                           "runs"):
        Executor(graph, OnnxruntimeBackend())


@pytest.mark.parametrize("case", AVERAGE_POOLS, ids=str)
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_average_pool_gives_the_numpy_backend_bits(case, dtype):
    shape, attrs, _ = average_pool(case)
    rng = np.random.default_rng(13 + len(str(case)))
    for _ in range(6):
        values = global_pool_values(rng, dtype, shape)
        graph, got = _onnxruntime_run("qlinear_average_pool", UNARY_NAMES, values, attrs,
                                      (0,))
        assert model_ops(graph) == {"QLinearAveragePool"}
        want = numpy_run("qlinear_average_pool", UNARY_NAMES, values, attrs, (0,))
        np.testing.assert_array_equal(got, want)


def _average_pool(shape, x_scale: float, y_scale: float, **attrs):
    b = GraphBuilder("pool")
    x = b.input("x", shape, "uint8", "ANY")
    parameters_ = _uint8_parameters(b, x_scale, 10, y_scale, 3)
    y = b.op("qlinear_average_pool", x, *parameters_, name="node", **{
        "kernel_size": [2, 2], "stride": [2, 2], "padding": [[0, 0], [0, 0]], **attrs})
    if not all(type(d) is int for d in shape):  # named dims for the ABI: the codes' sums
        y = b.op("sum", b.op("cast", y, name="wide", dtype="int64"), name="total", axes=[2, 3])
    b.output(y, "y", "ANY")
    return b.build()


def test_an_average_pool_whose_whole_window_scale_is_out_of_range_is_refused_on_both():
    """x_scale / (y_scale * 4) = 300 is outside the global pool's range, which onnxruntime's
    kernel takes where the window is the whole input: the onnxruntime backend gives the kernel
    a scale it takes at such calls and refuses them after the run, as the numpy backend does,
    with the op's DomainError naming the node; at other sizes both run, bit for bit."""
    graph = _average_pool(("N", 2, "h", "w"), 3.0, 0.0025)
    assert "Where" in model_ops(graph)  # the guard
    x = np.random.default_rng(3).integers(0, 256, (2, 2, 6, 4)).astype(np.uint8)
    for backend in (NumpyBackend(), OnnxruntimeBackend()):
        executor = Executor(graph, backend)
        with pytest.raises(DomainError, match="= 300.0 for windows of 4 values") as caught:
            executor.run({"x": np.zeros((1, 2, 2, 2), np.uint8)})
        assert caught.value.context["node"] == "node"
        np.testing.assert_array_equal(executor.run({"x": x})["y"], Executor(
            graph, NumpyBackend()).run({"x": x})["y"])
    for usual in (_average_pool(("N", 2, "h", "w"), 0.5, 0.25),  # in range
                  _average_pool(("N", 2, "h", 3), 3.0, 0.0025),  # never whole
                  _average_pool(("N", 2, "h", "w"), 3.0, 0.0025, padding=[[0, 1], [0, 0]])):
        assert "Where" not in model_ops(usual)


def test_an_average_pool_of_a_call_leaving_no_window_is_refused_on_both_backends():
    """An input shorter than the kernel (2 rows, 3 x 3 by 2): onnxruntime's kernel computes a
    row of windows reaching past the input (its length (2 - 3) / 2 + 1 truncated toward 0);
    both backends raise the op's ShapeError naming the node."""
    graph = _average_pool(("N", 2, "h", "w"), 0.5, 0.25, kernel_size=[3, 3])
    for backend in (NumpyBackend(), OnnxruntimeBackend()):
        with pytest.raises(ShapeError, match="spatial axis 0 of x shape .1, 2, 2, 5. is 2") \
                as caught:
            Executor(graph, backend).run({"x": np.zeros((1, 2, 2, 5), np.uint8)})
        assert caught.value.context["node"] == "node"


def test_an_average_pool_whose_averages_pass_int32_is_refused_naming_the_node():
    """Past int32 onnxruntime's conversion gives the type's minimum where the op saturates."""
    with pytest.raises(BackendError, match="node 'node': qlinear_average_pool whose averages "
                                           "reach 2.45e\\+11 in magnitude"):
        Executor(_average_pool(("N", 2, 4, 4), 1.0, 1e-9), OnnxruntimeBackend())
    values = global_pool_values(np.random.default_rng(4), "uint8", (1, 2, 4, 4))
    graph, _ = graph_of("qlinear_average_pool", UNARY_NAMES, values, {
        "kernel_size": [2, 2], "stride": [2, 2], "padding": [[0, 0], [0, 0]]}, (0,), False)
    with pytest.raises(BackendError, match="node .node.: qlinear_average_pool with scales or "
                                           "zero points computed when the call runs"):
        Executor(graph, OnnxruntimeBackend())


def test_types_are_inferred_through_com_microsoft_ops_for_widening():
    """A graph holding a com.microsoft op and an op onnxruntime has no kernel for in its
    dtype (a sum of int8, widened to int32): the types are inferred with that domain known,
    so the sum is widened and the model loads (ONNX's inference failed on the unknown domain
    and nothing was widened: onnxruntime refused the model)."""
    b = GraphBuilder("mixed")
    x = b.input("x", (2, 6), "uint8", "ANY")
    parameters_ = _uint8_parameters(b, 0.1, 3, 1 / 256, 0)
    b.output(b.op("qlinear_sigmoid", x, *parameters_, name="sigmoid"), "y", "ANY")
    i = b.input("i", (2, 6), "int8", "ANY")
    b.output(b.op("sum", i, name="sum", axes=[1]), "s", "ANY")
    graph = b.build()
    feed = {"x": np.arange(12, dtype=np.uint8).reshape(2, 6),
            "i": np.arange(-6, 6, dtype=np.int8).reshape(2, 6)}
    want = Executor(graph, NumpyBackend()).run(dict(feed))
    got = Executor(graph, OnnxruntimeBackend()).run(dict(feed))
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])
