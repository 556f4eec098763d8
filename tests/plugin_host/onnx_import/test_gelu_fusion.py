"""GELU as the exporters write it before opset 20 (Div by sqrt(2), Erf, Add of 1, and x and 0.5
multiplied in, in each exporter's order; transformers' own ``x * 0.5 * (1 + erf(x /
sqrt(2)))``) imports as one ``gelu``, whose outputs match onnxruntime's on both backends; a
chain that is not exactly that, or whose steps are read elsewhere, keeps its ops."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper

from plugin_host.executor import Executor
from plugins.onnxruntime_backend import OnnxruntimeBackend

from .conftest import (EXPORTERS, check_on_both_backends, export, import_and_load, onnx,
                       onnxruntime_outputs, torch)

nn = torch.nn
RNG = np.random.default_rng(20261208)


class _Written(nn.Module):
    """A linear layer and GELU as many transformers write it out."""

    def __init__(self, half_first: bool):
        super().__init__()
        self.linear, self.half_first = nn.Linear(8, 16), half_first

    def forward(self, x):
        x = self.linear(x)
        if self.half_first:
            return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))
        return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def _feeds():
    x = RNG.standard_normal((3, 8)).astype(np.float32)
    return [{"x": x}, {"x": x * 40}, {"x": np.array([[0.0, -0.0, 1e-30, -1e-30, 6.0, -6.0, 20.0,
                                                       -20.0]] * 3, np.float32)}]


@pytest.mark.parametrize("module", ["nn.GELU", "half_first", "half_last"])
@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_exported_gelu_is_one_gelu(tmp_path, signer, module, dynamo, fold, optimize):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.GELU()) if module == "nn.GELU" else \
        _Written(module == "half_first")
    feeds = _feeds()
    model = export(m, [torch.from_numpy(feeds[0]["x"])], tmp_path / "g.onnx", dynamo=dynamo,
                   fold=fold, optimize=optimize, input_names=["x"], output_names=["y"],
                   opset=17 if not dynamo else 18)
    assert "Erf" in {n.op_type for n in onnx.load(model).graph.node}
    _, loaded = import_and_load(model, tmp_path / "g.pha", signer)
    ops = [n.op for n in loaded.graph.nodes]
    assert ops == ["linear", "gelu"], ops
    check_on_both_backends(model, loaded, feeds)


def _chain(tmp_path, steps, extra_outputs=(), scale=math.sqrt(2), one=1.0, half=0.5,
           half_dims=()):
    """x through ``steps`` (op, inputs, output) of ONNX nodes with constants s (``scale``),
    r (1 / sqrt 2), one (``one``) and half (``half``, of dims ``half_dims``), as a model
    file."""
    consts = {"s": (scale, ()), "r": (1 / math.sqrt(2), ()), "one": (one, ()),
              "half": (half, half_dims)}
    nodes = [helper.make_node("Constant", [], [n], value=helper.make_tensor(n, TensorProto.FLOAT,
                                                                              dims, [v]))
             for n, (v, dims) in consts.items()]
    nodes += [helper.make_node(op, list(ins), [out], name=out) for op, ins, out in steps]
    y_dims = [1] * (len(half_dims) - 2) + [64, 5]  # a half of rank 3 broadcasts x up
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, y_dims if n == "y" else [64, 5])
            for n in ("y", *extra_outputs)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [64, 5])], outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "chain.onnx"
    onnx.save(model, path)
    return path


#: the chain's steps in each order the fusion takes: x / s or x * r, erf, + 1, then 0.5 and x
ORDERS = {
    "divided_then_times_x_then_half": [("Div", "xs", "d"), ("Erf", "d", "e"),
                                       ("Add", ("e", "one"), "a"), ("Mul", ("x", "a"), "m"),
                                       ("Mul", ("m", "half"), "y")],
    "times_reciprocal_then_half_then_x": [("Mul", ("r", "x"), "d"), ("Erf", "d", "e"),
                                          ("Add", ("one", "e"), "a"),
                                          ("Mul", ("half", "a"), "m"), ("Mul", ("m", "x"), "y")],
    "half_x_first": [("Mul", ("x", "half"), "h"), ("Div", "xs", "d"), ("Erf", "d", "e"),
                     ("Add", ("e", "one"), "a"), ("Mul", ("a", "h"), "y")],
}


def _steps(order):
    return [(op, ("x", "s") if ins == "xs" else (ins,) if isinstance(ins, str) else ins, out)
            for op, ins, out in ORDERS[order]]


@pytest.mark.parametrize("order", sorted(ORDERS))
def test_each_order_is_one_gelu(tmp_path, signer, order):
    model = _chain(tmp_path, _steps(order))
    _, loaded = import_and_load(model, tmp_path / "g.pha", signer)
    assert [n.op for n in loaded.graph.nodes] == ["gelu"]
    x = RNG.standard_normal((64, 5)).astype(np.float32) * 3
    check_on_both_backends(model, loaded, [{"x": x}])
    # bare onnxruntime at its defaults makes the chain its Gelu kernel: the same bits
    got = Executor(loaded.graph, OnnxruntimeBackend()).run({"x": x})["y"]
    assert np.array_equal(got, onnxruntime_outputs(model, {"x": x})["y"])


@pytest.mark.parametrize("case", ["scaled_read_elsewhere", "erf_read_elsewhere",
                                  "sum_read_elsewhere", "half_x_read_elsewhere", "scale_1.5",
                                  "one_2", "half_0.25",
                                  "half_x_first_0.25", "half_of_rank_3", "x_not_the_erf_input"])
def test_other_chains_keep_their_ops(tmp_path, signer, case):
    steps, extra = _steps("divided_then_times_x_then_half"), ()
    constants = {"scale": math.sqrt(2), "half": 0.5}
    if case == "half_x_read_elsewhere":
        steps, extra = _steps("half_x_first"), ("h",)
    elif case.endswith("read_elsewhere"):
        extra = ({"scaled": "d", "erf": "e", "sum": "a"}[case.split("_")[0]],)
    elif case == "scale_1.5":
        constants["scale"] = 1.5
    elif case == "one_2":
        constants["one"] = 2.0
    elif case.startswith("half_") and case.endswith("0.25"):
        constants["half"] = 0.25
        if case == "half_x_first_0.25":
            steps = _steps("half_x_first")
    elif case == "half_of_rank_3":  # y is (1, 64, 5), not x's (64, 5)
        constants["half_dims"] = (1, 1, 1)
    else:  # the product takes x's double, not x
        steps = [("Add", ("x", "x"), "x2")] + [
            (op, tuple("x2" if i == "x" and op == "Mul" else i for i in ins), out)
            for op, ins, out in steps]
    model = _chain(tmp_path, steps, extra, **constants)
    _, loaded = import_and_load(model, tmp_path / "g.pha", signer)
    ops = [n.op for n in loaded.graph.nodes]
    assert "erf" in ops and "gelu" not in ops, ops
    x = RNG.standard_normal((64, 5)).astype(np.float32) * 3
    check_on_both_backends(model, loaded, [{"x": x}])
