"""Files that users and policies name: a FIFO, a device or a folder is refused at once, never
waited on (``plugin_host/files.py``), by every reader of such a path.

A FIFO nothing writes to blocks a plain ``open()`` for ever; each test runs under an alarm
that turns such a hang into a failure instead of a stuck test run."""

from __future__ import annotations

import contextlib
import os
import signal

import pytest

from plugin_host.errors import (AcceptanceRecordError, ArtifactError, ArtifactFormatError,
                                AuditLogError, KeyFileError, ModelFileError, PolicyError,
                                ReplayFormatError, StateFileError, UsageError)
from plugin_host.files import NotARegularFile, open_regular, open_regular_append


class Hung(Exception):
    pass


@contextlib.contextmanager
def no_hang(seconds: float = 5.0):
    def alarm(signum, frame):
        raise Hung(f"still blocked after {seconds} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


def test_open_regular_reads_a_file_and_refuses_the_rest(tmp_path, fifo):
    (tmp_path / "file").write_bytes(b"data")
    with no_hang(), open_regular(tmp_path / "file") as f:
        assert f.read() == b"data"
    for path in (fifo, tmp_path, "/dev/null"):
        with no_hang(), pytest.raises(NotARegularFile) as info:
            open_regular(path)
        assert info.value.strerror == "not a regular file" and isinstance(info.value, OSError)
    with pytest.raises(FileNotFoundError):
        open_regular(tmp_path / "missing")


def test_open_regular_append_creates_appends_and_refuses_the_rest(tmp_path, fifo):
    path = tmp_path / "log"
    for text in (b"one\n", b"two\n"):
        fd = open_regular_append(path)
        os.write(fd, text)
        os.close(fd)
    assert path.read_bytes() == b"one\ntwo\n" and path.stat().st_mode & 0o777 == 0o600
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO read by someone, too
    try:
        for target in (fifo, tmp_path):
            with no_hang(), pytest.raises(OSError):
                open_regular_append(target)
    finally:
        os.close(reader)
    with no_hang(), pytest.raises(NotARegularFile):  # and one that nothing reads
        open_regular_append(fifo)


def test_every_reader_of_a_named_file_refuses_a_fifo_at_once(tmp_path, fifo):
    from plugin_host.artifacts import (TrustStore, load_private_key, load_public_key,
                                       load_verified)
    from plugin_host.artifacts.acceptance_record import read_record
    from plugin_host.artifacts.rollback import STATE_FILE, RollbackStore
    from plugin_host.audit import AuditLog
    from plugin_host.commands.artifact import _read_npz
    from plugin_host.frames import ReplayReader
    from plugin_host.onnx_import.reader import read_model
    from plugin_host.policy import load_policy
    from plugin_host.sandbox import SandboxedExecutor

    refusals = [
        (lambda: load_policy(fifo), PolicyError),
        (lambda: load_public_key(fifo), KeyFileError),
        (lambda: load_private_key(fifo), KeyFileError),
        (lambda: read_record(fifo), AcceptanceRecordError),
        (lambda: AuditLog(fifo), AuditLogError),
        (lambda: _read_npz(str(fifo)), UsageError),
        (lambda: ReplayReader(fifo), ReplayFormatError),
        (lambda: read_model(fifo), ModelFileError),
        (lambda: RollbackStore(fifo.parent).check("a", "1.0.0", "0" * 64), StateFileError),
        (lambda: load_verified(fifo, trust=TrustStore(), rollback=None, backends={"numpy"}),
         ArtifactFormatError),
        (lambda: SandboxedExecutor(fifo, trust=TrustStore(), backend="numpy"),
         ArtifactFormatError),
    ]
    os.chmod(fifo, 0o600)  # a private key must not be readable by others
    os.link(fifo, fifo.parent / STATE_FILE)  # the rollback state, in the state directory
    for call, error in refusals:
        with no_hang(), pytest.raises(error, match="not a regular file"):
            call()


def test_a_sandboxed_executor_of_a_missing_artifact_is_a_typed_error(tmp_path):
    from plugin_host.artifacts import TrustStore
    from plugin_host.sandbox import SandboxedExecutor

    with pytest.raises(ArtifactError, match=r"cannot open artifact .*missing.pha: No such file"):
        SandboxedExecutor(tmp_path / "missing.pha", trust=TrustStore(), backend="numpy")
