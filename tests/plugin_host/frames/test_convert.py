"""NV12 -> the demo model's six-channel YUV420 planes, and the two-frame stack."""

from __future__ import annotations

import time

import numpy as np
import pytest

from plugin_host.errors import ShapeError
from plugin_host.frames import (FrameLayout, FramePool, FrameStacker, nearest_indices,
                                nv12_to_yuv6, stack_frames)


def small_frame():
    """8x4 NV12: Y = 10r + c; U = 100 + 10r + c, V = 200 + 10r + c on the 4x2 chroma grid."""
    r, c = np.mgrid[0:4, 0:8]
    y = (10 * r + c).astype(np.uint8)
    r2, c2 = np.mgrid[0:2, 0:4]
    uv = np.stack([100 + 10 * r2 + c2, 200 + 10 * r2 + c2], axis=-1).astype(np.uint8)
    return y, uv


def test_exact_output_on_a_small_frame():
    y, uv = small_frame()
    out = nv12_to_yuv6(y, uv, width=4, height=2)
    # luma rows sampled: floor((i + .5) * 4/2) = 1, 3; columns floor((j + .5) * 8/4) = 1,3,5,7
    # chroma rows: floor(.5 * 2/1) = 1; columns floor((j + .5) * 4/2) = 1, 3
    expected = np.array([[[11, 15]],    # Y even rows, even columns: Y[1, 1], Y[1, 5]
                         [[31, 35]],    # odd rows, even columns:     Y[3, 1], Y[3, 5]
                         [[13, 17]],    # even rows, odd columns:     Y[1, 3], Y[1, 7]
                         [[33, 37]],    # odd rows, odd columns:      Y[3, 3], Y[3, 7]
                         [[111, 113]],  # U[1, 1], U[1, 3]
                         [[211, 213]]], np.float32)  # V
    assert out.dtype == np.float32 and out.shape == (6, 1, 2)
    np.testing.assert_array_equal(out, expected)


def frames_to_tensor(i420: np.ndarray) -> np.ndarray:
    """openpilot's convention on a planar YUV420 buffer of shape (H * 3/2, W)."""
    h = i420.shape[0] * 2 // 3
    w = i420.shape[1]
    out = np.zeros((6, h // 2, w // 2), np.uint8)
    out[0] = i420[0:h:2, 0::2]
    out[1] = i420[1:h:2, 0::2]
    out[2] = i420[0:h:2, 1::2]
    out[3] = i420[1:h:2, 1::2]
    out[4] = i420[h:h + h // 4].reshape((h // 2, w // 2))
    out[5] = i420[h + h // 4:h + h // 2].reshape((h // 2, w // 2))
    return out


def test_at_the_model_size_it_is_openpilots_frames_to_tensor():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 256, (256, 512), dtype=np.uint8)
    uv = rng.integers(0, 256, (128, 256, 2), dtype=np.uint8)
    i420 = np.concatenate([y, uv[..., 0].reshape(-1, 512), uv[..., 1].reshape(-1, 512)])
    np.testing.assert_array_equal(nv12_to_yuv6(y, uv), frames_to_tensor(i420))


def test_nearest_indices_sample_pixel_centres():
    for n_in, n_out in [(1208, 256), (1928, 512), (604, 128), (964, 256), (7, 3), (3, 7)]:
        idx = nearest_indices(n_in, n_out)
        assert list(idx) == [int((i + 0.5) * n_in / n_out) for i in range(n_out)]
        assert idx.min() >= 0 and idx.max() < n_in and not idx.flags.writeable
    assert list(nearest_indices(5, 5)) == [0, 1, 2, 3, 4]


def test_a_full_camera_frame_from_the_pool_read_only_views():
    layout = FrameLayout.create("NV12", 1928, 1208)
    with FramePool(layout, 2, camera="road") as pool:
        rng = np.random.default_rng(2)
        w = pool.begin_frame()
        w.planes["Y"][...] = rng.integers(0, 256, (1208, 1928), dtype=np.uint8)
        w.planes["UV"][...] = rng.integers(0, 256, (604, 964, 2), dtype=np.uint8)
        frame = w.commit(0, 1, 2)
        with pool.lease(frame, "model") as lease:
            planes = lease.planes()
            start = time.perf_counter()
            out = nv12_to_yuv6(planes["Y"], planes["UV"])
            elapsed = time.perf_counter() - start
            assert out.shape == (6, 128, 256) and out.dtype == np.float32
            rows, cols = nearest_indices(1208, 256), nearest_indices(1928, 512)
            y, uv = planes["Y"], planes["UV"]
            for i, j in [(0, 0), (5, 17), (127, 255), (64, 100)]:
                assert out[0, i, j] == y[rows[2 * i], cols[2 * j]]
                assert out[1, i, j] == y[rows[2 * i + 1], cols[2 * j]]
                assert out[2, i, j] == y[rows[2 * i], cols[2 * j + 1]]
                assert out[3, i, j] == y[rows[2 * i + 1], cols[2 * j + 1]]
                ci, cj = nearest_indices(604, 128)[i], nearest_indices(964, 256)[j]
                assert (out[4, i, j], out[5, i, j]) == tuple(uv[ci, cj])
    assert elapsed < 0.05  # two gathers of 131k samples, no per-pixel Python


def test_the_stacker_puts_the_previous_frame_first():
    stacker = FrameStacker(width=4, height=2)
    y, uv = small_frame()
    a = nv12_to_yuv6(y, uv, width=4, height=2)
    img = stacker.push(y, uv)
    assert img.shape == (1, 12, 1, 2) and img.dtype == np.float32
    np.testing.assert_array_equal(img[0, :6], a)   # first frame: stacked with itself
    np.testing.assert_array_equal(img[0, 6:], a)
    y2, uv2 = y + 1, uv + 1
    img = stacker.push(y2, uv2)
    np.testing.assert_array_equal(img[0, :6], a)
    np.testing.assert_array_equal(img[0, 6:], a + 1)
    stacker.reset()
    img = stacker.push(y, uv)
    np.testing.assert_array_equal(img[0, :6], a)
    np.testing.assert_array_equal(img[0, 6:], a)
    both = stack_frames(a, a + 1)
    assert both.shape == (1, 12, 1, 2)
    np.testing.assert_array_equal(both[0, 6:], a + 1)


def test_the_stacker_keeps_its_stack_in_a_given_array():
    y, uv = small_frame()
    a = nv12_to_yuv6(y, uv, width=4, height=2, dtype=np.uint8)
    out = np.full((1, 12, 1, 2), 7, np.uint8)  # e.g. a model's input buffer
    stacker = FrameStacker(width=4, height=2, out=out)
    assert stacker.push(y, uv) is out
    np.testing.assert_array_equal(out[0, :6], a)
    stacker.push(y + 1, uv + 1)
    np.testing.assert_array_equal(out[0, :6], a)
    np.testing.assert_array_equal(out[0, 6:], a + 1)
    with pytest.raises(ShapeError, match=r"out must be float32 or uint8 \(1, 12, 1, 2\)"):
        FrameStacker(width=4, height=2, out=np.zeros((1, 12, 2, 2), np.uint8))


def test_the_demo_models_input_shape():
    rng = np.random.default_rng(3)
    y = rng.integers(0, 256, (1208, 1928), dtype=np.uint8)
    uv = rng.integers(0, 256, (604, 964, 2), dtype=np.uint8)
    img = FrameStacker().push(y, uv)
    assert img.shape == (1, 12, 128, 256) and img.dtype == np.float32
    assert 0 <= img.min() and img.max() <= 255


def test_bad_shapes_are_refused():
    y, uv = small_frame()
    with pytest.raises(ShapeError, match="UV"):
        nv12_to_yuv6(y, uv[:1])
    with pytest.raises(ShapeError, match="expected Y"):
        nv12_to_yuv6(y[..., None], uv)
    with pytest.raises(ShapeError, match="even"):
        nv12_to_yuv6(y, uv, width=3, height=2)
    with pytest.raises(ShapeError, match="out must be"):
        nv12_to_yuv6(y, uv, width=4, height=2, out=np.empty((6, 2, 2), np.float32))
    with pytest.raises(ShapeError):
        stack_frames(np.zeros((6, 1, 2)), np.zeros((6, 2, 2)))


def test_uint8_output_holds_the_same_samples_as_bytes():
    y, uv = small_frame()
    want = nv12_to_yuv6(y, uv, width=4, height=2)
    got = nv12_to_yuv6(y, uv, width=4, height=2, dtype=np.uint8)
    assert got.dtype == np.uint8 and got.shape == want.shape
    np.testing.assert_array_equal(got.astype(np.float32), want)
    out = np.empty((6, 1, 2), np.uint8)
    assert nv12_to_yuv6(y, uv, width=4, height=2, out=out) is out
    np.testing.assert_array_equal(out, got)
    stacker = FrameStacker(width=4, height=2, dtype=np.uint8)
    stacker.push(y, uv)
    img = stacker.push(y + 1, uv + 1)
    assert img.dtype == np.uint8
    np.testing.assert_array_equal(img[0, :6], got)
    np.testing.assert_array_equal(img[0, 6:], got + 1)
    both = stack_frames(got, got + 1)
    assert both.dtype == np.uint8 and both.shape == (1, 12, 1, 2)
    assert stack_frames(got.astype(np.float64), got.astype(np.float64)).dtype == np.float32


@pytest.mark.parametrize("dtype", [np.float64, np.int16, np.int8, np.float16])
def test_other_output_dtypes_are_refused(dtype):
    y, uv = small_frame()
    with pytest.raises(ShapeError, match="out must be float32 or uint8"):
        nv12_to_yuv6(y, uv, width=4, height=2, out=np.empty((6, 1, 2), dtype))
    with pytest.raises(ShapeError, match="out must be float32 or uint8"):
        nv12_to_yuv6(y, uv, width=4, height=2, dtype=dtype)
    with pytest.raises(ShapeError, match="out must be float32 or uint8"):
        stack_frames(np.zeros((6, 1, 2)), np.zeros((6, 1, 2)), out=np.empty((1, 12, 1, 2), dtype))
    with pytest.raises(ShapeError, match="out must be float32 or uint8"):
        FrameStacker(width=4, height=2, dtype=dtype)


def test_a_stack_is_made_of_nv12_frames_only():
    y, uv = small_frame()
    stacker = FrameStacker(width=4, height=2)
    np.testing.assert_array_equal(stacker.push_planes({"Y": y, "UV": uv}, "NV12")[0, 6:],
                                  nv12_to_yuv6(y, uv, width=4, height=2))
    with pytest.raises(ShapeError, match="a YUV stack is made from NV12 frames, got RGB"):
        stacker.push_planes({"RGB": np.zeros((4, 8, 3), np.uint8)}, "RGB")
