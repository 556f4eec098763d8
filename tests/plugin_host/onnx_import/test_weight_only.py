"""Weight-only quantization: onnxruntime's MatMulNBitsQuantizer's two formats, com.microsoft's
MatMulNBits (QOperator) and a blocked DequantizeLinear of 4-bit weights (QDQ), dequantized at
import; built and compared with onnxruntime on both backends; hand-made nodes over bits,
block sizes, zero points, bias and accuracy_level 4 (A quantized to int8 per block); and what
is refused, naming the node or the tensor."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import ModelFileError, UnsupportedModelError

from .conftest import (assert_refused, check_against_onnxruntime, check_on_both_backends,
                       import_and_load, onnx, weight_only_quantized)

helper, TP, numpy_helper = onnx.helper, onnx.TensorProto, onnx.numpy_helper
_MS = "com.microsoft"


def _feeds(rng) -> list[dict]:
    return [{"x": (rng.standard_normal((2, 3, 64)) * s).astype(np.float32)} for s in (1, 3)]


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("symmetric", [False, True])
def test_matmul_nbits_from_the_quantizer_builds_and_matches(bits, symmetric, tmp_path,
                                                             signer):
    """Symmetric: no zero points (2 ** (bits - 1)); asymmetric: packed ones."""
    path = weight_only_quantized(tmp_path, "QOperator", bits, symmetric)
    nodes = [n for n in onnx.load(str(path)).graph.node if n.op_type == "MatMulNBits"]
    assert len(nodes) == 2 and all((len(n.input) > 3) != symmetric for n in nodes)
    loaded = import_and_load(path, tmp_path / "m.pha", signer)[1]
    assert [n.op for n in loaded.graph.nodes] == ["linear", "gelu", "linear"]
    check_on_both_backends(path, loaded, _feeds(np.random.default_rng(7)))


@pytest.mark.parametrize("bits", [4, 8])
def test_the_quantizer_s_model_at_accuracy_level_4(bits, tmp_path, signer):
    """accuracy_level 4 (onnxruntime's model builder's default for int4 on CPU) on both
    MatMulNBits of the quantized MLP, over (2, 3, 64) inputs: onnxruntime quantizes each block
    of A to int8, and so does the import, before its float32 MatMul."""
    path = weight_only_quantized(tmp_path, "QOperator", bits, False)
    model = onnx.load(str(path))
    for node in model.graph.node:
        if node.op_type == "MatMulNBits":
            node.attribute.append(helper.make_attribute("accuracy_level", 4))
    onnx.save(model, str(path))
    loaded = import_and_load(path, tmp_path / "m.pha", signer)[1]
    ops = [n.op for n in loaded.graph.nodes]
    assert ops.count("round") == 2 and ops.count("linear") + ops.count("matmul") == 2, ops
    check_on_both_backends(path, loaded, _feeds(np.random.default_rng(7)))


@pytest.mark.parametrize("symmetric", [False, True])
def test_blocked_4_bit_dequantize_linear_from_the_quantizer_builds_and_matches(
        symmetric, tmp_path, signer):
    """The QDQ format: uint4 (asymmetric) or int4 (symmetric) weights, dequantized in blocks
    of 32 along K. Compared with onnxruntime unoptimized, as the build's reference runs:
    optimized, onnxruntime runs such a MatMul as MatMulNBits computing with A quantized to
    int8, some 5e-3 away."""
    from plugins.onnxruntime_backend import OnnxruntimeBackend

    path = weight_only_quantized(tmp_path, "QDQ", 4, symmetric)
    kinds = {t.data_type for t in onnx.load(str(path)).graph.initializer}
    assert (TP.INT4 if symmetric else TP.UINT4) in kinds
    loaded = import_and_load(path, tmp_path / "m.pha", signer)[1]
    for backend in (None, OnnxruntimeBackend()):
        check_against_onnxruntime(path, loaded, _feeds(np.random.default_rng(11)),
                                  backend=backend, optimized=False)


@pytest.mark.parametrize("symmetric", [False, True])
def test_gather_block_quantized_from_the_quantizer_builds_and_matches(symmetric, tmp_path,
                                                                      signer):
    """The quantizer asked to quantize Gathers too: the embedding table a uint4 (int4 when
    symmetric) GatherBlockQuantized, dequantized at import into an Embedding."""
    path = weight_only_quantized(tmp_path, "QOperator", 4, symmetric, gather=True)
    assert "GatherBlockQuantized" in {n.op_type for n in onnx.load(str(path)).graph.node}
    loaded = import_and_load(path, tmp_path / "m.pha", signer)[1]
    assert [n.op for n in loaded.graph.nodes] == ["embedding", "linear"]
    rng = np.random.default_rng(29)
    check_on_both_backends(path, loaded, [{"ids": rng.integers(0, 50, (2, 5))}
                                          for _ in range(2)])


def test_an_id_outside_a_quantized_table_is_refused_at_entry(tmp_path, signer):
    """Where onnxruntime's GatherBlockQuantized gives zeros (out of range) or wraps (negative),
    the Embedding refuses the call, as for any Embedding."""
    from plugin_host.executor import Executor
    from plugins.numpy_backend import NumpyBackend

    from abi.errors import IndexRangeError

    path = weight_only_quantized(tmp_path, "QOperator", 4, False, gather=True)
    loaded = import_and_load(path, tmp_path / "m.pha", signer)[1]
    for bad in (50, -1):
        ids = np.zeros((2, 5), np.int64)
        ids[1, 3] = bad
        with pytest.raises(IndexRangeError):
            Executor(loaded.graph, NumpyBackend()).run({"ids": ids})


# --- hand-made nodes ---------------------------------------------------------------------------


def _packed(values: np.ndarray, bits: int) -> np.ndarray:
    """Values of ``bits`` packed into bytes along the last axis, lowest bits first."""
    per = 8 // bits
    grouped = values.reshape(*values.shape[:-1], -1, per).astype(np.uint8)
    return np.bitwise_or.reduce(grouped << (np.arange(per, dtype=np.uint8) * bits), axis=-1)


def _nbits(path, rng, *, k=40, n=6, bits=4, block=16, zero_points=True, bias=True,
           g_idx=False, **attrs):
    """A MatMulNBits of x (3, k) by random weights, its B, scales, zero points (packed, one
    per block), g_idx (each row's block drawn at random) and bias constants."""
    blocks = -(-k // block)
    q = rng.integers(0, 2 ** bits, (n, blocks, block))
    inits = {"B": _packed(q, bits), "scales": (10.0 ** rng.uniform(-2, -1, (n, blocks))
                                               ).astype(np.float32)}
    names = ["x", "B", "scales", "zp" if zero_points else "", "g_idx" if g_idx else "",
             "bias" if bias else ""]
    if g_idx:
        inits["g_idx"] = rng.integers(0, blocks, k).astype(np.int32)
    if zero_points:
        zp = rng.integers(0, 2 ** bits, (n, -(-blocks * bits // 8) * 8 // bits))
        inits["zp"] = _packed(zp, bits)
    if bias:
        inits["bias"] = rng.standard_normal(n).astype(np.float32)
    while not names[-1]:
        names.pop()
    node = helper.make_node("MatMulNBits", names, ["y"], name="n", domain=_MS, K=k, N=n,
                            bits=bits, block_size=block, **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TP.FLOAT, [3, k])],
        [helper.make_tensor_value_info("y", TP.FLOAT, [3, n])],
        [numpy_helper.from_array(v, name) for name, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid(_MS, 1)])
    path.write_bytes(model.SerializeToString())
    return path


@pytest.mark.parametrize("case", [
    {}, {"bits": 2}, {"bits": 8, "block": 32}, {"zero_points": False, "bias": False},
    {"k": 64, "block": 16, "accuracy_level": 1}, {"bits": 2, "zero_points": False, "k": 17},
    {"accuracy_level": 4}, {"accuracy_level": 4, "bits": 8, "block": 32, "k": 64},
    {"accuracy_level": 4, "bits": 8, "zero_points": False, "k": 17, "bias": False},
    {"g_idx": True, "zero_points": False},
    {"g_idx": True, "zero_points": False, "block": 32, "k": 70, "bias": False},
    {"g_idx": True, "zero_points": False, "accuracy_level": 4, "k": 64}],
    ids=["4bit", "2bit", "8bit", "default_zero_point", "accuracy1", "2bit_short_block",
         "int8_compute", "int8_compute_8bit", "int8_compute_8bit_short_block", "g_idx",
         "g_idx_short_block", "g_idx_accuracy4"])
def test_matmul_nbits_matches_onnxruntime(case, tmp_path, signer):
    """K not a multiple of the block: the last block's extra rows are cut (at accuracy_level
    4, A's last block padded with zeros). The first row's first block is all zeros: a block
    of scale 0, whose codes are 0."""
    rng = np.random.default_rng(13)
    path = _nbits(tmp_path / "m.onnx", rng, **case)
    loaded = import_and_load(path, tmp_path / "m.pha", signer)[1]
    k = case.get("k", 40)
    feeds = [{"x": rng.standard_normal((3, k)).astype(np.float32)} for _ in range(2)]
    feeds[1]["x"][0, :case.get("block", 16)] = 0
    check_on_both_backends(path, loaded, feeds)


def _dequantized_4_bit(path, values, scale, zero_point=None, *, dtype=TP.INT4, block=4, axis=0,
                       reader="MatMul"):
    """A blocked DequantizeLinear of the 4-bit constant ``values`` read by a MatMul of x."""
    k, n = values.shape
    inits = [helper.make_tensor("w", dtype, [k, n], values.ravel().tolist()),
             numpy_helper.from_array(scale, "s")]
    names = ["w", "s"]
    if zero_point is not None:
        inits.append(helper.make_tensor("z", dtype, list(zero_point.shape),
                                        zero_point.ravel().tolist()))
        names.append("z")
    nodes = [helper.make_node("DequantizeLinear", names, ["wf"], name="dq", axis=axis,
                              block_size=block)]
    nodes.append(helper.make_node("MatMul", ["x", "wf"], ["y"], name="mm") if reader ==
                 "MatMul" else helper.make_node("Cast", ["w"], ["y"], name="cast", to=1))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, [2, k])],
        [helper.make_tensor_value_info("y", TP.FLOAT, [2, n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    path.write_bytes(model.SerializeToString())
    return path


@pytest.mark.parametrize("dtype", [TP.INT4, TP.UINT4])
def test_a_4_bit_blocked_dequantize_linear_matches_onnxruntime(dtype, tmp_path, signer):
    """An odd count of 4-bit values (a last byte half used), the last block shorter (k=7 in
    blocks of 4), the extremes of the type."""
    rng = np.random.default_rng(17)
    low, high = (-8, 8) if dtype == TP.INT4 else (0, 16)
    values = rng.integers(low, high, (7, 3))
    values[0, 0], values[0, 1] = low, high - 1
    scale = (10.0 ** rng.uniform(-2, 0, (2, 3))).astype(np.float32)
    zero_point = rng.integers(low, high, (2, 3))
    path = _dequantized_4_bit(tmp_path / "m.onnx", values, scale, zero_point, dtype=dtype)
    loaded = import_and_load(path, tmp_path / "m.pha", signer)[1]
    check_on_both_backends(path, loaded, [{"x": rng.standard_normal((2, 7)).astype(np.float32)}
                                          for _ in range(2)])


def _gather_quantized(path, rng, *, bits=4, zero_points=True, block=16, **attrs):
    """A GatherBlockQuantized of a uint8 table of 10 rows by 48 values of ``bits`` each,
    packed along the last axis, at ids (2, 3)."""
    per = 8 // bits
    values = rng.integers(0, 2 ** bits, (10, 48))
    blocks = 48 // block
    inits = {"table": _packed(values, bits) if bits < 8 else values.astype(np.uint8),
             "scales": (10.0 ** rng.uniform(-2, 0, (10, blocks))).astype(np.float32)}
    names = ["table", "ids", "scales"]
    if zero_points:
        zp = rng.integers(0, 2 ** bits, (10, -(-blocks // per) * per))
        inits["zp"] = _packed(zp, bits) if bits < 8 else zp.astype(np.uint8)
        names.append("zp")
    node = helper.make_node("GatherBlockQuantized", names, ["y"], name="n", domain=_MS,
                            bits=bits, block_size=block, gather_axis=0, quantize_axis=1,
                            **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("ids", TP.INT64, [2, 3])],
        [helper.make_tensor_value_info("y", TP.FLOAT, [2, 3, 48])],
        [numpy_helper.from_array(v, name) for name, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid(_MS, 1)])
    path.write_bytes(model.SerializeToString())
    return path


@pytest.mark.parametrize("case", [{}, {"bits": 2}, {"bits": 8}, {"zero_points": False},
                                  {"bits": 8, "zero_points": False}],
                         ids=["4bit", "2bit", "8bit", "4bit_default_zero", "8bit_default_zero"])
def test_gather_block_quantized_of_uint8_matches_onnxruntime(case, tmp_path, signer):
    """uint8 data of 2, 4 or 8 bits; without zero points 2 ** (bits - 1)."""
    rng = np.random.default_rng(31)
    path = _gather_quantized(tmp_path / "m.onnx", rng, **case)
    loaded = import_and_load(path, tmp_path / "m.pha", signer)[1]
    check_on_both_backends(path, loaded, [{"ids": rng.integers(0, 10, (2, 3))}
                                          for _ in range(2)])


# --- refused -----------------------------------------------------------------------------------


@pytest.mark.parametrize("case, error, message", [
    ({"accuracy_level": 5}, UnsupportedModelError,
     "attribute accuracy_level=5 is not supported (0 to 4 are)"),
    ({"accuracy_level": 4, "bits": 2}, UnsupportedModelError,
     "2-bit weights at accuracy_level=4: whether onnxruntime then quantizes A to int8 depends "
     "on the int8 kernels its build has for the block size"),
    ({"bits": 3}, UnsupportedModelError, "attribute bits=3 is not supported"),
    ({"block": 0}, ModelFileError, "attribute block_size=0 must be a positive count"),
    ({"weight_prepacked": 1}, UnsupportedModelError, "attribute weight_prepacked=1"),
    ({"g_idx": True}, UnsupportedModelError, "g_idx with zero_points: onnxruntime's kernel "
                                             "ignores the zero points there"),
    ({"g_idx": True, "zero_points": False, "bits": 8}, UnsupportedModelError,
     "g_idx with 8-bit weights: onnxruntime's kernel takes g_idx with 4-bit weights only"),
    ({"g_idx": True, "zero_points": False, "bits": 2}, UnsupportedModelError,
     "g_idx with 2-bit weights: onnxruntime's kernel takes g_idx with 4-bit weights only"),
], ids=["accuracy_level", "2bit_int8_compute", "bits", "block", "prepacked", "g_idx_zero_points",
        "g_idx_8bit", "g_idx_2bit"])
def test_what_matmul_nbits_cannot_take_is_refused(case, error, message, tmp_path):
    rng = np.random.default_rng(19)
    bits, block = case.get("bits", 4), case.get("block", 16)
    attrs = {k: v for k, v in case.items() if k not in ("bits", "block")}
    if bits == 3 or block == 0:  # the helper cannot pack these: a 4-bit node, relabelled
        path = _nbits(tmp_path / "m.onnx", rng, **attrs)
        model = onnx.load(str(path))
        for a in model.graph.node[0].attribute:
            if a.name == ("bits" if bits == 3 else "block_size"):
                a.i = bits if bits == 3 else block
        onnx.save(model, str(path))
    else:
        path = _nbits(tmp_path / "m.onnx", rng, bits=bits, block=block, **attrs)
    assert_refused(path, error, "node 'n' (MatMulNBits)", message)


@pytest.mark.parametrize("value, length, message", [
    (3, 40, "g_idx[7] = 3 names no block: K=40 in blocks of the block size make 3"),
    (-1, 40, "g_idx[7] = -1 names no block"),
    (0, 39, "g_idx of int32 [39]: K, N, bits and block_size need int32 [40]"),
], ids=["past", "negative", "short"])
def test_a_g_idx_naming_no_block_is_refused(value, length, message, tmp_path):
    rng = np.random.default_rng(23)
    path = _nbits(tmp_path / "m.onnx", rng, g_idx=True, zero_points=False)
    model = onnx.load(str(path))
    [init] = [t for t in model.graph.initializer if t.name == "g_idx"]
    groups = numpy_helper.to_array(init)[:length].copy()
    groups[7] = value
    init.CopyFrom(numpy_helper.from_array(groups, "g_idx"))
    onnx.save(model, str(path))
    assert_refused(path, ModelFileError, "node 'n' (MatMulNBits)", message)


def test_matmul_nbits_b_of_the_wrong_size_is_refused(tmp_path):
    path = _nbits(tmp_path / "m.onnx", np.random.default_rng(23))
    model = onnx.load(str(path))
    for a in model.graph.node[0].attribute:
        if a.name == "K":
            a.i = 64
    onnx.save(model, str(path))
    assert_refused(path, ModelFileError, "node 'n' (MatMulNBits)",
                   "B of uint8 [6, 3, 8]: K, N, bits and block_size need uint8 [6, 4, 8]")


def test_a_4_bit_constant_read_by_another_op_is_refused(tmp_path):
    values = np.zeros((7, 3), np.int64)
    path = _dequantized_4_bit(tmp_path / "m.onnx", values, np.ones((2, 3), np.float32),
                              reader="Cast")
    assert_refused(path, UnsupportedModelError, "tensor 'w' of element type INT4 (22)",
                   "is read by Cast 'cast': only a DequantizeLinear's or "
                   "GatherBlockQuantized's values and zero point may be 4-bit")


def test_a_blocked_scale_of_the_wrong_shape_is_refused(tmp_path):
    values = np.zeros((7, 3), np.int64)
    path = _dequantized_4_bit(tmp_path / "m.onnx", values, np.ones((3, 3), np.float32))
    assert_refused(path, ModelFileError, "node 'dq' (DequantizeLinear)",
                   "scale of shape [3, 3]: blocks of 4 along axis 0 of the values' shape [7, 3] "
                   "need [2, 3]")


@pytest.mark.parametrize("field, message", [
    ("raw", "tensor 'w': 12 raw bytes for dims [7, 3] of INT4 (22) (expected 11)"),
    ("int32", "tensor 'w': 3 int32_data entries for dims [7, 3] of INT4 (22) (expected 11, two "
              "values each)")])
def test_a_4_bit_constant_of_the_wrong_byte_count_is_refused(field, message, tmp_path):
    """21 values of 4 bits take 11 bytes, the last half used."""
    path = _dequantized_4_bit(tmp_path / "m.onnx", np.zeros((7, 3), np.int64),
                              np.ones((2, 3), np.float32))
    model = onnx.load(str(path))
    w = next(t for t in model.graph.initializer if t.name == "w")
    del w.int32_data[:]
    if field == "raw":
        w.raw_data = bytes(12)
    else:
        w.int32_data.extend([0, 0, 0])
    onnx.save(model, str(path))
    assert_refused(path, ModelFileError, "tensor 'w'", message)
