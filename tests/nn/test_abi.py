"""The interface the host's graph builder relies on: exports, abi_op / abi_attrs /
abi_tensors, initial parameters, and "kernel(*data, *abi_tensors, **abi_attrs) == layer(...)"."""

from __future__ import annotations

import numpy as np
import pytest

from plugins import nn
from plugins.nn import functional as fn


def test_exports():
    assert set(nn.__all__) >= {
        "BatchNorm", "BatchNorm2d", "BatchNorm3d", "Conv1d", "Conv2d", "ConvTranspose1d",
        "ConvTranspose2d", "Linear", "LSTMCell", "GroupNorm", "InstanceNorm", "LayerNorm",
        "LayerNorm2d", "RMSNorm", "Embedding"}
    for name in nn.__all__:
        assert getattr(nn, name) is not None
    assert nn.BatchNorm2d is nn.BatchNorm and nn.BatchNorm3d is nn.BatchNorm
    for name in ("conv", "make_conv", "conv_transpose", "make_conv_transpose", "batchnorm",
                 "linear", "make_linear", "lstm_cell", "group_norm", "instance_norm",
                 "layer_norm", "layer_norm2d", "rms_norm", "embedding",
                 "check_embedding_indices"):
        assert callable(getattr(fn, name)), name


def test_one_dim_factories():
    c = nn.Conv1d(3, 4, 5, stride=2)
    assert isinstance(c, nn.Conv2d) and c.kernel_size == (5,) and c.weight.shape == (4, 3, 5)
    ct = nn.ConvTranspose1d(3, 4, 5)
    assert isinstance(ct, nn.ConvTranspose2d) and ct.weight.shape == (3, 4, 5)
    assert nn.Conv2d(3, 4, 5).kernel_size == (5, 5)


def _plain(v) -> bool:
    """msgpack-friendly: plain ints, floats, bools, and lists of them (no tuples, no numpy)."""
    if isinstance(v, list):
        return all(_plain(e) for e in v)
    return type(v) in (int, float, bool)


def _cases(rng):
    f = np.float32
    bn = nn.BatchNorm(4)
    bn.running_mean = rng.standard_normal(4).astype(f)
    bn.running_var = rng.uniform(0.5, 2, 4).astype(f)
    x4 = rng.standard_normal((2, 4, 6, 7)).astype(f)
    return [
        (nn.Conv2d(4, 6, 3, stride=2, padding=(0, 1, 1, 2), groups=2), (x4,),
         "conv", {"stride": [2, 2], "padding": [[1, 2], [0, 1]], "dilation": [1, 1],
                  "groups": 2}),
        (nn.Conv1d(4, 4, 3, padding="same", dilation=2), (x4[:, :, 0],), "conv",
         {"stride": [1], "padding": [[2, 2]], "dilation": [2], "groups": 1}),
        (nn.ConvTranspose2d(4, 3, 2, stride=2, padding=1, output_padding=1), (x4,),
         "conv_transpose", {"stride": [2, 2], "padding": [1, 1], "output_padding": [1, 1],
                            "dilation": [1, 1], "groups": 1}),
        (bn, (x4,), "batchnorm", {"eps": 1e-5, "momentum": 0.1, "track_running_stats": True}),
        (nn.BatchNorm(4, affine=False, track_running_stats=False), (x4,), "batchnorm",
         {"eps": 1e-5, "momentum": 0.1, "track_running_stats": False}),
        (nn.Linear(7, 3), (x4,), "linear", {}),
        (nn.LSTMCell(7, 5), (x4[:, 0, 0], rng.standard_normal((2, 5)).astype(f),
                             rng.standard_normal((2, 5)).astype(f)), "lstm_cell", {}),
        (nn.GroupNorm(2, 4), (x4,), "group_norm", {"num_groups": 2, "eps": 1e-5}),
        (nn.InstanceNorm(4), (x4,), "instance_norm", {"eps": 1e-5}),
        (nn.LayerNorm((6, 7)), (x4,), "layer_norm", {"normalized_shape": [6, 7], "eps": 1e-5}),
        (nn.LayerNorm2d(4), (x4,), "layer_norm2d", {"normalized_shape": [4], "eps": 1e-5}),
        (nn.RMSNorm(7), (x4,), "rms_norm", {"eps": 1e-6}),
        (nn.Embedding(8, 5), (np.array([[1, 7], [0, 3]]),), "embedding", {}),
    ]


TENSOR_NAMES = {
    "conv": ["weight", "bias"], "conv_transpose": ["weight", "bias"],
    "batchnorm": ["weight", "bias", "running_mean", "running_var", "num_batches_tracked"],
    "linear": ["weight", "bias"], "lstm_cell": ["weight_ih", "weight_hh", "bias_ih", "bias_hh"],
    "group_norm": ["weight", "bias"], "instance_norm": ["weight", "bias"],
    "layer_norm": ["weight", "bias"], "layer_norm2d": ["weight", "bias"],
    "rms_norm": ["weight"], "embedding": ["weight"],
}


def test_abi_surface_and_kernel_equivalence(rng):
    for layer, data, op, attrs in _cases(rng):
        assert type(layer).abi_op == op
        got = layer.abi_attrs()
        assert got == attrs and _plain(list(got.values())), (op, got)
        tensors = layer.abi_tensors()
        assert list(tensors) == TENSOR_NAMES[op]
        for name, value in tensors.items():
            assert value is getattr(layer, name)
            assert value is None or isinstance(value, np.ndarray)
        kernel = getattr(fn, op)
        if op == "lstm_cell":
            want = layer(data[0], (data[1], data[2]))
        else:
            want = layer(*data)
        out = kernel(*data, *tensors.values(), **got)
        for a, b in zip(out if isinstance(out, tuple) else (out,),
                        want if isinstance(want, tuple) else (want,)):
            np.testing.assert_array_equal(a, b)


def test_absent_optional_tensors_are_none():
    assert nn.Conv2d(2, 2, 1, bias=False).abi_tensors()["bias"] is None
    assert nn.Linear(2, 2, bias=False).abi_tensors()["bias"] is None
    t = nn.BatchNorm(3, affine=False, track_running_stats=False).abi_tensors()
    assert t["weight"] is t["bias"] is t["running_mean"] is t["running_var"] is None
    assert t["num_batches_tracked"].shape == () and t["num_batches_tracked"].dtype == np.int64
    assert nn.LSTMCell(2, 3, bias=False).abi_tensors()["bias_ih"] is None
    assert nn.LayerNorm(3, elementwise_affine=False).abi_tensors() == {"weight": None,
                                                                       "bias": None}


def test_initial_parameters_follow_tinygrad():
    rng = np.random.default_rng(0)
    c = nn.Conv2d(6, 8, (3, 2), groups=2, rng=rng)
    scale = 1 / np.sqrt(6 * 3 * 2)
    assert c.weight.shape == (8, 3, 3, 2) and c.bias.shape == (8,)
    assert np.abs(c.weight).max() <= scale and np.abs(c.bias).max() <= scale
    ct = nn.ConvTranspose2d(6, 8, 3, groups=2, rng=rng)
    assert ct.weight.shape == (6, 4, 3, 3) and np.abs(ct.weight).max() <= 1 / np.sqrt(6 * 9)
    lin = nn.Linear(16, 4, rng=rng)
    assert lin.weight.shape == (4, 16) and np.abs(lin.weight).max() <= 0.25
    cell = nn.LSTMCell(5, 4, rng=rng)
    assert cell.weight_ih.shape == (16, 5) and cell.weight_hh.shape == (16, 4)
    assert np.abs(cell.weight_hh).max() <= 0.5 and not cell.bias_ih.any()
    bn = nn.BatchNorm(3)
    assert (bn.weight == 1).all() and (bn.bias == 0).all()
    assert (bn.running_mean == 0).all() and (bn.running_var == 1).all()
    for layer in (c, ct, lin, cell, bn, nn.Embedding(4, 2), nn.RMSNorm(3), nn.GroupNorm(1, 2),
                  nn.LayerNorm((2, 3)), nn.InstanceNorm(2)):
        for name, v in layer.abi_tensors().items():
            if v is not None and name != "num_batches_tracked":
                assert v.dtype == np.float32, (type(layer).__name__, name)
    # an explicit generator reproduces the weights
    a = nn.Conv2d(2, 3, 3, rng=np.random.default_rng(5))
    b = nn.Conv2d(2, 3, 3, rng=np.random.default_rng(5))
    np.testing.assert_array_equal(a.weight, b.weight)


def test_outputs_are_fresh_float32_arrays(rng):
    for layer, data, op, _ in _cases(rng):
        outs = layer(data[0], (data[1], data[2])) if op == "lstm_cell" else (layer(*data),)
        for out in outs:
            assert out.dtype == np.float32
            for inp in list(data) + [v for v in layer.abi_tensors().values() if v is not None]:
                assert not np.shares_memory(out, inp), op


@pytest.mark.parametrize("x_shape", [(1, 12, 128, 256)])
def test_conv_output_is_nchw_shaped_channels_last(rng, x_shape):
    layer = nn.Conv2d(12, 32, 3, stride=2, padding=1)
    y = layer(rng.standard_normal(x_shape).astype(np.float32))
    assert y.shape == (1, 32, 64, 128)
    assert np.moveaxis(y, 1, -1).flags.c_contiguous  # documented memory layout
