"""What the importer refuses, each with a typed error naming what was wrong and where: an
unsupported op (naming node and op), attribute or dtype; malformed and hostile files; external
data outside the model's folder. And an Embedding imported from a Gather refuses out-of-range
indices at the executor's entry (the host validates indices; ONNX would accept negative ones)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from plugin_host.errors import (IndexRangeError, ModelFileError, ModelImportError, PluginHostError,
                                UnsupportedModelError)
from plugin_host.executor import Executor
from plugin_host.onnx_import import ReadLimits, build_onnx_artifact, import_onnx
from plugins.numpy_backend import NumpyBackend

from .conftest import export, import_and_load, onnx, torch

helper, TP = onnx.helper, onnx.TensorProto


def _save(path: Path, nodes, inputs, outputs, inits=(), opset=17) -> Path:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    path.write_bytes(model.SerializeToString())  # as is: onnx.save would touch external data
    return path


def _vi(name, elem=TP.FLOAT, shape=(1, 4)):
    return helper.make_tensor_value_info(name, elem, list(shape))


def test_unsupported_op_names_node_and_op(tmp_path):
    path = _save(tmp_path / "m.onnx", [
        helper.make_node("Relu", ["x"], ["r"], name="act"),
        helper.make_node("StringNormalizer", ["r"], ["y"], name="wave")], [_vi("x")], [_vi("y")])
    with pytest.raises(UnsupportedModelError) as info:
        import_onnx(path)
    assert info.value.node == "wave" and info.value.op == "StringNormalizer"
    assert "node 'wave' (StringNormalizer)" in str(info.value)
    assert "not supported" in str(info.value)


def test_op_supported_only_on_constants_says_so(tmp_path):
    path = _save(tmp_path / "m.onnx", [helper.make_node("Range", ["n", "n", "n"], ["y"],
                                                        name="steps")],
                 [_vi("n", TP.INT64, ())], [_vi("y", TP.INT64, (4,))])
    with pytest.raises(UnsupportedModelError,
                       match=r"node 'steps' \(Range\).*constant inputs"):
        import_onnx(path)
    path = _save(tmp_path / "c.onnx", [helper.make_node("ConstantOfShape", ["shape"], ["y"],
                                                        name="wide")],
                 [_vi("shape", TP.INT64, (2,))], [_vi("y")])
    with pytest.raises(UnsupportedModelError,  # neither folded nor read from a Shape
                       match=r"node 'wide' \(ConstantOfShape\): shape 'shape' must be a "
                             r"constant \(known at import\), but it is computed at run time"):
        import_onnx(path)


def test_unsupported_op_error_names_every_unsupported_op_type(tmp_path):
    """One build names all the op types no mapping takes, not only the first: an integrator
    learns the whole list at once."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="act"),
             helper.make_node("Bernoulli", ["r"], ["h"], name="coin"),
             helper.make_node("StringNormalizer", ["h"], ["t"]),  # unnamed: named by its output
             helper.make_node("Bernoulli", ["t"], ["h2"], name="coin2"),
             helper.make_node("Range", ["s", "s", "s"], ["y"], name="r")]  # folds: not listed
    path = _save(tmp_path / "m.onnx", nodes, [_vi("x"), _vi("s", shape=())], [_vi("y")])
    with pytest.raises(UnsupportedModelError) as info:
        import_onnx(path)
    message = str(info.value)
    assert message.startswith("node 'coin' (Bernoulli): op 'Bernoulli' is not supported (random "
                              "numbers, which a model exported in eval mode does not draw: its "
                              "dropout exports as nothing); nor are StringNormalizer (1 node, "
                              "'t') elsewhere in the model ("), message
    assert "Range" not in message

    many = [helper.make_node(op, ["x", "x"] if op == "NonMaxSuppression"
                             else ["x"], [f"y{i}"], name=f"n{i}")
            for i, op in enumerate(["StringNormalizer", "OptionalGetElement", "Optional",
                                    "RegexFullMatch", "OptionalGetElement", "NonMaxSuppression",
                                    "RandomUniformLike", "Bernoulli", "Multinomial",
                                    "StringNormalizer", "OptionalGetElement",
                                    "OptionalHasElement", "RandomNormalLike"])]
    path = _save(tmp_path / "many.onnx", many, [_vi("x")], [_vi(f"y{i}") for i in range(13)],
                 opset=20)
    with pytest.raises(UnsupportedModelError) as info:
        import_onnx(path)
    head = str(info.value)
    assert "OptionalGetElement (3 nodes, first 'n1')" in head, head
    assert "and 1 more op type(s)" in head, head



def test_unsupported_attribute_names_it(tmp_path):
    x = _vi("x", shape=(2, 3, 4))
    scale = [helper.make_tensor("s", TP.FLOAT, [4], [1.0] * 4)]
    node = helper.make_node("LayerNormalization", ["x", "s"], ["y"], name="ln", stash_type=0)
    path = _save(tmp_path / "m.onnx", [node], [x], [_vi("y", shape=(2, 3, 4))], scale)
    with pytest.raises(UnsupportedModelError, match=r"node 'ln' \(LayerNormalization\): "
                                                    r"attribute stash_type=0"):
        import_onnx(path)


def test_unsupported_dtype_is_refused(tmp_path):
    path = _save(tmp_path / "m.onnx", [helper.make_node("Identity", ["x"], ["y"])],
                 [_vi("x", TP.COMPLEX64)], [_vi("y", TP.COMPLEX64)])
    with pytest.raises(UnsupportedModelError, match="'x'.*not an ABI dtype"):
        import_onnx(path)


def test_custom_domain_is_refused(tmp_path):
    node = helper.make_node("Mystery", ["x"], ["y"], name="m", domain="com.example")
    graph = helper.make_graph([node], "g", [_vi("x")], [_vi("y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.example", 1)])
    onnx.save(model, tmp_path / "m.onnx")
    with pytest.raises(UnsupportedModelError, match=r"node 'm' \(Mystery\).*com.example"):
        import_onnx(tmp_path / "m.onnx")


@pytest.fixture
def linear_model(tmp_path) -> Path:
    return export(torch.nn.Linear(4, 3), [torch.randn(1, 4)], tmp_path / "lin.onnx",
                  dynamo=False, input_names=["x"], output_names=["y"])


@pytest.mark.parametrize("mangle", [
    pytest.param(lambda b: b[: len(b) // 2], id="truncated"),
    pytest.param(lambda b: b"", id="empty"),
    pytest.param(lambda b: bytes(np.random.default_rng(0).integers(0, 256, 4096, np.uint8)),
                 id="garbage"),
    pytest.param(lambda b: b"\x0a\xff\xff\xff\xff\x0f" + b"x" * 64, id="huge-length"),
])
def test_malformed_file_is_a_typed_error(linear_model, mangle, tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(mangle(linear_model.read_bytes()))
    with pytest.raises(ModelFileError):
        import_onnx(bad)


def test_file_size_is_capped_before_parsing(linear_model):
    with pytest.raises(ModelFileError, match="exceed the cap"):
        import_onnx(linear_model, limits=ReadLimits(max_file_bytes=100))


def test_tensor_size_is_capped(linear_model):
    with pytest.raises(ModelFileError, match="elements exceed the cap"):
        import_onnx(linear_model, limits=ReadLimits(max_tensor_elements=5))


def test_constant_of_shape_bomb_is_refused_before_allocating(tmp_path):
    shape = helper.make_tensor("shape", TP.INT64, [3], [1 << 20, 1 << 20, 1 << 20])
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["big"], name="bomb"),
             helper.make_node("Add", ["x", "big"], ["y"], name="add")]
    path = _save(tmp_path / "m.onnx", nodes, [_vi("x")], [_vi("y")], [shape])
    with pytest.raises(ModelFileError, match=r"node 'bomb' \(ConstantOfShape\).*cap"):
        import_onnx(path)


def _external_model(tmp_path: Path, location: str) -> Path:
    w = helper.make_tensor("w", TP.FLOAT, [4, 3], np.arange(12, dtype=np.float32).tobytes(),
                           raw=True)
    w.data_location = TP.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", "48")):
        entry = w.external_data.add()
        entry.key, entry.value = k, v
    return _save(tmp_path / "ext.onnx", [helper.make_node("MatMul", ["x", "w"], ["y"])],
                 [_vi("x")], [_vi("y", shape=(1, 3))], [w])


def test_external_data_is_refused_by_default(tmp_path):
    (tmp_path / "w.bin").write_bytes(np.arange(12, dtype=np.float32).tobytes())
    with pytest.raises(ModelFileError) as info:
        import_onnx(_external_model(tmp_path, "w.bin"))
    text = str(info.value)  # the API's own switch, not the command line's
    assert text == (f"{tmp_path / 'ext.onnx'}: tensor 'w' keeps its data in the external file "
                    f"'w.bin'; external data other than the model's own 'ext.onnx.data' is "
                    f"refused unless allowed: allow_external_data=True reads it from the "
                    f"model's folder")


def test_the_models_own_data_file_is_read_by_default(tmp_path):
    """ext.onnx's own data file is ext.onnx.data (torch's exporter writes the weights there):
    read without allow_external_data, and held to the folder like any other."""
    values = np.arange(12, dtype=np.float32)
    (tmp_path / "ext.onnx.data").write_bytes(values.tobytes())
    imported = import_onnx(_external_model(tmp_path, "ext.onnx.data"))
    weight = next(iter(imported.graph.tensors.values()))
    np.testing.assert_array_equal(weight, values.reshape(4, 3).T)
    inner = tmp_path / "model"  # a link out of the folder under the name is no own data file
    inner.mkdir()
    (inner / "ext.onnx.data").symlink_to(tmp_path / "ext.onnx.data")
    with pytest.raises(ModelFileError, match=r"external file 'ext.onnx.data' is not a regular "
                                             r"file inside"):
        import_onnx(_external_model(inner, "ext.onnx.data"))
    with pytest.raises(ModelFileError, match="other than the model's own 'ext.onnx.data'"):
        import_onnx(_external_model(inner, "sub/ext.onnx.data"))  # the name, not its ending


def test_external_data_inside_the_folder_is_read(tmp_path):
    (tmp_path / "w.bin").write_bytes(np.arange(12, dtype=np.float32).tobytes())
    imported = import_onnx(_external_model(tmp_path, "w.bin"), allow_external_data=True)
    weight = next(iter(imported.graph.tensors.values()))
    np.testing.assert_array_equal(weight, np.arange(12, dtype=np.float32).reshape(4, 3).T)


@pytest.mark.parametrize("location", ["../w.bin", "/etc/passwd", "sub/../../w.bin", "link.bin"])
def test_external_data_outside_the_folder_is_refused(tmp_path, location):
    inner = tmp_path / "model"
    inner.mkdir()
    (tmp_path / "w.bin").write_bytes(np.arange(12, dtype=np.float32).tobytes())
    (inner / "link.bin").symlink_to(tmp_path / "w.bin")
    with pytest.raises(ModelFileError, match="inside"):
        import_onnx(_external_model(inner, location), allow_external_data=True)


def test_embedding_gather_refuses_out_of_range_indices_at_entry(tmp_path, signer):
    model = export(torch.nn.Embedding(5, 3), [torch.tensor([0, 4])], tmp_path / "emb.onnx",
                   dynamo=True, input_names=["ids"], output_names=["vec"])
    _, loaded = import_and_load(model, tmp_path / "emb.pha", signer)
    executor = Executor(loaded.graph, NumpyBackend())
    assert executor.index_inputs == {"ids": 5}
    for bad in ([0, 5], [-1, 2]):  # onnxruntime would accept -1 (it wraps); the host refuses
        with pytest.raises(IndexRangeError) as info:
            executor.run({"ids": np.array(bad, np.int64)})
        assert "'ids'" in str(info.value) and info.value.vocab_size == 5


def test_a_golden_case_the_imported_graph_refuses_is_a_build_refusal(tmp_path):
    """An Embedding (a Gather from a constant table) at ArgMax - 4: ids in [-4, -1], which
    onnxruntime counts from the end and the ABI refuses, as every Embedding's id outside
    [0, vocab). The build says so, typed, and writes nothing."""
    nodes = [helper.make_node("ArgMax", ["x"], ["a"], axis=1, keepdims=0, name="top"),
             helper.make_node("Sub", ["a", "four"], ["i"], name="back"),
             helper.make_node("Gather", ["table", "i"], ["y"], axis=0, name="pick")]
    four = onnx.numpy_helper.from_array(np.array(4, np.int64), "four")
    table = onnx.numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3),
                                         "table")
    path = _save(tmp_path / "neg.onnx", nodes, [_vi("x", shape=(3, 4))],
                 [_vi("y", shape=(3, 3))], inits=[four, table])
    with pytest.raises(ModelImportError) as info:
        build_onnx_artifact(path, tmp_path / "neg.pha")
    text = str(info.value)
    assert text.startswith("golden case 0: onnxruntime runs the model, the imported graph "
                           "refuses it"), text
    assert "pick" in text and "outside [0, 4)" in text, text
    assert text.endswith("(the ABI refuses an index there that onnxruntime takes: an "
                         "Embedding's outside [0, vocab), a negative one of which onnxruntime "
                         "counts from the end)"), text
    assert not (tmp_path / "neg.pha").exists()


def test_a_golden_size_too_short_for_a_pool_is_a_build_refusal_naming_the_node(tmp_path):
    """A classifier's 2 x 2 max pool over a run-time image size, its golden cases at 1 x 1:
    onnxruntime computes a window past the input there, the imported graph refuses it on
    both backends (the ABI's pool rule); the build names the node and writes nothing; at
    sizes that hold the window it builds."""
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], strides=[2, 2],
                              name="pool"),
             helper.make_node("GlobalAveragePool", ["p"], ["y"], name="mean")]
    path = _save(tmp_path / "pool.onnx", nodes, [_vi("x", shape=(1, 2, "h", "w"))],
                 [_vi("y", shape=(1, 2, 1, 1))])
    with pytest.raises(ModelImportError) as info:
        build_onnx_artifact(path, tmp_path / "pool.pha")
    assert str(info.value).startswith(
        "golden case 0: onnxruntime runs the model, the imported graph refuses it at node "
        "'pool': max_pool: spatial axis 0 of x shape (1, 2, 1, 1) is 1 (+ padding 0+0), "
        "smaller than the window 1*(2-1)+1; output size would be 0"), str(info.value)
    assert not (tmp_path / "pool.pha").exists()
    build_onnx_artifact(path, tmp_path / "pool.pha", golden_dims={"h": [2, 5], "w": [3, 2]})


def test_state_pair_must_name_an_input_and_an_output(linear_model, tmp_path):
    with pytest.raises(UnsupportedModelError, match="state h=y"):
        build_onnx_artifact(linear_model, tmp_path / "x.pha", state={"h": "y"})
    assert not (tmp_path / "x.pha").exists()


def test_every_refusal_is_one_tree(tmp_path):
    assert issubclass(UnsupportedModelError, PluginHostError)
    assert issubclass(ModelFileError, PluginHostError)


def test_broadcast_bomb_in_folding_is_refused_before_allocating(tmp_path):
    col = helper.make_tensor("col", TP.FLOAT, [1 << 16, 1], np.zeros(1 << 16, np.float32))
    row = helper.make_tensor("row", TP.FLOAT, [1, 1 << 16], np.zeros(1 << 16, np.float32))
    nodes = [helper.make_node("Mul", ["col", "row"], ["big"], name="outer"),
             helper.make_node("Add", ["x", "big"], ["y"], name="add")]
    path = _save(tmp_path / "m.onnx", nodes, [_vi("x")], [_vi("y")], [col, row])
    with pytest.raises(ModelFileError, match=r"node 'outer' \(Mul\).*broadcast.*cap"):
        import_onnx(path, limits=ReadLimits(max_tensor_elements=1 << 20))


def test_mutated_files_are_imported_or_refused_never_a_traceback(tmp_path):
    """Random byte flips, cuts and insertions in a small real model: every mutant imports or is
    refused with an error of the project's tree."""
    module = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3), torch.nn.BatchNorm2d(3),
                                 torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(12, 4))
    source = export(module, [torch.randn(1, 2, 4, 4)], tmp_path / "m.onnx", dynamo=False,
                    fold=False, input_names=["x"], output_names=["y"]).read_bytes()
    rng = np.random.default_rng(6)
    outcomes = {"imported": 0, "refused": 0}
    for i in range(300):
        data = bytearray(source)
        for _ in range(int(rng.integers(1, 4))):
            at = int(rng.integers(0, len(data)))
            kind = int(rng.integers(0, 3))
            if kind == 0:
                data[at] ^= 1 << int(rng.integers(0, 8))
            elif kind == 1:
                data = data[:at] + data[at + int(rng.integers(1, 16)):]
            else:
                data[at:at] = bytes(rng.integers(0, 256, int(rng.integers(1, 8)), np.uint8))
        path = tmp_path / f"mutant{i}.onnx"
        path.write_bytes(bytes(data))
        try:
            import_onnx(path)
            outcomes["imported"] += 1
        except PluginHostError:
            outcomes["refused"] += 1
    assert outcomes["refused"] > 100 and outcomes["imported"] > 0, outcomes


def test_an_unsupported_op_points_at_the_list_of_those_that_map(tmp_path, capsys):
    """The refusal says how many op types map and where they are listed (not the list: it
    would be thousands of characters on one line); the listing option prints them without
    building anything."""
    from plugin_host.cli import main
    from plugin_host.onnx_import.ops import supported_ops

    path = _save(tmp_path / "m.onnx", [helper.make_node("StringNormalizer", ["x"], ["y"],
                                                        name="norm")], [_vi("x")], [_vi("y")])
    with pytest.raises(UnsupportedModelError) as info:
        import_onnx(path)
    message = str(info.value)
    mapped, folded = supported_ops()
    assert message == (f"node 'norm' (StringNormalizer): op 'StringNormalizer' is not "
                       f"supported ({len(mapped)} op types map, {len(folded)} more on "
                       f"constants only: 'plugin-host build --list-onnx-ops' lists them)")

    with pytest.raises(SystemExit) as exit_:
        main(["build", "--list-onnx-ops"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0
    assert f"mapped ({len(mapped)}): " in out and ", Relu, " in out and "LSTM" in out
    assert "com.microsoft.MatMulNBits" in out and "Loop" in out
    assert "on constants only, folded at import" in out and "NonZero" in out
