"""Ops that ONNX defines as a function of other ops (RotaryEmbedding, SoftmaxCrossEntropyLoss,
NegativeLogLikelihoodLoss, ...) and that no mapper takes: the node is replaced by the body ONNX
gives for it, written for its attributes and input types (a context-dependent function) or
with its attributes put in (a fixed one), and the body's nodes are mapped like the model's own.
The build's comparison with onnxruntime then holds the result to the op's own kernel.

Each value of a body gets a name of its own under the node's (``node/fn/X1``), so two uses of
one op share nothing; a body node that fails is named under the node too. A subgraph in a body
(AffineGrid's If, LinearAttention's Scan) reads the body's values under those names, as ONNX
scopes them (:func:`_subgraph`). A body holding a list of subgraphs (a GRAPHS attribute), or
bodies nested past :data:`MAX_DEPTH`, are refused naming the node.
"""

from __future__ import annotations

from ..errors import ModelFileError, UnsupportedModelError
from .local_functions import substituted
from .names import unused
from .reader import ONNX_DTYPES

__all__ = ["expand", "has_function", "MAX_DEPTH"]

#: A body's nodes may be functions in turn; past this many levels the node is refused.
MAX_DEPTH = 4

#: ABI dtype name -> ONNX element type
_ELEMENT = {name: code for code, name in ONNX_DTYPES.items()}


def _schema(op: str, domain: str, opset: int):
    import onnx

    try:
        schema = onnx.defs.get_schema(op, opset, domain)
    except onnx.defs.SchemaError:
        return None
    if schema.deprecated or not (schema.has_function or schema.has_context_dependent_function):
        return None
    return schema


def has_function(node, opset: int) -> bool:
    """Whether ONNX defines ``node``'s op, at ``opset``, as a function (:func:`expand` then
    tries its body)."""
    return _schema(node.op_type, node.domain or "", opset) is not None


def _input_type(imp, name: str):
    """The ONNX TypeProto of input ``name`` ("" absent: an empty one)."""
    from onnx import TypeProto, helper

    if not name:
        return TypeProto()
    t = imp.type_of(name)
    if t.dtype not in _ELEMENT:
        raise imp.unsupported(f"input {name!r} of dtype {t.dtype}: no ONNX type for it")
    return helper.make_tensor_type_proto(_ELEMENT[t.dtype], [
        d if type(d) is int else str(d) for d in t.shape])


def _body(imp, node, schema):
    """The FunctionProto ONNX gives for ``node``; ModelFileError where ONNX cannot write it
    (attributes or input types the op does not take)."""
    import onnx

    if schema.has_context_dependent_function:
        types = [_input_type(imp, name).SerializeToString() for name in node.input]
        try:
            raw = schema.get_context_dependent_function(node.SerializeToString(), types)
        except Exception as exc:  # onnx raises RuntimeError / ValueError / its own types
            raise ModelFileError(f"ONNX cannot write the function of {node.op_type} for these "
                                 f"attributes and input types: {exc}") from None
        if not raw:
            raise ModelFileError(f"ONNX writes no function of {node.op_type} for these "
                                 f"attributes and input types")
        body = onnx.FunctionProto()
        body.ParseFromString(raw)
        return body
    return schema.function_body


def _subgraph(node, graph, given: dict, defaults: dict, renamed):
    """A copy of ``graph`` (an If's branch, a Scan's or Loop's body in a function) in which
    each name of the function's scope it reads is ``renamed`` as the function's own values
    are, as ONNX scopes names (:func:`.loop.rescoped`: a name a subgraph defines hides the
    function's inside that subgraph only), and each attribute that refers to one of the
    function's is replaced (:func:`_attributes`), in nested subgraphs too; the names it
    defines stay, as its Scan or Loop renames them when it unrolls."""
    from .loop import rescoped, subgraphs

    copy = type(graph)()
    copy.CopyFrom(graph)
    rescoped(copy, lambda name, inside: name if inside else renamed(name))
    for g in subgraphs(copy):
        for n in g.node:
            kept = _attributes(node, n, given, defaults)
            del n.attribute[:]
            n.attribute.extend(kept)
    return copy


def _attributes(node, body_node, given: dict, defaults: dict, renamed=None) -> list:
    """``body_node``'s attributes, each that refers to one of the function's (a fixed body's
    ``ref_attr_name``) replaced by the node's value or the op's default, dropped when neither
    is there; with ``renamed``, a subgraph's copy as :func:`_subgraph` writes it (without, a
    subgraph stays: :func:`_subgraph`'s own, already written)."""
    import onnx

    out = []
    for a in body_node.attribute:
        if a.type == onnx.AttributeProto.GRAPHS:
            raise UnsupportedModelError(f"the function of {node.op_type} holds subgraphs "
                                        f"({body_node.op_type} {a.name!r}), which are not "
                                        f"expanded")
        if a.type == onnx.AttributeProto.GRAPH and not a.ref_attr_name:
            if renamed is not None:
                a, original = onnx.AttributeProto(), a
                a.CopyFrom(original)
                a.g.CopyFrom(_subgraph(node, original.g, given, defaults, renamed))
            out.append(a)
            continue
        value = substituted(a, given, defaults)
        if value is not None:
            out.append(value)
    return out


def expand(imp, node, mappers, index: int) -> bool:
    """Map ``node`` through the function ONNX defines it as, if it has one (False: it has
    none, and the caller refuses the op)."""
    import onnx

    schema = _schema(node.op_type, node.domain or "", imp.opset)
    if schema is None:
        return False
    if imp.function_depth >= MAX_DEPTH:
        raise imp.unsupported(f"functions nested {MAX_DEPTH} deep: not expanded further")
    body = _body(imp, node, schema)
    given = {a.name: a for a in node.attribute}
    defaults = {name: spec.default_value for name, spec in schema.attributes.items()
                if spec.default_value.type}
    stem = unused(f"{imp.node_name}/fn", imp.loop_names)
    names = {"": ""}
    for i, formal in enumerate(body.input):
        names[formal] = node.input[i] if i < len(node.input) else ""
    for i, formal in enumerate(body.output):
        actual = node.output[i] if i < len(node.output) else ""
        names[formal] = actual or f"{stem}/{formal}"

    def renamed(name: str) -> str:
        if name not in names:
            names[name] = f"{stem}/{name}"
        return names[name]

    nodes = []
    for i, inner in enumerate(body.node):
        if inner.domain not in ("", "ai.onnx"):
            raise imp.unsupported(f"the function of {node.op_type} uses {inner.op_type} of "
                                  f"domain {inner.domain!r}")
        copy = onnx.helper.make_node(
            inner.op_type, [renamed(t) for t in inner.input],
            [renamed(t) for t in inner.output], name=f"{stem}/{inner.name or inner.op_type}{i}")
        copy.attribute.extend(_attributes(node, inner, given, defaults, renamed))
        nodes.append(copy)
    imp.function_depth += 1
    try:
        imp.inline(nodes, mappers, index, depth=0)
    finally:
        imp.function_depth -= 1
    for i, formal in enumerate(body.output):
        actual = node.output[i] if i < len(node.output) else ""
        if actual and not any(actual in d for d in (imp.consts, imp.values, imp.sym)):
            raise ModelFileError(f"the function of {node.op_type} does not compute its output "
                                 f"{formal!r}")
    return True
