"""ScatterND into data with run-time dims: a sinusoidal position table written by slice
assignment over a run-time length (``pe[:, 0::2] = sin(...)``), which the legacy exporter writes
as a ScatterND of run-time indices into ``(t, d)`` and the dynamo exporter as one of constant
indices into the transposed ``(d, t)``. Compared with onnxruntime on both backends and with
torch; an index outside a run-time dim is an IndexRangeError when it arrives; what cannot be
mapped is refused naming the node."""

from __future__ import annotations

import math

import numpy as np
import pytest

from abi.errors import IndexRangeError
from plugin_host.errors import ModelFileError, UnsupportedModelError
from plugin_host.executor import Executor

from .conftest import (assert_refused, check_against_onnxruntime, export_dynamic,
                       import_and_load, onnx, torch)
from .test_scatter_runtime import BACKENDS, _check

helper, TP = onnx.helper, onnx.TensorProto
RNG = np.random.default_rng(53)


class _Positions(torch.nn.Module):
    """``x + pe`` with the table ``pe`` of the input's run-time length written by slice
    assignment, as many transformer encoders compute it."""

    def forward(self, x):
        t, d = x.shape[1], x.shape[2]
        pe = torch.zeros(t, d)
        pos = torch.arange(t).unsqueeze(1).float()
        div = torch.exp(torch.arange(0, d, 2).float() * (-math.log(10000.0) / d))
        pe[:, 0::2] = torch.sin(pos * div)
        pe[:, 1::2] = torch.cos(pos * div)
        return x + pe


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
@pytest.mark.parametrize("batch", [False, True], ids=["fixed-batch", "run-time-batch"])
def test_a_position_table_over_a_run_time_length_matches_onnxruntime_and_torch(
        dynamo, batch, tmp_path, signer):
    dims = {1: "t", **({0: "b"} if batch else {})}
    model = export_dynamic(_Positions(), [torch.randn(2, 5, 16)], tmp_path / "p.onnx",
                           dynamo=dynamo, names=["x"], dims=[dims], bounds={"t": (2, 64)})
    ops = {n.op_type for n in onnx.load(model).graph.node}
    assert "ScatterND" in ops, ops
    sizes = [(2, 1), (2, 7), (1 if batch else 2, 33)]
    feeds = [{"x": RNG.standard_normal((b, t, 16)).astype(np.float32)} for b, t in sizes]
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer,
                                golden_dims={"t": [3, 9], **({"b": [1, 3]} if batch else {})})
    assert "scatter_elements" in {n.op for n in loaded.graph.nodes}
    for backend in BACKENDS.values():
        check_against_onnxruntime(model, loaded, feeds, backend=backend())
        executor = Executor(loaded.graph, backend())
        for feed in feeds:
            want = _Positions()(torch.from_numpy(feed["x"])).numpy()
            np.testing.assert_allclose(executor.run(dict(feed))["y"], want, rtol=1e-5,
                                       atol=1e-5)


def _graph(tmp_path, data, indices, updates, *, reduction: str = "none",
           fixed: np.ndarray | None = None, op: str = "ScatterND", **attrs):
    """One ``op`` named ``node`` of graph inputs ``data``, ``updates`` and (unless ``fixed``,
    an initializer) ``indices``, each of the shape given (ints and dim names)."""
    inputs = [helper.make_tensor_value_info("data", TP.FLOAT, list(data))]
    inits = []
    if fixed is None:
        inputs.append(helper.make_tensor_value_info("indices", TP.INT64, list(indices)))
    else:
        inits.append(onnx.numpy_helper.from_array(fixed, "indices"))
    inputs.append(helper.make_tensor_value_info("updates", TP.FLOAT, list(updates)))
    node = helper.make_node(op, ["data", "indices", "updates"], ["y"], name="node",
                            reduction=reduction, **attrs)
    graph = helper.make_graph([node], "g", inputs,
                              [helper.make_tensor_value_info("y", TP.FLOAT, list(data))],
                              initializer=inits)
    path = tmp_path / "nd.onnx"
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString())
    return path


def _size(d, sizes: dict) -> int:
    return d if type(d) is int else sizes[d]


def _feed(data, indices, updates, sizes: dict, fixed) -> dict[str, np.ndarray]:
    """Floats for data and updates; run-time indices drawn from each coordinate's whole
    range (duplicates likely)."""
    shape = [_size(d, sizes) for d in data]
    feed = {"data": RNG.standard_normal(shape).astype(np.float32),
            "updates": RNG.standard_normal([_size(d, sizes) for d in updates]
                                           ).astype(np.float32)}
    if fixed is None:
        where = [_size(d, sizes) for d in indices]
        feed["indices"] = np.stack([RNG.integers(0, shape[c], where[:-1])
                                    for c in range(where[-1])], axis=-1).astype(np.int64)
    return feed


#: name: (data, indices, updates, constant indices or None, sizes per feed, golden dims)
CASES = {
    # the legacy exporter's pe[:, 0::2] = v reduced: rows along a run-time axis 0
    "rows-of-run-time-data": (("n", 3), (2, 1), (2, 3), None, [{"n": 2}, {"n": 9}],
                              {"n": [4, 6]}),
    # the dynamo exporter's: constant rows of the transposed (d, t) table
    "constant-rows-run-time-columns": ((4, "t"), None, (2, "t"),
                                       np.array([[0], [-2]], np.int64),
                                       [{"t": 1}, {"t": 6}], {"t": [3, 5]}),
    "two-coordinates-both-run-time": (("m", "n"), (3, 2), (3,), None,
                                      [{"m": 2, "n": 3}, {"m": 5, "n": 1}],
                                      {"m": [2, 4], "n": [3, 2]}),
    "run-time-count": ((4, 5), ("k", 2), ("k",), None, [{"k": 0}, {"k": 1}, {"k": 30}],
                       {"k": [3, 7]}),
    "run-time-counts-into-run-time-data": (("n", 5, "c"), ("j", "k", 2), ("j", "k", "c"),
                                           None, [{"n": 2, "j": 3, "k": 2, "c": 4},
                                                  {"n": 6, "j": 1, "k": 5, "c": 1}],
                                           {"n": [3, 4], "j": [2, 1], "k": [3, 2],
                                            "c": [2, 3]}),
    "constant-pairs-negative-on-a-fixed-axis": (("n", 3), None, (3,),
                                                np.array([[0, -1], [1, 0], [2, 2]], np.int64),
                                                [{"n": 3}, {"n": 8}], {"n": [3, 5]}),
    # the legacy exporter's y[:, -1] = v: counted from the end of the call's size (at n = 1
    # the two rows name one element: the later update stays, as in onnxruntime)
    "constant-negative-along-a-run-time-dim": (("n", 3), None, (2, 3),
                                               np.array([[-1], [0]], np.int64),
                                               [{"n": 1}, {"n": 4}], {"n": [2, 5]}),
    "constant-pairs-negative-along-both": (("n", "m"), None, (2,),
                                           np.array([[-1, -2], [0, 1]], np.int64),
                                           [{"n": 2, "m": 2}, {"n": 5, "m": 3}],
                                           {"n": [2, 4], "m": [2, 3]}),
}


@pytest.mark.parametrize("reduction", ["none", "add", "max"])
@pytest.mark.parametrize("case", list(CASES))
def test_scatter_nd_into_run_time_data_matches_onnxruntime(case, reduction, tmp_path, signer):
    data, indices, updates, fixed, sizes, golden = CASES[case]
    model = _graph(tmp_path, data, indices, updates, reduction=reduction, fixed=fixed)
    feeds = [_feed(data, indices, updates, s, fixed) for s in sizes]
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer, golden_dims=golden)
    assert "scatter_elements" in {n.op for n in loaded.graph.nodes}
    for backend in BACKENDS.values():
        check_against_onnxruntime(model, loaded, feeds, backend=backend())


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("case, bad, message", [
    ("rows-of-run-time-data", [[0], [4]], r"outside \[0, 4\)"),
    ("rows-of-run-time-data", [[-1], [0]], r"outside \[0, 4\)"),
    ("two-coordinates-both-run-time", [[0, 0], [1, 3], [0, 1]], r"outside \[0, 3\)"),
])
def test_an_index_outside_a_run_time_dim_is_refused_when_it_arrives(case, bad, message,
                                                                   backend, tmp_path, signer):
    """Checked against the size the call gives the dim; a negative index, which ONNX counts
    from the end, is refused too. Nothing is returned."""
    data, indices, updates, fixed, _, golden = CASES[case]
    model = _graph(tmp_path, data, indices, updates)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer, golden_dims=golden)
    executor = Executor(loaded.graph, BACKENDS[backend]())
    sizes = {"n": 4, "m": 2} if case == "rows-of-run-time-data" else {"m": 2, "n": 3}
    feed = _feed(data, indices, updates, sizes, None)
    feed["indices"] = np.array(bad, np.int64)
    executor.run(dict(feed, indices=np.zeros_like(feed["indices"])))  # in range: runs
    with pytest.raises(IndexRangeError, match=message) as info:
        executor.run(feed)
    assert "node" in str(info.value)


@pytest.mark.parametrize("data, fixed, updates, reduction, error, message", [
    ((4, "t"), np.array([[1], [1]], np.int64), (2, "t"), "none", UnsupportedModelError,
     "the indices write output element(s) [1] more than once with reduction 'none'"),
    (("n", 3), np.array([[0, 3]], np.int64), (1,), "none", ModelFileError,
     "indices [3] are outside the data's dims ['n', 3]"),
    (("n", 3), np.array([[0.5]], np.float32), (1, 3), "none", ModelFileError,
     "indices must be integers"),
    (("n", 3), np.array([[0]], np.int64), (1, 2), "none", ModelFileError,
     "updates of shape [1, 2] must be of shape [1, 3]"),
    (("n", 3), np.array([[0]], np.int64), ("m", 3), "none", ModelFileError,
     "updates of shape ['m', 3] must be of shape [1, 3]"),
], ids=["twice", "outside-fixed-axis", "float-indices",
        "updates-shape", "updates-run-time-count"])
def test_what_cannot_be_mapped_is_refused_naming_the_node(data, fixed, updates, reduction,
                                                          error, message, tmp_path):
    model = _graph(tmp_path, data, None, updates, reduction=reduction, fixed=fixed)
    assert_refused(model, error, "node 'node' (ScatterND)", message)


def test_the_same_constant_element_twice_is_fine_with_a_reduction(tmp_path, signer):
    """Duplicates are refused only without a reduction, where ONNX leaves the winner
    undefined; with one the updates combine in order, as onnxruntime's kernel."""
    data, fixed, updates = (4, "t"), np.array([[1], [1], [3]], np.int64), (3, "t")
    model = _graph(tmp_path, data, None, updates, reduction="add", fixed=fixed)
    feeds = [_feed(data, None, updates, {"t": t}, fixed) for t in (1, 5)]
    _check(model, tmp_path, signer, feeds, {"scatter_elements"})


#: name: (data, constant indices, axis, sizes per feed, golden dims)
ELEMENT_CASES = {
    "last-along-a-run-time-axis": ((2, "t", 3), np.full((2, 1, 3), -1, np.int64), 1,
                                   [{"t": 1}, {"t": 6}], {"t": [3, 5]}),
    "steps-along-a-run-time-axis": ((2, "t", 3), np.array([[[0, -1, 2]], [[-2, 1, 0]]],
                                                          np.int64), 1,
                                    [{"t": 3}, {"t": 5}], {"t": [3, 4]}),
    "mixed-signs-along-a-run-time-axis": (("t", 2), np.array([[0, -1], [-2, 1]], np.int64), 0,
                                          [{"t": 2}, {"t": 9}], {"t": [3, 4]}),
}


@pytest.mark.parametrize("reduction", ["none", "mul"])
@pytest.mark.parametrize("case", list(ELEMENT_CASES))
def test_scatter_elements_of_constant_indices_into_run_time_data_match_onnxruntime(
        case, reduction, tmp_path, signer):
    data, fixed, axis, sizes, golden = ELEMENT_CASES[case]
    model = _graph(tmp_path, data, None, fixed.shape, reduction=reduction, fixed=fixed,
                   op="ScatterElements", axis=axis)
    feeds = [_feed(data, None, fixed.shape, s, fixed) for s in sizes]
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer, golden_dims=golden)
    assert "scatter_elements" in {n.op for n in loaded.graph.nodes}
    for backend in BACKENDS.values():
        check_against_onnxruntime(model, loaded, feeds, backend=backend())


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("t, message", [(2, r"outside \[0, 2\): \(0, 0, 2\)=2"),
                                        (1, r"outside \[0, 1\): \(0, 0, 2\)=2, \(1, 0, 0\)=-1")])
def test_a_constant_index_past_a_run_time_dim_is_refused_when_it_arrives(t, message, backend,
                                                                        tmp_path, signer):
    """Index 2 along a run-time length of 2; at 1, -2 counted from the end is -1 too."""
    data, fixed, axis, _, golden = ELEMENT_CASES["steps-along-a-run-time-axis"]
    model = _graph(tmp_path, data, None, fixed.shape, fixed=fixed, op="ScatterElements",
                   axis=axis)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer, golden_dims=golden)
    feed = _feed(data, None, fixed.shape, {"t": t}, fixed)
    with pytest.raises(IndexRangeError, match=message) as info:
        Executor(loaded.graph, BACKENDS[backend]()).run(feed)
    assert "node" in str(info.value)


class _SetLast(torch.nn.Module):
    """``y[:, -1] = v``: a ScatterND at -1 (legacy) or a ScatterElements at -1 spread to v's
    shape (dynamo) along the run-time length, the batch fixed."""

    def forward(self, x, v):
        y = x.clone()
        y[:, -1] = v
        return y


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_the_last_step_written_under_a_run_time_length_matches_onnxruntime_and_torch(
        dynamo, tmp_path, signer):
    model = export_dynamic(_SetLast(), [torch.randn(2, 5, 3), torch.randn(2, 3)],
                           tmp_path / "s.onnx", dynamo=dynamo, names=["x", "v"],
                           dims=[{1: "t"}, {}], bounds={"t": (2, 64)})
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer, golden_dims={"t": [3, 9]})
    feeds = [{"x": RNG.standard_normal((2, t, 3)).astype(np.float32),
              "v": RNG.standard_normal((2, 3)).astype(np.float32)} for t in (1, 4, 20)]
    for backend in BACKENDS.values():
        runs = check_against_onnxruntime(model, loaded, feeds, backend=backend())
        for feed, (got, _) in zip(feeds, runs):
            want = _SetLast()(*(torch.from_numpy(feed[k]) for k in ("x", "v"))).numpy()
            np.testing.assert_array_equal(got["y"], want)


@pytest.mark.parametrize("data, fixed, updates, axis, error, message", [
    (("n", 4), np.array([[1, 1], [1, -3]], np.int64), (2, 2), 1, UnsupportedModelError,
     "the indices write output element(s) [0, 1], [1, 1] more than once with reduction "
     "'none'"),
    (("n", 4), np.array([[4]], np.int64), (1, 1), 1, ModelFileError,
     "indices [4] are outside [-4, 4) (axis 1 of shape ['n', 4])"),
    (("n", 4), np.array([[0]], np.int64), (1, 2), 0, ModelFileError,
     "indices of shape [1, 1] and updates of shape [1, 2] must be of one shape"),
    (("n", 4), np.array([0], np.int64), (1,), 0, ModelFileError,
     "of the data's rank 2"),
    # indices of a fixed extent off the axis, where the data's dim is a run-time one
    (("n", 4), np.array([[3, -4], [1, 2]], np.int64), (2, 2), 1, UnsupportedModelError,
     "indices shape (2, 2) exceeds x shape (n, 4) on axis 0"),
], ids=["twice", "outside", "updates-shape", "rank", "fixed-extent-off-a-run-time-axis"])
def test_scatter_elements_refusals_name_the_node(data, fixed, updates, axis, error, message,
                                                 tmp_path):
    model = _graph(tmp_path, data, None, updates, fixed=fixed, op="ScatterElements", axis=axis)
    assert_refused(model, error, "node 'node' (ScatterElements)", message)
