"""The activations and element-wise math beyond the layer set (ELU, LeakyReLU, the hard ones,
Softplus, PReLU, exp/log/sqrt/..., Pow, Max/Min, comparisons, Not, Where) import as their glue
ops from both exporters and match onnxruntime; a value they cannot take is refused naming the
node."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import UnsupportedModelError
from plugin_host.onnx_import import import_onnx

from .conftest import EXPORTERS, check_against_onnxruntime, export, import_and_load, onnx, torch

F = torch.nn.functional


class _Activations(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.prelu = torch.nn.PReLU(4, init=0.2)
        with torch.no_grad():
            self.prelu.weight.copy_(torch.linspace(0.05, 0.4, 4))

    def forward(self, x):
        a = F.elu(x) + F.elu(x, alpha=0.3) + F.leaky_relu(x) + F.leaky_relu(x, 0.2)
        b = F.hardsigmoid(x) + F.hardswish(x) + F.softplus(x) + self.prelu(x)
        m = torch.exp(-torch.abs(x)) + torch.log(torch.abs(x) + 1.0) + torch.sqrt(x * x + 0.5)
        n = torch.reciprocal(x * x + 1.0) - torch.neg(x) + torch.erf(x)
        p = torch.pow(torch.abs(x) + 0.1, 1.7) + x ** 2
        q = torch.maximum(x, -x * 0.5) + torch.minimum(x, torch.tanh(x))
        return a + b, m + n + p + q


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_activations_and_math_match_onnxruntime(dynamo, fold, optimize, tmp_path, signer):
    x = torch.randn(2, 4, 3, 5) * 3
    model = export(_Activations(), [x], tmp_path / "a.onnx", dynamo=dynamo, fold=fold,
                   optimize=optimize, input_names=["x"], output_names=["act", "math"])
    _, loaded = import_and_load(model, tmp_path / "a.pha", signer)
    ops = {n.op for n in loaded.graph.nodes}
    assert {"elu", "leaky_relu", "hard_sigmoid", "softplus", "prelu", "exp", "log", "sqrt",
            "reciprocal", "erf", "abs", "pow", "max", "min"} <= ops, ops
    assert ops & {"hard_swish", "mul"}  # HardSwish, or its decomposition at an older opset
    rng = np.random.default_rng(3)
    check_against_onnxruntime(model, loaded, [
        {"x": (rng.standard_normal((2, 4, 3, 5)) * s).astype(np.float32)} for s in (1, 4, 20)])


class _Select(torch.nn.Module):
    def forward(self, x, y):
        picked = torch.where(x > y, x, y * 2.0) + torch.where(x <= 0.5, 1.0, x)
        same = torch.where(~(torch.round(x) == torch.round(y)), x, -y)
        return picked + torch.where((x < y) | (x >= 1.0), same, 0.0)


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_comparisons_not_and_where_match_onnxruntime(dynamo, fold, optimize, tmp_path, signer):
    args = [torch.randn(3, 4), torch.randn(3, 4)]
    model = export(_Select(), args, tmp_path / "s.onnx", dynamo=dynamo, fold=fold,
                   optimize=optimize, input_names=["x", "y"], output_names=["out"])
    _, loaded = import_and_load(model, tmp_path / "s.pha", signer)
    ops = {n.op for n in loaded.graph.nodes}
    assert {"greater", "less_equal", "less", "greater_equal", "equal", "not", "where", "or",
            "round"} <= ops, ops
    rng = np.random.default_rng(5)
    check_against_onnxruntime(model, loaded, [
        {k: (rng.standard_normal((3, 4)) * 2).astype(np.float32) for k in "xy"}
        for _ in range(3)])


class _Reductions(torch.nn.Module):
    def forward(self, x):
        s = x.sum(dim=(1, 3)) + x.amax(dim=(1, 3)) - x.amin(dim=(1, 3))
        return s, x.argmax(dim=1), x.sum(dim=-1, keepdim=True).argmax(dim=2, keepdim=True)


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_reductions_and_argmax_match_onnxruntime(dynamo, fold, optimize, tmp_path, signer):
    model = export(_Reductions(), [torch.randn(2, 3, 4, 5)], tmp_path / "r.onnx",
                   dynamo=dynamo, fold=fold, optimize=optimize, input_names=["x"],
                   output_names=["s", "idx", "idx2"])
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    assert {"sum", "amax", "amin", "argmax"} <= {n.op for n in loaded.graph.nodes}
    assert {s.name: s.dtype for s in loaded.graph.outputs}["idx"] == "int64"
    rng = np.random.default_rng(9)
    check_against_onnxruntime(model, loaded, [
        {"x": rng.standard_normal((2, 3, 4, 5)).astype(np.float32)} for _ in range(3)])


def _single(tmp_path, op_type, inputs, attrs=None, consts=(), opset=18, dtype=None):
    """A one-node ONNX model of ``op_type`` over float32 inputs ``x`` (and ``y``)."""
    helper = onnx.helper
    elem = dtype or onnx.TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node(op_type, inputs, ["out"], name="node", **(attrs or {}))], "g",
        [helper.make_tensor_value_info(n, elem, [2, 3]) for n in inputs
         if n and n not in {c.name for c in consts}],
        [helper.make_tensor_value_info("out", elem, [2, 3])], initializer=list(consts))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    path = tmp_path / f"{op_type}.onnx"
    onnx.save(model, path)
    return path


def test_a_pow_with_an_exponent_of_another_dtype_takes_the_bases(tmp_path, signer):
    exponent = onnx.helper.make_tensor("e", onnx.TensorProto.INT64, [], [3])
    model = _single(tmp_path, "Pow", ["x", "e"], consts=[exponent])
    imported = import_onnx(model)
    [node] = imported.graph.nodes
    assert node.op == "pow" and imported.graph.tensors[node.inputs[1]].dtype == np.float32
    _, loaded = import_and_load(model, tmp_path / "p.pha", signer)
    check_against_onnxruntime(model, loaded, [{"x": np.linspace(-2, 2, 6, dtype=np.float32)
                                               .reshape(2, 3)}])


def test_max_and_min_of_one_or_three_inputs(tmp_path, signer):
    model = _single(tmp_path, "Max", ["x", "y", "z"])
    imported = import_onnx(model)
    assert [n.op for n in imported.graph.nodes] == ["max", "max"]
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    rng = np.random.default_rng(0)
    check_against_onnxruntime(model, loaded, [
        {k: rng.standard_normal((2, 3)).astype(np.float32) for k in "xyz"}])
    assert [n.op for n in import_onnx(_single(tmp_path, "Min", ["x"])).graph.nodes] == \
        ["identity"]
    # an empty name (an omitted optional input) in Max's inputs: onnxruntime crashes on it
    with pytest.raises(UnsupportedModelError, match=r"node 'node' \(Max\): inputs \['x', ''\]"):
        import_onnx(_single(tmp_path, "Max", ["x", ""]))


@pytest.mark.parametrize("op_type, inputs, attrs, dtype, message", [
    ("Pow", ["x", "y"], {}, None, None),  # both run-time: fine
    ("Neg", ["x"], {}, onnx.TensorProto.UINT8, "neg: x must be a signed integer or float"),
    ("Elu", ["x"], {"alpha": float("inf")}, None, "attribute 'alpha' must be in"),
    ("StringNormalizer", ["x"], {}, None, "op 'StringNormalizer' is not supported"),
])
def test_a_value_the_op_cannot_take_names_the_node(tmp_path, op_type, inputs, attrs, dtype,
                                                   message):
    model = _single(tmp_path, op_type, inputs, attrs, dtype=dtype)
    if message is None:
        assert [n.op for n in import_onnx(model).graph.nodes] == ["pow"]
        return
    with pytest.raises(Exception) as info:
        import_onnx(model)
    assert "node 'node'" in str(info.value) and message in str(info.value), str(info.value)
    assert isinstance(info.value, UnsupportedModelError) or "must" in str(info.value)
