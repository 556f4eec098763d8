"""Build a :class:`~plugin_host.graph.Graph` in Python, a layer or op per line.

Example (a tiny model)::

    from plugins import nn
    b = GraphBuilder("tiny")
    x = b.input("x", (1, 3, 8, 8), "float32", "NCHW")
    y = b.op("relu", b.layer("conv", nn.Conv2d(3, 4, 3, padding=1), x))
    b.output(y, "y", "NCHW")
    graph = b.build()

Every call runs the op's shape rule at once, so a broken contract fails at the line that
broke it, naming the node. Any object with ``abi_op``, ``abi_attrs()`` and ``abi_tensors()``
(every layer of ``plugins.nn``) can be added with :meth:`GraphBuilder.layer`; its tensors are
copied into the graph as ``<name>.<parameter>``.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from abi import TensorSpec, TensorType, dtypes, get_op, infer_shapes, normalize_attrs
from abi.errors import GraphError, PluginHostError

from .graph import Graph, Node


class GraphBuilder:
    def __init__(self, name: str) -> None:
        self.name = name
        self._inputs: list[TensorSpec] = []
        self._outputs: list[TensorSpec] = []
        self._nodes: list[Node] = []
        self._tensors: dict[str, np.ndarray] = {}
        self._types: dict[str, TensorType] = {}
        self._state: dict[str, str] = {}
        self._counter = 0

    # -- declarations ---------------------------------------------------------------------------

    def input(self, name: str, shape: Sequence[int | str], dtype: str, layout: str) -> str:
        """Declare a graph input; returns its tensor name."""
        spec = TensorSpec(name, tuple(shape), dtype, layout)
        self._declare(name, TensorType(spec.shape, spec.dtype))
        self._inputs.append(spec)
        return name

    def state(self, name: str, shape: Sequence[int], dtype: str, layout: str) -> str:
        """Declare a recurrent-state input. Pair it with an output via ``output(..., state_of=)``."""
        name = self.input(name, shape, dtype, layout)
        self._state[name] = ""
        return name

    def constant(self, name: str, array: np.ndarray) -> str:
        """Add a constant tensor (a copy of ``array``); returns its name."""
        array = np.array(array, copy=True)
        self._declare(name, TensorType(array.shape, dtypes.from_numpy(array.dtype)))
        self._tensors[name] = array
        return name

    def output(self, tensor: str, name: str, layout: str, *, state_of: str | None = None) -> str:
        """Declare ``tensor`` a graph output called ``name`` (renaming it if needed).

        ``state_of`` names the recurrent-state input whose next value this output is.
        """
        if tensor not in self._types:
            raise GraphError(f"output {name!r}: tensor {tensor!r} is not defined")
        if name != tensor:
            self._rename(tensor, name)
        ttype = self._types[name]
        self._outputs.append(TensorSpec(name, ttype.shape, ttype.dtype, layout))
        if state_of is not None:
            if self._state.get(state_of) != "":
                raise GraphError(f"output {name!r}: {state_of!r} is not an unpaired state input")
            self._state[state_of] = name
        return name

    # -- nodes ----------------------------------------------------------------------------------

    def layer(self, name: str, layer: Any, *data: str) -> Any:
        """Add ``layer`` (an object with abi_op/abi_attrs/abi_tensors) applied to ``data``.

        Returns the output tensor name, or a tuple of names for a multi-output op.
        """
        tensors: list[str | None] = []
        for pname, array in layer.abi_tensors().items():
            tensors.append(None if array is None else self.constant(f"{name}.{pname}", array))
        return self._node(name, layer.abi_op, None, [*data, *tensors], layer.abi_attrs())

    def op(self, op: str, *inputs: str | None, name: str | None = None,
           version: int | None = None, **attrs: Any) -> Any:
        """Add a glue op (``relu``, ``concat``, ``reshape`` ...) with keyword attributes."""
        return self._node(name, op, version, list(inputs), attrs)

    def build(self) -> Graph:
        """The finished graph, checked again as a whole."""
        unpaired = [k for k, v in self._state.items() if not v]
        if unpaired:
            raise GraphError(f"state input(s) {unpaired} have no output paired with state_of=")
        return Graph(self.name, inputs=self._inputs, outputs=self._outputs, nodes=self._nodes,
                     tensors=self._tensors, state=self._state)

    # -- internals ------------------------------------------------------------------------------

    def _node(self, name: str | None, op: str, version: int | None, inputs: list[str | None],
              attrs: dict[str, Any]) -> Any:
        self._counter += 1
        name = name or f"{op}_{self._counter}"
        try:
            opdef = get_op(op, version)
            attrs = normalize_attrs(opdef, attrs)
            in_types = []
            for i, t in enumerate(inputs):
                if t is not None and t not in self._types:
                    raise GraphError(f"input {i} {t!r} is not defined", node=name)
                in_types.append(None if t is None else self._types[t])
            out_types = infer_shapes(opdef, in_types, attrs)
        except GraphError:
            raise
        except PluginHostError as exc:
            raise GraphError(str(exc), node=name) from None
        outs = [name if len(out_types) == 1 else f"{name}:{i}" for i in range(len(out_types))]
        for o, t in zip(outs, out_types):
            self._declare(o, t)
        self._nodes.append(Node(name, op, opdef.version, tuple(inputs), tuple(outs), attrs))
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _declare(self, name: str, ttype: TensorType) -> None:
        if name in self._types:
            raise GraphError(f"tensor name {name!r} is already used")
        self._types[name] = ttype

    def _rename(self, old: str, new: str) -> None:
        if old in self._tensors or any(s.name == old for s in self._inputs):
            raise GraphError(f"cannot rename {old!r}: graph inputs and constants keep their names")
        self._declare(new, self._types.pop(old))
        self._nodes = [
            Node(n.name, n.op, n.version,
                 tuple(new if t == old else t for t in n.inputs),
                 tuple(new if t == old else t for t in n.outputs), n.attrs)
            for n in self._nodes]
