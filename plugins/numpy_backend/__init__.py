"""The built-in inference backend: numpy on the CPU, over the kernels of ``plugins.nn``.

It is registered through the ``plugin_host_add_backends`` hook like any third-party backend.
It supports every op of the op table at version 1 in float32 (and the integer dtypes for
indices and shape ops), and prepares each node once: weights are reshaped for BLAS and
inference BatchNorm is folded into one scale and shift per channel. Chains conv -> BatchNorm
[-> ReLU] run as one conv with the BatchNorm folded into its weights, and [flatten ->] linear
[-> ReLU] as one GEMV with the flatten folded into the weight's column order (``fuse``).
``lstm_cell``, ``linear`` and ``integer_linear`` nodes reading the same constants (an ONNX
LSTM or GRU unrolled over time, a quantized one) share one prepared weight
(``plugin_host.backend.prepared_once``); ``integer_linear``'s is cut into runs of inputs whose
float32 sums are exact (``glue.integer_weight``).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from abi import TensorType, get_op, infer_shapes
from abi.errors import BackendError
from plugin_host.hooks import hookimpl

from . import glue, layers, qlinear

_Factory = Callable[..., Callable[..., Any]]

#: op name -> factory(attrs, consts, types, where) returning fn(*dynamic inputs) -> array|tuple
FACTORIES: dict[str, _Factory] = {**layers.FACTORIES}
#: element-wise ops of several inputs, whose run-time shapes may not broadcast
_BROADCASTING = frozenset({"add", "sub", "mul", "div", "pow", "max", "min", "equal", "greater",
                           "greater_equal", "less", "less_equal", "and", "or", "where", "mod",
                           "int_div", "quantize_linear", "bitwise_and", "bitwise_or",
                           "bitwise_xor", "bit_shift", "prelu"})
for _op, _fn in {
    "relu": glue.relu, "sigmoid": glue.sigmoid, "tanh": glue.tanh, "gelu": glue.gelu,
    "softmax": glue.softmax, "clip": glue.clip, "identity": glue.identity,
    "elu": glue.elu, "leaky_relu": glue.leaky_relu, "hard_sigmoid": glue.hard_sigmoid,
    "hard_swish": glue.hard_swish, "softplus": glue.softplus, "exp": glue.exp,
    "log": glue.log, "sqrt": glue.sqrt, "reciprocal": glue.reciprocal, "erf": glue.erf,
    "abs": np.abs, "neg": np.negative, "prelu": glue.prelu, "pow": glue.pow_,
    "max": np.maximum, "min": np.minimum, "equal": np.equal, "greater": np.greater,
    "greater_equal": np.greater_equal, "less": np.less, "less_equal": np.less_equal,
    "not": np.logical_not, "and": np.logical_and, "or": np.logical_or, "where": np.where,
    "floor": np.floor, "ceil": np.ceil, "round": np.round,  # numpy's round: halves to even
    "add": glue.add, "sub": glue.sub, "mul": glue.mul, "div": glue.div,
    "matmul": glue.matmul, "mean": glue.mean, "cast": glue.cast, "bitcast": glue.bitcast,
    "concat": glue.concat,
    "sum": glue.sum_, "amax": glue.amax, "amin": glue.amin, "argmax": glue.argmax,
    "sin": glue.sin, "cos": glue.cos, "sign": np.sign, "log_softmax": glue.log_softmax,
    "argmin": glue.argmin, "prod": glue.prod, "mod": glue.mod,
    "int_div": glue.int_div,
    "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor, "bitwise_not": np.invert, "bit_shift": glue.bit_shift,
    "tan": glue.tan, "atan": glue.atan, "asin": glue.asin, "acos": glue.acos,
    "sinh": glue.sinh, "cosh": glue.cosh, "asinh": glue.asinh, "acosh": glue.acosh,
    "atanh": glue.atanh, "isnan": np.isnan, "isinf": glue.isinf,
    "cumsum": glue.cumsum, "cumprod": glue.cumprod, "topk": glue.topk, "det": glue.det,
    "dynamic_quantize": glue.dynamic_quantize, "quantize_linear": glue.quantize_linear,
    "reshape": glue.reshape, "flatten": glue.flatten, "unflatten": glue.unflatten,
    "transpose": glue.transpose,
    "slice": glue.slice_, "split": glue.split, "pad": glue.pad,
    "max_pool": glue.max_pool, "avg_pool": glue.avg_pool,
    "max_pool_with_indices": glue.max_pool_with_indices,
    "expand": glue.expand, "tile": glue.tile,
    "grid_sample": glue.grid_sample,
}.items():
    FACTORIES[_op] = (layers.broadcasting if _op in _BROADCASTING else layers.generic)(_fn)
FACTORIES["resize"] = layers.resize
FACTORIES["gather"] = layers.gather  # prepared: its constant indices are checked at load
FACTORIES["gather_elements"] = layers.gather_elements  # its index errors name the node
FACTORIES["scatter_elements"] = layers.scatter_elements  # prepared for constant indices
FACTORIES.update(qlinear.FACTORIES)

DTYPES = frozenset({"float32", "int64", "int32", "int16", "int8", "uint8", "uint16", "uint32",
                    "uint64", "bool"})


def _padded(node, consts, types):
    """``consts`` and ``types`` extended with None for trailing optional inputs left out."""
    opdef = get_op(node.op, node.version)
    missing = 0 if opdef.variadic_inputs else len(opdef.inputs) - len(consts)
    return list(consts) + [None] * missing, list(types) + [None] * missing


def _zero_d_arrays(fn, multi: bool):
    """``fn`` returning arrays: numpy gives a 0-d result as a numpy scalar (``np.add`` of
    two 0-d arrays, a sum over every axis), which is not an ``ndarray``."""
    if multi:
        return lambda *dyn: tuple(np.asarray(r) for r in fn(*dyn))
    return lambda *dyn: np.asarray(fn(*dyn))


class NumpyBackend:
    """numpy kernels; float32 compute."""

    name = "numpy"

    def supported_ops(self) -> Mapping[str, frozenset[int]]:
        return {op: frozenset({1}) for op in FACTORIES}

    def supported_dtypes(self) -> frozenset[str]:
        return DTYPES

    def prepare(self, node, consts: Sequence[np.ndarray | None],
                types: Sequence[TensorType | None]):
        factory = FACTORIES.get(node.op)
        if factory is None or node.version != 1:
            raise BackendError(f"numpy backend: op {node.op} v{node.version} is not supported",
                               node=node.name)
        consts, types = _padded(node, consts, types)
        # a node of constants only (a graph that did not fold it): prepared with its first
        # input as one that comes when the call runs, as every factory takes, and computed
        # here, once
        folded = bool(consts) and consts[0] is not None and all(
            c is not None for c, t in zip(consts, node.inputs) if t is not None)
        given = [None, *consts[1:]] if folded else consts
        fn = factory(dict(node.attrs), given, types, f"node {node.name!r}")
        multi = len(node.outputs) > 1 or get_op(node.op, node.version).variadic_outputs
        if any(not t.shape for t in infer_shapes(get_op(node.op, node.version), types,
                                                  node.attrs)):
            fn = _zero_d_arrays(fn, multi)
        if folded:
            value = fn(consts[0])
            results = tuple(value) if multi else (value,)
            return lambda: tuple(np.array(r, copy=True) for r in results)

        if multi:
            return fn

        def kernel(*dyn):
            return (fn(*dyn),)

        return kernel


    def fuse(self, graph):
        return layers.conv_chains(graph) + layers.dense_chains(graph)

    def prepare_chain(self, nodes, consts, types):
        where = "node " + "+".join(repr(n.name) for n in nodes)
        padded = [_padded(n, c, t) for n, c, t in zip(nodes, consts, types)]
        consts, types = [c for c, _ in padded], [t for _, t in padded]
        if nodes[0].op == "conv":
            return layers.conv_chain(nodes, consts, types, where)
        return layers.dense_chain(nodes, consts, types, where)


@hookimpl
def plugin_host_add_backends():
    return [NumpyBackend()]
