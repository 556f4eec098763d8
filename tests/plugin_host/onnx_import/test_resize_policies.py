"""Resize's keep_aspect_ratio_policy (opset 18: not_larger, not_smaller) and its
tf_crop_and_resize coordinates (a region of interest, extrapolation_value outside the input),
imported from ONNX and compared with onnxruntime on both backends: the policy resolves at
import to one scale and the sizes round(scale * in), the ``resize`` op where it can say them,
else constant gathers and weights along each resized axis, as is every tf_crop_and_resize.
What the mapping cannot take is refused naming the node."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import ModelFileError, UnsupportedModelError
from plugin_host.executor import Executor
from plugins.numpy_backend import NumpyBackend
from plugins.onnxruntime_backend import OnnxruntimeBackend

from .conftest import (assert_refused, check_against_onnxruntime, check_on_both_backends,
                       import_and_load, onnx)
from .test_resize import _model

TP = onnx.TensorProto
RNG = np.random.default_rng(23)
BIG = np.finfo(np.float32).max
NODE = "node 'node' (Resize)"
GATHERED = {"gather", "mul", "div", "add", "where", "identity"}  # a resize by constant taps


def _feeds(shape, nonfinite: bool = True):
    """Normal inputs, image-like ones in [0, 255], and (``nonfinite``) normal ones with float32
    extremes, infinities and a nan spread in."""
    feeds = [{"x": (RNG.standard_normal(shape) * 3).astype(np.float32)},
             {"x": RNG.uniform(0, 255, shape).astype(np.float32)}]
    if nonfinite:
        x = RNG.standard_normal(shape).astype(np.float32)
        flat = x.reshape(-1)
        special = [BIG, -BIG, 1e-45, -0.0, np.inf, -np.inf, np.nan]
        flat[RNG.choice(flat.size, len(special), replace=False)] = special
        feeds.append({"x": x})
    return feeds


def _sizes(*sizes, roi=None):
    return {"roi": np.zeros(0, np.float32) if roi is None else np.array(roi, np.float32),
            "scales": np.zeros(0, np.float32), "sizes": np.array(sizes, np.int64)}


def _scales(*scales, roi=None):
    return {"roi": np.zeros(0, np.float32) if roi is None else np.array(roi, np.float32),
            "scales": np.array(scales, np.float32)}


def _ops(loaded) -> set:
    return {n.op for n in loaded.graph.nodes}


def _same_bits(model, loaded, feeds) -> None:
    """Both backends match onnxruntime, the numpy backend bit for bit (nan where it has nan)."""
    for got, want in check_against_onnxruntime(model, loaded, feeds):
        np.testing.assert_array_equal(got["y"], want["y"])
    check_against_onnxruntime(model, loaded, feeds, backend=OnnxruntimeBackend())


# --- keep_aspect_ratio_policy --------------------------------------------------------------------

#: (id, input shape, sizes, axes, {policy: (output shape, "resize" or "taps")}): the resize op
#: where each size is floor(in * scale) (the scale's float32 product), else constant taps
POLICY_CASES = [
    # 5x7 into 4x4: scales 0.8 and 4/7; not_larger 4/7: 2.86 rounds to 3 (floor 2)
    ("down", (2, 3, 5, 7), [4, 4], [2, 3],
     {"not_larger": ((2, 3, 3, 4), "taps"), "not_smaller": ((2, 3, 4, 6), "taps")}),
    # 5x7 into 8x20: scales 1.6 and 20/7; not_larger 1.6: 11.2 (floor), not_smaller 14.29
    ("up", (2, 3, 5, 7), [8, 20], [2, 3],
     {"not_larger": ((2, 3, 8, 11), "resize"), "not_smaller": ((2, 3, 14, 20), "resize")}),
    # the axes in reverse order: sizes[0] is the width's
    ("axes-reversed", (1, 2, 6, 9), [4, 5], [3, 2],
     {"not_larger": ((1, 2, 3, 4), "taps"), "not_smaller": ((1, 2, 5, 8), "taps")}),
    # 5x6 into at most 5x3: the scale 0.5, a height of 2.5 rounded up to 3 (halves up, as
    # ONNX says and onnxruntime computes; floor 2)
    ("half-rounds-up", (1, 2, 5, 6), [3, 5], [3, 2], {"not_larger": ((1, 2, 3, 3), "taps")}),
    # one axis: its size as given
    ("width-only", (2, 3, 5, 7), [3], [3],
     {"not_larger": ((2, 3, 5, 3), "resize"), "not_smaller": ((2, 3, 5, 3), "resize")}),
    # 5x7 into 9x6: not_larger 6/7 (floor and round alike), not_smaller 1.8: 12.6 is 13
    ("mixed", (2, 3, 5, 7), [9, 6], [2, 3],
     {"not_larger": ((2, 3, 4, 6), "resize"), "not_smaller": ((2, 3, 9, 13), "taps")}),
    # every axis (no axes attribute): N and C weigh in with scale 1, so only a Resize they
    # leave at 1 imports: here one that keeps every size (a resize of scale 1: x as it is)
    ("all-axes-kept", (2, 3, 5, 7), [2, 3, 9, 13], None,
     {"not_larger": ((2, 3, 5, 7), "resize")}),
    ("all-axes-kept-down", (2, 3, 5, 7), [2, 3, 3, 4], None,
     {"not_smaller": ((2, 3, 5, 7), "resize")}),
]


def _policy_params(modes):
    return [pytest.param(case, policy, mode, id=f"{case[0]}-{policy}-{mode}")
            for case in POLICY_CASES for policy in case[4] for mode in modes]


@pytest.mark.parametrize("case, policy, mode",
                         _policy_params(["nearest", "linear", "cubic"]))
def test_keep_aspect_ratio_policy_matches_onnxruntime(tmp_path, signer, case, policy, mode):
    _, shape, sizes, axes, want = case
    out, how = want[policy]
    attrs = {"mode": mode, "keep_aspect_ratio_policy": policy,
             **({"axes": axes} if axes else {})}
    model = _model(tmp_path, "Resize", shape, _sizes(*sizes), attrs=attrs, opset=19)
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    assert loaded.graph.outputs[0].shape == out
    if how == "resize":  # the policy's one scale on the resized axes, 1 on the others
        [node] = loaded.graph.nodes
        resized = [a - 2 for a in (axes or range(len(shape)))]
        scales = node.attrs["scales"]
        assert node.op == "resize" and len({scales[a] for a in resized}) == 1
        assert node.attrs["size"] == out[2:]
    else:
        assert _ops(loaded) <= GATHERED and "gather" in _ops(loaded)
    feeds = _feeds(shape)
    if mode == "linear":
        check_on_both_backends(model, loaded, feeds)
    else:  # nearest and cubic: onnxruntime's numbers bit for bit
        _same_bits(model, loaded, feeds)


@pytest.mark.parametrize("coordinate", ["half_pixel", "pytorch_half_pixel", "align_corners",
                                        "asymmetric", "half_pixel_symmetric",
                                        "tf_half_pixel_for_nn"])
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_the_policy_scale_moves_the_coordinates(tmp_path, signer, coordinate, mode):
    """3x7 into at most 4x4: one scale 4/7, a height of round(1.71) = 2 (floor 1), every
    coordinate mode computed with that scale, not 2/3."""
    model = _model(tmp_path, "Resize", (1, 2, 3, 7), _sizes(4, 4), attrs={
        "mode": mode, "coordinate_transformation_mode": coordinate, "axes": [2, 3],
        "keep_aspect_ratio_policy": "not_larger"}, opset=19)
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    assert loaded.graph.outputs[0].shape == (1, 2, 2, 4)
    assert _ops(loaded) <= GATHERED
    check_on_both_backends(model, loaded, _feeds((1, 2, 3, 7), nonfinite=mode != "linear"))


@pytest.mark.parametrize("policy, shape, sizes, axes, out", [
    ("not_larger", (2, 3, 7), [3], [2], (2, 3, 3)),
    ("not_smaller", (2, 3, 4, 5, 6), [3, 9, 2], [2, 3, 4], (2, 3, 7, 9, 11)),
    ("not_larger", (2, 3, 4, 5, 6), [3, 9, 2], [2, 3, 4], (2, 3, 1, 2, 2)),
    ("not_larger", (1, 2, 4, 5, 6), [7, 9], [4, 3], (1, 2, 4, 6, 7)),
], ids=["length", "volume-up", "volume-down", "volume-some-axes"])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_the_policy_over_a_length_and_a_volume(tmp_path, signer, policy, shape, sizes, axes,
                                               out, mode):
    model = _model(tmp_path, "Resize", shape, _sizes(*sizes), attrs={
        "mode": mode, "keep_aspect_ratio_policy": policy, "axes": axes}, opset=19)
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    assert loaded.graph.outputs[0].shape == out
    # onnxruntime's linear reads the next element of a kept axis (or channel) with weight 0,
    # so an inf or nan there spreads (0 * inf); the gathers keep them apart
    check_on_both_backends(model, loaded, _feeds(shape, nonfinite=mode == "nearest"))


def test_the_policy_keeps_a_run_time_axis_it_does_not_resize(tmp_path, signer):
    """axes=[3]: the run-time batch and height are kept (scale 1), the width takes the size."""
    model = _model(tmp_path, "Resize", ("n", 3, "h", 8), _sizes(5), attrs={
        "mode": "linear", "keep_aspect_ratio_policy": "not_smaller", "axes": [3]}, opset=19)
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer, golden_dims={"h": 4})
    assert loaded.graph.outputs[0].shape == ("n", 3, "h", 5)
    assert [n.op for n in loaded.graph.nodes] == ["resize"]
    check_on_both_backends(model, loaded, [f for n, h in ((1, 4), (3, 2), (2, 7))
                                           for f in _feeds((n, 3, h, 8))])


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_an_antialiased_policy_whose_sizes_are_floors(tmp_path, signer, mode):
    """8x12 into at most 4x7: the scale 0.5, 4x6 (floor and round alike), antialiased."""
    model = _model(tmp_path, "Resize", (2, 3, 8, 12), _sizes(4, 7), attrs={
        "mode": mode, "antialias": 1, "axes": [2, 3], "keep_aspect_ratio_policy": "not_larger"},
        opset=19)
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    [node] = loaded.graph.nodes
    assert node.op == "resize" and node.attrs["antialias"] and node.attrs["size"] == (4, 6)
    check_on_both_backends(model, loaded, _feeds((2, 3, 8, 12)))


# --- tf_crop_and_resize --------------------------------------------------------------------------

#: (id, input shape, constant inputs, extra attributes): rois inside [0, 1] (a crop) and past
#: it (extrapolated), by sizes and by scales, over some axes, to one position
CROP_CASES = [
    ("crop-down", (2, 3, 6, 8), _sizes(2, 3, 4, 5, roi=[0, 0, 0.2, 0.1, 1, 1, 0.8, 0.9]), {}),
    ("crop-up", (2, 3, 5, 7), _sizes(2, 3, 9, 11, roi=[0, 0, 0.25, 0.3, 1, 1, 0.6, 0.95]), {}),
    ("outside", (2, 3, 5, 7), _sizes(2, 3, 8, 9, roi=[0, 0, -0.3, 0.1, 1, 1, 1.4, 1.2]), {}),
    ("flipped", (1, 2, 5, 6), _sizes(1, 2, 7, 4, roi=[0, 0, 0.9, 1.3, 1, 1, -0.2, 0.1]), {}),
    ("scales", (2, 3, 5, 7), _scales(1, 1, 1.5, 0.6, roi=[0, 0, 0.1, -0.5, 1, 1, 0.7, 1.5]),
     {}),
    ("axes", (2, 3, 5, 7), _sizes(6, 9, roi=[0.3, -0.1, 0.6, 1.5]), {"axes": [2, 3]}),
    ("axes-reversed", (2, 3, 5, 7), _sizes(9, 6, roi=[-0.1, 0.3, 1.5, 0.6]), {"axes": [3, 2]}),
    ("one-axis", (2, 3, 5, 7), _sizes(10, roi=[-0.25, 1.25]), {"axes": [-1]}),
    ("to-one", (2, 3, 5, 7), _sizes(1, 1, roi=[0.3, 0.2, 0.6, 0.9]), {"axes": [2, 3]}),
    ("to-one-outside", (2, 3, 5, 7), _sizes(1, 4, roi=[0.9, 0.2, 1.3, 0.9]), {"axes": [2, 3]}),
    # a scale of 1: onnxruntime keeps that axis as it is, whatever its roi
    ("scale-one", (2, 3, 5, 7), _scales(1, 1.5, roi=[0.3, 0.1, 0.6, 1.5]), {"axes": [2, 3]}),
    # a scale other than 1 that keeps the height (floor(4 * 1.1)): the roi moves it
    ("kept-height", (2, 3, 4, 6), _scales(1.1, 1.5, roi=[0.3, -0.2, 0.9, 1.2]),
     {"axes": [2, 3]}),
    # every size kept: onnxruntime copies x, whatever the roi
    ("all-kept", (2, 3, 4, 6), _scales(1.1, 1.1, roi=[0.3, -0.2, 0.9, 1.2]), {"axes": [2, 3]}),
    # a roi on the batch and channel axes: their scale is 1, so onnxruntime keeps them
    ("batch-roi", (2, 3, 5, 7), _sizes(2, 3, 4, 9, roi=[0.5, 0.2, 0.1, -0.1, 0.7, 0.9, 0.9, 1.1]),
     {}),
    # no roi input: (0, 1) on every axis
    ("no-roi", (2, 3, 5, 7), {"": np.zeros(0), "scales": np.zeros(0, np.float32),
                              "sizes": np.array([2, 3, 3, 10], np.int64)}, {}),
]
NO_ROI = {"no-roi": ["x", "", "scales", "sizes"]}


def _crop_model(tmp_path, case, attrs, shape=None):
    name, case_shape, consts, extra = case
    consts = {k: v for k, v in consts.items() if k}
    return _model(tmp_path, "Resize", shape or case_shape, consts,
                  inputs=NO_ROI.get(name), opset=19, attrs={
                      "coordinate_transformation_mode": "tf_crop_and_resize", **extra, **attrs})


@pytest.mark.parametrize("attrs", [
    {"mode": "nearest"},
    {"mode": "nearest", "nearest_mode": "floor", "extrapolation_value": -7.5},
    {"mode": "nearest", "nearest_mode": "ceil", "extrapolation_value": float("inf")},
    {"mode": "nearest", "nearest_mode": "round_prefer_ceil", "extrapolation_value": 1.0},
    {"mode": "cubic", "extrapolation_value": 2.5},
    {"mode": "cubic", "exclude_outside": 1, "cubic_coeff_a": -0.5,
     "extrapolation_value": -1.0},
], ids=["nearest", "floor", "ceil", "round-up", "cubic", "cubic-exclude"])
@pytest.mark.parametrize("case", CROP_CASES, ids=[c[0] for c in CROP_CASES])
def test_tf_crop_and_resize_matches_onnxruntime_bit_for_bit(tmp_path, signer, case, attrs):
    model = _crop_model(tmp_path, case, attrs)
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    assert _ops(loaded) <= ({"identity"} if case[0] == "all-kept" else GATHERED)
    _same_bits(model, loaded, _feeds(case[1]))


@pytest.mark.parametrize("extrapolation", [0.0, -3.25, float("nan")])
@pytest.mark.parametrize("case", CROP_CASES, ids=[c[0] for c in CROP_CASES])
def test_tf_crop_and_resize_linear_matches_onnxruntime(tmp_path, signer, case, extrapolation):
    model = _crop_model(tmp_path, case, {"mode": "linear",
                                         "extrapolation_value": extrapolation})
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    assert _ops(loaded) <= GATHERED
    check_on_both_backends(model, loaded, _feeds(case[1]))


def test_extrapolated_positions_take_the_extrapolation_value(tmp_path, signer):
    """A roi over [-1, 2] of a 3x3 image into 7x7: positions 0-1 and 5-6 of each axis read
    outside; the rest are the image's elements (align_corners over the roi)."""
    model = _crop_model(tmp_path, ("", (1, 1, 3, 3), _sizes(7, 7, roi=[-1, -1, 2, 2]),
                                   {"axes": [2, 3]}), {"mode": "nearest",
                                                       "extrapolation_value": 9.0})
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    x = np.arange(9, dtype=np.float32).reshape(1, 1, 3, 3)
    y = Executor(loaded.graph, NumpyBackend()).run({"x": x})["y"][0, 0]
    inside = np.zeros((7, 7), bool)
    inside[2:5, 2:5] = True
    assert (y[~inside] == 9).all()
    np.testing.assert_array_equal(y[2:5, 2:5], x[0, 0])
    check_on_both_backends(model, loaded, [{"x": x}])


@pytest.mark.parametrize("shape, consts, attrs", [
    ((2, 3, 7), _sizes(2, 3, 11, roi=[0, 0, -0.2, 1, 1, 1.3]), {}),
    ((2, 3, 7), _sizes(4, roi=[0.2, 0.7]), {"axes": [2]}),
    ((2, 3, 4, 5, 6), _sizes(3, 7, 9, roi=[0.3, -0.2, 0.1, 0.8, 1.1, 1.5]),
     {"axes": [2, 3, 4]}),
    ((1, 2, 4, 5, 6), _scales(1, 1, 0.5, 1, 2.5, roi=[0, 0, 0.1, 0.3, -0.5, 1, 1, 0.9, 0.6, 1.2]),
     {}),
], ids=["length", "length-crop", "volume", "volume-kept-height"])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_tf_crop_and_resize_over_a_length_and_a_volume(tmp_path, signer, shape, consts, attrs,
                                                       mode):
    model = _model(tmp_path, "Resize", shape, consts, opset=19, attrs={
        "mode": mode, "coordinate_transformation_mode": "tf_crop_and_resize",
        "extrapolation_value": 0.5, **attrs})
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    assert _ops(loaded) <= GATHERED
    # onnxruntime's linear reads the next element of a kept axis (or channel) with weight 0
    check_on_both_backends(model, loaded, _feeds(shape, nonfinite=mode == "nearest"))


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_tf_crop_and_resize_with_a_run_time_batch(tmp_path, signer, mode):
    model = _model(tmp_path, "Resize", ("n", 3, 5, 7), _sizes(6, 4, roi=[-0.2, 0.1, 1.1, 0.8]),
                   opset=19, attrs={"mode": mode, "axes": [2, 3], "extrapolation_value": 4.0,
                                    "coordinate_transformation_mode": "tf_crop_and_resize"})
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    assert loaded.graph.outputs[0].shape == ("n", 3, 6, 4)
    check_on_both_backends(model, loaded, [f for n in (1, 3) for f in _feeds((n, 3, 5, 7))])


def test_tf_crop_and_resize_of_the_policy_sizes(tmp_path, signer):
    """Both at once: the policy's sizes (5x7 into at most 4x4: 3x4), the roi's coordinates."""
    model = _model(tmp_path, "Resize", (2, 3, 5, 7), _sizes(4, 4, roi=[0.1, -0.2, 1.2, 0.9]),
                   opset=19, attrs={"mode": "linear", "axes": [2, 3],
                                    "keep_aspect_ratio_policy": "not_larger",
                                    "coordinate_transformation_mode": "tf_crop_and_resize",
                                    "extrapolation_value": -1.0})
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    assert loaded.graph.outputs[0].shape == (2, 3, 3, 4)
    check_on_both_backends(model, loaded, _feeds((2, 3, 5, 7)))


# --- refusals ------------------------------------------------------------------------------------

def _crop(consts, shape=(1, 3, 4, 6), **attrs):
    return shape, consts, {"coordinate_transformation_mode": "tf_crop_and_resize",
                           "mode": "linear", **attrs}, {}


def _policy(consts, policy="not_larger", shape=(1, 3, 4, 6), **attrs):
    return shape, consts, {"keep_aspect_ratio_policy": policy, **attrs}, {}


@pytest.mark.parametrize("case, error, message", [
    (_crop(_sizes(1, 3, 3, 5, roi=[0, 0, 0.1, 1, 1, 0.9])), ModelFileError,
     "roi [0.0, 0.0, 0.10000000149011612, 1.0, 1.0, 0.8999999761581421] must hold 8 values, a "
     "start and an end for each of the 4 axes"),
    (_crop(_sizes(3, 5, roi=[0, 0, 0.1, 0.2, 1, 1, 0.9, 0.8]), axes=[2, 3]), ModelFileError,
     "must hold 4 values, a start and an end for each of the 2 axes (input shape [1, 3, 4, 6], "
     "axes [2, 3])"),
    (_crop(_sizes(1, 3, 3, 5)), ModelFileError, "roi [] must hold 8 values"),
    (_crop({"scales": np.zeros(0, np.float32), "sizes": np.array([1, 3, 3, 5], np.int64)}) +
     ({"inputs": ["x", "r", "scales", "sizes"], "runtime": {"r": (TP.FLOAT, [8])}},),
     UnsupportedModelError,
     "roi 'r' must be a constant (known at import), but it is computed at run time"),
    (_crop({"roi": np.array([0, 0, 0.1, 0.1, 1, 1, 0.9, 0.9]), "scales": np.zeros(0, np.float32),
            "sizes": np.array([1, 3, 3, 5], np.int64)}), UnsupportedModelError,
     "roi 'roi' of dtype float64: only float32"),
    (_crop(_sizes(1, 3, 3, 5, roi=[0, 0, np.nan, 0.1, 1, 1, 0.9, 0.9])), UnsupportedModelError,
     "roi [0.0, 0.0, nan, 0.10000000149011612, 1.0, 1.0, 0.8999999761581421, "
     "0.8999999761581421] must be finite"),
    (_crop(_sizes(3, 5, roi=[0.1, -3e38, 0.9, 3e38]), axes=[2, 3]), UnsupportedModelError,
     "roi [-3.0000000054977558e+38, 3.0000000054977558e+38] of spatial axis 1 (input shape "
     "[1, 3, 4, 6]) puts coordinates past float32's range"),
    (_crop(_sizes(1, 3, 0, 5, roi=[0, 0, 0.1, 0.1, 1, 1, 0.9, 0.9])), UnsupportedModelError,
     "output spatial size [0, 5]: every entry must be >= 1"),
    (_crop(_sizes(1, 3, 3, 5, roi=[0, 0, 0.1, 0.1, 1, 1, 0.9, 0.9]), antialias=1),
     UnsupportedModelError, "attribute antialias=1 with coordinate_transformation_mode="
     "'tf_crop_and_resize': not supported (the resize op's antialias windows have no region"),
    (_crop(_sizes(5, roi=[0.1, 0.9]), shape=(1, 3, "h", 6), axes=[2]), UnsupportedModelError,
     "spatial axis 0 is a run-time dim; coordinate_transformation_mode='tf_crop_and_resize' "
     "needs the resized axes static"),
    (_crop(_sizes(1, 3, 3, 5, roi=[0, 0, 0.1, 0.1, 1, 1, 0.9, 0.9]), shape=(1, 3, 4),
           mode="cubic"), UnsupportedModelError, "mode='cubic' needs (N, C, H, W)"),
    (_policy(_sizes(0, 5), axes=[2, 3]), UnsupportedModelError,
     "attribute keep_aspect_ratio_policy='not_larger' with sizes [0, 5] on input shape "
     "[1, 3, 4, 6]: every size and input dim on axes [2, 3] must be >= 1"),
    (_policy(_sizes(0, 5), "not_smaller", axes=[2, 3]), UnsupportedModelError,
     "with sizes [0, 5] on input shape [1, 3, 4, 6]: every size and input dim"),
    (_policy(_sizes(1, 3, -2, 5)), UnsupportedModelError, "every size and input dim on axes "
     "[0, 1, 2, 3] must be >= 1"),
    (_policy(_scales(1, 1, 2, 2)), UnsupportedModelError,
     "attribute keep_aspect_ratio_policy='not_larger' needs the sizes input, not scales"),
    (_policy(_sizes(1, 3, 2, 3)), UnsupportedModelError,
     "with sizes [1, 3, 2, 3] on input shape [1, 3, 4, 6] gives the batch and channel axes the "
     "scale 0.5 too (output shape [1, 2, 2, 3]): only the spatial axes may change"),
    (_policy(_sizes(1, 3, 8, 8), "not_smaller"), UnsupportedModelError,
     "gives the batch and channel axes the scale 2.0 too (output shape [2, 6, 8, 12])"),
    (_policy(_sizes(5, 2), shape=(1, 3, 1, 9), axes=[2, 3]), UnsupportedModelError,
     "with sizes [5, 2] on input shape [1, 3, 1, 9] gives output shape [1, 3, 0, 2] (scale "
     "0.2222222238779068): an empty output is not supported"),
    (_policy(_sizes(5, 5), shape=(1, 3, "h", 6), axes=[2, 3]), UnsupportedModelError,
     "with sizes [5, 5] on input shape [1, 3, 'h', 6]: axis 2 is a run-time dim"),
    (_policy(_sizes(5, 5), "fit", axes=[2, 3]), UnsupportedModelError,
     "attribute keep_aspect_ratio_policy='fit' is not supported (only stretch, not_larger, "
     "not_smaller)"),
    (_policy(_sizes(9, 6), axes=[-2, -1]), UnsupportedModelError,
     "attribute keep_aspect_ratio_policy='not_larger' with negative axes [-2, -1]: onnxruntime "
     "leaves a negative axis out of the policy"),
    (_policy(_sizes(3, 5), axes=[2, 3], mode="linear", antialias=1), UnsupportedModelError,
     "attribute antialias=1 with keep_aspect_ratio_policy='not_larger': not supported where a "
     "size is not floor(in * scale) (sizes [3, 5], scales [0.75, 0.75];"),
], ids=["roi-short", "roi-of-every-axis-with-axes", "roi-empty", "roi-run-time", "roi-float64",
        "roi-nan", "roi-overflows", "crop-size-zero", "crop-antialias", "crop-run-time-height",
        "crop-cubic-3d",
        "policy-size-zero", "not-smaller-size-zero", "policy-negative-size", "policy-scales",
        "policy-scales-the-channels", "policy-scales-the-batch", "policy-empty-output",
        "policy-run-time-height", "policy-unknown", "policy-negative-axes",
        "policy-antialias-taps"])
def test_what_the_mapping_cannot_take_is_refused_naming_the_node(tmp_path, case, error,
                                                                 message):
    shape, consts, attrs, kw = case[:4]
    model = _model(tmp_path, "Resize", shape, consts, attrs=attrs, opset=19,
                   **(case[4] if len(case) > 4 else kw))
    assert_refused(model, error, NODE, message)


def test_tf_crop_and_resize_of_float64_is_refused_naming_the_node(tmp_path):
    """onnxruntime's Resize has no float64: a float64 x (cast from the float32 input) is
    refused, not imported as a graph onnxruntime cannot run."""
    helper = onnx.helper
    nodes = [helper.make_node("Cast", ["x"], ["xd"], to=TP.DOUBLE, name="wide"),
             helper.make_node("Resize", ["xd", "roi", "", "sizes"], ["yd"], name="node",
                              mode="linear", coordinate_transformation_mode="tf_crop_and_resize",
                              axes=[2, 3]),
             helper.make_node("Cast", ["yd"], ["y"], to=TP.FLOAT, name="narrow")]
    consts = _sizes(3, 5, roi=[0.1, 0.2, 0.9, 0.8])
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, [1, 3, 4, 6])],
        [helper.make_tensor_value_info("y", TP.FLOAT, [None] * 4)],
        [onnx.numpy_helper.from_array(consts[k], k) for k in ("roi", "sizes")])
    model = tmp_path / "f64.onnx"
    model.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
                      .SerializeToString())
    assert_refused(model, UnsupportedModelError, NODE, "input 'xd' of dtype float64: "
                   "coordinate_transformation_mode='tf_crop_and_resize' needs float32")
