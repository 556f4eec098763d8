"""Hostile ONNX files the fuzzer (test_fuzz.py) found mishandled, each refused now with a typed
error naming what was wrong and where: external data that cannot be resolved or read, string
fields that are not UTF-8, checker messages cut mid-sentence, graph inputs and computed values
past the tensor cap, a flood of same-named nodes, and constant inputs or attributes of the
wrong rank, dtype or range."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from plugin_host.errors import ModelFileError
from plugin_host.onnx_import import import_onnx

from .conftest import onnx

helper, TP = onnx.helper, onnx.TensorProto


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _save(path: Path, model) -> Path:
    path.write_bytes(model.SerializeToString())  # as is: onnx.save would touch external data
    return path


def _vi(name, elem=TP.FLOAT, shape=(1, 4)):
    return helper.make_tensor_value_info(name, elem, list(shape or ()))  # None: rank 0


def _ints(name, values, dims=None):
    values = list(values)
    return helper.make_tensor(name, TP.INT64, [len(values)] if dims is None else dims, values)


# --- external data ---------------------------------------------------------------------------


def _external(folder: Path, location: str, offset: str = "0") -> Path:
    w = helper.make_tensor("w", TP.FLOAT, [4, 3], np.arange(12, dtype=np.float32).tobytes(),
                           raw=True)
    w.ClearField("raw_data")
    w.data_location = TP.EXTERNAL
    for k, v in (("location", location), ("offset", offset), ("length", "48")):
        entry = w.external_data.add()
        entry.key, entry.value = k, v
    (folder / "w.bin").write_bytes(np.arange(12, dtype=np.float32).tobytes())
    (folder / "loop.bin").symlink_to("loop.bin")
    return _save(folder / "ext.onnx", _model([helper.make_node("MatMul", ["x", "w"], ["y"])],
                                            [_vi("x")], [_vi("y", shape=(1, 3))], [w]))


@pytest.mark.parametrize("location, offset, message", [
    ("w.bin\x00x", "0", r"external location 'w.bin\\x00x' must be a relative path"),
    ("x" * 5000, "0", r"external file 'x+'\.\.\. \(5000 characters\) cannot be resolved: File "
                      r"name too long"),
    ("loop.bin", "0", r"external file 'loop.bin' cannot be resolved: a symbolic link loop"),
    ("w.bin", str(2**70), r"external file 'w.bin' ends before offset 1180591620717411303424"),
], ids=["nul", "too-long", "symlink-loop", "offset-past-2**63"])
def test_external_data_that_cannot_be_read_is_a_model_file_error(tmp_path, location, offset,
                                                                 message):
    with pytest.raises(ModelFileError, match=r"tensor 'w': " + message):
        import_onnx(_external(tmp_path, location, offset), allow_external_data=True)


def test_external_data_of_a_constant_names_the_node(tmp_path):
    value = helper.make_tensor("", TP.FLOAT, [1], [1.0])
    value.data_location = TP.EXTERNAL
    entry = value.external_data.add()
    entry.key, entry.value = "location", "../v.bin"
    node = helper.make_node("Constant", [], ["c"], name="k", value=value)
    path = _save(tmp_path / "m.onnx", _model(
        [node, helper.make_node("Add", ["x", "c"], ["y"])], [_vi("x")], [_vi("y")]))
    with pytest.raises(ModelFileError, match=r"tensor 'value' of node 'k': external location"):
        import_onnx(path, allow_external_data=True)


# --- the file's text -------------------------------------------------------------------------


def _relu(name="act", x="x"):
    return _model([helper.make_node("Relu", [x], ["y"], name=name)], [_vi(x)], [_vi("y")])


@pytest.mark.parametrize("field, where", [
    ("act", r"model.graph.node\[0\].name"),
    ("xin", r"model.graph.node\[0\].input\[0\]"),
], ids=["node-name", "tensor-name"])
def test_a_string_field_that_is_not_utf8_is_named(tmp_path, field, where):
    data = _relu(x="xin").SerializeToString()
    at = data.index(field.encode())  # the first occurrence: the node's
    path = tmp_path / "m.onnx"
    path.write_bytes(data[:at] + b"\xff" + data[at + 1:])
    with pytest.raises(ModelFileError, match=where + r" is not valid UTF-8 \(b'\\xff"):
        import_onnx(path)


def test_a_checker_message_keeps_the_node_it_names(tmp_path):
    model = _model([helper.make_node("Relu", ["a"], ["y"], name="late"),
                    helper.make_node("Relu", ["x"], ["a"], name="early")], [_vi("x")],
                   [_vi("y")])
    with pytest.raises(ModelFileError, match=r"topologically sorted, however input 'a' of "
                                             r"node: name: late OpType: Relu is not output"):
        import_onnx(_save(tmp_path / "m.onnx", model))


# --- sizes -----------------------------------------------------------------------------------


def test_a_graph_input_past_the_tensor_cap_is_refused_before_inputs_are_drawn(tmp_path):
    path = _save(tmp_path / "m.onnx", _model([helper.make_node("Relu", ["x"], ["y"])],
                                             [_vi("x", shape=(1, 2**40))],
                                             [_vi("y", shape=(1, 2**40))]))
    with pytest.raises(ModelFileError, match=r"graph input 'x' of shape \(1, 1099511627776\) "
                                             r"would have 1099511627776 elements, above the cap"):
        import_onnx(path)


def test_a_computed_value_past_the_tensor_cap_is_refused_at_its_node(tmp_path):
    pads = _ints("pads", [0, 2**30, 0, 2**30])
    path = _save(tmp_path / "m.onnx", _model(
        [helper.make_node("Pad", ["x", "pads"], ["y"], name="wide")], [_vi("x")],
        [_vi("y", shape=None)], [pads]))
    with pytest.raises(ModelFileError, match=r"node 'wide' \(Pad\): its pad output of shape "
                                             r"\(1, 2147483652\) would have 2147483652 elements"):
        import_onnx(path)


def test_many_nodes_of_one_name_import_in_linear_time(tmp_path):
    n = 20_000
    nodes = [helper.make_node("Relu", ["x" if i == 0 else f"t{i - 1}"],
                              ["y" if i == n - 1 else f"t{i}"], name="same") for i in range(n)]
    path = _save(tmp_path / "m.onnx", _model(nodes, [_vi("x")], [_vi("y")]))
    started = time.perf_counter()
    imported = import_onnx(path)
    assert len(imported.graph.nodes) == n
    assert time.perf_counter() - started < 15  # quadratic naming took minutes
