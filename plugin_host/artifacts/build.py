"""Build an unsigned artifact from a Graph: golden vectors, manifest, tensor section, one file.

The golden outputs are computed here by running the graph through the executor on the
reference backend (``numpy`` unless another is given), so every artifact carries the numbers
an acceptance run on the target backend must reproduce within the declared tolerances. A caller
with an external reference (the ONNX importer uses onnxruntime) passes ``golden_outputs`` and
names that reference; the graph still runs on the reference backend (latency, and a check that
it runs at all).

The result is checked with the same code a loader uses before it is written, so a builder bug
cannot produce a file the host would refuse. Building is deterministic: the same graph, seed
and options give the same bytes (unless the latency is left to be measured).
"""

from __future__ import annotations

import math
import os
import time
from datetime import datetime
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from abi import dtypes
from abi.artifact import (DEFAULT_LIMITS, MAX_GOLDEN_CASES, Limits, Manifest, ResetConditions,
                          check_compatible,
                          check_manifest, decode, derive_roles, encode, encode_signatures,
                          file_prefix, golden_tensor_name, make_manifest, plan_tensors,
                          atomic_write, write_section)

from .. import __version__
from ..backend import Backend, unsupported
from ..errors import ArtifactFormatError, BackendError, UsageError
from ..executor import Executor
from ..graph import Graph

__all__ = ["build_artifact", "target_problems", "describe_targets", "DEFAULT_TOLERANCE",
           "REFERENCE_BACKEND"]

#: (rtol, atol) for every output unless given.
DEFAULT_TOLERANCE = (1e-4, 1e-5)
#: Added to a measured worst-case latency: every model runs behind the sandbox worker's round
#: trip, which a tiny model's own time does not show.
SANDBOX_ALLOWANCE_MS = 2.0
#: The backend golden outputs are computed on unless another is given.
REFERENCE_BACKEND = "numpy"

Progress = Callable[[str], None]


def build_artifact(graph: Graph, path: str | os.PathLike, *, name: str | None = None,
                   version: str = "0.1.0", backends: Sequence[str] = (REFERENCE_BACKEND,),
                   reference_backend: Backend | None = None,
                   tolerances: Mapping[str, tuple[float, float]] | tuple[float, float]
                   = DEFAULT_TOLERANCE,
                   reset: ResetConditions = ResetConditions(), latency_ms: float | None = None,
                   golden_inputs: Sequence[Mapping[str, np.ndarray]] | None = None,
                   golden_cases: int = 2, seed: int = 0,
                   golden_outputs: Sequence[Mapping[str, np.ndarray]] | None = None,
                   reference: str | None = None,
                   expires: int | datetime | None = None, limits: Limits = DEFAULT_LIMITS,
                   progress: Progress | None = None) -> Manifest:
    """Write ``graph`` as an unsigned artifact at ``path``; return its (checked) manifest.

    ``name`` defaults to the graph's name; ``version`` is ``MAJOR.MINOR.PATCH``; ``backends``
    are the target backends. ``tolerances`` is one ``(rtol, atol)`` for every output or a
    mapping per output name. ``reset`` declares the recurrent-state reset conditions.
    ``latency_ms`` is the declared worst case; when None it is measured on the reference
    backend (twice the slowest golden run plus :data:`SANDBOX_ALLOWANCE_MS`, rounded up to
    0.1 ms). ``golden_inputs`` are the
    reference inputs (every graph input, state included; a state input left out is zero);
    when None, ``golden_cases`` cases are drawn from ``seed`` (case 0 with zero state).
    ``golden_outputs`` are reference outputs computed elsewhere, one mapping per golden input
    case with every graph output (same dtype and shape as the graph's); ``reference`` names who
    computed them (stored as the golden reference, e.g. ``"onnxruntime"``; default the
    reference backend's name).
    ``expires`` is a Unix time or an aware datetime.

    A target backend installed here that cannot run the graph (an op or dtype it lacks) is a
    BackendError before anything is written (see :func:`target_problems`).
    """
    say = progress or (lambda message: None)
    name = graph.name if name is None else name
    check_output_path(path)
    if reference_backend is None:
        from ..plugins import get_backend, get_plugin_manager

        reference_backend = get_backend(get_plugin_manager(), REFERENCE_BACKEND)
    problems = target_problems(graph, backends, reference_backend)
    if problems:
        raise BackendError(f"cannot build {name!r}: {describe_targets(problems)}",
                           backend=next(iter(problems)))

    say(f"running {graph.name!r} on the reference backend {reference_backend.name!r}")
    executor = Executor(graph, reference_backend)
    cases = (_given_inputs(graph, golden_inputs) if golden_inputs is not None
             else _drawn_inputs(graph, executor.index_inputs, golden_cases, seed))
    golden, slowest = [], 0.0
    for inputs in cases:
        executor.run(inputs)  # warm-up, then the timed run
        start = time.perf_counter()
        outputs = executor.run(inputs)
        slowest = max(slowest, time.perf_counter() - start)
        golden.append((inputs, {s.name: np.array(outputs[s.name]) for s in graph.outputs}))
    if golden_outputs is not None:
        golden = _given_outputs(graph, golden, golden_outputs)
    if latency_ms is None:
        # twice the slowest run, plus room for the sandbox round trip the model always runs
        # behind (a few hundred microseconds with cold caches)
        latency_ms = math.ceil((slowest * 2e3 + SANDBOX_ALLOWANCE_MS) * 10) / 10

    roles = derive_roles(graph.to_dict())
    items: list[tuple[str, str, np.ndarray]] = [(k, roles[k], np.asarray(a))
                                                for k, a in graph.tensors.items()]
    for i, (inputs, outputs) in enumerate(golden):
        items += [(golden_tensor_name(i, "input", s.name), "golden", inputs[s.name])
                  for s in graph.inputs]
        items += [(golden_tensor_name(i, "output", s.name), "golden", outputs[s.name])
                  for s in graph.outputs]
    if len(items) > limits.max_tensors:
        raise UsageError(f"{len(items)} tensors exceed the cap of {limits.max_tensors}")
    say(f"hashing {len(items)} tensors")
    entries, length = plan_tensors(items)

    manifest = make_manifest(
        name=name, version=version, graph=graph.to_dict(), entries=entries,
        section_length=length, backends=list(backends),
        tolerances=_tolerances(graph, tolerances), reset=reset, latency_ms=float(latency_ms),
        golden_backend=reference or reference_backend.name, golden_cases=len(golden),
        builder=f"plugin-host {__version__}", expires=_unix(expires))
    manifest_bytes = encode(manifest, where="manifest")
    if len(manifest_bytes) > limits.max_manifest_bytes:
        raise ArtifactFormatError(f"{len(manifest_bytes)} bytes exceed the cap of "
                                  f"{limits.max_manifest_bytes}", where="manifest")
    try:  # the loader's own checks, so nothing unloadable is ever written
        checked = check_manifest(decode(manifest_bytes, limits=limits.manifest_decode_limits()),
                                 limits=limits)
        check_compatible(checked)
    except ArtifactFormatError as exc:
        raise UsageError(f"cannot build artifact {name!r}: {exc}") from None

    prefix = file_prefix(manifest_bytes, encode_signatures([]), length)
    arrays = [a for _, _, a in items]

    def write(f: Any) -> None:
        f.write(prefix)
        write_section(f, entries, arrays, length)

    say(f"writing {path}")
    try:
        atomic_write(path, write)
    except OSError as exc:
        raise UsageError(f"cannot write artifact {path}: {exc.strerror}") from None
    return checked


def check_output_path(path: str | os.PathLike) -> None:
    """UsageError, before any work, when ``path`` cannot be written as a new artifact file: a
    folder, or in a folder that does not exist."""
    if os.path.isdir(path):
        raise UsageError(f"cannot write artifact {os.fspath(path)}: it is a folder")
    folder = os.path.dirname(os.fspath(path)) or "."
    if not os.path.isdir(folder):
        raise UsageError(f"cannot write artifact {os.fspath(path)}: no folder {folder}")


def _tolerances(graph: Graph, given: Any) -> dict[str, tuple[float, float]]:
    names = [s.name for s in graph.outputs]
    if isinstance(given, Mapping):
        missing = [n for n in names if n not in given]
        extra = [k for k in given if k not in names]
        if missing or extra:
            raise UsageError(f"tolerances: missing outputs {missing}, unknown outputs {extra}")
        table = {n: tuple(given[n]) for n in names}
    else:
        table = {n: tuple(given) for n in names}
    for n, t in table.items():
        if len(t) != 2 or not all(isinstance(v, (int, float)) and math.isfinite(v) and v >= 0
                                  for v in t):
            raise UsageError(f"tolerance for output {n!r} must be (rtol, atol), finite and "
                             f">= 0, got {t}")
    return {n: (float(t[0]), float(t[1])) for n, t in table.items()}


def _unix(expires: int | datetime | None) -> int | None:
    if expires is None:
        return None
    if isinstance(expires, datetime):
        if expires.tzinfo is None:
            raise UsageError("expires: give an aware datetime (with a time zone)")
        return int(expires.timestamp())
    if type(expires) is not int or expires < 0:
        raise UsageError(f"expires must be a Unix time (int >= 0), got {expires!r}")
    return expires


def _given_outputs(graph: Graph, computed: list, given: Sequence[Mapping[str, np.ndarray]]
                   ) -> list[tuple[dict[str, np.ndarray], dict[str, np.ndarray]]]:
    """The golden cases with the caller's reference outputs, checked against the graph's."""
    if len(given) != len(computed):
        raise UsageError(f"golden_outputs: {len(given)} case(s) for {len(computed)} input "
                         f"case(s)")
    cases = []
    for i, ((inputs, ours), theirs) in enumerate(zip(computed, given)):
        if set(theirs) != set(ours):
            raise UsageError(f"golden_outputs[{i}]: outputs {sorted(theirs)}, the graph has "
                             f"{sorted(ours)}")
        outputs = {}
        for name, mine in ours.items():
            ref = np.asarray(theirs[name])
            if ref.dtype != mine.dtype or ref.shape != mine.shape:
                raise UsageError(f"golden_outputs[{i}][{name!r}] is {ref.dtype} {ref.shape}, the "
                                 f"graph produces {mine.dtype} {mine.shape}")
            outputs[name] = np.array(ref)
        cases.append((inputs, outputs))
    return cases


def _given_inputs(graph: Graph, given: Sequence[Mapping[str, np.ndarray]]
                  ) -> list[dict[str, np.ndarray]]:
    if not given:
        raise UsageError("golden_inputs: give at least one case")
    cases = []
    for case in given:
        inputs = dict(case)
        for spec in graph.inputs:
            if spec.name in graph.state and spec.name not in inputs:
                inputs[spec.name] = np.zeros(spec.shape, dtypes.to_numpy(spec.dtype))
        cases.append(inputs)
    return cases


def check_golden_cases(count: Any, name: str = "golden_cases") -> None:
    """UsageError unless ``count`` is an int from 1 to the manifest's cap; ``name`` is what
    the message calls it (the command line's option)."""
    if type(count) is not int or not 1 <= count <= MAX_GOLDEN_CASES:
        raise UsageError(f"{name} must be from 1 to {MAX_GOLDEN_CASES}, got {count!r}")


def check_seed(seed: Any) -> None:
    """UsageError unless ``seed`` is an int >= 0 (what numpy's generators take)."""
    if type(seed) is not int or seed < 0:
        raise UsageError(f"seed must be an int >= 0, got {seed!r}")


def target_problems(graph: Graph, backends: Sequence[str],
                    reference: Backend | None = None) -> dict[str, list[str]]:
    """Why each target backend installed here cannot run ``graph`` (empty when every one can),
    so that no artifact is declared for a backend that would refuse it at load. A target not
    installed here (a device's own backend, onnxruntime on a machine without it) is not
    checked: acceptance on the device runs it. ``reference``, the backend instance the build
    runs on, answers for its own name."""
    from ..plugins import backends as installed, get_plugin_manager

    available = installed(get_plugin_manager())
    if reference is not None:
        available[reference.name] = reference
    found = {}
    for target in dict.fromkeys(backends):
        backend = available.get(target)
        if backend is None:
            continue
        try:
            reasons = unsupported(backend, graph)
        except BackendError:  # registered, but its runtime is missing here
            continue
        if reasons:
            found[target] = reasons
    return found


def describe_targets(problems: Mapping[str, list[str]]) -> str:
    """:func:`target_problems`' answer as one line."""
    return "; ".join(f"target backend {target!r} cannot run it: {', '.join(reasons)}"
                     for target, reasons in problems.items())


def _drawn_inputs(graph: Graph, index_inputs: Mapping[str, int], count: int, seed: int, *,
                  sizes: Mapping[str, Sequence[int]] | None = None,
                  max_elements: int | None = None,
                  ranges: Mapping[str, tuple[float, float]] | None = None
                  ) -> list[dict[str, np.ndarray]]:
    """``count`` golden cases of random inputs; a symbolic dim takes size 1, or in case k
    the k-th of its ``sizes`` (cycling). An input ``ranges`` names is drawn uniformly from
    its [low, high) (integers: ``rng.integers(low, high)``); other integers from [0, 2), or
    [0, vocab) for an Embedding's indices, floats from a normal distribution. UsageError for
    an input of more than ``max_elements`` elements, before it is drawn."""
    check_golden_cases(count)
    check_seed(seed)
    rng = np.random.default_rng(seed)
    cases = []
    for case in range(count):
        inputs = {}
        for spec in graph.inputs:
            shape = tuple(d if type(d) is int else _drawn_size((sizes or {}).get(d, (1,)), case)
                          for d in spec.shape)
            if max_elements is not None and math.prod(shape) > max_elements:
                raise UsageError(f"golden case {case}: input {spec.name!r} of shape {shape} "
                                 f"would hold {math.prod(shape)} elements, over the cap of "
                                 f"{max_elements}; draw its run-time dims smaller")
            dtype = dtypes.to_numpy(spec.dtype)
            if spec.name in graph.state and case == 0:
                value = np.zeros(shape, dtype)
            elif spec.name in (ranges or {}):
                low, high = ranges[spec.name]
                value = (rng.integers(low, high, size=shape) if dtype.kind in "iu" else
                         rng.uniform(low, high, size=shape)).astype(dtype)
            elif dtype.kind == "b":
                value = rng.integers(0, 2, size=shape).astype(dtype)
            elif dtype.kind in "iu":
                value = rng.integers(0, index_inputs.get(spec.name, 2), size=shape).astype(dtype)
            else:
                scale = 0.5 if spec.name in graph.state else 1.0
                value = (scale * rng.standard_normal(shape)).astype(dtype)
            inputs[spec.name] = np.asarray(value)  # rng draws a numpy scalar for shape ()
        cases.append(inputs)
    return cases


def _drawn_size(sizes: Sequence[int], case: int) -> int:
    return sizes[case % len(sizes)]
