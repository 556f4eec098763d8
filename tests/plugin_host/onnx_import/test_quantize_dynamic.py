"""Dynamically quantized models (onnxruntime's ``quantize_dynamic``): torch models quantized
with the default options, ``per_channel=True`` and int8 or uint8 weights, built and compared
bit for bit with onnxruntime on the numpy and onnxruntime backends; hand-made
DynamicQuantizeLinear nodes at the edges of its parameters (all zeros, all negative, the
float32 extremes, infinities, ties at .5), a run-time batch, MatMulInteger and ConvInteger on
plain uint8 inputs, per-column zero points, sums beyond float32's exact integers (split into
exact runs), constant inputs folded; and what is refused, naming the node. Where onnxruntime's
u8 x s8 kernel saturates (x86-64 without VNNI) the reference is not exact for int8 weights:
such a build is refused saying so, and uint8 or reduce_range weights are exact everywhere.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from plugin_host.errors import ModelFileError, ModelImportError, UnsupportedModelError
from plugin_host.onnx_import import import_onnx, saturation
from plugins.onnxruntime_backend import OnnxruntimeBackend

from tests.onnxruntime_backend.test_ops import onnx_model

from .conftest import assert_refused, export, import_and_load, onnx, onnxruntime_outputs, torch
from .test_quantized import _MLP, _check, _ConvNet, _save, _vi

quantization = pytest.importorskip("onnxruntime.quantization")
helper, TP, numpy_helper = onnx.helper, onnx.TensorProto, onnx.numpy_helper
RNG = np.random.default_rng(43)
BIG = np.finfo(np.float32).max
_Q = quantization.QuantType


class _Encoder(torch.nn.Module):
    """A transformer encoder layer (attention, layer norms, feed-forward)."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)

    def forward(self, x):
        return self.layer(x)


_MODELS = {"mlp": (_MLP, (4, 12), "MatMulInteger"),
           "convnet": (_ConvNet, (2, 3, 8, 8), "ConvInteger"),
           "encoder": (_Encoder, (2, 5, 16), "MatMulInteger")}
_CONFIGS = [pytest.param(False, _Q.QInt8, id="default"),
            pytest.param(False, _Q.QUInt8, id="per-tensor-u8"),
            pytest.param(True, _Q.QInt8, id="per-channel-s8"),
            pytest.param(True, _Q.QUInt8, id="per-channel-u8")]


def _quantized(tmp_path, model: str, dynamo: bool, per_channel: bool, weights):
    make, shape, _ = _MODELS[model]
    torch.manual_seed(3)
    float_model = export(make(), [torch.randn(*shape)], tmp_path / "float.onnx",
                         dynamo=dynamo, input_names=["x"], output_names=["y"])
    path = tmp_path / "dynamic.onnx"
    quantization.quantize_dynamic(str(float_model), str(path), per_channel=per_channel,
                                  weight_type=weights)
    return path, shape


def _onnxruntime_saturates(tmp_path) -> bool:
    """Whether onnxruntime here adds u8 x s8 products in int16 pairs that saturate (x86-64
    without VNNI): 255 * -128 twice is then -32768, not -65280."""
    node = helper.make_node("MatMulInteger", ["a", "w"], ["y"], name="n")
    model = _save(tmp_path / "probe.onnx", [node], [_vi("a", TP.UINT8, (1, 2))],
                  [_vi("y", TP.INT32, (1, 1))],
                  [numpy_helper.from_array(np.full((2, 1), -128, np.int8), "w")])
    y = onnxruntime_outputs(model, {"a": np.full((1, 2), 255, np.uint8)}, optimized=False)["y"]
    return int(y.reshape(())) != -65280


def _build(path, tmp_path, signer, int8_weights: bool):
    """import_and_load; on a CPU where onnxruntime saturates u8 x s8 sums (so the reference
    is not the exact model) a model of int8 weights is refused saying why and what builds,
    nothing written (None)."""
    if int8_weights and _onnxruntime_saturates(tmp_path):
        with pytest.raises(ModelImportError, match=r"differs from onnxruntime .*: onnxruntime's "
                           r"u8 x s8 integer kernel on this CPU \(x86-64 without VNNI\) "
                           r"saturates .*weight_type=QuantType.QUInt8 or reduce_range=True$"):
            import_and_load(path, tmp_path / "q.pha", signer)
        assert not (tmp_path / "q.pha").exists()
        return None
    return import_and_load(path, tmp_path / "q.pha", signer)[1]


def _feeds(shape, rng=RNG) -> list[dict]:
    feeds = [{"x": (rng.standard_normal(shape) * s).astype(np.float32)} for s in (1, 3, 30)]
    shifted = (rng.standard_normal(shape) - 2).astype(np.float32)  # mostly negative
    extreme = rng.standard_normal(shape).astype(np.float32)
    extreme.reshape(-1)[:4] = [1e30, -1e30, -0.0, 1e-45]
    return feeds + [{"x": shifted}, {"x": extreme}]


@pytest.mark.parametrize("per_channel, weights", _CONFIGS)
@pytest.mark.parametrize("model, dynamo", [("mlp", False), ("mlp", True), ("convnet", False),
                                           ("convnet", True)])
def test_quantize_dynamic_models_match_onnxruntime_bit_for_bit(model, dynamo, per_channel,
                                                               weights, tmp_path, signer):
    path, shape = _quantized(tmp_path, model, dynamo, per_channel, weights)
    ops = {n.op_type for n in onnx.load(str(path)).graph.node}
    assert {"DynamicQuantizeLinear", _MODELS[model][2], "Cast"} <= ops, ops
    loaded = _build(path, tmp_path, signer, weights == _Q.QInt8)  # the golden vectors agree
    if loaded is None:
        return
    graph_ops = {n.op for n in loaded.graph.nodes}
    if model == "mlp":  # the weights stay 8-bit, summed by integer_linear
        products = [n for n in loaded.graph.nodes if n.op == "integer_linear"]
        assert len(products) == 2 and "linear" not in graph_ops, graph_ops
        dtype = np.int8 if weights == _Q.QInt8 else np.uint8
        assert all(loaded.graph.tensors[n.inputs[1]].dtype == dtype for n in products)
        # each product one kernel on the onnxruntime backend (its fusion.py)
        backend_ops = [n.op_type for n in onnx_model(loaded.graph).graph.node]
        assert backend_ops.count("DynamicQuantizeMatMul") == 2, backend_ops
        assert not {"MatMulInteger", "DynamicQuantizeLinear"} & set(backend_ops), backend_ops
    else:  # ConvInteger: a float32 conv of the integers (its Linear: integer_linear)
        assert {"dynamic_quantize", "conv", "integer_linear"} <= graph_ops, graph_ops
        # on the onnxruntime backend the codes less their zero point one DequantizeLinear,
        # the Linear one DynamicQuantizeMatMul (its fusion.py)
        backend_ops = {n.op_type for n in onnx_model(loaded.graph).graph.node}
        assert {"DequantizeLinear", "DynamicQuantizeMatMul"} <= backend_ops, backend_ops
    _check(path, loaded, _feeds(shape), exact=True)
    _check(path, loaded, _feeds(shape), exact=True, backend=OnnxruntimeBackend())


@pytest.mark.parametrize("per_channel, weights", _CONFIGS[::3])
def test_a_quantized_transformer_encoder_layer_matches_onnxruntime(per_channel, weights,
                                                                   tmp_path, signer):
    """torch's legacy exporter does not export the layer here; the dynamo one does. Softmax
    and the layer norms round differently from onnxruntime's in the last bit, so outputs
    agree within the artifact's tolerance rather than bit for bit (and not at 1e30, where the
    layer norm's float32 variance overflows). A last bit can also move a value across a
    rounding boundary of the next DynamicQuantizeLinear, a whole quantization step, so the
    inputs come from a generator of the test's own, the same whatever ran before."""
    path, shape = _quantized(tmp_path, "encoder", True, per_channel, weights)
    assert "MatMulInteger" in {n.op_type for n in onnx.load(str(path)).graph.node}
    loaded = _build(path, tmp_path, signer, weights == _Q.QInt8)
    if loaded is None:
        return
    backend_ops = {n.op_type for n in onnx_model(loaded.graph).graph.node}
    assert "DynamicQuantizeMatMul" in backend_ops and "MatMulInteger" not in backend_ops
    rng = np.random.default_rng(7)
    _check(path, loaded, _feeds(shape, rng)[:4])
    _check(path, loaded, _feeds(shape, rng)[:3], backend=OnnxruntimeBackend())


@pytest.mark.parametrize("model", ["mlp", "convnet"])
def test_a_runtime_batch_passes_through_the_dynamic_quantization(model, tmp_path, signer):
    """min and max over a tensor of a run-time batch: the artifact takes any batch."""
    make, shape, _ = _MODELS[model]
    torch.manual_seed(3)
    float_model = tmp_path / "float.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(make().eval(), (torch.randn(*shape),), str(float_model), dynamo=False,
                          input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    path = tmp_path / "dynamic.onnx"  # uint8 weights: exact on every CPU's onnxruntime
    quantization.quantize_dynamic(str(float_model), str(path), weight_type=_Q.QUInt8)
    _, loaded = import_and_load(path, tmp_path / "q.pha", signer)
    assert loaded.graph.inputs[0].shape[0] == "batch"
    _check(path, loaded, [{"x": RNG.standard_normal((n,) + shape[1:]).astype(np.float32)}
                          for n in (1, 7)], exact=True)


# --- hand-made DynamicQuantizeLinear -------------------------------------------------------


def _dynamic(tmp_path, shape=(3, 5), opset=21):
    """x -> DynamicQuantizeLinear (node "dq"), its three outputs graph outputs."""
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"], name="dq")
    return _save(tmp_path / "dq.onnx", [node], [_vi("x", shape=shape)],
                 [_vi("q", TP.UINT8, shape), _vi("s", shape=()), _vi("z", TP.UINT8, ())],
                 opset=opset)


def _edge_inputs(shape) -> dict[str, np.ndarray]:
    n = int(np.prod(shape))

    def fill(values):
        return np.resize(np.asarray(values, np.float32), n).reshape(shape)

    # min 0, max 127.5: scale 0.5, so x / scale lands on halves (ties to even)
    ties = fill([0.0, 127.5, 0.25, 0.75, 1.25, 1.75, 2.25, 63.25, 126.75])
    # min -0.75, max 126.75: scale 0.5, zero point 1.5 before rounding (to 2)
    zp_tie = fill([-0.75, 126.75, -0.25, 0.25, 3.0])
    return {
        "zeros": fill([0.0]), "negative zeros": fill([-0.0, 0.0]),
        "all negative": fill(-RNG.random(n) * 5 - 0.1), "all positive": fill(RNG.random(n) + 1),
        "one value": fill([2.5]), "ties": ties, "zero point tie": zp_tie,
        "extremes": fill([BIG, -BIG, 1.0, -1.0, 0.0]), "big": fill([BIG, 1.0, 0.0]),
        "-big": fill([-BIG, -1.0]), "inf": fill([np.inf, 1.0, -2.0]),
        "-inf": fill([-np.inf, 1.0, 2.0]), "both infs": fill([np.inf, -np.inf, 0.0]),
        "tiny": fill([1e-45, 0.0, 3e-45]), "tiny negative": fill([-1e-45, -2e-45]),
        "random": fill(RNG.standard_normal(n) * 7),
        "huge spread": fill([1e38, -1e38, 3e37])}


@pytest.mark.filterwarnings("error")  # a nan cast to uint8 warns: none may reach the cast
@pytest.mark.parametrize("backend", [None, OnnxruntimeBackend], ids=["numpy", "onnxruntime"])
def test_dynamic_quantize_linear_at_its_edges_is_bit_identical(backend, tmp_path, signer):
    model = _dynamic(tmp_path)
    _, loaded = import_and_load(model, tmp_path / "dq.pha", signer)
    # one op, then casts of q and z, which are graph outputs
    assert [n.op for n in loaded.graph.nodes] == ["dynamic_quantize", "cast", "cast"]
    inputs = _edge_inputs((3, 5))
    _check(model, loaded, [{"x": x} for x in inputs.values()], exact=True,
           backend=backend and backend())
    ref = {k: onnxruntime_outputs(model, {"x": x}, optimized=False) for k, x in inputs.items()}
    assert ref["zeros"]["s"] == 1 and ref["zeros"]["z"] == 0  # max == min: scale 1
    assert ref["ties"]["s"] == 0.5 and list(ref["ties"]["q"].reshape(-1)[2:7]) == [0, 2, 2, 4, 4]
    assert ref["zero point tie"]["z"] == 2
    assert ref["-inf"]["z"] == 255  # inf / inf: a nan zero point clamps to 255


@pytest.mark.filterwarnings("error")
def test_a_zero_dim_dynamic_quantize_linear_is_bit_identical(tmp_path, signer):
    model = _dynamic(tmp_path, shape=())
    _, loaded = import_and_load(model, tmp_path / "dq.pha", signer)
    _check(model, loaded, [{"x": np.array(v, np.float32)} for v in
                           (0.0, -3.0, 7.25, BIG, -np.inf, 1e-45)], exact=True)


# --- hand-made MatMulInteger / ConvInteger -------------------------------------------------


def _dq_matmul(tmp_path, b: np.ndarray, b_zp: np.ndarray | None, *, rows: int = 3):
    """x -> DynamicQuantizeLinear -> MatMulInteger with constant B (node "mm") -> Cast ->
    Mul by the scales (quantize_dynamic's form)."""
    k, n = b.shape
    ins = ["xq", "b", "xz"] + (["bz"] if b_zp is not None else [])
    inits = [numpy_helper.from_array(b, "b"),
             numpy_helper.from_array(np.array(0.02, np.float32), "bs")]
    if b_zp is not None:
        inits.append(numpy_helper.from_array(b_zp, "bz"))
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"], name="dq"),
             helper.make_node("MatMulInteger", ins, ["acc"], name="mm"),
             helper.make_node("Cast", ["acc"], ["accf"], name="cast", to=TP.FLOAT),
             helper.make_node("Mul", ["xs", "bs"], ["s"], name="scales"),
             helper.make_node("Mul", ["accf", "s"], ["y"], name="scale")]
    return _save(tmp_path / "mm.onnx", nodes, [_vi("x", shape=(rows, k))],
                 [_vi("y", shape=(rows, n))], inits)


@pytest.mark.parametrize("backend", [None, OnnxruntimeBackend], ids=["numpy", "onnxruntime"])
def test_sums_beyond_float32s_exact_integers_match_to_the_bit(backend, tmp_path, signer):
    """K = 600 weights of 255 - 0: sums reach 255 * 255 * 600 = 39,015,000 > 2**24, where a
    float32 sum would round; the import writes one integer_linear of the uint8 codes, whose
    sums are exact on both backends, and matches onnxruntime to the bit."""
    rng = np.random.default_rng(1)  # its own: the assertions below need these draws
    k = 600
    b = np.full((k, 4), 255, np.uint8)
    b[:, 1] = rng.integers(0, 256, k)
    b[::7, 2] = 0
    model = _dq_matmul(tmp_path, b, np.array(0, np.uint8))
    _, loaded = import_and_load(model, tmp_path / "mm.pha", signer)
    [node] = [n for n in loaded.graph.nodes if n.op == "integer_linear"]
    np.testing.assert_array_equal(loaded.graph.tensors[node.inputs[1]], b.T)
    assert "linear" not in {n.op for n in loaded.graph.nodes}
    x = (rng.random((3, k)) * 10).astype(np.float32)
    x[:, ::3] = 10.0  # quantized to 255
    x[0, 0] = 0.0  # the range's low end: zero point 0
    acc = onnx_run_acc(model, x)
    assert np.abs(acc).max() > 2 ** 24 and np.any(acc != acc.astype(np.float32))
    _check(model, loaded, [{"x": x}, {"x": -x}, {"x": x * 1e-3}], exact=True,
           backend=backend and backend())


def onnx_run_acc(model, x) -> np.ndarray:
    """The int32 accumulator of ``model``'s MatMulInteger, as onnxruntime computes it."""
    m = onnx.load(str(model))
    m.graph.output.append(helper.make_tensor_value_info("acc", TP.INT32, None))
    path = model.with_name("acc.onnx")
    onnx.save(m, path)
    return onnxruntime_outputs(path, {"x": x}, optimized=False)["acc"]


def test_int8_weights_with_a_zero_point_per_column(tmp_path, signer):
    """K = 256 int8 weights, a column at -128 (sums up to 255 * 128 * 256 = 2**23 + ...), a
    zero point per column: one integer_linear of the int8 codes and their zero points."""
    k = 256
    b = np.full((k, 3), -128, np.int8)
    b[:, 1] = RNG.integers(-128, 128, k)
    b_zp = np.array([0, 5, -3], np.int8)  # per column
    model = _dq_matmul(tmp_path, b, b_zp)
    loaded = _build(model, tmp_path, signer, True)
    # None: this CPU's onnxruntime saturates int8 products, so only the import is checked
    graph = import_onnx(model).graph if loaded is None else loaded.graph
    [node] = [n for n in graph.nodes if n.op == "integer_linear"]
    np.testing.assert_array_equal(graph.tensors[node.inputs[1]], b.T)
    np.testing.assert_array_equal(graph.tensors[node.inputs[3]], b_zp)
    if loaded is None:
        return
    x = (RNG.random((3, k)) * 4 - 1).astype(np.float32)
    _check(model, loaded, [{"x": x}, {"x": -x}, {"x": np.abs(x)}], exact=True)


def _integer_model(tmp_path, op: str, a_shape, w: np.ndarray, a_zp, w_zp, y_shape, **attrs):
    """A plain uint8 input "a" -> ``op`` (node "n") with constant weights and zero points; the
    int32 result is the graph output "y" of ``y_shape``."""
    ins = ["a", "w", "az" if a_zp is not None else ""] + (["wz"] if w_zp is not None else [])
    inits = [numpy_helper.from_array(w, "w")]
    if a_zp is not None:
        inits.append(numpy_helper.from_array(a_zp, "az"))
    if w_zp is not None:
        inits.append(numpy_helper.from_array(w_zp, "wz"))
    node = helper.make_node(op, ins, ["y"], name="n", **attrs)
    return _save(tmp_path / "int.onnx", [node], [_vi("a", TP.UINT8, a_shape)],
                 [_vi("y", TP.INT32, y_shape)], inits)


def test_reduce_range_weights_are_exact_on_every_cpu(tmp_path, signer):
    """``reduce_range=True`` (7-bit int8 weights, whose pairs of products fit in int16), the
    refusal's other way: bit for bit with onnxruntime wherever it runs."""
    torch.manual_seed(3)
    float_model = export(_MLP(), [torch.randn(4, 12)], tmp_path / "float.onnx", dynamo=False,
                         input_names=["x"], output_names=["y"])
    path = tmp_path / "dynamic.onnx"
    quantization.quantize_dynamic(str(float_model), str(path), reduce_range=True)
    _, loaded = import_and_load(path, tmp_path / "q.pha", signer)
    _check(path, loaded, _feeds((4, 12)), exact=True)


@pytest.mark.parametrize("saturates", [True, False])
def test_a_mismatch_onnxruntimes_saturation_explains_is_refused_saying_so(saturates, tmp_path,
                                                                         monkeypatch):
    """Whatever this CPU does: where the reference saturates (as on x86-64 without VNNI), a
    build of int8 weights that disagrees with it says why and what builds; otherwise, or
    for uint8 weights, the comparison's own message stands."""
    monkeypatch.setattr(saturation, "_SATURATES", saturates)
    mismatch = ("golden case 0: output 'y' of the imported graph differs from onnxruntime in 3 "
                "of 20 element(s) (max |diff| 0.2; rtol 0.0001, atol 1e-05); widen --rtol/--atol "
                "if that is expected, else this is an import bug")
    int8, _ = _quantized(tmp_path, "mlp", False, False, _Q.QInt8)
    said = saturation.explain(onnx.load(str(int8)), mismatch)
    if not saturates:
        assert said is None
        return
    assert said == (
        "golden case 0: output 'y' of the imported graph differs from onnxruntime in 3 of 20 "
        "element(s) (max |diff| 0.2; rtol 0.0001, atol 1e-05): onnxruntime's u8 x s8 integer "
        "kernel on this CPU (x86-64 without VNNI) saturates each pair of products at int16, so "
        "its outputs are not the exact int32 sums of node '/fc1/Gemm_MatMul_quant' "
        "(MatMulInteger) and the rest of that kind, which the import computes; build on a CPU "
        "with AVX-VNNI or AVX512-VNNI, or quantize with weight_type=QuantType.QUInt8 or "
        "reduce_range=True")
    (tmp_path / "u8").mkdir()
    uint8, _ = _quantized(tmp_path / "u8", "mlp", False, False, _Q.QUInt8)
    assert saturation.explain(onnx.load(str(uint8)), mismatch) is None


def test_a_matmul_integer_on_plain_uint8_gives_its_int32(tmp_path, signer):
    w = RNG.integers(0, 256, (6, 5)).astype(np.uint8)
    model = _integer_model(tmp_path, "MatMulInteger", (2, 3, 6), w, np.array(7, np.uint8),
                           RNG.integers(0, 256, 5).astype(np.uint8), (2, 3, 5))
    _, loaded = import_and_load(model, tmp_path / "int.pha", signer)
    # the uint8 input and the int32 sum as they are
    assert [n.op for n in loaded.graph.nodes] == ["integer_linear"]
    a = RNG.integers(0, 256, (2, 3, 6)).astype(np.uint8)
    a[0, 0] = [0, 255, 7, 7, 0, 255]
    _check(model, loaded, [{"a": a}], exact=True)


@pytest.mark.parametrize("backend", [None, OnnxruntimeBackend], ids=["numpy", "onnxruntime"])
def test_an_int32_result_float32_cannot_hold_is_exact(backend, tmp_path, signer):
    """Sums of about 600 * 228 * 228 > 2**24 as the graph output: odd ones have no float32, so
    only an integer accumulation gives them."""
    rng = np.random.default_rng(2)  # its own: the assertions below need these draws
    w = rng.integers(200, 256, (600, 3)).astype(np.uint8)
    model = _integer_model(tmp_path, "MatMulInteger", (2, 600), w, np.array(0, np.uint8), None,
                           (2, 3))
    _, loaded = import_and_load(model, tmp_path / "int.pha", signer)
    a = rng.integers(200, 256, (2, 600)).astype(np.uint8)
    want = onnxruntime_outputs(model, {"a": a}, optimized=False)["y"]
    assert want.min() > 2 ** 24 and np.any(want % 2)
    _check(model, loaded, [{"a": a}], exact=True, backend=backend and backend())


@pytest.mark.parametrize("backend", [None, OnnxruntimeBackend], ids=["numpy", "onnxruntime"])
def test_matmul_integer_sums_past_int32_wrap_as_onnxruntimes(backend, tmp_path, signer):
    """34,000 products of 255 * 255 add up past 2**31: onnxruntime's int32 accumulator wraps,
    and so does integer_linear on both backends, to the bit."""
    k = 34_000
    w = np.full((k, 3), 255, np.uint8)
    w[::5, 1] = 0
    model = _integer_model(tmp_path, "MatMulInteger", (2, k), w, np.array(0, np.uint8),
                           np.array([0, 0, 255], np.uint8), (2, 3))
    _, loaded = import_and_load(model, tmp_path / "int.pha", signer)
    a = np.full((2, k), 255, np.uint8)
    a[1, ::2] = 3
    want = onnxruntime_outputs(model, {"a": a}, optimized=False)["y"]
    assert want[0, 0] == np.int64(255 * 255 * k).astype(np.int32) < 0  # wrapped
    _check(model, loaded, [{"a": a}], exact=True, backend=backend and backend())


@pytest.mark.parametrize("group", [1, 2])
def test_a_conv_integer_on_plain_uint8_gives_its_int32(group, tmp_path, signer):
    """Padded, strided, grouped, with zero points: the padding is the input's zero point, which
    adds nothing (as ``conv``'s zeros). onnxruntime takes only a per-tensor weight zero point
    (it refuses a per-channel one at run time, so such a model does not build)."""
    w = RNG.integers(-128, 128, (4, 4 // group, 3, 3)).astype(np.int8)
    model = _integer_model(tmp_path, "ConvInteger", (1, 4, 6, 5), w, np.array(131, np.uint8),
                           np.array(-3, np.int8), (1, 4, 3, 6),
                           pads=[1, 2, 0, 1],
                           strides=[2, 1], group=group)
    _, loaded = import_and_load(model, tmp_path / "int.pha", signer)
    assert "conv" in {n.op for n in loaded.graph.nodes}
    a = RNG.integers(0, 256, (1, 4, 6, 5)).astype(np.uint8)
    _check(model, loaded, [{"a": a}, {"a": np.full_like(a, 255)}, {"a": np.zeros_like(a)}],
           exact=True)


@pytest.mark.parametrize("backend", [None, OnnxruntimeBackend], ids=["numpy", "onnxruntime"])
def test_a_conv_integer_beyond_float32s_exact_sums_runs_over_channel_runs(backend, tmp_path,
                                                                          signer):
    """64 input channels of 3 x 3 weights near -128: sums up to 255 * 128 * 576 > 2**24; the
    import splits the channels into runs whose float32 sums are exact and adds them in
    int32."""
    rng = np.random.default_rng(3)  # its own: the assertions below need these draws
    w = rng.integers(-128, -120, (2, 64, 3, 3)).astype(np.int8)
    model = _integer_model(tmp_path, "ConvInteger", (1, 64, 5, 5), w, np.array(0, np.uint8),
                           np.array(0, np.int8), (1, 2, 5, 5), pads=[1, 1, 1, 1])
    _, loaded = import_and_load(model, tmp_path / "int.pha", signer)
    ops = [n.op for n in loaded.graph.nodes]
    assert ops.count("conv") == ops.count("slice") == 2 and "add" in ops
    a = rng.integers(250, 256, (1, 64, 5, 5)).astype(np.uint8)
    want = onnxruntime_outputs(model, {"a": a}, optimized=False)["y"]
    assert np.abs(want).max() > 2 ** 24 and np.any(want % 2)
    _check(model, loaded, [{"a": a}, {"a": np.full_like(a, 255)}], exact=True,
           backend=backend and backend())


def test_constant_integer_ops_fold_like_onnxruntime(tmp_path, signer):
    """DynamicQuantizeLinear and MatMulInteger of constants fold at import."""
    c = np.concatenate([RNG.standard_normal(10), [-4.0, 0.0]]).astype(np.float32).reshape(3, 4)
    inits = [numpy_helper.from_array(c, "c"),
             numpy_helper.from_array(RNG.integers(-128, 128, (4, 2)).astype(np.int8), "b"),
             numpy_helper.from_array(np.array([3, -9], np.int8), "bz")]
    nodes = [helper.make_node("DynamicQuantizeLinear", ["c"], ["cq", "cs", "cz"], name="dq"),
             helper.make_node("MatMulInteger", ["cq", "b", "cz", "bz"], ["acc"], name="mm"),
             helper.make_node("Cast", ["acc"], ["accf"], name="cast", to=TP.FLOAT),
             helper.make_node("Mul", ["accf", "cs"], ["w"], name="scale"),
             helper.make_node("Add", ["x", "w"], ["y"], name="add")]
    model = _save(tmp_path / "m.onnx", nodes, [_vi("x", shape=(3, 2))], [_vi("y", shape=(3, 2))],
                  inits)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert [n.op for n in loaded.graph.nodes if n.op != "identity"] == ["add"]
    _check(model, loaded, [{"x": RNG.standard_normal((3, 2)).astype(np.float32)}], exact=True)


# --- refused -------------------------------------------------------------------------------


def test_a_conv_integer_sum_one_channel_cannot_hold_is_refused(tmp_path):
    w = np.full((1, 1, 259), 255, np.uint8)  # 255 * 255 * 259 = 16,841,475 > 2**24
    model = _integer_model(tmp_path, "ConvInteger", (1, 1, 260), w, None, None, (1, 1, 2))
    assert_refused(model, UnsupportedModelError, "node 'n' (ConvInteger)",
                   "one input channel's sums reach 16841475 in magnitude, beyond the 2**24")


def test_a_grouped_conv_integer_beyond_float32s_exact_sums_is_refused(tmp_path):
    w = np.full((2, 64, 3, 3), 127, np.int8)  # 255 * 127 * 576 = 18,653,760 > 2**24
    model = _integer_model(tmp_path, "ConvInteger", (1, 128, 5, 5), w, None, None,
                           (1, 2, 3, 3), group=2)
    assert_refused(model, UnsupportedModelError, "node 'n' (ConvInteger)",
                   "group=2 with sums beyond the 2**24 float32 holds exactly")


def test_a_runtime_weight_is_refused(tmp_path):
    nodes = [helper.make_node("MatMulInteger", ["a", "b"], ["y"], name="n")]
    model = _save(tmp_path / "m.onnx", nodes, [_vi("a", TP.UINT8, (2, 3)),
                                              _vi("b", TP.UINT8, (3, 4))],
                  [_vi("y", TP.INT32, (2, 4))])
    assert_refused(model, UnsupportedModelError, "node 'n' (MatMulInteger)",
                   "B 'b' must be a constant (the quantized weights)")


def test_a_per_row_input_zero_point_is_refused(tmp_path):
    model = _integer_model(tmp_path, "MatMulInteger", (2, 3), np.ones((3, 4), np.uint8),
                           np.array([1, 2], np.uint8), None, (2, 4))
    assert_refused(model, UnsupportedModelError, "node 'n' (MatMulInteger)",
                   "A's zero point of shape [2]: only one value (per tensor)")


@pytest.mark.parametrize("which", ["a", "w"])
def test_a_zero_point_of_another_dtype_is_refused(which, tmp_path):
    zp = {"a": (np.array(1, np.int8), None), "w": (None, np.array(1, np.int8))}[which]
    model = _integer_model(tmp_path, "MatMulInteger", (2, 3), np.ones((3, 4), np.uint8), *zp,
                           (2, 4))
    what = "A" if which == "a" else "B"
    assert_refused(model, ModelFileError, "node 'n' (MatMulInteger)",
                   f"{what}'s zero point of dtype int8 differs from the values' uint8")


def test_a_per_column_zero_point_of_the_wrong_size_is_refused(tmp_path):
    model = _integer_model(tmp_path, "MatMulInteger", (2, 3), np.ones((3, 4), np.uint8), None,
                           np.array([1, 2, 3], np.uint8), (2, 4))
    assert_refused(model, ModelFileError, "node 'n' (MatMulInteger)",
                   "B's zero point of shape [3]: must be one value or one per entry of axis 1")


def test_operator_oriented_ops_stay_refused_in_a_dynamic_model(tmp_path):
    """import_onnx of a quantize_dynamic model succeeds; QLinearMatMul beside it, of its
    run-time operand by itself, is refused: its scale is computed when the call runs."""
    path, _ = _quantized(tmp_path, "mlp", False, False, _Q.QInt8)
    assert import_onnx(path).graph.nodes
    m = onnx.load(str(path))
    m.graph.node.append(helper.make_node("QLinearMatMul", ["x_quantized", "x_scale",
                                                           "x_zero_point"] * 2 + [
        "x_scale", "x_zero_point"], ["extra"], name="qmm"))
    onnx.save(m, tmp_path / "extra.onnx")
    with pytest.raises(UnsupportedModelError, match="node 'qmm' \\(QLinearMatMul\\): x_scale "
                                                    "'x_scale' must be a constant"):
        import_onnx(tmp_path / "extra.onnx")
