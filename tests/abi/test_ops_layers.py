"""Shape rules of the layer ops: each agrees with torch on good inputs and refuses bad ones."""

import warnings

import pytest
import torch
import torch.nn.functional as F

from abi.errors import ContractError, DTypeError, OpError, ShapeError
from abi.ops import layers
from abi.ops.table import TensorType, get_op, infer_shapes

T = TensorType
f32, f16, i64, i32 = "float32", "float16", "int64", "int32"


def infer(op, inputs, attrs=None):
    return infer_shapes(get_op(op), inputs, attrs or {})


def tt(t):
    return None if t is None else T(tuple(t.shape), str(t.dtype).removeprefix("torch."))


def r(*shape, dtype=torch.float32):
    return torch.randn(shape, dtype=dtype) if dtype.is_floating_point else \
        torch.randint(0, 4, shape, dtype=dtype)


# --- good inputs: inferred types equal what torch produces ------------------------------------

def _conv_case():
    x, w, b = r(1, 12, 128, 256), r(32, 12, 3, 3), r(32)
    return ("conv", [x, w, b], {"stride": [2, 2], "padding": [[1, 1], [1, 1]],
                                "dilation": [1, 1]}, F.conv2d(x, w, b, 2, 1))


def _grouped_conv1d_case():
    x, w = r(2, 6, 9), r(4, 3, 2)
    return ("conv", [x, w, None], {"stride": [1], "padding": [[0, 1]], "dilation": [2],
                                   "groups": 2},
            F.conv1d(F.pad(x, (0, 1)), w, None, 1, 0, 2, 2))


def _qlinear_conv_case():
    """torch's quantized conv2d (quint8 by qint8, per tensor, grouped, strided, padded) gives
    the output's shape and dtype."""
    x, w, scale = r(1, 4, 7, 6), r(6, 2, 3, 3), torch.tensor(0.05)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's quantized tensors, deprecated
        qx = torch.quantize_per_tensor(x, 0.05, 128, torch.quint8)
        qw = torch.quantize_per_tensor(w, 0.02, 0, torch.qint8)
        y = torch.ao.nn.quantized.functional.conv2d(qx, qw, r(6), stride=(2, 1),
                                                    padding=(1, 0), groups=2, scale=0.1,
                                                    zero_point=3).int_repr()
        x, w = qx.int_repr(), qw.int_repr()
    inputs = [x, scale, torch.tensor(128, dtype=torch.uint8), w, torch.tensor([0.02] * 6),
              torch.zeros(6, dtype=torch.int8), scale, torch.tensor(3, dtype=torch.uint8),
              r(6, dtype=torch.int32)]
    return ("qlinear_conv", inputs, {"stride": [2, 1], "padding": [[1, 1], [0, 0]],
                                     "dilation": [1, 1], "groups": 2}, y)


def _conv_transpose_case():
    x, w, b = r(1, 4, 5, 6), r(4, 3, 3, 2), r(6)
    attrs = {"stride": [2, 3], "padding": [1, 0], "output_padding": [1, 2],
             "dilation": [1, 1], "groups": 2}
    return ("conv_transpose", [x, w, b], attrs,
            F.conv_transpose2d(x, w, b, (2, 3), (1, 0), (1, 2), 2, (1, 1)))


def _batchnorm_case(shape):
    x = r(*shape)
    c = shape[1]
    w, b, mean, var = r(c), r(c), r(c), r(c).abs()
    tracked = torch.tensor(3)
    return ("batchnorm", [x, w, b, mean, var, tracked], {"eps": 1e-3},
            F.batch_norm(x, mean, var, w, b, False, 0.1, 1e-3))


def _lstm_case():
    x, h, c = r(2, 5), r(2, 3), r(2, 3)
    w_ih, w_hh, b_ih, b_hh = r(12, 5), r(12, 3), r(12), r(12)
    return ("lstm_cell", [x, h, c, w_ih, w_hh, b_ih, b_hh], {},
            torch.lstm_cell(x, (h, c), w_ih, w_hh, b_ih, b_hh))


def _lstm_sequence_case():
    x, h, c = r(4, 2, 5), r(2, 3), r(2, 3)
    w_ih, w_hh, b_ih, b_hh = r(12, 5), r(12, 3), r(12), r(12)
    y, h_n, c_n = torch.lstm(x, (h[None], c[None]), [w_ih, w_hh, b_ih, b_hh], True, 1, 0.0,
                             False, False, False)
    return ("lstm", [x, h, c, w_ih, w_hh, b_ih, b_hh], {"reverse": True}, (y, h_n[0], c_n[0]))


def _quantized_lstm_case():
    """The recurrence's outputs are those of an LSTM of its sizes: torch's (float) LSTM over
    the same steps, batch and hidden size gives the shapes."""
    x, h, c = r(4, 2, 12), r(2, 3), r(2, 3)
    weight = torch.randint(0, 256, (12, 3), dtype=torch.uint8)
    zero_point, lengths = torch.tensor(7, dtype=torch.uint8), torch.tensor([4, 1])
    y, h_n, c_n = torch.lstm(r(4, 2, 5), (h[None], c[None]), [r(12, 5), r(12, 3)], False, 1,
                             0.0, False, False, False)
    return ("quantized_lstm", [x, h, c, weight, r(12), zero_point, r(12), lengths, r(9)],
            {"reverse": True, "quantize_y": True}, (y, h_n[0], c_n[0]))


def _gru_case():
    x, h = r(4, 2, 5), r(2, 3)
    w = [r(9, 5), r(9, 3), r(9), r(9)]
    y, h_n = torch.gru(x, h[None], w, True, 1, 0.0, False, False, False)
    return ("gru", [x, h, *w], {}, (y, h_n[0]))


def _rnn_case():
    x, h = r(4, 2, 5), r(2, 3)
    w = [r(3, 5), r(3, 3), None, None]
    y, h_n = torch.rnn_relu(x, h[None], w[:2], False, 1, 0.0, False, False, False)
    return ("rnn", [x, h, *w], {"nonlinearity": "relu", "reverse": True}, (y, h_n[0]))


def _layer_norm2d_case():
    x, w, b = r(2, 3, 4, 5), r(3), r(3)
    ref = F.layer_norm(x.permute(0, 2, 3, 1), (3,), w, b).permute(0, 3, 1, 2)
    return ("layer_norm2d", [x, w, b], {"normalized_shape": [3]}, ref)


def _embedding_case(dtype):
    idx, w = torch.randint(0, 8, (2, 3), dtype=dtype), r(8, 4)
    return ("embedding", [idx, w], {}, F.embedding(idx, w))


GOOD = [
    _conv_case(),
    _qlinear_conv_case(),
    _grouped_conv1d_case(),
    _conv_transpose_case(),
    _batchnorm_case((2, 3)),
    _batchnorm_case((2, 3, 4, 4)),
    _batchnorm_case((1, 3, 2, 2, 2)),
    ("linear", [r(2, 5, 7), r(4, 7), r(4)], {}, None),
    ("linear", [r(7), r(4, 7), None], {}, None),
    _lstm_case(),
    _lstm_sequence_case(),
    _quantized_lstm_case(),
    _gru_case(),
    _rnn_case(),
    ("group_norm", [r(2, 6, 3), r(6), r(6)], {"num_groups": 3}, None),
    ("instance_norm", [r(2, 3, 4, 4), r(3), r(3)], {}, None),
    ("layer_norm", [r(2, 3, 5), r(3, 5), r(3, 5)], {"normalized_shape": [3, 5]}, None),
    ("layer_norm", [r(1, 544), None, None], {"normalized_shape": [544]}, None),
    _layer_norm2d_case(),
    ("rms_norm", [r(2, 5), r(5)], {}, None),
    ("rms_norm", [r(2, 5, dtype=torch.float16), None], {"eps": 1e-3}, None),
    _embedding_case(torch.int64),
    _embedding_case(torch.int32),
]

TORCH_REFERENCE = {
    "linear": lambda x, w, b: F.linear(x, w, b),
    "group_norm": lambda x, w, b: F.group_norm(x, 3, w, b),
    "instance_norm": lambda x, w, b: F.instance_norm(x, weight=w, bias=b),
    "layer_norm": lambda x, w, b: F.layer_norm(x, x.shape[1:] if x.ndim == 3 else (544,), w, b),
    "rms_norm": lambda x, w: F.rms_norm(x, (5,), w),
}


@pytest.mark.parametrize("case", GOOD, ids=[c[0] for c in GOOD])
def test_good_inputs_match_torch(case):
    op, tensors, attrs, expected = case
    if expected is None:
        expected = TORCH_REFERENCE[op](*tensors)
    expected = [tt(e) for e in (expected if isinstance(expected, tuple) else (expected,))]
    assert infer(op, [tt(t) for t in tensors], attrs) == expected


def test_every_layer_op_has_a_good_case_and_a_refusal():
    names = {op.name for op in layers.OPS}
    assert {c[0] for c in GOOD} == names
    assert {c[0] for c in REFUSALS} == names


# --- symbolic dims pass through; undecidable checks are skipped --------------------------------

CONV_ATTRS = {"stride": [2, 2], "padding": [[1, 1], [1, 1]], "dilation": [1, 1]}


def test_symbolic_conv():
    out = infer("conv", [T(("N", 12, "H", 256), f32), T((32, 12, 3, 3), f32)], CONV_ATTRS)
    assert out == [T(("N", 32, "(H-1)//2+1", 128), f32)]
    # a symbolic channel count cannot be compared statically: left to the run-time check
    out = infer("conv", [T(("N", "C", 8, 8), f32), T((32, 12, 3, 3), f32)], CONV_ATTRS)
    assert out == [T(("N", 32, 4, 4), f32)]


def test_symbolic_conv_transpose_and_chain():
    attrs = {"stride": [2], "padding": [1], "output_padding": [0], "dilation": [1]}
    (y,) = infer("conv_transpose", [T(("N", 4, "L"), f32), T((4, 2, 4), f32)], attrs)
    assert y == T(("N", 2, "L*2"), f32)
    (z,) = infer("conv", [y, T((3, 2, 3), f32)],
                 {"stride": [1], "padding": [[1, 1]], "dilation": [1]})
    assert z == T(("N", 3, "L*2"), f32)


def test_symbolic_batch_in_recurrent_and_dense_layers():
    out = infer("lstm_cell", [T(("B", 5), f32), T(("B", 3), f32), T(("B", 3), f32),
                              T((12, 5), f32), T((12, 3), f32)])
    assert out == [T(("B", 3), f32)] * 2
    out = infer("lstm", [T(("T", "B", 5), f32), T(("B", 3), f32), T(("B", 3), f32),
                         T((12, 5), f32), T((12, 3), f32)])
    assert out == [T(("T", "B", 3), f32)] + [T(("B", 3), f32)] * 2
    out = infer("lstm", [T(("T", "B", 5), f32), T(("B", "H"), f32), T(("B", "H"), f32),
                         T(("4*H", 5), f32), T(("4*H", "H"), f32), None, None, None,
                         T(("3*H",), f32)])  # peepholes of a symbolic hidden size
    assert out == [T(("T", "B", "H"), f32)] + [T(("B", "H"), f32)] * 2
    out = infer("quantized_lstm", [T(("T", "B", "4*H"), f32), T(("B", "H"), f32),
                                   T(("B", "H"), f32), T(("4*H", "H"), "int8"),
                                   T(("4*H",), f32), T((), "int8"), None, T(("B",), i32)])
    assert out == [T(("T", "B", "H"), f32)] + [T(("B", "H"), f32)] * 2
    out = infer("gru", [T(("T", "B", 5), f32), T(("B", 3), f32), T((9, 5), f32),
                        T((9, 3), f32), None, None, T(("B",), i32)])
    assert out == [T(("T", "B", 3), f32), T(("B", 3), f32)]
    assert infer("linear", [T(("B", "T", 7), f32), T((4, 7), f32)]) == [T(("B", "T", 4), f32)]
    assert infer("embedding", [T(("B",), i64), T((8, 32), f32)]) == [T(("B", 32), f32)]
    assert infer("layer_norm", [T(("B", "T", 5), f32), None, None],
                 {"normalized_shape": [5]}) == [T(("B", "T", 5), f32)]


# --- refusals ---------------------------------------------------------------------------------

X4 = T((1, 12, 8, 8), f32)
CONV1 = {"stride": [1, 1], "padding": [[0, 0], [0, 0]], "dilation": [1, 1]}
CT1 = {"stride": [1, 1], "padding": [0, 0], "output_padding": [0, 0], "dilation": [1, 1]}
BN = [T((2, 3, 4), f32), T((3,), f32), T((3,), f32), T((3,), f32), T((3,), f32)]
LSTM = [T((2, 5), f32), T((2, 3), f32), T((2, 3), f32), T((12, 5), f32), T((12, 3), f32)]
#: quantized_lstm's required inputs but x (T, B, 4*hidden), which the cases put first
QLSTM = [T((2, 12), f32), T((2, 3), f32), T((2, 3), f32), T((12, 3), "uint8"), T((), f32)]


def _replace(seq, i, value):
    seq = list(seq)
    seq[i] = value
    return seq


#: qlinear_conv's inputs: x (1, 4, 7, 6) uint8, weight (6, 2, 3, 3) int8 per channel, groups 2
QCONV = [T((1, 4, 7, 6), "uint8"), T((), f32), T((), "uint8"), T((6, 2, 3, 3), "int8"),
         T((6,), f32), T((6,), "int8"), T((), f32), T((), "uint8"), T((6,), i32)]
QCONV_ATTRS = {"stride": [1, 1], "padding": [[0, 0], [0, 0]], "dilation": [1, 1], "groups": 2}

REFUSALS = [
    ("qlinear_conv", _replace(QCONV, 0, T((1, 4, 7, 6), f32)), QCONV_ATTRS, DTypeError,
     "qlinear_conv: x must be uint8 or int8, got float32"),
    ("qlinear_conv", _replace(QCONV, 7, T((), i32)), QCONV_ATTRS, DTypeError,
     "qlinear_conv: y_zero_point must be uint8 or int8, got int32"),
    ("qlinear_conv", _replace(QCONV, 2, T((), "int8")), QCONV_ATTRS, DTypeError,
     "qlinear_conv: x_zero_point must have the dtype of x (uint8)"),
    ("qlinear_conv", _replace(QCONV, 4, T((6,), f16)), QCONV_ATTRS, DTypeError,
     "qlinear_conv: weight_scale must be float32, got float16"),
    ("qlinear_conv", _replace(QCONV, 8, T((6,), f32)), QCONV_ATTRS, DTypeError,
     "qlinear_conv: bias must be int32, got float32"),
    ("qlinear_conv", _replace(QCONV, 6, T((1,), f32)), QCONV_ATTRS, ShapeError,
     "qlinear_conv: y_scale must have shape (), got (1,)"),
    ("qlinear_conv", _replace(QCONV, 5, T((3,), "int8")), QCONV_ATTRS, ShapeError,
     "qlinear_conv: weight_zero_point must have shape (6,), got (3,) (one value, or one per "
     "output channel of weight shape (6, 2, 3, 3))"),
    ("qlinear_conv", QCONV, {**QCONV_ATTRS, "groups": 1}, ShapeError,
     "qlinear_conv: x channels (dim 1 of x shape (1, 4, 7, 6)) must be 2, got 4"),
    ("qlinear_conv", _replace(QCONV, 0, T((4, 7, 6), "uint8")), QCONV_ATTRS, ShapeError,
     "qlinear_conv: weight must have rank 3, got rank 4 (shape (6, 2, 3, 3))"),
    ("conv", [X4, T((32, 6, 3, 3), f32)], CONV1, ShapeError,
     "conv: x channels (dim 1 of x shape (1, 12, 8, 8)) must be 6, got 12 (weight shape "
     "(32, 6, 3, 3) is (out, in/groups, *kernel) with groups=1)"),
    ("conv", [X4, T((5, 6, 3, 3), f32)], {**CONV1, "groups": 2}, ShapeError,
     "weight shape (5, 6, 3, 3) has 5 output channels, not divisible by groups=2"),
    ("conv", [X4, T((32, 12, 3), f32)], CONV1, ShapeError,
     "conv: weight must have rank 4, got rank 3"),
    ("conv", [T((12, 8), f32), T((32, 12, 3), f32)], CONV1, ShapeError,
     "conv: x must have rank 3, 4 or 5, got rank 2"),
    ("conv", [X4, T((32, 12, 3, 3), f32)], {**CONV1, "stride": [1]}, ContractError,
     "conv: attribute 'stride' has 1 entries but x shape (1, 12, 8, 8) has 2 spatial axes and "
     "needs 2"),
    ("conv", [X4, T((32, 12, 3, 3), f32)], {**CONV1, "padding": [[0, 0]]}, ContractError,
     "attribute 'padding' has 1 entries"),
    ("conv", [T((1, 1, 2, 9), f32), T((1, 1, 3, 3), f32)], CONV1, ShapeError,
     "conv: spatial axis 0 of x shape (1, 1, 2, 9) is 2 (+ padding 0+0), smaller than the "
     "dilated kernel 1*(3-1)+1=3; output size would be 0"),
    ("conv", [T((1, 1, 5, 9), f32), T((1, 1, 3, 3), f32)], {**CONV1, "dilation": [3, 1]},
     ShapeError, "smaller than the dilated kernel 3*(3-1)+1=7"),
    ("conv", [T((1, 12, 8, 8), "int32"), T((32, 12, 3, 3), "int32")], CONV1, DTypeError,
     "conv: x must be a float tensor (float16, float32, float64), got int32"),
    ("conv", [X4, T((32, 12, 3, 3), f16)], CONV1, DTypeError,
     "conv: weight must have the dtype of x (float32), got float16"),
    ("conv", [X4, T((32, 12, 3, 3), f32), T((16,), f32)], CONV1, ShapeError,
     "conv: bias must have shape (32,), got (16,)"),
    ("conv", [X4, T((32, 12, 0, 3), f32)], CONV1, ShapeError, "weight has an empty dim"),
    ("conv_transpose", [T((1, 4, 5, 5), f32), T((8, 4, 3, 3), f32)], CT1, ShapeError,
     "conv_transpose: x has 4 channels (x shape (1, 4, 5, 5)) but weight shape (8, 4, 3, 3) "
     "takes 8 (a conv_transpose weight is (in, out/groups, *kernel)); it looks like a conv "
     "weight (out, in/groups, *kernel)"),
    ("conv_transpose", [T((1, 4, 5, 5), f32), T((4, 3, 3, 3), f32)],
     {**CT1, "stride": [2, 2], "output_padding": [2, 0]}, ContractError,
     "conv_transpose: output_padding[0]=2 must be smaller than either stride[0]=2 or "
     "dilation[0]=1"),
    ("conv_transpose", [T((1, 4, 1, 5), f32), T((4, 3, 1, 3), f32)], {**CT1, "padding": [1, 0]},
     ShapeError, "conv_transpose: spatial axis 0 of x shape (1, 4, 1, 5) gives output size "
                 "(1-1)*1 - 2*1 + 1*(1-1) + 0 + 1 = -1; it must be >= 1"),
    ("conv_transpose", [T((1, 3, 5, 5), f32), T((3, 3, 3, 3), f32)], {**CT1, "groups": 2},
     ShapeError, "weight shape (3, 3, 3, 3) has 3 input channels, not divisible by groups=2"),
    ("conv_transpose", [T((1, 4, 5, 5), f32), T((4, 3, 3, 3), f32), T((4,), f32)],
     {**CT1, "groups": 2}, ShapeError, "conv_transpose: bias must have shape (6,), got (4,)"),
    ("conv_transpose", [T((1, 4, 5, 5), f32), T((4, 3, 3), f32)], CT1, ShapeError,
     "weight must have rank 4"),
    ("batchnorm", BN[:4], {}, ContractError,
     "batchnorm: track_running_stats=True requires running_mean and running_var; missing "
     "running_var"),
    ("batchnorm", [BN[0]], {}, ContractError, "missing running_mean, running_var"),
    ("batchnorm", _replace(BN, 3, T((4,), f32)), {}, ShapeError,
     "batchnorm: running_mean must have shape (3,), got (4,) (one value per channel of x shape "
     "(2, 3, 4))"),
    ("batchnorm", _replace(BN, 1, T((3,), f16)), {}, DTypeError,
     "batchnorm: weight must have the dtype of x (float32), got float16"),
    ("batchnorm", [T((3,), f32), None, None, T((3,), f32), T((3,), f32)], {}, ShapeError,
     "batchnorm: x must have rank >= 2, got rank 1"),
    ("batchnorm", [T((2, 3), i64), None, None, T((3,), f32), T((3,), f32)], {}, DTypeError,
     "batchnorm: x must be a float tensor"),
    ("batchnorm", BN + [T((), f32)], {}, DTypeError,
     "batchnorm: num_batches_tracked must be an integer tensor, got float32"),
    ("batchnorm", BN + [T((2,), i64)], {}, ShapeError,
     "num_batches_tracked must have shape () or (1,), got (2,)"),
    ("linear", [T((2, 5), f32), T((4, 7), f32)], {}, ShapeError,
     "linear: the last dim of x shape (2, 5) must be 7, got 5 (weight shape (4, 7) is "
     "(out_features, in_features))"),
    ("linear", [T((2, 7), f32), T((4, 7, 1), f32)], {}, ShapeError, "weight must have rank 2"),
    ("linear", [T((2, 7), f32), T((4, 7), f32), T((7,), f32)], {}, ShapeError,
     "linear: bias must have shape (4,), got (7,)"),
    ("linear", [T((), f32), T((4, 7), f32)], {}, ShapeError, "x must have rank >= 1"),
    ("lstm_cell", _replace(LSTM, 4, T((10, 3), f32)), {}, ShapeError,
     "lstm_cell: weight_hh must be (4*hidden, hidden), got (10, 3)"),
    ("lstm_cell", _replace(LSTM, 3, T((12, 6), f32)), {}, ShapeError,
     "lstm_cell: weight_ih must have shape (12, 5), got (12, 6)"),
    ("lstm_cell", _replace(LSTM, 1, T((1, 3), f32)), {}, ShapeError,
     "lstm_cell: h must have shape (2, 3), got (1, 3) ((batch, hidden): x is (2, 5)"),
    ("lstm_cell", _replace(LSTM, 2, T((2, 4), f32)), {}, ShapeError, "c must have shape (2, 3)"),
    ("lstm_cell", LSTM + [T((3,), f32)], {}, ShapeError,
     "lstm_cell: bias_ih must have shape (12,), got (3,)"),
    ("lstm_cell", LSTM[:2], {}, ContractError, "lstm_cell: missing required input 'c'"),
    ("lstm_cell", _replace(LSTM, 0, T((2, 5), f16)), {}, DTypeError,
     "h must have the dtype of x (float16), got float32"),
    ("lstm", LSTM, {}, ShapeError, "lstm: x must have rank 3, got rank 2"),
    ("lstm", [T((7, 2, 5), f32)] + _replace(LSTM, 3, T((12, 6), f32))[1:], {}, ShapeError,
     "lstm: weight_ih must have shape (12, 5), got (12, 6)"),
    ("lstm", [T((7, 2, 5), f32)] + LSTM[1:], {"reverse": "yes"}, OpError, "reverse"),
    ("quantized_lstm", QLSTM, {}, ShapeError, "quantized_lstm: x must have rank 3, got rank 2"),
    ("quantized_lstm", _replace(QLSTM, 0, T((7, 2, 12), f32)), {"quantize_y": 1}, OpError,
     "quantize_y"),
    ("quantized_lstm", [T((7, 2, 12), f16)] + QLSTM[1:], {}, DTypeError,
     "quantized_lstm: x must be float32, got float16"),
    ("quantized_lstm", [T((7, 2, 12), f32)] + _replace(QLSTM, 3, T((12, 3), f32))[1:], {},
     DTypeError, "quantized_lstm: weight_hh must be uint8 or int8, got float32"),
    ("quantized_lstm", [T((7, 2, 12), f32)] + _replace(QLSTM, 3, T((10, 3), "uint8"))[1:], {},
     ShapeError, "quantized_lstm: weight_hh's rows must be 12, got 10 (weight_hh is (10, 3), "
     "(4*hidden, hidden))"),
    ("quantized_lstm", [T((7, 2, 8), f32)] + QLSTM[1:], {}, ShapeError,
     "quantized_lstm: the last dim of x shape (7, 2, 8) must be 12, got 8"),
    ("quantized_lstm", [T((7, 2, 12), f32)] + _replace(QLSTM, 1, T((2, 4), f32))[1:], {},
     ShapeError, "quantized_lstm: h must have shape (2, 3), got (2, 4)"),
    ("quantized_lstm", [T((7, 2, 12), f32)] + _replace(QLSTM, 4, T((3,), f32))[1:], {},
     ShapeError, "quantized_lstm: weight_scale must have shape (12,), got (3,) (one value, or "
     "one per row"),
    ("quantized_lstm", [T((7, 2, 12), f32)] + QLSTM[1:] + [T((), "int8")], {}, DTypeError,
     "quantized_lstm: weight_zero_point must have the dtype of weight_hh (uint8), got int8"),
    ("quantized_lstm", [T((7, 2, 12), f32)] + QLSTM[1:] + [None, T((8,), f32)], {},
     ShapeError, "quantized_lstm: bias must have shape (12,), got (8,)"),
    ("quantized_lstm", [T((7, 2, 12), f32)] + QLSTM[1:] + [None, None, T((3,), i64)], {},
     ShapeError, "quantized_lstm: lengths must have shape (2,), got (3,)"),
    ("quantized_lstm", [T((7, 2, 12), f32)] + QLSTM[1:] + [None, None, None, T((12,), f32)],
     {}, ShapeError, "quantized_lstm: peepholes must have shape (9,), got (12,)"),
    ("gru", [T((7, 2, 5), f32), T((2, 3), f32), T((10, 5), f32), T((10, 3), f32)], {},
     ShapeError, "gru: weight_hh must be (3*hidden, hidden), got (10, 3)"),
    ("gru", [T((7, 2, 5), f32), T((1, 3), f32), T((9, 5), f32), T((9, 3), f32)], {},
     ShapeError, "gru: h must have shape (2, 3), got (1, 3)"),
    ("rnn", [T((7, 2, 5), f32), T((2, 3), f32), T((3, 4), f32), T((3, 3), f32)], {},
     ShapeError, "rnn: weight_ih must have shape (3, 5), got (3, 4)"),
    ("rnn", [T((7, 2, 5), f32), T((2, 3), f32), T((3, 5), f32), T((3, 3), f32)],
     {"nonlinearity": "sigmoid"}, OpError, "nonlinearity"),
    ("rnn", [T((2, 5), f32), T((2, 3), f32), T((3, 5), f32), T((3, 3), f32)], {}, ShapeError,
     "rnn: x must have rank 3, got rank 2"),
    ("lstm", [T((7, 2, 5), f32)] + LSTM[1:] + [None, None, T((2,), f32)], {}, DTypeError,
     "lstm: lengths must be an integer tensor, got float32"),
    ("lstm", [T((7, 2, 5), f32)] + LSTM[1:] + [None, None, T((3,), i64)], {}, ShapeError,
     "lstm: lengths must have shape (2,), got (3,) ((batch,): x is (7, 2, 5))"),
    ("lstm", [T((7, 2, 5), f32)] + LSTM[1:] + [None, None, None, T((12,), f32)], {}, ShapeError,
     "lstm: peepholes must have shape (9,), got (12,) ((3*hidden,): h is (2, 3))"),
    ("lstm", [T((7, 2, 5), f32)] + LSTM[1:] + [None, None, None, T((9,), i64)], {}, DTypeError,
     "lstm: peepholes"),
    ("gru", [T((7, 2, 5), f32), T((2, 3), f32), T((9, 5), f32), T((9, 3), f32), None, None,
             T((2, 1), i64)], {}, ShapeError, "gru: lengths must have shape (2,), got (2, 1)"),
    ("rnn", [T((7, 2, 5), f32), T((2, 3), f32), T((3, 5), f32), T((3, 3), f32), None, None,
             T((2,), "bool")], {}, DTypeError,
     "rnn: lengths must be an integer tensor, got bool"),
    ("group_norm", [T((2, 6, 3), f32)], {"num_groups": 4}, ShapeError,
     "group_norm: x has 6 channels (x shape (2, 6, 3)), not divisible by num_groups=4"),
    ("group_norm", [T((2, 6, 3), f32), T((3,), f32)], {"num_groups": 3}, ShapeError,
     "group_norm: weight must have shape (6,), got (3,)"),
    ("group_norm", [T((2, 6, 3), f32)], {}, OpError, "missing required attribute 'num_groups'"),
    ("instance_norm", [T((2, 3), f32)], {}, ShapeError,
     "instance_norm: x must have rank >= 3, got rank 2"),
    ("instance_norm", [T((2, 3, 4), f32), None, T((4,), f32)], {}, ShapeError,
     "instance_norm: bias must have shape (3,), got (4,)"),
    ("layer_norm", [T((2, 3, 5), f32)], {"normalized_shape": [4]}, ShapeError,
     "layer_norm: the trailing dims of x shape (2, 3, 5) must equal normalized_shape (4,)"),
    ("layer_norm", [T((5,), f32)], {"normalized_shape": [3, 5]}, ShapeError,
     "the trailing dims of x shape (5,) must equal normalized_shape (3, 5)"),
    ("layer_norm", [T((2, 5), f32), T((2, 5), f32)], {"normalized_shape": [5]}, ShapeError,
     "layer_norm: weight must have shape (5,), got (2, 5)"),
    ("layer_norm", [T((2, 5), i64)], {"normalized_shape": [5]}, DTypeError, "float tensor"),
    ("layer_norm2d", [T((2, 3, 4, 4), f32)], {"normalized_shape": [3, 4]}, ContractError,
     "layer_norm2d: normalized_shape must be (C,) for NCHW input, got (3, 4)"),
    ("layer_norm2d", [T((2, 3, 4, 4), f32)], {"normalized_shape": [4]}, ShapeError,
     "layer_norm2d: x channels (dim 1 of x shape (2, 3, 4, 4)) must be 4, got 3"),
    ("layer_norm2d", [T((2, 3, 4), f32)], {"normalized_shape": [3]}, ShapeError,
     "x must have rank 4, got rank 3"),
    ("rms_norm", [T((2, 5), f32), T((2,), f32)], {}, ShapeError,
     "rms_norm: weight must have shape (5,), got (2,)"),
    ("rms_norm", [T((2, 5), "int8")], {}, DTypeError, "rms_norm: x must be a float tensor"),
    ("embedding", [T((2,), f32), T((8, 4), f32)], {}, DTypeError,
     "embedding: idx must be an integer tensor, got float32"),
    ("embedding", [T((2,), "bool"), T((8, 4), f32)], {}, DTypeError, "got bool"),
    ("embedding", [T((2,), i64), T((8, 4), i64)], {}, DTypeError,
     "embedding: weight must be a float tensor"),
    ("embedding", [T((2,), i64), T((8,), f32)], {}, ShapeError,
     "embedding: weight must have rank 2, got rank 1"),
]


@pytest.mark.parametrize("op, inputs, attrs, error, text", REFUSALS,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(REFUSALS)])
def test_refusals(op, inputs, attrs, error, text):
    with pytest.raises(error) as info:
        infer(op, inputs, attrs)
    message = str(info.value)
    assert text in message
    assert message.startswith(f"{op}: ") or message.startswith(f"op '{op}' v1: ")
    assert "\n" not in message
