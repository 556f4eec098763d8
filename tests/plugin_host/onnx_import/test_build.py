"""The artifact side: `plugin-host build --onnx`, golden vectors from onnxruntime stored under
that name, per-output tolerances, the self-check against onnxruntime, and build_artifact's
externally computed golden outputs."""

from __future__ import annotations

import contextlib
import io
import logging
import warnings

import numpy as np
import pytest

from plugin_host.artifacts import (build_artifact, load_verified, read_manifest_unverified,
                                   sign_artifact)
from plugin_host.cli import main
from plugin_host.errors import ModelImportError, UnsupportedModelError, UsageError
from plugin_host.executor import Executor
from plugin_host.onnx_import import build as onnx_build
from plugin_host.onnx_import import build_onnx_artifact
from plugins.numpy_backend import NumpyBackend

from .conftest import (assert_close, check_against_onnxruntime, export, import_and_load, onnx,
                       onnxruntime_outputs, torch)


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 3, 3, padding=1)
        self.fc = torch.nn.Linear(3 * 4 * 4, 5)

    def forward(self, x, h):
        y = torch.relu(self.conv(x)).flatten(1)
        h_next = torch.tanh(self.fc(y) + h)
        return torch.softmax(h_next, dim=-1), h_next


@pytest.fixture(scope="module")
def net_onnx(tmp_path_factory):
    path = tmp_path_factory.mktemp("net") / "net.onnx"
    return export(_Net(), [torch.randn(1, 2, 4, 4), torch.zeros(1, 5)], path, dynamo=False,
                  input_names=["x", "h"], output_names=["probs", "h_next"])


def test_golden_outputs_are_onnxruntimes(net_onnx, tmp_path, signer):
    manifest, loaded = import_and_load(net_onnx, tmp_path / "n.pha", signer,
                                       state={"h": "h_next"}, golden_cases=3,
                                       tolerances={"probs": (1e-5, 1e-6), "h_next": (1e-4, 1e-5)})
    assert manifest.golden_backend == "onnxruntime" and len(manifest.golden) == 3
    assert (manifest.tolerances["probs"].rtol, manifest.tolerances["probs"].atol) == (1e-5, 1e-6)
    for inputs, outputs in loaded.golden_cases():
        want = onnxruntime_outputs(net_onnx, dict(inputs))
        for name, value in want.items():  # (default options fuse and thread: not bitwise)
            assert_close(loaded, name, outputs[name], value)
    assert np.all(loaded.golden_cases()[0][0]["h"] == 0)  # case 0 starts from zero state
    loaded.check_golden(NumpyBackend())


def test_import_that_disagrees_with_onnxruntime_is_refused(net_onnx, tmp_path, monkeypatch):
    real = onnx_build.run_reference

    def skewed(*args, **kwargs):
        cases = real(*args, **kwargs)
        for case in cases:
            case["probs"] = case["probs"] + np.float32(1e-3)
        return cases

    monkeypatch.setattr(onnx_build, "run_reference", skewed)
    with pytest.raises(ModelImportError, match=r"output 'probs'.*differs from onnxruntime"):
        build_onnx_artifact(net_onnx, tmp_path / "n.pha", state={"h": "h_next"})
    assert not (tmp_path / "n.pha").exists()


def test_build_artifact_checks_given_golden_outputs(tiny_graph, tmp_path):
    inputs = [{"x": np.ones((1, 4), np.float32), "ids": np.array([1])}]
    with pytest.raises(UsageError, match="golden_outputs"):
        build_artifact(tiny_graph, tmp_path / "t.pha", reference_backend=NumpyBackend(),
                       golden_inputs=inputs, golden_outputs=[{"y": np.zeros((1, 3))}],
                       reference="elsewhere", latency_ms=1.0)
    good = {"y": np.full((1, 3), 7, np.float32), "h_next": np.zeros((1, 3), np.float32)}
    m = build_artifact(tiny_graph, tmp_path / "t.pha", reference_backend=NumpyBackend(),
                       golden_inputs=[{"x": np.ones((1, 4), np.float32),
                                       "ids": np.array([1])}],
                       golden_outputs=[good], reference="elsewhere", latency_ms=1.0)
    assert m.golden_backend == "elsewhere"


@pytest.fixture
def tiny_graph():
    from plugin_host.builder import GraphBuilder

    b = GraphBuilder("tiny")
    x = b.input("x", (1, 4), "float32", "NC")
    b.input("ids", (1,), "int64", "N")
    h = b.state("h", (1, 3), "float32", "NC")
    w = b.constant("w", np.ones((4, 3), np.float32))
    y = b.op("matmul", x, w)
    b.output(y, "y", "NC")
    b.output(b.op("tanh", h), "h_next", "NC", state_of="h")
    return b.build()


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_builds_from_onnx(net_onnx, tmp_path, capsys):
    out = tmp_path / "n.pha"
    code, text, err = _run(capsys, "build", "--onnx", net_onnx, "--out", out, "--state",
                           "h=h_next", "--rtol", "2e-4", "--atol", "3e-6", "--layout",
                           "h_next=ANY", "--version", "1.2.3")
    assert code == 0, err
    assert "from onnxruntime" in text and "conv" in text
    m = read_manifest_unverified(out)["manifest"]
    assert m["version"] == "1.2.3" and m["golden"]["reference_backend"] == "onnxruntime"
    assert m["tolerances"]["probs"] == {"rtol": 2e-4, "atol": 3e-6}
    assert m["tolerances"]["h_next"] == {"rtol": 2e-4, "atol": 3e-6}
    assert {s["name"]: s["layout"] for s in m["graph"]["outputs"]}["h_next"] == "ANY"
    assert m["graph"]["state"] == {"h": "h_next"}


@pytest.mark.parametrize("argv, message", [
    (["--state", "h"], "--state 'h': expected IN=OUT"),
    (["--state", "h=nope"], "state h=nope"),
    (["--layout", "x=NC"], "graph input 'x'"),
    (["--demo"], "not allowed with argument"),
])
def test_cli_refusals_are_one_line(net_onnx, tmp_path, capsys, argv, message):
    try:
        code, _, err = _run(capsys, "build", "--onnx", net_onnx, "--out", tmp_path / "n.pha",
                            *argv)
    except SystemExit as exc:  # argparse's own usage errors
        code, err = exc.code, capsys.readouterr().err
    assert code != 0 and message in err and "Traceback" not in err


def test_cli_names_the_flag_that_reads_external_data(tmp_path, capsys):
    onnx.save(onnx.helper.make_model(onnx.helper.make_graph(
        [onnx.helper.make_node("MatMul", ["x", "w"], ["y"])], "ext",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 3])],
        [onnx.numpy_helper.from_array(np.ones((4, 3), np.float32), "w")]),
        opset_imports=[onnx.helper.make_opsetid("", 17)]), tmp_path / "ext.onnx",
        save_as_external_data=True, all_tensors_to_one_file=True, location="ext.bin",
        size_threshold=0)
    code, _, err = _run(capsys, "build", "--onnx", tmp_path / "ext.onnx", "--out",
                        tmp_path / "x.pha")
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert ("keeps its data in the external file 'ext.bin'; external data other than the "
            "model's own 'ext.onnx.data' is refused unless --allow-external-data is given"
            ) in err, err
    assert "allow_external_data" not in err
    code, text, err = _run(capsys, "build", "--onnx", tmp_path / "ext.onnx", "--out",
                           tmp_path / "x.pha", "--allow-external-data")
    assert code == 0 and "built" in text, err


def test_torchs_default_dynamo_export_builds_with_its_external_data(tmp_path, capsys, signer):
    """torch.onnx.export(..., dynamo=True) to a path writes the weights to MODEL.onnx.data by
    default: the model's own data file, read without a flag, and the artifact then holds the
    weights (it runs as onnxruntime computes with the .data file gone)."""
    module = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh()).eval()
    model = tmp_path / "net.onnx"
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        logging.getLogger("torch.onnx").setLevel(logging.ERROR)
        torch.onnx.export(module, (torch.randn(1, 16),), str(model), dynamo=True,
                          input_names=["x"], output_names=["y"])
    data = tmp_path / "net.onnx.data"
    assert data.stat().st_size >= 16 * 32 * 4  # the weight lies outside the model
    feed = {"x": np.random.default_rng(3).standard_normal((1, 16)).astype(np.float32)}
    want = onnxruntime_outputs(model, feed)
    code, text, err = _run(capsys, "build", "--onnx", model, "--out", tmp_path / "n.pha")
    assert code == 0 and "built" in text, err
    data.unlink()
    sign_artifact(tmp_path / "n.pha", signer[0])
    loaded = load_verified(tmp_path / "n.pha", trust=signer[1], rollback=None,
                           backends={"numpy"})
    got = Executor(loaded.graph, NumpyBackend()).run(dict(feed))
    assert_close(loaded, "y", got["y"], want["y"])


def test_cli_refuses_garbage_file(tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00garbage" * 10)
    code, _, err = _run(capsys, "build", "--onnx", bad, "--out", tmp_path / "x.pha")
    assert code == 1 and len(err.strip().splitlines()) == 1 and "not an ONNX model" in err


class _Log(torch.nn.Module):
    def forward(self, x):
        return torch.log(x) * 2.0, torch.sqrt(x) + 1.0


def test_outputs_that_are_nan_where_onnxruntimes_are_build(tmp_path, signer, monkeypatch):
    """log and sqrt of the drawn (normal) golden inputs give nan where onnxruntime gives nan:
    that agrees, the artifact builds and its golden check passes on load. A nan where
    onnxruntime has a number is still a mismatch."""
    model = export(_Log(), [torch.rand(2, 8) + 0.5], tmp_path / "log.onnx", dynamo=False,
                   input_names=["x"], output_names=["log2", "root"])
    manifest, loaded = import_and_load(model, tmp_path / "log.pha", signer, golden_cases=3)
    golden = [outputs for _, outputs in loaded.golden_cases()]
    assert all(np.isnan(g["log2"]).any() and np.isnan(g["root"]).any() for g in golden)
    loaded.check_golden(NumpyBackend())

    real = onnx_build.run_reference

    def numbered(*args, **kwargs):
        cases = real(*args, **kwargs)
        for case in cases:
            case["root"] = np.nan_to_num(case["root"], nan=1.0)
        return cases

    monkeypatch.setattr(onnx_build, "run_reference", numbered)
    with pytest.raises(ModelImportError, match=r"output 'root'.*differs.*max \|diff\| inf"):
        build_onnx_artifact(model, tmp_path / "bad.pha")


def test_a_target_backend_that_cannot_run_the_import_is_named_before_the_reference(
        tmp_path, monkeypatch):
    """int16 runs on numpy but here not on onnxruntime: the default targets (both) are refused
    naming onnxruntime and the dtype, as an import error; numpy alone builds."""
    from plugins import onnxruntime_backend

    # the onnxruntime backend takes every dtype the numpy one does: here it lacks int16
    monkeypatch.setattr(onnxruntime_backend, "DTYPES", onnxruntime_backend.DTYPES - {"int16"})
    helper, TP = onnx.helper, onnx.TensorProto
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["y"], to=TP.FLOAT, name="c")], "g",
        [helper.make_tensor_value_info("x", TP.INT16, [1, 4])],
        [helper.make_tensor_value_info("y", TP.FLOAT, [1, 4])])
    model = tmp_path / "counts.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    with pytest.raises(UnsupportedModelError) as info:
        build_onnx_artifact(model, tmp_path / "m.pha", backends=("numpy", "onnxruntime"))
    assert str(info.value) == (f"{model}: target backend 'onnxruntime' cannot run it: dtype "
                               f"int16 is not supported (choose the targets with --backend)")
    assert not (tmp_path / "m.pha").exists()
    build_onnx_artifact(model, tmp_path / "m.pha", backends=("numpy",))


def test_an_output_declared_with_another_shape_takes_the_computed_one(tmp_path, signer):
    """A converter that writes a graph output's shape wrong (a CRNN's (1, 'seqlen') for what
    computes to (16, 1, 20)): onnxruntime returns the computed shape, so the ABI takes it and
    the summary says so; a declared dtype that differs is still refused (test_bitwise)."""
    helper, TP = onnx.helper, onnx.TensorProto
    graph = helper.make_graph(
        [helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0, 2], name="t")], "g",
        [helper.make_tensor_value_info("x", TP.FLOAT, [1, 16, 20])],
        [helper.make_tensor_value_info("y", TP.FLOAT, [1, "seqlen"])])
    model = tmp_path / "crnn.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    said = []
    _, loaded = import_and_load(model, tmp_path / "c.pha", signer, report=said.append)
    assert loaded.graph.outputs[0].shape == (16, 1, 20)
    assert said[0] == ("graph output 'y' is declared (1, 'seqlen') but computes to (16, 1, 20): "
                       "the ABI takes the computed shape, and the golden cases check it "
                       "against onnxruntime's")
    rng = np.random.default_rng(6)
    check_against_onnxruntime(model, loaded, [
        {"x": rng.standard_normal((1, 16, 20)).astype(np.float32)}])


def test_an_output_declared_with_an_input_dim_it_does_not_have_gets_a_name_of_its_own(
        tmp_path, signer):
    """An output declared with an input's run-time dim ('t') that it does not have (a pool
    halves it): ONNX means one name to be one size, so the ABI names the output's dim afresh
    instead of binding it to the input's, and the summary says what was declared."""
    helper, TP = onnx.helper, onnx.TensorProto
    graph = helper.make_graph(
        [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2], strides=[2], name="p")],
        "g", [helper.make_tensor_value_info("x", TP.FLOAT, [1, 3, "t"])],
        [helper.make_tensor_value_info("y", TP.FLOAT, [1, 3, "t"])])
    model = tmp_path / "pool.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    said = []
    _, loaded = import_and_load(model, tmp_path / "p.pha", signer, report=said.append,
                                golden_dims={"t": [4, 7]})
    assert loaded.graph.outputs[0].shape == (1, 3, "y_d2")
    assert any(line.startswith("graph output 'y' is declared (1, 3, 't') but computes to "
                               "(1, 3, ") for line in said), said
    rng = np.random.default_rng(9)
    check_against_onnxruntime(model, loaded, [
        {"x": rng.standard_normal((1, 3, t)).astype(np.float32)} for t in (2, 9)])


def test_outputs_declared_with_one_name_for_different_sizes_get_names_of_their_own(
        tmp_path, signer):
    """torch's legacy exporter names the run-time dims of a detector's per-level outputs
    alike ('Conv_dim_2' for a map of h/2 and one of h/4): the first output takes the name,
    the other, of another size, is named afresh, so no call binds one name to two sizes."""
    helper, TP = onnx.helper, onnx.TensorProto
    pools = [helper.make_node("MaxPool", ["x"], [f"y{s}"], kernel_shape=[s], strides=[s],
                              name=f"p{s}") for s in (2, 4)] + [
        helper.make_node("MaxPool", ["x"], ["z"], kernel_shape=[2], strides=[2], name="q")]
    graph = helper.make_graph(
        pools, "g", [helper.make_tensor_value_info("x", TP.FLOAT, [1, 3, "t"])],
        [helper.make_tensor_value_info(n, TP.FLOAT, [1, 3, "Conv_dim_2"])
         for n in ("y2", "y4", "z")])
    model = tmp_path / "levels.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    _, loaded = import_and_load(model, tmp_path / "l.pha", signer, golden_dims={"t": [8, 12]})
    assert [o.shape for o in loaded.graph.outputs] == [
        (1, 3, "Conv_dim_2"), (1, 3, "y4_d2"), (1, 3, "Conv_dim_2")]  # z is y2's size
    rng = np.random.default_rng(10)
    check_against_onnxruntime(model, loaded, [
        {"x": rng.standard_normal((1, 3, t)).astype(np.float32)} for t in (4, 13)])
