"""Indices along a run-time dim: a model exported with a dynamic sequence length takes its
first or last step (``x[:, 0]``, ``x[:, -1]``), a step picked by a computed index, or
gathers at run-time indices along that dim. Each becomes a ``gather_elements`` whose indices
are checked against the size the call gives the dim (a negative constant one counted from
the end there), on both backends; an index past that size is an IndexRangeError naming the
node, as onnxruntime refuses it too. A Slice's start or end counted from the end of a run-time
dim (``x[:, 1:-1]``) is counted from the end of the size the call gives it."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from abi.errors import IndexRangeError
from plugin_host.errors import ModelImportError, UnsupportedModelError
from plugin_host.executor import Executor
from plugin_host.onnx_import import build_onnx_artifact, import_onnx
from plugins.numpy_backend import NumpyBackend

from .conftest import (Fn, assert_refused, check_against_onnxruntime,
                       check_against_onnxruntime_and_torch, check_on_both_backends,
                       export_dynamic, import_and_load, index_refused_on_both_backends, onnx,
                       onnxruntime_outputs, refused_on_every_side, torch)

helper, TP = onnx.helper, onnx.TensorProto
F = torch.nn.functional
RNG = np.random.default_rng(29)


#: id -> a function of x (batch, seq, 4); each valid at seq 1 (the golden cases' size)
IDIOMS = {
    "ends": lambda x: x[:, 0] + x[:, -1] * 2,
    "both_ends": lambda x: x[:, [-1, 0]],
    "select": lambda x: x.select(1, -1),
    "take_along": lambda x: x.gather(1, torch.zeros(1, 1, 4, dtype=torch.long).expand(
        x.shape[0], 1, 4)),
    "computed": lambda x: x[:, x[0, :, 0].argmax()],
    "first_row": lambda x: x * x[[0]],  # along the run-time batch
}


def _export(fn, path, *, dynamo: bool, length: int | None = None):
    """``fn`` of x (batch, seq, 4) exported with a run-time batch and, unless ``length``
    fixes it, a run-time sequence length."""
    x = torch.randn(2, length or 5, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            dims = {0: torch.export.Dim("batch")}
            if length is None:
                dims[1] = torch.export.Dim("seq", max=16)
            torch.onnx.export(Fn(fn).eval(), (x,), dynamo=True, verbose=False,
                              input_names=["x"], output_names=["y"],
                              dynamic_shapes=(dims,)).save(str(path))
        else:
            torch.onnx.export(Fn(fn).eval(), (x,), str(path), dynamo=False,
                              input_names=["x"], output_names=["y"],
                              dynamic_axes={"x": {0: "batch"} if length else
                                            {0: "batch", 1: "seq"}})
    return path


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
@pytest.mark.parametrize("idiom", list(IDIOMS))
def test_steps_of_a_run_time_sequence_take_any_length(idiom, dynamo, tmp_path, signer):
    model = _export(IDIOMS[idiom], tmp_path / "m.onnx", dynamo=dynamo)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert loaded.graph.inputs[0].shape == ("batch", "seq", 4)
    assert "gather_elements" in {n.op for n in loaded.graph.nodes}
    rng = np.random.default_rng(3)
    feeds = [{"x": rng.standard_normal((b, n, 4)).astype(np.float32)}
             for b, n in ((1, 1), (3, 5), (2, 16))]
    feeds[1]["x"][0, -1, 1:3] = [np.nan, -np.inf]  # off the column argmax reads
    check_on_both_backends(model, loaded, feeds)


#: id -> a Slice (legacy) of x (batch, seq, 4) along the run-time length, from its end
SLICES = {
    "inner": lambda x: x[:, 1:-1],
    "tail": lambda x: x[:, -3:],
    "window": lambda x: x[:, -5:-2:2],
    "reversed_by_two": lambda x: x.flip(1)[:, ::2],
    "roll": lambda x: torch.roll(x, 2, 1),
}


@pytest.mark.parametrize("dynamo", [False, True])
@pytest.mark.parametrize("idiom", list(SLICES))
def test_slices_counted_from_the_end_of_a_run_time_sequence(idiom, dynamo, tmp_path, signer):
    """A Slice's negative start or end along a run-time dim counts from the end of the size
    the call gives it, and clamps there, as onnxruntime: lengths shorter than the offsets
    included (the golden cases draw 6 and 9). The dynamo exporter's roll slices at the shift
    modulo the length, computed when the call runs (test_roll.py)."""
    path = _export(SLICES[idiom], tmp_path / "s.onnx", dynamo=dynamo)
    _, loaded = import_and_load(path, tmp_path / "s.pha", signer,
                                golden_dims={"seq": [6, 9]})
    feeds = [{"x": np.random.default_rng(n).standard_normal((2, n, 4)).astype(np.float32)}
             for n in (1, 2, 3, 7, 12)]
    check_on_both_backends(path, loaded, feeds)


#: id -> a Slice of x (batch, seq, 4) whose bounds are computed from the run-time length
HALVES = {
    "first_half": lambda x: x[:, : x.shape[1] // 2],
    "second_half": lambda x: x[:, x.shape[1] // 2:],
    "chunks": lambda x: torch.cat(x.chunk(2, 1)[::-1], 1),
    "center_crop": lambda x: x[:, x.shape[1] // 4: x.shape[1] - x.shape[1] // 4],
    "three_chunks": lambda x: torch.cat([p * (k + 1) for k, p in enumerate(x.chunk(3, 1))], 1),
    "tensor_split": lambda x: torch.cat([p * (k + 1) for k, p in
                                         enumerate(torch.tensor_split(x, 3, 1))], 1),
}

#: (exporter, idiom) pairs not exported with a run-time length (torch.export fixes the
#: length torch.chunk splits) or not imported (the legacy exporter's tensor_split: below)
_NOT_HALVES = {(True, "chunks"), (True, "three_chunks"), (False, "tensor_split")}


@pytest.mark.parametrize("dynamo, idiom", [
    (dynamo, idiom) for dynamo in (False, True) for idiom in HALVES
    if (dynamo, idiom) not in _NOT_HALVES])
def test_slices_to_a_bound_computed_from_a_run_time_sequence(idiom, dynamo, tmp_path, signer):
    """A start or end that is a quotient of the length (seq // 2, torch.chunk's
    (seq + 1) // 2) is read when the call runs from a mask of the length sliced by 2; a
    chunk's last end, 2 * ((seq + 1) // 2), reaches the end. Both bounds may be so: a center
    crop's ``seq // 4`` and ``seq - seq // 4`` (a mask of the length with its first seq // 4
    entries sliced off), the middle of three chunks or of tensor_split's three parts. Odd and
    even lengths, and 1, where the later chunks are empty."""
    path = _export(HALVES[idiom], tmp_path / "h.onnx", dynamo=dynamo)
    _, loaded = import_and_load(path, tmp_path / "h.pha", signer, golden_dims={"seq": [6, 9]})
    assert any(n.op == "slice" and len(n.inputs) == 2 for n in loaded.graph.nodes)
    feeds = [{"x": np.random.default_rng(n).standard_normal((2, n, 4)).astype(np.float32)}
             for n in (1, 2, 3, 4, 5, 7, 12)]
    check_on_both_backends(path, loaded, feeds)


def test_run_time_bounds_whose_end_may_precede_the_start_are_refused_naming_them(tmp_path):
    """x[:, seq // 2 : seq // 3 + 1]: at seq 6 the end is before the start, so the slice's
    length (end - start) has no name; the refusal names both bounds."""
    path = _export(lambda x: x[:, x.shape[1] // 2: x.shape[1] // 3 + 1],
                   tmp_path / "c.onnx", dynamo=False)
    with pytest.raises(UnsupportedModelError, match=r"\(Slice\): starts \['seq//2'\], ends "
                                                    r"\['seq//3\+1'\]: along axis 1 \(of dim "
                                                    r"'seq'\) the end 'seq//3\+1' may be less "
                                                    r"than the start 'seq//2' at some size"):
        import_onnx(path)


class _UpToTheOther(torch.nn.Module):
    """x's first seq - n steps, n the run-time length of another input: negative where n
    is above seq, so ONNX's Slice counts that end from the end of x."""

    def forward(self, x, other):
        return x[:, : x.shape[1] - other.shape[0]]


def test_an_end_that_is_a_difference_of_independent_dims_is_refused(tmp_path):
    path = export_dynamic(_UpToTheOther(), [torch.randn(2, 7, 4), torch.randn(3)],
                          tmp_path / "d.onnx", dynamo=False, names=["x", "other"],
                          dims=[{1: "seq"}, {0: "n"}])
    assert_refused(path, UnsupportedModelError, "(Slice)", "ends ['seq-n']: 'seq-n' along axis "
                   "1 (of dim 'seq') is a run-time dim; an end must be a constant")


def test_the_legacy_exporter_s_tensor_split_of_a_run_time_length_is_refused(tmp_path):
    """torch.tensor_split(x, 3, 1) from the legacy exporter tiles its parts' sizes,
    ``seq % 3`` and ``3 - seq % 3`` of them, to a shape no tensor carries."""
    path = _export(HALVES["tensor_split"], tmp_path / "t.onnx", dynamo=False)
    with pytest.raises(UnsupportedModelError, match=r"\(Tile\): shape .* is a dim of no "
                                                    r"tensor of the graph so far"):
        import_onnx(path)


def test_the_last_step_of_an_empty_sequence_is_refused_naming_the_node(tmp_path, signer):
    """seq = 0: the last step's index is 0 - 1, outside [0, 0), on both backends (onnxruntime
    refuses the original model there too)."""

    model = _export(IDIOMS["select"], tmp_path / "m.onnx", dynamo=False)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    [node] = [n.name for n in loaded.graph.nodes if n.op == "gather_elements"]
    empty = {"x": np.zeros((2, 0, 4), np.float32)}
    with pytest.raises(Exception, match="out of data bounds"):
        onnxruntime_outputs(model, empty)
    index_refused_on_both_backends(loaded.graph, empty, rf"node '{node}'.* outside \[0, 0\): "
                                                        r"\(0, 0, 0\)=-1")


def _gather_model(tmp_path, x_shape, i_shape, y_shape, *, constant=None, op="Gather",
                  axis=0):
    """``op`` (Gather or GatherElements) of x at indices i, an input or ``constant``."""
    node = helper.make_node(op, ["x", "i"], ["y"], name="node", axis=axis)
    inputs = [helper.make_tensor_value_info("x", TP.FLOAT, x_shape)]
    inits = []
    if constant is None:
        inputs.append(helper.make_tensor_value_info("i", TP.INT64, i_shape))
    else:
        inits.append(onnx.numpy_helper.from_array(np.asarray(constant, np.int64), "i"))
    graph = helper.make_graph([node], "g", inputs,
                              [helper.make_tensor_value_info("y", TP.FLOAT, y_shape)],
                              initializer=inits)
    path = tmp_path / "g.onnx"
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString())
    return path


def test_run_time_indices_along_a_run_time_dim(tmp_path):
    """x[i] with x of a run-time length n: each index checked against the n of the call."""
    from plugins.onnxruntime_backend import OnnxruntimeBackend

    model = _gather_model(tmp_path, ["n", 5], [3], [3, 5])
    graph = import_onnx(model).graph
    rng = np.random.default_rng(4)
    for backend in (NumpyBackend(), OnnxruntimeBackend()):
        executor = Executor(graph, backend)
        for n in (1, 4, 9):
            feed = {"x": rng.standard_normal((n, 5)).astype(np.float32),
                    "i": rng.integers(0, n, 3)}
            np.testing.assert_array_equal(executor.run(dict(feed))["y"],
                                          onnxruntime_outputs(model, feed)["y"])
        with pytest.raises(IndexRangeError, match=r"node.* outside \[0, 4\): \(1, 0\)=4"):
            executor.run({"x": np.zeros((4, 5), np.float32), "i": np.array([0, 4, 1])})


def test_negative_constant_indices_of_gather_elements_count_from_the_call_s_end(tmp_path):
    from plugins.onnxruntime_backend import OnnxruntimeBackend

    model = _gather_model(tmp_path, [2, "t"], None, [2, 2], constant=[[-1, 0], [0, -2]],
                          op="GatherElements", axis=1)
    graph = import_onnx(model).graph
    rng = np.random.default_rng(5)
    for backend in (NumpyBackend(), OnnxruntimeBackend()):
        executor = Executor(graph, backend)
        for t in (2, 3, 7):
            feed = {"x": rng.standard_normal((2, t)).astype(np.float32)}
            np.testing.assert_array_equal(executor.run(dict(feed))["y"],
                                          onnxruntime_outputs(model, feed)["y"])
        with pytest.raises(IndexRangeError, match=r"outside \[0, 1\): \(1, 1\)=-1"):
            executor.run({"x": np.zeros((2, 1), np.float32)})


def test_a_step_the_golden_cases_cannot_reach_points_at_dim(tmp_path, signer):
    """x[:, 2] needs seq > 2, and the golden cases give a run-time dim size 1: onnxruntime
    refuses them, and the build says which dims and how to draw or fix them. Drawn longer,
    it builds with seq still run-time; fixed, it builds too."""
    model = _export(lambda x: x[:, 2], tmp_path / "m.onnx", dynamo=False)
    with pytest.raises(ModelImportError, match=r"onnxruntime cannot run the model: .*; the "
                       r"golden cases give the inputs' run-time dims the sizes 'batch' 1, "
                       r"'seq' 1, where a model may need others: --golden-dim NAME=SIZE,.*"
                       r"--dim NAME=SIZE"):
        build_onnx_artifact(model, tmp_path / "m.pha", latency_ms=100.0)
    assert not (tmp_path / "m.pha").exists()
    _, loaded = import_and_load(model, tmp_path / "g.pha", signer, golden_dims={"seq": (3, 7)})
    assert loaded.graph.inputs[0].shape == ("batch", "seq", 4)
    assert [case["x"].shape for case, _ in loaded.golden_cases()] == [(1, 3, 4), (1, 7, 4)]
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer, dims={"seq": 5})
    assert loaded.graph.inputs[0].shape == ("batch", 5, 4)


def _set_last(x):
    y = x.clone()
    y[:, -1] = 0.0
    return y


def _first_from_last(x):
    y = x.clone()
    y[:, 0] = x[:, -1] * 2.0
    return y


def _add_at_argmax(x):
    i = x[:, :, 0].argmax(1, keepdim=True)[:, :, None].expand(-1, 1, 4)
    return x.scatter_add(1, i, torch.ones_like(i, dtype=x.dtype))


#: id -> (a function of x (batch, seq, 4), the exporters it imports from)
WRITES = {
    "set_last": (_set_last, [True]),
    "first_from_last": (_first_from_last, [True]),
    "scatter": (lambda x: x.scatter(1, torch.zeros(x.shape[0], 1, 4, dtype=torch.long), 1.0),
                [False, True]),
    "add_at_argmax": (_add_at_argmax, [True]),
}


@pytest.mark.parametrize("idiom, dynamo", [(k, d) for k, (_, ds) in WRITES.items() for d in ds])
def test_writes_along_a_run_time_sequence_take_any_length(idiom, dynamo, tmp_path, signer):
    """A ScatterElements along the run-time dim, checked against the call's size; the dynamo
    exporter's ``y[:, -1] = v`` expands the constant -1 to v's shape, which is counted from
    the end of that size as ONNX does."""
    model = _export(WRITES[idiom][0], tmp_path / "w.onnx", dynamo=dynamo)
    _, loaded = import_and_load(model, tmp_path / "w.pha", signer)
    assert "scatter_elements" in {n.op for n in loaded.graph.nodes}
    rng = np.random.default_rng(13)
    feeds = [{"x": rng.standard_normal((b, n, 4)).astype(np.float32)}
             for b, n in ((1, 1), (3, 5), (2, 16))]
    check_on_both_backends(model, loaded, feeds)


def test_a_constant_spread_to_a_run_time_shape_counts_from_the_end_of_a_fixed_dim(tmp_path,
                                                                                 signer):
    """``y[:, -1] = 0`` under a dynamic batch only: the -1 along the fixed length 6."""
    model = _export(_set_last, tmp_path / "f.onnx", dynamo=True, length=6)
    _, loaded = import_and_load(model, tmp_path / "f.pha", signer)
    rng = np.random.default_rng(14)
    runs = check_against_onnxruntime(model, loaded, [
        {"x": rng.standard_normal((b, 6, 4)).astype(np.float32)} for b in (1, 3)])
    assert not runs[1][0]["y"][:, -1].any() and runs[1][0]["y"][:, 0].all()


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_glu_along_a_run_time_length_splits_it_in_halves(dynamo, tmp_path, signer):
    """F.glu(x, 1): a Split with num_outputs=2 along the run-time length (opset 18 and up),
    its halves slices at (seq + 1) // 2; against onnxruntime on both backends and torch at even
    lengths; an odd one is refused on every side, at the Mul of halves of two lengths."""
    path = export_dynamic(Fn(lambda x: F.glu(x, 1)), [torch.randn(2, 6, 4)], tmp_path / "g.onnx",
                          dynamo=dynamo, names=["x"], dims=[{1: "seq"}],
                          bounds={"seq": (2, 64)})
    assert [a.i for n in onnx.load(path).graph.node if n.op_type == "Split"
            for a in n.attribute if a.name == "num_outputs"] == [2]
    _, loaded = import_and_load(path, tmp_path / "g.pha", signer, golden_dims={"seq": [4, 10]})
    feeds = [{"x": RNG.standard_normal((2, t, 4)).astype(np.float32)} for t in (2, 4, 8, 12)]
    check_against_onnxruntime_and_torch(path, loaded, feeds, Fn(lambda x: F.glu(x, 1)), 1e-6)
    refused_on_every_side(path, loaded.graph, {"x": np.zeros((2, 5, 4), np.float32)},
                          onnxruntime_says="Mul", numpy_says="broadcast",
                          backend_says="Mul", rule_refuses=False)


def _split_model(parts: int, opset: int = 18) -> onnx.ModelProto:
    """y = Concat(the parts backwards) of Split(x) into ``parts`` along the run-time t of x
    (2, t): ``num_outputs`` at opset 18, no sizes at all before."""
    outs = [f"p{k}" for k in range(parts)]
    count = {"num_outputs": parts} if opset >= 18 else {}
    graph = helper.make_graph(
        [helper.make_node("Split", ["x"], outs, axis=1, **count),
         helper.make_node("Concat", outs[::-1], ["y"], axis=1)], "g",
        [helper.make_tensor_value_info("x", TP.FLOAT, [2, "t"])],
        [helper.make_tensor_value_info("y", TP.FLOAT, [2, "t"])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("parts", [2, 3])
def test_equal_parts_of_a_run_time_length_before_opset_18(parts, tmp_path, signer):
    """Split without sizes at opset 13: as many equal parts as outputs, at lengths the count
    divides (0 too); another length is refused on every side, as onnxruntime refuses it."""
    path = tmp_path / "e.onnx"
    onnx.save(_split_model(parts, opset=13), path)
    golden = {"t": [parts, 4 * parts]}
    _, loaded = import_and_load(path, tmp_path / "e.pha", signer, golden_dims=golden)
    assert "unflatten" in {n.op for n in loaded.graph.nodes}
    check_on_both_backends(path, loaded, [
        {"x": RNG.standard_normal((2, parts * k)).astype(np.float32)} for k in range(5)])
    refused_on_every_side(path, loaded.graph, {"x": np.zeros((2, parts + 1), np.float32)},
                          onnxruntime_says="split evenly", numpy_says="unflatten",
                          backend_says=r"^unflatten: ")


def test_glu_from_the_legacy_exporter_at_opset_13(tmp_path, signer):
    """F.glu at opset 13 (a Split without sizes) against onnxruntime and torch."""
    path = tmp_path / "g.onnx"
    glu = Fn(lambda x: F.glu(x, 1)).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(glu, (torch.randn(2, 6, 4),), str(path), dynamo=False,
                          opset_version=13, input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {1: "seq"}})
    _, loaded = import_and_load(path, tmp_path / "g.pha", signer, golden_dims={"seq": [4, 10]})
    feeds = [{"x": RNG.standard_normal((2, t, 4)).astype(np.float32)} for t in (2, 4, 8)]
    check_against_onnxruntime_and_torch(path, loaded, feeds, glu, 1e-6)


def test_halves_of_a_run_time_length_match_onnxruntime_at_any_length(tmp_path, signer):
    """The first half is the longer one at an odd length, as onnxruntime splits; lengths 0
    to 7."""
    path = tmp_path / "s.onnx"
    onnx.save(_split_model(2), path)
    _, loaded = import_and_load(path, tmp_path / "s.pha", signer, golden_dims={"t": [3, 8]})
    assert [n.op for n in loaded.graph.nodes].count("slice") >= 2
    check_on_both_backends(path, loaded, [
        {"x": RNG.standard_normal((2, t)).astype(np.float32)} for t in range(8)])


def test_three_parts_of_a_run_time_length_are_refused_naming_the_split(tmp_path):
    """num_outputs=3: the last part is negative at some lengths (1), where onnxruntime
    refuses the call."""
    path = tmp_path / "s.onnx"
    onnx.save(_split_model(3), path)
    assert_refused(path, UnsupportedModelError, "(Split)",
                   "into num_outputs=2 halves only, not 3")
