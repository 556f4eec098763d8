"""Structured log lines: one JSON object per event, one line each.

Every line has ``time`` (UTC, ISO 8601), ``event`` and the event's fields, e.g.::

    {"time":"2026-05-01T12:00:00.123456Z","event":"reset","reason":"frame gap","frame_id":41,...}

The daemon's own events (``start``, ``loaded``, ``camera_start``, ``stats``, ``reset``,
``deadline_miss``, ``worker_died``, ``stop``, ``summary``, ...) and the host's Python log
records at WARNING and above (``event`` ``"log"``, with ``level``, ``logger``, ``message``)
go through one :class:`EventLog`, so a reader parses one format.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from datetime import datetime, timezone
from typing import IO, Any

__all__ = ["EventLog", "LineSink", "LogHandler"]


def _default(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


class LineSink:
    """A stream that keeps what is written to it in ``lines`` (for embedding and tests)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def write(self, text: str) -> None:
        self.lines.append(text)

    def flush(self) -> None:
        pass


class EventLog:
    """Writes events as JSON lines to ``stream`` (default stderr); thread-safe."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {}

    def emit(self, event: str, **fields: Any) -> None:
        now = datetime.fromtimestamp(time.time(), timezone.utc)
        record = {"time": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "event": event, **fields}
        line = json.dumps(record, default=_default, separators=(",", ":"))
        with self._lock:
            self.counts[event] = self.counts.get(event, 0) + 1
            try:
                self.stream.write(line + "\n")
                self.stream.flush()
            except (OSError, ValueError):  # a closed pipe must not stop the daemon
                pass


class LogHandler(logging.Handler):
    """Routes Python log records into an :class:`EventLog` as ``log`` events."""

    def __init__(self, events: EventLog, level: int = logging.WARNING) -> None:
        super().__init__(level)
        self.events = events

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.events.emit("log", level=record.levelname.lower(), logger=record.name,
                             message=record.getMessage())
        except Exception:  # pragma: no cover - logging must never raise
            self.handleError(record)
