"""A malicious model-layer plugin: the sandbox red team's attacker. Tests only.

It provides a kernel for ``relu`` through ``plugin_host_add_kernels`` (the red-team artifact
applies relu to its input ``x``, and the test lists the op as an allowed override). On ordinary
inputs the kernel is an honest relu. When ``x[0, 0] == MARK`` it performs the attack
``ATTACKS[int(x[0, 1])]`` instead, from inside the sandbox worker.

Every attack is written to *succeed* if the sandbox let it: a denied attack raises what the
system raised (``PermissionError`` with EPERM from seccomp, EACCES from Landlock or the file
permissions, ``MemoryError`` from RLIMIT_AS ...); an attack that got through raises
:class:`AttackSucceeded`, whose message starts with ``ATTACK SUCCEEDED``, so a test can never
mistake a success for a denial. Attacks that must take the worker down (a fault, an exit, a
forged message, a spin) do so.

Parameters come from the worker's environment (``SandboxedExecutor(env=...)``):
``EVIL_KEY_PATH`` (a private key the worker must not read), ``EVIL_UNIX_SOCKET`` (a listening
unix socket of the host), ``EVIL_ARTIFACT_PATH``, ``EVIL_WRITE_DIR`` (a world-writable
directory). The host's pid is the worker's parent pid.
"""

from __future__ import annotations

import ctypes
import gc
import json
import mmap
import os
import resource
import signal
import socket
import stat
import subprocess
import sys
import threading

import numpy as np

from plugin_host.hooks import hookimpl

MARK = 4242.0

AF_CAN, CAN_RAW = 29, 1
NETLINK_ROUTE = 0
ETH_P_ALL = 0x0003
PTRACE_TRACEME, PTRACE_ATTACH = 0, 16
CLONE_NEWUSER = 0x10000000
SYS_TGKILL, SYS_KEXEC_LOAD, SYS_INIT_MODULE, SYS_FINIT_MODULE = 234, 246, 175, 313
SYS_BPF, SYS_IO_URING_SETUP, SYS_PIDFD_OPEN, SYS_SOCKET = 321, 425, 434, 41
PROT_READ, PROT_WRITE = 1, 2


class AttackSucceeded(RuntimeError):
    pass


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL("libc.so.6", use_errno=True)


def _check(rc: int, what: str) -> str:
    """A libc return value: raise the errno on failure, describe the success otherwise."""
    if rc == -1:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")
    return f"{what} returned {rc}"


def _host() -> int:
    return os.getppid()


# --- network ----------------------------------------------------------------------------------


def af_can(x):
    s = socket.socket(AF_CAN, socket.SOCK_RAW, CAN_RAW)
    return f"AF_CAN socket {s.fileno()}"


def tcp_connect(x):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(1)
    s.connect(("127.0.0.1", 22))
    return "TCP connected"


def udp_send(x):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(b"exfiltrate", ("10.0.0.1", 53))
    return "UDP sent"


def inet6(x):
    socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    return "AF_INET6 socket"


def netlink(x):
    socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
    return "netlink socket"


def packet(x):
    socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    return "packet socket"


def unix_connect(x):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(os.environ["EVIL_UNIX_SOCKET"])
    return "connected to the host's unix socket"


def abstract_unix(x):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect("\0plugin-host-red-team")
    return "connected to an abstract unix socket"


def ctypes_syscall(x):
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    return _check(libc.syscall(SYS_SOCKET, AF_CAN, socket.SOCK_RAW, CAN_RAW),
                  "syscall(socket, AF_CAN)")


def thread_socket(x):
    """The same attack from a new thread: threads inherit the filter and Landlock."""
    outcome: list[BaseException | str] = []

    def run():
        try:
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            outcome.append("socket from a thread")
        except BaseException as exc:
            outcome.append(exc)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0]


# --- processes --------------------------------------------------------------------------------


def subprocess_run(x):
    subprocess.run(["/bin/true"], check=True)
    return "ran /bin/true"


def os_system(x):
    rc = os.system("exit 0")
    if rc == 0:
        return "os.system ran a shell"
    raise ChildProcessError(f"os.system returned {rc} (no shell could be started)")


def exec_shell(x):
    os.execv("/bin/sh", ["sh", "-c", "exit 0"])


def fork(x):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return f"forked {pid}"


def ptrace_attach(x):
    libc = _libc()
    libc.ptrace.restype = ctypes.c_long
    return _check(libc.ptrace(PTRACE_ATTACH, _host(), None, None), "ptrace(ATTACH, host)")


def ptrace_traceme(x):
    libc = _libc()
    libc.ptrace.restype = ctypes.c_long
    return _check(libc.ptrace(PTRACE_TRACEME, 0, None, None), "ptrace(TRACEME)")


class _IOVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def process_vm_readv(x):
    libc = _libc()
    libc.process_vm_readv.restype = ctypes.c_ssize_t
    buf = ctypes.create_string_buffer(64)
    local = _IOVec(ctypes.cast(buf, ctypes.c_void_p), 64)
    remote = _IOVec(0x400000, 64)
    return _check(libc.process_vm_readv(_host(), ctypes.byref(local), 1, ctypes.byref(remote), 1,
                                        0), "process_vm_readv(host)")


def kill_host(x):
    os.kill(_host(), signal.SIGCONT)  # harmless if it got through, and detectable
    return "signalled the host"


def kill_everyone(x):
    os.kill(-1, signal.SIGCONT)
    return "signalled every process"


def tgkill_host(x):
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    host = _host()
    return _check(libc.syscall(SYS_TGKILL, host, host, signal.SIGCONT), "tgkill(host)")


def pidfd_open_host(x):
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    return _check(libc.syscall(SYS_PIDFD_OPEN, _host(), 0), "pidfd_open(host)")


def exit_worker(x):
    os._exit(7)


# --- files ------------------------------------------------------------------------------------


def write_tmp(x):
    with open(os.path.join(os.environ["EVIL_WRITE_DIR"], "pwned"), "w") as f:
        f.write("pwned")
    return "wrote a file in a world-writable directory"


def write_project(x):
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "pwned.txt"), "w") as f:
        f.write("pwned")
    return "wrote into the project tree"


def overwrite_artifact(x):
    with open(os.environ["EVIL_ARTIFACT_PATH"], "r+b") as f:
        f.write(b"\0")
    return "overwrote the artifact"


def read_key(x):
    with open(os.environ["EVIL_KEY_PATH"], "rb") as f:
        return f"read {len(f.read())} bytes of the private key"


def read_host_proc(x):
    with open(f"/proc/{_host()}/environ", "rb") as f:
        return f"read the host's environment ({len(f.read())} bytes)"


def many_files(x):
    fds = []
    try:
        while len(fds) < 100_000:
            fds.append(os.dup(0))
    finally:
        for fd in fds:
            os.close(fd)
    return f"opened {len(fds)} descriptors"


# --- authority inside the worker --------------------------------------------------------------

#: where authority lives in the host: capability objects, topics, keys and trust, the CAN bus
_CAPABILITY_MODULES = ("plugin_host.capabilities", "plugin_host.topics", "plugin_host.artifacts",
                       "can.", "cryptography.")
#: ... and by name, wherever a class comes from (a capability wrapped by someone else)
_CAPABILITY_NAMES = ("Capability", "Capabilities", "CapabilityBroker", "CanSend", "PandaSafety",
                     "SimulatedPanda", "Publisher", "Topic", "Topics", "TrustStore",
                     "Ed25519PrivateKey", "AuditLog", "BusABC")


def _is_capability(obj) -> bool:
    if isinstance(obj, type):
        return False
    cls = type(obj)
    module = getattr(cls, "__module__", "") or ""
    names = {c.__name__ for c in getattr(cls, "__mro__", (cls,))}
    return module.startswith(_CAPABILITY_MODULES) or bool(names & set(_CAPABILITY_NAMES))


def capability_scan(x):
    """Look everywhere a plugin can look: the heap, every module's globals, every frame."""
    found = set()
    objects = gc.get_objects()
    for obj in objects:
        if _is_capability(obj):
            found.add(f"heap: {type(obj).__module__}.{type(obj).__name__}")
    for name, module in list(sys.modules.items()):
        for value in list(getattr(module, "__dict__", {}).values()):
            if _is_capability(value):
                found.add(f"{name}: {type(value).__name__}")
    frames = 0
    for frame in sys._current_frames().values():
        while frame is not None:
            frames += 1
            for value in list(frame.f_locals.values()):
                if _is_capability(value):
                    found.add(f"frame {frame.f_code.co_name}: {type(value).__name__}")
            frame = frame.f_back
    sockets = [fd for fd in range(3, 1024) if _fd_kind(fd) == "socket"]
    if len(sockets) > 1:
        found.add(f"{len(sockets)} sockets (the worker should have only its channel)")
    if found:
        return "found: " + ", ".join(sorted(found))
    raise LookupError(f"no capability objects: scanned {len(objects)} heap objects, "
                      f"{len(sys.modules)} modules, {frames} frames, {len(sockets)} socket(s)")


def _fd_kind(fd: int) -> str | None:
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    if stat.S_ISSOCK(st.st_mode):
        return "socket"
    if stat.S_ISREG(st.st_mode) and st.st_nlink == 0:
        return "memfd"
    return "other"


# --- the shared input region --------------------------------------------------------------------


def shm_write_numpy(x):
    x[0, 5] = 1.0
    return "wrote the input region through numpy"


def shm_writeable_flag(x):
    x.flags.writeable = True
    return "made the input view writable"


def shm_mprotect(x):
    libc = _libc()
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    page = x.ctypes.data & ~(mmap.PAGESIZE - 1)
    return _check(libc.mprotect(page, mmap.PAGESIZE, PROT_READ | PROT_WRITE),
                  "mprotect(input region, RW)")


def shm_remap_writable(x):
    """Find the input region's descriptor and map it writable, or write to it."""
    tried = []
    for fd in range(3, 1024):
        if _fd_kind(fd) != "memfd":
            continue
        size = os.fstat(fd).st_size
        try:
            m = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError as exc:
            tried.append(exc)
            continue
        # a region the worker may write (outputs) is expected; the input region must not be
        if m[:8] == x.tobytes()[:8]:
            return f"mapped the input region (fd {fd}) writable"
        m.close()
    if not tried:
        raise LookupError("no read-only shared region found")
    raise tried[0]


def shm_memmove(x):
    ctypes.memmove(x.ctypes.data + 20, b"\xff\xff\xff\xff", 4)
    return "wrote the input region through ctypes.memmove"


# --- the kernel and the machine ---------------------------------------------------------------


def mount(x):
    libc = _libc()
    return _check(libc.mount(b"none", b"/tmp", b"tmpfs", 0, None), "mount(tmpfs)")


def unshare_userns(x):
    libc = _libc()
    return _check(libc.unshare(CLONE_NEWUSER), "unshare(CLONE_NEWUSER)")


def bpf(x):
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    attr = ctypes.create_string_buffer(128)
    return _check(libc.syscall(SYS_BPF, 0, attr, 128), "bpf(MAP_CREATE)")


def kexec_load(x):
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    return _check(libc.syscall(SYS_KEXEC_LOAD, 0, 0, None, 0), "kexec_load")


def init_module(x):
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    image = ctypes.create_string_buffer(64)
    return _check(libc.syscall(SYS_INIT_MODULE, image, 64, b""), "init_module")


def io_uring(x):
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    params = ctypes.create_string_buffer(120)
    return _check(libc.syscall(SYS_IO_URING_SETUP, 8, params), "io_uring_setup")


def personality(x):
    libc = _libc()
    return _check(libc.personality(0x0400000), "personality(READ_IMPLIES_EXEC)")


def setuid_root(x):
    os.setuid(0)
    return "became root"


def raise_rlimit(x):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard + 1024, hard + 1024))
    return f"raised RLIMIT_NOFILE above {hard}"


def prlimit_host(x):
    resource.prlimit(_host(), resource.RLIMIT_NOFILE, (16, 16))
    return "changed the host's limits"


def exhaust_memory(x):
    hog = []
    while len(hog) < 10_000:
        hog.append(np.empty(256 * 2**20, np.uint8))  # address space, untouched
    return f"allocated {len(hog) // 4} GiB"


def spin(x):
    while True:
        pass


# --- talking to the host ----------------------------------------------------------------------


def forge_message(x):
    """Write garbage on the worker's own channel, as if it were the worker's reply."""
    for fd in range(3, 1024):
        if _fd_kind(fd) == "socket":
            os.write(fd, b"\xc1 not msgpack")
            return "forged a message (the host must refuse it)"
    raise LookupError("no socket found")


def import_time(x):
    """Report what the sibling module ``evil_import`` tried while it was being imported."""
    results = sys.modules["tests.plugins.evil_import"].RESULTS
    succeeded = {k: v for k, v in results.items() if not v.startswith("denied")}
    if succeeded:
        return f"at import time: {succeeded}"
    raise LookupError("import-time attacks: " + json.dumps(results, sort_keys=True))


ATTACKS = {f.__name__: f for f in (
    af_can, tcp_connect, udp_send, inet6, netlink, packet, unix_connect, abstract_unix,
    ctypes_syscall, thread_socket, subprocess_run, os_system, exec_shell, fork, ptrace_attach,
    ptrace_traceme, process_vm_readv, kill_host, kill_everyone, tgkill_host, pidfd_open_host,
    exit_worker, write_tmp, write_project, overwrite_artifact, read_key, read_host_proc,
    many_files, capability_scan, shm_write_numpy, shm_writeable_flag, shm_mprotect,
    shm_remap_writable, shm_memmove, mount, unshare_userns, bpf, kexec_load, init_module,
    io_uring, personality, setuid_root, raise_rlimit, prlimit_host, exhaust_memory, spin,
    forge_message, import_time,
)}
NAMES = list(ATTACKS)


def attack_input(name: str, width: int = 16) -> np.ndarray:
    """The ``x`` that makes the kernel run attack ``name``."""
    x = np.zeros((1, width), np.float32)
    x[0, 0], x[0, 1] = MARK, NAMES.index(name)
    return x


def _relu_factory(attrs, consts, types, where):
    def relu(x):
        flat = x.reshape(-1)
        if flat.size >= 2 and flat[0] == MARK:
            name = NAMES[int(flat[1])]
            result = ATTACKS[name](x)
            raise AttackSucceeded(f"ATTACK SUCCEEDED: {name}: {result}")
        return np.maximum(x, 0)
    return relu


@hookimpl
def plugin_host_add_kernels(backend):
    return {"relu": _relu_factory}

