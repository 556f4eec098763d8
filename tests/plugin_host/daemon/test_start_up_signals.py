"""Signals during the daemon's start-up. A stop asked for is a flag acted on between its steps
(and between the demo acceptance's calls), never an exception raised by a signal handler at
whatever line the main thread is on, which Python drops inside a finalizer (the start-up then
ran on into the frame loop: a SIGTERM that did not stop the daemon). SIGHUP, which would end
the process, asks for the swap check made once frames run."""

from __future__ import annotations

import gc
import io
import json
import signal
import time
from pathlib import Path

import pytest

from plugin_host.commands import run as run_command
from plugin_host.daemon import Daemon, EventLog, StartUpStopped
from plugin_host.policy import load_policy
from plugin_host.stop_signals import StopSignals, Terminated

from tests.cli_child import running_cli
from tests.signals import Finalized, signalled_before, stop_signals_at_defaults


def _daemon(policy: Path, state: Path, said: list[str] | None = None):
    log = io.StringIO()
    daemon = Daemon(load_policy(policy, state_dir=state), state_dir=state,
                    events=EventLog(log), say=(said.append if said is not None else
                                               lambda _text: None))
    return daemon, log


def _events(log: io.StringIO) -> list[str]:
    return [json.loads(line)["event"] for line in log.getvalue().splitlines()]


def _children() -> set[int]:
    """This process's live child processes (every thread's)."""
    pids: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        try:
            pids.update(int(p) for p in (task / "children").read_text().split())
        except OSError:  # the thread ended meanwhile
            pass
    return pids


def test_a_stop_asked_before_the_load_ends_it_at_the_first_step(first_use):
    """Before the first use's key and artifact are made, too."""
    policy, state = first_use
    daemon, log = _daemon(policy, state)
    daemon.request_stop("SIGTERM")
    with pytest.raises(StartUpStopped) as stopped:
        daemon.load()
    assert stopped.value.reason == "SIGTERM"
    assert daemon.plugins is None and not daemon.streams
    assert _events(log) == ["start", "stop"]
    assert not (state / "demo").exists()


def test_a_stop_during_the_demo_acceptance_ends_it_between_calls_and_writes_no_record(
        first_use, monkeypatch):
    """Asked for once the acceptance worker runs: the next call boundary ends it, the worker is
    gone, no record is written; the next start does the acceptance it did not finish."""
    from plugin_host.artifacts import acceptance

    policy, state = first_use
    said: list[str] = []
    daemon, log = _daemon(policy, state, said)
    workers: list[int] = []
    original = acceptance.run_acceptance

    def stop_then_run(executor, **kwargs):
        workers.append(executor.pid)
        daemon.request_stop("SIGTERM")
        return original(executor, **kwargs)

    monkeypatch.setattr(acceptance, "run_acceptance", stop_then_run)
    before = _children()
    with pytest.raises(StartUpStopped):
        daemon.load()
    assert len(workers) == 1 and workers[0] not in _children() - before
    record = state / "demo" / "demo.pha.accept-numpy"
    assert (state / "demo" / "demo.pha").exists() and not record.exists()
    assert said[-1].startswith("first use: accepting")
    assert "plugins" not in _events(log)

    monkeypatch.setattr(acceptance, "run_acceptance", original)
    again, _ = _daemon(policy, state, said)
    try:
        again.load()
    finally:
        again.close()
    assert record.exists() and said[-1].startswith("first use: acceptance passed")


def test_a_stop_asked_while_python_runs_a_finalizer_is_not_lost(demo_state):
    """An exception raised there would be printed and dropped; the flag is not."""
    policy, state = demo_state
    stops, signals = StopSignals(), run_command._StartUpSignals()
    daemon, _ = _daemon(policy, state)
    signals.attach(daemon)
    with stops.deferred(signals.stop):
        Finalized(stops)  # dropped at once: its finalizer runs here
        gc.collect()
    assert signals.reason == "SIGTERM"
    with pytest.raises(StartUpStopped):
        daemon.load()


@pytest.mark.parametrize("sig, code, said", [(signal.SIGTERM, 0, "stopped by SIGTERM"),
                                              (signal.SIGINT, 130, "interrupted")])
def test_run_notes_a_stop_signal_as_its_start_up_begins_and_stops_at_the_first_step(
        demo_state, monkeypatch, capsys, sig, code, said):
    from plugin_host.cli import main

    policy, state = demo_state
    went_on: list[str] = []
    monkeypatch.setattr(Daemon, "load", signalled_before(Daemon.load, sig, went_on))
    with stop_signals_at_defaults():
        assert main(["run", "--policy", str(policy), "--state-dir", str(state)]) == code
    out, err = capsys.readouterr()
    assert went_on == [sig.name] and err.splitlines()[-1] == said and not out


def test_run_stopped_by_sigterm_during_the_demo_acceptance_calls_says_so_and_exits_0(
        first_use, monkeypatch, capsys):
    """The acceptance's own check after each call ends it there (StopRequested), and run
    reports it as the stop it is, as for one acted on between the start-up's steps."""
    from plugin_host.cli import main
    from plugin_host.sandbox import SandboxedExecutor

    policy, state = first_use
    went_on: list[str] = []  # signalled before the demo acceptance's 2nd timed call
    monkeypatch.setattr(SandboxedExecutor, "run", signalled_before(
        SandboxedExecutor.run, signal.SIGTERM, went_on, at=2 + 2))
    with stop_signals_at_defaults():
        code = main(["run", "--policy", str(policy), "--state-dir", str(state)])
    err = capsys.readouterr().err
    assert (code, err.splitlines()[-1], went_on) == (0, "stopped by SIGTERM", ["SIGTERM"])
    assert not (state / "demo" / "demo.pha.accept-numpy").exists()


def test_the_first_stop_signal_is_a_flag_and_a_second_interrupts_at_once(demo_state):
    policy, state = demo_state
    for sig, raised in ((signal.SIGTERM, Terminated), (signal.SIGINT, KeyboardInterrupt)):
        stops, signals = StopSignals(), run_command._StartUpSignals()
        with stops.deferred(signals.stop):
            stops(sig, None)  # before the daemon exists: kept, not raised
            assert signals.reason == sig.name
            daemon, _ = _daemon(policy, state)
            signals.attach(daemon)  # passed on
            assert daemon.stop_reason == sig.name
            with pytest.raises(raised):
                stops(sig, None)


def test_sighup_before_the_daemon_exists_is_passed_on_as_a_swap_check(demo_state):
    policy, state = demo_state
    signals = run_command._StartUpSignals()
    signals.hangup(signal.SIGHUP, None)  # neither a stop nor an exception
    signals.hangup(signal.SIGHUP, None)
    asked: list[tuple[str, str]] = []
    daemon, _ = _daemon(policy, state)
    daemon.request_swap = lambda why: asked.append(("swap", why))
    daemon.request_stop = lambda why: asked.append(("stop", why))
    signals.attach(daemon)
    signals.hangup(signal.SIGHUP, None)
    assert asked == [("swap", "SIGHUP"), ("swap", "SIGHUP")]


def test_sighup_during_start_up_does_not_end_it_and_checks_the_artifact_once_frames_run(
        first_use):
    policy, state = first_use
    log = state.parent / "events.jsonl"
    with running_cli("run", "--policy", str(policy), "--state-dir", str(state),
                     "--swap-poll", "0", "--log", str(log)) as proc:
        lines = [proc.stdout.readline()]
        assert lines[0].startswith("first use: created the demo signing key"), lines
        proc.send_signal(signal.SIGHUP)  # while it builds, signs and accepts the artifact
        while not lines[-1].startswith("running artifact"):
            lines.append(proc.stdout.readline())
            assert lines[-1], "".join(lines)  # end of output: it stopped
        # the check runs once frames run; on a loaded machine it may take a while
        deadline = time.monotonic() + 60
        while '"event":"swap_unchanged"' not in log.read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()[-2000:]
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    events = log.read_text()
    assert proc.returncode == 0, (err[-2000:], events[-2000:])
    assert '"event":"swap_check","why":"SIGHUP"' in events
    assert '"event":"swap_unchanged"' in events and "stopped by SIGTERM" in out
