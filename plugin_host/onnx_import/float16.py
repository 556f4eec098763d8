"""Float16 ONNX models imported as float32: find float16, rewrite it away, measure the change.

The backends compute in float32. A float16 model (a ``model.half()`` export) is imported only
when the caller asks for the upcast: :func:`upcast_float16` rewrites a checked ModelProto into a
new one where every float16 becomes float32 -- graph inputs and outputs, initializers, Constant
and ConstantOfShape tensors (float16 to float32 is exact), ``Cast(to=FLOAT16)`` and the other
element-type attributes, value_info, subgraphs and local functions. CastLike needs nothing of
its own: its target is rewritten where it is defined. The artifact's ABI is then float32.

:func:`compare_float16` runs the original float16 model on onnxruntime and measures how far the
float32 model's outputs are from it: a float16 model computes with 11-bit significands, so the
two differ by design, and by how much says whether the upcast model is still the same model.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from abi.artifact import Tolerance

from ..errors import ModelFileError, ModelImportError
from .reader import DEFAULT_READ_LIMITS, ReadLimits, to_array
from .reference import run_reference

__all__ = ["DEFAULT_UPCAST_TOLERANCE", "find_float16", "upcast_float16", "compare_float16"]

#: (rtol, atol) between the float32 model and the float16 original. float16 rounds to 2**-11
#: (5e-4) relative at every op. Measured on torch exports (standard-normal inputs): MLPs,
#: LayerNorm, softmax, convolutions, 2 to 16 pre-norm residual GELU blocks and 2 to 16 residual
#: conv layers deviate by 1e-4 to 3e-3 on values of order 1, and by 1.9e-2 on values up to 33
#: in the deepest conv stack: every one within (1e-3, 1e-3). Ten times that leaves room for
#: deeper models while a different model (wrong weights, a dropped op) is still caught.
DEFAULT_UPCAST_TOLERANCE = (1e-2, 1e-2)

_FLOAT16, _FLOAT = 10, 1
#: Int attributes that name the element type of the op's output, by op.
_DTYPE_ATTRIBUTES = {"Cast": "to", "EyeLike": "dtype", "RandomNormal": "dtype",
                     "RandomUniform": "dtype", "RandomNormalLike": "dtype",
                     "RandomUniformLike": "dtype", "Bernoulli": "dtype", "SequenceEmpty": "dtype"}


def find_float16(model) -> str | None:
    """Where float16 first appears in ``model`` (``"input 'x'"``, ``"node 'c' (Cast)"``, ...),
    or None when it has none."""
    return next(_walk(model, None), None)


def upcast_float16(model, limits: ReadLimits = DEFAULT_READ_LIMITS) -> tuple[Any, int]:
    """A copy of ``model`` with every float16 rewritten as float32, and how many places were.

    ModelFileError for a float16 tensor whose data does not match its dims, or a rewritten
    model over the file-size cap; ``model`` itself is left as it was.
    """
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(model)
    count = sum(1 for _ in _walk(out, limits))
    size, cap = out.ByteSize(), min(limits.max_file_bytes, 2**31 - 1)  # protobuf's own cap
    if size > cap:
        raise ModelFileError(f"the model upcast to float32 takes {size} bytes, over the cap of "
                             f"{cap}")
    return out, count


def _walk(model, limits: ReadLimits | None) -> Iterator[str]:
    """Every place of ``model`` holding float16, in model order; each is rewritten to float32
    as it is yielded when ``limits`` is given (those of the tensors converted)."""
    yield from _graph(model.graph, limits, "")
    for f in model.functions:
        yield from _nodes(f.node, limits, f" in function {f.name!r}")
        for vi in getattr(f, "value_info", ()):
            if _type(vi.type, limits is not None):
                yield f"value_info {vi.name!r} in function {f.name!r}"


def _graph(g, limits: ReadLimits | None, inside: str) -> Iterator[str]:
    rewrite = limits is not None
    for kind, infos in (("input", g.input), ("output", g.output), ("value_info", g.value_info)):
        for vi in infos:
            if _type(vi.type, rewrite):
                yield f"{kind} {vi.name!r}{inside}"
    for t in g.initializer:
        if _tensor(t, limits):
            yield f"initializer {t.name!r}{inside}"
    for s in g.sparse_initializer:
        if _tensor(s.values, limits):
            yield f"sparse initializer {s.values.name!r}{inside}"
    yield from _nodes(g.node, limits, inside)


def _nodes(nodes, limits: ReadLimits | None, inside: str) -> Iterator[str]:
    import onnx

    A = onnx.AttributeProto
    for node in nodes:
        called = f"node {node.name or (node.output[0] if node.output else '?')!r} " \
                 f"({node.op_type}){inside}"
        for a in node.attribute:
            where = f"{called}, attribute {a.name!r}"
            if a.type == A.INT and a.i == _FLOAT16 and a.name == \
                    _DTYPE_ATTRIBUTES.get(node.op_type) and node.domain in ("", "ai.onnx"):
                if limits is not None:
                    a.i = _FLOAT
                yield where
            elif a.type == A.TENSOR and _tensor(a.t, limits):
                yield where
            elif a.type == A.TENSORS and sum(_tensor(t, limits) for t in a.tensors):
                yield where
            elif a.type == A.SPARSE_TENSOR and _tensor(a.sparse_tensor.values, limits):
                yield where
            elif a.type == A.SPARSE_TENSORS and sum(_tensor(t.values, limits)
                                                    for t in a.sparse_tensors):
                yield where
            elif a.type in (A.TYPE_PROTO, A.TYPE_PROTOS) and sum(
                    _type(t, limits is not None) for t in [a.tp, *a.type_protos]):
                yield where
            elif a.type == A.GRAPH:
                yield from _graph(a.g, limits, f" in {where}")
            elif a.type == A.GRAPHS:
                for g in a.graphs:
                    yield from _graph(g, limits, f" in {where}")


def _type(t, rewrite: bool) -> bool:
    """True when TypeProto ``t`` has float16 anywhere (then set to float32 if ``rewrite``)."""
    which = t.WhichOneof("value")
    if which in ("tensor_type", "sparse_tensor_type"):
        inner = getattr(t, which)
        if inner.elem_type == _FLOAT16:
            if rewrite:
                inner.elem_type = _FLOAT
            return True
        return False
    if which in ("sequence_type", "optional_type"):
        return _type(getattr(t, which).elem_type, rewrite)
    if which == "map_type":
        return _type(t.map_type.value_type, rewrite)
    return False


def _tensor(t, limits: ReadLimits | None) -> bool:
    """True when TensorProto ``t`` is float16; then converted to float32 if ``limits`` is
    given, after :func:`~.reader.to_array`'s checks of its dims and data."""
    if t.data_type != _FLOAT16:
        return False
    if limits is not None:
        from onnx import numpy_helper

        value = to_array(t, limits).astype(np.float32)
        doc = t.doc_string
        t.CopyFrom(numpy_helper.from_array(value, t.name))
        t.doc_string = doc
    return True


def compare_float16(original, onnx_inputs: Mapping[str, str], onnx_outputs: Mapping[str, str],
                    cases: Sequence[Mapping[str, np.ndarray]],
                    upcast: Sequence[Mapping[str, np.ndarray]],
                    tolerance: tuple[float, float] = DEFAULT_UPCAST_TOLERANCE,
                    say: Callable[[str], None] = lambda message: None) -> list[str]:
    """Run the float16 ``original`` on onnxruntime with ``cases`` (ABI names; an input that
    was float16 there cast to float16) and compare its outputs with ``upcast``, those of the
    float32 model on the same cases: one line per output with the largest deviation, or one
    line saying why the comparison could not be made. ModelImportError naming the output
    when it deviates beyond ``tolerance``."""
    rtol, atol = tolerance
    halves = {vi.name for vi in original.graph.input
              if vi.type.WhichOneof("value") == "tensor_type"
              and vi.type.tensor_type.elem_type == _FLOAT16}
    feeds = [{k: v.astype(np.float16) if onnx_inputs[k] in halves else v
              for k, v in case.items()} for case in cases]
    say("running the float16 model on onnxruntime to measure the upcast")
    try:
        halved = run_reference(original, onnx_inputs, onnx_outputs, feeds)
    except ModelImportError as exc:
        return [f"float16 deviation not compared: onnxruntime cannot run the float16 model: "
                f"{exc}"]
    lines = []
    for name in onnx_outputs:
        worst, bad, size = 0.0, 0, 0
        for got, want in zip(halved, upcast):
            g, w = np.asarray(got[name]), np.asarray(want[name])
            if g.shape != w.shape:
                raise ModelImportError(f"output {name!r}: the float16 model gives shape "
                                       f"{g.shape}, the float32 upcast {w.shape}")
            diff, outside = Tolerance(rtol, atol).mismatches(g, w)
            worst = max(worst, float(diff.max(initial=0.0)))
            bad, size = bad + int(outside.sum()), size + outside.size
        if bad:
            raise ModelImportError(f"output {name!r}: the float32 upcast differs from the "
                                   f"float16 model run by onnxruntime in {bad} of {size} "
                                   f"element(s) (max |diff| {worst:.3g}; upcast tolerance rtol "
                                   f"{rtol:g}, atol {atol:g}); widen --upcast-tolerance if "
                                   f"float16 is known to lose that much on this model")
        lines.append(f"float16 deviation of output {name!r}: max |diff| {worst:.3g} "
                     f"(upcast tolerance rtol {rtol:g}, atol {atol:g})")
    return lines
