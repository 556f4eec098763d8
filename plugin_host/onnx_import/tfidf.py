"""ONNX TfIdfVectorizer over integer tokens, as counts of each n-gram's matches.

The node counts, in each row of its input (``[C]`` or ``[B, C]`` tokens, int32 or int64), the
n-grams of ``pool_int64s`` whose length is between ``min_gram_length`` and
``max_gram_length``: an n-gram of length n matches at start ``s`` with skip distance ``d``
where ``x[s + j * d]`` is its j-th token for every j and ``s + (n - 1) * d < C``; d runs from
1 to ``max_skip_count + 1``, except for n-grams of one token, counted once (d = 1).
onnxruntime's kernel walks a trie of the pool; the counts are the same. Each n-gram's count
lands in the output (float32, ``[O]`` or ``[B, O]`` with O one above the largest
``ngram_indexes`` entry) at its ``ngram_indexes`` entry, weighted by ``mode``: TF the
count, IDF 1 where the count is above 0, TFIDF the count; IDF and TFIDF times the n-gram's
entry of ``weights`` where the node has them (one per n-gram, as the spec and onnxruntime
read them; ONNX's reference implementation reads them by output position instead, which
is the same where ``ngram_indexes`` is 0, 1, 2, ...).

Per n-gram length the import writes one gather of every window's tokens (the windows are
known at import, ``C`` being fixed), an equal against the pool's n-grams of that length,
a product over the tokens (all of them match) and a sum over the windows, then a matmul
placing the counts at their output coordinates. TFIDF's weights multiply each window's match
and a cumsum over the windows adds them: onnxruntime adds an n-gram's weight once per match,
in float32, and count * weight does not always round to that sum.

Refused, naming the node: string tokens (``pool_strings``), a row length ``C`` known only
at run time (``--dim`` fixes it), an input of another rank or dtype; a ModelFileError for a
malformed pool (``ngram_counts`` out of order or not dividing its part of the pool into
n-grams), a ``max_gram_length`` past the lengths ``ngram_counts`` lists, an n-gram listed
twice (onnxruntime refuses both), two n-grams at one output coordinate (where onnxruntime and
ONNX's reference disagree), ``weights`` not one per n-gram, and windows past the tensor cap
(checked before they are written; skip distances that fit no window cost nothing); a
``max_skip_count`` above :data:`MAX_SKIP_COUNT` (onnxruntime's kernel walks every distance).
"""

from __future__ import annotations

import numpy as np

from ..errors import ModelFileError
from .ops import _few, _one_output, _only, maps

__all__ = ["tfidf_vectorizer"]

_ATTRIBUTES = ("max_gram_length", "min_gram_length", "max_skip_count", "mode",
               "ngram_counts", "ngram_indexes", "pool_int64s", "pool_strings", "weights")
_MODES = ("TF", "IDF", "TFIDF")
#: The largest max_skip_count taken: onnxruntime's kernel, the build's reference, walks every
#: skip distance up to it for each row (about a nanosecond each: 2**40 would take hours per
#: row), though any count from the row length less one on counts the same n-grams
MAX_SKIP_COUNT = 2 ** 20


def _pool(attrs: dict) -> list[tuple[int, ...]]:
    """The pool's n-grams, in order (their positions index ``ngram_indexes`` and
    ``weights``)."""
    pool, starts = attrs.get("pool_int64s", []), attrs.get("ngram_counts", [])
    if not pool or not starts or starts[0] != 0 or starts[-1] > len(pool) \
            or any(b < a for a, b in zip(starts, starts[1:])):
        raise ModelFileError(f"attribute ngram_counts={_few(starts)} must start at 0 and rise "
                             f"to at most the pool's {len(pool)} entries (none: no n-grams)")
    grams: list[tuple[int, ...]] = []
    for k, start in enumerate(starts):
        n, end = k + 1, starts[k + 1] if k + 1 < len(starts) else len(pool)
        if (end - start) % n:
            raise ModelFileError(f"the pool's entries {start}..{end - 1} (from ngram_counts"
                                 f"[{k}]) are not a whole number of {n}-grams")
        grams.extend(tuple(pool[a:a + n]) for a in range(start, end, n))
    seen: set[tuple[int, ...]] = set()
    for g in grams:
        if g in seen:
            raise ModelFileError(f"the pool lists the {len(g)}-gram {list(g)} twice")
        seen.add(g)
    return grams


def _counts(imp, x: str, shape: tuple, dtype: str, n: int, grams: list, skips: int,
            weights: np.ndarray | None = None) -> str | None:
    """The counts ``[..., len(grams)]`` (float32) of the ``n``-grams ``grams`` in the rows of
    ``x`` (of ``shape``), each times its entry of ``weights`` where given; None where no
    window of ``n`` tokens fits in a row."""
    length = shape[-1]
    # distances past (length - 1) / (n - 1) fit no window: a huge max_skip_count costs nothing
    distances = range(1, 2 if n == 1 else min(skips + 1, (length - 1) // (n - 1)) + 1)
    starts = [(d, length - (n - 1) * d) for d in distances]
    count = sum(c for _, c in starts if c > 0)
    if not count:
        return None
    imp.check_size(f"its {n}-grams' windows", (count, 1, n))
    at = imp.index_constant(np.concatenate(
        [np.arange(c)[:, None] + d * np.arange(n) for d, c in starts if c > 0]
    ).reshape(count, 1, n), f"windows{n}")
    picked = imp.step("gather", [x, at], f"{n}-grams", {"axis": len(shape) - 1})
    pool = imp.add_constant(np.array(grams, dtype), f"{imp.node_name}.pool{n}")
    same = imp.step("equal", [picked, pool], f"{n}-grams/equal")
    ones = imp.step("cast", [same], f"{n}-grams/float", {"dtype": "float32"})
    every = imp.step("prod", [ones], f"{n}-grams/all", {"axes": [-1]})
    if weights is None:
        return imp.step("sum", [every], f"{n}-grams/count", {"axes": [-2]})
    # onnxruntime adds an n-gram's weight once per match, in float32: a running sum over the
    # windows (zeros where none matches) gives its rounding, where count * weight may not
    w = imp.add_constant(weights, f"{imp.node_name}.weights{n}")
    each = imp.step("mul", [every, w], f"{n}-grams/weighted")
    running = imp.step("cumsum", [each], f"{n}-grams/running", {"axis": -2})
    return imp.step("gather", [running, imp.index_constant(count - 1, "last")],
                    f"{n}-grams/total", {"axis": len(shape) - 1})


@maps("TfIdfVectorizer")
def tfidf_vectorizer(imp, node, attrs):
    """Map TfIdfVectorizer (see the module)."""
    _only(imp, attrs, dict.fromkeys(_ATTRIBUTES, ...))
    _one_output(imp, node)
    if "pool_strings" in attrs:
        raise imp.unsupported("string tokens (pool_strings) are not supported: the ABI has no "
                              "string dtype; integer tokens (pool_int64s) are")
    mode = attrs.get("mode")
    if mode not in _MODES:
        raise ModelFileError(f"attribute mode={mode!r} must be one of {list(_MODES)}")
    lo, hi = attrs.get("min_gram_length"), attrs.get("max_gram_length")
    skips = attrs.get("max_skip_count")
    if lo is None or hi is None or skips is None or not 1 <= lo <= hi or skips < 0:
        raise ModelFileError(f"attributes min_gram_length={lo}, max_gram_length={hi}, "
                             f"max_skip_count={skips} must be set, with 1 <= min_gram_length "
                             f"<= max_gram_length and max_skip_count >= 0")
    if skips > MAX_SKIP_COUNT:
        raise imp.unsupported(f"attribute max_skip_count={skips} is above {MAX_SKIP_COUNT}: "
                              f"onnxruntime, the build's reference, walks every skip distance "
                              f"up to it for each row; any count from the row length less one "
                              f"on counts the same n-grams")
    grams = _pool(attrs)
    lengths = len(attrs["ngram_counts"])
    if hi > lengths:
        raise ModelFileError(f"attribute max_gram_length={hi} is above the {lengths} n-gram "
                             f"lengths ngram_counts lists (onnxruntime refuses it)")
    indexes, weights = attrs.get("ngram_indexes", []), attrs.get("weights")
    if len(indexes) != len(grams) or min(indexes, default=0) < 0 \
            or len(set(indexes)) != len(indexes):
        raise ModelFileError(f"attribute ngram_indexes={_few(indexes)} must hold one distinct "
                             f"coordinate >= 0 for each of the pool's {len(grams)} n-grams")
    if weights is not None and len(weights) != len(grams):
        raise ModelFileError(f"attribute weights has {len(weights)} entries for the pool's "
                             f"{len(grams)} n-grams")
    t = imp.type_of(node.input[0])
    if t.dtype not in ("int32", "int64") or len(t.shape) not in (1, 2):
        raise imp.unsupported(f"input {node.input[0]!r} is {t.dtype} of shape "
                              f"{list(t.shape)}: tokens are int32 or int64, [C] or [B, C]")
    if type(t.shape[-1]) is not int:
        raise imp.unsupported(f"input {node.input[0]!r} has rows of the run-time length "
                              f"{t.shape[-1]!r}; the windows are written at import (--dim "
                              f"fixes it)")
    x, info = imp.tensor(node.input[0]), np.iinfo(t.dtype)
    size, out = max(indexes) + 1, None
    # the constant matrices below are (n-grams or row length) x size: checked before made
    imp.check_size("its placement of the n-grams", (max(len(grams), t.shape[-1]), size))
    for n in sorted({len(g) for g in grams if lo <= len(g) <= hi}):
        # an n-gram holding a token the input's dtype cannot hold never matches (onnxruntime)
        mine = [p for p, g in enumerate(grams) if len(g) == n
                and all(info.min <= v <= info.max for v in g)]
        w = None if weights is None else np.array([weights[p] for p in mine], np.float32)
        counts = _counts(imp, x, t.shape, t.dtype, n, [grams[p] for p in mine], skips,
                         w if mode == "TFIDF" else None) if mine else None
        if counts is None:
            continue
        if mode == "IDF":
            zero = imp.add_constant(np.float32(0), f"{imp.node_name}.zero")
            seen = imp.step("greater", [counts, zero], f"{n}-grams/seen")
            counts = imp.step("cast", [seen], f"{n}-grams/once", {"dtype": "float32"})
            if w is not None:
                counts = imp.step("mul", [counts, imp.add_constant(
                    w, f"{imp.node_name}.weights{n}")], f"{n}-grams/weighted")
        place = np.zeros((len(mine), size), np.float32)
        place[np.arange(len(mine)), [indexes[p] for p in mine]] = 1
        placed = imp.step("matmul", [counts, imp.add_constant(place, f"{imp.node_name}.place"
                                                                     f"{n}")], f"{n}-grams/place")
        out = placed if out is None else imp.step("add", [out, placed], f"{n}-grams/total")
    if out is None:  # nothing to count: zeros of the output's shape
        floats = imp.step("cast", [x], "float", {"dtype": "float32"})
        none = imp.add_constant(np.zeros((t.shape[-1], size), np.float32),
                                f"{imp.node_name}.none")
        out = imp.step("matmul", [floats, none], "zeros")
    imp.emit("identity", [out], [node.output[0]])
