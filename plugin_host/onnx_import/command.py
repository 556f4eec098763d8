"""``plugin-host build --onnx``: the command-line side of the importer (options to arguments)."""

from __future__ import annotations

import argparse
import math

from ..errors import ModelFileError, UsageError
from .build import build_onnx_artifact
from .float_width import DEFAULT_DOWNCAST_TOLERANCE
from .fixed_inputs import parse_input_values
from .free_dims import parse_dims, parse_golden_dims, parse_golden_ranges
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


def parse_upcast_tolerance(text: str | None, upcast: bool) -> tuple[float, float] | None:
    """``--upcast-tolerance RTOL,ATOL`` as two finite non-negative floats (None when not
    given: each upcast's own default); UsageError otherwise, or when it comes without
    ``--upcast-float16`` or ``--upcast-bfloat16``."""
    return _rewrite_tolerance(text, upcast, "--upcast-tolerance",
                              "--upcast-float16 or --upcast-bfloat16", None, "1e-2,1e-2")


def parse_downcast_tolerance(text: str | None, downcast: bool) -> tuple[float, float]:
    """``--downcast-tolerance RTOL,ATOL``, as :func:`parse_upcast_tolerance` for
    ``--downcast-float64``."""
    return _rewrite_tolerance(text, downcast, "--downcast-tolerance", "--downcast-float64",
                              DEFAULT_DOWNCAST_TOLERANCE, "1e-4,1e-5")


def _rewrite_tolerance(text: str | None, given: bool, flag: str, needs: str,
                       default: tuple[float, float] | None, example: str
                       ) -> tuple[float, float] | None:
    if text is None:
        return default
    if not given:
        raise UsageError(f"{flag} goes with {needs}")
    try:
        rtol, atol = (float(v) for v in text.split(","))
    except ValueError:
        rtol = atol = math.nan
    if not (math.isfinite(rtol) and math.isfinite(atol) and rtol >= 0 and atol >= 0):
        raise UsageError(f"{flag} {text!r}: expected RTOL,ATOL, two finite non-negative "
                         f"numbers, e.g. {example}")
    return rtol, atol


def build_onnx(args: argparse.Namespace, tolerance: tuple[float, float] | None, expires,
               progress) -> int:
    """``plugin-host build --onnx``: ``tolerance`` None where no option gave one (the
    import's default, which widens where the model's own rounding needs it)."""
    upcast_tolerance = parse_upcast_tolerance(args.upcast_tolerance,
                                              args.upcast_float16 or args.upcast_bfloat16)
    downcast_tolerance = parse_downcast_tolerance(args.downcast_tolerance,
                                                  args.downcast_float64)
    notes: list[str] = []
    try:
        manifest = build_onnx_artifact(
            args.onnx, args.out, name=args.name, version=args.version,
            state=parse_pairs(args.state, "--state", "IN=OUT, e.g. h=h_next"),
            layouts=parse_pairs(args.layout, "--layout", "NAME=LAYOUT, e.g. img=NCHW"),
            tolerances=tolerance, golden_cases=args.golden_cases, seed=args.seed,
            backends=args.backend or ["numpy", "onnxruntime"], latency_ms=args.latency_ms,
            expires=expires, allow_external_data=args.allow_external_data, progress=progress,
            upcast_float16=args.upcast_float16, upcast_bfloat16=args.upcast_bfloat16,
            onnxruntime_optimized=args.onnxruntime_optimized,
            upcast_tolerance=upcast_tolerance,
            downcast_float64=args.downcast_float64, downcast_tolerance=downcast_tolerance,
            dims=parse_dims(parse_pairs(args.dim, "--dim", "NAME=SIZE, e.g. h=128")),
            input_values=parse_input_values(parse_pairs(
                args.input_value, "--input-value", "NAME=VALUE[,VALUE...], e.g. sr=16000")),
            golden_dims=parse_golden_dims(parse_pairs(args.golden_dim, "--golden-dim",
                                                      "NAME=SIZE[,SIZE...], e.g. h=64,128")),
            golden_ranges=parse_golden_ranges(parse_pairs(args.golden_range, "--golden-range",
                                                          "NAME=LOW,HIGH, e.g. lengths=1,8")),
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
          f"from {manifest.golden_backend}, {_tolerances(manifest)}, latency "
          f"{manifest.latency_ms:g} ms")
    for note in notes:
        print(note)
    return 0


def _tolerances(manifest) -> str:
    """The summary's tolerance: the one every output has, or each output's."""
    pairs = {(t.rtol, t.atol) for t in manifest.tolerances.values()}
    if len(pairs) == 1:
        rtol, atol = pairs.pop()
        return f"tolerance rtol {rtol:g} atol {atol:g}"
    return "tolerances " + ", ".join(f"{name!r} rtol {t.rtol:g} atol {t.atol:g}"
                                     for name, t in manifest.tolerances.items())
