"""A transformer exported with a dynamic batch and sequence length: its reshapes keep both
run-time dims and split or merge the fixed ones between them (the heads of an attention), its
causal mask is a Trilu over (seq, seq), and it reads the last step's logits. These import
(``flatten`` and ``unflatten`` steps, a mask from run-time positions) and take any batch and
length, on both backends."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from plugin_host.errors import ModelFileError, ModelImportError, UnsupportedModelError
from plugin_host.onnx_import.symbolic import counts_differ, regroup

from .conftest import (Fn, check_against_onnxruntime, check_on_both_backends, import_and_load,
                       onnx, onnxruntime_outputs, torch)

F = torch.nn.functional


@pytest.mark.parametrize("in_shape, target, steps", [
    (["b", "s", 48], ["b", "s", 3, 2, 8], [("unflatten", 2, [3, 2, 8])]),
    (["b", "s", 2, 8], ["b", "s", 16], [("flatten", 2, 3)]),
    (["b", "s", 16], ["b", "s", 4, -1], [("unflatten", 2, [4, 4])]),
    (["b", "s", 16], ["b", 1, "s", 16], [("unflatten", 1, [1, -1])]),  # unsqueeze(1)
    (["b", 1, "s", 16], ["b", "s", 16], [("flatten", 1, 2)]),
    (["b", "s", 16], [1, "b", "s", 16], [("unflatten", 0, [1, -1])]),
    ([1, "b", "s", 16], ["b", "s", 16], [("flatten", 0, 1)]),
    ([2, 3, "b", "s", 16], [6, "b", "s", 2, 8, 1],
     [("unflatten", 4, [2, 8, 1]), ("flatten", 0, 1)]),
    (["b", "s", 16], ["b", "s", 16], []),
    (["b", "s"], ["b", "s", 1], [("unflatten", 1, [-1, 1])]),
    # torch's MultiheadAttention: the heads folded into the batch and back
    (["s", "b", 16], ["s", "b*2", 8], [("flatten", 1, 2), ("unflatten", 1, [-1, 8])]),
    (["s", "(16*b)//8", 8], ["s", "b", 16], [("flatten", 1, 2), ("unflatten", 1, [-1, 16])]),
    (["b", 2, "s", 8], [-1, "s", 8], [("flatten", 0, 1)]),  # the -1 is b*2
    # a conv's run-time output dims, flattened as tokens
    (["b", 8, "(h-2)//2+1", "(w-2)//2+1"], ["b", 8, "((h-2)//2+1)*((w-2)//2+1)"],
     [("flatten", 2, 3)]),
    # back to the batch and length after a linear over (seq*batch, 16): each read at run time
    (["s*b", 16], ["s", "b", 16], [("unflatten", 0, ["s", "b"])]),
    (["b*s", 16], ["b", "s*2", 8], [("flatten", 0, 1), ("unflatten", 0, ["b", "s*2", 8])]),
    # a -1 that is no product of the dims (h/2: pixel_unshuffle): left to the call
    (["b", 8, "h", 1, "w"], ["b", 8, -1, 2, "w"], [("flatten", 2, 3), ("unflatten", 2, [-1, 2])]),
    (["b", "h", "w"], [-1, 2, "w"], [("flatten", 0, 1), ("unflatten", 0, [-1, 2])]),
    # no groups of equal products: what differs goes through one axis, row-major
    (["b", 6, "s", 4], ["b", 3, "s", 8], [("flatten", 1, 3), ("unflatten", 1, [3, "s", 8])]),
    (["b", "s", 16], ["s", "b", 16], [("flatten", 0, 1), ("unflatten", 0, ["s", "b"])]),
    # YOLO12's area attention: the tokens split into 4 areas folded into the batch, and back
    (["b", "h*w", 24], ["b*4", "(h*w)//4", 24],
     [("flatten", 0, 1), ("unflatten", 0, ["b*4", "(h*w)//4"])]),
    (["4*b", "(w*h)//4", 2, 12], ["b", "h", "w", 24],
     [("flatten", 0, 3), ("unflatten", 0, ["b", "h", "w", 24])]),
])
def test_regroup_plans_flatten_and_unflatten_steps(in_shape, target, steps):
    assert regroup(in_shape, target) == steps


#: a feature pyramid's dim, an upsampled coarse map's broadcast with the finer one's
_LONG_H, _LONG_W = (f"broadcast(((((((({d}-2)//2-1)//2-1)//2-1)//2-1)//2+1)*2,((((({d}-2)//2-1)"
                    f"//2-1)//2-1)//2-1)//2+1)" for d in ("height", "width"))


@pytest.mark.parametrize("in_shape, target, counts", [
    (["seq", "batch", 16], [5, "batch*2", 8], ("16*batch*seq", "80*batch")),
    (["seq", "batch", 16], ["seq", "batch*2", 8], None),
    (["(16*b)//8", 8], ["b", 16], None),  # the same 16*b, written two ways
    (["(H-4)//4+1", "W"], ["H//4", "W"], None),  # a conv's size, as an exporter writes it
    (["s+1", 4], ["s", 4], None),  # a sum may equal anything: never "different"
    (["b", 6, 4], ["b", 18], None),  # wrong at every size but 0: reshape_target's refusal
    # a GroupNorm after a feature pyramid's add (EfficientNet-FPN): the product of its two
    # broadcast dims is too long to write out and gets a hashed name, yet the same product
    (["b", 32, f"4*({_LONG_H})*({_LONG_W})"], ["b", 128, _LONG_H, _LONG_W], None),
    (["expr_0123456789abcdef", 4], ["expr_fedcba9876543210", 4], None),  # opaque, not names
])
def test_counts_differ_only_where_sizes_exist_at_which_they_do(in_shape, target, counts):
    assert counts_differ(in_shape, target) == counts


def test_regroup_refuses_a_minus_one_that_does_not_divide():
    with pytest.raises(ModelFileError, match=r"cannot reshape \['b', 's', 16\] to \['b', 's', 3, "
                                             r"-1\]: the -1 is not a whole part of the input"):
        regroup(["b", "s", 16], ["b", "s", 3, -1])


class _Decoder(torch.nn.Module):
    """Token and learned position embeddings, causal attention over two heads, the last
    step's logits; ``mode`` picks how the attention is written."""

    def __init__(self, mode: str):
        super().__init__()
        self.mode = mode
        self.tok, self.pos = torch.nn.Embedding(50, 16), torch.nn.Embedding(32, 16)
        self.qkv, self.out = torch.nn.Linear(16, 48), torch.nn.Linear(16, 16)
        self.norm, self.head = torch.nn.LayerNorm(16), torch.nn.Linear(16, 50)

    def forward(self, ids):
        n, t = ids.shape
        x = self.tok(ids) + self.pos(torch.arange(t))
        if self.mode == "sdpa":  # heads split and merged by view; is_causal's Trilu
            q, k, v = self.qkv(x).view(n, t, 3, 2, 8).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.out(a.transpose(1, 2).reshape(n, t, 16))
        else:  # an additive causal mask from triu
            mask = torch.triu(torch.full((t, t), float("-inf")), 1)
            x = x + torch.softmax(x @ x.transpose(1, 2) / 4.0 + mask, -1) @ x
        return self.head(self.norm(x)[:, -1])


def _export(module, path, *, dynamo: bool):
    ids = torch.randint(0, 50, (2, 7))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            torch.onnx.export(module.eval(), (ids,), dynamo=True, verbose=False,
                              input_names=["ids"], output_names=["y"],
                              dynamic_shapes=({0: torch.export.Dim("batch"),
                                               1: torch.export.Dim("seq", max=32)},)
                              ).save(str(path))
        else:
            torch.onnx.export(module.eval(), (ids,), str(path), dynamo=False,
                              input_names=["ids"], output_names=["y"],
                              dynamic_axes={"ids": {0: "batch", 1: "seq"}})
    return path


@pytest.mark.parametrize("mode, dynamo", [("mask", False), ("mask", True), ("sdpa", False),
                                         ("sdpa", True)],
                         ids=["mask-legacy", "mask-dynamo", "sdpa-legacy", "sdpa-dynamo"])
def test_a_decoder_takes_any_batch_and_length(mode, dynamo, tmp_path, signer):
    model = _export(_Decoder(mode), tmp_path / "d.onnx", dynamo=dynamo)
    _, loaded = import_and_load(model, tmp_path / "d.pha", signer)
    assert loaded.graph.inputs[0].shape == ("batch", "seq")
    ops = {n.op for n in loaded.graph.nodes}
    assert "cumsum" in ops and ops & {"greater_equal", "less_equal"}, ops  # the mask
    assert mode != "sdpa" or {"unflatten", "flatten"} <= ops, ops  # the heads
    rng = np.random.default_rng(8)
    feeds = [{"ids": rng.integers(0, 50, (b, n))} for b, n in ((1, 1), (3, 5), (2, 32))]
    check_on_both_backends(model, loaded, feeds)


@pytest.mark.parametrize("fn", [
    lambda x: torch.triu(x, 1), lambda x: torch.tril(x), lambda x: torch.tril(x, -2),
    lambda x: torch.triu(x, -1) * 2.0], ids=["triu1", "tril", "tril-2", "triu-1"])
def test_trilu_over_run_time_dims(fn, tmp_path, signer):
    """Over (batch, rows, cols), all three run-time, rows and cols of different sizes."""
    model = tmp_path / "t.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Fn(fn).eval(), (torch.randn(2, 4, 5),), str(model), dynamo=False,
                          input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "b", 1: "r", 2: "c"},
                                        "y": {0: "b", 1: "r", 2: "c"}})
    _, loaded = import_and_load(model, tmp_path / "t.pha", signer)
    rng = np.random.default_rng(9)
    feeds = [{"x": rng.standard_normal(s).astype(np.float32)}
             for s in ((1, 1, 1), (2, 3, 6), (3, 7, 2))]
    feeds[1]["x"][0, 0, :2] = [np.nan, np.inf]
    check_on_both_backends(model, loaded, feeds)


def test_a_reshape_that_moves_elements_across_a_run_time_dim_matches_onnxruntime(tmp_path,
                                                                                signer):
    """``(b, 6, s, 4)`` to ``(b, 3, s, 8)`` and ``(b, s, 4)`` to ``(s, b, 4)`` (a reshape,
    not a transpose): the axes that differ are flattened into one and unflattened into the
    target's, the run-time sizes read from the input, as onnxruntime's row-major Reshape."""
    helper, TP = onnx.helper, onnx.TensorProto
    def ints(name, value):
        return helper.make_node("Constant", [], [name], value=helper.make_tensor(
            name, TP.INT64, [1], [value]))

    nodes = [helper.make_node("Shape", ["x"], ["shape"]), ints("i0", 0), ints("i2", 2),
             ints("three", 3), ints("four", 4), ints("eight", 8),
             helper.make_node("Gather", ["shape", "i0"], ["b"], axis=0),
             helper.make_node("Gather", ["shape", "i2"], ["s"], axis=0),
             helper.make_node("Concat", ["b", "three", "s", "eight"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"], name="r"),
             helper.make_node("Concat", ["s", "b", "three", "eight"], ["swapped"], axis=0),
             helper.make_node("Reshape", ["y", "swapped"], ["z"], name="r2")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TP.FLOAT, ["b", 6, "s", 4])], [
            helper.make_tensor_value_info("y", TP.FLOAT, ["b", 3, "s", 8]),
            helper.make_tensor_value_info("z", TP.FLOAT, ["s", "b", 3, 8])])
    path = tmp_path / "r.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    _, loaded = import_and_load(path, tmp_path / "r.pha", signer,
                                golden_dims={"b": [2], "s": [3]})
    assert [o.shape for o in loaded.graph.outputs] == [("b", 3, "s", 8), ("s", "b", 3, 8)]
    rng = np.random.default_rng(3)
    check_on_both_backends(path, loaded, [{"x": rng.standard_normal(shape).astype(np.float32)}
                                          for shape in ((1, 6, 1, 4), (2, 6, 5, 4),
                                                        (3, 6, 2, 4))])


def _refused_until_fixed(model: Path, tmp_path: Path, signer, error: type, match: str,
                         dims: dict[str, int]):
    """Building ``model`` is refused with ``error`` matching ``match`` and writes nothing;
    with ``dims`` fixed it builds: the loaded artifact."""
    with pytest.raises(error, match=match):
        import_and_load(model, tmp_path / "no.pha", signer)
    assert not (tmp_path / "no.pha").exists()
    return import_and_load(model, tmp_path / "fixed.pha", signer, dims=dims)[1]


class _Attention(torch.nn.Module):
    def __init__(self, batch_first: bool = False):
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(16, 2, batch_first=batch_first)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]


@pytest.mark.parametrize("batch_first", [False, True], ids=["seq-first", "batch-first"])
def test_multihead_attention_takes_any_batch_and_length(batch_first, tmp_path, signer):
    """The dynamo exporter's MultiheadAttention merges the batch and the length into one axis
    for the output projection and splits it into the two run-time dims again: an unflatten
    whose sizes are read from the input's shape when the call runs."""
    model = tmp_path / "m.onnx"
    length, batch = (1, 0) if batch_first else (0, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(_Attention(batch_first).eval(), (torch.randn(5, 2, 16),), dynamo=True,
                          verbose=False, input_names=["x"], output_names=["y"],
                          dynamic_shapes=({length: torch.export.Dim("seq", max=64),
                                           batch: torch.export.Dim("batch", max=64)},)
                          ).save(str(model), external_data=False)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    [split] = [n for n in loaded.graph.nodes
               if n.op == "unflatten" and len(n.inputs) == 2]  # sizes read from a tensor
    assert split.inputs[1] == "x" and sorted(split.attrs["like_axes"]) == [0, 1], split
    rng = np.random.default_rng(11)
    sizes = ((1, 1), (3, 5), (7, 2), (2, 33))
    feeds = [{"x": rng.standard_normal((n, t, 16) if batch_first else (t, n, 16)).astype(
        np.float32)} for t, n in sizes]
    check_on_both_backends(model, loaded, feeds)


#: batch first: (example, dynamic axes, the refusal, the batches fed with the length fixed)
TRACED = {
    # a target mixing the traced length with the run-time batch
    False: ((5, 2, 16), {0: "seq", 1: "batch"},
            r"\(Reshape\): target shape \[5, 'batch\*2', 8\] holds 80\*batch elements and the "
            r"input shape \('seq', 'batch', 16\) 16\*batch\*seq, equal only at some sizes of the "
            r"run-time dims: the exporter wrote a size it saw when tracing as a constant "
            r".*--dim batch=SIZE --dim seq=SIZE", (1, 2, 4)),
    # the batch fixed: a target of constants only
    True: ((2, 5, 16), {1: "seq"},
           r"\(Reshape\): target shape \[5, 4, 8\] holds 160 elements and the input shape "
           r"\('seq', 2, 16\) 32\*seq, equal only at some sizes of the run-time dims: the "
           r"exporter wrote a size it saw when tracing as a constant .*--dim seq=SIZE", (2,)),
}


@pytest.mark.parametrize("batch_first", [False, True], ids=["run-time-batch", "fixed-batch"])
def test_a_length_the_legacy_exporter_traced_as_a_constant_is_refused_naming_it(
        batch_first, tmp_path, signer):
    """torch's legacy exporter writes MultiheadAttention's key and value reshapes with the
    length it traced (5) as a constant, so onnxruntime itself refuses any other length. The
    import says so at that Reshape (not left to onnxruntime's refusal of the golden run, where
    the target is constants only); with the length fixed it imports."""
    example, axes, message, batches = TRACED[batch_first]
    model = tmp_path / "m.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(_Attention(batch_first).eval(), (torch.randn(*example),), str(model),
                          dynamo=False, input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": axes, "y": axes})
    longer = (2, 6, 16) if batch_first else (6, 2, 16)
    with pytest.raises(Exception, match="Reshape"):  # the model's own limit
        onnxruntime_outputs(model, {"x": np.zeros(longer, np.float32)})
    loaded = _refused_until_fixed(model, tmp_path, signer, UnsupportedModelError, message,
                                  {"seq": 5})
    rng = np.random.default_rng(10)
    feeds = [{"x": rng.standard_normal((n, 5, 16) if batch_first else (5, n, 16)).astype(
        np.float32)} for n in batches]
    check_on_both_backends(model, loaded, feeds)


def _reshaped(tmp_path, x: list, target: list) -> Path:
    """One Reshape named ``node`` of input ``x`` (ints and dim names) to the constant
    ``target``."""
    helper, TP = onnx.helper, onnx.TensorProto
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "target"], ["y"], name="node")], "g",
        [helper.make_tensor_value_info("x", TP.FLOAT, x)],
        [helper.make_tensor_value_info("y", TP.FLOAT, [f"y{k}" for k in range(len(target))])],
        initializer=[onnx.numpy_helper.from_array(np.array(target, np.int64), "target")])
    path = tmp_path / "r.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


@pytest.mark.parametrize("x, target, error", [
    (["t", 6], [3, 4], r"target shape \[3, 4\] holds 12 elements and the input shape "
                       r"\('t', 6\) 6\*t, equal only at some sizes"),
    (["b", "t"], [2, 2], r"target shape \[2, 2\] holds 4 elements and the input shape "
                         r"\('b', 't'\) b\*t"),
    (["t", 6], [-1, 3], None),  # the -1 takes the run-time count: any length
    (["t", 6], [0, 2, 3], None),  # a 0 copies the run-time dim
], ids=["one-dim", "two-dims", "minus-one", "zero-copies"])
def test_a_constant_target_for_a_run_time_input(x, target, error, tmp_path, signer):
    model = _reshaped(tmp_path, x, target)
    if error is not None:
        with pytest.raises(UnsupportedModelError, match=r"node 'node' \(Reshape\): " + error):
            import_and_load(model, tmp_path / "m.pha", signer)
        return
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer, golden_dims={"t": [2, 4]})
    rng = np.random.default_rng(15)
    check_on_both_backends(model, loaded, [
        {"x": rng.standard_normal((t, 6)).astype(np.float32)} for t in (1, 3, 8)])


def _merged_and_split(tmp_path, target: list) -> Path:
    """a (b, 16) and c (s, 16) broadcast to (b, s, 16), merged to (b*s, 16) and reshaped to
    ``target``: ONNX nodes naming b (Shape of a), s (Shape of c) and ints."""
    helper, TP = onnx.helper, onnx.TensorProto

    def ints(name, value):
        return helper.make_node("Constant", [], [name], value=helper.make_tensor(
            name, TP.INT64, [len(value)], value))

    nodes = [ints("ax0", [0]), ints("ax1", [1]), ints("merged", [-1, 16]), ints("two", [2]),
             ints("eight", [8]), ints("sixteen", [16]),
             helper.make_node("Unsqueeze", ["a", "ax1"], ["a3"]),
             helper.make_node("Unsqueeze", ["c", "ax0"], ["c3"]),
             helper.make_node("Add", ["a3", "c3"], ["t"]),
             helper.make_node("Reshape", ["t", "merged"], ["f"]),
             helper.make_node("Shape", ["a"], ["b"], end=1),
             helper.make_node("Shape", ["c"], ["s"], end=1),
             helper.make_node("Mul", ["s", "two"], ["s2"])]
    parts = {"b": "b", "s": "s", "s*2": "s2", 8: "eight", 16: "sixteen"}
    nodes += [helper.make_node("Concat", [parts[d] for d in target], ["target"], axis=0),
              helper.make_node("Reshape", ["f", "target"], ["y"], name="split")]
    graph = helper.make_graph(nodes, "g", [
        helper.make_tensor_value_info("a", TP.FLOAT, ["b", 16]),
        helper.make_tensor_value_info("c", TP.FLOAT, ["s", 16])],
        [helper.make_tensor_value_info("y", TP.FLOAT, [f"y{k}" for k in range(len(target))])])
    path = tmp_path / "split.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


@pytest.mark.parametrize("target, like_axes", [
    (["b", "s", 16], [0, 1]),  # from two tensors
    (["b", "s*2", 8], [0, 1, -1]),  # s*2 is no tensor's dim
], ids=["two-sources", "a-product"])
def test_an_axis_split_into_run_time_dims_no_one_tensor_has(target, like_axes, tmp_path,
                                                            signer):
    """Each run-time size is read from a mask built to carry it (an inferred -1 beside a
    run-time size would be wrong when that size is 0: an empty batch is among the feeds)."""
    model = _merged_and_split(tmp_path, target)
    _, loaded = import_and_load(model, tmp_path / "s.pha", signer)
    [split] = [n for n in loaded.graph.nodes if n.op == "unflatten"]
    assert list(split.attrs["like_axes"]) == like_axes
    assert loaded.graph.types[split.inputs[1]].dtype == "bool"
    rng = np.random.default_rng(13)
    feeds = [{"a": rng.standard_normal((b, 16)).astype(np.float32),
              "c": rng.standard_normal((s, 16)).astype(np.float32)}
             for b, s in ((1, 1), (2, 3), (4, 1), (0, 2))]
    check_on_both_backends(model, loaded, feeds)


def test_a_golden_case_too_short_for_the_model_says_so(tmp_path, signer):
    """max_pool1d(2) over a run-time length drawn at 1 for the golden cases: the window is
    longer than the input, which torch and the ABI refuse (the imported graph when the call
    runs), ONNX sizes as 0 and onnxruntime as 1; the refusal names the node, says the golden
    length was 1 and how to fix it, and with the length fixed the model builds."""
    model = tmp_path / "p.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Fn(lambda x: F.max_pool1d(x.transpose(1, 2), 2).sum((1, 2))).eval(),
                          (torch.randn(2, 6, 4),), str(model), dynamo=False,
                          input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch", 1: "seq"}, "y": {0: "batch"}})
    loaded = _refused_until_fixed(
        model, tmp_path, signer, ModelImportError, r"golden case 0: onnxruntime runs the "
        r"model, the imported graph refuses it at node 'MaxPool': max_pool: spatial axis 0 of "
        r"x shape \(1, 4, 1\) is 1 .*smaller than the window .*; the golden cases give the "
        r"inputs' run-time dims the sizes 'batch' 1, 'seq' 1, where a model may need others",
        {"seq": 6})
    rng = np.random.default_rng(12)
    check_against_onnxruntime(model, loaded, [
        {"x": rng.standard_normal((n, 6, 4)).astype(np.float32)} for n in (1, 3)])
