"""A bfloat16 model made runnable on onnxruntime, for the bfloat16 upcast's comparison
(:func:`.float_width.compare_bfloat16`).

Two obstacles. numpy, and so onnxruntime's Python API, has no bfloat16 array: a bfloat16
graph input or output is fed and read as float32 across a Cast (:func:`fed_as_float32`). And
onnxruntime's CPU provider computes few ops in bfloat16 (casts, data movement,
LayerNormalization; no MatMul, Gemm, Conv, Add or activation), so most bfloat16 models do not
run at all. For those, :func:`emulated` gives the float32 upcast with every value that the
original holds in bfloat16 (the graph's inputs and node outputs, inside If, Loop and Scan
bodies too, by onnx's type inference, which runs in the reference process: native code on
hostile input) rounded to bfloat16 as it is made, by a Cast to bfloat16 and back: each op
computes in float32 and its result is stored as bfloat16, which is how torch runs a bfloat16
model on a CPU. onnx's type inference leaves the outputs of com.microsoft's ops untyped, and
every value computed from them: those are typed from onnxruntime's schema of the op (the same
process); a value still untyped is not rounded.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from .names import unused
from .reader import BFLOAT16
from .reference import infer_value_types

__all__ = ["fed_as_float32", "emulated"]

_FLOAT = 1  # ONNX TensorProto.FLOAT


def _brain(vi) -> bool:
    return vi.type.WhichOneof("value") == "tensor_type" and \
        vi.type.tensor_type.elem_type == BFLOAT16


def fed_as_float32(model, onnx_inputs: Mapping[str, str], onnx_outputs: Mapping[str, str]
                   ) -> tuple[Any, dict[str, str], dict[str, str]]:
    """``model`` with each bfloat16 graph input and output float32 across a Cast, and the ABI
    names' ONNX names in it (``model`` and the names as they were when it has none). A float32
    input is rounded to bfloat16 where it enters, as a float16 original's input is cast to
    float16."""
    import onnx

    if not any(map(_brain, [*model.graph.input, *model.graph.output])):
        return model, dict(onnx_inputs), dict(onnx_outputs)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    fresh, renamed = _namer(g), {}
    casts = []
    for vi in g.input:
        if _brain(vi):
            name, vi.name = vi.name, fresh(vi.name, ".float32")
            renamed[name] = vi.name
            vi.type.tensor_type.elem_type = _FLOAT
            casts.append(onnx.helper.make_node("Cast", [vi.name], [name], to=BFLOAT16))
    nodes = casts + list(g.node)
    del g.node[:]
    g.node.extend(nodes)
    for vi in g.output:
        if _brain(vi):
            name, vi.name = vi.name, fresh(vi.name, ".float32")
            renamed[name] = vi.name
            vi.type.tensor_type.elem_type = _FLOAT
            g.node.append(onnx.helper.make_node("Cast", [name], [vi.name], to=_FLOAT))
    return (out, {k: renamed.get(v, v) for k, v in onnx_inputs.items()},
            {k: renamed.get(v, v) for k, v in onnx_outputs.items()})


def emulated(original, upcast, onnx_inputs: Mapping[str, str]) -> tuple[Any, dict[str, str]]:
    """The float32 ``upcast`` of the bfloat16 ``original`` with its values rounded where the
    original holds them in bfloat16, in its subgraphs too (module docstring), and the ABI input
    names' ONNX names in it. onnx's type inference runs in the reference process (native code
    on hostile input); ModelImportError when it cannot infer the original's value types."""
    import onnx

    from .loop import subgraphs

    held = {name for name, elem in infer_value_types(original).items() if elem == BFLOAT16}
    out = onnx.ModelProto()
    out.CopyFrom(upcast)
    g = out.graph
    fresh, renamed = _namer(g), {}

    def rounded(exact: str, name: str) -> list:
        stored = fresh(name, ".bfloat16")
        return [onnx.helper.make_node("Cast", [exact], [stored], to=BFLOAT16),
                onnx.helper.make_node("Cast", [stored], [name], to=_FLOAT)]

    entering: list = []  # the main graph's inputs, rounded where they enter
    for vi in g.input:
        if vi.name in held:
            name, vi.name = vi.name, fresh(vi.name, ".exact")
            renamed[name] = vi.name
            entering += rounded(vi.name, name)
    # innermost first: a node's body is rewritten before the node is moved; a body's inputs
    # come from values rounded outside it
    for graph in reversed(list(subgraphs(g))):
        nodes: list = []
        for node in graph.node:
            after = []
            for i, name in enumerate(node.output):
                if name in held:
                    node.output[i] = fresh(name, ".exact")
                    after += rounded(node.output[i], name)
            nodes += [node, *after]
        del graph.node[:]
        graph.node.extend([*entering, *nodes] if graph is g else nodes)
    return out, {k: renamed.get(v, v) for k, v in onnx_inputs.items()}


def _namer(graph) -> Callable[[str, str], str]:
    """Names not yet taken in ``graph`` and its subgraphs: ``name + suffix``, then with ``_2``,
    ``_3``, ... until free (:func:`.names.unused`)."""
    from .loop import names_in

    taken = names_in(graph.node) | {v.name for v in (*graph.input, *graph.output,
                                                      *graph.value_info, *graph.initializer)}
    return lambda name, suffix: unused(name + suffix, taken, "_")
