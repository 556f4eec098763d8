"""Models quantized by onnxruntime's ``quantize_dynamic``: the imported artifact on both backends
against bare onnxruntime on the quantized ONNX file, in one run.

Exports two torch models, quantizes each with ``quantize_dynamic`` (uint8 weights: exact on
every CPU, see README "Quantized models"), builds each into a signed artifact with
``plugin-host build --onnx``'s own function (an ephemeral key) and times one inference per call
on the same inputs:

* ``numpy``, ``onnxruntime``: the artifact, verified and loaded, through the Executor on that
  backend in the calling process (the graph the import writes: ``dynamic_quantize`` and
  ``integer_linear`` for DynamicQuantizeLinear and MatMulInteger);
* ``bare``: onnxruntime alone, ``InferenceSession.run`` on the quantized ONNX file, with the
  onnxruntime backend's session options (threads, sequential, all optimizations, no
  spinning), so with onnxruntime's own fusions (DynamicQuantizeMatMul).

The models: an MLP 512-1024-1024-10 on a batch of 8 (its weights dominate: integer GEMMs on
one byte per weight), torch's ``TransformerEncoderLayer(256, 4, 512)`` over 64 tokens
(exported by the dynamo exporter), and torch's LSTM of 64 units over 1,024 steps (the import
unrolls its quantized steps, some 24 glue ops each, where onnxruntime runs one kernel; a 20th
of the runs). Each side runs in its own child process, blocks alternating
(bench/alternate.py). There is no target for these: the ratios say what a quantized model costs
through the host, and the outputs' agreement is printed beside them.

    .venv/bin/python bench/bench_quantized.py [--runs 200] [--rounds 6]
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

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.alternate import alternate_script, serve_side, side_parser  # noqa: E402

SIDES = ("bare", "onnxruntime", "numpy")
MODELS = ("mlp", "encoder", "lstm")
#: each model's input shape; the LSTM's calls are some 100 times longer: a 20th of the runs
SHAPES = {"mlp": (8, 512), "encoder": (1, 64, 256), "lstm": (1, 1024, 64)}
RUNS_DIVISOR = {"mlp": 1, "encoder": 1, "lstm": 20}


def _inputs(model: str) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(1).standard_normal(SHAPES[model]).astype(np.float32)}


def _lstm():
    import torch

    class Lstm(torch.nn.Module):
        """torch's LSTM (64 units) over a batch-first sequence: its outputs only."""

        def __init__(self):
            super().__init__()
            self.lstm = torch.nn.LSTM(64, 64, batch_first=True)

        def forward(self, x):
            return self.lstm(x)[0]

    return Lstm()


def _export(model: str, directory: Path) -> Path:
    """The float model exported to ONNX, then quantized: the quantized file's path."""
    import torch
    from onnxruntime import quantization

    torch.manual_seed(0)
    if model == "mlp":
        net = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(),
                                  torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                                  torch.nn.Linear(1024, 10))
    elif model == "lstm":
        net = _lstm()
    else:
        net = torch.nn.TransformerEncoderLayer(256, 4, 512, batch_first=True, dropout=0.0)
    x = torch.from_numpy(_inputs(model)["x"])
    float_path, path = directory / f"{model}.float.onnx", directory / f"{model}.onnx"
    # the exporter's progress and the quantizer's advice go to stderr, out of the report
    with warnings.catch_warnings(), contextlib.redirect_stdout(sys.stderr):
        warnings.simplefilter("ignore")
        logging.getLogger().setLevel(logging.ERROR)
        torch.onnx.export(net.eval(), (x,), str(float_path), input_names=["x"],
                          output_names=["y"], dynamo=model == "encoder")
        quantization.quantize_dynamic(str(float_path), str(path),
                                      weight_type=quantization.QuantType.QUInt8)
    return path


def _artifact(model: str, directory: Path) -> tuple[str, str]:
    """The quantized model built and signed: (artifact path, public key path)."""
    from plugin_host.artifacts import generate_key, sign_artifact, write_keypair
    from plugin_host.onnx_import import build_onnx_artifact

    out = directory / f"{model}.pha"
    build_onnx_artifact(_export(model, directory), out, latency_ms=100.0)
    key = generate_key()
    sign_artifact(out, key)
    return str(out), str(write_keypair(directory, key, name=model)[1])


def _loaded(artifact: str, pub: str):
    from bench.fixtures import trust_store
    from plugin_host.artifacts import load_verified

    return load_verified(Path(artifact), trust=trust_store(pub), rollback=None,
                         backends={"numpy", "onnxruntime"})


def _executor_side(backend_name: str):
    def make(artifact: str, pub: str):
        from plugin_host.executor import Executor
        from plugins.numpy_backend import NumpyBackend
        from plugins.onnxruntime_backend import OnnxruntimeBackend

        backend = NumpyBackend() if backend_name == "numpy" else OnnxruntimeBackend()
        executor = Executor(_loaded(artifact, pub).graph, backend)
        feed = _inputs(_model_of(artifact))
        return (lambda: executor.run(dict(feed))), (lambda: None)
    return make


def _bare(artifact: str, pub: str):
    import onnxruntime as ort

    from plugins.onnxruntime_backend import session

    model = _model_of(artifact)
    onnx_file = str(Path(artifact).with_name(f"{model}.onnx"))
    run = ort.InferenceSession(onnx_file, session.session_options(),
                               providers=["CPUExecutionProvider"]).run
    feed = _inputs(model)
    return (lambda: run(None, feed)), (lambda: None)


def _model_of(artifact: str) -> str:
    return Path(artifact).stem


FACTORIES = {"bare": _bare, "onnxruntime": _executor_side("onnxruntime"),
             "numpy": _executor_side("numpy")}


def _agreement(artifact: str, pub: str) -> str:
    """The largest difference of each backend's output from bare onnxruntime's."""
    bare = _bare(artifact, pub)[0]()[0]
    parts = []
    for side in ("onnxruntime", "numpy"):
        y = FACTORIES[side](artifact, pub)[0]()["y"]
        parts.append(f"{side} {float(np.max(np.abs(y - bare))):.3g}")
    return ", ".join(parts)


def main() -> int:
    parser = side_parser(__doc__, runs=200, rounds=6, warmup=20)
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    args = parser.parse_args()
    if args.child:
        serve_side(FACTORIES, args.child, warmup=args.warmup, scale=1e3)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models:
            print(f"== {model}: building the quantized artifact", file=sys.stderr, flush=True)
            artifact, pub = _artifact(model, Path(tmp))
            runs = max(1, args.runs // RUNS_DIVISOR[model])
            samples = alternate_script(__file__, argparse.Namespace(**{**vars(args),
                                                                       "runs": runs}),
                                       SIDES, artifact, pub, pause=0.05)
            medians = {side: statistics.median(samples[side]) for side in SIDES}
            print(f"{model} (quantize_dynamic, uint8 weights): {args.rounds} rounds x "
                  f"{runs} runs per side, each side in its own process")
            for side in SIDES:
                print(f"  {side:12s} median {medians[side]:8.3f} ms   ratio to bare "
                      f"{medians[side] / medians['bare']:.2f}x")
            print(f"  largest output difference from bare: {_agreement(artifact, pub)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
