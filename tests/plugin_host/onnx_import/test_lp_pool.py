"""LpPool (what converters other than torch write; torch's LPPool exports as AveragePool and
Pow) imported as ``abs``, ``pow``, a depthwise ``conv`` of ones and ``pow`` by 1/p, compared
with onnxruntime on both backends over 1, 2 and 3 spatial axes, p of 1 to 3, strides, pads,
dilations, ceil_mode (whose last window onnxruntime keeps only where it starts inside the input
or the pad before) and auto_pad, over a run-time batch and height too. A p below 1, run-time
channels and ceil_mode over a run-time size are refused naming the node."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import ModelFileError, UnsupportedModelError

from .conftest import assert_refused, check_on_both_backends, import_and_load, onnx

helper, TP = onnx.helper, onnx.TensorProto
RNG = np.random.default_rng(29)


def _lp_pool(path, shape, *, opset=18, dtype=TP.FLOAT, **attrs):
    """One LpPool named ``pool`` over ``x`` of ``shape``, saved to ``path``."""
    graph = helper.make_graph(
        [helper.make_node("LpPool", ["x"], ["y"], name="pool", **attrs)], "g",
        [helper.make_tensor_value_info("x", dtype, list(shape))],
        [helper.make_tensor_value_info("y", dtype, [None] * len(shape))])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), path)
    return path


def _feeds(shape, count=2, dtype=np.float32):
    feeds = [{"x": (RNG.standard_normal(shape) * 2).astype(dtype)} for _ in range(count)]
    feeds[-1]["x"].reshape(-1)[:3] = [np.inf, np.nan, -0.0]
    return feeds


# (x shape, kernel, strides, pads (ONNX order: begins, then ends), dilations)
CASES = [
    ((2, 3, 11), [3], [2], [1, 1], [1]),
    ((1, 2, 12), [2], [3], [1, 0], [4]),
    ((1, 2, 7, 6), [3, 2], [2, 2], [1, 0, 0, 1], [1, 1]),
    ((2, 2, 10, 9), [3, 2], [2, 1], [1, 0, 1, 1], [2, 3]),
    ((1, 2, 5, 6, 7), [2, 2, 3], [2, 1, 2], [0, 1, 1, 1, 0, 1], [1, 2, 1]),
]


@pytest.mark.parametrize("ceil", [0, 1])
@pytest.mark.parametrize("p", [1, 2, 3])
@pytest.mark.parametrize("shape, kernel, strides, pads, dilations", CASES,
                         ids=[f"{len(c[1])}d-{i}" for i, c in enumerate(CASES)])
def test_lp_pool_matches_onnxruntime(shape, kernel, strides, pads, dilations, p, ceil,
                                     tmp_path, signer):
    model = _lp_pool(tmp_path / "p.onnx", shape, kernel_shape=kernel, strides=strides,
                     pads=pads, dilations=dilations, p=p, ceil_mode=ceil)
    _, loaded = import_and_load(model, tmp_path / "p.pha", signer)
    ops = [n.op for n in loaded.graph.nodes]
    assert "conv" in ops and ops.count("pow") == (2 if p > 1 else 0), ops
    check_on_both_backends(model, loaded, _feeds(shape))


def test_ceil_mode_keeps_a_last_window_only_where_it_starts_inside(tmp_path, signer):
    """7 rows with a pad of 1 before, kernel 3, stride 2: ceil gives 4 windows, as ONNX's
    shape inference says; 6 columns, no pad before, kernel 2, stride 2, one pad after: the
    fourth window would start in the pad after, so onnxruntime gives 3 (ONNX says 4)."""
    model = _lp_pool(tmp_path / "p.onnx", (1, 2, 7, 6), kernel_shape=[3, 2], strides=[2, 2],
                     pads=[1, 0, 0, 1], ceil_mode=1)
    _, loaded = import_and_load(model, tmp_path / "p.pha", signer)
    assert loaded.graph.outputs[0].shape == (1, 2, 4, 3)
    check_on_both_backends(model, loaded, _feeds((1, 2, 7, 6)))


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
def test_auto_pad_over_a_run_time_batch_and_height(auto_pad, tmp_path, signer):
    model = _lp_pool(tmp_path / "p.onnx", ("n", 3, "h", 8), kernel_shape=[3, 3],
                     strides=[1, 2], auto_pad=auto_pad, opset=11)
    _, loaded = import_and_load(model, tmp_path / "p.pha", signer,
                                golden_dims={"n": [1, 2], "h": [5, 9]})
    assert loaded.graph.inputs[0].shape == ("n", 3, "h", 8)
    check_on_both_backends(model, loaded, [*_feeds((2, 3, 9, 8)), *_feeds((1, 3, 6, 8))])


@pytest.mark.parametrize("shape, attrs, message", [
    ((1, 2, 6, 6), {"p": 0}, "attribute p=0: only an integer p >= 1 is supported"),
    ((1, "c", 6, 6), {}, "input 'x' has run-time channels 'c': the window's sum is a "
                         "depthwise conv, whose weight needs them"),
    ((1, 2, "h", 6), {"ceil_mode": 1, "strides": [2, 2]},
     "ceil_mode=1 over the run-time size 'h': its last window depends on the size"),
    ((1, 2, 6, 6), {"ceil_mode": 2}, "attribute ceil_mode=2 must be 0 or 1"),
    ((2, 6), {}, "input of shape [2, 6] and kernel_shape [2, 2]: needs (N, C, *spatial)"),
    ((1, 2, 6, 6), {"strides": [0, 0], "ceil_mode": 1},
     "attribute strides=[0, 0]: needs 2 integers >= 1"),
    ((1, 2, 6, 6), {"kernel_shape": [-1, -1]},
     "attribute kernel_shape=[-1, -1]: needs 2 integers >= 1"),
], ids=["p", "channels", "ceil", "ceil-value", "rank", "strides", "kernel"])
def test_refusals_name_the_node(shape, attrs, message, tmp_path):
    attrs.setdefault("kernel_shape", [2, 2])
    model = _lp_pool(tmp_path / "p.onnx", shape, **attrs)
    assert_refused(model, UnsupportedModelError, "node 'pool' (LpPool)", message)


def test_a_window_over_the_element_cap_is_refused(tmp_path):
    """A kernel of 2 ** 40 rows would be a conv weight of 2 ** 42 ones."""
    model = _lp_pool(tmp_path / "p.onnx", (1, 4, 6, 6), kernel_shape=[2 ** 40, 2])
    assert_refused(model, ModelFileError, "node 'pool' (LpPool)",
                   f"kernel_shape [{2 ** 40}, 2] over 4 channels: a window of {2 ** 43} "
                   f"elements, over the cap of")
