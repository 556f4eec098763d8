"""Tolerance.mismatches, the one comparison the build, the loader's golden check and acceptance
use: within ``atol + rtol * |want|``; nan against nan and an infinity against the same
infinity agree, anything else against nan is an infinite difference; integers are exact."""

from __future__ import annotations

import numpy as np

from abi.artifact import Tolerance

TOL = Tolerance(rtol=1e-3, atol=1e-6)
INF, NAN = np.inf, np.nan


def test_floats_within_and_outside_the_tolerance():
    want = np.array([1.0, 1000.0, 0.0, -2.0], np.float32)
    got = np.array([1.0005, 1000.9, 1e-7, -2.01], np.float32)
    diff, outside = TOL.mismatches(got, want)
    assert outside.tolist() == [False, False, False, True]
    np.testing.assert_allclose(diff, np.abs(got.astype(np.float64) - want))


def test_matching_non_finite_values_agree():
    want = np.array([NAN, INF, -INF, NAN, INF, 1.0, INF], np.float32)
    got = np.array([NAN, INF, -INF, 1.0, -INF, NAN, 3e38], np.float32)
    diff, outside = TOL.mismatches(got, want)
    assert outside.tolist() == [False, False, False, True, True, True, True]
    assert diff[:3].tolist() == [0.0, 0.0, 0.0]
    assert np.isinf(diff[3:]).all()  # nan against a number: an infinite difference, never nan


def test_integers_and_bools_are_exact():
    diff, outside = TOL.mismatches(np.array([3, 4, -5]), np.array([3, 5, -5]))
    assert outside.tolist() == [False, True, False] and diff.tolist() == [0.0, 1.0, 0.0]
    _, outside = TOL.mismatches(np.array([True, False]), np.array([True, True]))
    assert outside.tolist() == [False, True]


def test_compare_counts_and_takes_the_largest_difference_run_by_run(monkeypatch):
    """Tolerance.compare, which the build, the golden check and acceptance report from: what
    mismatches gives, summed and maximized over runs of COMPARE_RUN elements (7 here, so the
    runs cut across rows and leave a short last one)."""
    from abi.artifact import manifest

    monkeypatch.setattr(manifest, "COMPARE_RUN", 7)
    rng = np.random.default_rng(3)
    want = rng.standard_normal((5, 11)).astype(np.float32)
    got = want + rng.choice([0, 1e-7, 1e-2], want.shape).astype(np.float32)
    got[1, 3], want[2, 4], got[4, 10], want[4, 10] = NAN, INF, NAN, NAN
    got[4, 9] = want[4, 9] + 1  # in the short last run
    diff, outside = TOL.mismatches(got, want)
    assert TOL.compare(got, want) == (diff.max(), int(outside.sum()))
    assert TOL.compare(got, want)[0] == INF and 3 < TOL.compare(got, want)[1] < got.size
    assert TOL.compare(want, want) == (0.0, 0)
    assert TOL.compare(got.T.copy().T, want) == TOL.compare(got, want)  # any memory order
    ints = np.arange(20).reshape(4, 5)
    assert TOL.compare(ints + (ints == 13), ints) == (1.0, 1)
    assert TOL.compare(np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32)) == (0.0, 0)
    assert TOL.compare(got[:, :10], want) == (INF, want.size)  # shapes differ: every element
