"""RMSNormalization (opset 23) over the dims from any axis, with a scale that broadcasts to
them, and LayerNormalization's optional Mean and InvStdDev outputs, read downstream or graph
outputs: imported onto glue ops and compared with onnxruntime on both backends; a bad axis or
scale is refused naming the node."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import ModelFileError, UnsupportedModelError

from .conftest import (assert_refused, check_on_both_backends, import_and_load, onnx,
                       onnxruntime_outputs)

helper, TP, numpy_helper = onnx.helper, onnx.TensorProto, onnx.numpy_helper
RNG = np.random.default_rng(23)
SHAPE = (2, 3, 4, 5)


def _save(tmp_path, nodes, inputs, outputs, inits, opset: int):
    path = tmp_path / "model.onnx"
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString())
    return path


def _rms_model(tmp_path, shape, scale_shape, *, scale_input: bool = False, dtype=TP.FLOAT,
               **attrs):
    """One RMSNormalization named ``rms`` of graph input ``x`` (``shape``: ints, or names for
    run-time dims) and scale ``s`` (a constant, or a graph input with ``scale_input``) to
    ``y``; opset 23."""
    node = helper.make_node("RMSNormalization", ["x", "s"], ["y"], name="rms", **attrs)
    inputs = [helper.make_tensor_value_info("x", dtype, list(shape))]
    inits = []
    if scale_input:
        inputs.append(helper.make_tensor_value_info("s", dtype, list(scale_shape)))
    else:
        np_dtype = onnx.helper.tensor_dtype_to_np_dtype(dtype)
        inits.append(numpy_helper.from_array(
            (RNG.standard_normal(scale_shape) + 1).astype(np_dtype), "s"))
    return _save(tmp_path, [node], inputs, [helper.make_tensor_value_info("y", dtype,
                                                                          list(shape))],
                 inits, 23)


def _stats_shape(shape, axis: int) -> list:
    """x's shape with the dims from ``axis`` set to 1 (Mean's and InvStdDev's)."""
    axis %= len(shape)
    return [d if i < axis else 1 for i, d in enumerate(shape)]


def _ln_model(tmp_path, shape, axis: int, *, outputs=("y", "mean", "inv"),
              graph=("y", "mean", "inv"), downstream=(), params=None):
    """One LayerNormalization (opset 17) named ``ln`` of graph input ``x`` over the dims from
    ``axis``, with a scale and a bias (of shape ``params``, else the normalized dims), to
    ``outputs`` (Y, Mean, InvStdDev; "" leaves one out); ``downstream`` nodes may read them;
    ``graph`` names the graph outputs (float32; Y's shape x's, Mean's and InvStdDev's
    :func:`_stats_shape`, others given as (name, shape))."""
    normalized = params or list(shape[axis % len(shape):])
    node = helper.make_node("LayerNormalization", ["x", "scale", "bias"], list(outputs),
                            name="ln", axis=axis, epsilon=1e-3)
    inits = [numpy_helper.from_array((RNG.standard_normal(normalized) + 1).astype(np.float32),
                                     "scale"),
             numpy_helper.from_array(RNG.standard_normal(normalized).astype(np.float32), "bias")]
    stats = _stats_shape(shape, axis)
    outs = []
    for g in graph:
        name, out_shape = g if isinstance(g, tuple) else (g, list(shape) if g == "y" else stats)
        outs.append(helper.make_tensor_value_info(name, TP.FLOAT, out_shape))
    return _save(tmp_path, [node, *downstream], [helper.make_tensor_value_info(
        "x", TP.FLOAT, list(shape))], outs, inits, 17)


def _feeds(shape, axis: int, far: float = 40.0) -> list[dict]:
    """A spread input, one far from zero on average (mean ``far`` times the spread), and one
    whose first normalized slice is zeros (RMS: 0 / sqrt(epsilon); Mean 0, InvStdDev
    1 / sqrt(epsilon)) and whose second holds -0.0 and 1e10 (its square 1e20, in float32)."""
    spread = (RNG.standard_normal(shape) * 3).astype(np.float32)
    far = (RNG.standard_normal(shape) + far).astype(np.float32)
    special = RNG.standard_normal(shape).astype(np.float32)
    lead = int(np.prod(shape[:axis % len(shape)]))
    slices = special.reshape(lead, -1)
    slices[0] = 0.0
    if lead > 1:
        slices[1, 0], slices[1, -1] = -0.0, 1e10
    return [{"x": x} for x in (spread, far, special)]


def _ops(loaded) -> list[str]:
    return [n.op for n in loaded.graph.nodes]


def _onnxruntime_runs(model, feed) -> dict:
    """onnxruntime, the reference, runs ``model`` on ``feed`` (what is imported here)."""
    return onnxruntime_outputs(model, feed)


# --- RMSNormalization over the dims from any axis ------------------------------------------------

#: (axis, scale shape): the first non-batch axis, a middle one, negative ones, the batch axis;
#: full scales and scales that broadcast (a dim 1, fewer dims, leading 1s, one value)
RMS_CASES = [(1, (3, 4, 5)), (2, (4, 5)), (-2, (4, 5)), (-3, (3, 4, 5)), (0, (2, 3, 4, 5)),
             (1, (5,)), (1, (3, 1, 1)), (1, (1, 4, 1)), (2, (1, 5)), (-2, (4, 1)),
             (2, (1, 4, 5)), (1, (1,)), (1, ())]


@pytest.mark.parametrize("axis, scale_shape", RMS_CASES,
                         ids=[f"axis{a}-scale{'x'.join(map(str, s)) or 'scalar'}"
                              for a, s in RMS_CASES])
def test_rms_normalization_over_the_dims_from_an_axis_matches_onnxruntime(axis, scale_shape,
                                                                          tmp_path, signer):
    model = _rms_model(tmp_path, SHAPE, scale_shape, axis=axis)
    _onnxruntime_runs(model, {"x": np.ones(SHAPE, np.float32)})
    _, loaded = import_and_load(model, tmp_path / "n.pha", signer)
    assert sorted(_ops(loaded)) == ["add", "div", "mean", "mul", "mul", "sqrt"]
    mean = next(n for n in loaded.graph.nodes if n.op == "mean")
    assert dict(mean.attrs) == {"axes": tuple(range(axis % 4, 4)), "keepdim": True}
    check_on_both_backends(model, loaded, _feeds(SHAPE, axis))


def test_rms_normalization_with_epsilon_and_other_ranks_matches_onnxruntime(tmp_path, signer):
    for shape, axis, scale_shape in (((6, 7), 0, (6, 7)), ((2, 3, 2, 3, 2), 2, (2, 1, 2)),
                                     ((3, 8), -2, (8,))):
        model = _rms_model(tmp_path, shape, scale_shape, axis=axis, epsilon=0.25)
        _, loaded = import_and_load(model, tmp_path / "n.pha", signer)
        eps = [v for k, v in loaded.tensors.items() if k.endswith("epsilon")]
        assert [float(v) for v in eps] == [0.25], eps
        check_on_both_backends(model, loaded, _feeds(shape, axis))


def test_rms_normalization_on_the_last_axis_with_a_broadcast_scale_matches_onnxruntime(
        tmp_path, signer):
    """One scale per entry of the last axis stays the one ``rms_norm`` node; a scale of one
    value, which that op does not take, maps onto glue ops."""
    model = _rms_model(tmp_path, SHAPE, (5,), axis=-1)
    _, loaded = import_and_load(model, tmp_path / "n.pha", signer)
    assert _ops(loaded) == ["rms_norm"]
    for scale_shape in ((1,), (), (1, 1, 1, 1)):
        model = _rms_model(tmp_path, SHAPE, scale_shape, axis=-1)
        _, loaded = import_and_load(model, tmp_path / "n.pha", signer)
        assert "rms_norm" not in _ops(loaded) and "mean" in _ops(loaded)
        check_on_both_backends(model, loaded, _feeds(SHAPE, -1))


def test_rms_normalization_of_a_run_time_scale_and_dims_matches_onnxruntime(tmp_path, signer):
    """The scale a graph input, x of a run-time batch and a run-time normalized dim the scale
    broadcasts over (size 1 there)."""
    model = _rms_model(tmp_path, ("n", 3, "t", 5), (3, 1, 5), scale_input=True, axis=1)
    _, loaded = import_and_load(model, tmp_path / "n.pha", signer)
    assert "mean" in _ops(loaded)
    feeds = [{**feed, "s": RNG.standard_normal((3, 1, 5)).astype(np.float32)}
             for shape in ((1, 3, 2, 5), (4, 3, 6, 5)) for feed in _feeds(shape, 1)]
    check_on_both_backends(model, loaded, feeds)


def test_rms_normalization_takes_every_axis_in_range_and_refuses_the_others(tmp_path):
    """Every axis from -rank to rank - 1 imports (as onnxruntime runs it); one outside is a
    ModelFileError naming the node (onnxruntime refuses it too), never a traceback."""
    from plugin_host.onnx_import import import_onnx

    for axis in range(-4, 4):
        model = _rms_model(tmp_path, SHAPE, SHAPE[axis:], axis=axis)
        _onnxruntime_runs(model, {"x": np.ones(SHAPE, np.float32)})
        import_onnx(model)
    for axis in (4, -5, 99):
        model = _rms_model(tmp_path, SHAPE, (5,), axis=axis)
        with pytest.raises(Exception) as info:
            onnxruntime_outputs(model, {"x": np.ones(SHAPE, np.float32)})
        assert type(info.value).__module__.startswith("onnxruntime"), info.value
        assert_refused(model, ModelFileError, "node 'rms' (RMSNormalization)",
                       f"axis {axis} is out of range for rank 4")


@pytest.mark.parametrize("axis, scale_shape, onnxruntime_refuses", [
    (1, (2, 4, 5), True), (2, (5, 4), True), (1, (3, 4, 6), True), (2, (2, 1, 4, 5), False),
    (1, (1, 1, 3, 4, 5), False)])
def test_rms_normalization_of_a_scale_that_does_not_broadcast_is_refused(
        axis, scale_shape, onnxruntime_refuses, tmp_path):
    """A scale that does not broadcast to the normalized dims is refused naming the node:
    onnxruntime refuses most; one varying over the batch (or of a higher rank than x) is
    outside the ONNX spec, which onnxruntime takes anyway."""
    model = _rms_model(tmp_path, SHAPE, scale_shape, axis=axis)
    if onnxruntime_refuses:
        with pytest.raises(Exception) as info:
            onnxruntime_outputs(model, {"x": np.ones(SHAPE, np.float32)})
        assert type(info.value).__module__.startswith("onnxruntime"), info.value
    assert_refused(model, UnsupportedModelError, "node 'rms' (RMSNormalization)",
                   f"scale 's' of shape {scale_shape} does not broadcast to the normalized dims "
                   f"{list(SHAPE[axis:])}")


def test_rms_normalization_of_a_run_time_scale_dim_is_refused(tmp_path):
    """A run-time scale dim where the normalized dim is fixed could differ from it: refused
    naming the node."""
    model = _rms_model(tmp_path, SHAPE, ("k", 5), scale_input=True, axis=2)
    assert_refused(model, UnsupportedModelError, "node 'rms' (RMSNormalization)",
                   "scale 's' of shape ('k', 5) does not broadcast to the normalized dims [4, 5]")


# --- LayerNormalization's Mean and InvStdDev -----------------------------------------------------


def _ln_feeds(shape, axis: int) -> list[dict]:
    """:func:`_feeds` with the far input's mean 8 times its spread: Y, from ``layer_norm``,
    carries the float32 rounding of a mean far from zero into every entry (up to 1.5e-5 at 40
    times the spread, past the default tolerance near zero), as it did before these outputs."""
    return _feeds(shape, axis, far=8.0)


@pytest.mark.parametrize("axis", [1, 2, -1, -3, 0])
def test_layer_normalization_mean_and_inv_std_dev_as_graph_outputs_match_onnxruntime(
        axis, tmp_path, signer):
    model = _ln_model(tmp_path, SHAPE, axis)
    _, loaded = import_and_load(model, tmp_path / "n.pha", signer)
    assert sorted(_ops(loaded)) == ["add", "layer_norm", "mean", "mean", "mul", "reciprocal",
                                    "sqrt", "sub"]
    shapes = {s.name: tuple(s.shape) for s in loaded.graph.outputs}
    stats = tuple(_stats_shape(SHAPE, axis))
    assert shapes == {"y": SHAPE, "mean": stats, "inv": stats}
    feeds = _ln_feeds(SHAPE, axis)
    check_on_both_backends(model, loaded, feeds)
    want = onnxruntime_outputs(model, feeds[2])
    assert want["mean"].dtype == want["inv"].dtype == np.float32
    assert want["mean"].reshape(-1)[0] == 0 and np.isclose(want["inv"].reshape(-1)[0],
                                                             1e-3 ** -0.5)


def test_layer_normalization_statistics_read_downstream_match_onnxruntime(tmp_path, signer):
    """Mean and InvStdDev read by other nodes (the graph outputs only what they compute):
    x rescaled by hand, (x - Mean) * InvStdDev, equals Y without its scale and bias."""
    downstream = [helper.make_node("Sub", ["x", "mean"], ["centered"], name="center"),
                  helper.make_node("Mul", ["centered", "inv"], ["z"], name="rescale"),
                  helper.make_node("Add", ["z", "y"], ["out"], name="add")]
    model = _ln_model(tmp_path, SHAPE, 2, downstream=downstream, graph=[("out", list(SHAPE)),
                                                                          ("z", list(SHAPE))])
    _, loaded = import_and_load(model, tmp_path / "n.pha", signer)
    assert "reciprocal" in _ops(loaded)
    check_on_both_backends(model, loaded, _ln_feeds(SHAPE, 2))


def test_layer_normalization_computes_only_the_statistics_that_are_read(tmp_path, signer):
    """Mean alone (InvStdDev named but read by nobody): no variance; InvStdDev alone (Mean left
    out), its mean an internal tensor; Y need not be read either, and is then not computed."""
    model = _ln_model(tmp_path, SHAPE, 1, graph=("y", "mean"))
    _, loaded = import_and_load(model, tmp_path / "n.pha", signer)
    assert sorted(_ops(loaded)) == ["layer_norm", "mean"]
    check_on_both_backends(model, loaded, _ln_feeds(SHAPE, 1))

    model = _ln_model(tmp_path, SHAPE, -2, outputs=("y", "", "inv"), graph=("inv",))
    _, loaded = import_and_load(model, tmp_path / "n.pha", signer)
    assert [s.name for s in loaded.graph.outputs] == ["inv"]
    assert _ops(loaded) == ["mean", "sub", "mul", "mean", "add", "sqrt", "reciprocal"]
    check_on_both_backends(model, loaded, _ln_feeds(SHAPE, -2))


def test_layer_normalization_statistics_of_a_run_time_batch_match_onnxruntime(tmp_path,
                                                                               signer):
    model = _ln_model(tmp_path, ("n", 3, 4, 5), 1, graph=("y", ("mean", ["n", 1, 1, 1]),
                                                          ("inv", ["n", 1, 1, 1])))
    _, loaded = import_and_load(model, tmp_path / "n.pha", signer)
    check_on_both_backends(model, loaded, [f for n in (1, 5) for f in _ln_feeds((n, 3, 4, 5), 1)])


def test_layer_normalization_statistics_with_a_bad_axis_are_refused_naming_the_node(tmp_path):
    """With Mean and InvStdDev read, an axis out of range is a ModelFileError naming the node,
    not a traceback (the checker leaves the axis to the mapper), and a run-time normalized dim
    is refused as for Y alone."""
    for axis in (4, -5):
        model = _ln_model(tmp_path, SHAPE, 1)
        proto = onnx.load(model)
        next(a for a in proto.graph.node[0].attribute if a.name == "axis").i = axis
        onnx.save(proto, model)
        assert_refused(model, ModelFileError, "node 'ln' (LayerNormalization)",
                       f"axis {axis} is out of range for rank 4")
    model = _ln_model(tmp_path, (2, "t", 5), 1, graph=("y", ("mean", [2, 1, 1])), params=[1, 5])
    assert_refused(model, UnsupportedModelError, "node 'ln' (LayerNormalization)",
                   "normalized dims ['t', 5] of 'x' must be static")
