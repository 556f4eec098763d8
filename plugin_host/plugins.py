"""The plugin manager: plugins come in through the entry-point group ``plugin_host``.

Discovery reads ``importlib.metadata.entry_points(group="plugin_host")`` and imports (``load()``)
only the entry points it is allowed to; an entry point that is not allowed is never imported,
so its code never runs. Which are allowed:

- with a policy (``get_plugin_manager(policy)``): exactly the ``[[plugin]]`` names the policy
  allows (listed, not in ``[deny] plugins``), optionally only those of some ``kinds``. The
  built-in plugins are no exception: a policy lists them like any other. A listed plugin that no
  installed package provides, or that two packages provide, is an error. Denied names are also
  blocked, so they cannot be registered by hand later;
- without a policy (``get_plugin_manager()``, for the integrator's tools and the current
  ``run`` verb): the built-in plugins only, i.e. the entry points of the ``plugin-host``
  distribution itself. Third-party plugins need a policy.

With a policy, registration also checks each plugin's hooks against its kind (a model-layer
plugin cannot implement ``plugin_host_add_cameras``, say; see :data:`KIND_HOOKS`), and hook
names no spec declares are rejected (``check_pending``). Every refusal is a
:class:`~plugin_host.errors.PluginError`.

:func:`load_plugins` goes one step further for a running host: it pairs the manager with a
:class:`~plugin_host.capabilities.CapabilityBroker`, configures each plugin with its own policy
section and granted capabilities, and collects what the plugins provide (backends, cameras,
sinks, kernels), checking conflicts.
"""

from __future__ import annotations

import re
from importlib.metadata import EntryPoint, entry_points
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Sequence

import pluggy

from . import hookspecs
from .backend import Backend
from .errors import BackendError, PluginError, PluginHostError
from .hooks import PROJECT
from .policy import Policy
from .stop_signals import unbroken

__all__ = ["ENTRY_POINT_GROUP", "DISTRIBUTION", "KIND_HOOKS", "PluginManager",
           "get_plugin_manager", "builtin_entry_points", "LoadedPlugins", "load_plugins",
           "backends", "get_backend", "model_builders", "check_pending"]

ENTRY_POINT_GROUP = "plugin_host"

#: The distribution whose entry points are the built-in plugins.
DISTRIBUTION = "plugin-host"

_LIFECYCLE = frozenset({"plugin_host_configure", "plugin_host_unconfigure"})

#: The hooks a plugin of each kind may implement (besides configure/unconfigure).
KIND_HOOKS: Mapping[str, frozenset[str]] = MappingProxyType({
    "camera": frozenset({"plugin_host_add_cameras", "plugin_host_verify_artifact"}),
    "inference-hardware": frozenset({"plugin_host_add_backends"}),
    "model-layer": frozenset({"plugin_host_add_kernels", "plugin_host_add_model_builders"}),
    "sink": frozenset({"plugin_host_add_sinks", "plugin_host_verify_artifact"}),
    "control": frozenset({"plugin_host_add_sinks", "plugin_host_verify_artifact"}),
})


class PluginManager(pluggy.PluginManager):
    """A pluggy manager that enforces a policy on registration.

    ``policy`` None: anything may be registered (the caller decides what to load). Otherwise a
    plugin must be registered under an allowed ``[[plugin]]`` name, within ``kinds`` when
    given, and implement only the hooks of its kind.
    """

    def __init__(self, policy: Policy | None = None,
                 kinds: Iterable[str] | None = None) -> None:
        super().__init__(PROJECT)
        self.policy = policy
        self.kinds = None if kinds is None else frozenset(kinds)
        self.add_hookspecs(hookspecs)
        if policy is not None:
            for name in sorted(policy.deny.plugins):
                self.set_blocked(name)

    def kind_of(self, name: str) -> str | None:
        """The policy kind of the plugin registered as ``name`` (None without a policy)."""
        rule = self.policy.plugin(name) if self.policy is not None else None
        return rule.kind if rule is not None else None

    def register(self, plugin: object, name: str | None = None) -> str | None:
        if self.policy is not None:
            self._check_allowed(plugin, name)
        try:
            registered = super().register(plugin, name)
        except ValueError as exc:  # pluggy: a name or object registered twice, or blocked
            raise PluginError(f"plugin {name!r}: {exc}", plugin=name) from None
        except pluggy.PluginValidationError as exc:
            raise PluginError(f"plugin {name!r}: {exc}", plugin=name) from None
        return registered

    def _check_allowed(self, plugin: object, name: str | None) -> None:
        policy = self.policy
        assert policy is not None
        if name is None:
            raise PluginError("under a policy every plugin is registered by its [[plugin]] name",
                              plugin=None)
        rule = policy.plugin(name)
        if rule is None or not policy.is_allowed(name):
            why = "is listed in [deny] plugins" if rule else "is not listed in [[plugin]]"
            raise PluginError(f"plugin {name!r} is not allowed by policy {policy.path}: it "
                              f"{why}", plugin=name)
        if self.kinds is not None and rule.kind not in self.kinds:
            raise PluginError(f"plugin {name!r} is a {rule.kind} plugin, which this process "
                              f"does not load (it loads: {', '.join(sorted(self.kinds))})",
                              plugin=name)
        allowed = _LIFECYCLE | KIND_HOOKS[rule.kind]
        spec_names = {n for n in dir(hookspecs) if n.startswith("plugin_host_")}
        wrong = sorted(h for h in _implemented_hooks(self, plugin, name)
                       if h in spec_names and h not in allowed)
        if wrong:
            raise PluginError(f"plugin {name!r} is a {rule.kind} plugin "
                              f"({policy.where(rule.line)}) and may not implement "
                              f"{', '.join(wrong)} (a {rule.kind} plugin implements: "
                              f"{', '.join(sorted(allowed))})", plugin=name)


def _implemented_hooks(pm: pluggy.PluginManager, plugin: object, name: str) -> list[str]:
    out = []
    for attr in dir(plugin):
        if pm.parse_hookimpl_opts(plugin, attr) is not None:
            out.append(attr)
    return out


def _normalize(dist_name: str) -> str:
    return re.sub(r"[-_.]+", "-", dist_name).lower()


def _group() -> list[EntryPoint]:
    return list(entry_points(group=ENTRY_POINT_GROUP))


def builtin_entry_points() -> list[EntryPoint]:
    """The entry points of the built-in plugins (those of the ``plugin-host`` distribution)."""
    return [ep for ep in _group()
            if ep.dist is not None and _normalize(ep.dist.name) == DISTRIBUTION]


def _load(ep: EntryPoint) -> object:
    """Import one entry point; an import failure is the plugin's refusal, not a host bug. A
    stop signal does not break into the import (:func:`~.stop_signals.unbroken`)."""
    try:
        with unbroken():
            return ep.load()
    except Exception as exc:
        raise PluginError(f"plugin {ep.name!r} ({ep.value}) failed to import: "
                          f"{type(exc).__name__}: {exc}", plugin=ep.name) from None


def get_plugin_manager(policy: Policy | None = None, *, kinds: Iterable[str] | None = None,
                       load_entrypoints: bool = True) -> PluginManager:
    """A new plugin manager with the host's hookspecs and the plugins allowed to load.

    ``policy`` None: the built-in plugins only. With a policy: the plugins it allows, only of
    ``kinds`` when given (the host process passes ``policy.HOST_KINDS``, the sandbox worker
    ``policy.SANDBOXED_KINDS``). ``load_entrypoints=False`` loads nothing (register by hand).
    """
    pm = PluginManager(policy, kinds)
    if not load_entrypoints:
        return pm
    if policy is None:
        eps = builtin_entry_points()
        if not eps:
            raise PluginError(f"no built-in plugin is registered under the entry-point group "
                              f"{ENTRY_POINT_GROUP!r}: is plugin-host installed "
                              f"(pip install -e .)?")
        for ep in eps:
            pm.register(_load(ep), name=ep.name)
    else:
        by_name: dict[str, list[EntryPoint]] = {}
        for ep in _group():
            by_name.setdefault(ep.name, []).append(ep)
        for rule in policy.allowed_plugins(pm.kinds):
            found = by_name.get(rule.name, [])
            where = policy.where(rule.line)
            if not found:
                raise PluginError(f"policy {where} allows plugin {rule.name!r}, but no installed "
                                  f"package provides the entry point {rule.name!r} in the group "
                                  f"{ENTRY_POINT_GROUP!r}", plugin=rule.name)
            if len(found) > 1:
                dists = ", ".join(sorted(ep.dist.name if ep.dist else "?" for ep in found))
                raise PluginError(f"policy {where} allows plugin {rule.name!r}, and {len(found)} "
                                  f"installed packages provide it ({dists}): refusing to guess",
                                  plugin=rule.name)
            pm.register(_load(found[0]), name=rule.name)
    check_pending(pm)
    return pm


def check_pending(pm: pluggy.PluginManager) -> None:
    """Refuse hook implementations that no hookspec declares (a typo in a hook name)."""
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        name = pm.get_name(exc.plugin) if exc.plugin is not None else None
        raise PluginError(f"plugin {name!r}: {exc}", plugin=name) from None


# --- what the plugins provide (any manager) --------------------------------------------------


def backends(pm: pluggy.PluginManager) -> dict[str, Backend]:
    """Every backend the registered plugins provide, by name; a duplicate name is an error."""
    found: dict[str, Backend] = {}
    for provided in pm.hook.plugin_host_add_backends():
        for backend in provided:
            if backend.name in found:
                raise PluginError(f"two plugins provide a backend named {backend.name!r}")
            found[backend.name] = backend
    return found


def get_backend(pm: pluggy.PluginManager, name: str) -> Backend:
    available = backends(pm)
    if name not in available:
        raise BackendError(f"no backend named {name!r}; available: {sorted(available)}",
                           backend=name)
    return available[name]


def model_builders(pm: pluggy.PluginManager) -> dict:
    """Every model builder the registered plugins provide, by name."""
    found: dict = {}
    for provided in pm.hook.plugin_host_add_model_builders():
        for name, builder in provided.items():
            if name in found:
                raise PluginError(f"two plugins provide a model builder named {name!r}")
            found[name] = builder
    return found


# --- a configured set of plugins with their capabilities ---------------------------------------


class LoadedPlugins:
    """The plugins of one host process: manager, policy, broker, per-plugin configuration.

    Made by :func:`load_plugins`. :meth:`configure` calls each plugin's
    ``plugin_host_configure`` with *its own* config (its ``[[plugin]]`` section and the
    capabilities granted to it); :meth:`unconfigure` calls ``plugin_host_unconfigure`` in
    reverse order and closes the broker (revoking every capability).
    """

    def __init__(self, pm: PluginManager, policy: Policy, broker: Any) -> None:
        self.pm, self.policy, self.broker = pm, policy, broker
        self._configs: dict[str, Mapping[str, Any]] = {}
        self._configured: list[str] = []

    @property
    def names(self) -> list[str]:
        """Registered plugin names, in registration order."""
        return [name for name, plugin in self.pm.list_name_plugin() if plugin is not None]

    def config(self, name: str) -> Mapping[str, Any]:
        """The read-only config ``name`` gets: ``name``, ``kind``, ``kernels``, ``config``
        (its free ``[plugin.config]`` table) and ``capabilities`` (granted objects)."""
        if name not in self._configs:
            rule = self.policy.plugin(name)
            if rule is None:
                raise PluginError(f"plugin {name!r} is not in policy {self.policy.path}",
                                  plugin=name)
            self._configs[name] = MappingProxyType({
                "name": name, "kind": rule.kind, "kernels": tuple(sorted(rule.kernels)),
                "config": rule.config, "capabilities": self.broker.grant(name)})
        return self._configs[name]

    def _call(self, name: str, hook: str, **kwargs: Any) -> list[Any]:
        """Call ``hook`` on the plugin ``name`` only."""
        plugin = self.pm.get_plugin(name)
        others = [p for p in self.pm.get_plugins() if p is not plugin]
        caller = self.pm.subset_hook_caller(hook, remove_plugins=others)
        try:
            return caller(**kwargs)
        except (PluginHostError, KeyboardInterrupt):
            raise
        except Exception as exc:
            raise PluginError(f"plugin {name!r}: {hook} failed: {type(exc).__name__}: {exc}",
                              plugin=name) from exc

    def _implementers(self, hook: str) -> list[str]:
        caller = getattr(self.pm.hook, hook)
        return [impl.plugin_name for impl in caller.get_hookimpls()]  # registration order

    def configure(self) -> None:
        """Configure every plugin, in registration order."""
        for name in self.names:
            self._call(name, "plugin_host_configure", config=self.config(name))
            self._configured.append(name)

    def unconfigure(self) -> None:
        """Unconfigure in reverse order (every plugin, even if one fails), close the broker."""
        errors: list[BaseException] = []
        while self._configured:
            name = self._configured.pop()
            try:
                self._call(name, "plugin_host_unconfigure")
            except PluginHostError as exc:
                errors.append(exc)
        self.broker.close()
        if errors:
            raise errors[0]

    def backends(self) -> dict[str, Backend]:
        return backends(self.pm)

    def model_builders(self) -> dict:
        return model_builders(self.pm)

    def cameras(self) -> list[Any]:
        """Every camera the camera plugins provide; two cameras with one ``name`` is an error."""
        found: dict[str, Any] = {}
        for name in self._implementers("plugin_host_add_cameras"):
            for provided in self._call(name, "plugin_host_add_cameras", config=self.config(name)):
                for camera in provided:
                    cid = getattr(camera, "name", None)
                    if not isinstance(cid, str) or not cid:
                        raise PluginError(f"plugin {name!r} provided a camera without a name",
                                          plugin=name)
                    if cid in found:
                        raise PluginError(f"two cameras are named {cid!r}", plugin=name)
                    found[cid] = camera
        return list(found.values())

    def sinks(self) -> list[tuple[str, Any]]:
        """``(plugin name, sink)`` for every sink; a sink is a callable taking a Message."""
        out = []
        for name in self._implementers("plugin_host_add_sinks"):
            for provided in self._call(name, "plugin_host_add_sinks", config=self.config(name)):
                for sink in provided:
                    if not callable(sink):
                        raise PluginError(f"plugin {name!r} provided a sink that is not "
                                          f"callable: {sink!r}", plugin=name)
                    out.append((name, sink))
        return out

    def connect_sinks(self) -> list[Any]:
        """Subscribe every sink to the model topic; returns the connections."""
        topic = self.broker.topics["model"]
        return [topic.connect(sink) for _, sink in self.sinks()]

    def kernels(self, backend: str) -> dict[str, Any]:
        """``{op: factory}`` from the model-layer plugins for ``backend`` (a backend name).

        The kernel rule of :func:`plugin_host.sandbox.kernels.accept_kernels` (the one
        implementation): a plugin's kernel for an op is accepted only when the policy lists
        the op in that plugin's ``kernels``, whether it adds an op the backend lacks or
        replaces one; anything else, and two plugins for one op, is a PluginError naming the
        plugin and the op. (A model runs these kernels only in the sandbox worker.)
        """
        from .sandbox.kernels import accept_kernels

        implementers = self._implementers("plugin_host_add_kernels")
        allowed: dict[str, set[str]] = {}
        for name in implementers:
            rule = self.policy.plugin(name)
            assert rule is not None
            for op in rule.kernels:
                allowed.setdefault(op, set()).add(name)
        provided = ((name, mapping) for name in implementers
                    for mapping in self._call(name, "plugin_host_add_kernels", backend=backend))

        def where(name: str) -> str:
            rule = self.policy.plugin(name)
            return f"policy {self.policy.where(rule.line if rule else 0)}"

        found = accept_kernels(provided, allowed, where=where)
        return {op: factory for op, (_, factory) in found.items()}

    def verify_artifact(self, manifest: Any, path: str) -> None:
        """Run every plugin's extra artifact checks; the first refusal propagates."""
        for name in self._implementers("plugin_host_verify_artifact"):
            self._call(name, "plugin_host_verify_artifact", manifest=manifest, path=path)

    def __enter__(self) -> "LoadedPlugins":
        return self

    def __exit__(self, *exc: object) -> None:
        self.unconfigure()


def load_plugins(policy: Policy, *, broker: Any = None, kinds: Iterable[str] | None = None,
                 extra: Sequence[tuple[str, object]] = (), load_entrypoints: bool = True,
                 configure: bool = True) -> LoadedPlugins:
    """Load the plugins ``policy`` allows, grant their capabilities and configure them.

    ``broker`` defaults to a :class:`~plugin_host.capabilities.CapabilityBroker` over the
    policy (its audit log, a CAN bus from ``[can]``, a simulated panda). ``extra`` are
    ``(name, plugin)`` pairs registered as well, under the same policy checks (tests).
    """
    if broker is None:
        from .capabilities import CapabilityBroker

        broker = CapabilityBroker(policy)
    pm = get_plugin_manager(policy, kinds=kinds, load_entrypoints=load_entrypoints)
    for name, plugin in extra:
        pm.register(plugin, name=name)
    check_pending(pm)
    loaded = LoadedPlugins(pm, policy, broker)
    if configure:
        try:
            loaded.configure()
        except BaseException:
            loaded.unconfigure()
            raise
    return loaded

