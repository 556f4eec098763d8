"""``plugin-host build --onnx``: the command-line side of the importer (options to arguments)."""

from __future__ import annotations

import argparse

from ..errors import ModelFileError, UsageError
from .build import build_onnx_artifact
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


def build_onnx(args: argparse.Namespace, tolerance: tuple[float, float], expires,
               progress) -> int:
    try:
        manifest = build_onnx_artifact(
            args.onnx, args.out, name=args.name, version=args.version,
            state=parse_pairs(args.state, "--state", "IN=OUT, e.g. h=h_next"),
            layouts=parse_pairs(args.layout, "--layout", "NAME=LAYOUT, e.g. img=NCHW"),
            tolerances=tolerance, golden_cases=args.golden_cases, seed=args.seed,
            backends=args.backend or ["numpy", "onnxruntime"], latency_ms=args.latency_ms,
            expires=expires, allow_external_data=args.allow_external_data, progress=progress)
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
    return 0
