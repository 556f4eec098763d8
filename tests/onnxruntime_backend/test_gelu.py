"""gelu's erf form on the onnxruntime backend is ONNX's Gelu, one kernel: bit for bit the five
ops of its formula, ``0.5 x * (erf(x / sqrt 2) + 1)``, as onnxruntime computes them, over
random float32 bit patterns, a dense range and special values, alone and after an added bias
(which onnxruntime may fuse with it)."""

from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from plugin_host.builder import GraphBuilder
from plugin_host.executor import Executor
from plugins.onnxruntime_backend import OnnxruntimeBackend
from tests.onnxruntime_backend.test_ops import model_ops

RNG = np.random.default_rng(6)


def formula(x: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """The formula's ops in an onnxruntime session with its optimizations off (nothing
    fused): [Add of the bias,] Mul by 1/sqrt 2, Erf, Mul of x by 0.5, Add 1, Mul."""
    consts = {"r2": 1 / math.sqrt(2), "h": 0.5, "one": 1.0}
    nodes = [helper.make_node("Mul", ["v", "r2"], ["a"]), helper.make_node("Erf", ["a"], ["t"]),
             helper.make_node("Mul", ["v", "h"], ["hv"]),
             helper.make_node("Add", ["t", "one"], ["t1"]),
             helper.make_node("Mul", ["hv", "t1"], ["y"])]
    inits = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in consts.items()]
    if bias is None:
        nodes.insert(0, helper.make_node("Identity", ["x"], ["v"]))
    else:
        nodes.insert(0, helper.make_node("Add", ["x", "b"], ["v"]))
        inits.append(numpy_helper.from_array(bias, "b"))
    graph = helper.make_graph(nodes, "formula",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, x.shape)],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 10
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    run = ort.InferenceSession(model.SerializeToString(), options,
                               providers=["CPUExecutionProvider"])
    return run.run(None, {"x": x})[0]


def gelu_graph(shape, *, approximate="none", bias=None):
    b = GraphBuilder("gelu")
    x = b.input("x", shape, "float32", "ANY")
    if bias is not None:
        x = b.op("add", x, b.constant("b", bias), name="bias")
    b.output(b.op("gelu", x, name="gelu", approximate=approximate), "y", "ANY")
    return b.build()


def same_bits(got, want):
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan].view(np.int32), want[~nan].view(np.int32))


def inputs(rows: int) -> np.ndarray:
    """Random bit patterns (every exponent, denormals, infinities, nans), a dense range over
    erf's curve, and special values, in rows of 67 (whole SIMD blocks and a tail)."""
    bits = RNG.integers(0, 2 ** 32, rows * 67 // 2, dtype=np.uint64).astype(np.uint32)
    dense = np.linspace(-9, 9, rows * 67 - bits.size - 11, dtype=np.float32)
    special = np.array([np.nan, np.inf, -np.inf, 3e38, -3e38, -0.0, 0.0, 1e-45, -1e-45, 1e-38,
                        -5.5], np.float32)
    return np.concatenate([bits.view(np.float32), dense, special]).reshape(rows, 67)


def test_the_erf_form_is_one_gelu_kernel_bit_for_bit_its_formula():
    graph = gelu_graph((4096, 67))
    assert model_ops(graph) == {"Gelu"}
    x = inputs(4096)
    with np.errstate(invalid="ignore"):
        same_bits(Executor(graph, OnnxruntimeBackend()).run({"x": x})["y"], formula(x))


def test_after_a_bias_as_its_formula_after_the_add():
    """An Add of a constant row before it, which onnxruntime's optimizer may fuse with it
    (BiasGelu): the Add's sums, then the formula, bit for bit."""
    bias = (RNG.standard_normal(67) * 2).astype(np.float32)
    graph = gelu_graph((512, 67), bias=bias)
    x = inputs(512)
    with np.errstate(invalid="ignore"):
        same_bits(Executor(graph, OnnxruntimeBackend()).run({"x": x})["y"], formula(x, bias))


@pytest.mark.parametrize("approximate, gelu", [("none", True), ("tanh", False)])
def test_which_form_is_the_kernel(approximate, gelu):
    """The tanh form stays its ops: onnxruntime's kernel for it rounds otherwise."""
    ops = model_ops(gelu_graph((2, 3), approximate=approximate))
    assert ("Gelu" in ops) is gelu and ("Tanh" in ops) is not gelu
