"""Gather and GatherND at run-time indices whose shape holds run-time dims, of any rank: the
dynamo exporter's ``x.unfold(1, 4, 2)`` (audio framed by a hop over a run-time length) and both
exporters' ``F.unfold`` (im2col over a run-time height) gather at window positions of shape
``(windows, size)``. The indices are flattened, gathered along the axis and the axis
unflattened back into their dims, read from the indices when the call runs. Compared with
onnxruntime on both backends and with torch; an index out of range is an IndexRangeError when
it arrives."""

from __future__ import annotations

import numpy as np
import pytest

from abi.errors import IndexRangeError
from plugin_host.executor import Executor

from .conftest import (check_against_onnxruntime, check_against_onnxruntime_and_torch,
                       export_dynamic, import_and_load, onnx, torch)
from .test_scatter_runtime import BACKENDS

helper, TP = onnx.helper, onnx.TensorProto
RNG = np.random.default_rng(59)
F = torch.nn.functional


class _Frames(torch.nn.Module):
    """Frames of 4 steps by a hop of 2, each summed and weighted."""

    def forward(self, x):
        return (x.unfold(1, 4, 2) * torch.arange(1.0, 5.0)).sum(-1)


class _Im2col(torch.nn.Module):
    def forward(self, x):
        return F.unfold(x.unsqueeze(1), 3, padding=1).sum(1)


#: name: (module, exporters it exports under a run-time length, input width)
MODULES = {"frames": (_Frames, [True], 16), "im2col": (_Im2col, [False, True], 8)}


@pytest.mark.parametrize("case, dynamo", [(c, d) for c, (_, ds, _) in MODULES.items()
                                          for d in ds])
@pytest.mark.parametrize("batch", [False, True], ids=["fixed-batch", "run-time-batch"])
def test_windows_over_a_run_time_length_match_onnxruntime_and_torch(case, dynamo, batch,
                                                                    tmp_path, signer):
    module, _, width = MODULES[case]
    dims = {1: "t", **({0: "b"} if batch else {})}
    model = export_dynamic(module(), [torch.randn(2, 9, width)], tmp_path / "w.onnx",
                           dynamo=dynamo, names=["x"], dims=[dims],
                           bounds={"t": (4, 64), "b": (2, 8)})
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer,
                                golden_dims={"t": [5, 12], **({"b": [1, 3]} if batch else {})})
    sizes = [(2, 4), (2, 5), (3 if batch else 2, 31)]
    feeds = [{"x": RNG.standard_normal((b, t, width)).astype(np.float32)} for b, t in sizes]
    check_against_onnxruntime_and_torch(model, loaded, feeds, module(), 1e-5)


def _gather(tmp_path, data: list, indices: list, axis: int | None) -> onnx.ModelProto:
    """One Gather named ``node`` of graph inputs ``x`` and ``i`` (int64) along ``axis``; with
    ``axis`` None, a GatherND."""
    if axis is None:
        out = indices[:-1] + data[indices[-1]:]
        node = helper.make_node("GatherND", ["x", "i"], ["y"], name="node")
    else:
        out = data[:axis] + indices + data[axis + 1:]
        node = helper.make_node("Gather", ["x", "i"], ["y"], name="node", axis=axis)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("x", TP.FLOAT, data),
         helper.make_tensor_value_info("i", TP.INT64, indices)],
        [helper.make_tensor_value_info("y", TP.FLOAT, out)])
    path = tmp_path / "g.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


def _size(d, sizes: dict) -> int:
    return d if type(d) is int else sizes[d]


#: name: (data, indices, axis, sizes per feed, golden dims)
CASES = {
    "two-run-time-counts": ([2, "t", 3], ["m", "n"], 1,
                            [{"t": 4, "m": 2, "n": 3}, {"t": 1, "m": 1, "n": 1},
                             {"t": 6, "m": 0, "n": 2}], {"t": [3, 5], "m": [2, 1], "n": [2, 3]}),
    "a-run-time-count-and-a-fixed-one": ([2, "t", 3], ["m", 2], 1,
                                         [{"t": 4, "m": 3}, {"t": 9, "m": 1}],
                                         {"t": [3, 5], "m": [2, 4]}),
    "rank-three-along-the-last-axis": (["b", 5], [2, "m", "n"], 1,
                                       [{"b": 1, "m": 2, "n": 2}, {"b": 3, "m": 1, "n": 4}],
                                       {"b": [2, 1], "m": [1, 3], "n": [2, 1]}),
    # one run-time count along a fixed axis (its count kept, not the axis' dim)
    "a-run-time-count-along-a-fixed-axis": (["b", 5], ["m"], 1,
                                            [{"b": 2, "m": 3}, {"b": 1, "m": 7},
                                             {"b": 3, "m": 5}], {"b": [2, 1], "m": [1, 3]}),
    # static indices of rank 2 into data with two run-time dims off the axis
    "fixed-indices-two-run-time-dims-off-the-axis": (["b", 4, "c"], [3, 2], 1,
                                                     [{"b": 1, "c": 2}, {"b": 3, "c": 5}],
                                                     {"b": [2, 1], "c": [1, 3]}),
    "fixed-indices-along-a-run-time-axis-between-two": (["b", "n", "c"], [2, 2], 1,
                                                        [{"b": 1, "n": 1, "c": 2},
                                                         {"b": 2, "n": 6, "c": 3}],
                                                        {"b": [2, 1], "n": [2, 3],
                                                         "c": [1, 3]}),
    # GatherND (axis None) of several run-time counts: the dynamo exporter's
    # mask.t()[k, b] by broadcast aranges (test_symbolic.py)
    "gather-nd-two-run-time-counts": ([4, 5], ["m", "n", 2], None,
                                      [{"m": 2, "n": 3}, {"m": 0, "n": 1}, {"m": 5, "n": 4}],
                                      {"m": [1, 2], "n": [2, 1]}),
    "gather-nd-one-coordinate": (["t", 3], ["m", "n", 1], None,
                                 [{"t": 2, "m": 2, "n": 3}, {"t": 6, "m": 1, "n": 1}],
                                 {"t": [2, 3], "m": [1, 2], "n": [2, 1]}),
}


def _feed(data, indices, axis: int | None, sizes: dict) -> dict[str, np.ndarray]:
    """Indices drawn from their axis' whole range (GatherND's: each coordinate's)."""
    shape, where = [_size(d, sizes) for d in data], [_size(d, sizes) for d in indices]
    if axis is None:
        i = np.stack([RNG.integers(0, shape[c], where[:-1]) for c in range(where[-1])], -1)
    else:
        i = RNG.integers(0, shape[axis], where)
    return {"x": RNG.standard_normal(shape).astype(np.float32), "i": i.astype(np.int64)}


@pytest.mark.parametrize("case", list(CASES))
def test_gather_at_indices_of_run_time_shape_matches_onnxruntime(case, tmp_path, signer):
    data, indices, axis, sizes, golden = CASES[case]
    model = _gather(tmp_path, data, indices, axis)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer, golden_dims=golden,
                                golden_ranges={"i": (0, 1)})
    feeds = [_feed(data, indices, axis, s) for s in sizes]
    for backend in BACKENDS.values():
        check_against_onnxruntime(model, loaded, feeds, backend=backend())


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("bad, message", [(4, r"outside \[0, 4\): \(0, 5, 0\)=4"),
                                          (-5, r"outside \[0, 4\): \(0, 5, 0\)=-1")])
def test_an_index_out_of_range_is_refused_when_it_arrives(bad, message, backend, tmp_path,
                                                          signer):
    """An index outside [-4, 4) (a negative one counts from the end, as ONNX counts it, and
    is named so: -5 as -1); nothing is returned."""
    data, indices, axis, _, golden = CASES["two-run-time-counts"]
    model = _gather(tmp_path, data, indices, axis)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer, golden_dims=golden,
                                golden_ranges={"i": (0, 1)})
    executor = Executor(loaded.graph, BACKENDS[backend]())
    feed = _feed(data, indices, axis, {"t": 4, "m": 2, "n": 3})
    executor.run(dict(feed))  # in range: runs
    feed["i"][1, 2] = bad
    with pytest.raises(IndexRangeError, match=message) as info:
        executor.run(feed)
    assert "node" in str(info.value)
