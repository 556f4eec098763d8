"""Antialiased Resize imported from ONNX (antialias=1: torch's interpolate(..., antialias=True)
with bilinear and bicubic) as the resize op's antialias (onnxruntime's windows: the numpy
backend builds their weights, the onnxruntime backend runs its own Resize); compared with
onnxruntime on both backends. What the mapping cannot take is refused naming the node and the
attribute."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import UnsupportedModelError

from .conftest import (EXPORTERS, assert_refused, check_against_onnxruntime,
                       check_on_both_backends, export, float64_inside, import_and_load, onnx,
                       torch)
from .test_resize import _model

F = torch.nn.functional
TP = onnx.TensorProto
RNG = np.random.default_rng(11)
ROI = np.zeros(0, np.float32)
NODE = "node 'node' (Resize)"


def _feeds(shape, nonfinite: bool = True):
    """Normal inputs, image-like ones in [0, 255], and (``nonfinite``) normal ones with an inf,
    a -inf and a nan (a dense weight matrix would spread them over its rows)."""
    feeds = [{"x": (RNG.standard_normal(shape) * 3).astype(np.float32)},
             {"x": RNG.uniform(0, 255, shape).astype(np.float32)}]
    if nonfinite:
        x = RNG.standard_normal(shape).astype(np.float32)
        flat = x.reshape(-1)
        flat[RNG.choice(flat.size, 3, replace=False)] = [np.inf, -np.inf, np.nan]
        feeds.append({"x": x})
    return feeds


def _scales(*spatial):
    return {"roi": ROI, "scales": np.array([1, 1, *spatial], np.float32)}


def _sizes(*sizes):
    return {"roi": ROI, "scales": np.zeros(0, np.float32), "sizes": np.array(sizes, np.int64)}


def _resampled_axes(loaded) -> int:
    """The graph is one ``resize`` with antialias: how many axes change size."""
    (node,) = loaded.graph.nodes
    assert node.op == "resize" and node.attrs["antialias"]
    (x,), (y,) = loaded.graph.inputs, loaded.graph.outputs
    return sum(a != b for a, b in zip(x.shape[2:], y.shape[2:]))


#: (id, input shape, constant inputs, extra attributes, axes resampled)
CASES = [
    ("both-down", (2, 3, 12, 16), _scales(0.5, 0.25), {}, 2),
    ("height-down", (2, 3, 12, 16), _scales(0.3, 1.0), {}, 1),
    ("width-down", (2, 3, 12, 16), _scales(1.0, 0.45), {}, 1),
    ("up-and-down", (2, 3, 7, 20), _scales(1.7, 0.13), {}, 2),
    ("down-and-up", (1, 2, 16, 5), _scales(0.77, 2.5), {}, 2),
    ("non-integer", (1, 3, 13, 11), _scales(0.61, 0.37), {}, 2),
    ("sizes", (2, 3, 30, 7), _sizes(2, 3, 4, 3), {}, 2),
    ("sizes-to-one", (1, 2, 9, 13), _sizes(1, 2, 1, 1), {}, 2),
    ("axes", (2, 3, 10, 14), {"roi": ROI, "scales": np.array([0.4, 0.7], np.float32)},
     {"axes": [3, 2]}, 2),
    ("axes-sizes", (2, 3, 10, 14), {"roi": ROI, "scales": np.zeros(0, np.float32),
                                    "sizes": np.array([5], np.int64)}, {"axes": [-1]}, 1),
]


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("coordinate", ["half_pixel", "pytorch_half_pixel", "align_corners",
                                        "asymmetric", "half_pixel_symmetric",
                                        "tf_half_pixel_for_nn"])
@pytest.mark.parametrize("exclude", [0, 1])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_shrinking_resize_matches_onnxruntime(tmp_path, signer, mode,
                                                                    coordinate, exclude, case):
    _, shape, consts, attrs, matmuls = case
    model = _model(tmp_path, "Resize", shape, consts, attrs={
        "mode": mode, "antialias": 1, "coordinate_transformation_mode": coordinate,
        "exclude_outside": exclude, **attrs})
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    assert _resampled_axes(loaded) == matmuls
    check_against_onnxruntime(model, loaded, _feeds(shape))


@pytest.mark.parametrize("coeff", [-0.5, -0.75, -1.0, 0.3])
def test_cubic_coeff_a_is_the_filter_of_the_weights(tmp_path, signer, coeff):
    model = _model(tmp_path, "Resize", (1, 3, 14, 10), _scales(0.4, 0.55), attrs={
        "mode": "cubic", "antialias": 1, "cubic_coeff_a": coeff})
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    check_against_onnxruntime(model, loaded, _feeds((1, 3, 14, 10)))


@pytest.mark.parametrize("coordinate", ["half_pixel", "pytorch_half_pixel", "align_corners",
                                        "asymmetric"])
@pytest.mark.parametrize("exclude", [0, 1])
def test_one_dimensional_linear_resize_with_a_run_time_batch(tmp_path, signer, coordinate,
                                                             exclude):
    model = _model(tmp_path, "Resize", ("n", 3, 17), {"roi": ROI, "scales": np.array(
        [1, 1, 0.35], np.float32)}, attrs={"mode": "linear", "antialias": 1,
                                           "exclude_outside": exclude,
                                           "coordinate_transformation_mode": coordinate})
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    assert _resampled_axes(loaded) == 1
    assert loaded.graph.outputs[0].shape == ("n", 3, 5)
    check_against_onnxruntime(model, loaded, [f for n in (1, 4) for f in _feeds((n, 3, 17))])


GROWING = [_scales(2.5, 1.5), _scales(1.0, 3.0), _sizes(2, 3, 9, 6), _scales(2.9, 1.1)]
GROWING_IDS = ["up", "width-up", "sizes-up", "width-kept"]  # 6 * 1.1 is 6: a kept width


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("exclude", [0, 1])
@pytest.mark.parametrize("consts", GROWING, ids=GROWING_IDS)
def test_growing_takes_onnxruntime_s_antialias_windows(tmp_path, signer, mode, exclude,
                                                       consts):
    """Growing, onnxruntime's antialias windows are not its plain Resize's (linear reads 3
    taps, one of weight 0, so an inf next to a window gives nan; its cubic weights differ by
    rounding large enough to miss the tolerance near 0 among inputs up to 255): tap by tap
    along each axis whose size changes, none along a kept one (copied whatever its scale)."""
    model = _model(tmp_path, "Resize", (2, 3, 4, 6), consts, attrs={
        "mode": mode, "antialias": 1, "exclude_outside": exclude})
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    out = loaded.graph.outputs[0].shape[2:]
    assert _resampled_axes(loaded) == (out[0] != 4) + (out[1] != 6)
    check_against_onnxruntime(model, loaded, _feeds((2, 3, 4, 6)) + [
        {"x": RNG.uniform(0, 255, (2, 3, 4, 6)).astype(np.float32)} for _ in range(6)])


def test_every_size_kept_copies_x(tmp_path, signer):
    model = _model(tmp_path, "Resize", (2, 3, 4, 6), _scales(1.1, 1.1), attrs={
        "mode": "cubic", "antialias": 1})
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    (node,) = loaded.graph.nodes
    assert node.op == "resize" and not node.attrs["antialias"]
    check_against_onnxruntime(model, loaded, _feeds((2, 3, 4, 6)))


def test_growing_on_the_onnxruntime_backend(tmp_path, signer):
    from plugins.onnxruntime_backend import OnnxruntimeBackend

    model = _model(tmp_path, "Resize", (2, 3, 4, 6), _scales(2.5, 1.5), attrs={
        "mode": "linear", "antialias": 1, "exclude_outside": 1})
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    check_against_onnxruntime(model, loaded, _feeds((2, 3, 4, 6)), backend=OnnxruntimeBackend())


def test_shrinking_on_the_onnxruntime_backend(tmp_path, signer):
    from plugins.onnxruntime_backend import OnnxruntimeBackend

    model = _model(tmp_path, "Resize", (2, 3, 12, 9), _scales(0.5, 1.5), attrs={
        "mode": "cubic", "antialias": 1, "cubic_coeff_a": -0.5, "exclude_outside": 1})
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    check_against_onnxruntime(model, loaded, _feeds((2, 3, 12, 9)), backend=OnnxruntimeBackend())


class _Smooth(torch.nn.Module):
    """What torchvision's resize with antialias does: interpolate with antialias=True."""

    def __init__(self, mode: str):
        super().__init__()
        self.mode = mode

    def forward(self, x):
        return (F.interpolate(x, size=(5, 7), mode=self.mode, antialias=True,
                              align_corners=False),
                F.interpolate(x, size=(3, 20), mode=self.mode, antialias=True,
                              align_corners=False),
                F.interpolate(x, scale_factor=0.3, mode=self.mode, antialias=True),
                F.interpolate(x, size=(24, 30), mode=self.mode, antialias=True))


#: the legacy exporter has no symbolic for aten::_upsample_bilinear2d_aa or its bicubic
#: sibling at any opset, so only the dynamo exporter's cases are collected
DYNAMO = [p for p in EXPORTERS if p.values[0]]


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("dynamo, fold, optimize", DYNAMO)
def test_interpolate_with_antialias_matches_onnxruntime(tmp_path, signer, mode, dynamo, fold,
                                                        optimize):
    names = ["a", "b", "c", "up"]
    model = export(_Smooth(mode), [torch.randn(2, 3, 12, 16)], tmp_path / "s.onnx",
                   dynamo=dynamo, fold=fold, optimize=optimize, input_names=["x"],
                   output_names=names)
    _, loaded = import_and_load(model, tmp_path / "s.pha", signer)
    ops = [n.op for n in loaded.graph.nodes]
    assert ops == ["resize"] * 4 and all(n.attrs["antialias"] for n in loaded.graph.nodes)
    assert {s.name: s.shape for s in loaded.graph.outputs} == {
        "a": (2, 3, 5, 7), "b": (2, 3, 3, 20), "c": (2, 3, 3, 4), "up": (2, 3, 24, 30)}
    check_against_onnxruntime(model, loaded, _feeds((2, 3, 12, 16)))


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_the_legacy_exporter_still_cannot_write_antialias(tmp_path, mode):
    """When it can, collect its cases in the test above."""
    with pytest.raises(torch.onnx.errors.UnsupportedOperatorError, match="_aa"):
        export(_Smooth(mode), [torch.randn(1, 1, 12, 16)], tmp_path / "s.onnx", dynamo=False,
               opset=18)


def _refused(tmp_path, shape=(1, 3, 8, 8), consts=None, attrs=None, **kw):
    return _model(tmp_path, "Resize", shape, _scales(0.5, 0.5) if consts is None else consts,
                  attrs={"mode": "linear", "antialias": 1, **(attrs or {})}, **kw)


@pytest.mark.parametrize("args, message", [
    ({"attrs": {"mode": "nearest"}}, "attribute antialias=1 with mode='nearest' is not "
     "supported: onnxruntime refuses it"),
    ({"attrs": {"antialias": 2}}, "attribute antialias=2 is not supported (only 0, 1)"),
    ({"attrs": {"keep_aspect_ratio_policy": "not_smaller"}},
     "attribute keep_aspect_ratio_policy='not_smaller' needs the sizes input, not scales"),
    ({"attrs": {"coordinate_transformation_mode": "tf_crop_and_resize"}},
     "attribute antialias=1 with coordinate_transformation_mode='tf_crop_and_resize': not "
     "supported"),
    ({"shape": (1, 3, "h", "w"), "consts": _sizes(1, 3, 4, 4)},
     "attribute antialias=1 on input shape [1, 3, 'h', 'w']: the spatial dims must be static"),
    ({"shape": (1, 3, 8), "consts": {"roi": ROI, "scales": np.array([1, 1, .5], np.float32)},
      "attrs": {"mode": "cubic"}}, "input shape [1, 3, 8]: mode='cubic' needs (N, C, H, W)"),
    ({"consts": _scales(0.1, 0.5)}, "attribute antialias=1 with output spatial size [0, 4]: "
     "every entry must be >= 1"),
    ({"consts": _sizes(1, 3, 4, 0), "attrs": {"mode": "cubic"}},
     "attribute antialias=1 with output spatial size [4, 0]: every entry must be >= 1"),
    ({"consts": {"roi": ROI}, "inputs": ["x", "roi", "s"], "runtime": {"s": (TP.FLOAT, [4])}},
     "scales 's' must be a constant (known at import), but it is computed at run time"),
])
def test_what_antialias_refuses_names_node_and_attribute(tmp_path, args, message):
    assert_refused(_refused(tmp_path, **args), UnsupportedModelError, NODE, message)


def test_a_float64_input_is_refused(tmp_path):
    """onnxruntime has no float64 Resize (a float16 model is refused before, unless upcast; a
    float64 input too, so here x is cast to float64 inside)."""
    model = onnx.helper.make_model(onnx.helper.make_graph(
        [onnx.helper.make_node("Resize", ["x", "roi", "scales"], ["y"], name="node",
                               mode="linear", antialias=1)], "g",
        [onnx.helper.make_tensor_value_info("x", TP.DOUBLE, [1, 3, 8, 8])],
        [onnx.helper.make_tensor_value_info("y", TP.DOUBLE, [None] * 4)],
        initializer=[onnx.numpy_helper.from_array(v, n) for n, v in _scales(.5, .5).items()]),
        opset_imports=[onnx.helper.make_opsetid("", 18)])
    path = tmp_path / "d.onnx"
    path.write_bytes(model.SerializeToString())
    assert_refused(float64_inside(path), UnsupportedModelError, NODE,
                   "input 'x' of dtype float64: antialias=1 needs float32 (onnxruntime's "
                   "Resize has no float64)")


@pytest.mark.parametrize("mode, scale", [("linear", 0.05), ("cubic", 0.1)])
def test_wide_windows_match_onnxruntime(tmp_path, signer, mode, scale):
    """Shrinking 20 and 10 times: windows of 41 taps."""
    model = _model(tmp_path, "Resize", (1, 2, 5, 200), _scales(1.0, scale), attrs={
        "mode": mode, "antialias": 1})
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    assert _resampled_axes(loaded) == 1
    check_on_both_backends(model, loaded, _feeds((1, 2, 5, 200)))


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("backend", ["numpy", "onnxruntime"])
def test_an_inf_or_nan_stays_within_its_windows(tmp_path, signer, mode, backend):
    """Tap by tap, as onnxruntime: a non-finite input reaches only the outputs whose windows
    hold it, the others stay finite."""
    from plugins.onnxruntime_backend import OnnxruntimeBackend

    model = _model(tmp_path, "Resize", (1, 2, 12, 16), _scales(0.5, 0.25), attrs={
        "mode": mode, "antialias": 1})
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    x = RNG.standard_normal((1, 2, 12, 16)).astype(np.float32)
    x[0, 0, 3, 5], x[0, 1, 8, 0], x[0, 1, 0, 15] = np.nan, np.inf, -np.inf
    (got, want), = check_against_onnxruntime(
        model, loaded, [{"x": x}], backend=OnnxruntimeBackend() if backend != "numpy" else None)
    (name,) = want
    finite = np.isfinite(want[name])
    assert (finite == np.isfinite(got[name])).all() and 0 < finite.sum() < finite.size


def test_windows_over_the_weights_cap_are_refused(tmp_path):
    """A long output of wide windows: 2**20 outputs of 129 taps each, over the resize op's
    cap on an axis' antialias weights."""
    model = _refused(tmp_path, (1, 1, 1, 2 ** 26), _sizes(1, 1, 1, 2 ** 20))
    assert_refused(model, UnsupportedModelError, NODE, "antialias on spatial axis 1 (67108864 "
                   "to 1048576) needs 1048576 windows of 129 taps, over the cap of 67108864 "
                   "weights")