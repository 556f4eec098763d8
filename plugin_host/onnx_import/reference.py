"""Golden outputs from the reference implementation of ONNX semantics: onnxruntime's CPU provider.

Graph optimizations are off so that the reference computes what the file says, node by node.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ..errors import ModelImportError, UsageError

__all__ = ["REFERENCE", "run_reference"]

#: The name stored in the artifact as the golden reference.
REFERENCE = "onnxruntime"


def run_reference(model, onnx_inputs: Mapping[str, str], onnx_outputs: Mapping[str, str],
                  cases: Sequence[Mapping[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """Run every case (keyed by ABI input name) on onnxruntime; outputs keyed by ABI name."""
    try:
        import onnxruntime as ort
    except ImportError:  # pragma: no cover - the onnx extra is part of the test setup
        raise UsageError("ONNX import computes golden vectors with onnxruntime: pip install "
                         "'plugin-host[onnx]'") from None
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(model.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own untyped errors
        raise ModelImportError(f"onnxruntime cannot load the model: "
                               f"{str(exc).splitlines()[0][:300]}") from None
    names = list(onnx_outputs)
    results = []
    for case in cases:
        feed = {onnx_inputs[k]: v for k, v in case.items()}
        try:
            values = session.run([onnx_outputs[n] for n in names], feed)
        except Exception as exc:
            raise ModelImportError(f"onnxruntime cannot run the model: "
                                   f"{str(exc).splitlines()[0][:300]}") from None
        results.append({n: np.asarray(v) for n, v in zip(names, values)})
    return results
