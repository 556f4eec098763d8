"""qlinear_conv on the numpy backend: onnxruntime's QLinearConv (its CPU kernel, graph
optimizations off) bit for bit, over random convolutions and the ends of the integer ranges;
the integer sums exact where float32 alone would round them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx import helper, numpy_helper

from plugin_host.builder import GraphBuilder
from plugin_host.executor import Executor
from plugins.numpy_backend import NumpyBackend
from plugins.numpy_backend.qlinear_conv import make_integer_conv

from .test_glue import unoptimized_session


def codes(rng, dtype: str, shape, low=None, high=None) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min if low is None else low, (info.max if high is None else high)
                        + 1, shape).astype(dtype)


class Conv:
    """One qlinear_conv's inputs and attributes, as the ABI takes them."""

    def __init__(self, x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, bias, stride,
                 pads, dilation, groups):
        self.inputs = [x, np.float32(x_scale), x_zp, w, w_scale, w_zp, np.float32(y_scale), y_zp,
                       bias]
        self.attrs = {"stride": stride, "padding": pads, "dilation": dilation, "groups": groups}

    def graph(self, constant: bool = True):
        """The one-node graph (x given when the call runs; the rest constants, or inputs too
        when not ``constant``) and its feed."""
        names = ["x", "x_scale", "x_zero_point", "weight", "weight_scale", "weight_zero_point",
                 "y_scale", "y_zero_point", "bias"]
        b = GraphBuilder("qlinear_conv")
        feed, ins = {}, []
        for i, (name, value) in enumerate(zip(names, self.inputs)):
            if value is None:
                ins.append(None)
            elif i == 0 or not constant:
                value = np.asarray(value)
                ins.append(b.input(name, value.shape, str(value.dtype), "ANY"))
                feed[name] = value
            else:
                ins.append(b.constant(name, np.asarray(value)))
        b.output(b.op("qlinear_conv", *ins, name="node", **self.attrs), "y", "ANY")
        return b.build(), feed

    def numpy(self, constant: bool = True) -> np.ndarray:
        graph, feed = self.graph(constant)
        return Executor(graph, NumpyBackend()).run(feed)["y"]

    def onnxruntime(self) -> np.ndarray:
        """onnxruntime's QLinearConv of the same inputs (where the weight is uint8, an int8 x
        and y moved to uint8 with their zero points, which onnxruntime's kernel takes only so,
        and y moved back)."""
        x, xs, xzp, w, ws, wzp, ys, yzp, bias = self.inputs
        shifted = x.dtype == np.int8 and w.dtype == np.uint8
        if shifted:
            x, xzp, yzp = ((v.astype(np.int16) + 128).astype(np.uint8) for v in (x, xzp, yzp))
        names = ["x", "xs", "xzp", "w", "ws", "wzp", "ys", "yzp"] + (["b"] if bias is not None
                                                                    else [])
        values = [x, xs, xzp, w, ws, wzp, ys, yzp] + ([bias] if bias is not None else [])
        pads = self.attrs["padding"]
        node = helper.make_node(
            "QLinearConv", names, ["y"], strides=self.attrs["stride"],
            dilations=self.attrs["dilation"], group=self.attrs["groups"],
            pads=[p[0] for p in pads] + [p[1] for p in pads])
        graph = helper.make_graph(
            [node], "q", [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(
                x.dtype), None)],
            [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(yzp.dtype),
                                           None)],
            [numpy_helper.from_array(np.asarray(v), n) for n, v in zip(names[1:], values[1:])])
        y = unoptimized_session(graph).run(None, {"x": x})[0]
        return (y.astype(np.int16) - 128).astype(np.int8) if shifted else y


def random_conv(rng, x_dtype: str, w_dtype: str, *, per_channel: bool, bias: bool,
                spatial: int = 2, groups: int = 1, small_weights: bool = False) -> Conv:
    channels, out = 2 * groups * int(rng.integers(1, 4)), groups * int(rng.integers(1, 4))
    kernel = [int(k) for k in rng.integers(1, 4, spatial)]
    size = [int(s) for s in rng.integers(4, 9, spatial)]
    stride = [int(s) for s in rng.integers(1, 3, spatial)]
    dilation = [int(d) for d in rng.integers(1, 3, spatial)]
    pads = [[int(a), int(b)] for a, b in rng.integers(0, 2, (spatial, 2))]
    lanes = out if per_channel else ()
    low, high = (-64, 63) if small_weights else (None, None)
    w = codes(rng, w_dtype, (out, channels // groups, *kernel), low, high)
    w_zp = np.full(lanes, codes(rng, w_dtype, (), low, high), w_dtype)  # onnxruntime: one
    return Conv(codes(rng, x_dtype, (2, channels, *size)), rng.uniform(0.005, 0.05),
                codes(rng, x_dtype, ()), w,
                rng.uniform(0.001, 0.01, lanes).astype(np.float32), w_zp,
                rng.uniform(0.02, 0.2), codes(rng, x_dtype, ()),
                codes(rng, "int32", out, -20000, 20000) if bias else None,
                stride, pads, dilation, groups)


#: x, weight: u8 x u8 and s8 x s8 are exact in onnxruntime on every x86-64 CPU; u8 x s8 with
#: weights within [-64, 63] (its kernel saturates pairs of products at int16 without VNNI);
#: s8 x u8, which onnxruntime's kernel lacks, against the same sums of x moved to uint8
PAIRS = [("uint8", "uint8", False), ("int8", "int8", False), ("uint8", "int8", True),
         ("int8", "uint8", False)]


@pytest.mark.parametrize("x_dtype, w_dtype, small", PAIRS, ids=["u8u8", "s8s8", "u8s8", "s8u8"])
def test_qlinear_conv_is_onnxruntimes_bit_for_bit(x_dtype, w_dtype, small):
    """Random 1-D, 2-D and 3-D convolutions, grouped, strided, dilated, padded, per tensor and
    per channel, with and without a bias; the weight constant and given when the call runs."""
    rng = np.random.default_rng(21)
    for trial in range(24):
        conv = random_conv(rng, x_dtype, w_dtype, per_channel=trial % 2 == 0,
                           bias=trial % 3 != 0, spatial=1 + trial % 3, groups=1 + trial % 2,
                           small_weights=small)
        want = conv.onnxruntime()
        for constant in (True, False):
            got = conv.numpy(constant)
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want, err_msg=f"trial {trial}")


@pytest.mark.parametrize("groups", [1, 4])
def test_sums_past_float32s_exact_integers_are_exact(groups):
    """Every product 255 * 255 over 1,152 inputs per group: sums past 2**24, which one float32
    conv would round, cut into runs; equal to onnxruntime's (and, before requantization, to
    torch's float64 conv)."""
    rng = np.random.default_rng(22)
    channels = 128 * groups
    x = np.where(rng.random((1, channels, 5, 5)) < 0.9, 255, 0).astype(np.uint8)
    w = np.where(rng.random((2 * groups, 128, 3, 3)) < 0.9, 255, 0).astype(np.uint8)
    conv = Conv(x, 0.01, np.array(0, np.uint8), w, np.float32(1e-4), np.array(0, np.uint8),
                200.0, np.array(3, np.uint8), None, [1, 1], [[1, 1], [1, 1]], [1, 1], groups)
    sums = make_integer_conv(w, np.array(0, np.uint8), stride=[1, 1],
                             padding=[[1, 1], [1, 1]], dilation=[1, 1], groups=groups,
                             where="n")(x, np.array(0, np.uint8))
    exact = torch.nn.functional.conv2d(torch.from_numpy(x).double(), torch.from_numpy(w).double(),
                                       padding=1, groups=groups)
    assert exact.max() > 2 ** 24
    np.testing.assert_array_equal(sums, exact.numpy().astype(np.int64))
    np.testing.assert_array_equal(conv.numpy(), conv.onnxruntime())


def test_sums_wrap_as_int32():
    """Sums past 2**31 wrap as onnxruntime's int32 accumulation (two's complement), bias
    included."""
    x = np.full((1, 4000, 3, 3), 255, np.uint8)
    w = np.full((1, 4000, 3, 3), 255, np.uint8)
    conv = Conv(x, 1.0, np.array(0, np.uint8), w, np.float32(1.0), np.array(0, np.uint8), 1e9,
                np.array(100, np.uint8), np.array([2 ** 31 - 1], np.int32), [1, 1],
                [[0, 0], [0, 0]], [1, 1], 1)
    total = 255 * 255 * 4000 * 9 + 2 ** 31 - 1
    wrapped = (total + 2 ** 31) % 2 ** 32 - 2 ** 31
    want = conv.onnxruntime()
    np.testing.assert_array_equal(conv.numpy(), want)
    assert want.ravel()[0] == np.clip(np.round(np.float32(wrapped) / np.float32(1e9)) + 100, 0,
                                      255)


def test_the_scale_is_x_scale_times_w_scale_over_y_scale_in_float32():
    """Scales whose float32 (x_scale * w_scale) / y_scale and x_scale * (w_scale / y_scale)
    differ in the last bit, and a sum for every integer from -255 to 255 (a 1x1 conv of one
    channel by weight 1), where the two orders round some output to different codes:
    onnxruntime's order, bit for bit."""
    rng = np.random.default_rng(23)
    x = np.arange(256, dtype=np.uint8).reshape(1, 1, 16, 16)
    w = np.ones((1, 1, 1, 1), np.uint8)
    xs, ws = rng.uniform(0.01, 0.1, (2, 20_000)).astype(np.float32)
    ys = (xs * ws / rng.uniform(0.2, 0.5, 20_000)).astype(np.float32)  # outputs within range
    ours, other = (xs * ws) / ys, xs * (ws / ys)
    k = np.arange(1, 256, dtype=np.float32)
    apart = (np.round(k * ours[:, None]) != np.round(k * other[:, None])).any(axis=1)
    assert apart.any()  # the premise: some scales round some sum to two codes
    xs, ws, ys = (v[np.flatnonzero(apart)[0]] for v in (xs, ws, ys))
    for zp in (0, 255):
        conv = Conv(x, xs, np.array(zp, np.uint8), w, ws, np.array(0, np.uint8), ys,
                    np.array(128, np.uint8), None, [1, 1], [[0, 0], [0, 0]], [1, 1], 1)
        np.testing.assert_array_equal(conv.numpy(), conv.onnxruntime())
