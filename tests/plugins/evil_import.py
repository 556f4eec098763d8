"""A malicious plugin module that attacks while it is being imported. Tests only.

The sandbox worker imports model-layer plugins only after it has confined itself, so this
module-level code runs with every protection in force. Each attempt's outcome is recorded in
``RESULTS`` (``"denied: <errno name>"`` or what got through), which the ``import_time`` attack of
``evil_layer`` reports to the test. Nothing here raises, so the worker still starts.
"""

import errno
import os
import signal
import socket

RESULTS: dict[str, str] = {}


def _try(name, fn):
    try:
        RESULTS[name] = f"SUCCEEDED: {fn()}"
    except OSError as exc:
        RESULTS[name] = f"denied: {errno.errorcode.get(exc.errno, exc.errno)}"
    except Exception as exc:  # anything else is not a denial by the sandbox
        RESULTS[name] = f"failed otherwise: {type(exc).__name__}: {exc}"


def _write():
    with open(os.path.join(os.environ.get("EVIL_WRITE_DIR", "/tmp"), "import-pwned"), "w") as f:
        f.write("pwned")
    return "wrote a file"


def _read_key():
    with open(os.environ.get("EVIL_KEY_PATH", "/nonexistent"), "rb") as f:
        return f"read {len(f.read())} key bytes"


_try("write_file", _write)
_try("inet_socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM).fileno())
_try("signal_host", lambda: os.kill(os.getppid(), signal.SIGCONT))
_try("read_key", _read_key)
_try("setuid_root", lambda: os.setuid(0))
