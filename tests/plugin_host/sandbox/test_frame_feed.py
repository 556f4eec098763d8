"""A model input made from camera frames inside the worker: ``feed_frames`` + ``run(frame=)``.

The worker converts each NV12 frame from its read-only mapping of the pool into the two-frame
YUV stack (previous, current), so the frame's bytes never cross the channel. The graph here
echoes its image input (``identity``), so each test compares the stack the worker built with
the one the host-side reference conversion builds from the same planes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from plugin_host.artifacts import build_artifact, sign_artifact
from plugin_host.builder import GraphBuilder
from plugin_host.errors import (FrameError, FrameFormatError, FrameOverwrittenError,
                                SandboxError, WorkerDiedError)
from plugin_host.frames import (FrameLayout, FramePool, RgbFormat, nv12_to_rgb, nv12_to_yuv6,
                                rgb_to_rgb)
from plugin_host.sandbox import SandboxedExecutor, SandboxLimits
from plugin_host.sandbox.landlock import abi_version
from plugins.numpy_backend import NumpyBackend

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the worker drops from root to an unprivileged "
                                                 "uid and unshares its network: run as root"),
    pytest.mark.skipif(abi_version() < 6, reason="this kernel has no Landlock ABI 6"),
]

H, W = 8, 16  # the image input is (1, 12, H, W): a 2W x 2H model frame


@pytest.fixture(scope="module")
def echo_artifact(tmp_path_factory, sandbox_key):
    """img (1, 12, H, W) and gain (1,) -> echo = img, mean = mean(img) * gain; recurrent
    state h (1, 1) += mean, so a reset is visible too."""
    b = GraphBuilder("echo")
    img = b.input("img", (1, 12, H, W), "float32", "NCHW")
    gain = b.input("gain", (1,), "float32", "N")
    h = b.state("h", (1, 1), "float32", "NC")
    b.output(b.op("identity", img, name="echo"), "echo", "NCHW")
    m = b.op("mul", b.op("mean", img, name="avg", axes=[1, 2, 3]), gain,
             name="scaled")
    b.output(b.op("identity", m, name="mean_out"), "mean", "N")
    b.output(b.op("add", h, b.op("reshape", m, name="m2", shape=[1, 1]), name="acc"), "h_next",
             "NC", state_of="h")
    path = tmp_path_factory.mktemp("echo") / "echo.pha"
    build_artifact(b.build(), path, version="1.0.0", reference_backend=NumpyBackend(),
                   latency_ms=50.0)
    sign_artifact(path, sandbox_key)
    return path


@pytest.fixture
def sx(echo_artifact, sandbox_trust):
    with SandboxedExecutor(echo_artifact, trust=sandbox_trust,
                           limits=SandboxLimits(call_timeout=20)) as executor:
        yield executor


@pytest.fixture
def pool():
    p = FramePool(FrameLayout.create("NV12", 64, 40), 3, camera="road")
    yield p
    p.close()


def produce(pool: FramePool, seed: int, frame_id: int):
    rng = np.random.default_rng(seed)
    writer = pool.begin_frame()
    for plane in writer.planes.values():
        plane[...] = rng.integers(0, 256, plane.shape, dtype=np.uint8)
    return writer.commit(frame_id, time.monotonic_ns())


def yuv6(pool: FramePool, frame) -> np.ndarray:
    with pool.lease(frame) as lease:
        planes = lease.planes()
        return nv12_to_yuv6(planes["Y"], planes["UV"], width=2 * W, height=2 * H)


def stack(previous: np.ndarray, current: np.ndarray) -> np.ndarray:
    return np.concatenate([previous, current])[None]


GAIN = {"gain": np.array([2.0], np.float32)}


def test_the_worker_builds_the_two_frame_stack(sx, pool):
    sx.attach_pool(pool)
    sx.feed_frames("img")
    first = produce(pool, 1, 1)
    out = sx.run(GAIN, frame=first)
    one = yuv6(pool, first)
    np.testing.assert_array_equal(out["echo"], stack(one, one))  # no previous: itself twice
    np.testing.assert_allclose(out["mean"], [2 * one.mean()], rtol=1e-5)
    for i in range(2, 6):  # the steady state (binary messages) keeps stacking
        frame = produce(pool, i, i)
        out = sx.run(GAIN, frame=frame)
        now = yuv6(pool, frame)
        np.testing.assert_array_equal(out["echo"], stack(one, now))
        one = now
    assert sx.calls == 5 and sx.restarts == 0


def test_a_reset_forgets_the_previous_frame(sx, pool):
    sx.attach_pool(pool)
    sx.feed_frames("img")
    sx.run(GAIN, frame=produce(pool, 1, 1))
    sx.reset("frame gap")
    frame = produce(pool, 2, 2)
    out = sx.run(GAIN, frame=frame)
    now = yuv6(pool, frame)
    np.testing.assert_array_equal(out["echo"], stack(now, now))
    np.testing.assert_allclose(out["h_next"], [[2 * now.mean()]], rtol=1e-5)  # state reset too


def test_an_overwritten_frame_is_refused_and_the_stack_kept(sx, pool):
    sx.attach_pool(pool)
    sx.feed_frames("img")
    first = produce(pool, 1, 1)
    one = yuv6(pool, first)
    sx.run(GAIN, frame=first)
    stale = produce(pool, 2, 2)
    for i in range(3, 3 + pool.buffers):  # no lease held: the ring reuses stale's slot
        produce(pool, i, i)
    with pytest.raises(FrameOverwrittenError):
        sx.run(GAIN, frame=stale)
    frame = produce(pool, 9, 9)
    out = sx.run(GAIN, frame=frame)  # stacked on `first`: the refused frame left no trace
    np.testing.assert_array_equal(out["echo"], stack(one, yuv6(pool, frame)))
    assert sx.restarts == 0


def test_misuse_is_refused_on_the_host(sx, pool, tmp_path):
    frame = produce(pool, 1, 1)
    with pytest.raises(SandboxError, match="feed_frames first"):
        sx.run(GAIN, frame=frame)
    with pytest.raises(SandboxError, match="no input 'nope'"):
        sx.feed_frames("nope")
    with pytest.raises(SandboxError, match="float32"):
        sx.feed_frames("gain")
    sx.feed_frames("img")
    with pytest.raises(SandboxError, match="attach_pool first"):
        sx.run(GAIN, frame=frame)
    sx.attach_pool(pool)
    with pytest.raises(SandboxError, match="made from the frame"):
        sx.run({**GAIN, "img": np.zeros((1, 12, H, W), np.float32)}, frame=frame)
    other = FramePool(FrameLayout.create("NV12", 64, 40), 2, camera="road")
    try:
        with pytest.raises(FrameError, match="not to the attached pool"):
            sx.run(GAIN, frame=produce(other, 1, 1))
    finally:
        other.close()
    sx.feed_frames(None)  # back to plain inputs
    out = sx.run({**GAIN, "img": np.ones((1, 12, H, W), np.float32)})
    assert out["echo"].min() == 1.0


def test_a_restarted_worker_gets_the_pool_and_the_feed_again(sx, pool):
    sx.attach_pool(pool)
    sx.feed_frames("img")
    sx.run(GAIN, frame=produce(pool, 1, 1))
    os.kill(sx.pid, signal.SIGKILL)
    with pytest.raises(WorkerDiedError):
        sx.run(GAIN, frame=produce(pool, 2, 2))
    frame = produce(pool, 3, 3)
    out = sx.run(GAIN, frame=frame)  # re-attached, re-fed, no previous frame
    now = yuv6(pool, frame)
    np.testing.assert_array_equal(out["echo"], stack(now, now))
    assert sx.restarts == 1 and sx.resets_by_reason["worker restart"] == 1


@pytest.fixture(scope="module")
def bytes_artifact(tmp_path_factory, sandbox_key):
    """img uint8 (1, 12, H, W) -> echo = img, scaled = float32(img) / 255 (a model that takes
    the samples as bytes and converts inside, as openpilot's newer vision models do)."""
    b = GraphBuilder("bytes")
    img = b.input("img", (1, 12, H, W), "uint8", "NCHW")
    b.output(b.op("identity", img, name="echo"), "echo", "NCHW")
    scale = b.constant("scale", np.array([1 / 255], np.float32))
    b.output(b.op("mul", b.op("cast", img, name="f", dtype="float32"), scale, name="s"),
             "scaled", "NCHW")
    path = tmp_path_factory.mktemp("bytes") / "bytes.pha"
    build_artifact(b.build(), path, version="1.0.0", reference_backend=NumpyBackend(),
                   latency_ms=50.0)
    sign_artifact(path, sandbox_key)
    return path


def test_a_uint8_image_input_gets_the_samples_as_bytes(bytes_artifact, sandbox_trust, pool):
    with SandboxedExecutor(bytes_artifact, trust=sandbox_trust,
                           limits=SandboxLimits(call_timeout=20)) as sx:
        sx.attach_pool(pool)
        sx.feed_frames("img")
        first = produce(pool, 1, 1)
        one = yuv6(pool, first).astype(np.uint8)
        out = sx.run({}, frame=first)
        assert out["echo"].dtype == np.uint8
        np.testing.assert_array_equal(out["echo"], stack(one, one))
        frame = produce(pool, 2, 2)
        out = sx.run({}, frame=frame)
        now = yuv6(pool, frame)
        np.testing.assert_array_equal(out["echo"], stack(one, now.astype(np.uint8)))
        np.testing.assert_allclose(out["scaled"], stack(one, now) / np.float32(255), rtol=1e-6)


@pytest.fixture(scope="module")
def colour_artifact(tmp_path_factory, sandbox_key):
    """A detector's inputs: rgb float32 (1, 3, H, W) and bgr uint8 (1, H, W, 3), echoed; state
    h (1, 1) += mean(rgb), so a reset is visible."""
    b = GraphBuilder("colour")
    rgb = b.input("rgb", (1, 3, H, W), "float32", "NCHW")
    bgr = b.input("bgr", (1, H, W, 3), "uint8", "NHWC")
    h = b.state("h", (1, 1), "float32", "NC")
    b.output(b.op("identity", rgb, name="rgb_echo"), "rgb_echo", "NCHW")
    b.output(b.op("identity", bgr, name="bgr_echo"), "bgr_echo", "NHWC")
    m = b.op("reshape", b.op("mean", rgb, name="avg", axes=[1, 2, 3]), name="m2", shape=[1, 1])
    b.output(b.op("add", h, m, name="acc"), "h_next", "NC", state_of="h")
    path = tmp_path_factory.mktemp("colour") / "colour.pha"
    build_artifact(b.build(), path, version="1.0.0", reference_backend=NumpyBackend(),
                   latency_ms=50.0)
    sign_artifact(path, sandbox_key)
    return path


def colour(pool: FramePool, frame, color: str = "rgb", fit: str = "stretch",
           resize: str = "nearest", crop_fraction: float = 1.0) -> np.ndarray:
    """(3, H, W) samples of the frame, by the host-side conversion."""
    with pool.lease(frame) as lease:
        planes = lease.planes()
        return nv12_to_rgb(planes["Y"], planes["UV"], width=W, height=H, color=color, fit=fit,
                           resize=resize, crop_fraction=crop_fraction)


IMAGENET = RgbFormat("rgb", 1 / 255, (0.485, 0.456, 0.406), (0.229, 0.224, 0.229))


def normalized(samples: np.ndarray, fmt: RgbFormat) -> np.ndarray:
    f = np.float32
    return np.stack([(samples[c].astype(f) * f(fmt.scale) - f(fmt.mean[c])) / f(fmt.std[c])
                     for c in range(3)])


@pytest.fixture
def cx(colour_artifact, sandbox_trust):
    with SandboxedExecutor(colour_artifact, trust=sandbox_trust,
                           limits=SandboxLimits(call_timeout=20)) as executor:
        yield executor


def test_the_worker_makes_a_colour_image_of_each_frame(cx, pool):
    cx.attach_pool(pool)
    cx.feed_frames("rgb", IMAGENET)
    bgr_in = {"bgr": np.zeros((1, H, W, 3), np.uint8)}
    for i in range(1, 5):  # the first call and then the steady state (binary messages)
        frame = produce(pool, i, i)
        out = cx.run(bgr_in, frame=frame)
        np.testing.assert_array_equal(out["rgb_echo"][0], normalized(colour(pool, frame),
                                                                     IMAGENET))
    # another input, layout, type, fit, crop fraction and resize
    cx.feed_frames("bgr", RgbFormat("bgr", fit="crop", resize="bilinear-antialias",
                                    crop_fraction=0.875))
    frame = produce(pool, 7, 7)
    out = cx.run({"rgb": np.zeros((1, 3, H, W), np.float32)}, frame=frame)
    assert out["bgr_echo"].dtype == np.uint8
    want = colour(pool, frame, "bgr", "crop", "bilinear-antialias", 0.875)
    np.testing.assert_array_equal(out["bgr_echo"][0], want.transpose(1, 2, 0))
    for other in (colour(pool, frame, "bgr", "crop"),
                  colour(pool, frame, "bgr", "crop", "bilinear-antialias")):
        assert not np.array_equal(want, other)
    assert cx.restarts == 0


def test_a_colour_image_survives_an_overwritten_frame_and_a_restart(cx, pool):
    cx.attach_pool(pool)
    cx.feed_frames("rgb", RgbFormat())
    bgr_in = {"bgr": np.zeros((1, H, W, 3), np.uint8)}
    first = produce(pool, 1, 1)
    out = cx.run(bgr_in, frame=first)
    np.testing.assert_array_equal(out["rgb_echo"][0], colour(pool, first))
    stale = produce(pool, 2, 2)
    for i in range(3, 3 + pool.buffers):
        produce(pool, i, i)
    with pytest.raises(FrameOverwrittenError):
        cx.run(bgr_in, frame=stale)
    os.kill(cx.pid, signal.SIGKILL)
    with pytest.raises(WorkerDiedError):
        cx.run(bgr_in, frame=produce(pool, 8, 8))
    frame = produce(pool, 9, 9)
    out = cx.run(bgr_in, frame=frame)  # re-fed as a colour image, not a stack
    np.testing.assert_array_equal(out["rgb_echo"][0], colour(pool, frame))
    assert cx.restarts == 1


def test_colour_image_misuse_is_refused_on_the_host(cx, sx):
    with pytest.raises(SandboxError, match=r"'img' is float32\(1, 12, 8, 16\); a colour image"):
        sx.feed_frames("img", RgbFormat())
    with pytest.raises(SandboxError, match="two-frame YUV stack"):
        cx.feed_frames("rgb")  # no format: a stack, which (1, 3, H, W) is not
    with pytest.raises(SandboxError, match="'bgr' is uint8: it takes the samples as they are"):
        cx.feed_frames("bgr", IMAGENET)
    with pytest.raises(SandboxError, match="must be an RgbFormat"):
        cx.feed_frames("rgb", {"color": "rgb"})


def test_the_worker_refuses_a_malformed_image_format(cx):
    """A host that sends a bad format (not through feed_frames) gets a protocol error; the
    worker keeps serving."""
    worker = cx._live_worker()
    for bad in [{"color": "cmyk", "scale": 1.0, "mean": [0, 0, 0], "std": [1, 1, 1]},
                {"color": "rgb"}, [1, 2], {"color": "rgb", "scale": 1.0, "mean": [0, 0, 0],
                                           "std": [0, 1, 1]}]:
        with pytest.raises(SandboxError, match="'image'"):
            cx._request(worker, {"op": "feed", "input": "rgb", "image": bad}, "feed",
                        during="test")
    with pytest.raises(SandboxError, match="'bgr' is uint8: it takes the samples as they are"):
        cx._request(worker, {"op": "feed", "input": "bgr", "image": IMAGENET.to_wire()}, "feed",
                    during="test")
    out = cx.run({"rgb": np.ones((1, 3, H, W), np.float32),
                  "bgr": np.zeros((1, H, W, 3), np.uint8)})
    assert out["rgb_echo"].min() == 1.0


def test_a_colour_image_is_made_from_an_rgb_camera_and_a_stack_is_not(cx, sx):
    rgb_pool = FramePool(FrameLayout.create("RGB", 64, 40), 3, camera="road")
    try:
        cx.attach_pool(rgb_pool)
        cx.feed_frames("rgb", RgbFormat("bgr", fit="letterbox"))
        frame = produce(rgb_pool, 1, 1)
        out = cx.run({"bgr": np.zeros((1, H, W, 3), np.uint8)}, frame=frame)
        with rgb_pool.lease(frame) as lease:
            want = rgb_to_rgb(lease.planes()["RGB"], width=W, height=H, color="bgr",
                              fit="letterbox")
        np.testing.assert_array_equal(out["rgb_echo"][0], want)
        sx.attach_pool(rgb_pool)
        sx.feed_frames("img")
        with pytest.raises(FrameFormatError, match="a YUV stack is not made from RGB frames"):
            sx.run(GAIN, frame=produce(rgb_pool, 2, 2))
    finally:
        rgb_pool.close()


def test_a_colour_image_of_each_resize_imports_nothing_in_the_worker():
    """The confined worker cannot import what it has not imported before confinement (its
    uid cannot read a virtual environment under a 0700 folder, as a fresh checkout in a
    ``mktemp -d`` folder is): making a colour image of each resize, fit and frame format, in
    a process holding what the worker imports first, imports no module. (np.unique's first
    use imports numpy.ma: a fresh checkout's worker failed on it.)"""
    code = """if True:
        import json, sys
        import numpy as np
        from plugin_host.sandbox import worker  # what the worker imports before confining
        from plugin_host.sandbox.config import DEFAULT_PRELOAD
        for name in DEFAULT_PRELOAD:
            __import__(name)
        from plugin_host.frames import RgbFormat, RgbImage
        before = set(sys.modules)
        y, uv = np.zeros((48, 64), np.uint8), np.zeros((24, 32, 2), np.uint8)
        planes = {"NV12": {"Y": y, "UV": uv}, "RGB": {"RGB": np.zeros((48, 64, 3), np.uint8)},
                  "GRAY": {"Y": y}}
        for resize in ("nearest", "bilinear", "bilinear-antialias"):
            for fit in ("stretch", "letterbox", "crop"):
                for format, frame in planes.items():
                    out = np.zeros((1, 3, 20, 30), np.float32)
                    RgbImage(out, "NCHW", RgbFormat(scale=0.5, fit=fit, resize=resize)
                             ).push_planes(frame, format)
        print(json.dumps(sorted(set(sys.modules) - before)))
    """
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=str(Path(__file__).resolve().parents[3]))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
