"""Run a checked graph on a backend under the tensor ABI.

Load time (``Executor(graph, backend)``): the graph's shape contracts were checked when it was
built; here the backend must declare support for every op and dtype (fail closed), each node is
prepared once, and the plan is compiled to slot indices so that the per-call path does no
lookups by name.

Every call (:meth:`Executor.run`):

1. the inputs are checked against the input TensorSpecs — every problem reported at once;
2. every Embedding index that comes from an input is validated before any compute;
3. the prepared kernels run in order (or, on a :class:`~plugin_host.backend.GraphBackend`,
   the one prepared whole-graph kernel runs);
4. the outputs are checked against the output TensorSpecs, with the symbolic dims the inputs
   bound;
5. recurrent state (e.g. an LSTMCell's ``h, c``) is carried to the next call.

Recurrent state belongs to the executor. A caller normally supplies only the feed inputs
(``graph.feed_inputs``); it may pass a state input explicitly to override the held value for
that call. :meth:`Executor.reset` zeroes the state and counts the reset by reason.
"""

from __future__ import annotations

import collections
import collections.abc
import logging
from typing import Any, Mapping

import numpy as np

from abi import Signature, check_indices, dtypes
from abi.errors import ABIError, BackendError, GraphError, PluginHostError

from .backend import Backend, prepare_pass, provides, require_support
from .graph import Graph, Node

log = logging.getLogger(__name__)

#: Ops that pass their input's values through unchanged, so an Embedding index reached
#: through them from a graph input is still validated at entry.
_VALUE_PRESERVING = frozenset({"identity", "reshape", "flatten"})


def entry_index_checks(graph: Graph) -> list[tuple[str, int, str]]:
    """``(graph input, vocabulary size, description)`` for every Embedding whose indices come
    from a graph input, directly or through value-preserving ops (:data:`_VALUE_PRESERVING`).

    These are the index checks the executor makes at entry, before any compute; the sandbox's
    host side makes the same checks before a call reaches its worker. The description names
    the input and the Embedding node, as error messages do.
    """
    producer = {t: n for n in graph.nodes for t in n.outputs}
    inputs = {s.name for s in graph.inputs}
    checks = []
    for node in graph.nodes:
        if node.op != "embedding":
            continue
        source = node.inputs[0]
        while source in producer and producer[source].op in _VALUE_PRESERVING:
            source = producer[source].inputs[0]
        if source in inputs:
            vocab = graph.types[node.inputs[1]].shape[0]
            checks.append((source, int(vocab), f"input {source!r} (Embedding {node.name!r})"))
    return checks


def check_mapping(inputs: Any) -> None:
    """The ABIError ``Signature.check`` gives for inputs that are not a mapping of name to
    array, raised before anything else touches them (a dict costs one comparison)."""
    if type(inputs) is not dict and not isinstance(inputs, collections.abc.Mapping):
        raise ABIError([f"expected a mapping of input name to numpy.ndarray, got "
                        f"{type(inputs).__name__}"])


class RecurrentState:
    """The recurrent state a model carries between calls, and the count of its resets.

    Shared by the in-process :class:`Executor` and the sandbox's host side, which mirrors the
    worker's state; each adds what a reset means for it.
    """

    def _init_state(self, graph: Graph) -> None:
        self._state_specs = {s.name: s for s in graph.inputs if s.name in graph.state}
        self._state: dict[str, np.ndarray] = {}
        self.resets = 0
        self.resets_by_reason: collections.Counter[str] = collections.Counter()
        self._zero_state()

    @property
    def state(self) -> dict[str, np.ndarray]:
        """A copy of the recurrent state that the next call will use."""
        return {k: v.copy() for k, v in self._state.items()}

    def _zero_state(self) -> None:
        # a new dict, not the old one changed: the sandbox's mirror may be a shared one
        self._state = {name: np.zeros(spec.shape, dtypes.to_numpy(spec.dtype))
                       for name, spec in self._state_specs.items()}

    def _count_reset(self, reason: str, logger: logging.Logger) -> None:
        """Zero the state and count the reset by reason."""
        self._zero_state()
        self.resets += 1
        self.resets_by_reason[reason] += 1
        logger.info("recurrent state reset (%s); %d reset(s) so far", reason, self.resets)


class Executor(RecurrentState):
    def __init__(self, graph: Graph, backend: Backend) -> None:
        require_support(backend, graph)
        self.graph = graph
        self.backend = backend
        self._in_sig = Signature(graph.inputs, where="inputs")
        self._out_sig = Signature(graph.outputs, where="outputs")
        self._init_state(graph)
        self.calls = 0
        self._compile()

    # -- load time ------------------------------------------------------------------------------

    def _compile(self) -> None:
        graph = self.graph
        self._index_checks = entry_index_checks(graph)
        #: graph input -> vocabulary size, for every input that indexes an Embedding
        self.index_inputs = {name: vocab for name, vocab, _ in self._index_checks}
        #: the whole-graph kernel of a GraphBackend (None: the node-by-node plan runs)
        self._whole = None
        #: True when the backend runs the whole graph as one kernel (a GraphBackend)
        self.whole_graph = provides(self.backend, "prepare_graph")
        if self.whole_graph:
            self._compile_whole()
            return
        slot: dict[str, int] = {}
        for spec in graph.inputs:
            slot[spec.name] = len(slot)
        self._input_names = [s.name for s in graph.inputs]
        chains = self._chains()
        with prepare_pass():  # nodes reading the same constants share what is prepared of them
            plan = self._prepare_plan(chains, slot)
        self._plan = plan
        self._n_slots = len(slot)
        self._output_slots = [(s.name, slot[s.name]) for s in graph.outputs]
        #: the fused chains in use, as lists of node names
        self.fused = [[n.name for n in c] for c in chains.values()]

    def _prepare_plan(self, chains: dict[str, list[Node]], slot: dict[str, int]) -> list:
        """Each node (or fused chain) prepared, with its input and output slots."""
        graph = self.graph
        plan = []
        position = 0
        while position < len(graph.nodes):
            group = chains.get(graph.nodes[position].name) or [graph.nodes[position]]
            position += len(group)
            consts = [[graph.tensors.get(t) if t is not None else None for t in n.inputs]
                      for n in group]
            types = [[graph.types[t] if t is not None else None for t in n.inputs] for n in group]
            try:
                if len(group) == 1:
                    kernel = self.backend.prepare(group[0], consts[0], types[0])
                else:
                    kernel = self.backend.prepare_chain(group, consts, types)
            except PluginHostError:
                raise
            except Exception as exc:  # a backend bug must still name the node
                raise GraphError(f"backend {self.backend.name!r} failed to prepare "
                                 f"{group[0].op}: {type(exc).__name__}: {exc}",
                                 node=group[0].name) from exc
            first, last = group[0], group[-1]
            dyn = tuple(slot[t] for t, c in zip(first.inputs, consts[0])
                        if t is not None and c is None)
            outs = []
            for t in last.outputs:
                slot[t] = len(slot)
                outs.append(slot[t])
            label = first.name if len(group) == 1 else "+".join(n.name for n in group)
            plan.append((kernel, dyn, tuple(outs), label))
        return plan

    def _compile_whole(self) -> None:
        """Load time on a GraphBackend: one kernel for the whole graph; nothing is fused."""
        try:
            self._whole = self.backend.prepare_graph(self.graph, frozenset(self.index_inputs))
        except PluginHostError:
            raise
        except Exception as exc:  # a backend bug must still be a typed refusal
            raise BackendError(f"backend {self.backend.name!r} failed to prepare model "
                               f"{self.graph.name!r}: {type(exc).__name__}: {exc}",
                               backend=self.backend.name) from exc
        self._plan = []
        self.fused = []

    def _chains(self) -> dict[str, list[Node]]:
        """The backend's fused chains, each checked; keyed by the chain's first node."""
        if not provides(self.backend, "fuse", "prepare_chain"):
            return {}
        graph = self.graph
        order = {n.name: i for i, n in enumerate(graph.nodes)}
        graph_outputs = {s.name for s in graph.outputs}
        chains: dict[str, list[Node]] = {}
        claimed: set[str] = set()
        for names in self.backend.fuse(graph):
            where = f"backend {self.backend.name!r} fused chain {list(names)}"
            if len(names) < 2 or any(n not in order for n in names):
                raise BackendError(f"{where}: needs two or more existing nodes")
            start = order[names[0]]
            nodes = graph.nodes[start:start + len(names)]
            if [n.name for n in nodes] != list(names) or claimed & set(names):
                raise BackendError(f"{where}: not consecutive, or overlaps another chain")
            for prev, node in zip(nodes, nodes[1:]):
                runtime = [t for t in node.inputs if t is not None and t not in graph.tensors]
                if len(prev.outputs) != 1 or runtime != [prev.outputs[0]]:
                    raise BackendError(f"{where}: {node.name!r} must read exactly the previous "
                                       "node's single output and constants")
                inner = prev.outputs[0]
                readers = {n.name for n, _ in graph.consumers(inner)}
                if inner in graph_outputs or readers != {node.name}:
                    raise BackendError(f"{where}: intermediate {inner!r} is read outside the "
                                       "chain or is a graph output")
            claimed |= set(names)
            chains[names[0]] = nodes
        return chains

    # -- per call -------------------------------------------------------------------------------

    def run(self, inputs: Mapping[str, np.ndarray], *,
            layouts: Mapping[str, str] | None = None) -> dict[str, np.ndarray]:
        """Run one inference; returns every graph output by name."""
        feed = self._with_state(inputs)
        return self._run(feed, self._in_sig.check(feed, layouts))

    def check_inputs(self, inputs: Mapping[str, np.ndarray],
                     layouts: Mapping[str, str] | None = None) -> dict[str, int]:
        """The ABI check :meth:`run` makes of ``inputs`` (names, dtypes, shapes, layouts;
        the recurrent state fills in for state inputs left out): the symbolic dims'
        bindings, or the ABI error."""
        return self._in_sig.check(self._with_state(inputs), layouts)

    def run_checked(self, inputs: Mapping[str, np.ndarray], bindings: Mapping[str, int]
                    ) -> dict[str, np.ndarray]:
        """:meth:`run` without its ABI check of the inputs, for a caller that made it
        (:meth:`check_inputs`, which gave ``bindings``) on these very arrays or on arrays of
        the same names, dtypes and shapes: the sandbox worker, whose inputs are fixed views
        of shared memory the host checks. Everything else is as in :meth:`run`: the
        Embedding index values are checked, and so are the outputs."""
        return self._run(self._with_state(inputs), bindings)

    def _with_state(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``inputs`` as a dict of its own, the recurrent state filling in for state inputs
        left out."""
        check_mapping(inputs)
        feed = dict(inputs)
        for name, value in self._state.items():
            feed.setdefault(name, value)
        return feed

    def _run(self, feed: dict[str, np.ndarray], bindings: Mapping[str, int]
             ) -> dict[str, np.ndarray]:
        """One inference on ``feed`` (a dict of its own, the state filled in), its ABI
        checked already: the index values, the kernels, the outputs' check, the state."""
        for name, vocab, where in self._index_checks:
            check_indices(feed[name], vocab, where)

        if self._whole is not None:
            outputs = dict(self._whole(feed))
        else:
            values: list = [None] * self._n_slots
            for i, name in enumerate(self._input_names):
                values[i] = feed[name]
            for kernel, dyn, outs, label in self._plan:
                try:
                    results = kernel(*[values[i] for i in dyn])
                except PluginHostError as exc:
                    exc.context.setdefault("node", label)
                    raise
                except MemoryError as exc:  # what the node's values ask for: bad input
                    raise BackendError(f"node {label!r}: out of memory: {exc}",
                                       node=label) from None
                for s, r in zip(outs, results):
                    values[s] = r
            outputs = {name: values[s] for name, s in self._output_slots}
        self._out_sig.check(outputs, bindings=bindings)
        for src, dst in self.graph.state.items():
            self._state[src] = np.array(outputs[dst], copy=True)
        self.calls += 1
        return outputs

    __call__ = run

    # -- state ----------------------------------------------------------------------------------

    def reset(self, reason: str = "explicit") -> None:
        """Zero the recurrent state; counted in ``resets`` and ``resets_by_reason``."""
        self._count_reset(reason, log)
