"""Element-wise math and reductions beyond the first set import from both exporters and match
onnxruntime: Sin, Cos, Sign, LogSoftmax, ArgMin, ReduceProd (folded on constants), Mod as their
glue ops; Selu, Celu, Mish, ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum and
ReduceLogSumExp as decompositions into glue ops, which match onnxruntime at the float32
extremes too; Det as ``det``."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import BackendError, DomainError, ModelFileError, UnsupportedModelError
from plugin_host.executor import Executor
from plugin_host.onnx_import import import_onnx
from plugin_host.onnx_import.fold import fold as fold_constants
from plugin_host.onnx_import.ops import MAPPERS
from plugins.numpy_backend import NumpyBackend

from .conftest import (EXPORTERS, check_against_onnxruntime, check_on_both_backends, export,
                       import_and_load, onnx, onnxruntime_outputs, torch)

F = torch.nn.functional
helper, TP = onnx.helper, onnx.TensorProto

#: float32 values where a formula can lose: huge, tiny, signed zeros, infinities, nan
EXTREMES = np.array([-np.inf, -3e38, -1e30, -1e4, -100, -88, -20, -1, -1e-3, -1e-30, -0.0, 0.0,
                     1e-30, 1e-3, 1, 20, 88, 100, 1e4, 1e30, 3e38, np.inf, np.nan], np.float32)


def _ops(loaded) -> set[str]:
    return {n.op for n in loaded.graph.nodes}


def _feeds(shape, seed, scales=(1, 4, 30)):
    rng = np.random.default_rng(seed)
    return [{"x": (rng.standard_normal(shape) * s).astype(np.float32)} for s in scales]


class _Elementwise(torch.nn.Module):
    def forward(self, x):
        return torch.sin(x) + torch.cos(x) * torch.sign(x), F.log_softmax(x, dim=1)


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_sin_cos_sign_and_log_softmax_match_onnxruntime(dynamo, fold, optimize, tmp_path,
                                                        signer):
    model = export(_Elementwise(), [torch.randn(2, 5, 3)], tmp_path / "e.onnx", dynamo=dynamo,
                   fold=fold, optimize=optimize, input_names=["x"], output_names=["trig", "lsm"])
    _, loaded = import_and_load(model, tmp_path / "e.pha", signer)
    assert {"sin", "cos", "sign", "log_softmax"} <= _ops(loaded)
    feeds = _feeds((2, 5, 3), 1) + [{"x": np.resize(EXTREMES, (2, 5, 3))}]
    check_against_onnxruntime(model, loaded, feeds)


class _Reductions(torch.nn.Module):
    def forward(self, x):
        return (torch.argmin(x, dim=1), x.argmin(dim=-1, keepdim=True), torch.prod(x, dim=2),
                x.prod(dim=0, keepdim=True), x.var(dim=1),
                torch.logsumexp(x, dim=1), torch.logsumexp(x, dim=(0, 2), keepdim=True))


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_argmin_prod_var_and_logsumexp_match_onnxruntime(dynamo, fold, optimize, tmp_path,
                                                         signer):
    names = ["amin1", "amin2", "prod2", "prod0", "var", "lse1", "lse02"]
    model = export(_Reductions(), [torch.randn(3, 4, 5)], tmp_path / "r.onnx", dynamo=dynamo,
                   fold=fold, optimize=optimize, input_names=["x"], output_names=names)
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    assert {"argmin", "prod", "amax", "exp", "log"} <= _ops(loaded)
    assert {s.name: s.dtype for s in loaded.graph.outputs}["amin1"] == "int64"
    ties = np.zeros((3, 4, 5), np.float32)
    ties[:, 1:3] = -1.0  # argmin's first index on ties
    lse = np.full((3, 4, 5), -np.inf, np.float32)
    lse[0, 0, 0], lse[1, :, 1], lse[2, 2, :] = np.inf, 3e38, 1e30
    check_against_onnxruntime(model, loaded, _feeds((3, 4, 5), 2, (0.5, 1, 4)) + [
        {"x": ties}, {"x": lse}])


def test_var_from_the_legacy_exporter_folds_its_element_count(tmp_path):
    """Shape -> Gather -> ReduceProd: the count of the reduced elements, known at import."""
    class Var(torch.nn.Module):
        def forward(self, x):
            return x.var(dim=1)

    model = export(Var(), [torch.randn(2, 6, 3)], tmp_path / "v.onnx", dynamo=False,
                   input_names=["x"], output_names=["y"])
    assert "ReduceProd" in {n.op_type for n in onnx.load(model).graph.node}
    assert "prod" not in {n.op for n in import_onnx(model).graph.nodes}


class _Norms(torch.nn.Module):
    def forward(self, x):
        return (torch.linalg.vector_norm(x, dim=1), torch.linalg.vector_norm(x, ord=1, dim=-1),
                torch.linalg.vector_norm(x, dim=(0, 2), keepdim=True))


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_vector_norms_match_onnxruntime(dynamo, fold, optimize, tmp_path, signer):
    model = export(_Norms(), [torch.randn(2, 4, 3)], tmp_path / "n.onnx", dynamo=dynamo,
                   fold=fold, optimize=optimize, input_names=["x"], output_names=["l2", "l1",
                                                                                  "l2k"])
    _, loaded = import_and_load(model, tmp_path / "n.pha", signer)
    assert {"abs", "sum", "sqrt"} <= _ops(loaded)
    check_against_onnxruntime(model, loaded, _feeds((2, 4, 3), 3) + [
        {"x": np.resize(EXTREMES, (2, 4, 3))}])


class _Det(torch.nn.Module):
    """torch.linalg.det of a batch of 3x3 and of one 5x5 matrix (ONNX Det)."""

    def forward(self, x, m):
        return torch.linalg.det(x), torch.linalg.det(m)


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_det_matches_onnxruntime_on_both_backends(dynamo, fold, optimize, tmp_path, signer):
    from plugins.onnxruntime_backend import OnnxruntimeBackend

    model = export(_Det(), [torch.randn(4, 3, 3), torch.randn(5, 5)], tmp_path / "d.onnx",
                   dynamo=dynamo, fold=fold, optimize=optimize, input_names=["x", "m"],
                   output_names=["d", "e"])
    _, loaded = import_and_load(model, tmp_path / "d.pha", signer)
    assert _ops(loaded) == {"det"}
    singular = np.array([[1, 2, 3], [4, 5, 6], [7, 8, 9]], np.float32)
    feeds = [{"x": x["x"], "m": m["x"]} for x, m in zip(_feeds((4, 3, 3), 3),
                                                           _feeds((5, 5), 4))]
    feeds.append({"x": np.stack([singular, np.eye(3, dtype=np.float32) * 1e13, -singular.T,
                                 np.zeros((3, 3), np.float32)]),
                  "m": np.diag(np.arange(1, 6)).astype(np.float32)})
    for backend in (NumpyBackend(), OnnxruntimeBackend()):
        check_against_onnxruntime(model, loaded, feeds, backend=backend)


def test_det_of_a_matrix_holding_an_infinity_is_nan_on_both_backends(tmp_path, signer):
    """Where onnxruntime's LU gives an infinity or nan by its pivots (torch and numpy disagree
    with it and each other), the ABI's det gives nan on either backend."""
    from plugins.onnxruntime_backend import OnnxruntimeBackend

    model = export(_Det(), [torch.randn(4, 3, 3), torch.randn(5, 5)], tmp_path / "d.onnx",
                   dynamo=False, input_names=["x", "m"], output_names=["d", "e"])
    _, loaded = import_and_load(model, tmp_path / "d.pha", signer)
    x = np.stack([np.eye(3, dtype=np.float32)] * 4)
    x[0, 0, 0], x[1, 1, 2], x[2, 2, 2], x[3, 0, 1] = np.inf, -np.inf, np.nan, 2.0
    feed = {"x": x, "m": np.eye(5, dtype=np.float32)}
    assert onnxruntime_outputs(model, feed)["d"][0] == np.inf  # onnxruntime itself
    for backend in (NumpyBackend(), OnnxruntimeBackend()):
        got = Executor(loaded.graph, backend).run(feed)["d"]
        assert np.isnan(got[:3]).all() and got[3] == 1.0, got


@pytest.mark.skipif("Expand" not in MAPPERS,
                    reason="F.normalize expands the norm with Expand on a run-time value")
@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_normalize_matches_onnxruntime(dynamo, fold, optimize, tmp_path, signer):
    class Normalize(torch.nn.Module):
        def forward(self, x):
            return F.normalize(x, dim=1)

    model = export(Normalize(), [torch.randn(2, 4, 3)], tmp_path / "n.onnx", dynamo=dynamo,
                   fold=fold, optimize=optimize, input_names=["x"], output_names=["y"])
    _, loaded = import_and_load(model, tmp_path / "n.pha", signer)
    assert "sqrt" in _ops(loaded)
    check_against_onnxruntime(model, loaded, _feeds((2, 4, 3), 4))


class _Modulus(torch.nn.Module):
    def forward(self, x, n):
        return torch.fmod(x, 1.5), torch.fmod(n, 3), torch.remainder(n, -4), torch.remainder(
            x, 0.75)


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_fmod_and_remainder_match_onnxruntime(dynamo, fold, optimize, tmp_path, signer):
    n = torch.arange(-6, 6).reshape(3, 4)
    model = export(_Modulus(), [torch.randn(3, 4), n], tmp_path / "m.onnx", dynamo=dynamo,
                   fold=fold, optimize=optimize, input_names=["x", "n"],
                   output_names=["fx", "fn", "rn", "rx"])
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    mods = [n.attrs["fmod"] for n in loaded.graph.nodes if n.op == "mod"]
    assert sorted(mods) == [False, True, True], mods  # float remainder: Div, Floor, Mul, Sub
    rng = np.random.default_rng(6)
    check_against_onnxruntime(model, loaded, [
        {"x": (rng.standard_normal((3, 4)) * s).astype(np.float32),
         "n": rng.integers(-50, 50, (3, 4))} for s in (1, 10)])


class _Activations(torch.nn.Module):
    def forward(self, x):
        return F.selu(x), F.celu(x), F.celu(x, alpha=0.3), F.mish(x)


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_selu_celu_mish_match_onnxruntime(dynamo, fold, optimize, tmp_path, signer):
    model = export(_Activations(), [torch.randn(2, 7)], tmp_path / "a.onnx", dynamo=dynamo,
                   fold=fold, optimize=optimize, input_names=["x"],
                   output_names=["selu", "celu", "celu3", "mish"])
    _, loaded = import_and_load(model, tmp_path / "a.pha", signer)
    assert {"elu", "softplus", "tanh", "mul"} <= _ops(loaded)
    check_against_onnxruntime(model, loaded, _feeds((2, 7), 7) + [
        {"x": np.resize(EXTREMES, (2, 7))}, {"x": np.resize(EXTREMES[7:], (2, 7))}])


# --- one node at a time: every attribute, the extremes -------------------------------------


def _model(tmp_path, node, x_shape=(4, 6), elem=TP.FLOAT, inits=(), opset=18, name="m"):
    """A model of ``node``: its inputs not in ``inits`` are run-time ones of shape ``x_shape``."""
    out = TP.INT64 if node.op_type in ("ArgMax", "ArgMin") else elem
    known = {t.name for t in inits}
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, elem, x_shape)
                                            for n in node.input if n and n not in known],
                              [helper.make_tensor_value_info("y", out, None)], list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model = onnx.shape_inference.infer_shapes(model)  # the output's shape
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    return path


def _axes(*values):
    return helper.make_tensor("axes", TP.INT64, [len(values)], list(values))


_EXTREME_ROWS = np.stack([np.resize(np.roll(EXTREMES, 5 * i), 6) for i in range(4)])
_EXTREME_ROWS[1, :] = -np.inf  # a row of -inf: logsumexp's -inf, not nan
_EXTREME_ROWS[2, :3] = 3e38    # a sum that overflows


@pytest.mark.parametrize("op_type, attrs, axes, opset", [
    ("Selu", {}, None, 18),
    ("Selu", {"alpha": 0.5, "gamma": 2.0}, None, 18),
    ("Celu", {}, None, 18),
    ("Celu", {"alpha": 2.5}, None, 18),
    ("Mish", {}, None, 18),
    ("LogSoftmax", {"axis": 0}, None, 18),
    ("LogSoftmax", {}, None, 13),
    ("ReduceL1", {}, (1,), 18),
    ("ReduceL2", {"keepdims": 0}, (0,), 18),
    ("ReduceL2", {"axes": [-1], "keepdims": 1}, None, 13),
    ("ReduceSumSquare", {"keepdims": 0}, (), 18),
    ("ReduceSumSquare", {"noop_with_empty_axes": 0}, None, 18),
    ("ReduceSumSquare", {"noop_with_empty_axes": 1}, (1,), 18),  # tf2onnx: beside given axes
    ("ReduceSum", {"noop_with_empty_axes": 1, "keepdims": 0}, (0,), 13),
    ("ReduceLogSum", {"keepdims": 0}, (1,), 18),
    ("ReduceLogSum", {}, (0, 1), 18),
    ("ReduceLogSum", {"axes": [0]}, None, 13),
    ("ReduceLogSumExp", {"keepdims": 0}, (1,), 18),
    ("ReduceLogSumExp", {}, (0, 1), 18),
    ("ReduceLogSumExp", {"axes": [0], "keepdims": 0}, None, 13),
    ("ReduceProd", {"keepdims": 0}, (1,), 18),
])
def test_one_node_matches_onnxruntime_at_the_extremes(op_type, attrs, axes, opset, tmp_path,
                                                      signer):
    inputs, inits = ["x"], []
    if axes is not None:
        inputs.append("axes")
        inits.append(_axes(*axes))
    model = _model(tmp_path, helper.make_node(op_type, inputs, ["y"], name="node", **attrs),
                   inits=inits, opset=opset)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    rng = np.random.default_rng(8)
    feeds = [{"x": (rng.standard_normal((4, 6)) * s).astype(np.float32)} for s in (1, 10, 100)]
    feeds += [{"x": _EXTREME_ROWS}, {"x": _EXTREME_ROWS[::-1].copy()},
              {"x": _EXTREME_ROWS.T.reshape(4, 6).copy()}]
    check_against_onnxruntime(model, loaded, feeds)


@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("elem", [TP.INT64, TP.INT32])
def test_integer_mod_matches_onnxruntime_and_refuses_a_zero_divisor(fmod, elem, tmp_path,
                                                                    signer):
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    d = np.array([3, -3, 7, -1], dtype)
    node = helper.make_node("Mod", ["x", "d"], ["y"], name="node", fmod=fmod)
    model = _model(tmp_path, node, x_shape=(2, 4), elem=elem,
                   inits=[onnx.numpy_helper.from_array(d, "d")])
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    low, high = np.iinfo(dtype).min, np.iinfo(dtype).max
    check_against_onnxruntime(model, loaded, [
        {"x": np.array([[7, -7, 7, -7], [low, high, -1, low]], dtype)},
        {"x": np.arange(-12, 12, 3, dtype=dtype).reshape(2, 4)}])

    # a divisor computed at run time: 0 is refused, by onnxruntime as by the numpy kernel
    model = _model(tmp_path, node, x_shape=(2, 4), elem=elem, name="runtime")
    executor = Executor(import_onnx(model).graph, NumpyBackend())
    feed = {"x": np.arange(-4, 4, dtype=dtype).reshape(2, 4), "d": np.resize(d[::-1], (2, 4))}
    np.testing.assert_array_equal(executor.run(dict(feed))["y"],
                                  onnxruntime_outputs(model, feed)["y"])
    feed["d"][1, 2] = 0
    with pytest.raises(Exception, match="Integer modulo by zero"):
        onnxruntime_outputs(model, feed)
    with pytest.raises(DomainError, match=r"mod: integer modulo by zero: b has 1 zero"):
        executor.run(feed)


def test_float_fmod_matches_onnxruntime_at_the_extremes(tmp_path, signer):
    model = _model(tmp_path, helper.make_node("Mod", ["x", "d"], ["y"], name="node", fmod=1),
                   x_shape=(23,))
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    check_against_onnxruntime(model, loaded, [
        {"x": EXTREMES, "d": d} for d in (EXTREMES[::-1].copy(), np.roll(EXTREMES, 3))])


def test_float_floor_mod_of_opset_28_matches_onnxruntime_bit_for_bit(tmp_path, signer):
    """Mod with fmod=0 takes floats from opset 28: numpy's remainder, the sign of the
    divisor (a zero too); the onnxruntime backend, whose models are of opset 20, computes it
    from C's fmod. Both as onnxruntime's Mod of opset 28, bit for bit, at the extremes."""
    model = _model(tmp_path, helper.make_node("Mod", ["x", "d"], ["y"], name="node", fmod=0),
                   x_shape=(23,), opset=28)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    from plugins.onnxruntime_backend import OnnxruntimeBackend

    feeds = [{"x": EXTREMES, "d": d} for d in (EXTREMES[::-1].copy(), np.roll(EXTREMES, 3),
                                                -np.roll(EXTREMES, 7), np.full(23, -2.5,
                                                                               np.float32))]
    for backend in (NumpyBackend(), OnnxruntimeBackend()):
        executor = Executor(loaded.graph, backend)
        for feed in feeds:
            got, want = executor.run(dict(feed))["y"], onnxruntime_outputs(model, feed)["y"]
            assert np.array_equal(np.isnan(got), np.isnan(want))
            np.testing.assert_array_equal(got[~np.isnan(got)].view(np.uint32),
                                          want[~np.isnan(want)].view(np.uint32))


@pytest.mark.parametrize("constant", [False, True])
@pytest.mark.parametrize("opset", [13, 27])
def test_float_floor_mod_before_opset_28_is_refused_as_onnxruntime_refuses_it(
        opset, constant, tmp_path):
    inits = [helper.make_tensor("x", TP.FLOAT, [2], [-3.5, 2.0])] if constant else []
    if constant:
        inits.append(helper.make_tensor("d", TP.FLOAT, [2], [2.0, -1.5]))
    node = helper.make_node("Mod", ["x", "d"], ["y"], name="node", fmod=0)
    model = _model(tmp_path, node, x_shape=(2,), opset=opset, inits=inits)
    with pytest.raises(ModelFileError, match=r"node 'node' \(Mod\): fmod=0 on floats \(the "
                       r"floor modulus\) needs opset 28 or later, the model's is " + str(opset)):
        import_onnx(model)


@pytest.mark.parametrize("op_type", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis, keepdims", [(0, 1), (1, 0), (-1, 1)])
@pytest.mark.parametrize("elem", [TP.FLOAT, TP.INT32])
def test_select_last_index_takes_the_last_tie_as_onnxruntime(op_type, axis, keepdims, elem,
                                                             tmp_path, signer):
    node = helper.make_node(op_type, ["x"], ["y"], name="node", axis=axis, keepdims=keepdims,
                            select_last_index=1)
    model = _model(tmp_path, node, x_shape=(5, 6), elem=elem)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert "slice" in _ops(loaded)
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    rng = np.random.default_rng(axis + 3 * keepdims)
    ties = [{"x": rng.integers(-2, 3, (5, 6)).astype(dtype)} for _ in range(4)]
    ties.append({"x": np.zeros((5, 6), dtype)})  # every entry a tie: the last index
    want = onnxruntime_outputs(model, ties[-1])["y"]
    assert np.all(want == (5 if axis == 0 else 6) - 1)
    check_on_both_backends(model, loaded, ties)


@pytest.mark.parametrize("op_type", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("x_shape, axis, keepdims", [((4, "n"), 1, 0), ((4, "n"), -1, 1),
                                                     (("n", 6), 0, 1), (("b", "n"), 1, 0)])
@pytest.mark.parametrize("elem", [TP.FLOAT, TP.INT64])
def test_select_last_index_over_a_run_time_axis_counts_its_size_when_the_call_runs(
        op_type, x_shape, axis, keepdims, elem, tmp_path, signer):
    """The last tie along an axis of a run-time size: x reversed to its far end, and the size
    counted when the call runs; lengths 1 to 9, ties everywhere, and infinities."""
    node = helper.make_node(op_type, ["x"], ["y"], name="node", axis=axis, keepdims=keepdims,
                            select_last_index=1)
    model = _model(tmp_path, node, x_shape=x_shape, elem=elem)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer,
                                golden_dims={"n": [3, 7]})
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    rng = np.random.default_rng(axis + 3 * keepdims)
    feeds = []
    for n in (1, 2, 5, 9):
        shape = tuple(n if d == "n" else 3 if d == "b" else d for d in x_shape)
        feeds += [{"x": rng.integers(-2, 3, shape).astype(dtype)}, {"x": np.zeros(shape, dtype)}]
    if elem == TP.FLOAT:
        feeds.append({"x": np.resize(np.array([np.inf, -np.inf, 1, np.inf], np.float32),
                                     tuple(5 if d in ("n", "b") else d for d in x_shape))})
    check_on_both_backends(model, loaded, feeds)


@pytest.mark.parametrize("op_type", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin",
                                     "ReduceProd"])
@pytest.mark.parametrize("given", ["empty", "none"])
def test_no_axes_with_noop_with_empty_axes_is_x_itself_as_onnxruntime(op_type, given, tmp_path,
                                                                      signer):
    inputs, inits = ["x"], []
    if given == "empty":
        inputs, inits = ["x", "axes"], [helper.make_tensor("axes", TP.INT64, [0], [])]
    node = helper.make_node(op_type, inputs, ["y"], name="node", noop_with_empty_axes=1)
    model = _model(tmp_path, node, x_shape=(3, 4), inits=inits)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert [n.op for n in loaded.graph.nodes] == ["identity"]
    x = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
    assert np.array_equal(onnxruntime_outputs(model, {"x": x})["y"], x)
    check_on_both_backends(model, loaded, [{"x": x}])


@pytest.mark.parametrize("op_type", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("axes, keepdims", [([1], 1), ([0, 2], 0), (None, 1)])
def test_max_and_min_of_bools_match_onnxruntime(op_type, axes, keepdims, tmp_path, signer):
    inputs, inits = ["x"], []
    if axes is not None:
        inputs, inits = ["x", "axes"], [_axes(*axes)]
    node = helper.make_node(op_type, inputs, ["y"], name="node", keepdims=keepdims)
    model = _model(tmp_path, node, x_shape=(3, 4, 2), elem=TP.BOOL, inits=inits, opset=20)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    rng = np.random.default_rng(7)
    feeds = [{"x": rng.random((3, 4, 2)) < p} for p in (0.1, 0.5, 0.9)]
    feeds += [{"x": np.zeros((3, 4, 2), bool)}, {"x": np.ones((3, 4, 2), bool)}]
    check_on_both_backends(model, loaded, feeds)


@pytest.mark.parametrize("op_type, attrs, opset, elem, message", [
    ("Mod", {"fmod": 2}, 18, TP.INT64, "attribute fmod=2 must be 0 or 1"),
    ("ArgMin", {"select_last_index": 2}, 18, TP.FLOAT,
     "attribute select_last_index=2 must be 0 or 1"),
    ("Celu", {"alpha": 0.0}, 18, TP.FLOAT, "attribute alpha=0.0 must be > 0"),
    ("Selu", {"gamma": float("inf")}, 18, TP.FLOAT, "attribute gamma=inf is not finite"),
    ("ReduceLogSumExp", {"noop_with_empty_axes": 1}, 18, TP.FLOAT,
     "noop_with_empty_axes=1 with no axes (no reduction) is not supported"),
    ("ReduceSum", {"noop_with_empty_axes": 2}, 18, TP.FLOAT,
     "attribute noop_with_empty_axes=2 must be 0 or 1"),
    ("ReduceLogSumExp", {}, 18, TP.INT64, "input of dtype int64: needs a float tensor"),
    ("ReduceL2", {}, 18, TP.INT32, "maps to sqrt, which refuses it"),
    ("Sin", {}, 18, TP.INT64, "sin: x must be a float tensor"),
])
def test_a_value_the_mapping_cannot_take_names_the_node(op_type, attrs, opset, elem, message,
                                                        tmp_path):
    inputs = ["x", "d"] if op_type == "Mod" else ["x"]
    inits = [helper.make_tensor("d", elem, [], [2])] if op_type == "Mod" else []
    model = _model(tmp_path, helper.make_node(op_type, inputs, ["y"], name="node", **attrs),
                   elem=elem, inits=inits, opset=opset)
    with pytest.raises(UnsupportedModelError) as info:
        import_onnx(model)
    assert f"node 'node' ({op_type})" in str(info.value) and message in str(info.value), \
        str(info.value)


def test_onnxruntime_backend_refuses_an_integer_modulo_by_zero_at_run_time(tmp_path, signer):
    pytest.importorskip("plugins.onnxruntime_backend")
    from plugins.onnxruntime_backend import OnnxruntimeBackend

    model = _model(tmp_path, helper.make_node("Mod", ["x", "d"], ["y"], name="node"),
                   x_shape=(2,), elem=TP.INT64)
    executor = Executor(import_onnx(model).graph, OnnxruntimeBackend())
    x = np.array([4, -9], np.int64)
    assert executor.run({"x": x, "d": np.array([3, 5])})["y"].tolist() == [1, 1]
    with pytest.raises(BackendError, match="Integer modulo by zero"):
        executor.run({"x": x, "d": np.array([0, 5])})


@pytest.mark.parametrize("attrs, axes", [({}, None), ({"keepdims": 0}, (0, -1)), ({}, (1,)),
                                         ({"noop_with_empty_axes": 1}, ()),
                                         ({"keepdims": 0, "axes": [1]}, None)])
def test_reduce_prod_on_constants_folds_as_onnxruntime_computes_it(attrs, axes, tmp_path):
    x = np.arange(-3, 21, dtype=np.int64).reshape(2, 3, 4)
    opset = 13 if "axes" in attrs else 18
    inputs, inits = ["x"], []
    if axes is not None:
        inputs.append("axes")
        inits.append(_axes(*axes))
    node = helper.make_node("ReduceProd", inputs, ["y"], name="node", **attrs)
    model = _model(tmp_path, node, x_shape=x.shape, elem=TP.INT64, inits=inits, opset=opset)
    want = onnxruntime_outputs(model, {"x": x})["y"]
    values = [x] if axes is None else [x, np.array(axes, np.int64)]
    [got] = fold_constants("ReduceProd", values, attrs, outputs=1, cap=1000)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


_BOUNDS = [(0, None), (None, 1), (-1, 1), (2, -2), (None, None)]


@pytest.mark.parametrize("elem, lo, hi", [(TP.INT64, *b) for b in _BOUNDS] + [
    (TP.FLOAT, *b) for b in _BOUNDS + [(None, 1.5), (np.nan, 1.0), (-1.0, np.nan)]])
def test_clip_on_constants_folds_as_onnxruntime_computes_it(elem, lo, hi, tmp_path):
    """timm's "same" padding under the legacy exporter clips the pads it computes from a static
    size at 0: folded, so a Pad reads them as constants. A missing bound is the dtype's lowest
    or largest value, as onnxruntime takes it (an infinite float becomes the largest finite)."""
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    x = (EXTREMES if dtype.kind == "f" else np.arange(-5, 6)).astype(dtype)
    bounds = [None if b is None else np.array(b, dtype) for b in (lo, hi)]
    names = ["x"] + ["" if b is None else n for b, n in zip(bounds, ("lo", "hi"))]
    inits = [onnx.numpy_helper.from_array(b, n) for b, n in zip(bounds, ("lo", "hi"))
             if b is not None]
    model = _model(tmp_path, helper.make_node("Clip", names, ["y"], name="node"),
                   x_shape=x.shape, elem=elem, inits=inits)
    want = onnxruntime_outputs(model, {"x": x})["y"]
    [got] = fold_constants("Clip", [x, *bounds], {}, outputs=1, cap=1000)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_clip_on_constants_refuses_a_bound_of_more_than_one_value():
    with pytest.raises(ModelFileError, match=r"max must be one value, got shape \[2\]"):
        fold_constants("Clip", [np.zeros(3, np.float32), None, np.zeros(2, np.float32)], {},
                       outputs=1, cap=1000)


class _IntegerDivision(torch.nn.Module):
    def forward(self, i, j, d):
        d = torch.where(d == 0, 1, d)  # the build's drawn golden inputs hold zeros
        return (i // 3, torch.div(i, d, rounding_mode="trunc"), i // d,
                torch.remainder(i, d) + i // -4, j // 5)


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_integer_division_matches_onnxruntime(dynamo, fold, optimize, tmp_path, signer):
    """torch's // and trunc division of int64 and int32 become ``int_div`` (ONNX Div of
    integers truncates), with the exporters' corrections for //; extremes included."""
    shape = (3, 6)
    model = export(_IntegerDivision(), [torch.randint(-9, 9, shape), torch.randint(
        -9, 9, shape, dtype=torch.int32), torch.randint(1, 9, shape)], tmp_path / "d.onnx",
        dynamo=dynamo, fold=fold, optimize=optimize, input_names=["i", "j", "d"],
        output_names=["a", "b", "c", "e", "f"])
    _, loaded = import_and_load(model, tmp_path / "d.pha", signer)
    assert "int_div" in _ops(loaded)
    rng = np.random.default_rng(12)
    low, high = np.iinfo(np.int64).min, np.iinfo(np.int64).max
    d = rng.choice(np.array([-7, -3, -2, -1, 1, 2, 3, 7, high, low + 1]), shape)
    i = rng.integers(low + 8, high - 8, shape)
    i[0, :] = [low + 7, high, -7, 7, 0, -1]
    check_against_onnxruntime(model, loaded, [
        {"i": i, "j": rng.integers(-2**31, 2**31, shape, dtype=np.int32), "d": d},
        {"i": rng.integers(-50, 50, shape), "j": np.arange(-9, 9, dtype=np.int32).reshape(shape),
         "d": np.resize(np.array([5, -5, 2, -2, 3, -3]), shape)}])


@pytest.mark.parametrize("d, message", [
    ([[2, 0, 4], [1, 1, 3]], "int_div: integer division by zero: b has 1 zero"),
    ([[2, -2, 4], [-1, 1, 3]], "int_div: -2147483648 / -1 overflows int32")])
def test_integer_div_refuses_a_zero_divisor_and_an_overflow_at_run_time(d, message, tmp_path):
    """onnxruntime refuses the zero divisor too; the overflow would trap its process, which
    the onnxruntime backend's conversion avoids (tested with it), so it is not run here."""
    model = _model(tmp_path, helper.make_node("Div", ["x", "d"], ["y"], name="node"),
                   x_shape=(2, 3), elem=TP.INT32)
    executor = Executor(import_onnx(model).graph, NumpyBackend())
    good = {"x": np.arange(-3, 3, dtype=np.int32).reshape(2, 3),
            "d": np.array([[2, -2, 4], [-4, 1, 3]], np.int32)}
    np.testing.assert_array_equal(executor.run(dict(good))["y"],
                                  onnxruntime_outputs(model, good)["y"])
    bad = {"x": good["x"].copy(), "d": np.array(d, np.int32)}
    bad["x"][1, 0] = np.iinfo(np.int32).min
    if "zero" in message:
        with pytest.raises(Exception, match="Integer division by zero"):
            onnxruntime_outputs(model, bad)
    with pytest.raises(DomainError, match=message):
        executor.run(bad)


class _ClampByTensor(torch.nn.Module):
    def forward(self, x):
        return torch.clamp(x, min=x.mean(), max=2.0), torch.clamp(x, max=x.amax(dim=(0, 1, 2)) / 2)


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_clamp_by_a_computed_bound_matches_onnxruntime(dynamo, fold, optimize, tmp_path,
                                                       signer):
    """torch.clamp with a tensor bound: the legacy exporter writes a Clip whose bound is
    computed at run time; it becomes ``max`` / ``min`` glue ops."""
    model = export(_ClampByTensor(), [torch.randn(2, 5, 3)], tmp_path / "c.onnx",
                   dynamo=dynamo, fold=fold, optimize=optimize, input_names=["x"],
                   output_names=["low", "high"])
    _, loaded = import_and_load(model, tmp_path / "c.pha", signer)
    feeds = _feeds((2, 5, 3), 3) + [{"x": np.resize(EXTREMES[:-1], (2, 5, 3))}]
    check_against_onnxruntime(model, loaded, feeds)


def _clip_model(tmp_path, inputs: list[str], bound_shape=()) -> object:
    names = ["x"] + inputs
    nodes = [helper.make_node("Clip", ["x", *[n if n in inputs else "" for n in ("lo", "hi")]],
                              ["y"], name="clip")]
    while nodes[0].input[-1] == "":
        nodes[0].input.pop()
    vis = [helper.make_tensor_value_info(n, TP.FLOAT, [2, 6] if n == "x" else list(bound_shape))
           for n in names]
    graph = helper.make_graph(nodes, "g", vis, [helper.make_tensor_value_info("y", TP.FLOAT,
                                                                                [2, 6])])
    path = tmp_path / "clip.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
                     .SerializeToString())
    return path


@pytest.mark.parametrize("inputs", [["lo", "hi"], ["lo"], ["hi"]])
def test_clip_with_run_time_bounds_matches_onnxruntime_on_both_backends(inputs, tmp_path,
                                                                        signer):
    """A lower bound above the upper one gives the upper one, and a nan bound or a nan x
    give what onnxruntime gives, on the numpy and onnxruntime backends."""
    model = _clip_model(tmp_path, inputs)
    _, loaded = import_and_load(model, tmp_path / "clip.pha", signer)
    assert {"less", "where"} <= _ops(loaded) and ("clip" in _ops(loaded)) == (len(inputs) == 1)
    x = np.array([[-np.inf, -2, -0.0, 0.0, 0.5, np.nan], [1, 2, 3, 1e30, np.inf, -1]],
                 np.float32)
    bounds = [(-1.0, 1.0), (1.0, -1.0), (np.nan, 1.0), (-1.0, np.nan), (0.0, 0.0),
              (-np.inf, np.inf)]
    feeds = [{"x": x, **{n: np.array(v, np.float32) for n, v in zip(("lo", "hi"), pair)
                         if n in inputs}} for pair in bounds]
    check_on_both_backends(model, loaded, feeds)


def test_clip_with_a_run_time_bound_of_several_values_is_refused(tmp_path):
    model = _clip_model(tmp_path, ["lo"], bound_shape=(2,))
    with pytest.raises(UnsupportedModelError, match=r"node 'clip' \(Clip\): min 'lo' "
                                                    r"\(float32, shape \[2\]\) must be one value"):
        import_onnx(model)


@pytest.mark.parametrize("bounds", [("lo", ""), ("", "hi"), ("lo", "hi"), ("", "")])
def test_a_missing_clip_bound_clamps_infinities_as_onnxruntime_does(bounds, tmp_path, signer):
    """onnxruntime fills a missing bound with the dtype's largest finite value, so an
    infinite x comes out finite there; an explicit infinite bound is no bound."""
    from plugins.onnxruntime_backend import OnnxruntimeBackend

    inits = [helper.make_tensor("lo", TP.FLOAT, [], [-np.inf]),
             helper.make_tensor("hi", TP.FLOAT, [], [np.inf])]
    inputs = ["x", *bounds]
    while inputs[-1] == "":
        inputs.pop()
    model = _model(tmp_path, helper.make_node("Clip", inputs, ["y"], name="node"),
                   inits=[t for t in inits if t.name in bounds], opset=13)
    _, loaded = import_and_load(model, tmp_path / "clip.pha", signer)
    feeds = [{"x": np.resize(EXTREMES, (4, 6))}]
    for backend in (None, OnnxruntimeBackend()):
        [(got, want)] = check_against_onnxruntime(model, loaded, feeds, backend=backend)
    assert np.isneginf(want["y"]).any() == ("lo" in bounds)
    assert np.isposinf(want["y"]).any() == ("hi" in bounds)
