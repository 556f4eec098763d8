"""The numpy backend's glue kernels, run through the builder and executor, against torch."""

import functools
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from hypothesis import given, settings
from hypothesis import strategies as st

from abi.errors import ShapeError
from plugin_host.builder import GraphBuilder
from plugin_host.executor import Executor
from plugins.numpy_backend import NumpyBackend, glue

RNG = np.random.default_rng(0)


def run_op(op, arrays, layout="ANY", **attrs):
    """Build a one-node graph for ``op`` over ``arrays`` and run it; returns the outputs."""
    b = GraphBuilder(op)
    names = []
    for i, a in enumerate(arrays):
        dtype = str(a.dtype)
        names.append(b.input(f"in{i}", a.shape, dtype, layout))
    result = b.op(op, *names, name="n", **attrs)
    results = result if isinstance(result, tuple) else (result,)
    for i, r in enumerate(results):
        b.output(r, f"out{i}", layout)
    ex = Executor(b.build(), NumpyBackend())
    out = ex.run({f"in{i}": a for i, a in enumerate(arrays)})
    return [out[f"out{i}"] for i in range(len(results))]


def t(a):
    return torch.from_numpy(np.ascontiguousarray(a))


X = RNG.standard_normal((2, 3, 5, 7)).astype(np.float32) * 4


@pytest.mark.parametrize("op,ref", [
    ("relu", torch.relu), ("sigmoid", torch.sigmoid), ("tanh", torch.tanh),
])
def test_activations(op, ref):
    (y,) = run_op(op, [X])
    np.testing.assert_allclose(y, ref(t(X)).numpy(), rtol=1e-5, atol=1e-6)
    assert y.dtype == np.float32


EXTREMES = np.array([-1e4, -100, -20, -1, -1e-3, 0, 1e-3, 1, 20, 88, 100, 1e4], np.float32)


@pytest.mark.parametrize("op, attrs, ref", [
    ("elu", {}, TF.elu),
    ("elu", {"alpha": 0.3}, lambda x: TF.elu(x, alpha=0.3)),
    ("leaky_relu", {}, TF.leaky_relu),
    ("leaky_relu", {"alpha": 0.2}, lambda x: TF.leaky_relu(x, 0.2)),
    ("hard_sigmoid", {"alpha": 1 / 6, "beta": 0.5}, TF.hardsigmoid),
    ("hard_sigmoid", {}, lambda x: torch.clamp(0.2 * x + 0.5, 0, 1)),
    ("hard_swish", {}, TF.hardswish),
    ("softplus", {}, TF.softplus),
    ("exp", {}, torch.exp),
    ("log", {}, torch.log),
    ("sqrt", {}, torch.sqrt),
    ("reciprocal", {}, torch.reciprocal),
    ("erf", {}, torch.erf),
    ("abs", {}, torch.abs),
    ("neg", {}, torch.neg),
])
def test_more_activations_match_torch_also_at_the_extremes(op, attrs, ref):
    for x in (X, EXTREMES):
        with np.errstate(all="raise"):  # IEEE results, not warnings
            (y,) = run_op(op, [x], **attrs)
        assert y.dtype == np.float32
        np.testing.assert_allclose(y, ref(t(x)).numpy(), rtol=2e-6, atol=2e-7,
                                   equal_nan=True, err_msg=f"{op} {attrs}")


@pytest.mark.parametrize("op, ref", [("pow", torch.pow), ("max", torch.maximum),
                                     ("min", torch.minimum)])
def test_binary_math_broadcasts_as_torch(op, ref):
    a = np.abs(X) + 0.5 if op == "pow" else X
    b = (RNG.standard_normal((5, 1)) * 2).astype(np.float32)
    (y,) = run_op(op, [a, b])
    np.testing.assert_allclose(y, ref(t(a), t(b)).numpy(), rtol=2e-6, atol=1e-6)
    x = np.array([-2.0, 0.0, np.nan, 4.0], np.float32)
    with np.errstate(all="raise"):
        (y,) = run_op(op, [x, np.array([0.5, -1.0, 1.0, np.nan], np.float32)])
    np.testing.assert_allclose(y, ref(t(x), torch.tensor([0.5, -1.0, 1.0, np.nan])).numpy(),
                               equal_nan=True)


@pytest.mark.parametrize("op, ref", [
    ("equal", torch.eq), ("greater", torch.gt), ("greater_equal", torch.ge),
    ("less", torch.lt), ("less_equal", torch.le)])
def test_comparisons_give_bool_as_torch(op, ref):
    a = np.round(X)
    b = np.round(RNG.standard_normal((5, 1)) * 3).astype(np.float32)
    (y,) = run_op(op, [a, b])
    assert y.dtype == np.bool_
    np.testing.assert_array_equal(y, ref(t(a), t(b)).numpy())


def test_and_or_floor_ceil_round_as_torch():
    a, b = X > 0, X < 2
    np.testing.assert_array_equal(run_op("and", [a, b])[0], torch.logical_and(t(a), t(b)))
    np.testing.assert_array_equal(run_op("or", [a, b])[0], torch.logical_or(t(a), t(b)))
    halves = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49, -3.7], np.float32)
    for op, ref in (("floor", torch.floor), ("ceil", torch.ceil), ("round", torch.round)):
        for x in (X, halves):
            np.testing.assert_array_equal(run_op(op, [x])[0], ref(t(x)).numpy())


def test_reductions_and_argmax_as_torch():
    (y,) = run_op("sum", [X], axes=[1, -1], keepdim=True)
    np.testing.assert_allclose(y, t(X).sum(dim=(1, 3), keepdim=True).numpy(), rtol=1e-5,
                               atol=1e-5)
    (y,) = run_op("amax", [X], axes=[0, 2])
    np.testing.assert_array_equal(y, t(X).amax(dim=(0, 2)).numpy())
    (y,) = run_op("amin", [X], axes=[3])
    np.testing.assert_array_equal(y, t(X).amin(dim=3).numpy())
    ties = np.array([[1, 3, 3], [2, 2, 0]], np.int64)
    for x, axis in ((X, 1), (ties, 1), (ties, 0)):
        (y,) = run_op("argmax", [x], axis=axis, keepdim=True)
        assert y.dtype == np.int64
        np.testing.assert_array_equal(y, torch.argmax(t(x), dim=axis, keepdim=True).numpy())
    ints = np.arange(12, dtype=np.int32).reshape(3, 4)
    (y,) = run_op("sum", [ints], axes=[0])
    assert y.dtype == np.int32 and y.tolist() == [12, 15, 18, 21]


#: (N, C, D, H, W): trilinear and 3-D nearest
VOLUME = RNG.standard_normal((2, 3, 4, 3, 5)).astype(np.float32)

# torch's interpolate modes as resize attributes (ONNX Resize as torch's exporters write them)
RESIZE_MODES = {
    ("nearest", None): {"mode": "nearest", "coordinate_mode": "asymmetric",
                        "nearest_mode": "floor"},
    ("nearest-exact", None): {"mode": "nearest", "coordinate_mode": "half_pixel",
                              "nearest_mode": "round_prefer_ceil"},
    ("linear", False): {"mode": "linear", "coordinate_mode": "half_pixel"},
    ("linear", True): {"mode": "linear", "coordinate_mode": "align_corners"},
}


def _interpolate(x, mode, align_corners, **how):
    torch_mode = {"linear": ("linear", "bilinear", "trilinear")[x.ndim - 3]}.get(mode, mode)
    return TF.interpolate(t(x), mode=torch_mode, align_corners=align_corners, **how).numpy()


@pytest.mark.parametrize("mode, align_corners", sorted(RESIZE_MODES, key=str))
@pytest.mark.parametrize("factor", [2.0, 3.0, 1.5, 1.7, 0.5, 0.75, 0.4])
def test_resize_by_scale_as_torch(mode, align_corners, factor):
    from abi.ops.sampling import scaled_size

    for x in (X, X[:, :, 1], VOLUME):
        size = [scaled_size(d, factor) for d in x.shape[2:]]
        (y,) = run_op("resize", [x], size=size, scales=[factor] * len(size),
                      **RESIZE_MODES[mode, align_corners])
        want = _interpolate(x, mode, align_corners, scale_factor=factor)
        assert y.dtype == np.float32 and y.shape == want.shape
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode, align_corners", sorted(RESIZE_MODES, key=str))
@pytest.mark.parametrize("size", [(9, 14), (3, 4), (1, 1), (5, 7), (2, 13)])
def test_resize_to_a_size_as_torch(mode, align_corners, size):
    for x in (X, X[:, :, 1], VOLUME):
        out = list(((3,) + size)[-(x.ndim - 2):])
        (y,) = run_op("resize", [x], size=out, **RESIZE_MODES[mode, align_corners])
        want = _interpolate(x, mode, align_corners, size=out)
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("size", [(2, 3), (5, 14), (11, 4), (9, 30), (1, 1)])
def test_antialias_resize_as_torch(mode, size):
    """torch's interpolate(..., antialias=True) as its exporter writes it (half_pixel,
    exclude_outside; torch's bicubic antialias has a = -0.5): shrinking, growing, mixed, to 1;
    (N, C, L) too. onnxruntime's own checks are in the ONNX import's tests."""
    attrs = dict(mode=mode, coordinate_mode="half_pixel", exclude_outside=True, antialias=True,
                 cubic_coeff_a=-0.5 if mode == "cubic" else -0.75)
    torch_mode = {"linear": "bilinear", "cubic": "bicubic"}[mode]
    (y,) = run_op("resize", [X], size=list(size), **attrs)
    want = TF.interpolate(t(X), size=size, mode=torch_mode, antialias=True).numpy()
    assert y.dtype == np.float32 and y.shape == want.shape
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    if mode == "linear":
        (y,) = run_op("resize", [X[:, :, 1]], size=list(size[1:]), **attrs)
        want = TF.interpolate(t(X[:, :, 1:2]), size=(1, size[1]), mode="bilinear",
                              antialias=True).numpy()[:, :, 0]  # (torch: 2-D only)
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


def test_antialias_keeps_an_inf_within_its_windows():
    """An inf reaches only the outputs whose windows hold it (a weight of 0 past a window
    would otherwise make nan everywhere)."""
    x = np.zeros((1, 1, 1, 40), np.float32)
    x[0, 0, 0, [3, 39]] = np.inf  # the last: where the shorter windows' spare taps point
    with np.errstate(all="raise"):
        (y,) = run_op("resize", [x], size=[1, 10], mode="linear", antialias=True)
    assert np.isinf(y[0, 0, 0, [0, 1, 9]]).all() and (y[0, 0, 0, 2:8] == 0).all(), y


@pytest.mark.parametrize("mode, align_corners", sorted(RESIZE_MODES, key=str))
def test_resize_at_the_extremes_as_torch(mode, align_corners):
    big = np.finfo(np.float32).max
    x = np.array([[[-big, big, np.inf, 1.0, -np.inf, 0.0, np.nan, 1e-45, -big, -big]]],
                 np.float32)
    for factor in (2.0, 0.5, 1.5):
        size = [int(x.shape[2] * factor)]
        with np.errstate(all="raise"):  # IEEE results, not warnings
            (y,) = run_op("resize", [x], size=size, scales=[factor],
                          **RESIZE_MODES[mode, align_corners])
        want = _interpolate(x, mode, align_corners, scale_factor=factor)
        np.testing.assert_allclose(y, want, rtol=1e-5, equal_nan=True)


def test_resize_over_symbolic_spatial_dims():
    b = GraphBuilder("resize")
    x = b.input("x", ("n", 3, "h", "w"), "float32", "ANY")
    b.output(b.op("resize", x, name="r", size=[6, 4], mode="linear"), "y", "ANY")
    ex = Executor(b.build(), NumpyBackend())
    for shape in ((1, 3, 5, 7), (2, 3, 2, 9), (1, 3, 5, 7)):
        a = RNG.standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(ex.run({"x": a})["y"], _interpolate(a, "linear", False,
                                                                         size=(6, 4)),
                                   rtol=1e-5, atol=1e-5)
    from abi.errors import ShapeError
    with pytest.raises(ShapeError, match=r"resize: spatial dims \(0, 7\) of x include 0"):
        ex.run({"x": np.zeros((1, 3, 0, 7), np.float32)})


@pytest.mark.parametrize("mode, align_corners", sorted(RESIZE_MODES, key=str))
def test_resize_by_scales_over_symbolic_spatial_dims_as_torch(mode, align_corners):
    """size -1: floor(in * scale) when the call runs, at every input size."""
    from plugins.numpy_backend.glue import make_resize
    from abi.ops.sampling import scaled_size

    attrs = {"size": [-1, -1], "scales": [2.0, 1.5], **RESIZE_MODES[mode, align_corners]}
    b = GraphBuilder("resize")
    x = b.input("x", ("n", 3, "h", "w"), "float32", "ANY")
    up = b.op("resize", x, name="r", **attrs)
    b.output(b.op("mean", up, name="m", axes=[2, 3]), "y", "ANY")
    graph = b.build()
    kernel = make_resize(dict(graph.nodes[0].attrs), {}, [graph.types["x"]], "r")
    for shape in ((1, 3, 1, 1), (2, 3, 5, 7), (1, 3, 4, 2)):
        a = RNG.standard_normal(shape).astype(np.float32)
        want = _interpolate(a, mode, align_corners, scale_factor=(2.0, 1.5))
        got = kernel(a)
        assert got.shape == (shape[0], 3, 2 * shape[2], scaled_size(shape[3], 1.5))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(Executor(graph, NumpyBackend()).run({"x": a})["y"],
                                   want.mean(axis=(2, 3)), rtol=1e-5, atol=1e-6)


def test_resize_refuses_a_length_whose_float32_floor_is_not_exact():
    """floor(65921 * 255/128) in float32 (onnxruntime's size) is one more than the exact floor
    the ABI's dim says: refused, not an output of another shape."""
    from abi.errors import ShapeError
    from plugins.numpy_backend.glue import make_resize
    from abi.spec import TensorType

    attrs = {"size": [-1], "scales": [255 / 128], "mode": "nearest",
             "coordinate_mode": "asymmetric", "nearest_mode": "floor"}
    kernel = make_resize(attrs, {}, [TensorType((1, 1, "L"), "float32")], "r")
    assert kernel(np.ones((1, 1, 65920), np.float32)).shape == (1, 1, 65920 * 255 // 128)
    with pytest.raises(ShapeError, match=r"resize: floor\(65921 \* 1.9921875\) is 131326, "
                                         r"but float32 arithmetic \(onnxruntime's\) gives "
                                         r"131327"):
        kernel(np.ones((1, 1, 65921), np.float32))



@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("how", [{"scale_factor": 2.0}, {"scale_factor": 0.5},
                                 {"scale_factor": 1.7}, {"size": [9, 14]}, {"size": [1, 1]},
                                 {"size": [2, 13]}])
def test_cubic_resize_as_torch_bicubic(align_corners, how):
    """torch's bicubic: the same Keys weights (a = -0.75) and taps clamped into x."""
    from abi.ops.sampling import scaled_size

    attrs = {"mode": "cubic", "coordinate_mode": ("half_pixel", "align_corners")[align_corners]}
    if "size" in how:
        attrs["size"] = how["size"]
    else:
        attrs["size"] = [scaled_size(d, how["scale_factor"]) for d in X.shape[2:]]
        attrs["scales"] = [how["scale_factor"]] * 2
    (y,) = run_op("resize", [X], **attrs)
    want = TF.interpolate(t(X), mode="bicubic", align_corners=align_corners, **how).numpy()
    assert y.dtype == np.float32 and y.shape == want.shape
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)

# --- grid_sample -------------------------------------------------------------------------------

GRID_MODES = [(m, p, a) for m in ("bilinear", "nearest") for p in ("zeros", "border",
                                                                    "reflection")
              for a in (False, True)]


def _grid_sample(x, grid, mode, padding_mode, align_corners):
    return TF.grid_sample(t(x), t(grid), mode=mode, padding_mode=padding_mode,
                          align_corners=align_corners).numpy()


def _grids(n):
    """Random positions partly outside [-1, 1], and a lattice through pixel centres, edges and
    the halves between (nearest's ties)."""
    lattice = np.linspace(-1.25, 1.25, 21, dtype=np.float32)
    yield RNG.uniform(-1.6, 1.6, (n, 6, 8, 2)).astype(np.float32)
    yield np.broadcast_to(np.stack(np.meshgrid(lattice, lattice), -1), (n, 21, 21, 2)).copy()


@pytest.mark.parametrize("mode, padding_mode, align_corners", GRID_MODES)
def test_grid_sample_as_torch(mode, padding_mode, align_corners):
    for shape in ((2, 3, 5, 7), (1, 2, 1, 4), (2, 1, 3, 1), (1, 1, 1, 1), (1, 2, 4, 4)):
        x = RNG.standard_normal(shape).astype(np.float32) * 4
        for grid in _grids(shape[0]):
            (y,) = run_op("grid_sample", [x, grid], mode=mode, padding_mode=padding_mode,
                          align_corners=align_corners)
            want = _grid_sample(x, grid, mode, padding_mode, align_corners)
            assert y.dtype == np.float32 and y.shape == want.shape
            np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode, padding_mode, align_corners", GRID_MODES)
def test_volumetric_grid_sample_as_torch(mode, padding_mode, align_corners):
    """x (N, C, D, H, W), grid (N, Do, Ho, Wo, 3): trilinear or nearest, positions partly
    outside, and a lattice through voxel centres, edges and the halves between."""
    lattice = np.linspace(-1.25, 1.25, 11, dtype=np.float32)
    for shape in ((2, 3, 4, 5, 6), (1, 2, 1, 3, 1), (1, 1, 1, 1, 1)):
        x = RNG.standard_normal(shape).astype(np.float32) * 4
        for grid in (RNG.uniform(-1.6, 1.6, (shape[0], 3, 4, 5, 3)).astype(np.float32),
                     np.broadcast_to(np.stack(np.meshgrid(lattice, lattice, lattice), -1),
                                     (shape[0], 11, 11, 11, 3)).copy()):
            (y,) = run_op("grid_sample", [x, grid], mode=mode, padding_mode=padding_mode,
                          align_corners=align_corners)
            want = _grid_sample(x, grid, mode, padding_mode, align_corners)
            assert y.dtype == np.float32 and y.shape == want.shape
            np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode, padding_mode, align_corners", GRID_MODES)
def test_grid_sample_at_the_extremes_as_torch(mode, padding_mode, align_corners):
    """nan, +-inf, float32 extremes, huge and tiny values in the grid and in x: torch's results
    (nan where torch gives nan), without numpy warnings."""
    big = np.finfo(np.float32).max
    values = np.array([np.nan, np.inf, -np.inf, big, -big, 3e38, 1e20, -1e20, 1e6, -0.0,
                       1e-45, 1.0, -1.0, 0.25, 1.5, -7.0], np.float32)
    grid = np.stack(np.meshgrid(values, values), -1)[None].repeat(2, axis=0)
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    specials = np.array([np.nan, np.inf, -np.inf, big, -big, -0.0, 1e-45], np.float32)
    x[1].reshape(-1)[RNG.permutation(x[1].size)[:20]] = np.resize(specials, 20)
    with np.errstate(all="raise"):  # IEEE results, not warnings
        (y,) = run_op("grid_sample", [x, grid], mode=mode, padding_mode=padding_mode,
                      align_corners=align_corners)
    want = _grid_sample(x, grid, mode, padding_mode, align_corners)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("mode, torch_mode, padding, tol", [
    ("bilinear", "bilinear", "border", 1e-5), ("cubic", "bicubic", "reflection", 1e-4)])
def test_grid_sample_over_symbolic_dims(mode, torch_mode, padding, tol):
    b = GraphBuilder("grid_sample")
    x = b.input("x", ("n", 3, "h", "w"), "float32", "ANY")
    grid = b.input("grid", ("n", "ho", "wo", 2), "float32", "ANY")
    b.output(b.op("grid_sample", x, grid, name="g", mode=mode, padding_mode=padding), "y",
             "ANY")
    ex = Executor(b.build(), NumpyBackend())
    for n, h, w, ho, wo in ((1, 5, 7, 3, 4), (3, 2, 9, 6, 1), (1, 5, 7, 3, 4)):
        a = RNG.standard_normal((n, 3, h, w)).astype(np.float32)
        g = RNG.uniform(-1.3, 1.3, (n, ho, wo, 2)).astype(np.float32)
        np.testing.assert_allclose(ex.run({"x": a, "grid": g})["y"],
                                   _grid_sample(a, g, torch_mode, padding, False),
                                   rtol=tol, atol=tol)


def test_grid_sample_refuses_batch_dims_that_differ_at_run_time():
    b = GraphBuilder("grid_sample")
    x = b.input("x", ("n", 2, 3, 4), "float32", "ANY")
    grid = b.input("grid", ("m", 5, 6, 2), "float32", "ANY")
    b.output(b.op("grid_sample", x, grid, name="g"), "y", "ANY")
    ex = Executor(b.build(), NumpyBackend())
    for n, m in ((1, 3), (3, 1)):
        with pytest.raises(ShapeError, match=rf"grid_sample: grid's batch dim {m} is not x's "
                                             rf"{n}"):
            ex.run({"x": np.zeros((n, 2, 3, 4), np.float32),
                    "grid": np.zeros((m, 5, 6, 2), np.float32)})


CUBIC_MODES = [(p, a) for p in ("zeros", "border", "reflection") for a in (False, True)]


def _cubic_lattice(n, h, w):
    """Positions through the pixel centres and edges of an (h, w) image with and without
    align_corners, and the points a quarter between, inside and out."""
    def axis(d):
        return np.unique(np.concatenate([np.linspace(-1.5, 1.5, 4 * d + 1),
                                         np.linspace(-1, 1, max(d, 2)),
                                         (np.arange(-1, d + 2) * 2 + 1) / d - 1,
                                         np.arange(-1, d + 2) * 2 / d - 1]).astype(np.float32))
    gx, gy = np.meshgrid(axis(w), axis(h))
    return np.broadcast_to(np.stack([gx, gy], -1), (n, *gx.shape, 2)).copy()


@pytest.mark.parametrize("padding_mode, align_corners", CUBIC_MODES)
def test_cubic_grid_sample_as_torch_bicubic(padding_mode, align_corners):
    """mode cubic is torch's bicubic (onnxruntime's cubic gives the same) on finite grids:
    random positions partly outside [-1, 1] and a lattice through pixel centres and edges,
    1-pixel axes among the shapes."""
    for shape in ((2, 3, 5, 7), (1, 2, 1, 4), (2, 1, 3, 1), (1, 1, 1, 1), (1, 2, 4, 4)):
        x = RNG.standard_normal(shape).astype(np.float32) * 4
        for grid in (RNG.uniform(-1.8, 1.8, (shape[0], 6, 8, 2)).astype(np.float32),
                     _cubic_lattice(shape[0], *shape[2:])):
            (y,) = run_op("grid_sample", [x, grid], mode="cubic", padding_mode=padding_mode,
                          align_corners=align_corners)
            want = _grid_sample(x, grid, "bicubic", padding_mode, align_corners)
            assert y.dtype == np.float32 and y.shape == want.shape
            np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)  # torch's rounding


@pytest.mark.parametrize("padding_mode, align_corners", CUBIC_MODES)
def test_cubic_grid_sample_at_the_extremes(padding_mode, align_corners):
    """nan, +-inf, -0.0 and a denormal in x: torch's results at finite positions (every tap
    multiplies in: an inf at weight 0 gives nan); a nan, infinite or huge position samples as
    -1 there (onnxruntime's result, where torch gives nan); no numpy warnings. (Pixels near
    the float32 limit would show the last bit in which torch's weights differ from
    onnxruntime's: the onnxruntime backend's tests compare those with onnxruntime.)"""
    big = np.finfo(np.float32).max
    values = np.array([np.nan, np.inf, -np.inf, big, -big, 3e38, 1e20, -1e20, 1e6, -0.0,
                       1e-45, 1.0, -1.0, 0.25, 1.5, -7.0], np.float32)
    grid = np.stack(np.meshgrid(values, values), -1)[None].repeat(2, axis=0)
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    specials = np.array([np.nan, np.inf, -np.inf, -0.0, 1e-45], np.float32)
    x[1].reshape(-1)[RNG.permutation(x[1].size)[:20]] = np.resize(specials, 20)
    with np.errstate(all="raise"):  # IEEE results, not warnings
        (y,) = run_op("grid_sample", [x, grid], mode="cubic", padding_mode=padding_mode,
                      align_corners=align_corners)
    odd = ~(np.abs(grid) <= 1e6)  # beyond 2**62 pixels once scaled, nan or infinite
    as_edge = np.where(odd, np.float32(-1), grid)
    want = _grid_sample(x, as_edge, "bicubic", padding_mode, align_corners)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4, equal_nan=True)
    torch_says = _grid_sample(x, grid, "bicubic", padding_mode, align_corners)
    infinite = ~(np.abs(grid[0]) <= 1e30).any(-1)  # nan, or infinite once scaled
    assert np.isnan(torch_says[:, :, infinite]).all()


def test_cubic_grid_sample_of_a_volume_is_refused():
    from abi.errors import GraphError

    b = GraphBuilder("grid_sample")
    x = b.input("x", (1, 2, 3, 4, 5), "float32", "ANY")
    grid = b.input("grid", (1, 2, 3, 4, 3), "float32", "ANY")
    with pytest.raises(GraphError, match=r"node 'g': grid_sample: mode cubic needs x of rank 4 "
                                         r"\(N, C, H, W\), as onnxruntime's cubic; got x "
                                         r"shape \(1, 2, 3, 4, 5\)"):
        b.op("grid_sample", x, grid, name="g", mode="cubic")


@pytest.mark.parametrize("dtype, lowest, highest", [
    ("float32", -np.inf, np.inf), ("int32", -2**31, 2**31 - 1), ("uint8", 0, 255),
    ("int64", -2**63, 2**63 - 1), ("uint64", 0, 2**64 - 1)])
@pytest.mark.parametrize("keepdim", [True, False])
def test_reductions_over_a_dim_bound_to_zero_at_run_time(dtype, lowest, highest, keepdim):
    """amax and amin of nothing: the dtype's lowest and highest (tinygrad's identity element,
    ONNX's ReduceMax and ReduceMin); mean: nan (0 / 0, without numpy's warning); argmax:
    undefined, a typed refusal."""
    b = GraphBuilder("empty")
    x = b.input("x", (2, "n", 3), dtype, "ANY")
    for op in ("amax", "amin", "sum") + (("mean",) if dtype.startswith("float") else ()):
        b.output(b.op(op, x, name=op, axes=[1, 2], keepdim=keepdim), op, "ANY")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = Executor(b.build(), NumpyBackend()).run({"x": np.zeros((2, 0, 3), dtype)})
    want = {"amax": lowest, "amin": highest, "sum": 0, "mean": np.nan}
    for op, value in got.items():
        assert value.dtype == dtype and value.shape == ((2, 1, 1) if keepdim else (2,)), op
        np.testing.assert_array_equal(value, np.full(value.shape, want[op], dtype), op)
    b = GraphBuilder("empty")
    x = b.input("x", ("n", 3), "float32", "ANY")
    b.output(b.op("argmax", x, name="m", axis=0), "y", "ANY")
    ex = Executor(b.build(), NumpyBackend())
    with pytest.raises(ShapeError, match=r"argmax: x shape \(0, 3\) is empty along a reduced"):
        ex.run({"x": np.zeros((0, 3), np.float32)})


def _gather_graph(x_shape, indices, axis, dtype="float32"):
    b = GraphBuilder("gather")
    x = b.input("x", x_shape, dtype, "ANY")
    idx = b.constant("idx", np.asarray(indices, np.int64))
    b.output(b.op("gather", x, idx, name="g", axis=axis), "y", "ANY")
    return b.build()


@pytest.mark.parametrize("indices, axis", [
    (0, 1), (3, -1), ([2, 0, 2], 1), ([[1, 0], [0, 1]], 0), (np.zeros((0,), np.int64), 2),
])
def test_gather_as_torch_indexing(indices, axis):
    x = np.concatenate([X, EXTREMES[:7].reshape(1, 1, 1, 7).repeat(3, 1).repeat(5, 2),
                        np.full((1, 3, 5, 7), np.nan, np.float32)])
    ex = Executor(_gather_graph(x.shape, indices, axis), NumpyBackend())
    got = ex.run({"x": x})["y"]
    want = torch.index_select(t(x), axis, t(np.asarray(indices, np.int64)).reshape(-1))
    want = want.reshape(x.shape[:axis % 4] + np.shape(indices) + x.shape[axis % 4 + 1:])
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want.numpy())  # nan and inf copied as they are


def test_gather_keeps_integer_and_bool_dtypes():
    for dtype in ("int64", "bool"):
        x = RNG.integers(0, 2, (3, 4)).astype(dtype)
        got = Executor(_gather_graph((3, 4), [3, 1], 1, dtype), NumpyBackend()).run({"x": x})
        assert got["y"].dtype == dtype
        np.testing.assert_array_equal(got["y"], t(x)[:, [3, 1]].numpy())


@pytest.mark.parametrize("bad", [[0, 5], [-1], [[2], [7]]])
def test_gather_index_out_of_range_refused_when_the_graph_is_built(bad):
    from abi.errors import GraphError

    with pytest.raises(GraphError, match=r"^node 'g': gather: axis 1 of x shape \(2, 5\): 1 "
                                         r"gather index\(es\) outside \[0, 5\)"):
        _gather_graph((2, 5), bad, 1)


def test_gather_index_out_of_range_refused_when_an_artifact_graph_is_loaded():
    """A hostile artifact: a valid graph description whose index constant is out of range."""
    from abi.errors import GraphError
    from plugin_host.graph import Graph

    graph = _gather_graph((2, 5), [0, 4], 1)
    Graph.from_dict(graph.to_dict(), {"idx": np.array([4, 0])})  # the honest tensor loads
    with pytest.raises(GraphError, match=r"gather index\(es\) outside \[0, 5\): \(0,\)=9"):
        Graph.from_dict(graph.to_dict(), {"idx": np.array([9, 0])})


def test_gather_index_out_of_range_refused_at_prepare():
    """The kernel checks the indices again: a graph that skipped its value rule cannot make it
    read out of bounds."""
    from abi import TensorType
    from abi.errors import BackendError, IndexRangeError

    graph = _gather_graph((2, 5), [0, 4], 1)
    node = graph.nodes[0]
    types = [TensorType((2, 5), "float32"), TensorType((2,), "int64")]
    with pytest.raises(IndexRangeError, match=r"^node 'g': gather axis 1: 1 gather index\(es\) "
                                              r"outside \[0, 5\): \(1,\)=5$"):
        NumpyBackend().prepare(node, [None, np.array([0, 5])], types)
    with pytest.raises(BackendError, match="gather indices must be a constant"):
        NumpyBackend().prepare(node, [None, None], types)


def test_expand_and_tile_as_torch():
    x = np.concatenate([EXTREMES, [np.inf, -np.inf, np.nan]]).astype(np.float32).reshape(
        3, 1, 5)
    (y,) = run_op("expand", [x], shape=[2, 3, 4, 1])
    np.testing.assert_array_equal(y, t(x).expand(2, 3, 4, 5).numpy())
    assert y.flags.writeable and y.flags.c_contiguous
    (y,) = run_op("expand", [x], shape=[1, 1])  # ONNX's bidirectional broadcast keeps x
    np.testing.assert_array_equal(y, x)
    (y,) = run_op("tile", [x], repeats=[2, 3, 1])
    np.testing.assert_array_equal(y, t(x).repeat(2, 3, 1).numpy())
    ints = np.arange(6, dtype=np.int64).reshape(2, 3)
    (y,) = run_op("tile", [ints], repeats=[1, 0])
    assert y.shape == (2, 0) and y.dtype == np.int64


def test_expand_of_a_symbolic_dim_that_does_not_broadcast_is_a_typed_refusal():
    from abi.errors import ShapeError

    b = GraphBuilder("expand")
    x = b.input("x", ("n", 3), "float32", "ANY")
    b.output(b.op("expand", x, name="e", shape=[4, 3]), "y", "ANY")
    ex = Executor(b.build(), NumpyBackend())
    assert ex.run({"x": np.ones((1, 3), np.float32)})["y"].shape == (4, 3)
    with pytest.raises(ShapeError, match=r"expand: x shape \(2, 3\) does not broadcast with "
                                         r"\(4, 3\)"):
        ex.run({"x": np.ones((2, 3), np.float32)})


def test_not_and_where_as_torch():
    cond = X > 0
    (y,) = run_op("not", [cond])
    np.testing.assert_array_equal(y, torch.logical_not(t(cond)).numpy())
    other = np.float32(-1.5) * np.ones((7,), np.float32)
    (y,) = run_op("where", [cond, X, other])
    np.testing.assert_array_equal(y, torch.where(t(cond), t(X), t(other)).numpy())


def test_prelu_has_one_slope_per_channel_as_torch():
    slope = RNG.uniform(0, 0.5, (3, 1, 1)).astype(np.float32)
    (y,) = run_op("prelu", [X, slope])
    np.testing.assert_allclose(y, TF.prelu(t(X), t(slope.reshape(3))).numpy(), rtol=1e-6)
    (y,) = run_op("prelu", [X, np.array([0.25], np.float32)])
    np.testing.assert_allclose(y, TF.prelu(t(X), torch.tensor([0.25])).numpy(), rtol=1e-6)


def test_integer_abs_and_neg_keep_their_dtype():
    x = np.array([-3, 0, 5], np.int64)
    assert run_op("abs", [x])[0].tolist() == [3, 0, 5]
    (y,) = run_op("neg", [x])
    assert y.tolist() == [3, 0, -5] and y.dtype == np.int64


def test_sigmoid_keeps_its_relative_precision_in_the_tails():
    """Against the exact value in float64 over [-87, 87]: within a few float32 steps of the
    value itself, where 0.5 * (1 + tanh(x / 2)) cancels to 0 below about -17."""
    x = np.linspace(-87, 87, 40001).astype(np.float32)
    (y,) = run_op("sigmoid", [x])
    exact = 1 / (1 + np.exp(-x.astype(np.float64)))
    assert y.dtype == np.float32 and np.max(np.abs(y - exact) / exact) < 4e-7


def test_sigmoid_extremes_do_not_overflow():
    x = np.array([-1e4, -100, 0, 100, 1e4], np.float32)
    with np.errstate(all="raise"):
        (y,) = run_op("sigmoid", [x])
    np.testing.assert_allclose(y, torch.sigmoid(t(x)).numpy(), atol=1e-7)


def _ulps(a, b):
    """float32 steps between ``a`` and ``b``, element-wise (a signed-magnitude order)."""
    a, b = (v.view(np.int32).astype(np.int64) for v in (a, b))
    a, b = (np.where(v < 0, -(v & 0x7FFFFFFF), v) for v in (a, b))
    return np.abs(a - b)


def test_erf_is_torchs_float64_erf_rounded():
    """erf within a float32 step of torch's float64 erf rounded, relatively at every size:
    the five-term Abramowitz & Stegun form it used was 1.5e-7 from erf absolutely, so near 0
    wrong in every digit (1e-20 gave 1e-9) and 3 steps off up to |x| = 4."""
    rng = np.random.default_rng(7)
    magnitudes = np.concatenate([10.0 ** rng.uniform(-45, 0, 50_000),
                                 rng.uniform(0, 7, 50_000)])
    x = (magnitudes * rng.choice([-1, 1], magnitudes.size)).astype(np.float32)
    x = np.concatenate([x, np.array([0.0, -0.0, 1e-45, -1e-45, 1e-20, 1, -1, 3.92, 4, 6, 1e30,
                                     np.inf, -np.inf], np.float32)])
    (y,) = run_op("erf", [x])
    want = torch.erf(t(x).double()).float().numpy()
    assert _ulps(y, want).max() <= 1
    assert np.mean(y == want) > 0.999
    assert np.array_equal(np.signbit(y), np.signbit(want))  # -0.0 gives -0.0
    (y,) = run_op("erf", [np.array([np.nan, -np.nan], np.float32)])
    assert np.isnan(y).all()


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(approximate):
    (y,) = run_op("gelu", [X], approximate=approximate)
    np.testing.assert_allclose(y, TF.gelu(t(X), approximate=approximate).numpy(),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_softmax(axis):
    (y,) = run_op("softmax", [X * 10], axis=axis)
    np.testing.assert_allclose(y, torch.softmax(t(X * 10), dim=axis).numpy(), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("axis", [1, -1, 0])
def test_softmax_as_torch_at_the_extremes_without_warnings(axis):
    rows = np.array([[-np.inf, -np.inf, -np.inf], [np.inf, 1, 2], [np.nan, 1, 2],
                     [-np.inf, 1, 2], [3e38, -3e38, 0], [1e30, -1e30, 5], [0, -104, -200],
                     [88, 89, 90]], np.float32)
    with np.errstate(all="raise"):
        (y,) = run_op("softmax", [rows], axis=axis)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, torch.softmax(t(rows), dim=axis).numpy(), rtol=2e-6,
                               atol=1e-7, equal_nan=True)


def test_clip():
    (y,) = run_op("clip", [X], min=-1.0, max=2.0)
    np.testing.assert_array_equal(y, torch.clamp(t(X), -1.0, 2.0).numpy())


@pytest.mark.parametrize("op,ref", [
    ("add", torch.add), ("sub", torch.sub), ("mul", torch.mul), ("div", torch.div),
])
def test_binary_broadcast(op, ref):
    b = RNG.uniform(0.5, 2.0, (3, 1, 7)).astype(np.float32)
    (y,) = run_op(op, [X, b])
    np.testing.assert_allclose(y, ref(t(X), t(b)).numpy(), rtol=1e-6)


def test_matmul_batched():
    a = RNG.standard_normal((2, 1, 4, 5)).astype(np.float32)
    b = RNG.standard_normal((3, 5, 6)).astype(np.float32)
    (y,) = run_op("matmul", [a, b])
    np.testing.assert_allclose(y, torch.matmul(t(a), t(b)).numpy(), rtol=1e-5, atol=1e-5)


def test_matmul_gives_ieee_results_without_warnings():
    big = np.finfo(np.float32).max
    a = np.array([[big, 1, 0, 0], [np.inf, 0, 1, 1], [1e-45, 2, -0.0, 3]], np.float32)
    b = np.array([[2, 0], [1, 1], [-1, 2], [0.5, 3]], np.float32)  # big * 2, inf * 0
    with np.errstate(all="raise"):
        (y,) = run_op("matmul", [a, b])
    np.testing.assert_allclose(y, torch.matmul(t(a), t(b)).numpy(), rtol=1e-6, equal_nan=True)
    assert np.isinf(y[0, 0]) and np.isnan(y[1, 1])


def test_mean_and_cast():
    (y,) = run_op("mean", [X], axes=[2, 3], keepdim=True)
    np.testing.assert_allclose(y, t(X).mean(dim=(2, 3), keepdim=True).numpy(), rtol=1e-5, atol=1e-6)
    (z,) = run_op("cast", [X], dtype="int64")
    np.testing.assert_array_equal(z, t(X).to(torch.int64).numpy())


def test_shape_ops():
    (y,) = run_op("flatten", [X], start_dim=1, end_dim=2)
    assert y.shape == torch.flatten(t(X), 1, 2).shape
    (y,) = run_op("reshape", [X], shape=[2, -1])
    np.testing.assert_array_equal(y, t(X).reshape(2, -1).numpy())
    (y,) = run_op("unflatten", [X[..., :6]], axis=-1, sizes=[-1, 2])
    np.testing.assert_array_equal(y, t(X[..., :6]).unflatten(-1, (-1, 2)).numpy())
    merged = X.reshape(-1, X.shape[-1])  # (N*C*H, W) back to (N, C, H, W): sizes read from X
    (y,) = run_op("unflatten", [merged, X], axis=0, sizes=[-1, -1, -1], like_axes=[0, 1, 2])
    np.testing.assert_array_equal(y, t(merged).unflatten(0, X.shape[:3]).numpy())
    (y,) = run_op("unflatten", [merged, X], axis=0, sizes=[-1, -1, -1], like_axes=[0, -1, 2])
    np.testing.assert_array_equal(y, t(merged).unflatten(0, (X.shape[0], -1, X.shape[2])).numpy())
    (y,) = run_op("transpose", [X], perm=[0, 2, 3, 1])
    np.testing.assert_array_equal(y, t(X).permute(0, 2, 3, 1).numpy())
    (y,) = run_op("concat", [X, X[:, :1]], axis=1)
    np.testing.assert_array_equal(y, torch.cat([t(X), t(X[:, :1])], dim=1).numpy())
    (y,) = run_op("slice", [X], starts=[1, 0], ends=[5, 6], axes=[2, 3], steps=[2, 3])
    np.testing.assert_array_equal(y, X[:, :, 1:5:2, 0:6:3])
    parts = run_op("split", [X], axis=3, sizes=[2, 5])
    for got, want in zip(parts, torch.split(t(X), [2, 5], dim=3)):
        np.testing.assert_array_equal(got, want.numpy())
    (y,) = run_op("identity", [X])
    np.testing.assert_array_equal(y, X)


@pytest.mark.parametrize("mode,torch_mode", [("constant", "constant"), ("reflect", "reflect"),
                                             ("edge", "replicate")])
def test_pad(mode, torch_mode):
    attrs = dict(pads=[[0, 0], [0, 0], [1, 2], [0, 3]], mode=mode, value=0.0)
    (y,) = run_op("pad", [X], **attrs)
    np.testing.assert_array_equal(y, TF.pad(t(X), (0, 3, 1, 2), mode=torch_mode).numpy())


pool_params = st.tuples(
    st.integers(1, 3), st.integers(1, 3),            # kernel h, w
    st.integers(1, 3), st.integers(1, 3),            # stride h, w
    st.integers(0, 1), st.integers(0, 1),            # padding (<= kernel // 2 checked below)
    st.booleans(),                                   # ceil_mode
    st.integers(5, 9), st.integers(5, 9),            # input h, w
)


def pool_input(shape, special: int) -> np.ndarray:
    """Random values; ties (a few distinct values); -inf everywhere but a few, and float32's
    extremes; nan, infinities and a few of each."""
    if special == 1:
        return RNG.choice(np.array([-1.0, 0.0, 2.0], np.float32), size=shape)
    if special == 2:
        return RNG.choice(np.array([-np.inf, -np.inf, np.finfo(np.float32).max,
                                    -np.finfo(np.float32).max], np.float32), size=shape)
    if special == 3:
        return RNG.choice(np.array([np.nan, np.inf, -np.inf, 1.0, -0.0], np.float32),
                          size=shape)
    return RNG.standard_normal(shape).astype(np.float32)


@settings(max_examples=60, deadline=None)
@given(pool_params, st.integers(1, 2), st.integers(1, 2), st.integers(0, 3))
def test_max_pool_matches_torch(p, dh, dw, special):
    """Values as torch's, a nan in a window (wherever in the vectors the backend's maximum
    runs over) included: 37 channels."""
    kh, kw, sh, sw, ph, pw, ceil, h, w = p
    ph, pw = min(ph, kh // 2), min(pw, kw // 2)
    x = pool_input((1, 37, h, w), special)
    (y,) = run_op("max_pool", [x], layout="NCHW", kernel_size=[kh, kw], stride=[sh, sw],
                  padding=[[ph, ph], [pw, pw]], dilation=[dh, dw], ceil_mode=ceil)
    ref = TF.max_pool2d(t(x), (kh, kw), (sh, sw), (ph, pw), (dh, dw), ceil_mode=ceil)
    np.testing.assert_array_equal(y, ref.numpy())


@pytest.mark.parametrize("special", range(4))
@pytest.mark.parametrize("shape, kernel, stride, padding, dilation", [
    ((1, 37, 9, 9), [7, 6], [3, 4], [1, 2], [1, 1]),
    ((1, 37, 11, 10), [3, 4], [4, 3], [1, 2], [3, 2]),
    ((2, 3, 300, 200), [300, 200], [1, 1], [0, 0], [1, 1]),
], ids=["7x6", "dilated", "whole"])
def test_max_pool_with_more_taps_than_outputs_matches_torch(shape, kernel, stride, padding,
                                                           dilation, special):
    """Windows whose taps outnumber the plane's outputs, which the backend takes window by
    window (60,000 taps for the whole 300x200 input, one output): values, and with
    max_pool_with_indices indices, as torch's."""
    x = pool_input(shape, special)
    attrs = dict(layout="NCHW", kernel_size=kernel, stride=stride,
                 padding=[[p, p] for p in padding], dilation=dilation, ceil_mode=False)
    (y,) = run_op("max_pool", [x], **attrs)
    ref, ref_i = TF.max_pool2d(t(x), kernel, stride, padding, dilation, return_indices=True)
    np.testing.assert_array_equal(y, ref.numpy())
    (y, i) = run_op("max_pool_with_indices", [x], **attrs)
    np.testing.assert_array_equal(y, ref.numpy())
    np.testing.assert_array_equal(i, ref_i.numpy())


@settings(max_examples=40, deadline=None)
@given(pool_params, st.integers(1, 2), st.integers(1, 2), st.integers(0, 3))
def test_max_pool_with_indices_matches_torch(p, dh, dw, special):
    """Values and indices as torch's, ties (a few distinct values), padding that would tie
    with a row of -inf, and nan (the window's last one) included."""
    kh, kw, sh, sw, ph, pw, ceil, h, w = p
    ph, pw = min(ph, kh // 2), min(pw, kw // 2)
    x = pool_input((2, 3, h, w), special)
    (y, i) = run_op("max_pool_with_indices", [x], layout="NCHW", kernel_size=[kh, kw],
                    stride=[sh, sw], padding=[[ph, ph], [pw, pw]], dilation=[dh, dw],
                    ceil_mode=ceil)
    ref, ref_i = TF.max_pool2d(t(x), (kh, kw), (sh, sw), (ph, pw), (dh, dw), ceil_mode=ceil,
                               return_indices=True)
    np.testing.assert_array_equal(y, ref.numpy())
    np.testing.assert_array_equal(i, ref_i.numpy())
    assert i.dtype == np.int64


def test_max_pool_with_indices_1d_matches_torch():
    x = RNG.standard_normal((2, 3, 11)).astype(np.float32)
    x[0, 0, :4] = [np.nan, 5.0, np.nan, 1.0]
    x[1, 2, :] = -np.inf
    (y, i) = run_op("max_pool_with_indices", [x], layout="NCL", kernel_size=[3], stride=[2],
                    padding=[[1, 1]], dilation=[2], ceil_mode=True)
    ref, ref_i = TF.max_pool1d(t(x), 3, 2, 1, 2, ceil_mode=True, return_indices=True)
    np.testing.assert_array_equal(y, ref.numpy())
    np.testing.assert_array_equal(i, ref_i.numpy())


@pytest.mark.parametrize("size, kernel, stride, padding, dilation", [
    ((7, 7), (1 << 24, 1 << 24), (1 << 24, 1 << 24), (0, 0), (1, 1)),  # 2^50 bytes to pad
    ((7, 5), (2560, 2560), (2560, 2560), (1, 2), (1, 1)),  # HF's EfficientNet's head, padded
    ((8, 7), (5, 5), (6, 3), (0, 2), (3, 3)),  # a window's 4th tap the last on x, or padding
])
def test_pools_of_a_kernel_wider_than_x_in_ceil_mode_match_torch(size, kernel, stride, padding,
                                                                 dilation):
    """Ceil mode's last window may run far past x: the taps no window can land on x with
    are left out (``_pool_geometry``), not padded for, so a 2^24-wide kernel over a 7x7 map
    allocates what the map does (padding for it all asks for more than any address space:
    a MemoryError); the values, the indices and each mean's divisor as torch's."""
    x = pool_input((1, 3, *size), 3)  # nan, infinities, -0.0 and 1.0
    attrs = dict(kernel_size=list(kernel), stride=list(stride),
                 padding=[[p, p] for p in padding], ceil_mode=True)
    ref, ref_i = TF.max_pool2d(t(x), kernel, stride, padding, dilation, ceil_mode=True,
                               return_indices=True)
    (y,) = run_op("max_pool", [x], layout="NCHW", dilation=list(dilation), **attrs)
    np.testing.assert_array_equal(y, ref.numpy())
    (y, i) = run_op("max_pool_with_indices", [x], layout="NCHW", dilation=list(dilation),
                    **attrs)
    np.testing.assert_array_equal(y, ref.numpy())
    np.testing.assert_array_equal(i, ref_i.numpy())
    if dilation == (1, 1):  # torch's average pool has no dilation
        x = pool_input((1, 3, *size), 0)
        for include_pad in (False, True):
            (y,) = run_op("avg_pool", [x], layout="NCHW", count_include_pad=include_pad,
                          **attrs)
            ref = TF.avg_pool2d(t(x), kernel, stride, padding, ceil_mode=True,
                                count_include_pad=include_pad)
            np.testing.assert_allclose(y, ref.numpy(), rtol=1e-6, atol=1e-6)


@settings(max_examples=40, deadline=None)
@given(pool_params, st.booleans())
def test_avg_pool_matches_torch(p, include_pad):
    kh, kw, sh, sw, ph, pw, ceil, h, w = p
    ph, pw = min(ph, kh // 2), min(pw, kw // 2)
    x = RNG.standard_normal((1, 2, h, w)).astype(np.float32)
    (y,) = run_op("avg_pool", [x], layout="NCHW", kernel_size=[kh, kw], stride=[sh, sw],
                  padding=[[ph, ph], [pw, pw]], count_include_pad=include_pad, ceil_mode=ceil)
    ref = TF.avg_pool2d(t(x), (kh, kw), (sh, sw), (ph, pw), ceil_mode=ceil,
                        count_include_pad=include_pad)
    np.testing.assert_allclose(y, ref.numpy(), rtol=1e-5, atol=1e-6)


pool3d_params = st.tuples(
    st.lists(st.integers(1, 3), min_size=3, max_size=3),   # kernel d, h, w
    st.lists(st.integers(1, 3), min_size=3, max_size=3),   # stride
    st.lists(st.integers(0, 1), min_size=3, max_size=3),   # padding (<= kernel // 2 below)
    st.lists(st.integers(1, 2), min_size=3, max_size=3),   # dilation (max_pool only)
    st.booleans(),                                         # ceil_mode
    st.lists(st.integers(5, 8), min_size=3, max_size=3),   # input d, h, w
    st.integers(0, 2),                                     # values: normal, ties, nan and inf
)


def _pool3d_case(p):
    kernel, stride, pad, dilation, ceil, size, special = p
    pad = [min(q, k // 2) for q, k in zip(pad, kernel)]
    x = RNG.standard_normal((2, 3, *size)).astype(np.float32)
    if special == 1:
        x = RNG.choice(np.array([-1.0, 0.0, 2.0], np.float32), size=x.shape)
    elif special == 2:
        x = RNG.choice(np.array([np.nan, np.inf, -np.inf, 1.0, -0.0, 3.0, -2.0], np.float32),
                       size=x.shape)
    attrs = dict(kernel_size=kernel, stride=stride, padding=[[q, q] for q in pad],
                 ceil_mode=ceil)
    return x, attrs, (kernel, stride, pad), dilation


@settings(max_examples=40, deadline=None)
@given(pool3d_params)
def test_max_pool3d_with_and_without_indices_matches_torch(p):
    """3 spatial axes: values as torch's max_pool3d, and its return_indices (flat over each
    (n, c) volume, the window's last nan where it holds one)."""
    x, attrs, args, dilation = _pool3d_case(p)
    (y,) = run_op("max_pool", [x], layout="NCDHW", dilation=dilation, **attrs)
    (v, i) = run_op("max_pool_with_indices", [x], layout="NCDHW", dilation=dilation, **attrs)
    ref, ref_i = TF.max_pool3d(t(x), *args, dilation, ceil_mode=attrs["ceil_mode"],
                               return_indices=True)
    np.testing.assert_array_equal(y, ref.numpy())
    np.testing.assert_array_equal(v, ref.numpy())
    np.testing.assert_array_equal(i, ref_i.numpy())


@settings(max_examples=40, deadline=None)
@given(pool3d_params, st.booleans())
def test_avg_pool3d_matches_torch(p, include_pad):
    x, attrs, args, _ = _pool3d_case(p)
    (y,) = run_op("avg_pool", [x], layout="NCDHW", count_include_pad=include_pad, **attrs)
    ref = TF.avg_pool3d(t(x), *args, ceil_mode=attrs["ceil_mode"],
                        count_include_pad=include_pad)
    np.testing.assert_allclose(y, ref.numpy(), rtol=1e-5, atol=1e-6)


def test_conv_without_bias_input_fused_and_plain():
    # a conv node may leave out its optional bias entirely (shorter input list)
    b = GraphBuilder("nobias")
    x = b.input("x", (1, 2, 5, 5), "float32", "NCHW")
    w = b.constant("w", RNG.standard_normal((3, 2, 3, 3)).astype(np.float32))
    y = b.op("relu", b.op("conv", x, w, name="c", stride=[1, 1], padding=[[1, 1], [1, 1]],
                          dilation=[1, 1]))
    b.output(y, "y", "NCHW")
    ex = Executor(b.build(), NumpyBackend())
    assert ex.fused == [["c", y]]
    xv = RNG.standard_normal((1, 2, 5, 5)).astype(np.float32)
    ref = torch.relu(TF.conv2d(t(xv), t(ex.graph.tensors["w"].copy()), padding=1)).numpy()
    np.testing.assert_allclose(ex.run({"x": xv})["y"], ref, rtol=1e-5, atol=1e-5)


#: EXTREMES with the values IEEE defines a result for: infinities, nan, signed zeros, the largest
SPECIAL = np.concatenate([EXTREMES, np.array([np.inf, -np.inf, np.nan, -0.0, 3e38, -3e38, 1e30],
                                             np.float32)])


@pytest.mark.parametrize("op, ref", [("sin", torch.sin), ("cos", torch.cos),
                                     ("sign", torch.sign)])
def test_sin_cos_sign_as_torch_also_at_the_extremes(op, ref):
    for x in (X, SPECIAL):
        with np.errstate(all="raise"):
            (y,) = run_op(op, [x])
        assert y.dtype == np.float32
        want = ref(t(x)).numpy()
        if op == "sign":  # nan stays nan, as numpy and ONNX Sign; torch.sign gives 0
            assert np.isnan(y[np.isnan(x)]).all()
            want = np.where(np.isnan(x), np.nan, want)
        np.testing.assert_allclose(y, want, rtol=2e-6, atol=1e-6, equal_nan=True, err_msg=op)
    ints = np.array([[-7, 0, 3], [np.iinfo(np.int32).min, np.iinfo(np.int32).max, -1]], np.int32)
    (y,) = run_op("sign", [ints])
    assert y.dtype == np.int32 and (y == torch.sign(t(ints)).numpy()).all()


#: SPECIAL with the edges of the inverse functions' domains: +-1, just inside and outside them
DOMAIN_EDGES = np.concatenate([SPECIAL, np.array(
    [-2, -1.0000001, -1, -0.9999999, -0.5, 0.5, 0.9999999, 1, 1.0000001, 2, 1e-45, -1e-45],
    np.float32)])


@pytest.mark.parametrize("op, ref", [
    ("tan", torch.tan), ("atan", torch.atan), ("asin", torch.asin), ("acos", torch.acos),
    ("sinh", torch.sinh), ("cosh", torch.cosh), ("asinh", torch.asinh),
    ("acosh", torch.acosh), ("atanh", torch.atanh)])
def test_trigonometric_and_hyperbolic_as_torch_also_out_of_their_domain(op, ref):
    """asin(2) and acosh(0) are nan, atanh(+-1) is +-inf, sinh(100) overflows to inf: IEEE
    results, as torch gives, without a numpy warning."""
    for x in (X, DOMAIN_EDGES):
        with np.errstate(all="raise"):
            (y,) = run_op(op, [x])
        assert y.dtype == np.float32
        want = ref(t(x)).numpy()
        np.testing.assert_allclose(y, want, rtol=2e-6, atol=1e-6, equal_nan=True, err_msg=op)
        assert (np.signbit(y) == np.signbit(want))[~np.isnan(want)].all(), op


@pytest.mark.parametrize("op, attrs, ref", [
    ("isnan", {}, torch.isnan), ("isinf", {}, torch.isinf),
    ("isinf", {"detect_negative": False}, torch.isposinf),
    ("isinf", {"detect_positive": False}, torch.isneginf),
    ("isinf", {"detect_positive": False, "detect_negative": False},
     lambda v: torch.zeros_like(v, dtype=torch.bool))])
def test_isnan_and_isinf_as_torch(op, attrs, ref):
    x = np.stack([DOMAIN_EDGES, DOMAIN_EDGES[::-1]])
    with np.errstate(all="raise"):
        (y,) = run_op(op, [x], **attrs)
    assert y.dtype == np.bool_ and y.shape == x.shape
    np.testing.assert_array_equal(y, ref(t(x)).numpy())


@pytest.mark.parametrize("axis", [1, -1, 0])
def test_log_softmax_as_torch_also_at_the_extremes(axis):
    rows = np.array([[-np.inf, -np.inf, -np.inf], [np.inf, 1, 2], [np.nan, 1, 2],
                     [-np.inf, 1, 2], [3e38, -3e38, 0], [1e30, -1e30, 5], [0, -104, -200],
                     [88, 89, 90]], np.float32)
    for x in (X, rows):
        with np.errstate(all="raise"):
            (y,) = run_op("log_softmax", [x], axis=axis)
        assert y.dtype == np.float32
        np.testing.assert_allclose(y, torch.log_softmax(t(x), dim=axis).numpy(), rtol=2e-6,
                                   atol=2e-6, equal_nan=True)


def test_argmin_takes_the_first_index_on_ties_as_torch():
    ties = np.array([[3, 1, 1], [2, 2, 2], [0, 5, 0]], np.int64)
    for x, axis in ((X, 1), (X, -1), (ties, 1), (ties, 0)):
        (y,) = run_op("argmin", [x], axis=axis)
        assert y.dtype == np.int64
        np.testing.assert_array_equal(y, torch.argmin(t(x), dim=axis).numpy())


def test_prod_as_torch_overflowing_as_its_dtype():
    (y,) = run_op("prod", [X], axes=[1, -1], keepdim=True)
    np.testing.assert_allclose(y, t(X).prod(dim=3, keepdim=True).prod(dim=1, keepdim=True),
                               rtol=1e-5)
    big = np.array([[3e38, 2.0, 1.0], [-1e30, 1e30, 0.5], [np.inf, 0.0, 1.0]], np.float32)
    with np.errstate(all="raise"):
        (y,) = run_op("prod", [big], axes=[1])
    np.testing.assert_array_equal(y, t(big).prod(dim=1).numpy())  # inf, -inf, nan
    ints = np.array([[1 << 20, 1 << 15, 3], [-7, 6, 5]], np.int32)  # 2**35 * 3 wraps in int32
    (y,) = run_op("prod", [ints], axes=[1])
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, t(ints).prod(dim=1).to(torch.int32).numpy())


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_integer_mod_as_torch_fmod_and_remainder(dtype):
    low = np.iinfo(dtype).min
    a = np.array([7, -7, 7, -7, low, low, 0, 5], dtype)
    b = np.array([3, 3, -3, -3, -1, 7, -4, 5], dtype)
    for fmod, ref in ((True, torch.fmod), (False, torch.remainder)):
        with np.errstate(all="raise"):
            (y,) = run_op("mod", [a, b], fmod=fmod)
        assert y.dtype == dtype
        np.testing.assert_array_equal(y, ref(t(a), t(b)).numpy(), err_msg=str(fmod))


def test_integer_mod_by_zero_is_a_typed_refusal_not_a_warning():
    from abi.errors import DomainError

    with np.errstate(all="raise"), pytest.raises(DomainError, match="mod: integer modulo by "
                                                                    "zero: b has 2 zero"):
        run_op("mod", [np.arange(4), np.array([1, 0, 2, 0])], fmod=False)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements_matches_torch(axis):
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    x.reshape(-1)[:4] = [np.nan, np.inf, -np.inf, np.finfo(np.float32).max]
    shape = [2, 3, 4]
    shape[axis] = 6  # more indices than the axis holds, fewer elsewhere
    idx = RNG.integers(0, x.shape[axis], shape)
    with np.errstate(all="raise"):
        (y,) = run_op("gather_elements", [x, idx], axis=axis)
    np.testing.assert_array_equal(y, torch.gather(t(x), axis, t(idx)).numpy())
    ints = RNG.integers(-2**31, 2**31, x.shape).astype(np.int32)  # any dtype
    (y,) = run_op("gather_elements", [ints, idx], axis=axis)
    np.testing.assert_array_equal(y, torch.gather(t(ints), axis, t(idx)).numpy())


@pytest.mark.parametrize("bad", [-1, 4])
@pytest.mark.parametrize("op", ["gather_elements", "scatter_elements"])
def test_run_time_indices_out_of_range_are_refused(op, bad):
    from abi.errors import IndexRangeError

    idx = np.zeros((2, 3), np.int64)
    idx[1, 2] = bad
    updates = [np.ones((2, 3), np.float32)] if op == "scatter_elements" else []
    with pytest.raises(IndexRangeError, match=rf"{op}: axis 1 of x shape \(2, 4\): 1 {op} "
                                              rf"index\(es\) outside \[0, 4\): "
                                              rf"\(1, 2\)={bad}"):
        run_op(op, [np.zeros((2, 4), np.float32), idx, *updates], axis=1)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("reduction, torch_reduce", [("none", None), ("add", "sum"),
                                                     ("mul", "prod"), ("max", "amax"),
                                                     ("min", "amin")])
def test_scatter_elements_matches_torch(axis, reduction, torch_reduce):
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    shape = [2, 3, 4]
    shape[axis] = 6  # more updates than the axis holds: some elements get several
    idx = RNG.integers(0, x.shape[axis], shape)
    if reduction == "none":  # torch leaves which of two updates stays unspecified: none twice
        cut = tuple(slice(None) if d == axis % 3 else slice(0, n) for d, n in enumerate(shape))
        idx = np.argsort(RNG.random(x.shape), axis=axis)[cut]  # a permutation along axis
        shape = list(idx.shape)
    updates = RNG.standard_normal(shape).astype(np.float32)
    with np.errstate(all="raise"):
        (y,) = run_op("scatter_elements", [x, idx, updates], axis=axis, reduction=reduction)
    if torch_reduce is None:
        want = torch.scatter(t(x), axis, t(idx), t(updates))
    else:
        want = torch.scatter_reduce(t(x), axis, t(idx), t(updates), torch_reduce)
    np.testing.assert_allclose(y, want.numpy(), rtol=1e-6, atol=0)
    assert y.dtype == np.float32


def test_scatter_elements_applies_updates_in_the_indices_order():
    """Of two updates to one element the later stays; max and min compare each update with
    what is there, so a nan there gives way and a nan update stays (onnxruntime's kernel; the
    onnxruntime backend's tests compare the two bit for bit)."""
    x = np.array([np.nan, 1.0, 2.0, -0.0], np.float32)
    idx = np.array([0, 0, 1, 1, 2, 3, 3])
    updates = np.array([5.0, 4.0, 7.0, np.nan, 1.0, 0.0, -0.0], np.float32)
    (y,) = run_op("scatter_elements", [x, idx, updates], reduction="none")
    assert y.tolist()[0] == 4.0 and np.isnan(y[1]) and y[2] == 1.0
    assert np.signbit(y[3])
    (y,) = run_op("scatter_elements", [x, idx, updates], reduction="max")
    assert y[0] == 5.0 and np.isnan(y[1]) and y[2] == 2.0
    assert np.signbit(y[3])  # equal values: the update is kept, the later one last
    (y,) = run_op("scatter_elements", [x, idx, updates], reduction="min")
    assert y[0] == 4.0 and np.isnan(y[1]) and y[2] == 1.0 and np.signbit(y[3])
    (y,) = run_op("scatter_elements", [x[1:], idx[2:4] - 1, updates[:2]], reduction="add")
    assert y.tolist() == [10.0, 2.0, -0.0]
    ints = np.array([7, -3], np.int32)
    (y,) = run_op("scatter_elements", [ints, np.array([1, 1, 0]),
                                       np.array([2**30, 4, 9], np.int32)], reduction="mul")
    assert y.dtype == np.int32 and y.tolist() == [63, 0]  # -3 * 2**32 wraps to 0


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_int_div_truncates_as_torch(dtype):
    info = np.iinfo(dtype)
    a = np.concatenate([RNG.integers(-50, 50, 40), [info.min, info.max, info.min + 1, -7, 7,
                                                    -7, 7, 0, info.max, info.min]]).astype(dtype)
    b = np.concatenate([RNG.choice([-9, -3, -2, -1, 1, 2, 3, 9], 40), [1, -1, -1, 2, 2, -2, -2,
                                                                      5, info.min, 2]])
    b = b.astype(dtype)
    with np.errstate(all="raise"):
        (y,) = run_op("int_div", [a, b])
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, torch.div(t(a), t(b), rounding_mode="trunc").numpy())
    row = np.where(b[:10] == -1, 3, b[:10])  # broadcast over a's minimum: no overflow
    with np.errstate(all="raise"):
        (y,) = run_op("int_div", [a.reshape(5, 10), row])
    np.testing.assert_array_equal(
        y, torch.div(t(a.reshape(5, 10)), t(row), rounding_mode="trunc").numpy())


@pytest.mark.parametrize("a, b, message", [
    (np.array([4, 5, 6]), np.array([1, 0, 0]), "int_div: integer division by zero: b has 2 zero"),
    (np.array([np.iinfo(np.int64).min, 5]), np.array([-1, 2]),
     "int_div: -9223372036854775808 / -1 overflows int64"),
    (np.array([np.iinfo(np.int32).min], np.int32), np.array([-1], np.int32),
     "int_div: -2147483648 / -1 overflows int32"),
])
def test_int_div_refuses_zero_and_overflow_without_a_warning(a, b, message):
    from abi.errors import DomainError

    with np.errstate(all="raise"), pytest.raises(DomainError, match=message):
        run_op("int_div", [a, b])


def test_float_fmod_as_torch_also_at_the_extremes():
    for a, b in ((X, np.float32(1.5) + X[:, :, :1]), (SPECIAL, SPECIAL[::-1].copy()),
                 (SPECIAL, np.roll(SPECIAL, 7)), (SPECIAL, np.zeros_like(SPECIAL))):
        with np.errstate(all="raise"):
            (y,) = run_op("mod", [a, b], fmod=True)
        want = torch.fmod(t(a), t(b)).numpy()
        np.testing.assert_allclose(y, want, rtol=1e-6, atol=0, equal_nan=True)
        assert (np.signbit(y) == np.signbit(want))[~np.isnan(want)].all()


def test_float_floor_mod_as_torch_remainder_also_at_the_extremes():
    for a, b in ((X, np.float32(-1.5) + X[:, :, :1]), (SPECIAL, SPECIAL[::-1].copy()),
                 (SPECIAL, np.roll(SPECIAL, 7)), (SPECIAL, np.zeros_like(SPECIAL)),
                 (SPECIAL, -np.roll(SPECIAL, 3))):
        with np.errstate(all="raise"):
            (y,) = run_op("mod", [a, b], fmod=False)
        want = torch.remainder(t(a), t(b)).numpy()
        np.testing.assert_allclose(y, want, rtol=1e-6, atol=0, equal_nan=True)
        # b's sign, a zero's too, as ONNX's reference and onnxruntime (torch's zero takes a's)
        assert (np.signbit(y) == np.signbit(np.broadcast_to(b, y.shape)))[~np.isnan(y)].all()


@pytest.mark.parametrize("op, ref", [("add", torch.add), ("sub", torch.sub),
                                     ("mul", torch.mul), ("div", torch.div)])
def test_arithmetic_gives_ieee_results_without_warnings(op, ref):
    a = SPECIAL
    for b in (a, a[::-1].copy(), np.roll(a, 5)):  # inf - inf, 3e38 + 3e38, 0 * inf, x / 0
        with np.errstate(all="raise"):
            (y,) = run_op(op, [a, b])
        np.testing.assert_allclose(y, ref(t(a), t(b)).numpy(), rtol=1e-6, equal_nan=True)


def test_sum_and_mean_give_ieee_results_without_warnings():
    x = np.stack([SPECIAL, np.roll(SPECIAL, 3), np.full_like(SPECIAL, 3e38)])
    with np.errstate(all="raise"):
        (s,) = run_op("sum", [x], axes=[1])
        (m,) = run_op("mean", [x], axes=[1])
    np.testing.assert_allclose(s, t(x).sum(dim=1).numpy(), rtol=1e-6, equal_nan=True)
    np.testing.assert_allclose(m, t(x).mean(dim=1).numpy(), rtol=1e-6, equal_nan=True)


def _torch_cumsum(a, axis, exclusive, reverse):
    """torch.cumsum in a's dtype, with flip for reverse and a shift by one for exclusive."""
    x = t(a)
    if reverse:
        x = torch.flip(x, [axis])
    y = torch.cumsum(x, axis, dtype=x.dtype)
    if exclusive:
        y = torch.cat([torch.zeros_like(y.narrow(axis, 0, 1)),
                       y.narrow(axis, 0, y.shape[axis] - 1)], axis)
    return (torch.flip(y, [axis]) if reverse else y).numpy()


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_cumsum_as_torch(axis, exclusive, reverse):
    for a in (X[0], RNG.integers(-1000, 1000, (4, 6)), RNG.integers(-9, 9, (3, 5), np.int32)):
        (y,) = run_op("cumsum", [a], axis=axis, exclusive=exclusive, reverse=reverse)
        want = _torch_cumsum(a, axis, exclusive, reverse)
        assert y.dtype == a.dtype and y.shape == a.shape
        np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("exclusive, reverse", [(False, False), (True, True)])
def test_cumsum_gives_ieee_results_without_warnings_as_torch(exclusive, reverse):
    big = np.finfo(np.float32).max
    # overflow to inf, inf - inf, nan, denormals; no partial sum comes back from beyond float32
    # (torch accumulates float32 in float64 on the CPU, onnxruntime and this kernel in float32)
    x = np.array([[big, big, 1, -1], [np.inf, -np.inf, 1, 2], [np.nan, 1, 2, 3],
                  [1e-45, 1e-45, -0.0, -0.0], [-big, -1e38, 5, 0]], np.float32)
    with np.errstate(all="raise"):
        (y,) = run_op("cumsum", [x], axis=1, exclusive=exclusive, reverse=reverse)
    np.testing.assert_allclose(y, _torch_cumsum(x, 1, exclusive, reverse), rtol=1e-6,
                               equal_nan=True)
    if not reverse:
        assert np.isinf(y[0, 1:]).all() and np.isnan(y[1, 2:]).all()


def test_integer_cumsum_wraps_in_its_dtype():
    a = np.array([2**31 - 1, 1, 5], np.int32)
    (y,) = run_op("cumsum", [a], axis=0)
    np.testing.assert_array_equal(y, _torch_cumsum(a, 0, False, False))
    assert y.dtype == np.int32 and y[1] == -2**31


def _sequential_cumprod(a, axis, exclusive, reverse):
    """The running product one slice after the other in a's dtype (a reference apart from
    np.cumprod): each slice times the product so far, 1 at first."""
    x = np.moveaxis(a, axis, 0)
    x = x[::-1] if reverse else x
    product, rows = np.ones_like(x[0]), []
    with np.errstate(all="ignore"):
        for row in x:
            before, product = product, product * row
            rows.append(before if exclusive else product)
    y = np.stack(rows) if rows else np.empty_like(x)
    return np.moveaxis(y[::-1] if reverse else y, 0, axis)


def assert_bits(got, want):
    """Same dtype, shape and bits, -0.0 and infinities included; nan exactly where want has
    nan (a nan's sign, which IEEE leaves open, is not compared)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    nan = np.isnan(want) if want.dtype.kind == "f" else np.zeros(want.shape, bool)
    np.testing.assert_array_equal(np.isnan(got) if got.dtype.kind == "f" else nan, nan)
    np.testing.assert_array_equal(got[~nan].view(f"u{got.itemsize}"),
                                  want[~nan].view(f"u{want.itemsize}"))


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_cumprod_as_torch(axis, exclusive, reverse):
    """torch.cumprod (float32 accumulated in float64: within a float32 rounding), flipped for
    reverse and shifted by one for exclusive; and bit for bit the sequential product."""
    for a in (X[0] / 4, RNG.integers(-9, 9, (4, 6)), RNG.integers(-3, 3, (3, 5), np.int32)):
        (y,) = run_op("cumprod", [a], axis=axis, exclusive=exclusive, reverse=reverse)
        x = torch.flip(t(a), [axis]) if reverse else t(a)
        want = torch.cumprod(x, axis)
        if exclusive:
            want = torch.cat([torch.ones_like(want.narrow(axis, 0, 1)),
                              want.narrow(axis, 0, want.shape[axis] - 1)], axis)
        want = (torch.flip(want, [axis]) if reverse else want).numpy()
        assert y.dtype == a.dtype and y.shape == a.shape
        np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-30)
        assert_bits(y, _sequential_cumprod(a, axis, exclusive, reverse))


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumprod_multiplies_in_float32_one_after_the_other_without_warnings(exclusive, reverse):
    """Overflow to inf that stays (torch's float64 product would come back), inf * 0 = nan,
    -0.0, denormals that underflow to 0, nan: bit for bit the sequential float32 product."""
    big = np.finfo(np.float32).max
    x = np.array([[big, 10, 0.01, 1], [np.inf, 0, 2, 3], [np.nan, 1, 2, 3],
                  [-0.0, 5, -1, 1e-45], [1e-45, 0.5, 1e30, 1e10], [-big, -2, -0.5, 1e-38],
                  [3, -0.5, -np.inf, 2]], np.float32)
    with np.errstate(all="raise"):
        (y,) = run_op("cumprod", [x], axis=1, exclusive=exclusive, reverse=reverse)
    assert_bits(y, _sequential_cumprod(x, 1, exclusive, reverse))
    if not (exclusive or reverse):
        assert (y[0, 1:] == np.inf).all() and np.isnan(y[1, 1:]).all() and y[4, 1] == 0
        assert np.signbit(y[3, :2]).all() and not np.signbit(y[3, 2]) and y[6, 3] == np.inf


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16", "int32", "uint32",
                                   "int64", "uint64"])
def test_integer_cumprod_wraps_in_its_dtype_without_warnings(dtype):
    """The low bits of the exact product (Python's integers), as onnxruntime's Mul gives."""
    info = np.iinfo(dtype)
    step = 2 ** (info.bits // 4 + 1)  # its fifth power overflows
    a = np.array([[info.max, 3, info.max, 7, 5], [info.min, -1 if info.min else 2, 9, 0, 11],
                  [step] * 5], dtype)
    for exclusive in (False, True):
        with np.errstate(all="raise"):
            (y,) = run_op("cumprod", [a], axis=1, exclusive=exclusive)
        exact = np.ones((3, 1), object)
        products = np.cumprod(np.concatenate([exact, a.astype(object)], axis=1), axis=1)
        want = products[:, :-1] if exclusive else products[:, 1:]
        wrapped = [[(int(v) - info.min) % 2**info.bits + info.min for v in r] for r in want]
        np.testing.assert_array_equal(y, np.array(wrapped, dtype))
        assert y.dtype == a.dtype


@pytest.mark.parametrize("shape, axis", [((3, 0), 1), ((0, 4), 1), ((0,), 0), ((2, 0, 3), -1)])
def test_cumprod_of_an_empty_tensor_is_empty(shape, axis):
    for exclusive in (False, True):
        (y,) = run_op("cumprod", [np.zeros(shape, np.float32)], axis=axis, exclusive=exclusive,
                      reverse=True)
        assert y.shape == shape and y.dtype == np.float32


def _torch_det(x: np.ndarray) -> np.ndarray:
    """torch.linalg.det in float64, rounded to float32 (the kernel's own precision)."""
    return torch.linalg.det(t(x).double()).float().numpy()


@pytest.mark.parametrize("shape", [(1, 1), (6, 2, 2), (5, 3, 3), (2, 3, 4, 4), (7, 7),
                                   (4, 12, 12)])
def test_det_as_torch(shape):
    x = (RNG.standard_normal(shape) * 2).astype(np.float32)
    (y,) = run_op("det", [x])
    assert y.shape == shape[:-2] and y.dtype == np.float32
    np.testing.assert_allclose(y, _torch_det(x), rtol=1e-6, atol=1e-30)
    # and within a float32 LU's error of torch's own float32 determinant
    np.testing.assert_allclose(y, torch.linalg.det(t(x)).numpy(), rtol=1e-3, atol=1e-5)


def test_det_of_singular_huge_and_non_finite_matrices():
    """Singular: 0; beyond float32's range: an infinity, as torch's float64 one rounded; a nan
    or an infinity anywhere in a matrix: nan (the ABI's rule), and no warning."""
    big, nan, inf = 1e30, np.nan, np.inf
    x = np.array([[[1, 2], [2, 4]], [[0, 0], [0, 0]], [[big, big], [big, -big]],
                  [[nan, 1], [1, 1]], [[inf, 0], [0, 1]], [[1, -inf], [inf, 1]],
                  [[3, 1], [1, 2]]], np.float32)
    with np.errstate(all="raise"):
        (y,) = run_op("det", [x])
    np.testing.assert_array_equal(y[:3], _torch_det(x[:3]))
    assert y[2] == -np.inf and np.isnan(y[3:6]).all() and y[6] == np.float32(5)


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("axis, k", [(-1, 3), (0, 2), (1, 5), (2, 1)])
def test_topk_as_torch(axis, k, largest):
    distinct = RNG.permutation(2 * 5 * 7).reshape(2, 5, 7)  # no ties: indices are defined
    for a in (distinct.astype(np.float32) / 7, distinct.astype(np.int32) - 30, distinct):
        values, indices = run_op("topk", [a], k=k, axis=axis, largest=largest)
        want = torch.topk(t(a), k, dim=axis, largest=largest)
        assert values.dtype == a.dtype and indices.dtype == np.int64
        np.testing.assert_array_equal(values, want.values.numpy())
        np.testing.assert_array_equal(indices, want.indices.numpy())


@pytest.mark.parametrize("largest", [True, False])
def test_topk_ties_nan_and_integer_extremes_as_torch_stable_sort(largest):
    """Equal values lower index first and nan above every number: torch's stable sort (what
    onnxruntime's TopK gives, see the onnxruntime backend and import tests)."""
    i32 = np.iinfo(np.int32)
    for a in (np.array([[3, 1, 1, np.nan, -0.0, 0.0, np.nan, -np.inf, np.inf, 3]], np.float32),
              np.array([[i32.min, 5, i32.max, 5, i32.min, -1, 0, i32.max]], np.int32),
              RNG.integers(0, 3, (4, 9))):
        k = a.shape[1] - 1
        values, indices = run_op("topk", [a], k=k, largest=largest)
        want = torch.sort(t(a), dim=-1, descending=largest, stable=True)
        np.testing.assert_array_equal(values, want.values.numpy()[:, :k])
        np.testing.assert_array_equal(indices, want.indices.numpy()[:, :k])


def test_topk_k_above_a_run_time_dim_is_a_shape_error():
    b = GraphBuilder("topk")
    x = b.input("x", (2, "L"), "float32", "ANY")
    values, indices = b.op("topk", x, name="n", k=3)
    b.output(values, "v", "ANY")
    b.output(indices, "i", "ANY")
    ex = Executor(b.build(), NumpyBackend())
    assert ex.run({"x": np.ones((2, 3), np.float32)})["i"].tolist() == [[0, 1, 2]] * 2
    with pytest.raises(ShapeError, match=r"topk: k=3 is larger than axis -1 of x shape \(2, 2\)"):
        ex.run({"x": np.ones((2, 2), np.float32)})


def _extremes(dtype, n=30):
    """Random integers of ``dtype`` with its minimum, maximum, 0, 1 and -1 (or max - 1)."""
    info = np.iinfo(dtype)
    edges = [info.min, info.max, 0, 1, info.max - 1, info.min + 1] + ([-1] if info.min else [])
    wide = RNG.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    return np.concatenate([np.array(edges, dtype), wide])


def _onnxruntime_op(op_type, arrays, **attrs):
    """One ONNX node run by onnxruntime: the reference where torch lacks the dtype."""
    import onnxruntime as ort
    from onnx import helper

    names = [f"x{i}" for i in range(len(arrays))]
    elem = helper.np_dtype_to_tensor_dtype(arrays[0].dtype)  # the output's too
    info = [helper.make_tensor_value_info(n, elem, a.shape) for n, a in zip(names, arrays)]
    graph = helper.make_graph([helper.make_node(op_type, names, ["y"], **attrs)], "g", info,
                              [helper.make_tensor_value_info("y", elem, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, dict(zip(names, arrays)))[0]


_INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


@pytest.mark.parametrize("dtype", _INT_DTYPES)
def test_bitwise_ops_match_torch_at_the_dtype_extremes(dtype):
    a = _extremes(dtype)
    b = _extremes(dtype)[::-1].copy()
    for op, ref in (("bitwise_and", torch.bitwise_and), ("bitwise_or", torch.bitwise_or),
                    ("bitwise_xor", torch.bitwise_xor)):
        (y,) = run_op(op, [a, b])
        assert y.dtype == dtype
        np.testing.assert_array_equal(y, ref(t(a), t(b)).numpy(), err_msg=op)
        (y,) = run_op(op, [a.reshape(-1, 1), b[:5]])  # broadcast
        np.testing.assert_array_equal(y, ref(t(a.reshape(-1, 1)), t(b[:5])).numpy(), err_msg=op)
    (y,) = run_op("bitwise_not", [a])
    assert y.dtype == dtype
    if dtype in (np.uint16, np.uint32, np.uint64):  # torch has no ~ of these
        np.testing.assert_array_equal(y, _onnxruntime_op("BitwiseNot", [a]))
    else:
        np.testing.assert_array_equal(y, torch.bitwise_not(t(a)).numpy())


def test_bit_shift_of_uint8_matches_torch_for_every_value_and_shift():
    a = np.repeat(np.arange(256, dtype=np.uint8), 256)
    b = np.tile(np.arange(256, dtype=np.uint8), 256)
    for direction, ref in (("left", torch.bitwise_left_shift),
                           ("right", torch.bitwise_right_shift)):
        (y,) = run_op("bit_shift", [a, b], direction=direction)
        assert y.dtype == np.uint8
        np.testing.assert_array_equal(y, ref(t(a), t(b)).numpy(), err_msg=direction)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64])
@pytest.mark.parametrize("direction", ["left", "right"])
def test_bit_shift_matches_onnxruntime_at_and_beyond_the_bit_width(dtype, direction):
    width = np.iinfo(dtype).bits
    a = _extremes(dtype, 10)
    shifts = np.array([0, 1, width - 1, width, width + 1, 2 * width, np.iinfo(dtype).max],
                      dtype)
    aa, bb = a.reshape(-1, 1), shifts
    (y,) = run_op("bit_shift", [aa, bb], direction=direction)
    want = _onnxruntime_op("BitShift", [np.broadcast_to(aa, (len(a), len(shifts))).copy(),
                                        np.broadcast_to(bb, (len(a), len(shifts))).copy()],
                           direction=direction.upper())
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, want)
    assert not y[:, 3:].any()  # a shift by the width or more gives 0


def test_flatten_of_an_empty_batch():
    """numpy cannot work a -1 out of an empty tensor: the flattened size is the product."""
    b = GraphBuilder("flat")
    x = b.input("x", ("batch", 3, 4), "float32", "ANY")
    b.output(b.op("flatten", x, name="flat", start_dim=1, end_dim=-1), "y", "ANY")
    run = Executor(b.build(), NumpyBackend()).run
    assert run({"x": np.zeros((0, 3, 4), np.float32)})["y"].shape == (0, 12)
    assert run({"x": np.ones((2, 3, 4), np.float32)})["y"].shape == (2, 12)


@pytest.mark.parametrize("have, want", [("float32", "int32"), ("int32", "float32"),
                                        ("uint8", "int8"), ("int16", "uint16"),
                                        ("int64", "uint64"), ("uint32", "float32")])
def test_bitcast_reads_the_bits_as_torch_s_view(have, want):
    """Bit for bit torch's Tensor.view(dtype), over every special float and a transposed
    (non-contiguous) input."""
    bits = RNG.integers(0, 256, (4, 6, 8), dtype=np.uint8).view(have)
    if have == "float32":
        bits.reshape(-1)[:7] = [np.nan, -np.nan, np.inf, -np.inf, -0.0, 1e-45, 3e38]
    x = np.swapaxes(bits, 0, 1)
    [got] = run_op("bitcast", [x], dtype=want)
    ref = t(x).view(getattr(torch, want)).numpy()
    assert got.dtype == want and got.shape == x.shape
    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), ref.view(f"u{ref.itemsize}"))


# --- dynamic_quantize: onnxruntime's DynamicQuantizeLinear -----------------------------------


def unoptimized_session(graph):
    """An onnxruntime CPU session of ``graph`` (opset 21, com.microsoft's 1), its graph
    optimizations off: the reference kernels as they are."""
    ort = pytest.importorskip("onnxruntime")
    from onnx import helper

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


@functools.cache
def _dynamic_quantize_linear():
    """onnxruntime's CPU DynamicQuantizeLinear over a float32 x of any shape (the reference)."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])], "dq",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, None),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("z", TensorProto.UINT8, None)])
    session = unoptimized_session(graph)
    return lambda x: session.run(None, {"x": x})


_FINITE_F32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
_SPECIAL_F32 = st.sampled_from([0.0, -0.0, 1e-45, -1e-45, 127.5, 0.25, -0.75, 126.75, 3.4e38,
                                -3.4e38, np.inf, -np.inf])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_FINITE_F32, _SPECIAL_F32, st.floats(-8, 8, width=32)), min_size=1,
                max_size=70), st.sampled_from([(-1,), (1, -1), (-1, 1), ()]))
def test_dynamic_quantize_gives_onnxruntimes_bits(values, shape):
    """Without a nan, every output equal bit for bit to onnxruntime's DynamicQuantizeLinear
    (its uint8 codes as float32, no -0.0): ties, infinities, subnormals, ranges past
    float32's."""
    x = np.array(values, np.float32)
    x = x[:1].reshape(()) if shape == () else x.reshape(shape)
    y, scale, zp = run_op("dynamic_quantize", [x])
    want_y, want_scale, want_zp = _dynamic_quantize_linear()(x)
    assert y.dtype == scale.dtype == zp.dtype == np.float32 and scale.shape == zp.shape == ()
    np.testing.assert_array_equal(y, want_y.astype(np.float32))
    np.testing.assert_array_equal(scale, want_scale)
    np.testing.assert_array_equal(zp, want_zp.astype(np.float32))
    assert not np.signbit(y).any() and not np.signbit(zp)


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("shape", [(), (37,), (3, 5, 7)])
def test_dynamic_quantize_of_a_nan_anywhere_is_the_abis_answer(shape):
    """A nan at any position gives scale nan, zero point 255 and codes 0 (onnxruntime's
    vectorised min and max keep or drop it by its position), without a warning."""
    base = np.asarray(RNG.standard_normal(shape) * 5, np.float32)
    for at in range(max(base.size, 1)):
        x = base.copy()
        x.reshape(-1)[at] = np.nan
        y, scale, zp = run_op("dynamic_quantize", [x])
        assert np.isnan(scale) and zp == 255 and y.shape == shape and not y.any()


# --- quantize_linear: onnxruntime's QuantizeLinear -----------------------------------------


@functools.cache
def onnxruntime_quantize_linear(dtype: str, per_channel: bool):
    """onnxruntime's CPU QuantizeLinear to ``dtype`` (the reference): ``(x, scale, zero_point)``
    -> codes, per tensor (scale and zero point of shape ()) or along axis 1 (shape (C,))."""
    from onnx import TensorProto, helper

    code = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=1)], "q",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("z", code, None)],
        [helper.make_tensor_value_info("y", code, None)])
    session = unoptimized_session(graph)
    return lambda x, s, z: session.run(None, {"x": x, "s": s, "z": z})[0]


def quantize_linear_feeds(rng, dtype: str, per_channel: bool):
    """x of shape (2, 3, 40), a scale and a zero point (per tensor, or per channel of axis 1):
    normal values, exact halves of the scale (ties), values past the codes' range both ways,
    nan, infinities, signed zeros, the largest floats and a subnormal."""
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    channels = (3,) if per_channel else ()
    scale = np.asarray(10.0 ** rng.uniform(-4, 2, channels), np.float32)
    zp = np.asarray(rng.integers(lo, hi + 1, channels), dtype)
    s = scale.reshape(-1, 1) if per_channel else scale
    span = float(hi - lo)
    x = np.concatenate([
        rng.standard_normal((2, 3, 16)) * s * span / 4,
        (rng.integers(-span, span, (2, 3, 16)) + 0.5) * s,
        np.broadcast_to(np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 3.4e38, -3.4e38, 1e-45]),
                        (2, 3, 8))], axis=2).astype(np.float32)
    return x, scale, zp


@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
@pytest.mark.parametrize("dtype", ["uint8", "int8", "uint16", "int16"])
def test_quantize_linear_gives_onnxruntimes_codes(dtype, per_channel):
    """Every code equal to onnxruntime's QuantizeLinear's (as float32, no -0.0): ties to even,
    saturation both ways, nan to the lowest code, infinities, subnormals; with the zero point
    and without (0)."""
    rng = np.random.default_rng(11)
    reference = onnxruntime_quantize_linear(dtype, per_channel)
    for _ in range(8):
        x, scale, zp = quantize_linear_feeds(rng, dtype, per_channel)
        shape = (3, 1) if per_channel else ()
        for zero_point in (zp, np.zeros_like(zp)):
            want = reference(x, scale, zero_point).astype(np.float32)
            given = [x, scale.reshape(shape), zero_point.astype(np.float32).reshape(shape)]
            [got] = run_op("quantize_linear", given if zero_point.any() else given[:2],
                           dtype=dtype)
            assert got.dtype == np.float32 and got.shape == x.shape
            np.testing.assert_array_equal(got, want)
            assert not np.signbit(got[got == 0]).any()


@pytest.mark.filterwarnings("error")
def test_quantize_linear_of_a_scale_of_zero_or_infinity():
    """A scale computed at run time may be 0 or inf: x / 0 saturates, 0 / 0 and inf / inf (a
    nan quotient) give the lowest code, x / inf is 0 (then the zero point), without a
    warning."""
    x = np.array([2.0, -2.0, 0.0, np.inf, np.nan], np.float32)
    [y] = run_op("quantize_linear", [x, np.array(0, np.float32), np.array(-3, np.float32)], dtype="int8")
    np.testing.assert_array_equal(y, [127, -128, -128, 127, -128])
    [y] = run_op("quantize_linear", [x, np.array(np.inf, np.float32), np.array(7, np.float32)], dtype="uint8")
    np.testing.assert_array_equal(y, [7, 7, 7, 0, 0])


# --- integer_linear: the exact sums of 8-bit codes ---------------------------------------------


def integer_linear_graph(x, w, x_zp, w_zp, constant: bool):
    """A one-node integer_linear graph (node "n") and its feed: x and its zero point fed, the
    weight and its zero point constants (``constant``: the prepared kernel) or fed too; a
    zero point of None is left out."""
    b = GraphBuilder("integer_linear")
    feed, names = {}, []
    for name, a, fixed in (("x", x, False), ("w", w, constant), ("x_zp", x_zp, False),
                           ("w_zp", w_zp, constant)):
        if a is None:
            names.append(None)
        elif fixed:
            names.append(b.constant(name, a))
        else:
            names.append(b.input(name, a.shape, str(a.dtype), "ANY"))
            feed[name] = a
    b.output(b.op("integer_linear", *names, name="n"), "y", "ANY")
    return b.build(), feed


def torch_integer_linear(x, w, x_zp=None, w_zp=None):
    """torch's exact int64 sums of the codes less their zero points, wrapped to int32."""
    a = t(x).long() - (0 if x_zp is None else int(x_zp))
    weight = t(w).long() - (0 if w_zp is None else t(w_zp).long().reshape(-1, 1))
    return (a @ weight.T).to(torch.int32).numpy()


def integer_codes(rng, dtype, shape):
    """Codes of ``dtype`` spread over its range, a third of them at its ends."""
    info = np.iinfo(dtype)
    codes = rng.integers(info.min, int(info.max) + 1, shape)
    ends = rng.random(shape)
    codes[ends < 0.17] = info.min
    codes[ends > 0.83] = info.max
    return codes.astype(dtype)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["uint8", "int8"]), st.sampled_from(["uint8", "int8"]),
       st.sampled_from([(), (3,), (2, 4), (1, 3, 2)]), st.integers(0, 70), st.integers(1, 9),
       st.sampled_from(["none", "tensor", "column"]), st.booleans(), st.integers(0, 2 ** 32 - 1))
def test_integer_linear_gives_torchs_exact_sums(x_dtype, w_dtype, lead, k, n, zero_points,
                                                 constant, seed):
    rng = np.random.default_rng(seed)
    x, w = integer_codes(rng, x_dtype, lead + (k,)), integer_codes(rng, w_dtype, (n, k))
    x_zp = None if zero_points == "none" else integer_codes(rng, x_dtype, ())
    w_zp = {"none": None, "tensor": integer_codes(rng, w_dtype, ()),
            "column": integer_codes(rng, w_dtype, (n,))}[zero_points]
    graph, feed = integer_linear_graph(x, w, x_zp, w_zp, constant)
    y = Executor(graph, NumpyBackend()).run(feed)["y"]
    assert y.dtype == np.int32 and y.shape == lead + (n,)
    np.testing.assert_array_equal(y, torch_integer_linear(x, w, x_zp, w_zp))


@pytest.mark.parametrize("constant", [True, False])
def test_integer_linear_beyond_float32s_exact_integers(constant):
    """K = 600 products of 255 * 255 reach 3.9e7 > 2**24, where one float32 sum would round:
    the kernel sums runs of K whose float32 sums are exact (258, 258 and 84: 255 * 255 * 258 <=
    2**24) and adds them in int32, exactly."""
    k, rng = 600, np.random.default_rng(6)
    w = np.full((4, k), 255, np.uint8)
    w[1] = rng.integers(0, 256, k)
    w[2, ::7] = 0
    x = np.full((3, k), 255, np.uint8)
    x[1, ::3] = rng.integers(0, 256, x[1, ::3].shape)
    x[2, 0] = 254  # 599 * 255 * 255 + 254 * 255 is odd and past 2**24: no float32 holds it
    assert [(a, b) for a, b, _ in glue.integer_weight(w)] == [(0, 258), (258, 516), (516, 600)]
    graph, feed = integer_linear_graph(x, w, np.array(0, np.uint8), None, constant)
    y = Executor(graph, NumpyBackend()).run(feed)["y"]
    want = torch_integer_linear(x, w)
    assert np.abs(want).max() > 2 ** 24 and np.any(want != want.astype(np.float32))
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("constant", [True, False])
def test_integer_linear_wraps_as_int32(constant):
    """34,000 products of 255 * 255 add up past 2**31: the sum wraps (two's complement) as
    onnxruntime's int32 accumulation does, on the prepared kernel and the plain one."""
    k = 34_000
    x, w = np.full((2, k), 255, np.uint8), np.full((3, k), 255, np.uint8)
    x[1, :k // 2] = 0
    graph, feed = integer_linear_graph(x, w, None, np.array([0, 1, 255], np.uint8), constant)
    y = Executor(graph, NumpyBackend()).run(feed)["y"]
    np.testing.assert_array_equal(y, torch_integer_linear(x, w, None,
                                                          np.array([0, 1, 255], np.uint8)))
    assert y[0, 0] == np.int64(255 * 255 * k).astype(np.int32) < 0 < y[1, 0]


@pytest.mark.parametrize("op", ["max_pool", "max_pool_with_indices", "avg_pool"])
@pytest.mark.parametrize("size", [(0, 3, 9, 9), (2, 0, 9, 9)], ids=["batch_of_0", "channels_0"])
@pytest.mark.parametrize("kernel, stride", [([2, 2], [2, 2]), ([7, 6], [3, 4])],
                         ids=["taps_first", "windows_first"])
def test_pools_of_no_value(op, size, kernel, stride):
    """A batch or channels of 0, both ways a pool takes its taps (a reshape of no value to
    (N, C, -1) is ambiguous, which the ONNX fuzz's widened batch of 0 met): outputs of no
    value, of torch's planes (torch refuses channels of 0)."""
    x = np.zeros(size, np.float32)
    attrs = dict(layout="NCHW", kernel_size=kernel, stride=stride, padding=[[1, 1], [1, 1]],
                 ceil_mode=False)
    attrs.update(count_include_pad=False) if op == "avg_pool" else attrs.update(dilation=[1, 1])
    got = run_op(op, [x], **attrs)
    plane = TF.max_pool2d(torch.zeros((1, 1) + size[2:]), kernel, stride, 1).shape[2:]
    assert [y.shape for y in got] == [size[:2] + tuple(plane)] * len(got)
