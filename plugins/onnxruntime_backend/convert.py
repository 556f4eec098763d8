"""Our graph (op table ops) as an in-memory ONNX model, built with ``onnx.helper``.

Each op of the table becomes one ONNX op or a short decomposition into ONNX ops (opset
:data:`OPSET`), with the same numbers as the numpy backend within float32 rounding. ONNX node
names are ``<our node name>/<k>``, so anything onnxruntime says about a node names ours.

What cannot be expressed is refused here, at load, with a BackendError naming the node (never
approximated): an op missing from :data:`CONVERTERS` (the executor refuses it even earlier,
from ``supported_ops``), or one onnxruntime refuses when the session is created.

Embedding indices that come from a graph input are validated by the executor at entry. An
Embedding whose indices are computed inside the graph gets a guard instead: its indices are
clipped into range for the Gather (so onnxruntime never wraps a negative index or fails on its
own), and are also returned as an extra output that the backend checks after the run with
:func:`abi.check_indices`, refusing the call exactly as the numpy backend's kernel does.

The converters are ``layers.py``, ``glue.py`` and ``qlinear.py``, writing into an
``emitter.Emitter``; a chain of ops that one onnxruntime kernel computes with the same numbers
is found first and written as that kernel (``fusion.py``).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import onnx
from onnx import helper

from abi import TensorType
from abi.errors import BackendError

from . import fusion, glue, layers, qlinear, widen
from .emitter import MS, OPSET, Checks, Converter, Emitter, onnx_dtype

__all__ = ["CONVERTERS", "OPSET", "to_onnx"]

#: op name (version 1) -> converter(emitter, node, input names, output names, attrs)
CONVERTERS: dict[str, Converter] = {**layers.CONVERTERS, **glue.CONVERTERS,
                                     **qlinear.CONVERTERS}


# --- the model ---------------------------------------------------------------------------------


def _opsets() -> list:
    """The converted model's opset imports: ONNX's at :data:`OPSET` and com.microsoft's."""
    return [helper.make_opsetid("", OPSET), helper.make_opsetid(MS, 1)]


def _elem_types(e: Emitter, graph_inputs: list, graph_outputs: list) -> dict[str, int]:
    """The ONNX element type of every tensor of ``e``'s nodes, by ONNX type inference over
    them with the initializers as inputs (their bytes are not copied); empty if inference
    fails (nothing is widened then, and onnxruntime refuses what lacks a kernel)."""
    known = graph_inputs + [helper.make_tensor_value_info(n, t.data_type, t.dims)
                            for n, t in e.initializers.items()]
    model = helper.make_model(helper.make_graph(e.nodes, "types", known, graph_outputs),
                              opset_imports=_opsets())
    try:
        graph = onnx.shape_inference.infer_shapes(model).graph
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError):
        return {}
    return {v.name: v.type.tensor_type.elem_type
            for v in (*graph.input, *graph.value_info, *graph.output)}


def to_onnx(name: str, *, inputs: Sequence[tuple[str, TensorType]],
            outputs: Sequence[tuple[str, TensorType]], nodes: Sequence[Any],
            consts: Mapping[str, np.ndarray], types: Mapping[str, TensorType],
            checked_indices: frozenset[str] = frozenset()) -> tuple[onnx.ModelProto, Checks]:
    """``(model, checks)``: the ONNX model of ``nodes`` and what its run checks.

    ``inputs``/``outputs`` are the model's run-time inputs and outputs with their types;
    ``consts`` the constant tensors; ``types`` every tensor's type; ``checked_indices`` the
    tensors whose values are validated as Embedding indices before the model runs. Each guard
    ``(tensor, vocab, description, kind)`` is an extra output after ``outputs``; a ``vocab``
    that is a tensor name (a symbolic dim's size) is one more, after the guards' tensors; the
    tensor of each shape check is one more after those (:class:`Checks`).
    """
    e = Emitter(consts, types)
    for node in fusion.fused(nodes, consts, types, [name for name, _ in outputs]):
        if isinstance(node, fusion.FUSED):
            e.prefix = node.name
            fusion.convert(e, node)
            continue
        convert = CONVERTERS.get(node.op)
        if convert is None or node.version != 1:
            raise BackendError(f"onnxruntime backend: node {node.name!r}: op {node.op} "
                               f"v{node.version} cannot be expressed in ONNX here",
                               node=node.name, op=node.op)
        e.prefix = node.name
        ins = list(node.inputs)
        if node.op == "embedding":
            layers.embedding(e, node, ins, list(node.outputs), dict(node.attrs),
                      checked=ins[0] in checked_indices)
        else:
            convert(e, node, ins, list(node.outputs), dict(node.attrs))
        e.producers.update(dict.fromkeys(node.outputs, node))

    def info(tname: str, ttype: TensorType) -> onnx.ValueInfoProto:
        shape = [d if isinstance(d, int) else str(d) for d in ttype.shape]
        return helper.make_tensor_value_info(tname, onnx_dtype(ttype.dtype), shape)

    graph_inputs = [info(n, t) for n, t in inputs]
    guards = e.checks.guards
    graph_outputs = [info(n, t) for n, t in outputs] + [info(t, types[t]) for t, *_ in guards]
    graph_outputs += [info(dim, TensorType((1,), "int64")) for _, dim, *_ in guards
                      if type(dim) is str]
    graph_outputs += [helper.make_tensor_value_info(shape, onnx.TensorProto.INT64, [None])
                      for shape, *_ in e.checks.shapes]
    nodes = widen.widen(e.nodes, _elem_types(e, graph_inputs, graph_outputs), OPSET)
    graph = helper.make_graph(nodes, name, graph_inputs, graph_outputs,
                              initializer=list(e.initializers.values()))
    model = helper.make_model(graph, opset_imports=_opsets(),
                              producer_name="plugin-host")
    model.ir_version = min(model.ir_version, 10)
    return model, e.checks
