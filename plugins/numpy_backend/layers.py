"""Node factories of the numpy backend for the layer ops, over ``plugins.nn``'s kernels.

A factory gets the node's attributes, its constant inputs (``None`` where an input is computed
at run time or omitted), their types and a ``where`` text for error messages, and returns a
function of the node's run-time inputs. When a layer's parameters are constants (the normal
case for an artifact) the weights are prepared once here.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from abi import check_indices
from abi.errors import BackendError, ShapeError
from plugin_host.backend import prepared_once
from plugins.nn import functional as F
from plugins.nn.norm import make_layer_norm
from plugins.nn.recurrent import lstm_gates

from . import glue
from .qlinear_conv import make_qlinear_conv
from .quantized_lstm import make_quantized_lstm


def _binder(fn: Callable[..., Any], consts: list, types: list, attrs: dict) -> Callable[..., Any]:
    """``fn`` over the node's full positional input list, called with only the run-time inputs.

    Position ``i`` is a run-time input when ``types[i]`` is set and ``consts[i]`` is None; an
    omitted optional input (``types[i] is None``) is passed as None.
    """
    dynamic = [i for i, (c, t) in enumerate(zip(consts, types)) if c is None and t is not None]
    if dynamic == list(range(len(consts))):
        return lambda *dyn: fn(*dyn, **attrs)
    template = list(consts)

    def call(*dyn):
        args = list(template)
        for i, v in zip(dynamic, dyn):
            args[i] = v
        return fn(*args, **attrs)

    return call


def generic(fn: Callable[..., Any]):
    """A factory for a kernel that needs no preparation."""
    def factory(attrs, consts, types, where):
        return _binder(fn, consts, types, attrs)
    return factory


def resize(attrs, consts, types, where):
    """resize's kernel (:func:`.glue.make_resize`), a constant x or like bound into it."""
    kernel = glue.make_resize(attrs, consts, types, where)
    if all(c is None for c in consts):  # x (and like) come when the call runs
        return kernel
    return _binder(kernel, consts, types, {})


def broadcasting(fn: Callable[..., Any]):
    """A factory for an element-wise op of several inputs: where an input has a run-time dim,
    shapes the ABI could not check (two undecided dims) that do not broadcast when the call
    runs are a ShapeError naming them, not numpy's ValueError."""
    def factory(attrs, consts, types, where):
        kernel = _binder(fn, consts, types, attrs)
        if all(t is None or all(type(d) is int for d in t.shape) for t in types):
            return kernel  # fixed shapes: the ABI's rule checked the broadcast

        def checked(*dyn):
            try:
                return kernel(*dyn)
            except ValueError as exc:
                if "broadcast" not in str(exc):
                    raise
                shapes = ", ".join(str(tuple(np.shape(a))) for a in dyn)
                raise ShapeError(f"{where}: inputs of shapes {shapes} do not broadcast",
                                 where=where) from None
        return checked
    return factory


def _params_const(consts, types, first):
    """True when every present parameter input (from position ``first``) is constant."""
    return all(c is not None for c, t in zip(consts[first:], types[first:]) if t is not None)


def _prepared(consts, types) -> bool:
    """A layer whose kernel is prepared from its constant parameters: x (input 0) comes at
    run time and every parameter is constant. A graph may also hold a layer of constants
    only (an imported Gemm of two weights), which the generic kernel runs."""
    return consts[0] is None and _params_const(consts, types, 1)


def conv(attrs, consts, types, where):
    if _prepared(consts, types):
        return F.make_conv(consts[1], consts[2], **attrs)
    return generic(F.conv)(attrs, consts, types, where)


def conv_transpose(attrs, consts, types, where):
    if _prepared(consts, types):
        return F.make_conv_transpose(consts[1], consts[2], **attrs)
    return generic(F.conv_transpose)(attrs, consts, types, where)


def linear(attrs, consts, types, where):
    """With constant parameters, one prepared kernel (and one copy of the weight) for every
    node reading the same weight and bias: an ONNX GRU unrolled over time has one per step."""
    if _prepared(consts, types):
        weight, bias = consts[1], consts[2]
        return prepared_once("numpy.linear", (weight, bias), lambda: F.make_linear(weight, bias))
    return generic(F.linear)(attrs, consts, types, where)


def integer_linear(attrs, consts, types, where):
    """With a constant weight and weight zero point, the weight prepared once
    (:func:`.glue.integer_weight`) for every node reading the same ones (a quantized LSTM's
    steps); x and its zero point come when the call runs or are constants."""
    if consts[1] is None or (types[3] is not None and consts[3] is None):
        return generic(glue.integer_linear)(attrs, consts, types, where)
    weight, zero_point = consts[1], consts[3]
    w = prepared_once("numpy.integer_linear", (weight, zero_point),
                      lambda: glue.integer_weight(weight, zero_point))
    return _binder(lambda x, _w, x_zero_point, _z: glue.integer_sums(x, x_zero_point, w),
                   consts, types, {})


def qlinear_conv(attrs, consts, types, where):
    """The quantized conv (:mod:`.qlinear_conv`), its integer conv prepared once where the
    weight and its zero point are constants."""
    return _binder(make_qlinear_conv(attrs, consts, where), consts, types, {})


def quantized_lstm(attrs, consts, types, where):
    """The quantized LSTM's recurrence (:mod:`.quantized_lstm`), its weight prepared once when
    it, its scale and its zero point are constants."""
    def make(weight, scale, zero_point):
        return make_quantized_lstm(weight, scale, zero_point, where=where, **attrs)

    if _params_const(consts[:6], types[:6], 3):
        run = make(*consts[3:6])
        return _binder(lambda x, h, c, _w, _s, _z, *rest: run(x, h, c, *rest), consts, types,
                       {})
    return _binder(lambda x, h, c, w, s, z, *rest: make(w, s, z)(x, h, c, *rest), consts,
                   types, {})


def batchnorm(attrs, consts, types, where):
    """Inference BatchNorm with constant running stats folds into ``x * scale + shift``."""
    if not (attrs["track_running_stats"] and _prepared(consts, types)):
        return generic(F.batchnorm)(attrs, consts, types, where)
    weight, bias, mean, var = consts[1:5]
    rank = len(types[0].shape)
    inv = 1.0 / np.sqrt(var.astype(np.float64) + attrs["eps"])
    scale = inv if weight is None else weight * inv
    shift = -mean * scale if bias is None else bias - mean * scale
    shape = (1, -1) + (1,) * (rank - 2)
    scale = scale.astype(np.float32).reshape(shape)
    shift = shift.astype(np.float32).reshape(shape)

    def run(x):
        y = x * scale
        y += shift
        return y

    return run


def embedding(attrs, consts, types, where):
    vocab = types[1].shape[0]

    def run(idx, weight):
        check_indices(idx, vocab, where)
        return weight[idx]

    if consts[0] is None and consts[1] is not None:
        weight = consts[1]
        return lambda idx: run(idx, weight)
    return _binder(run, consts, types, {})


def gather(attrs, consts, types, where):
    """np.take along ``axis`` with the graph's constant indices, checked again here, at
    prepare, against x's dim: the kernel never reads out of bounds."""
    indices = consts[1]
    if indices is None:
        raise BackendError(f"numpy backend: {where}: gather indices must be a constant")
    axis = attrs["axis"] % len(types[0].shape)
    check_indices(indices, types[0].shape[axis], f"{where}: gather axis {axis}", kind="gather")

    def run(x):
        return np.take(x, indices, axis=axis)

    return run


def gather_elements(attrs, consts, types, where):
    """glue.gather_elements, its index errors naming the node."""
    return _binder(glue.gather_elements, consts, types, {**attrs, "where": f"{where}: "})


def scatter_elements(attrs, consts, types, where):
    """glue.scatter_elements; with constant indices into x of a static shape, the indices
    checked here, at prepare (IndexRangeError), and where each update goes worked out once."""
    indices, shape = consts[1], types[0].shape
    if indices is None or not all(type(d) is int for d in shape):
        return _binder(glue.scatter_elements, consts, types, {**attrs, "where": f"{where}: "})
    axis, reduction = attrs["axis"] % len(shape), attrs["reduction"]
    check_indices(indices, shape[axis], f"{where}: scatter_elements axis {axis}",
                  kind="scatter_elements")
    plan = glue.scatter_plan(indices, shape, axis, reduction)
    return _binder(lambda x, _, u: glue.scatter_apply(x, u, plan, reduction), consts, types,
                   {})


def lstm_cell(attrs, consts, types, where):
    """LSTMCell with constant weights: one GEMV over ``[x, h]``, gates computed in place.

    The stacked, pre-transposed weight's columns are reordered at load from torch's gate order
    (i, f, g, o) to (i, f, o, g), so the three sigmoid gates are one contiguous block and
    ``sigmoid(z) = 0.5 * tanh(0.5 * z) + 0.5`` runs over it in place (four in-place passes
    instead of three separate sigmoids of three temporaries each); the same tanh form as
    before, so it never overflows. Benchmark model, warm caches: 0.10 -> 0.074 ms; inside the
    model the GEMV's 8.6 MB of weights, read from memory, dominate (about 0.3 ms).

    Cells reading the same weight and bias constants (an ONNX LSTM unrolled over time: one
    cell per step) share one prepared weight and bias (``prepared_once``).
    """
    if not _params_const(consts, types, 3):
        return generic(F.lstm_cell)(attrs, consts, types, where)
    w, b = prepared_once("numpy.lstm_cell", consts[3:7], lambda: _lstm_weights(*consts[3:7]))

    def run(x, h, c):
        gates = np.matmul(np.concatenate([x, h], axis=1), w)
        gates += b
        return lstm_gates(gates, c)

    return _binder(run, consts[:3], types[:3], {})  # h, c may be constants (a zero state)


def lstm(attrs, consts, types, where):
    """The LSTM over a sequence (:func:`plugins.nn.recurrent.make_lstm`), its weights prepared
    once when they are constants."""
    return _sequence(F.make_lstm, 2, attrs, consts, types, where)


def gru(attrs, consts, types, where):
    """The GRU over a sequence (:func:`plugins.nn.recurrent.make_gru`), its weights prepared
    once when they are constants."""
    return _sequence(F.make_gru, 1, attrs, consts, types, where)


def rnn(attrs, consts, types, where):
    """The Elman RNN over a sequence (:func:`plugins.nn.recurrent.make_rnn`), as :func:`gru`."""
    return _sequence(F.make_rnn, 1, attrs, consts, types, where)


def _sequence(make, states: int, attrs, consts, types, where):
    """A recurrence of inputs (x, ``states`` states, weight_ih, weight_hh, bias_ih, bias_hh,
    lengths): prepared once from constant parameters, else per call."""
    first, last = 1 + states, 5 + states  # the parameters: [first, last); then lengths
    if _params_const(consts[:last], types[:last], first):
        run = make(*consts[first:last], where=where, **attrs)
        # a state (a zero state) or the lengths may be constants
        return _binder(run, consts[:first] + consts[last:], types[:first] + types[last:], {})

    def per_call(*args):
        return make(*args[first:last], where=where, **attrs)(*args[:first], *args[last:])
    return _binder(per_call, consts, types, {})


def _lstm_weights(w_ih, w_hh, b_ih, b_hh):
    """``(w, b)``: ``[w_ih, w_hh]`` stacked and transposed, biases summed, gates reordered
    from (i, f, g, o) to (i, f, o, g); read-only."""
    hidden = w_hh.shape[1]
    order = np.r_[0:2 * hidden, 3 * hidden:4 * hidden, 2 * hidden:3 * hidden]  # i f o g
    w = np.ascontiguousarray(np.concatenate([w_ih, w_hh], axis=1)[order].T)
    b = np.zeros(4 * hidden, np.float32)
    for extra in (b_ih, b_hh):
        if extra is not None:
            b = b + extra
    b = b[order]
    w.flags.writeable = b.flags.writeable = False
    return w, b


def layer_norm(attrs, consts, types, where):
    if _prepared(consts, types):
        return make_layer_norm(consts[1], consts[2], where=where, **attrs)
    return generic(F.layer_norm)(attrs, consts, types, where)


FACTORIES = {
    "conv": conv,
    "conv_transpose": conv_transpose,
    "linear": linear,
    "integer_linear": integer_linear,
    "batchnorm": batchnorm,
    "embedding": embedding,
    "lstm_cell": lstm_cell,
    "lstm": lstm,
    "quantized_lstm": quantized_lstm,
    "qlinear_conv": qlinear_conv,
    "gru": gru,
    "rnn": rnn,
    "group_norm": generic(F.group_norm),
    "instance_norm": generic(F.instance_norm),
    "layer_norm": layer_norm,
    "layer_norm2d": generic(F.layer_norm2d),
    "rms_norm": generic(F.rms_norm),
}


# --- fused chains ------------------------------------------------------------------------------


def _const_bn(node, graph) -> bool:
    """An inference BatchNorm whose parameters and running statistics are all constants."""
    return (node.op == "batchnorm" and node.attrs["track_running_stats"]
            and all(t is None or t in graph.tensors for t in node.inputs[1:]))


def conv_chains(graph) -> list[list[str]]:
    """conv -> batchnorm [-> relu] and conv -> relu chains with constant parameters.

    Only candidates: the executor checks that each intermediate is read by the next node only,
    and is no graph output (a model whose output is the conv's, its ReLU read by nothing).
    """
    chains = []
    nodes = graph.nodes
    outputs = {s.name for s in graph.outputs}
    for i, node in enumerate(nodes):
        if node.op != "conv" or node.inputs[0] in graph.tensors or not all(
                t is None or t in graph.tensors for t in node.inputs[1:]):
            continue
        chain = [node.name]
        rest = nodes[i + 1:i + 3]
        if rest and _const_bn(rest[0], graph) and rest[0].inputs[0] == node.outputs[0]:
            chain.append(rest[0].name)
            rest = rest[1:]
        if rest and rest[0].op == "relu" and rest[0].inputs[0] == nodes[i + len(chain) - 1].outputs[0]:
            chain.append(rest[0].name)
        if len(chain) > 1 and all(len(graph.consumers(nodes[i + k].outputs[0])) == 1
                                  and nodes[i + k].outputs[0] not in outputs
                                  for k in range(len(chain) - 1)):
            chains.append(chain)
    return chains


def conv_chain(nodes, consts, types, where):
    """One conv with inference BatchNorm folded into its weight and bias, ReLU applied in place.

    BatchNorm(conv(x)) = conv(x) * s + (beta - mean * s) with s = gamma / sqrt(var + eps), so
    the conv weight is scaled by s per output channel and the bias becomes
    (bias - mean) * s + beta. Computed in float64, stored float32.
    """
    conv, rest = nodes[0], list(nodes[1:])
    weight = consts[0][1].astype(np.float64)
    bias = (np.zeros(weight.shape[0]) if consts[0][2] is None
            else consts[0][2].astype(np.float64))
    if rest and rest[0].op == "batchnorm":
        gamma, beta, mean, var = (None if c is None else c.astype(np.float64)
                                  for c in consts[1][1:5])
        scale = 1.0 / np.sqrt(var + rest[0].attrs["eps"])
        if gamma is not None:
            scale = scale * gamma
        weight = weight * scale.reshape((-1,) + (1,) * (weight.ndim - 1))
        bias = (bias - mean) * scale + (0.0 if beta is None else beta)
        rest = rest[1:]
    run = F.make_conv(weight.astype(np.float32), bias.astype(np.float32), where=where,
                      **dict(conv.attrs))
    if not rest:
        return lambda x: (run(x),)

    def run_relu(x):
        y = run(x)
        np.maximum(y, relu_zeros(y), out=y)
        return (y,)

    return run_relu


def dense_chains(graph) -> list[list[str]]:
    """[flatten ->] linear [-> relu] chains of two or more nodes with constant parameters.

    Each intermediate must be read by the next node only and not be a graph output (the
    executor checks that again and refuses the chain otherwise).
    """
    nodes = graph.nodes
    outputs = {s.name for s in graph.outputs}

    def private(t):
        return t not in outputs and len(graph.consumers(t)) == 1

    chains = []
    for i, node in enumerate(nodes):
        if node.op != "linear" or node.inputs[0] in graph.tensors or not all(
                t is None or t in graph.tensors for t in node.inputs[1:]):
            continue
        chain = [node.name]
        prev = nodes[i - 1] if i else None
        if (prev is not None and prev.op == "flatten" and len(prev.outputs) == 1
                and prev.inputs[0] not in graph.tensors
                and node.inputs[0] == prev.outputs[0] and private(prev.outputs[0])):
            chain.insert(0, prev.name)
        nxt = nodes[i + 1] if i + 1 < len(nodes) else None
        if (nxt is not None and nxt.op == "relu" and nxt.inputs[0] == node.outputs[0]
                and private(node.outputs[0])):
            chain.append(nxt.name)
        if len(chain) > 1:
            chains.append(chain)
    return chains


def dense_chain(nodes, consts, types, where):
    """[flatten ->] linear [-> relu] as one kernel.

    A flatten of a 4-D ``(N, C, H, W)`` input into ``(N, C*H*W)`` is folded into the linear
    weight: its columns are reordered at load to the channels-last order ``(H, W, C)``, so the
    output of a conv (channels-last memory, see ``plugins.nn.conv``) is read through a free
    view instead of being copied into C order; an input in any other memory layout is copied
    by the same view's reshape, so the result does not depend on the layout. ReLU runs in place
    on the fresh output. Anything else (another rank or shape) takes the unfused path.
    Saves the flatten copy and two executor steps: about 0.015 ms on the benchmark model.
    """
    flat = nodes[0] if nodes[0].op == "flatten" else None
    k = 1 if flat is not None else 0
    weight, bias = consts[k][1], consts[k][2]
    relu = len(nodes) > k + 1
    out_f = weight.shape[0]
    folded = None
    if flat is not None:
        shape = tuple(types[0][0].shape)
        start, end = flat.attrs.get("start_dim", 1), flat.attrs.get("end_dim", -1)
        if (len(shape) == 4 and all(isinstance(d, int) for d in shape[1:])
                and start % 4 == 1 and end % 4 == 3 and weight.ndim == 2
                and weight.shape[1] == shape[1] * shape[2] * shape[3]):
            chw = shape[1:]
            wp = weight.reshape((out_f,) + chw).transpose(0, 2, 3, 1).reshape(out_f, -1)
            folded = F.make_linear(np.ascontiguousarray(wp), bias, where=where)
    plain = None if folded is not None else F.make_linear(weight, bias, where=where)

    def unfused(x):
        nonlocal plain
        if plain is None:
            plain = F.make_linear(weight, bias, where=where)
        if flat is not None:
            x = glue.flatten(x, start_dim=flat.attrs.get("start_dim", 1),
                             end_dim=flat.attrs.get("end_dim", -1))
        return plain(x)

    def run(x):
        if folded is not None and type(x) is np.ndarray and x.ndim == 4 and x.shape[1:] == chw:
            # the row length given, not -1: numpy cannot infer it for an empty batch
            y = folded(x.transpose(0, 2, 3, 1).reshape(x.shape[0], chw[0] * chw[1] * chw[2]))
        else:
            y = unfused(x)
        if relu:
            np.maximum(y, relu_zeros(y), out=y)
        return (y,)

    return run


def relu_zeros(y: np.ndarray) -> np.ndarray:
    """A read-only zero array with ``y``'s shape and memory layout, cached by both.

    ``np.maximum(y, zeros, out=y)`` is ReLU with numpy's NaN propagation (as before), but 3.5x
    faster than against the scalar 0: numpy 2.4's SIMD loop for maximum covers two contiguous
    operands, not a broadcast scalar (measured on (8192, 32) float32: 0.097 ms -> 0.027 ms).
    The same layout keeps both operands read in memory order. ``np.zeros`` (calloc) of a
    large array is never written, so its pages all map the kernel's zero page: it costs no
    memory, and no cache beyond that one page (``zeros_like`` would write them).
    """
    key = (y.shape, y.strides)
    zeros = _RELU_ZEROS.get(key)
    if zeros is None:
        if len(_RELU_ZEROS) >= 64:
            _RELU_ZEROS.clear()
        order = sorted(range(y.ndim), key=lambda a: -abs(y.strides[a]))  # memory order
        zeros = np.zeros([y.shape[a] for a in order], y.dtype).transpose(np.argsort(order))
        zeros.flags.writeable = False
        _RELU_ZEROS[key] = zeros
    return zeros


_RELU_ZEROS: dict[tuple, np.ndarray] = {}
