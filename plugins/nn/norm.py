"""Normalization kernels and layers: BatchNorm, GroupNorm, InstanceNorm, LayerNorm(2d), RMSNorm.

Kernels are pure: they read their arguments and return a new array; none of them writes an
input. Only :class:`BatchNorm` has state (running statistics), and only its training mode,
which the inference chain never enables, replaces it -- with new arrays, so an array handed in
(for instance a read-only view of an artifact) is never written.

Statistics are computed in float32 with the biased variance, as torch and tinygrad do. A
normalization group holding a single value normalizes to 0 (so the output is the bias); torch
refuses such inputs, tinygrad computes the same 0. Only BatchNorm training refuses them, where
the running-variance correction would divide by zero.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from abi.errors import ContractError, DomainError, ShapeError

from ._common import (channel_shape, check_eps, check_f32, check_float, check_int, check_ndim,
                      check_param, is_int, prod, shape_str)

__all__ = ["batchnorm", "batch_stats", "group_norm", "instance_norm", "layer_norm",
           "make_layer_norm", "layer_norm2d", "rms_norm", "BatchNorm", "BatchNorm2d",
           "BatchNorm3d", "GroupNorm", "InstanceNorm", "LayerNorm", "LayerNorm2d", "RMSNorm"]


def _normalize_last(a: np.ndarray, eps: float) -> np.ndarray:
    """``(a - mean) / sqrt(var + eps)`` over the last axis (biased variance), a new array."""
    if a.shape[-1] == 0:
        return np.array(a, dtype=np.float32)
    mean = a.mean(axis=-1, keepdims=True)
    d = a - mean
    var = np.mean(np.square(d), axis=-1, keepdims=True)
    d *= 1.0 / np.sqrt(var + np.float32(eps))
    return d


def _affine(y: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None,
            shape: tuple[int, ...]) -> np.ndarray:
    """``y * weight + bias`` in place on the fresh array ``y`` (params broadcast as ``shape``)."""
    if weight is not None:
        y *= weight.reshape(shape)
    if bias is not None:
        y += bias.reshape(shape)
    return y


# --- BatchNorm ---------------------------------------------------------------------------------


def _check_batch_domain(x: np.ndarray, where: str) -> None:
    numel, c = x.size, x.shape[1]
    if numel - c <= 0:
        raise DomainError(f"{where}: training needs more than one value per channel: input "
                          f"{shape_str(x.shape)} has numel {numel} and {c} channel(s), so the "
                          f"running-variance correction numel/(numel - C) = {numel}/{numel - c} "
                          f"is undefined", where=where, shape=x.shape)


def batch_stats(x: np.ndarray, where: str = "BatchNorm") -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and biased variance of an NC... float32 tensor (axis 1 is kept)."""
    check_f32(x, "input", where)
    check_ndim(x, "input", where, min_ndim=2, rule="(N, C, *spatial)")
    if x.size == 0:
        raise DomainError(f"{where}: batch statistics of an empty input {shape_str(x.shape)} "
                          f"are undefined", where=where, shape=x.shape)
    axes = (0,) + tuple(range(2, x.ndim))
    mean = x.mean(axis=axes)
    var = np.mean(np.square(x - mean.reshape(channel_shape(x))), axis=axes)
    return mean, var


def batchnorm(x: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None,
              running_mean: np.ndarray | None, running_var: np.ndarray | None,
              num_batches_tracked: np.ndarray | None = None, *, eps: float, momentum: float,
              track_running_stats: bool, training: bool = False,
              where: str = "BatchNorm") -> np.ndarray:
    """Batch normalization over axis 1 of ``x`` ``(N, C, *spatial)``; returns a new array.

    Inference (``training=False``) with ``track_running_stats`` normalizes with
    ``running_mean`` / ``running_var``; otherwise with the batch's own mean and biased
    variance. ``training=True`` also refuses (DomainError) an input with one value per
    channel, as torch does; untracked inference on such an input returns the well-defined
    result ``bias`` (``x - mean == 0``), where torch refuses too, and on an input of no values
    an output of none (torch's and onnxruntime's answer), whose statistics it never needs.
    ``num_batches_tracked`` and ``momentum`` are accepted so the op's positional tensors and
    attrs map one to one, and ignored: updating state is :class:`BatchNorm`'s job, and this
    kernel never writes any argument.
    With running statistics, like torch's CPU inference kernel, ``y = x * a + b`` with
    ``a = weight / sqrt(var + eps)`` and ``b = bias - mean * a``; with batch statistics
    ``y = (x - mean) * a + bias``.
    """
    check_f32(x, "input", where)
    check_ndim(x, "input", where, min_ndim=2, rule="(N, C, *spatial)")
    c = x.shape[1]
    for name, t in (("weight", weight), ("bias", bias), ("running_mean", running_mean),
                    ("running_var", running_var)):
        check_param(t, name, where, (c,))
    eps = check_eps(eps, where)
    if training:
        _check_batch_domain(x, where)
    if training or not track_running_stats:
        if x.size == 0 and not training:
            return np.empty(x.shape, np.float32)  # nothing to normalize, as torch answers
        mean, var = batch_stats(x, where)
        return _bn_apply(x, weight, bias, mean, var, eps, centered=True)
    if running_mean is None or running_var is None:
        raise ContractError(f"{where}: track_running_stats=True but running_mean/running_var "
                            f"is missing", where=where)
    return _bn_apply(x, weight, bias, running_mean, running_var, eps, centered=False)


def _bn_apply(x: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None,
              mean: np.ndarray, var: np.ndarray, eps: float, centered: bool) -> np.ndarray:
    """``(x - mean) * scale + bias`` with ``scale = weight / sqrt(var + eps)``.

    With running statistics (``centered=False``) it is folded to ``x * scale + shift`` -- two
    passes over ``x`` instead of three, torch's CPU inference formula. With batch statistics
    the mean is subtracted first: ``x`` and its own mean are close, and the folded form would
    cancel large products (a single value per channel gives ``scale = 1/sqrt(eps)``).
    """
    scale = 1.0 / np.sqrt(var + np.float32(eps))
    if weight is not None:
        scale = scale * weight
    if centered:
        return _per_channel(x, scale, bias, mean)
    shift = -mean * scale
    if bias is not None:
        shift = shift + bias
    return _per_channel(x, scale, shift)


def _per_channel(x: np.ndarray, scale: np.ndarray, shift: np.ndarray | None,
                 mean: np.ndarray | None = None) -> np.ndarray:
    """``(x - mean) * scale + shift`` with per-channel (axis 1) vectors; a new array in x's
    memory layout.

    For channels-last memory (what the conv kernels return) broadcasting a (C, 1, 1) vector
    makes numpy loop over runs of only C elements; viewing the data as rows of ``r`` whole
    pixels and tiling the vectors ``r`` times gives long runs instead (about 1.5x faster on
    the benchmark's first BatchNorm).
    """
    c = x.shape[1]
    to_last = (0,) + tuple(range(2, x.ndim)) + (1,)
    xl = x.transpose(to_last)
    if x.ndim < 3 or x.size == 0 or not xl.flags.c_contiguous:
        x2, shape = x, channel_shape(x)

        def vec(v: np.ndarray) -> np.ndarray:
            return v.reshape(shape)
    else:
        r = math.gcd(x.size // c, max(1, 4096 // c))
        x2 = xl.reshape(-1, r * c)

        def vec(v: np.ndarray) -> np.ndarray:
            return np.tile(v, r)
    if mean is None:
        y = np.multiply(x2, vec(scale))
    else:
        y = np.subtract(x2, vec(mean))
        y *= vec(scale)
    if shift is not None:
        y += vec(shift)
    if x2 is x:
        return y
    return y.reshape(xl.shape).transpose(np.argsort(to_last))


class BatchNorm:
    """Batch normalization over axis 1 (tinygrad ``nn.BatchNorm``; 2d/3d are aliases).

    Parameters ``weight`` (ones) and ``bias`` (zeros) exist when ``affine``; state
    ``running_mean`` (zeros), ``running_var`` (ones) when ``track_running_stats`` (else None)
    and ``num_batches_tracked`` (int64, shape ``()`` as torch). ``self(x)`` is inference and
    never touches state. ``self(x, training=True)`` normalizes with the batch statistics and,
    when tracking, replaces the state with new arrays::

        running_mean = (1 - momentum) * running_mean + momentum * mean
        running_var  = (1 - momentum) * running_var + momentum * numel/(numel - C) * var
        num_batches_tracked += 1

    An input with ``numel - C == 0`` is refused (DomainError) before any state is touched.
    """

    abi_op = "batchnorm"

    def __init__(self, sz: int, eps: float = 1e-5, affine: bool = True,
                 track_running_stats: bool = True, momentum: float = 0.1) -> None:
        self.num_features = check_int(sz, "sz", "BatchNorm", 1)
        self.eps, self.track_running_stats, self.momentum = eps, track_running_stats, momentum
        check_eps(eps, "BatchNorm")
        self.weight: np.ndarray | None = np.ones(sz, np.float32) if affine else None
        self.bias: np.ndarray | None = np.zeros(sz, np.float32) if affine else None
        self.num_batches_tracked = np.zeros((), np.int64)
        self.running_mean: np.ndarray | None = None
        self.running_var: np.ndarray | None = None
        if track_running_stats:
            self.running_mean = np.zeros(sz, np.float32)
            self.running_var = np.ones(sz, np.float32)

    def _check_channels(self, x: np.ndarray) -> None:
        check_f32(x, "input", "BatchNorm")
        check_ndim(x, "input", "BatchNorm", min_ndim=2, rule="(N, C, *spatial)")
        if x.shape[1] != self.num_features:
            raise ShapeError(f"BatchNorm: input {shape_str(x.shape)} has {x.shape[1]} channels, "
                             f"expected {self.num_features}", where="BatchNorm",
                             expected=self.num_features, got=x.shape[1])

    def __call__(self, x: np.ndarray, training: bool = False) -> np.ndarray:
        self._check_channels(x)
        if not training:
            return batchnorm(x, self.weight, self.bias, self.running_mean, self.running_var,
                             self.num_batches_tracked, **self.abi_attrs())
        _check_batch_domain(x, "BatchNorm")  # before any state is read or written
        for name in ("weight", "bias", "running_mean", "running_var"):
            check_param(getattr(self, name), name, "BatchNorm", (self.num_features,))
        eps = check_eps(self.eps, "BatchNorm")
        if self.track_running_stats and (self.running_mean is None or self.running_var is None):
            raise ContractError("BatchNorm: track_running_stats=True but running_mean/running_var "
                                "is missing", where="BatchNorm")
        mean, var = batch_stats(x)
        y = _bn_apply(x, self.weight, self.bias, mean, var, eps, centered=True)
        if self.track_running_stats:
            m = np.float32(self.momentum)
            correction = np.float32(x.size / (x.size - x.shape[1]))
            self.running_mean = ((1 - m) * self.running_mean + m * mean).astype(np.float32)
            self.running_var = ((1 - m) * self.running_var
                                + m * correction * var).astype(np.float32)
            self.num_batches_tracked = np.array(self.num_batches_tracked + 1, dtype=np.int64)
        return y

    def abi_attrs(self) -> dict[str, Any]:
        return {"eps": float(self.eps), "momentum": float(self.momentum),
                "track_running_stats": bool(self.track_running_stats)}

    def abi_tensors(self) -> dict[str, np.ndarray | None]:
        return {"weight": self.weight, "bias": self.bias, "running_mean": self.running_mean,
                "running_var": self.running_var, "num_batches_tracked": self.num_batches_tracked}


BatchNorm2d = BatchNorm3d = BatchNorm


# --- GroupNorm / InstanceNorm ------------------------------------------------------------------


def group_norm(x: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None, *,
               num_groups: int, eps: float, where: str = "GroupNorm") -> np.ndarray:
    """Normalize each of ``num_groups`` channel groups of ``x`` (N, C, ...), then affine per
    channel: reshape to ``(N, groups, -1)``, normalize the last axis, reshape back."""
    check_f32(x, "input", where)
    check_ndim(x, "input", where, min_ndim=2, rule="(N, C, ...)")
    g = check_int(num_groups, "num_groups", where, 1)
    eps = check_eps(eps, where)
    n, c = x.shape[0], x.shape[1]
    if c % g:
        raise ShapeError(f"{where}: input {shape_str(x.shape)} has {c} channels, not divisible "
                         f"by num_groups={g}", where=where, expected=f"C % {g} == 0", got=x.shape)
    check_param(weight, "weight", where, (c,))
    check_param(bias, "bias", where, (c,))
    y = _normalize_last(x.reshape(n, g, prod(x.shape[1:]) // g), eps).reshape(x.shape)
    return _affine(y, weight, bias, channel_shape(x))


def instance_norm(x: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None, *,
                  eps: float, where: str = "InstanceNorm") -> np.ndarray:
    """Normalize every (sample, channel) plane of ``x`` (N, C, *spatial), then affine per
    channel: reshape to ``(N, C, -1)``, normalize the last axis, reshape back."""
    check_f32(x, "input", where)
    check_ndim(x, "input", where, min_ndim=3, rule="(N, C, *spatial)")
    eps = check_eps(eps, where)
    n, c = x.shape[0], x.shape[1]
    check_param(weight, "weight", where, (c,))
    check_param(bias, "bias", where, (c,))
    y = _normalize_last(x.reshape(n, c, prod(x.shape[2:])), eps).reshape(x.shape)
    return _affine(y, weight, bias, channel_shape(x))


class GroupNorm:
    """Group normalization (tinygrad ``nn.GroupNorm``); ``weight``/``bias`` ``(num_channels,)``.

    ``num_channels`` must divide by ``num_groups`` (ContractError here); an input whose axis 1
    is not ``num_channels`` is refused with ShapeError.
    """

    abi_op = "group_norm"

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5,
                 affine: bool = True) -> None:
        check_int(num_groups, "num_groups", "GroupNorm", 1)
        check_int(num_channels, "num_channels", "GroupNorm", 1)
        if num_channels % num_groups:
            raise ContractError(f"GroupNorm: num_channels={num_channels} is not divisible by "
                                f"num_groups={num_groups}", where="GroupNorm", attr="num_groups")
        check_eps(eps, "GroupNorm")
        self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
        self.weight: np.ndarray | None = np.ones(num_channels, np.float32) if affine else None
        self.bias: np.ndarray | None = np.zeros(num_channels, np.float32) if affine else None

    def __call__(self, x: np.ndarray) -> np.ndarray:
        _check_axis1(x, self.num_channels, "GroupNorm", "(N, C, ...)", 2)
        return group_norm(x, self.weight, self.bias, **self.abi_attrs())

    def abi_attrs(self) -> dict[str, Any]:
        return {"num_groups": int(self.num_groups), "eps": float(self.eps)}

    def abi_tensors(self) -> dict[str, np.ndarray | None]:
        return {"weight": self.weight, "bias": self.bias}


class InstanceNorm:
    """Instance normalization (tinygrad ``nn.InstanceNorm``); checks axis 1 is num_features."""

    abi_op = "instance_norm"

    def __init__(self, num_features: int, eps: float = 1e-5, affine: bool = True) -> None:
        check_int(num_features, "num_features", "InstanceNorm", 1)
        check_eps(eps, "InstanceNorm")
        self.num_features, self.eps = num_features, eps
        self.weight: np.ndarray | None = np.ones(num_features, np.float32) if affine else None
        self.bias: np.ndarray | None = np.zeros(num_features, np.float32) if affine else None

    def __call__(self, x: np.ndarray) -> np.ndarray:
        _check_axis1(x, self.num_features, "InstanceNorm", "(N, C, *spatial)", 3)
        return instance_norm(x, self.weight, self.bias, **self.abi_attrs())

    def abi_attrs(self) -> dict[str, Any]:
        return {"eps": float(self.eps)}

    def abi_tensors(self) -> dict[str, np.ndarray | None]:
        return {"weight": self.weight, "bias": self.bias}


def _check_axis1(x: Any, expected: int, where: str, rule: str, min_ndim: int) -> None:
    check_f32(x, "input", where)
    check_ndim(x, "input", where, min_ndim=min_ndim, rule=rule)
    if x.shape[1] != expected:
        raise ShapeError(f"{where}: input {shape_str(x.shape)} has {x.shape[1]} channels, "
                         f"expected {expected}", where=where, expected=expected, got=x.shape[1])


# --- LayerNorm / LayerNorm2d / RMSNorm ---------------------------------------------------------


def _shape_tuple(normalized_shape: Any, where: str) -> tuple[int, ...]:
    ns = (normalized_shape,) if is_int(normalized_shape) else tuple(normalized_shape)
    if not ns or not all(is_int(s) and s >= 1 for s in ns):
        raise ContractError(f"{where}: normalized_shape must be an int or a tuple of ints >= 1, "
                            f"got {normalized_shape!r}", where=where, attr="normalized_shape")
    return tuple(int(s) for s in ns)


def layer_norm(x: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None, *,
               normalized_shape: Sequence[int], eps: float,
               where: str = "LayerNorm") -> np.ndarray:
    """Normalize over the trailing ``len(normalized_shape)`` axes, then elementwise affine.

    The trailing dims of ``x`` must equal ``normalized_shape`` exactly (ShapeError naming both
    shapes); ``weight`` / ``bias`` have shape ``normalized_shape``.
    """
    ns = _shape_tuple(normalized_shape, where)
    check_f32(x, "input", where)
    k = len(ns)
    if x.ndim < k or tuple(x.shape[x.ndim - k:]) != ns:
        raise ShapeError(f"{where}: trailing dims of input {shape_str(x.shape)} must equal "
                         f"normalized_shape {shape_str(ns)}", where=where, expected=ns,
                         got=x.shape)
    eps = check_eps(eps, where)
    check_param(weight, "weight", where, ns)
    check_param(bias, "bias", where, ns)
    m = prod(ns)
    y = _normalize_last(x.reshape(x.size // m, m), eps).reshape(x.shape)
    return _affine(y, weight, bias, ns)


def make_layer_norm(weight: np.ndarray | None, bias: np.ndarray | None, *,
                    normalized_shape: Sequence[int], eps: float,
                    where: str = "LayerNorm") -> Any:
    """Prepare :func:`layer_norm` once for fixed ``weight`` / ``bias``; returns ``run(x)``.

    The attributes and parameters are validated here, so a call checks only ``x`` (dtype and
    trailing dims; anything unusual goes through :func:`layer_norm`, which raises the same
    errors). Same arithmetic as :func:`layer_norm` (float32 sums, biased variance), computed
    with fewer temporaries and without the per-call parameter checks. The benchmark model's
    LayerNorm(544), measured inside the model: 0.09 -> 0.045 ms (warm caches: 0.019 -> 0.013
    ms); at this size the time is almost all per-call Python overhead.
    """
    ns = _shape_tuple(normalized_shape, where)
    eps = check_eps(eps, where)
    check_param(weight, "weight", where, ns)
    check_param(bias, "bias", where, ns)
    m, k = prod(ns), len(ns)
    w = None if weight is None else np.array(weight, np.float32).reshape(m)
    b = None if bias is None else np.array(bias, np.float32).reshape(m)
    eps32 = np.float32(eps)

    def run(x: np.ndarray) -> np.ndarray:
        if (type(x) is not np.ndarray or x.dtype != np.float32 or x.ndim < k
                or x.shape[x.ndim - k:] != ns or m == 0):
            return layer_norm(x, weight, bias, normalized_shape=ns, eps=eps, where=where)
        a = x.reshape(x.size // m, m)
        mean = np.add.reduce(a, axis=1, keepdims=True)
        mean /= m
        d = a - mean
        var = np.add.reduce(np.square(d), axis=1, keepdims=True)
        var /= m
        var += eps32
        np.sqrt(var, out=var)
        np.divide(1.0, var, out=var)
        d *= var
        if w is not None:
            d *= w
        if b is not None:
            d += b
        return d.reshape(x.shape)

    return run


def layer_norm2d(x: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None, *,
                 normalized_shape: Sequence[int], eps: float,
                 where: str = "LayerNorm2d") -> np.ndarray:
    """LayerNorm over the channels of an NC... tensor: move axis 1 last (NCHW -> NHWC),
    :func:`layer_norm`, move it back. Usually ``normalized_shape == (C,)``."""
    ns = _shape_tuple(normalized_shape, where)
    check_f32(x, "input", where)
    check_ndim(x, "input", where, min_ndim=2, rule="(N, C, *spatial)")
    xm = np.moveaxis(x, 1, -1)
    k = len(ns)
    if xm.ndim < k or tuple(xm.shape[xm.ndim - k:]) != ns:
        raise ShapeError(f"{where}: input {shape_str(x.shape)} moved to channels-last "
                         f"{shape_str(xm.shape)} must end with normalized_shape "
                         f"{shape_str(ns)}", where=where, expected=ns, got=x.shape)
    return np.moveaxis(layer_norm(xm, weight, bias, normalized_shape=ns, eps=eps, where=where),
                       -1, 1)


def rms_norm(x: np.ndarray, weight: np.ndarray | None, *, eps: float,
             where: str = "RMSNorm") -> np.ndarray:
    """``x / sqrt(mean(x**2, last axis) + eps)`` computed in float32 and cast back to
    ``x.dtype``, then times ``weight`` (shape ``(x.shape[-1],)``, any float dtype) with numpy
    type promotion -- a float16 input times a float32 weight gives float32, as in torch and
    tinygrad; with a weight of x's dtype the result keeps x's dtype."""
    check_float(x, "input", where)
    check_ndim(x, "input", where, min_ndim=1)
    eps = check_eps(eps, where)
    if weight is not None:
        check_float(weight, "weight", where)
        if weight.shape != (x.shape[-1],):
            raise ShapeError(f"{where}: weight has shape {shape_str(weight.shape)}, expected "
                             f"{shape_str((x.shape[-1],))} for input {shape_str(x.shape)}",
                             where=where, expected=(x.shape[-1],), got=weight.shape)
    if x.shape[-1] == 0:
        y = x.copy()
    else:
        xf = x.astype(np.float32, copy=False)
        ms = np.mean(np.square(xf), axis=-1, keepdims=True)
        y = (xf * (1.0 / np.sqrt(ms + np.float32(eps)))).astype(x.dtype, copy=False)
    return y if weight is None else y * weight


class LayerNorm:
    """Layer normalization (tinygrad ``nn.LayerNorm``); ``weight``/``bias`` ``normalized_shape``.

    The input's trailing dims must equal ``normalized_shape`` (ShapeError naming both shapes).
    """

    abi_op = "layer_norm"
    _where = "LayerNorm"

    def __init__(self, normalized_shape: int | tuple[int, ...], eps: float = 1e-5,
                 elementwise_affine: bool = True) -> None:
        self.normalized_shape = _shape_tuple(normalized_shape, self._where)
        check_eps(eps, self._where)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        self.weight: np.ndarray | None = None
        self.bias: np.ndarray | None = None
        if elementwise_affine:
            self.weight = np.ones(self.normalized_shape, np.float32)
            self.bias = np.zeros(self.normalized_shape, np.float32)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return layer_norm(x, self.weight, self.bias, normalized_shape=self.normalized_shape,
                          eps=self.eps)

    def abi_attrs(self) -> dict[str, Any]:
        return {"normalized_shape": list(self.normalized_shape), "eps": float(self.eps)}

    def abi_tensors(self) -> dict[str, np.ndarray | None]:
        return {"weight": self.weight, "bias": self.bias}


class LayerNorm2d(LayerNorm):
    """LayerNorm over the channel axis of an NCHW tensor (NCHW -> NHWC, normalize, back)."""

    abi_op = "layer_norm2d"
    _where = "LayerNorm2d"

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return layer_norm2d(x, self.weight, self.bias, normalized_shape=self.normalized_shape,
                            eps=self.eps)


class RMSNorm:
    """Root-mean-square normalization over the last axis (tinygrad ``nn.RMSNorm``).

    ``weight`` ``(dim,)`` (ones) when ``elementwise_affine``. Any floating input dtype; the
    statistics are float32 and the normalized value is cast back before the weight.
    """

    abi_op = "rms_norm"

    def __init__(self, dim: int, eps: float = 1e-6, elementwise_affine: bool = True) -> None:
        self.dim = check_int(dim, "dim", "RMSNorm", 1)
        check_eps(eps, "RMSNorm")
        self.eps = eps
        self.weight: np.ndarray | None = np.ones(dim, np.float32) if elementwise_affine else None

    def __call__(self, x: np.ndarray) -> np.ndarray:
        check_float(x, "input", "RMSNorm")
        check_ndim(x, "input", "RMSNorm", min_ndim=1)
        if x.shape[-1] != self.dim:
            raise ShapeError(f"RMSNorm: last dim of input {shape_str(x.shape)} must equal dim "
                             f"{self.dim}", where="RMSNorm", expected=self.dim, got=x.shape)
        return rms_norm(x, self.weight, eps=self.eps)

    def abi_attrs(self) -> dict[str, Any]:
        return {"eps": float(self.eps)}

    def abi_tensors(self) -> dict[str, np.ndarray | None]:
        return {"weight": self.weight}
