"""``python -m plugin_host.cli ARGS`` in a child process whose stop signals start where a test
says, whatever the test run inherited.

A test run started in the background by a shell without job control (``make test &`` in a
script) has SIGINT ignored, and every child keeps that across exec; the host then keeps it
ignored too (``plugin_host/stop_signals.py``), so a test that sends Ctrl-C must give its child
SIGINT at the default, and a test of the ignored case must ignore it on purpose. The child
sets both dispositions and then execs the command, so its pid is the command's.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from typing import Iterator

_SETUP = """\
import os, signal, sys
ignored = set(sys.argv[1].split(",")) - {""}
for sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(sig, signal.SIG_IGN if sig.name in ignored else signal.SIG_DFL)
os.execv(sys.executable, [sys.executable, "-m", "plugin_host.cli", *sys.argv[2:]])
"""


@contextlib.contextmanager
def running_cli(*args: str, ignored: tuple[signal.Signals, ...] = ()
                ) -> Iterator[subprocess.Popen]:
    """The command started with SIGINT and SIGTERM at their defaults, or ignored where named in
    ``ignored``, stdout and stderr as text pipes; killed on leaving if still running."""
    names = ",".join(signal.Signals(sig).name for sig in ignored)
    proc = subprocess.Popen([sys.executable, "-c", _SETUP, names, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
