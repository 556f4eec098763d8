"""``plugin-host run``: the host daemon (see :mod:`plugin_host.daemon`)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading

from ..cli import EXIT_INTERRUPTED
from ..errors import UsageError
from ..files import open_regular_append
from ..stop_signals import StopRequested, Terminated, deferred_stop
from .common import Formatter, state_folder


class _StartUpSignals:
    """Signals outside the daemon's frame loop (which installs its own handlers). The first
    SIGTERM or SIGINT (``run`` runs in :func:`~plugin_host.stop_signals.deferred_stop`, and a
    second one raises at once) asks the daemon to stop (:meth:`Daemon.request_stop`), which
    its start-up acts on between steps (:class:`~plugin_host.daemon.StartUpStopped`). SIGHUP,
    whose default would end the process, asks for the artifact swap's check
    (:meth:`Daemon.request_swap`), made once frames run. Either one received before the
    daemon exists is passed on to it at :meth:`attach`."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self.swap = False
        self.daemon = None

    def stop(self, reason: str) -> None:
        self.reason = reason
        if self.daemon is not None:
            self.daemon.request_stop(reason)

    def hangup(self, signum: int, frame) -> None:
        self.swap = True
        if self.daemon is not None:
            self.daemon.request_swap("SIGHUP")

    def attach(self, daemon) -> None:
        """From now on signals go to ``daemon``; those received already are passed on."""
        self.daemon = daemon
        if self.reason is not None:
            daemon.request_stop(self.reason)
        if self.swap:
            daemon.request_swap("SIGHUP")


def register(verbs) -> None:
    run = verbs.add_parser(
        "run", formatter_class=Formatter, help="the host daemon: camera frames through the "
                                               "sandboxed artifact",
        description="Run the host daemon under a policy: load and verify the allowed plugins "
                    "and the artifact, take frames from the camera plugin, run the artifact on "
                    "each frame in the sandbox worker, publish the outputs on the model topic "
                    "and enforce the artifact's contract (state resets, deadline). Structured "
                    "log lines (JSON, one per event) go to stderr or --log. Stops after "
                    "--duration seconds or --frames frames (exit 0, summary printed), on "
                    "SIGTERM (exit 0) or Ctrl-C (exit 130); during the start-up these act "
                    "between its steps, and a second one interrupts the step at once. SIGHUP "
                    "re-checks the artifact file for a new version (see --swap-poll). On "
                    "first use of the demo policy its key and artifact are created in the "
                    "state folder.",
        epilog="example:\n  plugin-host run --policy policies/demo.toml --duration 10\n"
               "  plugin-host run --policy device.toml --camera road --log /var/log/ph.jsonl")
    run.add_argument("--policy", required=True, help="the policy file (TOML)")
    run.add_argument("--duration", type=float, default=None,
                     help="stop after this many seconds (default: run until stopped)")
    run.add_argument("--frames", type=int, default=None,
                     help="stop after this many frames have run")
    run.add_argument("--state-dir", default=None,
                     help="the state folder (${STATE_DIR} in the policy, rollback state); "
                          "default $XDG_STATE_HOME/plugin-host or ~/.local/state/plugin-host")
    run.add_argument("--camera", default=None,
                     help="run on this one camera only (default: the policy's [cameras] use, "
                          "or the one camera it provides)")
    run.add_argument("--artifact", default=None,
                     help="the [[artifact]] to run when the policy allows several")
    run.add_argument("--log", default=None, metavar="FILE",
                     help="append the structured log here instead of stderr")
    run.add_argument("--log-frames", action="store_true", help="one log line per frame")
    run.add_argument("--stats-interval", type=float, default=1.0,
                     help="seconds between 'stats' log lines (default 1)")
    run.add_argument("--metrics", default=None, metavar="ADDR",
                     help="serve /status (JSON) and /metrics (Prometheus text format) over "
                          "HTTP at 127.0.0.1:PORT, [::1]:PORT, localhost:PORT or unix:PATH "
                          "(loopback only; port 0 picks a free port, logged as 'metrics')")
    run.add_argument("--swap-poll", type=float, default=1.0, metavar="SECONDS",
                     help="check the artifact file for a new version this often and swap it "
                          "in once verified (0: only on SIGHUP; default 1)")
    run.set_defaults(func=_cmd_run)


def _cmd_run(args: argparse.Namespace) -> int:
    if args.duration is not None and args.duration <= 0:
        raise UsageError(f"--duration must be positive, got {args.duration}")
    if args.frames is not None and args.frames <= 0:
        raise UsageError(f"--frames must be positive, got {args.frames}")
    if args.swap_poll < 0:
        raise UsageError(f"--swap-poll must be 0 or positive, got {args.swap_poll}")
    if args.stats_interval <= 0:
        raise UsageError(f"--stats-interval must be positive, got {args.stats_interval}")
    on_main = threading.current_thread() is threading.main_thread()
    with contextlib.ExitStack() as stack:
        signals = _StartUpSignals()
        stack.enter_context(deferred_stop(signals.stop))
        if on_main:
            previous = signal.signal(signal.SIGHUP, signals.hangup)
            stack.callback(signal.signal, signal.SIGHUP, previous)
        try:
            return _run(args, signals)
        except Terminated:  # a second SIGTERM: stopped, as asked
            return _stopped_during_start_up("SIGTERM")


def _stopped_during_start_up(reason: str | None) -> int:
    """One line, no summary (no frame ran): exit 130 for Ctrl-C, 0 for a stop asked for."""
    if reason == "SIGINT":
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(f"stopped by {reason}", file=sys.stderr)
    return 0


def _run(args: argparse.Namespace, signals: _StartUpSignals) -> int:
    from ..daemon import Daemon, DaemonOptions, EventLog, StartUpStopped
    from ..daemon.events import LogHandler
    from ..policy import load_policy

    state_dir = state_folder(args.state_dir)
    policy = load_policy(args.policy, state_dir=state_dir)
    try:  # a regular file only: never wait on a FIFO (files.py)
        stream = os.fdopen(open_regular_append(args.log, 0o644), "a", encoding="utf-8") \
            if args.log else None
    except OSError as exc:
        raise UsageError(f"--log {args.log}: cannot open: {exc.strerror}") from None
    events = EventLog(stream)
    handler = LogHandler(events)
    root = logging.getLogger("plugin_host")
    root.addHandler(handler)
    try:
        daemon = Daemon(policy, state_dir=state_dir, events=events,
                        say=lambda text: print(text, flush=True),
                        options=DaemonOptions(duration=args.duration, frames=args.frames,
                                              camera=args.camera, artifact=args.artifact,
                                              stats_interval=args.stats_interval,
                                              log_frames=args.log_frames,
                                              metrics=args.metrics,
                                              swap_poll=args.swap_poll or None))
        signals.attach(daemon)
        try:
            daemon.load()
            cams = ", ".join(f"{c.name!r} ({c.layout.describe()})" for c in daemon.cameras)
            print(f"running artifact {daemon.artifact_name!r} on camera"
                  f"{'s' if len(daemon.cameras) > 1 else ''} {cams}"
                  + (f", matched within {daemon.max_skew_ms:g} ms" if len(daemon.cameras) > 1
                     else "") + "; "
                  + (f"stopping after {args.duration:g} s" if args.duration else
                     "SIGTERM or Ctrl-C stops"), flush=True)
            summary = daemon.run()
        except (StartUpStopped, StopRequested) as exc:  # load closed what it had opened
            return _stopped_during_start_up(exc.reason)
        except BaseException:  # a stop between the load and the run: workers, cameras closed
            daemon.close()
            raise
        events.emit("summary", **summary)
        print(format_summary(summary), flush=True)
    finally:
        root.removeHandler(handler)
        if stream is not None:
            stream.close()
    if summary["stop_reason"] == "SIGINT":
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return 0


def _ms(p: dict) -> str:
    if p["p50"] is None:
        return "n/a"
    return f"p50 {p['p50']:.2f} ms, p99 {p['p99']:.2f} ms, max {p['max']:.2f} ms"


def format_summary(s: dict) -> str:
    """The summary the daemon prints when it stops."""
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(s["resets_by_reason"].items()))
    camera = ", ".join(f"{k} {v}" for k, v in sorted(s["camera_dropped"].items()))
    return (f"summary: {s['seconds']:.1f} s, stopped by {s['stop_reason']}\n"
            f"  frames in {s['frames_in']}, frames run {s['frames_run']}, dropped "
            f"{s['dropped']} (frame drop {s['frame_drop_perc']:.1f} % filtered"
            + (f"; camera: {camera}" if camera else "") + ")\n"
            f"  deadline misses {s['deadline_misses']} (declared worst case "
            f"{s['latency_ms']:g} ms), resets {s['resets']}"
            + (f" ({reasons})" if reasons else "") + f", worker restarts "
            f"{s['worker_restarts']}, leases outstanding at stop {s['leaks_at_stop']}"
            + (f", camera stalls {s['stalls']}" if s.get("stalls") else "") + "\n"
            f"  latency (model execution) {_ms(s['model_execution_ms'])}\n"
            f"  frame age at publish {_ms(s['frame_age_ms'])}"
            + (_per_camera(s) if len(s.get("cameras", {})) > 1 else ""))


def _per_camera(s: dict) -> str:
    """The summary's per-camera lines (several cameras)."""
    lines = [f"\n  matched sets {s['matched_sets']} (max skew {s['max_skew_ms']:g} ms), "
             f"unmatched frames {s['unmatched']}"]
    for name, c in s["cameras"].items():
        lines.append(f"\n  camera {name}: frames in {c['frames_in']}, run {c['frames_run']}, "
                     f"dropped {c['dropped']} (unmatched {c['unmatched']}, frame drop "
                     f"{c['frame_drop_perc']:.1f} % filtered), deadline misses "
                     f"{c['deadline_misses']}, resets {c['resets']}, worker restarts "
                     f"{c['worker_restarts']}"
                     + (f", stalls {c['stalls']}" if c.get("stalls") else "")
                     + f", model {_ms(c['model_execution_ms'])}")
    return "".join(lines)
