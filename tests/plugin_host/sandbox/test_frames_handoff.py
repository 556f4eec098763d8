"""Zero-copy camera frames into the sandbox worker: ``attach_pool`` and ``handoff``.

The worker maps a camera pool read-only from its descriptor and finds a frame's planes from
the frame's metadata alone; it proves it read the producer's bytes with a CRC-32 of the first
and last 16 bytes of each plane's first and last rows. A malicious kernel cannot write the
pool, a new pool id remaps, bad metadata is refused without harming the worker, and a slot
refilled under the frame is detected by its generation.
"""

from __future__ import annotations

import json
import os
import time
import zlib

import numpy as np
import pytest

from plugin_host.errors import (FrameError, FrameFormatError, FrameOverwrittenError,
                                SandboxError, WorkerCallError, WorkerDiedError)
from plugin_host.frames import FrameLayout, FramePool
from plugin_host.sandbox import SandboxedExecutor, SandboxLimits
from plugin_host.sandbox.landlock import abi_version

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the worker drops from root to an unprivileged "
                                                 "uid and unshares its network: run as root"),
    pytest.mark.skipif(abi_version() < 6, reason="this kernel has no Landlock ABI 6"),
]

EVIL = "tests.plugin_host.sandbox.frame_evil_layer"
MARK = 4242.0
NORMAL = {"x": np.linspace(-1, 1, 16, dtype=np.float32).reshape(1, 16),
          "ids": np.array([3], np.int64)}


def expected_crc(planes: dict[str, np.ndarray]) -> int:
    crc = 0
    for plane in planes.values():
        crc = zlib.crc32(np.ascontiguousarray(plane[0].reshape(-1)[:16]), crc)
        crc = zlib.crc32(np.ascontiguousarray(plane[-1].reshape(-1)[-16:]), crc)
    return crc


def produce(pool: FramePool, seed: int, frame_id: int, **kw):
    rng = np.random.default_rng(seed)
    writer = pool.begin_frame(**kw)
    for plane in writer.planes.values():
        plane[...] = rng.integers(0, 256, plane.shape, dtype=np.uint8)
    return writer.commit(frame_id, time.monotonic_ns())


def make_pool(width=64, height=32, camera="road") -> FramePool:
    return FramePool(FrameLayout.create("NV12", width, height), 4, camera=camera)


@pytest.fixture
def sx(redteam_artifact, sandbox_trust):
    with SandboxedExecutor(redteam_artifact, trust=sandbox_trust,
                           limits=SandboxLimits(call_timeout=20)) as executor:
        yield executor


def test_handoff_sees_the_producers_bytes(sx):
    pool = make_pool(1928, 1208)
    try:
        with pytest.raises(SandboxError, match="attach_pool first"):
            sx.handoff(produce(pool, 0, 0))
        sx.attach_pool(pool)
        sx.attach_pool(pool)  # the same pool again: nothing sent, nothing changes
        for i in range(1, 6):
            frame = produce(pool, i, i)
            with pool.lease(frame) as lease:
                ack = sx.handoff(frame)
                assert ack == {"frame_id": i, "crc": expected_crc(lease.planes())}
        assert sx.restarts == 0
        sx.run(NORMAL)  # the run path is untouched
    finally:
        pool.close()


def test_attach_by_descriptor_and_a_wrong_pool_id(sx):
    pool = make_pool()
    try:
        with pytest.raises(FrameError, match="not the announced"):
            sx.attach_pool(pool.fd, pool_id="not-this-pool")
        with pytest.raises(SandboxError, match="attach_pool first"):
            sx.handoff(produce(pool, 1, 1))
        sx.attach_pool(pool.fd, pool_id=pool.id)
        frame = produce(pool, 2, 2)
        assert sx.handoff(frame)["crc"] == expected_crc(pool.lease(frame).planes())
        r, w = os.pipe()  # not a pool at all
        try:
            with pytest.raises(FrameError):
                sx.attach_pool(r, pool_id="pipe")
        finally:
            os.close(r)
            os.close(w)
        assert sx.restarts == 0
    finally:
        pool.close()


def test_a_new_pool_id_remaps(sx):
    first, second = make_pool(camera="road"), make_pool(128, 64, camera="road")
    try:
        sx.attach_pool(first)
        old = produce(first, 1, 1)
        assert sx.handoff(old)["crc"] == expected_crc(first.lease(old).planes())
        pid = sx.pid
        sx.attach_pool(second)  # a camera restart: a new pool id
        new = produce(second, 2, 1)
        assert sx.handoff(new)["crc"] == expected_crc(second.lease(new).planes())
        with pytest.raises(FrameError, match="the camera restarted"):
            sx.handoff(old)  # the old mapping is forgotten
        assert sx.pid == pid and sx.restarts == 0
        assert sx.resets_by_reason.get("worker restart", 0) == 0  # no reset here (daemon's)
    finally:
        first.close()
        second.close()


def test_bad_metadata_is_refused_and_the_worker_keeps_serving(sx):
    pool = make_pool()
    try:
        sx.attach_pool(pool)
        good = produce(pool, 1, 1)
        meta = good.to_dict()
        bad_layout = dict(meta["layout"], strides=[1, 64])  # a stride shorter than a row
        other_layout = FrameLayout.create("NV12", 64, 34).to_dict()
        cases = [
            {}, [], "frame", 7, None,
            {**meta, "extra": 1},
            {**meta, "slot": -1}, {**meta, "slot": 2**63}, {**meta, "slot": "0"},
            {**meta, "generation": 1.5}, {**meta, "camera": ""},
            {**meta, "timestamp_eof": meta["timestamp_sof"] - 1},
            {**meta, "layout": bad_layout}, {**meta, "layout": {"format": "XYZ"}},
            {**meta, "layout": dict(meta["layout"], nbytes=2**62)},
            {**meta, "layout": other_layout},   # valid, but not the pool's layout
            {**meta, "slot": 4},                # no such slot
            {**meta, "pool_id": "another-pool"},
        ]
        pid = sx.pid
        for bad in cases:
            with pytest.raises(FrameError):
                sx.handoff(bad)
        with pytest.raises(FrameFormatError):
            sx.handoff({**meta, "layout": bad_layout})
        with pytest.raises(FrameFormatError, match="cannot be sent"):
            sx.handoff({**meta, "slot": 2**70})  # refused on the host: not msgpack-able
        with pytest.raises(FrameFormatError, match="cannot be sent"):
            sx.handoff({**meta, "camera": object()})
        assert sx.pid == pid and sx.restarts == 0
        assert sx.handoff(good)["crc"] == expected_crc(pool.lease(good).planes())
    finally:
        pool.close()


def test_an_overwritten_slot_is_detected(sx):
    pool = make_pool()
    try:
        sx.attach_pool(pool)
        frame = produce(pool, 1, 1)
        newer = produce(pool, 2, 2, slot=frame.slot, force=True)  # refilled under the frame
        with pytest.raises(FrameOverwrittenError):
            sx.handoff(frame)
        assert sx.handoff(newer)["frame_id"] == 2
        writer = pool.begin_frame(slot=newer.slot, force=True)  # being written right now
        with pytest.raises(FrameOverwrittenError):
            sx.handoff(newer)
        writer.abort()
        assert sx.restarts == 0
    finally:
        pool.close()


def test_a_malicious_kernel_cannot_write_the_pool(redteam_artifact, sandbox_trust):
    pool = make_pool()
    try:
        frame = produce(pool, 3, 1)
        before = bytes(pool.lease(frame).buffer())
        with SandboxedExecutor(redteam_artifact, trust=sandbox_trust, plugin_modules=[EVIL],
                               kernel_overrides={"relu": EVIL},
                               preload_modules=("ctypes", "gc", "json", "mmap"),
                               limits=SandboxLimits(call_timeout=20)) as evil:
            evil.attach_pool(pool)
            crc = evil.handoff(frame)["crc"]
            x = np.zeros((1, 16), np.float32)
            x[0, 0] = MARK
            with pytest.raises(WorkerCallError) as info:
                evil.run({"x": x, "ids": np.array([0], np.int64)})
            text = str(info.value)
            assert "ATTACK SUCCEEDED" not in text and "DENIED" in text, text
            results = json.loads(text[text.index("{"):text.rindex("}") + 1])
            assert set(results) == {"numpy", "writeable_flag", "mmap", "mprotect"}
            assert all(v.startswith("denied") for v in results.values()), results
            assert "EACCES" in results["mprotect"] or "13" in results["mprotect"]
            assert evil.handoff(frame)["crc"] == crc
            x[0, 1] = 1  # a raw write: the read-only mapping faults, the worker is restarted
            with pytest.raises(WorkerDiedError):
                evil.run({"x": x, "ids": np.array([0], np.int64)})
            assert evil.restarts == 1
            assert evil.handoff(frame)["crc"] == crc  # the new worker got the pool again
        assert bytes(pool.lease(frame).buffer()) == before
    finally:
        pool.close()
