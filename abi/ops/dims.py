"""Arithmetic on dims that may be symbolic.

A dim is an ``int`` (a fixed size) or a ``str`` (a symbolic size: a name such as ``"batch"``
or an expression a shape rule built from names, such as ``"(H-1)//2+1"``). Expressions are
never evaluated; they are only compared for equality, so every function here builds them
deterministically from its arguments and folds what it can into ints. Products and exact
divisions of names and ints are read as products (:func:`as_product`): ``"batch*2"`` and
``"2*batch"`` are the same size, and ``(16*batch)//8`` is written ``2*batch``.

Comparisons are three-valued: two dims are *known equal* (same int, the same string, or the
same product of the same names), *known different* (two different ints), or *undecided*
(anything else involving a symbol). Shape rules refuse only what is known different;
undecided cases are checked at run time, when the tensors have real shapes.
"""

from __future__ import annotations

import hashlib
import re
from typing import Iterable

__all__ = ["Dim", "Product", "as_product", "as_sum", "is_static", "known_equal",
           "known_different", "add", "sub", "mul", "floordiv", "quotient", "product", "total",
           "broadcast", "broadcast_operands", "window_out", "pool_out", "transposed_out",
           "simplified", "slice_len", "slice_range", "first_entries"]

Dim = int | str

#: Longest expression kept as text. A longer one (a hostile graph can double an expression's
#: length with each self-concat) is replaced by a fixed-length name derived from its SHA-256,
#: which still compares equal exactly when the expressions are equal.
MAX_EXPRESSION = 200


def _cap(d: Dim) -> Dim:
    if type(d) is str and len(d) > MAX_EXPRESSION:
        return "expr_" + hashlib.sha256(d.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return d


def is_plain_name(name: str) -> bool:
    """Whether ``name`` (one name of a product) is a plain dim name (``batch``), not an
    expression (``broadcast(a,b)``, ``(h*w)//4``) nor one cut to a hashed name."""
    return name.isidentifier() and _HASHED.fullmatch(name) is None


#: what :func:`_cap` writes for an expression too long to keep
_HASHED = re.compile(r"expr_[0-9a-f]{16}")


def is_static(d: Dim) -> bool:
    """True when ``d`` is a fixed size."""
    return type(d) is int


#: a dim as a product: (coefficient, its symbolic names sorted, each as often as it occurs)
Product = tuple[int, tuple[str, ...]]


def as_product(d: Dim) -> Product:
    """``d`` as a product: an int is ``(d, ())``; a name ``(1, (name,))``; a product and exact
    division of names and ints, as this module writes them (``"batch*2"``, ``"2*batch"``,
    ``"(16*batch)//8"``), their coefficient and names. Anything else (a sum, a division that
    does not come out whole) is one name of its own, compared as written, except that a floor
    quotient of a name and ints is written one way (:func:`_atom`: a conv's ``(H-4)//4+1``
    is ``H//4``)."""
    if type(d) is int:
        return d, ()
    parsed = _product(str(d))
    return parsed if parsed is not None else (1, (_atom(str(d)),))


#: a name, and a sum of signed ints after an expression
_NAME = re.compile(r"[A-Za-z_]\w*")
_TRAILING_INTS = re.compile(r"(.*?)((?:[+-]\d+)+)")


def whole_quotient(d: Dim) -> tuple[str, int] | None:
    """``(x, s)`` where ``d`` is one name of a product (:func:`as_product`) written ``x//s``,
    x any expression (a product of dims: ``(h*w)//4``, a YOLO12 area attention's tokens per
    area) and s an int > 1; None otherwise."""
    if type(d) is not str:
        return None
    coefficient, names = as_product(d)
    if coefficient != 1 or len(names) != 1:
        return None
    parts = _top_level(_unwrapped(names[0]), "//")
    if len(parts) != 2 or not _digits(parts[1].strip()) or int(parts[1]) < 2:
        return None
    return _unwrapped(parts[0]), int(parts[1])


def quotient(text: str) -> tuple[str, int, int] | None:
    """``text`` as ``(x + a) // s`` of a name x and ints (s >= 1), or None: a name plus ints,
    and floor quotients of such by ints, nested too, with ints added after each
    (``((H-1)//2+1-1)//2+1``, two stride-2 convs' output size, is ``(H+3)//4``): exact for
    integers, as floor(floor(z / s) / t) is floor(z / (s * t))."""
    text = _unwrapped(text)
    tail = _TRAILING_INTS.fullmatch(text)
    head, added = (tail.group(1), sum(int(v) for v in re.findall(r"[+-]\d+", tail.group(2)))
                   ) if tail and tail.group(1) else (text, 0)
    head = _unwrapped(head)
    if _NAME.fullmatch(head):
        return head, added, 1
    parts = _top_level(head, "//")
    if len(parts) != 2 or not _digits(parts[1]) or int(parts[1]) == 0:
        return None
    inner = quotient(parts[0])
    if inner is None:
        return None
    x, a, s = inner
    s *= int(parts[1])
    return x, a + added * s, s


def _atom(text: str) -> str:
    """``text`` as one name of a product, parentheses around it dropped, and a floor
    quotient of a name plus ints (:func:`quotient`) written one way: ``(x+a)//s+b`` is
    ``(x+a+b*s)//s`` (exact for integers), ``x//s`` when that sum is 0. So a conv's output
    size ``(H-4)//4+1`` and an exporter's ``H//4`` are one name, and so are two stride-2
    convs' ``((H-1)//2+1-1)//2+1`` and one stride-4 conv's ``(H-1)//4+1``. A name plus
    ints is the name plus their sum: a pad's ``h+2`` less a conv's 2, ``h+2-2``, is ``h``."""
    text = _unwrapped(text)
    parts = quotient(text.replace(" ", ""))
    if parts is None:
        return _product_quotient(text)
    x, shift, s = parts
    if s == 1:  # a name plus ints, summed: h+2-2 is h
        return x if shift == 0 else f"{x}{shift:+d}"
    return f"{x}//{s}" if shift == 0 else f"({x}{shift:+d})//{s}"


def _product_quotient(text: str) -> str:
    """A floor quotient of a product of names and ints by an int, ``(w*h)//4``, written one
    way, its names sorted: ``(h*w)//4``; any other ``text`` as it is."""
    parts = _top_level(text, "//")
    if len(parts) != 2 or not _digits(parts[1].strip()):
        return text
    head = _product(parts[0])
    if head is None or not head[1]:
        return text
    factors = ([str(head[0])] if head[0] != 1 else []) + [_term(n) for n in head[1]]
    return f"({'*'.join(factors)})//{int(parts[1])}"


def _top_level(text: str, sep: str) -> list[str]:
    """``text`` split at each ``sep`` outside parentheses."""
    parts, depth, start, k = [], 0, 0, 0
    while k < len(text):
        c = text[k]
        depth += (c == "(") - (c == ")")
        if depth == 0 and text.startswith(sep, k):
            parts.append(text[start:k])
            start = k = k + len(sep)
            continue
        k += 1
    return parts + [text[start:]]


def _wrapped(text: str) -> bool:
    """Whether ``text`` is one parenthesized expression, ``(...)``."""
    depth = 0
    for k, c in enumerate(text):
        depth += (c == "(") - (c == ")")
        if depth == 0:
            return k == len(text) - 1 and k > 0
    return False


def _unwrapped(text: str) -> str:
    """``text`` without the parentheses around all of it: the name it is as a dim."""
    text = text.strip()
    while _wrapped(text):
        text = text[1:-1].strip()
    return text


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit()


def _product(text: str) -> Product | None:
    text = text.strip()
    while _wrapped(text):
        text = text[1:-1].strip()
    if len(_top_level(text, "+")) > 1 or len(_top_level(text, "-")) > 1:
        return None  # a sum: one name of its own
    quotient = _top_level(text, "//")
    if len(quotient) == 2:
        head, divisor = _product(quotient[0]), quotient[1].strip()
        if head is None or not _digits(divisor) or int(divisor) == 0 or head[0] % int(divisor):
            return None
        return head[0] // int(divisor), head[1]
    if len(quotient) > 2:
        return None
    coefficient, names = 1, []
    for factor in (f.strip() for f in _top_level(text, "*")):
        if _digits(factor):
            coefficient *= int(factor)
        elif factor.isidentifier():
            names.append(factor)
        elif _wrapped(factor):  # a product in parentheses, or any other expression: a name
            inner = _product(factor)
            if inner is None:
                names.append(_atom(factor))
            else:
                coefficient *= inner[0]
                names += inner[1]
        else:
            return None
    return coefficient, tuple(sorted(names))


def product_times(a: Product, b: Product) -> Product:
    """``a * b`` of two products."""
    return a[0] * b[0], tuple(sorted(a[1] + b[1]))


def product_over(a: Product, b: Product) -> Product | None:
    """``a / b`` when it is a product (b's coefficient divides a's, b's names are among
    a's), else None."""
    names = list(a[1])
    for name in b[1]:
        if name not in names:
            return None
        names.remove(name)
    if b[0] <= 0 or a[0] % b[0]:
        return None
    return a[0] // b[0], tuple(names)


def known_equal(a: Dim, b: Dim) -> bool:
    """True when ``a`` and ``b`` are certainly the same size: equal ints, identical strings,
    the same product of the same names (``"batch*2"`` and ``"2*batch"``), or the same sum of
    such products with like terms added up (``"batch+batch"`` and ``"2*batch"``)."""
    if a == b or type(a) is str and type(b) is str and as_product(a) == as_product(b):
        return True
    return type(a) is str and type(b) is str and _grouped(a) == _grouped(b)


def _grouped(d: Dim) -> tuple[int, dict]:
    """``d`` as its int and its terms' coefficients by their names, like terms added up and
    the ones that cancel left out (``"h+h-w+1"`` is ``(1, {("h",): 2, ("w",): -1})``)."""
    const, terms = as_sum(d)
    grouped: dict[tuple, int] = {}
    for sign, term in terms:
        coefficient, names = as_product(term)
        grouped[names] = grouped.get(names, 0) + sign * coefficient
    return const, {names: c for names, c in grouped.items() if c}


def known_different(a: Dim, b: Dim) -> bool:
    """True only when both are fixed sizes and they differ; undecided cases give False."""
    return type(a) is int and type(b) is int and a != b


def _term(d: Dim) -> str:
    """``d`` as an operand of ``*`` or ``//``: names and ints bare, expressions parenthesized."""
    text = str(d)
    if type(d) is int and d >= 0 or text.isidentifier():
        return text
    return f"({text})"


def add(a: Dim, b: Dim) -> Dim:
    """``a + b``; an int when both are ints; an int added to an expression that ends in ints
    joins them (``h+2`` and -2 is ``h``)."""
    if type(a) is int and type(b) is int:
        return a + b
    if type(a) is int:
        a, b = b, a
    if type(b) is int:
        tail = _TRAILING_INTS.fullmatch(str(a))
        if tail and tail.group(1) and not tail.group(1).endswith(("+", "-", "*", "/", "(")):
            a = tail.group(1)  # its ints and b as one: (h+2)-2 is h
            b += sum(int(v) for v in re.findall(r"[+-]\d+", tail.group(2)))
        if b == 0:
            return a
        return _cap(f"{a}+{b}" if b > 0 else f"{a}-{-b}")
    return _fixed_or(_cap(f"{a}+{b}"))


def _fixed_or(d: Dim) -> Dim:
    """``d``, or the int it is where its terms cancel (``seq-seq`` is 0: GPT-Neo's mask rows
    ``key_length - query_length`` of one length)."""
    const, terms = _grouped(d)
    return const if not terms else d


def sub(a: Dim, b: Dim) -> Dim:
    """``a - b``; an int when both are ints (a shape value's entry, such as ``w - 1`` for a
    linspace's step, may be negative; a dim is never)."""
    if type(b) is int:
        return add(a, -b)
    if type(a) is int and a == 0:
        return _cap(f"0-{_term(b)}")
    return _fixed_or(_cap(f"{a}-{_term(b)}"))


def as_sum(d: Dim) -> tuple[int, list[tuple[int, Dim]]]:
    """``d`` as an int plus signed terms, split at its ``+`` and ``-`` outside parentheses
    (what :func:`add` and :func:`sub` write): ``"w-2*h+1"`` is ``(1, [(1, "w"), (-1,
    "2*h")])``. A term is a dim of no sum at its top (a product, a quotient, a name)."""
    if type(d) is int:
        return d, []
    text = _unwrapped(str(d))
    text = "0" + text if text.startswith("-") else text
    const, terms, depth, start, sign = 0, [], 0, 0, 1
    for k, c in enumerate(text + "+"):
        depth += (c == "(") - (c == ")")
        if depth or c not in "+-" or k == start:
            continue
        part = _unwrapped(text[start:k])
        if _digits(part):
            const += sign * int(part)
        else:
            terms.append((sign, part))
        sign, start = (1 if c == "+" else -1), k + 1
    return const, terms


def mul(a: Dim, b: Dim) -> Dim:
    """``a * b``; an int when both are ints (multiplying by 1 keeps the symbol)."""
    if type(a) is int and type(b) is int:
        return a * b
    if b == 1:
        return a
    if a == 1:
        return b
    if a == 0 or b == 0:
        return 0
    return _cap(f"{_term(a)}*{_term(b)}")


def floordiv(a: Dim, b: Dim) -> Dim:
    """``a // b``; an int when both are ints; a product that ``b`` divides (its coefficient
    ``b``'s, its names among ``b``'s), that product divided: ``(16*batch)//8`` is
    ``2*batch`` and ``(16*seq*batch)//(16*batch)`` is ``seq``, exact for any size."""
    if type(a) is int and type(b) is int:
        return a // b
    if b == 1:
        return a
    quotient = product_over(as_product(a), as_product(b))
    if quotient is not None:
        return product([quotient[0], *quotient[1]])
    if type(b) is int and b > 0:
        split = _sum_over(a, b)
        if split is not None:
            return split
    return _cap(f"{_term(a)}//{_term(b)}")


def simplified(d: Dim) -> Dim:
    """``d`` with its like terms added up and the ones that cancel left out
    (``past+seq-past`` is ``seq``, ``h+h`` is ``2*h``); ``d`` itself where that is not a sum
    of terms (:func:`as_sum`)."""
    summed = _sum_over(d, 1)
    return d if summed is None else summed


def _sum_over(a: Dim, k: int) -> Dim | None:
    """``a // k`` where ``a`` is ``k * S + c``, its terms' like ones added up (``batch+batch``
    is ``2*batch``) each with a coefficient ``k`` divides: ``S + c // k``, exact for any
    integer S (a chunk of a batch of two images concatenated: ``(batch+batch+1)//2`` is
    ``batch``); None otherwise."""
    if not as_sum(a)[1]:
        return None
    const, grouped = _grouped(a)
    if any(c % k for c in grouped.values()):
        return None
    result: Dim = const // k
    for names, c in grouped.items():
        part = product([abs(c) // k, *names])
        result = add(result, part) if c > 0 else sub(result, part)
    return result


def product(dims: Iterable[Dim]) -> Dim:
    """The product of ``dims``; fixed factors are folded into one leading int."""
    const, symbols = 1, []
    for d in dims:
        if type(d) is int:
            const *= d
        else:
            symbols.append(d)
    if not symbols or const == 0:
        return const
    if const == 1 and len(symbols) == 1:
        return symbols[0]
    return _cap("*".join(([str(const)] if const != 1 else []) + [_term(s) for s in symbols]))


def total(dims: Iterable[Dim]) -> Dim:
    """The sum of ``dims``; fixed terms are folded into one trailing int."""
    const, symbols = 0, []
    for d in dims:
        if type(d) is int:
            const += d
        else:
            symbols.append(d)
    if not symbols:
        return const
    result: Dim = _cap("+".join(str(s) for s in symbols))
    return add(result, const)


def broadcast(a: Dim, b: Dim) -> Dim | None:
    """The numpy broadcast of two dims, or None when two fixed sizes cannot broadcast.

    With one symbolic side and a fixed size ``n != 1`` the result is ``n`` (the symbol must be
    1 or ``n``, which only the run-time check can confirm).
    """
    if known_equal(a, b):
        return a
    if a == 1:
        return b
    if b == 1:
        return a
    if type(a) is int and type(b) is int:
        return None
    if type(a) is int:
        return a
    if type(b) is int:
        return b
    return _cap(f"broadcast({a},{b})")


def broadcast_operands(d: Dim) -> tuple[Dim, Dim] | None:
    """The two dims :func:`broadcast` left undecided in ``d`` (``broadcast(a,b)``), or None."""
    if type(d) is not str or not (d.startswith("broadcast(") and d.endswith(")")):
        return None
    parts = _top_level(d[len("broadcast("):-1], ",")
    if len(parts) != 2 or not _wrapped(d[len("broadcast"):]):
        return None
    return tuple(int(p) if _digits(p) else p for p in parts)  # type: ignore[return-value]


def window_out(size: Dim, kernel: Dim, stride: int, pad_before: int, pad_after: int,
               dilation: int) -> Dim:
    """Output length of a sliding window (convolution, floor-mode pooling).

    ``floor((size + pad_before + pad_after - dilation*(kernel-1) - 1) / stride) + 1``; may be
    ``<= 0`` for fixed sizes (the caller refuses that).
    """
    if type(kernel) is not int:
        return _cap(f"window({size},{kernel},{stride},{pad_before},{pad_after},{dilation})")
    shift = pad_before + pad_after - dilation * (kernel - 1) - 1
    if type(size) is int:
        return (size + shift) // stride + 1
    if stride == 1:
        return add(size, shift + 1)
    return add(floordiv(add(size, shift), stride), 1)


def pool_out(size: Dim, kernel: int, stride: int, pad_before: int, pad_after: int,
             dilation: int, ceil_mode: bool) -> Dim:
    """Output length of a pooling window, torch's rule (generalized to asymmetric padding).

    Floor mode is :func:`window_out`. Ceil mode rounds up, then drops the last window when it
    would start in the trailing padding (``(out - 1) * stride >= size + pad_before``).
    """
    if not ceil_mode:
        return window_out(size, kernel, stride, pad_before, pad_after, dilation)
    if type(size) is not int:
        return _cap(f"ceilwindow({size},{kernel},{stride},{pad_before},{pad_after},{dilation})")
    span = size + pad_before + pad_after - dilation * (kernel - 1) - 1
    out = -(-span // stride) + 1
    if (out - 1) * stride >= size + pad_before:
        out -= 1
    return out


def transposed_out(size: Dim, kernel: Dim, stride: int, padding: int, output_padding: int,
                   dilation: int) -> Dim:
    """Output length of a transposed convolution (torch semantics).

    ``(size - 1)*stride - 2*padding + dilation*(kernel - 1) + output_padding + 1``.
    """
    if type(kernel) is not int:
        return (f"transposed({size},{kernel},{stride},{padding},{output_padding},"
                f"{dilation})")
    shift = -stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1
    return add(mul(size, stride), shift)


#: An end at least this far runs to the end of any dim (what the importer writes for ONNX's
#: "to the end").
TO_THE_END = 2 ** 62


def slice_range(size: int, start: int, end: int, step: int) -> range:
    """The positions ONNX Slice takes along a dim of ``size`` from ``start`` to ``end`` by
    ``step``: a negative start or end counted from the end, then both clamped, to [0, size]
    by a positive step, by a negative one the start to [0, size - 1] and the end to
    [-1, size - 1] (-1: before position 0). Python's slicing differs in one case, a negative
    step from a start before the dim's first position: Python takes nothing, ONNX starts at
    0 (``x[-5::-1]`` of 3 positions: ONNX takes position 0)."""
    if start < 0:
        start += size
    if end < 0:
        end += size
    if step > 0:
        return range(min(max(start, 0), size), min(max(end, 0), size), step)
    return range(min(max(start, 0), size - 1), min(max(end, -1), size - 1), step)


def first_entries(d: Dim) -> int | None:
    """``e`` where run-time dim ``d`` is :func:`slice_len`'s name of a slice from 0 by step 1
    to a constant end e >= 0 (``x[:, :16]`` of a run-time t: at most 16 entries), else
    None."""
    if type(d) is not str or not d.startswith("slice(") or not _wrapped(d[len("slice"):]):
        return None
    parts = _top_level(d[len("slice("):-1], ",")
    if len(parts) != 4 or parts[1:] != ["0", parts[2], "1"] or not _digits(parts[2]):
        return None
    return int(parts[2])


def slice_len(size: Dim, start: int, end: int, step: int) -> Dim:
    """Length of ONNX Slice's positions (:func:`slice_range`) from start to end by step.
    Of a run-time size from a start >= 0 to the end by a step >= 1, the floor quotient
    ``(size - start + step - 1) // step`` (``t-2`` for ``x[:, 2:]``, ``h//2`` for
    ``x[:, 1::2]``): its value where the size is at least the start (below, the slice is
    empty). To an end counted from the end, -e, the same with the size less e
    (``t-1`` for ``x[:, :-1]``, as for ``x[:, 1:]``), where the size is at least the start
    plus e. From the last position back to the first by a step <= -1 (``x.flip(1)``,
    ``x[:, ::-2]``), ``(size - step - 1) // -step``, the size itself for a step of -1."""
    if type(size) is int:
        return len(slice_range(size, start, end, step))
    if start >= 0 and step >= 1 and (end >= TO_THE_END or -TO_THE_END < end < 0):
        return floordiv(add(size, step - 1 - start + (end if end < 0 else 0)), step)
    if start == -1 and step <= -1 and end <= -TO_THE_END:
        return floordiv(add(size, -step - 1), -step)
    return _cap(f"slice({size},{start},{end},{step})")
