"""CumProd (opset 26) imported as ``cumprod``: hand-written one-node models compared bit for
bit with onnxruntime running CumProd itself, on both backends (the onnxruntime backend builds
its models at an opset without CumProd and scans a Mul instead), over exclusive and reverse,
a negative axis and axis 0, float32 with nan, infinities, -0.0, denormals and products that
overflow to inf in sequential order, int32 and int64 products that wrap, and a run-time batch
dim; a run-time axis, or one out of range, is refused naming the node."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import ModelFileError, UnsupportedModelError
from plugin_host.executor import Executor
from plugins.numpy_backend import NumpyBackend
from plugins.onnxruntime_backend import OnnxruntimeBackend

from .conftest import (assert_refused, check_on_both_backends, import_and_load, onnx,
                       onnxruntime_outputs)
from .test_scan_ops import _model as _scan_model

helper, TP = onnx.helper, onnx.TensorProto
RNG = np.random.default_rng(26)
BIG = np.finfo(np.float32).max


def _model(tmp_path, x_shape, axis, dtype=TP.FLOAT, attrs=None, runtime_axis=False):
    """A one-node CumProd named ``node`` over ``x``, opset 26 (as CumSum's tests build it)."""
    return _scan_model(tmp_path, x_shape, axis, dtype, attrs, runtime_axis, op="CumProd",
                       opset=26)


#: nan, infinities, signed zeros, float32 extremes (products that overflow to inf, where a
#: later factor would bring them back), denormals (that underflow to 0) and ordinary factors
SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, BIG, -BIG, 1e30, -1e20, 1e-30, 1e-45,
                    2.0, -0.5, 1.5, 0.01, -3.0], np.float32)


def _floats(shape) -> list[dict[str, np.ndarray]]:
    """Feeds of x (a shape of 8 elements or more): a random one, three drawn from
    :data:`SPECIAL`, and a random one with a few of them spread in."""
    xs = [(RNG.standard_normal(shape) * 2).astype(np.float32)]
    xs += [RNG.choice(SPECIAL, shape) for _ in range(3)]
    x = (RNG.standard_normal(shape) * 2).astype(np.float32)
    flat = x.reshape(-1)
    flat[:3] = [BIG, 10.0, 0.01]  # along the last axis inf, inf (in float64: back to 3e37)
    flat[RNG.choice(np.arange(3, flat.size), size=4, replace=False)] = [np.nan, -np.inf,
                                                                        -0.0, 1e-45]
    return [{"x": x} for x in xs + [x]]


def _assert_bits(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Same dtype, shape and bits, -0.0 and infinities included; nan exactly where want has
    nan (a nan's sign, which IEEE leaves open, is not compared: onnxruntime's CumProd and Mul
    and numpy's multiply each take it from either nan operand of a product, by their vector
    lanes)."""
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.shape, want.shape)
    nan = np.isnan(want) if want.dtype.kind == "f" else np.zeros(want.shape, bool)
    np.testing.assert_array_equal(np.isnan(got) if got.dtype.kind == "f" else nan, nan,
                                  err_msg=what)
    np.testing.assert_array_equal(got[~nan].view(f"u{got.itemsize}"),
                                  want[~nan].view(f"u{want.itemsize}"), err_msg=what)


def _bit_for_bit_on_both_backends(model, loaded, feeds):
    """Every output of the loaded artifact, on each backend, is onnxruntime's (running the
    ONNX model, CumProd and all) bit for bit; and within the artifact's tolerance (the
    project's check)."""
    check_on_both_backends(model, loaded, feeds)
    for backend in (NumpyBackend(), OnnxruntimeBackend()):
        executor = Executor(loaded.graph, backend)
        for i, feed in enumerate(feeds):
            got = executor.run(dict(feed))
            for name, want in onnxruntime_outputs(model, feed).items():
                _assert_bits(got[name], want, f"{type(backend).__name__}, feed {i}: {name}")


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("axis", [np.int64(1), np.int64(-1), np.int32(0), np.int32(-3)])
def test_exclusive_and_reverse_match_onnxruntime_bit_for_bit(axis, exclusive, reverse,
                                                             tmp_path, signer):
    shape = (3, 4, 6)
    model = _model(tmp_path, shape, axis, attrs={"exclusive": exclusive, "reverse": reverse})
    _, loaded = import_and_load(model, tmp_path / "c.pha", signer)
    [node] = loaded.graph.nodes
    assert (node.op, node.attrs["axis"], node.attrs["exclusive"], node.attrs["reverse"]) == (
        "cumprod", int(axis), bool(exclusive), bool(reverse))
    _bit_for_bit_on_both_backends(model, loaded, _floats(shape))


def test_products_overflow_in_sequential_order_as_onnxruntime(tmp_path, signer):
    """float32 multiplied in float32 from the first element on: an overflow to inf stays (a
    product in float64 would come back), inf * 0 is nan, denormals underflow to signed 0."""
    model = _model(tmp_path, (5, 4), np.int64(-1))
    _, loaded = import_and_load(model, tmp_path / "c.pha", signer)
    x = np.array([[BIG, 10, 0.01, 1], [BIG, -BIG, 0, 2], [1e-45, 0.5, 1e30, 1e10],
                  [-0.0, 3, -1, -1], [1e20, 1e20, 1e-20, 1e-20]], np.float32)
    want = onnxruntime_outputs(model, {"x": x})["y"]
    assert (want[0, 1:] == np.inf).all() and want[1, 1] == -np.inf and np.isnan(want[1, 2:]).all()
    assert want[2, 1] == 0 and np.signbit(want[3, 3]) and (want[4, 1:] == np.inf).all()
    _bit_for_bit_on_both_backends(model, loaded, [{"x": x}, {"x": -x}])


@pytest.mark.parametrize("dtype, np_dtype", [(TP.INT32, np.int32), (TP.INT64, np.int64)])
@pytest.mark.parametrize("exclusive, reverse", [(0, 0), (1, 1)])
def test_integer_products_wrap_as_onnxruntime(dtype, np_dtype, exclusive, reverse, tmp_path,
                                              signer):
    model = _model(tmp_path, (3, 6), np.int64(1), dtype=dtype,
                   attrs={"exclusive": exclusive, "reverse": reverse})
    _, loaded = import_and_load(model, tmp_path / "c.pha", signer)
    info = np.iinfo(np_dtype)
    edges = np.array([[info.max, 3, info.max, -7, 5, 2], [info.min, -1, 9, 11, 0, 13],
                      [2**20, 2**20, 2**20, 2**20, -3, 7]], np_dtype)
    feeds = [{"x": edges}, {"x": RNG.integers(info.min, info.max, (3, 6), np_dtype, True)},
             {"x": RNG.integers(-1000, 1000, (3, 6)).astype(np_dtype)}]
    # onnxruntime's products are the low bits of the exact ones (Python's integers)
    ordered = edges[:, ::-1] if reverse else edges
    exact = [[1] for _ in ordered]
    for row, out in zip(ordered, exact):
        for v in row:
            out.append(out[-1] * int(v))
    exact = np.array([out[:-1] if exclusive else out[1:] for out in exact], object)
    wrapped = ((exact - info.min) % 2**info.bits + info.min).astype(np_dtype)
    want = onnxruntime_outputs(model, feeds[0])["y"]
    np.testing.assert_array_equal(want, wrapped[:, ::-1] if reverse else wrapped)
    assert (wrapped != exact).any()  # some wrapped
    _bit_for_bit_on_both_backends(model, loaded, feeds)


def test_a_symbolic_batch_dim_passes_through_cumprod(tmp_path, signer):
    """A run-time batch dim beside the axis, and as the axis itself (exclusive, reverse)."""
    for axis, attrs in ((np.int64(1), {}), (np.int64(0), {"exclusive": 1, "reverse": 1})):
        model = _model(tmp_path, ("n", 5), axis, attrs=attrs)
        _, loaded = import_and_load(model, tmp_path / "c.pha", signer)
        assert loaded.graph.outputs[0].shape == ("n", 5)
        feeds = [{"x": RNG.choice(SPECIAL, (n, 5))} for n in (1, 4, 7) for _ in range(2)]
        _bit_for_bit_on_both_backends(model, loaded, feeds)


@pytest.mark.parametrize("kw, error, message", [
    ({"axis": None, "runtime_axis": True}, UnsupportedModelError,
     "axis 'axis' must be a constant (known at import), but it is computed at run time"),
    ({"axis": np.int64(2)}, ModelFileError, "axis 2 is out of range for rank 2"),
    ({"axis": np.int32(-3)}, ModelFileError, "axis -3 is out of range for rank 2"),
    ({"axis": np.int64(0), "attrs": {"exclusive": 2}}, UnsupportedModelError,
     "attribute exclusive=2 must be 0 or 1"),
    ({"axis": np.int64(0), "attrs": {"reverse": -1}}, UnsupportedModelError,
     "attribute reverse=-1 must be 0 or 1"),
])
def test_what_cumprod_refuses_names_node_and_value(kw, error, message, tmp_path):
    assert_refused(_model(tmp_path, (3, 4), **kw), error, "node 'node' (CumProd)", message)
