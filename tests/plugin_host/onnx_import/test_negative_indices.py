"""Negative indices computed at run time count from the end of their axis, as ONNX and
onnxruntime count them: Gather (``x[i]``, torch.index_select), GatherElements (torch.gather),
ScatterElements (torch.scatter), and GatherND and ScatterND coordinates, along a fixed axis or
a run-time one. Each is compared with onnxruntime on both backends at indices from -dim to
dim - 1; an index outside [-dim, dim) is refused when it arrives (IndexRangeError naming the
node) on both backends, as onnxruntime refuses it. An Embedding's indices are not counted from
the end: they are checked at entry against [0, vocab)."""

from __future__ import annotations

import numpy as np
import pytest

from abi.errors import IndexRangeError
from plugin_host.executor import Executor
from plugin_host.onnx_import import import_onnx
from plugins.numpy_backend import NumpyBackend
from plugins.onnxruntime_backend import OnnxruntimeBackend

from .conftest import check_on_both_backends, import_and_load, onnx, onnxruntime_outputs

helper, TP = onnx.helper, onnx.TensorProto
RNG = np.random.default_rng(97)


def _model(path, op_type, inputs, outputs=("y",), **attrs):
    """One ``op_type`` node named ``node`` over ``inputs``: (name, element type, shape)."""
    graph = helper.make_graph(
        [helper.make_node(op_type, [n for n, *_ in inputs], list(outputs), name="node",
                          **attrs)], "g",
        [helper.make_tensor_value_info(n, t, list(s)) for n, t, s in inputs],
        [helper.make_tensor_value_info(o, TP.FLOAT, None) for o in outputs])
    model = onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]))
    onnx.save(model, path)
    return path


def _golden(x_shape) -> dict:
    """The build's golden cases draw a run-time dim long enough for indices 0 and 1."""
    return {"golden_dims": {"t": [4]}} if "t" in x_shape else {}


def _refused_everywhere(model, feed, text):
    """onnxruntime refuses the call, and both backends with an IndexRangeError naming the
    node and matching ``text``."""
    with pytest.raises(Exception, match="(?i)bounds|range|invalid"):
        onnxruntime_outputs(model, feed)
    graph = import_onnx(model).graph
    for backend in (NumpyBackend(), OnnxruntimeBackend()):
        with pytest.raises(IndexRangeError, match=text) as info:
            Executor(graph, backend).run(dict(feed))
        assert "node" in str(info.value)


@pytest.mark.parametrize("x_shape, axis", [((5, 3), 0), ((2, "t"), 1), (("t", 4), 0)])
@pytest.mark.parametrize("i_shape", [(6,), (2, 3), ()])
def test_gather_counts_a_negative_run_time_index_from_the_end(x_shape, axis, i_shape, tmp_path,
                                                              signer):
    model = _model(tmp_path / "g.onnx", "Gather", [("x", TP.FLOAT, x_shape),
                                                   ("i", TP.INT64, i_shape)], axis=axis)
    _, loaded = import_and_load(model, tmp_path / "g.pha", signer, **_golden(x_shape))
    feeds = []
    for t in (1, 5):
        shape = tuple(t if d == "t" else d for d in x_shape)
        dim = shape[axis]
        feeds.append({"x": RNG.standard_normal(shape).astype(np.float32),
                      "i": RNG.integers(-dim, dim, i_shape).astype(np.int64)})
    check_on_both_backends(model, loaded, feeds)
    shape = tuple(5 if d == "t" else d for d in x_shape)
    for bad in (-shape[axis] - 1, shape[axis]):
        _refused_everywhere(model, {"x": np.ones(shape, np.float32),
                                    "i": np.full(i_shape, bad, np.int64)}, "outside")


@pytest.mark.parametrize("op_type", ["GatherElements", "ScatterElements"])
@pytest.mark.parametrize("x_shape, axis", [((4, 5), 1), ((4, 5), 0), (("t", 3), 0)])
def test_elements_ops_count_a_negative_run_time_index_from_the_end(op_type, x_shape, axis,
                                                                   tmp_path, signer):
    idx_shape = (2, 3)
    inputs = [("x", TP.FLOAT, x_shape), ("i", TP.INT64, idx_shape)]
    if op_type == "ScatterElements":
        inputs.append(("u", TP.FLOAT, idx_shape))
    model = _model(tmp_path / "e.onnx", op_type, inputs, axis=axis)
    _, loaded = import_and_load(model, tmp_path / "e.pha", signer, **_golden(x_shape))
    feeds = []
    for t in (4, 6):
        shape = tuple(t if d == "t" else d for d in x_shape)
        dim = shape[axis]
        feed = {"x": RNG.standard_normal(shape).astype(np.float32)}
        if op_type == "ScatterElements":  # distinct positions along the axis in each column
            feed["i"] = np.stack([RNG.permutation(np.arange(-dim, dim))[:2] for _ in range(3)],
                                 axis=1).astype(np.int64)
            feed["i"] = np.where(feed["i"] < 0, feed["i"], feed["i"] - dim)  # all negative
            feed["u"] = RNG.standard_normal(idx_shape).astype(np.float32)
        else:
            feed["i"] = RNG.integers(-dim, dim, idx_shape).astype(np.int64)
        feeds.append(feed)
    check_on_both_backends(model, loaded, feeds)
    shape = tuple(4 if d == "t" else d for d in x_shape)
    feed = {**feeds[0], "x": np.ones(shape, np.float32),
            "i": np.full(idx_shape, -shape[axis] - 1, np.int64)}
    _refused_everywhere(model, feed, "outside")


@pytest.mark.parametrize("op_type", ["GatherND", "ScatterND"])
def test_nd_coordinates_count_a_negative_run_time_value_from_the_end(op_type, tmp_path, signer):
    inputs = [("x", TP.FLOAT, (3, 4, 2)), ("i", TP.INT64, (2, 2))]
    if op_type == "ScatterND":
        inputs.append(("u", TP.FLOAT, (2, 2)))
    model = _model(tmp_path / "n.onnx", op_type, inputs)
    _, loaded = import_and_load(model, tmp_path / "n.pha", signer)
    feeds = [{"x": RNG.standard_normal((3, 4, 2)).astype(np.float32),
              "i": np.array(rows, np.int64)} for rows in ([[-1, -4], [0, 3]],
                                                          [[-3, 2], [2, -1]])]
    for feed in feeds:
        if op_type == "ScatterND":
            feed["u"] = RNG.standard_normal((2, 2)).astype(np.float32)
    check_on_both_backends(model, loaded, feeds)
    _refused_everywhere(model, {**feeds[0], "i": np.array([[0, -5], [1, 1]], np.int64)},
                        "outside")
