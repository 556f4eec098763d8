"""A model's own functions (``ModelProto.functions``), inlined before the import.

ONNX lets a model define ops of its own as functions of other ops: torch's TorchScript
exporter writes each module as one with ``export_modules_as_functions``, onnxscript writes
each ``@script`` function called from a model as one, and an exporter may share a block that
way. A node whose domain, op type and overload name such a function is a call of it; each
call is replaced by the function's body, before the version converter runs (so an old
opset's bodies are upgraded with the graph) and before anything is mapped:

- every value and node of the body, in its subgraphs too, is renamed under a name of the
  call's own (``call/fn/x``), so two calls share nothing and a body's scoping is kept as it
  was written; an Identity takes each input the call gives into the body, and one each
  output the call asks for out of it (an Identity maps to no node); an input the call omits
  is absent (``""``) in the body;
- each attribute of the body that refers to one of the function's (``ref_attr_name``, in its
  subgraphs too) takes the call's value, else the function's default (``attribute_proto``),
  else is left out (the op's own default applies);
- calls in the body, and calls in subgraphs (an If's branch), are inlined in turn.

onnxruntime, the build's reference, runs the model as given, functions and all, so an
inlining mistake shows as a mismatch at build time. The model inlined is parsed and checked
again like a file. Refused: a function that calls itself, directly or through others
(ModelFileError), calls nested more than :data:`MAX_DEPTH` deep, a call with more inputs or
outputs than the function has, a body that defines a value named as an input the call
omits, and more nodes in the inlined model than the node cap (ModelFileError: each call
copies its function's body, so a few nested calls can multiply a small file).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

from ..errors import ModelFileError, UnsupportedModelError
from .convert import _called
from .loop import attribute_graphs, defined_names, names_in
from .reader import DEFAULT_READ_LIMITS, ReadLimits, model_functions, parse_model

__all__ = ["MAX_DEPTH", "inline_local_functions", "substituted"]

#: Calls of a model's functions nested deeper than this are refused
MAX_DEPTH = 32


def _key(node) -> tuple[str, str, str]:
    """The function a node would call: domain, op type, overload."""
    return node.domain, node.op_type, node.overload


def substituted(attribute, given: dict, defaults: dict):
    """``attribute`` of a function body's node, where it refers to one of the function's
    (``ref_attr_name``): the value ``given`` by the call (name -> AttributeProto), else the
    function's default, renamed to ``attribute``'s name; None where neither is there (the
    attribute is left out). ``attribute`` itself where it refers to nothing."""
    import onnx

    if not attribute.ref_attr_name:
        return attribute
    value = given.get(attribute.ref_attr_name)
    if value is None:
        value = defaults.get(attribute.ref_attr_name)
    if value is None:
        return None
    copy = onnx.AttributeProto()
    copy.CopyFrom(value)
    copy.name = attribute.name
    return copy


class _Body(NamedTuple):
    """What each call of a function needs of its body, found once."""
    size: int  # bytes, which each call copies
    names: set  # value and node names, which each copy writes under its stem
    defined: set  # values it defines, in subgraphs too

    @classmethod
    def of(cls, function) -> "_Body":
        defined = {t for n in function.node for t in n.output}
        for n in function.node:
            for g in attribute_graphs(n):
                defined |= defined_names(g)
        names = names_in(function.node) | set(function.input) | {
            f"{n.op_type}{i}" for i, n in enumerate(function.node)}
        return cls(sum(n.ByteSize() for n in function.node), names, defined)


class _Inliner:
    def __init__(self, model, where: str, limits: ReadLimits) -> None:
        self.functions = model_functions(model)
        seen: set = set()
        for f in model.functions:
            if (f.domain, f.name, f.overload) in seen:
                raise ModelFileError(f"{where}: function {f.name!r} of domain {f.domain!r} "
                                     f"is defined twice")
            seen.add((f.domain, f.name, f.overload))
        self.where, self.limits = where, limits
        g = model.graph
        self.taken = names_in(g.node) | {v.name for v in (*g.input, *g.output, *g.initializer)}
        self.count = self.bytes = self.calls = 0  # nodes and body bytes written, calls
        self.bodies: dict = {}  # function key -> _Body
        self.tried: dict = {}  # a stem's base -> the first suffix not tried yet

    def nodes(self, nodes, depth: int = 0, calling: tuple = ()) -> list:
        """``nodes`` with each call of a function replaced by its body, inlined in turn, and
        each subgraph's nodes so too (a node holding one is copied; the others are the
        caller's to copy)."""
        import onnx

        out = []
        for node in nodes:
            function = self.functions.get(_key(node))
            if function is None:
                if any(attribute_graphs(node)):
                    node, original = onnx.NodeProto(), node
                    node.CopyFrom(original)
                    for g in attribute_graphs(node):
                        inlined = self.nodes(g.node, depth, calling)
                        del g.node[:]
                        g.node.extend(inlined)
                self._written(1, 0)
                out.append(node)
                continue
            if _key(node) in calling:
                chain = " -> ".join(k[1] for k in (*calling, _key(node)))
                raise ModelFileError(f"{self.where}: function {node.op_type!r} calls itself "
                                     f"({chain}); ONNX functions may not recurse",
                                     node=_called(node), op=node.op_type)
            if depth >= MAX_DEPTH:
                raise UnsupportedModelError(f"{self.where}: calls of the model's functions "
                                            f"nested more than {MAX_DEPTH} deep",
                                            node=_called(node), op=node.op_type)
            self.calls += 1
            out.extend(self.nodes(self._body(function, node), depth + 1,
                                  (*calling, _key(node))))
        return out

    def _written(self, count: int, size: int) -> None:
        """Count ``count`` nodes written and ``size`` bytes of bodies about to be copied,
        against the caps."""
        self.count, self.bytes = self.count + count, self.bytes + size
        cap = self.limits.max_file_bytes
        if self.count > self.limits.max_nodes or self.bytes > cap:
            raise ModelFileError(f"{self.where}: the model's functions inlined take more than "
                                 f"{self.limits.max_nodes} nodes or {cap} bytes (the caps)")

    def _body(self, function, call) -> list:
        """The nodes that replace ``call``: Identities into the body's inputs, the body
        renamed under the call's own name with its attributes put in, Identities out of its
        outputs."""
        import onnx
        from onnx import helper

        where = f"{self.where}: {call.op_type}"
        for what, have, take in (("inputs", call.input, function.input),
                                 ("outputs", call.output, function.output)):
            if len(have) > len(take):
                raise ModelFileError(f"{where} is called with {len(have)} {what}; the "
                                     f"model's function takes {len(take)}",
                                     node=_called(call), op=call.op_type)
        body = self.bodies.get(_key(call)) or self.bodies.setdefault(_key(call), _Body.of(
            function))
        self._written(0, body.size)  # before it is copied
        omitted = {f for i, f in enumerate(function.input)
                   if i >= len(call.input) or not call.input[i]}
        hiding = sorted(omitted & body.defined)
        if hiding:
            raise UnsupportedModelError(f"{where}: the function's body defines {hiding[0]!r}, "
                                        f"the name of an input the call omits",
                                        node=_called(call), op=call.op_type)
        stem = self._stem(f"{_called(call)}/fn", body.names)
        given = {a.name: a for a in call.attribute}
        defaults = {a.name: a for a in function.attribute_proto}

        def renamed(name: str) -> str:
            return "" if not name or name in omitted else f"{stem}/{name}"

        out = [helper.make_node("Identity", [actual], [renamed(formal)])  # no names to meet
               for formal, actual in zip(function.input, call.input) if actual]
        for i, inner in enumerate(function.node):
            copy = onnx.NodeProto()
            copy.CopyFrom(inner)
            copy.name = f"{stem}/{inner.name or inner.op_type + str(i)}"
            _rename(copy, renamed, stem, given, defaults)
            out.append(copy)
        out += [helper.make_node("Identity", [renamed(formal)], [actual])
                for formal, actual in zip(function.output, call.output) if actual]
        return out

    def _stem(self, base: str, names: set[str]) -> str:
        """The first of ``base``, ``base2``, ... that no name of the model, or made for a call
        before, is, and under which no name of ``names`` is; every such name is then taken."""
        k = self.tried.get(base, 1)  # calls of one name in many subgraphs: not quadratic
        while True:
            stem = base if k == 1 else f"{base}{k}"
            if stem not in self.taken and not any(f"{stem}/{n}" in self.taken for n in names):
                self.tried[base] = k + 1
                self.taken.add(stem)
                self.taken.update(f"{stem}/{n}" for n in names)
                return stem
            k += 1


def _rename(node, renamed, stem: str, given: dict, defaults: dict) -> None:
    """``node`` of a body, in place: its values ``renamed``, in its subgraphs too (their
    inputs, outputs and initializers; their nodes' names under ``stem``), and its attributes
    put in (:func:`substituted`)."""
    node.input[:] = [renamed(t) for t in node.input]
    node.output[:] = [renamed(t) for t in node.output]
    kept = []
    for a in node.attribute:
        value = substituted(a, given, defaults)
        if value is not None:
            kept.append(value)
    del node.attribute[:]
    node.attribute.extend(kept)
    for g in attribute_graphs(node):
        for v in (*g.input, *g.output, *g.value_info):
            v.name = renamed(v.name)
        for t in g.initializer:
            t.name = renamed(t.name)
        for s in g.sparse_initializer:
            s.values.name = renamed(s.values.name)
            s.indices.name = renamed(s.indices.name)
        for n in g.node:
            n.name = f"{stem}/{n.name}" if n.name else n.name
            _rename(n, renamed, stem, given, defaults)


def inline_local_functions(model, *, where: str = "model",
                           limits: ReadLimits = DEFAULT_READ_LIMITS):
    """``model`` itself when it defines no functions, else a copy with every call of them
    inlined (see the module's docstring), parsed and checked again like a file, and the
    number of calls inlined. Unused functions are dropped."""
    if not model_functions(model):
        return model, 0
    import onnx

    inliner = _Inliner(model, where, limits)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.functions[:]
    nodes = inliner.nodes(model.graph.node)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    try:
        data = out.SerializeToString()
    except ValueError as exc:  # protobuf cannot write 2 GiB and more
        raise ModelFileError(f"{where}: too large once its functions are inlined: "
                             f"{exc}") from None
    cap = max(limits.max_file_bytes, len(data))
    checked = parse_model(data, where=f"{where} (its functions inlined)",
                          limits=dataclasses.replace(limits, max_file_bytes=cap))
    return checked, inliner.calls
