"""Status and Prometheus-format metrics of a running daemon, on loopback only.

``--metrics 127.0.0.1:PORT`` (or ``[::1]:PORT``, ``localhost:PORT``; port 0 picks a free one)
serves HTTP on a loopback TCP port; ``--metrics unix:PATH`` serves the same on a unix socket
(created with mode 0600; an existing socket file is replaced, any other file is refused). Any
other address is refused at start-up (:func:`parse_address`): the endpoint has no
authentication, so it never listens beyond the machine.

``GET /metrics``: the text exposition format (version 0.0.4), see :func:`render`.
``GET /status``: one JSON object (the daemon's summary so far, the artifact, the protections
in force, the cameras' pool counters). With several cameras the unlabelled counters are totals
over the cameras and the ``..._stream_...`` families break them down by ``camera``. A small
daemon thread serves them; it reads the daemon's counters under the daemon's lock, so a scrape
never sees half a frame's update.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import socketserver
import stat
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from ..errors import PluginHostError

__all__ = ["Histogram", "MetricsServer", "parse_address", "render", "status",
           "LATENCY_BUCKETS_S", "AGE_BUCKETS_S"]

#: bucket bounds (seconds) of the model execution time histogram
LATENCY_BUCKETS_S = (0.001, 0.002, 0.005, 0.01, 0.02, 0.04, 0.05, 0.1, 0.25, 0.5, 1.0)
#: bucket bounds (seconds) of the frame age histogram
AGE_BUCKETS_S = (0.005, 0.01, 0.02, 0.04, 0.05, 0.075, 0.1, 0.2, 0.5, 1.0, 2.0)


class Histogram:
    """A cumulative Prometheus histogram (O(1) memory); not locked (the daemon's lock is)."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[i] += 1
                break
        else:
            self.counts[-1] += 1
        self.sum += value
        self.count += 1

    def lines(self, name: str) -> list[str]:
        out, running = [], 0
        for bound, n in zip(self.bounds, self.counts):
            running += n
            out.append(f'{name}_bucket{{le="{bound:g}"}} {running}')
        out.append(f'{name}_bucket{{le="+Inf"}} {self.count}')
        out.append(f"{name}_sum {self.sum:.9g}")
        out.append(f"{name}_count {self.count}")
        return out


def parse_address(spec: str) -> tuple[str, Any]:
    """``("unix", path)`` or ``("tcp", (host, port))``; a non-loopback address is refused."""
    if not isinstance(spec, str) or not spec:
        raise PluginHostError(f"--metrics needs HOST:PORT or unix:PATH, got {spec!r}")
    if spec.startswith("unix:"):
        path = spec[5:]
        if not path:
            raise PluginHostError("--metrics unix:PATH needs a path")
        return "unix", path
    host, sep, port_text = spec.rpartition(":")
    if not sep or not host:
        raise PluginHostError(f"--metrics needs HOST:PORT (a loopback address, e.g. "
                              f"127.0.0.1:9100) or unix:PATH, got {spec!r}")
    try:
        port = int(port_text)
        if not 0 <= port <= 65535:
            raise ValueError
    except ValueError:
        raise PluginHostError(f"--metrics {spec!r}: the port must be 0-65535") from None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host == "localhost":
        host = "127.0.0.1"
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise PluginHostError(f"--metrics {spec!r}: {host!r} is not an IP address; the "
                              f"endpoint binds to a loopback address only (127.0.0.1, ::1, "
                              f"localhost) or a unix socket") from None
    if not ip.is_loopback:
        raise PluginHostError(f"--metrics {spec!r}: {host} is not a loopback address; the "
                              f"metrics endpoint has no authentication and binds to loopback "
                              f"only (127.0.0.0/8, ::1) or a unix socket (unix:PATH)")
    return "tcp", (str(ip), port)


def _esc(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _rss_bytes(pid: int | str = "self") -> int | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


def render(daemon: Any) -> str:
    """The daemon's metrics in the Prometheus text format."""
    out: list[str] = []

    def metric(name: str, kind: str, help_: str, samples: list[tuple[str, Any]]) -> None:
        out.append(f"# HELP {name} {help_}")
        out.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            if value is None:
                continue
            out.append(f"{name}{labels} {value}")

    snap = daemon.metrics_snapshot()
    p = "plugin_host_daemon"
    metric(f"{p}_frames_in_total", "counter", "Frames received from the camera.",
           [("", snap["frames_in"])])
    metric(f"{p}_frames_run_total", "counter", "Frames the artifact ran on.",
           [("", snap["frames_run"])])
    metric(f"{p}_frames_dropped_total", "counter",
           "Frames that did not run (frame-id gaps plus frames received and not run).",
           [("", snap["dropped"])])
    metric(f"{p}_frames_not_run_total", "counter",
           "Frames received but not run (worker died, frame overwritten).",
           [("", snap["not_run"])])
    metric(f"{p}_frame_drop_percent", "gauge",
           "Filtered frame drop percentage (openpilot modelV2 frameDropPerc).",
           [("", f"{snap['frame_drop_perc']:.6g}")])
    metric(f"{p}_deadline_misses_total", "counter",
           "Calls slower than the artifact's declared worst-case latency.",
           [("", snap["deadline_misses"])])
    metric(f"{p}_deadline_seconds", "gauge", "The artifact's declared worst-case latency.",
           [("", f"{snap['latency_ms'] / 1e3:.9g}")])
    metric(f"{p}_resets_total", "counter", "Recurrent state resets, by reason.",
           [(f'{{reason="{_esc(r)}"}}', n) for r, n in sorted(snap["resets_by_reason"].items())])
    metric(f"{p}_worker_restarts_total", "counter", "Sandbox worker restarts.",
           [("", snap["worker_restarts"])])
    metric(f"{p}_artifact_swaps_total", "counter", "Artifacts swapped in while running.",
           [("", snap["artifact_swaps"])])
    metric(f"{p}_artifact_swaps_refused_total", "counter",
           "New artifact files refused (the running one was kept).",
           [("", snap["artifact_swaps_refused"])])
    out.append(f"# HELP {p}_model_execution_seconds Host wall time of one sandboxed call.")
    out.append(f"# TYPE {p}_model_execution_seconds histogram")
    out.extend(snap["model_hist"].lines(f"{p}_model_execution_seconds"))
    out.append(f"# HELP {p}_frame_age_seconds From the frame's timestamp_eof to publishing.")
    out.append(f"# TYPE {p}_frame_age_seconds histogram")
    out.extend(snap["age_hist"].lines(f"{p}_frame_age_seconds"))
    pool = snap["pool"] or {}
    metric(f"{p}_leases_outstanding", "gauge", "Frame leases not yet released.",
           [("", pool.get("leases_outstanding"))])
    metric(f"{p}_camera_frames_produced_total", "counter", "Frames the camera produced.",
           [("", pool.get("produced"))])
    metric(f"{p}_camera_frames_dropped_total", "counter",
           "Frames the camera's pool dropped, by reason.",
           [(f'{{reason="{_esc(r)}"}}', n) for r, n in sorted(pool.get("dropped", {}).items())])
    metric(f"{p}_lease_leaks_total", "counter", "Leaked leases reported by the pool.",
           [("", pool.get("leaks"))])
    metric(f"{p}_protection_in_force", "gauge",
           "1 when the sandbox protection is in force for the worker, 0 when not.",
           [(f'{{protection="{_esc(name)}"}}', int(on))
            for name, on in sorted(snap["protections"].items())])
    art = snap["artifact"]
    if art:
        metric(f"{p}_artifact_info", "gauge", "The artifact running (always 1).",
               [(f'{{name="{_esc(art["name"])}",version="{_esc(art["version"])}",'
                 f'manifest_sha256="{_esc(art["manifest_sha256"])}"}}', 1)])
    _per_camera(metric, p, snap)
    metric(f"{p}_uptime_seconds", "gauge", "Seconds since the camera started.",
           [("", f"{snap['seconds']:.3f}")])
    metric(f"{p}_resident_memory_bytes", "gauge", "Resident memory, by process.",
           [('{process="host"}', _rss_bytes()), *_worker_rss(snap)])
    return "\n".join(out) + "\n"


def _worker_rss(snap: dict[str, Any]) -> list[tuple[str, Any]]:
    pids = snap.get("worker_pids") or {}
    if len(pids) <= 1:
        pid = snap["worker_pid"]
        return [('{process="worker"}', _rss_bytes(pid) if pid else None)]
    return [(f'{{process="worker",camera="{_esc(name)}"}}', _rss_bytes(pid) if pid else None)
            for name, pid in pids.items()]


def _per_camera(metric: Any, p: str, snap: dict[str, Any]) -> None:
    """Each camera stream's counters, labelled ``camera`` (one stream: one sample each)."""
    cams = snap.get("cameras") or {}
    metric(f"{p}_matched_sets_total", "counter",
           "Sets of frames matched across the cameras (one camera: its frames).",
           [("", snap.get("matched_sets", 0))])
    metric(f"{p}_max_skew_seconds", "gauge",
           "Frames of the cameras within this of each other form one matched set.",
           [("", f"{snap.get('max_skew_ms', 0.0) / 1e3:.9g}")])

    def each(key: str) -> list[tuple[str, Any]]:
        return [(f'{{camera="{_esc(name)}"}}', c[key]) for name, c in cams.items()]

    for key, kind, help_ in (
            ("frames_in", "counter", "Frames received, by camera."),
            ("frames_run", "counter", "Frames the artifact ran on, by camera."),
            ("dropped", "counter", "Frames that did not run, by camera."),
            ("unmatched", "counter",
             "Frames dropped because no frame of the other cameras matched, by camera."),
            ("deadline_misses", "counter", "Deadline misses, by camera."),
            ("worker_restarts", "counter", "Sandbox worker restarts, by camera."),
            ("stalls", "counter",
             "Times the camera produced no frame for the stall time, by camera."),
            ("leases_outstanding", "gauge", "Frame leases not yet released, by camera.")):
        suffix = "" if kind == "gauge" else "_total"
        name = {"frames_in": "frames_in", "frames_run": "frames_run",
                "dropped": "frames_dropped", "unmatched": "frames_unmatched"}.get(key, key)
        metric(f"{p}_stream_{name}{suffix}", kind, help_, each(key))
    metric(f"{p}_stream_stalled", "gauge",
           "1 while the camera has produced no frame for the stall time, by camera.",
           [(f'{{camera="{_esc(n)}"}}', int(c["stalled"])) for n, c in cams.items()])
    metric(f"{p}_stream_frame_drop_percent", "gauge",
           "Filtered frame drop percentage, by camera.",
           [(f'{{camera="{_esc(n)}"}}', f"{c['frame_drop_perc']:.6g}") for n, c in cams.items()])
    metric(f"{p}_stream_resets_total", "counter", "Recurrent state resets, by camera and reason.",
           [(f'{{camera="{_esc(n)}",reason="{_esc(r)}"}}', k) for n, c in cams.items()
            for r, k in sorted(c["resets_by_reason"].items())])
    samples = []
    for n, c in cams.items():
        q = c["model_execution_ms"]
        for label, key in (("0.5", "p50"), ("0.99", "p99")):
            if q[key] is not None:
                samples.append((f'{{camera="{_esc(n)}",quantile="{label}"}}',
                                f"{q[key] / 1e3:.9g}"))
    metric(f"{p}_stream_model_execution_seconds", "summary",
           "Host wall time of one sandboxed call, by camera (recent frames' quantiles).",
           samples)


def status(daemon: Any) -> dict[str, Any]:
    """The ``/status`` object."""
    snap = daemon.metrics_snapshot()
    return {"pid": os.getpid(), "running": snap["running"], "artifact": snap["artifact"],
            "camera": snap["camera"], "worker_pid": snap["worker_pid"],
            "cameras": list(snap.get("cameras") or {}), "worker_pids": snap.get("worker_pids"),
            "pools": snap.get("pools"),
            "protections": snap["protections"], "pool": snap["pool"],
            "artifact_swaps": snap["artifact_swaps"],
            "artifact_swaps_refused": snap["artifact_swaps_refused"],
            "summary": snap["summary"]}


class _Handler(BaseHTTPRequestHandler):
    server_version = "plugin-host-daemon"
    #: seconds a client may stay silent before its connection is closed: a client that
    #: connects and sends nothing must not hold a serving thread for ever
    timeout = 10

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        daemon = self.server.daemon  # type: ignore[attr-defined]
        path = self.path.split("?", 1)[0]
        try:
            if path == "/metrics":
                body = render(daemon).encode()
                ctype = "text/plain; version=0.0.4; charset=utf-8"
            elif path == "/status":
                body = json.dumps(status(daemon), default=str, indent=1).encode()
                ctype = "application/json"
            else:
                self.send_error(404, "only /metrics and /status")
                return
        except Exception as exc:  # never kill the serving thread
            self.send_error(500, str(exc)[:200])
            return
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def address_string(self) -> str:
        return str(self.client_address[0]) if self.client_address else "unix"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass


class _TCPServer(ThreadingHTTPServer):
    daemon_threads = True


class _TCP6Server(_TCPServer):
    address_family = socket.AF_INET6


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self):  # http.server wants a (host, port)-like client address
        sock, _ = super().get_request()
        return sock, ("unix", 0)


class MetricsServer:
    """Serves ``/metrics`` and ``/status`` of ``daemon`` at ``spec`` from a daemon thread."""

    def __init__(self, daemon: Any, spec: str) -> None:
        self.kind, where = parse_address(spec)
        self._unix_path: Path | None = None
        if self.kind == "unix":
            path = Path(where)
            if path.exists() or path.is_symlink():
                if not stat.S_ISSOCK(path.lstat().st_mode):
                    raise PluginHostError(f"--metrics unix:{path}: exists and is not a socket; "
                                          f"refusing to replace it")
                path.unlink()
            old = os.umask(0o177)
            try:
                self.server = _UnixServer(str(path), _Handler)
            except OSError as exc:
                raise PluginHostError(f"--metrics {spec}: cannot listen: {exc}") from None
            finally:
                os.umask(old)
            self._unix_path = path
            self.address = f"unix:{path}"
        else:
            host, port = where
            cls = _TCP6Server if ":" in host else _TCPServer
            try:
                self.server = cls((host, port), _Handler)
            except OSError as exc:
                raise PluginHostError(f"--metrics {spec}: cannot listen: {exc}") from None
            self.port = self.server.server_address[1]
            self.address = f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"
        self.server.daemon = daemon  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self.server.serve_forever,
                                        kwargs={"poll_interval": 0.2},
                                        name="plugin-host-metrics", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)
        if self._unix_path is not None:
            try:
                self._unix_path.unlink()
            except OSError:
                pass
