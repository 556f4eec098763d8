"""Stop signals (plugin_host/stop_signals.py): one the parent ignored stays ignored; outside a
deferred block they raise at once, inside one the first is a flag acted on at a step boundary
and the second raises."""

from __future__ import annotations

import gc
import os
import signal
import sys

import pytest

from plugin_host import cli
from plugin_host.stop_signals import (StopRequested, StopSignals, Terminated, check_stop,
                                      deferred_stop, stop_signals, unbroken)

from tests.signals import Finalized, stop_signals_at_defaults


@pytest.fixture
def sigint_ignored():
    """SIGINT ignored for one test."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture
def sigint_python():
    """SIGINT at Python's KeyboardInterrupt for one test, whatever this test run inherited."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_both_are_handled_unless_ignored(sigint_python):
    assert set(stop_signals()) == {signal.SIGINT, signal.SIGTERM}


def test_an_ignored_sigint_is_left_out(sigint_ignored):
    assert stop_signals() == (signal.SIGTERM,)


def test_the_handler_keeps_an_ignored_sigint_ignored_and_takes_sigterm(sigint_ignored):
    term = signal.getsignal(signal.SIGTERM)
    stops = StopSignals().install()
    try:
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is stops
    finally:
        stops.restore()
    assert signal.getsignal(signal.SIGTERM) == term


def test_outside_a_deferred_block_a_stop_signal_raises_at_once():
    stops = StopSignals()
    with pytest.raises(Terminated):
        stops(signal.SIGTERM, None)
    with pytest.raises(KeyboardInterrupt) as raised:
        stops(signal.SIGINT, None)
    assert type(raised.value) is KeyboardInterrupt and stops.reason is None
    stops.check()  # nothing noted: no stop


def test_inside_one_the_first_is_noted_and_acted_on_at_the_check_and_a_second_raises():
    stops, heard = StopSignals(), []
    with stops.deferred(heard.append):
        stops.check()
        stops(signal.SIGINT, None)
        assert stops.reason == "SIGINT" and heard == ["SIGINT"]
        with pytest.raises(StopRequested) as stopped:
            stops.check()
        assert stopped.value.reason == "SIGINT"
        assert isinstance(stopped.value, KeyboardInterrupt)  # cleaned up after as Ctrl-C is
        with pytest.raises(KeyboardInterrupt):
            stops(signal.SIGINT, None)
    with stops.deferred():  # the listener was the first block's only
        with pytest.raises(Terminated):
            stops(signal.SIGTERM, None)  # a second stop signal, SIGTERM this time
    assert heard == ["SIGINT"]


def test_on_a_terminal_the_first_says_how_it_is_acted_on(monkeypatch, capfd):
    """Written with os.write (a print could be mid-write on the main thread)."""
    monkeypatch.setattr(os, "isatty", lambda fd: fd == 2)
    stops = StopSignals()
    with stops.deferred():
        stops(signal.SIGINT, None)
    assert capfd.readouterr().err == "\nstopping at the next step (again: at once)\n"


def test_a_stderr_that_cannot_be_written_does_not_fail_the_stop(monkeypatch):
    def closed(fd, data):
        raise OSError(9, "Bad file descriptor")

    monkeypatch.setattr(os, "isatty", lambda fd: True)
    monkeypatch.setattr(os, "write", closed)
    stops = StopSignals()
    with stops.deferred():
        stops(signal.SIGTERM, None)
        assert stops.reason == "SIGTERM"


def test_a_stop_noted_while_python_runs_a_finalizer_is_not_lost():
    """An exception raised there would be printed and dropped (the command running on)."""
    stops = StopSignals()
    with stops.deferred():
        Finalized(stops)  # dropped at once: its finalizer runs here
        gc.collect()
        with pytest.raises(StopRequested):
            stops.check()


def test_deferred_stop_uses_the_installed_handler_or_installs_one_for_its_block():
    term = signal.getsignal(signal.SIGTERM)
    with deferred_stop() as own:
        assert signal.getsignal(signal.SIGTERM) is own
        own(signal.SIGTERM, None)
        with pytest.raises(StopRequested):
            check_stop()
    assert signal.getsignal(signal.SIGTERM) == term
    check_stop()  # none installed: nothing to act on

    installed = StopSignals().install()
    try:
        with deferred_stop() as stops:
            assert stops is installed
    finally:
        installed.restore()


def test_main_puts_back_the_handlers_it_found(tmp_path, sigint_python, capsys):
    term = signal.getsignal(signal.SIGTERM)
    assert cli.main(["verify", str(tmp_path / "none.pha"), "--trust", str(tmp_path)]) == 1
    assert "cannot read public key" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) == term
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_the_console_script_runs_main_with_sigint_at_its_default_action(monkeypatch,
                                                                         sigint_python):
    """So that a second Ctrl-C after main has put its handler back ends the process rather
    than raising KeyboardInterrupt where nothing catches it."""
    seen = []
    monkeypatch.setattr(cli, "main", lambda: seen.append(signal.getsignal(signal.SIGINT)) or 0)
    with pytest.raises(SystemExit) as exited:
        cli.entry()
    assert exited.value.code == 0 and seen == [signal.SIG_DFL]


def test_a_stop_signal_while_main_imports_the_verbs_is_acted_on_once_they_are_imported(
        monkeypatch, capsys):
    """main's handler is installed before the verbs are imported, and notes a stop during the
    imports (an exception raised inside one can come out as an ImportError)."""
    parser, went_on = cli._parser, []

    def slow_parser():
        signal.raise_signal(signal.SIGTERM)  # as if it came during the imports
        went_on.append("imports")
        return parser()

    monkeypatch.setattr(cli, "_parser", slow_parser)
    with stop_signals_at_defaults():
        signal.signal(signal.SIGTERM, signal.default_int_handler)  # not fatal to this run
        try:
            code = cli.main(["keygen", "--help"])
        except KeyboardInterrupt:
            code = "escaped main"
    assert (code, went_on) == (130, ["imports"])
    assert capsys.readouterr().err == "interrupted\n"


def test_an_unbroken_block_acts_on_a_stop_when_it_ends(sigint_python):
    """Outside a deferred block the installed handler raises at once, except inside unbroken:
    there the block runs to its end and the stop is raised then; inside a deferred block, or
    with no handler installed, unbroken leaves the stop to the work around it."""
    stops = StopSignals().install()
    went_on: list[str] = []

    def in_deferred_work():
        with deferred_stop():
            with unbroken():
                os.kill(os.getpid(), signal.SIGTERM)
            went_on.append("after")  # the deferred work acts at its own next step
            check_stop()

    try:
        with pytest.raises(KeyboardInterrupt) as raised:  # any other kind: a failure
            with unbroken():
                os.kill(os.getpid(), signal.SIGTERM)
                went_on.append("block")
        assert type(raised.value) is StopRequested
        assert went_on == ["block"] and stops.reason == "SIGTERM"
        stops.reason = None
        with pytest.raises(KeyboardInterrupt) as raised:
            in_deferred_work()
        assert type(raised.value) is StopRequested and went_on == ["block", "after"]
    finally:
        stops.restore()
    with unbroken():  # none installed: nothing noted, nothing raised
        went_on.append("none")


def test_a_stop_signal_does_not_break_into_a_plugins_import(tmp_path, monkeypatch,
                                                           sigint_python):
    """A KeyboardInterrupt raised while a C extension module initializes was seen to crash
    the process (a segmentation fault in onnx's): the import finishes, then the stop."""
    from importlib.metadata import EntryPoint

    from plugin_host.plugins import _load

    (tmp_path / "signalling_plugin.py").write_text(
        "import os, signal\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "FINISHED = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    stops = StopSignals().install()
    try:
        with pytest.raises(KeyboardInterrupt) as raised:
            _load(EntryPoint("signalling", "signalling_plugin", "plugin_host"))
    finally:
        stops.restore()
    assert type(raised.value) is StopRequested
    assert sys.modules["signalling_plugin"].FINISHED
