"""The imported graph holds only the nodes some graph output depends on: what the model
computes and never reads, and what the import writes and then reads another way (a Range a
Gather takes as a slice, a run-time dim cast to float that a Range reads as the dim), would
otherwise run on every call for nothing. The weights only such nodes read are left out of
the artifact too."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.onnx_import import import_onnx

from .conftest import check_on_both_backends, export_dynamic, import_and_load, onnx, torch
from .test_range_steps import _Locations, _Reversed

helper, TP = onnx.helper, onnx.TensorProto


def _unread(graph) -> list[str]:
    """Nodes none of whose outputs a later node or a graph output reads."""
    read = {s.name for s in graph.outputs} | {t for n in graph.nodes for t in n.inputs}
    return [n.name for n in graph.nodes if not any(t in read for t in n.outputs)]


def test_a_branch_the_model_never_reads_is_left_out_with_its_weights(tmp_path, signer):
    rng = np.random.default_rng(3)
    table = rng.standard_normal((64, 8)).astype(np.float32)
    nodes = [helper.make_node("Mul", ["x", "two"], ["y"], name="used"),
             helper.make_node("MatMul", ["x", "w"], ["h"], name="unread_matmul"),
             helper.make_node("Relu", ["h"], ["r"], name="unread_relu")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, ["b", 64])],
        [helper.make_tensor_value_info("y", TP.FLOAT, ["b", 64])],
        [helper.make_tensor("two", TP.FLOAT, [], [2.0]),
         helper.make_tensor("w", TP.FLOAT, [64, 8], table.reshape(-1).tolist())])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    _, loaded = import_and_load(path, tmp_path / "m.pha", signer)
    assert [n.op for n in loaded.graph.nodes] == ["mul"]
    assert not any(t.shape == (64, 8) for t in loaded.graph.tensors.values())
    check_on_both_backends(path, loaded, [
        {"x": rng.standard_normal((n, 64)).astype(np.float32)} for n in (1, 3)])


@pytest.mark.parametrize("module, base, dims, outputs", [
    (_Reversed, (2, 7, 3), {0: "b", 1: "t"}, ("y", "z")),
    (_Locations, (1, 2, 5, 7), {0: "b", 2: "h", 3: "w"}, ("y",)),
], ids=["gather_at_a_range", "range_to_a_float_dim"])
@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_what_the_import_writes_and_reads_another_way_is_left_out(module, base, dims, outputs,
                                                                  dynamo, tmp_path):
    model = export_dynamic(module(), [torch.randn(*base)], tmp_path / "m.onnx",
                           dynamo=dynamo, names=["x"], dims=[dims], outputs=outputs)
    graph = import_onnx(model).graph
    assert graph.nodes and not _unread(graph), _unread(graph)
    if module is _Reversed:  # the Ranges the Gathers take as slices leave nothing behind
        assert "cumsum" not in {n.op for n in graph.nodes}
