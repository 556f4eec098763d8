"""Acceptance on the target backend: golden outputs within tolerance, latency within budget.

:func:`run_acceptance` takes a running :class:`~plugin_host.sandbox.SandboxedExecutor` (the
artifact already verified, its worker started on the backend under test) and

1. runs every golden case through the worker and compares each output with the reference
   within its declared tolerance (the rule of ``VerifiedArtifact.compare_golden``; exact for
   integer outputs), keeping the largest error per output;
2. times ``runs`` calls (after ``warmup`` untimed ones), cycling through the golden inputs:
   each sample is the host's round trip (ABI checks, IPC, the worker's run, outputs checked),
   which is what the daemon pays per frame;
3. judges the latency: p99 must be within the artifact's declared worst case (``latency_ms``).
   The maximum is reported and flagged when over the budget but does not fail the run: on a
   time-shared machine one sample can be a scheduling accident, and the daemon enforces the
   budget per frame anyway.

The recurrent state is reset afterwards (reason ``"acceptance"``). :func:`record_body` turns
the result into the signed record's content (``acceptance_record``); :func:`accept_artifact`
does everything for one artifact file (verify, run in a sandbox worker, write record and
report).
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .. import __version__
from ..errors import AcceptanceFailedError, GoldenMismatchError
from ..stop_signals import check_stop

__all__ = ["DEFAULT_RUNS", "OutputResult", "AcceptanceResult", "run_acceptance",
           "record_body", "accept_artifact", "default_warmup"]

DEFAULT_RUNS = 200
Progress = Callable[[str], None]


def default_warmup(runs: int) -> int:
    """Untimed calls before the timed ones: a tenth of the runs, at least 5, at most 50."""
    return min(50, max(5, runs // 10))


@dataclass(frozen=True)
class OutputResult:
    """One output over every golden case: the largest |actual - reference|, how many elements
    were outside the tolerance (of how many), and the case with the largest error."""

    name: str
    passed: bool
    max_abs_error: float
    mismatches: int
    elements: int
    rtol: float
    atol: float
    worst_case: int


@dataclass(frozen=True)
class AcceptanceResult:
    name: str
    version: str
    root_digest: str
    manifest_sha256: str
    backend: str
    golden_cases: int
    outputs: tuple[OutputResult, ...]
    samples_us: tuple[int, ...]
    warmup: int
    budget_ms: float
    sandbox: tuple[str, ...]
    time: int
    first_mismatch: str = ""
    #: per golden case, its inputs' shapes as one label (``"x (1, 3, 16, 16)"``); the timed
    #: calls cycle through the cases, call n (warm-up included) taking case n % cases
    case_shapes: tuple[str, ...] = ()

    # -- latency statistics (ms) ------------------------------------------------------------------

    def _q(self, q: float) -> float:
        return float(np.percentile(np.asarray(self.samples_us, dtype=np.float64), q)) / 1000

    @property
    def runs(self) -> int:
        return len(self.samples_us)

    @property
    def p50_ms(self) -> float:
        return self._q(50)

    @property
    def p99_ms(self) -> float:
        return self._q(99)

    @property
    def max_ms(self) -> float:
        return max(self.samples_us) / 1000

    @property
    def min_ms(self) -> float:
        return min(self.samples_us) / 1000

    @property
    def mean_ms(self) -> float:
        return float(np.mean(self.samples_us)) / 1000

    def by_shape(self) -> list[tuple[str, int, float, float]]:
        """``(input shapes, runs, p50 ms, max ms)`` per distinct shape label of the golden
        cases, in the order they first come; empty when every case has the same shapes (the
        latency above is then the one size's)."""
        if len(set(self.case_shapes)) < 2:
            return []
        cases = len(self.case_shapes)
        groups: dict[str, list[int]] = {}
        for i, us in enumerate(self.samples_us):
            groups.setdefault(self.case_shapes[(self.warmup + i) % cases], []).append(us)
        return [(label, len(us), float(np.percentile(us, 50)) / 1000, max(us) / 1000)
                for label, us in groups.items()]

    # -- verdicts ---------------------------------------------------------------------------------

    @property
    def numerics_passed(self) -> bool:
        return self.golden_cases > 0 and all(o.passed for o in self.outputs)

    @property
    def latency_passed(self) -> bool:
        return self.runs > 0 and self.p99_ms <= self.budget_ms

    @property
    def passed(self) -> bool:
        return self.numerics_passed and self.latency_passed

    @property
    def reason(self) -> str:
        """Why it failed, in one line ("" when it passed)."""
        why = []
        if self.golden_cases == 0:
            why.append("the artifact has no golden cases")
        bad = [o for o in self.outputs if not o.passed]
        if bad:
            why.append("output(s) beyond tolerance: " + ", ".join(
                f"{o.name!r} ({o.mismatches} of {o.elements} element(s), max |diff| "
                f"{o.max_abs_error:.3g}, rtol {o.rtol:g} atol {o.atol:g})" for o in bad))
        if self.runs and not self.latency_passed:
            why.append(f"latency p99 {self.p99_ms:.3g} ms over the declared worst case "
                       f"{self.budget_ms:g} ms")
        return "; ".join(why)


def run_acceptance(executor: Any, *, runs: int = DEFAULT_RUNS, warmup: int | None = None,
                   progress: Progress | None = None,
                   clock: Callable[[], int] = time.perf_counter_ns) -> AcceptanceResult:
    """Run the acceptance (see the module docstring) on ``executor``, a SandboxedExecutor (or
    anything with its ``run``, ``reset``, ``artifact``, ``backend``, ``protections``)."""
    if type(runs) is not int or runs < 1:
        from ..errors import UsageError

        raise UsageError(f"acceptance runs must be an int >= 1, got {runs!r}")
    warmup = default_warmup(runs) if warmup is None else max(0, int(warmup))
    say = progress or (lambda message: None)
    artifact = executor.artifact
    manifest = artifact.manifest
    cases = artifact.golden_cases()

    say(f"golden cases: {len(cases)} on backend {executor.backend!r}")
    worst: dict[str, list] = {}  # name -> [max error, mismatches, elements, worst case]
    first_mismatch = ""
    for i, (inputs, want) in enumerate(cases):
        outputs = executor.run(dict(inputs))
        try:
            artifact.compare_golden(i, outputs, where=f"on backend {executor.backend!r}")
        except GoldenMismatchError as exc:
            first_mismatch = first_mismatch or str(exc)
        for name, expected in want.items():
            err, bad = _errors(np.asarray(outputs[name]), expected, manifest.tolerances[name])
            acc = worst.setdefault(name, [-1.0, 0, 0, 0])
            if err > acc[0]:
                acc[0], acc[3] = err, i
            acc[1] += bad
            acc[2] += int(expected.size)
    executor.reset("acceptance")
    outputs = tuple(OutputResult(name=name, passed=acc[1] == 0, max_abs_error=max(acc[0], 0.0),
                                 mismatches=acc[1], elements=acc[2],
                                 rtol=float(manifest.tolerances[name].rtol),
                                 atol=float(manifest.tolerances[name].atol), worst_case=acc[3])
                    for name, acc in worst.items())
    if first_mismatch and all(o.passed for o in outputs):  # pragma: no cover - same rule
        raise AssertionError(f"comparison rules disagree: {first_mismatch}")

    samples: list[int] = []
    feeds = [dict(inputs) for inputs, _ in cases] or [{}]
    step = max(1, (warmup + runs) // 10)
    if cases:
        for n in range(warmup + runs):
            feed = feeds[n % len(feeds)]
            start = clock()
            executor.run(feed)
            elapsed = clock() - start
            if n >= warmup:
                samples.append(max(0, elapsed // 1000))
            check_stop()  # a stop signal the command defers (stop_signals.py) ends it here
            if (n + 1) % step == 0 or n + 1 == warmup + runs:
                say(f"latency: {n + 1}/{warmup + runs} calls (the first {warmup} untimed)")
        executor.reset("acceptance")
    protections = getattr(executor, "protections", None)
    in_force = tuple(protections.in_force(executor.limits)) if protections is not None else ()
    return AcceptanceResult(
        name=manifest.name, version=manifest.version, root_digest=manifest.root_digest,
        manifest_sha256=artifact.manifest_sha256, backend=executor.backend,
        golden_cases=len(cases), outputs=outputs, samples_us=tuple(samples), warmup=warmup,
        budget_ms=float(manifest.latency_ms), sandbox=in_force, time=int(time.time()),
        first_mismatch=first_mismatch, case_shapes=tuple(
            ", ".join(f"{name} {tuple(np.shape(v))}" for name, v in sorted(inputs.items()))
            for inputs, _ in cases))


def _errors(actual: np.ndarray, expected: np.ndarray, tol: Any) -> tuple[float, int]:
    """(largest |actual - expected|, elements outside the tolerance): ``Tolerance.compare``
    (every element where the shapes differ)."""
    return tol.compare(actual, expected)


def record_body(result: AcceptanceResult) -> dict[str, Any]:
    """The content of the signed record (``acceptance_record`` module docstring)."""
    def finite(x: float) -> float:
        return float(x) if math.isfinite(x) else 1.7976931348623157e308  # inf: the largest

    runs = result.runs
    return {
        "artifact": {"name": result.name, "version": result.version,
                     "root_digest": result.root_digest,
                     "manifest_sha256": result.manifest_sha256},
        "backend": result.backend,
        "host_version": __version__,
        "passed": result.passed,
        "reason": result.reason,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(result.time)),
        "time": result.time,
        "golden_cases": result.golden_cases,
        "outputs": [{"name": o.name, "passed": o.passed,
                     "max_abs_error": finite(o.max_abs_error), "mismatches": o.mismatches,
                     "elements": o.elements, "rtol": o.rtol, "atol": o.atol,
                     "worst_case": o.worst_case} for o in result.outputs],
        "latency": {"runs": runs, "warmup": result.warmup,
                    "p50_ms": result.p50_ms if runs else 0.0,
                    "p99_ms": result.p99_ms if runs else 0.0,
                    "max_ms": result.max_ms if runs else 0.0,
                    "mean_ms": result.mean_ms if runs else 0.0,
                    "min_ms": result.min_ms if runs else 0.0,
                    "budget_ms": result.budget_ms, "criterion": "p99",
                    "passed": result.latency_passed,
                    "max_within_budget": bool(runs) and result.max_ms <= result.budget_ms,
                    "samples_us": list(result.samples_us)},
        "sandbox": list(result.sandbox),
    }


def accept_artifact(path: str | os.PathLike, *, backend: str, executor_options: Mapping[str, Any],
                    keys: Sequence[Any] = (), out: str | os.PathLike | None = None,
                    runs: int = DEFAULT_RUNS, warmup: int | None = None,
                    progress: Progress | None = None, rollback: Any = None,
                    report: bool = True) -> tuple[AcceptanceResult, dict[str, str]]:
    """Verify ``path``, start a sandbox worker on ``backend`` (``executor_options``: the
    SandboxedExecutor's keyword arguments but ``backend`` and ``rollback``: trust, audited
    ops, plugins, requirements, limits ...), run the acceptance, and write the report (unless
    ``report`` is false) and, with ``keys``, the signed record at ``out`` (default
    ``<path>.accept-<backend>``). ``rollback``, a RollbackStore, is checked, never updated.
    Limits without ``blas_threads`` get the daemon's choice (all cores but one), so the
    latency measured is the latency the daemon will see.

    Returns ``(result, files written by kind)``; a failed acceptance raises
    AcceptanceFailedError after writing (the record then says it failed).
    """
    from ..sandbox import SandboxedExecutor, SandboxLimits
    from .acceptance_record import default_record_path, write_record
    from .acceptance_report import write_report

    say = progress or (lambda message: None)
    out = os.fspath(out) if out is not None else default_record_path(path, backend)
    options = dict(executor_options)
    limits = options.get("limits") or SandboxLimits()
    if limits.blas_threads is None:  # as the daemon runs it: one core stays with the host
        options["limits"] = dataclasses.replace(
            limits, blas_threads=max(1, len(os.sched_getaffinity(0)) - 1))
    say(f"verifying {os.fspath(path)} and starting a sandbox worker on {backend!r}")
    with SandboxedExecutor(path, backend=backend, rollback=None, **options) as ex:
        m = ex.manifest
        if rollback is not None:
            rollback.check(m.name, m.version, ex.artifact.manifest_sha256)
        result = run_acceptance(ex, runs=runs, warmup=warmup, progress=progress)
    written: dict[str, str] = {}
    if report or keys:  # a step: a stop asked for by now writes nothing
        say("writing " + " and ".join(kind for kind, on in (
            ("the report", report), ("the signed record", bool(keys))) if on))
    if report:
        written.update(write_report(out, result))
    if keys:
        write_record(out, record_body(result), keys)
        written["record"] = out
    if not result.passed:
        raise AcceptanceFailedError(
            f"acceptance of {result.name} {result.version} on backend {backend!r} FAILED: "
            f"{result.reason}" + (f" (report {written['html']})" if "html" in written else ""),
            path=os.fspath(path), artifact=result.name, backend=backend, result=result,
            written=written)
    return result, written
