"""LRN, LpNormalization, MeanVarianceNormalization and GlobalLpPool (as tf2onnx, keras2onnx,
caffe2 and older toolchains write them: one node each) imported onto glue ops and compared with
onnxruntime on every attribute variant, with nan, inf, -0.0, float32 extremes, zero and
constant slices; what onnxruntime refuses (an even LRN size, a p other than 1 or 2, ...) and
what the import cannot map (a run-time channel dim) is refused naming the node."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import ModelFileError, UnsupportedModelError

from .conftest import (assert_refused, check_against_onnxruntime, float64_inside,
                       import_and_load, onnx, onnxruntime_outputs)

helper, TP = onnx.helper, onnx.TensorProto
RNG = np.random.default_rng(31)
BIG = np.finfo(np.float32).max
#: values spread into one feed of each test
EXTREMES = [BIG, -BIG, np.inf, -np.inf, np.nan, -0.0, 1e-45, 1e10, -1e20, 1e-30]


def _model(tmp_path, op: str, shape, *, dtype=TP.FLOAT, opset: int = 18, **attrs):
    """A one-node ``op`` named ``node`` of graph input ``x`` (``shape``: ints, or names for
    run-time dims) to output ``y`` of the same shape."""
    node = helper.make_node(op, ["x"], ["y"], name="node", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", dtype,
                                                                          list(shape))],
                              [helper.make_tensor_value_info("y", dtype, list(shape))])
    path = tmp_path / f"{op}.onnx"
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString())
    return path


def _floats(shape):
    """Two random inputs (one far from zero on average), and one with the extremes spread in."""
    feeds = [(RNG.standard_normal(shape) * 3).astype(np.float32),
             (RNG.standard_normal(shape) + 40).astype(np.float32)]
    x = RNG.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    picks = RNG.choice(flat.size, size=min(flat.size, len(EXTREMES)), replace=False)
    flat[picks] = EXTREMES[:len(picks)]
    return feeds + [x]


def _ops(loaded) -> list[str]:
    return [n.op for n in loaded.graph.nodes]


def _onnxruntime_refuses(model, shape) -> None:
    """onnxruntime, the reference, cannot run ``model`` either (at load or at run time)."""
    with pytest.raises(Exception) as info:
        onnxruntime_outputs(model, {"x": np.ones(shape, np.float32)})
    assert type(info.value).__module__.startswith("onnxruntime"), info.value


# --- LRN -----------------------------------------------------------------------------------------

LRN_ATTRS = [{}, {"alpha": 0.5, "beta": 0.6, "bias": 2.0}, {"alpha": 3.0, "beta": 2.0},
             {"bias": 0.0}, {"alpha": 1e-3, "beta": 1.0, "bias": -1.0}]


def _lrn_feeds(shape):
    """:func:`_floats`, plus a feed with a channel of zeros, one of -0.0, a channel holding a
    large but finite value (its square's rounding error stays behind in onnxruntime's running
    sum) and one of a square that overflows (nan behind it)."""
    x = RNG.standard_normal(shape).astype(np.float32)
    x[:, 0] = 0.0
    if shape[1] > 1:
        x[0, 1] = -0.0
        x[-1, 1, 0, 0] = 1e10
        x[0, shape[1] // 2, -1, -1] = 2e19
    return _floats(shape) + [x]


@pytest.mark.parametrize("attrs", LRN_ATTRS, ids=lambda a: ",".join(map(str, a.values())) or
                         "defaults")
@pytest.mark.parametrize("size", [1, 3, 5])
def test_lrn_matches_onnxruntime(size, attrs, tmp_path, signer):
    shape = (2, 7, 3, 4)
    model = _model(tmp_path, "LRN", shape, size=size, **attrs)
    _, loaded = import_and_load(model, tmp_path / "n.pha", signer)
    assert "cumsum" in _ops(loaded)
    check_against_onnxruntime(model, loaded, [{"x": x} for x in _lrn_feeds(shape)])


@pytest.mark.parametrize("channels, size", [(1, 1), (1, 5), (2, 3), (3, 7), (4, 9), (16, 5)])
def test_lrn_windows_wider_than_the_channels_match_onnxruntime(channels, size, tmp_path,
                                                                signer):
    shape = (2, channels, 2, 3)
    model = _model(tmp_path, "LRN", shape, size=size, alpha=0.5)
    _, loaded = import_and_load(model, tmp_path / "n.pha", signer)
    check_against_onnxruntime(model, loaded, [{"x": x} for x in _lrn_feeds(shape)])


def test_lrn_with_run_time_batch_and_spatial_dims_matches_onnxruntime(tmp_path, signer):
    model = _model(tmp_path, "LRN", ("n", 6, "h", "w"), size=3, alpha=0.5, beta=0.6)
    _, loaded = import_and_load(model, tmp_path / "n.pha", signer)
    check_against_onnxruntime(model, loaded, [{"x": x} for shape in ((1, 6, 2, 5), (3, 6, 4, 1))
                                              for x in _lrn_feeds(shape)])


def test_lrn_of_an_old_opset_matches_onnxruntime(tmp_path, signer):
    """LRN-1 (opset 11, as tf2onnx writes it) is upgraded and maps the same."""
    shape = (1, 5, 4, 4)
    model = _model(tmp_path, "LRN", shape, opset=11, size=5, alpha=2e-4, beta=0.75, bias=1.0)
    _, loaded = import_and_load(model, tmp_path / "n.pha", signer)
    check_against_onnxruntime(model, loaded, [{"x": x} for x in _lrn_feeds(shape)])


@pytest.mark.parametrize("size", [2, 4, 0, -3])
def test_lrn_of_a_size_onnxruntime_refuses_is_refused(size, tmp_path):
    model = _model(tmp_path, "LRN", (1, 4, 2, 2), size=size)
    _onnxruntime_refuses(model, (1, 4, 2, 2))
    assert_refused(model, UnsupportedModelError, "node 'node' (LRN)",
                   f"attribute size={size}: onnxruntime, the reference, computes LRN for an odd "
                   f"size >= 1 only")


@pytest.mark.parametrize("shape", [(2, 5, 3), (1, 6, 2, 3, 4)])
def test_lrn_of_another_rank_than_4_is_refused(shape, tmp_path):
    model = _model(tmp_path, "LRN", shape, size=3)
    _onnxruntime_refuses(model, shape)
    assert_refused(model, UnsupportedModelError, "node 'node' (LRN)",
                   f"input shape {list(shape)}: onnxruntime computes LRN of an (N, C, H, W) "
                   f"input only")


@pytest.mark.parametrize("name, value", [("alpha", 0.0), ("alpha", -1e-4), ("beta", 0.0),
                                         ("beta", -0.75)])
def test_lrn_alpha_and_beta_must_be_positive(name, value, tmp_path):
    model = _model(tmp_path, "LRN", (1, 4, 2, 2), size=3, **{name: value})
    _onnxruntime_refuses(model, (1, 4, 2, 2))
    assert_refused(model, UnsupportedModelError, "node 'node' (LRN)",
                   f"attribute {name}={value} must be finite and > 0")


def test_lrn_refusals_name_the_node(tmp_path):
    assert_refused(_model(tmp_path, "LRN", (1, 4, 2, 2)), ModelFileError,
                   "Name: node OpType: LRN", "Required attribute 'size' is missing")
    assert_refused(_model(tmp_path, "LRN", (1, "c", 2, 2), size=3), UnsupportedModelError,
                   "node 'node' (LRN)", "input shape [1, 'c', 2, 2]: the channel dim must be "
                   "static")
    assert_refused(_model(tmp_path, "LRN", (1, 4, 2, 2), size=3, bias=float("inf")),
                   UnsupportedModelError, "node 'node' (LRN)", "attribute bias=inf must be "
                   "finite")
    assert_refused(float64_inside(_model(tmp_path, "LRN", (1, 4, 2, 2), dtype=TP.DOUBLE,
                                         size=3)),
                   UnsupportedModelError, "node 'node' (LRN)", "of dtype float64: only float32")


# --- LpNormalization ---------------------------------------------------------------------------


def _lp_feeds(shape, axis: int):
    """:func:`_floats`, plus one whose lines along ``axis`` are, in turn: zeros, -0.0, one
    nan, one inf, one float32 max (its square overflows: the others become 0), all 1e20
    (likewise), all 1e-30 (their squares underflow: zeros), a lone 1e-45 and ordinary ones."""
    x = RNG.standard_normal(shape).astype(np.float32)
    lines = np.moveaxis(x, axis, -1).reshape(-1, shape[axis])  # a copy
    special = [np.zeros(shape[axis]), np.full(shape[axis], -0.0)]
    for value in (np.nan, np.inf, -BIG, 1e-45):
        line = np.zeros(shape[axis]) if value == 1e-45 else RNG.standard_normal(shape[axis])
        line[-1] = value
        special.append(line)
    special += [np.full(shape[axis], 1e20), np.full(shape[axis], -1e-30)]
    lines[:len(special)] = special[:len(lines)]
    moved = list(np.moveaxis(x, axis, -1).shape)
    x = np.ascontiguousarray(np.moveaxis(lines.reshape(moved), -1, axis))
    return _floats(shape) + [x]


@pytest.mark.parametrize("p", [None, 1, 2])
@pytest.mark.parametrize("axis", [None, 0, 1, 2, -1, -3])
def test_lp_normalization_matches_onnxruntime(axis, p, tmp_path, signer):
    shape = (3, 4, 5)
    attrs = {k: v for k, v in (("axis", axis), ("p", p)) if v is not None}
    model = _model(tmp_path, "LpNormalization", shape, **attrs)
    _, loaded = import_and_load(model, tmp_path / "n.pha", signer)
    assert "where" in _ops(loaded) and ("sqrt" in _ops(loaded)) == (p != 1)
    feeds = _lp_feeds(shape, -1 if axis is None else axis)
    check_against_onnxruntime(model, loaded, [{"x": x} for x in feeds])


def test_lp_normalization_of_opset_22_with_run_time_dims_matches_onnxruntime(tmp_path, signer):
    model = _model(tmp_path, "LpNormalization", ("n", 6), opset=22, axis=1, p=1)
    _, loaded = import_and_load(model, tmp_path / "n.pha", signer)
    check_against_onnxruntime(model, loaded, [{"x": x} for n in (1, 9)
                                              for x in _lp_feeds((n, 6), 1)])


@pytest.mark.parametrize("p", [3, 0, -1])
def test_lp_normalization_of_another_p_is_refused(p, tmp_path):
    model = _model(tmp_path, "LpNormalization", (2, 3), p=p)
    _onnxruntime_refuses(model, (2, 3))
    assert_refused(model, UnsupportedModelError, "node 'node' (LpNormalization)",
                   f"attribute p={p}: only the L1 and L2 norms (p 1 or 2) are defined")


def test_lp_normalization_refusals_name_the_node(tmp_path):
    assert_refused(_model(tmp_path, "LpNormalization", (2, 3), axis=2), ModelFileError,
                   "node 'node' (LpNormalization)", "axis 2 is out of range for rank 2")
    assert_refused(_model(tmp_path, "LpNormalization", (2, 3), dtype=TP.INT64),
                   UnsupportedModelError, "node 'node' (LpNormalization)",
                   "of dtype int64: needs a float tensor")


# --- MeanVarianceNormalization -------------------------------------------------------------------


def _mvn_feeds(shape):
    """:func:`_floats`, plus two with constant slices (a channel of 2.0; a line of -0.0 across
    the channels at one pixel, and zeros on the last pixel): 0 / 0 where a normalized group
    is constant."""
    constant, zeros = (RNG.standard_normal(shape).astype(np.float32) for _ in range(2))
    constant[:, 1] = 2.0
    zeros[:, :, 0, 0] = -0.0
    zeros[..., -1, -1] = 0.0
    return _floats(shape) + [constant, zeros]


@pytest.mark.parametrize("axes", [None, [0, 2, 3], [2, 3], [1], [3], [-1], [0], [0, 1],
                                  [1, 2, 3], [0, 1, 2, 3], [3, -1, 2], [-3, 0]],
                         ids=lambda a: "default" if a is None else str(a))
def test_mean_variance_normalization_matches_onnxruntime(axes, tmp_path, signer):
    shape = (2, 3, 4, 5)
    attrs = {} if axes is None else {"axes": axes}
    model = _model(tmp_path, "MeanVarianceNormalization", shape, **attrs)
    _, loaded = import_and_load(model, tmp_path / "n.pha", signer)
    assert sorted(_ops(loaded)) == ["div", "mean", "mean", "mul", "sqrt", "sub"]
    check_against_onnxruntime(model, loaded, [{"x": x} for x in _mvn_feeds(shape)])


@pytest.mark.parametrize("shape, axes", [((3, 4), [1]), ((2, 3, 5), [0, 2]),
                                         ((2, 2, 3, 2, 3), [2, 3, 4]),
                                         ((1, 6, 3), [-1, -2])])
def test_mean_variance_normalization_of_other_ranks_matches_onnxruntime(shape, axes, tmp_path,
                                                                         signer):
    model = _model(tmp_path, "MeanVarianceNormalization", shape, axes=axes)
    _, loaded = import_and_load(model, tmp_path / "n.pha", signer)
    constant = RNG.standard_normal(shape).astype(np.float32)
    constant[0] = 1.0
    check_against_onnxruntime(model, loaded, [{"x": x} for x in _floats(shape) + [constant]])


def test_mean_variance_normalization_of_opset_9_and_run_time_dims_matches_onnxruntime(
        tmp_path, signer):
    """MVN-9 (caffe2's and older toolchains' opset) is upgraded and maps the same; run-time
    dims, reduced or kept, are fine."""
    model = _model(tmp_path, "MeanVarianceNormalization", ("n", 3, "h", 4), opset=9)
    _, loaded = import_and_load(model, tmp_path / "n.pha", signer)
    check_against_onnxruntime(model, loaded, [{"x": x} for shape in ((1, 3, 2, 4), (4, 3, 5, 4))
                                              for x in _mvn_feeds(shape)])


def test_mean_variance_normalization_refusals_name_the_node(tmp_path):
    where = "node 'node' (MeanVarianceNormalization)"
    # onnxruntime skips the default axis 3 of a rank-3 input; the ONNX function cannot
    assert_refused(_model(tmp_path, "MeanVarianceNormalization", (2, 3, 4)), ModelFileError,
                   where, "axes 3 is out of range for rank 3")
    assert_refused(_model(tmp_path, "MeanVarianceNormalization", (2, 3, 4, 5), axes=[1, 4]),
                   ModelFileError, where, "axes 4 is out of range for rank 4")
    empty = _model(tmp_path, "MeanVarianceNormalization", (2, 3, 4, 5), axes=[1])
    model = onnx.load(empty)
    del model.graph.node[0].attribute[0].ints[:]
    onnx.save(model, empty)
    _onnxruntime_refuses(empty, (2, 3, 4, 5))
    assert_refused(empty, UnsupportedModelError, where, "attribute axes=[]: no axis")
    assert_refused(float64_inside(_model(tmp_path, "MeanVarianceNormalization", (2, 3, 4, 5),
                                         dtype=TP.DOUBLE)), UnsupportedModelError, where,
                   "input 'x' of dtype float64: only float32 is supported")



# --- GlobalLpPool ------------------------------------------------------------------------------


def _global_lp_model(tmp_path, shape, *, dtype=TP.FLOAT, **attrs):
    """A GlobalLpPool named ``node`` of ``x`` (``shape``) to ``y`` (the spatial dims 1)."""
    node = helper.make_node("GlobalLpPool", ["x"], ["y"], name="node", **attrs)
    out = list(shape[:2]) + [1] * (len(shape) - 2)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", dtype,
                                                                          list(shape))],
                              [helper.make_tensor_value_info("y", dtype, out)])
    path = tmp_path / "GlobalLpPool.onnx"
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString())
    return path


def _global_lp_feeds(shape):
    """:func:`_floats`, plus one whose (n, c) planes hold, in turn: zeros, -0.0, one inf, one
    -inf, one nan, all 1e20 (|x|^p overflows for p >= 2), all 1e-30 (underflows) and ordinary
    values."""
    x = RNG.standard_normal(shape).astype(np.float32)
    planes = x.reshape(-1, int(np.prod(shape[2:])))  # a view
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e20, 1e-30]
    for plane, value in zip(planes, specials):
        if value in (0.0, 1e20, 1e-30):
            plane[:] = value
        else:
            plane[-1] = value
    return _floats(shape) + [x]


@pytest.mark.parametrize("p", [None, 1, 2, 3, 4])
@pytest.mark.parametrize("shape", [(2, 4, 7), (2, 4, 3, 5), (1, 4, 2, 3, 2)])
def test_global_lp_pool_matches_onnxruntime(shape, p, tmp_path, signer):
    model = _global_lp_model(tmp_path, shape, **({} if p is None else {"p": p}))
    _, loaded = import_and_load(model, tmp_path / "n.pha", signer)
    assert _ops(loaded).count("pow") == (0 if p == 1 else 2) and "sum" in _ops(loaded)
    check_against_onnxruntime(model, loaded, [{"x": x} for x in _global_lp_feeds(shape)])


def test_global_lp_pool_with_run_time_dims_matches_onnxruntime(tmp_path, signer):
    model = _global_lp_model(tmp_path, ("n", 3, "h", "w"), p=3)
    _, loaded = import_and_load(model, tmp_path / "n.pha", signer)
    check_against_onnxruntime(model, loaded, [{"x": x} for shape in ((1, 3, 2, 5), (3, 3, 4, 1))
                                              for x in _global_lp_feeds(shape)])


def test_global_lp_pool_refusals_name_the_node(tmp_path):
    where = "node 'node' (GlobalLpPool)"
    for p in (0, -2):
        assert_refused(_global_lp_model(tmp_path, (1, 2, 3), p=p), UnsupportedModelError, where,
                       f"attribute p={p}: only an integer p >= 1 is supported")
    assert_refused(_global_lp_model(tmp_path, (2, 3)), UnsupportedModelError, where,
                   "input of shape [2, 3]: needs (N, C, *spatial) with 1, 2 or 3 spatial axes")
    assert_refused(_global_lp_model(tmp_path, (1, 2, 2, 2, 2, 2)), UnsupportedModelError, where,
                   "input of shape [1, 2, 2, 2, 2, 2]: needs (N, C, *spatial)")
    assert_refused(_global_lp_model(tmp_path, (1, 2, 3), dtype=TP.INT32), UnsupportedModelError,
                   where, "input 'x' of dtype int32: needs a float tensor")


@pytest.mark.parametrize("op, shape, attrs, feeds", [
    ("LRN", (2, 7, 3, 4), {"size": 5, "alpha": 0.5, "beta": 0.6, "bias": 2.0}, _lrn_feeds),
    ("LpNormalization", (3, 4, 5), {"axis": 1}, lambda shape: _lp_feeds(shape, 1)),
    ("MeanVarianceNormalization", (2, 3, 4, 5), {}, _mvn_feeds)], ids=lambda v: (
        v if isinstance(v, str) else None))
def test_norms_on_the_onnxruntime_backend(op, shape, attrs, feeds, tmp_path, signer):
    """The same glue ops run by the onnxruntime backend plugin agree with onnxruntime running
    the one-node model."""
    from plugins.onnxruntime_backend import OnnxruntimeBackend

    model = _model(tmp_path, op, shape, **attrs)
    _, loaded = import_and_load(model, tmp_path / "n.pha", signer)
    check_against_onnxruntime(model, loaded, [{"x": x} for x in feeds(shape)],
                              backend=OnnxruntimeBackend())
