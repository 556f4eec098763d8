"""``build --onnx --onnxruntime-optimized``: the graph onnxruntime's extended graph
optimizations make of a model, imported in its place. A QDQ model (``quantize_static``'s
default format) then runs as onnxruntime's optimized session runs it, its convs and Gemm as
integer QLinearConv and QGemm: bit for bit the outputs of bare onnxruntime on the original file,
on both backends, where the default import keeps the file's float fake quantization. A float
model's fusions (FusedConv) import as well; a model onnxruntime cannot load, or a rewritten
model past the file cap, is refused naming why; the option goes with --onnx."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.cli import main
from plugin_host.errors import ModelImportError
from plugin_host.executor import Executor
from plugin_host.onnx_import import build_onnx_artifact, import_onnx
from plugin_host.onnx_import import build as build_module
from plugin_host.onnx_import.build import _optimized_note
from plugin_host.onnx_import.reference import run_optimizer
from plugins.numpy_backend import NumpyBackend
from plugins.onnxruntime_backend import OnnxruntimeBackend

from .conftest import (check_on_both_backends, export, import_and_load, onnx,
                       onnxruntime_outputs, torch)
from .test_quantized import statically_quantized

quantization = pytest.importorskip("onnxruntime.quantization")
_Q = quantization.QuantType
_SHAPE = (2, 3, 12, 12)


class _Net(torch.nn.Module):
    """Two convs with ReLU (the second strided), a flatten and a Linear: a Gemm."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(16 * 6 * 6, 10)

    def forward(self, x):
        y = torch.relu(self.c2(torch.relu(self.c1(x))))
        return self.fc(torch.flatten(y, 1))


def _qdq_model(tmp_path, weights=_Q.QUInt8, per_channel: bool = False,
               reduce_range: bool = False, net=_Net, seed: int = 5):
    """``net()`` (seeded) exported, then quantized by quantize_static in the QDQ format
    (uint8 activations)."""
    path = statically_quantized(tmp_path, net, _SHAPE, "qdq.onnx", seed=seed,
                                quant_format=quantization.QuantFormat.QDQ,
                                per_channel=per_channel, weight_type=weights,
                                activation_type=_Q.QUInt8, reduce_range=reduce_range)
    assert {"QuantizeLinear", "DequantizeLinear", "Conv"} <= {
        n.op_type for n in onnx.load(str(path)).graph.node}
    return path


def _feeds() -> list[dict]:
    rng = np.random.default_rng(9)
    return [{"x": (rng.standard_normal(_SHAPE) * s).astype(np.float32)} for s in (1, 3, 0.2)]


# uint8 weights, and int8 ones of 7 bits: sums onnxruntime's u8 x s8 kernel never saturates
@pytest.mark.parametrize("weights, per_channel, reduce_range", [
    pytest.param(_Q.QUInt8, False, False, id="per-tensor-u8"),
    pytest.param(_Q.QInt8, True, True, id="per-channel-s8-reduce-range")])
def test_a_qdq_model_runs_as_onnxruntimes_optimized_session_runs_it(
        tmp_path, signer, weights, per_channel, reduce_range):
    path = _qdq_model(tmp_path, weights, per_channel, reduce_range)
    assert "Gemm" in {n.op_type for n in onnx.load(str(path)).graph.node}
    plain = {n.op for n in import_onnx(path).graph.nodes}
    assert "conv" in plain and "qlinear_conv" not in plain  # by default: fake quantization
    said: list[str] = []
    _, loaded = import_and_load(path, tmp_path / "q.pha", signer, onnxruntime_optimized=True,
                                report=said.append)
    ops = {n.op for n in loaded.graph.nodes}
    assert {"qlinear_conv", "integer_linear"} <= ops and not ops & {"conv", "linear"}
    assert any("onnxruntime's extended graph optimizations" in line and "QLinearConv x2"
               in line and "com.microsoft.QGemm x1" in line for line in said), said
    assert not any("emulations" in line for line in said)  # QLinearConv and QGemm: kernels
    for backend in (NumpyBackend(), OnnxruntimeBackend()):
        executor = Executor(loaded.graph, backend)
        for feed in _feeds():
            got = executor.run(dict(feed))["y"]
            # bare onnxruntime, all optimizations on, on the file as quantized
            np.testing.assert_array_equal(got, onnxruntime_outputs(path, feed)["y"])


class _Silu(torch.nn.Module):
    """A conv, a SiLU (x * sigmoid(x), YOLO's activation), a conv, a residual add and a
    concat with a pooled copy (YOLO's SPPF and neck)."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2 = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.Conv2d(8, 8, 1)

    def forward(self, x):
        y = self.c1(x)
        y = y * torch.sigmoid(y)
        y = self.c2(y) + y
        return torch.cat([y, torch.nn.functional.max_pool2d(y, 3, 1, 1) * 0.5], dim=1)


class _Pooled(torch.nn.Module):
    """A conv, a 2 x 2 average pool and a global one (a classifier's head)."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        y = torch.nn.functional.avg_pool2d(torch.relu(self.c1(x)), 2)
        return torch.nn.functional.adaptive_avg_pool2d(y, 1)


def _optimized_and_checked(tmp_path, signer, net, seed: int):
    """``net`` quantized (QDQ), built with the option and loaded: the summary's line on the
    rewrite and the graph, its outputs checked equal to bare onnxruntime's on both backends."""
    path = _qdq_model(tmp_path, net=net, seed=seed)
    said: list[str] = []
    _, loaded = import_and_load(path, tmp_path / "q.pha", signer, onnxruntime_optimized=True,
                                report=said.append)
    for backend in (NumpyBackend(), OnnxruntimeBackend()):
        executor = Executor(loaded.graph, backend)
        for feed in _feeds():
            np.testing.assert_array_equal(executor.run(dict(feed))["y"],
                                          onnxruntime_outputs(path, feed)["y"])
    return next(line for line in said if "extended graph optimizations" in line), loaded.graph


def test_elementwise_groups_import_as_onnxruntimes_kernels(tmp_path, signer):
    note, graph = _optimized_and_checked(tmp_path, signer, _Silu, 8)
    for op in ("QLinearSigmoid", "QLinearMul", "QLinearAdd", "QLinearConcat"):
        assert f"com.microsoft.{op} x" in note, note
    assert "emulations" not in note  # each one op, which the onnxruntime backend runs as is
    ops = {n.op for n in graph.nodes}
    assert {"qlinear_sigmoid", "qlinear_mul", "qlinear_add", "qlinear_concat"} <= ops
    assert "embedding" not in ops


def test_average_pools_import_as_onnxruntimes_kernels(tmp_path, signer):
    """QLinearAveragePool and QLinearGlobalAveragePool are one op each,
    ``qlinear_average_pool`` and ``qlinear_global_average_pool``: onnxruntime's kernels."""
    note, graph = _optimized_and_checked(tmp_path, signer, _Pooled, 4)
    for op in ("QLinearAveragePool", "QLinearGlobalAveragePool"):
        assert f"com.microsoft.{op} x1" in note, note
    assert "emulations" not in note
    assert {"qlinear_average_pool", "qlinear_global_average_pool"} <= {
        node.op for node in graph.nodes}


def test_the_summary_names_the_groups_imported_as_emulations():
    """QLinearWhere imports as several ops (its lookup tables): the summary says so, naming
    it, and the kernels it gained besides."""
    def model(*ops):
        nodes = [onnx.helper.make_node(op, [], [f"o{k}"], domain=domain)
                 for k, (domain, op) in enumerate(ops)]
        return onnx.helper.make_model(onnx.helper.make_graph(nodes, "g", [], []))
    before = model(("", "DequantizeLinear"), ("", "Where"), ("", "QuantizeLinear"))
    after = model(("com.microsoft", "QLinearWhere"), ("com.microsoft", "QLinearAveragePool"))
    note = _optimized_note(before, after)
    assert note.endswith("the reference runs the rewritten model; com.microsoft.QLinearWhere "
                         "import as exact emulations of several ops each (lookup tables, "
                         "integer arithmetic), which can run slower than a build without "
                         "--onnxruntime-optimized: compare the two builds' latency"), note
    assert "new: com.microsoft.QLinearAveragePool x1, com.microsoft.QLinearWhere x1;" in note


def test_a_float_models_fusions_import(tmp_path, signer):
    torch.manual_seed(6)
    path = export(_Net(), [torch.randn(*_SHAPE)], tmp_path / "float.onnx", dynamo=False,
                  input_names=["x"], output_names=["y"])
    said: list[str] = []
    _, loaded = import_and_load(path, tmp_path / "f.pha", signer, onnxruntime_optimized=True,
                                report=said.append)
    assert any("com.microsoft.FusedConv x2" in line for line in said), said
    assert {"conv", "relu"} <= {n.op for n in loaded.graph.nodes}
    check_on_both_backends(path, loaded, _feeds())


def _mixed_add(path):
    """An Add of a float32 input and an int64 constant: ONNX's checker passes it, onnxruntime's
    type checks refuse to load it."""
    helper, TP = onnx.helper, onnx.TensorProto
    one = onnx.numpy_helper.from_array(np.ones((1, 3), np.int64), "one")
    graph = helper.make_graph([helper.make_node("Add", ["x", "one"], ["y"], name="add")], "g",
                              [helper.make_tensor_value_info("x", TP.FLOAT, [1, 3])],
                              [helper.make_tensor_value_info("y", TP.FLOAT, [1, 3])], [one])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_a_model_onnxruntime_cannot_load_is_refused_naming_why(tmp_path):
    path = _mixed_add(tmp_path / "bad.onnx")
    with pytest.raises(ModelImportError, match=r"onnxruntime cannot optimize the model: .*"
                                               r"add"):
        build_onnx_artifact(path, tmp_path / "bad.pha", onnxruntime_optimized=True)
    assert not (tmp_path / "bad.pha").exists()


def test_a_rewritten_model_past_the_cap_is_refused(tmp_path):
    path = export(_Net(), [torch.randn(*_SHAPE)], tmp_path / "float.onnx", dynamo=False,
                  input_names=["x"], output_names=["y"])
    with pytest.raises(ModelImportError, match=r"onnxruntime's rewrite of the model is \d+ "
                                               r"bytes, past the cap of 1000"):
        run_optimizer(path.read_bytes(), max_bytes=1000)
    # the process answers the next request
    assert len(run_optimizer(path.read_bytes(), max_bytes=1 << 30)) > 1000


def test_a_model_its_constant_folding_blows_up_is_refused_early(tmp_path, monkeypatch):
    """A small file whose constant, expanded, onnxruntime's folding writes out whole (a fuzzed
    file of 40 KB answered 170 MB, read, upgraded and folded again for 7.6 s before its
    refusal): past OPTIMIZED_GROWTH times the model's size plus OPTIMIZED_SLACK, refused naming
    the option; the same model builds without it."""
    from onnx import TensorProto, helper

    monkeypatch.setattr(build_module, "OPTIMIZED_SLACK", 1 << 20)
    nodes = [helper.make_node("Constant", [], ["c"], value=helper.make_tensor(
                 "c", TensorProto.FLOAT, [1, 1], [0.5])),
             helper.make_node("Constant", [], ["shape"], value=helper.make_tensor(
                 "shape", TensorProto.INT64, [2], [1 << 9, 1 << 10])),
             helper.make_node("Expand", ["c", "shape"], ["big"]),
             helper.make_node("Add", ["x", "big"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 1 << 10])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1 << 9, 1 << 10])])
    path = tmp_path / "expand.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    assert path.stat().st_size < 1000  # 2 MiB once folded
    with pytest.raises(ModelImportError, match=r"onnxruntime's optimizer makes the model larger "
                       r"than 8 times its size plus 1 MiB \(onnxruntime's rewrite of the model "
                       r"is \d+ bytes, past the cap of \d+\): .* build without "
                       r"--onnxruntime-optimized"):
        build_onnx_artifact(path, tmp_path / "e.pha", onnxruntime_optimized=True)
    build_onnx_artifact(path, tmp_path / "e.pha")


def test_the_cli_option(tmp_path, capsys):
    path = _qdq_model(tmp_path)
    code = main(["build", "--onnx", str(path), "--onnxruntime-optimized", "--out",
                 str(tmp_path / "q.pha")])
    out, err = capsys.readouterr()
    assert code == 0 and "qlinear_conv" in out, (out, err)
    assert "onnxruntime's extended graph optimizations rewrite it" in out + err
    code = main(["build", "--demo", "--onnxruntime-optimized", "--out", str(tmp_path / "d.pha")])
    _, err = capsys.readouterr()
    assert code == 1 and "--onnxruntime-optimized go with --onnx" in err
    assert not (tmp_path / "d.pha").exists()
