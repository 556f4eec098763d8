"""Models of opsets 7 to 12 import: onnx's version converter upgrades them to opset 13 in the
reference process, the upgrade is checked like any file, and the golden outputs come from
onnxruntime running the model as given. What the converter refuses, a crash or a stall of it,
and an answer that is not the model it was asked for are typed refusals; opsets outside 7..28
are refused naming the range. Models of opsets 13 to 28 import as they are."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from plugin_host.errors import ModelFileError, ModelImportError, UnsupportedModelError
from plugin_host.executor import Executor
from plugin_host.onnx_import import build, import_onnx, onnx_to_graph, read_model, reference
from plugins.numpy_backend import NumpyBackend
from plugins.onnxruntime_backend import OnnxruntimeBackend

from .conftest import (assert_refused, check_against_onnxruntime, export, import_and_load,
                       onnx, onnxruntime_outputs, torch)
from .test_reference import _Scripted

F = torch.nn.functional
helper, TP = onnx.helper, onnx.TensorProto
BIG = np.finfo(np.float32).max
OLD = [9, 10, 11, 12]


class _Layers(torch.nn.Module):
    """Conv + BatchNormalization (unfolded), Dropout in eval, Flatten, Linear as Gemm."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 3, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(3)
        self.bn.running_mean.uniform_(-1.0, 1.0)
        self.bn.running_var.uniform_(0.5, 2.0)
        self.drop = torch.nn.Dropout(0.3)
        self.fc = torch.nn.Linear(3 * 4 * 5, 6)

    def forward(self, x):
        return self.fc(torch.flatten(self.drop(F.relu(self.bn(self.conv(x)))), 1))


class _Resample(torch.nn.Module):
    """interpolate: Upsample at opset 9, Resize-10 at 10, Resize-11 from 11."""

    def forward(self, x):
        return (F.interpolate(x, scale_factor=2.0, mode="nearest"),
                F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False),
                F.interpolate(x, scale_factor=3.0, mode="nearest"))


class _Shapes(torch.nn.Module):
    """Slice, Split, Squeeze/Unsqueeze, ReduceSum/ReduceMean, Pad and Clip: attributes before
    opsets 10, 11 or 13, inputs after; Softmax and LogSoftmax, whose axis changed at 13."""

    def forward(self, x):
        a, b = x.split([1, 1], dim=1)
        y = a.squeeze(1).unsqueeze(0)[:, :, 1:3, 0:4]
        z = F.pad(b, (1, 2, 0, 1)).sum(dim=2) + b.mean(dim=3).sum(-1, keepdim=True)
        return (y.sum(dim=(2, 3)) + torch.clamp(z, -0.5, 0.5).mean(-1),
                F.softmax(x.reshape(1, 4, 10), -1), F.log_softmax(x.reshape(2, 2, 10), -1),
                F.softmax(x.reshape(2, 2, 10), 1))


class _Sequence(torch.nn.Module):
    """Gather on a weight (Embedding) feeding an LSTM."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)
        self.lstm = torch.nn.LSTM(4, 5, batch_first=True)

    def forward(self, ids):
        out, _ = self.lstm(self.emb(ids))
        return torch.flatten(out, 1)


#: values spread into one input: float32 extremes, with infinities and nan, or of one sign (where
#: sums would cancel +-3e38 in an order of their own), or moderate ones
SPECIAL = {"nonfinite": [BIG, -BIG, 1e-45, -0.0, 1e30, np.inf, -np.inf, np.nan],
           "finite": [BIG, 1e30, 1e-45, -0.0],
           "moderate": [40.0, -40.0, 1e-45, -0.0]}


def _image_feeds(shape, special: str, seed: int = 0):
    """Two random inputs, and one with the ``SPECIAL`` values of that name spread in."""
    rng = np.random.default_rng(seed)
    feeds = [{"x": (rng.standard_normal(shape) * 3).astype(np.float32)} for _ in range(2)]
    x = rng.standard_normal(shape).astype(np.float32)
    special = SPECIAL[special]
    flat = x.reshape(-1)
    flat[rng.choice(flat.size, size=len(special), replace=False)] = special
    return feeds + [{"x": x}]


#: kind -> (module, example inputs, feeds, number of outputs)
MODULES = {
    "layers": (_Layers, lambda: [torch.randn(1, 2, 4, 5)],
               lambda seed: _image_feeds((1, 2, 4, 5), "moderate", seed), 1),
    "resample": (_Resample, lambda: [torch.randn(1, 2, 3, 4)],
                 lambda seed: _image_feeds((1, 2, 3, 4), "nonfinite", seed), 3),
    "shapes": (_Shapes, lambda: [torch.randn(1, 2, 4, 5)],
               lambda seed: _image_feeds((1, 2, 4, 5), "finite", seed), 4),
    "sequence": (_Sequence, lambda: [torch.tensor([[1, 4, 7]])],
                 lambda seed: [{"x": ids} for ids in np.random.default_rng(seed).integers(
                     0, 10, (3, 1, 3))], 1),
}


def _opset(model) -> int:
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


@pytest.mark.parametrize("opset", OLD)
@pytest.mark.parametrize("kind", sorted(MODULES))
def test_a_torch_export_of_an_older_opset_builds_and_matches_onnxruntime(
        kind, opset, tmp_path, signer, monkeypatch):
    make, args, feeds, outputs = MODULES[kind]
    torch.manual_seed(opset)
    model = export(make(), args(), tmp_path / "m.onnx", dynamo=False, fold=False, opset=opset,
                   input_names=["x"], output_names=[f"y{i}" for i in range(outputs)])
    assert _opset(onnx.load(model)) == opset
    given, said = [], []
    run = reference.run_reference
    monkeypatch.setattr(build, "run_reference",
                        lambda m, *a, **k: (given.append(_opset(m)), run(m, *a, **k))[1])
    notes: list[str] = []
    manifest, loaded = import_and_load(model, tmp_path / "m.pha", signer, progress=said.append,
                                       report=notes.append)
    assert given == [opset]  # the golden outputs are onnxruntime's on the model as given
    assert notes == [f"opset {opset} upgraded to 13 with the ONNX version converter; the "
                     f"reference runs the model as given"]
    assert notes[0] in said
    assert manifest.golden_backend == "onnxruntime"
    check_against_onnxruntime(model, loaded, [{k: np.asarray(v) for k, v in f.items()}
                                              for f in feeds(opset)])
    ops = {n.op_type for n in onnx.load(model).graph.node}
    expected = {"layers": {"Conv", "BatchNormalization", "Gemm", "Flatten"},
                "resample": {"Upsample"} if opset == 9 else {"Resize"},
                "shapes": {"Slice", "Split", "Squeeze", "Unsqueeze", "ReduceSum", "ReduceMean",
                           "Pad", "Clip", "Softmax", "LogSoftmax"},
                "sequence": {"Gather", "LSTM"}}[kind]
    assert expected <= ops, ops


class _Newer(torch.nn.Module):
    """What torch's dynamo exporter writes as the ops opsets 24 and 25 newly list (Cast,
    Reshape, Flatten, Transpose, Squeeze, Unsqueeze, Pad, Shape, ConstantOfShape, TopK) and the
    normalizations and attention opset 23 added."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 4, 3)
        self.norm = torch.nn.RMSNorm(4)
        self.attn = torch.nn.MultiheadAttention(4, 2, batch_first=True)

    def forward(self, x):
        y = F.pad(self.conv(x), (1, 0, 0, 1), mode="reflect")
        seq = self.norm(torch.flatten(y, 2).transpose(1, 2))
        heads = seq.unflatten(2, (2, 2)).transpose(1, 2)
        seq = seq + F.scaled_dot_product_attention(heads, heads, heads, is_causal=True
                                                   ).transpose(1, 2).flatten(2)
        seq = self.attn(seq, seq, seq, need_weights=False)[0]
        top = torch.topk(seq.squeeze(0), 3, dim=0).values.unsqueeze(0)
        return top.to(torch.int32).to(torch.float32) + top, torch.zeros(seq.shape[1]) + 1


@pytest.mark.parametrize("opset", [24, 25])
def test_a_torch_export_of_a_newer_opset_builds_and_matches_onnxruntime(opset, tmp_path,
                                                                        signer):
    """torch's dynamo exporter writes opsets 24 and 25 on request; they import as they are
    (no upgrade or downgrade), the benchmark model's layers and the ops those opsets list."""
    from bench.torch_demo import TorchDemo

    torch.manual_seed(opset)
    for name, module, args in [
            ("demo", TorchDemo(), [torch.randn(1, 12, 128, 256), torch.tensor([3]),
                                   torch.randn(1, 512), torch.randn(1, 512)]),
            ("newer", _Newer(), [torch.randn(1, 2, 5, 6)])]:
        path = tmp_path / f"{name}.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(module.eval(), tuple(args), dynamo=True, opset_version=opset,
                              verbose=False).save(str(path))
        assert _opset(onnx.load(path)) == opset
        ops = {n.op_type for n in onnx.load(path).graph.node}
        assert {"Conv", "LayerNormalization", "Gemm", "Split"} <= ops if name == "demo" else \
            {"Attention", "RMSNormalization", "TopK", "Cast", "Pad", "Transpose"} <= ops, ops
        notes: list[str] = []
        _, loaded = import_and_load(path, tmp_path / f"{name}.pha", signer, report=notes.append)
        assert not any("upgraded" in note for note in notes), notes
        names = [i.name for i in onnx.load(path).graph.input]
        rng = np.random.default_rng(opset)
        check_against_onnxruntime(path, loaded, [
            {n: (np.asarray(a.numpy()) if a.dtype == torch.int64 else
                 rng.standard_normal(a.shape).astype(np.float32)) for n, a in zip(names, args)}
            for _ in range(2)])


def test_the_command_line_summary_says_the_model_was_upgraded(tmp_path, capsys):
    from plugin_host.cli import main

    model = export(_Layers(), [torch.randn(1, 2, 4, 5)], tmp_path / "m.onnx", dynamo=False,
                   opset=10)
    assert main(["build", "--onnx", str(model), "--out", str(tmp_path / "m.pha")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"built {tmp_path / 'm.pha'}: m 0.1.0 (unsigned)"), lines
    assert lines[1:] == ["opset 10 upgraded to 13 with the ONNX version converter; the "
                         "reference runs the model as given"]


def test_below_opset_7_the_reference_runs_the_upgrade_where_onnxruntime_lacks_a_kernel(
        tmp_path, capsys):
    """Opset 6's Add with ``broadcast=1`` (a bias along the last axis): onnxruntime has no
    Add(6), so the golden vectors come from the upgraded model, and the summary says so; the
    upgrade adds it as opset 6 means it. One along another ``axis``, which the converter
    cannot upgrade, is refused with the converter's reason. Not of opset 1, which onnxruntime
    runs, keeps the model as given as the reference."""
    from plugin_host.cli import main

    bias = np.array([1.0, -2.0, 3.0, 0.5], np.float32)
    add = _save(tmp_path / "add.onnx", [helper.make_node("Add", ["x", "b"], ["s"], name="a",
                                                         broadcast=1),
                                        helper.make_node("Relu", ["s"], ["y"], name="r")],
                [_x((2, 3, 4))], [_y((2, 3, 4))], [onnx.numpy_helper.from_array(bias, "b")],
                opset=6)
    assert main(["build", "--onnx", str(add), "--out", str(tmp_path / "a.pha")]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == [
        "opset 6 upgraded to 13 with the ONNX version converter; the reference runs the model "
        "upgraded: onnxruntime, which guarantees opsets from 7, has no kernel for Add(6)"]
    x = np.random.default_rng(3).standard_normal((2, 3, 4)).astype(np.float32)
    got = Executor(import_onnx(add).graph, NumpyBackend()).run({"x": x})["y"]
    np.testing.assert_array_equal(got, np.maximum(x + bias, 0))
    along = _save(tmp_path / "axis.onnx", [helper.make_node("Add", ["x", "b"], ["y"], name="a",
                                                            broadcast=1, axis=1)],
                  [_x((2, 3, 4))], [_y((2, 3, 4))],
                  [onnx.numpy_helper.from_array(bias[:3], "b")], opset=6)
    assert_refused(along, UnsupportedModelError, "axis.onnx: opset 6 cannot be upgraded to 13",
                   "the ONNX version converter refuses it: Dimension 0 of input 2 does not "
                   "match dimension 0 of input 1")
    flip = _save(tmp_path / "not.onnx", [helper.make_node("Not", ["x"], ["y"], name="n")],
                 [helper.make_tensor_value_info("x", TP.BOOL, [2, 3])],
                 [helper.make_tensor_value_info("y", TP.BOOL, [2, 3])], opset=1)
    assert main(["build", "--onnx", str(flip), "--out", str(tmp_path / "n.pha")]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == [
        "opset 1 upgraded to 13 with the ONNX version converter; the reference runs the model "
        "as given"]


@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 5), ("n", 3, 4, 5), (1, 3, 2, 2, 2)])
def test_a_prelu_of_opset_6_takes_its_slope_per_channel(shape, tmp_path):
    """torch's nn.PReLU(C) as its exporter wrote it at opset 6: a slope of C values along axis
    1, kept so through the upgrade (opset 7's broadcasting would align it to the last axis);
    against torch's prelu on both backends, the build's reference the upgraded model
    (onnxruntime has no PRelu(6)). A slope of one value is shared."""
    from plugin_host.cli import main

    slope = np.array([0.25, -1.5, 2.0], np.float32)
    rng = np.random.default_rng(5)
    for weight in (slope, slope[:1]):
        model = _save(tmp_path / "p.onnx", [helper.make_node("PRelu", ["x", "s"], ["y"],
                                                             name="p")],
                      [_x(shape)], [_y(shape)], [onnx.numpy_helper.from_array(weight, "s")],
                      opset=6)
        assert main(["build", "--onnx", str(model), "--out", str(tmp_path / "p.pha")]
                    + ["--golden-dim", "n=1,2"] * ("n" in shape)) == 0
        graph = import_onnx(model).graph
        assert [n.op for n in graph.nodes] == ["prelu"]
        x = rng.standard_normal([2 if d == "n" else d for d in shape]).astype(np.float32)
        want = torch.nn.functional.prelu(torch.from_numpy(x), torch.from_numpy(weight)).numpy()
        for backend in (NumpyBackend(), OnnxruntimeBackend()):
            got = Executor(graph, backend).run({"x": x})["y"]
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=0, err_msg=backend.name)


def test_the_import_keeps_the_model_as_read_and_maps_the_upgrade(tmp_path):
    model = export(_Shapes(), [torch.randn(1, 2, 4, 5)], tmp_path / "m.onnx", dynamo=False,
                   opset=11)
    imported = import_onnx(model)
    assert (imported.opset, imported.original_opset, _opset(imported.original)) == (13, 11, 11)
    assert _opset(imported.model) == 13
    current = export(_Shapes(), [torch.randn(1, 2, 4, 5)], tmp_path / "n.onnx", dynamo=False)
    assert import_onnx(current).original is None
    with pytest.raises(UnsupportedModelError, match=r"opset 11 is not mapped \(mapped: 13..28"
                       r"\); upgrade the model first"):
        onnx_to_graph(read_model(model), name="m")


# --- models written with onnx.helper -------------------------------------------------------------


def _save(path, nodes, inputs, outputs, inits=(), opset=12, ir_version=None):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    if ir_version is not None:
        model.ir_version = ir_version
    onnx.save(model, path)
    return path


def _x(shape=(1, 2, 4, 6)):
    return helper.make_tensor_value_info("x", TP.FLOAT, list(shape))


def _y(shape=None):
    return helper.make_tensor_value_info("y", TP.FLOAT, list(shape) if shape else ["a", "b",
                                                                                    "c", "d"])


@pytest.mark.parametrize("op, opset, scales", [
    ("Upsample", 7, [1.0, 1.0, 1.5, 2.5]),
    ("Upsample", 9, [1.0, 1.0, 1.5, 2.5]),
    ("Resize", 10, [1.0, 1.0, 1.5, 2.5]),
    ("Resize", 10, [1.0, 1.0, 0.5, 0.7]),
])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample_and_resize_10_keep_their_sampling_after_the_upgrade(op, opset, scales, mode,
                                                                     tmp_path, signer):
    if op == "Upsample" and opset == 7:
        nodes, inits = [helper.make_node(op, ["x"], ["y"], mode=mode, scales=scales,
                                         name="up")], []
    else:
        nodes = [helper.make_node(op, ["x", "s"], ["y"], mode=mode, name="up")]
        inits = [helper.make_tensor("s", TP.FLOAT, [4], scales)]
    model = _save(tmp_path / "m.onnx", nodes, [_x()], [_y()], inits, opset=opset)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    check_against_onnxruntime(model, loaded, _image_feeds((1, 2, 4, 6), "nonfinite"))


def test_what_the_converter_cannot_upgrade_is_refused_naming_the_opset_and_node(tmp_path):
    sparse = helper.make_sparse_tensor(helper.make_tensor("v", TP.FLOAT, [1], [1.0]),
                                       helper.make_tensor("i", TP.INT64, [1], [2]), [2, 3])
    model = _save(tmp_path / "sparse.onnx", [
        helper.make_node("Constant", [], ["c"], sparse_value=sparse, name="dense"),
        helper.make_node("Add", ["x", "c"], ["y"], name="add")], [_x((2, 3))], [_y((2, 3))])
    assert_refused(model, UnsupportedModelError, "node 'dense' (Constant)",
                   "opset 12 cannot be upgraded to 13: the ONNX version converter refuses it: "
                   "Sparse tensors not supported")
    stats = [helper.make_tensor(n, TP.FLOAT, [3], [1.0, 0.5, 2.0]) for n in "sbmv"]
    model = _save(tmp_path / "bn.onnx", [helper.make_node(
        "BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], spatial=0, name="bn")],
        [_x((2, 3))], [_y((2, 3))], stats, opset=8)
    assert_refused(model, UnsupportedModelError, "node 'bn' (BatchNormalization)",
                   "opset 8 cannot be upgraded to 13: the ONNX version converter refuses it: "
                   "Attribute spatial must have value 1")


@pytest.mark.parametrize("case", ["weight", "pads"])
def test_an_ir_3_model_whose_initializers_are_not_inputs_reads_as_onnxruntime_reads_it(
        case, tmp_path, signer):
    """IR version 3 lists every initializer among the graph inputs; onnxruntime runs a model
    that does not (its own example mul_1.onnx), and the version converter writes one when it
    makes Pad's pads attribute an initializer. Both were refused by the ONNX checker."""
    if case == "weight":
        w = helper.make_tensor("w", TP.FLOAT, [2, 4, 6], np.linspace(-2, 2, 48).tolist())
        model = _save(tmp_path / "m.onnx", [helper.make_node("Mul", ["x", "w"], ["y"])],
                      [_x()], [_y((1, 2, 4, 6))], [w], opset=7, ir_version=3)
        refused = onnx.load(model)
    else:
        model = _save(tmp_path / "m.onnx", [helper.make_node(
            "Pad", ["x"], ["y"], pads=[0, 0, 1, 2, 0, 1, 0, 3], value=1.5, name="pad")],
            [_x()], [_y((1, 3, 5, 11))], opset=10, ir_version=3)
        refused = onnx.version_converter.convert_version(onnx.load(model), 13)
    with pytest.raises(onnx.checker.ValidationError, match="in initializer but not in graph"):
        onnx.checker.check_model(refused)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    check_against_onnxruntime(model, loaded, _image_feeds((1, 2, 4, 6), "nonfinite"))


def test_a_model_with_no_default_domain_opset_is_refused_naming_its_opsets(tmp_path):
    """A scikit-learn conversion imports only ai.onnx.ml (onnxruntime's logreg_iris.onnx)."""
    graph = helper.make_graph([helper.make_node("Normalizer", ["x"], ["y"], norm="L1",
                                                domain="ai.onnx.ml")], "g", [_x((3, 2))],
                              [_y((3, 2))])
    model = tmp_path / "ml.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("ai.onnx.ml", 1)]),
              model)
    with pytest.raises(UnsupportedModelError) as info:
        import_onnx(model)
    assert str(info.value) == (f"{model}: the model imports no default-domain (ai.onnx) opset, "
                               f"so none of its nodes is an ONNX operator this importer maps "
                               f"(its opset imports: ai.onnx.ml 1)")


@pytest.mark.parametrize("opset", [29, 30])
def test_opsets_outside_the_range_are_refused_naming_it(opset, tmp_path):
    model = _save(tmp_path / "m.onnx", [helper.make_node("Relu", ["x"], ["y"], name="r")],
                  [_x()], [_y()], opset=opset)
    with pytest.raises(UnsupportedModelError) as info:
        import_onnx(model)
    assert str(info.value) == (f"{model}: default-domain opset {opset} is not supported "
                               f"(supported: 1..28; 1..12 are upgraded to 13)")


# --- the converter in the reference process ------------------------------------------------------


def _relu(tmp_path, name="m.onnx", opset=11, output="y"):
    return _save(tmp_path / name, [helper.make_node("Relu", ["x"], [output], name="r")],
                 [_x()], [helper.make_tensor_value_info(output, TP.FLOAT, [1, 2, 4, 6])],
                 opset=opset)


@pytest.mark.parametrize("mode, message", [
    ("crash", r"^the ONNX version converter crashed on the model \(killed by SIGSEGV\): it is "
              r"malformed in a way the checks before it did not catch$"),
    ("stall", r"^the ONNX version converter did not finish the opset upgrade in 0.5 s "
              r"\(stopped\)$"),
])
def test_a_crash_or_a_stall_of_the_converter_is_a_typed_refusal_and_the_builder_goes_on(
        mode, message, tmp_path, signer, monkeypatch):
    process = _Scripted(mode)
    monkeypatch.setattr(reference, "_PROCESS", process)
    default = reference.CONVERT_TIMEOUT_S
    monkeypatch.setattr(reference, "CONVERT_TIMEOUT_S", 0.5)
    model = _relu(tmp_path)
    try:
        with pytest.raises(ModelImportError, match=message):
            build.build_onnx_artifact(model, tmp_path / "m.pha")
        monkeypatch.setattr(reference, "CONVERT_TIMEOUT_S", default)  # the real child starts
        _, loaded = import_and_load(model, tmp_path / "m.pha", signer)  # a new, real child
    finally:
        process.close()
    assert process.started == 2
    check_against_onnxruntime(model, loaded, _image_feeds((1, 2, 4, 6), "nonfinite"))


@pytest.mark.parametrize("answer, error, message", [
    ("garbage", ModelFileError, "m.onnx (upgraded from opset 11): not an ONNX model"),
    ("opset-11", ModelImportError, "m.onnx: the ONNX version converter answered a model of "
                                   "opset 11, not 13"),
    ("renamed", ModelImportError, "m.onnx: the ONNX version converter answered a model whose "
                                  "inputs or outputs differ from the original's"),
])
def test_the_converters_answer_is_checked_like_a_file(answer, error, message, tmp_path,
                                                      monkeypatch):
    payload = tmp_path / "answer.bin"
    if answer == "garbage":
        payload.write_bytes(b"\xff" * 64)
    else:
        made = _relu(tmp_path, "a.onnx", opset=11 if answer == "opset-11" else 13,
                     output="z" if answer == "renamed" else "y")
        payload.write_bytes(made.read_bytes())
    process = _Scripted("answer", str(payload))
    monkeypatch.setattr(reference, "_PROCESS", process)
    try:
        with pytest.raises(error) as info:
            import_onnx(_relu(tmp_path))
    finally:
        process.close()
    assert type(info.value) is error and message in str(info.value), str(info.value)
    assert "\n" not in str(info.value)


def test_a_refusal_by_the_converter_keeps_the_child_and_its_answer_has_a_size_cap(tmp_path):
    process = reference.ReferenceProcess()
    data = _relu(tmp_path).read_bytes()
    try:
        with pytest.raises(reference.ConversionRefused, match="."):
            process.convert(b"\x08\x07", 13, max_bytes=1 << 20)  # an IR version, no graph
        first = process._proc
        upgraded = onnx.ModelProto.FromString(process.convert(data, 13, max_bytes=1 << 20))
        assert process._proc is first and first.poll() is None
        with pytest.raises(ModelImportError, match=r"^the ONNX version converter answered \d+ "
                                                   r"bytes, past the cap of 10 \(stopped\)$"):
            process.convert(data, 13, max_bytes=10)
        assert first.poll() is not None  # stopped: the next request starts a new child
    finally:
        process.close()
    assert _opset(upgraded) == 13
    x = np.random.default_rng(1).standard_normal((1, 2, 4, 6)).astype(np.float32)
    path = tmp_path / "u.onnx"
    onnx.save(upgraded, path)
    np.testing.assert_array_equal(onnxruntime_outputs(path, {"x": x})["y"], np.maximum(x, 0))
