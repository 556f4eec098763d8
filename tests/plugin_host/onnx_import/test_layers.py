"""Each layer of the set, exported from torch with both exporters, imported, loaded with the
project's loader and run on the numpy backend: outputs match onnxruntime within the artifact's
declared tolerance, and each layer comes out as the ABI op (or glue chain) expected. Also
BatchNormalization in training mode (normalized by the batch), against onnxruntime and torch."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from plugin_host.errors import ModelFileError, UnsupportedModelError
from plugin_host.executor import Executor
from plugins.numpy_backend import NumpyBackend

from .conftest import (EXPORTERS, assert_refused, check_against_onnxruntime,
                       check_on_both_backends, export, import_and_load, onnx, torch)

nn = torch.nn


class _LayerNorm2d(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln = nn.LayerNorm(c)

    def forward(self, x):
        return self.ln(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class _Cell(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.LSTMCell(6, 5)

    def forward(self, x, h, c):
        return self.cell(x, (h, c))


def _randomized(module: nn.Module, seed: int) -> nn.Module:
    """Non-trivial affine parameters and running statistics (defaults are ones and zeros)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.dim() == 1 and ("weight" in name or "bias" in name):
                p.copy_(torch.rand(p.shape, generator=g) + 0.5 if "weight" in name
                        else torch.randn(p.shape, generator=g) * 0.3)
        for name, b in module.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(torch.randn(b.shape, generator=g) * 0.5)
            elif name.endswith("running_var"):
                b.copy_(torch.rand(b.shape, generator=g) * 2 + 0.25)
    return module


# name: (factory, input shapes (int64 for a tuple starting with "int"), expected ABI ops)
LAYERS = {
    "conv1d": (lambda: nn.Conv1d(3, 4, 3, stride=2, padding=1), [(1, 3, 10)], {"conv"}),
    "conv2d_same": (lambda: nn.Conv2d(3, 4, (3, 2), padding="same"),
                    [(1, 3, 8, 7)], {"conv"}),
    "conv2d_groups": (lambda: nn.Conv2d(4, 6, 3, stride=2, groups=2), [(2, 4, 9, 9)], {"conv"}),
    "conv_transpose1d": (lambda: nn.ConvTranspose1d(3, 4, 3, stride=2, padding=1,
                                                    output_padding=1), [(1, 3, 5)],
                         {"conv_transpose"}),
    "conv_transpose2d": (lambda: nn.ConvTranspose2d(4, 6, 3, stride=2, groups=2),
                         [(1, 4, 5, 5)], {"conv_transpose"}),
    "batchnorm2d": (lambda: nn.BatchNorm2d(3), [(2, 3, 4, 4)], {"batchnorm"}),
    "batchnorm1d": (lambda: nn.BatchNorm1d(3), [(2, 3, 6)], {"batchnorm"}),
    "linear": (lambda: nn.Linear(5, 3), [(2, 5)], {"linear"}),
    "linear_3d": (lambda: nn.Linear(5, 3), [(2, 4, 5)], {"linear"}),
    "lstm_cell": (_Cell, [(2, 6), (2, 5), (2, 5)], {"lstm_cell"}),
    "group_norm": (lambda: nn.GroupNorm(2, 4), [(1, 4, 3, 3)], {"group_norm"}),
    "instance_norm": (lambda: nn.InstanceNorm2d(3, affine=True), [(1, 3, 4, 4)],
                      {"instance_norm"}),
    "layer_norm": (lambda: nn.LayerNorm(5), [(2, 5)], {"layer_norm"}),
    "layer_norm2d": (lambda: _LayerNorm2d(3), [(1, 3, 4, 4)], {"transpose", "layer_norm"}),
    "rms_norm": (lambda: nn.RMSNorm(5), [(2, 5)], {"rms_norm"}),
    "embedding": (lambda: nn.Embedding(7, 3), [("int", 3)], {"embedding"}),
}


def _inputs(shapes, rng) -> list[np.ndarray]:
    out = []
    for shape in shapes:
        if shape[0] == "int":
            out.append(rng.integers(0, 7, size=shape[1:]).astype(np.int64))
        else:
            out.append(rng.standard_normal(shape).astype(np.float32))
    return out


#: Layers whose legacy export differs without constant folding.
_UNFOLDED_DIFFER = {"batchnorm2d", "linear_3d", "group_norm", "lstm_cell"}


def _legacy_cases() -> list:
    cases = []
    for layer in sorted(LAYERS):
        if layer == "rms_norm":
            continue  # the legacy exporter has no symbolic for aten::rms_norm (opset <= 20)
        cases.append(pytest.param(layer, True, id=f"{layer}-legacy"))
        if layer in _UNFOLDED_DIFFER:
            cases.append(pytest.param(layer, False, id=f"{layer}-legacy-nofold"))
    return cases


def _check_layer(layer: str, model, loaded, names: list[str], rng) -> None:
    _, shapes, expected_ops = LAYERS[layer]
    ops = {n.op for n in loaded.graph.nodes}
    assert expected_ops <= ops | {"identity"}, (layer, ops)
    assert [s.name for s in loaded.graph.inputs] == names
    feeds = [dict(zip(names, _inputs(shapes, rng))) for _ in range(2)]
    check_against_onnxruntime(model, loaded, feeds)


@pytest.mark.parametrize("layer, fold", _legacy_cases())
def test_layer_legacy_export_matches_onnxruntime(layer, fold, tmp_path, signer):
    factory, shapes, _ = LAYERS[layer]
    torch.manual_seed(0)
    module = _randomized(factory(), seed=1)
    rng = np.random.default_rng(2)
    args = _inputs(shapes, rng)
    names = [f"in{i}" for i in range(len(args))]
    outs = ["y", "c_next"] if layer == "lstm_cell" else ["y"]
    model = export(module, [torch.from_numpy(a) for a in args], tmp_path / "m.onnx",
                   dynamo=False, fold=fold, input_names=names, output_names=outs)
    manifest, loaded = import_and_load(model, tmp_path / "m.pha", signer, seed=3)
    assert manifest.golden_backend == "onnxruntime"
    _check_layer(layer, model, loaded, names, rng)


class _Zoo(torch.nn.Module):
    """Every layer of the set side by side: one dynamo export (slow: seconds) covers them all."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.layers = nn.ModuleDict({k: _randomized(f(), seed=i)
                                     for i, (k, (f, _, _)) in enumerate(sorted(LAYERS.items()))})

    def forward(self, *args):
        outs, i = [], 0
        for name, layer in self.layers.items():
            n = len(LAYERS[name][1])
            y = layer(*args[i:i + n])
            outs += list(y) if isinstance(y, tuple) else [y]
            i += n
        return tuple(outs)


@pytest.fixture(scope="module", params=[pytest.param(True, id="dynamo"),
                                        pytest.param(False, id="dynamo-noopt")])
def zoo(request, tmp_path_factory, signer):
    """The zoo exported with the dynamo exporter (optimized, and not: BatchNormalization and
    the raw decompositions survive), imported and loaded."""
    tmp = tmp_path_factory.mktemp("zoo")
    rng = np.random.default_rng(2)
    inputs, outputs = [], []
    for name, (_, shapes, _) in sorted(LAYERS.items()):
        inputs += [(f"{name}.in{i}", a) for i, a in enumerate(_inputs(shapes, rng))]
        outputs += [f"{name}.y"] + ([f"{name}.c_next"] if name == "lstm_cell" else [])
    model = export(_Zoo(), [torch.from_numpy(a) for _, a in inputs], tmp / "zoo.onnx",
                   dynamo=True, fold=request.param, optimize=request.param,
                   input_names=[n for n, _ in inputs], output_names=outputs)
    manifest, loaded = import_and_load(model, tmp / "zoo.pha", signer, seed=3)
    assert manifest.golden_backend == "onnxruntime"
    return model, loaded


def test_layers_dynamo_export_matches_onnxruntime(zoo):
    model, loaded = zoo
    rng = np.random.default_rng(4)
    feeds = []
    for _ in range(2):
        feed = {}
        for name, (_, shapes, _) in sorted(LAYERS.items()):
            feed.update({f"{name}.in{i}": a for i, a in enumerate(_inputs(shapes, rng))})
        feeds.append(feed)
    check_against_onnxruntime(model, loaded, feeds)


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_layer_dynamo_export_maps_to_its_ops(zoo, layer):
    _, loaded = zoo
    producers = {t: n for n in loaded.graph.nodes for t in n.outputs}
    # walk back from the layer's output to the layer's own inputs
    seen, todo = set(), [f"{layer}.y"]
    inputs = {s.name for s in loaded.graph.inputs}
    while todo:
        t = todo.pop()
        n = producers.get(t)
        if n is None or n.name in seen:
            continue
        seen.add(n.name)
        todo += [i for i in n.inputs if i and i not in inputs]
    ops = {n.op for n in loaded.graph.nodes if n.name in seen}
    assert LAYERS[layer][2] <= ops | {"identity"}, (layer, ops)


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS[1:2] + EXPORTERS[3:4])
def test_batchnorm_running_stats_are_state_tensors(dynamo, fold, optimize, tmp_path, signer):
    module = _randomized(nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)), seed=5)
    x = torch.randn(1, 3, 6, 6)
    model = export(module, [x], tmp_path / "bn.onnx", dynamo=dynamo, fold=fold,
                   optimize=optimize, input_names=["x"], output_names=["y"])
    manifest, loaded = import_and_load(model, tmp_path / "bn.pha", signer)
    roles = {e.name: e.role for e in manifest.tensors}
    assert roles["_1.running_mean"] == roles["_1.running_var"] == "state"
    np.testing.assert_array_equal(loaded.graph.tensors["_1.running_var"],
                                  module[1].running_var.numpy())
    node = next(n for n in loaded.graph.nodes if n.op == "batchnorm")
    assert node.attrs["eps"] == module[1].eps and node.attrs["momentum"] == module[1].momentum
    check_against_onnxruntime(model, loaded, [{"x": np.random.default_rng(0).standard_normal(
        (1, 3, 6, 6)).astype(np.float32)}])


def test_a_training_mode_export_normalizes_by_the_batch(tmp_path, signer):
    """torch's export in training mode writes BatchNormalization with training_mode=1: x
    normalized by its batch's statistics, as torch's module in train mode computes it."""
    module = _randomized(nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)), seed=7).train()
    model = tmp_path / "bn.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.randn(2, 3, 6, 6),), model, dynamo=False,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                          input_names=["x"], output_names=["y"])
    assert onnx.helper.get_attribute_value(next(
        a for n in onnx.load(model).graph.node if n.op_type == "BatchNormalization"
        for a in n.attribute if a.name == "training_mode")) == 1
    _, loaded = import_and_load(model, tmp_path / "bn.pha", signer)
    rng = np.random.default_rng(3)
    feeds = [{"x": (rng.standard_normal((2, 3, 6, 6)) * 3 + 1).astype(np.float32)}
             for _ in range(2)]
    check_on_both_backends(model, loaded, feeds)
    with torch.no_grad():
        want = module(torch.from_numpy(feeds[0]["x"])).numpy()
    got = Executor(loaded.graph, NumpyBackend()).run(feeds[0])["y"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape, read", [((2, 3, 5), True), (("n", 4, 3, 5), True),
                                         ((4, 2), False)], ids=["1d", "2d-run-time", "0d"])
def test_training_mode_batchnorm_matches_onnxruntime(shape, read, tmp_path, signer):
    """ONNX's training_mode=1 (opset 15): Y by the batch's mean and population variance over
    every axis but the channels'; the running mean and variance outputs, where read, the
    inputs' times momentum plus the batch's times 1 - momentum."""
    helper, tp = onnx.helper, onnx.TensorProto
    c, rng = shape[1], np.random.default_rng(1)
    stats = [onnx.numpy_helper.from_array(v.astype(np.float32), n) for n, v in (
        ("s", rng.standard_normal(c)), ("b", rng.standard_normal(c)),
        ("m", rng.standard_normal(c)), ("v", rng.random(c) + 0.5))]
    outputs = ["y", "rm", "rv"] if read else ["y"]
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"],
                            name="bn", training_mode=1, momentum=0.8, epsilon=1e-3)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", tp.FLOAT, list(shape))],
        [helper.make_tensor_value_info(o, tp.FLOAT, list(shape) if o == "y" else [c])
         for o in outputs], stats)
    model = tmp_path / "bn.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)]), model)
    _, loaded = import_and_load(model, tmp_path / "bn.pha", signer)
    sizes = [tuple(n if d == "n" else d for d in shape) for n in (1, 3)]
    check_on_both_backends(model, loaded, [
        {"x": (rng.standard_normal(s) * 2 - 1).astype(np.float32)} for s in sizes])


def test_a_training_mode_that_is_not_0_or_1_is_refused(tmp_path):
    helper, tp = onnx.helper, onnx.TensorProto
    stats = [helper.make_tensor(n, tp.FLOAT, [3], [1.0] * 3) for n in "sbmv"]
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], name="bn",
                            training_mode=2)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", tp.FLOAT,
                                                                          [2, 3, 4])],
                              [helper.make_tensor_value_info("y", tp.FLOAT, [2, 3, 4])], stats)
    model = tmp_path / "bn.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)]), model)
    assert_refused(model, ModelFileError, "node 'bn' (BatchNormalization)",
                   "attribute training_mode=2 must be 0 or 1")


class _CellWithGates(nn.Module):
    """An LSTMCell written out by hand, with its input gate also returned: the chain is not
    private, so it must stay glue ops (and still be right)."""

    def __init__(self):
        super().__init__()
        self.ih, self.hh = nn.Linear(6, 20), nn.Linear(5, 20)

    def forward(self, x, h, c):
        i, f, g, o = (self.ih(x) + self.hh(h)).chunk(4, dim=1)
        i = torch.sigmoid(i)
        c = torch.sigmoid(f) * c + i * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c, i


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_chain_read_elsewhere_is_not_fused(dynamo, tmp_path, signer):
    rng = np.random.default_rng(0)
    args = _inputs([(2, 6), (2, 5), (2, 5)], rng)
    model = export(_CellWithGates(), [torch.from_numpy(a) for a in args], tmp_path / "c.onnx",
                   dynamo=dynamo, input_names=["x", "h", "c"], output_names=["h2", "c2", "i"])
    _, loaded = import_and_load(model, tmp_path / "c.pha", signer)
    ops = [n.op for n in loaded.graph.nodes]
    assert "lstm_cell" not in ops and "sigmoid" in ops
    check_against_onnxruntime(model, loaded, [dict(zip(["x", "h", "c"], args))])


def test_fused_lstm_cell_keeps_the_layer_names(tmp_path, signer):
    rng = np.random.default_rng(0)
    args = _inputs([(2, 6), (2, 5), (2, 5)], rng)
    model = export(_Cell(), [torch.from_numpy(a) for a in args], tmp_path / "c.onnx",
                   dynamo=False, input_names=["x", "h", "c"], output_names=["h2", "c2"])
    _, loaded = import_and_load(model, tmp_path / "c.pha", signer)
    (node,) = loaded.graph.nodes
    assert node.op == "lstm_cell" and node.name == "cell"
    assert node.inputs == ("x", "h", "c", "cell.weight_ih", "cell.weight_hh", "cell.bias_ih",
                           "cell.bias_hh")



def test_group_norms_reading_one_exported_weight_are_each_one_group_norm(tmp_path, signer):
    """The legacy exporter writes equal initializers as one tensor (the others Identity nodes of
    it): GroupNorms as initialized (weights of ones, biases of zeros) read the same two; each
    is still one group_norm."""
    torch.manual_seed(0)
    module = nn.Sequential(nn.GroupNorm(2, 4), nn.Conv2d(4, 4, 1), nn.GroupNorm(2, 4),
                           nn.Conv2d(4, 4, 1), nn.GroupNorm(1, 4))
    x = np.random.default_rng(0).standard_normal((1, 4, 5, 5)).astype(np.float32)
    model = export(module, [torch.from_numpy(x)], tmp_path / "g.onnx", dynamo=False,
                   input_names=["x"], output_names=["y"])
    g = onnx.load(model).graph
    weights = [t.name for t in g.initializer if t.name.startswith("onnx::Mul")]
    assert len(weights) == 1  # the three GroupNorms' weights: one tensor (and Identity nodes)
    _, loaded = import_and_load(model, tmp_path / "g.pha", signer)
    ops = [n.op for n in loaded.graph.nodes]
    assert ops == ["group_norm", "conv", "group_norm", "conv", "group_norm"], ops
    check_on_both_backends(model, loaded, [{"x": x}, {"x": x * 100 + 3}])

class _SameConv1d(nn.Module):
    """A temporal conv with padding="same", which the legacy exporter writes as auto_pad."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 6, 5, padding="same")

    def forward(self, x):
        return self.conv(x)


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_same_padding_over_a_run_time_length(dynamo, tmp_path, signer):
    """auto_pad SAME_UPPER at stride 1 pads k - 1 whatever the length: a run-time length
    takes it (the dynamo exporter writes the pads out)."""
    torch.manual_seed(0)
    path = tmp_path / "s.onnx"
    module, x = _SameConv1d().eval(), torch.randn(2, 4, 12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            torch.onnx.export(module, (x,), dynamo=True, verbose=False, input_names=["x"],
                              output_names=["y"], dynamic_shapes=({0: torch.export.Dim("batch"),
                                               2: torch.export.Dim("t")},)).save(str(path))
        else:
            torch.onnx.export(module, (x,), str(path), dynamo=False, input_names=["x"],
                              output_names=["y"], dynamic_axes={"x": {0: "batch", 2: "t"}})
    _, loaded = import_and_load(path, tmp_path / "s.pha", signer)
    [conv] = [n for n in loaded.graph.nodes if n.op == "conv"]
    assert conv.attrs["padding"] == ((2, 2),)
    rng = np.random.default_rng(0)
    check_on_both_backends(path, loaded, [{"x": rng.standard_normal((n, 4, t)).astype(
        np.float32)} for n, t in ((1, 1), (2, 7), (3, 30))])


@pytest.mark.parametrize("auto, stride, pads", [
    ("SAME_UPPER", 1, ((1, 2),)), ("SAME_LOWER", 1, ((2, 1),)), ("SAME_UPPER", 2, ((1, 2),)),
    ("SAME_LOWER", 2, None)])
def test_auto_pad_over_a_run_time_length(auto, stride, pads, tmp_path, signer):
    """An even kernel (4) pads one more after (SAME_UPPER) or before (SAME_LOWER). At stride 2
    the total pad is 2 or 3 by the length's parity: SAME_UPPER pads 1 before either way, so
    it pads (1, 2), which no window reads past; SAME_LOWER pads 1 or 2 before, so a run-time
    length is refused naming the node."""
    helper, tp = onnx.helper, onnx.TensorProto
    w = onnx.numpy_helper.from_array(np.random.default_rng(1).standard_normal(
        (3, 2, 4)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="conv", auto_pad=auto,
                          strides=[stride])], "g",
        [helper.make_tensor_value_info("x", tp.FLOAT, [1, 2, "t"])],
        [helper.make_tensor_value_info("y", tp.FLOAT, [1, 3, None])], initializer=[w])
    path = tmp_path / "c.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    if pads is None:
        assert_refused(path, UnsupportedModelError, "node 'conv' (Conv)",
                       f"auto_pad={auto} with kernel 4, stride 2 and dilation 1 pads [1, 2] "
                       f"before, by the size mod the stride, which needs a static spatial size")
        return
    _, loaded = import_and_load(path, tmp_path / "c.pha", signer)
    assert loaded.graph.nodes[0].attrs["padding"] == pads
    check_on_both_backends(path, loaded, [{"x": np.random.default_rng(t).standard_normal(
        (1, 2, t)).astype(np.float32)} for t in (1, 4, 9, 10)])
