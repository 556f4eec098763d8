"""Pow of an integer tensor (torch's ``x ** 2`` of an int64 tensor) by a constant whole
exponent >= 0: the exact power by products, which onnxruntime (computing in float64 and
truncating) agrees with while the power fits the dtype, up to 2**53 for int64. A run-time,
negative or fractional exponent, and a base onnxruntime has no integer Pow for, are refused
naming the node."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import UnsupportedModelError

from .conftest import (EXPORTERS, Fn, assert_refused, check_on_both_backends, export,
                       import_and_load, onnx, onnxruntime_outputs, torch)

helper, TP = onnx.helper, onnx.TensorProto


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_torch_integer_powers_match_onnxruntime(dynamo, fold, optimize, tmp_path, signer):
    """x ** 0, 1, 2, 3 and 7 of an int64 tensor, summed so that each power is used."""
    fn = Fn(lambda x: x ** 0 + x ** 1 * 2 + x ** 2 * 3 + x ** 3 - x ** 7)
    model = export(fn, [torch.arange(-6, 6).reshape(3, 4)], tmp_path / "p.onnx",
                   dynamo=dynamo, fold=fold, optimize=optimize, input_names=["x"],
                   output_names=["y"])
    _, loaded = import_and_load(model, tmp_path / "p.pha", signer)
    assert "pow" not in {n.op for n in loaded.graph.nodes}
    rng = np.random.default_rng(5)
    feeds = [{"x": rng.integers(-150, 150, (3, 4))}, {"x": np.array(
        [[-1, 0, 1, 2], [-2, 150, -150, 149], [3, -3, 7, -7]], np.int64)}]
    check_on_both_backends(model, loaded, feeds)


def _pow_model(path, base_type, exponent: np.ndarray | None, *, shape=(2, 5)):
    """Pow(x, e): e a constant, or (None) an input of x's dtype and shape."""
    inputs = [helper.make_tensor_value_info("x", base_type, list(shape))]
    inits = []
    if exponent is None:
        inputs.append(helper.make_tensor_value_info("e", base_type, list(shape)))
    else:
        inits.append(onnx.numpy_helper.from_array(exponent, "e"))
    graph = helper.make_graph([helper.make_node("Pow", ["x", "e"], ["y"], name="pow")], "g",
                              inputs, [helper.make_tensor_value_info("y", base_type,
                                                                     list(shape))],
                              initializer=inits)
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 15)]).SerializeToString())
    return path


#: (base dtype, the exponent's constant, the largest |x| fed): every power fits the dtype
CASES = {
    "int32_by_int64": (TP.INT32, np.array(5, np.int64), 70),
    "int32_by_int32_vector": (TP.INT32, np.array([4], np.int32), 200),
    "int32_by_float": (TP.INT32, np.array(3.0, np.float32), 1000),
    "int64_by_double": (TP.INT64, np.array([[2.0]], np.float64), 3_000_000),
    "int64_by_13": (TP.INT64, np.array(13, np.int64), 16),
    "int64_by_zero": (TP.INT64, np.array(0, np.int64), 2 ** 40),
    "int64_to_2_53": (TP.INT64, np.array(53, np.int64), 2),
    "int64_by_63_of_units": (TP.INT64, np.array(63, np.int64), 1),
}


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_integer_bases_by_each_exponent_dtype_match_onnxruntime(case, tmp_path, signer):
    base_type, exponent, largest = case
    model = _pow_model(tmp_path / "p.onnx", base_type, exponent)
    _, loaded = import_and_load(model, tmp_path / "p.pha", signer)
    dtype = helper.tensor_dtype_to_np_dtype(base_type)
    rng = np.random.default_rng(int(exponent.reshape(-1)[0]))
    edges = np.array([0, 1, -1, largest, -largest, largest - 1, 2, -2, 0, 1], dtype)
    feeds = [{"x": rng.integers(-largest, largest, (2, 5), endpoint=True).astype(dtype)},
             {"x": edges.reshape(2, 5)}]
    check_on_both_backends(model, loaded, feeds)


def test_onnxruntime_rounds_an_int64_power_past_2_53(tmp_path):
    """Why the exact power is documented to differ there: onnxruntime's 3 ** 39 is float64's
    rounding of it."""
    model = _pow_model(tmp_path / "p.onnx", TP.INT64, np.array(39, np.int64), shape=(1,))
    [got] = onnxruntime_outputs(model, {"x": np.array([3], np.int64)}).values()
    assert int(got[0]) != 3 ** 39 and int(got[0]) == int(float(3 ** 39))


@pytest.mark.parametrize("base_type, exponent, message", [
    (TP.INT64, None, "exponent 'e' computed at run time of an integer base 'x': only a "
                     "constant one is mapped"),
    (TP.INT32, np.array(-1, np.int64), "exponent -1 of an integer base: only a whole "
                                       "exponent >= 0 is mapped"),
    (TP.INT64, np.array(2.5, np.float32), "exponent 2.5 of an integer base: only a whole "
                                          "exponent >= 0 is mapped"),
    (TP.INT64, np.array(np.nan, np.float32), "exponent nan of an integer base"),
    (TP.INT64, np.array([2, 3, 2, 2, 2], np.int64), "exponent 'e' of shape [5]: an integer "
                                                    "base's exponent must be one value"),
    (TP.INT64, np.array([[[2]]], np.int64), "exponent 'e' of shape [1, 1, 1]: an integer "
                                            "base's exponent must be one value, of rank at "
                                            "most 2"),
    (TP.INT8, np.array(2, np.int64), "base 'x' of dtype int8: onnxruntime, the reference, "
                                     "takes an integer Pow of int32 or int64 only"),
], ids=["run_time", "negative", "fraction", "nan", "several", "higher_rank", "int8"])
def test_what_is_not_mapped_is_refused_naming_the_node(base_type, exponent, message,
                                                        tmp_path):
    model = _pow_model(tmp_path / "p.onnx", base_type, exponent)
    assert_refused(model, UnsupportedModelError, "node 'pow' (Pow)", message)


@pytest.mark.parametrize("elem", [TP.INT32, TP.INT64])
def test_a_float_base_to_an_integer_exponent_computed_at_run_time_matches_onnxruntime(
        elem, tmp_path, signer):
    """torch's ``x ** n`` of an integer tensor n: the exponent cast to float32 when the call
    runs; negative bases to odd and even powers, negative exponents, 0 ** 0."""
    inputs = [helper.make_tensor_value_info("x", TP.FLOAT, [2, 6]),
              helper.make_tensor_value_info("e", elem, [2, 6])]
    graph = helper.make_graph([helper.make_node("Pow", ["x", "e"], ["y"], name="node")], "g",
                              inputs, [helper.make_tensor_value_info("y", TP.FLOAT, [2, 6])])
    model = tmp_path / "p.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), model)
    _, loaded = import_and_load(model, tmp_path / "p.pha", signer)
    assert [n.op for n in loaded.graph.nodes] == ["cast", "pow"]
    rng = np.random.default_rng(11)
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    feeds = [{"x": rng.uniform(-3, 3, (2, 6)).astype(np.float32),
              "e": rng.integers(-5, 9, (2, 6)).astype(dtype)},
             {"x": np.array([[-2, -2, 0, 0, 1.5, -1], [0.5, -0.5, 10, -10, 3, 1]], np.float32),
              "e": np.array([[3, 4, 0, 2, -2, 7], [-3, 5, 30, 31, 0, 100]], dtype)}]
    check_on_both_backends(model, loaded, feeds)


def test_a_float_base_to_an_exponent_onnxruntime_has_no_pow_for_is_refused(tmp_path):
    inputs = [helper.make_tensor_value_info("x", TP.FLOAT, [3]),
              helper.make_tensor_value_info("e", TP.UINT8, [3])]
    graph = helper.make_graph([helper.make_node("Pow", ["x", "e"], ["y"], name="node")], "g",
                              inputs, [helper.make_tensor_value_info("y", TP.FLOAT, [3])])
    model = tmp_path / "p.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), model)
    with pytest.raises(Exception, match="NOT_IMPLEMENTED"):
        onnxruntime_outputs(model, {"x": np.ones(3, np.float32), "e": np.ones(3, np.uint8)})
    assert_refused(model, UnsupportedModelError, "node 'node' (Pow)",
                   "b must be a float tensor (float16, float32, float64), got uint8")
