"""ONNX sequences whose structure is known at import: SequenceEmpty, SequenceConstruct,
SequenceInsert, SequenceErase, SequenceAt, SequenceLength, SplitToSequence and
ConcatFromSequence.

torch.jit.script's ``out = []; for ...: out.append(t)`` followed by ``torch.stack(out)`` or
``torch.cat(out)`` exports under the legacy exporter as SequenceEmpty, a SequenceInsert in a
Loop body (the sequence a carried value) and ConcatFromSequence after the Loop; tf2onnx and
others write the other sequence ops. The ABI has no sequence type, and a sequence never reaches
the artifact: at import a sequence value is a Python list of the names of its elements (ONNX
names the importer knows: constants stay constants), kept in ``Importer.seqs``. So each op
rewrites a list: SequenceEmpty is ``[]``, SequenceConstruct its inputs, SequenceInsert and
SequenceErase insert or drop at a constant position (default: at the end, the last one;
negative counted from the end), SequenceAt is the element at a constant position (its output
the same value), SequenceLength a constant int64. SplitToSequence is a Split of constant sizes
(a scalar split: chunks of that size, the last one smaller; none: pieces of 1, squeezed unless
keepdims), ConcatFromSequence a Concat (new_axis: an Unsqueeze of each element first), written
as ONNX nodes and mapped like the model's own (folded when every element is a constant). Loop
carried values and If outputs that are sequences flow through (:meth:`.convert.Importer.bind`).

Refused, naming the node: a position computed at run time or out of range, a split of
run-time sizes or along a run-time dim, ConcatFromSequence of an empty sequence (its shape is
unknown), elements of different dtypes, a sequence in a sequence, and a sequence that is a graph
output, a graph input or the input of any other op (a sequence exists only within the import).
"""

from __future__ import annotations

import numpy as np

from ..errors import ModelFileError
from .fold import axis_in, int_vector
from .ops import MAPPERS, _only, _opt, maps

__all__ = ["READERS", "ONLY_HERE"]

#: The ops that read a sequence, their first input (Identity passes one on; any other op given
#: one is refused, :mod:`.convert`)
READERS = frozenset({"SequenceInsert", "SequenceErase", "SequenceAt", "SequenceLength",
                     "ConcatFromSequence"})

#: How refusals say where a sequence may be
ONLY_HERE = ("a sequence is supported only within the import (built and read by the sequence "
             "ops, carried through Loops and Ifs), never in the artifact")


def _seq(imp, name: str) -> list[str]:
    """The elements of sequence input ``name``."""
    if name not in imp.seqs:
        what = "a tensor" if name in imp.consts or name in imp.values or name in imp.sym else \
            "never computed"
        raise ModelFileError(f"input {name!r} must be a sequence, but it is {what}")
    return imp.seqs[name]


def _checked(imp, items: list[str]) -> list[str]:
    """``items`` (tensor names) as a sequence: one dtype for all."""
    kinds: dict[str, str] = {}
    for t in items:
        kinds.setdefault(imp.type_of(t).dtype, t)
    if len(kinds) > 1:
        raise ModelFileError(f"the elements of a sequence must share a dtype, got "
                             f"{', '.join(f'{d} ({t!r})' for d, t in kinds.items())}")
    return items


def _position(imp, node, length: int, *, insert: bool = False) -> int:
    """The constant position input of ``node`` (its 2nd, the 3rd of SequenceInsert) within a
    sequence of ``length``; absent: the end (insert), else the last element."""
    name = _opt(node, 2 if insert else 1)
    if name is None:
        if not insert and not length:
            raise ModelFileError("the sequence is empty: there is no last element")
        return length if insert else length - 1
    if name not in imp.consts:
        raise imp.unsupported(f"position {name!r} is computed at run time; only a constant "
                              f"position (known at import) is supported")
    value = imp.consts[name]
    if value.size != 1 or value.dtype.kind not in "iu":
        raise ModelFileError(f"position {name!r} must be one integer, got {value.dtype} of "
                             f"shape {value.shape}")
    pos = int(value.reshape(-1)[0])
    top = length if insert else length - 1
    if not -length <= pos <= top:
        raise ModelFileError(f"position {pos} is out of range for a sequence of {length} "
                             f"element(s) ([{-length}, {top}])")
    return pos + length if pos < 0 else pos


def _glue(imp, nodes) -> None:
    """Map ONNX ``nodes`` (written for the node being mapped) like the model's own."""
    imp.inline(nodes, MAPPERS, -1, depth=0)


@maps("SequenceEmpty")
def _empty(imp, node, attrs):
    _only(imp, attrs, {"dtype": ...})
    imp.set_seq(node.output[0], [])


@maps("SequenceConstruct")
def _construct(imp, node, attrs):
    _only(imp, attrs, {})
    if not node.input or not all(node.input):
        raise ModelFileError(f"inputs {list(node.input)!r:.80}: SequenceConstruct needs one or "
                             f"more, none of them empty")
    imp.set_seq(node.output[0], _checked(imp, list(node.input)))


@maps("SequenceInsert")
def _insert(imp, node, attrs):
    _only(imp, attrs, {})
    items = list(_seq(imp, node.input[0]))
    items.insert(_position(imp, node, len(items), insert=True), node.input[1])
    imp.set_seq(node.output[0], _checked(imp, items))


@maps("SequenceErase")
def _erase(imp, node, attrs):
    _only(imp, attrs, {})
    items = list(_seq(imp, node.input[0]))
    del items[_position(imp, node, len(items))]
    imp.set_seq(node.output[0], items)


@maps("SequenceAt")
def _at(imp, node, attrs):
    _only(imp, attrs, {})
    items = _seq(imp, node.input[0])
    imp.bind(node.output[0], items[_position(imp, node, len(items))], "element")


@maps("SequenceLength")
def _length(imp, node, attrs):
    _only(imp, attrs, {})
    imp.set_const(node.output[0], np.array(len(_seq(imp, node.input[0])), np.int64))


@maps("SplitToSequence")
def _split(imp, node, attrs):
    """A Split of constant sizes into named pieces (squeezed where the split is not given and
    keepdims is 0), the pieces the sequence."""
    from onnx import helper

    _only(imp, attrs, {"axis": ..., "keepdims": ...})
    keep = attrs.get("keepdims", 1)
    if keep not in (0, 1):
        raise imp.unsupported(f"attribute keepdims={keep!r} must be 0 or 1")
    x, split, out = node.input[0], _opt(node, 1), node.output[0]
    shape = imp.type_of(x).shape
    axis = axis_in(attrs.get("axis", 0), len(shape))
    dim = shape[axis]
    if type(dim) is not int:
        raise imp.unsupported(f"axis {axis} of {x!r} {list(shape)} has a run-time length; the "
                              f"pieces must be known at import")
    if split is not None and split not in imp.consts:
        raise imp.unsupported(f"split {split!r} is computed at run time; only constant sizes "
                              f"(known at import) are supported")
    given = None if split is None else imp.consts[split]
    if given is None:
        sizes = [1] * dim
    elif given.ndim == 0:  # one chunk size: equal parts, the last one smaller
        step = int_vector(given, "split", scalar_ok=True)[0]
        if step < 1:
            raise ModelFileError(f"split {step} must be positive")
        sizes = [min(step, dim - i) for i in range(0, dim, step)]
    else:
        sizes = int_vector(given, "split")
        if any(s < 0 for s in sizes) or sum(sizes) != dim:
            raise ModelFileError(f"split {sizes} does not cover axis {axis} of length {dim} "
                                 f"with sizes >= 0")
    stem = f"{imp.node_name}/{out}"
    squeeze = given is None and not keep
    pieces = [f"{stem}.piece{k}" for k in range(len(sizes))]
    if not sizes:  # a zero-length axis: an empty sequence
        imp.set_seq(out, [])
        return
    imp.set_const(f"{stem}.sizes", np.array(sizes, np.int64))
    parts = [f"{p}.kept" for p in pieces] if squeeze else pieces
    nodes = [helper.make_node("Split", [x, f"{stem}.sizes"], parts, name=f"{stem}.split",
                              axis=axis)]
    if squeeze:
        imp.set_const(f"{stem}.axes", np.array([axis], np.int64))
        nodes += [helper.make_node("Squeeze", [p, f"{stem}.axes"], [q],
                                   name=f"{stem}.squeeze{k}")
                  for k, (p, q) in enumerate(zip(parts, pieces))]
    _glue(imp, nodes)
    imp.set_seq(out, _checked(imp, pieces))


@maps("ConcatFromSequence")
def _concat(imp, node, attrs):
    """A Concat of the elements on ``axis`` (new_axis: each unsqueezed there first)."""
    from onnx import helper

    _only(imp, attrs, {"axis": ..., "new_axis": ...})
    if "axis" not in attrs:
        raise ModelFileError("ConcatFromSequence needs attribute 'axis'")
    new = attrs.get("new_axis", 0)
    if new not in (0, 1):
        raise imp.unsupported(f"attribute new_axis={new!r} must be 0 or 1")
    items, out = _seq(imp, node.input[0]), node.output[0]
    if not items:
        raise imp.unsupported(f"sequence {node.input[0]!r} is empty: the shape of its "
                              f"concatenation is unknown")
    rank = len(imp.type_of(items[0]).shape)
    axis = axis_in(attrs["axis"], rank + new)
    stem = f"{imp.node_name}/{out}"
    nodes, parts = [], list(items)
    if new:
        imp.set_const(f"{stem}.axes", np.array([axis], np.int64))
        parts = [f"{stem}.row{k}" for k in range(len(items))]
        nodes += [helper.make_node("Unsqueeze", [t, f"{stem}.axes"], [p],
                                   name=f"{stem}.unsqueeze{k}")
                  for k, (t, p) in enumerate(zip(items, parts))]
    nodes.append(helper.make_node("Concat", parts, [out], name=f"{stem}.concat", axis=axis))
    _glue(imp, nodes)
