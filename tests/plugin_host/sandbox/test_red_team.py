"""Red team: a malicious model-layer plugin attacks from inside the sandbox worker.

The plugin (``tests/plugins/evil_layer.py``) replaces the artifact's ``relu`` kernel, an
override the test allows explicitly, and performs the attack the input tensor selects. Every
attack must be denied by the sandbox - with the errno of the mechanism that denies it (EPERM
from the seccomp filter, EACCES from Landlock / file permissions, EMFILE / MemoryError /
SIGXCPU from the rlimits, a read-only mapping, a timeout) - reported by the audit hook where
Python can see it, and the host must serve the next call correctly. Attacks that take the
worker down (a memory fault, an exit, a forged message, a spin) must be detected, the worker
restarted and the recurrent state reset.

A kernel without AF_CAN answers EAFNOSUPPORT for an AF_CAN socket; seeing EPERM instead proves
the filter fired first.
"""

from __future__ import annotations

import errno
import json
import os
import signal

from pathlib import Path

import numpy as np
import pytest

from plugin_host.errors import (BackendError, PluginHostError, SandboxProtocolError,
                                WorkerCallError, WorkerDiedError, WorkerTimeoutError)
from plugin_host.executor import Executor
from plugin_host.sandbox import SandboxedExecutor, SandboxLimits
from plugin_host.sandbox.confine import observe
from plugin_host.sandbox.landlock import abi_version
from plugins.numpy_backend import NumpyBackend
from tests.plugins.evil_layer import NAMES, attack_input

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the worker drops from root to an unprivileged "
                                                 "uid and unshares its network: run as root"),
    pytest.mark.skipif(abi_version() < 6, reason="this kernel has no Landlock ABI 6 (signal and "
                                                 "abstract unix socket scoping)"),
]

EPERM, EACCES, EMFILE = errno.EPERM, errno.EACCES, errno.EMFILE
#: every audit event the executors' on_audit callback received
REPORTED: list[dict] = []
NORMAL = {"x": np.linspace(-1, 1, 16, dtype=np.float32).reshape(1, 16),
          "ids": np.array([3], np.int64)}


@pytest.fixture(scope="module")
def evil(redteam_artifact, evil_kwargs):
    with SandboxedExecutor(redteam_artifact, limits=SandboxLimits(call_timeout=20),
                           on_audit=REPORTED.append, **evil_kwargs) as sx:
        yield sx


@pytest.fixture(scope="module")
def reference(redteam_graph):
    return Executor(redteam_graph, NumpyBackend())


def attack(sx: SandboxedExecutor, name: str) -> tuple[PluginHostError, list[str]]:
    """Run attack ``name``; the error the call raised and the audit events it produced."""
    sx.audit_events.clear()
    with pytest.raises(PluginHostError) as info:
        sx.run({"x": attack_input(name), "ids": np.array([0], np.int64)})
    assert "ATTACK SUCCEEDED" not in str(info.value), str(info.value)
    return info.value, [e["event"] for e in sx.audit_events]


def assert_serving(sx: SandboxedExecutor, reference: Executor) -> None:
    """The next ordinary call works and computes what the in-process executor computes."""
    h = np.full((1, 8), 0.25, np.float32)
    got = sx.run({**NORMAL, "h": h})
    want = reference.run({**NORMAL, "h": h})
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-7)


# (attack, remote exception type, errno or None, audit event expected or None)
DENIED = [
    # network: seccomp refuses socket() for every family, before the kernel checks it
    ("af_can", "PermissionError", EPERM, "socket.__new__"),
    ("tcp_connect", "PermissionError", EPERM, "socket.__new__"),
    ("udp_send", "PermissionError", EPERM, "socket.__new__"),
    ("inet6", "PermissionError", EPERM, "socket.__new__"),
    ("netlink", "PermissionError", EPERM, "socket.__new__"),
    ("packet", "PermissionError", EPERM, "socket.__new__"),
    ("unix_connect", "PermissionError", EPERM, "socket.__new__"),
    ("abstract_unix", "PermissionError", EPERM, "socket.__new__"),
    ("ctypes_syscall", "PermissionError", EPERM, "ctypes.dlopen"),
    ("thread_socket", "PermissionError", EPERM, "socket.__new__"),
    # processes: no fork, exec, ptrace or cross-process memory; signals only to itself
    ("subprocess_run", "PermissionError", EPERM, "subprocess.Popen"),
    ("os_system", "ChildProcessError", None, "os.system"),
    ("exec_shell", "PermissionError", EPERM, "os.exec"),
    ("fork", "PermissionError", EPERM, "os.fork"),
    ("ptrace_attach", "PermissionError", EPERM, "ctypes.dlopen"),
    ("ptrace_traceme", "PermissionError", EPERM, "ctypes.dlopen"),
    ("process_vm_readv", "PermissionError", EPERM, "ctypes.dlopen"),
    ("kill_host", "PermissionError", EPERM, "os.kill"),
    ("kill_everyone", "PermissionError", EPERM, "os.kill"),
    ("tgkill_host", "PermissionError", EPERM, "ctypes.dlopen"),
    ("pidfd_open_host", "PermissionError", EPERM, "ctypes.dlopen"),
    # files: Landlock allows reading code only; the uid owns nothing
    ("write_tmp", "PermissionError", EACCES, "open"),
    ("write_project", "PermissionError", EACCES, "open"),
    ("overwrite_artifact", "PermissionError", EACCES, "open"),
    ("read_key", "PermissionError", EACCES, None),
    ("read_host_proc", "PermissionError", EACCES, None),
    # authority: nothing to find in the worker
    ("capability_scan", "LookupError", None, "gc.get_objects"),
    # the input region is mapped read-only from a read-only, sealed descriptor
    ("shm_write_numpy", "ValueError", None, None),
    ("shm_writeable_flag", "ValueError", None, None),
    ("shm_mprotect", "PermissionError", EACCES, "ctypes.dlopen"),
    ("shm_remap_writable", "PermissionError", EACCES, "mmap.__new__"),
    # the kernel and the machine
    ("mount", "PermissionError", EPERM, "ctypes.dlopen"),
    ("unshare_userns", "PermissionError", EPERM, "ctypes.dlopen"),
    ("bpf", "PermissionError", EPERM, "ctypes.dlopen"),
    ("kexec_load", "PermissionError", EPERM, "ctypes.dlopen"),
    ("init_module", "PermissionError", EPERM, "ctypes.dlopen"),
    ("io_uring", "PermissionError", EPERM, "ctypes.dlopen"),
    ("personality", "PermissionError", EPERM, "ctypes.dlopen"),
    # identity and limits
    ("setuid_root", "PermissionError", EPERM, None),
    ("raise_rlimit", "ValueError", None, "resource.setrlimit"),
    ("prlimit_host", "PermissionError", EPERM, "resource.prlimit"),
    ("many_files", "OSError", EMFILE, None),
]


@pytest.mark.parametrize("name, remote_type, code, event", DENIED, ids=[d[0] for d in DENIED])
def test_attack_is_denied_and_the_host_keeps_serving(evil, reference, name, remote_type, code,
                                                     event):
    restarts = evil.restarts
    error, events = attack(evil, name)
    assert isinstance(error, WorkerCallError), f"{type(error).__name__}: {error}"
    assert error.remote_type == remote_type, str(error)
    assert error.errno == code, str(error)
    if event is not None:
        assert event in events, f"audit events: {events}"
    assert evil.restarts == restarts, "the worker must survive a denied attack"
    assert_serving(evil, reference)


def test_exhausting_memory_is_denied_and_named(evil, reference):
    """RLIMIT_AS stops the allocation with a MemoryError, which the worker's executor reports
    as it would in the host: a BackendError naming the node that asked (its type and context
    cross the boundary), and the worker keeps serving."""
    restarts = evil.restarts
    error, _ = attack(evil, "exhaust_memory")
    assert isinstance(error, BackendError), f"{type(error).__name__}: {error}"
    assert "out of memory" in str(error) and error.context["node"] in str(error)
    assert evil.restarts == restarts, "the worker must survive a denied attack"
    assert_serving(evil, reference)


def test_af_can_is_denied_by_the_filter_not_unsupported(evil):
    """This kernel has no CAN: EAFNOSUPPORT would mean the filter did not fire."""
    REPORTED.clear()
    error, _ = attack(evil, "af_can")
    assert error.errno == EPERM and error.errno != errno.EAFNOSUPPORT
    # the tripwire's report reached the host's audit sink too, with the family asked for
    assert [e["event"] for e in REPORTED] == ["socket.__new__"]
    assert REPORTED[0]["args"][1] == "29" and REPORTED[0]["pid"] == evil.pid


def test_import_time_attacks_run_confined(evil, reference):
    """The plugins are imported only after the worker confined itself."""
    error, _ = attack(evil, "import_time")
    assert isinstance(error, WorkerCallError) and error.remote_type == "LookupError"
    results = json.loads(error.message.split("import-time attacks: ", 1)[1])
    assert set(results) == {"write_file", "inet_socket", "signal_host", "read_key", "setuid_root"}
    assert results == {"write_file": "denied: EACCES", "inet_socket": "denied: EPERM",
                       "signal_host": "denied: EPERM", "read_key": "denied: EACCES",
                       "setuid_root": "denied: EPERM"}
    assert_serving(evil, reference)


def test_no_file_was_written(evil, secrets):
    from tests.plugins import evil_layer

    assert not list(secrets["open_dir"].glob("*pwned*"))
    assert not (Path(evil_layer.__file__).parent / "pwned.txt").exists()


def _assert_restarted(sx, reference, restarts, resets):
    assert sx.restarts == restarts + 1
    assert sx.resets_by_reason["worker restart"] == resets + 1
    assert all(not v.any() for v in sx.state.values()), "recurrent state must be reset"
    assert_serving(sx, reference)


def test_writing_the_input_region_through_ctypes_kills_only_the_worker(evil, reference):
    sx = evil
    sx.run(NORMAL)  # some recurrent state to lose
    restarts, resets, pid = sx.restarts, sx.resets_by_reason["worker restart"], sx.pid
    with pytest.raises(WorkerDiedError) as info:
        sx.run({"x": attack_input("shm_memmove"), "ids": np.array([0], np.int64)})
    assert info.value.returncode == -signal.SIGSEGV
    assert info.value.pid == pid and sx.pid != pid
    _assert_restarted(sx, reference, restarts, resets)


def test_exiting_worker_is_restarted(evil, reference):
    restarts, resets = evil.restarts, evil.resets_by_reason["worker restart"]
    with pytest.raises(WorkerDiedError) as info:
        evil.run({"x": attack_input("exit_worker"), "ids": np.array([0], np.int64)})
    assert info.value.returncode == 7
    _assert_restarted(evil, reference, restarts, resets)


def test_forged_message_is_refused_and_the_worker_replaced(evil, reference):
    restarts, resets = evil.restarts, evil.resets_by_reason["worker restart"]
    with pytest.raises(SandboxProtocolError, match="undecodable"):
        evil.run({"x": attack_input("forge_message"), "ids": np.array([0], np.int64)})
    _assert_restarted(evil, reference, restarts, resets)


def test_cpu_spin_hits_the_call_timeout(redteam_artifact, evil_kwargs, reference):
    limits = SandboxLimits(call_timeout=0.5)
    with SandboxedExecutor(redteam_artifact, limits=limits, **evil_kwargs) as sx:
        with pytest.raises(WorkerTimeoutError) as info:
            sx.run({"x": attack_input("spin"), "ids": np.array([0], np.int64)})
        assert info.value.returncode == -signal.SIGKILL
        assert "call timeout" in str(info.value)
        _assert_restarted(sx, reference, 0, 0)


def test_cpu_spin_hits_rlimit_cpu(redteam_artifact, evil_kwargs, reference):
    limits = SandboxLimits(cpu_seconds=2, call_timeout=30)
    with SandboxedExecutor(redteam_artifact, limits=limits, **evil_kwargs) as sx:
        assert sx.protections.rlimits["RLIMIT_CPU"] == (2, 3)
        with pytest.raises(WorkerDiedError) as info:
            sx.run({"x": attack_input("spin"), "ids": np.array([0], np.int64)})
        assert not isinstance(info.value, WorkerTimeoutError)
        assert info.value.returncode in (-signal.SIGXCPU, -signal.SIGKILL)
        _assert_restarted(sx, reference, 0, 0)


def test_the_attacker_never_ran_outside_the_worker(evil):
    """Red-team bookkeeping: every attack of the plugin is exercised by a test here."""
    covered = {d[0] for d in DENIED} | {"import_time", "shm_memmove", "exit_worker",
                                        "forge_message", "spin", "exhaust_memory"}
    assert covered == set(NAMES)
    assert len(covered) >= 25


def test_every_worker_thread_is_confined(evil):
    seen = observe(evil.pid)
    assert len(seen["threads"]) >= 1
    for thread in seen["threads"]:
        assert thread["seccomp"] == 2 and thread["no_new_privs"] and thread["uid"] != 0
