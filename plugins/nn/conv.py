"""Convolution and transposed convolution over ``(N, C, *spatial)`` tensors, any spatial rank.

Kernels (the interface the numpy backend maps the ``conv`` / ``conv_transpose`` ops onto):

* :func:`make_conv` / :func:`conv` -- N-D grouped, strided, dilated, zero-padded convolution.
* :func:`make_conv_transpose` / :func:`conv_transpose` -- its transpose (torch semantics).

Layers (tinygrad ``nn`` constructors): :class:`Conv2d` with the :func:`Conv1d` factory,
:class:`ConvTranspose2d` with the :func:`ConvTranspose1d` factory. The rank of the kernel
tuple decides the spatial rank, so ``Conv2d(c, o, (3, 3, 3))`` is a 3-D convolution.

How ``conv`` runs: the input is copied once into a zero-bordered *channels-last* buffer, an
im2col matrix ``(positions, taps * channels + 1)`` is gathered from it through one
``as_strided`` view (one ``copyto``; the ``+ 1`` column is all ones and carries the bias), and
one float32 BLAS GEMM against the weight prepared as ``(taps * channels + 1, out)`` produces the
output directly in channels-last memory. ``make_conv`` prepares the weight once and keeps the
padded and im2col buffers between calls (per thread, per input shape), so a repeated call
allocates only its output. A depthwise conv (one channel per group, 16 channels or more:
MobileNet's and EfficientNet's) skips the im2col, which for it is a batch of matrix-vector
products, and adds up each tap's window of the padded input times that tap's weights in
float64, 2-3x faster and closer to the exact result (:func:`_depthwise`).

Output memory layout: results have the logical ``(N, C_out, *spatial)`` shape, but their
memory is channels-last (a transposed view of an ``(N, *spatial, C_out)`` array), like a
torch ``channels_last`` tensor. Every numpy operation treats them as ordinary arrays; element-
wise ops keep the layout, and a following conv reads them without a transpose. Call
``np.ascontiguousarray`` where C order is required (e.g. before handing raw bytes on).

Why this layout (measured on the project's 2-core machine, benchmark conv shapes): a
channels-last im2col has contiguous ``kernel_w * C`` runs, so the gather is 1.5-5x faster
than the channels-first one (whose inner reads are strided by the conv stride), and the tall
``(positions, K) @ (K, out)`` GEMM is up to 30 % faster in OpenBLAS than ``(out, K) @ (K,
positions)`` on the early, wide layers (on par on the late ones). Tried and dropped:
channels-first im2col with either GEMM orientation; per-tap GEMM accumulation (numpy's matmul
has no ``beta``, so every tap costs an extra pass over the output, and ``K = C`` GEMMs are
slow for few channels); splitting the gather over two Python threads (the hand-off costs more
than it saves while BLAS's own threads spin); two concurrent half-size GEMMs (OpenBLAS
serializes them).

Within the whole benchmark model (whose 17 MB of linear and LSTM weights stream through the
caches every step) the im2col matrices of all convs share one per-thread scratch buffer
(:func:`_scratch`): 3.6 MB instead of 7.8 MB, about -0.1 to -0.2 ms per step when the machine
is quiet. Also tried there and dropped: gathering and multiplying in L2-sized bands of output
rows (0.98 -> 0.83 ms for the first layer in isolation with cold caches, but slower in the
model, and much slower when another process competes for the cores: every band is one more
BLAS thread hand-off); a conv chain writing its ReLU straight into the next conv's padded
buffer to save that conv's copy (no gain in the model: the write into the colder buffer cost
what the copy saved); sharing the padded input buffers too, re-zeroing their borders on every
call (no measurable gain); gathering straight from an unpadded channels-last input, the
border rows and columns gathered apart with their missing taps zeroed (no gain: the border
copies cost what the padding copy saved); for the first layer's channels-first input, a
stride-2 polyphase split gathered as whole planes into a transposed im2col (0.82 ms against
0.68 ms: the stride-2 split is slow, and the product over a transposed matrix 25 % slower).
"""

from __future__ import annotations

import functools
import itertools
import math
import threading
from typing import Any, Callable, Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided

from abi.errors import ContractError, ShapeError

from ._common import (FLOAT32, check_f32, check_int, check_param, int_tuple, is_int, prod,
                      shape_str, uniform)

__all__ = ["conv", "make_conv", "conv_transpose", "make_conv_transpose", "resolve_padding",
           "Conv1d", "Conv2d", "ConvTranspose1d", "ConvTranspose2d"]

Pads = tuple[tuple[int, int], ...]

# A channels-first -> channels-last copy of a C-contiguous input is a transpose, which numpy
# does element by element with a cache-hostile stride. Multiplying by an identity matrix in
# BLAS does the same transpose cache-blocked: 2-3x faster on inputs of this size (measured:
# (1,12,128,256) 0.28 ms -> 0.14 ms; (1,32,64,128) 0.49 ms -> 0.16 ms).
_GEMM_TRANSPOSE_MAX_C = 64
_GEMM_TRANSPOSE_MIN_ELEMENTS = 32768
_CACHE_SHAPES = 4  # input shapes whose work buffers one prepared conv keeps per thread
# Channels from which a depthwise conv runs tap by tap (:func:`_depthwise`): with fewer, each
# tap's window has too short a contiguous run for numpy's loops, and im2col is faster.
_DEPTHWISE_MIN_CHANNELS = 16


@functools.lru_cache(maxsize=32)
def _eye(n: int) -> np.ndarray:
    eye = np.eye(n, dtype=np.float32)
    eye.flags.writeable = False
    return eye


def _to_channels_last(dst: np.ndarray, x: np.ndarray, xh: np.ndarray) -> None:
    """Copy ``x`` (N, C, *S), whose channels-last view is ``xh``, into ``dst`` (N, *S, C).

    For a C-contiguous ``x`` with few channels the copy is a BLAS product with the identity.
    That is exact for finite values; an inf or NaN element makes every channel of its pixel
    NaN (``0 * inf``), so a conv output that would be +-inf can come out NaN instead. Outputs
    whose window holds only finite inputs are unaffected.
    """
    c = x.shape[1]
    if (x.flags.c_contiguous and 1 < c <= _GEMM_TRANSPOSE_MAX_C and x.shape[-1] >= 16
            and prod(x.shape[1:]) >= _GEMM_TRANSPOSE_MIN_ELEMENTS):  # one GEMM per image row
        np.matmul(xh, _eye(c), out=dst)
    else:
        np.copyto(dst, xh)


def _pad_pairs(padding: Any, nd: int, where: str) -> Pads:
    """Kernel-level padding: ``nd`` (before, after) pairs of ints >= 0, natural axis order."""
    try:
        pairs = tuple(tuple(p) for p in padding)
    except TypeError:
        pairs = ()
    if (len(pairs) != nd or any(len(p) != 2 for p in pairs)
            or not all(is_int(v) and v >= 0 for p in pairs for v in p)):
        raise ContractError(f"{where}: padding must be {nd} (before, after) pairs of ints >= 0 "
                            f"(one per spatial axis), got {padding!r}", where=where,
                            attr="padding")
    return tuple((int(b), int(a)) for b, a in pairs)


def resolve_padding(padding: int | str | Sequence[int], kernel_size: Sequence[int],
                    stride: int | Sequence[int] = 1, dilation: int | Sequence[int] = 1,
                    where: str = "Conv") -> Pads:
    """Turn a layer's ``padding`` into the kernel's (before, after) pair per spatial axis.

    Accepted forms (``nd = len(kernel_size)``):

    * an int ``p``: ``p`` on both sides of every axis;
    * a tuple of ``nd`` ints: symmetric per axis, natural axis order (``(pad_h, pad_w)``);
    * a tuple of ``2 * nd`` ints: per side in **tinygrad's order**, which is
      ``torch.nn.functional.pad``'s -- last axis first: ``(w_before, w_after, h_before,
      h_after)`` for 2-D;
    * ``'same'`` (any case): output size equals input size; stride must be 1 on every axis.
      Each axis gets ``dilation * (kernel - 1)`` pixels in total, the odd one after.

    Any other string, a negative pad, or a tuple of another length is a ContractError.
    """
    nd = len(kernel_size)
    if isinstance(padding, str):
        if padding.lower() != "same":
            raise ContractError(f"{where}: invalid padding string {padding!r}; the only string "
                                f"accepted is 'same'", where=where, attr="padding")
        strides = int_tuple(stride, nd, "stride", where, 1)
        if any(s != 1 for s in strides):
            raise ContractError(f"{where}: padding='same' needs stride 1 on every axis, got "
                                f"stride {stride!r}", where=where, attr="padding")
        dil = int_tuple(dilation, nd, "dilation", where, 1)
        totals = [d * (k - 1) for d, k in zip(dil, kernel_size)]
        return tuple((t // 2, t - t // 2) for t in totals)
    if is_int(padding):
        flat: tuple[int, ...] = (int(padding),) * nd
        pairs = tuple((p, p) for p in flat)
    else:
        try:
            flat = tuple(padding)
        except TypeError:
            flat = ()
        if not flat or not all(is_int(v) for v in flat) or len(flat) not in (nd, 2 * nd):
            raise ContractError(f"{where}: padding must be an int, 'same', or a tuple of {nd} "
                                f"or {2 * nd} ints, got {padding!r}", where=where,
                                attr="padding")
        flat = tuple(int(v) for v in flat)
        if len(flat) == nd:
            pairs = tuple((p, p) for p in flat)
        else:  # tinygrad / F.pad order: last axis first
            pairs = tuple((flat[2 * i], flat[2 * i + 1]) for i in range(nd))[::-1]
    if any(v < 0 for p in pairs for v in p):
        raise ContractError(f"{where}: padding must be >= 0, got {padding!r}", where=where,
                            attr="padding")
    return pairs


def _check_input(x: Any, nd: int, channels: int, where: str, wshape: tuple[int, ...],
                 groups: int) -> np.ndarray:
    check_f32(x, "input", where)
    if x.ndim != nd + 2:
        raise ShapeError(f"{where}: input must be {nd + 2}-D (N, C, *spatial) for weight "
                         f"{shape_str(wshape)}, got shape {shape_str(x.shape)}", where=where,
                         expected=f"{nd + 2}-D", got=x.shape)
    if x.shape[1] != channels:
        raise ShapeError(f"{where}: input {shape_str(x.shape)} has {x.shape[1]} channels but "
                         f"weight {shape_str(wshape)} with groups={groups} expects {channels}",
                         where=where, expected=channels, got=x.shape[1])
    return x


_SCRATCH = threading.local()


def _scratch(size: int) -> np.ndarray:
    """This thread's im2col memory, shared by every prepared conv: >= ``size`` float32s.

    One buffer for all layers rather than one per layer and input shape: a model's convs run
    one after another, so the next layer's im2col reuses memory that is still in cache, and
    the model's footprint shrinks by all but the largest im2col (benchmark model: 7.8 MB ->
    3.6 MB), which leaves more of the last-level cache to the large linear and LSTM weights.
    """
    buf = getattr(_SCRATCH, "buf", None)
    if buf is None or buf.size < size:
        buf = _SCRATCH.buf = np.empty(size, np.float32)
    return buf


class _ConvPlan:
    """What one prepared conv needs for one input shape: geometry and work buffers.

    Built on the first call with that shape (which also validates it) and kept per thread, so
    a repeated call does no shape arithmetic and allocates only its output. The im2col matrix
    lives in the thread's shared scratch memory (:func:`_scratch`); :meth:`bind`, called before
    each gather, points the views at it and rewrites its bias column of ones (another conv may
    have used the memory since; 6 us for the benchmark's largest, 8192 rows). A plan still
    bound to an outgrown scratch buffer keeps it alive until its next call rebinds.
    """

    __slots__ = ("out_shape", "pixels", "interior", "padded", "padded_view", "cols",
                 "cols_taps", "cols_gemm", "scratch", "shape", "kg", "has_bias", "groups",
                 "taps_shape", "tap_slices", "product", "total")

    def __init__(self, x_shape: tuple[int, ...], out_sp: tuple[int, ...],
                 pads: Pads, groups: int, kg: int, has_bias: bool,
                 taps_shape: tuple[int, ...], out_ch: int) -> None:
        n, spatial = x_shape[0], x_shape[2:]
        lead = (n,) + out_sp
        self.out_shape = lead + (out_ch,)
        self.pixels = prod(spatial)
        self.interior = (slice(None),) + tuple(slice(b, b + s) for (b, _), s in
                                               zip(pads, spatial))
        self.padded: np.ndarray | None = None
        self.padded_view: np.ndarray | None = None
        self.scratch: np.ndarray | None = None
        self.shape = lead + (groups, kg + has_bias)
        self.kg, self.has_bias, self.groups, self.taps_shape = kg, has_bias, groups, taps_shape
        self.tap_slices: list | None = None  # a depthwise conv's window of each tap
        self.product: np.ndarray | None = None  # and its float64 buffers for one tap's
        self.total: np.ndarray | None = None    # products and for their sum

    def bind(self) -> None:
        """Point ``cols``, ``cols_taps`` and ``cols_gemm`` at the scratch; write the ones."""
        size = prod(self.shape)
        buf = _scratch(size)
        kg, groups = self.kg, self.groups
        if buf is not self.scratch:
            self.scratch = buf
            self.cols = buf[:size].reshape(self.shape)
            lead = self.shape[:-2]
            # a view (copy=False raises rather than copy): the gather writes straight into cols
            self.cols_taps = np.reshape(self.cols[..., :kg], lead + (groups,) + self.taps_shape,
                                        copy=False)
            rows = prod(lead)
            if groups == 1:
                self.cols_gemm = self.cols.reshape(rows, self.shape[-1])
            else:  # (G, rows, Kg + 1): each group's matrix, rows strided by G * (Kg + 1)
                self.cols_gemm = self.cols.reshape(rows, groups, self.shape[-1]).transpose(1, 0, 2)
        if self.has_bias:
            self.cols[..., kg] = 1.0


def make_conv(weight: np.ndarray, bias: np.ndarray | None, *, stride: Sequence[int],
              padding: Sequence[Sequence[int]], dilation: Sequence[int], groups: int,
              where: str = "Conv") -> Callable[[np.ndarray], np.ndarray]:
    """Prepare a convolution once; return ``run(x) -> y``.

    ``weight`` is ``(out, in/groups, *kernel)`` float32, ``bias`` ``(out,)`` or None.
    ``stride`` and ``dilation`` have one int per spatial axis; ``padding`` one
    ``(before, after)`` pair per spatial axis in natural order (see :func:`resolve_padding`
    for the layer-level forms). ``x`` is ``(N, in, *spatial)`` float32 in any memory layout;
    ``y`` is ``(N, out, *out_spatial)`` float32 with channels-last memory (module docstring).

    The weights are copied and rearranged here, so later changes to the arrays passed in do not
    affect ``run``. ``run`` keeps work buffers per thread; outputs are always fresh arrays.
    Raises ContractError for bad attributes, DTypeError / ShapeError for bad tensors.
    """
    check_f32(weight, "weight", where)
    if weight.ndim < 3:
        raise ShapeError(f"{where}: weight must be (out, in/groups, *kernel) with at least one "
                         f"spatial axis, got shape {shape_str(weight.shape)}", where=where,
                         expected="(out, in/groups, *kernel)", got=weight.shape)
    wshape = tuple(int(s) for s in weight.shape)
    nd = weight.ndim - 2
    out_ch, cg, kernel = wshape[0], wshape[1], wshape[2:]
    groups = check_int(groups, "groups", where, 1)
    if out_ch % groups:
        raise ContractError(f"{where}: groups={groups} must divide the out channels {out_ch} of "
                            f"weight {shape_str(wshape)}", where=where, attr="groups")
    strides = int_tuple(stride, nd, "stride", where, 1)
    dil = int_tuple(dilation, nd, "dilation", where, 1)
    pads = _pad_pairs(padding, nd, where)
    check_param(bias, "bias", where, (out_ch,))
    og, kg = out_ch // groups, prod(kernel) * cg
    has_bias = bias is not None
    in_ch = cg * groups

    # (G, Og, Cg, taps) -> (G, taps, Cg, Og): rows follow the im2col column order (taps, Cg).
    wm = np.empty((groups, kg + has_bias, og), np.float32)
    wm[:, :kg] = weight.reshape(groups, og, cg, -1).transpose(0, 3, 2, 1).reshape(groups, kg, og)
    if has_bias:
        wm[:, kg] = bias.reshape(groups, og)
    wm.flags.writeable = False
    pointwise = groups == 1 and all(k == 1 for k in kernel) and all(s == 1 for s in strides) \
        and all(p == (0, 0) for p in pads)
    w_point = wm[0, :kg]
    # a depthwise conv (torch's groups=C, one output per channel): (taps, C) weights, one
    # multiply-add per tap over the channels-last input
    depthwise = cg == 1 and og == 1 and groups >= _DEPTHWISE_MIN_CHANNELS
    w_taps = np.ascontiguousarray(weight.reshape(groups, -1).T)
    kernel_taps = list(itertools.product(*(range(k) for k in kernel)))
    b_vec = None if bias is None else np.array(bias, dtype=np.float32)
    taps_shape = tuple(kernel) + (cg,)
    padded = any(p != (0, 0) for p in pads)
    to_last = (0,) + tuple(range(2, nd + 2)) + (1,)   # (N, C, *S) -> (N, *S, C), a view
    to_first = (0, nd + 1) + tuple(range(1, nd + 1))  # (N, *S, C) -> (N, C, *S), a view
    local = threading.local()

    def plan(x: np.ndarray) -> _ConvPlan:
        _check_input(x, nd, in_ch, where, wshape, groups)
        spatial = x.shape[2:]
        padded_shape = tuple(s + b + a for s, (b, a) in zip(spatial, pads))
        out_sp = tuple((p - d * (k - 1) - 1) // s + 1
                       for p, d, k, s in zip(padded_shape, dil, kernel, strides))
        if any(o < 1 for o in out_sp):
            raise ShapeError(f"{where}: input {shape_str(x.shape)} padded by {list(pads)} is "
                             f"smaller than the dilated kernel {shape_str(kernel)} "
                             f"(dilation {list(dil)}); output would be {shape_str(out_sp)}",
                             where=where, expected="spatial >= dilated kernel", got=x.shape)
        return _ConvPlan(x.shape, out_sp, pads, groups, kg, has_bias, taps_shape, out_ch)

    def run(x: np.ndarray) -> np.ndarray:
        if not isinstance(x, np.ndarray) or x.dtype != FLOAT32:
            check_f32(x, "input", where)
        cache = getattr(local, "cache", None)
        if cache is None:
            cache = local.cache = {}
        p = cache.get(x.shape)
        if p is None:
            if len(cache) >= _CACHE_SHAPES:
                cache.clear()
            p = cache[x.shape] = plan(x)
        xh = x.transpose(to_last)
        if pointwise:  # 1x1, stride 1, no padding: the input itself is the im2col matrix
            y = np.matmul(xh.reshape(x.shape[0], p.pixels, in_ch), w_point)
            if b_vec is not None:
                y += b_vec
            return y.reshape(p.out_shape).transpose(to_first)
        if padded or (in_ch > 1 and xh.strides[-1] != FLOAT32.itemsize):
            if p.padded is None:  # zero borders, written once; the interior every call
                p.padded = np.zeros(x.shape[:1] + tuple(
                    s + b + a for s, (b, a) in zip(x.shape[2:], pads)) + (in_ch,), np.float32)
                p.padded_view = _im2col_view(p.padded, p.out_shape[1:-1], kernel, strides, dil,
                                             groups, cg)
            _to_channels_last(p.padded[p.interior], x, xh)
            if depthwise:
                return _depthwise(p, p.padded, w_taps, b_vec, kernel_taps, strides, dil,
                                  to_first)
            view = p.padded_view
        else:  # channels-last already and nothing to pad: gather straight from the input
            if depthwise:
                return _depthwise(p, xh, w_taps, b_vec, kernel_taps, strides, dil, to_first)
            view = _im2col_view(xh, p.out_shape[1:-1], kernel, strides, dil, groups, cg)
        p.bind()
        np.copyto(p.cols_taps, view)
        if groups == 1:
            y = np.matmul(p.cols_gemm, wm[0])
        else:
            y = np.empty((p.cols_gemm.shape[1], groups, og), np.float32)
            np.matmul(p.cols_gemm, wm, out=y.transpose(1, 0, 2))  # strided, BLAS-able out
        return y.reshape(p.out_shape).transpose(to_first)

    run.__doc__ = f"Prepared {where}: weight {shape_str(wshape)}, stride {list(strides)}, " \
                  f"padding {[list(p) for p in pads]}, dilation {list(dil)}, groups {groups}."
    return run


def _depthwise(p: _ConvPlan, src: np.ndarray, w_taps: np.ndarray, bias: np.ndarray | None,
               taps: list, strides: Sequence[int], dil: Sequence[int],
               to_first: tuple[int, ...]) -> np.ndarray:
    """A depthwise conv from channels-last ``src`` (N, *S, C), padded: each tap's window of
    the input times its (C,) weights, added up in float64 and rounded once to the
    channels-last float32 output.

    The im2col path makes it a batch of C matrix-vector products; this is 2-3x faster on
    MobileNet's and EfficientNet's depthwise layers (3x3 and 5x5, 16 to 576 channels, 7x7 to
    112x112 maps; measured one conv at a time), and on par from 64 channels of a 4x4 map. In
    float64 it is also 2-4x closer to the exact result than the im2col path and than torch's
    float32 conv (a float32 sum of products rounded at every tap was as far off as torch's,
    enough for a randomly initialised MobileNetV4 to leave onnxruntime's tolerance). With
    fewer than :data:`_DEPTHWISE_MIN_CHANNELS` channels, or a channel multiplier, it is slower,
    and those keep the im2col path."""
    if p.tap_slices is None:
        p.tap_slices = [(slice(None),) + tuple(
            slice(o * d, o * d + s * (n - 1) + 1, s)
            for o, d, s, n in zip(offsets, dil, strides, p.out_shape[1:-1])) + (slice(None),)
            for offsets in taps]
        p.product = np.empty(p.out_shape, np.float64)
        p.total = np.empty(p.out_shape, np.float64)
    total, product = p.total, p.product
    for t, window in enumerate(p.tap_slices):
        if t == 0:
            np.multiply(src[window], w_taps[0], out=total, dtype=np.float64)
        else:
            np.multiply(src[window], w_taps[t], out=product, dtype=np.float64)
            total += product
    if bias is not None:
        total += bias
    return total.astype(np.float32).transpose(to_first)


def _im2col_view(src: np.ndarray, out_sp: tuple[int, ...], kernel: Sequence[int],
                 strides: Sequence[int], dil: Sequence[int], groups: int, cg: int) -> np.ndarray:
    """Read-only view (N, *out, G, *kernel, Cg) of a channels-last (N, *S, C) array."""
    sn, *ss, sc = src.strides
    shape = (src.shape[0],) + tuple(out_sp) + (groups,) + tuple(kernel) + (cg,)
    st = ((sn,) + tuple(s * t for s, t in zip(strides, ss)) + (cg * sc,)
          + tuple(d * t for d, t in zip(dil, ss)) + (sc,))
    return as_strided(src, shape, st, writeable=False)


def conv(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, *, stride: Sequence[int],
         padding: Sequence[Sequence[int]], dilation: Sequence[int], groups: int,
         where: str = "Conv") -> np.ndarray:
    """N-D convolution (cross-correlation, as torch): ``make_conv(...)(x)``. See make_conv."""
    return make_conv(weight, bias, stride=stride, padding=padding, dilation=dilation,
                     groups=groups, where=where)(x)


def make_conv_transpose(weight: np.ndarray, bias: np.ndarray | None, *, stride: Sequence[int],
                        padding: Sequence[int], output_padding: Sequence[int],
                        dilation: Sequence[int], groups: int,
                        where: str = "ConvTranspose") -> Callable[[np.ndarray], np.ndarray]:
    """Prepare a transposed convolution once (torch ``conv_transposeNd`` semantics).

    ``weight`` is ``(in, out/groups, *kernel)`` float32, ``bias`` ``(out,)`` or None;
    ``stride``, ``padding``, ``output_padding`` and ``dilation`` have one int per spatial axis.
    Output size per axis is torch's
    ``(in - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1``;
    ``output_padding`` must be smaller than stride or dilation on each axis.
    ``y`` has channels-last memory, like :func:`make_conv`'s.

    One BLAS GEMM maps every input pixel to its ``kernel x out`` patch; a loop over the kernel
    taps adds the patches into the output at their strided positions (col2im).
    """
    check_f32(weight, "weight", where)
    if weight.ndim < 3:
        raise ShapeError(f"{where}: weight must be (in, out/groups, *kernel) with at least one "
                         f"spatial axis, got shape {shape_str(weight.shape)}", where=where,
                         expected="(in, out/groups, *kernel)", got=weight.shape)
    wshape = tuple(int(s) for s in weight.shape)
    nd = weight.ndim - 2
    in_ch, og, kernel = wshape[0], wshape[1], wshape[2:]
    groups = check_int(groups, "groups", where, 1)
    if in_ch % groups:
        raise ContractError(f"{where}: groups={groups} must divide the in channels {in_ch} of "
                            f"weight {shape_str(wshape)}", where=where, attr="groups")
    strides = int_tuple(stride, nd, "stride", where, 1)
    dil = int_tuple(dilation, nd, "dilation", where, 1)
    pads = int_tuple(padding, nd, "padding", where, 0)
    opad = int_tuple(output_padding, nd, "output_padding", where, 0)
    for op, s, d in zip(opad, strides, dil):
        if op >= max(s, d):
            raise ContractError(f"{where}: output_padding {list(opad)} must be smaller than "
                                f"stride {list(strides)} or dilation {list(dil)} on each axis",
                                where=where, attr="output_padding")
    out_ch = og * groups
    check_param(bias, "bias", where, (out_ch,))
    cg = in_ch // groups
    # (G, Cg, Og, taps) -> (G, Cg, taps, Og): one GEMM gives every tap's output channels.
    wt = np.ascontiguousarray(
        weight.reshape(groups, cg, og, -1).transpose(0, 1, 3, 2).reshape(groups, cg, -1))
    wt.flags.writeable = False
    b_vec = None if bias is None else np.array(bias, dtype=np.float32)
    taps = list(itertools.product(*(range(k) for k in kernel)))

    def run(x: np.ndarray) -> np.ndarray:
        _check_input(x, nd, in_ch, where, wshape, groups)
        n, spatial = x.shape[0], x.shape[2:]
        full = tuple((s - 1) * st + d * (k - 1) + 1 + op
                     for s, st, d, k, op in zip(spatial, strides, dil, kernel, opad))
        out_sp = tuple(f - 2 * p for f, p in zip(full, pads))
        if any(s < 1 for s in spatial) or any(o < 1 for o in out_sp):
            raise ShapeError(f"{where}: input {shape_str(x.shape)} with padding {list(pads)} "
                             f"gives an empty output {shape_str(out_sp)}", where=where,
                             expected="non-empty output", got=x.shape)
        xr = np.moveaxis(x, 1, -1).reshape(n, prod(spatial), groups, cg)
        xr = xr.transpose(0, 2, 1, 3)  # (N, G, pixels, Cg): a view BLAS reads as it is
        patches = np.matmul(xr, wt).reshape((n, groups) + spatial + tuple(kernel) + (og,))
        acc = np.zeros((n,) + full + (groups, og), np.float32)
        lead = (slice(None),) * (2 + nd)
        for tap in taps:
            dst = acc[(slice(None),) + tuple(
                slice(t * d, t * d + (s - 1) * st + 1, st)
                for t, d, s, st in zip(tap, dil, spatial, strides))]
            dst += np.moveaxis(patches[lead + tap], 1, -2)
        y = acc[(slice(None),) + tuple(slice(p, p + o) for p, o in zip(pads, out_sp))]
        y = y.reshape((n,) + out_sp + (out_ch,))
        if b_vec is not None:
            y = y + b_vec
        return np.moveaxis(y, -1, 1)

    run.__doc__ = f"Prepared {where}: weight {shape_str(wshape)}, stride {list(strides)}, " \
                  f"padding {list(pads)}, output_padding {list(opad)}, dilation {list(dil)}, " \
                  f"groups {groups}."
    return run


def conv_transpose(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, *,
                   stride: Sequence[int], padding: Sequence[int],
                   output_padding: Sequence[int], dilation: Sequence[int], groups: int,
                   where: str = "ConvTranspose") -> np.ndarray:
    """N-D transposed convolution: ``make_conv_transpose(...)(x)``. See make_conv_transpose."""
    return make_conv_transpose(weight, bias, stride=stride, padding=padding,
                               output_padding=output_padding, dilation=dilation, groups=groups,
                               where=where)(x)


# --- layers ------------------------------------------------------------------------------------


def _kernel_tuple(kernel_size: int | Sequence[int], where: str) -> tuple[int, ...]:
    ks = (kernel_size, kernel_size) if is_int(kernel_size) else tuple(kernel_size)
    if not ks or not all(is_int(k) and k >= 1 for k in ks):
        raise ContractError(f"{where}: kernel_size must be an int or a tuple of ints >= 1, got "
                            f"{kernel_size!r}", where=where, attr="kernel_size")
    return tuple(int(k) for k in ks)


def _check_channels(in_channels: Any, out_channels: Any, groups: Any, where: str) -> None:
    check_int(in_channels, "in_channels", where, 1)
    check_int(out_channels, "out_channels", where, 1)
    check_int(groups, "groups", where, 1)
    if in_channels % groups or out_channels % groups:
        raise ContractError(f"{where}: groups={groups} must divide in_channels={in_channels} and "
                            f"out_channels={out_channels}", where=where, attr="groups")


class Conv2d:
    """Convolution layer (tinygrad ``nn.Conv2d``); the kernel tuple's rank is the spatial rank.

    ``weight`` ``(out_channels, in_channels/groups, *kernel_size)``, ``bias`` ``(out_channels,)``
    or None, both float32 drawn from U(-s, s) with ``s = 1/sqrt(in_channels * prod(kernel))``.
    ``padding``: see :func:`resolve_padding` (int, per-axis tuple, tinygrad per-side tuple, or
    ``'same'``); it is validated here, so a bad value fails at construction.
    """

    abi_op = "conv"

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, ...],
                 stride: int | tuple[int, ...] = 1, padding: int | tuple[int, ...] | str = 0,
                 dilation: int | tuple[int, ...] = 1, groups: int = 1, bias: bool = True, *,
                 rng: np.random.Generator | None = None) -> None:
        self.kernel_size = _kernel_tuple(kernel_size, self._where_for(kernel_size))
        _check_channels(in_channels, out_channels, groups, self._where)
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        self._kernel_attrs()  # validate stride/padding/dilation now, not at the first frame
        self._init_params(rng, bias)

    @staticmethod
    def _where_for(kernel_size: Any) -> str:
        nd = 2 if is_int(kernel_size) else len(tuple(kernel_size))
        return f"Conv{nd}d"

    @property
    def _where(self) -> str:
        return f"Conv{len(self.kernel_size)}d"

    def _init_params(self, rng: np.random.Generator | None, bias: bool) -> None:
        scale = 1 / math.sqrt(self.in_channels * prod(self.kernel_size))
        self.weight: np.ndarray = uniform(rng, self._weight_shape(), scale)
        self.bias: np.ndarray | None = uniform(rng, (self.out_channels,), scale) if bias else None

    def _weight_shape(self) -> tuple[int, ...]:
        return (self.out_channels, self.in_channels // self.groups) + self.kernel_size

    def _check_params(self) -> None:
        expected = self._weight_shape()
        w = check_f32(self.weight, "weight", self._where)
        if w.shape != expected:
            raise ShapeError(f"{self._where}: weight has shape {shape_str(w.shape)}, expected "
                             f"{shape_str(expected)}", where=self._where, expected=expected,
                             got=w.shape)
        check_param(self.bias, "bias", self._where, (self.out_channels,))

    def _kernel_attrs(self) -> dict[str, Any]:
        where, nd = self._where, len(self.kernel_size)
        return {"stride": int_tuple(self.stride, nd, "stride", where, 1),
                "padding": resolve_padding(self.padding, self.kernel_size, self.stride,
                                           self.dilation, where),
                "dilation": int_tuple(self.dilation, nd, "dilation", where, 1),
                "groups": check_int(self.groups, "groups", where, 1)}

    def __call__(self, x: np.ndarray) -> np.ndarray:
        self._check_params()
        return conv(x, self.weight, self.bias, **self._kernel_attrs(), where=self._where)

    def abi_attrs(self) -> dict[str, Any]:
        a = self._kernel_attrs()
        return {"stride": list(a["stride"]), "padding": [list(p) for p in a["padding"]],
                "dilation": list(a["dilation"]), "groups": a["groups"]}

    def abi_tensors(self) -> dict[str, np.ndarray | None]:
        return {"weight": self.weight, "bias": self.bias}


def Conv1d(in_channels: int, out_channels: int, kernel_size: int, stride: int = 1,
           padding: int | str | tuple[int, ...] = 0, dilation: int = 1, groups: int = 1,
           bias: bool = True, *, rng: np.random.Generator | None = None) -> Conv2d:
    """1-D convolution: a :class:`Conv2d` with a one-element kernel tuple (as tinygrad)."""
    return Conv2d(in_channels, out_channels, (kernel_size,), stride, padding, dilation, groups,
                  bias, rng=rng)


class ConvTranspose2d(Conv2d):
    """Transposed convolution layer (tinygrad ``nn.ConvTranspose2d``).

    ``weight`` is ``(in_channels, out_channels/groups, *kernel_size)`` -- re-created, not the
    Conv layout -- and is checked at every call: a weight of any other shape (a Conv weight in
    particular) is refused with ShapeError. ``padding`` is an int or one int per spatial axis
    (torch semantics); ``output_padding`` likewise.
    """

    abi_op = "conv_transpose"

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, ...],
                 stride: int | tuple[int, ...] = 1, padding: int | tuple[int, ...] = 0,
                 output_padding: int | tuple[int, ...] = 0, dilation: int | tuple[int, ...] = 1,
                 groups: int = 1, bias: bool = True, *,
                 rng: np.random.Generator | None = None) -> None:
        self.output_padding = output_padding
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, rng=rng)

    @staticmethod
    def _where_for(kernel_size: Any) -> str:
        nd = 2 if is_int(kernel_size) else len(tuple(kernel_size))
        return f"ConvTranspose{nd}d"

    @property
    def _where(self) -> str:
        return f"ConvTranspose{len(self.kernel_size)}d"

    def _weight_shape(self) -> tuple[int, ...]:
        return (self.in_channels, self.out_channels // self.groups) + self.kernel_size

    def _kernel_attrs(self) -> dict[str, Any]:
        where, nd = self._where, len(self.kernel_size)
        if isinstance(self.padding, str):
            raise ContractError(f"{where}: padding must be an int or {nd} ints, got "
                                f"{self.padding!r} (strings are not supported)", where=where,
                                attr="padding")
        stride = int_tuple(self.stride, nd, "stride", where, 1)
        dilation = int_tuple(self.dilation, nd, "dilation", where, 1)
        opad = int_tuple(self.output_padding, nd, "output_padding", where, 0)
        if any(op >= max(s, d) for op, s, d in zip(opad, stride, dilation)):
            raise ContractError(f"{where}: output_padding {list(opad)} must be smaller than "
                                f"stride {list(stride)} or dilation {list(dilation)} on each "
                                f"axis", where=where, attr="output_padding")
        return {"stride": stride, "padding": int_tuple(self.padding, nd, "padding", where, 0),
                "output_padding": opad, "dilation": dilation,
                "groups": check_int(self.groups, "groups", where, 1)}

    def __call__(self, x: np.ndarray) -> np.ndarray:
        self._check_params()
        return conv_transpose(x, self.weight, self.bias, **self._kernel_attrs(),
                              where=self._where)

    def abi_attrs(self) -> dict[str, Any]:
        a = self._kernel_attrs()
        return {k: (v if k == "groups" else list(v)) for k, v in a.items()}


def ConvTranspose1d(in_channels: int, out_channels: int, kernel_size: int, stride: int = 1,
                    padding: int = 0, output_padding: int = 0, dilation: int = 1, groups: int = 1,
                    bias: bool = True, *,
                    rng: np.random.Generator | None = None) -> ConvTranspose2d:
    """1-D transposed convolution: a :class:`ConvTranspose2d` with a one-element kernel tuple."""
    return ConvTranspose2d(in_channels, out_channels, (kernel_size,), stride, padding,
                           output_padding, dilation, groups, bias, rng=rng)
