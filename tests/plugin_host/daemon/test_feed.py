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
        other = b.input(extra[0], extra[1], extra[2], "ANY")
        b.output(b.op("cast", other, name="g", dtype="float32"), "o", "ANY")
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
        "'w') (it feeds one float32 or uint8 (1, 12, h, w) two-frame YUV stack of a fixed size, "
        "or one colour image of image_inputs, and Embedding indices; dims 'h', 'w' are known "
        "only at run time: fix them when building, e.g. build --onnx ... --dim h=SIZE)")


def test_another_input_or_camera_format_is_refused_naming_it():
    with pytest.raises(PluginHostError, match=r"these inputs from a camera: speed float32\(1, "
                                               r"1\) \(it feeds"):
        ModelFeed(_graph((1, 12, 16, 32), "float32", ("speed", (1, 1), "float32")), {}, NV12)
    with pytest.raises(PluginHostError, match="needs an NV12 camera"):
        ModelFeed(_graph((1, 12, 16, 32)), {}, FrameLayout.create("RGB", 64, 32))


# --- fixed_inputs: values from the policy ----------------------------------------------------


def _fixed(value, line=7):
    import numpy as np

    from plugin_host.policy.model import FixedInput

    array = np.array(value)
    array = array.astype(np.int64) if array.dtype.kind == "i" else array
    return FixedInput(array, line)


def _feed(extra, fixed, index_inputs=None):
    return ModelFeed(_graph((1, 12, 16, 32), "float32", extra), index_inputs or {}, NV12,
                     fixed=fixed, source="/etc/ph/policy.toml")


def _refusal(extra, fixed, index_inputs=None) -> str:
    with pytest.raises(PluginHostError) as info:
        _feed(extra, fixed, index_inputs)
    return str(info.value)


def test_a_fixed_value_fills_its_input_by_broadcasting_and_is_written_at_prepare():
    import numpy as np

    feed = _feed(("traffic_convention", (1, 2), "float32"),
                 {"traffic_convention": _fixed([1.0, 0.0])})
    assert feed.image == "img" and feed.indices == ()
    assert feed.buffered == ("traffic_convention",)
    value = feed.values["traffic_convention"]
    assert value.dtype == np.float32 and value.tolist() == [[1.0, 0.0]]
    buffers = {"traffic_convention": np.full((1, 2), np.nan, np.float32)}
    feed.prepare(buffers)
    assert buffers["traffic_convention"].tolist() == [[1.0, 0.0]]
    one = _feed(("speed", (2, 3), "float16"), {"speed": _fixed(12.5)})
    assert one.values["speed"].dtype == np.float16 and (one.values["speed"] == 12.5).all()
    assert one.values["speed"].shape == (2, 3)
    ints = _feed(("count", (1, 2), "uint8"), {"count": _fixed(255)})
    assert ints.values["count"].tolist() == [[255, 255]]
    flags = _feed(("flag", (1,), "bool"), {"flag": _fixed([True])})
    assert flags.values["flag"].tolist() == [True]


def test_an_embedding_index_may_be_fixed_to_a_valid_row():
    feed = _feed(("desire", (1,), "int64"), {"desire": _fixed(3)}, {"desire": 8})
    assert feed.indices == () and feed.values["desire"].tolist() == [3]
    text = _refusal(("desire", (1,), "int64"), {"desire": _fixed(8)}, {"desire": 8})
    assert text == ("/etc/ph/policy.toml:7: fixed_inputs.desire holds 8, which is not an index "
                    "of an Embedding of 8 rows (0 to 7) (input 'desire' is int64(1,))")
    assert "holds -1" in _refusal(("desire", (1,), "int64"), {"desire": _fixed(-1)},
                                  {"desire": 8})


@pytest.mark.parametrize("extra, value, fragment", [
    (("speed", (1, 2), "float32"), [1.0, 2.0, 3.0],
     "has shape (3,), which does not fill (1, 2): give one value, or an array that broadcasts"),
    (("speed", (1, 2), "float32"), [[1.0], [2.0]], "has shape (2, 1), which does not fill"),
    (("speed", (1, 2), "float32"), True, "must be numbers, got booleans"),
    (("speed", (1, 2), "float32"), 1e39, "holds a value beyond float32's range"),
    (("speed", (1, 2), "float16"), 70000.0, "holds a value beyond float16's range"),
    (("count", (1,), "int32"), 1.0, "must be integers, got floats"),
    (("count", (1,), "int32"), False, "must be integers, got booleans"),
    (("count", (1,), "uint8"), 256, "holds 256, which is not a value of uint8 (0 to 255)"),
    (("count", (1,), "int8"), [-129], "holds -129, which is not a value of int8 (-128 to 127)"),
    (("flag", (1,), "bool"), 1, "must be true or false"),
    (("speed", (1, "n"), "float32"), 1.0,
     "cannot be fed: dims 'n' are known only at run time; fix them when building, e.g. build "
     "--onnx ... --dim n=SIZE"),
])
def test_a_value_that_does_not_fit_its_input_is_refused_naming_line_input_and_why(
        extra, value, fragment):
    text = _refusal(extra, {extra[0]: _fixed(value)})
    assert text.startswith(f"/etc/ph/policy.toml:7: fixed_inputs.{extra[0]} ") and fragment in text
    assert text.endswith(f"(input {extra[0]!r} is {extra[2]}{extra[1]})")


def test_a_value_for_no_input_or_for_the_state_is_refused():
    from plugin_host.builder import GraphBuilder

    text = _refusal(("speed", (1, 1), "float32"), {"sped": _fixed(1.0, line=0),
                                                     "speed": _fixed(1.0)})
    assert text == ("/etc/ph/policy.toml: fixed_inputs.sped is not an input of model 'm' (its "
                    "inputs: img, speed)")
    b = GraphBuilder("r")
    img = b.input("img", (1, 12, 16, 32), "float32", "NCHW")
    h = b.state("h", (1, 4), "float32", "NC")
    b.output(b.op("identity", img, name="i"), "y", "NCHW")
    b.output(b.op("identity", h, name="j"), "h_next", "NC", state_of="h")
    with pytest.raises(PluginHostError, match=r"policy.toml:7: fixed_inputs.h is the recurrent "
                                              r"state, which the executor carries"):
        ModelFeed(b.build(), {}, NV12, fixed={"h": _fixed(0.0)}, source="/etc/ph/policy.toml")


def test_an_input_left_without_a_value_names_fixed_inputs():
    text = _refusal(("speed", (1, 1), "float32"), {})
    assert "speed float32(1, 1)" in text
    assert text.endswith("any other input needs a value in the policy's fixed_inputs of this "
                         "[[artifact]])")


def test_a_second_image_input_is_refused_naming_camera_inputs():
    text = _refusal(("big_img", (1, 12, 16, 32), "uint8"), {})
    assert text.endswith("and Embedding indices; big_img would need a camera's frames too: name "
                         "the camera of every image input in the policy's camera_inputs of "
                         "this [[artifact]])")
    b = GraphBuilder("m")
    for name, shape in (("img", (1, 12, 16, 32)), ("big_img", (1, 12, 16, 32)),
                        ("speed", (1, 1))):
        b.output(b.op("identity", b.input(name, shape, "float32", "ANY"), name=f"i_{name}"),
                 f"o_{name}", "ANY")
    with pytest.raises(PluginHostError) as info:
        ModelFeed(b.build(), {}, NV12)
    assert str(info.value).endswith(
        "big_img would need a camera's frames too: name the camera of every image input in the "
        "policy's camera_inputs of this [[artifact]]; any other input needs a value in the "
        "policy's fixed_inputs of this [[artifact]])")


# --- image_inputs: colour images -------------------------------------------------------------


def _colour_graph():
    b = GraphBuilder("det")
    for name, shape, layout in [("rgb", (1, 3, 8, 16), "NCHW"), ("hwc", (1, 8, 16, 3), "NHWC"),
                                ("square", (1, 3, 8, 3), "NHWC")]:
        x = b.input(name, shape, "float32", layout)
        b.output(b.op("identity", x, name=f"{name}_i"), f"{name}_o", layout)
    desire = b.input("desire", (1, 1), "int64", "ANY")
    b.output(b.op("cast", desire, name="d", dtype="float32"), "d_o", "ANY")
    return b.build()


def _colour(name, fmt=None, line=9):
    from plugin_host.frames import RgbFormat
    from plugin_host.policy.model import ImageInput

    return {name: ImageInput(fmt or RgbFormat(), line)}


def test_a_colour_image_is_made_in_its_layout():
    g = _colour_graph()
    fixed = {"hwc": _fixed(0.0), "square": _fixed(0.0)}
    feed = ModelFeed(g, {"desire": 8}, NV12, fixed=fixed, colour=_colour("rgb"))
    assert feed.image == "rgb" and feed.indices == ("desire",)
    assert feed.formats == {"rgb": _colour("rgb")["rgb"].format}
    assert feed.layouts == {"rgb": "NCHW"}
    for name, layout in [("hwc", "NHWC"), ("square", "NHWC")]:  # the ABI's layout decides
        others = {n: _fixed(0.0) for n in ("rgb", "hwc", "square") if n != name}
        feed = ModelFeed(g, {"desire": 8}, NV12, fixed=others, colour=_colour(name))
        assert feed.image == name and feed.layouts == {name: layout}


def test_a_colour_image_the_model_cannot_take_is_refused_naming_the_line():
    g = _colour_graph()
    fixed = {"hwc": _fixed(0.0), "square": _fixed(0.0)}
    with pytest.raises(PluginHostError, match=r"^p.toml:9: image_inputs.desire: input "
                                              r"'desire' indexes an Embedding$"):
        ModelFeed(g, {"desire": 8}, NV12, fixed=fixed, source="p.toml",
                  colour=_colour("desire"))
    with pytest.raises(PluginHostError, match=r"these inputs from a camera: rgb float32\(1, 3, "
                                              r"8, 16\) .*rgb is a colour image: give its "
                                              r"colour order"):
        ModelFeed(g, {"desire": 8}, NV12, fixed=fixed)
    for format in ("RGB", "GRAY"):  # a colour image is made from RGB and GRAY frames too
        feed = ModelFeed(g, {"desire": 8}, FrameLayout.create(format, 64, 32), fixed=fixed,
                         colour=_colour("rgb"))
        assert feed.image == "rgb"
