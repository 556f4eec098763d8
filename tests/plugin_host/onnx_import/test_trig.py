"""Trigonometric, hyperbolic and nan/inf tests import from both exporters and match onnxruntime:
Tan, Atan, Asin, Acos, Sinh, Cosh, Asinh, Acosh, Atanh, IsNaN and IsInf as their glue ops, also
as torch.atan2 writes them (Atan of y / x, corrected by quadrant with Where; the dynamo exporter
adds IsNaN)."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import UnsupportedModelError
from plugin_host.onnx_import import import_onnx, onnx_to_graph

from .conftest import EXPORTERS, check_against_onnxruntime, export, import_and_load, onnx, torch

helper, TP = onnx.helper, onnx.TensorProto

#: float32 extremes, signed zeros, infinities, nan, and the edges of the inverse functions'
#: domains: +-1, just inside and just outside them
EDGES = np.array([-np.inf, -3e38, -1e30, -100, -2, -1.0000001, -1, -0.9999999, -0.5, -1e-30,
                  -1e-45, -0.0, 0.0, 1e-45, 1e-30, 0.5, 0.9999999, 1, 1.0000001, 1.5707964, 2,
                  20, 89, 100, 1e4, 3e38, np.inf, np.nan], np.float32)


def _ops(loaded) -> set[str]:
    return {n.op for n in loaded.graph.nodes}


def _random(shape, seed, scales=(0.5, 4, 100)):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(shape) * s).astype(np.float32) for s in scales]


class _Trig(torch.nn.Module):
    def forward(self, x, y):
        return (torch.tan(x), torch.atan(x), torch.asin(x) + torch.acos(x), torch.atan2(y, x),
                torch.isnan(x), torch.isinf(y))


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_tan_atan_asin_acos_atan2_isnan_isinf_match_onnxruntime(dynamo, fold, optimize,
                                                                tmp_path, signer):
    model = export(_Trig(), [torch.randn(4, 7), torch.randn(4, 7)], tmp_path / "t.onnx",
                   dynamo=dynamo, fold=fold, optimize=optimize, input_names=["x", "y"],
                   output_names=["tan", "atan", "asin_acos", "atan2", "isnan", "isinf"])
    _, loaded = import_and_load(model, tmp_path / "t.pha", signer)
    assert {"tan", "atan", "asin", "acos", "isnan", "isinf"} <= _ops(loaded)
    outputs = {s.name: s.dtype for s in loaded.graph.outputs}
    assert outputs["isnan"] == outputs["isinf"] == "bool"
    feeds = [{"x": x, "y": y} for x, y in zip(_random((4, 7), 1), _random((4, 7), 2))]
    edges = np.resize(EDGES, (4, 7))
    feeds += [{"x": edges, "y": edges[::-1].copy()}, {"x": edges, "y": np.roll(edges, 9)},
              {"x": np.roll(edges, 3), "y": edges}]  # atan2 at every pair of signed 0 and inf
    check_against_onnxruntime(model, loaded, feeds)


class _Hyperbolic(torch.nn.Module):
    def forward(self, x):
        return (torch.sinh(x), torch.cosh(x), torch.asinh(x), torch.acosh(x), torch.atanh(x),
                torch.isposinf(x), torch.isneginf(x))


#: torch's legacy exporter has no symbolic for these (at its default opset, 20)
DYNAMO = [p for p in EXPORTERS if p.values[0]]


@pytest.mark.parametrize("dynamo, fold, optimize", DYNAMO)
def test_hyperbolic_isposinf_isneginf_match_onnxruntime(dynamo, fold, optimize, tmp_path,
                                                        signer):
    model = export(_Hyperbolic(), [torch.randn(4, 7)], tmp_path / "h.onnx", dynamo=dynamo,
                   fold=fold, optimize=optimize, input_names=["x"])
    _, loaded = import_and_load(model, tmp_path / "h.pha", signer)
    assert {"sinh", "cosh", "asinh", "acosh", "atanh", "isinf"} <= _ops(loaded)
    feeds = [{"x": x} for x in _random((4, 7), 3)] + [{"x": np.resize(EDGES, (4, 7))}]
    check_against_onnxruntime(model, loaded, feeds)


def _model(tmp_path, node, elem=TP.FLOAT, name="m"):
    out = TP.BOOL if node.op_type in ("IsNaN", "IsInf") else elem
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", elem, [4, 7])],
                              [helper.make_tensor_value_info("y", out, [4, 7])])
    path = tmp_path / f"{name}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


@pytest.mark.parametrize("op_type, attrs, op", [
    ("Tan", {}, "tan"), ("Atan", {}, "atan"), ("Asin", {}, "asin"), ("Acos", {}, "acos"),
    ("Sinh", {}, "sinh"), ("Cosh", {}, "cosh"), ("Asinh", {}, "asinh"),
    ("Acosh", {}, "acosh"), ("Atanh", {}, "atanh"), ("IsNaN", {}, "isnan"),
    ("IsInf", {}, "isinf"), ("IsInf", {"detect_positive": 0}, "isinf"),
    ("IsInf", {"detect_negative": 0}, "isinf"),
    ("IsInf", {"detect_positive": 0, "detect_negative": 0}, "isinf"),
])
def test_one_node_matches_onnxruntime_at_the_extremes(op_type, attrs, op, tmp_path, signer):
    model = _model(tmp_path, helper.make_node(op_type, ["x"], ["y"], name="node", **attrs))
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert _ops(loaded) == {op}
    edges = np.resize(EDGES, (4, 7))
    check_against_onnxruntime(model, loaded, [{"x": x} for x in _random((4, 7), 4)] + [
        {"x": edges}, {"x": -edges}, {"x": edges[::-1].copy()}])


@pytest.mark.parametrize("op_type, attrs, elem, message", [
    ("IsInf", {"detect_positive": 2}, TP.FLOAT, "attribute detect_positive=2 must be 0 or 1"),
    ("IsInf", {"detect_negative": -1}, TP.FLOAT, "attribute detect_negative=-1 must be 0 or 1"),
    ("IsInf", {}, TP.INT64, "isinf: x must be a float tensor"),
    ("IsNaN", {}, TP.INT32, "isnan: x must be a float tensor"),
    ("Atan", {}, TP.INT64, "atan: x must be a float tensor"),
    ("Acosh", {}, TP.INT32, "acosh: x must be a float tensor"),
])
def test_a_value_the_mapping_cannot_take_names_the_node(op_type, attrs, elem, message,
                                                        tmp_path):
    model = _model(tmp_path, helper.make_node(op_type, ["x"], ["y"], name="node", **attrs),
                   elem=elem)
    with pytest.raises(UnsupportedModelError) as info:
        import_onnx(model)
    text = str(info.value)
    assert f"node 'node' ({op_type})" in text and message in text and "\n" not in text, text


def _cast_then(tmp_path, *, also_output: bool):
    """x -> Cast(to=DOUBLE) -> IsInf -> y, the cast also a graph output if ``also_output``."""
    nodes = [helper.make_node("Cast", ["x"], ["wide"], name="widen", to=TP.DOUBLE),
             helper.make_node("IsInf", ["wide"], ["y"], name="node")]
    outputs = [helper.make_tensor_value_info("y", TP.BOOL, [4, 7])]
    if also_output:
        outputs.append(helper.make_tensor_value_info("wide", TP.DOUBLE, [4, 7]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, [4, 7])],
                              outputs)
    path = tmp_path / f"cast{int(also_output)}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


def test_a_float64_cast_read_only_by_isinf_is_skipped(tmp_path, signer):
    """torch's legacy exporter writes torch.isinf(x) as IsInf(Cast(x, to=DOUBLE)); widening
    keeps every inf and nan, so IsInf reads the float32 x (float64 is not an ABI dtype the
    backends run). A cast whose value is read elsewhere too stays (a float64 graph output:
    refused by import_onnx unless downcast, see test_float64)."""
    model = _cast_then(tmp_path, also_output=False)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert _ops(loaded) == {"isinf"}
    check_against_onnxruntime(model, loaded, [{"x": np.resize(EDGES, (4, 7))}])
    graph = onnx_to_graph(onnx.load(_cast_then(tmp_path, also_output=True)), name="c").graph
    assert {n.op for n in graph.nodes} == {"cast", "isinf"}
