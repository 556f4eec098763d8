"""Antialiased Resize imported from ONNX (antialias=1: torch's interpolate(..., antialias=True)
with bilinear and bicubic): a matmul by a constant weight matrix per resized axis when an axis
shrinks, the resize op when none does; compared with onnxruntime. What the mapping cannot take
is refused naming the node and the attribute."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import ModelFileError, UnsupportedModelError
from plugin_host.onnx_import import import_onnx
from plugin_host.onnx_import.reader import ReadLimits

from .conftest import (EXPORTERS, assert_refused, check_against_onnxruntime, export,
                       float64_inside, import_and_load, onnx, torch)
from .test_resize import _model

F = torch.nn.functional
TP = onnx.TensorProto
RNG = np.random.default_rng(11)
ROI = np.zeros(0, np.float32)
NODE = "node 'node' (Resize)"


def _feeds(shape):
    """Finite inputs (a dense weight matrix spreads an inf or nan over its row): normal ones
    and image-like ones in [0, 255]."""
    return [{"x": (RNG.standard_normal(shape) * 3).astype(np.float32)},
            {"x": RNG.uniform(0, 255, shape).astype(np.float32)}]


def _scales(*spatial):
    return {"roi": ROI, "scales": np.array([1, 1, *spatial], np.float32)}


def _sizes(*sizes):
    return {"roi": ROI, "scales": np.zeros(0, np.float32), "sizes": np.array(sizes, np.int64)}


#: (id, input shape, constant inputs, extra attributes, matmuls expected)
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
                                        "asymmetric"])
@pytest.mark.parametrize("exclude", [0, 1])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_shrinking_resize_is_a_matmul_per_axis_matching_onnxruntime(tmp_path, signer, mode,
                                                                    coordinate, exclude, case):
    _, shape, consts, attrs, matmuls = case
    model = _model(tmp_path, "Resize", shape, consts, attrs={
        "mode": mode, "antialias": 1, "coordinate_transformation_mode": coordinate,
        "exclude_outside": exclude, **attrs})
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    assert [n.op for n in loaded.graph.nodes] == ["matmul"] * matmuls
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
    assert [n.op for n in loaded.graph.nodes] == ["matmul"]
    assert loaded.graph.outputs[0].shape == ("n", 3, 5)
    check_against_onnxruntime(model, loaded, [f for n in (1, 4) for f in _feeds((n, 3, 17))])


GROWING = [_scales(2.5, 1.5), _scales(1.0, 3.0), _sizes(2, 3, 9, 6), _scales(2.9, 1.1)]
GROWING_IDS = ["up", "width-up", "sizes-up", "width-kept"]  # 6 * 1.1 is 6: a kept width


@pytest.mark.parametrize("exclude", [0, 1])
@pytest.mark.parametrize("consts", GROWING, ids=GROWING_IDS)
def test_linear_with_no_axis_shrinking_emits_the_resize_op(tmp_path, signer, exclude, consts):
    """antialias widens the filter only along an axis that shrinks; growing, onnxruntime's
    linear antialias weights are its plain ones up to rounding. A kept axis is copied
    whatever its scale (the resize op is given scale 1 there)."""
    model = _model(tmp_path, "Resize", (2, 3, 4, 6), consts, attrs={
        "mode": "linear", "antialias": 1, "exclude_outside": exclude})
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    assert [n.op for n in loaded.graph.nodes] == ["resize"]
    check_against_onnxruntime(model, loaded, _feeds((2, 3, 4, 6)))


@pytest.mark.parametrize("exclude", [0, 1])
@pytest.mark.parametrize("consts", GROWING, ids=GROWING_IDS)
def test_growing_cubic_takes_onnxruntime_s_antialias_weights(tmp_path, signer, exclude,
                                                            consts):
    """onnxruntime's antialias cubic weights differ from its plain cubic ones by rounding
    large enough to miss the tolerance near 0 among inputs up to 255: a matmul per resized
    axis (none for a kept one), as when shrinking."""
    model = _model(tmp_path, "Resize", (2, 3, 4, 6), consts, attrs={
        "mode": "cubic", "antialias": 1, "exclude_outside": exclude})
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    kept = list(loaded.graph.outputs[0].shape[2:]) == [4, 6]
    assert [n.op for n in loaded.graph.nodes] == ["resize"] if kept else ["matmul"] * (
        1 + (loaded.graph.outputs[0].shape[3] != 6))
    check_against_onnxruntime(model, loaded, _feeds((2, 3, 4, 6)) + [
        {"x": RNG.uniform(0, 255, (2, 3, 4, 6)).astype(np.float32)} for _ in range(6)])


def test_every_size_kept_copies_x(tmp_path, signer):
    model = _model(tmp_path, "Resize", (2, 3, 4, 6), _scales(1.1, 1.1), attrs={
        "mode": "cubic", "antialias": 1})
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    assert [n.op for n in loaded.graph.nodes] == ["resize"]
    check_against_onnxruntime(model, loaded, _feeds((2, 3, 4, 6)))


def test_no_axis_shrinking_on_the_onnxruntime_backend(tmp_path, signer):
    """linear with exclude_outside=1 reaches onnxruntime's plain Resize without it (which
    onnxruntime refuses on linear without antialias)."""
    from plugins.onnxruntime_backend import OnnxruntimeBackend

    model = _model(tmp_path, "Resize", (2, 3, 4, 6), _scales(2.5, 1.5), attrs={
        "mode": "linear", "antialias": 1, "exclude_outside": 1})
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    assert not loaded.graph.nodes[0].attrs["exclude_outside"]
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
    ops = sorted(n.op for n in loaded.graph.nodes)
    assert ops == (["matmul"] * 6 + ["resize"] if mode == "bilinear" else ["matmul"] * 8), ops
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
     "attribute keep_aspect_ratio_policy='not_smaller' is not supported (only 'stretch')"),
    ({"attrs": {"coordinate_transformation_mode": "tf_crop_and_resize"}},
     "attribute coordinate_transformation_mode='tf_crop_and_resize' is not supported"),
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


def test_weights_above_the_tensor_cap_are_refused(tmp_path):
    """A (1, 3, 4, 40) input halved along its width: an 80-element output from a 20 x 40
    weight matrix."""
    model = _refused(tmp_path, (1, 3, 4, 40), _scales(1.0, 0.5))
    with pytest.raises(ModelFileError) as info:
        import_onnx(model, limits=ReadLimits(max_tensor_elements=700))
    text = str(info.value)
    assert NODE in text and "its antialias weights for axis 3 of shape (20, 40) would have " \
        "800 elements, above the cap of 700" in text, text
    import_onnx(model, limits=ReadLimits(max_tensor_elements=800))


def test_filter_windows_above_the_tensor_cap_are_refused(tmp_path):
    """A width of 40 shrunk to 1: a 1 x 40 matrix, but onnxruntime's window of 2 * 40 + 1
    taps (the filter widened 40 times), which the weights are built in."""
    model = _refused(tmp_path, (1, 1, 1, 40), _sizes(1, 1, 1, 1))
    with pytest.raises(ModelFileError) as info:
        import_onnx(model, limits=ReadLimits(max_tensor_elements=60))
    text = str(info.value)
    assert NODE in text and "its antialias filter windows for axis 3 of shape (1, 81) would " \
        "have 81 elements, above the cap of 60" in text, text
