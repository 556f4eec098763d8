"""Co-location: the threads that hand a call across the process boundary share one CPU.

A call through the sandbox wakes the worker's main thread and then the calling thread. When
the scheduler puts the one it wakes on an idle CPU, a virtual machine has to wake that CPU
first: on this project's 2-core VM that cost 40-50 us each way, on every call, whenever the
model's own threads had left a CPU idle (onnxruntime's pool sleeps between calls). With
``SandboxLimits.cpu`` set, the worker's main thread and every thread that calls ``run`` are
pinned to that CPU and the worker's other threads (BLAS, onnxruntime's pool) to the rest, so
each hand-off is a switch on one CPU (measured: 14-20 us each way) and the model's threads
never queue behind the main thread. ``bench/bench_sandbox.py`` and
``bench/bench_onnxruntime.py`` measure both placements.

The host sets the worker's affinities from outside (the worker's seccomp filter is not asked
to allow it); a worker that changes them back only slows itself down. A calling thread gets
its own affinity back when the last executor that pinned it closes (``release_thread``), so a
program that made and closed executors does not stay on one CPU.
"""

from __future__ import annotations

import os
import threading
from typing import Iterable

from ..errors import SandboxError

__all__ = ["AUTO", "OFF", "usable_cpus", "resolve_cpu", "pin_worker", "pin_thread",
           "release_thread"]

#: ``cpu = "auto"`` in a policy: the last CPU this process may run on (the first ones are
#: where the kernel tends to put interrupts)
AUTO = "auto"
#: ``cpu = "off"`` in a policy: no co-location, the kernel places the threads
OFF = "off"


_host_cpus: frozenset[int] | None = None
#: native thread id -> [its affinity before the first pin, how many pins hold it]
_pinned: dict[int, list] = {}
_pinned_lock = threading.Lock()


def usable_cpus() -> set[int]:
    """The CPUs this process may use, as they were before this module pinned any thread
    (a thread pinned by an earlier executor would otherwise make it one CPU)."""
    global _host_cpus
    if _host_cpus is None:
        _host_cpus = frozenset(os.sched_getaffinity(0))
    return set(_host_cpus)


def resolve_cpu(cpu: int | str | None, *, where: str = "cpu") -> int | None:
    """``cpu`` as a CPU number this process may run on (``"auto"``: the last one), or None.

    A CPU outside this process's affinity, or anything but a non-negative int or ``"auto"``,
    is a :class:`SandboxError` naming ``where`` and the CPUs that may be used."""
    if cpu is None:
        return None
    usable = usable_cpus()
    if cpu == AUTO:
        return max(usable)
    if type(cpu) is not int or cpu < 0:
        raise SandboxError(f"{where} must be a CPU number or {AUTO!r}, not {cpu!r}",
                           where=where)
    if cpu not in usable:
        raise SandboxError(f"{where} = {cpu}: this process may only run on CPU(s) "
                           f"{_listed(usable)}", where=where)
    return cpu


def pin_worker(pid: int, cpu: int, cpus: set[int]) -> dict[int, set[int]]:
    """The worker ``pid``'s main thread onto ``cpu``, its other threads onto the other CPUs
    of ``cpus`` (the host's, taken before any of its threads was pinned; all of them when
    there is no other). Returns tid -> affinity set. Threads that ended meanwhile are
    skipped; OSError (EPERM) propagates."""
    others = (set(cpus) - {cpu}) or {cpu}
    placed: dict[int, set[int]] = {}
    for tid in _threads(pid):
        want = {cpu} if tid == pid else others
        try:
            os.sched_setaffinity(tid, want)
        except ProcessLookupError:
            continue
        placed[tid] = want
    return placed


def pin_thread(cpu: int) -> int:
    """The calling thread onto ``cpu``; returns its native id, for :func:`release_thread`
    (one release for each pin). OSError (EPERM) propagates, and then nothing is held."""
    usable_cpus()  # taken before the first pin
    tid = threading.get_native_id()
    with _pinned_lock:
        held = _pinned.get(tid)
        before = held[0] if held else os.sched_getaffinity(0)
        os.sched_setaffinity(0, {cpu})
        if held:
            held[1] += 1
        else:
            _pinned[tid] = [before, 1]
    return tid


def release_thread(tid: int) -> None:
    """One pin of thread ``tid`` (a :func:`pin_thread` result) released; the last one gives
    the thread back the affinity it had before the first. A thread that has ended is
    forgotten."""
    with _pinned_lock:
        held = _pinned.get(tid)
        if held is None:
            return
        held[1] -= 1
        if held[1] > 0:
            return
        del _pinned[tid]
        try:
            os.sched_setaffinity(tid, held[0])
        except (ProcessLookupError, PermissionError):
            pass


def _threads(pid: int) -> Iterable[int]:
    try:
        return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except FileNotFoundError:
        return []


def _listed(cpus: set[int]) -> str:
    return ", ".join(str(c) for c in sorted(cpus))
