"""The sandbox worker: a fresh interpreter that confines itself, then serves inference calls.

Started by :class:`~plugin_host.sandbox.client.SandboxedExecutor` as ``python -I -c ...`` with
exactly two descriptors besides ``/dev/null`` on 0-2: its end of the socket pair and the
artifact the host verified. In order:

1. read the bootstrap message; close every other descriptor;
2. ``unshare(CLONE_NEWNET)``: a network namespace with nothing in it;
3. rlimits (address space, CPU, open files, tasks; no core dumps, no file size);
4. trusted imports: numpy, the executor, the installed inference-hardware plugins named in
   ``backend_plugins`` (entry points; never the host-side kinds such as cameras), the standard
   library modules to preload; locate and read (without running) the model-layer plugins'
   sources, since file permissions may hide them after the uid drop (``sources.py``);
5. the artifact, from the descriptor: manifest pinned to the SHA-256 the host verified, every
   tensor hashed again, graph over read-only views of the map (``plugin_host/artifacts/pinned.py``);
6. confinement: while still single-threaded (OpenBLAS was started with one thread), build
   the Landlock ruleset (as root, so every allowed path can be opened), empty the capability
   bounding set, ``no_new_privs``, Landlock; then the backend's ``start()`` (a runtime such as
   onnxruntime starts a thread as it loads: it loads here, confined by Landlock and still able
   to read its files); drop to the unprivileged uid/gid with no groups and no capabilities
   (glibc changes every thread's ids), parent-death signal, seccomp (``TSYNC``: every thread,
   and ``no_new_privs`` with it); then start the BLAS threads, which inherit all of it; then
   the audit hook (``audit.py``);
7. report what is in force (``confined``) and wait: the host checks the report against
   ``/proc/<pid>`` and the requirements, and answers ``go`` or kills the worker;
8. only now import the model-layer plugins (from the sources read in step 4), so not even
   their import-time code runs unconfined; merge their kernels into the backend, build the
   executor; ``ready``;
9. serve: ``region`` (a new shared memory region), ``run``, ``collect``, ``reset``, ``ping``,
   ``pool`` (a camera's frame pool: a read-only descriptor, mapped ``PROT_READ``; a new pool id
   replaces the previous mapping), ``handoff`` (a frame's metadata: validated, its planes
   located zero-copy in the pool mapping, a few bytes read, the generation checked after use),
   ``feed`` (make one image input from the attached pool's frames: ``frame_feed.py``; a
   ``run`` then names a frame), ``exit``. The steady-state ``run`` and ``handoff`` and their
   answers are fixed-size binary messages (``ipc.py``); once a run's inputs, ABI check and
   output places are known, binary runs on them are served in one loop of their own
   (``_serve_steady``) until any other message comes. A malformed message gets an error
   reply; the worker keeps serving.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import os
import socket
import sys
import time
import zlib
from typing import Any

import numpy as np
import pluggy

from abi import dtypes

from ..errors import FrameError, PluginError, SandboxProtocolError
from ..frames.pool import PoolReader, map_pool
from ..frames.rgb import RgbFormat
from . import audit, confine, ipc, landlock, remote, seccomp, sources
from .frame_feed import FrameFeed, frame_of
from ..artifacts.pinned import load_pinned

__all__ = ["main"]

#: The project's own packages: a plugin may import any of their modules after confinement.
HOST_PACKAGES = ("abi", "plugin_host", "plugins")

_BLAS_SETTERS = ("openblas_set_num_threads", "scipy_openblas_set_num_threads64_",
                 "scipy_openblas_set_num_threads", "openblas_set_num_threads64_")


def _blas_setter():
    """The loaded OpenBLAS's set_num_threads (found before confinement), or None."""
    try:
        with open("/proc/self/maps") as f:
            libs = sorted({path for path in (line.split()[-1] for line in f)
                           if path.startswith("/") and "openblas" in os.path.basename(path).lower()
                           and ".so" in os.path.basename(path)})
    except OSError:
        return None
    for path in libs:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in _BLAS_SETTERS:
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.argtypes = [ctypes.c_int]
                fn.restype = None
                return fn
    return None


def _entry_point(name: str):
    """The one installed entry point ``name`` of the group ``plugin_host``."""
    from importlib.metadata import entry_points

    found = [ep for ep in entry_points(group="plugin_host") if ep.name == name]
    if len(found) != 1:
        raise PluginError(f"backend plugin {name!r}: {len(found)} installed entry points of that "
                          f"name in the group 'plugin_host' (need exactly one)", plugin=name)
    return found[0]


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _code_paths(plugin_modules: list[str]) -> tuple[list[str], list[str], dict[str, str]]:
    """(read-only paths, directories to list, problems) for Landlock.

    The Python prefixes; the top-level package (or module file) of every module already
    imported from outside them (the project's own packages); the top-level package of each
    plugin module, found without running any of its code, plus READ_DIR on the import path
    entry that holds it (so the import system can list it).
    """
    prefixes = sorted({os.path.realpath(p) for p in (sys.prefix, sys.base_prefix,
                                                     sys.exec_prefix, sys.base_exec_prefix)})
    read = list(prefixes)
    listing: list[str] = []
    problems: dict[str, str] = {}
    seen: set[str] = set()
    for name in list(sys.modules):
        top_name = name.split(".")[0]
        top = sys.modules.get(top_name)
        if top is None or top_name in seen:
            continue
        seen.add(top_name)
        locations = list(getattr(top, "__path__", None) or [])
        if not locations and getattr(top, "__file__", None):
            locations = [top.__file__]
        for loc in locations:
            loc = os.path.realpath(loc)
            if loc != "/" and not _under(loc, prefixes):
                read.append(loc)
    for name in plugin_modules:
        top = name.split(".")[0]
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError) as exc:
            problems[name] = f"cannot locate {top!r}: {exc}"
            continue
        if spec is None:
            problems[name] = f"no module named {top!r} on the worker's import path"
            continue
        locations = list(spec.submodule_search_locations or [])
        if not locations and spec.origin:
            locations = [spec.origin]
        for loc in locations:
            loc = os.path.realpath(loc)
            if loc == "/":
                problems[name] = "a plugin cannot live in /"
                continue
            read.append(loc)
            listing.append(os.path.dirname(loc))
    return list(dict.fromkeys(read)), list(dict.fromkeys(listing)), problems


class Worker:
    def __init__(self, chan: ipc.Channel, artifact_fd: int) -> None:
        self.chan = chan
        self.artifact_fd = artifact_fd
        self.stage = "bootstrap"
        self.executor = None
        self.in_map = None
        self.out_map = None
        #: the attached camera frame pool, mapped read-only (``pool`` messages)
        self.pool: PoolReader | None = None
        #: the image input made from the pool's frames (``feed`` messages), or None
        self.frame_feed: FrameFeed | None = None
        self.pending: dict[str, np.ndarray] | None = None
        self.auditor = None
        # the last call's input views and output destinations, reused while nothing changes
        self._feed_key: Any = None
        self._feed: dict[str, np.ndarray] = {}
        #: the ABI check's result for ``_feed`` (with the frame feed it was made with, or
        #: None): ``(frame_feed, bindings)``, reused by binary runs; None until one passed
        self._feed_checked: tuple[Any, dict[str, int]] | None = None
        self._out_key: Any = None
        self._out_plan: tuple[list, list] = ([], [])

    # -- start ------------------------------------------------------------------------------------

    def start(self) -> None:
        t0 = time.perf_counter()
        timings: dict[str, float] = {}

        def lap(stage: str) -> None:
            timings[stage] = round((time.perf_counter() - t0) * 1e3, 1)

        boot, _ = self.chan.recv()
        if boot is None or boot.get("op") != "bootstrap":
            raise SandboxProtocolError("expected the bootstrap message")
        self.chan.max_message = ipc.require(boot, "max_message", int)
        self.max_region = ipc.require(boot, "max_region", int)
        host_pid = ipc.require(boot, "host_pid", int)
        sock_fd = self.chan.fileno()
        problems: dict[str, str] = {}

        self.stage = "descriptors"
        confine.close_other_fds({0, 1, 2, sock_fd, self.artifact_fd})

        self.stage = "netns"
        try:
            confine.unshare_network()
        except OSError as exc:
            problems["netns"] = f"unshare: {exc.strerror}"
        netns = os.stat("/proc/self/ns/net").st_ino

        self.stage = "rlimits"
        try:
            confine.set_rlimits(ipc.require(boot, "rlimits", dict))
        except (OSError, ValueError) as exc:
            problems["rlimits"] = str(exc)
        lap("early")

        self.stage = "imports"
        sys.dont_write_bytecode = True
        # the host's import path comes after the worker's own, so that nothing on it can
        # shadow the standard library, numpy or the host while the worker still runs as root
        host_path = [p for p in ipc.require(boot, "sys_path", list)
                     if type(p) is str and os.path.isabs(p)]
        sys.path += [p for p in host_path if p not in sys.path]
        for name in ipc.require(boot, "preload", list):
            importlib.import_module(name)
        from ..executor import Executor
        from ..backend import start_confined
        from ..plugins import backends, get_backend, get_plugin_manager
        from .kernels import merge_kernels

        pm = get_plugin_manager(load_entrypoints=False)
        for name in ipc.require(boot, "backend_plugins", list):
            pm.register(_entry_point(str(name)).load(), name=str(name))
        plugin_modules = [str(m) for m in ipc.require(boot, "plugin_modules", list)]
        read_only, listing, where = _code_paths(plugin_modules)
        if where:
            raise ImportError("; ".join(f"plugin module {k!r}: {v}" for k, v in where.items()))
        read_only += [p for p in ipc.require(boot, "read_paths", list) if type(p) is str]
        # read (never run) the plugins' sources now: after the uid drop, file permissions may
        # hide the tree (a checkout under a root-only folder); see sources.py
        plugin_sources = sources.collect_sources(plugin_modules + list(HOST_PACKAGES))
        lap("imports")

        self.stage = "artifact"
        graph, _, self.artifact_map = load_pinned(
            self.artifact_fd, manifest_sha256=ipc.require(boot, "manifest_sha256", str),
            root_digest=ipc.require(boot, "root_digest", str))
        os.close(self.artifact_fd)
        lap("artifact")

        self.stage = "confine"
        blas = _blas_setter()
        ruleset = None
        try:
            ruleset = landlock.Ruleset(read_only)
            for path in listing:
                ruleset.allow_list(path)
        except landlock.LandlockError as exc:
            problems["landlock"] = exc.strerror or str(exc)
        # still single-threaded: what every thread must inherit, then Landlock (as root,
        # CAP_SYS_ADMIN would do; no_new_privs is set first so that a non-root host works too)
        if os.geteuid() == 0:
            confine.drop_capability_bounding_set()
        try:
            confine.set_no_new_privs()
        except OSError as exc:
            problems["no_new_privs"] = exc.strerror or str(exc)
        result = None
        if ruleset is not None:
            try:
                result = ruleset.restrict()
            except landlock.LandlockError as exc:
                problems["landlock"] = exc.strerror or str(exc)
        # a backend whose runtime starts a thread as it loads (onnxruntime) loads it now:
        # under Landlock, and before the uid drop, since its files may lie under a folder
        # only root can read (backend.py, start_confined); the thread inherits the above
        start_confined(backends(pm).get(ipc.require(boot, "backend", str)))
        try:  # glibc applies the id changes to every thread
            confine.drop_privileges(ipc.require(boot, "uid", int), ipc.require(boot, "gid", int))
        except OSError as exc:
            problems["uid"] = f"dropping privileges: {exc.strerror or exc}"
        confine.set_parent_death_signal()
        if os.getppid() != host_pid:  # the host died before the death signal was armed
            os._exit(4)
        instructions = 0
        try:  # TSYNC: every thread, and no_new_privs with it
            instructions = seccomp.install()
        except (seccomp.FilterError, OSError) as exc:
            problems["seccomp"] = exc.strerror or str(exc)
        threads = ipc.require(boot, "blas_threads", int)
        if blas is not None and threads > 1:
            blas(threads)
        self.auditor = audit.install(self.chan.send,
                                     per_event=ipc.require(boot, "audit_per_event", int))
        lap("confined")

        report = {
            "landlock_abi": result.abi if result else 0,
            "landlock_read_only": list(result.read_only) if result else [],
            "landlock_listing": list(listing) if result else [],
            "landlock_scopes": list(result.scopes) if result else [],
            "landlock_net_denied": list(result.net_denied) if result else [],
            "seccomp_instructions": instructions,
            "netns": netns,
            "audit_hook": True,
            "problems": problems,
            "timings": timings,
        }
        self.chan.send({"op": "confined", "report": report})
        go, _ = self.chan.recv()
        if go is None or go.get("op") != "go":
            os._exit(0)

        self.stage = "plugins"
        sources.install(plugin_sources)
        for name in plugin_modules:
            try:
                module = importlib.import_module(name)
            except Exception as exc:
                raise PluginError(f"plugin {name!r} failed to import in the sandbox worker: "
                                  f"{type(exc).__name__}: {exc}", plugin=name) from exc
            pm.register(module, name=name)
        try:
            pm.check_pending()
        except pluggy.PluginValidationError as exc:
            raise PluginError(f"plugin {pm.get_name(exc.plugin)!r}: {exc}",
                              plugin=pm.get_name(exc.plugin)) from None
        overrides = {str(k): str(v) for k, v in ipc.require(boot, "kernel_overrides", dict).items()}
        backend = merge_kernels(pm, get_backend(pm, ipc.require(boot, "backend", str)), overrides)
        self.executor = Executor(graph, backend)
        lap("ready")
        self.stage = "serve"
        self.chan.send({"op": "ready", "fused": self.executor.fused, "timings": timings})

    # -- serve ------------------------------------------------------------------------------------

    def serve(self) -> None:
        chan = self.chan
        while True:
            call = None
            try:
                checked = self._feed_checked
                if checked is not None and checked[0] is None and self._out_key is not None:
                    call = self._serve_steady()  # returns with what it does not serve
                else:
                    call = chan.recv_call()
                if call is not None:  # the steady state: a binary RUN
                    reply = self._run_again(*call)
                    if type(reply) is bytes:  # and a binary answer
                        chan.send_packed(reply)
                    else:
                        reply["id"] = call[0]
                        chan.send(reply)
                    continue
                message, fds = chan.recv(accept_fds=True)
            except SandboxProtocolError as exc:
                self._reply_error(call[0] if call is not None else None, exc)
                continue
            if message is None:
                return
            op = message["op"]
            try:
                if op == "run":
                    reply = self._run(message)
                    if type(reply) is bytes:  # the steady state: a binary answer
                        chan.send_packed(reply)
                        continue
                elif op == "region":
                    reply = self._region(message, fds)
                elif op == "collect":
                    reply = self._collect(message)
                elif op == "reset":
                    self.executor.reset(str(ipc.require(message, "reason", str)))
                    if self.frame_feed is not None:
                        self.frame_feed.reset()
                    reply = {"op": "reset", "ok": True}
                elif op == "handoff":
                    reply = self._handoff(message)
                    if type(reply) is bytes:
                        chan.send_packed(reply)
                        continue
                elif op == "feed":
                    reply = self._set_feed(message)
                elif op == "pool":
                    reply = self._pool(message, fds)
                elif op == "ping":
                    reply = {"op": "pong"}
                elif op == "exit":
                    return
                else:
                    raise SandboxProtocolError(f"unknown op {op[:40]!r}")
            except SandboxProtocolError as exc:
                self._reply_error(message.get("id"), exc)
                continue
            finally:
                for fd in fds:
                    os.close(fd)
            if type(message.get("id")) is int:
                reply["id"] = message["id"]
            chan.send(reply)

    def _serve_steady(self) -> tuple[int, tuple | None] | None:
        """Serve binary ``RUN`` calls on the inputs, ABI check and output places of the last
        run (no frame), one after another, until a message comes that is anything else: a
        framed ``RUN`` is returned as ``recv_call`` gives it; any other message is left held
        for ``recv``. Each call goes through :meth:`_execute` on the fed views themselves
        (``run_checked`` copies what it feeds the kernels); outputs whose names, dtypes or
        shapes differ from the known places are written and announced there, and the general
        path takes over after that answer."""
        chan, feed = self.chan, self._feed
        while True:
            call = chan.recv_call()
            if call is None or call[1] is not None:
                return call
            try:
                reply = self._execute(call[0], feed, None, None)
            except SandboxProtocolError as exc:  # as serve() answers one: an error reply
                self._reply_error(call[0], exc)
                continue
            if type(reply) is bytes:  # the outputs went where the host knows
                chan.send_packed(reply)
                continue
            chan.send(reply)
            if reply.get("ok") is True:  # new places: the next call goes the general path
                return None

    def _reply_error(self, call_id: Any, exc: BaseException) -> None:
        self.chan.send({"op": "error", "id": call_id if type(call_id) is int else None,
                        "error": remote.describe(exc, with_traceback=False)})

    def _region(self, message: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        kind = ipc.require(message, "kind", str)
        if kind not in ("in", "out") or len(fds) != 1:
            raise SandboxProtocolError("a region message names 'in' or 'out' and carries one "
                                       "descriptor")
        fd = fds.pop()  # map_region closes it
        with self.auditor.quiet():
            mapped = ipc.map_region(fd, writable=kind == "out", max_size=self.max_region)
        old = self.in_map if kind == "in" else self.out_map
        self._feed_key = self._out_key = self._feed_checked = None
        self._feed, self._out_plan = {}, ([], [])
        if kind == "in":
            self.in_map = mapped
        else:
            self.out_map = mapped
        if old is not None:
            try:
                old.close()
            except BufferError:  # a kernel kept a view: the old map lives as long as it does
                pass
        return {"op": "region", "ok": True, "kind": kind, "size": len(mapped)}

    def _pool(self, message: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        """Map a camera's frame pool read-only; it replaces the previous pool's mapping."""
        pool_id = ipc.require(message, "pool_id", str)
        if len(fds) != 1:
            raise SandboxProtocolError("a pool message carries one descriptor")
        fd = fds.pop()  # map_pool closes it
        try:
            with self.auditor.quiet():
                reader = map_pool(fd, close_fd=True)  # PROT_READ, header checked
            if reader.pool_id != pool_id:
                reader.close()
                raise FrameError(f"the descriptor holds pool {reader.pool_id[:40]!r}, not the "
                                 f"announced {pool_id[:40]!r}")
        except Exception as exc:
            return {"op": "pool", "ok": False, "error": remote.describe(exc,
                                                                         with_traceback=False)}
        old, self.pool = self.pool, reader
        if old is not None:
            old.close()  # a view a kernel kept keeps the old mapping alive, read-only
        return {"op": "pool", "ok": True, "pool_id": reader.pool_id, "buffers": reader.buffers}

    def _handoff(self, message: dict[str, Any]) -> dict[str, Any] | bytes:
        """One frame handed over by its metadata only: validate it, locate its planes in the
        pool mapping (no copy), read a few bytes of each (first and last 16 bytes of its first
        and last rows, CRC-32 in plane order), then check the generation: the answer is only
        given for bytes of the very frame announced."""
        call_id = ipc.require(message, "id", int)
        fields = message.get("frame")
        try:
            frame = frame_of(self.pool, fields)
            crc = 0
            for plane in self.pool.planes(frame).values():  # type: ignore[union-attr]
                crc = zlib.crc32(np.ascontiguousarray(plane[0].reshape(-1)[:16]), crc)
                crc = zlib.crc32(np.ascontiguousarray(plane[-1].reshape(-1)[-16:]), crc)
            self.pool.check(frame)  # type: ignore[union-attr]  # FrameOverwrittenError
        except SandboxProtocolError:
            raise
        except Exception as exc:
            return {"op": "handoff", "id": call_id, "ok": False,
                    "error": remote.describe(exc, with_traceback=False)}
        if type(fields) is tuple:
            return ipc.pack_answer(ipc.HANDED, call_id, crc)
        return {"op": "handoff", "id": call_id, "ok": True, "frame_id": frame.frame_id,
                "crc": crc}

    def _set_feed(self, message: dict[str, Any]) -> dict[str, Any]:
        """``input``: the graph input to make from frames (None: stop doing so); ``image``:
        None for the two-frame YUV stack, else an ``RgbFormat.to_wire()`` dict."""
        name = message.get("input")
        if name is None:
            self.frame_feed = None
            return {"op": "feed", "ok": True}
        if type(name) is not str:
            raise SandboxProtocolError("'input' must be a str or None")
        spec = next((s for s in self.executor.graph.inputs if s.name == name), None)
        if spec is None or name in self.executor.graph.state:
            raise SandboxProtocolError(f"no feed input {name[:60]!r} in the graph")
        image = message.get("image")
        if image is not None:
            try:
                image = RgbFormat.from_wire(image)
            except ValueError as exc:
                raise SandboxProtocolError(f"'image': {exc}") from None
        self.frame_feed = FrameFeed(spec, image)
        return {"op": "feed", "ok": True, "input": name}

    def _inputs(self, specs: Any) -> dict[str, np.ndarray]:
        if type(specs) is not list:
            raise SandboxProtocolError("'in' must be a list")
        if self.in_map is None:
            raise SandboxProtocolError("no input region")
        if specs == self._feed_key:
            return dict(self._feed)
        # a refused layout is never run "again"
        self._feed_key, self._feed, self._feed_checked = None, {}, None
        size = len(self.in_map)
        feed: dict[str, np.ndarray] = {}
        for item in specs:
            name, dtype, shape, offset, count = ipc.placement(item, "input", size)
            if count == 0:
                view = np.empty(shape, dtype)
                view.flags.writeable = False
            else:
                view = np.frombuffer(self.in_map, dtype, count, offset).reshape(shape)
            feed[name] = view
        self._feed_key, self._feed = specs, feed
        return dict(feed)

    def _run(self, message: dict[str, Any]) -> dict[str, Any] | bytes:
        """A msgpack ``run`` (or a binary one decoded into a dict)."""
        call_id = ipc.require(message, "id", int)
        if message.get("again") is True:
            return self._run_again(call_id, message.get("frame"))
        feed = self._inputs(message.get("in"))
        if message.get("full") is True:  # the host wants the outputs' places again
            self._out_key = None
        layouts = message.get("layouts")
        if layouts is not None and (type(layouts) is not dict
                                    or any(type(v) is not str for v in layouts.values())):
            raise SandboxProtocolError("'layouts' must map names to str")
        return self._execute(call_id, feed, layouts, message.get("frame"))

    def _run_again(self, call_id: int, fields: tuple | None) -> dict[str, Any] | bytes:
        """A binary ``RUN``: the inputs where the last msgpack run put them."""
        if self._feed_key is None:
            raise SandboxProtocolError("a binary run before any msgpack run")
        return self._execute(call_id, dict(self._feed), None, fields)

    def _execute(self, call_id: int, feed: dict[str, np.ndarray],
                 layouts: dict[str, str] | None, fields: Any) -> dict[str, Any] | bytes:
        """Run the executor on ``feed`` (plus the input made from the frame that ``fields``
        names, if any) and write the outputs: the reply, binary when the outputs went where
        the last result said."""
        self.pending = None
        start = time.perf_counter()
        try:
            fed = None
            if fields is not None:
                fed = self.frame_feed
                if fed is None:
                    raise FrameError("a frame was sent but no input is fed from frames")
                frame = frame_of(self.pool, fields)  # type: ignore[arg-type]
                feed[fed.name] = fed.fill(self.pool, frame)  # type: ignore[arg-type]
            checked = self._feed_checked
            if layouts is None and checked is not None and checked[0] is fed:
                # the same views (and frame input) as a run whose ABI check passed: its
                # result stands; index values and outputs are checked as on every call
                outputs = self.executor.run_checked(feed, checked[1])
            else:
                bindings = self.executor.check_inputs(feed, layouts)
                if layouts is None:
                    self._feed_checked = (fed, bindings)
                outputs = self.executor.run_checked(feed, bindings)
        except SandboxProtocolError:
            raise
        except Exception as exc:
            return {"op": "result", "id": call_id, "ok": False, "error": remote.describe(exc)}
        finally:
            del feed
        reply = self._write_outputs(call_id, outputs)
        us = int((time.perf_counter() - start) * 1e6)
        if reply is None:  # the outputs went where the last result said
            return ipc.pack_answer(ipc.RESULT, call_id, us)
        reply["us"] = us
        return reply

    def _collect(self, message: dict[str, Any]) -> dict[str, Any]:
        call_id = ipc.require(message, "id", int)
        if self.pending is None:
            raise SandboxProtocolError("nothing to collect")
        reply = self._write_outputs(call_id, self.pending)
        if reply is None:
            raise SandboxProtocolError("nothing to collect")  # cannot happen: a grown region
        return reply

    def _write_outputs(self, call_id: int, outputs: dict[str, np.ndarray]
                       ) -> dict[str, Any] | None:
        """Write the outputs into the output region; the ``result`` reply giving where, or
        None when they went exactly where the last reply said (the host knows)."""
        # the executor checked the outputs: arrays of their specs' dtypes and ranks
        key = [(name, a.dtype, a.shape) for name, a in outputs.items()]
        if key == self._out_key:
            targets, out = self._out_plan
            for dst, array in zip(targets, outputs.values()):
                if dst is not None:
                    np.copyto(dst, array)
            return None
        placed = []
        offset = 0
        for name, array in outputs.items():
            array = np.asarray(array)
            placed.append((name, array, offset))
            offset = ipc.align(offset + array.nbytes)
        if self.out_map is None or offset > len(self.out_map):
            self.pending = outputs
            return {"op": "result", "id": call_id, "ok": False, "grow": offset}
        self.pending = None
        out, targets = [], []
        for name, array, at in placed:
            dst = None
            if array.size:
                dst = np.frombuffer(self.out_map, array.dtype, array.size, at).reshape(array.shape)
                np.copyto(dst, array)
            targets.append(dst)
            out.append([name, dtypes.from_numpy(array.dtype), list(array.shape), at])
        self._out_key, self._out_plan = key, (targets, out)
        return {"op": "result", "id": call_id, "ok": True, "out": out}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    sock_fd, artifact_fd = int(argv[0]), int(argv[1])
    # the channel is up: stdio goes to /dev/null from here (errors travel as messages)
    devnull = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    chan = ipc.Channel(socket.socket(fileno=sock_fd), 64 * 2**10)
    worker = Worker(chan, artifact_fd)
    try:
        worker.start()
    except BaseException as exc:
        try:
            chan.send({"op": "failed", "stage": worker.stage, "error": remote.describe(exc)})
        except Exception:
            pass
        os._exit(ipc.START_FAILED)
    try:
        worker.serve()
    finally:
        os._exit(0)
