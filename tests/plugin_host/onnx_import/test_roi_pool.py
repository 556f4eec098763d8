"""MaxRoiPool (torchvision's roi_pool, Fast R-CNN's RoI pooling) imported as run-time masks and
two ReduceMax (plugin_host/onnx_import/roi_pool.py), compared with onnxruntime's kernel on both
backends: spatial scales, pooled shapes wider or taller than a roi (empty and repeated bins),
rois reaching past the map on every side and of negative size, corners at exact halves
(rounded half away from zero), -inf in the map, a batch of one map under a run-time count of
rois, several maps gathered by index. The golden cases draw a rois input's batch column inside
the batch. A batch index outside the batch is refused when the call runs; a bad pooled_shape
or spatial_scale, a run-time map size, a run-time count over several maps and masks over the
element cap are refused naming the node."""

from __future__ import annotations

import numpy as np
import pytest

from abi.errors import IndexRangeError
from plugin_host.errors import ModelFileError, UnsupportedModelError
from plugin_host.executor import Executor
from plugins.numpy_backend import NumpyBackend

from .conftest import assert_refused, check_on_both_backends, import_and_load, onnx

helper, TP = onnx.helper, onnx.TensorProto
RNG = np.random.default_rng(41)


def _model(path, x_shape, rois, *, pooled_shape=(2, 2), **attrs):
    """One MaxRoiPool named ``mrp`` of x by ``rois`` rows (an int, or a dim name)."""
    c = x_shape[1]
    graph = helper.make_graph(
        [helper.make_node("MaxRoiPool", ["x", "rois"], ["y"], name="mrp",
                          pooled_shape=list(pooled_shape), **attrs)], "g",
        [helper.make_tensor_value_info("x", TP.FLOAT, list(x_shape)),
         helper.make_tensor_value_info("rois", TP.FLOAT, [rois, 5])],
        [helper.make_tensor_value_info("y", TP.FLOAT, [rois, c, *pooled_shape])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _feed(x_shape, count, scale):
    """Boxes from 3 pixels before the map to 3 past it (in the map's pixels), corners on exact
    halves, one of size 0 and one of negative size; batch indices as floats with a fraction
    (truncated); the features with -inf in them."""
    n, _, h, w = x_shape
    corner = RNG.uniform(-3, max(h, w) + 3, (count, 2))
    size = RNG.uniform(0, max(h, w) + 2, (count, 2))
    size[0] = 0
    size[-1] = -2
    boxes = np.concatenate([corner, corner + size], 1)
    boxes[1::2] = np.floor(boxes[1::2]) + 0.5  # halves: round() goes away from zero
    index = RNG.integers(0, n, (count, 1)) + RNG.uniform(0, 0.99, (count, 1))
    x = RNG.standard_normal(x_shape).astype(np.float32)
    x.reshape(-1)[3::7] = -np.inf
    return {"x": x, "rois": np.concatenate([index, boxes / scale], 1).astype(np.float32)}


CASES = {
    "one-map": ((1, 3, 8, 9), 6, {"pooled_shape": (2, 3), "spatial_scale": 0.5}),
    "several-maps": ((3, 2, 7, 6), 5, {"pooled_shape": (3, 2), "spatial_scale": 0.25}),
    "more-bins-than-pixels": ((2, 2, 5, 4), 4, {"pooled_shape": (7, 6)}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_max_roi_pool_matches_onnxruntime(case, tmp_path, signer):
    x_shape, count, attrs = CASES[case]
    model = _model(tmp_path / "p.onnx", x_shape, count, **attrs)
    _, loaded = import_and_load(model, tmp_path / "p.pha", signer)
    assert {"amax", "where"} <= {n.op for n in loaded.graph.nodes}
    scale = attrs.get("spatial_scale", 1.0)
    check_on_both_backends(model, loaded, [_feed(x_shape, count, scale) for _ in range(3)])


def test_a_run_time_count_of_rois_over_one_map(tmp_path, signer):
    """A batch of one map: no gather; the golden cases drew the batch column as 0 (onnxruntime
    refuses any other), at two counts of rois."""
    model = _model(tmp_path / "p.onnx", (1, 3, 8, 9), "rois", pooled_shape=(3, 3),
                   spatial_scale=0.5)
    _, loaded = import_and_load(model, tmp_path / "p.pha", signer,
                                golden_dims={"rois": [2, 5]})
    assert loaded.graph.inputs[1].shape == ("rois", 5)
    assert "gather_elements" not in {n.op for n in loaded.graph.nodes}
    check_on_both_backends(model, loaded, [_feed((1, 3, 8, 9), k, 0.5) for k in (1, 7)])


def test_a_run_time_batch_of_maps(tmp_path, signer):
    """Several maps in a batch of run-time size: each roi's map gathered by its index, checked
    against the batch the call brings; the golden cases draw the indices inside the batch
    each of them was drawn at."""
    model = _model(tmp_path / "p.onnx", ("n", 2, 6, 7), 4, pooled_shape=(2, 3))
    _, loaded = import_and_load(model, tmp_path / "p.pha", signer, golden_dims={"n": [2, 3]})
    assert loaded.graph.inputs[0].shape == ("n", 2, 6, 7)
    for x, _ in loaded.golden_cases():
        assert set(x["rois"][:, 0].tolist()) <= set(range(len(x["x"])))
    check_on_both_backends(model, loaded, [_feed((b, 2, 6, 7), 4, 1.0) for b in (1, 3)])
    feed = _feed((2, 2, 6, 7), 4, 1.0)
    feed["rois"][2, 0] = 2
    with pytest.raises(IndexRangeError):
        Executor(loaded.graph, NumpyBackend()).run(feed)


def test_the_golden_cases_draw_the_batch_column_inside_the_batch(tmp_path, signer):
    """onnxruntime refuses a roi whose batch index names no map; a standard normal there would
    name none for most rois of a batch of 2, so the column is drawn as 0 or 1."""
    model = _model(tmp_path / "p.onnx", (2, 2, 6, 6), 40)
    _, loaded = import_and_load(model, tmp_path / "p.pha", signer)
    cases = loaded.golden_cases()
    assert len(cases) == 2
    column = np.concatenate([case["rois"][:, 0] for case, _ in cases])
    assert set(column.tolist()) == {0.0, 1.0}


@pytest.mark.parametrize("batch", [1, 2])
def test_a_batch_index_outside_the_batch_is_refused_when_the_call_runs(batch, tmp_path,
                                                                       signer):
    model = _model(tmp_path / "p.onnx", (batch, 3, 8, 9), 3)
    _, loaded = import_and_load(model, tmp_path / "p.pha", signer)
    feed = _feed((batch, 3, 8, 9), 3, 1.0)
    feed["rois"][1, 0] = batch
    with pytest.raises(IndexRangeError):
        Executor(loaded.graph, NumpyBackend()).run(feed)


@pytest.mark.parametrize("x_shape, rois, attrs, message", [
    ((1, 2, 6, 7), 3, {"pooled_shape": (2, 0)}, "pooled_shape=[2, 0]: needs two positive "
                                                "counts"),
    ((1, 2, 6, 7), 3, {"pooled_shape": (2,)}, "pooled_shape=[2]: needs two positive counts"),
    ((1, 2, 6, 7), 3, {"spatial_scale": 0.0}, "spatial_scale=0.0 must be finite and above 0"),
    ((1, 2, "h", 7), 3, {}, "input 'x' of shape [1, 2, 'h', 7]: needs (N, C, H, W) with C, H "
                            "and W known at import"),
    ((2, 2, 6, 7), "r", {}, "'r' rois, a run-time count, over a batch of 2 maps: each roi's "
                            "map is gathered by its batch index"),
    ((1, 2, 0, 7), 3, {}, "input 'x' of float32 [1, 2, 0, 7]: needs a float map of height "
                          "and width >= 1"),
    ((0, 2, 6, 7), 3, {}, "input 'x' of float32 [0, 2, 6, 7]: needs a float map of height "
                          "and width >= 1, in a batch of at least one (each roi names its map)"),
], ids=["zero-bins", "one-dim", "zero-scale", "run-time-height", "run-time-count", "empty",
        "no-maps"])
def test_refusals_name_the_node(x_shape, rois, attrs, message, tmp_path):
    model = _model(tmp_path / "p.onnx", x_shape, rois, **attrs)
    assert_refused(model, UnsupportedModelError, "node 'mrp' (MaxRoiPool)", message)


def test_masks_over_the_element_cap_are_refused(tmp_path):
    model = _model(tmp_path / "p.onnx", (1, 2, 6, 7), 3, pooled_shape=(2 ** 40, 1))
    assert_refused(model, ModelFileError, "node 'mrp' (MaxRoiPool)",
                   f"pooled_shape [{2 ** 40}, 1] over a map of 2 x 6 x 7 takes the max through "
                   f"masks of {3 * 2 * 6 * 7 * 2 ** 40} elements, over the cap of")
