"""A transformer exported with a dynamic batch and sequence length: its reshapes keep both
run-time dims and split or merge the fixed ones between them (the heads of an attention), its
causal mask is a Trilu over (seq, seq), and it reads the last step's logits. These import
(``flatten`` and ``unflatten`` steps, a mask from run-time positions) and take any batch and
length, on both backends."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from plugin_host.errors import ModelFileError, ModelImportError, UnsupportedModelError
from plugin_host.onnx_import.symbolic import regroup

from .conftest import Fn, assert_refused, check_against_onnxruntime, import_and_load, onnx, torch

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
    (["b", 6, "s", 4], ["b", 3, "s", 8], None),  # elements would cross s
    (["b", "s", 16], ["s", "b", 16], None),  # a transpose, not a reshape
])
def test_regroup_plans_flatten_and_unflatten_steps(in_shape, target, steps):
    assert regroup(in_shape, target) == steps


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
    from plugins.onnxruntime_backend import OnnxruntimeBackend

    model = _export(_Decoder(mode), tmp_path / "d.onnx", dynamo=dynamo)
    _, loaded = import_and_load(model, tmp_path / "d.pha", signer)
    assert loaded.graph.inputs[0].shape == ("batch", "seq")
    ops = {n.op for n in loaded.graph.nodes}
    assert "cumsum" in ops and ops & {"greater_equal", "less_equal"}, ops  # the mask
    assert mode != "sdpa" or {"unflatten", "flatten"} <= ops, ops  # the heads
    rng = np.random.default_rng(8)
    feeds = [{"ids": rng.integers(0, 50, (b, n))} for b, n in ((1, 1), (3, 5), (2, 32))]
    for backend in (None, OnnxruntimeBackend()):
        check_against_onnxruntime(model, loaded, feeds, backend=backend)


@pytest.mark.parametrize("fn", [
    lambda x: torch.triu(x, 1), lambda x: torch.tril(x), lambda x: torch.tril(x, -2),
    lambda x: torch.triu(x, -1) * 2.0], ids=["triu1", "tril", "tril-2", "triu-1"])
def test_trilu_over_run_time_dims(fn, tmp_path, signer):
    """Over (batch, rows, cols), all three run-time, rows and cols of different sizes."""
    from plugins.onnxruntime_backend import OnnxruntimeBackend

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
    for backend in (None, OnnxruntimeBackend()):
        check_against_onnxruntime(model, loaded, feeds, backend=backend)


def test_a_reshape_that_moves_elements_across_a_run_time_dim_is_refused(tmp_path):
    helper, TP = onnx.helper, onnx.TensorProto
    def ints(name, value):
        return helper.make_node("Constant", [], [name], value=helper.make_tensor(
            name, TP.INT64, [1], [value]))

    nodes = [helper.make_node("Shape", ["x"], ["shape"]), ints("i0", 0), ints("i2", 2),
             ints("three", 3), ints("eight", 8),
             helper.make_node("Gather", ["shape", "i0"], ["b"], axis=0),
             helper.make_node("Gather", ["shape", "i2"], ["s"], axis=0),
             helper.make_node("Concat", ["b", "three", "s", "eight"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"], name="r")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TP.FLOAT, ["b", 6, "s", 4])], [helper.make_tensor_value_info(
            "y", TP.FLOAT, ["b", 3, "s", 8])])
    path = tmp_path / "r.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    assert_refused(path, UnsupportedModelError, "node 'r' (Reshape)",
                   "target shape ['b', 3, 's', 8] from input shape ('b', 6, 's', 4) has more "
                   "than one run-time dim, and its fixed dims do not split or merge the "
                   "input's between them")


def test_multihead_attention_over_both_run_time_dims_is_refused_pointing_at_dim(tmp_path,
                                                                                 signer):
    """torch's MultiheadAttention merges the sequence and the batch into one axis and splits
    them again, which no flatten or unflatten can do (one -1); fixing one of them imports."""
    from plugins.onnxruntime_backend import OnnxruntimeBackend

    class Attention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = torch.nn.MultiheadAttention(16, 2)

        def forward(self, x):
            return self.attn(x, x, x, need_weights=False)[0]

    model = tmp_path / "m.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Attention().eval(), (torch.randn(5, 2, 16),), str(model), dynamo=False,
                          input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "seq", 1: "batch"},
                                        "y": {0: "seq", 1: "batch"}})
    with pytest.raises(UnsupportedModelError, match=r"\(Reshape\): target shape \['seq', "
                       r"'batch', 16\] from input shape .* has more than one run-time dim.*"
                       r"--dim batch=SIZE --dim seq=SIZE"):
        import_and_load(model, tmp_path / "no.pha", signer)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer, dims={"seq": 5})
    rng = np.random.default_rng(10)
    feeds = [{"x": rng.standard_normal((5, n, 16)).astype(np.float32)} for n in (1, 2, 4)]
    for backend in (None, OnnxruntimeBackend()):
        check_against_onnxruntime(model, loaded, feeds, backend=backend)


def test_a_golden_case_too_short_for_the_model_says_so(tmp_path, signer):
    """max_pool1d(2) over a run-time length drawn at 1 for the golden cases: the window is
    longer than the input, which torch refuses, ONNX sizes as 0 (the ABI too) and
    onnxruntime as 1, so the outputs differ; the refusal says the golden length was 1 and
    how to fix it, and with the length fixed the model builds."""
    model = tmp_path / "p.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Fn(lambda x: F.max_pool1d(x.transpose(1, 2), 2).sum((1, 2))).eval(),
                          (torch.randn(2, 6, 4),), str(model), dynamo=False,
                          input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch", 1: "seq"}, "y": {0: "batch"}})
    with pytest.raises(ModelImportError, match=r"golden case 0: output 'y' of the imported "
                       r"graph differs from onnxruntime .*; the golden cases give the inputs' "
                       r"run-time dims size 1 \('batch', 'seq'\), where a model may need more"):
        import_and_load(model, tmp_path / "no.pha", signer)
    assert not (tmp_path / "no.pha").exists()
    _, loaded = import_and_load(model, tmp_path / "p.pha", signer, dims={"seq": 6})
    rng = np.random.default_rng(12)
    check_against_onnxruntime(model, loaded, [
        {"x": rng.standard_normal((n, 6, 4)).astype(np.float32)} for n in (1, 3)])
