"""The qlinear element-wise ops on the numpy backend (qlinear_sigmoid, qlinear_leaky_relu,
qlinear_mul, qlinear_add, qlinear_concat, qlinear_softmax, qlinear_global_average_pool,
qlinear_average_pool): onnxruntime's com.microsoft QLinearSigmoid, QLinearLeakyRelu,
QLinearMul, QLinearAdd, QLinearConcat, QLinearSoftmax, QLinearGlobalAveragePool and
QLinearAveragePool (its CPU kernels, graph optimizations off) bit for bit, over every code,
random scales and zero points, broadcasting shapes, softmax axes, pooled layouts, windows and
a sum past int32, with the parameters constant or given when the call runs (the ops' rules:
tests/abi/test_ops_glue.py)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from plugin_host.builder import GraphBuilder
from plugin_host.executor import Executor
from plugins.numpy_backend import NumpyBackend
from plugins.numpy_backend.qlinear import _average_steps

from .test_glue import unoptimized_session
from .test_qlinear_conv import codes

MS = "com.microsoft"
UNARY = {"qlinear_sigmoid": ("QLinearSigmoid", {}),
         "qlinear_leaky_relu": ("QLinearLeakyRelu", {"alpha": 0.1}),
         "qlinear_leaky_relu_default": ("QLinearLeakyRelu", {})}
UNARY_NAMES = ["x", "x_scale", "x_zero_point", "y_scale", "y_zero_point"]
MUL_NAMES = ["a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "y_scale",
             "y_zero_point"]


def parameters(rng, dtype: str, count: int) -> list:
    """``count`` (scale, zero point) pairs: scales from 2**-12 to 2**2, zero points anywhere
    in the codes' range."""
    out = []
    for _ in range(count):
        out += [np.float32(2.0 ** rng.uniform(-12, 2)), codes(rng, dtype, ())]
    return out


def graph_of(op: str, names: list, values: list, attrs: dict, codes_at, constant: bool):
    """One node of ``op``, the codes (inputs ``codes_at``) given when the call runs, the scales
    and zero points constants (or inputs too when not ``constant``); and its feed."""
    b = GraphBuilder(op)
    feed, ins = {}, []
    for i, (name, value) in enumerate(zip(names, values)):
        value = np.asarray(value)
        if i in codes_at or not constant:
            ins.append(b.input(name, value.shape, str(value.dtype), "ANY"))
            feed[name] = value
        else:
            ins.append(b.constant(name, value))
    b.output(b.op(op, *ins, name="node", **attrs), "y", "ANY")
    return b.build(), feed


def numpy_run(op, names, values, attrs, codes_at, constant=True) -> np.ndarray:
    graph, feed = graph_of(op, names, values, attrs, codes_at, constant)
    return Executor(graph, NumpyBackend()).run(feed)["y"]


def onnxruntime_run(op_type: str, names: list, values: list, attrs: dict,
                    codes_at) -> np.ndarray:
    """onnxruntime's com.microsoft ``op_type`` of the same inputs (codes as inputs)."""
    inputs = [helper.make_tensor_value_info(names[i], helper.np_dtype_to_tensor_dtype(
        values[i].dtype), values[i].shape) for i in codes_at]
    inits = [numpy_helper.from_array(np.asarray(v), n)
             for i, (n, v) in enumerate(zip(names, values)) if i not in codes_at]
    node = helper.make_node(op_type, names, ["y"], domain=MS, **attrs)
    graph = helper.make_graph([node], "q", inputs, [helper.make_tensor_value_info(
        "y", helper.np_dtype_to_tensor_dtype(values[codes_at[0]].dtype), None)], inits)
    return unoptimized_session(graph).run(None, {names[i]: values[i] for i in codes_at})[0]


@pytest.mark.parametrize("case", sorted(UNARY))
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("constant", [True, False], ids=["constant", "run_time"])
def test_tables_are_onnxruntimes_over_every_code(case, dtype, constant):
    op_type, attrs = UNARY[case]
    op = case.removesuffix("_default")
    rng = np.random.default_rng(sum(map(ord, case + dtype)))
    info = np.iinfo(dtype)
    x = np.arange(info.min, info.max + 1).astype(dtype).reshape(4, 8, 8)
    for _ in range(12):
        values = [x, *parameters(rng, dtype, 2)]
        got = numpy_run(op, UNARY_NAMES, values, attrs, (0,), constant)
        want = onnxruntime_run(op_type, UNARY_NAMES, values, attrs, (0,))
        assert got.dtype == want.dtype == x.dtype
        np.testing.assert_array_equal(got, want)


SHAPES = [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (3, 1)), ((1, 5), (4, 1)), ((), (3, 2)),
          ((2, 1, 3), ()), ((6,), (2, 1, 6))]


BINARY = {"qlinear_mul": "QLinearMul", "qlinear_add": "QLinearAdd"}


def binary_values(rng, op: str, dtype: str, shapes) -> list:
    """Codes of ``shapes`` and random parameters, y's scale such that most results land in
    the codes' range."""
    a, b = (codes(rng, dtype, s) for s in shapes)
    sa, za, sb, zb, sc, zc = parameters(rng, dtype, 3)
    if op == "qlinear_mul":
        sc = np.float32(sa * sb * 2.0 ** rng.uniform(4, 14))
    else:
        sc = np.float32(max(sa, sb) * 2.0 ** rng.uniform(-2, 2))
    return [a, sa, za, b, sb, zb, sc, zc]


@pytest.mark.parametrize("shapes", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_ops_are_onnxruntimes(op, shapes, dtype):
    """Broadcasting either way, 0-d operands, and shapes under which onnxruntime's add takes
    its operands the other way round."""
    rng = np.random.default_rng(len(str(shapes)) + len(dtype) + len(op))
    for k in range(30):
        values = binary_values(rng, op, dtype, shapes)
        got = numpy_run(op, MUL_NAMES, values, {}, (0, 3), constant=k % 2 == 0)
        want = onnxruntime_run(BINARY[op], MUL_NAMES, values, {}, (0, 3))
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_mul_saturates_and_rounds_halves_to_even():
    a = np.array([0, 1, 2, 3, 5, 255, 255], np.uint8)
    b = np.array([0, 1, 1, 1, 1, 255, 0], np.uint8)
    half = [np.float32(0.5), np.uint8(0)]
    got = numpy_run("qlinear_mul", MUL_NAMES, [a, *half, b, np.float32(1), np.uint8(0),
                                              np.float32(1), np.uint8(0)], {}, (0, 3))
    # 0, 0.5, 1, 1.5, 2.5 round half to even; 255 * 255 * 0.5 saturates at 255
    np.testing.assert_array_equal(got, [0, 0, 1, 2, 2, 255, 0])


def concat_case(rng, dtype: str, same: tuple = (1,)):
    """A qlinear_concat of three inputs along axis 1 (inputs[0] (y_scale), [1], then triples),
    those at ``same`` of y's own scale and zero point: (names, values, codes_at)."""
    y = parameters(rng, dtype, 1)
    names, values, at = ["ys", "yz"], list(y), []
    info = np.iinfo(dtype)
    for k, width in enumerate((3, 1, 5)):
        x = np.arange(info.min, info.max + 1).astype(dtype)[rng.permutation(256)]
        x = np.resize(x, (2, width, 4, 8)).astype(dtype)
        at.append(len(values))
        names += [f"x{k}", f"s{k}", f"z{k}"]
        values += [x, *(y if k in same else parameters(rng, dtype, 1))]
    return names, values, tuple(at)


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("constant", [True, False], ids=["constant", "run_time"])
def test_concat_is_onnxruntimes(dtype, constant):
    rng = np.random.default_rng(11 + len(dtype))
    for same in ((1,), (), (0, 2)):
        for _ in range(4):
            names, values, at = concat_case(rng, dtype, same)
            got = numpy_run("qlinear_concat", names, values, {"axis": 1}, at, constant)
            want = onnxruntime_run("QLinearConcat", names, values, {"axis": 1}, at)
            assert got.shape == want.shape == (2, 9, 4, 8) and got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)


#: (x shape, axis, trailing): one axis, a middle one, the trailing ones as one (onnxruntime's
#: opset 12 mode), a 1-D x, a softmax of one value, hundreds of values
SOFTMAXES = [((2, 3, 5), -1, False), ((2, 3, 5), 1, False), ((2, 3, 5), 1, True), ((7,), 0, False),
             ((2, 1, 7), 1, False), ((2, 1, 7), 0, True), ((3, 300), -1, False)]


def softmax_values(rng, dtype: str, shape) -> list:
    info = np.iinfo(dtype)
    y_zp = np.array(info.min if rng.random() < 0.5 else 0, dtype)
    y_scale = np.float32(1 / 256 if rng.random() < 0.5 else 10.0 ** rng.uniform(-4, -1))
    return [codes(rng, dtype, shape), np.float32(10.0 ** rng.uniform(-3, 0)),
            codes(rng, dtype, ()), y_scale, y_zp]


@pytest.mark.parametrize("case", SOFTMAXES, ids=str)
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("constant", [True, False], ids=["constant", "run_time"])
def test_softmax_is_onnxruntimes(case, dtype, constant):
    shape, axis, trailing = case
    rng = np.random.default_rng(len(str(case)) + len(dtype))
    for _ in range(6):
        values = softmax_values(rng, dtype, shape)
        got = numpy_run("qlinear_softmax", UNARY_NAMES, values,
                        {"axis": axis, "trailing": trailing}, (0,), constant)
        want = onnxruntime_run("QLinearSoftmax", UNARY_NAMES, values,
                               {"axis": axis, "opset": 12 if trailing else 13}, (0,))
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


#: (x shape, channels_last): 2-D NCHW and NHWC, 1-D, 3-D, a window of one value
GLOBAL_POOLS = [((2, 3, 5, 7), False), ((2, 5, 7, 3), True), ((2, 3, 9), False),
                ((1, 2, 3, 4, 5), False), ((3, 4, 1, 1), False), ((1, 1, 6, 4), True)]


def global_pool_values(rng, dtype: str, shape) -> list:
    """Codes of ``shape`` and random parameters whose scale onnxruntime takes: x_scale over
    y_scale within [1/64, 64)."""
    x_scale = np.float32(10.0 ** rng.uniform(-3, 0))
    y_scale = np.float32(x_scale * 2.0 ** rng.uniform(-6, 6))
    return [codes(rng, dtype, shape), x_scale, codes(rng, dtype, ()), y_scale,
            codes(rng, dtype, ())]


@pytest.mark.parametrize("case", GLOBAL_POOLS, ids=str)
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("constant", [True, False], ids=["constant", "run_time"])
def test_global_average_pool_is_onnxruntimes(case, dtype, constant):
    shape, last = case
    rng = np.random.default_rng(len(str(case)) + len(dtype))
    for _ in range(8):
        values = global_pool_values(rng, dtype, shape)
        got = numpy_run("qlinear_global_average_pool", UNARY_NAMES, values,
                        {"channels_last": last}, (0,), constant)
        want = onnxruntime_run("QLinearGlobalAveragePool", UNARY_NAMES, values,
                               {"channels_last": int(last)}, (0,))
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def wrapping_global_pool(dtype: str) -> list:
    """A window of 2**24 - 1 codes (the most onnxruntime's kernel takes) whose sum less the
    zero point passes int32 in channel 0 (all the type's highest code, zero point its lowest):
    onnxruntime's int32 accumulator wraps it to a negative sum, so y is the lowest code where
    the exact sum would give the highest; channel 1 random codes."""
    info = np.iinfo(dtype)
    x = np.empty((1, 2, 4095, 4097), dtype)
    x[0, 0] = info.max
    x[0, 1] = np.random.default_rng(5).integers(info.min, info.max, (4095, 4097),
                                                endpoint=True)
    return [x, np.float32(1.0), np.array(info.min, dtype), np.float32(2.0 ** -22),
            np.array(0, dtype)]


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_global_average_pool_wraps_its_sum_as_onnxruntime(dtype):
    values = wrapping_global_pool(dtype)
    got = numpy_run("qlinear_global_average_pool", UNARY_NAMES, values, {}, (0,))
    want = onnxruntime_run("QLinearGlobalAveragePool", UNARY_NAMES, values, {}, (0,))
    np.testing.assert_array_equal(got, want)
    assert got[0, 0, 0, 0] == np.iinfo(dtype).min


def test_global_average_pool_divides_by_y_scale_times_the_count():
    """The scale is x_scale / (y_scale * count), not (x_scale / y_scale) / count: with these
    scales (found by a search) and a window summing to 4,073 the two differ in the last bit,
    which moves the output by one; onnxruntime's is the first."""
    x = np.full((1, 1, 7, 7), 83, np.uint8)
    x.reshape(-1)[:6] = 84  # 49 * 83 + 6
    values = [x, np.float32(0.63406026), np.array(0, np.uint8), np.float32(1.3342948),
              np.array(0, np.uint8)]
    got = numpy_run("qlinear_global_average_pool", UNARY_NAMES, values, {}, (0,))
    want = onnxruntime_run("QLinearGlobalAveragePool", UNARY_NAMES, values, {}, (0,))
    np.testing.assert_array_equal(got, want)
    f = np.float32
    other = np.rint(f(4073) * f(f(values[1] / values[3]) / f(49)))
    assert other != got.item()


#: average pools: x's shape, then kernel, stride, padding, ceil_mode, count_include_pad,
#: channels_last
AVERAGE_POOLS = [
    ((1, 2, 7, 6), [3, 3], [1, 1], [[1, 1], [1, 1]], False, False, False),
    ((1, 2, 7, 6), [3, 3], [1, 1], [[1, 2], [0, 1]], False, True, False),
    ((2, 2, 7, 7), [2, 3], [2, 2], [[0, 0], [0, 0]], True, False, False),
    ((1, 2, 9, 8), [3, 3], [2, 2], [[1, 1], [1, 1]], True, True, False),
    ((1, 2, 1, 1), [2, 2], [2, 2], [[0, 0], [0, 0]], True, False, False),  # past the input
    ((1, 2, 8, 3), [2, 2], [3, 2], [[0, 0], [0, 0]], True, False, False),  # stride > kernel
    ((1, 3, 9, 9), [3, 3], [3, 3], [[0, 2], [0, 2]], True, False, False),  # a window dropped
    ((2, 3, 9), [4], [3], [[1, 2]], False, False, False),
    ((1, 2, 4, 5, 4), [2, 2, 2], [1, 2, 2], [[0, 0]] * 3, False, False, False),
    ((2, 6, 6, 3), [3, 3], [2, 2], [[1, 1], [1, 0]], True, False, True),
    ((1, 1, 20, 20), [9, 9], [1, 1], [[0, 0], [0, 0]], False, False, False),
    ((2, 3, 4, 5), [4, 5], [1, 1], [[0, 0], [0, 0]], False, False, False),  # the whole input
    ((2, 4, 5, 3), [4, 5], [2, 2], [[0, 0], [0, 0]], True, False, True),
    # x shorter than the taps that reach it: summed an element of x at a time
    ((1, 2, 3, 4), [5, 6], [1, 2], [[4, 2], [3, 5]], False, False, False),
    ((1, 2, 9, 2), [3, 5], [2, 1], [[1, 1], [4, 4]], True, True, False),
    ((2, 2, 3, 3), [4, 5], [1, 3], [[3, 1], [2, 4]], True, False, True),
]


def average_pool(case) -> tuple:
    """x's shape, the op's attributes and onnxruntime's of an :data:`AVERAGE_POOLS` case."""
    shape, kernel, stride, padding, ceil, include, last = case
    attrs = {"kernel_size": kernel, "stride": stride, "padding": padding, "ceil_mode": ceil,
             "count_include_pad": include, "channels_last": last}
    ours = {"kernel_shape": kernel, "strides": stride, "pads": [p[0] for p in padding]
            + [p[1] for p in padding], "ceil_mode": int(ceil),
            "count_include_pad": int(include), "channels_last": int(last)}
    return shape, attrs, ours


@pytest.mark.parametrize("case", AVERAGE_POOLS, ids=str)
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("constant", [True, False], ids=["constant", "run_time"])
def test_average_pool_is_onnxruntimes(case, dtype, constant):
    shape, attrs, theirs = average_pool(case)
    rng = np.random.default_rng(len(str(case)) + len(dtype))
    for _ in range(6):
        values = global_pool_values(rng, dtype, shape)
        got = numpy_run("qlinear_average_pool", UNARY_NAMES, values, attrs, (0,), constant)
        want = onnxruntime_run("QLinearAveragePool", UNARY_NAMES, values, theirs, (0,))
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_an_average_pool_over_the_whole_input_rounds_as_the_global_pool():
    """Over the whole unpadded input onnxruntime's kernel takes the global pool's path, whose
    one scale rounds otherwise than the windows' sum over the count over y_scale (scales found
    by a search where 16 of 128 outputs move): the op does, where it is whole and only
    there."""
    x = np.random.default_rng(12).integers(0, 256, (64, 2, 2, 2)).astype(np.uint8)
    values = [x, np.float32(0.0024305838), np.array(127, np.uint8), np.float32(0.0048611676),
              np.array(151, np.uint8)]
    attrs = {"kernel_size": [2, 2], "stride": [2, 2], "padding": [[0, 0], [0, 0]]}
    got = numpy_run("qlinear_average_pool", UNARY_NAMES, values, attrs, (0,))
    np.testing.assert_array_equal(got, onnxruntime_run(
        "QLinearAveragePool", UNARY_NAMES, values, {"kernel_shape": [2, 2], "strides": [2, 2]},
        (0,)))
    np.testing.assert_array_equal(got, numpy_run("qlinear_global_average_pool", UNARY_NAMES,
                                                 values, {}, (0,)))
    padded = numpy_run("qlinear_average_pool", UNARY_NAMES, values,
                       {**attrs, "padding": [[0, 1], [0, 1]]}, (0,))
    assert (padded != got).sum() == 16  # the windows' path: the same windows, other rounding


#: (x_scale, x_zp, y_scale, y_zp) under which a 3x3 window summed in another order than
#: onnxruntime's, or divided by the count times y_scale, changes outputs of
#: :func:`sum_order_codes` (found by searching random scales)
SUM_ORDER = [(0.06875735, 150, 0.0080891, 201), (0.0034982816, 123, 0.077221125, 67)]


def sum_order_codes() -> np.ndarray:
    return (np.arange(64 * 64) * 37 % 256).astype(np.uint8).reshape(1, 1, 64, 64)


def test_average_pool_sums_and_divides_in_onnxruntimes_order():
    """A 3x3 window padded by 1: the taps in row-major order, the sum over its divisor and
    then over y_scale, as onnxruntime; the other orders (computed here) move outputs."""
    x = sum_order_codes()
    attrs = {"kernel_size": [3, 3], "stride": [1, 1], "padding": [[1, 1], [1, 1]]}
    moved = []
    for x_scale, x_zp, y_scale, y_zp in SUM_ORDER:
        values = [x, np.float32(x_scale), np.array(x_zp, np.uint8), np.float32(y_scale),
                  np.array(y_zp, np.uint8)]
        got = numpy_run("qlinear_average_pool", UNARY_NAMES, values, attrs, (0,))
        np.testing.assert_array_equal(got, onnxruntime_run(
            "QLinearAveragePool", UNARY_NAMES, values, {"kernel_shape": [3, 3],
                                                         "pads": [1, 1, 1, 1]}, (0,)))
        v = np.pad(np.float32(x_scale) * (x.astype(np.float32) - np.float32(x_zp)),
                   [(0, 0), (0, 0), (1, 1), (1, 1)])
        taps = [v[:, :, i:i + 64, j:j + 64] for i in range(3) for j in range(3)]
        edge = np.full(64, 3, np.float32)
        edge[[0, -1]] = 2
        divisors = edge[:, None] * edge[None, :]
        backwards = taps[-1]
        for tap in taps[-2::-1]:
            backwards = backwards + tap
        forwards = sum(taps[1:], taps[0])
        for total, divide in ((backwards, lambda t: t / divisors / np.float32(y_scale)),
                              (forwards, lambda t: t / (divisors * np.float32(y_scale)))):
            other = np.clip(np.rint(divide(total) + np.float32(y_zp)), 0, 255)
            moved.append(int((other != got).sum()))
    assert moved[:2] == [129, 20] and moved[2] > 0, moved


def test_an_average_window_far_larger_than_x_is_summed_an_element_of_x_at_a_time():
    """A 300 x 200 window, padded almost as much, over a 2 x 3 input: six steps of the sums
    rather than the 60,000 taps (the kernel's cost follows x, as onnxruntime's does, and
    nothing padded is allocated), bit for bit onnxruntime's."""
    assert [len(_average_steps(n, o, k, 1, b)) for n, o, k, b in (
        (2, 252, 300, 299), (3, 3, 200, 99))] == [2, 3]
    assert len(_average_steps(56, 28, 2, 2, 0)) == 2  # a usual pool: a tap at a time
    rng = np.random.default_rng(8)
    values = global_pool_values(rng, "uint8", (1, 3, 2, 3))
    attrs = {"kernel_size": [300, 200], "stride": [1, 1], "padding": [[299, 250], [99, 100]]}
    got = numpy_run("qlinear_average_pool", UNARY_NAMES, values, attrs, (0,))
    want = onnxruntime_run("QLinearAveragePool", UNARY_NAMES, values, {
        "kernel_shape": [300, 200], "pads": [299, 99, 250, 100]}, (0,))
    assert got.shape == (1, 3, 252, 3)
    np.testing.assert_array_equal(got, want)


def random_window(rng, spatial: int, largest: int) -> tuple[list, list, list]:
    """A kernel (each length up to ``largest``), strides (up to 4) and [before, after] pads
    (each less than its kernel) of ``spatial`` axes, drawn from ``rng``."""
    kernel = [int(k) for k in rng.integers(1, largest + 1, spatial)]
    stride = [int(s) for s in rng.integers(1, 5, spatial)]
    return kernel, stride, [[int(rng.integers(0, k)), int(rng.integers(0, k))] for k in kernel]


def test_average_pool_is_onnxruntimes_over_random_windows():
    """Kernels, strides and pads of 1 to 3 spatial axes drawn at random (kernels up to 9,
    often longer than x, pads up to the kernel less one), floor and ceil mode, with and
    without count_include_pad, both layouts and dtypes: bit for bit onnxruntime's kernel
    wherever a window fits."""
    rng = np.random.default_rng(21)
    tried = 0
    while tried < 40:
        spatial = int(rng.integers(1, 4))
        kernel, stride, padding = random_window(rng, spatial, 9)
        sizes = [int(n) for n in rng.integers(1, 12 if spatial < 3 else 6, spatial)]
        ceil, include, last = (bool(v) for v in rng.integers(0, 2, 3))
        dtype = ("uint8", "int8")[int(rng.integers(0, 2))]
        if any(n + b + e < k for n, k, (b, e) in zip(sizes, kernel, padding)):
            continue
        tried += 1
        shape = (2, *sizes, 3) if last else (2, 3, *sizes)
        _, attrs, theirs = average_pool((shape, kernel, stride, padding, ceil, include, last))
        values = global_pool_values(rng, dtype, shape)
        got = numpy_run("qlinear_average_pool", UNARY_NAMES, values, attrs, (0,))
        want = onnxruntime_run("QLinearAveragePool", UNARY_NAMES, values, theirs, (0,))
        assert got.shape == want.shape, (shape, attrs)
        np.testing.assert_array_equal(got, want, err_msg=str((shape, attrs)))
