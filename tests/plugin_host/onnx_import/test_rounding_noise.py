"""The default tolerance where a model's own float32 rounding is coarser than it.

A stack of 3x3 convolutions with unit-variance weights (no 1/sqrt(fan-in) scaling) reaches
values of thousands, and an element near zero then differs between any two float32 summation
orders by more than the default atol: onnxruntime's own runs of the model with its graph
optimizations off (the reference) and on (blocked-layout convolutions) differ so, and so does
the numpy backend. Without a tolerance given, the build measures that noise and widens the
failing output's atol to NOISE_MARGIN times it; with one given, it keeps it and says what it
measured. A quantized model can differ by whole steps of a rounding instead
(test_quantized_rounding.py).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from plugin_host.artifacts import load_verified, read_manifest_unverified, sign_artifact
from plugin_host.cli import main
from plugin_host.errors import ModelImportError
from plugin_host.onnx_import import build as onnx_build
from plugin_host.onnx_import import comparison
from plugin_host.onnx_import import build_onnx_artifact
from plugins.numpy_backend import NumpyBackend

from .conftest import onnx, ort

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _convs(path, layers: int = 3, channels: int = 32, seed: int = 0):
    """Conv stack ``x -> c0 -> ... -> c{layers-1}``; every conv's output is a graph output."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, weights, prev = [], [], "x"
    for i in range(layers):
        w = rng.standard_normal((channels, 3 if i == 0 else channels, 3, 3)).astype(np.float32)
        weights.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("Conv", [prev, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1]))
        prev = f"c{i}"
    outputs = [helper.make_tensor_value_info(f"c{i}", TensorProto.FLOAT,
                                             [1, channels, 16, 16]) for i in range(layers)]
    graph = helper.make_graph(nodes, "convs", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 3, 16, 16])], outputs, weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def _noise(path, loaded, output: str) -> float:
    """onnxruntime's largest difference between its runs with graph optimizations off and on
    (one thread each, quantize-dequantize pairs unfused, as the reference process runs them)
    over the artifact's golden cases."""
    runs = []
    for level in ("ORT_DISABLE_ALL", "ORT_ENABLE_ALL"):
        options = ort.SessionOptions()
        options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
        options.add_session_config_entry("session.disable_quant_qdq", "1")
        options.intra_op_num_threads = 1
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        runs.append([session.run([output], {"x": inputs["x"]})[0]
                     for inputs, _ in loaded.golden_cases()])
    return max(float(np.abs(a - b).max()) for a, b in zip(*runs))


def _refused_shifted(tmp_path, monkeypatch, by: float, optimized_by: float) -> str:
    """The refusal of a one-conv model whose reference outputs are moved by ``by``, and
    those of the reference's optimized run by ``optimized_by`` more; the model's values in
    float64 are the reference's (the import, not onnxruntime's rounding, is off by ``by``)."""
    real = onnx_build.run_reference

    def shifted(*args, optimized=False, **kwargs):
        cases = real(*args, **kwargs)
        for case in cases:
            for name in case:
                case[name] = case[name] + np.float32(by + (optimized_by if optimized else 0.0))
        return cases

    def exactly(*args, timeout):
        return [{k: v.astype(np.float64) for k, v in case.items()} for case in shifted(*args)]

    monkeypatch.setattr(onnx_build, "run_reference", shifted)
    monkeypatch.setattr(onnx_build, "evaluate_float64", exactly)
    with pytest.raises(ModelImportError) as info:
        build_onnx_artifact(_convs(tmp_path / "c.onnx", layers=1), tmp_path / "c.pha")
    text, imported_off = str(info.value), (" of the imported graph's on this output (the "
                                           "imported graph is the further from them)")
    assert text.endswith(imported_off)
    return text[:-len(imported_off)]


def test_default_tolerance_widens_to_the_models_own_rounding(tmp_path, signer):
    from plugins.onnxruntime_backend import OnnxruntimeBackend

    model, out, notes = _convs(tmp_path / "c.onnx"), tmp_path / "c.pha", []
    build_onnx_artifact(model, out, latency_ms=100.0, report=notes.append)
    key, trust = signer
    sign_artifact(out, key)
    loaded = load_verified(out, trust=trust, rollback=None, backends={"numpy", "onnxruntime"})
    tolerances = read_manifest_unverified(out)["manifest"]["tolerances"]
    noise = _noise(model, loaded, "c2")
    assert noise > 1e-5  # the premise: finer than this model's rounding, the default fails
    want = comparison._two_digits_up(comparison.NOISE_MARGIN * noise)
    assert tolerances["c2"] == {"rtol": 1e-4, "atol": want}
    assert tolerances["c0"] == {"rtol": 1e-4, "atol": 1e-5}  # it passes: kept
    [line] = [n for n in notes if n.startswith("output 'c2'")]
    assert line.startswith(f"output 'c2': atol 1e-05 widened to {want:g}, 3 times the model's "
                           f"own float32 rounding there (onnxruntime's runs with graph "
                           f"optimizations off and on differ by up to {noise:.3g}; ")
    loaded.check_golden(NumpyBackend())  # and acceptance holds on both backends
    loaded.check_golden(OnnxruntimeBackend())


def test_a_tolerance_given_is_kept_and_the_refusal_says_what_onnxruntime_does(tmp_path):
    model = _convs(tmp_path / "c.onnx")
    with pytest.raises(ModelImportError) as info:
        build_onnx_artifact(model, tmp_path / "c.pha", tolerances=(1e-4, 1e-5))
    text = str(info.value)
    assert re.match(r"golden case \d: output 'c\d' of the imported graph differs from "
                    r"onnxruntime in ", text)
    assert "; onnxruntime's own runs of the model with graph optimizations off and on differ " \
           "by up to " in text
    assert re.search(r" on this output \(the tolerance as given is kept\); evaluated in float64 "
                     r"by onnx's reference evaluator, the model's values are within [0-9.e-]+ of "
                     r"onnxruntime's and [0-9.e-]+ of the imported graph's on this output"
                     r"( \(the imported graph is the further from them\))?$", text)
    assert not (tmp_path / "c.pha").exists()


def test_widening_only_to_the_measured_noise(tmp_path, monkeypatch):
    """A reference the imported graph is 1e-3 away from, whose optimized run is 1e-4 away
    from it: the atol widens to 3e-4 only, and the build is refused saying so."""
    text = _refused_shifted(tmp_path, monkeypatch, 1e-3, 1e-4)
    assert "output 'c0' of the imported graph differs from onnxruntime" in text
    found = re.search(r"atol ([0-9.e-]+)\);.* differ by up to ([0-9.e-]+) on this output \(the "
                      r"default atol widened to 3 times that\); evaluated in float64 by onnx's "
                      r"reference evaluator, the model's values are within 0 of onnxruntime's "
                      r"and 0.001$", text)
    atol, noise = float(found[1]), float(found[2])
    assert 9e-5 < noise < 1.1e-4  # 1e-4, give or take float32's rounding of the sums
    assert 0.999 * 3 * noise <= atol <= 1.04 * 3 * noise  # three times it, rounded up


def test_integer_outputs_are_never_widened():
    calls = []

    def rerun(timeout):
        calls.append(timeout)
        return []

    reference = [{"n": np.array([1, 2]), "y": np.zeros(2, np.float32)}]
    assert comparison._rounding_noise(rerun, reference, ["n"], print, 1.0) == {}
    assert calls == []  # an integer output has no rounding: onnxruntime is not asked


@pytest.mark.parametrize("value, want", [(1.0304e-4, 1.1e-4), (1.716e-4, 1.8e-4), (1.0, 1.0),
                                         (99.1, 100.0), (3e-6, 3e-6), (0.0451, 0.046)])
def test_two_digits_rounded_up(value, want):
    assert comparison._two_digits_up(value) == want


def test_cli_prints_each_outputs_tolerance_where_they_differ(tmp_path, capsys):
    model, out = _convs(tmp_path / "c.onnx", layers=2), tmp_path / "c.pha"
    assert main(["build", "--onnx", str(model), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    atol = read_manifest_unverified(out)["manifest"]["tolerances"]["c1"]["atol"]
    assert atol > 1e-5
    assert f"tolerances 'c0' rtol 0.0001 atol 1e-05, 'c1' rtol 0.0001 atol {atol:g}, " in text
    assert f"\noutput 'c1': atol 1e-05 widened to {atol:g}, " in text
    # --atol (or --rtol, --tolerance) keeps the tolerance as given
    code = main(["build", "--onnx", str(model), "--out", str(tmp_path / "d.pha"),
                 "--atol", "1e-5"])
    err = capsys.readouterr().err
    assert code != 0 and "(the tolerance as given is kept); evaluated in float64 by " in err


def test_an_optimized_run_that_fails_leaves_the_refusal_as_it_was(tmp_path, monkeypatch):
    """onnxruntime's optimizers are native code on a hostile model: a crash or a run past its
    time (NOISE_TIMEOUT_S beyond four times the reference's) is no measure, and the build is
    refused as at the default, without one (nor one in float64, here)."""
    real, asked = onnx_build.run_reference, []

    def stopped(*args, optimized=False, **kwargs):
        if optimized:
            asked.append(kwargs["timeout"])
            raise ModelImportError("onnxruntime did not finish the golden cases in 1 s")
        return real(*args, **kwargs)

    def unevaluated(*args, timeout):
        raise ModelImportError("no evaluation")

    monkeypatch.setattr(onnx_build, "run_reference", stopped)
    monkeypatch.setattr(onnx_build, "evaluate_float64", unevaluated)
    with pytest.raises(ModelImportError) as info:
        build_onnx_artifact(_convs(tmp_path / "c.onnx"), tmp_path / "c.pha")
    text = str(info.value)
    assert "differs from onnxruntime" in text and text.endswith(
        "else this is an import bug; its evaluation in float64 by onnx's reference evaluator "
        "failed: no evaluation")
    [timeout] = asked
    assert comparison.NOISE_TIMEOUT_S < timeout < comparison.NOISE_TIMEOUT_S + 30


def test_an_optimized_run_that_computes_something_else_widens_nothing(tmp_path, monkeypatch):
    """An optimized run 0.5 away from the reference on an output of values up to about 10:
    no rounding does that (NOISE_MAX_RELATIVE), so the default tolerance stands and the
    refusal says why."""
    text = _refused_shifted(tmp_path, monkeypatch, 1e-3, 0.5)
    assert "(max |diff| 0.001; rtol 0.0001, atol 1e-05)" in text
    found = re.search(r"differ by up to 0.5 on this output, more than float32 rounding of "
                      r"values up to ([0-9.]+) \(the default tolerance is kept\); evaluated in "
                      r"float64 by onnx's reference evaluator, the model's values are within 0 "
                      r"of onnxruntime's and 0.001$", text)
    assert found and 5 < float(found[1]) < 50


def test_a_float_models_refusal_says_nothing_of_steps(tmp_path, monkeypatch):
    text = _refused_shifted(tmp_path, monkeypatch, 1e-3, 0.0)
    assert "differs from onnxruntime" in text and "integer steps" not in text


def test_a_saturation_explains_the_refusal_before_anything_is_measured():
    """Where onnxruntime's saturating u8 x s8 kernel explains the difference (a CPU without
    VNNI, :mod:`.saturation`), that is the refusal, and onnxruntime is not run again."""
    from abi.spec import TensorSpec

    reruns, given = [], []

    def saturated(message):
        given.append(message)
        return "the whole refusal"

    with pytest.raises(ModelImportError) as info:
        comparison.held_to_reference(
            [TensorSpec("y", (2,), "float32", "N")], [{"y": np.ones(2, np.float32)}],
            [{"y": np.zeros(2, np.float32)}], {"y": (1e-4, 1e-5)}, given_tolerance=False,
            rerun=reruns.append, reference_s=0.0, explain_saturation=saturated,
            explain_refusal=lambda integer: "", say=print, tell=print)
    assert str(info.value) == "the whole refusal" and reruns == []
    assert given == ["golden case 0: output 'y' of the imported graph differs from onnxruntime "
                     "in 2 of 2 element(s) (max |diff| 1; rtol 0.0001, atol 1e-05); widen "
                     "--rtol/--atol if that is expected, else this is an import bug"]
