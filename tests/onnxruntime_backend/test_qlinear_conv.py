"""qlinear_conv on the onnxruntime backend: onnxruntime's QLinearConv, its outputs the numpy
backend's bit for bit (itself onnxruntime's reference numbers, tests/numpy_backend) for every
mix of int8 and uint8, and a refusal naming the node where that kernel cannot take the
weight."""

from __future__ import annotations

import platform
from pathlib import Path

import numpy as np
import pytest

from abi.errors import BackendError
from plugin_host.builder import GraphBuilder
from plugin_host.executor import Executor
from plugins.numpy_backend import NumpyBackend
from plugins.onnxruntime_backend import OnnxruntimeBackend, layers, session
from tests.numpy_backend.test_qlinear_conv import PAIRS, Conv, codes, random_conv

from .test_ops import model_ops, onnx_model


@pytest.mark.parametrize("y_dtype", ["uint8", "int8"])
@pytest.mark.parametrize("x_dtype, w_dtype, small", PAIRS, ids=["u8u8", "s8s8", "u8s8", "s8u8"])
def test_qlinear_conv_gives_the_numpy_backend_bits(x_dtype, w_dtype, small, y_dtype, u8s8):
    """Random 1-D to 3-D convolutions, grouped, strided, dilated, padded, per tensor and per
    channel, with and without a bias, y of either type; one QLinearConv, of int8 weights as
    they are where x and y are int8, or uint8 and the probe finds u8 x s8 exact."""
    rng = np.random.default_rng(31)
    for trial in range(12):
        conv = random_conv(rng, x_dtype, w_dtype, per_channel=trial % 2 == 0,
                           bias=trial % 3 != 0, spatial=1 + trial % 3, groups=1 + trial % 2)
        conv.inputs[7] = codes(rng, y_dtype, ())
        graph, feed = conv.graph()
        assert "QLinearConv" in model_ops(graph) and "Conv" not in model_ops(graph)
        as_given = x_dtype == w_dtype == y_dtype == "int8" or (
            (x_dtype, w_dtype, y_dtype) == ("uint8", "int8", "uint8") and u8s8)
        int8_weights = any(t.data_type == 3 and len(t.dims) > 1  # TensorProto.INT8
                           for t in onnx_model(graph).graph.initializer)
        assert int8_weights == (as_given and w_dtype == "int8")
        got = Executor(graph, OnnxruntimeBackend()).run(dict(feed))["y"]
        want = conv.numpy()
        assert got.dtype == want.dtype == np.dtype(y_dtype)
        np.testing.assert_array_equal(got, want, err_msg=f"trial {trial}")


def test_the_ends_of_the_code_ranges(u8s8):
    """Every x code against the weights' extremes, zero points at both ends: the uint8 moves
    of int8 codes keep every difference."""
    for x_dtype, w_dtype in (("int8", "uint8"), ("uint8", "int8"), ("int8", "int8")):
        xi, wi = np.iinfo(x_dtype), np.iinfo(w_dtype)
        x = np.arange(xi.min, xi.max + 1).astype(x_dtype).reshape(1, 1, 16, 16)
        w = np.array([wi.min, wi.max], w_dtype).reshape(2, 1, 1, 1)
        for x_zp, w_zp in ((xi.min, wi.max), (xi.max, wi.min)):
            conv = Conv(x, 0.02, np.array(x_zp, x_dtype), w, np.float32(0.01),
                        np.array(w_zp, w_dtype), 0.5, np.array(xi.min, x_dtype), None, [1, 1],
                        [[1, 0], [0, 1]], [1, 1], 1)
            graph, feed = conv.graph()
            got = Executor(graph, OnnxruntimeBackend()).run(dict(feed))["y"]
            np.testing.assert_array_equal(got, conv.numpy())


@pytest.mark.parametrize("case", ["run_time_weight", "zero_points_differ"])
def test_a_weight_its_kernel_cannot_take_is_refused(case):
    rng = np.random.default_rng(32)
    zero_points = np.array([0, 1 if case == "zero_points_differ" else 0, 0], np.int8)
    conv = Conv(codes(rng, "uint8", (1, 2, 5, 5)), 0.1, np.array(3, np.uint8),
                codes(rng, "int8", (3, 2, 3, 3)), np.full(3, 0.01, np.float32), zero_points, 0.5,
                np.array(0, np.uint8), None, [1, 1], [[0, 0], [0, 0]], [1, 1], 1)
    graph, _ = conv.graph(constant=case != "run_time_weight")
    what = {"run_time_weight": "a weight computed when the call runs",
            "zero_points_differ": "per-channel weight zero points that differ"}[case]
    with pytest.raises(BackendError, match=f"node 'node': qlinear_conv with {what}: "
                       f"onnxruntime's QLinearConv takes a constant weight with one zero point"):
        Executor(graph, OnnxruntimeBackend())


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86-64 kernels")
def test_the_probe_finds_u8_s8_exact_where_the_cpu_has_vnni():
    """onnxruntime's u8 x s8 kernels sum exactly with VNNI (AVX512-VNNI or AVX-VNNI) and
    saturate pairs at int16 without it (AVX2)."""
    flags = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    assert layers.u8s8_exact() == bool(flags & {"avx512_vnni", "avx_vnni"})


def test_the_probe_reads_a_saturated_sum_as_not_exact(monkeypatch):
    """The probe's sum saturated in pairs (-65536 for -130560) requantizes to 136, which it
    reads as a CPU whose u8 x s8 kernels are not exact; the exact sum's code is 72."""
    from plugins.onnxruntime_backend import session

    class Saturating:
        def run(self, names, feed):
            assert np.all(feed["x"] == 255)
            return [np.full((1, 1, 1, 1), 136, np.uint8)]

    monkeypatch.setattr(session, "create_session", lambda model, where: Saturating())
    layers.u8s8_exact.cache_clear()
    try:
        assert not layers.u8s8_exact()
    finally:
        layers.u8s8_exact.cache_clear()
    assert np.round(np.float32(-130560) / 1024) + 200 == 72  # the exact sum's code


def _through_a_resize(resize: dict):
    """qlinear_conv, its codes resized (nearest, as float32), another qlinear_conv: the graph
    and a feed."""
    rng = np.random.default_rng(12)
    b = GraphBuilder("chain")

    def conv(x, cin, name):
        def c(what, value):
            return b.constant(f"{name}.{what}", np.asarray(value))
        return b.op("qlinear_conv", x, c("xs", np.float32(0.05)), c("xz", np.uint8(128)),
                    c("w", rng.integers(-60, 60, (8, cin, 3, 3)).astype(np.int8)),
                    c("ws", np.float32(0.01)), c("wz", np.int8(0)), c("ys", np.float32(0.1)),
                    c("yz", np.uint8(128)), name=name, stride=[1, 1],
                    padding=[[1, 1], [1, 1]], dilation=[1, 1], groups=1)

    y = b.op("cast", conv(b.input("x", (1, 4, 8, 8), "uint8", "ANY"), 4, "c1"), name="f",
             dtype="float32")
    y = b.op("cast", b.op("resize", y, name="r", mode="nearest", **resize), name="u",
             dtype="uint8")
    b.output(conv(y, 8, "c2"), "y", "ANY")
    return b.build(), {"x": rng.integers(0, 256, (1, 4, 8, 8)).astype(np.uint8)}


@pytest.mark.parametrize("resize, nhwc", [({"size": [16, 16], "scales": [2.0, 2.0]}, True),
                                          ({"size": [13, 11]}, False)], ids=["2x", "sizes"])
def test_the_nhwc_transformer_runs_but_where_a_resize_has_axes(resize, nhwc):
    """onnxruntime's NHWC transformer keeps a chain of QLinearConvs channels-last; through a
    Resize with axes (sizes that are not whole multiples) its session is refused, so it is
    left off there; both chains give the numpy backend's bits."""
    graph, feed = _through_a_resize(resize)
    model = onnx_model(graph)
    assert ("NhwcTransformer" not in session.disabled_optimizers(model)) == nhwc
    got = Executor(graph, OnnxruntimeBackend()).run(dict(feed))["y"]
    np.testing.assert_array_equal(got, Executor(graph, NumpyBackend()).run(dict(feed))["y"])
    if not nhwc:  # what the transformer would do to it
        with pytest.raises(BackendError, match="'r'.*onnxruntime refused the model"):
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(session, "disabled_optimizers", lambda m: ["NoopElimination"])
                Executor(graph, OnnxruntimeBackend()).run(dict(feed))
