"""Linear and LSTMCell against torch (tinygrad's test_nn.py cases).

Linear: atol=rtol=1e-4. LSTMCell: atol=rtol=1e-5 (tinygrad's test uses atol=1e-6; its values
are sigmoid/tanh outputs bounded by 1, and 1e-5 leaves room for BLAS summation order).
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


@pytest.mark.parametrize("shape", [(4, 8), (4, 2, 8), (8,)], ids=["2d", "3d", "1d"])
def test_linear(rng, shape):
    in_dim, out_dim = 8, 16
    model = nn.Linear(in_dim, out_dim)
    x = rng.standard_normal(shape, dtype=np.float32)
    z = model(x)
    with torch.no_grad():
        torch_layer = torch.nn.Linear(in_dim, out_dim).eval()
        torch_layer.weight[:] = t(model.weight)
        torch_layer.bias[:] = t(model.bias)
        torch_z = torch_layer(t(x)).numpy()
    assert z.shape == shape[:-1] + (out_dim,) and z.dtype == np.float32
    np.testing.assert_allclose(z, torch_z, **TOL)


def test_linear_no_bias_noncontiguous_and_prepared(rng):
    model = nn.Linear(6, 3, bias=False)
    assert model.bias is None
    x = rng.standard_normal((5, 4, 12), dtype=np.float32)[:, :, ::2]  # strided last axis
    ref = torch.nn.functional.linear(t(x), t(model.weight)).numpy()
    np.testing.assert_allclose(model(x), ref, **TOL)
    w = rng.standard_normal((3, 6), dtype=np.float32)
    b = rng.standard_normal(3, dtype=np.float32)
    run = fn.make_linear(w, b)
    ref = torch.nn.functional.linear(t(x), t(w), t(b)).numpy()
    w[:] = 0  # the prepared kernel keeps its own copy
    np.testing.assert_allclose(run(x), ref, **TOL)


def _torch_cell(layer: nn.LSTMCell, input_size: int, hidden: int, bias: bool = True):
    cell = torch.nn.LSTMCell(input_size, hidden, bias=bias)
    with torch.no_grad():
        cell.weight_ih[:] = t(layer.weight_ih)
        cell.weight_hh[:] = t(layer.weight_hh)
        if bias:
            cell.bias_ih[:] = t(layer.bias_ih)
            cell.bias_hh[:] = t(layer.bias_hh)
    return cell


def test_lstm_cell(rng):
    layer = nn.LSTMCell(32, 16)
    layer.bias_ih = rng.uniform(-0.25, 0.25, 64).astype(np.float32)
    layer.bias_hh = rng.uniform(-0.25, 0.25, 64).astype(np.float32)
    torch_layer = _torch_cell(layer, 32, 16)
    inp = rng.standard_normal((1, 32), dtype=np.float32)
    with torch.no_grad():
        out_h, out_c = layer(inp)
        torch_out_h, torch_out_c = torch_layer(t(inp))
        np.testing.assert_allclose(out_h, torch_out_h.numpy(), atol=1e-5, rtol=1e-5)
        np.testing.assert_allclose(out_c, torch_out_c.numpy(), atol=1e-5, rtol=1e-5)
        out_h, out_c = layer(inp, (out_h, out_c))
        torch_out_h, torch_out_c = torch_layer(t(inp), (torch_out_h, torch_out_c))
        np.testing.assert_allclose(out_h, torch_out_h.numpy(), atol=1e-5, rtol=1e-5)
        np.testing.assert_allclose(out_c, torch_out_c.numpy(), atol=1e-5, rtol=1e-5)


def test_lstm_cell_multistep_state_carried_by_caller(rng):
    layer = nn.LSTMCell(10, 7)
    torch_layer = _torch_cell(layer, 10, 7)
    h = rng.standard_normal((3, 7), dtype=np.float32)
    c = rng.standard_normal((3, 7), dtype=np.float32)
    th, tc = t(h), t(c)
    with torch.no_grad():
        for _ in range(6):
            x = rng.standard_normal((3, 10), dtype=np.float32)
            h, c = fn.lstm_cell(x, h, c, layer.weight_ih, layer.weight_hh, layer.bias_ih,
                                layer.bias_hh)
            th, tc = torch_layer(t(x), (th, tc))
            np.testing.assert_allclose(h, th.numpy(), atol=1e-5, rtol=1e-5)
            np.testing.assert_allclose(c, tc.numpy(), atol=1e-5, rtol=1e-5)


def test_lstm_cell_no_bias(rng):
    layer = nn.LSTMCell(32, 16, bias=False)
    assert layer.bias_hh is None and layer.bias_ih is None
    torch_layer = _torch_cell(layer, 32, 16, bias=False)
    inp = rng.standard_normal((2, 32), dtype=np.float32)
    h = rng.standard_normal((2, 16), dtype=np.float32)
    c = rng.standard_normal((2, 16), dtype=np.float32)
    with torch.no_grad():
        for hc, thc in ((None, None), ((h, c), (t(h), t(c)))):
            out_h, out_c = layer(inp, hc)
            ref_h, ref_c = torch_layer(t(inp), thc)
            np.testing.assert_allclose(out_h, ref_h.numpy(), atol=1e-5, rtol=1e-5)
            np.testing.assert_allclose(out_c, ref_c.numpy(), atol=1e-5, rtol=1e-5)


def test_lstm_cell_omitted_state_is_zeros(rng):
    layer = nn.LSTMCell(5, 4)
    x = rng.standard_normal((2, 5), dtype=np.float32)
    zeros = np.zeros((2, 4), np.float32)
    for got, want in zip(layer(x), layer(x, (zeros, zeros))):
        np.testing.assert_array_equal(got, want)
    h_only = fn.lstm_cell(x, zeros, None, *layer.abi_tensors().values())
    for got, want in zip(h_only, layer(x)):
        np.testing.assert_array_equal(got, want)


def test_lstm_saturated_gates_are_finite():
    layer = nn.LSTMCell(2, 3)
    x = np.array([[1e4, -1e4]], np.float32)
    with np.errstate(all="raise"):
        h, c = layer(x)
    assert np.isfinite(h).all() and np.isfinite(c).all()
