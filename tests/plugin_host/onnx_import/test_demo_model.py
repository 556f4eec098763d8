"""The benchmark model (bench/torch_demo.py, weights from plugins/demo_model.py with non-trivial
BatchNorm statistics) exported once per torch exporter, imported with its recurrent state
declared, loaded with the project's loader and run for several steps: every output matches
onnxruntime fed the same state by hand, within the artifact's declared tolerance."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from plugin_host.executor import Executor
from plugins.demo_model import HIDDEN, build_demo_graph, demo_inputs
from plugins.numpy_backend import NumpyBackend

from .conftest import assert_close, export, import_and_load, onnxruntime_outputs, torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench.torch_demo import torch_demo  # noqa: E402

STATE = {"h": "h_next", "c": "c_next"}


@pytest.fixture(scope="module")
def demo_module():
    return torch_demo(build_demo_graph(seed=0))


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy-nofold", "dynamo"])
def test_demo_model_matches_onnxruntime_over_steps(dynamo, demo_module, tmp_path, signer):
    rng = np.random.default_rng(0)
    example = [torch.from_numpy(v) for v in demo_inputs(rng).values()]
    example += [torch.zeros(1, HIDDEN), torch.zeros(1, HIDDEN)]
    model = export(demo_module, example, tmp_path / "demo.onnx", dynamo=dynamo, fold=False,
                   input_names=["img", "desire", "h", "c"],
                   output_names=["plan", "h_next", "c_next"])
    manifest, loaded = import_and_load(model, tmp_path / "demo.pha", signer, state=STATE,
                                       version="1.0.0")
    graph = loaded.graph
    assert dict(graph.state) == STATE
    assert [(s.name, s.layout) for s in graph.inputs] == [
        ("img", "NCHW"), ("desire", "N"), ("h", "NC"), ("c", "NC")]
    ops = [n.op for n in graph.nodes]
    if not dynamo:  # the legacy exporter without constant folding keeps BatchNormalization
        assert ops.count("batchnorm") == 4
        roles = {e.name: e.role for e in manifest.tensors}
        assert roles["vision.0.bn.running_var"] == "state"
    assert {"conv", "linear", "embedding", "layer_norm", "lstm_cell"} <= set(ops)
    # the executor carries h, c; onnxruntime gets them by hand
    executor = Executor(graph, NumpyBackend())
    h = c = np.zeros((1, HIDDEN), np.float32)
    for step in range(3):
        feed = demo_inputs(rng)
        got = executor.run(feed)
        want = onnxruntime_outputs(model, {**feed, "h": h, "c": c})
        for name in ("plan", "h_next", "c_next"):
            assert_close(loaded, name, got[name], want[name])
        h, c = want["h_next"], want["c_next"]
        assert np.abs(h).max() > 0.01  # the state really moves
