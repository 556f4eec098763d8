"""Models of older default-domain opsets (1..12) upgraded to opset 13 before the import.

The upgrade is onnx's version converter: native code run on hostile input, so it runs in the
reference process (:meth:`.reference.ReferenceProcess.convert`: seccomp, no core dumps, a crash
or a run past the time limit a typed refusal, a cap on the size of the answer), and the model
it answers is parsed and checked by :func:`.reader.parse_model` like any file. The golden
outputs still come from onnxruntime running the model as given (it runs older opsets), so a
converter mistake shows as a mismatch at build time instead of being baked into the reference;
below opset 7, where onnxruntime has no kernel for some old versions (Add and Mul of opset 6),
the build runs the upgraded model instead and says so (:mod:`.build`). Where the converter
keeps a node whose meaning changed (Upsample's and Resize-10's sampling, Hardmax's rows,
PRelu's per-channel slope), the upgraded model is mended here to mean what the original did;
a Scan of opset 8, whose batch axis the converter drops, is rewritten as Loops before it runs.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from ..errors import ModelFileError, ModelImportError, UnsupportedModelError
from . import reference
from .names import unused
from .reader import DEFAULT_READ_LIMITS, OPSETS, ReadLimits, default_opset, parse_model

__all__ = ["upgrade_model"]


def upgrade_model(model, *, where: str = "model", limits: ReadLimits = DEFAULT_READ_LIMITS):
    """``model`` itself when the importer maps its opset, else the model the version converter
    makes of it at opset ``OPSETS.start``, checked like a file. UnsupportedModelError naming the
    opset (and the node when the converter's reason points at one) when the converter refuses."""
    version, target = default_opset(model), OPSETS.start
    if version in OPSETS:
        return model
    if version < 9:
        model = _batched_scans_as_loops(model)
    if version < 12:
        _refuse_read_dropout_masks(model, where, version)
    try:
        data = model.SerializeToString()
    except ValueError as exc:  # protobuf cannot write 2 GiB and more
        raise ModelFileError(f"{where}: too large to upgrade from opset {version}: "
                             f"{exc}") from None
    cap = limits.max_file_bytes + limits.max_external_bytes  # external data is inside now
    try:
        upgraded = reference.run_converter(data, target, max_bytes=cap)
    except reference.ConversionRefused as exc:
        reason = " ".join(str(exc).split())[:300] or "no reason given"
        node = _culprit(model, reason)
        raise UnsupportedModelError(
            f"{where}: opset {version} cannot be upgraded to {target}: the ONNX version "
            f"converter refuses it: {reason}",
            **({"node": node.name or node.output[0], "op": node.op_type} if node else {})
        ) from None
    checked = parse_model(upgraded, where=f"{where} (upgraded from opset {version})",
                          limits=dataclasses.replace(limits, max_file_bytes=cap))
    got = default_opset(checked)
    if got != target:
        raise ModelImportError(f"{where}: the ONNX version converter answered a model of "
                               f"opset {got}, not {target}")
    if _interface(checked) != _interface(model):
        raise ModelImportError(f"{where}: the ONNX version converter answered a model whose "
                               f"inputs or outputs differ from the original's")
    _keep_resize_coordinates(model, checked)
    _keep_hardmax_rows(model, checked)
    _keep_prelu_channels(model, checked)
    return checked


def _keep_resize_coordinates(original, upgraded) -> None:
    """Upsample (opsets 7 to 9) and Resize-10 sample at ``x_out / scale`` (asymmetric) and,
    in onnxruntime, take the nearest pixel below when enlarging and above when shrinking; the
    converter writes Resize-11 with neither attribute, whose defaults are half_pixel and
    round_prefer_floor. Say them on the upgraded node (the one writing the same output)."""
    import numpy as np
    import onnx

    old = {n.output[0]: n for n in original.graph.node
           if n.op_type in ("Upsample", "Resize") and n.output and not any(
               a.name == "coordinate_transformation_mode" for a in n.attribute)}
    consts = {t.name: t for t in original.graph.initializer}
    consts.update({n.output[0]: a.t for n in original.graph.node if n.op_type == "Constant"
                   and n.output for a in n.attribute if a.name == "value"})
    for node in upgraded.graph.node:
        before = old.get(node.output[0]) if node.op_type == "Resize" and node.output else None
        if before is None or any(a.name == "coordinate_transformation_mode"
                                 for a in node.attribute):
            continue
        node.attribute.append(onnx.helper.make_attribute("coordinate_transformation_mode",
                                                         "asymmetric"))
        scales = next((a.floats for a in before.attribute if a.name == "scales"), None)
        if scales is None and len(before.input) > 1 and before.input[1] in consts:
            try:
                scales = onnx.numpy_helper.to_array(consts[before.input[1]])
            except (ValueError, TypeError):  # checked later by the importer's own reading
                scales = None
        shrinking = scales is not None and len(scales) and bool(np.all(np.asarray(
            scales, np.float64) <= 1.0))
        if not any(a.name == "nearest_mode" for a in node.attribute):
            node.attribute.append(onnx.helper.make_attribute(
                "nearest_mode", "ceil" if shrinking else "floor"))


def _fresh_names(graph):
    """A function giving names no node, value or initializer of ``graph`` or of its subgraphs
    has yet."""
    from .loop import names_in

    taken = names_in(graph.node) | {t.name for t in graph.initializer} | {
        v.name for v in graph.input}
    return lambda name: unused(name, taken, ".", first=1)


def _keep_prelu_channels(original, upgraded) -> None:
    """PRelu before opset 7 takes a slope of C values per channel, axis 1 (Caffe2's kernel, as
    torch's exporter of the time wrote it: ``nn.PReLU(C)``); the converter keeps the 1-D
    slope, which opset 7's broadcasting aligns to the last axis instead. Such a slope (an
    initializer of more than one value) is reshaped to ``(C, 1, ..., 1)`` by x's rank, with
    ``Shape``, ``Size`` and ``ConstantOfShape``, which the import folds."""
    import onnx

    if default_opset(original) >= 7:
        return
    graph = upgraded.graph
    slopes = {t.name for t in graph.initializer if len(t.dims) == 1 and t.dims[0] > 1}
    if not any(n.op_type == "PRelu" and n.input[1:2] and n.input[1] in slopes
               for n in graph.node):
        return
    fresh, make = _fresh_names(graph), onnx.helper.make_node
    sizes = {t.name: t.dims[0] for t in graph.initializer if t.name in slopes}

    def constant(name: str, value) -> str:
        name = fresh(name)
        graph.initializer.append(onnx.numpy_helper.from_array(np.array(value, np.int64), name))
        return name

    two, zero, one = (constant(f"prelu_channels/{k}", v)
                      for k, v in (("two", 2), ("zero", 0), ("one", [1])))
    nodes = []
    for node in graph.node:
        if node.op_type != "PRelu" or node.input[1:2] == [] or node.input[1] not in slopes:
            nodes.append(node)
            continue
        x, slope = node.input[0], node.input[1]
        base = node.name or node.output[0]
        v = {k: fresh(f"{base}/{k}") for k in ("shape", "rank", "extra", "at_least_0", "count",
                                                "ones", "channels", "slope")}
        nodes += [make("Shape", [x], [v["shape"]], name=fresh(f"{base}/Shape")),
                  make("Size", [v["shape"]], [v["rank"]], name=fresh(f"{base}/Size")),
                  make("Sub", [v["rank"], two], [v["extra"]], name=fresh(f"{base}/Sub")),
                  make("Max", [v["extra"], zero], [v["at_least_0"]], name=fresh(f"{base}/Max")),
                  make("Reshape", [v["at_least_0"], one], [v["count"]],
                       name=fresh(f"{base}/Reshape_count")),
                  make("ConstantOfShape", [v["count"]], [v["ones"]],
                       name=fresh(f"{base}/ConstantOfShape"),
                       value=onnx.numpy_helper.from_array(np.array([1], np.int64))),
                  make("Concat", [constant(f"{base}/size", [sizes[slope]]), v["ones"]],
                       [v["channels"]], name=fresh(f"{base}/Concat"), axis=0),
                  make("Reshape", [slope, v["channels"]], [v["slope"]],
                       name=fresh(f"{base}/Reshape_slope"))]
        node.input[1] = v["slope"]
        nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)


def _keep_hardmax_rows(original, upgraded) -> None:
    """Hardmax before opset 13 takes its input as 2-D, the dims from ``axis`` (default 1) on
    as one row; the converter keeps the node as it is, which at opset 13 means the one axis.
    Write it as the converter writes Softmax: ``Flatten`` at the axis, Hardmax over the last
    axis and ``Reshape`` back to the input's ``Shape`` (the node keeps its name)."""
    import onnx

    old = {n.output[0]: n for n in original.graph.node if n.op_type == "Hardmax" and n.output}
    graph = upgraded.graph
    if not any(n.op_type == "Hardmax" and n.output and n.output[0] in old for n in graph.node):
        return
    fresh = _fresh_names(graph)
    nodes = []
    for node in graph.node:
        if node.op_type != "Hardmax" or not node.output or node.output[0] not in old:
            nodes.append(node)
            continue
        axis = next((a.i for a in old[node.output[0]].attribute if a.name == "axis"), 1)
        x, y = node.input[0], node.output[0]
        base = node.name or y
        shape, flat, rows = fresh(f"{base}/shape"), fresh(f"{base}/flat"), fresh(f"{base}/rows")
        make = onnx.helper.make_node
        nodes += [make("Shape", [x], [shape], name=fresh(f"{base}/Shape")),
                  make("Flatten", [x], [flat], name=fresh(f"{base}/Flatten"), axis=axis),
                  make("Hardmax", [flat], [rows], name=node.name or y, axis=-1),
                  make("Reshape", [rows, shape], [y], name=fresh(f"{base}/Reshape"))]
    del graph.node[:]
    graph.node.extend(nodes)


def _batched_scans_as_loops(model):
    """``model``, or where a Scan of opset 8 is in it a copy with each such Scan rewritten as
    two Loops (:func:`_scan_loops`), which the converter upgrades; in subgraphs too."""
    import onnx

    from .loop import subgraphs

    if not any(n.op_type == "Scan" and n.domain in ("", "ai.onnx")
               for g in subgraphs(model.graph) for n in g.node):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    _rewrite_scans(copy.graph, _fresh_names(copy.graph))
    return copy


def _rewrite_scans(graph, fresh) -> None:
    """Rewrite the Scans of ``graph`` and of its subgraphs, the innermost first."""
    from .loop import attribute_graphs

    nodes = []
    for node in graph.node:
        for g in attribute_graphs(node):
            _rewrite_scans(g, fresh)
        scan = node.op_type == "Scan" and node.domain in ("", "ai.onnx")
        nodes += _scan_loops(node, fresh) if scan else [node]
    del graph.node[:]
    graph.node.extend(nodes)


def _scan_loops(node, fresh) -> list:
    """Scan-8 ``node`` as nodes of opset 8 that mean the same: a Loop over the batch (axis 0
    of the scan inputs and states) whose body takes batch entry ``b`` of each and runs a Loop
    over the sequence (axis 1 of the scan inputs), whose body gathers step ``t`` of each scan
    input (``T - 1 - t`` where ``directions`` says 1) under the name the Scan's body reads it
    by, then runs the Scan's body as it is. The inner Loop's final states and stacked scan
    outputs are the outer body's scan outputs, stacked over the batch: the Scan's outputs,
    ``[batch, ...]`` and ``[batch, sequence, ...]``. The trip counts are read from the first
    scan input's shape, which the import folds where it is static (a run-time one refuses
    the Loop, naming it). ``sequence_lens`` (every sequence its own length) is refused."""
    import onnx
    from onnx import TensorProto, helper

    from .loop import rescoped

    base = node.name or (node.output[0] if node.output else "scan")
    where = {"node": base, "op": "Scan"}
    attrs = {a.name: a for a in node.attribute}  # the checker refused any other attribute
    body, m = attrs.get("body"), attrs.get("num_scan_inputs")
    if body is None or body.type != onnx.AttributeProto.GRAPH or m is None \
            or m.type != onnx.AttributeProto.INT:
        raise ModelFileError("a Scan needs a graph attribute body and an int attribute "
                             "num_scan_inputs", **where)
    body, m = body.g, m.i
    if node.input and node.input[0]:
        raise UnsupportedModelError(
            f"sequence_lens {node.input[0]!r} is not supported: each sequence is scanned whole "
            f"(leave the input empty, or export at opset 9 or later)", **where)
    rest, outs = list(node.input[1:]), list(node.output)
    n, k = len(rest) - m, len(outs) - (len(rest) - m)
    directions = list(attrs["directions"].ints) if "directions" in attrs else [0] * max(m, 0)
    if m < 1 or n < 0 or k < 0 or "" in rest or len(body.input) != n + m \
            or len(body.output) != n + k or len(directions) != m \
            or not set(directions) <= {0, 1}:
        raise ModelFileError(
            f"a Scan of {len(rest)} state and scan input(s), {m} of them scanned "
            f"(num_scan_inputs), {len(outs)} output(s), a body of {len(body.input)} input(s) "
            f"and {len(body.output)} output(s) and directions {directions} do not fit "
            f"together (each input named, directions 0 or 1, one per scan input)", **where)
    make, nodes = helper.make_node, []

    def name(what: str) -> str:
        return fresh(f"{base}/{what}")

    def constant(what: str, value, dtype=np.int64) -> str:
        out = name(what)
        nodes.append(make("Constant", [], [out], name=name(f"{what}/Constant"),
                          value=onnx.numpy_helper.from_array(np.array(value, dtype))))
        return out

    def scalar(label: str, elem) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(label, elem, [])

    shape, batch, steps, last = name("shape"), name("batch"), name("steps"), name("last")
    keep, zero, one = constant("true", True, np.bool_), constant("zero", 0), constant("one", 1)
    nodes += [make("Shape", [rest[n]], [shape], name=name("Shape")),
              make("Gather", [shape, zero], [batch], name=name("Gather_batch")),
              make("Gather", [shape, one], [steps], name=name("Gather_steps")),
              make("Sub", [steps, one], [last], name=name("Sub_last"))]
    b, t, inner = name("b"), name("t"), []
    entries = [name(f"entry{i}") for i in range(n + m)]
    cond_in, cond_in_, cond_out, cond_out_ = (name(w) for w in ("cond", "cond_", "keep",
                                                                 "keep_"))
    steps_of = {}  # a scan input's name in the body -> its step's (it may be an outer name)
    for j, (x, reverse) in enumerate(zip(rest[n:], directions)):
        at = t
        if reverse:
            at = name(f"reversed{j}")
            inner.append(make("Sub", [last, t], [at], name=name(f"Sub_reversed{j}")))
        steps_of[body.input[n + j].name] = step = name(f"step{j}")
        inner.append(make("Gather", [entries[n + j], at], [step], name=name(f"Gather_step{j}")))
    del body.input[n:]  # read from the gathers now, from outside the body
    rescoped(body, lambda value, inside: value if inside else steps_of.get(value, value))
    true_value = onnx.numpy_helper.from_array(np.array(True))
    inner.append(make("Constant", [], [cond_out_], name=name("Constant_keep_"),
                      value=true_value))
    inner += list(body.node)
    inner_body = helper.make_graph(
        inner, name("sequence"),
        [scalar(t, TensorProto.INT64), scalar(cond_in_, TensorProto.BOOL), *body.input[:n]],
        [scalar(cond_out_, TensorProto.BOOL), *body.output], initializer=body.initializer,
        value_info=body.value_info, sparse_initializer=body.sparse_initializer)
    finals, stacked = [name(f"final{i}") for i in range(n)], [name(f"steps{i}") for i in range(k)]
    outer = [make("Gather", [x, b], [entries[i]], name=name(f"Gather_entry{i}"))
             for i, x in enumerate(rest)]
    outer += [make("Constant", [], [cond_out], name=name("Constant_keep"), value=true_value),
              make("Loop", [steps, keep, *entries[:n]], [*finals, *stacked],
                   name=name("Loop_sequence"), body=inner_body)]
    outer_body = helper.make_graph(
        outer, name("batch"), [scalar(b, TensorProto.INT64), scalar(cond_in, TensorProto.BOOL)],
        [scalar(cond_out, TensorProto.BOOL),
         *(helper.make_empty_tensor_value_info(v) for v in finals + stacked)])
    nodes.append(make("Loop", [batch, keep], [o or name(f"unused{i}") for i, o in
                                              enumerate(outs)],
                      name=node.name or name("Loop_batch"), body=outer_body))
    return nodes


def _refuse_read_dropout_masks(model, where: str, version: int) -> None:
    """An inference Dropout's mask before opset 12 is all false in onnxruntime (float zeros
    before opset 10), all true from opset 12, which the upgrade makes of it; a read one is
    refused rather than given other values than the golden vectors'. Unread, it is dropped."""
    from .loop import subgraphs

    graphs = list(subgraphs(model.graph))
    read = {name for g in graphs for node in g.node for name in node.input} | \
        {v.name for g in graphs for v in g.output}
    for g in graphs:
        for node in g.node:
            if node.op_type == "Dropout" and node.domain in ("", "ai.onnx") \
                    and len(node.output) > 1 and node.output[1] in read - {""}:
                raise UnsupportedModelError(
                    f"{where}: the mask of a Dropout of opset {version} is read: onnxruntime "
                    f"gives it all false in inference, opset 12 on all true; export at opset "
                    f"12 or later", node=node.name or node.output[0], op="Dropout")


def _interface(model) -> tuple:
    """The names and element types of the graph's inputs and outputs."""
    g = model.graph
    return tuple((v.name, v.type.tensor_type.elem_type) for v in list(g.input) + list(g.output))


def _culprit(model, reason: str):
    """The first node the converter's reason points at: by its op type, an attribute it names
    or a sparse tensor; None when it names none."""
    ops = {a or b for a, b in re.findall(r"(?:\b[Ff]or |Op ')([A-Z]\w*)|\b([A-Z]\w*) "
                                           r"(?:node|in opset)", reason)}
    attribute = set(re.findall(r"[Aa]ttribute '?([A-Za-z_]\w*)", reason))
    sparse = "sparse" in reason.lower()
    for node in model.graph.node:
        if not node.output and not node.name:
            continue
        if attribute & {a.name for a in node.attribute} or node.op_type in ops or (
                sparse and any(a.HasField("sparse_tensor") for a in node.attribute)):
            return node
    return None
