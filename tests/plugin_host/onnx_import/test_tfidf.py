"""TfIdfVectorizer of integer tokens against onnxruntime, on both backends, and its
refusals."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper

from plugin_host.errors import ModelFileError, UnsupportedModelError
from plugins.onnxruntime_backend import OnnxruntimeBackend

from .conftest import assert_refused, check_against_onnxruntime, import_and_load


def _model(tmp_path, shape, dtype=TP.INT64, **attrs):
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], name="node", **attrs)
    out = [*shape[:-1], max(attrs["ngram_indexes"]) + 1]
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", dtype, shape)],
                              [helper.make_tensor_value_info("y", TP.FLOAT, out)])
    path = tmp_path / "tfidf.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]), path)
    return path


def _pool(longest: int, tokens: int, rng) -> tuple[list[int], list[int]]:
    """Distinct n-grams of 1 to ``longest`` tokens drawn from 0..tokens-1 (one to four each):
    the pool and ngram_counts."""
    pool, counts = [], []
    for n in range(1, longest + 1):
        counts.append(len(pool))
        grams = {tuple(int(t) for t in rng.integers(0, tokens, n))
                 for _ in range(int(rng.integers(1, 5)))}
        pool += [t for g in sorted(grams) for t in g]
    return pool, counts


CASES = [  # mode, min, max, skips, input shape, weights, int32
    ("TF", 2, 2, 0, ["n", 7], False, False),
    ("TF", 1, 3, 2, ["n", 9], False, True),
    ("IDF", 1, 2, 1, [8], False, False),
    ("IDF", 2, 3, 3, ["n", 10], True, False),
    ("TFIDF", 1, 3, 1, ["n", 6], True, True),
    ("TFIDF", 1, 1, 4, [12], True, False),
    ("TFIDF", 2, 3, 0, ["n", 9], False, False),
    ("TF", 3, 3, 5, ["n", 4], False, False),  # only the shortest skips fit a row
]


@pytest.mark.parametrize("mode, lo, hi, skips, shape, weighted, int32", CASES)
def test_tfidf_vectorizer_counts_as_onnxruntime_does(mode, lo, hi, skips, shape, weighted,
                                                     int32, tmp_path, signer):
    """Random pools of distinct n-grams over four tokens (so that windows match often), their
    coordinates a permutation with gaps, drawn weights; int32 tokens against a pool that also
    holds values past int32's range (never matched); one and two rows of drawn tokens, rows of
    one token, rows holding the pool's n-grams.
    Bit for bit with onnxruntime on both backends."""
    rng = np.random.default_rng([lo, hi, skips, len(shape), weighted, int32])
    pool, counts = _pool(hi, 4, rng)
    if int32:
        pool[0] += 2 ** 32  # an n-gram no int32 row can hold
    grams = sum(len(range(a, counts[k + 1] if k + 1 < len(counts) else len(pool), k + 1))
                for k, a in enumerate(counts))
    indexes = [int(i) for i in rng.choice(grams + 3, grams, replace=False)]
    attrs = dict(mode=mode, min_gram_length=lo, max_gram_length=hi, max_skip_count=skips,
                 ngram_counts=counts, ngram_indexes=indexes, pool_int64s=pool)
    if weighted:
        attrs["weights"] = [float(w) for w in rng.random(grams).astype(np.float32)]
    model = _model(tmp_path, shape, TP.INT32 if int32 else TP.INT64, **attrs)
    _, loaded = import_and_load(model, tmp_path / "t.pha", signer)
    dtype = np.int32 if int32 else np.int64
    rows = [(2,), (1,)] if shape[0] == "n" else [()]
    feeds = [{"x": rng.integers(0, 4, (*r, shape[-1])).astype(dtype)} for r in rows]
    feeds.append({"x": np.full(feeds[0]["x"].shape, pool[-1] % 4, dtype)})
    # rows that begin with the pool's n-grams of the shortest counted length, in a row
    feeds.append({"x": np.resize(np.array(pool[counts[lo - 1]:]) % 4,
                                 feeds[0]["x"].shape).astype(dtype)})
    for backend in (None, OnnxruntimeBackend()):
        runs = check_against_onnxruntime(model, loaded, feeds, backend=backend)
        for got, want in runs:
            np.testing.assert_array_equal(got["y"], want["y"])
    assert any(want["y"].any() for _, want in runs)  # something was counted


def test_nothing_to_count_gives_zeros(tmp_path, signer):
    """Rows shorter than every counted n-gram: zeros of the output's shape, as onnxruntime."""
    model = _model(tmp_path, ["n", 2], mode="TF", min_gram_length=3, max_gram_length=3,
                   max_skip_count=1, ngram_counts=[0, 1, 1], ngram_indexes=[1, 0],
                   pool_int64s=[5, 1, 2, 3])
    _, loaded = import_and_load(model, tmp_path / "t.pha", signer)
    for backend in (None, OnnxruntimeBackend()):
        runs = check_against_onnxruntime(model, loaded, [{"x": np.ones((3, 2), np.int64)}],
                                         backend=backend)
        assert runs[0][0]["y"].shape == (3, 2) and not runs[0][0]["y"].any()


_GOOD = dict(mode="TF", min_gram_length=1, max_gram_length=2, max_skip_count=0,
             ngram_counts=[0, 2], ngram_indexes=[0, 1, 2], pool_int64s=[1, 2, 3, 4])


@pytest.mark.parametrize("change, shape, error, message", [
    ({"pool_strings": ["a"], "pool_int64s": None}, [4], UnsupportedModelError,
     "string tokens (pool_strings) are not supported"),
    ({}, ["n", "c"], UnsupportedModelError, "rows of the run-time length 'c'"),
    ({}, [2, 2, 4], UnsupportedModelError, "tokens are int32 or int64, [C] or [B, C]"),
    ({"mode": "BM25"}, [4], ModelFileError, "attribute mode='BM25' must be one of"),
    ({"min_gram_length": 3}, [4], ModelFileError, "1 <= min_gram_length <= max_gram_length"),
    ({"max_gram_length": 3}, [4], ModelFileError,
     "max_gram_length=3 is above the 2 n-gram lengths ngram_counts lists"),
    ({"max_skip_count": -1}, [4], ModelFileError, "max_skip_count >= 0"),
    ({"max_skip_count": 2 ** 40}, [4], UnsupportedModelError,
     "attribute max_skip_count=1099511627776 is above 1048576: onnxruntime, the build's "
     "reference, walks every skip distance up to it for each row"),
    ({"ngram_counts": [0, 3]}, [4], ModelFileError,
     "the pool's entries 3..3 (from ngram_counts[1]) are not a whole number of 2-grams"),
    ({"ngram_counts": [1, 2]}, [4], ModelFileError, "must start at 0"),
    ({"pool_int64s": [1, 1, 3, 4]}, [4], ModelFileError, "the pool lists the 1-gram [1] twice"),
    ({"ngram_indexes": [0, 2, 2]}, [4], ModelFileError, "one distinct coordinate >= 0"),
    ({"ngram_indexes": [0, 1]}, [4], ModelFileError, "for each of the pool's 3 n-grams"),
    ({"mode": "IDF", "weights": [1.0, 2.0]}, [4], ModelFileError,
     "attribute weights has 2 entries for the pool's 3 n-grams"),
])
def test_a_tfidf_vectorizer_the_import_cannot_take_is_refused(change, shape, error, message,
                                                              tmp_path):
    attrs = {k: v for k, v in {**_GOOD, **change}.items() if v is not None}
    model = _model(tmp_path, shape, **attrs)
    assert_refused(model, error, "node 'node' (TfIdfVectorizer)", message)


def test_float_tokens_are_refused(tmp_path):
    model = _model(tmp_path, [4], TP.FLOAT, **_GOOD)
    assert_refused(model, UnsupportedModelError, "node 'node' (TfIdfVectorizer)",
                   "is float32 of shape [4]")


def test_a_huge_skip_count_costs_nothing(tmp_path, signer):
    """A max_skip_count of a million (about the most taken) over rows of 6: only the
    distances that fit are written; as onnxruntime counts."""
    model = _model(tmp_path, ["n", 6], mode="TF", min_gram_length=1, max_gram_length=2,
                   max_skip_count=10 ** 6, ngram_counts=[0, 2], ngram_indexes=[0, 1, 2],
                   pool_int64s=[1, 2, 1, 2])
    _, loaded = import_and_load(model, tmp_path / "t.pha", signer)
    feeds = [{"x": np.array([[1, 2, 1, 2, 2, 1], [2, 2, 2, 1, 1, 1]], np.int64)}]
    for backend in (None, OnnxruntimeBackend()):
        runs = check_against_onnxruntime(model, loaded, feeds, backend=backend)
        np.testing.assert_array_equal(runs[0][0]["y"], runs[0][1]["y"])


def test_an_output_coordinate_past_the_tensor_cap_is_refused_before_it_is_placed(tmp_path):
    model = _model(tmp_path, [4], mode="TF", min_gram_length=1, max_gram_length=1,
                   max_skip_count=0, ngram_counts=[0], ngram_indexes=[0, 2 ** 40],
                   pool_int64s=[1, 2])
    assert_refused(model, ModelFileError, "node 'node' (TfIdfVectorizer)",
                   "its placement of the n-grams of shape (4, 1099511627777) would have")


def test_a_large_pool_listing_an_n_gram_twice_is_refused_at_once(tmp_path):
    pool = list(range(200_000)) + [199_999]  # the last twice: no search of the pool per gram
    model = _model(tmp_path, [4], mode="TF", min_gram_length=1, max_gram_length=1,
                   max_skip_count=0, ngram_counts=[0], ngram_indexes=list(range(len(pool))),
                   pool_int64s=pool)
    assert_refused(model, ModelFileError, "node 'node' (TfIdfVectorizer)",
                   "the pool lists the 1-gram [199999] twice")


def test_windows_past_the_tensor_cap_are_refused_before_they_are_written(tmp_path):
    model = _model(tmp_path, [200_000], mode="TF", min_gram_length=2, max_gram_length=2,
                   max_skip_count=100_000, ngram_counts=[0, 0], ngram_indexes=[0],
                   pool_int64s=[1, 2])
    assert_refused(model, ModelFileError, "node 'node' (TfIdfVectorizer)",
                   "its 2-grams' windows of shape (15000049999, 1, 2) would have 30000099998 "
                   "elements, above the cap of")
