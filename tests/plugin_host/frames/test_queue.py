"""Subscriptions: newest-wins conflation, bounded queues, drop counting, recv timeouts."""

from __future__ import annotations

import threading
import time

import pytest

from plugin_host.frames import Subscription

from .conftest import produce


def deliver(pool, sub, frame_id):
    frame = produce(pool, frame_id)
    sub._deliver(pool.lease(frame, sub.name))
    return frame


def test_recv_returns_none_on_timeout():
    sub = Subscription("s")
    start = time.monotonic()
    assert sub.recv(0.05) is None
    assert 0.04 < time.monotonic() - start < 1.0
    assert sub.recv(0) is None


def test_conflation_delivers_the_newest_and_counts_the_skipped(make_pool):
    pool = make_pool(4)
    sub = Subscription("model", conflate=True)
    for frame_id in range(5):
        deliver(pool, sub, frame_id)
    # the skipped frames were released at once: only the newest holds a buffer
    assert pool.stats()["leases_outstanding"] == 1
    lease = sub.recv(0)
    assert lease.frame.frame_id == 4
    assert sub.recv(0) is None
    assert sub.dropped == {"conflated": 4} and sub.received == 1
    stats = pool.stats()
    assert stats["dropped"] == {"conflated": 4} and stats["delivered"] == 1
    lease.release()
    assert pool.stats()["leases_outstanding"] == 0


def test_conflation_never_starves_the_producer(make_pool):
    # a conflating consumer ties up at most two buffers (one received, one queued), so with
    # a third for the frame being filled the producer never runs out
    pool = make_pool(3)
    sub = Subscription("model", conflate=True)
    held = None
    for frame_id in range(20):
        assert deliver(pool, sub, frame_id) is not None
        if frame_id % 5 == 0:
            if held:
                held.release()
            held = sub.recv(0)
    held.release()
    assert pool.stats()["dropped"].get("no_free_buffer", 0) == 0


def test_a_full_queue_drops_the_oldest(make_pool):
    pool = make_pool(4)
    sub = Subscription("logger", maxlen=2)
    for frame_id in range(4):
        deliver(pool, sub, frame_id)
    assert [sub.recv(0).frame.frame_id for _ in range(2)] == [2, 3]
    assert sub.dropped == {"queue_full": 2}
    assert pool.stats()["dropped"] == {"queue_full": 2}


def test_recv_wakes_when_a_frame_arrives(make_pool):
    pool = make_pool(2)
    sub = Subscription("s")
    threading.Timer(0.05, deliver, (pool, sub, 9)).start()
    lease = sub.recv(2.0)
    assert lease is not None and lease.frame.frame_id == 9
    lease.release()


def test_close_releases_the_queue_and_wakes_recv(make_pool):
    pool = make_pool(3)
    sub = Subscription("s", maxlen=3)
    deliver(pool, sub, 0)
    deliver(pool, sub, 1)
    sub.close()
    assert pool.stats()["leases_outstanding"] == 0
    assert sub.recv(0.5) is None
    deliver(pool, sub, 2)  # delivered after close: released at once
    assert pool.stats()["leases_outstanding"] == 0
    waiter = Subscription("w")
    threading.Timer(0.05, waiter.close).start()
    assert waiter.recv(2.0) is None


def test_flush_counts_a_reason_when_given(make_pool):
    pool = make_pool(3)
    sub = Subscription("s", maxlen=3)
    deliver(pool, sub, 0)
    deliver(pool, sub, 1)
    assert sub.flush("stopped") == 2
    assert sub.dropped == {"stopped": 2} and pool.stats()["dropped"] == {"stopped": 2}


def test_maxlen_must_be_positive():
    with pytest.raises(ValueError):
        Subscription("s", maxlen=0)
