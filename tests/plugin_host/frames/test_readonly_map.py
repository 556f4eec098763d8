"""The pool mapped read-only by descriptor in another process (as the sandbox worker maps it):
it sees the producer's bytes without a copy, cannot write them by any route, and sees a
refill through the generation id."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from plugin_host.errors import FrameError, FrameFormatError, FrameOverwrittenError
from plugin_host.frames import Frame, FrameLayout, FramePool, map_pool

from .conftest import produce

CHILD = textwrap.dedent(r"""
    import ctypes, json, mmap, os, sys
    import numpy as np
    from plugin_host.errors import FrameOverwrittenError
    from plugin_host.frames import Frame, map_pool

    fd = int(sys.argv[1])
    frame = Frame.from_dict(json.loads(sys.argv[2]))
    reader = map_pool(fd)
    planes = reader.planes(frame)
    report = {"Y": planes["Y"].tobytes().hex(), "UV": planes["UV"].tobytes().hex(),
              "writeable": planes["Y"].flags.writeable, "attempts": {}}

    def attempt(name, fn):
        try:
            fn()
            report["attempts"][name] = "wrote"
        except Exception as exc:
            report["attempts"][name] = f"{type(exc).__name__} {getattr(exc, 'errno', None)}"

    def assign():
        planes["Y"][0, 0] = 1

    def setflags():
        planes["Y"].setflags(write=True)

    def mmap_write():
        m = mmap.mmap(fd, 0, mmap.MAP_SHARED, mmap.PROT_READ)
        m[0:1] = b"x"

    def map_writable():
        mmap.mmap(fd, 0, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)

    def mprotect():
        libc = ctypes.CDLL(None, use_errno=True)
        addr = planes["Y"].__array_interface__["data"][0] & ~(mmap.PAGESIZE - 1)
        libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        if libc.mprotect(addr, mmap.PAGESIZE, mmap.PROT_READ | mmap.PROT_WRITE) != 0:
            raise OSError(ctypes.get_errno(), "mprotect")

    def write_fd():
        os.pwrite(fd, b"x", 0)

    def reopen_and_write():
        rw = os.open(f"/proc/self/fd/{fd}", os.O_RDWR)
        try:
            os.pwrite(rw, b"x", 0)
        finally:
            os.close(rw)

    def reopen_and_map_writable():
        rw = os.open(f"/proc/self/fd/{fd}", os.O_RDWR)
        try:
            mmap.mmap(rw, 0, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(rw)

    def truncate():
        rw = os.open(f"/proc/self/fd/{fd}", os.O_RDWR)
        try:
            os.ftruncate(rw, 4096)
        finally:
            os.close(rw)

    for name, fn in list(locals().items()):
        if name in ("assign", "setflags", "mmap_write", "map_writable", "mprotect", "write_fd",
                    "reopen_and_write", "reopen_and_map_writable", "truncate"):
            attempt(name, fn)
    reader.check(frame)
    print(json.dumps(report), flush=True)

    sys.stdin.readline()  # the parent refills the slot meanwhile
    try:
        reader.check(frame)
        print("not detected", flush=True)
    except FrameOverwrittenError as exc:
        print(f"detected {exc.expected} {exc.got}", flush=True)
""")


@pytest.fixture
def pool():
    pool = FramePool(FrameLayout.create("NV12", 32, 8), 2, camera="road")
    yield pool
    pool.close()


def test_a_child_maps_the_pool_read_only_sees_the_bytes_and_cannot_write(pool):
    rng = np.random.default_rng(0)
    # the parent writes a recognisable frame through the producer's mapping
    w = pool.begin_frame()
    w.planes["Y"][...] = rng.integers(0, 256, w.planes["Y"].shape, dtype=np.uint8)
    w.planes["UV"][...] = rng.integers(0, 256, w.planes["UV"].shape, dtype=np.uint8)
    frame = w.commit(1, 10, 20)
    lease = pool.lease(frame, "worker")
    expected = {k: v.tobytes().hex() for k, v in lease.planes().items()}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(pool.fd),
                              json.dumps(frame.to_dict())], pass_fds=(pool.fd,),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        report = json.loads(child.stdout.readline() or "{}")
        assert report, child.stderr.read()
        assert (report["Y"], report["UV"]) == (expected["Y"], expected["UV"])
        assert report["writeable"] is False
        attempts = report["attempts"]
        assert attempts.pop("assign").startswith("ValueError")       # numpy: read-only view
        assert attempts.pop("setflags").startswith("ValueError")     # and it stays read-only
        assert attempts.pop("mmap_write").startswith("TypeError")    # a read-only mmap
        assert attempts.pop("map_writable") == "PermissionError 13"  # O_RDONLY descriptor
        assert attempts.pop("mprotect") == "PermissionError 13"      # EACCES
        assert attempts.pop("write_fd") == "OSError 9"               # EBADF
        # even a read-write descriptor reopened through /proc: the memfd is sealed
        # (F_SEAL_FUTURE_WRITE, F_SEAL_SHRINK): EPERM
        for name in ("reopen_and_write", "reopen_and_map_writable", "truncate"):
            assert attempts.pop(name) == "PermissionError 1", name
        assert attempts == {}
        # nothing the child tried changed a byte
        assert {k: v.tobytes().hex() for k, v in lease.planes().items()} == expected
        # the producer refills the slot (forced: a misbehaving producer); the child notices
        pool.begin_frame(slot=frame.slot, force=True).commit(2, 30, 40)
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == f"detected {frame.generation} " \
                                                  f"{frame.generation + 1}"
    finally:
        child.kill()
        child.wait()
    with pytest.raises(FrameOverwrittenError):
        lease.release()


def test_the_reader_is_zero_copy_and_checks_generations_in_process(pool):
    frame = produce(pool, 0, value=7)
    reader = map_pool(pool.fd)
    try:
        y = reader.planes(frame)["Y"]
        assert y.flags.writeable is False and np.all(y == 7)
        w = pool.begin_frame(slot=frame.slot, force=True)
        w.planes["Y"][0, 0] = 200
        assert y[0, 0] == 200  # the same memory, no copy
        with pytest.raises(FrameOverwrittenError, match="being refilled"):
            reader.check(frame)
        new = w.commit(1, 5, 6)
        reader.check(new)
        assert reader.generation(frame.slot) == (2, False)
        assert (reader.pool_id, reader.camera, reader.buffers) == (pool.id, "road", 2)
    finally:
        reader.close()


def test_the_reader_refuses_other_pools_and_bad_frames(pool):
    frame = produce(pool, 0)
    other = FramePool(FrameLayout.create("NV12", 32, 8), 2, camera="road")
    try:
        with map_pool(other.fd) as reader:
            with pytest.raises(FrameError, match="camera restarted"):
                reader.planes(frame)
        with map_pool(pool.fd) as reader:
            bad = Frame.from_dict({**frame.to_dict(), "slot": 5})
            with pytest.raises(FrameFormatError, match="no slot 5"):
                reader.planes(bad)
            gray = Frame.from_dict({**frame.to_dict(),
                                    "layout": FrameLayout.create("GRAY", 32, 8).to_dict()})
            with pytest.raises(FrameFormatError, match="layout differs"):
                reader.planes(gray)
    finally:
        other.close()


def test_a_descriptor_that_is_not_a_pool_is_refused():
    fd = os.memfd_create("junk")
    try:
        os.ftruncate(fd, 8192)
        os.pwrite(fd, b"\x89PHPOOL\n" + b"\x02\x00\x00\x00", 0)
        with pytest.raises(FrameFormatError, match="version 2"):
            map_pool(fd)
        os.pwrite(fd, b"garbage!", 0)
        with pytest.raises(FrameFormatError, match="bad magic"):
            map_pool(fd)
        os.ftruncate(fd, 100)
        with pytest.raises(FrameFormatError, match="outside"):
            map_pool(fd)
    finally:
        os.close(fd)
