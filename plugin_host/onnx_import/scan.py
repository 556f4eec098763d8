"""ONNX Scan over a length known at import, unrolled.

tf2onnx and older converters write a recurrence over a tensor's steps as a Scan, and ONNX's
own functions use it (LinearAttention's body is one). The ABI has no loop op: as a Loop is
(:mod:`.loop`), each step maps a renamed copy of the body in the Scan's place. Step t reads
the state values the previous step left (the Scan's initial ones first) and, of each scan
input, its slice t along its ``scan_input_axes`` entry (a Gather of one index, folded when the
input is a constant), counted from the end where ``scan_input_directions`` says 1. The Scan's
outputs are the last states and each scan output's steps stacked on a new axis, its
``scan_output_axes`` entry (negative ones counted from the end of the stacked rank), in the
order of the steps, or the reverse where ``scan_output_directions`` says 1, as onnxruntime
prepends them.

Opset 8's Scan, which takes a batch axis and ``sequence_lens``, never reaches this module: the
upgrade rewrites it as a Loop over the batch around a Loop over the sequence before onnx's
version converter runs (:mod:`.upgrade`), and those Loops unroll.

The steps count against the same cap as a Loop's iterations
(:data:`.loop.MAX_LOOP_ITERATIONS`), and the body's nodes against the node cap.

Refused, naming the node: a scan input whose length along its axis is a run-time dim (no
loop op in the ABI: ``--dim`` fixes it), scan inputs of different lengths, zero steps (on
which onnxruntime's Scan fails), an axis or direction out of range, a body whose inputs or
outputs do not match the node's, bodies nested beyond :data:`.convert.MAX_IF_DEPTH`.
"""

from __future__ import annotations

import numpy as np

from ..errors import ModelFileError
from .convert import MAX_IF_DEPTH
from .loop import MAX_LOOP_ITERATIONS, Body, stack

__all__ = ["unroll_scan"]

_ATTRIBUTES = ("body", "num_scan_inputs", "scan_input_directions", "scan_input_axes",
               "scan_output_directions", "scan_output_axes")


def _attributes(imp, node):
    """The Scan's body and its attributes as plain values; ModelFileError where one is of the
    wrong kind, UnsupportedModelError for one a Scan does not have."""
    import onnx

    attrs = {a.name: a for a in node.attribute}
    extra = sorted(set(attrs) - set(_ATTRIBUTES))
    if extra:
        raise imp.unsupported(f"attribute(s) {extra} are not supported (a Scan has "
                              f"{', '.join(_ATTRIBUTES)})")
    body = attrs.get("body")
    if body is None or body.type != onnx.AttributeProto.GRAPH:
        raise ModelFileError("the Scan has no graph attribute 'body'")
    m = attrs.get("num_scan_inputs")
    if m is None or m.type != onnx.AttributeProto.INT:
        raise ModelFileError("the Scan has no int attribute 'num_scan_inputs'")
    lists = {}
    for name in _ATTRIBUTES[2:]:
        a = attrs.get(name)
        if a is not None and a.type != onnx.AttributeProto.INTS:
            raise ModelFileError(f"the Scan's attribute {name!r} is not a list of ints")
        lists[name] = None if a is None else list(a.ints)
    return body.g, m.i, lists


def _entries(lists: dict, name: str, count: int, default: int, allowed=None) -> list[int]:
    """Attribute ``name``'s ``count`` entries (``default`` each where it is absent)."""
    values = lists[name]
    if values is None:
        return [default] * count
    if len(values) != count:
        raise ModelFileError(f"attribute {name} has {len(values)} entries for {count} scan "
                             f"{'inputs' if 'input' in name else 'outputs'}")
    for v in values:
        if allowed is not None and v not in allowed:
            raise ModelFileError(f"attribute {name} holds {v}: a direction is 0 (forward) or "
                                 f"1 (reverse)")
    return values


def _axis(axis: int, rank: int, what: str) -> int:
    if not -rank <= axis < rank:
        raise ModelFileError(f"{what}: axis {axis} is out of range for rank {rank}")
    return axis % rank


def _length(imp, inputs: list[str], axes: list[int]) -> tuple[int, list[int]]:
    """The number of steps (every scan input's dim along its axis, the same for all), and
    the axes counted from the front."""
    lengths, axes = [], list(axes)
    for i, name in enumerate(inputs):
        shape = imp.type_of(name).shape
        axes[i] = axis = _axis(axes[i], len(shape), f"scan input {name!r} of shape "
                                                    f"{list(shape)}")
        d = shape[axis]
        if type(d) is not int:
            raise imp.unsupported(f"scan input {name!r} has the run-time length {d!r} along "
                                  f"axis {axis}; only a Scan over a length known at import is "
                                  f"imported, unrolled (no loop op in the ABI)")
        lengths.append(d)
    if len(set(lengths)) > 1:
        raise ModelFileError(f"the scan inputs {inputs} have different lengths {lengths} along "
                             f"their scan axes")
    if lengths[0] == 0:
        raise imp.unsupported(f"scan input {inputs[0]!r} is empty along its scan axis: a Scan "
                              f"of zero steps, on which onnxruntime's Scan fails")
    return lengths[0], axes


def _slice(imp, mappers, loop: str, j: int, name: str, axis: int, t: int, step: int) -> str:
    """Slice ``t`` of scan input ``j`` (``name``) along ``axis`` (the axis removed) for step
    ``step``: a Gather of one index, mapped like the model's own; the name of the slice (one
    per input position: a value scanned twice, in two directions, gives two slices)."""
    from onnx import helper

    stem = f"{loop}/in{j}.{name}"
    index, out = f"{stem}.at{step}", f"{stem}.step{step}"
    imp.set_const(index, np.array(t, np.int64))
    imp.inline([helper.make_node("Gather", [name, index], [out], name=f"{stem}.slice{step}",
                                 axis=axis)], mappers, -1, depth=0)
    return out


def unroll_scan(imp, node, mappers, index: int) -> None:
    """Map Scan ``node`` as its steps, one after another (see the module)."""
    body, m, lists = _attributes(imp, node)
    ins, outs = list(node.input), list(node.output)
    n = len(ins) - m
    if m < 1 or n < 0:
        raise ModelFileError(f"num_scan_inputs is {m}, for a Scan of {len(ins)} input(s): it "
                             f"must be at least 1 and at most the inputs")
    if len(outs) < n:
        raise ModelFileError(f"the Scan has {len(outs)} output(s) for its {n} state value(s)")
    k = len(outs) - n
    if len(body.input) != n + m:
        raise ModelFileError(f"the body takes {len(body.input)} input(s); a Scan of {n} state "
                             f"value(s) and {m} scan input(s) needs {n + m}")
    if len(body.output) != n + k:
        raise ModelFileError(f"the body yields {len(body.output)} output(s); a Scan of {n} "
                             f"state value(s) and {k} scan output(s) needs {n + k}")
    if "" in ins:
        raise ModelFileError(f"input {ins.index('')} of the Scan is empty")
    in_dirs = _entries(lists, "scan_input_directions", m, 0, (0, 1))
    in_axes = _entries(lists, "scan_input_axes", m, 0)
    out_dirs = _entries(lists, "scan_output_directions", k, 0, (0, 1))
    out_axes = _entries(lists, "scan_output_axes", k, 0)
    scanned = ins[n:]
    for t in scanned:
        if t in imp.seqs:
            from .sequence import ONLY_HERE

            raise imp.unsupported(f"scan input {t!r} is a sequence; {ONLY_HERE}")
    steps, axes = _length(imp, scanned, in_axes)
    left = MAX_LOOP_ITERATIONS - imp.loop_iterations
    if steps > left:
        raise imp.unsupported(f"its {steps} steps are above the {left} Loop and Scan iterations "
                              f"left of the cap of {MAX_LOOP_ITERATIONS} per model")
    if imp.if_depth >= MAX_IF_DEPTH:
        raise imp.unsupported(f"Scan and Loop bodies and If branches nested more than "
                              f"{MAX_IF_DEPTH} deep")
    copies = Body(imp, node, body)
    states, parts = ins[:n], [[] for _ in range(k)]
    for t in range(steps):
        slices = [_slice(imp, mappers, copies.loop, j, x, axis, steps - 1 - t if rev else t, t)
                  for j, (x, axis, rev) in enumerate(zip(scanned, axes, in_dirs))]
        names = copies.copy(t, [*((s, "state value") for s in states),
                                *((s, "scan input slice") for s in slices)], mappers, index)
        states = names[:n]
        for rows, name in zip(parts, names[n:]):
            if name in imp.seqs:
                from .sequence import ONLY_HERE

                raise imp.unsupported(f"scan output {name!r} of step {t} is a sequence; "
                                      f"{ONLY_HERE}")
            rows.append(name)
    for out, src in zip(outs, states):
        if out:
            imp.bind(out, src, "state value")
    for out, rows, axis, rev in zip(outs[n:], parts, out_axes, out_dirs):
        if out:
            rank = len(imp.type_of(rows[0]).shape) + 1
            axis = _axis(axis, rank, f"scan output {out!r} (rank {rank} stacked)")
            stack(imp, mappers, copies.loop, out, rows[::-1] if rev else rows, axis)
