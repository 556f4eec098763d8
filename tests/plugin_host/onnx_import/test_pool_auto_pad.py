"""MaxPool and AveragePool with ``auto_pad`` (keras2onnx and tf2onnx write SAME_UPPER for a
Keras pool with padding="same", as in MTCNN's networks): explicit pads as for Conv, compared
with onnxruntime on both backends; over a run-time size where the pad before does not depend
on it; refused naming the node otherwise, and for a dilated pool, which onnxruntime pads by
its undilated kernel against the ONNX spec."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from plugin_host.errors import UnsupportedModelError

from .conftest import assert_refused, check_on_both_backends, import_and_load, onnx


def _pool(path, op, size, **attrs):
    helper, tp = onnx.helper, onnx.TensorProto
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"], name="pool", **attrs)], "g",
        [helper.make_tensor_value_info("x", tp.FLOAT, [1, 2, size, 9])],
        [helper.make_tensor_value_info("y", tp.FLOAT, ["n", "c", "h", "w"])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _feeds(sizes):
    rng = np.random.default_rng(8)
    return [{"x": rng.standard_normal((1, 2, n, 9)).astype(np.float32)} for n in sizes]


_CASES = [(op, auto, k, s, ceil) for op, auto, k, s, ceil in itertools.product(
    ["MaxPool", "AveragePool"], ["SAME_UPPER", "SAME_LOWER", "VALID"], [2, 3], [1, 2], [0, 1])]


@pytest.mark.parametrize("op, auto, kernel, stride, ceil", _CASES)
def test_auto_pad_on_a_fixed_size_matches_onnxruntime(op, auto, kernel, stride, ceil, tmp_path,
                                                      signer):
    extra = {"count_include_pad": 1} if op == "AveragePool" and kernel == 3 else {}
    for size in (7, 8):
        model = _pool(tmp_path / f"p{size}.onnx", op, size, auto_pad=auto, ceil_mode=ceil,
                      kernel_shape=[kernel, kernel], strides=[stride, stride], **extra)
        _, loaded = import_and_load(model, tmp_path / f"p{size}.pha", signer)
        check_on_both_backends(model, loaded, _feeds([size]))


@pytest.mark.parametrize("op, auto, kernel, stride, pads", [
    ("MaxPool", "SAME_UPPER", 2, 2, ((0, 1), (0, 1))),   # MTCNN's P-Net over any image size
    ("AveragePool", "SAME_UPPER", 3, 1, ((1, 1), (1, 1))),
    ("MaxPool", "SAME_LOWER", 4, 1, ((2, 1), (2, 1))),
    ("MaxPool", "SAME_UPPER", 3, 2, None), ("AveragePool", "SAME_LOWER", 2, 2, None)])
def test_auto_pad_on_a_run_time_size(op, auto, kernel, stride, pads, tmp_path, signer):
    """The total pad is span - stride + (size mod stride)...: where the pad before is the same
    for every size, the pool pads span - 1 in all, whose extra pad after no window reaches;
    else the run-time size is refused naming the node."""
    model = _pool(tmp_path / "p.onnx", op, "h", auto_pad=auto, kernel_shape=[kernel, kernel],
                  strides=[stride, stride])
    if pads is None:
        assert_refused(model, UnsupportedModelError, "node 'pool'",
                       f"auto_pad={auto} with kernel {kernel}, stride {stride} and dilation 1 "
                       f"pads [0, 1] before, by the size mod the stride")
        return
    _, loaded = import_and_load(model, tmp_path / "p.pha", signer,
                                golden_dims={"h": [4, 5, 7]})
    assert loaded.graph.nodes[0].attrs["padding"] == pads
    check_on_both_backends(model, loaded, _feeds([4, 5, 6, 9, 16]))


def test_a_dilated_pool_with_same_padding_is_refused(tmp_path):
    model = _pool(tmp_path / "p.onnx", "MaxPool", 8, auto_pad="SAME_UPPER", kernel_shape=[3, 3],
                  dilations=[2, 2])
    assert_refused(model, UnsupportedModelError, "node 'pool' (MaxPool)",
                   "auto_pad=SAME_UPPER with dilations [2, 2]: onnxruntime pads a dilated pool "
                   "by its undilated kernel, ONNX by the dilated one; give explicit pads")
