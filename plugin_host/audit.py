"""The audit log: one JSON object per line for every capability grant, use and denial, and
every sandbox worker's start, refusal, death, restart and tripwire event.

Each record is ``{"time", "plugin", "capability", "action", "detail"}``: ``time`` is UTC ISO 8601
with microseconds, ``action`` one of :data:`ACTIONS`, ``detail`` a JSON object (what was sent,
which mode, why it was denied). The file is opened ``O_APPEND`` and every record is written
with a single ``write(2)`` of one complete line, so records from several threads or processes
never interleave, and a crash loses nothing already written (optionally ``fsync`` per line,
which also survives a power cut). A record is written *before* the action it records runs; if
it cannot be written, :class:`~plugin_host.errors.AuditLogError` is raised and the action does
not happen (fail closed). A sandbox worker's start is recorded before any plugin code runs in
it; its death, restart and tripwire events are recorded as the host notices them.
"""

from __future__ import annotations

import json
import os
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Mapping

from .errors import AuditLogError
from .files import open_regular_append

__all__ = ["ACTIONS", "CAPABILITY_ACTIONS", "SANDBOX_ACTIONS", "AuditLog", "read_audit_log"]

#: What a capability record can say happened.
CAPABILITY_ACTIONS = ("grant", "use", "deny", "fail", "revoke")

#: What a sandbox record (``plugin`` and ``capability`` both ``"sandbox"``) can say happened:
#: a worker started (``detail``: pid, artifact, the protections in force), was refused (a
#: required protection missing), died, was restarted, or its audit hook tripped (``tripwire``:
#: the event and its arguments). See :func:`plugin_host.sandbox.policy.audit_sinks`.
SANDBOX_ACTIONS = ("start", "refuse", "died", "restart", "tripwire")

#: What a record can say happened.
ACTIONS = CAPABILITY_ACTIONS + SANDBOX_ACTIONS

#: The longest line written; a detail that would exceed it is truncated (and says so).
MAX_LINE_BYTES = 16 * 1024


class AuditLog:
    """An append-only JSONL audit log at ``path`` (created mode 0600 with its directory)."""

    def __init__(self, path: str | os.PathLike, *, fsync: bool = False) -> None:
        self.path = Path(path)
        self.fsync = fsync
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd: int | None = open_regular_append(self.path, 0o600)
        except OSError as exc:
            raise AuditLogError(f"cannot open the audit log {self.path}: {exc.strerror}",
                                path=str(self.path)) from None

    def record(self, plugin: str, capability: str, action: str,
               detail: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Append one record; returns it. Raises AuditLogError when it cannot be written."""
        if action not in ACTIONS:
            raise ValueError(f"audit action must be one of {ACTIONS}, got {action!r}")
        entry = {
            "time": datetime.now(timezone.utc).isoformat(timespec="microseconds")
                    .replace("+00:00", "Z"),
            "plugin": plugin,
            "capability": capability,
            "action": action,
            "detail": dict(detail or {}),
        }
        line = _encode(entry)
        with self._lock:
            if self._fd is None:
                raise AuditLogError(f"the audit log {self.path} is closed", path=str(self.path))
            try:
                written = os.write(self._fd, line)
                if written != len(line):  # a short write on a regular file means a full disk
                    raise OSError(28, "short write (disk full?)")
                if self.fsync:
                    os.fsync(self._fd)
            except OSError as exc:
                raise AuditLogError(f"cannot write the audit log {self.path}: "
                                    f"{exc.strerror or exc}", path=str(self.path)) from None
        return entry

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> "AuditLog":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"AuditLog({str(self.path)!r})"


def _encode(entry: dict[str, Any]) -> bytes:
    line = json.dumps(entry, separators=(",", ":"), sort_keys=False, default=repr,
                      ensure_ascii=True)
    if len(line) + 1 > MAX_LINE_BYTES:
        entry = {**entry, "detail": {"truncated": True,
                                     "detail": repr(entry["detail"])[:MAX_LINE_BYTES // 2]}}
        line = json.dumps(entry, separators=(",", ":"), default=repr, ensure_ascii=True)
    return (line + "\n").encode("ascii")


def read_audit_log(path: str | os.PathLike) -> Iterator[dict[str, Any]]:
    """The records of an audit log, oldest first."""
    with open(path, encoding="ascii") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)
