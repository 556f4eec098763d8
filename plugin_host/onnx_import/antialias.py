"""Antialiased Resize (``antialias=1``, opset 18: torch's interpolate(..., antialias=True) with
bilinear or bicubic, torchvision's resize with antialias): the resize is separable and linear
in x, so each resized axis is resampled by onnxruntime's antialias windows, built at import as
its CPU kernel builds them: tap by tap (a ``gather`` of each output's k-th input, its weight,
the windows' ends, a sum in tap order), or for windows wider than :data:`MAX_TAPS` a
``matmul`` by the dense (out, in) weight matrix. Used by :func:`.spatial._resize` wherever an
axis changes size.

onnxruntime's weights, per output position i along an axis of ``length`` entries resized to
``out`` by the float32 scale s (the given scale, or out / length from sizes): the filter
(linear: the triangle of support 2; cubic: Keys' kernel with ``cubic_coeff_a``, support 4) is
widened by 1 / s when s < 1 and read at (j - center + 0.5) * s; its window starts at
floor(center - support / 2 + 0.5), center = 0.5 + the input coordinate of i under the
coordinate transformation mode. Taps outside the input are dropped (``exclude_outside=1``)
or added to the edge tap (0); the weights are normalised to sum 1 (multiplied by the float32
reciprocal of their sum, taken one tap after the other). Everything is in float32 in
onnxruntime's order of operations, so the weights are onnxruntime's bit for bit. The width is
resampled first, then the height, as there; an axis whose size is kept is copied, as there,
whatever its scale.

Tap by tap, an inf or nan reaches only the outputs whose windows hold it, as in onnxruntime;
the dense matrix multiplies every input entry of a row, zero-weighted ones too, so there it
spreads to the whole row (0 * inf), and its float32 sums are in another order (within the
build's tolerance).
"""

from __future__ import annotations

import numpy as np

F32 = np.float32
_SUPPORT = {"linear": F32(2.0), "cubic": F32(4.0)}


def _coordinates(out: int, length: int, scale, coordinate: str) -> np.ndarray:
    """onnxruntime's input coordinate of each of the ``out`` positions, in float32."""
    o = np.arange(out, dtype=F32)
    if coordinate == "asymmetric":
        return o / scale
    if coordinate == "align_corners":
        if out == 1:
            return np.zeros(1, F32)
        return o * F32(length - 1) / F32(out - 1)
    if coordinate == "pytorch_half_pixel" and out == 1:
        return np.zeros(1, F32)
    return (o + F32(0.5)) / scale - F32(0.5)


def _filter(mode: str, t: np.ndarray, a) -> np.ndarray:
    """The linear (triangle) or cubic (Keys, coefficient ``a``) filter at ``t``, in float32
    with onnxruntime's order of operations."""
    t = np.abs(t)
    if mode == "linear":
        return np.where(t < F32(1), F32(1) - t, F32(0)).astype(F32)
    near = ((a + F32(2)) * t - (a + F32(3))) * t * t + F32(1)
    far = (((t - F32(5)) * t + F32(8)) * t - F32(4)) * a
    return np.where(t < F32(1), near, np.where(t < F32(2), far, F32(0))).astype(F32)


def _support(mode: str, scale) -> tuple:
    """(input entries per output entry, the filter's half width, onnxruntime's window: the
    most taps an output reads) for the float32 ``scale``."""
    s = F32(1) / F32(scale)
    support = (_SUPPORT[mode] * F32(0.5)) * (s if s >= F32(1) else F32(1))
    return s, support, int(np.ceil(support)) * 2 + 1


def antialias_taps(length: int, out: int, scale, mode: str, coordinate: str,
                   cubic_coeff_a: float, exclude_outside: bool) -> tuple:
    """onnxruntime's antialias window of each output position along one axis (``scale``: the
    float32 scale; see the module docstring): ``(start, count, weights)``, output i reading
    the ``count[i]`` inputs from ``start[i]`` on with the float32 ``weights[i, :count[i]]``
    (normalised; 0 past ``count[i]``)."""
    rscale, a = F32(scale), F32(cubic_coeff_a)
    s, support, window = _support(mode, rscale)
    inv = F32(1) / s if s >= F32(1) else F32(1)
    with np.errstate(all="ignore"):
        where = (np.arange(out, dtype=F32) if s == F32(1)
                 else _coordinates(out, length, rscale, coordinate))
        center = F32(0.5) + where
        lo = np.floor(center - support + F32(0.5)).astype(np.int64)
        hi = np.floor(center + support + F32(0.5)).astype(np.int64)
    hi = lo + np.clip(hi - lo, 0, window)
    lo_cut, hi_cut = np.clip(lo, 0, length), np.clip(hi, 0, length)
    first, last = (lo_cut, hi_cut) if exclude_outside else (lo, hi)
    taps = last - first
    buffer = np.zeros((out, window), F32)
    total = np.zeros(out, F32)
    for k in range(window):  # tap by tap, as onnxruntime sums them
        on = k < taps
        w = _filter(mode, ((first + k).astype(F32) - center + F32(0.5)) * inv, a)
        buffer[on, k] = w[on]
        total[on] += w[on]
    if not exclude_outside:  # taps outside the input are added to the edge taps
        for i in np.flatnonzero((lo_cut < hi_cut) & ((lo < 0) | (hi > length))):
            row, n = buffer[i], int(taps[i])
            before = min(max(-int(lo[i]), 0), n - 1)
            for k in range(before):
                row[before] += row[k]
            after = min(max(int(hi[i]) - length, 0), n - 1)
            for k in range(n - after, n):
                row[n - after - 1] += row[k]
            if before or after:
                row[:hi_cut[i] - lo_cut[i]] = row[before:before + hi_cut[i] - lo_cut[i]].copy()
    inverse = np.ones(out, F32)  # a total of 0 leaves the weights as they are
    inverse[total != 0] = F32(1) / total[total != 0]
    count = (hi_cut - lo_cut).astype(np.int64)
    weights = np.zeros((out, window), F32)
    for i in range(out):
        weights[i, :count[i]] = buffer[i, :count[i]] * inverse[i]
    return lo_cut.astype(np.int64), count, weights


def antialias_weights(length: int, out: int, scale, mode: str, coordinate: str,
                      cubic_coeff_a: float, exclude_outside: bool) -> np.ndarray:
    """The float32 (out, length) matrix of onnxruntime's antialias weights along one axis:
    :func:`antialias_taps` laid out densely."""
    start, count, weights = antialias_taps(length, out, scale, mode, coordinate, cubic_coeff_a,
                                           exclude_outside)
    matrix = np.zeros((out, length), F32)
    for i in range(out):
        matrix[i, start[i]:start[i] + count[i]] = weights[i, :count[i]]
    return matrix


#: The most taps a window may have for the tap-by-tap form (:func:`_emit_taps`); a wider one
#: (shrinking by more than about 16 in linear, 8 in cubic) takes the dense ``matmul``.
MAX_TAPS = 33


def emit_antialias(imp, node, x: str, shape: list, size: list, scales: list | None,
                   mode: str, coordinate: str, cubic_coeff_a: float, exclude: bool) -> None:
    """Bind ``node.output[0]`` to x resized to spatial ``size`` with antialias, each spatial
    axis whose size changes in turn, the last axis first, as onnxruntime: tap by tap
    (:func:`_emit_taps`) where the windows have at most :data:`MAX_TAPS` taps, else a
    ``matmul`` by the dense weight matrix (x @ W.T for the last axis, W @ x for the one
    before)."""
    dtype = imp.type_of(x).dtype
    if dtype != "float32":
        raise imp.unsupported(f"input {x!r} of dtype {dtype}: antialias=1 needs float32 "
                              f"(onnxruntime's Resize has no {dtype})")
    spatial = shape[2:]
    moved = [a for a in reversed(range(len(spatial))) if size[a] != spatial[a]]
    y = imp.tensor(x)
    for step, a in enumerate(moved):
        length, out = spatial[a], size[a]
        scale = F32(scales[a]) if scales is not None else F32(out) / F32(length)
        imp.check_size(f"its antialias filter windows for axis {a + 2}",
                       [out, _support(mode, scale)[2]])
        final = step == len(moved) - 1
        bind = [node.output[0] if final else None]
        suffix = "" if final else f"/antialias{a + 2}"
        start, count, weights = antialias_taps(length, out, scale, mode, coordinate,
                                               cubic_coeff_a, exclude)
        if int(count.max()) <= MAX_TAPS:
            y = _emit_taps(imp, y, a + 2, len(shape), length, start, count, weights, bind,
                           suffix)
            continue
        imp.check_size(f"its antialias weights for axis {a + 2}", [out, length])
        w = antialias_weights(length, out, scale, mode, coordinate, cubic_coeff_a, exclude)
        last = a == len(spatial) - 1
        w = imp.add_constant(np.ascontiguousarray(w.T) if last else w,
                             f"{node.output[0]}.antialias{a + 2}")
        [y] = imp.emit("matmul", [y, w] if last else [w, y], bind, suffix=suffix)


def _emit_taps(imp, y: str, axis: int, rank: int, length: int, start: np.ndarray,
               count: np.ndarray, weights: np.ndarray, bind: list, suffix: str) -> str:
    """``y`` resampled along ``axis`` by the windows ``(start, count, weights)``: for tap k,
    a ``gather`` along the axis of each output's k-th input, times its weight (``mul``), 0
    where the window is shorter (``where``: an inf or nan outside an output's window does not
    reach it, as in onnxruntime), summed tap after tap (``add``); the last op is bound to
    ``bind``."""
    along = (-1,) + (1,) * (rank - 1 - axis)  # the weights broadcast along the axis
    name = bind[0] or f"{imp.node_name}{suffix}"
    zero = None
    taps = int(count.max())
    total = None
    for k in range(taps):
        inside = k < count
        steps = ["gather", "mul"] + ([] if inside.all() else ["where"]) + (["add"] if k else [])

        def emit(op, inputs, attrs=None):  # the last op of the last tap gives the result
            done = k == taps - 1 and op == steps[-1]
            return imp.emit(op, inputs, bind if done else [None], attrs,
                            suffix=suffix if done else f"{suffix}/{op}{k}")[0]

        index = np.minimum(start + k, length - 1).astype(np.int64)
        t = emit("gather", [y, imp.add_constant(index, f"{name}.tap{k}")], {"axis": axis})
        t = emit("mul", [t, imp.add_constant(weights[:, k].reshape(along), f"{name}.w{k}")])
        if not inside.all():
            zero = zero or imp.add_constant(np.zeros((), F32), f"{name}.zero")
            t = emit("where", [imp.add_constant(inside.reshape(along), f"{name}.in{k}"), t,
                               zero])
        total = t if total is None else emit("add", [total, t])
    return total
