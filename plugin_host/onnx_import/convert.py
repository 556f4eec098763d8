"""Turn a checked ONNX ModelProto into a :class:`~plugin_host.graph.Graph`.

The :class:`Importer` walks the ONNX nodes in order. A node whose inputs are all known at
import time is folded (:mod:`.fold`); a node matching a known decomposition starts a pattern
(:mod:`.patterns`); every other node goes through the op mapping table (:mod:`.ops`), which
emits nodes of the ABI's op table. Every emitted node runs its shape rule at once, so a mapping
that breaks a layer contract fails at the ONNX node that caused it, naming that node and its op.

The ABI comes from the ONNX graph: input and output names, shapes (``dim_param`` becomes a
symbolic dim) and dtypes, with a layout guessed from rank (NCHW for 4-D, NCL for 3-D, NC for
2-D, N for 1-D) unless the caller gives one.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from abi import TensorSpec, TensorType, dtypes, get_op, infer_shapes, normalize_attrs
from abi.ops import dims as dim_math
from abi.errors import PluginHostError

from ..errors import ModelFileError, UnsupportedModelError
from ..graph import Graph, Node
from . import symbolic
from .fold import FOLDERS, OverCap, fold, int_vector
from .names import DIM_NAME, dim_name, is_run_time, sanitized, unnamed_dim
from .reader import (DEFAULT_READ_LIMITS, FOUR_BIT, ONNX_DTYPES, OPSETS, ReadLimits,
                     default_opset, element_type, op_key, to_array)

__all__ = ["Importer", "ImportedModel", "onnx_to_graph", "DEFAULT_LAYOUTS"]

#: the ops that may read a 4-bit constant -> the inputs they may read it at (values, zero point)
_FOUR_BIT_READERS = {"DequantizeLinear": {0, 2}, "com.microsoft.GatherBlockQuantized": {0, 3}}

#: Layout by rank for inputs and outputs the caller does not name.
DEFAULT_LAYOUTS = {0: "SCALAR", 1: "N", 2: "NC", 3: "NCL", 4: "NCHW", 5: "NCDHW"}

#: Folded ops whose result is still "that initializer" for naming (reshaped, cast, transposed).
_SAME_VALUES = frozenset({"Identity", "Transpose", "Cast", "CastLike", "Reshape", "Unsqueeze",
                          "Squeeze", "Flatten"})
_FLOAT = 1  # ONNX TensorProto.FLOAT
#: Elements folding may make per element of the model's own constants (initializers and
#: Constant nodes), beyond the cap on one tensor: the folded values of a model (a weight cast,
#: transposed and reshaped is three) are bounded by what the file holds, so a small file cannot
#: make gigabytes of them (the ONNX fuzz met a 40 KB one expanding two constants to 2**27
#: values each, 6 s and gigabytes before the third fold's refusal)
FOLDED_PER_CONSTANT = 4


@dataclass
class ImportedModel:
    """The graph, how its ABI names map back to the ONNX model's, and the checked model (and,
    for a model of an older opset, the model as read: the reference runs that one)."""

    graph: Graph
    model: Any = None                                          # the onnx.ModelProto
    onnx_inputs: dict[str, str] = field(default_factory=dict)   # ABI name -> ONNX name
    onnx_outputs: dict[str, str] = field(default_factory=dict)  # ABI name -> ONNX name
    opset: int = 0
    float16_model: Any = None  # the float16 original of a model upcast to float32
    bfloat16_model: Any = None  # the bfloat16 original (after any float16 upcast)
    float64_model: Any = None  # the float64 model (after any upcast) downcast to float32
    #: the ModelProto as read when ``model`` is its opset upgrade or has its functions inlined
    original: Any = None
    notes: list[str] = field(default_factory=list)  # for the build summary
    #: input dim -> the length of it the graph reads, computed from other input dims (a mask
    #: of length ``total`` read over ``past+seq``): the golden cases draw it that long
    reads: dict[str, Any] = field(default_factory=dict)
    #: graph input (ABI name) -> (column, count): that column of its last axis holds indices
    #: into [0, count) that the graph reads as floats (MaxRoiPool's batch index; count a size,
    #: or the name of an input dim): the golden cases draw it so
    index_columns: dict[str, tuple[int, Any]] = field(default_factory=dict)
    #: graph input (ABI name) -> pairs of columns (low, high) of its last axis, a box's
    #: corners, that the golden cases draw in order (RoiAlign's adaptive sampling fails in
    #: onnxruntime on a roi of negative size along one axis)
    ordered_columns: dict[str, tuple[tuple[int, int], ...]] = field(default_factory=dict)

    @property
    def original_opset(self) -> int:
        """The opset of :attr:`original` (0 when there is none)."""
        return default_opset(self.original) or 0 if self.original is not None else 0


def _finite(value: Any) -> bool:
    """False for a float attribute (or one in a list) that is inf or nan."""
    if isinstance(value, float):
        return math.isfinite(value)
    return all(map(_finite, value)) if isinstance(value, (list, tuple)) else True


def _called(node) -> str:
    """How messages name an ONNX node: its name, else its first output."""
    return node.name or (node.output[0] if node.output else "?")


#: If branches and Loop bodies (:mod:`.loop`) inlined one inside another, at most (a file
#: cannot make the import recurse without end)
MAX_IF_DEPTH = 16


def _branch_reads(node) -> set[str]:
    """Every name the subgraphs of ``node`` (an If's branches, a Loop's body) read or yield,
    nested ones included: read by ``node`` as far as the consumers of a value go."""
    import onnx

    names: set[str] = set()
    stack = [a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH]
    while stack:
        g = stack.pop()
        names.update(o.name for o in g.output)
        for n in g.node:
            names.update(t for t in n.input if t)
            stack.extend(a.g for a in n.attribute if a.type == onnx.AttributeProto.GRAPH)
    return names


def attributes(node, limits: ReadLimits) -> dict[str, Any]:
    """A NodeProto's attributes as Python values (tensors as numpy arrays)."""
    import onnx

    A = onnx.AttributeProto
    out: dict[str, Any] = {}
    for a in node.attribute:
        if a.type == A.INT:
            out[a.name] = int(a.i)
        elif a.type == A.FLOAT:  # shortest decimal of the float32 (1e-05, not 9.99...e-06)
            out[a.name] = float(str(np.float32(a.f)))
        elif a.type == A.STRING:
            out[a.name] = a.s.decode("utf-8", "replace")
        elif a.type == A.INTS:
            out[a.name] = [int(v) for v in a.ints]
        elif a.type == A.STRINGS:
            out[a.name] = [s.decode("utf-8", "replace") for s in a.strings]
        elif a.type == A.FLOATS:
            out[a.name] = [float(str(np.float32(v))) for v in a.floats]
        elif a.type == A.TENSOR:
            out[a.name] = to_array(a.t, limits)
        else:
            raise UnsupportedModelError(f"attribute {a.name!r} of type "
                                        f"{A.AttributeType.Name(a.type)} is not supported",
                                        node=node.name or (node.output[0] if node.output
                                                           else "?"), op=node.op_type)
    return out


def _names(entries) -> list[str]:
    """The names of run-time dims in ``entries`` (dims and ints), sorted: ``w`` and ``h`` of
    ``w-1`` and ``h//2`` (not the name of a rule, such as ``broadcast(``)."""
    return sorted({n for e in entries if type(e) is str
                   for n in re.findall(r"[A-Za-z_]\w*(?![\w(])", e)})


class Importer:
    """State of one import: known constants, emitted nodes and tensors, names in use."""

    def __init__(self, model, *, limits: ReadLimits = DEFAULT_READ_LIMITS) -> None:
        self.model = model
        self.limits = limits
        self.opset = default_opset(model) or 0
        self.consts: dict[str, np.ndarray] = {}    # ONNX name -> value known at import
        # elements folding may still make: the cap on one tensor, and FOLDED_PER_CONSTANT per
        # element of the model's own constants (run() and _constant() add those)
        self.fold_allowance = limits.max_tensor_elements
        self.four_bit: set[str] = set()            # 4-bit initializers, read as 8-bit here
        self.sym: dict[str, np.ndarray] = {}       # shape values holding run-time dims
        self.sym_float: dict[str, np.ndarray] = {}  # such a value cast to float -> the value
        # a value computed at run time from such a value -> the run-time dims it reads
        self.from_dims: dict[str, list[str]] = {}
        self.dim_source: dict[str, tuple] = {}     # run-time dim -> (graph tensor, its axis)
        # the run-time dims of the first dims_indexed tensors of self.types, as products ->
        # (graph tensor, its axis): run_time_sizes.dim_source reads it and grows it
        self.dims_index: dict[tuple, tuple] = {}
        self.dims_indexed = 0
        self.spread: dict[str, np.ndarray] = {}    # ONNX name -> the constant it broadcasts
        self.origin: dict[str, str] = {}           # ONNX constant -> name it descends from
        self.values: dict[str, str] = {}           # ONNX name -> graph tensor name
        self.seqs: dict[str, list[str]] = {}       # ONNX sequence -> its elements' ONNX names
        self.types: dict[str, TensorType] = {}     # graph tensor name -> type
        self.nodes: list[Node] = []
        self.tensors: dict[str, np.ndarray] = {}   # graph constants
        self.const_names: dict[int, tuple] = {}    # id(array) -> (graph constant name, array)
        # tensor names and node names are two namespaces, as in the Graph and in ONNX: a node
        # named like its output ("y" computing "y") leaves the output its ONNX name
        self.names: dict[bool, set[str]] = {False: set(), True: set()}
        self.suffixes: dict[tuple, int] = {}       # (node?, base) -> last suffix fresh() gave it
        self.node = None                           # the ONNX node being mapped
        self.skip: set[int] = set()                # ONNX nodes consumed by a pattern
        self.consumers: dict[str, list[int]] = {}
        self.graph_outputs = {o.name for o in model.graph.output}
        self.onnx_output_names: set[str] = set()
        self.unrolled = 0                          # recurrent steps written so far (capped)
        self.fake_quantized: dict[str, str] = {}   # QuantizeLinear output in float32 -> dtype
        self.integer_codes: dict[tuple, str] = {}  # (fake_quantized, dtype) -> its cast
        self.inlined = 0                           # nodes of If branches, Loop bodies so far
        self.if_depth = 0                          # subgraphs being inlined, one in another
        self.function_depth = 0                    # ONNX function bodies being expanded
        self.loop_iterations = 0                   # Loop iterations unrolled so far (capped)
        self.loop_names: set[str] = set()          # stems of unrolled Loops' names
        self.notes: list[str] = []                 # for the build summary
        self.reads: dict[str, Any] = {}            # ImportedModel.reads
        self.index_columns: dict[str, tuple[int, Any]] = {}  # ImportedModel.index_columns
        self.ordered_columns: dict[str, tuple] = {}  # ImportedModel.ordered_columns
        self.abi_inputs: dict[str, str] = {}       # graph input's ONNX name -> its ABI name
        self.input_dims: set[str] = set()          # the graph inputs' run-time dims
        self.output_dims: dict[str, Any] = {}      # an output dim_param -> the dim it names
        for i, n in enumerate(model.graph.node):
            for t in n.input:
                if t:
                    self.consumers.setdefault(t, []).append(i)
            for t in _branch_reads(n):  # read inside an If branch: read by the If node
                self.consumers.setdefault(t, []).append(i)

    def _dequantized_only(self, t) -> bool:
        """Whether initializer ``t`` is 4-bit (:data:`.reader.FOUR_BIT`), after refusing one
        that a node other than a DequantizeLinear or GatherBlockQuantized reads (their values
        or zero point)."""
        if t.data_type not in FOUR_BIT:
            return False
        for i in self.consumers.get(t.name, []):
            node = self.model.graph.node[i]
            reads = {k for k, name in enumerate(node.input) if name == t.name}
            if not reads <= _FOUR_BIT_READERS.get(op_key(node), set()):
                raise UnsupportedModelError(
                    f"tensor {t.name!r} of element type {element_type(t.data_type)} is read by "
                    f"{node.op_type} {_called(node)!r}: only a DequantizeLinear's or "
                    f"GatherBlockQuantized's values and zero point may be 4-bit (a constant, "
                    f"dequantized at import)")
        return True

    # -- errors -----------------------------------------------------------------------------

    @property
    def node_name(self) -> str:
        return _called(self.node) if self.node is not None else "?"

    def unsupported(self, message: str) -> UnsupportedModelError:
        return UnsupportedModelError(message, node=self.node_name,
                                     op=self.node.op_type if self.node is not None else None)

    # -- names ------------------------------------------------------------------------------

    def fresh(self, onnx_name: str, *, node: bool = False) -> str:
        """A valid, unused tensor name (a node name with ``node``) derived from ``onnx_name``."""
        base, names = sanitized(onnx_name), self.names[node]
        name = base
        if name in names:  # names are never freed: the next free suffix is past the last
            n = self.suffixes.get((node, base), 1)
            while name in names:
                n += 1
                name = f"{base}_{n}"
            self.suffixes[(node, base)] = n
        names.add(name)
        return name

    def fresh_node(self, onnx_name: str) -> str:
        return self.fresh(onnx_name, node=True)

    # -- values -----------------------------------------------------------------------------

    def is_const(self, name: str) -> bool:
        return name in self.consts

    def const(self, name: str, what: str = "input") -> np.ndarray:
        if name not in self.consts:
            self._not_a_sequence(name, what)
            if name in self.sym:
                held = symbolic.entries(self.sym[name])
                of = "" if all(type(e) is int or e.isidentifier() for e in held) else (
                    f" (of {_names(held)})")
                raise self.unsupported(f"{what} {name!r} must be a constant (known at import), "
                                       f"but it holds run-time dims: {held}{of}")
            read = (f" from the run-time dims {self.from_dims[name]}"
                    if name in self.from_dims else "")
            raise self.unsupported(f"{what} {name!r} must be a constant (known at import), but "
                                   f"it is computed at run time{read}")
        return self.consts[name]

    def shape_value(self, name: str, what: str) -> list:
        """A 1-D integer input known at import as its entries: ints, and symbolic dims where it
        was computed from a run-time shape (:mod:`.symbolic`)."""
        if name in self.sym:
            value = self.sym[name]
            if value.ndim != 1:
                raise ModelFileError(f"{what} must be a 1-D integer tensor, got shape "
                                     f"{value.shape}")
            return symbolic.entries(value)
        return int_vector(self.const(name, what), what)

    def set_const(self, name: str, value: np.ndarray, origin: str | None = None) -> None:
        if value.dtype.kind not in "biuf" or dtypes.from_numpy(value.dtype) not in dtypes.DTYPES:
            raise self.unsupported(f"value {name!r} has dtype {value.dtype}, not an ABI dtype")
        self.consts[name] = value
        self.origin[name] = origin or name

    def _not_a_sequence(self, name: str, what: str = "input") -> None:
        """Refuse ``name`` where a tensor is wanted when it is a sequence (:mod:`.sequence`)."""
        if name in self.seqs:
            from .sequence import ONLY_HERE

            raise self.unsupported(f"{what} {name!r} is a sequence of {len(self.seqs[name])} "
                                   f"element(s) where a tensor is wanted; {ONLY_HERE}")

    def set_seq(self, name: str, items: list[str]) -> None:
        """ONNX value ``name`` becomes the sequence of ``items`` (ONNX names of its elements);
        refused where it is a graph output."""
        if name in self.graph_outputs:
            from .sequence import ONLY_HERE

            raise self.unsupported(f"graph output {name!r} is a sequence; {ONLY_HERE}")
        self.seqs[name] = items

    def type_of(self, name: str) -> TensorType:
        self._not_a_sequence(name)
        if name in self.consts:
            a = self.consts[name]
            return TensorType(a.shape, dtypes.from_numpy(a.dtype))
        if name in self.sym:
            return TensorType(self.sym[name].shape, "int64")
        if name not in self.values:
            raise ModelFileError(f"tensor {name!r} is used before it is defined",
                                 node=self.node_name)
        return self.types[self.values[name]]

    def static_shape(self, name: str) -> tuple[int, ...]:
        shape = self.type_of(name).shape
        if not all(type(d) is int for d in shape):
            raise self.unsupported(f"tensor {name!r} needs a static shape here, got {shape}")
        return tuple(shape)

    def tensor(self, name: str) -> str:
        """The graph tensor for ONNX value ``name`` (a constant is added to the graph; a shape
        value holding run-time dims becomes an int64 tensor computed when the call runs)."""
        if name in self.values:
            return self.values[name]
        if name in self.sym:
            from .run_time_sizes import shape_value_tensor

            shape_value_tensor(self, self.sym[name], name, "int64")
            self.from_dims[name] = _names(symbolic.entries(self.sym[name]))
            return self.values[name]
        return self.add_constant(self.const(name), self.origin.get(name, name))

    def add_constant(self, array: np.ndarray, origin: str) -> str:
        """Add ``array`` as a graph constant named after ``origin`` (reused when identical)."""
        array = np.require(array, requirements="C")  # keeps 0-d (ascontiguousarray: 1-d)
        known = self.const_names.get(id(array))
        if known is not None and known[1] is array:
            return known[0]
        name = self.fresh(origin)
        self.tensors[name] = array
        self.types[name] = TensorType(array.shape, dtypes.from_numpy(array.dtype))
        self.const_names[id(array)] = (name, array)
        return name

    # -- emission ---------------------------------------------------------------------------

    def emit(self, op: str, inputs: Sequence[str | None], outputs: Sequence[str | None],
             attrs: Mapping[str, Any] | None = None, *, suffix: str = "") -> list[str]:
        """Add one ABI node; ``outputs`` are ONNX names to bind (None: an internal tensor).

        Returns the graph tensor names of the outputs. An ``identity`` adds no node: its
        output is its input under another name (a graph output gets its node in ``_outputs``).
        """
        if op == "identity" and len(inputs) == 1 and inputs[0] is not None \
                and len(outputs) == 1 and not attrs:
            if outputs[0]:
                self.alias(outputs[0], inputs[0])
            return [inputs[0]]
        node_name = self.fresh_node(self.node_name + suffix)
        try:
            opdef = get_op(op)
            attrs = normalize_attrs(opdef, dict(attrs or {}))
            out_types = infer_shapes(opdef, [None if t is None else self.types[t]
                                             for t in inputs], attrs)
        except PluginHostError as exc:
            raise self.unsupported(f"maps to {op}, which refuses it: {exc}") from None
        infinite = {k: v for k, v in attrs.items() if not _finite(v)}
        if infinite:  # the artifact's manifest stores finite numbers only
            raise self.unsupported(f"maps to {op} with {infinite}, which is not finite")
        if len(out_types) != len(outputs):
            raise self.unsupported(f"maps to {op} with {len(out_types)} output(s), the node has "
                                   f"{len(outputs)}")
        for t in out_types:  # the executor allocates them: refuse a bomb before it runs
            self.check_size(f"its {op} output", t.shape)
        names = []
        for i, (o, t) in enumerate(zip(outputs, out_types)):
            g = self.fresh(o if o else f"{node_name}.{i}")
            self.types[g] = t
            if o:
                self.values[o] = g
            names.append(g)
        self.nodes.append(Node(node_name, op, opdef.version, tuple(inputs), tuple(names), attrs))
        return names

    def step(self, op: str, inputs: Sequence[str | None], name: str,
             attrs: Mapping[str, Any] | None = None) -> str:
        """One internal ABI node of the node being mapped (named ``<node>/<name>``); its
        output."""
        return self.emit(op, inputs, [None], attrs, suffix=f"/{name}")[0]

    def index_constant(self, value: Any, name: str) -> str:
        """An int64 constant of the node being mapped (named ``<node>.<name>``)."""
        return self.add_constant(np.asarray(value, np.int64), f"{self.node_name}.{name}")

    def check_size(self, what: str, shape: Sequence) -> None:
        """ModelFileError when a value of ``shape`` (a symbolic dim counted as 1, as golden
        inputs are drawn) would have more elements than the tensor cap."""
        n = math.prod(d for d in shape if type(d) is int)
        if n > self.limits.max_tensor_elements:
            node = self.node_name if self.node is not None else None
            raise ModelFileError(f"{what} of shape {tuple(shape)} would have {n} elements, above "
                                 f"the cap of {self.limits.max_tensor_elements}", node=node,
                                 op=self.node.op_type if self.node is not None else None)

    def same_dims(self, a, b, what: str) -> None:
        """Refuse dims ``a`` and ``b`` that ``what`` binds together unless known equal: a
        ModelFileError where both are fixed sizes, else an UnsupportedModelError (run-time
        dims that cannot be checked equal at import)."""
        if dim_math.known_equal(a, b):
            return
        if type(a) is int and type(b) is int:
            raise ModelFileError(f"{what} is bound to sizes {a} and {b}")
        raise self.unsupported(f"{what} is bound to dims {a!r} and {b!r}, which cannot be "
                               f"checked equal at import")

    def alias(self, onnx_name: str, graph_name: str) -> None:
        self.values[onnx_name] = graph_name

    def bind(self, onnx_name: str, src: str, what: str) -> None:
        """ONNX value ``onnx_name`` becomes what ``src`` holds (a constant, a shape value or a
        graph tensor): a subgraph's output or input; ModelFileError if ``src`` was never
        computed (``what`` names it)."""
        if src in self.consts:
            self.set_const(onnx_name, self.consts[src], self.origin.get(src))
        elif src in self.sym:
            self.sym[onnx_name] = self.sym[src]
        elif src in self.values:
            self.alias(onnx_name, self.values[src])
        elif src in self.seqs:
            self.set_seq(onnx_name, list(self.seqs[src]))
        else:
            raise ModelFileError(f"{what} {src!r} is never computed")

    # -- the walk ---------------------------------------------------------------------------

    def run(self, *, name: str, layouts: Mapping[str, str], state: Mapping[str, str]
            ) -> ImportedModel:
        from . import ops, patterns

        g = self.model.graph
        for t in g.initializer:
            if self._dequantized_only(t):
                self.four_bit.add(t.name)
            self.set_const(t.name, to_array(t, self.limits, four_bit=t.name in self.four_bit))
            self.fold_allowance += FOLDED_PER_CONSTANT * self.consts[t.name].size
        specs, onnx_inputs = [], {}
        for vi in g.input:
            if vi.name in self.consts:
                continue  # an initializer listed as an input (old IR): a constant here
            if vi.type.HasField("sequence_type"):
                from .sequence import ONLY_HERE

                users = self.consumers.get(vi.name)
                raise UnsupportedModelError(f"graph input {vi.name!r} is a sequence; {ONLY_HERE}",
                                            node=_called(g.node[users[0]]) if users else None,
                                            op=g.node[users[0]].op_type if users else None)
            g_name = self.fresh(vi.name)
            spec = self._spec(vi, g_name, layouts, "input")
            self.check_size(f"graph input {vi.name!r}", spec.shape)
            self.values[vi.name] = g_name
            self.types[g_name] = TensorType(spec.shape, spec.dtype)
            specs.append(spec)
            onnx_inputs[g_name] = vi.name
            self.abi_inputs[vi.name] = g_name
        self.input_dims = {d for spec in specs for d in spec.shape if type(d) is not int}
        for i, node in enumerate(g.node):  # constant subgraphs first: patterns look ahead
            if node.op_type == "Constant" or (node.op_type in FOLDERS and node.input and all(
                    t == "" or t in self.consts for t in node.input)):
                self.node = node
                self._map(node, {}, {}, i)
                self.skip.add(i)
        for i, node in enumerate(g.node):
            if i in self.skip:
                continue
            self.node = node
            self._map(node, ops.MAPPERS, patterns.PATTERNS, i)
        self.node = None
        from .fusion import fuse

        keep = {self.values[o.name] for o in g.output if o.name in self.values}
        self.nodes = fuse(self.nodes, self.tensors, self.types, keep, self.fresh_node,
                          self.add_constant)
        outputs, onnx_outputs = self._outputs(layouts)
        unknown = [k for k in layouts if k not in onnx_inputs and k not in onnx_outputs]
        if unknown:
            raise UnsupportedModelError(f"layouts given for unknown tensors {unknown}; inputs: "
                                        f"{sorted(onnx_inputs)}, outputs: {sorted(onnx_outputs)}")
        for src, dst in state.items():
            if src not in onnx_inputs or dst not in onnx_outputs:
                raise UnsupportedModelError(
                    f"state {src}={dst}: {src!r} must be a graph input and {dst!r} a graph "
                    f"output; inputs: {sorted(onnx_inputs)}, outputs: {sorted(onnx_outputs)}")
        self.nodes = reaching(self.nodes, {spec.name for spec in outputs})
        used = {t for n in self.nodes for t in n.inputs if t}
        self.nodes, tensors = shared_constants(
            self.nodes, {k: v for k, v in self.tensors.items() if k in used})
        try:
            graph = Graph(name, inputs=specs, outputs=outputs, nodes=self.nodes,
                          tensors=tensors, state=dict(state))
        except PluginHostError as exc:
            raise UnsupportedModelError(f"the imported graph is refused: {exc}") from None
        return ImportedModel(graph, self.model, onnx_inputs, onnx_outputs, self.opset,
                             notes=self.notes, reads=self.reads,
                             index_columns=self.index_columns,
                             ordered_columns=self.ordered_columns)

    def _map(self, node, mappers, patterns, index: int) -> None:
        op = op_key(node)
        try:
            self._dispatch(node, op, mappers, patterns, index)
        except (ModelFileError, UnsupportedModelError) as exc:
            if exc.node is not None:
                raise
            raise type(exc)(exc.message, node=self.node_name, op=op) from None  # say where
        except (IndexError, KeyError, ValueError, TypeError, ArithmeticError) as exc:
            if isinstance(exc, PluginHostError):
                raise
            # a node the checker let through but whose shape no mapper expects (hostile input)
            raise ModelFileError(f"malformed node: {type(exc).__name__}: {exc}",
                                 node=self.node_name, op=op) from None

    def _dispatch(self, node, op: str, mappers, patterns, index: int) -> None:
        if op == "If":
            return self._inline_if(node, mappers, index)
        if op == "Loop":
            from .loop import unroll

            return unroll(self, node, mappers, index)
        if op == "Scan":
            from .scan import unroll_scan

            return unroll_scan(self, node, mappers, index)
        attrs = attributes(node, self.limits)
        ins = list(node.input)
        if self.seqs and any(t in self.seqs for t in ins):
            from .sequence import ONLY_HERE, READERS

            if op == "Identity" and len(ins) == 1:
                return self.bind(node.output[0], ins[0], "input")
            if op not in READERS or ins[0] not in self.seqs or any(
                    t in self.seqs for t in ins[1:]):
                t = next(t for t in ins if t in self.seqs)
                raise self.unsupported(f"input {t!r} is a sequence, which {op} does not take; "
                                       f"{ONLY_HERE}")
        if op == "Constant":
            return self._constant(node, attrs)
        if op == "Shape" and ins:  # of a run-time value or a folded one (dynamo: zeros)
            shape = self.type_of(ins[0]).shape
            for axis, d in enumerate(shape):  # where each run-time dim can be read back
                if type(d) is not int and ins[0] in self.values:
                    self.dim_source.setdefault(d, (self.values[ins[0]], axis))
            value = np.empty(len(shape), dtype=object)
            value[:] = list(shape)
            value = value[attrs.get("start", 0):attrs.get("end", None)]
            return self._set_shape_value(node.output[0], value)
        if op == "Size" and ins:  # x.numel(): the product of the dims, run-time ones included
            count: Any = 1
            for d in self.type_of(ins[0]).shape:
                count = dim_math.mul(count, d)
            value = np.empty((), dtype=object)
            value[()] = count
            return self._set_shape_value(node.output[0], value)
        if op in patterns and patterns[op](self, node, attrs, index):
            return
        if op in FOLDERS and ins and all(t == "" or t in self.consts for t in ins):
            values = [self.consts[t] if t else None for t in ins]
            cap = min(self.limits.max_tensor_elements, self.fold_allowance)
            try:
                results = fold(op, values, attrs, outputs=len(node.output), cap=cap,
                               opset=self.opset)
            except OverCap as exc:
                spent = "" if cap == self.limits.max_tensor_elements else (
                    f" (what is left of the elements folding may make in all: the tensor cap "
                    f"{self.limits.max_tensor_elements} and {FOLDED_PER_CONSTANT} per element "
                    f"of the model's own constants)")
                raise ModelFileError(exc.message + spent, node=self.node_name, op=op) from None
            except (ModelFileError, UnsupportedModelError) as exc:
                raise type(exc)(exc.message, node=self.node_name, op=op) from None
            self.fold_allowance -= sum(r.size for r in results)
            origin = self.origin.get(ins[0]) if op in _SAME_VALUES else None
            for o, r in zip(node.output, results):
                if o:
                    self.set_const(o, r, origin)
            return
        if op == "Cast" and ins and ins[0] in self.sym and attrs.get("to") == _FLOAT:
            # a shape cast to float: computed at run time
            from .run_time_sizes import shape_value_tensor

            self.sym_float[node.output[0]] = self.sym[ins[0]]  # where a Range reads its dims
            return shape_value_tensor(self, self.sym[ins[0]], node.output[0], "float32")
        if op in symbolic.OPS and mappers and any(t in self.sym for t in ins) and all(
                t == "" or t in self.consts or t in self.sym for t in ins):
            values = [self.sym.get(t, self.consts.get(t)) if t else None for t in ins]
            try:
                results = symbolic.evaluate(op, values, attrs, outputs=len(node.output),
                                            cap=self.limits.max_tensor_elements)
            except symbolic.LeftToTheCall:
                results = None  # mapped below, its shape values read as tensors
            except (ModelFileError, UnsupportedModelError) as exc:
                raise type(exc)(exc.message, node=self.node_name, op=op) from None
            for o, r in zip(node.output, results or ()):
                if o:
                    self._set_shape_value(o, r)
            if results is not None:
                return
        mapper = mappers.get(op)
        if mapper is None and op in FOLDERS:
            from .ops import FOLDED_BECAUSE, ON_RUN_TIME_DIMS

            if op in ON_RUN_TIME_DIMS and ON_RUN_TIME_DIMS[op](self, node, attrs):
                return
            runtime = [t for t in ins if t and t not in self.consts]
            dims = "".join(f"; {t!r} holds run-time dims {symbolic.entries(self.sym[t])}"
                           for t in runtime if t in self.sym)
            why = f": {FOLDED_BECAUSE[op]}" if op in FOLDED_BECAUSE else ""
            raise self.unsupported(f"op {op!r} is supported only on constant inputs (folded at "
                                   f"import), but {runtime} are computed at run time{dims}{why}")
        if mapper is None:
            from .functions import expand
            from .ops import REFUSED, where_supported

            if op not in REFUSED and expand(self, node, mappers, index):
                return
            others = self._also_unsupported(op, mappers, patterns)
            if op in REFUSED:
                others = f" ({REFUSED[op]}){others}"
            raise self.unsupported(f"op {op!r} is not supported{others} "
                                   f"({where_supported(mappers)})")
        for t in ins:
            if t and not any(t in d for d in (self.consts, self.values, self.sym, self.seqs)):
                raise ModelFileError(f"input {t!r} is used before it is defined",
                                     node=self.node_name, op=op)
        mapper(self, node, attrs)
        read = _names(d for t in ins if t in self.from_dims for d in self.from_dims[t])
        for o in node.output if read else ():
            if o in self.values:
                self.from_dims[o] = read

    def _inline_if(self, node, mappers, index: int) -> None:
        """An If whose condition is known at import (the legacy exporter's checks on static
        shapes, such as ``Equal(Size(index), 0)``): the nodes of the branch it takes are
        mapped in its place (patterns, which look ahead in the main graph, are not tried
        there), its outputs become the If's. A condition computed at run time:
        :meth:`_both_branches`."""
        cond = node.input[0] if node.input else ""
        if cond not in self.consts:
            return self._both_branches(node, mappers, index, cond)
        value = self.consts[cond]
        if value.size != 1:
            raise ModelFileError(f"condition {cond!r} has {value.size} elements; an If's "
                                 f"condition is one value")
        taken = "then_branch" if bool(value.reshape(-1)[0]) else "else_branch"
        for out, yielded in zip(node.output, self._inline_branch(node, mappers, index, taken)):
            if out:
                self.bind(out, yielded, f"{taken} output")

    def _both_branches(self, node, mappers, index: int, cond: str) -> None:
        """An If whose condition is computed at run time (torch.jit.script's ``if p >= 0.5:``
        on a score, openWakeWord's verifier): both branches are mapped and each output is a
        ``where`` of the condition between the two, so both run on every call. Each output
        must be a tensor of one dtype and shape in both branches, else refused naming it."""
        if cond not in self.values or self.types[self.values[cond]].dtype != "bool":
            raise self.unsupported(f"condition {cond!r} is computed at run time and is not a "
                                   f"bool tensor")
        shape = self.type_of(cond).shape
        if math.prod(d if type(d) is int else 2 for d in shape) != 1:
            raise ModelFileError(f"condition {cond!r} of shape {list(shape)} is not one value")
        picked, name = {}, self.node_name
        for taken in ("then_branch", "else_branch"):
            try:
                picked[taken] = [self._run_time_tensor(y, taken) for y in
                                 self._inline_branch(node, mappers, index, taken)]
            except UnsupportedModelError as exc:  # say which If made it run
                raise UnsupportedModelError(
                    f"{exc.detail} (in the {taken} of If {name!r}, whose condition {cond!r} "
                    f"is computed at run time, so both branches are imported)",
                    node=exc.node, op=exc.op) from None
        when = self.tensor(cond)
        if shape:
            [when] = self.emit("reshape", [when], [None], {"shape": []}, suffix="/condition")
        for k, (out, a, b) in enumerate(zip(node.output, picked["then_branch"],
                                            picked["else_branch"])):
            ta, tb = self.types[a], self.types[b]
            if ta.dtype != tb.dtype or len(ta.shape) != len(tb.shape) or not all(
                    dim_math.known_equal(x, y) for x, y in zip(ta.shape, tb.shape)):
                raise self.unsupported(
                    f"output {out!r} is {ta.dtype} {list(ta.shape)} from then_branch and "
                    f"{tb.dtype} {list(tb.shape)} from else_branch; an If whose condition is "
                    f"computed at run time needs one dtype and shape from both")
            self.emit("where", [when, a, b], [out or None], suffix=f"/{k}")

    def _run_time_tensor(self, name: str, taken: str) -> str:
        """The graph tensor of branch output ``name`` (a constant becomes one)."""
        if name in self.seqs or name in self.sym:
            raise self.unsupported(f"{taken} yields {name!r}, a "
                                   f"{'sequence' if name in self.seqs else 'shape value'}; an "
                                   f"If whose condition is computed at run time yields tensors")
        if name not in self.values and name not in self.consts:
            raise ModelFileError(f"{taken} output {name!r} is never computed")
        return self.tensor(name)

    def _inline_branch(self, node, mappers, index: int, taken: str) -> list[str]:
        """Map the nodes of If ``node``'s branch ``taken`` in its place; the ONNX names of what
        it yields."""
        import onnx

        branch = {a.name: a for a in node.attribute}.get(taken)
        if branch is None or branch.type != onnx.AttributeProto.GRAPH:
            raise ModelFileError(f"the If has no graph attribute {taken!r}")
        g = branch.g
        outputs = [o for o in node.output]
        if len(g.output) != len(outputs):
            raise ModelFileError(f"{taken} yields {len(g.output)} value(s) for the If's "
                                 f"{len(outputs)} output(s)")
        self.inlined += len(g.node)
        if self.inlined + len(self.model.graph.node) > self.limits.max_nodes:
            raise ModelFileError(f"inlining {taken} brings the model to more than "
                                 f"{self.limits.max_nodes} nodes, the cap")
        if self.if_depth >= MAX_IF_DEPTH:
            raise self.unsupported(f"If branches nested more than {MAX_IF_DEPTH} deep")
        for t in g.initializer:
            self.set_const(t.name, to_array(t, self.limits))
        self.inline(g.node, mappers, index)
        return [yielded.name for yielded in g.output]

    def inline(self, nodes, mappers, index: int, *, depth: int = 1) -> None:
        """Map ``nodes`` in order in the place of the node being mapped (the nodes of a
        subgraph, ``depth`` levels further in, or glue nodes written for it); patterns, which
        look ahead in the main graph, are not tried there."""
        outer = self.node
        self.if_depth += depth
        try:
            for sub in nodes:
                self.node = sub
                self._map(sub, mappers, {}, index)
        finally:
            self.if_depth -= depth
            self.node = outer

    def _set_shape_value(self, name: str, value: np.ndarray) -> None:
        """A shape value: a constant when every entry is fixed (or a bool array, from
        Equal), else a symbolic one."""
        if value.dtype == bool:
            self.set_const(name, value)
            return
        fixed = symbolic.resolved(value)
        if fixed is not None:
            self.set_const(name, fixed)
        else:
            self.sym[name] = value

    def _also_unsupported(self, op: str, mappers, patterns, shown: int = 8) -> str:
        """The model's other op types that no mapping takes, so that one build names them all:
        ``; nor are Cos (2 nodes, first 'node_cos'), Mod (1 node, 'm')``."""
        from .functions import has_function
        from .ops import REFUSED, WALKED

        known = set(mappers) | set(FOLDERS) | set(patterns) | WALKED
        found: dict[str, list] = {}
        for node in self.model.graph.node:
            key = op_key(node)
            if key not in known and key != op and (
                    key in REFUSED or not has_function(node, self.opset)):
                found.setdefault(key, [0, _called(node)])[0] += 1
        if not found:
            return ""
        parts = [f"{t} ({n} node{'s, first' if n > 1 else ','} {name!r})"
                 for t, (n, name) in list(found.items())[:shown]]
        more = f" and {len(found) - shown} more op type(s)" if len(found) > shown else ""
        return f"; nor are {', '.join(parts)}{more} elsewhere in the model"

    def _constant(self, node, attrs: dict) -> None:
        if "value" in attrs:
            value = attrs["value"]
        elif "value_float" in attrs:
            value = np.array(attrs["value_float"], np.float32)
        elif "value_floats" in attrs:
            value = np.array(attrs["value_floats"], np.float32)
        elif "value_int" in attrs:
            value = np.array(attrs["value_int"], np.int64)
        elif "value_ints" in attrs:
            value = np.array(attrs["value_ints"], np.int64)
        else:
            raise self.unsupported(f"Constant with attributes {sorted(attrs)} is not supported")
        self.set_const(node.output[0], value)
        self.fold_allowance += FOLDED_PER_CONSTANT * value.size

    def _spec(self, vi, abi_name: str, layouts: Mapping[str, str], what: str,
              ttype: TensorType | None = None) -> TensorSpec:
        t = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
        if t is None:
            raise UnsupportedModelError(f"graph {what} {vi.name!r} is not a tensor")
        dtype = ONNX_DTYPES.get(t.elem_type)
        if dtype is None:
            raise UnsupportedModelError(f"graph {what} {vi.name!r} has ONNX element type "
                                        f"{element_type(t.elem_type)}, not an ABI dtype")
        if ttype is not None:
            declared = [None if is_run_time(d) else d.dim_value
                        for d in t.shape.dim] if t.HasField("shape") else None
            if ttype.dtype != dtype:
                raise ModelFileError(f"graph {what} {vi.name!r} is declared {dtype} "
                                     f"{tuple(declared or ())} but computes to {ttype.dtype} "
                                     f"{tuple(ttype.shape)}")
            if declared is not None and (len(declared) != len(ttype.shape) or any(
                    type(g) is int and d is not None and g != d
                    for g, d in zip(ttype.shape, declared)) or any(
                    dim.dim_param in self.input_dims and not dim_math.known_equal(
                        g, dim.dim_param) for g, dim in zip(ttype.shape, t.shape.dim))):
                shown = tuple(d if d is not None else (dim.dim_param or "?")
                              for d, dim in zip(declared, t.shape.dim))
                self.notes.append(  # onnxruntime returns what the graph computes, as here
                    f"graph {what} {vi.name!r} is declared {shown} but computes to "
                    f"{tuple(ttype.shape)}: the ABI takes the computed shape, and the golden "
                    f"cases check it against onnxruntime's")
            # an expression our shape rules built ("(64*batch)//64") is not a valid spec dim:
            # take the model's own name for it, else a fresh one (not an input's dim, which
            # is another size: a pool's output declared with its input's "h"; nor one that
            # names another size of an earlier output: torch's legacy exporter gives a
            # detector's per-level outputs one dim_param)
            params = [d.dim_param if t.HasField("shape") and DIM_NAME.fullmatch(d.dim_param)
                      and d.dim_param not in self.input_dims else None for d in t.shape.dim]
            shape = tuple(g if type(g) is int or DIM_NAME.fullmatch(g) else
                          self._output_dim(params[j] if j < len(params) else None, g,
                                           unnamed_dim(abi_name, j))
                          for j, g in enumerate(ttype.shape))
        else:
            if not t.HasField("shape"):
                raise UnsupportedModelError(f"graph {what} {vi.name!r} has no shape")
            shape = tuple(dim_name(abi_name, j, d) if is_run_time(d) else d.dim_value
                          for j, d in enumerate(t.shape.dim))
        layout = layouts.get(abi_name, DEFAULT_LAYOUTS.get(len(shape), "ANY"))
        if dtype in dtypes.INT_DTYPES and len(shape) == 1 and abi_name not in layouts:
            layout = "N"
        try:
            return TensorSpec(abi_name, shape, dtype, layout)
        except PluginHostError as exc:
            raise UnsupportedModelError(f"graph {what} {vi.name!r}: {exc}") from None

    def _output_dim(self, param: str | None, dim, fresh: str) -> str:
        """The ABI name of an output's computed run-time ``dim``: the model's ``param`` for
        it, unless that already names a dim not known equal to it, else ``fresh``."""
        if not param or not dim_math.known_equal(self.output_dims.setdefault(param, dim), dim):
            return fresh
        return param

    def _outputs(self, layouts: Mapping[str, str]) -> tuple[list[TensorSpec], dict[str, str]]:
        specs, names = [], {}
        produced = {t for n in self.nodes for t in n.outputs}
        for vi in self.model.graph.output:
            if vi.name in self.onnx_output_names:
                raise UnsupportedModelError(f"graph output {vi.name!r} is listed twice")
            self.onnx_output_names.add(vi.name)
            if vi.name in self.sym:
                raise UnsupportedModelError(f"graph output {vi.name!r} is a shape holding "
                                            f"run-time dims ({symbolic.entries(self.sym[vi.name])}"
                                            f"), which the ABI's ops cannot compute")
            if vi.name not in self.consts and vi.name not in self.values:
                raise ModelFileError(f"graph output {vi.name!r} is not produced by any node")
            g_name = self.tensor(vi.name)
            wanted = sanitized(vi.name)
            if g_name != wanted and g_name in produced and g_name not in names:
                new = self.fresh(vi.name)  # an aliased value: give it the output's name
                self.nodes = [Node(n.name, n.op, n.version, n.inputs,
                                   tuple(new if t == g_name else t for t in n.outputs), n.attrs)
                              if g_name in n.outputs else
                              Node(n.name, n.op, n.version,
                                   tuple(new if t == g_name else t for t in n.inputs),
                                   n.outputs, n.attrs) for n in self.nodes]
                self.types[new] = self.types[g_name]
                self.values = {k: new if v == g_name else v for k, v in self.values.items()}
                produced.add(new)
                g_name = new
            if g_name not in produced or g_name in names:  # an input, constant or duplicate
                self.node = None
                if g_name == wanted and g_name in self.tensors and g_name not in names:
                    g_name = self._rename_constant(g_name)  # the output keeps the model's name
                    out = wanted
                else:
                    out = self.fresh(vi.name)
                self.nodes.append(Node(self.fresh_node(f"{out}.identity"), "identity", 1,
                                       (g_name,), (out,), {}))
                self.types[out] = self.types[g_name]
                g_name = out
            specs.append(self._spec(vi, g_name, layouts, "output", self.types[g_name]))
            names[g_name] = vi.name
        return specs, names

    def _rename_constant(self, name: str) -> str:
        """Give the constant ``name`` a fresh name (``<name>.value``) in the tensors and the
        nodes reading it, freeing ``name`` for the graph output it is (a value folded at
        import, an initializer listed as an output)."""
        new = self.fresh(f"{name}.value")
        array = self.tensors.pop(name)
        self.tensors[new] = array
        self.types[new] = self.types[name]
        if self.const_names.get(id(array), (None,))[0] == name:
            self.const_names[id(array)] = (new, array)
        self.nodes = [n if name not in n.inputs else
                      Node(n.name, n.op, n.version, tuple(new if t == name else t
                                                          for t in n.inputs), n.outputs, n.attrs)
                      for n in self.nodes]
        return new


def reaching(nodes: list[Node], outputs: set[str]) -> list[Node]:
    """The ``nodes`` some graph output depends on, in their order. The rest would run on every
    call for nothing: what the model computes and never reads, and what the import writes and
    then reads another way (a Range a Gather takes as a slice, a dim cast to float that a
    Range reads as the dim). A check in such a node goes with it, since what it guards
    reaches no output."""
    needed, kept = set(outputs), []
    for node in reversed(nodes):
        if any(t in needed for t in node.outputs):
            kept.append(node)
            needed.update(t for t in node.inputs if t)
    return kept[::-1]


def shared_constants(nodes: list[Node], tensors: dict[str, np.ndarray]
                     ) -> tuple[list[Node], dict[str, np.ndarray]]:
    """``nodes`` and ``tensors`` with each constant that is bit for bit another (dtype, shape
    and bytes) dropped and its readers reading the first of its kind instead. An exporter
    stores a weight shared by several nodes once (a layer applied at every step of an
    unrolled loop, an embedding tied to the output projection, layers cloned from one, as
    ``nn.TransformerEncoder`` clones its layer), but each reader's own transpose or reshape at
    import is a new array: without this the artifact holds one copy per reader."""
    import hashlib

    first: dict[tuple, str] = {}
    same: dict[str, str] = {}
    for name, array in tensors.items():
        data = np.require(array, requirements="C")
        key = (data.dtype.str, data.shape, hashlib.sha256(data.reshape(-1).view(np.uint8)
                                                          ).digest())
        if key in first:
            same[name] = first[key]
        else:
            first[key] = name
    if not same:
        return nodes, tensors
    nodes = [n if not same.keys() & set(n.inputs) else
             Node(n.name, n.op, n.version, tuple(same.get(t, t) for t in n.inputs), n.outputs,
                  n.attrs) for n in nodes]
    return nodes, {k: v for k, v in tensors.items() if k not in same}


def onnx_to_graph(model, *, name: str, layouts: Mapping[str, str] | None = None,
                  state: Mapping[str, str] | None = None,
                  limits: ReadLimits = DEFAULT_READ_LIMITS) -> ImportedModel:
    """Import a checked ModelProto (see :func:`~.reader.read_model`) of an opset in ``OPSETS``
    (:func:`~.upgrade.upgrade_model` upgrades older ones) as a Graph."""
    version = default_opset(model)
    if version not in OPSETS:
        raise UnsupportedModelError(f"default-domain opset {version} is not mapped (mapped: "
                                    f"{OPSETS.start}..{OPSETS.stop - 1}); upgrade the model "
                                    f"first (import_onnx does)")
    return Importer(model, limits=limits).run(name=name, layouts=dict(layouts or {}),
                                              state=dict(state or {}))
