"""Trilu (torch's triu and tril, the causal mask of scaled_dot_product_attention) and OneHot
(one_hot) imported as ``where`` over a constant mask, and EyeLike (torch.diagonal) as a
constant or, over run-time dims, a mask computed when the call runs, compared with
onnxruntime; a Trilu of a constant folds, one of a run-time k compares
positions with it; a run-time depth, and a shape or dtype the masks do not take, is refused
naming the node."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import ModelFileError, UnsupportedModelError

from .conftest import (EXPORTERS, assert_refused, check_against_onnxruntime,
                       check_against_onnxruntime_and_torch, check_on_both_backends, export,
                       export_dynamic, import_and_load, onnx, torch)

helper, TP = onnx.helper, onnx.TensorProto
RNG = np.random.default_rng(23)
BIG = np.finfo(np.float32).max
F = torch.nn.functional


def _floats(shape):
    """Random inputs, and one with float32 extremes, infinities, nan and -0.0 spread in."""
    feeds = [(RNG.standard_normal(shape) * 3).astype(np.float32) for _ in range(2)]
    x = RNG.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    picks = RNG.choice(flat.size, size=7, replace=False)
    flat[picks] = [BIG, -BIG, np.inf, -np.inf, np.nan, -0.0, 1e-45]
    return feeds + [x]


class _Triangles(torch.nn.Module):
    def forward(self, x):
        return torch.triu(x), torch.tril(x, -1), torch.triu(x, 2), torch.tril(x.transpose(1, 2))


class _Causal(torch.nn.Module):
    """Attention with the causal flag, and with a triu mask filled with -inf by hand."""

    def forward(self, q, k, v):
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        scores = q @ k.transpose(-1, -2)
        mask = torch.triu(torch.ones(q.size(-2), k.size(-2), dtype=torch.bool), 1)
        return a, scores.masked_fill(mask, float("-inf")).softmax(-1) @ v


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_torch_triu_and_tril_match_onnxruntime(dynamo, fold, optimize, tmp_path, signer):
    shape = (2, 4, 5)
    model = export(_Triangles(), [torch.randn(*shape)], tmp_path / "t.onnx", dynamo=dynamo,
                   fold=fold, optimize=optimize, input_names=["x"],
                   output_names=["y0", "y1", "y2", "y3"])
    _, loaded = import_and_load(model, tmp_path / "t.pha", signer)
    assert sum(n.op == "where" for n in loaded.graph.nodes) == 4
    check_against_onnxruntime(model, loaded, [{"x": x} for x in _floats(shape)])


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_causal_attention_matches_onnxruntime(dynamo, fold, optimize, tmp_path, signer):
    shape = (1, 2, 5, 8)
    model = export(_Causal(), [torch.randn(*shape)] * 3, tmp_path / "a.onnx", dynamo=dynamo,
                   fold=fold, optimize=optimize, input_names=["q", "k", "v"],
                   output_names=["a", "b"])
    _, loaded = import_and_load(model, tmp_path / "a.pha", signer)
    feeds = [{n: (RNG.standard_normal(shape) * s).astype(np.float32) for n in "qkv"}
             for s in (1.0, 4.0)]
    # the extremes where the logits are moderate: at 4x they reach exp's subnormal range,
    # where onnxruntime's softmax (by the CPU's kernels) and numpy's differ in relative terms,
    # and a weight of 1e-40 times 3.4e38 brings that difference to the output
    feeds[0]["v"].reshape(-1)[:3] = [BIG, -BIG, 1e-45]
    check_against_onnxruntime(model, loaded, feeds)


def _trilu_model(tmp_path, shape, k=None, upper=None, const_x=None, dtype=TP.FLOAT):
    """A one-node Trilu named ``node`` of input ``x`` (or the constant ``const_x``); k an
    initializer (None: omitted; "runtime": a graph input, "runtime-pair": one of shape
    [2])."""
    inputs, inits, names = [], [], ["x"]
    if const_x is None:
        inputs.append(helper.make_tensor_value_info("x", dtype, list(shape)))
    else:
        inits.append(onnx.numpy_helper.from_array(const_x, "x"))
        inputs.append(helper.make_tensor_value_info("z", TP.FLOAT, [1]))
    if isinstance(k, str):
        inputs.append(helper.make_tensor_value_info("k", TP.INT64, [2] if "pair" in k else []))
        names.append("k")
    elif k is not None:
        inits.append(onnx.numpy_helper.from_array(np.asarray(k), "k"))
        names.append("k")
    attrs = {} if upper is None else {"upper": upper}
    nodes = [helper.make_node("Trilu", names, ["t"], name="node", **attrs)]
    out = "t"
    if const_x is not None:  # a constant result added to a run-time value, so it is used
        nodes.append(helper.make_node("Add", ["t", "z"], ["s"], name="add"))
        out, shape = "s", const_x.shape
    graph = helper.make_graph(nodes, "g", inputs,
                              [helper.make_tensor_value_info(out, dtype, list(shape))],
                              initializer=inits)
    path = tmp_path / "trilu.onnx"
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString())
    return path


@pytest.mark.parametrize("upper", [None, 0, 1])
@pytest.mark.parametrize("k", [None, np.int64(0), np.int64(-2), np.int64(3), np.int64(99),
                               np.int64(-99), np.int64(2**62), np.int64(-2**63)])
def test_trilu_diagonals_match_onnxruntime(k, upper, tmp_path, signer):
    model = _trilu_model(tmp_path, (3, 4, 5), k, upper)
    _, loaded = import_and_load(model, tmp_path / "t.pha", signer)
    assert [n.op for n in loaded.graph.nodes] == ["where"]
    check_against_onnxruntime(model, loaded, [{"x": x} for x in _floats((3, 4, 5))])


@pytest.mark.parametrize("shape", [(3, 4, 5), ("n", "r", "c")], ids=["fixed", "run-time"])
@pytest.mark.parametrize("upper", [0, 1])
def test_a_run_time_k_matches_onnxruntime(shape, upper, tmp_path, signer):
    """k given when the call runs: the mask compares each column's position less its row's
    with it, over fixed dims or run-time ones, extreme k included."""
    model = _trilu_model(tmp_path, shape, "runtime", upper)
    _, loaded = import_and_load(model, tmp_path / "t.pha", signer)
    feeds = [{"x": x, "k": np.array(k, np.int64)} for x, k in zip(
        _floats((3, 4, 5)) * 2, (0, -2, 3, 2**62, -2**63, 99))]
    if shape[0] == "n":
        feeds.append({"x": _floats((2, 6, 1))[0], "k": np.array(-1, np.int64)})
    check_on_both_backends(model, loaded, feeds)


class _CachedDecoderStep(torch.nn.Module):
    """One step of a decoder over its cached keys and values: the new t steps attend to the
    p cached ones and causally to each other, ``ones(t, p + t).tril(p)`` (k = p, a run-time
    dim)."""

    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(8, 24)

    def forward(self, x, past_k, past_v):
        b, t, _ = x.shape
        q, k, v = (y.view(b, t, 2, 4).transpose(1, 2) for y in self.qkv(x).chunk(3, -1))
        k, v = torch.cat([past_k, k], 2), torch.cat([past_v, v], 2)
        p = past_k.shape[2]
        mask = torch.ones(t, p + t, dtype=torch.bool).tril(p)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return y.transpose(1, 2).reshape(b, t, 8), k, v


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_a_cached_decoder_step_takes_any_past_and_new_length(dynamo, tmp_path, signer):
    args = [torch.randn(1, 3, 8), torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)]
    model = export_dynamic(_CachedDecoderStep(), args, tmp_path / "d.onnx", dynamo=dynamo,
                           names=["x", "past_k", "past_v"], outputs=["y", "k", "v"],
                           dims=[{0: "b", 1: "t"}, {0: "b", 2: "p"}, {0: "b", 2: "p"}])
    _, loaded = import_and_load(model, tmp_path / "d.pha", signer,
                                golden_dims={"t": [1, 3], "p": [2, 6]})
    feeds = [{"x": RNG.standard_normal((b, t, 8)).astype(np.float32),
              "past_k": RNG.standard_normal((b, 2, p, 4)).astype(np.float32),
              "past_v": RNG.standard_normal((b, 2, p, 4)).astype(np.float32)}
             for b, t, p in ((1, 1, 1), (2, 4, 3), (1, 2, 9))]
    check_on_both_backends(model, loaded, feeds)


@pytest.mark.parametrize("dtype, np_dtype", [(TP.INT64, np.int64), (TP.BOOL, np.bool_)])
def test_trilu_of_integers_and_bools_matches_onnxruntime(dtype, np_dtype, tmp_path, signer):
    model = _trilu_model(tmp_path, ("n", 4, 4), np.int64(1), 0, dtype=dtype)
    _, loaded = import_and_load(model, tmp_path / "t.pha", signer)
    check_against_onnxruntime(model, loaded, [
        {"x": RNG.integers(-2**62, 2**62, (n, 4, 4)).astype(np_dtype)} for n in (1, 3)])


@pytest.mark.parametrize("upper, k", [(1, np.int64(1)), (0, np.int64(-1)), (1, None)])
def test_trilu_of_a_constant_folds(upper, k, tmp_path, signer):
    x = RNG.standard_normal((4, 6)).astype(np.float32)
    model = _trilu_model(tmp_path, None, k, upper, const_x=x)
    _, loaded = import_and_load(model, tmp_path / "t.pha", signer)
    assert [n.op for n in loaded.graph.nodes] == ["add"]
    check_against_onnxruntime(model, loaded, [{"z": np.array([v], np.float32)}
                                              for v in (0.0, -2.5)])


@pytest.mark.parametrize("kw, error, message", [
    ({"shape": (3, 4), "k": "runtime-pair"}, UnsupportedModelError,
     "k 'k' of int64 [2]: a run-time k must be one int64"),
    ({"shape": (5,)}, UnsupportedModelError, "input shape [5]: needs rank >= 2"),
    ({"shape": (3, 4), "upper": 2}, UnsupportedModelError, "attribute upper=2 must be 0 or 1"),
    ({"shape": (3, 4), "k": np.float32(1)}, ModelFileError, "k must be an integer, got float32"),
    ({"shape": None, "k": np.int64(0), "const_x": np.zeros(3, np.float32)}, ModelFileError,
     "Trilu of a rank-1 value"),
])
def test_what_trilu_refuses_names_node_and_value(kw, error, message, tmp_path):
    assert_refused(_trilu_model(tmp_path, **kw), error, "node 'node' (Trilu)", message)


# --- OneHot --------------------------------------------------------------------------------------


class _OneHot(torch.nn.Module):
    def forward(self, i):
        return F.one_hot(i, 6).float() * 2, F.one_hot(i[0], 7)


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_torch_one_hot_matches_onnxruntime(dynamo, fold, optimize, tmp_path, signer):
    shape = (3, 5)
    model = export(_OneHot(), [torch.randint(0, 6, shape)], tmp_path / "o.onnx", dynamo=dynamo,
                   fold=fold, optimize=optimize, input_names=["i"], output_names=["a", "b"])
    _, loaded = import_and_load(model, tmp_path / "o.pha", signer)
    check_against_onnxruntime(model, loaded, [{"i": RNG.integers(0, 6, shape)} for _ in "ab"])


def _one_hot_model(tmp_path, shape, depth, values, axis=None, dtype=TP.INT64,
                   runtime_depth=False):
    inputs = [helper.make_tensor_value_info("i", dtype, list(shape))]
    inits = [onnx.numpy_helper.from_array(np.asarray(values), "values")]
    if runtime_depth:
        inputs.append(helper.make_tensor_value_info("depth", TP.INT64, []))
    else:
        inits.append(onnx.numpy_helper.from_array(np.asarray(depth), "depth"))
    attrs = {} if axis is None else {"axis": axis}
    node = helper.make_node("OneHot", ["i", "depth", "values"], ["y"], name="node", **attrs)
    out = onnx.helper.np_dtype_to_tensor_dtype(np.asarray(values).dtype)
    rank = len(shape) + 1
    graph = helper.make_graph([node], "g", inputs,
                              [helper.make_tensor_value_info("y", out, [None] * rank)],
                              initializer=inits)
    path = tmp_path / "onehot.onnx"
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString())
    return path


@pytest.mark.parametrize("axis", [None, 0, 1, -2, 2])
@pytest.mark.parametrize("dtype, np_dtype", [(TP.INT64, np.int64), (TP.INT32, np.int32)])
def test_one_hot_negative_and_out_of_range_indices_match_onnxruntime(axis, dtype, np_dtype,
                                                                     tmp_path, signer):
    values = np.array([-1.5, BIG], np.float32)
    model = _one_hot_model(tmp_path, ("n", 4), np.array(5, np_dtype), values, axis, dtype)
    _, loaded = import_and_load(model, tmp_path / "o.pha", signer)
    edge = np.array([[-5, -1, 4, 5], [-6, 0, np.iinfo(np_dtype).max, np.iinfo(np_dtype).min],
                     [2, -3, 3, 1]], np_dtype)
    check_against_onnxruntime(model, loaded, [{"i": edge}, {"i": RNG.integers(
        -7, 7, (1, 4)).astype(np_dtype)}])


@pytest.mark.parametrize("axis", [None, 0])
def test_one_hot_of_float_indices_truncates_them_as_onnxruntime(axis, tmp_path, signer):
    model = _one_hot_model(tmp_path, ("n", 5), np.float32(4), np.array([0.0, 1.0], np.float32),
                           axis, TP.FLOAT)
    _, loaded = import_and_load(model, tmp_path / "o.pha", signer)
    edge = np.array([[0.0, 0.9, 1.5, -0.5, -1.5], [3.99, 4.0, -4.0, -4.5, 2.0],
                     [1e10, -1e10, 2.5, -3.7, -0.0]], np.float32)
    check_on_both_backends(model, loaded, [{"i": edge}, {"i": RNG.uniform(
        -6, 6, (2, 5)).astype(np.float32)}])


@pytest.mark.parametrize("depth, values", [  # combinations onnxruntime implements
    (np.float32(3.0), np.array([0, 1], np.int32)),
    (np.float32(4.0), np.array([1.0, 0.0], np.float32)),
    (np.array([4], np.int32), np.array([1.0, -1.0], np.float32))])
def test_one_hot_depth_and_values_dtypes_match_onnxruntime(depth, values, tmp_path, signer):
    model = _one_hot_model(tmp_path, (2, 3), depth, values)
    _, loaded = import_and_load(model, tmp_path / "o.pha", signer)
    check_against_onnxruntime(model, loaded, [{"i": RNG.integers(-5, 5, (2, 3))}])


@pytest.mark.parametrize("kw, error, message", [
    ({"runtime_depth": True}, UnsupportedModelError,
     "depth 'depth' must be a constant (known at import), but it is computed at run time"),
    ({"depth": np.float32(2.5)}, UnsupportedModelError, "depth 2.5 must be a whole number"),
    ({"depth": np.int64(0)}, UnsupportedModelError, "depth 0 must be in [1, "),
    ({"values": np.array([0.0, 1.0, 2.0], np.float32)}, UnsupportedModelError,
     "values of shape [3]: must be [off, on]"),
    ({"dtype": TP.UINT8}, UnsupportedModelError,
     "indices of dtype uint8: only int32, int64 and float32 indices"),
    ({"axis": 3}, ModelFileError, "axis 3 is out of range for rank 3"),
    ({"shape": ("n", "m")}, UnsupportedModelError,
     "indices of shape ['n', 'm'] have more than one run-time dim"),
])
def test_what_one_hot_refuses_names_node_and_value(kw, error, message, tmp_path):
    args = {"shape": (2, 3), "depth": np.int64(4), "values": np.array([0.0, 1.0], np.float32),
            **kw}
    assert_refused(_one_hot_model(tmp_path, **args), error, "node 'node' (OneHot)", message)


class _Diagonals(torch.nn.Module):
    def forward(self, x):
        return torch.diagonal(x), torch.diagonal(x, 1), torch.diagonal(x, -2)


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_torch_diagonal_matches_onnxruntime(dynamo, tmp_path, signer):
    """The dynamo exporter writes EyeLike; the legacy one EyeLike inside an If on the static
    shape (test_if.py)."""
    model = export(_Diagonals(), [torch.randn(4, 5)], tmp_path / "d.onnx", dynamo=dynamo,
                   input_names=["x"], output_names=["d0", "d1", "d2"])
    assert "EyeLike" in {n.op_type for n in onnx.load(model).graph.node} | {
        n.op_type for g in onnx.load(model).graph.node for a in g.attribute
        if a.type == onnx.AttributeProto.GRAPH for n in a.g.node}
    _, loaded = import_and_load(model, tmp_path / "d.pha", signer)
    assert "EyeLike" not in {n.op for n in loaded.graph.nodes}
    check_against_onnxruntime(model, loaded, [{"x": x} for x in _floats((4, 5))])


def _eye_model(tmp_path, shape, *, const: bool = False, **attrs):
    """``y = EyeLike(x) (as float32) + z``; x a graph input of ``shape`` or a constant."""
    inputs = [helper.make_tensor_value_info("z", TP.FLOAT, [3, 4])]
    inits = []
    if const:
        inits.append(onnx.numpy_helper.from_array(np.ones(shape, np.float32), "x"))
    else:
        inputs.append(helper.make_tensor_value_info("x", TP.FLOAT, list(shape)))
    nodes = [helper.make_node("EyeLike", ["x"], ["e"], name="node", **attrs),
             helper.make_node("Cast", ["e"], ["f"], name="cast", to=TP.FLOAT),
             helper.make_node("Add", ["f", "z"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "g", inputs,
                              [helper.make_tensor_value_info("y", TP.FLOAT, [3, 4])],
                              initializer=inits)
    path = tmp_path / "eye.onnx"
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString())
    return path


@pytest.mark.parametrize("const", [False, True])
@pytest.mark.parametrize("attrs", [{}, {"k": 1}, {"k": -2}, {"k": 9}, {"k": -9},
                                   {"dtype": TP.INT64, "k": 2}, {"dtype": TP.INT32}])
def test_eye_like_matches_onnxruntime(attrs, const, tmp_path, signer):
    model = _eye_model(tmp_path, (3, 4), const=const, **attrs)
    _, loaded = import_and_load(model, tmp_path / "e.pha", signer)
    assert [n.op for n in loaded.graph.nodes] == ["add"]  # the eye is a constant
    feeds = [{"z": z} for z in _floats((3, 4))]
    if not const:
        for feed in feeds:
            feed["x"] = RNG.standard_normal((3, 4)).astype(np.float32)
    check_against_onnxruntime(model, loaded, feeds)


def _eye_run_time_model(tmp_path, shape, **attrs):
    """``y = x * Cast(EyeLike(x), float)``, x of ``shape`` (run-time dims among them)."""
    nodes = [helper.make_node("EyeLike", ["x"], ["e"], name="node", **attrs),
             helper.make_node("Cast", ["e"], ["f"], name="cast", to=TP.FLOAT),
             helper.make_node("Mul", ["x", "f"], ["y"], name="mul")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT,
                                                                         list(shape))],
                              [helper.make_tensor_value_info("y", TP.FLOAT, list(shape))])
    path = tmp_path / "eye.onnx"
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString())
    return path


@pytest.mark.parametrize("shape", [("n", 4), (3, "m"), ("n", "m"), ("n", "n")])
@pytest.mark.parametrize("attrs", [{}, {"k": 1}, {"k": -2}, {"k": 9}, {"dtype": TP.INT64,
                                                                      "k": 2},
                                   {"dtype": TP.INT32, "k": -1}])
def test_eye_like_of_a_run_time_shape_matches_onnxruntime(attrs, shape, tmp_path, signer):
    """Over run-time dims the mask is computed when the call runs: sizes 0 to 6, on both
    backends."""
    model = _eye_run_time_model(tmp_path, shape, **attrs)
    golden = {d: [3, 5] for d in shape if type(d) is str}
    _, loaded = import_and_load(model, tmp_path / "e.pha", signer, golden_dims=golden)
    assert "equal" in {n.op for n in loaded.graph.nodes}
    sizes = {"n": (0, 1, 4, 6), "m": (2, 0, 6, 5)}
    feeds = [{"x": RNG.standard_normal([d if type(d) is int else sizes[d][i] for d in shape])
              .astype(np.float32)} for i in range(4)]
    check_on_both_backends(model, loaded, feeds)


class _RunTimeDiagonals(torch.nn.Module):
    def forward(self, x):
        return torch.cat([torch.diagonal(x), torch.diagonal(x, 1), torch.diagonal(x, -2)])


class _BatchedDiagonal(torch.nn.Module):
    def forward(self, x):
        return torch.diagonal(x @ x.transpose(1, 2), dim1=1, dim2=2)


@pytest.mark.parametrize("module, dims, shapes", [
    (_RunTimeDiagonals, {0: "t", 1: "t"}, [(1, 1), (2, 2), (3, 3), (7, 7)]),
    (_BatchedDiagonal, {0: "b", 1: "t"}, [(1, 1, 3), (2, 5, 3), (3, 8, 3)])],
    ids=["offsets", "batched"])
def test_torch_diagonal_of_run_time_dims_matches_onnxruntime_and_torch(module, dims, shapes,
                                                                       tmp_path, signer):
    """torch.diagonal of a run-time square (the dynamo exporter: an EyeLike of the square, a
    product and a sum, and the offset diagonals' lengths as the Min of the square's dims less
    the offset) against onnxruntime on both backends and torch."""
    first = torch.randn(*[6 if a in dims else d for a, d in enumerate(shapes[0])])
    model = export_dynamic(module(), [first], tmp_path / "d.onnx", dynamo=True, names=["x"],
                           dims=[dims])
    assert "EyeLike" in {n.op_type for n in onnx.load(model).graph.node}
    _, loaded = import_and_load(model, tmp_path / "d.pha", signer,
                                golden_dims={d: [4, 6] for d in dims.values()})
    check_against_onnxruntime_and_torch(
        model, loaded, [{"x": RNG.standard_normal(s).astype(np.float32)} for s in shapes],
        module(), 1e-5)


def test_legacy_torch_diagonal_of_a_run_time_square_is_refused(tmp_path):
    """The legacy exporter writes an If on whether the diagonal is empty: a condition known
    only when the call runs."""
    model = export_dynamic(_BatchedDiagonal(), [torch.randn(2, 6, 3)], tmp_path / "d.onnx",
                           dynamo=False, names=["x"], dims=[{1: "t"}])
    assert_refused(model, UnsupportedModelError, "node '/Equal' (Equal)",
                   "Equal of 't' and 0 in a shape holding run-time dims is known only at run "
                   "time")
