"""Timing harness shared by the benchmarks that compare sides in separate processes.

Each side runs in its own long-lived child process (two thread pools in one process slow each
other down on two cores, and a side's caches should be its own). The parent asks the children
in turn for blocks of timed calls, pausing between blocks, so that drift in the machine's load
falls on every side alike; the samples of all blocks are pooled per side.

Child: ``serve_blocks(call, scale)`` -- warm up, print ``ready``, then answer each block size
read from stdin with that many timings (seconds * ``scale``) as one JSON line.
Parent: ``alternate(command_for_side, sides, rounds, runs, pause)`` -> samples per side.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Callable, Iterable


def serve_blocks(call: Callable[[], object], *, warmup: int, scale: float) -> None:
    for _ in range(warmup):
        call()
    print("ready", flush=True)
    for line in sys.stdin:
        runs = int(line)
        call()  # one untimed call: caches and threads after the pause
        samples = []
        for _ in range(runs):
            t = time.perf_counter()
            call()
            samples.append((time.perf_counter() - t) * scale)
        print(json.dumps(samples), flush=True)


def alternate(command_for_side: Callable[[str], list[str]], sides: Iterable[str], *,
              rounds: int, runs: int, pause: float) -> dict[str, list[float]]:
    sides = list(sides)
    children: dict[str, subprocess.Popen] = {}
    try:
        for side in sides:
            child = subprocess.Popen(command_for_side(side), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
            children[side] = child
            if child.stdout.readline().strip() != "ready":
                raise SystemExit(f"the {side} child failed to start")
            time.sleep(pause)
        samples: dict[str, list[float]] = {side: [] for side in sides}
        for _ in range(rounds):
            for side, child in children.items():
                child.stdin.write(f"{runs}\n")
                child.stdin.flush()
                samples[side] += json.loads(child.stdout.readline())
                time.sleep(pause)
        return samples
    finally:
        for child in children.values():
            if child.stdin:
                child.stdin.close()
            child.wait(timeout=30)
