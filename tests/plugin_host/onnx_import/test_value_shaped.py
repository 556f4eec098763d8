"""Ops whose output's shape depends on their input's values (plugin_host/onnx_import/
value_shaped.py): NonZero and Unique fold where their input is a constant, with onnxruntime's
numbers; over a run-time input they, and NonMaxSuppression, are refused saying why."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import UnsupportedModelError
from plugin_host.onnx_import.fold import fold

from .conftest import assert_refused, check_on_both_backends, import_and_load, onnx, ort

helper, TP = onnx.helper, onnx.TensorProto
CAP = 1 << 20


def _onnxruntime(op: str, x: np.ndarray, outputs: int, **attrs) -> list[np.ndarray]:
    """``op`` of ``x`` run by onnxruntime (the model as a test of onnx writes it)."""
    names = [f"y{i}" for i in range(outputs)]
    dtype = helper.np_dtype_to_tensor_dtype(x.dtype)
    graph = helper.make_graph([helper.make_node(op, ["x"], names, **attrs)], "g",
                              [helper.make_tensor_value_info("x", dtype, list(x.shape))],
                              [helper.make_tensor_value_info(
                                  n, dtype if op == "Unique" and i == 0 else TP.INT64, None)
                               for i, n in enumerate(names)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})


def _drawn(rng, dtype, shape) -> np.ndarray:
    """Entries of a few values, so that they repeat (floats with 0.0 and -0.0 both)."""
    if dtype == np.float32:
        pool = np.array([-1.5, -0.0, 0.0, 2.25, 7.0], np.float32)
    else:
        pool = np.array([-3, 0, 1, 5], dtype)
    return rng.choice(pool, size=shape)


@pytest.mark.parametrize("seed", range(12))
def test_unique_folds_as_onnxruntime_computes_it(seed):
    """Drawn inputs (float32 with signed zeros, int64, int8; ranks 1 to 3), each axis and
    none, sorted and not: all four outputs equal onnxruntime's, bit for bit."""
    rng = np.random.default_rng(seed)
    dtype = [np.float32, np.int64, np.int8][seed % 3]  # onnxruntime has no int32 Unique
    shape = tuple(int(d) for d in rng.integers(1, 5, size=1 + seed % 3))
    x = _drawn(rng, dtype, shape)
    for axis in [None, *range(-x.ndim, x.ndim)]:
        for ordered in (0, 1):
            attrs = {"sorted": ordered, **({} if axis is None else {"axis": axis})}
            want = _onnxruntime("Unique", x, 4, **attrs)
            got = fold("Unique", [x], dict(attrs), outputs=4, cap=CAP)
            for g, w in zip(got, want):
                assert g.dtype == w.dtype and g.shape == w.shape, (attrs, g, w)
                assert g.tobytes() == w.tobytes(), (attrs, x, g, w)


@pytest.mark.parametrize("shape", [(), (1,), (5,), (2, 3), (2, 0), (2, 3, 2)])
def test_nonzero_folds_as_onnxruntime_computes_it(shape):
    """Including a 0-d input, which onnxruntime answers as one of shape [1]."""
    rng = np.random.default_rng(len(shape))
    for x in (rng.integers(0, 2, size=shape).astype(np.float32),
              rng.integers(0, 2, size=shape).astype(bool), np.zeros(shape, np.int64)):
        [want] = _onnxruntime("NonZero", x, 1)
        [got] = fold("NonZero", [x], {}, outputs=1, cap=CAP)
        assert got.dtype == want.dtype and got.shape == want.shape and (got == want).all()


def _masked_model(path, mask_input: bool):
    """x[mask] as torch's exporter writes it (NonZero, Transpose, GatherND), the mask a
    Constant or an input of its own, then the selected entries summed with y."""
    nodes = [helper.make_node("NonZero", ["mask"], ["nz"], name="nonzero"),
             helper.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
             helper.make_node("GatherND", ["x", "idx"], ["picked"]),
             helper.make_node("Add", ["picked", "y"], ["out"])]
    mask = np.array([[True, False, True], [False, False, True]])
    inputs = [helper.make_tensor_value_info("x", TP.FLOAT, [2, 3]),
              helper.make_tensor_value_info("y", TP.FLOAT, [3])]
    if mask_input:
        inputs.append(helper.make_tensor_value_info("mask", TP.BOOL, [2, 3]))
    else:
        nodes.insert(0, helper.make_node("Constant", [], ["mask"], value=onnx.numpy_helper
                                         .from_array(mask)))
    graph = helper.make_graph(nodes, "g", inputs,
                              [helper.make_tensor_value_info("out", TP.FLOAT, [3])])
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    return path, mask


def test_a_constant_mask_selects_as_onnxruntime(tmp_path, signer):
    path, _ = _masked_model(tmp_path / "const.onnx", mask_input=False)
    _, loaded = import_and_load(path, tmp_path / "c.pha", signer)
    assert "nonzero" not in [n.op for n in loaded.graph.nodes]
    rng = np.random.default_rng(1)
    check_on_both_backends(path, loaded, [{"x": rng.standard_normal((2, 3)).astype(np.float32),
                                           "y": rng.standard_normal(3).astype(np.float32)}])


def test_a_mask_input_is_refused_saying_why_then_fixed_with_input_value(tmp_path, signer):
    path, mask = _masked_model(tmp_path / "input.onnx", mask_input=True)
    assert_refused(path, UnsupportedModelError, "node 'nonzero' (NonZero)",
                   "its output's shape depends on its input's values")
    fixed = [int(v) for v in mask.reshape(-1)]
    _, loaded = import_and_load(path, tmp_path / "f.pha", signer,
                                input_values={"mask": fixed})
    assert [i.name for i in loaded.graph.inputs] == ["x", "y"]
    rng = np.random.default_rng(2)
    feed = {"x": rng.standard_normal((2, 3)).astype(np.float32),
            "y": rng.standard_normal(3).astype(np.float32)}
    from plugin_host.executor import Executor
    from plugins.numpy_backend import NumpyBackend

    got = Executor(loaded.graph, NumpyBackend()).run(dict(feed))["out"]
    np.testing.assert_array_equal(got, feed["x"][mask] + feed["y"])


def test_unique_of_a_nan_and_non_max_suppression_are_refused(tmp_path):
    x = np.array([1.0, np.nan, 1.0], np.float32)
    with pytest.raises(UnsupportedModelError, match="a nan in Unique's input"):
        fold("Unique", [x], {}, outputs=4, cap=CAP)
    boxes = helper.make_tensor_value_info("boxes", TP.FLOAT, [1, 4, 4])
    scores = helper.make_tensor_value_info("scores", TP.FLOAT, [1, 1, 4])
    graph = helper.make_graph([helper.make_node("NonMaxSuppression", ["boxes", "scores"],
                                                ["selected"], name="nms")], "g",
                              [boxes, scores],
                              [helper.make_tensor_value_info("selected", TP.INT64, ["k", 3])])
    path = tmp_path / "nms.onnx"
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    assert_refused(path, UnsupportedModelError, "node 'nms' (NonMaxSuppression)",
                   "its selected boxes' count depends on the scores")
