"""A model that takes a colour image (a detector's or classifier's ``(1, 3, H, W)`` or
``(1, H, W, 3)``) named in the policy's ``image_inputs``: made from each camera frame in its
colour order, fit, scale, mean and std, alone or beside a two-frame YUV stack of another
camera; refused at load, naming the input and the policy line, where it cannot be made."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from plugin_host.errors import PluginHostError, PolicyError
from plugin_host.frames import FrameLayout, RgbFormat, frame_to_rgb
from plugin_host.frames.convert import nv12_to_yuv6
from plugin_host.frames.geometry import ImageGeometry
from plugins.cameras.synthetic import synthetic_pattern

from .conftest import (events, multi_camera_policy, own_artifact, point_at, quiet_daemon,
                       run_collecting)

H, W = 24, 40
IMAGENET = ('{ color = "rgb", scale = 0.00392156862745098, mean = [0.485, 0.456, 0.406], '
            'std = [0.229, 0.224, 0.225] }')
IMAGENET_FORMAT = RgbFormat("rgb", 1 / 255, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225))


def _graph():
    """images float32 (1, 3, H, W), echoed; crop uint8 (1, H, W, 3), echoed; img uint8
    (1, 12, 16, 32), echoed (for a second camera's stack)."""
    from plugin_host.builder import GraphBuilder

    b = GraphBuilder("detector")
    images = b.input("images", (1, 3, H, W), "float32", "NCHW")
    crop = b.input("crop", (1, H, W, 3), "uint8", "NHWC")
    img = b.input("img", (1, 12, 16, 32), "uint8", "NCHW")
    b.output(b.op("identity", images, name="images_id"), "images_out", "NCHW")
    b.output(b.op("identity", crop, name="crop_id"), "crop_out", "NHWC")
    b.output(b.op("identity", img, name="img_id"), "img_out", "NCHW")
    return b.build()


@pytest.fixture(scope="module")
def detector(demo_state, tmp_path_factory) -> tuple[Path, Path, Path]:
    """(demo policy copy, state with the demo key, the signed 'detector' artifact)."""
    return own_artifact(demo_state, tmp_path_factory, _graph(), "detector")


def _one_camera(detector, extra: str, name: str, format: str = "NV12") -> Path:
    """The demo policy pointed at the detector, a 128 x 64 camera of ``format``, ``extra`` in
    its [[artifact]]."""
    policy, _, artifact = detector
    text = point_at(policy.read_text(), "detector", artifact, extra)
    text = text.replace("width = 1928", "width = 128").replace("height = 1208", "height = 64")
    text = text.replace('format = "NV12"', f'format = "{format}"')
    out = artifact.parent / name
    out.write_text(text)
    return out


def _run(policy: Path, state: Path, frames: int = 4):
    daemon, lines = quiet_daemon(policy, state, frames=frames)
    summary, seen, layouts = run_collecting(daemon)
    return summary, seen, layouts, events(lines, "loaded")[0]


def _colour(layout: FrameLayout, frame_id: int, color: str = "rgb", fit: str = "stretch",
            resize: str = "nearest") -> np.ndarray:
    return frame_to_rgb(synthetic_pattern(layout, frame_id), layout.format, width=W, height=H,
                        color=color, fit=fit, resize=resize)


def _normalized(samples: np.ndarray, fmt: RgbFormat) -> np.ndarray:
    f = np.float32
    return np.stack([(samples[c].astype(f) * f(fmt.scale) - f(fmt.mean[c])) / f(fmt.std[c])
                     for c in range(3)])


def test_a_colour_image_of_each_frame_reaches_the_model(detector):
    policy = _one_camera(detector, f"image_inputs = {{ images = {IMAGENET} }}\n"
                                   "fixed_inputs = { crop = 0, img = 0 }", "one.toml")
    summary, seen, layouts, loaded = _run(policy, detector[1])
    assert loaded["image_inputs"] == {"images": "rgb"}
    assert summary["frames_run"] >= 4 and len(seen) == summary["frames_run"]
    layout = next(iter(layouts.values()))
    for message in seen:
        want = _normalized(_colour(layout, message["frame_id"]), IMAGENET_FORMAT)
        np.testing.assert_array_equal(message["outputs"]["images_out"][0], want)
        # where the image lies in the frame: the whole 128 x 64 frame onto the 40 x 24 image
        assert message["image_geometry"] == {"images": ImageGeometry.of((128, 64), (W, H))}
    assert len({m["outputs"]["images_out"].tobytes() for m in seen}) > 1  # frames differ


@pytest.mark.parametrize("format, extra", [
    ("RGB", 'color = "bgr", fit = "crop", resize = "bilinear"'),
    ("GRAY", 'fit = "crop", crop_fraction = 0.875, resize = "bilinear-antialias"'),
])
def test_rgb_and_gray_cameras_make_a_colour_image(detector, format, extra):
    policy = _one_camera(detector, f"image_inputs = {{ crop = {{ {extra} }} }}\n"
                                   "fixed_inputs = { images = 0.0, img = 0 }",
                         f"{format.lower()}.toml", format)
    summary, seen, layouts, _ = _run(policy, detector[1])
    layout = next(iter(layouts.values()))
    assert layout.format == format and summary["frames_run"] >= 4
    fmt = _policy_format(extra)
    for message in seen:
        want = frame_to_rgb(synthetic_pattern(layout, message["frame_id"]), layout.format,
                            width=W, height=H, color=fmt.color, fit=fmt.fit, resize=fmt.resize,
                            crop_fraction=fmt.crop_fraction)
        np.testing.assert_array_equal(message["outputs"]["crop_out"][0], want.transpose(1, 2, 0))
        # the NHWC input's (width, height), the crop's box
        assert message["image_geometry"] == {"crop": ImageGeometry.of(
            (128, 64), (W, H), fmt.fit, fmt.crop_fraction)}


def _policy_format(fields: str) -> RgbFormat:
    """The format a policy's inline table of ``fields`` describes."""
    import tomllib

    return RgbFormat(**tomllib.loads(f"t = {{ {fields} }}")["t"])


def test_a_colour_image_and_a_yuv_stack_of_two_cameras_in_one_run(detector):
    policy, _, artifact = detector
    path = multi_camera_policy(policy, [{"name": "road"}, {"name": "wide", "width": 256,
                                                           "height": 128}],
                               width=128, height=64, name="two.toml")
    path.write_text(point_at(path.read_text(), "detector", artifact,
                             'camera_inputs = { img = "road", crop = "wide" }\n'
                             'image_inputs = { crop = { color = "bgr", fit = "letterbox", '
                             'resize = "bilinear-antialias" } }\n'
                             "fixed_inputs = { images = 0.0 }"))
    summary, seen, layouts, loaded = _run(path, detector[1])
    assert loaded["image_inputs"] == {"crop": "bgr"}
    assert summary["matched_sets"] >= 4 and summary["worker_restarts"] == 0
    for message in seen:
        frames, outputs = message["frames"], message["outputs"]
        crop = _colour(layouts["wide"], frames["wide"], "bgr", "letterbox",
                       "bilinear-antialias").transpose(1, 2, 0)
        np.testing.assert_array_equal(outputs["crop_out"][0], crop)
        # the colour image's geometry, in its own camera's frame; none for the YUV stack
        assert message["image_geometry"] == {"crop": ImageGeometry.of((256, 128), (W, H),
                                                                      "letterbox")}
        road = synthetic_pattern(layouts["road"], frames["road"])
        current = nv12_to_yuv6(road["Y"], road["UV"], width=64, height=32, dtype=np.uint8)
        np.testing.assert_array_equal(outputs["img_out"][0, 6:], current)


@pytest.mark.parametrize("extra, words", [
    # a colour image the policy does not describe: the way to describe it
    ("fixed_inputs = { crop = 0, img = 0 }",
     r"images float32\(1, 3, 24, 40\) \(it feeds .*; images is a colour image: give its "
     r"colour order \(and scale, mean, std\) in the policy's image_inputs of this "
     r"\[\[artifact\]\]\)"),
    # a uint8 image given a scale: refused, naming the policy line
    (f"image_inputs = {{ crop = {IMAGENET} }}\nfixed_inputs = {{ images = 0.0, img = 0 }}",
     r"one.toml:\d+: image_inputs.crop: input 'crop' is uint8: it takes the samples as they "
     r"are"),
    # the YUV stack is no colour image
    ('image_inputs = { img = "rgb" }\nfixed_inputs = { images = 0.0, crop = 0 }',
     r"image_inputs.img: input 'img' is uint8\(1, 12, 16, 32\); a colour image is a float32 "
     r"or uint8 \(1, 3, h, w\) or \(1, h, w, 3\)"),
    ('image_inputs = { nope = "rgb" }', r"image_inputs.nope: is not an input of model "
                                        r"'detector' \(its inputs: images, crop, img\)"),
])
def test_a_colour_image_that_cannot_be_made_is_refused_at_load(detector, extra, words):
    policy = _one_camera(detector, extra, "one.toml")
    daemon, _ = quiet_daemon(policy, detector[1], frames=1)
    try:
        with pytest.raises(PluginHostError, match=words):
            daemon.load()
    finally:
        daemon.close()


def test_the_policy_refuses_a_malformed_format_naming_the_line(detector):
    policy = _one_camera(detector, 'image_inputs = { images = { color = "rgb", std = [1, 0, '
                                   '1] } }', "bad.toml")
    line = next(i for i, text in enumerate(policy.read_text().splitlines(), 1)
                if text.startswith("image_inputs"))
    with pytest.raises(PolicyError, match=rf"bad.toml:{line}: artifact\[0\].image_inputs."
                                          rf"images.std: std must not be 0"):
        quiet_daemon(policy, detector[1])
