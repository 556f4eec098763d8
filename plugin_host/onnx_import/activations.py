"""ONNX activations other exporters write (tf2onnx, keras2onnx, older toolchains), as glue ops:
Softsign (``x * (1 / (1 + |x|))``, onnxruntime's rounding), ThresholdedRelu (``where(x >
alpha, x, 0)``), Shrink (``x + bias`` below ``-lambd``, ``x - bias`` above ``lambd``, else 0)
Hardmax (1 at the first maximum along the axis: ``equal(argmax, arange)`` cast to x's dtype),
opset 24's Swish (``x * sigmoid(alpha * x)``) and opset 28's SwiGLU (``Swish(A) * B``).
Registered in
:data:`.ops.MAPPERS` on import; Softsign, ThresholdedRelu and Shrink of a constant fold
(:func:`.fold.register`).

A nan gives nan in Softsign and 0 in ThresholdedRelu and Shrink, as onnxruntime. Hardmax puts
its 1 at the first nan along the axis (as ``one_hot(argmax(x))`` in torch and numpy):
onnxruntime's own result on a row holding a nan depends on where the nan falls in its vector
lanes (the row's first entry nan gives all zeros, a later one is mostly skipped), so no
mapping can follow it; rows without nan agree exactly (ties: the first maximum).
"""

from __future__ import annotations

import numpy as np

from ..errors import ModelFileError
from .fold import axis_in
from .fold import register as register_fold
from .ops import _finite_attr, _only, _scalar, maps


def _float_input(imp, node) -> str:
    """The node's one input, which must be a float tensor."""
    x = node.input[0]
    dtype = imp.type_of(x).dtype
    if not dtype.startswith("float"):
        raise imp.unsupported(f"input of dtype {dtype}: needs a float tensor")
    return imp.tensor(x)


def _softsign(x: np.ndarray) -> np.ndarray:
    one = np.ones((), x.dtype)
    return (x * (one / (one + np.abs(x)))).astype(x.dtype)


def _thresholded_relu(x: np.ndarray, alpha: float) -> np.ndarray:
    return np.where(x > np.asarray(alpha, x.dtype), x, np.zeros((), x.dtype))


def _shrink(x: np.ndarray, lambd: float, bias: float) -> np.ndarray:
    lambd, bias = np.asarray(lambd, x.dtype), np.asarray(bias, x.dtype)
    return np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, np.zeros((), x.dtype)))


register_fold("Softsign", lambda ins, a, cap: [_softsign(ins[0])])
register_fold("ThresholdedRelu",
              lambda ins, a, cap: [_thresholded_relu(ins[0], float(a.get("alpha", 1.0)))])
register_fold("Shrink", lambda ins, a, cap: [
    _shrink(ins[0], float(a.get("lambd", 0.5)), float(a.get("bias", 0.0)))])


@maps("Softsign")
def _softsign_map(imp, node, attrs):
    """``mul(x, reciprocal(add(abs(x), 1)))``: onnxruntime's rounding, which differs from
    ``x / (1 + |x|)`` in the last bit of about one value in five (an infinite x gives nan)."""
    _only(imp, attrs, {})
    x = _float_input(imp, node)
    [a] = imp.emit("abs", [x], [None], suffix="/abs")
    [d] = imp.emit("add", [a, _scalar(imp, 1.0, x, f"{imp.node_name}.one")], [None],
                   suffix="/denominator")
    [r] = imp.emit("reciprocal", [d], [None], suffix="/reciprocal")
    imp.emit("mul", [x, r], [node.output[0]])


@maps("ThresholdedRelu")
def _thresholded_relu_map(imp, node, attrs):
    """``where(x > alpha, x, 0)``; alpha (default 1.0) finite."""
    _only(imp, attrs, {"alpha": ...})
    alpha = _finite_attr(imp, attrs, "alpha", 1.0)
    x = _float_input(imp, node)
    [above] = imp.emit("greater", [x, _scalar(imp, alpha, x, f"{imp.node_name}.alpha")], [None],
                       suffix="/above")
    imp.emit("where", [above, x, _scalar(imp, 0.0, x, f"{imp.node_name}.zero")],
             [node.output[0]])


@maps("Shrink")
def _shrink_map(imp, node, attrs):
    """``where(x < -lambd, x + bias, where(x > lambd, x - bias, 0))``; lambd (default 0.5) and
    bias (default 0.0) finite, x a float tensor."""
    _only(imp, attrs, {"lambd": ..., "bias": ...})
    lambd = _finite_attr(imp, attrs, "lambd", 0.5)
    bias = _finite_attr(imp, attrs, "bias", 0.0)
    x = _float_input(imp, node)
    name = imp.node_name

    b = _scalar(imp, bias, x, f"{name}.bias")
    below = imp.step("less", [x, _scalar(imp, -lambd, x, f"{name}.low")], "below")
    above = imp.step("greater", [x, _scalar(imp, lambd, x, f"{name}.high")], "above")
    upper = imp.step("where", [above, imp.step("sub", [x, b], "minus"),
                               _scalar(imp, 0.0, x, f"{name}.zero")], "upper")
    imp.emit("where", [below, imp.step("add", [x, b], "plus"), upper], [node.output[0]])


@maps("Hardmax")
def _hardmax_map(imp, node, attrs):
    """1 at the first maximum along ``axis`` (default -1), 0 elsewhere: ``argmax`` (keepdim)
    compared with a constant ``arange`` along the axis, whose dim must be static, and cast to
    x's dtype."""
    _only(imp, attrs, {"axis": ...})
    x = _float_input(imp, node)
    shape = list(imp.type_of(node.input[0]).shape)
    axis = axis_in(attrs.get("axis", -1), len(shape))
    d = shape[axis]
    if type(d) is not int or d < 1:
        raise imp.unsupported(f"input shape {shape}: the dim of axis {axis} must be static and "
                              f">= 1")
    [index] = imp.emit("argmax", [x], [None], {"axis": axis, "keepdim": True},
                       suffix="/argmax")
    positions = imp.add_constant(
        np.arange(d, dtype=np.int64).reshape([d] + [1] * (len(shape) - 1 - axis)),
        f"{imp.node_name}.arange")
    [hit] = imp.emit("equal", [index, positions], [None], suffix="/equal")
    imp.emit("cast", [hit], [node.output[0]], {"dtype": imp.types[x].dtype})


def _swish(imp, x: str, alpha: float, out: str | None, suffix: str = "") -> str:
    """``x * sigmoid(alpha * x)`` (``alpha`` 1: ``x * sigmoid(x)``, as torch's SiLU)."""
    gate = x
    if alpha != 1.0:
        [gate] = imp.emit("mul", [x, _scalar(imp, alpha, x, f"{imp.node_name}.alpha")], [None],
                          suffix=f"/{suffix}alpha")
    [sig] = imp.emit("sigmoid", [gate], [None], suffix=f"/{suffix}sigmoid")
    return imp.emit("mul", [x, sig], [out], suffix=f"/{suffix}swish" if out is None else "")[0]


@maps("Swish")
def _swish_map(imp, node, attrs):
    """Opset 24: ``x * sigmoid(alpha * x)``; alpha (default 1.0) finite, x a float tensor."""
    _only(imp, attrs, {"alpha": ...})
    _swish(imp, _float_input(imp, node), _finite_attr(imp, attrs, "alpha", 1.0),
           node.output[0])


@maps("SwiGLU")
def _swiglu_map(imp, node, attrs):
    """Opset 28: ``Swish(A) * B`` (Llama's gated MLP); A and B float tensors of one shape, as
    the spec has it (no broadcasting)."""
    _only(imp, attrs, {"alpha": ...})
    alpha = _finite_attr(imp, attrs, "alpha", 1.0)
    a, b = node.input[:2]
    shapes = [list(imp.type_of(t).shape) for t in (a, b)]
    if shapes[0] != shapes[1] or imp.type_of(a).dtype != imp.type_of(b).dtype:
        raise ModelFileError(f"A {a!r} ({imp.type_of(a).dtype} {shapes[0]}) and B {b!r} "
                             f"({imp.type_of(b).dtype} {shapes[1]}) must be of one dtype and "
                             f"shape: SwiGLU does not broadcast")
    gate = _swish(imp, _float_input(imp, node), alpha, None, "gate_")
    imp.emit("mul", [gate, imp.tensor(b)], [node.output[0]])
