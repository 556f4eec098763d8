"""An Add of a constant of zeros onto a conv's output (directly or through Adds; or onto a
conv_transpose's, a batchnorm's, a linear's) goes into the conv's bias at import (fusion.py):
the outputs checked on both backends against onnxruntime with graph optimizations off (which
keeps the Add), the signs of their zeros included, and the bias's signs of zero as the fold's
rule has them. Where the zeros cannot be moved (mixed signs, a value read twice, a graph output,
a broadcast that grows the tensor, another producer, a bias computed when the call runs) the
Add stays."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.executor import Executor
from plugins.numpy_backend import NumpyBackend

from .conftest import import_and_load, onnx, onnxruntime_outputs

helper, numpy_helper = onnx.helper, onnx.numpy_helper
C = 4


def _weights(seed: int) -> np.ndarray:
    """A (C, C, 3, 3) weight whose output channel 0 is all 0: outputs of exactly zero there,
    whose signs the comparisons check."""
    w = np.random.default_rng(seed).standard_normal((C, C, 3, 3)).astype(np.float32)
    w[0] = 0.0
    return w


def _model(path, nodes, initializers, outputs=("y",), out_shape=(1, C, 6, 6)):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, C, 6, 6])],
        [helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, list(out_shape))
         for o in outputs],
        [numpy_helper.from_array(_stored(v), k) for k, v in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def _stored(value) -> np.ndarray:
    """Floats as float32, integers as int64."""
    value = np.asarray(value)
    return value.astype(np.float32 if value.dtype.kind == "f" else np.int64)


def _conv(name, x, w, b=None):
    return helper.make_node("Conv", [x, w] + ([b] if b else []), [name], pads=[1, 1, 1, 1])


def _input():
    return np.random.default_rng(7).standard_normal((1, C, 6, 6)).astype(np.float32)


def _built(tmp_path, model, signer, outputs=("y",)):
    """The artifact's graph and onnxruntime's outputs (graph optimizations off), after checking
    the outputs on both backends against them: every sign equal, zeros' too, values within
    1e-5."""
    from plugins.onnxruntime_backend import OnnxruntimeBackend

    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    x = _input()
    want = onnxruntime_outputs(model, {"x": x}, optimized=False)
    for backend in (NumpyBackend(), OnnxruntimeBackend()):
        got = Executor(loaded.graph, backend).run({"x": x})
        for name in outputs:
            assert np.array_equal(np.signbit(got[name]), np.signbit(want[name])), name
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5)
    return loaded.graph, want


def _ops(graph) -> list[str]:
    return [n.op for n in graph.nodes]


@pytest.mark.parametrize("zero", [0.0, -0.0], ids=["plus", "minus"])
def test_zeros_added_to_a_conv_go_into_its_bias(tmp_path, signer, zero):
    model = _model(tmp_path / "m.onnx", [_conv("c", "x", "w"),
                                          helper.make_node("Add", ["c", "z"], ["y"])],
                   {"w": _weights(1), "z": np.full((), zero)})
    graph, _ = _built(tmp_path, model, signer)
    assert _ops(graph) == ["conv"]
    [conv] = graph.nodes
    bias = graph.tensors[conv.inputs[2]]
    assert bias.shape == (C,) and np.all(bias == 0)
    assert np.all(np.signbit(bias) == np.signbit(zero))  # -0.0 + 0 is 0, -0.0 + -0.0 is -0.0


def test_zeros_added_to_a_sum_of_convs_go_into_one_conv_bias(tmp_path, signer):
    """MobileOne's block: its branches summed, then ``+ 0``; a per-channel constant of zeros
    (C, 1, 1) onto a conv that has a bias already."""
    bias = np.random.default_rng(3).standard_normal(C).astype(np.float32)
    bias[0] = -0.0
    model = _model(tmp_path / "m.onnx", [
        _conv("a", "x", "wa", "b"), _conv("b2", "x", "wb"),
        helper.make_node("Add", ["a", "b2"], ["s"]),
        helper.make_node("Add", ["z", "s"], ["y"])],
        {"wa": _weights(1), "wb": _weights(2), "b": bias, "z": np.zeros((C, 1, 1))})
    graph, _ = _built(tmp_path, model, signer)
    assert sorted(_ops(graph)) == ["add", "conv", "conv"]
    [biased] = [graph.tensors[n.inputs[2]] for n in graph.nodes
                if n.op == "conv" and n.inputs[2]]
    assert np.array_equal(biased, bias) and not np.signbit(biased[0])  # -0.0 + 0 is 0


def test_zeros_through_many_adds_reach_a_conv(tmp_path, signer):
    model = _model(tmp_path / "m.onnx", [
        _conv("a", "x", "wa"), _conv("b", "x", "wb"), _conv("c", "x", "wc"),
        helper.make_node("Add", ["a", "b"], ["s1"]), helper.make_node("Add", ["c", "s1"], ["s2"]),
        helper.make_node("Add", ["s2", "z"], ["y"])],
        {"wa": _weights(1), "wb": _weights(2), "wc": _weights(3), "z": np.zeros(())})
    graph, _ = _built(tmp_path, model, signer)
    assert sorted(_ops(graph)) == ["add", "add", "conv", "conv", "conv"]


@pytest.mark.parametrize("case", ["mixed", "read-twice", "graph-output", "grows", "not-a-conv",
                                  "nonzero", "run-time-bias"])
def test_an_add_of_zeros_that_cannot_move_stays(tmp_path, signer, case):
    nodes = [_conv("c", "x", "w"), helper.make_node("Add", ["c", "z"], ["y"])]
    inits = {"w": _weights(1), "z": np.zeros(())}
    outputs, shape = ("y",), (1, C, 6, 6)
    if case == "mixed":  # +0.0 on one channel, -0.0 on the others
        inits["z"] = np.array([0.0, -0.0, -0.0, -0.0]).reshape(C, 1, 1)
    elif case == "read-twice":  # the conv's output is read by the Add and by a Relu
        nodes.append(helper.make_node("Relu", ["c"], ["r"]))
        outputs = ("y", "r")
    elif case == "graph-output":
        outputs = ("y", "c")
    elif case == "grows":  # zeros of (2, C, 6, 6): the sum has twice the conv's output
        inits["z"] = np.zeros((2, C, 6, 6))
        shape = (2, C, 6, 6)
    elif case == "not-a-conv":
        nodes[0] = helper.make_node("Relu", ["x"], ["c"])
    elif case == "run-time-bias":  # the conv's bias computed when the call runs, from x
        nodes[:1] = [helper.make_node("ReduceMean", ["x"], ["m"], axes=[0, 2, 3], keepdims=0),
                     _conv("c", "x", "w", "m")]
    else:
        inits["z"] = np.full((), 1e-30)
    model = _model(tmp_path / "m.onnx", nodes, inits, outputs, shape)
    graph, _ = _built(tmp_path, model, signer, outputs)
    assert "add" in _ops(graph)
    conv = next((n for n in graph.nodes if n.op == "conv"), None)
    assert conv is None or conv.inputs[2] is None or conv.inputs[2] not in graph.tensors


def test_zeros_added_to_a_conv_transpose_go_into_its_bias(tmp_path, signer):
    w = np.random.default_rng(5).standard_normal((C, 2, 3, 3)).astype(np.float32)
    w[:, 0] = 0.0  # (C, out/groups, k, k): output channels 0 and 2 are zeros
    model = _model(tmp_path / "m.onnx", [
        helper.make_node("ConvTranspose", ["x", "w"], ["t"], pads=[1, 1, 1, 1], group=2),
        helper.make_node("Add", ["t", "z"], ["y"])], {"w": w, "z": np.zeros(())})
    graph, want = _built(tmp_path, model, signer)
    assert _ops(graph) == ["conv_transpose"]
    bias = graph.tensors[graph.nodes[0].inputs[2]]
    assert bias.shape == (C,) and np.all(bias == 0) and not np.any(np.signbit(bias))
    assert np.all(want["y"][0, [0, 2]] == 0)


def test_zeros_added_to_a_batchnorm_go_into_its_bias(tmp_path, signer):
    """A BatchNormalization on the input (no conv before it to fold into), then ``+ 0``: its
    shift takes the zeros, -0.0 turned into 0 (a channel of zero scale gives exactly it)."""
    rng = np.random.default_rng(4)
    scale, shift = rng.uniform(0.5, 2, C), rng.uniform(-1, 1, C)
    scale[0], shift[0] = 0.0, -0.0
    model = _model(tmp_path / "m.onnx", [
        helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["n"]),
        helper.make_node("Add", ["n", "z"], ["y"])],
        {"s": scale, "b": shift, "m": rng.uniform(-1, 1, C), "v": rng.uniform(0.5, 2, C),
         "z": np.zeros(())})
    graph, want = _built(tmp_path, model, signer)
    assert _ops(graph) == ["batchnorm"]
    bias = graph.tensors[graph.nodes[0].inputs[2]]
    assert np.array_equal(bias, shift.astype(np.float32)) and not np.signbit(bias[0])
    assert np.all(want["y"][0, 0] == 0)


@pytest.mark.parametrize("op", ["MatMul", "Gemm"])
def test_zeros_added_to_a_linear_go_into_its_bias(tmp_path, signer, op):
    """A MatMul by a constant weight over (1, C, 6, 6)'s last axis (a ``linear`` without a bias,
    which a scalar 0 does not join as a bias of shape (out,)), or a Gemm with a bias of -0.0,
    then + 0."""
    w = np.random.default_rng(6).standard_normal((6, 6)).astype(np.float32)
    w[:, 1] = 0.0
    if op == "MatMul":
        nodes, inits, shape = [helper.make_node("MatMul", ["x", "w"], ["l"])], {"w": w}, None
    else:  # over the input flattened to (C * 6, 6), with a bias of -0.0
        nodes = [helper.make_node("Flatten", ["x"], ["f"], axis=3),
                 helper.make_node("Gemm", ["f", "w", "b"], ["l"])]
        inits, shape = {"w": w, "b": np.full(6, -0.0)}, (C * 6, 6)
    model = _model(tmp_path / "m.onnx", nodes + [helper.make_node("Add", ["l", "z"], ["y"])],
                   {**inits, "z": np.zeros(())}, out_shape=shape or (1, C, 6, 6))
    graph, want = _built(tmp_path, model, signer)
    assert "add" not in _ops(graph)
    [linear] = [n for n in graph.nodes if n.op == "linear"]
    bias = graph.tensors[linear.inputs[2]]
    assert bias.shape == (6,) and np.all(bias == 0) and not np.any(np.signbit(bias))
    assert np.all(want["y"][..., 1] == 0)


def test_a_conv_that_had_a_bias_gives_the_numpy_backend_the_same_bits(tmp_path, signer,
                                                                       monkeypatch):
    """The fold into a bias the conv had already changes no bit of the numpy backend's output
    (its kernel is the same; only a -0.0 of the bias becomes 0), against the build without the
    fold; a conv given a bias of zeros instead may move by a rounding step (module docstring)."""
    from plugin_host.onnx_import import fusion

    bias = np.random.default_rng(3).standard_normal(C).astype(np.float32)
    bias[1] = -0.0
    model = _model(tmp_path / "m.onnx", [
        _conv("a", "x", "wa", "b"), helper.make_node("Add", ["a", "z"], ["y"])],
        {"wa": _weights(1), "b": bias, "z": np.zeros(())})
    x = {"x": np.random.default_rng(8).standard_normal((1, C, 6, 6)).astype(np.float32)}
    folded = Executor(import_and_load(model, tmp_path / "f.pha", signer)[1].graph,
                      NumpyBackend()).run(dict(x))["y"]
    monkeypatch.setattr(fusion, "_zero_add", lambda *args: False)
    graph = import_and_load(model, tmp_path / "k.pha", signer)[1].graph
    assert _ops(graph) == ["conv", "add"]
    kept = Executor(graph, NumpyBackend()).run(dict(x))["y"]
    assert np.array_equal(folded.view(np.uint32), kept.view(np.uint32))
