"""Process confinement steps of the sandbox worker, and the host's outside view of them.

The worker calls these in order (see ``worker.py``): :func:`close_other_fds`,
:func:`unshare_network`, :func:`set_rlimits`, then after its trusted imports
:func:`drop_privileges`, :func:`set_no_new_privs`, Landlock (``landlock.py``) and seccomp
(``seccomp.py``). Each returns what it achieved, so the worker can report exactly what is in
force; none of them pretends: a step that fails raises or reports "not in force".

:func:`observe` is the host's side: it reads ``/proc/<pid>`` of the worker (uid, gid, groups,
capabilities, ``no_new_privs``, seccomp mode of every thread, limits, network namespace, open
descriptors). Unlike the worker's own report it cannot be forged by code running in the worker.
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource
import signal
from typing import Iterable, Mapping

__all__ = ["RLIMITS", "close_other_fds", "unshare_network", "set_rlimits", "drop_privileges",
           "set_no_new_privs", "set_parent_death_signal", "observe"]

CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_GET_NO_NEW_PRIVS = 39

#: limit name (as reported) -> resource constant
RLIMITS = {
    "RLIMIT_AS": resource.RLIMIT_AS,
    "RLIMIT_CPU": resource.RLIMIT_CPU,
    "RLIMIT_NOFILE": resource.RLIMIT_NOFILE,
    "RLIMIT_NPROC": resource.RLIMIT_NPROC,
    "RLIMIT_CORE": resource.RLIMIT_CORE,
    "RLIMIT_FSIZE": resource.RLIMIT_FSIZE,
    "RLIMIT_MEMLOCK": resource.RLIMIT_MEMLOCK,
    "RLIMIT_MSGQUEUE": resource.RLIMIT_MSGQUEUE,
}


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                           ctypes.c_ulong]
    libc.prctl.restype = ctypes.c_int
    return libc


def _prctl(option: int, arg: int = 0) -> int:
    libc = _libc()
    rc = libc.prctl(option, arg, 0, 0, 0)
    if rc < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"prctl({option}): {os.strerror(e)}")
    return rc


def open_fds() -> list[int]:
    """This process's open descriptors (from /proc/self/fd)."""
    fd = os.open("/proc/self/fd", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return sorted(int(n) for n in os.listdir(fd) if int(n) != fd)
    finally:
        os.close(fd)


def close_other_fds(keep: Iterable[int]) -> list[int]:
    """Close every descriptor except ``keep``; returns the ones that were closed."""
    keep = set(keep)
    closed = []
    for fd in open_fds():
        if fd not in keep:
            try:
                os.close(fd)
                closed.append(fd)
            except OSError:
                pass
    return closed


def unshare_network() -> str:
    """Move into a new, empty network namespace (only a down loopback device).

    As root this is ``unshare(CLONE_NEWNET)``; otherwise a user namespace is created with it
    when the kernel allows unprivileged ones. Returns how it was done; raises OSError when
    neither works.
    """
    flags = CLONE_NEWNET if os.geteuid() == 0 else CLONE_NEWNET | CLONE_NEWUSER
    libc = _libc()
    libc.unshare.argtypes = [ctypes.c_int]
    if libc.unshare(flags) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"unshare: {os.strerror(e)}")
    return "netns" if flags == CLONE_NEWNET else "userns+netns"


def set_rlimits(limits: Mapping[str, int]) -> dict[str, tuple[int, int]]:
    """Set each ``{name: value}`` limit with soft = hard = value (RLIMIT_CPU: hard = soft + 1,
    so SIGXCPU comes first and SIGKILL one second later). A hard limit can then never be
    raised again without privilege; the soft one never exceeds it. Returns what is in force."""
    in_force = {}
    for name, value in limits.items():
        res = RLIMITS[name]
        value = int(value)
        hard = value + 1 if name == "RLIMIT_CPU" else value
        cur_soft, cur_hard = resource.getrlimit(res)
        if cur_hard != resource.RLIM_INFINITY and os.geteuid() != 0:
            hard = min(hard, cur_hard)
            value = min(value, hard)
        resource.setrlimit(res, (value, hard))
        in_force[name] = resource.getrlimit(res)
    return in_force


def drop_capability_bounding_set() -> int:
    """Drop every capability from the bounding set (needs CAP_SETPCAP); returns how many."""
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read())
    except OSError:
        last = 40
    dropped = 0
    for cap in range(last + 1):
        try:
            _prctl(PR_CAPBSET_DROP, cap)
            dropped += 1
        except OSError:
            pass
    return dropped


def drop_privileges(uid: int, gid: int) -> tuple[int, int]:
    """Become ``uid``/``gid`` with no supplementary groups (real, effective and saved ids), and
    check that root cannot be regained. Only meaningful as root; otherwise the process keeps
    its (already unprivileged) ids. Returns the effective (uid, gid)."""
    if os.geteuid() == 0:
        drop_capability_bounding_set()
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
        try:
            os.setuid(0)
        except PermissionError:
            pass
        else:  # pragma: no cover - would mean the kernel ignored the drop
            raise OSError(errno.EPERM, "setuid(0) succeeded after dropping privileges")
    _prctl(PR_SET_DUMPABLE, 0)
    return os.geteuid(), os.getegid()


def set_no_new_privs() -> bool:
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    return _prctl(PR_GET_NO_NEW_PRIVS) == 1


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    """Die with ``sig`` when the host (the parent) dies. Credential changes clear this, so call
    it after :func:`drop_privileges`."""
    _prctl(PR_SET_PDEATHSIG, sig)


# --- the host's outside view ---------------------------------------------------------------------


def _status(path: str) -> dict[str, str]:
    with open(path) as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


def _limits(pid: int) -> dict[str, tuple[int, int]]:
    names = {"Max cpu time": "RLIMIT_CPU", "Max file size": "RLIMIT_FSIZE",
             "Max core file size": "RLIMIT_CORE", "Max processes": "RLIMIT_NPROC",
             "Max open files": "RLIMIT_NOFILE", "Max locked memory": "RLIMIT_MEMLOCK",
             "Max address space": "RLIMIT_AS", "Max msgqueue size": "RLIMIT_MSGQUEUE"}
    out = {}
    with open(f"/proc/{pid}/limits") as f:
        for line in f:
            for label, name in names.items():
                if line.startswith(label):
                    fields = line[len(label):].split()
                    soft, hard = (resource.RLIM_INFINITY if v == "unlimited" else int(v)
                                  for v in fields[:2])
                    out[name] = (soft, hard)
    return out


def observe(pid: int) -> dict:
    """What ``/proc/<pid>`` says about a worker: ids, capabilities, no_new_privs and seccomp
    of every thread, rlimits, network namespace inode and open descriptors.

    Raises OSError when the process is gone.
    """
    status = _status(f"/proc/{pid}/status")
    threads = []
    for tid in sorted(os.listdir(f"/proc/{pid}/task"), key=int):
        try:
            st = _status(f"/proc/{pid}/task/{tid}/status")
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        threads.append({"tid": int(tid), "seccomp": int(st.get("Seccomp", "0")),
                        "no_new_privs": st.get("NoNewPrivs", "0").strip() == "1",
                        "uid": int(st["Uid"].split()[1])})
    fds = {}
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            fds[int(name)] = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            pass
    return {
        "uids": tuple(int(v) for v in status["Uid"].split()),
        "gids": tuple(int(v) for v in status["Gid"].split()),
        "groups": tuple(int(v) for v in status.get("Groups", "").split()),
        "cap_effective": int(status.get("CapEff", "0"), 16),
        "cap_permitted": int(status.get("CapPrm", "0"), 16),
        "no_new_privs": status.get("NoNewPrivs", "0").strip() == "1",
        "seccomp": int(status.get("Seccomp", "0")),
        "seccomp_filters": int(status.get("Seccomp_filters", "0")),
        "threads": threads,
        "rlimits": _limits(pid),
        "netns": os.stat(f"/proc/{pid}/ns/net").st_ino,
        "fds": fds,
    }
