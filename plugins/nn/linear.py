"""Linear (fully connected) kernel and layer, acting on the last axis."""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from abi.errors import ShapeError

from ._common import check_f32, check_ndim, check_param, shape_str, uniform

__all__ = ["linear", "make_linear", "Linear"]


def _check_weight(weight: np.ndarray, bias: np.ndarray | None, where: str) -> None:
    check_f32(weight, "weight", where)
    check_ndim(weight, "weight", where, ndim=2, rule="(out_features, in_features)")
    check_param(bias, "bias", where, (weight.shape[0],))


def _apply(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None,
           where: str) -> np.ndarray:
    check_f32(x, "input", where)
    check_ndim(x, "input", where, min_ndim=1)
    out_f, in_f = weight.shape
    if x.shape[-1] != in_f:
        raise ShapeError(f"{where}: last dim of input {shape_str(x.shape)} must equal "
                         f"in_features {in_f} of weight {shape_str(weight.shape)}", where=where,
                         expected=in_f, got=x.shape)
    if x.ndim > 2:  # one GEMM over all leading axes rather than one per leading index
        y = np.matmul(x.reshape(-1, in_f), weight.T).reshape(x.shape[:-1] + (out_f,))
    else:
        y = np.matmul(x, weight.T)
    if bias is not None:
        y += bias
    return y


def linear(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, *,
           where: str = "Linear") -> np.ndarray:
    """``x @ weight.T + bias`` on the last axis of ``x`` (any leading axes).

    ``weight`` is ``(out_features, in_features)`` float32, ``bias`` ``(out_features,)`` or None.
    """
    _check_weight(weight, bias, where)
    return _apply(x, weight, bias, where)


def make_linear(weight: np.ndarray, bias: np.ndarray | None, *,
                where: str = "Linear") -> Callable[[np.ndarray], np.ndarray]:
    """Prepare :func:`linear` once: the weight is validated and copied (later changes to the
    arrays passed in do not affect the returned ``run(x)``)."""
    _check_weight(weight, bias, where)
    w = np.array(weight, dtype=np.float32, order="C")
    b = None if bias is None else np.array(bias, dtype=np.float32)
    w.flags.writeable = False

    def run(x: np.ndarray) -> np.ndarray:
        return _apply(x, w, b, where)

    return run


class Linear:
    """Fully connected layer (tinygrad ``nn.Linear``): ``weight`` ``(out_features,
    in_features)`` and ``bias`` ``(out_features,)``, both U(-1/sqrt(in), 1/sqrt(in))."""

    abi_op = "linear"

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 rng: np.random.Generator | None = None) -> None:
        bound = 1 / math.sqrt(in_features)
        self.weight: np.ndarray = uniform(rng, (out_features, in_features), bound)
        self.bias: np.ndarray | None = uniform(rng, (out_features,), bound) if bias else None

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return linear(x, self.weight, self.bias)

    def abi_attrs(self) -> dict[str, Any]:
        return {}

    def abi_tensors(self) -> dict[str, np.ndarray | None]:
        return {"weight": self.weight, "bias": self.bias}
