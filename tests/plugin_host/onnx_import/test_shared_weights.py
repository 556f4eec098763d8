"""A weight the ONNX file stores once is stored once in the artifact, however many nodes read
it and whatever the import does to it for each of them; constants equal in bytes but not in
dtype or shape, or differing only in a zero's sign, stay apart."""

from __future__ import annotations

import numpy as np

from plugin_host.graph import Node
from plugin_host.onnx_import.convert import shared_constants

from .conftest import check_on_both_backends, export, import_and_load, onnx, torch

helper, TP = onnx.helper, onnx.TensorProto


def test_a_weight_read_by_two_matmuls_is_one_tensor(tmp_path, signer):
    """x @ W, relu, @ W again: each MatMul becomes a ``linear`` of W transposed, one array per
    reader at import; the artifact holds one."""
    w = np.random.default_rng(5).standard_normal((4, 4)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["a"], name="first"),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w"], ["y"], name="second")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, ["n", 4])],
                              [helper.make_tensor_value_info("y", TP.FLOAT, ["n", 4])],
                              [onnx.numpy_helper.from_array(w, "w")])
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    readers = [n for n in loaded.graph.nodes if n.op in ("linear", "matmul")]
    assert len(readers) == 2 and len({n.inputs[1] for n in readers}) == 1
    assert len(loaded.graph.tensors) == 1
    check_on_both_backends(model, loaded, [{"x": np.random.default_rng(6).standard_normal(
        (3, 4)).astype(np.float32)}])


def test_cloned_transformer_layers_take_the_bytes_of_one(tmp_path, signer):
    """``nn.TransformerEncoder`` clones its layer: untrained, every layer holds the same
    weights, which torch's exporter stores once. The artifact's weights are then about one
    layer's (less where a layer's own constants repeat: two LayerNorms' ones), not six."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, dropout=0.0)
    module = torch.nn.TransformerEncoder(layer, 6, enable_nested_tensor=False).eval()
    model = export(module, [torch.randn(1, 5, 16)], tmp_path / "t.onnx", dynamo=False,
                   input_names=["x"], output_names=["y"])
    _, loaded = import_and_load(model, tmp_path / "t.pha", signer)
    one_layer = sum(p.numel() for p in layer.parameters()) * 4
    stored = sum(a.nbytes for a in loaded.graph.tensors.values())
    assert 0.5 * one_layer < stored < 1.5 * one_layer, (stored, one_layer)
    check_on_both_backends(model, loaded, [{"x": np.random.default_rng(7).standard_normal(
        (1, 5, 16)).astype(np.float32)}])


def test_only_constants_equal_in_dtype_shape_and_bytes_are_one():
    tensors = {"a": np.zeros(4, np.float32), "b": np.zeros(4, np.float32),
               "c": np.zeros(4, np.int32), "d": np.zeros((2, 2), np.float32),
               "e": np.array([0.0, -0.0, 0.0, 0.0], np.float32),
               "f": np.zeros(4, np.float32)[::-1]}
    nodes = [Node(f"n{k}", "add", 1, (k, k), (f"y{k}",), {}) for k in tensors]
    nodes, kept = shared_constants(nodes, tensors)
    assert sorted(kept) == ["a", "c", "d", "e"]
    assert [n.inputs for n in nodes] == [("a", "a"), ("a", "a"), ("c", "c"), ("d", "d"),
                                         ("e", "e"), ("a", "a")]
