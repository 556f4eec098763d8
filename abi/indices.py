"""Validation of indices, the one check the ABI makes on tensor *values*: Embedding indices
at run time, and the gather op's constant indices when a graph is built or loaded.

tinygrad's default Embedding returns a zero vector for an out-of-range index and its atomic
path clips the index instead; the two disagree, so neither behaviour is allowed here: every
index must satisfy ``0 <= i < vocab_size`` or the call is refused, naming the offending
positions and values.
"""

from __future__ import annotations

import numpy as np

from .errors import DTypeError, IndexRangeError


#: up to this many indices are checked as Python ints (numpy's reductions cost more)
_FEW = 8


def check_indices(idx: np.ndarray, vocab_size: int, where: str,
                  kind: str = "embedding") -> None:
    """Refuse a non-integer ``idx`` or one with any value outside ``[0, vocab_size)``; ``kind``
    names the indices in the message (the gather op's constant indices use this check too)."""
    if type(idx) is np.ndarray and 0 < idx.size <= _FEW and idx.dtype.kind in "iu":
        # one or a few indices, the common case (a step's token): no numpy reductions
        if idx.size == 1:
            if 0 <= idx.item() < vocab_size:
                return
        elif all(0 <= value < vocab_size for value in idx.ravel().tolist()):
            return
    if not isinstance(idx, np.ndarray) or idx.dtype.kind not in "iu":
        got = idx.dtype if isinstance(idx, np.ndarray) else type(idx).__name__
        raise DTypeError(f"{where}: indices have dtype {got}, expected an integer dtype",
                         where=where, expected="integer", got=str(got))
    if idx.size == 0:
        return
    if idx.min() >= 0 and idx.max() < vocab_size:
        return
    bad = (idx < 0) | (idx >= vocab_size)
    positions = [tuple(p) for p in np.argwhere(bad)]
    raise IndexRangeError(where=where, vocab_size=vocab_size, positions=positions,
                          values=idx[bad].tolist(), kind=kind)
