"""ReverseSequence (as tf2onnx writes it for a bidirectional RNN over padded sequences): each
batch entry's first ``sequence_lens[b]`` steps reversed, the rest kept, as a ``gather_elements``
along the time axis. Compared with onnxruntime on both backends, lengths constant or computed at
run time, or one length spread over a run-time batch (a ``gather`` along time); a run-time
length outside [0, T], which onnxruntime refuses, is an IndexRangeError naming the node."""

from __future__ import annotations

import numpy as np
import pytest

from abi.errors import IndexRangeError
from plugin_host.errors import ModelFileError
from plugin_host.executor import Executor

from .conftest import assert_refused, import_and_load, onnx
from .test_scatter import _floats
from .test_scatter_runtime import BACKENDS, _check

helper, TP = onnx.helper, onnx.TensorProto
RNG = np.random.default_rng(53)


def _model(tmp_path, shape, *, lens=None, batch=None, **attrs):
    """One ReverseSequence named ``node`` over a float32 input ``x`` of ``shape``; the lengths
    a graph input ``lens`` of ``batch`` int64, or the initializer ``lens`` when given."""
    inputs = [helper.make_tensor_value_info("x", TP.FLOAT, list(shape))]
    inits = []
    if lens is None:
        inputs.append(helper.make_tensor_value_info("lens", TP.INT64, [batch]))
    else:
        inits.append(onnx.numpy_helper.from_array(np.asarray(lens, np.int64), "lens"))
    graph = helper.make_graph(
        [helper.make_node("ReverseSequence", ["x", "lens"], ["y"], name="node", **attrs)], "g",
        inputs, [helper.make_tensor_value_info("y", TP.FLOAT, list(shape))], initializer=inits)
    path = tmp_path / "rs.onnx"
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString())
    return path


@pytest.mark.parametrize("shape, attrs", [
    ((5, 3, 2), {}),                                   # (T, B, C): time 0, batch 1
    ((3, 6, 4), {"batch_axis": 0, "time_axis": 1}),    # (B, T, C)
    ((4, 2), {}),
    ((2, 7, 3, 2), {"batch_axis": 0, "time_axis": 1}),
], ids=["time-major", "batch-major", "rank-2", "rank-4"])
def test_run_time_lengths_match_onnxruntime(shape, attrs, tmp_path, signer):
    time_axis, batch_axis = attrs.get("time_axis", 0), attrs.get("batch_axis", 1)
    steps, batch = shape[time_axis], shape[batch_axis]
    model = _model(tmp_path, shape, batch=batch, **attrs)
    feeds = [{"x": x, "lens": RNG.integers(0, steps + 1, batch).astype(np.int64)}
             for x in _floats(shape, 4)]
    feeds[0]["lens"][:] = 0  # nothing reversed
    feeds[1]["lens"][:] = steps  # everything reversed
    _check(model, tmp_path, signer, feeds, {"gather_elements"})


def test_constant_lengths_are_one_gather_at_constant_positions(tmp_path, signer):
    model = _model(tmp_path, (5, 4, 2), lens=[0, 5, 2, 1])
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert [n.op for n in loaded.graph.nodes] == ["gather_elements"]
    _check(model, tmp_path, signer, [{"x": x} for x in _floats((5, 4, 2), 2)],
           {"gather_elements"})


def _spread_model(tmp_path, length: int, time_axis: int):
    """As tf2onnx writes a Keras ``Bidirectional(..., return_sequences=True)`` under a run-time
    batch: the lengths one constant expanded to the batch, read from x's Shape."""
    batch_axis = 1 - time_axis
    shape = [4, "batch", 3] if time_axis == 0 else ["batch", 4, 3]
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "at"], ["batch"], axis=0),
             helper.make_node("Expand", ["length", "batch"], ["lens"]),
             helper.make_node("ReverseSequence", ["x", "lens"], ["y"], name="node",
                              batch_axis=batch_axis, time_axis=time_axis)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TP.FLOAT, shape)],
        initializer=[helper.make_tensor("at", TP.INT64, [1], [batch_axis]),
                     helper.make_tensor("length", TP.INT64, [1], [length])])
    path = tmp_path / "spread.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


@pytest.mark.parametrize("length", [4, 2, 0])
@pytest.mark.parametrize("time_axis", [0, 1], ids=["time-major", "batch-major"])
def test_one_length_over_a_run_time_batch_is_a_gather_along_time(length, time_axis, tmp_path,
                                                                 signer):
    model = _spread_model(tmp_path, length, time_axis)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert "gather" in {n.op for n in loaded.graph.nodes}
    assert loaded.graph.inputs[0].shape[1 - time_axis] == "batch"
    feeds = []
    for batch in (1, 3, 5):
        shape = (4, batch, 3) if time_axis == 0 else (batch, 4, 3)
        feeds.append({"x": RNG.standard_normal(shape).astype(np.float32)})
    _check(model, tmp_path, signer, feeds, {"gather"})


def test_one_length_past_the_steps_over_a_run_time_batch_is_refused(tmp_path):
    assert_refused(_spread_model(tmp_path, 5, 0), ModelFileError,
                   "node 'node' (ReverseSequence)", "sequence_lens 5 must be in [0, 4] (axis 0")


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("bad", [5, -1])
def test_a_run_time_length_outside_the_steps_is_refused_when_it_arrives(bad, backend, tmp_path,
                                                                         signer):
    """onnxruntime refuses it too (``Invalid sequence length``); here it is the same
    IndexRangeError on either backend, naming the node, and nothing is returned."""
    model = _model(tmp_path, (4, 3), batch=3)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    executor = Executor(loaded.graph, BACKENDS[backend]())
    x = _floats((4, 3), 1)[0]
    executor.run({"x": x, "lens": np.array([4, 0, 2])})  # the ends of the range: fine
    with pytest.raises(IndexRangeError, match=rf"node.*outside \[0, 5\): \(1,\)={bad}"):
        executor.run({"x": x, "lens": np.array([1, bad, 2])})


@pytest.mark.parametrize("shape, kwargs, message", [
    ((4, 3), {"lens": [1, 5, 2]}, "sequence_lens [1, 5, 2] must be in [0, 4] (axis 0 of 'x'"),
    ((4, 3), {"lens": [1, -1, 2]}, "sequence_lens [1, -1, 2] must be in [0, 4]"),
    ((4, 3), {"lens": [1, 2]}, "sequence_lens 'lens' must be 3 integers (one per batch entry)"),
    ((4, 3), {"batch": 3, "batch_axis": 0, "time_axis": 0},
     "batch_axis=0 and time_axis=0 must be 0 and 1, one each"),
    ((4, 3, 2), {"batch": 2, "batch_axis": 2, "time_axis": 0},
     "batch_axis=2 and time_axis=0 must be 0 and 1"),
], ids=["constant-too-long", "constant-negative", "lengths-shape", "same-axis", "axis-2"])
def test_what_cannot_be_mapped_is_refused_naming_the_node(shape, kwargs, message, tmp_path):
    assert_refused(_model(tmp_path, shape, **kwargs), ModelFileError,
                   "node 'node' (ReverseSequence)", message)
