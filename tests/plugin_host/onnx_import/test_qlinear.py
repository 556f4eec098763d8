"""Operator-oriented quantized models (``quantize_static`` with ``QuantFormat.QOperator``):
QLinearConv and QLinearMatMul imported with onnxruntime's numbers. A torch CNN (conv, relu,
linear) quantized per tensor and per channel with uint8 and int8 weights, built and compared
bit for bit on the numpy and onnxruntime backends; hand-made nodes with strides, pads,
dilations, groups, depthwise, per-channel scales, biases, int8 and uint8, ties, sums beyond
float32's exact integers; and what is refused, naming the node (run-time scales or weights,
zero points of another dtype, scales that are not positive and finite); sums with the bias
beyond int32 wrap, as onnxruntime's.

Where onnxruntime's u8 x s8 kernel saturates (x86-64 without VNNI) the reference of a model of
uint8 activations and int8 weights is not its exact sums, so its build's comparison fails; the
import is then checked against onnxruntime running the same model with its int8 weights
rewritten as uint8 (``w + 128``, zero point + 128: the same differences, a u8 x u8 kernel
that does not saturate), which is exact on every CPU.
"""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import ModelFileError, ModelImportError, UnsupportedModelError
from plugin_host.executor import Executor
from plugin_host.onnx_import import import_onnx
from plugins.numpy_backend import NumpyBackend
from plugins.onnxruntime_backend import OnnxruntimeBackend

from .conftest import (assert_refused, check_on_both_backends, import_and_load, onnx,
                       onnxruntime_outputs, torch)
from .test_quantize_dynamic import _onnxruntime_saturates
from .test_quantized import _check, _save, _vi, statically_quantized

quantization = pytest.importorskip("onnxruntime.quantization")
helper, TP, numpy_helper = onnx.helper, onnx.TensorProto, onnx.numpy_helper
RNG = np.random.default_rng(47)
_Q = quantization.QuantType
_ELEM = {"uint8": TP.UINT8, "int8": TP.INT8}


def _u8_twin(path, out):
    """``path`` with the int8 weights (and their zero points) of its QLinearConv,
    QLinearMatMul and QGemm rewritten as uint8 + 128: the same model on a u8 x u8 kernel."""
    model = onnx.load(str(path))
    names = {n.input[i] for n in model.graph.node if n.op_type in ("QLinearConv",
                                                                   "QLinearMatMul", "QGemm")
             for i in (3, 5)}
    for t in model.graph.initializer:
        if t.name in names and t.data_type == TP.INT8:
            shifted = numpy_helper.to_array(t).astype(np.int16) + 128
            t.CopyFrom(numpy_helper.from_array(shifted.astype(np.uint8), t.name))
    onnx.save(model, str(out))
    return out


def _exact_on_both_backends(graph, reference, feeds) -> None:
    """The graph's outputs equal onnxruntime's for ``reference`` (optimizations off), bit for
    bit, on the numpy and the onnxruntime backend."""
    for backend in (NumpyBackend(), OnnxruntimeBackend()):
        executor = Executor(graph, backend)
        for feed in feeds:
            got = executor.run(dict(feed))
            for name, value in onnxruntime_outputs(reference, feed, optimized=False).items():
                assert got[name].dtype == value.dtype, name
                np.testing.assert_array_equal(got[name], value, err_msg=name)


def _build_or_refused(path, tmp_path, signer, u8_by_s8: bool):
    """import_and_load, or None where onnxruntime saturates u8 x s8 sums here and the model
    has such a node: its build is refused, its comparison failing, nothing written."""
    if u8_by_s8 and _onnxruntime_saturates(tmp_path):
        with pytest.raises(ModelImportError, match=r"differs from onnxruntime.*: "
                                                   r"onnxruntime's u8 x s8 integer kernel on "
                                                   r"this CPU \(x86-64 without VNNI\) "
                                                   r"saturates each pair of products"):
            import_and_load(path, tmp_path / "q.pha", signer)
        assert not (tmp_path / "q.pha").exists()
        return None
    return import_and_load(path, tmp_path / "q.pha", signer)[1]


# --- quantize_static(QOperator) on a torch CNN ----------------------------------------------


class _CNN(torch.nn.Module):
    """Conv (strided, padded) + ReLU + Linear; the Linear on a 3-D input exports as MatMul and
    Add (a 2-D one is a Gemm, which the QOperator format writes as com.microsoft's QGemm)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1, stride=2)
        self.fc = torch.nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        return self.fc(torch.flatten(torch.relu(self.conv(x)), 1).unsqueeze(1))


_SHAPE = (2, 3, 8, 8)
#: (per_channel, weight type, reduce_range): per-channel conv weights are always int8 (the
#: quantizer's choice); reduce_range's 7-bit weights are exact on every CPU
_CONFIGS = [pytest.param(False, _Q.QUInt8, False, id="per-tensor-u8"),
            pytest.param(False, _Q.QInt8, False, id="per-tensor-s8"),
            pytest.param(False, _Q.QInt8, True, id="per-tensor-s8-reduce-range"),
            pytest.param(True, _Q.QUInt8, False, id="per-channel-u8"),
            pytest.param(True, _Q.QInt8, False, id="per-channel-s8"),
            pytest.param(True, _Q.QInt8, True, id="per-channel-s8-reduce-range")]


def _feeds() -> list[dict]:
    feeds = [{"x": (RNG.standard_normal(_SHAPE) * s).astype(np.float32)} for s in (1, 3, 30)]
    extreme = RNG.standard_normal(_SHAPE).astype(np.float32)
    extreme.reshape(-1)[:4] = [1e30, -1e30, -0.0, 1e-45]
    return feeds + [{"x": extreme}]


@pytest.mark.parametrize("per_channel, weights, reduce_range", _CONFIGS)
@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_a_qoperator_cnn_matches_onnxruntime_bit_for_bit(dynamo, per_channel, weights,
                                                         reduce_range, tmp_path, signer):
    path = statically_quantized(tmp_path, _CNN, _SHAPE, "qop.onnx", dynamo=dynamo,
                                quant_format=quantization.QuantFormat.QOperator,
                                per_channel=per_channel, weight_type=weights,
                                activation_type=_Q.QUInt8, reduce_range=reduce_range,
                                op_types_to_quantize=["Conv", "MatMul"])
    model = onnx.load(str(path))
    assert {"QLinearConv", "QLinearMatMul"} <= {n.op_type for n in model.graph.node}
    int8 = {t.name for t in model.graph.initializer if t.data_type == TP.INT8}
    u8_by_s8 = any(n.input[3] in int8 for n in model.graph.node if n.op_type.startswith("QL"))
    assert u8_by_s8 == (weights == _Q.QInt8 or per_channel)
    graph = import_onnx(path).graph
    ops = {n.op for n in graph.nodes}
    assert {"qlinear_conv", "integer_linear", "quantize_linear"} <= ops
    feeds = _feeds()
    _exact_on_both_backends(graph, _u8_twin(path, tmp_path / "twin.onnx"), feeds)
    loaded = _build_or_refused(path, tmp_path, signer, u8_by_s8 and not reduce_range)
    if loaded is None:
        return
    check_on_both_backends(path, loaded, feeds)
    _check(path, loaded, feeds, exact=True)
    _check(path, loaded, feeds, exact=True, backend=OnnxruntimeBackend())


# --- hand-made QLinearConv / QLinearMatMul ---------------------------------------------------


def _ints(dtype: str, shape, lo=None, hi=None) -> np.ndarray:
    info = np.iinfo(dtype)
    lo, hi = info.min if lo is None else lo, info.max if hi is None else hi
    return RNG.integers(lo, hi, size=shape, endpoint=True).astype(dtype)


def _qlinear(tmp_path, op: str, x_shape, y_shape, x_dtype: str, w: np.ndarray, w_scale,
             w_zp, *, x_scale=0.02, x_zp=None, y_scale=0.05, y_zp=None, bias=None,
             runtime=(), name="n", **attrs):
    """x -> ``op`` (node "n") -> graph output "y" (x's dtype); every other input an
    initializer, except those named in ``runtime`` (graph inputs)."""
    info = np.iinfo(x_dtype)
    x_zp = np.array(info.min // 2 + 100 if x_zp is None else x_zp, x_dtype) \
        if not isinstance(x_zp, np.ndarray) else x_zp
    y_zp = np.array(info.max // 2 if y_zp is None else y_zp, x_dtype) \
        if not isinstance(y_zp, np.ndarray) else y_zp
    w_zp = np.asarray(w_zp) if isinstance(w_zp, np.generic) else np.asarray(w_zp, w.dtype)
    values = {"xs": np.asarray(x_scale, np.float32), "xz": x_zp, "w": w,
              "ws": np.asarray(w_scale, np.float32), "wz": w_zp,
              "ys": np.asarray(y_scale, np.float32), "yz": y_zp}
    ins = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"]
    if bias is not None:
        values["b"] = bias
        ins.append("b")
    inputs = [_vi("x", _ELEM[x_dtype], x_shape)] + [
        _vi(k, helper.np_dtype_to_tensor_dtype(values[k].dtype), values[k].shape)
        for k in runtime]
    inits = [numpy_helper.from_array(v, k) for k, v in values.items() if k not in runtime]
    node = helper.make_node(op, ins, ["y"], name=name, **attrs)
    return _save(tmp_path / "m.onnx", [node], inputs,
                 [_vi("y", helper.np_dtype_to_tensor_dtype(y_zp.dtype), y_shape)], inits)


def _int_feeds(dtype: str, shape) -> list[dict]:
    info = np.iinfo(dtype)
    return [{"x": _ints(dtype, shape)}, {"x": _ints(dtype, shape)},
            {"x": np.full(shape, info.max, dtype)}, {"x": np.full(shape, info.min, dtype)}]


#: (x dtype, w dtype, the weights' range): int8 weights by uint8 inputs within [-63, 63], so
#: that no pair of products saturates int16 on any CPU
_DTYPES = [pytest.param("uint8", "uint8", (0, 255), id="u8u8"),
           pytest.param("uint8", "int8", (-63, 63), id="u8s8"),
           pytest.param("int8", "int8", (-128, 127), id="s8s8")]
#: (group, input channels, output channels, attributes, output spatial shape) over a (2, C, 7,
#: 6) input
_CONVS = {
    "padded-strided-dilated": (1, 3, 4, {"pads": [1, 0, 2, 1], "strides": [2, 1],
                                         "dilations": [1, 2]}, (4, 3)),
    "grouped": (2, 4, 6, {"pads": [1, 1, 1, 1], "strides": [1, 2]}, (7, 3)),
    "depthwise": (4, 4, 4, {"auto_pad": "SAME_UPPER"}, (7, 6)),
}


@pytest.mark.parametrize("conv", sorted(_CONVS))
@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
@pytest.mark.parametrize("x_dtype, w_dtype, w_range", _DTYPES)
def test_qlinear_conv_matches_onnxruntime_bit_for_bit(x_dtype, w_dtype, w_range, per_channel,
                                                      conv, tmp_path, signer):
    group, c_in, c_out, attrs, spatial = _CONVS[conv]
    w = _ints(w_dtype, (c_out, c_in // group, 3, 3), *w_range)
    w_scale = (RNG.random(c_out if per_channel else ()) * 0.01 + 1e-3).astype(np.float32)
    w_zp = _ints(w_dtype, c_out if per_channel else (), -4 if w_dtype == "int8" else 120,
                 4 if w_dtype == "int8" else 136)
    bias = _ints("int32", (c_out,), -20000, 20000)
    model = _qlinear(tmp_path, "QLinearConv", (2, c_in, 7, 6), (2, c_out) + spatial, x_dtype,
                     w, w_scale, w_zp, x_scale=0.0173, y_scale=0.0231, bias=bias, group=group,
                     kernel_shape=[3, 3], **attrs)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    ops = [n.op for n in loaded.graph.nodes]
    if np.all(w_zp == w_zp.flat[0]):  # onnxruntime's QLinearConv takes it: one op
        assert ops == ["qlinear_conv"], ops
    else:
        assert ops == ["cast", "sub", "conv", "add", "mul", "quantize_linear", "cast"], ops
    feeds = _int_feeds(x_dtype, (2, c_in, 7, 6))
    check_on_both_backends(model, loaded, feeds)
    _exact_on_both_backends(loaded.graph, model, feeds)


@pytest.mark.parametrize("per_column", [False, True], ids=["per-tensor", "per-column"])
@pytest.mark.parametrize("x_dtype, w_dtype, w_range", _DTYPES)
def test_qlinear_matmul_matches_onnxruntime_bit_for_bit(x_dtype, w_dtype, w_range, per_column,
                                                        tmp_path, signer):
    """A 3-D input by a 2-D constant B, per-column scales and zero points."""
    w = _ints(w_dtype, (24, 5), *w_range)
    w_scale = (RNG.random(5 if per_column else ()) * 0.01 + 1e-3).astype(np.float32)
    w_zp = _ints(w_dtype, 5 if per_column else (), -4 if w_dtype == "int8" else 120,
                 4 if w_dtype == "int8" else 136)
    model = _qlinear(tmp_path, "QLinearMatMul", (2, 3, 24), (2, 3, 5), x_dtype, w, w_scale,
                     w_zp, x_scale=0.0173, y_scale=0.0231)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert "integer_linear" in {n.op for n in loaded.graph.nodes}
    feeds = _int_feeds(x_dtype, (2, 3, 24))
    check_on_both_backends(model, loaded, feeds)
    _exact_on_both_backends(loaded.graph, model, feeds)


def test_the_scale_is_x_scale_times_w_scale_then_divided_by_y_scale(tmp_path, signer):
    """Scales whose float32 combinations round apart: ``(x_scale * w_scale) / y_scale`` is
    onnxruntime's; ``x_scale * (w_scale / y_scale)`` and the exact (float64) quotient move
    some of these sums by one."""
    f = np.float32
    x_scale, w_scale, y_scale = f(0.0225), f(0.006482), f(0.04167)
    ours = (x_scale * w_scale) / y_scale
    others = [x_scale * (w_scale / y_scale),
              f(np.float64(x_scale) * np.float64(w_scale) / np.float64(y_scale))]
    assert all(ours != other for other in others)
    acc = np.arange(1, 255 * 256, dtype=np.int64)
    want = np.round(acc.astype(f) * ours)
    apart = acc[(want <= 255) & np.any([np.round(acc.astype(f) * other) != want
                                        for other in others], axis=0)]
    assert apart.size >= 10
    # a uint8 B of one row of 1 and 255 rows of 255: every sum below 255 * 256 reachable
    k = 256
    w = np.full((k, 1), 255, np.uint8)
    w[0] = 1
    x = np.zeros((apart.size, k), np.uint8)
    x[:, 0] = apart % 255
    for i, s in enumerate(apart // 255):
        x[i, 1:1 + s // 255] = 255
        x[i, 1 + s // 255] = s % 255
    assert np.array_equal(x.astype(np.int64) @ w.astype(np.int64), apart[:, None])
    model = _qlinear(tmp_path, "QLinearMatMul", (apart.size, k), (apart.size, 1), "uint8", w,
                     w_scale, np.uint8(0), x_scale=x_scale, x_zp=0, y_scale=y_scale, y_zp=0)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    got = onnxruntime_outputs(model, {"x": x}, optimized=False)["y"][:, 0]
    np.testing.assert_array_equal(got, np.round(apart.astype(f) * ours))
    for other in others:
        assert np.any(got != np.round(apart.astype(f) * other))
    _exact_on_both_backends(loaded.graph, model, [{"x": x}])


def test_halves_round_to_even_like_onnxruntime(tmp_path, signer):
    """A combined scale of 0.5: odd sums land on halves, which go to the even integer."""
    w = np.ones((1, 1), np.uint8)
    model = _qlinear(tmp_path, "QLinearMatMul", (8, 1), (8, 1), "uint8", w, 0.5, np.uint8(0),
                     x_scale=1.0, x_zp=0, y_scale=1.0, y_zp=0)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    x = np.array([[1], [3], [5], [7], [9], [251], [253], [255]], np.uint8)
    want = onnxruntime_outputs(model, {"x": x}, optimized=False)["y"]
    assert want.ravel().tolist() == [0, 2, 2, 4, 4, 126, 126, 128]
    _exact_on_both_backends(loaded.graph, model, [{"x": x}])


@pytest.mark.parametrize("y_scale", [1e-3, 1e-9, 1e-30], ids=["1e-3", "1e-9", "1e-30"])
def test_outputs_beyond_the_range_saturate_like_onnxruntime(y_scale, tmp_path, signer):
    """Tiny output scales: the products reach far beyond the integer range (1e-30: beyond
    int32 and near float32's end), and saturate at its ends as onnxruntime's do."""
    w = _ints("int8", (4, 4, 3, 3), -60, 60)
    model = _qlinear(tmp_path, "QLinearConv", (1, 4, 5, 5), (1, 4, 5, 5), "int8", w, 0.5,
                     np.int8(0), x_scale=1.0, x_zp=0, y_scale=y_scale, y_zp=3,
                     bias=_ints("int32", (4,), -100, 100), pads=[1, 1, 1, 1])
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    feeds = _int_feeds("int8", (1, 4, 5, 5))
    _exact_on_both_backends(loaded.graph, model, feeds)
    assert set(np.unique(onnxruntime_outputs(model, feeds[0], optimized=False)["y"])) <= {
        -128, 3, 127}


@pytest.mark.parametrize("zero_points", ["one", "two"])
@pytest.mark.parametrize("bias", ["small", "large"])
def test_sums_beyond_float32s_exact_integers_run_in_exact_runs(bias, zero_points, tmp_path,
                                                               signer):
    """64 input channels of 3 x 3 uint8 weights near 255: sums up to 255 * 255 * 576 > 2**24,
    which one float32 conv would round; a bias beyond 2**24 (``large``) too; the int32 sum
    rounds to float32 once, as onnxruntime's. With one weight zero point, one
    ``qlinear_conv`` (the numpy backend cuts the runs itself); with two (one per output
    channel, which onnxruntime's kernel does not take as such), runs of input channels
    summed in int32, the bias added in int32."""
    w = _ints("uint8", (2, 64, 3, 3), 240, 255)
    b = np.array([3, -5] if bias == "small" else [2 ** 25 + 1, 2 ** 25 + 3], np.int32)
    w_zp = np.uint8(0) if zero_points == "one" else np.array([0, 1], np.uint8)
    model = _qlinear(tmp_path, "QLinearConv", (1, 64, 5, 5), (1, 2, 5, 5), "uint8", w,
                     0.0123, w_zp, x_scale=0.01, x_zp=0, y_scale=34.0, y_zp=0,
                     bias=b, pads=[1, 1, 1, 1])
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    ops = [n.op for n in loaded.graph.nodes]
    if zero_points == "one":
        assert ops == ["qlinear_conv"]
    else:  # three runs of input channels, each cast to int32; the sum (with the bias) to float32
        assert ops.count("conv") == ops.count("slice") == 3 and ops.count("cast") == 1 + 3 + 1 + 1
    x = _ints("uint8", (1, 64, 5, 5), 250, 255)
    want = onnxruntime_outputs(model, {"x": x}, optimized=False)["y"]
    assert 0 < want.min() and want.max() < 255  # in range: the rounding shows
    _exact_on_both_backends(loaded.graph, model, [{"x": x}, {"x": _ints("uint8", x.shape)}])


def test_codes_between_quantized_convs_stay_codes(tmp_path, signer):
    """QuantizeLinear -> QLinearConv -> QLinearConv -> DequantizeLinear: the quantized input
    cast to uint8 once, the first conv's codes go to the second as they are (no cast between
    them), the second's cast to float32 for DequantizeLinear; bit for bit with onnxruntime."""
    w1, w2 = _ints("uint8", (4, 3, 3, 3)), _ints("uint8", (2, 4, 1, 1))
    f = np.float32
    inits = [numpy_helper.from_array(v, k) for k, v in {
        "s": np.array(0.05, f), "z": np.array(128, np.uint8), "w1": w1, "w2": w2,
        "ws": np.array(0.004, f), "wz": np.array(127, np.uint8), "s1": np.array(0.07, f),
        "z1": np.array(10, np.uint8), "s2": np.array(0.3, f), "z2": np.array(99, np.uint8),
        "b": _ints("int32", (4,), -500, 500)}.items()]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="q"),
             helper.make_node("QLinearConv", ["xq", "s", "z", "w1", "ws", "wz", "s1", "z1",
                                              "b"], ["h"], name="c1", pads=[1, 1, 1, 1]),
             helper.make_node("QLinearConv", ["h", "s1", "z1", "w2", "ws", "wz", "s2", "z2"],
                              ["hq"], name="c2"),
             helper.make_node("DequantizeLinear", ["hq", "s2", "z2"], ["y"], name="dq")]
    model = _save(tmp_path / "m.onnx", nodes, [_vi("x", shape=(1, 3, 6, 6))],
                  [_vi("y", shape=(1, 2, 6, 6))], inits)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert [n.op for n in loaded.graph.nodes] == ["quantize_linear", "cast", "qlinear_conv",
                                                  "qlinear_conv", "cast", "sub", "mul"]
    feeds = [{"x": (RNG.standard_normal((1, 3, 6, 6)) * s).astype(np.float32)} for s in (1, 9)]
    check_on_both_backends(model, loaded, feeds)
    _exact_on_both_backends(loaded.graph, model, feeds)


def test_a_grouped_conv_beyond_float32s_exact_sums_is_exact(tmp_path, signer):
    """255 * 255 * 576 > 2**24 per group, one weight zero point: one ``qlinear_conv``, whose
    runs the numpy backend cuts within each group; bit for bit with onnxruntime."""
    w = np.full((2, 64, 3, 3), 255, np.uint8)
    model = _qlinear(tmp_path, "QLinearConv", (1, 128, 5, 5), (1, 2, 3, 3), "uint8", w, 0.01,
                     np.uint8(0), x_zp=0, y_scale=500.0, y_zp=0, group=2)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert [n.op for n in loaded.graph.nodes] == ["qlinear_conv"]
    x = _ints("uint8", (1, 128, 5, 5), 200, 255)
    want = onnxruntime_outputs(model, {"x": x}, optimized=False)["y"]
    assert 0 < want.min() and want.max() < 255
    _exact_on_both_backends(loaded.graph, model, [{"x": x}])


# --- refused -----------------------------------------------------------------------------


def _conv(tmp_path, **options):
    w = options.pop("w", np.ones((2, 3, 1, 1), np.uint8))
    w_scale = options.pop("w_scale", 0.01)
    w_zp = options.pop("w_zp", np.uint8(1))
    return _qlinear(tmp_path, "QLinearConv", (1, 3, 4, 4), (1, 2, 4, 4), "uint8", w,
                    w_scale, w_zp, **options)


_WHERE = "node 'n' (QLinearConv)"


@pytest.mark.parametrize("which", ["xs", "ws", "ys", "xz", "wz", "yz"])
def test_a_runtime_scale_or_zero_point_is_refused(which, tmp_path):
    what = {"xs": "x_scale", "ws": "w_scale", "ys": "y_scale", "xz": "x_zero_point",
            "wz": "w_zero_point", "yz": "y_zero_point"}[which]
    assert_refused(_conv(tmp_path, runtime=(which,)), UnsupportedModelError, _WHERE,
                   f"{what} {which!r} must be a constant (known at import)")


def test_runtime_conv_weights_are_refused_saying_what_imports(tmp_path):
    model = _qlinear(tmp_path, "QLinearConv", (1, 3, 4, 4), (1, 2, 4, 4), "uint8",
                     np.ones((2, 3, 1, 1), np.uint8), 0.01, np.uint8(1), runtime=("w",))
    assert_refused(model, UnsupportedModelError, "node 'n' (QLinearConv)",
                   "W 'w' must be a constant (the quantized weights), but it is computed at run "
                   "time; quantize in QDQ format instead (quant_format=QuantFormat.QDQ)")


@pytest.mark.parametrize("k", [24, 300])
@pytest.mark.parametrize("x_dtype, w_dtype, w_range", _DTYPES)
def test_a_qlinear_matmul_of_two_run_time_operands_matches_onnxruntime_bit_for_bit(
        x_dtype, w_dtype, w_range, k, tmp_path):
    """Attention's QLinearMatMuls (scores, weighted values) take B computed when the call runs:
    an int32 matmul of both operands less their zero points, as onnxruntime's integer GEMM
    accumulates, then requantized. K = 300 takes uint8 sums past 2**24, where a float32 sum
    would round; B broadcast over A's batch too."""
    w = _ints(w_dtype, (2, k, 5), *w_range)
    w_scale = np.float32(RNG.random() * 0.01 + 1e-3)
    w_zp = _ints(w_dtype, (), -4 if w_dtype == "int8" else 120, 4 if w_dtype == "int8" else 136)
    model = _qlinear(tmp_path, "QLinearMatMul", ("n", 3, k), (2, 3, 5), x_dtype, w, w_scale,
                     w_zp, x_scale=0.0173, y_scale=0.0231 * k / 24, runtime=("w",))
    graph = import_onnx(model).graph
    assert "matmul" in {n.op for n in graph.nodes}
    feeds = [{"x": _ints(x_dtype, (2, 3, k)), "w": _ints(w_dtype, (2, k, 5), *w_range)},
             {"x": _ints(x_dtype, (1, 3, k)), "w": _ints(w_dtype, (2, k, 5), *w_range)},
             {"x": np.full((2, 3, k), np.iinfo(x_dtype).max, x_dtype),
              "w": np.full((2, k, 5), w_range[1], w_dtype)}]
    _exact_on_both_backends(graph, model, feeds)


def test_a_run_time_qlinear_matmul_wraps_past_int32_as_onnxruntime(tmp_path):
    """Sums past 2**31 wrap in onnxruntime's int32 accumulator; the import's int32 matmul
    wraps alike (a float32 sum would saturate the code instead): 34,000 products of 255."""
    k = 34000
    model = _qlinear(tmp_path, "QLinearMatMul", (1, 1, k), (1, 1, 1), "uint8",
                     np.zeros((1, k, 1), np.uint8), 1.0, np.uint8(0), x_scale=1.0, x_zp=0,
                     y_scale=2.0 ** 24, y_zp=128, runtime=("w",))
    feeds = [{"x": np.full((1, 1, k), fill, np.uint8), "w": np.full((1, k, 1), 255, np.uint8)}
             for fill in (255, 200)]
    assert onnxruntime_outputs(model, feeds[0], optimized=False)["y"].item() == 4  # wrapped
    _exact_on_both_backends(import_onnx(model).graph, model, feeds)


def test_a_per_column_scale_of_a_run_time_b_is_refused(tmp_path):
    """onnxruntime refuses the call (its weight scale must be one value there)."""
    model = _qlinear(tmp_path, "QLinearMatMul", (2, 3, 4), (2, 3, 5), "uint8",
                     np.ones((2, 4, 5), np.uint8), np.full(5, 0.01, np.float32), np.uint8(1),
                     runtime=("w",))
    assert_refused(model, ModelFileError, "node 'n' (QLinearMatMul)",
                   "w_scale of shape [5]: must be one value")


@pytest.mark.parametrize("which", ["x", "w", "y"])
def test_a_zero_point_of_another_dtype_is_refused(which, tmp_path):
    if which == "x":
        model, message = _conv(tmp_path, x_zp=np.array(1, np.int8)), (
            "X's zero point of dtype int8 differs from the values' uint8")
    elif which == "w":
        model, message = _conv(tmp_path, w_zp=np.int8(1)), (
            "W's zero point of dtype int8 differs from the values' uint8")
    else:
        model, message = _conv(tmp_path, y_zp=np.array(1, np.int16)), (
            "y_zero_point of dtype int16: only int8 and uint8 are supported")
    error = UnsupportedModelError if which == "y" else ModelFileError
    assert_refused(model, error, _WHERE, message)


@pytest.mark.parametrize("value", [0.0, -0.5, np.nan, np.inf])
@pytest.mark.parametrize("which", ["x_scale", "w_scale", "y_scale"])
def test_a_scale_not_positive_and_finite_is_refused(which, value, tmp_path):
    if which == "w_scale":
        model = _conv(tmp_path, w_scale=np.array([0.01, value], np.float32))
    else:
        model = _conv(tmp_path, **{which: value})
    assert_refused(model, ModelFileError, _WHERE, f"{which} ")
    assert_refused(model, ModelFileError, _WHERE, "must be positive and finite")


def test_scales_of_the_wrong_shape_are_refused(tmp_path):
    assert_refused(_conv(tmp_path, y_scale=np.array([0.1, 0.2], np.float32)), ModelFileError,
                   _WHERE, "y_scale of shape [2]: must be one value")
    assert_refused(_conv(tmp_path, w_scale=np.array([0.1, 0.2, 0.3], np.float32)),
                   ModelFileError, _WHERE, "w_scale of shape [3]: must be one value or 2 "
                   "(one per output channel)")


def test_a_combined_scale_beyond_float32_is_refused(tmp_path):
    model = _conv(tmp_path, x_scale=1e30, w_scale=1e30, y_scale=1.0)
    assert_refused(model, UnsupportedModelError, _WHERE,
                   "x_scale * w_scale / y_scale overflows float32")


@pytest.mark.parametrize("sign", [1, -1], ids=["up", "down"])
@pytest.mark.parametrize("zero_points", ["one", "per-channel"])
@pytest.mark.parametrize("conv", sorted(_CONVS))
@pytest.mark.parametrize("x_dtype, w_dtype, w_range", _DTYPES)
def test_a_sum_with_the_bias_beyond_int32_wraps_as_onnxruntime(x_dtype, w_dtype, w_range, conv,
                                                               zero_points, sign, tmp_path):
    """A bias within a few thousand of 2**31 (a detector head's, by its tiny scale): the sums
    with it wrap, as onnxruntime's int32 accumulation does, through the one qlinear_conv
    (one zero point) and through the sum of ops (zero points per channel), bit for bit on
    both backends. Unwrapped, every code would lie on the bias's side of y's zero point (the
    bias times the scale is 10 to 110 codes); one on the other side shows a sum wrapped."""
    group, c_in, c_out, attrs, spatial = _CONVS[conv]
    w = _ints(w_dtype, (c_out, c_in // group, 3, 3), *w_range)
    w_scale = (RNG.random(c_out) * 0.01 + 1e-3).astype(np.float32)
    middle = 0 if w_dtype == "int8" else 128
    w_zp = np.full(c_out, middle, w_dtype) if zero_points == "one" else \
        _ints(w_dtype, c_out, middle - 4, middle + 4)
    bias = (sign * (2 ** 31 - RNG.integers(1, 3000, c_out))).astype(np.int32)
    y_scale = float(0.0173 * w_scale.max() / 5e-8)
    model = _qlinear(tmp_path, "QLinearConv", (2, c_in, 7, 6), (2, c_out) + spatial, x_dtype,
                     w, w_scale, w_zp, x_scale=0.0173, y_scale=y_scale, bias=bias,
                     group=group, kernel_shape=[3, 3], **attrs)
    graph = import_onnx(model).graph
    assert ("qlinear_conv" in {n.op for n in graph.nodes}) == (zero_points == "one")
    feeds = _int_feeds(x_dtype, (2, c_in, 7, 6))
    _exact_on_both_backends(graph, model, feeds)
    y_zp = np.iinfo(x_dtype).max // 2  # _qlinear's
    assert any((sign * (onnxruntime_outputs(model, f, optimized=False)["y"].astype(int) - y_zp)
                < 0).any() for f in feeds)


def test_a_bias_of_another_dtype_or_shape_is_refused(tmp_path):
    assert_refused(_conv(tmp_path, bias=np.array([1, 2], np.int64)), ModelFileError, _WHERE,
                   "bias of dtype int64: QLinearConv's bias is int32")
    assert_refused(_conv(tmp_path, bias=np.array([1, 2, 3], np.int32)), ModelFileError,
                   _WHERE, "bias of shape [3]: must be one value per output channel (2)")


def test_a_grouped_conv_beyond_float32s_exact_sums_is_refused(tmp_path):
    """Weight zero points that differ (onnxruntime's kernel takes one) take the float32 runs,
    which a grouped conv cannot split."""
    w = np.full((2, 64, 3, 3), 255, np.uint8)  # 255 * 255 * 576 > 2**24 per group
    model = _qlinear(tmp_path, "QLinearConv", (1, 128, 5, 5), (1, 2, 3, 3), "uint8", w, 0.01,
                     np.array([0, 1], np.uint8), group=2)
    assert_refused(model, UnsupportedModelError, _WHERE,
                   "group=2 with sums beyond the 2**24 float32 holds exactly")


def test_codes_that_only_com_microsoft_ops_read_go_to_them_as_they_are(tmp_path):
    """QLinearConv's codes read only by com.microsoft's QLinearAdd (as both its inputs) go
    from one op to the other in their dtype, with no cast (:mod:`.qoperator`); the chain
    matches onnxruntime bit for bit."""
    model = onnx.load(str(_conv(tmp_path)))
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    model.graph.node.append(helper.make_node("QLinearAdd", ["y", "ys", "yz", "y", "ys", "yz",
                                                            "ys", "yz"], ["y2"], name="add",
                                             domain="com.microsoft"))
    model.graph.output[0].CopyFrom(_vi("y2", TP.UINT8, (1, 2, 4, 4)))
    onnx.save(model, tmp_path / "extra.onnx")
    graph = import_onnx(tmp_path / "extra.onnx").graph
    assert [n.op for n in graph.nodes] == ["qlinear_conv", "qlinear_add"]
    assert graph.nodes[1].inputs[0] == graph.nodes[1].inputs[3] == graph.nodes[0].outputs[0]
    _exact_on_both_backends(graph, tmp_path / "extra.onnx", _int_feeds("uint8", (1, 3, 4, 4)))
