"""Spectral ops and Compress, with everything that decides a shape known at import: Compress of
a constant condition (tf2onnx's boolean-mask indexing) as a constant-index ``gather``; the
window functions HannWindow, HammingWindow and BlackmanWindow (torch.hann_window and the like
under the dynamo exporter) as constants. Registered in :data:`.ops.MAPPERS` and, for constant
inputs, :func:`.fold.register` on import.
"""

from __future__ import annotations

import math

import numpy as np

from abi import dtypes

from ..errors import ModelFileError
from .fold import _need, axis_in, one_value
from .fold import register as register_fold
from .ops import _only, maps
from .reader import ONNX_DTYPES

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
