"""The build's comparison of the imported graph with the reference, and the tolerance it holds.

The imported graph runs the golden cases on the numpy backend and must reproduce onnxruntime's
outputs within each output's tolerance (:func:`held_to_reference`). Some models round coarser
than the default tolerance allows: where values reach thousands, an element near zero differs
between any two float32 summation orders by more than 1e-5 (torchvision's FCN-ResNet50, RAFT
and Inception v3 with random weights). When no tolerance was given and an output differs
beyond the default, onnxruntime runs the golden cases again with its graph optimizations on;
where its two runs differ too, by no more than rounding does, that output's atol widens to
:data:`NOISE_MARGIN` times their largest difference. A quantized model's runs can differ by
more, whole steps of a rounding to integers grown through the layers after it: for a model
with such roundings, onnxruntime's two runs take more inputs than the golden cases and are
traced (:func:`.quantized_rounding.trace`), and a difference past float32 rounding counts as
the model's own where their codes first part by one step at a few values. Where that does
not settle a float model's output, the model is evaluated in float64
(:mod:`.float64_evaluation`): an output the imported graph computes at least as close to
those values as onnxruntime does, onnxruntime within float32 rounding of them, has its atol
widened to :data:`NOISE_MARGIN` times onnxruntime's distance from them. An integer or bool
output takes no tolerance: it must equal the reference's. Otherwise the refusal says what
was measured, and what else can explain it (onnxruntime's saturating integer kernels,
:mod:`.saturation`; a quantized model's rounding to steps, :mod:`.quantized_rounding`).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import numpy as np

from abi.artifact import Tolerance

from ..errors import ModelImportError
from .float64_evaluation import SLOWDOWN, TIMEOUT_S as FLOAT64_TIMEOUT_S, Float64Distances
from .quantized_rounding import Parting, Traced

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
                      explain_refusal: Callable[[bool], str], say: Callable[[str], None],
                      tell: Callable[[str], None],
                      trace: Callable[[float], Traced] | None = None,
                      evaluate: Callable[[float], Outputs] | None = None
                      ) -> dict[str, tuple[float, float]]:
    """The tolerance table the artifact is built with, once the imported graph's outputs
    ``got`` are within it of the ``reference``'s in every golden case; else ModelImportError.

    ``table`` holds each of ``outputs``' (rtol, atol). Where an output fails it:
    ``explain_saturation(message)`` may give the whole refusal instead; else onnxruntime's
    optimized run (``rerun(timeout)``, given :data:`NOISE_TIMEOUT_S` beyond four times the
    reference's ``reference_s``) measures the model's own rounding, and unless
    ``given_tolerance`` the failing outputs' atol widens to it (each told to ``tell``) when
    that brings every output within. For a model that rounds to integer steps,
    ``trace(timeout)`` makes that measure instead (both runs, on more inputs, their roundings
    traced), and a noise past float32 rounding widens an atol only where the runs part at
    such a rounding, one step apart, on every input where they part
    (:attr:`.Parting.flips`). Where outputs still fail (and the model is not traced),
    ``evaluate(timeout)`` gives the model's outputs in float64
    (:func:`.float64_evaluation.evaluate_float64`), and unless ``given_tolerance`` a failing
    output the imported graph computes at least as close to them as the reference, the
    reference within float32 rounding of them, has its atol widened to :data:`NOISE_MARGIN`
    times the reference's distance. An integer output is held to the reference exactly;
    where a traced model's fails, the refusal says how far onnxruntime's own runs part on
    it. A refusal ends with what was measured and ``explain_refusal(integer)`` (whether the
    output that failed is an integer one)."""
    failures = _mismatches(outputs, got, reference, table)
    if not failures:
        return dict(table)
    saturated = explain_saturation(next(iter(failures.values())))
    if saturated is not None:
        raise ModelImportError(saturated)
    timeout = NOISE_TIMEOUT_S + 4 * reference_s
    if trace is None:
        measure = _Measure(_rounding_noise(rerun, reference, list(failures), say,
                                           timeout=timeout), None, len(reference))
    else:
        measure = _traced(trace, reference, list(failures), say, timeout)
    widened = {} if given_tolerance else _widened(table, failures, measure, reference)
    if widened:
        failures = _mismatches(outputs, got, reference, {**table, **widened})
    exact, closer = Float64Distances({}, {}), {}
    if failures and evaluate is not None and trace is None:
        exact = _float64_distances(evaluate, got, reference, list(failures), say,
                                   FLOAT64_TIMEOUT_S + SLOWDOWN * reference_s)
        closer = {} if given_tolerance else _widened_exactly(table, failures, exact, reference)
        # where the optimized run's measure widened further, its line stands
        closer = {n: t for n, t in closer.items() if t[1] >= widened.get(n, (0, 0))[1]}
        if closer:
            widened = {**widened, **closer}
            failures = _mismatches(outputs, got, reference, {**table, **widened})
    if not failures:
        for output, (_, atol) in widened.items():
            tell(_widened_line(output, table[output][1], atol, measure,
                               exact if output in closer else None, got, reference))
        return {**table, **widened}
    output, message = next(iter(failures.items()))
    raise ModelImportError(message + _noise_note(output, measure, reference, given_tolerance,
                                                 widened)
                           + _float64_note(output, exact, reference, given_tolerance
                                           and output not in measure.noise)
                           + explain_refusal(reference[0][output].dtype.kind != "f"))


class _Measure(NamedTuple):
    """onnxruntime's own rounding: how far its runs with graph optimizations off and on are
    apart on each failing float output (``noise``, where finite and not 0), over how many
    ``inputs`` (the golden cases first), and where they part at the model's roundings to
    integer steps (``partings``; None where not traced); with them, where they part on an
    integer output (``codes``), which no tolerance covers."""

    noise: dict[str, float]
    partings: list[Parting] | None
    inputs: int
    #: each failing integer output of a traced model: the runs' largest difference, at how
    #: many elements, of how many (over all the inputs)
    codes: Mapping[str, tuple[float, int, int]] = {}

    @property
    def stepped(self) -> bool:
        """Whether the runs part at a rounding to neighbouring steps wherever they part."""
        return bool(self.partings) and all(p.flips for p in self.partings)

    def over(self, reference: Outputs) -> str:
        """The words " on N inputs (the golden cases and M more drawn alike)" where more
        inputs than the golden cases were measured, else nothing."""
        golden, more = len(reference), self.inputs - len(reference)
        return "" if more <= 0 else (f" on {self.inputs} inputs (the {golden} golden "
                                     f"case{'s' if golden != 1 else ''} and {more} more drawn "
                                     f"alike)")


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
            worst, bad = Tolerance(rtol, atol).compare(a, b)
            if bad:
                why = (f"; rtol {rtol:g}, atol {atol:g}); widen --rtol/--atol if that is "
                       f"expected, else this is an import bug" if b.dtype.kind == "f" else
                       f"); it is {b.dtype}, which must equal the reference's exactly: no "
                       f"tolerance applies to it")
                failures[spec.name] = (
                    f"golden case {case}: output {spec.name!r} of the imported graph differs "
                    f"from onnxruntime in {bad} of {b.size} element(s) (max "
                    f"|diff| {worst:.3g}{why}")
                break
    return failures


def _largest_difference(name: str, got: Outputs, reference: Outputs) -> float:
    """The largest |difference| of float output ``name`` over the golden cases: inf where one
    side is a nan or an infinity the other is not."""
    return max((Tolerance(0.0, 0.0).compare(a[name], b[name])[0]
                for a, b in zip(got, reference)), default=0.0)


def _rounding_noise(rerun: Callable[[float], Outputs], reference: Outputs,
                    names: Sequence[str], say: Callable[[str], None], timeout: float
                    ) -> dict[str, float]:
    """For each float output among ``names``: how far onnxruntime's run of the golden cases
    with its graph optimizations on (``rerun(timeout)``) is from the reference run (off),
    where finite and not 0. Nothing where onnxruntime cannot run the model so, or not within
    ``timeout`` seconds (its optimizers are native code too: the run is in the reference
    process, as the reference's, and stopped there)."""
    floats = _floats(names, reference)
    if not floats:
        return {}
    say("measuring onnxruntime's own rounding on the model (graph optimizations on)")
    try:
        optimized = rerun(timeout)
    except ModelImportError:
        return {}
    noise = {n: _largest_difference(n, optimized, reference) for n in floats}
    return {n: v for n, v in noise.items() if 0.0 < v < float("inf")}


def _traced(trace: Callable[[float], Traced], reference: Outputs, names: Sequence[str],
            say: Callable[[str], None], timeout: float) -> _Measure:
    """:class:`_Measure` of ``names``' float and integer outputs from ``trace(timeout)``;
    nothing measured where onnxruntime cannot run the traced model."""
    floats = _floats(names, reference)
    integers = [n for n in names if n not in floats]
    say("measuring onnxruntime's own rounding on the model (graph optimizations off and on, "
        "its roundings to integer steps traced)")
    try:
        traced = trace(timeout)
    except ModelImportError:
        return _Measure({}, None, len(reference))
    noise = {n: _largest_difference(n, traced.on, traced.off) for n in floats}
    codes = {}
    for name in integers:
        parted = [Tolerance(0.0, 0.0).compare(a[name], b[name])
                  for a, b in zip(traced.on, traced.off)]
        apart = sum(bad for _, bad in parted)
        if apart:
            codes[name] = (max(worst for worst, _ in parted), apart,
                           sum(b[name].size for b in traced.off))
    return _Measure({n: v for n, v in noise.items() if 0.0 < v < float("inf")},
                    list(traced.partings), len(traced.off), codes)


def _floats(names: Sequence[str], reference: Outputs) -> list[str]:
    return [n for n in names if reference and reference[0][n].dtype.kind == "f"]


def _widened(table: Mapping[str, tuple[float, float]], failures: Mapping[str, str],
             measure: _Measure, reference: Outputs) -> dict[str, tuple[float, float]]:
    """The default tolerance of each failing output whose rounding noise times
    :data:`NOISE_MARGIN` is past its atol, that atol widened to it (rounded up to two
    digits); not where the noise is more than float32 rounding (:func:`_beyond_rounding`),
    unless the runs stepped apart at a rounding to integer steps (:attr:`_Measure.stepped`)."""
    out, noise = {}, measure.noise
    for name in failures:
        rtol, atol = table[name]
        if name in noise and NOISE_MARGIN * noise[name] > atol \
                and (measure.stepped or _beyond_rounding(noise[name], name, reference) is None):
            out[name] = (rtol, _two_digits_up(NOISE_MARGIN * noise[name]))
    return out


def _beyond_rounding(noise: float, name: str, reference: Outputs) -> float | None:
    """The largest finite |value| of output ``name`` in the reference where ``noise`` is
    past :data:`NOISE_MAX_RELATIVE` of it (onnxruntime's optimized run then computes
    something else, not the same in another order), else None."""
    scale = max((float(np.abs(case[name][np.isfinite(case[name])]).max(initial=0.0))
                 for case in reference), default=0.0)
    return scale if noise > NOISE_MAX_RELATIVE * scale else None


def _float64_distances(evaluate: Callable[[float], Outputs], got: Outputs,
                       reference: Outputs, names: Sequence[str], say: Callable[[str], None],
                       timeout: float) -> Float64Distances:
    """:class:`.float64_evaluation.Float64Distances` of ``names``' float outputs, from
    ``evaluate(timeout)``; none, and why, where there are no float outputs or the evaluation
    fails."""
    floats = _floats(names, reference)
    if not floats:
        return Float64Distances({}, {})
    say(f"evaluating the model in float64 with onnx's reference evaluator (at most "
        f"{timeout:.0f} s)")
    try:
        exact = evaluate(timeout)
    except ModelImportError as exc:
        return Float64Distances({}, {}, str(exc))
    return Float64Distances({n: _largest_difference(n, reference, exact) for n in floats},
                            {n: _largest_difference(n, got, exact) for n in floats})


def _widened_exactly(table: Mapping[str, tuple[float, float]], failures: Mapping[str, str],
                     exact: Float64Distances, reference: Outputs
                     ) -> dict[str, tuple[float, float]]:
    """The default tolerance of each failing output that the imported graph computes at
    least as close to the values in float64 as the reference does, the reference within
    float32 rounding of them (:func:`_beyond_rounding`), that atol widened to
    :data:`NOISE_MARGIN` times the reference's distance (rounded up to two digits)."""
    out = {}
    for name in failures:
        rtol, atol = table[name]
        far, near = exact.reference.get(name, 0.0), exact.imported.get(name, math.inf)
        if near <= far < math.inf and NOISE_MARGIN * far > atol \
                and _beyond_rounding(far, name, reference) is None:
            out[name] = (rtol, _two_digits_up(NOISE_MARGIN * far))
    return out


def _float64_note(output: str, exact: Float64Distances, reference: Outputs,
                  given_tolerance: bool) -> str:
    """What a refusal adds about the model's values in float64 on the output that failed,
    and why that widened nothing where it did not (``given_tolerance``: the tolerance was
    given, and the note on onnxruntime's two runs did not say so)."""
    if output in exact.reference:
        far, near = exact.reference[output], exact.imported[output]
        scale = _beyond_rounding(far, output, reference)
        why = (" (the tolerance as given is kept)" if given_tolerance else
               " (the imported graph is the further from them)" if near > far else
               f" (more than float32 rounding of values up to {scale:.3g}: the default "
               f"tolerance is kept)" if scale is not None else "")
        return (f"; evaluated in float64 by onnx's reference evaluator, the model's values are "
                f"within {far:.3g} of onnxruntime's and {near:.3g} of the imported graph's on "
                f"this output{why}")
    if exact.why:
        return f"; its evaluation in float64 by onnx's reference evaluator failed: {exact.why}"
    return ""


def _two_digits_up(value: float) -> float:
    """``value`` > 0 rounded up to two significant digits (1.0304e-4 -> 1.1e-4)."""
    unit = 10.0 ** (math.floor(math.log10(value)) - 1)
    return float(f"{math.ceil(round(value / unit, 6)) * unit:.2g}")  # 3e-6 / 1e-7 is 30.0...04


def _widened_line(name: str, old: float, new: float, measure: _Measure,
                  exact: Float64Distances | None, got: Outputs, reference: Outputs) -> str:
    """The summary's line for an output widened: to the model's rounding to integer steps
    where its noise is past float32 rounding; to onnxruntime's distance from the values in
    float64 where that set it (``exact`` given)."""
    if exact is not None:
        return (f"output {name!r}: atol {old:g} widened to {new:g}, {NOISE_MARGIN:g} times "
                f"onnxruntime's own float32 rounding there (evaluated in float64 by onnx's "
                f"reference evaluator, the model's values are within "
                f"{exact.reference[name]:.3g} of onnxruntime's and "
                f"{exact.imported[name]:.3g} of the imported graph's); --tolerance, --rtol or "
                f"--atol keep a tolerance as given")
    noise = measure.noise[name]
    steps = _beyond_rounding(noise, name, reference) is not None
    own = "rounding to integer steps" if steps else "float32 rounding"
    parted = (f", after they first part one step apart at a rounding on "
              f"{len(measure.partings)} of the {measure.inputs} inputs "
              f"({measure.partings[0]})") if steps else ""
    return (f"output {name!r}: atol {old:g} widened to {new:g}, {NOISE_MARGIN:g} times the "
            f"model's own {own} there (onnxruntime's runs with graph optimizations off and "
            f"on differ by up to {noise:.3g}{measure.over(reference)}{parted}; the imported "
            f"graph is within {_largest_difference(name, got, reference):.3g} of the first); "
            f"--tolerance, --rtol or --atol keep a tolerance as given")


def _noise_note(output: str, measure: _Measure, reference: Outputs, given_tolerance: bool,
                widened: Mapping[str, Any]) -> str:
    """What a refusal adds about onnxruntime's own rounding on the output that failed (and,
    where they were traced, where its runs part at the model's roundings to steps)."""
    noise = measure.noise
    if output in measure.codes:
        largest, apart, size = measure.codes[output]
        return (f"; onnxruntime's own runs of the model with graph optimizations off and on "
                f"differ on this output too, by up to {largest:g} at {apart:,} of {size:,} "
                f"elements{measure.over(reference)}")
    if output not in noise:
        return ""
    scale = _beyond_rounding(noise[output], output, reference)
    if given_tolerance:
        kept = " (the tolerance as given is kept)"
    elif output in widened:
        kept = f" (the default atol widened to {NOISE_MARGIN:g} times that)"
    elif scale is not None:
        kept = (f", more than float32 rounding of values up to {scale:.3g}"
                f"{_steps_note(measure.partings)} (the default tolerance is kept)")
    else:
        kept = ""
    return (f"; onnxruntime's own runs of the model with graph optimizations off and on "
            f"differ by up to {noise[output]:.3g}{measure.over(reference)} on this output"
            f"{kept}")


def _steps_note(partings: Sequence[Parting] | None) -> str:
    """Why the runs' difference is not a rounding to steps either, where they were traced."""
    if partings is None:
        return ""
    if not partings:
        return ", and their codes at the model's roundings to integer steps are the same"
    worst = next((p for p in partings if not p.flips), partings[0])
    return f", and not where they part at a rounding to integer steps either ({worst})"
