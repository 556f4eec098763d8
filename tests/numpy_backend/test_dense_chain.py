"""The numpy backend's flatten -> linear -> relu kernel (the flatten folded into the weight's
column order): torch's numbers over a batch known only when the call runs, an empty batch
included, and over inputs of either memory layout."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from plugin_host.builder import GraphBuilder
from plugin_host.executor import Executor
from plugins.numpy_backend import NumpyBackend


def _head(weight, bias):
    b = GraphBuilder("head")
    x = b.input("x", ("n", 3, 4, 5), "float32", "NCHW")
    flat = b.op("flatten", x, start_dim=1, end_dim=-1, name="flatten")
    y = b.op("relu", b.op("linear", flat, b.constant("w", weight), b.constant("b", bias),
                          name="linear"), name="relu")
    b.output(y, "y", "NC")
    return b.build()


@pytest.mark.parametrize("batch", [0, 1, 3])
@pytest.mark.parametrize("channels_last", [False, True])
def test_the_folded_head_is_torchs(batch, channels_last):
    rng = np.random.default_rng(31)
    weight = rng.standard_normal((7, 60)).astype(np.float32)
    bias = rng.standard_normal(7).astype(np.float32)
    x = rng.standard_normal((batch, 3, 4, 5)).astype(np.float32)
    if channels_last:  # a conv's output: channels-last memory behind an NCHW view
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    got = Executor(_head(weight, bias), NumpyBackend()).run({"x": x})["y"]
    want = torch.relu(torch.nn.functional.linear(torch.from_numpy(np.ascontiguousarray(x))
                                                 .flatten(1), torch.from_numpy(weight),
                                                 torch.from_numpy(bias))).numpy()
    assert got.shape == (batch, 7)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
