"""The stop signals a command of the host handles: SIGTERM and SIGINT, unless ignored.

A shell without job control starts a background command (``plugin-host run ... &`` in a
script) with SIGINT ignored, so that a Ctrl-C typed for the foreground job does not stop it,
and a parent may ignore SIGTERM for its children as well. Python keeps such an ignored SIGINT
(it installs its KeyboardInterrupt handler only over the default), and so does the host: every
place that installs a stop handler (the ``plugin-host`` entry point, ``run``'s start-up, the
daemon's frame loop, ``record``) asks :func:`stop_signals` first, so a signal ignored when the
command started stays ignored from start-up to stop rather than working in some phases only.
The host itself never sets a signal to ignored, so an ignored one is always the parent's choice.
"""

from __future__ import annotations

import signal

__all__ = ["stop_signals"]


def stop_signals() -> tuple[signal.Signals, ...]:
    """SIGTERM and SIGINT, leaving out either one that is ignored (``SIG_IGN``) now."""
    return tuple(sig for sig in (signal.SIGTERM, signal.SIGINT)
                 if signal.getsignal(sig) is not signal.SIG_IGN)
