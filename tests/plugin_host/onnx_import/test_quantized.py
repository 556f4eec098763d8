"""Quantized models in QDQ format, imported as float32 fake quantization: torch models quantized
by onnxruntime's ``quantize_static`` (per-tensor and per-channel, int8 and uint8 activations)
and hand-made QuantizeLinear / DequantizeLinear nodes (per-axis, blocked, saturation, ties,
nan, zero points at the type's edge, int16, int32 bias, a scale and zero point computed at run
time), compared with onnxruntime running the quantized model. What the import does not take
(a scale that is not positive and finite, a zero point of another dtype, blocked quantization
over run-time dims or by a run-time scale, com.microsoft's operator-oriented quantized ops) is
refused naming the node; ``quantize_dynamic``'s models are
test_quantize_dynamic.py's, the QLinearConv and QLinearMatMul of ``quantize_static``'s QOperator
format test_qlinear.py's.

The reference runs with graph optimizations off, as the build's golden reference does: with
them on, onnxruntime may fuse DequantizeLinear -> Conv -> QuantizeLinear into an integer kernel
(QLinearConv) whose rounding differs from the float fake quantization by up to one quantization
step. The quantize_static tests measure that difference and print it (``-s`` shows it); they do
not assert it.
"""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import ModelFileError, UnsupportedModelError
from plugin_host.executor import Executor
from plugin_host.onnx_import import ReadLimits, import_onnx
from plugins.numpy_backend import NumpyBackend
from plugins.onnxruntime_backend import OnnxruntimeBackend
from tests.onnxruntime_backend.test_ops import onnx_model

from .conftest import (assert_refused, check_against_onnxruntime, export, import_and_load,
                       onnx, onnxruntime_outputs, torch)

quantization = pytest.importorskip("onnxruntime.quantization")
helper, TP, numpy_helper = onnx.helper, onnx.TensorProto, onnx.numpy_helper
RNG = np.random.default_rng(31)
BIG = np.finfo(np.float32).max


def _check(model, loaded, feeds, *, exact: bool = False, backend=None) -> float:
    """Every output of the loaded artifact (numpy backend unless ``backend``) agrees with
    onnxruntime with optimizations off, within the artifact's tolerance (``exact``: bit for
    bit). Returns how far onnxruntime with its default optimizations is from the artifact
    (measured only)."""
    runs = check_against_onnxruntime(model, loaded, feeds, backend=backend, optimized=False)
    far = 0.0
    for feed, (got, want) in zip(feeds, runs):
        for name, value in want.items():
            if exact:
                np.testing.assert_array_equal(got[name], value, err_msg=name)
            if exact:  # zeros of the same sign too: an integer 0 dequantizes to +0.0
                np.testing.assert_array_equal(np.signbit(got[name]), np.signbit(value))
        for name, value in onnxruntime_outputs(model, feed).items():
            with np.errstate(invalid="ignore"):  # inf - inf where both are inf
                diff = np.abs(got[name].astype(np.float64) - value.astype(np.float64))
            far = max(far, float(np.max(diff, initial=0.0)))
    return far


# --- quantize_static on torch models ---------------------------------------------------------


class _MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(12, 32), torch.nn.Linear(32, 5)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class _ConvNet(torch.nn.Module):
    """Conv + ReLU + pool + Linear; with ``bn`` a BatchNorm after the conv, which the
    exporter folds into the conv's weights (eval mode, constant folding)."""

    def __init__(self, bn: bool = False):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8) if bn else torch.nn.Identity()
        self.fc = torch.nn.Linear(8 * 4 * 4, 10)
        if bn:  # running statistics that are not the identity, so the fold changes the weights
            with torch.no_grad():
                self.bn.running_mean.uniform_(-0.5, 0.5)
                self.bn.running_var.uniform_(0.5, 2.0)
                self.bn.weight.uniform_(0.5, 1.5)
                self.bn.bias.uniform_(-0.2, 0.2)

    def forward(self, x):
        y = torch.nn.functional.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
        return self.fc(torch.flatten(y, 1))


class _Batches(quantization.CalibrationDataReader):
    """A few random batches for onnxruntime's calibration."""

    def __init__(self, name: str, shape: tuple, count: int = 4):
        rng = np.random.default_rng(7)
        self.batches = iter([{name: rng.standard_normal(shape).astype(np.float32)}
                             for _ in range(count)])

    def get_next(self):
        return next(self.batches, None)


def statically_quantized(tmp_path, make, shape: tuple, name: str, *, dynamo: bool = False,
                         seed: int = 3, **options):
    """``make()`` (built after seeding torch with ``seed``) exported for an input "x" of
    ``shape``, then quantized by onnxruntime's quantize_static (calibrated on :class:`_Batches`;
    ``options`` its keywords) to ``tmp_path / name``: that path."""
    torch.manual_seed(seed)
    float_model = export(make(), [torch.randn(*shape)], tmp_path / "float.onnx",
                         dynamo=dynamo, input_names=["x"], output_names=["y"])
    path = tmp_path / name
    quantization.quantize_static(str(float_model), str(path), _Batches("x", shape), **options)
    return path


_MODELS = {"mlp": (_MLP, (4, 12)), "convnet": (_ConvNet, (2, 3, 8, 8)),
           "conv-bn": (lambda: _ConvNet(bn=True), (2, 3, 8, 8))}
_Q = quantization.QuantType
_CONFIGS = [pytest.param(False, _Q.QInt8, _Q.QInt8, id="per-tensor-s8s8"),
            pytest.param(False, _Q.QUInt8, _Q.QUInt8, id="per-tensor-u8u8"),
            pytest.param(True, _Q.QInt8, _Q.QInt8, id="per-channel-s8s8"),
            pytest.param(True, _Q.QUInt8, _Q.QInt8, id="per-channel-u8s8")]


def _quantized(tmp_path, model: str, dynamo: bool, per_channel: bool, activations, weights):
    make, shape = _MODELS[model]
    path = statically_quantized(tmp_path, make, shape, "quantized.onnx", dynamo=dynamo,
                                quant_format=quantization.QuantFormat.QDQ,
                                per_channel=per_channel, activation_type=activations,
                                weight_type=weights)
    return path, shape


@pytest.mark.parametrize("per_channel, activations, weights", _CONFIGS)
@pytest.mark.parametrize("model", sorted(_MODELS))
@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_quantize_static_models_match_onnxruntime(dynamo, model, per_channel, activations,
                                                  weights, tmp_path, signer):
    path, shape = _quantized(tmp_path, model, dynamo, per_channel, activations, weights)
    ops = {n.op_type for n in onnx.load(str(path)).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    _, loaded = import_and_load(path, tmp_path / "q.pha", signer)
    graph_ops = {n.op for n in loaded.graph.nodes}
    assert "quantize_linear" in graph_ops  # the activations' fake quantization ...
    assert "cast" not in graph_ops  # ... in float32 throughout
    assert "linear" in graph_ops  # the weights folded to float32 constants
    # on the onnxruntime backend each pair one QuantizeLinear and one DequantizeLinear
    backend_ops = [n.op_type for n in onnx_model(loaded.graph).graph.node]
    pairs = sum(n.op == "quantize_linear" for n in loaded.graph.nodes)
    assert backend_ops.count("QuantizeLinear") == backend_ops.count("DequantizeLinear") == pairs
    feeds = [{"x": (RNG.standard_normal(shape) * s).astype(np.float32)} for s in (1, 3, 30)]
    extreme = RNG.standard_normal(shape).astype(np.float32)
    extreme.reshape(-1)[:6] = [BIG, -BIG, np.inf, -np.inf, -0.0, 1e-45]
    far = _check(path, loaded, feeds + [{"x": extreme}])
    _check(path, loaded, feeds, backend=OnnxruntimeBackend())
    print(f"\n{model} {dynamo=} {per_channel=} {activations}: onnxruntime with optimizations "
          f"on differs by up to {far}")


def test_the_quantized_models_numbers_differ_from_the_float_models(tmp_path, signer):
    """The import reproduces the quantized model, not the float one it came from."""
    path, shape = _quantized(tmp_path, "mlp", False, False, _Q.QInt8, _Q.QInt8)
    _, loaded = import_and_load(path, tmp_path / "q.pha", signer)
    x = RNG.standard_normal(shape).astype(np.float32)
    got = Executor(loaded.graph, NumpyBackend()).run({"x": x})["y"]
    floats = onnxruntime_outputs(tmp_path / "float.onnx", {"x": x})["y"]
    assert np.abs(got - floats).max() > 1e-3
    np.testing.assert_array_equal(got, onnxruntime_outputs(path, {"x": x}, optimized=False)["y"])


# --- hand-made QuantizeLinear / DequantizeLinear -----------------------------------------------


def _ops(model) -> list[str]:
    return [n.op for n in import_onnx(model).graph.nodes]


def _vi(name, elem=TP.FLOAT, shape=(2, 3, 4)):
    return helper.make_tensor_value_info(name, elem, None if shape is None else list(shape))


def _save(path, nodes, inputs, outputs, inits=(), opset=21):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    path.write_bytes(model.SerializeToString())
    return path


def _qdq(tmp_path, scale, zero_point, *, axis=1, shape=(2, 3, 4), opset=21, int_output=True,
         **attrs):
    """x -> QuantizeLinear (node "q"; with ``int_output`` its integers are a graph output "q")
    -> DequantizeLinear (node "dq", output "y"), scale and zero point initializers; ``attrs``
    on both nodes."""
    scale, zero_point = np.asarray(scale, np.float32), np.asarray(zero_point)
    elem = helper.np_dtype_to_tensor_dtype(zero_point.dtype)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q", axis=axis,
                              **attrs),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dq", axis=axis,
                              **attrs)]
    return _save(tmp_path / "qdq.onnx", nodes, [_vi("x", shape=shape)],
                 [_vi("q", elem, shape)] * int_output + [_vi("y", shape=shape)],
                 [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(zero_point, "z")],
                 opset)


def _edges(scale, lo, hi, zero_point, shape):
    """Inputs whose x / scale is at and around the saturation edges, at halves (ties) and at
    the float32 extremes, inf, nan and -0.0; then random ones. ``scale`` broadcasts to
    ``shape``."""
    n = int(np.prod(shape))
    steps = np.concatenate([np.arange(lo - 3, lo + 3), np.arange(hi - 3, hi + 3),
                            np.arange(-5, 5) + 0.5, [0.49999997, 1.5000001, -2.5000002]])
    steps = (steps - zero_point).astype(np.float32)
    special = np.array([BIG, -BIG, np.inf, -np.inf, np.nan, -0.0, 0.0, 1e-45], np.float32)
    s = np.broadcast_to(np.asarray(scale, np.float32), shape).reshape(-1)
    feeds = [{"x": (np.resize(steps[i:i + n], n) * s).reshape(shape)}
             for i in range(0, len(steps), n)]
    feeds.append({"x": np.resize(special, n).reshape(shape)})
    feeds.append({"x": (RNG.standard_normal(shape) * 3).astype(np.float32)})
    return feeds


#: (backend, int_output): the integers as a graph output (``cast``) or only dequantized (kept
#: in float32, which the onnxruntime backend, without int8 tensors, runs too)
VARIANTS = [pytest.param(NumpyBackend, True, id="numpy-int-output"),
            pytest.param(NumpyBackend, False, id="numpy"),
            pytest.param(OnnxruntimeBackend, False, id="onnxruntime-backend")]


@pytest.mark.parametrize("backend, int_output", VARIANTS)
@pytest.mark.parametrize("dtype, zero_point", [
    ("int8", 0), ("int8", -5), ("int8", -128), ("int8", 127),
    ("uint8", 0), ("uint8", 128), ("uint8", 255), ("int16", -300), ("uint16", 65535)])
def test_per_tensor_quantization_is_bit_identical(dtype, zero_point, backend, int_output,
                                                  tmp_path, signer):
    scale = 0.25  # a power of two: x / scale is exact, so the ties below are ties
    info = np.iinfo(dtype)
    model = _qdq(tmp_path, scale, np.array(zero_point, dtype), int_output=int_output)
    _, loaded = import_and_load(model, tmp_path / "q.pha", signer)
    _check(model, loaded, _edges(scale, int(info.min), int(info.max), zero_point, (2, 3, 4)),
           exact=True, backend=backend())


@pytest.mark.parametrize("backend", [NumpyBackend, OnnxruntimeBackend])
@pytest.mark.parametrize("dtype, zero_point, shape", [
    ("uint8", 128, ()), ("int8", -5, (1,)), ("uint8", None, ()), ("int16", 300, (1,))])
def test_a_scale_and_zero_point_computed_at_run_time_are_bit_identical(
        dtype, zero_point, shape, backend, tmp_path, signer):
    """As DynamicQuantizeLinear's expanded function body computes them: inputs here, per
    tensor (a scalar or one value); ties, saturation, inf and nan as with constants, and a
    scale of 0 (x / 0 saturates, 0 / 0 is the type's minimum, as onnxruntime has it)."""
    ins = ["x", "s"] + (["z"] if zero_point is not None else [])
    code = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    model = _save(tmp_path / "m.onnx", [helper.make_node("QuantizeLinear", ins, ["q"], name="q",
                                                         **({} if zero_point is not None else
                                                            {"output_dtype": code}))],
                  [_vi("x"), _vi("s", shape=shape)] + [_vi("z", code, shape)] * (zero_point
                                                                                 is not None),
                  [_vi("q", code)], opset=21)
    _, loaded = import_and_load(model, tmp_path / "q.pha", signer)
    info, zp = np.iinfo(dtype), zero_point or 0
    feeds = []
    for scale in (0.25, 0.1, 0.0):
        for feed in _edges(scale or 1.0, int(info.min), int(info.max), zp, (2, 3, 4)):
            feed["s"] = np.full(shape, scale, np.float32)
            if zero_point is not None:
                feed["z"] = np.full(shape, zero_point, dtype)
            feeds.append(feed)
    _check(model, loaded, feeds, exact=True, backend=backend())


def test_half_way_values_round_to_even_like_onnxruntime(tmp_path, signer):
    model = _qdq(tmp_path, 0.5, np.array(0, np.int8), shape=(8,), axis=0)
    _, loaded = import_and_load(model, tmp_path / "q.pha", signer)
    x = np.array([1.25, -1.25, 0.25, 0.75, -0.75, 1.75, 2.25, -2.25], np.float32)  # x/s: k+.5
    got = Executor(loaded.graph, NumpyBackend()).run({"x": x})["q"]
    want = onnxruntime_outputs(model, {"x": x}, optimized=False)["q"]
    np.testing.assert_array_equal(got, want)
    assert want[0] == 2 and want[1] == -2  # 2.5 rounds to 2, -2.5 to -2: halves to even


@pytest.mark.parametrize("backend, int_output", VARIANTS)
@pytest.mark.parametrize("axis", [1, -2])
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_per_axis_quantization_is_bit_identical(axis, dtype, backend, int_output, tmp_path,
                                               signer):
    scale = np.array([0.5, 0.03125, 4.0], np.float32)
    zero_point = np.array([-3, 0, 7] if dtype == "int8" else [3, 0, 250], dtype)
    model = _qdq(tmp_path, scale, zero_point, axis=axis, int_output=int_output)
    assert _ops(model).count("cast") == 2 * int_output  # to the integers and back
    _, loaded = import_and_load(model, tmp_path / "q.pha", signer)
    assert any(n.op == "quantize_linear" for n in loaded.graph.nodes)
    info = np.iinfo(dtype)
    feeds = _edges(scale.reshape(3, 1), int(info.min), int(info.max), 0, (2, 3, 4))
    _check(model, loaded, feeds, exact=True, backend=backend())


@pytest.mark.parametrize("backend, int_output", VARIANTS)
@pytest.mark.parametrize("shape, axis, block", [((2, 5, 4), 1, 2), ((2, 3, 7), -1, 3),
                                                ((6, 2), 0, 6), ((4, 3), 0, 1)])
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_blocked_quantization_of_run_time_values_is_bit_identical(
        shape, axis, block, dtype, backend, int_output, tmp_path, signer):
    """Opset 21's block_size with constant scales and zero points: one per ``block`` entries
    along the axis (the last block shorter where it does not divide), repeated at import."""
    blocks = list(shape)
    blocks[axis] = -(-shape[axis] // block)
    scale = (2.0 ** RNG.integers(-6, 3, blocks)).astype(np.float32)
    info = np.iinfo(dtype)
    zero_point = RNG.integers(info.min, info.max, blocks, endpoint=True).astype(dtype)
    model = _qdq(tmp_path, scale, zero_point, axis=axis, shape=shape, int_output=int_output,
                 block_size=block)
    _, loaded = import_and_load(model, tmp_path / "q.pha", signer)
    full = np.repeat(scale, block, axis=axis).take(np.arange(shape[axis]), axis=axis)
    _check(model, loaded, _edges(full, int(info.min), int(info.max), 0, shape), exact=True,
           backend=backend())


def test_integers_read_by_another_op_are_cast(tmp_path, signer):
    """A QuantizeLinear read by a Cast as well as a DequantizeLinear: its integers are int8."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q"),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dq"),
             helper.make_node("Cast", ["q"], ["c"], name="c", to=TP.FLOAT)]
    model = _save(tmp_path / "m.onnx", nodes, [_vi("x")], [_vi("y"), _vi("c")],
                  [numpy_helper.from_array(np.array(0.02, np.float32), "s"),
                   numpy_helper.from_array(np.array(-9, np.int8), "z")])
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert [n.op for n in loaded.graph.nodes].count("cast") == 3  # to int8, and twice back
    _check(model, loaded, _edges(0.02, -128, 127, -9, (2, 3, 4)), exact=True)


def test_quantize_linear_of_opset_13_without_zero_point_is_uint8(tmp_path, signer):
    nodes = [helper.make_node("QuantizeLinear", ["x", "s"], ["q"], name="q"),
             helper.make_node("DequantizeLinear", ["q", "s"], ["y"], name="dq")]
    model = _save(tmp_path / "m.onnx", nodes, [_vi("x")], [_vi("q", TP.UINT8), _vi("y")],
                  [numpy_helper.from_array(np.array(0.1, np.float32), "s")], opset=13)
    _, loaded = import_and_load(model, tmp_path / "q.pha", signer)
    _check(model, loaded, _edges(0.1, 0, 255, 0, (2, 3, 4)), exact=True)


def _constant_dequantize(tmp_path, x, scale, zero_point=None, axis=1, name="dq", opset=21):
    """DequantizeLinear of initializers, added to a run-time input (graph output "y")."""
    inits = [numpy_helper.from_array(x, "wq"), numpy_helper.from_array(
        np.asarray(scale, np.float32), "s")]
    ins = ["wq", "s"]
    if zero_point is not None:
        inits.append(numpy_helper.from_array(np.asarray(zero_point, x.dtype), "z"))
        ins.append("z")
    nodes = [helper.make_node("DequantizeLinear", ins, ["w"], name=name, axis=axis),
             helper.make_node("Add", ["x", "w"], ["y"], name="add")]
    return _save(tmp_path / "w.onnx", nodes, [_vi("x", shape=x.shape)],
                 [_vi("y", shape=x.shape)], inits, opset)


@pytest.mark.parametrize("dtype, per_axis", [
    ("int8", False), ("int8", True), ("uint8", True), ("int16", True), ("uint16", False),
    ("int32", True)])
def test_a_constant_dequantize_folds_to_onnxruntimes_float32(dtype, per_axis, tmp_path,
                                                             signer):
    info = np.iinfo(dtype)
    shape = (4, 3, 5)
    x = RNG.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)
    x.reshape(-1)[:2] = [info.min, info.max]
    scale = (RNG.random(3) * 0.1 + 1e-3).astype(np.float32) if per_axis else np.float32(0.0173)
    if dtype == "int32":  # the bias: its scale is the input's times the weight's
        scale = (scale * np.float32(0.0123)).astype(np.float32)
    zero_point = (RNG.integers(info.min // 2, info.max // 2, size=3 if per_axis else (),
                               endpoint=True).astype(dtype))
    model = _constant_dequantize(tmp_path, x, scale, zero_point)
    _, loaded = import_and_load(model, tmp_path / "w.pha", signer)
    assert [n.op for n in loaded.graph.nodes if n.op != "identity"] == ["add"]  # folded
    _check(model, loaded, [{"x": RNG.standard_normal(shape).astype(np.float32)}], exact=True)


def test_a_constant_quantize_folds_like_onnxruntime(tmp_path, signer):
    """QuantizeLinear of a float weight (the QAT exporters' form), then DequantizeLinear."""
    w = np.concatenate([RNG.standard_normal(20).astype(np.float32),
                        np.array([2.5, -2.5, 0.5, 1e9, -1e9, np.inf, -np.inf, np.nan],
                                 np.float32) * np.float32(0.05)]).reshape(4, 7)
    inits = [numpy_helper.from_array(w, "w"),
             numpy_helper.from_array(np.array([0.05, 0.01, 0.2, 0.03], np.float32), "s"),
             numpy_helper.from_array(np.array([1, -2, 0, 127], np.int8), "z")]
    nodes = [helper.make_node("QuantizeLinear", ["w", "s", "z"], ["wq"], name="q", axis=0),
             helper.make_node("DequantizeLinear", ["wq", "s", "z"], ["wd"], name="dq", axis=0),
             helper.make_node("Add", ["x", "wd"], ["y"], name="add")]
    model = _save(tmp_path / "m.onnx", nodes, [_vi("x", shape=(4, 7))],
                  [_vi("y", shape=(4, 7))], inits)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert [n.op for n in loaded.graph.nodes if n.op != "identity"] == ["add"]
    _check(model, loaded, [{"x": RNG.standard_normal((4, 7)).astype(np.float32)}], exact=True)


def test_a_runtime_int32_dequantize_subtracts_in_int32(tmp_path, signer):
    """onnxruntime's int32 difference wraps: so does the import's."""
    nodes = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], name="dq")]
    model = _save(tmp_path / "m.onnx", nodes, [_vi("x", TP.INT32, (6,))], [_vi("y", shape=(6,))],
                  [numpy_helper.from_array(np.array(0.1, np.float32), "s"),
                   numpy_helper.from_array(np.array(3, np.int32), "z")])
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    x = np.array([0, 1, -5, 2**31 - 1, -2**31, 2**24 + 1], np.int32)
    _check(model, loaded, [{"x": x}], exact=True)


# --- refused -------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", [0.0, -0.5, np.nan, np.inf])
@pytest.mark.parametrize("runtime", [False, True], ids=["constant", "runtime"])
def test_a_scale_not_positive_and_finite_is_refused(scale, runtime, tmp_path):
    """onnxruntime computes with it (scale 0: every x saturates, 0 / 0 gives the minimum;
    nan: nan or the minimum; negative: the values mirrored), which no quantizer writes; a
    hostile model."""
    if runtime:
        model = _qdq(tmp_path, scale, np.array(0, np.int8))
        where = "node 'q' (QuantizeLinear)"
    else:
        model = _constant_dequantize(tmp_path, np.ones((2, 3), np.int8), [1.0, scale, 1.0])
        where = "node 'dq' (DequantizeLinear)"
    assert_refused(model, ModelFileError, where, "must be positive and finite")


def test_a_scale_that_does_not_match_the_axis_is_refused(tmp_path):
    model = _constant_dequantize(tmp_path, np.ones((2, 3), np.int8), [1.0, 0.5], axis=1)
    assert_refused(model, ModelFileError, "node 'dq' (DequantizeLinear)",
                   "scale of shape [2] does not match axis 1 of the values' shape [2, 3]")
    model = _qdq(tmp_path, [0.5, 0.25], np.array([0, 0], np.int8), axis=1)
    assert_refused(model, ModelFileError, "node 'q' (QuantizeLinear)",
                   "scale of shape [2] does not match axis 1")


@pytest.mark.parametrize("runtime", [False, True], ids=["constant", "runtime"])
def test_a_zero_point_of_another_dtype_is_refused(runtime, tmp_path):
    inits = [numpy_helper.from_array(np.array(0.5, np.float32), "s"),
             numpy_helper.from_array(np.array(3, np.uint8), "z")]
    inputs = [_vi("wq", TP.INT8, (2, 3))] if runtime else []
    if not runtime:
        inits.append(numpy_helper.from_array(np.ones((2, 3), np.int8), "wq"))
    nodes = [helper.make_node("DequantizeLinear", ["wq", "s", "z"], ["y"], name="dq")]
    model = _save(tmp_path / "m.onnx", nodes, inputs, [_vi("y", shape=(2, 3))], inits)
    assert_refused(model, ModelFileError, "node 'dq' (DequantizeLinear)",
                   "zero_point of dtype uint8 differs from the quantized values' int8")


def test_a_huge_per_axis_constant_is_refused_in_one_short_line(tmp_path):
    n = 1 << 20
    model = _constant_dequantize(tmp_path, np.ones((2, 3), np.int8), np.full(n, 0.5), axis=1)
    assert_refused(model, ModelFileError, "node 'dq' (DequantizeLinear)",
                   f"scale of shape [{n}] does not match axis 1")
    model = _constant_dequantize(tmp_path, np.ones((1, n), np.int8), np.zeros(n), axis=1)
    assert_refused(model, ModelFileError, "node 'dq' (DequantizeLinear)",
                   f"scale [0.0, 0.0, 0.0, 0.0] (of {n} value(s)) must be positive and finite")
    with pytest.raises(ModelFileError, match="exceed the cap of 1000") as info:
        import_onnx(model, limits=ReadLimits(max_tensor_elements=1000))
    assert "\n" not in str(info.value) and len(str(info.value)) < 300


def test_blocked_quantization_refusals(tmp_path):
    """Blocked over a run-time dim, by a scale computed at run time, by a scale of 0 (a
    quantization divides by it), or of a scale that does not match the blocks."""
    def model(op, x_shape, scale, runtime_scale=False, **attrs):
        elem, out = (TP.FLOAT, TP.INT8) if op == "QuantizeLinear" else (TP.INT8, TP.FLOAT)
        inits = [] if runtime_scale else [numpy_helper.from_array(scale, "s")]
        ins = [_vi("x", elem, x_shape)] + [_vi("s", shape=scale.shape)] * runtime_scale
        outs = [_vi("y", out, x_shape)]
        if op == "QuantizeLinear":
            inits.append(numpy_helper.from_array(np.zeros(scale.shape, np.int8), "z"))
        node = helper.make_node(op, ["x", "s"] + ["z"] * (op == "QuantizeLinear"), ["y"],
                                name="n", axis=1, block_size=2, **attrs)
        return _save(tmp_path / "m.onnx", [node], ins, outs, inits)

    half = np.full((4, 2), 0.5, np.float32)
    assert_refused(model("DequantizeLinear", ("n", 4), half), UnsupportedModelError,
                   "node 'n' (DequantizeLinear)", "blocked quantization of input shape "
                   "['n', 4]: its scale matches every dim, so they must be static")
    assert_refused(model("QuantizeLinear", (4, 4), half, runtime_scale=True),
                   UnsupportedModelError, "node 'n' (QuantizeLinear)",
                   "the blocked scale or zero point 's' is computed at run time")
    assert_refused(model("QuantizeLinear", (4, 4), half * np.float32([1, 0])),
                   ModelFileError, "node 'n' (QuantizeLinear)", "must be positive and finite")
    assert_refused(model("DequantizeLinear", (4, 5), half), ModelFileError,
                   "node 'n' (DequantizeLinear)", "scale of shape [4, 2]: blocks of 2 along "
                   "axis 1 of the values' shape [4, 5] need [4, 3]")


def test_a_runtime_per_axis_scale_is_refused(tmp_path):
    nodes = [helper.make_node("QuantizeLinear", ["x", "s"], ["q"], name="q", axis=1)]
    model = _save(tmp_path / "m.onnx", nodes, [_vi("x"), _vi("s", shape=(3,))],
                  [_vi("q", TP.UINT8)])
    assert_refused(model, UnsupportedModelError, "node 'q' (QuantizeLinear)",
                   "scale 's' of shape [3] is computed at run time: only one per tensor is")


def test_per_axis_over_a_runtime_dim_is_refused(tmp_path):
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q", axis=0)]
    model = _save(tmp_path / "m.onnx", nodes, [_vi("x", shape=("batch", 3))],
                  [_vi("q", TP.INT8, ("batch", 3))],
                  [numpy_helper.from_array(np.array([0.5, 0.25], np.float32), "s"),
                   numpy_helper.from_array(np.array([0, 0], np.int8), "z")])
    assert_refused(model, UnsupportedModelError, "node 'q' (QuantizeLinear)",
                   "per-axis scale over the run-time dim 'batch'")


def test_microsoft_quantized_ops_are_refused_with_a_hint(tmp_path):
    nodes = [helper.make_node("QLinearReduceMean", ["a", "s", "z", "s", "z"], ["y"],
                              name="n", domain="com.microsoft", axes=[-1], keepdims=1)]
    graph = helper.make_graph(nodes, "g", [_vi("a", TP.UINT8)], [_vi("y", TP.UINT8)], [
        numpy_helper.from_array(np.array(0.5, np.float32), "s"),
        numpy_helper.from_array(np.array(0, np.uint8), "z")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid("com.microsoft", 1)])
    (tmp_path / "m.onnx").write_bytes(model.SerializeToString())
    assert_refused(tmp_path / "m.onnx", UnsupportedModelError, "node 'n' (QLinearReduceMean)",
                   "custom domain 'com.microsoft' is not supported (onnxruntime's CPU "
                   "provider has no kernel for it either; an operator-oriented quantized op; "
                   "quantize in QDQ format instead")


def test_the_ops_said_to_have_no_cpu_kernel_are_onnxruntimes():
    """The refusal of QLinearReduceMean and QOrderedMatMul says onnxruntime's CPU provider
    cannot run them either: the list is onnxruntime's own (its registered kernels)."""
    from onnxruntime.capi import _pybind_state

    from plugin_host.onnx_import.quantize import NO_CPU_KERNEL, OPERATOR_ORIENTED

    cpu = {k.op_name for k in _pybind_state.get_all_opkernel_def()
           if k.domain == "com.microsoft" and k.provider == "CPUExecutionProvider"}
    assert "QAttention" in cpu and NO_CPU_KERNEL
    assert NO_CPU_KERNEL == OPERATOR_ORIENTED - cpu
