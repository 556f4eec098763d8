"""The chains the onnxruntime backend writes as one kernel (``fusion.py``): a dynamically
quantized MatMul (``dynamic_quantize``, the casts, ``integer_linear``, the scaling ``mul``s and
a bias ``add``) is one DynamicQuantizeMatMul, bit for bit the numpy backend's chain, a nan
anywhere in x included; what else reads a link keeps it; what is not such a chain is not
fused. Such a projection read by a ``quantized_lstm`` alone is, for one sequence, onnxruntime's
DynamicQuantizeLSTM behind an If (which branch ran read from onnxruntime's profile), bit for
bit the Scan; a dynamically quantized conv's codes less their zero point are one
DequantizeLinear, bit for bit."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from abi.errors import ShapeError
from plugin_host.builder import GraphBuilder
from plugin_host.executor import Executor
from plugins.numpy_backend import NumpyBackend
from plugins.onnxruntime_backend import OnnxruntimeBackend

from .test_ops import assert_equal_bits, model_ops, onnx_model
from .test_recurrent_kernels import ran_ops

RNG = np.random.default_rng(7)
IN, OUT = 24, 6


def weights(dtype: str, per_output: bool, zero_point: bool):
    """A weight (OUT, IN) of ``dtype`` codes, its zero point (None, or one per output where
    ``per_output``) and its positive scale (one, or one per output)."""
    info = np.iinfo(dtype)
    w = RNG.integers(info.min, int(info.max) + 1, (OUT, IN)).astype(dtype)
    shape = (OUT,) if per_output else ()
    zp = RNG.integers(info.min, int(info.max) + 1, shape).astype(dtype) if zero_point else None
    return w, zp, RNG.uniform(0.001, 0.05, shape).astype(np.float32)


def add_chain(b: GraphBuilder, x: str, w, w_zp, w_scale, bias=None, *, tag: str = "",
              quantized=None, swap: bool = False) -> tuple[str, tuple]:
    """The importer's ops for a quantize_dynamic MatMul of ``x`` (``quantized``: another
    chain's dynamic_quantize outputs to share), plus an ``add`` of ``bias`` (None: none; a
    value, or a constant's name); its output and the dynamic_quantize outputs. ``swap`` puts
    each mul's operands the other way round."""
    codes, scale, zp = quantized or b.op("dynamic_quantize", x, name=f"quantize{tag}")
    constants = [b.constant(f"{name}{tag}", value) if value is not None else None
                 for name, value in (("w", w), ("w_zp", w_zp), ("w_scale", w_scale))]
    w, w_zp, w_scale = constants
    both = b.op("mul", *((w_scale, scale) if swap else (scale, w_scale)), name=f"scales{tag}")
    zp8 = b.op("cast", zp, name=f"zp{tag}", dtype="uint8")
    codes8 = b.op("cast", codes, name=f"codes{tag}", dtype="uint8")
    sums = b.op("integer_linear", codes8, w, zp8, w_zp, name=f"linear{tag}")
    real = b.op("cast", sums, name=f"float{tag}", dtype="float32")
    y = b.op("mul", *((both, real) if swap else (real, both)), name=f"scaled{tag}")
    if bias is not None:
        bias = bias if isinstance(bias, str) else b.constant(f"bias{tag}", bias)
        y = b.op("add", y, bias, name=f"plus_bias{tag}")
    return y, (codes, scale, zp)


def chain_graph(x_shape, w, w_zp, w_scale, bias=None, swap=False):
    b = GraphBuilder("chain")
    x = b.input("x", x_shape, "float32", "ANY")
    b.output(add_chain(b, x, w, w_zp, w_scale, bias, swap=swap)[0], "y", "ANY")
    return b.build()


def feeds(shape):
    """Random inputs, then the ones at the quantization's edges: zeros, one value, all
    negative, infinities of both signs, float32's extremes, and a nan at several places."""
    x = RNG.standard_normal(shape).astype(np.float32) * 3
    yield x
    yield np.zeros(shape, np.float32)
    yield np.full(shape, 2.5, np.float32)
    yield -np.abs(x)
    for special in (np.inf, -np.inf, np.float32(3.4e38), np.float32(-3.4e38)):
        y = x.copy()
        y.reshape(-1)[::5] = special
        yield y
    y = x.copy()
    y.reshape(-1)[::4], y.reshape(-1)[1::4] = np.inf, -np.inf
    yield y
    for at in (0, 1, 7, x.size // 2, x.size - 1):
        y = x.copy()
        y.reshape(-1)[at] = np.nan
        yield y


def assert_bits(graph, x_shapes) -> None:
    """The onnxruntime backend's outputs are the numpy backend's, bit for bit, zeros' signs
    too, over :func:`feeds` of each shape."""
    numpy, onnxruntime = Executor(graph, NumpyBackend()), Executor(graph, OnnxruntimeBackend())
    nans = 0
    for shape in x_shapes:
        for x in feeds(shape):
            want = numpy.run({"x": x})
            assert_equal_bits(onnxruntime.run({"x": x}), want)
            if np.isnan(x).any():  # the ABI's answer: every output nan
                nans += 1
                assert np.isnan(want["y"]).all()
    assert nans == 5 * len(x_shapes)


#: the nan check of a scale that bounds a Clip (one value, not nan, not -0.0), and of another
NAN_CHECK = {"ReduceSumSquare", "Clip"}
NAN_CHECK_PER_OUTPUT = {"ReduceSumSquare", "Min", "Sub"}


def chain_ops(per_output: bool) -> set[str]:
    return {"DynamicQuantizeMatMul"} | (NAN_CHECK_PER_OUTPUT if per_output else NAN_CHECK)


@pytest.mark.filterwarnings("ignore:invalid value")  # inf * 0 in the numpy backend's chain
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("per_output", [False, True], ids=["per-tensor", "per-output"])
@pytest.mark.parametrize("zero_point", [False, True], ids=["no-zp", "zp"])
@pytest.mark.parametrize("bias", [None, "one", "per-output"])
def test_a_dynamically_quantized_matmul_is_one_kernel_bit_for_bit(dtype, per_output,
                                                                 zero_point, bias, u8s8):
    w, w_zp, w_scale = weights(dtype, per_output, zero_point)
    b = {None: None, "one": np.float32(0.25),
         "per-output": RNG.standard_normal(OUT).astype(np.float32)}[bias]
    graph = chain_graph((3, IN), w, w_zp, w_scale, b)
    assert model_ops(graph) == chain_ops(per_output)
    assert_bits(graph, [(3, IN)])


@pytest.mark.filterwarnings("ignore:invalid value")
@pytest.mark.parametrize("w_scale", [0.0, -0.0, np.inf, -0.5, np.nan, 3e-45],
                         ids=["zero", "minus-zero", "inf", "negative", "nan", "subnormal"])
def test_a_weight_scale_of_any_value_is_bit_for_bit(w_scale):
    """A weight scale no quantizer writes, which an artifact may still hold: a Clip bounded
    by -0.0 would give +0.0 where the chain gives -0.0, one bounded by nan the sum of
    squares, so those two take the nan check of a scale per output; the others the Clip."""
    w, w_zp, _ = weights("uint8", False, True)
    graph = chain_graph((3, IN), w, w_zp, np.float32(w_scale))
    plain = not np.isnan(w_scale) and not (w_scale == 0 and np.signbit(w_scale))
    assert model_ops(graph) == chain_ops(not plain)
    assert_bits(graph, [(3, IN)])


@pytest.mark.filterwarnings("ignore:invalid value")
def test_a_run_time_batch_and_more_axes_are_one_kernel_bit_for_bit():
    w, w_zp, w_scale = weights("uint8", True, True)
    graph = chain_graph(("n", 2, IN), w, w_zp, w_scale, RNG.standard_normal((1, OUT))
                        .astype(np.float32), swap=True)
    assert model_ops(graph) == chain_ops(True) | {"Shape"}
    assert_bits(graph, [(1, 2, IN), (5, 2, IN)])


@pytest.mark.parametrize("backend", [NumpyBackend, OnnxruntimeBackend])
def test_an_empty_run_time_x_is_refused_naming_its_quantization(backend):
    graph = chain_graph(("n", IN), *weights("uint8", False, True))
    with pytest.raises(ShapeError, match=r"dynamic_quantize: x of shape \(0, 24\) is empty"):
        Executor(graph, backend()).run({"x": np.zeros((0, IN), np.float32)})


@pytest.mark.filterwarnings("ignore:invalid value")
@pytest.mark.parametrize("read", [None, "codes", "scale"])
def test_one_quantization_read_by_two_chains(read):
    """Two chains of one dynamic_quantize (attention's projections): two kernels; it stays
    where a graph output reads one of its outputs, and gives it."""
    b = GraphBuilder("shared")
    x = b.input("x", (4, IN), "float32", "ANY")
    y0, quantized = add_chain(b, x, *weights("uint8", False, True), tag="0")
    y1, _ = add_chain(b, x, *weights("int8", True, False), tag="1", quantized=quantized)
    b.output(y0, "y", "ANY")
    b.output(y1, "y1", "ANY")
    if read is not None:
        b.output(quantized[{"codes": 0, "scale": 1}[read]], "read", "ANY")
    graph = b.build()
    ops = [n.op_type for n in onnx_model(graph).graph.node]
    assert ops.count("DynamicQuantizeMatMul") == 2
    assert ops.count("DynamicQuantizeLinear") == (read is not None)
    assert "MatMulInteger" not in ops
    assert_bits(graph, [(4, IN)])


@pytest.mark.filterwarnings("ignore:invalid value")
@pytest.mark.parametrize("reader", ["output", "op"])
def test_a_product_read_elsewhere_keeps_its_bias_add(reader):
    """The scaled product also a graph output, or read by another op besides the bias's
    add: the chain is one kernel without the bias, the add its own op."""
    b = GraphBuilder("read")
    x = b.input("x", (3, IN), "float32", "ANY")
    y, _ = add_chain(b, x, *weights("uint8", False, True))
    b.output(b.op("add", y, b.constant("bias", np.float32(1.5)), name="plus_bias"), "y", "ANY")
    b.output(y if reader == "output" else b.op("neg", y, name="neg"), "product", "ANY")
    graph = b.build()
    assert model_ops(graph) == (chain_ops(False) | {"Add"}
                                | ({"Neg"} if reader == "op" else set()))
    assert_bits(graph, [(3, IN)])


def test_what_is_not_the_chain_is_not_fused():
    """A weight scale or zero point fed when the call runs, a product by another scale, a
    zero point of another quantization, a scale that adds axes to the product or is one per
    row: each keeps the ops as they are (MatMulInteger); a bias fed when the call runs stays
    its own Add."""
    w, w_zp, w_scale = weights("uint8", False, True)

    def graph(variant):
        b = GraphBuilder("variant")
        x = b.input("x", (3, IN), "float32", "ANY")
        codes, scale, zp = b.op("dynamic_quantize", x, name="quantize")
        if variant == "another zero point":
            zp = b.op("dynamic_quantize", b.op("neg", x, name="neg"), name="other")[2]
        sums = b.op("integer_linear", b.op("cast", codes, name="c", dtype="uint8"),
                    b.constant("w", w), b.op("cast", zp, name="z", dtype="uint8"),
                    b.input("w_zp", (), "uint8", "ANY") if variant == "run-time zero point"
                    else b.constant("w_zp", w_zp), name="linear")
        factors = {"run-time scale": lambda: (scale, b.input("s", (), "float32", "ANY")),
                   "another scale": lambda: (b.constant("s", np.float32(0.5)),
                                             b.constant("ws", w_scale)),
                   "scale of more axes": lambda: (scale, b.constant(
                       "ws", np.full((1, 1, OUT), 0.5, np.float32))),
                   "scale per row": lambda: (scale, b.constant(
                       "ws", np.full((3, 1), 0.5, np.float32)))}.get(
                           variant, lambda: (scale, b.constant("ws", w_scale)))()
        y = b.op("mul", b.op("cast", sums, name="f", dtype="float32"),
                 b.op("mul", *factors, name="scales"), name="scaled")
        if variant == "run-time bias":
            y = b.op("add", y, b.input("bias", (OUT,), "float32", "ANY"), name="plus_bias")
        b.output(y, "y", "ANY")
        return b.build()

    for variant in ("run-time scale", "another scale", "another zero point",
                    "scale of more axes", "scale per row", "run-time zero point"):
        assert "DynamicQuantizeMatMul" not in model_ops(graph(variant)), variant
    assert {"DynamicQuantizeMatMul", "Add"} <= model_ops(graph("run-time bias"))


# --- a quantized LSTM of a projection: DynamicQuantizeLSTM where it gives the op's numbers ---

HIDDEN, STEPS = 4, 5


def lstm_graph(batch, **config):
    """The importer's graph of a DynamicQuantizeLSTM (:func:`add_lstm`): inputs x (STEPS,
    batch, IN), h and c (batch, HIDDEN); outputs y, h_last, c_last."""
    b = GraphBuilder("lstm")
    x = b.input("x", (STEPS, batch, IN), "float32", "ANY")
    add_lstm(b, x, batch, **config)
    return b.build()


def add_lstm(b: GraphBuilder, x: str, batch, *, tag="", hidden=HIDDEN, dtype="uint8",
             per_output=False, r_zero_point=True, bias=True, peepholes=False, reverse=False,
             quantize_y=False, lengths=False, zero_points_differ=False, read_projection=False,
             r_scale=0.02) -> None:
    """x (STEPS, batch, IN) projected by a chain (:func:`add_chain`), then ``quantized_lstm``
    of ``hidden`` units, h and c inputs, its outputs the graph's (names ending in ``tag``);
    the weight's zero point one value (repeated where ``per_output``, unless
    ``zero_points_differ``); with ``read_projection`` the projection is an output too."""
    h = b.input(f"h{tag}", (batch, hidden), "float32", "ANY")
    c = b.input(f"c{tag}", (batch, hidden), "float32", "ANY")
    info = np.iinfo(dtype)
    w = RNG.integers(info.min, int(info.max) + 1, (4 * hidden, IN)).astype(dtype)
    shape = (4 * hidden,) if per_output else ()
    w_zp = (RNG.integers(info.min, int(info.max) + 1, shape) if zero_points_differ else
            np.full(shape, RNG.integers(info.min, int(info.max) + 1))).astype(dtype)
    projected, _ = add_chain(b, x, w, w_zp, RNG.uniform(0.001, 0.01, shape).astype(np.float32),
                             tag=tag)
    r = b.constant(f"r{tag}", RNG.integers(info.min, int(info.max) + 1, (4 * hidden, hidden))
                   .astype(dtype))
    optional = {
        "r_zp": r_zero_point and b.constant(f"r_zp{tag}", np.array(3, dtype)),
        "bias": bias and b.constant(f"bias{tag}", RNG.standard_normal(4 * hidden)
                                    .astype(np.float32)),
        "lengths": lengths and b.input(f"lengths{tag}", (batch,), "int32", "ANY"),
        "holes": peepholes and b.constant(f"holes{tag}", RNG.standard_normal(3 * hidden)
                                          .astype(np.float32))}
    y, h_last, c_last = b.op(
        "quantized_lstm", projected, h, c, r, b.constant(f"r_scale{tag}", np.float32(r_scale)),
        *(optional[k] or None for k in ("r_zp", "bias", "lengths", "holes")),
        name=f"node{tag}", reverse=reverse, quantize_y=quantize_y)
    for name, value in (("y", y), ("h_last", h_last), ("c_last", c_last)):
        b.output(value, f"{name}{tag}", "ANY")
    if read_projection:
        b.output(projected, f"projected{tag}", "ANY")


def lstm_feed(batch, scale=1.0):
    return {"x": (RNG.standard_normal((STEPS, batch, IN)) * scale).astype(np.float32),
            "h": RNG.uniform(-1, 1, (batch, HIDDEN)).astype(np.float32),
            "c": RNG.standard_normal((batch, HIDDEN)).astype(np.float32)}


def scan_alone(monkeypatch):
    """The onnxruntime backend with the quantized kernel never prepared: its Scan only."""
    from plugins.onnxruntime_backend import recurrent_kernels

    monkeypatch.setattr(recurrent_kernels, "quantized_kernel", lambda *a: None)


@pytest.mark.parametrize("config", [
    {}, {"dtype": "int8"}, {"per_output": True, "r_zero_point": False},
    {"bias": False, "peepholes": True}, {"reverse": True, "quantize_y": True},
    {"dtype": "int8", "per_output": True, "peepholes": True, "reverse": True}],
    ids=["u8", "s8", "per-output", "peepholes", "reverse", "all"])
def test_a_projected_quantized_lstm_of_one_sequence_runs_as_its_kernel_bit_for_bit(
        config, u8s8, monkeypatch, tmp_path):
    """One sequence (a fixed batch of 1, or a run-time batch that is 1): DynamicQuantizeLSTM,
    bit for bit the Scan's outputs; two sequences, a nan or an infinity, values too large
    for the sum test: the Scan, which gives the op's answer for them."""
    one, run_time = lstm_graph(1, **config), lstm_graph("n", **config)
    feeds = [lstm_feed(1), lstm_feed(1, scale=30)]
    others = [lstm_feed(2), lstm_feed(1, scale=1e36)]
    for key, at in (("x", (2, 0, 3)), ("h", (0, 1)), ("c", (0, 2))):
        for value in (np.nan, np.inf):
            feed = lstm_feed(1)
            feed[key][at] = value
            others.append(feed)
    kernels = {graph: Executor(graph, OnnxruntimeBackend()) for graph in (one, run_time)}
    [branch] = [a.g for n in onnx_model(one).graph.node if n.op_type == "If"
                for a in n.attribute if a.name == "then_branch"]
    [lstm] = [n for n in branch.node if n.op_type == "DynamicQuantizeLSTM"]
    weights = {t.name: t for t in onnx_model(one).graph.initializer}
    moved = config.get("dtype") == "int8" and not u8s8  # int8 weights moved where inexact
    assert {weights[lstm.input[k]].data_type for k in (1, 2)} == {
        onnx.TensorProto.UINT8 if moved or config.get("dtype") != "int8" else
        onnx.TensorProto.INT8}
    assert "DynamicQuantizeLSTM" in ran_ops(one, feeds[0], tmp_path)
    assert "DynamicQuantizeLSTM" in ran_ops(run_time, feeds[0], tmp_path)
    for feed in others:
        assert "DynamicQuantizeLSTM" not in ran_ops(run_time, feed, tmp_path)
    scan_alone(monkeypatch)
    for graph, kernel in kernels.items():
        scan = Executor(graph, OnnxruntimeBackend())
        assert "If" not in model_ops(graph)
        for feed in feeds + (others if graph is run_time else others[2:]):
            assert_equal_bits(kernel.run(feed), scan.run(feed))


def test_what_the_quantized_kernel_cannot_take_keeps_the_scan():
    """Lengths, a fixed batch of 2, zero points that differ by output, a projection read
    elsewhere, a weight whose products could leave float32 whatever the sum test: no If, no
    DynamicQuantizeLSTM; the projection is still one DynamicQuantizeMatMul."""
    for graph in (lstm_graph(1, lengths=True), lstm_graph(2),
                  lstm_graph(1, per_output=True, zero_points_differ=True),
                  lstm_graph(1, read_projection=True), lstm_graph(1, r_scale=1e29)):
        ops = model_ops(graph)
        assert "Scan" in ops and "DynamicQuantizeMatMul" in ops and "If" not in ops, ops


@pytest.mark.parametrize("backend", [NumpyBackend, OnnxruntimeBackend])
def test_an_empty_run_time_batch_of_the_projected_lstm_is_refused(backend):
    graph = lstm_graph("n")
    feed = {k: v[:, :0] if k == "x" else v[:0] for k, v in lstm_feed(1).items()}
    with pytest.raises(ShapeError, match=r"dynamic_quantize: x of shape \(5, 0, 24\) is "
                       r"empty"):
        Executor(graph, backend()).run(feed)


def test_two_chains_and_two_kernels_of_two_sizes_have_their_own_constants(u8s8, monkeypatch):
    """What the kernels' constants are made from may be the same (a one-value bias, no bias
    or zero point) where their sizes or types differ: each its own, bit for bit."""
    b = GraphBuilder("two")
    x = b.input("x", (STEPS, 1, IN), "float32", "ANY")
    half = b.constant("half", np.float32(0.5))  # the bias of both chains
    for tag, dtype, hidden in (("0", "uint8", 4), ("1", "int8", 6)):
        add_lstm(b, x, 1, tag=tag, dtype=dtype, hidden=hidden, bias=False,
                 r_zero_point=False)
        info = np.iinfo(dtype)
        w = RNG.integers(info.min, int(info.max) + 1, (hidden, IN)).astype(dtype)
        y, _ = add_chain(b, x, w, None, np.float32(0.01), half, tag=f"mm{tag}")
        b.output(y, f"mm{tag}", "ANY")
    graph = b.build()
    feed = {"x": lstm_feed(1)["x"], **{f"{n}{tag}": RNG.uniform(-1, 1, (1, hidden))
                                       .astype(np.float32)
                                       for tag, hidden in (("0", 4), ("1", 6)) for n in "hc"}}
    kernel = Executor(graph, OnnxruntimeBackend()).run(feed)
    assert "If" in model_ops(graph)
    with np.errstate(all="ignore"):
        want = Executor(graph, NumpyBackend()).run(feed)
    scan_alone(monkeypatch)
    scan = Executor(graph, OnnxruntimeBackend()).run(feed)
    assert_equal_bits(kernel, scan)
    for name, value in scan.items():
        np.testing.assert_allclose(value, want[name], rtol=1e-5, atol=1e-6, err_msg=name)


# --- a dynamically quantized conv: DequantizeLinear of the codes, the same Conv --------------

CONV_OPS = {"DynamicQuantizeLinear", "DequantizeLinear", "Conv", "Mul"} | NAN_CHECK


def add_conv_chain(b: GraphBuilder, x: str, channels: int, out: int, *, per_channel=False,
                   tag="", bias_input=False, **attrs) -> tuple[str, tuple]:
    """The importer's ops for quantize_dynamic's ConvInteger of ``x`` (exact float32 sums):
    dynamic_quantize, ``sub`` of the zero point from the codes, a ``conv`` by the weight's
    codes less their zero point (float32 integers), ``mul`` by x's scale times the weight's
    (one, or one per output channel); its output and the dynamic_quantize outputs."""
    codes, scale, zp = b.op("dynamic_quantize", x, name=f"quantize{tag}")
    attrs = {"stride": [1, 1], "padding": [[0, 0], [0, 0]], "dilation": [1, 1], "groups": 1,
             **attrs}
    groups = attrs["groups"]
    w = RNG.integers(-127, 128, (out, channels // groups, 3, 3)).astype(np.float32)
    w_scale = RNG.uniform(0.001, 0.05, (out, 1, 1) if per_channel else ()).astype(np.float32)
    both = b.op("mul", scale, b.constant(f"w_scale{tag}", w_scale), name=f"scales{tag}")
    difference = b.op("sub", codes, zp, name=f"minus_zp{tag}")
    bias = [b.constant(f"conv_bias{tag}", RNG.standard_normal(out).astype(np.float32))]
    y = b.op("conv", difference, b.constant(f"w{tag}", w), *(bias if bias_input else []),
             name=f"conv{tag}", **attrs)
    return b.op("mul", y, both, name=f"scaled{tag}"), (codes, scale, zp)


def conv_graph(x_shape, out=5, **config):
    b = GraphBuilder("conv_chain")
    x = b.input("x", x_shape, "float32", "ANY")
    b.output(add_conv_chain(b, x, x_shape[1], out, **config)[0], "y", "ANY")
    return b.build()


@pytest.mark.filterwarnings("ignore:invalid value")
@pytest.mark.parametrize("config", [{}, {"per_channel": True},
                                    {"stride": [2, 2], "padding": [[1, 1], [1, 1]]},
                                    {"groups": 2, "dilation": [2, 1], "per_channel": True}],
                         ids=["plain", "per-channel", "strided", "grouped"])
def test_a_dynamically_quantized_conv_dequantizes_its_codes_in_one_kernel_bit_for_bit(config):
    graph = conv_graph((2, 4, 9, 8), 6, **config)
    assert model_ops(graph) == CONV_OPS
    assert_bits(graph, [(2, 4, 9, 8)])


@pytest.mark.filterwarnings("ignore:invalid value")
def test_a_run_time_batch_of_the_conv_chain_is_bit_for_bit_and_empty_refused():
    graph = conv_graph(("n", 3, 7, 7))
    assert model_ops(graph) == CONV_OPS | {"Shape"}
    assert_bits(graph, [(1, 3, 7, 7), (3, 3, 7, 7)])
    for backend in NumpyBackend, OnnxruntimeBackend:
        with pytest.raises(ShapeError, match=r"dynamic_quantize: x of shape \(0, 3, 7, 7\) is "
                           r"empty"):
            Executor(graph, backend()).run({"x": np.zeros((0, 3, 7, 7), np.float32)})


@pytest.mark.filterwarnings("ignore:invalid value")
@pytest.mark.parametrize("read", ["codes", "difference", "conv"])
def test_links_read_elsewhere_stay_beside_the_conv_chain(read):
    """The codes, the codes less their zero point, or the conv's output also a graph output:
    those ops stay (their values under their own names), the chain is still fused."""
    b = GraphBuilder("read")
    x = b.input("x", (1, 3, 6, 6), "float32", "ANY")
    y, (codes, _, _) = add_conv_chain(b, x, 3, 4)
    b.output(y, "y", "ANY")
    b.output({"codes": codes, "difference": "minus_zp", "conv": "conv"}[read], "read", "ANY")
    graph = b.build()
    ops = [n.op_type for n in onnx_model(graph).graph.node]
    assert ops.count("DynamicQuantizeLinear") == 2 and "DequantizeLinear" in ops, ops
    assert ops.count("Conv") == 1 + (read == "conv"), ops
    assert_bits(graph, [(1, 3, 6, 6)])


@pytest.mark.filterwarnings("ignore:invalid value")
def test_a_conv_with_its_own_bias_is_the_chain_too():
    graph = conv_graph((1, 3, 6, 6), bias_input=True)
    assert model_ops(graph) == CONV_OPS
    assert_bits(graph, [(1, 3, 6, 6)])


def test_what_is_not_the_conv_chain_is_not_fused():
    """A difference the other way round: the ops as they are."""
    b = GraphBuilder("reversed")
    x = b.input("x", (1, 3, 6, 6), "float32", "ANY")
    codes, scale, zp = b.op("dynamic_quantize", x, name="quantize")
    w = b.constant("w", RNG.integers(-9, 9, (2, 3, 3, 3)).astype(np.float32))
    y = b.op("conv", b.op("sub", zp, codes, name="zp_minus"), w, name="conv", stride=[1, 1],
             padding=[[0, 0], [0, 0]], dilation=[1, 1], groups=1)
    b.output(b.op("mul", y, b.op("mul", scale, b.constant("s", np.float32(0.1)), name="m"),
                  name="scaled"), "y", "ANY")
    assert "DequantizeLinear" not in model_ops(b.build())
