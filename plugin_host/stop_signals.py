"""The stop signals a command of the host handles (SIGTERM and SIGINT, unless ignored), and how
it handles them.

**Ignored stays ignored.** A shell without job control starts a background command
(``plugin-host run ... &`` in a script) with SIGINT ignored, so that a Ctrl-C typed for the
foreground job does not stop it, and a parent may ignore SIGTERM for its children as well.
Python keeps such an ignored SIGINT (it installs its KeyboardInterrupt handler only over the
default), and so does the host: every place that installs a stop handler (the ``plugin-host``
entry point, the daemon's frame loop) asks :func:`stop_signals` first, so a signal ignored when
the command started stays ignored from start-up to stop rather than working in some phases only.
The host itself never sets a signal to ignored, so an ignored one is always the parent's choice.

**At once, or at the next step.** The entry point installs one :class:`StopSignals` for the
whole command. By default a stop signal raises KeyboardInterrupt (:class:`Terminated` for
SIGTERM) at whatever line the main thread is on, as Python's own Ctrl-C does: right for a short
command. A long one (``run``, ``record``, ``accept``, ``build``, ``infer``) does its work inside
:func:`deferred_stop`: there the first stop signal is only noted, and the work acts on it at its
next step (:meth:`StopSignals.check`, raising :class:`StopRequested`), because an exception
raised by a signal handler at an arbitrary line is not safe: Python prints and drops one raised
while it runs a finalizer or a weak reference's callback (the command then runs on as if no
signal came), and one raised inside ``threading``'s waits can leave a lock released twice (a
RuntimeError's traceback instead of the stop). A second stop signal, for a step that does not
end, raises at once.

**Never inside an import or a wait on a thread.** A short command too runs a few blocks inside
:func:`unbroken`, which a first stop signal does not break into: it is acted on as the block
ends. Those are the imports of the plugins (a KeyboardInterrupt raised while onnx's C extension
module initialized was seen to crash the process with a segmentation fault) and the artifact
loader's wait for its hashing thread (the ``threading`` waits above).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Callable, Iterator

__all__ = ["POLL_S", "StopRequested", "StopSignals", "Terminated", "check_stop",
           "deferred_stop", "stop_signals", "unbroken"]

#: How often a long wait in the library (onnxruntime's reference run, a sandbox worker's
#: start) looks for a stop the command defers (:func:`check_stop`).
POLL_S = 0.2


def stop_signals() -> tuple[signal.Signals, ...]:
    """SIGTERM and SIGINT, leaving out either one that is ignored (``SIG_IGN``) now."""
    return tuple(sig for sig in (signal.SIGTERM, signal.SIGINT)
                 if signal.getsignal(sig) is not signal.SIG_IGN)


class Terminated(KeyboardInterrupt):
    """SIGTERM raised at once: a stop asked for, unwinding as Ctrl-C does."""


class StopRequested(KeyboardInterrupt):
    """A stop signal received inside :func:`deferred_stop`, acted on at a step boundary;
    ``reason`` is the signal's name. A KeyboardInterrupt, so that whatever cleans up after
    Ctrl-C cleans up after it too."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class StopSignals:
    """The handler of the stop signals (module docstring): raises at once, except inside
    :meth:`deferred`, where the first one sets :attr:`reason` and calls the block's listener."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self._deferred = 0
        self._listeners: list[Callable[[str], None]] = []
        self._previous: dict[signal.Signals, object] = {}

    def install(self) -> "StopSignals":
        """Handle the stop signals not ignored now (on the main thread; elsewhere a no-op)."""
        if threading.current_thread() is threading.main_thread():
            for sig in stop_signals():
                self._previous[sig] = signal.signal(sig, self)
        return self

    def restore(self) -> None:
        """Put back the handlers :meth:`install` replaced."""
        while self._previous:
            sig, handler = self._previous.popitem()
            signal.signal(sig, handler)  # type: ignore[arg-type]

    def __call__(self, signum: int, frame) -> None:
        if self._deferred and self.reason is None:
            self.reason = signal.Signals(signum).name
            _tell_terminal(b"\nstopping at the next step (again: at once)\n")
            for listener in self._listeners:
                listener(self.reason)
            return
        raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()

    @contextlib.contextmanager
    def deferred(self, on_stop: Callable[[str], None] | None = None
                 ) -> Iterator["StopSignals"]:
        """Within: the first stop signal is noted (and passed to ``on_stop``), not raised."""
        self._deferred += 1
        if on_stop is not None:
            self._listeners.append(on_stop)
        try:
            yield self
        finally:
            self._deferred -= 1
            if on_stop is not None:
                self._listeners.remove(on_stop)

    @property
    def deferring(self) -> bool:
        """Whether a :meth:`deferred` block is running."""
        return self._deferred > 0

    def check(self) -> None:
        """A step boundary: raises StopRequested when a stop signal came."""
        if self.reason is not None:
            raise StopRequested(self.reason)


def _tell_terminal(text: bytes) -> None:
    """``text`` on stderr when it is a terminal: os.write, as a print could be mid-write on
    the main thread the handler interrupted; a closed stderr is no reason to fail the stop."""
    try:
        if os.isatty(2):
            os.write(2, text)
    except OSError:
        pass


def _installed() -> StopSignals | None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        handler = signal.getsignal(sig)
        if isinstance(handler, StopSignals):
            return handler
    return None


@contextlib.contextmanager
def deferred_stop(on_stop: Callable[[str], None] | None = None) -> Iterator[StopSignals]:
    """The installed StopSignals' :meth:`~StopSignals.deferred` block; where none is installed
    (a verb called without the entry point), one installed for the block."""
    handler = _installed()
    if handler is not None:
        with handler.deferred(on_stop):
            yield handler
        return
    handler = StopSignals().install()
    try:
        with handler.deferred(on_stop):
            yield handler
    finally:
        handler.restore()


@contextlib.contextmanager
def unbroken() -> Iterator[None]:
    """A block a stop signal must not break into (module docstring): the installed
    StopSignals' first stop within is noted and raised as :class:`StopRequested` when the
    block ends. Inside a :func:`deferred_stop` block, or without the entry point's handler,
    nothing changes: the work around acts on the stop at its own next step."""
    handler = _installed()
    if handler is None or handler.deferring:
        yield
        return
    with handler.deferred():
        yield
    handler.check()


def check_stop() -> None:
    """:meth:`StopSignals.check` of the installed handler, for long work deep in the library
    that a deferred stop should end (the wait for onnxruntime's reference process, a sandbox
    worker's start-up, the acceptance's latency calls); nothing without one."""
    handler = _installed()
    if handler is not None:
        handler.check()
