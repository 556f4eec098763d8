"""A quantized model's difference from onnxruntime: whole steps of a rounding to integers.

Where a float value before a rounding to integer steps lands within float32 rounding of half a
step, the imported graph and onnxruntime round it to neighbouring steps, and the step grows
through the layers after it. onnxruntime's own runs with graph optimizations off and on part
the same way: the build traces them (the codes of every QuantizeLinear and
DynamicQuantizeLinear, on the golden cases and more inputs drawn alike) and widens the default
tolerance only where they first part one step apart at a few codes; a refusal of a quantized
model says what such a difference can be.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from plugin_host.artifacts import load_verified, read_manifest_unverified, sign_artifact
from plugin_host.errors import ModelImportError
from plugin_host.onnx_import import build as onnx_build
from plugin_host.onnx_import import build_onnx_artifact, comparison, quantized_rounding
from plugin_host.onnx_import.quantized_rounding import Parting
from plugins.numpy_backend import NumpyBackend

from .conftest import onnx, ort
from .test_rounding_noise import _noise

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _quantized(path):
    """x -> QuantizeLinear -> DequantizeLinear -> Relu, twice rounded by a QuantizeLinear."""
    from onnx import TensorProto, helper, numpy_helper

    scale = numpy_helper.from_array(np.array(0.05, np.float32), "s")
    zero = numpy_helper.from_array(np.array(0, np.uint8), "z")
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
             helper.make_node("QuantizeLinear", ["d", "s", "z"], ["q2"]),
             helper.make_node("DequantizeLinear", ["q2", "s", "z"], ["d2"]),
             helper.make_node("Relu", ["d2"], ["y"])]
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 8])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 8])], [scale, zero])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_a_quantized_models_refusal_says_a_step_can_round_apart(tmp_path, monkeypatch):
    from plugin_host.onnx_import import quantized_rounding

    model = _quantized(tmp_path / "q.onnx")
    assert quantized_rounding.rounding_ops(onnx.load(model)) == {"QuantizeLinear": 2}
    build_onnx_artifact(model, tmp_path / "q.pha")  # as onnxruntime computes it
    real = onnx_build.run_reference

    def one_step_off(*args, **kwargs):  # the reference a step away, as a rounding flip is
        cases = real(*args, **kwargs)
        for case in cases:
            case["y"] = case["y"] + np.float32(0.05)
        return cases

    monkeypatch.setattr(onnx_build, "run_reference", one_step_off)
    with pytest.raises(ModelImportError) as info:
        build_onnx_artifact(model, tmp_path / "q2.pha")
    assert str(info.value).endswith(
        "else this is an import bug; the model rounds float values to integer steps (2 "
        "QuantizeLinear): where a value lands within float32 rounding of half a step, the "
        "imported graph and onnxruntime, which sum in different orders, can round it to "
        "neighbouring steps, and that step grows through the layers after it (a difference of "
        "the size quantization makes against the float model: the default atol widens to it "
        "where onnxruntime's own runs part so on the 8 inputs the build traces (more with more "
        "--golden-cases), and --atol can accept it; an import bug looks the same)")


def _codes_out(path):
    """_quantized_conv's first conv and its QuantizeLinear, whose uint8 codes are the output:
    onnxruntime's runs with graph optimizations off and on round one or two of them apart on
    some of 8 inputs (test_trace_finds_where_onnxruntimes_runs_part...)."""
    from onnx import TensorProto, helper

    full = onnx.load(_quantized_conv(path))
    nodes = [n for n in full.graph.node if n.op_type != "DequantizeLinear"
             and n.output[0] != "y"]
    nodes[-1].output[0] = "y"
    graph = helper.make_graph(nodes, "codes", list(full.graph.input), [
        helper.make_tensor_value_info("y", TensorProto.UINT8, [1, 64, 32, 32])],
        [t for t in full.graph.initializer if t.name != "w2"])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("tolerance", [None, (1e-4, 1.0)])
def test_an_integer_output_is_held_exactly_and_the_refusal_says_how_far_onnxruntime_parts(
        tmp_path, tolerance):
    """A full-integer model's codes (TFLite's int8 models end so): the imported graph rounds
    a few of them a step apart from the reference, as onnxruntime's own runs do, and that is
    refused whatever the tolerance; the refusal says so, and how far onnxruntime's runs part
    on that output, not that an atol could accept it."""
    model = _codes_out(tmp_path / "q.onnx")
    with pytest.raises(ModelImportError) as info:
        build_onnx_artifact(model, tmp_path / "q.pha", tolerances=tolerance, golden_cases=8)
    text = str(info.value)
    found = re.match(r"golden case \d: output 'y' of the imported graph differs from onnxruntime "
                     r"in (\d) of 65536 element\(s\) \(max \|diff\| 1\); it is uint8, which must "
                     r"equal the reference's exactly: no tolerance applies to it; onnxruntime's "
                     r"own runs of the model with graph optimizations off and on differ on this "
                     r"output too, by up to 1 at (\d+) of 524,288 elements; the model rounds "
                     r"float values to integer steps \(1 QuantizeLinear\)", text)
    assert found and 1 <= int(found[1]) <= 8 and 1 <= int(found[2]) <= 16, text
    assert text.endswith("(a difference of the size quantization makes against the float "
                         "model: an integer output, as this one, is held to the reference "
                         "exactly, so neither a widened atol nor --atol can accept it; an "
                         "import bug looks the same)")


def test_a_model_whose_roundings_are_not_traced_is_told_only_of_atol():
    """com.microsoft's quantized ops keep their codes inside: nothing is traced, so the
    refusal does not speak of a widening."""
    from onnx import helper

    graph = helper.make_graph([helper.make_node("QLinearSigmoid", list("abcde"), ["y"],
                                                domain="com.microsoft")], "q", [], [])
    text = quantized_rounding.explain(helper.make_model(graph))
    assert "(1 QLinearSigmoid)" in text and text.endswith(
        "against the float model: --atol can accept it; an import bug looks the same)")


def _quantized_conv(path, seed: int = 1, requantized: bool = False, height: int | str = 32):
    """Conv (32 -> 64 channels, 3x3, 32x32) -> QuantizeLinear -> DequantizeLinear -> Conv:
    the first conv's 65,536 values are rounded to steps of 4/255, so a golden case has one
    or two within float32 rounding of half a step, which onnxruntime's runs with graph
    optimizations off and on (blocked-layout convolutions) round apart; the second conv
    spreads that step over a few outputs. ``requantized``: the output rounded to steps of
    1/64 again (QuantizeLinear 'q2', DequantizeLinear); ``height`` may be a run-time dim."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((64, 32, 3, 3)) / np.sqrt(32 * 9)).astype(np.float32)
    w2 = (rng.standard_normal((4, 64, 3, 3)) / np.sqrt(64 * 9)).astype(np.float32)
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"),
             numpy_helper.from_array(np.array(4.0 / 255, np.float32), "s"),
             numpy_helper.from_array(np.array(128, np.uint8), "z")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["c", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
             helper.make_node("Conv", ["d", "w2"], ["c2" if requantized else "y"],
                              pads=[1, 1, 1, 1])]
    if requantized:
        inits.append(numpy_helper.from_array(np.array(1 / 64, np.float32), "s2"))
        nodes += [helper.make_node("QuantizeLinear", ["c2", "s2", "z"], ["q2"]),
                  helper.make_node("DequantizeLinear", ["q2", "s2", "z"], ["y"])]
    graph = helper.make_graph(nodes, "qconv", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 32, height, 32])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 4, height, 32])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_a_quantized_models_default_tolerance_widens_where_onnxruntime_steps_apart(
        tmp_path, signer):
    from plugins.onnxruntime_backend import OnnxruntimeBackend

    model, out, notes = _quantized_conv(tmp_path / "q.onnx"), tmp_path / "q.pha", []
    build_onnx_artifact(model, out, golden_cases=8, latency_ms=100.0, report=notes.append)
    key, trust = signer
    sign_artifact(out, key)
    loaded = load_verified(out, trust=trust, rollback=None, backends={"numpy", "onnxruntime"})
    noise = _noise(model, loaded, "y")
    # the premise: onnxruntime's runs step apart, by more than float32 rounding does
    assert noise > comparison.NOISE_MAX_RELATIVE * max(
        float(np.abs(want["y"]).max()) for _, want in loaded.golden_cases())
    want = comparison._two_digits_up(comparison.NOISE_MARGIN * noise)
    assert read_manifest_unverified(out)["manifest"]["tolerances"]["y"] == {
        "rtol": 1e-4, "atol": want}
    [line] = [n for n in notes if n.startswith("output 'y'")]
    found = re.fullmatch(
        rf"output 'y': atol 1e-05 widened to {want:g}, 3 times the model's own rounding to "
        rf"integer steps there \(onnxruntime's runs with graph optimizations off and on "
        rf"differ by up to {noise:.3g}, after they first part one step apart at a rounding on "
        rf"(\d) of the 8 inputs \(QuantizeLinear 'q' in case \d: ([12]) of 65,536 "
        rf"codes one step apart\); the imported graph is within [0-9.e-]+ of the first\); "
        rf"--tolerance, --rtol or --atol keep a tolerance as given", line)
    assert found, line
    loaded.check_golden(NumpyBackend())  # and acceptance holds on both backends
    loaded.check_golden(OnnxruntimeBackend())


def test_a_dynamically_quantized_models_runs_part_at_its_dynamic_quantization(tmp_path):
    """quantize_dynamic of a float conv, ReLU and conv, the first conv left float: the second's
    input is quantized at run time (DynamicQuantizeLinear), and onnxruntime's runs part there
    after the first conv's summation orders differ."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from .conftest import export, torch

    class Convs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Conv2d(32, 64, 3, padding=1)
            self.b = torch.nn.Conv2d(64, 4, 3, padding=1)

        def forward(self, x):
            return self.b(torch.relu(self.a(x)))

    torch.manual_seed(0)
    float_model = export(Convs().eval(), [torch.randn(1, 32, 32, 32)], tmp_path / "f.onnx",
                         dynamo=False, input_names=["x"], output_names=["y"])
    first = next(n.name for n in onnx.load(float_model).graph.node if n.op_type == "Conv")
    model = tmp_path / "q.onnx"
    quantize_dynamic(str(float_model), str(model), nodes_to_exclude=[first],
                     weight_type=QuantType.QUInt8)  # exact on every CPU's onnxruntime
    notes = []
    build_onnx_artifact(model, tmp_path / "q.pha", golden_cases=8, report=notes.append)
    [line] = [n for n in notes if n.startswith("output 'y'")]
    assert re.search(r"3 times the model's own rounding to integer steps there .* of the 8 "
                     r"inputs \(DynamicQuantizeLinear '[^']*Relu[^']*' in case \d: 1 of "
                     r"65,536 codes one step apart\)", line), line
    assert read_manifest_unverified(tmp_path / "q.pha")["manifest"]["tolerances"]["y"][
        "atol"] > 1e-5


def test_trace_finds_where_onnxruntimes_runs_part_and_leaves_the_model_as_it_was(tmp_path):
    model = onnx.load(_quantized_conv(tmp_path / "q.onnx", requantized=True))
    rng = np.random.default_rng(0)
    cases = [{"x": rng.standard_normal((1, 32, 32, 32)).astype(np.float32)}
             for _ in range(8)]
    before = model.SerializeToString()
    assert quantized_rounding.code_tensors(model) == [("QuantizeLinear", "q"),
                                                     ("QuantizeLinear", "q2")]
    traced = quantized_rounding.trace(model, {"x": "x"}, {"out": "y"}, cases, timeout=60.0)
    assert model.SerializeToString() == before  # the codes are graph outputs only for the runs
    partings = traced.partings
    assert partings and all(p.op == "QuantizeLinear" and p.tensor == "q" and p.steps == 1
                            and p.size == 65536 and 1 <= p.apart <= 2 and p.flips
                            for p in partings)
    assert sorted({p.case for p in partings}) == [p.case for p in partings]  # one per case
    # the outputs, by ABI name, as onnxruntime's runs with optimizations off and on give them
    for optimized, runs in ((False, traced.off), (True, traced.on)):
        options = ort.SessionOptions()
        options.graph_optimization_level = getattr(
            ort.GraphOptimizationLevel, "ORT_ENABLE_ALL" if optimized else "ORT_DISABLE_ALL")
        options.add_session_config_entry("session.disable_quant_qdq", "1")
        options.intra_op_num_threads = 1
        session = ort.InferenceSession(model.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        for inputs, outputs in zip(cases, runs, strict=True):
            assert list(outputs) == ["out"]
            assert np.array_equal(outputs["out"], session.run(["y"], inputs)[0])


def _refused_traced(tmp_path, monkeypatch, partings=None, *, fails: bool = False,
                    tolerances=None, **options) -> tuple[str, list]:
    """The build of the quantized conv (2 golden cases; ``options`` are the model's), whose
    runs are traced with ``partings`` in place of the real ones (or the trace fails): the
    refusal, and the inputs and timeout the trace was given."""
    real, asked = onnx_build.trace_roundings, []

    def traced(model, onnx_inputs, onnx_outputs, cases, *, timeout):
        asked.append((cases, timeout))
        if fails:
            raise ModelImportError("onnxruntime cannot run the model: no")
        found = real(model, onnx_inputs, onnx_outputs, cases, timeout=timeout)
        return found._replace(partings=found.partings if partings is None else partings)

    monkeypatch.setattr(onnx_build, "trace_roundings", traced)
    with pytest.raises(ModelImportError) as info:
        build_onnx_artifact(_quantized_conv(tmp_path / "q.onnx", **options), tmp_path / "q.pha",
                            tolerances=tolerances,
                            golden_dims={"h": (32, 16, 8)} if "height" in options else None)
    assert not (tmp_path / "q.pha").exists()
    return str(info.value), asked


@pytest.mark.parametrize("partings, why", [
    ([Parting("QuantizeLinear", "q", 0, 1, 65536, 1),
      Parting("QuantizeLinear", "q", 3, 40, 65536, 3)],
     ", and not where they part at a rounding to integer steps either (QuantizeLinear 'q' in "
     "case 3: 40 of 65,536 codes up to 3 steps apart)"),
    ([Parting("QuantizeLinear", "q", 2, 70, 65536, 1)],
     ", and not where they part at a rounding to integer steps either (QuantizeLinear 'q' in "
     "case 2: 70 of 65,536 codes one step apart)"),
    ([], ", and their codes at the model's roundings to integer steps are the same")])
def test_runs_that_part_otherwise_widen_nothing(tmp_path, monkeypatch, partings, why):
    """Runs that part by more than one step, or at more values than a rounding reaches, or
    not at a rounding at all: the default tolerance stands, and the refusal says what the
    trace found, and on how many inputs."""
    text, [(inputs, timeout)] = _refused_traced(tmp_path, monkeypatch, partings)
    found = re.search(r"differ by up to [0-9.e-]+ on 8 inputs \(the 2 golden cases and 6 more "
                      r"drawn alike\) on this output, more than float32 rounding of values up "
                      r"to [0-9.]+(.*) \(the default tolerance is kept\); the model rounds "
                      r"float values to integer steps \(1 QuantizeLinear\)", text)
    assert found and found[1] == why, text
    assert len(inputs) == 8  # and four times the golden cases' time
    assert 4 * comparison.NOISE_TIMEOUT_S < timeout < 4 * (comparison.NOISE_TIMEOUT_S + 30)


def test_the_trace_takes_the_golden_cases_and_more_drawn_alike(tmp_path, monkeypatch):
    """The build's 2 golden cases first, then 6 more inputs of the same shape, all
    different."""
    real, golden = onnx_build.run_reference, []

    def recorded(model, onnx_inputs, onnx_outputs, cases, **kwargs):
        golden.append(cases)
        return real(model, onnx_inputs, onnx_outputs, cases, **kwargs)

    monkeypatch.setattr(onnx_build, "run_reference", recorded)
    _, [(inputs, _)] = _refused_traced(tmp_path, monkeypatch, [])
    assert len(golden[0]) == 2 and len(inputs) == quantized_rounding.TRACE_CASES == 8
    assert inputs[:2] == golden[0]  # the very golden cases
    assert len({x["x"].tobytes() for x in inputs}) == 8
    assert all(x["x"].shape == (1, 32, 32, 32) and x["x"].dtype == np.float32 for x in inputs)


def test_the_inputs_drawn_for_the_trace_take_the_golden_cases_sizes(tmp_path, monkeypatch):
    """A run-time dim drawn at 32, 16 and 8 (--golden-dim) in 2 golden cases took 32 and 16:
    the inputs drawn for the trace take those in turn, never 8."""
    _, [(inputs, _)] = _refused_traced(tmp_path, monkeypatch, [], height="h")
    assert [x["x"].shape[2] for x in inputs] == [32, 16] * 4


def test_a_trace_that_fails_leaves_the_refusal_without_a_measure(tmp_path, monkeypatch):
    text, _ = _refused_traced(tmp_path, monkeypatch, fails=True)
    assert "differ by up to" not in text
    assert "else this is an import bug; the model rounds float values to integer steps" in text


def test_a_tolerance_given_is_kept_and_the_refusal_says_what_the_runs_do(tmp_path,
                                                                        monkeypatch):
    text, _ = _refused_traced(tmp_path, monkeypatch, tolerances=(1e-4, 1e-5))
    assert re.search(r"differ by up to [0-9.e-]+ on 8 inputs \(the 2 golden cases and 6 more "
                     r"drawn alike\) on this output \(the tolerance as given is kept\)", text)


def test_a_traced_model_within_float32_rounding_widens_as_a_float_one():
    """The trace is the measure of a model with roundings to steps (onnxruntime's
    optimized run alone is not asked): runs within float32 rounding of each other, their
    codes alike, widen as for a float model, on the inputs the trace took."""
    from abi.spec import TensorSpec

    reruns, lines = [], []
    reference = [{"y": np.full(4, 10.0, np.float32)}]
    got = [{"y": np.full(4, 10.0 + 2e-5, np.float32)}]
    off = [{"y": np.full(4, 1.0 + k / 8, np.float32)} for k in range(3)]
    on = [{"y": case["y"] + np.float32(2.0**-17)} for case in off]  # 7.63e-6, exactly
    table = comparison.held_to_reference(
        [TensorSpec("y", (4,), "float32", "N")], got, reference, {"y": (0.0, 1e-5)},
        given_tolerance=False, rerun=reruns.append, reference_s=0.0,
        explain_saturation=lambda message: None, explain_refusal=lambda integer: "", say=print,
        tell=lines.append, trace=lambda timeout: quantized_rounding.Traced(off, on, []))
    assert reruns == [] and table["y"][1] > 2e-5
    assert "model's own float32 rounding there (onnxruntime's runs with graph optimizations " \
           "off and on differ by up to 7.63e-06 on 3 inputs (the 1 golden case and 2 more " \
           "drawn alike); " in lines[0]


@pytest.mark.parametrize("parting, flips, text", [
    (Parting("QuantizeLinear", "q", 0, 65, 65536, 1), True, "65 of 65,536 codes one step"),
    (Parting("QuantizeLinear", "q", 0, 66, 65536, 1), False, "66 of 65,536 codes one step"),
    (Parting("DynamicQuantizeLinear", "a", 1, 1, 8, 1), True, "1 of 8 codes one step"),
    (Parting("QuantizeLinear", "q", 0, 2, 8, 1), False, "2 of 8 codes one step"),
    (Parting("QuantizeLinear", "q", 0, 1, 65536, 2), False, "1 of 65,536 codes up to 2 steps"),
    (Parting("QuantizeLinear", "q", 0, 4, 4, -1), False, "shaped differently")])
def test_a_parting_is_a_rounding_at_one_step_of_few_codes(parting, flips, text):
    assert 65 < quantized_rounding.FLIP_MAX_FRACTION * 65536 < 66  # the cases straddle it
    assert parting.flips is flips and text in str(parting)
