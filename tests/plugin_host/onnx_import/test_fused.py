"""com.microsoft's fused float ops that onnxruntime's optimizer writes (FusedConv, FusedGemm,
FusedMatMul, SkipLayerNormalization, the Gelus) and its own default-domain norms
(LayerNormalization before opset 17, SimplifiedLayerNormalization): torch models saved
optimized by an onnxruntime session, built and compared with onnxruntime on both backends;
hand-made nodes over every activation, residual input and transposition flag; and what is
refused, naming the node."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import ModelFileError, UnsupportedModelError

from .conftest import (assert_refused, check_on_both_backends, export, import_and_load, onnx,
                       onnxruntime_optimized, torch)

helper, TP, numpy_helper = onnx.helper, onnx.TensorProto, onnx.numpy_helper
_MS = "com.microsoft"


def _ops(path) -> set:
    return {(n.domain, n.op_type) for n in onnx.load(str(path)).graph.node}


class _Cnn(torch.nn.Module):
    """Conv + BatchNorm + ReLU, Conv + ReLU6, a mean, Linear + ReLU, Linear + sigmoid."""

    def __init__(self):
        super().__init__()
        self.c1, self.bn = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8)
        self.c2 = torch.nn.Conv2d(8, 8, 3, stride=2)
        self.l1, self.l2 = torch.nn.Linear(8, 6), torch.nn.Linear(6, 4)

    def forward(self, x):
        y = torch.relu(self.bn(self.c1(x)))
        y = torch.nn.functional.relu6(self.c2(y)).mean((2, 3))
        return torch.sigmoid(self.l2(torch.relu(self.l1(y))))


class _Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True,
                                                      activation="gelu")

    def forward(self, x):
        return self.layer(x)


def _feeds(shape, rng) -> list[dict]:
    return [{"x": (rng.standard_normal(shape) * s).astype(np.float32)} for s in (1, 4)]


def test_an_optimized_cnn_builds_and_matches_onnxruntime(tmp_path, signer):
    torch.manual_seed(11)
    shape = (2, 3, 9, 9)
    model = _Cnn().eval()
    with torch.no_grad():  # a batch norm of its own statistics, not the identity
        model.bn.running_mean.uniform_(-1, 1)
        model.bn.running_var.uniform_(0.5, 2)
    float_model = export(model, [torch.randn(*shape)], tmp_path / "float.onnx", dynamo=False,
                         input_names=["x"], output_names=["y"])
    path = onnxruntime_optimized(float_model, tmp_path / "optimized.onnx")
    assert {(_MS, "FusedConv"), (_MS, "FusedGemm")} <= _ops(path)
    loaded = import_and_load(path, tmp_path / "m.pha", signer)[1]
    assert {"conv", "relu", "clip", "linear", "sigmoid"} <= {n.op for n in loaded.graph.nodes}
    check_on_both_backends(path, loaded, _feeds(shape, np.random.default_rng(3)))


def test_an_optimized_transformer_encoder_builds_and_matches_onnxruntime(tmp_path, signer):
    torch.manual_seed(12)
    shape = (2, 5, 16)
    float_model = export(_Encoder().eval(), [torch.randn(*shape)], tmp_path / "float.onnx",
                         dynamo=True, input_names=["x"], output_names=["y"])
    path = onnxruntime_optimized(float_model, tmp_path / "optimized.onnx")
    assert {(_MS, "FusedMatMul"), (_MS, "SkipLayerNormalization")} <= _ops(path)
    transposed = [n for n in onnx.load(str(path)).graph.node if n.op_type == "FusedMatMul" and
                  any(a.name.startswith("transBatch") and a.i for a in n.attribute)]
    assert transposed  # the attention's head split, folded into the product
    loaded = import_and_load(path, tmp_path / "m.pha", signer)[1]
    check_on_both_backends(path, loaded, _feeds(shape, np.random.default_rng(4)))


class _Block(torch.nn.Module):
    """A residual feed-forward block: Linear, GELU, the residual Add, LayerNorm."""

    def __init__(self):
        super().__init__()
        self.fc, self.norm = torch.nn.Linear(16, 16), torch.nn.LayerNorm(16)

    def forward(self, x):
        return self.norm(x + torch.nn.functional.gelu(self.fc(x)))


def test_an_optimized_opset_13_block_builds_and_matches_onnxruntime(tmp_path, signer):
    """Before opset 20 onnxruntime fuses the GELU into its own com.microsoft Gelu."""
    torch.manual_seed(14)
    shape = (2, 5, 16)
    float_model = export(_Block().eval(), [torch.randn(*shape)], tmp_path / "float.onnx",
                         dynamo=False, opset=13, input_names=["x"], output_names=["y"])
    path = onnxruntime_optimized(float_model, tmp_path / "optimized.onnx")
    assert {(_MS, "Gelu"), (_MS, "SkipLayerNormalization")} <= _ops(path)
    loaded = import_and_load(path, tmp_path / "m.pha", signer)[1]
    check_on_both_backends(path, loaded, _feeds(shape, np.random.default_rng(5)))


class _Norms(torch.nn.Module):
    """A LayerNorm, a Linear, then an RMSNorm written out (as T5 and LLaMA write it)."""

    def __init__(self):
        super().__init__()
        self.norm, self.fc = torch.nn.LayerNorm(16), torch.nn.Linear(16, 16)
        self.weight = torch.nn.Parameter(torch.rand(16) + 0.5)

    def forward(self, x):
        y = self.fc(self.norm(x))
        return y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


@pytest.mark.parametrize("opset", [13, 17])
def test_onnxruntimes_default_domain_norms_build_and_match_onnxruntime(opset, tmp_path, signer):
    """onnxruntime writes LayerNormalization into an opset-13 model (its own schema there, which
    onnx's checker does not know) and SimplifiedLayerNormalization (RMSNorm, no ONNX op) into
    any: both import, and the model read is the model given."""
    from plugin_host.onnx_import import read_model

    torch.manual_seed(15)
    shape = (2, 5, 16)
    float_model = export(_Norms().eval(), [torch.randn(*shape)], tmp_path / "float.onnx",
                         dynamo=False, opset=opset, input_names=["x"], output_names=["y"])
    path = onnxruntime_optimized(float_model, tmp_path / "optimized.onnx")
    assert {("", "LayerNormalization"), ("", "SimplifiedLayerNormalization")} <= _ops(path)
    assert read_model(path).SerializeToString() == onnx.load(str(path)).SerializeToString()
    loaded = import_and_load(path, tmp_path / "m.pha", signer)[1]
    assert {"layer_norm", "rms_norm"} <= {n.op for n in loaded.graph.nodes}
    check_on_both_backends(path, loaded, _feeds(shape, np.random.default_rng(6)))


# --- hand-made nodes ---------------------------------------------------------------------------


def _save(path, nodes, inputs, inits, out_shape, opset=17):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, TP.FLOAT, list(s)) for n, s in inputs],
        [helper.make_tensor_value_info("y", TP.FLOAT, list(out_shape))],
        [numpy_helper.from_array(np.asarray(v, np.float32), n) for n, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                    helper.make_opsetid(_MS, 1)])
    path.write_bytes(model.SerializeToString())
    return path


def _build_and_check(path, tmp_path, signer, feeds):
    loaded = import_and_load(path, tmp_path / "m.pha", signer)[1]
    check_on_both_backends(path, loaded, feeds)
    return loaded


@pytest.mark.parametrize("activation, params", [
    ("", []), ("Relu", []), ("LeakyRelu", [0.2]), ("Tanh", []), ("Sigmoid", []),
    ("Clip", [-0.5, 1.5]), ("HardSigmoid", [0.3, 0.4])])
@pytest.mark.parametrize("residual", [False, True])
def test_fused_conv_matches_onnxruntime(activation, params, residual, tmp_path, signer):
    rng = np.random.default_rng(13)
    attrs = {"pads": [1, 1, 1, 1], "strides": [1, 1]}
    if activation:
        attrs["activation"] = activation
    if params:
        attrs["activation_params"] = params
    node = helper.make_node("FusedConv", ["x", "w", "b"] + (["z"] if residual else []), ["y"],
                            name="n", domain=_MS, **attrs)
    inputs = [("x", (2, 3, 6, 6))] + ([("z", (2, 4, 6, 6))] if residual else [])
    path = _save(tmp_path / "m.onnx", [node], inputs,
                 {"w": rng.standard_normal((4, 3, 3, 3)) * 0.5, "b": rng.standard_normal(4)},
                 (2, 4, 6, 6))
    feeds = [{name: (rng.standard_normal(shape) * 2).astype(np.float32)
              for name, shape in inputs} for _ in range(2)]
    _build_and_check(path, tmp_path, signer, feeds)


@pytest.mark.parametrize("activation, params", [
    ("Relu", {}), ("LeakyRelu", {"activation_alpha": 0.3}), ("Tanh", {}), ("Sigmoid", {}),
    ("HardSigmoid", {"activation_alpha": 0.25, "activation_beta": 0.6}),
    ("Elu", {"activation_alpha": 0.7}),
    ("Selu", {"activation_alpha": 1.5, "activation_gamma": 1.1}),
    ("ThresholdedRelu", {"activation_alpha": 0.4}), ("Softplus", {}), ("Softsign", {})])
def test_fused_gemm_matches_onnxruntime(activation, params, tmp_path, signer):
    rng = np.random.default_rng(17)
    node = helper.make_node("FusedGemm", ["x", "w", "c"], ["y"], name="n", domain=_MS,
                            transB=1, alpha=0.8, beta=1.2, activation=activation, **params)
    path = _save(tmp_path / "m.onnx", [node], [("x", (3, 5))],
                 {"w": rng.standard_normal((4, 5)), "c": rng.standard_normal(4)}, (3, 4))
    feeds = [{"x": (rng.standard_normal((3, 5)) * 2).astype(np.float32)} for _ in range(2)]
    _build_and_check(path, tmp_path, signer, feeds)


@pytest.mark.parametrize("rank", [3, 4])
@pytest.mark.parametrize("flags", [(0, 0, 0, 0), (1, 0, 0, 0), (0, 1, 0, 0), (1, 1, 0, 0),
                                   (0, 0, 1, 0), (0, 0, 0, 1), (0, 0, 1, 1), (1, 1, 1, 1),
                                   (1, 0, 1, 1)])
def test_fused_matmul_matches_onnxruntime(flags, rank, tmp_path, signer):
    """Every combination onnxruntime's optimizer folds transposes into, on rank 3 and 4."""
    trans_a, batch_a, trans_b, batch_b = flags
    rng = np.random.default_rng(19)
    batch, m, k, n = [2, 3][:rank - 2], 4, 5, 6

    def stored(rows, cols, trans, moved):  # the shape whose rearrangement is batch + (r, c)
        shape = batch + ([cols, rows] if trans else [rows, cols])
        return shape[-2:-1] + shape[:-2] + shape[-1:] if moved else shape

    a_shape, b_shape = stored(m, k, trans_a, batch_a), stored(k, n, trans_b, batch_b)
    node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], name="n", domain=_MS, alpha=0.5,
                            transA=trans_a, transBatchA=batch_a, transB=trans_b,
                            transBatchB=batch_b)
    path = _save(tmp_path / "m.onnx", [node], [("a", a_shape), ("b", b_shape)], {},
                 batch + [m, n])
    feeds = [{"a": rng.standard_normal(a_shape).astype(np.float32),
              "b": rng.standard_normal(b_shape).astype(np.float32)} for _ in range(2)]
    _build_and_check(path, tmp_path, signer, feeds)


@pytest.mark.parametrize("bias, beta, outputs", [
    (False, False, ["y"]), (True, True, ["y"]), (True, False, ["y", "", "", "sum"]),
    (True, True, ["y", "mean", "inv"]), (False, True, ["y", "", "inv", "sum"])])
@pytest.mark.parametrize("op", ["SkipLayerNormalization", "SkipSimplifiedLayerNormalization"])
def test_skip_layer_normalization_matches_onnxruntime(op, bias, beta, outputs, tmp_path,
                                                      signer):
    """Each output the node has (mean, inverse standard deviation, the sum) as a graph output;
    SkipSimplifiedLayerNormalization has no beta (its bias is input 3) and no mean."""
    simplified = op == "SkipSimplifiedLayerNormalization"
    if simplified and "mean" in outputs:
        outputs = ["y", "", "inv"]
    rng = np.random.default_rng(23)
    inputs = ["x", "skip", "gamma"] + ([] if simplified else ["beta" if beta else ""]) + [
        "bias" if bias else ""]
    while not inputs[-1]:
        inputs.pop()
    node = helper.make_node(op, inputs, outputs, name="n", domain=_MS, epsilon=1e-5)
    inits = {"gamma": rng.standard_normal(8), "beta": rng.standard_normal(8),
             "bias": rng.standard_normal(8)}
    path = _save(tmp_path / "m.onnx", [node], [("x", (2, 3, 8)), ("skip", (2, 3, 8))],
                 {k: v for k, v in inits.items() if k in inputs}, (2, 3, 8))
    model = onnx.load(str(path))
    for name, shape in (("mean", [2, 3, 1]), ("inv", [2, 3, 1]), ("sum", [2, 3, 8])):
        if name in outputs:
            model.graph.output.append(helper.make_tensor_value_info(name, TP.FLOAT, shape))
    onnx.save(model, str(path))
    feeds = [{"x": (rng.standard_normal((2, 3, 8)) * 3 + 1).astype(np.float32),
              "skip": rng.standard_normal((2, 3, 8)).astype(np.float32)} for _ in range(2)]
    _build_and_check(path, tmp_path, signer, feeds)


@pytest.mark.parametrize("op, inputs, attrs", [
    ("Gelu", ["x"], {}), ("BiasGelu", ["x", "bias"], {}), ("FastGelu", ["x"], {}),
    ("FastGelu", ["x", "bias"], {}), ("QuickGelu", ["x"], {}),
    ("QuickGelu", ["x"], {"alpha": 1.2})])
def test_onnxruntimes_gelus_match_onnxruntime(op, inputs, attrs, tmp_path, signer):
    rng = np.random.default_rng(29)
    node = helper.make_node(op, inputs, ["y"], name="n", domain=_MS, **attrs)
    path = _save(tmp_path / "m.onnx", [node], [("x", (3, 8))],
                 {"bias": rng.standard_normal(8)} if "bias" in inputs else {}, (3, 8),
                 opset=13)
    feeds = [{"x": (rng.standard_normal((3, 8)) * s).astype(np.float32)} for s in (1, 4)]
    _build_and_check(path, tmp_path, signer, feeds)


# --- refused -----------------------------------------------------------------------------------


def _conv(tmp_path, **attrs):
    node = helper.make_node("FusedConv", ["x", "w"], ["y"], name="n", domain=_MS, **attrs)
    return _save(tmp_path / "m.onnx", [node], [("x", (1, 3, 4, 4))],
                 {"w": np.ones((2, 3, 1, 1))}, (1, 2, 4, 4))


def test_an_activation_onnxruntime_does_not_fuse_is_refused(tmp_path):
    assert_refused(_conv(tmp_path, activation="Gelu"), UnsupportedModelError,
                   "node 'n' (FusedConv)", "attribute activation='Gelu' is not supported")


def test_activation_params_of_the_wrong_count_are_refused(tmp_path):
    assert_refused(_conv(tmp_path, activation="Clip", activation_params=[0.0]), ModelFileError,
                   "node 'n' (FusedConv)", "activation_params [0.0]: Clip takes 2")


@pytest.mark.parametrize("axis", [-1, 1])
def test_simplified_layer_normalizations_inv_std_var_matches_onnxruntime(axis, tmp_path,
                                                                        signer):
    rng = np.random.default_rng(27)
    node = helper.make_node("SimplifiedLayerNormalization", ["x", "g"], ["y", "inv"], name="n",
                            axis=axis, epsilon=1e-4)
    scale_shape = (8,) if axis == -1 else (3, 8)
    path = _save(tmp_path / "m.onnx", [node], [("x", (2, 3, 8))],
                 {"g": rng.standard_normal(scale_shape)}, (2, 3, 8))
    model = onnx.load(str(path))
    model.graph.output.append(helper.make_tensor_value_info(
        "inv", TP.FLOAT, [2, 3, 1] if axis == -1 else [2, 1, 1]))
    onnx.save(model, str(path))
    feeds = [{"x": (rng.standard_normal((2, 3, 8)) * s).astype(np.float32)} for s in (1, 5)]
    _build_and_check(path, tmp_path, signer, feeds)


def test_skip_simplified_layer_normalizations_mean_output_is_refused(tmp_path):
    """onnxruntime leaves it unset: an RMSNorm has no mean."""
    node = helper.make_node("SkipSimplifiedLayerNormalization", ["x", "x", "g"], ["y", "mean"],
                            name="n", domain=_MS)
    path = _save(tmp_path / "m.onnx", [node], [("x", (1, 2, 4))], {"g": np.ones(4)}, (1, 2, 4))
    assert_refused(path, UnsupportedModelError, "node 'n' (SkipSimplifiedLayerNormalization)",
                   "the mean output (1) is not supported")


@pytest.mark.parametrize("domain", ["com.microsoft.nchwc", "com.ms.internal.nhwc"])
def test_a_layout_transformed_op_is_refused_saying_how_to_save_the_model(domain, tmp_path):
    """onnxruntime's ORT_ENABLE_ALL level rewrites convolutions into its NCHWc layout ops, for
    the CPU it ran on (it warns so itself); the refusal says which level to save at."""
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="n", domain=domain)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TP.FLOAT, [1, 8, 4, 4])],
        [helper.make_tensor_value_info("y", TP.FLOAT, [1, 8, 4, 4])],
        [numpy_helper.from_array(np.ones((8, 8, 1, 1), np.float32), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(domain, 1)])
    (tmp_path / "m.onnx").write_bytes(model.SerializeToString())
    assert_refused(tmp_path / "m.onnx", UnsupportedModelError, "node 'n' (Conv)",
                   f"custom domain {domain!r} is not supported (a layout-transformed op that "
                   f"onnxruntime writes when it saves a model optimized at ORT_ENABLE_ALL")
