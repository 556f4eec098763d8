"""Golden outputs from the reference implementation of ONNX semantics: onnxruntime's CPU provider.

Graph optimizations are off so that the reference computes what the file says, node by node.
A run with them on (``optimized=True``: fusions and the blocked-layout convolutions, quantized
node groups left unfused) computes the same model with other roundings: how far the two are
apart is the model's own float32 rounding noise, which a build reads when its comparison fails.
The same child evaluates a model rewritten to float64 with onnx's reference evaluator, where
a failed comparison asks how far the reference's float32 run is from exact values
(:mod:`.float64_evaluation`), and upgrades models of older opsets with onnx's version converter
(:meth:`ReferenceProcess.convert`) and infers a model's value types with onnx's type inference
and onnxruntime's schemas of its own ops (:meth:`ReferenceProcess.value_types`), and rewrites
a model as onnxruntime's extended graph optimizations do, for a build that asks to import that
(:meth:`ReferenceProcess.optimize`): native code run on the same hostile input.

The model is hostile input and onnxruntime is native code: some malformed models that pass
every check before it crash it (a segmentation fault) or keep it busy for ever. So it runs in
a child process of its own (:class:`ReferenceProcess`; one per builder process, started on
first use and kept for the next build), with ``no_new_privs``, the sandbox worker's seccomp
filter (no socket, no new process, no ptrace, ...), no core dumps, no file writes, and the
parent's death as its own. A crash of the child is a
:class:`~plugin_host.errors.ModelImportError` naming the signal, a run past
:data:`TIMEOUT_S` (an upgrade past :data:`CONVERT_TIMEOUT_S`) one naming the time, and the
next build starts a new child. So does a request interrupted in the parent (an exception from
a signal handler, Ctrl-C): its child is stopped with it, so its answer cannot be read as the
next request's.
"""

from __future__ import annotations

import functools
import importlib
import io
import json
import os
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np

from ..errors import ModelImportError, UsageError
from ..stop_signals import POLL_S, check_stop

__all__ = ["REFERENCE", "TIMEOUT_S", "CONVERT_TIMEOUT_S", "RewriteTooLarge", "ConversionRefused",
           "ReferenceProcess", "run_reference", "run_converter", "run_optimizer",
           "infer_value_types"]

#: The name stored in the artifact as the golden reference.
REFERENCE = "onnxruntime"
#: The longest a reference run of all the golden cases may take.
TIMEOUT_S = 600.0
#: The longest an opset upgrade by the version converter may take.
CONVERT_TIMEOUT_S = 120.0

_LENGTH = struct.Struct("<Q")
_MAX_ANSWER = 2**34  # outputs of 64 cases of a large model fit; a lying length is refused
_BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); "
         "from plugin_host.onnx_import.reference import serve; serve()")


def _pack(arrays: Mapping[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def _unpack(data: bytes) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}


def _read_exactly(stream: Any, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = stream.read(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# --- the child -----------------------------------------------------------------------------------


def _harden() -> None:
    """What the child gives up before it reads a model (each step best effort, none needed
    for correctness): it dies with its parent, gains no privileges, dumps no core, writes no
    file."""
    from ..sandbox import confine

    steps = (confine.set_parent_death_signal, confine.set_no_new_privs,
             lambda: confine.set_rlimits({"RLIMIT_CORE": 0, "RLIMIT_FSIZE": 0}))
    for step in steps:
        try:
            step()
        except (OSError, ValueError):
            pass


def _answer_one(ort: Any, request: dict[str, np.ndarray]) -> tuple[bytes, bytes]:
    """(status, payload) for one request: b"O" and the outputs (or the upgraded model), or
    b"E" and why not."""
    if "__convert__" in request:
        return _convert(request.pop("__model__").tobytes(), int(request.pop("__convert__")))
    if "__types__" in request:
        return _value_types(request.pop("__model__").tobytes())
    if "__optimize__" in request:
        return _optimize(ort, request.pop("__model__").tobytes(),
                         int(request.pop("__optimize__")))
    if int(request.pop("__float64__", 0)):
        return _float64_evaluation(request.pop("__model__").tobytes(), request)
    options = ort.SessionOptions()
    if int(request.pop("__optimized__", 0)):
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # a QuantizeLinear-DequantizeLinear group run as one integer kernel rounds otherwise:
        # a change of the model's numbers, not of their rounding
        options.add_session_config_entry("session.disable_quant_qdq", "1")
    else:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(request.pop("__model__").tobytes(), options,
                                       providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own untyped errors
        return b"E", f"onnxruntime cannot load the model: {_first_line(exc)}".encode()
    return _cases("onnxruntime", session.run, request)


#: how the child's refusal of an optimized model past its cap begins
_REWRITE_TOO_LARGE = "onnxruntime's rewrite of the model is"


def _optimize(ort: Any, data: bytes, max_bytes: int) -> tuple[bytes, bytes]:
    """The serialized model as onnxruntime's graph optimizations at the extended level rewrite
    it (what ``SessionOptions.optimized_model_filepath`` saves), refused past ``max_bytes``.
    The child writes no file: the model is saved into a pipe, which a thread drains while the
    session is made (past the cap it reads on and keeps nothing, so the writer never waits)."""
    read, write = os.pipe()
    chunks: list[bytes] = []
    size = 0

    def drain() -> None:
        nonlocal size
        while True:
            chunk = os.read(read, 1 << 20)
            if not chunk:
                return
            size += len(chunk)
            if size <= max_bytes:
                chunks.append(chunk)
            else:
                chunks.clear()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = f"/proc/self/fd/{write}"
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    try:
        ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own untyped errors
        return b"E", f"onnxruntime cannot optimize the model: {_first_line(exc)}".encode()
    finally:
        os.close(write)
        reader.join()
        os.close(read)
    if size > max_bytes:
        return b"E", f"{_REWRITE_TOO_LARGE} {size} bytes, past the cap of {max_bytes}".encode()
    return b"O", b"".join(chunks)


def _cases(who: str, run: Any, request: dict[str, np.ndarray]) -> tuple[bytes, bytes]:
    """(status, payload) of the request's cases run by ``run(fetch, feed)`` of ``who``."""
    inputs, fetch = _names(request.pop("__inputs__")), _names(request.pop("__outputs__"))
    out = {}
    for case in range(int(request.pop("__cases__"))):
        feed = {name: request[f"{case}/{k}"] for k, name in enumerate(inputs)
                if f"{case}/{k}" in request}
        try:
            values = run(fetch, feed)
        except Exception as exc:  # onnxruntime's and the evaluator's errors have no common base
            return b"E", f"{who} cannot run the model: {_first_line(exc)}".encode()
        for j, value in enumerate(values):
            out[f"{case}/{j}"] = np.asarray(value)
    return b"O", _pack(out)


def _float64_evaluation(data: bytes, request: dict[str, np.ndarray]) -> tuple[bytes, bytes]:
    """The request's cases run by onnx's reference evaluator (numpy, op by op, after the ONNX
    specification) of the serialized model: :mod:`.float64_evaluation` gives it the model
    rewritten to float64, which onnxruntime runs few ops of."""
    who = "onnx's reference evaluator"
    try:
        import onnx
        from onnx.reference import ReferenceEvaluator
    except ImportError:  # pragma: no cover - the onnx extra is part of the test setup
        return b"E", b"the onnx package is missing in the reference process"
    try:
        evaluator = ReferenceEvaluator(onnx.ModelProto.FromString(data))
    except Exception as exc:  # an op it lacks, a malformed model: no common base
        return b"E", f"{who} cannot load the model: {_first_line(exc)}".encode()
    return _cases(who, evaluator.run, request)


def _convert(data: bytes, target: int) -> tuple[bytes, bytes]:
    """The serialized model upgraded to default-domain opset ``target`` by onnx's converter."""
    try:
        import onnx
        from onnx import version_converter
    except ImportError:  # pragma: no cover - the onnx extra is part of the test setup
        return b"E", b"the onnx package is missing in the reference process"
    try:
        model = onnx.ModelProto.FromString(data)
        return b"O", version_converter.convert_version(model, target).SerializeToString()
    except Exception as exc:  # the converter raises RuntimeError, ConvertError, ...
        text = _first_line(exc)
        if "failed: " in text:  # "/path/adapter.h:35: operator(): Assertion `...` failed: why"
            text = text.rsplit("failed: ", 1)[1] or text
        return b"E", text.encode()


def _value_types(data: bytes) -> tuple[bytes, bytes]:
    """The element type of each value of the model's graphs, its subgraphs' too (their inputs,
    the values onnx's type inference gives a tensor type, their outputs) as JSON: ``{"name":
    16, ...}`` (a model's value names are unique across its graphs).

    onnx knows no op outside its own domains, so it leaves the outputs of com.microsoft's ops
    untyped, and every value computed from them. Those outputs are typed from onnxruntime's
    schema of the op (:func:`_schema_types`) and the inference run again, as long as that
    types more of them (at most once per such node)."""
    try:
        import onnx
    except ImportError:  # pragma: no cover - the onnx extra is part of the test setup
        return b"E", b"the onnx package is missing in the reference process"
    from .loop import subgraphs

    try:
        model = onnx.ModelProto.FromString(data)
        rounds = 1 + len(model.graph.node)
    except Exception as exc:  # a malformed file: protobuf's DecodeError
        return b"E", f"onnx cannot infer its value types: {_first_line(exc)}".encode()
    for _ in range(rounds):
        try:
            model = onnx.shape_inference.infer_shapes(model)
        except Exception as exc:  # onnx's inference errors have no common base
            return b"E", f"onnx cannot infer its value types: {_first_line(exc)}".encode()
        graphs = list(subgraphs(model.graph))
        types = {vi.name: vi.type.tensor_type.elem_type
                 for g in graphs for vi in (*g.input, *g.value_info, *g.output)
                 if vi.type.WhichOneof("value") == "tensor_type"
                 and vi.type.tensor_type.elem_type}
        types.update((t.name, t.data_type) for g in graphs for t in g.initializer)
        try:
            found = _schema_types(model, graphs, types)
        except Exception:  # best effort: a schema this reading does not follow types nothing
            found = []
        if not found:
            break
        for g, name, elem in found:
            g.value_info.append(onnx.helper.make_tensor_value_info(name, elem, None))
    return b"O", json.dumps(types).encode()


@functools.lru_cache(maxsize=1)
def _onnxruntime_schemas() -> tuple:
    """Every op schema onnxruntime registers (some 900; read once per process)."""
    from onnxruntime.capi import onnxruntime_pybind11_state as C

    return tuple(C.get_all_operator_schema())


def _schema_types(model, graphs: list, types: dict[str, int]) -> list[tuple[Any, str, int]]:
    """``(graph, value, element type)`` for the untyped outputs of nodes outside onnx's
    domains that onnxruntime's schema of the op types: an output of one allowed type, or of a
    type parameter that an input already typed binds."""
    import onnx

    opsets = {o.domain or "": o.version for o in model.opset_import}
    wanted = {(n.domain, n.op_type) for g in graphs for n in g.node
              if n.domain not in ("", "ai.onnx", "ai.onnx.ml")
              and any(o and o not in types for o in n.output)}
    if not wanted:
        return []
    schemas: dict[tuple[str, str], Any] = {}
    for schema in _onnxruntime_schemas():
        key = (schema.domain, schema.name)
        if key in wanted and schema.since_version <= opsets.get(schema.domain, 1) and (
                key not in schemas or schemas[key].since_version < schema.since_version):
            schemas[key] = schema

    def elem(type_str: str) -> int | None:  # "tensor(bfloat16)" -> 16
        inner = type_str[len("tensor("):-1] if type_str.startswith("tensor(") else ""
        try:
            return onnx.TensorProto.DataType.Value(inner.upper())
        except ValueError:
            return None

    found = []
    for g in graphs:
        for node in g.node:
            schema = schemas.get((node.domain, node.op_type))
            if schema is None:
                continue
            allowed = {c.type_param_str: c.allowed_type_strs for c in schema.type_constraints}
            bound = {}
            for k, name in enumerate(node.input):
                formal = schema.inputs[min(k, len(schema.inputs) - 1)] if schema.inputs else None
                if formal is not None and name in types:
                    bound.setdefault(formal.typeStr, types[name])
            for k, name in enumerate(node.output):
                if not name or name in types or k >= len(schema.outputs):
                    continue
                param = schema.outputs[k].typeStr
                options = allowed.get(param, [param])
                value = elem(options[0]) if len(options) == 1 else bound.get(param)
                if value:
                    found.append((g, name, value))
    return found


def _encoded(names: Sequence[str]) -> np.ndarray:
    """Names as JSON bytes (any character survives; npz keys would not carry them)."""
    return np.frombuffer(json.dumps(list(names)).encode(), np.uint8)


def _names(array: np.ndarray) -> list[str]:
    return json.loads(array.tobytes().decode())


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]


def serve() -> None:
    """The child's loop: a length-prefixed npz request on stdin, a status byte and a
    length-prefixed answer on stdout, until stdin closes."""
    _harden()
    import onnxruntime as ort
    try:  # before the filter: the converter's native module is loaded while files may be read
        importlib.import_module("onnx.version_converter")
        importlib.import_module("onnx.shape_inference")
    except ImportError:  # pragma: no cover - the onnx extra is part of the test setup
        pass

    from ..sandbox import seccomp

    try:  # the sandbox worker's filter: no sockets, processes, ptrace... (onnxruntime runs so)
        seccomp.install()
    except (seccomp.FilterError, OSError):  # another architecture: the process boundary stays
        pass

    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        head = _read_exactly(stdin, _LENGTH.size)
        if head is None:
            return
        data = _read_exactly(stdin, _LENGTH.unpack(head)[0])
        if data is None:
            return
        status, payload = _answer_one(ort, _unpack(data))
        stdout.write(status + _LENGTH.pack(len(payload)) + payload)
        stdout.flush()


# --- the parent ----------------------------------------------------------------------------------


def _describe(returncode: int | None) -> str:
    if returncode is not None and returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"


class _Gone(Exception):
    """The child could not take the request (it had ended)."""


class ConversionRefused(Exception):
    """The version converter refused the model; the text is its reason, one line."""


class RewriteTooLarge(ModelImportError):
    """onnxruntime's optimized model is past the cap the request gave."""


class _Job(NamedTuple):
    """Who does a request's work and what it is called in messages."""

    who: str        # "onnxruntime"
    task: str       # "the reference run"
    process: str    # "the onnxruntime reference process"
    max_answer: int


_RUN = _Job("onnxruntime", "the reference run", "the onnxruntime reference process",
            _MAX_ANSWER)
_EVALUATE = _Job("onnx's reference evaluator", "the evaluation in float64",
                 "the reference process", _MAX_ANSWER)
#: The largest answer of the type inference: names and types of a model's values.
_MAX_TYPES_ANSWER = 2**28


class ReferenceProcess:
    """The child that runs onnxruntime for this process's builds (see the module docstring)."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def _start(self) -> subprocess.Popen:
        from ..sandbox.process import PROJECT_ROOT

        # its own session, as the sandbox worker: a Ctrl-C typed at the terminal goes to the
        # command, which kills the child when it acts on it, not to the child, whose death
        # would read as a crash on the model
        return subprocess.Popen([sys.executable, "-I", "-c", _BOOT, PROJECT_ROOT],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, close_fds=True,
                                start_new_session=True)

    def close(self) -> None:
        """End the child (the next run starts a new one)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()  # type: ignore[union-attr]
            except OSError:
                pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def run(self, model_bytes: bytes, fetch: Sequence[str],
            cases: Sequence[Mapping[str, np.ndarray]], *, timeout: float = TIMEOUT_S,
            optimized: bool = False, float64: bool = False) -> list[dict[str, np.ndarray]]:
        """Every case (keyed by ONNX input name) through onnxruntime; outputs by ONNX name.
        ``optimized``: with onnxruntime's graph optimizations on (see the module's docstring);
        ``float64``: through onnx's reference evaluator instead (for a model rewritten to
        float64, :mod:`.float64_evaluation`)."""
        inputs = sorted({name for case in cases for name in case})
        request = {"__model__": np.frombuffer(model_bytes, np.uint8),
                   "__inputs__": _encoded(inputs), "__outputs__": _encoded(fetch),
                   "__cases__": np.array(len(cases)), "__optimized__": np.array(int(optimized)),
                   "__float64__": np.array(int(float64))}
        for i, case in enumerate(cases):
            for k, name in enumerate(inputs):
                if name in case:
                    request[f"{i}/{k}"] = case[name]
        status, payload = self._ask(_pack(request), timeout, _EVALUATE if float64 else _RUN)
        if status == b"E":
            raise ModelImportError(payload.decode("utf-8", "replace"))
        outputs = _unpack(payload)
        return [{name: outputs[f"{i}/{j}"] for j, name in enumerate(fetch)}
                for i in range(len(cases))]

    def convert(self, model_bytes: bytes, target: int, *, max_bytes: int,
                timeout: float | None = None) -> bytes:
        """The serialized model upgraded to default-domain opset ``target`` by onnx's version
        converter: an answer past ``max_bytes`` is refused; ConversionRefused when the
        converter refuses the model."""
        job = _Job("the ONNX version converter", "the opset upgrade",
                   "the reference process", max_bytes)
        return self._on_model(model_bytes, "__convert__", target,
                              CONVERT_TIMEOUT_S if timeout is None else timeout, job,
                              ConversionRefused)

    def optimize(self, model_bytes: bytes, *, max_bytes: int,
                 timeout: float = CONVERT_TIMEOUT_S) -> bytes:
        """The serialized model as onnxruntime's extended graph optimizations rewrite it (see
        :func:`_optimize`): RewriteTooLarge past ``max_bytes``; ModelImportError when
        onnxruntime cannot load the model."""
        job = _Job("onnxruntime", "the graph optimization", "the reference process",
                   max_bytes)
        try:
            return self._on_model(model_bytes, "__optimize__", max_bytes, timeout, job)
        except ModelImportError as exc:
            if str(exc).startswith(_REWRITE_TOO_LARGE):
                raise RewriteTooLarge(str(exc)) from None
            raise

    def value_types(self, model_bytes: bytes, *, timeout: float = CONVERT_TIMEOUT_S
                    ) -> dict[str, int]:
        """Value name -> ONNX element type of the model's values, its subgraphs' too, by
        onnx's type inference (see :func:`_value_types`); ModelImportError when it fails."""
        job = _Job("onnx's type inference", "the type inference", "the reference process",
                   _MAX_TYPES_ANSWER)
        payload = self._on_model(model_bytes, "__types__", 1, timeout, job)
        try:
            types = json.loads(payload.decode())
        except ValueError:
            types = None
        if type(types) is not dict or not all(type(v) is int for v in types.values()):
            raise ModelImportError("the reference process answered nonsense to the type "
                                   "inference")
        return types

    def _on_model(self, model_bytes: bytes, key: str, value: int, timeout: float, job: _Job,
                  refused: type[Exception] = ModelImportError) -> bytes:
        """The answer to one request about a serialized model (``key``: which, ``value`` its
        argument); the child's refusal raised as ``refused``."""
        status, payload = self._ask(_pack({"__model__": np.frombuffer(model_bytes, np.uint8),
                                           key: np.array(value)}), timeout, job)
        if status == b"E":
            raise refused(payload.decode("utf-8", "replace"))
        return payload

    def _ask(self, data: bytes, timeout: float, job: _Job) -> tuple[bytes, bytes]:
        """(status, payload) of one request, starting a child when there is none."""
        with self._lock:
            for attempt in (1, 2):
                if self._proc is None or self._proc.poll() is not None:
                    self._proc = self._start()
                try:
                    return self._exchange(self._proc, data, timeout, job)
                except _Gone:  # gone before it read the request: not the model's doing
                    self.close()
                    if attempt == 2:
                        raise ModelImportError(f"{job.process} could not be started") from None
                except ModelImportError:
                    self.close()
                    raise
                except BaseException:  # interrupted (a signal's exception, Ctrl-C) mid-request:
                    self._proc.kill()   # its answer must not be read as the next request's
                    self.close()
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _exchange(self, proc: subprocess.Popen, data: bytes, timeout: float, job: _Job
                  ) -> tuple[bytes, bytes]:
        assert proc.stdin is not None and proc.stdout is not None
        deadline = time.monotonic() + timeout
        try:
            proc.stdin.write(_LENGTH.pack(len(data)))
            proc.stdin.write(data)
            proc.stdin.flush()
        except OSError:  # a broken pipe: the child ended before it had the whole request
            raise _Gone from None
        fd = proc.stdout.fileno()
        buffer = bytearray()
        need = 1 + _LENGTH.size
        while len(buffer) < need:
            left = deadline - time.monotonic()
            if left <= 0:
                proc.kill()
                raise ModelImportError(f"{job.who} did not finish {job.task} in "
                                       f"{timeout:g} s (stopped)")
            if not select.select([fd], [], [], min(left, POLL_S))[0]:
                check_stop()  # a stop signal the command defers: the child is killed (_ask)
                continue
            chunk = os.read(fd, max(need - len(buffer), 1 << 20))
            if not chunk:
                raise self._died(proc, job)
            buffer += chunk
            if len(buffer) >= 1 + _LENGTH.size and need == 1 + _LENGTH.size:
                size = _LENGTH.unpack_from(buffer, 1)[0]
                if buffer[:1] not in (b"O", b"E") or size > _MAX_ANSWER:
                    proc.kill()
                    raise ModelImportError(f"{job.process} answered nonsense (stopped)")
                if size > job.max_answer:
                    proc.kill()
                    raise ModelImportError(f"{job.who} answered {size} bytes, past the cap "
                                           f"of {job.max_answer} (stopped)")
                need += size
        return bytes(buffer[:1]), bytes(buffer[1 + _LENGTH.size:need])

    @staticmethod
    def _died(proc: subprocess.Popen, job: _Job) -> ModelImportError:
        try:
            returncode = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            returncode = proc.wait()
        return ModelImportError(f"{job.who} crashed on the model ({_describe(returncode)}): "
                                f"it is malformed in a way the checks before it did not catch")


_PROCESS = ReferenceProcess()


def run_reference(model, onnx_inputs: Mapping[str, str], onnx_outputs: Mapping[str, str],
                  cases: Sequence[Mapping[str, np.ndarray]], *, timeout: float = TIMEOUT_S,
                  optimized: bool = False, float64: bool = False) -> list[dict[str, np.ndarray]]:
    """Run every case (keyed by ABI input name) on onnxruntime, in the reference process;
    outputs keyed by ABI name. ``optimized``: with onnxruntime's graph optimizations on;
    ``float64``: on onnx's reference evaluator instead (:mod:`.float64_evaluation`)."""
    try:
        import importlib.util

        found = importlib.util.find_spec("onnxruntime") is not None
    except (ImportError, ValueError):
        found = False
    if not found:  # pragma: no cover - the onnx extra is part of the test setup
        raise UsageError("ONNX import computes golden vectors with onnxruntime: pip install "
                         "'plugin-host[onnx]'")
    names = list(onnx_outputs)
    fetch = [onnx_outputs[n] for n in names]
    feeds = [{onnx_inputs[k]: np.require(v, requirements="C") for k, v in case.items()}
             for case in cases]
    results = _PROCESS.run(model.SerializeToString(), fetch, feeds, timeout=timeout,
                           optimized=optimized, float64=float64)
    return [{n: result[onnx_outputs[n]] for n in names} for result in results]


def infer_value_types(model) -> dict[str, int]:
    """Value name -> ONNX element type of ``model``'s values (its subgraphs' too) by onnx's
    type inference, in the reference process (see :meth:`ReferenceProcess.value_types`)."""
    return _PROCESS.value_types(model.SerializeToString())


def run_optimizer(model_bytes: bytes, *, max_bytes: int) -> bytes:
    """The serialized model as onnxruntime's extended graph optimizations rewrite it, in the
    reference process (see :meth:`ReferenceProcess.optimize`)."""
    return _PROCESS.optimize(model_bytes, max_bytes=max_bytes)


def run_converter(model_bytes: bytes, target: int, *, max_bytes: int,
                  timeout: float | None = None) -> bytes:
    """The serialized model upgraded to default-domain opset ``target`` by onnx's version
    converter, in the reference process (see :meth:`ReferenceProcess.convert`)."""
    return _PROCESS.convert(model_bytes, target, max_bytes=max_bytes, timeout=timeout)
