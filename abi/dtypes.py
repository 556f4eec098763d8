"""The dtypes of the tensor ABI.

A dtype crosses the ABI boundary as one of the names in :data:`DTYPES`, never as a numpy
object: names are what artifacts store and what backends declare. Every name maps to exactly
one native-byte-order numpy dtype and back; anything else (big-endian, complex, object,
strings, datetimes, bfloat16 ...) is refused with :class:`~abi.errors.DTypeError`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from abi.errors import DTypeError

__all__ = ["DTYPES", "INT_DTYPES", "FLOAT_DTYPES", "check_dtype", "to_numpy", "from_numpy",
           "is_int", "is_float"]

#: Every dtype name of the ABI, in a fixed order.
DTYPES: tuple[str, ...] = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
                           "uint32", "uint64", "float16", "float32", "float64")
#: Signed and unsigned integer names (``bool`` is not an integer here).
INT_DTYPES: frozenset[str] = frozenset({"int8", "int16", "int32", "int64",
                                        "uint8", "uint16", "uint32", "uint64"})
#: Floating-point names.
FLOAT_DTYPES: frozenset[str] = frozenset({"float16", "float32", "float64"})

_TO_NUMPY: dict[str, np.dtype] = {name: np.dtype(name) for name in DTYPES}
_FROM_NUMPY: dict[np.dtype, str] = {dt: name for name, dt in _TO_NUMPY.items()}


def _unknown(value: Any, where: str | None) -> DTypeError:
    prefix = f"{where}: " if where else ""
    return DTypeError(f"{prefix}unknown dtype {value!r}; valid dtypes: {', '.join(DTYPES)}",
                      where=where, expected=DTYPES, got=value)


def check_dtype(name: Any, where: str | None = None) -> str:
    """Return ``name`` if it is an ABI dtype name, else raise DTypeError (prefixed by ``where``)."""
    if type(name) is str and name in _TO_NUMPY:
        return name
    raise _unknown(name, where)


def to_numpy(name: str) -> np.dtype:
    """The numpy dtype of an ABI dtype name (native byte order)."""
    return _TO_NUMPY[check_dtype(name)]


def from_numpy(dtype: Any) -> str:
    """The ABI name of a numpy dtype (or anything ``np.dtype()`` accepts, like ``np.float32``).

    Refuses dtypes outside the ABI, including non-native byte order, with DTypeError.
    """
    try:
        dt = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)
    except TypeError:
        dt = None
    name = _FROM_NUMPY.get(dt) if dt is not None else None
    if name is None:
        shown = str(dt) if dt is not None else repr(dtype)
        raise DTypeError(f"dtype {shown} is not part of the tensor ABI; "
                         f"valid dtypes: {', '.join(DTYPES)}", expected=DTYPES, got=shown)
    return name


def is_int(name: str) -> bool:
    """True for the signed and unsigned integer names (not ``bool``)."""
    return check_dtype(name) in INT_DTYPES


def is_float(name: str) -> bool:
    """True for ``float16``, ``float32`` and ``float64``."""
    return check_dtype(name) in FLOAT_DTYPES
