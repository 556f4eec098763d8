"""int8, int16, uint16 and uint32 on the onnxruntime backend: every integer op gives the numpy
backend's bits, at the dtypes' limits, wrap-around included; an op onnxruntime has no kernel
for in the dtype runs in a wider one (``widen.py``), and what has none is refused at load."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from abi.errors import BackendError, DomainError
from plugin_host.builder import GraphBuilder
from plugin_host.executor import Executor
from plugins.numpy_backend import NumpyBackend
from plugins.onnxruntime_backend import DTYPES, OnnxruntimeBackend, convert, widen
from tests.numpy_backend.test_glue import integer_linear_graph
from tests.onnxruntime_backend.test_ops import RNG, _int_extremes, bits, onnx_model, scatter

NEW = ["int8", "int16", "uint16", "uint32"]
INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]


def assert_bits(graph, feed):
    """The onnxruntime backend's outputs are the numpy backend's, dtype and bits."""
    want = Executor(graph, NumpyBackend()).run(dict(feed))
    ex = Executor(graph, OnnxruntimeBackend())
    assert ex.whole_graph
    got = ex.run(dict(feed))
    assert set(got) == set(want)
    for name, value in want.items():
        assert got[name].dtype == value.dtype, name
        np.testing.assert_array_equal(got[name], value, err_msg=name)


def limits(dtype, shape=(4, 6)):
    """The dtype's min, max, 0, 1, max - 1, min + 1, then random values, in ``shape``."""
    n = int(np.prod(shape))
    return np.resize(_int_extremes(dtype, max(n, 6)), n).reshape(shape)


def pair(op, dtype, other=None, **attrs):
    """``op(a, b)`` of a (24, 1) and b (1, n) at the dtype's limits (broadcast to 24 x n)."""
    b = GraphBuilder(op)
    x = b.input("a", (24, 1), dtype, "ANY")
    other = _int_extremes(dtype, 8) if other is None else np.asarray(other, dtype)
    y = b.input("b", (1, other.size), dtype, "ANY")
    b.output(b.op(op, x, y, name="node", **attrs), "y", "ANY")
    return b.build(), {"a": limits(dtype, (24, 1)), "b": other.reshape(1, -1)}


def unary(op, dtype, *consts, x_shape=(4, 6), feed=None, **attrs):
    """``op(x, *consts)`` of x at the dtype's limits; every output is a graph output."""
    b = GraphBuilder(op)
    x = b.input("x", x_shape, dtype, "ANY")
    names = [b.constant(f"c{i}", c) for i, c in enumerate(consts)]
    out = b.op(op, x, *names, name="node", **attrs)
    for i, t in enumerate(out if isinstance(out, tuple) else (out,)):
        b.output(t, f"y{i}", "ANY")
    return b.build(), {"x": limits(dtype, x_shape) if feed is None else feed}


def _bitcast(dtype):
    """bitcast at the dtype's limits to the integer of its width and the other signedness."""
    b = GraphBuilder("bitcast")
    x = b.input("x", (4, 6), dtype, "ANY")
    to = dtype[1:] if dtype.startswith("u") else "u" + dtype
    b.output(b.op("bitcast", x, name="node", dtype=to), "y", "ANY")
    return b.build(), {"x": limits(dtype)}


def _nonzero(dtype, n=8, without=()):
    """n of the dtype's limits and random values, none 0 nor in ``without``."""
    values = [v for v in _int_extremes(dtype, 64) if v != 0 and v not in without]
    return np.array(values[:n], dtype)


def _signed(dtype):
    return not dtype.startswith("uint")


#: case -> dtype -> (graph, feed); None where the ABI does not take the dtype
CASES = {
    **{op: (lambda op: lambda d: pair(op, d))(op) for op in (
        "add", "sub", "mul", "max", "min", "equal", "greater", "greater_equal", "less",
        "less_equal", "bitwise_and", "bitwise_or", "bitwise_xor")},
    "bitwise_not": lambda d: bits("bitwise_not", d),
    "bitcast": lambda d: _bitcast(d),
    "bit_shift_left": lambda d: None if _signed(d) else bits("bit_shift", d, direction="left"),
    "bit_shift_right": lambda d: None if _signed(d) else bits("bit_shift", d,
                                                               direction="right"),
    "mod": lambda d: pair("mod", d, _nonzero(d)),
    "mod_fmod": lambda d: pair("mod", d, _nonzero(d), fmod=True),
    "int_div": lambda d: pair("int_div", d, _nonzero(d, without=(-1,))),
    "matmul": lambda d: _matmul(d),
    "where": lambda d: _where(d),
    "concat": lambda d: _concat(d),
    "identity": lambda d: unary("identity", d),
    "relu": lambda d: unary("relu", d),
    "abs": lambda d: unary("abs", d),
    "neg": lambda d: unary("neg", d) if _signed(d) else None,
    "sign": lambda d: unary("sign", d),
    "sum": lambda d: unary("sum", d, axes=[1]),
    "sum_all_keepdim": lambda d: unary("sum", d, axes=[0, 1], keepdim=True),
    "prod": lambda d: unary("prod", d, axes=[0]),
    "prod_keepdim": lambda d: unary("prod", d, x_shape=(3, 5, 7), axes=[2, 0], keepdim=True),
    "prod_all": lambda d: unary("prod", d, x_shape=(3, 5, 7), axes=[0, 1, 2]),
    "prod_empty": lambda d: unary("prod", d, x_shape=(3, 0), axes=[1]),
    "amax": lambda d: unary("amax", d, axes=[1]),
    "amin": lambda d: unary("amin", d, axes=[0], keepdim=True),
    "argmax": lambda d: unary("argmax", d, axis=1),
    "argmin": lambda d: unary("argmin", d, axis=0, keepdim=True),
    "argmax_ties": lambda d: unary("argmax", d, axis=1, feed=np.array(
        [[1, 3, 3, 0, 3, 1], [2] * 6, [0, 0, 1, 1, 0, 0], [5, 4, 5, 4, 5, 4]], d)),
    "cumsum": lambda d: unary("cumsum", d, axis=1),
    "cumsum_exclusive_reverse": lambda d: unary("cumsum", d, axis=0, exclusive=True,
                                                reverse=True),
    "cumprod": lambda d: unary("cumprod", d, axis=1),
    "cumprod_exclusive_reverse": lambda d: unary("cumprod", d, axis=0, exclusive=True,
                                                 reverse=True),
    "topk": lambda d: unary("topk", d, k=4, axis=1),
    "topk_smallest": lambda d: unary("topk", d, k=3, axis=0, largest=False),
    "clip": lambda d: unary("clip", d, min=-3.5 if _signed(d) else 2.5, max=100.7),
    "clip_min_only": lambda d: unary("clip", d, min=1.0),
    "clip_max_only": lambda d: unary("clip", d, max=-1.5 if _signed(d) else 7.0),
    "clip_beyond_the_range": lambda d: unary("clip", d, min=-1e12, max=1e12),
    "reshape": lambda d: unary("reshape", d, shape=[3, -1, 2]),
    "flatten": lambda d: unary("flatten", d, x_shape=(2, 3, 4), start_dim=1),
    "unflatten": lambda d: unary("unflatten", d, x_shape=(2, 12), axis=1, sizes=[2, -1]),
    "transpose": lambda d: unary("transpose", d, perm=[1, 0]),
    "slice": lambda d: unary("slice", d, starts=[3, 1], ends=[0, 100], axes=[0, 1],
                             steps=[-2, 2]),
    "split": lambda d: unary("split", d, axis=1, sizes=[2, 0, 4]),
    "max_pool": lambda d: unary("max_pool", d, x_shape=(2, 3, 7, 7), kernel_size=[3, 3],
                                stride=[2, 2], padding=[[1, 1], [1, 1]], dilation=[1, 1])
    if d == "int8" else None,  # a quantized model's codes
    "resize_nearest": lambda d: unary("resize", d, x_shape=(1, 2, 3, 4), size=[6, 8],
                                      scales=[2.0, 2.0], mode="nearest")
    if d == "int8" else None,  # a quantized model's codes
    "pad_constant": lambda d: unary("pad", d, pads=[[1, 0], [2, 1]], value=5.0),
    "pad_reflect": lambda d: unary("pad", d, pads=[[1, 2], [3, 1]], mode="reflect"),
    "pad_edge": lambda d: unary("pad", d, pads=[[0, 2], [1, 1]], mode="edge"),
    "gather": lambda d: unary("gather", d, np.array([[3, 0], [3, 5]]), axis=1),
    "gather_elements": lambda d: unary("gather_elements", d, np.array([[3, 0, 5], [1, 1, 2]]),
                                       axis=1),
    **{f"scatter_elements_{r}": (lambda r: lambda d: scatter(
        r, d, x=limits(d, (3, 5)), idx=RNG.integers(0, 5, (3, 8)), updates=limits(d, (3, 8)),
        axis=1))(r) for r in ("none", "add", "mul", "max", "min")},
    "expand": lambda d: unary("expand", d, x_shape=(4, 1), shape=[2, 4, 5]),
    "tile": lambda d: unary("tile", d, repeats=[2, 3]),
    "embedding_index": lambda d: _embedding(d, computed=False),
    "embedding_index_computed": lambda d: _embedding(d, computed=True),
    "wrap_then_compare": lambda d: _wrap_then_compare(d),
}


def _matmul(dtype):
    """(4, 6) @ (6, 3): the sums of products wrap."""
    b = GraphBuilder("matmul")
    x = b.input("a", (4, 6), dtype, "ANY")
    y = b.input("b", (6, 3), dtype, "ANY")
    b.output(b.op("matmul", x, y, name="node"), "y", "ANY")
    return b.build(), {"a": limits(dtype), "b": np.flip(limits(dtype, (6, 3)))}


def _where(dtype):
    """where(a > b, a, b) of a (24, 1) and b (1, 8) at the limits: a bool computed inside."""
    b = GraphBuilder("where")
    x = b.input("a", (24, 1), dtype, "ANY")
    y = b.input("b", (1, 8), dtype, "ANY")
    b.output(b.op("where", b.op("greater", x, y, name="cmp"), x, y, name="node"), "y", "ANY")
    return b.build(), {"a": limits(dtype, (24, 1)), "b": limits(dtype, (1, 8))}


def _concat(dtype):
    b = GraphBuilder("concat")
    xs = [b.input(f"x{i}", (2, n), dtype, "ANY") for i, n in enumerate((3, 1, 4))]
    b.output(b.op("concat", *xs, name="node", axis=1), "y", "ANY")
    return b.build(), {f"x{i}": limits(dtype, (2, n)) for i, n in enumerate((3, 1, 4))}


def _embedding(dtype, computed):
    """Embedding rows by indices of ``dtype``: validated at entry, or computed inside the
    graph (idx + 1, guarded)."""
    b = GraphBuilder("emb")
    idx = b.input("idx", (5,), dtype, "N")
    if computed:
        idx = b.op("add", idx, b.constant("one", np.ones(5, dtype)), name="shift")
    w = np.arange(6 * 3, dtype=np.float32).reshape(6, 3)
    b.output(b.op("embedding", idx, b.constant("w", w), name="node"), "y", "ANY")
    return b.build(), {"idx": np.array([0, 4, 2, 4, 1], dtype)}


def _wrap_then_compare(dtype):
    """A sum that wraps, then compared, divided and reduced: each op sees the wrapped
    value (the Casts between widened ops must not be folded away)."""
    b = GraphBuilder("chain")
    x = b.input("a", (24, 1), dtype, "ANY")
    y = b.input("b", (1, 8), dtype, "ANY")
    s = b.op("add", b.op("mul", x, y, name="mul"), y, name="sum")
    b.output(b.op("greater", s, b.constant("zero", np.zeros((), dtype)), name="cmp"), "pos",
             "ANY")
    b.output(b.op("int_div", s, b.constant("seven", np.array(7, dtype)), name="div"), "div",
             "ANY")
    b.output(b.op("amax", b.op("relu", s, name="relu"), name="top", axes=[1]), "top", "ANY")
    return b.build(), {"a": limits(dtype, (24, 1)), "b": limits(dtype, (1, 8))}


def _cases():
    return [pytest.param(case, d, id=f"{case}-{d}") for case in CASES for d in NEW
            if CASES[case](d) is not None]


@pytest.mark.parametrize("case, dtype", _cases())
def test_op_gives_the_numpy_backend_bits(case, dtype):
    assert_bits(*CASES[case](dtype))


def test_the_cases_cover_every_integer_op():
    """Every op the backend supports that the numpy backend runs on these integers."""
    float_only = {"conv", "conv_transpose", "batchnorm", "group_norm", "instance_norm",
                  "layer_norm", "layer_norm2d", "rms_norm", "linear", "lstm_cell", "lstm",
                  "gru", "rnn", "quantized_lstm",
                  "sigmoid", "tanh", "gelu", "softmax", "elu", "leaky_relu", "hard_sigmoid",
                  "hard_swish", "softplus", "exp", "log", "sqrt", "reciprocal", "erf", "prelu",
                  "pow", "div",
                  "floor", "ceil", "round", "mean", "sin", "cos", "log_softmax", "tan", "atan",
                  "asin", "acos", "sinh", "cosh", "asinh", "acosh", "atanh", "isnan", "isinf",
                  "max_pool_with_indices", "avg_pool", "grid_sample", "det",
                  "dynamic_quantize", "quantize_linear", "not", "and", "or"}
    covered = set()
    for case in CASES:
        for d in NEW:
            made = CASES[case](d)
            covered |= {n.op for n in made[0].nodes} if made else set()
    # cast: test_casts_...; the ops of 8-bit codes only: their own tests (test_qlinear*.py)
    codes_only = {"integer_linear", "qlinear_conv", "qlinear_sigmoid", "qlinear_leaky_relu",
                  "qlinear_mul", "qlinear_add", "qlinear_concat", "qlinear_softmax",
                  "qlinear_global_average_pool", "qlinear_average_pool"}
    assert covered | float_only | {"cast"} | codes_only == set(convert.CONVERTERS)


@pytest.mark.parametrize("dtype", NEW)
@pytest.mark.parametrize("other", ["float32", "int64", "bool", "uint8"])
def test_casts_both_ways_give_the_numpy_backend_bits(dtype, other):
    """To ``other`` from the dtype's limits, and from ``other`` to the dtype: integers wrap
    (keep the low bits), floats in the dtype's range truncate toward zero, bool is 0 / 1."""
    b = GraphBuilder("casts")
    x = b.input("x", (24,), dtype, "ANY")
    y = b.input("y", (12,), other, "ANY")
    b.output(b.op("cast", x, name="to", dtype=other), "to", "ANY")
    b.output(b.op("cast", y, name="back", dtype=dtype), "back", "ANY")
    info = np.iinfo(dtype)
    if other == "float32":
        values = np.array([info.min, info.max * 0.999, -0.9, 0.9, 1.5, -2.5, 100.7, 0.0,
                           info.min + 0.5, 7.99, 65535.5, 3.0], np.float32)
        values = np.clip(values, info.min, info.max * 0.999).astype(np.float32)
    elif other == "int64":
        values = np.array([info.min, info.max, -1, 0, 1, info.max + 1, info.min - 1, 2**40 + 5,
                           -2**63, 2**63 - 1, 70000, -70000], np.int64)
    elif other == "bool":
        values = np.arange(12) % 3 == 0
    else:
        values = np.array([0, 1, 127, 128, 255, 254, 3, 200, 64, 15, 16, 99], np.uint8)
    assert_bits(b.build(), {"x": limits(dtype, (24,)), "y": values})


@pytest.mark.parametrize("dtype", ["int8", "int16"])
def test_int_div_of_the_minimum_by_minus_one_is_refused_as_on_numpy(dtype):
    """The one quotient that overflows the narrow dtype, although the wider one holds it."""
    graph, feed = pair("int_div", dtype, np.array([3, -1], dtype))
    with pytest.raises(DomainError, match="overflows"):
        Executor(graph, NumpyBackend()).run(dict(feed))
    with pytest.raises(BackendError, match="Integer division by zero"):
        Executor(graph, OnnxruntimeBackend()).run(dict(feed))


@pytest.mark.parametrize("dtype", NEW)
def test_embedding_index_out_of_range_is_refused_in_every_dtype(dtype):
    graph, _ = _embedding(dtype, computed=True)
    bad = {"idx": np.array([0, 5, 1, 1, 1], dtype)}  # 5 + 1 is past the 6 rows
    with pytest.raises(Exception) as want:
        Executor(graph, NumpyBackend()).run(dict(bad))
    with pytest.raises(type(want.value), match=r"'node'"):
        Executor(graph, OnnxruntimeBackend()).run(dict(bad))


def test_an_op_without_the_kernel_computes_in_a_wider_dtype_and_casts_back():
    """matmul of int8 (onnxruntime has no int8 MatMul): Cast to int32, MatMul, Cast back."""
    model = onnx_model(_matmul("int8")[0])
    ops = [(n.op_type, next((a.i for a in n.attribute if a.name == "to"), None))
           for n in model.graph.node]
    assert ops == [("Cast", onnx.TensorProto.INT32), ("Cast", onnx.TensorProto.INT32),
                   ("MatMul", None), ("Cast", onnx.TensorProto.INT8)]
    assert model.graph.node[-1].output[0] == "y"


def test_an_op_with_the_kernel_is_left_alone():
    model = onnx_model(pair("add", "int8")[0])
    assert [n.op_type for n in model.graph.node] == ["Add"]


@pytest.mark.parametrize("op_type, dtype, want", [
    ("MatMul", "int8", "int32"), ("MatMul", "uint16", "int32"), ("Max", "int16", "int32"),
    ("Max", "uint16", "int32"), ("MatMul", "uint32", "uint32"), ("ReduceMax", "uint32", "int64"),
    ("Relu", "uint8", "int32"),
    ("Where", "uint64", "int64"), ("ReduceSum", "uint64", None), ("Add", "int8", "int8"),
    ("MatMul", "float32", "float32"), ("Where", "bool", "uint8"), ("Max", "bool", "bool"),
])
def test_the_wider_dtype_holds_every_value_and_has_the_kernel(op_type, dtype, want):
    """The narrowest such dtype, signed first; a reinterpretation of the same width only for
    an op that moves values (Where); none for uint64 arithmetic."""
    assert widen.wider(op_type, dtype) == want


def test_a_where_between_masks_goes_through_uint8():
    """onnxruntime has no bool Where (probed here, so a version that adds one is noticed): a
    ``where`` picking between two bool masks runs through uint8 and gives numpy's bits."""
    assert not _probe("Where", "bool")
    b = GraphBuilder("masks")
    x = b.input("a", (4, 1), "float32", "ANY")
    y = b.input("b", (1, 3), "float32", "ANY")
    pick = b.op("greater", x, y, name="cmp")
    b.output(b.op("where", pick, b.op("less", x, y, name="lt"), pick, name="node"), "y",
             "ANY")
    assert_bits(b.build(), {"a": RNG.standard_normal((4, 1)).astype(np.float32),
                            "b": RNG.standard_normal((1, 3)).astype(np.float32)})


@pytest.mark.parametrize("dtype", NEW)
def test_a_clip_bound_beyond_the_dtype_on_the_far_side_is_refused(dtype):
    """Every element would become the bound, a value the dtype lacks: numpy casts it as the
    CPU does (not the same for an array as for one value), so it is refused at load."""
    for attrs in ({"min": float(np.iinfo(dtype).max) + 10.0},
                  {"max": float(np.iinfo(dtype).min) - 10.0}):
        graph, _ = unary("clip", dtype, **attrs)
        with pytest.raises(BackendError, match=rf"node 'node': clip of {dtype} to .* makes "
                                               rf"every element a value outside {dtype}"):
            Executor(graph, OnnxruntimeBackend())


@pytest.mark.parametrize("op_type, dtype", [("CumSum", "uint64"), ("ReduceSum", "uint64")])
def test_what_has_no_wider_kernel_is_refused_at_load_naming_the_node(op_type, dtype):
    graph = (unary("cumsum", dtype, axis=1) if op_type == "CumSum"
             else unary("sum", dtype, axes=[1]))[0]
    with pytest.raises(BackendError, match=r"node 'node': onnxruntime refused the model: .*"
                                           rf"{op_type}"):
        Executor(graph, OnnxruntimeBackend())


@pytest.mark.parametrize("op, attrs", [
    ("topk", {"k": 3, "axis": 1}), ("topk", {"k": -1, "axis": 0, "largest": False}),
    ("amax", {"axes": [1]}), ("amin", {"axes": [0, 1]}), ("argmax", {"axis": 1}),
    ("argmin", {"axis": 0, "keepdim": True}),
])
def test_uint64_is_ordered_as_int64_with_its_top_bit_flipped(op, attrs):
    """onnxruntime has no uint64 kernel for these and no wider dtype: the values, ties and
    both sides of 2**63 among them, give the numpy backend's bits through the flip."""
    edges = np.array([0, 1, 2**63 - 1, 2**63, 2**63 + 1, 2**64 - 1, 2**63, 5], np.uint64)
    x = np.concatenate([edges, RNG.integers(0, 2**64 - 1, 16, np.uint64, endpoint=True)])
    graph, feed = unary(op, "uint64", feed=RNG.permutation(x).reshape(4, 6), **attrs)
    assert_bits(graph, feed)
    assert "BitwiseXor" in {n.op_type for n in onnx_model(graph).graph.node}


@pytest.mark.parametrize("dtype", INTS)
def test_relu_of_every_integer_dtype_gives_the_numpy_backend_bits(dtype):
    """Converted to Max(x, 0): onnxruntime's Relu has no kernel for most integer dtypes."""
    assert_bits(*unary("relu", dtype))


@pytest.mark.parametrize("dtype", INTS)
def test_cumprod_of_every_integer_dtype_gives_the_numpy_backend_bits(dtype):
    """A Scan of Mul, which has a kernel for all eight, so nothing is widened: the products
    wrap in the dtype itself, exclusive and reverse too."""
    for exclusive, reverse in ((False, False), (True, True)):
        graph, feed = unary("cumprod", dtype, axis=1, exclusive=exclusive, reverse=reverse)
        assert_bits(graph, feed)
        model = onnx_model(graph)
        assert "Cast" not in {n.op_type for n in model.graph.node}
        assert widen.wider("Mul", dtype) == dtype


def test_the_backend_takes_every_integer_dtype():
    assert DTYPES == {"float32", "bool", *INTS}


# --- the kernel table, measured again --------------------------------------------------------

#: ONNX op -> (attributes, extra constant inputs of a dtype) for a one-node model
_PROBES = {
    "Max": ({}, 1), "Min": ({}, 1), "Clip": ({}, "bounds"), "Pad": ({}, "pads"), "Where": ({}, 0),
    "Relu": ({}, 0), "Neg": ({}, 0), "MatMul": ({}, "square"), "ReduceSum": ({}, "axes"),
    "ReduceProd": ({}, "axes"), "CumSum": ({}, "axis"), "ReduceMax": ({}, "axes"),
    "ReduceMin": ({}, "axes"), "ArgMax": ({"axis": 1}, 0), "ArgMin": ({"axis": 1}, 0),
    "TopK": ({"axis": 1}, "k"), "BitShift": ({"direction": "LEFT"}, 1),
    # ops the converter emits on integers with all eight kernels
    "Add": ({}, 1), "Sub": ({}, 1), "Mul": ({}, 1), "Div": ({}, 1), "Mod": ({}, 1),
    "Abs": ({}, 0), "Sign": ({}, 0), "Equal": ({}, 1), "Greater": ({}, 1),
    "GreaterOrEqual": ({}, 1), "Less": ({}, 1), "LessOrEqual": ({}, 1),
    "BitwiseAnd": ({}, 1), "BitwiseOr": ({}, 1), "BitwiseXor": ({}, 1), "BitwiseNot": ({}, 0),
    "Identity": ({}, 0), "Transpose": ({"perm": [1, 0]}, 0), "Concat": ({"axis": 0}, 1),
    "Reshape": ({}, "shape"), "Slice": ({}, "slice"), "Split": ({"axis": 1}, "split"),
    "Expand": ({}, "shape"), "Tile": ({}, "repeats"), "Gather": ({}, "indices"),
    "GatherElements": ({}, "elements"), "Shape": ({}, 0),
}


def _probe(op_type, dtype) -> bool:
    """Whether onnxruntime creates and runs a session of one ``op_type`` node on ``dtype``."""
    import onnxruntime as ort

    attrs, extra = _PROBES[op_type]
    x = np.ones((2, 2), dtype)
    consts = {1: [x], 0: [], "bounds": [x[0, 0], x[0, 1]], "square": [x],
              "pads": [np.array([0, 1, 0, 1])],
              "axes": [np.array([1])], "axis": [np.array(1)], "k": [np.array([1])],
              "shape": [np.array([2, 2])], "slice": [np.array([0]), np.array([1])],
              "split": [np.array([1, 1])], "repeats": [np.array([2, 1])],
              "indices": [np.array([1])], "elements": [np.zeros((2, 2), np.int64)]}[extra]
    inputs = ["x"] + [f"c{i}" for i in range(len(consts))]
    if op_type == "Where":
        consts, inputs = [np.array([[True, False]] * 2), x], ["c0", "x", "c1"]
    outputs = ["y", "i"] if op_type in ("TopK",) else ["y1", "y2"] if op_type == "Split" else ["y"]
    graph = helper.make_graph(
        [helper.make_node(op_type, inputs, outputs, **attrs)], "probe",
        [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), [2, 2])],
        [onnx.ValueInfoProto(name=o) for o in outputs],
        initializer=[numpy_helper.from_array(c, f"c{i}") for i, c in enumerate(consts)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", convert.OPSET)])
    model.ir_version = 10
    try:
        ort.InferenceSession(model.SerializeToString(),
                             providers=["CPUExecutionProvider"]).run(None, {"x": x})
    except Exception as exc:  # onnxruntime's own exception types
        # no kernel registered, or the type not even in the op's ONNX schema
        assert "implementation" in str(exc) or "Type Error" in str(exc), str(exc)
        return False
    return True


@pytest.mark.parametrize("op_type", sorted(_PROBES))
def test_the_kernel_table_is_what_onnxruntime_has(op_type):
    """INT_KERNELS says which integer dtypes each op has a kernel for (all eight when not
    listed): measured again here, so a newer onnxruntime that adds or drops one is noticed."""
    have = {d for d in INTS if _probe(op_type, d)}
    assert have == set(widen.INT_KERNELS.get(op_type, INTS))


@pytest.mark.parametrize("constant", [True, False], ids=["constant", "run_time"])
@pytest.mark.parametrize("w_dtype", ["uint8", "int8"])
@pytest.mark.parametrize("x_dtype", ["uint8", "int8"])
def test_integer_linear_runs_uint8_by_int8_only_where_onnxruntime_sums_it_exactly(
        x_dtype, w_dtype, constant, u8s8):
    """onnxruntime's uint8-by-int8 integer GEMM on x86-64 CPUs without VNNI saturates pairs
    of products at int16, which a CPU with VNNI (where the sums are then exact either way)
    cannot show: every MatMulInteger the backend writes takes a uint8 x, and an int8 weight
    as it is only where the probe found that kernel exact (on this CPU, or forced off)."""
    x = np.zeros((2, 5), x_dtype)
    w, zp = np.zeros((3, 5), w_dtype), np.zeros((), w_dtype)
    model = onnx.shape_inference.infer_shapes(
        onnx_model(integer_linear_graph(x, w, np.zeros((), x_dtype), zp, constant)[0]),
        strict_mode=True)
    types = {v.name: v.type.tensor_type.elem_type for v in (
        *model.graph.input, *model.graph.value_info, *model.graph.output)}
    types.update({t.name: t.data_type for t in model.graph.initializer})
    [node] = [n for n in model.graph.node if n.op_type == "MatMulInteger"]
    u8, s8 = onnx.TensorProto.UINT8, onnx.TensorProto.INT8
    weight = s8 if w_dtype == "int8" and u8s8 else u8
    assert [types[i] for i in node.input] == [u8, weight, u8, weight]
