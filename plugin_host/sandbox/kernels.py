"""Model-layer kernels merged into a backend, inside the worker.

``plugin_host_add_kernels(backend)`` is called (only here, in the confined worker) on every
registered plugin; each returns ``{op: factory}`` with the numpy backend's factory signature
``factory(attrs, consts, types, where) -> fn(*runtime inputs)``. The result is a backend that
runs those ops with the plugins' kernels and everything else with the chosen backend:

* an op the backend already runs may be replaced only when ``overrides`` maps it to that very
  plugin (the policy's ``kernels`` list); otherwise loading stops with a PluginError naming the
  plugin and the op. An op the backend lacks may be added (it must be in the op table);
* two plugins providing one op is an error;
* the backend's fused chains that contain a replaced op are dropped whole, so a fused kernel
  can never skip a plugin's node (and a plugin's node never lands inside a fused chain).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import pluggy

from abi import get_op, known_ops
from abi.errors import PluginHostError

from ..backend import Backend, FusingBackend
from ..errors import PluginError
from ..graph import Graph

__all__ = ["merge_kernels"]


class _Merged:
    """The chosen backend with some ops' kernels provided by plugins."""

    def __init__(self, base: Backend, kernels: Mapping[str, tuple[str, Callable[..., Any]]],
                 versions: Mapping[str, frozenset[int]]) -> None:
        self.base = base
        self.name = base.name
        self.kernels = dict(kernels)
        self._ops = dict(base.supported_ops())
        self._ops.update(versions)

    def supported_ops(self) -> Mapping[str, frozenset[int]]:
        return self._ops

    def supported_dtypes(self) -> frozenset[str]:
        return self.base.supported_dtypes()

    def prepare(self, node, consts, types):
        entry = self.kernels.get(node.op)
        if entry is None:
            return self.base.prepare(node, consts, types)
        plugin, factory = entry
        # like the numpy backend's factories: trailing optional inputs left out become None
        opdef = get_op(node.op, node.version)
        missing = 0 if opdef.variadic_inputs else max(0, len(opdef.inputs) - len(consts))
        consts, types = list(consts) + [None] * missing, list(types) + [None] * missing
        try:
            fn = factory(dict(node.attrs), consts, types, f"node {node.name!r}")
        except PluginHostError:
            raise
        except Exception as exc:
            raise PluginError(f"plugin {plugin!r}: kernel factory for op {node.op!r} failed: "
                              f"{type(exc).__name__}: {exc}", plugin=plugin,
                              node=node.name) from exc
        if not callable(fn):
            raise PluginError(f"plugin {plugin!r}: kernel factory for op {node.op!r} returned "
                              f"{type(fn).__name__}, not a function", plugin=plugin)
        if len(node.outputs) > 1:
            return fn

        def kernel(*dyn):
            return (fn(*dyn),)

        return kernel


class _MergedFusing(_Merged):
    def fuse(self, graph: Graph) -> Sequence[Sequence[str]]:
        ops = {n.name: n.op for n in graph.nodes}
        return [chain for chain in self.base.fuse(graph)
                if not any(ops.get(name) in self.kernels for name in chain)]

    def prepare_chain(self, nodes, consts, types):
        return self.base.prepare_chain(nodes, consts, types)


def merge_kernels(pm: pluggy.PluginManager, backend: Backend,
                  overrides: Mapping[str, str]) -> Backend:
    """``backend`` with the kernels every registered plugin provides for it.

    ``overrides`` maps an op the backend already has to the one plugin (its registered name)
    allowed to replace it. Returns ``backend`` itself when no plugin provides kernels.
    """
    table = known_ops()
    base_ops = backend.supported_ops()
    found: dict[str, tuple[str, Callable[..., Any]]] = {}
    versions: dict[str, frozenset[int]] = {}
    hook = pm.hook.plugin_host_add_kernels
    for impl in hook.get_hookimpls():
        plugin = impl.plugin_name
        args = {"backend": backend}
        try:
            provided = impl.function(**{a: args[a] for a in impl.argnames if a in args})
        except PluginHostError:
            raise
        except Exception as exc:
            raise PluginError(f"plugin {plugin!r}: plugin_host_add_kernels failed: "
                              f"{type(exc).__name__}: {exc}", plugin=plugin) from exc
        if provided is None:
            continue
        if not isinstance(provided, Mapping):
            raise PluginError(f"plugin {plugin!r}: plugin_host_add_kernels must return a "
                              f"mapping of op name to factory, got {type(provided).__name__}",
                              plugin=plugin)
        for op, factory in provided.items():
            if type(op) is not str or op not in table:
                raise PluginError(f"plugin {plugin!r} provides a kernel for {op!r}, which is not "
                                  f"an op of the op table", plugin=plugin)
            if not callable(factory):
                raise PluginError(f"plugin {plugin!r}: the kernel factory for op {op!r} is not "
                                  f"callable", plugin=plugin)
            if op in found:
                raise PluginError(f"plugins {found[op][0]!r} and {plugin!r} both provide a "
                                  f"kernel for op {op!r}", plugin=plugin)
            if op in base_ops and overrides.get(op) != plugin:
                allowed = overrides.get(op)
                raise PluginError(
                    f"plugin {plugin!r} provides a kernel for op {op!r}, which backend "
                    f"{backend.name!r} already runs; replacing it needs the op listed for this "
                    f"plugin in the kernel overrides"
                    + (f" (it is listed for {allowed!r})" if allowed else ""), plugin=plugin,
                    op=op)
            found[op] = (plugin, factory)
            versions[op] = frozenset(base_ops.get(op, ())) or frozenset(table[op])
    if not found:
        return backend
    cls = _MergedFusing if isinstance(backend, FusingBackend) else _Merged
    return cls(backend, found, versions)
