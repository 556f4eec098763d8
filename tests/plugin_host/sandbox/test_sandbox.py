"""The sandboxed executor: same results as the in-process executor, the protections it reports,
refusals before anything runs, errors with their types, supervision and restarts."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import threading
import time

import numpy as np
import pytest

from abi.artifact import ArtifactFile
from abi.errors import ABIError, IndexRangeError, ShapeError
from plugin_host.artifacts import TrustStore, generate_key
from plugin_host.errors import (GoldenMismatchError, PluginError, ProtectionUnavailableError,
                                SandboxError, TensorHashError, UntrustedKeyError,
                                WorkerCallError, WorkerDiedError, WorkerTimeoutError)
from plugin_host.executor import Executor
from plugin_host.sandbox import SandboxedExecutor, SandboxLimits, SandboxRequirements, ipc
from plugin_host.sandbox import client
from plugin_host.sandbox.landlock import abi_version
from plugins.numpy_backend import NumpyBackend

FAULTY = "tests.plugins.faulty_layer"
WRONG = "tests.plugins.wrong_layer"

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the worker drops from root to an unprivileged "
                                                 "uid and unshares its network: run as root"),
    pytest.mark.skipif(abi_version() < 6, reason="this kernel has no Landlock ABI 6 (signal and "
                                                 "abstract unix socket scoping)"),
]


def frames(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((1, 16)).astype(np.float32),
             "ids": rng.integers(0, 5, (1,)).astype(np.int64)} for _ in range(n)]


@pytest.fixture(scope="module")
def sx(redteam_artifact, sandbox_trust):
    with SandboxedExecutor(redteam_artifact, trust=sandbox_trust) as executor:
        yield executor


@pytest.fixture
def fresh(redteam_artifact, sandbox_trust):
    with SandboxedExecutor(redteam_artifact, trust=sandbox_trust) as executor:
        yield executor


def assert_same(got, want):
    assert set(got) == set(want)
    for name in want:
        assert got[name].dtype == want[name].dtype and got[name].shape == want[name].shape
        np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-7)


# --- same results, state and resets -----------------------------------------------------------


def test_outputs_and_state_match_the_in_process_executor(sx, redteam_graph):
    sx.reset("test start")
    local = Executor(redteam_graph, NumpyBackend())
    for inputs in frames(4):
        assert_same(sx.run(inputs), local.run(inputs))
        assert_same(sx.state, local.state)
    assert sx.index_inputs == local.index_inputs == {"ids": 5}


def test_the_state_mirror_is_not_changed_through_outputs_or_copies(fresh, redteam_graph):
    """The host's mirror of the state is a view of the output region: what run returns and
    what ``state`` returns are copies, and changing them changes neither the mirror nor the
    next call; the next answer moves the mirror on."""
    local = Executor(redteam_graph, NumpyBackend())
    buffers = fresh.input_buffers()
    steps = frames(3, seed=11)
    for name, buffer in buffers.items():
        buffer[...] = steps[0][name]
    for _ in range(2):  # the second call is the binary steady state
        out = fresh.run(buffers)
        assert_same(out, local.run(steps[0]))
    out["h_next"][...] = 7.0
    fresh.state["h"][...] = 9.0
    assert_same(fresh.state, local.state)
    for name, buffer in buffers.items():
        buffer[...] = steps[1][name]
    assert_same(fresh.run(buffers), local.run(steps[1]))
    assert_same(fresh.state, local.state)
    fresh.reset("test")
    local.reset("test")
    assert not any(v.any() for v in fresh.state.values())
    assert_same(fresh.run(buffers), local.run(steps[1]))
    assert_same(fresh.state, local.state)


def test_reset_zeroes_the_state_in_the_worker_too(sx, redteam_graph):
    local = Executor(redteam_graph, NumpyBackend())
    inputs = frames(1, seed=3)[0]
    sx.run(inputs)
    before = sx.resets_by_reason["camera restart"]
    sx.reset("camera restart")
    assert sx.resets_by_reason["camera restart"] == before + 1
    assert not any(v.any() for v in sx.state.values())
    assert_same(sx.run(inputs), local.run(inputs))


def test_explicit_state_overrides_one_call(sx, redteam_graph):
    local = Executor(redteam_graph, NumpyBackend())
    inputs = {**frames(1, seed=4)[0], "h": np.full((1, 8), 0.5, np.float32)}
    assert_same(sx.run(inputs), local.run(inputs))


def test_normal_calls_raise_no_audit_events(sx):
    sx.audit_events.clear()
    for inputs in frames(3, seed=5):
        sx.run(inputs)
    sx.reset()
    assert list(sx.audit_events) == []


def test_the_demo_model_runs_in_the_sandbox(tmp_path, sandbox_key, sandbox_trust):
    from plugin_host.artifacts import build_artifact, sign_artifact
    from plugins.demo_model import build_demo_graph, demo_inputs

    graph = build_demo_graph(seed=0)
    path = tmp_path / "demo.pha"
    build_artifact(graph, path, version="1.0.0", reference_backend=NumpyBackend(),
                   latency_ms=200.0, golden_cases=1)
    sign_artifact(path, sandbox_key)
    local = Executor(graph, NumpyBackend())
    rng = np.random.default_rng(1)
    with SandboxedExecutor(path, trust=sandbox_trust) as demo:
        assert [c for c in demo.fused if c[0].startswith("vision")]  # fused chains in the worker
        for _ in range(2):
            inputs = demo_inputs(rng)
            got, want = demo.run(inputs), local.run(inputs)
            for name in want:
                np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)


# --- what is in force -------------------------------------------------------------------------


def test_protections_are_reported_logged_and_visible_in_proc(redteam_artifact, sandbox_trust,
                                                              caplog):
    with caplog.at_level(logging.INFO, logger="plugin_host.sandbox"):
        with SandboxedExecutor(redteam_artifact, trust=sandbox_trust) as ex:
            p = ex.protections
            pid = ex.pid
            status = open(f"/proc/{pid}/status").read()
    assert p.seccomp and p.seccomp_instructions > 100
    assert p.landlock_abi >= 6
    assert set(p.landlock_scopes) == {"signal", "abstract_unix_socket"}
    assert set(p.landlock_net_denied) == {"tcp_bind", "tcp_connect"}
    assert p.netns and p.no_new_privs and p.audit_hook
    assert (p.uid, p.gid, p.groups, p.capabilities) == (65534, 65534, (), 0)
    assert p.rlimits["RLIMIT_AS"][0] == SandboxLimits().address_space
    assert p.rlimits["RLIMIT_NOFILE"] == (64, 64) and p.rlimits["RLIMIT_CORE"] == (0, 0)
    assert "Seccomp:\t2" in status and "NoNewPrivs:\t1" in status
    # descriptors: /dev/null on 0-2, the channel, and the artifact map's own descriptor
    assert {p.fds[0], p.fds[1], p.fds[2]} == {"/dev/null"}
    others = [t for fd, t in p.fds.items() if fd > 2]
    assert sum(t.startswith("socket:") for t in others) == 1
    assert all(t.startswith("socket:") or t == str(redteam_artifact) for t in others), p.fds
    # the read-only allowlist holds code, not the artifact, keys or /tmp
    assert not any(path in ("/", "/tmp", str(redteam_artifact.parent))
                   for path in p.landlock_read_only)
    assert any("seccomp filter" in r.getMessage() and "landlock ABI" in r.getMessage()
               for r in caplog.records)


def test_the_worker_takes_the_hosts_openblas_kernel_choice_and_nothing_else(
        redteam_artifact, sandbox_trust, redteam_graph, monkeypatch):
    """A host that pins OpenBLAS's kernels (``OPENBLAS_CORETYPE``) has the worker pin the same
    ones, so both compute a graph with one set of kernels; the thread count stays the
    worker's own, and no other variable of the host's environment reaches it."""
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "7")
    monkeypatch.setenv("PLUGIN_HOST_TEST_SECRET", "not for the worker")
    with SandboxedExecutor(redteam_artifact, trust=sandbox_trust, env={"PLUGIN_X": "1"}) as ex:
        raw = open(f"/proc/{ex.pid}/environ", "rb").read()
        got = ex.run(frames(1)[0])
    env = dict(item.split(b"=", 1) for item in raw.split(b"\0") if item)
    assert env[b"OPENBLAS_CORETYPE"] == b"Haswell" and env[b"OPENBLAS_NUM_THREADS"] == b"1"
    assert env[b"PLUGIN_X"] == b"1" and b"PLUGIN_HOST_TEST_SECRET" not in env
    assert {k for k in env if k.startswith(b"OPENBLAS_")} <= {
        k.encode() for k in os.environ if k.startswith("OPENBLAS_")}
    assert set(got) == {s.name for s in redteam_graph.outputs}


def test_a_missing_required_protection_refuses_to_start(redteam_artifact, sandbox_trust):
    with pytest.raises(ProtectionUnavailableError) as info:
        SandboxedExecutor(redteam_artifact, trust=sandbox_trust,
                          requirements=SandboxRequirements(landlock_abi=99))
    assert info.value.protection == "landlock"
    assert "ABI 99" in str(info.value) and set(info.value.missing) == {"landlock"}


def test_requirements_by_policy_name():
    assert SandboxRequirements.only([]) == SandboxRequirements(
        seccomp=False, landlock_abi=0, netns=False, no_new_privs=False, uid=False, rlimits=False)
    assert SandboxRequirements.only(SandboxRequirements.NAMES) == SandboxRequirements()
    with pytest.raises(ValueError, match="selinux"):
        SandboxRequirements.only(["selinux"])


# --- refusals before anything runs ---------------------------------------------------------------


def test_untrusted_artifact_is_refused_before_a_worker_starts(redteam_artifact):
    other = TrustStore()
    other.add_key(generate_key().public_key())
    with pytest.raises(UntrustedKeyError) as info:
        SandboxedExecutor(redteam_artifact, trust=other)
    assert info.value.path == str(redteam_artifact)


def test_bad_inputs_never_reach_the_worker(sx, monkeypatch):
    def no_send(*a, **k):
        raise AssertionError("a refused input must not be sent to the worker")

    monkeypatch.setattr(sx._worker.chan, "send", no_send)
    good = frames(1)[0]
    with pytest.raises(ABIError) as info:
        sx.run({**good, "x": np.zeros((1, 15), np.float32)})
    assert "dim 1 expected 16, got 15" in str(info.value)
    with pytest.raises(ABIError, match="dtype expected float32"):
        sx.run({**good, "x": good["x"].astype(np.float64)})
    with pytest.raises(ABIError, match="missing input 'ids'"):
        sx.run({"x": good["x"]})
    with pytest.raises(IndexRangeError) as bad:
        sx.run({**good, "ids": np.array([9], np.int64)})
    assert bad.value.positions == [(0,)] and bad.value.values == [9]
    assert "input 'ids' (Embedding 'emb')" in str(bad.value)


def test_the_steady_state_input_check_still_sees_a_changed_input(sx):
    good = frames(2)
    sx.run(good[0])
    sx.run(good[1])  # the same names, dtypes and shapes: the check's result is reused
    with pytest.raises(ABIError, match="dtype expected float32"):
        sx.run({**good[0], "x": good[0]["x"].astype(np.float64)})
    with pytest.raises(ABIError, match="dim 1 expected 16, got 15"):
        sx.run({**good[0], "x": np.zeros((1, 15), np.float32)})
    with pytest.raises(IndexRangeError):  # values are checked on every call
        sx.run({**good[0], "ids": np.array([9], np.int64)})
    sx.run(good[0])
    assert sx.restarts == 0


def test_input_buffers_again_and_again_match_the_in_process_executor(fresh, redteam_graph):
    """The zero-copy steady state (the same buffers every call: only a binary message goes
    out) and every way out of it give the in-process executor's outputs and state."""
    local = Executor(redteam_graph, NumpyBackend())
    inputs = frames(8, seed=3)
    buffers = fresh.input_buffers()

    def step(feed):
        assert_same(fresh.run(feed), local.run({k: np.array(v) for k, v in feed.items()}))

    for feed in inputs[:3]:
        for name, buffer in buffers.items():
            buffer[...] = feed[name]
        step(buffers)                                   # the same buffers: the steady state
    step({**buffers, "x": inputs[3]["x"]})              # one input copied instead
    buffers["ids"][...] = 9                             # values are checked on every call
    with pytest.raises(IndexRangeError):
        fresh.run(buffers)
    buffers["ids"][...] = inputs[4]["ids"]
    step(buffers)
    old = buffers
    buffers = fresh.input_buffers()                     # the old ones are retired: copied
    step({name: np.array(inputs[5][name]) for name in old} | {"x": old["x"]})
    for name, buffer in buffers.items():
        buffer[...] = inputs[6][name]
    step(buffers)
    step(buffers)
    assert fresh.restarts == 0


def test_the_worker_checks_index_values_itself_in_the_steady_state(fresh, monkeypatch):
    """The worker reuses its ABI check while its input views stay the same, but checks the
    Embedding index values on every call itself: a host that skipped its check (or a value
    written into the buffer after it) is still refused, by the worker."""
    buffers = fresh.input_buffers()
    for name, buffer in buffers.items():
        buffer[...] = frames(1)[0][name]
    fresh.run(buffers)
    fresh.run(buffers)                                  # the binary steady state
    monkeypatch.setattr(client, "check_indices", lambda *args: None)  # the host's check
    buffers["ids"][...] = -1
    with pytest.raises(IndexRangeError) as info:
        fresh.run(buffers)
    assert info.value.values == [-1]
    assert fresh.pid == fresh.last_pid and fresh.restarts == 0  # refused, not crashed
    buffers["ids"][...] = 2
    fresh.run(buffers)


@pytest.mark.parametrize("limits", [
    SandboxLimits(call_timeout=float("inf")), SandboxLimits(call_timeout=float("nan")),
    SandboxLimits(call_timeout=0), SandboxLimits(call_timeout=-1.0),
    SandboxLimits(call_timeout="2"), SandboxLimits(call_timeout=True),
    SandboxLimits(start_timeout=0)])
def test_a_timeout_that_is_not_a_positive_number_is_refused_by_name(
        redteam_artifact, sandbox_trust, limits):
    """A timeout bounds a wait on the worker: one that cannot (not a positive, finite number)
    is refused before anything starts, naming the setting."""
    name = "call_timeout" if limits.call_timeout is not None else "start_timeout"
    with pytest.raises(SandboxError, match=f"limits.{name} must be a positive number"):
        SandboxedExecutor(redteam_artifact, trust=sandbox_trust, limits=limits)


def in_the_steady_state(executor, seed):
    """One frame written into ``executor``'s input buffers and run twice: the second call
    is the zero-copy steady call (one binary message each way). (buffers, the frame)."""
    buffers = executor.input_buffers()
    feed = frames(1, seed=seed)[0]
    for name, buffer in buffers.items():
        buffer[...] = feed[name]
    executor.run(buffers)
    executor.run(buffers)
    assert executor._fast is not None
    return buffers, feed


def test_a_worker_killed_in_the_steady_state_is_restarted(fresh, redteam_graph):
    """The zero-copy steady call (one binary message each way) finds a dead worker as any
    call does: WorkerDiedError, state reset, a new worker; the retired buffers then go by
    copy and the results are the in-process executor's."""
    buffers, feed = in_the_steady_state(fresh, seed=5)
    pid = fresh.pid
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(WorkerDiedError) as info:
        fresh.run(buffers)
    assert info.value.pid == pid
    assert fresh.restarts == 1 and fresh.resets_by_reason["worker restart"] == 1
    local = Executor(redteam_graph, NumpyBackend())
    assert_same(fresh.run(buffers), local.run(feed))


def test_a_worker_that_stops_answering_in_the_steady_state_hits_the_call_timeout(
        redteam_artifact, sandbox_trust, redteam_graph):
    """A worker that never answers a steady call (stopped here) costs the call timeout,
    even while signals keep interrupting the host's wait (a handler runs on each): it is
    then killed and replaced, and the next call is answered."""
    limits = SandboxLimits(call_timeout=0.5)
    with SandboxedExecutor(redteam_artifact, trust=sandbox_trust, limits=limits) as ex:
        buffers, feed = in_the_steady_state(ex, seed=6)
        pid = ex.pid
        os.kill(pid, signal.SIGSTOP)
        interrupts = []

        def handler(signum, frame):
            interrupts.append(signum)
            if len(interrupts) > 300:  # six seconds of signals: the wait lost its bound
                raise AssertionError("the call outlived its timeout under signals")

        def signaller(target, done):  # a signal to the calling thread every 20 ms
            while not done.wait(0.02):
                signal.pthread_kill(target, signal.SIGUSR1)

        previous = signal.signal(signal.SIGUSR1, handler)
        done = threading.Event()
        thread = threading.Thread(target=signaller, args=(threading.get_ident(), done))
        thread.start()
        start = time.monotonic()
        try:
            with pytest.raises(WorkerTimeoutError) as info:
                ex.run(buffers)
        finally:
            done.set()
            thread.join()
            signal.signal(signal.SIGUSR1, previous)
        waited = time.monotonic() - start
        assert info.value.pid == pid and "call timeout" in str(info.value)
        assert 0.45 <= waited < 5 and len(interrupts) >= 10
        assert ex.restarts == 1 and ex.pid != pid
        local = Executor(redteam_graph, NumpyBackend())
        assert_same(ex.run(buffers), local.run(feed))


def test_kernel_errors_arrive_with_their_type_and_context(redteam_artifact, sandbox_trust):
    with SandboxedExecutor(redteam_artifact, trust=sandbox_trust, plugin_modules=[FAULTY],
                           kernel_overrides={"relu": FAULTY}) as ex:
        x = np.zeros((1, 16), np.float32)
        ids = np.array([1], np.int64)
        x[0, 0] = 999
        with pytest.raises(ShapeError) as shape:
            ex.run({"x": x, "ids": ids})
        assert shape.value.expected == (1, 2) and shape.value.got == (1, 16)
        assert shape.value.context["node"] == "act"
        x[0, 0] = 998
        with pytest.raises(IndexRangeError) as index:
            ex.run({"x": x, "ids": ids})
        assert index.value.positions == [(0, 1)] and index.value.values == [7]
        x[0, 0] = 997
        with pytest.raises(WorkerCallError) as plain:
            ex.run({"x": x, "ids": ids})
        assert plain.value.remote_type == "TypeError" and "a plain Python error" in str(plain.value)
        assert "faulty_layer.py" in plain.value.remote_traceback
        x[0, 0] = 1
        assert ex.run({"x": x, "ids": ids})["y"].shape == (1, 8)
        assert ex.restarts == 0


def test_replacing_a_kernel_needs_the_override(redteam_artifact, sandbox_trust):
    with pytest.raises(PluginError) as info:
        SandboxedExecutor(redteam_artifact, trust=sandbox_trust, plugin_modules=[FAULTY])
    assert "'relu'" in str(info.value) and FAULTY in str(info.value)
    with pytest.raises(PluginError, match="listed for 'someone.else'"):
        SandboxedExecutor(redteam_artifact, trust=sandbox_trust, plugin_modules=[FAULTY],
                          kernel_overrides={"relu": "someone.else"})


def test_unknown_plugin_module_fails_start_up(redteam_artifact, sandbox_trust):
    with pytest.raises(SandboxError, match="no_such_plugin"):
        SandboxedExecutor(redteam_artifact, trust=sandbox_trust,
                          plugin_modules=["no_such_plugin.kernels"])
    with pytest.raises(PluginError, match="no_such_backend"):
        SandboxedExecutor(redteam_artifact, trust=sandbox_trust,
                          backend_plugins=["no_such_backend"])


# --- supervision -----------------------------------------------------------------------------------


def test_a_worker_killed_between_calls_is_restarted_with_state_reset(fresh, redteam_graph):
    inputs = frames(2, seed=7)
    fresh.run(inputs[0])
    pid = fresh.pid
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(WorkerDiedError) as info:
        fresh.run(inputs[1])
    assert info.value.pid == pid and info.value.returncode == -signal.SIGKILL
    assert fresh.restarts == 1 and fresh.resets_by_reason["worker restart"] == 1
    assert fresh.pid not in (None, pid)
    local = Executor(redteam_graph, NumpyBackend())
    assert_same(fresh.run(inputs[1]), local.run(inputs[1]))


def test_malformed_messages_to_the_worker_are_refused(fresh):
    """Each is answered with an error (the refusal), and the worker keeps serving."""
    chan = fresh._worker.chan
    garbage = [b"\xc1",                                    # not msgpack
               b"\x93\x01\x02\x03",                        # not a map
               b"\x81\xa2op\xa4nope",                      # unknown op
               b"\x82\xa2op\xa3run\xa2id\xa1x",              # run with a str id
               b"\x82\xa2op\xa3run\xa2id\x05",              # run without inputs
               b"\xd4\x01\x00",                             # an ext type
               ipc.pack_call(ipc.RUN, 7),                   # binary "run again", no run yet
               ipc.pack_call(ipc.RUN, 7)[:-1],              # a binary call one byte short
               ipc.pack_call(ipc.HANDOFF, 7)[:40] + b"\x00" * 8,  # a handoff, no frame
               ipc.pack_answer(ipc.RESULT, 7, 0),           # the worker's own answer
               b"\x00" * (fresh.limits.max_message + 10)]   # over the cap
    for data in garbage:
        chan.send_raw(data)
        assert chan.poll(5.0)
        reply, fds = chan.recv()
        assert reply["op"] == "error" and not fds, (data[:20], reply)
        assert reply["error"]["type"] == "SandboxProtocolError"
    assert fresh.ping() > 0
    fresh.run(frames(1)[0])
    assert fresh.restarts == 0


def test_regions_grow_with_symbolic_dims(batch_artifact, sandbox_trust):
    with SandboxedExecutor(batch_artifact, trust=sandbox_trust) as ex:
        local = Executor(ex.graph, NumpyBackend())
        rng = np.random.default_rng(2)
        for batch in (1, 300, 5000, 7):
            x = rng.standard_normal((batch, 32)).astype(np.float32)
            assert_same(ex.run({"x": x}), local.run({"x": x}))
        assert ex._worker.regions["in"].size >= 5000 * 32 * 4


def test_outputs_larger_than_the_host_expected_are_collected_after_growing(batch_artifact,
                                                                         sandbox_trust,
                                                                         monkeypatch):
    """If the host underestimates the outputs, the worker keeps them and asks for room."""
    with SandboxedExecutor(batch_artifact, trust=sandbox_trust) as ex:
        monkeypatch.setattr(ex, "_output_bytes", lambda bindings: 0)
        x = np.random.default_rng(3).standard_normal((3000, 32)).astype(np.float32)
        before = ex._worker.regions["out"].size
        got = ex.run({"x": x})
        assert ex._worker.regions["out"].size > before >= 0
        assert_same(got, Executor(ex.graph, NumpyBackend()).run({"x": x}))


def test_the_worker_uses_the_verified_file_even_if_the_path_is_swapped(
        tmp_path, redteam_artifact, batch_artifact, sandbox_trust, redteam_graph):
    path = tmp_path / "model.pha"
    shutil.copyfile(redteam_artifact, path)
    with SandboxedExecutor(path, trust=sandbox_trust) as ex:
        os.replace(shutil.copyfile(batch_artifact, tmp_path / "other.pha"), path)
        os.kill(ex.pid, signal.SIGKILL)  # the restart re-reads the artifact
        with pytest.raises(WorkerDiedError):
            ex.run(frames(1)[0])
        local = Executor(redteam_graph, NumpyBackend())
        inputs = frames(1, seed=9)[0]
        assert_same(ex.run(inputs), local.run(inputs))


def test_a_file_changed_in_place_is_refused_by_the_worker(tmp_path, redteam_artifact,
                                                          sandbox_trust):
    path = tmp_path / "model.pha"
    shutil.copyfile(redteam_artifact, path)
    with SandboxedExecutor(path, trust=sandbox_trust) as ex:
        with ArtifactFile(path) as artifact:
            offset = artifact.header.tensor_offset
        with open(path, "r+b") as f:  # flip the first byte of the first tensor, in place
            byte = os.pread(f.fileno(), 1, offset)
            os.pwrite(f.fileno(), bytes([byte[0] ^ 0xFF]), offset)
        os.kill(ex.pid, signal.SIGKILL)
        with pytest.raises(WorkerDiedError, match="restart failed"):
            ex.run(frames(1)[0])
        with pytest.raises(TensorHashError):
            ex.run(frames(1)[0])


def test_restarts_back_off_while_failures_follow_each_other(fresh):
    delays = []
    fresh._sleep = delays.append
    inputs = frames(1)[0]
    for _ in range(3):
        os.kill(fresh.pid, signal.SIGKILL)
        with pytest.raises(WorkerDiedError):
            fresh.run(inputs)
    assert delays == [0.1, 0.2]  # the first restart is immediate, then doubling
    fresh.run(inputs)  # a successful call ends the series
    os.kill(fresh.pid, signal.SIGKILL)
    with pytest.raises(WorkerDiedError):
        fresh.run(inputs)
    assert delays == [0.1, 0.2] and fresh.restarts == 4


def test_acceptance_runs_the_golden_cases_in_the_sandbox(redteam_artifact, sandbox_trust):
    with SandboxedExecutor(redteam_artifact, trust=sandbox_trust) as ok:
        ok.check_golden()
        assert ok.resets_by_reason["acceptance"] == 1
    with SandboxedExecutor(redteam_artifact, trust=sandbox_trust, plugin_modules=[WRONG],
                           kernel_overrides={"relu": WRONG}) as wrong:
        with pytest.raises(GoldenMismatchError, match="in the sandbox"):
            wrong.check_golden()


def test_close_stops_the_worker(redteam_artifact, sandbox_trust):
    ex = SandboxedExecutor(redteam_artifact, trust=sandbox_trust)
    proc = ex._worker.proc
    ex.close()
    assert proc.poll() is not None
    with pytest.raises(SandboxError, match="closed"):
        ex.run(frames(1)[0])
    ex.close()  # idempotent


def test_plugins_under_a_root_only_folder_still_import(tmp_path, monkeypatch, redteam_artifact,
                                                       sandbox_trust, redteam_graph):
    # after the uid drop, file permissions hide a tree under a 0700 root folder (as a checkout
    # in a mktemp -d folder is); the worker reads plugin sources before it drops, never runs them
    hidden = tmp_path / "private"
    hidden.mkdir(mode=0o700)
    (hidden / "hidden_layers.py").write_text(
        "import numpy as np\n"
        "import plugin_host.builder  # a host module the worker has not imported itself\n"
        "from plugin_host.hooks import hookimpl\n"
        "@hookimpl\n"
        "def plugin_host_add_kernels(backend):\n"
        "    return {'relu': lambda attrs, consts, types, where: np.abs}\n")
    os.chmod(tmp_path, 0o700)
    monkeypatch.syspath_prepend(str(hidden))
    x = -np.abs(np.random.default_rng(0).standard_normal((1, 16))).astype(np.float32)
    feed = {"x": x, "ids": np.array([1], np.int64)}
    expected = Executor(redteam_graph, NumpyBackend()).run(feed)["y"]
    with SandboxedExecutor(redteam_artifact, trust=sandbox_trust,
                           plugin_modules=["hidden_layers"],
                           kernel_overrides={"relu": "hidden_layers"}) as sx:
        got = sx.run(feed)["y"]
    assert not np.allclose(got, expected), "the hidden plugin's kernel (abs, not relu) ran"


def test_a_worker_started_from_a_short_lived_thread_survives_it(redteam_artifact, sandbox_trust):
    # the worker's parent-death signal follows the thread that started it; workers are started
    # from the sandbox's own long-lived thread, so a caller's thread may come and go
    import threading

    box = {}
    t = threading.Thread(target=lambda: box.setdefault(
        "sx", SandboxedExecutor(redteam_artifact, trust=sandbox_trust)))
    t.start()
    t.join()
    sx = box["sx"]
    try:
        pid = sx.pid
        out = sx.run({"x": np.ones((1, 16), np.float32), "ids": np.array([1], np.int64)})
        assert out["y"].shape == (1, 8)
        assert sx.pid == pid and sx.restarts == 0
    finally:
        sx.close()


def test_inputs_that_are_not_a_mapping_are_an_abi_error_and_the_worker_goes_on(fresh):
    buffers = fresh.input_buffers()
    for name, value in frames(1)[0].items():
        buffers[name][...] = value
    want = fresh.run(buffers)  # input buffers: the steady state's fast path is set up
    fresh.reset()
    pid = fresh.pid
    # a list as long as the inputs reached the fast path's lookups before
    for given in ([1], ["x", "ids"], "xy", None):
        with pytest.raises(ABIError, match="expected a mapping of input name to "
                                           f"numpy.ndarray, got {type(given).__name__}"):
            fresh.run(given)
    assert fresh.pid == pid
    assert_same(fresh.run(buffers), want)


def test_a_worker_that_cannot_even_report_its_failed_start_up_is_explained(redteam_artifact,
                                                                          sandbox_trust):
    """64 MiB of address space: the worker's imports run out of memory, and so does its
    report of that; the host says what such an exit usually means and names the limit."""
    with pytest.raises(WorkerDiedError) as info:
        SandboxedExecutor(redteam_artifact, trust=sandbox_trust,
                          limits=SandboxLimits(address_space=64 * 2**20))
    text = str(info.value)
    assert "failed to start: it closed its channel; exited with status 3" in text
    assert "could not say why, as when memory runs out" in text and "64 MiB" in text


def test_a_stop_the_command_defers_ends_a_workers_start_and_the_worker(
        redteam_artifact, sandbox_trust, monkeypatch):
    """Noted before the start (plugin_host/stop_signals.py): the start-up's wait acts on it
    (StopRequested) and the worker is discarded, rather than the start running to its end."""
    from plugin_host.sandbox import supervisor
    from plugin_host.stop_signals import StopRequested, StopSignals

    spawned = []
    original = supervisor.spawn
    monkeypatch.setattr(supervisor, "spawn",
                        lambda *args, **kwargs: spawned.append(original(*args, **kwargs))
                        or spawned[-1])
    stops = StopSignals().install()
    try:
        with stops.deferred():
            stops(signal.SIGTERM, None)  # noted, as the signal would be
            with pytest.raises(StopRequested):
                SandboxedExecutor(redteam_artifact, trust=sandbox_trust)
    finally:
        stops.restore()
    [worker] = spawned
    assert worker.wait(timeout=10) is not None
