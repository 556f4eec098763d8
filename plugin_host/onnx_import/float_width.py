"""Float16, bfloat16 and float64 ONNX models imported as float32: find them, rewrite them,
measure it.

The backends compute in float32. A float16 model (a ``model.half()`` export) is imported only
when the caller asks for the upcast, a bfloat16 one (a ``model.bfloat16()`` export) likewise,
a float64 one (a torch model promoted to float64 by a numpy constant, a ``.double()``, a
``torch.sum(..., dtype=torch.float64)``) only when the caller asks for the downcast.
:func:`upcast_float16`, :func:`upcast_bfloat16` and :func:`downcast_float64` rewrite a checked
ModelProto into a new one where every float16, bfloat16 or float64 becomes float32 -- graph
inputs and outputs, initializers, Constant and ConstantOfShape tensors (float16 and bfloat16
to float32 are exact; float64 values are rounded, and one beyond float32's finite range is
refused), ``Cast(to=FLOAT16)`` / ``Cast(to=BFLOAT16)`` / ``Cast(to=DOUBLE)`` and the other
element-type attributes, value_info, subgraphs and local functions. CastLike needs nothing
of its own: its target is rewritten where it is defined. The artifact's ABI is then float32.
:func:`widen_to_float64` walks the same places the other way, every float32 to float64, for
the model's evaluation in float64 (:mod:`.float64_evaluation`).

:func:`compare_float16`, :func:`compare_bfloat16` and :func:`compare_float64` run the original
model on onnxruntime and measure how far the float32 model's outputs are from it: the two
differ by design (float16 computes with 11-bit significands, bfloat16 with 8, float32 with 24
where the original had 53), and by how much says whether the rewritten model is still the same
model. onnxruntime's CPU provider computes few ops in bfloat16, so a bfloat16 model it cannot
run is compared by its emulation (:mod:`.bfloat16_runs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from abi.artifact import Tolerance

from ..errors import ModelFileError, ModelImportError
from .bfloat16_runs import emulated, fed_as_float32
from .reader import BFLOAT16, DEFAULT_READ_LIMITS, ReadLimits, to_array
from .reference import run_reference

__all__ = ["DEFAULT_UPCAST_TOLERANCE", "DEFAULT_BFLOAT16_UPCAST_TOLERANCE",
           "DEFAULT_DOWNCAST_TOLERANCE", "find_float16", "upcast_float16", "compare_float16",
           "find_bfloat16", "upcast_bfloat16", "compare_bfloat16", "find_float64",
           "float64_in_abi", "float64_computed", "downcast_float64", "compare_float64",
           "widen_to_float64"]

#: (rtol, atol) between the float32 model and the float16 original. float16 rounds to 2**-11
#: (5e-4) relative at every op. Measured on torch exports (standard-normal inputs): MLPs,
#: LayerNorm, softmax, convolutions, 2 to 16 pre-norm residual GELU blocks and 2 to 16 residual
#: conv layers deviate by 1e-4 to 3e-3 on values of order 1, and by 1.9e-2 on values up to 33
#: in the deepest conv stack: every one within (1e-3, 1e-3). Ten times that leaves room for
#: deeper models while a different model (wrong weights, a dropped op) is still caught.
DEFAULT_UPCAST_TOLERANCE = (1e-2, 1e-2)

#: (rtol, atol) between the float32 model and the bfloat16 original. bfloat16 rounds to 2**-8
#: (3.9e-3) relative, 8 times float16's step. Measured with torch (a ``.bfloat16()`` model
#: against the same bfloat16 weights in float32, standard-normal inputs): an MLP, LayerNorm,
#: softmax and a two-conv net need 7e-4 to 1.6e-3 (rtol = atol), 2 to 16 pre-norm residual
#: tanh-GELU blocks 3.9e-3 to 1.5e-2, 2 to 16 residual conv-BatchNorm layers 5.4e-3 to 4.5e-2.
#: Twice the deepest is left for deeper models; a dropped op or wrong weights still differ by
#: the size of the values.
DEFAULT_BFLOAT16_UPCAST_TOLERANCE = (1e-1, 1e-1)

#: (rtol, atol) between the float32 model and the float64 original. float32 rounds to 2**-24
#: (6e-8) relative at every op. Measured on torch exports of both exporters (golden inputs):
#: a Linear times a float64 numpy constant, ``.double()`` around tanh and softmax, a float64
#: sum of squares, and 4 and 16 pre-norm residual blocks (LayerNorm, tanh-GELU; onnxruntime
#: has no float64 Erf) made ``.double()`` deviate by 6e-8 to 8e-7: every one within (1e-5,
#: 1e-6). Ten times that is the float32 import's own default; a different model is caught.
DEFAULT_DOWNCAST_TOLERANCE = (1e-4, 1e-5)

_FLOAT16, _FLOAT, _DOUBLE, _BFLOAT16 = 10, 1, 11, BFLOAT16
#: Int attributes that name the element type of the op's output, by op.
_DTYPE_ATTRIBUTES = {"Cast": "to", "BitCast": "to", "EyeLike": "dtype", "RandomNormal": "dtype",
                     "RandomUniform": "dtype", "RandomNormalLike": "dtype",
                     "RandomUniformLike": "dtype", "Bernoulli": "dtype", "SequenceEmpty": "dtype",
                     "HannWindow": "output_datatype", "HammingWindow": "output_datatype",
                     "BlackmanWindow": "output_datatype"}
_FLOAT32_MAX = float(np.finfo(np.float32).max)


@dataclass(frozen=True)
class _Width:
    """One float type rewritten to another (float32 but for :func:`widen_to_float64`): its ONNX
    element type and how its values change."""

    name: str            # "float16"
    elem: int            # its TensorProto data type
    rewrite: str         # "upcast"
    flag: str            # the build option asking for it
    tolerance_flag: str  # the build option of its tolerance
    widening_kept: bool  # a Cast to this type read only by IsInf / IsNaN is left alone
    coarser: str         # the type of the two that loses precision
    target: int = _FLOAT  # the TensorProto data type it becomes


_HALF = _Width("float16", _FLOAT16, "upcast", "--upcast-float16", "--upcast-tolerance", False,
               "float16")
_BRAIN = _Width("bfloat16", _BFLOAT16, "upcast", "--upcast-bfloat16", "--upcast-tolerance",
                False, "bfloat16")
_DOUBLE_WIDTH = _Width("float64", _DOUBLE, "downcast", "--downcast-float64",
                       "--downcast-tolerance", True, "float32")
#: float32 to float64, for the model's evaluation in float64 (:mod:`.float64_evaluation`)
_SINGLE_WIDTH = _Width("float32", _FLOAT, "widened", "", "", False, "float32", _DOUBLE)
_NUMPY = {_FLOAT: np.float32, _DOUBLE: np.float64}


def find_float16(model) -> str | None:
    """Where float16 first appears in ``model`` (``"input 'x'"``, ``"node 'c' (Cast)"``, ...),
    or None when it has none."""
    return next(_walk(model, _HALF, None), None)


def find_bfloat16(model) -> str | None:
    """Where bfloat16 first appears in ``model``, or None when it has none."""
    return next(_walk(model, _BRAIN, None), None)


def find_float64(model) -> str | None:
    """Where float64 first appears in ``model``, or None when it has none. A ``Cast(to=DOUBLE)``
    read only by IsInf / IsNaN (torch's legacy export of isinf) does not count: the import
    takes it as it is."""
    return next(_walk(model, _DOUBLE_WIDTH, None), None)


def float64_in_abi(model) -> str | None:
    """The first graph input or output of ``model`` that is float64 (``"input 'x'"``), or
    None: such a model cannot be imported as it is, whatever its nodes fold to."""
    return next((f"{kind} {vi.name!r}" for kind, infos in (("input", model.graph.input),
                                                            ("output", model.graph.output))
                 for vi in infos if _type(vi.type, _DOUBLE_WIDTH, False)), None)


def float64_computed(model) -> str | None:
    """The first place of ``model`` holding float64 that is not a constant (an initializer, a
    Constant or ConstantOfShape value: those may fold into float32 values), else the first
    place, else None."""
    places = list(_walk(model, _DOUBLE_WIDTH, None))
    constant = ("initializer ", "sparse initializer ")
    return next((p for p in places if not p.startswith(constant) and "(Constant)," not in p
                 and "(ConstantOfShape)," not in p), places[0] if places else None)


def upcast_float16(model, limits: ReadLimits = DEFAULT_READ_LIMITS) -> tuple[Any, int]:
    """A copy of ``model`` with every float16 rewritten as float32, and how many places were.

    ModelFileError for a float16 tensor whose data does not match its dims, or a rewritten
    model over the file-size cap; ``model`` itself is left as it was.
    """
    return _rewrite(model, _HALF, limits)


def upcast_bfloat16(model, limits: ReadLimits = DEFAULT_READ_LIMITS) -> tuple[Any, int]:
    """:func:`upcast_float16` for bfloat16: every value exactly, as float32 keeps bfloat16's
    8-bit exponent and its significand's 8 bits."""
    return _rewrite(model, _BRAIN, limits)


def downcast_float64(model, limits: ReadLimits = DEFAULT_READ_LIMITS) -> tuple[Any, int]:
    """A copy of ``model`` with every float64 (those :func:`find_float64` counts) rewritten as
    float32, values rounded to nearest, and how many places were.

    ModelFileError for a float64 tensor whose data does not match its dims or that holds a
    finite value beyond float32's range (it would become inf; inf and nan stay), or a
    rewritten model over the file-size cap; ``model`` itself is left as it was.
    """
    return _rewrite(model, _DOUBLE_WIDTH, limits)


def widen_to_float64(model, limits: ReadLimits = DEFAULT_READ_LIMITS) -> tuple[Any, int]:
    """A copy of ``model`` with every float32 rewritten as float64 (values exactly; Cast to
    float32 and the other element-type attributes too), and how many places were: the same
    model computed with 53-bit significands. ModelFileError as :func:`upcast_float16`'s."""
    return _rewrite(model, _SINGLE_WIDTH, limits)


def _rewrite(model, width: _Width, limits: ReadLimits) -> tuple[Any, int]:
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(model)
    count = sum(1 for _ in _walk(out, width, limits))
    size, cap = out.ByteSize(), min(limits.max_file_bytes, 2**31 - 1)  # protobuf's own cap
    if size > cap:
        raise ModelFileError(f"the model {width.rewrite} to {_NUMPY[width.target].__name__} "
                             f"takes {size} bytes, over the cap of {cap}")
    return out, count


def _walk(model, width: _Width, limits: ReadLimits | None) -> Iterator[str]:
    """Every place of ``model`` holding ``width``'s type, in model order; each is rewritten
    to float32 as it is yielded when ``limits`` is given (those of the tensors converted)."""
    yield from _graph(model.graph, width, limits, "")
    for f in model.functions:
        yield from _nodes(f.node, set(), width, limits, f" in function {f.name!r}")
        for vi in getattr(f, "value_info", ()):
            if _type(vi.type, width, limits is not None):
                yield f"value_info {vi.name!r} in function {f.name!r}"


def _graph(g, width: _Width, limits: ReadLimits | None, inside: str) -> Iterator[str]:
    rewrite = limits is not None
    kept = _kept_widenings(g.node, {vi.name for vi in g.output}) if width.widening_kept \
        else set()
    for kind, infos in (("input", g.input), ("output", g.output), ("value_info", g.value_info)):
        for vi in infos:
            if vi.name not in kept and _type(vi.type, width, rewrite):
                yield f"{kind} {vi.name!r}{inside}"
    for t in g.initializer:
        if _tensor(t, width, limits):
            yield f"initializer {t.name!r}{inside}"
    for s in g.sparse_initializer:
        if _tensor(s.values, width, limits):
            yield f"sparse initializer {s.values.name!r}{inside}"
    yield from _nodes(g.node, kept, width, limits, inside)


def _kept_widenings(nodes, outputs: set[str]) -> set[str]:
    """The outputs of the ``Cast(to=DOUBLE)`` nodes of one graph read only by IsInf / IsNaN
    nodes of that graph (not by a subgraph, not a graph output): the import reads the cast's
    input there, so such a cast is no float64 to refuse or rewrite."""
    readers: dict[str, set[str]] = {}
    for node in nodes:
        for name in node.input:
            readers.setdefault(name, set()).add(node.op_type)
        for name in _subgraph_reads(node):
            readers.setdefault(name, set()).add("")
    return {node.output[0] for node in nodes
            if node.op_type == "Cast" and node.domain in ("", "ai.onnx") and node.output
            and any(a.name == "to" and a.i == _DOUBLE for a in node.attribute)
            and node.output[0] not in outputs
            and readers.get(node.output[0], {""}) <= {"IsInf", "IsNaN"}}


def _subgraph_reads(node) -> Iterator[str]:
    """Every name read by a node of ``node``'s subgraphs, at any depth."""
    from .loop import node_subgraphs

    return (name for g in node_subgraphs(node) for inner in g.node for name in inner.input)


def _nodes(nodes, kept: set[str], width: _Width, limits: ReadLimits | None,
           inside: str) -> Iterator[str]:
    import onnx

    A = onnx.AttributeProto
    rewrite = limits is not None
    for node in nodes:
        if node.output and node.output[0] in kept and node.op_type == "Cast":
            continue
        called = f"node {node.name or (node.output[0] if node.output else '?')!r} " \
                 f"({node.op_type}){inside}"
        for a in node.attribute:
            where = f"{called}, attribute {a.name!r}"
            if a.type == A.INT and a.i == width.elem and a.name == \
                    _DTYPE_ATTRIBUTES.get(node.op_type) and node.domain in ("", "ai.onnx"):
                if rewrite:
                    a.i = width.target
                yield where
            elif a.type == A.TENSOR and _tensor(a.t, width, limits):
                yield where
            elif a.type == A.TENSORS and sum(_tensor(t, width, limits) for t in a.tensors):
                yield where
            elif a.type == A.SPARSE_TENSOR and _tensor(a.sparse_tensor.values, width, limits):
                yield where
            elif a.type == A.SPARSE_TENSORS and sum(_tensor(t.values, width, limits)
                                                    for t in a.sparse_tensors):
                yield where
            elif a.type in (A.TYPE_PROTO, A.TYPE_PROTOS) and sum(
                    _type(t, width, rewrite) for t in [a.tp, *a.type_protos]):
                yield where
            elif a.type == A.GRAPH:
                yield from _graph(a.g, width, limits, f" in {where}")
            elif a.type == A.GRAPHS:
                for g in a.graphs:
                    yield from _graph(g, width, limits, f" in {where}")


def _type(t, width: _Width, rewrite: bool) -> bool:
    """True when TypeProto ``t`` has ``width``'s type anywhere (then set to its target type if
    ``rewrite``)."""
    which = t.WhichOneof("value")
    if which in ("tensor_type", "sparse_tensor_type"):
        inner = getattr(t, which)
        if inner.elem_type == width.elem:
            if rewrite:
                inner.elem_type = width.target
            return True
        return False
    if which in ("sequence_type", "optional_type"):
        return _type(getattr(t, which).elem_type, width, rewrite)
    if which == "map_type":
        return _type(t.map_type.value_type, width, rewrite)
    return False


def _tensor(t, width: _Width, limits: ReadLimits | None) -> bool:
    """True when TensorProto ``t`` has ``width``'s type; then converted to its target type if
    ``limits`` is given, after :func:`~.reader.to_array`'s checks of its dims and data (and,
    for float64, of its values' range)."""
    if t.data_type != width.elem:
        return False
    if limits is not None:
        from onnx import numpy_helper

        value = to_array(t, limits, bfloat16=width is _BRAIN)
        with np.errstate(over="ignore"):
            converted = value.astype(_NUMPY[width.target])
        over = np.isinf(converted) & np.isfinite(value)
        if over.any():
            raise ModelFileError(f"tensor {t.name!r}: {width.name} value "
                                 f"{float(value[over][0])!r} is beyond float32's finite range "
                                 f"(+-{_FLOAT32_MAX:.8g}): {width.rewrite} to float32 it "
                                 f"would be inf")
        doc = t.doc_string
        t.CopyFrom(numpy_helper.from_array(converted, t.name))
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
    return _compare(_HALF, original, onnx_inputs, onnx_outputs, cases, upcast, tolerance, say)


def compare_bfloat16(original, onnx_inputs: Mapping[str, str],
                     onnx_outputs: Mapping[str, str], cases: Sequence[Mapping[str, np.ndarray]],
                     upcast: Sequence[Mapping[str, np.ndarray]],
                     tolerance: tuple[float, float] = DEFAULT_BFLOAT16_UPCAST_TOLERANCE,
                     say: Callable[[str], None] = lambda message: None) -> list[str]:
    """:func:`compare_float16` for the bfloat16 ``original`` and its float32 ``upcast``. Where
    onnxruntime cannot run the original (most bfloat16 ops have no kernel), it runs the
    original's emulation instead (:func:`.bfloat16_runs.emulated`), and the first line says
    so."""
    def emulation():
        return emulated(original, upcast_bfloat16(original)[0], onnx_inputs)

    return _compare(_BRAIN, original, onnx_inputs, onnx_outputs, cases, upcast, tolerance, say,
                    emulation)


def compare_float64(original, onnx_inputs: Mapping[str, str], onnx_outputs: Mapping[str, str],
                    cases: Sequence[Mapping[str, np.ndarray]],
                    downcast: Sequence[Mapping[str, np.ndarray]],
                    tolerance: tuple[float, float] = DEFAULT_DOWNCAST_TOLERANCE,
                    say: Callable[[str], None] = lambda message: None) -> list[str]:
    """:func:`compare_float16` for the float64 ``original`` and its float32 ``downcast``."""
    return _compare(_DOUBLE_WIDTH, original, onnx_inputs, onnx_outputs, cases, downcast,
                    tolerance, say)


def _compare(width: _Width, original, onnx_inputs: Mapping[str, str],
             onnx_outputs: Mapping[str, str], cases: Sequence[Mapping[str, np.ndarray]],
             rewritten: Sequence[Mapping[str, np.ndarray]], tolerance: tuple[float, float],
             say: Callable[[str], None],
             emulation: Callable[[], tuple[Any, dict[str, str]]] | None = None) -> list[str]:
    rtol, atol = tolerance
    runnable, inputs, outputs = fed_as_float32(original, onnx_inputs, onnx_outputs)
    # every input of a float type other than float32 is fed as that type (a model with both
    # float16 and float64 is compared as given, before either rewrite)
    given = {vi.name: {_FLOAT16: np.float16, _DOUBLE: np.float64}[elem]
             for vi in runnable.graph.input if vi.type.WhichOneof("value") == "tensor_type"
             for elem in [vi.type.tensor_type.elem_type] if elem in (_FLOAT16, _DOUBLE)}
    feeds = [{k: v.astype(given[inputs[k]]) if inputs[k] in given else v
              for k, v in case.items()} for case in cases]
    say(f"running the {width.name} model on onnxruntime to measure the {width.rewrite}")
    lines = []
    try:
        ran = run_reference(runnable, inputs, outputs, feeds)
    except ModelImportError as exc:
        if emulation is None:
            return [f"{width.name} deviation not compared: onnxruntime cannot run the "
                    f"{width.name} model: {exc}"]
        say(f"running the {width.name} model's emulation on onnxruntime")
        try:
            model, emulated_inputs = emulation()
            ran = run_reference(model, emulated_inputs, onnx_outputs, cases)
        except ModelImportError as again:
            return [f"{width.name} deviation not compared: onnxruntime cannot run the "
                    f"{width.name} model ({exc}), nor its emulation ({again})"]
        lines.append(f"{width.name} model emulated: each op computed in float32, every value "
                     f"the model holds in {width.name} rounded to it (onnxruntime cannot run "
                     f"the {width.name} model: {exc})")
    for name in onnx_outputs:
        worst, bad, size = 0.0, 0, 0
        for got, want in zip(ran, rewritten):
            g, w = np.asarray(got[name]), np.asarray(want[name])
            if g.shape != w.shape:
                raise ModelImportError(f"output {name!r}: the {width.name} model gives shape "
                                       f"{g.shape}, the float32 {width.rewrite} {w.shape}")
            most, outside = Tolerance(rtol, atol).compare(g, w)
            worst = max(worst, most)
            bad, size = bad + outside, size + w.size
        if bad:
            raise ModelImportError(f"output {name!r}: the float32 {width.rewrite} differs from "
                                   f"the {width.name} model run by onnxruntime in {bad} of "
                                   f"{size} element(s) (max |diff| {worst:.3g}; "
                                   f"{width.rewrite} tolerance rtol {rtol:g}, atol {atol:g}); "
                                   f"widen {width.tolerance_flag} if {width.coarser} is known "
                                   f"to lose that much on this model")
        lines.append(f"{width.name} deviation of output {name!r}: max |diff| {worst:.3g} "
                     f"({width.rewrite} tolerance rtol {rtol:g}, atol {atol:g})")
    return lines
