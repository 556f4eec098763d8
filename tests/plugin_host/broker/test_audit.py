"""The JSONL audit log: one object per line, written before the action, nothing lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

import pytest

from plugin_host.audit import AuditLog, read_audit_log
from plugin_host.errors import AuditLogError


def test_record_fields_and_one_line_each(tmp_path):
    path = tmp_path / "sub" / "audit.jsonl"
    with AuditLog(path) as log:
        log.record("cam", "camera.publish", "grant", {"policy": "p.toml:3"})
        log.record("cam", "camera.publish", "use", {"topic": "camera", "seq": 0})
        # flushed per line: readable while the log is still open
        lines = path.read_text().splitlines()
        assert len(lines) == 2
    first = json.loads(lines[0])
    assert list(first) == ["time", "plugin", "capability", "action", "detail"]
    assert first["time"].endswith("Z") and first["detail"] == {"policy": "p.toml:3"}
    assert [r["action"] for r in read_audit_log(path)] == ["grant", "use"]
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_appends_to_an_existing_log(tmp_path):
    path = tmp_path / "audit.jsonl"
    for i in range(2):
        with AuditLog(path) as log:
            log.record("p", "can.send", "use", {"i": i})
    assert [r["detail"]["i"] for r in read_audit_log(path)] == [0, 1]


def test_threads_never_interleave_lines(tmp_path):
    path = tmp_path / "audit.jsonl"
    logs = [AuditLog(path), AuditLog(path)]  # two descriptors, both O_APPEND

    def writer(k):
        for i in range(200):
            logs[k % 2].record(f"p{k}", "model.publish", "use", {"i": i, "pad": "x" * 300})

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    records = list(read_audit_log(path))
    assert len(records) == 800
    for k in range(4):
        assert [r["detail"]["i"] for r in records if r["plugin"] == f"p{k}"] == list(range(200))
    for log in logs:
        log.close()


def test_a_killed_process_loses_nothing_already_written(tmp_path):
    path = tmp_path / "audit.jsonl"
    code = (f"from plugin_host.audit import AuditLog\nimport os, signal, sys\n"
            f"log = AuditLog({str(path)!r})\n"
            f"for i in range(100):\n    log.record('p', 'can.send', 'use', {{'i': i}})\n"
            f"sys.stdout.write('written\\n'); sys.stdout.flush()\n"
            f"os.kill(os.getpid(), signal.SIGKILL)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == -signal.SIGKILL and result.stdout == "written\n"
    assert [r["detail"]["i"] for r in read_audit_log(path)] == list(range(100))


def test_fsync_option(tmp_path):
    with AuditLog(tmp_path / "a.jsonl", fsync=True) as log:
        log.record("p", "panda.safety", "use", {"mode": "silent"})
    assert len(list(read_audit_log(tmp_path / "a.jsonl"))) == 1


def test_unwritable_log_is_refused(tmp_path):
    (tmp_path / "dir.jsonl").mkdir()
    with pytest.raises(AuditLogError, match="cannot open the audit log"):
        AuditLog(tmp_path / "dir.jsonl")
    log = AuditLog(tmp_path / "a.jsonl")
    log.close()
    with pytest.raises(AuditLogError, match="closed"):
        log.record("p", "can.send", "use")


def test_write_failure_is_an_audit_error(tmp_path):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    log = AuditLog.__new__(AuditLog)
    log.__init__(tmp_path / "a.jsonl")
    os.close(log._fd)
    log._fd = os.open("/dev/full", os.O_WRONLY)
    with pytest.raises(AuditLogError, match="cannot write the audit log"):
        log.record("p", "can.send", "use")
    log.close()


def test_huge_detail_is_truncated_not_refused(tmp_path):
    with AuditLog(tmp_path / "a.jsonl") as log:
        log.record("p", "model.publish", "use", {"blob": "x" * 100_000})
    (record,) = read_audit_log(tmp_path / "a.jsonl")
    assert record["detail"]["truncated"] is True


def test_unknown_action_is_a_bug(tmp_path):
    with AuditLog(tmp_path / "a.jsonl") as log, pytest.raises(ValueError):
        log.record("p", "can.send", "borrow")
