"""The camera plugins as the host loads them: entry points, policy kind, config, and the
camera.publish capability announcing starts and stops."""

from __future__ import annotations

import pytest

from plugin_host.errors import PluginError
from plugin_host.frames import Camera, ReplayWriter
from plugin_host.plugins import builtin_entry_points
from plugin_host.testing import minimal_policy
from plugins.cameras.synthetic import SyntheticCamera


def test_both_are_built_in_entry_points():
    eps = {ep.name: ep.value for ep in builtin_entry_points()}
    assert eps["synthetic"] == "plugins.cameras.synthetic"
    assert eps["replay"] == "plugins.cameras.replay"


def test_loaded_through_a_policy_with_their_config(plugin_host_manager, tmp_path):
    path = tmp_path / "road.phf"
    cam = SyntheticCamera("road", width=8, height=4)
    with ReplayWriter(path, cam.layout, camera="road") as w:
        w.write(0, 0, 0, bytes(cam.layout.nbytes))
    host = plugin_host_manager(minimal_policy(
        {"name": "synthetic", "kind": "camera", "capabilities": ["camera.publish"],
         "config": {"name": "front", "width": 64, "height": 32, "rate": 50}},
        {"name": "replay", "kind": "camera", "config": {"file": str(path), "name": "again"}}),
        entry_points=True)
    cameras = {c.name: c for c in host.loaded.cameras()}
    try:
        assert sorted(cameras) == ["again", "front"]
        assert all(isinstance(c, Camera) for c in cameras.values())
        assert cameras["front"].layout.describe() == "64x32 NV12"
        assert cameras["front"].publisher is not None   # granted
        assert cameras["again"].publisher is None       # not granted: nothing announced
        topic = host.subscribe("camera")
        front = cameras["front"]
        front.start()
        pool_id = front.pool.id
        front.stop()
        start, stop = topic.recv(1), topic.recv(1)
        assert (start.publisher, start.data["event"], start.data["pool_id"]) == \
            ("synthetic", "start", pool_id)
        assert (stop.data["event"], stop.data["camera"]) == ("stop", "front")
        assert "produced" in stop.data["stats"]
        uses = host.audit_records(plugin="synthetic", capability="camera.publish", action="use")
        assert len(uses) == 2
        # the replay camera never asked for what it does not hold: no denial recorded
        assert host.audit_records(plugin="replay", action="deny") == []
    finally:
        for c in cameras.values():
            getattr(c, "close", c.stop)()


def test_a_camera_plugin_under_another_kind_is_refused(plugin_host_manager):
    with pytest.raises(PluginError, match="may not implement plugin_host_add_cameras"):
        plugin_host_manager(minimal_policy({"name": "synthetic", "kind": "sink"}),
                            entry_points=True)
