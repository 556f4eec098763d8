"""Per-frame statistics: frame-id gaps and openpilot's filtered frame-drop percentage."""

from __future__ import annotations

import pytest

from plugin_host.daemon.stats import FirstOrderFilter, FrameStats, percentiles


def test_first_order_filter_matches_openpilot():
    f = FirstOrderFilter(0.0, 1.0, 0.05)
    assert f.alpha == pytest.approx(0.05 / 1.05)
    assert f.update(1.0) == pytest.approx(0.05 / 1.05)


def test_no_drops_is_zero_percent():
    s = FrameStats(0.05)
    for i in range(100):
        assert s.gap(i) == 0
    assert s.frame_drop_perc == 0.0 and s.dropped == 0


def test_drops_are_held_at_zero_while_warming_up_then_filtered():
    s = FrameStats(0.05)
    for i in range(0, 20, 2):  # every other frame dropped, the first 10 frames
        s.gap(i)
    assert s.frame_drop_perc == 0.0 and s.gap_dropped == 9
    for i in range(20, 400, 2):
        s.gap(i)
    # steady state: d -> 1 dropped per frame, ratio 1 / (1 + 1)
    assert s.frame_drop_perc == pytest.approx(50.0, abs=0.5)


def test_a_burst_is_capped_at_ten_per_frame():
    s = FrameStats(0.05)
    for i in range(20):
        s.gap(i)
    s.gap(1019)
    assert s.gap_dropped == 999
    d = 10 * 0.05 / 1.05
    assert s.frame_drop_perc == pytest.approx(100 * d / (1 + d))


def test_restart_does_not_count_the_new_ids_as_a_gap():
    s = FrameStats(0.05)
    s.gap(500)
    s.restart()
    assert s.gap(0) == 0


def test_percentiles():
    p = percentiles(list(range(1, 101)))
    assert p["p50"] == pytest.approx(50.5) and p["max"] == 100
    assert percentiles([]) == {"p50": None, "p99": None, "max": None}
