"""Graph inputs fixed at build (``--input-value NAME=VALUE``): the input becomes a constant of
the model, an If on it folds to the branch it takes (not fixed, both branches run), the
artifact has no such input, and the outputs are onnxruntime's on the model as given with that
value fed."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.cli import main
from plugin_host.errors import UnsupportedModelError, UsageError
from plugin_host.executor import Executor
from plugin_host.onnx_import import build_onnx_artifact
from plugin_host.onnx_import.fixed_inputs import MAX_FIXED_ELEMENTS, fix_inputs
from plugins.numpy_backend import NumpyBackend

from .conftest import assert_close, import_and_load, onnx, onnxruntime_outputs


def _branchy(path, x_dims=(1, 4), *, wide_else: bool = False):
    """y = x * 2 where sr == 16000, else x * 3 (silero-vad's If on its sample rate; with
    ``wide_else``, x * 3 twice side by side: another shape), and a bool switch."""
    helper, tp = onnx.helper, onnx.TensorProto

    def branch(name, factor, wide=False):
        tail = [helper.make_node("Concat", [f"{name}_y", f"{name}_y"], [f"{name}_w"], axis=1)]
        return helper.make_graph(
            [helper.make_node("Mul", ["x", f"{name}_k"], [f"{name}_y"]), *tail[:wide]], name,
            [], [helper.make_tensor_value_info(f"{name}_w" if wide else f"{name}_y", tp.FLOAT,
                                               None)],
            [helper.make_tensor(f"{name}_k", tp.FLOAT, [], [factor])])

    nodes = [helper.make_node("Equal", ["sr", "rate16k"], ["is16k"], name="is16k"),
             helper.make_node("If", ["is16k"], ["scaled"], name="by_rate",
                              then_branch=branch("then", 2.0),
                              else_branch=branch("else", 3.0, wide_else)),
             helper.make_node("Where", ["on", "scaled", "x"], ["y"], name="switch")]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", tp.FLOAT, list(x_dims)),
         helper.make_tensor_value_info("sr", tp.INT64, []),
         helper.make_tensor_value_info("on", tp.BOOL, [1])],
        [helper.make_tensor_value_info("y", tp.FLOAT, list(x_dims))],
        [helper.make_tensor("rate16k", tp.INT64, [], [16000])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_an_if_on_an_input_runs_both_branches_or_is_refused_pointing_at_input_value(
        tmp_path, signer):
    """Without --input-value, the If on sr runs both branches and picks one when the call
    runs, as onnxruntime; branches of two shapes are refused, pointing at --input-value."""
    model = _branchy(tmp_path / "b.onnx")
    _, loaded = import_and_load(model, tmp_path / "b.pha", signer)
    assert {s.name for s in loaded.graph.inputs} == {"x", "sr", "on"}
    x = np.random.default_rng(8).standard_normal((1, 4)).astype(np.float32)
    for rate in (16000, 8000):
        feed = {"x": x, "sr": np.array(rate), "on": np.array([True])}
        got = Executor(loaded.graph, NumpyBackend()).run(dict(feed))
        assert_close(loaded, "y", got["y"], onnxruntime_outputs(model, feed)["y"])
    with pytest.raises(UnsupportedModelError) as info:
        build_onnx_artifact(_branchy(tmp_path / "w.onnx", wide_else=True), tmp_path / "w.pha")
    assert info.value.node == "by_rate" and str(info.value).endswith(
        "; if it is computed from an input the device always feeds the same value, "
        "--input-value sr=VALUE, --input-value on=VALUE (input_values= in the Python API) "
        "fixes it at build, and what it decides is folded")


@pytest.mark.parametrize("rate, on, factor", [(16000, True, 2.0), ("8000", "true", 3.0),
                                              (16000, "0", 1.0)])
def test_a_fixed_input_folds_what_it_decides(rate, on, factor, tmp_path, signer):
    model = _branchy(tmp_path / "b.onnx")
    said = []
    _, loaded = import_and_load(model, tmp_path / "b.pha", signer,
                                input_values={"sr": rate, "on": [on]}, report=said.append)
    assert [s.name for s in loaded.graph.inputs] == ["x"]
    assert not {"equal", "where"} & {n.op for n in loaded.graph.nodes}  # folded: the If is
    # its branch, the switch its side
    assert said[0] == (f"input 'sr' fixed at build to {int(rate)} (--input-value): the artifact "
                       f"has no such input, and what it decides is folded at import")
    x = np.random.default_rng(7).standard_normal((1, 4)).astype(np.float32)
    got = Executor(loaded.graph, NumpyBackend()).run({"x": x})
    want = onnxruntime_outputs(model, {"x": x, "sr": np.array(int(rate)),
                                       "on": np.array([on in (True, "true")])})
    assert_close(loaded, "y", got["y"], want["y"])
    np.testing.assert_allclose(got["y"], x * factor, rtol=1e-6)


def test_a_vector_input_takes_one_value_or_one_per_element(tmp_path):
    helper, tp = onnx.helper, onnx.TensorProto
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "bias"], ["y"], name="add")], "g",
        [helper.make_tensor_value_info("x", tp.FLOAT, [2, 3]),
         helper.make_tensor_value_info("bias", tp.FLOAT, [3])],
        [helper.make_tensor_value_info("y", tp.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    for given, want in ((["1", "2.5", "-3"], [1.0, 2.5, -3.0]), (0.5, [0.5] * 3),
                        (np.array([4, 5, 6]), [4.0, 5.0, 6.0])):
        fixed = fix_inputs(model, {"bias": given})
        assert [vi.name for vi in fixed.graph.input] == ["x"]
        array = onnx.numpy_helper.to_array(fixed.graph.initializer[-1])
        assert array.dtype == np.float32 and array.tolist() == want
    assert [vi.name for vi in model.graph.input] == ["x", "bias"]  # the model is left alone


@pytest.mark.parametrize("values, message", [
    ({"rate": 1}, "no graph input named 'rate' (the inputs: 'x', 'sr', 'on')"),
    ({"sr": "1.5"}, "input value sr=1.5: input 'sr' is int64; give an integer from "
                    "-9223372036854775808 to 9223372036854775807"),
    ({"sr": 2.5}, "input 'sr' is int64; give an integer"),
    ({"sr": "abc"}, "input 'sr' is int64; give an integer"),
    ({"sr": 2 ** 63}, "input 'sr' is int64; give an integer"),
    ({"on": "2"}, "input value on=2: input 'on' is bool; give 0, 1, false or true"),
    ({"x": [1.0, 2.0]}, "input 'x' has shape (1, 4): give one value or 4, not 2"),
    ({"x": "1e39"}, "input value x=1e39: input 'x' is float32; give a number within its range"),
    ({"x": "one"}, "input 'x' is float32; give a number within its range"),
])
def test_values_an_input_cannot_take_are_usage_errors(values, message, tmp_path):
    model = _branchy(tmp_path / "b.onnx")
    with pytest.raises(UsageError) as info:
        build_onnx_artifact(model, tmp_path / "b.pha", input_values=values)
    assert message in str(info.value)
    assert not (tmp_path / "b.pha").exists()


def test_a_float16_input_is_fixed_to_float16_then_upcast(tmp_path, signer):
    """A float16 model's input (a scale, as onnx's QLinearMatMul cases give it): the value is
    held as float16 (rounded so), then the model is upcast to float32 with it; a value past
    float16's range is a UsageError."""
    helper, tp = onnx.helper, onnx.TensorProto
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "scale"], ["y"], name="mul")], "g",
        [helper.make_tensor_value_info("x", tp.FLOAT16, [2, 3]),
         helper.make_tensor_value_info("scale", tp.FLOAT16, [])],
        [helper.make_tensor_value_info("y", tp.FLOAT16, [2, 3])])
    model = tmp_path / "h.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    fixed = fix_inputs(onnx.load(model), {"scale": "0.1"})
    array = onnx.numpy_helper.to_array(fixed.graph.initializer[-1])
    assert array.dtype == np.float16 and array == np.float16(0.1)
    _, loaded = import_and_load(model, tmp_path / "h.pha", signer, upcast_float16=True,
                                input_values={"scale": "0.1"})
    assert [s.name for s in loaded.graph.inputs] == ["x"]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = Executor(loaded.graph, NumpyBackend()).run({"x": x})["y"]
    np.testing.assert_array_equal(got, x * np.float32(np.float16(0.1)))
    with pytest.raises(UsageError, match="input 'scale' is float16; give a number within its "
                                         "range"):
        fix_inputs(onnx.load(model), {"scale": 70000})


def test_an_input_with_run_time_dims_is_fixed_after_them(tmp_path, signer):
    model = _branchy(tmp_path / "b.onnx", x_dims=("batch", 4))
    with pytest.raises(UsageError, match=r"input 'x' has run-time dims \['\?', 4\]; fix them "
                                         r"with --dim \(dims=\) first"):
        build_onnx_artifact(model, tmp_path / "b.pha", input_values={"x": 1.0})
    big = onnx.load(model)
    big.graph.input[0].type.tensor_type.shape.dim[0].dim_value = MAX_FIXED_ELEMENTS
    with pytest.raises(UsageError, match=f"has {4 * MAX_FIXED_ELEMENTS} elements; at most "
                                         f"{MAX_FIXED_ELEMENTS}"):
        fix_inputs(big, {"x": 1.0})
    _, loaded = import_and_load(model, tmp_path / "b.pha", signer, dims={"batch": 2},
                                input_values={"x": 1.0, "sr": 16000, "on": 1})
    assert not loaded.graph.inputs
    got = Executor(loaded.graph, NumpyBackend()).run({})
    np.testing.assert_array_equal(got["y"], np.full((2, 4), 2.0, np.float32))


def test_the_hint_names_the_float_scalars_a_loop_s_count_is_computed_from(tmp_path, signer):
    """A Loop that adds x to itself ceil(a * b) times (an expanded Range's count from its
    float start, limit and delta): refused naming the count, the hint the two scalars it is
    computed from (and not x, data of four floats, nor the unrelated 'gain'); fixed, it
    unrolls, and gives onnxruntime's outputs fed those values."""
    helper, tp = onnx.helper, onnx.TensorProto
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["acc_in", "x"], ["acc_out"])], "body",
        [helper.make_tensor_value_info("i", tp.INT64, []),
         helper.make_tensor_value_info("cond_in", tp.BOOL, []),
         helper.make_tensor_value_info("acc_in", tp.FLOAT, [2, 2])],
        [helper.make_tensor_value_info("cond_out", tp.BOOL, []),
         helper.make_tensor_value_info("acc_out", tp.FLOAT, [2, 2])])
    nodes = [helper.make_node("Mul", ["a", "b"], ["ab"]),
             helper.make_node("Ceil", ["ab"], ["up"]),
             helper.make_node("Cast", ["up"], ["count"], to=tp.INT64),
             helper.make_node("Loop", ["count", "true", "x"], ["acc"], name="times", body=body),
             helper.make_node("Mul", ["acc", "gain"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", tp.FLOAT, [2, 2]),
                     helper.make_tensor_value_info("a", tp.FLOAT, []),
                     helper.make_tensor_value_info("b", tp.FLOAT, [1]),
                     helper.make_tensor_value_info("gain", tp.FLOAT, [])],
        [helper.make_tensor_value_info("y", tp.FLOAT, [2, 2])],
        [helper.make_tensor("true", tp.BOOL, [], [True])])
    model = tmp_path / "loop.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    with pytest.raises(UnsupportedModelError) as info:
        build_onnx_artifact(model, tmp_path / "l.pha")
    assert info.value.node == "times" and "trip count 'count' is computed at run time" in str(
        info.value) and "; if it is computed from an input the device always feeds the same " \
        "value, --input-value a=VALUE, --input-value b=VALUE (input_values=" in str(info.value)
    values = {"a": 1.5, "b": 2.0}
    _, loaded = import_and_load(model, tmp_path / "l.pha", signer, input_values=values)
    assert {s.name for s in loaded.graph.inputs} == {"x", "gain"}
    feed = {"x": np.arange(4, dtype=np.float32).reshape(2, 2), "gain": np.array(0.5, np.float32)}
    got = Executor(loaded.graph, NumpyBackend()).run(dict(feed))["y"]
    want = onnxruntime_outputs(model, {**feed, "a": np.array(1.5, np.float32),
                                       "b": np.array([2.0], np.float32)})["y"]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, feed["x"] * 4 * 0.5)  # x, then added 3 times


def test_cli_input_value(tmp_path, capsys):
    model = _branchy(tmp_path / "b.onnx")
    out = tmp_path / "b.pha"
    assert main(["build", "--onnx", str(model), "--out", str(out), "--input-value", "sr=16000",
                 "--input-value", "on=1"]) == 0
    printed = capsys.readouterr().out
    assert "input 'sr' fixed at build to 16000 (--input-value)" in printed
    assert "input 'on' fixed at build to True (--input-value)" in printed
    for argv, said in ((["--onnx", str(model), "--input-value", "sr"],
                        "--input-value"),
                       (["--onnx", str(model), "--input-value", "sr=8000,16000", "--input-value",
                         "on=1"], "input 'sr' has shape (): give one value or 1, not 2"),
                       (["--demo", "--input-value", "sr=1"], "go with --onnx")):
        assert main(["build", *argv, "--out", str(tmp_path / "c.pha")]) != 0
        assert said in capsys.readouterr().err


@pytest.mark.parametrize("cond, x_shape, folded", [
    ([[True, True, True]], (2, 3), True), ([[False] * 3], (2, 3), True),
    ([[True, False, True]], (2, 3), False),   # mixed: picked element by element
    ([[True] * 3] * 2, (3,), False)])         # the condition widens x: not x itself
def test_a_constant_condition_that_picks_one_side_is_that_side(cond, x_shape, folded, tmp_path,
                                                               signer):
    helper, tp = onnx.helper, onnx.TensorProto
    graph = helper.make_graph(
        [helper.make_node("Where", ["c", "x", "z"], ["y"], name="pick")], "g",
        [helper.make_tensor_value_info("x", tp.FLOAT, list(x_shape)),
         helper.make_tensor_value_info("z", tp.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", tp.FLOAT, ["a", "b"])],
        [onnx.numpy_helper.from_array(np.array(cond), "c")])
    model = tmp_path / "w.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    _, loaded = import_and_load(model, tmp_path / "w.pha", signer)
    assert ("where" in {n.op for n in loaded.graph.nodes}) is not folded
    rng = np.random.default_rng(3)
    feed = {n: rng.standard_normal(x_shape).astype(np.float32) for n in ("x", "z")}
    got = Executor(loaded.graph, NumpyBackend()).run(feed)
    assert_close(loaded, "y", got["y"], onnxruntime_outputs(model, feed)["y"])
