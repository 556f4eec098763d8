"""RoiAlign in its average mode (torchvision's roi_align and MultiScaleRoIAlign) imported as a
Gather of each roi's map, GridSample at its bins' points and an AveragePool
(plugin_host/onnx_import/roi_align.py), compared with onnxruntime's kernel on both backends:
half_pixel and output_half_pixel (opset 16's attribute, opset 13's default), spatial scales,
sampling ratios, rois reaching past the map on every side, a batch of one map (no gather) under
a run-time count of rois, an adaptive sampling ratio (0: a count of points each roi sets when
the call runs). A batch index outside the batch is refused when the call runs, and so is an
adaptive roi needing more points than laid out or of negative size along one axis; mode max, a
negative sampling ratio, a run-time map size and a run-time count of rois over several maps
are refused naming the node."""

from __future__ import annotations

import numpy as np
import pytest

from abi.errors import IndexRangeError
from plugin_host.errors import ModelFileError, UnsupportedModelError
from plugin_host.executor import Executor
from plugins.numpy_backend import NumpyBackend

from .conftest import assert_refused, check_on_both_backends, import_and_load, onnx

helper, TP = onnx.helper, onnx.TensorProto
RNG = np.random.default_rng(37)


def _model(path, x_shape, rois, *, opset=16, **attrs):
    """One RoiAlign named ``ra`` of x by ``rois`` boxes (an int, or a dim name)."""
    n, c = x_shape[:2]
    oh, ow = attrs.get("output_height", 1), attrs.get("output_width", 1)
    graph = helper.make_graph(
        [helper.make_node("RoiAlign", ["x", "rois", "idx"], ["y"], name="ra", **attrs)], "g",
        [helper.make_tensor_value_info("x", TP.FLOAT, list(x_shape)),
         helper.make_tensor_value_info("rois", TP.FLOAT, [rois, 4]),
         helper.make_tensor_value_info("idx", TP.INT64, [rois])],
        [helper.make_tensor_value_info("y", TP.FLOAT, [rois, c, oh, ow])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), path)
    return path


def _feed(x_shape, count, scale):
    """Boxes from 3 pixels before the map to 3 past it (in the map's pixels), some of size
    0 and one of negative size; the features with a nan."""
    n, _, h, w = x_shape
    corner = RNG.uniform(-3, max(h, w) + 3, (count, 2))
    size = RNG.uniform(0, max(h, w) + 2, (count, 2))
    size[0] = 0
    size[-1] = -1
    boxes = np.concatenate([corner, corner + size], 1) / scale
    x = RNG.standard_normal(x_shape).astype(np.float32)
    x.reshape(-1)[5] = np.nan
    return {"x": x, "rois": boxes.astype(np.float32), "idx": RNG.integers(0, n, count)}


CASES = {
    "half-pixel": ((2, 3, 8, 9), {"output_height": 2, "output_width": 3, "sampling_ratio": 2,
                                  "spatial_scale": 0.5,
                                  "coordinate_transformation_mode": "half_pixel"}),
    "output-half-pixel": ((2, 3, 8, 9), {"output_height": 3, "output_width": 2,
                                         "sampling_ratio": 3, "spatial_scale": 0.25,
                                         "coordinate_transformation_mode":
                                             "output_half_pixel"}),
    "one-point": ((1, 2, 6, 7), {"output_height": 4, "output_width": 4, "sampling_ratio": 1}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_roi_align_matches_onnxruntime(case, tmp_path, signer):
    x_shape, attrs = CASES[case]
    model = _model(tmp_path / "r.onnx", x_shape, 6, **attrs)
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    assert {"grid_sample", "avg_pool"} <= {n.op for n in loaded.graph.nodes}
    scale = attrs.get("spatial_scale", 1.0)
    check_on_both_backends(model, loaded, [_feed(x_shape, 6, scale) for _ in range(2)])


def test_opset_13_takes_output_half_pixel(tmp_path, signer):
    """RoiAlign before opset 16 has no coordinate_transformation_mode: it is
    output_half_pixel there (a roi at least a pixel wide), half_pixel from 16 on."""
    model = _model(tmp_path / "r.onnx", (1, 2, 6, 7), 5, opset=13, output_height=2,
                   output_width=2, sampling_ratio=2, spatial_scale=0.5)
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    check_on_both_backends(model, loaded, [_feed((1, 2, 6, 7), 5, 0.5) for _ in range(2)])


def test_a_run_time_count_of_rois_over_one_map(tmp_path, signer):
    """A batch of one map: every roi's points sampled from it as one grid, no gather."""
    model = _model(tmp_path / "r.onnx", (1, 3, 8, 9), "rois", output_height=2,
                   output_width=2, sampling_ratio=2, spatial_scale=0.5)
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer,
                                golden_dims={"rois": [1, 4]})
    assert loaded.graph.inputs[1].shape == ("rois", 4)
    assert "gather_elements" not in {n.op for n in loaded.graph.nodes}
    check_on_both_backends(model, loaded, [_feed((1, 3, 8, 9), k, 0.5) for k in (1, 7)])


@pytest.mark.parametrize("batch", [1, 2])
def test_a_batch_index_outside_the_batch_is_refused_when_the_call_runs(batch, tmp_path,
                                                                       signer):
    model = _model(tmp_path / "r.onnx", (batch, 3, 8, 9), 3, sampling_ratio=2)
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    feed = _feed((batch, 3, 8, 9), 3, 1.0)
    feed["idx"][1] = batch
    with pytest.raises(IndexRangeError):
        Executor(loaded.graph, NumpyBackend()).run(feed)


@pytest.mark.parametrize("x_shape, attrs, message", [
    ((1, 2, 6, 7), {"mode": "max", "sampling_ratio": 2},
     "attribute mode='max': only 'avg' is supported (torchvision's roi_align exports it); "
     "onnxruntime's max mode takes the max of each point's four weighted neighbours"),
    ((1, 2, 6, 7), {"sampling_ratio": -1}, "sampling_ratio=-1 must be a count of points, "
                                           "or 0 for ceil(roi size / bins)"),
    ((1, 2, "h", 7), {"sampling_ratio": 2}, "input 'x' of shape [1, 2, 'h', 7]: needs "
                                            "(N, C, H, W) with H and W known at import"),
    ((2, 2, 6, 7), {"sampling_ratio": 2, "rois": "r"},
     "'r' rois, a run-time count, over a batch of 2 maps: each roi's map is gathered by its "
     "batch index, which needs the count known at import"),
    ((1, 2, 0, 7), {"sampling_ratio": 2}, "input 'x' of float32 [1, 2, 0, 7]: needs a float "
                                          "map of height and width >= 1"),
], ids=["max", "negative-ratio", "run-time-height", "run-time-count", "empty"])
def test_refusals_name_the_node(x_shape, attrs, message, tmp_path):
    model = _model(tmp_path / "r.onnx", x_shape, attrs.pop("rois", 3), **attrs)
    assert_refused(model, UnsupportedModelError, "node 'ra' (RoiAlign)", message)


def test_points_over_the_element_cap_are_refused(tmp_path):
    model = _model(tmp_path / "r.onnx", (1, 2, 6, 7), 3, sampling_ratio=2,
                   output_height=2 ** 40)
    assert_refused(model, ModelFileError, "node 'ra' (RoiAlign)",
                   f"output_height {2 ** 40}, output_width 1 and sampling_ratio 2 sample "
                   f"{2 ** 42} points per roi, over the cap of")


def _feed_within(x_shape, count, scale):
    """Boxes inside the map and up to a pixel past each side (what an adaptive sampling ratio
    takes), one of size 0 and one of negative size, small ones and ones over the whole map."""
    n, _, h, w = x_shape
    extent = np.array([w, h, w, h], np.float64)
    boxes = RNG.uniform(-1, 1, (count, 4)) * extent / 2 + extent / 2
    boxes[:, 2:] = np.maximum(boxes[:, :2], boxes[:, 2:])
    boxes[0, 2:] = boxes[0, :2]
    boxes[1, 2:] = boxes[1, :2] - 0.7
    boxes[2] = [-1, -1, w + 1, h + 1]
    x = RNG.standard_normal(x_shape).astype(np.float32)
    return {"x": x, "rois": (boxes / scale).astype(np.float32),
            "idx": RNG.integers(0, n, count)}


@pytest.mark.parametrize("x_shape, rois, attrs", [
    ((2, 3, 8, 9), 6, {"output_height": 2, "output_width": 3, "spatial_scale": 0.5}),
    ((1, 2, 7, 6), "r", {"output_height": 3, "output_width": 2, "spatial_scale": 0.25,
                         "coordinate_transformation_mode": "output_half_pixel"}),
    ((1, 2, 5, 11), 5, {"output_height": 1, "output_width": 4}),
], ids=["several-maps", "one-map-run-time-count", "output-half-pixel"])
def test_an_adaptive_sampling_ratio_matches_onnxruntime(x_shape, rois, attrs, tmp_path,
                                                          signer):
    """sampling_ratio 0 (torchvision's default -1): ceil(roi size / bins) points per bin, a
    count each roi sets when the call runs, their sum over that count."""
    model = _model(tmp_path / "r.onnx", x_shape, rois, sampling_ratio=0, **attrs)
    options = {"golden_dims": {"r": [1, 4]}} if rois == "r" else {}
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer, **options)
    count = 6 if rois == "r" else rois
    scale = attrs.get("spatial_scale", 1.0)
    check_on_both_backends(model, loaded, [_feed_within(x_shape, count, scale)
                                           for _ in range(3)])


def test_an_adaptive_roi_past_the_room_laid_out_is_refused_when_the_call_runs(tmp_path,
                                                                               signer):
    """The points are laid out for rois up to the map's size and a pixel past each side; a
    larger roi needs more per bin and is refused as the call brings it, not cut short."""
    model = _model(tmp_path / "r.onnx", (1, 2, 6, 8), 3, sampling_ratio=0, output_height=2,
                   output_width=2)
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    feed = _feed_within((1, 2, 6, 8), 3, 1.0)
    Executor(loaded.graph, NumpyBackend()).run(feed)
    feed["rois"][1] = [-2, 0, 8, 3]  # 10 pixels wide: 5 per bin, room for ceil(10 / 2) = 5
    Executor(loaded.graph, NumpyBackend()).run(feed)
    feed["rois"][1] = [-2.5, 0, 8, 3]  # 10.5 wide: 6 per bin
    with pytest.raises(IndexRangeError):
        Executor(loaded.graph, NumpyBackend()).run(feed)


def test_an_adaptive_roi_of_negative_size_along_one_axis_is_refused_when_the_call_runs(
        tmp_path, signer):
    """onnxruntime fails on a roi whose count of points is negative along one axis (their
    product sizes a buffer) and gives 0 for one negative along both: so does the import."""
    model = _model(tmp_path / "r.onnx", (1, 2, 6, 8), 3, sampling_ratio=0, output_height=2,
                   output_width=2)
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    feed = _feed_within((1, 2, 6, 8), 3, 1.0)
    feed["rois"][1] = [5, 4, 1, 0.5]  # 4 and 3.5 pixels the wrong way: ceil(-2), ceil(-1.75)
    check_on_both_backends(model, loaded, [feed])
    assert not Executor(loaded.graph, NumpyBackend()).run(feed)["y"][1].any()
    feed["rois"][1] = [5, 1, 1, 4]  # negative along x only
    with pytest.raises(IndexRangeError):
        Executor(loaded.graph, NumpyBackend()).run(feed)
