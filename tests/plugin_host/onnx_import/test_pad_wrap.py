"""Pad's wrap mode (torch's circular padding, which the dynamo exporter writes as one Pad)
imported as slices concatenated around each padded axis and compared with onnxruntime; pads
wider than the axis or on a run-time axis are refused naming the node. Negative pads (a crop:
``F.pad(x, (0, 0, -1, 1))``, kaldi fbank's shift of its signal) in constant and edge mode are
a slice before the pad."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import ModelFileError, UnsupportedModelError

from .conftest import (EXPORTERS, assert_refused, check_against_onnxruntime, export,
                       import_and_load, onnx, torch)

RNG = np.random.default_rng(31)


class _Circular(torch.nn.Module):
    def forward(self, x, s):
        pad = torch.nn.functional.pad
        return (pad(x, (1, 2, 2, 1), mode="circular"), pad(x, (0, 3, 4, 0), mode="circular"),
                pad(s, (3, 1), mode="circular"))


def _feeds(*shapes):
    """Random inputs and ones with float32 extremes, infinities and nan, which wrap as they
    are."""
    feeds = []
    for special in (False, True):
        feed = {}
        for name, shape in zip("xs", shapes):
            v = RNG.standard_normal(shape).astype(np.float32)
            if special:
                v.reshape(-1)[:6] = [np.inf, -np.inf, np.nan, np.finfo(np.float32).max,
                                     -0.0, 1e-45]
            feed[name] = v
        feeds.append(feed)
    return feeds


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_torch_circular_pad_matches_onnxruntime(dynamo, fold, optimize, tmp_path, signer):
    model = export(_Circular(), [torch.randn(2, 3, 4, 5), torch.randn(2, 3, 6)],
                   tmp_path / "w.onnx", dynamo=dynamo, fold=fold, optimize=optimize,
                   input_names=["x", "s"], output_names=["a", "b", "c"])
    _, loaded = import_and_load(model, tmp_path / "w.pha", signer)
    assert "pad" not in {n.op for n in loaded.graph.nodes}
    check_against_onnxruntime(model, loaded, _feeds((2, 3, 4, 5), (2, 3, 6)))


def _model(tmp_path, shape, pads, axes=None, mode="wrap"):
    helper, TP = onnx.helper, onnx.TensorProto
    inits = [onnx.numpy_helper.from_array(np.array(pads, np.int64), "pads")]
    names = ["x", "pads"]
    if axes is not None:
        inits.append(onnx.numpy_helper.from_array(np.array(axes, np.int64), "axes"))
        names += ["", "axes"]
    node = helper.make_node("Pad", names, ["y"], name="node", mode=mode)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TP.FLOAT,
                                                                          list(shape))],
                              [helper.make_tensor_value_info("y", TP.FLOAT,
                                                             [None] * len(shape))],
                              initializer=inits)
    path = tmp_path / "wrap.onnx"
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 19)]).SerializeToString())
    return path


@pytest.mark.parametrize("shape, pads, axes", [
    ((3, 4), [3, 0, 0, 4], None),             # a whole axis each side
    (("n", 2, 5), [0, 1, 0, 0, 0, 5], None),  # a run-time dim left alone
    ((2, 3, 4), [2, 1, 0, 2], [-1, 0]),       # axes, negative and out of order
    ((2, 3), [0, 0, 0, 0], None),             # nothing to pad
])
def test_onnx_wrap_pads_match_onnxruntime(shape, pads, axes, tmp_path, signer):
    model = _model(tmp_path, shape, pads, axes)
    _, loaded = import_and_load(model, tmp_path / "w.pha", signer)
    concrete = [(3 if type(d) is str else d) for d in shape]
    check_against_onnxruntime(model, loaded, _feeds(concrete))


@pytest.mark.parametrize("shape, pads, message", [
    ((3, 4), [0, 5, 0, 0], "wrap pads [5, 0] on axis 1 of input shape [3, 4]: each must be at "
                           "most the dim, a static one"),
    (("n", 4), [1, 0, 0, 0], "wrap pads [1, 0] on axis 0 of input shape ['n', 4]"),
])
def test_what_wrap_refuses_names_node_and_value(shape, pads, message, tmp_path):
    assert_refused(_model(tmp_path, shape, pads), UnsupportedModelError, "node 'node' (Pad)",
                   message)


class _Crop(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.pad(x, (0, 0, -1, 1)) + torch.nn.functional.pad(x, (1, -1))


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_torch_negative_pads_crop_as_onnxruntime(dynamo, fold, optimize, tmp_path, signer):
    model = export(_Crop(), [torch.randn(2, 4, 5)], tmp_path / "c.onnx", dynamo=dynamo,
                   fold=fold, optimize=optimize, input_names=["x"], output_names=["y"])
    _, loaded = import_and_load(model, tmp_path / "c.pha", signer)
    check_against_onnxruntime(model, loaded, _feeds((2, 4, 5)))


@pytest.mark.parametrize("shape, pads, mode", [
    ((3, 6), [0, 1, 0, -1], "constant"),     # kaldi fbank's shift by one step
    ((3, 6), [0, 1, 0, -1], "edge"),
    ((3, 6), [-1, -2, -1, -3], "constant"),  # a crop only
    (("n", 5), [-1, 2, 0, -1], "edge"),      # a run-time dim cropped from the front
])
def test_negative_pads_crop_as_onnxruntime(shape, pads, mode, tmp_path, signer):
    model = _model(tmp_path, shape, pads, mode=mode)
    _, loaded = import_and_load(model, tmp_path / "c.pha", signer,
                                golden_dims={"n": [3, 2]} if "n" in shape else None)
    concrete = [(4 if type(d) is str else d) for d in shape]
    check_against_onnxruntime(model, loaded, _feeds(concrete))


def test_negative_pads_that_reflect_or_cut_past_the_axis_are_refused(tmp_path):
    assert_refused(_model(tmp_path, (3, 6), [0, 1, 0, -1], mode="reflect"),
                   UnsupportedModelError, "node 'node' (Pad)", "pads [0, 1, 0, -1]: a negative "
                   "pad (a crop) is supported with mode 'constant' or 'edge', not 'reflect'")
    assert_refused(_model(tmp_path, (3, 4), [0, -3, 0, -2], mode="constant"), ModelFileError,
                   "node 'node' (Pad)", "pads [-3, -2] on axis 1 cut more than its 4 entries")
