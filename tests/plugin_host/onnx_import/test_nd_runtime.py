"""GatherND and ScatterND at indices of several coordinates computed at run time (``x[i, j]``,
``x[b, topk]``, ``y[i, j] = v`` with ``i``, ``j`` tensors): the data's first k axes flattened into
one and each index made its position there, each coordinate checked against its own dim when it
arrives. Compared with onnxruntime on both backends; a coordinate out of range is an
IndexRangeError naming the node even where its flat position would land inside the data."""

from __future__ import annotations

import numpy as np
import pytest

from abi.errors import IndexRangeError
from plugin_host.errors import ModelFileError, UnsupportedModelError
from plugin_host.executor import Executor

from .conftest import EXPORTERS, assert_refused, export, import_and_load, onnx, torch
from .test_scatter import _floats
from .test_scatter_runtime import BACKENDS, _check

helper, TP = onnx.helper, onnx.TensorProto
RNG = np.random.default_rng(47)


def _coordinates(where, dims) -> np.ndarray:
    """Indices of shape ``where + [len(dims)]``, coordinate c drawn from [0, dims[c]) (its
    whole range, duplicates likely)."""
    return np.stack([RNG.integers(0, d, where) for d in dims], axis=-1).astype(np.int64)


class _Pick(torch.nn.Module):
    """``x[i, j]``: the dynamo exporter writes a GatherND of two coordinates."""

    def forward(self, x, i, j):
        return x[i, j]


class _TopkBoxes(torch.nn.Module):
    """Each image's boxes of its three best scores, ``boxes[b, topk(scores)]``."""

    def forward(self, boxes, scores):
        b = torch.arange(2).unsqueeze(1).expand(2, 3)
        return boxes[b, torch.topk(scores, 3, dim=1).indices]


class _Put(torch.nn.Module):
    """``y[i, j] = 1``: a ScatterND of two coordinates from either exporter."""

    def forward(self, x, i, j):
        y = x.clone()
        y[i, j] = 1.0
        return y


class _Accumulate(torch.nn.Module):
    """``y[i, j] += v``: a GatherND, an Add and a ScatterND (dynamo) or the legacy exporter's
    flat-index Gather and a ScatterND."""

    def forward(self, x, i, j, v):
        y = x.clone()
        y[i, j] += v
        return y


def _pairs(n: int, k: int, dims) -> list[tuple[np.ndarray, np.ndarray]]:
    return [tuple(RNG.integers(0, d, k).astype(np.int64) for d in dims) for _ in range(n)]


#: name: (module, example inputs, feeds, ops in the graph)
TORCH_CASES = {
    "pick": (_Pick, [torch.randn(4, 5, 3), torch.tensor([0, 3, 1]), torch.tensor([4, 0, 4])],
             [{"x": x, "i": i, "j": j}
              for x, (i, j) in zip(_floats((4, 5, 3), 3), _pairs(3, 3, (4, 5)))],
             {"gather_elements"}),
    "topk-boxes": (_TopkBoxes, [torch.randn(2, 6, 4), torch.randn(2, 6)],
                   [{"boxes": b, "scores": s}
                    for b, s in zip(_floats((2, 6, 4), 3), _floats((2, 6), 3))],
                   {"topk", "gather_elements"}),
    "put": (_Put, [torch.randn(4, 5, 3), torch.tensor([0, 3, 1]), torch.tensor([4, 0, 4])],
            [{"x": x, "i": i, "j": j}
             for x, (i, j) in zip(_floats((4, 5, 3), 3), _pairs(3, 3, (4, 5)))],
            {"scatter_elements"}),
    "accumulate": (_Accumulate, [torch.randn(4, 5), torch.tensor([0, 3]), torch.tensor([4, 0]),
                                 torch.randn(2)],
                   [{"x": x, "i": i, "j": j, "v": v}
                    for x, (i, j), v in zip(_floats((4, 5), 3), _pairs(3, 2, (4, 5)),
                                            _floats((2,), 3))],
                   {"scatter_elements"}),
}


@pytest.mark.parametrize("case, dynamo, fold, optimize", [
    pytest.param(case, *p.values, id=f"{case}-{p.id}") for case in TORCH_CASES
    for p in EXPORTERS])
def test_torch_indexing_by_several_run_time_indices_matches_onnxruntime(
        case, dynamo, fold, optimize, tmp_path, signer):
    module, args, feeds, ops = TORCH_CASES[case]
    model = export(module(), args, tmp_path / "m.onnx", dynamo=dynamo, fold=fold,
                   optimize=optimize, input_names=list(feeds[0]), output_names=["y"])
    _check(model, tmp_path, signer, feeds, ops)


def _nd_model(tmp_path, op: str, data, where, k: int, out, *, name: str = "m", **attrs):
    """A one-node GatherND (``updates`` None) or ScatterND named ``node``, every input a graph
    input: ``data`` float32, indices int64 of shape ``where + [k]``, updates of ScatterND's
    shape."""
    inputs = [helper.make_tensor_value_info("data", TP.FLOAT, list(data)),
              helper.make_tensor_value_info("indices", TP.INT64, list(where) + [k])]
    names = ["data", "indices"]
    if op == "ScatterND":
        inputs.append(helper.make_tensor_value_info("updates", TP.FLOAT,
                                                    list(where) + list(data[k:])))
        names.append("updates")
    graph = helper.make_graph([helper.make_node(op, names, ["y"], name="node", **attrs)], "g",
                              inputs, [helper.make_tensor_value_info("y", TP.FLOAT, list(out))])
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString())
    return path


def _nd_feeds(op: str, data, where, k: int, n: int = 4) -> list[dict[str, np.ndarray]]:
    """Floats with extremes, nan and -0.0 (the last but one), a feed of signed zeros and nan
    only (the last: which of two equal values stays is visible), indices over each
    coordinate's whole range."""
    feeds = []
    for m in range(n):
        feed = {}
        for name, shape in (("data", tuple(data)), ("updates", tuple(where) + tuple(data[k:]))):
            if name == "updates" and op != "ScatterND":
                continue
            if m == n - 1:
                feed[name] = RNG.choice(np.array([0.0, -0.0, np.nan], np.float32), shape)
            else:
                feed[name] = _floats(shape, 1)[0] if m == n - 2 else \
                    (RNG.standard_normal(shape) * 3).astype(np.float32)
        feed["indices"] = _coordinates(list(where), data[:k])
        feeds.append(feed)
    return feeds


@pytest.mark.parametrize("data, where, k", [
    ((3, 4, 5), (2, 3), 2), ((3, 4, 5), (6,), 3), ((2, 3, 4, 2), (5,), 3), ((7, 2), (4, 3), 2),
], ids=["rows-of-2d", "elements", "3-of-4-axes", "all-of-2d"])
def test_gather_nd_at_run_time_indices_matches_onnxruntime(data, where, k, tmp_path, signer):
    out = tuple(where) + tuple(data[k:])
    model = _nd_model(tmp_path, "GatherND", data, where, k, out)
    _check(model, tmp_path, signer, _nd_feeds("GatherND", data, where, k), {"gather_elements"})


@pytest.mark.parametrize("constant", [False, True], ids=["run-time", "constant"])
@pytest.mark.parametrize("data, where, k, batch", [
    ((2, 3, 4), (2, 1), 1, 1), ((2, 3, 4), (2, 5), 2, 1), ((2, 3, 4, 5), (2, 3, 2), 1, 2),
    ((3, 4, 2), (3, 2, 2), 1, 1),
], ids=["one-per-batch", "elements-per-batch", "two-batch-dims", "rows-per-batch"])
def test_gather_nd_with_batch_dims_matches_onnxruntime(data, where, k, batch, constant,
                                                       tmp_path, signer):
    """TensorFlow's gather_nd(..., batch_dims=b): each batch entry's indices into its own
    data, a negative coordinate counted from the end of its dim."""
    out = tuple(where[:-1]) + tuple(data[batch + k:])
    model = _nd_model(tmp_path, "GatherND", data, where[:-1], k, out, batch_dims=batch)
    dims = data[batch:batch + k]
    feeds = _nd_feeds("GatherND", data, where[:-1], k)
    for feed in feeds:  # each coordinate in [-dim, dim)
        feed["indices"] = _coordinates(list(where[:-1]), dims) - \
            RNG.integers(0, 2, where[:-1] + (k,)) * np.array(dims)
    indices = feeds[0]["indices"]
    if constant:
        m = onnx.load(model)
        m.graph.initializer.append(onnx.numpy_helper.from_array(indices, "indices"))
        del m.graph.input[1]
        onnx.save(m, model)
        for feed in feeds:
            del feed["indices"]
    _check(model, tmp_path, signer, feeds, {"gather"} if constant else {"gather_elements"})


@pytest.mark.parametrize("data, where, k, batch", [
    (("b", 3, 4), ("b", 5), 2, 1), (("b", 2, 3, 4), ("b", 2, 3), 1, 2),
    (("b", 6, 2), ("b", "n"), 1, 1),
], ids=["batch", "batch-and-static", "batch-and-count"])
def test_gather_nd_with_batch_dims_over_a_run_time_batch(data, where, k, batch, tmp_path,
                                                         signer):
    """tf2onnx's gather_nd under a dynamic batch: the batch coordinates counted when the call
    runs, the number of indices per entry a run-time dim too."""
    out = tuple(where) + tuple(data[batch + k:])
    model = _nd_model(tmp_path, "GatherND", data, where, k, out, batch_dims=batch)
    feeds = []
    for b, n in ((1, 2), (3, 4)):
        sizes = {"b": b, "n": n}
        concrete = [sizes.get(d, d) for d in data]
        count = [sizes.get(d, d) for d in where]
        dims = concrete[batch:batch + k]
        feed = _nd_feeds("GatherND", concrete, count, k, n=2)[0]
        feed["indices"] = _coordinates(count, dims) - RNG.integers(
            0, 2, count + [k]) * np.array(dims)  # each coordinate in [-dim, dim)
        feeds.append(feed)
    _check(model, tmp_path, signer, feeds, {"gather_elements", "cumsum"})


@pytest.mark.parametrize("data, where, attrs, error, message", [
    ((2, 3), (2, 1), {"batch_dims": 2}, ModelFileError,
     "attribute batch_dims=2 must be in [0, 2) (below the ranks of data [2, 3] and indices "
     "[2, 1])"),
    ((2, 3), (3, 1), {"batch_dims": 1}, ModelFileError,
     "batch_dims=1: dim 0 of data [2, 3] and indices [3, 1] is bound to sizes 2 and 3"),
    (("b", 3), ("n", 1), {"batch_dims": 1}, UnsupportedModelError,
     "batch_dims=1: dim 0 of data ['b', 3] and indices ['n', 1] is bound to dims 'b' and 'n', "
     "which cannot be checked equal at import"),
], ids=["too-many", "differ", "unknown"])
def test_batch_dims_it_cannot_map_are_refused(data, where, attrs, error, message, tmp_path):
    model = _nd_model(tmp_path, "GatherND", data, where[:-1], where[-1], where[:-1], **attrs)
    assert_refused(model, error, "node 'node' (GatherND)", message)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("data, where, k", [
    ((3, 4, 5), (6,), 2), ((3, 4, 5), (2, 4), 3), ((4, 2), (9,), 2),
], ids=["rows-of-2d", "elements", "duplicates-likely"])
def test_scatter_nd_at_run_time_indices_matches_onnxruntime(data, where, k, reduction,
                                                            tmp_path, signer):
    """Updates land in the indices' order on both backends, as on onnxruntime: of two to one
    element without a reduction the later stays, reductions combine in that order."""
    model = _nd_model(tmp_path, "ScatterND", data, where, k, data, reduction=reduction)
    _check(model, tmp_path, signer, _nd_feeds("ScatterND", data, where, k),
           {"scatter_elements"})


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("op", ["GatherND", "ScatterND"])
@pytest.mark.parametrize("bad, message", [
    ((0, 5), r"outside \[0, 5\): \(1,\)=5"),   # flat position 5 is element (1, 0): in range
    ((4, 0), r"outside \[0, 4\): \(1,\)=4"),
    ((1, -6), r"outside \[0, 5\): \(1,\)=-1"),  # past -5 even counted from the end (-6: -1)
], ids=["second-coordinate", "first-coordinate", "negative"])
def test_a_coordinate_out_of_its_dim_is_refused_when_it_arrives(op, bad, message, backend,
                                                                 tmp_path, signer):
    """Each coordinate is checked against its own dim (a negative one counted from its end
    first), so one that overflows into the next row is refused, not read or written there;
    the error names the node."""
    model = _nd_model(tmp_path, op, (4, 5), (3,), 2, (3,) if op == "GatherND" else (4, 5))
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    executor = Executor(loaded.graph, BACKENDS[backend]())
    feed = {"data": _floats((4, 5), 1)[0], "indices": np.array([[0, 1], bad, [3, 4]])}
    if op == "ScatterND":
        feed["updates"] = _floats((3,), 1)[0]
    executor.run(dict(feed, indices=np.array([[0, 1], [3, 4], [3, 4]])))  # in range: runs
    with pytest.raises(IndexRangeError, match=message) as info:
        executor.run(feed)
    assert "node" in str(info.value)


@pytest.mark.parametrize("op, data, where, k, error, message", [
    ("ScatterND", (4, 5), (3,), 3, ModelFileError, "indices of 3 coordinates into 'data' of "
                                                   "rank 2"),
    ("GatherND", (4, 5), (3,), 3, ModelFileError, "indices of 3 coordinates into 'data' of "
                                                  "rank 2"),
    ("GatherND", (4, 5), (3,), 0, UnsupportedModelError, "one or more coordinates"),
    ("ScatterND", (4, 5), (3,), 0, UnsupportedModelError, "one or more coordinates"),
], ids=["scatter-too-many", "gather-too-many", "gather-none", "scatter-none"])
def test_what_cannot_be_mapped_is_refused_naming_the_node(op, data, where, k, error, message,
                                                          tmp_path):
    out = (3,) if op == "GatherND" else data
    model = _nd_model(tmp_path, op, data, where, k, out)
    assert_refused(model, error, f"node 'node' ({op})", message)


def test_scatter_nd_updates_of_the_wrong_shape_are_refused(tmp_path):
    model = _nd_model(tmp_path, "ScatterND", (4, 5, 2), (3,), 2, (4, 5, 2))
    loaded = onnx.load(model)
    loaded.graph.input[2].type.tensor_type.shape.dim[1].dim_value = 5
    model.write_bytes(loaded.SerializeToString())
    assert_refused(model, ModelFileError, "node 'node' (ScatterND)",
                   "updates of shape [3, 5] must be of shape [3, 2] (the indices' [3] and the "
                   "data's dims after the first 2)")
