"""A camera that goes silent: reported once as stalled, again when its frames come back, and
counted in the summary, the stats event and the metrics; the daemon keeps waiting for it."""

from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace

from plugin_host.commands.run import format_summary
from plugin_host.daemon import Daemon, DaemonOptions, EventLog, LineSink
from plugin_host.daemon.metrics import render
from plugin_host.daemon.stream import CameraStream
from plugin_host.policy import load_policy


def _watcher(pool):
    events = []
    stream = SimpleNamespace(name="road", camera=SimpleNamespace(pool=pool), stalls=0,
                             stalled_since=None, _heard=None, _lock=threading.Lock(),
                             _emit=lambda kind, **detail: events.append((kind, detail)))
    return stream, events


def test_silence_past_the_stall_time_is_reported_once_and_the_return_too():
    pool = SimpleNamespace(produced=0)
    stream, events = _watcher(pool)
    watch = CameraStream.watch
    watch(stream, 100.0, 1.0)  # the first look: the clock starts
    pool.produced = 3
    watch(stream, 100.5, 1.0)
    watch(stream, 101.4, 1.0)  # 0.9 s of silence: not yet
    assert events == [] and stream.stalls == 0
    watch(stream, 101.5, 1.0)
    watch(stream, 103.0, 1.0)  # still silent: said once
    assert events == [("camera_stalled", {"camera": "road", "silent_ms": 1000,
                                          "stall_ms": 1000, "frames_produced": 3})]
    assert (stream.stalls, stream.stalled_since) == (1, 100.5)
    pool.produced = 4
    watch(stream, 103.25, 1.0)
    assert events[1] == ("camera_resumed", {"camera": "road", "silent_ms": 2750,
                                            "frames_produced": 4})
    assert (stream.stalls, stream.stalled_since) == (1, None)
    watch(stream, 104.0, 1.0)  # 0.75 s: fine again
    assert len(events) == 2


def test_a_restarted_camera_is_heard_even_with_the_same_count():
    stream, events = _watcher(SimpleNamespace(produced=5))
    CameraStream.watch(stream, 0.0, 1.0)
    CameraStream.watch(stream, 2.0, 1.0)
    assert [kind for kind, _ in events] == ["camera_stalled"]
    stream.camera.pool = SimpleNamespace(produced=5)  # a new pool: the camera restarted
    CameraStream.watch(stream, 2.5, 1.0)
    assert [kind for kind, _ in events] == ["camera_stalled", "camera_resumed"]


def test_the_daemon_reports_a_camera_that_stops_producing(demo_state):
    policy_path, state = demo_state
    text = policy_path.read_text()
    assert "max_skew_ms = 10.0" in text
    policy = policy_path.parent / "stall.toml"
    policy.write_text(text.replace("max_skew_ms = 10.0", "max_skew_ms = 10.0\nstall_ms = 300",
                                   1))
    sink = LineSink()
    daemon = Daemon(load_policy(policy, state_dir=state), state_dir=state,
                    events=EventLog(sink), say=lambda _: None,
                    options=DaemonOptions(frames=25, stats_interval=0.2))
    daemon.load()
    camera = daemon.camera
    publish, published, scraped = camera._publish, [0], []

    def publish_then_freeze(frame):  # the camera's thread hangs for 1 s after frame 10
        publish(frame)
        published[0] += 1
        if published[0] == 10:
            time.sleep(0.5)
            scraped.append(render(daemon))  # from the camera's thread, mid-stall
            time.sleep(0.5)

    camera._publish = publish_then_freeze
    summary = daemon.run()
    events = [json.loads(line) for line in sink.lines]
    stalled = [e for e in events if e["event"] == "camera_stalled"]
    resumed = [e for e in events if e["event"] == "camera_resumed"]
    assert len(stalled) == 1 and len(resumed) == 1, [e["event"] for e in events]
    assert stalled[0]["camera"] == camera.name and stalled[0]["stall_ms"] == 300
    assert 300 <= stalled[0]["silent_ms"] < 1000
    assert 900 <= resumed[0]["silent_ms"] < 5000
    assert summary["stalls"] == 1 and summary["cameras"][camera.name]["stalls"] == 1
    assert summary["frames_run"] >= 25 and summary["stop_reason"] == "frames"
    assert f'plugin_host_daemon_stream_stalled{{camera="{camera.name}"}} 1' in scraped[0]
    assert f'plugin_host_daemon_stream_stalls_total{{camera="{camera.name}"}} 1' in scraped[0]
    stats = [e for e in events if e["event"] == "stats"]
    assert stats[-1]["stalls"] == 1
    assert ", camera stalls 1\n" in format_summary(summary)
