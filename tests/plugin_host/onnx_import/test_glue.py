"""Glue ops and the shape arithmetic exporters emit around them: Shape/Gather/Unsqueeze/Concat
chains feeding Reshape are folded at import (nothing of them reaches the graph); Slice, Split,
Transpose, Concat, Flatten, activations and pooling map onto the glue ops. Both exporters."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from plugin_host.errors import UnsupportedModelError
from plugin_host.onnx_import import import_onnx

from .conftest import (EXPORTERS, assert_refused, check_against_onnxruntime,
                       check_on_both_backends, export, import_and_load, onnx, torch)

F = torch.nn.functional


class _Glue(torch.nn.Module):
    def forward(self, x):
        n = x.size(0)
        a, b = x[:, 1:3], x[:, ::2]                    # Slice
        y = torch.cat([a, b], dim=1)                    # Concat
        y = y.view(n, y.size(1), -1)                    # Shape/Gather/Unsqueeze/Concat/Reshape
        y = y.transpose(1, 2).unsqueeze(1).squeeze(1)   # Transpose, Unsqueeze, Squeeze
        p, q = y.chunk(2, dim=-1)                       # Split
        z = F.gelu(p) * torch.sigmoid(q) - torch.tanh(q) / 2.0
        z = torch.softmax(z.flatten(1), dim=-1)         # Flatten, Softmax
        pooled = F.max_pool2d(x, 2) + F.avg_pool2d(x, 3, stride=1, padding=1)[:, :, ::2, ::2]
        return z, torch.clamp(pooled, -1.0, 1.0).mean(dim=(2, 3))


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_glue_matches_onnxruntime(dynamo, fold, optimize, tmp_path, signer):
    x = torch.randn(2, 4, 6, 6)
    model = export(_Glue(), [x], tmp_path / "g.onnx", dynamo=dynamo, fold=fold,
                   optimize=optimize, input_names=["x"], output_names=["z", "pooled"])
    _, loaded = import_and_load(model, tmp_path / "g.pha", signer)
    ops = {n.op for n in loaded.graph.nodes}
    assert {"slice", "concat", "reshape", "transpose", "gelu", "softmax",
            "max_pool", "avg_pool", "clip", "mean"} <= ops, ops
    assert not loaded.graph.tensors or all(a.dtype.kind == "f" for a in
                                           loaded.graph.tensors.values())  # no shape math left
    rng = np.random.default_rng(1)
    check_against_onnxruntime(model, loaded, [{"x": rng.standard_normal((2, 4, 6, 6))
                                               .astype(np.float32)} for _ in range(2)])


class _Pools3d(torch.nn.Module):
    """3-D pooling: average over x (nan, inf and extremes welcome), max over s (no nan:
    onnxruntime's MaxPool skips one, torch and the numpy backend take it)."""

    def forward(self, x, s):
        a = F.avg_pool3d(x, 2)
        b = F.avg_pool3d(x, (3, 2, 3), (2, 1, 2), (1, 1, 0), ceil_mode=True,
                         count_include_pad=False)
        c = torch.nn.AvgPool3d(3, 1, 1)(x)  # count_include_pad
        # count_include_pad with ceil_mode: the windows past the padding count only it
        c2 = torch.nn.AvgPool3d((3, 2, 3), (2, 1, 2), (1, 1, 0), ceil_mode=True)(x)
        d = F.adaptive_avg_pool3d(x, 1)  # GlobalAveragePool (legacy) or ReduceMean (dynamo)
        e = F.max_pool3d(s, 2)
        f = F.max_pool3d(s, (2, 3, 2), (1, 2, 2), (1, 1, 0), dilation=(2, 1, 1),
                         ceil_mode=True)
        g = torch.nn.MaxPool3d(3, 2, 1, dilation=(1, 2, 1))(s)
        h = F.adaptive_max_pool3d(s, 1)  # MaxPool of the whole volume (legacy) or ReduceMax
        return a, b, c, c2, d, e, f, g, h


OUTPUTS3D = ["a", "b", "c", "c2", "d", "e", "f", "g", "h"]
POOLS3D = {"x": (2, 3, 6, 5, 8), "s": (2, 2, 6, 5, 7)}


def _pool3d_inputs(rng):
    """Random values; x with nan, +-inf, huge values that neither overflow a window's sum nor
    cancel in it (the order of the sum would decide the result) and denormals; s with +-inf,
    float32's max and min and ties, no nan."""
    x, s = (rng.standard_normal(POOLS3D[k]).astype(np.float32) * 3 for k in ("x", "s"))
    odd = rng.choice(np.array([np.nan, np.inf, -np.inf, 1e36, -1e30, 1e-45, 0.0, 2.0],
                              np.float32), size=POOLS3D["x"])
    big = np.finfo(np.float32).max
    edges = rng.choice(np.array([-np.inf, -np.inf, np.inf, big, -big, 1e-45, -0.0, 2.0],
                                np.float32), size=POOLS3D["s"])
    ties = rng.choice(np.array([-1.0, 0.0, 2.0], np.float32), size=POOLS3D["s"])
    return [{"x": x, "s": s}, {"x": odd, "s": edges}, {"x": x[::-1].copy(), "s": ties}]


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_pooling_over_three_spatial_axes_matches_onnxruntime(dynamo, fold, optimize, tmp_path,
                                                              signer):
    model = export(_Pools3d(), [torch.randn(*POOLS3D["x"]), torch.randn(*POOLS3D["s"])],
                   tmp_path / "p.onnx", dynamo=dynamo, fold=fold, optimize=optimize,
                   input_names=["x", "s"], output_names=OUTPUTS3D)
    _, loaded = import_and_load(model, tmp_path / "p.pha", signer)
    pools = [n for n in loaded.graph.nodes if n.op in ("avg_pool", "max_pool")]
    assert {n.op for n in pools} == {"avg_pool", "max_pool"}
    assert len(pools) >= 6 and all(len(n.attrs["kernel_size"]) == 3 for n in pools)
    check_against_onnxruntime(model, loaded, _pool3d_inputs(np.random.default_rng(5)))


def test_pooling_over_three_spatial_axes_on_the_onnxruntime_backend(tmp_path, signer):
    """The same glue ops run by the onnxruntime backend plugin (its MaxPool over the nan mask
    included) agree with onnxruntime running the exported model."""
    from plugins.onnxruntime_backend import OnnxruntimeBackend

    model = export(_Pools3d(), [torch.randn(*POOLS3D["x"]), torch.randn(*POOLS3D["s"])],
                   tmp_path / "p.onnx", dynamo=False, input_names=["x", "s"],
                   output_names=OUTPUTS3D)
    _, loaded = import_and_load(model, tmp_path / "p.pha", signer)
    check_against_onnxruntime(model, loaded, _pool3d_inputs(np.random.default_rng(6)),
                              backend=OnnxruntimeBackend())


@pytest.mark.parametrize("op, attrs", [
    ("AveragePool", {"count_include_pad": 0}), ("AveragePool", {"count_include_pad": 1}),
    ("AveragePool", {"count_include_pad": 1, "ceil_mode": 1, "strides": [2, 2, 2]}),
    ("MaxPool", {"ceil_mode": 1, "strides": [1, 2, 2], "dilations": [1, 1, 2]})])
def test_onnx_pooling_over_three_spatial_axes_torch_cannot_write(op, attrs, tmp_path, signer):
    """Asymmetric pads, and a depth smaller than the kernel that the padding makes up for
    (torch's avg_pool3d refuses that input; onnxruntime pools it)."""
    import onnx
    from onnx import TensorProto, helper

    shape = ("n", 2, 2, 4, 5)
    node = helper.make_node(op, ["x"], ["y"], name="pool", kernel_shape=[3, 3, 2],
                            pads=[1, 1, 0, 1, 0, 1], **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * 5)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]),
              tmp_path / "p.onnx")
    _, loaded = import_and_load(tmp_path / "p.onnx", tmp_path / "p.pha", signer)
    assert [n.op for n in loaded.graph.nodes] == [{"MaxPool": "max_pool"}.get(op, "avg_pool")]
    rng = np.random.default_rng(8)
    check_against_onnxruntime(tmp_path / "p.onnx", loaded, [
        {"x": (rng.standard_normal((n, 2, 2, 4, 5)) * 3).astype(np.float32)} for n in (1, 3)])


class _Adaptive3d(torch.nn.Module):
    def forward(self, x, s):
        # the max over windows of 15, none of them all -inf: there onnxruntime gives -3.4e38,
        # torch and the numpy backend -inf (the difference the README leaves)
        return F.adaptive_avg_pool3d(x, (3, 5, 4)), F.adaptive_max_pool3d(s, (2, 1, 7))


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS[:2])
def test_adaptive_pooling_over_three_spatial_axes_matches_onnxruntime(dynamo, fold, optimize,
                                                                      tmp_path, signer):
    """The legacy exporter writes adaptive pooling whose output size divides the input as
    AveragePool / MaxPool (the dynamo exporter has no 3-D adaptive_avg_pool but to size 1)."""
    model = export(_Adaptive3d(), [torch.randn(*POOLS3D["x"]), torch.randn(*POOLS3D["s"])],
                   tmp_path / "a.onnx", dynamo=dynamo, fold=fold, optimize=optimize,
                   input_names=["x", "s"], output_names=["a", "b"])
    _, loaded = import_and_load(model, tmp_path / "a.pha", signer)
    assert sorted(n.op for n in loaded.graph.nodes) == ["avg_pool", "max_pool"]
    check_against_onnxruntime(model, loaded, _pool3d_inputs(np.random.default_rng(9)))


class _LocalResponseNorm(torch.nn.Module):
    """torch writes local_response_norm as a Pad and a 3-D AveragePool over the channels."""

    def forward(self, x, v):
        return (torch.nn.LocalResponseNorm(3, alpha=0.5, k=2.0)(x),
                F.local_response_norm(v, 4, beta=0.6))


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_local_response_norm(dynamo, fold, optimize, tmp_path, signer):
    """Imports and matches onnxruntime under both exporters (the legacy one writes its squeeze
    of the pooled channels as an If on the dim's size, which is known at import)."""
    model = export(_LocalResponseNorm(), [torch.randn(2, 5, 4, 6), torch.randn(1, 6, 3, 4, 5)],
                   tmp_path / "n.onnx", dynamo=dynamo, fold=fold, optimize=optimize,
                   input_names=["x", "v"], output_names=["y", "w"])
    if not dynamo:
        assert "If" in {n.op_type for n in onnx.load(model).graph.node}
    _, loaded = import_and_load(model, tmp_path / "n.pha", signer)
    assert sum(n.op == "avg_pool" and len(n.attrs["kernel_size"]) == 3
               for n in loaded.graph.nodes) == 2
    rng = np.random.default_rng(7)
    feeds = [{"x": (rng.standard_normal((2, 5, 4, 6)) * 3).astype(np.float32),
              "v": (rng.standard_normal((1, 6, 3, 4, 5)) * 3).astype(np.float32)}]
    feeds.append({k: np.where(rng.random(a.shape) < 0.1, np.float32(np.inf), a)
                  for k, a in feeds[0].items()})
    feeds[1]["x"][0, 1, 2, 3] = np.nan
    check_against_onnxruntime(model, loaded, feeds)


def test_shape_arithmetic_is_folded(tmp_path):
    class View(torch.nn.Module):
        def forward(self, x):
            return x.view(x.size(0), x.size(1) * x.size(2), -1)

    model = export(View(), [torch.randn(2, 3, 4, 5)], tmp_path / "v.onnx", dynamo=False,
                   fold=False, input_names=["x"], output_names=["y"])
    import onnx
    exported = [n.op_type for n in onnx.load(model).graph.node]
    assert {"Unsqueeze", "Concat"} <= set(exported)  # the exporter did emit shape math
    imported = import_onnx(model)
    assert [n.op for n in imported.graph.nodes] == ["reshape"]
    assert imported.graph.nodes[0].attrs["shape"] == (2, 12, -1)


class _Batched(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.fc = torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.Linear(64, 5)
        self.emb = torch.nn.Embedding(6, 5)

    def forward(self, x, ids):
        return torch.relu(self.fc(torch.flatten(self.conv(x), 1))) + self.emb(ids)


def _export_batched(args, path, dynamo: bool) -> None:
    if dynamo:
        batch = torch.export.Dim("batch")
        program = torch.onnx.export(_Batched().eval(), args, dynamo=True, verbose=False,
                                    input_names=["x", "ids"], output_names=["y"],
                                    dynamic_shapes=({0: batch}, {0: batch}))
        program.save(str(path))
    else:
        torch.onnx.export(_Batched().eval(), args, str(path), dynamo=False,
                          input_names=["x", "ids"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch"}, "ids": {0: "batch"},
                                        "y": {0: "batch"}})


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_symbolic_batch_dim_is_kept(dynamo, tmp_path, signer):
    args = (torch.randn(2, 3, 4, 4), torch.tensor([1, 2]))
    path = tmp_path / "b.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _export_batched(args, path, dynamo)
    _, loaded = import_and_load(path, tmp_path / "b.pha", signer)
    assert [s.shape for s in loaded.graph.inputs] == [("batch", 3, 4, 4), ("batch",)]
    assert loaded.graph.outputs[0].shape == ("batch", 5)
    rng = np.random.default_rng(3)
    check_against_onnxruntime(path, loaded, [
        {"x": rng.standard_normal((n, 3, 4, 4)).astype(np.float32),
         "ids": rng.integers(0, 6, n).astype(np.int64)} for n in (1, 5)])


def test_weights_in_constant_nodes(tmp_path, signer):
    """Weights stored as Constant nodes (not initializers) are tensors of the artifact too."""
    import onnx
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    nodes = [helper.make_node("Constant", [], ["w"], value=numpy_helper.from_array(w, "w")),
             helper.make_node("Constant", [], ["b"], value=numpy_helper.from_array(b, "b")),
             helper.make_node("MatMul", ["x", "w"], ["xw"], name="fc"),
             helper.make_node("Add", ["xw", "b"], ["y"], name="fc_bias")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [2, 4])],
                              [helper.make_tensor_value_info("y", 1, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, tmp_path / "c.onnx")
    manifest, loaded = import_and_load(tmp_path / "c.onnx", tmp_path / "c.pha", signer)
    assert [n.op for n in loaded.graph.nodes] == ["linear"]  # MatMul + Add: one Linear
    np.testing.assert_array_equal(loaded.graph.tensors["w"], w.T)  # Linear stores (out, in)
    assert {e.name: e.role for e in manifest.tensors}["b"] == "weight"
    check_against_onnxruntime(tmp_path / "c.onnx", loaded,
                              [{"x": rng.standard_normal((2, 4)).astype(np.float32)}])


def test_outputs_folded_to_constants_keep_their_names(tmp_path, signer):
    """A graph output that is a constant (an initializer listed as an output, such as a
    detector's anchors, or a value folded at import) keeps the model's name in the ABI, also
    where the constant is read by a node as well."""
    import onnx
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(0)
    anchors = rng.standard_normal((2, 3)).astype(np.float32)
    nodes = [helper.make_node("Add", ["x", "anchors"], ["y"], name="offset"),
             helper.make_node("Shape", ["x"], ["size"], name="size"),
             helper.make_node("ReduceSum", ["size"], ["count"], name="count", keepdims=0)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", 1, [2, 3])],
        [helper.make_tensor_value_info("y", 1, [2, 3]),
         helper.make_tensor_value_info("anchors", 1, [2, 3]),
         helper.make_tensor_value_info("size", 7, [2]),
         helper.make_tensor_value_info("count", 7, [])],
        [numpy_helper.from_array(anchors, "anchors")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              tmp_path / "k.onnx")
    _, loaded = import_and_load(tmp_path / "k.onnx", tmp_path / "k.pha", signer)
    assert [s.name for s in loaded.graph.outputs] == ["y", "anchors", "size", "count"]
    check_on_both_backends(tmp_path / "k.onnx", loaded,
                           [{"x": rng.standard_normal((2, 3)).astype(np.float32)}])


def test_scalar_values_stay_scalars(tmp_path, signer):
    """A 0-d value stays 0-d: a folded Gather of one dim (the chain torch's legacy exporter
    writes before an LSTM), a 0-d constant, a 0-d graph input and output. numpy's
    ``ascontiguousarray`` makes them 1-d, which broke the Concat after the Unsqueeze."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def const(name, value):
        return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(
            np.array(value), name))

    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             const("one", np.int64(1)), const("zero", np.array([0], np.int64)),
             const("minus_one", np.array([-1], np.int64)), const("two", np.float32(2.0)),
             helper.make_node("Gather", ["shape", "one"], ["dim"]),
             helper.make_node("Unsqueeze", ["dim", "zero"], ["dims"]),
             helper.make_node("Concat", ["minus_one", "dims"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["rows"], name="rows"),
             helper.make_node("Add", ["s", "two"], ["t"], name="t")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4]),
                     helper.make_tensor_value_info("s", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("rows", TensorProto.FLOAT, [8, 3]),
         helper.make_tensor_value_info("t", TensorProto.FLOAT, [])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              tmp_path / "s.onnx")
    _, loaded = import_and_load(tmp_path / "s.onnx", tmp_path / "s.pha", signer)
    assert [o.shape for o in loaded.graph.outputs] == [(8, 3), ()]
    rng = np.random.default_rng(0)
    check_against_onnxruntime(tmp_path / "s.onnx", loaded, [
        {"x": rng.standard_normal((2, 3, 4)).astype(np.float32), "s": np.array(v, np.float32)}
        for v in (0.5, -3.0)])


class _Unflatten(torch.nn.Module):
    def forward(self, x):
        return x.unflatten(1, (2, 3)) * 2.0


def test_unflatten_folds_its_shape_arithmetic(tmp_path, signer):
    """torch's legacy export of unflatten computes a Slice end with Mod on constants: Mod
    folds, so nothing of it reaches the graph."""
    model = export(_Unflatten(), [torch.randn(2, 6)], tmp_path / "u.onnx", dynamo=False,
                   input_names=["x"], output_names=["y"])
    _, loaded = import_and_load(model, tmp_path / "u.pha", signer)
    assert {n.op for n in loaded.graph.nodes} == {"reshape", "mul"}
    check_against_onnxruntime(model, loaded, [
        {"x": np.random.default_rng(0).standard_normal((2, 6)).astype(np.float32)}])


@pytest.mark.parametrize("x, y, fmod", [
    ([7, -7, 7, -7, 0], [3, 3, -3, -3, 5], 0), ([7, -7, 7, -7, 0], [3, 3, -3, -3, 5], 1),
    ([5.5, -5.5, 5.5, -0.0, 1e30], [2.0, 2.0, -2.0, 3.0, 7.0], 1)])
def test_mod_of_constants_folds_as_onnxruntime_computes_it(x, y, fmod, tmp_path, signer):
    import onnx
    from onnx import helper, numpy_helper

    dtype = np.float32 if isinstance(x[0], float) else np.int64
    nodes = [helper.make_node("Constant", [], [n], value=numpy_helper.from_array(
                 np.array(v, dtype), n)) for n, v in (("a", x), ("b", y))]
    nodes += [helper.make_node("Mod", ["a", "b"], ["m"], fmod=fmod),
              helper.make_node("Add", ["v", "m"], ["out"], name="out")]
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("v", elem, [5])],
                              [helper.make_tensor_value_info("out", elem, [5])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              tmp_path / "m.onnx")
    _, loaded = import_and_load(tmp_path / "m.onnx", tmp_path / "m.pha", signer)
    assert [n.op for n in loaded.graph.nodes] == ["add"]  # the Mod folded
    check_against_onnxruntime(tmp_path / "m.onnx", loaded, [{"v": np.arange(5).astype(dtype)}])


@pytest.mark.parametrize("op", ["Div", "Mod"])
def test_integer_division_of_constants_by_zero_is_refused(op, tmp_path):
    import onnx
    from onnx import helper, numpy_helper

    from plugin_host.errors import ModelFileError

    nodes = [helper.make_node("Constant", [], [n], value=numpy_helper.from_array(
                 np.array(v, np.int64), n)) for n, v in (("a", [4, 5]), ("b", [2, 0]))]
    nodes += [helper.make_node(op, ["a", "b"], ["q"], name="q"),
              helper.make_node("Add", ["v", "q"], ["out"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("v", 7, [2])],
                              [helper.make_tensor_value_info("out", 7, [2])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              tmp_path / "z.onnx")
    with pytest.raises(ModelFileError, match=r"node 'q' \(" + op + r"\).*by zero"):
        import_onnx(tmp_path / "z.onnx")


@pytest.mark.parametrize("shape, axes", [([2, 0, 3], [1]), ([0, 4], [0]), ([2, 0, 3], [0, 1])])
def test_a_mean_over_an_axis_known_empty_is_refused_naming_why(shape, axes, tmp_path):
    """onnxruntime, the build's reference, gives 0 where the ABI's mean of nothing is nan (as
    ONNX's reference implementation and torch): refused at import, not a failed comparison
    that calls itself an import bug."""
    kept = [d for i, d in enumerate(shape) if i not in axes]
    helper, floats = onnx.helper, onnx.TensorProto.FLOAT
    node = helper.make_node("ReduceMean", ["x", "axes"], ["y"], name="mean", keepdims=0)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", floats, shape)],
        [helper.make_tensor_value_info("y", floats, kept)],
        [onnx.numpy_helper.from_array(np.array(axes, np.int64), "axes")])
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), model)
    assert_refused(model, UnsupportedModelError, "node 'mean' (ReduceMean)",
                   f"a mean over axis {shape.index(0)} of size 0 (input shape {shape}): the "
                   f"ABI's mean of nothing is nan")
