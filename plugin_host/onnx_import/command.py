"""``plugin-host build --onnx``: the command-line side of the importer (options to arguments)."""

from __future__ import annotations

import argparse
import math

from ..errors import ModelFileError, UsageError
from .build import build_onnx_artifact
from .float16 import DEFAULT_UPCAST_TOLERANCE
from .free_dims import parse_dims
from .reader import EXTERNAL_DATA_OPTION

__all__ = ["build_onnx", "parse_pairs"]


def parse_pairs(items: list[str], flag: str, example: str) -> dict[str, str]:
    """``["a=b", ...]`` as a dict; UsageError naming the flag for a malformed or repeated key."""
    pairs: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise UsageError(f"{flag} {item!r}: expected {example}")
        if key in pairs:
            raise UsageError(f"{flag} {key}: given twice")
        pairs[key] = value
    return pairs


def parse_upcast_tolerance(text: str | None, upcast: bool) -> tuple[float, float]:
    """``--upcast-tolerance RTOL,ATOL`` as two finite non-negative floats (the default when
    not given); UsageError otherwise, or when it comes without ``--upcast-float16``."""
    if text is None:
        return DEFAULT_UPCAST_TOLERANCE
    if not upcast:
        raise UsageError("--upcast-tolerance goes with --upcast-float16")
    try:
        rtol, atol = (float(v) for v in text.split(","))
    except ValueError:
        rtol = atol = math.nan
    if not (math.isfinite(rtol) and math.isfinite(atol) and rtol >= 0 and atol >= 0):
        raise UsageError(f"--upcast-tolerance {text!r}: expected RTOL,ATOL, two finite "
                         f"non-negative numbers, e.g. 1e-2,1e-2")
    return rtol, atol


def build_onnx(args: argparse.Namespace, tolerance: tuple[float, float], expires,
               progress) -> int:
    upcast_tolerance = parse_upcast_tolerance(args.upcast_tolerance, args.upcast_float16)
    notes: list[str] = []
    try:
        manifest = build_onnx_artifact(
            args.onnx, args.out, name=args.name, version=args.version,
            state=parse_pairs(args.state, "--state", "IN=OUT, e.g. h=h_next"),
            layouts=parse_pairs(args.layout, "--layout", "NAME=LAYOUT, e.g. img=NCHW"),
            tolerances=tolerance, golden_cases=args.golden_cases, seed=args.seed,
            backends=args.backend or ["numpy", "onnxruntime"], latency_ms=args.latency_ms,
            expires=expires, allow_external_data=args.allow_external_data, progress=progress,
            upcast_float16=args.upcast_float16, upcast_tolerance=upcast_tolerance,
            dims=parse_dims(parse_pairs(args.dim, "--dim", "NAME=SIZE, e.g. h=128")),
            report=notes.append)
    except ModelFileError as exc:
        if exc.context.get("option") != EXTERNAL_DATA_OPTION:
            raise
        # the reader names the keyword argument; here the switch is the flag
        raise ModelFileError(f"{exc.context['refused']} unless --allow-external-data is given "
                             f"(then it is read from the model's folder only)") from None
    weights = sum(e.nbytes for e in manifest.tensors if e.role != "golden")
    ops = sorted({n["op"] for n in manifest.graph["nodes"]})
    print(f"built {args.out}: {manifest.name} {manifest.version} (unsigned) from {args.onnx}, "
          f"{len(manifest.graph['nodes'])} nodes ({', '.join(ops)}), "
          f"{weights / 1e6:.1f} MB weights and state, {len(manifest.golden)} golden case(s) "
          f"from {manifest.golden_backend}, tolerance rtol {tolerance[0]:g} atol "
          f"{tolerance[1]:g}, latency {manifest.latency_ms:g} ms")
    for note in notes:
        print(note)
    return 0
