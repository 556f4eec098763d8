"""The artifact's contract driven by synthetic frame metadata: one reset per condition."""

from __future__ import annotations

import pytest

from abi.artifact.manifest import ResetConditions
from plugin_host.daemon.contract import (ARTIFACT_SWAP, CAMERA_RESTART, EXPLICIT, FRAME_GAP,
                                         TIMESTAMP_BACKWARDS, Deadline, FrameMeta,
                                         StateContract)

MS = 1_000_000


def meta(frame_id: int, t_ms: float | None = None, pool: str = "p1", camera: str = "road"):
    t = frame_id * 50 if t_ms is None else t_ms
    return FrameMeta(camera, frame_id, int(t * MS), pool)


def run(contract: StateContract, frames) -> list:
    return [contract.check(f) for f in frames]


@pytest.fixture
def events():
    return []


@pytest.fixture
def contract(events) -> StateContract:
    return StateContract(ResetConditions(frame_gap_ms=150.0),
                         on_event=lambda kind, detail: events.append((kind, detail)))


def test_steady_frames_never_reset(contract):
    assert run(contract, [meta(i) for i in range(20)]) == [None] * 20
    assert contract.total == 0


def test_small_gap_under_threshold_does_not_reset(contract):
    # frames 3 and 4 dropped: 150 ms gap, not above the 150 ms threshold
    assert run(contract, [meta(0), meta(1), meta(2), meta(5)]) == [None] * 4


def test_frame_gap_above_threshold_resets_once(contract, events):
    out = run(contract, [meta(0), meta(1), meta(5), meta(6)])
    assert out == [None, None, FRAME_GAP, None]
    assert contract.resets == {FRAME_GAP: 1}
    kind, detail = events[-1]
    assert kind == "reset" and detail["reason"] == FRAME_GAP and detail["gap_ms"] == 200.0
    assert detail["frame_id"] == 5 and detail["limit_ms"] == 150.0


def test_camera_restart_is_a_new_pool_id(contract):
    out = run(contract, [meta(7), meta(8), meta(0, t_ms=900, pool="p2"), meta(1, 950, "p2")])
    assert out == [None, None, CAMERA_RESTART, None]
    assert contract.resets == {CAMERA_RESTART: 1}


def test_timestamp_backwards_resets(contract):
    out = run(contract, [meta(0, 100), meta(1, 150), meta(2, 120), meta(3, 170)])
    assert out == [None, None, TIMESTAMP_BACKWARDS, None]
    assert contract.resets == {TIMESTAMP_BACKWARDS: 1}


def test_frame_id_going_backwards_in_one_pool_resets(contract):
    out = run(contract, [meta(5, 100), meta(4, 150)])
    assert out == [None, TIMESTAMP_BACKWARDS]


def test_explicit_reset_applies_to_the_next_frame(contract, events):
    contract.check(meta(0))
    contract.request_reset("operator")
    assert contract.check(meta(1)) == EXPLICIT
    assert contract.check(meta(2)) is None
    assert contract.resets == {EXPLICIT: 1}
    assert events[-1][1]["why"] == "operator"


def test_artifact_swap_resets(contract):
    contract.check(meta(0))
    contract.artifact_swapped("demo 1.0.0", "demo 1.1.0")
    assert contract.check(meta(1)) == ARTIFACT_SWAP


def test_several_conditions_give_one_reset(contract, events):
    contract.check(meta(0))
    contract.request_reset()
    assert contract.check(meta(9, pool="p2")) == EXPLICIT
    assert contract.total == 1
    assert [k for k, _ in events] == ["reset", "reset_merged"]


def test_a_disabled_condition_is_counted_not_reset(events):
    contract = StateContract(ResetConditions(frame_gap_ms=None, camera_restart=False),
                             on_event=lambda kind, detail: events.append((kind, detail)))
    assert run(contract, [meta(0), meta(10), meta(0, 600, "p2")]) == [None, None, None]
    assert contract.total == 0
    assert contract.ignored == {CAMERA_RESTART: 1}
    assert events == [("reset_disabled", events[0][1])]


def test_forget_compares_the_next_frame_with_nothing(contract):
    contract.check(meta(0))
    contract.forget()
    assert contract.check(meta(50)) is None


def test_deadline_counts_calls_over_the_declared_latency():
    d = Deadline(40.0)
    assert [d.observe(s) for s in (0.010, 0.039, 0.041, 0.2, 0.040)] == [
        False, False, True, True, False]
    assert d.misses == 2 and d.worst_ms == pytest.approx(200.0)
