"""Slice bounds as ONNX clamps them, on fixed and run-time dims.

tf2onnx writes "to the end" of a Slice as INT32_MAX (INT32_MIN going backwards), where torch
writes INT64_MAX. Along a run-time dim both are read as to the end: the two clamp alike on every
dim up to INT32_MAX. So a run-time batch sliced whole keeps its name, and a Keras model's
bidirectional RNN under a run-time batch no longer turns the batch into an expression of
itself.

A negative step from a start before the dim's first position starts at position 0 in ONNX
(``x[-5::-1]`` of 3 rows takes row 0), where Python's slicing takes nothing."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import UnsupportedModelError
from plugin_host.onnx_import import import_onnx

from .conftest import (check_against_onnxruntime_and_torch, check_on_both_backends,
                       export_dynamic, import_and_load, onnx, torch)

helper, TP = onnx.helper, onnx.TensorProto

INT32_MAX, INT32_MIN = 2 ** 31 - 1, -2 ** 31


def _slice_model(path, starts, ends, steps, *, then_add: bool = False, rows="n"):
    """x (``rows``, 4) sliced along axis 0; with ``then_add`` the slice plus x, which needs
    the slice to keep x's dim."""
    consts = [onnx.numpy_helper.from_array(np.array([v], np.int64), name)
              for name, v in (("starts", starts), ("ends", ends), ("axes", 0), ("steps", steps))]
    nodes = [helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"],
                              ["s" if then_add else "y"], name="slice")]
    if then_add:
        nodes.append(helper.make_node("Add", ["s", "x"], ["y"], name="add"))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT,
                                                                         [rows, 4])],
                              [helper.make_tensor_value_info("y", TP.FLOAT, ["m", 4])],
                              initializer=consts)
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    return path


def _feeds():
    rng = np.random.default_rng(7)
    return [{"x": rng.standard_normal((n, 4)).astype(np.float32)} for n in (1, 2, 5, 9)]


@pytest.mark.parametrize("end", [INT32_MAX, INT32_MAX + 1, 2 ** 63 - 1],
                         ids=["int32_max", "past_int32", "int64_max"])
def test_a_run_time_dim_sliced_whole_keeps_its_name(end, tmp_path, signer):
    """x[0:INT32_MAX] + x: the sum is of x's shape, ("n", 4), with no Slice left."""
    model = _slice_model(tmp_path / "m.onnx", 0, end, 1, then_add=True)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert loaded.graph.outputs[0].shape == ("n", 4)
    assert [n.op for n in loaded.graph.nodes] == ["add"]
    check_on_both_backends(model, loaded, _feeds())


#: (starts, ends, steps) along the run-time axis, each as tf2onnx or an exporter writes it
BOUNDS = {
    "from_one": (1, INT32_MAX, 1),
    "every_other": (1, INT32_MAX, 2),
    "reversed": (INT32_MAX, INT32_MIN, -1),
    "reversed_from_last": (-1, INT32_MIN, -1),
    "reversed_by_two": (INT32_MAX, INT32_MIN, -2),
    "from_just_above_int32_min": (-INT32_MAX, INT32_MAX, 1),
    "back_to_just_above_int32_min": (-2, -INT32_MAX, -1),
    "reversed_from_before_the_first": (-5, INT32_MIN, -1),
    "back_from_before_the_first": (-4, -2 ** 63, -2),
}


@pytest.mark.parametrize("bounds", list(BOUNDS.values()), ids=list(BOUNDS))
def test_int32_bounds_along_a_run_time_dim_match_onnxruntime(bounds, tmp_path, signer):
    """Forwards and backwards, INT32_MAX and INT32_MIN are the ends of every length the
    call gives; a bound just inside them is kept as given and clamps as onnxruntime's."""
    model = _slice_model(tmp_path / "m.onnx", *bounds)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    check_on_both_backends(model, loaded, _feeds())


def test_a_reversal_to_int32_min_gives_the_same_graph_as_to_int64_min(tmp_path, signer):
    """x[INT32_MAX:INT32_MIN:-1] imports as x[INT64_MAX:INT64_MIN:-1] does."""
    graphs = []
    for k, (start, end) in enumerate(((INT32_MAX, INT32_MIN), (2 ** 63 - 1, -2 ** 63))):
        model = _slice_model(tmp_path / f"m{k}.onnx", start, end, -1)
        _, loaded = import_and_load(model, tmp_path / f"m{k}.pha", signer)
        graphs.append([(n.op, n.attrs) for n in loaded.graph.nodes])
    assert graphs[0] == graphs[1]


@pytest.mark.parametrize("start, end, step", [(-5, -2 ** 63, -1), (-4, -2 ** 63, -2),
                                              (-9, -9, -1), (-9, 1, -1), (-1, -9, -1)])
@pytest.mark.parametrize("rows", [1, 3])
def test_a_backward_slice_of_a_fixed_dim_clamps_as_onnxruntime(start, end, step, rows,
                                                              tmp_path, signer):
    """On a fixed dim too: x[-5::-1] of 3 rows is row 0, as onnxruntime gives it."""
    model = _slice_model(tmp_path / "m.onnx", start, end, step, rows=rows)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    feed = {"x": np.arange(rows * 4, dtype=np.float32).reshape(rows, 4)}
    check_on_both_backends(model, loaded, [feed])


@pytest.mark.parametrize("end", [INT32_MAX, 2 ** 63 - 1], ids=["int32_max", "int64_max"])
@pytest.mark.parametrize("rows", [3, "n"], ids=["fixed", "run_time"])
def test_an_end_of_int_max_by_a_negative_step_is_refused_naming_the_node(end, rows,
                                                                          tmp_path):
    """onnxruntime runs x[3:INT64_MAX:-1] to the first position, ONNX's Slice takes nothing:
    refused, naming the node and the end to write instead."""
    model = _slice_model(tmp_path / "m.onnx", 3, end, -1, rows=rows)
    with pytest.raises(UnsupportedModelError, match=rf"'slice' \(Slice\): ends \[{end}\] with "
                                                    r"steps \[-1\]: .* runs to the dim's first "
                                                    r"position in onnxruntime.* write "
                                                    r"-9223372036854775808 \(INT64_MIN\)"):
        import_onnx(model)


def _shifted_model(path, first: tuple[int, int], second: tuple[int, int]):
    """y = x[first] + x[second] along axis 0 of x (n, 4), each a (start, end) by step 1."""
    consts, nodes = [], []
    for k, (start, end) in enumerate((first, second)):
        consts += [onnx.numpy_helper.from_array(np.array([v], np.int64), f"{name}{k}")
                   for name, v in (("starts", start), ("ends", end), ("axes", 0))]
        nodes.append(helper.make_node("Slice", ["x", f"starts{k}", f"ends{k}", f"axes{k}"],
                                      [f"s{k}"], name=f"slice{k}"))
    nodes.append(helper.make_node("Add", ["s0", "s1"], ["y"], name="add"))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT,
                                                                         ["n", 4])],
                              [helper.make_tensor_value_info("y", TP.FLOAT, ["m", 4])],
                              initializer=consts)
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    return path


@pytest.mark.parametrize("first, second, length", [
    ((1, 2 ** 63 - 1), (0, -1), "n-1"), ((0, -2), (2, INT32_MAX), "n-2"),
    ((1, -1), (2, 2 ** 63 - 1), "n-2"), ((3, -2), (0, -5), "n-5")],
    ids=["next-less-this", "two-apart", "inner-and-tail", "both-cut"])
def test_a_slice_to_an_end_counted_from_the_end_is_its_length(first, second, length,
                                                               tmp_path, signer):
    """x[1:] + x[:-1], a step's difference and the like: a slice to an end counted from the
    end is the dim less both cuts, so the two operands' lengths are one dim (the sum's) and
    an op that needs them equal takes them; at lengths where the slices are empty too."""
    model = _shifted_model(tmp_path / "m.onnx", first, second)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    types = loaded.graph.check()
    add = next(n for n in loaded.graph.nodes if n.op == "add")
    assert [types[t].shape for t in add.inputs] == [(length, 4)] * 2
    rng = np.random.default_rng(11)
    feeds = [{"x": rng.standard_normal((n, 4)).astype(np.float32)} for n in (1, 5, 6, 9, 30)]
    check_on_both_backends(model, loaded, feeds)


class _TopP(torch.nn.Module):
    """Nucleus (top-p) filtering of logits, as text generation writes it: the sorted
    probabilities' running sum, the tokens past p removed, each shifted one place so the
    first token past p stays (``removed[..., 1:] = removed[..., :-1]``: a ScatterND of the
    slice to the last but one into the slice from the second)."""

    def forward(self, logits):
        ordered, order = logits.sort(-1, descending=True)
        removed = ordered.softmax(-1).cumsum(-1) > 0.9
        removed[..., 1:] = removed[..., :-1].clone()
        removed[..., 0] = False
        return logits.masked_fill(removed.scatter(-1, order, removed), float("-inf"))


def test_top_p_filtering_over_a_run_time_vocabulary_matches_onnxruntime_and_torch(
        tmp_path, signer):
    model = export_dynamic(_TopP(), [torch.randn(2, 10)], tmp_path / "m.onnx", dynamo=True,
                           names=["x"], dims=[{0: "b", 1: "t"}])
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer,
                                golden_dims={"b": [2, 3], "t": [4, 12]})
    rng = np.random.default_rng(12)
    feeds = [{"x": (3 * rng.standard_normal(shape)).astype(np.float32)}
             for shape in ((1, 1), (2, 2), (3, 7), (2, 40))]
    check_against_onnxruntime_and_torch(model, loaded, feeds, _TopP(), 0)
