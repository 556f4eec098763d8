"""ONNX's Attention (opset 23), as torch's dynamo exporter writes scaled_dot_product_attention,
MultiheadAttention and the transformer layers at opset 23, and hand-made nodes for what torch
does not write (rank-3 inputs with head counts, a key and value cache, softcap, the present
outputs; opset 24's per-batch cache lengths, opset 25's sliding windows): decomposed at import
and compared with onnxruntime on both backends."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from plugin_host.errors import ModelFileError, UnsupportedModelError
from plugin_host.executor import Executor
from plugin_host.onnx_import import import_onnx
from plugins.numpy_backend import NumpyBackend
from plugins.onnxruntime_backend import OnnxruntimeBackend

from .conftest import (assert_refused, check_on_both_backends, import_and_load, onnx,
                       onnxruntime_outputs, torch)

F = torch.nn.functional
RNG = np.random.default_rng(23)


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


class _Call(torch.nn.Module):
    def __init__(self, fn, **modules):
        super().__init__()
        self.fn = fn
        for name, module in modules.items():
            setattr(self, name, module)

    def forward(self, *args):
        return self.fn(self, *args)


_TORCH = {
    "plain": (lambda s, q, k, v: F.scaled_dot_product_attention(q, k, v),
              [(2, 2, 5, 8), (2, 2, 7, 8), (2, 2, 7, 4)]),
    "causal": (lambda s, q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
               [(2, 2, 5, 8)] * 3),
    "causal-fewer-queries": (
        lambda s, q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        [(2, 2, 3, 8), (2, 2, 6, 8), (2, 2, 6, 8)]),
    "scale": (lambda s, q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.3),
              [(2, 2, 5, 8)] * 3),
    "float-mask": (lambda s, q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                   [(2, 2, 5, 8), (2, 2, 6, 8), (2, 2, 6, 8), (2, 1, 5, 6)]),
    "bool-mask": (lambda s, q, k, v, m: F.scaled_dot_product_attention(q, k, v,
                                                                        attn_mask=m > -1.5),
                  [(2, 2, 5, 8), (2, 2, 6, 8), (2, 2, 6, 8), (2, 1, 5, 6)]),
    "grouped-query": (lambda s, q, k, v: F.scaled_dot_product_attention(q, k, v,
                                                                         enable_gqa=True),
                      [(2, 4, 5, 8), (2, 2, 5, 8), (2, 2, 5, 8)]),
    "multihead": (lambda s, x: s.m(x, x, x, need_weights=False)[0], [(2, 5, 16)],
                  {"m": lambda: torch.nn.MultiheadAttention(16, 2, batch_first=True)}),
    "decoder-layer": (lambda s, x, mem: s.m(x, mem), [(2, 4, 16), (2, 6, 16)],
                      {"m": lambda: torch.nn.TransformerDecoderLayer(
                          16, 2, 32, dropout=0.0, batch_first=True)}),
}


@pytest.mark.parametrize("case", list(_TORCH))
def test_torch_attention_at_opset_23_matches_onnxruntime(case, tmp_path, signer):
    """Exported with a run-time batch; the batch 2 example and batches 1 and 3 are checked."""
    fn, shapes, *modules = _TORCH[case]
    torch.manual_seed(0)
    module = _Call(fn, **{k: make() for k, make in (modules[0] if modules else {}).items()})
    args = tuple(torch.from_numpy(_f32(*s)) for s in shapes)
    names = [f"in{i}" for i in range(len(args))]
    batch = torch.export.Dim("batch", min=1, max=8)
    path = tmp_path / "a.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), args, dynamo=True, opset_version=23, verbose=False,
                          input_names=names, output_names=["y"],
                          dynamic_shapes=(tuple({0: batch} for _ in args),)).save(str(path))
    assert "Attention" in {n.op_type for n in onnx.load(path).graph.node}
    _, loaded = import_and_load(path, tmp_path / "a.pha", signer)
    check_on_both_backends(path, loaded, [
        {n: _f32(b, *s[1:]) for n, s in zip(names, shapes)} for b in (1, 2, 3)])


def _node_model(path, shapes: dict, outputs: list, opset: int = 23, **attrs):
    """One Attention node named "attn" over float32 inputs ``shapes`` (name -> shape, in the
    node's input order; a "mask" ending in "?" is bool; "nonpad" is int64), opset 23."""
    helper, tp = onnx.helper, onnx.TensorProto
    order = ["Q", "K", "V", "mask", "past_key", "past_value", "nonpad"]
    ins = [n if n in shapes or n + "?" in shapes else "" for n in order]
    while ins and not ins[-1]:
        ins.pop()
    values = [helper.make_tensor_value_info(
        n.rstrip("?"), tp.BOOL if n.endswith("?") else tp.INT64 if n == "nonpad" else tp.FLOAT,
        list(s)) for n, s in shapes.items()]
    node = helper.make_node("Attention", ins, outputs, name="attn", **attrs)
    rank = len(shapes["Q"])
    graph = helper.make_graph([node], "g", values, [
        helper.make_tensor_value_info(o, tp.FLOAT, [f"{o}{j}" for j in range(
            rank if o == "y" else 4)]) for o in outputs if o])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), path)
    return path


def _feed(shapes: dict, nonpad=None) -> dict:
    return {n.rstrip("?"): (_f32(*s) > -1.0) if n.endswith("?") else
            np.asarray(nonpad, np.int64) if n == "nonpad" else _f32(*s)
            for n, s in shapes.items()}


@pytest.mark.parametrize("shapes, outputs, attrs", [
    # rank 3, grouped-query: 4 query heads over 2 key/value heads of size 4
    ({"Q": (2, 5, 16), "K": (2, 6, 8), "V": (2, 6, 12)}, ["y"],
     {"q_num_heads": 4, "kv_num_heads": 2}),
    # a cache: the present key and value, causal to the bottom right of it
    ({"Q": (1, 2, 3, 8), "K": (1, 2, 3, 8), "V": (1, 2, 3, 8), "past_key": (1, 2, 4, 8),
      "past_value": (1, 2, 4, 8)}, ["y", "present_key", "present_value"], {"is_causal": 1}),
    # softcap, a bool mask and the causal bias together
    ({"Q": (2, 2, 4, 8), "K": (2, 2, 4, 8), "V": (2, 2, 4, 8), "mask?": (4, 4)}, ["y"],
     {"softcap": 2.0, "is_causal": 1, "scale": 0.5}),
    # the present outputs without a cache are K and V
    ({"Q": (1, 2, 3, 8), "K": (1, 2, 5, 8), "V": (1, 2, 5, 8)},
     ["y", "present_key", "present_value"], {}),
])
def test_attention_nodes_match_onnxruntime(shapes, outputs, attrs, tmp_path, signer):
    model = _node_model(tmp_path / "n.onnx", shapes, outputs, **attrs)
    _, loaded = import_and_load(model, tmp_path / "n.pha", signer)
    check_on_both_backends(model, loaded, [_feed(shapes) for _ in range(2)])


@pytest.mark.parametrize("mask, attrs", [("mask", {}), ("mask?", {"is_causal": 1}),
                                         ("mask", {"softcap": 3.0, "qk_matmul_output_mode": 2}),
                                         ("mask?", {"qk_matmul_output_mode": 3})])
@pytest.mark.parametrize("shape", [(2, 1, 4, 3), (4, 1)])
def test_a_mask_shorter_than_the_keys_is_padded_by_minus_infinity(mask, attrs, shape, tmp_path):
    """The spec's rule, which ONNX's reference and the function body follow (onnxruntime's
    kernel refuses such a mask, so a build, whose golden vectors it computes, does too): the
    reference is onnxruntime on the same node given the mask padded by hand to every key (by
    -inf, or false)."""
    keys = 6
    shapes = {"Q": (2, 2, 4, 8), "K": (2, 2, keys, 8), "V": (2, 2, keys, 8), mask: shape}
    outputs = ["y", "", "", "qk"] if "qk_matmul_output_mode" in attrs else ["y"]
    model = _node_model(tmp_path / "n.onnx", shapes, outputs, opset=24, **attrs)
    full = _node_model(tmp_path / "full.onnx", {**shapes, mask: (*shape[:-1], keys)}, outputs,
                       opset=24, **attrs)
    graph = import_onnx(model).graph
    for _ in range(2):
        feed = _feed(shapes)
        padding = [(0, 0)] * (len(shape) - 1) + [(0, keys - shape[-1])]
        want = onnxruntime_outputs(full, {**feed, "mask": np.pad(
            feed["mask"], padding, constant_values=False if "?" in mask else -np.inf)})
        for backend in (NumpyBackend(), OnnxruntimeBackend()):
            got = Executor(graph, backend).run(feed)
            for name, value in want.items():
                np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6,
                                           err_msg=f"{backend.name}: {name}")


def test_a_mask_longer_than_the_keys_is_refused(tmp_path):
    shapes = {"Q": (1, 2, 3, 8), "K": (1, 2, 4, 8), "V": (1, 2, 4, 8), "mask": (3, 5)}
    assert_refused(_node_model(tmp_path / "n.onnx", shapes, ["y"]), ModelFileError,
                   "node 'attn' (Attention)", "attn_mask's last dim 5 is longer than the 4 keys")


@pytest.mark.parametrize("causal", [0, 1])
def test_a_row_the_mask_leaves_no_key_is_zero(causal, tmp_path, signer):
    """As onnxruntime (and the spec): not the nan a softmax over -inf alone gives."""
    shapes = {"Q": (1, 2, 3, 4), "K": (1, 2, 3, 4), "V": (1, 2, 3, 4), "mask?": (3, 3)}
    model = _node_model(tmp_path / "n.onnx", shapes, ["y"], is_causal=causal)
    _, loaded = import_and_load(model, tmp_path / "n.pha", signer)
    feed = _feed(shapes)
    feed["mask"] = np.array([[False, True, True], [True, True, True], [False] * 3])
    check_on_both_backends(model, loaded, [feed])
    y = Executor(loaded.graph, NumpyBackend()).run(feed)["y"]
    assert not y[0, :, 2].any() and (y[0, :, 0].any() != bool(causal))


def test_attention_over_a_run_time_sequence(tmp_path, signer):
    shapes = {"Q": (1, 2, "t", 8), "K": (1, 2, "s", 8), "V": (1, 2, "s", 8)}
    model = _node_model(tmp_path / "n.onnx", shapes, ["y"])
    _, loaded = import_and_load(model, tmp_path / "n.pha", signer,
                                golden_dims={"t": [3, 1], "s": [2, 5]})
    check_on_both_backends(model, loaded, [
        _feed({"Q": (1, 2, t, 8), "K": (1, 2, s, 8), "V": (1, 2, s, 8)})
        for t, s in ((1, 1), (4, 6))])


_WINDOWS = [(left, right, causal) for left in (-1, 0, 2) for right in (-1, 0, 1)
            for causal in (0, 1) if (left, right) != (-1, -1)]


@pytest.mark.parametrize("left, right, causal", _WINDOWS)
@pytest.mark.parametrize("shapes", [
    {"Q": (2, 2, 4, 8), "K": (2, 2, 6, 8), "V": (2, 2, 6, 4)},
    # more queries than keys: with a window of no key to the right the last query sees none
    {"Q": (1, 2, 5, 8), "K": (1, 2, 3, 8), "V": (1, 2, 3, 8), "mask": (5, 3)},
    # a cache: queries at positions 3, 4 and 5
    {"Q": (1, 2, 3, 8), "K": (1, 2, 3, 8), "V": (1, 2, 3, 8), "past_key": (1, 2, 3, 8),
     "past_value": (1, 2, 3, 8)},
], ids=["keys", "queries-past-keys", "cache"])
def test_a_sliding_window_matches_onnxruntime(shapes, left, right, causal, tmp_path, signer):
    """Opset 25: the query at position p sees keys p - left to p + right (-1: unbounded),
    with is_causal also none after p; a query that sees no key gives zeros."""
    outputs = ["y", "present_key", "present_value"] if "past_key" in shapes else ["y"]
    model = _node_model(tmp_path / "n.onnx", shapes, outputs, opset=25, is_causal=causal,
                        left_window_size=left, right_window_size=right)
    _, loaded = import_and_load(model, tmp_path / "n.pha", signer)
    check_on_both_backends(model, loaded, [_feed(shapes) for _ in range(2)])
    queries, keys = shapes["Q"][2], shapes["K"][2]
    if "past_key" not in shapes:
        p = np.arange(queries)  # no key to see from p - left on: zeros, else not
        blind = (p - left > keys - 1) if left >= 0 else np.zeros(queries, bool)
        y = Executor(loaded.graph, NumpyBackend()).run(_feed(shapes))["y"][0]
        assert (~y.any(axis=(0, 2)) == blind).all()


@pytest.mark.parametrize("lengths", [[4, 6], [0, 3], [6, 6]])
@pytest.mark.parametrize("attrs", [{}, {"is_causal": 1}, {"left_window_size": 1},
                                   {"is_causal": 1, "left_window_size": 2,
                                    "right_window_size": 0}],
                         ids=["padding", "causal", "window", "causal-window"])
def test_per_batch_cache_lengths_match_onnxruntime(attrs, lengths, tmp_path, signer):
    """Opset 24's nonpad_kv_seqlen (opset 25 with a window): the keys from each batch entry's
    length on are padding, and the queries are the last of its cache (a causal query at i sits
    at i + length - queries, so with 3 queries and length 0 every query sees no key: zeros)."""
    shapes = {"Q": (2, 2, 3, 8), "K": (2, 2, 6, 8), "V": (2, 2, 6, 4), "nonpad": (2,)}
    opset = 25 if any(k.endswith("window_size") for k in attrs) else 24
    model = _node_model(tmp_path / "n.onnx", shapes, ["y"], opset=opset, **attrs)
    _, loaded = import_and_load(model, tmp_path / "n.pha", signer)
    feeds = [_feed(shapes, lengths) for _ in range(2)]
    check_on_both_backends(model, loaded, feeds)
    if lengths[0] == 0:
        assert not Executor(loaded.graph, NumpyBackend()).run(feeds[0])["y"][0].any()


@pytest.mark.parametrize("shapes, attrs", [
    ({"Q": ("b", 3, 16), "K": ("b", 5, 16), "V": ("b", 5, 16), "nonpad": ("b",)},
     {"q_num_heads": 2, "kv_num_heads": 2, "is_causal": 1}),
    ({"Q": ("b", 2, 3, 8), "K": ("b", 2, 5, 8), "V": ("b", 2, 5, 8), "mask?": (3, 5),
      "nonpad": ("b",)}, {}),
], ids=["rank-3-causal", "bool-mask"])
def test_cache_lengths_over_a_run_time_batch(shapes, attrs, tmp_path, signer):
    model = _node_model(tmp_path / "n.onnx", shapes, ["y"], opset=24, **attrs)
    _, loaded = import_and_load(model, tmp_path / "n.pha", signer)
    check_on_both_backends(model, loaded, [
        _feed({n: tuple(b if d == "b" else d for d in s) for n, s in shapes.items()},
              lengths) for b, lengths in ((1, [2]), (3, [5, 0, 3]))])


@pytest.mark.parametrize("backend", ["numpy", "onnxruntime"])
@pytest.mark.parametrize("bad", [7, -1])
def test_a_cache_length_outside_the_keys_is_refused_when_it_arrives(bad, backend, tmp_path,
                                                                    signer):
    """onnxruntime refuses it too; here it is an IndexRangeError naming the node on either
    backend, and nothing is returned."""
    from abi.errors import IndexRangeError
    from plugins.onnxruntime_backend import OnnxruntimeBackend

    shapes = {"Q": (2, 2, 3, 8), "K": (2, 2, 6, 8), "V": (2, 2, 6, 8), "nonpad": (2,)}
    model = _node_model(tmp_path / "n.onnx", shapes, ["y"], opset=24, is_causal=1)
    _, loaded = import_and_load(model, tmp_path / "n.pha", signer)
    executor = Executor(loaded.graph, {"numpy": NumpyBackend,
                                       "onnxruntime": OnnxruntimeBackend}[backend]())
    executor.run(_feed(shapes, [0, 6]))  # the ends of the range: fine
    with pytest.raises(IndexRangeError,
                       match=rf"'attn/nonpad_check'.*outside \[0, 7\): \(1,\)={bad}"):
        executor.run(_feed(shapes, [3, bad]))


_SCORES = {  # configurations of the scores: every mode's value differs from the others'
    "mask-softcap-causal": ({"Q": (2, 2, 4, 8), "K": (2, 2, 4, 8), "V": (2, 2, 4, 8),
                             "mask": (4, 4)}, {"softcap": 2.0, "is_causal": 1}, 24),
    "cache-window": ({"Q": (1, 2, 3, 8), "K": (1, 2, 3, 8), "V": (1, 2, 3, 8),
                      "past_key": (1, 2, 2, 8), "past_value": (1, 2, 2, 8), "mask?": (3, 5)},
                     {"is_causal": 1, "left_window_size": 1, "softcap": 3.0}, 25),
    "lengths-causal": ({"Q": (2, 2, 3, 8), "K": (2, 2, 5, 8), "V": (2, 2, 5, 8),
                        "nonpad": (2,)}, {"is_causal": 1}, 24),
    "rank-3-grouped": ({"Q": (2, 3, 16), "K": (2, 4, 8), "V": (2, 4, 8), "mask?": (3, 4)},
                       {"q_num_heads": 4, "kv_num_heads": 2, "softcap": 1.5}, 23),
}


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
@pytest.mark.parametrize("config", list(_SCORES))
def test_the_scores_output_matches_onnxruntime(config, mode, tmp_path, signer):
    """qk_matmul_output: the scaled QK product (mode 0), after the softcap (1), after the mask
    and the keys each query sees (2), the softmax (3); a row of a query that sees no key (the
    first query of a batch entry with 2 of 5 keys, below) is 0 in mode 3."""
    shapes, attrs, opset = _SCORES[config]
    outputs = ["y", "pk", "pv", "qk"] if "past_key" in shapes else ["y", "", "", "qk"]
    model = _node_model(tmp_path / "n.onnx", shapes, outputs, opset=opset,
                        qk_matmul_output_mode=mode, **attrs)
    _, loaded = import_and_load(model, tmp_path / "n.pha", signer)
    feeds = [_feed(shapes, [2, 5]), _feed(shapes, [5, 0])]
    check_on_both_backends(model, loaded, feeds)
    if config == "lengths-causal" and mode == 3:
        qk = Executor(loaded.graph, NumpyBackend()).run(feeds[0])["qk"]
        assert not qk[0, :, 0].any() and qk[0, :, 1:].sum(axis=-1) == pytest.approx(1)


@pytest.mark.parametrize("opset, hidden", [(24, np.finfo(np.float32).min), (25, -np.inf)])
def test_a_hidden_key_in_the_masked_scores_is_as_onnxruntime_writes_it(opset, hidden, tmp_path,
                                                                       signer):
    """Mode 2: where the causal bias or a bool mask hides a key, onnxruntime's Attention of
    opsets 23 and 24 writes float32's lowest (a float mask's -inf too, where the causal bias
    hides it), that of opset 25 the spec's -inf; a float mask's -inf elsewhere is -inf."""
    for kind, hides in (("mask", [(0, 0), (1, 2)]), ("mask?", [(0, 1), (2, 0)])):
        shapes = {"Q": (1, 1, 3, 4), "K": (1, 1, 3, 4), "V": (1, 1, 3, 4), kind: (3, 3)}
        model = _node_model(tmp_path / "n.onnx", shapes, ["y", "", "", "qk"], opset=opset,
                            is_causal=1, qk_matmul_output_mode=2)
        _, loaded = import_and_load(model, tmp_path / "n.pha", signer)
        feed = _feed(shapes)
        feed["mask"] = np.ones((3, 3), bool) if kind == "mask?" else np.zeros((3, 3), np.float32)
        for i, j in hides:
            feed["mask"][i, j] = False if kind == "mask?" else -np.inf
        check_on_both_backends(model, loaded, [feed])
        qk = Executor(loaded.graph, NumpyBackend()).run(feed)["qk"][0, 0]
        causal = np.triu(np.ones((3, 3), bool), 1)
        assert (qk[causal] == hidden).all()
        for i, j in hides:
            assert qk[i, j] == (-np.inf if kind == "mask" and not causal[i, j] else hidden)
        scores = ~causal
        scores[tuple(zip(*hides))] = False
        assert (np.abs(qk[scores]) < 100).all()


@pytest.mark.parametrize("precision", [10, 11, 16])
def test_the_softmax_is_float32_whatever_precision_it_names(precision, tmp_path, signer):
    """As onnxruntime computes it: the same outputs as softmax_precision 1 (float32)."""
    shapes = {"Q": (1, 2, 4, 8), "K": (1, 2, 4, 8), "V": (1, 2, 4, 8)}
    model = _node_model(tmp_path / "n.onnx", shapes, ["y", "", "", "qk"], opset=24,
                        softmax_precision=precision, qk_matmul_output_mode=3)
    _, loaded = import_and_load(model, tmp_path / "n.pha", signer)
    check_on_both_backends(model, loaded, [_feed(shapes)])


@pytest.mark.parametrize("shapes, attrs, message", [
    ({"Q": (1, 2, 3, 8), "K": (1, 2, 3, 8), "V": (1, 2, 3, 8)}, {"qk_matmul_output_mode": 4},
     "attribute qk_matmul_output_mode=4 must be 0 (the scaled QK product), 1 (after the "
     "softcap), 2 (after the mask) or 3 (after the softmax)"),
    ({"Q": (1, 2, 3, 8), "K": (1, 2, 3, 8), "V": (1, 2, 3, 8)}, {"softmax_precision": 7},
     "attribute softmax_precision=7 must name a float type"),
    ({"Q": (1, 2, 3, 8), "K": (1, 2, 3, 8), "V": (1, 2, 3, 8), "past_key": (1, 2, 3, 8),
      "past_value": (1, 2, 3, 8), "nonpad": (1,)}, {},
     "nonpad_kv_seqlen cannot be combined with past_key and past_value"),
    ({"Q": (1, 2, 3, 8), "K": (1, 2, 3, 8), "V": (1, 2, 3, 8)}, {"left_window_size": -2},
     "attribute left_window_size=-2 must be -1 (unbounded) or a number of positions >= 0"),
], ids=["mode", "precision", "cache-and-lengths", "window"])
def test_attention_inputs_the_spec_forbids_are_refused(shapes, attrs, message, tmp_path):
    outputs = ["y", "pk", "pv"] if "past_key" in shapes else ["y"]
    model = _node_model(tmp_path / "n.onnx", shapes, outputs, opset=25, **attrs)
    assert_refused(model, ModelFileError, "node 'attn' (Attention)", message)


@pytest.mark.parametrize("shapes, outputs, attrs, message", [
    ({"Q": (1, 2, "t", 8), "K": (1, 2, "t", 8), "V": (1, 2, "t", 8)}, ["y"], {"is_causal": 1},
     "is_causal over run-time sequence lengths ('t' queries, 't' keys)"),
    ({"Q": (1, 2, "t", 8), "K": (1, 2, "t", 8), "V": (1, 2, "t", 8)}, ["y"],
     {"left_window_size": 1, "opset": 25},
     "a window over run-time sequence lengths ('t' queries, 't' keys)"),
    ({"Q": (1, 2, 3, 8), "K": (1, 2, "t", 8), "V": (1, 2, "t", 8), "nonpad": (1,)}, ["y"],
     {"opset": 24}, "nonpad_kv_seqlen over run-time sequence lengths (3 queries, 't' keys)"),
    ({"Q": (1, 3, 4, 8), "K": (1, 2, 4, 8), "V": (1, 2, 4, 8)}, ["y"], {},
     "3 query heads are not a multiple of 2 key and value heads"),
    ({"Q": (1, 4, 10), "K": (1, 4, 10), "V": (1, 4, 10)}, ["y"],
     {"q_num_heads": 3, "kv_num_heads": 3}, "Q's hidden size 10 is not a multiple of 3 heads"),
    ({"Q": (1, 4, 12), "K": (1, 4, 12), "V": (1, 4, 12)}, ["y"], {},
     "Q, K and V of rank 3 need q_num_heads and kv_num_heads"),
    ({"Q": (1, 2, 3, 8), "K": (1, 2, 4, 8), "V": (1, 2, 4, 8), "mask": ()}, ["y"], {},
     "attn_mask 'mask' is 0-d: neither onnxruntime's kernel nor the op's function body"),
])
def test_what_the_decomposition_does_not_take_is_refused(shapes, outputs, attrs, message,
                                                         tmp_path):
    model = _node_model(tmp_path / "n.onnx", shapes, outputs, **attrs)
    assert_refused(model, UnsupportedModelError, "node 'attn' (Attention)", message)
