"""ONNX's pooling: GlobalAveragePool, GlobalMaxPool, GlobalLpPool, LpPool, MaxPool (its Indices
output too) and AveragePool over 1, 2 or 3 spatial axes. Registered in :data:`.ops.MAPPERS` on
import."""

from __future__ import annotations

import math

import numpy as np

from abi import dtypes

from ..errors import ModelFileError

from .layers import _pads
from .ops import _flags, _one_output, _only, _scalar, maps


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
    x = node.input[0]
    t = imp.type_of(x)
    if not 3 <= len(t.shape) <= 5:
        raise imp.unsupported(f"input of shape {list(t.shape)}: needs (N, C, *spatial) with 1, "
                              f"2 or 3 spatial axes")
    p, y = _lp_power(imp, attrs, x, t)
    [total] = imp.emit("sum", [y], [None], {"axes": list(range(2, len(t.shape))),
                                            "keepdim": True}, suffix="/sum")
    _lp_root(imp, p, total, node.output[0])


def _lp_power(imp, attrs: dict, x: str, t) -> tuple[int, str]:
    """GlobalLpPool's and LpPool's p (an integer >= 1), and ``|x|^p`` formed as onnxruntime's
    kernel forms it (``abs``, then ``pow`` by p in float32; p=1 needs no ``pow``)."""
    p = attrs.get("p", 2)
    if type(p) is not int or p < 1:
        raise imp.unsupported(f"attribute p={p!r}: only an integer p >= 1 is supported")
    if not t.dtype.startswith("float"):
        raise imp.unsupported(f"input {x!r} of dtype {t.dtype}: needs a float tensor")
    x_t = imp.tensor(x)
    [y] = imp.emit("abs", [x_t], [None], suffix="/abs")
    if p > 1:
        [y] = imp.emit("pow", [y, _scalar(imp, float(p), x_t, f"{imp.node_name}.p")], [None],
                       suffix="/pow")
    return p, y


def _lp_root(imp, p: int, total: str, out: str) -> None:
    """``total ** (1 / p)`` bound to ``out`` (the root formed in float32, as onnxruntime)."""
    if p == 1:
        imp.emit("identity", [total], [out])
        return
    root = np.float32(1) / np.float32(p)
    imp.emit("pow", [total, _scalar(imp, float(root), total, f"{out}.root")], [out])


@maps("LpPool")
def _lp_pool(imp, node, attrs):
    """(sum over the window of |x|^p)^(1/p), padding counting as zeros, as onnxruntime's
    kernel: ``abs``, ``pow`` by p, a depthwise ``conv`` of ones (the window's sum, over 1, 2 or
    3 spatial axes, with its strides, dilations and pads), ``pow`` by 1/p. ``ceil_mode`` keeps
    a last window only where it starts inside the input or the pad before (onnxruntime's
    lengths, which ONNX's shape inference overstates): the sum is taken over zeros past the
    pad after, so a pad after grows by what that window needs. ``auto_pad`` as for Conv. The
    channels and, with ``ceil_mode``, the spatial sizes must be known at import."""
    _only(imp, attrs, {"auto_pad": ..., "kernel_shape": ..., "strides": ..., "pads": ...,
                       "dilations": ..., "ceil_mode": ..., "p": ...})
    x = node.input[0]
    t = imp.type_of(x)
    spatial = len(t.shape) - 2
    kernel = list(attrs.get("kernel_shape", []))
    if not 1 <= spatial <= 3 or len(kernel) != spatial:
        raise imp.unsupported(f"input of shape {list(t.shape)} and kernel_shape {kernel}: needs "
                              f"(N, C, *spatial) with 1, 2 or 3 spatial axes, one kernel size "
                              f"each")
    channels = t.shape[1]
    if type(channels) is not int:
        raise imp.unsupported(f"input {x!r} has run-time channels {channels!r}: the window's "
                              f"sum is a depthwise conv, whose weight needs them")
    strides = list(attrs.get("strides", [1] * spatial))
    dilations = list(attrs.get("dilations", [1] * spatial))
    for name, values in (("kernel_shape", kernel), ("strides", strides),
                         ("dilations", dilations)):
        if len(values) != spatial or any(type(v) is not int or v < 1 for v in values):
            raise imp.unsupported(f"attribute {name}={values!r}: needs {spatial} integers >= 1")
    if channels * math.prod(kernel) > imp.limits.max_tensor_elements:
        raise ModelFileError(f"kernel_shape {kernel} over {channels} channels: a window of "
                             f"{channels * math.prod(kernel)} elements, over the cap of "
                             f"{imp.limits.max_tensor_elements}", node=imp.node_name,
                             op=node.op_type)
    ceil = _flags(imp, attrs, {"ceil_mode": 0})["ceil_mode"]
    if attrs.get("auto_pad", "NOTSET").startswith("SAME") and any(d != 1 for d in dilations):
        raise imp.unsupported(f"auto_pad={attrs['auto_pad']} with dilations {dilations}: give "
                              f"explicit pads")
    pads = _pads(imp, attrs, spatial, t.shape, kernel, strides, dilations)
    for i in range(spatial) if ceil else ():
        size = t.shape[2 + i]
        if type(size) is not int:
            raise imp.unsupported(f"ceil_mode=1 over the run-time size {size!r}: its last window "
                                  f"depends on the size; --dim fixes it")
        span = (kernel[i] - 1) * dilations[i] + 1
        padded = size + pads[i][0] + pads[i][1]
        count = -(-(padded - span) // strides[i]) + 1
        if (count - 1) * strides[i] >= size + pads[i][0]:
            count -= 1
        pads[i][1] += max((count - 1) * strides[i] + span - padded, 0)
    p, y = _lp_power(imp, attrs, x, t)
    ones = imp.add_constant(np.ones((channels, 1, *kernel), dtypes.to_numpy(imp.types[y].dtype)),
                            f"{imp.node_name}.window")
    [total] = imp.emit("conv", [y, ones, None], [None],
                       {"stride": strides, "dilation": dilations, "groups": channels,
                        "padding": pads}, suffix="/sum")
    _lp_root(imp, p, total, node.output[0])


@maps("MaxPool", "AveragePool")
def _pool(imp, node, attrs):
    """``max_pool`` / ``avg_pool`` over the 1, 2 or 3 spatial axes (torch's pool1d/2d/3d, and
    adaptive pooling to a size dividing the input as the legacy exporter writes it); MaxPool's
    Indices, where read, by :func:`_pool_indices`. ``auto_pad`` (keras2onnx and tf2onnx write
    SAME_UPPER) gives explicit pads as for Conv (:func:`.layers._pads`), but not with
    ``dilations``. ``dilations`` (AveragePool's since opset 19) become ``dilation``."""
    _only(imp, attrs, {"auto_pad": ..., "kernel_shape": ..., "strides": ..., "pads": ...,
                       "dilations": ..., "ceil_mode": ..., "count_include_pad": ...,
                       "storage_order": ...})
    if attrs.get("storage_order", 0) not in (0, 1):
        raise ModelFileError(f"attribute storage_order={attrs['storage_order']!r} must be 0 "
                             f"(row major) or 1 (column major)")
    indices = node.op_type == "MaxPool" and len(node.output) > 1 and node.output[1] and (
        node.output[1] in imp.consumers or node.output[1] in imp.graph_outputs)
    if not indices:
        _one_output(imp, node)
    kernel = attrs["kernel_shape"]
    spatial = len(kernel)
    strides = attrs.get("strides", [1] * spatial)
    if attrs.get("auto_pad", "NOTSET").startswith("SAME") and any(
            d != 1 for d in attrs.get("dilations", [])):
        raise imp.unsupported(f"auto_pad={attrs['auto_pad']} with dilations "
                              f"{attrs['dilations']}: onnxruntime pads a dilated pool by its "
                              f"undilated kernel, ONNX by the dilated one; give explicit pads")
    pads = _pads(imp, attrs, spatial, imp.type_of(node.input[0]).shape, kernel, strides,
                 attrs.get("dilations", [1] * spatial))
    common = {"kernel_size": kernel, "stride": strides,
              "padding": pads, "ceil_mode": bool(attrs.get("ceil_mode", 0))}
    dilations = list(attrs.get("dilations", [1] * spatial))
    if node.op_type == "MaxPool":
        op, extra = "max_pool", {"dilation": dilations}
    else:
        op, extra = "avg_pool", {"count_include_pad": bool(attrs.get("count_include_pad", 0))}
        if dilations != [1] * spatial:  # opset 19's; undilated: as artifacts before it
            extra["dilation"] = dilations
    x = node.input[0]
    codes = imp.fake_quantized.get(x) or imp.type_of(x).dtype
    if indices:
        if codes in ("int8", "uint8"):
            raise imp.unsupported(f"Indices of a MaxPool of {codes} codes: only their values "
                                  f"are pooled")
        _pool_indices(imp, node, {**common, **extra}, bool(attrs.get("storage_order", 0)))
        return
    if op == "max_pool" and codes in ("int8", "uint8"):
        return _max_pool_codes(imp, node, codes, {**common, **extra})
    imp.emit(op, [imp.tensor(x)], [node.output[0]], {**common, **extra})


def _max_pool_codes(imp, node, dtype: str, attrs: dict) -> None:
    """MaxPool of 8-bit integers (quantize_static's QOperator format leaves it between its
    quantized ops): ``max_pool`` of the codes in their dtype, as onnxruntime's MaxPool takes
    them (:func:`.qlinear.integer_op`)."""
    from .dynamic import _as_integer
    from .qlinear import integer_op

    integer_op(imp, node, "max_pool", [_as_integer(imp, node.input[0], dtype)], attrs, dtype)


def _pool_indices(imp, node, attrs: dict, column_major: bool) -> None:
    """MaxPool with its Indices output: ``max_pool_with_indices`` gives each index within its
    (n, c) plane, row major; ``column_major`` (storage_order 1): each made its column-major
    position in the plane (the first spatial axis varying fastest), a ``gather_elements`` from
    the constant table of those positions. ONNX's count over the whole tensor, so (n * C + c) *
    plane is added: a constant, or with a run-time batch the running count of the (n, c) planes
    (``cumsum`` of ones shaped like one index per plane)."""
    shape = list(imp.type_of(node.input[0]).shape)
    if not all(type(d) is int for d in shape[1:]):
        raise imp.unsupported(f"input shape {shape}: MaxPool indices need the channel and "
                              f"spatial dims static")
    y, index = node.output[:2]
    [_, plane_index] = imp.emit("max_pool_with_indices", [imp.tensor(node.input[0])],
                                [y or None, None], attrs, suffix="/plane")
    plane, channels, ones = math.prod(shape[2:]), shape[1], [1] * (len(shape) - 2)
    if column_major:
        table = np.arange(plane, dtype=np.int64).reshape(shape[2:], order="F").ravel()
        out = [d if type(d) is int else -1 for d in imp.types[plane_index].shape]
        flat = imp.step("reshape", [plane_index], "row_major", {"shape": [-1]})
        flat = imp.step("gather_elements", [imp.add_constant(table, f"{index}.column_major"),
                                            flat], "column_major", {"axis": 0})
        plane_index = imp.step("reshape", [flat], "column_major_planes", {"shape": out})
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
