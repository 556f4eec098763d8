"""com.microsoft's BERT fusions that onnxruntime.transformers' optimizer writes (Attention,
EmbedLayerNormalization): a torch BERT block optimized by it, built and compared with
onnxruntime on both backends; hand-made nodes over every mask form, ``unidirectional``,
``attention_bias``, ``qkv_hidden_sizes``, ``scale``, ``mask_filter_value``, the optional
inputs and outputs of the embedding; and what is refused, naming the node or the input."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import ModelFileError, UnsupportedModelError

from .conftest import (assert_refused, bert_optimized, check_on_both_backends, import_and_load,
                       onnx, torch)

helper, TP, numpy_helper = onnx.helper, onnx.TensorProto, onnx.numpy_helper
_MS = "com.microsoft"
_HIDDEN, _HEADS, _VOCAB = 32, 4, 50


@pytest.mark.parametrize("attention", ["Attention", "MultiHeadAttention"])
def test_a_bert_layer_optimized_by_onnxruntime_transformers_builds_and_matches(attention,
                                                                              tmp_path, signer):
    torch.manual_seed(31)
    path = bert_optimized(tmp_path, hidden=_HIDDEN, heads=_HEADS, vocab=_VOCAB, seq=8,
                          use_multi_head_attention=attention == "MultiHeadAttention")
    ops = {(n.domain, n.op_type) for n in onnx.load(str(path)).graph.node}
    assert {(_MS, attention), (_MS, "EmbedLayerNormalization")} <= ops
    loaded = import_and_load(path, tmp_path / "m.pha", signer)[1]
    assert {"embedding", "layer_norm", "softmax"} <= {n.op for n in loaded.graph.nodes}
    rng = np.random.default_rng(37)
    feeds = []
    for lengths in ([8, 8], [5, 2], [0, 8]):  # padded on the right; a row of padding only
        mask = (np.arange(8)[None] < np.array(lengths)[:, None]).astype(np.int64)
        feeds.append({"ids": rng.integers(0, _VOCAB, (2, 8)),
                      "segments": rng.integers(0, 2, (2, 8)), "mask": mask})
    check_on_both_backends(path, loaded, feeds)


def test_a_bert_layer_of_run_time_batch_and_sequence_builds_with_the_sequence_fixed(tmp_path,
                                                                                     signer):
    """As transformers exports it: a run-time batch and sequence. The mask's lengths need the
    sequence's size, which the refusal says --dim gives; so built, the batch stays free."""
    torch.manual_seed(35)
    path = bert_optimized(tmp_path, hidden=_HIDDEN, heads=_HEADS, vocab=_VOCAB, seq=8,
                          dynamic=True)
    assert "Attention" in {n.op_type for n in onnx.load(str(path)).graph.node}
    assert_refused(path, UnsupportedModelError, "node 'Attention_0' (Attention)",
                   "a mask index of lengths over a run-time sequence length 'seq'; 'seq' is a "
                   "run-time dim of the inputs: --dim seq=SIZE")
    loaded = import_and_load(path, tmp_path / "m.pha", signer, dims={"seq": 8})[1]
    assert [s.shape for s in loaded.graph.inputs] == [("batch", 8)] * 3
    rng = np.random.default_rng(41)
    feeds = [{"ids": rng.integers(0, _VOCAB, (batch, 8)),
              "segments": rng.integers(0, 2, (batch, 8)),
              "mask": (np.arange(8)[None] < rng.integers(1, 9, (batch, 1))).astype(np.int64)}
             for batch in (1, 3)]
    check_on_both_backends(path, loaded, feeds)


def _bert_quantized(tmp_path, per_channel: bool, weights, reduce_range: bool = False):
    """The optimized layer quantized by quantize_dynamic: its Attention and
    EmbedLayerNormalization turned into QAttention and QEmbedLayerNormalization."""
    import logging

    from onnxruntime import quantization

    torch.manual_seed(33)
    float_model = bert_optimized(tmp_path, hidden=_HIDDEN, heads=_HEADS, vocab=_VOCAB, seq=8)
    path = tmp_path / "quantized.onnx"
    logging.disable(logging.WARNING)  # its advice to pre-process, on the root logger
    try:
        quantization.quantize_dynamic(
            str(float_model), str(path), per_channel=per_channel, weight_type=weights,
            reduce_range=reduce_range,
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    finally:
        logging.disable(logging.NOTSET)
    ops = {(n.domain, n.op_type) for n in onnx.load(str(path)).graph.node}
    assert {(_MS, "QAttention"), (_MS, "QEmbedLayerNormalization")} <= ops
    return path


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("weights", ["QUInt8", "QInt8"])
def test_a_bert_layer_so_quantized_by_quantize_dynamic_builds_and_matches(per_channel, weights,
                                                                           tmp_path, signer):
    """QAttention: a DynamicQuantizeLinear's input by the weights, one scale or one per
    column; QEmbedLayerNormalization: its tables. int8 weights are 7-bit (reduce_range): the
    full range saturates in onnxruntime on CPUs without VNNI (onnx_import/saturation.py)."""
    from onnxruntime.quantization import QuantType

    path = _bert_quantized(tmp_path, per_channel, QuantType[weights],
                           reduce_range=weights == "QInt8")
    loaded = import_and_load(path, tmp_path / "m.pha", signer)[1]
    rng = np.random.default_rng(39)
    feeds = []
    for lengths in ([8, 8], [5, 2]):
        mask = (np.arange(8)[None] < np.array(lengths)[:, None]).astype(np.int64)
        feeds.append({"ids": rng.integers(0, _VOCAB, (2, 8)),
                      "segments": rng.integers(0, 2, (2, 8)), "mask": mask})
    check_on_both_backends(path, loaded, feeds)


def test_saturation_names_qattention(tmp_path):
    """Where onnxruntime saturates u8 x s8 sums, the build's explanation names a QAttention of
    int8 weights."""
    from onnxruntime.quantization import QuantType

    from plugin_host.onnx_import import saturation

    path = _bert_quantized(tmp_path, False, QuantType.QInt8)
    assert saturation.int8_weight_node(onnx.load(str(path)))[1] == "QAttention"


# --- hand-made nodes ---------------------------------------------------------------------------

_B, _S, _D = 2, 5, 12


def _save(path, node, inputs, inits, outputs, opset=14):
    """One com.microsoft node in a model: ``inputs`` and ``outputs`` (name, dtype, shape)."""
    def info(name, dtype, shape):
        return helper.make_tensor_value_info(name, dtype, list(shape))

    graph = helper.make_graph([node], "g", [info(*i) for i in inputs],
                              [info(*o) for o in outputs],
                              [numpy_helper.from_array(v, n) for n, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                    helper.make_opsetid(_MS, 1)])
    path.write_bytes(model.SerializeToString())
    return path


def _attention(path, rng, *, mask=None, attention_bias=None, sizes=(12, 12, 12), opset=14,
               **attrs):
    """An Attention node of 3 heads on x (2, 5, 12), its mask ``mask`` (an int32 input of that
    shape) and bias ``attention_bias`` (a float input of that shape) where given."""
    inputs, names = [("x", TP.FLOAT, (_B, _S, _D))], ["x", "w", "b"]
    if mask is not None:
        inputs.append(("m", TP.INT32, mask))
        names.append("m")
    if attention_bias is not None:
        inputs.append(("ab", TP.FLOAT, attention_bias))
        names += [""] * (5 - len(names)) + ["ab"]
    if sizes[0] != sizes[2]:
        attrs["qkv_hidden_sizes"] = list(sizes)
    node = helper.make_node("Attention", names, ["y"], name="n", domain=_MS, num_heads=3,
                            **attrs)
    inits = {"w": (rng.standard_normal((_D, sum(sizes))) * 0.5).astype(np.float32),
             "b": rng.standard_normal(sum(sizes)).astype(np.float32)}
    return _save(path, node, inputs, inits, [("y", TP.FLOAT, (_B, _S, sizes[2]))], opset)


def _edited(path, edit):
    """The model at ``path`` after ``edit(model)``, saved in its place."""
    model = onnx.load(str(path))
    edit(model)
    onnx.save(model, str(path))
    return path


def _run_time(infos, dims: dict) -> None:
    """The value infos' dims ``{axis: name}`` made run-time dims of those names (an axis they
    do not have is skipped)."""
    for vi in infos:
        shape = vi.type.tensor_type.shape.dim
        for axis, name in dims.items():
            if axis < len(shape):
                shape[axis].dim_param = name


def _feeds(rng, masks=(), attention_bias=None) -> list[dict]:
    feeds = []
    for i in range(max(2, len(masks))):
        feed = {"x": rng.standard_normal((_B, _S, _D)).astype(np.float32)}
        if masks:
            feed["m"] = np.asarray(masks[i % len(masks)], np.int32)
        if attention_bias is not None:
            feed["ab"] = rng.standard_normal(attention_bias).astype(np.float32)
        feeds.append(feed)
    return feeds


_RAW = [[[1, 1, 0, 1, 1], [1, 2, -1, 0, 1]], [[0, 0, 0, 0, 0], [1, 1, 1, 1, 1]]]
_MASKS = {  # mask shape: feeds; > 0 seen in a raw mask; lengths beyond the sequence are whole
    (_B, _S): _RAW,
    (_B, _S, _S): [np.random.default_rng(41).integers(0, 2, (_B, _S, _S)) for _ in range(2)],
    (_B,): [[3, 7], [0, 5], [5, 1]],
    (2 * _B,): [[4, 5, 1, 2], [4, 9, -1, 2], [0, 3, 0, 9], [5, 5, 5, 0]],
}


@pytest.mark.parametrize("shape", list(_MASKS), ids=lambda s: f"mask{s}")
@pytest.mark.parametrize("attrs", [{}, {"mask_filter_value": -5.0}, {"unidirectional": 1},
                                   {"unidirectional": 1, "mask_filter_value": -3.0}],
                         ids=["default", "filter", "causal", "causal_filter"])
def test_attentions_masks_match_onnxruntime(shape, attrs, tmp_path, signer):
    """A finite filter makes a masked key's weight count; a row of masked keys is uniform."""
    rng = np.random.default_rng(43)
    path = _attention(tmp_path / "m.onnx", rng, mask=shape, **attrs)
    loaded = import_and_load(path, tmp_path / "m.pha", signer)[1]
    check_on_both_backends(path, loaded, _feeds(rng, _MASKS[shape]))


@pytest.mark.parametrize("case", [
    {}, {"unidirectional": 1}, {"scale": 0.3}, {"sizes": (6, 6, 9)},
    {"attention_bias": (1, 3, _S, _S)}, {"attention_bias": (_B, 1, _S, _S), "mask": (_B, _S)},
    {"opset": 11, "mask": (_B, _S)}, {"unidirectional": 1, "scale": 3e4}],  # 11: upgraded
    ids=["plain", "causal", "scale", "v_size", "bias", "bias_mask", "opset11", "causal_huge"])
def test_attention_matches_onnxruntime(case, tmp_path, signer):
    """``causal_huge``: scores far beyond the filter's -10000; onnxruntime hides the keys after
    each query entirely, not by adding -10000."""
    rng = np.random.default_rng(47)
    case = dict(case)
    path = _attention(tmp_path / "m.onnx", rng, **case)
    loaded = import_and_load(path, tmp_path / "m.pha", signer)[1]
    check_on_both_backends(path, loaded, _feeds(rng, _MASKS.get(case.get("mask"), ()),
                                                case.get("attention_bias")))


def test_a_negative_length_is_refused_when_the_call_brings_it(tmp_path, signer):
    from plugin_host.executor import Executor
    from plugins.numpy_backend import NumpyBackend

    from abi.errors import IndexRangeError

    rng = np.random.default_rng(53)
    path = _attention(tmp_path / "m.onnx", rng, mask=(_B,))
    loaded = import_and_load(path, tmp_path / "m.pha", signer)[1]
    feed = _feeds(rng, [[3, -1]])[0]
    with pytest.raises(IndexRangeError) as info:
        Executor(loaded.graph, NumpyBackend()).run(feed)
    assert "n/lengths_checked" in str(info.value) and "-1" in str(info.value)


def _embedding(path, rng, *, segments=True, mask=True, positions=None, outputs=("y", "mi"),
               epsilon=1e-5):
    """An EmbedLayerNormalization over ids (2, 6) in a vocabulary of 10, hidden 8; positions
    an int32 input of that shape where given."""
    inputs = [("ids", TP.INT32, (2, 6))]
    names = ["ids", "seg" if segments else "", "word", "pos", "segment" if segments else "",
             "gamma", "beta", "mask" if mask else ""]
    if segments:
        inputs.append(("seg", TP.INT32, (2, 6)))
    if mask:
        inputs.append(("mask", TP.INT32, (2, 6)))
    if positions:
        inputs.append(("pid", TP.INT32, positions))
        names.append("pid")
    while not names[-1]:
        names.pop()
    attrs = {} if "mi" in outputs else {"mask_index_type": 0}
    node = helper.make_node("EmbedLayerNormalization", names,
                            [o if o in outputs else "" for o in ("y", "mi", "sum")], name="n",
                            domain=_MS, epsilon=epsilon, **attrs)
    tables = {"word": (10, 8), "pos": (7, 8), "segment": (2, 8), "gamma": (8,), "beta": (8,)}
    inits = {n: rng.standard_normal(s).astype(np.float32) for n, s in tables.items()
             if n in names}
    kinds = {"y": (TP.FLOAT, (2, 6, 8)), "mi": (TP.INT32, (2,)), "sum": (TP.FLOAT, (2, 6, 8))}
    return _save(path, node, inputs, inits, [(o, *kinds[o]) for o in outputs])


def _embedding_feeds(rng, positions=None) -> list[dict]:
    feeds = []
    for mask in ([[1, 1, 0, 1, 1, 1], [0, 1, 1, 2, 1, 0]], [[0] * 6, [1] * 6]):
        feed = {"ids": rng.integers(0, 10, (2, 6)).astype(np.int32),
                "seg": rng.integers(0, 2, (2, 6)).astype(np.int32),
                "mask": np.array(mask, np.int32)}
        if positions:
            feed["pid"] = rng.integers(0, 7, positions).astype(np.int32)
        feeds.append(feed)
    return feeds


@pytest.mark.parametrize("case", [
    {}, {"outputs": ("y", "mi", "sum")}, {"segments": False, "outputs": ("y", "sum")},
    {"mask": False}, {"positions": (1, 6)}, {"positions": (2, 6), "segments": False},
    {"epsilon": 1e-12, "outputs": ("y",)}],
    ids=["plain", "sum", "no_segments", "no_mask", "positions", "batch_positions", "no_index"])
def test_embed_layer_normalization_matches_onnxruntime(case, tmp_path, signer):
    """The mask's index counts its entries equal to 1 (a 2 is not counted), zeros without a
    mask; the sum output holds the segment embedding too."""
    rng = np.random.default_rng(59)
    path = _embedding(tmp_path / "m.onnx", rng, **case)
    loaded = import_and_load(path, tmp_path / "m.pha", signer)[1]
    feeds = _embedding_feeds(rng, case.get("positions"))
    keep = {i.name for i in onnx.load(str(path)).graph.input}
    check_on_both_backends(path, loaded, [{k: v for k, v in f.items() if k in keep}
                                          for f in feeds])


@pytest.mark.parametrize("bad", [10, -1])
def test_an_id_outside_the_word_table_is_refused_at_entry(bad, tmp_path, signer):
    from plugin_host.executor import Executor
    from plugins.numpy_backend import NumpyBackend

    from abi.errors import IndexRangeError

    rng = np.random.default_rng(61)
    path = _embedding(tmp_path / "m.onnx", rng)
    loaded = import_and_load(path, tmp_path / "m.pha", signer)[1]
    feed = _embedding_feeds(rng)[0]
    feed["ids"][1, 2] = bad
    with pytest.raises(IndexRangeError) as info:
        Executor(loaded.graph, NumpyBackend()).run(feed)
    assert "'ids'" in str(info.value) and str(bad) in str(info.value)


_L = 6  # the keys of a cross attention


def _multi_head(path, rng, *, key=(_B, _L, _D), value=(_B, _L, _D), bias=False, mask=None,
                attention_bias=None, **attrs):
    """A MultiHeadAttention node of 3 heads: query (2, 5, 12), key and value inputs of the
    shapes given, a constant bias, a mask and an attention bias where given."""
    inputs = [("q", TP.FLOAT, (_B, _S, _D)), ("k", TP.FLOAT, key), ("v", TP.FLOAT, value)]
    v_hidden = value[1] * value[3] if len(value) == 4 else value[2]
    inits = {"b": rng.standard_normal(2 * _D + v_hidden).astype(np.float32)} if bias else {}
    names = ["q", "k", "v", "b" if bias else "", "m" if mask else "",
             "ab" if attention_bias else ""]
    for name, dtype, shape in (("m", TP.INT32, mask), ("ab", TP.FLOAT, attention_bias)):
        if shape:
            inputs.append((name, dtype, shape))
    while not names[-1]:
        names.pop()
    node = helper.make_node("MultiHeadAttention", names, ["y"], name="n", domain=_MS,
                            num_heads=3, **attrs)
    return _save(path, node, inputs, inits, [("y", TP.FLOAT, (_B, _S, v_hidden))])


_MHA_MASKS = {(_B,): [[3, 9], [0, 6]], (_B, _L): [[[1, 1, 0, 1, 1, 0], [0] * _L],
                                                  [[1, 2, 1, -1, 0, 1], [1] * _L]],
              (_B, _S, _L): [np.random.default_rng(97).integers(0, 2, (_B, _S, _L))
                             for _ in range(2)]}


@pytest.mark.parametrize("case", [
    {}, {"value": (_B, _L, 6), "bias": True}, {"mask": (_B,), "mask_filter_value": -5.0},
    {"mask": (_B, _L)}, {"mask": (_B, _S, _L), "bias": True},
    {"attention_bias": (1, 3, _S, _L), "mask": (_B, _L)}, {"scale": 0.4},
    {"key": (_B, _S, _D), "value": (_B, _S, _D), "unidirectional": 1},
    {"key": (_B, 3, _L, 4), "value": (_B, 3, _L, 4)},
    {"key": (_B, 3, _L, 4), "value": (_B, 3, _L, 4), "bias": True}],
    ids=["plain", "v_size_bias", "lengths_filter", "raw", "raw3d_bias", "bias_mask", "scale",
         "causal", "kv_heads", "kv_heads_bias"])
def test_multi_head_attention_matches_onnxruntime(case, tmp_path, signer):
    """A key and value already as heads (batch, heads, keys, size) take no bias: onnxruntime
    adds only the query's part then. A row with every key masked is uniform."""
    rng = np.random.default_rng(101)
    path = _multi_head(tmp_path / "m.onnx", rng, **case)
    loaded = import_and_load(path, tmp_path / "m.pha", signer)[1]
    floats = [(vi.name, [d.dim_value for d in vi.type.tensor_type.shape.dim])
              for vi in onnx.load(str(path)).graph.input if vi.name != "m"]
    feeds = []
    for i in range(2):
        feed = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in floats}
        if "mask" in case:
            masks = _MHA_MASKS[case["mask"]]
            feed["m"] = np.asarray(masks[i % len(masks)], np.int32)
        feeds.append(feed)
    check_on_both_backends(path, loaded, feeds)


def _q_attention(path, rng, *, mask=None, zero_points=True, weights="uint8", **attrs):
    """A QAttention node of 3 heads on a uint8 x (2, 5, 12) of scale 0.05 and zero point 120,
    weights of 36 columns (per-column scales), its mask ``mask`` where given."""
    inputs = [("x", TP.UINT8, (_B, _S, _D))]
    low, high = (0, 256) if weights == "uint8" else (-64, 64)
    inits = {"w": rng.integers(low, high, (_D, 3 * _D)).astype(weights),
             "b": rng.standard_normal(3 * _D).astype(np.float32),
             "x_scale": np.float32(0.05), "w_scale": (10.0 ** rng.uniform(-3, -2, 3 * _D)
                                                      ).astype(np.float32),
             "x_zp": np.uint8(120), "w_zp": np.asarray(3 if weights == "int8" else 130,
                                                       weights)}
    names = ["x", "w", "b", "x_scale", "w_scale", "m" if mask else ""]
    if zero_points:
        names += ["x_zp", "w_zp"]
    else:
        del inits["x_zp"], inits["w_zp"]
    if mask:
        inputs.append(("m", TP.INT32, mask))
    while not names[-1]:
        names.pop()
    node = helper.make_node("QAttention", names, ["y"], name="n", domain=_MS, num_heads=3,
                            **attrs)
    return _save(path, node, inputs, inits, [("y", TP.FLOAT, (_B, _S, _D))])


@pytest.mark.parametrize("case", [
    {}, {"mask": (_B,)}, {"mask": (_B, _S), "unidirectional": 1}, {"zero_points": False},
    {"weights": "int8", "scale": 0.2}, {"mask": (2 * _B,), "mask_filter_value": -4.0}],
    ids=["plain", "lengths", "raw_causal", "no_zero_points", "int8_scale", "starts_filter"])
def test_q_attention_matches_onnxruntime(case, tmp_path, signer):
    """int8 weights of 7 bits: the full range saturates in onnxruntime on CPUs without VNNI."""
    rng = np.random.default_rng(73)
    path = _q_attention(tmp_path / "m.onnx", rng, **case)
    loaded = import_and_load(path, tmp_path / "m.pha", signer)[1]
    feeds = [{"x": rng.integers(0, 256, (_B, _S, _D)).astype(np.uint8)} for _ in range(3)]
    masks = _MASKS.get(case.get("mask"))
    for i, feed in enumerate(feeds if masks else []):
        feed["m"] = np.asarray(masks[i % len(masks)], np.int32)
    check_on_both_backends(path, loaded, feeds)


def _q_embedding(path, rng, *, dtype="uint8", segments=True):
    """A QEmbedLayerNormalization over ids (2, 6) in a vocabulary of 10, hidden 8, its tables
    of ``dtype`` with one scale and zero point each."""
    low, high = (0, 256) if dtype == "uint8" else (-128, 128)
    inputs = [("ids", TP.INT32, (2, 6)), ("mask", TP.INT32, (2, 6))]
    tables = {"word": (10, 8), "pos": (7, 8), "segment": (2, 8), "gamma": (8,), "beta": (8,)}
    if not segments:
        del tables["segment"]
    else:
        inputs.append(("seg", TP.INT32, (2, 6)))
    inits = {}
    for name, shape in tables.items():
        inits[name] = rng.integers(low, high, shape).astype(dtype)
        inits[f"{name}_scale"] = np.float32(10.0 ** rng.uniform(-3, -1))
        inits[f"{name}_zp"] = np.asarray(rng.integers(low, high), dtype)

    def each(suffix):
        return [f"{n}{suffix}" if n in tables else "" for n in ("word", "pos", "segment",
                                                                "gamma", "beta")]

    names = ["ids", "seg" if segments else ""] + each("")[:1] + each("")[1:] + ["mask"] + \
        each("_scale") + each("_zp")
    node = helper.make_node("QEmbedLayerNormalization", names, ["y", "mi"], name="n",
                            domain=_MS, epsilon=1e-5)
    return _save(path, node, inputs, inits, [("y", TP.FLOAT, (2, 6, 8)),
                                             ("mi", TP.INT32, (2,))])


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("segments", [True, False])
def test_q_embed_layer_normalization_matches_onnxruntime(dtype, segments, tmp_path, signer):
    rng = np.random.default_rng(79)
    path = _q_embedding(tmp_path / "m.onnx", rng, dtype=dtype, segments=segments)
    loaded = import_and_load(path, tmp_path / "m.pha", signer)[1]
    feeds = _embedding_feeds(rng)
    if not segments:
        for feed in feeds:
            del feed["seg"]
    check_on_both_backends(path, loaded, feeds)


_PAST = 4


def _with_past(model, present: bool = True) -> None:
    """The node given a past state (2, batch, 3 heads, _PAST, 4) as its last input, and, with
    ``present``, the present output (2, batch, 3, _PAST + sequence, 4)."""
    node, graph = model.graph.node[0], model.graph
    past = 8 if node.op_type == "QAttention" else 4
    node.input.extend([""] * (past - len(node.input)) + ["past"])
    graph.input.append(helper.make_tensor_value_info("past", TP.FLOAT, [2, _B, 3, _PAST, 4]))
    if present:
        node.output.append("present")
        graph.output.append(helper.make_tensor_value_info("present", TP.FLOAT,
                                                          [2, _B, 3, _PAST + _S, 4]))


@pytest.mark.parametrize("mask", [None, (_B, _PAST + _S), (_B,)],
                         ids=["no_mask", "raw", "lengths"])
@pytest.mark.parametrize("attrs", [{}, {"unidirectional": 1}], ids=["full", "causal"])
def test_attention_with_a_past_state_matches_onnxruntime(mask, attrs, tmp_path, signer):
    """GPT-2's decoding cache: the past keys and values before the new ones, query i seeing
    keys up to past + i where causal, the mask over all of them; present is both stacked."""
    rng = np.random.default_rng(89)
    path = _edited(_attention(tmp_path / "m.onnx", rng, mask=mask, **attrs), _with_past)
    loaded = import_and_load(path, tmp_path / "m.pha", signer)[1]
    assert [o.name for o in loaded.graph.outputs] == ["y", "present"]
    masks = {(_B, _PAST + _S): [rng.integers(0, 2, (_B, _PAST + _S)) for _ in range(2)],
             (_B,): [[9, 2], [0, 6]]}.get(mask, ())
    feeds = _feeds(rng, masks)
    for feed in feeds:
        feed["past"] = rng.standard_normal((2, _B, 3, _PAST, 4)).astype(np.float32)
    check_on_both_backends(path, loaded, feeds)


def test_a_past_state_without_the_present_output_is_refused(tmp_path):
    """onnxruntime's kernel fails on it."""
    rng = np.random.default_rng(97)
    path = _edited(_attention(tmp_path / "m.onnx", rng, unidirectional=1),
                   lambda model: _with_past(model, present=False))
    assert_refused(path, UnsupportedModelError, "node 'n' (Attention)",
                   "a past state without the present output (1): onnxruntime's kernel fails")


def test_q_attention_with_a_past_state_matches_onnxruntime(tmp_path, signer):
    rng = np.random.default_rng(101)
    path = _edited(_q_attention(tmp_path / "m.onnx", rng, mask=(_B, _PAST + _S),
                                unidirectional=1), _with_past)
    loaded = import_and_load(path, tmp_path / "m.pha", signer)[1]
    feeds = [{"x": rng.integers(0, 256, (_B, _S, _D)).astype(np.uint8),
              "m": rng.integers(0, 2, (_B, _PAST + _S)).astype(np.int32),
              "past": rng.standard_normal((2, _B, 3, _PAST, 4)).astype(np.float32)}
             for _ in range(2)]
    check_on_both_backends(path, loaded, feeds)


# --- refused -----------------------------------------------------------------------------------


def _node_model(tmp_path, inputs, attrs, outputs=("y",), mask_shape=(_B,)):
    """An Attention node named n over x (2, 5, 12), weights of 36 columns."""
    inits = {"w": np.ones((_D, 3 * _D), np.float32), "b": np.zeros(3 * _D, np.float32)}
    graph_inputs = [("x", TP.FLOAT, (_B, _S, _D))]
    if "past" in inputs:
        graph_inputs.append(("past", TP.FLOAT, (2, _B, 3, 1, 4)))
    if "len" in inputs:
        graph_inputs.append(("len", TP.INT32, (1,)))
    if "m" in inputs:
        graph_inputs.append(("m", TP.INT32, mask_shape))
    node = helper.make_node("Attention", inputs, list(outputs), name="n", domain=_MS, **attrs)
    return _save(tmp_path / "m.onnx", node, graph_inputs, inits,
                 [(o, TP.FLOAT, (_B, _S, _D)) for o in outputs if o])


@pytest.mark.parametrize("inputs, attrs, outputs, error, message", [
    (["x", "w", "b", "", "past"], {"num_heads": 4}, ("y", "present"), ModelFileError,
     "past 'past' of shape [2, 2, 3, 1, 4]: needs (2, 2, 4, past length, 3)"),
    (["x", "w", "b", "", "past", "", "len"], {"num_heads": 3}, ("y",), UnsupportedModelError,
     "past_sequence_length (input 6) is not supported"),
    (["x", "w", "b"], {"num_heads": 3, "do_rotary": 1}, ("y",), UnsupportedModelError,
     "attribute do_rotary=1 is not supported"),
    (["x", "w", "b", "m"], {"num_heads": 3}, ("y", (_B, 1, _S, _S)),
     UnsupportedModelError, "a mask of rank 4"),
    (["x", "w", "b", "m"], {"num_heads": 3}, ("y", (3 * _B + 2,)),
     UnsupportedModelError,
     "a mask index of shape (8,) for a batch of 2: (batch) lengths, or (2 * batch)"),
    (["x", "w", "b"], {"num_heads": 5}, ("y",), ModelFileError,
     "qkv_hidden_sizes [12, 12, 12] must be three positive multiples of num_heads=5"),
    (["x", "w", "b"], {"num_heads": 3, "qkv_hidden_sizes": [9, 12, 15]}, ("y",),
     ModelFileError, "Q's equal to K's"),
], ids=["past", "past_length", "rotary", "mask4d", "mask3b2", "heads", "sizes"])
def test_what_attention_cannot_take_is_refused(inputs, attrs, outputs, error, message,
                                               tmp_path):
    outputs, mask_shape = (outputs, (_B,)) if type(outputs[-1]) is str else (
        outputs[:-1], outputs[-1])
    path = _node_model(tmp_path, inputs, attrs, outputs, mask_shape)
    assert_refused(path, error, "node 'n'", message)


def test_attention_over_a_run_time_sequence_is_refused_when_causal(tmp_path):
    rng = np.random.default_rng(67)
    path = _edited(_attention(tmp_path / "m.onnx", rng, unidirectional=1),
                   lambda model: _run_time(model.graph.input[:1], {1: "seq"}))
    assert_refused(path, UnsupportedModelError, "node 'n'",
                   "unidirectional over a run-time sequence length 'seq'")


def test_segment_ids_without_a_segment_table_are_refused(tmp_path):
    rng = np.random.default_rng(71)
    path = _edited(_embedding(tmp_path / "m.onnx", rng),
                   lambda model: model.graph.node[0].input.__setitem__(4, ""))
    assert_refused(path, ModelFileError, "node 'n' (EmbedLayerNormalization)",
                   "segment_ids and segment_embedding must be given together")


def test_a_past_state_of_a_run_time_length_is_refused(tmp_path):
    rng = np.random.default_rng(83)

    def with_past(model):
        _with_past(model)
        _run_time([model.graph.input[-1], model.graph.output[-1]], {3: "past"})

    path = _edited(_q_attention(tmp_path / "m.onnx", rng), with_past)
    assert_refused(path, UnsupportedModelError, "node 'n' (QAttention)",
                   "past 'past' of the run-time length 'past': the keys it adds must be counted "
                   "at import")


@pytest.mark.parametrize("edit, error, message", [
    (lambda node: node.input.__setitem__(10, ""), ModelFileError,
     "segment_ids, segment_embedding, its scale and its zero point must all be given"),
    (lambda node: node.input.__setitem__(2, "ids_table"), UnsupportedModelError,
     "word_embedding 'ids_table' is computed at run time: the quantized tables must be "
     "constants"),
], ids=["segment_group", "run_time_table"])
def test_what_q_embed_layer_normalization_cannot_take_is_refused(edit, error, message,
                                                                 tmp_path):
    rng = np.random.default_rng(89)

    def edited(model):
        edit(model.graph.node[0])
        model.graph.input.append(helper.make_tensor_value_info("ids_table", TP.UINT8, [10, 8]))

    path = _edited(_q_embedding(tmp_path / "m.onnx", rng), edited)
    assert_refused(path, error, "node 'n' (QEmbedLayerNormalization)", message)


@pytest.mark.parametrize("case, error, message", [
    ({"key": (_B, _L, 3, 2, 4)}, UnsupportedModelError,
     "packed KV (rank 5): onnxruntime's CPU kernel does not implement it"),
    ({"unidirectional": 1}, UnsupportedModelError,
     "unidirectional over 5 queries and 6 keys: onnxruntime's causal bound of a cross "
     "attention is neither"),
    ({"key": (_B, 3, _L, 4), "value": (_B, 3, _L, 5)}, ModelFileError,
     "they must have one shape, as onnxruntime requires"),
    ({"key": (_B, _L, 9)}, ModelFileError, "do not hold 3 heads of one Q and K head size"),
], ids=["packed_kv", "causal_cross", "kv_heads_shapes", "k_hidden"])
def test_what_multi_head_attention_cannot_take_is_refused(case, error, message, tmp_path):
    path = _multi_head(tmp_path / "m.onnx", np.random.default_rng(103), **case)
    assert_refused(path, error, "node 'n' (MultiHeadAttention)", message)


def _mha_cache(model, *, past: bool = True, present: bool = True, v_size: int = 4) -> None:
    """The node given past_key and past_value (batch, 3 heads, _PAST, 4 and ``v_size``), and
    present_key and present_value outputs."""
    node, graph = model.graph.node[0], model.graph
    keys = int(graph.input[1].type.tensor_type.shape.dim[-2 if len(
        graph.input[1].type.tensor_type.shape.dim) == 4 else 1].dim_value)
    if past:
        node.input.extend([""] * (6 - len(node.input)) + ["pk", "pv"])
        graph.input.extend([helper.make_tensor_value_info("pk", TP.FLOAT, [_B, 3, _PAST, 4]),
                            helper.make_tensor_value_info("pv", TP.FLOAT,
                                                          [_B, 3, _PAST, v_size])])
    if present:
        node.output.extend(["pres_k", "pres_v"])
        total = keys + (_PAST if past else 0)
        graph.output.extend([helper.make_tensor_value_info("pres_k", TP.FLOAT,
                                                           [_B, 3, total, 4]),
                             helper.make_tensor_value_info("pres_v", TP.FLOAT,
                                                           [_B, 3, total, v_size])])


@pytest.mark.parametrize("case, cache", [
    ({"bias": True, "mask": (_B, _PAST + _L)}, {}),
    ({"key": (_B, _S, _D), "value": (_B, _S, _D), "unidirectional": 1}, {}),
    ({"key": (_B, 3, _L, 4), "value": (_B, 3, _L, 4)}, {}),
    ({"bias": True}, {"past": False}),
    ({"value": (_B, _L, 15), "bias": True}, {"past": False, "v_size": 5}),
], ids=["bias_mask", "causal", "kv_heads", "present_only", "present_v_size"])
def test_multi_head_attentions_cache_matches_onnxruntime(case, cache, tmp_path, signer):
    """past_key and past_value before the new keys and values (query i sees keys up to past
    + i where causal, over as many new keys as queries), present_key and present_value both
    (the new ones alone without a past)."""
    rng = np.random.default_rng(107)
    path = _edited(_multi_head(tmp_path / "m.onnx", rng, **case),
                   lambda model: _mha_cache(model, **cache))
    loaded = import_and_load(path, tmp_path / "m.pha", signer)[1]
    floats = [(vi.name, [d.dim_value for d in vi.type.tensor_type.shape.dim])
              for vi in onnx.load(str(path)).graph.input if vi.name != "m"]
    feeds = [{name: rng.standard_normal(shape).astype(np.float32) for name, shape in floats}
             for _ in range(2)]
    if "mask" in case:
        for feed in feeds:
            feed["m"] = rng.integers(0, 2, case["mask"]).astype(np.int32)
    check_on_both_backends(path, loaded, feeds)


@pytest.mark.parametrize("at, error, message", [
    (("input", 8), UnsupportedModelError, "past_sequence_length (input 8) is not supported"),
    (("input", 9), UnsupportedModelError, "cache_indirection (input 9) is not supported"),
    (("input", 6), ModelFileError, "past_key and past_value must be given together"),
    (("output", 3), UnsupportedModelError, "the qk output (3) is not supported")])
def test_what_multi_head_attentions_cache_cannot_take_is_refused(at, error, message,
                                                                 tmp_path):
    path = _multi_head(tmp_path / "m.onnx", np.random.default_rng(107))
    model = onnx.load(str(path))
    node = model.graph.node[0]
    where, index = at
    names = node.input if where == "input" else node.output
    while len(names) <= index:
        names.append("")
    names[index] = "extra"
    if where == "input":
        model.graph.input.append(helper.make_tensor_value_info("extra", TP.FLOAT,
                                                               [_B, 3, 1, 4]))
    onnx.save(model, str(path))
    assert_refused(path, error, "node 'n' (MultiHeadAttention)", message)


@pytest.mark.parametrize("value, cache, error, message", [
    ((_B, _L, _D), {"v_size": 5}, ModelFileError,
     "past_value of shape [2, 3, 4, 5]: needs (2, 3, past length, 4), one length for both"),
    ((_B, _L, _D), {"present": False}, UnsupportedModelError,
     "past_key and past_value without the present_key and present_value outputs: "
     "onnxruntime's kernel gives nan for half of the output there"),
    ((_B, _L, 15), {"v_size": 5}, UnsupportedModelError,
     "past_key and past_value with value heads of size 5 and key heads of 4: onnxruntime "
     "requires one head size"),
], ids=["shape", "no_present", "v_size"])
def test_a_past_that_does_not_fit_is_refused(value, cache, error, message, tmp_path):
    path = _edited(_multi_head(tmp_path / "m.onnx", np.random.default_rng(109), value=value),
                   lambda model: _mha_cache(model, **cache))
    assert_refused(path, error, "node 'n' (MultiHeadAttention)", message)


def test_embed_layer_normalization_over_a_run_time_batch_and_sequence(tmp_path, signer):
    """Without position ids, the positions are a Range over the sequence's run-time size; the
    mask index a count per run-time batch row."""
    rng = np.random.default_rng(109)
    path = _edited(_embedding(tmp_path / "m.onnx", rng, outputs=("y", "mi", "sum")),
                   lambda model: _run_time([*model.graph.input, *model.graph.output],
                                           {0: "batch", 1: "seq"}))
    loaded = import_and_load(path, tmp_path / "m.pha", signer)[1]
    assert loaded.graph.inputs[0].shape == ("batch", "seq")
    feeds = [{"ids": rng.integers(0, 10, shape).astype(np.int32),
              "seg": rng.integers(0, 2, shape).astype(np.int32),
              "mask": rng.integers(0, 3, shape).astype(np.int32)} for shape in ((1, 7), (3, 4))]
    check_on_both_backends(path, loaded, feeds)


def test_a_sequence_longer_than_the_position_table_is_refused_when_the_call_brings_it(
        tmp_path, signer):
    """As onnxruntime refuses it: an IndexRangeError naming the position lookup, on both
    backends."""
    from plugin_host.executor import Executor
    from plugins.numpy_backend import NumpyBackend
    from plugins.onnxruntime_backend import OnnxruntimeBackend

    from abi.errors import IndexRangeError

    rng = np.random.default_rng(113)
    path = _edited(_embedding(tmp_path / "m.onnx", rng, mask=False, outputs=("y",)),
                   lambda model: _run_time([*model.graph.input, *model.graph.output],
                                           {1: "seq"}))
    loaded = import_and_load(path, tmp_path / "m.pha", signer)[1]
    feed = {"ids": rng.integers(0, 10, (2, 8)).astype(np.int32),
            "seg": rng.integers(0, 2, (2, 8)).astype(np.int32)}
    for backend in (NumpyBackend(), OnnxruntimeBackend()):
        with pytest.raises(IndexRangeError) as info:  # 7 positions in the table
            Executor(loaded.graph, backend).run(feed)
        assert "node 'n/position'" in str(info.value) and "outside [0, 7)" in str(info.value)


@pytest.mark.parametrize("bad", [-1, 7])
def test_constant_position_ids_outside_the_table_are_refused_at_import(bad, tmp_path):
    """onnxruntime's kernel refuses them; a Gather would count -1 from the end."""
    rng = np.random.default_rng(127)
    path = _embedding(tmp_path / "m.onnx", rng, positions=(1, 6))
    model = onnx.load(str(path))
    del model.graph.input[-1]  # the position ids: a constant instead
    model.graph.initializer.append(numpy_helper.from_array(
        np.array([[0, 1, bad, 3, 4, 5]], np.int32), "pid"))
    onnx.save(model, str(path))
    assert_refused(path, ModelFileError, "node 'n' (EmbedLayerNormalization)",
                   f"position_ids value {bad} at (0, 2) is outside [0, 7), the rows of 'pos'")


def test_multi_head_attention_of_run_time_heads_is_refused(tmp_path):
    """A key and value as (batch, heads, keys, size) whose heads and size are run-time dims."""
    path = _multi_head(tmp_path / "m.onnx", np.random.default_rng(131), key=(_B, 3, _L, 4),
                       value=(_B, 3, _L, 4))
    path = _edited(path, lambda model: _run_time(model.graph.input[1:3],
                                                 {1: "heads", 3: "size"}))
    assert_refused(path, UnsupportedModelError, "node 'n' (MultiHeadAttention)",
                   "their hidden sizes and heads must be static")
