"""Timing harness shared by the benchmarks that compare sides in separate processes.

Each side runs in its own long-lived child process (two thread pools in one process slow each
other down on two cores, and a side's caches should be its own). The parent asks the children
in turn for blocks of timed calls, in a new order every round, pausing between blocks, so that
drift in the machine's load falls on every side alike; the samples of all blocks are pooled
per side.

Child: ``serve_blocks(call, scale)`` -- warm up, print ``ready``, then answer each block size
read from stdin (``N``, or ``N PERIOD`` for a paced block: a sleep of PERIOD s before each
call) with that many timings (seconds * ``scale``) as one JSON line.
Parent: ``alternate(command_for_side, sides, rounds, runs, pause, generations, period)`` ->
samples per side (a :class:`Samples`, which also keeps each round's block medians:
:func:`paired` gives a side's per-round difference to another side, which drift between rounds
cannot move); with ``generations`` > 1 the children are started afresh that many times;
``period`` > 0 asks for paced blocks.

A benchmark script whose sides are built from a signed artifact uses the three helpers below:
``side_parser`` (its options plus the hidden ``--child SIDE ARTIFACT PUB``), ``serve_side``
(the child: build the side, serve its blocks, clean up) and ``alternate_script`` (the parent:
run the script itself once per side as the children).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from typing import Callable, Iterable, Mapping

#: A side: ``make(artifact, pub) -> (call, close)``.
SideFactory = Callable[[str, str], tuple[Callable[[], object], Callable[[], object]]]


def serve_blocks(call: Callable[[], object], *, warmup: int, scale: float) -> None:
    for _ in range(warmup):
        call()
    print("ready", flush=True)
    for line in sys.stdin:
        runs, _, period = line.partition(" ")
        runs, period = int(runs), float(period or 0)
        if not period:
            call()  # one untimed call: caches and threads after the pause
        samples = []
        for _ in range(runs):
            if period:
                time.sleep(period)
            t = time.perf_counter()
            call()
            samples.append((time.perf_counter() - t) * scale)
        print(json.dumps(samples), flush=True)


class Samples(dict):
    """side -> every timing of that side, pooled; ``rounds``: for each round, side -> the
    median of that side's block in the round."""

    def __init__(self, sides: Iterable[str]) -> None:
        super().__init__((side, []) for side in sides)
        self.rounds: list[dict[str, float]] = []


def paired(samples: Samples, side: str, base: str) -> list[float]:
    """Per round, the median of ``side``'s block minus that of ``base``'s block (the blocks
    of one round run within a second or two of each other)."""
    return [r[side] - r[base] for r in samples.rounds]


def alternate(command_for_side: Callable[[str], list[str]], sides: Iterable[str], *,
              rounds: int, runs: int, pause: float, generations: int = 1,
              period: float = 0.0) -> Samples:
    """``rounds`` blocks of ``runs`` calls per side, alternating. The rounds are shared out
    over ``generations`` sets of fresh children: a process's own luck (where its arrays and
    code landed, which of them got huge pages) then counts for no side more than the rest.
    ``period``: paced blocks, each call ``period`` s after the end of the one before (a
    daemon's pace: caches and idle CPUs gone cold between calls); 0, back to back."""
    sides = list(sides)
    samples = Samples(sides)
    generations = max(1, min(generations, rounds))
    for generation in range(generations):
        share = rounds // generations + (generation < rounds % generations)
        _alternate_once(command_for_side, sides, samples, rounds=share, runs=runs,
                        pause=pause, period=period)
        if generations > 1:
            print(f"  generation {generation + 1}/{generations} done", file=sys.stderr,
                  flush=True)
    return samples


def _alternate_once(command_for_side: Callable[[str], list[str]], sides: list[str],
                    samples: Samples, *, rounds: int, runs: int, pause: float,
                    period: float) -> None:
    children: dict[str, subprocess.Popen] = {}
    try:
        for side in sides:
            child = subprocess.Popen(command_for_side(side), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
            children[side] = child
            if child.stdout.readline().strip() != "ready":
                raise SystemExit(f"the {side} child failed to start")
            time.sleep(pause)
        for round_ in range(rounds):
            # a new order every round: the block after the parent's own work, or after one
            # particular side, favours no side
            order = list(children.items())
            random.Random(round_).shuffle(order)
            medians = {}
            for side, child in order:
                child.stdin.write(f"{runs} {period}\n" if period else f"{runs}\n")
                child.stdin.flush()
                block = json.loads(child.stdout.readline())
                samples[side] += block
                medians[side] = statistics.median(block)
                time.sleep(pause)
            samples.rounds.append(medians)
    finally:
        for child in children.values():
            if child.stdin:
                child.stdin.close()
            child.wait(timeout=30)


def side_parser(description: str, *, runs: int, rounds: int, warmup: int,
                generations: int = 1) -> argparse.ArgumentParser:
    """The options every alternating benchmark has (a script adds its own)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--runs", type=int, default=runs, help="timed calls per block")
    parser.add_argument("--rounds", type=int, default=rounds,
                        help="blocks per side, alternating")
    parser.add_argument("--generations", type=int, default=generations,
                        help="fresh child processes this many times, the rounds shared out")
    parser.add_argument("--warmup", type=int, default=warmup)
    parser.add_argument("--child", nargs=3, metavar=("SIDE", "ARTIFACT", "PUB"),
                        help=argparse.SUPPRESS)
    return parser


def serve_side(sides: Mapping[str, SideFactory], child: list[str], *, warmup: int,
               scale: float) -> None:
    """The child process: build side ``child[0]`` from the artifact and key ``child[1:]``
    and serve its blocks (timings in seconds * ``scale``)."""
    side, artifact, pub = child
    call, close = sides[side](artifact, pub)
    try:
        serve_blocks(call, warmup=warmup, scale=scale)
    finally:
        close()


def alternate_script(script: str, args: argparse.Namespace, sides: Iterable[str],
                     artifact: str, pub: str, *, pause: float, period: float = 0.0,
                     rounds: int | None = None) -> Samples:
    """The parent: ``script`` run once per side as its child, blocks alternating (``rounds``:
    instead of ``args.rounds``; ``period``: paced blocks, see :func:`alternate`)."""
    return alternate(
        lambda side: [sys.executable, script, "--warmup", str(args.warmup), "--child", side,
                      artifact, pub],
        sides, rounds=args.rounds if rounds is None else rounds, runs=args.runs, pause=pause,
        generations=args.generations, period=period)
