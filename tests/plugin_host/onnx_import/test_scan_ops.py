"""CumSum (torch.cumsum) imported as cumsum, compared with onnxruntime; a run-time axis or an
attribute value the op does not take is refused naming the node."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import ModelFileError, UnsupportedModelError

from .conftest import (EXPORTERS, assert_refused, check_against_onnxruntime, export,
                       import_and_load, onnx, torch)

helper, TP = onnx.helper, onnx.TensorProto
RNG = np.random.default_rng(17)
BIG = np.finfo(np.float32).max


def _floats(shape):
    """Random inputs, and one with float32 extremes, infinities and nan, a partial sum that
    overflows and one that comes back (onnxruntime sums float32 in float32)."""
    feeds = [(RNG.standard_normal(shape) * 3).astype(np.float32) for _ in range(2)]
    x = RNG.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    flat[:3] = [BIG, BIG, -BIG]
    flat[RNG.choice(np.arange(3, flat.size), size=5, replace=False)] = [np.inf, -np.inf, np.nan,
                                                                       -0.0, 1e-45]
    return feeds + [x]


class _CumSum(torch.nn.Module):
    def forward(self, x, i):
        return (torch.cumsum(x, 1), torch.cumsum(x, -1), torch.cumsum(i, 0),
                torch.flip(torch.cumsum(torch.flip(x, [2]), 2), [2]))


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_torch_cumsum_matches_onnxruntime(dynamo, fold, optimize, tmp_path, signer):
    shape = (2, 4, 5)
    model = export(_CumSum(), [torch.randn(*shape), torch.randint(-9, 9, shape)],
                   tmp_path / "c.onnx", dynamo=dynamo, fold=fold, optimize=optimize,
                   input_names=["x", "i"], output_names=["y0", "y1", "y2", "y3"])
    _, loaded = import_and_load(model, tmp_path / "c.pha", signer)
    assert sum(n.op == "cumsum" for n in loaded.graph.nodes) == 4
    check_against_onnxruntime(model, loaded, [
        {"x": x, "i": RNG.integers(-2**40, 2**40, shape)} for x in _floats(shape)])


def _model(tmp_path, x_shape, axis, dtype=TP.FLOAT, attrs=None, runtime_axis=False):
    """A one-node CumSum named ``node`` over ``x``; the axis a constant unless
    ``runtime_axis``."""
    inputs = [helper.make_tensor_value_info("x", dtype, list(x_shape))]
    inits = []
    if runtime_axis:
        inputs.append(helper.make_tensor_value_info("axis", TP.INT64, []))
    else:
        inits.append(onnx.numpy_helper.from_array(np.asarray(axis), "axis"))
    node = helper.make_node("CumSum", ["x", "axis"], ["y"], name="node", **(attrs or {}))
    graph = helper.make_graph([node], "g", inputs,
                              [helper.make_tensor_value_info("y", dtype, list(x_shape))],
                              initializer=inits)
    path = tmp_path / "cumsum.onnx"
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString())
    return path


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("axis", [np.int64(1), np.array([-1], np.int32), np.int32(0)])
def test_exclusive_and_reverse_match_onnxruntime(axis, exclusive, reverse, tmp_path, signer):
    model = _model(tmp_path, (3, 6), axis, attrs={"exclusive": exclusive, "reverse": reverse})
    _, loaded = import_and_load(model, tmp_path / "c.pha", signer)
    [node] = loaded.graph.nodes
    assert (node.op, node.attrs["exclusive"], node.attrs["reverse"]) == (
        "cumsum", bool(exclusive), bool(reverse))
    check_against_onnxruntime(model, loaded, [{"x": x} for x in _floats((3, 6))])


@pytest.mark.parametrize("dtype, np_dtype", [(TP.INT32, np.int32), (TP.INT64, np.int64)])
def test_integer_cumsum_wraps_as_onnxruntime(dtype, np_dtype, tmp_path, signer):
    model = _model(tmp_path, (2, 4), np.int64(1), dtype=dtype, attrs={"reverse": 1})
    _, loaded = import_and_load(model, tmp_path / "c.pha", signer)
    top = np.iinfo(np_dtype).max
    check_against_onnxruntime(model, loaded, [
        {"x": np.array([[top, 1, top, 3], [-top, -top, 5, 0]], np_dtype)},
        {"x": RNG.integers(-1000, 1000, (2, 4)).astype(np_dtype)}])


def test_a_symbolic_batch_dim_passes_through_cumsum(tmp_path, signer):
    model = _model(tmp_path, ("n", 5), np.int64(1))
    _, loaded = import_and_load(model, tmp_path / "c.pha", signer)
    assert loaded.graph.outputs[0].shape == ("n", 5)
    check_against_onnxruntime(model, loaded, [{"x": RNG.standard_normal((n, 5))
                                               .astype(np.float32)} for n in (1, 4)])


@pytest.mark.parametrize("kw, error, message", [
    ({"axis": None, "runtime_axis": True}, UnsupportedModelError,
     "axis 'axis' must be a constant (known at import), but it is computed at run time"),
    ({"axis": np.int64(0), "attrs": {"exclusive": 2}}, UnsupportedModelError,
     "attribute exclusive=2 must be 0 or 1"),
    ({"axis": np.int64(0), "attrs": {"reverse": -1}}, UnsupportedModelError,
     "attribute reverse=-1 must be 0 or 1"),
    ({"axis": np.int64(2)}, ModelFileError, "axis 2 is out of range for rank 2"),
    ({"axis": np.array([0, 1])}, ModelFileError, "axis must be one number, got int64 of shape"),
    ({"axis": np.float32(1)}, ModelFileError, "axis must be an integer, got 1.0"),
])
def test_what_cumsum_refuses_names_node_and_value(kw, error, message, tmp_path):
    path = _model(tmp_path, (3, 4), **kw)
    assert_refused(path, error, "node 'node' (CumSum)", message)
