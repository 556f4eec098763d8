"""The op mapping table: each supported ONNX op and the ABI node(s) it becomes.

One function per ONNX op, registered in :data:`MAPPERS`. A mapper reads the node's attributes,
refuses any value it does not map exactly (``imp.unsupported`` names the node and the op), and
emits nodes of the ABI op table through ``imp.emit``. Layers come out as layer ops wherever
torch's export of a layer has a one-node form (Conv, ConvTranspose, BatchNormalization, Gemm
and MatMul on a constant weight as Linear, the normalizations, Gather on a constant table as
Embedding); everything else maps onto the glue ops one to one (GatherND of single coordinates
onto gather).
"""

from __future__ import annotations

import importlib
import math
from typing import Any, Callable

import numpy as np

from abi import dtypes

from ..errors import ModelFileError
from . import symbolic
from .einsum import einsum
from .fold import (axis_in, flatten_axis, int_vector, one_value, onnx_slice, reshape_target,
                   split_sizes)
from .reader import ONNX_DTYPES

__all__ = ["MAPPERS", "REFUSED"]

Mapper = Callable[[Any, Any, dict], None]
MAPPERS: dict[str, Mapper] = {}
#: Ops refused with what to do instead (the refusal says it), from the modules that know why
REFUSED: dict[str, str] = {}


def maps(*names: str):
    def register(f: Mapper) -> Mapper:
        for n in names:
            MAPPERS[n] = f
        return f
    return register


def _only(imp, attrs: dict, allowed: dict[str, Any]) -> None:
    """Refuse any attribute not in ``allowed``; ``allowed[k]`` is the one value it may have
    (``...``: any value)."""
    for k, v in attrs.items():
        if k not in allowed:
            raise imp.unsupported(f"attribute {k}={v!r} is not supported")
        want = allowed[k]
        if want is not ... and v != want:
            raise imp.unsupported(f"attribute {k}={v!r} is not supported (only {want!r})")


def _few(values: list, shown: int = 8) -> str:
    """A list for a message: at most ``shown`` entries and the count."""
    if len(values) <= shown:
        return str(values)
    return f"[{', '.join(map(str, values[:shown]))}, ... ({len(values)} values)]"


def _opt(node, i: int) -> str | None:
    return node.input[i] if len(node.input) > i and node.input[i] else None


def _one_output(imp, node, ops: str = "") -> None:
    extra = [o for o in node.output[1:] if o and (o in imp.consumers or o in imp.graph_outputs)]
    if extra:
        raise imp.unsupported(f"optional output(s) {extra} are not supported{ops}")


# --- element-wise --------------------------------------------------------------------------------

_UNARY = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Identity": "identity",
          "HardSwish": "hard_swish", "Softplus": "softplus", "Exp": "exp", "Log": "log",
          "Sqrt": "sqrt", "Reciprocal": "reciprocal", "Erf": "erf", "Abs": "abs", "Neg": "neg",
          "Not": "not", "Floor": "floor", "Ceil": "ceil", "Round": "round", "Sin": "sin",
          "Cos": "cos", "Sign": "sign",
          "Tan": "tan", "Atan": "atan", "Asin": "asin", "Acos": "acos", "Sinh": "sinh",
          "Cosh": "cosh", "Asinh": "asinh", "Acosh": "acosh", "Atanh": "atanh", "IsNaN": "isnan"}


@maps(*_UNARY)
def _unary(imp, node, attrs):
    _only(imp, attrs, {})
    imp.emit(_UNARY[node.op_type], [imp.tensor(node.input[0])], [node.output[0]])


@maps("IsInf")
def _isinf(imp, node, attrs):
    _only(imp, attrs, {"detect_positive": ..., "detect_negative": ...})
    detect = {}
    for name in ("detect_positive", "detect_negative"):
        value = attrs.get(name, 1)
        if value not in (0, 1):
            raise imp.unsupported(f"attribute {name}={value!r} must be 0 or 1")
        detect[name] = bool(value)
    imp.emit("isinf", [imp.tensor(node.input[0])], [node.output[0]], detect)


#: ONNX activation -> (ABI op, {attribute: ONNX's default}); the attributes keep their names
_ALPHA = {"Elu": ("elu", {"alpha": 1.0}), "LeakyRelu": ("leaky_relu", {"alpha": 0.01}),
          "HardSigmoid": ("hard_sigmoid", {"alpha": 0.2, "beta": 0.5})}


@maps(*_ALPHA)
def _alpha(imp, node, attrs):
    op, defaults = _ALPHA[node.op_type]
    _only(imp, attrs, dict.fromkeys(defaults, ...))
    imp.emit(op, [imp.tensor(node.input[0])], [node.output[0]],
             {k: float(attrs.get(k, v)) for k, v in defaults.items()})


def _finite_attr(imp, attrs: dict, name: str, default: float) -> float:
    value = float(attrs.get(name, default))
    if not math.isfinite(value):
        raise imp.unsupported(f"attribute {name}={value} is not finite")
    return value


@maps("Selu")
def _selu(imp, node, attrs):
    """gamma * elu(x, alpha)."""
    _only(imp, attrs, {"alpha": ..., "gamma": ...})
    gamma = _finite_attr(imp, attrs, "gamma", 1.05070102214813232421875)
    [e] = imp.emit("elu", [imp.tensor(node.input[0])], [None],
                   {"alpha": float(attrs.get("alpha", 1.67326319217681884765625))}, suffix="/elu")
    imp.emit("mul", [e, _scalar(imp, gamma, e, f"{imp.node_name}.gamma")], [node.output[0]])


@maps("Celu")
def _celu(imp, node, attrs):
    """x where x > 0, else alpha * elu(x / alpha) (x / alpha could overflow for x > 0)."""
    _only(imp, attrs, {"alpha": ...})
    alpha = _finite_attr(imp, attrs, "alpha", 1.0)
    if alpha <= 0:
        raise imp.unsupported(f"attribute alpha={alpha} must be > 0")
    x = imp.tensor(node.input[0])
    a = _scalar(imp, alpha, x, f"{imp.node_name}.alpha")
    [scaled] = imp.emit("div", [x, a], [None], suffix="/scale")
    [e] = imp.emit("elu", [scaled], [None], {"alpha": 1.0}, suffix="/elu")
    [negative] = imp.emit("mul", [e, a], [None], suffix="/negative")
    [positive] = imp.emit("greater", [x, _scalar(imp, 0.0, x, f"{imp.node_name}.zero")], [None],
                          suffix="/positive")
    imp.emit("where", [positive, x, negative], [node.output[0]])


@maps("Mish")
def _mish(imp, node, attrs):
    """x * tanh(softplus(x))."""
    _only(imp, attrs, {})
    x = imp.tensor(node.input[0])
    [sp] = imp.emit("softplus", [x], [None], suffix="/softplus")
    [t] = imp.emit("tanh", [sp], [None], suffix="/tanh")
    imp.emit("mul", [x, t], [node.output[0]])


@maps("Mod")
def _mod(imp, node, attrs):
    _only(imp, attrs, {"fmod": ...})
    fmod = attrs.get("fmod", 0)
    if fmod not in (0, 1):
        raise imp.unsupported(f"attribute fmod={fmod!r} must be 0 or 1")
    imp.emit("mod", [imp.tensor(node.input[0]), imp.tensor(node.input[1])], [node.output[0]],
             {"fmod": bool(fmod)})


@maps("Where")
def _where(imp, node, attrs):
    _only(imp, attrs, {})
    imp.emit("where", [imp.tensor(n) for n in node.input[:3]], [node.output[0]])


@maps("PRelu")
def _prelu(imp, node, attrs):
    _only(imp, attrs, {})
    imp.emit("prelu", [imp.tensor(node.input[0]), imp.tensor(node.input[1])],
             [node.output[0]])


@maps("Pow")
def _pow(imp, node, attrs):
    """a ** b; a constant exponent of another dtype (exporters write ``x ** 2`` with an int64
    or float64 2) takes the base's, as onnxruntime computes it."""
    _only(imp, attrs, {})
    base = imp.tensor(node.input[0])
    exponent = node.input[1]
    want = imp.types[base].dtype
    if imp.is_const(exponent) and imp.type_of(exponent).dtype != want:
        value = imp.const(exponent, "exponent")
        cast = value.astype(dtypes.to_numpy(want))
        if not np.array_equal(cast, value):
            raise imp.unsupported(f"exponent {value.tolist()!r:.60} is not exact in {want}")
        exponent_t = imp.add_constant(cast, imp.origin.get(exponent, exponent))
    else:
        exponent_t = imp.tensor(exponent)
    imp.emit("pow", [base, exponent_t], [node.output[0]])


def _variadic(imp, node) -> list[str]:
    """The inputs of a variadic op (Max, Min, Sum, Mean): one or more, none empty."""
    names = list(node.input)
    if not names or not all(names):
        raise imp.unsupported(f"inputs {names!r:.80}: needs one or more, none of them empty "
                              f"(an empty name omits an optional input; {node.op_type} has "
                              f"none)")
    return names


def _chain(imp, node, names: list[str], op: str, *, bind: bool = True) -> str:
    """``names`` folded left with the binary ``op``, in input order (one input: the input
    itself); the result bound to the node's output unless ``bind`` is False."""
    out = node.output[0] if bind else None
    if len(names) == 1:
        return imp.emit("identity", [imp.tensor(names[0])], [out])[0]
    y = imp.tensor(names[0])
    for i, name in enumerate(names[1:], start=1):
        last = i == len(names) - 1 and bind
        [y] = imp.emit(op, [y, imp.tensor(name)], [out if last else None],
                       suffix="" if last else f"/{i}")
    return y


@maps("Max", "Min")
def _extremum(imp, node, attrs):
    """ONNX's variadic Max/Min as a chain of the binary ops (one input: the input itself)."""
    _only(imp, attrs, {})
    _chain(imp, node, _variadic(imp, node), node.op_type.lower())


@maps("Sum", "Mean")
def _sum_mean(imp, node, attrs):
    """ONNX's variadic Sum / Mean (broadcasting) as a chain of ``add`` in input order, as
    onnxruntime adds them; Mean (float inputs only) then ``mul`` by 1/count in x's dtype, as
    onnxruntime scales (it does not divide). One input: the input itself."""
    _only(imp, attrs, {})
    names = _variadic(imp, node)
    dtype = imp.type_of(names[0]).dtype
    mean = node.op_type == "Mean" and len(names) > 1
    if mean and not dtype.startswith("float"):
        raise imp.unsupported(f"inputs of dtype {dtype}: Mean needs float tensors")
    y = _chain(imp, node, names, "add", bind=not mean)
    if mean:
        scale = np.asarray(1, dtypes.to_numpy(dtype)) / np.asarray(len(names),
                                                                    dtypes.to_numpy(dtype))
        imp.emit("mul", [y, imp.add_constant(scale, f"{imp.node_name}.scale")],
                 [node.output[0]])


@maps("Dropout")
def _dropout(imp, node, attrs):
    """Inference: the input itself (ratio is ignored). training_mode must be absent or a
    constant false; the mask output may not be read."""
    _only(imp, attrs, {"seed": ...})
    training = _opt(node, 2)
    if training is not None:
        if not imp.is_const(training):
            raise imp.unsupported(f"training_mode {training!r} is computed at run time (only "
                                  f"inference, a constant false, is supported)")
        if bool(one_value(imp.const(training, "training_mode"), "training_mode")):
            raise imp.unsupported("training_mode is true (only inference is supported)")
    _one_output(imp, node, " (the mask of an inference Dropout)")
    imp.emit("identity", [imp.tensor(node.input[0])], [node.output[0]])


@maps("Gelu")
def _gelu(imp, node, attrs):
    _only(imp, attrs, {"approximate": ...})
    imp.emit("gelu", [imp.tensor(node.input[0])], [node.output[0]],
             {"approximate": attrs.get("approximate", "none")})


_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Equal": "equal",
           "Greater": "greater", "GreaterOrEqual": "greater_equal", "Less": "less",
           "LessOrEqual": "less_equal", "And": "and", "Or": "or"}


@maps(*_BINARY)
def _binary(imp, node, attrs):
    """One glue op each; a Div of integers truncates (torch's // and its integer
    rounding_mode='trunc' division): ``int_div``."""
    _only(imp, attrs, {})
    op = _BINARY[node.op_type]
    if op == "div" and imp.type_of(node.input[0]).dtype in dtypes.INT_DTYPES:
        op = "int_div"
    imp.emit(op, [imp.tensor(node.input[0]), imp.tensor(node.input[1])], [node.output[0]])


@maps("Softmax", "LogSoftmax")
def _softmax(imp, node, attrs):
    _only(imp, attrs, {"axis": ...})
    imp.emit("log_softmax" if node.op_type == "LogSoftmax" else "softmax",
             [imp.tensor(node.input[0])], [node.output[0]], {"axis": attrs.get("axis", -1)})


@maps("Clip")
def _clip(imp, node, attrs):
    """Clip as onnxruntime computes it, ``std::max(x, lo)`` then ``std::min(y, hi)``, a
    missing bound of a float x being the dtype's largest finite value (so onnxruntime turns
    an infinite x into it; an infinite bound on its own side given explicitly, as in
    torch.clamp(x, max=inf), is no bound). Constant bounds: ``clip``. A bound computed at run
    time (torch.clamp(x, min=t) with a tensor ``t`` under the legacy exporter), one value of
    x's dtype as onnxruntime requires: ``where(less(x, lo), lo, x)``, then
    ``where(less(hi, y), hi, y)``. So a lower bound above the upper one gives the upper one,
    a nan x stays nan and a nan bound is no bound (torch would give nan there)."""
    _only(imp, attrs, {})
    dtype = dtypes.to_numpy(imp.type_of(node.input[0]).dtype)
    largest = float(np.finfo(dtype).max) if dtype.kind == "f" else None
    bounds: dict[str, Any] = {}
    for i, key in ((1, "min"), (2, "max")):
        t = _opt(node, i)
        if t is None:
            bounds[key] = None if largest is None else (-largest if key == "min" else largest)
        elif imp.is_const(t):
            value = float(one_value(imp.const(t, key), key))
            infinite = value == (-math.inf if key == "min" else math.inf)
            bounds[key] = None if infinite else value
        else:
            bounds[key] = _runtime_bound(imp, node, t, key)
    if not any(type(b) is str for b in bounds.values()):
        imp.emit("clip", [imp.tensor(node.input[0])], [node.output[0]], bounds)
        return
    y, steps = imp.tensor(node.input[0]), [(k, b) for k, b in bounds.items() if b is not None]
    for i, (key, bound) in enumerate(steps):
        out = node.output[0] if i == len(steps) - 1 else None
        suffix = "" if out is not None else f"/{key}"
        if type(bound) is not str:
            [y] = imp.emit("clip", [y], [out], {"min": None, "max": None, key: bound},
                           suffix=suffix)
            continue
        [beyond] = imp.emit("less", [y, bound] if key == "min" else [bound, y], [None],
                            suffix=f"/{key}/beyond")
        [y] = imp.emit("where", [beyond, bound, y], [out], suffix=suffix)


def _runtime_bound(imp, node, name: str, key: str) -> str:
    """Clip's bound ``name``, computed at run time: one value of the input's dtype."""
    x_type, bound = imp.type_of(node.input[0]), imp.type_of(name)
    if bound.dtype != x_type.dtype or not all(type(d) is int for d in bound.shape) \
            or math.prod(bound.shape) != 1:
        raise imp.unsupported(f"{key} {name!r} ({bound.dtype}, shape {list(bound.shape)}) must "
                              f"be one value of the input's dtype {x_type.dtype}")
    return imp.tensor(name)


@maps("Cast", "CastLike")
def _cast(imp, node, attrs):
    _only(imp, attrs, {"to": ..., "saturate": ...})
    if node.op_type == "CastLike":
        to = imp.type_of(node.input[1]).dtype
    else:
        to = ONNX_DTYPES.get(attrs["to"])
        if to is None:
            raise imp.unsupported(f"cast to ONNX element type {attrs['to']} (not an ABI dtype)")
    if imp.is_const(node.input[0]):  # CastLike of a constant to a run-time value's dtype
        imp.set_const(node.output[0], imp.const(node.input[0]).astype(dtypes.to_numpy(to)),
                      imp.origin.get(node.input[0]))
        return
    x = imp.tensor(node.input[0])
    if imp.types[x].dtype == to or _widened_for_a_test(imp, node, imp.types[x].dtype, to):
        imp.alias(node.output[0], x)  # exporters cast to the dtype a value already has
        return
    imp.emit("cast", [x], [node.output[0]], {"dtype": to})


def _widened_for_a_test(imp, node, dtype: str, to: str) -> bool:
    """A float cast to a wider float read only by IsInf / IsNaN (torch's legacy export of
    isinf casts to float64): widening keeps every inf and nan, so the test can read x."""
    out = node.output[0]
    users = imp.consumers.get(out, [])
    return (dtype in ("float16", "float32") and to == "float64" and bool(users)
            and out not in imp.graph_outputs
            and all(imp.model.graph.node[i].op_type in ("IsInf", "IsNaN") for i in users))


# --- layers --------------------------------------------------------------------------------------


def _pads(imp, attrs: dict, spatial: int, shape, kernel, strides, dilations) -> list:
    auto = attrs.get("auto_pad", "NOTSET")
    if auto in ("NOTSET", "VALID"):
        pads = attrs.get("pads", [0] * (2 * spatial)) if auto == "NOTSET" else [0] * 2 * spatial
        if len(pads) != 2 * spatial:
            raise imp.unsupported(f"pads {pads} must have {2 * spatial} entries")
        return [[pads[i], pads[i + spatial]] for i in range(spatial)]
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise imp.unsupported(f"auto_pad={auto!r} is not supported")
    if not len(kernel) == len(strides) == len(dilations) == spatial or min(strides) < 1:
        raise imp.unsupported(f"auto_pad={auto} with kernel {kernel}, strides {strides} and "
                              f"dilations {dilations}: one value >= 1 per spatial dim needed")
    out = []
    for i in range(spatial):
        size = shape[2 + i]
        if type(size) is not int:
            raise imp.unsupported(f"auto_pad={auto} needs a static spatial size, got {shape}")
        need = max((-(-size // strides[i]) - 1) * strides[i] + (kernel[i] - 1) * dilations[i]
                   + 1 - size, 0)
        small, big = need // 2, need - need // 2
        out.append([small, big] if auto == "SAME_UPPER" else [big, small])
    return out


@maps("Conv")
def _conv(imp, node, attrs):
    _only(imp, attrs, {"auto_pad": ..., "dilations": ..., "group": ..., "kernel_shape": ...,
                       "pads": ..., "strides": ...})
    x, w = node.input[0], node.input[1]
    shape, wshape = imp.type_of(x).shape, imp.type_of(w).shape
    spatial = len(shape) - 2
    if spatial < 1:
        raise imp.unsupported(f"input {x!r} has shape {shape}; Conv needs (N, C, *spatial)")
    kernel = attrs.get("kernel_shape", list(wshape[2:]))
    if list(kernel) != list(wshape[2:]):
        raise imp.unsupported(f"kernel_shape {kernel} differs from the weight's {wshape[2:]}")
    strides = attrs.get("strides", [1] * spatial)
    dilations = attrs.get("dilations", [1] * spatial)
    bias = _opt(node, 2)
    imp.emit("conv", [imp.tensor(x), imp.tensor(w), bias and imp.tensor(bias)], [node.output[0]],
             {"stride": strides, "dilation": dilations, "groups": attrs.get("group", 1),
              "padding": _pads(imp, attrs, spatial, shape, kernel, strides, dilations)})


@maps("ConvTranspose")
def _conv_transpose(imp, node, attrs):
    _only(imp, attrs, {"auto_pad": "NOTSET", "dilations": ..., "group": ..., "kernel_shape": ...,
                       "pads": ..., "strides": ..., "output_padding": ...})
    x, w = node.input[0], node.input[1]
    wshape = imp.type_of(w).shape
    spatial = len(wshape) - 2
    if list(attrs.get("kernel_shape", wshape[2:])) != list(wshape[2:]):
        raise imp.unsupported(f"kernel_shape {attrs['kernel_shape']} differs from the weight's "
                              f"{wshape[2:]}")
    pads = attrs.get("pads", [0] * (2 * spatial))
    if pads[:spatial] != pads[spatial:]:
        raise imp.unsupported(f"asymmetric pads {pads} (conv_transpose pads both sides equally)")
    bias = _opt(node, 2)
    imp.emit("conv_transpose", [imp.tensor(x), imp.tensor(w), bias and imp.tensor(bias)],
             [node.output[0]],
             {"stride": attrs.get("strides", [1] * spatial), "padding": pads[:spatial],
              "output_padding": attrs.get("output_padding", [0] * spatial),
              "dilation": attrs.get("dilations", [1] * spatial), "groups": attrs.get("group", 1)})


@maps("BatchNormalization")
def _batchnorm(imp, node, attrs):
    _only(imp, attrs, {"epsilon": ..., "momentum": ..., "training_mode": 0, "spatial": 1})
    _one_output(imp, node, " (training-mode outputs)")
    x, scale, bias, mean, var = node.input[:5]
    # ONNX momentum weighs the old running value; torch's (the ABI's) weighs the new batch value
    imp.emit("batchnorm", [imp.tensor(x), imp.tensor(scale), imp.tensor(bias), imp.tensor(mean),
                           imp.tensor(var), None], [node.output[0]],
             {"eps": attrs.get("epsilon", 1e-5),
              "momentum": round(1.0 - attrs.get("momentum", 0.9), 7)})


def _linear(imp, x: str, weight: np.ndarray, origin: str, bias: np.ndarray | None,
            bias_origin: str, out: str | None) -> str:
    w = imp.add_constant(weight, origin)
    b = None if bias is None else imp.add_constant(bias, bias_origin)
    return imp.emit("linear", [x, w, b], [out])[0]


def _scalar(imp, value: float, like: str, origin: str) -> str:
    return imp.add_constant(np.asarray(value, dtypes.to_numpy(imp.types[like].dtype)), origin)


@maps("Gemm")
def _gemm(imp, node, attrs):
    _only(imp, attrs, {"alpha": ..., "beta": ..., "transA": ..., "transB": ...})
    alpha, beta = attrs.get("alpha", 1.0), attrs.get("beta", 1.0)
    a, b, c = node.input[0], node.input[1], _opt(node, 2)
    x = imp.tensor(a)
    if attrs.get("transA", 0):
        x = imp.emit("transpose", [x], [None], {"perm": [1, 0]}, suffix=".transA")[0]
    if imp.is_const(b) and imp.const(b).dtype.kind == "f":
        bm = imp.const(b)
        weight = bm if attrs.get("transB", 0) else np.ascontiguousarray(bm.T)  # (N, K)
        if alpha != 1.0:
            weight = (weight * alpha).astype(weight.dtype)
        n, bias, bias_origin = weight.shape[0], None, ""
        cv = imp.consts.get(c) if c else None
        if cv is not None and cv.shape in ((), (1,), (n,), (1, n), (1, 1)):
            bias = (cv if beta == 1.0 and cv.shape == (n,) else
                    np.broadcast_to(cv.reshape(-1) * np.asarray(beta, cv.dtype), (n,)).copy())
            bias_origin, c = imp.origin.get(node.input[2], node.input[2]), None
        y = _linear(imp, x, weight, imp.origin.get(b, b), bias, bias_origin,
                    node.output[0] if c is None else None)
    else:
        w = imp.tensor(b)
        if attrs.get("transB", 0):
            w = imp.emit("transpose", [w], [None], {"perm": [1, 0]}, suffix=".transB")[0]
        last = c is None and alpha == 1.0
        y = imp.emit("matmul", [x, w], [node.output[0] if last else None])[0]
        if alpha != 1.0:
            k = _scalar(imp, alpha, y, f"{imp.node_name}.alpha")
            y = imp.emit("mul", [y, k], [None if c else node.output[0]], suffix=".alpha")[0]
    if c is None:
        return
    cc = imp.tensor(c)
    if beta != 1.0:
        cc = imp.emit("mul", [cc, _scalar(imp, beta, cc, f"{imp.node_name}.beta")], [None],
                      suffix=".beta")[0]
    imp.emit("add", [y, cc], [node.output[0]], suffix=".bias")


@maps("MatMul")
def _matmul(imp, node, attrs):
    _only(imp, attrs, {})
    a, b = node.input[0], node.input[1]
    if imp.is_const(b) and imp.const(b).ndim == 2 and imp.const(b).dtype.kind == "f" \
            and not imp.is_const(a):
        bm = imp.const(b)
        _linear(imp, imp.tensor(a), np.ascontiguousarray(bm.T), imp.origin.get(b, b), None, "",
                node.output[0])
        return
    imp.emit("matmul", [imp.tensor(a), imp.tensor(b)], [node.output[0]])


@maps("Gather")
def _gather(imp, node, attrs):
    """Run-time indices into a constant 2-D float table: an Embedding (its indices validated
    at entry); constant indices into a run-time value: ``gather``; run-time indices into a
    run-time value: ``gather_elements``."""
    _only(imp, attrs, {"axis": ...})
    data, idx = node.input[0], node.input[1]
    if imp.is_const(data) and imp.const(data).ndim == 2 and attrs.get("axis", 0) == 0 \
            and imp.const(data).dtype.kind == "f":
        table = imp.const(data)
        imp.emit("embedding", [imp.tensor(idx),
                               imp.add_constant(table, imp.origin.get(data, data))],
                 [node.output[0]])
        return
    rank = len(imp.type_of(data).shape)
    axis = axis_in(attrs.get("axis", 0), rank)
    if not imp.is_const(idx):
        _runtime_gather(imp, node, data, idx, list(imp.type_of(idx).shape), axis)
        return
    _emit_gather(imp, node, data, imp.const(idx), imp.origin.get(idx, idx), axis)


def _int64_indices(imp, idx: str) -> str:
    """The graph tensor of run-time indices ``idx``, widened to int64 (``gather_elements``'
    index dtype) when it is not."""
    index = imp.tensor(idx)
    if imp.types[index].dtype != "int64":
        [index] = imp.emit("cast", [index], [None], {"dtype": "int64"}, suffix="/int64")
    return index


def _runtime_gather(imp, node, data: str, idx: str, where: list, axis: int) -> None:
    """Run-time indices into a run-time value (torch.index_select, ``x[:, i]`` with ``i``
    computed): ``gather_elements`` of the indices (ONNX ``idx``, taken as of shape ``where``)
    flattened, laid along ``axis`` and expanded to the other axes, then reshaped to ONNX's
    output shape. Static shapes only; each index is checked against [0, dim) when it arrives
    (a negative one, which ONNX counts from the end, is refused there)."""
    shape = list(imp.type_of(data).shape)
    if not all(type(d) is int for d in shape + where):
        raise imp.unsupported(f"indices {idx!r} are computed at run time, which needs static "
                              f"shapes (data {shape}, indices {where}) unless the data is a "
                              f"constant 2-D float table (an Embedding)")
    k = math.prod(where)
    index = _int64_indices(imp, idx)
    [index] = imp.emit("reshape", [index], [None],
                       {"shape": [1] * axis + [k] + [1] * (len(shape) - axis - 1)},
                       suffix="/along")
    [index] = imp.emit("expand", [index], [None], {"shape": shape[:axis] + [k] + shape[
        axis + 1:]}, suffix="/expand")
    out = shape[:axis] + where + shape[axis + 1:]
    last = len(where) == 1
    [y] = imp.emit("gather_elements", [imp.tensor(data), index],
                   [node.output[0] if last else None], {"axis": axis},
                   suffix="" if last else "/gather")
    if not last:
        imp.emit("reshape", [y], [node.output[0]], {"shape": out})


def _emit_gather(imp, node, data: str, indices: np.ndarray, origin: str, axis: int) -> None:
    """``gather`` of constant ``indices`` along ``axis``: each checked against the dim (a
    symbolic dim is refused) and a negative one counted from the end, as ONNX does."""
    shape = imp.type_of(data).shape
    dim = shape[axis]
    if type(dim) is not int:
        raise imp.unsupported(f"axis {axis} of {data!r} (shape {shape}) is a run-time dim: the "
                              f"constant indices cannot be checked against it")
    if indices.dtype.kind not in "iu":
        raise ModelFileError(f"indices must be integers, got {indices.dtype}")
    values = indices.astype(np.int64)
    bad = (values < -dim) | (values >= dim)
    if bad.any():
        raise ModelFileError(f"indices {_few(values[bad].tolist())} are outside [-{dim}, {dim}) "
                             f"(axis {axis} of {data!r}, shape {shape})")
    values = np.where(values < 0, values + dim, values)
    imp.emit("gather", [imp.tensor(data), imp.add_constant(values, origin)], [node.output[0]],
             {"axis": axis})


@maps("GatherND")
def _gather_nd(imp, node, attrs):
    """GatherND of indices of one coordinate each (shape ``(..., 1)``, as torch's dynamo
    exporter writes ``x[:, [0, 2]]`` after moving that axis first, and ``x[i]`` for a tensor
    ``i``): a Gather on axis 0 of the indices without their last axis. Constant indices of k
    coordinates (the dynamo exporter's adaptive_avg_pool2d to a size that does not divide the
    input, ``x[rows, cols]``): the data's first k axes (static) flattened into one, and a
    Gather on it of each index's flat position."""
    _only(imp, attrs, {"batch_dims": 0})
    data, idx = node.input[0], node.input[1]
    if not imp.is_const(idx):
        where = list(imp.type_of(idx).shape)
        if not where or where[-1] != 1:
            raise imp.unsupported(f"indices of shape {where}: only one coordinate per index (a "
                                  f"last dim of 1) maps onto a gather")
        _runtime_gather(imp, node, data, idx, where[:-1], 0)
        return
    indices = imp.const(idx, "indices")
    if indices.ndim < 1 or indices.shape[-1] < 1:
        raise imp.unsupported(f"indices of shape {indices.shape}: GatherND needs indices with "
                              f"one or more coordinates in their last dim")
    if indices.shape[-1] == 1:
        _emit_gather(imp, node, data, indices[..., 0], imp.origin.get(idx, idx), 0)
        return
    flat, positions = _flat_coordinates(imp, node, data, indices)
    try:
        _emit_gather(imp, node, flat, positions, imp.origin.get(idx, idx), 0)
    finally:
        del imp.values[flat]  # a name of this node's only


def _flat_coordinates(imp, node, data: str, indices: np.ndarray) -> tuple[str, np.ndarray]:
    """GatherND's constant ``indices`` of k coordinates: ``data`` with its first k axes
    reshaped into one (bound to a name of the node's), and each index's position along it."""
    k, shape = indices.shape[-1], list(imp.type_of(data).shape)
    if k > len(shape):
        raise ModelFileError(f"indices of {k} coordinates into {data!r} of rank {len(shape)}")
    lead, rest = shape[:k], shape[k:]
    if not all(type(d) is int for d in lead):
        raise imp.unsupported(f"axes 0-{k - 1} of {data!r} (shape {shape}) include a run-time "
                              f"dim: the constant indices cannot be checked against it")
    if sum(type(d) is not int for d in rest) > 1:
        raise imp.unsupported(f"{data!r} (shape {shape}) has more than one run-time dim after "
                              f"the indexed axes")
    if indices.dtype.kind not in "iu":
        raise ModelFileError(f"indices must be integers, got {indices.dtype}")
    values, dims = indices.astype(np.int64), np.array(lead, np.int64)
    bad = (values < -dims) | (values >= dims)
    if bad.any():
        at = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ModelFileError(f"index {values[at[:-1]].tolist()} is outside shape {lead} of "
                             f"{data!r} (coordinate {at[-1]}: {int(values[at])})")
    flat = np.ravel_multi_index(tuple(np.moveaxis(np.where(values < 0, values + dims, values),
                                                  -1, 0)), lead).astype(np.int64)
    [y] = imp.emit("reshape", [imp.tensor(data)], [None],
                   {"shape": [math.prod(lead)] + [d if type(d) is int else -1 for d in rest]},
                   suffix="/flatten")
    name = f"{node.output[0]}/flat"
    while name in imp.values or name in imp.consts or name in imp.sym:  # no model's name
        name += "_"
    imp.alias(name, y)
    return name, flat


@maps("GatherElements")
def _gather_elements(imp, node, attrs):
    """torch.gather, take_along_dim: ``gather_elements``, whose run-time indices are checked
    against [0, dim) as they arrive (ONNX's negative ones would be refused there); constant
    indices are checked and made non-negative here, int32 ones widened to int64."""
    _only(imp, attrs, {"axis": ...})
    x, idx = node.input[:2]
    shape = imp.type_of(x).shape
    axis = axis_in(attrs.get("axis", 0), len(shape), "axis")
    if imp.is_const(idx) and type(shape[axis]) is int:
        value, dim = imp.const(idx, "indices"), shape[axis]
        if value.dtype.kind not in "iu" or value.size and not (
                -dim <= value.min() and value.max() < dim):
            raise imp.unsupported(f"constant indices {_few(value.ravel().tolist())} must be "
                                  f"integers in [-{dim}, {dim}) for axis {axis} of shape "
                                  f"{list(shape)}")
        index = imp.add_constant(np.where(value < 0, value + dim, value).astype(np.int64),
                                 imp.origin.get(idx, idx))
    else:
        index = _int64_indices(imp, idx)
    imp.emit("gather_elements", [imp.tensor(x), index], [node.output[0]], {"axis": axis})


@maps("LayerNormalization")
def _layer_norm(imp, node, attrs):
    _only(imp, attrs, {"axis": ..., "epsilon": ..., "stash_type": 1})
    _one_output(imp, node)
    x = node.input[0]
    shape = imp.type_of(x).shape
    axis = axis_in(attrs.get("axis", -1), len(shape))
    normalized = list(shape[axis:])
    if not all(type(d) is int for d in normalized):
        raise imp.unsupported(f"normalized dims {normalized} of {x!r} must be static")
    params = []
    for i, what in ((1, "scale"), (2, "bias")):
        t = _opt(node, i)
        if t is None:
            params.append(None)
            continue
        v = imp.const(t, what)
        if list(v.shape) != normalized:
            try:
                v = np.ascontiguousarray(np.broadcast_to(v, normalized))
            except ValueError:
                raise imp.unsupported(f"{what} {t!r} of shape {v.shape} does not broadcast to "
                                      f"the normalized dims {normalized}") from None
        params.append(imp.add_constant(v, imp.origin.get(t, t)))
    imp.emit("layer_norm", [imp.tensor(x), *params], [node.output[0]],
             {"normalized_shape": normalized, "eps": attrs.get("epsilon", 1e-5)})


@maps("InstanceNormalization")
def _instance_norm(imp, node, attrs):
    _only(imp, attrs, {"epsilon": ...})
    imp.emit("instance_norm", [imp.tensor(t) for t in node.input[:3]], [node.output[0]],
             {"eps": attrs.get("epsilon", 1e-5)})


@maps("GroupNormalization")
def _group_norm(imp, node, attrs):
    _only(imp, attrs, {"epsilon": ..., "num_groups": ..., "stash_type": 1})
    x, scale, bias = node.input[:3]
    groups = attrs["num_groups"]
    channels = imp.static_shape(x)[1]
    if type(groups) is not int or groups < 1 or channels % groups:
        raise imp.unsupported(f"num_groups={groups!r} must divide the {channels} channels")
    params = []
    for t in (scale, bias):
        v = imp.const(t)
        if v.shape == (groups,) and groups != channels:  # opset 18: one value per group
            v = np.repeat(v, channels // groups)
        params.append(imp.add_constant(v, imp.origin.get(t, t)))
    imp.emit("group_norm", [imp.tensor(x), *params], [node.output[0]],
             {"num_groups": groups, "eps": attrs.get("epsilon", 1e-5)})


@maps("RMSNormalization")
def _rms_norm(imp, node, attrs):
    _only(imp, attrs, {"axis": ..., "epsilon": ..., "stash_type": 1})
    x = node.input[0]
    rank = len(imp.type_of(x).shape)
    if axis_in(attrs.get("axis", -1), rank) != rank - 1:
        raise imp.unsupported(f"axis={attrs['axis']}: only the last axis is supported")
    imp.emit("rms_norm", [imp.tensor(x), imp.tensor(node.input[1])], [node.output[0]],
             {"eps": attrs.get("epsilon", 1e-5)})


# --- shape plumbing ------------------------------------------------------------------------------


@maps("Concat")
def _concat(imp, node, attrs):
    _only(imp, attrs, {"axis": ...})
    imp.emit("concat", [imp.tensor(t) for t in node.input], [node.output[0]],
             {"axis": attrs["axis"]})


def _reshape_to(imp, node, x: str, shape: list) -> None:
    symbolic = [d for d in shape if type(d) is not int]
    if len(symbolic) > 1 or (symbolic and -1 in shape):
        raise imp.unsupported(f"output shape {shape} has more than one run-time dim")
    imp.emit("reshape", [imp.tensor(x)], [node.output[0]],
             {"shape": [-1 if type(d) is not int else d for d in shape]})


@maps("Reshape")
def _reshape(imp, node, attrs):
    _only(imp, attrs, {"allowzero": ...})
    x = node.input[0]
    in_shape = imp.type_of(x).shape
    target = reshape_target(imp.shape_value(node.input[1], "shape"), in_shape,
                            attrs.get("allowzero", 0))
    if any(type(d) is not int for d in target):  # computed from a run-time shape
        written = symbolic.reshape_target(target, in_shape)
        if written is None:
            raise imp.unsupported(f"target shape {target} from input shape {in_shape} has more "
                                  f"than one run-time dim")
        target = written
    _reshape_to(imp, node, x, target)


@maps("Flatten")
def _flatten(imp, node, attrs):
    _only(imp, attrs, {"axis": ...})
    x = node.input[0]
    shape = imp.type_of(x).shape
    axis = flatten_axis(attrs.get("axis", 1), len(shape))
    if axis == 1:
        imp.emit("flatten", [imp.tensor(x)], [node.output[0]], {"start_dim": 1, "end_dim": -1})
        return
    s = imp.static_shape(x)
    _reshape_to(imp, node, x, [int(np.prod(s[:axis])), int(np.prod(s[axis:]))])


@maps("Unsqueeze", "Squeeze")
def _squeeze(imp, node, attrs):
    _only(imp, attrs, {"axes": ...})
    x = node.input[0]
    shape = list(imp.type_of(x).shape)
    axes = _opt(node, 1)
    axes = imp.const(axes, "axes") if axes else attrs.get("axes")
    axes = None if axes is None else int_vector(axes, "axes", scalar_ok=True)
    if node.op_type == "Unsqueeze":
        if axes is None:
            raise imp.unsupported("Unsqueeze without axes")
        rank = len(shape) + len(axes)
        for a in sorted(axis_in(v, rank, "axes") for v in axes):
            shape.insert(a, 1)
    else:
        drop = ({i for i, d in enumerate(shape) if d == 1} if axes is None
                else {axis_in(v, len(shape), "axes") for v in axes})
        if any(shape[i] != 1 for i in drop):
            raise imp.unsupported(f"squeezing axes {sorted(drop)} of shape {shape} (not size 1)")
        shape = [d for i, d in enumerate(shape) if i not in drop]
    _reshape_to(imp, node, x, shape)


@maps("Expand")
def _expand(imp, node, attrs):
    """Constant shape; all ones of at most x's rank change nothing (the legacy exporter's
    ``repeat`` writes one) and alias x."""
    _only(imp, attrs, {})
    x = node.input[0]
    shape = int_vector(imp.const(node.input[1], "shape"), "shape")
    imp.check_size("its Expand output", shape)  # before the shape rule multiplies it out
    if set(shape) <= {1} and len(shape) <= len(imp.type_of(x).shape):
        imp.alias(node.output[0], imp.tensor(x))
        return
    imp.emit("expand", [imp.tensor(x)], [node.output[0]], {"shape": shape})


@maps("Tile")
def _tile(imp, node, attrs):
    _only(imp, attrs, {})
    x = node.input[0]
    repeats = int_vector(imp.const(node.input[1], "repeats"), "repeats")
    shape = imp.type_of(x).shape
    imp.check_size("its Tile output", [r * d if type(d) is int else r
                                       for r, d in zip(repeats, shape)])
    if set(repeats) <= {1} and len(repeats) == len(shape):
        imp.alias(node.output[0], imp.tensor(x))
        return
    imp.emit("tile", [imp.tensor(x)], [node.output[0]], {"repeats": repeats})


@maps("Transpose")
def _transpose(imp, node, attrs):
    _only(imp, attrs, {"perm": ...})
    rank = len(imp.type_of(node.input[0]).shape)
    imp.emit("transpose", [imp.tensor(node.input[0])], [node.output[0]],
             {"perm": attrs.get("perm", list(range(rank))[::-1])})


@maps("ConstantOfShape")
def _constant_of_shape(imp, node, attrs):
    """A shape holding run-time dims (``torch.zeros(x.size(0), 3)`` under a dynamic batch; a
    constant shape was folded): ``where(mask, c, c)``, c the value over the fixed dims, and the
    mask a bool tensor that carries each run-time dim, read back from the tensor its Shape was
    taken of (``equal`` of a one-element-wide slice of it with itself)."""
    _only(imp, attrs, {"value": ...})
    dims = imp.shape_value(node.input[0], "shape")
    value = one_value(attrs.get("value", np.zeros(1, np.float32)), "value")
    if any(type(d) is int and d < 0 for d in dims):
        raise ModelFileError(f"shape {dims} has a negative dim")
    fixed = [d if type(d) is int else 1 for d in dims]
    imp.check_size("its output", fixed)
    mask = None
    for axis, d in enumerate(dims):
        if type(d) is int:
            continue
        if d not in imp.dim_source:
            raise imp.unsupported(f"shape {dims}: run-time dim {d!r} is not a dim of a tensor "
                                  f"whose Shape the model takes")
        source, at = imp.dim_source[d]
        rank = len(imp.types[source].shape)
        y = source
        if rank > 1:
            others = [a for a in range(rank) if a != at]
            y = imp.emit("slice", [y], [None], {"starts": [0] * len(others),
                                                "ends": [1] * len(others), "axes": others},
                         suffix=f".{axis}.slice")[0]
        y = imp.emit("reshape", [y], [None], {"shape": [1] * axis + [-1] + [1] * (
            len(dims) - axis - 1)}, suffix=f".{axis}.dim")[0]
        y = imp.emit("equal", [y, y], [None], suffix=f".{axis}.mask")[0]
        mask = y if mask is None else imp.emit("or", [mask, y], [None],
                                                suffix=f".{axis}.masks")[0]
    if mask is None:  # not reached: a fixed shape is folded
        raise imp.unsupported(f"shape {dims} is fixed but was not folded")
    c = imp.add_constant(np.full(fixed, value, value.dtype), f"{imp.node_name}.value")
    imp.emit("where", [mask, c, c], [node.output[0]])


@maps("Slice")
def _slice(imp, node, attrs):
    _only(imp, attrs, {})
    x = node.input[0]
    shape = imp.type_of(x).shape
    starts, ends = imp.const(node.input[1], "starts"), imp.const(node.input[2], "ends")
    axes = imp.const(_opt(node, 3), "axes") if _opt(node, 3) else None
    steps = imp.const(_opt(node, 4), "steps") if _opt(node, 4) else None
    sliced = onnx_slice([d if type(d) is int else 2 ** 62 for d in shape], starts, ends, axes,
                        steps)
    imp.emit("slice", [imp.tensor(x)], [node.output[0]],
             {"starts": [s for _, s, _, _ in sliced], "ends": [e for _, _, e, _ in sliced],
              "axes": [a for a, _, _, _ in sliced], "steps": [st for _, _, _, st in sliced]})


@maps("Split")
def _split(imp, node, attrs):
    _only(imp, attrs, {"axis": ..., "num_outputs": ...})
    x = node.input[0]
    shape = imp.type_of(x).shape
    axis = axis_in(attrs.get("axis", 0), len(shape))
    given = imp.const(_opt(node, 1), "split") if _opt(node, 1) else None
    if given is None and type(shape[axis]) is not int:
        raise imp.unsupported(f"splitting a run-time dim of {shape} without sizes")
    sizes = split_sizes(shape[axis], given, attrs.get("num_outputs"), len(node.output))
    imp.emit("split", [imp.tensor(x)], list(node.output), {"axis": axis, "sizes": sizes})


_REDUCE = {"ReduceMean": "mean", "ReduceSum": "sum", "ReduceMax": "amax", "ReduceMin": "amin",
           "ReduceProd": "prod"}


def _reduction(imp, node, attrs) -> tuple[str, dict]:
    """The input tensor and the ``axes``/``keepdim`` attributes of an ONNX Reduce*: axes from
    the input (newer opsets) or the attribute; none given: every axis."""
    _only(imp, attrs, {"axes": ..., "keepdims": ..., "noop_with_empty_axes": 0})
    x = node.input[0]
    axes = _opt(node, 1)
    axes = imp.const(axes, "axes") if axes else attrs.get("axes")
    if axes is None or not np.size(axes):
        axes = list(range(len(imp.type_of(x).shape)))
    return imp.tensor(x), {"axes": int_vector(axes, "axes", scalar_ok=True),
                           "keepdim": bool(attrs.get("keepdims", 1))}


@maps(*_REDUCE)
def _reduce(imp, node, attrs):
    x, reduce = _reduction(imp, node, attrs)
    imp.emit(_REDUCE[node.op_type], [x], [node.output[0]], reduce)


@maps("ReduceL1", "ReduceL2", "ReduceSumSquare")
def _reduce_norm(imp, node, attrs):
    """sum(abs(x)), sqrt(sum(x * x)) and sum(x * x), as onnxruntime computes them (x * x is
    inf from about 1.8e19 in float32 there too)."""
    x, reduce = _reduction(imp, node, attrs)
    if node.op_type == "ReduceL1":
        [y] = imp.emit("abs", [x], [None], suffix="/abs")
    else:
        [y] = imp.emit("mul", [x, x], [None], suffix="/square")
    if node.op_type != "ReduceL2":
        imp.emit("sum", [y], [node.output[0]], reduce)
        return
    [y] = imp.emit("sum", [y], [None], reduce, suffix="/sum")
    imp.emit("sqrt", [y], [node.output[0]])


@maps("ReduceLogSumExp")
def _reduce_log_sum_exp(imp, node, attrs):
    """m + log(sum(exp(x - m))), m the max over the axes or 0 where that is infinite (as
    torch.logsumexp and onnxruntime: -inf when all are -inf, inf when one is inf)."""
    x, reduce = _reduction(imp, node, attrs)
    dtype = imp.types[x].dtype
    if not dtype.startswith("float"):
        raise imp.unsupported(f"input of dtype {dtype}: needs a float tensor")

    def step(op, inputs, name, attrs=None):
        return imp.emit(op, inputs, [None], attrs, suffix=f"/{name}")[0]

    m = step("amax", [x], "max", {**reduce, "keepdim": True})
    big = _scalar(imp, float(np.finfo(dtypes.to_numpy(dtype)).max), x, f"{imp.node_name}.max")
    infinite = step("greater", [step("abs", [m], "abs"), big], "infinite")
    m = step("where", [infinite, _scalar(imp, 0.0, x, f"{imp.node_name}.zero"), m], "shift")
    s = step("sum", [step("exp", [step("sub", [x, m], "sub")], "exp")], "sum", reduce)
    if not reduce["keepdim"]:  # m's reduced axes are of size 1: their max drops them
        m = step("amax", [m], "squeeze", reduce)
    imp.emit("add", [step("log", [s], "log"), m], [node.output[0]])


_ARG = {"ArgMax": "argmax", "ArgMin": "argmin"}


@maps(*_ARG)
def _arg(imp, node, attrs):
    _only(imp, attrs, {"axis": ..., "keepdims": ..., "select_last_index": 0})
    imp.emit(_ARG[node.op_type], [imp.tensor(node.input[0])], [node.output[0]],
             {"axis": attrs.get("axis", 0), "keepdim": bool(attrs.get("keepdims", 1))})


def _flags(imp, attrs: dict, defaults: dict[str, int]) -> dict[str, bool]:
    """0/1 attributes (``defaults``: name -> ONNX's default) as bools; another value is
    refused."""
    out = {}
    for name, default in defaults.items():
        value = attrs.get(name, default)
        if value not in (0, 1):
            raise imp.unsupported(f"attribute {name}={value!r} must be 0 or 1")
        out[name] = bool(value)
    return out


@maps("CumSum")
def _cumsum(imp, node, attrs):
    """torch.cumsum; the axis input must be a constant."""
    _only(imp, attrs, {"exclusive": ..., "reverse": ...})
    flags = _flags(imp, attrs, {"exclusive": 0, "reverse": 0})
    x = node.input[0]
    axis = one_value(imp.const(node.input[1], "axis"), "axis").item()
    axis_in(axis, len(imp.type_of(x).shape))
    imp.emit("cumsum", [imp.tensor(x)], [node.output[0]], {"axis": axis, **flags})


@maps("TopK")
def _topk(imp, node, attrs):
    """torch.topk: values and int64 indices; k must be a constant. sorted=0 leaves the order
    open in ONNX: the sorted one is taken where the order cannot reach a graph output as it is
    (onnxruntime's differs, so the build's comparison refuses a model whose outputs depend on
    that order further down)."""
    _only(imp, attrs, {"axis": ..., "largest": ..., "sorted": ...})
    flags = _flags(imp, attrs, {"largest": 1, "sorted": 1})
    direct = [o for o in node.output if o in imp.graph_outputs]
    if not flags["sorted"] and direct:
        raise imp.unsupported(f"sorted=0 with {direct} graph output(s): the order of an "
                              f"unsorted result is onnxruntime's own (only the sorted one is "
                              f"computed)")
    x = node.input[0]
    k = one_value(imp.const(node.input[1], "k"), "k").item()
    if type(k) is not int or k < 0:
        raise ModelFileError(f"k must be an integer >= 0, got {k!r}")
    if k == 0:
        raise imp.unsupported("k=0 (an empty result) is not supported")
    axis = attrs.get("axis", -1)
    axis_in(axis, len(imp.type_of(x).shape))
    imp.emit("topk", [imp.tensor(x)], [o or None for o in node.output],
             {"k": k, "axis": axis, "largest": flags["largest"]})


@maps("GlobalAveragePool")
def _global_avg(imp, node, attrs):
    _only(imp, attrs, {})
    rank = len(imp.type_of(node.input[0]).shape)
    imp.emit("mean", [imp.tensor(node.input[0])], [node.output[0]],
             {"axes": list(range(2, rank)), "keepdim": True})


@maps("GlobalMaxPool")
def _global_max(imp, node, attrs):
    """``amax`` over every spatial axis, keepdim. A nan in a plane gives nan, as torch and as
    ``max_pool``; onnxruntime's kernel starts from the lowest finite float and its nan result
    depends on vector lanes, so a plane of only -inf gives -inf here and -3.4e38 there."""
    _only(imp, attrs, {})
    rank = len(imp.type_of(node.input[0]).shape)
    if rank < 3:
        raise imp.unsupported(f"input of rank {rank}: needs (N, C, *spatial)")
    imp.emit("amax", [imp.tensor(node.input[0])], [node.output[0]],
             {"axes": list(range(2, rank)), "keepdim": True})


@maps("GlobalLpPool")
def _global_lp(imp, node, attrs):
    """(sum |x|^p)^(1/p) over every spatial axis, keepdim, as onnxruntime's kernel: ``abs``,
    ``pow`` by p, ``sum``, ``pow`` by 1/p (formed in float32, as there); p=1 needs no ``pow``.
    An inf gives inf and a nan nan; a sum that overflows gives inf there too. 1, 2 or 3
    spatial axes of a float input; p an integer >= 1."""
    _only(imp, attrs, {"p": ...})
    p = attrs.get("p", 2)
    if type(p) is not int or p < 1:
        raise imp.unsupported(f"attribute p={p!r}: only an integer p >= 1 is supported")
    x = node.input[0]
    t = imp.type_of(x)
    if not 3 <= len(t.shape) <= 5:
        raise imp.unsupported(f"input of shape {list(t.shape)}: needs (N, C, *spatial) with 1, "
                              f"2 or 3 spatial axes")
    if not t.dtype.startswith("float"):
        raise imp.unsupported(f"input {x!r} of dtype {t.dtype}: needs a float tensor")
    out = node.output[0]
    x_t = imp.tensor(x)
    [y] = imp.emit("abs", [x_t], [None], suffix="/abs")
    if p > 1:
        [y] = imp.emit("pow", [y, _scalar(imp, float(p), x_t, f"{out}.p")], [None],
                       suffix="/pow")
    reduce = {"axes": list(range(2, len(t.shape))), "keepdim": True}
    [y] = imp.emit("sum", [y], [None if p > 1 else out], reduce, suffix="/sum" if p > 1 else "")
    if p > 1:
        root = np.float32(1) / np.float32(p)
        imp.emit("pow", [y, _scalar(imp, float(root), x_t, f"{out}.root")], [out])


@maps("MaxPool", "AveragePool")
def _pool(imp, node, attrs):
    """``max_pool`` / ``avg_pool`` over the 1, 2 or 3 spatial axes (torch's pool1d/2d/3d, and
    adaptive pooling to a size dividing the input as the legacy exporter writes it); MaxPool's
    Indices, where read, by :func:`_pool_indices`."""
    _only(imp, attrs, {"auto_pad": "NOTSET", "kernel_shape": ..., "strides": ..., "pads": ...,
                       "dilations": ..., "ceil_mode": ..., "count_include_pad": ...,
                       "storage_order": 0})
    indices = node.op_type == "MaxPool" and len(node.output) > 1 and node.output[1] and (
        node.output[1] in imp.consumers or node.output[1] in imp.graph_outputs)
    if not indices:
        _one_output(imp, node)
    kernel = attrs["kernel_shape"]
    spatial = len(kernel)
    pads = _pads(imp, attrs, spatial, None, kernel, None, None)
    common = {"kernel_size": kernel, "stride": attrs.get("strides", [1] * spatial),
              "padding": pads, "ceil_mode": bool(attrs.get("ceil_mode", 0))}
    if node.op_type == "MaxPool":
        op, extra = "max_pool", {"dilation": attrs.get("dilations", [1] * spatial)}
    else:
        if attrs.get("dilations", [1] * spatial) != [1] * spatial:
            raise imp.unsupported(f"dilations {attrs['dilations']} on AveragePool")
        op, extra = "avg_pool", {"count_include_pad": bool(attrs.get("count_include_pad", 0))}
    if indices:
        _pool_indices(imp, node, {**common, **extra})
        return
    imp.emit(op, [imp.tensor(node.input[0])], [node.output[0]], {**common, **extra})


def _pool_indices(imp, node, attrs: dict) -> None:
    """MaxPool with its Indices output: ``max_pool_with_indices`` gives each index within its
    (n, c) plane; ONNX's count over the whole tensor, so (n * C + c) * plane is added: a
    constant, or with a run-time batch the running count of the (n, c) planes (``cumsum`` of
    ones shaped like one index per plane)."""
    shape = list(imp.type_of(node.input[0]).shape)
    if not all(type(d) is int for d in shape[1:]):
        raise imp.unsupported(f"input shape {shape}: MaxPool indices need the channel and "
                              f"spatial dims static")
    y, index = node.output[:2]
    [_, plane_index] = imp.emit("max_pool_with_indices", [imp.tensor(node.input[0])],
                                [y or None, None], attrs, suffix="/plane")
    plane, channels, ones = math.prod(shape[2:]), shape[1], [1] * (len(shape) - 2)
    if type(shape[0]) is int:
        offset = imp.add_constant(np.arange(shape[0] * channels, dtype=np.int64).reshape(
            shape[:2] + ones) * plane, f"{index}.offset")
    else:
        first = imp.emit("slice", [plane_index], [None], {
            "starts": [0] * len(ones), "ends": ones, "axes": list(range(2, len(shape)))},
            suffix="/first")[0]
        [every] = imp.emit("equal", [first, first], [None], suffix="/every")  # int64: all true
        [count] = imp.emit("cast", [every], [None], {"dtype": "int64"}, suffix="/one")
        [count] = imp.emit("reshape", [count], [None], {"shape": [-1]}, suffix="/flat")
        [count] = imp.emit("cumsum", [count], [None], {"axis": 0, "exclusive": True},
                           suffix="/count")
        [count] = imp.emit("mul", [count, imp.add_constant(np.array(plane, np.int64),
                                                           f"{index}.plane")], [None],
                           suffix="/offset")
        [offset] = imp.emit("reshape", [count], [None], {"shape": [-1, channels, *ones]},
                            suffix="/offsets")
    imp.emit("add", [plane_index, offset], [index])


@maps("Pad")
def _pad(imp, node, attrs):
    _only(imp, attrs, {"mode": ...})
    mode = attrs.get("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise imp.unsupported(f"mode={mode!r} is not supported (constant, reflect, edge, wrap)")
    x = node.input[0]
    rank = len(imp.type_of(x).shape)
    pads = int_vector(imp.const(node.input[1], "pads"), "pads")
    value = _opt(node, 2)
    value = 0.0 if value is None else float(one_value(imp.const(value, "constant_value"),
                                                      "constant_value"))
    axes = _opt(node, 3)
    axes = (list(range(rank)) if axes is None else
            [axis_in(a, rank, "axes") for a in int_vector(imp.const(axes, "axes"), "axes")])
    if len(pads) != 2 * len(axes) or any(p < 0 for p in pads):
        raise imp.unsupported(f"pads {_few(pads)} must be {2 * len(axes)} values >= 0 (cropping "
                              f"by negative pads is not supported)")
    pairs = [[0, 0] for _ in range(rank)]
    for i, a in enumerate(axes):
        pairs[a] = [pads[i], pads[i + len(axes)]]
    if mode == "wrap":
        _wrap(imp, node, pairs)
        return
    imp.emit("pad", [imp.tensor(x)], [node.output[0]],
             {"pads": pairs, "mode": mode, "value": value})


def _wrap(imp, node, pairs: list) -> None:
    """Pad's wrap mode (torch's circular padding), axis by axis: the last ``before`` and the
    first ``after`` entries of the axis concatenated around it; each pad at most the dim."""
    x = node.input[0]
    shape = imp.type_of(x).shape
    y = imp.tensor(x)
    padded = [a for a, (before, after) in enumerate(pairs) if before or after]
    if not padded:
        imp.emit("identity", [y], [node.output[0]])
    for a in padded:
        (before, after), d = pairs[a], shape[a]
        if type(d) is not int or max(before, after) > d:
            raise imp.unsupported(f"wrap pads {pairs[a]} on axis {a} of input shape "
                                  f"{list(shape)}: each must be at most the dim, a static one")
        parts = [imp.emit("slice", [y], [None], {"starts": [start], "ends": [end], "axes": [a]},
                          suffix=f"/{a}.{side}")[0]
                 for start, end, side, n in ((d - before, d, "before", before),
                                             (0, after, "after", after)) if n]
        parts.insert(1 if before else 0, y)
        [y] = imp.emit("concat", parts, [node.output[0] if a == padded[-1] else None],
                       {"axis": a}, suffix="" if a == padded[-1] else f"/{a}")


# LSTM, GRU and RNN (unrolled over time), the spatial resampling ops (Resize, DepthToSpace,
# SpaceToDepth, GridSample), the masks (Trilu, OneHot, EyeLike), the scatters (ScatterND,
# ScatterElements), the normalizations other exporters write (LRN, LpNormalization,
# MeanVarianceNormalization), the quantized models' ops, the activations beyond the ones
# here (Softsign, ThresholdedRelu, Shrink, Hardmax) and the spectral ops (window functions,
# DFT, STFT; Compress) and the bit operations (BitwiseAnd/Or/Xor/Not, BitShift, the logical Xor)
# live in modules of their own, which register them here
importlib.import_module(".recurrent", __package__)
importlib.import_module(".spatial", __package__)
importlib.import_module(".masks", __package__)
importlib.import_module(".scatter", __package__)
importlib.import_module(".norms", __package__)
importlib.import_module(".quantize", __package__)  # QDQ models: fake quantization in float32
importlib.import_module(".dynamic", __package__)  # quantize_dynamic's integer ops
importlib.import_module(".activations", __package__)
importlib.import_module(".signal", __package__)  # Compress, windows, DFT, STFT
importlib.import_module(".bitwise", __package__)  # Bitwise*, BitShift, Xor
MAPPERS["Einsum"] = einsum  # the decomposition has a module of its own
