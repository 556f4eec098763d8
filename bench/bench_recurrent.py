"""Float32 recurrent models (torch's nn.LSTM, nn.GRU, nn.RNN): the imported artifact on both
backends against bare onnxruntime on the exported ONNX file, in one run
(:mod:`bench.onnx_sides`: each side in its own child process, blocks alternating).

Each is exported by torch's legacy exporter (one ONNX LSTM, GRU or RNN node per layer) and
imported as one ABI ``lstm``, ``gru`` or ``rnn`` per direction. On the onnxruntime backend each
is an ONNX If that runs onnxruntime's own kernel on finite inputs and a Scan of element-wise
ops otherwise (``plugins/onnxruntime_backend/recurrent_kernels.py``); the inputs here are
finite, so this times the kernel and the test before it. ``--scan`` times the Scan instead
(the kernels' bound set to 0 in the children, as before the If), for the comparison.

Models: 64 units over 1,024 steps, batch 1, each kind (a 10th of the runs), and a
bidirectional two-layer LSTM of 128 units over 100 steps, batch 4. There is no target for
these: the ratios say what a recurrent model costs through the host.

    .venv/bin/python bench/bench_recurrent.py [--runs 200] [--rounds 6] [--models lstm ...]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.onnx_sides import Model, main  # noqa: E402


def _export(kind: str, hidden: int, layers: int = 1, bidirectional: bool = False):
    """``export`` of :class:`Model`: torch's ``kind`` (LSTM, GRU, RNN), batch first, its
    outputs only, exported by the legacy exporter."""
    def export(x: np.ndarray, path: Path) -> None:
        import torch

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.rnn = getattr(torch.nn, kind)(x.shape[-1], hidden, num_layers=layers,
                                                   bidirectional=bidirectional,
                                                   batch_first=True)

            def forward(self, x):
                return self.rnn(x)[0]

        torch.manual_seed(0)
        torch.onnx.export(Net().eval(), (torch.from_numpy(x),), str(path), input_names=["x"],
                          output_names=["y"], dynamo=False)
    return export


MODELS = {
    "lstm": Model(_export("LSTM", 64), (1, 1024, 64), 10, "LSTM, 64 units, 1,024 steps"),
    "gru": Model(_export("GRU", 64), (1, 1024, 64), 10, "GRU, 64 units, 1,024 steps"),
    "rnn": Model(_export("RNN", 64), (1, 1024, 64), 10, "RNN (tanh), 64 units, 1,024 steps"),
    "lstm2": Model(_export("LSTM", 128, layers=2, bidirectional=True), (4, 100, 32), 1,
                   "bidirectional 2-layer LSTM, 128 units, 100 steps, batch 4"),
}

if __name__ == "__main__":
    if "--scan" in sys.argv:  # the children inherit it through the environment
        sys.argv.remove("--scan")
        os.environ["BENCH_RECURRENT_SCAN"] = "1"
    if os.environ.get("BENCH_RECURRENT_SCAN"):
        from plugins.onnxruntime_backend import recurrent_kernels

        recurrent_kernels.LIMIT = np.float32(0)
    sys.exit(main(__file__, __doc__, MODELS))
