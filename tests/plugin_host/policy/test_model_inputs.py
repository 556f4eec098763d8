"""``fixed_inputs``, ``camera_inputs`` and ``image_inputs`` of an ``[[artifact]]``: values for
model inputs no camera makes, the camera of each image input, and which images are colour
images. Here the form is checked (what fits the
model is the artifact's: ``tests/plugin_host/daemon/test_feed.py``, ``test_joint.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import PolicyError
from plugin_host.frames import RgbFormat
from plugin_host.policy import parse_policy

BASE = '''\
format = 1

[[trust.key]]
file = "keys/a.pub"
roles = ["artifact"]

[[artifact]]
name = "driving"
file = "driving.pha"
backend = "numpy"
'''


def _load(text: str):
    return parse_policy(text, path="/etc/ph/policy.toml", state_dir="/state")


def _refused(extra: str) -> tuple[int, str, str]:
    """(line, key, message) of the one problem of BASE + ``extra``."""
    with pytest.raises(PolicyError) as info:
        _load(BASE + extra)
    problems = info.value.problems
    assert len(problems) == 1, problems
    return problems[0].line, problems[0].key, problems[0].message


def test_values_load_as_read_only_arrays_with_their_lines():
    text = BASE + ('fixed_inputs = { traffic_convention = [1.0, 0.0], desire = 3, '
                   'flags = [[true, false]], mixed = [1, 2.5] }\n')
    fixed = _load(text).artifact("driving").fixed_inputs
    assert list(fixed) == ["traffic_convention", "desire", "flags", "mixed"]
    tc = fixed["traffic_convention"].value
    assert tc.dtype == np.float64 and tc.tolist() == [1.0, 0.0] and not tc.flags.writeable
    assert fixed["desire"].value.dtype == np.int64 and fixed["desire"].value.shape == ()
    assert fixed["flags"].value.dtype == np.bool_ and fixed["flags"].value.shape == (1, 2)
    assert fixed["mixed"].value.dtype == np.float64
    assert fixed["desire"].line == 11  # an inline table: the line of the key holding it


def test_a_sub_table_gives_each_value_its_own_line():
    text = BASE + "[artifact.fixed_inputs]\ntraffic_convention = [0.0, 1.0]\nspeed = 12.5\n"
    fixed = _load(text).artifact("driving").fixed_inputs
    assert fixed["traffic_convention"].line == 12 and fixed["speed"].line == 13
    assert _load(BASE).artifact("driving").fixed_inputs == {}


@pytest.mark.parametrize("value, fragment", [
    ("[]", "at least one value"),
    ("[[]]", "at least one value"),
    ("[[1.0], [2.0, 3.0]]", "rectangular"),
    ("[[1.0], 2.0]", "rectangular"),
    ("[1.0, [2.0]]", "rectangular"),
    ('"1.0"', "numbers or booleans, got a string"),
    ('[{ a = 1 }]', "numbers or booleans, got a table"),
    ("1979-05-27", "numbers or booleans, got date"),
    ("[true, 1]", "mixes booleans and numbers"),
    ("nan", "must be finite"),
    ("[1.0, -inf]", "must be finite"),
    ("99999999999999999999", "beyond the 64-bit range"),
    ("[" * 65 + "1" + "]" * 65, "deeper than the ABI's largest rank, 64"),
])
def test_values_that_are_no_array_are_refused_naming_the_line_and_key(value, fragment):
    line, key, message = _refused(f"fixed_inputs = {{ speed = {value} }}\n")
    assert (line, key) == (11, "artifact[0].fixed_inputs.speed") and fragment in message


def test_a_value_of_the_deepest_rank_loads():
    text = BASE + "fixed_inputs = { deep = " + "[" * 64 + "1" + "]" * 64 + " }\n"
    assert _load(text).artifact("driving").fixed_inputs["deep"].value.shape == (1,) * 64


def test_not_a_table_or_an_empty_name_is_refused():
    line, key, message = _refused("fixed_inputs = [1.0]\n")
    assert key == "artifact[0].fixed_inputs" and "must be a table of input name = value" in message
    line, key, message = _refused('fixed_inputs = { "" = 1.0 }\n')
    assert line == 11 and "must not be empty" in message


def test_a_typo_in_the_key_is_an_unknown_key():
    line, key, message = _refused("fixed_input = { speed = 1.0 }\n")
    assert key == "artifact[0].fixed_input" and "fixed_inputs" in message


# --- camera_inputs ---------------------------------------------------------------------------


def test_camera_inputs_load_in_order_with_their_line():
    rule = _load(BASE + 'camera_inputs = { input_imgs = "road", big_input_imgs = "wide" }\n'
                 ).artifact("driving")
    assert list(rule.camera_inputs.items()) == [("input_imgs", "road"),
                                                ("big_input_imgs", "wide")]
    assert rule.camera_inputs_line == 11
    assert _load(BASE).artifact("driving").camera_inputs == {}


@pytest.mark.parametrize("value, key, fragment", [
    ('["road"]', "artifact[0].camera_inputs", "must be a table of input name = camera name"),
    ("{ img = 1 }", "artifact[0].camera_inputs.img", "must be a string"),
    ('{ img = "no such/camera" }', "artifact[0].camera_inputs.img", "not a valid camera name"),
    ('{ img = "road", big = "road" }', "artifact[0].camera_inputs.big",
     "camera 'road' already makes input 'img': a camera's frames make one input"),
    ('{ "" = "road" }', "artifact[0].camera_inputs", "must not be empty"),
])
def test_camera_inputs_that_are_malformed_are_refused(value, key, fragment):
    line, got, message = _refused(f"camera_inputs = {value}\n")
    assert (line, got) == (11, key) and fragment in message


def test_an_input_in_both_tables_is_refused():
    line, key, message = _refused('camera_inputs = { img = "road" }\n'
                                  'fixed_inputs = { img = 0.0 }\n')
    assert key == "artifact[0].fixed_inputs.img" and "also in camera_inputs" in message


def test_cameras_use_must_list_the_cameras_of_camera_inputs():
    extra = 'camera_inputs = { img = "road", big = "wide" }\n'
    plugin = '[[plugin]]\nname = "synthetic"\nkind = "camera"\n'
    _load(BASE + extra + plugin + '[cameras]\nuse = ["wide", "road"]\n')  # any order
    _load(BASE + extra + plugin)  # or left out
    line, key, message = _refused(extra + plugin + '[cameras]\nuse = ["road"]\n')
    assert key == "cameras.use" and message == (
        "lists road, but artifact 'driving' runs on the frames of road, wide together (its "
        "camera_inputs): list the same cameras, or leave use out")


# --- image_inputs ----------------------------------------------------------------------------


def test_image_inputs_load_as_formats_with_their_lines():
    rule = _load(BASE + 'image_inputs = { images = "bgr" }\n').artifact("driving")
    assert rule.image_inputs["images"].format == RgbFormat("bgr")
    assert rule.image_inputs["images"].line == 11
    text = BASE + ("[artifact.image_inputs.images]\ncolor = \"rgb\"\nscale = 0.5\n"
                   "mean = [1, 2, 3.5]\nstd = [0.25, 0.5, 2]\nfit = \"letterbox\"\npad = 0\n"
                   "resize = \"bilinear-antialias\"\n")
    entry = _load(text).artifact("driving").image_inputs["images"]
    assert entry.format == RgbFormat("rgb", 0.5, (1.0, 2.0, 3.5), (0.25, 0.5, 2.0),
                                     "letterbox", 0, "bilinear-antialias")
    assert entry.line == 11
    assert _load(BASE).artifact("driving").image_inputs == {}
    text = BASE + 'image_inputs = { images = { fit = "crop", crop_fraction = 0.875 } }\n'
    assert _load(text).artifact("driving").image_inputs["images"].format.crop_fraction == 0.875
    two = _load(BASE + 'camera_inputs = { a = "road", b = "wide" }\n'
                       'image_inputs = { a = "rgb", b = { std = [2, 2, 2] } }\n')
    assert list(two.artifact("driving").image_inputs) == ["a", "b"]


@pytest.mark.parametrize("value, key, fragment", [
    ('"yuv"', "artifact[0].image_inputs.images.color",
     "color must be one of 'rgb', 'bgr', got 'yuv'"),
    ("3", "artifact[0].image_inputs.images",
     'must be "rgb", "bgr" or a table of color, scale, mean, std, fit, pad, resize, '
     'crop_fraction, got an integer'),
    ('{ scale = "1/255" }', "artifact[0].image_inputs.images.scale",
     "scale must be a finite number, got '1/255'"),
    ("{ scale = inf }", "artifact[0].image_inputs.images.scale", "must be a finite number"),
    ("{ mean = [0.5, 0.5] }", "artifact[0].image_inputs.images.mean",
     "mean must be three numbers"),
    ("{ mean = [0.5, true, 0.5] }", "artifact[0].image_inputs.images.mean",
     "mean must be finite numbers, got True"),
    ("{ std = [1, 0, 1] }", "artifact[0].image_inputs.images.std", "std must not be 0"),
    ("{ std = [1, nan, 1] }", "artifact[0].image_inputs.images.std", "finite numbers"),
    ('{ colour = "rgb" }', "artifact[0].image_inputs.images.colour",
     "unknown key 'colour' (allowed here: color, scale, mean, std, fit, pad, resize, "
     "crop_fraction)"),
    ('{ fit = "pad" }', "artifact[0].image_inputs.images.fit",
     "fit must be one of 'stretch', 'letterbox', 'crop', got 'pad'"),
    ("{ pad = 256 }", "artifact[0].image_inputs.images.pad",
     "pad must be a sample value, an integer of 0..255, got 256"),
    ("{ pad = 1.5 }", "artifact[0].image_inputs.images.pad", "an integer of 0..255, got 1.5"),
    ('{ resize = "bicubic" }', "artifact[0].image_inputs.images.resize",
     "resize must be one of 'nearest', 'bilinear', 'bilinear-antialias', got 'bicubic'"),
    ("{ resize = 1 }", "artifact[0].image_inputs.images.resize",
     "resize must be one of 'nearest', 'bilinear', 'bilinear-antialias', got 1"),
    ('{ fit = "crop", crop_fraction = 1.25 }', "artifact[0].image_inputs.images.crop_fraction",
     "crop_fraction must be a number in (0, 1], the share of the crop kept on each side, got "
     "1.25"),
    ("{ crop_fraction = 0.875 }", "artifact[0].image_inputs.images.crop_fraction",
     'crop_fraction is for fit = "crop", got fit \'stretch\''),
])
def test_image_inputs_that_are_malformed_are_refused(value, key, fragment):
    line, got, message = _refused(f"image_inputs = {{ images = {value} }}\n")
    assert (line, got) == (11, key) and fragment in message


@pytest.mark.parametrize("extra, key, fragment", [
    ("image_inputs = 1\n", "artifact[0].image_inputs", "must be a table of input name"),
    ('image_inputs = { "" = "rgb" }\n', "artifact[0].image_inputs", "must not be empty"),
    ('image_inputs = { a = "rgb", b = "rgb" }\n', "artifact[0].image_inputs",
     "names 2 inputs, but a model without camera_inputs takes one image"),
    ('camera_inputs = { a = "road" }\nimage_inputs = { b = "rgb" }\n',
     "artifact[0].image_inputs.b", "input 'b' is not in camera_inputs"),
    ('fixed_inputs = { a = 1 }\nimage_inputs = { a = "rgb" }\n', "artifact[0].image_inputs.a",
     "input 'a' is also in fixed_inputs: it has one source"),
])
def test_image_inputs_that_cannot_hold_are_refused(extra, key, fragment):
    _, got, message = _refused(extra)
    assert got == key and fragment in message
