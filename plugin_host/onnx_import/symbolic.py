"""Shape arithmetic over run-time dims, evaluated at import.

A model exported with a run-time batch (``dynamic_axes`` in torch's legacy exporter) computes
its reshape targets from the input's shape: ``x.view(x.size(0), -1)`` becomes ``Shape -> Gather
-> Unsqueeze -> Concat -> Reshape``. The shape holds a symbolic dim (``"batch"``), so the
constant folder cannot evaluate it. Here such values are int64 vectors whose entries are ints
or symbolic dims (:mod:`abi.ops.dims`), held as numpy object arrays: the index ops (Gather,
Slice, Concat, Unsqueeze, Squeeze, Identity, integer Cast, Reshape) move entries around with
the folder's own code, and Mul, Add, Sub and Div combine them with the dims arithmetic, as does
ReduceProd over a whole 1-D shape (``x.numel()``, which the legacy exporter writes as ``Shape
-> ReduceProd``; a Size node gives the same value). Mod by an int is evaluated where it is
exact (:func:`_mod`), an integer Div where the dividend is not negative, as floor quotients in
it may show (:func:`_bound`: a U-Net's ``h - 2*(h//2)``), and Transpose moves entries as the
index ops do (the legacy exporter's F.pad reorders its pads so). Max and Min are evaluated
where known at import (of a dim and itself: tf2onnx's Einsum broadcasts its operands' batch
dims so), Equal too (a run-time dim is never negative), and Where picks entries by such a known
condition: the legacy exporter's ``cls.expand(x.shape[0], -1, -1)`` replaces its -1 entries so.
A value whose entries all turn out fixed becomes an ordinary constant. Consumers that can take
a run-time dim (Reshape's target, Resize's sizes, Expand's shape) read the entries; a Cast to
float, or any other op that reads it as a tensor (Less, a Sub with a float, a Max not known at
import), makes the value a run-time tensor (:func:`.run_time_sizes.shape_value_tensor`), in int64,
computed when the call runs; what needs a constant there (a Pad's pads, a Slice's starts)
refuses it, naming its run-time dims.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Sequence

import numpy as np

from abi.ops import dims

from ..errors import ModelFileError, UnsupportedModelError
from .fold import fold

#: Ops evaluated on symbolic shape values (and constants).
OPS = frozenset({"Gather", "Slice", "Concat", "Unsqueeze", "Squeeze", "Identity", "Cast",
                 "Mul", "Add", "Sub", "Div", "Neg", "ReduceProd", "Reshape", "Equal",
                 "Where", "Max", "Min", "Mod", "Transpose"})

_INT_CASTS = frozenset({6, 7})  # ONNX TensorProto.INT32, INT64
_INT = re.compile(r"-?\d+")  # a factor of a product that is an int (dims.mul(-1, x))


def _entry(v):
    """A numpy int as a Python int; a symbolic dim (str) as itself."""
    return str(v) if isinstance(v, str) else int(v)  # numpy may hand back np.str_


class LeftToTheCall(Exception):
    """Raised by :func:`evaluate` where shape arithmetic would not be exact: the op is then
    mapped as any other, its shape values read as tensors computed when the call runs."""


def maybe_negative(d) -> bool:
    """Whether ``d`` may be negative: a negative int, or a dim less another (``h - 2*h1``),
    unless the floor quotients in it show it is not: ``h - 2*(h//2)``, a U-Net's skip
    connection less its map pooled and upsampled by 2, is ``h % 2`` (:func:`_bound`). A dim
    less an int (``h - 1``, a conv's size arithmetic) is taken as not negative, as at any size
    a model with such a window runs at; a number that is all the bound leaves is not, unless
    above -1: ``h//4 - 2*(h//8)`` is at least -3/4, an integer, so 0 or more, where
    ``h - 2*((h+1)//2)`` (0 or -1) may be negative."""
    if type(d) is int:
        return d < 0
    const, terms = _bound(d, lower=True)
    if any(c < 0 for c in terms.values()):
        return True
    return not terms and const <= -1


def prefix(d) -> tuple[str, int] | None:
    """``(x, c)`` where ``d`` is the ABI's name of the first c >= 1 entries of a run-time dim
    x, ``slice(x,0,c,1)``: min(x, c), what :func:`evaluate` makes of a Min of a dim
    and an int (``x.topk(min(300, x.shape[1]))``, a detector's count of queries). None
    otherwise."""
    if type(d) is not str or not d.startswith("slice(") or not d.endswith(")"):
        return None
    parts = d[len("slice("):-1].rsplit(",", 3)
    if len(parts) != 4:
        return None
    x, start, end, step = parts
    if start != "0" or step != "1" or not end.isdigit():
        return None
    return (x, int(end)) if int(end) >= 1 and dims.slice_len(x, 0, int(end), 1) == d else None


def _bound(d, lower: bool) -> tuple[Fraction, dict[tuple, Fraction]]:
    """A bound of ``d`` from below (``lower``) or above, linear in its terms that are no floor
    quotient (each a size: not negative), as an int and each term's coefficient: a quotient
    ``x // s`` (``s`` > 0) lies in [(x - s + 1) / s, x / s], ``x`` bounded the same way (so
    ``h - 2*(h//2)`` is at least ``h - 2*h/2``, 0), and a :func:`prefix`, min(x, c), is at
    most x (``t - min(t, 5)`` is at least 0); like terms added up first."""
    const, flat = _flat_sum(d)
    grouped: dict[tuple, int] = {}  # like terms added up first: 2*q - q is q, not 2*q less q
    for coefficient, names in flat:
        grouped[names] = grouped.get(names, 0) + coefficient
    total, out = Fraction(const), {}
    for names, coefficient in grouped.items():
        if not coefficient:
            continue
        if len(names) == 1 and (coefficient > 0) != lower:
            first = prefix(names[0])  # min(x, c) is at most x: bounded above by x's bound
            if first is not None:
                inner_const, inner = _bound(first[0], lower=False)
                total += coefficient * inner_const
                for names_in, c in inner.items():
                    out[names_in] = out.get(names_in, 0) + coefficient * c
                continue
        quotient = dims.whole_quotient(dims.product(names)) if len(names) == 1 else None
        if quotient is None:
            out[names] = out.get(names, 0) + coefficient
            continue
        x, s = quotient
        from_below = (coefficient > 0) == lower  # the quotient's lower bound is wanted
        inner_const, inner = _bound(x, from_below)
        scale = Fraction(coefficient, s)
        total += scale * (inner_const - (s - 1 if from_below else 0))
        for names_in, c in inner.items():
            out[names_in] = out.get(names_in, 0) + scale * c
    return total, {names: c for names, c in out.items() if c}


def _div(a, b):
    """ONNX Div on int64: truncation. A floor quotient of a dim is the same where the dim and
    the divisor are not negative; with a dim less another (``(h - 2*h1) // 2``, which may be
    negative) or a negative divisor it is left to the call (:class:`LeftToTheCall`)."""
    if b == 0:
        raise ModelFileError("integer division by zero in shape arithmetic")
    a = dims.simplified(a) if type(a) is str else a  # h+3*((h+2)//3)-h: Swin's padded size
    if type(a) is int and type(b) is int:
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b > 0) else -q
    if maybe_negative(a) or maybe_negative(b):
        raise LeftToTheCall
    if type(a) is str and type(b) is int:
        (low, low_terms), (high, high_terms) = _bound(a, lower=True), _bound(a, lower=False)
        if not low_terms and not high_terms and math.ceil(low) // b == math.floor(high) // b:
            return math.ceil(low) // b  # (h - 2*(h//2)) // 2, a U-Net's pad before: 0
    return dims.floordiv(a, b)


def _flat_sum(d, times: int = 1) -> tuple[int, list[tuple[int, tuple]]]:
    """``d`` times ``times`` as an int and its terms, (coefficient, names of a product), each
    term that is an int times a sum in parentheses (``4-(t-4*(t//4))``, the dynamo exporter's
    ``(-1)*(h-3*(h//3))+3``) opened into that sum's own terms."""
    const, terms = dims.as_sum(d)
    const *= times
    flat = []
    for sign, term in terms:
        coefficient, names = dims.as_product(term)
        coefficient *= times * sign
        for n in [n for n in names if _INT.fullmatch(n)]:  # (-1)*x: a factor -1
            coefficient *= int(n)
        names = tuple(n for n in names if not _INT.fullmatch(n))
        if len(names) == 1 and dims.as_sum(names[0]) != (0, [(1, names[0])]):
            inner_const, inner = _flat_sum(names[0], coefficient)
            const += inner_const
            flat += inner
        else:
            flat.append((coefficient, names))
    return const, flat


def _mod(a, b, fmod: bool):
    """ONNX Mod of shape entries by a positive int ``b``: of a dim, ``a - b * (a // b)``
    (``t % 4``), exact as a dim is not negative; of a sum, its terms whose coefficient b
    divides left out, and one term x left with coefficient 1 or -1 modulo b and an int r in
    [0, b): ``x + r - b * ((x + r) // b)``, or ``b * ((x + b - 1 - r) // b) - x + r`` for
    ``(r - x) mod b`` (Swin's pad to a multiple of its window, ``(ws - h % ws) % ws``, is
    ``ws * ((h + ws - 1) // ws) - h``). Anything else (a dim modulo a dim, ``2*t % 4``, C's
    fmod of what may be negative) is left to the call (:class:`LeftToTheCall`)."""
    if type(b) is not int or b <= 0:
        raise LeftToTheCall
    if type(a) is int:
        return int(math.fmod(a, b)) if fmod else a % b
    if fmod and maybe_negative(a):
        raise LeftToTheCall
    const, terms = _flat_sum(a)
    kept = [(coefficient % b, dims.product(names)) for coefficient, names in terms
            if coefficient % b]
    r = const % b
    if not kept:
        return r
    if len(kept) > 1 or kept[0][0] not in (1, b - 1):
        raise LeftToTheCall
    k, x = kept[0]
    if k == 1:
        return dims.sub(dims.add(x, r), dims.mul(b, dims.floordiv(dims.add(x, r), b)))
    return dims.add(dims.sub(dims.mul(b, dims.floordiv(dims.add(x, b - 1 - r), b)), x), r)


def _extremum(larger: bool):
    """Max (``larger``) or Min of two shape entries, where it is known at import: of ints, of
    a dim and itself (tf2onnx's Einsum takes the Max of both operands' batch dims), of a dim
    and an int at most 0 (a size is never negative; ``max(0, 8 - t)`` of a difference that
    may be negative, :func:`maybe_negative`, is not known), of two that differ by an int (the
    dynamo exporter's length of torch.diagonal of a square at an offset, ``min(t, t - 1)``);
    Min of a dim and an int n >= 1 is the ABI's dim of the dim's first n entries,
    ``slice(t,0,n,1)`` (``x.topk(min(300, x.shape[1]))``); anything else (``max(batch, 2)``)
    is left to the call (:class:`LeftToTheCall`)."""
    def pick(a, b):
        if type(a) is int and type(b) is int:
            return max(a, b) if larger else min(a, b)
        if a == b:
            return a
        for d, n in ((a, b), (b, a)):
            if type(n) is int and n <= 0 and not maybe_negative(d):
                return d if larger else n
            if type(n) is int and not larger:  # its first n entries (prefix)
                return dims.slice_len(d, 0, n, 1)
        apart = dims.simplified(dims.sub(a, b))
        if type(apart) is int:
            return a if (apart >= 0) == larger else b
        raise LeftToTheCall
    return pick


_ARITHMETIC = {"Mul": dims.mul, "Add": dims.add, "Sub": dims.sub, "Div": _div,
               "Max": _extremum(True), "Min": _extremum(False)}


def evaluate(op: str, values: Sequence[np.ndarray | None], attrs: dict, *, outputs: int,
             cap: int) -> list[np.ndarray]:
    """``op`` on ``values`` (int64 constants and object arrays of dims); object arrays out,
    but a bool array from Equal (known at import: see :func:`_equal`)."""
    if op == "Slice" and any(v is not None and v.dtype == object and resolved(v) is None
                             for v in values[1:]):
        raise LeftToTheCall  # a length known at run time: a tensor's, not a shape's
    if op in ("Max", "Min") and any(v.dtype != object and v.dtype.kind not in "iu"
                                    for v in values):
        raise LeftToTheCall  # of a float: a tensor, as before Max and Min were evaluated
    condition = values[0] if op == "Where" else None
    if condition is not None and condition.dtype != bool:
        raise UnsupportedModelError("Where chooses between shape entries by a condition that "
                                    "holds run-time dims")
    if any(v is not None and v is not condition and v.dtype != object
           and v.dtype.kind not in "iu" for v in values):
        raise UnsupportedModelError(f"{op} mixes a shape holding run-time dims with "
                                    f"non-integer values")
    if op == "Equal":
        return [_equal(*values)]
    if op == "Where":
        a, b = (v.astype(object) for v in values[1:])
        if math.prod(np.broadcast_shapes(condition.shape, a.shape, b.shape)) > cap:
            raise ModelFileError(f"Where's broadcast result is above the {cap} element cap")
        return [_normalized(np.where(condition, a, b))]
    if op == "Cast":
        if attrs.get("to") not in _INT_CASTS:
            raise UnsupportedModelError("a shape holding run-time dims cast to a non-integer "
                                        "type")
        return [values[0]]
    if op == "ReduceProd":
        return [_product(values, attrs)]
    if op == "Neg":  # x[..., -n:]: a start of minus a dim
        out = np.frompyfunc(lambda x: dims.sub(0, _entry(x)), 1, 1)(values[0].astype(object))
        return [_normalized(np.asarray(out, dtype=object))]
    if op in ("Max", "Min") and len(values) != 2:
        if len(values) == 1:
            return [_normalized(values[0])]
        first = evaluate(op, values[:2], attrs, outputs=1, cap=cap)
        return evaluate(op, [*first, *values[2:]], attrs, outputs=1, cap=cap)
    if op in _ARITHMETIC or op == "Mod":
        fn = _ARITHMETIC[op] if op != "Mod" else (
            lambda x, y: _mod(x, y, bool(attrs.get("fmod", 0))))
        a, b = values
        shape = np.broadcast_shapes(a.shape, b.shape)
        if math.prod(shape) > cap:
            raise ModelFileError(f"{op}'s broadcast result {shape} is above the {cap} element "
                                 f"cap")
        out = np.frompyfunc(lambda x, y: fn(_entry(x), _entry(y)), 2, 1)(
            a.astype(object), b.astype(object))
        return [_normalized(np.asarray(out, dtype=object))]
    return [_normalized(r) for r in fold(op, list(values), attrs, outputs=outputs, cap=cap)]


def _equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Equal of shape entries, where it is known at import: fixed sizes compare; a run-time dim
    equals itself and never a negative number (a size is not negative: the legacy exporter's
    ``expand(n, -1, -1)`` tests its target for -1). Anything else (``'batch' == 1``) is known
    only at run time: UnsupportedModelError."""
    def entry(x, y):
        x, y = _entry(x), _entry(y)
        if type(x) is int and type(y) is int or x == y:
            return x == y
        if type(x) is int and x < 0 or type(y) is int and y < 0:
            return False
        raise UnsupportedModelError(f"Equal of {x!r} and {y!r} in a shape holding run-time "
                                    f"dims is known only at run time")
    out = np.frompyfunc(entry, 2, 1)(a.astype(object), b.astype(object))
    return np.asarray(out, dtype=bool)


def _product(values: Sequence[np.ndarray | None], attrs: dict) -> np.ndarray:
    """ReduceProd of a whole 1-D shape value (its element count), with or without keepdims."""
    x = values[0]
    axes = values[1] if len(values) > 1 and values[1] is not None else attrs.get("axes")
    if axes is not None and not np.size(axes) and attrs.get("noop_with_empty_axes", 0):
        return x
    if x.ndim != 1 or (axes is not None and any(int(a) not in (0, -1)
                                                for a in np.ravel(axes))):
        raise UnsupportedModelError("ReduceProd of a shape holding run-time dims: only the "
                                    "product of a whole 1-D shape is evaluated")
    count = 1
    for v in x:
        count = dims.mul(count, _entry(v))
    out = np.empty((1,) if attrs.get("keepdims", 1) else (), dtype=object)
    out[...] = count
    return out


def _normalized(value: np.ndarray) -> np.ndarray:
    """An object array of Python ints and symbolic dims (no numpy ints)."""
    out = np.empty(value.size, dtype=object)
    out[:] = [_entry(v) for v in value.reshape(-1)]
    return out.reshape(value.shape)


def resolved(value: np.ndarray) -> np.ndarray | None:
    """``value`` as an int64 constant when none of its entries is symbolic, else None."""
    entries = [_entry(v) for v in value.reshape(-1)]
    if any(type(v) is str for v in entries):
        return None
    return np.array(entries, dtype=np.int64).reshape(value.shape)


def entries(value: np.ndarray) -> list:
    """The entries of a 1-D shape value: ints and symbolic dims."""
    return [_entry(v) for v in value.reshape(-1)]


def _through_one_axis(have: list, want: list, in_shape: Sequence, target: Sequence
                      ) -> list[tuple[str, int, object]]:
    """:func:`regroup`'s steps where the dims do not fall into groups of equal products: a
    target whose -1 is no product of the input's dims (``(b, 8, h, 1, w)`` to ``(b, 8, -1,
    2, w)``: h/2, torch's pixel_unshuffle), elements that cross a run-time dim (``(b, 6, s,
    4)`` to ``(b, 3, s, 8)``), run-time dims reordered, or a count known equal only when the
    call runs (YOLO12's area attention, ``(4*b, (h*w)//4, 2, 32)`` to ``(b, h, w, 64)``). The
    dims equal on both sides from the left and from the right stay, and the rest of the input
    is flattened into one axis and unflattened into the rest of the target (its run-time
    sizes read from tensors that have them, a -1 left to the call): row-major, as a Reshape
    is, and the unflatten refuses, when the call runs, a size that does not split, as
    onnxruntime refuses the Reshape's element count. ModelFileError when the dims around a -1
    are all fixed: they then do not divide."""
    lo = 0
    while lo < min(len(have), len(want)) and want[lo] is not None and have[lo] == want[lo]:
        lo += 1
    hi_have, hi_want = len(have), len(want)
    while (hi_have > lo and hi_want > lo and want[hi_want - 1] is not None
           and have[hi_have - 1] == want[hi_want - 1]):
        hi_have, hi_want = hi_have - 1, hi_want - 1
    if None in want and (hi_have == lo or all(not p[1] for p in have[lo:hi_have]) and all(
            p is None or not p[1] for p in want[lo:hi_want])):
        raise ModelFileError(f"cannot reshape {list(in_shape)} to {list(target)}: the -1 is "
                             f"not a whole part of the input")
    steps: list[tuple[str, int, object]] = []
    if hi_have - lo > 1:
        steps.append(("flatten", lo, hi_have - 1))
    steps.append(("unflatten", lo, list(target[lo:hi_want])))
    return steps


def counts_differ(in_shape: Sequence, target: Sequence) -> tuple[dims.Dim, dims.Dim] | None:
    """The element counts of ``in_shape`` and of ``target`` (no -1) when they are products of
    different run-time dims, else None. Certain only where both are products of ints and
    plain names (two such products of different names differ at some sizes); an expression
    of another kind (a sum, a broadcast) may equal anything, so it never counts as
    different. A target holding a size the exporter saw when tracing, written as a constant
    where the model computes it from a run-time dim (torch's legacy exporter,
    MultiheadAttention under a dynamic length), is such a target. Products of the same names
    with different ints (``24*batch`` and ``18*batch``) are :func:`reshape_target`'s to
    refuse: the file is wrong at every size but 0."""
    a, b = _count(in_shape), _count(target)
    if a[1] == b[1] or not all(dims.is_plain_name(n) for n in a[1] + b[1]):
        return None
    return dims.product([a[0], *a[1]]), dims.product([b[0], *b[1]])


def _count(shape: Sequence) -> dims.Product:
    """The element count of ``shape`` as a product, its dims' names kept whole however long
    (a product written out as one dim may be cut to a hashed name)."""
    count: dims.Product = (1, ())
    for d in shape:
        count = dims.product_times(count, dims.as_product(d))
    return count


def reshape_target(target: Sequence, in_shape: Sequence) -> list[int] | None:
    """A Reshape target holding symbolic dims as the ABI's ``reshape`` takes it (ints, at most
    one -1), or None when it cannot be written so.

    One symbolic entry becomes the -1 (a reshape keeps the element count, so it is inferred
    right). Where the target's symbolic dims are exactly the input's (``x.view(x.size(0), -1)``)
    the fixed parts must match: a -1 is then a fixed size, the input's fixed elements over the
    target's, and without a -1 the fixed elements must be equal (ModelFileError otherwise).
    """
    target = list(target)
    symbols = [d for d in target if type(d) is not int]
    rest = list(in_shape)
    for s in symbols:
        if s not in rest:
            break
        rest.remove(s)
    else:
        if all(type(d) is int for d in rest):  # the symbols cancel: compare the fixed parts
            numel = math.prod(rest)
            known = math.prod(d for d in target if type(d) is int and d != -1)
            if -1 in target and known > 0 and numel % known == 0:
                target = [numel // known if d == -1 else d for d in target]
                symbols = [d for d in target if type(d) is not int]
            elif -1 in target or known != numel:
                raise ModelFileError(f"cannot reshape {list(in_shape)} to {target}: the fixed "
                                     f"dims hold {numel} elements per run-time one, the target "
                                     f"{known}")
    if len(symbols) > 1 or (symbols and -1 in target):
        return None  # the ABI's reshape infers one dim; two run-time ones it cannot
    return [-1 if type(d) is not int else d for d in target]


def _quotients_of(in_shape: Sequence, target: Sequence) -> dict[str, tuple[str, int]]:
    """name x -> ``("x//s", s)`` for each run-time name x of ``in_shape`` that ``target``
    divides by exactly one int s > 1 (``x//s``, as the exporters write it)."""
    names = {n for d in in_shape for n in dims.as_product(d)[1]}
    found: dict[str, set] = {}
    for d in target:
        if type(d) is not str:
            continue
        q = dims.as_product(d)
        parts = dims.quotient(q[1][0]) if q[0] == 1 and len(q[1]) == 1 else None
        if parts is not None and parts[1] == 0 and parts[2] > 1 and parts[0] in names:
            found.setdefault(parts[0], set()).add((q[1][0], parts[2]))
    return {x: next(iter(v)) for x, v in found.items() if len(v) == 1}


def _split_product(p: dims.Product, split: dict[str, tuple[str, int]]) -> dims.Product:
    """``p`` with each name x of ``split`` written as ``s * (x//s)``."""
    coefficient, names = p
    for n in names:
        if n in split:
            coefficient *= split[n][1]
    return coefficient, tuple(sorted(split[n][0] if n in split else n for n in names))


def regroup(in_shape: Sequence, target: Sequence) -> list[tuple[str, int, object]]:
    """A Reshape from ``in_shape`` to ``target`` that keeps run-time dims apart, as
    ``flatten`` and ``unflatten`` steps: ``("flatten", start, end)`` and ``("unflatten",
    axis, sizes)``, in the order to apply them (axes of the tensor as it is then).

    The dims are read as products (:func:`abi.ops.dims.as_product`) and cut into the fewest
    consecutive groups whose products are equal on both sides: ``(b, s, 48)`` to ``(b, s, 3,
    16)`` is (b)(s)(48 | 3, 16); torch's MultiheadAttention's ``(s, b, 16)`` to ``(s, b*2,
    8)`` is (s)(b, 16 | b*2, 8). Each group that changes is flattened into one axis and
    unflattened into the target's dims: ints, and one run-time dim as the -1, or two and more
    as the dims themselves (``(s*b, 16)`` to ``(s, b, 16)``: ``[("unflatten", 0, ["s",
    "b"])]``), which the importer reads from a tensor that has them. Where no such groups
    exist, :func:`_through_one_axis`'s steps. A -1 in ``target`` is what the others leave of
    the input; when that is no product, :func:`_through_one_axis`'s steps too. No steps: the
    shape is unchanged.

    A floor quotient ``x//s`` on one side of a run-time dim x on the other (a Swin window
    partition over a run-time height, ``(b, h, w, c)`` to ``(b, h//4, 4, w//4, 4, c)``, and
    back) reads x as ``s * (x//s)``: the unflatten of x into ``(-1, s)`` refuses, when the
    call runs, an x that s does not divide, as onnxruntime refuses the Reshape's element
    count; the way back flattens ``(x//s, s)`` and settles the axis as x with an unflatten
    that reads x from a tensor that has it."""
    split = {**_quotients_of(target, in_shape), **_quotients_of(in_shape, target)}
    have = [_split_product(dims.as_product(d), split) for d in in_shape]
    want = [None if d == -1 else _split_product(dims.as_product(d), split) for d in target]
    whole = (1, ())
    for p in have:
        whole = dims.product_times(whole, p)
    rest = (1, ())
    for p in want:
        rest = rest if p is None else dims.product_times(rest, p)
    if None in want:
        fill = dims.product_over(whole, rest)
        if fill is None and want.count(None) == 1:
            return _through_one_axis(have, want, in_shape, target)
        if fill is None or want.count(None) > 1:
            raise ModelFileError(f"cannot reshape {list(in_shape)} to {list(target)}: the -1 "
                                 f"is not a whole part of the input")
        want = [fill if p is None else p for p in want]
    elif rest != whole:
        return _through_one_axis(have, want, in_shape, target)
    groups, i, j = [], 0, 0
    while i < len(have) and j < len(want):
        gi, gj, pi, pj = [i], [j], have[i], want[j]
        i, j = i + 1, j + 1
        while pi != pj:
            if dims.product_over(pj, pi) is not None and i < len(have):
                pi, i = dims.product_times(pi, have[i]), i + 1
                gi.append(i - 1)
            elif dims.product_over(pi, pj) is not None and j < len(want):
                pj, j = dims.product_times(pj, want[j]), j + 1
                gj.append(j - 1)
            else:
                return _through_one_axis(have, want, in_shape, target)
        groups.append((gi, gj))
    if any(p != (1, ()) for p in have[i:] + want[j:]) or not groups and (have or want):
        return _through_one_axis(have, want, in_shape, target)
    if groups:  # trailing ones join the last group
        groups[-1][0].extend(range(i, len(have)))
        groups[-1][1].extend(range(j, len(want)))
    steps: list[tuple[str, int, object]] = []
    for gi, gj in reversed(groups):  # right to left: the axes to the left stay put
        if [have[k] for k in gi] == [want[k] for k in gj]:
            continue
        if len(gi) > 1:
            steps.append(("flatten", gi[0], gi[-1]))
        if len(gj) > 1:
            sizes = [target[k] if target[k] != -1 else dims.product([want[k][0], *want[k][1]])
                     for k in gj]
            if sum(type(d) is not int for d in sizes) == 1:  # the unflatten's -1
                sizes = [d if type(d) is int else -1 for d in sizes]
            steps.append(("unflatten", gi[0], sizes))
        elif type(target[gj[0]]) is str and not dims.known_equal(
                dims.product(in_shape[k] for k in gi), target[gj[0]]):
            steps.append(("unflatten", gi[0], [target[gj[0]]]))  # settled as the target's
    return steps
