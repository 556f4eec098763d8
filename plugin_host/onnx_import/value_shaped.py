"""Ops whose output's shape depends on their input's values: NonZero and Unique.

The ABI's shapes are fixed or follow the inputs' run-time dims, so such an op cannot run in
the graph; it is folded at import where its input is a constant (an exporter's constant mask,
or an input fixed with ``--input-value``), with onnxruntime's numbers:

- NonZero: the int64 coordinates of the non-zero entries, one row per axis, in C order; a
  0-d input as one of shape [1] (onnxruntime's answer: a row of zeros, ONNX's shape inference
  says no row).
- Unique: the distinct entries (no ``axis``: of the flattened input) or slices along ``axis``,
  sorted ascending (slices lexicographically, in C order) or, with ``sorted=0``, in the order
  they first occur; each one's first index, the inverse indices and the counts, int64. Equal
  floats of different signs (0.0 and -0.0) are one entry, its value the first occurrence's. A
  nan is refused: onnxruntime orders entries by ``<``, under which a nan is equal to anything.

Over a run-time input the node is refused saying why (:data:`WHY`), with what keeps shapes
static in torch: ``torch.where(mask, x, 0)`` rather than ``x[mask]``, a fixed-size top-k
rather than a filtered list. NonMaxSuppression is refused for the same reason (its selected
boxes' count).
"""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedModelError
from .fold import axis_in
from .fold import register as register_fold
from .ops import FOLDED_BECAUSE, REFUSED

__all__ = ["WHY"]

#: Why an op of this module is folded only, said where its input is computed at run time
WHY = ("its output's shape depends on its input's values, and an artifact's shapes are fixed "
       "or follow its inputs' dims; it is folded where the input is a constant (or an input "
       "fixed with --input-value); in torch, torch.where(mask, x, 0) keeps the shape where "
       "x[mask] does not")


def _nonzero(ins, a: dict, cap: int) -> list:
    x = ins[0]
    if x.ndim == 0:
        return [np.zeros((1, int(x != 0)), np.int64)]
    return [np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)]


def _unique(ins, a: dict, cap: int) -> list:
    x = ins[0]
    if x.dtype.kind == "f" and np.isnan(x).any():
        raise UnsupportedModelError("a nan in Unique's input: onnxruntime orders entries by "
                                    "'<', under which a nan is equal to anything")
    if a.get("axis") is None:  # the entries of the flattened input, as slices of one entry
        x, axis = x.reshape(-1), 0
    else:
        axis = axis_in(a["axis"], x.ndim)
    rows = np.moveaxis(x, axis, 0).reshape(x.shape[axis], x.size // max(x.shape[axis], 1))
    _, first, inverse, counts = np.unique(rows, axis=0, return_index=True, return_inverse=True,
                                          return_counts=True)
    inverse = inverse.reshape(-1)
    if not a.get("sorted", 1):  # in the order each entry first occurs
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    return [np.take(x, first, axis=axis), *(v.astype(np.int64) for v in (first, inverse,
                                                                            counts))]


register_fold("NonZero", _nonzero)
register_fold("Unique", _unique)
FOLDED_BECAUSE.update(dict.fromkeys(("NonZero", "Unique"), WHY))
REFUSED["NonMaxSuppression"] = ("its selected boxes' count depends on the scores, and an "
                                "artifact's shapes are fixed or follow its inputs' dims")
