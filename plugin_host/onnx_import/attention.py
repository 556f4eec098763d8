"""ONNX's Attention (opsets 23 to 25): torch's dynamo exporter writes
``scaled_dot_product_attention`` (and so ``nn.MultiheadAttention`` and
``nn.TransformerEncoderLayer``) as one Attention node from opset 23. Registered in
:data:`.ops.MAPPERS` on import.

The node becomes the ops it is made of, as the ONNX reference computes it: Q, K and V of rank 4
(batch, heads, sequence, head size), or of rank 3 with ``q_num_heads`` and ``kv_num_heads``
(``unflatten`` and ``transpose``); the cached keys and values before K and V (``concat``, also
the ``present_*`` outputs); K's and V's heads repeated for grouped-query attention (``tile``);
``matmul`` of Q by K transposed, times ``scale`` (1 / sqrt(head size) by default); the softcap
(``tanh``); the mask added as a bias (a bool one as 0 / -inf through ``where``) and the bias
of the keys each query sees: the query at i sits at p = i + the cached length and sees key j
where j <= p (causal, aligned to the bottom right of the cache) and p - left <= j <= p + right
(opset 25's window), a constant of the static lengths; with opset 24's ``nonpad_kv_seqlen``
(L valid keys per batch entry in a cache that is K and V themselves) computed when the call
runs: j < L, and p = i + L - queries; ``softmax`` over the keys, a row left no key to attend
set to 0 (``amax`` of the bias, ``where``), as onnxruntime and the spec have it; ``matmul`` by
V. The ``qk_matmul_output`` output is the scores as ``qk_matmul_output_mode`` says: the
scaled product (0), after the softcap (1), after the mask and the bias of the keys seen (2;
at opsets 23 and 24 float32's lowest where a bool mask or that bias hides a key, as
onnxruntime has it), or the softmax with its empty rows set to 0 (3). The softmax is float32
whatever ``softmax_precision`` names, as onnxruntime computes it. Refused naming the node: a
causal bias or a window over a run-time sequence length (``--dim`` fixes it), heads that do
not divide, and ``nonpad_kv_seqlen`` with a ``past_key``.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ModelFileError
from .gather import checked_index
from .ops import _only, _opt, maps
from .pads import constant_pad

_FLOAT = 1  # ONNX TensorProto.FLOAT
#: softmax_precision's float types (TensorProto's float32, float16, float64, bfloat16); the
#: softmax is float32 whichever, as onnxruntime computes it (its outputs are the same).
_FLOATS = (_FLOAT, 10, 11, 16)
#: In qk_matmul_output_mode 2, where a bool mask, the causal bias or nonpad_kv_seqlen hides a
#: key, onnxruntime's Attention of opsets 23 and 24 writes float32's lowest (whatever a float
#: mask holds there), that of opset 25 the spec's -inf.
_SPEC_HIDDEN = 25


@maps("Attention")
def _attention(imp, node, attrs):
    _only(imp, attrs, {"is_causal": ..., "kv_num_heads": ..., "q_num_heads": ...,
                       "qk_matmul_output_mode": ..., "scale": ..., "softcap": ...,
                       "softmax_precision": ..., "left_window_size": ...,
                       "right_window_size": ...})
    qk_output = node.output[3] if len(node.output) > 3 and node.output[3] else None
    mode = attrs.get("qk_matmul_output_mode", 0)
    if mode not in (0, 1, 2, 3):
        raise ModelFileError(f"attribute qk_matmul_output_mode={mode!r} must be 0 (the scaled "
                             f"QK product), 1 (after the softcap), 2 (after the mask) or 3 "
                             f"(after the softmax)")
    precision = attrs.get("softmax_precision", _FLOAT)
    if precision not in _FLOATS:
        raise ModelFileError(f"attribute softmax_precision={precision!r} must name a float type "
                             f"(1 float32, 10 float16, 11 float64, 16 bfloat16)")
    causal = attrs.get("is_causal", 0)
    if causal not in (0, 1):
        raise imp.unsupported(f"attribute is_causal={causal!r} must be 0 or 1")
    window = tuple(attrs.get(side, -1) for side in ("left_window_size", "right_window_size"))
    for side, size in zip(("left_window_size", "right_window_size"), window):
        if type(size) is not int or size < -1:
            raise ModelFileError(f"attribute {side}={size!r} must be -1 (unbounded) or a "
                                 f"number of positions >= 0")
    q_in, k_in, v_in = node.input[:3]
    mask, past_k, past_v = _opt(node, 3), _opt(node, 4), _opt(node, 5)
    nonpad = _opt(node, 6)
    if (past_k is None) != (past_v is None):
        raise imp.unsupported("past_key and past_value must be given together")
    if nonpad is not None and past_k is not None:
        raise ModelFileError("nonpad_kv_seqlen cannot be combined with past_key and "
                             "past_value (the cache is then K and V themselves), as the spec "
                             "and onnxruntime have it")
    ranks = [len(imp.type_of(t).shape) for t in (q_in, k_in, v_in)]
    rank = ranks[0]
    if rank not in (3, 4) or len(set(ranks)) > 1:
        raise imp.unsupported(f"Q, K and V of ranks {ranks}: all 3 or all 4")
    if imp.type_of(q_in).dtype != "float32":
        raise imp.unsupported(f"Q of dtype {imp.type_of(q_in).dtype}: float32 is supported")
    heads = (attrs.get("q_num_heads"), attrs.get("kv_num_heads"))
    if rank == 3 and None in heads:
        raise imp.unsupported("Q, K and V of rank 3 need q_num_heads and kv_num_heads")
    q = _heads(imp, q_in, heads[0], "q") if rank == 3 else imp.tensor(q_in)
    k = _heads(imp, k_in, heads[1], "k") if rank == 3 else imp.tensor(k_in)
    v = _heads(imp, v_in, heads[1], "v") if rank == 3 else imp.tensor(v_in)
    present = [node.output[i] or None if len(node.output) > i else None for i in (1, 2)]
    if past_k is not None:
        [k] = imp.emit("concat", [imp.tensor(past_k), k], [present[0]], {"axis": 2},
                       suffix="/present_key")
        [v] = imp.emit("concat", [imp.tensor(past_v), v], [present[1]], {"axis": 2},
                       suffix="/present_value")
    else:
        for name, t in zip(present, (k, v)):
            if name:
                imp.alias(name, t)
    q_heads, kv_heads = imp.types[q].shape[1], imp.types[k].shape[1]
    if q_heads != kv_heads:
        k, v = (_repeat_heads(imp, t, q_heads, kv_heads, what) for t, what in
                ((k, "k"), (v, "v")))
    head_size = imp.types[q].shape[3]
    if type(head_size) is not int or head_size < 1:
        raise imp.unsupported(f"Q's head size {head_size!r} must be static")
    scale = attrs.get("scale", 1.0 / math.sqrt(head_size))
    [kt] = imp.emit("transpose", [k], [None], {"perm": [0, 1, 3, 2]}, suffix="/k_t")
    [scores] = imp.emit("matmul", [q, kt], [None], suffix="/qk")
    [scores] = imp.emit("mul", [scores, _const(imp, scale, "scale")], [None], suffix="/scaled")
    captured = {0: scores}
    softcap = attrs.get("softcap", 0.0)
    if softcap > 0:
        [scores] = imp.emit("div", [scores, _const(imp, softcap, "softcap")], [None],
                            suffix="/capped")
        [scores] = imp.emit("tanh", [scores], [None], suffix="/tanh")
        [scores] = imp.emit("mul", [scores, _const(imp, softcap, "softcap")], [None],
                            suffix="/softcap")
    captured[1] = scores
    bias, bool_mask = None, mask is not None and imp.type_of(mask).dtype == "bool"
    if mask is not None:
        if not imp.type_of(mask).shape:
            raise imp.unsupported(f"attn_mask {mask!r} is 0-d: neither onnxruntime's kernel "
                                  f"nor the op's function body (its Pad of the last axis) "
                                  f"takes one")
        bias = imp.tensor(mask)
        if bool_mask:
            [bias] = imp.emit("where", [bias, _const(imp, 0.0, "attend"),
                                        _const(imp, -np.inf, "masked")], [None],
                              suffix="/mask_bias")
        bias = _mask_to_every_key(imp, bias, imp.types[k].shape[2])
    if nonpad is not None:
        seen, empty_rows = _seen_run_time(imp, scores, nonpad, causal, window), True
    elif causal or window != (-1, -1):
        seen, empty_rows = _seen(imp, scores, past_k, causal, window)
    else:
        seen, empty_rows = None, False
    if seen is not None:
        bias = seen if bias is None else imp.emit("add", [bias, seen], [None],
                                                  suffix="/bias")[0]
    if bias is not None:
        [scores] = imp.emit("add", [scores, bias], [None], suffix="/masked")
    captured[2] = scores
    hiding = bias if bool_mask else seen  # -inf where a key is hidden, not by a float mask
    if qk_output and mode == 2 and hiding is not None and imp.opset < _SPEC_HIDDEN:
        hidden = imp.step("equal", [hiding, _const(imp, -np.inf, "masked")], "hidden")
        captured[2] = imp.step("where", [hidden, _const(imp, np.finfo(np.float32).min,
                                                        "lowest"), scores], "qk_hidden")
    [weights] = imp.emit("softmax", [scores], [None], {"axis": -1}, suffix="/softmax")
    if mask is not None or empty_rows:  # a row left no key to attend is 0, as onnxruntime
        rank_b = len(imp.types[bias].shape)
        [top] = imp.emit("amax", [bias], [None], {"axes": [rank_b - 1], "keepdim": True},
                         suffix="/row_max")
        [none] = imp.emit("equal", [top, _const(imp, -np.inf, "masked")], [None],
                          suffix="/row_masked")
        [weights] = imp.emit("where", [none, _const(imp, 0.0, "attend"), weights], [None],
                             suffix="/row_zero")
    if qk_output:
        imp.alias(qk_output, weights if mode == 3 else captured[mode])
    y = node.output[0]
    [out] = imp.emit("matmul", [weights, v], [None if rank == 3 else y], suffix="/pv"
                     if rank == 3 else "")
    if rank == 3:
        [out] = imp.emit("transpose", [out], [None], {"perm": [0, 2, 1, 3]}, suffix="/y_t")
        imp.emit("flatten", [out], [y], {"start_dim": 2, "end_dim": 3})


def _const(imp, value: float, name: str) -> str:
    return imp.add_constant(np.asarray(value, np.float32), f"{imp.node_name}.{name}")


def _heads(imp, x: str, heads: int, what: str) -> str:
    """(batch, sequence, heads * size) as (batch, heads, sequence, size)."""
    hidden = imp.type_of(x).shape[2]
    if type(heads) is not int or heads < 1 or type(hidden) is not int or hidden % heads:
        raise imp.unsupported(f"{what.upper()}'s hidden size {hidden!r} is not a multiple of "
                              f"{heads!r} heads")
    [split] = imp.emit("unflatten", [imp.tensor(x)], [None],
                       {"axis": 2, "sizes": [heads, hidden // heads]}, suffix=f"/{what}_heads")
    return imp.emit("transpose", [split], [None], {"perm": [0, 2, 1, 3]},
                    suffix=f"/{what}_t")[0]


def _repeat_heads(imp, x: str, q_heads, kv_heads, what: str) -> str:
    """Each of K's or V's heads repeated for the Q heads it serves: [h0, h0, h1, h1, ...]."""
    if type(q_heads) is not int or type(kv_heads) is not int or kv_heads < 1 \
            or q_heads % kv_heads:
        raise imp.unsupported(f"{q_heads!r} query heads are not a multiple of {kv_heads!r} "
                              f"key and value heads")
    repeats = q_heads // kv_heads
    [x] = imp.emit("unflatten", [x], [None], {"axis": 1, "sizes": [kv_heads, 1]},
                   suffix=f"/{what}_group")
    [x] = imp.emit("tile", [x], [None], {"repeats": [1, 1, repeats, 1, 1]},
                   suffix=f"/{what}_repeat")
    return imp.emit("flatten", [x], [None], {"start_dim": 1, "end_dim": 2},
                    suffix=f"/{what}_heads")[0]


def _mask_to_every_key(imp, bias: str, keys) -> str:
    """The mask's bias padded by -inf to ``keys`` (the total sequence length) where its last
    dim is shorter, as the spec has it (onnxruntime refuses such a mask, its function body
    pads it); a longer one is malformed."""
    shape = imp.types[bias].shape
    have = shape[-1]
    if type(have) is not int or type(keys) is not int or have == keys:
        return bias
    if have > keys:
        raise ModelFileError(f"attn_mask's last dim {have} is longer than the {keys} keys")
    pairs = [[0, 0] for _ in shape[:-1]] + [[0, keys - have]]
    return constant_pad(imp, bias, pairs, -np.inf, None, "/mask_to_keys")


def _seen(imp, scores: str, past_key: str | None, causal: int,
          window: tuple[int, int]) -> tuple[str, bool]:
    """The bias (queries, keys) of which keys each query sees, a constant of the static
    lengths: 0 where seen, else -inf; and whether a query sees no key at all. The query at
    ``i`` sits at position ``p = i +`` the cached length; it sees key ``j`` where ``j <= p``
    (causal), ``j >= p - left`` and ``j <= p + right`` (the window's bounds, -1 none)."""
    queries, keys = imp.types[scores].shape[2:]
    cached = imp.type_of(past_key).shape[2] if past_key is not None else 0
    if not all(type(d) is int for d in (queries, keys, cached)):
        what = "is_causal" if causal else "a window"
        raise imp.unsupported(f"{what} over run-time sequence lengths ({queries!r} "
                              f"queries, {keys!r} keys): the bias is a constant of static "
                              f"lengths")
    p, j = np.arange(queries)[:, None] + cached, np.arange(keys)[None, :]
    seen = np.ones((queries, keys), bool)
    left, right = window
    if causal:
        seen &= j <= p
    if left >= 0:
        seen &= j >= p - left
    if right >= 0:
        seen &= j <= p + right
    bias = imp.add_constant(np.where(seen, np.float32(0), np.float32(-np.inf)),
                            f"{imp.node_name}.causal" if window == (-1, -1)
                            else f"{imp.node_name}.window")
    return bias, bool(queries and keys and not seen.any(axis=1).all())


def _seen_run_time(imp, scores: str, nonpad: str, causal: int,
                   window: tuple[int, int]) -> str:
    """:func:`_seen` for a cache of ``nonpad_kv_seqlen[b]`` valid keys per batch entry (an
    input, so computed when the call runs), a bias (batch, 1, queries, keys): key ``j`` is
    seen where ``j <`` that length, and the queries are its last ones, the query at ``i``
    at ``p = i + length - queries``. Each length is first checked against [0, keys] (a
    ``gather_elements`` from the constant ``arange(keys + 1)``), as onnxruntime refuses one
    outside it."""
    queries, keys = imp.types[scores].shape[2:]
    if not all(type(d) is int for d in (queries, keys)):
        raise imp.unsupported(f"nonpad_kv_seqlen over run-time sequence lengths ({queries!r} "
                              f"queries, {keys!r} keys)")

    lengths = checked_index(imp, imp.tensor(nonpad), keys + 1, "nonpad_range", "nonpad_check")
    lengths = imp.step("reshape", [lengths], "nonpad_b", {"shape": [-1, 1, 1, 1]})
    j = imp.index_constant(np.arange(keys).reshape(1, 1, 1, keys), "key_positions")
    seen = imp.step("less", [j, lengths], "valid_keys")
    left, right = window
    if causal or window != (-1, -1):
        offsets = np.arange(queries).reshape(1, 1, queries, 1) - queries
        p = imp.step("add", [imp.index_constant(offsets, "query_offsets"), lengths],
                     "query_positions")
        bounds = [("less_equal", p, "causal")] if causal else []
        if left >= 0:
            left_bound = imp.step("sub", [p, imp.index_constant(left, "left")], "left_bound")
            bounds.append(("greater_equal", left_bound, "left"))
        if right >= 0:
            right_bound = imp.step("add", [p, imp.index_constant(right, "right")],
                                   "right_bound")
            bounds.append(("less_equal", right_bound, "right"))
        for op, bound, name in bounds:
            seen = imp.step("and", [seen, imp.step(op, [j, bound], f"{name}_seen")], f"{name}_and")
    return imp.step("where", [seen, _const(imp, 0.0, "attend"), _const(imp, -np.inf, "masked")],
                    "seen_bias")
