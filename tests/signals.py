"""Stop signals in this test process while a command runs in it: real ones, and a handler called
from a finalizer as a signal landing there would call it.

A test run may inherit SIGTERM or SIGINT ignored (``tests/cli_child.py`` says when), and the
host leaves an ignored one ignored, so a test that raises one first puts both at Python's
defaults.
"""

from __future__ import annotations

import contextlib
import signal
from typing import Any, Callable, Iterator


@contextlib.contextmanager
def stop_signals_at_defaults() -> Iterator[None]:
    """SIGTERM at its default action and SIGINT at Python's KeyboardInterrupt, for a block."""
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def signalled_before(call: Callable, sig: signal.Signals, went_on: list[str], *,
                     at: int = 1) -> Callable:
    """``call``, with ``sig`` raised in this process just before its ``at``-th call;
    ``went_on`` gets the signal's name for each call made from then on (the first shows that
    the handler returned instead of raising: the signal was noted, not acted on at once)."""
    made = [0]

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        made[0] += 1
        if made[0] == at:
            signal.raise_signal(sig)
        if made[0] >= at:
            went_on.append(sig.name)
        return call(*args, **kwargs)
    return wrapper


class Finalized:
    """Calls ``handler`` with SIGTERM from its finalizer, as a signal landing while Python runs
    one would (create it and drop it at once: the finalizer runs there)."""

    def __init__(self, handler: Callable[[int, Any], None]) -> None:
        self.handler = handler

    def __del__(self) -> None:
        self.handler(signal.SIGTERM, None)
