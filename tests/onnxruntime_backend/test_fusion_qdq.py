"""The QDQ pair of ``fusion.py`` (:class:`~plugins.onnxruntime_backend.fusion.Dequantized`):
what the importer makes of a QuantizeLinear and the DequantizeLinear after it (``quantize_linear``
of x, ``sub`` of a constant zero point from its float32 codes, ``mul`` by a constant scale) is
onnxruntime's QuantizeLinear and DequantizeLinear, bit for bit the numpy backend's ops, for
every code type, a scale and zero point of one value or one per entry of an axis, and scales no
quantizer writes; what is not such a pair keeps its ops; onnxruntime's own fusion of the pair
with the conv after it (an integer kernel, a rounding step away) stays off."""

from __future__ import annotations

import json

import numpy as np
import pytest

from plugin_host.builder import GraphBuilder
from plugin_host.executor import Executor
from plugins.numpy_backend import NumpyBackend
from plugins.onnxruntime_backend import OnnxruntimeBackend, session

from .test_fusion import feeds
from .test_ops import assert_equal_bits, model_ops

RNG = np.random.default_rng(11)
SHAPE = (2, 3, 4, 5)
RANGES = {"uint8": (0, 255), "int8": (-128, 127), "uint16": (0, 65535),
          "int16": (-32768, 32767)}
PAIR_OPS = {"QuantizeLinear", "DequantizeLinear"}


def along(values, axis: int | None, ndim: int = len(SHAPE)) -> np.ndarray:
    """``values`` as a constant of one value (axis None) or one per entry of ``axis``, shaped
    to broadcast against x (the importer's shape for a per-axis DequantizeLinear)."""
    values = np.asarray(values, np.float32)
    if axis is None:
        return values.reshape(())
    shape = [1] * ndim
    shape[axis] = -1
    return values.reshape(shape)


def pair_graph(dtype: str, *, scale, zero_point=None, q_scale=None, q_zp=None, swap=False,
               read_codes: bool = False):
    """x quantized to ``dtype`` (by ``q_scale``, ``q_zp``: by default the dequantization's
    own, one value), less ``zero_point`` (None: no sub) and times ``scale``."""
    b = GraphBuilder("pair")
    x = b.input("x", SHAPE, "float32", "ANY")
    lo, hi = RANGES[dtype]
    q_scale = np.float32(0.05) if q_scale is None else q_scale
    q_zp = np.float32((lo + hi + 1) // 2) if q_zp is None else q_zp
    codes = b.op("quantize_linear", x, b.constant("q_scale", q_scale),
                 b.constant("q_zp", q_zp), name="quantize", dtype=dtype)
    y = codes
    if zero_point is not None:
        y = b.op("sub", y, b.constant("zero_point", zero_point), name="minus_zp")
    s = b.constant("scale", scale)
    y = b.op("mul", *((s, y) if swap else (y, s)), name="dequantize")
    b.output(y, "y", "ANY")
    if read_codes:
        b.output(b.op("neg", codes, name="neg"), "read", "ANY")
    return b.build()


def assert_bits(graph) -> None:
    """The onnxruntime backend's outputs are the numpy backend's, bit for bit, over
    :func:`test_fusion.feeds` scaled to reach every code type's range and past it."""
    numpy, onnxruntime = Executor(graph, NumpyBackend()), Executor(graph, OnnxruntimeBackend())
    for x in feeds(SHAPE):
        for factor in (1, 40, 2e3):
            with np.errstate(all="ignore"):
                given = (x * np.float32(factor)).astype(np.float32)
            assert_equal_bits(onnxruntime.run({"x": given}), numpy.run({"x": given}))


@pytest.mark.filterwarnings("ignore:invalid value")
@pytest.mark.parametrize("dtype", list(RANGES))
@pytest.mark.parametrize("zero_point", ["none", "one", "per-axis"])
@pytest.mark.parametrize("scale_axis", [None, 1, 3])
def test_a_quantize_dequantize_pair_is_two_kernels_bit_for_bit(dtype, zero_point, scale_axis):
    """A zero point along an axis goes along the scale's (the last where the scale is one
    value)."""
    lo, hi = RANGES[dtype]
    axis = 3 if scale_axis is None else scale_axis
    zp = {"none": None, "one": along(RNG.integers(lo, hi + 1), None),
          "per-axis": along(RNG.integers(lo, hi + 1, SHAPE[axis]), axis)}[zero_point]
    scale = along(RNG.uniform(0.001, 0.2, 1 if scale_axis is None else SHAPE[axis]),
                  scale_axis)
    for swap in (False, True):
        graph = pair_graph(dtype, scale=scale, zero_point=zp, swap=swap)
        assert model_ops(graph) == PAIR_OPS
        assert_bits(graph)


@pytest.mark.filterwarnings("ignore:invalid value", "ignore:overflow")
@pytest.mark.parametrize("value", [0.0, -0.0, -0.5, np.inf, -np.inf, np.nan, 3e-45, 3e38],
                         ids=["zero", "minus-zero", "negative", "inf", "minus-inf", "nan",
                              "subnormal", "huge"])
def test_a_dequantization_scale_of_any_value_is_bit_for_bit(value):
    """Scales no quantizer writes (an artifact may hold them), alone and among others along
    an axis: one product, as the mul's."""
    for scale in (along(value, None), along([0.1, value, -2.0], 1)):
        graph = pair_graph("uint8", scale=scale, zero_point=along(7, None))
        assert model_ops(graph) == PAIR_OPS
        assert_bits(graph)


@pytest.mark.filterwarnings("ignore:invalid value")
def test_codes_read_elsewhere_keep_their_quantize_linear_beside_the_pair():
    graph = pair_graph("int8", scale=along(0.25, None), zero_point=along(-3, None),
                       read_codes=True)
    ops = model_ops(graph)
    assert PAIR_OPS | {"Cast", "Neg"} <= ops and "Sub" not in ops
    assert_bits(graph)


@pytest.mark.filterwarnings("ignore:invalid value")
@pytest.mark.parametrize("variant", [
    "run-time quantize scale", "half zero point", "zero point past the codes",
    "zero point below the codes", "nan zero point", "codes cast between", "axes differ",
    "scale along two axes", "scale adds an axis", "reversed difference", "run-time zero point",
    "run-time scale"])
def test_what_is_not_the_pair_keeps_its_ops(variant):
    """The quantization on its element-wise path, a zero point that is no code (0.5, 256,
    -1, nan), the codes cast to int32 and back between, a scale and zero point along two
    different axes or a scale along two, a product with more axes than the codes, ``zp -
    codes``, a zero point or a scale fed when the call runs: no DequantizeLinear, the ops bit
    for bit as they are."""
    b = GraphBuilder("variant")
    x = b.input("x", SHAPE, "float32", "ANY")
    feed = {"x": RNG.standard_normal(SHAPE).astype(np.float32) * 4}
    q_scale = (b.input("q_scale", (), "float32", "ANY") if variant == "run-time quantize scale"
               else b.constant("q_scale", np.float32(0.05)))
    feed["q_scale"] = np.array(0.05, np.float32)
    codes = b.op("quantize_linear", x, q_scale, name="quantize", dtype="uint8")
    zp = {"half zero point": along(0.5, None), "zero point past the codes": along(256, None),
          "zero point below the codes": along(-1, None),
          "nan zero point": along(np.nan, None), "axes differ": along([1, 2, 3, 4], 2)}.get(
              variant, along(3, None))
    zp = (b.input("zp", (), "float32", "ANY") if variant == "run-time zero point" else
          b.constant("zp", np.int32(3) if variant == "codes cast between" else zp))
    feed["zp"] = np.array(3, np.float32)
    if variant == "reversed difference":
        difference = b.op("sub", zp, codes, name="zp_minus")
    elif variant == "codes cast between":
        difference = b.op("sub", b.op("cast", codes, name="c", dtype="int32"), zp, name="d")
        difference = b.op("cast", difference, name="f", dtype="float32")
    else:
        difference = b.op("sub", codes, zp, name="minus_zp")
    scale = {"axes differ": lambda: b.constant("s", along([0.1, 0.2, 0.3], 1)),
             "scale along two axes": lambda: b.constant(
                 "s", RNG.uniform(0.1, 1, (3, 4, 1)).astype(np.float32)),
             "scale adds an axis": lambda: b.constant("s", np.full((1, 1, 1, 1, 1), 0.5,
                                                                    np.float32)),
             "run-time scale": lambda: b.input("s", (), "float32", "ANY")}.get(
                 variant, lambda: b.constant("s", along(0.5, None)))()
    feed["s"] = np.array(0.5, np.float32)
    b.output(b.op("mul", difference, scale, name="dequantize"), "y", "ANY")
    graph = b.build()
    feed = {spec.name: feed[spec.name] for spec in graph.inputs}
    assert "DequantizeLinear" not in model_ops(graph)
    assert_equal_bits(Executor(graph, OnnxruntimeBackend()).run(feed),
                      Executor(graph, NumpyBackend()).run(feed))


def test_onnxruntime_does_not_fuse_the_pair_with_the_conv_after_it(monkeypatch, tmp_path):
    """A QDQ conv as the importer writes it (the weight dequantized at import, a float32
    constant; the output quantized again): onnxruntime would quantize the weight itself and
    run one QLinearConv, whose numbers differ from the float32 conv's by a rounding step; the
    backend's session runs QuantizeLinear, DequantizeLinear and the float32 Conv (read from
    onnxruntime's profile of that very session)."""
    b = GraphBuilder("qdq_conv")
    x = b.input("x", (1, 3, 8, 8), "float32", "NCHW")
    codes = b.op("quantize_linear", x, b.constant("sx", np.float32(0.02)),
                 b.constant("zx", np.float32(128)), name="qx", dtype="uint8")
    x_real = b.op("mul", b.op("sub", codes, b.constant("zx_dq", np.float32(128)), name="dx"),
                  b.constant("sx_dq", np.float32(0.02)), name="x_dq")
    w = (RNG.integers(-127, 128, (4, 3, 3, 3)) * 0.01).astype(np.float32)
    y = b.op("conv", x_real, b.constant("w", w), name="conv", stride=[1, 1],
             padding=[[1, 1], [1, 1]], dilation=[1, 1], groups=1)
    y_codes = b.op("quantize_linear", y, b.constant("sy", np.float32(0.05)),
                   b.constant("zy", np.float32(100)), name="qy", dtype="uint8")
    b.output(b.op("mul", b.op("sub", y_codes, b.constant("zy_dq", np.float32(100)),
                              name="dy"), b.constant("sy_dq", np.float32(0.05)), name="y_dq"),
             "y", "NCHW")
    graph = b.build()
    made = session.session_options

    def profiled(**kwargs):
        options = made(**kwargs)
        options.enable_profiling = True
        options.profile_file_prefix = str(tmp_path / "profile")
        return options

    monkeypatch.setattr(session, "session_options", profiled)
    executor = Executor(graph, OnnxruntimeBackend())
    executor.run({"x": RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)})
    with open(executor._whole.session.end_profiling()) as f:
        ran = {e["args"]["op_name"] for e in json.load(f) if e.get("cat") == "Node"}
    assert {"QuantizeLinear", "DequantizeLinear", "Conv"} <= ran
    assert not {"QLinearConv", "ConvInteger"} & ran
