"""Why a quantized model's outputs can differ from onnxruntime's by whole steps.

A quantized model rounds float values to integer steps (QuantizeLinear, DynamicQuantizeLinear,
the QLinear ops' requantization, ...). The imported graph and onnxruntime compute the float
values before such a rounding in different summation orders, so they differ by float32
rounding there; a value that lands within that of half a step rounds to neighbouring steps on
the two, and the one-step difference then grows through the layers after it. ORT's
``quantize_static`` (QDQ, per tensor) of torchvision's ResNet-18 and ConvNeXt-Tiny and of
timm's DeiT-Tiny, random weights, differ so by 0.063, 0.015 and 0.028 on outputs up to 4.5,
1.8 and 0.7, where the float models build at the default tolerance: in ResNet-18 the first
difference was a convolution's 2e-6, the next one step of the QuantizeLinear after it. The
quantized models differ from their float originals by 0.12, 0.075 and 0.17 on the same
inputs, so these are smaller than what quantization changes anyway.

onnxruntime's own runs of such a model with graph optimizations off and on (blocked-layout
convolutions: other summation orders) part the same way, which :func:`trace` shows: it
fetches the codes of every QuantizeLinear and DynamicQuantizeLinear from both runs of each
input and finds the first one where they differ (:class:`Parting`). A rounding parts an input
rarely, so the runs take :data:`TRACE_CASES` inputs: the golden cases and more drawn alike.
Where that is one step, at a few codes of many (:data:`FLIP_MAX_FRACTION`), the runs parted
at a value within float32 rounding of half a step, and the difference their outputs show
after it is the model's own rounding to steps (:mod:`.comparison` widens the default atol to
it). Measured on 17 models (ResNet-18-like convnets and ViTs quantized by
``quantize_static`` (QDQ) and by ``quantize_dynamic``, hand-written conv, QuantizeLinear,
conv models): wherever codes differed the first parting was 1 to 5 codes of 12,288 to
204,800, one step apart, and the imported graph was 0.4 to 1.6 times as far from the
reference as the optimized run, which was as far from the reference with the codes fetched as
without. :func:`explain` adds to the build's refusal of a model that quantizes what the
difference can be and what to do.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Mapping, NamedTuple, Sequence

import numpy as np

from .reference import run_reference

__all__ = ["ROUNDING_OPS", "TRACED_OPS", "FLIP_MAX_FRACTION", "TRACE_CASES", "Parting",
           "Traced", "rounding_ops", "code_tensors", "trace", "explain"]

#: Ops that round float values to integer steps: ONNX's, and com.microsoft's that requantize
#: (or quantize their float input) inside
ROUNDING_OPS = frozenset({
    "QuantizeLinear", "DynamicQuantizeLinear", "QLinearConv", "QLinearMatMul", "QGemm",
    "QLinearAdd", "QLinearMul", "QLinearAveragePool", "QLinearGlobalAveragePool",
    "QLinearConcat", "QLinearLeakyRelu", "QLinearSigmoid", "QLinearSoftmax", "QLinearWhere",
    "DynamicQuantizeMatMul", "QAttention", "DynamicQuantizeLSTM"})


def rounding_ops(model) -> Counter:
    """How many nodes of each :data:`ROUNDING_OPS` type the model's graph has."""
    return Counter(node.op_type for node in model.graph.node
                   if node.op_type in ROUNDING_OPS and node.domain in ("", "ai.onnx",
                                                                        "com.microsoft"))


#: The default-domain rounding ops whose integer output (the codes) :func:`trace` fetches:
#: com.microsoft's keep their codes inside, and their CPU kernels are matched bit for bit.
TRACED_OPS = frozenset({"QuantizeLinear", "DynamicQuantizeLinear"})
#: A rounding parts two runs only at values within float32 rounding of half a step: where
#: they first part, at most this fraction of the tensor's codes (one at least) may differ,
#: each by one step, for the parting to be that (measured: at most 5 in 51,200, 1e-4).
FLIP_MAX_FRACTION = 1e-3
#: Inputs the runs are traced on, the golden cases among them: a rounding parts an input
#: rarely (measured: in 1 to 8 of 8), so with the build's 2 golden cases alone onnxruntime's
#: runs often show nothing where the imported graph parts.
TRACE_CASES = 8


@dataclass(frozen=True)
class Parting:
    """Where onnxruntime's runs of input ``case`` with graph optimizations off and on
    first give different codes: ``apart`` of the ``size`` codes of ``op``'s output
    ``tensor``, by up to ``steps`` (-1: the two are shaped differently)."""

    op: str
    tensor: str
    case: int
    apart: int
    size: int
    steps: int

    @property
    def flips(self) -> bool:
        """Whether this is a rounding to neighbouring steps (:data:`FLIP_MAX_FRACTION`)."""
        return self.steps == 1 and self.apart <= max(1.0, FLIP_MAX_FRACTION * self.size)

    def __str__(self) -> str:
        apart = "shaped differently" if self.steps < 0 else (
            f"{self.apart:,} of {self.size:,} codes "
            f"{'one step' if self.steps == 1 else f'up to {self.steps} steps'} apart")
        return f"{self.op} {self.tensor!r} in case {self.case}: {apart}"


class Traced(NamedTuple):
    """onnxruntime's runs of the inputs with graph optimizations ``off`` and ``on`` (each
    input's outputs, keyed by ABI name), and the :class:`Parting` of each input where their
    codes differ."""

    off: list[dict[str, np.ndarray]]
    on: list[dict[str, np.ndarray]]
    partings: list[Parting]


def code_tensors(model) -> list[tuple[str, str]]:
    """(op, tensor) of each :data:`TRACED_OPS` node's integer output in the main graph, in
    the graph's order (an ONNX graph lists a node after those it reads)."""
    return [(node.op_type, node.output[0]) for node in model.graph.node
            if node.op_type in TRACED_OPS and node.domain in ("", "ai.onnx")
            and node.output and node.output[0]]


def trace(model, onnx_inputs: Mapping[str, str], onnx_outputs: Mapping[str, str],
          cases: Sequence[Mapping[str, np.ndarray]], *, timeout: float) -> Traced:
    """onnxruntime's runs of ``model`` on each input (keyed by ABI input name) with graph
    optimizations off and on, their outputs keyed by ABI name (``onnx_outputs`` maps it to
    the ONNX name), and for each input where they give different codes at some
    :func:`code_tensors` tensor the first such (:class:`Parting`). Each run in the reference
    process, within ``timeout`` seconds (its errors are ModelImportError). The codes are made
    graph outputs for the runs (untyped: onnxruntime types them) and taken off again after."""
    tensors = code_tensors(model)
    outputs, count = model.graph.output, len(model.graph.output)
    listed = {value.name for value in outputs}
    try:
        for _, tensor in tensors:
            if tensor not in listed:
                outputs.add().name = tensor
        fetch = {name: name for name in [*onnx_outputs.values(), *(t for _, t in tensors)]}
        runs = [run_reference(model, onnx_inputs, fetch, cases, timeout=timeout,
                              optimized=optimized) for optimized in (False, True)]
    finally:
        del outputs[count:]
    found = []
    for case, (off, on) in enumerate(zip(*runs)):
        for op, tensor in tensors:
            a, b = off[tensor], on[tensor]
            if a.shape != b.shape:
                found.append(Parting(op, tensor, case, a.size, a.size, -1))
                break
            steps = np.abs(a.astype(np.int64) - b.astype(np.int64))
            if steps.any():
                found.append(Parting(op, tensor, case, int(np.count_nonzero(steps)), a.size,
                                     int(steps.max())))
                break
    off, on = ([{abi: values[onnx] for abi, onnx in onnx_outputs.items()} for values in run]
               for run in runs)
    return Traced(off, on, found)


def explain(model, integer: bool = False) -> str:
    """What the build's refusal of a comparison adds for ``model``: "" unless it rounds to
    integer steps. ``integer``: the output that failed is an integer one, which no tolerance
    accepts."""
    counts = rounding_ops(model)
    if not counts:
        return ""
    ops = ", ".join(f"{n} {op}" for op, n in sorted(counts.items(), key=lambda c: (-c[1], c[0])))
    widens = (f"the default atol widens to it where onnxruntime's own runs part so on the "
              f"{TRACE_CASES} inputs the build traces (more with more --golden-cases), and "
              if code_tensors(model) else "")
    accepts = ("an integer output, as this one, is held to the reference exactly, so neither "
               "a widened atol nor --atol can accept it" if integer else
               f"{widens}--atol can accept it")
    return (f"; the model rounds float values to integer steps ({ops}): where a value lands "
            f"within float32 rounding of half a step, the imported graph and onnxruntime, which "
            f"sum in different orders, can round it to neighbouring steps, and that step grows "
            f"through the layers after it (a difference of the size quantization makes against "
            f"the float model: {accepts}; an import bug looks the same)")
