"""The synthetic camera plugin: a pattern that is a function of frame_id, real timestamps at
the configured rate, pools renewed on restart, configuration refused when wrong."""

from __future__ import annotations

import time

import numpy as np
import pytest

from plugin_host.errors import CameraConfigError, CameraError
from plugin_host.frames import Camera, FrameLayout, FrameSync
from plugins.cameras import synthetic
from plugins.cameras.synthetic import SyntheticCamera, synthetic_pattern

SMALL = {"width": 32, "height": 16, "rate": 100.0}


def test_the_pattern_is_a_function_of_frame_id_only():
    layout = FrameLayout.create("NV12", 64, 32)
    a, b = synthetic_pattern(layout, 3), synthetic_pattern(layout, 3)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    c = synthetic_pattern(layout, 4)
    assert not np.array_equal(a["Y"], c["Y"])
    # the documented values
    y, uv = a["Y"], a["UV"]
    assert y[1, 9] == (1 + 9 + 4 * 3) % 256
    assert y[8, 24] == 255 and y[8, 23] == (8 + 23 + 12) % 256  # the box: rows 8..11, cols 24..27
    assert (uv[2, 5, 0], uv[2, 5, 1]) == ((5 + 6) % 256, (2 + 9) % 256)
    assert int.from_bytes(y[0, :8].tobytes(), "little") == 3  # the frame id stamp
    rgb = synthetic_pattern(FrameLayout.create("RGB", 32, 16), 2)["RGB"]
    assert tuple(rgb[3, 9]) == ((9 + 8) % 256, (3 + 4) % 256, (3 + 9 + 2) % 256)
    gray = synthetic_pattern(FrameLayout.create("GRAY", 32, 16), 300)["Y"]
    assert gray[1, 9] == (1 + 9 + 1200) % 256


def test_the_camera_produces_the_pattern_with_real_timestamps(cameras):
    cam = cameras(SyntheticCamera("road", **SMALL, exposure_ms=2.0))
    assert isinstance(cam, Camera)
    sub = cam.subscribe(maxlen=4)
    before = time.monotonic_ns()
    cam.start()
    frames = []
    for _ in range(6):
        with sub.recv(2.0) as lease:
            expected = synthetic_pattern(cam.layout, lease.frame.frame_id)
            assert all(np.array_equal(lease.planes()[k], expected[k]) for k in expected)
            frames.append(lease.frame)
    after = time.monotonic_ns()
    ids = [f.frame_id for f in frames]
    assert ids == sorted(ids) and ids[0] == 0 and len(set(ids)) == 6
    for f in frames:
        assert before <= f.timestamp_sof < f.timestamp_eof <= after
        # the exposure, plus the thread's wake-up delay (timestamp_sof is the tick itself)
        assert 1.9e6 <= f.timestamp_eof - f.timestamp_sof < 10e6
        assert f.timestamp_sof % 10_000_000 == 0  # ticks on the 10 ms grid
    gaps = np.diff([f.timestamp_sof for f in frames]) / np.diff(ids)
    assert np.median(gaps) == pytest.approx(10e6, rel=0.2)  # 100 Hz
    stats = cam.stats()
    assert stats["pool"]["produced"] >= 6 and stats["pool"]["delivered"] == 6


def test_the_default_is_1928x1208_nv12_at_20_hz(cameras):
    [cam] = synthetic.plugin_host_add_cameras(config={"name": "synthetic", "config": {}})
    cameras(cam)
    assert (cam.name, cam.layout.format, cam.layout.width, cam.layout.height, cam.rate) == \
        ("synthetic", "NV12", 1928, 1208, 20.0)
    sub = cam.subscribe(conflate=True)
    cam.start()
    with sub.recv(2.0) as lease:
        assert lease.planes()["Y"].shape == (1208, 1928)
        assert np.array_equal(lease.planes()["UV"],
                              synthetic_pattern(cam.layout, lease.frame.frame_id)["UV"])


def test_a_restart_gets_a_new_pool_id_and_restarts_frame_ids(cameras):
    cam = cameras(SyntheticCamera("road", **SMALL))
    sub = cam.subscribe(conflate=True)
    cam.start()
    first = sub.recv(2.0)
    old_id = first.frame.pool_id
    assert old_id == cam.pool.id
    outstanding = cam.stop()  # the lease we hold is reported, and stays valid
    assert [r.frame_id for r in outstanding] == [first.frame.frame_id]
    first.check()
    first.release()
    cam.start()
    with sub.recv(2.0) as lease:
        assert lease.frame.pool_id != old_id and lease.frame.pool_id == cam.pool.id
        assert lease.frame.frame_id < 5
    assert cam.starts == 2
    with pytest.raises(CameraError, match="already started"):
        cam.start()


def test_a_slow_consumer_costs_frames_not_buffers(cameras):
    cam = cameras(SyntheticCamera("road", width=16, height=8, rate=200.0, buffers=3))
    sub = cam.subscribe(maxlen=2)
    held = []
    cam.start()
    held.append(sub.recv(2.0))
    held.append(sub.recv(2.0))  # two frames held, the third buffer queued: the camera drops
    time.sleep(0.1)
    stats = cam.stats()["pool"]
    assert stats["leases_outstanding"] <= 3
    assert stats["dropped"].get("no_free_buffer", 0) + stats["dropped"].get("queue_full", 0) > 0
    for lease in held:
        lease.release()


def test_frames_of_synthetic_cameras_at_one_rate_can_be_synced(cameras):
    road = cameras(SyntheticCamera("road", **SMALL))
    wide = cameras(SyntheticCamera("wide", **SMALL))
    sync = FrameSync([road.subscribe("road", conflate=True),
                      wide.subscribe("wide", conflate=True)])
    road.start()
    time.sleep(0.013)  # started out of phase: the ticks still line up
    wide.start()
    for _ in range(3):
        group = sync.recv(2.0)
        assert group is not None
        sofs = [lease.frame.timestamp_sof for lease in group.values()]
        assert max(sofs) - min(sofs) <= 10_000_000
        for lease in group.values():
            lease.release()
    sync.close()


def test_several_cameras_from_one_config():
    made = synthetic.plugin_host_add_cameras(config={"name": "synthetic", "config": {
        "width": 64, "height": 32, "rate": 30,
        "cameras": [{"name": "road"}, {"name": "wide", "format": "RGB"},
                    {"name": "driver", "format": "GRAY", "width": 16, "buffers": 2}]}})
    assert [(c.name, c.layout.describe(), c.rate, c.buffers) for c in made] == [
        ("road", "64x32 NV12", 30.0, 8), ("wide", "64x32 RGB", 30.0, 8),
        ("driver", "16x32 GRAY", 30.0, 2)]


@pytest.mark.parametrize("config, match", [
    ({"widht": 10}, "unknown key"),
    ({"width": 33}, "even"),
    ({"width": "64"}, "must be an integer"),
    ({"format": "YUYV"}, "must be one of"),
    ({"rate": 0}, r"must be in \(0"),
    ({"rate": True}, "must be a number"),
    ({"buffers": 0}, r"must be in \[1, 64\]"),
    ({"rate": 100, "exposure_ms": 10}, "shorter than the frame period"),
    ({"cameras": [{"name": "a"}, {"name": "a"}]}, "two cameras are named 'a'"),
    ({"cameras": []}, "non-empty list"),
    ({"cameras": [{"bogus": 1}]}, r"config.cameras\[0\]: unknown key"),
])
def test_bad_configuration_is_refused(config, match):
    with pytest.raises(CameraConfigError, match=match):
        synthetic.plugin_host_add_cameras(config={"name": "synthetic", "config": config})


def test_a_lease_held_too_long_is_reported_as_a_leak(cameras, caplog):
    import logging

    cam = cameras(SyntheticCamera("road", **SMALL, leak_age_s=0.05))
    sub = cam.subscribe(conflate=True)
    cam.start()
    kept = sub.recv(2.0)
    with caplog.at_level(logging.WARNING, logger="plugin_host.frames"):
        time.sleep(0.15)  # the camera keeps producing meanwhile, and checks
        [leak] = cam.pool.leaks()
    assert (leak.frame_id, leak.holder) == (kept.frame.frame_id, sub.name)
    assert cam.stats()["pool"]["leaks"] == 1
    assert any("leaked?" in r.getMessage() for r in caplog.records)
    kept.release()
    assert cam.pool.leaks() == []
