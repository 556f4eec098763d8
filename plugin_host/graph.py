"""A model graph: nodes over named tensors, checked by shape inference when it is created.

A :class:`Graph` is plain data: the input and output :class:`~abi.TensorSpec` s, the nodes in
execution order, the constant tensors (weights and frozen state such as BatchNorm running
statistics) and the recurrent-state pairs. :meth:`Graph.check` runs every node's shape rule from
the op table (and its value rule on the constants it reads: the gather op's indices), so a model
that breaks a layer contract fails here, before its first call, with a
:class:`~abi.errors.GraphError` naming the node. The executor calls it; so does the builder.

Naming follows tinygrad's state dicts: a layer's tensors are ``<layer name>.<parameter>``
(``vision.0.conv.weight``), so the names are part of the ABI.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from abi import (TensorSpec, TensorType, dtypes, get_op, infer_shapes, normalize_attrs,
                 stored_attrs)
from abi.errors import GraphError, PluginHostError, ShapeError
from abi.ops import check_values

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:/-]*$")

#: The most elements a node may compute into one value (1 GiB of float32), symbolic dims counted
#: as 1: a graph whose shapes ask for more (a resize or pad to 10**10 elements, in a hostile
#: artifact or a builder's typo) is refused when it is built or loaded, before a backend
#: prepares it or the executor allocates. The ONNX importer's default cap is the same.
MAX_VALUE_ELEMENTS = 1 << 28


@dataclass(frozen=True)
class Node:
    """One op application.

    ``inputs`` are tensor names in the op's positional order, ``None`` for an omitted optional
    input; ``outputs`` are the names this node defines; ``attrs`` are the op's attributes.
    """

    name: str
    op: str
    version: int
    inputs: tuple[str | None, ...]
    outputs: tuple[str, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "op": self.op, "version": self.version,
                "inputs": list(self.inputs), "outputs": list(self.outputs),
                "attrs": dict(self.attrs)}


def frozen(array: np.ndarray) -> np.ndarray:
    """A read-only view of ``array`` (the array itself when it already is read-only)."""
    if not array.flags.writeable:
        return array
    view = array.view()
    view.flags.writeable = False
    return view


class Graph:
    """A checked model graph.

    Parameters
    ----------
    name:
        The model's name.
    inputs, outputs:
        TensorSpecs of the graph's inputs and outputs.
    nodes:
        Nodes in execution order (every input defined before use).
    tensors:
        Constant tensors by name: weights and frozen state. Stored read-only.
    state:
        Recurrent state: ``{input name: output name}``. After each call the executor feeds the
        output back as that input on the next call; both must have the same spec.

    Raises :class:`GraphError` naming the node (or tensor) when the graph is malformed or a
    node's shape contract fails.
    """

    def __init__(self, name: str, *, inputs: list[TensorSpec], outputs: list[TensorSpec],
                 nodes: list[Node], tensors: Mapping[str, np.ndarray],
                 state: Mapping[str, str] | None = None) -> None:
        self.name = name
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.nodes = [self._normalized(n) for n in nodes]
        self.tensors = MappingProxyType({k: frozen(np.asarray(v)) for k, v in tensors.items()})
        self.state = MappingProxyType(dict(state or {}))
        self.types = self.check()

    # -- checking -------------------------------------------------------------------------------

    @staticmethod
    def _normalized(node: Node) -> Node:
        try:
            opdef = get_op(node.op, node.version)
            attrs = normalize_attrs(opdef, dict(node.attrs))
        except PluginHostError as exc:
            raise GraphError(str(exc), node=node.name) from None
        return Node(node.name, node.op, node.version, tuple(node.inputs), tuple(node.outputs),
                    MappingProxyType(attrs))

    def check(self) -> dict[str, TensorType]:
        """Infer every tensor's type; raise GraphError at the first broken contract."""
        types: dict[str, TensorType] = {}
        for spec in self.inputs:
            self._define(types, spec.name, TensorType(spec.shape, spec.dtype), "graph input")
        for tname, array in self.tensors.items():
            if not _NAME.match(tname):
                raise GraphError(f"tensor name {tname!r} is not a valid name")
            self._define(types, tname, TensorType(array.shape, dtypes.from_numpy(array.dtype)),
                         "constant tensor")
        seen_nodes: set[str] = set()
        for node in self.nodes:
            if node.name in seen_nodes:
                raise GraphError("duplicate node name", node=node.name)
            seen_nodes.add(node.name)
            in_types = []
            for position, tname in enumerate(node.inputs):
                if tname is None:
                    in_types.append(None)
                elif tname not in types:
                    raise GraphError(f"input {position} is {tname!r}, which is not defined before "
                                     "this node (not a graph input, constant, or earlier output)",
                                     node=node.name)
                else:
                    in_types.append(types[tname])
            try:
                opdef = get_op(node.op, node.version)
                out_types = infer_shapes(opdef, in_types, dict(node.attrs))
                check_values(opdef, in_types, [None if t is None else self.tensors.get(t)
                                               for t in node.inputs], node.attrs)
            except PluginHostError as exc:
                raise GraphError(str(exc), node=node.name) from None
            if len(out_types) != len(node.outputs):
                raise GraphError(f"{node.op} produces {len(out_types)} output(s) but the node "
                                 f"names {len(node.outputs)}", node=node.name)
            for tname, ttype in zip(node.outputs, out_types):
                n = math.prod(d for d in ttype.shape if isinstance(d, int))
                if n > MAX_VALUE_ELEMENTS:
                    raise GraphError(f"output {tname!r} {tuple(ttype.shape)} would hold {n} "
                                     f"elements, above the {MAX_VALUE_ELEMENTS} one value may "
                                     f"hold", node=node.name)
                self._define(types, tname, ttype, f"output of node {node.name!r}")
        self._check_outputs(types)
        self._check_state()
        return types

    def check_sizes(self, shapes: Mapping[str, tuple[int, ...]]) -> None:
        """Ask every node's shape rule, in order, of the sizes one call's inputs have
        (``shapes``: input name -> shape): the first rule that refuses them as sizes raises
        its ShapeError with the node in its context, as a kernel that asks it does. A backend
        whose runtime refused a call asks this, so that what the ABI refuses is refused in
        its words, naming the node, whichever backend runs. A rule that refuses otherwise
        (one that reads a dim's name, which a size replaced: a slice bound read from a
        ``like`` tensor) ends the search without an answer: the later rules would be asked
        of sizes the graph never gives them. An output size a value decides stays a name, as
        at build, and rules refuse only what is known different."""
        types = dict(self.types)
        for spec in self.inputs:
            if spec.name in shapes:
                types[spec.name] = TensorType(tuple(shapes[spec.name]), spec.dtype)
        for node in self.nodes:
            out_types = sizes_checked(node, [None if t is None else types[t]
                                             for t in node.inputs])
            if out_types is None:
                return
            types.update(zip(node.outputs, out_types))

    @staticmethod
    def _define(types: dict[str, TensorType], name: str, ttype: TensorType, what: str) -> None:
        if name in types:
            raise GraphError(f"tensor {name!r} ({what}) is defined twice")
        types[name] = TensorType(tuple(ttype.shape), ttype.dtype)

    def _check_outputs(self, types: dict[str, TensorType]) -> None:
        for spec in self.outputs:
            if spec.name not in types:
                raise GraphError(f"graph output {spec.name!r} is not produced by any node")
            got = types[spec.name]
            if got.dtype != spec.dtype:
                raise GraphError(f"graph output {spec.name!r} is declared {spec.dtype} but the "
                                 f"graph produces {got.dtype}")
            if len(got.shape) != len(spec.shape) or any(
                    isinstance(g, int) and isinstance(s, int) and g != s
                    for g, s in zip(got.shape, spec.shape)):
                raise GraphError(f"graph output {spec.name!r} is declared {tuple(spec.shape)} but "
                                 f"the graph produces {tuple(got.shape)}")

    def _check_state(self) -> None:
        ins = {s.name: s for s in self.inputs}
        outs = {s.name: s for s in self.outputs}
        for src, dst in self.state.items():
            if src not in ins:
                raise GraphError(f"state {src!r} is not a graph input")
            if dst not in outs:
                raise GraphError(f"state {src!r} is carried by {dst!r}, which is not a graph output")
            a, b = ins[src], outs[dst]
            if tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
                raise GraphError(f"state {src!r} {tuple(a.shape)} {a.dtype} and its next value "
                                 f"{dst!r} {tuple(b.shape)} {b.dtype} differ")
            if any(isinstance(d, str) for d in a.shape):
                raise GraphError(f"state {src!r} must have a fixed shape, got {tuple(a.shape)}")

    # -- description (artifact manifests) -------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The graph without tensor bytes, as plain msgpack/JSON-friendly data.

        ``{"name", "inputs", "outputs" (TensorSpec dicts), "nodes" (name, op, version, inputs,
        outputs, attrs with defaults filled in but for attributes added to an op later, see
        :func:`abi.stored_attrs`, atomic), "constants" (name, dtype, shape, in
        order), "state" ({input: output})}``. :meth:`from_dict` rebuilds the graph from it and
        the constant arrays; artifacts store it in their manifest.
        """
        return {
            "name": self.name,
            "inputs": [s.to_dict() for s in self.inputs],
            "outputs": [s.to_dict() for s in self.outputs],
            "nodes": [{"name": n.name, "op": n.op, "version": n.version,
                       "inputs": list(n.inputs), "outputs": list(n.outputs),
                       "attrs": _plain(stored_attrs(get_op(n.op, n.version), n.attrs)),
                       "atomic": get_op(n.op, n.version).atomic} for n in self.nodes],
            "constants": [{"name": k, "dtype": dtypes.from_numpy(a.dtype), "shape": list(a.shape)}
                          for k, a in self.tensors.items()],
            "state": dict(self.state),
        }

    @classmethod
    def from_dict(cls, unverified: Any, tensors: Mapping[str, np.ndarray]) -> Graph:
        """Rebuild a graph from :meth:`to_dict` output read from an untrusted source.

        ``tensors`` must hold exactly the declared constants, each with its declared dtype and
        shape (they are used as given, e.g. read-only views of a mapped artifact). Node
        attributes must be in normalized form (defaults filled in but for attributes added to an
        op later, as :meth:`to_dict` writes them) and each node's atomic flag must match this
        host's op table. Then the graph's own checks run. Raises GraphError (naming the node
        where there is one).
        """
        from abi.artifact import check_graph_dict, encode

        try:
            g = check_graph_dict(unverified)
        except PluginHostError as exc:
            raise GraphError(f"graph description: {exc}") from None
        declared = {c["name"]: c for c in g["constants"]}
        missing = [k for k in declared if k not in tensors]
        extra = [k for k in tensors if k not in declared]
        if missing or extra:
            raise GraphError(f"constants: missing {missing[:8]}, undeclared {extra[:8]}")
        arrays = {}
        for name, const in declared.items():
            array = tensors[name]
            if not isinstance(array, np.ndarray):
                raise GraphError(f"constant {name!r} is a {type(array).__name__}, not an array")
            got = (dtypes.from_numpy(array.dtype) if array.dtype in _ABI_NUMPY else
                   str(array.dtype), list(array.shape))
            if got != (const["dtype"], const["shape"]):
                raise GraphError(f"constant {name!r} is {got[0]} {tuple(got[1])}, declared "
                                 f"{const['dtype']} {tuple(const['shape'])}")
            arrays[name] = array
        nodes = []
        for n in g["nodes"]:
            try:
                opdef = get_op(n["op"], n["version"])
                normalized = _plain(stored_attrs(opdef, normalize_attrs(opdef, n["attrs"])))
                same = encode(normalized) == encode(n["attrs"])
            except PluginHostError as exc:
                raise GraphError(str(exc), node=n["name"]) from None
            if not same:
                raise GraphError(f"{opdef}: attributes are not in normalized form (expected "
                                 f"{normalized})", node=n["name"])
            if opdef.atomic != n["atomic"]:
                raise GraphError(f"{opdef}: atomic is {opdef.atomic} in this host's op table, "
                                 f"the description says {n['atomic']}", node=n["name"])
            nodes.append(Node(n["name"], n["op"], n["version"], tuple(n["inputs"]),
                              tuple(n["outputs"]), n["attrs"]))
        try:
            inputs = [TensorSpec.from_dict(s) for s in g["inputs"]]
            outputs = [TensorSpec.from_dict(s) for s in g["outputs"]]
        except PluginHostError as exc:  # pragma: no cover - check_graph_dict parsed them
            raise GraphError(f"graph description: {exc}") from None
        return cls(g["name"], inputs=inputs, outputs=outputs, nodes=nodes, tensors=arrays,
                   state=g["state"])

    # -- views ----------------------------------------------------------------------------------

    @property
    def feed_inputs(self) -> list[TensorSpec]:
        """The inputs a caller supplies on every call (everything but recurrent state)."""
        return [s for s in self.inputs if s.name not in self.state]

    def consumers(self, tensor: str) -> list[tuple[Node, int]]:
        """Nodes reading ``tensor`` and the input position they read it at."""
        return [(n, i) for n in self.nodes for i, t in enumerate(n.inputs) if t == tensor]

    def __repr__(self) -> str:
        return (f"Graph({self.name!r}, {len(self.nodes)} nodes, {len(self.tensors)} tensors, "
                f"inputs={[s.name for s in self.inputs]}, outputs={[s.name for s in self.outputs]})")


def sizes_checked(node: Node, in_types: list[TensorType | None]) -> list[TensorType] | None:
    """``node``'s shape rule asked of ``in_types`` (sizes a call has): its output types; a
    ShapeError, the node in its context, where it refuses them as sizes; None where it
    refuses them otherwise (:meth:`Graph.check_sizes`)."""
    try:
        return infer_shapes(get_op(node.op, node.version), in_types, dict(node.attrs))
    except ShapeError as exc:
        exc.context.setdefault("node", node.name)
        raise
    except PluginHostError:
        return None


def _plain(value: Any) -> Any:
    """Normalized attribute values as plain data: tuples become lists, recursively."""
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


_ABI_NUMPY = frozenset(dtypes.to_numpy(name) for name in dtypes.DTYPES)
