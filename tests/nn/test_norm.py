"""Normalization layers against torch: the cases of tinygrad's test_nn.py.

float32 tolerance atol=rtol=1e-4; the float16 RMSNorm case uses atol=rtol=2e-3 (half has an
11-bit mantissa, so one rounding of the output is ~5e-4 relative).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from plugins import nn
from plugins.nn import functional as fn

TOL = dict(atol=1e-4, rtol=1e-4)


def t(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a))


@pytest.mark.parametrize("threed", [False, True], ids=["2d", "3d"])
@pytest.mark.parametrize("training", [False, True], ids=["eval", "training"])
@pytest.mark.parametrize("track_running_stats", [True, False], ids=["tracked", "untracked"])
def test_batchnorm(rng, threed, training, track_running_stats):
    for sz in [4, 8, 16, 32]:
        bn = (nn.BatchNorm3d if threed else nn.BatchNorm2d)(
            sz, eps=1e-5, track_running_stats=track_running_stats)
        bn.weight = rng.standard_normal(sz, dtype=np.float32)
        bn.bias = rng.standard_normal(sz, dtype=np.float32)
        if track_running_stats:
            bn.running_mean = rng.standard_normal(sz, dtype=np.float32)
            bn.running_var = np.maximum(rng.standard_normal(sz, dtype=np.float32), 0)
        with torch.no_grad():
            tcls = torch.nn.BatchNorm3d if threed else torch.nn.BatchNorm2d
            tbn = tcls(sz, track_running_stats=track_running_stats).eval()
            tbn.training = training
            tbn.weight[:] = t(bn.weight)
            tbn.bias[:] = t(bn.bias)
            if track_running_stats:
                tbn.running_mean[:] = t(bn.running_mean)
                tbn.running_var[:] = t(bn.running_var)
            x = rng.standard_normal((2, sz, 3, 3, 3) if threed else (2, sz, 3, 3),
                                    dtype=np.float32)
            out = bn(x, training=training)
            tout = tbn(t(x)).numpy()
        assert out.dtype == np.float32
        np.testing.assert_allclose(out, tout, rtol=1e-4, atol=1e-4)
        if track_running_stats:
            np.testing.assert_allclose(bn.running_mean, tbn.running_mean.numpy(), **TOL)
            np.testing.assert_allclose(bn.running_var, tbn.running_var.numpy(), **TOL)
            assert bn.num_batches_tracked.shape == () and bn.num_batches_tracked.dtype == np.int64
            assert int(bn.num_batches_tracked) == int(tbn.num_batches_tracked) == int(training)
        else:
            assert bn.running_mean is None and bn.running_var is None


def test_batchnorm_training_several_steps_then_eval(rng):
    bn, tbn = nn.BatchNorm(6, momentum=0.3), torch.nn.BatchNorm2d(6, momentum=0.3)
    with torch.no_grad():
        for _ in range(4):
            x = rng.normal(2.0, 3.0, (3, 6, 5, 4)).astype(np.float32)
            tbn.train()
            np.testing.assert_allclose(bn(x, training=True), tbn(t(x)).numpy(), **TOL)
        np.testing.assert_allclose(bn.running_mean, tbn.running_mean.numpy(), **TOL)
        np.testing.assert_allclose(bn.running_var, tbn.running_var.numpy(), **TOL)
        assert int(bn.num_batches_tracked) == 4
        tbn.eval()
        x = rng.standard_normal((2, 6, 3, 3), dtype=np.float32)
        np.testing.assert_allclose(bn(x), tbn(t(x)).numpy(), **TOL)


def test_batchnorm_kernel_1d_and_no_affine(rng):
    x = rng.standard_normal((5, 3), dtype=np.float32)
    rm = rng.standard_normal(3, dtype=np.float32)
    rv = rng.uniform(0.5, 2, 3).astype(np.float32)
    y = fn.batchnorm(x, None, None, rm, rv, eps=1e-3, momentum=0.1, track_running_stats=True)
    ref = torch.nn.functional.batch_norm(t(x), t(rm), t(rv), eps=1e-3).numpy()
    np.testing.assert_allclose(y, ref, **TOL)
    # untracked inference uses the batch statistics
    y = fn.batchnorm(x, None, None, None, None, eps=1e-5, momentum=0.1,
                     track_running_stats=False)
    ref = torch.nn.functional.batch_norm(t(x), None, None, training=True).numpy()
    np.testing.assert_allclose(y, ref, **TOL)


def test_groupnorm(rng):
    BS, H, W, C, G = 20, 10, 10, 6, 3
    torch_layer = torch.nn.GroupNorm(G, C).eval()
    layer = nn.GroupNorm(G, C)
    with torch.no_grad():
        torch_layer.weight[:] = t(rng.standard_normal(C, dtype=np.float32))
        torch_layer.bias[:] = t(rng.standard_normal(C, dtype=np.float32))
    layer.weight = torch_layer.weight.detach().numpy().copy()
    layer.bias = torch_layer.bias.detach().numpy().copy()
    for _ in range(10):
        x = rng.standard_normal((BS, C, H, W), dtype=np.float32)
        with torch.no_grad():
            np.testing.assert_allclose(layer(x), torch_layer(t(x)).numpy(), **TOL)


def test_layernorm_forward(rng):
    N, C, H, W = 20, 5, 10, 10
    torch_layer = torch.nn.LayerNorm([H, W]).eval()
    layer = nn.LayerNorm([H, W])
    layer.weight = torch_layer.weight.detach().numpy().copy()
    layer.bias = torch_layer.bias.detach().numpy().copy()
    x = rng.uniform(-1, 1, (N, C, H, W)).astype(np.float32)
    with torch.no_grad():
        np.testing.assert_allclose(layer(x), torch_layer(t(x)).numpy(), **TOL)


def test_layernorm(rng):
    N, C, H, W = 20, 5, 10, 10
    torch_layer = torch.nn.LayerNorm([H, W]).eval()
    layer = nn.LayerNorm([H, W])
    with torch.no_grad():
        torch_layer.weight[:] = t(rng.standard_normal((H, W), dtype=np.float32))
        torch_layer.bias[:] = t(rng.standard_normal((H, W), dtype=np.float32))
    layer.weight = torch_layer.weight.detach().numpy().copy()
    layer.bias = torch_layer.bias.detach().numpy().copy()
    for _ in range(10):
        x = rng.standard_normal((N, C, H, W), dtype=np.float32)
        with torch.no_grad():
            np.testing.assert_allclose(layer(x), torch_layer(t(x)).numpy(), **TOL)


def test_layernorm_2d(rng):
    N, C, H, W = 20, 5, 10, 10
    torch_layer = torch.nn.LayerNorm([C]).eval()
    layer = nn.LayerNorm2d(C)
    with torch.no_grad():
        torch_layer.weight[:] = t(rng.standard_normal(C, dtype=np.float32))
        torch_layer.bias[:] = t(rng.standard_normal(C, dtype=np.float32))
    layer.weight = torch_layer.weight.detach().numpy().copy()
    layer.bias = torch_layer.bias.detach().numpy().copy()
    for _ in range(10):
        x = rng.standard_normal((N, C, H, W), dtype=np.float32)
        with torch.no_grad():
            ref = torch_layer(t(x).permute(0, 2, 3, 1)).permute(0, 3, 1, 2).numpy()
        z = layer(x)
        assert z.shape == x.shape
        np.testing.assert_allclose(z, ref, **TOL)


@pytest.mark.parametrize("shape", [(20, 10, 10, 10), (20, 10, 10, 10, 10)], ids=["2d", "3d"])
def test_instancenorm(rng, shape):
    C = shape[1]
    tcls = torch.nn.InstanceNorm2d if len(shape) == 4 else torch.nn.InstanceNorm3d
    torch_layer = tcls(C, affine=True).eval()
    layer = nn.InstanceNorm(C)
    with torch.no_grad():
        torch_layer.weight[:] = t(rng.standard_normal(C, dtype=np.float32))
        torch_layer.bias[:] = t(rng.standard_normal(C, dtype=np.float32))
    layer.weight = torch_layer.weight.detach().numpy().copy()
    layer.bias = torch_layer.bias.detach().numpy().copy()
    for _ in range(3 if len(shape) == 5 else 10):
        x = rng.standard_normal(shape, dtype=np.float32)
        with torch.no_grad():
            np.testing.assert_allclose(layer(x), torch_layer(t(x)).numpy(), **TOL)


class TorchRMSNorm(torch.nn.Module):
    """The llama reference RMSNorm tinygrad's test compares with."""

    def __init__(self, dim: int, eps: float = 1e-6, elementwise_affine: bool = True):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(dim)) if elementwise_affine else None

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float()).type_as(x)
        return output if self.weight is None else output * self.weight


@pytest.mark.parametrize("affine", [True, False])
def test_rmsnorm(rng, affine):
    B, T, embed_size = 4, 10, 20
    torch_layer = TorchRMSNorm(embed_size, elementwise_affine=affine)
    layer = nn.RMSNorm(embed_size, elementwise_affine=affine)
    if affine:
        with torch.no_grad():
            torch_layer.weight[:] = t(rng.standard_normal(embed_size, dtype=np.float32))
        layer.weight = torch_layer.weight.detach().numpy().copy()
    else:
        assert layer.weight is None and layer.abi_tensors() == {"weight": None}
    for _ in range(10):
        x = rng.standard_normal((B, T, embed_size), dtype=np.float32)
        with torch.no_grad():
            np.testing.assert_allclose(layer(x), torch_layer(t(x)).numpy(), **TOL)


@pytest.mark.parametrize("affine", [True, False])
def test_rmsnorm_float16(rng, affine):
    embed_size = 24
    torch_layer = TorchRMSNorm(embed_size, elementwise_affine=affine)
    layer = nn.RMSNorm(embed_size, elementwise_affine=affine)
    x = (rng.standard_normal((3, 7, embed_size)) * 4).astype(np.float16)
    with torch.no_grad():
        ref = torch_layer(t(x))
    z = layer(x)
    # the normalized value is cast back to float16; float16 * float32 weight promotes
    assert z.dtype == (np.float32 if affine else np.float16)
    assert str(ref.dtype) == f"torch.{z.dtype}"
    np.testing.assert_allclose(z.astype(np.float32), ref.float().numpy(), atol=2e-3, rtol=2e-3)


def test_norms_accept_channels_last_memory(rng):
    """Conv outputs are channels-last in memory; every norm gives the same values for them."""
    x = rng.standard_normal((2, 6, 5, 7), dtype=np.float32)
    xl = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    w, b = rng.standard_normal(6, dtype=np.float32), rng.standard_normal(6, dtype=np.float32)
    rm, rv = rng.standard_normal(6, dtype=np.float32), rng.uniform(0.5, 2, 6).astype(np.float32)
    kernels = [
        lambda a: fn.batchnorm(a, w, b, rm, rv, eps=1e-5, momentum=0.1,
                               track_running_stats=True),
        lambda a: fn.batchnorm(a, w, b, None, None, eps=1e-5, momentum=0.1,
                               track_running_stats=False),
        lambda a: fn.group_norm(a, w, b, num_groups=3, eps=1e-5),
        lambda a: fn.instance_norm(a, w, b, eps=1e-5),
        lambda a: fn.layer_norm2d(a, w, b, normalized_shape=(6,), eps=1e-5),
    ]
    for k in kernels:
        np.testing.assert_allclose(k(xl), k(x), atol=1e-6, rtol=1e-6)
    y = kernels[0](xl)  # BatchNorm keeps the channels-last layout
    assert np.moveaxis(y, 1, -1).flags.c_contiguous
