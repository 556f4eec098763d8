"""The model evaluated in float64: which of two float32 runs is off, when the build's
comparison fails.

The build holds the imported graph to onnxruntime's outputs (:mod:`.comparison`). Both sides
round in float32, each in its own way, and onnxruntime's way is not always the finer one: its
InstanceNormalization computes ``x * scale + (bias - mean * scale)``, whose two large terms
cancel where the mean is large against the spread. timm's PoolFormerV2-S12 (a GroupNorm of
one group, exported as InstanceNormalization; random weights) came out 12 times further
from the exact values than the imported graph (two-pass normalization), past the default
tolerance, while onnxruntime's runs with graph optimizations off and on were closer (one
kernel in both).

So where that measure does not settle a failure, the same model is rewritten to float64
(:func:`.float_width.widen_to_float64`: every float32 tensor, type and Cast, values exactly)
and evaluated by onnx's reference evaluator (numpy, op by op after the specification: neither
onnxruntime nor this project's import) on the golden cases, in the reference process: its
outputs stand for the exact values the float32 runs round. The comparison then knows how far
each side is from them (:class:`Float64Distances`) and says so in a refusal; an output the
imported graph computes at least as close to them as onnxruntime does, and onnxruntime within
float32 rounding of them, takes the wider atol that onnxruntime's own rounding needs
(:func:`.comparison.held_to_reference`).

A model the evaluator cannot load or run (an op outside the ONNX domains, such as
com.microsoft's), or not within :data:`TIMEOUT_S` plus :data:`SLOWDOWN` times the reference's
own run, gives no distances, and the refusal stands as measured without them.
"""

from __future__ import annotations

from typing import Mapping, NamedTuple, Sequence

import numpy as np

from ..errors import ModelFileError, ModelImportError
from .float_width import widen_to_float64
from .reader import DEFAULT_READ_LIMITS
from .reference import run_reference

__all__ = ["TIMEOUT_S", "SLOWDOWN", "Float64Distances", "evaluate_float64"]

#: The evaluation of the golden cases may take this long, plus :data:`SLOWDOWN` times the
#: reference's own run of them.
TIMEOUT_S = 30.0
#: How many times slower than the reference's run (onnxruntime, one thread, graph
#: optimizations off) the evaluator may be: on six timm models at 224x224 (ResNet-18-D,
#: MobileNetV3-S, EfficientNet-B0, ViT-Tiny, ConvNeXt-Atto, PoolFormerV2-S12; 2 cases) it
#: was 13 to 55 times slower (PoolFormerV2-S12: 22 s against 0.42 s).
SLOWDOWN = 200.0

Outputs = Sequence[Mapping[str, np.ndarray]]


class Float64Distances(NamedTuple):
    """How far each float output of onnxruntime's run (``reference``) and of the imported
    graph's (``imported``) is from the model's values in float64 over the golden cases (the
    largest |difference|; inf where one is a nan or infinity and the other is not); ``why``
    the evaluation failed, where it did (else "", also where nothing was evaluated)."""

    reference: dict[str, float]
    imported: dict[str, float]
    why: str = ""


def evaluate_float64(model, onnx_inputs: Mapping[str, str], onnx_outputs: Mapping[str, str],
                     cases: Outputs, *, timeout: float) -> list[dict[str, np.ndarray]]:
    """The outputs (keyed by ABI name) of ``model`` rewritten to float64, evaluated by onnx's
    reference evaluator on ``cases`` (keyed by ABI input name; their float32 inputs are fed as
    float64, the same values), in the reference process. ModelImportError where it cannot be
    rewritten, loaded or run, or does not finish within ``timeout`` seconds."""
    try:
        wide, _ = widen_to_float64(model, DEFAULT_READ_LIMITS)
    except ModelFileError as exc:
        raise ModelImportError(str(exc)) from None
    fed = [{name: value.astype(np.float64) if value.dtype == np.float32 else value
            for name, value in case.items()} for case in cases]
    return run_reference(wide, onnx_inputs, onnx_outputs, fed, timeout=timeout, float64=True)
