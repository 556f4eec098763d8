"""Embedding lookup that validates every index.

tinygrad's default Embedding returns a zero vector for an out-of-range index, and its atomic
backward path clips instead; the two disagree, so here every index is checked and a bad one
refuses the call (:class:`abi.errors.IndexRangeError` listing positions and values). A zero
vector is never returned for a bad index.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from abi import check_indices
from abi.errors import ShapeError

from ._common import check_f32, check_int, check_ndim, shape_str, uniform

__all__ = ["embedding", "check_embedding_indices", "Embedding"]


def check_embedding_indices(idx: Any, vocab_size: int, where: str = "Embedding") -> None:
    """Refuse ``idx`` unless it has an integer dtype and every value is in ``[0, vocab_size)``.

    The rule is the ABI's (:func:`abi.check_indices`, also used by the executor at entry):
    DTypeError for a non-integer dtype (bool and float included), IndexRangeError whose
    ``positions`` are ``np.argwhere`` tuples of every offending index and ``values`` the values.
    """
    vocab_size = check_int(vocab_size, "vocab_size", where, 1)
    check_indices(idx if isinstance(idx, np.ndarray) else np.asarray(idx), vocab_size, where)


def embedding(idx: Any, weight: np.ndarray, *, where: str = "Embedding") -> np.ndarray:
    """Rows of ``weight`` ``(vocab, embed)`` float32 at ``idx``: shape ``idx.shape + (embed,)``.

    Every index is validated first (:func:`check_embedding_indices`); the result is a new
    array, never a view of ``weight``.
    """
    check_f32(weight, "weight", where)
    check_ndim(weight, "weight", where, ndim=2, rule="(vocab_size, embed_size)")
    a = idx if isinstance(idx, np.ndarray) else np.asarray(idx)
    check_embedding_indices(a, weight.shape[0], where)
    return np.take(weight, a, axis=0)


class Embedding:
    """Lookup table (tinygrad ``nn.Embedding``): ``weight`` ``(vocab_size, embed_size)`` float32,
    glorot-uniform. Integer indices only; every index is checked on every call."""

    abi_op = "embedding"

    def __init__(self, vocab_size: int, embed_size: int, *,
                 rng: np.random.Generator | None = None) -> None:
        check_int(vocab_size, "vocab_size", "Embedding", 1)
        check_int(embed_size, "embed_size", "Embedding", 1)
        self.vocab_sz, self.embed_sz = int(vocab_size), int(embed_size)
        bound = math.sqrt(6 / (vocab_size + embed_size))
        self.weight: np.ndarray = uniform(rng, (vocab_size, embed_size), bound)

    @property
    def vocab_size(self) -> int:
        return self.vocab_sz

    @property
    def embed_size(self) -> int:
        return self.embed_sz

    def __call__(self, idx: np.ndarray) -> np.ndarray:
        expected = (self.vocab_sz, self.embed_sz)
        if check_f32(self.weight, "weight", "Embedding").shape != expected:
            raise ShapeError(f"Embedding: weight has shape {shape_str(self.weight.shape)}, "
                             f"expected {shape_str(expected)}", where="Embedding",
                             expected=expected, got=self.weight.shape)
        return embedding(idx, self.weight)

    def abi_attrs(self) -> dict[str, Any]:
        return {}

    def abi_tensors(self) -> dict[str, np.ndarray | None]:
        return {"weight": self.weight}
