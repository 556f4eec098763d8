"""Exceptions across the channel: the worker describes one, the host raises the same type.

An error of the project's tree (``abi.errors`` / ``plugin_host.errors``: ``ABIError``,
``IndexRangeError``, ``ShapeError``, ``PluginError`` ...) is raised on the host as that class,
with its message and context, so a caller of ``SandboxedExecutor.run`` catches exactly what it
would catch from ``Executor.run``. Any other exception (a plugin's ``PermissionError``,
``MemoryError`` ...) becomes :class:`~plugin_host.errors.WorkerCallError` naming the remote type
and errno. The worker is untrusted: the host only instantiates classes from its own registry
(never a name the worker makes up), caps every string, and sets only plain attributes.
"""

from __future__ import annotations

import traceback
from typing import Any

import abi.errors
import numpy as np

from .. import errors as host_errors
from ..errors import PluginHostError, SandboxError, SandboxProtocolError, WorkerCallError

__all__ = ["describe", "rebuild"]

MAX_TEXT = 4000
MAX_TRACEBACK = 8000
_MAX_ITEMS = 64
_MAX_DEPTH = 4


def _registry() -> dict[str, type[PluginHostError]]:
    found: dict[str, type[PluginHostError]] = {}
    for module in (abi.errors, host_errors):
        for name in dir(module):
            cls = getattr(module, name)
            if isinstance(cls, type) and issubclass(cls, PluginHostError):
                found[cls.__name__] = cls
    # the worker may never make the host believe in a death, a timeout or a missing protection
    for name, cls in list(found.items()):
        if issubclass(cls, SandboxError) and cls is not SandboxProtocolError:
            del found[name]
    return found


_REGISTRY = _registry()


def _plain(value: Any, depth: int = 0) -> Any:
    """A msgpack-friendly, bounded copy of a context value."""
    if value is None or type(value) in (bool, int, float):
        return value
    if isinstance(value, str):
        return value[:MAX_TEXT]
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        return value.item()
    if depth >= _MAX_DEPTH:
        return repr(value)[:200]
    if isinstance(value, (list, tuple)):
        return [_plain(v, depth + 1) for v in list(value)[:_MAX_ITEMS]]
    if isinstance(value, dict):
        return {str(k)[:200]: _plain(v, depth + 1) for k, v in list(value.items())[:_MAX_ITEMS]}
    if isinstance(value, np.ndarray) and value.size <= _MAX_ITEMS:
        return _plain(value.tolist(), depth + 1)
    return repr(value)[:200]


def describe(exc: BaseException, *, with_traceback: bool = True) -> dict[str, Any]:
    """Worker side: the wire form of ``exc``."""
    tree = isinstance(exc, PluginHostError)
    wire: dict[str, Any] = {
        "type": type(exc).__name__,
        "tree": tree,
        "message": (exc.message if tree else str(exc))[:MAX_TEXT],
        "context": _plain(getattr(exc, "context", {})) if tree else {},
        "errno": exc.errno if isinstance(exc, OSError) and type(exc.errno) is int else None,
        "traceback": "",
    }
    if with_traceback and not tree:
        try:
            wire["traceback"] = "".join(traceback.format_exception(exc))[-MAX_TRACEBACK:]
        except Exception:  # never fail while describing a failure
            pass
    return wire


def _text(value: Any, limit: int = MAX_TEXT) -> str:
    text = value if isinstance(value, str) else repr(value)
    return "".join(c if c.isprintable() or c in "\n\t" else "?" for c in text[:limit])


def rebuild(unverified: Any, *, during: str) -> Exception:
    """Host side: the exception to raise for an error description from the worker."""
    if type(unverified) is not dict:
        return SandboxProtocolError(f"malformed error from the sandbox worker during {during}")
    kind = _text(unverified.get("type"), 100)
    message = _text(unverified.get("message", ""))
    context = unverified.get("context")
    context = dict(context) if type(context) is dict else {}
    cls = _REGISTRY.get(kind) if unverified.get("tree") is True else None
    if cls is not None:
        exc = cls.__new__(cls)
        Exception.__init__(exc, message)
        exc.message = message
        exc.context = context
        for key, value in context.items():
            if (type(key) is str and key.isidentifier() and not key.startswith("_")
                    and key not in ("message", "context", "args") and not hasattr(cls, key)):
                if key == "positions" and type(value) is list:
                    value = [tuple(p) if type(p) is list else p for p in value]
                elif key in ("expected", "got") and type(value) is list:
                    value = tuple(value)
                setattr(exc, key, value)
        return exc
    errno = unverified.get("errno")
    errno = errno if type(errno) is int else None
    return WorkerCallError(f"code in the sandbox worker raised {kind}: {message}",
                           remote_type=kind, errno=errno,
                           remote_traceback=_text(unverified.get("traceback", ""),
                                                  MAX_TRACEBACK),
                           during=during)
