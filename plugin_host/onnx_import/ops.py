"""The op mapping table: each supported ONNX op and the ABI node(s) it becomes.

One function per ONNX op, registered in :data:`MAPPERS` by :func:`maps`. A mapper reads the
node's attributes, refuses any value it does not map exactly (``imp.unsupported`` names the
node and the op), and emits nodes of the ABI op table through ``imp.emit``. Layers come out as
layer ops wherever torch's export of a layer has a one-node form (Conv, ConvTranspose,
BatchNormalization, Gemm and MatMul on a constant weight as Linear, the normalizations, Gather
on a constant table as Embedding); everything else maps onto the glue ops.

This module holds the registry, the helpers the mapping modules share and the element-wise
ops; the rest live in modules by kind, imported at the end: :mod:`.layers`, :mod:`.gather`,
:mod:`.norms`, :mod:`.shapes`, :mod:`.pads`, :mod:`.reduce`, :mod:`.pool`, and the ops of
particular exporters and model kinds (:mod:`.recurrent`, :mod:`.spatial`, :mod:`.masks`, ...).
"""

from __future__ import annotations

import importlib
import math
from typing import Any, Callable

import numpy as np

from abi import dtypes
from abi.ops import dims as dim_math

from ..errors import ModelFileError
from .einsum import einsum
from .fold import floor_mod_of_floats, one_value
from .reader import ONNX_DTYPES, element_type
from .run_time_sizes import filled

__all__ = ["FOLDED_BECAUSE", "MAPPERS", "ON_RUN_TIME_DIMS", "REFUSED", "WALKED",
           "supported_ops", "where_supported"]

Mapper = Callable[[Any, Any, dict], None]
MAPPERS: dict[str, Mapper] = {}
#: Ops refused with what to do instead (the refusal says it), from the modules that know why
REFUSED: dict[str, str] = dict.fromkeys(
    ("Bernoulli", "Multinomial", "RandomNormal", "RandomNormalLike", "RandomUniform",
     "RandomUniformLike"),
    "random numbers, which a model exported in eval mode does not draw: its dropout exports "
    "as nothing")
#: Ops folded only (constant inputs) by design -> why, said where an input is computed at run
#: time (:mod:`.value_shaped`)
FOLDED_BECAUSE: dict[str, str] = {}
#: Ops otherwise folded only (constant inputs), taken where a run-time input is a dim known at
#: import: each returns False where it does not apply (the node is then refused as before)
ON_RUN_TIME_DIMS: dict[str, Callable[[Any, Any, dict], bool]] = {}


#: Ops the walk (:mod:`.convert`) takes itself, not through a mapper
WALKED = frozenset({"Constant", "Shape", "Size", "If", "Loop", "Scan"})


def supported_ops(mappers=None) -> tuple[list[str], list[str]]:
    """The op types that map (``mappers``, by default every one, and :data:`WALKED`), sorted,
    and those folded only (constant inputs) besides; ``com.microsoft.`` ones by that name."""
    from .fold import FOLDERS

    mapped = sorted(set(MAPPERS if mappers is None else mappers) | WALKED)
    return mapped, sorted(set(FOLDERS) - set(mapped))


def where_supported(mappers=None) -> str:
    """For a refusal of an op: how many op types map and where they are listed (the list
    itself is thousands of characters)."""
    mapped, folded = supported_ops(mappers)
    return (f"{len(mapped)} op types map, {len(folded)} more on constants only: "
            f"'plugin-host build --list-onnx-ops' lists them")


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


def _scalar(imp, value: float, like: str, origin: str) -> str:
    return imp.add_constant(np.asarray(value, dtypes.to_numpy(imp.types[like].dtype)), origin)


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


@maps("Det")
def _det(imp, node, attrs):
    """torch.linalg.det: ``det`` over the last two axes (a matrix holding a nan or an infinity
    gives nan, where onnxruntime's LU gives nan or an infinity by the pivots)."""
    _only(imp, attrs, {})
    imp.emit("det", [imp.tensor(node.input[0])], [node.output[0]])


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
    if not fmod and imp.type_of(node.input[0]).dtype.startswith("float"):
        floor_mod_of_floats(imp.opset)
    imp.emit("mod", [imp.tensor(node.input[0]), imp.tensor(node.input[1])], [node.output[0]],
             {"fmod": bool(fmod)})


@maps("Where")
def _where(imp, node, attrs):
    """``where``; a constant condition that picks one side everywhere (a switch fixed at
    build with ``--input-value``) is that side, where the others broadcast into its shape."""
    _only(imp, attrs, {})
    cond, a, b = node.input[:3]
    picks = imp.const(cond, "condition") if imp.is_const(cond) else None
    side = None if picks is None or not picks.size else (
        a if picks.all() else b if not picks.any() else None)
    if side is not None and not imp.is_const(side):
        shape = imp.type_of(side).shape
        if all(_broadcasts_into(imp.type_of(n).shape, shape) for n in (cond, a, b)):
            imp.alias(node.output[0], imp.tensor(side))
            return
    imp.emit("where", [imp.tensor(n) for n in node.input[:3]], [node.output[0]])


def _broadcasts_into(small, big) -> bool:
    """Whether ``small`` broadcasts to ``big`` leaving it as it is."""
    return len(small) <= len(big) and all(
        s == 1 or dim_math.known_equal(s, d) for s, d in zip(reversed(small), reversed(big)))


@maps("PRelu")
def _prelu(imp, node, attrs):
    _only(imp, attrs, {})
    imp.emit("prelu", [imp.tensor(node.input[0]), imp.tensor(node.input[1])],
             [node.output[0]])


#: Integer bases onnxruntime's Pow takes (it has no kernel for the narrower ones)
INT_POW_BASES = ("int32", "int64")
#: Integer exponents onnxruntime's Pow takes of a float base, computed at run time: cast to
#: the base's dtype (exact up to 2**24 in magnitude; onnxruntime computes in float64, so past
#: that (-1) ** e may take the other sign, and any other base overflows or underflows alike)
INT_POW_EXPONENTS = ("int32", "int64")


@maps("Pow")
def _pow(imp, node, attrs):
    """a ** b; a constant exponent of another dtype (exporters write ``x ** 2`` with an int64
    or float64 2) takes the base's, as onnxruntime computes it; an int32 or int64 exponent
    computed at run time is cast to it (:data:`INT_POW_EXPONENTS`). An integer base: see
    :func:`_integer_pow`."""
    _only(imp, attrs, {})
    base = imp.tensor(node.input[0])
    exponent = node.input[1]
    want = imp.types[base].dtype
    if want in dtypes.INT_DTYPES:
        _integer_pow(imp, node, base, want)
        return
    have = imp.type_of(exponent).dtype
    if imp.is_const(exponent) and have != want:
        value = imp.const(exponent, "exponent")
        cast = value.astype(dtypes.to_numpy(want))
        if not np.array_equal(cast, value):
            raise imp.unsupported(f"exponent {value.tolist()!r:.60} is not exact in {want}")
        exponent_t = imp.add_constant(cast, imp.origin.get(exponent, exponent))
    elif have in INT_POW_EXPONENTS:  # computed at run time: cast to the base's dtype
        [exponent_t] = imp.emit("cast", [imp.tensor(exponent)], [None], {"dtype": want},
                                suffix="/exponent")
    else:
        exponent_t = imp.tensor(exponent)
    imp.emit("pow", [base, exponent_t], [node.output[0]])


def _integer_pow(imp, node, base: str, dtype: str) -> None:
    """Pow of an int32 or int64 base (torch's ``x ** 2`` of an integer tensor) by a constant
    exponent of one whole value ``e >= 0`` (any integer or float dtype; one value, of at most
    the base's rank): the exact power, by ``mul`` (squares and products), 1 for ``e = 0``.
    onnxruntime computes it in float64 and truncates: the two agree while the power fits
    the dtype (int64: up to 2**53, float64's integers; past that onnxruntime rounds, and an
    overflow, where this wraps, is the platform's conversion of an out-of-range float there).
    A run-time, negative or fractional exponent, and a narrower base (onnxruntime has no
    kernel for it), are refused."""
    if dtype not in INT_POW_BASES:
        raise imp.unsupported(f"base {node.input[0]!r} of dtype {dtype}: onnxruntime, the "
                              f"reference, takes an integer Pow of int32 or int64 only")
    name = node.input[1]
    if not imp.is_const(name):
        raise imp.unsupported(f"exponent {name!r} computed at run time of an integer base "
                              f"{node.input[0]!r}: only a constant one is mapped (the "
                              f"backends compute no float64, which onnxruntime's integer "
                              f"Pow takes)")
    value = imp.const(name, "exponent")
    rank = len(imp.types[base].shape)
    if value.dtype == np.bool_ or value.dtype.kind not in "iuf":
        raise ModelFileError(f"exponent {name!r} of dtype {value.dtype}: Pow takes a number")
    flat = value.reshape(-1)
    if flat.size != 1 or value.ndim > rank:
        raise imp.unsupported(f"exponent {name!r} of shape {list(value.shape)}: an integer "
                              f"base's exponent must be one value, of rank at most "
                              f"{rank}")
    e = flat[0].item()
    if not (math.isfinite(e) and e >= 0 and e == math.floor(e)):
        raise imp.unsupported(f"exponent {e} of an integer base: only a whole exponent >= 0 "
                              f"is mapped (onnxruntime truncates a fraction of a power, and "
                              f"0 ** -1 is an out-of-range float to it)")
    e = int(e)
    if e == 0:
        [same] = imp.emit("equal", [base, base], [None], suffix="/every")
        imp.emit("cast", [same], [node.output[0]], {"dtype": dtype})
        return
    power, square, k = None, base, 0
    while True:
        if e >> k & 1:
            last = e >> (k + 1) == 0
            power = square if power is None else imp.emit(
                "mul", [power, square], [node.output[0] if last else None],
                suffix="" if last else f"/times{k}")[0]
            if last:
                break
        [square] = imp.emit("mul", [square, square], [None], suffix=f"/square{k + 1}")
        k += 1
    if imp.values.get(node.output[0]) != power:  # x ** 1, or a power of 2: no last product
        imp.alias(node.output[0], power)


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
    """Inference: the input itself (ratio is ignored), and the mask all true. training_mode
    must be absent or a constant false, or true with a constant ratio of 0 (nothing dropped:
    the same, as ONNX's reference and onnxruntime give it)."""
    _only(imp, attrs, {"seed": ...})
    training = _opt(node, 2)
    if training is not None:
        if not imp.is_const(training):
            raise imp.unsupported(f"training_mode {training!r} is computed at run time (only "
                                  f"inference, a constant false, is supported)")
        if bool(one_value(imp.const(training, "training_mode"), "training_mode")):
            ratio = _opt(node, 1)
            if ratio is not None and not imp.is_const(ratio):
                raise imp.unsupported(f"training_mode is true and the ratio {ratio!r} is "
                                      f"computed at run time (a constant 0 drops nothing)")
            value = 0.5 if ratio is None else float(one_value(imp.const(ratio, "ratio"),
                                                              "ratio"))
            if value != 0.0:
                raise imp.unsupported(f"training_mode is true with ratio {value:g}: dropping is "
                                      f"random (inference, or a ratio of 0, is supported)")
    x = imp.tensor(node.input[0])
    if len(node.output) > 1 and node.output[1]:
        filled(imp, list(imp.types[x].shape), np.ones((), bool), node.output[1])
    imp.emit("identity", [x], [node.output[0]])


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
    if "round_mode" in attrs:  # opset 24's
        raise imp.unsupported(f"attribute round_mode={attrs['round_mode']!r}: it applies only "
                              f"to a cast to float8e8m0, a dtype the ABI does not have "
                              f"(onnxruntime refuses it on any other cast)")
    _only(imp, attrs, {"to": ..., "saturate": ...})
    if node.op_type == "CastLike":
        to = imp.type_of(node.input[1]).dtype
    else:
        to = ONNX_DTYPES.get(attrs["to"])
        if to is None:
            raise imp.unsupported(f"cast to ONNX element type {element_type(attrs['to'])} (not "
                                  f"an ABI dtype)")
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


# the layer ops, the gathers, the normalizations, the shape plumbing, the reductions and the
# pooling ops; then LSTM, GRU and RNN (unrolled over time), the spatial resampling ops (Resize,
# DepthToSpace, SpaceToDepth, GridSample, DeformConv, RoiAlign, MaxRoiPool), the masks (Trilu,
# OneHot, EyeLike), the scatters (ScatterND, ScatterElements), the quantized models' ops, the
# activations beyond the ones here (Softsign, ThresholdedRelu, Shrink, Hardmax), the spectral ops
# (window functions, DFT, STFT; Compress), the bit operations (BitwiseAnd/Or/Xor/Not, BitShift, the
# logical Xor), the sequence ops (sequences known at import) and Attention: each module registers
# its mappers here
importlib.import_module(".layers", __package__)
importlib.import_module(".gather", __package__)
importlib.import_module(".norms", __package__)
importlib.import_module(".shapes", __package__)
importlib.import_module(".pads", __package__)
importlib.import_module(".reduce", __package__)
importlib.import_module(".pool", __package__)
importlib.import_module(".recurrent", __package__)
importlib.import_module(".resize", __package__)
importlib.import_module(".spatial", __package__)
importlib.import_module(".deform", __package__)  # DeformConv, through GridSample
importlib.import_module(".roi_align", __package__)  # RoiAlign, through GridSample
importlib.import_module(".roi_pool", __package__)  # MaxRoiPool, through run-time masks
importlib.import_module(".masks", __package__)
importlib.import_module(".scatter", __package__)
importlib.import_module(".quantize", __package__)  # QDQ models: fake quantization in float32
importlib.import_module(".dynamic", __package__)  # quantize_dynamic's integer ops
importlib.import_module(".qlinear", __package__)  # QLinearConv, QLinearMatMul
importlib.import_module(".qoperator", __package__)  # com.microsoft's QLinearAdd, QGemm, ...
importlib.import_module(".qsoftmax", __package__)  # com.microsoft's QLinearSoftmax
importlib.import_module(".matmul_to_float", __package__)  # com.microsoft's DynamicQuantizeMatMul
importlib.import_module(".quantized_lstm", __package__)  # com.microsoft's DynamicQuantizeLSTM
importlib.import_module(".fused", __package__)  # com.microsoft's FusedConv, FusedGemm, ...
importlib.import_module(".bert", __package__)  # com.microsoft's Attention, EmbedLayerNorm...
importlib.import_module(".weight_only", __package__)  # com.microsoft's MatMulNBits
importlib.import_module(".activations", __package__)
importlib.import_module(".signal", __package__)  # Compress, windows, DFT, STFT
importlib.import_module(".tfidf", __package__)  # TfIdfVectorizer of integer tokens
importlib.import_module(".bitwise", __package__)  # Bitwise*, BitShift, Xor
importlib.import_module(".sequence", __package__)  # sequences known at import, as lists
importlib.import_module(".value_shaped", __package__)  # NonZero, Unique: folded only
importlib.import_module(".attention", __package__)  # opset 23's Attention, decomposed
MAPPERS["Einsum"] = einsum  # the decomposition has a module of its own
