"""Conv / ConvTranspose against torch: the cases of tinygrad's test_nn.py plus layouts and
the prepared (make_conv) path. Tolerance atol=rtol=1e-4 (float32, K up to 1296 products)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from plugins import nn
from plugins.nn import functional as fn

TOL = dict(atol=1e-4, rtol=1e-4)


def t(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a))


def _test_conv(rng, tiny_conv, torch_conv, BS, C1, DIMS, C2, K, S, P, D=1):
    layer = tiny_conv(C1, C2, kernel_size=K, stride=S, padding=P, dilation=D)
    with torch.no_grad():
        torch_layer = torch_conv(C1, C2, kernel_size=K, stride=S, padding=P, dilation=D).eval()
        torch_layer.weight[:] = t(layer.weight)
        torch_layer.bias[:] = t(layer.bias)
        x = rng.uniform(-1, 1, (BS, C1, *DIMS)).astype(np.float32)
        z = layer(x)
        torch_z = torch_layer(t(x)).numpy()
    assert z.dtype == np.float32 and z.shape == torch_z.shape
    np.testing.assert_allclose(z, torch_z, **TOL)


def test_conv1d(rng):
    _test_conv(rng, nn.Conv1d, torch.nn.Conv1d, BS=4, C1=16, DIMS=[224 // 4], C2=64, K=7, S=2, P=1)


def test_conv2d(rng):
    _test_conv(rng, nn.Conv2d, torch.nn.Conv2d, BS=4, C1=16, DIMS=[224 // 4, 224 // 4], C2=64, K=7,
               S=2, P=1)


def test_conv1d_same_padding(rng):
    _test_conv(rng, nn.Conv1d, torch.nn.Conv1d, BS=8, C1=3, DIMS=[32], C2=16, K=3, S=1, P="same")


def test_conv2d_same_padding_odd_input(rng):
    _test_conv(rng, nn.Conv2d, torch.nn.Conv2d, BS=16, C1=16, DIMS=[29, 31], C2=32, K=5, S=1,
               P="same")


def test_conv2d_same_padding_large_kernel(rng):
    _test_conv(rng, nn.Conv2d, torch.nn.Conv2d, BS=16, C1=16, DIMS=[28, 33], C2=32, K=9, S=1,
               P="same")


def test_conv2d_same_padding_with_dilation(rng):
    _test_conv(rng, nn.Conv2d, torch.nn.Conv2d, BS=16, C1=3, DIMS=[28, 28], C2=32, K=3, S=1,
               P="same", D=3)


@pytest.mark.filterwarnings("ignore:Using padding=.same. with even kernel")
def test_conv2d_same_padding_even_kernel_puts_extra_pixel_after(rng):
    # kernel 4, dilation 1: 3 pixels in total, 1 before and 2 after (torch's choice too)
    layer = nn.Conv2d(2, 3, (4, 2), padding="SAME")
    assert layer.abi_attrs()["padding"] == [[1, 2], [0, 1]]
    x = rng.standard_normal((1, 2, 7, 6), dtype=np.float32)
    ref = F.conv2d(t(x), t(layer.weight), t(layer.bias), padding="same").numpy()
    assert layer(x).shape == x.shape[:1] + (3,) + x.shape[2:]
    np.testing.assert_allclose(layer(x), ref, **TOL)


def test_conv_transpose1d(rng):
    _test_conv(rng, nn.ConvTranspose1d, torch.nn.ConvTranspose1d, BS=4, C1=16, DIMS=[224 // 4],
               C2=64, K=7, S=2, P=1)


def test_conv_transpose2d(rng):
    _test_conv(rng, nn.ConvTranspose2d, torch.nn.ConvTranspose2d, BS=4, C1=16,
               DIMS=[224 // 4, 224 // 4], C2=64, K=7, S=2, P=1)


def test_conv_transpose2d_output_padding_groups_dilation(rng):
    layer = nn.ConvTranspose2d(6, 4, (3, 2), stride=(2, 3), padding=(1, 0), output_padding=(1, 2),
                               dilation=(2, 1), groups=2)
    assert layer.weight.shape == (6, 2, 3, 2)
    x = rng.standard_normal((2, 6, 5, 4), dtype=np.float32)
    ref = F.conv_transpose2d(t(x), t(layer.weight), t(layer.bias), stride=(2, 3), padding=(1, 0),
                             output_padding=(1, 2), groups=2, dilation=(2, 1)).numpy()
    np.testing.assert_allclose(layer(x), ref, **TOL)


def test_conv3d_from_kernel_rank(rng):
    layer = nn.Conv2d(4, 6, (3, 2, 3), stride=(1, 2, 1), padding=(1, 0, 2), dilation=(2, 1, 1),
                      groups=2)
    x = rng.standard_normal((2, 4, 7, 6, 5), dtype=np.float32)
    ref = F.conv3d(t(x), t(layer.weight), t(layer.bias), stride=(1, 2, 1), padding=(1, 0, 2),
                   dilation=(2, 1, 1), groups=2).numpy()
    np.testing.assert_allclose(layer(x), ref, **TOL)


def test_conv_transpose3d_kernel(rng):
    w = rng.standard_normal((4, 3, 2, 3, 2), dtype=np.float32)
    b = rng.standard_normal(3, dtype=np.float32)
    x = rng.standard_normal((1, 4, 3, 4, 5), dtype=np.float32)
    y = fn.conv_transpose(x, w, b, stride=(2, 1, 2), padding=(0, 1, 1), output_padding=(1, 0, 0),
                          dilation=(1, 2, 1), groups=1)
    ref = F.conv_transpose3d(t(x), t(w), t(b), stride=(2, 1, 2), padding=(0, 1, 1),
                             output_padding=(1, 0, 0), dilation=(1, 2, 1)).numpy()
    np.testing.assert_allclose(y, ref, **TOL)


@pytest.mark.parametrize("padding, torch_pad", [
    ((1, 2), (2, 2, 1, 1)),                # per axis (h, w), symmetric
    ((0, 1, 2, 3), (0, 1, 2, 3)),          # per side, tinygrad / F.pad order: w first
    (2, (2, 2, 2, 2)),
])
def test_conv2d_padding_forms(rng, padding, torch_pad):
    layer = nn.Conv2d(3, 5, 3, padding=padding)
    x = rng.standard_normal((2, 3, 6, 7), dtype=np.float32)
    ref = F.conv2d(F.pad(t(x), torch_pad), t(layer.weight), t(layer.bias)).numpy()
    np.testing.assert_allclose(layer(x), ref, **TOL)


def test_grouped_and_depthwise(rng):
    for groups, cin, cout in ((2, 4, 6), (8, 8, 8), (8, 8, 16)):
        layer = nn.Conv2d(cin, cout, 3, stride=2, padding=1, groups=groups)
        x = rng.standard_normal((3, cin, 9, 8), dtype=np.float32)
        ref = F.conv2d(t(x), t(layer.weight), t(layer.bias), stride=2, padding=1,
                       groups=groups).numpy()
        np.testing.assert_allclose(layer(x), ref, **TOL)


@pytest.mark.parametrize("channels, kernel, stride, padding, dilation", [
    (16, (3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1)),    # MobileNet's strided depthwise layer
    (32, (5, 5), (1, 1), ((2, 2), (2, 2)), (1, 1)),    # EfficientNet's 5x5
    (24, (3, 3), (1, 2), ((0, 1), (2, 0)), (2, 1)),    # uneven pads, dilation, two strides
    (20, (3,), (1,), ((0, 0),), (1,)),                 # 1-D, unpadded: read from the input
    (16, (3, 3, 3), (1, 1, 1), ((1, 1),) * 3, (1, 1, 1))])
def test_depthwise_runs_tap_by_tap_as_torch(channels, kernel, stride, padding, dilation, rng):
    """A depthwise conv of 16 channels or more multiplies and adds each tap's window in turn
    (conv.py's _depthwise): against torch, over inputs of either memory layout, repeated and
    at two shapes (its plan and buffer are kept per shape), earlier outputs left alone."""
    w = rng.standard_normal((channels, 1, *kernel), dtype=np.float32)
    b = rng.standard_normal(channels, dtype=np.float32)
    run = fn.make_conv(w, b, stride=stride, padding=padding, dilation=dilation, groups=channels)
    f = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[len(kernel)]
    pad = [p for pair in reversed(padding) for p in pair]
    outs = []
    for shape in ((2, channels, *[9] * len(kernel)), (1, channels, *[6] * len(kernel))) * 2:
        x = rng.standard_normal(shape, dtype=np.float32)
        last = np.ascontiguousarray(np.moveaxis(x, 1, -1))
        ref = f(F.pad(t(x), pad), t(w), t(b), stride=stride, dilation=dilation,
                groups=channels).numpy()
        for given in (x, np.moveaxis(last, -1, 1)):
            y = run(given)
            np.testing.assert_allclose(y, ref, **TOL)
            outs.append((y, ref))
    for y, ref in outs:
        np.testing.assert_allclose(y, ref, **TOL)
    without = fn.make_conv(w, None, stride=stride, padding=padding, dilation=dilation,
                           groups=channels)
    ref = f(F.pad(t(x), pad), t(w), None, stride=stride, dilation=dilation, groups=channels)
    np.testing.assert_allclose(without(x), ref.numpy(), **TOL)


def test_no_bias_and_pointwise(rng):
    layer = nn.Conv2d(8, 5, 1, bias=False)
    assert layer.bias is None and layer.abi_tensors() == {"weight": layer.weight, "bias": None}
    x = rng.standard_normal((2, 8, 5, 6), dtype=np.float32)
    np.testing.assert_allclose(layer(x), F.conv2d(t(x), t(layer.weight)).numpy(), **TOL)
    layer = nn.Conv2d(8, 5, 1)  # pointwise fast path with bias, and a channels-last input
    xl = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    ref = F.conv2d(t(x), t(layer.weight), t(layer.bias)).numpy()
    np.testing.assert_allclose(layer(xl), ref, **TOL)
    np.testing.assert_allclose(layer(x), ref, **TOL)


def test_any_input_memory_layout(rng):
    layer = nn.Conv2d(6, 4, 3, stride=1, padding=0)
    base = rng.standard_normal((2, 6, 11, 13), dtype=np.float32)
    ref = F.conv2d(t(base), t(layer.weight), t(layer.bias)).numpy()
    channels_last = np.ascontiguousarray(base.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    strided = np.zeros((2, 6, 22, 13), np.float32)
    strided[:, :, ::2] = base
    flipped = base[:, ::-1].copy()[:, ::-1]
    for x in (base, channels_last, strided[:, :, ::2], flipped):
        np.testing.assert_allclose(layer(x), ref, **TOL)


def test_benchmark_chain_shapes(rng):
    """The benchmark's vision tower (DESIGN.md section 4), prepared once, against torch."""
    chans = [12, 32, 64, 128, 256]
    x = rng.standard_normal((1, 12, 128, 256), dtype=np.float32)
    y, ty = x, t(x)
    for cin, cout in zip(chans, chans[1:]):
        layer = nn.Conv2d(cin, cout, 3, stride=2, padding=1)
        run = fn.make_conv(layer.weight, layer.bias, **layer.abi_attrs())
        y = run(y)
        ty = F.conv2d(ty, t(layer.weight), t(layer.bias), stride=2, padding=1)
        np.testing.assert_allclose(y, ty.numpy(), **TOL)
    last = nn.Conv2d(256, 32, 1)
    y = fn.make_conv(last.weight, last.bias, **last.abi_attrs())(y)
    ref = F.conv2d(ty, t(last.weight), t(last.bias)).numpy()
    assert y.shape == (1, 32, 8, 16)
    np.testing.assert_allclose(y, ref, **TOL)


def test_make_conv_reuses_buffers_correctly(rng):
    w = rng.standard_normal((5, 3, 3, 3), dtype=np.float32)
    b = rng.standard_normal(5, dtype=np.float32)
    run = fn.make_conv(w, b, stride=(1, 2), padding=((1, 0), (2, 1)), dilation=(1, 1), groups=1)
    shapes = [(2, 3, 8, 9), (1, 3, 5, 5), (2, 3, 8, 9), (3, 3, 4, 7), (1, 3, 6, 6), (2, 3, 8, 9)]
    outs = []
    for shape in shapes:
        x = rng.standard_normal(shape, dtype=np.float32)
        ref = F.conv2d(F.pad(t(x), (2, 1, 1, 0)), t(w), t(b), stride=(1, 2)).numpy()
        y = run(x)
        np.testing.assert_allclose(y, ref, **TOL)
        outs.append((y, ref))
    for y, ref in outs:  # earlier outputs are not overwritten by later calls
        np.testing.assert_allclose(y, ref, **TOL)


def test_make_conv_snapshots_weights(rng):
    w = rng.standard_normal((4, 2, 3), dtype=np.float32)
    x = rng.standard_normal((1, 2, 10), dtype=np.float32)
    run = fn.make_conv(w, None, stride=(1,), padding=((1, 1),), dilation=(1,), groups=1)
    before = run(x)
    w[:] = 0
    np.testing.assert_array_equal(run(x), before)


def test_make_conv_threads(rng):
    w = rng.standard_normal((8, 4, 3, 3), dtype=np.float32)
    run = fn.make_conv(w, None, stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1, 1),
                       groups=1)
    xs = [rng.standard_normal((1, 4, 40, 40), dtype=np.float32) for _ in range(4)]
    refs = [F.conv2d(t(x), t(w), padding=1).numpy() for x in xs]
    errors = []

    def work(i):
        for _ in range(20):
            if not np.allclose(run(xs[i]), refs[i], **TOL):
                errors.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []


def test_make_conv_transpose_repeat(rng):
    w = rng.standard_normal((4, 3, 3, 3), dtype=np.float32)
    b = rng.standard_normal(3, dtype=np.float32)
    run = fn.make_conv_transpose(w, b, stride=(2, 2), padding=(1, 1), output_padding=(1, 0),
                                 dilation=(1, 1), groups=1)
    for shape in ((1, 4, 5, 5), (2, 4, 3, 6)):
        x = rng.standard_normal(shape, dtype=np.float32)
        ref = F.conv_transpose2d(t(x), t(w), t(b), stride=2, padding=1,
                                 output_padding=(1, 0)).numpy()
        np.testing.assert_allclose(run(x), ref, **TOL)


def test_empty_batch(rng):
    layer = nn.Conv2d(3, 4, 3, padding=1)
    y = layer(np.zeros((0, 3, 5, 5), np.float32))
    assert y.shape == (0, 4, 5, 5) and y.dtype == np.float32
    tl = nn.ConvTranspose2d(3, 4, 3, stride=2)
    assert tl(np.zeros((0, 3, 5, 5), np.float32)).shape == (0, 4, 11, 11)
