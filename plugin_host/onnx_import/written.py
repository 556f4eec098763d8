"""ONNX nodes written for a node being mapped: what a com.microsoft op stands for, written back
as the ONNX nodes it fused and mapped as the model's own (:meth:`.convert.Importer.inline`), with
their checks and refusals (:mod:`.bert`, :mod:`.weight_only`)."""

from __future__ import annotations

import numpy as np

from .ops import MAPPERS


class Written:
    """ONNX nodes written for one node, named ``<node>/<step>`` with outputs ``<out>/<step>``,
    constants ``<out>.<name>``; mapped in one go by :meth:`inline`."""

    def __init__(self, imp, node):
        import onnx

        self.imp, self.helper, self.nodes = imp, onnx.helper, []
        self.name, self.out = node.name or node.output[0], node.output[0]

    def add(self, op: str, inputs: list, step: str, out: str | None = None, **attrs) -> str:
        out = out or f"{self.out}/{step}"
        self.nodes.append(self.helper.make_node(op, inputs, [out], name=f"{self.name}/{step}",
                                                **attrs))
        return out

    def const(self, name: str, value) -> str:
        const = f"{self.out}.{name}"
        self.imp.set_const(const, np.asarray(value))
        return const

    def reshape(self, x: str, shape: list, step: str, out: str | None = None) -> str:
        return self.add("Reshape", [x, self.const(step, np.array(shape, np.int64))], step, out)

    def with_axes(self, op: str, x: str, axes: list, step: str, out: str | None = None,
                  **attrs) -> str:
        """Unsqueeze or ReduceSum over ``axes`` (an input: a model of an opset before 13 is
        upgraded to 13 before it is mapped)."""
        return self.add(op, [x, self.const(step, np.array(axes, np.int64))], step, out, **attrs)

    def checked_zeros(self, index: str, rows: int, dtype, step: str) -> str:
        """A (n, 1) column of zeros of ``dtype``, one per entry of the int64 ``index`` (n,):
        a Gather from a constant table of ``rows`` zeros, mapped as an Embedding, so an index
        outside [0, rows) is refused when the call runs. Added to a value, it puts the check
        on that value's path."""
        table = self.const(f"{step}_rows", np.zeros((rows, 1), dtype))
        return self.add("Gather", [table, index], step, axis=0)

    def inline(self) -> None:
        self.imp.inline(self.nodes, MAPPERS, -1, depth=0)
        self.nodes = []
