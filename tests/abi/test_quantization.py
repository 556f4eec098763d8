"""abi/quantization.py's exact_runs: the runs of a sum's terms whose float32 sums are exact."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from abi.quantization import FLOAT32_EXACT, exact_runs


def _greedy(reach: np.ndarray) -> list[tuple[int, int]]:
    """The definition, one term at a time: a run ends before the term that would take some
    output's sum past the bound."""
    runs, start, total = [], 0, np.zeros(reach.shape[1:], np.int64)
    for k, row in enumerate(reach):
        if k > start and np.any(total + row > FLOAT32_EXACT):
            runs.append((start, k))
            start, total = k, np.zeros_like(total)
        total += row
    return runs + [(start, reach.shape[0])]


_TERMS = np.array([0, 1, 65_025, 2 ** 23, FLOAT32_EXACT, FLOAT32_EXACT + 1, 2 ** 25], np.int64)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 600), st.integers(1, 4), st.integers(1, 300), st.integers(0, 2 ** 32 - 1),
       st.booleans())
def test_exact_runs_are_the_greedy_runs(size, outputs, chunk, seed, spread):
    """Over any chunk size, the greedy split term by term: terms of every size, terms beyond
    the bound alone (a run of their own), none at all."""
    rng = np.random.default_rng(seed)
    reach = (rng.integers(0, 65_026, (size, outputs)) if spread else
             rng.choice(_TERMS, (size, outputs)))
    reach = reach.astype(np.int64)
    runs = exact_runs(reach, chunk)
    assert runs == _greedy(reach)
    assert runs[0][0] == 0 and runs[-1][1] == size
    for start, end in runs:
        assert end > start or size == 0
        assert end - start == 1 or reach[start:end].sum(axis=0).max() <= FLOAT32_EXACT


def test_a_long_axis_takes_a_few_calls_per_run():
    """Five million terms of 255 * 255 (258 to a run): split without a step per term."""
    runs = exact_runs(np.full((5_000_000, 1), 65_025, np.int64))
    assert len(runs) == -(-5_000_000 // 258) and all(e - s == 258 for s, e in runs[:-1])
