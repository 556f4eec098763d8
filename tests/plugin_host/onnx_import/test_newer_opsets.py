"""Ops that opsets 24 to 28 added, each a hand-written one-node model: Swish (opset 24)
compared with onnxruntime over its alpha and inputs with nan, inf, -0.0 and float32 extremes;
SwiGLU (opset 28), which onnxruntime 1.32 cannot run, compared with onnx's reference
evaluator, its build refused for want of onnxruntime's reference."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import ModelFileError, ModelImportError
from plugin_host.onnx_import import build_onnx_artifact, import_onnx
from plugins.numpy_backend import NumpyBackend
from plugins.onnxruntime_backend import OnnxruntimeBackend

from .conftest import assert_refused, check_on_both_backends, import_and_load
from .test_more_ops import _feeds, _model

BACKENDS = {"numpy": NumpyBackend, "onnxruntime": OnnxruntimeBackend}


@pytest.mark.parametrize("alpha", [None, 0.5, -2.0, 0.0, 1.702])
def test_swish_matches_onnxruntime(alpha, tmp_path, signer):
    attrs = {} if alpha is None else {"alpha": alpha}
    model = _model(tmp_path, "Swish", {"x": (6, 7)}, opset=24, **attrs)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert [n.op for n in loaded.graph.nodes] == (
        ["sigmoid", "mul"] if alpha is None else ["mul", "sigmoid", "mul"])
    check_on_both_backends(model, loaded, _feeds({"x": (6, 7)}, 4))


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("alpha", [None, 1.702])
def test_swiglu_matches_onnx_reference_evaluator(alpha, backend, tmp_path):
    """onnxruntime 1.32 has no SwiGLU kernel, so no artifact can be built from it (below);
    the import itself is checked against onnx's own reference implementation."""
    from onnx.reference import ReferenceEvaluator

    from plugin_host.executor import Executor

    attrs = {} if alpha is None else {"alpha": alpha}
    model = _model(tmp_path, "SwiGLU", {"a": (4, 9), "b": (4, 9)}, opset=28, **attrs)
    graph = import_onnx(model).graph
    executor = Executor(graph, BACKENDS[backend]())
    for feed in _feeds({"a": (4, 9), "b": (4, 9)}, 3, nan=False):
        with np.errstate(over="ignore", invalid="ignore"):  # inf and inf * 0, as intended
            want = ReferenceEvaluator(str(model)).run(None, feed)[0]
        got = executor.run(dict(feed))["y"]
        # the import's default tolerance: onnxruntime's sigmoid is an approximation at the
        # far tail (about 1e-6 off near sigmoid(-10)), the reference evaluator's exact
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_a_swiglu_build_is_refused_while_onnxruntime_cannot_run_it(tmp_path):
    model = _model(tmp_path, "SwiGLU", {"a": (4, 9), "b": (4, 9)}, opset=28)
    with pytest.raises(ModelImportError, match="onnxruntime cannot load the model"):
        build_onnx_artifact(model, tmp_path / "m.pha")
    assert not (tmp_path / "m.pha").exists()


def test_swiglu_of_two_shapes_is_refused(tmp_path):
    """Run-time dims of two names may differ when the call runs, where SwiGLU does not
    broadcast (the checker refuses static shapes that differ)."""
    model = _model(tmp_path, "SwiGLU", {"a": ("n", 9), "b": ("m", 9)}, opset=28)
    assert_refused(model, ModelFileError, "node 'node' (SwiGLU)",
                   "A 'a' (float32 ['n', 9]) and B 'b' (float32 ['m', 9]) must be of one dtype "
                   "and shape: SwiGLU does not broadcast")
