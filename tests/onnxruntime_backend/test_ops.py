"""Every op the onnxruntime backend supports gives the numpy backend's outputs, through the
executor, within float32 tolerance; what it cannot express is refused at load naming the node."""

from __future__ import annotations

import re

import numpy as np
import pytest

from abi.errors import BackendError, GraphError, IndexRangeError, ShapeError
from plugin_host.builder import GraphBuilder
from plugin_host.executor import Executor
from plugins.numpy_backend import NumpyBackend
from plugins.onnxruntime_backend import OnnxruntimeBackend, convert
from tests.numpy_backend.test_glue import (integer_codes, integer_linear_graph,
                                           quantize_linear_feeds, torch_integer_linear)
from tests.numpy_backend.test_qlinear import (MUL_NAMES, UNARY_NAMES, concat_case, graph_of,
                                              parameters)
from tests.numpy_backend.test_qlinear_conv import codes, random_conv

RNG = np.random.default_rng(0)


def onnx_model(graph):
    """``graph`` converted as the onnxruntime backend converts it (an ONNX ModelProto)."""
    return convert.to_onnx(
        graph.name, inputs=[(s.name, graph.types[s.name]) for s in graph.inputs],
        outputs=[(s.name, graph.types[s.name]) for s in graph.outputs], nodes=graph.nodes,
        consts=graph.tensors, types=graph.types)[0]


def model_ops(graph) -> set[str]:
    """The op types of ``graph``'s onnxruntime model (its top-level nodes)."""
    return {n.op_type for n in onnx_model(graph).graph.node}


def qlinear_case(op: str, **attrs):
    """One qlinear element-wise op of random codes and constant parameters, and its feed."""
    rng = np.random.default_rng(len(op))
    if op == "qlinear_concat":
        names, values, at = concat_case(rng, "int8", ())
        return graph_of(op, names, values, {"axis": 1}, at, True)
    if op in ("qlinear_sigmoid", "qlinear_leaky_relu", "qlinear_softmax",
              "qlinear_global_average_pool", "qlinear_average_pool"):
        return graph_of(op, UNARY_NAMES, [codes(rng, "uint8", (2, 3, 4)),
                                          *parameters(rng, "uint8", 2)], attrs, (0,), True)
    sa, za, sb, zb, _, zc = parameters(rng, "uint8", 3)
    return graph_of(op, MUL_NAMES, [codes(rng, "uint8", (2, 3, 4)), sa, za,
                                    codes(rng, "uint8", (3, 1)), sb, zb,
                                    np.float32(sa * sb * 64), zc], {}, (0, 3), True)


def f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _across(low, high, shape=(3, 5)):
    """Evenly spaced float32 values from low to high (both included), e.g. across a domain."""
    return np.linspace(low, high, np.prod(shape), dtype=np.float32).reshape(shape)


def _nan_inf():
    return np.array([[np.nan, np.inf, -np.inf, 0.0], [3e38, -np.nan, -0.0, np.inf]], np.float32)


def single(op, x_shape, *consts, in_dtype="float32", feed=None, **attrs):
    """A graph ``y = op(x, *consts)`` and a feed for it."""
    b = GraphBuilder(op)
    x = b.input("x", x_shape, in_dtype, "ANY")
    names = [b.constant(f"c{i}", c) if c is not None else None for i, c in enumerate(consts)]
    out = b.op(op, x, *names, name="node", **attrs)
    outs = out if isinstance(out, tuple) else (out,)
    for i, t in enumerate(outs):
        b.output(t, f"y{i}", "ANY")
    if feed is None:
        concrete = tuple(3 if isinstance(d, str) else d for d in x_shape)
        feed = {"x": f32(*concrete) if in_dtype == "float32" else
                RNG.integers(-5, 5, concrete).astype(in_dtype)}
    return b.build(), feed


def resize_by_scales_run_time():
    """resize by scales of a run-time height and width (size -1: floor(in * scale) when the
    call runs), then to a fixed size (a graph output's dims are names, not expressions)."""
    b = GraphBuilder("resize")
    x = b.input("x", ("n", 2, "h", "w"), "float32", "ANY")
    up = b.op("resize", x, name="by_scales", size=[-1, -1], scales=[2.0, 0.75], mode="linear")
    b.output(b.op("resize", up, name="node", size=[5, 4], mode="linear"), "y0", "ANY")
    return b.build(), {"x": f32(2, 2, 3, 4)}


def resize_like(mode="linear"):
    """resize of (n, 2, 4, 5) to the height like's axis 1 gives at run time and width 7."""
    b = GraphBuilder("resize")
    x = b.input("x", ("n", 2, 4, 5), "float32", "ANY")
    like = b.input("like", ("h", "k"), "float32", "ANY")
    y = b.op("resize", x, like, name="node", size=[-1, 7], like_axes=[0, -1], mode=mode)
    b.output(y, "y0", "ANY")
    return b.build(), {"x": f32(2, 2, 4, 5), "like": f32(9, 3)}


def grid_sample_run_time(**attrs):
    """grid_sample with the grid a graph input (a symbolic batch and output size)."""
    b = GraphBuilder("grid_sample")
    x = b.input("x", ("n", 2, 4, 5), "float32", "ANY")
    grid = b.input("grid", ("n", "ho", "wo", 2), "float32", "ANY")
    b.output(b.op("grid_sample", x, grid, name="node", **attrs), "y", "ANY")
    return b.build(), {"x": f32(2, 2, 4, 5), "grid": f32(2, 3, 6, 2, scale=0.8)}


def grid(n, *out):
    """Sampling positions partly outside [-1, 1], one per output position (2-D or 3-D)."""
    return RNG.uniform(-1.3, 1.3, (n, *out, len(out))).astype(np.float32)


def lstm():
    b = GraphBuilder("lstm")
    x = b.input("x", (2, 6), "float32", "NC")
    h = b.state("h", (2, 4), "float32", "NC")
    c = b.state("c", (2, 4), "float32", "NC")
    w = [b.constant(n, f32(*s, scale=0.5)) for n, s in
         (("w_ih", (16, 6)), ("w_hh", (16, 4)), ("b_ih", (16,)))]
    h2, c2 = b.op("lstm_cell", x, h, c, *w, name="node")
    b.output(h2, "h_next", "NC", state_of="h")
    b.output(c2, "c_next", "NC", state_of="c")
    return b.build(), {"x": f32(2, 6), "h": f32(2, 4), "c": f32(2, 4)}


def lstm_runtime_weights():
    b = GraphBuilder("lstm_rt")
    x = b.input("x", (1, 3), "float32", "NC")
    h = b.input("h", (1, 2), "float32", "NC")
    c = b.input("c", (1, 2), "float32", "NC")
    w_ih = b.input("w_ih", (8, 3), "float32", "ANY")
    w_hh = b.constant("w_hh", f32(8, 2))
    h2, c2 = b.op("lstm_cell", x, h, c, w_ih, w_hh, None, b.constant("b_hh", f32(8)),
                  name="node")
    b.output(h2, "h2", "NC")
    b.output(c2, "c2", "NC")
    return b.build(), {"x": f32(1, 3), "h": f32(1, 2), "c": f32(1, 2), "w_ih": f32(8, 3)}


def lstm_sequence(reverse=False, lengths=False, peepholes=False):
    """The lstm op over a run-time number of steps, h and c graph inputs (and the op's
    lengths, int32, with ``lengths``; its peepholes, a constant, with ``peepholes``)."""
    b = GraphBuilder("lstm_seq")
    x = b.input("x", ("t", 2, 6), "float32", "ANY")
    h, c = (b.input(n, (2, 4), "float32", "NC") for n in ("h", "c"))
    w = [b.constant(n, f32(*s, scale=0.5)) for n, s in
         (("w_ih", (16, 6)), ("w_hh", (16, 4)), ("b_ih", (16,)), ("b_hh", (16,)))]
    if lengths or peepholes:
        w.append(b.input("lengths", (2,), "int32", "ANY") if lengths else None)
    if peepholes:
        w.append(b.constant("peepholes", f32(12)))
    for out, name in zip(b.op("lstm", x, h, c, *w, name="node", reverse=reverse),
                         ("y", "h_last", "c_last")):
        b.output(out, name, "ANY")
    return b.build(), {"x": f32(5, 2, 6), "h": f32(2, 4), "c": f32(2, 4)} | (
        {"lengths": np.array([5, 3], np.int32)} if lengths else {})


def lstm_sequence_runtime_weights():
    """The lstm op with weight_ih a graph input and no bias_ih, reversed."""
    b = GraphBuilder("lstm_seq_rt")
    x = b.input("x", (3, 1, 3), "float32", "ANY")
    h, c = (b.input(n, (1, 2), "float32", "NC") for n in ("h", "c"))
    w_ih = b.input("w_ih", (8, 3), "float32", "ANY")
    outs = b.op("lstm", x, h, c, w_ih, b.constant("w_hh", f32(8, 2)), None,
                b.constant("b_hh", f32(8)), name="node", reverse=True)
    for out, name in zip(outs, ("y", "h_last", "c_last")):
        b.output(out, name, "ANY")
    return b.build(), {"x": f32(3, 1, 3), "h": f32(1, 2), "c": f32(1, 2), "w_ih": f32(8, 3)}


def recurrence(op, reverse=False, lengths=False, **attrs):
    """The gru or rnn op over a run-time number of steps, h a graph input (and the op's
    lengths, int64, with ``lengths``)."""
    rows = {"gru": 12, "rnn": 4}[op]
    b = GraphBuilder(op)
    x = b.input("x", ("t", 2, 6), "float32", "ANY")
    h = b.input("h", (2, 4), "float32", "NC")
    w = [b.constant(n, f32(*s, scale=0.5)) for n, s in
         (("w_ih", (rows, 6)), ("w_hh", (rows, 4)), ("b_ih", (rows,)), ("b_hh", (rows,)))]
    if lengths:
        w.append(b.input("lengths", (2,), "int64", "ANY"))
    for out, name in zip(b.op(op, x, h, *w, name="node", reverse=reverse, **attrs),
                         ("y", "h_last")):
        b.output(out, name, "ANY")
    return b.build(), {"x": f32(5, 2, 6), "h": f32(2, 4)} | (
        {"lengths": np.array([5, 3], np.int64)} if lengths else {})


def recurrence_runtime_weights(op):
    """The gru or rnn op with weight_hh a graph input and no bias_hh."""
    rows = {"gru": 6, "rnn": 2}[op]
    b = GraphBuilder(f"{op}_rt")
    x = b.input("x", (3, 1, 3), "float32", "ANY")
    h = b.input("h", (1, 2), "float32", "NC")
    w_hh = b.input("w_hh", (rows, 2), "float32", "ANY")
    outs = b.op(op, x, h, b.constant("w_ih", f32(rows, 3)), w_hh, b.constant("b_ih", f32(rows)),
                name="node")
    for out, name in zip(outs, ("y", "h_last")):
        b.output(out, name, "ANY")
    return b.build(), {"x": f32(3, 1, 3), "h": f32(1, 2), "w_hh": f32(rows, 2)}


def quantized_lstm(reverse=False, lengths=False, quantize_y=False, batch=2):
    """quantized_lstm over a run-time number of steps (x (T, batch, 16): hidden 4), int8
    weights with a zero point, a scale per row, bias and peepholes; the initial state fed."""
    b = GraphBuilder("quantized_lstm")
    x = b.input("x", ("t", batch, 16), "float32", "ANY")
    h, c = (b.input(n, (batch, 4), "float32", "ANY") for n in ("h", "c"))
    lens = b.input("lengths", (batch,), "int64", "ANY") if lengths else None
    params = [b.constant("w", RNG.integers(-128, 128, (16, 4)).astype(np.int8)),
              b.constant("scale", (RNG.random(16) * 0.02).astype(np.float32)),
              b.constant("zero_point", np.array(-3, np.int8)),
              b.constant("bias", f32(16)), lens, b.constant("peepholes", f32(12))]
    y, h2, c2 = b.op("quantized_lstm", x, h, c, *params, name="node", reverse=reverse,
                     quantize_y=quantize_y)
    for t, n in ((y, "y"), (h2, "h_last"), (c2, "c_last")):
        b.output(t, n, "ANY")
    feed = {"x": f32(5, 2, 16), "h": f32(2, 4), "c": f32(2, 4)}
    if lengths:
        feed["lengths"] = np.array([5, 2], np.int64)
    return b.build(), feed


def embedding_at_entry():
    b = GraphBuilder("emb")
    idx = b.input("idx", (2, 3), "int64", "ANY")
    b.output(b.op("embedding", idx, b.constant("w", f32(7, 4)), name="node"), "y", "ANY")
    return b.build(), {"idx": RNG.integers(0, 7, (2, 3))}


def embedding_computed():
    """Indices computed inside the graph (idx + 1): the backend's own guard checks them."""
    b = GraphBuilder("emb_in_graph")
    idx = b.input("idx", (4,), "int64", "N")
    shifted = b.op("add", idx, b.constant("one", np.ones(4, np.int64)), name="shift")
    b.output(b.op("embedding", shifted, b.constant("w", f32(6, 3)), name="node"), "y", "ANY")
    return b.build(), {"idx": np.array([0, 2, 4, 1])}


def binary(op, a_shape, b_shape, dtype="float32"):
    b = GraphBuilder(op)
    a = b.input("a", a_shape, dtype, "ANY")
    c = b.input("b", b_shape, dtype, "ANY")
    b.output(b.op(op, a, c, name="node"), "y", "ANY")
    if dtype == "float32":
        feed = {"a": f32(*a_shape), "b": f32(*b_shape) + (3.0 if op == "div" else 0.0)}
        if op == "pow":  # a positive base: a real power for any exponent
            feed["a"] = np.abs(feed["a"]) + np.float32(0.1)
    else:
        feed = {"a": RNG.integers(-9, 9, a_shape).astype(dtype),
                "b": RNG.integers(-9, 9, b_shape).astype(dtype)}
    return b.build(), feed


def _int_extremes(dtype, n=24):
    """Integers of ``dtype``: its minimum, maximum, 0, 1, max - 1, min + 1, then random ones."""
    info = np.iinfo(dtype)
    edges = np.array([info.min, info.max, 0, 1, info.max - 1, info.min + 1], dtype)
    return np.concatenate([edges, RNG.integers(info.min, info.max, n - 6, dtype, True)])


def bits(op, dtype, **attrs):
    """``op`` over a (n, 1) and b (1, m) of one integer dtype at its extremes; a shift's b
    holds 0, 1, width - 1, width, width + 1 and the dtype's maximum."""
    b = GraphBuilder(op)
    x = b.input("a", (24, 1), dtype, "ANY")
    inputs = [x]
    width = np.iinfo(dtype).bits
    other = (np.array([0, 1, width - 1, width, width + 1, np.iinfo(dtype).max], dtype)
             if op == "bit_shift" else _int_extremes(dtype, 8))
    if op != "bitwise_not":
        inputs.append(b.input("b", (1, len(other)), dtype, "ANY"))
    b.output(b.op(op, *inputs, name="node", **attrs), "y", "ANY")
    feed = {"a": _int_extremes(dtype).reshape(24, 1)}
    if len(inputs) == 2:
        feed["b"] = other.reshape(1, -1)
    return b.build(), feed


def scatter(reduction="none", dtype="float32", x=None, idx=None, updates=None, axis=0):
    """scatter_elements with its indices and updates graph inputs."""
    b = GraphBuilder("scatter_elements")
    names = [b.input(n, v.shape, str(v.dtype), "ANY")
             for n, v in (("x", x), ("i", idx), ("u", updates))]
    b.output(b.op("scatter_elements", *names, name="node", axis=axis, reduction=reduction),
             "y", "ANY")
    return b.build(), {"x": x, "i": idx, "u": updates}


def scatter_random(reduction, dtype="float32", axis=1):
    """Random indices along ``axis`` of a (3, 5) x, duplicates included; floats with nan, inf
    and both zeros in x and the updates."""
    shape = (3, 8) if axis == 1 else (7, 5)
    if dtype == "float32":
        pool = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -2.0, 3.0], np.float32)
        x, updates = RNG.choice(pool, (3, 5)), RNG.choice(pool, shape)
    else:
        x, updates = (RNG.integers(-9, 9, s).astype(dtype) for s in ((3, 5), shape))
    idx = RNG.integers(0, (3, 5)[axis], shape)
    return scatter(reduction, dtype, x, idx, updates, axis)


def not_where():
    """where(not(a > b), a, b): a bool tensor inside the graph, through both ops."""
    b = GraphBuilder("not_where")
    x = b.input("a", (2, 3), "float32", "ANY")
    y = b.input("b", (3,), "float32", "ANY")
    keep = b.op("not", b.op("greater", x, y, name="cmp"), name="node")
    b.output(b.op("where", keep, x, y, name="pick"), "y", "ANY")
    b.output(keep, "mask", "ANY")
    return b.build(), {"a": f32(2, 3), "b": f32(3)}


def logic():
    """(a > 0 and b > 0) or a > b: and, or on computed bool tensors."""
    b = GraphBuilder("logic")
    x = b.input("a", (2, 3), "float32", "ANY")
    y = b.input("b", (3,), "float32", "ANY")
    zero = b.constant("zero", np.zeros((), np.float32))
    both = b.op("and", b.op("greater", x, zero, name="gx"), b.op("greater", y, zero, name="gy"),
                name="node")
    b.output(b.op("or", both, b.op("greater", x, y, name="gxy"), name="either"), "y", "ANY")
    return b.build(), {"a": f32(2, 3), "b": f32(3)}


def concat():
    b = GraphBuilder("concat")
    xs = [b.input(f"x{i}", (2, n, 3), "float32", "ANY") for i, n in enumerate((1, 4, 2))]
    b.output(b.op("concat", *xs, axis=1, name="node"), "y", "ANY")
    return b.build(), {f"x{i}": f32(2, n, 3) for i, n in enumerate((1, 4, 2))}


PAD1 = [[1, 1], [1, 1]]

#: case id -> () -> (graph, feed); every supported op appears in at least one case
CASES = {
    "conv2d": lambda: single("conv", (1, 4, 9, 8), f32(6, 2, 3, 3), f32(6), stride=[2, 1],
                             padding=[[0, 1], [1, 2]], dilation=[1, 2], groups=2),
    "conv1d_no_bias": lambda: single("conv", (2, 3, 11), f32(5, 3, 4), stride=[1],
                                     padding=[[1, 2]], dilation=[1]),
    "conv_transpose": lambda: single("conv_transpose", (1, 4, 5, 6), f32(4, 3, 3, 3), f32(6),
                                     stride=[2, 2], padding=[1, 0], output_padding=[1, 0],
                                     dilation=[1, 2], groups=2),
    "batchnorm": lambda: single("batchnorm", (2, 3, 4, 5), f32(3), f32(3), f32(3),
                                np.abs(f32(3)) + 0.5, np.array(10), eps=1e-3),
    "batchnorm_no_affine": lambda: single("batchnorm", (2, 3, 4), None, None, f32(3),
                                          np.abs(f32(3)) + 0.5),
    "batchnorm_batch_stats": lambda: single("batchnorm", (4, 3, 5), f32(3), f32(3),
                                            track_running_stats=False),
    "group_norm": lambda: single("group_norm", (2, 6, 3, 2), f32(6), f32(6), num_groups=3),
    "instance_norm": lambda: single("instance_norm", (2, 3, 7)),
    "layer_norm": lambda: single("layer_norm", (2, 3, 4, 5), f32(4, 5), f32(4, 5),
                                 normalized_shape=[4, 5]),
    "layer_norm_no_affine": lambda: single("layer_norm", (3, 8), normalized_shape=[8]),
    "layer_norm2d": lambda: single("layer_norm2d", (2, 5, 3, 4), f32(5), f32(5),
                                   normalized_shape=[5]),
    "rms_norm": lambda: single("rms_norm", (2, 3, 8), f32(8), eps=1e-5),
    "linear": lambda: single("linear", (2, 8), f32(5, 8), f32(5)),
    "linear_rank3": lambda: single("linear", (2, 3, 8), f32(5, 8)),
    "linear_batch_dim": lambda: single("linear", ("batch", 8), f32(5, 8), f32(5)),
    "lstm_cell": lstm,
    "lstm_cell_runtime_weights": lstm_runtime_weights,
    "lstm": lstm_sequence,
    "lstm_reverse": lambda: lstm_sequence(reverse=True),
    "lstm_runtime_weights": lstm_sequence_runtime_weights,
    "lstm_lengths": lambda: lstm_sequence(lengths=True),
    "lstm_lengths_reverse": lambda: lstm_sequence(reverse=True, lengths=True),
    "lstm_peepholes": lambda: lstm_sequence(peepholes=True),
    "lstm_peepholes_lengths_reverse": lambda: lstm_sequence(reverse=True, lengths=True,
                                                            peepholes=True),
    "gru_lengths_reverse": lambda: recurrence("gru", True, lengths=True),
    "gru_reset_after_lengths": lambda: recurrence("gru", lengths=True, linear_before_reset=False),
    "rnn_lengths": lambda: recurrence("rnn", lengths=True),
    "rnn_relu_lengths_reverse": lambda: recurrence("rnn", True, lengths=True,
                                                   nonlinearity="relu"),
    "gru": lambda: recurrence("gru"),
    "gru_reset_after_reverse": lambda: recurrence("gru", True, linear_before_reset=False),
    "gru_runtime_weights": lambda: recurrence_runtime_weights("gru"),
    "rnn": lambda: recurrence("rnn"),
    "rnn_relu_reverse": lambda: recurrence("rnn", True, nonlinearity="relu"),
    "rnn_runtime_weights": lambda: recurrence_runtime_weights("rnn"),
    "embedding": embedding_at_entry,
    "embedding_in_graph": embedding_computed,
    "identity": lambda: single("identity", (2, 3)),
    "relu": lambda: single("relu", (2, 3, 4)),
    "sigmoid": lambda: single("sigmoid", (2, 5), feed={"x": f32(2, 5, scale=30)}),
    "tanh": lambda: single("tanh", (4, 3)),
    "gelu": lambda: single("gelu", (3, 7), feed={"x": f32(3, 7, scale=3)}),
    "gelu_tanh": lambda: single("gelu", (3, 7), approximate="tanh"),
    "softmax": lambda: single("softmax", (2, 3, 4), axis=1),
    "clip": lambda: single("clip", (3, 4), min=-0.5, max=0.25),
    "clip_min_only": lambda: single("clip", (3, 4), min=0.1),
    "elu": lambda: single("elu", (3, 7), feed={"x": f32(3, 7, scale=4)}),
    "elu_alpha": lambda: single("elu", (3, 7), alpha=0.3),
    "leaky_relu": lambda: single("leaky_relu", (2, 5)),
    "leaky_relu_alpha": lambda: single("leaky_relu", (2, 5), alpha=0.2),
    "hard_sigmoid": lambda: single("hard_sigmoid", (3, 6), feed={"x": f32(3, 6, scale=5)}),
    "hard_sigmoid_torch": lambda: single("hard_sigmoid", (3, 6), alpha=1 / 6, beta=0.5,
                                         feed={"x": f32(3, 6, scale=5)}),
    "hard_swish": lambda: single("hard_swish", (3, 6), feed={"x": f32(3, 6, scale=5)}),
    "softplus": lambda: single("softplus", (3, 6), feed={"x": f32(3, 6, scale=30)}),
    "exp": lambda: single("exp", (2, 4)),
    "log": lambda: single("log", (2, 4), feed={"x": np.abs(f32(2, 4)) + 0.1}),
    "sqrt": lambda: single("sqrt", (2, 4), feed={"x": np.abs(f32(2, 4))}),
    "reciprocal": lambda: single("reciprocal", (2, 4), feed={"x": np.abs(f32(2, 4)) + 0.1}),
    "erf": lambda: single("erf", (3, 5), feed={"x": f32(3, 5, scale=2)}),
    "abs": lambda: single("abs", (2, 3)),
    "abs_int64": lambda: single("abs", (2, 3), in_dtype="int64"),
    "neg": lambda: single("neg", (2, 3)),
    "neg_int32": lambda: single("neg", (2, 3), in_dtype="int32"),
    "prelu": lambda: single("prelu", (2, 3, 4, 4), np.abs(f32(3, 1, 1)) * 0.2),
    "pow": lambda: binary("pow", (2, 3), (3,)),
    "max": lambda: binary("max", (2, 1, 4), (3, 1)),
    "min_int64": lambda: binary("min", (2, 3), (3,), "int64"),
    "equal": lambda: binary("equal", (2, 3), (3,), "int64"),
    "greater": lambda: binary("greater", (2, 1, 4), (3, 1)),
    "greater_equal": lambda: binary("greater_equal", (2, 3), (2, 3), "int32"),
    "less": lambda: binary("less", (4,), (2, 4)),
    "less_equal": lambda: binary("less_equal", (2, 3), (2, 3), "int64"),
    "not": not_where,
    "and": logic, "or": logic,
    "floor": lambda: single("floor", (3, 4), feed={"x": f32(3, 4, scale=4)}),
    "ceil": lambda: single("ceil", (3, 4), feed={"x": f32(3, 4, scale=4)}),
    "round": lambda: single("round", (2, 4), feed={"x": np.array(
        [[-2.5, -1.5, -0.5, 0.5], [1.5, 2.5, 0.49, -3.7]], np.float32)}),
    "where": not_where,
    "add": lambda: binary("add", (2, 1, 4), (3, 1)),
    "add_int64": lambda: binary("add", (2, 3), (3,), "int64"),
    "mul_int32": lambda: binary("mul", (2, 3), (2, 3), "int32"),
    "sub": lambda: binary("sub", (4,), (2, 4)),
    "mul": lambda: binary("mul", (2, 3), (2, 3)),
    "div": lambda: binary("div", (2, 3), (1, 3)),
    "matmul": lambda: binary("matmul", (2, 3, 4), (4, 5)),
    "matmul_1d": lambda: binary("matmul", (4,), (3, 4, 2)),
    "mean": lambda: single("mean", (2, 3, 4), axes=[0, -1], keepdim=True),
    "sum": lambda: single("sum", (2, 3, 4), axes=[1]),
    "sum_int64": lambda: single("sum", (2, 3, 4), in_dtype="int64", axes=[0, 2], keepdim=True),
    "amax": lambda: single("amax", (2, 3, 4), axes=[-1], keepdim=True),
    "amin": lambda: single("amin", (2, 3, 4), axes=[0, 1]),
    "argmax": lambda: single("argmax", (2, 3, 4), axis=1),
    "argmax_ties": lambda: single("argmax", (2, 5), in_dtype="int64", axis=-1, keepdim=True,
                                  feed={"x": np.array([[1, 4, 4, 0, 4], [2, 2, 2, 2, 2]])}),
    "mean_drop": lambda: single("mean", (2, 3, 4), axes=[1]),
    "sin": lambda: single("sin", (3, 5), feed={"x": f32(3, 5, scale=10)}),
    "cos": lambda: single("cos", (3, 5), feed={"x": f32(3, 5, scale=10)}),
    "sign": lambda: single("sign", (2, 4), feed={"x": np.array(
        [[-2.5, 0.0, -0.0, 3.0], [np.inf, -np.inf, np.nan, -1e-30]], np.float32)}),
    "sign_int32": lambda: single("sign", (2, 3), in_dtype="int32"),
    "log_softmax": lambda: single("log_softmax", (2, 3, 4), axis=1,
                                  feed={"x": f32(2, 3, 4, scale=30)}),
    "argmin": lambda: single("argmin", (2, 3, 4), axis=-1, keepdim=True),
    "argmin_ties": lambda: single("argmin", (3, 4), in_dtype="int32", axis=1, feed={
        "x": np.array([[1, 0, 0, 4], [2, 2, 2, 2], [5, 3, 4, 3]], np.int32)}),
    "prod": lambda: single("prod", (2, 3, 4), axes=[0, 2], keepdim=True),
    "prod_int64": lambda: single("prod", (2, 3, 4), in_dtype="int64", axes=[1]),
    "mod_fmod": lambda: single("mod", (3, 4), np.array([1.5, -1.5, 0.25, 7.0], np.float32),
                               fmod=True, feed={"x": f32(3, 4, scale=5)}),
    "mod_floor": lambda: single("mod", (3, 4), np.array([1.5, -1.5, 0.25, -7.0], np.float32),
                                feed={"x": np.array([[4.5, -4.5, 0.0, -0.0], [3.0, -3.0, np.inf,
                                                     np.nan], [1e-30, -1e-30, 7.0, -7.0]],
                                                    np.float32)}),
    "mod_int64": lambda: single("mod", (2, 4), np.array([3, -3, 5, -1]), in_dtype="int64",
                                feed={"x": np.array([[7, -7, 7, -7], [0, 4, -9, 2]])}),
    "mod_int32_fmod": lambda: single("mod", (2, 4), np.array([3, -3, 5, -1], np.int32),
                                     in_dtype="int32", fmod=True,
                                     feed={"x": np.array([[7, -7, 7, -7], [0, 4, -9, 2]],
                                                         np.int32)}),
    "int_div_int64": lambda: single("int_div", (2, 5), np.array([3, -3, 1, -1, 2**40]),
                                    in_dtype="int64", feed={"x": np.array(
                                        [[7, -7, 7, -7, -2**62], [2**63 - 1, -2**63, 0, 5, 9]])}),
    "int_div_int32": lambda: single("int_div", (2, 4), np.array([-2, 3, 7, -1], np.int32),
                                    in_dtype="int32", feed={"x": np.array(
                                        [[7, -7, -2**31, 2**31 - 1], [0, 4, -9, 2]], np.int32)}),
    "bitwise_and": lambda: bits("bitwise_and", "int64"),
    "bitwise_or": lambda: bits("bitwise_or", "uint8"),
    "bitwise_xor": lambda: bits("bitwise_xor", "int32"),
    "bitwise_not": lambda: bits("bitwise_not", "int32"),
    "bit_shift_left": lambda: bits("bit_shift", "uint8", direction="left"),
    "bit_shift_right": lambda: bits("bit_shift", "uint64", direction="right"),
    "gather_elements": lambda: single("gather_elements", (3, 4), np.array(
        [[3, 0, 3], [1, 1, 2]]), axis=1),
    "gather_elements_int64": lambda: single("gather_elements", (3, 4, 2), np.array(
        [[[0, 1]], [[2, 0]]]), in_dtype="int64", axis=-2,
        feed={"x": np.arange(3 * 4 * 2).reshape(3, 4, 2)}),
    "scatter_elements": lambda: scatter(x=f32(3, 4), idx=np.array([[2, 0, 1, 1]]),
                                        updates=f32(1, 4)),
    "scatter_elements_add_int64": lambda: scatter_random("add", "int64", axis=0),
    "tan": lambda: single("tan", (3, 5), feed={"x": f32(3, 5, scale=10)}),
    "atan": lambda: single("atan", (3, 5), feed={"x": f32(3, 5, scale=30)}),
    "asin": lambda: single("asin", (3, 5), feed={"x": _across(-1.5, 1.5)}),
    "acos": lambda: single("acos", (3, 5), feed={"x": _across(-1.5, 1.5)}),
    "sinh": lambda: single("sinh", (3, 5), feed={"x": f32(3, 5, scale=30)}),
    "cosh": lambda: single("cosh", (3, 5), feed={"x": f32(3, 5, scale=30)}),
    "asinh": lambda: single("asinh", (3, 5), feed={"x": f32(3, 5, scale=1e3)}),
    "acosh": lambda: single("acosh", (3, 5), feed={"x": _across(-1, 50)}),
    "atanh": lambda: single("atanh", (3, 5), feed={"x": _across(-1.5, 1.5)}),
    "isnan": lambda: single("isnan", (2, 4), feed={"x": _nan_inf()}),
    "isinf": lambda: single("isinf", (2, 4), feed={"x": _nan_inf()}),
    "isinf_positive": lambda: single("isinf", (2, 4), detect_negative=False,
                                     feed={"x": _nan_inf()}),
    "isinf_negative": lambda: single("isinf", (2, 4), detect_positive=False,
                                     feed={"x": _nan_inf()}),
    "cumsum": lambda: single("cumsum", (2, 5, 3), axis=1),
    "cumsum_exclusive_reverse": lambda: single("cumsum", (2, 5), axis=-1, exclusive=True,
                                               reverse=True),
    "cumsum_int32": lambda: single("cumsum", (4, 3), in_dtype="int32", axis=0, exclusive=True,
                                   feed={"x": np.array([[2**31 - 1, 0, -5]] * 4, np.int32)}),
    "topk": lambda: single("topk", (3, 6, 2), k=4, axis=1),
    "cumprod": lambda: single("cumprod", (2, 5, 3), axis=1),
    "cumprod_exclusive_reverse": lambda: single("cumprod", (2, 5), axis=-1, exclusive=True,
                                                reverse=True),
    "cumprod_int32": lambda: single("cumprod", (4, 3), in_dtype="int32", axis=0, reverse=True,
                                    feed={"x": np.array([[2**31 - 1, 3, -5]] * 4, np.int32)}),
    "cumprod_symbolic_batch": lambda: single("cumprod", ("n", 4, 3), axis=-1, exclusive=True),
    "cumprod_over_the_symbolic_dim": lambda: single("cumprod", ("n", 3), axis=0),
    "cumprod_empty": lambda: single("cumprod", (3, 0, 2), axis=1, exclusive=True),
    "det": lambda: single("det", (4, 3, 3)),
    "det_symbolic_batch": lambda: single("det", ("n", 2, 6, 6)),
    "det_matrix": lambda: single("det", (1, 1)),
    # singular, beyond float32's range, nan and infinities (nan on both: the ABI's rule)
    "det_extremes": lambda: single("det", (7, 2, 2), feed={"x": np.array(
        [[[1, 2], [2, 4]], [[0, 0], [0, 0]], [[1e30, 1e30], [1e30, -1e30]],
         [[np.nan, 1], [1, 1]], [[np.inf, 0], [0, 1]], [[1, -np.inf], [np.inf, 1]],
         [[3, 1], [1, 2]]], np.float32)}),
    "topk_smallest_ties_nan": lambda: single("topk", (2, 6), k=5, largest=False, feed={
        "x": np.array([[3, 1, 1, np.nan, -0.0, 0.0], [np.nan, 2, np.inf, np.nan, 2, -np.inf]],
                      np.float32)}),
    "topk_largest_ties_nan": lambda: single("topk", (2, 6), k=6, feed={
        "x": np.array([[3, 1, 1, np.nan, -0.0, 0.0], [np.nan, 2, np.inf, np.nan, 2, -np.inf]],
                      np.float32)}),
    "topk_int64": lambda: single("topk", (4, 5), in_dtype="int64", k=2, axis=0),
    "dynamic_quantize": lambda: single("dynamic_quantize", (3, 6, 2), feed={"x": f32(3, 6, 2,
                                                                            scale=4)}),
    "dynamic_quantize_symbolic": lambda: single("dynamic_quantize", ("n", 5)),
    "quantize_linear": lambda: single("quantize_linear", (3, 6, 2), np.array(0.05, np.float32),
                                      np.array(128, np.float32), dtype="uint8",
                                      feed={"x": f32(3, 6, 2, scale=8)}),
    "quantize_linear_int8_symbolic": lambda: single("quantize_linear", ("n", 5),
                                                    np.array(0.01, np.float32), dtype="int8"),
    "quantize_linear_per_channel": lambda: single(
        "quantize_linear", (2, 3, 4), np.array([[0.5], [0.01], [2]], np.float32),
        np.array([[-3], [0], [9]], np.float32), dtype="int8"),
    "quantize_linear_along_axis_0": lambda: single(
        "quantize_linear", (3, 4), np.array([[0.5], [0.01], [2]], np.float32), dtype="uint8"),
    "quantize_linear_scalar": lambda: single("quantize_linear", (), np.array(0.5, np.float32),
                                             np.array(3, np.float32), dtype="int8",
                                             feed={"x": np.array(-1.25, np.float32)}),
    "quantize_linear_int16": lambda: single("quantize_linear", (4, 5), np.array(1e-4, np.float32),
                                            np.array(-700, np.float32), dtype="int16"),
    "qlinear_conv": lambda: random_conv(np.random.default_rng(3), "uint8", "int8",
                                        per_channel=True, bias=True).graph(),
    "qlinear_sigmoid": lambda: qlinear_case("qlinear_sigmoid"),
    "qlinear_leaky_relu": lambda: qlinear_case("qlinear_leaky_relu", alpha=0.2),
    "qlinear_mul": lambda: qlinear_case("qlinear_mul"),
    "qlinear_add": lambda: qlinear_case("qlinear_add"),
    "qlinear_concat": lambda: qlinear_case("qlinear_concat"),
    "qlinear_softmax": lambda: qlinear_case("qlinear_softmax", axis=1, trailing=True),
    "qlinear_global_average_pool": lambda: qlinear_case("qlinear_global_average_pool"),
    "qlinear_average_pool": lambda: qlinear_case("qlinear_average_pool", kernel_size=[2],
                                                 stride=[1], padding=[[1, 0]]),
    "quantized_lstm": lambda: quantized_lstm(),
    "quantized_lstm_reverse_lengths_y": lambda: quantized_lstm(True, True, True),
    "integer_linear": lambda: single(
        "integer_linear", ("n", 7), RNG.integers(0, 256, (4, 7)).astype(np.uint8),
        np.array(200, np.uint8), RNG.integers(0, 256, 4).astype(np.uint8), in_dtype="uint8"),
    "integer_linear_int8": lambda: single(
        "integer_linear", (2, 3, 7), RNG.integers(-128, 128, (5, 7)).astype(np.int8),
        np.array(-100, np.int8), in_dtype="int8"),
    "topk_sort": lambda: single("topk", ("n", 2, "m"), k=-1, largest=False),
    "cast_to_int32": lambda: single("cast", (3, 4), dtype="int32",
                                    feed={"x": f32(3, 4, scale=5)}),
    "cast_to_float": lambda: single("cast", (3, 4), in_dtype="int64", dtype="float32"),
    "bitcast_float_to_int": lambda: single("bitcast", ("n", 4), dtype="int32", feed={
        "x": _nan_inf()}),
    "bitcast_int_to_float": lambda: single("bitcast", (2, 3), in_dtype="int32",
                                           dtype="float32", feed={"x": np.array(
                                               [[0, 1, -1], [2**30, -2**31, 0x7F800000]],
                                               np.int32)}),
    "bitcast_uint8_to_int8": lambda: single("bitcast", (5,), in_dtype="uint8", dtype="int8",
                                            feed={"x": np.array([0, 1, 127, 128, 255],
                                                                np.uint8)}),
    "concat": concat,
    "reshape": lambda: single("reshape", (2, 3, 4), shape=[4, -1]),
    "flatten": lambda: single("flatten", (2, 3, 4, 5), start_dim=1, end_dim=2),
    "flatten_batch_dim": lambda: single("flatten", ("batch", 3, 4), start_dim=1),
    "unflatten": lambda: single("unflatten", (2, 12, 3), axis=1, sizes=[2, 3, 2]),
    "unflatten_run_time": lambda: single("unflatten", ("n", "l", 12), axis=2, sizes=[3, -1]),
    "unflatten_run_time_axis": lambda: single("unflatten", (2, "l", 3), axis=1, sizes=[2, 3],
                                              feed={"x": f32(2, 6, 3)}),
    "transpose": lambda: single("transpose", (2, 3, 4), perm=[2, 0, 1]),
    "slice": lambda: single("slice", (5, 6, 7), starts=[4, -2, 1], ends=[0, 100, -1],
                           axes=[0, 2, 1], steps=[-2, 1, 2]),
    "split": lambda: single("split", (2, 7), axis=1, sizes=[3, 0, 4]),
    "split_one": lambda: single("split", (2, 7), axis=1, sizes=[7]),  # ONNX Split, one output
    "gather_scalar": lambda: single("gather", (2, 5, 3), np.array(4), axis=1),
    "gather_2d_indices": lambda: single("gather", ("batch", 5, 3), np.array([[2, 0], [2, 4]]),
                                        axis=-2),
    "gather_int64": lambda: single("gather", (4, 3), np.array([3, 3, 0]), in_dtype="int64"),
    "expand": lambda: single("expand", (3, 1), shape=[2, 1, 4]),
    "expand_batch_dim": lambda: single("expand", ("batch", 1, 2), shape=[3, 1]),
    "tile": lambda: single("tile", (2, 1, 3), repeats=[1, 4, 2]),
    "tile_bool": lambda: single("tile", (2, 3), in_dtype="bool", repeats=[3, 1],
                                feed={"x": RNG.integers(0, 2, (2, 3)).astype(bool)}),
    "pad_constant": lambda: single("pad", (2, 3, 4), pads=[[0, 0], [1, 2], [3, 0]],
                                   value=1.5),
    "pad_reflect": lambda: single("pad", (1, 3, 4), pads=[[0, 0], [2, 1], [1, 3]],
                                  mode="reflect"),
    "pad_edge": lambda: single("pad", (1, 2, 3), pads=[[0, 0], [0, 0], [2, 2]], mode="edge"),
    "max_pool": lambda: single("max_pool", (1, 2, 7, 8), kernel_size=[3, 2], stride=[2, 2],
                               padding=[[1, 1], [0, 1]], dilation=[1, 2], ceil_mode=True),
    "max_pool1d": lambda: single("max_pool", (2, 3, 9), kernel_size=[2], stride=[2],
                                 padding=[[0, 0]], dilation=[1]),
    "max_pool_with_indices": lambda: single(
        "max_pool_with_indices", ("n", 2, 7, 8), kernel_size=[3, 2], stride=[2, 2],
        padding=[[1, 1], [0, 1]], dilation=[1, 2], ceil_mode=True,
        feed={"x": RNG.choice(np.array([np.nan, np.inf, -np.inf, 1.0, 1.0, 2.0, -0.0],
                                       np.float32), (2, 2, 7, 8))}),
    "max_pool_with_indices1d": lambda: single("max_pool_with_indices", (2, 3, 9),
                                              kernel_size=[3], stride=[2], padding=[[1, 0]],
                                              dilation=[1]),
    "max_pool3d": lambda: single("max_pool", (2, 2, 5, 6, 7), kernel_size=[2, 3, 2],
                                 stride=[1, 2, 2], padding=[[1, 1], [1, 0], [0, 1]],
                                 dilation=[2, 1, 1], ceil_mode=True, feed={"x": RNG.choice(
                                     np.array([np.nan, np.inf, -np.inf, 1.0, 2.0, -0.0],
                                              np.float32), (2, 2, 5, 6, 7))}),
    "max_pool_with_indices3d": lambda: single(
        "max_pool_with_indices", ("n", 2, 5, 6, 7), kernel_size=[3, 2, 3], stride=[2, 1, 2],
        padding=[[1, 1], [0, 1], [1, 0]], dilation=[1, 2, 1], ceil_mode=True,
        feed={"x": RNG.choice(np.array([np.nan, np.inf, -np.inf, 1.0, 1.0, 2.0, -0.0],
                                       np.float32), (3, 2, 5, 6, 7))}),
    "avg_pool3d": lambda: single("avg_pool", (2, 2, 5, 6, 7), kernel_size=[3, 2, 3],
                                 stride=[2, 1, 2], padding=[[1, 1], [1, 0], [1, 1]],
                                 count_include_pad=False, ceil_mode=True),
    "avg_pool3d_count_pad": lambda: single("avg_pool", (1, 2, 4, 5, 6), kernel_size=[2, 3, 3],
                                           stride=[2, 2, 1], padding=[[1, 0], [1, 1], [1, 1]]),
    "avg_pool": lambda: single("avg_pool", (1, 2, 7, 6), kernel_size=[3, 3], stride=[2, 2],
                               padding=PAD1, count_include_pad=False),
    "avg_pool_count_pad": lambda: single("avg_pool", (1, 2, 5, 5), kernel_size=[2, 2],
                                         stride=[1, 2], padding=PAD1),
    "avg_pool_ceil": lambda: single("avg_pool", (1, 2, 6, 7), kernel_size=[3, 3], stride=[2, 2],
                                    padding=PAD1, ceil_mode=True),
    "resize_nearest": lambda: single("resize", ("n", 2, 4, 5), size=[8, 7], scales=[2.0, 1.5],
                                     coordinate_mode="asymmetric", nearest_mode="floor"),
    "resize_bilinear": lambda: single("resize", (1, 2, 5, 6), size=[3, 9], mode="linear"),
    "resize_linear1d": lambda: single("resize", (2, 3, 6), size=[4], mode="linear",
                                      coordinate_mode="align_corners"),
    "resize_run_time_spatial": lambda: single("resize", (1, 2, "h", "w"), size=[5, 4],
                                              mode="linear",
                                              coordinate_mode="pytorch_half_pixel"),
    "resize_run_time_scales": lambda: resize_by_scales_run_time(),
    "resize_like": lambda: resize_like(),
    "resize_bicubic": lambda: single("resize", ("n", 2, 4, 5), size=[8, 12], scales=[2.0, 2.5],
                                     mode="cubic"),
    "resize_bicubic_exclude_outside": lambda: single(
        "resize", (1, 2, 5, 6), size=[3, 9], mode="cubic", coordinate_mode="align_corners",
        cubic_coeff_a=-0.5, exclude_outside=True),
    "grid_sample_zeros": lambda: single("grid_sample", ("n", 2, 4, 5), grid(3, 6, 7)),
    "grid_sample_nearest": lambda: single("grid_sample", (2, 3, 5, 4), grid(2, 3, 8),
                                          mode="nearest", padding_mode="border",
                                          align_corners=True),
    "grid_sample_border_edges": lambda: single("grid_sample", (1, 2, 3, 6), grid(1, 5, 4),
                                               padding_mode="border"),
    "grid_sample_run_time_grid": lambda: grid_sample_run_time(align_corners=True),
    "grid_sample_run_time_reflection": lambda: grid_sample_run_time(padding_mode="reflection"),
    "grid_sample_cubic": lambda: single("grid_sample", ("n", 2, 4, 5), grid(3, 6, 7),
                                        mode="cubic"),
    "grid_sample_cubic_border": lambda: single("grid_sample", (1, 2, 3, 6), grid(1, 5, 4),
                                               mode="cubic", padding_mode="border",
                                               align_corners=True),
    "grid_sample_cubic_run_time_grid": lambda: grid_sample_run_time(
        mode="cubic", padding_mode="border"),
    "grid_sample_cubic_run_time_reflection": lambda: grid_sample_run_time(
        mode="cubic", padding_mode="reflection", align_corners=True),
}


def assert_same(graph, feed, *, rtol=1e-4, atol=1e-5):
    want = Executor(graph, NumpyBackend()).run(feed)
    ex = Executor(graph, OnnxruntimeBackend())
    assert ex.whole_graph  # one onnxruntime session, not node by node
    got = ex.run(feed)
    assert set(got) == set(want)
    for name, value in want.items():
        assert got[name].dtype == value.dtype, name
        assert got[name].shape == value.shape, name
        np.testing.assert_allclose(got[name], value, rtol=rtol, atol=atol, err_msg=name)
    return got


@pytest.mark.parametrize("bad", [-1, 5])
@pytest.mark.parametrize("op", ["gather_elements", "scatter_elements"])
def test_run_time_index_out_of_range_is_the_numpy_error(op, bad):
    """The run-time indices are guarded as an Embedding's: the same IndexRangeError as on
    numpy (nothing is returned), where onnxruntime would count -1 from the end."""
    idx = np.array([[0, 4, 2], [1, bad, 3]])
    if op == "scatter_elements":
        graph, feed = scatter(x=f32(2, 5), idx=idx, updates=f32(2, 3), axis=1)
    else:
        b = GraphBuilder(op)
        x, i = b.input("x", (2, 5), "float32", "ANY"), b.input("i", (2, 3), "int64", "ANY")
        b.output(b.op(op, x, i, name="node", axis=1), "y", "ANY")
        graph, feed = b.build(), {"x": f32(2, 5), "i": idx}
    for backend in (NumpyBackend(), OnnxruntimeBackend()):
        with pytest.raises(IndexRangeError, match=rf"node 'node'.*1 {op} index\(es\) outside "
                                                  rf"\[0, 5\): \(1, 1\)={bad}"):
            Executor(graph, backend).run(dict(feed))
    feed["i"][1, 1] = 0
    assert_same(graph, feed)


@pytest.mark.parametrize("sizes", [[-1, 3], [2, 3]])
def test_unflatten_of_a_symbolic_dim_that_does_not_split_is_refused(sizes):
    """Known only when the call runs: numpy's ShapeError; onnxruntime refuses the Reshape,
    and the unflatten rule asked of the call's sizes then refuses it too, a ShapeError naming
    the node; nothing is returned. (Summed over the split axis: with a -1 its size is an
    expression, which a graph output cannot have.)"""
    b = GraphBuilder("unflatten")
    x = b.input("x", (2, "l"), "float32", "ANY")
    b.output(b.op("sum", b.op("unflatten", x, name="node", axis=1, sizes=sizes), name="total",
                  axes=[1]), "y", "ANY")
    graph = b.build()
    with pytest.raises(ShapeError, match=r"unflatten: axis 1 of x shape \(2, 7\) \(7\) does "
                                         r"not split into sizes"):
        Executor(graph, NumpyBackend()).run({"x": f32(2, 7)})
    with pytest.raises(ShapeError, match=r"^unflatten: axis 1 of x shape \(2, 7\)") as info:
        Executor(graph, OnnxruntimeBackend()).run({"x": f32(2, 7)})
    assert info.value.context["node"] == "node"
    assert_same(graph, {"x": f32(2, 6)})


@pytest.mark.parametrize("sizes, like_axes", [([-1, -1], [0, 1]), ([-1, 2, -1], [0, -1, 1]),
                                               ([-1, -1, 2], [0, -1, -1])],
                         ids=["both", "with-a-fixed-size", "with-a-minus-one"])
def test_unflatten_sizes_read_from_like(sizes, like_axes):
    """An axis (m) split into sizes like's shape gives when the call runs (like (l, n)):
    the same on both backends, an empty like too (a -1 beside a size like gives as 0 is 0
    on both); a dim that does not split is refused on each, a ShapeError naming the node
    (on onnxruntime, which refuses the Reshape, the unflatten rule asked of the call's
    sizes)."""
    b = GraphBuilder("unflatten")
    x = b.input("x", ("m", 4), "float32", "ANY")
    like = b.input("like", ("l", "n"), "bool", "ANY")
    y = b.op("unflatten", x, like, name="node", axis=0, sizes=sizes, like_axes=like_axes)
    if like_axes[1] == -1 and sizes[1] == -1:  # its size is an expression: summed away
        y = b.op("sum", y, name="total", axes=[1])
    b.output(y, "y", "ANY")
    graph = b.build()
    fixed = 2 if 2 in sizes else 1
    for l, n in ((2, 3), (1, 1), (0, 3), (3, 0)):
        assert_same(graph, {"x": f32(l * n * fixed, 4), "like": np.ones((l, n), bool)})
    bad = {"x": f32(7, 4), "like": np.ones((2, 3), bool)}
    with pytest.raises(ShapeError, match=r"unflatten: axis 0 of x shape \(7, 4\) \(7\) does "
                                         r"not split into sizes"):
        Executor(graph, NumpyBackend()).run(bad)
    with pytest.raises(ShapeError, match=r"^unflatten: .*\(7, 4\)") as info:
        Executor(graph, OnnxruntimeBackend()).run(bad)
    assert info.value.context["node"] == "node"


@pytest.mark.parametrize("bound", ["like_starts", "like_ends"])
def test_slice_bounds_read_from_like(bound):
    """x[k:] or x[:k] along a symbolic axis h, k like's dim when the call runs: the same on
    both backends, a k of 0 or beyond h too (clamped, as Python slicing)."""
    b = GraphBuilder("slice")
    x = b.input("x", ("h", 3), "float32", "ANY")
    like = b.input("like", ("k",), "bool", "ANY")
    ends = [1 << 62] if bound == "like_starts" else [0]
    y = b.op("slice", x, like, name="node", starts=[0], ends=ends, axes=[0],
             **{bound: [0]})
    b.output(b.op("sum", y, name="total", axes=[0]), "y", "ANY")
    graph = b.build()
    for h, k in ((5, 2), (5, 0), (5, 5), (3, 7), (0, 0)):
        assert_same(graph, {"x": f32(h, 3), "like": np.ones(k, bool)})


def _along_symbolic(op: str, dtype: str, constant: np.ndarray | None = None,
                    reduction: str = "none"):
    """``op`` (gather_elements, scatter_elements) along the symbolic dim 'T' of x (2, T), at
    run-time indices ``i`` (2, 3) or at the ``constant`` ones; a scatter writes ``u``."""
    b = GraphBuilder("along")
    x = b.input("x", (2, "T"), dtype, "ANY")
    i = b.constant("idx", constant) if constant is not None else b.input("i", (2, 3), "int64",
                                                                         "ANY")
    if op == "scatter_elements":
        y = b.op(op, x, i, b.input("u", (2, 3), dtype, "ANY"), name="node", axis=1,
                 reduction=reduction)
    else:
        y = b.op(op, x, i, name="node", axis=1)
    b.output(y, "y", "ANY")
    return b.build()


def _along_feed(op: str, dtype: str, size: int, idx: np.ndarray | None) -> dict:
    feed = {"x": (RNG.standard_normal((2, size)) * 9).astype(dtype)}
    if op == "scatter_elements":
        feed["u"] = (RNG.standard_normal((2, 3)) * 9).astype(dtype)
    return feed if idx is None else {**feed, "i": idx}


@pytest.mark.parametrize("op, reduction, dtype", [
    (op, reduction, dtype) for op, reduction in (("gather_elements", "none"),
                                                 ("scatter_elements", "none"),
                                                 ("scatter_elements", "add"))
    for dtype in ("float32", "bool", "int16", "uint16", "uint64")
    if reduction == "none" or dtype != "bool"])  # a reduction needs a numeric x
def test_an_index_op_along_a_symbolic_dim_is_checked_against_the_call_s_size(op, reduction,
                                                                               dtype):
    """The dim is read from x when the call runs (Shape) and comes back beside the guarded
    indices: the same values as numpy at every size, and the same IndexRangeError for an
    index past the size this call gives, an empty axis included (x is padded by one element
    there, so onnxruntime's own kernel stays in bounds, and a scatter's result is cut back
    to the size; the bool and 16-bit dtypes take the Pad of another dtype)."""
    graph = _along_symbolic(op, dtype, reduction=reduction)
    idx = np.array([[0, 2, 2], [2, 0, 1]])
    for size in (3, 4, 9):
        assert_same(graph, _along_feed(op, dtype, size, idx))
    for size, bad in ((2, "(0, 1)=2"), (0, "(0, 0)=0")):
        for backend in (NumpyBackend(), OnnxruntimeBackend()):
            with pytest.raises(IndexRangeError, match=rf"node 'node'.* outside \[0, {size}\): "
                                                      rf"{re.escape(bad)}"):
                Executor(graph, backend).run(_along_feed(op, dtype, size, idx))


@pytest.mark.parametrize("op", ["gather_elements", "scatter_elements"])
def test_constant_indices_along_a_symbolic_dim_are_checked_when_the_call_runs(op):
    graph = _along_symbolic(op, "float32", np.array([[0, 3, 1], [3, 2, 0]], np.int64))
    assert_same(graph, _along_feed(op, "float32", 4, None))
    for backend in (NumpyBackend(), OnnxruntimeBackend()):
        with pytest.raises(IndexRangeError, match=r"node 'node'.* outside \[0, 3\): \(0, 1\)=3"):
            Executor(graph, backend).run(_along_feed(op, "float32", 3, None))


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", ["float32", "int32", "int64"])
def test_scatter_elements_gives_the_numpy_backend_bits(reduction, dtype):
    """Bit for bit, duplicate indices, nan, inf and signed zeros included: onnxruntime's
    kernel applies the updates in the indices' order, as the op and the numpy kernel do."""
    for seed in range(6):
        graph, feed = scatter_random(reduction, dtype, axis=seed % 2)
        want = Executor(graph, NumpyBackend()).run(dict(feed))["y"]
        got = Executor(graph, OnnxruntimeBackend()).run(dict(feed))["y"]
        assert got.dtype == want.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got.view(f"u{got.itemsize}"),
                                      want.view(f"u{want.itemsize}"), err_msg=str(seed))


def _assert_same_bits(got, want, err_msg=""):
    """Same dtype, shape and bits, -0.0 and infinities included; nan exactly where want has
    nan (a nan's sign, which IEEE leaves open, is not compared: onnxruntime's Mul and numpy's
    multiply each take it from either nan operand of a product, by their vector lanes)."""
    assert got.dtype == want.dtype and got.shape == want.shape, err_msg
    nan = np.isnan(want) if want.dtype.kind == "f" else np.zeros(want.shape, bool)
    np.testing.assert_array_equal(np.isnan(got) if got.dtype.kind == "f" else nan, nan,
                                  err_msg=err_msg)
    np.testing.assert_array_equal(got[~nan].view(f"u{got.itemsize}"),
                                  want[~nan].view(f"u{want.itemsize}"), err_msg=err_msg)


def _cumprod_values(dtype, shape):
    """Floats: nan, infinities, signed zeros, extremes whose products overflow and denormals
    that underflow, with factors that would bring a product back; integers: the dtype's
    limits and small values, whose products wrap."""
    if dtype == "float32":
        pool = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 3e38, -3e38, 1e30, 1e-30, 1e-45,
                         2.0, -0.5, 1.5, 1e-10], np.float32)
        return RNG.choice(pool, shape)
    small = np.arange(-3 if np.iinfo(dtype).min else 0, 4).astype(dtype)
    return RNG.choice(np.concatenate([_int_extremes(dtype, 16), small]), shape)


@pytest.mark.parametrize("dtype", ["float32", "int8", "uint8", "int16", "int32", "int64"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_cumprod_gives_the_numpy_backend_bits(dtype, axis):
    """A Scan over the axis multiplying in x's dtype, one slice after the other: bit for bit
    the numpy kernel, integers wrapped and floats overflowing to inf (or nan at a 0) where a
    later factor would have brought the product back, each exclusive and reverse."""
    for exclusive in (False, True):
        for reverse in (False, True):
            graph, _ = single("cumprod", (4, 6, 5), in_dtype=dtype, axis=axis,
                              exclusive=exclusive, reverse=reverse)
            for _ in range(3):
                feed = {"x": _cumprod_values(dtype, (4, 6, 5))}
                want = Executor(graph, NumpyBackend()).run(dict(feed))["y0"]
                got = Executor(graph, OnnxruntimeBackend()).run(dict(feed))["y0"]
                _assert_same_bits(got, want,
                                  err_msg=f"exclusive={exclusive}, reverse={reverse}")


def test_cumprod_takes_a_run_time_length_and_empty_tensors():
    """The axis' length and another dim known only when the call runs, 0 included (Scan of
    zero steps fails in onnxruntime, and along an inner axis dies of a division by zero on an
    empty tensor: the axis is moved first and one slice of ones appended)."""
    b = GraphBuilder("cumprod")
    x = b.input("x", ("n", "t", 3), "float32", "ANY")
    for i, (exclusive, reverse) in enumerate([(False, False), (True, True), (True, False)]):
        b.output(b.op("cumprod", x, name=f"node{i}", axis=1, exclusive=exclusive,
                      reverse=reverse), f"y{i}", "ANY")
    graph = b.build()
    for n, t in ((2, 5), (1, 1), (2, 0), (0, 4), (0, 0)):
        feed = {"x": _cumprod_values("float32", (n, t, 3))}
        want = Executor(graph, NumpyBackend()).run(dict(feed))
        got = Executor(graph, OnnxruntimeBackend()).run(dict(feed))
        for name in want:
            _assert_same_bits(got[name], want[name], err_msg=f"{name} of shape {(n, t, 3)}")


@pytest.mark.parametrize("divisor, message", [(0, "Integer division by zero"),
                                              (-1, "Integer division by zero")])
def test_int_div_by_zero_or_overflowing_is_refused_not_a_crash(divisor, message):
    """ONNX Div refuses a zero divisor; the minimum / -1 would trap the process (SIGFPE), so
    the conversion turns it into a zero divisor: refused as well, as the numpy kernel does."""
    graph, _ = single("int_div", (3,), np.array([1, divisor, 2]), in_dtype="int64")
    ex = Executor(graph, OnnxruntimeBackend())
    feed = {"x": np.array([5, -2**63, 7])}
    with pytest.raises(BackendError, match=message):
        ex.run(feed)
    feed["x"][1] = 6
    if divisor:
        assert ex.run(feed)["y0"].tolist() == [5, -6, 3]


def _quantize_feeds():
    """x of (n, 5): edges (ties, infinities, subnormals, a range past float32's), then a nan
    at each of 35 positions (onnxruntime's vectorised min and max keep or drop a nan by its
    position)."""
    def rows(*values):
        return np.resize(np.asarray(values, np.float32), (len(values) // 5 + 2, 5))

    yield from (rows(0.0), rows(-0.0, 0.0), rows(0.0, 127.5, 0.25, 0.75, 1.25, 1.75, 2.25),
                rows(-0.75, 126.75, -0.25, 0.25, 3.0), rows(np.inf, 1.0, -2.0),
                rows(-np.inf, 1.0, 2.0), rows(np.inf, -np.inf, 0.0), rows(1e-45, 0.0, 3e-45),
                rows(3.4e38, -3.4e38, 1.0), rows(1e38, -1e38, 3e37), f32(1, 5), f32(9, 5, scale=7))
    base = f32(7, 5, scale=3)
    for at in range(base.size):
        x = base.copy()
        x.reshape(-1)[at] = np.nan
        yield x


@pytest.mark.filterwarnings("error")  # nothing reaches numpy's casts or comparisons as a nan
def test_dynamic_quantize_gives_the_numpy_backend_bits():
    """Bit for bit (the tolerance of assert_same is for floats), a nan anywhere included."""
    graph, _ = CASES["dynamic_quantize_symbolic"]()
    numpy, onnxruntime = Executor(graph, NumpyBackend()), Executor(graph, OnnxruntimeBackend())
    nans = 0
    for x in _quantize_feeds():
        want = numpy.run({"x": x})
        assert_equal_bits(onnxruntime.run({"x": x}), want)
        nans += bool(np.isnan(want["y1"]))
    assert nans == 35


@pytest.mark.filterwarnings("error")
def test_dynamic_quantize_sees_a_nan_at_every_position_of_a_vector():
    """The nan test (one sum of squares) over sizes that fill vector registers partly and
    whole: a nan at each position gives the nan scale; infinities of both signs and squares
    past float32's range (1e20) beside it give none."""
    b = GraphBuilder("dynamic_quantize")
    b.output(b.op("dynamic_quantize", b.input("x", ("n",), "float32", "ANY"), name="node")[1],
             "scale", "ANY")
    graph = b.build()
    numpy, onnxruntime = Executor(graph, NumpyBackend()), Executor(graph, OnnxruntimeBackend())
    for n in [*range(1, 70), 255, 256, 257, 4099]:
        base = f32(n, scale=1e20)
        base[::3], base[1::5] = np.inf, -np.inf
        positions = range(n) if n < 300 else RNG.integers(0, n, 100)
        for x in [base, *(np.where(np.arange(n) == at, np.nan, base) for at in positions)]:
            want = numpy.run({"x": x})["scale"]
            np.testing.assert_array_equal(onnxruntime.run({"x": x})["scale"], want)
            assert np.isnan(want) == np.isnan(x).any()


@pytest.mark.parametrize("backend", [NumpyBackend, OnnxruntimeBackend])
def test_dynamic_quantize_of_an_empty_run_time_x_is_refused(backend):
    graph, _ = CASES["dynamic_quantize_symbolic"]()
    with pytest.raises(ShapeError, match=r"dynamic_quantize: x of shape \(0, 5\) is empty: "
                       r"its min and max are undefined"):
        Executor(graph, backend()).run({"x": np.zeros((0, 5), np.float32)})


def quantize_linear_graph(x, scale, zero_point, dtype: str, constant: bool):
    """A graph of one quantize_linear of x by scale and zero point (constants, or inputs
    given when the call runs) and its feed; its onnxruntime model's op types."""
    b = GraphBuilder("quantize_linear")
    feed = {"x": x}
    names = [b.input("x", x.shape, "float32", "ANY")]
    for name, value in (("scale", scale), ("zero_point", zero_point)):
        if value is None:
            continue
        if constant:
            names.append(b.constant(name, value))
        else:
            names.append(b.input(name, value.shape, "float32", "ANY"))
            feed[name] = value
    b.output(b.op("quantize_linear", *names, name="node", dtype=dtype), "y", "ANY")
    graph = b.build()
    return graph, feed, model_ops(graph)


def assert_same_bits(graph, feed) -> None:
    """The onnxruntime backend's outputs equal to the numpy backend's bit for bit."""
    assert_equal_bits(Executor(graph, OnnxruntimeBackend()).run(dict(feed)),
                      Executor(graph, NumpyBackend()).run(dict(feed)))


def assert_equal_bits(got, want) -> None:
    """Every output of ``want`` in ``got`` bit for bit: its dtype, values, zeros' signs."""
    for name, value in want.items():
        assert got[name].dtype == value.dtype, name
        np.testing.assert_array_equal(got[name], value, err_msg=name)
        np.testing.assert_array_equal(np.signbit(got[name]), np.signbit(value), err_msg=name)


@pytest.mark.filterwarnings("error")  # nothing reaches numpy's casts or comparisons as a nan
@pytest.mark.parametrize("constant", [True, False], ids=["constant", "run_time"])
@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
@pytest.mark.parametrize("dtype", ["uint8", "int8", "uint16", "int16"])
def test_quantize_linear_gives_the_numpy_backend_bits(dtype, per_channel, constant):
    """Bit for bit over ties, saturation, nan, infinities, signed zeros and subnormals, with
    and without a zero point; onnxruntime's QuantizeLinear kernel runs where the parameters
    are constants, per tensor or per channel, the element-wise ops where they come when the
    call runs."""
    rng = np.random.default_rng(12)
    for _ in range(4):
        x, scale, zp = quantize_linear_feeds(rng, dtype, per_channel)
        shape = (3, 1) if per_channel else ()
        for zero_point in (zp.astype(np.float32).reshape(shape), None):
            graph, feed, ops = quantize_linear_graph(x, scale.reshape(shape), zero_point, dtype,
                                                     constant)
            assert ("QuantizeLinear" in ops) == constant and ("Div" in ops) != constant
            assert_same_bits(graph, feed)


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("scale, zero_point", [(0.0, 5.0), (np.inf, 5.0), (np.nan, 5.0),
                                               (0.5, 3.5), (0.5, 300.0), (-0.5, 0.0)])
def test_quantize_linear_of_odd_parameters_gives_the_numpy_backend_bits(scale, zero_point):
    """A scale of 0, inf or nan (computed at run time, or a constant), a zero point that is no
    code of the type (3.5, 300) and a negative scale: no QuantizeLinear kernel where the
    constant could not be its parameter, the ABI's arithmetic either way."""
    x = np.array([[2.0, -2.0, 0.0, -0.0, 0.25, np.inf, -np.inf, np.nan, 1e-45, 3e38]],
                 np.float32)
    for constant in (True, False):
        graph, feed, ops = quantize_linear_graph(x, np.array(scale, np.float32),
                                                 np.array(zero_point, np.float32), "uint8",
                                                 constant)
        assert "QuantizeLinear" not in ops
        assert_same_bits(graph, feed)


@pytest.mark.parametrize("constant", [True, False], ids=["constant", "run_time"])
@pytest.mark.parametrize("w_dtype", ["uint8", "int8"])
@pytest.mark.parametrize("x_dtype", ["uint8", "int8"])
def test_integer_linear_gives_the_numpy_backend_bits(x_dtype, w_dtype, constant, u8s8):
    """Exact (the tolerance of assert_same is for floats) for every pair of dtypes, the ends
    of their ranges (an int8 code moved to uint8 for onnxruntime's uint8 kernel keeps its
    difference to its zero point), zero points per tensor, per column and absent, sums
    past 2**24 and past int32 (wrapped)."""
    rng = np.random.default_rng(5)
    for lead, k, zero_points in (((3,), 9, "column"), ((2, 4), 600, "tensor"), ((1,), 5, "none"),
                                 ((2,), 34_000, "tensor")):
        x, w = integer_codes(rng, x_dtype, lead + (k,)), integer_codes(rng, w_dtype, (3, k))
        if k == 34_000:  # every product 255 * 255 (or 255 * -255)
            x[...] = np.iinfo(x_dtype).max
            w[...] = np.iinfo(w_dtype).min
        x_zp = None if zero_points == "none" else np.array(np.iinfo(x_dtype).min, x_dtype)
        w_zp = {"none": None, "tensor": np.array(np.iinfo(w_dtype).max, w_dtype),
                "column": integer_codes(rng, w_dtype, (3,))}[zero_points]
        graph, feed = integer_linear_graph(x, w, x_zp, w_zp, constant)
        want = Executor(graph, NumpyBackend()).run(dict(feed))["y"]
        got = Executor(graph, OnnxruntimeBackend()).run(dict(feed))["y"]
        assert got.dtype == want.dtype == np.int32
        np.testing.assert_array_equal(got, want, err_msg=f"K={k}")
        np.testing.assert_array_equal(want, torch_integer_linear(x, w, x_zp, w_zp))


@pytest.mark.parametrize("constant", [True, False], ids=["constant", "run_time"])
@pytest.mark.parametrize("lead, k, n", [((), 5, 3), ((0,), 5, 3), ((2,), 0, 3), ((2, 0, 3), 4, 2),
                                        ((3,), 4, 0)])
def test_integer_linear_edges_give_the_numpy_backend_bits(lead, k, n, constant):
    """A 1-D x, empty leading dims, no outputs, and no inputs (K = 0, where onnxruntime's
    MatMulInteger alone gives what its buffer held): the sums of the numpy backend, zeros
    over no inputs."""
    rng = np.random.default_rng(3)
    x, w = integer_codes(rng, "int8", lead + (k,)), integer_codes(rng, "uint8", (n, k))
    graph, feed = integer_linear_graph(x, w, np.array(3, np.int8),
                                       integer_codes(rng, "uint8", (n,)), constant)
    want = Executor(graph, NumpyBackend()).run(dict(feed))["y"]
    got = Executor(graph, OnnxruntimeBackend()).run(dict(feed))["y"]
    assert got.dtype == want.dtype == np.int32 and got.shape == want.shape == lead + (n,)
    np.testing.assert_array_equal(got, want)
    assert k or not got.any()


def test_integer_linear_over_a_run_time_number_of_inputs():
    """K known only when the call runs (x and the weight fed): 0 gives zeros, as on numpy."""
    b = GraphBuilder("integer_linear_k")
    x = b.input("x", (2, "k"), "uint8", "ANY")
    w = b.input("w", (3, "k"), "int8", "ANY")
    b.output(b.op("integer_linear", x, w, None, b.constant("z", np.array([1, 0, -1], np.int8)),
                  name="node"), "y", "ANY")
    graph, rng = b.build(), np.random.default_rng(4)
    for k in (0, 1, 6):
        feed = {"x": integer_codes(rng, "uint8", (2, k)), "w": integer_codes(rng, "int8", (3, k))}
        want = Executor(graph, NumpyBackend()).run(dict(feed))["y"]
        got = Executor(graph, OnnxruntimeBackend()).run(dict(feed))["y"]
        np.testing.assert_array_equal(got, want, err_msg=f"K={k}")
        assert k or not got.any()


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8", "uint64"])
def test_bitwise_ops_give_the_numpy_backend_bits_in_every_integer_dtype(dtype):
    """Exact, at the extremes of each integer dtype the backend takes (the tolerance of
    assert_same is for floats); a shift by the bit width or more gives 0 on both."""
    cases = [bits(op, dtype) for op in ("bitwise_and", "bitwise_or", "bitwise_xor",
                                        "bitwise_not")]
    if dtype.startswith("uint"):
        cases += [bits("bit_shift", dtype, direction=d) for d in ("left", "right")]
    for graph, feed in cases:
        want = Executor(graph, NumpyBackend()).run(dict(feed))["y"]
        got = Executor(graph, OnnxruntimeBackend()).run(dict(feed))["y"]
        assert got.dtype == want.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got, want, err_msg=graph.nodes[0].op)
        if graph.nodes[0].op == "bit_shift":
            assert not got[:, 3:].any()


@pytest.mark.parametrize("case", sorted(CASES))
def test_op_matches_numpy_backend(case):
    graph, feed = CASES[case]()
    assert_same(graph, feed)


def test_cases_cover_every_supported_op():
    covered = set()
    for make in CASES.values():
        covered |= {n.op for n in make()[0].nodes}
    assert covered == set(OnnxruntimeBackend().supported_ops()) == set(convert.CONVERTERS)


@pytest.mark.parametrize("case", ["flatten_batch_dim", "gather_2d_indices", "expand_batch_dim",
                                  "cumprod_symbolic_batch", "cumprod_over_the_symbolic_dim"])
def test_symbolic_batch_dim_takes_other_sizes(case):
    graph, _ = CASES[case]()
    shape = graph.inputs[0].shape
    for batch in (1, 5):
        assert_same(graph, {"x": f32(batch, *shape[1:])})


@pytest.mark.parametrize("case", ["lstm", "lstm_reverse", "lstm_peepholes", "gru",
                                  "gru_reset_after_reverse", "rnn", "rnn_relu_reverse"])
def test_recurrences_take_any_number_of_steps(case):
    """The lstm, gru and rnn ops at 0, 1 and 7 steps: the same on both backends; no steps
    give an empty y and the state as given (onnxruntime's LSTM, GRU and RNN alone would give
    zeros)."""
    graph, feed = CASES[case]()
    for steps in (0, 1, 7):
        feed = {**feed, "x": f32(steps, 2, 6)}
        assert_same(graph, feed)
        if not steps:
            got = Executor(graph, OnnxruntimeBackend()).run(dict(feed))
            assert got["y"].shape == (0, 2, 4)
            for state in ("h", "c"):
                if state in feed:
                    np.testing.assert_array_equal(got[f"{state}_last"], feed[state])


@pytest.mark.parametrize("reverse, quantize_y", [(False, False), (True, True)])
def test_quantized_lstm_over_any_steps_and_lengths(reverse, quantize_y):
    """0, 1 and 7 steps, each sequence from none of them to all: the same on both backends
    within float32 tolerance (sigmoid and tanh are each library's; the quantization, exact,
    can then take a neighbouring code, so the tolerance is a quantization step's worth); no
    steps give an empty y and the state as given."""
    graph, feed = quantized_lstm(reverse, True, quantize_y)
    for steps, lengths in ((0, [0, 0]), (1, [1, 0]), (7, [7, 2]), (7, [0, 5])):
        feed = {**feed, "x": f32(steps, 2, 16), "lengths": np.array(lengths, np.int64)}
        got = assert_same(graph, feed, rtol=1e-3, atol=1e-3)
        assert got["y"].shape == (steps, 2, 4) and not got["y"][lengths[1]:, 1].any()
        if not steps:
            np.testing.assert_array_equal(got["h_last"], feed["h"])


def test_quantized_lstm_carries_a_nan_as_the_abi_quantizes_it():
    """A nan in one sequence's input gate at step 2 makes one unit of its state nan there,
    and the next step's quantization of the whole batch's state has a nan scale: every
    sequence's later outputs are nan, on both backends (onnxruntime's own quantization does
    not see every nan); a nan in the initial state, from the first step on."""
    graph, feed = quantized_lstm()
    x = feed["x"].copy()
    x[2, 0, 3] = np.nan
    got = assert_same(graph, {**feed, "x": x}, rtol=1e-3, atol=1e-3)
    assert np.isnan(got["y"][2]).sum() == 1 and np.isnan(got["y"][2, 0, 3])
    assert np.isfinite(got["y"][:2]).all() and np.isnan(got["y"][3:]).all()
    h = feed["h"].copy()
    h[1, 2] = np.nan
    got = assert_same(graph, {**feed, "h": h}, rtol=1e-3, atol=1e-3)
    assert np.isnan(got["y"]).all() and np.isnan(got["c_last"]).all()


@pytest.mark.parametrize("backend", [NumpyBackend, OnnxruntimeBackend])
def test_quantized_lstm_of_an_empty_state_is_refused(backend):
    """A batch of 0 has no state to quantize: the ShapeError naming the node on both
    backends (with no steps there is nothing to quantize, and the empty state comes back)."""
    graph, feed = quantized_lstm(batch="n")
    empty = {"x": f32(3, 0, 16), "h": f32(0, 4), "c": f32(0, 4)}
    with pytest.raises(ShapeError, match=r"node.*the state of shape \(0, 4\) is empty"):
        Executor(graph, backend()).run(empty)
    out = Executor(graph, backend()).run({**empty, "x": f32(0, 0, 16)})
    assert out["y"].shape == (0, 0, 4) and out["h_last"].shape == (0, 4)


@pytest.mark.parametrize("case", ["lstm_lengths", "lstm_lengths_reverse",
                                  "lstm_peepholes_lengths_reverse", "gru_lengths_reverse",
                                  "gru_reset_after_lengths", "rnn_lengths",
                                  "rnn_relu_lengths_reverse"])
def test_recurrences_with_lengths(case):
    """The ops' lengths at 0, 1 and 7 steps, each sequence from none of them to all: the same
    on both backends, a nan past a sequence's length never read (y 0 there, the states
    finite); a length outside [0, steps] the same IndexRangeError naming the node on both,
    nothing returned."""
    graph, feed = CASES[case]()
    dtype = feed["lengths"].dtype
    for steps, lengths in ((0, [0, 0]), (1, [1, 0]), (7, [7, 2]), (7, [0, 5]), (7, [3, 3])):
        x = f32(steps, 2, 6)
        x[lengths[1]:, 1] = np.nan
        got = assert_same(graph, {**feed, "x": x, "lengths": np.array(lengths, dtype)})
        assert not got["y"][lengths[1]:, 1].any() and np.isfinite(got["h_last"]).all()
    for bad in ([8, 1], [2, -1]):
        bad_feed = {**feed, "x": f32(7, 2, 6), "lengths": np.array(bad, dtype)}
        for backend in (NumpyBackend(), OnnxruntimeBackend()):
            with pytest.raises(IndexRangeError, match=r"node 'node'.*1 sequence length "
                                                      r"index\(es\) outside \[0, 8\)"):
                Executor(graph, backend).run(dict(bad_feed))


def test_gather_index_out_of_range_refused_at_load():
    """The converter checks the constant indices again: a graph that skipped its value rule
    cannot make onnxruntime wrap a negative index or read past the dim."""
    graph, _ = CASES["gather_scalar"]()
    for bad in (np.array(5), np.array(-1)):
        consts = {**graph.tensors, "c0": bad}
        with pytest.raises(IndexRangeError, match=r"^node 'node': gather axis 1: 1 gather "
                                                  r"index\(es\) outside \[0, 5\)"):
            convert.to_onnx("g", inputs=[], outputs=[], nodes=graph.nodes, consts=consts,
                            types=graph.types)


def test_resize_over_run_time_spatial_dims_takes_other_sizes():
    graph, _ = CASES["resize_run_time_spatial"]()
    for h, w in ((1, 1), (7, 2), (4, 9)):
        assert_same(graph, {"x": f32(1, 2, h, w)})


def test_resize_by_scales_over_run_time_spatial_dims_takes_other_sizes():
    """size -1: floor(in * scale) when the call runs, the ABI's (in*k)//2**m, on both
    backends."""
    graph, _ = CASES["resize_run_time_scales"]()
    [up] = [n.outputs[0] for n in graph.nodes if n.name == "by_scales"]
    assert graph.types[up].shape == ("n", 2, "h*2", "(w*3)//4")
    for n, h, w in ((1, 1, 2), (2, 7, 3), (3, 4, 9)):
        assert_same(graph, {"x": f32(n, 2, h, w)})


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_to_sizes_like_gives_takes_other_sizes(mode):
    """size -1 where like_axes names an axis of like: that dim when the call runs, on both
    backends; a 0 there is refused on each, as onnxruntime refuses a scale of 0."""
    graph, _ = resize_like(mode)
    assert graph.outputs[0].shape == ("n", 2, "h", 7)
    for n, h in ((1, 1), (2, 9), (3, 4)):
        assert_same(graph, {"x": f32(n, 2, 4, 5), "like": f32(h, 2)})
    empty = {"x": f32(1, 2, 4, 5), "like": f32(0, 2)}
    with pytest.raises(ShapeError, match=r"resize: sizes \(0, 7\) read from like shape "
                                         r"\(0, 2\) include 0"):
        Executor(graph, NumpyBackend()).run(empty)
    with pytest.raises(BackendError, match="the run failed"):
        Executor(graph, OnnxruntimeBackend()).run(empty)


def test_topk_of_the_whole_axis_sorts_any_length():
    """k = -1: the whole axis, its run-time size read when the call runs, on both backends."""
    graph, _ = CASES["topk_sort"]()
    assert graph.outputs[0].shape == ("n", 2, "m")
    for n, m in ((1, 1), (2, 7), (3, 0)):
        x = f32(n, 2, m)
        out = assert_same(graph, {"x": x})
        np.testing.assert_array_equal(out["y0"], np.sort(x, axis=-1))


@pytest.mark.parametrize("op", ["add", "where", "greater"])
def test_run_time_shapes_that_do_not_broadcast_are_refused_on_both_backends(op):
    """Two run-time dims the ABI could not compare (broadcast(n,m)) that do not broadcast when
    the call runs: a ShapeError naming the node on numpy (not numpy's ValueError); on
    onnxruntime, which refuses the run, the op's rule asked of the call's sizes refuses them
    too, a ShapeError naming the node; equal sizes, or one of 1, run."""
    b = GraphBuilder(op)
    x, y = b.input("x", ("n", 2), "float32", "ANY"), b.input("y", ("m", 2), "float32", "ANY")
    args = (b.op("less", x, x, name="cond"), x, y) if op == "where" else (x, y)
    z = b.op(op, *args, name="node")
    if op != "add":
        z = b.op("cast", z, name="numeric", dtype="float32")
    b.output(b.op("sum", z, name="total", axes=[0]), "z", "ANY")  # a named dim for the ABI
    graph = b.build()
    for n, m in ((3, 3), (1, 4), (5, 1)):
        assert_same(graph, {"x": f32(n, 2), "y": f32(m, 2)})
    bad = {"x": f32(2, 2), "y": f32(3, 2)}
    with pytest.raises(ShapeError, match=r"inputs of shapes (\(2, 2\), )+\(3, 2\) do not "
                                         r"broadcast") as info:
        Executor(graph, NumpyBackend()).run(bad)
    assert info.value.context["node"] == "node"
    with pytest.raises(ShapeError, match=rf"^{op}: shapes .*do not broadcast") as info:
        Executor(graph, OnnxruntimeBackend()).run(bad)
    assert info.value.context["node"] == "node"


#: (op, attrs, a size too short for the window, the shortest that takes one): where
#: onnxruntime computes one window past the input or an empty output
_SHORT_POOLS = [
    ("max_pool", {"kernel_size": [2, 2], "stride": [2, 2]}, 1, 2),
    ("avg_pool", {"kernel_size": [3, 3], "stride": [2, 2], "padding": [[1, 0], [1, 0]],
                  "count_include_pad": False}, 1, 2),
    ("max_pool_with_indices", {"kernel_size": [2, 2], "stride": [2, 2]}, 1, 2),
    ("max_pool", {"kernel_size": [3, 3], "stride": [1, 1]}, 2, 3),
    ("avg_pool", {"kernel_size": [3, 3], "stride": [2, 2], "ceil_mode": True,
                  "count_include_pad": True}, 1, 2),
]


@pytest.mark.parametrize("op, attrs, short, least", _SHORT_POOLS, ids=lambda v: str(v)[:30])
def test_a_pool_over_run_time_sizes_too_short_for_its_window_is_refused_on_both_backends(
        op, attrs, short, least):
    """The ABI's pool rule refuses an input that cannot hold one window (at build, where the
    sizes are known then); over sizes known only when the call runs, both backends ask it of
    the call's sizes: the same ShapeError naming the node, where numpy's windows would be an
    empty output and onnxruntime's one past the input. Sizes from the shortest that holds a
    window run and match."""
    attrs = {"padding": [[0, 0], [0, 0]], "dilation": [1, 1], "ceil_mode": False, **attrs}
    b = GraphBuilder(op)
    y = b.op(op, b.input("x", ("n", 2, "h", "w"), "float32", "ANY"), name="node", **attrs)
    y = y[0] if isinstance(y, tuple) else y
    b.output(b.op("sum", y, name="total", axes=[2, 3]), "y", "ANY")  # named dims for the ABI
    graph = b.build()
    for h in (least, least + 3):
        assert_same(graph, {"x": f32(1, 2, h, least + 1)})
    for backend in (NumpyBackend(), OnnxruntimeBackend(), NodeByNode()):
        with pytest.raises(ShapeError, match=rf"^{op}: spatial axis 0 of x shape \(1, 2, "
                                             rf"{short}, {least}\) is {short} .*smaller than "
                                             rf"the window") as info:
            Executor(graph, backend).run({"x": f32(1, 2, short, least)})
        assert info.value.context["node"] == "node"


def _two_run_time_sizes(op, *args, **attrs):
    """``op`` of x ("n", 2, "h", "w") (and ``args``), summed over its last two axes, so that
    the graph's output has named dims."""
    b = GraphBuilder(op)
    y = b.op(op, b.input("x", ("n", 2, "h", "w"), "float32", "ANY"),
             *(b.constant(f"c{k}", a) for k, a in enumerate(args)), name="node", **attrs)
    b.output(b.op("sum", y, name="total", axes=[2, 3]), "y", "ANY")
    return b.build()


@pytest.mark.parametrize("graph, fits, short, message", [
    (lambda: _two_run_time_sizes("conv", f32(3, 2, 3, 3), stride=[1, 1],
                                 padding=[[0, 0], [0, 0]], dilation=[1, 1]),
     (3, 4), (2, 5), r"^conv: spatial axis 0 of x shape \(1, 2, 2, 5\) is 2 .*smaller than "
                     r"the dilated kernel"),
    (lambda: _two_run_time_sizes("conv_transpose", f32(2, 3, 3, 3), stride=[2, 2],
                                 padding=[2, 2], output_padding=[0, 0], dilation=[1, 1]),
     (3, 4), (1, 5), r"^conv_transpose: "),
], ids=["conv-short", "conv-transpose-short"])
def test_sizes_onnxruntime_refuses_are_the_abis_refusal(graph, fits, short, message):
    """Sizes known only when the call runs that an op's shape rule refuses, where
    onnxruntime's kernel fails the run (a conv's input shorter than its kernel, a transposed
    conv whose padding leaves nothing): onnxruntime's failure is followed by the graph's rules
    asked of the call's sizes, and the call is refused as the ABI refuses it, a ShapeError naming
    the node (as on the numpy backend, whose kernels refuse it), whole-graph and node by
    node. Sizes that fit match."""
    graph = graph()
    assert_same(graph, {"x": f32(1, 2, *fits)})
    bad = {"x": f32(1, 2, *short)}
    with pytest.raises(ShapeError) as info:
        Executor(graph, NumpyBackend()).run(dict(bad))
    assert info.value.context["node"] == "node"
    for backend in (OnnxruntimeBackend(), NodeByNode()):
        with pytest.raises(ShapeError, match=message) as info:
            Executor(graph, backend).run(dict(bad))
        assert info.value.context["node"] == "node"


def test_a_failed_run_no_rule_refuses_stays_onnxruntimes_refusal():
    """An integer division by zero fails onnxruntime's run; no shape rule refuses the call's
    sizes, so the refusal is onnxruntime's (BackendError), not swallowed."""
    b = GraphBuilder("div")
    x = b.input("x", ("n",), "int64", "ANY")
    b.output(b.op("int_div", x, b.input("d", ("n",), "int64", "ANY"), name="node"), "y", "ANY")
    graph = b.build()
    with pytest.raises(BackendError, match=r"the run failed: .*Integer division by zero"):
        Executor(graph, OnnxruntimeBackend()).run({"x": np.array([4, 2]), "d": np.array([2, 0])})


def test_embedding_out_of_range_refused_at_entry():
    graph, feed = embedding_at_entry()
    ex = Executor(graph, OnnxruntimeBackend())
    bad = np.array([[0, 7, 1], [-1, 2, 3]])
    with pytest.raises(IndexRangeError) as info:
        ex.run({"idx": bad})
    assert info.value.context["positions"] == [(0, 1), (1, 0)]
    assert info.value.context["values"] == [7, -1]
    assert ex.calls == 0


@pytest.mark.parametrize("idx", [[0, 5, 1, 2], [-2, 0, 0, 0]])
def test_embedding_computed_in_graph_refused_by_the_guard(idx):
    """idx + 1 out of [0, 6) is refused like the numpy backend's kernel refuses it, never
    wrapped (onnxruntime's Gather takes -1 as the last row) and never an onnxruntime error."""
    graph, _ = embedding_computed()
    feed = {"idx": np.array(idx)}
    with pytest.raises(IndexRangeError) as want:
        Executor(graph, NumpyBackend()).run(feed)
    with pytest.raises(IndexRangeError) as got:
        Executor(graph, OnnxruntimeBackend()).run(feed)
    assert "'node'" in str(got.value)
    for key in ("positions", "values", "vocab_size"):
        assert got.value.context[key] == want.value.context[key]


def test_op_without_converter_refused_naming_the_node(monkeypatch):
    """An op the backend does not declare is refused at load, naming the node."""
    monkeypatch.delitem(convert.CONVERTERS, "gelu")
    graph, _ = single("gelu", (2, 3))
    with pytest.raises(BackendError, match=r"node 'node': op gelu v1 is not supported"):
        Executor(graph, OnnxruntimeBackend())


@pytest.mark.parametrize("op", ["max_pool", "avg_pool", "max_pool_with_indices"])
def test_pooling_windows_match_over_random_configurations(op):
    """ceil_mode, asymmetric padding, count_include_pad and dilation are where torch's and
    ONNX's pooling rules could part; 60 seeded random 1-D, 2-D and 3-D configurations each."""
    rng = np.random.default_rng(7)
    checked, ranks = 0, set()
    while checked < 60:
        spatial = int(rng.integers(1, 4))
        size = [int(rng.integers(2, 10)) for _ in range(spatial)]
        kernel = [int(rng.integers(1, min(s, 4) + 1)) for s in size]
        attrs = dict(kernel_size=kernel, stride=[int(rng.integers(1, 4)) for _ in size],
                     padding=[[int(rng.integers(0, k // 2 + 1)) for _ in range(2)]
                              for k in kernel], ceil_mode=bool(rng.integers(2)))
        if op != "avg_pool":
            attrs["dilation"] = [int(rng.integers(1, 3)) for _ in size]
        else:
            attrs["count_include_pad"] = bool(rng.integers(2))
        try:
            graph, feed = single(op, (1, 2, *size), **attrs)
        except GraphError:  # a window larger than the padded input: not a valid config
            continue
        assert_same(graph, feed, rtol=1e-5, atol=1e-6)
        checked += 1
        ranks.add(spatial)
    assert ranks == {1, 2, 3}


def test_resize_matches_over_random_configurations():
    """Every mode, coordinate mode and nearest mode, by scales or by size, up and down, 1-D,
    2-D and 3-D: 60 seeded random configurations."""
    rng = np.random.default_rng(11)
    coordinate = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                  "half_pixel_symmetric", "tf_half_pixel_for_nn"]
    nearest = ["floor", "ceil", "round_prefer_floor", "round_prefer_ceil"]
    for _ in range(60):
        shape = [int(rng.integers(1, 9)) for _ in range(int(rng.integers(1, 4)))]
        attrs = dict(mode=str(rng.choice(["nearest", "linear"])),
                     coordinate_mode=str(rng.choice(coordinate)),
                     nearest_mode=str(rng.choice(nearest)))
        given = _random_output(rng, shape)
        if given is None:
            continue
        attrs.update(given)
        assert_same(*single("resize", (2, 3, *shape), **attrs), rtol=1e-5, atol=1e-6)


def _random_output(rng, shape) -> dict | None:
    """A resize's output for ``shape``: by scales (None when one rounds to an empty axis) or
    by size, drawn from ``rng``."""
    from abi.ops.sampling import scaled_size

    if rng.integers(2):
        scales = [float(rng.choice([0.5, 0.6, 0.75, 1.0, 1.5, 1.7, 2.0, 3.0])) for _ in shape]
        size = [scaled_size(d, s) for d, s in zip(shape, scales)]
        return None if min(size) < 1 else {"size": size, "scales": scales}
    return {"size": [int(rng.integers(1, 12)) for _ in shape]}


def test_cubic_resize_matches_over_random_configurations():
    """cubic over (N, C, H, W) in every coordinate mode, with and without exclude_outside,
    other coefficients, by scales or by size, up and down: 30 seeded random configurations,
    equal to the last bit."""
    rng = np.random.default_rng(12)
    coordinate = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                  "half_pixel_symmetric", "tf_half_pixel_for_nn"]
    for _ in range(30):
        shape = [int(rng.integers(1, 9)) for _ in range(2)]
        attrs = dict(mode="cubic", coordinate_mode=str(rng.choice(coordinate)),
                     cubic_coeff_a=float(rng.choice([-0.75, -0.5, -1.0])),
                     exclude_outside=bool(rng.integers(2)))
        given = _random_output(rng, shape)
        if given is None:
            continue
        attrs.update(given)
        assert_same(*single("resize", (2, 3, *shape), **attrs), rtol=0, atol=0)  # bit for bit


def test_grid_sample_matches_over_random_configurations():
    """Every mode, padding mode and align_corners, grids partly outside [-1, 1], 1-pixel axes
    among them, images and volumes: 96 seeded random configurations."""
    rng = np.random.default_rng(12)
    for i in range(96):
        spatial = 2 + i // 48
        shape = (int(rng.integers(1, 3)), 2, *(int(rng.integers(1, 7)) for _ in range(spatial)))
        attrs = dict(mode=("bilinear", "nearest")[i % 2],
                     padding_mode=("zeros", "border", "reflection")[i // 2 % 3],
                     align_corners=bool(i // 6 % 2))
        graph, _ = single("grid_sample", shape, grid(shape[0], *rng.integers(1, 6, spatial)),
                          **attrs)
        assert_same(graph, {"x": f32(*shape)}, rtol=1e-5, atol=1e-6)


def test_cubic_grid_sample_matches_over_random_configurations():
    """mode cubic in every padding mode and align_corners, grids partly outside [-1, 1] and
    through pixel centres and edges, 1-pixel axes among them: 48 seeded random
    configurations, onnxruntime's arithmetic on both backends."""
    rng = np.random.default_rng(13)
    for i in range(48):
        shape = (int(rng.integers(1, 3)), 2, *(int(rng.integers(1, 7)) for _ in range(2)))
        attrs = dict(mode="cubic", padding_mode=("zeros", "border", "reflection")[i % 3],
                     align_corners=bool(i // 3 % 2))
        positions = grid(shape[0], *rng.integers(1, 6, 2))
        if i % 4 == 0:  # pixel centres and edges of both conventions
            w = shape[3]
            exact = np.concatenate([np.arange(-1, w + 1) * 2 / w - 1,
                                    (np.arange(-1, w + 1) * 2 + 1) / w - 1,
                                    np.linspace(-1, 1, max(w, 2))]).astype(np.float32)
            positions[..., 0] = np.resize(exact, positions.shape[:-1])
        graph, _ = single("grid_sample", shape, positions, **attrs)
        assert_same(graph, {"x": f32(*shape)}, rtol=1e-5, atol=1e-6)


def test_unsupported_dtype_refused():
    graph, _ = single("relu", (2, 3), in_dtype="float16")
    with pytest.raises(BackendError, match="dtype float16 is not supported"):
        Executor(graph, OnnxruntimeBackend())


def test_uint8_images_move_and_convert_as_on_numpy():
    """uint8 is for camera samples taken as bytes: they move (reshape, transpose, slice,
    concat) and convert (cast) exactly as on numpy; an op onnxruntime has no kernel for in
    the dtype nor in a wider one (cumsum of uint64) is refused at load naming our node, never
    run elsewhere."""
    b = GraphBuilder("bytes")
    img = b.input("img", (1, 12, 4, 6), "uint8", "NCHW")
    halves = b.op("slice", img, name="cur", starts=[6], ends=[12], axes=[1], steps=[1])
    moved = b.op("transpose", b.op("reshape", halves, name="r", shape=[1, 6, 24]), name="t",
                 perm=[0, 2, 1])
    both = b.op("concat", moved, moved, name="c", axis=1)
    b.output(b.op("identity", both, name="i"), "moved", "ANY")
    b.output(b.op("cast", both, name="f", dtype="float32"), "samples", "ANY")
    graph = b.build()
    feed = {"img": RNG.integers(0, 256, (1, 12, 4, 6)).astype(np.uint8)}
    got = Executor(graph, OnnxruntimeBackend()).run(feed)
    want = Executor(graph, NumpyBackend()).run(feed)
    assert got["moved"].dtype == np.uint8 and got["samples"].dtype == np.float32
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])
    graph, _ = single("cumsum", (2, 3), in_dtype="uint64", axis=1)
    with pytest.raises(BackendError, match="node 'node': onnxruntime refused the model"):
        Executor(graph, OnnxruntimeBackend())


class NodeByNode:
    """The backend without its whole-graph protocol, as when model-layer plugins replace some
    ops' kernels (plugin_host.sandbox.kernels) and the executor prepares node by node."""

    def __init__(self):
        self._inner = OnnxruntimeBackend()
        self.name = self._inner.name

    def supported_ops(self):
        return self._inner.supported_ops()

    def supported_dtypes(self):
        return self._inner.supported_dtypes()

    def prepare(self, node, consts, types):
        return self._inner.prepare(node, consts, types)


def square():
    b = GraphBuilder("square")
    x = b.input("x", (2, 3), "float32", "ANY")
    b.output(b.op("mul", x, x, name="node"), "y", "ANY")
    return b.build(), {"x": f32(2, 3)}


@pytest.mark.parametrize("make", [CASES["lstm_cell"], CASES["split"], CASES["gather_2d_indices"],
                                  CASES["embedding_in_graph"], CASES["conv2d"], square])
def test_node_by_node_matches_numpy_backend(make):
    graph, feed = make()
    ex = Executor(graph, NodeByNode())
    assert not ex.whole_graph
    want = Executor(graph, NumpyBackend()).run(feed)
    for name, value in ex.run(feed).items():
        np.testing.assert_allclose(value, want[name], rtol=1e-4, atol=1e-5)


def test_onnxruntime_refusing_the_model_names_our_node():
    """A model onnxruntime refuses at session creation (here an attribute it rejects) is a
    BackendError naming our node, from the ONNX node name ``<our node>/<k>``."""
    from onnx import TensorProto, helper

    from plugins.onnxruntime_backend import session

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    node = helper.make_node("MaxPool", ["x"], ["y"], name="vision.0.pool/3",
                            kernel_shape=[2, 2], strides=[0, 0])
    model = helper.make_model(helper.make_graph([node], "bad", [x], [y]),
                              opset_imports=[helper.make_opsetid("", convert.OPSET)])
    model.ir_version = 10
    with pytest.raises(BackendError, match=r"node 'vision.0.pool': onnxruntime refused") as info:
        session.create_session(model, where="model 'bad'")
    assert info.value.context["node"] == "vision.0.pool"


@pytest.mark.parametrize("graph, feed", [
    single("sum", (2, 3), axes=[0, 1]),
    single("amax", (4,), axes=[0]),
    single("argmax", (5,), axis=0),
    single("exp", (), feed={"x": np.array(0.5, np.float32)}),
    single("add", (), np.array(2.0, np.float32), feed={"x": np.array(-1.5, np.float32)}),
    single("gather", (4,), np.array(2)),
], ids=["sum_all", "amax_all", "argmax_1d", "exp_0d", "add_0d", "gather_0d"])
def test_zero_d_results_are_arrays(graph, feed):
    """A 0-d result is a 0-d ndarray on both backends: numpy computes it as a numpy scalar,
    which the executor's output check refuses."""
    assert_same(graph, feed)
    got = Executor(graph, NumpyBackend()).run(feed)["y0"]
    assert type(got) is np.ndarray and got.shape == ()


@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("keepdim", [False, True])
def test_arg_extremes_take_the_first_nan_on_both_backends(op, keepdim):
    """numpy and torch take the first nan along the axis as the extreme; onnxruntime's own
    kernel skips a nan unless it comes first. Both backends answer as torch does."""
    torch = pytest.importorskip("torch")
    nan = np.nan
    x = np.array([[1, nan, 0, 2], [nan, 1, 0, 2], [1, 0, 2, nan], [3, 1, 4, 1],
                  [nan, nan, 1, 0], [-np.inf, 1, np.inf, 0]], np.float32)
    graph, _ = single(op, (6, 4), axis=1, keepdim=keepdim)
    want = getattr(torch, op)(torch.from_numpy(x), dim=1, keepdim=keepdim).numpy()
    for backend in (NumpyBackend(), OnnxruntimeBackend()):
        got = Executor(graph, backend).run({"x": x})["y0"]
        np.testing.assert_array_equal(got, want, err_msg=backend.name)


@pytest.mark.parametrize("op, shape, attrs, reference", [
    ("amax", (6, 4), {"axes": [1]}, lambda t: t.amax(1)),
    ("amin", (6, 4), {"axes": [1], "keepdim": True}, lambda t: t.amin(1, keepdim=True)),
    ("amax", (6, 4), {"axes": [0, 1]}, lambda t: t.amax((0, 1))),
    ("max_pool", (1, 1, 4, 6), {"kernel_size": [2, 2], "stride": [2, 2], "padding": PAD1,
                                "dilation": [1, 1]},
     lambda t: torch_f().max_pool2d(t, 2, 2, padding=1)),
], ids=["amax", "amin_keepdim", "amax_all", "max_pool_padded"])
def test_max_and_min_reductions_propagate_nan_on_both_backends(op, shape, attrs, reference):
    """A nan in the reduced axes or the pooling window gives nan, as numpy and torch do;
    onnxruntime's ReduceMax/ReduceMin/MaxPool kernels skip it."""
    torch = pytest.importorskip("torch")
    x = RNG.standard_normal(shape).astype(np.float32)
    x.reshape(-1)[[1, 9, 14]] = np.nan
    graph, _ = single(op, shape, **attrs)
    want = reference(torch.from_numpy(x)).numpy()
    assert np.isnan(want).any()
    for backend in (NumpyBackend(), OnnxruntimeBackend()):
        got = Executor(graph, backend).run({"x": x})["y0"]
        np.testing.assert_array_equal(got, want, err_msg=backend.name)


def torch_f():
    return pytest.importorskip("torch").nn.functional


#: Ops whose results on inf or nan inputs depend on the order of a sum over many products
#: (inf - inf in one order, a finite sum in another), or on how the variance is formed: the
#: backends may differ there, as torch's own CPU and GPU kernels do. Every other case must
#: agree on special values too.
ORDER_DEPENDENT = ("conv", "linear", "matmul", "lstm", "norm", "embedding_computed", "gelu",
                   "avg_pool")

#: Where onnxruntime's GridSample and torch's grid_sample (the numpy backend) differ on special
#: values: a nan, an infinity or a position beyond float32 once scaled in a run-time grid
#: (torch: nan in bilinear with zeros, 0 in nearest with zeros, else the edge pixel; onnxruntime
#: takes other pixels), and, in bilinear with border or reflection, an infinite or nan pixel
#: next to a position clamped onto an edge of x: torch multiplies the neighbours inside x by
#: their weight 0 (nan) and leaves those outside out, onnxruntime picks its weight-0 neighbours
#: otherwise (nan where torch is finite, and the reverse). Finite grids and pixels agree
#: (test_grid_sample_matches_over_random_configurations). mode cubic follows onnxruntime on
#: special values too, so its cases are not listed.
GRID_SAMPLE_SPECIAL = ("grid_sample_border_edges", "grid_sample_run_time_grid",
                       "grid_sample_run_time_reflection")


@pytest.mark.parametrize("case", sorted(c for c in CASES if c not in GRID_SAMPLE_SPECIAL
                                         and not any(part in c for part in ORDER_DEPENDENT)))
def test_special_values_agree_between_backends(case):
    """nan, +-inf, float32 extremes, -0.0 and a denormal, each at least once and in a fifth
    of every float input: both backends give the same result (nan where the other gives
    nan)."""
    graph, feed = CASES[case]()
    rng = np.random.default_rng(sum(map(ord, case)))
    specials = np.array([np.nan, np.inf, -np.inf, 3e38, -3e38, -0.0, 1e-45], np.float32)
    for value in feed.values():
        if value.dtype == np.float32 and value.size:  # each special once, then a fifth
            where = rng.permutation(value.size)[:max(len(specials), value.size // 5)]
            value.reshape(-1)[where] = np.resize(specials, where.size)
    with np.errstate(all="ignore"):
        want = Executor(graph, NumpyBackend()).run(dict(feed))
    got = Executor(graph, OnnxruntimeBackend()).run(dict(feed))
    for name, value in want.items():
        if graph.nodes[0].op == "max_pool":  # onnxruntime's MaxPool starts from the lowest
            lowest = np.finfo(np.float32).min  # float, so a window of only -inf gives it
            got[name] = np.where((got[name] == lowest) & (value == -np.inf), -np.inf, got[name])
        np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-5, equal_nan=True,
                                   err_msg=name)


@pytest.mark.parametrize("dtype", ["float32", "int32", "int8", "uint64"])
@pytest.mark.parametrize("keepdim", [True, False])
def test_reductions_over_nothing(dtype, keepdim):
    """Over a symbolic dim bound to 0 and a fixed dim of 0: amax and amin give the dtype's
    lowest and highest, mean nan (onnxruntime's ReduceMean gives 0, its max of the IsNaN
    mask -inf), as the numpy backend; over 1 and 4 elements the reductions as before."""
    b = GraphBuilder("empty")
    x = b.input("x", (2, "n", 3), dtype, "ANY")
    zero = b.constant("zero", np.zeros((2, 0), dtype))
    ops = ("amax", "amin") + {"float32": ("mean", "sum"), "uint64": ()}.get(dtype, ("sum",))
    for op in ops:
        b.output(b.op(op, x, name=op, axes=[1, 2], keepdim=keepdim), op, "ANY")
        b.output(b.op(op, zero, name=f"{op}_fixed", axes=[-1], keepdim=keepdim),
                 f"{op}_fixed", "ANY")
    graph = b.build()
    for n in (0, 1, 4):
        x = RNG.integers(-100, 100, (2, n, 3)).astype(dtype)
        got = assert_same(graph, {"x": x})
        if not n:
            lowest, highest = ((-np.inf, np.inf) if dtype.startswith("float") else
                               (np.iinfo(dtype).min, np.iinfo(dtype).max))
            want = {"amax": lowest, "amin": highest, "sum": 0, "mean": np.nan}
            for name, value in got.items():
                np.testing.assert_array_equal(value, np.full(value.shape, want[name.split(
                    "_")[0]], dtype), name)


@pytest.mark.parametrize("have, want", [("float32", "int32"), ("int32", "float32"),
                                        ("uint8", "int8"), ("int64", "uint64"),
                                        ("uint32", "float32")])
def test_bitcast_is_bit_for_bit_the_numpy_backend_s(have, want):
    """onnxruntime's BitCast (opset 26) keeps every bit, nan payloads and signs included."""
    bits = RNG.integers(0, 256, (3, 16), dtype=np.uint8).view(have)
    if have == "float32":
        bits.reshape(-1)[:6] = [np.nan, -np.nan, np.inf, -np.inf, -0.0, 1e-45]
    graph, feed = single("bitcast", ("n", bits.shape[1]), in_dtype=have, dtype=want,
                         feed={"x": bits})
    want_ = Executor(graph, NumpyBackend()).run(dict(feed))["y0"]
    got = Executor(graph, OnnxruntimeBackend()).run(dict(feed))["y0"]
    assert got.dtype == want_.dtype == want
    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want_.view(f"u{got.itemsize}"))


def test_an_add_of_zero_between_two_nodes_turns_minus_zero_into_zero():
    """round(-0.2) is -0.0, and -0.0 + 0 is 0 (IEEE, numpy); onnxruntime's no-op elimination,
    left off, would drop the Add and keep -0.0."""
    b = GraphBuilder("add_zero")
    x = b.input("x", (4,), "float32", "ANY")
    r = b.op("round", b.op("neg", x, name="neg"), name="round")
    y = b.op("add", r, b.constant("zero", np.zeros((), np.float32)), name="node")
    b.output(b.op("clip", y, name="clip", min=-5.0, max=5.0), "y", "ANY")
    assert_same_bits(b.build(), {"x": np.array([0.2, 0.0, -1.0, np.nan], np.float32)})


@pytest.mark.parametrize("by", ["scales", "sizes"])
@pytest.mark.parametrize("mode, coordinate_mode", [("linear", "align_corners"),
                                                   ("nearest", "asymmetric"),
                                                   ("linear", "half_pixel")])
def test_a_resize_by_scales_between_convs_stays_in_the_blocked_layout(mode, coordinate_mode, by,
                                                                      tmp_path):
    """conv, 2x resize, conv (a DPT or YOLO neck, or an ``interpolate(size=...)`` to twice the
    map's size): the resize's scales name every axis, 1 for batch and channels, as torch
    exports them, so onnxruntime runs it in its blocked-channel layout with the convs,
    reordering once in and once out (with ``axes`` it ran Resize in the plain layout,
    reordered out and back around it); the numpy backend's values."""
    from tests.onnxruntime_backend.test_max_pool import optimized_ops

    b = GraphBuilder("neck")
    x = b.input("x", (1, 16, 12, 12), "float32", "ANY")
    w = b.constant("w", (RNG.standard_normal((16, 16, 3, 3)) / 12).astype(np.float32))
    conv = dict(stride=[1, 1], padding=[[1, 1], [1, 1]], dilation=[1, 1], groups=1)
    y = b.op("conv", x, w, name="conv", **conv)
    scales = [2.0, 2.0] if by == "scales" else None
    y = b.op("resize", y, name="up", size=[24, 24], scales=scales, mode=mode,
             coordinate_mode=coordinate_mode, nearest_mode="floor")  # YOLO's nn.Upsample
    b.output(b.op("conv", y, w, name="conv2", **conv), "y", "ANY")
    graph = b.build()
    ops = optimized_ops(onnx_model(graph), tmp_path / "neck.onnx")
    if "ReorderInput" not in ops:
        pytest.skip("onnxruntime has no blocked-channel layout on this machine")
    assert ops.count("ReorderInput") == 1 and ops.count("ReorderOutput") == 1, ops
    assert "Resize" not in ops, ops
    assert_same(graph, {"x": f32(1, 16, 12, 12)})


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("size", [[24, 36], [30, 24], [6, 12], [12, 12]])
def test_a_resize_to_fixed_sizes_gives_what_it_gave_over_axes(size, mode):
    """Sizes that are whole multiples of x's (24 and 36 of 12) are written as scales; others
    (30, 6) keep the sizes over ``axes``: the same outputs bit for bit either way as the
    Resize to sizes over ``axes`` gave, and the numpy backend's values."""
    b = GraphBuilder("resize")
    x = b.input("x", (1, 3, 12, 12), "float32", "ANY")
    b.output(b.op("resize", x, name="node", size=size, mode=mode), "y", "ANY")
    graph = b.build()
    [node] = [n for n in onnx_model(graph).graph.node if n.op_type == "Resize"]
    whole = all(s >= 12 and s % 12 == 0 for s in size)
    assert [a.name for a in node.attribute if a.name == "axes"] == ([] if whole else ["axes"])
    feed = {"x": f32(1, 3, 12, 12)}
    got = assert_same(graph, feed)
    from onnx import TensorProto, helper, numpy_helper

    from plugins.onnxruntime_backend import session

    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    over_axes = helper.make_model(helper.make_graph(
        [helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], **{**attrs, "axes": [2, 3]})],
        "over_axes", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(size, np.int64), "sizes")]),
        opset_imports=[helper.make_opsetid("", convert.OPSET)])
    over_axes.ir_version = 10
    want = session.create_session(over_axes, where="a resize over axes").run(None, feed)[0]
    np.testing.assert_array_equal(got["y"], want)
