"""Property tests: random shapes and hyper-parameters against torch (the live reference).

Each test draws a case and a seed; the numpy data comes from ``default_rng(seed)``. Tolerance
atol=rtol=1e-4 (float32). ``max_examples`` is kept small so the suite stays fast.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from plugins import nn
from plugins.nn import functional as fn

TOL = dict(atol=1e-4, rtol=1e-4)
SETTINGS = settings(max_examples=35, deadline=None)
seeds = st.integers(0, 2**32 - 1)


def t(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(a, order="C"))  # (ascontiguousarray would make 0-d 1-d)


def _degenerate(x: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """What a normalization over single values gives: x - mean == 0, so just the bias.

    torch refuses these inputs ("Expected more than 1 value per channel"); the kernels here
    return the finite, well-defined result instead (only BatchNorm *training* is refused, where
    the running-variance correction divides by zero).
    """
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return np.broadcast_to(np.zeros((), np.float32) if bias is None else bias.reshape(shape),
                           x.shape)


def _data(rng: np.random.Generator, shape, scale=1.0, shift=0.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale + shift).astype(np.float32)


def _norm_tol(groups: np.ndarray, weight: np.ndarray | None = None) -> dict:
    """TOL widened by the conditioning of a normalization: the input's own float32 rounding
    (an ulp of its largest value) divided by the smallest group standard deviation.

    A group of a few values that happen to lie close together, far from zero (scale 0.1,
    shift 3), has a tiny spread, and any two correct float32 implementations then differ by
    about ``ulp(max|x|) / std`` in normalized units -- times the affine weight.
    """
    g = groups.astype(np.float64)
    std = g.std(axis=-1).min() if g.shape[-1] > 1 else np.inf
    amp = np.finfo(np.float32).eps * np.abs(g).max() / max(std, 1e-30)
    w = 1.0 if weight is None else max(1.0, float(np.abs(weight).max()))
    return dict(atol=TOL["atol"] + 8 * amp * w, rtol=TOL["rtol"])


def _maybe_channels_last(rng: np.random.Generator, x: np.ndarray) -> np.ndarray:
    """The same values, half the time stored channels-last (as conv outputs are)."""
    if rng.random() < 0.5:
        return x
    return np.moveaxis(np.ascontiguousarray(np.moveaxis(x, 1, -1)), -1, 1)


@st.composite
def conv_cases(draw):
    nd = draw(st.sampled_from([1, 2, 2, 3]))
    groups = draw(st.integers(1, 3))
    cg, og = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    kernel = tuple(draw(st.integers(1, 4)) for _ in range(nd))
    dilation = tuple(draw(st.integers(1, 2)) for _ in range(nd))
    form = draw(st.sampled_from(["int", "axis", "side", "same"]))
    if form == "same":
        stride, padding = (1,) * nd, draw(st.sampled_from(["same", "SAME", "Same"]))
    else:
        stride = tuple(draw(st.integers(1, 3)) for _ in range(nd))
        n = {"int": 1, "axis": nd, "side": 2 * nd}[form]
        pads = tuple(draw(st.integers(0, 3)) for _ in range(n))
        padding = pads[0] if form == "int" else pads
    spatial = tuple(draw(st.integers(1, 9)) for _ in range(nd))
    return dict(nd=nd, groups=groups, cg=cg, og=og, kernel=kernel, dilation=dilation,
                stride=stride, padding=padding, spatial=spatial, batch=draw(st.integers(1, 2)),
                bias=draw(st.booleans()))


@SETTINGS
@given(conv_cases(), seeds)
def test_conv_matches_torch(case, seed):
    rng = np.random.default_rng(seed)
    nd, groups = case["nd"], case["groups"]
    cin, cout = case["cg"] * groups, case["og"] * groups
    layer = nn.Conv2d(cin, cout, case["kernel"], case["stride"], case["padding"],
                      case["dilation"], groups, case["bias"], rng=rng)
    pairs = fn.resolve_padding(case["padding"], case["kernel"], case["stride"],
                               case["dilation"])
    padded = [s + b + a for s, (b, a) in zip(case["spatial"], pairs)]
    if any(p < d * (k - 1) + 1 for p, d, k in zip(padded, case["dilation"], case["kernel"])):
        return  # empty output: a refusal, covered in test_refusals
    x = _data(rng, (case["batch"], cin) + case["spatial"])
    torch_pad = [v for b, a in reversed(pairs) for v in (b, a)]
    conv = (F.conv1d, F.conv2d, F.conv3d)[nd - 1]
    bias = None if layer.bias is None else t(layer.bias)
    ref = conv(F.pad(t(x), torch_pad), t(layer.weight), bias, stride=case["stride"],
               dilation=case["dilation"], groups=groups).numpy()
    y = layer(_maybe_channels_last(rng, x))
    assert y.shape == ref.shape and y.dtype == np.float32
    np.testing.assert_allclose(y, ref, **TOL)
    if isinstance(case["padding"], str):  # our 'same' is torch's 'same'
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            same = conv(t(x), t(layer.weight), bias, padding="same", dilation=case["dilation"],
                        groups=groups).numpy()
        np.testing.assert_allclose(y, same, **TOL)
    run = fn.make_conv(layer.weight, layer.bias, **layer.abi_attrs())
    x2 = _data(rng, x.shape)
    ref2 = conv(F.pad(t(x2), torch_pad), t(layer.weight), bias, stride=case["stride"],
                dilation=case["dilation"], groups=groups).numpy()
    for _ in range(2):  # the prepared kernel, twice on fresh inputs (reused buffers)
        np.testing.assert_allclose(run(x), ref, **TOL)
        np.testing.assert_allclose(run(x2), ref2, **TOL)


@st.composite
def conv_transpose_cases(draw):
    nd = draw(st.sampled_from([1, 2]))
    groups = draw(st.integers(1, 3))
    stride = tuple(draw(st.integers(1, 3)) for _ in range(nd))
    dilation = tuple(draw(st.integers(1, 2)) for _ in range(nd))
    out_pad = tuple(draw(st.integers(0, max(s, d) - 1)) for s, d in zip(stride, dilation))
    return dict(nd=nd, groups=groups, cg=draw(st.integers(1, 3)), og=draw(st.integers(1, 3)),
                kernel=tuple(draw(st.integers(1, 4)) for _ in range(nd)), stride=stride,
                dilation=dilation, output_padding=out_pad,
                padding=tuple(draw(st.integers(0, 3)) for _ in range(nd)),
                spatial=tuple(draw(st.integers(1, 6)) for _ in range(nd)),
                batch=draw(st.integers(1, 2)), bias=draw(st.booleans()))


@SETTINGS
@given(conv_transpose_cases(), seeds)
def test_conv_transpose_matches_torch(case, seed):
    rng = np.random.default_rng(seed)
    nd, groups = case["nd"], case["groups"]
    cin, cout = case["cg"] * groups, case["og"] * groups
    out = [(s - 1) * st_ - 2 * p + d * (k - 1) + op + 1 for s, st_, p, d, k, op in zip(
        case["spatial"], case["stride"], case["padding"], case["dilation"], case["kernel"],
        case["output_padding"])]
    if min(out) < 1:
        return  # empty output: a refusal, covered in test_refusals
    layer = nn.ConvTranspose2d(cin, cout, case["kernel"], case["stride"], case["padding"],
                               case["output_padding"], case["dilation"], groups, case["bias"],
                               rng=rng)
    x = _data(rng, (case["batch"], cin) + case["spatial"])
    convt = (F.conv_transpose1d, F.conv_transpose2d)[nd - 1]
    ref = convt(t(x), t(layer.weight), None if layer.bias is None else t(layer.bias),
                stride=case["stride"], padding=case["padding"],
                output_padding=case["output_padding"], groups=groups,
                dilation=case["dilation"]).numpy()
    y = layer(_maybe_channels_last(rng, x))
    assert y.shape == ref.shape == (case["batch"], cout, *out)
    np.testing.assert_allclose(y, ref, **TOL)


shapes_nc = st.tuples(st.integers(1, 3), st.integers(1, 6)).flatmap(
    lambda nc: st.lists(st.integers(1, 5), min_size=0, max_size=3).map(lambda s: nc + tuple(s)))
scales = st.sampled_from([(1.0, 0.0), (0.1, 3.0), (10.0, -5.0)])


@SETTINGS
@given(shapes_nc, st.integers(1, 3), st.booleans(), scales, seeds)
def test_group_norm_matches_torch(shape, groups, affine, scale, seed):
    rng = np.random.default_rng(seed)
    shape = (shape[0], shape[1] * groups) + shape[2:]
    c = shape[1]
    x = _data(rng, shape, *scale)
    w, b = (_data(rng, c), _data(rng, c)) if affine else (None, None)
    if np.prod(shape[1:]) == groups:
        ref = _degenerate(x, b)
    else:
        ref = F.group_norm(t(x), groups, None if w is None else t(w),
                           None if b is None else t(b), eps=1e-5).numpy()
    np.testing.assert_allclose(fn.group_norm(x, w, b, num_groups=groups, eps=1e-5), ref,
                               **_norm_tol(x.reshape(shape[0], groups, -1), w))


@SETTINGS
@given(shapes_nc.filter(lambda s: len(s) >= 3), st.booleans(), scales, seeds)
def test_instance_norm_matches_torch(shape, affine, scale, seed):
    rng = np.random.default_rng(seed)
    x = _data(rng, shape, *scale)
    layer = nn.InstanceNorm(shape[1], affine=affine)
    if affine:
        layer.weight, layer.bias = _data(rng, shape[1]), _data(rng, shape[1])
    if np.prod(shape[2:]) == 1:
        ref = _degenerate(x, layer.bias)
    else:
        ref = F.instance_norm(t(x), weight=None if not affine else t(layer.weight),
                              bias=None if not affine else t(layer.bias), eps=1e-5).numpy()
    np.testing.assert_allclose(layer(_maybe_channels_last(rng, x)), ref,
                               **_norm_tol(x.reshape(shape[0], shape[1], -1), layer.weight))


@SETTINGS
@given(st.lists(st.integers(1, 6), min_size=1, max_size=4), st.data(), st.booleans(), scales,
       seeds)
def test_layer_norm_matches_torch(shape, data, affine, scale, seed):
    rng = np.random.default_rng(seed)
    k = data.draw(st.integers(1, len(shape)))
    ns = tuple(shape[len(shape) - k:])
    layer = nn.LayerNorm(ns, eps=1e-5, elementwise_affine=affine)
    if affine:
        layer.weight, layer.bias = _data(rng, ns), _data(rng, ns)
    x = _data(rng, shape, *scale)
    ref = F.layer_norm(t(x), ns, None if not affine else t(layer.weight),
                       None if not affine else t(layer.bias), eps=1e-5).numpy()
    np.testing.assert_allclose(layer(x), ref,
                               **_norm_tol(x.reshape(-1, int(np.prod(ns))), layer.weight))


@SETTINGS
@given(st.tuples(st.integers(1, 3), st.integers(1, 6), st.integers(1, 5), st.integers(1, 5)),
       scales, seeds)
def test_layer_norm2d_matches_torch(shape, scale, seed):
    rng = np.random.default_rng(seed)
    c = shape[1]
    layer = nn.LayerNorm2d(c)
    layer.weight, layer.bias = _data(rng, c), _data(rng, c)
    x = _data(rng, shape, *scale)
    ref = F.layer_norm(t(x).permute(0, 2, 3, 1), (c,), t(layer.weight), t(layer.bias),
                       eps=1e-5).permute(0, 3, 1, 2).numpy()
    np.testing.assert_allclose(layer(_maybe_channels_last(rng, x)), ref,
                               **_norm_tol(np.moveaxis(x, 1, -1), layer.weight))


@SETTINGS
@given(st.lists(st.integers(1, 6), min_size=1, max_size=4), st.booleans(), scales, seeds)
def test_rms_norm_matches_torch(shape, affine, scale, seed):
    rng = np.random.default_rng(seed)
    x = _data(rng, shape, *scale)
    w = _data(rng, shape[-1]) if affine else None
    tx = t(x)
    ref = tx * torch.rsqrt(tx.pow(2).mean(-1, keepdim=True) + 1e-6)
    if affine:
        ref = ref * t(w)
    np.testing.assert_allclose(fn.rms_norm(x, w, eps=1e-6), ref.numpy(), **TOL)


@SETTINGS
@given(shapes_nc, st.booleans(), st.booleans(), scales, seeds)
def test_batchnorm_matches_torch(shape, training, track, scale, seed):
    rng = np.random.default_rng(seed)
    c = shape[1]
    if training and np.prod(shape) - c <= 0:
        return  # one value per channel: refused, covered in test_refusals
    bn = nn.BatchNorm(c, track_running_stats=track, momentum=0.2)
    bn.weight, bn.bias = _data(rng, c), _data(rng, c)
    tbn = torch.nn.BatchNorm1d(c, track_running_stats=track, momentum=0.2)
    tbn.train(training)
    with torch.no_grad():
        tbn.weight[:], tbn.bias[:] = t(bn.weight), t(bn.bias)
        if track:
            bn.running_mean = _data(rng, c)
            bn.running_var = rng.uniform(0.1, 3, c).astype(np.float32)
            tbn.running_mean[:], tbn.running_var[:] = t(bn.running_mean), t(bn.running_var)
        x = _data(rng, shape, *scale)
        if np.prod(shape) == c and not track:  # batch statistics of single values
            ref = _degenerate(x, bn.bias)
        else:  # torch's BatchNorm1d takes (N, C) or (N, C, L): flatten the spatial axes
            ref = tbn(t(x).reshape(shape[0], c, -1)).reshape(shape).numpy()
    centered = training or not track  # batch statistics: as conditioned as the other norms
    tol = _norm_tol(np.moveaxis(x, 1, 0).reshape(c, -1), bn.weight) if centered else TOL
    np.testing.assert_allclose(bn(_maybe_channels_last(rng, x), training=training), ref, **tol)
    if track:
        np.testing.assert_allclose(bn.running_mean, tbn.running_mean.numpy(), **TOL)
        np.testing.assert_allclose(bn.running_var, tbn.running_var.numpy(), **TOL)


@SETTINGS
@given(st.lists(st.integers(0, 4), min_size=0, max_size=3), st.integers(1, 9), seeds)
def test_embedding_valid_or_refused(shape, vocab, seed):
    """Every in-range lookup equals torch's; any out-of-range index refuses the whole call."""
    rng = np.random.default_rng(seed)
    layer = nn.Embedding(vocab, 3, rng=rng)
    idx = rng.integers(-2, vocab + 2, shape)
    bad = (idx < 0) | (idx >= vocab)
    if bad.any():
        try:
            layer(idx)
        except IndexError as e:  # IndexRangeError is an IndexError
            assert e.positions == [tuple(p) for p in np.argwhere(bad)]
            assert e.values == idx[bad].tolist()
        else:
            raise AssertionError("out-of-range index accepted")
    else:
        ref = torch.nn.functional.embedding(t(idx), t(layer.weight)).numpy()
        np.testing.assert_array_equal(layer(idx), ref)
