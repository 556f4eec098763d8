"""An inference backend on onnxruntime's CPU provider: the whole graph as one session.

Registered through ``plugin_host_add_backends`` like the numpy backend, under the name
``onnxruntime`` (``--backend onnxruntime``). At load it converts the graph into an in-memory
ONNX model (``convert.py``; each op's converter is in ``layers.py`` or ``glue.py``, writing
into ``emitter.py``'s Emitter) and creates one InferenceSession for it (``session.py``); the
executor keeps every ABI check, the Embedding index checks at entry and the recurrent state,
as on any backend. It supports the ops of :data:`convert.CONVERTERS` at version 1 and the
dtypes :data:`DTYPES` (float32, bool and the eight integer dtypes, int8 to uint64; an integer
op onnxruntime has no kernel for in its dtype is computed in a wider one, ``widen.py``);
anything else is refused at load naming the node, never run elsewhere.

onnx and onnxruntime are optional dependencies (``pip install 'plugin-host[onnx]'``). onnx is
imported with this module, which the sandbox worker does before it confines itself;
onnxruntime on first use (``session.py`` says why). When either is missing the backend is
still listed, and selecting it is a BackendError saying so.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from abi import TensorType, get_op, infer_shapes
from abi.errors import BackendError
from plugin_host.graph import sizes_checked as node_sizes_checked
from plugin_host.hooks import hookimpl

try:  # the optional dependencies; see the module docstring
    from . import convert, session
    _MISSING: str | None = None if session.available() else "onnxruntime"
except ImportError as exc:
    convert = session = None  # type: ignore[assignment]
    _MISSING = f"{exc.name or exc}"
if _MISSING is None:
    session.preload()

NAME = "onnxruntime"

#: The ABI dtypes this backend computes in: float32 compute, bool, and every integer dtype
#: (indices and shape data, camera samples, integer arithmetic and bits); an integer op that
#: onnxruntime has no kernel for in the tensor's dtype runs in a wider one (``widen.py``).
DTYPES = frozenset({"float32", "bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
                    "uint32", "uint64"})


def _require_runtime() -> None:
    if _MISSING is not None:
        raise BackendError(f"backend {NAME!r} is not available: the Python package "
                           f"{_MISSING!r} is not installed (install plugin-host[onnx], i.e. "
                           f"onnx and onnxruntime)", backend=NAME)


class OnnxruntimeBackend:
    """The whole graph as one onnxruntime CPU session (a GraphBackend)."""

    name = NAME

    def start(self) -> None:
        """Import onnxruntime (see ``session.py``); the sandbox worker calls this right after
        Landlock, before the uid drop (``plugin_host.backend.start_confined``)."""
        if _MISSING is None:
            session.load()

    def supported_ops(self) -> Mapping[str, frozenset[int]]:
        _require_runtime()  # the first thing the executor asks: refuse clearly when missing
        return {op: frozenset({1}) for op in convert.CONVERTERS}

    def supported_dtypes(self) -> frozenset[str]:
        return DTYPES

    def prepare_graph(self, graph, checked_indices: frozenset[str]):
        _require_runtime()
        model, checks = convert.to_onnx(
            graph.name, inputs=[(s.name, graph.types[s.name]) for s in graph.inputs],
            outputs=[(s.name, graph.types[s.name]) for s in graph.outputs], nodes=graph.nodes,
            consts=graph.tensors, types=graph.types, checked_indices=checked_indices)
        def sizes_checked(feed):
            graph.check_sizes({name: value.shape for name, value in feed.items()})

        return session.GraphSession(model, [s.name for s in graph.inputs],
                                    [s.name for s in graph.outputs], checks,
                                    where=f"model {graph.name!r}", sizes_checked=sizes_checked)

    def prepare(self, node, consts: Sequence[np.ndarray | None],
                types: Sequence[TensorType | None]):
        """One node as its own session: used only when plugins replace some ops' kernels
        (``plugin_host.sandbox.kernels``) and the graph must run node by node."""
        _require_runtime()
        opdef = get_op(node.op, node.version)
        given = [(t, c, ty) for t, c, ty in zip(node.inputs, consts, types)]
        const_map = {t: c for t, c, _ in given if t is not None and c is not None}
        runtime = list({t: (t, ty) for t, c, ty in given  # each name once (mul(x, x))
                        if t is not None and c is None}.values())
        out_types = infer_shapes(opdef, list(types), dict(node.attrs))
        all_types = {t: ty for t, _, ty in given if t is not None}
        all_types.update(zip(node.outputs, out_types))
        model, checks = convert.to_onnx(
            node.name, inputs=runtime, outputs=list(zip(node.outputs, out_types)), nodes=[node],
            consts=const_map, types=all_types)
        def sizes_checked(feed):  # this node's rule of the call's sizes
            node_sizes_checked(node, [ty if t not in feed else TensorType(feed[t].shape, ty.dtype)
                                      for t, ty in zip(node.inputs, types)])

        run = session.GraphSession(model, [t for t, _ in runtime], list(node.outputs), checks,
                                   where=f"node {node.name!r}", sizes_checked=sizes_checked)
        names = [t for t, c in zip(node.inputs, consts) if t is not None and c is None]
        outputs = list(node.outputs)

        def kernel(*dyn):
            result = run(dict(zip(names, dyn)))
            return tuple(result[o] for o in outputs)

        return kernel


@hookimpl
def plugin_host_add_backends():
    return [OnnxruntimeBackend()]
