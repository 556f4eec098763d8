"""Fixtures of the frame-path tests: small layouts and pools that are closed after the test."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.frames import FrameLayout, FramePool


@pytest.fixture
def layout() -> FrameLayout:
    return FrameLayout.create("NV12", 16, 8)


@pytest.fixture
def make_pool(layout):
    pools: list[FramePool] = []

    def make(buffers: int = 3, **kwargs) -> FramePool:
        pool = FramePool(kwargs.pop("layout", layout), buffers, camera=kwargs.pop("camera", "cam"),
                         **kwargs)
        pools.append(pool)
        return pool

    yield make
    for pool in pools:
        pool.close()


def produce(pool: FramePool, frame_id: int, *, value: int | None = None, sof: int | None = None,
            eof: int | None = None, **begin):
    """Fill one frame (every byte of every plane = ``value``, default frame_id % 256);
    returns the Frame, or None when the pool dropped it."""
    writer = pool.begin_frame(**begin)
    if writer is None:
        return None
    for plane in writer.planes.values():
        plane[...] = (frame_id if value is None else value) % 256
    sof = 1_000_000 * frame_id if sof is None else sof
    return writer.commit(frame_id, sof, sof + 500_000 if eof is None else eof)


def planes_equal(planes: dict, value: int) -> bool:
    return all(np.all(p == value) for p in planes.values())
