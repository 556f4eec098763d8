"""Which inputs the daemon makes from a camera, decided at load: one float32 or uint8 image
stack, Embedding indices, the recurrent state; anything else refused naming it."""

from __future__ import annotations

import pytest

from plugin_host.builder import GraphBuilder
from plugin_host.daemon.feed import ModelFeed
from plugin_host.errors import PluginHostError
from plugin_host.frames import FrameLayout

NV12 = FrameLayout.create("NV12", 64, 32)


def _graph(img_shape, img_dtype="float32", extra=None):
    b = GraphBuilder("m")
    img = b.input("img", img_shape, img_dtype, "NCHW")
    y = b.op("cast", img, name="f", dtype="float32")
    if extra is not None:
        other = b.input(extra[0], extra[1], extra[2], "NC")
        b.output(b.op("cast", other, name="g", dtype="float32"), "o", "NC")
    b.output(b.op("identity", y, name="i"), "y", "NCHW")
    return b.build()


@pytest.mark.parametrize("dtype", ["float32", "uint8"])
def test_a_float32_or_uint8_image_stack_is_made(dtype):
    feed = ModelFeed(_graph((1, 12, 16, 32), dtype), {}, NV12)
    assert feed.image == "img" and feed.indices == ()


def test_an_index_input_is_fed_and_never_taken_for_the_image():
    feed = ModelFeed(_graph((1, 12, 16, 32), "float32", ("desire", (1, 1), "int64")),
                     {"desire": 8}, NV12)
    assert feed.image == "img" and feed.indices == ("desire",)
    with pytest.raises(PluginHostError, match="no float32 or uint8 .1, 12, h, w. image input"):
        ModelFeed(_graph((1, 12, 16, 32), "uint8"), {"img": 256}, NV12)


def test_an_image_of_run_time_size_is_refused_with_the_way_to_fix_it():
    with pytest.raises(PluginHostError) as info:
        ModelFeed(_graph((1, 12, "h", "w"), "uint8"), {}, NV12)
    assert str(info.value) == (
        "model 'm': the daemon cannot make these inputs from a camera: img uint8(1, 12, 'h', "
        "'w') (it feeds one float32 or uint8 (1, 12, h, w) two-frame YUV stack of a fixed size "
        "and Embedding indices; dims 'h', 'w' are known only at run time: fix them when "
        "building, e.g. build --onnx ... --dim h=SIZE)")


def test_another_input_or_camera_format_is_refused_naming_it():
    with pytest.raises(PluginHostError, match=r"these inputs from a camera: speed float32\(1, "
                                               r"1\) \(it feeds"):
        ModelFeed(_graph((1, 12, 16, 32), "float32", ("speed", (1, 1), "float32")), {}, NV12)
    with pytest.raises(PluginHostError, match="needs an NV12 camera"):
        ModelFeed(_graph((1, 12, 16, 32)), {}, FrameLayout.create("RGB", 64, 32))
