"""Float16 ONNX models: refused unless upcast, then imported as float32 (ABI included), golden
outputs from onnxruntime on the upcast model, and the deviation from the float16 original
measured by onnxruntime, reported, and refused beyond the upcast tolerance."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from plugin_host.cli import main
from plugin_host.errors import ModelFileError, ModelImportError, UnsupportedModelError
from plugin_host.executor import Executor
from plugin_host.onnx_import import ReadLimits, build_onnx_artifact, import_onnx
from plugin_host.onnx_import.float_width import find_float16, upcast_float16
from plugins.numpy_backend import NumpyBackend

from .conftest import (EXPORTERS, assert_refused, check_against_onnxruntime, export,
                       import_and_load, onnx, onnxruntime_outputs, torch)

helper, TP, numpy_helper = onnx.helper, onnx.TensorProto, onnx.numpy_helper


class _MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


class _Norm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(8)

    def forward(self, x):
        return self.norm(x)


class _Softmax(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x * 3.0, dim=-1)


class _Embedding(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.table = torch.nn.Embedding(10, 6)

    def forward(self, ids):
        return self.table(ids)


class _ConvCelu(torch.nn.Module):
    """CELU has no float16 in the ONNX spec: the legacy exporter writes it anyway, so
    onnxruntime refuses the float16 model, while the upcast one is valid."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return torch.nn.functional.celu(self.conv(x), 0.5)


class _Mixed(torch.nn.Module):
    """float16 in, float32 inside, float16 out."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = torch.tanh(self.fc(x)).float()
        return (torch.sigmoid(y) * 2.0).half()


MODELS = {
    "mlp": (_MLP, [(2, 8)]),
    "layernorm": (_Norm, [(3, 8)]),
    "softmax": (_Softmax, [(2, 8)]),
    "embedding": (_Embedding, None),
    "conv": (_ConvCelu, [(1, 3, 5, 5)]),
    "mixed": (_Mixed, [(2, 8)]),
}


def _export_half(name, tmp_path, dynamo, fold, optimize) -> Path:
    cls, shapes = MODELS[name]
    torch.manual_seed(0)
    args = [torch.tensor([[1, 3, 9]])] if shapes is None else \
        [torch.randn(*s).half() for s in shapes]
    return export(cls().half(), args, tmp_path / f"{name}.onnx", dynamo=dynamo, fold=fold,
                  optimize=optimize, input_names=["ids" if shapes is None else "x"],
                  output_names=["y"])


def _feeds(loaded, count=3, seed=1):
    rng = np.random.default_rng(seed)
    feeds = []
    for _ in range(count):
        feed = {}
        for spec in loaded.graph.inputs:
            shape = tuple(d if type(d) is int else 1 for d in spec.shape)
            if spec.dtype == "int64":
                feed[spec.name] = rng.integers(0, 10, size=shape).astype(np.int64)
            else:
                feed[spec.name] = (rng.standard_normal(shape) * 3).astype(np.float32)
        feeds.append(feed)
    return feeds


def _saved_upcast(model: Path, rewrite=upcast_float16, find=find_float16) -> Path:
    """``model`` upcast to float32 (by ``rewrite``, leaving nothing ``find`` finds), saved
    beside it."""
    upcast, count = rewrite(onnx.load(model))
    assert count > 0 and find(upcast) is None
    path = model.with_name(model.stem + "-f32.onnx")
    path.write_bytes(upcast.SerializeToString())
    return path


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
@pytest.mark.parametrize("name", list(MODELS))
def test_half_exports_build_upcast_and_match_onnxruntime(name, dynamo, fold, optimize,
                                                         tmp_path, signer):
    model = _export_half(name, tmp_path, dynamo, fold, optimize)
    first = find_float16(onnx.load(model))
    assert first is not None
    assert_refused(model, UnsupportedModelError, first, "--upcast-float16")

    notes: list[str] = []
    manifest, loaded = import_and_load(model, tmp_path / "m.pha", signer, upcast_float16=True,
                                       report=notes.append)
    # the ABI is float32 (an index input stays int64)
    assert {s.dtype for s in loaded.graph.inputs} == \
        ({"int64"} if name == "embedding" else {"float32"})
    assert {s.dtype for s in loaded.graph.outputs} == {"float32"}
    # golden outputs and fresh inputs agree with onnxruntime on the upcast model
    check_against_onnxruntime(_saved_upcast(model), loaded, _feeds(loaded))

    assert notes[0] == "upcast from float16: the artifact's ABI is float32"
    if name == "conv" and not dynamo:
        assert len(notes) == 2 and notes[1].startswith(
            "float16 deviation not compared: onnxruntime cannot run the float16 model: "
            "onnxruntime cannot load the model: ") and "Celu" in notes[1], notes
        return
    assert [n.split("'")[1] for n in notes[1:]] == [s.name for s in loaded.graph.outputs]
    for note in notes[1:]:
        assert "max |diff|" in note and "upcast tolerance rtol 0.01, atol 0.01" in note
    # the artifact stays within the upcast tolerance of the float16 model on fresh inputs
    for feed in _feeds(loaded, 2, seed=7):
        got = _run_upcast(loaded, feed)
        halved = {k: v.astype(np.float16) if v.dtype == np.float32 else v
                  for k, v in feed.items()}
        want = onnxruntime_outputs(model, halved)
        for spec in loaded.graph.outputs:
            np.testing.assert_allclose(got[spec.name], want[spec.name].astype(np.float32),
                                       rtol=1e-2, atol=1e-2, err_msg=spec.name)


def _run_upcast(loaded, feed):
    from plugin_host.executor import Executor
    from plugins.numpy_backend import NumpyBackend

    return Executor(loaded.graph, NumpyBackend()).run(dict(feed))


def test_beyond_the_upcast_tolerance_is_a_typed_error(tmp_path):
    model = _export_half("mlp", tmp_path, False, True, True)
    with pytest.raises(ModelImportError) as info:
        build_onnx_artifact(model, tmp_path / "m.pha", upcast_float16=True,
                            upcast_tolerance=(0.0, 1e-7))
    text = str(info.value)
    assert type(info.value) is ModelImportError and "\n" not in text
    assert "the float32 upcast differs from the float16 model run by onnxruntime" in text
    assert "rtol 0, atol 1e-07" in text and "--upcast-tolerance" in text
    assert not (tmp_path / "m.pha").exists()


def test_a_model_without_float16_is_imported_as_is(tmp_path):
    model = export(_MLP(), [torch.randn(2, 8)], tmp_path / "f32.onnx", dynamo=False)
    notes: list[str] = []
    build_onnx_artifact(model, tmp_path / "m.pha", upcast_float16=True, report=notes.append,
                        latency_ms=100.0)
    assert notes == ["no float16 in the model: nothing upcast"]


# --- float16 in every place, hand-made ----------------------------------------------------------


def _vi(name, elem=TP.FLOAT, shape=(2, 4)):
    return helper.make_tensor_value_info(name, elem, list(shape))


def _model(nodes, inputs, outputs, inits=(), value_info=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits),
                              value_info=list(value_info))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _half(name, value):
    return numpy_helper.from_array(np.asarray(value, np.float16), name)


_W = np.linspace(-2, 2, 4).astype(np.float16)

PLACES = {
    "input": (lambda: _model([helper.make_node("Relu", ["x"], ["y"], name="r")],
                             [_vi("x", TP.FLOAT16)], [_vi("y", TP.FLOAT16)]),
              "input 'x'"),
    "initializer": (lambda: _model(
        [helper.make_node("Cast", ["w"], ["wf"], to=TP.FLOAT, name="c"),
         helper.make_node("Add", ["x", "wf"], ["y"], name="a")],
        [_vi("x")], [_vi("y")], [_half("w", _W)]), "initializer 'w'"),
    "constant": (lambda: _model(
        [helper.make_node("Constant", [], ["k"], value=_half("kv", _W), name="k"),
         helper.make_node("Cast", ["k"], ["kf"], to=TP.FLOAT, name="c"),
         helper.make_node("Mul", ["x", "kf"], ["y"], name="m")],
        [_vi("x")], [_vi("y")]), "node 'k' (Constant), attribute 'value'"),
    "cast": (lambda: _model(
        [helper.make_node("Cast", ["x"], ["h"], to=TP.FLOAT16, name="down"),
         helper.make_node("Cast", ["h"], ["y"], to=TP.FLOAT, name="up")],
        [_vi("x")], [_vi("y")]), "node 'down' (Cast), attribute 'to'"),
    "castlike": (lambda: _model(
        [helper.make_node("CastLike", ["x", "w"], ["h"], name="like"),
         helper.make_node("Cast", ["h"], ["y"], to=TP.FLOAT, name="up")],
        [_vi("x")], [_vi("y")], [_half("w", [1.0])]), "initializer 'w'"),
    "constantofshape": (lambda: _model(
        [helper.make_node("Shape", ["x"], ["s"], name="shape"),
         helper.make_node("ConstantOfShape", ["s"], ["z"], value=_half("v", [0.5]),
                          name="fill"),
         helper.make_node("Cast", ["z"], ["zf"], to=TP.FLOAT, name="c"),
         helper.make_node("Add", ["x", "zf"], ["y"], name="a")],
        [_vi("x")], [_vi("y")]), "node 'fill' (ConstantOfShape), attribute 'value'"),
    "value_info": (lambda: _model(
        [helper.make_node("Relu", ["x"], ["r"], name="r"),
         helper.make_node("Relu", ["r"], ["y"], name="s")],
        [_vi("x")], [_vi("y")], value_info=[_vi("r", TP.FLOAT16)]), "value_info 'r'"),
}


@pytest.mark.parametrize("place", list(PLACES))
def test_float16_anywhere_is_refused_naming_it_and_upcast_imports(place, tmp_path, signer):
    make, where = PLACES[place]
    path = tmp_path / f"{place}.onnx"
    path.write_bytes(make().SerializeToString())
    assert_refused(path, UnsupportedModelError, f"float16 in {where}: ",
                   "import with --upcast-float16 (upcast_float16=True)")

    _, loaded = import_and_load(path, tmp_path / "m.pha", signer, upcast_float16=True)
    assert {s.dtype for s in [*loaded.graph.inputs, *loaded.graph.outputs]} == {"float32"}
    check_against_onnxruntime(_saved_upcast(path), loaded, _feeds(loaded))


def test_upcast_is_exact_and_leaves_the_original_alone():
    values = np.array([0.0, -0.0, 65504, -65504, 6e-8, 1 / 3, np.inf, -np.inf], np.float16)
    model = _model([helper.make_node("Constant", [], ["k"], value=_half("kv", values)),
                    helper.make_node("Add", ["w", "k"], ["y"])],
                   [], [_vi("y", TP.FLOAT16, (8,))], [_half("w", values)])
    before = model.SerializeToString()
    upcast, count = upcast_float16(model)
    assert model.SerializeToString() == before and count == 3
    assert find_float16(upcast) is None
    w = numpy_helper.to_array(upcast.graph.initializer[0])
    k = numpy_helper.to_array(upcast.graph.node[0].attribute[0].t)
    for got in (w, k):
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, values.astype(np.float32))
        assert np.signbit(got[1])


def test_float16_in_a_subgraph_and_a_function_is_found_and_upcast():
    branch = helper.make_graph(
        [helper.make_node("Constant", [], ["c"], value=_half("cv", [2.0]), name="inner")],
        "then", [], [_vi("c", TP.FLOAT16, (1,))])
    other = helper.make_graph(
        [helper.make_node("Constant", [], ["d"], value=_half("dv", [3.0]), name="inner2")],
        "else", [], [_vi("d", TP.FLOAT16, (1,))])
    model = _model([helper.make_node("If", ["b"], ["o"], then_branch=branch,
                                     else_branch=other, name="if")],
                   [_vi("b", TP.BOOL, (1,))], [_vi("o", TP.FLOAT, (1,))])
    assert find_float16(model) == "output 'd' in node 'if' (If), attribute 'else_branch'"
    upcast, count = upcast_float16(model)
    assert count == 4 and find_float16(upcast) is None
    onnx.checker.check_model(upcast)

    function = helper.make_function("local", "Half", ["a"], ["z"],
                                    [helper.make_node("Cast", ["a"], ["z"], to=TP.FLOAT16)],
                                    [helper.make_opsetid("", 17)])
    model = _model([helper.make_node("Half", ["x"], ["y"], domain="local", name="h")],
                   [_vi("x")], [_vi("y", TP.FLOAT16)])
    model.functions.append(function)
    model.graph.ClearField("output")
    model.graph.output.append(_vi("y"))
    assert find_float16(model) == \
        "node 'z' (Cast) in function 'Half', attribute 'to'"
    upcast, _ = upcast_float16(model)
    assert upcast.functions[0].node[0].attribute[0].i == TP.FLOAT


# --- hostile float16 tensors ----------------------------------------------------------------


def _hostile(tmp_path, tensor, constant: bool) -> Path:
    """A model adding float16 ``tensor`` (a Constant's value or an initializer) to x."""
    nodes = [helper.make_node("Cast", ["kv"], ["kf"], to=TP.FLOAT, name="c"),
             helper.make_node("Add", ["x", "kf"], ["y"], name="a")]
    if constant:
        nodes.insert(0, helper.make_node("Constant", [], ["kv"], value=tensor, name="k"))
    model = _model(nodes, [_vi("x")], [_vi("y")], [] if constant else [tensor])
    path = tmp_path / "hostile.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def _long_raw():
    t = _half("kv", _W)
    t.raw_data += b"\0"  # the checker refuses short raw data, not long
    return t


def _wrapping_bits():
    t = onnx.TensorProto(name="kv", data_type=TP.FLOAT16, dims=[4])
    t.int32_data.extend([15360, 70000, 0, 0])  # 1.0, then a bit pattern past 16 bits
    return t


@pytest.mark.parametrize("constant", [False, True], ids=["initializer", "constant"])
@pytest.mark.parametrize("tensor, limits, message", [
    (_long_raw, ReadLimits(), "tensor 'kv': 9 raw bytes for dims [4] of float16 (expected 8)"),
    (_wrapping_bits, ReadLimits(), "tensor 'kv': int32_data value 70000 is outside 0..65535, "
                                   "the range of float16 there"),
    (lambda: _half("kv", _W), ReadLimits(max_tensor_elements=3),
     "tensor 'kv': 4 elements exceed the cap of 3"),
])
def test_hostile_float16_tensors_are_one_line_refusals(tmp_path, tensor, limits, message,
                                                       constant):
    path = _hostile(tmp_path, tensor(), constant)
    with pytest.raises(ModelImportError) as info:
        build_onnx_artifact(path, tmp_path / "m.pha", upcast_float16=True, limits=limits)
    assert type(info.value) is ModelFileError, info.value
    assert message in str(info.value) and "\n" not in str(info.value)


def test_upcast_over_the_file_cap_is_refused(tmp_path):
    """float32 takes twice float16's bytes: the rewritten model is capped like a file."""
    path = _hostile(tmp_path, _half("kv", np.zeros(4096)), False)
    size = path.stat().st_size
    with pytest.raises(ModelFileError, match="upcast to float32 takes .* over the cap"):
        import_onnx(path, upcast_float16=True, limits=ReadLimits(max_file_bytes=size + 100))


# --- the command line ----------------------------------------------------------------------


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def half_mlp(tmp_path_factory):
    return _export_half("mlp", tmp_path_factory.mktemp("half"), False, True, True)


def test_cli_builds_a_float16_model_with_the_option(half_mlp, tmp_path, capsys):
    code, out, err = _run(capsys, "build", "--onnx", half_mlp, "--out", tmp_path / "m.pha",
                          "--upcast-float16", "--upcast-tolerance", "2e-2,3e-2")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("built ") and lines[1] == \
        "upcast from float16: the artifact's ABI is float32"
    assert lines[2].startswith("float16 deviation of output ") and \
        lines[2].endswith("(upcast tolerance rtol 0.02, atol 0.03)")


def test_cli_refuses_a_float16_model_without_the_option(half_mlp, tmp_path, capsys):
    code, _, err = _run(capsys, "build", "--onnx", half_mlp, "--out", tmp_path / "m.pha")
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert "float16 in input " in err and "--upcast-float16" in err


@pytest.mark.parametrize("argv, message", [
    (["--upcast-float16", "--upcast-tolerance", "1e-2"], "--upcast-tolerance '1e-2': expected"),
    (["--upcast-float16", "--upcast-tolerance", "a,b"], "--upcast-tolerance 'a,b': expected"),
    (["--upcast-float16", "--upcast-tolerance=-1,0"], "'-1,0': expected RTOL,ATOL"),
    (["--upcast-float16", "--upcast-tolerance", "nan,1"], "'nan,1': expected RTOL,ATOL"),
    (["--upcast-float16", "--upcast-tolerance", "1,inf"], "'1,inf': expected RTOL,ATOL"),
    (["--upcast-float16", "--upcast-tolerance", "1,2,3"], "'1,2,3': expected RTOL,ATOL"),
    (["--upcast-tolerance", "1e-2,1e-2"], "--upcast-tolerance goes with --upcast-float16"),
])
def test_cli_bad_upcast_options_are_usage_errors(half_mlp, tmp_path, capsys, argv, message):
    code, _, err = _run(capsys, "build", "--onnx", half_mlp, "--out", tmp_path / "m.pha",
                        *argv)
    assert code == 1 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "m.pha").exists()


@pytest.mark.parametrize("flag", [["--upcast-float16"], ["--upcast-tolerance", "1,1"]])
def test_cli_upcast_options_go_with_onnx(tmp_path, capsys, flag):
    code, _, err = _run(capsys, "build", "--demo", "--out", tmp_path / "d.pha", *flag)
    assert code == 1 and "go with --onnx" in err


def test_cli_beyond_the_upcast_tolerance(half_mlp, tmp_path, capsys):
    code, _, err = _run(capsys, "build", "--onnx", half_mlp, "--out", tmp_path / "m.pha",
                        "--upcast-float16", "--upcast-tolerance", "0,0")
    assert code == 1 and "the float32 upcast differs from the float16 model" in err


def test_build_help_names_the_options(capsys):
    with pytest.raises(SystemExit):
        main(["build", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--upcast-float16 with --onnx: import a float16 model as float32" in out
    assert "--upcast-tolerance RTOL,ATOL" in out and "(default: 1e-2,1e-2 from float16" in out




def test_float16_in_a_subgraph_attribute_is_named_and_typed(tmp_path):
    """A float16 Constant hidden in an If branch: refused naming the branch without the
    option, a typed one-line error; with it, rewritten, and the If on its run-time condition
    yields the constant either way."""
    branch = helper.make_graph(
        [helper.make_node("Constant", [], ["c"], value=_half("cv", [2.0]), name="inner")],
        "then", [], [_vi("c", TP.FLOAT, (1,))])
    path = tmp_path / "if.onnx"
    path.write_bytes(_model([helper.make_node("If", ["b"], ["y"], then_branch=branch,
                                              else_branch=branch, name="if")],
                            [_vi("b", TP.BOOL, (1,))], [_vi("y", TP.FLOAT, (1,))])
                     .SerializeToString())
    assert_refused(path, UnsupportedModelError, "float16 in node 'inner' (Constant) in node "
                   "'if' (If), attribute 'else_branch', attribute 'value'", "--upcast-float16")
    graph = import_onnx(path, upcast_float16=True).graph
    for b in (True, False):
        y = Executor(graph, NumpyBackend()).run({"b": np.array([b])})["y"]
        assert y.dtype == np.float32 and y.tolist() == [2.0]


def test_a_float16_model_of_an_older_opset_is_upcast_then_upgraded(tmp_path, signer):
    """Upcast first, then upgrade: the reference runs the float32 rewrite at the opset as
    given, and the float16 original is compared as given too."""
    torch.manual_seed(0)
    model = export(_MLP().half(), [torch.randn(2, 8).half()], tmp_path / "old.onnx",
                   dynamo=False, opset=11, input_names=["x"], output_names=["y"])
    assert onnx.load(model).opset_import[0].version == 11
    notes: list[str] = []
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer, upcast_float16=True,
                                report=notes.append)
    assert notes[0].startswith("opset 11 upgraded to 13")
    assert notes[1] == "upcast from float16: the artifact's ABI is float32"
    assert len(notes) == 3 and "max |diff|" in notes[2]
    assert {s.dtype for s in loaded.graph.inputs + loaded.graph.outputs} == {"float32"}
    upcast = _saved_upcast(model)
    assert onnx.load(upcast).opset_import[0].version == 11
    check_against_onnxruntime(upcast, loaded, _feeds(loaded))
