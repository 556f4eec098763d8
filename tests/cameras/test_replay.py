"""The replay camera plugin: record then replay gives the same bytes and timestamps; pacing,
looping, rebasing; hostile and damaged files refused with typed errors."""

from __future__ import annotations

import time

import numpy as np
import pytest

from plugin_host.errors import CameraConfigError, ReplayFormatError
from plugin_host.frames import ReplayReader, ReplayWriter
from plugins.cameras import replay
from plugins.cameras.replay import ReplayCamera
from plugins.cameras.synthetic import SyntheticCamera, synthetic_pattern


def record_synthetic(path, n=8, **kwargs):
    """Record ``n`` frames of a live synthetic camera; returns the frames' (metadata, bytes)."""
    cam = SyntheticCamera("road", **{"width": 32, "height": 16, "rate": 100.0, **kwargs})
    sub = cam.subscribe(maxlen=6)
    recorded = []
    with ReplayWriter(path, cam.layout, camera=cam.name, source="synthetic") as writer:
        cam.start()
        try:
            while len(recorded) < n:
                with sub.recv(2.0) as lease:
                    writer.write_lease(lease)
                    recorded.append((lease.frame, bytes(lease.buffer())))
        finally:
            cam.stop()
    return recorded


def receive(sub, n, timeout=2.0):
    out = []
    for _ in range(n):
        lease = sub.recv(timeout)
        assert lease is not None, f"only {len(out)} of {n} frames arrived"
        with lease:
            out.append((lease.frame, bytes(lease.buffer())))
    return out


def test_record_then_replay_gives_the_same_bytes_and_timestamps(tmp_path, cameras):
    path = tmp_path / "road.phf"
    recorded = record_synthetic(path)
    cam = cameras(ReplayCamera(path, pace="fast", timestamps="recorded", buffers=4))
    assert (cam.name, cam.layout) == ("road", recorded[0][0].layout)
    sub = cam.subscribe(maxlen=4)  # fast pace + a queue as deep as the pool: lossless
    cam.start()
    replayed = receive(sub, len(recorded))
    for (rec, rec_bytes), (rep, rep_bytes) in zip(recorded, replayed):
        assert (rep.frame_id, rep.timestamp_sof, rep.timestamp_eof) == \
            (rec.frame_id, rec.timestamp_sof, rec.timestamp_eof)
        assert rep_bytes == rec_bytes
        assert rep.pool_id == cam.pool.id and rep.pool_id != rec.pool_id
    # and the bytes are still the synthetic pattern of each frame id
    frame, data = replayed[-1]
    y = np.frombuffer(data, np.uint8)[:frame.strides[0] * 16].reshape(16, -1)[:, :32]
    assert np.array_equal(y, synthetic_pattern(frame.layout, frame.frame_id)["Y"])
    assert cam.finished.wait(2.0) and cam.error is None and cam.passes == 1
    assert cam.stats()["pool"]["dropped"] == {}


def test_recorded_pace_with_rebased_timestamps(tmp_path, cameras):
    path = tmp_path / "road.phf"
    recorded = record_synthetic(path, n=6)
    cam = cameras(ReplayCamera(path))  # pace recorded, timestamps rebased
    sub = cam.subscribe(maxlen=6)
    start = time.monotonic_ns()
    cam.start()
    replayed = receive(sub, 6)
    arrival = time.monotonic_ns()
    assert [f.frame_id for f, _ in replayed] == [f.frame_id for f, _ in recorded]
    rec_sof = np.array([f.timestamp_sof for f, _ in recorded])
    rep_sof = np.array([f.timestamp_sof for f, _ in replayed])
    np.testing.assert_array_equal(np.diff(rep_sof), np.diff(rec_sof))  # spacing kept exactly
    assert start <= rep_sof[0] and replayed[-1][0].timestamp_eof <= arrival
    # paced: the six frames took about as long as they did when recorded
    assert arrival - start >= 0.8 * (recorded[-1][0].timestamp_eof - rec_sof[0])


def test_a_rebased_loop_continues_ids_and_time(tmp_path, cameras):
    path = tmp_path / "road.phf"
    recorded = record_synthetic(path, n=3)
    span = recorded[-1][0].frame_id - recorded[0][0].frame_id + 1
    cam = cameras(ReplayCamera(path, pace="fast", loop=True, buffers=4))
    sub = cam.subscribe(maxlen=4)
    cam.start()
    received = receive(sub, 7)
    frames = [f for f, _ in received]
    ids = [f.frame_id for f in frames]
    first = [f.frame_id for f, _ in recorded]
    assert ids == first + [i + span for i in first] + [first[0] + 2 * span]
    sofs = [f.timestamp_sof for f in frames]
    assert sofs == sorted(sofs) and len(set(sofs)) == 7
    assert [data for _, data in received] == [recorded[i % 3][1] for i in range(7)]


def test_a_recorded_loop_repeats_ids_and_timestamps(tmp_path, cameras):
    path = tmp_path / "road.phf"
    recorded = record_synthetic(path, n=2)
    cam = cameras(ReplayCamera(path, pace="fast", loop=True, timestamps="recorded", buffers=4))
    sub = cam.subscribe(maxlen=4)
    cam.start()
    frames = [f for f, _ in receive(sub, 4)]
    assert [f.frame_id for f in frames] == [f.frame_id for f, _ in recorded] * 2
    assert frames[2].timestamp_sof < frames[1].timestamp_sof  # going backwards at the loop


def test_a_camera_with_no_subscriber_free_runs_and_stops_at_the_end(tmp_path, cameras):
    path = tmp_path / "road.phf"
    record_synthetic(path, n=3)
    cam = cameras(ReplayCamera(path, pace="fast"))
    cam.start()
    assert cam.finished.wait(2.0)
    assert cam.stats()["pool"]["produced"] == 3


def test_damaged_frame_data_stops_the_camera_with_a_typed_error(tmp_path, cameras):
    path = tmp_path / "road.phf"
    record_synthetic(path, n=3)
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF  # inside the last frame's pixels
    path.write_bytes(data)
    cam = cameras(ReplayCamera(path, pace="fast"))  # the structure is fine: accepted at open
    sub = cam.subscribe(maxlen=4)
    cam.start()
    assert len(receive(sub, 2)) == 2
    assert cam.finished.wait(2.0)
    assert isinstance(cam.error, ReplayFormatError) and "CRC-32 mismatch" in str(cam.error)
    assert sub.recv(0.05) is None
    with pytest.raises(ReplayFormatError, match="CRC-32"):
        ReplayCamera(path, verify=True)  # or refused at open, reading every frame once


def test_the_plugin_refuses_hostile_files_before_allocating(tmp_path):
    bad = tmp_path / "bad.phf"
    bad.write_bytes(b"\x89PHFRM\r\n" + (1).to_bytes(4, "little") + (2**31).to_bytes(4, "little")
                    + bytes(16))
    with pytest.raises(ReplayFormatError, match="metadata length"):
        replay.plugin_host_add_cameras(config={"name": "replay", "config": {"file": str(bad)}})
    empty = tmp_path / "empty.phf"
    with ReplayWriter(empty, SyntheticCamera(width=8, height=8).layout, camera="road"):
        pass
    with pytest.raises(CameraConfigError, match="holds no frames"):
        replay.plugin_host_add_cameras(config={"name": "replay", "config": {"file": str(empty)}})
    with pytest.raises(CameraConfigError, match="file is required"):
        replay.plugin_host_add_cameras(config={"name": "replay", "config": {}})
    with pytest.raises(CameraConfigError, match="pace must be one of"):
        replay.plugin_host_add_cameras(config={"name": "replay", "config": {
            "file": str(empty), "pace": "slow"}})


def test_several_replay_cameras_and_names(tmp_path):
    path = tmp_path / "road.phf"
    record_synthetic(path, n=1)
    made = replay.plugin_host_add_cameras(config={"name": "replay", "config": {
        "file": str(path), "cameras": [{}, {"name": "copy", "loop": True}]}})
    try:
        assert [(c.name, c.loop) for c in made] == [("road", False), ("copy", True)]
        with ReplayReader(path) as reader:
            assert reader.camera == "road" and reader.source == "synthetic"
    finally:
        for c in made:
            c.close()


def test_the_file_is_open_only_while_playing_and_checked_again_at_start(tmp_path, cameras):
    path = tmp_path / "road.phf"
    record_synthetic(path, n=2)
    cam = cameras(ReplayCamera(path, pace="fast"))
    assert cam.reader is None
    cam.start()
    assert cam.reader is not None
    cam.stop()
    assert cam.reader is None
    record_synthetic(tmp_path / "other.phf", n=2, width=64)
    (tmp_path / "other.phf").replace(path)
    with pytest.raises(ReplayFormatError, match="layout changed"):
        cam.start()
    assert cam.reader is None and not cam.running
