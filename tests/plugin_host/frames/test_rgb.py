"""Camera frames -> a colour image input (frames/rgb.py): BT.601 video range against torch, the
sampling and fits against torch's resize, RGB frames, the channel orders and layouts, the values
of a float input, and refused formats."""

from __future__ import annotations

import math

import numpy as np
import pytest

from plugin_host.errors import ShapeError
from plugin_host.frames.convert import nearest_indices
from plugin_host.frames.rgb import (RgbFormat, RgbImage, fit_boxes, frame_to_rgb, gray_to_rgb,
                                    nv12_to_rgb, rgb_input_problem, rgb_layout, rgb_to_rgb)


def torch_bt601(y, u, v):
    """The module's formula in torch float64, from BT.601's Kr and Kb: (3, ...) exact values."""
    torch = pytest.importorskip("torch")
    kr, kb = 0.299, 0.114
    kg = 1 - kr - kb
    y, u, v = (torch.from_numpy(np.asarray(a, np.float64)) for a in (y, u, v))
    luma = (y - 16).clamp(min=0) * 255 / 219
    cb, cr = (u - 128) * 255 / 224, (v - 128) * 255 / 224
    return torch.stack([luma + 2 * (1 - kr) * cr,
                        luma - 2 * kb * (1 - kb) / kg * cb - 2 * kr * (1 - kr) / kg * cr,
                        luma + 2 * (1 - kb) * cb]).numpy()


def assert_rounds_to(got: np.ndarray, exact: np.ndarray, near: float = 1e-4) -> None:
    """``got`` is ``exact`` rounded to the nearest integer and clipped to 0..255; within
    ``near`` of a half (float32's reach there) it may round either way."""
    want = np.clip(np.rint(exact), 0, 255)
    near_half = np.abs(exact - np.floor(exact) - 0.5) < near
    diff = got.astype(np.int64) - want.astype(np.int64)
    assert np.all(diff[~near_half] == 0), np.argwhere((diff != 0) & ~near_half)[:5]
    assert np.all(np.abs(diff[near_half]) <= 1)


def test_every_sample_triple_against_torch():
    """Every (Y, U, V) of 0..255 (16.7 million) through NV12 frames the size of the image (no
    resizing): chroma (U, V) = (row, column) of a 256 x 256 grid, each 2 x 2 luma block of one
    chroma sample walking all 256 luma values over 64 frames."""
    cu, cv = np.mgrid[0:256, 0:256].astype(np.uint8)
    uv = np.stack([cu, cv], axis=-1)
    block = np.arange(4, dtype=np.int64).reshape(2, 2)
    for base in range(0, 256, 4):
        y = np.tile((base + block) % 256, (256, 256)).astype(np.uint8)
        got = nv12_to_rgb(y, uv, width=512, height=512)
        exact = torch_bt601(y, np.repeat(np.repeat(cu, 2, 0), 2, 1),
                            np.repeat(np.repeat(cv, 2, 0), 2, 1))
        assert_rounds_to(got, exact)


def test_known_colours():
    """Video-range black, white and the saturated primaries of BT.601 (the luma and chroma
    codes a camera gives for them) come out as 8-bit black, white, red, green and blue."""
    cases = {(16, 128, 128): (0, 0, 0), (235, 128, 128): (255, 255, 255),
             (81, 90, 240): (255, 0, 0), (145, 54, 34): (0, 255, 0), (41, 240, 110): (0, 0, 255)}
    for (y0, u0, v0), rgb in cases.items():
        y = np.full((2, 2), y0, np.uint8)
        uv = np.array([[[u0, v0]]], np.uint8)
        got = nv12_to_rgb(y, uv, width=2, height=2)
        assert np.all(np.abs(got[:, 0, 0].astype(int) - rgb) <= 1), (y0, u0, v0, got[:, 0, 0])
        bgr = nv12_to_rgb(y, uv, width=2, height=2, color="bgr")
        np.testing.assert_array_equal(bgr, got[::-1])


def test_resizing_samples_one_source_pixel_and_its_own_chroma():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 256, (120, 200), dtype=np.uint8)
    uv = rng.integers(0, 256, (60, 100, 2), dtype=np.uint8)
    got = nv12_to_rgb(y, uv, width=64, height=48)
    rows, cols = nearest_indices(120, 48), nearest_indices(200, 64)
    full = nv12_to_rgb(y, uv, width=200, height=120)  # the frame's own size: no resizing
    np.testing.assert_array_equal(got, full[:, rows][:, :, cols])
    r, c = rows[:, None], cols[None, :]
    exact = torch_bt601(y[r, c], uv[r // 2, c // 2, 0], uv[r // 2, c // 2, 1])
    assert_rounds_to(got, exact)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", [np.float32, np.uint8])
def test_image_input_in_each_layout_and_type(layout, dtype):
    rng = np.random.default_rng(2)
    y = rng.integers(0, 256, (96, 160), dtype=np.uint8)
    uv = rng.integers(0, 256, (48, 80, 2), dtype=np.uint8)
    shape = (1, 3, 30, 50) if layout == "NCHW" else (1, 30, 50, 3)
    fmt = (RgbFormat("bgr", 1 / 255, (0.406, 0.456, 0.485), (0.225, 0.224, 0.229))
           if dtype == np.float32 else RgbFormat("bgr"))
    out = np.full(shape, 7, dtype)
    maker = RgbImage(out, layout, fmt)
    assert maker.push(y, uv) is out
    planes = nv12_to_rgb(y, uv, width=50, height=30, color="bgr")
    if dtype == np.float32:  # the float32 arithmetic, element by element
        f = np.float32
        planes = np.stack([(planes[c].astype(f) * f(1 / 255) - f(fmt.mean[c])) / f(fmt.std[c])
                           for c in range(3)])
    image = out[0] if layout == "NCHW" else out[0].transpose(2, 0, 1)
    np.testing.assert_array_equal(image, planes)
    maker.reset()  # nothing kept between frames: the same frame gives the same image
    before = out.copy()
    maker.push(y, uv)
    np.testing.assert_array_equal(out, before)


def test_layout_from_shape_and_abi():
    assert rgb_layout((1, 3, 224, 224), "NCHW") == "NCHW"
    assert rgb_layout((1, 224, 224, 3), "NCHW") == "NHWC"  # only the last axis can be colour
    assert rgb_layout((1, 3, 8, 3), "NCHW") == "NCHW"
    assert rgb_layout((1, 3, 8, 3), "NHWC") == "NHWC"
    for shape in [(1, 4, 8, 8), (2, 3, 8, 8), (3, 8, 8), (1, 3, "h", 8), (1, 3, 0, 8)]:
        assert rgb_layout(shape, "NCHW") is None


class Spec:
    def __init__(self, shape, dtype="float32", layout="NCHW"):
        self.name, self.shape, self.dtype, self.layout = "images", shape, dtype, layout


def test_input_problem_names_the_input():
    assert rgb_input_problem(Spec((1, 3, 64, 64))) is None
    assert rgb_input_problem(Spec((1, 64, 64, 3), "uint8")) is None
    for spec in [Spec((1, 3, 64, 64), "float16"), Spec((1, 1, 64, 64)),
                 Spec((1, 3, "h", "w"))]:
        problem = rgb_input_problem(spec)
        assert "'images'" in problem and "(1, 3, h, w) or (1, h, w, 3)" in problem
    assert rgb_input_problem(Spec((1, 3, 64, 64), "uint8"), RgbFormat("bgr")) is None
    assert rgb_input_problem(Spec((1, 3, 64, 64)), RgbFormat(scale=0.5)) is None
    assert rgb_input_problem(Spec((1, 3, 64, 64), "uint8"), RgbFormat(scale=0.5)) == (
        "input 'images' is uint8: it takes the samples as they are (scale, mean and std are "
        "for float32 inputs)")


@pytest.mark.parametrize("kwargs, words", [
    ({"color": "yuv"}, "color must be one of 'rgb', 'bgr'"),
    ({"scale": math.nan}, "scale must be a finite number"),
    ({"scale": "1"}, "scale must be a finite number"),
    ({"scale": 1e39}, "does not fit a float32"),
    ({"mean": (0.5, 0.5)}, "mean must be three numbers"),
    ({"std": [1, 0, 1]}, "std must not be 0"),
    ({"scale": 0}, "scale must not be 0"),
    ({"scale": -0.0}, "scale must not be 0"),
    ({"std": (1, math.inf, 1)}, "std must be finite"),
    ({"mean": (True, 0, 0)}, "mean must be finite"),
])
def test_bad_formats_are_refused(kwargs, words):
    with pytest.raises(ValueError, match=words):
        RgbFormat(**kwargs)


def test_format_round_trips_and_refuses_malformed_messages():
    fmt = RgbFormat("bgr", 0.5, [1, 2, 3], (4, 5, 6), "crop", 0, "bilinear", 0.875)
    assert fmt.mean == (1.0, 2.0, 3.0) and fmt.normalizes
    assert RgbFormat.from_wire(fmt.to_wire()) == fmt
    assert not RgbFormat().normalizes
    for bad in [None, [], {"color": "rgb"}, {**fmt.to_wire(), "extra": 1},
                {**fmt.to_wire(), "color": 3}, {**fmt.to_wire(), "std": [0, 1, 1]},
                {**fmt.to_wire(), "fit": None}, {**fmt.to_wire(), "pad": 300},
                {**fmt.to_wire(), "resize": "cubic"}, {**fmt.to_wire(), "resize": 1},
                {**fmt.to_wire(), "crop_fraction": 0}, {**fmt.to_wire(), "fit": "stretch"}]:
        with pytest.raises(ValueError):
            RgbFormat.from_wire(bad)


def test_uint8_input_takes_no_normalization():
    with pytest.raises(ValueError, match="uint8 image takes the samples as they are"):
        RgbImage(np.zeros((1, 3, 4, 4), np.uint8), "NCHW", RgbFormat(scale=0.5))


def test_bad_planes_and_outputs_are_shape_errors():
    y, uv = np.zeros((4, 4), np.uint8), np.zeros((2, 2, 2), np.uint8)
    for args in [(y[:3], uv), (y, uv[:1]), (y.astype(np.float32), uv), (y, uv[..., :1])]:
        with pytest.raises(ShapeError):
            nv12_to_rgb(*args, width=2, height=2)
    with pytest.raises(ShapeError, match="image size must be positive"):
        nv12_to_rgb(y, uv, width=0, height=2)
    with pytest.raises(ShapeError, match="out must be uint8"):
        nv12_to_rgb(y, uv, width=2, height=2, out=np.zeros((3, 2, 2), np.float32))
    with pytest.raises(ShapeError, match="RgbImage"):
        RgbImage(np.zeros((1, 3, 4, 4), np.float32), "NHWC", RgbFormat())


# --- fit: stretch, letterbox, crop -----------------------------------------------------------


def torch_nearest(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """torch's nearest-exact resize (the source pixel under each output pixel's centre) of a
    (3, H, W) uint8 image."""
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(image.astype(np.float32))[None]
    return torch.nn.functional.interpolate(t, size=size, mode="nearest-exact")[0].numpy()


def frame(h: int, w: int, seed: int = 3):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 256, (h, w), dtype=np.uint8),
            rng.integers(0, 256, (h // 2, w // 2, 2), dtype=np.uint8))


@pytest.mark.parametrize("size_in, size_out", [((120, 200), (48, 64)), ((96, 64), (40, 40)),
                                               ((64, 64), (30, 50)), ((1208, 1928), (64, 64))])
def test_each_fit_samples_as_torch_resizes(size_in, size_out):
    """The image of each fit against torch's nearest-exact resize of the frame converted at
    its own size: the whole frame (stretch), the whole frame into its box padded with
    ``pad`` (letterbox), the frame's centred box (crop)."""
    torch = pytest.importorskip("torch")
    y, uv = frame(*size_in)
    full = nv12_to_rgb(y, uv, width=size_in[1], height=size_in[0])
    h, w = size_out
    got = nv12_to_rgb(y, uv, width=w, height=h, fit="stretch")
    np.testing.assert_array_equal(got, torch_nearest(full, size_out))

    got = nv12_to_rgb(y, uv, width=w, height=h, fit="letterbox", pad=7)
    _, (oy, ox, oh, ow) = fit_boxes(size_in, size_out, "letterbox")
    box = torch_nearest(full, (oh, ow))
    padded = torch.nn.functional.pad(torch.from_numpy(box), (ox, w - ow - ox, oy, h - oh - oy),
                                     value=7.0).numpy()
    np.testing.assert_array_equal(got, padded)

    got = nv12_to_rgb(y, uv, width=w, height=h, fit="crop")
    (sy, sx, sh, sw), _ = fit_boxes(size_in, size_out, "crop")
    np.testing.assert_array_equal(got, torch_nearest(full[:, sy:sy + sh, sx:sx + sw], size_out))


@pytest.mark.parametrize("size_in", [(1208, 1928), (480, 640), (64, 64), (100, 30)])
@pytest.mark.parametrize("size_out", [(640, 640), (224, 224), (384, 640), (7, 3)])
def test_boxes_keep_the_aspect_ratio_centred(size_in, size_out):
    (h_in, w_in), (h, w) = size_in, size_out
    assert fit_boxes(size_in, size_out, "stretch") == ((0, 0, h_in, w_in), (0, 0, h, w))
    src, (oy, ox, oh, ow) = fit_boxes(size_in, size_out, "letterbox")
    assert src == (0, 0, h_in, w_in)
    assert (oh == h or ow == w) and 1 <= oh <= h and 1 <= ow <= w  # touches two edges
    assert abs(oh * w_in - ow * h_in) <= max(h_in, w_in)  # the frame's ratio, to a pixel
    assert oy == (h - oh) // 2 and ox == (w - ow) // 2
    (sy, sx, sh, sw), dst = fit_boxes(size_in, size_out, "crop")
    assert dst == (0, 0, h, w)
    assert (sh == h_in or sw == w_in) and 1 <= sh <= h_in and 1 <= sw <= w_in
    assert abs(sh * w - sw * h) <= max(h, w)  # the image's ratio, to a source pixel
    assert sy == (h_in - sh) // 2 and sx == (w_in - sw) // 2


@pytest.mark.parametrize("size_in", [(1208, 1928), (480, 640), (100, 30)])
@pytest.mark.parametrize("size_out, fraction", [((224, 224), 0.875), ((224, 224), 0.95),
                                                ((384, 640), 0.9), ((7, 3), 0.5)])
def test_a_crop_fraction_keeps_the_centre_of_the_crop_as_torchvision_does(size_in, size_out,
                                                                           fraction):
    """A crop of fraction f is the centred f share of the whole crop's box, on each side, to a
    pixel. For a square image of side S, torchvision's ``Resize(R)`` then ``CenterCrop(S)``
    takes S / R of the frame's shorter side, R an integer: the fraction S / R gives that box
    to a pixel (R = round(S / f) for f, to within R's rounding)."""
    (sy, sx, sh, sw), dst = fit_boxes(size_in, size_out, "crop", fraction)
    (_, _, full_h, full_w), _ = fit_boxes(size_in, size_out, "crop")
    assert dst == (0, 0) + size_out
    assert abs(sh - fraction * full_h) <= 1 and abs(sw - fraction * full_w) <= 1
    assert sy == (size_in[0] - sh) // 2 and sx == (size_in[1] - sw) // 2
    if size_out[0] == size_out[1]:
        resized = round(size_out[0] / fraction)
        (_, _, sh, sw), _ = fit_boxes(size_in, size_out, "crop", size_out[0] / resized)
        side = size_out[0] * min(size_in) / resized
        assert abs(sh - side) <= 1 and abs(sw - side) <= 1


@pytest.mark.parametrize("resize", ["nearest", "bilinear", "bilinear-antialias"])
def test_a_crop_fraction_resizes_its_box_against_torch(resize):
    y, uv = frame(1208, 1928)
    full = nv12_to_rgb(y, uv, width=1928, height=1208)
    got = nv12_to_rgb(y, uv, width=224, height=224, fit="crop", resize=resize,
                      crop_fraction=0.875)
    (sy, sx, sh, sw), _ = fit_boxes((1208, 1928), (224, 224), "crop", 0.875)
    assert (sh, sw) == (1057, 1057)  # 224 * 1208 / 256
    box = full[:, sy:sy + sh, sx:sx + sw]
    if resize == "nearest":
        np.testing.assert_array_equal(got, torch_nearest(box, (224, 224)))
    else:
        assert_rounds_to(got, torch_resized(box, (224, 224), resize), near=1e-3)
    plane = np.ascontiguousarray(full.transpose(1, 2, 0))  # the same samples, an RGB frame
    np.testing.assert_array_equal(rgb_to_rgb(plane, width=224, height=224, fit="crop",
                                             resize=resize, crop_fraction=0.875), got)


@pytest.mark.parametrize("kwargs, words", [
    ({"crop_fraction": 0}, "crop_fraction must be a number in \\(0, 1\\]"),
    ({"crop_fraction": 1.5}, "crop_fraction must be a number in"),
    ({"crop_fraction": math.nan}, "crop_fraction must be a number in"),
    ({"crop_fraction": True}, "crop_fraction must be a number in"),
    ({"crop_fraction": "0.9"}, "crop_fraction must be a number in"),
    ({"crop_fraction": 0.9, "fit": "letterbox"}, 'crop_fraction is for fit = "crop", got fit '
                                                 "'letterbox'"),
])
def test_bad_crop_fractions_are_refused(kwargs, words):
    with pytest.raises(ValueError, match=words):
        RgbFormat(**kwargs)
    y, uv = frame(8, 8)
    with pytest.raises(ValueError, match=words):
        nv12_to_rgb(y, uv, width=4, height=4, **{"fit": "crop", **kwargs})
    assert RgbFormat(fit="letterbox", crop_fraction=1).crop_fraction == 1.0


def test_a_letterboxed_float_image_pads_with_the_normalized_pad():
    y, uv = frame(64, 128)
    fmt = RgbFormat("rgb", 1 / 255, (0.5, 0.25, 0.0), (2.0, 4.0, 1.0), "letterbox", 114)
    out = np.zeros((1, 3, 32, 32), np.float32)
    RgbImage(out, "NCHW", fmt).push(y, uv)
    _, (oy, ox, oh, ow) = fit_boxes((64, 128), (32, 32), "letterbox")
    assert (oy, ox, oh, ow) == (8, 0, 16, 32)  # a 2:1 frame in a square: a band across
    f = np.float32
    for c in range(3):
        pad = (f(114) * f(1 / 255) - f(fmt.mean[c])) / f(fmt.std[c])
        assert np.all(out[0, c, :oy] == pad) and np.all(out[0, c, oy + oh:] == pad)
    samples = nv12_to_rgb(y, uv, width=32, height=32, fit="letterbox")
    np.testing.assert_array_equal(out[0], np.stack([
        (samples[c].astype(f) * f(1 / 255) - f(fmt.mean[c])) / f(fmt.std[c]) for c in range(3)]))


def test_bad_fits_and_pads_are_refused():
    y, uv = frame(8, 8)
    for fit in ("zoom", ["crop"]):  # (a list, unhashable, is refused the same way)
        with pytest.raises(ValueError, match="fit must be one of"):
            nv12_to_rgb(y, uv, width=4, height=4, fit=fit)
    with pytest.raises(ValueError, match="pad must be an integer of 0..255"):
        nv12_to_rgb(y, uv, width=4, height=4, fit="letterbox", pad=-1)
    with pytest.raises(ValueError, match="fit must be one of 'stretch', 'letterbox', 'crop'"):
        RgbFormat(fit="fill")
    for pad in (256, -1, 1.0, True):
        with pytest.raises(ValueError, match="pad must be a sample value"):
            RgbFormat(pad=pad)


# --- resize: nearest, bilinear, bilinear-antialias -------------------------------------------


def torch_resized(image: np.ndarray, size: tuple[int, int], resize: str) -> np.ndarray:
    """torch's float64 resize of a (3, H, W) uint8 image, unrounded: ``interpolate`` with
    mode="bilinear" (align_corners=False) and ``antialias`` as ``resize`` says. An image
    one pixel wide and more tall is resized transposed: torch 2.13's antialiased resize to
    such a size gives every row the first row's value (over all sizes up to 8 x 8, only
    then)."""
    torch = pytest.importorskip("torch")
    if size[1] == 1 and size[0] > 1:
        return torch_resized(image.transpose(0, 2, 1), size[::-1], resize).transpose(0, 2, 1)
    t = torch.from_numpy(image.astype(np.float64))[None]
    return torch.nn.functional.interpolate(t, size=size, mode="bilinear", align_corners=False,
                                           antialias=resize == "bilinear-antialias")[0].numpy()


@pytest.mark.parametrize("resize", ["bilinear", "bilinear-antialias"])
@pytest.mark.parametrize("fit", ["stretch", "letterbox", "crop"])
@pytest.mark.parametrize("size_in, size_out", [((120, 200), (48, 64)), ((64, 96), (100, 90)),
                                               ((1208, 1928), (224, 224)), ((6, 10), (4, 3)),
                                               ((2, 2), (5, 1))])
def test_each_resize_of_each_fit_against_torch(size_in, size_out, fit, resize):
    """A bilinear image is the frame converted at its own size, its box resized by torch's
    bilinear interpolate (antialiased or not) in float64, rounded to samples, placed in the
    image's box (the pad around a letterbox); float32 sums may round a value within 1e-3 of a
    half either way. Shrinking 1928 to 224 the antialiased filter sums 18 source pixels."""
    y, uv = frame(*size_in)
    full = nv12_to_rgb(y, uv, width=size_in[1], height=size_in[0])
    (h, w), pad = size_out, 9
    got = nv12_to_rgb(y, uv, width=w, height=h, fit=fit, pad=pad, resize=resize)
    (sy, sx, sh, sw), (oy, ox, oh, ow) = fit_boxes(size_in, size_out, fit)
    want = np.full((3, h, w), float(pad))
    want[:, oy:oy + oh, ox:ox + ow] = torch_resized(full[:, sy:sy + sh, sx:sx + sw], (oh, ow),
                                                    resize)
    assert_rounds_to(got, want, near=1e-3)
    plane = np.ascontiguousarray(full.transpose(1, 2, 0))  # the same samples from an RGB frame
    bgr = rgb_to_rgb(plane, width=w, height=h, color="bgr", fit=fit, pad=pad, resize=resize)
    np.testing.assert_array_equal(bgr, got[::-1])


def test_resizes_differ_where_they_should():
    """Growing, the antialiased filter is bilinear; shrinking by 4 it averages a wider window
    than bilinear's two pixels; nearest takes one pixel."""
    y, uv = frame(64, 64)
    images = {r: nv12_to_rgb(y, uv, width=16, height=16, resize=r)
              for r in ("nearest", "bilinear", "bilinear-antialias")}
    assert len({a.tobytes() for a in images.values()}) == 3
    grow = [nv12_to_rgb(y, uv, width=100, height=90, resize=r)
            for r in ("bilinear", "bilinear-antialias")]
    np.testing.assert_array_equal(*grow)
    # the antialiased image is smoother: a random frame's neighbours differ less
    rough = {r: np.abs(np.diff(a.astype(int), axis=2)).mean() for r, a in images.items()}
    assert rough["bilinear-antialias"] < 0.5 * rough["bilinear"] < rough["nearest"]


@pytest.mark.parametrize("resize", ["bilinear", "bilinear-antialias"])
def test_a_uniform_frame_stays_uniform(resize):
    """Weights sum to 1: white stays 255 (no wrap past it), black 0, grey its level."""
    for level, want in [(235, 255), (16, 0), (126, 128)]:
        y, uv = np.full((1208, 1928), level, np.uint8), np.full((604, 964, 2), 128, np.uint8)
        for fit in ("stretch", "crop"):
            got = nv12_to_rgb(y, uv, width=224, height=224, fit=fit, resize=resize)
            assert np.all(got == want), (level, fit, np.unique(got))


def test_a_float_image_of_each_resize_takes_the_rounded_samples():
    y, uv = frame(120, 160)
    fmt = RgbFormat("bgr", 1 / 255, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225), "crop",
                    resize="bilinear-antialias")
    out = np.zeros((1, 24, 24, 3), np.float32)
    RgbImage(out, "NHWC", fmt).push(y, uv)
    samples = nv12_to_rgb(y, uv, width=24, height=24, color="bgr", fit="crop",
                          resize="bilinear-antialias")
    np.testing.assert_array_equal(out[0].transpose(2, 0, 1), np.stack(
        [fmt.tables()[c][samples[c]] for c in range(3)]))


def test_bad_resizes_are_refused():
    y, uv = frame(8, 8)
    with pytest.raises(ValueError, match="resize must be one of 'nearest', 'bilinear', "
                                         "'bilinear-antialias', got 'bicubic'"):
        nv12_to_rgb(y, uv, width=4, height=4, resize="bicubic")
    for resize in (None, ["bilinear"]):
        with pytest.raises(ValueError, match="resize must be one of"):
            rgb_to_rgb(np.zeros((4, 4, 3), np.uint8), width=2, height=2, resize=resize)
    with pytest.raises(ValueError, match="resize must be one of"):
        RgbFormat(resize="area")


# --- RGB frames ------------------------------------------------------------------------------


@pytest.mark.parametrize("fit", ["stretch", "letterbox", "crop"])
def test_an_rgb_frame_gives_its_own_samples_as_torch_resizes(fit):
    rng = np.random.default_rng(4)
    plane = rng.integers(0, 256, (90, 160, 3), dtype=np.uint8)
    full = np.ascontiguousarray(plane.transpose(2, 0, 1))
    got = rgb_to_rgb(plane, width=48, height=48, fit=fit, pad=3)
    (sy, sx, sh, sw), (oy, ox, oh, ow) = fit_boxes((90, 160), (48, 48), fit)
    want = np.full((3, 48, 48), 3.0, np.float32)
    want[:, oy:oy + oh, ox:ox + ow] = torch_nearest(full[:, sy:sy + sh, sx:sx + sw], (oh, ow))
    np.testing.assert_array_equal(got, want)
    bgr = frame_to_rgb({"RGB": plane}, "RGB", width=48, height=48, color="bgr", fit=fit, pad=3)
    np.testing.assert_array_equal(bgr, got[::-1])


def test_frames_of_each_format_make_an_image_and_others_are_refused():
    y, uv = frame(40, 64)
    np.testing.assert_array_equal(frame_to_rgb({"Y": y, "UV": uv}, "NV12", width=16, height=8),
                                  nv12_to_rgb(y, uv, width=16, height=8))
    out = np.zeros((1, 8, 16, 3), np.uint8)
    plane = np.arange(40 * 64 * 3, dtype=np.int64).reshape(40, 64, 3).astype(np.uint8)
    RgbImage(out, "NHWC", RgbFormat()).push_planes({"RGB": plane}, "RGB")
    np.testing.assert_array_equal(out[0], rgb_to_rgb(plane, width=16, height=8).transpose(1, 2, 0))
    with pytest.raises(ValueError, match="made from NV12, RGB, GRAY frames, got YUYV"):
        frame_to_rgb({"Y": y}, "YUYV", width=16, height=8)
    for bad in [plane[..., :2], plane.astype(np.float32), plane[0], plane[:0]]:
        with pytest.raises(ShapeError, match="RGB plane"):
            rgb_to_rgb(bad, width=4, height=4)
    for bad in [plane, y.astype(np.float32), y[0], y[:0]]:
        with pytest.raises(ShapeError, match="GRAY plane"):
            gray_to_rgb(bad, width=4, height=4)


@pytest.mark.parametrize("resize", ["nearest", "bilinear", "bilinear-antialias"])
@pytest.mark.parametrize("fit", ["stretch", "letterbox", "crop"])
def test_a_gray_frame_gives_its_samples_in_every_channel(fit, resize):
    """A GRAY frame's image is its plane resized, in each of the three channels (OpenCV's
    COLOR_GRAY2RGB before the resize): against the same plane given as an RGB frame of three
    equal channels, and for nearest against torch."""
    rng = np.random.default_rng(6)
    gray = rng.integers(0, 256, (90, 160), dtype=np.uint8)
    kwargs = dict(width=48, height=40, fit=fit, pad=3, resize=resize,
                  crop_fraction=0.9 if fit == "crop" else 1.0)
    got = frame_to_rgb({"Y": gray}, "GRAY", color="bgr", **kwargs)
    assert np.array_equal(got[0], got[1]) and np.array_equal(got[1], got[2])
    np.testing.assert_array_equal(got, rgb_to_rgb(np.repeat(gray[:, :, None], 3, 2), **kwargs))
    if resize == "nearest":
        (sy, sx, sh, sw), (oy, ox, oh, ow) = fit_boxes((90, 160), (40, 48), fit,
                                                       kwargs["crop_fraction"])
        box = np.repeat(gray[None, sy:sy + sh, sx:sx + sw], 3, 0)
        np.testing.assert_array_equal(got[:, oy:oy + oh, ox:ox + ow],
                                      torch_nearest(box, (oh, ow)))
    out = np.zeros((1, 3, 40, 48), np.float32)
    fmt = RgbFormat(scale=1 / 255, mean=(0.5, 0.25, 0.0), fit=fit, pad=3, resize=resize,
                    crop_fraction=kwargs["crop_fraction"])
    RgbImage(out, "NCHW", fmt).push_planes({"Y": gray}, "GRAY")
    np.testing.assert_array_equal(out[0], np.stack([fmt.tables()[c][got[c]] for c in range(3)]))
