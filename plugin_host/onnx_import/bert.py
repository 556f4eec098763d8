"""com.microsoft's BERT fusions, which ``onnxruntime.transformers``' optimizer writes
(``optimize_model(..., model_type="bert")``): Attention (the self-attention block from its
input projection on; MultiHeadAttention, from the projected query, key and value, with the
optimizer's ``use_multi_head_attention``) and EmbedLayerNormalization (the three embeddings,
their sum and its LayerNormalization, and the mask's lengths), and their quantized forms, which
``quantize_dynamic`` makes of them: QAttention and QEmbedLayerNormalization. Registered in
:data:`.ops.MAPPERS` under ``com.microsoft.<op>`` on import.

Each is written back as the ONNX nodes it stands for, as onnxruntime's CPU kernel computes it,
and those are mapped as the model's own (:class:`.written.Written`), as for the fused ops
(:mod:`.fused`).

- Attention: ``qkv = input @ weights + bias`` split into Q, K and V (``qkv_hidden_sizes``, or
  three equal parts), each as ``num_heads`` heads; ``softmax(scale * Q @ K' + attention_bias +
  mask) @ V`` (added in that order, as onnxruntime does) with its heads put back side by side.
  ``scale`` is 1 / sqrt(head size) by default. The mask (``mask_index``, int32) is added as a
  bias of 0 where a key is seen and ``mask_filter_value`` (-10000 by default) where it is not,
  as onnxruntime does, so a row with every key masked is uniform, not 0. Its forms: a raw mask
  (batch, keys) or (batch, queries, keys) where a value > 0 means seen; the valid lengths
  (batch) (a key at j is seen where j < the length: right padding); or the lengths then the
  first valid positions (2 * batch) (also j >= the start: left padding). A length below 0 is
  refused when the call brings it, as onnxruntime refuses it. ``unidirectional`` hides the keys
  after each query (causal) entirely. With a ``past`` state (2, batch, heads, past length, head
  size: GPT-2's decoding cache) the past keys and values come before the new ones, query i sees
  keys up to past length + i where causal, the mask spans them all, and the ``present`` output
  is the keys and values stacked as the past was.
- MultiHeadAttention: the query (batch, sequence, hidden), the key and value (batch, keys,
  hidden), each plus its part of ``bias``, as heads; or the key and value already as heads
  (batch, heads, keys, head size), one shape, to which onnxruntime adds no bias (only the
  query's part is added then). Then as Attention, the mask's forms over the keys. Its cache:
  ``past_key`` and ``past_value`` (batch, heads, past length, head size) before the new keys and
  values, which ``present_key`` and ``present_value`` output (the new ones alone without a
  past). Refused: its packed QKV and packed KV (onnxruntime's CPU kernel does not implement
  them), ``past_sequence_length``, ``cache_indirection``, a past of run-time length, a past
  without both present outputs (onnxruntime's kernel gives nan for half the output there) or
  with value heads of another size than the key's (onnxruntime refuses it), the ``qk``
  output, ``unidirectional`` over as many new keys as queries only (onnxruntime's causal bound
  of a cross attention is neither the top-left nor the bottom-right one).
- EmbedLayerNormalization: ``LayerNormalization(word[input_ids] + position[position_ids] +
  segment[segment_ids])`` over the last axis (position_ids 0 .. sequence - 1 where absent), the
  sum also output 2 where the node has it; output 1 (``mask_index``) counts the mask's entries
  equal to 1 in each batch row (0 without a mask), as onnxruntime's kernel does. The ids are
  Embedding indices: one outside the table is refused at entry, as onnxruntime refuses it.
- QAttention: its uint8 input (a DynamicQuantizeLinear's) by its int8 or uint8 weights as
  MatMulIntegerToFloat (:mod:`.matmul_to_float`: the exact integer sum, times ``input_scale *
  weight_scale`` (one or one per column), plus the bias), then as Attention (its past state
  too).
- QEmbedLayerNormalization: its constant int8 or uint8 tables dequantized at import as
  onnxruntime's kernel does, ``float32(int32(q) - zero_point) * scale``, then as
  EmbedLayerNormalization.

Refused naming the node: Attention's and QAttention's ``past`` state without the ``present``
output (onnxruntime's kernel fails on it) or of a run-time length, ``past_sequence_length``,
``do_rotary``,
``past_present_share_buffer``, a 4-D mask (onnxruntime's CPU kernel does not implement it) and
the (3 * batch + 2) mask index; the length forms of the mask and ``unidirectional`` over a
run-time sequence length (``--dim`` fixes it), the (2 * batch) form over a run-time batch;
EmbedLayerNormalization's segment ids without a segment table, or the reverse;
QEmbedLayerNormalization's tables computed at run time.
"""

from __future__ import annotations

import numpy as np

from ..errors import ModelFileError
from .gather import checked_index
from .ops import _only, _opt, maps
from .written import Written

_MS = "com.microsoft."


# --- Attention ---------------------------------------------------------------------------------


_ATTENTION_ATTRIBUTES = {"num_heads": ..., "unidirectional": ..., "mask_filter_value": ...,
                         "scale": ..., "do_rotary": 0, "past_present_share_buffer": 0}


@maps(_MS + "Attention")
def _attention(imp, node, attrs):
    """``softmax(scale * Q @ K' + attention_bias + mask) @ V`` from ``input @ weights + bias``
    as those ONNX nodes (module doc)."""
    _only(imp, attrs, {**_ATTENTION_ATTRIBUTES, "qkv_hidden_sizes": ...,
                       "rotary_embedding_dim": ...})
    _no_cache(imp, node, {6: "past_sequence_length"}, {})
    if imp.type_of(node.input[0]).dtype != "float32":
        raise imp.unsupported(f"input of dtype {imp.type_of(node.input[0]).dtype}: float32 is "
                              f"supported")
    heads, sizes = _heads_and_sizes(imp, node, attrs)
    w = Written(imp, node)
    qkv = w.add("MatMul", [node.input[0], node.input[1]], "qkv")
    if _opt(node, 2):
        qkv = w.add("Add", [qkv, node.input[2]], "qkv_bias")
    _attend_packed(imp, node, attrs, w, qkv, heads, sizes, _opt(node, 3), _opt(node, 5),
                   _opt(node, 4))


@maps(_MS + "QAttention")
def _q_attention(imp, node, attrs):
    """Attention whose input projection is quantized: ``input`` (uint8, a
    DynamicQuantizeLinear's) by the int8 or uint8 ``weight`` as MatMulIntegerToFloat computes
    it (:mod:`.matmul_to_float`: the exact integer sum, times ``input_scale * weight_scale``,
    plus the bias), then as Attention."""
    _only(imp, attrs, _ATTENTION_ATTRIBUTES)
    heads, sizes = _heads_and_sizes(imp, node, attrs)
    w = Written(imp, node)
    ins = list(node.input) + [""] * 8
    qkv = w.add("MatMulIntegerToFloat", [ins[0], ins[1], ins[3], ins[4], ins[6], ins[7], ins[2]],
                "qkv", domain="com.microsoft")
    _attend_packed(imp, node, attrs, w, qkv, heads, sizes, _opt(node, 5), None, _opt(node, 8))


def _no_cache(imp, node, inputs: dict, outputs: dict | None = None) -> None:
    """Refuse the incremental decoding cache: the ``inputs`` and ``outputs`` (index: what; the
    present output by default)."""
    for i, what in inputs.items():
        if _opt(node, i):
            raise imp.unsupported(f"{what} (input {i}) is not supported: the cache of "
                                  f"incremental decoding")
    for i, what in (outputs if outputs is not None else {1: "the present output"}).items():
        if len(node.output) > i and node.output[i]:
            raise imp.unsupported(f"{what} ({i}) is not supported: the cache of incremental "
                                  f"decoding")


@maps(_MS + "MultiHeadAttention")
def _multi_head_attention(imp, node, attrs):
    """The attention of a projected query, key and value (onnxruntime.transformers' optimizer
    writes it with ``use_multi_head_attention``): each plus its part of ``bias``, as heads;
    then as Attention, the mask over the keys (module doc)."""
    _only(imp, attrs, {"num_heads": ..., "unidirectional": ..., "mask_filter_value": ...,
                       "scale": ...})
    _no_cache(imp, node, {8: "past_sequence_length", 9: "cache_indirection"}, {})
    if len(node.output) > 3 and node.output[3]:
        raise imp.unsupported("the qk output (3) is not supported")
    heads = _num_heads(imp, node, attrs)
    query, key, value = node.input[0], _opt(node, 1), _opt(node, 2)
    shapes = [imp.type_of(t).shape if t else None for t in (query, key, value)]
    if len(shapes[0]) == 5 or shapes[1] is not None and len(shapes[1]) == 5:
        raise imp.unsupported(f"packed {'QKV' if len(shapes[0]) == 5 else 'KV'} (rank 5): "
                              f"onnxruntime's CPU kernel does not implement it")
    if imp.type_of(query).dtype != "float32":
        raise imp.unsupported(f"query of dtype {imp.type_of(query).dtype}: float32 is "
                              f"supported")
    if len(shapes[0]) != 3 or None in shapes or len(shapes[1]) not in (3, 4) or \
            len(shapes[2]) != len(shapes[1]):
        raise ModelFileError(f"query, key and value of shapes {shapes}: a query (batch, "
                             f"sequence, hidden) and a key and value both (batch, keys, "
                             f"hidden) or both (batch, heads, keys, head size)",
                             node=imp.node_name, op=node.op_type)
    hidden, in_heads = shapes[0][2], len(shapes[1]) == 4
    if in_heads and shapes[1] != shapes[2]:
        raise ModelFileError(f"key and value of shapes {shapes[1]} and {shapes[2]}: as (batch, "
                             f"heads, keys, head size) they must have one shape, as onnxruntime "
                             f"requires", node=imp.node_name, op=node.op_type)
    fixed = [shapes[0][2]] + ([shapes[1][1], shapes[1][3]] if in_heads else [shapes[1][2],
                                                                             shapes[2][2]])
    if not all(type(d) is int for d in fixed):
        raise imp.unsupported(f"query, key and value of shapes {shapes}: their hidden sizes "
                              f"and heads must be static")
    v_hidden = shapes[2][1] * shapes[2][3] if in_heads else shapes[2][2]
    k_hidden = shapes[1][1] * shapes[1][3] if in_heads else shapes[1][2]
    if any(d % heads for d in (hidden, v_hidden)) or k_hidden != hidden \
            or in_heads and shapes[1][1] != heads:
        raise ModelFileError(f"query, key and value of shapes {shapes} do not hold {heads} "
                             f"heads of one Q and K head size", node=imp.node_name,
                             op=node.op_type)
    w = Written(imp, node)
    parts = {"q": query, "k": key, "v": value}
    if _opt(node, 3):  # onnxruntime adds K's and V's parts only to a key and value of rank 3
        sizes = [hidden, hidden, v_hidden]
        split = [f"{w.out}/bias_{part}" for part in "qkv"]
        w.nodes.append(w.helper.make_node(
            "Split", [node.input[3], w.const("bias_split", np.array(sizes, np.int64))], split,
            name=f"{w.name}/bias_split", axis=0))
        for (part, x), b in zip(list(parts.items())[:1 if in_heads else 3], split):
            parts[part] = w.add("Add", [x, b], f"{part}_bias")
    q = _to_heads(w, parts["q"], heads, hidden // heads, "q")
    if in_heads:
        k, v = parts["k"], parts["v"]
    else:
        k = _to_heads(w, parts["k"], heads, hidden // heads, "k_rows")
        v = _to_heads(w, parts["v"], heads, v_hidden // heads, "v")
    past = _mha_past(imp, node, shapes[0][0], heads, hidden // heads, v_hidden // heads)
    if past:
        k = w.add("Concat", [node.input[6], k], "keys", axis=2)
        v = w.add("Concat", [node.input[7], v], "values", axis=2)
    for i, (x, part) in enumerate(((k, "present_key"), (v, "present_value")), 1):
        if len(node.output) > i and node.output[i]:
            w.add("Identity", [x], part, node.output[i])
    k = w.add("Transpose", [k], "k_t", perm=[0, 1, 3, 2])
    keys = shapes[1][2 if in_heads else 1]
    _attend(imp, node, attrs, w, (q, k, v), hidden // heads,
            (shapes[0][0], shapes[0][1], keys + past if type(keys) is int else keys),
            _opt(node, 4), _opt(node, 5), past=past)


def _mha_past(imp, node, batch, heads: int, size: int, v_size: int) -> int:
    """MultiHeadAttention's past length (0 without past_key and past_value), their shapes
    checked: (batch, heads, past length, head size), the length static."""
    key, value = _opt(node, 6), _opt(node, 7)
    if not key and not value:
        return 0
    if not key or not value:
        raise ModelFileError("past_key and past_value must be given together, as onnxruntime "
                             "requires", node=imp.node_name, op=node.op_type)
    if not all(len(node.output) > i and node.output[i] for i in (1, 2)):
        raise imp.unsupported("past_key and past_value without the present_key and "
                              "present_value outputs: onnxruntime's kernel gives nan for half "
                              "of the output there")
    if v_size != size:
        raise imp.unsupported(f"past_key and past_value with value heads of size {v_size} and "
                              f"key heads of {size}: onnxruntime requires one head size")
    shapes = [list(imp.type_of(t).shape) for t in (key, value)]
    for shape, n, what in zip(shapes, (size, v_size), ("past_key", "past_value")):
        if len(shape) != 4 or shape[:2] != [batch, heads] or shape[3] != n or \
                shape[2] != shapes[0][2]:
            raise ModelFileError(f"{what} of shape {shape}: needs ({batch!r}, {heads}, past "
                                 f"length, {n}), one length for both", node=imp.node_name,
                                 op=node.op_type)
    if type(shapes[0][2]) is not int:
        raise imp.unsupported(f"past_key and past_value of the run-time length "
                              f"{shapes[0][2]!r}: the keys they add must be counted at import")
    return shapes[0][2]


def _attend_packed(imp, node, attrs, w: Written, qkv: str, heads: int, sizes: list,
                   mask: str | None, attention_bias: str | None, past: str | None) -> None:
    """Attention's and QAttention's: the projected ``qkv`` (batch, sequence, Q + K + V hidden)
    split into Q, K and V, then :func:`_attend`; with ``past`` (2, batch, heads, past length,
    head size), the past keys and values before the new ones, and the present output (index
    1) those keys and values stacked as the past was."""
    x_shape = imp.type_of(node.input[0]).shape
    if len(x_shape) != 3:
        raise ModelFileError(f"input {node.input[0]!r} of shape {x_shape} must be (batch, "
                             f"sequence, hidden)", node=imp.node_name, op=node.op_type)
    split = [f"{w.out}/{part}" for part in "qkv"]
    w.nodes.append(w.helper.make_node("Split", [qkv, w.const("split", np.array(sizes, np.int64))],
                                      split, name=f"{w.name}/split", axis=2))
    present = node.output[1] if len(node.output) > 1 and node.output[1] else None
    if past is None and present is None:
        q, k, v = (_to_heads(w, t, heads, size // heads, part)
                   for t, size, part in zip(split, sizes, "qkv"))
        dims = (x_shape[0], x_shape[1], x_shape[1])  # self-attention: as many keys as queries
        _attend(imp, node, attrs, w, (q, k, v), sizes[0] // heads, dims, mask, attention_bias)
        return
    size = sizes[0] // heads
    if past and not present:
        raise imp.unsupported("a past state without the present output (1): onnxruntime's "
                              "kernel fails on it")
    gone = _past_length(imp, node, past, x_shape[0], heads, size, sizes) if past else 0
    q, k, v = (_to_heads(w, t, heads, n // heads, part)
               for t, n, part in zip(split, sizes, ("q", "k_rows", "v")))
    if past:
        k = w.add("Concat", [w.add("Gather", [past, w.const("first", np.int64(0))], "past_k",
                                   axis=0), k], "keys", axis=2)
        v = w.add("Concat", [w.add("Gather", [past, w.const("second", np.int64(1))], "past_v",
                                   axis=0), v], "values", axis=2)
    if present:
        w.add("Concat", [w.with_axes("Unsqueeze", k, [0], "present_k"),
                         w.with_axes("Unsqueeze", v, [0], "present_v")], "present", present,
              axis=0)
    k = w.add("Transpose", [k], "k_t", perm=[0, 1, 3, 2])
    keys = x_shape[1] + gone if type(x_shape[1]) is int else x_shape[1]
    _attend(imp, node, attrs, w, (q, k, v), size, (x_shape[0], x_shape[1], keys), mask,
            attention_bias, past=gone)


def _past_length(imp, node, past: str, batch, heads: int, size: int, sizes: list) -> int:
    """The past's length, checked: (2, batch, heads, length, head size), length static."""
    shape = list(imp.type_of(past).shape)
    if len(shape) != 5 or shape[0] != 2 or shape[2] != heads or shape[4] != size or \
            shape[1] != batch:
        raise ModelFileError(f"past {past!r} of shape {shape}: needs (2, {batch!r}, {heads}, "
                             f"past length, {size})", node=imp.node_name, op=node.op_type)
    if sizes[2] != sizes[0]:
        raise imp.unsupported(f"a past state with qkv_hidden_sizes {sizes}: onnxruntime keeps "
                              f"K and V of one head size in it")
    if type(shape[3]) is not int:
        raise imp.unsupported(f"past {past!r} of the run-time length {shape[3]!r}: the keys "
                              f"it adds must be counted at import")
    return shape[3]


def _to_heads(w: Written, x: str, heads: int, size: int, part: str) -> str:
    """(batch, sequence, heads * size) as (batch, heads, sequence, size); K as (batch, heads,
    size, sequence), ready for Q @ K'."""
    x = w.reshape(x, [0, 0, heads, size], f"{part}_heads")
    return w.add("Transpose", [x], f"{part}_t", perm=[0, 2, 3, 1] if part == "k" else
                 [0, 2, 1, 3])


def _attend(imp, node, attrs, w: Written, qkv: tuple, head_size: int, dims: tuple,
            mask: str | None, attention_bias: str | None, *, past: int = 0) -> None:
    """The attention of Q (batch, heads, queries, size), K' (batch, heads, size, keys) and V
    (batch, heads, keys, V's size) into the node's output, as onnxruntime's CPU kernel computes
    it (module doc); ``dims``: (batch, queries, keys), the first ``past`` keys a past state's
    (query i then sees keys up to past + i where causal)."""
    causal = attrs.get("unidirectional", 0)
    if causal not in (0, 1):
        raise ModelFileError(f"attribute unidirectional={causal!r} must be 0 or 1",
                             node=imp.node_name, op=node.op_type)
    filler = float(attrs.get("mask_filter_value", -10000.0))
    batch, seq, keys = dims
    run_time = [d for d in (seq, keys) if type(d) is not int]
    if (causal or (mask and len(imp.type_of(mask).shape) == 1)) and run_time:
        raise imp.unsupported(f"{'unidirectional' if causal else 'a mask index of lengths'} "
                              f"over a run-time sequence length {run_time[0]!r}")
    if causal and seq + past != keys:
        raise imp.unsupported(f"unidirectional over {seq} queries and {keys} keys: "
                              f"onnxruntime's causal bound of a cross attention is neither the "
                              f"top-left nor the bottom-right one")
    q, k, v = qkv
    scale = attrs.get("scale", 1.0 / np.sqrt(np.float32(head_size)))
    scores = w.add("MatMul", [q, k], "qk")
    scores = w.add("Mul", [scores, w.const("scale", np.float32(scale))], "scaled")
    bias = _mask_bias(imp, node, w, mask, filler, batch, keys) if mask else None
    if causal:
        hidden = np.triu(np.full((seq, keys), -np.inf, np.float32), past + 1)
        causal_bias = w.const("causal", hidden)
        bias = causal_bias if bias is None else w.add("Add", [bias, causal_bias], "causal_bias")
    if attention_bias:  # onnxruntime's order: the attention bias, then the mask
        scores = w.add("Add", [scores, attention_bias], "attention_bias")
    if bias is not None:
        scores = w.add("Add", [scores, bias], "masked")
    weights = w.add("Softmax", [scores], "softmax", axis=3)
    out = w.add("MatMul", [weights, v], "pv")
    out = w.add("Transpose", [out], "y_t", perm=[0, 2, 1, 3])
    w.reshape(out, [0, 0, -1], "y", out=node.output[0])
    w.inline()


def _num_heads(imp, node, attrs) -> int:
    heads = attrs.get("num_heads")
    if type(heads) is not int or heads < 1:
        raise ModelFileError(f"attribute num_heads={heads!r} must be a positive number of "
                             f"heads", node=imp.node_name, op=node.op_type)
    return heads


def _heads_and_sizes(imp, node, attrs) -> tuple[int, list[int]]:
    """``num_heads`` and the hidden sizes of Q, K and V, checked against the weights."""
    heads = _num_heads(imp, node, attrs)
    w_shape = imp.type_of(node.input[1]).shape
    if len(w_shape) != 2 or type(w_shape[1]) is not int:
        raise ModelFileError(f"weights {node.input[1]!r} of shape {w_shape} must be (input "
                             f"hidden, Q + K + V hidden) with a static second dim",
                             node=imp.node_name, op=node.op_type)
    total = w_shape[1]
    sizes = list(attrs.get("qkv_hidden_sizes", []))
    if not sizes:
        if total % 3:
            raise ModelFileError(f"weights of {total} columns do not split into equal Q, K "
                                 f"and V (give qkv_hidden_sizes)", node=imp.node_name,
                                 op=node.op_type)
        sizes = [total // 3] * 3
    if len(sizes) != 3 or sum(sizes) != total or sizes[0] != sizes[1] or any(
            type(s) is not int or s < 1 or s % heads for s in sizes):
        raise ModelFileError(f"qkv_hidden_sizes {sizes} must be three positive multiples of "
                             f"num_heads={heads}, Q's equal to K's, summing to the weights' "
                             f"{total} columns", node=imp.node_name, op=node.op_type)
    return heads, sizes


def _mask_bias(imp, node, w: Written, mask: str, filler: float, batch, seq) -> str:
    """The mask as a bias to add to the scores of ``seq`` keys, broadcasting over the heads
    (module doc)."""
    ttype = imp.type_of(mask)
    if ttype.dtype != "int32":
        raise ModelFileError(f"mask_index {mask!r} of dtype {ttype.dtype} must be int32",
                             node=imp.node_name, op=node.op_type)
    rank, shape = len(ttype.shape), ttype.shape
    zero, hidden = w.const("seen", np.float32(0.0)), w.const("filler", np.float32(filler))
    if rank in (2, 3):  # a raw mask: > 0 seen
        seen = w.add("Greater", [mask, w.const("zero", np.int32(0))], "seen")
        bias = w.add("Where", [seen, zero, hidden], "mask_bias")
        return w.with_axes("Unsqueeze", bias, [1, 2] if rank == 2 else [1], "mask_heads")
    if rank != 1:
        raise imp.unsupported(f"a mask of rank {rank} (shape {shape}) is not supported: "
                              f"onnxruntime's CPU kernel takes a raw mask of rank 2 or 3, or "
                              f"lengths of rank 1")
    starts = type(batch) is int and shape[0] == 2 * batch
    if shape[0] != batch and not starts:
        raise imp.unsupported(f"a mask index of shape {shape} for a batch of {batch!r}: "
                              f"(batch) lengths, or (2 * batch) lengths and starts with a "
                              f"static batch, are supported")
    ends = mask
    if starts:
        ends = w.add("Gather", [mask, w.const("ends", np.arange(batch, dtype=np.int64))],
                     "ends", axis=0)
    ends = w.add("Cast", [ends], "ends_int64", to=7)
    ends = w.add("Min", [ends, w.const("longest", np.array([seq], np.int64))], "ends_capped")
    w.inline()  # a negative length refused as the call brings it, as onnxruntime does
    checked = checked_index(imp, imp.tensor(ends), seq + 1, "lengths", "lengths_checked")
    imp.alias(f"{w.out}/ends_checked", checked)
    positions = w.const("positions", np.arange(seq, dtype=np.int64)[None])
    ends = w.reshape(f"{w.out}/ends_checked", [-1, 1], "ends_column")
    seen = w.add("Less", [positions, ends], "seen")
    if starts:
        starts = w.add("Gather", [mask, w.const("starts", np.arange(batch, 2 * batch,
                                                                    dtype=np.int64))],
                       "starts", axis=0)
        starts = w.add("Cast", [starts], "starts_int64", to=7)
        starts = w.reshape(starts, [-1, 1], "starts_column")
        started = w.add("Not", [w.add("Less", [positions, starts], "before")], "started")
        seen = w.add("And", [seen, started], "seen_span")
    bias = w.add("Where", [seen, zero, hidden], "mask_bias")
    return w.reshape(bias, [-1, 1, 1, seq], "mask_heads")


# --- EmbedLayerNormalization -------------------------------------------------------------------


@maps(_MS + "EmbedLayerNormalization")
def _embed_layer_norm(imp, node, attrs):
    """``LayerNormalization(word[ids] + position[positions] + segment[segments])`` and the
    mask's counts as those ONNX nodes (module doc)."""
    _only(imp, attrs, {"epsilon": ..., "mask_index_type": ...})
    ids, segments, word, position = node.input[0], _opt(node, 1), node.input[2], node.input[3]
    segment_table, gamma, beta = _opt(node, 4), node.input[5], node.input[6]
    mask, positions = _opt(node, 7), _opt(node, 8)
    if (segments is None) != (segment_table is None):
        raise ModelFileError("segment_ids and segment_embedding must be given together",
                             node=imp.node_name, op=node.op_type)
    ids_shape = imp.type_of(ids).shape
    if len(ids_shape) != 2:
        raise ModelFileError(f"input_ids {ids!r} of shape {ids_shape} must be (batch, "
                             f"sequence)", node=imp.node_name, op=node.op_type)
    for what, index, table in (("input_ids", ids, word), ("segment_ids", segments, segment_table),
                               ("position_ids", positions, position)):
        _constant_indices_in_range(imp, node, what, index, table)
    outs = list(node.output) + ["", ""]
    w = Written(imp, node)
    total = w.add("Gather", [word, ids], "word")
    if positions is None and type(ids_shape[1]) is int:
        positions = w.const("positions", np.arange(ids_shape[1], dtype=np.int64))
    elif positions is None:
        positions = w.add("Range", [w.const("first", np.int64(0)), w.add(
            "Gather", [w.add("Shape", [ids], "ids_shape"), w.const("seq_axis", np.int64(1))],
            "sequence"), w.const("step", np.int64(1))], "positions")
    total = w.add("Add", [total, w.add("Gather", [position, positions], "position")],
                  "word_position")
    if segments is not None:
        total = w.add("Add", [total, w.add("Gather", [segment_table, segments], "segment")],
                      "embedding_sum", out=outs[2] or None)
    elif outs[2]:
        w.add("Identity", [total], "embedding_sum", out=outs[2])
    w.add("LayerNormalization", [total, gamma, beta], "norm", out=node.output[0], axis=-1,
          epsilon=float(attrs.get("epsilon", 1e-12)))
    if outs[1]:
        if mask is None and type(ids_shape[0]) is int:  # onnxruntime's kernel gives zeros
            w.add("Identity", [w.const("no_mask", np.zeros(ids_shape[0], np.int32))],
                  "mask_index", out=outs[1])
        elif mask is None:
            batch = w.add("Slice", [w.add("Shape", [ids], "batch_shape"),
                                    w.const("from", np.array([0], np.int64)),
                                    w.const("to", np.array([1], np.int64))], "batch")
            w.add("ConstantOfShape", [batch], "mask_index", out=outs[1],
                  value=w.helper.make_tensor("zero", 6, [1], [0]))
        else:
            ones = w.add("Equal", [mask, w.const("one", np.int32(1))], "mask_ones")
            ones = w.add("Cast", [ones], "mask_counted", to=6)
            w.with_axes("ReduceSum", ones, [1], "mask_index", out=outs[1], keepdims=0)
    w.inline()


def _constant_indices_in_range(imp, node, what: str, index: str | None, table: str) -> None:
    """A constant ``index`` (the positions, ``arange`` of a fixed length, as the exporter
    writes them) checked against ``table``'s rows at import: onnxruntime's kernel refuses an
    id outside [0, rows), where a Gather would count a negative one from the end."""
    if index is None or not imp.is_const(index):
        return
    values, rows = imp.const(index), imp.type_of(table).shape[0]
    bad = (values < 0) | (values >= rows) if type(rows) is int else np.zeros(values.shape, bool)
    if bad.any():
        at = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ModelFileError(f"{what} value {int(values[at])} at {at} is outside [0, {rows}), "
                             f"the rows of {table!r}: onnxruntime's kernel refuses it",
                             node=imp.node_name, op=node.op_type)


#: QEmbedLayerNormalization's quantized tables: (table, scale, zero point) input indices
_Q_TABLES = {"word_embedding": (2, 8, 13), "position_embedding": (3, 9, 14),
             "segment_embedding": (4, 10, 15), "gamma": (5, 11, 16), "beta": (6, 12, 17)}


@maps(_MS + "QEmbedLayerNormalization")
def _q_embed_layer_norm(imp, node, attrs):
    """EmbedLayerNormalization of int8 or uint8 tables: each dequantized at import as
    onnxruntime's kernel does, ``float32(int32(q) - zero_point) * scale``, then as
    EmbedLayerNormalization (positions 0 .. sequence - 1)."""
    _only(imp, attrs, {"epsilon": ...})
    ins = list(node.input) + [""] * 18
    segment = [ins[i] for i in (1, *_Q_TABLES["segment_embedding"])]
    if any(segment) and not all(segment):
        raise ModelFileError("segment_ids, segment_embedding, its scale and its zero point "
                             "must all be given or all be omitted", node=imp.node_name,
                             op=node.op_type)
    tables, w = {}, Written(imp, node)
    for what, (table, scale, zero) in _Q_TABLES.items():
        if not ins[table]:
            continue
        for i, part in ((table, ""), (scale, " scale"), (zero, " zero point")):
            if not imp.is_const(ins[i]):
                raise imp.unsupported(f"{what}{part} {ins[i]!r} is computed at run time: "
                                      f"the quantized tables must be constants")
        q, sc, zp = (imp.const(ins[i]) for i in (table, scale, zero))
        if q.dtype not in (np.int8, np.uint8) or zp.dtype != q.dtype or sc.dtype != np.float32 \
                or sc.size != 1 or zp.size != 1:
            raise ModelFileError(f"{what}: a {q.dtype} table with a {sc.dtype} scale of "
                                 f"{sc.size} values and a {zp.dtype} zero point of {zp.size}: "
                                 f"an int8 or uint8 table, a float32 scale and a zero point of "
                                 f"its dtype, one value each, as onnxruntime's kernel takes",
                                 node=imp.node_name, op=node.op_type)
        dequantized = (q.astype(np.int32) - np.int32(zp.reshape(()))).astype(np.float32) * \
            sc.reshape(())
        tables[what] = w.const(what, dequantized.astype(np.float32))
    w.nodes.append(w.helper.make_node(
        "EmbedLayerNormalization",
        [ins[0], ins[1], tables["word_embedding"], tables["position_embedding"],
         tables.get("segment_embedding", ""), tables["gamma"], tables["beta"], ins[7]],
        list(node.output)[:2], name=f"{w.name}/float", domain="com.microsoft",
        epsilon=float(attrs.get("epsilon", 1e-12))))
    w.inline()
