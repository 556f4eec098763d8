"""Scatters at indices computed at run time: ScatterElements, Scatter and ScatterND of one
coordinate per index (of several: test_nd_runtime.py; into data with run-time dims:
test_scatter_run_time_data.py) become ``scatter_elements``, MaxUnpool a
``scatter_elements`` into zeros of the output's size. Compared with onnxruntime on both
backends (duplicate indices, nan and signed zeros included: the updates land in the indices'
order on both); an index out of range is an IndexRangeError when it arrives; what cannot be
mapped is refused naming the node."""

from __future__ import annotations

import numpy as np
import pytest

from abi.errors import IndexRangeError
from plugin_host.errors import ModelFileError, UnsupportedModelError
from plugin_host.executor import Executor
from plugins.numpy_backend import NumpyBackend
from plugins.onnxruntime_backend import OnnxruntimeBackend

from .conftest import (EXPORTERS, assert_refused, check_against_onnxruntime, export,
                       export_dynamic, import_and_load, onnx, torch)
from .test_scatter import _floats, _model, assert_case_refused

helper, TP = onnx.helper, onnx.TensorProto
RNG = np.random.default_rng(43)
BACKENDS = {"numpy": NumpyBackend, "onnxruntime": OnnxruntimeBackend}


def _check(model, tmp_path, signer, feeds, ops: set[str]) -> None:
    """Build ``model``; its graph holds ``ops``; every feed gives onnxruntime's outputs on
    both backends."""
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    got = {n.op for n in loaded.graph.nodes}
    assert ops <= got, got
    for backend in BACKENDS.values():
        check_against_onnxruntime(model, loaded, feeds, backend=backend())


class _TopkMask(torch.nn.Module):
    """A mask of each row's two largest: scatter at topk's indices."""

    def forward(self, x):
        return torch.zeros_like(x).scatter_(1, torch.topk(x, 2, dim=1).indices, 1.0)


class _ScatterAt(torch.nn.Module):
    def forward(self, x, i):
        return torch.zeros(3, 5).scatter(1, i, x), torch.ones(4, 5).scatter_add(0, i, x)


class _IndexPut(torch.nn.Module):
    """``y[i] = v`` with i an input: ScatterND of one coordinate per index."""

    def forward(self, x, i):
        y = x.clone()
        y[i] = 0.5
        return y


class _Unpool(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = torch.nn.MaxPool2d(2, stride=2, return_indices=True)
        self.unpool = torch.nn.MaxUnpool2d(2, stride=2)

    def forward(self, x):
        return self.unpool(*self.pool(x))


def _no_nan(shape, n: int = 3) -> list[np.ndarray]:
    """Inputs for a MaxPool: extremes and infinities but no nan (a window holding a nan follows
    torch, not onnxruntime, which skips nans or not by their place: README, MaxPool)."""
    return [np.nan_to_num(x, nan=-0.0, posinf=np.inf, neginf=-np.inf) for x in _floats(shape, n)]


def _rows(n: int, high: int, shape) -> list[np.ndarray]:
    return [RNG.integers(0, high, shape).astype(np.int64) for _ in range(n)]


#: name: (module, example inputs, feeds, ops in the graph, only the dynamo exporter writes it)
TORCH_CASES = {
    "topk-mask": (_TopkMask, [torch.randn(3, 6)],
                  [{"x": x} for x in _floats((3, 6), 3)], {"topk", "scatter_elements"}, False),
    "scatter-and-add": (_ScatterAt, [torch.randn(2, 3), torch.tensor([[0, 1, 2], [2, 2, 0]])],
                        [{"x": x, "i": i} for x, i in zip(_floats((2, 3), 3),
                                                          _rows(3, 3, (2, 3)))],
                        {"scatter_elements"}, False),
    "index-put": (_IndexPut, [torch.randn(5, 3), torch.tensor([0, 3])],
                  [{"x": x, "i": i} for x, i in zip(_floats((5, 3), 3), _rows(3, 5, (2,)))],
                  {"scatter_elements"}, False),
    # the legacy exporter refuses max_unpool2d (a tensor condition in its shape check)
    "max-unpool": (_Unpool, [torch.randn(1, 2, 6, 4)],
                   [{"x": x} for x in _no_nan((1, 2, 6, 4))], {"scatter_elements"}, True),
}


@pytest.mark.parametrize("case, dynamo, fold, optimize", [
    pytest.param(case, *p.values, id=f"{case}-{p.id}") for case in TORCH_CASES
    for p in EXPORTERS if p.values[0] or not TORCH_CASES[case][4]])
def test_torch_scatters_at_run_time_indices_match_onnxruntime(case, dynamo, fold, optimize,
                                                              tmp_path, signer):
    module, args, feeds, ops, _ = TORCH_CASES[case]
    names = [f"y{k}" for k in range(2 if case == "scatter-and-add" else 1)]
    model = export(module(), args, tmp_path / "m.onnx", dynamo=dynamo, fold=fold,
                   optimize=optimize, input_names=list(feeds[0]), output_names=names)
    _check(model, tmp_path, signer, feeds, ops)


class _PillarsToGrid(torch.nn.Module):
    """Point features summed into the cells of a flattened grid of 16 cells (a point
    cloud's pillars scattered to a bird's-eye view), the batch and the point count run-time:
    the legacy exporter slices the features to the index's shape, ``Slice(x, 0,
    Shape(index))``, the features' own shape."""

    def forward(self, x, cell):
        grid = torch.zeros(x.shape[0], 16, x.shape[2])
        return grid.scatter_add(1, cell.unsqueeze(-1).expand_as(x), x)


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_a_scatter_add_of_a_run_time_number_of_points_takes_any_count(dynamo, tmp_path,
                                                                      signer):
    args = [torch.randn(2, 10, 4), torch.randint(0, 16, (2, 10))]
    path = export_dynamic(_PillarsToGrid(), args, tmp_path / "p.onnx", dynamo=dynamo,
                          names=["x", "cell"],
                          dims=[{0: "batch", 1: "points"}] * 2)
    feeds = [{"x": RNG.standard_normal((b, n, 4)).astype(np.float32),
              "cell": RNG.integers(0, 16, (b, n))} for b, n in ((1, 1), (2, 7), (3, 40))]
    _check(path, tmp_path, signer, feeds, {"scatter_elements"})


def test_dynamo_scatter_reduce_without_self_matches_onnxruntime(tmp_path, signer):
    """include_self=False: dynamo writes two ScatterElements (the first puts the reduction's
    identity where updates go), both at run-time indices."""
    class Reduce(torch.nn.Module):
        def forward(self, x, i):
            return tuple(torch.zeros(3, 4).scatter_reduce(0, i, x, how, include_self=False)
                         for how in ("amax", "amin", "sum", "prod"))

    model = export(Reduce(), [torch.randn(2, 4), torch.tensor([[0, 1, 2, 0], [1, 1, 2, 2]])],
                   tmp_path / "m.onnx", dynamo=True, input_names=["x", "i"],
                   output_names=["max", "min", "sum", "prod"])
    feeds = [{"x": x, "i": i} for x, i in zip(_floats((2, 4), 3), _rows(3, 3, (2, 4)))]
    _check(model, tmp_path, signer, feeds, {"scatter_elements"})


def _runtime_feeds(model, high: int, n: int = 4) -> list[dict[str, np.ndarray]]:
    """Indices in [0, high), duplicates likely; floats with extremes, nan and -0.0 (the last),
    and a feed of signed zeros and nan only (equal values: which one stays is visible)."""
    graph = onnx.load(model).graph
    feeds = []
    for k in range(n):
        feed = {}
        for v in graph.input:
            shape = [d.dim_value for d in v.type.tensor_type.shape.dim]
            kind = v.type.tensor_type.elem_type
            if kind in (TP.INT64, TP.INT32):
                feed[v.name] = RNG.integers(0, high, shape).astype(
                    np.int64 if kind == TP.INT64 else np.int32)
            elif k == n - 1:
                feed[v.name] = RNG.choice(np.array([0.0, -0.0, np.nan], np.float32), shape)
            else:
                feed[v.name] = _floats(tuple(shape), 1)[0] if k == n - 2 else \
                    (RNG.standard_normal(shape) * 3).astype(np.float32)
        feeds.append(feed)
    return feeds


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("op, data, indices, updates, attrs, high", [
    ("ScatterElements", (3, 5), (3, 7), (3, 7), {"axis": 1}, 5),
    ("ScatterElements", (4, 2, 3), (6, 2, 2), (6, 2, 2), {"axis": 0}, 4),
    ("ScatterND", (4, 3), (5, 1), (5, 3), {}, 4),
    ("ScatterND", (3, 2, 2), (2, 2, 1), (2, 2, 2, 2), {}, 3),
], ids=["elements-axis1", "elements-axis0", "nd-rows", "nd-2d-indices"])
def test_run_time_indices_match_onnxruntime(op, data, indices, updates, attrs, high,
                                            reduction, tmp_path, signer):
    model = _model(tmp_path, op, data, np.zeros(indices, np.int64), updates, const="runtime",
                   reduction=reduction, **attrs)
    _check(model, tmp_path, signer, _runtime_feeds(model, high), {"scatter_elements"})


def test_old_scatter_and_int32_indices(tmp_path, signer):
    """Scatter (opset 9-10) and int32 indices (widened to int64) at run time."""
    model = onnx.load(_model(tmp_path, "ScatterElements", (3, 4), np.zeros((2, 3), np.int64),
                             (2, 3), const="runtime", axis=1))
    model.graph.node[0].op_type = "Scatter"
    model.graph.input[1].type.tensor_type.elem_type = TP.INT32
    del model.opset_import[:]
    model.opset_import.append(helper.make_opsetid("", 10))
    model.ir_version = 5
    path = tmp_path / "old.onnx"
    path.write_bytes(model.SerializeToString())
    _check(path, tmp_path, signer, _runtime_feeds(path, 4), {"cast", "scatter_elements"})


def _unpool_model(tmp_path, shape, pool: dict, unpool: dict, output_shape=None, declared=None):
    """MaxPool with Indices feeding MaxUnpool (as torch pairs them), one graph input ``x``;
    the output declared of shape ``declared`` (by default, the one MaxUnpool gives)."""
    spatial = len(shape) - 2
    nodes = [helper.make_node("MaxPool", ["x"], ["p", "i"], name="pool", **pool)]
    inputs, inits = ["p", "i"], []
    if output_shape is not None:
        inits.append(onnx.numpy_helper.from_array(np.array(output_shape, np.int64), "shape"))
        inputs.append("shape")
    nodes.append(helper.make_node("MaxUnpool", inputs, ["y"], name="node", **unpool))
    out = list(declared or output_shape or shape[:2])
    if declared is None and output_shape is None:  # MaxPool's size, then MaxUnpool's from it
        for a, d in enumerate(shape[2:]):
            k, s = pool["kernel_shape"][a], pool.get("strides", [1] * spatial)[a]
            pads = pool.get("pads", [0] * 2 * spatial)
            size = (d + pads[a] + pads[a + spatial] - k) // s + 1
            k, s = unpool["kernel_shape"][a], unpool.get("strides", [1] * spatial)[a]
            pads = unpool.get("pads", [0] * 2 * spatial)
            out.append((size - 1) * s - pads[a] - pads[a + spatial] + k)
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TP.FLOAT, out)],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    path = tmp_path / f"unpool{spatial}.onnx"
    path.write_bytes(model.SerializeToString())
    return path


@pytest.mark.parametrize("shape, pool, unpool, output_shape", [
    ((2, 3, 8), {"kernel_shape": [2], "strides": [2]}, {"kernel_shape": [2], "strides": [2]},
     None),
    ((1, 2, 7, 6), {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 0]},
     {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 0]}, None),
    ((1, 2, 5, 5), {"kernel_shape": [2, 2], "strides": [2, 2]},
     {"kernel_shape": [2, 2], "strides": [2, 2]}, [1, 2, 5, 5]),
    ((1, 1, 4, 4, 4), {"kernel_shape": [2, 2, 2], "strides": [2, 2, 2]},
     {"kernel_shape": [2, 2, 2], "strides": [2, 2, 2]}, None),
    ((1, 2, 6, 6), {"kernel_shape": [3, 3], "strides": [1, 1]},  # overlapping windows
     {"kernel_shape": [3, 3], "strides": [1, 1]}, None),
], ids=["1d", "2d-padded", "2d-output-shape", "3d", "2d-overlapping"])
def test_max_unpool_matches_onnxruntime(shape, pool, unpool, output_shape, tmp_path, signer):
    model = _unpool_model(tmp_path, shape, pool, unpool, output_shape)
    feeds = [{"x": x} for x in _no_nan(shape)]
    _check(model, tmp_path, signer, feeds, {"max_pool_with_indices", "scatter_elements"})


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("bad, named", [(-6, -1), (5, 5)])
def test_an_index_out_of_range_is_refused_when_it_arrives(bad, named, backend, tmp_path,
                                                          signer):
    """An index outside [-5, 5) (a negative one counts from the end, as ONNX counts it, and is
    named so: -6 as -1), as gather_elements' run-time indices are; nothing is returned."""
    model = _model(tmp_path, "ScatterElements", (3, 5), np.zeros((3, 2), np.int64), (3, 2),
                   const="runtime", axis=1)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    executor = Executor(loaded.graph, BACKENDS[backend]())
    feed = {"data": _floats((3, 5), 1)[0], "updates": _floats((3, 2), 1)[0],
            "indices": np.array([[0, 4], [bad, 1], [2, 2]])}
    with pytest.raises(IndexRangeError, match=rf"outside \[0, 5\): \(1, 0\)={named}"):
        executor.run(feed)


def _refusal_cases():
    i64 = np.int64
    return {
        "nd-updates-shape": (dict(op="ScatterND", data=(4, 3), indices=np.zeros((2, 1), i64),
                                  updates=(2, 2), const="runtime"),
                             ModelFileError, "updates of shape [2, 2] must be of shape [2, 3]"),
        "elements-updates-shape": (dict(op="ScatterElements", data=(4, 3),
                                        indices=np.zeros((2, 3), i64), updates=(2, 2),
                                        const="runtime"),
                                   UnsupportedModelError, "updates shape (2, 2) is not the "
                                                          "indices' shape (2, 3)"),
    }


@pytest.mark.parametrize("case", list(_refusal_cases()))
def test_refusals_name_the_node(case, tmp_path):
    assert_case_refused(_refusal_cases()[case], tmp_path)


@pytest.mark.parametrize("unpool, output_shape, message", [
    ({"kernel_shape": [2, 2], "strides": [2]}, None, "attribute strides=[2] must be 2 "
                                                     "integers >= 1"),
    ({"kernel_shape": [2, 2], "pads": [0, 0, -1, 0]}, None, "attribute pads=[0, 0, -1, 0]"),
    ({"kernel_shape": [1, 1], "pads": [1, 1, 1, 1]}, None, "the output's spatial dims [0, 0]"),
    ({"kernel_shape": [2, 2]}, [1, 2, 4], "output_shape [1, 2, 4] must be 4 integers >= 1"),
])
def test_max_unpool_refusals_name_the_node(unpool, output_shape, message, tmp_path):
    model = _unpool_model(tmp_path, (1, 2, 4, 4), {"kernel_shape": [2, 2], "strides": [2, 2]},
                          unpool, output_shape, declared=[1, 2, 4, 4])
    assert_refused(model, ModelFileError, "node 'node' (MaxUnpool)", message)
