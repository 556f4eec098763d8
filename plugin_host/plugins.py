"""The plugin manager: discovers plugins through the ``plugin_host`` entry-point group."""

from __future__ import annotations

from importlib.metadata import entry_points

import pluggy

from .errors import BackendError, PluginError

from . import hookspecs
from .backend import Backend
from .hooks import PROJECT

ENTRY_POINT_GROUP = "plugin_host"


def get_plugin_manager(*, load_entrypoints: bool = True) -> pluggy.PluginManager:
    """A new plugin manager with the host's hookspecs and (by default) the installed plugins."""
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(hookspecs)
    if load_entrypoints:
        pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
        if not any(ep.group == ENTRY_POINT_GROUP for ep in entry_points(group=ENTRY_POINT_GROUP)):
            raise PluginError("no plugin is registered under the entry-point group "
                               f"{ENTRY_POINT_GROUP!r}: is plugin-host installed (pip install -e .)?")
    pm.check_pending()
    return pm


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
