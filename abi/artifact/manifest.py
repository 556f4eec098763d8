"""The manifest: what an artifact binds together, its schema, and the compatibility check.

A manifest is a canonical msgpack map with exactly these keys::

    abi_version     int       host ABI version the artifact was built for (abi.ABI_VERSION)
    backends        [str]     target backends, at least one
    expires         int|nil   expiry as Unix seconds (UTC), or nil for none
    golden          map       reference_backend (str) and cases: [{inputs, outputs}], each a
                              map of graph input/output name -> golden tensor name
    graph           map       the model: name, inputs, outputs (TensorSpec dicts), nodes
                              (name, op, version, inputs, outputs, attrs, atomic), constants
                              (name, dtype, shape) and state ({input: output})
    latency_ms      float     declared worst-case latency on the target backend
    layers          [map]     per normalization node: op, eps, momentum, affine,
                              track_running_stats and its running-state tensors (derived from
                              the graph, checked against it)
    name            str       the artifact name (rollback and thresholds are per name)
    provenance      map       builder ("plugin-host 0.1.0") and source_digest: SHA-256 of the
                              canonical graph description (checked)
    root_digest     str       SHA-256 of the canonical tensor table (see abi.artifact.tensors)
    state_contract  map       pairs ({state input: output}, equal to the graph's) and reset:
                              frame_gap_ms (float|nil), camera_restart, timestamp_backwards,
                              artifact_swap, explicit (bools)
    tensor_section  map       alignment (64) and length (bytes)
    tensors         [map]     name, role (weight|state|golden), dtype, shape, offset, nbytes,
                              sha256; the graph's constants first, in graph order, then the
                              golden tensors ``@golden/<case>/<input|output>/<name>``
    tolerances      map       graph output name -> {rtol, atol}
    version         str       semantic version "MAJOR.MINOR.PATCH", compared numerically

:func:`check_manifest` accepts exactly this shape and every cross-reference in it (derived
fields must equal what the graph implies), raising ArtifactFormatError naming the field.
:func:`check_compatible` then decides whether this host can run it.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping, Sequence

import numpy as np

from abi import dtypes
from abi.artifact import canonical
from abi.artifact.container import ALIGNMENT, DEFAULT_LIMITS, Limits, align
from abi.artifact.tensors import ROLES, TensorEntry, root_digest
from abi.errors import (ArtifactFormatError, DTypeError, IncompatibleArtifactError, OpError,
                        SpecError)
from abi.ops import get_op
from abi.spec import MAX_RANK, TensorSpec

__all__ = ["MANIFEST_KEYS", "GRAPH_KEYS", "NODE_KEYS", "NORM_OPS", "STATE_PORTS",
           "ResetConditions", "Tolerance", "GoldenCase", "Manifest", "parse_version",
           "check_manifest", "check_graph_dict", "graph_digest", "derive_roles",
           "layers_summary", "golden_tensor_name", "make_manifest", "check_compatible",
           "MAX_GOLDEN_CASES"]

MANIFEST_KEYS = ("abi_version", "backends", "expires", "golden", "graph", "latency_ms", "layers",
                 "name", "provenance", "root_digest", "state_contract", "tensor_section",
                 "tensors", "tolerances", "version")
GRAPH_KEYS = ("constants", "inputs", "name", "nodes", "outputs", "state")
NODE_KEYS = ("atomic", "attrs", "inputs", "name", "op", "outputs", "version")
_CONSTANT_KEYS = ("dtype", "name", "shape")
_ENTRY_KEYS = ("dtype", "name", "nbytes", "offset", "role", "sha256", "shape")
_RESET_KEYS = ("artifact_swap", "camera_restart", "explicit", "frame_gap_ms",
               "timestamp_backwards")

#: Ops summarized in the manifest's ``layers`` list.
NORM_OPS = frozenset({"batchnorm", "group_norm", "instance_norm", "layer_norm", "layer_norm2d",
                      "rms_norm"})
#: Op input names whose constants are frozen running state rather than learned weights.
STATE_PORTS = ("running_mean", "running_var", "num_batches_tracked")

_ARTIFACT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_BACKEND_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_OP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_CONSTANT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:/-]{0,255}")
_VERSION = re.compile(r"(0|[1-9][0-9]{0,8})\.(0|[1-9][0-9]{0,8})\.(0|[1-9][0-9]{0,8})")
_HEX64 = re.compile(r"[0-9a-f]{64}")
MAX_GOLDEN_CASES = 64
_MAX_BACKENDS = 16


# --- typed view ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ResetConditions:
    """When the host must zero the recurrent state.

    ``frame_gap_ms``: a gap between consecutive frames above this many ms (dropped frames);
    None disables it. The booleans: the camera restarted (pool or server id changed), a
    timestamp went backwards, the artifact was swapped, an explicit request.
    """

    frame_gap_ms: float | None = 150.0
    camera_restart: bool = True
    timestamp_backwards: bool = True
    artifact_swap: bool = True
    explicit: bool = True

    def to_dict(self) -> dict[str, Any]:
        gap = None if self.frame_gap_ms is None else float(self.frame_gap_ms)
        return {"artifact_swap": bool(self.artifact_swap),
                "camera_restart": bool(self.camera_restart), "explicit": bool(self.explicit),
                "frame_gap_ms": gap, "timestamp_backwards": bool(self.timestamp_backwards)}


#: Elements :meth:`Tolerance.compare` takes at a time
COMPARE_RUN = 1 << 16


@dataclass(frozen=True)
class Tolerance:
    """Allowed difference per output element: ``|got - want| <= atol + rtol * |want|``.

    A nan where the reference has nan, and an infinity where it has the same infinity, agree
    (as ``numpy.testing.assert_allclose`` and ``torch.testing.assert_close`` with
    ``equal_nan``); integer and bool outputs must be equal.
    """

    rtol: float
    atol: float

    def mismatches(self, got: np.ndarray, want: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(|got - want|, outside)`` for arrays of one shape: the float64 difference (0 where
        they agree exactly, nan and infinities included; inf where only one is nan) and the
        mask of elements outside the tolerance."""
        if got.dtype.kind == "f" or want.dtype.kind == "f":
            g, w = got.astype(np.float64), want.astype(np.float64)
            same = (g == w) | (np.isnan(g) & np.isnan(w))
            with np.errstate(invalid="ignore", over="ignore"):
                diff = np.abs(g - w)
                diff = np.where(same, 0.0, np.where(np.isnan(diff), np.inf, diff))
                # an infinite reference allows nothing but itself (rtol * inf would allow all)
                outside = ~(same | (np.isfinite(w) & (diff <= self.atol + self.rtol * np.abs(w))))
            return diff, outside
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
        return diff, got != want

    def compare(self, got: np.ndarray, want: np.ndarray) -> tuple[float, int]:
        """``(largest |got - want|, elements outside the tolerance)`` as :meth:`mismatches`
        finds them, taken in runs of ``COMPARE_RUN`` elements, so its float64 arrays stay
        small whatever the outputs' size (40 million elements at once: 3 GB and 1.5 s);
        ``(inf, want.size)`` where the shapes differ."""
        got, want = np.asarray(got), np.asarray(want)
        if got.shape != want.shape:
            return math.inf, int(want.size)
        g, w = got.reshape(-1), want.reshape(-1)
        worst, outside = 0.0, 0
        for i in range(0, g.size, COMPARE_RUN):
            diff, bad = self.mismatches(g[i:i + COMPARE_RUN], w[i:i + COMPARE_RUN])
            worst = max(worst, float(diff.max(initial=0.0)))
            outside += int(np.count_nonzero(bad))
        return worst, outside


@dataclass(frozen=True)
class GoldenCase:
    """One golden case: graph input/output name -> golden tensor name."""

    inputs: Mapping[str, str]
    outputs: Mapping[str, str]


@dataclass(frozen=True)
class Manifest:
    """A manifest that passed :func:`check_manifest` (consistent, not yet trusted to run)."""

    name: str
    version: str
    abi_version: int
    backends: tuple[str, ...]
    expires: int | None
    latency_ms: float
    tolerances: Mapping[str, Tolerance]
    state_pairs: Mapping[str, str]
    reset: ResetConditions
    golden_backend: str
    golden: tuple[GoldenCase, ...]
    builder: str
    source_digest: str
    root_digest: str
    tensors: tuple[TensorEntry, ...]
    section_length: int
    graph: Mapping[str, Any] = field(repr=False)
    layers: tuple[Mapping[str, Any], ...] = field(repr=False)
    raw: Mapping[str, Any] = field(repr=False)

    @property
    def version_tuple(self) -> tuple[int, int, int]:
        return parse_version(self.version)

    @property
    def nodes(self) -> list[Mapping[str, Any]]:
        return list(self.graph["nodes"])

    def entries(self, role: str) -> list[TensorEntry]:
        return [e for e in self.tensors if e.role == role]


# --- small checks ------------------------------------------------------------------------------


def _fail(where: str, message: str) -> ArtifactFormatError:
    return ArtifactFormatError(message, where=where)


def _short(value: Any, limit: int = 48) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _map(value: Any, where: str, keys: Sequence[str]) -> dict[str, Any]:
    if type(value) is not dict:
        raise _fail(where, f"expected a map, got {type(value).__name__}")
    missing = [k for k in keys if k not in value]
    extra = [k for k in value if k not in keys]
    if missing or extra:
        parts = []
        if missing:
            parts.append("missing " + ", ".join(missing))
        if extra:
            parts.append("unknown " + ", ".join(_short(k, 32) for k in extra[:4]))
        raise _fail(where, "; ".join(parts) + f" (expected keys: {', '.join(keys)})")
    return value


def _list(value: Any, where: str, lo: int = 0, hi: int | None = None) -> list[Any]:
    if type(value) is not list:
        raise _fail(where, f"expected a list, got {type(value).__name__}")
    if len(value) < lo or (hi is not None and len(value) > hi):
        raise _fail(where, f"has {len(value)} entries, expected {lo} to {hi}" if hi is not None
                    else f"has {len(value)} entries, expected at least {lo}")
    return value


def _str(value: Any, where: str, pattern: re.Pattern[str] | None = None,
         max_length: int = 256) -> str:
    if type(value) is not str:
        raise _fail(where, f"expected a str, got {type(value).__name__}")
    if pattern is not None:
        if not pattern.fullmatch(value):
            raise _fail(where, f"{_short(value)} is not a valid value (pattern "
                               f"{pattern.pattern})")
    elif not value or len(value) > max_length or not value.isprintable():
        raise _fail(where, f"{_short(value)} must be 1 to {max_length} printable characters")
    return value


def _int(value: Any, where: str, lo: int, hi: int) -> int:
    if type(value) is not int:
        raise _fail(where, f"expected an int, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise _fail(where, f"{value} is outside [{lo}, {hi}]")
    return value


def _float(value: Any, where: str, *, positive: bool = False) -> float:
    if type(value) is not float or not math.isfinite(value):
        raise _fail(where, f"expected a finite float, got {_short(value)}")
    if value < 0 or (positive and value == 0):
        raise _fail(where, f"{value} must be {'> 0' if positive else '>= 0'}")
    return value


def _bool(value: Any, where: str) -> bool:
    if type(value) is not bool:
        raise _fail(where, f"expected a bool, got {type(value).__name__}")
    return value


def _shape(value: Any, where: str) -> tuple[int, ...]:
    dims = _list(value, where, 0, MAX_RANK)
    return tuple(_int(d, f"{where}[{i}]", 0, 2**63 - 1) for i, d in enumerate(dims))


def _same(a: Any, b: Any) -> bool:
    """Equal as canonical msgpack (so 1, 1.0 and True are three different values)."""
    try:
        return canonical.encode(a) == canonical.encode(b)
    except ArtifactFormatError:
        return False


def parse_version(text: Any, where: str = "version") -> tuple[int, int, int]:
    """``"MAJOR.MINOR.PATCH"`` (no leading zeros, no suffix) as a tuple of ints."""
    match = _VERSION.fullmatch(text) if type(text) is str else None
    if match is None:
        raise _fail(where, f"{_short(text)} is not a semantic version MAJOR.MINOR.PATCH")
    return (int(match[1]), int(match[2]), int(match[3]))


# --- the graph description ---------------------------------------------------------------------


def check_graph_dict(unverified: Any, where: str = "graph") -> dict[str, Any]:
    """Check the structure of a graph description (``Graph.to_dict()`` output, hostile).

    Types and key sets only; whether the graph makes sense (ops, attributes, shape contracts)
    is the Graph's own check. Returns the same dict.
    """
    g = _map(unverified, where, GRAPH_KEYS)
    _str(g["name"], f"{where}.name")
    for key in ("inputs", "outputs"):
        specs = _list(g[key], f"{where}.{key}", 1 if key == "outputs" else 0)
        names = set()
        for i, spec in enumerate(specs):
            try:
                parsed = TensorSpec.from_dict(spec)
            except (SpecError, DTypeError) as exc:
                raise _fail(f"{where}.{key}[{i}]", str(exc)) from None
            if parsed.name in names:
                raise _fail(f"{where}.{key}[{i}]", f"duplicate name {parsed.name!r}")
            names.add(parsed.name)
    for i, node in enumerate(_list(g["nodes"], f"{where}.nodes")):
        at = f"{where}.nodes[{i}]"
        _map(node, at, NODE_KEYS)
        _str(node["name"], f"{at}.name")
        _str(node["op"], f"{at}.op", _OP_NAME)
        _int(node["version"], f"{at}.version", 1, 2**31 - 1)
        for j, t in enumerate(_list(node["inputs"], f"{at}.inputs")):
            if t is not None:
                _str(t, f"{at}.inputs[{j}]")
        for j, t in enumerate(_list(node["outputs"], f"{at}.outputs", 1)):
            _str(t, f"{at}.outputs[{j}]")
        if type(node["attrs"]) is not dict:
            raise _fail(f"{at}.attrs", f"expected a map, got {type(node['attrs']).__name__}")
        _bool(node["atomic"], f"{at}.atomic")
    seen: set[str] = set()
    for i, const in enumerate(_list(g["constants"], f"{where}.constants")):
        at = f"{where}.constants[{i}]"
        _map(const, at, _CONSTANT_KEYS)
        name = _str(const["name"], f"{at}.name", _CONSTANT_NAME)
        if name in seen:
            raise _fail(at, f"duplicate constant {name!r}")
        seen.add(name)
        _dtype(const["dtype"], f"{at}.dtype")
        _shape(const["shape"], f"{at}.shape")
    state = g["state"]
    if type(state) is not dict:
        raise _fail(f"{where}.state", f"expected a map, got {type(state).__name__}")
    for k, v in state.items():
        _str(k, f"{where}.state (a key)")
        _str(v, f"{where}.state[{_short(k, 32)}]")
    return g


def _dtype(value: Any, where: str) -> str:
    if type(value) is not str or value not in dtypes.DTYPES:
        raise _fail(where, f"{_short(value)} is not an ABI dtype ({', '.join(dtypes.DTYPES)})")
    return value


def graph_digest(graph: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the canonical msgpack of a graph description."""
    return hashlib.sha256(canonical.encode(dict(graph), where="graph")).hexdigest()


def _ports(node: Mapping[str, Any]) -> dict[str, Any] | None:
    """Op input name -> the node's tensor there, or None when the op is unknown here."""
    try:
        opdef = get_op(node["op"], node["version"])
    except OpError:
        return None
    names = opdef.input_names
    if opdef.variadic_inputs:
        return {}
    return {port: (node["inputs"][i] if i < len(node["inputs"]) else None)
            for i, port in enumerate(names)}


def derive_roles(graph: Mapping[str, Any]) -> dict[str, str]:
    """Constant name -> ``"state"`` when it feeds a running-state input, else ``"weight"``."""
    state: set[str] = set()
    for node in graph["nodes"]:
        ports = _ports(node) or {}
        for port in STATE_PORTS:
            if ports.get(port) is not None:
                state.add(ports[port])
    return {c["name"]: ("state" if c["name"] in state else "weight") for c in graph["constants"]}


def layers_summary(graph: Mapping[str, Any]) -> list[dict[str, Any]]:
    """eps, momentum, affine, track_running_stats and running-state tensors per norm node."""
    summary = []
    for node in graph["nodes"]:
        if node["op"] not in NORM_OPS:
            continue
        ports = _ports(node)
        if ports is None:
            continue
        attrs = node["attrs"]
        summary.append({
            "affine": all(ports[p] is not None for p in ("weight", "bias") if p in ports),
            "eps": attrs.get("eps"),
            "momentum": attrs.get("momentum"),
            "node": node["name"],
            "op": node["op"],
            "state": [ports[p] for p in STATE_PORTS if ports.get(p) is not None],
            "track_running_stats": attrs.get("track_running_stats"),
        })
    return summary


def golden_tensor_name(case: int, kind: str, name: str) -> str:
    """The tensor name of a golden input (``kind="input"``) or output of case ``case``."""
    return f"@golden/{case}/{kind}/{name}"


# --- the manifest ------------------------------------------------------------------------------


def _entries(value: Any, limits: Limits) -> tuple[list[TensorEntry], int]:
    items = _list(value, "tensors", 0, limits.max_tensors)
    entries, end, names = [], 0, set()
    for i, item in enumerate(items):
        at = f"tensors[{i}]"
        _map(item, at, _ENTRY_KEYS)
        name = _str(item["name"], f"{at}.name")
        if name in names:
            raise _fail(at, f"duplicate tensor name {name!r}")
        names.add(name)
        role = item["role"]
        if role not in ROLES:
            raise _fail(f"{at}.role", f"{_short(role)} is not one of {', '.join(ROLES)}")
        dtype = _dtype(item["dtype"], f"{at}.dtype")
        shape = _shape(item["shape"], f"{at}.shape")
        nbytes = _int(item["nbytes"], f"{at}.nbytes", 0, 2**63 - 1)
        expected = math.prod(shape) * dtypes.to_numpy(dtype).itemsize
        if nbytes != expected:
            raise _fail(f"{at}.nbytes", f"{nbytes} for {name!r}, but {dtype} "
                                        f"{tuple(shape)} is {expected} bytes")
        offset = _int(item["offset"], f"{at}.offset", 0, 2**63 - 1)
        if offset != align(end):
            raise _fail(f"{at}.offset", f"{offset} for {name!r}, expected {align(end)} (the "
                                        f"previous tensor's end aligned to {ALIGNMENT})")
        sha = _str(item["sha256"], f"{at}.sha256", _HEX64)
        entries.append(TensorEntry(name, role, dtype, shape, offset, nbytes, sha))
        end = offset + nbytes
    return entries, align(end)


def _check_golden(value: Any, graph: Mapping[str, Any], golden: list[TensorEntry]
                  ) -> tuple[str, tuple[GoldenCase, ...]]:
    g = _map(value, "golden", ("cases", "reference_backend"))
    backend = _str(g["reference_backend"], "golden.reference_backend", _BACKEND_NAME)
    cases = _list(g["cases"], "golden.cases", 1, MAX_GOLDEN_CASES)
    inputs = [TensorSpec.from_dict(s) for s in graph["inputs"]]
    outputs = [TensorSpec.from_dict(s) for s in graph["outputs"]]
    expected_entries: list[tuple[str, TensorSpec]] = []
    parsed = []
    for i, case in enumerate(cases):
        at = f"golden.cases[{i}]"
        _map(case, at, ("inputs", "outputs"))
        for kind, specs in (("input", inputs), ("output", outputs)):
            want = {s.name: golden_tensor_name(i, kind, s.name) for s in specs}
            if not _same(case[f"{kind}s"], want):
                raise _fail(f"{at}.{kind}s", f"must map every graph {kind} to its golden tensor "
                                             f"(@golden/{i}/{kind}/<name>)")
            expected_entries += [(want[s.name], s) for s in specs]
        parsed.append(GoldenCase(MappingProxyType(dict(case["inputs"])),
                                 MappingProxyType(dict(case["outputs"]))))
    names = [e.name for e in golden]
    if names != [n for n, _ in expected_entries]:
        raise _fail("tensors", f"the golden tensors after the constants must be exactly "
                               f"{len(expected_entries)} in case order (inputs, then outputs), "
                               f"got {len(names)}")
    bound: dict[str, int] = {}
    for entry, (_, spec) in zip(golden, expected_entries):
        case = entry.name.split("/")[1]
        if entry.dtype != spec.dtype or len(entry.shape) != len(spec.shape):
            raise _fail("tensors", f"golden tensor {entry.name!r} is {entry.dtype} "
                                   f"{entry.shape}, the spec says {spec}")
        for d, got in zip(spec.shape, entry.shape):
            if type(d) is int and d != got:
                raise _fail("tensors", f"golden tensor {entry.name!r} has shape {entry.shape}, "
                                       f"the spec says {spec}")
            if type(d) is str and bound.setdefault(f"{case}/{d}", got) != got:
                raise _fail("tensors", f"golden tensor {entry.name!r}: symbolic dim {d!r} is "
                                       f"{got} here but {bound[f'{case}/{d}']} elsewhere in "
                                       f"case {case}")
    return backend, tuple(parsed)


def check_manifest(unverified: Any, *, limits: Limits = DEFAULT_LIMITS) -> Manifest:
    """Check a decoded manifest (hostile) against the schema and its own cross-references.

    Raises ArtifactFormatError naming the first field that is wrong.
    """
    m = _map(unverified, "manifest", MANIFEST_KEYS)
    name = _str(m["name"], "name", _ARTIFACT_NAME)
    version = _str(m["version"], "version", max_length=32)
    parse_version(version)
    abi_version = _int(m["abi_version"], "abi_version", 0, 2**32 - 1)
    backends = tuple(_str(b, f"backends[{i}]", _BACKEND_NAME)
                     for i, b in enumerate(_list(m["backends"], "backends", 1, _MAX_BACKENDS)))
    if len(set(backends)) != len(backends):
        raise _fail("backends", "a backend is listed twice")
    expires = None if m["expires"] is None else _int(m["expires"], "expires", 0, 2**63 - 1)
    latency = _float(m["latency_ms"], "latency_ms", positive=True)
    graph = check_graph_dict(m["graph"])

    entries, length = _entries(m["tensors"], limits)
    section = _map(m["tensor_section"], "tensor_section", ("alignment", "length"))
    _int(section["alignment"], "tensor_section.alignment", ALIGNMENT, ALIGNMENT)
    if _int(section["length"], "tensor_section.length", 0, 2**63 - 1) != length:
        raise _fail("tensor_section.length", f"{section['length']}, but the tensors end at "
                                             f"{length} (aligned)")
    root = _str(m["root_digest"], "root_digest", _HEX64)

    constants = graph["constants"]
    roles = derive_roles(graph)
    if len(entries) < len(constants):
        raise _fail("tensors", f"{len(entries)} tensors for {len(constants)} graph constants")
    for i, (entry, const) in enumerate(zip(entries, constants)):
        if entry.name != const["name"]:
            raise _fail(f"tensors[{i}]", f"is {entry.name!r}, expected graph constant "
                                         f"{const['name']!r} (constants come first, in order)")
        if entry.dtype != const["dtype"] or list(entry.shape) != const["shape"]:
            raise _fail(f"tensors[{i}]", f"{entry.name!r} is {entry.dtype} {entry.shape}, the "
                                         f"graph declares {const['dtype']} "
                                         f"{tuple(const['shape'])}")
        if entry.role != roles[entry.name]:
            raise _fail(f"tensors[{i}].role", f"{entry.name!r} is {entry.role!r}, expected "
                                              f"{roles[entry.name]!r}")
    golden_entries = entries[len(constants):]
    for entry in golden_entries:
        if entry.role != "golden":
            raise _fail("tensors", f"{entry.name!r} is not a graph constant, so its role must "
                                   f"be 'golden', got {entry.role!r}")
    golden_backend, golden = _check_golden(m["golden"], graph, golden_entries)

    output_names = [s["name"] for s in graph["outputs"]]
    tol = m["tolerances"]
    _map(tol, "tolerances", sorted(output_names))
    tolerances = {}
    for out in output_names:
        t = _map(tol[out], f"tolerances.{out}", ("atol", "rtol"))
        tolerances[out] = Tolerance(_float(t["rtol"], f"tolerances.{out}.rtol"),
                                    _float(t["atol"], f"tolerances.{out}.atol"))

    contract = _map(m["state_contract"], "state_contract", ("pairs", "reset"))
    if not _same(contract["pairs"], graph["state"]):
        raise _fail("state_contract.pairs", "must equal the graph's state pairs")
    r = _map(contract["reset"], "state_contract.reset", _RESET_KEYS)
    gap = r["frame_gap_ms"]
    reset = ResetConditions(
        None if gap is None else _float(gap, "state_contract.reset.frame_gap_ms", positive=True),
        *(_bool(r[k], f"state_contract.reset.{k}")
          for k in ("camera_restart", "timestamp_backwards", "artifact_swap", "explicit")))

    prov = _map(m["provenance"], "provenance", ("builder", "source_digest"))
    builder = _str(prov["builder"], "provenance.builder")
    source = _str(prov["source_digest"], "provenance.source_digest", _HEX64)
    if source != graph_digest(graph):
        raise _fail("provenance.source_digest", "does not match the graph description")
    layers = _list(m["layers"], "layers")
    if not _same(layers, layers_summary(graph)):
        raise _fail("layers", "does not match the graph's normalization nodes")

    return Manifest(
        name=name, version=version, abi_version=abi_version, backends=backends,
        expires=expires, latency_ms=latency, tolerances=MappingProxyType(tolerances),
        state_pairs=MappingProxyType(dict(graph["state"])), reset=reset,
        golden_backend=golden_backend, golden=golden, builder=builder, source_digest=source,
        root_digest=root, tensors=tuple(entries), section_length=length, graph=graph,
        layers=tuple(layers), raw=m)


def make_manifest(*, name: str, version: str, graph: Mapping[str, Any],
                  entries: Sequence[TensorEntry], section_length: int, backends: Sequence[str],
                  tolerances: Mapping[str, tuple[float, float]], reset: ResetConditions,
                  latency_ms: float, golden_backend: str, golden_cases: int, builder: str,
                  expires: int | None = None, abi_version: int | None = None) -> dict[str, Any]:
    """Assemble a manifest dict; the derived fields (layers, digests, golden map, section
    length, state pairs) are computed here. Check the result with :func:`check_manifest`."""
    import abi

    graph = dict(graph)
    golden = []
    for i in range(golden_cases):
        golden.append({
            "inputs": {s["name"]: golden_tensor_name(i, "input", s["name"])
                       for s in graph["inputs"]},
            "outputs": {s["name"]: golden_tensor_name(i, "output", s["name"])
                        for s in graph["outputs"]},
        })
    return {
        "abi_version": abi.ABI_VERSION if abi_version is None else abi_version,
        "backends": list(backends),
        "expires": expires,
        "golden": {"cases": golden, "reference_backend": golden_backend},
        "graph": graph,
        "latency_ms": float(latency_ms),
        "layers": layers_summary(graph),
        "name": name,
        "provenance": {"builder": builder, "source_digest": graph_digest(graph)},
        "root_digest": root_digest(entries),
        "state_contract": {"pairs": dict(graph["state"]), "reset": reset.to_dict()},
        "tensor_section": {"alignment": ALIGNMENT, "length": section_length},
        "tensors": [e.to_dict() for e in entries],
        "tolerances": {k: {"atol": float(a), "rtol": float(r)}
                       for k, (r, a) in tolerances.items()},
        "version": version,
    }


# --- compatibility with this host ---------------------------------------------------------------


def check_compatible(manifest: Manifest, *, host_abi: int | None = None
                     ) -> list[tuple[str, str, int]]:
    """Refuse a manifest this host cannot run; return the atomic ops it uses.

    Checks the host ABI version, then that every node's op and op version is in this host's op
    table and that the node's atomic flag agrees with the table. Returns ``(node, op, version)``
    for every node whose op is atomic (the caller decides whether each is audited). Raises
    IncompatibleArtifactError.
    """
    import abi

    host = abi.ABI_VERSION if host_abi is None else host_abi
    if manifest.abi_version != host:
        raise IncompatibleArtifactError(
            f"artifact {manifest.name!r} {manifest.version} was built for host ABI version "
            f"{manifest.abi_version}; this host is version {host}")
    atomic = []
    for node in manifest.graph["nodes"]:
        try:
            opdef = get_op(node["op"], node["version"])
        except OpError as exc:
            raise IncompatibleArtifactError(
                f"node {node['name']!r}: op {node['op']} v{node['version']} is not known to this "
                f"host ({_op_versions(node['op'], exc)})", node=node["name"]) from None
        if opdef.atomic != node["atomic"]:
            raise IncompatibleArtifactError(
                f"node {node['name']!r}: op {opdef} is {'' if opdef.atomic else 'not '}atomic "
                f"in this host's op table, but the artifact says atomic={node['atomic']}",
                node=node["name"])
        if opdef.atomic:
            atomic.append((node["name"], opdef.name, opdef.version))
    return atomic


def _op_versions(op: str, exc: OpError) -> str:
    from abi.ops import known_ops

    versions = known_ops().get(op)
    return f"known versions: {versions}" if versions else "unknown op"
