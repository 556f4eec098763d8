"""Col2Im (torch's F.fold, and ONNX's over 1 or 3 spatial axes) imported as the sum of its
block positions spread over the image with pad, reshape and slice, compared with onnxruntime;
a run-time image shape, sizes of unequal counts or channels that do not fit are refused
naming the node."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import UnsupportedModelError

from .conftest import (EXPORTERS, assert_refused, check_against_onnxruntime,
                       check_on_both_backends, export, import_and_load, onnx, torch)

RNG = np.random.default_rng(41)

#: (output size, kernel, dilation, padding, stride): without overlap, overlapping with
#: padding, and dilated with a stride that leaves the last rows and columns of a block out
FOLDS = [((4, 6), (2, 2), 1, 0, 2),
         ((5, 5), (3, 3), 1, 1, 1),
         ((7, 6), (2, 3), (2, 1), 1, (2, 3))]  # (the legacy exporter mixes up unequal pads)


class _Fold(torch.nn.Module):
    def __init__(self, size, kernel, dilation, padding, stride):
        super().__init__()
        self.args = size, kernel, dilation, padding, stride

    def forward(self, x):
        return torch.nn.functional.fold(x, *self.args)


def _blocks(size, kernel, dilation, padding, stride):
    """The (C * kh * kw, L) input F.fold takes for these arguments, for 2 channels."""
    pair = [v if isinstance(v, tuple) else (v, v) for v in (dilation, padding, stride)]
    (d, p, s) = pair
    count = [(size[a] + 2 * p[a] - d[a] * (kernel[a] - 1) - 1) // s[a] + 1 for a in range(2)]
    return 2 * kernel[0] * kernel[1], count[0] * count[1]


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
@pytest.mark.parametrize("args", FOLDS, ids=["tiles", "overlap", "dilated"])
def test_torch_fold_matches_onnxruntime(dynamo, fold, optimize, args, tmp_path, signer):
    shape = (2, *_blocks(*args))
    model = export(_Fold(*args), [torch.randn(*shape)], tmp_path / "f.onnx", dynamo=dynamo,
                   fold=fold, optimize=optimize, input_names=["x"], output_names=["y"])
    _, loaded = import_and_load(model, tmp_path / "f.pha", signer)
    assert "add" in {n.op for n in loaded.graph.nodes}
    x = RNG.standard_normal(shape).astype(np.float32)
    x.reshape(-1)[:5] = [np.finfo(np.float32).max, -1e-45, np.inf, -0.0, np.nan]
    check_against_onnxruntime(model, loaded, [{"x": x}, {"x": RNG.standard_normal(shape)
                                                         .astype(np.float32) * 100}])


def _model(tmp_path, x_shape, image, block, runtime_image=False, **attrs):
    helper, TP = onnx.helper, onnx.TensorProto
    inputs = [helper.make_tensor_value_info("x", TP.FLOAT, list(x_shape))]
    inits = [onnx.numpy_helper.from_array(np.array(block, np.int64), "block")]
    if runtime_image:
        inputs.append(helper.make_tensor_value_info("image", TP.INT64, [len(image)]))
    else:
        inits.append(onnx.numpy_helper.from_array(np.array(image, np.int64), "image"))
    node = helper.make_node("Col2Im", ["x", "image", "block"], ["y"], name="node", **attrs)
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info(
        "y", TP.FLOAT, [None] * (2 + len(image)))], initializer=inits)
    path = tmp_path / "c.onnx"
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString())
    return path


def test_asymmetric_pads_and_a_run_time_batch_match_onnxruntime(tmp_path, signer):
    model = _model(tmp_path, ("n", 8, 15), [5, 4], [2, 2], pads=[1, 0, 0, 2], strides=[2, 1])
    _, loaded = import_and_load(model, tmp_path / "c.pha", signer)
    check_against_onnxruntime(model, loaded, [
        {"x": RNG.standard_normal((n, 8, 15)).astype(np.float32)} for n in (1, 3)])


@pytest.mark.parametrize("image, block, attrs", [
    ([7], [3], {"strides": [2], "pads": [1, 0]}),
    ([9], [2], {}),
    ([3, 4, 5], [1, 1, 5], {}),  # onnx's own 5-D case
    ([3, 4, 5], [2, 2, 3], {"strides": [1, 2, 1], "pads": [0, 1, 1, 0, 0, 1]}),
], ids=["1d-stride-pads", "1d", "3d-rows", "3d-strided-padded"])
def test_col2im_over_one_or_three_axes_matches_onnxruntime(image, block, attrs, tmp_path,
                                                          signer):
    d = len(image)
    dil, stride = attrs.get("dilations", [1] * d), attrs.get("strides", [1] * d)
    pads = attrs.get("pads", [0] * 2 * d)
    count = np.prod([(image[a] + pads[a] + pads[a + d] - dil[a] * (block[a] - 1) - 1)
                     // stride[a] + 1 for a in range(d)])
    shape = ("n", 2 * int(np.prod(block)), int(count))
    model = _model(tmp_path, shape, image, block, **attrs)
    _, loaded = import_and_load(model, tmp_path / "c.pha", signer)
    check_on_both_backends(model, loaded, [
        {"x": RNG.standard_normal((n, *shape[1:])).astype(np.float32)} for n in (1, 2)])


@pytest.mark.parametrize("kw, message", [
    ({"runtime_image": True}, "image_shape 'image' must be a constant (known at import)"),
    ({"image": [4, 4, 4], "block": [2, 2]}, "image_shape [4, 4, 4] and block_shape [2, 2]: "
                                            "need as many sizes, one or more"),
    ({"image": [9], "block": [2], "strides": [1], "dilations": [3], "x_shape": (1, 4, 6)},
     "dilations [3] of a 1-D Col2Im: onnxruntime's Col2Im dilates only 2 axes as ONNX's "
     "reference and torch's fold do"),
    ({"x_shape": (1, 6, 4)}, "input shape [1, 6, 4]: needs C * 2 * 2 channels and 2 * 2 "
                             "blocks for image_shape [4, 4]"),
    ({"strides": [0, 1]}, "pads >= 0 and the rest >= 1"),
    ({"pads": [1, 1]}, "need 2, 2, 4, 2 and 2 values"),
])
def test_what_col2im_refuses_names_node_and_value(kw, message, tmp_path):
    args = {"x_shape": (1, 8, 4), "image": [4, 4], "block": [2, 2], "strides": [2, 2], **kw}
    assert_refused(_model(tmp_path, **args), UnsupportedModelError, "node 'node' (Col2Im)",
                   message)
