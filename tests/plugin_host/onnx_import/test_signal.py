"""Compress of a constant condition and the window functions imported onto glue ops and
compared with onnxruntime: hand-built models of every attribute variant, and torch's dynamo
export of hann_window. The windows are onnxruntime's bit for bit. Run-time sizes and
conditions, and values over the tensor cap are refused naming the node."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import ModelFileError, UnsupportedModelError
from plugin_host.onnx_import import ReadLimits, import_onnx
from plugin_host.onnx_import.signal import window

from .conftest import (assert_refused, check_against_onnxruntime, export, import_and_load,
                       onnx, onnxruntime_outputs, torch)

helper, TP = onnx.helper, onnx.TensorProto
RNG = np.random.default_rng(17)


def _save(tmp_path, nodes, inputs, outputs, inits=(), *, opset: int = 20, name: str = "m"):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString())
    return path


def _vi(name, shape, dtype=TP.FLOAT):
    """A value info; ``shape`` an int is a rank, its dims left to the import."""
    if isinstance(shape, int):
        shape = [f"{name}{i}" for i in range(shape)]
    return helper.make_tensor_value_info(name, dtype, list(shape))


def _int(name, value, dtype=np.int64):
    return onnx.numpy_helper.from_array(np.asarray(value, dtype), name)


def _ops(loaded) -> list[str]:
    return [n.op for n in loaded.graph.nodes]


def _onnxruntime_refuses(model, feed) -> None:
    with pytest.raises(Exception) as info:
        onnxruntime_outputs(model, feed)
    assert type(info.value).__module__.startswith("onnxruntime"), info.value


# --- Compress ------------------------------------------------------------------------------------


def _compress_model(tmp_path, shape, condition, *, axis=None, const_input=False, x=None,
                    name="c"):
    """y = Compress(x, cond) or, with ``const_input``, x + Compress(data, cond) (data of
    ``shape``, x of shape ``x``)."""
    attrs = {} if axis is None else {"axis": axis}
    cond = onnx.numpy_helper.from_array(np.asarray(condition, bool), "cond")
    inits = [cond]
    inputs = [_vi("x", x or shape)]
    if const_input:
        inits.append(onnx.numpy_helper.from_array(
            np.arange(np.prod(shape), dtype=np.float32).reshape(shape), "data"))
        nodes = [helper.make_node("Compress", ["data", "cond"], ["k"], name="node", **attrs),
                 helper.make_node("Add", ["x", "k"], ["y"], name="add")]
    else:
        nodes = [helper.make_node("Compress", ["x", "cond"], ["y"], name="node", **attrs)]
    rank = len(x) if x else 1 if axis is None else len(shape)
    return _save(tmp_path, nodes, inputs, [_vi("y", rank)], inits, opset=18, name=name)


@pytest.mark.parametrize("axis, condition", [
    (0, [1, 0, 1]), (1, [0, 1, 1, 0]), (-1, [1, 1, 0, 0, 0]), (2, [1]),
    (1, [1, 0]),                       # shorter than the axis: the rest dropped
    (0, [0, 1, 1, 1, 0, 1]),           # longer: entries past the dim ignored, as onnxruntime
    (1, [1, 1, 1, 1]), (None, [1, 0, 0, 1, 1, 0, 1]), (None, [0] * 59 + [1])])
def test_compress_of_a_constant_condition_matches_onnxruntime(axis, condition, tmp_path,
                                                               signer):
    shape = (3, 4, 5)
    model = _compress_model(tmp_path, shape, condition, axis=axis)
    _, loaded = import_and_load(model, tmp_path / "c.pha", signer)
    assert "gather" in _ops(loaded) and ("reshape" in _ops(loaded)) == (axis is None)
    feeds = [{"x": RNG.standard_normal(shape).astype(np.float32)} for _ in range(2)]
    feeds[1]["x"].reshape(-1)[:3] = [np.nan, np.inf, -0.0]
    check_against_onnxruntime(model, loaded, feeds)


def test_compress_with_a_run_time_batch_matches_onnxruntime(tmp_path, signer):
    model = _compress_model(tmp_path, ("n", 6), [1, 0, 0, 1, 1], axis=1)
    _, loaded = import_and_load(model, tmp_path / "c.pha", signer)
    check_against_onnxruntime(model, loaded, [{"x": RNG.standard_normal((n, 6)).astype(
        np.float32)} for n in (1, 4)])


@pytest.mark.parametrize("axis, shape, condition, out", [(None, (2, 3), [0, 1, 0, 0, 1], (2,)),
                                                      (1, (2, 3), [1, 0, 1], (2, 2))])
def test_compress_of_a_constant_input_is_folded(axis, shape, condition, out, tmp_path, signer):
    model = _compress_model(tmp_path, shape, condition, axis=axis, const_input=True, x=out)
    _, loaded = import_and_load(model, tmp_path / "c.pha", signer)
    assert _ops(loaded) == ["add"]
    check_against_onnxruntime(model, loaded, [{"x": RNG.standard_normal(out).astype(
        np.float32)}])


def test_compress_refusals_name_the_node(tmp_path):
    runtime = _save(tmp_path, [helper.make_node("Compress", ["x", "c"], ["y"], name="node",
                                                axis=0)],
                    [_vi("x", (3, 4)), _vi("c", (3,), TP.BOOL)], [_vi("y", 2)], opset=18)
    assert_refused(runtime, UnsupportedModelError, "node 'node' (Compress)",
                   "condition 'c' is computed at run time: the output's shape would depend on "
                   "its values")
    assert_refused(_compress_model(tmp_path, (3, 4), [0, 0, 0], axis=0),
                   UnsupportedModelError, "node 'node' (Compress)",
                   "condition 'cond' keeps nothing: an empty output is not supported")
    assert_refused(_compress_model(tmp_path, ("n", 4), [1, 0], axis=0), UnsupportedModelError,
                   "node 'node' (Compress)", "axis 0 of input shape ['n', 4] is a run-time dim")
    assert_refused(_compress_model(tmp_path, ("n", 4), [1, 0]), UnsupportedModelError,
                   "node 'node' (Compress)", "Compress without an axis flattens the input, "
                   "which needs every dim static")
    assert_refused(_compress_model(tmp_path, (3, 4), [1, 0], axis=2), ModelFileError,
                   "node 'node' (Compress)", "axis 2 is out of range for rank 2")


# --- window functions ----------------------------------------------------------------------------

WINDOWS = ["HannWindow", "HammingWindow", "BlackmanWindow"]


def _window_model(tmp_path, op, size, *, size_input=False, dtype=TP.FLOAT, n=None, **attrs):
    """y = x * op(size): x of the window's length unless ``n`` (a window alone has no graph
    input)."""
    n = n or (size if size > 0 else 1)
    inits = [] if size_input else [_int("size", size, np.int32 if size == 7 else np.int64)]
    inputs = [_vi("x", (n,), dtype)] + ([_vi("size", (), TP.INT64)] if size_input else [])
    nodes = [helper.make_node(op, ["size"], ["w"], name="node", **attrs),
             helper.make_node("Mul", ["x", "w"], ["y"], name="mul")]
    return _save(tmp_path, nodes, inputs, [_vi("y", 1, dtype)], inits, opset=17)


@pytest.mark.parametrize("size", [1, 2, 5, 7, 16, 63, 400])
@pytest.mark.parametrize("periodic", [None, 0, 1])
@pytest.mark.parametrize("op", WINDOWS)
def test_windows_are_onnxruntimes_bit_for_bit(op, periodic, size, tmp_path, signer):
    attrs = {} if periodic is None else {"periodic": periodic}
    model = _window_model(tmp_path, op, size, **attrs)
    _, loaded = import_and_load(model, tmp_path / "w.pha", signer)
    assert _ops(loaded) == ["mul"]
    x = np.ones(size, np.float32)
    [got] = check_against_onnxruntime(model, loaded, [{"x": x}])
    np.testing.assert_array_equal(got[0]["y"], got[1]["y"])  # nan (size 1, symmetric) too


@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("op", WINDOWS)
def test_windows_of_output_datatype_float64_and_int32_are_onnxruntimes(op, periodic, tmp_path):
    """The folded value itself (the numpy backend has no float64): onnxruntime's window of
    the same node, bit for bit."""
    for code, dtype in ((TP.DOUBLE, np.float64), (TP.INT32, np.int32)):
        node = helper.make_node(op, ["size"], ["y"], output_datatype=code, periodic=periodic)
        model = _save(tmp_path, [node], [_vi("size", (), TP.INT64)], [_vi("y", 1, code)],
                      opset=17)
        for n in (1, 2, 9, 100):
            if n == 1 and not periodic and code == TP.INT32:
                continue  # nan: refused (test_window_refusals_name_the_node)
            want = onnxruntime_outputs(model, {"size": np.array(n, np.int64)})["y"]
            got = window(op, np.array(n, np.int64), {"output_datatype": code,
                                                     "periodic": periodic}, 1 << 20)
            assert got.dtype == want.dtype == dtype
            np.testing.assert_array_equal(got, want)


class _Hann(torch.nn.Module):
    def __init__(self, periodic: bool | None) -> None:
        super().__init__()
        self.periodic = periodic

    def forward(self, x):
        if self.periodic is None:
            return x * torch.hann_window(12)
        return x * torch.hann_window(12, periodic=self.periodic)


@pytest.mark.parametrize("periodic", [None, True, False])
def test_torch_hann_window_from_the_dynamo_exporter_matches_onnxruntime(periodic, tmp_path,
                                                                       signer):
    """Unoptimized, the dynamo exporter writes torch.hann_window(n) as HannWindow, bit for bit
    onnxruntime's here; with ``periodic`` given, as Range and Cos (glue ops, within the
    tolerance). hamming_window and blackman_window do not export under dynamo."""
    model = export(_Hann(periodic), (torch.randn(3, 12),), tmp_path / "w.onnx", dynamo=True,
                   fold=False, optimize=False, input_names=["x"])
    written = "HannWindow" in {n.op_type for n in onnx.load(model).graph.node}
    assert written == (periodic is None)
    _, loaded = import_and_load(model, tmp_path / "w.pha", signer)
    [(got, want)] = check_against_onnxruntime(model, loaded,
                                              [{"x": np.ones((3, 12), np.float32)}])
    [name] = want
    if written:
        np.testing.assert_array_equal(got[name], want[name])
    window_ = torch.hann_window(12, periodic=periodic is not False).numpy()
    np.testing.assert_allclose(got[name][0], window_, atol=1e-6)


@pytest.mark.parametrize("op", WINDOWS)
def test_window_refusals_name_the_node(op, tmp_path):
    assert_refused(_window_model(tmp_path, op, 4, size_input=True), UnsupportedModelError,
                   f"node 'node' ({op})", "is supported only on constant inputs (folded at "
                   "import), but ['size'] are computed at run time")
    assert_refused(_window_model(tmp_path, op, 0), ModelFileError, f"node 'node' ({op})",
                   "size 0: a window needs a size >= 1")
    assert_refused(_window_model(tmp_path, op, 1, dtype=TP.INT64, output_datatype=TP.INT64,
                                 periodic=0), ModelFileError, f"node 'node' ({op})",
                   "a symmetric window of size 1 is nan (0 / 0), which int64 cannot hold")
    with pytest.raises(ModelFileError) as info:
        import_onnx(_window_model(tmp_path, op, 64, n=1),
                    limits=ReadLimits(max_tensor_elements=50))
    assert f"node 'node' ({op})" in str(info.value) and "above the cap of 50" in str(info.value)
