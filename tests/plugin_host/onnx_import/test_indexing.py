"""torch's indexing and broadcasting idioms on run-time values (``x[:, 0]``, ``x[:, -1]``,
``x[:, [0, 2]]``, ``expand``, ``repeat``, MultiheadAttention's q/k/v selection) import as the
gather, expand and tile ops from both exporters and match onnxruntime, and so do run-time
indices of a run-time count (a sequence's last valid step under a run-time batch); what they
cannot map (indices of a run-time shape of rank 2, a constant index out of range) is refused
naming the node."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from abi.errors import IndexRangeError
from plugin_host.errors import ModelFileError, UnsupportedModelError
from plugin_host.onnx_import import import_onnx

from .conftest import (EXPORTERS, Fn, check_against_onnxruntime, check_on_both_backends, export,
                       export_dynamic, import_and_load, onnx, torch)

helper, TP = onnx.helper, onnx.TensorProto

#: float32 extremes and specials, copied through gather/expand/tile as they are
EXTREMES = np.array([np.finfo(np.float32).max, np.finfo(np.float32).min, np.inf, -np.inf,
                     np.nan, np.finfo(np.float32).tiny, -0.0, 1e-45], np.float32)


#: id -> (function of x, x's shape, the ops the import must give)
IDIOMS = {
    "select_0": (lambda x: x[:, 0], (3, 4, 5), {"gather"}),
    "select_last": (lambda x: x[:, -1], (3, 4, 5), {"gather"}),
    "select_list": (lambda x: x[:, [0, 2]], (3, 4, 5), {"gather"}),
    # the dynamo exporter: GatherND of two coordinates per index
    "select_pairs": (lambda x: x[[0, 2, -1], [1, -4, 0]], (3, 4, 5), {"gather"}),
    "slice_then_select": (lambda x: x[..., 1:3][:, 0], (3, 4, 5), {"slice", "gather"}),
    "expand": (lambda x: x.expand(2, 3, 4, 5), (3, 1, 5), {"expand"}),
    "repeat": (lambda x: x.repeat(1, 2, 3), (3, 4, 5), {"tile"}),
}


def _feeds(shape, seed):
    rng = np.random.default_rng(seed)
    plain = [(rng.standard_normal(shape) * s).astype(np.float32) for s in (1, 1e4)]
    specials = np.resize(EXTREMES, shape).astype(np.float32)
    return [{"x": x} for x in (*plain, specials)]


#: idioms only the dynamo exporter writes: the legacy one refuses an adaptive pooling size
#: that does not divide the input; the dynamo one picks its windows by a GatherND of two
#: coordinates, computed (without the optimizer) by Range, Floor, Sign, ... on constants
DYNAMO_IDIOMS = {
    "adaptive_pool": (lambda x: torch.nn.functional.adaptive_avg_pool2d(x, (5, 3)),
                      (2, 3, 16, 7), {"gather", "mean"}),
}


@pytest.mark.parametrize("idiom, dynamo, fold, optimize", [
    *(pytest.param(idiom, *p.values, id=f"{idiom}-{p.id}")
      for idiom in sorted(IDIOMS) for p in EXPORTERS),
    *(pytest.param(idiom, *p.values, id=f"{idiom}-{p.id}")
      for idiom in sorted(DYNAMO_IDIOMS) for p in EXPORTERS if p.values[0])])
def test_indexing_idioms_match_onnxruntime(idiom, dynamo, fold, optimize, tmp_path, signer):
    fn, shape, ops = {**IDIOMS, **DYNAMO_IDIOMS}[idiom]
    model = export(Fn(fn), [torch.randn(*shape)], tmp_path / "m.onnx", dynamo=dynamo,
                   fold=fold, optimize=optimize, input_names=["x"], output_names=["y"])
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    got = {n.op for n in loaded.graph.nodes}
    assert ops <= got, got
    for node in loaded.graph.nodes:
        if node.op == "gather":  # a negative index (x[:, -1]) is stored counted from the end
            assert (loaded.graph.tensors[node.inputs[1]] >= 0).all()
    check_against_onnxruntime(model, loaded, _feeds(shape, 7))


@pytest.mark.parametrize("dynamo, optimize", [(True, True), (True, False)],
                         ids=["dynamo", "dynamo-noopt"])
def test_multihead_attention_batch_first_matches_onnxruntime(dynamo, optimize, tmp_path,
                                                             signer):
    torch.manual_seed(0)
    attention = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    module = Fn(lambda x: attention(x, x, x, need_weights=False)[0])
    module.attention = attention  # a submodule, so that eval() reaches it
    model = export(module, [torch.randn(2, 5, 8)], tmp_path / "mha.onnx", dynamo=dynamo,
                   fold=optimize, optimize=optimize, input_names=["x"], output_names=["y"])
    _, loaded = import_and_load(model, tmp_path / "mha.pha", signer)
    assert [n.op for n in loaded.graph.nodes].count("gather") == 3  # q, k, v
    rng = np.random.default_rng(2)
    check_against_onnxruntime(model, loaded, [
        {"x": (rng.standard_normal((2, 5, 8)) * s).astype(np.float32)} for s in (1, 30)])


def test_a_symbolic_batch_dim_passes_through_gather(tmp_path, signer):
    module = Fn(lambda x: x[:, 0] + x[:, [1, 3]].sum(dim=1))
    path = tmp_path / "b.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), (torch.randn(2, 4, 5),), str(path), dynamo=False,
                          input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    _, loaded = import_and_load(path, tmp_path / "b.pha", signer)
    assert loaded.graph.outputs[0].shape == ("batch", 5)
    rng = np.random.default_rng(4)
    check_against_onnxruntime(path, loaded, [
        {"x": rng.standard_normal((n, 4, 5)).astype(np.float32)} for n in (1, 6)])


# --- refusals, built with onnx.helper ----------------------------------------------------------


def _model(tmp_path, nodes, inputs, out_shape, inits=(), out_elem=TP.FLOAT):
    graph = helper.make_graph(nodes, "g", inputs,
                              [helper.make_tensor_value_info("y", out_elem, list(out_shape))],
                              list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def _x(shape=(2, 4)):
    return helper.make_tensor_value_info("x", TP.FLOAT, list(shape))


def _ints(name, values, dims=None):
    values = list(np.ravel(values))
    return helper.make_tensor(name, TP.INT64, [len(values)] if dims is None else dims, values)


def _both_backends(graph):
    from plugin_host.executor import Executor
    from plugins.numpy_backend import NumpyBackend
    from plugins.onnxruntime_backend import OnnxruntimeBackend

    return [Executor(graph, NumpyBackend()), Executor(graph, OnnxruntimeBackend())]


def test_a_run_time_count_of_run_time_indices_matches_onnxruntime(tmp_path, signer):
    """Gather of indices (k,), k a run-time dim, along the run-time axis n of x (2, n): as
    onnxruntime at several k and n on both backends, negative indices counted from the end
    of the size the call gives n; one outside [-n, n) is an IndexRangeError naming the node on
    both."""
    idx = helper.make_tensor_value_info("i", TP.INT64, ["k"])
    path = _model(tmp_path, [helper.make_node("Gather", ["x", "i"], ["y"], name="pick", axis=1)],
                  [_x((2, "n")), idx], (2, "k"))
    _, loaded = import_and_load(path, tmp_path / "m.pha", signer,
                                golden_dims={"n": (3, 6), "k": (1, 4)})
    rng = np.random.default_rng(8)
    feeds = [{"x": rng.standard_normal((2, n)).astype(np.float32),
              "i": rng.integers(-n, n, k)} for n, k in ((1, 1), (5, 3), (9, 12), (4, 0))]
    check_on_both_backends(path, loaded, feeds)
    for executor in _both_backends(loaded.graph):
        for bad in ([0, 5], [-6]):
            with pytest.raises(IndexRangeError, match=r"node 'pick.*outside \[0, 5\)"):
                executor.run({"x": np.ones((2, 5), np.float32), "i": np.array(bad)})


def test_gather_nd_of_two_run_time_coordinates_over_run_time_dims_matches_onnxruntime(
        tmp_path, signer):
    """GatherND of (k, 2) coordinates into x (b, t, 3), k, b and t run-time: each index's
    flat position, its stride t computed when the call runs, as onnxruntime on both
    backends; a coordinate past its dim is an IndexRangeError, not another element."""
    x = helper.make_tensor_value_info("x", TP.FLOAT, ["b", "t", 3])
    idx = helper.make_tensor_value_info("i", TP.INT64, ["k", 2])
    path = _model(tmp_path, [helper.make_node("GatherND", ["x", "i"], ["y"], name="nd")],
                  [x, idx], ("k", 3))
    _, loaded = import_and_load(path, tmp_path / "m.pha", signer,
                                golden_dims={"b": (2, 3), "t": (4, 2)})
    rng = np.random.default_rng(9)
    feeds = [{"x": rng.standard_normal((b, t, 3)).astype(np.float32),
              "i": np.stack([rng.integers(0, b, k), rng.integers(0, t, k)], 1)}
             for b, t, k in ((1, 1, 1), (3, 5, 4), (4, 2, 7))]
    check_on_both_backends(path, loaded, feeds)
    for executor in _both_backends(loaded.graph):
        with pytest.raises(IndexRangeError, match=r"node 'nd.*outside \[0, 5\)"):
            executor.run({"x": np.ones((2, 5, 3), np.float32), "i": np.array([[0, 5]])})


class _LastValidStep(torch.nn.Module):
    """A GRU's output at each sequence's last valid step, ``y[arange(b), lengths - 1]``."""

    def __init__(self):
        super().__init__()
        self.gru = torch.nn.GRU(3, 4, batch_first=True)

    def forward(self, x, lengths):
        y, _ = self.gru(x)
        return y[torch.arange(y.shape[0]), lengths - 1]


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_the_last_valid_step_of_each_sequence_under_a_run_time_batch_and_length(
        dynamo, tmp_path, signer):
    """Both exporters (legacy: a Gather at b * t + lengths - 1 from the flattened output;
    dynamo: a GatherND of (b, 2) coordinates) with the batch and the length run-time dims:
    as onnxruntime on both backends and as torch, at three sizes; a length of 0 reads index
    -1, counted from the end as onnxruntime counts it; a length past the sequence is an
    IndexRangeError on both."""
    torch.manual_seed(0)
    module = _LastValidStep().eval()
    args = [torch.randn(2, 5, 3), torch.tensor([5, 2])]
    path = export_dynamic(module, args, tmp_path / "m.onnx", dynamo=dynamo,
                          names=["x", "lengths"], dims=[{0: "b", 1: "t"}, {0: "b"}])
    _, loaded = import_and_load(path, tmp_path / "m.pha", signer,
                                golden_dims={"b": (2, 3), "t": (4, 6)},
                                golden_ranges={"lengths": (1, 5)})
    rng = np.random.default_rng(10)
    feeds = [{"x": rng.standard_normal((b, t, 3)).astype(np.float32),
              "lengths": rng.integers(1, t + 1, b)} for b, t in ((1, 2), (3, 7), (5, 4))]
    check_on_both_backends(path, loaded, feeds + [
        {"x": rng.standard_normal((2, 4, 3)).astype(np.float32), "lengths": np.array([0, 3])}])
    for feed in feeds:
        got = _both_backends(loaded.graph)[0].run(dict(feed))["y"]
        with torch.no_grad():
            want = module(torch.from_numpy(feed["x"]), torch.from_numpy(feed["lengths"]))
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-6)
    for executor in _both_backends(loaded.graph):
        with pytest.raises(IndexRangeError):
            executor.run({"x": np.ones((2, 4, 3), np.float32), "lengths": np.array([4, 5])})


def test_gather_into_a_constant_with_run_time_indices_is_an_embedding_on_axis_0(tmp_path):
    """A constant 2-D float table on axis 0 stays an Embedding; on axis 1 it is a
    gather_elements (its indices counted from the end where negative, then checked as they
    arrive)."""
    idx = helper.make_tensor_value_info("x", TP.INT64, [3])
    table = helper.make_tensor("t", TP.FLOAT, [4, 5], np.arange(20, dtype=np.float32))
    emb = _model(tmp_path, [helper.make_node("Gather", ["t", "x"], ["y"], name="emb")], [idx],
                 (3, 5), [table])
    assert [n.op for n in import_onnx(emb).graph.nodes] == ["embedding"]
    path = _model(tmp_path, [helper.make_node("Gather", ["t", "x"], ["y"], name="cols",
                                              axis=1)], [idx], (4, 3), [table])
    assert [n.op for n in import_onnx(path).graph.nodes] == ["less", "add", "where",
                                                             "reshape", "expand",
                                                             "gather_elements"]


@pytest.mark.parametrize("indices, dims", [([0, 4], None), (-5, []), ([[1], [9]], [2, 1])])
def test_gather_with_a_constant_index_out_of_range_is_refused(tmp_path, indices, dims):
    path = _model(tmp_path, [helper.make_node("Gather", ["x", "i"], ["y"], name="pick", axis=1)],
                  [_x()], (2, *np.shape(indices)), [_ints("i", indices, dims)])
    with pytest.raises(ModelFileError, match=r"node 'pick' \(Gather\): indices \[-?\d\] are "
                                             r"outside \[-4, 4\) \(axis 1 of 'x'"):
        import_onnx(path)


def test_gather_on_a_symbolic_axis_is_checked_when_the_call_runs(tmp_path):
    """The index cannot be checked against n at import: it is when the call gives n a size
    (test_run_time_axis.py has the torch idioms)."""
    from plugin_host.executor import Executor
    from plugins.numpy_backend import NumpyBackend

    path = _model(tmp_path, [helper.make_node("Gather", ["x", "i"], ["y"], name="pick")],
                  [_x(("n", 4))], (4,), [_ints("i", 0, [])])
    executor = Executor(import_onnx(path).graph, NumpyBackend())
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(executor.run({"x": x})["y"], x[0])
    with pytest.raises(IndexRangeError, match=r"node 'pick.*outside \[0, 0\)"):
        executor.run({"x": x[:0]})


def test_gather_nd_of_several_coordinates_matches_onnxruntime(tmp_path, signer):
    """Constant indices of 2 and of 3 (every axis: single elements) coordinates, negative
    ones among them, into a (3, 4, 5) tensor, on both backends."""
    x = helper.make_tensor_value_info("x", TP.FLOAT, [3, 4, 5])
    for k, indices, out in ((2, [[[0, 1], [2, -1]], [[-3, 0], [1, 3]]], (2, 2, 5)),
                            (3, [[2, 3, 4], [-1, -4, -5], [0, 2, 1]], (3,))):
        path = _model(tmp_path, [helper.make_node("GatherND", ["x", "i"], ["y"], name="nd")],
                      [x], out, [_ints("i", indices, list(np.shape(indices)))])
        _, loaded = import_and_load(path, tmp_path / f"nd{k}.pha", signer)
        assert [n.op for n in loaded.graph.nodes] == ["reshape", "gather"]
        check_on_both_backends(path, loaded, _feeds((3, 4, 5), k))


@pytest.mark.parametrize("indices, dims, attrs, message", [
    ([0, 1, 1, 0], [1, 4], {}, r"indices of 4 coordinates into 'x' of rank 2"),
    ([0, 1], [2, 1], {"batch_dims": 2}, r"attribute batch_dims=2 must be in \[0, 2\)"),
    ([0, 5], [2, 1], {}, r"indices \[5\] are outside \[-2, 2\)"),
    ([0, 1, 2, 0], [2, 2], {}, r"index \[2, 0\] is outside shape \[2, 4\] of 'x' "
                               r"\(coordinate 0: 2\)"),
    ([1, -5], [1, 2], {}, r"index \[1, -5\] is outside shape \[2, 4\] of 'x' "
                          r"\(coordinate 1: -5\)"),
])
def test_gather_nd_it_cannot_map_is_refused(tmp_path, indices, dims, attrs, message):
    node = helper.make_node("GatherND", ["x", "i"], ["y"], name="nd", **attrs)
    path = _model(tmp_path, [node], [_x()], (2, 4), [_ints("i", indices, dims)])
    with pytest.raises((UnsupportedModelError, ModelFileError),
                       match=r"node 'nd' \(GatherND\): " + message):
        import_onnx(path)


def test_gather_nd_of_two_coordinates_over_a_run_time_dim_is_refused(tmp_path):
    path = _model(tmp_path, [helper.make_node("GatherND", ["x", "i"], ["y"], name="nd")],
                  [_x(("n", 4))], (1,), [_ints("i", [0, 1], [1, 2])])
    with pytest.raises(UnsupportedModelError, match=r"node 'nd' \(GatherND\): axes 0-1 of 'x' "
                                                    r"\(shape \['n', 4\]\) include a run-time"):
        import_onnx(path)


@pytest.mark.parametrize("op_type, values", [
    ("Expand", [1 << 20, 1 << 20]),
    ("Tile", [1 << 20, 1 << 20]),
])
def test_expand_and_tile_bombs_are_refused_before_anything_allocates(tmp_path, op_type, values):
    path = _model(tmp_path, [helper.make_node(op_type, ["x", "s"], ["y"], name="bomb")],
                  [_x((1, 1))], (1 << 20, 1 << 20), [_ints("s", values)])
    with pytest.raises(ModelFileError, match=rf"node 'bomb' \({op_type}\): its {op_type} output "
                                             r"of shape .* would have 1099511627776 elements"):
        import_onnx(path)


def test_expand_and_tile_with_a_run_time_shape_are_refused(tmp_path):
    shape = helper.make_tensor_value_info("s", TP.INT64, [2])
    path = _model(tmp_path, [helper.make_node("Expand", ["x", "s"], ["y"], name="wide")],
                  [_x((1, 4)), shape], (2, 4))
    with pytest.raises(UnsupportedModelError, match=r"node 'wide' \(Expand\): shape 's' must be "
                                                    r"a constant"):
        import_onnx(path)


def test_all_constant_expand_and_tile_still_fold(tmp_path):
    """Constant inputs fold at import (Tile and Shape of a constant too); a bomb among them is
    refused before numpy allocates."""
    c = helper.make_tensor("c", TP.FLOAT, [1, 2], [1.0, 2.0])
    nodes = [helper.make_node("Shape", ["c"], ["cs"]),
             helper.make_node("Tile", ["c", "r"], ["t"]),
             helper.make_node("Expand", ["t", "e"], ["big"]),
             helper.make_node("Add", ["x", "big"], ["y"], name="add")]
    inits = [c, _ints("r", [1, 2]), _ints("e", [2, 1])]
    path = _model(tmp_path, nodes, [_x((2, 4))], (2, 4), inits)
    imported = import_onnx(path)
    assert [n.op for n in imported.graph.nodes] == ["add"]
    np.testing.assert_array_equal(imported.graph.tensors[imported.graph.nodes[0].inputs[1]],
                                  np.tile([[1.0, 2.0]], (2, 2)))
    bomb = _model(tmp_path, [helper.make_node("Tile", ["c", "r"], ["t"], name="bomb"),
                             helper.make_node("Add", ["x", "t"], ["y"])],
                  [_x((2, 4))], (2, 4), [c, _ints("r", [1 << 20, 1 << 20])])
    with pytest.raises(ModelFileError, match=r"node 'bomb' \(Tile\): Tile would have "
                                             r"2199023255552 elements, above the cap"):
        import_onnx(bomb)
