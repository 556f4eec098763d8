"""The onnxruntime backend's nan-checked max pool: where it is written in ops onnxruntime keeps
in its blocked-channel layout (float32, 2-D, 8 channels or more), the values of torch's
max_pool2d bit for bit, zero signs and nan included, over special values, kernels up to 5x5,
strides, padding, dilation and ceil mode, of any input and of an op's output that holds no
-inf (the check reads it itself); elsewhere the IsNaN mask, the same values."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as TF
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from onnx import numpy_helper

from abi.errors import ShapeError
from plugin_host.builder import GraphBuilder
from plugin_host.executor import Executor
from plugins.numpy_backend import NumpyBackend
from plugins.onnxruntime_backend import OnnxruntimeBackend, glue, session
from tests.numpy_backend.test_glue import pool_input
from tests.onnxruntime_backend.test_ops import onnx_model

LOWEST = np.finfo(np.float32).min
RNG = np.random.default_rng(4)


def _silu(b, x):
    return b.op("mul", x, b.op("sigmoid", x, name="gate"), name="silu")


#: ops before the pool whose output onnxruntime never makes -inf (glue's _never_minus_inf):
#: name -> (GraphBuilder, x) -> their output
NO_MINUS_INF = {
    **{op: (lambda op: lambda b, x: b.op(op, x, name=op))(op) for op in (
        "relu", "sigmoid", "tanh", "exp", "softplus", "abs", "elu", "hard_swish")},
    "hard_sigmoid": lambda b, x: b.op("hard_sigmoid", x, name="hs", alpha=3.0, beta=-1.0),
    "clip above -2": lambda b, x: b.op("clip", x, name="clip", min=-2.0),
    "silu": _silu,
    "sigmoid(x) * x": lambda b, x: b.op("mul", b.op("sigmoid", x, name="gate"), x, name="silu"),
    "silu, then a max pool": lambda b, x: b.op("max_pool", _silu(b, x), name="first",
                                               **attrs_of(3, 3, 1, 1, 1, 1, 1, 1, False)),
    "concat of a relu and twice a SiLU's max pool": lambda b, x: b.op(
        "concat", b.op("relu", x, name="relu"), *(2 * [NO_MINUS_INF["silu, then a max pool"](
            b, x)]), name="join", axis=1),
}
#: ops before the pool whose output may hold -inf, or that the rule does not know
MAYBE_MINUS_INF = {
    "leaky_relu": lambda b, x: b.op("leaky_relu", x, name="leaky", alpha=0.1),
    "clip below 1": lambda b, x: b.op("clip", x, name="clip", max=1.0),
    "clip to [-inf, 1]": lambda b, x: b.op("clip", x, name="clip", min=-np.inf, max=1.0),
    "x * sigmoid(-x)": lambda b, x: b.op("mul", x, b.op("sigmoid", b.op("neg", x, name="neg"),
                                                        name="gate"), name="product"),
    "a max pool of x": lambda b, x: b.op("max_pool", x, name="first",
                                         **attrs_of(3, 3, 1, 1, 1, 1, 1, 1, False)),
    "concat of a relu and x": lambda b, x: b.op("concat", b.op("relu", x, name="relu"), x,
                                                name="join", axis=1),
}
BEFORE = {**NO_MINUS_INF, **MAYBE_MINUS_INF}


def pool_graph(shape, *, flat=None, before=None, **attrs):
    """max_pool of x (of ``BEFORE[before]`` of x where given); with ``flat`` (the output's
    shape when the call runs, over input sizes known only then) reshaped to it, the graph's
    output dims then being sizes."""
    b = GraphBuilder("pool")
    x = b.input("x", shape, "float32", "ANY")
    if before is not None:
        x = BEFORE[before](b, x)
    y = b.op("max_pool", x, name="pool", **attrs)
    if flat is not None:
        y = b.op("reshape", y, name="flat", shape=list(flat))
    b.output(y, "y", "ANY")
    return b.build()


def attrs_of(kh, kw, sh, sw, ph, pw, dh, dw, ceil):
    return {"kernel_size": [kh, kw], "stride": [sh, sw], "padding": [[ph, ph], [pw, pw]],
            "dilation": [dh, dw], "ceil_mode": ceil}


def torch_pool(x, kh, kw, sh, sw, ph, pw, dh, dw, ceil):
    return TF.max_pool2d(torch.from_numpy(x), (kh, kw), (sh, sw), (ph, pw), (dh, dw),
                         ceil_mode=ceil).numpy()


def assert_same(got, want, *, tied_zeros=False):
    """Bit for bit with zero signs, nan where nan; onnxruntime's MaxPool starts from float32's
    lowest value, so a window of only -inf gives it (README: a difference left). With
    ``tied_zeros`` (a window may hold 0.0 and -0.0) either zero for a zero: onnxruntime's
    MaxPool outside its blocked layout gives the last of them, torch's the first (README)."""
    got = np.where((got == LOWEST) & (want == -np.inf), np.float32(-np.inf), got)
    if tied_zeros:
        got = np.where((got == 0) & (want == 0), want, got)
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan].view(np.int32), want[~nan].view(np.int32))


def before_of(x, before, shape):
    """onnxruntime's ``BEFORE[before]`` of x (None: x)."""
    if before is None:
        return x
    b = GraphBuilder("before")
    b.output(BEFORE[before](b, b.input("x", shape, "float32", "ANY")), "y", "ANY")
    return Executor(b.build(), OnnxruntimeBackend()).run({"x": x})["y"]


def numpy_pool_of(x, before, shape, attrs):
    """The numpy backend's max_pool of onnxruntime's ``BEFORE[before]`` of x (None: of x): the
    values the op before gives are not the pool's to mend (onnxruntime's Relu gives -0.0 for
    -0.0 where numpy's maximum gives 0; its transcendental ops round apart)."""
    y = before_of(x, before, shape)
    return Executor(pool_graph(y.shape, **attrs), NumpyBackend()).run({"x": y})["y"]


def conv_kernels(graph) -> list[list[int]]:
    return [list(next(a.ints for a in n.attribute if a.name == "kernel_shape"))
            for n in onnx_model(graph).graph.node if n.op_type == "Conv"]


pool_params = st.tuples(
    st.integers(1, 5), st.integers(1, 5),            # kernel h, w
    st.integers(1, 3), st.integers(1, 3),            # stride h, w
    st.tuples(*[st.integers(0, 2)] * 4),             # padding h, w before and after
    st.integers(1, 2), st.integers(1, 2),            # dilation h, w
    st.booleans(),                                   # ceil_mode
    st.integers(9, 14), st.integers(9, 14),          # input h, w
    st.sampled_from([8, 9, 12, 16, 24, 33]),         # channels
    st.integers(0, 3),                               # pool_input's special values
    st.sampled_from([None, "relu", "silu"]),         # an op before the pool
)


@settings(max_examples=80, deadline=None)
@given(pool_params)
def test_blocked_max_pool_matches_the_numpy_backend(p):
    """Bit for bit as the numpy backend (whose max_pool is torch's, test_glue), padding
    before and after each axis apart as an imported ONNX MaxPool has it; after a relu or a
    SiLU, whose output the check's Conv reads itself (no HardSigmoid: a Clip fused into the
    Conv); at 8 channels or more, and of those not a multiple of 4 only after those (else the
    mask)."""
    kh, kw, sh, sw, pads, dh, dw, ceil, h, w, channels, special, before = p
    pads = [min(pad, k - 1) for pad, k in zip(pads, (kh, kh, kw, kw))]
    attrs = {"kernel_size": [kh, kw], "stride": [sh, sw], "dilation": [dh, dw],
             "padding": [pads[:2], pads[2:]], "ceil_mode": ceil}
    try:
        graph = pool_graph((2, channels, h, w), before=before, **attrs)
    except ShapeError:  # a dilated window of padding alone, refused on both backends
        assume(False)
    x = pool_input((2, channels, h, w), special)
    ops = [n.op_type for n in onnx_model(graph).graph.node]
    masked = channels % 4 and not before
    assert ("IsNaN" in ops) is bool(masked)
    if not masked:
        assert ops.count("Mul") == 1 + (before == "silu")
        assert (ops.count("HardSigmoid"), ops.count("Clip")) == ((0, 1) if before else (1, 0))
        assert len(conv_kernels(graph)) == (2 if kh * sw + kw < kh * kw else 1)
    got = Executor(graph, OnnxruntimeBackend()).run({"x": x})["y"]
    assert_same(got, numpy_pool_of(x, before, (2, channels, h, w), attrs),
                tied_zeros=before == "relu")  # its 0.0 for -inf beside -0.0
    if pads[0] == pads[1] <= kh // 2 and pads[2] == pads[3] <= kw // 2 and not before:
        assert_same(got, torch_pool(x, kh, kw, sh, sw, pads[0], pads[2], dh, dw, ceil))


@pytest.mark.parametrize("channels", [16, 9])
@pytest.mark.parametrize("before", [None, "relu", "silu"])
@pytest.mark.parametrize("where", [(0, 0, 0, 0), (1, 5, 3, 7), (1, 15, 8, 8), (0, 7, 12, 12)])
@pytest.mark.parametrize("kernel, stride, separable", [((3, 3), (2, 2), False),
                                                       ((5, 5), (1, 1), True),
                                                       ((2, 2), (2, 2), False)])
def test_one_nan_spreads_over_its_windows_alone(where, kernel, stride, separable, before,
                                                channels):
    """One nan among finite values, at a corner, inside, at a channel of each SIMD block: nan
    exactly in the windows holding it (and each of the others their max); an infinity of
    either sign beside it changes nothing of that. After a relu or a SiLU too, and with
    float32's largest value in every other tap of the windows (the Conv's small weight keeps
    their sums finite). At 16 channels, in onnxruntime's blocked layout, and at 9, in its
    plain one (there the mask but after a relu or a SiLU)."""
    where = (where[0], min(where[1], channels - 1), *where[2:])
    x = RNG.standard_normal((2, channels, 13, 13)).astype(np.float32)
    x[0, 3, 5, 5], x[0, 8, 7, 3] = np.inf, -np.inf  # odd: not overwritten below
    if before:
        x[:, :, ::2, ::2] = np.finfo(np.float32).max
    x[where] = np.nan
    (kh, kw), (sh, sw) = kernel, stride
    args = (kh, kw, sh, sw, kh // 2, kw // 2, 1, 1, False)
    graph = pool_graph(x.shape, before=before, **attrs_of(*args))
    masked = channels % 4 and not before
    assert len(conv_kernels(graph)) == (0 if masked else 2 if separable else 1)
    got = Executor(graph, OnnxruntimeBackend()).run({"x": x})["y"]
    want = (numpy_pool_of(x, before, x.shape, attrs_of(*args)) if before else
            torch_pool(x, *args))
    assert np.isnan(want).sum() >= 1
    assert_same(got, want)



@pytest.mark.parametrize("before", [None, "relu"])
@pytest.mark.parametrize("channels", [1, 4, 7, 8, 9, 12, 20, 33])
def test_which_channel_counts_take_the_conv(channels, before):
    """The Conv's form from 8 channels on, of an input that may hold -inf only at a multiple
    of 4 (a depthwise Conv onnxruntime runs in its blocked layout), else the mask; the same
    values either way."""
    attrs = attrs_of(3, 3, 2, 2, 1, 1, 1, 1, False)
    graph = pool_graph((2, channels, 11, 10), before=before, **attrs)
    conv = channels >= 8 and (before is not None or channels % 4 == 0)
    ops = {n.op_type for n in onnx_model(graph).graph.node}
    assert ("Conv" in ops, "IsNaN" in ops) == (conv, not conv)
    x = pool_input((2, channels, 11, 10), 3)
    got = Executor(graph, OnnxruntimeBackend()).run({"x": x})["y"]
    assert_same(got, numpy_pool_of(x, before, x.shape, attrs), tied_zeros=before == "relu")


@pytest.mark.parametrize("case", ["4 channels", "9 channels", "3-D", "ceil over run-time sizes",
                                  "HardSigmoid drops a nan", "a window wider than x",
                                  "a window of 2^48 taps"])
def test_elsewhere_the_mask(case, monkeypatch):
    """Outside what the Conv's form takes (fewer than 8 channels, a count not a multiple of 4
    of an input that may hold -inf, other ranks, ceil mode where the Conv's end padding cannot
    be known at load, an onnxruntime whose HardSigmoid would give a bound for a nan, a window
    that ceil mode runs past x and its padding, whose Conv would need a weight per tap of the
    kernel: a 2^24 x 2^24 one asks numpy for 2^55 bytes of them) the IsNaN mask, with the
    same values."""
    shape, attrs = (2, 16, 11, 10), attrs_of(3, 3, 2, 2, 1, 1, 1, 1, True)
    feed_shape = shape
    wide = {"a window wider than x": (13, 2), "a window of 2^48 taps": (1 << 24, 1 << 24)}
    if case in wide:
        k, s = wide[case]
        attrs = attrs_of(k, k, s, s, 1, 1, 1, 1, True)
    if case.endswith("channels"):
        shape = feed_shape = (2, int(case.split()[0]), 11, 10)
    elif case == "ceil over run-time sizes":
        shape, attrs["flat"] = (2, 16, "h", "w"), (2, 16, 6, 6)
    elif case == "HardSigmoid drops a nan":
        monkeypatch.setattr(session, "hard_sigmoid_keeps_nan", lambda: False)
    if case == "3-D":
        shape = feed_shape = (2, 16, 5, 6, 7)
        attrs = {"kernel_size": [2, 3, 2], "stride": [1, 2, 2],
                 "padding": [[1, 1], [1, 1], [0, 0]], "dilation": [1, 1, 1],
                 "ceil_mode": False}
    graph = pool_graph(shape, **attrs)
    ops = [n.op_type for n in onnx_model(graph).graph.node]
    assert "IsNaN" in ops and "HardSigmoid" not in ops
    x = pool_input(feed_shape, 3)
    got = Executor(graph, OnnxruntimeBackend()).run({"x": x})["y"]
    if case == "3-D":
        want = TF.max_pool3d(torch.from_numpy(x), (2, 3, 2), (1, 2, 2), (1, 1, 0)).numpy()
    elif case in wide:
        want = torch_pool(x, k, k, s, s, 1, 1, 1, 1, True)
    else:
        want = torch_pool(x, 3, 3, 2, 2, 1, 1, 1, 1, True)
    assert_same(got, want)


@pytest.mark.parametrize("dropped, before, form", [
    ("fused_clip_keeps_nan", "relu", "HardSigmoid"), ("hard_sigmoid_keeps_nan", "relu", "Clip"),
    ("silu_of_minus_inf_is_nan", "silu", "HardSigmoid"), ("silu_of_minus_inf_is_nan", "relu",
                                                          "Clip")])
def test_each_probe_decides_its_own_form(dropped, before, form, monkeypatch):
    """An onnxruntime whose Conv with a fused Clip would give 1 for a nan sum: after a relu
    the check bounds x with HardSigmoid as elsewhere; one whose HardSigmoid would drop a nan
    still takes the Clip's form there; one whose SiLU might give -inf bounds a SiLU's output
    with HardSigmoid, and still not a relu's. The same values either way."""
    monkeypatch.setattr(session, dropped, lambda: False)
    attrs = attrs_of(3, 3, 2, 2, 1, 1, 1, 1, False)
    graph = pool_graph((2, 16, 11, 10), before=before, **attrs)
    ops = {n.op_type for n in onnx_model(graph).graph.node}
    assert form in ops and not {"HardSigmoid", "Clip", "IsNaN"} - {form} & ops
    x = pool_input((2, 16, 11, 10), 3)
    got = Executor(graph, OnnxruntimeBackend()).run({"x": x})["y"]
    assert_same(got, numpy_pool_of(x, before, x.shape, attrs))


def test_the_silu_probe_sees_minus_inf():
    """The SiLU probe's question, asked of this onnxruntime's SiLU (nan for -inf) and of an
    op that keeps -inf."""
    import onnx

    silu = [onnx.helper.make_node("Sigmoid", ["x"], ["s"]),
            onnx.helper.make_node("Mul", ["x", "s"], ["y"])]
    assert session.silu_of_minus_inf_is_nan()
    assert session._nan_through(silu, [], [67], fill=-np.inf)
    assert not session._nan_through([onnx.helper.make_node("Identity", ["x"], ["y"])], [],
                                    [67], fill=-np.inf)


@pytest.mark.parametrize("special", [0, 2, 3])
@pytest.mark.parametrize("before", list(BEFORE))
def test_after_an_op(before, special):
    """After an op whose output onnxruntime never makes -inf the check's Conv reads that
    output itself (a Clip, no HardSigmoid of it); after one whose output may hold -inf, or
    that the rule does not know, HardSigmoid bounds it first. Bit for bit the numpy
    backend's pool of onnxruntime's output of the op, over random values and windows of
    infinities of both signs, float32's extremes and nans (were a -inf and a +inf summed,
    the check would give a nan the pool has not)."""
    attrs = attrs_of(3, 3, 2, 2, 1, 1, 1, 1, False)
    shape = (2, 16, 11, 10)
    graph = pool_graph(shape, before=before, **attrs)
    ops = [n.op_type for n in onnx_model(graph).graph.node]
    for op, writer in (("HardSigmoid", "hard_sigmoid"), ("Clip", "clip to [-inf, 1]")):
        if before == writer:  # the op before's own
            ops.remove(op)
    pools = 1 + ("max pool" in before)  # the pool before has the same form
    assert (ops.count("HardSigmoid"), ops.count("Clip")) == (
        (0, pools) if before in NO_MINUS_INF else (pools, 0))
    x = pool_input(shape, special)
    got = Executor(graph, OnnxruntimeBackend()).run({"x": x})["y"]
    assert_same(got, numpy_pool_of(x, before, shape, attrs))


@pytest.mark.parametrize("kernel", [(1, 1), (2, 3), (4, 4), (7, 7), (11, 11), (16, 1)])
def test_the_sums_of_the_largest_values_stay_finite(kernel):
    """After a relu, windows of float32's largest value, +inf beside some: the check's sums
    (the Conv's weights below 1 over the taps, one Conv or a column and a row) stay finite,
    so no window is nan where none holds one; and the weights are no smaller than that needs
    (2^-(n + 1) for fewer than 2^n taps), for products of small values are denormals."""
    kh, kw = kernel
    x = np.full((1, 16, 13, 13), np.finfo(np.float32).max, np.float32)
    x[0, 2, 4, 4], x[0, 7, 6, 9] = np.inf, np.nan
    attrs = attrs_of(kh, kw, 1, 1, kh // 2, kw // 2, 1, 1, False)
    graph = pool_graph(x.shape, before="relu", **attrs)
    weights = [np.unique(numpy_helper.to_array(i)) for i in onnx_model(graph).graph.initializer
               if i.dims == [16, 1, kh, kw] or i.dims == [16, 1, kh, 1]]
    assert [w.tolist() for w in weights] == [[2.0 ** -((kh * kw).bit_length() + 1)]]
    got = Executor(graph, OnnxruntimeBackend()).run({"x": x})["y"]
    want = numpy_pool_of(x, "relu", x.shape, attrs)
    assert 0 < np.isnan(want).sum() < want.size / 4
    assert_same(got, want)


def test_a_long_chain_of_pools():
    """The rule reads back over a bounded number of tensors: in a chain of pools after a
    relu the first ``glue._WALK`` take the Clip's form, the rest HardSigmoid's; the values
    bit for bit the numpy backend's chain of onnxruntime's relu."""
    def chain(relu: bool):
        b = GraphBuilder("chain")
        y = b.input("x", (1, 16, 5, 5), "float32", "ANY")
        if relu:
            y = b.op("relu", y, name="relu")
        for i in range(glue._WALK + 6):
            y = b.op("max_pool", y, name=f"pool{i}", **attrs_of(3, 3, 1, 1, 1, 1, 1, 1, False))
        b.output(y, "y", "ANY")
        return b.build()

    graph = chain(relu=True)
    ops = [n.op_type for n in onnx_model(graph).graph.node]
    assert (ops.count("Clip"), ops.count("HardSigmoid")) == (glue._WALK, 6)
    x = pool_input((1, 16, 5, 5), 3)
    want = Executor(chain(relu=False), NumpyBackend()).run({"x": before_of(x, "relu", x.shape)})
    assert_same(Executor(graph, OnnxruntimeBackend()).run({"x": x})["y"], want["y"])


def test_which_ops_give_minus_inf():
    """What the rule rests on: over infinities, nans, float32's extremes and a dense range,
    onnxruntime's output of every op it names holds no -inf, and that of the ops outside it
    here but the max pool of x (which gives float32's lowest for a window of only -inf)
    does."""
    values = np.concatenate([[np.inf, -np.inf, np.nan, LOWEST, -LOWEST, -0.0],
                             np.linspace(-200, 200, 4001)]).astype(np.float32)
    x = np.resize(values, (1, 16, 1, 4007))
    for before in BEFORE:
        y = before_of(x, before, x.shape)
        assert (-np.inf in y) is (before in MAYBE_MINUS_INF and before != "a max pool of x")
    for op in glue._ABOVE_MINUS_INF:  # each with its default attributes
        b = GraphBuilder(op)
        b.output(b.op(op, b.input("x", x.shape, "float32", "ANY"), name=op), "y", "ANY")
        assert -np.inf not in Executor(b.build(), OnnxruntimeBackend()).run({"x": x})["y"], op


def test_no_ceil_over_run_time_sizes_is_blocked():
    """Without ceil mode the Conv's windows are the pool's at any size: the Conv's form
    over sizes known when the call runs, at two sizes."""
    for h, w in ((9, 12), (16, 7)):
        out = (1, 16, (h - 1) // 2 + 1, (w - 1) // 2 + 1)
        graph = pool_graph((1, 16, "h", "w"), flat=out,
                           **attrs_of(3, 3, 2, 2, 1, 1, 1, 1, False))
        assert "HardSigmoid" in {n.op_type for n in onnx_model(graph).graph.node}
        x = pool_input((1, 16, h, w), 3)
        got = Executor(graph, OnnxruntimeBackend()).run({"x": x})["y"]
        assert_same(got, torch_pool(x, 3, 3, 2, 2, 1, 1, 1, 1, False))


def optimized_ops(model, path) -> list[str]:
    import onnx

    options = session.session_options()
    options.optimized_model_filepath = str(path)
    ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"],
                         disabled_optimizers=session.DISABLED)
    return [n.op_type for n in onnx.load(str(path)).graph.node]


@pytest.mark.parametrize("before", [None, "relu", "silu"])
@pytest.mark.parametrize("kernel, stride", [(3, 2), (5, 1), (2, 2)])
def test_the_pool_stays_in_the_blocked_layout(kernel, stride, before, tmp_path):
    """conv, max pool, conv: onnxruntime reorders the tensor into its blocked-channel layout
    once before the first conv and back once after the last, with the nan check between, as
    for the bare MaxPool (where this onnxruntime has that layout on this machine)."""
    b = GraphBuilder("tower")
    x = b.input("x", (1, 16, 24, 24), "float32", "ANY")
    w = b.constant("w", RNG.standard_normal((32, 16, 3, 3)).astype(np.float32))
    w2 = b.constant("w2", RNG.standard_normal((32, 32, 3, 3)).astype(np.float32))
    y = b.op("conv", x, w, name="conv", stride=[1, 1], padding=[[1, 1], [1, 1]],
             dilation=[1, 1], groups=1)
    if before is not None:
        y = BEFORE[before](b, y)
    y = b.op("max_pool", y, name="pool", **attrs_of(kernel, kernel, stride, stride,
                                                      kernel // 2, kernel // 2, 1, 1, False))
    b.output(b.op("conv", y, w2, name="conv2", stride=[1, 1], padding=[[1, 1], [1, 1]],
                  dilation=[1, 1], groups=1), "y", "ANY")
    graph = b.build()
    ops = optimized_ops(onnx_model(graph), tmp_path / "blocked.onnx")
    if "ReorderInput" not in ops:
        pytest.skip("onnxruntime has no blocked-channel layout on this machine")
    assert ("HardSigmoid" in ops) is not before  # else the Clip is fused into a Conv
    assert "Clip" not in ops
    assert ops.count("ReorderInput") == 1 and ops.count("ReorderOutput") == 1, ops
    with pytest.MonkeyPatch.context() as patch:  # the mask leaves the layout and comes back
        patch.setattr(session, "hard_sigmoid_keeps_nan", lambda: False)
        patch.setattr(session, "fused_clip_keeps_nan", lambda: False)
        masked = optimized_ops(onnx_model(graph), tmp_path / "masked.onnx")
    assert "IsNaN" in masked and masked.count("ReorderInput") > 1
