"""AveragePool with ``dilations`` (opset 19) imported as ``avg_pool`` with ``dilation``,
compared with onnxruntime on both backends over 1, 2 and 3 spatial axes, padding, strides,
ceil_mode and count_include_pad; a dilated AveragePool with ``auto_pad`` SAME stays refused.
The ABI op checks its ``dilation`` as max_pool's, and an ``avg_pool`` without it (as every
artifact written before it) stores and runs as before."""

from __future__ import annotations

import numpy as np
import pytest

from abi import TensorType, get_op, infer_shapes, normalize_attrs
from abi.errors import ContractError, OpError, ShapeError
from plugin_host.builder import GraphBuilder
from plugin_host.errors import UnsupportedModelError
from plugin_host.executor import Executor
from plugin_host.graph import Graph
from plugins.numpy_backend import NumpyBackend
from plugins.onnxruntime_backend import OnnxruntimeBackend

from .conftest import (assert_refused, check_on_both_backends, import_and_load, onnx,
                       onnxruntime_outputs)

helper, TP = onnx.helper, onnx.TensorProto
RNG = np.random.default_rng(53)


def _average_pool(path, shape, opset=19, **attrs):
    """One AveragePool named ``pool`` over ``x`` of ``shape``, saved to ``path``."""
    graph = helper.make_graph(
        [helper.make_node("AveragePool", ["x"], ["y"], name="pool", **attrs)], "g",
        [helper.make_tensor_value_info("x", TP.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TP.FLOAT, [None] * len(shape))])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), path)
    return path


def _feeds(shape, count=3):
    return [{"x": (RNG.standard_normal(shape) * 3).astype(np.float32)} for _ in range(count)]


# (x shape, kernel, strides, pads (ONNX order: begins, then ends), dilations)
CASES = [
    ((2, 3, 11), [3], [1], [1, 1], [2]),
    ((1, 2, 12), [2], [3], [1, 0], [4]),
    ((1, 2, 9, 10), [3, 3], [1, 1], [1, 1, 1, 1], [2, 2]),
    ((2, 2, 10, 9), [3, 2], [2, 1], [1, 0, 1, 1], [2, 3]),
    ((1, 3, 11, 12), [4, 3], [2, 3], [2, 1, 1, 1], [3, 2]),
    ((1, 2, 7, 8, 9), [3, 2, 3], [2, 1, 2], [1, 1, 0, 1, 0, 1], [2, 3, 1]),
]


@pytest.mark.parametrize("ceil", [0, 1])
@pytest.mark.parametrize("include", [0, 1])
@pytest.mark.parametrize("shape, kernel, strides, pads, dilations", CASES,
                         ids=[f"{len(c[1])}d-{i}" for i, c in enumerate(CASES)])
@pytest.mark.parametrize("opset", [19, 22])
def test_dilated_average_pool_matches_onnxruntime(opset, shape, kernel, strides, pads,
                                                  dilations, include, ceil, tmp_path, signer):
    model = _average_pool(tmp_path / "p.onnx", shape, opset, kernel_shape=kernel,
                          strides=strides, pads=pads, dilations=dilations, ceil_mode=ceil,
                          count_include_pad=include)
    _, loaded = import_and_load(model, tmp_path / "p.pha", signer)
    [node] = loaded.graph.nodes
    spatial = len(kernel)
    assert node.op == "avg_pool"
    assert list(node.attrs["dilation"]) == dilations
    assert [list(p) for p in node.attrs["padding"]] == [[pads[i], pads[i + spatial]]
                                                        for i in range(spatial)]
    assert node.attrs["count_include_pad"] is bool(include)
    assert node.attrs["ceil_mode"] is bool(ceil)
    check_on_both_backends(model, loaded, _feeds(shape))


@pytest.mark.parametrize("include", [0, 1])
def test_a_window_whose_taps_all_miss_the_input_is_zero_on_both_backends(include, tmp_path,
                                                                         signer):
    """kernel 2, dilation 3, padding 1 over a width of 2: the last window's taps are both
    padding; onnxruntime gives 0 there, not nan, and so do both backends."""
    model = _average_pool(tmp_path / "p.onnx", (1, 2, 4, 2), kernel_shape=[2, 2],
                          pads=[0, 1, 0, 1], dilations=[1, 3], count_include_pad=include)
    _, loaded = import_and_load(model, tmp_path / "p.pha", signer)
    feeds = _feeds((1, 2, 4, 2))
    want = onnxruntime_outputs(model, feeds[0])["y"]
    assert want.shape == (1, 2, 3, 1) and not want.any()
    check_on_both_backends(model, loaded, feeds)


def test_same_padding_with_dilations_stays_refused_explicit_pads_import(tmp_path, signer):
    """onnxruntime pads a dilated pool with SAME_* by its undilated kernel, against the ONNX
    spec: refused naming the node; the same pool with explicit pads imports."""
    refused = _average_pool(tmp_path / "same.onnx", (1, 2, 8, 9), auto_pad="SAME_UPPER",
                            kernel_shape=[3, 3], dilations=[2, 2])
    assert_refused(refused, UnsupportedModelError, "node 'pool' (AveragePool)",
                   "auto_pad=SAME_UPPER with dilations [2, 2]: onnxruntime pads a dilated pool "
                   "by its undilated kernel, ONNX by the dilated one; give explicit pads")
    model = _average_pool(tmp_path / "p.onnx", (1, 2, 8, 9), kernel_shape=[3, 3],
                          pads=[1, 1, 1, 1], dilations=[2, 2], count_include_pad=1)
    _, loaded = import_and_load(model, tmp_path / "p.pha", signer)
    assert loaded.graph.nodes[0].attrs["dilation"] == (2, 2)
    check_on_both_backends(model, loaded, _feeds((1, 2, 8, 9)))


def test_undilated_average_pool_stores_no_dilation(tmp_path, signer):
    """dilations of ones (or none) import as before: ``dilation`` at its default (None), left
    out of the artifact's stored attributes, as artifacts written before it have them."""
    model = _average_pool(tmp_path / "p.onnx", (1, 2, 7, 8), kernel_shape=[3, 2],
                          strides=[2, 1], pads=[1, 0, 1, 1], dilations=[1, 1], ceil_mode=1)
    _, loaded = import_and_load(model, tmp_path / "p.pha", signer)
    [node] = loaded.graph.nodes
    assert node.attrs["dilation"] is None
    [stored] = loaded.graph.to_dict()["nodes"]
    assert "dilation" not in stored["attrs"]
    check_on_both_backends(model, loaded, _feeds((1, 2, 7, 8)))


def _avg_pool_graph(x_shape, **attrs):
    b = GraphBuilder("avg_pool")
    b.output(b.op("avg_pool", b.input("x", x_shape, "float32", "ANY"), name="node", **attrs),
             "y", "ANY")
    return b.build()


def test_an_avg_pool_written_without_dilation_loads_and_runs_as_dilation_one():
    """A graph description without ``dilation`` (every artifact before it) rebuilds, keeps
    that form, and gives on both backends what an explicit dilation of ones gives."""
    attrs = dict(kernel_size=[3, 2], stride=[2, 1], padding=[[1, 1], [0, 1]], ceil_mode=True,
                 count_include_pad=False)
    old = _avg_pool_graph((2, 3, 7, 6), **attrs).to_dict()
    assert "dilation" not in old["nodes"][0]["attrs"]
    rebuilt = Graph.from_dict(old, {})
    assert rebuilt.to_dict() == old
    ones = _avg_pool_graph((2, 3, 7, 6), dilation=[1, 1], **attrs)
    assert ones.to_dict()["nodes"][0]["attrs"]["dilation"] == [1, 1]
    feed = {"x": RNG.standard_normal((2, 3, 7, 6)).astype(np.float32)}
    want = Executor(ones, NumpyBackend()).run(feed)["y"]
    for backend in (NumpyBackend(), OnnxruntimeBackend()):
        np.testing.assert_allclose(Executor(rebuilt, backend).run(feed)["y"], want,
                                   rtol=1e-6, atol=1e-6)


def _pooled_len(size, k, s, pb, pa, d, ceil):
    """torch's pooled length over the window d * (k - 1) + 1 wide (ceil_mode: rounded up
    unless the last window would start in the trailing padding)."""
    span = size + pb + pa - d * (k - 1) - 1
    n = (-(-span // s) if ceil else span // s) + 1
    return n - 1 if ceil and (n - 1) * s >= size + pb else n


def test_dilated_avg_pool_on_the_onnxruntime_backend_matches_numpy():
    """The ABI op on the onnxruntime backend (AveragePool with dilations) against the numpy
    backend: seeded random 1-D, 2-D and 3-D configurations, both flags, at least 60 valid."""
    rng = np.random.default_rng(59)
    checked = 0
    for _ in range(150):
        spatial = int(rng.integers(1, 4))
        size = [int(rng.integers(2, 10)) for _ in range(spatial)]
        kernel = [int(rng.integers(1, min(s, 4) + 1)) for s in size]
        attrs = dict(kernel_size=kernel, stride=[int(rng.integers(1, 4)) for _ in size],
                     padding=[[int(rng.integers(0, k // 2 + 1)) for _ in range(2)]
                              for k in kernel], dilation=[int(rng.integers(1, 4)) for _ in size],
                     ceil_mode=bool(rng.integers(2)), count_include_pad=bool(rng.integers(2)))
        if min(_pooled_len(*a, attrs["ceil_mode"]) for a in zip(
                size, kernel, attrs["stride"], *zip(*attrs["padding"]), attrs["dilation"])) < 1:
            continue  # the dilated window is larger than the padded input
        graph = _avg_pool_graph((1, 2, *size), **attrs)
        feed = {"x": rng.standard_normal((1, 2, *size)).astype(np.float32)}
        want = Executor(graph, NumpyBackend()).run(feed)["y"]
        executor = Executor(graph, OnnxruntimeBackend())
        assert executor.whole_graph
        np.testing.assert_allclose(executor.run(feed)["y"], want, rtol=1e-5, atol=1e-6,
                                   err_msg=str(attrs))
        checked += 1
    assert checked >= 60, checked


F32 = "float32"


@pytest.mark.parametrize("dilation, error, text", [
    ([0, 1], OpError, "attribute 'dilation' must have every entry >= 1, got [0, 1]"),
    ([2, -1], OpError, "attribute 'dilation' must have every entry >= 1, got [2, -1]"),
    ([2], ContractError, "avg_pool: attribute 'dilation' has 1 entries but x shape "
                         "(1, 2, 9, 9) has 2 spatial axes and needs 2"),
    ([1, 2, 1], ContractError, "avg_pool: attribute 'dilation' has 3 entries"),
    ([], OpError, "attribute 'dilation' must"),
])
def test_a_bad_dilation_is_a_typed_error_naming_the_attribute(dilation, error, text):
    attrs = {"kernel_size": [3, 3], "stride": [1, 1], "padding": [[1, 1], [1, 1]],
             "dilation": dilation}
    with pytest.raises(error) as info:
        infer_shapes(get_op("avg_pool"), [TensorType((1, 2, 9, 9), F32)], attrs)
    assert type(info.value) is error
    message = str(info.value)
    assert text in message and "unknown" not in message, message
    if error is ContractError:
        assert info.value.context["attribute"] == "dilation"
    else:
        assert any("'dilation'" in p for p in info.value.context["problems"])


def test_avg_pool_s_output_length_takes_the_dilated_window():
    """floor((L + pads - d * (k - 1) - 1) / s) + 1, the window d * (k - 1) + 1 wide; too wide
    a window for the padded input is a ShapeError naming it."""
    op, x = get_op("avg_pool"), [TensorType((1, 2, 11, 9), F32)]
    attrs = {"kernel_size": [3, 2], "stride": [2, 1], "padding": [[1, 0], [0, 1]],
             "dilation": [3, 4], "ceil_mode": True}
    assert normalize_attrs(op, attrs)["dilation"] == (3, 4)
    assert infer_shapes(op, x, attrs) == [TensorType((1, 2, 4, 6), F32)]
    assert infer_shapes(op, x, {**attrs, "ceil_mode": False}) == [TensorType((1, 2, 3, 6), F32)]
    with pytest.raises(ShapeError, match=r"spatial axis 1 of x shape \(1, 2, 11, 9\) is 9 "
                                         r"\(\+ padding 0\+1\), smaller than the window 10\*"):
        infer_shapes(op, x, {**attrs, "dilation": [1, 10]})
