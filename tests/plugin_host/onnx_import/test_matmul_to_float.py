"""com.microsoft's DynamicQuantizeMatMul and MatMulIntegerToFloat, which onnxruntime's graph
optimizer writes for quantize_dynamic's MatMuls: torch models quantized with quantize_dynamic,
optimized and saved by an onnxruntime session, built and compared bit for bit with onnxruntime
on the numpy and onnxruntime backends; hand-made nodes over per-tensor and per-column
parameters, a bias, A of rank 1 to 3, run-time a_scale and zero point, sums beyond float32's
exact integers; and what is refused, naming the node.
"""

from __future__ import annotations

import numpy as np
import pytest

from abi.quantization import FLOAT32_EXACT
from plugin_host.errors import ModelFileError, UnsupportedModelError
from plugin_host.onnx_import import import_onnx, saturation
from plugins.onnxruntime_backend import OnnxruntimeBackend

from .conftest import assert_refused, export, onnx, onnxruntime_optimized, torch
from .test_qoperator import _exact, _model, _param, _vi
from .test_quantize_dynamic import _build, _feeds
from .test_quantized import _MLP, _check

quantization = pytest.importorskip("onnxruntime.quantization")
helper, TP = onnx.helper, onnx.TensorProto
_Q = quantization.QuantType
_MS = "com.microsoft"
RNG = np.random.default_rng(61)


class _Heads(torch.nn.Module):
    """Two projections of one input (as attention's queries and keys), multiplied: one
    DynamicQuantizeLinear then feeds two MatMulIntegers."""

    def __init__(self):
        super().__init__()
        self.q, self.k = torch.nn.Linear(12, 8), torch.nn.Linear(12, 8)

    def forward(self, x):
        return self.q(x) * self.k(x)


def _quantized(tmp_path, make, shape, per_channel: bool, weights, **options):
    """``make()`` exported, quantized by quantize_dynamic and saved optimized; with its ops."""
    torch.manual_seed(3)
    float_model = export(make(), [torch.randn(*shape)], tmp_path / "float.onnx", dynamo=False,
                         input_names=["x"], output_names=["y"])
    quantization.quantize_dynamic(str(float_model), str(tmp_path / "dynamic.onnx"),
                                  per_channel=per_channel, weight_type=weights, **options)
    path = onnxruntime_optimized(tmp_path / "dynamic.onnx", tmp_path / "optimized.onnx")
    return path, [(n.domain, n.op_type) for n in onnx.load(str(path)).graph.node]


_CONFIGS = [pytest.param(False, _Q.QUInt8, {}, id="per-tensor-u8"),
            pytest.param(True, _Q.QUInt8, {}, id="per-channel-u8"),
            pytest.param(True, _Q.QInt8, {"reduce_range": True}, id="per-channel-s7"),
            pytest.param(False, _Q.QInt8, {}, id="default")]


@pytest.mark.parametrize("per_channel, weights, options", _CONFIGS)
def test_an_optimized_quantize_dynamic_mlp_matches_onnxruntime_bit_for_bit(
        per_channel, weights, options, tmp_path, signer):
    path, ops = _quantized(tmp_path, _MLP, (4, 12), per_channel, weights, **options)
    assert ops.count((_MS, "DynamicQuantizeMatMul")) == 2, ops
    loaded = _build(path, tmp_path, signer, weights == _Q.QInt8 and not options)
    if loaded is None:  # onnxruntime saturates u8 x s8 sums here: refused saying so
        return
    _check(path, loaded, _feeds((4, 12), RNG), exact=True)
    _check(path, loaded, _feeds((4, 12), RNG), exact=True, backend=OnnxruntimeBackend())


@pytest.mark.parametrize("per_channel, weights, options", _CONFIGS[:3])
def test_one_quantized_input_feeding_two_matmuls_matches_onnxruntime(per_channel, weights,
                                                                    options, tmp_path, signer):
    path, ops = _quantized(tmp_path, _Heads, (2, 3, 12), per_channel, weights, **options)
    assert ops.count((_MS, "MatMulIntegerToFloat")) == 2, ops
    assert ops.count(("", "DynamicQuantizeLinear")) == 1, ops
    loaded = _build(path, tmp_path, signer, False)
    casts = [n for n in loaded.graph.nodes if n.op == "cast"]
    # the codes and the zero point cast to uint8 once for both, each sum to float32
    assert sorted(n.attrs["dtype"] for n in casts) == ["float32"] * 2 + ["uint8"] * 2
    _check(path, loaded, _feeds((2, 3, 12), RNG), exact=True)
    _check(path, loaded, _feeds((2, 3, 12), RNG), exact=True, backend=OnnxruntimeBackend())


def test_saturation_names_the_fused_ops(tmp_path):
    """Where onnxruntime saturates u8 x s8 sums, the refusal names a DynamicQuantizeMatMul of
    int8 weights as it names a MatMulInteger."""
    path, _ = _quantized(tmp_path, _MLP, (4, 12), False, _Q.QInt8)
    name, op = saturation.int8_weight_node(onnx.load(str(path)))
    assert op == "DynamicQuantizeMatMul"


# --- hand-made nodes ---------------------------------------------------------------------------



def _integer_to_float(tmp_path, a_shape, b, *, a_scale=np.float32(0.02), a_zp=np.uint8(131),
                      b_scale=np.float32(0.005), b_zp=None, bias=None, runtime=()):
    """One MatMulIntegerToFloat of a uint8 A (``a_shape``) by constant ``b``; the
    parameters named in ``runtime`` are graph inputs instead of initializers."""
    k, n = b.shape
    params = {"a_scale": a_scale, "b_scale": b_scale, "a_zp": a_zp, "b_zp": b_zp,
              "bias": bias}
    names = ["A", "B"] + [k if params[k] is not None else "" for k in params]
    while not names[-1]:
        names.pop()
    inputs = [_vi("A", "uint8", a_shape)]
    inits = [_param("B", b)]
    for key, value in params.items():
        if value is None:
            continue
        value = np.asarray(value)
        if key in runtime:
            inputs.append(_vi(key, str(value.dtype), value.shape))
        else:
            inits.append(_param(key, value))
    node = helper.make_node("MatMulIntegerToFloat", names, ["y"], name="n", domain=_MS)
    out = list(a_shape[:-1]) + [n]
    return _model(tmp_path / "m.onnx", [node], inputs, [_vi("y", "float32", out)], inits)


def _a(shape):
    return RNG.integers(0, 256, size=shape).astype(np.uint8)


@pytest.mark.parametrize("a_shape", [(12,), (3, 12), (2, 3, 12)])
@pytest.mark.parametrize("per_column", [False, True])
def test_matmul_integer_to_float_is_bit_identical(a_shape, per_column, tmp_path):
    b = RNG.integers(0, 256, size=(12, 7)).astype(np.uint8)
    b_scale = (10.0 ** RNG.uniform(-3, -1, 7)).astype(np.float32) if per_column \
        else np.float32(0.007)
    b_zp = RNG.integers(0, 256, 7).astype(np.uint8) if per_column else np.uint8(119)
    bias = RNG.standard_normal(7).astype(np.float32)
    for with_bias in (False, True):
        path = _integer_to_float(tmp_path, a_shape, b, b_scale=b_scale, b_zp=b_zp,
                                 bias=bias if with_bias else None)
        _exact(path, [{"A": _a(a_shape)} for _ in range(3)])


def test_a_run_time_a_scale_and_zero_point_are_bit_identical(tmp_path):
    b = RNG.integers(0, 256, size=(12, 5)).astype(np.uint8)
    path = _integer_to_float(tmp_path, (3, 12), b, a_scale=np.array([0.013], np.float32),
                             a_zp=np.array([77], np.uint8), b_zp=np.uint8(3),
                             runtime=("a_scale", "a_zp"))
    feeds = [{"A": _a((3, 12)), "a_scale": np.array([s], np.float32),
              "a_zp": np.array([z], np.uint8)} for s, z in ((0.013, 77), (3e-7, 0), (21.5, 255))]
    _exact(path, feeds)


def test_sums_beyond_float32s_exact_integers_are_bit_identical(tmp_path):
    """K = 600 at 255 x 255 per product reaches 3.9e7, beyond float32's exact integers: one
    integer_linear sums exactly, then the sum becomes float32 as onnxruntime converts it."""
    k = 600
    b = np.where(RNG.random((k, 3)) < 0.5, 0, 255).astype(np.uint8)
    assert 255 * 255 * k > FLOAT32_EXACT
    path = _integer_to_float(tmp_path, (2, k), b, a_zp=np.uint8(0), b_zp=np.uint8(0),
                             a_scale=np.float32(1.0), b_scale=np.float32(1.0))
    graph = import_onnx(path).graph
    assert [n.op for n in graph.nodes].count("integer_linear") == 1
    a = np.full((2, k), 255, np.uint8)
    a[1, ::7] = 1
    _exact(path, [{"A": a}], graph=graph)


def test_dynamic_quantize_matmul_is_bit_identical(tmp_path):
    b = RNG.integers(0, 256, size=(9, 4)).astype(np.uint8)
    node = helper.make_node("DynamicQuantizeMatMul", ["A", "B", "b_scale", "b_zp", "bias"],
                            ["y"], name="n", domain=_MS)
    inits = [_param("B", b), _param("b_scale", 10.0 ** RNG.uniform(-3, -1, 4), np.float32),
             _param("b_zp", RNG.integers(0, 256, 4).astype(np.uint8)),
             _param("bias", RNG.standard_normal(4), np.float32)]
    path = _model(tmp_path / "m.onnx", [node], [_vi("A", "float32", (5, 9))],
                  [_vi("y", "float32", (5, 4))], inits)
    feeds = [{"A": (RNG.standard_normal((5, 9)) * s).astype(np.float32)} for s in (1, 40)]
    feeds += [{"A": np.zeros((5, 9), np.float32)}, {"A": -np.abs(feeds[0]["A"])}]
    _exact(path, feeds)


# --- refused -----------------------------------------------------------------------------------


_WHERE = "node 'n' (MatMulIntegerToFloat)"
_B = np.ones((12, 4), np.uint8)


def test_an_int8_a_is_refused(tmp_path):
    path = _integer_to_float(tmp_path, (2, 12), _B, a_zp=None)
    m = onnx.load(str(path))
    m.graph.input[0].type.tensor_type.elem_type = TP.INT8
    onnx.save(m, str(path))
    assert_refused(path, UnsupportedModelError, _WHERE,
                   "A of dtype int8: onnxruntime's CPU provider runs MatMulIntegerToFloat on a "
                   "uint8 A only")


@pytest.mark.parametrize("which, value, error, message", [
    ("a_scale", np.ones(2, np.float32), UnsupportedModelError,
     "a_scale of shape [2]: only one value is supported"),
    ("b_scale", np.ones((2, 4), np.float32), UnsupportedModelError,
     "b_scale of shape [2, 4]: only one value or one per column of B (4) is supported"),
    ("b_scale", np.ones(4, np.float64), ModelFileError,
     "b_scale of dtype float64: MatMulIntegerToFloat takes float32"),
    ("bias", np.ones(1, np.float32), ModelFileError,
     "bias of shape [1]: must be one value per column of B ([4])"),
    ("b_zp", np.ones(3, np.uint8), ModelFileError,
     "B's zero point of shape [3]: must be one value or one per entry of axis 1"),
])
def test_parameters_onnxruntime_misreads_are_refused(which, value, error, message, tmp_path):
    path = _integer_to_float(tmp_path, (2, 12), _B, **{which: value})
    assert_refused(path, error, _WHERE, message)


def test_a_run_time_b_scale_is_refused(tmp_path):
    path = _integer_to_float(tmp_path, (2, 12), _B, runtime=("b_scale",))
    assert_refused(path, UnsupportedModelError, _WHERE,
                   "b_scale 'b_scale' must be a constant (known at import)")


def test_a_run_time_b_is_refused(tmp_path):
    path = _integer_to_float(tmp_path, (2, 12), _B)
    m = onnx.load(str(path))
    b = m.graph.initializer[0]
    m.graph.input.append(helper.make_tensor_value_info("B", TP.UINT8, list(b.dims)))
    del m.graph.initializer[0]
    onnx.save(m, str(path))
    assert_refused(path, UnsupportedModelError, _WHERE,
                   "B 'B' must be a constant (the quantized weights)")

