"""ONNX Loop of a trip count and condition known at import, unrolled.

torch's legacy exporter writes a ``torch.jit.script`` ``for`` loop over a static dim as a Loop
whose trip count folds to a constant, its dynamo exporter torch's ``while_loop`` over a counter
as a Loop whose condition folds each iteration; tf2onnx and others write such loops too. The
ABI has no loop op: each iteration maps a copy of the body in the Loop's place, as
:meth:`.convert.Importer._inline_if` maps the branch an If takes. The copy of iteration k
renames every value the body defines (its inputs, initializers, node outputs and node names,
in nested subgraphs too) to ``<loop>.i<k>/<name>`` (a nested Loop's prefix before its outer
one's: ``inner.i0/outer.i1/x``); names of the outer scope stay. Iteration k's number is a
constant int64, its condition a constant bool (of rank 1 where the body declares so, as
onnxruntime feeds them), its carried values the previous iteration's (constants stay
constants, so shape arithmetic folds; a sequence stays a list, :mod:`.sequence`). The
Loop's outputs are the last carried values and each scan output stacked on a new axis 0
(Unsqueeze and Concat, folded when constant).

The loop stops as onnxruntime runs it: after M iterations (M absent: no bound), or once the
condition is false: the ``cond`` input before the first, then each iteration's condition
output, which onnxruntime reads even when ``cond`` is absent, so it must be known at import
whenever another iteration could follow. Zero iterations give the initial values, and each
scan output empty with the shape the body declares for it (refused where that is not static).

Refused, naming the node: a trip count or condition computed at run time, neither given (a
loop without end), more than :data:`MAX_LOOP_ITERATIONS` iterations in the model, bodies
beyond the node cap or nested beyond :data:`.convert.MAX_IF_DEPTH` (Ifs and Loops together),
a body whose inputs or outputs do not match the node's.
"""

from __future__ import annotations

import re
from typing import Callable

import numpy as np

from ..errors import ModelFileError
from . import symbolic
from .convert import MAX_IF_DEPTH, _called
from .names import unused
from .reader import ONNX_DTYPES, to_array

__all__ = ["MAX_LOOP_ITERATIONS", "Body", "attribute_graphs", "defined_names", "names_in",
           "node_subgraphs", "rescoped", "stack", "subgraphs", "unroll"]

_ITERATION = re.compile(r"^.*\.i\d+/")

#: Loop iterations and Scan steps unrolled in one model, all such nodes (nested too) together
MAX_LOOP_ITERATIONS = 4096


def subgraphs(g):
    """``g`` and every subgraph in it, nested ones included."""
    stack = [g]
    while stack:
        g = stack.pop()
        yield g
        for n in g.node:
            stack.extend(attribute_graphs(n))


def node_subgraphs(node):
    """Every subgraph of ``node``'s attributes (an If's branches, a Loop's body), nested ones
    included."""
    for g in attribute_graphs(node):
        yield from subgraphs(g)


def attribute_graphs(node) -> list:
    """The subgraphs of ``node``'s attributes (an If's branches, a Loop's body), not nested
    ones."""
    import onnx

    return [g for a in node.attribute for g in (
        [a.g] if a.type == onnx.AttributeProto.GRAPH else
        a.graphs if a.type == onnx.AttributeProto.GRAPHS else [])]


def names_in(nodes) -> set[str]:
    """Every value and node name ``nodes`` use, in their subgraphs too (a subgraph's inputs,
    outputs and initializers included): what a name made up for a copy must not meet."""
    out: set[str] = set()
    for n in nodes:
        out.update((n.name, *n.input, *n.output))
        for g in node_subgraphs(n):
            out.update(v.name for v in (*g.input, *g.output, *g.initializer))
            for m in g.node:
                out.update((m.name, *m.input, *m.output))
    out.discard("")
    return out


def defined_names(body) -> set[str]:
    """The names ``body`` defines: its inputs, initializers and node outputs, nested subgraphs'
    included (what an iteration's copy renames; every other name is of the outer scope)."""
    names: set[str] = set()
    for g in subgraphs(body):
        names.update(v.name for v in g.input)
        names.update(t.name for t in g.initializer)
        names.update(t for n in g.node for t in n.output if t)
    return names


def rescoped(graph, rename: Callable[[str, bool], str], scope: frozenset = frozenset()) -> None:
    """Rename the values of ``graph`` in place, as ONNX scopes them: each name becomes
    ``rename(name, inside)``, ``inside`` telling whether it names a value that ``graph``, or
    the subgraph of it it appears in or one enclosing that, defines (inputs, initializers,
    node outputs; ``scope``: more names taken as defined at the top) or one from outside. A
    subgraph's own names hide the enclosing ones, so a read of an outer value is an outside
    name even where a subgraph nested elsewhere defines a value of that name."""
    def walk(g, scope: frozenset) -> None:
        scope = scope | {v.name for v in g.input} | {t.name for t in g.initializer} | {
            t for n in g.node for t in n.output if t}

        def new(name: str) -> str:
            return rename(name, name in scope) if name else name

        for v in [*g.input, *g.output, *g.initializer]:
            v.name = new(v.name)
        for n in g.node:
            n.input[:] = [new(t) for t in n.input]
            n.output[:] = [new(t) for t in n.output]
            for sub in attribute_graphs(n):
                walk(sub, scope)

    walk(graph, frozenset(scope))


def _renamed(body, prefix: str, initializers: frozenset):
    """A copy of ``body`` with each node name prefixed, and each value the body defines where
    a name names it (:func:`rescoped`). :class:`Body` copies a body without its
    initializers: their names are ``initializers``."""
    copy = type(body)()
    copy.CopyFrom(body)
    rescoped(copy, lambda name, inside: prefix + name if inside else name, initializers)
    for g in subgraphs(copy):
        for n in g.node:
            if n.name:
                n.name = prefix + n.name
    return copy


def _one(imp, name: str, what: str, kind: str):
    """The one value of constant input ``name`` (``kind``: numpy dtype kinds it may have)."""
    value = imp.consts[name]
    if value.size != 1 or value.dtype.kind not in kind:
        raise ModelFileError(f"{what} {name!r} must be one {'bool' if kind == 'b' else 'integer'}"
                             f", got {value.dtype} of shape {value.shape}")
    return value.reshape(-1)[0]


def _declared_rank(vi) -> int:
    t = vi.type.tensor_type
    return len(t.shape.dim) if vi.type.HasField("tensor_type") and t.HasField("shape") else 0


def _empty_scan(imp, body, vi, out: str) -> np.ndarray:
    """The scan output of zero iterations: empty on axis 0, of the shape the body declares
    for one iteration's value (its output, else its value_info)."""
    declared = [v for v in [vi, *body.value_info] if v.name == vi.name]
    for v in declared:
        t = v.type.tensor_type if v.type.HasField("tensor_type") else None
        if t is not None and t.HasField("shape") and t.elem_type in ONNX_DTYPES and all(
                d.HasField("dim_value") for d in t.shape.dim):
            return np.zeros((0, *(d.dim_value for d in t.shape.dim)), ONNX_DTYPES[t.elem_type])
    raise imp.unsupported(f"the Loop runs zero iterations and the body declares no static "
                          f"shape and ABI dtype for scan output {out!r} ({vi.name!r}), so "
                          f"its empty value's shape is unknown")


def _prefix(imp, name: str) -> str:
    """The stem of the iterations' names: ``name`` after the last iteration prefix an outer
    Loop gave it (so that names grow by one stem per level), or ``..._2``, ... where another
    Loop took it: one stem per Loop (Loops may share a name, and their bodies the names they
    define; an inner Loop's copies in each outer iteration are Loops of their own)."""
    return unused(_ITERATION.sub("", name) or name, imp.loop_names, "_")


def stack(imp, mappers, loop: str, out: str, parts: list[str], axis: int = 0) -> None:
    """Bind ``out`` to ``parts`` (one value per iteration) stacked on a new axis ``axis``: an
    Unsqueeze of each and a Concat, mapped like the model's own (folded when constant)."""
    from onnx import helper

    axes = f"{loop}/{out}.axes"
    imp.set_const(axes, np.array([axis], np.int64))
    rows = [f"{loop}/{out}.row{k}" for k in range(len(parts))] if len(parts) > 1 else [out]
    nodes = [helper.make_node("Unsqueeze", [p, axes], [r], name=f"{loop}/{out}.unsqueeze{k}")
             for k, (p, r) in enumerate(zip(parts, rows))]
    if len(parts) > 1:
        nodes.append(helper.make_node("Concat", rows, [out], name=f"{loop}/{out}.stack",
                                      axis=axis))
    imp.inline(nodes, mappers, -1, depth=0)


def _checked(imp, node):
    """The Loop's body, its trip count and condition inputs ("" where absent) and carried
    values; ModelFileError where the body's inputs or outputs do not match the node's."""
    import onnx

    body = {a.name: a for a in node.attribute}.get("body")
    if body is None or body.type != onnx.AttributeProto.GRAPH:
        raise ModelFileError("the Loop has no graph attribute 'body'")
    extra = sorted(a.name for a in node.attribute if a.name != "body")
    if extra:
        raise imp.unsupported(f"attribute(s) {extra} are not supported (a Loop has only body)")
    body = body.g
    trips, cond, *_ = [*node.input, "", ""]
    carried, outputs = list(node.input[2:]), len(node.output)
    n = len(carried)
    if outputs < n:
        raise ModelFileError(f"the Loop has {outputs} output(s) for its {n} carried value(s)")
    if len(body.input) != 2 + n:
        raise ModelFileError(f"the body takes {len(body.input)} input(s); a Loop of {n} carried "
                             f"value(s) needs {2 + n} (iteration number, condition, carried "
                             f"values)")
    if len(body.output) != 1 + outputs:
        raise ModelFileError(f"the body yields {len(body.output)} output(s); a Loop of "
                             f"{outputs} output(s) needs {1 + outputs} (condition, {n} carried "
                             f"value(s), {outputs - n} scan output(s))")
    if "" in carried:
        raise ModelFileError(f"carried value {carried.index('')} of the Loop is empty")
    return body, trips, cond, carried


_RULE = ("only a Loop whose trip count and condition are known at import (a constant, each "
         "iteration's condition output too) is imported, unrolled")


class Body:
    """One Loop's (or Scan's) body, copied renamed for each iteration: the names it defines, its
    initializers read once (every iteration's renamed ones hold the same arrays: one graph
    constant however many iterations read it), the ranks of its iteration number and
    condition."""

    def __init__(self, imp, node, body) -> None:
        self.imp, self.body = imp, body
        self.inits = [(t.name, to_array(t, imp.limits)) for t in body.initializer]
        self.template = type(body)()
        self.template.CopyFrom(body)
        del self.template.initializer[:]
        self.ranks = [min(_declared_rank(v), 1) for v in body.input[:2]]  # a Loop's
        self.loop = _prefix(imp, _called(node))

    def first_condition(self, go: bool) -> np.ndarray:
        return np.array(go).reshape((1,) * self.ranks[1])

    def iteration(self, k: int, cond_in, carried: list[str], mappers, index: int) -> list[str]:
        """Map iteration ``k`` (condition ``cond_in``: a constant, else the name of the previous
        iteration's condition output) on ``carried``; the names of its outputs."""
        number = np.array(k, np.int64).reshape((1,) * self.ranks[0])
        cond = cond_in if isinstance(cond_in, np.ndarray) else (
            cond_in, "the previous iteration's condition output")
        return self.copy(k, [number, cond, *((c, "carried value") for c in carried)], mappers,
                         index)

    def copy(self, k: int, feeds: list, mappers, index: int) -> list[str]:
        """Map copy ``k`` of the body on ``feeds``, one per body input: a constant array, or
        ``(name, what)``, the value it binds; the names of the copy's outputs."""
        imp = self.imp
        imp.loop_iterations += 1
        if imp.loop_iterations > MAX_LOOP_ITERATIONS:
            raise imp.unsupported(f"unrolling it brings the model to more than "
                                  f"{MAX_LOOP_ITERATIONS} Loop and Scan iterations, the cap")
        imp.inlined += len(self.body.node)
        if imp.inlined + len(imp.model.graph.node) > imp.limits.max_nodes:
            raise ModelFileError(f"unrolling iteration {k} of the body brings the model to more "
                                 f"than {imp.limits.max_nodes} nodes, the cap")
        prefix = f"{self.loop}.i{k}/"
        g = _renamed(self.template, prefix, frozenset(name for name, _ in self.inits))
        for t in g.node:  # read inside the copy: read by the Loop, as for the original names
            for name in t.input:
                imp.consumers.setdefault(name, []).append(index)
        for v in g.output:
            imp.consumers.setdefault(v.name, []).append(index)
        for name, array in self.inits:
            imp.set_const(prefix + name, array, name)
        for v, feed in zip(g.input, feeds):
            if isinstance(feed, np.ndarray):
                imp.set_const(v.name, feed)
            else:
                imp.bind(v.name, *feed)
        imp.inline(g.node, mappers, index)
        names = [v.name for v in g.output]
        for name in names:
            if not any(name in d for d in (imp.consts, imp.sym, imp.values, imp.seqs)):
                raise ModelFileError(f"body output {name!r} of iteration {k} is never computed")
        return names


def unroll(imp, node, mappers, index: int) -> None:
    """Map Loop ``node`` as its iterations, one after another (see the module)."""
    body, trips, cond, carried = _checked(imp, node)
    n, outputs = len(carried), list(node.output)
    for name, what in ((trips, "trip count"), (cond, "condition")):
        if name and name not in imp.consts:
            dims = (f" (it holds the run-time dims {symbolic.entries(imp.sym[name])})"
                    if name in imp.sym else "")
            raise imp.unsupported(f"{what} {name!r} is computed at run time{dims}; {_RULE}")
    if not trips and not cond:
        raise imp.unsupported(f"the Loop has neither a trip count nor a condition, so it never "
                              f"ends; {_RULE}")
    limit = int(_one(imp, trips, "trip count", "iu")) if trips else None
    go = bool(_one(imp, cond, "condition", "b")) if cond else True
    left = MAX_LOOP_ITERATIONS - imp.loop_iterations
    if go and not cond and limit is not None and limit > left:
        raise imp.unsupported(f"trip count {limit} is above the {left} Loop iterations left of "
                              f"the cap of {MAX_LOOP_ITERATIONS} per model")
    if imp.if_depth >= MAX_IF_DEPTH:
        raise imp.unsupported(f"Loop bodies and If branches nested more than {MAX_IF_DEPTH} "
                              f"deep")
    copies = Body(imp, node, body)
    cond_in, scans = copies.first_condition(go), [[] for _ in outputs[n:]]
    k = 0
    while go and (limit is None or k < limit):
        names = copies.iteration(k, cond_in, carried, mappers, index)
        cond_in, carried = names[0], names[1:1 + n]
        for parts, name in zip(scans, names[1 + n:]):
            if name in imp.seqs:
                from .sequence import ONLY_HERE

                raise imp.unsupported(f"scan output {name!r} of iteration {k} is a sequence; "
                                      f"{ONLY_HERE}")
            parts.append(name)
        k += 1
        if limit is None or k < limit:  # onnxruntime reads it whether or not cond is given
            if cond_in not in imp.consts:
                raise imp.unsupported(f"the body's condition output {cond_in!r} of iteration "
                                      f"{k - 1} is computed at run time; {_RULE}")
            go = bool(_one(imp, cond_in, "the body's condition output", "b"))
    for out, src in zip(outputs, carried):
        if out:
            imp.bind(out, src, "carried value")
    for out, parts, vi in zip(outputs[n:], scans, body.output[1 + n:]):
        if out and parts:
            stack(imp, mappers, copies.loop, out, parts)
        elif out:
            imp.set_const(out, _empty_scan(imp, body, vi, out))
