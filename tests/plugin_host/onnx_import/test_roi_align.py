"""RoiAlign in its average mode (torchvision's roi_align and MultiScaleRoIAlign) imported as a
Gather of each roi's map, GridSample at its bins' points and an AveragePool
(plugin_host/onnx_import/roi_align.py), compared with onnxruntime's kernel on both backends:
half_pixel and output_half_pixel (opset 16's attribute, opset 13's default), spatial scales,
sampling ratios, rois reaching past the map on every side, a batch of one map (no gather) under
a run-time count of rois. A batch index outside the batch is refused when the call runs; mode
max, an adaptive sampling ratio, a run-time map size and a run-time count of rois over several
maps are refused naming the node."""

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
    ((1, 2, 6, 7), {"mode": "max", "sampling_ratio": 2}, "attribute mode='max': only 'avg'"),
    ((1, 2, 6, 7), {}, "sampling_ratio=0: onnxruntime then samples ceil(roi size / bins) "
                       "points per bin"),
    ((1, 2, "h", 7), {"sampling_ratio": 2}, "input 'x' of shape [1, 2, 'h', 7]: needs "
                                            "(N, C, H, W) with H and W known at import"),
    ((2, 2, 6, 7), {"sampling_ratio": 2, "rois": "r"},
     "'r' rois, a run-time count, over a batch of 2 maps: each roi's map is gathered by its "
     "batch index, which needs the count known at import"),
    ((1, 2, 0, 7), {"sampling_ratio": 2}, "input 'x' of float32 [1, 2, 0, 7]: needs a float "
                                          "map of height and width >= 1"),
], ids=["max", "adaptive", "run-time-height", "run-time-count", "empty"])
def test_refusals_name_the_node(x_shape, attrs, message, tmp_path):
    model = _model(tmp_path / "r.onnx", x_shape, attrs.pop("rois", 3), **attrs)
    assert_refused(model, UnsupportedModelError, "node 'ra' (RoiAlign)", message)


def test_points_over_the_element_cap_are_refused(tmp_path):
    model = _model(tmp_path / "r.onnx", (1, 2, 6, 7), 3, sampling_ratio=2,
                   output_height=2 ** 40)
    assert_refused(model, ModelFileError, "node 'ra' (RoiAlign)",
                   f"output_height {2 ** 40}, output_width 1 and sampling_ratio 2 sample "
                   f"{2 ** 42} points per roi, over the cap of")
