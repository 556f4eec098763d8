"""The ONNX model under construction: :class:`Emitter` collects the nodes and initializers
that the converters (``layers.py``, ``glue.py``) write for our graph's ops, at opset
:data:`OPSET`.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, NamedTuple, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from abi import TensorType, dtypes

#: The ONNX opset the models are built for (LayerNormalization needs 17; Split with
#: ``num_outputs`` and ReduceMean with ``axes`` as an input are opset 18; GridSample of a
#: volume is opset 20; BitCast is opset 26).
OPSET = 26
#: onnxruntime's own operator domain (version 1), for the kernels the ONNX opset lacks
#: (DynamicQuantizeMatMul in the quantized LSTM's steps)
MS = "com.microsoft"


def onnx_dtype(name: str) -> int:
    """The ONNX element type of an ABI dtype name."""
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtypes.to_numpy(name)))


class Checks(NamedTuple):
    """What a converted model's run checks before it returns anything (``session.py``), each
    from extra outputs of the model. ``guards``: (indices tensor, dim, description, kind) of
    the guarded Embeddings, gather_elements and scatter_elements; a symbolic dim is the name
    of the tensor that holds its size when the call runs (shape (1,), int64). ``shapes``:
    (tensor holding an input's shape, a function of that shape as a tuple raising the ABI's
    error, the node's name): the shape rules a node's output sizes follow where the graph
    knew its input's sizes only when the call runs, and onnxruntime does not refuse what the
    rule refuses (a pool whose window the input cannot hold)."""

    guards: list[tuple[str, int | str, str, str]]
    shapes: list[tuple[str, Callable[[tuple], Any], str]]


class Emitter:
    """Collects the ONNX nodes and initializers of one model."""

    def __init__(self, consts: Mapping[str, np.ndarray], types: Mapping[str, TensorType]):
        self.consts = consts
        self.types = types
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: dict[str, onnx.TensorProto] = {}
        self.prefix = ""
        self._count = 0
        #: (transformation, source tensor names) -> the initializer holding its result
        self._derived: dict[tuple, str] = {}
        #: what the run checks after onnxruntime's (:class:`Checks`)
        self.checks = Checks([], [])
        #: tensor name -> the graph's node that computes it (an unfused node)
        self.producers: dict[str, Any] = {}

    def value(self, name: str | None) -> str:
        """An input name for an ONNX node; a constant becomes an initializer on first use."""
        if name is None:
            return ""
        if name in self.consts and name not in self.initializers:
            self.initializers[name] = numpy_helper.from_array(np.asarray(self.consts[name]), name)
        return name

    def const(self, array: Any, dtype: Any = np.float32) -> str:
        """A new initializer holding ``array``."""
        self._count += 1
        name = f"{self.prefix}/c{self._count}"
        self.initializers[name] = numpy_helper.from_array(np.asarray(array, dtype=dtype), name)
        return name

    def derived(self, tag: str, sources: Sequence[str | None], make: Callable[[], Any],
                dtype: Any = np.float32) -> str:
        """An initializer holding ``make()`` (as ``dtype``; None: as made), a ``tag``
        transformation of the constants ``sources`` (names): one per model for the same tag
        and sources, whichever nodes use it (an ONNX LSTM unrolled over time reads the same
        weights at every step). So the tag names whatever else the value depends on, a size
        or a dtype: made from no source (a bias of zeros where there is none), it is otherwise
        given to every caller of the tag."""
        key = (tag, *sources)
        name = self._derived.get(key)
        if name is None:
            name = self._derived[key] = self.const(make(), dtype)
        return name

    def op(self, op_type: str, inputs: Sequence[str | None], outputs: Sequence[str] | int = 1,
           **attrs: Any) -> list[str]:
        """Append one ONNX node; ``outputs`` are names, or a count of fresh names."""
        if isinstance(outputs, int):
            outputs = [self.fresh() for _ in range(outputs)]
        self._count += 1
        inputs = [self.value(i) if i is not None else "" for i in inputs]
        while inputs and inputs[-1] == "":
            inputs.pop()
        self.nodes.append(helper.make_node(op_type, inputs, list(outputs),
                                           name=f"{self.prefix}/{self._count}", **attrs))
        return list(outputs)

    def subgraph(self, tag: str) -> "Emitter":
        """An Emitter for a subgraph of this model (an If's branch, named ``tag``): its
        constants and derived initializers go to this model's (a subgraph reads outer values
        by name), its checks are this model's."""
        sub = Emitter(self.consts, self.types)
        sub.initializers, sub._derived, sub.checks = self.initializers, self._derived, self.checks
        sub.prefix = f"{self.prefix}/{tag}"
        return sub

    def branch(self, outputs: Sequence[tuple[str, int]]) -> onnx.GraphProto:
        """This (sub)emitter's nodes as a graph of no inputs, an If's branch, giving
        ``outputs`` (name, ONNX element type)."""
        return helper.make_graph(self.nodes, self.prefix, [], [
            helper.make_tensor_value_info(name, elem, None) for name, elem in outputs])

    def fresh(self) -> str:
        """A new tensor name."""
        self._count += 1
        return f"{self.prefix}/t{self._count}"

    def array(self, name: str | None) -> np.ndarray | None:
        """The constant array bound to ``name``, or None when it is computed at run time."""
        return None if name is None else self.consts.get(name)


Converter = Callable[[Emitter, Any, list, list, dict], None]


def moved_codes(codes: np.ndarray, shift: int) -> np.ndarray:
    """8-bit integer ``codes`` plus ``shift`` in the dtype that holds them: 128 moves int8
    codes to uint8 (differences between codes, and so integer sums, stay), 0 keeps them."""
    dtype = np.uint8 if shift or codes.dtype == np.uint8 else np.int8
    return (np.asarray(codes).astype(np.int16) + shift).astype(dtype)


def onnx_pads(pairs) -> list[int]:
    """Our ``[[before, after], ...]`` as ONNX ``[befores..., afters...]``."""
    return [int(p[0]) for p in pairs] + [int(p[1]) for p in pairs]
