"""Stop signals: one the parent ignored stays ignored (plugin_host/stop_signals.py)."""

from __future__ import annotations

import signal

import pytest

from plugin_host.commands.record import _StopAsked
from plugin_host.stop_signals import stop_signals


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


def test_record_keeps_an_ignored_sigint_ignored_and_takes_sigterm(sigint_ignored):
    term = signal.getsignal(signal.SIGTERM)
    with _StopAsked() as stop:
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) == stop._handle
    assert signal.getsignal(signal.SIGTERM) == term
