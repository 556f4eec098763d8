"""Spectral ops and Compress: Compress of a constant condition (tf2onnx's boolean-mask
indexing) as a constant-index ``gather``; the window functions HannWindow, HammingWindow and
BlackmanWindow (torch.hann_window and the like under the dynamo exporter) and MelWeightMatrix
(tf2onnx's mel filter bank) as constants; DFT
(torch.fft.fft, rfft and irfft under the dynamo exporter) as a ``matmul`` by cos and sin
matrices, constants, or over a run-time signal length computed when the call runs; STFT
(torch.stft) as a constant ``gather`` of the frames (over a run-time signal length, of
positions computed when the call runs), the window's ``mul`` and the same DFT. Registered in
:data:`.ops.MAPPERS` and, for constant inputs, :func:`.fold.register` on import.

Constant matrices are built in float64 and stored in the input's dtype. A float32 DFT by
matmul is not bit for bit onnxruntime's FFT: onnxruntime's own transform of a length that is
not a power of two drifts from the exact one by up to about 70 * length * eps * max|x|
(measured to length 1000), the matmul by far less, so the build's tolerance for a DFT output
must grow with the signal length.
"""

from __future__ import annotations

import math

import numpy as np

from abi import dtypes
from abi.ops import dims

from ..errors import ModelFileError
from . import symbolic
from .fold import _need, axis_in, one_value
from .fold import register as register_fold
from .gather import _runtime_gather
from .ops import _flags, _only, _opt, maps
from .reader import ONNX_DTYPES
from .run_time_sizes import has_dim, run_time_arange, size_tensor

# --- Compress ------------------------------------------------------------------------------------


def compress_indices(condition: np.ndarray, dim: int) -> np.ndarray:
    """The int64 positions Compress keeps along an axis of ``dim`` entries: where the 1-D
    ``condition`` is true; a shorter condition drops the rest (ONNX), and entries past the dim
    are ignored (as onnxruntime does)."""
    cond = np.asarray(condition)
    if cond.ndim != 1 or cond.dtype != np.bool_:
        raise ModelFileError(f"condition must be a 1-D bool tensor, got {cond.dtype} of shape "
                             f"{list(cond.shape)}")
    return np.flatnonzero(cond[:dim]).astype(np.int64)


def _fold_compress(ins, a: dict, cap: int) -> list:
    x, cond = ins
    axis = a.get("axis")
    if axis is None:
        x, axis = x.reshape(-1), 0
    axis = axis_in(axis, x.ndim)
    return [np.take(x, compress_indices(cond, x.shape[axis]), axis=axis)]


register_fold("Compress", _fold_compress)


@maps("Compress")
def _compress(imp, node, attrs):
    """A constant condition: ``gather`` of the kept positions along ``axis``, or of the input
    flattened (``reshape``) without one. The axis (without one: every dim) must be static; a
    condition computed at run time, or one that keeps nothing, is refused."""
    _only(imp, attrs, {"axis": ...})
    x, cond = node.input[0], node.input[1]
    if not imp.is_const(cond):
        raise imp.unsupported(f"condition {cond!r} is computed at run time: the output's shape "
                              f"would depend on its values (only a constant condition is "
                              f"supported)")
    shape = list(imp.type_of(x).shape)
    axis = attrs.get("axis")
    if axis is None:
        if not all(type(d) is int for d in shape):
            raise imp.unsupported(f"input shape {shape}: Compress without an axis flattens the "
                                  f"input, which needs every dim static")
        dim = math.prod(shape)
    else:
        axis = axis_in(axis, len(shape))
        dim = shape[axis]
        if type(dim) is not int:
            raise imp.unsupported(f"axis {axis} of input shape {shape} is a run-time dim: the "
                                  f"condition cannot be checked against it")
    index = compress_indices(imp.const(cond, "condition"), dim)
    if not index.size:
        raise imp.unsupported(f"condition {cond!r} keeps nothing: an empty output is not "
                              f"supported")
    data = imp.tensor(x)
    if axis is None:
        [data] = imp.emit("reshape", [data], [None], {"shape": [dim]}, suffix="/flatten")
        axis = 0
    imp.emit("gather", [data, imp.add_constant(index, f"{node.output[0]}.index")],
             [node.output[0]], {"axis": axis})


# --- window functions ----------------------------------------------------------------------------


def _cosine_sum_coefficients(op: str) -> tuple[float, float, float]:
    """a0, a1, a2 of ``a0 - a1 cos(t) + a2 cos(2t)``, formed in float32 as onnxruntime forms
    them (Blackman's a0 as (1 - 0.16) / 2, one float32 step above 0.42)."""
    f = np.float32
    if op == "HannWindow":
        return 0.5, 0.5, 0.0
    if op == "HammingWindow":
        a0 = f(25 / 46)
        return float(a0), float(f(1) - a0), 0.0
    alpha = f(0.16)
    return float((f(1) - alpha) / f(2)), 0.5, float(alpha / f(2))


def window(op: str, size, attrs: dict, cap: int) -> np.ndarray:
    """HannWindow, HammingWindow or BlackmanWindow of ``size`` (one integer >= 1): the cosine
    sum in float64 over ``size`` (periodic) or ``size - 1`` (symmetric) steps, cast to
    ``output_datatype`` as onnxruntime computes it (a symmetric window of size 1 is 0 / 0:
    nan, as there; an integer dtype truncates)."""
    n = one_value(size, "size")
    if n.dtype.kind not in "iu":
        raise ModelFileError(f"size must be an integer, got {n.dtype}")
    n = int(n)
    periodic = attrs.get("periodic", 1)
    if periodic not in (0, 1):
        raise ModelFileError(f"attribute periodic={periodic!r} must be 0 or 1")
    code = attrs.get("output_datatype", 1)
    dtype = ONNX_DTYPES.get(code)
    if dtype is None or dtype == "bool":
        raise ModelFileError(f"attribute output_datatype={code!r} is not a numeric ABI dtype")
    if n < 1:
        raise ModelFileError(f"size {n}: a window needs a size >= 1")
    _need(n, cap, op)
    steps = n if periodic else n - 1
    if steps == 0 and dtype not in ("float32", "float64", "float16"):
        raise ModelFileError(f"a symmetric window of size 1 is nan (0 / 0), which {dtype} "
                             f"cannot hold")
    a0, a1, a2 = _cosine_sum_coefficients(op)
    with np.errstate(all="ignore"):
        step = 2 * np.pi / steps if steps else np.nan
        t = step * np.arange(n, dtype=np.float64)
        values = a0 - a1 * np.cos(t) + (a2 * np.cos(2 * t) if a2 else 0.0)
    return values.astype(dtypes.to_numpy(dtype))


for _op in ("HannWindow", "HammingWindow", "BlackmanWindow"):
    register_fold(_op, lambda ins, a, cap, op=_op: [window(op, ins[0], a, cap)])


# --- DFT and STFT --------------------------------------------------------------------------------


def dft_matrices(length: int, signal: int, bins: int, inverse: bool, *,
                 half: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of 2 pi k j / length for bins k < ``bins`` and samples j < ``signal`` (the
    zero padding past the signal contributes nothing and has no column), in float64; k * j is
    reduced modulo ``length`` first, exactly, so large lengths keep their precision. The
    inverse transform's matrices carry its 1 / length; ``half`` (the inverse of a half
    spectrum, :func:`_dft_on_axis`) also each column's weight, :func:`_half_weights`."""
    k = np.arange(bins, dtype=np.int64)[:, None]
    j = np.arange(signal, dtype=np.int64)[None, :]
    theta = (2 * np.pi / length) * ((k * j) % length)
    scale = 1.0 / length if inverse else 1.0
    if half:
        scale = _half_weights(np.arange(signal), length)[None, :] / length
    return np.cos(theta) * scale, np.sin(theta) * scale


def _half_bins(length):
    """The bins of a half spectrum of ``length`` samples, ``length // 2 + 1`` (an int or a
    run-time dim)."""
    return dims.simplified(dims.add(dims.floordiv(length, 2), 1))


def _half_weights(k, length):
    """The weight of bin k of a half spectrum in the real signal of ``length`` samples it is
    the transform of: 2 (the bin and its mirror image length - k), but 1 for bin 0 and, for
    an even length, bin length / 2 (each its own mirror image). :func:`_run_time_matrices`
    computes the same in the graph."""
    return np.where((k == 0) | (2 * k == length), 1.0, 2.0)


def _run_time_matrices(imp, node, rows, cols, length, inverse: bool, half: bool, dtype,
                       stem: str, *, nonempty: int | None) -> tuple[str, str]:
    """:func:`dft_matrices` computed when the call runs, for ``rows`` x ``cols`` entries and a
    transform ``length`` any of which is a run-time dim (each a dim that a mask carries): k * j
    of the aranges reduced modulo the length in int64, then in the signal's dtype times 2 pi /
    length, its cos and sin (and the inverse's 1 / length, the half spectrum's weights).

    ``nonempty`` (0: the rows, 1: the columns) must not be empty when the call runs, where
    onnxruntime refuses the transform (a half spectrum's inverse of length 0 or less, an empty
    signal's one-sided transform, which has one bin): that arange's first entry is read too
    (:func:`.gather._runtime_gather`: an IndexRangeError naming the node there) and passed
    through a ``where``."""
    def step(op, inputs, name, op_attrs=None):
        return imp.emit(op, inputs, [None], op_attrs, suffix=f"/{name}")[0]

    def const(value, name):
        return imp.add_constant(np.asarray(value, dtype), f"{stem}.{name}")

    k = run_time_arange(imp, [rows, 1], 0)
    j = run_time_arange(imp, [1, cols], 1)
    if nonempty is not None:
        side = (k, j)[nonempty]
        first = imp.add_constant(np.zeros(1, np.int64), f"{stem}.first")
        entry = _runtime_gather(imp, node, side, first, [1], nonempty, graph=True,
                                internal=True)
        true = imp.add_constant(np.ones((1, 1), bool), f"{stem}.true")
        side = step("where", [true, side, entry], "nonempty")
        k, j = (side, j) if nonempty == 0 else (k, side)
    n = size_tensor(imp, length, "/dft_length")
    # a length of 0 has empty matrices: 1 then keeps the modulus and the division defined
    one = imp.add_constant(np.ones(1, np.int64), f"{stem}.one_sample")
    safe = step("max", [n, one], "at_least_1")
    turns = step("mod", [step("mul", [k, j], "kj"), safe], "kj_mod_n")
    n_float = step("cast", [safe], "n", {"dtype": dtypes.from_numpy(dtype)})
    theta = step("div", [step("mul", [step("cast", [turns], "turns", {
        "dtype": dtypes.from_numpy(dtype)}), const(2 * np.pi, "two_pi")], "radians"), n_float],
        "theta")
    cos, sin = step("cos", [theta], "cos"), step("sin", [theta], "sin")
    if not inverse:
        return cos, sin
    scale = step("div", [const([[1.0]], "one"), n_float], "inverse")
    if half:
        zero = imp.add_constant(np.zeros((1, 1), np.int64), f"{stem}.zero")
        two = imp.add_constant(np.full((1, 1), 2, np.int64), f"{stem}.two")
        own = step("or", [step("equal", [j, zero], "bin0"),
                          step("equal", [step("mul", [j, two], "twice"), n], "mirror")], "own")
        weight = step("where", [own, const([[1.0]], "single"), const([[2.0]], "double")],
                      "weights")
        scale = step("mul", [scale, weight], "scale")
    return step("mul", [cos, scale], "cos_scaled"), step("mul", [sin, scale], "sin_scaled")


def _dft_on_axis(imp, node, x: str, shape: list, axis: int, length, inverse: bool,
                 onesided: bool, out: str, stem: str, *, given: bool = True) -> None:
    """The DFT of graph tensor ``x`` (real: last dim 1, complex: 2) along ``axis`` (not the
    last) to ``length`` bins (half and one with ``onesided``), bound to ``out``. The signal
    is cut to ``length`` by a ``slice``; a shorter one is zero-padded implicitly (the
    matrices have no columns past it). With the signal axis second to last, A = cos @ x and
    B = sin @ x are [..., bins, c]; real x gives ``concat(A, -B)`` (inverse: ``(A, B)``),
    complex x ``A + (B_imag, -B_real)`` (inverse: ``(-B_imag, B_real)``) by a ``gather`` of
    B's two columns swapped and a ``mul`` by the constant signs.

    The inverse of a half spectrum (``inverse`` and ``onesided``, x complex: torch.fft.irfft)
    is the real signal of ``length`` samples whose spectrum's first ``length // 2 + 1`` bins
    x holds (the caller checks that count): each bin k stands for itself and its mirror image
    ``length - k``, the conjugate, so A's real part less B's imaginary one, each bin weighted
    by :func:`_half_weights`, is the signal, [..., length, 1].

    A run-time signal length (and ``length``, then the signal's own, or for a half spectrum
    the one the caller checked) has its matrices computed when the call runs
    (:func:`_run_time_matrices`); fixed ones are constants (:func:`dft_matrices`). Where
    onnxruntime refuses the call, so does the graph: a half spectrum's inverse of a ``given``
    length of 0 (its default length, two less than twice its bins, is refused only below 0,
    that is, where there are no bins), an empty signal's one-sided transform and an empty
    signal's transform of a fixed length."""
    rank, c, n = len(shape), shape[-1], shape[axis]
    half = bool(inverse and onesided)
    static = type(n) is int and type(length) is int
    if half:
        rows, cols = length, n
    else:
        rows = _half_bins(length) if onesided else length
        cols = min(n, length) if static else n
    dtype = dtypes.to_numpy(imp.types[x].dtype)

    def step(op, inputs, name, op_attrs=None, bind=None):
        return imp.emit(op, inputs, [bind], op_attrs, suffix="" if bind else f"/{name}")[0]

    if static and n > length:
        x = step("slice", [x], "truncate", {"starts": [0], "ends": [length], "axes": [axis]})
    perm = None
    if axis != rank - 2:
        perm = [d for d in range(rank - 1) if d != axis] + [axis, rank - 1]
        x = step("transpose", [x], "to_last", {"perm": perm})
    if static:
        imp.check_size("its DFT cos and sin matrices", [2, rows, cols])
        cos, sin = dft_matrices(length, cols, rows, inverse, half=half)
        cos = imp.add_constant(cos.astype(dtype), f"{stem}.cos")
        sin = imp.add_constant(sin.astype(dtype), f"{stem}.sin")
    else:
        names = ("samples", "bins") if half else ("bins", "samples")
        for what, d in ((names[0], rows), (names[1], cols), ("length", length)):
            if type(d) is not int and not has_dim(imp, d):
                raise imp.unsupported(f"the DFT's {what}, {d!r}, a run-time size: no tensor "
                                      f"of the graph carries it, so its matrices cannot be "
                                      f"computed when the call runs")
        cos, sin = _run_time_matrices(imp, node, rows, cols, length, inverse, half, dtype,
                                      stem, nonempty=(0 if given else 1) if half else
                                      1 if onesided or type(length) is int else None)
    a = step("matmul", [cos, x], "cos")
    b = step("matmul", [sin, x], "sin")
    final = out if perm is None else None
    if half:
        real = step("slice", [a], "real", {"starts": [0], "ends": [1], "axes": [-1]})
        imag = step("slice", [b], "imag", {"starts": [1], "ends": [2], "axes": [-1]})
        y = step("sub", [real, imag], "signal", bind=final)
    elif c == 1:
        if not inverse:
            b = step("neg", [b], "neg")
        y = step("concat", [a, b], "complex", {"axis": -1}, bind=final)
    else:
        swapped = step("gather", [b, imp.add_constant(np.array([1, 0], np.int64),
                                                      f"{stem}.swap")], "swap", {"axis": -1})
        signs = np.array([-1, 1] if inverse else [1, -1], dtype)
        signed = step("mul", [swapped, imp.add_constant(signs, f"{stem}.signs")], "signs")
        y = step("add", [a, signed], "complex", bind=final)
    if perm is not None:
        step("transpose", [y], "back", {"perm": list(np.argsort(perm))}, bind=out)


def _signal_type(imp, name: str) -> tuple[list, str]:
    """The shape and dtype of a DFT / STFT signal: float, last dim a static 1 or 2."""
    t = imp.type_of(name)
    shape = list(t.shape)
    if t.dtype not in ("float32", "float64"):
        raise imp.unsupported(f"input {name!r} of dtype {t.dtype}: needs float32 or float64")
    if len(shape) < 2 or shape[-1] not in (1, 2):
        raise imp.unsupported(f"input shape {shape}: the last dim must be 1 (real) or 2 "
                              f"(complex)")
    return shape, t.dtype


def _positive_constant(imp, node, i: int, what: str) -> int | None:
    """Optional input ``i``: one integer >= 1 known at import (absent: None)."""
    name = _opt(node, i)
    if name is None:
        return None
    value = one_value(imp.const(name, what), what)
    if value.dtype.kind not in "iu":
        raise ModelFileError(f"{what} must be an integer, got {value.dtype}")
    if int(value) < 1:
        raise imp.unsupported(f"{what} {int(value)} must be >= 1")
    return int(value)


def _dft_length(imp, node) -> int | str | None:
    """The DFT's ``dft_length`` input: absent (None), an int >= 1 known at import, or a
    run-time dim where it was computed from a run-time shape (the dynamo exporter passes the
    signal's own length so, and torch.fft.irfft's ``2 * (n - 1)``)."""
    name = _opt(node, 1)
    if name is None or name not in imp.sym:
        return _positive_constant(imp, node, 1, "dft_length")
    entries = symbolic.entries(imp.sym[name].reshape(-1))
    if len(entries) != 1:
        raise ModelFileError(f"dft_length must be one value, got {len(entries)}")
    [value] = entries
    if type(value) is int and value < 1:
        raise imp.unsupported(f"dft_length {value} must be >= 1")
    return value


@maps("DFT")
def _dft(imp, node, attrs):
    """DFT-17 (``axis`` an attribute, default 1) and DFT-20 (``axis`` a constant input,
    default -2); ``dft_length`` a constant or computed from a run-time shape (absent: the
    signal's length; for the inverse of a half spectrum, twice one less than its bins, as
    onnxruntime), ``inverse``, and ``onesided`` for a real forward transform or, with
    ``inverse``, a complex half spectrum's real signal (torch.fft.irfft; onnxruntime refuses
    it on a real input and a complex forward one). See :func:`_dft_on_axis`.

    The signal axis may be a run-time dim (torch.fft.rfft, fft and irfft of a run-time length
    under the dynamo exporter): the transform's length is then the signal's own (or, for the
    inverse of a half spectrum, one whose half is the signal's bins), and the matrices are
    computed when the call runs."""
    opset20 = imp.opset >= 20
    _only(imp, attrs, {"inverse": ..., "onesided": ..., **({} if opset20 else {"axis": ...})})
    flags = _flags(imp, attrs, {"inverse": 0, "onesided": 0})
    x = node.input[0]
    shape, _ = _signal_type(imp, x)
    rank = len(shape)
    if opset20:
        given = _opt(node, 2)
        axis = -2 if given is None else one_value(imp.const(given, "axis"), "axis")
        if np.asarray(axis).dtype.kind not in "iu":
            raise ModelFileError(f"axis must be an integer, got {np.asarray(axis).dtype}")
        axis = int(axis)
    else:
        axis = attrs.get("axis", 1)
    axis = axis_in(axis, rank, "axis")
    if axis == rank - 1:
        raise ModelFileError(f"axis {axis} is the last dim of input shape {shape}, which holds "
                             f"the real and imaginary parts")
    n = shape[axis]
    half = flags["inverse"] and flags["onesided"] and shape[-1] == 2
    if flags["onesided"] and not half and (flags["inverse"] or shape[-1] == 2):
        why = " and ".join(w for w, on in (("inverse=1", flags["inverse"]),
                                           ("complex input", shape[-1] == 2)) if on)
        raise imp.unsupported(f"onesided=1 with {why}: only a real forward transform or the "
                              f"inverse of a complex half spectrum is one-sided (onnxruntime "
                              f"refuses it too)")
    length = given = _dft_length(imp, node)
    if length is None:
        length = dims.simplified(dims.mul(2, dims.sub(n, 1))) if half else n
    signal = imp.tensor(x)
    if half:
        if length == 0:
            raise imp.unsupported(f"a half spectrum of {n} bin: the inverse's default length "
                                  f"2 * ({n} - 1) is 0, an empty signal (torch refuses the "
                                  f"transform)")
        if not dims.known_equal(_half_bins(length), n):
            raise imp.unsupported(f"dft_length {length!r} of a half spectrum of {n!r} bins: "
                                  f"a transform of length L takes L // 2 + 1 bins (onnxruntime "
                                  f"reads other counts differently from numpy and torch)")
    elif type(n) is not int and type(length) is int:
        signal, shape = _at_most(imp, signal, shape, axis, length), list(shape)
        shape[axis] = imp.types[signal].shape[axis]
    elif type(n) is not int and not dims.known_equal(length, n):
        raise imp.unsupported(f"dft_length {length!r} along a run-time signal length {n!r}: "
                              f"supported as the signal's own length or a fixed one only")
    elif type(n) is int and type(length) is not int:
        raise imp.unsupported(f"dft_length {length!r} is a run-time dim along a fixed signal "
                              f"length {n}")
    _dft_on_axis(imp, node, signal, shape, axis, length, flags["inverse"],
                 flags["onesided"], node.output[0], node.output[0], given=given is not None)


def _at_most(imp, signal: str, shape: list, axis: int, length: int) -> str:
    """Graph tensor ``signal`` cut to its first ``length`` entries along ``axis`` (a run-time
    dim), as a DFT of that fixed length truncates a longer signal (a shorter one's zero
    padding has no column in the matrices): a ``slice`` to ``length``, unless the dim is such
    a slice to at most ``length`` already (torch.fft.rfft(x, n) under the dynamo exporter
    slices the signal before the DFT)."""
    end = dims.first_entries(shape[axis])
    if end is not None and end <= length:
        return signal
    return imp.emit("slice", [signal], [None], {"starts": [0], "ends": [length],
                                                "axes": [axis]}, suffix="/at_most")[0]


def _run_time_frames(imp, node, signal: str, frames, width: int, hop: int, out: str) -> str:
    """The frames of a run-time length (``(length - width) // hop + 1`` of them, a dim that a
    mask carries): positions ``arange(frames) * hop + arange(width)``, the first computed when
    the call runs, gathered along the length (:func:`.gather._runtime_gather`, each position
    checked against the length then) into [batch, frames, width, c]."""
    if not has_dim(imp, frames):
        raise imp.unsupported(f"{frames!r} frames of a run-time length: no tensor of the graph "
                              f"carries that count")
    starts = run_time_arange(imp, [frames, 1], 0)
    hop_tensor = imp.add_constant(np.array([[hop]], np.int64), f"{out}.hop")
    [starts] = imp.emit("mul", [starts, hop_tensor], [None], suffix="/starts")
    taps = imp.add_constant(np.arange(width, dtype=np.int64)[None, :], f"{out}.taps")
    [index] = imp.emit("add", [starts, taps], [None], suffix="/positions")
    framed = _runtime_gather(imp, node, signal, index, [frames, width], 1, graph=True,
                             internal=True)
    # a signal shorter than the frame has no frames, where onnxruntime refuses the call: the
    # frame's last tap is read too (an IndexRangeError there) and passed through a where
    last = imp.add_constant(np.array([width - 1], np.int64), f"{out}.last_tap")
    tap = _runtime_gather(imp, node, signal, last, [1], 1, graph=True, internal=True)
    [tap] = imp.emit("unflatten", [tap], [None], {"axis": 1, "sizes": [1, 1]},
                     suffix="/last_tap")
    true = imp.add_constant(np.ones((1, 1, 1, 1), bool), f"{out}.true")
    return imp.emit("where", [true, framed, tap], [None], suffix="/frames")[0]


@maps("STFT")
def _stft(imp, node, attrs):
    """signal [batch, length, 1 or 2], frame_step and frame_length constants, window absent,
    a constant or a run-time [frame_length] value, ``onesided`` (real signal only): the frames
    as one constant ``gather`` along the length ([batch, frames, frame_length, c]; over a
    run-time length :func:`_run_time_frames`), a ``mul`` by the window, and the DFT of each
    frame (:func:`_dft_on_axis`), [batch, frames, bins, 2]."""
    _only(imp, attrs, {"onesided": ...})
    onesided = _flags(imp, attrs, {"onesided": 1})["onesided"]
    x = node.input[0]
    signal, t = imp.tensor(x), imp.type_of(x)
    if len(t.shape) == 2 and t.dtype in ("float32", "float64"):  # [batch, length]: real, as
        # onnxruntime takes it (onnx-asr)
        [signal] = imp.emit("unflatten", [signal], [None], {"axis": 1, "sizes": [-1, 1]},
                            suffix="/real")
        shape, dtype = list(imp.types[signal].shape), t.dtype
    else:
        shape, dtype = _signal_type(imp, x)
    if len(shape) != 3:
        raise imp.unsupported(f"signal shape {shape}: needs [batch, length, 1 or 2] (or "
                              f"[batch, length], real)")
    total = shape[1]
    hop = _positive_constant(imp, node, 1, "frame_step")
    if hop is None:
        raise ModelFileError("frame_step is required")
    win = _opt(node, 2)
    width = _positive_constant(imp, node, 3, "frame_length")
    if win is not None:
        wshape = list(imp.type_of(win).shape)
        if len(wshape) != 1 or type(wshape[0]) is not int:
            raise imp.unsupported(f"window of shape {wshape}: needs one static dim")
        if width is not None and width != wshape[0]:
            raise ModelFileError(f"frame_length {width} differs from the window's length "
                                 f"{wshape[0]}")
        width = wshape[0]
    if width is None:
        raise ModelFileError("STFT needs a window or a frame_length")
    if type(total) is int and width > total:
        raise imp.unsupported(f"frame_length {width} is longer than the signal ({total})")
    if onesided and shape[-1] == 2:
        raise imp.unsupported("onesided=1 with a complex signal: only a real signal gives a "
                              "one-sided transform")
    out = node.output[0]
    if type(total) is int:
        frames = (total - width) // hop + 1
        imp.check_size("its frame index", [frames, width])
        index = np.arange(frames, dtype=np.int64)[:, None] * hop + np.arange(width)[None, :]
        [y] = imp.emit("gather", [signal, imp.add_constant(index, f"{out}.frames")], [None],
                       {"axis": 1}, suffix="/frames")
    else:
        frames = dims.add(dims.floordiv(dims.sub(total, width), hop), 1)
        y = _run_time_frames(imp, node, signal, frames, width, hop, out)
    if win is not None:
        if imp.is_const(win):
            w = imp.add_constant(imp.const(win).reshape(width, 1).astype(
                dtypes.to_numpy(dtype)), imp.origin.get(win, win))
        else:
            if imp.type_of(win).dtype != dtype:
                raise imp.unsupported(f"window {win!r} of dtype {imp.type_of(win).dtype}: "
                                      f"the signal is {dtype}")
            [w] = imp.emit("reshape", [imp.tensor(win)], [None], {"shape": [width, 1]},
                           suffix="/window")
        [y] = imp.emit("mul", [y, w], [None], suffix="/windowed")
    _dft_on_axis(imp, node, y, [shape[0], frames, width, shape[-1]], 2, width, False,
                 onesided, out, out)


# --- MelWeightMatrix -----------------------------------------------------------------------------


def mel_weight_matrix(ins: list, attrs: dict, cap: int) -> np.ndarray:
    """MelWeightMatrix (tf2onnx's ``tf.signal.linear_to_mel_weight_matrix``) of constant
    inputs, as ONNX's reference and onnxruntime work it out in float64: num_mel_bins + 2
    points evenly spaced on the mel scale (2595 * log10(1 + f / 700)) between the edges, each
    made the spectrogram bin floor((dft_length + 1) * f / sample_rate); triangle i rises from
    point i to point i + 1 (1 there) and falls to 0 at point i + 2. Shape (dft_length // 2 +
    1, num_mel_bins), cast to ``output_datatype``."""
    counts = [one_value(v, name) for v, name in zip(ins[:3], ("num_mel_bins", "dft_length",
                                                              "sample_rate"))]
    edges = [one_value(v, name) for v, name in zip(ins[3:], ("lower_edge_hertz",
                                                             "upper_edge_hertz"))]
    if any(v.dtype.kind not in "iu" for v in counts) or any(v.dtype.kind != "f" for v in edges):
        raise ModelFileError("num_mel_bins, dft_length and sample_rate must be integers, the "
                             "edges floats")
    mels, length, rate = map(int, counts)
    low, high = map(float, edges)
    if mels < 1 or length < 1 or rate < 1 or min(low, high) < 0:
        raise ModelFileError(f"num_mel_bins {mels}, dft_length {length}, sample_rate {rate} "
                             f"must be >= 1 and the edges {low}, {high} >= 0")
    code = attrs.get("output_datatype", 1)
    dtype = ONNX_DTYPES.get(code)
    if dtype is None or dtype == "bool":
        raise ModelFileError(f"attribute output_datatype={code!r} is not a numeric ABI dtype")
    bins = length // 2 + 1
    _need(bins * mels, cap, "MelWeightMatrix")
    low_mel, high_mel = (2595 * np.log10(1 + hz / 700) for hz in (low, high))
    mel = np.arange(mels + 2, dtype=np.float64) * ((high_mel - low_mel) / (mels + 2)) + low_mel
    points = np.floor((length + 1) * (700 * (10 ** (mel / 2595) - 1)) / rate).astype(np.int64)
    top = max(int(points.max()), math.floor((length + 1) * high / rate))
    if top >= bins:  # onnxruntime refuses an upper edge there too
        raise ModelFileError(f"upper_edge_hertz {high} reaches spectrogram bin {top}, past the "
                             f"{bins} of a DFT of length {length} at sample_rate {rate}")
    out = np.zeros((bins, mels), np.float64)
    for i, (left, centre, right) in enumerate(zip(points, points[1:], points[2:])):
        if centre == left:
            out[centre, i] = 1
        else:
            out[left:centre + 1, i] = (np.arange(left, centre + 1) - left) / (centre - left)
        if right > centre:
            out[centre:right, i] = (right - np.arange(centre, right)) / (right - centre)
    return out.astype(dtypes.to_numpy(dtype))


register_fold("MelWeightMatrix", lambda ins, a, cap: [mel_weight_matrix(ins, a, cap)])
