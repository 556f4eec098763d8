"""Rollback protection: the highest accepted version per artifact name, persisted.

The state is one JSON file (``rollback.json`` in the state directory)::

    {"format": 1, "artifacts": {"<name>": {"version": "1.2.0", "manifest_sha256": "<hex>"}}}

It is written atomically (temporary file, fsync, rename, fsync of the directory) under an
exclusive lock, so a crash leaves the old state or the new one. An unreadable or malformed
file is a :class:`~plugin_host.errors.StateFileError`: it is never silently reset, because an
empty state would accept every old version again.

An artifact is refused when its version is lower than the accepted one, or equal to it with a
different manifest (a rebuilt "same" version).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from abi.artifact import atomic_write, parse_version

from ..errors import ArtifactFormatError, RollbackError, StateFileError
from ..files import open_regular

__all__ = ["RollbackStore", "default_state_dir", "STATE_FILE"]

STATE_FILE = "rollback.json"
_MAX_STATE_BYTES = 16 * 2**20
_HEX64 = re.compile(r"[0-9a-f]{64}")


def default_state_dir() -> Path:
    """``$XDG_STATE_HOME/plugin-host``, else ``~/.local/state/plugin-host``."""
    base = os.environ.get("XDG_STATE_HOME")
    if base and os.path.isabs(base):
        return Path(base) / "plugin-host"
    return Path.home() / ".local" / "state" / "plugin-host"


class RollbackStore:
    """The persisted highest accepted version per artifact name, in ``directory``."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)
        self.path = self.directory / STATE_FILE

    # -- queries --------------------------------------------------------------------------------

    def accepted(self, name: str) -> dict[str, str] | None:
        """``{"version", "manifest_sha256"}`` accepted for ``name``, or None."""
        return self._read().get(name)

    def check(self, name: str, version: str, manifest_sha256: str) -> None:
        """Raise RollbackError if ``version`` of ``name`` would be a rollback."""
        self._check(self._read(), name, version, manifest_sha256)

    # -- update ---------------------------------------------------------------------------------

    def accept(self, name: str, version: str, manifest_sha256: str) -> None:
        """Check, then record ``version`` as the highest accepted for ``name`` (if higher)."""
        with self._locked():
            state = self._read()
            self._check(state, name, version, manifest_sha256)
            current = state.get(name)
            if current is not None and parse_version(current["version"]) == \
                    parse_version(version):
                return
            state[name] = {"version": version, "manifest_sha256": manifest_sha256}
            payload = json.dumps({"format": 1, "artifacts": state}, indent=1, sort_keys=True)
            try:
                atomic_write(self.path, lambda f: f.write(payload.encode() + b"\n"), mode=0o600)
            except OSError as exc:
                raise StateFileError(f"cannot write the rollback state {self.path}: "
                                     f"{exc.strerror}") from None

    # -- internals ------------------------------------------------------------------------------

    @staticmethod
    def _check(state: dict[str, dict[str, str]], name: str, version: str,
               manifest_sha256: str) -> None:
        current = state.get(name)
        if current is None:
            return
        have, want = parse_version(current["version"]), parse_version(version)
        if want < have:
            raise RollbackError(f"artifact {name!r} {version} is older than the accepted "
                                f"{current['version']}", name=name, version=version,
                                accepted=current["version"])
        if want == have and current["manifest_sha256"] != manifest_sha256:
            raise RollbackError(f"artifact {name!r} {version} was already accepted with a "
                                f"different manifest (sha256 {current['manifest_sha256'][:16]}"
                                f"..., this one {manifest_sha256[:16]}...); bump the version",
                                name=name, version=version, accepted=current["version"])

    @contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(self.directory / (STATE_FILE + ".lock"),
                         os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise StateFileError(f"cannot use state directory {self.directory}: "
                                 f"{exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _read(self) -> dict[str, dict[str, str]]:
        try:
            with open_regular(self.path) as f:  # a FIFO put there is refused, not waited on
                data = f.read(_MAX_STATE_BYTES + 1)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise StateFileError(f"cannot read rollback state {self.path}: "
                                 f"{exc.strerror}") from None
        try:
            if len(data) > _MAX_STATE_BYTES:
                raise ValueError(f"larger than {_MAX_STATE_BYTES} bytes")
            return _parse(json.loads(data))
        except (ValueError, TypeError, KeyError, RecursionError, ArtifactFormatError) as exc:
            raise StateFileError(f"rollback state {self.path} is corrupt ({exc}); refusing to "
                                 f"reset it: repair or remove it deliberately") from None


def _parse(value: Any) -> dict[str, dict[str, str]]:
    if type(value) is not dict or set(value) != {"format", "artifacts"} or value["format"] != 1:
        raise ValueError("expected {\"format\": 1, \"artifacts\": {...}}")
    artifacts = value["artifacts"]
    if type(artifacts) is not dict:
        raise ValueError("'artifacts' is not an object")
    for name, entry in artifacts.items():
        if type(entry) is not dict or set(entry) != {"version", "manifest_sha256"}:
            raise ValueError(f"entry {name!r} must have exactly version and manifest_sha256")
        parse_version(entry["version"])
        if type(entry["manifest_sha256"]) is not str or \
                not _HEX64.fullmatch(entry["manifest_sha256"]):
            raise ValueError(f"entry {name!r}: manifest_sha256 is not a SHA-256")
    return artifacts
