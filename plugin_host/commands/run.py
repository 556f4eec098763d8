"""``plugin-host run``: run a model on synthetic frames (the daemon arrives with the camera path)."""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from abi import dtypes
from abi.errors import PluginHostError

from .common import EXIT_INTERRUPTED, Formatter, percentile


def register(verbs) -> None:
    run = verbs.add_parser(
        "run", formatter_class=Formatter, help="run the demo model on synthetic frames",
        description="Run the benchmark model of the design through the executor on synthetic "
                    "frames and print its outputs and timings. Stops after --frames frames, "
                    "after --duration seconds, or on Ctrl-C.",
        epilog="example:\n  plugin-host run --frames 20\n  plugin-host run --duration 10")
    run.add_argument("--model", default="demo", help="model builder to run (default: demo)")
    run.add_argument("--backend", default="numpy", help="inference backend (default: numpy)")
    run.add_argument("--frames", type=int, default=20, help="frames to run (default: 20)")
    run.add_argument("--duration", type=float, default=None,
                     help="stop after this many seconds instead of a frame count")
    run.add_argument("--seed", type=int, default=0, help="seed for weights and frames")
    run.set_defaults(func=_cmd_run)


def _cmd_run(args: argparse.Namespace) -> int:
    from ..executor import Executor
    from ..plugins import get_backend, get_plugin_manager, model_builders

    pm = get_plugin_manager()
    builders = model_builders(pm)
    if args.model not in builders:
        raise PluginHostError(f"no model builder named {args.model!r}; available: "
                              f"{sorted(builders)}")
    t0 = time.perf_counter()
    graph = builders[args.model](args.seed)
    executor = Executor(graph, get_backend(pm, args.backend))
    print(f"loaded {graph.name!r}: {len(graph.nodes)} nodes, "
          f"{sum(a.nbytes for a in graph.tensors.values()) / 1e6:.1f} MB of weights, "
          f"backend {args.backend!r}, in {(time.perf_counter() - t0) * 1e3:.0f} ms", flush=True)
    print("inputs:  " + ", ".join(f"{s.name} {s.dtype}{tuple(s.shape)} {s.layout}"
                                  for s in graph.inputs))
    print("outputs: " + ", ".join(f"{s.name} {s.dtype}{tuple(s.shape)}" for s in graph.outputs))

    rng = np.random.default_rng(args.seed)
    feed_specs = graph.feed_inputs
    latencies: list[float] = []
    deadline = None if args.duration is None else time.monotonic() + args.duration
    frame = 0
    try:
        while (frame < args.frames) if deadline is None else (time.monotonic() < deadline):
            inputs = _synthetic_inputs(feed_specs, executor.index_inputs, rng)
            start = time.perf_counter()
            outputs = executor.run(inputs)
            latencies.append((time.perf_counter() - start) * 1e3)
            first = outputs[graph.outputs[0].name].ravel()
            print(f"frame {frame:4d}  {latencies[-1]:7.2f} ms  "
                  f"{graph.outputs[0].name}[:4] = {np.array2string(first[:4], precision=4)}",
                  flush=True)
            frame += 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        _summary(latencies, executor)
        return EXIT_INTERRUPTED
    _summary(latencies, executor)
    return 0


def _synthetic_inputs(specs, index_inputs, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random inputs matching ``specs`` (symbolic dims as 1); valid indices for Embeddings."""
    inputs = {}
    for spec in specs:
        shape = tuple(d if isinstance(d, int) else 1 for d in spec.shape)
        dtype = dtypes.to_numpy(spec.dtype)
        if dtype.kind in "iub":
            high = index_inputs.get(spec.name, 2)
            inputs[spec.name] = rng.integers(0, high, size=shape).astype(dtype)
        else:
            inputs[spec.name] = rng.standard_normal(shape).astype(dtype)
    return inputs


def _summary(latencies: list[float], executor) -> None:
    if not latencies:
        print("no frames run")
        return
    print(f"{len(latencies)} frames: latency p50 {percentile(latencies, 50):.2f} ms, "
          f"p99 {percentile(latencies, 99):.2f} ms, max {max(latencies):.2f} ms; "
          f"state resets {executor.resets}")


