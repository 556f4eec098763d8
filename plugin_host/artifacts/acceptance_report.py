"""The readable side of an acceptance: a latency histogram as text and as SVG, and a report.

No plotting library: the SVG is a few dozen elements written here, self-contained (no script,
no external reference), every text escaped. :func:`write_report` writes ``RECORD.svg`` (the
histogram) and ``RECORD.html`` (the numbers, each output's verdict and the same SVG inline)
next to the record.
"""

from __future__ import annotations

import html
import os
import time
from typing import Any, Sequence

import numpy as np

from abi.artifact import atomic_write

from ..errors import AcceptanceRecordError

__all__ = ["histogram", "text_histogram", "svg_histogram", "html_report", "write_report"]

BINS = 20


def histogram(samples_us: Sequence[int], bins: int = BINS) -> tuple[list[int], list[float]]:
    """``(counts, edges in ms)`` over [min, max] of the samples (one bin when all are equal)."""
    ms = np.asarray(samples_us, dtype=np.float64) / 1000
    if ms.size == 0:
        return [], []
    lo, hi = float(ms.min()), float(ms.max())
    if hi <= lo:
        hi = lo + max(lo * 1e-3, 1e-3)
        bins = 1
    counts, edges = np.histogram(ms, bins=bins, range=(lo, hi))
    return [int(c) for c in counts], [float(e) for e in edges]


def _stats(result: Any) -> str:
    return (f"p50 {result.p50_ms:.3f} ms, p99 {result.p99_ms:.3f} ms, max {result.max_ms:.3f} "
            f"ms over {result.runs} runs ({result.warmup} warm-up excluded); declared worst "
            f"case {result.budget_ms:g} ms")


def text_histogram(result: Any, *, width: int = 40, bins: int = 12) -> str:
    """A compact terminal histogram of the latency samples, with p50/p99 marked."""
    counts, edges = histogram(result.samples_us, bins)
    if not counts:
        return "latency: no samples"
    top = max(counts)
    lines = [f"latency ({result.runs} runs, ms)"]
    for i, c in enumerate(counts):
        lo, hi = edges[i], edges[i + 1]
        marks = "".join(m for m, v in (("<p50", result.p50_ms), ("<p99", result.p99_ms))
                        if lo <= v < hi or (i == len(counts) - 1 and v == hi))
        bar = "#" * (round(width * c / top) if c else 0)
        lines.append(f"  {lo:8.3f} - {hi:8.3f} |{bar:<{width}}| {c:5d} {marks}".rstrip())
    verdict = "within" if result.latency_passed else "OVER"
    lines.append(f"  p50 {result.p50_ms:.3f}  p99 {result.p99_ms:.3f}  max {result.max_ms:.3f}"
                 f"  budget {result.budget_ms:g}: p99 {verdict} budget"
                 + ("" if result.max_ms <= result.budget_ms else ", max over budget"))
    for label, runs, p50, most in result.by_shape():
        lines.append(f"  {label}: p50 {p50:.3f}  max {most:.3f} ({runs} runs)")
    return "\n".join(lines)


def svg_histogram(result: Any, *, width: int = 720, height: int = 340) -> str:
    """The latency histogram as a standalone SVG document (p50, p99, max and the budget drawn
    as vertical lines; the budget is noted at the edge when it is far off the scale)."""
    counts, edges = histogram(result.samples_us)
    left, right, top_pad, bottom = 60, 20, 56, 50
    pw, ph = width - left - right, height - top_pad - bottom
    esc = html.escape
    title = (f"{result.name} {result.version} on {result.backend}: host round-trip latency")
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
             f'<title>{esc(title)}</title>',
             f'<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>',
             f'<text x="{left}" y="20" font-size="14">{esc(title)}</text>']
    if not counts:
        parts.append(f'<text x="{left}" y="{top_pad + ph / 2:.0f}">no samples</text></svg>')
        return "\n".join(parts) + "\n"
    lo, hi = edges[0], edges[-1]
    if result.budget_ms <= hi * 1.5:  # the budget fits on the scale without squashing it
        hi = max(hi, result.budget_ms)
        lo = min(lo, result.budget_ms)
    span = hi - lo or 1.0

    def x(ms: float) -> float:
        return left + (ms - lo) / span * pw

    top = max(counts)
    for i, c in enumerate(counts):
        if not c:
            continue
        h = ph * c / top
        x0, x1 = x(edges[i]), x(edges[i + 1])
        parts.append(f'<rect x="{x0:.2f}" y="{top_pad + ph - h:.2f}" width="'
                     f'{max(x1 - x0 - 1, 1):.2f}" height="{h:.2f}" fill="#4a7ab5">'
                     f'<title>{edges[i]:.3f}-{edges[i + 1]:.3f} ms: {c}</title></rect>')
    base = top_pad + ph
    parts.append(f'<line x1="{left}" y1="{base}" x2="{left + pw}" y2="{base}" stroke="black"/>')
    parts.append(f'<line x1="{left}" y1="{top_pad}" x2="{left}" y2="{base}" stroke="black"/>')
    for k in range(6):
        ms = lo + span * k / 5
        parts.append(f'<line x1="{x(ms):.2f}" y1="{base}" x2="{x(ms):.2f}" y2="{base + 5}" '
                     f'stroke="black"/>')
        parts.append(f'<text x="{x(ms):.2f}" y="{base + 18}" text-anchor="middle">'
                     f'{ms:.3g}</text>')
    parts.append(f'<text x="{left + pw / 2:.0f}" y="{height - 10}" text-anchor="middle">'
                 f'latency (ms), {result.runs} runs</text>')
    parts.append(f'<text x="{left - 8}" y="{top_pad + 4}" text-anchor="end">{top}</text>')
    parts.append(f'<text x="{left - 8}" y="{base}" text-anchor="end">0</text>')
    markers = [("p50", result.p50_ms, "#2a9d3f"), ("p99", result.p99_ms, "#e08a00"),
               ("max", result.max_ms, "#7a3fa0"), ("budget", result.budget_ms, "#c62828")]
    legend_x = left
    for label, ms, color in markers:
        on_scale = lo <= ms <= hi
        if on_scale:
            parts.append(f'<line x1="{x(ms):.2f}" y1="{top_pad}" x2="{x(ms):.2f}" y2="{base}" '
                         f'stroke="{color}" stroke-width="2" stroke-dasharray="5,3"/>')
        # a legend row between the title and the plot: labels never cover a bar or each other
        text = f"{label} {ms:.3g} ms" + ("" if on_scale else " (off scale)")
        dash = "" if on_scale else ' stroke-dasharray="2,2"'
        parts.append(f'<line x1="{legend_x}" y1="{top_pad - 12}" x2="{legend_x + 14}" '
                     f'y2="{top_pad - 12}" stroke="{color}" stroke-width="2"{dash}/>')
        parts.append(f'<text x="{legend_x + 18}" y="{top_pad - 8}" fill="{color}">'
                     f'{esc(text)}</text>')
        legend_x += 18 + 7 * len(text) + 16
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def html_report(result: Any, svg: str) -> str:
    """A self-contained HTML page: verdict, artifact and backend, per-output numbers,
    latency statistics and the histogram."""
    esc = html.escape
    verdict = "PASSED" if result.passed else "FAILED"
    rows = "\n".join(
        f"<tr><td>{esc(o.name)}</td><td>{'pass' if o.passed else 'FAIL'}</td>"
        f"<td>{o.max_abs_error:.3g}</td><td>{o.rtol:g}</td><td>{o.atol:g}</td>"
        f"<td>{o.mismatches} / {o.elements}</td><td>{o.worst_case}</td></tr>"
        for o in result.outputs)
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(result.time))
    from .. import __version__

    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>Acceptance of {esc(result.name)} {esc(result.version)} on {esc(result.backend)}</title>
<style>body{{font-family:sans-serif;max-width:60em;margin:2em auto}}
table{{border-collapse:collapse}}td,th{{border:1px solid #999;padding:.2em .6em}}
.PASSED{{color:#2a7d3f}}.FAILED{{color:#c62828}}</style></head><body>
<h1>Acceptance: <span class="{verdict}">{verdict}</span></h1>
<p>{esc(result.reason)}</p>
<table>
<tr><th>artifact</th><td>{esc(result.name)} {esc(result.version)}</td></tr>
<tr><th>root digest</th><td><code>{esc(result.root_digest)}</code></td></tr>
<tr><th>manifest SHA-256</th><td><code>{esc(result.manifest_sha256)}</code></td></tr>
<tr><th>backend</th><td>{esc(result.backend)}</td></tr>
<tr><th>host</th><td>plugin-host {esc(__version__)}, sandbox worker with
{esc(", ".join(result.sandbox) or "no protections reported")}</td></tr>
<tr><th>date</th><td>{when}</td></tr>
</table>
<h2>Golden outputs ({result.golden_cases} case(s))</h2>
<table><tr><th>output</th><th>verdict</th><th>max |diff|</th><th>rtol</th><th>atol</th>
<th>outside tolerance</th><th>worst case</th></tr>
{rows}
</table>
<h2>Latency (host round trip through the sandbox worker)</h2>
<p>{esc(_stats(result))}: p99 {"within" if result.latency_passed else "OVER"} the budget;
mean {result.mean_ms:.3f} ms, min {result.min_ms:.3f} ms.</p>
{_by_shape_table(result)}{svg}
</body></html>
"""


def _by_shape_table(result: Any) -> str:
    """The latency per golden input shape, when the golden cases have more than one (a
    run-time dim drawn at several sizes: ``build --golden-dim``); else ""."""
    rows = "".join(f"<tr><td>{html.escape(label)}</td><td>{runs}</td><td>{p50:.3f}</td>"
                   f"<td>{most:.3f}</td></tr>\n" for label, runs, p50, most in result.by_shape())
    if not rows:
        return ""
    return ("<table><tr><th>golden inputs</th><th>runs</th><th>p50 ms</th><th>max ms</th>"
            f"</tr>\n{rows}</table>\n")


def write_report(record_path: str | os.PathLike, result: Any) -> dict[str, str]:
    """Write ``RECORD.svg`` and ``RECORD.html``; return ``{"svg": path, "html": path}``."""
    base = os.fspath(record_path)
    svg = svg_histogram(result)
    files = {"svg": f"{base}.svg", "html": f"{base}.html"}
    try:
        atomic_write(files["svg"], lambda f: f.write(svg.encode()))
        page = html_report(result, svg)
        atomic_write(files["html"], lambda f: f.write(page.encode()))
    except OSError as exc:
        raise AcceptanceRecordError(f"cannot write the acceptance report next to {base}: "
                                    f"{exc.strerror}", path=base) from None
    return files
