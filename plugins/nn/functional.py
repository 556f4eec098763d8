"""The numpy kernels of the nn layers, in one namespace (the numpy backend's op table).

Conventions: tensors are positional, attributes keyword-only, ``None`` stands for an omitted
optional tensor, every kernel returns new arrays and never writes an argument. Each takes an
optional ``where=`` naming the layer or graph node in error messages. Errors are the
:mod:`abi.errors` classes: ShapeError, DTypeError, ContractError, DomainError, IndexRangeError.

=================  ===========================================================  ===========
op                 kernel                                                        data inputs
=================  ===========================================================  ===========
conv               ``conv(x, weight, bias, *, stride, padding, dilation,        x
                   groups)`` / ``make_conv(weight, bias, *, ...)``
conv_transpose     ``conv_transpose(x, weight, bias, *, stride, padding,        x
                   output_padding, dilation, groups)`` / ``make_conv_transpose``
batchnorm          ``batchnorm(x, weight, bias, running_mean, running_var,      x
                   num_batches_tracked=None, *, eps, momentum,
                   track_running_stats, training=False)``
linear             ``linear(x, weight, bias)`` / ``make_linear(weight, bias)``  x
lstm_cell          ``lstm_cell(x, h, c, weight_ih, weight_hh, bias_ih,          x, h, c
                   bias_hh) -> (h, c)``
lstm               ``lstm(x, h, c, weight_ih, weight_hh, bias_ih, bias_hh,      x, h, c,
                   lengths=None, peepholes=None, *, reverse) -> (y, h_last,    lengths
                   c_last)``, the cell over (seq, ...) /
                   ``make_lstm(weight_ih, ...)``
gru                ``gru(x, h, weight_ih, weight_hh, bias_ih, bias_hh,          x, h,
                   lengths=None, *, reverse, linear_before_reset) -> (y,       lengths
                   h_last)`` /
                   ``make_gru(weight_ih, ...)``
rnn                ``rnn(x, h, weight_ih, weight_hh, bias_ih, bias_hh,          x, h,
                   lengths=None, *, reverse, nonlinearity) -> (y, h_last)``    lengths
                   / ``make_rnn``
group_norm         ``group_norm(x, weight, bias, *, num_groups, eps)``          x
instance_norm      ``instance_norm(x, weight, bias, *, eps)``                   x
layer_norm         ``layer_norm(x, weight, bias, *, normalized_shape, eps)``    x
layer_norm2d       ``layer_norm2d(x, weight, bias, *, normalized_shape, eps)``  x
rms_norm           ``rms_norm(x, weight, *, eps)``                              x
embedding          ``embedding(idx, weight)``; ``check_embedding_indices(idx,   idx
                   vocab_size, where)``
=================  ===========================================================  ===========
"""

from .conv import conv, conv_transpose, make_conv, make_conv_transpose, resolve_padding
from .embedding import check_embedding_indices, embedding
from .linear import linear, make_linear
from .norm import (batch_stats, batchnorm, group_norm, instance_norm, layer_norm, layer_norm2d,
                   rms_norm)
from .recurrent import gru, lstm, lstm_cell, make_gru, make_lstm, make_rnn, rnn

__all__ = ["conv", "make_conv", "conv_transpose", "make_conv_transpose", "resolve_padding",
           "batchnorm", "batch_stats", "linear", "make_linear", "lstm", "make_lstm",
           "lstm_cell", "gru", "make_gru", "rnn", "make_rnn", "group_norm", "instance_norm",
           "layer_norm", "layer_norm2d", "rms_norm", "embedding", "check_embedding_indices"]
