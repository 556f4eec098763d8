"""The sandbox worker's seccomp filter, assembled as classic BPF and installed with ctypes.

Why hand-written BPF rather than libseccomp (``pyseccomp``): the filter is one short, fixed
program for one architecture; writing it out keeps every comparison visible (in particular that
32-bit arguments such as a pid or an address family are compared on their low 32 bits, which
is what the kernel uses), needs no extra dependency or shared library in the worker, and lets
the test-suite check the program itself. The price is that it is x86_64 only: on any other
architecture :func:`install` raises and the host reports seccomp as not in force.

What the filter does (the default is *allow*: a deny list over the system calls that reach
outside the process, the network, other processes or the kernel's configuration):

* any system call made through another ABI (i386 ``int 0x80``, x32) kills the process, so the
  deny list cannot be bypassed by number aliasing;
* ``socket()`` fails with ``EPERM`` for **every** address family (AF_CAN, AF_INET, AF_INET6,
  AF_NETLINK, AF_PACKET, AF_UNIX ...): the filter runs before the kernel looks at the family,
  so an AF_CAN socket gets ``EPERM`` even on a kernel without CAN (which would otherwise say
  ``EAFNOSUPPORT``). ``socketpair()`` is allowed for AF_UNIX only;
* new processes: ``fork``, ``vfork``, ``execve``, ``execveat`` fail with ``EPERM``; ``clone``
  is allowed only with ``CLONE_THREAD`` and no namespace flag (threads work, processes do
  not); ``clone3`` fails with ``ENOSYS`` so that glibc falls back to ``clone``, whose flags a
  filter can read;
* other processes: ``ptrace``, ``process_vm_readv/writev``, ``kcmp``, ``pidfd_open``,
  ``pidfd_getfd``, ``pidfd_send_signal``, ``process_madvise``, ``move_pages``,
  ``migrate_pages`` fail; ``kill`` / ``rt_sigqueueinfo`` only to the worker's own pid,
  ``tgkill`` / ``rt_tgsigqueueinfo`` only to its own thread group, ``tkill`` never;
  ``prlimit64`` only on itself;
* the kernel and the machine: ``mount`` and the new mount API, ``umount2``, ``pivot_root``,
  ``chroot``, ``bpf``, ``kexec_*``, module loading, ``unshare``, ``setns``, the keyring,
  ``perf_event_open``, ``io_uring_*`` (its operations would bypass this filter),
  ``userfaultfd``, file handles, swap, reboot, clocks, ``syslog``, ``iopl``/``ioperm``,
  ``acct``, quotas, host/domain names, LSM attributes;
* identity: every ``set*id``/``setgroups``/``capset`` fails (the worker has already dropped
  to an unprivileged uid; this makes "become root again" fail even if a capability leaked);
  ``personality`` may only be queried.

Denied calls return ``EPERM`` (``ENOSYS`` for ``clone3``), never kill, so a plugin sees an
ordinary ``PermissionError`` and the worker keeps serving.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
from typing import NamedTuple

__all__ = ["AUDIT_ARCH_X86_64", "DENIED", "FilterError", "build_filter", "install",
           "seccomp_mode"]

# --- constants (x86_64) --------------------------------------------------------------------------

AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000

SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_SET_MODE_FILTER = 1
SECCOMP_FILTER_FLAG_TSYNC = 1
SYS_SECCOMP = 317

PR_SET_NO_NEW_PRIVS = 38
PR_GET_SECCOMP = 21

# classic BPF opcodes
_LD_W_ABS = 0x20      # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15         # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K = 0x35         # BPF_JMP | BPF_JGE | BPF_K
_AND_K = 0x54         # BPF_ALU | BPF_AND | BPF_K
_RET_K = 0x06         # BPF_RET | BPF_K

# struct seccomp_data offsets
_OFF_NR = 0
_OFF_ARCH = 4


def _arg_low(i: int) -> int:
    """Offset of the low 32 bits of argument ``i`` (little-endian)."""
    return 16 + 8 * i


AF_UNIX = 1
CLONE_THREAD = 0x00010000
#: namespace flags a thread-creating clone must not carry
_CLONE_NAMESPACES = (0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000
                     | 0x20000000 | 0x40000000)  # NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET

#: system call name -> number, every call the filter denies outright (EPERM)
DENIED: dict[str, int] = {
    "socket": 41, "fork": 57, "vfork": 58, "execve": 59, "execveat": 322,
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312,
    "pidfd_open": 434, "pidfd_getfd": 438, "pidfd_send_signal": 424, "process_madvise": 440,
    "move_pages": 279, "migrate_pages": 256, "tkill": 200,
    "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "mount_setattr": 442,
    "move_mount": 429, "open_tree": 428, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
    "fspick": 433, "open_tree_attr": 467,
    "bpf": 321, "kexec_load": 246, "kexec_file_load": 320, "init_module": 175,
    "finit_module": 313, "delete_module": 176, "unshare": 272, "setns": 308,
    "keyctl": 250, "add_key": 248, "request_key": 249, "perf_event_open": 298,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "userfaultfd": 323, "open_by_handle_at": 304, "name_to_handle_at": 303,
    "swapon": 167, "swapoff": 168, "reboot": 169, "acct": 163, "settimeofday": 164,
    "clock_settime": 227, "clock_adjtime": 305, "adjtimex": 159, "syslog": 103,
    "iopl": 172, "ioperm": 173, "quotactl": 179, "quotactl_fd": 443, "vhangup": 153,
    "sethostname": 170, "setdomainname": 171, "fanotify_init": 300, "uselib": 134,
    "lsm_set_self_attr": 460,
    "setuid": 105, "setgid": 106, "setreuid": 113, "setregid": 114, "setresuid": 117,
    "setresgid": 119, "setgroups": 116, "setfsuid": 122, "setfsgid": 123, "capset": 126,
}

_NR = {"socketpair": 53, "clone": 56, "clone3": 435, "kill": 62, "rt_sigqueueinfo": 129,
       "tgkill": 234, "rt_tgsigqueueinfo": 297, "prlimit64": 302, "personality": 135}


class FilterError(OSError):
    """The filter could not be built or installed here."""


class Insn(NamedTuple):
    code: int
    jt: int
    jf: int
    k: int


def _ret(value: int) -> Insn:
    return Insn(_RET_K, 0, 0, value)


def _errno(e: int) -> int:
    return SECCOMP_RET_ERRNO | (e & 0xFFFF)


def _block(nr: int, body: list[Insn]) -> list[Insn]:
    """``if nr == <nr>: <body>`` where ``body`` always returns; A still holds nr otherwise."""
    if len(body) > 255:
        raise FilterError("BPF block too long for an 8-bit jump")
    return [Insn(_JEQ_K, 0, len(body), nr), *body]


def _arg_equals_any(arg: int, values: list[int], deny: int) -> list[Insn]:
    """Allow when the low 32 bits of argument ``arg`` equal one of ``values``, else ``deny``."""
    body = [Insn(_LD_W_ABS, 0, 0, _arg_low(arg))]
    for i, value in enumerate(values):
        # jump to ALLOW (after the remaining compares and the deny return)
        remaining = len(values) - i - 1
        body.append(Insn(_JEQ_K, remaining + 1, 0, value & 0xFFFFFFFF))
    body += [_ret(deny), _ret(SECCOMP_RET_ALLOW)]
    return body


def build_filter(self_pid: int) -> list[Insn]:
    """The filter program for a worker whose pid (thread-group id) is ``self_pid``."""
    eperm = _errno(errno.EPERM)
    prog: list[Insn] = [
        Insn(_LD_W_ABS, 0, 0, _OFF_ARCH),
        Insn(_JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
        _ret(SECCOMP_RET_KILL_PROCESS),
        Insn(_LD_W_ABS, 0, 0, _OFF_NR),
        Insn(_JGE_K, 0, 1, X32_SYSCALL_BIT),
        _ret(SECCOMP_RET_KILL_PROCESS),
    ]
    for nr in sorted(set(DENIED.values())):
        prog += _block(nr, [_ret(eperm)])
    prog += _block(_NR["clone3"], [_ret(_errno(errno.ENOSYS))])
    prog += _block(_NR["socketpair"], _arg_equals_any(0, [AF_UNIX], eperm))
    prog += _block(_NR["clone"], [
        Insn(_LD_W_ABS, 0, 0, _arg_low(0)),
        Insn(_AND_K, 0, 0, CLONE_THREAD | _CLONE_NAMESPACES),
        Insn(_JEQ_K, 1, 0, CLONE_THREAD),
        _ret(eperm),
        _ret(SECCOMP_RET_ALLOW),
    ])
    for name in ("kill", "rt_sigqueueinfo", "tgkill", "rt_tgsigqueueinfo"):
        prog += _block(_NR[name], _arg_equals_any(0, [self_pid], eperm))
    prog += _block(_NR["prlimit64"], _arg_equals_any(0, [0, self_pid], eperm))
    prog += _block(_NR["personality"], _arg_equals_any(0, [0xFFFFFFFF], eperm))
    prog.append(_ret(SECCOMP_RET_ALLOW))
    if len(prog) > 4096:
        raise FilterError(f"BPF program of {len(prog)} instructions exceeds the kernel's 4096")
    return prog


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def install(self_pid: int | None = None) -> int:
    """Install the filter on every thread of this process (``TSYNC``); returns its length.

    Sets ``no_new_privs`` first (the kernel requires it of an unprivileged caller). Raises
    :class:`FilterError` on another architecture or when the kernel refuses.
    """
    if platform.machine() != "x86_64":
        raise FilterError(errno.ENOSYS, f"seccomp filter is written for x86_64, this is "
                                        f"{platform.machine()}")
    prog = build_filter(os.getpid() if self_pid is None else self_pid)
    raw = b"".join(struct.pack("<HBBI", *insn) for insn in prog)
    buffer = ctypes.create_string_buffer(raw, len(raw))
    fprog = _SockFprog(len(prog), ctypes.cast(buffer, ctypes.c_void_p))
    libc = _libc()
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                           ctypes.c_ulong]
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        e = ctypes.get_errno()
        raise FilterError(e, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(e)}")
    libc.syscall.restype = ctypes.c_long
    libc.syscall.argtypes = [ctypes.c_long, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_void_p]
    rc = libc.syscall(SYS_SECCOMP, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC,
                      ctypes.addressof(fprog))
    if rc != 0:
        e = ctypes.get_errno()
        detail = (f"thread {rc} could not be synchronised" if rc > 0 else os.strerror(e))
        raise FilterError(e or errno.EINVAL, f"seccomp(SET_MODE_FILTER, TSYNC): {detail}")
    return len(prog)


def seccomp_mode() -> int:
    """0 (off), 1 (strict) or 2 (filter) for the calling thread."""
    libc = _libc()
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                           ctypes.c_ulong]
    return int(libc.prctl(PR_GET_SECCOMP, 0, 0, 0, 0))
