"""The status and Prometheus metrics endpoint: scraped during a run, loopback only."""

from __future__ import annotations

import http.client
import json
import re
import socket
import subprocess
import sys
import threading
import time

import pytest

from plugin_host.daemon import Daemon, DaemonOptions, EventLog, LineSink
from plugin_host.daemon.metrics import parse_address
from plugin_host.errors import PluginHostError
from plugin_host.policy import load_policy

_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_text_format(text: str) -> dict[tuple[str, frozenset], float]:
    """The Prometheus text exposition format, strictly: every line a comment or a sample."""
    samples: dict[tuple[str, frozenset], float] = {}
    types: dict[str, str] = {}
    for line in text.splitlines():
        if not line:
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            assert kind in ("counter", "gauge", "histogram", "summary", "untyped"), line
            types[name] = kind
            continue
        if line.startswith("#"):
            assert line.startswith("# HELP "), line
            continue
        m = _LINE.match(line)
        assert m, f"not a sample line: {line!r}"
        name, _, labels, value = m.groups()
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        assert name in types or base in types, f"sample without TYPE: {line!r}"
        key = (name, frozenset(_LABEL.findall(labels or "")))
        assert key not in samples, f"duplicate sample {line!r}"
        samples[key] = float(value)
    return samples


def _get(metrics, path: str, unix: str | None = None) -> tuple[int, str]:
    if unix is not None:
        class Conn(http.client.HTTPConnection):
            def connect(self):
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.sock.settimeout(10)
                self.sock.connect(unix)
        conn = Conn("localhost", timeout=10)
    else:
        conn = http.client.HTTPConnection("127.0.0.1", metrics.port, timeout=10)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


def _daemon(demo_state, metrics: str, **opts) -> tuple[Daemon, list[str]]:
    policy_path, state = demo_state
    sink = LineSink()
    lines = sink.lines

    daemon = Daemon(load_policy(policy_path, state_dir=state), state_dir=state,
                    events=EventLog(sink), say=lambda _: None,
                    options=DaemonOptions(metrics=metrics, **opts))
    return daemon, lines


def test_metrics_and_status_scraped_during_a_run(demo_state):
    daemon, lines = _daemon(demo_state, "127.0.0.1:0", duration=30.0)
    daemon.load()
    server = daemon.metrics_server
    assert server.server.server_address[0] == "127.0.0.1" and server.port > 0
    assert any('"event":"metrics"' in line and f"127.0.0.1:{server.port}" in line
               for line in lines)
    result = {}
    thread = threading.Thread(target=lambda: result.update(daemon.run()))
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while daemon.stats.frames_run < 10 and time.monotonic() < deadline:
            time.sleep(0.05)
        daemon.request_reset("test")
        time.sleep(0.5)
        code, text = _get(server, "/metrics")
        assert code == 200
        m = parse_text_format(text)
        code, body = _get(server, "/status")
        assert code == 200
        status = json.loads(body)
        code, _ = _get(server, "/nope")
        assert code == 404
    finally:
        daemon.request_stop("test")
        thread.join(timeout=30)
    p = "plugin_host_daemon"
    frames_in = m[(f"{p}_frames_in_total", frozenset())]
    frames_run = m[(f"{p}_frames_run_total", frozenset())]
    assert frames_run >= 10 and frames_in >= frames_run
    assert (f"{p}_frames_dropped_total", frozenset()) in m
    assert 0.0 <= m[(f"{p}_frame_drop_percent", frozenset())] <= 100.0
    assert m[(f"{p}_deadline_misses_total", frozenset())] >= 0
    assert m[(f"{p}_resets_total", frozenset({("reason", "explicit")}))] == 1
    assert m[(f"{p}_worker_restarts_total", frozenset())] == 0
    # histograms: cumulative buckets, +Inf equals the count, the count is frames run
    count = m[(f"{p}_model_execution_seconds_count", frozenset())]
    assert count == frames_run
    assert m[(f"{p}_model_execution_seconds_bucket", frozenset({("le", "+Inf")}))] == count
    assert m[(f"{p}_model_execution_seconds_sum", frozenset())] > 0
    buckets = sorted((float(dict(k[1])["le"]), v) for k, v in m.items()
                     if k[0] == f"{p}_frame_age_seconds_bucket")
    assert [v for _, v in buckets] == sorted(v for _, v in buckets)
    assert m[(f"{p}_leases_outstanding", frozenset())] <= 1
    assert m[(f"{p}_protection_in_force", frozenset({("protection", "seccomp")}))] == 1
    assert m[(f"{p}_protection_in_force", frozenset({("protection", "no_new_privs")}))] == 1
    info = [dict(k[1]) for k in m if k[0] == f"{p}_artifact_info"]
    assert info and info[0]["name"] == "demo" and info[0]["version"] == "1.0.0"
    assert m[(f"{p}_resident_memory_bytes", frozenset({("process", "host")}))] > 0
    # /status
    assert status["running"] is True and status["artifact"]["name"] == "demo"
    assert status["protections"]["seccomp"] is True
    assert status["summary"]["frames_run"] >= 10
    assert status["pool"]["leases_outstanding"] <= 1
    # stopped: the port is closed
    assert result["stop_reason"] == "test"
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", server.port), timeout=2).close()


def test_metrics_on_a_unix_socket(demo_state, tmp_path):
    path = tmp_path / "metrics.sock"
    daemon, _ = _daemon(demo_state, f"unix:{path}", frames=3)
    daemon.load()
    try:
        assert path.is_socket() and path.stat().st_mode & 0o777 == 0o600
        code, text = _get(None, "/metrics", unix=str(path))
        assert code == 200
        assert ("plugin_host_daemon_frames_run_total", frozenset()) in parse_text_format(text)
        code, body = _get(None, "/status", unix=str(path))
        assert code == 200 and json.loads(body)["artifact"]["name"] == "demo"
        summary = daemon.run()
        assert summary["frames_run"] == 3
    finally:
        daemon.close()
    assert not path.exists()


@pytest.mark.parametrize("spec", ["0.0.0.0:9100", "192.168.1.10:9100", "[::]:9100",
                                  "example.com:9100", "10.0.0.1:0", "9100", "127.0.0.1:x",
                                  "127.0.0.1:70000"])
def test_non_loopback_or_malformed_address_refused(spec):
    with pytest.raises(PluginHostError) as info:
        parse_address(spec)
    assert "--metrics" in str(info.value)


@pytest.mark.parametrize("spec, want", [("127.0.0.1:9100", ("tcp", ("127.0.0.1", 9100))),
                                        ("localhost:0", ("tcp", ("127.0.0.1", 0))),
                                        ("[::1]:9100", ("tcp", ("::1", 9100))),
                                        ("127.1.2.3:1", ("tcp", ("127.1.2.3", 1))),
                                        ("unix:/run/ph.sock", ("unix", "/run/ph.sock"))])
def test_loopback_addresses_accepted(spec, want):
    assert parse_address(spec) == want


def test_cli_refuses_a_non_loopback_address_before_starting(demo_state):
    policy, state = demo_state
    proc = subprocess.run([sys.executable, "-m", "plugin_host.cli", "run", "--policy",
                           str(policy), "--state-dir", str(state), "--frames", "1",
                           "--metrics", "0.0.0.0:9100"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0
    assert "0.0.0.0 is not a loopback address" in proc.stderr
    assert '"event":"loaded"' not in proc.stderr


def test_a_silent_client_is_disconnected_and_the_endpoint_keeps_serving(monkeypatch):
    from plugin_host.daemon import metrics

    idle = metrics._Handler.timeout  # the default: a silent client is dropped at all
    assert isinstance(idle, (int, float)) and 0 < idle <= 60
    monkeypatch.setattr(metrics._Handler, "timeout", 0.3)  # the same, quicker
    server = metrics.MetricsServer(None, "127.0.0.1:0")
    try:
        silent = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        silent.sendall(b"GET /metr")  # and then nothing more
        start = time.monotonic()
        assert silent.recv(1024) == b""  # closed by the server, not by our 5 s timeout
        assert time.monotonic() - start < 4
        silent.close()
        code, _ = _get(server, "/elsewhere")
        assert code == 404
    finally:
        server.close()
