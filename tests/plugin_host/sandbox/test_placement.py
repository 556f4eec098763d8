"""Co-location (``SandboxLimits.cpu``, ``plugin_host/sandbox/placement.py``): the calling
thread and the worker's main thread share one CPU, the worker's other threads keep off it.

Calls are made from threads of their own: pinning the test runner's main thread would slow
every later test."""

from __future__ import annotations

import os
import signal
import threading

import numpy as np
import pytest

from plugin_host.errors import SandboxError, WorkerDiedError
from plugin_host.executor import Executor
from plugin_host.sandbox import SandboxedExecutor, SandboxLimits, placement
from plugin_host.sandbox.landlock import abi_version
from plugins.numpy_backend import NumpyBackend

CPUS = sorted(os.sched_getaffinity(0))

needs_worker = pytest.mark.skipif(
    os.geteuid() != 0 or abi_version() < 6,
    reason="the worker needs root (it drops to an unprivileged uid) and Landlock ABI 6")


def inputs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((1, 16)).astype(np.float32),
            "ids": rng.integers(0, 5, (1,)).astype(np.int64)}


def in_thread(fn):
    """``fn()``'s result (or exception) and the thread's affinity afterwards, from a new
    thread."""
    box = {}

    def target():
        try:
            box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc
        box["affinity"] = os.sched_getaffinity(0)

    t = threading.Thread(target=target)
    t.start()
    t.join(60)
    if "error" in box:
        raise box["error"]
    return box["result"], box["affinity"]


def thread_affinities(pid: int) -> dict[int, set[int]]:
    return {int(t): os.sched_getaffinity(int(t)) for t in os.listdir(f"/proc/{pid}/task")}


def test_auto_is_the_last_usable_cpu_and_none_is_no_placement():
    assert placement.resolve_cpu("auto") == CPUS[-1]
    assert placement.resolve_cpu(CPUS[0]) == CPUS[0]
    assert placement.resolve_cpu(None) is None


@pytest.mark.parametrize("cpu, fragment", [
    (-1, "must be a CPU number or 'auto'"), ("fast", "must be a CPU number or 'auto'"),
    (True, "must be a CPU number"), (1.0, "must be a CPU number"),
    (max(CPUS) + 1, f"may only run on CPU(s) {', '.join(map(str, CPUS))}"),
])
def test_a_cpu_that_cannot_be_used_is_refused_by_name(cpu, fragment):
    with pytest.raises(SandboxError, match="limits.cpu") as info:
        placement.resolve_cpu(cpu, where="limits.cpu")
    assert fragment in str(info.value)


def test_the_executor_refuses_an_unusable_cpu_before_starting_a_worker(redteam_artifact,
                                                                       sandbox_trust):
    with pytest.raises(SandboxError, match=r"limits.cpu = \d+: this process may only run"):
        SandboxedExecutor(redteam_artifact, trust=sandbox_trust,
                          limits=SandboxLimits(cpu=max(CPUS) + 1))


@needs_worker
@pytest.mark.skipif(len(CPUS) < 2, reason="co-location needs two CPUs to show")
def test_calling_thread_and_worker_main_share_the_cpu_and_the_rest_keep_off(
        redteam_artifact, sandbox_trust, redteam_graph):
    cpu = CPUS[0]
    limits = SandboxLimits(cpu=cpu, blas_threads=2)  # a BLAS thread besides the main one
    with SandboxedExecutor(redteam_artifact, trust=sandbox_trust, limits=limits) as sx:
        assert sx.cpu == cpu
        got, affinity = in_thread(lambda: [sx.run(inputs(i)) for i in range(3)])
        assert affinity == {cpu}
        threads = thread_affinities(sx.pid)
        assert threads.pop(sx.pid) == {cpu}
        assert all(cpu not in cpus for cpus in threads.values()), threads
        # the same results as unplaced
        local = Executor(redteam_graph, NumpyBackend())
        for i, out in enumerate(got):
            want = local.run(inputs(i))
            for name in want:
                np.testing.assert_allclose(out[name], want[name], rtol=1e-6, atol=1e-7)

        # a restarted worker is placed the same way
        old = sx.pid
        os.kill(old, signal.SIGKILL)
        with pytest.raises(WorkerDiedError):
            in_thread(lambda: sx.run(inputs()))
        assert sx.pid not in (None, old)
        in_thread(lambda: sx.run(inputs()))
        threads = thread_affinities(sx.pid)
        assert threads.pop(sx.pid) == {cpu}
        assert all(cpu not in cpus for cpus in threads.values()), threads
    # the test runner's own thread was never pinned
    assert sorted(os.sched_getaffinity(0)) == CPUS


@pytest.mark.skipif(len(CPUS) < 2, reason="needs two CPUs to tell the affinities apart")
def test_a_pinned_thread_gets_its_own_affinity_back_after_the_last_release():
    def pins():
        os.sched_setaffinity(0, {CPUS[0]})  # the thread's own choice, not all CPUs
        seen = []
        first = placement.pin_thread(CPUS[-1])
        second = placement.pin_thread(CPUS[-1])  # a second executor on the same thread
        assert first == second == threading.get_native_id()
        seen.append(os.sched_getaffinity(0))
        placement.release_thread(first)
        seen.append(os.sched_getaffinity(0))  # still held by the second
        placement.release_thread(second)
        seen.append(os.sched_getaffinity(0))
        placement.release_thread(second)  # one release too many: nothing happens
        seen.append(os.sched_getaffinity(0))
        return seen

    seen, _ = in_thread(pins)
    assert seen == [{CPUS[-1]}, {CPUS[-1]}, {CPUS[0]}, {CPUS[0]}]
    placement.release_thread(2**22 + 12345)  # never pinned, or ended: nothing to do


@needs_worker
@pytest.mark.skipif(len(CPUS) < 2, reason="co-location needs two CPUs to show")
def test_closing_the_executors_gives_the_calling_thread_its_cpus_back(redteam_artifact,
                                                                      sandbox_trust):
    def calls():
        limits = SandboxLimits(cpu=CPUS[-1])
        first = SandboxedExecutor(redteam_artifact, trust=sandbox_trust, limits=limits)
        second = SandboxedExecutor(redteam_artifact, trust=sandbox_trust, limits=limits)
        seen = []
        try:
            first.run(inputs())
            second.run(inputs())  # a hot swap: the new executor before the old one closes
            seen.append(os.sched_getaffinity(0))
            first.close()
            seen.append(os.sched_getaffinity(0))
            second.run(inputs())
        finally:
            first.close()
            second.close()
        seen.append(os.sched_getaffinity(0))
        return seen

    seen, _ = in_thread(calls)
    assert seen == [{CPUS[-1]}, {CPUS[-1]}, set(CPUS)]


@needs_worker
def test_without_a_cpu_nothing_is_pinned(redteam_artifact, sandbox_trust):
    with SandboxedExecutor(redteam_artifact, trust=sandbox_trust) as sx:
        assert sx.cpu is None
        _, affinity = in_thread(lambda: sx.run(inputs()))
        assert sorted(affinity) == CPUS
        assert all(sorted(c) == CPUS for c in thread_affinities(sx.pid).values())


@needs_worker
def test_threads_are_placed_at_start_and_again_after_the_first_call(
        redteam_artifact, sandbox_trust, monkeypatch):
    """A runtime may start its threads at the first call (onnxruntime's pool can): the
    worker's threads are placed once more then, and not on every call."""
    placed = []
    real = placement.pin_worker
    monkeypatch.setattr(placement, "pin_worker",
                        lambda pid, cpu, cpus: placed.append(pid) or real(pid, cpu, cpus))
    with SandboxedExecutor(redteam_artifact, trust=sandbox_trust,
                           limits=SandboxLimits(cpu=CPUS[-1])) as sx:
        assert placed == [sx.pid]
        in_thread(lambda: [sx.run(inputs(i)) for i in range(4)])
        assert placed == [sx.pid, sx.pid]


@needs_worker
def test_a_refused_placement_is_logged_once_and_calls_go_on(redteam_artifact, sandbox_trust,
                                                            monkeypatch, caplog):
    def refuse(*args):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(placement, "pin_worker", refuse)
    monkeypatch.setattr(placement, "pin_thread", refuse)
    with SandboxedExecutor(redteam_artifact, trust=sandbox_trust,
                           limits=SandboxLimits(cpu=CPUS[-1])) as sx:
        out, _ = in_thread(lambda: [sx.run(inputs(i)) for i in range(3)])
    assert len(out) == 3
    warnings = [r for r in caplog.records if "co-location" in r.getMessage()]
    assert len(warnings) == 1 and "not in force" in warnings[0].getMessage()
