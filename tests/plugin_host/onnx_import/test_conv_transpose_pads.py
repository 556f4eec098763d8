"""ConvTranspose with pads that differ before and after: given so (tf2onnx writes a Keras
Conv2DTranspose with padding="same" that way), from ``auto_pad`` SAME_UPPER / SAME_LOWER (an
output ``stride`` times the input) or from ``output_shape``. ``conv_transpose`` pads both
sides alike, so the import pads the smaller and slices the extra off; compared with
onnxruntime on both backends, over a run-time size too. An ``output_shape`` larger than the
unpadded output (by less than a stride) grows it after the last row, as onnxruntime does."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from plugin_host.errors import UnsupportedModelError

from .conftest import assert_refused, check_on_both_backends, import_and_load, onnx

_PADS = [{"auto_pad": "SAME_UPPER"}, {"auto_pad": "SAME_LOWER"}, {"auto_pad": "VALID"},
         {"pads": [0, 1, 1, 0]}, {"pads": [2, 0, 1, 1]},
         {"output_shape": "grown"}, {"output_shape": "stride", "auto_pad": "SAME_UPPER"}]


def _model(path, size, kernel, stride, extra, bias=False, **attrs):
    helper, tp = onnx.helper, onnx.TensorProto
    rng = np.random.default_rng(1)
    weights = [onnx.numpy_helper.from_array(rng.standard_normal(
        (2, 3, kernel, kernel)).astype(np.float32), "w")]
    if bias:
        weights.append(onnx.numpy_helper.from_array(rng.standard_normal(3).astype(
            np.float32), "b"))
    graph = helper.make_graph(
        [helper.make_node("ConvTranspose", ["x", "w", "b"][:2 + bias], ["y"], name="ct",
                          strides=[stride] * 2, output_padding=[extra] * 2, **attrs)], "g",
        [helper.make_tensor_value_info("x", tp.FLOAT, [1, 2, size, 5])],
        [helper.make_tensor_value_info("y", tp.FLOAT, ["n", "c", "h", "w"])], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize("pads, kernel, stride, extra", [
    (p, k, s, e) for p, k, (s, e) in itertools.product(range(len(_PADS)), [3, 4],
                                                        [(1, 0), (2, 0), (2, 1)])])
def test_uneven_pads_match_onnxruntime(pads, kernel, stride, extra, tmp_path, signer):
    attrs = dict(_PADS[pads])
    if attrs.get("output_shape") == "grown":
        attrs["output_shape"] = [4 * stride + 1, 5 * stride - 1]
    elif attrs.get("output_shape") == "stride":
        attrs["output_shape"] = [4 * stride, 5 * stride]
    model = _model(tmp_path / "ct.onnx", 4, kernel, stride, extra, **attrs)
    _, loaded = import_and_load(model, tmp_path / "ct.pha", signer)
    if "pads" in attrs or attrs.get("auto_pad") == "VALID":  # uneven: sliced; none: not
        assert ("slice" in {n.op for n in loaded.graph.nodes}) is ("pads" in attrs)
    check_on_both_backends(model, loaded, [{"x": np.random.default_rng(2).standard_normal(
        (1, 2, 4, 5)).astype(np.float32)}])


def test_uneven_pads_over_a_run_time_size(tmp_path, signer):
    model = _model(tmp_path / "ct.onnx", "h", 3, 2, 1, pads=[0, 2, 1, 0])
    _, loaded = import_and_load(model, tmp_path / "ct.pha", signer, golden_dims={"h": [3, 6]})
    assert [n.op for n in loaded.graph.nodes] == ["conv_transpose", "slice"]
    check_on_both_backends(model, loaded, [{"x": np.random.default_rng(h).standard_normal(
        (1, 2, h, 5)).astype(np.float32)} for h in (1, 4, 7)])


@pytest.mark.parametrize("auto_pad", ["NOTSET", "SAME_UPPER", "SAME_LOWER"])
@pytest.mark.parametrize("larger", [(1, 0), (2, 1), (1, 2)], ids=["1-0", "2-1", "1-2"])
@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
def test_an_output_shape_larger_than_unpadded_matches_onnxruntime(auto_pad, larger, bias,
                                                                  tmp_path, signer):
    """The output padding grown to reach it (onnxruntime puts the rows after the last, with
    the bias in them, whatever auto_pad says); kernel 2, stride 3, so the unpadded output of
    4 x 5 is 11 x 14."""
    shape = [11 + larger[0], 14 + larger[1]]
    model = _model(tmp_path / "ct.onnx", 4, 2, 3, 0, bias=bias, output_shape=shape,
                   auto_pad=auto_pad)
    _, loaded = import_and_load(model, tmp_path / "ct.pha", signer)
    assert loaded.graph.outputs[0].shape == (1, 3, *shape)
    assert [n.op for n in loaded.graph.nodes] == ["conv_transpose"]
    check_on_both_backends(model, loaded, [{"x": np.random.default_rng(3).standard_normal(
        (1, 2, 4, 5)).astype(np.float32)}])


@pytest.mark.parametrize("attrs, size, message", [
    ({"output_shape": [14, 11]}, 4, "output_padding[0]=3 must be smaller than either stride"),
    ({"auto_pad": "SAME_UPPER"}, "h", "auto_pad=SAME_UPPER needs static spatial sizes"),
    ({"pads": [0, -1, 1, 0]}, 4, "pads [0, -1, 1, 0] must be 4 values >= 0")])
def test_pads_that_cannot_be_worked_out_are_refused(attrs, size, message, tmp_path):
    model = _model(tmp_path / "ct.onnx", size, 2, 3, 0, **attrs)
    assert_refused(model, UnsupportedModelError, "node 'ct' (ConvTranspose)", message)
