"""Shape rules of the glue ops: good cases against numpy/torch, symbolic dims, refusals."""

import warnings

import numpy as np
import pytest
import torch

from abi.errors import ContractError, DTypeError, IndexRangeError, OpError, ShapeError
from abi.ops import glue
from abi.ops.table import TensorType, check_values, get_op, infer_shapes

T = TensorType
f32, f16, i64 = "float32", "float16", "int64"


def _torch_dynamic_quantize(a):
    """torch's per-tensor dynamic quantization to quint8: the codes as float32, the scale and
    the zero point as float32 scalars (the ABI's dynamic_quantize holds them so)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's quantized tensors, deprecated
        q = torch.quantize_per_tensor_dynamic(torch.from_numpy(a), torch.quint8, False)
    return (q.int_repr().float(), torch.tensor(q.q_scale(), dtype=torch.float32),
            torch.tensor(float(q.q_zero_point())))


def _torch_codes(quantize, *args):
    """The codes of torch's quantized tensor ``quantize(*args)`` as float32 (the ABI's
    quantize_linear holds them so)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's quantized tensors, deprecated
        return quantize(*args).int_repr().float()


def _torch_integer_linear(x, w, x_zp=None, w_zp=None):
    """torch's exact int64 sum of the codes less their zero points, wrapped to int32."""
    a = torch.from_numpy(x).long() - (0 if x_zp is None else int(x_zp))
    weight = torch.from_numpy(w).long()
    if w_zp is not None:
        weight = weight - torch.from_numpy(w_zp).long().reshape(-1, 1)
    return (a @ weight.T).to(torch.int32)


def infer(op, inputs, attrs=None):
    return infer_shapes(get_op(op), inputs, attrs or {})


def tt(a):
    return T(tuple(a.shape), str(a.dtype).removeprefix("torch."))


def z(*shape, dtype=np.float32):
    return np.zeros(shape, dtype)


def _Q(dtype):
    """A scale of 1 and a zero point of 0 of ``dtype``: one (scale, zero point) pair."""
    return [np.ones((), np.float32), np.zeros((), dtype)]


def _QT(dtype: str) -> list:
    """The types of one (scale, zero point) pair of ``dtype``'s codes."""
    return [T((), f32), T((), dtype)]


def _onnxruntime(op_type: str, codes_at: tuple, **attrs):
    """onnxruntime's com.microsoft ``op_type`` of the inputs (the codes at ``codes_at``)."""
    from tests.numpy_backend.test_qlinear import onnxruntime_run

    return lambda *arrays: onnxruntime_run(op_type, [f"i{k}" for k in range(len(arrays))],
                                           list(arrays), attrs, codes_at)


# (op, numpy inputs, attrs, numpy/torch reference producing the output(s))
GOOD = [
    ("identity", [z(2, 3, dtype=np.bool_)], {}, lambda a: a),
    ("relu", [z(2, 3, dtype=np.int32)], {}, lambda a: np.maximum(a, 0)),
    ("sigmoid", [z(2, 3)], {}, lambda a: 1 / (1 + np.exp(-a))),
    ("tanh", [z(4, dtype=np.float16)], {}, np.tanh),
    ("gelu", [z(2, 3)], {"approximate": "tanh"},
     lambda a: torch.nn.functional.gelu(torch.from_numpy(a), approximate="tanh").numpy()),
    ("elu", [z(2, 3)], {"alpha": 0.5}, lambda a: np.where(a > 0, a, 0.5 * np.expm1(a))),
    ("leaky_relu", [z(3, 1, dtype=np.float16)], {}, lambda a: np.where(a >= 0, a, 0.01 * a)),
    ("hard_sigmoid", [z(2, 2)], {"alpha": 0.25}, lambda a: np.clip(0.25 * a + 0.5, 0, 1)),
    ("hard_swish", [z(4)], {},
     lambda a: torch.nn.functional.hardswish(torch.from_numpy(a)).numpy()),
    ("softplus", [z(2, 3, 1)], {}, lambda a: np.logaddexp(0, a)),
    ("exp", [z(2, dtype=np.float64)], {}, np.exp),
    ("log", [z(2, 5) + 1], {}, np.log),
    ("sqrt", [z(5, 2)], {}, np.sqrt),
    ("reciprocal", [z(3) + 1], {}, np.reciprocal),
    ("erf", [z(1, 2)], {}, lambda a: torch.erf(torch.from_numpy(a)).numpy()),
    ("abs", [z(2, 3, dtype=np.uint8)], {}, np.abs),
    ("neg", [z(2, 3, dtype=np.int8)], {}, np.negative),
    ("prelu", [z(2, 3, 4, 4), z(3, 1, 1)], {}, lambda a, s: np.where(a >= 0, a, a * s)),
    ("pow", [z(2, 3), z(3)], {}, np.power),
    ("max", [z(2, 1, dtype=np.int32), z(4, dtype=np.int32)], {}, np.maximum),
    ("min", [z(1), z(2, 3)], {}, np.minimum),
    ("equal", [z(2, 1, dtype=np.bool_), z(3, dtype=np.bool_)], {}, np.equal),
    ("greater", [z(2, 3), z(1)], {}, np.greater),
    ("greater_equal", [z(4, dtype=np.int64), z(2, 1, dtype=np.int64)], {}, np.greater_equal),
    ("less", [z(1, 3), z(2, 1)], {}, np.less),
    ("less_equal", [z(3), z(3)], {}, np.less_equal),
    ("not", [z(2, 2, dtype=np.bool_)], {}, np.logical_not),
    ("where", [z(2, 1, dtype=np.bool_), z(3), z(4, 1, 1)], {}, np.where),
    ("and", [z(2, 1, dtype=np.bool_), z(3, dtype=np.bool_)], {}, np.logical_and),
    ("or", [z(1, dtype=np.bool_), z(2, 2, dtype=np.bool_)], {}, np.logical_or),
    ("floor", [z(2, 3)], {}, np.floor),
    ("ceil", [z(3, dtype=np.float16)], {}, np.ceil),
    ("round", [z(1, 4)], {}, np.round),
    ("sum", [z(2, 3, 4, dtype=np.int64)], {"axes": [0, -1]}, lambda a: a.sum(axis=(0, 2))),
    ("amax", [z(2, 3, 4)], {"axes": [1], "keepdim": True},
     lambda a: a.max(axis=1, keepdims=True)),
    ("amin", [z(5, 2, dtype=np.int32)], {"axes": [0]}, lambda a: a.min(axis=0)),
    ("amax", [z(2, 0, 4)], {"axes": [1]}, lambda a: a.max(axis=1, initial=-np.inf)),
    ("bitcast", [z(2, 3)], {"dtype": "int32"}, lambda a: a.view(np.int32)),
    ("bitcast", [z(4, dtype=np.uint8)], {"dtype": "int8"}, lambda a: a.view(np.int8)),
    ("amin", [z(0, 3, dtype=np.int8)], {"axes": [0], "keepdim": True},
     lambda a: a.min(axis=0, keepdims=True, initial=127)),
    ("argmax", [z(2, 3, 4)], {"axis": -1},
     lambda a: torch.argmax(torch.from_numpy(a), dim=-1).numpy()),
    ("sin", [z(2, 3)], {}, np.sin),
    ("cos", [z(4, dtype=np.float16)], {}, np.cos),
    ("sign", [z(2, 3, dtype=np.int32)], {}, np.sign),
    ("tan", [z(2, 3)], {}, np.tan),
    ("atan", [z(4, dtype=np.float16)], {}, np.arctan),
    ("asin", [z(2, 1, 3)], {}, np.arcsin),
    ("acos", [z(5)], {}, np.arccos),
    ("sinh", [z(3, 2)], {}, np.sinh),
    ("cosh", [z(1, 4)], {}, np.cosh),
    ("asinh", [z(2, 3, dtype=np.float16)], {}, np.arcsinh),
    ("acosh", [z(2, 3) + 1], {}, np.arccosh),
    ("atanh", [z(3)], {}, np.arctanh),
    ("isnan", [z(2, 3)], {}, lambda a: torch.isnan(torch.from_numpy(a)).numpy()),
    ("isinf", [z(4, 1, dtype=np.float16)], {"detect_negative": False},
     lambda a: torch.isposinf(torch.from_numpy(a)).numpy()),
    ("log_softmax", [z(2, 3)], {"axis": 0},
     lambda a: torch.log_softmax(torch.from_numpy(a), dim=0).numpy()),
    ("argmin", [z(2, 3, 4)], {"axis": 1, "keepdim": True},
     lambda a: torch.argmin(torch.from_numpy(a), dim=1, keepdim=True).numpy()),
    ("prod", [z(2, 3, 4, dtype=np.int32)], {"axes": [0, 2]},
     lambda a: a.prod(axis=(0, 2)).astype(np.int32)),
    ("mod", [z(2, 1, dtype=np.int64), z(3, dtype=np.int64) + 1], {}, np.remainder),
    ("mod", [z(2, 3), z(3) + 1], {"fmod": True}, np.fmod),
    ("int_div", [z(2, 1, dtype=np.int32), z(3, dtype=np.int32) + 1], {},
     lambda a, b: torch.div(torch.from_numpy(a), torch.from_numpy(b), rounding_mode="trunc")),
    ("bitwise_and", [z(2, 1, dtype=np.int64), z(3, dtype=np.int64)], {},
     lambda a, b: torch.bitwise_and(torch.from_numpy(a), torch.from_numpy(b))),
    ("bitwise_or", [z(4, dtype=np.uint8), z(2, 1, dtype=np.uint8)], {},
     lambda a, b: torch.bitwise_or(torch.from_numpy(a), torch.from_numpy(b))),
    ("bitwise_xor", [z(3, dtype=np.int8), z(dtype=np.int8)], {},
     lambda a, b: torch.bitwise_xor(torch.from_numpy(a), torch.from_numpy(b))),
    ("bitwise_not", [z(2, 3, dtype=np.int32)], {},
     lambda a: torch.bitwise_not(torch.from_numpy(a))),
    ("bit_shift", [z(2, 1, dtype=np.uint8), z(3, dtype=np.uint8)], {"direction": "left"},
     lambda a, b: torch.bitwise_left_shift(torch.from_numpy(a), torch.from_numpy(b))),
    ("bit_shift", [z(4, dtype=np.uint64), z(dtype=np.uint64)], {"direction": "right"},
     np.right_shift),
    ("cumsum", [z(2, 3, 4, dtype=np.int32)], {"axis": -2, "reverse": True},
     lambda a: np.cumsum(a, axis=1, dtype=a.dtype)),
    ("cumprod", [z(2, 3, 4, dtype=np.int8)], {"axis": 0, "exclusive": True},
     lambda a: np.cumprod(a, axis=0, dtype=a.dtype)),
    ("cumprod", [z(5)], {"axis": -1, "reverse": True},
     lambda a: torch.cumprod(torch.from_numpy(a), 0)),
    ("topk", [z(2, 5, 3)], {"k": 2, "axis": 1},
     lambda a: tuple(torch.topk(torch.from_numpy(a), 2, dim=1))),
    ("dynamic_quantize", [z(2, 5, 3)], {}, lambda a: _torch_dynamic_quantize(a)),
    ("qlinear_sigmoid", [z(2, 3, dtype=np.uint8), *_Q(np.uint8), *_Q(np.uint8)], {},
     _onnxruntime("QLinearSigmoid", (0,))),
    ("qlinear_leaky_relu", [z(4, dtype=np.int8), *_Q(np.int8), *_Q(np.int8)], {"alpha": 0.2},
     _onnxruntime("QLinearLeakyRelu", (0,), alpha=0.2)),
    ("qlinear_mul", [z(2, 1, 3, dtype=np.uint8), *_Q(np.uint8), z(4, 1, dtype=np.uint8),
                     *_Q(np.uint8), *_Q(np.uint8)], {}, _onnxruntime("QLinearMul", (0, 3))),
    ("qlinear_mul", [z(dtype=np.int8), *_Q(np.int8), z(3, dtype=np.int8), *_Q(np.int8),
                     *_Q(np.int8)], {}, _onnxruntime("QLinearMul", (0, 3))),
    ("qlinear_add", [z(5, 1, dtype=np.int8), *_Q(np.int8), z(2, 1, 3, dtype=np.int8),
                     *_Q(np.int8), *_Q(np.int8)], {}, _onnxruntime("QLinearAdd", (0, 3))),
    ("qlinear_softmax", [z(2, 3, 4, dtype=np.int8), *_Q(np.int8), *_Q(np.int8)],
     {"axis": 1, "trailing": True},
     _onnxruntime("QLinearSoftmax", (0,), axis=1, opset=12)),
    ("qlinear_global_average_pool", [z(2, 3, 4, 5, dtype=np.uint8), *_Q(np.uint8),
                                     *_Q(np.uint8)], {},
     _onnxruntime("QLinearGlobalAveragePool", (0,))),
    ("qlinear_global_average_pool", [z(2, 4, 5, 3, dtype=np.int8), *_Q(np.int8), *_Q(np.int8)],
     {"channels_last": True}, _onnxruntime("QLinearGlobalAveragePool", (0,), channels_last=1)),
    ("qlinear_average_pool", [z(2, 3, 7, 6, dtype=np.uint8), *_Q(np.uint8), *_Q(np.uint8)],
     {"kernel_size": [3, 2], "stride": [2, 2], "padding": [[1, 1], [0, 1]], "ceil_mode": True},
     _onnxruntime("QLinearAveragePool", (0,), kernel_shape=[3, 2], strides=[2, 2],
                  pads=[1, 0, 1, 1], ceil_mode=1)),
    ("qlinear_average_pool", [z(2, 5, 4, 3, dtype=np.int8), *_Q(np.int8), *_Q(np.int8)],
     {"kernel_size": [2, 2], "stride": [1, 2], "padding": [[1, 0], [1, 1]],
      "count_include_pad": True, "channels_last": True},
     _onnxruntime("QLinearAveragePool", (0,), kernel_shape=[2, 2], strides=[1, 2],
                  pads=[1, 1, 0, 1], count_include_pad=1, channels_last=1)),
    ("qlinear_concat", [*_Q(np.uint8), z(2, 3, dtype=np.uint8), *_Q(np.uint8),
                        z(2, 1, dtype=np.uint8), *_Q(np.uint8)], {"axis": -1},
     _onnxruntime("QLinearConcat", (2, 5), axis=-1)),
    ("integer_linear", [z(2, 5, 3, dtype=np.uint8), z(4, 3, dtype=np.int8)], {},
     _torch_integer_linear),
    ("integer_linear", [z(3, dtype=np.int8), z(4, 3, dtype=np.uint8), z(dtype=np.int8),
                        z(4, dtype=np.uint8)], {}, _torch_integer_linear),
    ("integer_linear", [z(2, 0, dtype=np.uint8), z(6, 0, dtype=np.uint8), z(dtype=np.uint8),
                        z(dtype=np.uint8)], {}, _torch_integer_linear),
    ("det", [z(2, 4, 3, 3)], {}, lambda a: torch.linalg.det(torch.from_numpy(a))),
    ("det", [z(1, 1)], {}, lambda a: torch.linalg.det(torch.from_numpy(a))),
    ("add", [z(2, 1, 4), z(3, 1)], {}, np.add),
    ("sub", [z(5, dtype=np.int64), z(2, 1, dtype=np.int64)], {}, np.subtract),
    ("mul", [z(1), z(2, 3)], {}, np.multiply),
    ("div", [z(2, 3), np.ones((), np.float32)], {}, np.divide),
    ("matmul", [z(2, 1, 3, 4), z(5, 4, 6)], {}, np.matmul),
    ("matmul", [z(4), z(3, 4, 6)], {}, np.matmul),
    ("matmul", [z(3, 4), z(4)], {}, np.matmul),
    ("matmul", [z(4), z(4)], {}, np.matmul),
    ("concat", [z(1, 512), z(1, 32)], {"axis": 1}, lambda *a: np.concatenate(a, axis=1)),
    ("concat", [z(2, 3), z(4, 3), z(0, 3)], {"axis": -2},
     lambda *a: np.concatenate(a, axis=-2)),
    ("reshape", [z(2, 3, 4)], {"shape": [4, -1]}, lambda a: a.reshape(4, -1)),
    ("reshape", [z(2, 0, 4)], {"shape": [0, 5]}, lambda a: a.reshape(0, 5)),
    ("flatten", [z(1, 32, 8, 16)], {}, lambda a: torch.flatten(torch.from_numpy(a), 1)),
    ("flatten", [z()], {"start_dim": 0}, lambda a: torch.flatten(torch.from_numpy(a))),
    ("transpose", [z(1, 3, 4, 5)], {"perm": [0, 2, 3, 1]},
     lambda a: np.transpose(a, (0, 2, 3, 1))),
    ("slice", [z(5, 6, 7)], {"starts": [1, 100], "ends": [-1, -100], "axes": [2, 0],
                             "steps": [2, -1]},
     lambda a: a[100:-100:-1, :, 1:-1:2]),
    ("slice", [z(5, 6, 7)], {"starts": [-100], "ends": [100], "axes": [0], "steps": [-1]},
     lambda a: a[-100:100:-1]),
    ("split", [z(4, 10)], {"axis": 1, "sizes": [3, 0, 7]},
     lambda a: tuple(np.split(a, [3, 3], axis=1))),
    ("pad", [z(2, 3, 4)], {"pads": [[0, 0], [1, 2], [2, 3]], "mode": "reflect"},
     lambda a: np.pad(a, [(0, 0), (1, 2), (2, 3)], mode="reflect")),
    ("cast", [z(2, 3)], {"dtype": "float16"}, lambda a: a.astype(np.float16)),
    ("clip", [z(2, 3, dtype=np.int8)], {"min": 0, "max": 5}, lambda a: np.clip(a, 0, 5)),
    ("softmax", [z(2, 3)], {"axis": 0}, lambda a: np.exp(a) / np.exp(a).sum(0, keepdims=True)),
    ("mean", [z(2, 3, 4, 5)], {"axes": [-1, 1]}, lambda a: a.mean(axis=(-1, 1))),
    ("mean", [z(2, 3, 4, 5)], {"axes": [2, 3], "keepdim": True},
     lambda a: a.mean(axis=(2, 3), keepdims=True)),
    ("resize", [z(2, 3, 4, 5)], {"size": [6, 7], "scales": [1.5, 1.5], "mode": "linear"},
     lambda a: torch.nn.functional.interpolate(torch.from_numpy(a), scale_factor=1.5,
                                               mode="bilinear")),
    ("resize", [z(1, 2, 3, 4, 5)], {"size": [6, 8, 5], "scales": [2.0, 2.0, 1.0],
                                    "mode": "linear"},
     lambda a: torch.nn.functional.interpolate(torch.from_numpy(a), scale_factor=(2.0, 2.0, 1.0),
                                               mode="trilinear")),
    ("resize", [z(1, 2, 9)], {"size": [4]},
     lambda a: torch.nn.functional.interpolate(torch.from_numpy(a), size=4)),
    ("resize", [z(2, 3, 4, 5)], {"size": [2, 12], "scales": [0.5, 2.5], "mode": "cubic",
                                 "cubic_coeff_a": -0.5, "exclude_outside": True},
     lambda a: torch.nn.functional.interpolate(torch.from_numpy(a), scale_factor=(0.5, 2.5),
                                               mode="bicubic")),
    ("grid_sample", [z(2, 3, 4, 5, 6), z(2, 6, 7, 3, 3)], {},
     lambda a, g: torch.nn.functional.grid_sample(torch.from_numpy(a), torch.from_numpy(g),
                                                  align_corners=False)),
    ("grid_sample", [z(2, 3, 4, 5), z(2, 6, 7, 2)], {"mode": "nearest"},
     lambda a, g: torch.nn.functional.grid_sample(torch.from_numpy(a), torch.from_numpy(g),
                                                  mode="nearest", align_corners=False)),
    ("grid_sample", [z(1, 2, 1, 1, dtype=np.float64), z(1, 3, 1, 2, dtype=np.float64)],
     {"padding_mode": "reflection", "align_corners": True},
     lambda a, g: torch.nn.functional.grid_sample(torch.from_numpy(a), torch.from_numpy(g),
                                                  padding_mode="reflection",
                                                  align_corners=True)),
    ("quantize_linear", [z(2, 3, 4), np.ones((), np.float32)], {"dtype": "uint8"},
     lambda a, scale: _torch_codes(torch.quantize_per_tensor, torch.from_numpy(a), float(scale),
                                   0, torch.quint8)),
    ("quantize_linear", [z(2, 3, 4), np.ones((3, 1), np.float32), z(3, 1)], {"dtype": "int8"},
     lambda a, scale, zp: _torch_codes(torch.quantize_per_channel, torch.from_numpy(a),
                                       torch.ones(3, dtype=torch.float64),
                                       torch.zeros(3, dtype=torch.long), 1, torch.qint8)),
    ("max_pool", [z(1, 2, 7, 8)], {"kernel_size": [3, 2], "stride": [2, 2],
                                   "padding": [[1, 1], [0, 0]], "dilation": [1, 1]},
     lambda a: torch.nn.functional.max_pool2d(torch.from_numpy(a), (3, 2), 2, (1, 0))),
    ("max_pool_with_indices", [z(1, 2, 7, 8)], {"kernel_size": [3, 2], "stride": [2, 2],
                                                "padding": [[1, 1], [0, 0]],
                                                "dilation": [1, 2], "ceil_mode": True},
     lambda a: torch.nn.functional.max_pool2d(torch.from_numpy(a), (3, 2), 2, (1, 0), (1, 2),
                                              ceil_mode=True, return_indices=True)),
    ("gather", [z(3, 4, 5), np.zeros((2, 3), np.int64)], {"axis": 1},
     lambda a, i: torch.from_numpy(a)[:, torch.from_numpy(i)]),
    ("gather", [z(3, 4, 5, dtype=np.int32), np.zeros((), np.int64)], {"axis": -1},
     lambda a, i: torch.from_numpy(a)[..., 0]),
    ("unflatten", [z(2, 12, 3)], {"axis": 1, "sizes": [3, -1]},
     lambda a: torch.from_numpy(a).unflatten(1, (3, -1))),
    ("unflatten", [z(12, 3), z(4, 5, 3, dtype=np.uint8)],
     {"axis": 0, "sizes": [-1, -1, -1], "like_axes": [0, -1, 2]},
     lambda a, like: torch.from_numpy(a).unflatten(0, (4, -1, 3))),
    ("gather_elements", [z(3, 4, 5), np.zeros((2, 4, 3), np.int64)], {"axis": -1},
     lambda a, i: torch.gather(torch.from_numpy(a), -1, torch.from_numpy(i))),
    ("scatter_elements", [z(3, 4, 5), np.zeros((2, 4, 3), np.int64), z(2, 4, 3)],
     {"axis": -1}, lambda a, i, u: torch.scatter(torch.from_numpy(a), -1, torch.from_numpy(i),
                                                 torch.from_numpy(u))),
    ("scatter_elements", [z(3, 4, dtype=np.int32), np.zeros((5, 2), np.int64),
                          z(5, 2, dtype=np.int32)], {"axis": 0, "reduction": "max"},
     lambda a, i, u: torch.scatter_reduce(torch.from_numpy(a), 0, torch.from_numpy(i),
                                          torch.from_numpy(u), "amax")),
    ("expand", [z(3, 1)], {"shape": [2, 1, 4]}, lambda a: torch.from_numpy(a).expand(2, 3, 4)),
    ("expand", [z(3, 4, dtype=np.bool_)], {"shape": [1, 1]}, lambda a: a),  # ONNX: both ways
    ("tile", [z(2, 1, 3)], {"repeats": [2, 3, 1]}, lambda a: torch.from_numpy(a).repeat(2, 3, 1)),
    ("avg_pool", [z(1, 2, 7)], {"kernel_size": [3], "stride": [2], "padding": [[1, 1]],
                                "ceil_mode": True},
     lambda a: torch.nn.functional.avg_pool1d(torch.from_numpy(a), 3, 2, 1, ceil_mode=True)),
    ("avg_pool", [z(2, 3, 5, 6, 7)], {"kernel_size": [3, 2, 3], "stride": [2, 1, 2],
                                      "padding": [[1, 1], [0, 0], [1, 1]], "ceil_mode": True},
     lambda a: torch.nn.functional.avg_pool3d(torch.from_numpy(a), (3, 2, 3), (2, 1, 2),
                                              (1, 0, 1), ceil_mode=True)),
    ("max_pool", [z(1, 2, 5, 6, 7)], {"kernel_size": [2, 3, 2], "stride": [1, 2, 2],
                                      "padding": [[1, 1], [1, 1], [0, 0]],
                                      "dilation": [2, 1, 1], "ceil_mode": True},
     lambda a: torch.nn.functional.max_pool3d(torch.from_numpy(a), (2, 3, 2), (1, 2, 2),
                                              (1, 1, 0), (2, 1, 1), ceil_mode=True)),
    ("max_pool_with_indices", [z(1, 2, 5, 6, 7)], {"kernel_size": [3, 3, 2],
                                                   "stride": [2, 2, 2],
                                                   "padding": [[1, 1], [0, 0], [1, 1]],
                                                   "dilation": [1, 2, 1]},
     lambda a: torch.nn.functional.max_pool3d(torch.from_numpy(a), (3, 3, 2), 2, (1, 0, 1),
                                              (1, 2, 1), return_indices=True)),
]


@pytest.mark.parametrize("case", GOOD, ids=[c[0] for c in GOOD])
def test_good_inputs_match_the_reference(case):
    op, arrays, attrs, reference = case
    expected = reference(*arrays)
    expected = [tt(np.asarray(e) if not isinstance(e, torch.Tensor) else e)
                for e in (expected if isinstance(expected, tuple) else (expected,))]
    assert infer(op, [tt(a) for a in arrays], attrs) == expected


def test_every_glue_op_has_a_good_case_and_a_refusal():
    names = {op.name for op in glue.OPS}
    assert {c[0] for c in GOOD} == names
    assert {c[0] for c in REFUSALS} == names


def test_symbolic_dims():
    assert infer("topk", [T(("N", "L"), i64)], {"k": 3}) == [T(("N", 3), i64), T(("N", 3), i64)]
    assert infer("topk", [T(("N", "L"), f32)], {"k": -1}) == [T(("N", "L"), f32),
                                                              T(("N", "L"), i64)]
    assert infer("det", [T(("N", "n", "n"), f32)]) == [T(("N",), f32)]
    assert infer("dynamic_quantize", [T(("N", 4, "M"), f32)]) == [T(("N", 4, "M"), f32),
                                                                  T((), f32), T((), f32)]
    assert infer("integer_linear", [T(("N", "L", 8), "uint8"), T((5, 8), "int8"), T((), "uint8"),
                                    T((5,), "int8")]) == [T(("N", "L", 5), "int32")]
    assert infer("integer_linear", [T(("N", "K"), "uint8"), T((5, "K"), "uint8")]) == [
        T(("N", 5), "int32")]
    assert infer("cumprod", [T(("N", "L"), i64)], {"axis": 1}) == [T(("N", "L"), i64)]
    assert infer("add", [T(("N", 3), f32), T((3,), f32)]) == [T(("N", 3), f32)]
    assert infer("mul", [T(("N", 1), f32), T((1, 4), f32)]) == [T(("N", 4), f32)]
    assert infer("matmul", [T(("B", "M", 4), f32), T((4, 6), f32)]) == [T(("B", "M", 6), f32)]
    assert infer("concat", [T(("N", 512), f32), T(("N", 32), f32)], {"axis": 1}) == [
        T(("N", 544), f32)]
    assert infer("concat", [T(("a", 3), f32), T(("b", 3), f32), T((2, 3), f32)],
                 {"axis": 0}) == [T(("a+b+2", 3), f32)]
    assert infer("flatten", [T(("N", 32, 4, 8), f32)]) == [T(("N", 1024), f32)]
    assert infer("flatten", [T(("N", 32, "H", "W"), f32)]) == [T(("N", "32*H*W"), f32)]
    assert infer("reshape", [T(("N", 64), f32)], {"shape": [-1, 8]}) == [
        T(("8*N", 8), f32)]  # (64*N)//8, an exact division
    assert infer("transpose", [T(("N", "C", "H", "W"), f32)], {"perm": [0, 2, 3, 1]}) == [
        T(("N", "H", "W", "C"), f32)]
    assert infer("pad", [T(("N", "H"), f32)], {"pads": [[0, 0], [1, 1]]}) == [
        T(("N", "H+2"), f32)]
    assert infer("slice", [T(("N", 10), f32)], {"starts": [2], "ends": [5], "axes": [1]}) == [
        T(("N", 3), f32)]
    assert infer("split", [T(("N", 10), f32)], {"axis": 0, "sizes": [1, 2]}) == [
        T((1, 10), f32), T((2, 10), f32)]
    pool = {"kernel_size": [3, 3], "stride": [2, 2], "padding": [[1, 1], [1, 1]],
            "dilation": [1, 1]}
    assert infer("max_pool", [T(("N", 8, "H", 16), f32)], pool) == [
        T(("N", 8, "(H-1)//2+1", 8), f32)]
    codes = [T((), f32), T((), "uint8"), T((), f32), T((), "uint8")]
    assert infer("qlinear_global_average_pool", [T(("N", 8, "H", "W"), "uint8"), *codes],
                 {}) == [T(("N", 8, 1, 1), "uint8")]
    assert infer("qlinear_global_average_pool", [T(("N", "H", "W", 8), "uint8"), *codes],
                 {"channels_last": True}) == [T(("N", 1, 1, 8), "uint8")]
    average = {"kernel_size": [3, 3], "stride": [2, 2], "padding": [[1, 1], [1, 1]]}
    assert infer("qlinear_average_pool", [T(("N", 8, "H", 16), "uint8"), *codes],
                 average) == [T(("N", 8, "(H-1)//2+1", 8), "uint8")]
    assert infer("qlinear_average_pool", [T(("N", "H", 16, 8), "uint8"), *codes],
                 {**average, "channels_last": True}) == [T(("N", "(H-1)//2+1", 8, 8), "uint8")]
    assert infer("max_pool_with_indices", [T(("N", 8, "H", 16), f32)], pool) == [
        T(("N", 8, "(H-1)//2+1", 8), f32), T(("N", 8, "(H-1)//2+1", 8), i64)]
    for codes in ("uint8", "int8"):  # a quantized model's codes, in their dtype
        assert infer("max_pool", [T(("N", 8, "H", 16), codes)], pool) == [
            T(("N", 8, "(H-1)//2+1", 8), codes)]
    pool3d = {"kernel_size": [2, 2, 2], "stride": [2, 2, 2], "padding": [[0, 0]] * 3}
    assert infer("avg_pool", [T(("N", 8, "D", 6, 16), f32)], pool3d) == [
        T(("N", 8, "(D-2)//2+1", 3, 8), f32)]
    assert infer("mean", [T(("N", 8, "H", "W"), f32)], {"axes": [2, 3]}) == [T(("N", 8), f32)]
    assert infer("resize", [T(("N", 3, 4, 5), f32)], {"size": [8, 10], "scales": [2.0, 2.0]}
                 ) == [T(("N", 3, 8, 10), f32)]
    assert infer("resize", [T(("N", 3, "L"), f32)], {"size": [7]}) == [T(("N", 3, 7), f32)]
    for codes in ("uint8", "int8"):  # nearest copies a quantized model's codes as they are
        assert infer("resize", [T(("N", 3, 4, 5), codes)], {"size": [8, 10], "scales": [2.0, 2.0],
                                                           "mode": "nearest"}) == [
            T(("N", 3, 8, 10), codes)]
    # -1 with scales: floor(in * scale) when the call runs, exact: (in*k)//2**m
    assert infer("resize", [T(("N", 3, "H", "W", 5), f32)],
                 {"size": [-1, -1, 7], "scales": [2.0, 0.375, 1.5]}) == [
        T(("N", 3, "H*2", "(W*3)//8", 7), f32)]
    assert infer("resize", [T(("N", 3, 4), f32)], {"size": [-1], "scales": [1.5]}) == [
        T(("N", 3, 6), f32)]
    assert infer("resize", [T(("N", 3, "L"), f32)], {"size": [-1], "scales": [0.5]}) == [
        T(("N", 3, "L//2"), f32)]
    # sizes that like gives: its dims there
    assert infer("resize", [T(("N", 3, "H", "W"), f32), T(("N", 8, "h", "w"), f32)],
                 {"size": [-1, 5], "like_axes": [3, -1]}) == [T(("N", 3, "w", 5), f32)]
    assert infer("grid_sample", [T(("N", 3, "H", "W"), f32), T(("N", 6, 7, 2), f32)]) == [
        T(("N", 3, 6, 7), f32)]
    assert infer("grid_sample", [T(("N", 3, 4, 5), f32), T((2, "Ho", "Wo", 2), f32)]) == [
        T((2, 3, "Ho", "Wo"), f32)]
    assert infer("grid_sample", [T((2, 3, 4, 5), f32), T(("N", 6, 7, 2), f32)]) == [
        T((2, 3, 6, 7), f32)]
    assert infer("gather", [T(("N", 4, "W"), f32), T((2, 2), i64)], {"axis": 1}) == [
        T(("N", 2, 2, "W"), f32)]
    assert infer("expand", [T(("N", 1, "W"), f32)], {"shape": [2, 1, 3, 1]}) == [
        T((2, "N", 3, "W"), f32)]
    assert infer("tile", [T(("N", 3), f32)], {"repeats": [2, 1]}) == [T(("N*2", 3), f32)]
    assert infer("unflatten", [T(("N", "L", 48), f32)], {"axis": 2, "sizes": [3, 16]}) == [
        T(("N", "L", 3, 16), f32)]
    assert infer("unflatten", [T(("N*2", 8), f32)], {"axis": 0, "sizes": [-1, 2]}) == [
        T(("N", 2, 8), f32)]
    # sizes like gives: (L*N, 16) back to (L, N, 16); a -1 left beside them is what they leave
    assert infer("unflatten", [T(("L*N", 16), f32), T(("L", "N", 16), f32)],
                 {"axis": 0, "sizes": [-1, -1], "like_axes": [0, 1]}) == [T(("L", "N", 16), f32)]
    assert infer("unflatten", [T((3, "16*L*N"), f32), T(("N", "L"), "bool")],
                 {"axis": 1, "sizes": [-1, -1, 8], "like_axes": [1, -1, -1]}) == [
        T((3, "L", "2*N", 8), f32)]
    # not known equal when the call runs (a sum): left to the call
    assert infer("unflatten", [T(("L+1", 4), f32), T(("L", 1), f32)],
                 {"axis": 0, "sizes": [-1, 1], "like_axes": [0, -1]}) == [T(("L", 1, 4), f32)]
    # bounds like gives: the length is end - start, the dim where no end is given
    assert infer("slice", [T(("N", "h", 3), f32), T(("h//2",), "bool")],
                 {"starts": [0], "ends": [0], "axes": [1], "like_ends": [0]}) == [
        T(("N", "h//2", 3), f32)]
    assert infer("slice", [T(("N", "h", 3), f32), T(("(h+1)//2",), "bool")],
                 {"starts": [0], "ends": [1 << 62], "axes": [1], "like_starts": [0]}) == [
        T(("N", "h-((h+1)//2)", 3), f32)]
    # on a fixed axis, an end like gives after a start >= 0 (a table's first rows)
    assert infer("slice", [T((1, 512), i64), T(("B", "L"), i64)],
                 {"starts": [1], "ends": [0], "axes": [1], "like_ends": [1]}) == [
        T((1, "L-1"), i64)]
    # gather_elements and scatter_elements along a symbolic dim: the indices are checked when
    # the call sizes it
    assert infer("gather_elements", [T(("N", "L", 4), f32), T(("N", 2, 4), i64)],
                 {"axis": 1}) == [T(("N", 2, 4), f32)]
    assert infer("scatter_elements", [T(("N", "L", 4), f32), T(("N", 2, 4), i64),
                                      T(("N", 2, 4), f32)], {"axis": 1}) == [T(("N", "L", 4), f32)]


# --- refusals ---------------------------------------------------------------------------------

POOL = {"kernel_size": [3], "stride": [1], "padding": [[1, 1]], "dilation": [1]}
APOOL = {"kernel_size": [3], "stride": [1], "padding": [[1, 1]]}

REFUSALS = [
    ("identity", [], {}, ContractError, "identity: missing required input 'x'"),
    ("relu", [T((2,), "bool")], {}, DTypeError, "relu: x must be a numeric tensor, got bool"),
    ("sigmoid", [T((2,), i64)], {}, DTypeError,
     "sigmoid: x must be a float tensor (float16, float32, float64), got int64"),
    ("tanh", [T((2,), "uint8")], {}, DTypeError, "tanh: x must be a float tensor"),
    ("gelu", [T((2,), f32)], {"approximate": "erf"}, OpError,
     "op 'gelu' v1: attribute 'approximate' must be one of 'none', 'tanh', got 'erf'"),
    ("elu", [T((2,), i64)], {}, DTypeError, "elu: x must be a float tensor"),
    ("leaky_relu", [T((2,), f32)], {"alpha": float("inf")}, OpError,
     "op 'leaky_relu' v1: attribute 'alpha' must be in [-1e+30, 1e+30], got inf"),
    ("hard_sigmoid", [T((2,), f32)], {"beta": "half"}, OpError,
     "op 'hard_sigmoid' v1: attribute 'beta' must be a float, got 'half'"),
    ("hard_swish", [T((2,), "int32")], {}, DTypeError, "hard_swish: x must be a float tensor"),
    ("softplus", [T((2,), "bool")], {}, DTypeError, "softplus: x must be a float tensor"),
    ("exp", [T((2,), "uint8")], {}, DTypeError, "exp: x must be a float tensor"),
    ("log", [T((2,), i64)], {}, DTypeError, "log: x must be a float tensor"),
    ("sqrt", [T((2,), i64)], {}, DTypeError, "sqrt: x must be a float tensor"),
    ("reciprocal", [T((2,), "int8")], {}, DTypeError, "reciprocal: x must be a float tensor"),
    ("erf", [T((2,), i64)], {}, DTypeError, "erf: x must be a float tensor"),
    ("abs", [T((2,), "bool")], {}, DTypeError, "abs: x must be a numeric tensor, got bool"),
    ("neg", [T((2,), "uint16")], {}, DTypeError,
     "neg: x must be a signed integer or float tensor, got uint16"),
    ("prelu", [T((2, 3), f32), T((2, 1, 3), f32)], {}, ShapeError,
     "prelu: slope shape (2, 1, 3) must broadcast to x's shape (2, 3)"),
    ("pow", [T((2,), i64), T((2,), i64)], {}, DTypeError, "pow: a must be a float tensor"),
    ("max", [T((2,), f32), T((2,), i64)], {}, DTypeError,
     "max: b must have the dtype of a (float32), got int64"),
    ("min", [T((2, 3), f32), T((2,), f32)], {}, ShapeError,
     "min: shapes (2, 3) and (2,) do not broadcast"),
    ("equal", [T((2,), f32), T((2,), "bool")], {}, DTypeError,
     "equal: b must have the dtype of a (float32), got bool"),
    ("greater", [T((2,), "bool"), T((2,), "bool")], {}, DTypeError,
     "greater: a must be a numeric tensor, got bool"),
    ("greater_equal", [T((2, 3), f32), T((4,), f32)], {}, ShapeError,
     "greater_equal: shapes (2, 3) and (4,) do not broadcast"),
    ("less", [T((2,), i64), T((2,), f32)], {}, DTypeError,
     "less: b must have the dtype of a (int64), got float32"),
    ("less_equal", [T((2,), f32)], {}, ContractError, "less_equal: missing required input 'b'"),
    ("not", [T((2,), "int8")], {}, DTypeError, "not: x must be a bool tensor, got int8"),
    ("and", [T((2,), "bool"), T((2,), i64)], {}, DTypeError,
     "and: b must be a bool tensor, got int64"),
    ("or", [T((2,), "bool"), T((3,), "bool")], {}, ShapeError,
     "or: shapes (2,) and (3,) do not broadcast"),
    ("floor", [T((2,), i64)], {}, DTypeError, "floor: x must be a float tensor"),
    ("ceil", [T((2,), "bool")], {}, DTypeError, "ceil: x must be a float tensor"),
    ("round", [T((2,), "int32")], {}, DTypeError, "round: x must be a float tensor"),
    ("gather", [T((2, 3), f32), T((2,), "int32")], {}, DTypeError,
     "gather: indices must be an int64 tensor, got int32"),
    ("gather", [T((2, "N"), f32), T((), i64)], {"axis": 1}, ShapeError,
     "gather: axis 1 of x shape (2, N) is symbolic; the indices are checked against a fixed dim"),
    ("gather", [T((), f32), T((), i64)], {}, ShapeError, "gather: x must have rank >= 1"),
    ("gather", [T((2, 3), f32), T((), i64)], {"axis": 2}, ContractError,
     "gather: attribute 'axis' is 2, out of range for rank 2"),
    ("expand", [T((3, 4), f32)], {"shape": [2, 4]}, ShapeError,
     "expand: shapes (3, 4) and (2, 4) do not broadcast"),
    ("expand", [T(("N", 1), f32)], {"shape": [1 << 20, 1 << 20]}, ShapeError,
     "expand: the output shape (1048576, 1048576) would have 1099511627776 elements, above the "
     "cap of 2147483648"),
    ("expand", [T((2,), f32)], {"shape": [-1]}, OpError,
     "attribute 'shape' must have every entry >= 0"),
    ("tile", [T((2, 3), f32)], {"repeats": [2]}, ContractError,
     "tile: attribute 'repeats' has 1 entries but x shape (2, 3) has 2 axes and needs 2"),
    ("tile", [T((4, 4), f32)], {"repeats": [1 << 15, 1 << 15]}, ShapeError,
     "tile: the output shape (131072, 131072) would have 17179869184 elements, above the cap"),
    ("sum", [T((2,), "bool")], {"axes": [0]}, DTypeError, "sum: x must be a numeric tensor"),
    ("amax", [T((2, 3), "bool")], {"axes": [1]}, DTypeError, "amax: x must be a numeric"),
    ("bitcast", [T((2, 3), f32)], {"dtype": "int64"}, DTypeError,
     "bitcast: x of dtype float32 (4 bytes) and dtype int64 (8 bytes) differ in width"),
    ("bitcast", [T((2,), "uint8")], {"dtype": "bool"}, DTypeError,
     "bitcast: attribute 'dtype' must be numeric, got bool"),
    ("bitcast", [T((2,), "bool")], {"dtype": "uint8"}, DTypeError,
     "bitcast: x must be a numeric tensor, got bool"),
    ("argmax", [T((2, 0), f32)], {"axis": 1}, ShapeError,
     "argmax: x shape (2, 0) is empty along a reduced axis"),
    ("amin", [T((2, 3), f32)], {"axes": [2]}, ContractError,
     "amin: attribute 'axes' is 2, out of range for rank 2"),
    ("argmax", [T((2, 3), f32)], {"axis": 5}, ContractError,
     "argmax: attribute 'axis' is 5, out of range for rank 2"),
    ("sin", [T((2,), i64)], {}, DTypeError, "sin: x must be a float tensor"),
    ("cos", [T((2,), "bool")], {}, DTypeError, "cos: x must be a float tensor"),
    ("sign", [T((2,), "bool")], {}, DTypeError, "sign: x must be a numeric tensor, got bool"),
    ("tan", [T((2,), i64)], {}, DTypeError, "tan: x must be a float tensor"),
    ("atan", [T((2,), "int32")], {}, DTypeError, "atan: x must be a float tensor"),
    ("asin", [T((2,), "bool")], {}, DTypeError, "asin: x must be a float tensor"),
    ("acos", [T((2,), i64)], {}, DTypeError, "acos: x must be a float tensor"),
    ("sinh", [T((2,), "uint8")], {}, DTypeError, "sinh: x must be a float tensor"),
    ("cosh", [T((2,), i64)], {}, DTypeError, "cosh: x must be a float tensor"),
    ("asinh", [T((2,), "bool")], {}, DTypeError, "asinh: x must be a float tensor"),
    ("acosh", [T((2,), "int32")], {}, DTypeError, "acosh: x must be a float tensor"),
    ("atanh", [T((2,), i64)], {}, DTypeError, "atanh: x must be a float tensor"),
    ("isnan", [T((2, 3), i64)], {}, DTypeError,
     "isnan: x must be a float tensor (float16, float32, float64), got int64"),
    ("isinf", [T((2,), "bool")], {}, DTypeError, "isinf: x must be a float tensor"),
    ("isinf", [T((2,), f32)], {"detect_positive": "yes"}, OpError,
     "attribute 'detect_positive' must be a bool, got 'yes'"),
    ("log_softmax", [T((2, 3), f32)], {"axis": 2}, ContractError,
     "log_softmax: attribute 'axis' is 2, out of range for rank 2"),
    ("argmin", [T((3, 0), f32)], {"axis": -1}, ShapeError,
     "argmin: x shape (3, 0) is empty along a reduced axis"),
    ("cumsum", [T((2, 3), "bool")], {"axis": 0}, DTypeError,
     "cumsum: x must be a numeric tensor, got bool"),
    ("cumsum", [T((2, 3), f32)], {"axis": 2}, ContractError,
     "cumsum: attribute 'axis' is 2, out of range for rank 2"),
    ("cumsum", [T((), f32)], {"axis": 0}, ShapeError, "cumsum: x must have rank >= 1"),
    ("cumsum", [T((2,), f32)], {}, OpError, "missing required attribute 'axis' (int)"),
    ("cumprod", [T((2, 3), "bool")], {"axis": 0}, DTypeError,
     "cumprod: x must be a numeric tensor, got bool"),
    ("cumprod", [T((2, 3), f32)], {"axis": -3}, ContractError,
     "cumprod: attribute 'axis' is -3, out of range for rank 2"),
    ("cumprod", [T((), i64)], {"axis": 0}, ShapeError, "cumprod: x must have rank >= 1"),
    ("cumprod", [T((2,), f32)], {}, OpError, "missing required attribute 'axis' (int)"),
    ("cumprod", [T((2,), f32)], {"axis": 0, "exclusive": 2}, OpError,
     "attribute 'exclusive' must be a bool, got 2"),
    ("det", [T((2, 3, 4), f32)], {}, ShapeError,
     "det: x must be square matrices (its last two dims equal and not 0), got shape (2, 3, 4)"),
    ("det", [T((0, 0), f32)], {}, ShapeError, "det: x must be square matrices"),
    ("det", [T(("n", "m"), f32)], {}, ShapeError, "det: x must be square matrices"),
    ("det", [T((3,), f32)], {}, ShapeError, "det: x must have rank >= 2"),
    ("det", [T((3, 3), i64)], {}, DTypeError, "det: x must be a float tensor"),
    ("qlinear_sigmoid", [T((2,), f32), *[T((), f32)] * 4], {}, DTypeError,
     "qlinear_sigmoid: x must be uint8 or int8, got float32"),
    ("qlinear_sigmoid", [T((2,), "uint8"), T((), f32), T((), "int8"), T((), f32),
                         T((), "uint8")], {}, DTypeError, "x_zero_point"),
    ("qlinear_sigmoid", [T((2,), "int8"), T((), f32), T((), "int8"), T((), f32),
                         T((), "uint8")], {}, DTypeError, "y_zero_point"),
    ("qlinear_leaky_relu", [T((2,), "uint8"), T((), "float16"), T((), "uint8"), T((), f32),
                            T((), "uint8")], {}, DTypeError, "x_scale must be float32"),
    ("qlinear_leaky_relu", [T((2,), "uint8"), T((), f32), T((), "uint8"), T((), f32),
                            T((1,), "uint8")], {}, ShapeError, "y_zero_point"),
    ("qlinear_mul", [T((2, 3), "int8"), T((), f32), T((), "int8"), T((3,), "uint8"), T((), f32),
                     T((), "uint8"), T((), f32), T((), "int8")], {}, DTypeError, "b"),
    ("qlinear_mul", [T((2, 3), "int8"), T((), f32), T((), "int8"), T((3,), "int8"),
                     T((3,), f32), T((), "int8"), T((), f32), T((), "int8")], {}, ShapeError,
     "b_scale"),
    ("qlinear_mul", [T((2, 3), "int8"), T((), f32), T((), "int8"), T((4,), "int8"), T((), f32),
                     T((), "int8"), T((), f32), T((), "int8")], {}, ShapeError, "broadcast"),
    ("qlinear_add", [T((2, 3), "uint8"), T((), f32), T((), "uint8"), T((3,), "uint8"),
                     T((), f32), T((), "uint8"), T((), f32), T((), "int8")], {}, DTypeError,
     "y_zero_point"),
    ("qlinear_softmax", [T((2, 3), "uint8"), T((), f32), T((), "uint8"), T((), f32),
                         T((), "uint8")], {"axis": 2}, ContractError, "out of range for rank 2"),
    ("qlinear_softmax", [T((2, 0), "uint8"), T((), f32), T((), "uint8"), T((), f32),
                         T((), "uint8")], {}, ShapeError, "is empty"),
    ("qlinear_softmax", [T((2, 3), "float32"), *[T((), f32)] * 4], {}, DTypeError,
     "x must be uint8 or int8"),
    ("qlinear_global_average_pool", [T((2, 3), "uint8"), T((), f32), T((), "uint8"),
                                     T((), f32), T((), "uint8")], {}, ShapeError,
     "x must have rank >= 3, got rank 2"),
    ("qlinear_global_average_pool", [T((2, 3, 0, 5), "uint8"), T((), f32), T((), "uint8"),
                                     T((), f32), T((), "uint8")], {}, ShapeError,
     "qlinear_global_average_pool: x of shape (2, 3, 0, 5) pools 0 values a window (dims "
     "(0, 5)): onnxruntime's kernel takes 1 to 16777215"),
    ("qlinear_global_average_pool", [T((1, 4096, 4096, 2), "int8"), T((), f32), T((), "int8"),
                                     T((), f32), T((), "int8")], {"channels_last": True},
     ShapeError, "pools 16777216 values a window"),
    ("qlinear_global_average_pool", [T((2, 3, 4), "int8"), T((), f32), T((), "uint8"),
                                     T((), f32), T((), "int8")], {}, DTypeError,
     "x_zero_point"),
    ("qlinear_global_average_pool", [T((2, 3, 4), "int8"), T((1,), f32), T((), "int8"),
                                     T((), f32), T((), "int8")], {}, ShapeError, "x_scale"),
    ("qlinear_average_pool", [T((2, 3, 5, 5, 5, 5), "uint8"), *_QT("uint8"), *_QT("uint8")],
     {"kernel_size": [2] * 4, "stride": [1] * 4, "padding": [[0, 0]] * 4}, ShapeError,
     "x must have rank 3, 4 or 5"),
    ("qlinear_average_pool", [T((2, 3, 4, 4), "uint8"), *_QT("uint8"), *_QT("uint8")],
     {"kernel_size": [2], "stride": [1], "padding": [[0, 0]]}, ContractError,
     "attribute 'kernel_size' has 1 entries but x shape (2, 3, 4, 4) has 2 spatial axes"),
    ("qlinear_average_pool", [T((2, 3, 4, 4), "uint8"), *_QT("uint8"), *_QT("uint8")],
     {"kernel_size": [2, 2], "stride": [1, 1], "padding": [[0, 2], [0, 0]]}, ContractError,
     "padding [0, 2] on spatial axis 0 must be less than the kernel size 2"),
    ("qlinear_average_pool", [T((2, 3, 1, 4), "uint8"), *_QT("uint8"), *_QT("uint8")],
     {"kernel_size": [3, 2], "stride": [1, 1], "padding": [[1, 0], [0, 0]]}, ShapeError,
     "spatial axis 0 of x shape (2, 3, 1, 4) is 1 (+ padding 1+0), smaller than the window"),
    ("qlinear_average_pool", [T((2, 4, 1, 3), "int8"), *_QT("int8"), *_QT("int8")],
     {"kernel_size": [2, 2], "stride": [1, 1], "padding": [[0, 0], [0, 0]],
      "channels_last": True}, ShapeError, "spatial axis 1 of x shape (2, 4, 1, 3) is 1"),
    ("qlinear_average_pool", [T((1, 1, 8, 8), "uint8"), *_QT("uint8"), *_QT("uint8")],
     {"kernel_size": [4096, 4096], "stride": [1, 1], "padding": [[0, 0], [0, 0]]},
     ContractError, "kernel_size [4096, 4096] holds 16777216 taps: onnxruntime's kernel takes "
     "fewer than 16777216"),
    ("qlinear_average_pool", [T((2, 3, 4, 4), f32), *[T((), f32)] * 4],
     {"kernel_size": [2, 2], "stride": [1, 1], "padding": [[0, 0], [0, 0]]}, DTypeError,
     "x must be uint8 or int8"),
    ("qlinear_average_pool", [T((2, 3, 4, 4), "int8"), *_QT("int8"), T((), f32),
                              T((), "uint8")],
     {"kernel_size": [2, 2], "stride": [1, 1], "padding": [[0, 0], [0, 0]]}, DTypeError,
     "y_zero_point"),
    ("qlinear_concat", [T((), f32), T((), "uint8"), T((2, 3), "uint8"), T((), f32)],
     {"axis": 0}, ContractError, "qlinear_concat: 4 inputs: takes y_scale, y_zero_point"),
    ("qlinear_concat", [T((), f32), T((), "uint8"), T((2, 3), "uint8"), T((), f32),
                        T((), "uint8"), T((2, 3), "int8"), T((), f32), T((), "int8")],
     {"axis": 0}, DTypeError, "inputs[5]"),
    ("qlinear_concat", [T((), f32), T((), "uint8"), T((2, 3), "uint8"), T((), f32),
                        T((), "uint8"), T((2, 4), "uint8"), T((), f32), T((), "uint8")],
     {"axis": 0}, ShapeError, "inputs[5] shape (2, 4) must match inputs[2] shape (2, 3)"),
    ("qlinear_concat", [T((), f32), T((), "uint8"), T((2, 3), "uint8"), T((2,), f32),
                        T((), "uint8")], {"axis": 0}, ShapeError, "inputs[3] (its scale)"),
    ("integer_linear", [T((2, 3), f32), T((4, 3), "int8")], {}, DTypeError,
     "integer_linear: x must be uint8 or int8, got float32"),
    ("integer_linear", [T((2, 3), "uint8"), T((4, 3), "int32")], {}, DTypeError,
     "integer_linear: weight must be uint8 or int8, got int32"),
    ("integer_linear", [T((2, 3), "uint8"), T((4, 3), "int8"), T((), "int8")], {}, DTypeError,
     "integer_linear: x_zero_point must have the dtype of x (uint8), got int8"),
    ("integer_linear", [T((2, 3), "uint8"), T((4, 3), "int8"), None, T((4,), "uint8")], {},
     DTypeError, "integer_linear: weight_zero_point must have the dtype of weight (int8)"),
    ("integer_linear", [T((2, 3), "uint8"), T((4, 5), "int8")], {}, ShapeError,
     "integer_linear: the last dim of x shape (2, 3) must be 5, got 3 (weight shape (4, 5) is "
     "(out_features, in_features))"),
    ("integer_linear", [T((), "uint8"), T((4, 3), "int8")], {}, ShapeError,
     "integer_linear: x must have rank >= 1"),
    ("integer_linear", [T((3,), "uint8"), T((4, 3, 1), "int8")], {}, ShapeError,
     "integer_linear: weight must have rank 2"),
    ("integer_linear", [T((3,), "uint8"), T((4, 3), "int8"), T((1,), "uint8")], {}, ShapeError,
     "integer_linear: x_zero_point must have shape (), got (1,)"),
    ("integer_linear", [T((3,), "uint8"), T((4, 3), "int8"), None, T((3,), "int8")], {},
     ShapeError, "integer_linear: weight_zero_point must have shape (4,), got (3,) (one value, "
     "or one per output feature of weight shape (4, 3))"),
    ("quantize_linear", [T((2, 3), f16), T((), f32)], {"dtype": "int8"}, DTypeError,
     "quantize_linear: x must be float32, got float16"),
    ("quantize_linear", [T((2, 3), f32), T((), f32), T((), "int8")], {"dtype": "int8"},
     DTypeError, "quantize_linear: zero_point must be float32, got int8"),
    ("quantize_linear", [T((2, 3), f32), T((3,), f32), T((), f32)], {"dtype": "uint8"},
     ShapeError, "quantize_linear: zero_point must have shape (3,), got () (the scale's, (3,))"),
    ("quantize_linear", [T((2, 3), f32), T((2,), f32)], {"dtype": "uint8"}, ShapeError,
     "quantize_linear: shapes (2, 3) and (2,) do not broadcast"),
    ("quantize_linear", [T(("n", 3), f32), T((4, 1, 1), f32)], {"dtype": "uint16"}, ShapeError,
     "quantize_linear: scale of shape (4, 1, 1) would broadcast x of shape (n, 3) to (4, n, 3): "
     "it must broadcast to x's shape"),
    ("quantize_linear", [T((2, 3), f32), T((), f32)], {"dtype": "int32"}, OpError,
     "attribute 'dtype'"),
    ("dynamic_quantize", [T((2, 3), f16)], {}, DTypeError,
     "dynamic_quantize: x must be float32, got float16"),
    ("dynamic_quantize", [T((4,), i64)], {}, DTypeError,
     "dynamic_quantize: x must be float32, got int64"),
    ("dynamic_quantize", [T(("n", 0), f32)], {}, ShapeError,
     "dynamic_quantize: x of shape (n, 0) is empty: its min and max are undefined"),
    ("topk", [T((2, 3), f32)], {"k": 4}, ShapeError,
     "topk: k=4 is larger than axis -1 of x shape (2, 3)"),
    ("topk", [T((2, 3), f32)], {"k": 0}, OpError,
     "attribute 'k' must be >= 1, or -1 for the whole axis, got 0"),
    ("topk", [T((2, 3), "bool")], {"k": 1}, DTypeError, "topk: x must be a numeric tensor"),
    ("topk", [T((2, 3), f32)], {"k": 1, "axis": -3}, ContractError,
     "topk: attribute 'axis' is -3, out of range for rank 2"),
    ("topk", [T((), f32)], {"k": 1}, ShapeError, "topk: x must have rank >= 1"),
    ("prod", [T((2, 3), "bool")], {"axes": [0]}, DTypeError,
     "prod: x must be a numeric tensor, got bool"),
    ("mod", [T((2,), i64), T((2,), "int32")], {"fmod": True}, DTypeError,
     "mod: b must have the dtype of a (int64), got int32"),
    ("int_div", [T((2,), f32), T((2,), f32)], {}, DTypeError,
     "int_div: a must be an integer tensor, got float32"),
    ("int_div", [T((2,), i64), T((2,), "int32")], {}, DTypeError,
     "int_div: b must have the dtype of a (int64), got int32"),
    ("int_div", [T((2,), i64), T((3,), i64)], {}, ShapeError, "int_div: shapes (2,) and (3,) do "
     "not broadcast"),
    ("bitwise_and", [T((2,), f32), T((2,), f32)], {}, DTypeError,
     "bitwise_and: a must be an integer tensor, got float32"),
    ("bitwise_and", [T((2,), "bool"), T((2,), "bool")], {}, DTypeError,
     "bitwise_and: a must be an integer tensor, got bool"),
    ("bitwise_or", [T((2,), i64), T((2,), "uint64")], {}, DTypeError,
     "bitwise_or: b must have the dtype of a (int64), got uint64"),
    ("bitwise_xor", [T((2, 3), "int32"), T((2,), "int32")], {}, ShapeError,
     "bitwise_xor: shapes (2, 3) and (2,) do not broadcast"),
    ("bitwise_not", [T((2,), f16)], {}, DTypeError,
     "bitwise_not: x must be an integer tensor, got float16"),
    ("bit_shift", [T((2,), i64), T((2,), i64)], {"direction": "left"}, DTypeError,
     "bit_shift: a must be an unsigned integer tensor (uint8, uint16, uint32, uint64), got "
     "int64"),
    ("bit_shift", [T((2,), "uint8"), T((2,), f32)], {"direction": "left"}, DTypeError,
     "bit_shift: b must be an unsigned integer tensor (uint8, uint16, uint32, uint64), got "
     "float32"),
    ("bit_shift", [T((2,), "uint8"), T((2,), "uint16")], {"direction": "right"}, DTypeError,
     "bit_shift: b must have the dtype of a (uint8), got uint16"),
    ("bit_shift", [T((2,), "uint8"), T((2,), "uint8")], {"direction": "up"}, OpError,
     "attribute 'direction'"),
    ("bit_shift", [T((2,), "uint8"), T((2,), "uint8")], {}, OpError,
     "missing required attribute 'direction'"),
    ("gather_elements", [T((3, 4), f32), T((3, 4), "int32")], {"axis": 0}, DTypeError,
     "gather_elements: indices must be an int64 tensor, got int32"),
    ("gather_elements", [T((3, 4), f32), T((3,), i64)], {"axis": 0}, ShapeError,
     "gather_elements: indices must have rank 2"),
    ("unflatten", [T((2, 10), f32)], {"axis": 1, "sizes": [3, -1]}, ShapeError,
     "unflatten: axis 1 of x shape (2, 10) (10) is not a multiple of 3, the sizes [3, -1] "
     "without the -1"),
    ("unflatten", [T((2, 10), f32)], {"axis": -1, "sizes": [2, 4]}, ShapeError,
     "unflatten: axis 1 of x shape (2, 10) (10) cannot be split into sizes [2, 4] (8 "
     "elements)"),
    ("unflatten", [T((2, 10), f32)], {"axis": 1, "sizes": [0, -1]}, OpError,
     "attribute 'sizes' must have no 0 entry, got [0, -1]"),
    ("unflatten", [T((2, 10), f32)], {"axis": 1, "sizes": [-1, -1]}, ContractError,
     "unflatten: sizes [-1, -1] leave more than one size to infer (-1)"),
    ("unflatten", [T((2, 10), f32), T((2, 5), f32)], {"axis": 1, "sizes": [-1, -1, -1],
                                                     "like_axes": [0, -1, -1]}, ContractError,
     "unflatten: sizes [-1, -1, -1] leave more than one size to infer (-1)"),
    ("slice", [T(("h", 3), f32), T(("k",), f32)], {"starts": [0], "ends": [0]}, ContractError,
     "slice: input 'like' and attributes 'like_starts' / 'like_ends' come together"),
    ("slice", [T(("h", 3), f32)], {"starts": [0], "ends": [0], "like_ends": [0]},
     ContractError, "slice: input 'like' and attributes 'like_starts' / 'like_ends' come "
     "together"),
    ("slice", [T(("h", 3), f32), T(("k",), f32)], {"starts": [0], "ends": [0],
                                                  "like_ends": [0, -1]}, ContractError,
     "slice: like_ends [0, -1] must have one entry per sliced axis"),
    ("slice", [T(("h", 3), f32), T(("k",), f32)], {"starts": [0], "ends": [0],
                                                  "like_ends": [1]}, ContractError,
     "slice: like_ends[0] is 1, not an axis of like shape (k,) (or -1)"),
    ("slice", [T((6, 3), f32), T(("k",), f32)], {"starts": [0], "ends": [1 << 62],
                                                 "like_starts": [0]}, ContractError,
     "slice: like_starts[0] reads like's axis 0 for axis 0 of x shape (6, 3): needs step 1 "
     "and 0 written in its place, and a symbolic axis or an end after a start >= 0"),
    ("slice", [T((6, 3), f32), T(("k",), f32)], {"starts": [-2], "ends": [0],
                                                 "like_ends": [0]}, ContractError,
     "slice: like_ends[0] reads like's axis 0 for axis 0 of x shape (6, 3): needs step 1 "),
    ("slice", [T(("h", 3), f32), T(("k",), f32)], {"starts": [0], "ends": [0], "steps": [2],
                                                  "like_ends": [0]}, ContractError,
     "needs step 1 and 0 written in its place"),
    ("slice", [T(("h", 3), f32), T(("k",), f32)], {"starts": [0], "ends": [5],
                                                  "like_ends": [0]}, ContractError,
     "needs step 1 and 0 written in its place"),
    ("slice", [T(("h", 3), f32), T(("k",), f32)], {"starts": [-2], "ends": [0],
                                                  "like_ends": [0]}, ContractError,
     "slice: axis 0 takes a bound from like: its other bound must be a start >= 0 or an end "
     "to the end"),
    ("slice", [T(("h", 3), f32), T(("k",), f32)], {"starts": [0], "ends": [4],
                                                  "like_starts": [0]}, ContractError,
     "its other bound must be a start >= 0 or an end to the end"),
    ("unflatten", [T((2, 10), f32), T((2, 5), f32)], {"axis": 1, "sizes": [2, 5]},
     ContractError, "unflatten: input 'like' and attribute 'like_axes' come together, got "
     "only like"),
    ("unflatten", [T((2, 10), f32)], {"axis": 1, "sizes": [2, -1], "like_axes": [0, -1]},
     ContractError, "unflatten: input 'like' and attribute 'like_axes' come together, got "
     "only like_axes"),
    ("unflatten", [T((2, 10), f32), T((2, 5), f32)], {"axis": 1, "sizes": [-1, 5],
                                                     "like_axes": [0]}, ContractError,
     "unflatten: like_axes [0] must have one entry per size [-1, 5]"),
    ("unflatten", [T((2, 10), f32), T((2, 5), f32)], {"axis": 1, "sizes": [-1, 5],
                                                     "like_axes": [2, -1]}, ContractError,
     "unflatten: like_axes[0] is 2, not an axis of like shape (2, 5) (or -1: sizes[0] as "
     "written)"),
    ("unflatten", [T((2, 10), f32), T((2, 5), f32)], {"axis": 1, "sizes": [2, 5],
                                                     "like_axes": [0, -1]}, ContractError,
     "unflatten: sizes[0] is 2 where like_axes[0] gives it like's axis 0; write -1 there"),
    ("unflatten", [T((2, 10), f32), T((2, 4), f32)], {"axis": 1, "sizes": [-1, -1],
                                                     "like_axes": [0, 1]}, ShapeError,
     "unflatten: axis 1 of x shape (2, 10) (10) cannot be split into sizes [2, 4] (8 "
     "elements)"),
    ("unflatten", [T((2, 10), f32), T((3,), f32)], {"axis": 1, "sizes": [-1, -1],
                                                   "like_axes": [0, -1]}, ShapeError,
     "unflatten: axis 1 of x shape (2, 10) (10) is not a multiple of 3, the sizes [3, -1] "
     "without the -1"),
    ("unflatten", [T((2, 10), f32)], {"axis": 1, "sizes": [2, -2]}, OpError,
     "attribute 'sizes' must have every entry >= -1, got [2, -2]"),
    ("gather_elements", [T((3, 4), f32), T((3, 5), i64)], {"axis": 0}, ShapeError,
     "gather_elements: indices shape (3, 5) exceeds x shape (3, 4) on axis 1"),
    ("gather_elements", [T((3, "n"), f32), T((3, "m"), i64)], {"axis": 0}, ShapeError,
     "gather_elements: indices shape (3, m) exceeds x shape (3, n) on axis 1"),
    ("scatter_elements", [T((3, 4), f32), T((3, 4), "int32"), T((3, 4), f32)], {"axis": 0},
     DTypeError, "scatter_elements: indices must be an int64 tensor, got int32"),
    ("scatter_elements", [T((3, 4), f32), T((3, 5), i64), T((3, 5), f32)], {"axis": 0},
     ShapeError, "scatter_elements: indices shape (3, 5) exceeds x shape (3, 4) on axis 1"),
    ("scatter_elements", [T((3, 4), f32), T((2, 4), i64), T((2, 4), f16)], {"axis": 0},
     DTypeError, "scatter_elements: updates must have x's dtype float32, got float16"),
    ("scatter_elements", [T((3, 4), f32), T((2, 4), i64), T((2, 3), f32)], {"axis": 0},
     ShapeError, "scatter_elements: updates shape (2, 3) is not the indices' shape (2, 4)"),
    ("scatter_elements", [T((3,), "bool"), T((2,), i64), T((2,), "bool")],
     {"reduction": "add"}, DTypeError, "scatter_elements: reduction 'add' needs a numeric x"),
    ("scatter_elements", [T((3,), f32), T((2,), i64), T((2,), f32)], {"reduction": "sum"},
     OpError, "attribute 'reduction'"),
    ("where", [T((2,), f32), T((2,), f32), T((2,), f32)], {}, DTypeError,
     "where: cond must be a bool tensor, got float32"),
    ("add", [T((2, 3), f32), T((4,), f32)], {}, ShapeError,
     "add: shapes (2, 3) and (4,) do not broadcast (aligned from the right, axis -1 is 3 vs 4)"),
    ("sub", [T((2, 3), f32), T((3,), f16)], {}, DTypeError,
     "sub: b must have the dtype of a (float32), got float16"),
    ("mul", [T((2,), "bool"), T((2,), "bool")], {}, DTypeError, "mul: a must be a numeric"),
    ("div", [T((2,), i64), T((2,), i64)], {}, DTypeError, "div: a must be a float tensor"),
    ("matmul", [T((2, 3), f32), T((4, 5), f32)], {}, ShapeError,
     "matmul: the contracted dim of b shape (4, 5) must be 3, got 4 (a shape (2, 3): "
     "a[..., M, K] @ b[..., K, N])"),
    ("matmul", [T((2, 2, 3), f32), T((3, 3, 4), f32)], {}, ShapeError,
     "matmul: shapes (2,) and (3,) do not broadcast"),
    ("matmul", [T((), f32), T((3,), f32)], {}, ShapeError, "matmul: a must have rank >= 1"),
    ("concat", [T((2, 3), f32), T((2, 4), f32)], {"axis": 0}, ShapeError,
     "concat: inputs[1] shape (2, 4) must match inputs[0] shape (2, 3) on every axis but 0"),
    ("concat", [T((2, 3), f32), T((2, 3, 1), f32)], {"axis": 0}, ShapeError, "inputs[1] shape"),
    ("concat", [T((2, 3), f32)], {"axis": 2}, ContractError,
     "concat: attribute 'axis' is 2, out of range for rank 2 (valid: -2..1)"),
    ("concat", [T((2, 3), f32), T((2, 3), i64)], {"axis": 0}, DTypeError,
     "concat: inputs[1] must have the dtype of inputs[0] (float32), got int64"),
    ("concat", [T((2,), f32)], {}, OpError, "missing required attribute 'axis'"),
    ("reshape", [T((2, 3), f32)], {"shape": [4, 2]}, ShapeError,
     "reshape: cannot reshape x shape (2, 3) (6 elements) to (4, 2) (8 elements)"),
    ("reshape", [T((2, 3), f32)], {"shape": [4, -1]}, ShapeError,
     "reshape: cannot reshape x shape (2, 3) (6 elements) to (4, -1): 6 is not a multiple of 4"),
    ("reshape", [T((2, 0), f32)], {"shape": [0, -1]}, ShapeError, "the -1 is ambiguous"),
    ("flatten", [T((2, 3, 4), f32)], {"start_dim": 2, "end_dim": 1}, ContractError,
     "flatten: start_dim 2 comes after end_dim 1 for rank 3"),
    ("flatten", [T((2, 3), f32)], {"start_dim": 2}, ContractError,
     "flatten: attribute 'start_dim' is 2, out of range for rank 2"),
    ("transpose", [T((2, 3, 4), f32)], {"perm": [0, 2, 2]}, ContractError,
     "transpose: perm [0, 2, 2] is not a permutation of the 3 axes of x shape (2, 3, 4)"),
    ("transpose", [T((2, 3), f32)], {"perm": [1, 0, 2]}, ContractError, "not a permutation"),
    ("slice", [T((5, 6), f32)], {"starts": [0], "ends": [2], "steps": [0]}, ContractError,
     "slice: attribute 'steps' [0] contains 0"),
    ("slice", [T((5, 6), f32)], {"starts": [0, 0], "ends": [2, 2], "axes": [1, -1]},
     ContractError, "slice: attribute 'axes' [1, -1] names an axis twice"),
    ("slice", [T((5, 6), f32)], {"starts": [0, 1], "ends": [2]}, ContractError,
     "slice: attribute 'ends' has 1 entries but 'starts' needs 2"),
    ("slice", [T((5, 6), f32)], {"starts": [0], "ends": [2], "axes": [2]}, ContractError,
     "slice: attribute 'axes' is 2, out of range for rank 2"),
    ("split", [T((4, 10), f32)], {"axis": 1, "sizes": [3, 4]}, ShapeError,
     "split: the sum of sizes [3, 4] must be 10, got 7 (it must equal dim 1 of x shape (4, 10))"),
    ("split", [T((4, 10), f32)], {"axis": 1, "sizes": [3, -1]}, OpError, "entry >= 0"),
    ("pad", [T((2, 3), f32)], {"pads": [[1, 1]]}, ContractError,
     "pad: attribute 'pads' has 1 entries but x shape (2, 3) has 2 axes and needs 2"),
    ("pad", [T((2, 3), f32)], {"pads": [[0, 0], [3, 0]], "mode": "reflect"}, ShapeError,
     "pad: reflect padding (3, 0) on axis 1 must be smaller than the dim, which is 3"),
    ("pad", [T((2, 0), f32)], {"pads": [[0, 0], [1, 0]], "mode": "edge"}, ShapeError,
     "pad: edge padding on axis 1 needs a non-empty dim"),
    ("cast", [T((2,), f32)], {"dtype": "bfloat16"}, OpError,
     "op 'cast' v1: attribute 'dtype' must be an ABI dtype name"),
    ("clip", [T((2,), f32)], {"min": 1.0, "max": 0.0}, ContractError,
     "clip: min=1.0 is greater than max=0.0"),
    ("clip", [T((2,), "bool")], {}, DTypeError, "clip: x must be a numeric tensor"),
    ("softmax", [T((2, 3), i64)], {}, DTypeError, "softmax: x must be a float tensor"),
    ("softmax", [T((2, 3), f32)], {"axis": -3}, ContractError,
     "softmax: attribute 'axis' is -3, out of range for rank 2 (valid: -2..1)"),
    ("softmax", [T((), f32)], {}, ShapeError, "softmax: x must have rank >= 1, got rank 0"),
    ("mean", [T((2, 3), f32)], {"axes": [1, -1]}, ContractError,
     "mean: attribute 'axes' [1, -1] names an axis twice (rank 2)"),
    ("mean", [T((2, 3), i64)], {"axes": [0]}, DTypeError, "mean: x must be a float tensor"),
    ("resize", [T((2, 3), f32)], {"size": [4]}, ShapeError,
     "resize: x must have rank 3, 4 or 5, got rank 2"),
    ("resize", [T((1, 2, 4), i64)], {"size": [4]}, DTypeError, "resize: x must be a float"),
    ("resize", [T((1, 2, 4, 4), f32)], {"size": [2, 2], "antialias": True}, ContractError,
     "resize: antialias needs mode linear or cubic over 1 or 2 spatial axes (as onnxruntime); "
     "got mode nearest on x shape (1, 2, 4, 4)"),
    ("resize", [T((1, 2, 4, 4, 4), f32)], {"size": [2, 2, 2], "mode": "linear",
                                           "antialias": True}, ContractError,
     "resize: antialias needs mode linear or cubic over 1 or 2 spatial axes"),
    ("resize", [T((1, 1, 1 << 26), f32)], {"size": [1 << 20], "mode": "linear",
                                           "antialias": True}, ContractError,
     "resize: antialias on spatial axis 0 (67108864 to 1048576) needs 1048576 windows of 129 "
     "taps, over the cap of 67108864 weights"),
    ("resize", [T((1, 2, 4, 4), f32)], {"size": [8]}, ContractError,
     "resize: attribute 'size' has 1 entries but x shape (1, 2, 4, 4) has 2 spatial axes"),
    ("resize", [T((1, 2, 5), f32)], {"size": [8], "scales": [1.5]}, ContractError,
     "resize: size 8 on spatial axis 0 is not floor(5 * 1.5) = 7"),
    ("resize", [T((1, 2, "L"), f32)], {"size": [8], "scales": [2.0]}, ShapeError,
     "resize: spatial axis 0 of x shape (1, 2, L) is symbolic; with scales its size must be -1"),
    ("resize", [T((1, 2, "L"), f32)], {"size": [-1]}, ContractError,
     "resize: size [-1] has a -1 (floor(in * scale) when the call runs) but no scales"),
    ("resize", [T((1, 2, "L"), f32), T(("n",), f32)], {"size": [-1, -1], "like_axes": [0, 0]},
     ContractError, "resize: attribute 'size' has 2 entries but x shape (1, 2, L) has 1"),
    ("resize", [T((1, 2, "L", 3), f32), T(("n",), f32)],
     {"size": [-1, -1], "like_axes": [0, -1]}, ContractError,
     "resize: size [-1, -1] has a -1 (floor(in * scale) when the call runs) but no scales"),
    ("resize", [T((1, 2, "L"), f32), T(("n",), f32)], {"size": [4], "like_axes": [0]},
     ContractError, "resize: sizes[0] is 4 where like_axes[0] gives it like's axis 0"),
    ("resize", [T((1, 2, "L"), f32), T(("n",), f32)], {"size": [-1], "like_axes": [1]},
     ContractError, "resize: like_axes[0] is 1, not an axis of like shape (n,)"),
    ("resize", [T((1, 2, "L"), f32), T(("n",), f32)], {"size": [-1]}, ContractError,
     "resize: input 'like' and attribute 'like_axes' come together, got only like"),
    ("resize", [T((1, 2, "L"), f32), T(("n",), f32)],
     {"size": [-1], "like_axes": [0], "scales": [2.0]}, ContractError,
     "resize: sizes read from like come without scales"),
    ("resize", [T((1, 2, 4), f32), T(("n",), f32)],
     {"size": [-1], "like_axes": [0], "mode": "linear", "antialias": True}, ContractError,
     "resize: sizes read from like come without antialias"),
    ("resize", [T((1, 2, "L"), f32)], {"size": [-1], "scales": [0.7]}, ContractError,
     "resize: scale 0.7 on symbolic spatial axis 0: float32 floor(10 * 0.7) (onnxruntime's) is "
     "7, not the exact 6; a symbolic axis takes a scale whose float32 floor is exact below "
     "65536"),
    ("resize", [T((1, 2, 1, 3), f32)], {"size": [-1, 3], "scales": [0.5, 1.0]}, ShapeError,
     "resize: spatial axis 0 of x shape (1, 2, 1, 3) scaled by 0.5 has no element (floor gives "
     "0)"),
    ("resize", [T((1, 2, 0, 3), f32)], {"size": [2, 2]}, ShapeError,
     "resize: spatial axis 0 of x shape (1, 2, 0, 3) is empty"),
    ("resize", [T((1, 2, 3), f32)], {"size": [0]}, OpError,
     "attribute 'size' must have every entry >= 1, or -1 for floor(in * scale) when the call "
     "runs, got [0]"),
    ("resize", [T((1, 2, 3), f32)], {"size": [3], "scales": [-1.0]}, OpError,
     "attribute 'scales' must have every entry in (0, 1e9], got [-1.0]"),
    ("resize", [T((1, 2, 3), f32)], {"size": [3], "mode": "area"}, OpError,
     "attribute 'mode' must be one of 'nearest', 'linear', 'cubic', got 'area'"),
    ("resize", [T((1, 2, 3), f32)], {"size": [6], "mode": "cubic"}, ShapeError,
     "resize: mode cubic needs x of rank 4 (N, C, H, W), as onnxruntime's bicubic; got x "
     "shape (1, 2, 3)"),
    ("resize", [T((1, 2, 3, 3), f32)], {"size": [6, 6], "mode": "cubic",
                                        "cubic_coeff_a": float("inf")}, OpError,
     "attribute 'cubic_coeff_a' must be in [-1e+30, 1e+30], got inf"),
    ("grid_sample", [T((1, 2, 3), f32), T((1, 2, 1), f32)], {}, ShapeError,
     "grid_sample: x must have rank 4 or 5, got rank 3"),
    ("grid_sample", [T((1, 2, 3, 4), f32), T((1, 6, 2), f32)], {}, ShapeError,
     "grid_sample: grid must have rank 4, got rank 3"),
    ("grid_sample", [T((1, 2, 3, 4, 5), f32), T((1, 2, 3, 4, 2), f32)], {}, ShapeError,
     "grid_sample: grid's last dim must be 3, got 2 (grid shape (1, 2, 3, 4, 2): an x, a y and "
     "a z"),
    ("grid_sample", [T((1, 2, 3, 4), f32), T((1, 6, 7, 3), f32)], {}, ShapeError,
     "grid_sample: grid's last dim must be 2, got 3 (grid shape (1, 6, 7, 3): an x and a y"),
    ("grid_sample", [T((2, 2, 3, 4), f32), T((3, 6, 7, 2), f32)], {}, ShapeError,
     "grid_sample: grid's batch dim must be 2, got 3 (x shape (2, 2, 3, 4))"),
    ("grid_sample", [T((1, 2, 3, 4), i64), T((1, 6, 7, 2), i64)], {}, DTypeError,
     "grid_sample: x must be a float tensor"),
    ("grid_sample", [T((1, 2, 3, 4), f32), T((1, 6, 7, 2), f16)], {}, DTypeError,
     "grid_sample: grid must have the dtype of x (float32), got float16"),
    ("grid_sample", [T((1, 2, 0, 4), f32), T((1, 6, 7, 2), f32)], {}, ShapeError,
     "grid_sample: spatial axis 0 of x shape (1, 2, 0, 4) is empty"),
    ("grid_sample", [T((1, 2, 3, 4), f32), T((1, 6, 7, 2), f32)], {"mode": "bicubic"},
     OpError, "attribute 'mode' must be one of 'bilinear', 'nearest', 'cubic', got 'bicubic'"),
    ("grid_sample", [T((1, 2, 3, 4), f32), T((1, 6, 7, 2), f32)],
     {"padding_mode": "constant"}, OpError, "attribute 'padding_mode' must be one of"),
    ("max_pool", [T((1, 2, 3, 4, 5, 6), f32)], POOL, ShapeError,
     "max_pool: x must have rank 3, 4 or 5, got rank 6"),
    ("resize", [T((1, 2, 9), "uint8")], {"size": [18], "mode": "linear"}, DTypeError,
     "resize: x must be a float tensor (float16, float32, float64), got uint8"),
    ("resize", [T((1, 2, 9), "int32")], {"size": [18], "mode": "nearest"}, DTypeError,
     "resize: x must be a float tensor (float16, float32, float64), got int32"),
    ("max_pool", [T((1, 2, 9), "int32")], POOL, DTypeError,
     "max_pool: x must be a float tensor (float16, float32, float64), got int32"),
    ("max_pool_with_indices", [T((1, 2, 9), "uint8")], POOL, DTypeError,
     "max_pool_with_indices: x must be a float tensor (float16, float32, float64), got uint8"),
    ("avg_pool", [T((1, 2, 9), "uint8")], APOOL, DTypeError,
     "avg_pool: x must be a float tensor (float16, float32, float64), got uint8"),
    ("avg_pool", [T((1, 2, 3, 4, 5, 6), f32)], APOOL, ShapeError,
     "avg_pool: x must have rank 3, 4 or 5, got rank 6"),
    ("max_pool", [T((1, 2, 5, 5, 5), f32)], {**POOL, "kernel_size": [3, 3]}, ContractError,
     "max_pool: attribute 'kernel_size' has 2 entries but x shape (1, 2, 5, 5, 5) has 3 "
     "spatial axes and needs 3"),
    ("max_pool_with_indices", [T((1, 2, 5, 2, 5), f32)],
     {"kernel_size": [3, 3, 3], "stride": [1, 1, 1], "padding": [[1, 1], [0, 0], [1, 1]],
      "dilation": [1, 1, 1]}, ShapeError,
     "max_pool_with_indices: spatial axis 1 of x shape (1, 2, 5, 2, 5) is 2 (+ padding 0+0), "
     "smaller than the window 1*(3-1)+1; output size would be 0"),
    ("max_pool", [T((1, 2, 9), f32)], {**POOL, "padding": [[3, 2]]}, ContractError,
     "max_pool: padding [3, 2] on spatial axis 0 must be less than the kernel size 3 (<= 2)"),
    ("max_pool", [T((1, 2, 2), f32)], {**POOL, "kernel_size": [2], "padding": [[1, 1]],
                                        "dilation": [3]}, ShapeError,
     "max_pool: window 0 on spatial axis 0 of x shape (1, 2, 2) holds padding alone (taps -1 "
     "to 2 by 3, the input's 0 to 1)"),
    ("max_pool", [T((1, 2, 2), f32)], {**POOL, "kernel_size": [5], "padding": [[0, 0]]},
     ShapeError, "max_pool: spatial axis 0 of x shape (1, 2, 2) is 2 (+ padding 0+0), smaller "
                 "than the window 1*(5-1)+1; output size would be -2"),
    ("max_pool", [T((1, 2, 9, 9), f32)], POOL, ContractError,
     "max_pool: attribute 'kernel_size' has 1 entries but x shape (1, 2, 9, 9) has 2 spatial "
     "axes and needs 2"),
    ("max_pool", [T((1, 2, 9), i64)], POOL, DTypeError, "max_pool: x must be a float tensor"),
    ("max_pool_with_indices", [T((1, 2, 9), i64)], POOL, DTypeError,
     "max_pool_with_indices: x must be a float tensor"),
    ("max_pool_with_indices", [T((1, 2, 9), f32)], {**POOL, "padding": [[0, 3]]}, ContractError,
     "max_pool_with_indices: padding [0, 3] on spatial axis 0 must be less than the kernel"),
    ("avg_pool", [T((1, 2, 9), f32)], {**APOOL, "dilation": [0]}, OpError,
     "attribute 'dilation' must have every entry >= 1"),
    ("avg_pool", [T((1, 2, 9), f32)], {**APOOL, "kernel_size": [1]}, ContractError,
     "avg_pool: padding [1, 1] on spatial axis 0 must be less than the kernel size 1"),
    ("avg_pool", [T((1, 2, 9), f32)], {**APOOL, "stride": [0]}, OpError,
     "attribute 'stride' must have every entry >= 1"),
]


@pytest.mark.parametrize("op, inputs, attrs, error, text", REFUSALS,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(REFUSALS)])
def test_refusals(op, inputs, attrs, error, text):
    with pytest.raises(error) as info:
        infer(op, inputs, attrs)
    message = str(info.value)
    assert text in message
    assert message.startswith(f"{op}: ") or message.startswith(f"op '{op}' v1: ")
    assert "\n" not in message


# --- value rules ------------------------------------------------------------------------------


def _gather_values(indices, x_shape=(2, 4), axis=1):
    check_values(get_op("gather"), [T(x_shape, f32), T(np.shape(indices), i64)],
                 [None, None if indices is None else np.asarray(indices, np.int64)],
                 {"axis": axis})


def test_gather_value_rule_takes_indices_in_range():
    _gather_values([[0, 3], [2, 1]])
    _gather_values(1, axis=0)
    _gather_values(np.zeros((0,), np.int64), x_shape=(2, 0))


@pytest.mark.parametrize("indices, axis, text", [
    ([0, 4], 1, "gather: axis 1 of x shape (2, 4): 1 gather index(es) outside [0, 4): (1,)=4"),
    ([[-1, 0]], -1, "gather: axis 1 of x shape (2, 4): 1 gather index(es) outside [0, 4): "
                    "(0, 0)=-1"),
    (2, 0, "gather: axis 0 of x shape (2, 4): 1 gather index(es) outside [0, 2): ()=2"),
])
def test_gather_value_rule_refuses_an_index_out_of_range(indices, axis, text):
    with pytest.raises(IndexRangeError) as info:
        _gather_values(indices, axis=axis)
    assert str(info.value) == text


def test_gather_value_rule_refuses_run_time_indices():
    with pytest.raises(ContractError, match=r"^gather: indices must be a constant tensor of the "
                                            r"graph, not a value computed at run time$"):
        check_values(get_op("gather"), [T((2, 4), f32), T((3,), i64)], [None, None], {"axis": 1})


@pytest.mark.parametrize("op", ["gather_elements", "scatter_elements"])
def test_element_index_value_rule_checks_constant_indices_only(op):
    """Constant indices are checked when the graph is built or loaded (a hostile artifact
    with a bad one is refused there, whichever backend); run-time ones when they arrive."""
    rule = get_op(op)
    inputs = [T((2, 4), f32), T((2, 3), i64)] + ([T((2, 3), f32)] if op[0] == "s" else [])
    good = np.array([[0, 3, 1], [2, 2, 0]], np.int64)
    check_values(rule, inputs, [None, good, None], {"axis": 1, "reduction": "none"})
    check_values(rule, inputs, [None, None, None], {"axis": 1, "reduction": "none"})
    bad = good.copy()
    bad[1, 2] = 4
    with pytest.raises(IndexRangeError) as info:
        check_values(rule, inputs, [None, bad, None], {"axis": 1, "reduction": "none"})
    assert str(info.value) == (f"{op}: axis 1 of x shape (2, 4): 1 {op} index(es) outside "
                               f"[0, 4): (1, 2)=4")


def test_constant_indices_along_a_symbolic_dim_are_left_to_the_call():
    """gather_elements' constant indices into a symbolic dim cannot be checked at load: the
    value rule leaves them to the kernels, which check them against the size the call gives
    (tests/onnxruntime_backend/test_ops.py runs both)."""
    rule = get_op("gather_elements")
    far = np.array([[7, 0, -1]], np.int64)
    check_values(rule, [T((1, "L"), f32), T((1, 3), i64)], [None, far, None], {"axis": 1})
    with pytest.raises(IndexRangeError):
        check_values(rule, [T((1, 4), f32), T((1, 3), i64)], [None, far, None], {"axis": 1})


def test_only_the_indexing_ops_have_a_value_rule():
    assert [op.name for op in glue.OPS if op.values is not None] == [
        "gather", "gather_elements", "scatter_elements"]
    check_values(get_op("add"), [T((2,), f32), T((2,), f32)], [None, None], {})  # no rule

