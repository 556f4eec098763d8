"""The benchmarks of imported ONNX models against bare onnxruntime (``bench_quantized``,
``bench_recurrent``): each model exported from torch (and transformed, e.g. quantized), built
into a signed artifact with ``plugin-host build --onnx``'s own function (an ephemeral key),
then timed one inference per call on the same inputs on three sides:

* ``numpy``, ``onnxruntime``: the artifact, verified and loaded, through the Executor on that
  backend in the calling process;
* ``bare``: onnxruntime alone, ``InferenceSession.run`` on the ONNX file, with the onnxruntime
  backend's session options (threads, sequential, all optimizations, no spinning), so with
  onnxruntime's own fusions.

Each side runs in its own child process, blocks alternating (:mod:`bench.alternate`). A
script names its models in a dict of :class:`Model` and calls :func:`main`.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import statistics
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple

import numpy as np

from bench.alternate import alternate_script, serve_side, side_parser
from plugin_host.errors import PluginHostError

SIDES = ("bare", "onnxruntime", "numpy")


class Model(NamedTuple):
    """``export(net_input, onnx_path)`` writes the model's ONNX file for an input of
    ``shape`` (float32, drawn from a fixed seed); ``runs_divisor``: a long call's share of
    the runs; ``label``: what the report says the model is; ``build``: options of
    ``build_onnx_artifact`` (e.g. ``{"onnxruntime_optimized": True}``)."""

    export: Callable[[np.ndarray, Path], None]
    shape: tuple
    runs_divisor: int
    label: str
    build: Mapping[str, Any] | None = None


def inputs(model: Model) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(1).standard_normal(model.shape).astype(np.float32)}


@contextlib.contextmanager
def quiet():
    """The exporters' progress and the quantizer's advice to stderr, out of the report."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(sys.stderr):
        warnings.simplefilter("ignore")
        logging.getLogger().setLevel(logging.ERROR)
        yield


def _artifact(name: str, model: Model, directory: Path) -> tuple[str, str]:
    """The model exported, built and signed: (artifact path, public key path)."""
    from plugin_host.artifacts import generate_key, sign_artifact, write_keypair
    from plugin_host.onnx_import import build_onnx_artifact

    path = directory / f"{name}.onnx"
    with quiet():
        model.export(inputs(model)["x"], path)
    out = directory / f"{name}.pha"
    build_onnx_artifact(path, out, latency_ms=100.0, **(model.build or {}))
    key = generate_key()
    sign_artifact(out, key)
    return str(out), str(write_keypair(directory, key, name=name)[1])


def _loaded(artifact: str, pub: str):
    from bench.fixtures import trust_store
    from plugin_host.artifacts import load_verified

    return load_verified(Path(artifact), trust=trust_store(pub), rollback=None,
                         backends={"numpy", "onnxruntime"})


def _factories(models: Mapping[str, Model]) -> dict:
    """side -> ``make(artifact, pub) -> (call, close)`` (:data:`bench.alternate.SideFactory`);
    the model is the one the artifact's name names."""
    def feed(artifact: str) -> dict[str, np.ndarray]:
        return inputs(models[Path(artifact).stem])

    def executor_side(backend_name: str):
        def make(artifact: str, pub: str):
            from plugin_host.executor import Executor
            from plugins.numpy_backend import NumpyBackend
            from plugins.onnxruntime_backend import OnnxruntimeBackend

            backend = NumpyBackend() if backend_name == "numpy" else OnnxruntimeBackend()
            executor = Executor(_loaded(artifact, pub).graph, backend)
            given = feed(artifact)
            return (lambda: executor.run(dict(given))), (lambda: None)
        return make

    def bare(artifact: str, pub: str):
        import onnxruntime as ort

        from plugins.onnxruntime_backend import session

        run = ort.InferenceSession(str(Path(artifact).with_suffix(".onnx")),
                                   session.session_options(),
                                   providers=["CPUExecutionProvider"]).run
        given = feed(artifact)
        return (lambda: run(None, given)), (lambda: None)

    return {"bare": bare, "onnxruntime": executor_side("onnxruntime"),
            "numpy": executor_side("numpy")}


def _agreement(factories: dict, artifact: str, pub: str) -> str:
    """The largest difference of each backend's first output from bare onnxruntime's."""
    bare = factories["bare"](artifact, pub)[0]()[0]
    parts = []
    for side in ("onnxruntime", "numpy"):
        outputs = factories[side](artifact, pub)[0]()
        y = next(iter(outputs.values()))
        parts.append(f"{side} {float(np.max(np.abs(y - bare))):.3g}")
    return ", ".join(parts)


def main(script: str, doc: str, models: Mapping[str, Model], *, runs: int = 200,
         rounds: int = 6) -> int:
    """The benchmark ``script`` (its ``doc`` the help): the parent builds each model and
    times the sides in their children; with ``--child`` this process is one of them."""
    parser = side_parser(doc, runs=runs, rounds=rounds, warmup=20)
    parser.add_argument("--models", nargs="+", choices=list(models), default=list(models))
    args = parser.parse_args()
    factories = _factories(models)
    if args.child:
        serve_side(factories, args.child, warmup=args.warmup, scale=1e3)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            model = models[name]
            print(f"== {name}: building the artifact", file=sys.stderr, flush=True)
            try:
                artifact, pub = _artifact(name, model, Path(tmp))
            except PluginHostError as exc:  # e.g. a reference this CPU cannot compute exactly
                print(f"{name} ({model.label}): not built on this machine: {exc}")
                continue
            n = max(1, args.runs // model.runs_divisor)
            samples = alternate_script(script, argparse.Namespace(**{**vars(args), "runs": n}),
                                       SIDES, artifact, pub, pause=0.05)
            medians = {side: statistics.median(samples[side]) for side in SIDES}
            print(f"{name} ({model.label}): {args.rounds} rounds x {n} runs per side, each "
                  f"side in its own process")
            for side in SIDES:
                print(f"  {side:12s} median {medians[side]:8.3f} ms   ratio to bare "
                      f"{medians[side] / medians['bare']:.2f}x")
            print(f"  largest output difference from bare: "
                  f"{_agreement(factories, artifact, pub)}")
    return 0
