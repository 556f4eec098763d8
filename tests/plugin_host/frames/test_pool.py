"""The frame pool's ownership rules: leases, generation ids, drops, leaks, close."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from plugin_host.errors import (FrameError, FrameOverwrittenError, LeaseError,
                                LeaseReleasedError, PoolClosedError)
from plugin_host.frames import FrameLayout, FramePool

from .conftest import planes_equal, produce


def test_frames_carry_their_metadata_and_bytes(make_pool, layout):
    pool = make_pool()
    frame = produce(pool, 5, sof=1000, eof=2000)
    assert (frame.camera, frame.frame_id, frame.timestamp_sof, frame.timestamp_eof) == \
        ("cam", 5, 1000, 2000)
    assert (frame.layout, frame.pool_id, frame.generation) == (layout, pool.id, 1)
    with pool.lease(frame, "test") as lease:
        planes = lease.planes()
        assert set(planes) == {"Y", "UV"} and planes_equal(planes, 5)
        assert planes["Y"].shape == (8, 16) and planes["UV"].shape == (4, 8, 2)
        assert not planes["Y"].flags.writeable
        with pytest.raises(ValueError):
            planes["Y"].setflags(write=True)  # host consumers cannot write either
        expected = bytearray(layout.nbytes)  # rows of 16 bytes at a stride of 64
        for start in [64 * r for r in range(8)] + [512 + 64 * r for r in range(4)]:
            expected[start:start + 16] = b"\x05" * 16
        assert bytes(lease.buffer()) == bytes(expected)
    assert lease.released


def test_pool_ids_are_random_per_instance(make_pool):
    assert len({make_pool(1).id for _ in range(5)}) == 5


def test_double_release_is_a_typed_error(make_pool):
    pool = make_pool()
    lease = pool.lease(produce(pool, 1), "a")
    lease.release()
    with pytest.raises(LeaseReleasedError, match="double release") as info:
        lease.release()
    assert (info.value.operation, info.value.frame_id, info.value.camera) == ("release", 1, "cam")
    with pytest.raises(LeaseReleasedError):
        lease.drop("conflated")
    assert pool.stats()["leases_outstanding"] == 0


@pytest.mark.parametrize("use", ["planes", "array", "buffer", "check"])
def test_use_after_release_is_a_typed_error(make_pool, use):
    pool = make_pool(layout=FrameLayout.create("GRAY", 8, 4))
    lease = pool.lease(produce(pool, 1), "a")
    lease.array()  # one-plane formats need no plane name
    lease.release()
    with pytest.raises(LeaseReleasedError, match=f"{use}\\(\\) on a released lease") as info:
        getattr(lease, use)()
    assert info.value.operation == use
    assert lease.frame.frame_id == 1  # the metadata stays readable


def test_a_leased_slot_is_never_refilled(make_pool):
    pool = make_pool(3)
    held = pool.lease(produce(pool, 0), "slow consumer")
    slots = set()
    for frame_id in range(1, 40):
        frame = produce(pool, frame_id)
        slots.add(frame.slot)
    assert held.frame.slot not in slots and len(slots) == 2
    held.check()  # still generation 1, bytes untouched
    assert planes_equal(held.planes(), 0)
    held.release()
    assert produce(pool, 40).slot == held.frame.slot  # free again: the least recently filled


def test_slots_are_refilled_least_recently_filled_first(make_pool):
    pool = make_pool(3)
    assert [produce(pool, i).slot for i in range(6)] == [0, 1, 2, 0, 1, 2]


def test_when_every_slot_is_leased_the_new_frame_is_dropped_and_counted(make_pool):
    pool = make_pool(2)
    leases = [pool.lease(produce(pool, i), "x") for i in range(2)]
    assert produce(pool, 2) is None and produce(pool, 3) is None
    stats = pool.stats()
    assert stats["dropped"] == {"no_free_buffer": 2} and stats["dropped_total"] == 2
    assert stats["produced"] == 2 and stats["leases_outstanding"] == 2
    leases[0].release()
    assert produce(pool, 4).slot == leases[0].frame.slot


def test_two_leases_on_one_frame_both_hold_it(make_pool):
    pool = make_pool(2)
    frame = produce(pool, 0)
    a, b = pool.lease(frame, "a"), pool.lease(frame, "b")
    a.release()
    assert produce(pool, 1).slot != frame.slot and produce(pool, 2).slot != frame.slot
    b.release()
    assert produce(pool, 3).slot == frame.slot


def test_an_overwrite_of_a_leased_buffer_is_detected_by_generation(make_pool):
    pool = make_pool(2)
    lease = pool.lease(produce(pool, 0, value=1), "victim")
    # a misbehaving producer takes the leased slot anyway
    rogue = pool.begin_frame(slot=lease.frame.slot, force=True)
    with pytest.raises(FrameOverwrittenError, match="being refilled") as info:
        lease.check()  # mid-write: the generation moved before any byte changed
    assert (info.value.expected, info.value.got, info.value.writing) == (1, 2, True)
    rogue.planes["Y"][...] = 99
    rogue.commit(1, 5, 6)
    with pytest.raises(FrameOverwrittenError, match="was refilled while in use"):
        lease.check()
    with pytest.raises(FrameOverwrittenError) as info:
        lease.release()  # the lease is still returned
    assert info.value.slot == lease.frame.slot and lease.released
    stats = pool.stats()
    assert stats["leases_outstanding"] == 0 and stats["overwrites"] == 3


def test_the_producer_refuses_a_leased_slot_unless_forced(make_pool):
    pool = make_pool(2)
    lease = pool.lease(produce(pool, 0), "x")
    with pytest.raises(LeaseError, match="leased"):
        pool.begin_frame(slot=lease.frame.slot)
    lease.release()


def test_a_frame_already_refilled_cannot_be_leased(make_pool):
    pool = make_pool(1)
    old = produce(pool, 0)
    produce(pool, 1)
    with pytest.raises(FrameOverwrittenError):
        pool.lease(old, "late")
    other = make_pool(1)
    with pytest.raises(FrameError, match="belongs to pool"):
        other.lease(produce(pool, 2), "x")


def test_leaks_by_age_are_listed_and_logged_once(make_pool, caplog):
    pool = make_pool(3, leak_age_s=0.05)
    lease = pool.lease(produce(pool, 0), "forgetful")
    assert pool.leaks() == []
    time.sleep(0.08)
    [leak] = pool.leaks()
    assert (leak.frame_id, leak.holder, leak.camera, leak.pool_id) == (0, "forgetful", "cam",
                                                                       pool.id)
    assert leak.age_s >= 0.05
    with caplog.at_level(logging.WARNING, logger="plugin_host.frames"):
        produce(pool, 1)
        produce(pool, 2)
    lines = [r.getMessage() for r in caplog.records if "leaked?" in r.getMessage()]
    assert len(lines) == 1 and "'forgetful'" in lines[0] and "frame 0" in lines[0]
    assert pool.stats()["leaks"] == 1
    lease.release()
    assert pool.leaks() == []


def test_leaks_by_frame_count(make_pool):
    pool = make_pool(4, leak_age_s=None, leak_frames=2)
    lease = pool.lease(produce(pool, 0), "x")
    produce(pool, 1)
    produce(pool, 2)
    assert pool.leaks() == []
    produce(pool, 3)
    [leak] = pool.leaks()
    assert leak.frames == 3
    lease.release()


def test_outstanding_leases_at_close_are_reported_and_stay_valid(make_pool, caplog):
    pool = make_pool(2)
    lease = pool.lease(produce(pool, 3), "holder")
    with caplog.at_level(logging.WARNING, logger="plugin_host.frames"):
        [report] = pool.close()
    assert (report.frame_id, report.holder) == (3, "holder")
    assert any("still outstanding when the pool closed" in r.getMessage()
               for r in caplog.records)
    assert pool.close() == []  # closing twice does nothing
    assert planes_equal(lease.planes(), 3)  # still mapped while leased
    lease.check()
    with pytest.raises(PoolClosedError):
        pool.begin_frame()
    with pytest.raises(PoolClosedError):
        pool.lease(lease.frame, "late")
    lease.release()
    assert pool._unmapped and pool.fd == -1


def test_drop_releases_and_counts_the_reason(make_pool):
    pool = make_pool()
    pool.lease(produce(pool, 0), "x").drop("conflated")
    pool.lease(produce(pool, 1), "x").drop("out_of_sync")
    stats = pool.stats()
    assert stats["dropped"] == {"conflated": 1, "out_of_sync": 1}
    assert stats["leases_outstanding"] == 0


def test_a_waiting_producer_gets_the_slot_released_meanwhile(make_pool):
    pool = make_pool(1)
    lease = pool.lease(produce(pool, 0), "x")
    threading.Timer(0.05, lease.release).start()
    start = time.monotonic()
    frame = produce(pool, 1, wait=2.0)
    assert frame is not None and 0.03 < time.monotonic() - start < 1.5
    assert pool.stats()["dropped"] == {}
    lease2 = pool.lease(frame, "x")
    assert pool.begin_frame(wait=0.01, count_drop=False) is None
    assert pool.stats()["dropped"] == {}
    lease2.release()


def test_pool_sizes_are_capped_before_allocation():
    layout = FrameLayout.create("RGB", 4096, 4096)
    with pytest.raises(FrameError, match="over the cap"):
        FramePool(layout, 100)
    with pytest.raises(FrameError, match="1 to 256 buffers"):
        FramePool(layout, 0)


def test_pool_memory_is_one_sealed_memfd_with_a_read_only_descriptor(make_pool):
    import fcntl
    import os

    pool = make_pool(2)
    assert os.readlink(f"/proc/self/fd/{pool.fd}").startswith("/memfd:plugin-host-frames:cam")
    assert fcntl.fcntl(pool.fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY
    assert os.fstat(pool.fd).st_size == pool.size
    with pytest.raises(PermissionError):
        os.ftruncate(os.open(f"/proc/self/fd/{pool.fd}", os.O_RDWR), 1)
