"""CenterCropPad (opset 18, as image preprocessing graphs write a center crop): a ``slice`` where
the target is smaller than the dim, a zero ``pad`` where it is larger, centred as the ONNX
reference and onnxruntime centre them. Compared with onnxruntime on both backends."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import ModelFileError, UnsupportedModelError

from .conftest import assert_refused, import_and_load, onnx
from .test_scatter_runtime import _check

helper, TP = onnx.helper, onnx.TensorProto
RNG = np.random.default_rng(59)


def _model(tmp_path, shape, sizes, out, *, elem=TP.FLOAT, **attrs):
    """One CenterCropPad named ``node`` of a graph input ``x`` to the constant ``sizes``."""
    inits = [onnx.numpy_helper.from_array(np.asarray(sizes, np.int64), "shape")]
    graph = helper.make_graph(
        [helper.make_node("CenterCropPad", ["x", "shape"], ["y"], name="node", **attrs)], "g",
        [helper.make_tensor_value_info("x", elem, list(shape))],
        [helper.make_tensor_value_info("y", elem, list(out))], initializer=inits)
    path = tmp_path / "ccp.onnx"
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString())
    return path


@pytest.mark.parametrize("shape, sizes, attrs, out, ops", [
    ((7, 8), (4, 5), {}, (4, 5), {"slice"}),                 # odd and even differences
    ((3, 4), (6, 9), {}, (6, 9), {"pad"}),
    ((7, 4), (4, 7), {}, (4, 7), {"slice", "pad"}),          # crop one axis, pad the other
    ((1, 3, 9, 6), (5, 8), {"axes": [-2, -1]}, (1, 3, 5, 8), {"slice", "pad"}),
    ((2, 5, 3), (5,), {"axes": [1]}, (2, 5, 3), {"identity"}),
    ((1, 3, 9, 6), (4, 4), {"axes": [3, 2]}, (1, 3, 4, 4), {"slice"}),
], ids=["crop", "pad", "crop-and-pad", "image-axes", "same-size", "axes-reordered"])
def test_center_crop_pad_matches_onnxruntime(shape, sizes, attrs, out, ops, tmp_path, signer):
    model = _model(tmp_path, shape, sizes, out, **attrs)
    feeds = [{"x": (RNG.standard_normal(shape) * 3).astype(np.float32)} for _ in range(2)]
    _check(model, tmp_path, signer, feeds, ops)


def test_a_uint8_image_is_cropped_and_padded_in_its_dtype(tmp_path, signer):
    """A preprocessing graph's camera image: uint8 in, uint8 out, padded with zeros."""
    model = _model(tmp_path, (1, 3, 6, 10), (8, 6), (1, 3, 8, 6), elem=TP.UINT8,
                   axes=[2, 3])
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert loaded.graph.outputs[0].dtype == "uint8"
    feeds = [{"x": RNG.integers(0, 256, (1, 3, 6, 10)).astype(np.uint8)} for _ in range(2)]
    _check(model, tmp_path, signer, feeds, {"slice", "pad"})


@pytest.mark.parametrize("shape, sizes, attrs, error, message", [
    (("n", 8), (4, 5), {}, UnsupportedModelError,
     "axis 0 of 'x' (shape ['n', 8]) is a run-time dim"),
    ((7, 8), (4,), {}, ModelFileError, "shape [4] must be one size >= 1 for each of the axes "
                                       "[0, 1] (distinct)"),
    ((7, 8), (0, 5), {}, ModelFileError, "shape [0, 5] must be one size >= 1"),
    ((7, 8), (4, 5), {"axes": [1, -1]}, ModelFileError, "the axes [1, 1] (distinct)"),
], ids=["run-time-dim", "too-few-sizes", "zero", "repeated-axis"])
def test_what_cannot_be_mapped_is_refused_naming_the_node(shape, sizes, attrs, error, message,
                                                          tmp_path):
    out = [4, 5] if len(sizes) == 2 else [7, 8]
    assert_refused(_model(tmp_path, shape, sizes, out, **attrs), error,
                   "node 'node' (CenterCropPad)", message)
