"""ONNX's normalizations. The layer set's: LayerNormalization, InstanceNormalization,
GroupNormalization and RMSNormalization (``layer_norm``, ``instance_norm``, ``group_norm``,
``rms_norm``); LayerNormalization's Mean and InvStdDev outputs, and RMSNormalization over more
than the last axis or with a scale that broadcasts, in glue ops (``mean``, ``sqrt``, ...) as
ONNX's definitions of the two compute them. And those that exporters other than torch's write
as one node (tf2onnx, keras2onnx, caffe2 and older toolchains): LRN, LpNormalization and
MeanVarianceNormalization, each mapped onto glue ops as onnxruntime's CPU kernels compute them,
down to their handling of zero norms, nan and inf. Registered in :data:`.ops.MAPPERS` on
import.

torch writes ``F.local_response_norm`` as a Pad and a 3-D AveragePool instead, which map one to
one (:mod:`.shapes`, :mod:`.pool`); an LRN node maps here.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ModelFileError
from .fold import axis_in, int_vector
from .ops import _only, _opt, _scalar, maps

# --- the layer set's normalizations --------------------------------------------------------------


def _wanted(imp, node, i: int) -> str | None:
    """The node's output ``i`` if it is given and read by another node or a graph output,
    else None."""
    name = node.output[i] if len(node.output) > i else ""
    return name if name and (name in imp.consumers or name in imp.graph_outputs) else None


def _epsilon(imp, attrs: dict, like: str) -> str:
    """The ``epsilon`` attribute (finite) as a float32 scalar constant."""
    eps = _float_attr(imp, attrs, "epsilon", 1e-5, False)
    return _scalar(imp, np.float32(eps), like, f"{imp.node_name}.epsilon")


def _broadcasts(imp, what: str, name: str, shape: list, x_shape: list, axis: int) -> None:
    """Refuse ``shape`` (of input ``name``) unless it broadcasts to the normalized dims
    ``x_shape[axis:]`` (aligned at the end; each dim 1 or the same dim, a run-time one by its
    name), leading dims of 1 up to x's rank included; one that would vary over the dims before
    ``axis`` (onnxruntime takes it, the ONNX spec does not) is refused."""
    normalized = x_shape[axis:]
    lead = len(shape) - len(normalized)
    if len(shape) > len(x_shape) or any(s != 1 for s in shape[:max(lead, 0)]) or any(
            s != 1 and s != n for s, n in zip(reversed(shape), reversed(normalized))):
        raise imp.unsupported(f"{what} {name!r} of shape {tuple(shape)} does not broadcast to "
                              f"the normalized dims {normalized}")


@maps("LayerNormalization")
def _layer_norm(imp, node, attrs):
    """``layer_norm`` over the dims from ``axis`` (static). The optional outputs Mean and
    InvStdDev, where read or graph outputs, are computed beside it in float32 (``stash_type``
    1, the only one taken; float16 and float64 models are imported as float32), their shape
    x's with the normalized dims 1: ``mean`` (keepdim), then ``sub``, ``mul``, ``mean``,
    ``add`` epsilon, ``sqrt``, ``reciprocal``; one named but read by nothing is not computed
    (onnxruntime forms the variance as mean(x * x) - mean * mean in one pass over a short
    slice; this two-pass one agrees with it within the default tolerance while the mean stays
    below about a thousand times the spread, beyond which onnxruntime's rounding dominates)."""
    _only(imp, attrs, {"axis": ..., "epsilon": ..., "stash_type": 1})
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
    mean_out, inv_out = _wanted(imp, node, 1), _wanted(imp, node, 2)
    if mean_out is None and inv_out is None:
        return
    x_t = imp.tensor(x)
    reduce = {"axes": list(range(axis, len(shape))), "keepdim": True}
    mean = imp.emit("mean", [x_t], [mean_out], reduce, suffix="/mean")[0]
    if inv_out is None:
        return
    centered = imp.step("sub", [x_t, mean], "centered")
    variance = imp.step("mean", [imp.step("mul", [centered, centered], "square")],
                        "variance", reduce)
    std = imp.step("sqrt", [imp.step("add", [variance, _epsilon(imp, attrs, x_t)],
                                     "plus_epsilon")], "std")
    imp.emit("reciprocal", [std], [inv_out], suffix="/inv_std_dev")


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
    """x / sqrt(mean(x * x) + epsilon) * scale, the mean over the dims from ``axis`` (negative
    counted from the end; out of range: a ModelFileError naming the node), ``scale``
    broadcasting to those dims. Over the last axis with one scale per entry: ``rms_norm``.
    Otherwise glue ops, as ONNX's definition, in float32 (``stash_type`` 1, the only one
    taken; float16 and float64 models are imported as float32): ``mul``, ``mean`` (keepdim),
    ``add`` epsilon, ``sqrt``, ``div``, ``mul`` by the scale (a constant or a run-time input;
    one that does not broadcast to the normalized dims is refused naming the node,
    :func:`_broadcasts`)."""
    _only(imp, attrs, {"axis": ..., "epsilon": ..., "stash_type": 1})
    x, scale = node.input[0], node.input[1]
    shape = list(imp.type_of(x).shape)
    rank = len(shape)
    axis = axis_in(attrs.get("axis", -1), rank)
    scale_shape = list(imp.type_of(scale).shape)
    if axis == rank - 1 and len(scale_shape) == 1 and (scale_shape[0] != 1 or shape[-1] == 1):
        imp.emit("rms_norm", [imp.tensor(x), imp.tensor(scale)], [node.output[0]],
                 {"eps": attrs.get("epsilon", 1e-5)})
        return
    _broadcasts(imp, "scale", scale, scale_shape, shape, axis)
    x_t = imp.tensor(x)
    reduce = {"axes": list(range(axis, rank)), "keepdim": True}
    mean_square = imp.step("mean", [imp.step("mul", [x_t, x_t], "square")], "mean_square",
                           reduce)
    rms = imp.step("sqrt", [imp.step("add", [mean_square, _epsilon(imp, attrs, x_t)],
                                     "plus_epsilon")], "rms")
    normalized = imp.step("div", [x_t, rms], "normalized")
    imp.emit("mul", [normalized, imp.tensor(scale)], [node.output[0]])


# --- the other exporters' normalizations ---------------------------------------------------------

#: ONNX's default MeanVarianceNormalization axes: per channel, over batch and space
MVN_AXES = (0, 2, 3)


def _float32_input(imp, node) -> tuple[str, list]:
    """The node's input and its shape; a dtype other than float32 is refused (onnxruntime has
    float32 kernels only for LRN and MeanVarianceNormalization, and the host's backends
    compute floats in float32)."""
    x = node.input[0]
    t = imp.type_of(x)
    if t.dtype != "float32":
        raise imp.unsupported(f"input {x!r} of dtype {t.dtype}: only float32 is supported")
    return x, list(t.shape)


def _float_attr(imp, attrs: dict, name: str, default: float, positive: bool) -> float:
    """A float attribute, refused unless finite (and > 0 where ``positive``)."""
    value = attrs.get(name, default)
    if type(value) is not float:
        raise ModelFileError(f"attribute {name}={value!r} must be a float")
    if not math.isfinite(value) or positive and value <= 0:
        raise imp.unsupported(f"attribute {name}={value} must be finite"
                              f"{' and > 0 (as onnxruntime requires)' if positive else ''}")
    return value


def lrn_order(channels: int, size: int) -> list[int]:
    """Where each term of onnxruntime's running LRN sum sits in ``[bias, t, -t]`` along the
    channels, t the scaled squares zero-padded to ``channels + size - 1`` (``(size - 1) // 2``
    before): bias, the first ``size`` of t (the first channel's window), then for each next
    channel c the head t[c + size - 1] and the tail -t[c - 1]. The running sum of the terms
    in this order, read at ``size + 2 * c``, is channel c's sum."""
    width = channels + size  # bias and t
    order = [0] + [1 + p for p in range(size)]
    for c in range(1, channels):
        order += [1 + c + size - 1, width + 1 + c - 1]
    return order


@maps("LRN")
def _lrn(imp, node, attrs):
    """y = x * (bias + alpha / size * square_sum) ** -beta, square_sum over the channels
    c - (size - 1) // 2 .. c + size // 2 (zero beyond the edges). onnxruntime takes an odd
    size, alpha and beta > 0 and an (N, C, H, W) input, and sums the window as a running sum
    down the channels (add the head, subtract the tail, in float32): a non-finite square, once
    it leaves the window, leaves nan behind in every later channel, and a large one leaves
    its rounding error. The same running sum is built here as one ``cumsum`` over the terms
    laid out in its order (:func:`lrn_order`, a constant ``gather``), so the results are
    onnxruntime's (up to its pow's last bits). The channel dim must be static."""
    _only(imp, attrs, {"size": ..., "alpha": ..., "beta": ..., "bias": ...})
    if "size" not in attrs:
        raise ModelFileError("attribute size is required")
    size = attrs["size"]
    if type(size) is not int:
        raise ModelFileError(f"attribute size={size!r} must be an integer")
    if size < 1 or size % 2 == 0:
        raise imp.unsupported(f"attribute size={size}: onnxruntime, the reference, computes LRN "
                              f"for an odd size >= 1 only")
    alpha = _float_attr(imp, attrs, "alpha", 1e-4, True)
    beta = _float_attr(imp, attrs, "beta", 0.75, True)
    bias = _float_attr(imp, attrs, "bias", 1.0, False)
    x, shape = _float32_input(imp, node)
    if len(shape) != 4:
        raise imp.unsupported(f"input shape {shape}: onnxruntime computes LRN of an (N, C, H, W) "
                              f"input only")
    channels = shape[1]
    if type(channels) is not int or channels < 1:
        raise imp.unsupported(f"input shape {shape}: the channel dim must be static and >= 1")
    imp.check_size("its running-sum terms", [shape[0], 2 * (channels + size), *shape[2:]])
    out = node.output[0]

    x_t = imp.tensor(x)
    scale = np.float32(alpha) / np.float32(size)  # as onnxruntime: in float32
    terms = imp.step("mul", [imp.step("mul", [x_t, x_t], "square"),
                             _scalar(imp, scale, x_t, f"{out}.alpha_over_size")], "scaled")
    pre = (size - 1) // 2
    spatial = [[0, 0], [0, 0]]
    if size > 1:
        terms = imp.step("pad", [terms], "window", {
            "pads": [[0, 0], [pre, size - 1 - pre], *spatial], "mode": "constant",
            "value": 0.0})
    terms = imp.step("pad", [terms], "bias", {"pads": [[0, 0], [1, 0], *spatial],
                                              "mode": "constant", "value": bias})
    both = imp.step("concat", [terms, imp.step("neg", [terms], "negated")], "terms",
                    {"axis": 1})
    order = imp.add_constant(np.asarray(lrn_order(channels, size), np.int64), f"{out}.order")
    ordered = imp.step("gather", [both, order], "ordered", {"axis": 1})
    sums = imp.step("cumsum", [ordered], "running", {"axis": 1})
    sums = imp.step("slice", [sums], "sums", {"starts": [size],
                                              "ends": [size + 2 * channels - 1],
                                              "axes": [1], "steps": [2]})
    power = imp.step("pow", [sums, _scalar(imp, np.float32(-beta), x_t, f"{out}.neg_beta")],
                     "pow")
    imp.emit("mul", [x_t, power], [out])


@maps("LpNormalization")
def _lp_norm(imp, node, attrs):
    """x / norm along axis, norm the L1 (p=1) or L2 (p=2) norm; a zero norm gives zeros
    (onnxruntime's guard: ``where``), a nan one nans. The L2 norm is sqrt(sum(x * x)) as
    onnxruntime forms it, without rescaling: an entry from about 1.8e19 makes it inf (the
    line's finite entries give 0), and a line whose squares all underflow (entries below
    about 2.6e-23) gives zeros. float32 on the host's backends; onnxruntime has float64 too."""
    _only(imp, attrs, {"axis": ..., "p": ...})
    p = attrs.get("p", 2)
    if p not in (1, 2):
        raise imp.unsupported(f"attribute p={p!r}: only the L1 and L2 norms (p 1 or 2) are "
                              f"defined")
    x = node.input[0]
    t = imp.type_of(x)
    if not t.dtype.startswith("float"):
        raise imp.unsupported(f"input {x!r} of dtype {t.dtype}: needs a float tensor")
    axis = axis_in(attrs.get("axis", -1), len(t.shape))
    out = node.output[0]

    x_t = imp.tensor(x)
    parts = imp.step("abs", [x_t], "abs") if p == 1 else imp.step("mul", [x_t, x_t], "square")
    norm = imp.step("sum", [parts], "sum", {"axes": [axis], "keepdim": True})
    if p == 2:
        norm = imp.step("sqrt", [norm], "norm")
    zero = _scalar(imp, 0.0, x_t, f"{out}.zero")
    imp.emit("where", [imp.step("equal", [norm, zero], "zero_norm"), zero,
                       imp.step("div", [x_t, norm], "divided")], [out])


@maps("MeanVarianceNormalization")
def _mean_variance_norm(imp, node, attrs):
    """(x - mean) / sqrt(mean((x - mean) ** 2)) over ``axes`` (default [0, 2, 3]), with no
    epsilon, as onnxruntime computes it: a constant slice gives 0 / 0, nan. An axis out of
    range is refused (onnxruntime skips it; the ONNX function it stands for would not), as
    is an empty axes list (onnxruntime refuses it at run time)."""
    _only(imp, attrs, {"axes": ...})
    x, shape = _float32_input(imp, node)
    given = attrs.get("axes", list(MVN_AXES))
    axes = sorted({axis_in(a, len(shape), "axes") for a in int_vector(given, "axes")})
    if not axes:
        raise imp.unsupported("attribute axes=[]: no axis to normalize over")
    out = node.output[0]

    reduce = {"axes": axes, "keepdim": True}
    x_t = imp.tensor(x)
    centered = imp.step("sub", [x_t, imp.step("mean", [x_t], "mean", reduce)], "centered")
    variance = imp.step("mean", [imp.step("mul", [centered, centered], "square")],
                        "variance", reduce)
    imp.emit("div", [centered, imp.step("sqrt", [variance], "std")], [out])


@maps("SimplifiedLayerNormalization")
def _simplified_layer_norm(imp, node, attrs):
    """onnxruntime's own RMSNorm, which its graph optimizer writes in the default domain (T5's
    and LLaMA's norms): RMSNormalization (:func:`_rms_norm`); its inv_std_var output (1),
    where read or a graph output, computed beside it in float32: ``mul``, ``mean`` (keepdim)
    over the dims from ``axis``, ``add`` epsilon, ``sqrt``, ``reciprocal``."""
    _rms_norm(imp, node, attrs)
    inv_out = _wanted(imp, node, 1)
    if inv_out is None:
        return
    x_t = imp.tensor(node.input[0])
    rank = len(imp.types[x_t].shape)
    reduce = {"axes": list(range(axis_in(attrs.get("axis", -1), rank), rank)), "keepdim": True}
    mean_square = imp.step("mean", [imp.step("mul", [x_t, x_t], "inv_square")],
                           "inv_mean_square", reduce)
    rms = imp.step("sqrt", [imp.step("add", [mean_square, _epsilon(imp, attrs, x_t)],
                                     "inv_plus_epsilon")], "inv_rms")
    imp.emit("reciprocal", [rms], [inv_out], suffix="/inv_std_var")
