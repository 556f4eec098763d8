"""Embedding against torch (tinygrad's test_nn.py cases); lookups are exact."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from plugins import nn
from plugins.nn import functional as fn


def _torch_embedding(layer: nn.Embedding) -> torch.nn.Embedding:
    te = torch.nn.Embedding(layer.vocab_size, layer.embed_size).eval()
    with torch.no_grad():
        te.weight[:] = torch.from_numpy(layer.weight)
    return te


def test_embedding(rng):
    B, T, embed_size, vocab_size = 4, 10, 20, 28
    layer = nn.Embedding(vocab_size, embed_size)
    torch_layer = _torch_embedding(layer)
    for shape in ((B, T), (B, 0)):  # the second: an empty input length
        x = rng.integers(0, vocab_size, shape, dtype=np.int32)
        z = layer(x)
        with torch.no_grad():
            torch_z = torch_layer(torch.from_numpy(x)).numpy()
        assert z.shape == shape + (embed_size,) and z.dtype == np.float32
        np.testing.assert_array_equal(z, torch_z)
    for _ in range(3):  # repeated calls (tinygrad: under the jit)
        x = rng.integers(0, vocab_size, (B, T), dtype=np.int32)
        with torch.no_grad():
            np.testing.assert_array_equal(layer(x), torch_layer(torch.from_numpy(x)).numpy())


def test_embedding_shape():
    vocab_size, embed_size = 10, 16
    layer = nn.Embedding(vocab_size, embed_size)
    for rank in range(5):
        shp = (1,) * rank
        a = np.array([3]).reshape(shp)
        result = layer(a)
        assert result.shape == shp + (embed_size,)
        np.testing.assert_array_equal(result.reshape(-1), layer.weight[3])


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.int32, np.int64, np.uint64])
def test_embedding_integer_dtypes(rng, dtype):
    layer = nn.Embedding(100, 8)
    idx = rng.integers(0, 100, (3, 5)).astype(dtype)
    np.testing.assert_array_equal(layer(idx), layer.weight[idx.astype(np.int64)])


def test_embedding_regression(rng):
    # tinygrad: "used to fail bounds check"
    layer = nn.Embedding(100, 1024)
    idx = rng.integers(0, 100, (16, 16), dtype=np.int32)
    assert layer(idx).shape == (16, 16, 1024)


def test_embedding_returns_a_copy(rng):
    layer = nn.Embedding(5, 3)
    before = layer.weight.copy()
    for idx in (np.array(2), np.array([1, 1])):
        out = fn.embedding(idx, layer.weight)
        out[...] = 123.0
        np.testing.assert_array_equal(layer.weight, before)


def test_glorot_init_bound():
    layer = nn.Embedding(8, 32)
    assert layer.weight.shape == (8, 32) and layer.weight.dtype == np.float32
    assert np.abs(layer.weight).max() <= np.sqrt(6 / (8 + 32))
