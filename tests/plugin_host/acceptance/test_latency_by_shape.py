"""Acceptance of an artifact whose golden cases give a run-time dim several sizes (``build
--golden-dim``): the latency is also shown per golden input shape, in the terminal and in the
report; with one shape, nothing more is shown."""

from __future__ import annotations

import numpy as np

from plugin_host.artifacts import build_artifact, sign_artifact
from plugin_host.artifacts.acceptance import record_body, run_acceptance
from plugin_host.artifacts.acceptance_report import html_report, text_histogram
from plugin_host.builder import GraphBuilder
from plugin_host.sandbox import SandboxedExecutor
from plugins.numpy_backend import NumpyBackend


class _Timed:
    """A SandboxedExecutor whose calls "take" 1 ms per row of x on ``clock``."""

    def __init__(self, executor):
        self.executor, self.now = executor, 0

    def __getattr__(self, name):
        return getattr(self.executor, name)

    def clock(self) -> int:
        return self.now

    def run(self, feed):
        self.now += 1_000_000 * feed["x"].shape[0]
        return self.executor.run(feed)


def test_latency_per_golden_input_shape(tmp_path, signer, trust):
    b = GraphBuilder("rows")
    x = b.input("x", ("n", 4), "float32", "NC")
    b.output(b.op("relu", x, name="act"), "y", "NC")
    path = tmp_path / "rows.pha"
    rng = np.random.default_rng(0)
    build_artifact(b.build(), path, version="1.0.0", reference_backend=NumpyBackend(),
                   latency_ms=50.0, golden_inputs=[
                       {"x": rng.standard_normal((n, 4)).astype(np.float32)} for n in (2, 5, 2)])
    sign_artifact(path, signer)
    with SandboxedExecutor(path, trust=trust) as ex:
        timed = _Timed(ex)
        result = run_acceptance(timed, runs=9, warmup=1, clock=timed.clock)
    assert result.passed and result.case_shapes == ("x (2, 4)", "x (5, 4)", "x (2, 4)")
    # calls 1..9 timed (call 0 the warm-up): cases 1, 2, 0, 1, 2, 0, 1, 2, 0
    assert result.by_shape() == [("x (5, 4)", 3, 5.0, 5.0), ("x (2, 4)", 6, 2.0, 2.0)]
    text = text_histogram(result)
    assert "  x (5, 4): p50 5.000  max 5.000 (3 runs)" in text.splitlines()
    assert "<td>x (2, 4)</td><td>6</td><td>2.000</td><td>2.000</td>" in html_report(result, "")
    assert "case_shapes" not in record_body(result)  # the signed record is as before


def test_one_shape_shows_no_breakdown(tmp_path, signer, trust):
    from .conftest import build_signed

    path = build_signed(tmp_path / "small.pha", signer)
    with SandboxedExecutor(path, trust=trust) as ex:
        result = run_acceptance(ex, runs=6, warmup=1)
    assert len(result.case_shapes) == 2 and result.by_shape() == []
    assert "golden inputs" not in html_report(result, "")
    assert not any(": p50 " in line for line in text_histogram(result).splitlines())
