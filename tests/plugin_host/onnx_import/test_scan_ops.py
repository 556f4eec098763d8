"""CumSum (torch.cumsum) and TopK (torch.topk) imported as cumsum and topk, compared with
onnxruntime (ties and nan included for TopK); a k that is its axis' run-time size (torch.sort)
is the whole axis (test_run_time_topk.py: k computed from it); a run-time axis, a k
computed at run time, or an attribute value the ops do not take, is refused naming the
node."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from plugin_host.errors import ModelFileError, UnsupportedModelError

from .conftest import (EXPORTERS, assert_refused, check_against_onnxruntime,
                       check_on_both_backends, export, import_and_load, onnx, torch)

helper, TP = onnx.helper, onnx.TensorProto
RNG = np.random.default_rng(17)
BIG = np.finfo(np.float32).max


def _floats(shape):
    """Random inputs, and one with float32 extremes, infinities and nan, a partial sum that
    overflows and one that comes back (onnxruntime sums float32 in float32)."""
    feeds = [(RNG.standard_normal(shape) * 3).astype(np.float32) for _ in range(2)]
    x = RNG.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    flat[:3] = [BIG, BIG, -BIG]
    flat[RNG.choice(np.arange(3, flat.size), size=5, replace=False)] = [np.inf, -np.inf, np.nan,
                                                                       -0.0, 1e-45]
    return feeds + [x]


class _CumSum(torch.nn.Module):
    def forward(self, x, i):
        return (torch.cumsum(x, 1), torch.cumsum(x, -1), torch.cumsum(i, 0),
                torch.flip(torch.cumsum(torch.flip(x, [2]), 2), [2]))


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_torch_cumsum_matches_onnxruntime(dynamo, fold, optimize, tmp_path, signer):
    shape = (2, 4, 5)
    model = export(_CumSum(), [torch.randn(*shape), torch.randint(-9, 9, shape)],
                   tmp_path / "c.onnx", dynamo=dynamo, fold=fold, optimize=optimize,
                   input_names=["x", "i"], output_names=["y0", "y1", "y2", "y3"])
    _, loaded = import_and_load(model, tmp_path / "c.pha", signer)
    assert sum(n.op == "cumsum" for n in loaded.graph.nodes) == 4
    check_against_onnxruntime(model, loaded, [
        {"x": x, "i": RNG.integers(-2**40, 2**40, shape)} for x in _floats(shape)])


def _model(tmp_path, x_shape, axis, dtype=TP.FLOAT, attrs=None, runtime_axis=False,
           op="CumSum", opset=18):
    """A one-node ``op`` (CumSum, CumProd) named ``node`` over ``x`` (a str dim is
    symbolic); the axis a constant unless ``runtime_axis`` (an int64 graph input)."""
    inputs = [helper.make_tensor_value_info("x", dtype, list(x_shape))]
    inits = []
    if runtime_axis:
        inputs.append(helper.make_tensor_value_info("axis", TP.INT64, []))
    else:
        inits.append(onnx.numpy_helper.from_array(np.asarray(axis), "axis"))
    node = helper.make_node(op, ["x", "axis"], ["y"], name="node", **(attrs or {}))
    graph = helper.make_graph([node], "g", inputs,
                              [helper.make_tensor_value_info("y", dtype, list(x_shape))],
                              initializer=inits)
    path = tmp_path / f"{op.lower()}.onnx"
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString())
    return path


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("axis", [np.int64(1), np.array([-1], np.int32), np.int32(0)])
def test_exclusive_and_reverse_match_onnxruntime(axis, exclusive, reverse, tmp_path, signer):
    model = _model(tmp_path, (3, 6), axis, attrs={"exclusive": exclusive, "reverse": reverse})
    _, loaded = import_and_load(model, tmp_path / "c.pha", signer)
    [node] = loaded.graph.nodes
    assert (node.op, node.attrs["exclusive"], node.attrs["reverse"]) == (
        "cumsum", bool(exclusive), bool(reverse))
    check_against_onnxruntime(model, loaded, [{"x": x} for x in _floats((3, 6))])


@pytest.mark.parametrize("dtype, np_dtype", [(TP.INT32, np.int32), (TP.INT64, np.int64)])
def test_integer_cumsum_wraps_as_onnxruntime(dtype, np_dtype, tmp_path, signer):
    model = _model(tmp_path, (2, 4), np.int64(1), dtype=dtype, attrs={"reverse": 1})
    _, loaded = import_and_load(model, tmp_path / "c.pha", signer)
    top = np.iinfo(np_dtype).max
    check_against_onnxruntime(model, loaded, [
        {"x": np.array([[top, 1, top, 3], [-top, -top, 5, 0]], np_dtype)},
        {"x": RNG.integers(-1000, 1000, (2, 4)).astype(np_dtype)}])


def test_a_symbolic_batch_dim_passes_through_cumsum(tmp_path, signer):
    model = _model(tmp_path, ("n", 5), np.int64(1))
    _, loaded = import_and_load(model, tmp_path / "c.pha", signer)
    assert loaded.graph.outputs[0].shape == ("n", 5)
    check_against_onnxruntime(model, loaded, [{"x": RNG.standard_normal((n, 5))
                                               .astype(np.float32)} for n in (1, 4)])


@pytest.mark.parametrize("kw, error, message", [
    ({"axis": None, "runtime_axis": True}, UnsupportedModelError,
     "axis 'axis' must be a constant (known at import), but it is computed at run time"),
    ({"axis": np.int64(0), "attrs": {"exclusive": 2}}, UnsupportedModelError,
     "attribute exclusive=2 must be 0 or 1"),
    ({"axis": np.int64(0), "attrs": {"reverse": -1}}, UnsupportedModelError,
     "attribute reverse=-1 must be 0 or 1"),
    ({"axis": np.int64(2)}, ModelFileError, "axis 2 is out of range for rank 2"),
    ({"axis": np.array([0, 1])}, ModelFileError, "axis must be one number, got int64 of shape"),
    ({"axis": np.float32(1)}, ModelFileError, "axis must be an integer, got 1.0"),
])
def test_what_cumsum_refuses_names_node_and_value(kw, error, message, tmp_path):
    path = _model(tmp_path, (3, 4), **kw)
    assert_refused(path, error, "node 'node' (CumSum)", message)


# --- TopK ----------------------------------------------------------------------------------------


class _TopK(torch.nn.Module):
    def forward(self, x, i):
        v0, i0 = torch.topk(x, 3)
        v1, i1 = torch.topk(x, 2, dim=1, largest=False)
        v2, i2 = torch.topk(i, 4, dim=0)
        return v0, i0, v1, i1, v2, i2, torch.topk(x, 5, dim=-1).values.sum(-1)


def _ties_and_nan(shape):
    """Random floats, and floats from a few values (ties), nan, infinities and -0.0 spread in."""
    feeds = [(RNG.standard_normal(shape) * 3).astype(np.float32)]
    x = RNG.choice(np.array([1.0, 2.0, -0.0, 0.0, np.nan, np.inf, -np.inf, BIG], np.float32),
                   size=shape)
    return feeds + [x, np.where(RNG.random(shape) < 0.3, np.nan, feeds[0])]


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_torch_topk_matches_onnxruntime_ties_and_nan_included(dynamo, fold, optimize, tmp_path,
                                                              signer):
    shape = (5, 6, 7)
    names = ["v0", "i0", "v1", "i1", "v2", "i2", "s"]
    model = export(_TopK(), [torch.randn(*shape), torch.randint(-9, 9, shape)],
                   tmp_path / "t.onnx", dynamo=dynamo, fold=fold, optimize=optimize,
                   input_names=["x", "i"], output_names=names)
    _, loaded = import_and_load(model, tmp_path / "t.pha", signer)
    assert sum(n.op == "topk" for n in loaded.graph.nodes) == 4
    shapes = {s.name: (s.shape, s.dtype) for s in loaded.graph.outputs}
    assert shapes["i1"] == ((5, 2, 7), "int64") and shapes["v2"] == ((4, 6, 7), "int64")
    check_against_onnxruntime(model, loaded, [
        {"x": x, "i": RNG.integers(-3, 3, shape)} for x in _ties_and_nan(shape)])


def _topk_model(tmp_path, x_shape, k, attrs=None, runtime_k=False, reduce=False):
    """A TopK named ``node`` over ``x`` (k a constant unless ``runtime_k``); its outputs the
    graph's, or with ``reduce`` the sum of all values (an order-independent use)."""
    inputs = [helper.make_tensor_value_info("x", TP.FLOAT, list(x_shape))]
    inits = []
    if runtime_k:
        inputs.append(helper.make_tensor_value_info("k", TP.INT64, [1]))
    else:
        inits.append(onnx.numpy_helper.from_array(np.asarray(k), "k"))
    nodes = [helper.make_node("TopK", ["x", "k"], ["v", "i"], name="node", **(attrs or {}))]
    if reduce:
        nodes.append(helper.make_node("ReduceSum", ["v"], ["s"], keepdims=0))
        outputs = [helper.make_tensor_value_info("s", TP.FLOAT, [])]
    else:
        outputs = [helper.make_tensor_value_info("v", TP.FLOAT, [None] * len(x_shape)),
                   helper.make_tensor_value_info("i", TP.INT64, [None] * len(x_shape))]
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits)
    path = tmp_path / "topk.onnx"
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString())
    return path


@pytest.mark.parametrize("attrs", [{}, {"largest": 0}, {"axis": 0, "largest": 1, "sorted": 1},
                                   {"axis": -2, "largest": 0}])
def test_topk_attributes_match_onnxruntime(attrs, tmp_path, signer):
    model = _topk_model(tmp_path, (4, 9), np.array([3]), attrs)
    _, loaded = import_and_load(model, tmp_path / "t.pha", signer)
    assert [n.op for n in loaded.graph.nodes] == ["topk"]
    check_against_onnxruntime(model, loaded, [{"x": x} for x in _ties_and_nan((4, 9))])


def test_unsorted_topk_is_taken_sorted_where_the_order_does_not_matter(tmp_path, signer):
    model = _topk_model(tmp_path, (3, 50), np.array([10]), {"sorted": 0}, reduce=True)
    _, loaded = import_and_load(model, tmp_path / "t.pha", signer)
    assert [n.op for n in loaded.graph.nodes] == ["topk", "sum"]
    check_against_onnxruntime(model, loaded, [{"x": RNG.standard_normal((3, 50))
                                               .astype(np.float32)}])


def test_a_symbolic_batch_dim_passes_through_topk(tmp_path, signer):
    model = _topk_model(tmp_path, ("n", 6), np.array([2]))
    _, loaded = import_and_load(model, tmp_path / "t.pha", signer)
    assert [s.shape for s in loaded.graph.outputs] == [("n", 2), ("n", 2)]
    check_against_onnxruntime(model, loaded, [{"x": RNG.standard_normal((n, 6))
                                               .astype(np.float32)} for n in (1, 3)])


class _SortRows(torch.nn.Module):
    """torch.sort and argsort along a run-time length: TopK whose k is that length."""

    def forward(self, x):
        values, order = torch.sort(x, dim=1, descending=True)
        return values * 2.0, torch.argsort(x, dim=1).float() + order.float()


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_sort_along_a_run_time_length(dynamo, tmp_path, signer):
    """k is the axis' run-time size: the whole axis (topk's k = -1), on both backends."""
    path = tmp_path / "s.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            torch.onnx.export(_SortRows(), (torch.randn(2, 5),), dynamo=True, verbose=False,
                              input_names=["x"], output_names=["v", "i"], dynamic_shapes=(
                                  {0: torch.export.Dim("n"), 1: torch.export.Dim("t")},)
                              ).save(str(path))
        else:
            torch.onnx.export(_SortRows(), (torch.randn(2, 5),), str(path), dynamo=False,
                              input_names=["x"], output_names=["v", "i"],
                              dynamic_axes={"x": {0: "n", 1: "t"}})
    _, loaded = import_and_load(path, tmp_path / "s.pha", signer, golden_dims={"t": 5})
    assert {n.attrs["k"] for n in loaded.graph.nodes if n.op == "topk"} == {-1}
    feeds = [{"x": RNG.permutation(n * t).reshape(n, t).astype(np.float32)}
             for n, t in ((1, 1), (3, 4), (2, 17))]  # no ties: argsort's order is defined
    check_on_both_backends(path, loaded, feeds)


@pytest.mark.parametrize("kw, error, message", [
    ({"k": None, "runtime_k": True}, UnsupportedModelError,
     "k 'k' must be a constant (known at import), but it is computed at run time"),
    ({"k": np.array([9])}, UnsupportedModelError,
     "maps to topk, which refuses it: topk: k=9 is larger than axis -1 of x shape (3, 4)"),
    ({"k": np.array([0])}, UnsupportedModelError, "k=0 (an empty result) is not supported"),
    ({"k": np.array([-1])}, ModelFileError, "k must be an integer >= 0, got -1"),
    ({"k": np.array([1.0], np.float32)}, ModelFileError, "k must be an integer >= 0, got 1.0"),
    ({"k": np.array([1, 2])}, ModelFileError, "k must be one number"),
    ({"k": np.array([1]), "attrs": {"largest": 2}}, UnsupportedModelError,
     "attribute largest=2 must be 0 or 1"),
    ({"k": np.array([1]), "attrs": {"sorted": -1}}, UnsupportedModelError,
     "attribute sorted=-1 must be 0 or 1"),
    ({"k": np.array([1]), "attrs": {"sorted": 0}}, UnsupportedModelError,
     "sorted=0 with ['v', 'i'] graph output(s): the order of an unsorted result is "
     "onnxruntime's own"),
    ({"k": np.array([1]), "attrs": {"axis": 2}}, ModelFileError,
     "axis 2 is out of range for rank 2"),
])
def test_what_topk_refuses_names_node_and_value(kw, error, message, tmp_path):
    assert_refused(_topk_model(tmp_path, (3, 4), **kw), error, "node 'node' (TopK)", message)
