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
from plugins.nn import functional as F


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


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def _params_const(consts, types, first):
    """True when every present parameter input (from position ``first``) is constant."""
    return all(c is not None for c, t in zip(consts[first:], types[first:]) if t is not None)


def conv(attrs, consts, types, where):
    if _params_const(consts, types, 1):
        return F.make_conv(consts[1], consts[2], **attrs)
    return generic(F.conv)(attrs, consts, types, where)


def conv_transpose(attrs, consts, types, where):
    if _params_const(consts, types, 1):
        return F.make_conv_transpose(consts[1], consts[2], **attrs)
    return generic(F.conv_transpose)(attrs, consts, types, where)


def linear(attrs, consts, types, where):
    if _params_const(consts, types, 1):
        return F.make_linear(consts[1], consts[2])
    return generic(F.linear)(attrs, consts, types, where)


def batchnorm(attrs, consts, types, where):
    """Inference BatchNorm with constant running stats folds into ``x * scale + shift``."""
    if not (attrs["track_running_stats"] and _params_const(consts, types, 1)):
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

    def run(idx, weight=consts[1]):
        check_indices(idx, vocab, where)
        return weight[idx]

    if consts[1] is None:
        return lambda idx, weight: run(idx, weight)
    return run


def lstm_cell(attrs, consts, types, where):
    if not _params_const(consts, types, 3):
        return generic(F.lstm_cell)(attrs, consts, types, where)
    w_ih, w_hh, b_ih, b_hh = consts[3:7]
    hidden = w_hh.shape[1]
    # one matmul over [x, h] against the stacked, pre-transposed weights; gates i, f, g, o
    w = np.ascontiguousarray(np.concatenate([w_ih, w_hh], axis=1).T)
    b = np.zeros(4 * hidden, np.float32)
    for extra in (b_ih, b_hh):
        if extra is not None:
            b = b + extra

    def run(x, h, c):
        gates = np.concatenate([x, h], axis=1) @ w
        gates += b
        i, f, g, o = (gates[:, k * hidden:(k + 1) * hidden] for k in range(4))
        c_next = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h_next = _sigmoid(o) * np.tanh(c_next)
        return h_next, c_next

    return run


FACTORIES = {
    "conv": conv,
    "conv_transpose": conv_transpose,
    "linear": linear,
    "batchnorm": batchnorm,
    "embedding": embedding,
    "lstm_cell": lstm_cell,
    "group_norm": generic(F.group_norm),
    "instance_norm": generic(F.instance_norm),
    "layer_norm": generic(F.layer_norm),
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

    Only candidates: the executor checks that each intermediate is read by the next node only.
    """
    chains = []
    nodes = graph.nodes
    for i, node in enumerate(nodes):
        if node.op != "conv" or not all(t is None or t in graph.tensors for t in node.inputs[1:]):
            continue
        chain = [node.name]
        rest = nodes[i + 1:i + 3]
        if rest and _const_bn(rest[0], graph) and rest[0].inputs[0] == node.outputs[0]:
            chain.append(rest[0].name)
            rest = rest[1:]
        if rest and rest[0].op == "relu" and rest[0].inputs[0] == nodes[i + len(chain) - 1].outputs[0]:
            chain.append(rest[0].name)
        if len(chain) > 1 and all(len(graph.consumers(nodes[i + k].outputs[0])) == 1
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
        np.maximum(y, 0, out=y)
        return (y,)

    return run_relu
