"""A model-layer plugin whose relu kernel refuses some inputs with the project's errors.
Tests only: the sandbox must deliver them to the host with their type and context."""

from __future__ import annotations

import numpy as np

from abi.errors import IndexRangeError, ShapeError
from plugin_host.hooks import hookimpl

SHAPE_ERROR, INDEX_ERROR, TYPE_ERROR = 999.0, 998.0, 997.0


def _relu_factory(attrs, consts, types, where):
    def relu(x):
        first = x.reshape(-1)[0]
        if first == SHAPE_ERROR:
            raise ShapeError(f"{where}: refused on purpose", where=where, expected=(1, 2),
                             got=x.shape)
        if first == INDEX_ERROR:
            raise IndexRangeError(where=where, vocab_size=5, positions=[(0, 1)], values=[7])
        if first == TYPE_ERROR:
            raise TypeError("a plain Python error from a kernel")
        return np.maximum(x, 0)
    return relu


@hookimpl
def plugin_host_add_kernels(backend):
    return {"relu": _relu_factory}
