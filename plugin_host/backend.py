"""What the executor needs from an inference backend.

A backend is provided by an inference-hardware plugin (the built-in one is
``plugins.numpy_backend``). It declares what it supports and turns each node of a graph into a
prepared kernel once, at load; the executor then calls the kernels per frame. A backend that
cannot run a node says so at load: there is no silent fallback to another backend.

A backend that compiles a whole graph at once (e.g. one onnxruntime session) implements
:class:`GraphBackend` instead of being called node by node; the executor still does every ABI
check, Embedding index validation at entry and recurrent-state handling around it.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Callable, Hashable, Iterator, Mapping, Protocol, Sequence, TypeVar
from typing import runtime_checkable

import numpy as np

from abi import TensorType
from abi.errors import BackendError

from .graph import Graph, Node

#: A prepared kernel: called with the node's non-constant inputs in positional order, returns
#: the node's outputs as a tuple.
Kernel = Callable[..., tuple[np.ndarray, ...]]

#: A prepared whole graph: called with every graph input by name (feed inputs and recurrent
#: state), returns every graph output by name.
GraphKernel = Callable[[Mapping[str, np.ndarray]], Mapping[str, np.ndarray]]


@runtime_checkable
class Backend(Protocol):
    #: A short unique name, e.g. ``"numpy"``.
    name: str

    def supported_ops(self) -> Mapping[str, frozenset[int]]:
        """Op name -> the op versions this backend can run."""

    def supported_dtypes(self) -> frozenset[str]:
        """ABI dtype names this backend computes in."""

    def prepare(self, node: Node, consts: Sequence[np.ndarray | None],
                types: Sequence[TensorType | None]) -> Kernel:
        """Prepare ``node``.

        ``consts[i]`` is the constant array bound to input ``i`` (a weight or frozen state), or
        ``None`` when input ``i`` is computed at run time or omitted; ``types[i]`` is input
        ``i``'s inferred type (``None`` when omitted). Raise :class:`BackendError` when the node
        cannot be run.
        """


@runtime_checkable
class FusingBackend(Backend, Protocol):
    """A backend that runs some chains of nodes as one kernel (e.g. conv -> batchnorm -> relu).

    The executor asks for the chains and checks each one before it accepts it: the nodes are
    consecutive in the graph's order, each node's only run-time input besides constants is the
    previous node's single output, and no intermediate output is read by anything else or is a
    graph output. So a fused chain can never hide or leak a tensor the ABI would see.
    """

    def fuse(self, graph: Graph) -> Sequence[Sequence[str]]:
        """Chains of node names (two or more each) this backend wants to run as one kernel."""

    def prepare_chain(self, nodes: Sequence[Node], consts: Sequence[Sequence[np.ndarray | None]],
                      types: Sequence[Sequence[TensorType | None]]) -> Kernel:
        """A kernel taking the first node's run-time inputs, returning the last node's outputs."""


@runtime_checkable
class GraphBackend(Backend, Protocol):
    """A backend that runs a whole graph as one prepared unit.

    The executor calls :meth:`prepare_graph` once at load, after :func:`require_support`, and
    then calls the returned :data:`GraphKernel` once per frame, with inputs that passed the ABI
    checks and the Embedding index checks at entry (``entry_index_checks``). The kernel must
    not skip or approximate a node: a node it cannot express is a BackendError naming the node,
    raised by :meth:`prepare_graph`. Indices computed inside the graph are the kernel's to
    validate (:func:`abi.check_indices`), as a per-node backend's Embedding kernel does.
    """

    def prepare_graph(self, graph: Graph, checked_indices: frozenset[str]) -> GraphKernel:
        """The whole of ``graph`` (its constants are ``graph.tensors``) as one kernel.

        ``checked_indices`` are the graph inputs the executor validates as Embedding indices
        before every call.
        """


_T = TypeVar("_T")

#: The prepare pass under way in this thread: ``key -> (prepared value, its source arrays)``.
_PASS: contextvars.ContextVar[dict | None] = contextvars.ContextVar("prepare_pass", default=None)


@contextlib.contextmanager
def prepare_pass() -> Iterator[None]:
    """One graph's load: the executor prepares every node inside it, so that nodes reading the
    same constant tensors (an ONNX LSTM unrolled over time: one ``lstm_cell`` per step, all
    reading the same weights) share what :func:`prepared_once` prepares from them. What the
    pass holds is dropped when it ends; the kernels keep only what they use."""
    token = _PASS.set({})
    try:
        yield
    finally:
        _PASS.reset(token)


def prepared_once(tag: Hashable, sources: Sequence[np.ndarray | None],
                  make: Callable[[], _T]) -> _T:
    """``make()``, computed once per :func:`prepare_pass` for ``tag`` and the very same
    ``sources`` (by identity: the executor gives every node the graph's one array per constant
    tensor). ``tag`` must name everything else ``make`` depends on; its result must not be
    changed by the kernels sharing it. The pass holds ``sources`` until it ends, so their ids
    cannot be reused for other arrays meanwhile. Outside a pass: ``make()``."""
    cache = _PASS.get()
    if cache is None:
        return make()
    key = (tag, *(id(s) for s in sources))
    hit = cache.get(key)
    if hit is None:
        hit = cache[key] = (make(), tuple(sources))
    return hit[0]


def provides(backend: object, *methods: str) -> bool:
    """Whether ``backend`` has every one of ``methods`` (e.g. ``"fuse", "prepare_chain"`` for a
    :class:`FusingBackend`). Used instead of ``isinstance`` on the runtime-checkable protocols,
    whose check calls ``sys._getframe``: in the sandbox worker that trips the audit hook."""
    return all(callable(getattr(backend, m, None)) for m in methods)


def start_confined(backend: object) -> None:
    """Call the backend's optional ``start()``: in the sandbox worker, once, right after
    Landlock is in force (and the capability bounding set emptied, ``no_new_privs`` set), still
    as root and before the uid drop, seccomp, the audit tripwire and any plugin code. A backend
    whose runtime starts threads as it loads (onnxruntime) loads it there: Landlock must be
    applied while the worker is single-threaded, and after the uid drop the runtime's files may
    be unreadable (a checkout under a folder only root can read). Its threads inherit
    Landlock, the bounding set and ``no_new_privs``; the uid drop and seccomp (``TSYNC``) then
    reach every thread."""
    start = getattr(backend, "start", None)
    if callable(start):
        start()


def unsupported(backend: Backend, graph: Graph) -> list[str]:
    """Every reason ``backend`` cannot run ``graph`` (empty when it can)."""
    problems = []
    ops = backend.supported_ops()
    dtypes = backend.supported_dtypes()
    for node in graph.nodes:
        if node.version not in ops.get(node.op, ()):
            have = sorted(ops.get(node.op, ()))
            problems.append(f"node {node.name!r}: op {node.op} v{node.version} is not supported"
                            + (f" (this backend has versions {have})" if have else ""))
    used = {t.dtype for t in graph.types.values()}
    for dtype in sorted(used - set(dtypes)):
        problems.append(f"dtype {dtype} is not supported")
    return problems


def require_support(backend: Backend, graph: Graph) -> None:
    problems = unsupported(backend, graph)
    if problems:
        raise BackendError(f"backend {backend.name!r} cannot run model {graph.name!r}: "
                           + "; ".join(problems), backend=backend.name, problems=problems)
