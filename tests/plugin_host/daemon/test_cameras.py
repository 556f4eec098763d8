"""Several cameras in the daemon: frames matched by timestamp, one worker (and recurrent
state) per camera, outputs tagged with the camera, per-camera reporting, a worker killed
mid-call in one stream while the others go on."""

from __future__ import annotations

import collections
import json
import os

import pytest

from plugin_host.daemon.metrics import render
from plugin_host.errors import PolicyError

from .conftest import events, multi_camera_policy, quiet_daemon, running, wait_until
from .test_metrics import parse_text_format
from .test_swap import _accept, _build, own_state  # noqa: F401 (a fixture)
from .worker_kill import kill_during_call

THREE = [{"name": "road"}, {"name": "wide"}, {"name": "driver"}]


def test_three_cameras_matched_each_with_its_own_worker_and_report(demo_state):
    policy_path, state = demo_state
    policy = multi_camera_policy(policy_path, THREE)
    daemon, lines = quiet_daemon(policy, state, frames=12)
    daemon.load()
    assert [s.name for s in daemon.streams] == ["road", "wide", "driver"]
    pids = [s.executor.pid for s in daemon.streams]
    assert len(set(pids)) == 3  # one sandbox worker, hence one recurrent state, per camera
    # the policy's default co-location ("auto") is off: three workers would queue on one CPU
    assert [s.executor.cpu for s in daemon.streams] == [None] * 3
    assert events(lines, "loaded")[0]["cpu"] is None
    messages = []
    daemon.plugins.broker.topics["model"].connect(messages.append)
    daemon.streams[1].contract.request_reset("test")  # one camera's state only
    metrics = {}
    daemon.streams[2].run = _wrap_once(daemon.streams[2].run,
                                       lambda: metrics.update(parse_text_format(render(daemon))))
    summary = daemon.run()

    assert set(summary["cameras"]) == {"road", "wide", "driver"}
    for name, cam in summary["cameras"].items():
        assert cam["frames_run"] >= 12, (name, cam)
        assert cam["dropped"] == cam["gap_dropped"] + cam["not_run"]
        assert cam["model_execution_ms"]["p50"] > 0
    pids = [cam["worker_pid"] for cam in summary["cameras"].values()]
    assert all(type(pid) is int for pid in pids) and len(set(pids)) == 3  # kept after the stop
    assert summary["frames_run"] == sum(c["frames_run"] for c in summary["cameras"].values())
    assert summary["cameras"]["wide"]["resets_by_reason"] == {"explicit": 1}
    assert summary["cameras"]["road"]["resets_by_reason"] == {}
    assert summary["resets_by_reason"] == {"explicit": 1}
    assert summary["matched_sets"] >= 12 and summary["max_skew_ms"] == 10.0
    # outputs: one message per camera per set, tagged, within the sync limit of each other
    sets = collections.defaultdict(dict)
    for m in messages:
        sets[m.data["set_id"]][m.data["camera"]] = m.data
        assert set(m.data["outputs"]) >= {"plan"}
    full = [s for s in sets.values() if len(s) == 3]
    assert len(full) >= 12
    for s in full:
        sofs = [d["timestamp_sof"] for d in s.values()]
        assert max(sofs) - min(sofs) <= 10e6
    # per-camera metrics, labelled by camera
    p = "plugin_host_daemon"
    for name in ("road", "wide", "driver"):
        assert metrics[(f"{p}_stream_frames_run_total", frozenset({("camera", name)}))] >= 2
    assert metrics[(f"{p}_stream_resets_total",
                    frozenset({("camera", "wide"), ("reason", "explicit")}))] == 1
    assert summary["leaks_at_stop"] == 0 and summary["leases_outstanding"] == 0
    for camera in daemon.cameras:
        assert camera.pool is None or camera.pool.stats()["leases_outstanding"] == 0
    stats = events(lines, "stats")
    assert not stats or set(stats[-1]["cameras"]) == {"road", "wide", "driver"}


def _wrap_once(run, hook, call=3):
    """``run`` that calls ``hook`` once, after its ``call``-th frame (the sets before it are
    complete: every stream ran ``call - 1`` frames at least)."""
    calls = []

    def wrapped(lease):
        result = run(lease)
        calls.append(True)
        if len(calls) == call:
            hook()
        return result
    return wrapped


@pytest.mark.parametrize("phase_ms, max_skew_ms, matched", [(5.0, 10.0, True),
                                                            (25.0, 10.0, False),
                                                            (5.0, 2.0, False)])
def test_the_sync_limit_decides_which_frames_match(demo_state, phase_ms, max_skew_ms, matched):
    policy_path, state = demo_state
    cameras = [{"name": "road"}, {"name": "wide", "phase_ms": phase_ms}]
    policy = multi_camera_policy(policy_path, cameras, max_skew_ms=max_skew_ms,
                                 name=f"sync{phase_ms}-{max_skew_ms}.toml")
    daemon, _ = quiet_daemon(policy, state, duration=1.5)
    daemon.load()
    messages = []
    daemon.plugins.broker.topics["model"].connect(messages.append)
    summary = daemon.run()
    road, wide = summary["cameras"]["road"], summary["cameras"]["wide"]
    # every set that ran lies within the limit (timestamp_sof is stamped when the camera
    # thread wakes, so under load a few frames may drift into or out of the limit)
    sets = collections.defaultdict(list)
    for m in messages:
        sets[m.data["set_id"]].append(m.data["timestamp_sof"])
    for sofs in sets.values():
        assert max(sofs) - min(sofs) <= max_skew_ms * 1e6
    if matched:
        assert summary["matched_sets"] >= 10
        assert road["frames_run"] >= 10 and wide["frames_run"] >= 10
        assert summary["unmatched"] <= summary["matched_sets"] // 4
    else:
        # frames that cannot match are released, counted as dropped and reported
        assert summary["unmatched"] >= 10
        assert summary["matched_sets"] <= summary["unmatched"] // 5
        assert summary["camera_dropped"].get("out_of_sync", 0) == summary["unmatched"]
        assert road["unmatched"] + wide["unmatched"] == summary["unmatched"]
    assert summary["leaks_at_stop"] == 0 and summary["leases_outstanding"] == 0


def test_worker_killed_mid_call_in_one_stream_the_others_go_on(demo_state):
    policy_path, state = demo_state
    policy = multi_camera_policy(policy_path, THREE[:2])
    daemon, lines = quiet_daemon(policy, state, frames=10)
    daemon.load()
    wide = daemon.streams[1]
    road_pid, wide_pid = daemon.streams[0].executor.pid, wide.executor.pid
    kill = kill_during_call(wide.executor, after=3,
                            on_next=lambda: (wide.camera.pool.stats(), wide.executor.pid,
                                             daemon.streams[0].executor.pid))
    summary = daemon.run()
    assert kill.killed_pid == wide_pid and kill.raised
    pool, new_pid, road_now = kill.on_next
    assert new_pid not in (None, wide_pid)
    assert road_now == road_pid  # road's worker was never touched
    assert pool["leases_outstanding"] <= 2 and pool["leaks"] == 0
    cams = summary["cameras"]
    assert cams["wide"]["worker_restarts"] == 1 and cams["road"]["worker_restarts"] == 0
    assert cams["wide"]["resets_by_reason"] == {"worker restart": 1}
    # (road may see a frame gap: its frames wait while wide's worker restarts)
    assert "worker restart" not in cams["road"]["resets_by_reason"]
    assert cams["wide"]["not_run"] == 1 and cams["wide"]["frames_run"] >= 10
    died = events(lines, "worker_died")
    assert [d["camera"] for d in died] == ["wide"]
    assert summary["leaks_at_stop"] == 0 and summary["leases_outstanding"] == 0


def test_unknown_camera_in_the_policy_is_refused_with_file_line_key(demo_state):
    policy_path, state = demo_state
    policy = multi_camera_policy(policy_path, THREE[:2], use=["road", "rear"],
                                 name="unknown.toml")
    daemon, lines = quiet_daemon(policy, state, frames=1)
    with pytest.raises(PolicyError) as info:
        daemon.load()
    text = str(info.value)
    assert f"{policy}:" in text and "cameras.use" in text and "'rear'" in text
    assert "road, wide" in text
    assert not events(lines, "loaded")


def test_camera_option_runs_one_camera_of_several(demo_state):
    policy_path, state = demo_state
    policy = multi_camera_policy(policy_path, THREE, name="one_of_three.toml")
    daemon, lines = quiet_daemon(policy, state, frames=3, camera="driver")
    cpus = os.sched_getaffinity(0)
    daemon.load()
    # one camera runs: the policy's default co-location ("auto") is in force
    last = max(cpus)
    assert daemon.streams[0].executor.cpu == last and events(lines, "loaded")[0]["cpu"] == last
    summary = daemon.run()
    assert list(summary["cameras"]) == ["driver"] and summary["frames_run"] >= 3
    assert os.sched_getaffinity(0) == cpus  # the frame loop's thread is given its CPUs back


def test_artifact_swap_switches_every_camera_between_two_sets(own_state, tmp_path):
    policy_path, state = own_state
    policy = multi_camera_policy(policy_path, THREE[:2], name="swap_cameras.toml")
    artifact = state / "demo" / "demo.pha"
    new = tmp_path / "demo-1.1.0.pha"
    _build(new, state, "1.1.0", seed=1)
    daemon, lines = quiet_daemon(policy, state, duration=60.0, swap_poll=0.2)
    daemon.load()
    olds = [s.executor for s in daemon.streams]
    with running(daemon) as result:
        wait_until(lambda: daemon._frames_run() >= 5, 60.0)
        _accept(new, state, artifact)
        os.replace(new, artifact)
        wait_until(lambda: daemon.artifact_swaps == 1, 60.0)
        at_swap = daemon._frames_run()
        wait_until(lambda: daemon._frames_run() >= at_swap + 5, 60.0)
        versions = [s.executor.manifest.version for s in daemon.streams]
        fresh = [s.executor not in olds for s in daemon.streams]
    assert versions == ["1.1.0", "1.1.0"] and all(fresh)
    for name in ("road", "wide"):
        assert result["cameras"][name]["resets_by_reason"].get("artifact swap") == 1, name
    swapped = events(lines, "artifact_swapped")
    assert len(swapped) == 1 and len(set(swapped[0]["worker_pids"])) == 2
    assert result["leaks_at_stop"] == 0 and result["worker_restarts"] == 0


def test_cli_prints_every_camera_and_logs_per_camera_stats(demo_state):
    import subprocess
    import sys

    policy_path, state = demo_state
    policy = multi_camera_policy(policy_path, THREE, name="cli_cameras.toml")
    proc = subprocess.run([sys.executable, "-m", "plugin_host.cli", "run", "--policy",
                           str(policy), "--state-dir", str(state), "--frames", "5",
                           "--stats-interval", "0.2"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert "on cameras 'road' (512x256 NV12), 'wide' (512x256 NV12), 'driver' (512x256 NV12), " \
           "matched within 10 ms" in out
    assert "matched sets " in out and "unmatched frames " in out
    for name in ("road", "wide", "driver"):
        assert f"  camera {name}: frames in " in out, out
    summary = [json.loads(line) for line in proc.stderr.splitlines()
               if '"event":"summary"' in line][-1]
    assert set(summary["cameras"]) == {"road", "wide", "driver"}
    assert all(c["frames_run"] >= 5 for c in summary["cameras"].values())
    stops = [json.loads(line) for line in proc.stderr.splitlines()
             if '"event":"camera_stop"' in line]
    assert sorted(e["camera"] for e in stops) == ["driver", "road", "wide"]
    assert all(e["leases_outstanding"] == 0 for e in stops)
