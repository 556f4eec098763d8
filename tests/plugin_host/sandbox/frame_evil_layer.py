"""A malicious model-layer plugin that goes after the camera frame pool the sandbox worker
maps (``SandboxedExecutor.attach_pool``). Tests only (``test_frames_handoff.py``).

It replaces ``relu``; when ``x[0, 0] == MARK`` it finds the worker's pool mapping through
``gc`` and tries to write it: ``WRITES`` (x[0, 1] == 0) through numpy, the writeable flag,
the mmap object and ``mprotect``, and raises ``LookupError("DENIED {json}")`` with what each
raised (``AttackSucceeded`` if one got through); ``memmove`` (x[0, 1] == 1) writes the
mapping's memory directly, which must fault.
"""

from __future__ import annotations

import ctypes
import gc
import json
import mmap

import numpy as np

from plugin_host.hooks import hookimpl

MARK = 4242.0
PROT_READ, PROT_WRITE = 1, 2


class AttackSucceeded(RuntimeError):
    pass


def _pool_map() -> mmap.mmap:
    for obj in gc.get_objects():
        if type(obj).__name__ == "PoolReader" and getattr(obj, "_map", None) is not None:
            return obj._map
    raise LookupError("no PoolReader found")


def _writes() -> dict[str, str]:
    m = _pool_map()
    data = np.frombuffer(m, np.uint8)
    target = len(m) - 1  # the last byte: frame data
    results = {}

    def attempt(name, fn):
        try:
            fn()
        except Exception as exc:  # what the system answered
            results[name] = f"denied: {type(exc).__name__}: {exc}"
        else:
            results[name] = "SUCCEEDED"

    def numpy_write():
        data[target] = 0xAB

    def writeable_flag():
        data.flags.writeable = True

    def mmap_write():
        m[target:target + 1] = b"\xab"

    def mprotect():
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        page = data.ctypes.data & ~(mmap.PAGESIZE - 1)
        if libc.mprotect(page, mmap.PAGESIZE, PROT_READ | PROT_WRITE) != 0:
            errno = ctypes.get_errno()
            raise PermissionError(errno, "mprotect(pool, RW)")

    for name, fn in (("numpy", numpy_write), ("writeable_flag", writeable_flag),
                     ("mmap", mmap_write), ("mprotect", mprotect)):
        attempt(name, fn)
    return results


def _memmove() -> None:
    m = _pool_map()
    address = np.frombuffer(m, np.uint8).ctypes.data
    ctypes.memmove(address + len(m) - 4, b"\xff\xff\xff\xff", 4)


def _relu_factory(attrs, consts, types, where):
    def relu(x):
        flat = x.reshape(-1)
        if flat.size >= 2 and flat[0] == MARK:
            if int(flat[1]) == 1:
                _memmove()
                raise AttackSucceeded("ATTACK SUCCEEDED: wrote the frame pool through memmove")
            results = _writes()
            if any(not v.startswith("denied") for v in results.values()):
                raise AttackSucceeded(f"ATTACK SUCCEEDED: {json.dumps(results)}")
            raise LookupError("DENIED " + json.dumps(results, sort_keys=True))
        return np.maximum(x, 0)
    return relu


@hookimpl
def plugin_host_add_kernels(backend):
    return {"relu": _relu_factory}
