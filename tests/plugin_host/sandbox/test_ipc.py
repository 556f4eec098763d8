"""The channel and the shared regions, without a worker: framing, refusals, seals."""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import socket

import msgpack
import numpy as np
import pytest

from plugin_host.errors import SandboxProtocolError
from plugin_host.sandbox import ipc, seccomp

F_GET_SEALS = 1034


@pytest.fixture
def pair():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    yield ipc.Channel(a, 1024), ipc.Channel(b, 1024)
    a.close()
    b.close()


@pytest.mark.parametrize("data, why", [
    (b"\xc1", "undecodable"),
    (msgpack.packb([1, 2]), "must be a map"),
    (msgpack.packb({"no": "op"}), "must be a map with a str 'op'"),
    (msgpack.packb({"op": 3}), "str 'op'"),
    (msgpack.packb({1: "x", "op": "run"}), "undecodable"),              # non-str key
    (msgpack.packb({"op": "run", "x": msgpack.ExtType(5, b"xx")}), "ext type"),
    (msgpack.packb({"op": "run"}) + b"\x00", "undecodable"),           # trailing bytes
])
def test_malformed_messages_are_refused(data, why):
    with pytest.raises(SandboxProtocolError, match=why):
        ipc.unpack(data)


def test_messages_keep_their_boundaries_and_the_cap(pair):
    left, right = pair
    left.send({"op": "a", "n": 1})
    left.send({"op": "b", "blob": b"x" * 500})
    assert right.recv()[0] == {"op": "a", "n": 1}
    assert right.recv()[0]["op"] == "b"
    with pytest.raises(SandboxProtocolError, match="exceeds the cap"):
        left.send({"op": "big", "blob": b"x" * 2000})
    left.send_raw(b"\x00" * 2000)  # a peer ignoring the cap
    with pytest.raises(SandboxProtocolError, match="cap"):
        right.recv()
    left.send({"op": "after"})
    assert right.recv()[0] == {"op": "after"}


def test_descriptors_are_refused_unless_expected(pair, tmp_path):
    left, right = pair
    before = set(os.listdir("/proc/self/fd"))
    with open(tmp_path / "f", "wb") as f:
        left.send({"op": "with-fd"}, fds=[f.fileno()])
    with pytest.raises(SandboxProtocolError, match="descriptors"):
        right.recv()  # the kernel discards the descriptor: nothing leaks here
    assert set(os.listdir("/proc/self/fd")) <= before | {str(n) for n in range(3)}
    with open(tmp_path / "f", "rb") as f:
        left.send({"op": "with-fd"}, fds=[f.fileno()])
    message, fds = right.recv(accept_fds=True)
    assert message["op"] == "with-fd" and len(fds) == 1
    os.close(fds[0])


def test_end_of_file_is_none(pair):
    left, right = pair
    left.close()
    assert right.recv() == (None, [])


def test_the_input_region_is_read_only_for_the_worker():
    region = ipc.Region(10_000, name="test-in", worker_writable=False)
    try:
        assert region.size % mmap.PAGESIZE == 0 and region.size >= 10_000
        view = region.view(np.dtype(np.float32), (4,), 64)
        view[:] = [1, 2, 3, 4]  # the host writes through its own mapping
        fd = region.fd
        assert fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY
        seals = fcntl.fcntl(fd, F_GET_SEALS)
        assert seals & ipc.F_SEAL_FUTURE_WRITE and seals & ipc.F_SEAL_SHRINK
        with pytest.raises(PermissionError):
            mmap.mmap(fd, region.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        with pytest.raises(OSError) as info:
            os.write(fd, b"x")
        assert info.value.errno == errno.EBADF
        with pytest.raises(OSError):
            os.ftruncate(fd, 0)
        # even reopening the memfd read-write leaves it sealed against writes
        rw = os.open(f"/proc/self/fd/{fd}", os.O_RDWR)
        try:
            with pytest.raises(PermissionError):
                mmap.mmap(rw, region.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            with pytest.raises(PermissionError):
                os.pwrite(rw, b"x", 0)
        finally:
            os.close(rw)
        mapped = ipc.map_region(os.dup(fd), writable=False, max_size=2**20)
        assert np.frombuffer(mapped, np.float32, 4, 64).tolist() == [1, 2, 3, 4]
        with pytest.raises(TypeError):
            mapped[0] = 1
        mapped.close()
    finally:
        region.close()


def test_the_output_region_cannot_be_shrunk_under_the_host():
    region = ipc.Region(4096, name="test-out", worker_writable=True)
    try:
        with pytest.raises(PermissionError):
            os.ftruncate(region.fd, 0)
        mapped = ipc.map_region(os.dup(region.fd), writable=True, max_size=2**20)
        mapped[:4] = b"abcd"
        assert region.map[:4] == b"abcd"  # the host sees what the worker wrote
        mapped.close()
        with pytest.raises(SandboxProtocolError, match="outside"):
            ipc.map_region(os.dup(region.fd), writable=True, max_size=100)
    finally:
        region.close()


def test_the_seccomp_program_checks_the_architecture_first_and_allows_by_default():
    prog = seccomp.build_filter(1234)
    assert prog[0] == seccomp.Insn(0x20, 0, 0, 4)                       # load arch
    assert prog[1].k == seccomp.AUDIT_ARCH_X86_64 and prog[2].k == seccomp.SECCOMP_RET_KILL_PROCESS
    assert prog[4].k == seccomp.X32_SYSCALL_BIT and prog[5].k == seccomp.SECCOMP_RET_KILL_PROCESS
    assert prog[-1].k == seccomp.SECCOMP_RET_ALLOW
    compared = {i.k for i in prog if i.code == 0x15}
    assert set(seccomp.DENIED.values()) <= compared
    assert 1234 in compared  # kill/tgkill only to itself
    for insn in prog:  # every jump lands inside the program
        assert insn.jt < len(prog) and insn.jf < len(prog)


def test_binary_calls_and_answers_decode_to_the_same_dicts():
    assert ipc.unpack(ipc.pack_call(ipc.RUN, 5)) == {"op": "run", "id": 5, "again": True,
                                                     "frame": None}
    frame = (2, 7, 41, 1000, 2000)
    assert ipc.unpack(ipc.pack_call(ipc.RUN, 6, frame))["frame"] == frame
    assert ipc.unpack(ipc.pack_call(ipc.HANDOFF, 8, frame)) == {"op": "handoff", "id": 8,
                                                                "frame": frame}
    assert ipc.unpack(ipc.pack_answer(ipc.RESULT, 9, 1234)) == {
        "op": "result", "id": 9, "ok": True, "same": True, "us": 1234}
    assert ipc.unpack(ipc.pack_answer(ipc.HANDED, 10, 0xDEADBEEF))["crc"] == 0xDEADBEEF


def test_the_per_call_receive_takes_only_its_own_binary_result(pair):
    left, right = pair
    left.send_packed(ipc.pack_answer(ipc.RESULT, 7, 3210))
    assert right.recv_result(7, 1.0) == 3210
    # anything else stays for recv(), which decodes and checks it as usual
    left.send({"op": "audit", "event": "x"})
    left.send_packed(ipc.pack_answer(ipc.RESULT, 8, 1))
    assert right.recv_result(8, 1.0) is None
    assert right.poll(0)
    assert right.recv()[0] == {"op": "audit", "event": "x"}
    assert right.recv_result(8, 1.0) == 1
    left.send_packed(ipc.pack_answer(ipc.RESULT, 6, 5))  # a late answer to an earlier call
    assert right.recv_result(9, 1.0) is None
    assert right.recv()[0]["id"] == 6
    left.send_raw(ipc.pack_answer(ipc.RESULT, 9, 5)[:-1])  # one byte short
    assert right.recv_result(9, 1.0) is None
    with pytest.raises(SandboxProtocolError, match="16 bytes"):
        right.recv()
    assert right.recv_result(9, 0.05) is None and not right.poll(0)  # nothing came
    left.close()
    assert right.recv_result(9, 1.0) is None
    assert right.recv() == (None, [])


def test_the_workers_per_call_receive_takes_only_a_binary_run(pair, tmp_path):
    left, right = pair
    frame = (2, 7, 41, 1000, 2000)
    left.send_packed(ipc.pack_call(ipc.RUN, 5))
    left.send_packed(ipc.pack_call(ipc.RUN, 6, frame))
    assert right.recv_call() == (5, None)
    assert right.recv_call() == (6, frame)
    with open(tmp_path / "f", "wb") as f:  # a message with a descriptor stays, with it
        left.send({"op": "region", "kind": "in"}, fds=[f.fileno()])
        left.send({"op": "region", "kind": "in"}, fds=[f.fileno()])
    assert right.recv_call() is None
    message, fds = right.recv(accept_fds=True)
    assert message["op"] == "region" and len(fds) == 1
    os.close(fds[0])
    before = set(os.listdir("/proc/self/fd"))
    assert right.recv_call() is None
    with pytest.raises(SandboxProtocolError, match="descriptors"):
        right.recv()  # not expected here: refused, and the descriptor closed
    assert set(os.listdir("/proc/self/fd")) <= before
    left.send_raw(ipc.pack_call(ipc.RUN, 7)[:-1])  # one byte short
    assert right.recv_call() is None
    with pytest.raises(SandboxProtocolError, match="48 bytes"):
        right.recv()
    left.send_packed(ipc.pack_answer(ipc.RESULT, 8, 1))  # not a call: left for recv()
    assert right.recv_call() is None
    assert right.recv()[0]["op"] == "result"


@pytest.mark.parametrize("data, why", [
    (ipc.pack_call(ipc.RUN, 1) + b"\x00", "binary call is 48 bytes"),
    (ipc.pack_call(ipc.RUN, 1)[:-1], "binary call is 48 bytes"),
    (ipc.pack_answer(ipc.RESULT, 1, 0)[:-2], "binary answer is 16 bytes"),
    (ipc.pack_call(ipc.HANDOFF, 1)[:1] + b"\x00" * 47, "handoff without a frame"),
])
def test_malformed_binary_messages_are_refused(data, why):
    with pytest.raises(SandboxProtocolError, match=why):
        ipc.unpack(data)
