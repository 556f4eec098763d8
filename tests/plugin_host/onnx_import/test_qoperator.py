"""onnxruntime's operator-oriented quantized contrib ops (com.microsoft: QLinearAdd, QLinearMul,
QLinearSigmoid, QLinearLeakyRelu, QLinearConcat, QLinearWhere, QLinearGlobalAveragePool,
QLinearAveragePool, QGemm; QLinearSoftmax has test_qsoftmax), MaxPool and a nearest or
bilinear Resize of 8-bit codes, each imported with onnxruntime's numbers: hand-made nodes over
random scales, zero points, both 8-bit dtypes, every broadcasting pattern onnxruntime's kernels
tell apart, compared bit for bit on the numpy and onnxruntime backends; torch models quantized by
quantize_static in the QOperator format, built and loaded; and what is refused, naming the
node.
"""

from __future__ import annotations

import numpy as np
import pytest

from abi.errors import DomainError, ShapeError
from plugin_host.errors import ModelFileError, UnsupportedModelError
from plugin_host.executor import Executor
from plugin_host.onnx_import import import_onnx
from plugins.numpy_backend import NumpyBackend
from plugins.onnxruntime_backend import OnnxruntimeBackend
from tests.numpy_backend.test_qlinear import SUM_ORDER, random_window, sum_order_codes

from .conftest import (assert_refused, check_against_onnxruntime, check_on_both_backends, export,
                       export_dynamic, import_and_load, onnx, onnxruntime_outputs, torch)
from .test_quantized import _Batches

quantization = pytest.importorskip("onnxruntime.quantization")
helper, TP, numpy_helper = onnx.helper, onnx.TensorProto, onnx.numpy_helper
RNG = np.random.default_rng(53)
_ELEM = {"uint8": TP.UINT8, "int8": TP.INT8}
_MS = "com.microsoft"


def _vi(name, dtype, shape, rank=None):
    """A value of ``shape`` (None: ``rank`` dims of unknown size)."""
    elem = _ELEM.get(dtype, TP.FLOAT)
    return helper.make_tensor_value_info(name, elem, [None] * rank if shape is None
                                         else list(shape))


def _model(path, nodes, inputs, outputs, inits):
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(_MS, 1)])
    path.write_bytes(model.SerializeToString())
    return path


def _param(name, value, dtype=None):
    """An initializer: ``value`` as ``dtype``, as it is when a numpy value, else float32."""
    if dtype is None and not isinstance(value, (np.ndarray, np.generic)):
        dtype = np.float32
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def _codes(dtype, shape):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)


def _every_code(dtype, shape):
    """Every code of ``dtype`` at least once, filling ``shape``."""
    info = np.iinfo(dtype)
    n = int(np.prod(shape))
    values = np.resize(np.arange(info.min, info.max + 1), n)
    return RNG.permutation(values).astype(dtype).reshape(shape)


def _scale():
    return np.float32(10.0 ** RNG.uniform(-3, 0.5))


def _zp(dtype):
    info = np.iinfo(dtype)
    return np.array(RNG.integers(info.min // 2, info.max // 2, endpoint=True), dtype)


def _exact(path, feeds, *, graph=None):
    """The imported graph's outputs (``graph``: that one's) equal onnxruntime's for ``path``
    (optimizations off) bit for bit, with its dtype, on both backends."""
    from .test_qlinear import _exact_on_both_backends

    graph = graph or import_onnx(path).graph
    _exact_on_both_backends(graph, path, feeds)
    return graph


# --- binary ops ------------------------------------------------------------------------------

#: shapes of A and B, covering onnxruntime's broadcasting loop: the same shape, B one value per
#: span, A one value per span, both one value, 0-d, a trailing dim both 1, run-time batch
_SHAPES = [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (3, 1)), ((3, 1), (2, 3, 4)), ((1,), (5, 6)),
           ((5, 6), ()), ((), (5, 6)), ((1, 1), (1,)), ((3, 1), (1,)), ((4, 1), (4, 1)),
           ((2, 1, 5), (2, 4, 1)), (("N", 3, 4), ("N", 3, 4)), (("N", 3, 4), (3, 4))]


def _binary_model(tmp_path, op, dtype, a_shape, b_shape, scales, zps, out=None):
    """c = ``op``(a, b); ``out`` c's declared shape (by default the broadcast of a's and b's,
    "N" a run-time batch)."""
    inits = [_param("as", scales[0]), _param("az", zps[0]), _param("bs", scales[1]),
             _param("bz", zps[1]), _param("cs", scales[2]), _param("cz", zps[2])]
    node = helper.make_node(op, ["a", "as", "az", "b", "bs", "bz", "cs", "cz"], ["c"],
                            name="n", domain=_MS)
    if out is None:
        out = list(np.broadcast_shapes(*[tuple(1 if d == "N" else d for d in s)
                                         for s in (a_shape, b_shape)]))
        if "N" in a_shape:
            out[0] = "N"
    return _model(tmp_path / "m.onnx", [node], [_vi("a", dtype, a_shape),
                                                _vi("b", dtype, b_shape)],
                  [_vi("c", dtype, out)], inits)


def _binary_feeds(dtype, a_shape, b_shape):
    def concrete(s, n):
        return tuple(n if d == "N" else d for d in s)

    return [{"a": _every_code(dtype, concrete(a_shape, n)) if np.prod(concrete(a_shape, n)) > 1
             else _codes(dtype, concrete(a_shape, n)),
             "b": _codes(dtype, concrete(b_shape, n))} for n in (1, 3)]


@pytest.mark.parametrize("shapes", _SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_binary_ops_match_onnxruntime_bit_for_bit(op, dtype, shapes, tmp_path):
    a_shape, b_shape = shapes
    for trial in range(3):
        scales = [_scale() for _ in range(3)]
        zps = [_zp(dtype) for _ in range(3)]
        if trial == 0:
            zps = [np.zeros((), dtype)] * 3
        path = _binary_model(tmp_path, op, dtype, a_shape, b_shape, scales, zps)
        _exact(path, _binary_feeds(dtype, a_shape, b_shape))


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_add_rounds_ties_and_saturates_as_onnxruntime(dtype, tmp_path):
    """Scales whose ratios put many sums on a half (1/2 and 1/4 of the output scale), and one
    so small that most sums saturate."""
    for scales in ([0.5, 0.25, 1.0], [0.125, 0.375, 0.25], [4.0, 2.0, 0.01]):
        zps = [_zp(dtype) for _ in range(3)]
        path = _binary_model(tmp_path, "QLinearAdd", dtype, (16, 16), (16, 16), scales, zps)
        _exact(path, [{"a": _every_code(dtype, (16, 16)), "b": _every_code(dtype, (16, 16))}])


#: scales and zero points (a, b, c) under which the order of onnxruntime's two fused steps
#: changes an output: A of shape (1,) is then the operand its loop reads once per span, and
#: the kernel streams B (found by searching random scales over every code of B with the
#: operands in either order)
_SWAPPED = [((0.2056611, 1.096517, 0.0023018867), (133, 197, 163), 203),
            ((0.5992467, 0.014842145, 0.32450527), (90, 17, 25), 88),
            ((0.0528768, 0.0012350505, 0.0023935956), (134, 113, 208), 128),
            ((0.7161323, 2.1640718, 0.62085295), (126, 155, 31), 39)]


@pytest.mark.parametrize("scales, zps, a", _SWAPPED)
def test_add_takes_the_operands_in_onnxruntimes_order(scales, zps, a, tmp_path):
    zps = [np.uint8(z) for z in zps]
    path = _binary_model(tmp_path, "QLinearAdd", "uint8", (1,), (256,),
                         [np.float32(s) for s in scales], zps)
    _exact(path, [{"a": np.array([a], np.uint8), "b": np.arange(256).astype(np.uint8)}])


@pytest.mark.parametrize("scales, zps, a", _SWAPPED[:2])
def test_add_takes_the_order_run_time_dims_give(scales, zps, a, tmp_path):
    """A causal mask ``(t, t)`` added to scores ``(b, 2, t, t)``: onnxruntime's broadcasting
    loop streams the scores past one mask value at t = 1 only, so ``qlinear_add`` takes the
    order the call's t gives; each bit for bit with onnxruntime on both backends, under scales
    where the order moves an output."""
    path = _binary_model(tmp_path, "QLinearAdd", "uint8", ("t", "t"), ("b", 2, "t", "t"),
                         [np.float32(v) for v in scales], [np.uint8(z) for z in zps],
                         out=("b", 2, "t", "t"))
    graph = _exact(path, [{"a": np.array([[a]], np.uint8),
                           "b": np.arange(256).astype(np.uint8).reshape(128, 2, 1, 1)},
                          {"a": _codes("uint8", (3, 3)), "b": _codes("uint8", (2, 2, 3, 3))}])
    assert [n.op for n in graph.nodes] == ["qlinear_add"]


@pytest.mark.parametrize("scales, zps, a", _SWAPPED[2:])
def test_an_add_whose_order_five_run_time_dims_decide_matches_onnxruntime(scales, zps, a,
                                                                          tmp_path):
    dims = ("p", "q", "r", "s", "u")
    path = _binary_model(tmp_path, "QLinearAdd", "uint8", dims, dims[::-1],
                         [np.float32(v) for v in scales], [np.uint8(z) for z in zps],
                         out=[None] * 5)
    codes = np.arange(256).astype(np.uint8)
    _exact(path, [{"a": np.full((1, 1, 1, 1, 1), a, np.uint8),
                   "b": codes.reshape(1, 1, 1, 1, 256)[..., :1]},
                  {"a": codes[:4].reshape(1, 2, 1, 2, 1), "b": codes[4:8].reshape(1, 2, 1, 2, 1)},
                  {"a": _codes("uint8", (3, 1, 2, 1, 3)), "b": _codes("uint8", (3, 1, 2, 1, 3))}])


#: scales and zero points (a, b, c) under which rounding each fused step once (onnxruntime's
#: two FMAs) and rounding the whole sum once part on some pair of codes (found by searching
#: random scales over every pair)
_TWO_ROUNDINGS = [((2.7075732, 2.3216684, 0.34416348), (124, 75, 138)),
                  ((0.060706556, 0.0613919, 0.43212137), (13, 37, 139)),
                  ((1.3536472, 0.030165406, 0.11567972), (228, 6, 125))]


@pytest.mark.parametrize("scales, zps", _TWO_ROUNDINGS)
def test_add_rounds_each_fused_step_as_onnxruntime(scales, zps, tmp_path):
    path = _binary_model(tmp_path, "QLinearAdd", "uint8", (256, 256), (256, 256),
                         [np.float32(s) for s in scales], [np.uint8(z) for z in zps])
    codes = np.arange(256, dtype=np.uint8)
    _exact(path, [{"a": np.repeat(codes, 256).reshape(256, 256),
                   "b": np.tile(codes, 256).reshape(256, 256)}])


def test_mul_scales_by_the_product_of_the_input_scales_over_c_scale(tmp_path):
    """``(a_scale * b_scale) / c_scale`` in float32, in that order: under these scales
    ``a_scale * (b_scale / c_scale)`` moves some products by one (found by searching)."""
    path = _binary_model(tmp_path, "QLinearMul", "uint8", (256, 256), (256, 256),
                         [np.float32(s) for s in (0.05962366, 0.06668075, 0.06647456)],
                         [np.uint8(z) for z in (237, 175, 40)])
    codes = np.arange(256, dtype=np.uint8)
    _exact(path, [{"a": np.repeat(codes, 256).reshape(256, 256),
                   "b": np.tile(codes, 256).reshape(256, 256)}])


# --- tables ----------------------------------------------------------------------------------


def _unary_model(tmp_path, op, dtype, shape, x_scale, x_zp, y_scale, y_zp, **attrs):
    inits = [_param("xs", x_scale), _param("xz", x_zp), _param("ys", y_scale),
             _param("yz", y_zp)]
    node = helper.make_node(op, ["x", "xs", "xz", "ys", "yz"], ["y"], name="n", domain=_MS,
                            **attrs)
    return _model(tmp_path / "m.onnx", [node], [_vi("x", dtype, shape)],
                  [_vi("y", dtype, None, len(shape))], inits)


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("op, attrs", [("QLinearSigmoid", {}), ("QLinearLeakyRelu", {}),
                                       ("QLinearLeakyRelu", {"alpha": 0.3})],
                         ids=["sigmoid", "leaky-relu", "leaky-relu-0.3"])
def test_table_ops_match_onnxruntime_on_every_code(op, attrs, dtype, tmp_path):
    for _ in range(6):
        y_scale = np.float32(RNG.uniform(0.5, 1.5) / 256) if op == "QLinearSigmoid" \
            else _scale()
        path = _unary_model(tmp_path, op, dtype, ("N", 256), _scale(), _zp(dtype), y_scale,
                            _zp(dtype), **attrs)
        _exact(path, [{"x": _every_code(dtype, (n, 256))} for n in (1, 2)])


#: (dtype, x_scale, x_zp, y_scale, y_zp) whose table from the exact logistic differs from
#: onnxruntime's (found by searching random scales)
_LOGISTIC_EDGES = [("uint8", 0.030457117, 110, 0.005321919, 29),
                   ("uint8", 0.077625036, 116, 0.0022151147, 10),
                   ("int8", 0.06410752, -57, 0.00238322, 0),
                   ("int8", 0.23612604, -30, 0.0042036525, 42)]


@pytest.mark.parametrize("dtype, x_scale, x_zp, y_scale, y_zp", _LOGISTIC_EDGES)
def test_sigmoid_tables_follow_onnxruntimes_logistic(dtype, x_scale, x_zp, y_scale, y_zp,
                                                     tmp_path):
    t = np.dtype(dtype).type
    path = _unary_model(tmp_path, "QLinearSigmoid", dtype, (256,), np.float32(x_scale),
                        t(x_zp), np.float32(y_scale), t(y_zp))
    _exact(path, [{"x": _every_code(dtype, (256,))}])


def test_sigmoid_uses_onnxruntimes_logistic_not_the_exact_one():
    """The table follows MLAS's rational approximation: over a fine grid it differs from the
    exact logistic by up to about 1e-7, and by nothing less than zero."""
    from abi import mlas

    x = np.linspace(-20, 20, 100001, dtype=np.float32)
    exact = (1 / (1 + np.exp(-x.astype(np.float64)))).astype(np.float32)
    got = mlas.logistic(x)
    assert 0 < np.abs(got - exact).max() < 1e-6
    assert got.min() >= 0


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_concat_requantizes_each_input_as_onnxruntime(dtype, tmp_path):
    y_scale, y_zp = _scale(), _zp(dtype)
    same = (y_scale, y_zp)  # the second input already in y's scale: taken as it is
    parts = [(_scale(), _zp(dtype), (2, 3, 4)), (*same, (2, 5, 4)), (_scale(), _zp(dtype),
                                                                     (2, 1, 4))]
    inputs, names, inits = [], ["ys", "yz"], [_param("ys", y_scale), _param("yz", y_zp)]
    for k, (scale, zp, shape) in enumerate(parts):
        inputs.append(_vi(f"x{k}", dtype, shape))
        names += [f"x{k}", f"s{k}", f"z{k}"]
        inits += [_param(f"s{k}", scale), _param(f"z{k}", zp)]
    node = helper.make_node("QLinearConcat", names, ["y"], name="n", domain=_MS, axis=-2)
    path = _model(tmp_path / "m.onnx", [node], inputs, [_vi("y", dtype, None, 3)], inits)
    graph = _exact(path, [{f"x{k}": _every_code(dtype, shape) if k == 0 else
                           _codes(dtype, shape) for k, (_, _, shape) in enumerate(parts)}])
    assert [n.op for n in graph.nodes if n.op != "cast"] == ["qlinear_concat"]


# --- pools -----------------------------------------------------------------------------------


#: (condition, X, Y) shapes: all equal, a broadcast condition, scalar X, a row Y, all three
#: broadcasting each other, a run-time batch
_WHERE_SHAPES = [((2, 3, 4), (2, 3, 4), (2, 3, 4)), ((4,), (2, 3, 4), (2, 3, 4)),
                 ((2, 3, 4), (), (2, 3, 4)), ((2, 3, 1), (2, 3, 4), (4,)),
                 ((3, 1), (1, 5), (2, 1, 1)), (("N", 4), ("N", 4), (4,))]


@pytest.mark.parametrize("shapes", _WHERE_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_where_requantizes_each_input_as_onnxruntime(dtype, shapes, tmp_path):
    """X and Y of Z's scale and zero point (copied), of others (a table each), and of one
    each."""
    c_shape, x_shape, y_shape = shapes
    out = list(np.broadcast_shapes(*[tuple(1 if d == "N" else d for d in s) for s in shapes]))
    if "N" in c_shape:
        out[0] = "N"
    z = (_scale(), _zp(dtype))
    for x_params, y_params in (((z, z)), ((_scale(), _zp(dtype)), (_scale(), _zp(dtype))),
                               (z, (_scale(), _zp(dtype)))):
        inits = [_param("xs", x_params[0]), _param("xz", x_params[1]),
                 _param("ys", y_params[0]), _param("yz", y_params[1]), _param("zs", z[0]),
                 _param("zz", z[1])]
        node = helper.make_node("QLinearWhere", ["c", "x", "xs", "xz", "y", "ys", "yz", "zs",
                                                 "zz"], ["z"], name="n", domain=_MS)
        path = _model(tmp_path / "m.onnx", [node], [
            helper.make_tensor_value_info("c", TP.BOOL, list(c_shape)), _vi("x", dtype, x_shape),
            _vi("y", dtype, y_shape)], [_vi("z", dtype, out)], inits)
        feeds = []
        for n in (1, 3):
            concrete = [tuple(n if d == "N" else d for d in s) for s in shapes]
            feeds.append({"c": RNG.random(concrete[0]) < 0.5,
                          "x": _codes(dtype, concrete[1]), "y": _codes(dtype, concrete[2])})
        _exact(path, feeds)


@pytest.mark.parametrize("channels_last", [0, 1])
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_global_average_pool_matches_onnxruntime(dtype, channels_last, tmp_path):
    shape = (2, 5, 7, 3) if channels_last else (2, 3, 5, 7)
    for _ in range(4):
        x_scale, y_scale = _scale(), _scale()
        path = _unary_model(tmp_path, "QLinearGlobalAveragePool", dtype, shape, x_scale,
                            _zp(dtype), y_scale, _zp(dtype), channels_last=channels_last)
        _exact(path, [{"x": _codes(dtype, shape)}, {"x": _every_code(dtype, shape)}])


def test_global_average_pool_scales_the_exact_sum_once(tmp_path):
    """One float32 scale ``x_scale / (y_scale * count)`` times the exact sum: under these
    scales the float mean ``sum * x_scale / count / y_scale`` moves an output by one (found by
    searching)."""
    path = _unary_model(tmp_path, "QLinearGlobalAveragePool", "uint8", (1, 256, 7, 7),
                        np.float32(0.014845204), np.uint8(48), np.float32(0.007645075),
                        np.uint8(84))
    x = (np.arange(256 * 49) * 37 % 256).astype(np.uint8).reshape(1, 256, 7, 7)
    _exact(path, [{"x": x}])


@pytest.mark.parametrize("channels_last", [0, 1])
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_global_average_pool_over_run_time_dims_matches_onnxruntime(dtype, channels_last,
                                                                   tmp_path):
    """Pooled dims known when the call runs: the count read then, the codes summed in int32,
    bit for bit with onnxruntime at counts from 1 to past 2**16 (where a float32 sum of 256
    codes' worth each would no longer be exact), a zero point or none."""
    shape = ("N", "h", "w", 3) if channels_last else ("N", 3, "h", "w")
    sizes = [(1, 1, 1), (2, 5, 7), (1, 9, 4), (1, 300, 230)]
    for k in range(4):
        x_zp = _zp(dtype) if k % 2 else np.array(0, dtype)
        x_scale = _scale()  # a y_scale onnxruntime takes at a window of 1
        y_scale = max(_scale(), np.float32(x_scale / 200))
        path = _unary_model(tmp_path, "QLinearGlobalAveragePool", dtype, shape, x_scale, x_zp,
                            y_scale, _zp(dtype), channels_last=channels_last)
        feeds = []
        for n, h, w in sizes:
            concrete = (n, h, w, 3) if channels_last else (n, 3, h, w)
            feeds.append({"x": _every_code(dtype, concrete) if h * w > 100
                          else _codes(dtype, concrete)})
        _exact(path, feeds)


def test_a_run_time_average_scale_out_of_onnxruntimes_range_is_refused_when_the_call_runs(
        tmp_path):
    """x_scale / (y_scale * count) must lie in [2**-32, 256), or onnxruntime's kernel refuses
    the call: over run-time dims the count is known then, so a window of 1 (scale 300) is
    refused there with a DomainError, an empty one with a ShapeError, each naming the node,
    on both backends, and a window of 4 (75) runs bit for bit."""
    path = _unary_model(tmp_path, "QLinearGlobalAveragePool", "uint8", (1, 2, "h", "w"),
                        np.float32(3.0), np.uint8(10), np.float32(0.01), np.uint8(3))
    graph = _exact(path, [{"x": _codes("uint8", (1, 2, 2, 2))}])
    assert [node.op for node in graph.nodes] == ["qlinear_global_average_pool"]
    for (h, w), error, says in (((1, 1), DomainError, r"= 300\.0 for windows of 1 values"),
                                ((0, 3), ShapeError, r"pools 0 values a window")):
        feed = {"x": _codes("uint8", (1, 2, h, w))}
        with pytest.raises(Exception, match="QLinearGlobalAveragePool parameter out of "
                                            "computation range"):
            onnxruntime_outputs(path, feed, optimized=False)
        for backend in (NumpyBackend(), OnnxruntimeBackend()):
            with pytest.raises(error, match=says) as caught:
                Executor(graph, backend).run(dict(feed))
            assert caught.value.context["node"] == "n"


def test_a_static_average_scale_or_count_onnxruntime_refuses_is_refused_at_import(tmp_path):
    """Over pooled dims known at import, what onnxruntime's kernel refuses (the reference
    cannot run) is refused naming the node: a scale of 300, a window of 2**24 values."""
    path = _unary_model(tmp_path, "QLinearGlobalAveragePool", "uint8", (1, 2, 1, 1),
                        np.float32(3.0), np.uint8(10), np.float32(0.01), np.uint8(3))
    assert_refused(path, UnsupportedModelError, "node 'n' (QLinearGlobalAveragePool)",
                   "x_scale / (y_scale * count) = 300.0 for windows of 1 values")
    path = _unary_model(tmp_path, "QLinearGlobalAveragePool", "uint8", (1, 1, 4096, 4096),
                        np.float32(1.0), np.uint8(0), np.float32(1.0), np.uint8(0))
    assert_refused(path, UnsupportedModelError, "node 'n' (QLinearGlobalAveragePool)",
                   "pools 16777216 values a window")


_POOLS = {
    "2x2-stride-2": ((2, 3, 8, 8), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    "3x3-padded": ((2, 3, 7, 6), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    "3x3-padded-count-pad": ((1, 2, 7, 6), {"kernel_shape": [3, 3], "pads": [1, 0, 2, 1],
                                            "count_include_pad": 1}),
    "ceil-mode": ((1, 2, 7, 7), {"kernel_shape": [2, 3], "strides": [2, 2], "ceil_mode": 1}),
    "same-upper": ((1, 2, 5, 6), {"kernel_shape": [3, 2], "auto_pad": "SAME_UPPER"}),
    "1d": ((2, 3, 9), {"kernel_shape": [4], "strides": [3], "pads": [1, 2]}),
    "3d": ((1, 2, 4, 5, 4), {"kernel_shape": [2, 2, 2], "strides": [1, 2, 2]}),
    "whole-input": ((2, 3, 4, 5), {"kernel_shape": [4, 5]}),
    "9x9": ((1, 2, 20, 20), {"kernel_shape": [9, 9], "pads": [4, 0, 4, 3]}),
    "channels-last": ((2, 6, 6, 3), {"kernel_shape": [3, 3], "strides": [2, 2],
                                     "channels_last": 1}),
}


@pytest.mark.parametrize("case", list(_POOLS))
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_average_pool_matches_onnxruntime(dtype, case, tmp_path):
    shape, attrs = _POOLS[case]
    for _ in range(3):
        path = _unary_model(tmp_path, "QLinearAveragePool", dtype, shape, _scale(),
                            _zp(dtype), _scale(), _zp(dtype), **attrs)
        graph = _exact(path, [{"x": _codes(dtype, shape)}, {"x": _every_code(dtype, shape)}])
    # one op of the codes; a window over the whole unpadded input onnxruntime's global pool
    op = "qlinear_global_average_pool" if case == "whole-input" else "qlinear_average_pool"
    assert [(n.op, graph.types[n.inputs[0]].dtype) for n in graph.nodes] == [(op, dtype)]


#: run-time spatial dims (the symbolic shape, and the shapes fed: the first the smallest the
#: kernel takes) and the pool's attributes
_RUN_TIME_POOLS = {
    "2x2-stride-2": (("N", 3, "h", "w"), [(1, 3, 2, 2), (2, 3, 7, 8), (1, 3, 13, 5)],
                     {"kernel_shape": [2, 2], "strides": [2, 2]}),
    "3x3-padded": (("N", 3, "h", "w"), [(1, 3, 1, 1), (2, 3, 7, 6), (1, 3, 12, 3)],
                   {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    "3x3-padded-count-pad": ((1, 2, "h", "w"), [(1, 2, 1, 2), (1, 2, 7, 6), (1, 2, 10, 9)],
                             {"kernel_shape": [3, 3], "pads": [1, 0, 2, 1],
                              "count_include_pad": 1}),
    "1d": (("N", 3, "t"), [(2, 3, 1), (2, 3, 9), (1, 3, 20)],
           {"kernel_shape": [4], "strides": [3], "pads": [1, 2]}),
    "3d-one-static": ((1, 2, "d", "h", 4), [(1, 2, 2, 2, 4), (1, 2, 5, 7, 4)],
                      {"kernel_shape": [2, 2, 2], "strides": [1, 2, 2]}),
    "stride-past-kernel": (("N", 2, "h", "w"), [(1, 2, 2, 3), (2, 2, 11, 8)],
                           {"kernel_shape": [2, 3], "strides": [3, 4]}),
    "channels-last": (("N", "h", "w", 3), [(1, 3, 3, 3), (2, 6, 9, 3), (1, 10, 5, 3)],
                      {"kernel_shape": [3, 3], "strides": [2, 2], "channels_last": 1}),
    "ceil-mode": (("N", 2, "h", "w"), [(1, 2, 2, 3), (1, 2, 7, 8), (2, 2, 10, 13)],
                  {"kernel_shape": [2, 3], "strides": [2, 2], "ceil_mode": 1}),
    "ceil-mode-resnet-d": (("N", 3, "h", "w"), [(1, 3, 1, 1), (2, 3, 7, 9), (1, 3, 12, 5)],
                           {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
    "ceil-mode-padded-count-pad": (("N", 2, "h", "w"), [(1, 2, 1, 1), (1, 2, 6, 9),
                                                         (2, 2, 11, 4)],
                                   {"kernel_shape": [3, 3], "strides": [2, 2],
                                    "pads": [1, 1, 1, 1], "ceil_mode": 1,
                                    "count_include_pad": 1}),
    "ceil-mode-static-last-window-dropped": ((1, 2, "h", 5), [(1, 2, 2, 5), (1, 2, 9, 5)],
                                             {"kernel_shape": [2, 2], "strides": [2, 3],
                                              "pads": [0, 0, 0, 1], "ceil_mode": 1}),
    "same-upper-stride-1": (("N", 2, "h", "w"), [(1, 2, 1, 1), (2, 2, 6, 7)],
                            {"kernel_shape": [3, 2], "auto_pad": "SAME_UPPER"}),
    "same-lower-stride-1-one-static": (("N", 2, "h", 6), [(1, 2, 1, 6), (2, 2, 5, 6)],
                                       {"kernel_shape": [2, 3], "strides": [1, 2],
                                        "auto_pad": "SAME_LOWER"}),
    # a last window starting past the input at some sizes (8: ceil gives 4 starts, the last
    # at 9) and not at others (7, 9, 10)
    "ceil-mode-stride-past-kernel": (("N", 3, "h", "w"), [(1, 3, 1, 2), (1, 3, 7, 8),
                                                          (2, 3, 8, 9), (1, 3, 10, 5)],
                                     {"kernel_shape": [2, 2], "strides": [3, 2],
                                      "ceil_mode": 1}),
    "ceil-mode-end-pad": (("N", 3, "h", "w"), [(1, 3, 1, 2), (1, 3, 5, 6), (2, 3, 8, 7)],
                          {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [0, 0, 2, 0],
                           "ceil_mode": 1}),
    "9x9": (("N", 2, "h", "w"), [(1, 2, 9, 9), (1, 2, 20, 13)], {"kernel_shape": [9, 9]}),
}


@pytest.mark.parametrize("case", list(_RUN_TIME_POOLS))
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_average_pool_over_run_time_dims_matches_onnxruntime(dtype, case, tmp_path):
    """Spatial dims known when the call runs: one qlinear_average_pool, whose windows and
    divisors come from the call's sizes, bit for bit with onnxruntime from the smallest size
    the kernel takes up."""
    shape, fed, attrs = _RUN_TIME_POOLS[case]
    for _ in range(3):
        path = _unary_model(tmp_path, "QLinearAveragePool", dtype, shape, _scale(),
                            _zp(dtype), _scale(), _zp(dtype), **attrs)
        _exact(path, [{"x": _codes(dtype, f)} for f in fed]
               + [{"x": _every_code(dtype, fed[-1])}])


def test_average_pool_over_run_time_dims_matches_over_random_configurations(tmp_path):
    """Kernels, strides and pads of 1 or 2 spatial axes drawn at random, floor and ceil mode,
    with and without count_include_pad: bit for bit with onnxruntime from the shortest size
    each takes (the scales within the global path's range, which the shortest size may
    take)."""
    rng = np.random.default_rng(5)
    tried = 0
    while tried < 16:
        spatial = int(rng.integers(1, 3))
        kernel, strides, padding = random_window(rng, spatial, 4)
        pads = [p[0] for p in padding] + [p[1] for p in padding]
        ceil = int(rng.integers(0, 2))
        ends = pads[spatial:]
        if kernel == [1] * spatial:
            continue
        tried += 1
        dtype = ("uint8", "int8")[int(rng.integers(0, 2))]
        x_scale = np.float32(10.0 ** rng.uniform(-3, 0))
        y_scale = np.float32(x_scale * 10.0 ** rng.uniform(-1.5, 1))
        path = _unary_model(tmp_path, "QLinearAveragePool", dtype,
                            ("N", 2, *[f"d{d}" for d in range(spatial)]), x_scale, _zp(dtype),
                            y_scale, _zp(dtype), kernel_shape=kernel, strides=strides,
                            pads=pads, ceil_mode=ceil,
                            count_include_pad=int(rng.integers(0, 2)))
        least = [max(1, k - b - e - (s - 1 if ceil else 0))
                 for k, s, b, e in zip(kernel, strides, pads, ends)]
        fed = [least] + [[n + int(rng.integers(1, 8)) for n in least] for _ in range(2)]
        _exact(path, [{"x": _codes(dtype, (1, 2, *f))} for f in fed])


def _refused_on_both_backends(graph, feed: dict, error: type, says: str) -> None:
    """A call refused with ``error`` (its message matching ``says``) naming the node 'n', on
    the numpy and the onnxruntime backend."""
    for backend in (NumpyBackend(), OnnxruntimeBackend()):
        with pytest.raises(error, match=says) as caught:
            Executor(graph, backend).run(dict(feed))
        assert caught.value.context["node"] == "n"


def test_a_run_time_input_as_large_as_the_kernel_takes_the_global_paths_rounding(tmp_path):
    """Unpadded and as large as the kernel when the call runs, onnxruntime's kernel takes the
    global pool's integer path, whose rounding differs (scales found by a search where 16 of
    128 outputs move): the import selects it at those sizes, the windows elsewhere."""
    path = _unary_model(tmp_path, "QLinearAveragePool", "uint8", ("N", 2, "h", "w"),
                        np.float32(0.0024305838), np.uint8(127), np.float32(0.0048611676),
                        np.uint8(151), kernel_shape=[2, 2], strides=[2, 2])
    rng = np.random.default_rng(12)
    _exact(path, [{"x": rng.integers(0, 256, shape).astype(np.uint8)}
                  for shape in ((64, 2, 2, 2), (8, 2, 4, 6), (8, 2, 2, 3))])


def test_a_run_time_whole_input_beyond_the_global_paths_scale_is_refused_when_it_runs(
        tmp_path):
    """x_scale / (y_scale * 4) = 256, outside the global path's range: onnxruntime refuses
    the call where the input is as large as the 2 x 2 kernel, and so do both backends, with
    the op's DomainError naming the node; at other sizes the windows' path runs, bit for
    bit."""
    path = _unary_model(tmp_path, "QLinearAveragePool", "uint8", ("N", 2, "h", "w"),
                        np.float32(1.0), np.uint8(0), np.float32(1 / 1024), np.uint8(0),
                        kernel_shape=[2, 2], strides=[2, 2])
    graph = _exact(path, [{"x": (_codes("uint8", (1, 2, 4, 5)) // 128).astype(np.uint8)}])
    whole = {"x": _codes("uint8", (1, 2, 2, 2))}
    with pytest.raises(Exception, match="out of computation range"):
        onnxruntime_outputs(path, whole, optimized=False)
    _refused_on_both_backends(graph, whole, DomainError, "= 256.0 for windows of 4 values")


@pytest.mark.parametrize("case", ["2x2-stride-2", "3x3-padded", "1d", "ceil-mode-resnet-d"])
def test_a_run_time_dim_shorter_than_the_kernel_is_refused_when_the_call_runs(case,
                                                                              tmp_path):
    """Shorter than the kernel with its pads, onnxruntime refuses the call (a negative output
    size) or gives an empty output: both backends refuse it with the op's ShapeError naming
    the node."""
    shape, fed, attrs = _RUN_TIME_POOLS[case]
    path = _unary_model(tmp_path, "QLinearAveragePool", "uint8", shape, _scale(),
                        _zp("uint8"), _scale(), _zp("uint8"), **attrs)
    graph = _exact(path, [{"x": _codes("uint8", fed[0])}])
    short = tuple(d - 1 if k >= len(shape) - len(attrs["kernel_shape"]) else d
                  for k, d in enumerate(fed[0]))
    _refused_on_both_backends(graph, {"x": _codes("uint8", short)}, ShapeError,
                              r"qlinear_average_pool: spatial axis \d of x shape .* smaller "
                              r"than the window")


def test_an_average_pool_whose_pads_depend_on_run_time_dims_is_refused(tmp_path):
    """SAME's pads depend on the size at a stride past 1; the op's pads are constants."""
    path = _unary_model(tmp_path, "QLinearAveragePool", "uint8", ("N", 3, "h", "w"),
                        _scale(), _zp("uint8"), _scale(), _zp("uint8"), kernel_shape=[3, 2],
                        strides=[2, 1], auto_pad="SAME_UPPER")
    assert_refused(path, UnsupportedModelError, "node 'n' (QLinearAveragePool)",
                   "auto_pad=SAME_UPPER with strides [2, 1] over spatial dims")


def test_a_static_dim_shorter_than_the_kernel_beside_run_time_ones_is_refused(tmp_path):
    """As over static dims only: the kernel leaves no output along the static width."""
    path = _unary_model(tmp_path, "QLinearAveragePool", "uint8", ("N", 3, "h", 1), _scale(),
                        _zp("uint8"), _scale(), _zp("uint8"), kernel_shape=[2, 2])
    assert_refused(path, ModelFileError, "node 'n' (QLinearAveragePool)",
                   "kernel_shape [2, 2] with pads [0, 0, 0, 0] over spatial dims ['h', 1] "
                   "leaves no output")


@pytest.mark.parametrize("x_scale, x_zp, y_scale, y_zp", SUM_ORDER)
def test_average_pool_sums_taps_in_onnxruntimes_order(x_scale, x_zp, y_scale, y_zp, tmp_path):
    path = _unary_model(tmp_path, "QLinearAveragePool", "uint8", (1, 1, 64, 64),
                        np.float32(x_scale), np.uint8(x_zp), np.float32(y_scale),
                        np.uint8(y_zp), kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    _exact(path, [{"x": sum_order_codes()}])


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_max_pool_of_codes_matches_onnxruntime(dtype, tmp_path):
    node = helper.make_node("MaxPool", ["x"], ["y"], name="n", kernel_shape=[3, 3],
                            pads=[1, 1, 1, 1], strides=[2, 2])
    path = _model(tmp_path / "m.onnx", [node], [_vi("x", dtype, (2, 3, 7, 7))],
                  [_vi("y", dtype, None, 4)], [])
    graph = _exact(path, [{"x": _every_code(dtype, (2, 3, 7, 7))}])
    # the codes in their dtype, as onnxruntime's MaxPool takes them: no cast either side
    assert [(n.op, graph.types[n.inputs[0]].dtype) for n in graph.nodes] == [
        ("max_pool", dtype)]


#: nearest Resizes of codes: (scales, sizes, coordinate_transformation_mode, nearest_mode)
_NEAREST = [([1, 1, 2, 2], None, "asymmetric", "floor"),
            ([1, 1, 1.5, 0.5], None, "half_pixel", "round_prefer_floor"),
            (None, [2, 3, 5, 11], "align_corners", "round_prefer_ceil"),
            ([1, 1, 3, 2], None, "pytorch_half_pixel", "ceil")]


@pytest.mark.parametrize("case", _NEAREST, ids=lambda c: c[2])
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_a_nearest_resize_of_codes_matches_onnxruntime(dtype, case, tmp_path):
    """quantize_static's QOperator format resizes the codes themselves: one ``resize`` of the
    codes in their dtype (as onnxruntime's Resize takes them), the graph's output and read by
    a QLinearSigmoid, no cast between."""
    scales, sizes, coordinate, nearest = case
    inits = [_param("sizes", np.array(sizes, np.int64)) if sizes else
             _param("scales", np.array(scales, np.float32)), _param("s", 0.05),
             _param("z", _zp(dtype))]
    nodes = [helper.make_node("Resize", ["x", "", "scales" if scales else "",
                                         "sizes" if sizes else ""], ["y"], name="n",
                              mode="nearest", coordinate_transformation_mode=coordinate,
                              nearest_mode=nearest),
             helper.make_node("QLinearSigmoid", ["y", "s", "z", "s", "z"], ["g"], name="g",
                              domain=_MS)]
    path = _model(tmp_path / "m.onnx", nodes, [_vi("x", dtype, (2, 3, 6, 7))],
                  [_vi("y", dtype, None, 4), _vi("g", dtype, None, 4)], inits)
    graph = _exact(path, [{"x": _every_code(dtype, (2, 3, 6, 7))}])
    assert [(n.op, graph.types[n.inputs[0]].dtype) for n in graph.nodes] == [
        ("resize", dtype), ("qlinear_sigmoid", dtype)]


def _resize_model(path, dtype: str, mode: str, scales=None, *, shape=(1, 2, 5, 7),
                  sizes=None, **attrs):
    given = ["scales", ""] if sizes is None else ["", "sizes"]
    node = helper.make_node("Resize", ["x", ""] + given, ["y"], name="n", mode=mode, **attrs)
    inits = [_param("scales", np.array(scales, np.float32))] if sizes is None else \
        [_param("sizes", np.array(sizes, np.int64))]
    return _model(path, [node], [_vi("x", dtype, shape)], [_vi("y", dtype, None, len(shape))],
                  inits)


_COORDINATES = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                "half_pixel_symmetric", "tf_half_pixel_for_nn"]


@pytest.mark.parametrize("coordinate", _COORDINATES)
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_a_bilinear_resize_of_codes_is_bit_identical(dtype, coordinate, tmp_path):
    """onnxruntime's float32 bilinear kernel over the codes, truncated toward zero: up, down,
    one axis kept, by scales and by sizes, every code."""
    rng = np.random.default_rng(79)
    for scales, sizes in (([1, 1, 2, 2], None), ([1, 1, 1.5, 0.6], None),
                          ([1, 1, 1, 2.5], None), (None, [2, 2, 3, 11]),
                          (None, [2, 2, 9, 1])):
        path = _resize_model(tmp_path / "m.onnx", dtype, "linear", scales, sizes=sizes,
                             shape=(2, 2, 5, 7), coordinate_transformation_mode=coordinate)
        graph = import_onnx(path).graph
        assert "resize" not in {n.op for n in graph.nodes}
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, size=(2, 2, 5, 7), endpoint=True).astype(dtype)
        _exact(path, [{"x": _every_code(dtype, (2, 2, 5, 7))}, {"x": x}], graph=graph)


@pytest.mark.parametrize("mode, shape, attrs, says", [
    ("cubic", (1, 2, 5, 7), {},
     "onnxruntime's CPU provider fails on a cubic resize of 8-bit integers when it runs"),
    ("linear", (1, 2, 7), {}, "8-bit integers resize linearly only as (N, C, H, W)"),
    ("linear", (1, 2, 5, 7), {"antialias": 1},
     "mode='linear' with antialias=1 on uint8 input 'x'")])
def test_other_resizes_of_codes_are_refused(mode, shape, attrs, says, tmp_path):
    path = _resize_model(tmp_path / "m.onnx", "uint8", mode, [1, 1] + [2] * (len(shape) - 2),
                         shape=shape, **attrs)
    if attrs:  # antialias is opset 18's
        model = onnx.load(str(path))
        model.opset_import[0].version = 18
        onnx.save(model, str(path))
    assert_refused(path, UnsupportedModelError, "node 'n' (Resize)", says)


def test_onnxruntime_fails_on_a_cubic_resize_of_codes(tmp_path):
    """What the refusal of a cubic resize of 8-bit codes says: onnxruntime fails on it."""
    for dtype in ("uint8", "int8"):
        path = _resize_model(tmp_path / "cubic.onnx", dtype, "cubic", [1, 1, 2, 2])
        with pytest.raises(Exception, match="Tensor type mismatch"):
            onnxruntime_outputs(path, {"x": _codes(dtype, (1, 2, 5, 7))}, optimized=False)


# --- QGemm -----------------------------------------------------------------------------------


def _qgemm_model(tmp_path, a_dtype, b, b_scale, b_zp, *, c=None, y=True, trans_b=0,
                 alpha=1.0, rows="M", trans_a=0):
    k = b.shape[1] if trans_b else b.shape[0]
    inits = [_param("as", _scale()), _param("az", _zp(a_dtype)), _param("b", b, b.dtype),
             _param("bs", b_scale), _param("bz", b_zp, b.dtype)]
    names = ["a", "as", "az", "b", "bs", "bz", "c" if c is not None else ""]
    if c is not None:
        inits.append(_param("c", c, np.int32))
    out_dtype = "float32"
    if y:
        y_zp = _zp(a_dtype)
        inits += [_param("ys", np.float32(RNG.uniform(0.5, 2)) * 30), _param("yz", y_zp)]
        names += ["ys", "yz"]
        out_dtype = a_dtype
    node = helper.make_node("QGemm", names, ["y"], name="n", domain=_MS, transB=trans_b,
                            alpha=alpha, **({"transA": trans_a} if trans_a else {}))
    return _model(tmp_path / "m.onnx", [node],
                  [_vi("a", a_dtype, (k, rows) if trans_a else (rows, k))],
                  [_vi("y", out_dtype, None, 2)], inits)


#: (A dtype, B dtype, B's range): int8 B by uint8 A within [-63, 63], so that no pair of
#: products saturates int16 in onnxruntime's u8 x s8 kernel on a CPU without VNNI
_GEMM_DTYPES = [("uint8", "uint8", (0, 255)), ("uint8", "int8", (-63, 63)),
                ("int8", "int8", (-128, 127))]


@pytest.mark.parametrize("per_column", [False, True], ids=["per-tensor", "per-column"])
@pytest.mark.parametrize("output", ["quantized", "float"])
@pytest.mark.parametrize("a_dtype, b_dtype, b_range", _GEMM_DTYPES,
                         ids=["u8u8", "u8s8", "s8s8"])
def test_qgemm_matches_onnxruntime_bit_for_bit(a_dtype, b_dtype, b_range, output, per_column,
                                               tmp_path):
    n, k = 6, 10
    for trans_b, alpha, c_shape in ((0, 1.0, None), (1, 0.75, (n,)), (1, 1.0, (1, n)),
                                    (0, 2.0, ()), (1, 1.0, (3, n))):
        b = RNG.integers(*b_range, size=(n, k) if trans_b else (k, n), endpoint=True)
        b = b.astype(b_dtype)
        b_scale = np.array([_scale() for _ in range(n)], np.float32) if per_column \
            else _scale()
        b_zp = np.zeros(n if per_column else (), b_dtype) if b_dtype == "int8" else \
            _zp(b_dtype) if not per_column else np.full(n, 7, b_dtype)
        c = None if c_shape is None else RNG.integers(-5000, 5000, size=c_shape)
        rows = 3 if c_shape == (3, n) else "M"
        path = _qgemm_model(tmp_path, a_dtype, b, b_scale, b_zp, c=c, y=output == "quantized",
                            trans_b=trans_b, alpha=alpha, rows=rows)
        _exact(path, [{"a": _every_code(a_dtype, (3, k))}, {"a": _codes(a_dtype, (3, k))}])


@pytest.mark.parametrize("output", ["quantized", "float"])
@pytest.mark.parametrize("a_dtype, b_dtype, b_range", _GEMM_DTYPES,
                         ids=["u8u8", "u8s8", "s8s8"])
def test_a_qgemm_with_trans_a_matches_onnxruntime_bit_for_bit(a_dtype, b_dtype, b_range,
                                                              output, tmp_path):
    """transA: A's codes (K, M) transposed before the product; C per row counts A's M."""
    rng = np.random.default_rng(71)
    n, k = 5, 9
    for trans_b, c_shape in ((0, None), (1, (4, n)), (0, (n,))):
        b = rng.integers(*b_range, size=(n, k) if trans_b else (k, n), endpoint=True)
        c = None if c_shape is None else rng.integers(-5000, 5000, size=c_shape)
        path = _qgemm_model(tmp_path, a_dtype, b.astype(b_dtype), np.float32(0.01),
                            np.array(0 if b_dtype == "int8" else 3, b_dtype), c=c,
                            y=output == "quantized", trans_b=trans_b, trans_a=1,
                            rows=4 if c_shape == (4, n) else "M")
        graph = import_onnx(path).graph
        assert any(node.op == "transpose" for node in graph.nodes)
        _exact(path, [{"a": _every_code(a_dtype, (k, 4))}, {"a": _codes(a_dtype, (k, 4))}],
               graph=graph)


@pytest.mark.parametrize("sign", [1, -1], ids=["up", "down"])
@pytest.mark.parametrize("output", ["quantized", "float"])
@pytest.mark.parametrize("a_dtype, b_dtype, b_range", _GEMM_DTYPES,
                         ids=["u8u8", "u8s8", "s8s8"])
def test_a_qgemm_sum_with_c_beyond_int32_wraps_as_onnxruntime(a_dtype, b_dtype, b_range,
                                                              output, sign, tmp_path):
    """C within a few thousand of 2**31: the sums with it wrap, as onnxruntime's int32
    accumulation does, bit for bit on both backends; the float output shows it (a sum of
    the other sign than C's)."""
    n, k = 6, 10
    b = RNG.integers(*b_range, size=(k, n), endpoint=True).astype(b_dtype)
    c = (sign * (2 ** 31 - RNG.integers(1, 3000, n))).astype(np.int32)
    b_zp = np.array(0 if b_dtype == "int8" else 7, b_dtype)
    path = _qgemm_model(tmp_path, a_dtype, b, _scale(), b_zp, c=c, y=output == "quantized")
    feeds = [{"a": _every_code(a_dtype, (3, k))}, {"a": _codes(a_dtype, (3, k))}]
    _exact(path, feeds)
    if output == "float":
        assert any((sign * onnxruntime_outputs(path, f, optimized=False)["y"] < 0).any()
                   for f in feeds)


@pytest.mark.parametrize("c_shape", [(5,), (1, 5)])
def test_a_qgemm_of_an_empty_batch_imports(c_shape, tmp_path):
    """A static batch of 0 (a fuzz mutant): C's bound is checked over no rows."""
    b = _codes("uint8", (3, 5))
    c = RNG.integers(-100, 100, size=c_shape).astype(np.int32)
    path = _qgemm_model(tmp_path, "uint8", b, _scale(), _zp("uint8"), c=c, rows=0)
    assert import_onnx(path).graph.types["y"].shape == (0, 5)


# --- a quantize_static(QOperator) model ------------------------------------------------------


class _Blocks(torch.nn.Module):
    """Conv, a sigmoid gate and a residual add, leaky ReLU, pools, concat, a Linear and a
    softmax: what the QOperator format writes as com.microsoft's ops around QLinearConv."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        y = torch.relu(self.c1(x))
        z = torch.sigmoid(self.c2(y)) * y + y
        z = torch.nn.functional.avg_pool2d(torch.nn.functional.leaky_relu(z, 0.1), 2)
        z = torch.cat([z, torch.nn.functional.max_pool2d(z, 3, 1, 1)], 1)
        z = torch.nn.functional.adaptive_avg_pool2d(z, 1).flatten(1)[:, :8]
        return torch.softmax(self.fc(z), -1)


def test_a_qoperator_model_builds_and_matches_onnxruntime(tmp_path, signer):
    torch.manual_seed(5)
    shape = (2, 3, 12, 12)
    float_model = export(_Blocks(), [torch.randn(*shape)], tmp_path / "float.onnx",
                         dynamo=False, input_names=["x"], output_names=["y"])
    path = tmp_path / "qop.onnx"
    quantization.quantize_static(str(float_model), str(path), _Batches("x", shape),
                                 quant_format=quantization.QuantFormat.QOperator,
                                 weight_type=quantization.QuantType.QUInt8,
                                 activation_type=quantization.QuantType.QUInt8)
    ops = {n.op_type for n in onnx.load(str(path)).graph.node}
    assert {"QLinearConv", "QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu",
            "QLinearAveragePool", "QLinearConcat", "MaxPool", "QGemm",
            "QLinearSoftmax"} <= ops, ops
    feeds = [{"x": (RNG.standard_normal(shape) * s).astype(np.float32)} for s in (1, 3)]
    _exact(path, feeds)
    loaded = import_and_load(path, tmp_path / "q.pha", signer)[1]
    check_on_both_backends(path, loaded, feeds)


def test_a_qoperator_classifier_over_a_run_time_image_size_matches_onnxruntime(tmp_path,
                                                                              signer):
    """A classifier quantized with a run-time batch and image size: its average pools
    (QLinearAveragePool, ResNet-D's ceil-mode one among them, QLinearGlobalAveragePool) over
    dims known when the call runs, built and bit for bit with onnxruntime at other sizes than
    the calibration's."""
    torch.manual_seed(7)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.AvgPool2d(2),
                              torch.nn.Conv2d(8, 8, 3, stride=2, padding=1), torch.nn.ReLU(),
                              torch.nn.AvgPool2d(2, ceil_mode=True, count_include_pad=False),
                              torch.nn.Conv2d(8, 8, 1),
                              torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                              torch.nn.Linear(8, 4))
    float_model = tmp_path / "float.onnx"
    export_dynamic(net, [torch.randn(1, 3, 16, 16)], float_model, dynamo=False, names=["x"],
                   dims=[{0: "b", 2: "h", 3: "w"}])
    path = tmp_path / "qop.onnx"
    quantization.quantize_static(str(float_model), str(path), _Batches("x", (1, 3, 16, 16)),
                                 quant_format=quantization.QuantFormat.QOperator,
                                 weight_type=quantization.QuantType.QUInt8,
                                 activation_type=quantization.QuantType.QUInt8)
    nodes = onnx.load(str(path)).graph.node
    assert {"QLinearAveragePool", "QLinearGlobalAveragePool"} <= {n.op_type for n in nodes}
    assert any(a.name == "ceil_mode" and a.i == 1 for n in nodes for a in n.attribute)
    feeds = [{"x": (RNG.standard_normal(shape) * 2).astype(np.float32)}
             for shape in ((1, 3, 16, 16), (2, 3, 9, 23), (1, 3, 2, 2), (1, 3, 64, 48),
                           (1, 3, 12, 20))]
    _exact(path, feeds)
    loaded = import_and_load(path, tmp_path / "q.pha", signer,
                             golden_dims={"b": [1, 2], "h": [16, 9], "w": [16, 23]})[1]
    check_on_both_backends(path, loaded, feeds)


@pytest.mark.parametrize("run_time", [False, True], ids=["fixed", "run-time-length"])
@pytest.mark.parametrize("dtype", ["QUInt8", "QInt8"])
def test_a_qoperator_transformer_layer_matches_onnxruntime(dtype, run_time, tmp_path, signer):
    """A transformer encoder layer quantized in the QOperator format: its attention's
    QLinearMatMuls multiply two operands computed when the call runs (the scores, then the
    weighted values), beside QGemm, QLinearAdd, QLinearMul and QLinearSoftmax (over a
    run-time length too); built, and its output within the artifact's tolerance of
    onnxruntime's on both backends (its layer norms run on dequantized floats, which round
    their last bit their own way)."""
    torch.manual_seed(8)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, dropout=0.0)
    shape = (2, 6, 16)
    float_model = export_dynamic(layer, [torch.randn(*shape)], tmp_path / "float.onnx",
                                 dynamo=True, names=["x"],
                                 dims=[{0: "b", 1: "t"} if run_time else {}])
    path = tmp_path / "qop.onnx"
    quantization.quantize_static(str(float_model), str(path), _Batches("x", shape),
                                 quant_format=quantization.QuantFormat.QOperator,
                                 weight_type=getattr(quantization.QuantType, dtype),
                                 activation_type=getattr(quantization.QuantType, dtype))
    graph = onnx.load(str(path)).graph
    constants = {t.name for t in graph.initializer}
    assert any(n.op_type == "QLinearMatMul" and n.input[3] not in constants
               for n in graph.node)
    shapes = [(1, 1, 16), (2, 5, 16), (1, 40, 16)] if run_time else [shape, shape]
    feeds = [{"x": (RNG.standard_normal(s) * k).astype(np.float32)}
             for s, k in zip(shapes, (1, 3, 2))]
    loaded = import_and_load(path, tmp_path / "q.pha", signer,
                             golden_dims={"b": [1, 2], "t": [4, 12]} if run_time else {})[1]
    check_on_both_backends(path, loaded, feeds)


class _Direct(torch.nn.Module):
    """The ops the QOperator format runs on the codes themselves (Pad, a nearest Resize,
    Split, Concat, Transpose, ArgMax) and a QLinearWhere (ForceQuantizeNoInputCheck writes
    it) between two QLinearConvs."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.c2 = torch.nn.Conv2d(4, 4, 1)

    def forward(self, x):
        y = torch.nn.functional.pad(self.c1(x), (1, 1, 1, 1))
        y = torch.nn.functional.interpolate(y, scale_factor=2, mode="nearest")
        a, b = torch.split(y, 2, 1)
        z = self.c2(torch.cat([b, a], 1))
        # y through a Slice: the quantizer fails on a Where that reads the Resize itself
        w = torch.where(z > 0, z, y[:, :, :16]).transpose(2, 3)
        return w, torch.argmax(w.flatten(2), -1)


@pytest.mark.parametrize("dtype", ["QUInt8", "QInt8"])
def test_a_qoperator_model_of_direct_8_bit_ops_matches_onnxruntime(dtype, tmp_path, signer):
    torch.manual_seed(6)
    shape = (1, 3, 6, 6)
    float_model = export(_Direct(), [torch.randn(*shape)], tmp_path / "float.onnx",
                         dynamo=False, input_names=["x"], output_names=["y", "i"])
    path = tmp_path / "qop.onnx"
    kind = getattr(quantization.QuantType, dtype)
    quantization.quantize_static(str(float_model), str(path), _Batches("x", shape),
                                 quant_format=quantization.QuantFormat.QOperator,
                                 weight_type=kind, activation_type=kind,
                                 extra_options={"ForceQuantizeNoInputCheck": True})
    ops = {n.op_type for n in onnx.load(str(path)).graph.node}
    assert {"QLinearConv", "Pad", "Resize", "Split", "QLinearConcat", "Transpose",
            "QLinearWhere", "ArgMax"} <= ops, ops
    feeds = [{"x": (RNG.standard_normal(shape) * s).astype(np.float32)} for s in (1, 3)]
    _exact(path, feeds)
    loaded = import_and_load(path, tmp_path / "q.pha", signer)[1]
    check_on_both_backends(path, loaded, feeds)


class _Upsampler(torch.nn.Module):
    """A segmentation head's decoder: a bilinear upsampling (align_corners off and on) of
    the codes between QLinearConvs."""

    def __init__(self, align_corners: bool):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.c2 = torch.nn.Conv2d(4, 2, 3, padding=1)
        self.align_corners = align_corners

    def forward(self, x):
        y = torch.nn.functional.interpolate(torch.relu(self.c1(x)), scale_factor=2,
                                            mode="bilinear", align_corners=self.align_corners)
        return self.c2(y)


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("dtype", ["QUInt8", "QInt8"])
def test_a_qoperator_decoder_of_bilinear_upsampling_matches_onnxruntime(dtype, align_corners,
                                                                       tmp_path, signer):
    torch.manual_seed(8)
    shape = (1, 3, 10, 14)
    float_model = export(_Upsampler(align_corners), [torch.randn(*shape)],
                         tmp_path / "float.onnx", dynamo=False, input_names=["x"],
                         output_names=["y"])
    path = tmp_path / "qop.onnx"
    kind = getattr(quantization.QuantType, dtype)
    quantization.quantize_static(str(float_model), str(path), _Batches("x", shape),
                                 quant_format=quantization.QuantFormat.QOperator,
                                 weight_type=kind, activation_type=kind)
    resize = [n for n in onnx.load(str(path)).graph.node if n.op_type == "Resize"]
    assert [a.s for n in resize for a in n.attribute if a.name == "mode"] == [b"linear"]
    rng = np.random.default_rng(83)
    feeds = [{"x": (rng.standard_normal(shape) * s).astype(np.float32)} for s in (1, 3)]
    _exact(path, feeds)
    loaded = import_and_load(path, tmp_path / "q.pha", signer)[1]
    for backend in (None, OnnxruntimeBackend()):  # the build's reference: optimizations off
        check_against_onnxruntime(path, loaded, feeds, backend=backend, optimized=False)


# --- refused ---------------------------------------------------------------------------------


def test_a_runtime_scale_is_refused(tmp_path):
    node = helper.make_node("QLinearSigmoid", ["x", "xs", "xz", "ys", "yz"], ["y"], name="n",
                            domain=_MS)
    path = _model(tmp_path / "m.onnx", [node], [_vi("x", "uint8", (4,)),
                                                _vi("xs", "float32", ())],
                  [_vi("y", "uint8", (4,))], [_param("xz", np.uint8(3), np.uint8),
                                              _param("ys", 0.5), _param("yz", 0, np.uint8)])
    assert_refused(path, UnsupportedModelError, "node 'n' (QLinearSigmoid)",
                   "X_scale 'xs' must be a constant")


def test_a_zero_point_of_another_dtype_is_refused(tmp_path):
    path = _unary_model(tmp_path, "QLinearLeakyRelu", "uint8", (4,), 0.5, np.int8(1), 0.5,
                        np.uint8(1))
    assert_refused(path, ModelFileError, "node 'n' (QLinearLeakyRelu)",
                   "X_zero_point of dtype int8 differs from the codes' uint8")


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_a_scale_of_rank_1_is_refused_as_onnxruntime_refuses_it(op, tmp_path):
    path = _binary_model(tmp_path, op, "uint8", (4,), (4,), [np.ones(1, np.float32)] * 3,
                         [np.uint8(0)] * 3)
    with pytest.raises(Exception, match="Scale and Zero-point must be a scalar"):
        onnxruntime_outputs(path, {"a": _codes("uint8", (4,)), "b": _codes("uint8", (4,))})
    assert_refused(path, ModelFileError, f"node 'n' ({op})",
                   "A_scale of shape [1]: onnxruntime's kernel takes one value of rank 0")


def test_scales_whose_sum_passes_int32_are_refused(tmp_path):
    path = _binary_model(tmp_path, "QLinearAdd", "uint8", (4,), (4,),
                         [1e30, 1.0, 1e-10], [np.uint8(0)] * 3)
    assert_refused(path, UnsupportedModelError, "node 'n' (QLinearAdd)",
                   "beyond int32: onnxruntime's conversion of it gives the type's minimum")


def test_a_contrib_op_needs_the_contrib_opset_1(tmp_path):
    path = _unary_model(tmp_path, "QLinearSigmoid", "uint8", (4,), 0.5, np.uint8(0), 0.5,
                        np.uint8(0))
    model = onnx.load(str(path))
    for o in model.opset_import:
        if o.domain == _MS:
            o.version = 2
    path.write_bytes(model.SerializeToString())
    assert_refused(path, UnsupportedModelError, "node 'n' (QLinearSigmoid)",
                   "imports com.microsoft opset 2, not 1")


def test_a_qgemm_of_int8_weights_builds_or_is_refused_saying_why(tmp_path, signer):
    """quantize_static's default int8 weights: where onnxruntime's u8 x s8 kernel saturates
    (x86-64 without VNNI) the build is refused naming QGemm and what builds instead; the
    import itself matches the same model with its weights as uint8 + 128 everywhere."""
    from .test_qlinear import _build_or_refused, _u8_twin

    torch.manual_seed(9)
    float_model = export(torch.nn.Linear(16, 5), [torch.randn(3, 16)], tmp_path / "f.onnx",
                         dynamo=False, input_names=["x"], output_names=["y"])
    path = tmp_path / "qgemm.onnx"
    quantization.quantize_static(str(float_model), str(path), _Batches("x", (3, 16)),
                                 quant_format=quantization.QuantFormat.QOperator,
                                 weight_type=quantization.QuantType.QInt8,
                                 activation_type=quantization.QuantType.QUInt8)
    assert "QGemm" in {n.op_type for n in onnx.load(str(path)).graph.node}
    feeds = [{"x": (RNG.standard_normal((3, 16)) * s).astype(np.float32)} for s in (1, 4)]
    _exact(_u8_twin(path, tmp_path / "twin.onnx"), feeds, graph=import_onnx(path).graph)
    loaded = _build_or_refused(path, tmp_path, signer, u8_by_s8=True)
    if loaded is not None:
        check_on_both_backends(path, loaded, feeds)


def test_the_reader_lets_through_exactly_the_contrib_ops_that_map():
    from plugin_host.onnx_import.ops import MAPPERS
    from plugin_host.onnx_import.quantize import OPERATOR_ORIENTED
    from plugin_host.onnx_import.reader import CONTRIB_MAPPED

    assert CONTRIB_MAPPED == {k for k in MAPPERS if k.startswith(_MS + ".")}
    assert not {k.split(".")[-1] for k in CONTRIB_MAPPED} & OPERATOR_ORIENTED


@pytest.mark.parametrize("op, attr, value", [
    ("QLinearAveragePool", "pads", 1), ("QLinearAveragePool", "auto_pad", 1),
    ("QLinearLeakyRelu", "alpha", "high"), ("QLinearSigmoid", "alpha", [1.0])])
def test_an_attribute_of_another_type_than_onnxruntimes_schema_is_refused(op, attr, value,
                                                                          tmp_path):
    """onnx's checker knows no com.microsoft schema: the reader checks the names and types
    (onnxruntime refuses either when it loads the model)."""
    attrs = {"kernel_shape": [2, 2]} if op == "QLinearAveragePool" else {}
    path = _unary_model(tmp_path, op, "uint8", (1, 1, 4, 4), 0.5, np.uint8(0), 0.5,
                        np.uint8(0), **attrs, **{attr: value})
    if op == "QLinearSigmoid":
        assert_refused(path, ModelFileError, f"node 'n' ({op})",
                       f"attribute alpha: com.microsoft's {op} has no such attribute")
        return
    kind = {str: "STRING", int: "INT"}[type(value)]
    want = {"pads": "INTS", "auto_pad": "STRING", "alpha": "FLOAT"}[attr]
    assert_refused(path, ModelFileError, f"node 'n' ({op})",
                   f"attribute {attr} of type {kind}: com.microsoft's {op} takes {want}")


def test_the_declared_schemas_are_onnxruntimes():
    from onnxruntime.capi import _pybind_state

    from plugin_host.onnx_import.reader import CONTRIB_SCHEMAS

    letter = {"Single": "S", "Optional": "O", "Variadic": "V"}
    schemas = {s.name: s for s in _pybind_state.get_all_operator_schema() if s.domain == _MS}
    for op, declared in CONTRIB_SCHEMAS.items():
        schema = schemas[op]
        assert declared.attributes == {k: str(a.type).split(".")[-1]
                                       for k, a in schema.attributes.items()}, op
        assert declared.inputs == "".join(letter[str(i.option).split(".")[-1]]
                                          for i in schema.inputs), op


@pytest.mark.parametrize("inputs, message", [
    (["x", "xs", "", "ys", "yz"], "input 2 is missing: com.microsoft's "
                                  "QLinearGlobalAveragePool requires it"),
    (["x", "xs", "xz", "ys"], "input 4 is missing"),
    (["x", "xs", "xz", "ys", "yz", "yz"], "6 inputs: com.microsoft's QLinearGlobalAveragePool "
                                          "takes at most 5")])
def test_inputs_onnxruntimes_schema_requires_are_checked(inputs, message, tmp_path):
    node = helper.make_node("QLinearGlobalAveragePool", inputs, ["y"], name="n", domain=_MS)
    path = _model(tmp_path / "m.onnx", [node], [_vi("x", "uint8", (1, 1, 4, 4))],
                  [_vi("y", "uint8", None, 4)], [_param("xs", 0.5), _param("xz", np.uint8(3)),
                                                 _param("ys", 0.25), _param("yz", np.uint8(2))])
    with pytest.raises(Exception, match="INVALID_GRAPH"):  # onnxruntime refuses it too
        onnxruntime_outputs(path, {"x": np.zeros((1, 1, 4, 4), np.uint8)}, optimized=False)
    assert_refused(path, ModelFileError, "node 'n' (QLinearGlobalAveragePool)", message)


def test_a_concat_of_no_inputs_is_refused(tmp_path):
    node = helper.make_node("QLinearConcat", ["ys", "yz"], ["y"], name="n", domain=_MS, axis=0)
    path = _model(tmp_path / "m.onnx", [node], [_vi("x", "uint8", (4,))],
                  [_vi("y", "uint8", None, 1)], [_param("ys", 0.25), _param("yz", np.uint8(2))])
    assert_refused(path, ModelFileError, "node 'n' (QLinearConcat)",
                   "2 inputs: com.microsoft's QLinearConcat takes more than 2")
