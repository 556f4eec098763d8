"""BitwiseAnd, BitwiseOr, BitwiseXor, BitwiseNot, BitShift and the logical Xor: torch's & | ^ ~
<< >> on int64 and uint8 tensors under both exporters, and hand-built models of every integer
dtype at its extremes and of shifts by 0, 1, the width - 1, the width and beyond, compared with
onnxruntime on the numpy and onnxruntime backends; constant inputs fold (shape arithmetic too);
a signed or float input, and a missing or unknown direction, are refused naming the node.
BitCast (opset 26) bit for bit onnxruntime's."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import ModelFileError, UnsupportedModelError
from plugins.onnxruntime_backend import OnnxruntimeBackend

from .conftest import (assert_refused, check_against_onnxruntime, check_on_both_backends, export,
                       float64_inside, import_and_load, onnx, onnxruntime_outputs, torch)

helper, TP = onnx.helper, onnx.TensorProto
RNG = np.random.default_rng(18)
INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
UINTS = [d for d in INTS if d.startswith("u")]


def _ops(loaded) -> list[str]:
    return [n.op for n in loaded.graph.nodes]


def _extremes(dtype: str, n: int) -> np.ndarray:
    """``n`` integers of ``dtype``: its minimum, maximum, 0, 1, max - 1, min + 1, then random."""
    info = np.iinfo(dtype)
    edges = np.array([info.min, info.max, 0, 1, info.max - 1, info.min + 1], dtype)
    return np.concatenate([edges, RNG.integers(info.min, info.max, n - 6, dtype, True)])


# --- torch models ------------------------------------------------------------------------------


class _Bits(torch.nn.Module):
    """& | ^ ~ and both shifts (by a tensor and by a constant) of int64 and uint8, and a
    logical xor; ``shifts=False`` leaves out the uint8 shifts, which the dynamo exporter
    casts to int8 (a dtype the onnxruntime backend does not take)."""

    def __init__(self, shifts: bool = True):
        super().__init__()
        self.shifts = shifts

    def forward(self, a, b, s, u, v, w):
        out = (a & b, a | b, a ^ b, ~a, torch.bitwise_left_shift(a, s),
               torch.bitwise_right_shift(a, s), a << 3, a >> 5, (a & 0xFF) | 0x100,
               u & v, u | v, u ^ v, ~u, torch.logical_xor(a > b, u > v))
        if self.shifts:
            out += (torch.bitwise_left_shift(u, w), torch.bitwise_right_shift(u, w), u << 2,
                    u >> 7)
        return out


def _bits_args(shape=(4, 9)):
    return [torch.randint(-9, 9, shape), torch.randint(-9, 9, shape),
            torch.randint(0, 64, shape), torch.randint(0, 256, shape, dtype=torch.uint8),
            torch.randint(0, 256, shape, dtype=torch.uint8),
            torch.randint(0, 8, shape, dtype=torch.uint8)]


def _bits_feeds(shape=(4, 9)):
    """The int64 and uint8 extremes, shifts from 0 to past the width (int64: 0..69, uint8:
    0..11), and small values."""
    n = int(np.prod(shape))
    return [{"a": _extremes("int64", n).reshape(shape), "b": _extremes("int64", n)[::-1]
             .reshape(shape), "s": np.arange(n).reshape(shape) % 70,
             "u": _extremes("uint8", n).reshape(shape),
             "v": _extremes("uint8", n)[::-1].reshape(shape),
             "w": (np.arange(n) % 12).astype(np.uint8).reshape(shape)},
            {"a": RNG.integers(-50, 50, shape), "b": RNG.integers(-50, 50, shape),
             "s": RNG.integers(0, 64, shape), "u": RNG.integers(0, 256, shape, np.uint8),
             "v": RNG.integers(0, 256, shape, np.uint8),
             "w": RNG.integers(0, 8, shape, np.uint8)}]


_NAMES = ["a", "b", "s", "u", "v", "w"]


def _outputs(n: int) -> list[str]:
    return [f"y{i}" for i in range(n)]


@pytest.mark.parametrize("fold, optimize", [(True, True), (False, False)],
                         ids=["dynamo", "dynamo-noopt"])
def test_torch_bitwise_ops_of_the_dynamo_exporter_match_onnxruntime(fold, optimize, tmp_path,
                                                                    signer):
    """The dynamo exporter writes & | ^ ~ as Bitwise*, the shifts as BitShift (an int64 one
    through uint64, and >> with a sign mask), logical_xor as Xor. (Unoptimized, its uint8
    shifts are a broken model: see the refusal below.)"""
    model = export(_Bits(shifts=optimize), _bits_args(), tmp_path / "b.onnx", dynamo=True,
                   fold=fold, optimize=optimize, input_names=_NAMES,
                   output_names=_outputs(18 if optimize else 14))
    _, loaded = import_and_load(model, tmp_path / "b.pha", signer)
    ops = set(_ops(loaded))
    assert {"bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "bit_shift"} <= ops, ops
    check_against_onnxruntime(model, loaded, _bits_feeds())


def test_torch_bitwise_ops_on_the_onnxruntime_backend_match_onnxruntime(tmp_path, signer):
    model = export(_Bits(shifts=False), _bits_args(), tmp_path / "b.onnx", dynamo=True,
                   input_names=_NAMES, output_names=_outputs(14))
    _, loaded = import_and_load(model, tmp_path / "b.pha", signer)
    assert "bit_shift" in _ops(loaded)
    check_against_onnxruntime(model, loaded, _bits_feeds(), backend=OnnxruntimeBackend())


class _LegacyBits(torch.nn.Module):
    """What the legacy exporter takes on integers: & (BitwiseAnd), the shifts of uint8
    (BitShift) and of int64 (a multiplication or division by a power of 2)."""

    def forward(self, a, b, s, u, v, w):
        return (a & b, a << s, a >> s, a >> 3, u & v, u << w, u >> w, u >> 3)


@pytest.mark.parametrize("fold", [True, False], ids=["legacy", "legacy-nofold"])
def test_torch_bitwise_ops_of_the_legacy_exporter_match_onnxruntime(fold, tmp_path, signer):
    model = export(_LegacyBits(), _bits_args(), tmp_path / "l.onnx", dynamo=False, fold=fold,
                   input_names=_NAMES, output_names=_outputs(8))
    _, loaded = import_and_load(model, tmp_path / "l.pha", signer)
    assert {"bitwise_and", "bit_shift"} <= set(_ops(loaded))
    feeds = _bits_feeds()
    for feed in feeds:  # 2**63 as a float does not convert back to int64 (Pow, then Cast)
        feed["s"] %= 62
        feed["w"] %= 8  # torch's shift of a uint8 by 8 or more differs from BitShift's 0
    check_on_both_backends(model, loaded, feeds)


# --- hand-built models ---------------------------------------------------------------------------


def _model(tmp_path, op: str, dtype: str, a_shape, b_shape=None, opset: int = 18, **attrs):
    """A one-node ``op`` named ``node`` of input ``a`` (and ``b`` with ``b_shape``) to ``y``."""
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    names = ["a"] if b_shape is None else ["a", "b"]
    shapes = [a_shape] if b_shape is None else [a_shape, b_shape]
    node = helper.make_node(op, names, ["y"], name="node", **attrs)
    out = TP.BOOL if op == "Xor" else elem
    out_shape = [b if a == 1 else a for a, b in zip(*shapes)] if b_shape else list(a_shape)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, elem, list(s))
                                            for n, s in zip(names, shapes)],
                              [helper.make_tensor_value_info("y", out, out_shape)])
    path = tmp_path / f"{op}_{dtype}.onnx"
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString())
    return path


def _exact(model, loaded, feeds, backend=None) -> None:
    """check_against_onnxruntime, and every output bit-exact."""
    for got, want in check_against_onnxruntime(model, loaded, feeds, backend=backend):
        for name, value in want.items():
            np.testing.assert_array_equal(got[name], value, err_msg=name)


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot"])
def test_bitwise_ops_of_every_integer_dtype_match_onnxruntime_at_the_extremes(op, dtype,
                                                                              tmp_path, signer):
    unary = op == "BitwiseNot"
    model = _model(tmp_path, op, dtype, ("n", 1), None if unary else (1, 12))
    _, loaded = import_and_load(model, tmp_path / "b.pha", signer)
    assert _ops(loaded) == ["bitwise_" + op[7:].lower()]
    feeds = [{"a": _extremes(dtype, 24).reshape(24, 1)}, {"a": _extremes(dtype, 7)
                                                         .reshape(7, 1)}]
    if not unary:
        for feed in feeds:
            feed["b"] = _extremes(dtype, 12).reshape(1, 12)
    _exact(model, loaded, feeds)
    if dtype in ("int32", "int64", "uint8", "uint64"):
        _exact(model, loaded, feeds, backend=OnnxruntimeBackend())


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", UINTS)
def test_bit_shift_matches_onnxruntime_at_zero_the_width_and_beyond(dtype, direction, tmp_path,
                                                                    signer):
    """Shifts by 0, 1, width - 1, width, width + 1, 2 * width and the dtype's maximum: a shift
    by the width or more gives 0, as onnxruntime."""
    width = np.iinfo(dtype).bits
    model = _model(tmp_path, "BitShift", dtype, ("n", 1), (1, 7), direction=direction)
    _, loaded = import_and_load(model, tmp_path / "s.pha", signer)
    assert _ops(loaded) == ["bit_shift"]
    shifts = np.array([[0, 1, width - 1, width, width + 1, 2 * width, np.iinfo(dtype).max]],
                      dtype)
    feeds = [{"a": _extremes(dtype, n).reshape(n, 1), "b": shifts} for n in (20, 6)]
    _exact(model, loaded, feeds)
    got = check_against_onnxruntime(model, loaded, feeds)[0][0]["y"]
    assert not got[:, 3:].any() and got[1, 0] == np.iinfo(dtype).max
    if dtype in ("uint8", "uint64"):
        _exact(model, loaded, feeds, backend=OnnxruntimeBackend())


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", [d for d in INTS if not d.startswith("u")])
def test_signed_bit_shift_of_opset_28_matches_onnxruntime(dtype, direction, tmp_path, signer):
    """Opset 28: a right shift is arithmetic, a left one loses the bits past the sign bit; a
    shift that is negative or the width or more gives -1 for a negative value shifted right,
    else 0 (the spec, and onnxruntime)."""
    width = np.iinfo(dtype).bits
    model = _model(tmp_path, "BitShift", dtype, ("n", 1), (1, 9), opset=28,
                   direction=direction)
    _, loaded = import_and_load(model, tmp_path / "s.pha", signer)
    shifts = np.array([[0, 1, width - 1, width, width + 1, -1, -width, np.iinfo(dtype).max,
                        np.iinfo(dtype).min]], dtype)
    feeds = [{"a": _extremes(dtype, n).reshape(n, 1), "b": shifts} for n in (20, 6)]
    _exact(model, loaded, feeds)
    _exact(model, loaded, feeds, backend=OnnxruntimeBackend())
    got = check_against_onnxruntime(model, loaded, feeds)[0][0]["y"]
    fill = np.where(feeds[0]["a"] < 0, -1, 0) if direction == "RIGHT" else 0
    assert (got[:, 3:] == fill).all()  # shifts past the width or negative: the sign's fill


@pytest.mark.parametrize("have, want", [("float32", "int32"), ("int32", "float32"),
                                        ("uint8", "int8"), ("int16", "uint16"),
                                        ("uint64", "int64")])
def test_bitcast_of_opset_26_is_bit_for_bit_onnxruntime_s(have, want, tmp_path, signer):
    """BitCast over a run-time batch, nan payloads, infinities and -0.0 among the bits, on
    both backends; a bool or a width that differs is refused naming the node."""
    node = helper.make_node("BitCast", ["a"], ["y"], name="node",
                            to=helper.np_dtype_to_tensor_dtype(np.dtype(want)))
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(have))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("a", elem, ["n", 8])],
                              [helper.make_tensor_value_info(
                                  "y", helper.np_dtype_to_tensor_dtype(np.dtype(want)),
                                  ["n", 8])])
    model = tmp_path / "b.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)]), model)
    _, loaded = import_and_load(model, tmp_path / "b.pha", signer)
    assert _ops(loaded) == ["bitcast"]
    bits = RNG.integers(0, 256, (3, 8 * np.dtype(have).itemsize), dtype=np.uint8).view(have)
    if have == "float32":
        bits[0] = [np.nan, -np.nan, np.inf, -np.inf, -0.0, 1e-45, 3e38, 1.0]
    for backend in (None, OnnxruntimeBackend()):
        for got, ref in check_against_onnxruntime(model, loaded, [{"a": bits}, {"a": bits[:1]}],
                                                  backend=backend):
            size = np.dtype(want).itemsize
            np.testing.assert_array_equal(got["y"].view(f"u{size}"), ref["y"].view(f"u{size}"))


@pytest.mark.parametrize("have, want, message", [
    ("bool", "uint8", "bitcast: x must be a numeric tensor, got bool"),
    ("int16", "int32", "bitcast: x of dtype int16 (2 bytes) and dtype int32 (4 bytes) differ")])
def test_a_bitcast_the_abi_does_not_take_is_refused(have, want, message, tmp_path):
    node = helper.make_node("BitCast", ["a"], ["y"], name="node",
                            to=helper.np_dtype_to_tensor_dtype(np.dtype(want)))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "a", helper.np_dtype_to_tensor_dtype(np.dtype(have)), [4])], [
        helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(np.dtype(want)),
                                      ["k"])])
    model = tmp_path / "b.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)]), model)
    assert_refused(model, UnsupportedModelError, "node 'node' (BitCast)", message)


def test_xor_of_bool_tensors_is_not_equal(tmp_path, signer):
    model = _model(tmp_path, "Xor", "bool", (2, "n"), (1, "n"))
    _, loaded = import_and_load(model, tmp_path / "x.pha", signer)
    assert _ops(loaded) == ["equal", "not"]
    a = np.array([[True, True, False, False], [False, True, False, True]])
    feeds = [{"a": a, "b": np.array([[True, False, True, False]])},
             {"a": RNG.random((2, 9)) > 0.5, "b": RNG.random((1, 9)) > 0.5}]
    for backend in (None, OnnxruntimeBackend()):
        _exact(model, loaded, feeds, backend=backend)


# --- constants ----------------------------------------------------------------------------------


def _save(tmp_path, nodes, inputs, outputs, initializers, name="c.onnx", opset=18):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=initializers)
    path = tmp_path / name
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString())
    return path


def test_constant_inputs_fold_to_onnxruntime_values(tmp_path, signer):
    """Every op of the module on initializers folds at import (shifts past the width
    included): no bit op reaches the graph, and the outputs are onnxruntime's."""
    u = np.array([[1, 255, 128, 7, 0, 200]], np.uint8)
    s = np.array([[0, 1, 7, 8, 9, 255]], np.uint8)
    i = np.array([[-2**63, 2**63 - 1, -1, 0, 5, -6]])
    t = np.array([[3, -3, 2**62, -1, 0, 7]])
    p, q = np.array([[True, True, False, False]]), np.array([[True, False, True, False]])
    inits = [onnx.numpy_helper.from_array(v, n) for n, v in
             (("u", u), ("s", s), ("i", i), ("t", t), ("p", p), ("q", q))]
    nodes = [helper.make_node("BitShift", ["u", "s"], ["l"], direction="LEFT"),
             helper.make_node("BitShift", ["u", "s"], ["r"], direction="RIGHT"),
             helper.make_node("BitwiseAnd", ["i", "t"], ["and"]),
             helper.make_node("BitwiseOr", ["i", "t"], ["or"]),
             helper.make_node("BitwiseXor", ["i", "t"], ["xor"]),
             helper.make_node("BitwiseNot", ["i"], ["not"]),
             helper.make_node("Xor", ["p", "q"], ["lx"])]
    outs = {"l": (TP.UINT8, u), "r": (TP.UINT8, u), "and": (TP.INT64, i), "or": (TP.INT64, i),
            "xor": (TP.INT64, i), "not": (TP.INT64, i), "lx": (TP.BOOL, p)}
    # each output through an Add (Or for bool) of a graph input, so the graph has a node
    x = {TP.UINT8: "xu", TP.INT64: "xi", TP.BOOL: "xb"}
    for name, (elem, _) in outs.items():
        nodes.append(helper.make_node("Or" if elem == TP.BOOL else "Add", [name, x[elem]],
                                      [f"y_{name}"]))
    model = _save(tmp_path, nodes,
                  [helper.make_tensor_value_info(x[e], e, [1, 6 if e != TP.BOOL else 4])
                   for e in x],
                  [helper.make_tensor_value_info(f"y_{n}", e, list(v.shape))
                   for n, (e, v) in outs.items()], inits)
    _, loaded = import_and_load(model, tmp_path / "c.pha", signer)
    assert not {"bit_shift", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not",
                "equal", "not"} & set(_ops(loaded)), _ops(loaded)
    feed = {"xu": np.zeros((1, 6), np.uint8), "xi": np.zeros((1, 6), np.int64),
            "xb": np.zeros((1, 4), bool)}
    _exact(model, loaded, [feed])
    want = onnxruntime_outputs(model, feed)
    assert want["y_l"].tolist() == [[1, 254, 0, 0, 0, 0]]  # the reference has the 0s too


def test_shape_arithmetic_through_bit_ops_folds(tmp_path, signer):
    """A Reshape target computed from Shape with BitwiseAnd and BitShift (through uint64)
    folds into a constant: the graph is one reshape."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Cast", ["shape"], ["bits"], to=TP.UINT64),
             helper.make_node("BitShift", ["bits", "one"], ["half"], direction="RIGHT"),
             helper.make_node("BitShift", ["half", "one"], ["back"], direction="LEFT"),
             helper.make_node("Cast", ["back"], ["even"], to=TP.INT64),
             helper.make_node("BitwiseAnd", ["even", "mask"], ["target"]),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    model = _save(tmp_path, nodes, [helper.make_tensor_value_info("x", TP.FLOAT, [6, 4])],
                  [helper.make_tensor_value_info("y", TP.FLOAT, [6, 4])],
                  [onnx.numpy_helper.from_array(np.array(1, np.uint64), "one"),
                   onnx.numpy_helper.from_array(np.array([-1, 0x7F], np.int64), "mask")])
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    assert _ops(loaded) == ["reshape"]
    assert list(loaded.graph.nodes[0].attrs["shape"]) == [6, 4]
    _exact(model, loaded, [{"x": RNG.standard_normal((6, 4)).astype(np.float32)}])


# --- refusals -----------------------------------------------------------------------------------


def test_an_unoptimized_dynamo_export_of_a_uint8_shift_is_refused_as_onnxruntime_does(tmp_path):
    """Unoptimized, the dynamo exporter declares a uint8 shift's output uint8 but computes it
    as int8: onnxruntime refuses to load that model, and the import refuses it too."""

    class Shift(torch.nn.Module):
        def forward(self, u, w):
            return torch.bitwise_left_shift(u, w)

    args = [torch.ones(2, 3, dtype=torch.uint8), torch.ones(2, 3, dtype=torch.uint8)]
    model = export(Shift(), args, tmp_path / "s.onnx", dynamo=True, fold=False,
                   optimize=False, input_names=["u", "w"], output_names=["y"])
    with pytest.raises(Exception, match="does not match expected type") as info:
        onnxruntime_outputs(model, {"u": args[0].numpy(), "w": args[1].numpy()})
    assert type(info.value).__module__.startswith("onnxruntime")
    assert_refused(model, ModelFileError, "graph output 'y'",
                   "is declared uint8 (2, 3) but computes to int8 (2, 3)")


def test_bit_shift_of_a_signed_or_float_tensor_is_refused(tmp_path):
    where = "node 'node' (BitShift)"
    for dtype in ("int64", "int8", "float32"):
        assert_refused(_model(tmp_path, "BitShift", dtype, (2,), (2,), direction="LEFT"),
                       UnsupportedModelError, where,
                       f"input 'a' has dtype {dtype}: BitShift takes unsigned integer tensors "
                       f"(uint8 to uint64) before opset 28, as ONNX")


def test_signed_constants_of_opset_28_fold_to_onnxruntime_values(tmp_path, signer):
    i = np.array([[-2**31, 2**31 - 1, -1, -5, 5, -6, 7, -8]], np.int32)
    t = np.array([[1, 1, 31, 1, 2, 40, -1, 3]], np.int32)
    inits = [onnx.numpy_helper.from_array(v, n) for n, v in (("i", i), ("t", t))]
    nodes = [helper.make_node("BitShift", ["i", "t"], ["l"], direction="LEFT"),
             helper.make_node("BitShift", ["i", "t"], ["r"], direction="RIGHT"),
             helper.make_node("Add", ["l", "x"], ["y_l"]),
             helper.make_node("Add", ["r", "x"], ["y_r"])]
    model = _save(tmp_path, nodes, [helper.make_tensor_value_info("x", TP.INT32, [1, 8])],
                  [helper.make_tensor_value_info(n, TP.INT32, [1, 8]) for n in ("y_l", "y_r")],
                  inits, opset=28)
    _, loaded = import_and_load(model, tmp_path / "c.pha", signer)
    assert _ops(loaded) == ["add", "add"]
    feed = {"x": np.zeros((1, 8), np.int32)}
    _exact(model, loaded, [feed])
    assert onnxruntime_outputs(model, feed)["y_r"].tolist() == [
        [-2**30, 2**30 - 1, -1, -3, 1, -1, 0, -1]]


def test_bitwise_ops_of_a_float_or_bool_tensor_are_refused(tmp_path):
    for op, dtype in (("BitwiseAnd", "float32"), ("BitwiseOr", "float64"),
                      ("BitwiseXor", "bool"), ("BitwiseNot", "float32"), ("BitwiseNot", "bool")):
        unary = op == "BitwiseNot"
        assert_refused(float64_inside(_model(tmp_path, op, dtype, (2,), None if unary else (2,))),
                       UnsupportedModelError, f"node 'node' ({op})",
                       f"input 'a' has dtype {dtype}: {op} takes integer tensors (int8 to int64, "
                       f"uint8 to uint64)")


def test_xor_of_integers_is_refused(tmp_path):
    assert_refused(_model(tmp_path, "Xor", "int32", (2,), (2,)), UnsupportedModelError,
                   "node 'node' (Xor)", "input 'a' has dtype int32: Xor takes bool tensors (the "
                   "integer one is BitwiseXor)")


def test_bit_shift_without_a_known_direction_is_refused(tmp_path):
    where = "node 'node' (BitShift)"
    assert_refused(_model(tmp_path, "BitShift", "uint8", (2,), (2,), direction="UP"),
                   UnsupportedModelError, where,
                   "attribute direction='UP' must be 'LEFT' or 'RIGHT'")
    assert_refused(_model(tmp_path, "BitShift", "uint8", (2,), (2,)), ModelFileError,
                   "Name: node OpType: BitShift", "Required attribute 'direction' is missing")


def test_inputs_of_two_dtypes_are_refused(tmp_path):
    nodes = [helper.make_node("BitShift", ["a", "b"], ["y"], name="node", direction="LEFT")]
    model = _save(tmp_path, nodes, [helper.make_tensor_value_info("a", TP.UINT8, [2]),
                                    helper.make_tensor_value_info("b", TP.UINT16, [2])],
                  [helper.make_tensor_value_info("y", TP.UINT8, [2])], [])
    assert_refused(model, UnsupportedModelError, "node 'node' (BitShift)",
                   "inputs of dtypes ['uint8', 'uint16']: BitShift takes one dtype")


@pytest.mark.parametrize("op, values, message", [
    ("BitShift", [np.array([1, 2]), np.array([1, 1])],
     "input 'input 0' has dtype int64: BitShift takes unsigned integer tensors"),
    ("BitwiseAnd", [np.array([1.5]), np.array([2.5])],
     "input 'input 0' has dtype float64: BitwiseAnd takes integer tensors"),
    ("Xor", [np.array([1], np.int32), np.array([0], np.int32)],
     "input 'input 0' has dtype int32: Xor takes bool tensors")])
def test_constant_inputs_a_mapping_would_refuse_are_refused_when_folded(op, values, message,
                                                                        tmp_path):
    names = [f"c{i}" for i in range(len(values))]
    nodes = [helper.make_node(op, names, ["k"], name="node",
                              **({"direction": "LEFT"} if op == "BitShift" else {})),
             helper.make_node("Identity", ["k"], ["y"], name="out")]
    out = helper.np_dtype_to_tensor_dtype(values[0].dtype if op != "Xor" else np.dtype(bool))
    model = _save(tmp_path, nodes, [], [helper.make_tensor_value_info("y", out, [len(values[0])])],
                  [onnx.numpy_helper.from_array(v, n) for n, v in zip(names, values)])
    assert_refused(float64_inside(model), UnsupportedModelError, f"node 'node' ({op})", message)


def test_a_folded_broadcast_above_the_cap_is_refused_before_it_is_computed(tmp_path):
    big = [onnx.numpy_helper.from_array(np.zeros((2**14, 1), np.uint8), "a"),
           onnx.numpy_helper.from_array(np.zeros((1, 2**14), np.uint8), "b")]
    nodes = [helper.make_node("BitwiseOr", ["a", "b"], ["k"], name="node"),
             helper.make_node("Identity", ["k"], ["y"], name="out")]
    model = _save(tmp_path, nodes, [],
                  [helper.make_tensor_value_info("y", TP.UINT8, [2**14, 2**14])], big)
    from plugin_host.onnx_import import import_onnx
    from plugin_host.onnx_import.reader import ReadLimits

    with pytest.raises(ModelFileError, match=r"node 'node' \(BitwiseOr\).*BitwiseOr's broadcast "
                                             r"result would have 268435456 elements"):
        import_onnx(model, limits=ReadLimits(max_tensor_elements=2**20))
