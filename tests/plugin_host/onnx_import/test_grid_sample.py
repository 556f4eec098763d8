"""GridSample (torch's grid_sample) imported from ONNX as the grid_sample op, of images and of
volumes, with the grid a run-time input or a constant (a constant theta through affine_grid),
and AffineGrid of a run-time theta (a spatial transformer); compared with onnxruntime
on finite values, and with torch on nan and infinite grid positions, where onnxruntime's
GridSample differs from torch (bicubic: onnxruntime's results there, as the grid_sample op
defines). What the mapping cannot take is refused naming the node."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from plugin_host.errors import ModelFileError, UnsupportedModelError
from plugin_host.executor import Executor
from plugin_host.onnx_import import import_onnx
from plugins.numpy_backend import NumpyBackend

from .conftest import (EXPORTERS, check_against_onnxruntime, check_on_both_backends, export,
                       float64_inside, import_and_load, onnx, torch)

F = torch.nn.functional
helper, TP = onnx.helper, onnx.TensorProto
RNG = np.random.default_rng(8)
MODES = [(m, p, a) for m in ("bilinear", "nearest") for p in ("zeros", "border", "reflection")
         for a in (False, True)]


def _grid(n, ho, wo):
    """Positions partly outside [-1, 1], with the corners and the centre exactly."""
    g = RNG.uniform(-1.4, 1.4, (n, ho, wo, 2)).astype(np.float32)
    g[0, 0, :5] = [[-1, -1], [1, 1], [0, 0], [-1, 1], [1, 0]]
    return g


def _feeds(shape, grid_shape):
    """Random inputs, and one with finite float32 extremes spread into x."""
    feeds = [{"x": (RNG.standard_normal(shape) * 3).astype(np.float32),
              "grid": _grid(*grid_shape)} for _ in range(2)]
    x = RNG.standard_normal(shape).astype(np.float32)
    x.reshape(-1)[:5] = [1e30, -1e30, 1e-45, -0.0, 3e-39]
    return feeds + [{"x": x, "grid": _grid(*grid_shape)}]


class _Every(torch.nn.Module):
    """grid_sample in each mode, padding mode and align_corners, on a run-time grid."""

    def forward(self, x, grid):
        return tuple(F.grid_sample(x, grid, mode=m, padding_mode=p, align_corners=a)
                     for m, p, a in MODES)


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_grid_sample_on_a_run_time_grid_matches_onnxruntime(dynamo, fold, optimize, tmp_path,
                                                            signer):
    names = [f"y{i}" for i in range(len(MODES))]
    model = export(_Every(), [torch.randn(2, 3, 5, 7), torch.rand(2, 4, 6, 2) * 2 - 1],
                   tmp_path / "g.onnx", dynamo=dynamo, fold=fold, optimize=optimize,
                   input_names=["x", "grid"], output_names=names)
    _, loaded = import_and_load(model, tmp_path / "g.pha", signer)
    sampled = [n for n in loaded.graph.nodes if n.op == "grid_sample"]
    assert [(n.attrs["mode"], n.attrs["padding_mode"], n.attrs["align_corners"])
            for n in sampled] == MODES
    assert {s.name: s.shape for s in loaded.graph.outputs}["y0"] == (2, 3, 4, 6)
    check_against_onnxruntime(model, loaded, _feeds((2, 3, 5, 7), (2, 4, 6)))


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_nan_and_infinite_grid_positions_give_torch_results(dynamo, tmp_path, signer):
    """Where onnxruntime's GridSample differs from torch (a nan, infinite or huge position),
    the imported model gives torch's results."""
    model = export(_Every(), [torch.randn(2, 3, 5, 7), torch.rand(2, 4, 6, 2) * 2 - 1],
                   tmp_path / "g.onnx", dynamo=dynamo, input_names=["x", "grid"],
                   output_names=[f"y{i}" for i in range(len(MODES))])
    _, loaded = import_and_load(model, tmp_path / "g.pha", signer)
    x = RNG.standard_normal((2, 3, 5, 7)).astype(np.float32)
    grid = _grid(2, 4, 6)
    grid.reshape(-1)[RNG.permutation(grid.size)[:24]] = np.resize(
        np.array([np.nan, np.inf, -np.inf, 3e38, -3e38, 1e20], np.float32), 24)
    got = Executor(loaded.graph, NumpyBackend()).run({"x": x, "grid": grid})
    want = _Every()(torch.from_numpy(x), torch.from_numpy(grid))
    for i, w in enumerate(want):
        np.testing.assert_allclose(got[f"y{i}"], w.numpy(), rtol=1e-5, atol=1e-5,
                                   equal_nan=True, err_msg=str(MODES[i]))


class _EveryVolume(torch.nn.Module):
    """grid_sample of a volume (N, C, D, H, W), trilinear and nearest, each padding mode and
    align_corners, on a run-time grid (N, Do, Ho, Wo, 3)."""

    def forward(self, x, grid):
        return tuple(F.grid_sample(x, grid, mode=m, padding_mode=p, align_corners=a)
                     for m, p, a in MODES)


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS[2:])
def test_volumetric_grid_sample_matches_onnxruntime(dynamo, fold, optimize, tmp_path, signer):
    """The dynamo exporter writes opset 20's GridSample of a volume (the legacy one cannot
    export it)."""
    model = export(_EveryVolume(), [torch.randn(2, 3, 4, 5, 6),
                                    torch.rand(2, 3, 4, 5, 3) * 2 - 1], tmp_path / "v.onnx",
                   dynamo=dynamo, fold=fold, optimize=optimize, input_names=["x", "grid"],
                   output_names=[f"y{i}" for i in range(len(MODES))])
    _, loaded = import_and_load(model, tmp_path / "v.pha", signer)
    assert sum(n.op == "grid_sample" for n in loaded.graph.nodes) == len(MODES)
    assert {s.name: s.shape for s in loaded.graph.outputs}["y0"] == (2, 3, 3, 4, 5)
    feeds = [{"x": (RNG.standard_normal((2, 3, 4, 5, 6)) * 3).astype(np.float32),
              "grid": RNG.uniform(-1.4, 1.4, (2, 3, 4, 5, 3)).astype(np.float32)}
             for _ in range(3)]
    check_on_both_backends(model, loaded, feeds)


CUBIC = [(p, a) for p in ("zeros", "border", "reflection") for a in (False, True)]


class _EveryBicubic(torch.nn.Module):
    """grid_sample in mode bicubic, each padding mode and align_corners, on a run-time grid."""

    def forward(self, x, grid):
        return tuple(F.grid_sample(x, grid, mode="bicubic", padding_mode=p, align_corners=a)
                     for p, a in CUBIC)


def _cubic_feeds(shape, grid_shape):
    """:func:`_feeds`, and grids whose x and y run through the pixel centres and edges of
    x with and without align_corners (a few outside), in turn."""
    feeds = _feeds(shape, grid_shape)
    h, w = shape[2:]
    for d, axis in ((w, 0), (h, 1)):
        exact = np.concatenate([np.arange(-1, d + 2) * 2 / d - 1,
                                (np.arange(-1, d + 2) * 2 + 1) / d - 1,
                                np.linspace(-1, 1, d)]).astype(np.float32)
        g = _grid(*grid_shape)
        g[..., axis] = np.resize(exact, g.shape[:-1])
        feeds.append({"x": (RNG.standard_normal(shape) * 3).astype(np.float32), "grid": g})
    return feeds


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_bicubic_grid_sample_matches_onnxruntime_and_torch(dynamo, fold, optimize, tmp_path,
                                                           signer):
    """Both exporters write opset 20's GridSample mode cubic; it imports as grid_sample mode
    cubic and gives onnxruntime's results on both backends, and torch's on finite grids."""
    model = export(_EveryBicubic(), [torch.randn(2, 3, 5, 7), torch.rand(2, 4, 6, 2) * 2 - 1],
                   tmp_path / "c.onnx", dynamo=dynamo, fold=fold, optimize=optimize,
                   input_names=["x", "grid"], output_names=[f"y{i}" for i in range(6)])
    assert {a.s for n in onnx.load(model).graph.node if n.op_type == "GridSample"
            for a in n.attribute if a.name == "mode"} == {b"cubic"}
    _, loaded = import_and_load(model, tmp_path / "c.pha", signer)
    assert [(n.op, n.attrs["mode"], n.attrs["padding_mode"], n.attrs["align_corners"])
            for n in loaded.graph.nodes] == [("grid_sample", "cubic", p, a) for p, a in CUBIC]
    assert {s.name: s.shape for s in loaded.graph.outputs}["y0"] == (2, 3, 4, 6)
    feeds = _cubic_feeds((2, 3, 5, 7), (2, 4, 6))
    check_on_both_backends(model, loaded, feeds)
    executor = Executor(loaded.graph, NumpyBackend())
    for feed in feeds[:2] + feeds[3:]:  # not x of +-1e30: torch's weights round otherwise
        got = executor.run(dict(feed))
        want = _EveryBicubic()(torch.from_numpy(feed["x"]), torch.from_numpy(feed["grid"]))
        for i, w in enumerate(want):
            np.testing.assert_allclose(got[f"y{i}"], w.numpy(), rtol=1e-4, atol=1e-4,
                                       err_msg=str(CUBIC[i]))


@pytest.mark.parametrize("opset", [16, 19])
def test_bicubic_grid_sample_of_opset_16_to_19_matches_onnxruntime(opset, tmp_path, signer):
    """Before opset 20 the exporters name the mode bicubic."""
    model = export(_EveryBicubic(), [torch.randn(2, 3, 5, 7), torch.rand(2, 4, 6, 2) * 2 - 1],
                   tmp_path / "c.onnx", dynamo=False, opset=opset, input_names=["x", "grid"],
                   output_names=[f"y{i}" for i in range(6)])
    assert {a.s for n in onnx.load(model).graph.node if n.op_type == "GridSample"
            for a in n.attribute if a.name == "mode"} == {b"bicubic"}
    _, loaded = import_and_load(model, tmp_path / "c.pha", signer)
    assert {n.attrs["mode"] for n in loaded.graph.nodes} == {"cubic"}
    check_on_both_backends(model, loaded, _cubic_feeds((2, 3, 5, 7), (2, 4, 6)))


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_nan_and_infinite_bicubic_positions_give_onnxruntime_results(dynamo, tmp_path, signer):
    """A nan, infinite or huge position samples as -1 there on both backends, as onnxruntime
    does (torch gives nan at a nan or infinite one)."""
    model = export(_EveryBicubic(), [torch.randn(2, 3, 5, 7), torch.rand(2, 4, 6, 2) * 2 - 1],
                   tmp_path / "c.onnx", dynamo=dynamo, input_names=["x", "grid"],
                   output_names=[f"y{i}" for i in range(6)])
    _, loaded = import_and_load(model, tmp_path / "c.pha", signer)
    x = RNG.standard_normal((2, 3, 5, 7)).astype(np.float32)
    grid = _grid(2, 4, 6)
    grid.reshape(-1)[RNG.permutation(grid.size)[:24]] = np.resize(
        np.array([np.nan, np.inf, -np.inf, 3e38, -3e38, 1e20], np.float32), 24)
    check_on_both_backends(model, loaded, [{"x": x, "grid": grid}])
    got = Executor(loaded.graph, NumpyBackend()).run({"x": x, "grid": grid})
    edge = np.where(np.abs(grid) <= 1e6, grid, np.float32(-1))
    want = _EveryBicubic()(torch.from_numpy(x), torch.from_numpy(edge))
    for i, w in enumerate(want):
        np.testing.assert_allclose(got[f"y{i}"], w.numpy(), rtol=1e-4, atol=1e-4,
                                   err_msg=str(CUBIC[i]))


class _Affine(torch.nn.Module):
    """A warp by a constant affine transform, the grid from affine_grid."""

    def __init__(self):
        super().__init__()
        self.register_buffer("theta", torch.tensor([[[0.9, 0.2, 0.1], [-0.1, 1.1, -0.2]],
                                                    [[1.2, 0.0, -0.3], [0.3, 0.8, 0.4]]]))

    def forward(self, x):
        grid = F.affine_grid(self.theta, [2, 3, 6, 8], align_corners=False)
        return F.grid_sample(x, grid, padding_mode="border", align_corners=False)


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_affine_grid_of_a_constant_theta(dynamo, fold, optimize, tmp_path, signer):
    """The dynamo exporter folds affine_grid (its optimizer: one grid_sample on a constant
    grid) or writes it as arithmetic on constants, which imports as glue ops computing the grid
    (Pad does not fold at import). The legacy exporter writes ONNX AffineGrid (opset 20), which
    folds at import: one grid_sample on a constant grid."""
    model = export(_Affine(), [torch.randn(2, 3, 5, 7)], tmp_path / "a.onnx", dynamo=dynamo,
                   fold=fold, optimize=optimize, input_names=["x"], output_names=["y"])
    _, loaded = import_and_load(model, tmp_path / "a.pha", signer)
    ops = [n.op for n in loaded.graph.nodes]
    assert ops[-1:] == ["grid_sample"] and (ops == ["grid_sample"]) == (optimize or not dynamo)
    assert set(ops) <= {"pad", "add", "reshape", "mul", "sum", "grid_sample"}
    assert loaded.graph.outputs[0].shape == (2, 3, 6, 8)
    feeds = [{"x": RNG.standard_normal((2, 3, 5, 7)).astype(np.float32)} for _ in range(2)]
    check_against_onnxruntime(model, loaded, feeds)


class _Transformer(torch.nn.Module):
    """A spatial transformer: theta predicted from the input (a run-time value), the grid from
    affine_grid, of an image or (``volume``) of a volume, with and without align_corners."""

    def __init__(self, volume: bool):
        super().__init__()
        self.volume = volume
        n = 3 if volume else 2
        self.loc = torch.nn.Linear(2 * (4 * 5 * 6 if volume else 5 * 6), n * (n + 1))
        self.shape = (n, n + 1)

    def forward(self, x):
        theta = self.loc(x.flatten(1)).view(-1, *self.shape)
        grid = F.affine_grid(theta, list(x.shape), align_corners=False)
        return (F.grid_sample(x, grid, padding_mode="border", align_corners=False),
                F.affine_grid(theta, list(x.shape), align_corners=True))


@pytest.mark.parametrize("volume", [False, True], ids=["image", "volume"])
@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_affine_grid_of_a_run_time_theta_matches_onnxruntime(volume, dynamo, fold, optimize,
                                                             tmp_path, signer):
    """The legacy exporter writes AffineGrid: a matmul of the constant base grid by theta;
    the dynamo one writes the same arithmetic in glue ops."""
    shape = (2, 2, 4, 5, 6) if volume else (2, 2, 5, 6)
    model = export(_Transformer(volume), [torch.randn(*shape)], tmp_path / "t.onnx",
                   dynamo=dynamo, fold=fold, optimize=optimize, input_names=["x"],
                   output_names=["y", "grid"])
    if not dynamo:
        assert "AffineGrid" in {n.op_type for n in onnx.load(model).graph.node}
    _, loaded = import_and_load(model, tmp_path / "t.pha", signer)
    assert {s.name: s.shape for s in loaded.graph.outputs}["grid"] == (
        shape[:1] + shape[2:] + (len(shape) - 2,))
    feeds = [{"x": RNG.standard_normal(shape).astype(np.float32)} for _ in range(3)]
    check_against_onnxruntime(model, loaded, feeds)


@pytest.mark.parametrize("volume", [False, True], ids=["image", "volume"])
def test_affine_grid_over_a_run_time_batch_takes_any_batch(volume, tmp_path, signer):
    """Under a dynamic batch the legacy exporter's AffineGrid takes its size from x.shape:
    its N is the run-time batch, theta's own, and the grid keeps it."""
    shape = (2, 2, 4, 5, 6) if volume else (2, 2, 5, 6)
    path = tmp_path / "b.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(_Transformer(volume).eval(), (torch.randn(*shape),), str(path),
                          dynamo=False, input_names=["x"], output_names=["y", "grid"],
                          dynamic_axes={"x": {0: "batch"}})
    assert "AffineGrid" in {n.op_type for n in onnx.load(path).graph.node}
    _, loaded = import_and_load(path, tmp_path / "b.pha", signer)
    assert {s.name: s.shape for s in loaded.graph.outputs}["grid"] == (
        "batch",) + shape[2:] + (len(shape) - 2,)
    check_on_both_backends(path, loaded, [
        {"x": RNG.standard_normal((n,) + shape[1:]).astype(np.float32)} for n in (1, 3)])


class _Warp(torch.nn.Module):
    def __init__(self, mode: str, align_corners: bool):
        super().__init__()
        self.mode, self.align_corners = mode, align_corners

    def forward(self, x, grid):
        return F.grid_sample(x, grid, mode=self.mode, padding_mode="reflection",
                             align_corners=self.align_corners)


@pytest.mark.parametrize("mode, align_corners, both", [("bilinear", True, False),
                                                       ("bicubic", False, True)])
def test_a_symbolic_batch_dim_passes_through_grid_sample(mode, align_corners, both, tmp_path,
                                                         signer):
    path = tmp_path / "b.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(_Warp(mode, align_corners).eval(),
                          (torch.randn(2, 3, 5, 7), torch.rand(2, 4, 6, 2)),
                          str(path), dynamo=False, input_names=["x", "grid"],
                          output_names=["y"], dynamic_axes={"x": {0: "batch"},
                                                            "grid": {0: "batch"}})
    _, loaded = import_and_load(path, tmp_path / "b.pha", signer)
    assert loaded.graph.outputs[0].shape == ("batch", 3, 4, 6)
    check = check_on_both_backends if both else check_against_onnxruntime
    check(path, loaded, [
        {"x": RNG.standard_normal((n, 3, 5, 7)).astype(np.float32), "grid": _grid(n, 4, 6)}
        for n in (1, 3)])


# --- ONNX models written with onnx.helper: opset 16's names, and the refusals ------------------


def _model(tmp_path, x_shape, grid=None, attrs=None, opset=16, grid_type=TP.FLOAT):
    """A one-node GridSample model named ``node`` over ``x``, the grid a constant (an array)
    or a run-time input of shape ``grid``."""
    const = isinstance(grid, np.ndarray)
    inits = [onnx.numpy_helper.from_array(grid, "grid")] if const else []
    inputs = [helper.make_tensor_value_info("x", TP.FLOAT, list(x_shape))]
    if not const:
        inputs.append(helper.make_tensor_value_info("grid", grid_type, list(grid)))
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], name="node", **(attrs or {}))
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info(
        "y", TP.FLOAT, [None] * len(x_shape))], initializer=inits)
    path = tmp_path / "gs.onnx"
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString())
    return path


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
def test_opset_16_grid_sample_on_a_constant_grid_matches_onnxruntime(tmp_path, signer, mode,
                                                                     padding_mode):
    path = _model(tmp_path, (2, 3, 4, 5), _grid(2, 3, 7), {
        "mode": mode, "padding_mode": padding_mode, "align_corners": 1})
    _, loaded = import_and_load(path, tmp_path / "gs.pha", signer)
    (node,) = loaded.graph.nodes
    assert (node.op, node.attrs["mode"], node.attrs["align_corners"]) == (
        "grid_sample", {"bicubic": "cubic"}.get(mode, mode), True)
    check_against_onnxruntime(path, loaded, [
        {"x": RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)} for _ in range(2)])


@pytest.mark.parametrize("kw, message", [
    ({"attrs": {"mode": "area"}}, "attribute mode='area' is not supported (only "
     "bilinear, linear, nearest, bicubic, cubic)"),
    ({"attrs": {"mode": "cubic"}, "x_shape": (2, 3, 4, 5, 6), "grid": (2, 4, 6, 5, 3),
      "opset": 20}, "attribute mode='cubic' on input shape [2, 3, 4, 5, 6]: only (N, C, H, W) "
     "is sampled cubic"),
    ({"attrs": {"mode": "bicubic"}, "x_shape": (1, 2, 3, 4, 5), "grid": (1, 2, 3, 4, 3)},
     "attribute mode='bicubic' on input shape [1, 2, 3, 4, 5]: only (N, C, H, W) is sampled "
     "cubic"),
    ({"attrs": {"padding_mode": "wrap"}}, "attribute padding_mode='wrap' is not supported"),
    ({"attrs": {"align_corners": 2}}, "attribute align_corners=2 is not supported (only 0, 1)"),
    ({"x_shape": (1, 2, 3), "grid": (1, 2, 1), "opset": 20},
     "input shape [1, 2, 3]: only (N, C, H, W) and (N, C, D, H, W) are sampled"),
    ({"x_shape": (2, 3, 4, 5, 6), "grid": (2, 4, 6, 5, 2), "opset": 20}, "grid_sample: grid's "
     "last dim must be 3, got 2"),
    ({"grid": (3, 4, 6, 2)}, "maps to grid_sample, which refuses it: grid_sample: grid's batch "
     "dim must be 2, got 3"),
    ({"grid": (2, 4, 6, 2), "grid_type": TP.DOUBLE}, "grid_sample: grid must have the dtype "
     "of x (float32), got float64"),
])
def test_what_grid_sample_refuses_names_node_and_value(tmp_path, kw, message):
    kw = {"x_shape": (2, 3, 4, 5), "grid": (2, 4, 6, 2), **kw}
    path = float64_inside(_model(tmp_path, kw.pop("x_shape"), **kw))
    with pytest.raises(UnsupportedModelError) as info:
        import_onnx(path)
    text = str(info.value)
    assert "node 'node' (GridSample)" in text and message in text, text
    assert "\n" not in text


def _affine_model(tmp_path, theta_shape, size, attrs=None, const_theta=False):
    """A one-node AffineGrid model named ``node`` (opset 20): theta a run-time input of
    ``theta_shape`` (or a constant of it), size a constant (or, None, a run-time input)."""
    inputs, inits = [], []
    if const_theta:
        inits.append(onnx.numpy_helper.from_array(np.zeros(theta_shape, np.float32), "theta"))
    else:
        inputs.append(helper.make_tensor_value_info("theta", TP.FLOAT, list(theta_shape)))
    if size is None:
        inputs.append(helper.make_tensor_value_info("size", TP.INT64, [4]))
    else:
        inits.append(onnx.numpy_helper.from_array(np.array(size, np.int64), "size"))
    node = helper.make_node("AffineGrid", ["theta", "size"], ["y"], name="node", **(attrs or {}))
    rank = len(size) - 1 if size is not None and len(size) > 2 else 4
    nodes, out = [node], "y"
    if not inputs:  # an all-constant node: used by an Add to a graph input
        inputs.append(helper.make_tensor_value_info("z", TP.FLOAT, [1] * rank))
        nodes.append(helper.make_node("Add", ["y", "z"], ["s"], name="add"))
        out = "s"
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(
        out, TP.FLOAT, [None] * rank)], initializer=inits)
    path = tmp_path / "ag.onnx"
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 20)]).SerializeToString())
    return path


@pytest.mark.parametrize("kw, error, message", [
    ({"theta_shape": (2, 2, 3), "size": None}, UnsupportedModelError,
     "size"),
    ({"theta_shape": ("n", 2, 3), "size": [2, 1, 4, 5]}, UnsupportedModelError,
     "size [2, 1, 4, 5]: its N is fixed, but theta's is the run-time dim 'n'"),
    ({"theta_shape": (2, 2, 3), "size": [3, 1, 4, 5]}, ModelFileError,
     "theta of shape [2, 2, 3] must be of shape [3, 2, 3] for size [3, 1, 4, 5]"),
    ({"theta_shape": (2, 2, 3), "size": [2, 1, 4, 5, 6]}, ModelFileError,
     "theta of shape [2, 2, 3] must be of shape [2, 3, 4]"),
    ({"theta_shape": (2, 2, 3), "size": [2, 1, 4]}, ModelFileError,
     "size [2, 1, 4] must be (N, C, H, W) or (N, C, D, H, W), each >= 1"),
    ({"theta_shape": (2, 2, 3), "size": [2, 1, 0, 5]}, ModelFileError, "each >= 1"),
    ({"theta_shape": (2, 2, 3), "size": [2, 1, 4, 5], "attrs": {"align_corners": 2}},
     ModelFileError, "attribute align_corners=2 must be 0 or 1"),
    ({"theta_shape": (2, 2, 3), "size": [2, 1, 4, 5], "const_theta": True,
      "attrs": {"align_corners": 3}}, ModelFileError, "attribute align_corners=3 must be 0"),
])
def test_what_affine_grid_refuses_names_node_and_value(tmp_path, kw, error, message):
    path = _affine_model(tmp_path, **kw)
    with pytest.raises(error) as info:
        import_onnx(path)
    text = str(info.value)
    assert type(info.value) is error and "node 'node' (AffineGrid)" in text and message in text, \
        text


def test_affine_grid_base_is_onnxruntime_s(tmp_path, signer):
    """A constant theta folds at import to onnxruntime's grid (the identity transform: its
    base grid), each size of 1 included, with and without align_corners."""
    import onnxruntime as ort

    from plugin_host.onnx_import.spatial import affine_base

    for size in ([1, 1, 3, 4], [1, 1, 1, 5], [1, 1, 7, 10], [1, 1, 33, 2], [1, 1, 2, 1, 3],
                 [1, 1, 5, 6, 7]):
        for align in (0, 1):
            n = len(size) - 2
            theta = np.eye(n, n + 1, dtype=np.float32)[None]
            node = helper.make_node("AffineGrid", ["theta", "size"], ["y"], align_corners=align)
            graph = helper.make_graph([node], "g", [], [helper.make_tensor_value_info(
                "y", TP.FLOAT, [None] * (n + 2))], initializer=[
                onnx.numpy_helper.from_array(theta, "theta"),
                onnx.numpy_helper.from_array(np.array(size, np.int64), "size")])
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
            (want,) = ort.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"]).run(None, {})
            got = affine_base(size[2:], bool(align))[:, :n].reshape(want.shape)
            np.testing.assert_array_equal(got, want, err_msg=f"{size} {align}")
