"""Ops that opsets 24 to 28 added, each a hand-written one-node model: Swish (opset 24)
compared with onnxruntime over its alpha and inputs with nan, inf, -0.0 and float32 extremes;
SwiGLU (opset 28), which onnxruntime 1.32 cannot run, compared with onnx's reference
evaluator, its build refused for want of onnxruntime's reference; TensorScatter (opset 24, a
key-value cache's update) compared with onnxruntime over both modes, write indices at the ends
of their range and a run-time batch, with the indices onnxruntime refuses refused when they
arrive."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import ModelFileError, ModelImportError, UnsupportedModelError
from plugin_host.executor import Executor
from plugin_host.onnx_import import build_onnx_artifact, import_onnx
from plugins.numpy_backend import NumpyBackend
from plugins.onnxruntime_backend import OnnxruntimeBackend

from .conftest import (assert_refused, check_on_both_backends, import_and_load, onnx,
                       onnxruntime_outputs)
from .test_more_ops import _feeds, _model

BACKENDS = {"numpy": NumpyBackend, "onnxruntime": OnnxruntimeBackend}


@pytest.mark.parametrize("alpha", [None, 0.5, -2.0, 0.0, 1.702])
def test_swish_matches_onnxruntime(alpha, tmp_path, signer):
    attrs = {} if alpha is None else {"alpha": alpha}
    model = _model(tmp_path, "Swish", {"x": (6, 7)}, opset=24, **attrs)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert [n.op for n in loaded.graph.nodes] == (
        ["sigmoid", "mul"] if alpha is None else ["mul", "sigmoid", "mul"])
    check_on_both_backends(model, loaded, _feeds({"x": (6, 7)}, 4))


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("alpha", [None, 1.702])
def test_swiglu_matches_onnx_reference_evaluator(alpha, backend, tmp_path):
    """onnxruntime 1.32 has no SwiGLU kernel, so no artifact can be built from it (below);
    the import itself is checked against onnx's own reference implementation."""
    from onnx.reference import ReferenceEvaluator

    attrs = {} if alpha is None else {"alpha": alpha}
    model = _model(tmp_path, "SwiGLU", {"a": (4, 9), "b": (4, 9)}, opset=28, **attrs)
    graph = import_onnx(model).graph
    executor = Executor(graph, BACKENDS[backend]())
    for feed in _feeds({"a": (4, 9), "b": (4, 9)}, 3, nan=False):
        with np.errstate(over="ignore", invalid="ignore"):  # inf and inf * 0, as intended
            want = ReferenceEvaluator(str(model)).run(None, feed)[0]
        got = executor.run(dict(feed))["y"]
        # the import's default tolerance: onnxruntime's sigmoid is an approximation at the
        # far tail (about 1e-6 off near sigmoid(-10)), the reference evaluator's exact
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op, opset", [("SwiGLU", 28), ("Swish", 25)])
def test_a_build_is_refused_while_onnxruntime_cannot_run_it(op, opset, tmp_path):
    """onnxruntime 1.32 has no SwiGLU kernel, and runs Swish in an opset-24 model only."""
    inputs = {"a": (4, 9), "b": (4, 9)} if op == "SwiGLU" else {"x": (4, 9)}
    model = _model(tmp_path, op, inputs, opset=opset)
    with pytest.raises(ModelImportError, match="onnxruntime cannot load the model"):
        build_onnx_artifact(model, tmp_path / "m.pha")
    assert not (tmp_path / "m.pha").exists()


def test_swiglu_of_two_shapes_is_refused(tmp_path):
    """Run-time dims of two names may differ when the call runs, where SwiGLU does not
    broadcast (the checker refuses static shapes that differ)."""
    model = _model(tmp_path, "SwiGLU", {"a": ("n", 9), "b": ("m", 9)}, opset=28)
    assert_refused(model, ModelFileError, "node 'node' (SwiGLU)",
                   "A 'a' (float32 ['n', 9]) and B 'b' (float32 ['m', 9]) must be of one dtype "
                   "and shape: SwiGLU does not broadcast")


# --- TensorScatter (opset 24) --------------------------------------------------------------------


def _scatter_model(tmp_path, past, update, write=None, **attrs):
    """One TensorScatter node named "node" over float32 graph inputs ``past`` and ``update``
    (shapes) and, given a shape, int64 ``write`` indices."""
    helper, tp = onnx.helper, onnx.TensorProto
    ins = [helper.make_tensor_value_info("past", tp.FLOAT, list(past)),
           helper.make_tensor_value_info("update", tp.FLOAT, list(update))]
    if write is not None:
        ins.append(helper.make_tensor_value_info("write", tp.INT64, list(write)))
    node = helper.make_node("TensorScatter", ["past", "update"] + ["write"] * (write is not None),
                            ["y"], name="node", **attrs)
    graph = helper.make_graph([node], "g", ins,
                              [helper.make_tensor_value_info("y", tp.FLOAT, list(past))])
    path = tmp_path / "s.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24)]), path)
    return path


def _scatter_feed(past, update, write=None):
    rng = np.random.default_rng(len(past))
    feed = {"past": rng.standard_normal(past).astype(np.float32),
            "update": rng.standard_normal(update).astype(np.float32)}
    if write is not None:
        feed["write"] = np.asarray(write, np.int64)
    return feed


@pytest.mark.parametrize("past, update, attrs", [
    ((2, 3, 6, 4), (2, 3, 2, 4), {}),
    ((2, 6, 4), (2, 6, 4), {"axis": 1}),
    ((2, 3, 4, 6), (2, 3, 4, 1), {"axis": -1, "mode": "circular"}),
], ids=["axis-2", "whole-cache", "last-axis-circular"])
def test_tensor_scatter_without_write_indices_matches_onnxruntime(past, update, attrs, tmp_path,
                                                                  signer):
    """The update goes to the cache's first positions."""
    model = _scatter_model(tmp_path, past, update, **attrs)
    _, loaded = import_and_load(model, tmp_path / "s.pha", signer)
    check_on_both_backends(model, loaded, [_scatter_feed(past, update) for _ in range(2)])


@pytest.mark.parametrize("mode, writes", [
    ("linear", [[0, 4, 2], [4, 4, 4]]),
    ("circular", [[5, 0, 13], [4, 11, 6]]),
])
def test_tensor_scatter_at_write_indices_matches_onnxruntime(mode, writes, tmp_path, signer):
    """Each batch entry's update from its write index on (linear: up to the cache's end;
    circular: wrapping round it, any index >= 0)."""
    past, update = (3, 2, 6, 4), (3, 2, 2, 4)
    model = _scatter_model(tmp_path, past, update, (3,), mode=mode)
    _, loaded = import_and_load(model, tmp_path / "s.pha", signer)
    feeds = [_scatter_feed(past, update, w) for w in writes]
    check_on_both_backends(model, loaded, feeds)
    y = Executor(loaded.graph, NumpyBackend()).run(dict(feeds[0]))["y"]
    w = writes[0][0]  # batch entry 0: steps w and w + 1 (mod 6) are the update's
    np.testing.assert_array_equal(y[0][:, [w % 6, (w + 1) % 6]], feeds[0]["update"][0])


@pytest.mark.parametrize("write", [None, ("b",)], ids=["first", "at-indices"])
def test_tensor_scatter_over_a_run_time_batch(write, tmp_path, signer):
    model = _scatter_model(tmp_path, ("b", 2, 5, 3), ("b", 2, 1, 3), write, mode="circular")
    _, loaded = import_and_load(model, tmp_path / "s.pha", signer)
    check_on_both_backends(model, loaded, [
        _scatter_feed((b, 2, 5, 3), (b, 2, 1, 3), None if write is None else w)
        for b, w in ((1, [4]), (3, [0, 7, 2]))])


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("mode, bad, message", [
    ("linear", 5, r"outside \[0, 5\): \(1,\)=5"),
    ("linear", -1, r"outside \[0, 5\): \(1,\)=-1"),
    ("circular", -1, r"outside \[0, 1\): \(1,\)=-1"),
])
def test_a_write_index_onnxruntime_refuses_is_refused_when_it_arrives(mode, bad, message,
                                                                      backend, tmp_path,
                                                                      signer):
    """As onnxruntime: linear, the update must fit from the index on; circular, the index
    must not be negative. An IndexRangeError naming the node, nothing returned."""
    from abi.errors import IndexRangeError

    past, update = (2, 2, 6, 4), (2, 2, 2, 4)
    model = _scatter_model(tmp_path, past, update, (2,), mode=mode)
    _, loaded = import_and_load(model, tmp_path / "s.pha", signer)
    with pytest.raises(Exception):
        onnxruntime_outputs(model, _scatter_feed(past, update, [0, bad]))
    executor = Executor(loaded.graph, BACKENDS[backend]())
    executor.run(_scatter_feed(past, update, [0, 4]))
    with pytest.raises(IndexRangeError, match=rf"'node/write_check'.*{message}"):
        executor.run(_scatter_feed(past, update, [0, bad]))


@pytest.mark.parametrize("past, update, write, attrs, error, message", [
    ((2, 6, 4), (2, 2, 4), None, {"axis": 0}, ModelFileError,
     "attribute axis is 0, the batch's: the sequence axis is another"),
    ((2, 6, 4), (2, 2, 4), None, {"axis": 1, "mode": "ring"}, ModelFileError,
     "attribute mode='ring' must be 'linear' or 'circular'"),
    ((2, 6, 4), (2, 2, 3), None, {"axis": 1}, ModelFileError,
     "update 'update' of shape [2, 2, 3] differs from past_cache 'past' of shape [2, 6, 4] on "
     "axis 2, where only axis 1 (the sequence) may"),
    ((2, 6, 4), (2, 7, 4), None, {"axis": 1}, ModelFileError,
     "update 'update' of 7 steps along axis 1 exceeds the cache's 6"),
    ((2, 6, 4), (2, 2, 4), (3,), {"axis": 1}, ModelFileError,
     "write_indices 'write' of shape [3] must be of shape [2] (one per batch entry)"),
    ((2, "s", 4), (2, 2, 4), None, {"axis": 1}, UnsupportedModelError,
     "sequence axis 1 of run-time length (cache 's', update 2)"),
], ids=["batch-axis", "mode", "other-dim", "too-long", "write-shape", "run-time-length"])
def test_what_tensor_scatter_cannot_take_is_refused(past, update, write, attrs, error, message,
                                                    tmp_path):
    model = _scatter_model(tmp_path, past, update, write, **attrs)
    assert_refused(model, error, "node 'node' (TensorScatter)", message)


# --- what else opsets 24 to 28 changed -----------------------------------------------------------


def test_a_range_over_a_run_time_dim_takes_opset_27s_stash_type(tmp_path, signer):
    """``stash_type`` acts on float16 and bfloat16 only; a float32 Range to a run-time dim
    (``arange(x.shape[1])``) imports as before."""
    helper, tp = onnx.helper, onnx.TensorProto
    nodes = [helper.make_node("Shape", ["x"], ["s"], start=1),
             helper.make_node("Squeeze", ["s"], ["n"]),
             helper.make_node("Cast", ["n"], ["nf"], to=tp.FLOAT),
             helper.make_node("Range", ["zero", "nf", "one"], ["r"], stash_type=1, name="node"),
             helper.make_node("Add", ["x", "r"], ["y"])]
    inits = [onnx.numpy_helper.from_array(np.array(v, np.float32), n)
             for n, v in (("zero", 0.0), ("one", 1.0))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", tp.FLOAT,
                                                                         [2, "k"])],
                              [helper.make_tensor_value_info("y", tp.FLOAT, [2, "k"])],
                              initializer=inits)
    model = tmp_path / "r.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 27)]), model)
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    check_on_both_backends(model, loaded, [{"x": np.zeros((2, k), np.float32)} for k in (1, 7)])


def _one_node(tmp_path, op: str, opset: int, inputs: dict, outputs: dict, **attrs):
    """A one-node ``op`` named "node": ``inputs`` name -> shape (a float32 graph input) or
    array (an initializer); ``outputs`` name -> (ONNX element type, shape)."""
    helper = onnx.helper
    graph = helper.make_graph(
        [helper.make_node(op, list(inputs), list(outputs), name="node", **attrs)], "g",
        [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, list(s))
         for n, s in inputs.items() if not isinstance(s, np.ndarray)],
        [helper.make_tensor_value_info(n, e, list(s)) for n, (e, s) in outputs.items()],
        initializer=[onnx.numpy_helper.from_array(v, n) for n, v in inputs.items()
                     if isinstance(v, np.ndarray)])
    model = tmp_path / "n.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), model)
    return model


@pytest.mark.parametrize("op", ["Cast", "CastLike"])
def test_a_cast_with_opset_24s_round_mode_is_refused_naming_why(op, tmp_path):
    inputs = {"x": (2, 3)} if op == "Cast" else {"x": (2, 3), "like": np.zeros(1, np.int32)}
    attrs = {"to": onnx.TensorProto.INT32} if op == "Cast" else {}
    model = _one_node(tmp_path, op, 24, inputs, {"y": (onnx.TensorProto.INT32, (2, 3))},
                      round_mode="nearest", **attrs)
    assert_refused(model, UnsupportedModelError, f"node 'node' ({op})",
                   "attribute round_mode='nearest': it applies only to a cast to float8e8m0, a "
                   "dtype the ABI does not have (onnxruntime refuses it on any other cast)")


def test_bitcast_of_opset_26_maps_to_bitcast(tmp_path):
    """BitCast (a reinterpretation of the bits) is the ABI's ``bitcast`` (test_bitwise.py
    compares it with onnxruntime). Opset 27's recurrent-state ops are test_functions.py's:
    CausalConvWithState and LinearAttention (a Scan) import through their functions."""
    model = _one_node(tmp_path, "BitCast", 26, {"x": (2, 3)},
                      {"y": (onnx.TensorProto.INT32, (2, 3))}, to=onnx.TensorProto.INT32)
    assert [(n.op, n.attrs["dtype"]) for n in import_onnx(model).graph.nodes] == [
        ("bitcast", "int32")]


@pytest.mark.parametrize("code, name", [(onnx.TensorProto.INT2, "INT2 (26)"),
                                        (onnx.TensorProto.UINT2, "UINT2 (25)"),
                                        (onnx.TensorProto.FLOAT8E8M0, "FLOAT8E8M0 (24)")])
def test_the_element_types_newer_opsets_added_are_refused_by_name(code, name, tmp_path):
    helper = onnx.helper
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"], name="node")], "g",
                              [helper.make_tensor_value_info("x", code, [4])],
                              [helper.make_tensor_value_info("y", code, [4])])
    model = tmp_path / "t.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 25)]), model)
    with pytest.raises(UnsupportedModelError) as info:
        import_onnx(model)
    assert str(info.value) == f"graph input 'x' has ONNX element type {name}, not an ABI dtype"
    cast = _one_node(tmp_path, "Cast", 25, {"x": (4,)}, {"y": (code, (4,))}, to=code)
    assert_refused(cast, UnsupportedModelError, "node 'node' (Cast)",
                   f"cast to ONNX element type {name} (not an ABI dtype)")
