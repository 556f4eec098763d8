"""Model-layer kernels: the one rule that accepts them, and merging them into a backend.

``plugin_host_add_kernels(backend)`` is called (for a model, only in the confined worker) on
every registered plugin; each returns ``{op: factory}`` with the numpy backend's factory
signature ``factory(attrs, consts, types, where) -> fn(*runtime inputs)``.

**The kernel rule** (:func:`accept_kernels`, the only place it is enforced; the worker's
:func:`merge_kernels` and :meth:`plugin_host.plugins.LoadedPlugins.kernels` both call it): a
plugin's kernel for an op is accepted only when that op is listed for that very plugin in
``allowed`` (``{op: plugin}``: with a policy, the ``kernels`` list of the plugin's
``[[plugin]]`` table, see :func:`plugin_host.sandbox.policy.sandbox_config_from_policy`;
without one, the explicit ``kernel_overrides``), whether it adds an op the backend lacks or
replaces one the backend has. Anything else refuses the whole load with a PluginError naming
the plugin and the op; so does an op outside the op table, a factory that is not callable,
and two plugins providing one op.

:func:`merge_kernels` returns a backend that runs the accepted ops with the plugins' kernels
and everything else with the chosen backend. The backend's fused chains that contain a
replaced op are dropped whole, so a fused kernel can never skip a plugin's node (and a
plugin's node never lands inside a fused chain).
"""

from __future__ import annotations

from typing import Any, Callable, Collection, Iterable, Iterator, Mapping, Sequence

import pluggy

from abi import get_op, known_ops
from abi.errors import PluginHostError

from ..backend import Backend, provides
from ..errors import PluginError
from ..graph import Graph

__all__ = ["accept_kernels", "merge_kernels"]


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


def accept_kernels(provided: Iterable[tuple[str, Any]],
                   allowed: Mapping[str, str | Collection[str]], *,
                   where: str | Callable[[str], str] = "the kernel overrides"
                   ) -> dict[str, tuple[str, Callable[..., Any]]]:
    """``{op: (plugin, factory)}`` for the kernels ``provided``, checked against the kernel rule.

    ``provided`` yields ``(plugin name, what its plugin_host_add_kernels returned)``;
    ``allowed`` maps each op to the plugin (or plugins) that may provide a kernel for it;
    ``where`` names where that list comes from, for messages (a string, or a function of the
    plugin name: its policy file and line). Raises :class:`~plugin_host.errors.PluginError`
    naming the plugin and the op.
    """
    table = known_ops()
    found: dict[str, tuple[str, Callable[..., Any]]] = {}
    for plugin, kernels in provided:
        if kernels is None:
            continue
        if not isinstance(kernels, Mapping):
            raise PluginError(f"plugin {plugin!r}: plugin_host_add_kernels must return a "
                              f"mapping of op name to factory, got {type(kernels).__name__}",
                              plugin=plugin)
        for op, factory in kernels.items():
            if type(op) is not str or op not in table:
                raise PluginError(f"plugin {plugin!r} provides a kernel for {op!r}, which is not "
                                  f"an op of the op table", plugin=plugin)
            if not callable(factory):
                raise PluginError(f"plugin {plugin!r}: the kernel factory for op {op!r} is not "
                                  f"callable", plugin=plugin, op=op)
            if op in found:
                raise PluginError(f"plugins {found[op][0]!r} and {plugin!r} both provide a "
                                  f"kernel for op {op!r}", plugin=plugin, op=op)
            listed = allowed.get(op)
            listed = (listed,) if isinstance(listed, str) else tuple(sorted(listed or ()))
            if plugin not in listed:
                source = where(plugin) if callable(where) else where
                others = ", ".join(repr(p) for p in listed)
                raise PluginError(
                    f"plugin {plugin!r} provides a kernel for op {op!r}, which {source} does "
                    f"not list for it" + (f" (it is listed for {others})" if others else "")
                    + "; a model-layer plugin may provide kernels only for the ops listed for "
                    "it", plugin=plugin, op=op)
            found[op] = (plugin, factory)
    return found


def merge_kernels(pm: pluggy.PluginManager, backend: Backend,
                  overrides: Mapping[str, str]) -> Backend:
    """``backend`` with the kernels every registered plugin provides for it.

    ``overrides`` is ``{op: plugin}`` (registered names): the kernel rule's list (see
    :func:`accept_kernels`). The hook gets the backend's name. Returns ``backend`` itself when
    no plugin provides kernels.
    """
    table = known_ops()
    base_ops = backend.supported_ops()
    found = accept_kernels(_provided(pm, backend.name), overrides)
    if not found:
        return backend
    versions = {op: frozenset(base_ops.get(op, ())) or frozenset(table[op]) for op in found}
    cls = _MergedFusing if provides(backend, "fuse", "prepare_chain") else _Merged
    return cls(backend, found, versions)


def _provided(pm: pluggy.PluginManager, backend: str) -> Iterator[tuple[str, Any]]:
    """``(plugin name, returned mapping)`` for every implementation of plugin_host_add_kernels,
    in registration order; a plugin that raises is refused naming it."""
    for impl in pm.hook.plugin_host_add_kernels.get_hookimpls():
        plugin = impl.plugin_name
        args = {"backend": backend}
        try:
            kernels = impl.function(**{a: args[a] for a in impl.argnames if a in args})
        except PluginHostError:
            raise
        except Exception as exc:
            raise PluginError(f"plugin {plugin!r}: plugin_host_add_kernels failed: "
                              f"{type(exc).__name__}: {exc}", plugin=plugin) from exc
        yield plugin, kernels
