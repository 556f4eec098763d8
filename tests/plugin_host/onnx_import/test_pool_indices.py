"""MaxPool's Indices output (torch's max_pool with return_indices, 1 to 3 spatial axes)
imported as max_pool_with_indices plus each (n, c) plane's offset, compared with onnxruntime,
the batch static or a run-time dim, row or column major; what the mapping cannot take is refused
naming the node."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from plugin_host.errors import ModelFileError, UnsupportedModelError

from .conftest import (EXPORTERS, assert_refused, check_against_onnxruntime,
                       check_on_both_backends, export, import_and_load, onnx, torch)

helper, TP = onnx.helper, onnx.TensorProto
RNG = np.random.default_rng(29)
BIG = np.finfo(np.float32).max
pool1d, pool2d = torch.nn.functional.max_pool1d, torch.nn.functional.max_pool2d
pool3d = torch.nn.functional.max_pool3d


def _floats(shape):
    """Random inputs, a few repeated values (ties), and -inf rows with float32 extremes (no
    nan: onnxruntime's MaxPool skips one, torch and max_pool_with_indices take it)."""
    ties = RNG.choice(np.array([-1.0, 0.0, 2.0, -0.0], np.float32), size=shape)
    edges = RNG.choice(np.array([-np.inf, -np.inf, BIG, -BIG, 1e-45], np.float32), size=shape)
    return [(RNG.standard_normal(shape) * 3).astype(np.float32), ties, edges]


class _Pools(torch.nn.Module):
    def forward(self, x, s):
        a, i = pool2d(x, 2, return_indices=True)
        b, j = pool2d(x, (3, 2), (2, 1), (1, 1), dilation=(1, 2), return_indices=True)
        c, k = pool1d(s, 3, 2, 1, return_indices=True)
        return a, i, b * 2, j + 1, c, k


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_torch_max_pool_indices_match_onnxruntime(dynamo, fold, optimize, tmp_path, signer):
    shapes = {"x": (2, 3, 6, 7), "s": (2, 4, 9)}
    model = export(_Pools(), [torch.randn(*shapes["x"]), torch.randn(*shapes["s"])],
                   tmp_path / "p.onnx", dynamo=dynamo, fold=fold, optimize=optimize,
                   input_names=["x", "s"], output_names=["a", "i", "b", "j", "c", "k"])
    _, loaded = import_and_load(model, tmp_path / "p.pha", signer)
    assert sum(n.op == "max_pool_with_indices" for n in loaded.graph.nodes) >= 3
    xs, ss = _floats(shapes["x"]), _floats(shapes["s"])
    check_against_onnxruntime(model, loaded, [{"x": x, "s": s} for x, s in zip(xs, ss)])


def test_torch_max_pool_indices_with_a_run_time_batch(tmp_path, signer):
    model = tmp_path / "p.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(_Pools(), (torch.randn(2, 3, 6, 7), torch.randn(2, 4, 9)), model,
                          dynamo=False, input_names=["x", "s"],
                          output_names=["a", "i", "b", "j", "c", "k"],
                          dynamic_axes={"x": {0: "n"}, "s": {0: "n"}})
    _, loaded = import_and_load(model, tmp_path / "p.pha", signer)
    assert loaded.graph.inputs[0].shape[0] == "n"
    check_against_onnxruntime(model, loaded, [
        {"x": _floats((n, 3, 6, 7))[i], "s": _floats((n, 4, 9))[i]}
        for i, n in enumerate((1, 3, 5))])


def _model(tmp_path, shape, attrs=None, outputs=("y", "i")):
    """One MaxPool named ``node`` over ``x`` with both outputs read (kernel 2 on each spatial
    axis unless ``attrs`` say otherwise)."""
    node = helper.make_node("MaxPool", ["x"], list(outputs), name="node",
                            **{"kernel_shape": [2] * (len(shape) - 2), **(attrs or {})})
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TP.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TP.FLOAT, [None] * len(shape)),
         helper.make_tensor_value_info("i", TP.INT64, [None] * len(shape))])
    path = tmp_path / "pool.onnx"
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString())
    return path


@pytest.mark.parametrize("attrs", [{}, {"strides": [2, 1], "pads": [1, 0, 1, 1]},
                                   {"dilations": [2, 1], "strides": [1, 2]}])
def test_onnx_max_pool_indices_with_a_run_time_batch_match_onnxruntime(attrs, tmp_path,
                                                                       signer):
    model = _model(tmp_path, ("n", 2, 5, 6), attrs)
    _, loaded = import_and_load(model, tmp_path / "p.pha", signer)
    check_against_onnxruntime(model, loaded, [{"x": x} for n in (1, 4)
                                              for x in _floats((n, 2, 5, 6))])


class _Pools3d(torch.nn.Module):
    def forward(self, x):
        a, i = pool3d(x, 2, return_indices=True)
        b, j = pool3d(x, (3, 2, 3), (2, 1, 2), (1, 1, 0), dilation=(1, 2, 1), ceil_mode=True,
                      return_indices=True)
        c, k = torch.nn.MaxPool3d((2, 3, 2), 1, (1, 1, 0), return_indices=True)(x)
        return a, i, b * 2, j + 1, c, k


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_torch_max_pool3d_indices_match_onnxruntime(dynamo, fold, optimize, tmp_path, signer):
    """3 spatial axes: the index within each (n, c) volume, (d * H + h) * W + w."""
    shape = (2, 3, 5, 6, 7)
    model = export(_Pools3d(), [torch.randn(*shape)], tmp_path / "p.onnx", dynamo=dynamo,
                   fold=fold, optimize=optimize, input_names=["x"],
                   output_names=["a", "i", "b", "j", "c", "k"])
    _, loaded = import_and_load(model, tmp_path / "p.pha", signer)
    assert sum(n.op == "max_pool_with_indices" for n in loaded.graph.nodes) >= 3
    check_against_onnxruntime(model, loaded, [{"x": x} for x in _floats(shape)])


def test_torch_max_pool3d_indices_with_a_run_time_batch(tmp_path, signer):
    model = tmp_path / "p.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(_Pools3d(), (torch.randn(2, 3, 5, 6, 7),), model, dynamo=False,
                          input_names=["x"], output_names=["a", "i", "b", "j", "c", "k"],
                          dynamic_axes={"x": {0: "n"}})
    _, loaded = import_and_load(model, tmp_path / "p.pha", signer)
    assert loaded.graph.inputs[0].shape[0] == "n"
    check_against_onnxruntime(model, loaded, [
        {"x": _floats((n, 3, 5, 6, 7))[i]} for i, n in enumerate((1, 3, 4))])


@pytest.mark.parametrize("attrs", [{}, {"strides": [2, 1, 2], "pads": [1, 0, 1, 1, 1, 0]},
                                   {"kernel_shape": [3, 2, 2], "dilations": [1, 2, 1],
                                    "ceil_mode": 1, "strides": [2, 2, 1]}])
def test_onnx_max_pool3d_indices_with_a_run_time_batch_match_onnxruntime(attrs, tmp_path,
                                                                         signer):
    model = _model(tmp_path, ("n", 2, 4, 5, 6), attrs)
    _, loaded = import_and_load(model, tmp_path / "p.pha", signer)
    check_against_onnxruntime(model, loaded, [{"x": x} for n in (1, 3)
                                              for x in _floats((n, 2, 4, 5, 6))])


@pytest.mark.parametrize("shape, attrs", [
    ((2, 2, 9), {"kernel_shape": [3], "strides": [2]}),
    (("n", 2, 5, 6), {"strides": [2, 1], "pads": [1, 0, 1, 1]}),
    ((1, 2, 4, 5, 6), {"strides": [2, 2, 1], "dilations": [1, 2, 1]}),
], ids=["1d", "2d-run-time-batch", "3d"])
def test_column_major_indices_match_onnxruntime(shape, attrs, tmp_path, signer):
    """storage_order=1: each index is the column-major position in its (n, c) plane (the
    first spatial axis varying fastest), plus the plane's offset, on both backends."""
    model = _model(tmp_path, shape, {**attrs, "storage_order": 1})
    _, loaded = import_and_load(model, tmp_path / "p.pha", signer)
    sizes = [tuple(n if d == "n" else d for d in shape) for n in (1, 3)]
    check_on_both_backends(model, loaded, [{"x": x} for s in sizes for x in _floats(s)])


def test_column_major_order_of_unread_indices_is_taken(tmp_path, signer):
    """Only the Indices output depends on it: unread, the pool builds as max_pool."""
    model = _model(tmp_path, (1, 2, 4, 4), {"storage_order": 1})
    m = onnx.load(model)
    del m.graph.output[1]
    onnx.save(m, model)
    _, loaded = import_and_load(model, tmp_path / "p.pha", signer)
    assert [n.op for n in loaded.graph.nodes] == ["max_pool"]


@pytest.mark.parametrize("shape, attrs, message", [
    ((1, "c", 4, 4), {}, "input shape [1, 'c', 4, 4]: MaxPool indices need the channel and "
                         "spatial dims static"),
    ((1, 2, 3, "h", 4), {}, "input shape [1, 2, 3, 'h', 4]: MaxPool indices need the channel "
                            "and spatial dims static"),
    ((1, 2, 4, 4), {"storage_order": 2}, "attribute storage_order=2 must be 0 (row major) or 1 "
                                         "(column major)"),
])
def test_what_max_pool_indices_refuse_names_node_and_value(shape, attrs, message, tmp_path):
    error = ModelFileError if "storage_order" in attrs else UnsupportedModelError
    assert_refused(_model(tmp_path, shape, attrs), error, "node 'node' (MaxPool)", message)
