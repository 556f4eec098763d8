"""The layer ops: what the layer library's layers compute, as versioned ABI ops.

The names, input order and attribute names here are an interface shared with the layer library
and the backends; a change of meaning is a new version, never an edit. Shapes follow tinygrad's
``nn`` / torch's conventions: channels on axis 1 (NC...), weights as torch stores them.
"""

from __future__ import annotations

from abi.errors import ContractError, DTypeError, ShapeError
from abi.ops import dims
from abi.ops.rules import (fmt, need_attr_len, need_dim, need_float, need_int, need_per_channel,
                           need_rank, need_same_dtype, need_shape)
from abi.ops.table import (AttrSpec, OpDef, all_of, at_least, between, each_at_least,
                           greater_than, non_empty)
from abi.spec import TensorType

__all__ = ["OPS"]

_POSITIVE_INTS = each_at_least(1)
_EPS = AttrSpec("float", 1e-5, greater_than(0.0))
_NORMALIZED_SHAPE = AttrSpec("ints", check=all_of(non_empty, each_at_least(1)))


def _no_empty_dims(op: str, name: str, t: TensorType) -> None:
    if any(d == 0 for d in t.shape):
        raise ShapeError(f"{op}: {name} has an empty dim (shape {fmt(t.shape)})", where=op,
                         got=t.shape)


# --- convolution -------------------------------------------------------------------------------


def _conv(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x, w, b = inputs
    n = op.name
    _conv_ranks(n, x, w)
    for name, t in (("x", x), ("weight", w), ("bias", b)):
        if t is not None:
            need_float(n, name, t)
    need_same_dtype(n, [("x", x), ("weight", w), ("bias", b)])
    return [TensorType(_conv_shape(n, x, w, b, attrs), x.dtype)]


def _conv_ranks(n: str, x: TensorType, w: TensorType) -> None:
    r = need_rank(n, "x", x, one_of=(3, 4, 5))
    need_rank(n, "weight", w, exact=r)


def _conv_shape(n: str, x: TensorType, w: TensorType, b: TensorType | None,
                attrs: dict) -> tuple:
    """The output shape of a conv of x by w (bias b), ranks checked, dtypes aside."""
    spatial = len(x.shape) - 2
    need_attr_len(n, attrs, ("stride", "padding", "dilation"), spatial,
                  f"x shape {fmt(x.shape)} has {spatial} spatial axes and")
    _no_empty_dims(n, "weight", w)
    groups = attrs["groups"]
    out_ch, ch_per_group = w.shape[0], w.shape[1]
    if type(out_ch) is int and out_ch % groups:
        raise ShapeError(f"{n}: weight shape {fmt(w.shape)} has {out_ch} output channels, not "
                         f"divisible by groups={groups}", where=n, got=w.shape)
    need_dim(n, f"x channels (dim 1 of x shape {fmt(x.shape)})", x.shape[1],
             dims.mul(ch_per_group, groups),
             f"weight shape {fmt(w.shape)} is (out, in/groups, *kernel) with groups={groups}")
    if b is not None:
        need_shape(n, "bias", b, (out_ch,), f"one value per output channel of weight shape "
                   f"{fmt(w.shape)}")
    out = []
    for i in range(spatial):
        size, k = x.shape[2 + i], w.shape[2 + i]
        (pb, pa), s, d = attrs["padding"][i], attrs["stride"][i], attrs["dilation"][i]
        o = dims.window_out(size, k, s, pb, pa, d)
        if type(o) is int and o < 1:
            raise ShapeError(f"{n}: spatial axis {i} of x shape {fmt(x.shape)} is {size} (+ "
                             f"padding {pb}+{pa}), smaller than the dilated kernel "
                             f"{d}*({k}-1)+1={d * (k - 1) + 1}; output size would be {o}",
                             where=n, got=x.shape)
        out.append(o)
    return (x.shape[0], out_ch, *out)


def _qlinear_conv(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, b = inputs
    n = op.name
    _conv_ranks(n, x, w)
    for name, t in (("x", x), ("weight", w), ("y_zero_point", y_zp)):
        if t.dtype not in ("uint8", "int8"):
            raise DTypeError(f"{n}: {name} must be uint8 or int8, got {t.dtype}", where=n,
                             expected="uint8 or int8", got=t.dtype)
    need_same_dtype(n, [("x", x), ("x_zero_point", x_zp)])
    need_same_dtype(n, [("weight", w), ("weight_zero_point", w_zp)])
    for name, t in (("x_scale", x_scale), ("weight_scale", w_scale), ("y_scale", y_scale)):
        if t.dtype != "float32":
            raise DTypeError(f"{n}: {name} must be float32, got {t.dtype}", where=n,
                             expected="float32", got=t.dtype)
    if b is not None and b.dtype != "int32":
        raise DTypeError(f"{n}: bias must be int32, got {b.dtype}", where=n, expected="int32",
                         got=b.dtype)
    for name, t in (("x_scale", x_scale), ("x_zero_point", x_zp), ("y_scale", y_scale),
                    ("y_zero_point", y_zp)):
        need_shape(n, name, t, ())
    for name, t in (("weight_scale", w_scale), ("weight_zero_point", w_zp)):
        if len(t.shape) != 0:
            need_shape(n, name, t, (w.shape[0],), f"one value, or one per output channel of "
                       f"weight shape {fmt(w.shape)}")
    return [TensorType(_conv_shape(n, x, w, b, attrs), y_zp.dtype)]


def _conv_transpose(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x, w, b = inputs
    n = op.name
    r = need_rank(n, "x", x, one_of=(3, 4, 5))
    need_rank(n, "weight", w, exact=r)
    for name, t in (("x", x), ("weight", w), ("bias", b)):
        if t is not None:
            need_float(n, name, t)
    need_same_dtype(n, [("x", x), ("weight", w), ("bias", b)])
    spatial = r - 2
    need_attr_len(n, attrs, ("stride", "padding", "output_padding", "dilation"), spatial,
                  f"x shape {fmt(x.shape)} has {spatial} spatial axes and")
    _no_empty_dims(n, "weight", w)
    groups = attrs["groups"]
    in_ch, out_per_group = w.shape[0], w.shape[1]
    if dims.known_different(x.shape[1], in_ch):
        hint = ""
        if not dims.known_different(x.shape[1], dims.mul(out_per_group, groups)):
            hint = "; it looks like a conv weight (out, in/groups, *kernel)"
        raise ShapeError(f"{n}: x has {x.shape[1]} channels (x shape {fmt(x.shape)}) but weight "
                         f"shape {fmt(w.shape)} takes {in_ch} (a conv_transpose weight is "
                         f"(in, out/groups, *kernel)){hint}", where=n, expected=in_ch,
                         got=x.shape[1])
    if type(in_ch) is int and in_ch % groups:
        raise ShapeError(f"{n}: weight shape {fmt(w.shape)} has {in_ch} input channels, not "
                         f"divisible by groups={groups}", where=n, got=w.shape)
    out_ch = dims.mul(out_per_group, groups)
    if b is not None:
        need_shape(n, "bias", b, (out_ch,), f"one value per output channel: weight shape "
                   f"{fmt(w.shape)} with groups={groups}")
    out = []
    for i in range(spatial):
        s, p, op_, d = (attrs[a][i] for a in ("stride", "padding", "output_padding", "dilation"))
        if op_ >= s and op_ >= d:
            raise ContractError(f"{n}: output_padding[{i}]={op_} must be smaller than either "
                                f"stride[{i}]={s} or dilation[{i}]={d}", op=n,
                                attribute="output_padding")
        size, k = x.shape[2 + i], w.shape[2 + i]
        o = dims.transposed_out(size, k, s, p, op_, d)
        if type(o) is int and o < 1:
            raise ShapeError(f"{n}: spatial axis {i} of x shape {fmt(x.shape)} gives output "
                             f"size ({size}-1)*{s} - 2*{p} + {d}*({k}-1) + {op_} + 1 = {o}; it "
                             f"must be >= 1", where=n, got=x.shape)
        out.append(o)
    return [TensorType((x.shape[0], out_ch, *out), x.dtype)]


_CONV_DOC = """\
N-d convolution (cross-correlation), 1 to 3 spatial axes, torch semantics.

x (N, C, *spatial); weight (O, C/groups, *kernel); bias (O,). stride, dilation: one int per
spatial axis; padding: one [before, after] pair per spatial axis in natural axis order
(asymmetric padding, e.g. 'same' with an even kernel, is explicit here). Zero padding.
Output (N, O, *out) with out = floor((L + before + after - dilation*(k-1) - 1)/stride) + 1,
which must be >= 1. x, weight and bias are float and share one dtype."""

_CONV_TRANSPOSE_DOC = """\
N-d transposed convolution, 1 to 3 spatial axes, torch semantics.

x (N, Cin, *spatial); weight (Cin, O/groups, *kernel) (not a conv weight: its channel axes are
swapped, and shapes are checked); bias (O,). stride, padding, output_padding, dilation: one int
per spatial axis; padding is symmetric (torch), output_padding[i] < stride[i] or < dilation[i].
Output (N, weight.shape[1]*groups, *out) with
out = (L-1)*stride - 2*padding + dilation*(k-1) + output_padding + 1, which must be >= 1."""


# --- normalization -----------------------------------------------------------------------------


def _batchnorm(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x, weight, bias, mean, var, tracked = inputs
    n = op.name
    need_rank(n, "x", x, at_least=2)
    need_float(n, "x", x)
    if attrs["track_running_stats"] and (mean is None or var is None):
        missing = [name for name, t in (("running_mean", mean), ("running_var", var))
                   if t is None]
        raise ContractError(f"{n}: track_running_stats=True requires running_mean and "
                            f"running_var; missing {', '.join(missing)}", op=n)
    need_per_channel(n, "x", x, x.shape[1], [("weight", weight), ("bias", bias),
                                            ("running_mean", mean), ("running_var", var)])
    if tracked is not None:
        need_int(n, "num_batches_tracked", tracked)
        if tracked.shape not in ((), (1,)):
            raise ShapeError(f"{n}: num_batches_tracked must have shape () or (1,), got "
                             f"{fmt(tracked.shape)}", where=n, got=tracked.shape)
    return [TensorType(x.shape, x.dtype)]


def _group_norm(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x, weight, bias = inputs
    n = op.name
    need_rank(n, "x", x, at_least=2)
    need_float(n, "x", x)
    groups, channels = attrs["num_groups"], x.shape[1]
    if type(channels) is int and channels % groups:
        raise ShapeError(f"{n}: x has {channels} channels (x shape {fmt(x.shape)}), not "
                         f"divisible by num_groups={groups}", where=n, got=x.shape)
    need_per_channel(n, "x", x, channels, [("weight", weight), ("bias", bias)])
    return [TensorType(x.shape, x.dtype)]


def _instance_norm(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x, weight, bias = inputs
    n = op.name
    need_rank(n, "x", x, at_least=3)
    need_float(n, "x", x)
    need_per_channel(n, "x", x, x.shape[1], [("weight", weight), ("bias", bias)])
    return [TensorType(x.shape, x.dtype)]


def _layer_norm(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x, weight, bias = inputs
    n = op.name
    normalized = attrs["normalized_shape"]
    need_float(n, "x", x)
    tail = x.shape[len(x.shape) - len(normalized):] if len(normalized) <= len(x.shape) else None
    if tail is None or any(dims.known_different(a, b) for a, b in zip(tail, normalized)):
        raise ShapeError(f"{n}: the trailing dims of x shape {fmt(x.shape)} must equal "
                         f"normalized_shape {fmt(normalized)}", where=n, expected=normalized,
                         got=x.shape)
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None:
            need_shape(n, name, t, normalized, "it must equal normalized_shape")
            need_same_dtype(n, [("x", x), (name, t)])
    return [TensorType(x.shape, x.dtype)]


def _layer_norm2d(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x, weight, bias = inputs
    n = op.name
    normalized = attrs["normalized_shape"]
    need_rank(n, "x", x, exact=4)
    need_float(n, "x", x)
    if len(normalized) != 1:
        raise ContractError(f"{n}: normalized_shape must be (C,) for NCHW input, got "
                            f"{fmt(normalized)}", op=n, attribute="normalized_shape")
    need_dim(n, f"x channels (dim 1 of x shape {fmt(x.shape)})", x.shape[1], normalized[0],
             f"normalized_shape is {fmt(normalized)}")
    need_per_channel(n, "x", x, x.shape[1], [("weight", weight), ("bias", bias)])
    return [TensorType(x.shape, x.dtype)]


def _rms_norm(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x, weight = inputs
    n = op.name
    need_rank(n, "x", x, at_least=1)
    need_float(n, "x", x)
    if weight is not None:
        need_shape(n, "weight", weight, (x.shape[-1],), f"one value per entry of the last axis "
                   f"of x shape {fmt(x.shape)}")
        need_same_dtype(n, [("x", x), ("weight", weight)])
    return [TensorType(x.shape, x.dtype)]


# --- dense, recurrent, embedding ---------------------------------------------------------------


def _linear(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x, w, b = inputs
    n = op.name
    need_rank(n, "x", x, at_least=1)
    need_rank(n, "weight", w, exact=2)
    for name, t in (("x", x), ("weight", w), ("bias", b)):
        if t is not None:
            need_float(n, name, t)
    need_same_dtype(n, [("x", x), ("weight", w), ("bias", b)])
    need_dim(n, f"the last dim of x shape {fmt(x.shape)}", x.shape[-1], w.shape[1],
             f"weight shape {fmt(w.shape)} is (out_features, in_features)")
    if b is not None:
        need_shape(n, "bias", b, (w.shape[0],), f"weight shape {fmt(w.shape)}")
    return [TensorType((*x.shape[:-1], w.shape[0]), x.dtype)]


def _lstm_cell(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x, h, c, w_ih, w_hh, b_ih, b_hh = inputs
    n = op.name
    named = [("x", x), ("h", h), ("c", c), ("weight_ih", w_ih), ("weight_hh", w_hh),
             ("bias_ih", b_ih), ("bias_hh", b_hh)]
    for name, t in named:
        if t is not None:
            need_float(n, name, t)
    need_same_dtype(n, named)
    for name, t in named[:5]:
        need_rank(n, name, t, exact=2)
    gates, hidden = w_hh.shape
    if type(gates) is int and type(hidden) is int and gates != 4 * hidden:
        raise ShapeError(f"{n}: weight_hh must be (4*hidden, hidden), got {fmt(w_hh.shape)}",
                         where=n, got=w_hh.shape)
    need_shape(n, "weight_ih", w_ih, (gates, x.shape[1]),
               f"(4*hidden, input_size): weight_hh is {fmt(w_hh.shape)}, x is {fmt(x.shape)}")
    batch = x.shape[0]
    for name, t in (("h", h), ("c", c)):
        need_shape(n, name, t, (batch, hidden), f"(batch, hidden): x is {fmt(x.shape)}, "
                   f"weight_hh is {fmt(w_hh.shape)}")
    for name, t in (("bias_ih", b_ih), ("bias_hh", b_hh)):
        if t is not None:
            need_shape(n, name, t, (gates,), f"(4*hidden,): weight_hh is {fmt(w_hh.shape)}")
    out = TensorType((batch, hidden), x.dtype)
    return [out, out]


def _recurrence(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    """gru's and rnn's rule: x (T, B, input), h (B, hidden), weights (gates*hidden, input) and
    (gates*hidden, hidden), biases (gates*hidden,) -> y (T, B, hidden), h_last (B, hidden)."""
    x, h, w_ih, w_hh, b_ih, b_hh, lengths = inputs
    n, gates = op.name, {"gru": 3, "rnn": 1}[op.name]
    named = [("x", x), ("h", h), ("weight_ih", w_ih), ("weight_hh", w_hh), ("bias_ih", b_ih),
             ("bias_hh", b_hh)]
    for name, t in named:
        if t is not None:
            need_float(n, name, t)
    need_same_dtype(n, named)
    need_rank(n, "x", x, exact=3)
    for name, t in named[1:4]:
        need_rank(n, name, t, exact=2)
    rows, hidden = w_hh.shape
    if type(rows) is int and type(hidden) is int and rows != gates * hidden:
        raise ShapeError(f"{n}: weight_hh must be ({gates}*hidden, hidden), got "
                         f"{fmt(w_hh.shape)}", where=n, got=w_hh.shape)
    need_shape(n, "weight_ih", w_ih, (rows, x.shape[2]),
               f"({gates}*hidden, input_size): weight_hh is {fmt(w_hh.shape)}, x is "
               f"{fmt(x.shape)}")
    need_shape(n, "h", h, (x.shape[1], hidden),
               f"(batch, hidden): x is {fmt(x.shape)}, weight_hh is {fmt(w_hh.shape)}")
    for name, t in (("bias_ih", b_ih), ("bias_hh", b_hh)):
        if t is not None:
            need_shape(n, name, t, (rows,), f"({gates}*hidden,): weight_hh is "
                                            f"{fmt(w_hh.shape)}")
    _need_lengths(n, lengths, x)
    return [TensorType((x.shape[0], x.shape[1], hidden), x.dtype),
            TensorType((x.shape[1], hidden), x.dtype)]


def _need_lengths(op: str, lengths: TensorType | None, x: TensorType) -> None:
    """A recurrence's optional lengths: one integer per sequence of x (T, B, input)."""
    if lengths is not None:
        need_int(op, "lengths", lengths)
        need_shape(op, "lengths", lengths, (x.shape[1],), f"(batch,): x is {fmt(x.shape)}")


def _lstm(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x, *rest, lengths, peepholes = inputs
    n = op.name
    need_rank(n, "x", x, exact=3)
    step, state = _lstm_cell(op, [TensorType(x.shape[1:], x.dtype), *rest], attrs)
    _need_lengths(n, lengths, x)
    if peepholes is not None:
        need_float(n, "peepholes", peepholes)
        need_same_dtype(n, [("x", x), ("peepholes", peepholes)])
        hidden = step.shape[1]
        need_shape(n, "peepholes", peepholes, (dims.mul(3, hidden),),
                   f"(3*hidden,): h is {fmt(step.shape)}")
    return [TensorType((x.shape[0], *step.shape), x.dtype), step, state]


def _quantized_lstm(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x, h, c, w, scale, zp, bias, lengths, peepholes = inputs
    n = op.name
    for name, t in (("x", x), ("h", h), ("c", c), ("weight_scale", scale), ("bias", bias),
                    ("peepholes", peepholes)):
        if t is not None and t.dtype != "float32":
            raise DTypeError(f"{n}: {name} must be float32, got {t.dtype}", where=n,
                             expected="float32", got=t.dtype)
    if w.dtype not in ("uint8", "int8"):
        raise DTypeError(f"{n}: weight_hh must be uint8 or int8, got {w.dtype}", where=n,
                         expected="uint8 or int8", got=w.dtype)
    need_same_dtype(n, [("weight_hh", w), ("weight_zero_point", zp)])
    need_rank(n, "x", x, exact=3)
    need_rank(n, "weight_hh", w, exact=2)
    gates, hidden = w.shape
    rows = f"weight_hh is {fmt(w.shape)}, (4*hidden, hidden)"
    need_dim(n, "weight_hh's rows", gates, dims.mul(4, hidden), rows)
    need_dim(n, f"the last dim of x shape {fmt(x.shape)}", x.shape[2], gates, rows)
    for name, t in (("h", h), ("c", c)):
        need_shape(n, name, t, (x.shape[1], hidden), f"(batch, hidden): {rows}")
    if len(scale.shape) != 0:
        need_shape(n, "weight_scale", scale, (gates,), f"one value, or one per row: {rows}")
    if zp is not None:
        need_shape(n, "weight_zero_point", zp, ())
    if bias is not None:
        need_shape(n, "bias", bias, (gates,), rows)
    if peepholes is not None:
        need_shape(n, "peepholes", peepholes, (dims.mul(3, hidden),), rows)
    _need_lengths(n, lengths, x)
    return [TensorType((x.shape[0], x.shape[1], hidden), "float32"), h, c]


def _embedding(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    idx, w = inputs
    n = op.name
    need_int(n, "idx", idx)
    need_rank(n, "weight", w, exact=2)
    need_float(n, "weight", w)
    return [TensorType((*idx.shape, w.shape[1]), w.dtype)]


# --- the table ---------------------------------------------------------------------------------

_CONV_ATTRS = {
    "stride": AttrSpec("ints", check=_POSITIVE_INTS),
    "padding": AttrSpec("pads"),
    "dilation": AttrSpec("ints", check=_POSITIVE_INTS),
    "groups": AttrSpec("int", 1, at_least(1)),
}

_LENGTHS_DOC = """\
lengths (B,) integer, optional (ONNX's sequence_lens, torch's packed sequences): sequence b is
its first lengths[b] steps; past them its state stays and its y is 0, so the final state is
the one after its last step, and reverse starts at its own last step, lengths[b] - 1. A length
outside [0, T] is refused when the call runs (IndexRangeError naming the node)."""

OPS: tuple[OpDef, ...] = (
    OpDef("conv", 1, ("x", "weight", "bias?"), ("y",), _CONV_ATTRS, _conv, doc=_CONV_DOC),
    OpDef("qlinear_conv", 1, ("x", "x_scale", "x_zero_point", "weight", "weight_scale",
                              "weight_zero_point", "y_scale", "y_zero_point", "bias?"), ("y",),
          _CONV_ATTRS, _qlinear_conv, doc="""\
Quantized convolution (ONNX QLinearConv, as onnxruntime's CPU kernels compute it; what
onnxruntime's quantize_static writes in its QOperator format): the exact integer sum of
(x - x_zero_point) * (weight - weight_zero_point) over each output's window, padding adding 0
(x_zero_point pads), plus bias, wrapped to int32 as onnxruntime's int32 accumulation wraps;
then y = clamp(round(float32(sum) * scale) + y_zero_point, lo, hi) with the float32 scale
(x_scale * weight_scale) / y_scale computed in that order, rounding half to even, [lo, hi]
y's range. x (N, C, *spatial) and weight (O, C/groups, *kernel) uint8 or int8, each zero
point of its tensor's dtype; x_scale, x_zero_point, y_scale, y_zero_point of shape ();
weight_scale and weight_zero_point () or (O,) (per output channel); bias (O,) int32; scales
float32. y (N, O, *out), out as conv's, of y_zero_point's dtype. stride, padding, dilation,
groups as conv's."""),
    OpDef("conv_transpose", 1, ("x", "weight", "bias?"), ("y",), {
        "stride": AttrSpec("ints", check=_POSITIVE_INTS),
        "padding": AttrSpec("ints", check=each_at_least(0)),
        "output_padding": AttrSpec("ints", check=each_at_least(0)),
        "dilation": AttrSpec("ints", check=_POSITIVE_INTS),
        "groups": AttrSpec("int", 1, at_least(1)),
    }, _conv_transpose, doc=_CONV_TRANSPOSE_DOC),
    OpDef("batchnorm", 1,
          ("x", "weight?", "bias?", "running_mean?", "running_var?", "num_batches_tracked?"),
          ("y",), {
              "eps": _EPS,
              "momentum": AttrSpec("float", 0.1, between(0.0, 1.0)),
              "track_running_stats": AttrSpec("bool", True),
          }, _batchnorm, doc="""\
Batch normalization over every axis but the channel axis 1 (BatchNorm1d/2d/3d are one op).

x (N, C, ...) float, rank >= 2; weight, bias, running_mean, running_var each (C,) with x's
dtype; num_batches_tracked () or (1,) integer. With track_running_stats the running statistics
are required and inference normalizes with them (it never writes them). Output: x's shape."""),
    OpDef("group_norm", 1, ("x", "weight?", "bias?"), ("y",), {
        "num_groups": AttrSpec("int", check=at_least(1)),
        "eps": _EPS,
    }, _group_norm, doc="""\
Group normalization: reshape x (N, C, ...) to (N, num_groups, -1), normalize the last axis,
reshape back, per-channel affine. C must divide by num_groups; weight, bias (C,)."""),
    OpDef("instance_norm", 1, ("x", "weight?", "bias?"), ("y",), {"eps": _EPS},
          _instance_norm, doc="""\
Instance normalization: reshape x (N, C, *spatial) (rank >= 3) to (N, C, -1), normalize the
last axis, reshape back, per-channel affine; weight, bias (C,). No running state."""),
    OpDef("layer_norm", 1, ("x", "weight?", "bias?"), ("y",), {
        "normalized_shape": _NORMALIZED_SHAPE,
        "eps": _EPS,
    }, _layer_norm, doc="""\
Layer normalization over the trailing axes, which must equal normalized_shape exactly;
weight and bias have shape normalized_shape. Output: x's shape."""),
    OpDef("layer_norm2d", 1, ("x", "weight?", "bias?"), ("y",), {
        "normalized_shape": _NORMALIZED_SHAPE,
        "eps": _EPS,
    }, _layer_norm2d, doc="""\
Layer normalization of the channels of an NCHW tensor (NCHW -> NHWC, normalize the last axis,
back to NCHW). normalized_shape must be (C,); weight, bias (C,)."""),
    OpDef("rms_norm", 1, ("x", "weight?"), ("y",), {
        "eps": AttrSpec("float", 1e-6, greater_than(0.0)),
    }, _rms_norm, doc="""\
x * rsqrt(mean(x**2, last axis) + eps) * weight, computed in float32 and cast back to x's
dtype (a float16 x needs its own tolerance). weight (x.shape[-1],)."""),
    OpDef("linear", 1, ("x", "weight", "bias?"), ("y",), {}, _linear, doc="""\
y = x @ weight.T + bias on the last axis; leading (batch, time) axes pass through.
weight (out_features, in_features); bias (out_features,); x (..., in_features) float."""),
    OpDef("lstm_cell", 1, ("x", "h", "c", "weight_ih", "weight_hh", "bias_ih?", "bias_hh?"),
          ("h_next", "c_next"), {}, _lstm_cell, doc="""\
One LSTM step, gates in the order i, f, g, o. x (B, input_size); h, c (B, hidden);
weight_ih (4*hidden, input_size); weight_hh (4*hidden, hidden); biases (4*hidden,).
Returns (h_next, c_next), each (B, hidden). Carrying state across steps is the caller's job."""),
    OpDef("lstm", 1, ("x", "h", "c", "weight_ih", "weight_hh", "bias_ih?", "bias_hh?",
                      "lengths?", "peepholes?"),
          ("y", "h_last", "c_last"), {"reverse": AttrSpec("bool", False)}, _lstm, doc="""\
lstm_cell over a sequence: x (T, B, input_size), T possibly known only when the call runs;
h, c (B, hidden) the state before the first step, which is x[0] (reverse: x[T-1]). y (T, B,
hidden) holds the h of each step at that step's position; h_last, c_last the state after the
last step. Weights and biases as lstm_cell's. T = 0 gives an empty y and the state as given.
""" + _LENGTHS_DOC + """
peepholes (3*hidden,), optional (ONNX's LSTM's P, in the order i, f, o): the input and forget
gates read the cell state before the step, i = sigmoid(. + p_i * c), f = sigmoid(. + p_f *
c), and the output gate the one after it, o = sigmoid(. + p_o * c')."""),
    OpDef("quantized_lstm", 1, ("x", "h", "c", "weight_hh", "weight_scale",
                                "weight_zero_point?", "bias?", "lengths?", "peepholes?"),
          ("y", "h_last", "c_last"), {"reverse": AttrSpec("bool", False),
                                      "quantize_y": AttrSpec("bool", False)},
          _quantized_lstm, doc="""\
The recurrence of onnxruntime's quantized LSTM (com.microsoft's DynamicQuantizeLSTM, what
quantize_dynamic makes of an LSTM), float32 with 8-bit weights, gates in ONNX's blocks i, o,
f, c: x (T, B, 4*hidden) holds every step's share of its gates from the input (computed
before, e.g. by integer_linear), T possibly known only when the call runs; h, c (B, hidden)
the state before the first step. At each step the state s (h before the first step; after
it the last step's h, or with quantize_y its y, which is 0 for a sequence that has ended) is
quantized as dynamic_quantize quantizes it (its codes, scale and zero point over the whole
(B, hidden)); g = x[t] + float32(integer_linear(codes, weight_hh, zero point,
weight_zero_point)) * (scale * weight_scale), each product rounded to float32 (weight_hh
(4*hidden, hidden) uint8 or int8, weight_zero_point () of its dtype, absent 0, weight_scale
() or (4*hidden,)); then, each operation rounded to float32 in this order: with peepholes
(3*hidden,) (i, o, f) p_i * c added to i and p_f * c to f; bias (4*hidden,) added to each
block; i, f = sigmoid, c~ = tanh(c block), c' = c * f + i * c~, o = sigmoid(o block +
p_o * c' (with peepholes) + its bias), h' = tanh(c') * o. y (T, B, hidden) holds each step's
h at its position; h_last, c_last the state after the last step; T = 0 gives an empty y and
the state as given; reverse runs from x[T-1] (with lengths, each sequence from its own last
step, its y back at its positions). A step's state of no values (a batch or hidden size of
0) is a ShapeError when the call runs, as dynamic_quantize refuses it.
""" + _LENGTHS_DOC),
    OpDef("gru", 1, ("x", "h", "weight_ih", "weight_hh", "bias_ih?", "bias_hh?", "lengths?"),
          ("y", "h_last"), {"reverse": AttrSpec("bool", False),
                            "linear_before_reset": AttrSpec("bool", True)}, _recurrence, doc="""\
A GRU over a sequence (torch's nn.GRU, gates r, z, n): x (T, B, input_size), T possibly known
only when the call runs; h (B, hidden) the state before the first step, which is x[0]
(reverse: x[T-1]). r, z = sigmoid(W_i x + b_i + W_h h + b_h) of their rows; n = tanh(W_in x +
b_in + r * (W_hn h + b_hn)), or with linear_before_reset false (ONNX's default) tanh(W_in x +
b_in + W_hn (r * h) + b_hn); h' = (1 - z) * n + z * h. weight_ih (3*hidden, input_size),
weight_hh (3*hidden, hidden), biases (3*hidden,). y (T, B, hidden) holds each step's h at its
position, h_last the state after the last step; T = 0 gives an empty y and h as given.
""" + _LENGTHS_DOC),
    OpDef("rnn", 1, ("x", "h", "weight_ih", "weight_hh", "bias_ih?", "bias_hh?", "lengths?"),
          ("y", "h_last"), {"reverse": AttrSpec("bool", False),
                            "nonlinearity": AttrSpec("enum:tanh|relu", "tanh")}, _recurrence,
          doc="""\
An Elman RNN over a sequence (torch's nn.RNN): h' = nonlinearity(W_ih x + b_ih + W_hh h +
b_hh), tanh or relu, at each step of x (T, B, input_size) from the first (reverse: the last),
T possibly known only when the call runs; h (B, hidden) the state before. weight_ih (hidden,
input_size), weight_hh (hidden, hidden), biases (hidden,). y (T, B, hidden) holds each step's
h at its position, h_last the state after the last step; T = 0 gives an empty y and h as
given.
""" + _LENGTHS_DOC),
    OpDef("embedding", 1, ("idx", "weight"), ("y",), {}, _embedding, doc="""\
Row lookup: idx (...) integer, weight (vocab, embed) float -> (..., embed) with weight's dtype.
Indices outside [0, vocab) are refused at run time by the executor (never zeroed or clipped).
Inference is a plain gather; tinygrad's atomic path (USE_ATOMICS) is a training-time scatter,
so this op is not marked atomic. An op whose kernel uses atomics sets ``atomic=True``."""),
)
