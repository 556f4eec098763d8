"""Checks shared by the shape rules of :mod:`abi.ops.layers`, :mod:`abi.ops.glue` and
:mod:`abi.ops.sampling`.

Each helper raises with a one-line message that starts with the op's name and states what was
expected and what was got. Comparisons between dims go through :mod:`abi.ops.dims`: only a
known difference is refused; an undecided one (symbolic) is left to the run-time check.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from abi import dtypes
from abi.errors import ContractError, DTypeError, ShapeError
from abi.ops import dims
from abi.spec import TensorType, format_shape

__all__ = ["fmt", "need_rank", "need_float", "need_int", "need_numeric", "need_same_dtype",
           "need_dim", "need_shape", "need_attr_len", "need_axis", "need_per_channel",
           "sizes_from_like"]

fmt = format_shape


def need_rank(op: str, name: str, t: TensorType, *, exact: int | None = None,
              at_least: int | None = None, one_of: Iterable[int] | None = None) -> int:
    """The rank of ``t``; ShapeError unless it is ``exact``, ``>= at_least`` or in ``one_of``."""
    r = len(t.shape)
    if exact is not None and r != exact:
        expected = f"rank {exact}"
    elif at_least is not None and r < at_least:
        expected = f"rank >= {at_least}"
    elif one_of is not None and r not in tuple(one_of):
        ranks = [str(k) for k in one_of]
        expected = "rank " + (", ".join(ranks[:-1]) + " or " if len(ranks) > 1 else "") + ranks[-1]
    else:
        return r
    raise ShapeError(f"{op}: {name} must have {expected}, got rank {r} (shape {fmt(t.shape)})",
                     where=op, expected=expected, got=t.shape)


def need_float(op: str, name: str, t: TensorType) -> None:
    """DTypeError unless ``t`` is float16/32/64."""
    if t.dtype not in dtypes.FLOAT_DTYPES:
        raise DTypeError(f"{op}: {name} must be a float tensor (float16, float32, float64), got "
                         f"{t.dtype}", where=op, expected="float", got=t.dtype)


def need_int(op: str, name: str, t: TensorType) -> None:
    """DTypeError unless ``t`` has an integer dtype (not bool)."""
    if t.dtype not in dtypes.INT_DTYPES:
        raise DTypeError(f"{op}: {name} must be an integer tensor, got {t.dtype}", where=op,
                         expected="integer", got=t.dtype)


def need_numeric(op: str, name: str, t: TensorType) -> None:
    """DTypeError for a bool tensor (arithmetic on bool is not part of the ABI)."""
    if t.dtype == "bool":
        raise DTypeError(f"{op}: {name} must be a numeric tensor, got bool", where=op,
                         expected="numeric", got="bool")


def need_same_dtype(op: str, named: Sequence[tuple[str, TensorType | None]]) -> None:
    """DTypeError unless every given tensor has the dtype of the first one."""
    present = [(n, t) for n, t in named if t is not None]
    first_name, first = present[0]
    for name, t in present[1:]:
        if t.dtype != first.dtype:
            raise DTypeError(f"{op}: {name} must have the dtype of {first_name} ({first.dtype}), "
                             f"got {t.dtype}", where=op, expected=first.dtype, got=t.dtype)


def need_dim(op: str, what: str, got: dims.Dim, expected: dims.Dim, context: str = "") -> None:
    """ShapeError when ``got`` and ``expected`` are known to differ."""
    if dims.known_different(got, expected):
        suffix = f" ({context})" if context else ""
        raise ShapeError(f"{op}: {what} must be {expected}, got {got}{suffix}", where=op,
                         expected=expected, got=got)


def need_shape(op: str, name: str, t: TensorType, expected: Sequence[dims.Dim],
               context: str = "") -> None:
    """ShapeError unless ``t`` has ``expected``'s rank and no dim known to differ."""
    expected = tuple(expected)
    if len(t.shape) != len(expected) or any(dims.known_different(g, e)
                                            for g, e in zip(t.shape, expected)):
        suffix = f" ({context})" if context else ""
        raise ShapeError(f"{op}: {name} must have shape {fmt(expected)}, got {fmt(t.shape)}"
                         f"{suffix}", where=op, expected=expected, got=t.shape)


def need_attr_len(op: str, attrs: dict, names: Iterable[str], n: int, why: str) -> None:
    """ContractError unless each list attribute in ``names`` has ``n`` entries (absent or None
    attributes are skipped)."""
    for name in names:
        value = attrs.get(name)
        if value is not None and len(value) != n:
            raise ContractError(f"{op}: attribute {name!r} has {len(value)} entries but {why} "
                                f"needs {n}", op=op, attribute=name)


def need_axis(op: str, axis: int, rank: int, attr: str = "axis") -> int:
    """``axis`` normalized into ``[0, rank)``; ContractError when it is out of range."""
    if not -rank <= axis < rank:
        raise ContractError(f"{op}: attribute {attr!r} is {axis}, out of range for rank {rank} "
                            f"(valid: {-rank}..{rank - 1})", op=op, attribute=attr)
    return axis % rank


def need_per_channel(op: str, x_name: str, x: TensorType, channels: dims.Dim,
                     named: Sequence[tuple[str, TensorType | None]]) -> None:
    """Each given tensor in ``named`` must be ``(channels,)`` with ``x``'s dtype."""
    for name, t in named:
        if t is None:
            continue
        need_shape(op, name, t, (channels,), f"one value per channel of {x_name} shape "
                   f"{fmt(x.shape)}")
        if t.dtype != x.dtype:
            raise DTypeError(f"{op}: {name} must have the dtype of {x_name} ({x.dtype}), got "
                             f"{t.dtype}", where=op, expected=x.dtype, got=t.dtype)


def sizes_from_like(n: str, like: TensorType | None, like_axes, sizes: list) -> list | None:
    """Per size, like's dim on the axis ``like_axes`` names there (None where it names
    none, -1); None without ``like``. Both come together, ``like_axes`` one entry per size,
    and a size like gives is written -1 in ``sizes``."""
    if (like is None) != (like_axes is None):
        raise ContractError(f"{n}: input 'like' and attribute 'like_axes' come together, got "
                            f"{'only like' if like_axes is None else 'only like_axes'}", op=n,
                            attribute="like_axes")
    if like is None:
        return None
    if len(like_axes) != len(sizes):
        raise ContractError(f"{n}: like_axes {list(like_axes)} must have one entry per size "
                            f"{list(sizes)}", op=n, attribute="like_axes")
    given = []
    for k, a in enumerate(like_axes):
        if a == -1:
            given.append(None)
            continue
        if not 0 <= a < len(like.shape):
            raise ContractError(f"{n}: like_axes[{k}] is {a}, not an axis of like shape "
                                f"{fmt(like.shape)} (or -1: sizes[{k}] as written)", op=n,
                                attribute="like_axes")
        if sizes[k] != -1:
            raise ContractError(f"{n}: sizes[{k}] is {sizes[k]} where like_axes[{k}] gives it "
                                f"like's axis {a}; write -1 there", op=n, attribute="sizes")
        given.append(like.shape[a])
    return given
