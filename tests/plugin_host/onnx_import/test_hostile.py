"""Hostile ONNX files the fuzzer (test_fuzz.py) found mishandled, each refused now with a typed
error naming what was wrong and where: external data that cannot be resolved or read, string
fields that are not UTF-8, checker messages cut mid-sentence, graph inputs and computed values
past the tensor cap, a flood of same-named nodes, constant inputs or attributes of the
wrong rank, dtype or range, and attributes that are not finite."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from plugin_host.errors import ModelFileError, UnsupportedModelError
from plugin_host.executor import Executor
from plugin_host.onnx_import import build_onnx_artifact, import_onnx
from plugin_host.onnx_import.reader import ReadLimits
from plugins.numpy_backend import NumpyBackend

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


@pytest.mark.parametrize("op_type, domain, where", [
    ("Re\nlu", "", r"model.graph.node\[0\].op_type 'Re\\nlu'"),
    ("Relu", "com.\tmicrosoft", r"model.graph.node\[0\].domain 'com.\\tmicrosoft'"),
], ids=["op-type", "domain"])
def test_an_op_type_or_domain_that_does_not_print_is_named(tmp_path, op_type, domain, where):
    """The messages naming a node print its op type as it is: a line break there would split
    them (the fuzz met a byte of an op type overwritten by one)."""
    model = _relu()
    model.graph.node[0].op_type, model.graph.node[0].domain = op_type, domain
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    with pytest.raises(ModelFileError, match=where + " holds a character that does not print"
                       ) as raised:
        import_onnx(path)
    assert "\n" not in str(raised.value)


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


@pytest.mark.parametrize("op", ["Concat", "Gather"])
def test_a_folded_value_past_the_cap_is_refused_before_it_is_made(tmp_path, op):
    """A Concat or Gather of constants whose result passes the tensor cap is refused from the
    sizes, before the result is made (the ONNX fuzz met a Concat of two expanded constants of
    2**27 values each, made in 6 s and then refused as "a folded value")."""
    data = onnx.numpy_helper.from_array(np.zeros((5, 2), np.float32), "data")
    second = onnx.numpy_helper.from_array(np.arange(6, dtype=np.int64) % 5, "second")
    nodes = [helper.make_node(op, ["data", "second" if op == "Gather" else "data"], ["c"],
                              name="grow", axis=0),
             helper.make_node("Add", ["x", "c"], ["y"])]
    path = _save(tmp_path / "m.onnx", _model(nodes, [_vi("x", shape=(1, 2))],
                                             [_vi("y", shape=None)], [data, second]))
    made = 20 if op == "Concat" else 12  # (5, 2) twice; six of its rows
    with pytest.raises(ModelFileError, match=rf"node 'grow' \({op}\): {op} would have {made} "
                                             rf"elements, above the cap of 10"):
        import_onnx(path, limits=ReadLimits(max_tensor_elements=10))


def _expanded(tmp_path, rows: list[int], weight: int = 0, constant_node: bool = False):
    """x plus the sums of a constant expanded to each of ``rows`` rows, and of a weight of
    ``weight`` values cast, transposed and reshaped (the sums at run time, the rest folded)."""
    inits = [onnx.numpy_helper.from_array(np.zeros((1, 1), np.float32), "c")]
    nodes, last = [], "x"
    for i, n in enumerate(rows):
        inits.append(onnx.numpy_helper.from_array(np.array([n, 1], np.int64), f"s{i}"))
        nodes += [helper.make_node("Expand", ["c", f"s{i}"], [f"c{i}"], name=f"e{i}"),
                  helper.make_node("ReduceSum", [f"c{i}"], [f"r{i}"], keepdims=0),
                  helper.make_node("Add", [last, f"r{i}"], [f"x{i}"])]
        last = f"x{i}"
    if weight:
        w = onnx.numpy_helper.from_array(np.ones((weight, 1), np.float64), "w")
        if constant_node:
            nodes.append(helper.make_node("Constant", [], ["w"], value=w))
        else:
            inits.append(w)
        nodes += [helper.make_node("Cast", ["w"], ["w32"], to=TP.FLOAT),
                  helper.make_node("Transpose", ["w32"], ["wt"]),
                  helper.make_node("Reshape", ["wt", "flat"], ["wf"]),
                  helper.make_node("ReduceSum", ["wf"], ["rw"], keepdims=0),
                  helper.make_node("Add", [last, "rw"], ["xw"])]
        inits.append(onnx.numpy_helper.from_array(np.array([-1], np.int64), "flat"))
        last = "xw"
    nodes.append(helper.make_node("Identity", [last], ["y"]))
    return _save(tmp_path / "m.onnx", _model(nodes, [_vi("x", shape=(1,))],
                                             [_vi("y", shape=(1,))], inits))


def test_what_folding_makes_in_all_is_bounded_by_the_models_own_constants(tmp_path):
    """Folded values may hold the tensor cap's elements in all, and four per element of the
    model's constants: each Expand within the cap, the third past what is left."""
    limits = ReadLimits(max_tensor_elements=100)
    path = _expanded(tmp_path, [60, 30, 60])
    with pytest.raises(ModelFileError, match=r"node 'e2' \(Expand\): Expand would have 60 "
                                             r"elements, above the cap of \d+ \(what is left of "
                                             r"the elements folding may make in all: the tensor "
                                             r"cap 100 and 4 per element of the model's own"):
        import_onnx(path, limits=limits)
    import_onnx(_expanded(tmp_path, [60, 30]), limits=limits)
    # a weight of the cap's size cast, transposed and reshaped: three folds of it, within
    for constant_node in (False, True):
        import_onnx(_expanded(tmp_path, [], weight=100, constant_node=constant_node),
                    limits=limits)


def test_a_computed_value_past_the_tensor_cap_is_refused_at_its_node(tmp_path):
    pads = _ints("pads", [0, 2**30, 0, 2**30])
    path = _save(tmp_path / "m.onnx", _model(
        [helper.make_node("Pad", ["x", "pads"], ["y"], name="wide")], [_vi("x")],
        [_vi("y", shape=None)], [pads]))
    with pytest.raises(ModelFileError, match=r"node 'wide' \(Pad\): its pad output of shape "
                                             r"\(1, 2147483652\) would have 2147483652 elements"):
        import_onnx(path)


def test_many_nodes_of_one_artifact_name_import_in_linear_time(tmp_path):
    """20,000 node names that differ only in characters an artifact name cannot hold, so all
    become "same_" and get suffixes."""
    n = 20_000
    nodes = [helper.make_node("Relu", ["x" if i == 0 else f"t{i - 1}"],
                              ["y" if i == n - 1 else f"t{i}"], name="same" + chr(0x4E00 + i))
             for i in range(n)]
    path = _save(tmp_path / "m.onnx", _model(nodes, [_vi("x")], [_vi("y")]))
    started = time.perf_counter()
    imported = import_onnx(path)
    assert len(imported.graph.nodes) == n
    assert time.perf_counter() - started < 15  # quadratic naming took minutes


def test_nodes_of_one_name_are_refused_before_the_import(tmp_path):
    """onnxruntime refuses a model whose node names repeat; the reader says so at once, not
    after importing 20,000 of them."""
    nodes = [helper.make_node("Relu", ["x"], ["t"], name="same"),
             helper.make_node("Relu", ["t"], ["y"], name="same")]
    path = _save(tmp_path / "m.onnx", _model(nodes, [_vi("x")], [_vi("y")]))
    with pytest.raises(ModelFileError) as info:
        import_onnx(path)
    assert info.value.node == "same" and str(info.value).endswith(
        "two nodes are named 'same'; onnxruntime refuses a model whose node names repeat")


def test_constants_whose_names_repeat_build(tmp_path):
    """onnxruntime makes Constant nodes initializers before it checks the names, so it runs a
    model whose Constants share a name, with each other or with another node (silero-vad's
    OpenVINO export names fifteen 'F0::anon'); such a model builds."""
    def constant(name, output, values):
        return helper.make_node("Constant", [], [output], name=name,
                                value=helper.make_tensor("v", TP.FLOAT, [2], values))
    nodes = [constant("same", "c1", [1, 2]), constant("same", "c2", [3, 4]),
             helper.make_node("Add", ["x", "c1"], ["t"], name="same"),
             helper.make_node("Add", ["t", "c2"], ["y"], name="add")]
    path = _save(tmp_path / "m.onnx",
                 _model(nodes, [_vi("x", shape=(2,))], [_vi("y", shape=(2,))]))
    build_onnx_artifact(path, tmp_path / "m.pha")
    graph = import_onnx(path).graph
    got = Executor(graph, NumpyBackend()).run({"x": np.ones(2, np.float32)})
    np.testing.assert_array_equal(got["y"], np.array([5, 7], np.float32))


# --- constant inputs and attributes ----------------------------------------------------------


def _raw_int64(dims, nbytes):
    t = onnx.TensorProto(data_type=TP.INT64, raw_data=bytes(nbytes))
    t.dims.extend(dims)
    return t


def _slice(starts, steps=None):
    inits = [starts, _ints("ends", [3]), _ints("axes", [1])] + ([steps] if steps else [])
    ins = ["x", "starts", "ends", "axes"] + (["steps"] if steps else [])
    return [helper.make_node("Slice", ins, ["y"], name="cut")], inits


CASES = {
    "slice-0d-starts": (*_slice(helper.make_tensor("starts", TP.INT64, [], [1])), None, (1, 4),
                        r"node 'cut' \(Slice\): starts must be a 1-D integer tensor, got int64 "
                        r"of shape \(\)"),
    "slice-step-0": (*_slice(_ints("starts", [1]), _ints("steps", [0])), None, (1, 4),
                     r"node 'cut' \(Slice\): steps \[0\]: a step of 0"),
    "slice-more-starts-than-axes": (  # no axes input: one start per axis, from the first
        [helper.make_node("Slice", ["x", "starts", "ends"], ["y"], name="cut")],
        [_ints("starts", [0, 0, 0]), _ints("ends", [1, 1, 1])], None, (1, 4),
        r"node 'cut' \(Slice\): starts \[0, 0, 0\] slice 3 axes of a rank-2 value"),
    "folded-slice-more-starts-than-axes": (
        [helper.make_node("Slice", ["k", "starts", "ends"], ["c"], name="cut"),
         helper.make_node("Add", ["x", "c"], ["y"])],
        [helper.make_tensor("k", TP.FLOAT, [4], [1.0] * 4), _ints("starts", [0, 0]),
         _ints("ends", [1, 1])], None, (1, 4),
        r"node 'cut' \(Slice\): starts \[0, 0\] slice 2 axes of a rank-1 value"),
    "reshape-float-shape": (
        [helper.make_node("Reshape", ["x", "s"], ["y"], name="rs")],
        [helper.make_tensor("s", TP.FLOAT, [2], [2.0, 2.0])], None, (1, 4),
        r"node 'rs' \(Reshape\): shape must be a 1-D integer tensor, got float32"),
    "folded-split-sizes": (
        [helper.make_node("Split", ["k", "sizes"], ["a", "b"], name="sp"),
         helper.make_node("Add", ["x", "a"], ["y"])],
        [helper.make_tensor("k", TP.FLOAT, [4], [1.0] * 4), _ints("sizes", [3, 3])], None,
        (1, 4), r"node 'sp' \(Split\): split sizes \[3, 3\] must be >= 0 and add up to the "
                r"dim 4"),
    "split-axis": (
        [helper.make_node("Split", ["x", "sizes"], ["a", "y"], name="sp", axis=5)],
        [_ints("sizes", [2, 2])], None, (1, 4),
        r"node 'sp' \(Split\): axis 5 is out of range for rank 2"),
    "clip-min-not-scalar": (
        [helper.make_node("Clip", ["x", "lo"], ["y"], name="clip")],
        [helper.make_tensor("lo", TP.FLOAT, [2], [0.0, 1.0])], None, (1, 4),
        r"node 'clip' \(Clip\): min must be one number, got float32 of shape \(2,\)"),
    "folded-concat-empty-input": (
        [helper.make_node("Concat", ["", "k"], ["c"], name="cat", axis=0),
         helper.make_node("Add", ["x", "c"], ["y"])],
        [helper.make_tensor("k", TP.FLOAT, [4], [1.0] * 4)], None, (1, 4),
        r"node 'cat' \(Concat\): input\(s\) \[0\] are empty, but Concat requires them"),
    "folded-transpose-perm": (
        [helper.make_node("Transpose", ["k"], ["c"], name="tr", perm=[1, 1]),
         helper.make_node("Add", ["x", "c"], ["y"])],
        [helper.make_tensor("k", TP.FLOAT, [1, 4], [1.0] * 4)], None, (1, 4),
        r"node 'tr' \(Transpose\): perm \[1, 1\] is not a permutation of the 2 axes"),
    "folded-range-nan": (
        [helper.make_node("Range", ["a", "b", "d"], ["c"], name="rg"),
         helper.make_node("Add", ["x", "c"], ["y"])],
        [helper.make_tensor(n, TP.FLOAT, [], [v]) for n, v in
         (("a", 0.0), ("b", float("nan")), ("d", 1.0))], None, (1, 4),
        r"node 'rg' \(Range\): Range from 0.0 to nan by 1.0: .* must be finite"),
    "unsqueeze-float-axes": (
        [helper.make_node("Unsqueeze", ["x", "ax"], ["y"], name="un")],
        [helper.make_tensor("ax", TP.FLOAT, [1], [0.0])], None, (1, 4),
        r"node 'un' \(Unsqueeze\): axes must be a 1-D integer tensor, got float32"),
    "layer-norm-scale": (
        [helper.make_node("LayerNormalization", ["x", "s"], ["y"], name="ln")],
        [helper.make_tensor("s", TP.FLOAT, [3], [1.0] * 3)], None, (1, 4),
        r"node 'ln' \(LayerNormalization\): scale 's' of shape \(3,\) does not broadcast to the "
        r"normalized dims \[4\]"),
    "group-norm-groups-0": (
        [helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], name="gn",
                          num_groups=0)],
        [helper.make_tensor(n, TP.FLOAT, [0], []) for n in "sb"], None, (1, 2, 3),
        r"node 'gn' \(GroupNormalization\): num_groups=0 must divide the 2 channels"),
    "pad-long-pads": (
        [helper.make_node("Pad", ["x", "pads"], ["y"], name="pad")],
        [_ints("pads", [1] * 1000)], None, (1, 4),
        r"node 'pad' \(Pad\): pads \[1, 1, 1, 1, 1, 1, 1, 1, \.\.\. \(1000 values\)\] must be 4 "
        r"values, two per axis of \[0, 1\]"),
    "constant-bad-bytes": (
        [helper.make_node("Constant", [], ["c"], name="k", value=_raw_int64([1], 16)),
         helper.make_node("Add", ["x", "c"], ["y"])], [], None, (1, 4),
        r"node 'k' \(Constant\): tensor '': 16 raw bytes for dims \[1\] of int64"),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_a_malformed_constant_input_or_attribute_is_named(tmp_path, case):
    nodes, inits, out_shape, x_shape, message = CASES[case]
    opset = 21 if case.startswith("group-norm") else 17
    path = _save(tmp_path / "m.onnx", _model(nodes, [_vi("x", shape=x_shape)],
                                             [_vi("y", shape=out_shape)], inits, opset=opset))
    with pytest.raises((ModelFileError, UnsupportedModelError), match=message) as info:
        import_onnx(path)
    assert "\n" not in str(info.value) and "Error:" not in str(info.value)


# --- numbers the artifact cannot store -------------------------------------------------------


def test_a_clip_bound_of_infinity_is_no_bound(tmp_path):
    bounds = [helper.make_tensor(n, TP.FLOAT, [], [v]) for n, v in (("lo", 0.0),
                                                                     ("hi", float("inf")))]
    path = _save(tmp_path / "m.onnx", _model([helper.make_node("Clip", ["x", "lo", "hi"], ["y"])],
                                             [_vi("x")], [_vi("y")], bounds))
    m = build_onnx_artifact(path, tmp_path / "m.pha")  # was refused: "attrs.max: float inf"
    assert [n["attrs"] for n in m.graph["nodes"]] == [{"min": 0.0, "max": None}]


def test_an_infinite_attribute_is_refused_at_its_node(tmp_path):
    stats = [helper.make_tensor(n, TP.FLOAT, [2], [1.0, 1.0]) for n in "sbmv"]
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], name="bn",
                            epsilon=float("inf"))
    path = _save(tmp_path / "m.onnx", _model([node], [_vi("x", shape=(1, 2, 3))],
                                             [_vi("y", shape=(1, 2, 3))], stats))
    with pytest.raises(UnsupportedModelError, match=r"node 'bn' \(BatchNormalization\): maps to "
                                                    r"batchnorm with \{'eps': inf\}, which is "
                                                    r"not finite"):
        import_onnx(path)


@pytest.mark.parametrize("elem, values, message", [
    (TP.INT8, [1, 300], "int32_data value 300 is outside -128..127, the range of int8"),
    (TP.UINT16, [-1, 2], "int32_data value -1 is outside 0..65535, the range of uint16"),
    (TP.BOOL, [0, 2], "int32_data value 2 is outside 0..1, the range of bool"),
])
def test_narrow_int32_data_does_not_wrap(tmp_path, elem, values, message):
    """Types ONNX keeps in int32_data (bool, 8/16-bit ints; float16 bit patterns, see
    test_float16.py) are refused when a value is outside their range, not wrapped into it."""
    t = onnx.TensorProto(name="w", data_type=elem, dims=[2])
    t.int32_data.extend(values)
    path = _save(tmp_path / "narrow.onnx",
                 _model([helper.make_node("Cast", ["w"], ["wf"], to=TP.FLOAT, name="c"),
                         helper.make_node("Add", ["x", "wf"], ["y"], name="a")],
                        [_vi("x", shape=(2,))], [_vi("y", shape=(2,))], [t]))
    with pytest.raises(ModelFileError, match=f"tensor 'w': {message}"):
        import_onnx(path)
