"""MaxPool and AveragePool padded by more than half the kernel: ONNX (and onnxruntime) take
any padding less than the kernel, torch at most half of it. The ABI's pools take ONNX's rule;
compared with onnxruntime on both backends, in floor and ceil mode, with and without
count_include_pad. A dilated MaxPool window whose taps all fall in the padding has no max
(torch gives -inf, onnxruntime the float's lowest value): refused naming the node, at import
where the sizes are known and when the call runs where they are known only then."""

from __future__ import annotations

import numpy as np
import pytest

from abi.errors import ShapeError
from plugin_host.errors import UnsupportedModelError
from plugin_host.executor import Executor
from plugin_host.onnx_import import import_onnx
from plugins.numpy_backend import NumpyBackend
from plugins.onnxruntime_backend import OnnxruntimeBackend

from .conftest import (assert_refused, check_on_both_backends, import_and_load, onnx,
                       onnxruntime_outputs)

helper, TP = onnx.helper, onnx.TensorProto
RNG = np.random.default_rng(71)


def _pool(path, op_type, shape, **attrs):
    graph = helper.make_graph(
        [helper.make_node(op_type, ["x"], ["y"], name="pool", **attrs)], "g",
        [helper.make_tensor_value_info("x", TP.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TP.FLOAT, [None] * len(shape))])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]), path)
    return path


# (kernel, strides, pads: begins then ends): each more than half the kernel somewhere
CASES = [([3, 3], [1, 1], [2, 2, 2, 2]), ([4, 3], [2, 1], [3, 0, 1, 2]),
         ([5, 2], [3, 2], [4, 1, 3, 1]), ([2, 4], [1, 3], [1, 3, 1, 0])]


@pytest.mark.parametrize("kernel, strides, pads", CASES)
@pytest.mark.parametrize("op_type, extra", [
    ("MaxPool", {}), ("AveragePool", {"count_include_pad": 0}),
    ("AveragePool", {"count_include_pad": 1})], ids=["max", "avg", "avg-include-pad"])
@pytest.mark.parametrize("ceil", [0, 1])
def test_a_pool_padded_past_half_its_kernel_matches_onnxruntime(kernel, strides, pads, op_type,
                                                                extra, ceil, tmp_path, signer):
    shape = (2, 3, 7, 6)
    model = _pool(tmp_path / "p.onnx", op_type, shape, kernel_shape=kernel, strides=strides,
                  pads=pads, ceil_mode=ceil, **extra)
    _, loaded = import_and_load(model, tmp_path / "p.pha", signer)
    feeds = [{"x": (RNG.standard_normal(shape) * 3).astype(np.float32)} for _ in range(3)]
    feeds.append({"x": -np.abs(feeds[0]["x"])})  # max pool: the padding must never win
    check_on_both_backends(model, loaded, feeds)


def test_a_pool_padded_as_wide_as_its_kernel_is_refused(tmp_path):
    model = _pool(tmp_path / "p.onnx", "MaxPool", (1, 2, 8), kernel_shape=[3], pads=[3, 0])
    assert_refused(model, UnsupportedModelError, "node 'pool' (MaxPool)",
                   "padding [3, 0] on spatial axis 0 must be less than the kernel size 3")


def test_a_dilated_max_pool_window_of_padding_alone_is_refused_at_import(tmp_path):
    # taps at -1 and 2 (dilation 3) of an input of 2: the first window holds no element
    model = _pool(tmp_path / "p.onnx", "MaxPool", (1, 2, 2), kernel_shape=[2], pads=[1, 1],
                  dilations=[3])
    assert_refused(model, UnsupportedModelError, "node 'pool' (MaxPool)",
                   "window 0 on spatial axis 0 of x shape (1, 2, 2) holds padding alone "
                   "(taps -1 to 2 by 3, the input's 0 to 1)")


def test_a_dilated_max_pool_window_of_padding_alone_is_refused_when_the_call_runs(tmp_path):
    """Over a run-time length the same window is refused on both backends when a call gives
    a length that leaves it no element; other lengths match onnxruntime."""
    model = _pool(tmp_path / "p.onnx", "MaxPool", (1, 2, "t"), kernel_shape=[2], pads=[1, 1],
                  dilations=[3])
    graph = import_onnx(model).graph
    for backend in (NumpyBackend(), OnnxruntimeBackend()):
        executor = Executor(graph, backend)
        with pytest.raises(ShapeError, match=r"window 0 on spatial axis 0 of x shape "
                           r"\(1, 2, 2\) holds padding alone"):
            executor.run({"x": np.ones((1, 2, 2), np.float32)})
        for t in (3, 4, 9):
            x = RNG.standard_normal((1, 2, t)).astype(np.float32)
            np.testing.assert_array_equal(executor.run({"x": x})["y"],
                                          onnxruntime_outputs(model, {"x": x})["y"])
