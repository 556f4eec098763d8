"""Soak: the daemon runs for ``SOAK_SECONDS`` (default 5 s in the default suite) while the
host's and the worker's RSS (from /proc) and the pool's lease count are sampled; after a
warm-up, the last third of the samples must not have grown past the first third (with a
tolerance), frames must keep flowing, and nothing may leak.

Longer runs: ``make soak`` (10 minutes) or ``SOAK_SECONDS=600 .venv/bin/python -m pytest -q
tests/plugin_host/daemon/test_soak.py -s`` (``-s`` prints the samples' summary).
"""

from __future__ import annotations

import os
import threading
import time

from plugin_host.daemon import Daemon, DaemonOptions, EventLog, LineSink
from plugin_host.policy import load_policy

SOAK_SECONDS = float(os.environ.get("SOAK_SECONDS", "5"))
#: growth allowed between the first and the last third (bytes): allocator noise, not a leak
RSS_TOLERANCE = 16 << 20


def _rss(pid: int | str) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


def test_soak_rss_and_leases_stay_flat(demo_state):
    policy_path, state = demo_state
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
    samples = []  # (t, host rss, worker rss, leases outstanding, frames run)
    try:
        start = time.monotonic()
        while thread.is_alive():
            time.sleep(0.1)
            t = time.monotonic() - start
            if t < warmup:
                continue
            pool = daemon.camera.pool
            if pool is None or pool.closed or daemon.executor.pid is None:
                continue
            try:
                worker = _rss(daemon.executor.pid)
            except (OSError, AssertionError):
                continue  # between worker lives
            samples.append((t, _rss("self"), worker, pool.stats()["leases_outstanding"],
                            daemon.stats.frames_run))
    finally:
        daemon.request_stop("test")
        thread.join(timeout=60)
    assert result.get("stop_reason") == "duration", result
    assert len(samples) >= 9, samples
    n = len(samples) // 3
    first, last = samples[:n], samples[-n:]
    host_first, host_last = max(s[1] for s in first), max(s[1] for s in last)
    worker_first, worker_last = max(s[2] for s in first), max(s[2] for s in last)
    print(f"\nsoak {SOAK_SECONDS:g} s, {len(samples)} samples: host RSS "
          f"{host_first >> 20} -> {host_last >> 20} MiB, worker RSS {worker_first >> 20} -> "
          f"{worker_last >> 20} MiB, frames run {result['frames_run']}, dropped "
          f"{result['dropped']}, deadline misses {result['deadline_misses']}")
    assert host_last <= host_first + RSS_TOLERANCE, (host_first, host_last)
    assert worker_last <= worker_first + RSS_TOLERANCE, (worker_first, worker_last)
    # leases: at most the one frame in flight, in every sample
    assert max(s[3] for s in samples) <= 1
    assert max(s[3] for s in last) <= max(s[3] for s in first) + 1
    # frames keep flowing: every third of the run made progress, at a sane rate
    for part in (first, samples[n:-n] or last, last):
        assert part[-1][4] > part[0][4], part
    assert result["frames_run"] >= SOAK_SECONDS * 20 * 0.5
    assert result["leaks_at_stop"] == 0 and result["leases_outstanding"] == 0
    assert not any('"event":"lease_leaked"' in line for line in lines)
    assert result["worker_restarts"] == 0
