"""Shared helpers of the nn kernels: validation that raises the abi error tree, and init RNG.

Kernels validate what they are given (dtype, rank, shapes) and raise :mod:`abi.errors`
classes with one-line messages that name the layer (``where``) and both shapes. Nothing here
touches global state except the module-level random generator used by layer constructors.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from abi.errors import ContractError, DTypeError, ShapeError

FLOAT32 = np.dtype(np.float32)

# Layer constructors draw their initial weights from this generator (tinygrad draws from a
# global one too). Pass ``rng=`` to a constructor for reproducible weights.
_rng = np.random.default_rng()


def get_rng(rng: np.random.Generator | None) -> np.random.Generator:
    return _rng if rng is None else rng


def uniform(rng: np.random.Generator | None, shape: Sequence[int], bound: float) -> np.ndarray:
    """float32 samples from U(-bound, bound), the init every tinygrad layer uses."""
    u = get_rng(rng).random(tuple(shape), dtype=np.float32)
    return (u * np.float32(2 * bound) - np.float32(bound)).astype(np.float32, copy=False)


def prod(xs: Sequence[int]) -> int:
    return math.prod(int(x) for x in xs)


def shape_str(shape: Sequence[int]) -> str:
    """``(2, 5)``-style text for a shape (``(3,)`` for one dim, ``()`` for a scalar)."""
    return str(tuple(int(s) for s in shape))


def is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def int_tuple(value: Any, n: int, name: str, where: str, minimum: int) -> tuple[int, ...]:
    """An int or a sequence of ``n`` ints (each ``>= minimum``) as a tuple of ``n`` ints."""
    if is_int(value):
        out = (int(value),) * n
    else:
        try:
            out = tuple(value)
        except TypeError:
            raise ContractError(f"{where}: {name} must be an int or a sequence of {n} ints, "
                                f"got {value!r}", where=where, attr=name) from None
        if len(out) != n or not all(is_int(v) for v in out):
            raise ContractError(f"{where}: {name} must be an int or a sequence of {n} ints, "
                                f"got {value!r}", where=where, attr=name)
        out = tuple(int(v) for v in out)
    if any(v < minimum for v in out):
        raise ContractError(f"{where}: every {name} must be >= {minimum}, got {list(out)}",
                            where=where, attr=name)
    return out


def check_int(value: Any, name: str, where: str, minimum: int) -> int:
    if not is_int(value) or int(value) < minimum:
        raise ContractError(f"{where}: {name} must be an int >= {minimum}, got {value!r}",
                            where=where, attr=name)
    return int(value)


def check_eps(eps: Any, where: str) -> float:
    try:
        e = float(eps)
    except (TypeError, ValueError):
        e = float("nan")
    if not (e >= 0 and math.isfinite(e)):
        raise ContractError(f"{where}: eps must be a finite float >= 0, got {eps!r}",
                            where=where, attr="eps")
    return e


def check_array(a: Any, name: str, where: str) -> np.ndarray:
    if not isinstance(a, np.ndarray):
        raise DTypeError(f"{where}: {name} must be a numpy array, got {type(a).__name__}",
                         where=where, expected="numpy.ndarray", got=type(a).__name__)
    return a


def check_f32(a: Any, name: str, where: str) -> np.ndarray:
    """``a`` must be a float32 ndarray (the kernels never silently change precision)."""
    check_array(a, name, where)
    if a.dtype != FLOAT32:
        raise DTypeError(f"{where}: {name} has dtype {a.dtype}, expected float32",
                         where=where, expected="float32", got=str(a.dtype))
    return a


def check_float(a: Any, name: str, where: str) -> np.ndarray:
    """``a`` must be a real floating-point ndarray (float16/32/64)."""
    check_array(a, name, where)
    if a.dtype.kind != "f":
        raise DTypeError(f"{where}: {name} has dtype {a.dtype}, expected a floating dtype",
                         where=where, expected="floating", got=str(a.dtype))
    return a


def check_param(a: Any, name: str, where: str, shape: Sequence[int]) -> np.ndarray | None:
    """An optional float32 parameter that must have exactly ``shape``."""
    if a is None:
        return None
    check_f32(a, name, where)
    if a.shape != tuple(shape):
        raise ShapeError(f"{where}: {name} has shape {shape_str(a.shape)}, expected "
                         f"{shape_str(shape)}", where=where, expected=tuple(shape), got=a.shape)
    return a


def check_ndim(x: np.ndarray, name: str, where: str, ndim: int | None = None,
               min_ndim: int | None = None, rule: str = "") -> None:
    bad = (ndim is not None and x.ndim != ndim) or (min_ndim is not None and x.ndim < min_ndim)
    if bad:
        want = f"{ndim}-D" if ndim is not None else f"at least {min_ndim}-D"
        extra = f" {rule}" if rule else ""
        raise ShapeError(f"{where}: {name} must be {want}{extra}, got shape {shape_str(x.shape)}",
                         where=where, expected=want + extra, got=x.shape)


def channel_shape(x: np.ndarray) -> tuple[int, ...]:
    """Broadcast shape of a per-channel vector against an NC... tensor."""
    return (1, x.shape[1]) + (1,) * (x.ndim - 2)
