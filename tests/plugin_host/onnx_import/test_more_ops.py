"""Ops other exporters write (tf2onnx, keras2onnx, older toolchains): Softsign,
ThresholdedRelu, Shrink, Hardmax, Sum, Mean, Dropout (inference) and GlobalMaxPool, each a
hand-written one-node model compared with onnxruntime over every attribute variant and inputs
with nan, inf, -0.0 and float32 extremes; where onnxruntime's nan result follows its vector
lanes (Hardmax, GlobalMaxPool) the nan inputs are compared with torch instead. All-constant
Sum, Mean and the element-wise activations fold; an inference Dropout's mask is all true
(before opset 12, where onnxruntime gives it all false, a read one is refused); a training
Dropout of ratio 0 drops nothing, of another ratio it is refused, as inputs the mappings do
not take are, naming the node. Also: an opset-11
Hardmax keeps its 2-D meaning through the upgrade, and Flatten counts a negative axis back from
the rank."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import UnsupportedModelError
from plugin_host.executor import Executor
from plugins.numpy_backend import NumpyBackend

from .conftest import (assert_refused, check_against_onnxruntime, import_and_load, onnx,
                       onnxruntime_outputs, torch)

helper, TP = onnx.helper, onnx.TensorProto
RNG = np.random.default_rng(57)
BIG = np.finfo(np.float32).max
SPECIAL = [BIG, -BIG, np.inf, -np.inf, np.nan, -0.0, 0.0, 1e-45, -1e-45]


def _model(tmp_path, op, inputs: dict, *, outputs=("y",), read=None, dtype=TP.FLOAT,
           opset: int = 18, name: str = "m", **attrs):
    """A one-node ``op`` named ``node``. ``inputs`` maps each input name to a shape (a graph
    input; a str dim is symbolic), an array (an initializer) or None (omitted: an empty name).
    ``read`` are the node outputs that are graph outputs (default: the first). An all-constant
    node is added to a graph input ``z`` so that the graph has one."""
    graph_inputs, inits, names = [], [], []
    for tensor, value in inputs.items():
        if value is None:
            names.append("")
            continue
        names.append(tensor)
        if isinstance(value, np.ndarray):
            inits.append(onnx.numpy_helper.from_array(value, tensor))
        else:
            graph_inputs.append(helper.make_tensor_value_info(tensor, dtype, list(value)))
    nodes = [helper.make_node(op, names, list(outputs), name="node", **attrs)]
    read = list(read or outputs[:1])
    if not graph_inputs:
        graph_inputs.append(helper.make_tensor_value_info("z", dtype, []))
        nodes.append(helper.make_node("Add", [read[0], "z"], ["s"], name="add"))
        read[0] = "s"
    graph = helper.make_graph(nodes, "g", graph_inputs,
                              [helper.make_tensor_value_info(o, TP.BOOL if o == "mask"
                                                             else dtype, None)
                               for o in read], initializer=inits)
    path = tmp_path / f"{name}.onnx"  # the outputs' shapes by ONNX's shape inference
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    path.write_bytes(onnx.shape_inference.infer_shapes(model).SerializeToString())
    return path


def _values(shape, dtype=np.float32, special=True, nan=True, ties=False):
    """Random values of ``shape``: normal (``ties``: small integers, so maxima tie), with the
    special values spread in (``nan=False``: all but nan)."""
    if ties:
        x = np.asarray(RNG.integers(-2, 3, size=shape), dtype)
    else:
        x = np.asarray(RNG.standard_normal(shape) * 3, dtype)
    if special:
        pool = [v for v in SPECIAL if nan or not np.isnan(v)]
        flat = x.reshape(-1)
        picks = RNG.choice(flat.size, size=min(len(pool), flat.size), replace=False)
        flat[picks] = np.array(pool[:picks.size]).astype(dtype)
    return x


def _feeds(shapes: dict, n: int = 3, **kw) -> list[dict[str, np.ndarray]]:
    """``n`` feeds: plain random ones, then ones with the special values."""
    return [{k: _values(s, special=i > 0, **kw) for k, s in shapes.items()} for i in range(n)]


def _check(tmp_path, signer, model, feeds):
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    check_against_onnxruntime(model, loaded, feeds)
    return loaded


def _run(loaded, feed):
    return Executor(loaded.graph, NumpyBackend()).run(dict(feed))


# --- element-wise activations --------------------------------------------------------------------


def test_softsign_matches_onnxruntime(tmp_path, signer):
    """Bit for bit (onnxruntime multiplies by the reciprocal); an infinite x gives nan."""
    model = _model(tmp_path, "Softsign", {"x": (16, 16)})
    feeds = _feeds({"x": (16, 16)}, 4)
    loaded = _check(tmp_path, signer, model, feeds)
    assert [n.op for n in loaded.graph.nodes] == ["abs", "add", "reciprocal", "mul"]
    for feed in feeds:
        np.testing.assert_array_equal(_run(loaded, feed)["y"],
                                      onnxruntime_outputs(model, feed)["y"])


@pytest.mark.parametrize("alpha", [None, 0.5, -2.0, 0.0, 3.4e38])
def test_thresholded_relu_matches_onnxruntime(alpha, tmp_path, signer):
    attrs = {} if alpha is None else {"alpha": alpha}
    model = _model(tmp_path, "ThresholdedRelu", {"x": (5, 7)}, **attrs)
    feeds = _feeds({"x": (5, 7)})
    edge = 1.0 if alpha is None else alpha  # values at the threshold give 0
    feeds[1]["x"][0, :3] = np.float32(edge), np.nextafter(np.float32(edge), np.float32(np.inf)), \
        np.nextafter(np.float32(edge), np.float32(-np.inf))
    _check(tmp_path, signer, model, feeds)


@pytest.mark.parametrize("lambd, bias", [(None, None), (1.5, 0.25), (0.0, 0.0), (0.5, -1.0),
                                         (2.0, 3.0), (1e38, 1e38)])
def test_shrink_matches_onnxruntime(lambd, bias, tmp_path, signer):
    attrs = {k: v for k, v in (("lambd", lambd), ("bias", bias)) if v is not None}
    model = _model(tmp_path, "Shrink", {"x": (5, 7)}, **attrs)
    feeds = _feeds({"x": (5, 7)})
    edge = np.float32(0.5 if lambd is None else lambd)
    feeds[1]["x"][0, :4] = edge, -edge, np.nextafter(edge, np.float32(np.inf)), \
        np.nextafter(-edge, np.float32(-np.inf))
    _check(tmp_path, signer, model, feeds)


@pytest.mark.parametrize("axis", [None, 0, 1, 2, -2, -3])
def test_hardmax_matches_onnxruntime(axis, tmp_path, signer):
    """Every axis of a rank-3 input; ties (small integers) put the 1 at the first maximum;
    inf, -inf, -0.0 (equal to 0.0) and extremes without nan match onnxruntime exactly."""
    shape = (3, 4, 5)
    model = _model(tmp_path, "Hardmax", {"x": shape}, **({} if axis is None else
                                                          {"axis": axis}))
    feeds = _feeds({"x": shape}, 2, nan=False) + _feeds({"x": shape}, 3, nan=False, ties=True)
    feeds.append({"x": np.full(shape, -np.inf, np.float32)})
    feeds.append({"x": np.where(RNG.random(shape) < 0.5, -0.0, 0.0).astype(np.float32)})
    loaded = _check(tmp_path, signer, model, feeds)
    assert [n.op for n in loaded.graph.nodes] == ["argmax", "equal", "cast"]


@pytest.mark.parametrize("axis", [-1, 0])
def test_hardmax_puts_a_nan_where_torch_argmax_does(axis, tmp_path, signer):
    """onnxruntime's nan result follows its vector lanes; the import's is torch's
    ``one_hot(argmax(x))``: the first nan along the axis."""
    shape = (6, 9)
    model = _model(tmp_path, "Hardmax", {"x": shape}, axis=axis)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    for _ in range(3):
        x = _values(shape, ties=True)
        x[RNG.random(shape) < 0.2] = np.nan
        t = torch.from_numpy(x)
        want = torch.nn.functional.one_hot(t.argmax(axis), shape[axis]).to(t.dtype)
        want = want if axis in (-1, 1) else want.T
        np.testing.assert_array_equal(_run(loaded, {"x": x})["y"], want.numpy())


# --- variadic Sum and Mean -----------------------------------------------------------------------


_SHAPES = {
    "one": [(3, 4)],
    "two": [(3, 4), (3, 4)],
    "three-broadcast": [(2, 3, 4), (4,), (3, 1)],
    "four-scalar": [(3, 4), (), (1, 4), (2, 1, 1)],
}


@pytest.mark.parametrize("op", ["Sum", "Mean"])
@pytest.mark.parametrize("case", list(_SHAPES))
def test_sum_and_mean_match_onnxruntime(op, case, tmp_path, signer):
    """In input order, broadcasting; Mean scales by 1/count as onnxruntime (bit for bit, so
    the extremes that overflow in one order and not another agree too)."""
    shapes = {f"x{i}": s for i, s in enumerate(_SHAPES[case])}
    model = _model(tmp_path, op, shapes)
    feeds = _feeds(shapes, 4)
    big = {k: np.asarray(np.full(s, BIG / 2, np.float32) * RNG.choice([-1, 1, 2], s),
                         np.float32) for k, s in shapes.items()}
    loaded = _check(tmp_path, signer, model, feeds + [big])
    for feed in feeds + [big]:
        got = _run(loaded, feed)["y"]
        np.testing.assert_array_equal(got, onnxruntime_outputs(model, feed)["y"])


# --- Identity ------------------------------------------------------------------------------------


def test_identities_add_no_node_but_where_an_output_needs_its_own_name(tmp_path, signer):
    """A chain of 500 Identity nodes (unnamed, as some exporters write them) before a Relu is
    the Relu alone; an output that is an Identity of a graph input, or of another output, gets
    the one node that gives it its own name."""
    chain = [helper.make_node("Identity", ["x" if i == 0 else f"c{i - 1}"], [f"c{i}"])
             for i in range(500)]
    nodes = chain + [helper.make_node("Relu", ["c499"], ["y"], name="relu"),
                     helper.make_node("Identity", ["x"], ["x_again"]),
                     helper.make_node("Identity", ["y"], ["y_again"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info(o, TP.FLOAT, [2, 3])
                               for o in ("y", "x_again", "y_again")])
    model = tmp_path / "ids.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    loaded = _check(tmp_path, signer, model, _feeds({"x": (2, 3)}))
    assert sorted(n.op for n in loaded.graph.nodes) == ["identity", "identity", "relu"]


# --- Dropout -------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["bare", "ratio", "ratio-and-false", "false-only",
                                  "mask-unread", "seed"])
def test_inference_dropout_is_identity(case, tmp_path, signer):
    ratio = np.array(0.3, np.float32)
    false = np.array(False)
    inputs = {"bare": {}, "ratio": {"r": ratio}, "ratio-and-false": {"r": ratio, "t": false},
              "false-only": {"r": None, "t": false}, "mask-unread": {"r": ratio},
              "seed": {"r": ratio}}[case]
    model = _model(tmp_path, "Dropout", {"x": (4, 5), **inputs},
                   outputs=("y", "mask") if case == "mask-unread" else ("y",),
                   **({"seed": 7} if case == "seed" else {}))
    loaded = _check(tmp_path, signer, model, _feeds({"x": (4, 5)}))
    assert [n.op for n in loaded.graph.nodes] in ([], ["identity"])


@pytest.mark.parametrize("shape", [(4, 5), ("b", 5), ("b", "t")])
@pytest.mark.parametrize("opset", [12, 13])
def test_an_inference_dropouts_mask_is_all_true(shape, opset, tmp_path, signer):
    """Read as a graph output and by a node (cast and multiplied), over fixed and run-time
    dims, as onnxruntime gives it (opset 12 through the upgrade to 13)."""
    path = _model(tmp_path, "Dropout", {"x": shape, "r": np.array(0.3, np.float32)},
                  outputs=("y", "mask"), read=["y", "mask"], opset=opset)
    m = onnx.load(path)
    m.graph.node.extend([helper.make_node("Cast", ["mask"], ["m"], to=TP.FLOAT),
                         helper.make_node("Mul", ["y", "m"], ["kept"])])
    m.graph.output.append(helper.make_tensor_value_info("kept", TP.FLOAT, None))
    path.write_bytes(onnx.shape_inference.infer_shapes(m).SerializeToString())
    sizes = [s for s in ((4, 5), (2, 5), (3, 5))
             if all(d == e or type(d) is str for d, e in zip(shape, s))]
    loaded = _check(tmp_path, signer, path, [{"x": _values(s)} for s in sizes])
    got = _run(loaded, {"x": np.full((4, 5), np.nan, np.float32)})["mask"]
    assert got.dtype == np.bool_ and got.shape == (4, 5) and got.all()


@pytest.mark.parametrize("opset", [7, 10, 11])
def test_a_read_mask_before_opset_12_is_refused(opset, tmp_path, signer):
    """onnxruntime gives it all false (float zeros at opset 7), opset 12 on all true, which the
    upgrade would make of it; unread, the Dropout builds."""
    for read in (["y"], ["y", "mask"]):
        path = _model(tmp_path, "Dropout", {"x": (4, 5)}, outputs=("y", "mask"), read=read,
                      opset=opset, ratio=0.3)
        if opset < 10 and len(read) > 1:  # the mask is x's type
            m = onnx.load(path)
            m.graph.output[1].CopyFrom(helper.make_tensor_value_info("mask", TP.FLOAT, [4, 5]))
            onnx.save(m, path)
        if len(read) == 1:
            _check(tmp_path, signer, path, _feeds({"x": (4, 5)}, n=1))
            continue
        assert onnxruntime_outputs(path, {"x": _values((4, 5))})["mask"].any() == np.False_
        assert_refused(path, UnsupportedModelError, "node 'node' (Dropout)",
                       f"the mask of a Dropout of opset {opset} is read: onnxruntime gives it "
                       f"all false in inference, opset 12 on all true")


@pytest.mark.parametrize("shape", [(4, 5), ("b", 5)])
def test_a_training_dropout_of_ratio_0_is_identity(shape, tmp_path, signer):
    """Nothing dropped: x itself and the mask all true, as onnxruntime gives it."""
    path = _model(tmp_path, "Dropout", {"x": shape, "r": np.array(0.0, np.float32),
                                        "t": np.array(True)}, outputs=("y", "mask"),
                  read=["y", "mask"])
    loaded = _check(tmp_path, signer, path, [{"x": _values(s)} for s in ((4, 5), (2, 5))
                                             if type(shape[0]) is str or s[0] == 4])
    got = _run(loaded, {"x": np.full((4, 5), np.nan, np.float32)})["mask"]
    assert got.dtype == np.bool_ and got.all()


@pytest.mark.parametrize("case", ["true", "default-ratio", "runtime", "runtime-ratio"])
def test_training_dropout_is_refused(case, tmp_path):
    inputs = {"x": (4, 5), "r": np.array(0.3, np.float32)}
    if case == "true":
        inputs["t"] = np.array(True)
        message = "training_mode is true with ratio 0.3: dropping is random"
    elif case == "default-ratio":
        inputs = {"x": (4, 5), "r": None, "t": np.array(True)}
        message = "training_mode is true with ratio 0.5: dropping is random"
    elif case == "runtime-ratio":
        inputs = {"x": (4, 5), "r": (), "t": np.array(True)}
        message = "training_mode is true and the ratio 'r' is computed at run time"
    else:
        message = "training_mode 't' is computed at run time"
    path = _model(tmp_path, "Dropout", inputs, outputs=("y", "mask"))
    if case == "runtime":  # a bool graph input
        m = onnx.load(path)
        m.graph.input.append(helper.make_tensor_value_info("t", TP.BOOL, []))
        m.graph.node[0].input.append("t")
        onnx.save(m, path)
    assert_refused(path, UnsupportedModelError, "node 'node' (Dropout)", message)


# --- GlobalMaxPool -------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(2, 3, 7), (2, 3, 4, 5), (1, 2, 3, 4, 2), (2, 3, 1, 1)])
def test_global_max_pool_matches_onnxruntime(shape, tmp_path, signer):
    """1, 2 and 3 spatial axes, inf, -inf, -0.0 and extremes (no nan, no plane of only -inf:
    onnxruntime's kernel differs there, see the next test)."""
    model = _model(tmp_path, "GlobalMaxPool", {"x": shape})
    feeds = _feeds({"x": shape}, 4, nan=False)
    for feed in feeds:
        planes = feed["x"].reshape(shape[0] * shape[1], -1)
        planes[np.all(planes == -np.inf, axis=1), 0] = 1.0
    loaded = _check(tmp_path, signer, model, feeds)
    assert [n.op for n in loaded.graph.nodes] == ["amax"]


def test_global_max_pool_takes_nan_and_minus_inf_as_torch(tmp_path, signer):
    """A nan in a plane gives nan and a plane of only -inf gives -inf, as torch.amax (and the
    import's MaxPool); onnxruntime gives the lowest finite float for the latter."""
    shape = (2, 3, 4, 5)
    model = _model(tmp_path, "GlobalMaxPool", {"x": shape})
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    x = _values(shape)
    x[0, 1] = -np.inf
    x[1, 2, 0, 0] = np.nan
    want = torch.from_numpy(x).amax(dim=(2, 3), keepdim=True).numpy()
    got = _run(loaded, {"x": x})["y"]
    np.testing.assert_array_equal(got, want)
    assert got[0, 1, 0, 0] == -np.inf and np.isnan(got[1, 2, 0, 0])


# --- folding -------------------------------------------------------------------------------------


@pytest.mark.parametrize("op, count, attrs", [
    ("Sum", 3, {}), ("Mean", 3, {}), ("Sum", 1, {}), ("Mean", 2, {}), ("Softsign", 1, {}),
    ("ThresholdedRelu", 1, {"alpha": 0.5}), ("Shrink", 1, {"lambd": 1.0, "bias": 0.5})])
def test_all_constant_inputs_fold(op, count, attrs, tmp_path, signer):
    """Nothing of the node reaches the graph: only the added ``z``; the folded value is
    onnxruntime's bit for bit (z = 0 adds nothing), the order of Sum's adds and Mean's
    scaling included."""
    inputs = {f"c{i}": _values((16, 16), special=True) for i in range(count)}
    if op in ("Sum", "Mean") and count > 1:  # values whose sum overflows in one order only
        inputs["c0"][0, :3], inputs["c1"][0, :3] = BIG, BIG
        inputs[f"c{count - 1}"][0, :3] = -BIG
    model = _model(tmp_path, op, inputs, **attrs)
    feeds = [{"z": _values((), special=False)}, {"z": np.zeros((), np.float32)}]
    loaded = _check(tmp_path, signer, model, feeds)
    assert [n.op for n in loaded.graph.nodes] == ["add"]
    np.testing.assert_array_equal(_run(loaded, feeds[1])["s"],
                                  onnxruntime_outputs(model, feeds[1])["s"])


# --- refusals ------------------------------------------------------------------------------------


def _refusal_cases():
    return {
        "hardmax-runtime-axis": ("Hardmax", {"x": (3, "n")}, {}, TP.FLOAT,
                                 "the dim of axis 1 must be static"),
        "hardmax-int": ("Hardmax", {"x": (3, 4)}, {}, TP.INT64, "needs a float tensor"),
        "shrink-int": ("Shrink", {"x": (3, 4)}, {}, TP.INT32, "needs a float tensor"),
        "shrink-inf": ("Shrink", {"x": (3, 4)}, {"lambd": float("inf")}, TP.FLOAT,
                       "attribute lambd=inf is not finite"),
        "thresholded-relu-nan": ("ThresholdedRelu", {"x": (3, 4)}, {"alpha": float("nan")},
                                 TP.FLOAT, "attribute alpha=nan is not finite"),
        "mean-int": ("Mean", {"a": (3, 4), "b": (3, 4)}, {}, TP.INT64,
                     "Mean needs float tensors"),
        "global-max-pool-rank-2": ("GlobalMaxPool", {"x": (3, 4)}, {}, TP.FLOAT,
                                   "needs (N, C, *spatial)"),
    }


@pytest.mark.parametrize("case", list(_refusal_cases()))
def test_refusals_name_the_node(case, tmp_path):
    op, inputs, attrs, dtype, message = _refusal_cases()[case]
    model = _model(tmp_path, op, inputs, dtype=dtype, **attrs)
    assert_refused(model, UnsupportedModelError, f"node 'node' ({op})", message)


@pytest.mark.parametrize("op, inputs, attrs", [
    ("Softsign", {"x": (4, 6)}, {}), ("ThresholdedRelu", {"x": (4, 6)}, {"alpha": 0.5}),
    ("Shrink", {"x": (4, 6)}, {"lambd": 1.0, "bias": 0.5}), ("Hardmax", {"x": (4, 6)}, {}),
    ("Sum", {"a": (4, 6), "b": (6,), "c": (4, 1)}, {}),
    ("Mean", {"a": (4, 6), "b": (6,), "c": (4, 1)}, {}),
    ("Dropout", {"x": (4, 6)}, {}), ("GlobalMaxPool", {"x": (2, 3, 4, 6)}, {})])
def test_the_onnxruntime_backend_runs_the_same_glue_ops(op, inputs, attrs, tmp_path, signer):
    from plugins.onnxruntime_backend import OnnxruntimeBackend

    model = _model(tmp_path, op, inputs, **attrs)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    nan = op not in ("Hardmax", "GlobalMaxPool")  # their nan results differ (see above)
    check_against_onnxruntime(model, loaded, _feeds(inputs, 3, nan=nan),
                              backend=OnnxruntimeBackend())


@pytest.mark.parametrize("axis", [None, 0, 1, 2, -2])
@pytest.mark.parametrize("batch", ["static", "symbolic"])
def test_an_opset_11_hardmax_over_the_flattened_trailing_axes(axis, batch, tmp_path, signer):
    """Before opset 13 Hardmax took the input as 2-D (the axes before ``axis`` one dim, the
    rest the other; default 1); the version converter keeps the node as it is, the upgrade
    rewrites it to keep that meaning."""
    shape = (2, 3, 4)
    model = _model(tmp_path, "Hardmax", {"x": ("n", 3, 4) if batch == "symbolic" else shape},
                   opset=11, **({} if axis is None else {"axis": axis}))
    if batch == "symbolic" and axis == 0:  # a row of a run-time length: not mapped
        assert_refused(model, UnsupportedModelError, "node 'node' (Hardmax)",
                       "input shape [1, '12*n']: the dim of axis 1 must be static")
        return
    _check(tmp_path, signer, model, _feeds({"x": shape}, 3, nan=False, ties=True))


@pytest.mark.parametrize("shape, axis", [((2, 3, 4), a) for a in (-3, -2, -1, 0, 1, 2, 3)]
                         + [((5,), a) for a in (-1, 0, 1)])
@pytest.mark.parametrize("const", [False, True])
def test_flatten_counts_a_negative_axis_back_from_the_rank(shape, axis, const, tmp_path,
                                                           signer):
    """Flatten's axis -k is rank - k (its range is [-rank, rank]), mapped and folded; a vector
    flattened at axis 1 (its rank) is a column."""
    x = _values(shape) if const else shape
    model = _model(tmp_path, "Flatten", {"x": x}, axis=axis)
    feeds = [{"z": np.zeros((), np.float32)}] if const else _feeds({"x": shape})
    _check(tmp_path, signer, model, feeds)
