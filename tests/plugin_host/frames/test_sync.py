"""FrameSync: frames of several cameras matched by timestamp_sof within a skew limit."""

from __future__ import annotations

import pytest

from plugin_host.frames import FrameLayout, FramePool, FrameSync, Subscription

MS = 1_000_000


@pytest.fixture
def cams():
    pools = {name: FramePool(FrameLayout.create("GRAY", 8, 2), 6, camera=name)
             for name in ("road", "wide")}
    subs = {name: Subscription(name, maxlen=5) for name in pools}
    yield pools, subs
    for pool in pools.values():
        pool.close()


def emit(cams, name, frame_id, sof_ms):
    pools, subs = cams
    w = pools[name].begin_frame()
    frame = w.commit(frame_id, int(sof_ms * MS), int(sof_ms * MS) + MS)
    subs[name]._deliver(pools[name].lease(frame, name))


def test_frames_within_the_limit_are_matched(cams):
    emit(cams, "road", 0, 100.0)
    emit(cams, "wide", 0, 109.0)
    sync = FrameSync(cams[1])
    group = sync.recv(0)
    assert {k: v.frame.frame_id for k, v in group.items()} == {"road": 0, "wide": 0}
    for lease in group.values():
        lease.release()
    assert sync.matched == 1 and sync.unmatched == {}


def test_frames_outside_the_limit_are_released_and_counted(cams):
    pools, subs = cams
    emit(cams, "road", 0, 100.0)
    emit(cams, "road", 1, 150.0)
    emit(cams, "wide", 0, 130.0)   # 30 ms from both road frames: matches neither
    emit(cams, "wide", 1, 151.0)
    sync = FrameSync(subs)           # default limit: 10 ms, as openpilot
    group = sync.recv(0)
    assert {k: v.frame.frame_id for k, v in group.items()} == {"road": 1, "wide": 1}
    assert sync.unmatched == {"road": 1, "wide": 1}
    assert pools["road"].stats()["dropped"] == {"out_of_sync": 1}
    assert pools["wide"].stats()["dropped"] == {"out_of_sync": 1}
    for lease in group.values():
        lease.release()
    assert all(p.stats()["leases_outstanding"] == 0 for p in pools.values())


def test_the_limit_is_configurable_and_inclusive(cams):
    emit(cams, "road", 0, 100.0)
    emit(cams, "wide", 0, 125.0)
    sync = FrameSync(cams[1], max_skew_ms=25.0)
    group = sync.recv(0)
    assert group is not None and sync.unmatched == {}
    for lease in group.values():
        lease.release()


def test_timeout_returns_none_and_keeps_what_it_holds(cams):
    pools, subs = cams
    emit(cams, "road", 0, 100.0)
    sync = FrameSync(subs)
    assert sync.recv(0.02) is None
    assert sync.stats()["held"] == ["road"]
    emit(cams, "wide", 0, 101.0)
    group = sync.recv(0)
    assert sorted(group) == ["road", "wide"]
    for lease in group.values():
        lease.release()
    emit(cams, "road", 1, 200.0)
    sync.recv(0)
    sync.close()  # releases the held frame
    assert pools["road"].stats()["leases_outstanding"] == 0


def test_a_list_of_subscriptions_is_keyed_by_name(cams):
    sync = FrameSync(list(cams[1].values()))
    assert sorted(sync.subscriptions) == ["road", "wide"]
    with pytest.raises(ValueError):
        FrameSync([])


def test_with_conflation_a_held_frame_gives_way_to_its_cameras_newer_one():
    pools = {name: FramePool(FrameLayout.create("GRAY", 8, 2), 6, camera=name)
             for name in ("road", "wide")}
    subs = {name: Subscription(name, conflate=True) for name in pools}
    cams = (pools, subs)
    try:
        sync = FrameSync(subs)
        emit(cams, "road", 0, 100.0)
        assert sync.recv(0) is None             # wide stalls: road's frame is held
        emit(cams, "road", 1, 150.0)
        emit(cams, "road", 2, 200.0)            # conflated in the subscription: 1 dropped
        assert sync.recv(0) is None
        assert sync.stats()["held"] == ["road"]
        assert pools["road"].stats()["leases_outstanding"] == 1  # only the newest is held
        assert sync.superseded == {"road": 1} and sync.unmatched == {}
        assert pools["road"].stats()["dropped"] == {"conflated": 2}
        emit(cams, "wide", 0, 201.0)
        group = sync.recv(0)
        assert {k: v.frame.frame_id for k, v in group.items()} == {"road": 2, "wide": 0}
        for lease in group.values():
            lease.release()
        assert all(p.stats()["leases_outstanding"] == 0 for p in pools.values())
    finally:
        for pool in pools.values():
            pool.close()
