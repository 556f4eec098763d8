"""The numpy backend's ``avg_pool`` with ``dilation`` (ONNX AveragePool's dilations, opset 19),
through the builder and executor: against a torch reference (torch has no dilated average
pool: ``F.unfold`` with dilation over the padded input, and a mean over each window) on 1, 2
and 3 spatial axes, and against onnxruntime's AveragePool, which decides what a window counts:
taps on the explicit padding with count_include_pad, never those past it that ceil_mode adds,
and 0 for a window whose taps all miss the input; bit for bit, as each window's taps are added
one after another in window order, as its kernel adds them (with or without dilation)."""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as TF

from plugin_host.builder import GraphBuilder
from plugin_host.executor import Executor
from plugins.numpy_backend import NumpyBackend

RNG = np.random.default_rng(41)
LAYOUTS = {1: "NCL", 2: "NCHW", 3: "NCDHW"}


def run_avg_pool(x, **attrs):
    """``avg_pool`` of ``x`` as a one-node graph on the numpy backend."""
    b = GraphBuilder("avg_pool")
    layout = LAYOUTS[x.ndim - 2]
    b.output(b.op("avg_pool", b.input("x", x.shape, "float32", layout), name="n", **attrs),
             "y", layout)
    return Executor(b.build(), NumpyBackend()).run({"x": x})["y"]


def _out_len(size, k, s, pb, pa, d, ceil):
    """torch's pooled length over the dilated window (k - 1) * d + 1: floor, or with ceil_mode
    rounded up unless the last window would start in the trailing padding."""
    span = size + pb + pa - d * (k - 1) - 1
    n = (-(-span // s) if ceil else span // s) + 1
    return n - 1 if ceil and (n - 1) * s >= size + pb else n


def unfold_avg_pool2d(x, kernel, stride, padding, dilation, ceil_mode, count_include_pad):
    """torch reference over (N, C, H, W): zero-pad by ``padding`` ([before, after] per axis)
    plus what ceil_mode's last window runs past it, ``F.unfold`` with the dilation and stride,
    and each window's sum over the count of its taps on x (with count_include_pad, on the
    explicit padding too), unfolded from a mask the same way. A window counting no tap sums
    only zeros: 0, as onnxruntime gives."""
    x = torch.from_numpy(np.ascontiguousarray(x))
    n, c, *size = x.shape
    out = [_out_len(size[i], kernel[i], stride[i], *padding[i], dilation[i], ceil_mode)
           for i in range(2)]
    extra = [max(0, (o - 1) * s + d * (k - 1) + 1 - (n_ + pb + pa)) for o, s, d, k, n_, (pb, pa)
             in zip(out, stride, dilation, kernel, size, padding)]
    pads = (padding[1][0], padding[1][1] + extra[1], padding[0][0], padding[0][1] + extra[0])
    mask = torch.ones(1, 1, *size, dtype=x.dtype)
    if count_include_pad:
        mask = TF.pad(mask, (padding[1][0], padding[1][1], padding[0][0], padding[0][1]),
                      value=1.0)
        mask = TF.pad(mask, (0, extra[1], 0, extra[0]))
    else:
        mask = TF.pad(mask, pads)
    unfold = dict(kernel_size=tuple(kernel), dilation=tuple(dilation), stride=tuple(stride))
    total = TF.unfold(TF.pad(x, pads), **unfold).view(n, c, -1, *out).sum(dim=2)
    count = TF.unfold(mask, **unfold).view(1, 1, -1, *out).sum(dim=2)
    return (total / count.clamp(min=1)).numpy()


def unfold_avg_pool(x, kernel, stride, padding, dilation, ceil_mode, count_include_pad):
    """:func:`unfold_avg_pool2d` on 1 spatial axis (a height of 1) or on 3: (H, W) pooled
    first, over the depths as channels, then D over H * W flattened as one axis (a window's
    sum and count are products over its axes, so the mean of means is the mean)."""
    args = (ceil_mode, count_include_pad)
    if x.ndim == 3:
        return unfold_avg_pool2d(x[:, :, None], [1, *kernel], [1, *stride],
                                 [[0, 0], *padding], [1, *dilation], *args)[:, :, 0]
    if x.ndim == 4:
        return unfold_avg_pool2d(x, kernel, stride, padding, dilation, *args)
    n, c, depth = x.shape[:3]
    hw = unfold_avg_pool2d(x.reshape(n, c * depth, *x.shape[3:]), kernel[1:], stride[1:],
                           padding[1:], dilation[1:], *args)
    d = unfold_avg_pool2d(hw.reshape(n, c, depth, -1), [kernel[0], 1], [stride[0], 1],
                          [padding[0], [0, 0]], [dilation[0], 1], *args)
    return d.reshape(n, c, d.shape[2], *hw.shape[2:])


def onnxruntime_avg_pool(x, kernel, stride, padding, dilation, ceil_mode, count_include_pad):
    """onnxruntime's AveragePool (opset 19) of ``x``."""
    helper, tp = onnx.helper, onnx.TensorProto
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=kernel, strides=stride,
                            pads=[p[0] for p in padding] + [p[1] for p in padding],
                            dilations=dilation, ceil_mode=int(ceil_mode),
                            count_include_pad=int(count_include_pad))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", tp.FLOAT,
                                                                          x.shape)],
                              [helper.make_tensor_value_info("y", tp.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    options = ort.SessionOptions()
    options.log_severity_level = 3  # its ceil_mode length differs from ONNX's shape inference
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def _attrs(kernel, stride, padding, dilation, ceil_mode, count_include_pad):
    return dict(kernel_size=kernel, stride=stride, padding=padding, dilation=dilation,
                ceil_mode=ceil_mode, count_include_pad=count_include_pad)


def test_the_unfold_reference_is_torch_s_avg_pool_without_dilation():
    """The reference helper itself: at dilation 1 it is torch's avg_pool1d/2d/3d."""
    for ceil, include in itertools.product((False, True), repeat=2):
        x = RNG.standard_normal((2, 3, 5, 7, 6)).astype(np.float32)
        ref = TF.avg_pool3d(torch.from_numpy(x), (3, 2, 3), (2, 1, 2), (1, 1, 0),
                            ceil_mode=ceil, count_include_pad=include).numpy()
        got = unfold_avg_pool(x, [3, 2, 3], [2, 1, 2], [[1, 1], [1, 1], [0, 0]], [1, 1, 1],
                              ceil, include)
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
        ref = TF.avg_pool1d(torch.from_numpy(x[:, :, 0, 0]), 3, 2, 1, ceil_mode=ceil,
                            count_include_pad=include).numpy()
        got = unfold_avg_pool(x[:, :, 0, 0], [3], [2], [[1, 1]], [1], ceil, include)
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    # and the dilated numpy kernel at dilation 1 as given explicitly is the undilated one
    attrs = _attrs([3, 2], [2, 1], [[1, 1], [1, 0]], [1, 1], True, False)
    x = RNG.standard_normal((1, 2, 6, 5)).astype(np.float32)
    np.testing.assert_array_equal(run_avg_pool(x, **attrs),
                                  run_avg_pool(x, **{**attrs, "dilation": None}))


# (kernel, stride, padding, dilation, x spatial shape): padding, stride and windows that
# ceil_mode runs past the padded input
CASES_2D = [
    ([3, 3], [1, 1], [[1, 1], [1, 1]], [2, 2], (7, 8)),
    ([3, 2], [2, 1], [[1, 1], [0, 1]], [2, 3], (9, 7)),
    ([2, 3], [2, 3], [[1, 0], [1, 1]], [3, 2], (8, 10)),
    ([3, 3], [3, 2], [[0, 1], [1, 0]], [1, 2], (10, 9)),
    ([4, 2], [2, 2], [[2, 1], [1, 1]], [2, 4], (11, 12)),
]


@pytest.mark.parametrize("ceil, include", list(itertools.product((False, True), repeat=2)))
@pytest.mark.parametrize("kernel, stride, padding, dilation, size", CASES_2D)
def test_avg_pool2d_with_dilation_matches_the_unfold_reference(kernel, stride, padding,
                                                               dilation, size, ceil, include):
    x = RNG.standard_normal((2, 3, *size)).astype(np.float32)
    args = (kernel, stride, padding, dilation, ceil, include)
    y = run_avg_pool(x, **_attrs(*args))
    np.testing.assert_allclose(y, unfold_avg_pool(x, *args), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y, onnxruntime_avg_pool(x, *args), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("ceil, include", list(itertools.product((False, True), repeat=2)))
@pytest.mark.parametrize("kernel, stride, padding, dilation, size", [
    ([3], [1], [[1, 1]], [2], (9,)),
    ([3], [2], [[1, 0]], [3], (10,)),
    ([2], [3], [[1, 1]], [4], (11,)),
    ([3, 2, 3], [2, 1, 2], [[1, 1], [1, 0], [0, 1]], [2, 3, 1], (7, 6, 8)),
    ([2, 3, 2], [1, 2, 3], [[1, 0], [1, 1], [1, 1]], [3, 2, 2], (8, 7, 9)),
])
def test_avg_pool1d_and_3d_with_dilation_match_torch_and_onnxruntime(kernel, stride, padding,
                                                                    dilation, size, ceil,
                                                                    include):
    x = RNG.standard_normal((2, 3, *size)).astype(np.float32)
    args = (kernel, stride, padding, dilation, ceil, include)
    y = run_avg_pool(x, **_attrs(*args))
    np.testing.assert_allclose(y, unfold_avg_pool(x, *args), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y, onnxruntime_avg_pool(x, *args), rtol=1e-5, atol=1e-6)


def test_count_include_pad_with_dilation_counts_the_taps_on_the_padding():
    """(1, 1, 7) of ones, kernel 3, dilation 2, padding 1, stride 3, ceil_mode: windows
    starting at -1, 2, 5 take taps {-1, 1, 3}, {2, 4, 6}, {5, 7, 9}. Taps on the explicit
    padding (-1, 7) count with count_include_pad; the one past it (9, ceil_mode's) never."""
    x = np.ones((1, 1, 7), np.float32)
    args = ([3], [3], [[1, 1]], [2], True)
    with_pad = run_avg_pool(x, **_attrs(*args, True))
    np.testing.assert_allclose(with_pad[0, 0], [2 / 3, 1, 1 / 2], rtol=1e-6)
    np.testing.assert_allclose(run_avg_pool(x, **_attrs(*args, False))[0, 0], [1, 1, 1])
    np.testing.assert_allclose(with_pad, onnxruntime_avg_pool(x, *args, True), rtol=1e-6)


@pytest.mark.parametrize("include", [False, True])
def test_a_window_whose_taps_all_miss_the_input_gives_zero(include):
    """kernel 2, dilation 3, padding 1 over a length of 2: the one window takes taps -1 and 2,
    both padding; onnxruntime gives 0 (no division by its zero count), not nan."""
    x = RNG.standard_normal((1, 2, 2)).astype(np.float32)
    args = ([2], [1], [[1, 1]], [3], False, include)
    y = run_avg_pool(x, **_attrs(*args))
    np.testing.assert_array_equal(y, np.zeros((1, 2, 1), np.float32))
    np.testing.assert_array_equal(y, onnxruntime_avg_pool(x, *args))


def test_a_nan_the_dilated_taps_step_over_is_not_read():
    """A nan between a window's taps leaves it finite; windows with a tap on it give nan."""
    x = RNG.standard_normal((1, 1, 6, 6)).astype(np.float32)
    x[0, 0, 2, 3] = np.nan
    args = ([2, 2], [1, 1], [[0, 0], [0, 0]], [2, 2], False, True)
    y = run_avg_pool(x, **_attrs(*args))
    ref = unfold_avg_pool(x, *args)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
    assert np.isnan(y).sum() == 4 and np.isfinite(y).sum() == 12
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)


def test_random_dilated_configurations_match_onnxruntime():
    """Seeded random 1-D, 2-D and 3-D configurations (at least 150 valid), every padding,
    stride and dilation up to 3 and both flags, windows that miss the input included: bit for
    bit."""
    rng = np.random.default_rng(43)
    checked = 0
    for _ in range(300):
        spatial = int(rng.integers(1, 4))
        size = [int(rng.integers(1, 9)) for _ in range(spatial)]
        kernel = [int(rng.integers(1, 5)) for _ in size]
        stride = [int(rng.integers(1, 4)) for _ in size]
        dilation = [int(rng.integers(1, 4)) for _ in size]
        padding = [[int(rng.integers(0, k // 2 + 1)) for _ in range(2)] for k in kernel]
        ceil, include = bool(rng.integers(2)), bool(rng.integers(2))
        if min(_out_len(n, k, s, *p, d, ceil)
               for n, k, s, p, d in zip(size, kernel, stride, padding, dilation)) < 1:
            continue  # the dilated window is larger than the padded input
        x = rng.standard_normal((2, 2, *size)).astype(np.float32)
        args = (kernel, stride, padding, dilation, ceil, include)
        y = run_avg_pool(x, **_attrs(*args))
        np.testing.assert_array_equal(y, onnxruntime_avg_pool(x, *args), err_msg=str(args))
        checked += 1
    assert checked >= 150, checked


@pytest.mark.parametrize("shape, kernel, stride, padding, dilation, ceil_mode, include", [
    ((2, 8, 56, 56), [3, 3], [1, 1], [[1, 1], [1, 1]], [1, 1], False, False),
    ((1, 16, 28, 28), [2, 2], [2, 2], [[0, 0], [0, 0]], [1, 1], False, True),
    ((1, 16, 29, 30), [5, 4], [2, 3], [[2, 1], [1, 2]], [1, 1], True, False),
    ((1, 4, 40), [9], [1], [[4, 4]], [1], False, True),
    ((1, 4, 9, 10, 11), [3, 2, 3], [1, 2, 2], [[1, 1], [0, 1], [1, 0]], [1, 1, 1], True, False),
    ((1, 2, 11, 11), [3, 3], [1, 1], [[2, 2], [2, 2]], [2, 2], True, True),
    ((1, 8, 14, 14), [7, 7], [7, 7], [[0, 0], [0, 0]], [1, 1], False, False),
    ((2, 3, 20, 18), [20, 18], [1, 1], [[0, 0], [0, 0]], [1, 1], False, False),
    ((1, 3, 12, 12), [9, 9], [2, 3], [[4, 1], [2, 3]], [1, 1], True, True),
], ids=["3x3", "2x2_by_2", "ceil", "1d", "3d", "dilated", "7x7_by_7", "whole", "wide_pads"])
def test_each_window_is_summed_in_onnxruntime_s_order(shape, kernel, stride, padding, dilation,
                                                      ceil_mode, include):
    """Values over six decades, so that the order of a window's sums shows: onnxruntime's
    AveragePool bit for bit, the taps added one after another in window order, where a pool
    has more outputs than taps (an add per tap) and fewer (a running sum per window, the last
    three cases)."""
    x = (RNG.standard_normal(shape) * 10.0 ** RNG.uniform(-3, 3, shape)).astype(np.float32)
    args = (kernel, stride, padding, dilation, ceil_mode, include)
    np.testing.assert_array_equal(run_avg_pool(x, **_attrs(*args)), onnxruntime_avg_pool(x, *args))
