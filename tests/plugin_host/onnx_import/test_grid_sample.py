"""GridSample (torch's grid_sample) imported from ONNX as the grid_sample op, with the grid a
run-time input or a constant (a constant theta through affine_grid); compared with onnxruntime
on finite values, and with torch on nan and infinite grid positions, where onnxruntime's
GridSample differs from torch. What the mapping cannot take is refused naming the node."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from plugin_host.errors import UnsupportedModelError
from plugin_host.executor import Executor
from plugin_host.onnx_import import import_onnx
from plugins.numpy_backend import NumpyBackend

from .conftest import (EXPORTERS, check_against_onnxruntime, export, import_and_load, onnx,
                       torch)

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
    from plugins.onnxruntime_backend import OnnxruntimeBackend

    for backend in (None, OnnxruntimeBackend()):
        check_against_onnxruntime(model, loaded, feeds, backend=backend)


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
    (Pad does not fold at import). The legacy exporter writes ONNX AffineGrid, which is not
    mapped (refused, naming it)."""
    model = export(_Affine(), [torch.randn(2, 3, 5, 7)], tmp_path / "a.onnx", dynamo=dynamo,
                   fold=fold, optimize=optimize, input_names=["x"], output_names=["y"])
    if not dynamo:
        with pytest.raises(UnsupportedModelError, match=r"\(AffineGrid\): op 'AffineGrid' is "
                                                        r"not supported"):
            import_onnx(model)
        return
    _, loaded = import_and_load(model, tmp_path / "a.pha", signer)
    ops = [n.op for n in loaded.graph.nodes]
    assert ops[-1:] == ["grid_sample"] and (ops == ["grid_sample"]) == optimize
    assert set(ops) <= {"pad", "add", "reshape", "mul", "sum", "grid_sample"}
    assert loaded.graph.outputs[0].shape == (2, 3, 6, 8)
    feeds = [{"x": RNG.standard_normal((2, 3, 5, 7)).astype(np.float32)} for _ in range(2)]
    check_against_onnxruntime(model, loaded, feeds)


class _Warp(torch.nn.Module):
    def forward(self, x, grid):
        return F.grid_sample(x, grid, mode="bilinear", padding_mode="reflection",
                             align_corners=True)


def test_a_symbolic_batch_dim_passes_through_grid_sample(tmp_path, signer):
    path = tmp_path / "b.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(_Warp().eval(), (torch.randn(2, 3, 5, 7), torch.rand(2, 4, 6, 2)),
                          str(path), dynamo=False, input_names=["x", "grid"],
                          output_names=["y"], dynamic_axes={"x": {0: "batch"},
                                                            "grid": {0: "batch"}})
    _, loaded = import_and_load(path, tmp_path / "b.pha", signer)
    assert loaded.graph.outputs[0].shape == ("batch", 3, 4, 6)
    check_against_onnxruntime(path, loaded, [
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


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
def test_opset_16_grid_sample_on_a_constant_grid_matches_onnxruntime(tmp_path, signer, mode,
                                                                     padding_mode):
    path = _model(tmp_path, (2, 3, 4, 5), _grid(2, 3, 7), {
        "mode": mode, "padding_mode": padding_mode, "align_corners": 1})
    _, loaded = import_and_load(path, tmp_path / "gs.pha", signer)
    (node,) = loaded.graph.nodes
    assert (node.op, node.attrs["mode"], node.attrs["align_corners"]) == (
        "grid_sample", mode, True)
    check_against_onnxruntime(path, loaded, [
        {"x": RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)} for _ in range(2)])


@pytest.mark.parametrize("kw, message", [
    ({"attrs": {"mode": "bicubic"}}, "attribute mode='bicubic' is not supported (only "
     "bilinear, linear, nearest)"),
    ({"attrs": {"mode": "cubic"}, "opset": 20}, "attribute mode='cubic' is not supported"),
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
    path = _model(tmp_path, kw.pop("x_shape"), **kw)
    with pytest.raises(UnsupportedModelError) as info:
        import_onnx(path)
    text = str(info.value)
    assert "node 'node' (GridSample)" in text and message in text, text
    assert "\n" not in text


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_bicubic_grid_sample_exported_by_torch_is_refused(dynamo, fold, optimize, tmp_path):
    class Bicubic(torch.nn.Module):
        def forward(self, x, grid):
            return F.grid_sample(x, grid, mode="bicubic", align_corners=False)

    model = export(Bicubic(), [torch.randn(1, 2, 3, 3), torch.rand(1, 2, 2, 2)],
                   tmp_path / "c.onnx", dynamo=dynamo, fold=fold, optimize=optimize)
    with pytest.raises(UnsupportedModelError, match=r"\(GridSample\): attribute mode='cubic' "
                                                    r"is not supported"):
        import_onnx(model)
