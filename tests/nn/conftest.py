"""Fixtures of the nn tests. torch (CPU, 2.13) is the reference, computed live in each test."""

from __future__ import annotations

import zlib
from typing import Iterator

import numpy as np
import pytest
import torch


@pytest.fixture(autouse=True)
def _one_torch_thread() -> Iterator[None]:
    """The references are small: one torch thread keeps torch's spinning workers from competing
    with numpy's BLAS threads for the machine's two cores. Restored after each test, so tests
    elsewhere in the session see torch's setting unchanged."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """A generator with a fixed seed per test (derived from the test id, stable across runs)."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))
