"""DeformConv (opset 19: torchvision's deform_conv2d, DCNv1 and with a mask DCNv2) imported as
GridSample at the offset taps and a grouped MatMul (plugin_host/onnx_import/deform.py),
compared with onnxruntime's kernel on both backends: groups and offset groups, strides, pads,
dilations, a mask and a bias, a weight given as an input, offsets reaching past the input, a
nan in the input, a run-time batch. Shapes that do not fit are refused naming the node."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import UnsupportedModelError

from .conftest import assert_refused, check_on_both_backends, import_and_load, onnx

helper, TP = onnx.helper, onnx.TensorProto
RNG = np.random.default_rng(31)


def _out(size, before, after, dilation, k, stride):
    return (size + before + after - (dilation * (k - 1) + 1)) // stride + 1


def _model(path, x_shape, out_channels, kernel, *, group=1, offset_group=1, strides=(1, 1),
           pads=(0, 0, 0, 0), dilations=(1, 1), mask=False, bias=False, weight_input=False,
           batch=None, **extra):
    """One DeformConv named ``dc``; the weight (and bias) initializers unless
    ``weight_input``; ``batch`` names a run-time batch. Returns (path, feed shapes)."""
    n, c, h, w = x_shape
    kh, kw = kernel
    oh = _out(h, pads[0], pads[2], dilations[0], kh, strides[0])
    ow = _out(w, pads[1], pads[3], dilations[1], kw, strides[1])
    taps = offset_group * kh * kw
    shapes = {"x": x_shape, "offset": (n, 2 * taps, oh, ow)}
    if mask:
        shapes["mask"] = (n, taps, oh, ow)
    weight = (RNG.standard_normal((out_channels, c // group, kh, kw)) * 0.5).astype(np.float32)
    inits = [] if weight_input else [onnx.numpy_helper.from_array(weight, "w")]
    if weight_input:
        shapes["w"] = weight.shape
    if bias:
        inits.append(onnx.numpy_helper.from_array(
            RNG.standard_normal(out_channels).astype(np.float32), "b"))
    names = ["x", "w", "offset", "b" if bias else "", "mask" if mask else ""]
    while not names[-1]:
        names.pop()
    node = helper.make_node("DeformConv", names, ["y"], name="dc", kernel_shape=list(kernel),
                            group=group, offset_group=offset_group, strides=list(strides),
                            pads=list(pads), dilations=list(dilations), **extra)

    def declared(name, shape):
        return [batch if batch and i == 0 and name != "w" else d for i, d in enumerate(shape)]

    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(k, TP.FLOAT, declared(k, s))
                      for k, s in shapes.items()],
        [helper.make_tensor_value_info("y", TP.FLOAT,
                                       declared("y", (n, out_channels, oh, ow)))], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]), path)
    return path, shapes


def _feeds(shapes, count=2, batch=None):
    feeds = []
    for k in range(count):
        feed = {}
        for name, shape in shapes.items():
            if batch is not None and name != "w":
                shape = (batch[k], *shape[1:])
            value = RNG.standard_normal(shape).astype(np.float32)
            if name == "offset":  # up to 3 pixels: taps past the input too
                value *= 1.5
            elif name == "mask":
                value = RNG.random(shape).astype(np.float32)
            feed[name] = value
        feeds.append(feed)
    feeds[-1]["x"].reshape(-1)[[3, 10]] = np.nan  # spreads to every output a tap of it reads
    return feeds


CASES = {
    "plain": ((1, 2, 5, 5), 3, (3, 3), {"pads": (1, 1, 1, 1)}),
    "groups": ((2, 4, 6, 7), 6, (3, 2), {"group": 2, "offset_group": 2, "strides": (2, 1),
                                         "pads": (1, 0, 1, 1), "dilations": (1, 2),
                                         "mask": True, "bias": True}),
    "depthwise": ((1, 4, 6, 5), 4, (2, 2), {"group": 4, "mask": True}),
    "offset-groups": ((1, 6, 5, 6), 2, (3, 3), {"offset_group": 3, "pads": (2, 1, 0, 1),
                                                "strides": (1, 2), "dilations": (2, 1),
                                                "bias": True}),
    "weight-input": ((1, 2, 4, 4), 2, (1, 3), {"pads": (0, 1, 0, 1), "weight_input": True}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_deform_conv_matches_onnxruntime(case, tmp_path, signer):
    x_shape, out_channels, kernel, options = CASES[case]
    model, shapes = _model(tmp_path / "d.onnx", x_shape, out_channels, kernel, **options)
    _, loaded = import_and_load(model, tmp_path / "d.pha", signer)
    ops = {n.op for n in loaded.graph.nodes}
    assert {"grid_sample", "matmul"} <= ops and "conv" not in ops, ops
    check_on_both_backends(model, loaded, _feeds(shapes))


def test_a_run_time_batch(tmp_path, signer):
    model, shapes = _model(tmp_path / "d.onnx", (2, 4, 5, 6), 4, (3, 3), group=2,
                           offset_group=2, pads=(1, 1, 1, 1), mask=True, bias=True,
                           batch="n")
    _, loaded = import_and_load(model, tmp_path / "d.pha", signer, golden_dims={"n": [1, 3]})
    assert loaded.graph.inputs[0].shape == ("n", 4, 5, 6)
    check_on_both_backends(model, loaded, _feeds(shapes, batch=[1, 3]))


@pytest.mark.parametrize("edit, message", [
    ({"x_shape": (1, 2, "h", 5)}, "input 'x' of shape [1, 2, 'h', 5] and weight 'w' of shape "
                                  "[3, 2, 3, 3]: only the batch may be a run-time dim"),
    ({"offset_group": 4}, "attribute offset_group=4 does not divide the 2 channels"),
    ({"kernel_shape_attr": [2, 2]}, "kernel_shape [2, 2] differs from the weight's [3, 3]"),
    ({"pads": (0, 0, 0, 0), "x_shape": (1, 2, 2, 5)},
     "the kernel [3, 3] (dilations [1, 1]) does not fit the padded input [2, 5]"),
    ({"offset_shape": (1, 18, 5, 4)}, "offset 'offset' of shape [1, 18, 5, 4]: needs "
                                      "[1, 18, 5, 5]"),
], ids=["run-time-height", "offset-group", "kernel", "too-small", "offset"])
def test_shapes_that_do_not_fit_are_refused(edit, message, tmp_path):
    x_shape = edit.pop("x_shape", (1, 2, 5, 5))
    kernel_attr = edit.pop("kernel_shape_attr", None)
    offset_shape = edit.pop("offset_shape", None)
    edit.setdefault("pads", (1, 1, 1, 1))
    if "h" in x_shape:
        path, _ = _model(tmp_path / "d.onnx", (1, 2, 5, 5), 3, (3, 3), **edit)
    else:
        path, _ = _model(tmp_path / "d.onnx", x_shape, 3, (3, 3), **edit)
    m = onnx.load(path)
    if "h" in x_shape:
        m.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "h"
    if kernel_attr is not None:
        for a in m.graph.node[0].attribute:
            if a.name == "kernel_shape":
                a.ints[:] = kernel_attr
    if offset_shape is not None:
        m.graph.input[1].type.tensor_type.shape.dim[3].dim_value = offset_shape[3]
    path.write_bytes(m.SerializeToString())
    assert_refused(path, UnsupportedModelError, "node 'dc' (DeformConv)", message)
