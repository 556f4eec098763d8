"""bfloat16 ONNX models: refused unless upcast, then imported as float32 (ABI included), golden
outputs from onnxruntime on the upcast model. onnxruntime's CPU provider computes few ops in
bfloat16, so the deviation from the original is measured where it can run it and the summary
says why not elsewhere; torch, which computes in bfloat16, is the reference the upcast is held
to here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from plugin_host.cli import main
from plugin_host.errors import (ModelFileError, ModelImportError, UnsupportedModelError,
                                 UsageError)
from plugin_host.executor import Executor
from plugin_host.onnx_import import ReadLimits, build_onnx_artifact, import_onnx
from plugin_host.onnx_import.float_width import (DEFAULT_BFLOAT16_UPCAST_TOLERANCE,
                                                 find_bfloat16, upcast_bfloat16)
from plugin_host.onnx_import.bfloat16_runs import emulated
from plugin_host.onnx_import.reader import to_array
from plugins.numpy_backend import NumpyBackend

from .conftest import (EXPORTERS, assert_refused, check_against_onnxruntime, export,
                       import_and_load, onnx, torch)
from .test_float16 import _MLP, _Norm, _run, _vi
from .test_float16 import _model as _float16_model
from .test_float16 import _saved_upcast as _saved_float16_upcast

helper, TP, numpy_helper = onnx.helper, onnx.TensorProto, onnx.numpy_helper
ml_dtypes = pytest.importorskip("ml_dtypes")
onnxruntime = pytest.importorskip("onnxruntime")  # onnx's own dependency: numpy's bfloat16


class _Conv(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.Conv2d(8, 4, 3)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


class _Blocks(torch.nn.Module):
    """Two pre-norm residual tanh-GELU blocks."""

    def __init__(self, width=16):
        super().__init__()
        self.norms = torch.nn.ModuleList(torch.nn.LayerNorm(width) for _ in range(2))
        self.ups = torch.nn.ModuleList(torch.nn.Linear(width, 4 * width) for _ in range(2))
        self.downs = torch.nn.ModuleList(torch.nn.Linear(4 * width, width) for _ in range(2))

    def forward(self, x):
        for norm, up, down in zip(self.norms, self.ups, self.downs):
            x = x + down(torch.nn.functional.gelu(up(norm(x)), approximate="tanh"))
        return x


MODELS = {"mlp": (_MLP, (2, 8)), "layernorm": (_Norm, (3, 8)), "conv": (_Conv, (1, 3, 8, 8)),
          "blocks": (_Blocks, (2, 5, 16))}


def _module(name):
    torch.manual_seed(0)
    return MODELS[name][0]().eval()


def _export_brain(name, tmp_path, dynamo, fold, optimize) -> Path:
    return export(_module(name).bfloat16(), [torch.randn(*MODELS[name][1]).bfloat16()],
                  tmp_path / f"{name}.onnx", dynamo=dynamo, fold=fold, optimize=optimize,
                  input_names=["x"], output_names=["y"])


def _feeds(loaded, count=3, seed=1):
    """Standard-normal float32 inputs already on bfloat16's grid: the original and the
    upcast then see the same values."""
    rng = np.random.default_rng(seed)
    return [{s.name: rng.standard_normal(tuple(s.shape)).astype(ml_dtypes.bfloat16)
             .astype(np.float32) for s in loaded.graph.inputs} for _ in range(count)]


def _saved_upcast(model: Path) -> Path:
    return _saved_float16_upcast(model, upcast_bfloat16, find_bfloat16)


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
@pytest.mark.parametrize("name", list(MODELS))
def test_bfloat16_exports_build_upcast_and_hold_to_torch(name, dynamo, fold, optimize,
                                                         tmp_path, signer):
    model = _export_brain(name, tmp_path, dynamo, fold, optimize)
    first = find_bfloat16(onnx.load(model))
    assert first is not None
    assert_refused(model, UnsupportedModelError, f"bfloat16 in {first}: ",
                   "import with --upcast-bfloat16 (upcast_bfloat16=True)")

    notes: list[str] = []
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer, upcast_bfloat16=True,
                                report=notes.append)
    assert {s.dtype for s in [*loaded.graph.inputs, *loaded.graph.outputs]} == {"float32"}
    # golden outputs and fresh inputs agree with onnxruntime on the upcast model
    feeds = _feeds(loaded)
    check_against_onnxruntime(_saved_upcast(model), loaded, feeds)

    assert notes[0] == "upcast from bfloat16: the artifact's ABI is float32"
    if name != "layernorm":  # onnxruntime has a bfloat16 LayerNormalization, no Gemm or Conv
        assert notes.pop(1).startswith(
            "bfloat16 model emulated: each op computed in float32, every value the model "
            "holds in bfloat16 rounded to it (onnxruntime cannot run the bfloat16 model: "), notes
    assert len(notes) == 2 and notes[1].startswith(
        "bfloat16 deviation of output 'y': max |diff| ") and notes[1].endswith(
        "(upcast tolerance rtol 0.1, atol 0.1)"), notes

    # torch as the reference: the artifact computes the bfloat16 weights in float32 exactly
    # as torch does in float32 and stays within the default upcast tolerance of torch's own
    # bfloat16 run; the emulation the build compares with deviates from it as much as that run
    rtol, atol = DEFAULT_BFLOAT16_UPCAST_TOLERANCE
    wide, narrow = _module(name).bfloat16().float(), _module(name).bfloat16()
    original = onnx.load(model)
    emulation, inputs = emulated(original, upcast_bfloat16(original)[0], {"x": "x"})
    session = onnxruntime.InferenceSession(emulation.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    for feed in feeds:
        got = Executor(loaded.graph, NumpyBackend()).run(dict(feed))["y"]
        x = torch.from_numpy(feed["x"])
        with torch.no_grad():
            exact, brain = wide(x).numpy(), narrow(x.bfloat16()).float().numpy()
        np.testing.assert_allclose(got, exact, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got, brain, rtol=rtol, atol=atol)
        assert not np.array_equal(got, brain)  # the premise: bfloat16 computes otherwise
        like = session.run(["y"], {inputs["x"]: feed["x"]})[0]
        ratio = np.abs(like - got).max() / np.abs(brain - got).max()
        assert 0.5 <= ratio <= 2.0, ratio  # measured: 1.0 (the last rounding is the largest)


# --- bfloat16 in every place, hand-made ---------------------------------------------------------


def _model(nodes, inputs, outputs, inits=()):
    return _float16_model(nodes, inputs, outputs, inits, opset=21)


def _brain(name, value, raw=True):
    """A bfloat16 tensor: raw little-endian bytes, or (``raw=False``) 16-bit patterns in
    int32_data."""
    bits = np.asarray(value, np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)
    t = onnx.TensorProto(name=name, data_type=TP.BFLOAT16, dims=list(bits.shape))
    if raw:
        t.raw_data = bits.astype("<u2").tobytes()
    else:
        t.int32_data.extend(int(b) for b in bits.ravel())
    return t


_W = [0.0, -0.0, 1.5, -3.0e38, 2.0 ** -133, 1 / 3, np.inf, -np.inf]

PLACES = {
    "input": (lambda: _model([helper.make_node("Relu", ["x"], ["y"], name="r")],
                             [_vi("x", TP.BFLOAT16)], [_vi("y", TP.BFLOAT16)]), "input 'x'"),
    "initializer": (lambda: _model(
        [helper.make_node("Cast", ["w"], ["wf"], to=TP.FLOAT, name="c"),
         helper.make_node("Add", ["x", "wf"], ["y"], name="a")],
        [_vi("x")], [_vi("y")], [_brain("w", [1.0, 2.0, 3.0, 4.0])]), "initializer 'w'"),
    "cast": (lambda: _model(
        [helper.make_node("Cast", ["x"], ["h"], to=TP.BFLOAT16, name="down"),
         helper.make_node("Cast", ["h"], ["y"], to=TP.FLOAT, name="up")],
        [_vi("x")], [_vi("y")]), "node 'down' (Cast), attribute 'to'"),
    "constant": (lambda: _model(
        [helper.make_node("Constant", [], ["k"], value=_brain("kv", [0.5] * 4, raw=False),
                          name="k"),
         helper.make_node("Cast", ["k"], ["kf"], to=TP.FLOAT, name="c"),
         helper.make_node("Mul", ["x", "kf"], ["y"], name="m")],
        [_vi("x")], [_vi("y")]), "node 'k' (Constant), attribute 'value'"),
}


@pytest.mark.parametrize("place", list(PLACES))
def test_bfloat16_anywhere_is_refused_naming_it_and_upcast_imports(place, tmp_path, signer):
    make, where = PLACES[place]
    path = tmp_path / f"{place}.onnx"
    path.write_bytes(make().SerializeToString())
    assert_refused(path, UnsupportedModelError, f"bfloat16 in {where}: ",
                   "import with --upcast-bfloat16 (upcast_bfloat16=True)")

    _, loaded = import_and_load(path, tmp_path / "m.pha", signer, upcast_bfloat16=True)
    assert {s.dtype for s in [*loaded.graph.inputs, *loaded.graph.outputs]} == {"float32"}
    check_against_onnxruntime(_saved_upcast(path), loaded, _feeds(loaded))


@pytest.mark.parametrize("raw", [True, False], ids=["raw_data", "int32_data"])
def test_upcast_is_exact_and_leaves_the_original_alone(raw):
    values = np.asarray(_W, np.float32).astype(ml_dtypes.bfloat16)
    model = _model([helper.make_node("Constant", [], ["k"], value=_brain("kv", _W, raw)),
                    helper.make_node("Add", ["w", "k"], ["y"])],
                   [], [_vi("y", TP.BFLOAT16, (8,))], [_brain("w", _W, raw)])
    before = model.SerializeToString()
    upcast, count = upcast_bfloat16(model)
    assert model.SerializeToString() == before and count == 3
    assert find_bfloat16(upcast) is None
    for got in (numpy_helper.to_array(upcast.graph.initializer[0]),
                numpy_helper.to_array(upcast.graph.node[0].attribute[0].t)):
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got.view(np.uint32) >> 16, values.view(np.uint16))
        assert not (got.view(np.uint32) & 0xFFFF).any() and np.signbit(got[1])


def test_the_reader_gives_bfloat16_as_float32_only_when_asked():
    t = _brain("w", _W)
    got = to_array(t, bfloat16=True)
    assert got.dtype == np.float32 and got.shape == (8,)
    want = np.asarray(_W, np.float32).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(got.view(np.uint32), want.astype(np.float32).view(np.uint32))
    with pytest.raises(UnsupportedModelError, match="tensor 'w' has element type BFLOAT16, "
                                                    "which is not an ABI dtype"):
        to_array(t)


def test_the_deviation_is_measured_where_onnxruntime_runs_the_original(tmp_path):
    """A bfloat16 LayerNormalization, whose input and output onnxruntime's Python API cannot
    hold: compared across casts (a model value already named like the cast's is left alone),
    and refused past the tolerance given."""
    scale = _brain("scale", np.linspace(0.5, 2.0, 4))
    model = _model([helper.make_node("Identity", ["x"], ["x.float32"], name="taken"),
                    helper.make_node("LayerNormalization", ["x.float32", "scale"], ["y"],
                                     name="norm")],
                   [_vi("x", TP.BFLOAT16)], [_vi("y", TP.BFLOAT16)], [scale])
    path = tmp_path / "norm.onnx"
    path.write_bytes(model.SerializeToString())
    notes: list[str] = []
    build_onnx_artifact(path, tmp_path / "m.pha", upcast_bfloat16=True, report=notes.append,
                        latency_ms=100.0)
    assert notes[0] == "upcast from bfloat16: the artifact's ABI is float32"
    diff = float(notes[1].split("max |diff| ")[1].split()[0])
    # the original rounds its output to bfloat16: values up to about 3.5 (scale 2 times
    # sqrt(3), the most four normalized values reach), where a step is 2**-6
    assert 0 < diff <= 2.0 ** -6, notes
    with pytest.raises(ModelImportError) as info:
        build_onnx_artifact(path, tmp_path / "n.pha", upcast_bfloat16=True,
                            upcast_tolerance=(0.0, diff / 2))
    text = str(info.value)
    assert type(info.value) is ModelImportError and "\n" not in text
    assert "output 'y': the float32 upcast differs from the bfloat16 model run by " \
           "onnxruntime" in text and "--upcast-tolerance" in text
    assert not (tmp_path / "n.pha").exists()


def _rounding_chain():
    """x (bfloat16) times k, plus x, in bfloat16; then cast to float32 and times a third."""
    third = numpy_helper.from_array(np.array([1 / 3], np.float32), "third")
    return _model([helper.make_node("Mul", ["x", "k"], ["p"], name="times"),
                   helper.make_node("Add", ["p", "x"], ["s"], name="plus"),
                   helper.make_node("Cast", ["s"], ["f"], to=TP.FLOAT, name="wide"),
                   helper.make_node("Mul", ["f", "third"], ["y"], name="third")],
                  [_vi("x", TP.BFLOAT16, (64,))], [_vi("y", TP.FLOAT, (64,))],
                  [_brain("k", np.full(64, 1.37)), third])


def test_the_emulation_rounds_what_the_model_holds_in_bfloat16_and_nothing_else():
    """Each bfloat16 value (the input, both products) rounded as ml_dtypes rounds numpy's
    bfloat16 arithmetic, and the float32 product after the cast not: bit for bit."""
    original = _rounding_chain()
    emulation, inputs = emulated(original, upcast_bfloat16(original)[0], {"x": "x"})
    x = np.random.default_rng(3).standard_normal(64).astype(np.float32) * 5
    session = onnxruntime.InferenceSession(emulation.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    y = session.run(["y"], {inputs["x"]: x})[0]
    bf = ml_dtypes.bfloat16
    xb, k = x.astype(bf), np.float32(1.37).astype(bf)
    s = (xb * k).astype(bf) + xb  # ml_dtypes computes in float32 and rounds each result
    want = s.astype(bf).astype(np.float32) * np.float32(1 / 3)
    np.testing.assert_array_equal(y, want)
    assert not np.array_equal(y, want.astype(bf).astype(np.float32))  # y is not rounded


def _contrib_chain():
    """x (bfloat16) through com.microsoft's FastGelu, times k, cast to float32: onnx's type
    inference leaves FastGelu's output, and so the product, untyped."""
    model = _model([helper.make_node("FastGelu", ["x"], ["g"], name="gelu",
                                     domain="com.microsoft"),
                    helper.make_node("Mul", ["g", "k"], ["p"], name="times"),
                    helper.make_node("Cast", ["p"], ["y"], to=TP.FLOAT, name="wide")],
                   [_vi("x", TP.BFLOAT16, (64,))], [_vi("y", TP.FLOAT, (64,))],
                   [_brain("k", np.full(64, 1.37))])
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model


def test_the_emulation_rounds_the_outputs_of_com_microsoft_ops():
    """FastGelu's output, which onnx's type inference does not type (onnxruntime's schema
    does), and the product after it are rounded: FastGelu as onnxruntime computes it in
    float32 on the rounded input, each result rounded as ml_dtypes rounds, bit for bit, where
    leaving FastGelu's output unrounded differs."""
    original = _contrib_chain()
    emulation, inputs = emulated(original, upcast_bfloat16(original)[0], {"x": "x"})
    session = onnxruntime.InferenceSession(emulation.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    x = np.random.default_rng(3).standard_normal(64).astype(np.float32) * 3
    y = session.run(["y"], {inputs["x"]: x})[0]
    bf = ml_dtypes.bfloat16
    gelu = _model([helper.make_node("FastGelu", ["x"], ["g"], domain="com.microsoft")],
                  [_vi("x", TP.FLOAT, (64,))], [_vi("g", TP.FLOAT, (64,))])
    gelu.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    exact = onnxruntime.InferenceSession(gelu.SerializeToString(),
                                         providers=["CPUExecutionProvider"]).run(
        ["g"], {"x": x.astype(bf).astype(np.float32)})[0]
    k = np.float32(1.37).astype(bf)
    np.testing.assert_array_equal(y, (exact.astype(bf) * k).astype(bf).astype(np.float32))
    assert not np.array_equal(y, (exact * np.float32(k)).astype(bf).astype(np.float32))


def _looped_chain(nested: bool):
    """``acc = acc * k + acc`` three times in bfloat16, by a Loop (``nested``: the Loop inside
    an If's then-branch, its else-branch the input as it is; the condition an input)."""
    vi = helper.make_tensor_value_info
    body = helper.make_graph(
        [helper.make_node("Mul", ["acc_in", "k"], ["p"], name="times"),
         helper.make_node("Add", ["p", "acc_in"], ["acc_out"], name="plus"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep")],
        "body",
        [vi("i", TP.INT64, []), vi("cond_in", TP.BOOL, []), vi("acc_in", TP.BFLOAT16, [64])],
        [vi("cond_out", TP.BOOL, []), vi("acc_out", TP.BFLOAT16, [64])])
    loop = helper.make_node("Loop", ["n", "", "x"], ["looped"], name="loop", body=body)
    inits = [_brain("k", np.full(64, 1.37)), numpy_helper.from_array(np.array(3, np.int64), "n")]
    inputs = [_vi("x", TP.BFLOAT16, (64,))]
    if not nested:
        loop.output[0] = "y"
        return _model([loop], inputs, [_vi("y", TP.BFLOAT16, (64,))], inits)
    then = helper.make_graph([loop], "then", [], [vi("looped", TP.BFLOAT16, [64])])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["same"], name="same")],
                              "else", [], [vi("same", TP.BFLOAT16, [64])])
    branch = helper.make_node("If", ["c"], ["y"], name="branch", then_branch=then,
                              else_branch=other)
    return _model([branch], inputs + [_vi("c", TP.BOOL, ())], [_vi("y", TP.BFLOAT16, (64,))],
                  inits)


@pytest.mark.parametrize("nested", [False, True], ids=["loop", "loop-in-if"])
def test_the_emulation_rounds_inside_loop_and_if_bodies(nested):
    """Each iteration's product and sum rounded to bfloat16 inside the body, as ml_dtypes
    rounds numpy's bfloat16 arithmetic: bit for bit, where rounding the Loop's output alone
    differs."""
    original = _looped_chain(nested)
    emulation, inputs = emulated(original, upcast_bfloat16(original)[0], {"x": "x"})
    session = onnxruntime.InferenceSession(emulation.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    x = np.random.default_rng(3).standard_normal(64).astype(np.float32) * 5
    feed = {inputs["x"]: x, **({"c": np.array(True)} if nested else {})}
    y = session.run(["y"], feed)[0]
    bf = ml_dtypes.bfloat16
    acc, k, exact = x.astype(bf), np.float32(1.37).astype(bf), x.astype(bf).astype(np.float32)
    for _ in range(3):
        acc = ((acc * k).astype(bf) + acc).astype(bf)
        exact = exact * np.float32(k) + exact
    np.testing.assert_array_equal(y, acc.astype(np.float32))
    assert not np.array_equal(y, exact.astype(bf).astype(np.float32))


def test_a_looped_bfloat16_model_builds_against_its_emulation(tmp_path):
    """The build compares the upcast with the emulation (onnxruntime has no bfloat16 Mul), the
    Loop's body rounded: within the default tolerance."""
    path = tmp_path / "loop.onnx"
    path.write_bytes(_looped_chain(False).SerializeToString())
    notes: list[str] = []
    build_onnx_artifact(path, tmp_path / "m.pha", upcast_bfloat16=True, report=notes.append,
                        latency_ms=100.0)
    assert notes[1].startswith("bfloat16 model emulated: each op computed in float32"), notes


def test_where_the_emulation_fails_too_the_deviation_is_not_compared(tmp_path, monkeypatch):
    from plugin_host.onnx_import import float_width

    def failing(*args):
        raise ModelImportError("onnx cannot infer its value types: reason")

    monkeypatch.setattr(float_width, "emulated", failing)
    path = tmp_path / "chain.onnx"
    path.write_bytes(_rounding_chain().SerializeToString())
    notes: list[str] = []
    build_onnx_artifact(path, tmp_path / "m.pha", upcast_bfloat16=True, report=notes.append,
                        latency_ms=100.0)
    assert notes[1].startswith("bfloat16 deviation not compared: onnxruntime cannot run the "
                               "bfloat16 model (onnxruntime cannot load the model: ") and \
        notes[1].endswith("), nor its emulation (onnx cannot infer its value types: reason)")
    assert len(notes) == 2


def test_a_model_of_float16_and_bfloat16_needs_both_upcasts(tmp_path):
    """float16 in, bfloat16 out: the float16 upcast first, then the bfloat16 one; each original
    is compared (the float16 one holds the bfloat16 output, fed across a cast)."""
    model = _model([helper.make_node("Cast", ["x"], ["b"], to=TP.BFLOAT16, name="narrow"),
                    helper.make_node("Identity", ["b"], ["y"], name="same")],
                   [_vi("x", TP.FLOAT16)], [_vi("y", TP.BFLOAT16)])
    path = tmp_path / "both.onnx"
    path.write_bytes(model.SerializeToString())
    assert_refused(path, UnsupportedModelError, "float16 in input 'x'", "--upcast-float16")
    with pytest.raises(UnsupportedModelError, match="bfloat16 in output 'y': .*"
                                                    "--upcast-bfloat16"):
        import_onnx(path, upcast_float16=True)
    notes: list[str] = []
    build_onnx_artifact(path, tmp_path / "m.pha", upcast_float16=True, upcast_bfloat16=True,
                        report=notes.append, latency_ms=100.0)
    assert [n.split(":")[0] for n in notes] == [
        "upcast from float16", "float16 deviation of output 'y'", "upcast from bfloat16",
        "bfloat16 deviation of output 'y'"], notes


def test_a_model_without_bfloat16_is_imported_as_is(tmp_path):
    model = export(_MLP(), [torch.randn(2, 8)], tmp_path / "f32.onnx", dynamo=False)
    notes: list[str] = []
    build_onnx_artifact(model, tmp_path / "m.pha", upcast_bfloat16=True, report=notes.append,
                        latency_ms=100.0)
    assert notes == ["no bfloat16 in the model: nothing upcast"]


def test_external_bfloat16_weights_are_read_and_upcast(tmp_path):
    model = _model([helper.make_node("Cast", ["w"], ["wf"], to=TP.FLOAT, name="c"),
                    helper.make_node("Add", ["x", "wf"], ["y"], name="a")],
                   [_vi("x", TP.FLOAT, (1, 64))], [_vi("y", TP.FLOAT, (1, 64))],
                   [_brain("w", np.linspace(-4, 4, 64).reshape(1, 64))])
    path = tmp_path / "ext.onnx"
    onnx.save(model, path, save_as_external_data=True, location="ext.onnx.data",
              size_threshold=0)
    assert (tmp_path / "ext.onnx.data").stat().st_size == 128
    graph = import_onnx(path, upcast_bfloat16=True).graph
    y = Executor(graph, NumpyBackend()).run({"x": np.zeros((1, 64), np.float32)})["y"]
    want = np.linspace(-4, 4, 64).astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(y[0], want)


def test_a_bfloat16_input_fixed_at_build_holds_the_value_rounded(tmp_path):
    """``--input-value`` on a bfloat16 input: the value rounded to bfloat16 (1.1 is
    1.1015625 there), then upcast; a value past bfloat16's range is a usage error."""
    model = _model([helper.make_node("Cast", ["k"], ["kf"], to=TP.FLOAT, name="c"),
                    helper.make_node("Mul", ["x", "kf"], ["y"], name="m")],
                   [_vi("x"), _vi("k", TP.BFLOAT16, (1,))], [_vi("y")])
    path = tmp_path / "fixed.onnx"
    path.write_bytes(model.SerializeToString())
    imported = import_onnx(path, upcast_bfloat16=True, input_values={"k": "1.1"})
    assert [s.name for s in imported.graph.inputs] == ["x"]
    y = Executor(imported.graph, NumpyBackend()).run({"x": np.ones((2, 4), np.float32)})["y"]
    assert y.dtype == np.float32 and (y == np.float32(1.1015625)).all()
    with pytest.raises(UsageError, match="input 'k' is bfloat16; give a number within its "
                                         "range"):
        import_onnx(path, upcast_bfloat16=True, input_values={"k": "3.4e38"})


# --- hostile bfloat16 tensors ---------------------------------------------------------------


def _hostile(tmp_path, tensor) -> Path:
    model = _model([helper.make_node("Cast", ["kv"], ["kf"], to=TP.FLOAT, name="c"),
                    helper.make_node("Add", ["x", "kf"], ["y"], name="a")],
                   [_vi("x")], [_vi("y")], [tensor])
    path = tmp_path / "hostile.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def _long_raw():
    t = _brain("kv", [1.0] * 4)
    t.raw_data += b"\0"  # the checker refuses short raw data, not long
    return t


def _wrapping_bits():
    t = onnx.TensorProto(name="kv", data_type=TP.BFLOAT16, dims=[4])
    t.int32_data.extend([16256, 70000, 0, 0])  # 1.0, then a bit pattern past 16 bits
    return t


@pytest.mark.parametrize("tensor, limits, message", [
    (_long_raw, ReadLimits(), "tensor 'kv': 9 raw bytes for dims [4] of bfloat16 (expected 8)"),
    (_wrapping_bits, ReadLimits(), "tensor 'kv': int32_data value 70000 is outside 0..65535, "
                                   "the range of bfloat16 there"),
    (lambda: _brain("kv", [1.0] * 4), ReadLimits(max_tensor_elements=3),
     "tensor 'kv': 4 elements exceed the cap of 3"),
])
def test_hostile_bfloat16_tensors_are_one_line_refusals(tmp_path, tensor, limits, message):
    with pytest.raises(ModelImportError) as info:
        build_onnx_artifact(_hostile(tmp_path, tensor()), tmp_path / "m.pha",
                            upcast_bfloat16=True, limits=limits)
    assert type(info.value) is ModelFileError, info.value
    assert message in str(info.value) and "\n" not in str(info.value)


# --- the command line ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def brain_mlp(tmp_path_factory):
    return _export_brain("mlp", tmp_path_factory.mktemp("brain"), False, True, True)


def test_cli_builds_a_bfloat16_model_with_the_option(brain_mlp, tmp_path, capsys):
    code, out, err = _run(capsys, "build", "--onnx", brain_mlp, "--out", tmp_path / "m.pha",
                          "--upcast-bfloat16")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("built ") and \
        lines[1] == "upcast from bfloat16: the artifact's ABI is float32"
    assert lines[2].startswith("bfloat16 model emulated: each op computed in float32")
    assert lines[3].startswith("bfloat16 deviation of output ")


def test_cli_refuses_a_bfloat16_model_without_the_option(brain_mlp, tmp_path, capsys):
    code, _, err = _run(capsys, "build", "--onnx", brain_mlp, "--out", tmp_path / "m.pha",
                        "--upcast-float16")
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert "bfloat16 in input " in err and "--upcast-bfloat16" in err


@pytest.mark.parametrize("flag", [["--upcast-bfloat16"], ["--upcast-tolerance", "1,1"]])
def test_cli_upcast_options_go_with_onnx(tmp_path, capsys, flag):
    code, _, err = _run(capsys, "build", "--demo", "--out", tmp_path / "d.pha", *flag)
    assert code == 1 and "--upcast-bfloat16" in err and "go with --onnx" in err


def test_cli_upcast_tolerance_needs_an_upcast(brain_mlp, tmp_path, capsys):
    code, _, err = _run(capsys, "build", "--onnx", brain_mlp, "--out", tmp_path / "m.pha",
                        "--upcast-tolerance", "1e-2,1e-2")
    assert code == 1 and \
        "--upcast-tolerance goes with --upcast-float16 or --upcast-bfloat16" in err


def test_build_help_names_the_option(capsys):
    with pytest.raises(SystemExit):
        main(["build", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--upcast-bfloat16 with --onnx: import a bfloat16 model as float32" in out
    assert "(default: 1e-2,1e-2 from float16, 1e-1,1e-1 from bfloat16)" in out
