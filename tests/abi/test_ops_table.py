"""abi.ops.table: the registry, attribute normalization, input plumbing; abi.ops.dims."""

import numpy as np
import pytest

from abi.errors import ContractError, DTypeError, OpError, ShapeError
from abi.ops import dims
from abi.ops.table import (REQUIRED, AttrSpec, OpDef, TensorType, at_least, get_op,
                           infer_shapes, known_ops, normalize_attrs, stored_attrs)

T = TensorType

LAYER_OPS = {"conv", "conv_transpose", "batchnorm", "linear", "lstm_cell", "lstm", "gru", "rnn",
             "quantized_lstm", "qlinear_conv",
             "group_norm", "instance_norm", "layer_norm", "layer_norm2d", "rms_norm", "embedding"}
GLUE_OPS = {"identity", "relu", "sigmoid", "tanh", "gelu", "add", "sub", "mul", "div", "matmul",
            "concat", "reshape", "flatten", "unflatten", "transpose", "slice", "split", "pad",
            "cast", "bitcast", "clip",
            "softmax", "mean", "max_pool", "avg_pool", "elu", "leaky_relu", "hard_sigmoid",
            "hard_swish", "softplus", "exp", "log", "sqrt", "reciprocal", "erf", "abs", "neg",
            "prelu", "pow", "max", "min", "equal", "greater", "greater_equal", "less",
            "less_equal", "not", "where", "and", "or", "floor", "ceil", "round", "sum", "amax",
            "amin", "argmax", "sin", "cos", "sign", "log_softmax", "argmin", "prod", "mod",
            "resize", "grid_sample", "qlinear_sigmoid", "qlinear_leaky_relu", "qlinear_mul",
            "qlinear_add", "qlinear_concat", "qlinear_softmax", "qlinear_global_average_pool",
            "qlinear_average_pool", "gather", "expand", "tile", "cumsum", "cumprod", "topk",
            "tan", "atan", "asin", "acos", "sinh", "cosh", "asinh", "acosh", "atanh", "isnan",
            "isinf",
            "max_pool_with_indices",
            "int_div", "gather_elements", "scatter_elements", "det", "dynamic_quantize",
            "integer_linear", "quantize_linear",
            "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "bit_shift"}


# --- registry ---------------------------------------------------------------------------------


def test_known_ops_is_the_whole_table():
    ops = known_ops()
    assert set(ops) == LAYER_OPS | GLUE_OPS
    assert all(versions == [1] for versions in ops.values())
    ops["conv"].append(99)  # a copy: the table is not mutable through it
    assert known_ops()["conv"] == [1]


def test_every_op_is_documented_and_well_formed():
    for name in known_ops():
        op = get_op(name)
        assert op.name == name and op.version == 1 and len(op.doc) > 20, name
        assert all(isinstance(a, AttrSpec) for a in op.attrs.values())


def test_get_op():
    assert get_op("conv") is get_op("conv", 1)
    assert get_op("conv").inputs == ("x", "weight", "bias?")
    assert get_op("lstm_cell").outputs == ("h_next", "c_next")
    assert not any(get_op(n).atomic for n in known_ops()), "no built-in op uses atomics"
    assert str(get_op("conv")) == "conv v1"


def test_get_op_unknown_name():
    with pytest.raises(OpError) as info:
        get_op("convv")
    message = str(info.value)
    assert "unknown op 'convv' (did you mean 'conv'?)" in message
    assert "known ops:" in message and "conv_transpose" in message and "matmul" in message


@pytest.mark.parametrize("version", [0, 2, "1", 1.0])
def test_get_op_unknown_version(version):
    with pytest.raises(OpError) as info:
        get_op("conv", version)
    assert f"op 'conv' has no version {version!r}; known versions: 1" in str(info.value)


def test_opdef_attrs_are_read_only():
    with pytest.raises(TypeError):
        get_op("conv").attrs["groups"] = AttrSpec("int")


@pytest.mark.parametrize("kwargs, text", [
    (dict(name="bad name"), "bad op name"),
    (dict(version=0), "version must be an int >= 1"),
    (dict(inputs=("x?", "y")), "required input 'y' after an optional one"),
    (dict(inputs=("xs*", "y")), "variadic input must be the only one"),
    (dict(inputs=("x??",)), "bad input name"),
    (dict(outputs=("y?",)), "outputs cannot be optional"),
    (dict(outputs=()), "needs at least one output"),
    (dict(attrs={"a": "int"}), "bad attribute 'a'"),
    (dict(infer=None), "infer must be callable"),
])
def test_opdef_is_validated_at_definition(kwargs, text):
    base = dict(name="op", version=1, inputs=("x",), outputs=("y",), attrs={},
                infer=lambda op, i, a: i)
    with pytest.raises(ValueError, match=text.replace("(", r"\(").replace("?", r"\?")
                       .replace("*", r"\*")):
        OpDef(**{**base, **kwargs})


# --- attributes -------------------------------------------------------------------------------


def test_attr_spec_kinds_and_defaults():
    assert AttrSpec("int").default is REQUIRED and AttrSpec("int").required
    assert AttrSpec("ints", [1, 2]).default == (1, 2)
    assert AttrSpec("pads", [[1, 2]]).default == ((1, 2),)
    assert AttrSpec("enum:a|b", "a").default == "a"
    with pytest.raises(ValueError, match="unknown kind 'long'"):
        AttrSpec("long")
    with pytest.raises(ValueError, match="unknown kind"):
        AttrSpec("enum:a||b")
    with pytest.raises(ValueError, match="default must be >= 1, got 0"):
        AttrSpec("int", 0, at_least(1))


def test_normalize_fills_defaults_and_canonicalizes():
    conv = get_op("conv")
    attrs = normalize_attrs(conv, {"stride": [2, 2], "padding": [[1, 1], [0, 1]],
                                   "dilation": (1, 1)})
    assert attrs == {"stride": (2, 2), "padding": ((1, 1), (0, 1)), "dilation": (1, 1),
                     "groups": 1}
    assert normalize_attrs(conv, attrs) == attrs  # idempotent
    assert normalize_attrs(get_op("clip"), {"min": 0}) == {"min": 0.0, "max": None}
    assert normalize_attrs(get_op("relu"), None) == {}
    assert normalize_attrs(get_op("gelu"), {}) == {"approximate": "none"}
    assert normalize_attrs(get_op("reshape"), {"shape": [2, -1, 0]}) == {"shape": (2, -1, 0)}
    assert normalize_attrs(get_op("cast"), {"dtype": "float16"}) == {"dtype": "float16"}


def test_attributes_added_later_are_stored_only_off_their_default():
    op = OpDef("late", 1, ("x",), ("y",), {"old": AttrSpec("int", 1),
                                           "new": AttrSpec("float", 0.5, added=True)},
               lambda op, inputs, attrs: inputs, doc="x")
    full = normalize_attrs(op, {})
    assert full == {"old": 1, "new": 0.5}
    assert stored_attrs(op, full) == {"old": 1}  # as artifacts written before "new" have it
    assert normalize_attrs(op, stored_attrs(op, full)) == full
    assert stored_attrs(op, normalize_attrs(op, {"new": 2})) == {"old": 1, "new": 2.0}
    with pytest.raises(ValueError, match=r"an added attribute needs a default \(None too\)"):
        AttrSpec("int", added=True)
    optional = OpDef("late", 1, ("x",), ("y",), {"new": AttrSpec("ints", None, added=True)},
                     lambda op, inputs, attrs: inputs, doc="x")
    assert stored_attrs(optional, normalize_attrs(optional, {})) == {}
    assert stored_attrs(optional, normalize_attrs(optional, {"new": [1]})) == {"new": (1,)}


CONV_OK = {"stride": [1], "padding": [[0, 0]], "dilation": [1]}


@pytest.mark.parametrize("op, attrs, texts", [
    ("conv", {**CONV_OK, "strides": [1]}, ["unknown attribute 'strides' (did you mean 'stride'?)",
                                           "known: stride, padding, dilation, groups"]),
    ("relu", {"alpha": 0.1}, ["unknown attribute 'alpha'; known: none"]),
    ("conv", {"padding": [[0, 0]]}, ["missing required attribute 'stride' (ints)",
                                     "missing required attribute 'dilation' (ints)"]),
    ("conv", {**CONV_OK, "groups": 1.5}, ["attribute 'groups' must be an int, got 1.5 (float)"]),
    ("conv", {**CONV_OK, "groups": True}, ["attribute 'groups' must be an int, got True (bool)"]),
    ("conv", {**CONV_OK, "groups": 0}, ["attribute 'groups' must be >= 1, got 0"]),
    ("conv", {**CONV_OK, "stride": [0]}, ["attribute 'stride' must have every entry >= 1"]),
    ("conv", {**CONV_OK, "stride": 2}, ["attribute 'stride' must be a list of ints, got 2"]),
    ("conv", {**CONV_OK, "stride": ["2"]}, ["attribute 'stride' must be a list of ints"]),
    ("conv", {**CONV_OK, "padding": [1, 1]}, ["attribute 'padding' must be a list of [before, "
                                              "after] pairs of ints >= 0"]),
    ("conv", {**CONV_OK, "padding": [[-1, 0]]}, ["attribute 'padding' must be a list of"]),
    ("batchnorm", {"eps": 0.0}, ["attribute 'eps' must be > 0.0, got 0.0"]),
    ("batchnorm", {"eps": float("nan")}, ["attribute 'eps' must be a number, got nan"]),
    ("batchnorm", {"eps": "1e-5"}, ["attribute 'eps' must be a float, got '1e-5' (str)"]),
    ("batchnorm", {"momentum": 1.5}, ["attribute 'momentum' must be in [0.0, 1.0], got 1.5"]),
    ("batchnorm", {"track_running_stats": 1}, ["attribute 'track_running_stats' must be a bool"]),
    ("gelu", {"approximate": "erf"}, ["attribute 'approximate' must be one of 'none', 'tanh', "
                                      "got 'erf'"]),
    ("reshape", {"shape": [-1, -1]}, ["attribute 'shape' must be a list of ints >= 0 with at "
                                      "most one -1"]),
    ("reshape", {"shape": [-2]}, ["at most one -1"]),
    ("cast", {"dtype": "float"}, ["attribute 'dtype' must be an ABI dtype name"]),
    ("clip", {"min": [0.0]}, ["attribute 'min' must be a float"]),
    ("mean", {"axes": []}, ["attribute 'axes' must not be empty"]),
    ("layer_norm", {"normalized_shape": [0]}, ["must have every entry >= 1"]),
    ("pad", {"pads": [[0, 0]], "value": "zero"}, ["attribute 'value' must be a float"]),
])
def test_normalize_refusals(op, attrs, texts):
    opdef = get_op(op)
    with pytest.raises(OpError) as info:
        normalize_attrs(opdef, attrs)
    message = str(info.value)
    assert message.startswith(f"op '{op}' v1: ")
    for text in texts:
        assert text in message


def test_normalize_reports_every_bad_attribute():
    with pytest.raises(OpError) as info:
        normalize_attrs(get_op("conv"), {"stride": [0], "groups": "2", "bogus": 1})
    assert len(info.value.context["problems"]) == 5  # bogus, stride, padding, dilation, groups


def test_normalize_refuses_a_non_mapping():
    with pytest.raises(OpError, match="attributes must be a mapping, got list"):
        normalize_attrs(get_op("relu"), [("a", 1)])


# --- input plumbing ---------------------------------------------------------------------------

X = T((1, 4, 8), "float32")
W = T((2, 4, 3), "float32")


def test_optional_inputs_may_be_omitted_or_none():
    conv = get_op("conv")
    expected = [T((1, 2, 6), "float32")]
    assert infer_shapes(conv, [X, W], CONV_OK) == expected
    assert infer_shapes(conv, [X, W, None], CONV_OK) == expected
    assert infer_shapes(conv, (X, W, T((2,), "float32")), CONV_OK) == expected


def test_plain_tuples_are_accepted_as_tensor_types():
    out = infer_shapes(get_op("relu"), [((2, "n"), "float32")], {})
    assert out == [T((2, "n"), "float32")] and isinstance(out[0], TensorType)


@pytest.mark.parametrize("inputs, text", [
    ([X], "conv: missing required input 'weight' (inputs: x, weight, bias?)"),
    ([X, None], "conv: missing required input 'weight'"),
    ([None, W], "conv: missing required input 'x'"),
    ([X, W, T((2,), "float32"), X], "conv: takes at most 3 input(s) (x, weight, bias?), got 4"),
])
def test_missing_and_extra_inputs(inputs, text):
    with pytest.raises(ContractError) as info:
        infer_shapes(get_op("conv"), inputs, CONV_OK)
    assert text in str(info.value)


def test_variadic_inputs():
    concat = get_op("concat")
    with pytest.raises(ContractError, match="concat: needs at least one input"):
        infer_shapes(concat, [], {"axis": 0})
    with pytest.raises(ContractError, match="concat: input 1 is missing"):
        infer_shapes(concat, [X, None], {"axis": 0})


@pytest.mark.parametrize("bad, error, text", [
    ("x", ContractError, "input 'x' must be a TensorType(shape, dtype), got str"),
    (T((1, -2), "float32"), ShapeError, "input 'x' has a malformed shape (1, -2)"),
    (T((1, ""), "float32"), ShapeError, "malformed shape"),
    (T((1, 2.0), "float32"), ShapeError, "malformed shape"),
    (T((1,), "f32"), DTypeError, "relu: input 'x': unknown dtype 'f32'"),
])
def test_malformed_tensor_types(bad, error, text):
    with pytest.raises(error) as info:
        infer_shapes(get_op("relu"), [bad], {})
    assert text in str(info.value)


def test_infer_shapes_normalizes_attrs_first():
    with pytest.raises(OpError, match="missing required attribute 'stride'"):
        infer_shapes(get_op("conv"), [X, W], {"padding": [[0, 0]], "dilation": [1]})


# --- dims -------------------------------------------------------------------------------------


def test_dims_arithmetic():
    assert dims.add(2, 3) == 5 and dims.add("H", 0) == "H" and dims.add("H", -1) == "H-1"
    assert dims.add(2, "H") == "H+2" and dims.add("a", "b") == "a+b"
    assert dims.mul("H", 1) == "H" and dims.mul("H", 0) == 0 and dims.mul("H-1", 2) == "(H-1)*2"
    assert dims.floordiv("H-1", 2) == "(H-1)//2" and dims.floordiv(7, 2) == 3
    # a product whose coefficient the divisor divides: that product divided, exactly
    assert dims.floordiv("(16*N)//2", 8) == "N" and dims.floordiv("6*N*W", 4) == "(6*N*W)//4"
    assert dims.floordiv(dims.mul("N", 6), 3) == "2*N"
    # by a product whose names are among the dividend's: (16*L*N)//(16*N) is L
    assert dims.floordiv("16*L*N", "16*N") == "L" and dims.floordiv("N*L", "L*N") == 1
    assert dims.floordiv("N", "L") == "N//L" and dims.floordiv("6*N", "4*N") == "(6*N)//(4*N)"
    # a floor quotient of a name and ints read one way: (x+a)//s+b is (x+a+b*s)//s
    assert dims.known_equal("(H-4)//4+1", "H//4") and dims.known_equal("(H-3)//2+1", "(H-1)//2")
    assert dims.known_equal("((H-4)//4+1)*((W-4)//4+1)", "(W//4)*(H//4)")
    assert dims.as_product("(H+2)//4+1") == (1, ("(H+6)//4",))
    assert not dims.known_equal("(H-4)//4+1", "H//2") and not dims.known_equal("H//4", "H")
    assert dims.known_equal("N*2", "2*N") and dims.known_equal("(4*N)//2", "N*2")
    assert not dims.known_equal("N*2", "N*3") and not dims.known_equal("N", "M")
    assert dims.broadcast("2*N", "N*2") == "2*N"  # the same size, not broadcast(2*N,N*2)
    assert dims.product([2, "H", 3, "W"]) == "6*H*W" and dims.product([2, 3]) == 6
    assert dims.product([0, "H"]) == 0 and dims.product(["H"]) == "H"
    assert dims.total([2, "a", 3]) == "a+5" and dims.total([1, 2]) == 3
    # a sum whose like terms, added up, the divisor divides: k*S + c is S + c//k (a chunk of two
    # batches concatenated: (batch+batch+1)//2 is batch), exact for any integer S
    assert dims.floordiv("batch+batch+1", 2) == "batch" and dims.floordiv("4*h-3", 2) == "2*h-2"
    assert dims.floordiv("h+h+h", 3) == "h" and dims.floordiv("h-h+5", 2) == 2
    assert dims.floordiv("2*h+w", 2) == "(2*h+w)//2"
    assert dims.known_equal("batch+batch", "2*batch") and dims.known_equal("h+1", "1+h")
    assert not dims.known_equal("h+h", "h") and not dims.known_equal("h+w", "h+1")
    # a sum or difference whose terms cancel is the int it is (GPT-Neo's seq - seq)
    assert dims.sub("seq", "seq") == 0 and dims.add("h+1", dims.sub(0, "h")) == 1
    assert dims.sub("2*h", "h") == "2*h-h" and dims.sub("h", "w") == "h-w"
    # simplified adds like terms up: a Range from past to past + seq holds seq values
    assert dims.simplified("past+seq-past") == "seq" and dims.simplified("2*h-h") == "h"
    assert dims.simplified("h+h+1") == "2*h+1" and dims.simplified("t-t") == 0
    assert dims.simplified("h//2") == "h//2" and dims.simplified(3) == 3
    # a floor quotient of a product that does not come out whole is one name, its factors
    # sorted (YOLO12's tokens per area, written (h*w)//4 and (w*h)//4 by the two exporters)
    assert dims.known_equal("(w*h)//4", "(h*w)//4") and not dims.known_equal("(h*w)//4", "h*w")
    assert dims.known_equal("(((H-1)//2+1)*W)//4", "(W*((H+1)//2))//4")
    assert dims.whole_quotient("(w*h)//4") == ("h*w", 4)
    assert dims.whole_quotient("(2*h*w)//4") == ("2*h*w", 4)
    assert dims.whole_quotient("h*w") is None and dims.whole_quotient("h//4") == ("h", 4)
    assert dims.whole_quotient(12) is None and dims.whole_quotient("(h*w)//1") is None
    # a plain name, not an expression nor one too long to keep, cut to a hashed name
    long = dims.product(["(h-1)//2+1"] * 40)
    assert long.startswith("expr_") and not dims.is_plain_name(long)
    assert dims.is_plain_name("batch") and not dims.is_plain_name("(h*w)//4")


def test_dims_comparisons_are_three_valued():
    assert dims.known_different(2, 3) and not dims.known_different("H", 3)
    assert not dims.known_different("H", "W") and dims.known_equal("H", "H")
    assert dims.broadcast(1, 5) == 5 and dims.broadcast("n", 1) == "n"
    assert dims.broadcast("n", 5) == 5 and dims.broadcast(3, 5) is None
    assert dims.broadcast("a", "a") == "a" and dims.broadcast("a", "b") == "broadcast(a,b)"
    assert dims.broadcast_operands(dims.broadcast("(h-1)//2+1", "h*2")) == ("(h-1)//2+1",
                                                                             "h*2")
    assert dims.broadcast_operands("broadcast(a,3)") == ("a", 3)
    assert dims.broadcast_operands("broadcast(a)") is None
    assert dims.broadcast_operands("broadcast(a,b)*broadcast(c,d)") is None
    assert dims.broadcast_operands("h") is None and dims.broadcast_operands(4) is None


def test_nested_floor_quotients_are_one_name_and_keep_their_value():
    """Convs' output sizes one after the other, ((H-1)//2+1-1)//2+1, read as one quotient of
    H, (H+3)//4: the same name as one conv's, and the same value at every H."""
    assert dims.known_equal("((H-1)//2+1-1)//2+1", "(H-1)//4+1")
    assert dims.as_product("((H-1)//2+1-1)//2+1") == (1, ("(H+3)//4",))
    assert dims.known_equal("(((H-1)//2+1)*2)", "2*((H+1)//2)")
    assert not dims.known_equal("((H-1)//2+1-1)//2+1", "(H-1)//2+1")
    rng = np.random.default_rng(0)
    for _ in range(200):
        d = "H"
        for _ in range(rng.integers(1, 4)):
            k, stride, pad = (int(v) for v in rng.integers(1, 5, size=3))
            d = dims.window_out(d, k, stride, pad - 1, pad // 2, 1)
        name = dims.as_product(d)[1][0]
        for h in range(40, 300):
            assert eval(d, {"H": h}) == eval(name, {"H": h}), (d, name, h)


def test_a_difference_of_dims_reads_back_as_its_terms_and_keeps_its_value():
    """sub writes what as_sum splits again: an int and signed terms whose sum is the value
    (a linspace's ``w - 1``, a U-Net's ``h - 2*h1``)."""
    assert dims.sub(7, 3) == 4 and dims.sub("w", 0) == "w" and dims.sub("w", 1) == "w-1"
    assert dims.as_sum("w-1") == (-1, [(1, "w")])
    assert dims.as_sum(dims.sub("h", dims.mul(2, "h1"))) == (0, [(1, "h"), (-1, "2*h1")])
    assert dims.as_sum(dims.sub(0, "w")) == (0, [(-1, "w")])
    assert dims.as_sum("(H-1)//2+1") == (1, [(1, "(H-1)//2")])  # the sum is outside the ()
    assert dims.as_sum("slice(w,1,-1,1)-2") == (-2, [(1, "slice(w,1,-1,1)")])
    assert dims.as_sum(5) == (5, [])
    assert dims.add("h+2", -2) == "h" and dims.add("(h-1)//2+1", -1) == "(h-1)//2"
    assert dims.add("h*2", -1) == "h*2-1" and dims.add("h-2*g", 3) == "h-2*g+3"
    assert dims.known_equal("h+2-2", "h") and dims.known_equal("h+1-3", "h-2")
    rng = np.random.default_rng(1)
    sizes = ((1, 1), (5, 9), (40, 7))
    for _ in range(300):
        d, truth = "w", [w for w, _ in sizes]
        for _ in range(rng.integers(1, 5)):
            pick = rng.integers(0, 4)
            other = [int(rng.integers(-3, 4)), "h", dims.mul(int(rng.integers(2, 4)), "w"),
                     dims.window_out("h", 3, 2, 1, 1, 1)][pick]
            values = [other if pick == 0 else eval(str(other), {"w": w, "h": h})
                      for w, h in sizes]
            minus = bool(rng.integers(0, 2))
            d = dims.sub(d, other) if minus else dims.add(d, other)
            truth = [t - v if minus else t + v for t, v in zip(truth, values)]
        const, terms = dims.as_sum(d)
        for (w, h), want in zip(sizes, truth):
            names = {"w": w, "h": h}
            assert eval(str(d), names) == want, (d, want)
            assert const + sum(sign * eval(str(t), names) for sign, t in terms) == want


def test_a_slice_to_the_end_of_a_run_time_dim_is_a_floor_quotient():
    """From a start >= 0 by a step >= 1 to the end: (size - start + step - 1) // step, the
    slice's length wherever the size is at least the start; a conv's output size by the
    same stride compares equal; other slices keep their own name."""
    far = dims.TO_THE_END
    assert dims.slice_len("t", 2, far, 1) == "t-2" and dims.slice_len("h", 1, far, 2) == "h//2"
    assert dims.known_equal(dims.slice_len("h", 0, far, 2), dims.window_out("h", 3, 2, 1, 1, 1))
    assert dims.slice_len("t", -3, far, 1) == f"slice(t,-3,{far},1)"
    assert dims.slice_len("t", 0, 5, 1) == "slice(t,0,5,1)"
    for start in range(4):
        for step in range(1, 5):
            d = dims.slice_len("n", start, far, step)
            for n in range(start, 40):
                assert eval(d, {"n": n}) == len(range(n)[start::step]), (d, n)


def test_a_slice_to_a_constant_end_reads_back_as_at_most_that_many_entries():
    """first_entries reads slice_len's name of x[:, :e] back as e (nested too); any other
    slice, name or expression is None."""
    assert dims.first_entries(dims.slice_len("t", 0, 16, 1)) == 16
    assert dims.first_entries(dims.slice_len(dims.slice_len("t", 0, 16, 1), 0, 8, 1)) == 8
    for d in (dims.slice_len("t", 1, 16, 1), dims.slice_len("t", 0, 16, 2),
              dims.slice_len("t", -3, dims.TO_THE_END, 1), "slice(t,0,16,1)+slice(u,0,3,1)",
              "t", 16, "t-2"):
        assert dims.first_entries(d) is None, d


def test_window_expressions_are_deterministic():
    assert dims.window_out("H", 3, 2, 1, 1, 1) == "(H-1)//2+1"
    assert dims.window_out("H", 3, 1, 1, 1, 1) == "H"
    assert dims.window_out(128, 3, 2, 1, 1, 1) == 64
    assert dims.transposed_out("H", 4, 2, 1, 0, 1) == "H*2"
    assert dims.slice_len(10, -3, 100, 1) == 3 and dims.slice_len("n", 0, 2, 1) == "slice(n,0,2,1)"


def test_symbolic_expressions_stay_bounded():
    # each self-concat doubles an uncapped expression; a hostile graph could chain dozens
    d = "n"
    for _ in range(40):
        d = dims.total([d, d])
    assert isinstance(d, str) and len(d) <= dims.MAX_EXPRESSION
    e = "n"
    for _ in range(40):
        e = dims.total([e, e])
    assert d == e  # the same expression still compares equal
    assert dims.total(["m", "m"]) != d


@pytest.mark.parametrize("dim, product", [
    ("batch", (1, ("batch",))), (6, (6, ())), ("batch*2", (2, ("batch",))),
    ("2*batch", (2, ("batch",))), ("(16*batch)//8", (2, ("batch",))),
    ("((16*b)//8)*s", (2, ("b", "s"))), ("s//2", (1, ("s//2",))), ("h+2", (1, ("h+2",))),
    ("(a)(b)", (1, ("(a)(b)",))), ("(" * 90 + "b" + ")" * 90, (1, ("b",))),
    ("h-1", (1, ("h-1",))), ("(h+1)*2", (2, ("h+1",))),  # sums are names
    # a conv's output sizes: a floor quotient of a name and ints, written one way
    ("(h-1)//2+1", (1, ("(h+1)//2",))),
    ("((h-2)//2+1)*((w-2)//2+1)", (1, ("h//2", "w//2")))])
def test_dims_read_the_products_their_arithmetic_writes(dim, product):
    """Anything else is a name of its own: compared as written (a floor quotient of a name
    and ints as ``(x+c)//s``), as the ABI compares it."""
    assert dims.as_product(dim) == product
