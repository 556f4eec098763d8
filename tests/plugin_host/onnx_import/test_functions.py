"""Ops ONNX defines as functions of other ops, with no mapper of their own, import through the
body ONNX writes for them (plugin_host/onnx_import/functions.py): RotaryEmbedding (opset 23),
SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss (opset 13), CausalConvWithState (opset
27) and LinearAttention (opset 27, a Scan over the steps). Each is compared with onnxruntime on
both backends, over run-time dims where the op takes them."""

from __future__ import annotations

import numpy as np
import pytest

from abi.errors import IndexRangeError
from plugin_host.errors import ModelFileError, UnsupportedModelError
from plugin_host.executor import Executor
from plugin_host.onnx_import import import_onnx
from plugins.numpy_backend import NumpyBackend

from .conftest import (assert_refused, check_on_both_backends, import_and_load,
                       index_refused_on_both_backends, onnx, onnxruntime_outputs)

helper, TP = onnx.helper, onnx.TensorProto

HEADS, HEAD_SIZE, POSITIONS = 3, 8, 32


def _save(path, nodes, inputs, outputs, opset, inits=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString())
    return path


def _rope_model(path, *, packed: bool, interleaved: int, rotary: int | None,
                positions: bool, twice: bool = False):
    """RotaryEmbedding of x over a run-time batch and sequence: (b, heads, s, 8), or packed
    (b, s, heads * 8) with num_heads; cos and sin constant tables of 32 positions read at
    run-time position ids, or (without ``positions``) inputs (b, s, half) of their own.
    ``twice``: a second node on the first's output, with the same tables."""
    half = (rotary or HEAD_SIZE) // 2
    x_shape = ["b", "s", HEADS * HEAD_SIZE] if packed else ["b", HEADS, "s", HEAD_SIZE]
    inputs = [helper.make_tensor_value_info("x", TP.FLOAT, x_shape)]
    inits = []
    if positions:
        inputs.append(helper.make_tensor_value_info("pos", TP.INT64, ["b", "s"]))
        angles = np.arange(POSITIONS)[:, None] / 10000 ** (np.arange(half) / half)
        inits = [onnx.numpy_helper.from_array(np.cos(angles).astype(np.float32), "cos"),
                 onnx.numpy_helper.from_array(np.sin(angles).astype(np.float32), "sin")]
    else:
        inputs += [helper.make_tensor_value_info(n, TP.FLOAT, ["b", "s", half])
                   for n in ("cos", "sin")]
    attrs = {"interleaved": interleaved}
    if packed:
        attrs["num_heads"] = HEADS
    if rotary is not None:
        attrs["rotary_embedding_dim"] = rotary
    names = ["x", "cos", "sin"] + (["pos"] if positions else [])
    nodes = [helper.make_node("RotaryEmbedding", names, ["r" if twice else "y"], name="rope",
                              **attrs)]
    if twice:
        nodes.append(helper.make_node("RotaryEmbedding", ["r"] + names[1:], ["y"],
                                      name="rope2", **attrs))
    return _save(path, nodes, inputs, [helper.make_tensor_value_info("y", TP.FLOAT, x_shape)],
                 23, inits)


def _rope_feeds(*, packed: bool, rotary: int | None, positions: bool):
    half = (rotary or HEAD_SIZE) // 2
    rng = np.random.default_rng(7)
    feeds = []
    for b, s in ((1, 1), (2, 5), (3, 9)):
        shape = (b, s, HEADS * HEAD_SIZE) if packed else (b, HEADS, s, HEAD_SIZE)
        feed = {"x": rng.standard_normal(shape).astype(np.float32)}
        if positions:
            feed["pos"] = rng.integers(0, POSITIONS, (b, s))
        else:
            feed.update({n: rng.standard_normal((b, s, half)).astype(np.float32)
                         for n in ("cos", "sin")})
        feeds.append(feed)
    return feeds


@pytest.mark.parametrize("packed", [False, True], ids=["heads", "packed"])
@pytest.mark.parametrize("interleaved", [0, 1], ids=["halves", "interleaved"])
@pytest.mark.parametrize("rotary", [None, 4], ids=["whole", "partial"])
@pytest.mark.parametrize("positions", [False, True], ids=["caches", "position_ids"])
def test_rotary_embedding_matches_onnxruntime(packed, interleaved, rotary, positions,
                                              tmp_path, signer):
    model = _rope_model(tmp_path / "r.onnx", packed=packed, interleaved=interleaved,
                        rotary=rotary, positions=positions)
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer,
                                golden_dims={"b": [2], "s": [3, 6]})
    ops = {n.op for n in loaded.graph.nodes}
    assert "embedding" in ops if positions else "embedding" not in ops
    assert all(n.name.startswith("rope/fn/") for n in loaded.graph.nodes)
    check_on_both_backends(model, loaded, _rope_feeds(packed=packed, rotary=rotary,
                                                      positions=positions))


def test_two_rotary_embeddings_share_no_values(tmp_path, signer):
    """The second node's body is named under it: the two do not collide."""
    model = _rope_model(tmp_path / "r.onnx", packed=False, interleaved=1, rotary=None,
                        positions=True, twice=True)
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer,
                                golden_dims={"b": [2], "s": [3]})
    names = [n.name for n in loaded.graph.nodes]
    assert any(n.startswith("rope/fn/") for n in names)
    assert any(n.startswith("rope2/fn/") for n in names)
    check_on_both_backends(model, loaded, _rope_feeds(packed=False, rotary=None,
                                                      positions=True))


def test_a_position_past_the_tables_is_refused_when_the_call_runs(tmp_path, signer):
    """A position id outside the 32 rows of the tables: an IndexRangeError, as onnxruntime
    refuses it too."""

    model = _rope_model(tmp_path / "r.onnx", packed=False, interleaved=0, rotary=None,
                        positions=True)
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer,
                                golden_dims={"b": [2], "s": [3]})
    feed = _rope_feeds(packed=False, rotary=None, positions=True)[1]
    feed["pos"][1, 2] = POSITIONS
    with pytest.raises(Exception, match="out of bounds|invalid|out of range"):
        onnxruntime_outputs(model, feed)
    index_refused_on_both_backends(loaded.graph, feed, r"rope/fn/.*32")


def _loss_model(path, op: str, attrs: dict, *, extra_dims: int, weights: bool,
                log_prob: bool = False):
    """``op`` of scores (3, 5[, 2]) and int64 targets (3[, 2]); with ``weights`` a constant
    per-class weight."""
    rest = [2] * extra_dims
    inputs = [helper.make_tensor_value_info("x", TP.FLOAT, [3, 5, *rest]),
              helper.make_tensor_value_info("t", TP.INT64, [3, *rest])]
    inits = [onnx.numpy_helper.from_array(np.linspace(0.5, 2, 5).astype(np.float32), "w")] \
        if weights else []
    shape = [3, *rest] if attrs.get("reduction") == "none" else []
    outputs = [helper.make_tensor_value_info("loss", TP.FLOAT, shape)]
    names = ["loss"]
    if log_prob:
        outputs.append(helper.make_tensor_value_info("log_prob", TP.FLOAT, [3, 5, *rest]))
        names.append("log_prob")
    node = helper.make_node(op, ["x", "t"] + (["w"] if weights else []), names, name="loss",
                            **attrs)
    return _save(path, [node], inputs, outputs, 13, inits)


LOSSES = {
    "sce_mean": ("SoftmaxCrossEntropyLoss", {"reduction": "mean"}, 0, False, False),
    "sce_sum_weighted": ("SoftmaxCrossEntropyLoss", {"reduction": "sum"}, 1, True, False),
    "sce_none_ignore_with_log_prob": ("SoftmaxCrossEntropyLoss",
                                      {"reduction": "none", "ignore_index": -100}, 1, False,
                                      True),
    "sce_mean_weighted_ignore": ("SoftmaxCrossEntropyLoss",
                                 {"reduction": "mean", "ignore_index": 2}, 0, True, False),
    "nll_mean": ("NegativeLogLikelihoodLoss", {"reduction": "mean"}, 1, False, False),
    "nll_none_weighted": ("NegativeLogLikelihoodLoss", {"reduction": "none"}, 0, True, False),
    "nll_sum_ignore": ("NegativeLogLikelihoodLoss", {"reduction": "sum", "ignore_index": 4},
                       1, True, False),
}


@pytest.mark.parametrize("case", list(LOSSES.values()), ids=list(LOSSES))
def test_losses_match_onnxruntime(case, tmp_path, signer):
    op, attrs, extra_dims, weights, log_prob = case
    model = _loss_model(tmp_path / "l.onnx", op, attrs, extra_dims=extra_dims,
                        weights=weights, log_prob=log_prob)
    _, loaded = import_and_load(model, tmp_path / "l.pha", signer)
    rng = np.random.default_rng(len(attrs) + extra_dims)
    rest = (2,) * extra_dims
    feeds = []
    for _ in range(3):
        target = rng.integers(0, 5, (3, *rest))
        if "ignore_index" in attrs:
            target.reshape(-1)[::2] = attrs["ignore_index"]
        feeds.append({"x": (rng.standard_normal((3, 5, *rest)) * 3).astype(np.float32),
                      "t": target})
    check_on_both_backends(model, loaded, feeds)


def test_a_target_outside_the_classes_is_refused_when_the_call_runs(tmp_path, signer):
    model = _loss_model(tmp_path / "l.onnx", "SoftmaxCrossEntropyLoss", {"reduction": "mean"},
                        extra_dims=0, weights=False)
    _, loaded = import_and_load(model, tmp_path / "l.pha", signer)
    feed = {"x": np.zeros((3, 5), np.float32), "t": np.array([0, 5, 1])}
    with pytest.raises(IndexRangeError, match=r"loss/fn/"):
        Executor(loaded.graph, NumpyBackend()).run(feed)


def test_causal_conv_with_state_matches_onnxruntime(tmp_path, signer):
    """Opset 27's depthwise causal convolution, its state carried from the last call."""
    inputs = [helper.make_tensor_value_info("x", TP.FLOAT, [1, 4, 6]),
              helper.make_tensor_value_info("state", TP.FLOAT, [1, 4, 2])]
    w = onnx.numpy_helper.from_array(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 1, 3),
                                     "w")
    node = helper.make_node("CausalConvWithState", ["x", "w", "", "state"], ["y", "next"],
                            name="conv")
    model = _save(tmp_path / "c.onnx", [node], inputs, [
        helper.make_tensor_value_info("y", TP.FLOAT, [1, 4, 6]),
        helper.make_tensor_value_info("next", TP.FLOAT, [1, 4, 2])], 27, [w])
    _, loaded = import_and_load(model, tmp_path / "c.pha", signer)
    rng = np.random.default_rng(2)
    check_on_both_backends(model, loaded, [
        {"x": rng.standard_normal((1, 4, 6)).astype(np.float32),
         "state": rng.standard_normal((1, 4, 2)).astype(np.float32)} for _ in range(3)])


def test_random_ops_are_refused_naming_the_node_not_their_body(tmp_path):
    """Bernoulli is a function of RandomUniformLike: refused as itself, saying why."""
    model = _save(tmp_path / "b.onnx", [helper.make_node("Bernoulli", ["x"], ["y"],
                                                         name="coin")],
                  [helper.make_tensor_value_info("x", TP.FLOAT, [3, 4])],
                  [helper.make_tensor_value_info("y", TP.FLOAT, [3, 4])], 15)
    assert_refused(model, UnsupportedModelError, "node 'coin' (Bernoulli)",
                   "op 'Bernoulli' is not supported (random numbers, which a model exported "
                   "in eval mode does not draw")


def test_a_use_onnx_writes_no_function_for_is_refused_naming_the_node(tmp_path):
    """RotaryEmbedding of a rank-2 x: ONNX's function builder gives nothing for it."""
    model = _save(tmp_path / "r.onnx", [helper.make_node("RotaryEmbedding", ["x", "x", "x"],
                                                         ["y"], name="rope")],
                  [helper.make_tensor_value_info("x", TP.FLOAT, [3, 4])],
                  [helper.make_tensor_value_info("y", TP.FLOAT, [3, 4])], 23)
    assert_refused(model, ModelFileError, "node 'rope' (RotaryEmbedding)",
                   "ONNX writes no function of RotaryEmbedding for these attributes and input "
                   "types")


@pytest.mark.parametrize("rule, extra", [
    ("linear", ()), ("gated", ("decay",)), ("delta", ("beta",)),
    ("gated_delta", ("decay", "beta")),
])
def test_linear_attention_through_its_function(rule, extra, tmp_path, signer):
    """LinearAttention (opset 27): its ONNX function is a Scan over the steps whose body reads
    values of the function's scope (the scale, the axes); with a past state, and the decay and
    beta its update rule takes."""
    b, s, hq, hkv, dk, dv = 1, 4, 2, 2, 3, 4
    shapes = {"q": (b, s, hq * dk), "k": (b, s, hkv * dk), "v": (b, s, hkv * dv),
              "past": (b, hkv, dk, dv), "decay": (b, s, hkv), "beta": (b, s, hkv)}
    names = ["q", "k", "v", "past", "decay" if "decay" in extra else "",
             "beta" if "beta" in extra else ""]
    while not names[-1]:
        names.pop()
    node = helper.make_node("LinearAttention", names, ["y", "state"], name="la",
                            q_num_heads=hq, kv_num_heads=hkv, update_rule=rule)
    inputs = [helper.make_tensor_value_info(n, TP.FLOAT, shapes[n]) for n in names if n]
    model = _save(tmp_path / "a.onnx", [node], inputs, [
        helper.make_tensor_value_info("y", TP.FLOAT, (b, s, hkv * dv)),
        helper.make_tensor_value_info("state", TP.FLOAT, (b, hkv, dk, dv))], 27)
    _, loaded = import_and_load(model, tmp_path / "a.pha", signer)
    assert [n.op for n in loaded.graph.nodes].count("matmul") >= s
    rng = np.random.default_rng(5)
    feeds = [{n: rng.standard_normal(shapes[n]).astype(np.float32) for n in names if n}
             for _ in range(2)]
    for feed in feeds:  # decay and beta are gates in (0, 1)
        for name in set(feed) & {"decay", "beta"}:
            feed[name] = 1 / (1 + np.exp(-feed[name]))
    check_on_both_backends(model, loaded, feeds)



def test_an_op_taken_through_its_function_is_not_listed_as_unsupported(tmp_path):
    """A refusal lists the model's other unsupported op types; one ONNX defines as a function
    is not among them."""
    x = helper.make_tensor_value_info("x", TP.FLOAT, [1, 3, 5, 8])
    cs = [helper.make_tensor_value_info(n, TP.FLOAT, [1, 5, 4]) for n in ("cos", "sin")]
    nodes = [helper.make_node("RotaryEmbedding", ["x", "cos", "sin"], ["r"], name="rope"),
             helper.make_node("Bernoulli", ["r"], ["y"], name="coin"),
             helper.make_node("StringNormalizer", ["y"], ["u"], name="u")]
    model = _save(tmp_path / "m.onnx", nodes, [x] + cs,
                  [helper.make_tensor_value_info("u", TP.FLOAT, ["k"])], 23)
    with pytest.raises(UnsupportedModelError) as info:
        import_onnx(model)
    head = str(info.value)
    assert head.startswith("node 'coin' (Bernoulli)"), head
    assert "StringNormalizer (1 node, 'u')" in head, head
    assert "RotaryEmbedding" not in head


def test_a_body_subgraph_renames_the_functions_names_as_onnx_scopes_them():
    """A subgraph of a function's body (an If's branch) reads the function's x and w: x beside
    a Loop whose body carries a value of its own named x (which stays, inside the Loop), w in
    an If nested in the branch (renamed once, not once per level)."""
    from plugin_host.onnx_import.functions import _subgraph

    def vi(name, dtype=TP.FLOAT):
        return helper.make_tensor_value_info(name, dtype, None)

    loop_body = helper.make_graph(
        [helper.make_node("Identity", ["cond"], ["c2"]), helper.make_node("Neg", ["x"], ["x2"])],
        "loop", [vi("i", TP.INT64), vi("cond", TP.BOOL), vi("x")], [vi("c2", TP.BOOL), vi("x2")])
    inner = helper.make_graph([helper.make_node("Relu", ["w"], ["iw"])], "inner", [],
                              [vi("iw")])
    branch = helper.make_graph(
        [helper.make_node("Abs", ["x"], ["a"]),
         helper.make_node("Loop", ["", "b", "a"], ["l"], body=loop_body),
         helper.make_node("If", ["b"], ["n"], then_branch=inner, else_branch=inner)],
        "branch", [], [vi("l"), vi("n")])
    copy = _subgraph(helper.make_node("Op", [], []), branch, {}, {},
                     lambda name: f"fn/{name}")
    assert list(copy.node[0].input) == ["fn/x"]
    assert list(copy.node[1].input) == ["", "fn/b", "a"]
    body = copy.node[1].attribute[0].g
    assert list(body.node[1].input) == ["x"] and body.input[2].name == "x"
    for a in copy.node[2].attribute:
        assert list(a.g.node[0].input) == ["fn/w"]
