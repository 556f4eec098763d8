"""Soak: the daemon runs for ``SOAK_SECONDS`` (default 5 s in the default suite) while the
host's and the workers' RSS (from /proc) and the pools' lease counts are sampled; after a
warm-up, the last third of the samples must not have grown past the first third (with a
tolerance), frames must keep flowing, and nothing may leak. Two modes: the demo policy (one
camera, 1928x1208) and three cameras matched by timestamp (``SOAK_CAMERA_SIZE``, default
512x256 in the default suite; ``make soak`` runs 1928x1208).

Longer runs: ``make soak`` (10 minutes) or ``SOAK_SECONDS=600 .venv/bin/python -m pytest -q
tests/plugin_host/daemon/test_soak.py -s`` (``-s`` prints the samples' summary).
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from plugin_host.daemon import Daemon, DaemonOptions, EventLog, LineSink
from plugin_host.policy import load_policy

from .conftest import multi_camera_policy

SOAK_SECONDS = float(os.environ.get("SOAK_SECONDS", "5"))
SOAK_CAMERA_SIZE = tuple(int(v) for v in os.environ.get("SOAK_CAMERA_SIZE", "512x256").split("x"))
#: growth allowed between the first and the last third (bytes): allocator noise, not a leak
RSS_TOLERANCE = 16 << 20


def _rss(pid: int | str) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


@pytest.mark.parametrize("cameras", [1, 3])
def test_soak_rss_and_leases_stay_flat(demo_state, cameras):
    policy_path, state = demo_state
    if cameras > 1:
        width, height = SOAK_CAMERA_SIZE
        policy_path = multi_camera_policy(
            policy_path, [{"name": n} for n in ("road", "wide", "driver")[:cameras]],
            width=width, height=height, name="soak_cameras.toml")
    sink = LineSink()
    lines = sink.lines

    warmup = min(2.0, SOAK_SECONDS * 0.3)
    daemon = Daemon(load_policy(policy_path, state_dir=state), state_dir=state,
                    events=EventLog(sink), say=lambda _: None,
                    options=DaemonOptions(duration=SOAK_SECONDS + warmup, stats_interval=60))
    daemon.load()
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(daemon.run()))
    thread.start()
    samples = []  # (t, host rss, worker rss, leases outstanding, frames run), per camera
    try:
        start = time.monotonic()
        while thread.is_alive():
            time.sleep(0.1)
            t = time.monotonic() - start
            if t < warmup:
                continue
            row = []
            for stream in daemon.streams:
                pool = stream.camera.pool
                if pool is None or pool.closed or stream.executor.pid is None:
                    break
                try:
                    worker = _rss(stream.executor.pid)
                except (OSError, AssertionError):
                    break  # between worker lives
                row.append((worker, pool.stats()["leases_outstanding"],
                            stream.stats.frames_run))
            if len(row) == len(daemon.streams):
                samples.append((t, _rss("self"), row))
    finally:
        daemon.request_stop("test")
        thread.join(timeout=60)
    assert result.get("stop_reason") == "duration", result
    assert len(samples) >= 9, samples
    n = len(samples) // 3
    first, last = samples[:n], samples[-n:]
    host_first, host_last = max(s[1] for s in first), max(s[1] for s in last)
    print(f"\nsoak {SOAK_SECONDS:g} s, {cameras} camera(s), {len(samples)} samples: host RSS "
          f"{host_first >> 20} -> {host_last >> 20} MiB, frames run {result['frames_run']}, "
          f"dropped {result['dropped']}, unmatched {result['unmatched']}, deadline misses "
          f"{result['deadline_misses']}")
    assert host_last <= host_first + RSS_TOLERANCE, (host_first, host_last)
    for i, stream in enumerate(daemon.streams):
        worker_first = max(s[2][i][0] for s in first)
        worker_last = max(s[2][i][0] for s in last)
        print(f"  {stream.name}: worker RSS {worker_first >> 20} -> {worker_last >> 20} MiB, "
              f"{result['cameras'][stream.name]}")
        assert worker_last <= worker_first + RSS_TOLERANCE, (stream.name, worker_first,
                                                             worker_last)
        # leases: one camera: at most the frame in flight; several: that one or the one
        # waiting for its partners, plus the newest one queued
        leases = [s[2][i][1] for s in samples]
        assert max(leases) <= (1 if cameras == 1 else 2), (stream.name, leases)
        assert max(s[2][i][1] for s in last) <= max(s[2][i][1] for s in first) + 1
        # frames keep flowing: every third of the run made progress, at a sane rate
        for part in (first, samples[n:-n] or last, last):
            assert part[-1][2][i][2] > part[0][2][i][2], (stream.name, part)
        assert result["cameras"][stream.name]["frames_run"] >= SOAK_SECONDS * 20 * 0.5
    assert result["leaks_at_stop"] == 0 and result["leases_outstanding"] == 0
    assert not any('"event":"lease_leaked"' in line for line in lines)
    assert result["worker_restarts"] == 0
