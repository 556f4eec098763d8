"""What a sandbox must have (requirements), how far it may go (limits), and what it got
(protections). Plain data shared by the host side and the worker."""

from __future__ import annotations

import resource
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping

__all__ = ["SandboxRequirements", "SandboxLimits", "Protections", "DEFAULT_PRELOAD"]

NOBODY = 65534

#: Modules the worker imports before it confines itself, besides what numpy and the host
#: already import: standard-library ones, and ``numpy.random``, which numpy imports only when
#: ``np.random`` is first used and the layer library (``plugins.nn``, hence every model-layer
#: plugin built on it) uses as it is imported. After the worker drops to an unprivileged uid
#: it can only import modules that uid may read; where Python is installed privately (e.g.
#: pyenv under a 0700 /root) that is none of the standard library, and in a checkout under a
#: private folder none of its virtual environment, so plugins' imports must be preloaded (and
#: an import under the audit hook is a tripwire event: ``marshal.loads`` of its code).
DEFAULT_PRELOAD = (
    "abc", "array", "collections", "contextlib", "copy", "dataclasses", "enum", "errno",
    "functools", "itertools", "json", "math", "numbers", "operator", "re", "struct",
    "threading", "time", "traceback", "types", "typing", "warnings", "weakref",
    "numpy.random",
)


@dataclass(frozen=True)
class SandboxRequirements:
    """Which protections must be in force, or the worker is refused before any plugin runs.

    The defaults require everything (fail closed). ``landlock_abi`` is the minimum Landlock ABI
    (6 gives signal and abstract-unix-socket scoping; 0 means Landlock is not required).
    ``uid``: the worker runs with a uid and gid other than 0, no supplementary groups and no
    capabilities. ``rlimits``: every limit of :class:`SandboxLimits` is in force. The names
    are the policy's ``[sandbox] require`` names (:data:`NAMES`).
    """

    seccomp: bool = True
    landlock_abi: int = 6
    netns: bool = True
    no_new_privs: bool = True
    uid: bool = True
    rlimits: bool = True

    #: the protections by name, as a policy's ``[sandbox] require`` lists them
    NAMES = ("seccomp", "landlock", "netns", "no_new_privs", "uid", "rlimits")

    @classmethod
    def only(cls, names: "Iterable[str]", *, landlock_abi: int = 6) -> "SandboxRequirements":
        """Requirements that require exactly the protections ``names`` (policy names)."""
        names = set(names)
        unknown = names - set(cls.NAMES)
        if unknown:
            raise ValueError(f"unknown sandbox protection(s): {', '.join(sorted(unknown))}; "
                             f"known: {', '.join(cls.NAMES)}")
        return cls(seccomp="seccomp" in names,
                   landlock_abi=landlock_abi if "landlock" in names else 0,
                   netns="netns" in names, no_new_privs="no_new_privs" in names,
                   uid="uid" in names, rlimits="rlimits" in names)


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of the worker and timeouts of the host.

    ``address_space`` (bytes, RLIMIT_AS), ``cpu_seconds`` (RLIMIT_CPU: a budget over the
    worker's lifetime; SIGXCPU then SIGKILL, after which the host restarts it),
    ``open_files`` (RLIMIT_NOFILE), ``tasks`` (RLIMIT_NPROC: threads of the worker's uid).
    Core dumps, file sizes, locked memory and message queues are limited to 0.

    ``call_timeout`` (seconds) bounds each call on the host side; the worker is killed and
    restarted when it is exceeded. None derives it from the artifact's declared worst-case
    latency: ``max(2 s, 20 x latency_ms)``. ``start_timeout`` bounds the worker's start-up.
    Both are positive numbers of seconds (below 1e6); anything else (0, infinity, NaN, a
    string) is refused by ``SandboxedExecutor`` with a SandboxError naming the setting.
    ``blas_threads``: OpenBLAS threads in the worker (None: the host's usable cores).
    ``uid``/``gid``: the unprivileged identity the worker runs as when the host is root.
    ``cpu``: co-location (``placement.py``): the worker's main thread and every thread that
    calls ``run`` are pinned to this CPU, the worker's other threads to the rest; ``"auto"``
    picks the last CPU this process may use; None (default here; a policy's default is
    ``"auto"``) leaves placement to the kernel. A pinned calling thread gets its affinity back
    when the last executor that pinned it closes.
    ``restart_backoff`` is the delay before a restart that follows another failure without a
    successful call in between (doubling each time, at most ``max_backoff``); the first
    restart is immediate. ``max_message`` caps one control message, either way.
    """

    address_space: int = 4 * 2**30
    cpu_seconds: int = 3600
    open_files: int = 64
    tasks: int = 256
    call_timeout: float | None = None
    start_timeout: float = 30.0
    blas_threads: int | None = None
    cpu: int | str | None = None
    uid: int = NOBODY
    gid: int = NOBODY
    restart_backoff: float = 0.1
    max_backoff: float = 5.0
    max_message: int = 64 * 2**10

    def rlimits(self) -> dict[str, int]:
        """The rlimits the worker sets (soft = hard, except CPU: hard = soft + 1)."""
        return {"RLIMIT_AS": self.address_space, "RLIMIT_CPU": self.cpu_seconds,
                "RLIMIT_NOFILE": self.open_files, "RLIMIT_NPROC": self.tasks,
                "RLIMIT_CORE": 0, "RLIMIT_FSIZE": 0, "RLIMIT_MEMLOCK": 0,
                "RLIMIT_MSGQUEUE": 0}


def _fmt_limit(name: str, value: int) -> str:
    if value == resource.RLIM_INFINITY:
        return "unlimited"
    if name in ("RLIMIT_AS", "RLIMIT_FSIZE", "RLIMIT_MEMLOCK", "RLIMIT_MSGQUEUE") and value:
        return f"{value / 2**20:.0f}M"
    if name == "RLIMIT_CPU":
        return f"{value}s"
    return str(value)


@dataclass(frozen=True)
class Protections:
    """What is in force in a running worker.

    ``seccomp``, ``no_new_privs``, ``uid``, ``gid``, ``groups``, ``capabilities`` (effective
    set bitmask), ``rlimits`` (name -> (soft, hard)), ``netns`` and ``fds`` (descriptor ->
    what it is) are read by the host from ``/proc/<pid>`` (every thread must be in seccomp
    filter mode and have no_new_privs for those to count); ``landlock_abi`` (0 when not in
    force), the Landlock details, ``seccomp_instructions`` and ``audit_hook`` come from the
    worker's report, made before any plugin code ran in it. ``problems`` says why a protection
    is missing.
    """

    pid: int
    seccomp: bool
    seccomp_instructions: int
    landlock_abi: int
    landlock_read_only: tuple[str, ...]
    landlock_scopes: tuple[str, ...]
    landlock_net_denied: tuple[str, ...]
    netns: bool
    no_new_privs: bool
    uid: int
    gid: int
    groups: tuple[int, ...]
    capabilities: int
    rlimits: Mapping[str, tuple[int, int]]
    fds: Mapping[int, str]
    threads: int
    audit_hook: bool
    problems: Mapping[str, str] = field(default_factory=dict)

    @property
    def unprivileged(self) -> bool:
        return self.uid != 0 and self.gid != 0 and not self.groups and self.capabilities == 0

    def missing(self, required: SandboxRequirements, limits: SandboxLimits) -> dict[str, str]:
        """``{protection: why}`` for every required protection that is not in force."""
        out: dict[str, str] = {}
        if required.seccomp and not self.seccomp:
            out["seccomp"] = self.problems.get("seccomp", "no seccomp filter on every thread")
        if required.landlock_abi and self.landlock_abi < required.landlock_abi:
            why = self.problems.get("landlock")
            out["landlock"] = (f"Landlock ABI {required.landlock_abi} required, "
                               + (f"not in force: {why}" if why or not self.landlock_abi
                                  else f"the kernel offers ABI {self.landlock_abi}"))
        if required.netns and not self.netns:
            out["netns"] = self.problems.get("netns", "the worker shares the host's network "
                                                      "namespace")
        if required.no_new_privs and not self.no_new_privs:
            out["no_new_privs"] = "no_new_privs is not set on every thread"
        if required.uid and not self.unprivileged:
            out["uid"] = (self.problems.get("uid") or
                                   f"uid {self.uid}, gid {self.gid}, groups "
                                   f"{list(self.groups)}, capabilities {self.capabilities:#x}")
        if required.rlimits:
            wrong = []
            for name, value in limits.rlimits().items():
                soft, hard = self.rlimits.get(name, (resource.RLIM_INFINITY,) * 2)
                if soft > value or hard > value + (1 if name == "RLIMIT_CPU" else 0):
                    wrong.append(f"{name}={_fmt_limit(name, soft)} (want "
                                 f"{_fmt_limit(name, value)})")
            if wrong:
                out["rlimits"] = ", ".join(wrong)
        return out

    def in_force(self, limits: SandboxLimits) -> list[str]:
        """The protections in force, by their policy names (:attr:`SandboxRequirements.NAMES`),
        judged as the default requirements judge them (``rlimits``: those of ``limits``)."""
        missing = self.missing(SandboxRequirements(), limits)
        return [name for name in SandboxRequirements.NAMES if name not in missing]

    def summary(self) -> str:
        """One line for the log."""
        parts = [f"seccomp filter ({self.seccomp_instructions} insns)" if self.seccomp
                 else "NO seccomp"]
        if self.landlock_abi:
            parts.append(f"landlock ABI {self.landlock_abi} (read-only: "
                         f"{len(self.landlock_read_only)} paths; no TCP; scoped: "
                         f"{', '.join(self.landlock_scopes) or 'none'})")
        else:
            parts.append("NO landlock")
        parts.append("netns" if self.netns else "NO netns")
        parts.append("no_new_privs" if self.no_new_privs else "NO no_new_privs")
        parts.append(f"uid {self.uid} gid {self.gid}"
                     + (f" groups {list(self.groups)}" if self.groups else "")
                     + (f" caps {self.capabilities:#x}" if self.capabilities else ""))
        limits = " ".join(f"{n[7:]}={_fmt_limit(n, s)}" for n, (s, _) in sorted(self.rlimits.items())
                          if n in ("RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_NOFILE", "RLIMIT_NPROC",
                                   "RLIMIT_CORE"))
        parts.append(f"rlimits {limits}")
        parts.append(f"fds {sorted(self.fds)}")
        parts.append(f"{self.threads} thread(s)")
        if self.audit_hook:
            parts.append("audit hook")
        return ", ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
