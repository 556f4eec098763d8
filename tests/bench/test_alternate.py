"""The benchmarks' timing harness (bench/alternate.py): every side's blocks are pooled, each
round's block medians are kept for paired differences, the order changes from round to round,
and the rounds are shared out over fresh sets of children."""

from __future__ import annotations

import sys
from pathlib import Path

from bench.alternate import alternate, paired

#: a child that serves blocks of constant "timings", adds how many blocks it has served (to
#: see the children started afresh), and notes its name in a shared log as it serves
CHILD = """
import json, sys
value, name, log = float(sys.argv[1]), sys.argv[2], sys.argv[3]
print("ready", flush=True)
served = 0
for line in sys.stdin:
    served += 1
    with open(log, "a") as f:
        f.write(name)
    print(json.dumps([value] * int(line) + [served * 1000.0]), flush=True)
"""


def test_blocks_are_pooled_paired_by_round_and_ordered_anew(tmp_path):
    log = tmp_path / "order"
    values = {"a": 1.0, "b": 3.0, "c": 2.0}
    samples = alternate(
        lambda side: [sys.executable, "-c", CHILD, str(values[side]), side, str(log)],
        list(values), rounds=8, runs=4, pause=0.0, generations=2)
    for side, value in values.items():
        assert len(samples[side]) == 8 * 5
        assert samples[side].count(value) == 8 * 4
        # fresh children for the second generation: each served blocks 1-4 twice
        assert sorted(t for t in samples[side] if t >= 1000) == [
            n * 1e3 for n in (1, 1, 2, 2, 3, 3, 4, 4)]
    assert len(samples.rounds) == 8
    assert paired(samples, "b", "a") == [2.0] * 8
    assert paired(samples, "c", "b") == [-1.0] * 8
    served = log.read_text()
    orders = {served[i:i + 3] for i in range(0, len(served), 3)}
    assert all(sorted(order) == ["a", "b", "c"] for order in orders)
    assert len(orders) >= 2  # not the same order every round


#: a child serving blocks through the real ``serve_blocks``; every call notes when it began
SERVING_CHILD = """
import sys, time
sys.path.insert(0, sys.argv[2])
from bench.alternate import serve_blocks
log = open(sys.argv[1], "a")
serve_blocks(lambda: log.write(f"{time.monotonic()}\\n") and log.flush(), warmup=1, scale=1.0)
"""


def _calls(log) -> list[float]:
    return [float(line) for line in log.read_text().split()]


def test_a_paced_block_sleeps_before_every_call_and_adds_no_untimed_one(tmp_path):
    root = str(Path(__file__).resolve().parents[2])
    back_to_back, paced = tmp_path / "back-to-back", tmp_path / "paced"
    for log, period in ((back_to_back, 0.0), (paced, 0.03)):
        samples = alternate(lambda side: [sys.executable, "-c", SERVING_CHILD, str(log), root],
                            ["only"], rounds=2, runs=3, pause=0.0, period=period)
        assert len(samples["only"]) == 2 * 3
    # warm-up, then per block one untimed call and three timed ones, back to back
    assert len(_calls(back_to_back)) == 1 + 2 * (1 + 3)
    calls = _calls(paced)
    assert len(calls) == 1 + 2 * 3
    # every call of a paced block begins at least a period after the one before
    for block in (calls[1:4], calls[4:7]):
        assert all(later - earlier >= 0.03 for earlier, later in zip(block, block[1:]))
