"""ONNX ops that become the layer set's ops: Conv, ConvTranspose (``conv``,
``conv_transpose``, their pads from ``auto_pad`` or explicit), BatchNormalization
(``batchnorm``), Gemm and MatMul (``linear`` on a constant weight, else ``matmul``).
Registered in :data:`.ops.MAPPERS` on import."""

from __future__ import annotations

import numpy as np

from abi.ops.dims import TO_THE_END

from ..errors import ModelFileError
from .ops import _one_output, _only, _opt, _scalar, maps


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
        size, stride, span = shape[2 + i], strides[i], (kernel[i] - 1) * dilations[i] + 1
        if type(size) is int:
            need = max((-(-size // stride) - 1) * stride + span - size, 0)
            small, big = need // 2, need - need // 2
            out.append([small, big] if auto == "SAME_UPPER" else [big, small])
            continue
        # a run-time size: the total pad depends on the size mod the stride, from span - stride
        # to span - 1; where the pad before is the same for every size, pad span - 1 in all
        # (the output is then ceil(size / stride), and no window reaches the extra pad after)
        before = {need // 2 if auto == "SAME_UPPER" else need - need // 2
                  for need in (max(span - stride + r, 0) for r in range(stride))}
        if len(before) > 1:
            raise imp.unsupported(f"auto_pad={auto} with kernel {kernel[i]}, stride {stride} "
                                  f"and dilation {dilations[i]} pads {sorted(before)} before, "
                                  f"by the size mod the stride, which needs a static spatial "
                                  f"size, got {shape}")
        [b] = before
        out.append([b, span - 1 - b])
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
    """``conv_transpose``, which pads both sides alike: pads that differ (tf2onnx's and
    keras2onnx's ``padding="same"``, written as such pads, as ``auto_pad`` or as an
    ``output_shape``) are the smaller pad on both sides and a ``slice`` of the extra off. An
    ``output_shape`` larger than the unpadded output is reached by ``output_padding`` (rows
    after the last, the bias in them), as onnxruntime grows it whatever ``auto_pad``."""
    _only(imp, attrs, {"auto_pad": ..., "dilations": ..., "group": ..., "kernel_shape": ...,
                       "pads": ..., "strides": ..., "output_padding": ..., "output_shape": ...})
    x, w = node.input[0], node.input[1]
    wshape = imp.type_of(w).shape
    spatial = len(wshape) - 2
    if list(attrs.get("kernel_shape", wshape[2:])) != list(wshape[2:]):
        raise imp.unsupported(f"kernel_shape {attrs['kernel_shape']} differs from the weight's "
                              f"{wshape[2:]}")
    strides = attrs.get("strides", [1] * spatial)
    dilations = attrs.get("dilations", [1] * spatial)
    extra = attrs.get("output_padding", [0] * spatial)
    pairs, extra = _transpose_pads(imp, attrs, spatial, imp.type_of(x).shape,
                                   list(wshape[2:]), strides, dilations, extra)
    common = [min(pair) for pair in pairs]
    cut = [a for a, pair in enumerate(pairs) if pair[0] != pair[1]]
    bias = _opt(node, 2)
    [y] = imp.emit("conv_transpose", [imp.tensor(x), imp.tensor(w), bias and imp.tensor(bias)],
                   [None if cut else node.output[0]],
                   {"stride": strides, "padding": common, "output_padding": extra,
                    "dilation": dilations, "groups": attrs.get("group", 1)},
                   suffix="/padded" if cut else "")
    if cut:
        size = imp.types[y].shape
        imp.emit("slice", [y], [node.output[0]], {
            "starts": [pairs[a][0] - common[a] for a in cut],
            "ends": [size[2 + a] - (pairs[a][1] - common[a]) if type(size[2 + a]) is int else
                     -(pairs[a][1] - common[a]) or TO_THE_END for a in cut],
            "axes": [2 + a for a in cut], "steps": [1] * len(cut)})


def _transpose_pads(imp, attrs: dict, spatial: int, shape, kernel, strides, dilations,
                    extra) -> tuple[list[list[int]], list[int]]:
    """ConvTranspose's (before, after) pads per spatial axis, and its output padding: given,
    or from ``output_shape`` or ``auto_pad`` SAME (an output ``stride`` times the input) as
    ONNX and onnxruntime work them out: the total that reaches the output size, split with the
    odd one after for SAME_UPPER and before otherwise; where the output is larger than the
    unpadded one, no pads and the output padding grown by the difference, as onnxruntime does
    (below a stride, which onnxruntime checks when the call runs, as the ABI's rule does)."""
    auto = attrs.get("auto_pad", "NOTSET")
    if auto not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
        raise imp.unsupported(f"auto_pad={auto!r} is not supported")
    target = attrs.get("output_shape")
    if target is None and auto in ("NOTSET", "VALID"):
        pads = attrs.get("pads", [0] * (2 * spatial)) if auto == "NOTSET" else [0] * 2 * spatial
        if len(pads) != 2 * spatial or min(pads, default=0) < 0:
            raise imp.unsupported(f"pads {pads} must be {2 * spatial} values >= 0")
        return [[pads[i], pads[i + spatial]] for i in range(spatial)], list(extra)
    sizes = list(shape[2:])
    if not all(type(d) is int for d in sizes):
        raise imp.unsupported(f"{'output_shape' if target is not None else 'auto_pad=' + auto} "
                              f"needs static spatial sizes (the padding depends on them), got "
                              f"{list(shape)}")
    target = list(target)[-spatial:] if target is not None else [
        d * s for d, s in zip(sizes, strides)]
    if len(target) != spatial:
        raise imp.unsupported(f"output_shape {attrs['output_shape']} needs {spatial} sizes")
    pairs, grown = [], []
    for d, s, k, dil, e, out in zip(sizes, strides, kernel, dilations, extra, target):
        total = s * (d - 1) + e + (k - 1) * dil + 1 - out
        grown.append(e - min(total, 0))
        total = max(total, 0)
        small, big = total // 2, total - total // 2
        pairs.append([small, big] if auto == "SAME_UPPER" else [big, small])
    return pairs, grown


@maps("BatchNormalization")
def _batchnorm(imp, node, attrs):
    _only(imp, attrs, {"epsilon": ..., "momentum": ..., "training_mode": ..., "spatial": 1})
    training = attrs.get("training_mode", 0)
    if training not in (0, 1):
        raise ModelFileError(f"attribute training_mode={training!r} must be 0 or 1")
    if training:
        _batchnorm_of_the_batch(imp, node, attrs)
        return
    _one_output(imp, node, " (training-mode outputs)")
    x, scale, bias, mean, var = node.input[:5]
    # ONNX momentum weighs the old running value; torch's (the ABI's) weighs the new batch value
    imp.emit("batchnorm", [imp.tensor(x), imp.tensor(scale), imp.tensor(bias), imp.tensor(mean),
                           imp.tensor(var), None], [node.output[0]],
             {"eps": attrs.get("epsilon", 1e-5),
              "momentum": round(1.0 - attrs.get("momentum", 0.9), 7)})


def _batchnorm_of_the_batch(imp, node, attrs) -> None:
    """BatchNormalization with ``training_mode=1`` (torch's export in training mode): x
    normalized by the mean and the variance (the population's, numpy's var) of the batch over
    every axis but the channels', ``scale * (x - m) / sqrt(v + epsilon) + B``; the running mean
    and variance outputs, where read, ``running * momentum + batch * (1 - momentum)``."""
    x, scale, bias, mean, var = (imp.tensor(t) for t in node.input[:5])
    rank = len(imp.types[x].shape)
    if rank < 2:
        raise ModelFileError(f"input X of rank {rank}: BatchNormalization needs (N, C, ...)")
    axes, channels = [0, *range(2, rank)], {"shape": [-1] + [1] * (rank - 2)}
    m = imp.step("mean", [x], "batch_mean", {"axes": axes, "keepdim": True})
    d = imp.step("sub", [x, m], "centred")
    v = imp.step("mean", [imp.step("mul", [d, d], "squares")], "batch_var",
                 {"axes": axes, "keepdim": True})
    eps = _scalar(imp, attrs.get("epsilon", 1e-5), x, f"{imp.node_name}.epsilon")
    y = imp.step("mul", [imp.step("reshape", [scale], "scale", channels), d], "scaled")
    y = imp.step("div", [y, imp.step("sqrt", [imp.step("add", [v, eps], "var_eps")], "std")],
                 "normalized")
    imp.emit("add", [y, imp.step("reshape", [bias], "bias", channels)], [node.output[0]])
    momentum = attrs.get("momentum", 0.9)
    keep = _scalar(imp, momentum, x, f"{imp.node_name}.momentum")
    new = _scalar(imp, 1.0 - momentum, x, f"{imp.node_name}.update")
    for k, (batch, running, what) in enumerate(((m, mean, "mean"), (v, var, "var")), 1):
        out = node.output[k] if len(node.output) > k else ""
        if out and (out in imp.consumers or out in imp.graph_outputs):
            batch = imp.step("reshape", [batch], f"batch_{what}_c", {"shape": [-1]})
            imp.emit("add", [imp.step("mul", [running, keep], f"running_{what}_kept"),
                             imp.step("mul", [batch, new], f"batch_{what}_weighted")], [out],
                     suffix=f"/running_{what}")


def _linear(imp, x: str, weight: np.ndarray, origin: str, bias: np.ndarray | None,
            bias_origin: str, out: str | None) -> str:
    w = imp.add_constant(weight, origin)
    b = None if bias is None else imp.add_constant(bias, bias_origin)
    return imp.emit("linear", [x, w, b], [out])[0]


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
