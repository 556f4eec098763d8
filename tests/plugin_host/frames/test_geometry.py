"""Where a colour image's pixels lie in its frame (frames/geometry.py): image coordinates mapped
to the frame land where the image's own samples were taken (a frame whose samples are their
coordinates, made into images by each fit and resize), the inverse, the box kinds, clipping,
and refusals."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import ShapeError
from plugin_host.frames.geometry import KINDS, ImageGeometry
from plugin_host.frames.rgb import fit_boxes, rgb_to_rgb

# (frame (width, height), image (width, height), fit, crop fraction): shrinking, growing,
# odd sizes, every fit, a crop of a share
CASES = [((240, 150), (64, 64), "letterbox", 1.0), ((240, 150), (64, 64), "crop", 1.0),
         ((240, 150), (64, 48), "stretch", 1.0), ((97, 211), (45, 30), "letterbox", 1.0),
         ((97, 211), (45, 30), "crop", 0.875), ((31, 17), (200, 120), "stretch", 1.0),
         ((31, 17), (90, 90), "letterbox", 1.0), ((255, 255), (224, 224), "crop", 0.6),
         # centres landing exactly on a frame pixel's edge, where sw / ow rounded first would
         # put them a pixel short
         ((6, 4), (47, 49), "stretch", 1.0)]


def coordinate_frame(width: int, height: int) -> np.ndarray:
    """An RGB frame whose R sample is its column and G its row (sizes up to 256)."""
    frame = np.zeros((height, width, 3), np.uint8)
    frame[..., 0] = np.arange(width)[None, :]
    frame[..., 1] = np.arange(height)[:, None]
    return frame


def centres(geometry: ImageGeometry) -> tuple[np.ndarray, np.ndarray]:
    """The image box's pixels ``(rows, columns)`` and their centres ``(..., 2)`` as x, y."""
    x, y, w, h = geometry.image_box
    rows, cols = np.meshgrid(np.arange(y, y + h), np.arange(x, x + w), indexing="ij")
    return (rows, cols), np.stack([cols + 0.5, rows + 0.5], -1)


@pytest.mark.parametrize("frame_size, image_size, fit, fraction", CASES)
def test_an_image_pixels_centre_maps_to_the_frame_pixel_nearest_sampling_read(
        frame_size, image_size, fit, fraction):
    geometry = ImageGeometry.of(frame_size, image_size, fit, fraction)
    image = rgb_to_rgb(coordinate_frame(*frame_size), width=image_size[0],
                       height=image_size[1], fit=fit, crop_fraction=fraction)
    (rows, cols), points = centres(geometry)
    at = np.floor(geometry.to_frame(points, "xy")).astype(np.int64)
    np.testing.assert_array_equal(at[..., 0], image[0][rows, cols])
    np.testing.assert_array_equal(at[..., 1], image[1][rows, cols])


@pytest.mark.parametrize("resize", ["bilinear", "bilinear-antialias"])
@pytest.mark.parametrize("frame_size, image_size, fit, fraction", CASES)
def test_an_image_pixels_centre_maps_to_the_centre_its_resample_weighed(
        frame_size, image_size, fit, fraction, resize):
    """Over a frame whose samples are their coordinates (a ramp), a bilinear sample is the
    ramp at the position it was taken (held to the box's samples), rounded; an antialiased one
    too wherever its triangle lies wholly inside the box (a symmetric window over a ramp)."""
    geometry = ImageGeometry.of(frame_size, image_size, fit, fraction)
    image = rgb_to_rgb(coordinate_frame(*frame_size), width=image_size[0],
                       height=image_size[1], fit=fit, crop_fraction=fraction, resize=resize)
    (rows, cols), points = centres(geometry)
    at = geometry.to_frame(points, "xy") - 0.5  # in sample indices
    box_x, box_y, box_w, box_h = geometry.frame_box
    for axis, (start, size, plane) in enumerate([(box_x, box_w, 0), (box_y, box_h, 1)]):
        want = np.clip(at[..., axis], start, start + size - 1)
        got = image[plane][rows, cols].astype(np.float64)
        inside = np.ones(want.shape, bool)
        if resize == "bilinear-antialias":
            reach = max(geometry.scale[axis], 1.0)
            inside = (at[..., axis] - reach >= start - 0.5) \
                & (at[..., axis] + reach <= start + size - 0.5)
        assert np.all(np.abs(got - want)[inside] <= 0.5 + 1e-3)
        assert inside.any() or min(image_size) < 4


@pytest.mark.parametrize("frame_size, image_size, fit, fraction", CASES)
def test_the_boxes_are_fit_boxes(frame_size, image_size, fit, fraction):
    geometry = ImageGeometry.of(frame_size, image_size, fit, fraction)
    (sy, sx, sh, sw), (oy, ox, oh, ow) = fit_boxes(frame_size[::-1], image_size[::-1], fit,
                                                   fraction)
    assert geometry.frame_box == (sx, sy, sw, sh) and geometry.image_box == (ox, oy, ow, oh)
    assert geometry.frame_size == frame_size and geometry.image_size == image_size
    assert geometry.scale == (sw / ow, sh / oh)


def boxes(n: int = 50, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    corner = rng.uniform(-20, 300, (n, 2))
    return np.concatenate([corner, corner + rng.uniform(0, 120, (n, 2))], 1)


def as_kind(xyxy: np.ndarray, kind: str) -> np.ndarray:
    first, second = xyxy[..., :2], xyxy[..., 2:]
    return {"xy": first, "xyxy": xyxy,
            "xywh": np.concatenate([first, second - first], -1),
            "cxcywh": np.concatenate([(first + second) / 2, second - first], -1)}[kind]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("frame_size, image_size, fit, fraction", CASES)
def test_each_kind_maps_as_its_corners_do_and_back(frame_size, image_size, fit, fraction,
                                                   kind):
    geometry = ImageGeometry.of(frame_size, image_size, fit, fraction)
    given = as_kind(boxes(), kind)
    mapped = geometry.to_frame(given, kind)
    np.testing.assert_allclose(mapped, as_kind(geometry.to_frame(boxes()), kind), atol=1e-9)
    np.testing.assert_allclose(geometry.to_image(mapped, kind), given, atol=1e-9)
    # corners: each by its own axis's map
    fx, fy, fw, fh = geometry.frame_box
    ix, iy, iw, ih = geometry.image_box
    xyxy = geometry.to_frame(boxes())
    np.testing.assert_allclose(xyxy[:, 0::2], fx + (boxes()[:, 0::2] - ix) * fw / iw)
    np.testing.assert_allclose(xyxy[:, 1::2], fy + (boxes()[:, 1::2] - iy) * fh / ih)


@pytest.mark.parametrize("kind", KINDS)
def test_clip_holds_boxes_to_the_frame_as_their_corners(kind):
    geometry = ImageGeometry.of((1928, 1208), (640, 640), "letterbox")
    xyxy = np.array([[0.0, 0.0, 640.0, 640.0],     # the whole image: pad above and below
                     [-50.0, 100.0, 100.0, 700.0],  # past the image too
                     [10.0, 0.0, 20.0, 100.0],      # wholly in the pad above
                     [100.0, 200.0, 300.0, 400.0]])  # inside
    clipped = geometry.to_frame(as_kind(xyxy, kind), kind, clip=True)
    corners = np.clip(geometry.to_frame(xyxy), 0, [1928, 1208, 1928, 1208])
    np.testing.assert_allclose(clipped, as_kind(corners, kind), atol=1e-9)
    assert clipped[0].tolist() == as_kind(np.array([0.0, 0, 1928, 1208]), kind).tolist()
    unclipped = geometry.to_frame(as_kind(xyxy, kind), kind)
    np.testing.assert_allclose(unclipped[3], clipped[3])  # inside: unchanged
    assert not np.allclose(unclipped[0], clipped[0])  # the pad maps outside the frame


def test_clip_to_the_image_and_shapes_kept():
    geometry = ImageGeometry.of((100, 50), (64, 64), "letterbox")
    got = geometry.to_image(np.array([[[-100.0, -100.0], [200.0, 200.0]]]), "xy", clip=True)
    assert got.shape == (1, 2, 2)
    assert got[0, 0].tolist() == [0.0, 0.0] and got[0, 1].tolist() == [64.0, 64.0]
    assert geometry.to_frame([32, 32], "xy").shape == (2,)


@pytest.mark.parametrize("kind", KINDS)
def test_no_boxes_map_to_no_boxes(kind):
    """A detector that found nothing: an empty array of the kind's width, clipped or not."""
    geometry = ImageGeometry.of((1928, 1208), (320, 320), "letterbox")
    width = 2 if kind == "xy" else 4
    for shape in [(0, width), (3, 0, width)]:
        for clip in (False, True):
            assert geometry.to_frame(np.zeros(shape), kind, clip=clip).shape == shape
            assert geometry.to_image(np.zeros(shape), kind, clip=clip).shape == shape


def test_the_callers_array_is_not_written_and_ints_are_taken():
    geometry = ImageGeometry.of((1928, 1208), (320, 320), "letterbox")
    for dtype in (np.int64, np.float64, np.float32):
        for kind in ("xyxy", "cxcywh"):
            given = np.array([[-5, 0, 400, 320]], dtype)
            kept = given.copy()
            got = geometry.to_frame(given, kind, clip=True)
            np.testing.assert_array_equal(given, kept)
            assert got.dtype == np.float64 and got.min() >= 0.0


def test_refusals_name_what_is_wrong():
    geometry = ImageGeometry.of((1928, 1208), (320, 320), "letterbox")
    for frame_size in [(0, 10), (10,), "1928x1208", (10.0, 10), (True, 10), None]:
        with pytest.raises(ShapeError, match="frame_size must be"):
            ImageGeometry.of(frame_size, (32, 32))
    with pytest.raises(ShapeError, match="image_size must be"):
        ImageGeometry.of((32, 32), (32, -1))
    with pytest.raises(ValueError, match="fit must be one of"):
        ImageGeometry.of((32, 32), (32, 32), "fill")
    with pytest.raises(ValueError, match="fit must be one of"):
        ImageGeometry.of((32, 32), (32, 32), ["crop"])
    for fraction in [0, 1.5, float("nan"), "0.5", [0.5]]:
        with pytest.raises(ValueError, match="crop_fraction must be a number"):
            ImageGeometry.of((32, 32), (32, 32), "crop", fraction)
    with pytest.raises(ValueError, match="crop_fraction is for fit"):
        ImageGeometry.of((32, 32), (32, 32), "letterbox", 0.5)
    with pytest.raises(ValueError, match="kind must be one of"):
        geometry.to_frame([1, 2, 3, 4], "xyxy2")
    with pytest.raises(ShapeError, match="xyxy coordinates need a last axis of 4"):
        geometry.to_frame([[1, 2]])
    with pytest.raises(ShapeError, match="xy coordinates need a last axis of 2"):
        geometry.to_frame(3.0, "xy")
    for bad in [["a", "b"], [True, False], [1 + 2j, 3]]:
        with pytest.raises(ValueError, match="coordinates must be numbers"):
            geometry.to_frame(bad, "xy")
