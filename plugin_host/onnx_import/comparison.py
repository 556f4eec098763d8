"""The build's comparison of the imported graph with the reference, and the tolerance it holds.

The imported graph runs the golden cases on the numpy backend and must reproduce onnxruntime's
outputs within each output's tolerance (:func:`held_to_reference`). Some models round coarser
than the default tolerance allows: where values reach thousands, an element near zero differs
between any two float32 summation orders by more than 1e-5 (torchvision's FCN-ResNet50, RAFT
and Inception v3 with random weights). When no tolerance was given and an output differs
beyond the default, onnxruntime runs the golden cases again with its graph optimizations on;
where its two runs differ too, by no more than rounding does, that output's atol widens to
:data:`NOISE_MARGIN` times their largest difference. A quantized model's runs can differ by
more, whole steps of a rounding to integers grown through the layers after it: there the
difference counts as the model's own where the codes of onnxruntime's two runs first part by
one step at a few values (:func:`.quantized_rounding.trace`). Otherwise the refusal says what
was measured, and what else can explain it (onnxruntime's saturating integer kernels,
:mod:`.saturation`; a quantized model's rounding to steps, :mod:`.quantized_rounding`).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from abi.artifact import Tolerance

from ..errors import ModelImportError
from .quantized_rounding import Parting

__all__ = ["NOISE_MARGIN", "NOISE_TIMEOUT_S", "NOISE_MAX_RELATIVE", "held_to_reference"]

#: Where the default tolerance is too tight for a model's own float32 rounding, an output's
#: atol widens to this many times the largest difference between onnxruntime's runs of the
#: model with its graph optimizations off and on: the imported graph and the reference round
#: independently, each about as far from the exact value as those two runs are apart, and the
#: largest of many elements' differences spreads (measured on stacks of 3x3 convolutions: the
#: numpy backend's largest difference 0.8 to 1.7 times onnxruntime's own).
NOISE_MARGIN = 3.0
#: The optimized run may take this long beyond four times the reference run (a hostile model
#: may keep onnxruntime's optimizers busy): past it, the refusal stands without the measure.
NOISE_TIMEOUT_S = 30.0
#: Only a difference of at most this fraction of an output's largest value is float32
#: rounding (it rounds by 6e-8 of a value per operation; FCN-ResNet50, Inception v3, RAFT and
#: conv stacks differed by 5e-7 to 2e-6 of their largest value): past it, the optimized run
#: computes something else, and the default tolerance stands, unless the runs part at a
#: rounding to integer steps (:class:`.quantized_rounding.Parting`).
NOISE_MAX_RELATIVE = 1e-4

Outputs = Sequence[Mapping[str, np.ndarray]]  # one mapping of output name -> value per case


def held_to_reference(outputs, got: Outputs, reference: Outputs,
                      table: Mapping[str, tuple[float, float]], *, given_tolerance: bool,
                      rerun: Callable[[float], Outputs], reference_s: float,
                      explain_saturation: Callable[[str], str | None],
                      explain_refusal: Callable[[], str], say: Callable[[str], None],
                      tell: Callable[[str], None],
                      trace: Callable[[float], Sequence[Parting]] | None = None
                      ) -> dict[str, tuple[float, float]]:
    """The tolerance table the artifact is built with, once the imported graph's outputs
    ``got`` are within it of the ``reference``'s in every golden case; else ModelImportError.

    ``table`` holds each of ``outputs``' (rtol, atol). Where an output fails it:
    ``explain_saturation(message)`` may give the whole refusal instead; else onnxruntime's
    optimized run (``rerun(timeout)``, given :data:`NOISE_TIMEOUT_S` beyond four times the
    reference's ``reference_s``) measures the model's own rounding, and unless
    ``given_tolerance`` the failing outputs' atol widens to it (each told to ``tell``) when
    that brings every output within. Where that noise is more than float32 rounding, it
    widens an atol only where ``trace(timeout)`` (a model that rounds to integer steps) finds
    onnxruntime's runs parting at such a rounding, one step apart, in every case they part
    (:attr:`.Parting.flips`). A refusal ends with what was measured and
    ``explain_refusal()``."""
    failures = _mismatches(outputs, got, reference, table)
    if not failures:
        return dict(table)
    saturated = explain_saturation(next(iter(failures.values())))
    if saturated is not None:
        raise ModelImportError(saturated)
    timeout = NOISE_TIMEOUT_S + 4 * reference_s
    noise = _rounding_noise(rerun, reference, list(failures), say, timeout=timeout)
    partings = None
    if trace is not None and not given_tolerance and any(
            _beyond_rounding(noise[n], n, reference) is not None for n in failures if n in noise):
        partings = _partings(trace, say, timeout)
    stepped = bool(partings) and all(p.flips for p in partings)
    widened = {} if given_tolerance else _widened(table, failures, noise, reference, stepped)
    if widened:
        failures = _mismatches(outputs, got, reference, {**table, **widened})
        if not failures:
            for output, (_, atol) in widened.items():
                steps = partings if _beyond_rounding(noise[output], output, reference) else None
                tell(_widened_line(output, table[output][1], atol, noise[output], got,
                                   reference, steps))
            return {**table, **widened}
    output, message = next(iter(failures.items()))
    raise ModelImportError(message + _noise_note(output, noise, reference, given_tolerance,
                                                 widened, partings) + explain_refusal())


def _mismatches(outputs, got: Outputs, reference: Outputs,
                table: Mapping[str, tuple[float, float]]) -> dict[str, str]:
    """Each output (in the graph's order) that differs from the reference beyond its
    tolerance in some golden case: the refusal's message for the first such case. A shape or
    dtype that is not the reference's is refused here and now."""
    failures = {}
    for spec in outputs:
        for case, (mine, want) in enumerate(zip(got, reference)):
            a, b = mine[spec.name], want[spec.name]
            if a.shape != b.shape or a.dtype != b.dtype:
                raise ModelImportError(f"output {spec.name!r}: the imported graph gives "
                                       f"{a.dtype} {a.shape}, onnxruntime {b.dtype} {b.shape}")
            rtol, atol = table[spec.name]
            diff, bad = Tolerance(rtol, atol).mismatches(a, b)
            if bad.any():
                failures[spec.name] = (
                    f"golden case {case}: output {spec.name!r} of the imported graph differs "
                    f"from onnxruntime in {int(bad.sum())} of {bad.size} element(s) (max "
                    f"|diff| {float(diff.max(initial=0.0)):.3g}; rtol {rtol:g}, atol "
                    f"{atol:g}); widen --rtol/--atol if that is expected, else this is an "
                    f"import bug")
                break
    return failures


def _largest_difference(name: str, got: Outputs, reference: Outputs) -> float:
    """The largest |difference| of float output ``name`` over the golden cases: inf where one
    side is a nan or an infinity the other is not."""
    return max((float(Tolerance(0.0, 0.0).mismatches(a[name], b[name])[0].max(initial=0.0))
                for a, b in zip(got, reference)), default=0.0)


def _rounding_noise(rerun: Callable[[float], Outputs], reference: Outputs,
                    names: Sequence[str], say: Callable[[str], None], timeout: float
                    ) -> dict[str, float]:
    """For each float output among ``names``: how far onnxruntime's run of the golden cases
    with its graph optimizations on (``rerun(timeout)``) is from the reference run (off),
    where finite and not 0. Nothing where onnxruntime cannot run the model so, or not within
    ``timeout`` seconds (its optimizers are native code too: the run is in the reference
    process, as the reference's, and stopped there)."""
    floats = [n for n in names if reference and reference[0][n].dtype.kind == "f"]
    if not floats:
        return {}
    say("measuring onnxruntime's own rounding on the model (graph optimizations on)")
    try:
        optimized = rerun(timeout)
    except ModelImportError:
        return {}
    noise = {n: _largest_difference(n, optimized, reference) for n in floats}
    return {n: v for n, v in noise.items() if 0.0 < v < float("inf")}


def _partings(trace: Callable[[float], Sequence[Parting]], say: Callable[[str], None],
              timeout: float) -> list[Parting] | None:
    """Where onnxruntime's runs part at the model's roundings to integer steps in each golden
    case (``trace(timeout)``); None where onnxruntime cannot run the traced model so."""
    say("tracing where onnxruntime's runs part at the model's roundings to integer steps")
    try:
        return list(trace(timeout))
    except ModelImportError:
        return None


def _widened(table: Mapping[str, tuple[float, float]], failures: Mapping[str, str],
             noise: Mapping[str, float], reference: Outputs,
             stepped: bool = False) -> dict[str, tuple[float, float]]:
    """The default tolerance of each failing output whose rounding noise times
    :data:`NOISE_MARGIN` is past its atol, that atol widened to it (rounded up to two
    digits); not where the noise is more than float32 rounding (:func:`_beyond_rounding`),
    unless the runs ``stepped`` apart at a rounding to integer steps."""
    out = {}
    for name in failures:
        rtol, atol = table[name]
        if name in noise and NOISE_MARGIN * noise[name] > atol \
                and (stepped or _beyond_rounding(noise[name], name, reference) is None):
            out[name] = (rtol, _two_digits_up(NOISE_MARGIN * noise[name]))
    return out


def _beyond_rounding(noise: float, name: str, reference: Outputs) -> float | None:
    """The largest finite |value| of output ``name`` in the reference where ``noise`` is
    past :data:`NOISE_MAX_RELATIVE` of it (onnxruntime's optimized run then computes
    something else, not the same in another order), else None."""
    scale = max((float(np.abs(case[name][np.isfinite(case[name])]).max(initial=0.0))
                 for case in reference), default=0.0)
    return scale if noise > NOISE_MAX_RELATIVE * scale else None


def _two_digits_up(value: float) -> float:
    """``value`` > 0 rounded up to two significant digits (1.0304e-4 -> 1.1e-4)."""
    unit = 10.0 ** (math.floor(math.log10(value)) - 1)
    return float(f"{math.ceil(round(value / unit, 6)) * unit:.2g}")  # 3e-6 / 1e-7 is 30.0...04


def _widened_line(name: str, old: float, new: float, noise: float, got: Outputs,
                  reference: Outputs, partings: Sequence[Parting] | None = None) -> str:
    """The summary's line for an output widened; ``partings`` where the noise is the
    model's rounding to integer steps."""
    own = "float32 rounding" if partings is None else "rounding to integer steps"
    parted = "" if partings is None else (
        f", after they first part one step apart at a rounding in {len(partings)} golden "
        f"case(s) ({partings[0]})")
    return (f"output {name!r}: atol {old:g} widened to {new:g}, {NOISE_MARGIN:g} times the "
            f"model's own {own} there (onnxruntime's runs with graph optimizations off and "
            f"on differ by up to {noise:.3g}{parted}; the imported graph is within "
            f"{_largest_difference(name, got, reference):.3g} of the first); --tolerance, "
            f"--rtol or --atol keep a tolerance as given")


def _noise_note(output: str, noise: Mapping[str, float], reference: Outputs,
                given_tolerance: bool, widened: Mapping[str, Any],
                partings: Sequence[Parting] | None = None) -> str:
    """What a refusal adds about onnxruntime's own rounding on the output that failed (and,
    where they were traced, where its runs part at the model's roundings to steps)."""
    if output not in noise:
        return ""
    scale = _beyond_rounding(noise[output], output, reference)
    if given_tolerance:
        kept = " (the tolerance as given is kept)"
    elif output in widened:
        kept = f" (the default atol widened to {NOISE_MARGIN:g} times that)"
    elif scale is not None:
        kept = (f", more than float32 rounding of values up to {scale:.3g}"
                f"{_steps_note(partings)} (the default tolerance is kept)")
    else:
        kept = ""
    return (f"; onnxruntime's own runs of the model with graph optimizations off and on "
            f"differ by up to {noise[output]:.3g} on this output{kept}")


def _steps_note(partings: Sequence[Parting] | None) -> str:
    """Why the runs' difference is not a rounding to steps either, where they were traced."""
    if partings is None:
        return ""
    if not partings:
        return ", and their codes at the model's roundings to integer steps are the same"
    worst = next((p for p in partings if not p.flips), partings[0])
    return f", and not where they part at a rounding to integer steps either ({worst})"
