"""The benchmark model: the project's executor on the numpy backend against torch eager.

Builds the design's benchmark model with the project's layers, loads the same weights into
torch (``bench/torch_demo.py``) and times both on the same inputs, then prints both medians, the
ratio (target: <= 1.0) and the largest output difference.

Each side is timed in its own child process, alternating over several rounds within this one
run: numpy's OpenBLAS threads and torch's OpenMP threads both spin while idle, and on a 2-core
machine two such pools in one process slow each other down several-fold, which would measure
the contention rather than either library.

    .venv/bin/python bench/bench_model.py [--runs 50] [--rounds 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from plugin_host.executor import Executor  # noqa: E402
from plugins.demo_model import build_demo_graph, demo_inputs  # noqa: E402
from plugins.numpy_backend import NumpyBackend  # noqa: E402

SEED_WEIGHTS, SEED_INPUTS = 0, 1


def _inputs():
    feed = demo_inputs(np.random.default_rng(SEED_INPUTS))
    state = {n: np.zeros((1, 512), np.float32) for n in ("h", "c")}
    return {**feed, **state}


def _ours():
    executor = Executor(build_demo_graph(seed=SEED_WEIGHTS), NumpyBackend())
    inputs = _inputs()   # state passed explicitly: every call computes the same step
    return lambda: executor.run(inputs)


def _torch(threads: int):
    import torch

    from bench.torch_demo import torch_demo

    torch.set_num_threads(threads)
    model = torch_demo(build_demo_graph(seed=SEED_WEIGHTS))
    args = [torch.from_numpy(v) for v in _inputs().values()]

    def call():
        with torch.inference_mode():
            return model(*args)
    return call


def _time(fn, runs: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1e3)
    return samples


def _child(side: str, runs: int, warmup: int, threads: int) -> None:
    fn = _ours() if side == "ours" else _torch(threads)
    print(json.dumps(_time(fn, runs, warmup)))


def _run_child(side: str, args) -> list[float]:
    out = subprocess.run([sys.executable, __file__, "--child", side, "--runs", str(args.runs),
                          "--warmup", str(args.warmup), "--threads", str(args.threads)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    ap.add_argument("--child", choices=["ours", "torch"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args.child, args.runs, args.warmup, args.threads)
        return 0

    ours, theirs = [], []
    for _ in range(args.rounds):
        ours += _run_child("ours", args)
        theirs += _run_child("torch", args)
    ours_med, torch_med = statistics.median(ours), statistics.median(theirs)

    # numbers: the same step on both, compared here (timing is done)
    out = _ours()()
    ref = [t.numpy() for t in _torch(args.threads)()]
    diff = max(float(np.max(np.abs(out[k] - r))) for k, r in zip(("plan", "h_next", "c_next"), ref))

    import torch
    print(f"benchmark model: {args.rounds} rounds x {args.runs} runs per side, each side in its "
          f"own process; torch threads {args.threads}")
    print(f"  plugin-host executor, numpy backend: median {ours_med:7.3f} ms")
    print(f"  torch {torch.__version__} eager:           median {torch_med:7.3f} ms")
    print(f"  ratio ours/torch: {ours_med / torch_med:.3f}  (target <= 1.0)")
    print(f"  largest output difference (plan, h, c): {diff:.3g}")
    if os.environ.get("OPENBLAS_CORETYPE"):  # it decides numpy's matrix-product speed
        print(f"  OpenBLAS kernels pinned by OPENBLAS_CORETYPE={os.environ['OPENBLAS_CORETYPE']}"
              f" in the environment (unset, OpenBLAS picks them by probing the CPU)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
