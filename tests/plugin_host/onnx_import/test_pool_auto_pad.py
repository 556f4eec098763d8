"""MaxPool and AveragePool with ``auto_pad`` (keras2onnx and tf2onnx write SAME_UPPER for a
Keras pool with padding="same", as in MTCNN's networks): explicit pads as for Conv, compared
with onnxruntime on both backends; over a run-time size where the pad before does not depend
on it; refused naming the node otherwise, and for a dilated pool, which onnxruntime pads by
its undilated kernel against the ONNX spec. A Pad of -inf read by a MaxPool alone (timm's
"same" max pooling) is the pool's padding."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from plugin_host.errors import UnsupportedModelError

from .conftest import assert_refused, check_on_both_backends, export, import_and_load, onnx, torch

F = torch.nn.functional


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


class _SamePool(torch.nn.Module):
    """TensorFlow's "same" max pooling as timm writes it (``MaxPool2dSame``, EfficientDet's
    BiFPN): pads worked out from the input's size, ``max(..., 0)`` and all, then a Pad of
    -inf and a pool with none of its own; and a "same" conv's zero pad before it."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 4, 3, stride=2)

    @staticmethod
    def _same(x, k: int, s: int, value: float):
        ih, iw = x.size()[-2:]
        ph = max((math.ceil(ih / s) - 1) * s + k - ih, 0)
        pw = max((math.ceil(iw / s) - 1) * s + k - iw, 0)
        return F.pad(x, [pw // 2, pw - pw // 2, ph // 2, ph - ph // 2], value=value)

    def forward(self, x):
        y = self.conv(self._same(x, 3, 2, 0.0))
        return F.max_pool2d(self._same(y, 3, 2, float("-inf")), 3, 2)


@pytest.mark.parametrize("size", [(9, 12), (8, 7)])
def test_a_pad_of_minus_infinity_before_a_max_pool_is_the_pool_s_padding(size, tmp_path,
                                                                        signer):
    """The pads the legacy exporter computes from a static size (Ceil, Clip, ...) fold; the
    Pad of -inf joins the MaxPool's padding, which is implicitly -inf: one ``max_pool``."""
    model = export(_SamePool(), [torch.randn(1, 2, *size)], tmp_path / "p.onnx", dynamo=False,
                   input_names=["x"], output_names=["y"])
    _, loaded = import_and_load(model, tmp_path / "p.pha", signer)
    ops = [n.op for n in loaded.graph.nodes]
    assert ops.count("pad") == 1 and ops[-1] == "max_pool", ops  # the conv's zero pad stays
    pool = loaded.graph.nodes[-1]
    assert max(max(pair) for pair in pool.attrs["padding"]) == 1
    rng = np.random.default_rng(9)
    check_on_both_backends(model, loaded, [
        {"x": rng.standard_normal((1, 2, *size)).astype(np.float32) * s} for s in (1, 100)])


def _padded_pool(path, pad, consumers=1, **pool):
    helper, tp = onnx.helper, onnx.TensorProto
    nodes = [helper.make_node("Pad", ["x", "pads", "value"], ["p"], name="pad")]
    nodes += [helper.make_node("MaxPool", ["p"], [f"y{i}"], name=f"pool{i}", kernel_shape=[3, 3],
                               strides=[2, 2], **pool) for i in range(consumers)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", tp.FLOAT, [1, 2, 7, 9])],
        [helper.make_tensor_value_info(f"y{i}", tp.FLOAT, None) for i in range(consumers)],
        [helper.make_tensor("pads", tp.INT64, [8], pad),
         helper.make_tensor("value", tp.FLOAT, [], [float("-inf")])])
    model = onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("pads, consumers, pool", [
    ([0, 0, 0, 1, 0, 0, 1, 1], 1, {"pads": [1, 0, 0, 0]}),   # the two paddings added up
    ([0, 0, 1, 1, 0, 0, 1, 1], 1, {"dilations": [1, 2]}),
    ([0, 0, 2, 0, 0, 0, 0, 2], 1, {}),                      # more than half the kernel
], ids=["with-own-pads", "dilated", "wider-than-torch-takes"])
def test_a_padded_max_pool_matches_onnxruntime(pads, consumers, pool, tmp_path, signer):
    model = _padded_pool(tmp_path / "p.onnx", pads, consumers, **pool)
    _, loaded = import_and_load(model, tmp_path / "p.pha", signer)
    assert [n.op for n in loaded.graph.nodes] == ["max_pool"]
    rng = np.random.default_rng(10)
    check_on_both_backends(model, loaded, [
        {"x": rng.standard_normal((1, 2, 7, 9)).astype(np.float32)} for _ in range(3)])


@pytest.mark.parametrize("pads, consumers, pool", [
    ([0, 0, 3, 0, 0, 0, 0, 0], 1, {}),                 # as wide as the kernel
    ([0, 0, 0, 1, 0, 0, 1, 1], 1, {"ceil_mode": 1}),    # a window may start in the padding
    ([0, 0, 1, 1, 0, 0, 1, 1], 2, {}),                 # the padded value read twice
    ([0, 1, 0, 0, 0, 0, 0, 0], 1, {}),                 # a channel padded
], ids=["too-wide", "ceil-mode", "two-readers", "channels"])
def test_a_pad_of_minus_infinity_the_pool_cannot_take_is_a_pad_then_the_pool(
        pads, consumers, pool, tmp_path, signer):
    """Not the pool's padding: a pad by 0 and a where of -inf over the padding (the manifest
    holds no -inf), then the pool over it; a window wholly in the padding gives -inf, as
    onnxruntime."""
    model = _padded_pool(tmp_path / "p.onnx", pads, consumers, **pool)
    _, loaded = import_and_load(model, tmp_path / "p.pha", signer)
    ops = [n.op for n in loaded.graph.nodes]
    assert ops.count("where") == 1 and ops.count("max_pool") == consumers, ops
    rng = np.random.default_rng(11)
    x = rng.standard_normal((3, 1, 2, 7, 9)).astype(np.float32)
    x[2, 0, 1, 3, :3] = [-0.0, np.inf, -np.inf]  # (a nan: max_pool's differs, see README)
    check_on_both_backends(model, loaded, [{"x": value} for value in x])
