"""The plugin manager: built-ins arrive through entry points like any plugin; conflicts refused."""

import pytest

from plugin_host.errors import BackendError, PluginError
from plugin_host.hooks import hookimpl
from plugin_host.plugins import backends, get_backend, get_plugin_manager, model_builders


def test_builtins_come_through_entry_points():
    pm = get_plugin_manager()
    names = {pm.get_name(p) for p in pm.get_plugins()}
    assert {"numpy_backend", "demo_model"} <= names
    assert "numpy" in backends(pm)
    assert "demo" in model_builders(pm)


def test_unknown_backend_names_the_available_ones():
    with pytest.raises(BackendError) as info:
        get_backend(get_plugin_manager(), "tpu")
    assert "tpu" in str(info.value) and "numpy" in str(info.value)


class _Dup:
    class _Backend:
        name = "numpy"

    @hookimpl
    def plugin_host_add_backends(self):
        return [self._Backend()]

    @hookimpl
    def plugin_host_add_model_builders(self):
        return {"demo": lambda seed: None}


def test_duplicate_backend_and_builder_names_refused():
    pm = get_plugin_manager()
    pm.register(_Dup(), name="dup")
    with pytest.raises(PluginError, match="numpy"):
        backends(pm)
    with pytest.raises(PluginError, match="demo"):
        model_builders(pm)


def test_unknown_hook_is_rejected():
    import pluggy

    class Typo:
        @hookimpl
        def plugin_host_add_backend(self):  # missing the final s
            return []

    pm = get_plugin_manager(load_entrypoints=False)
    pm.register(Typo())
    with pytest.raises(pluggy.PluginValidationError):
        pm.check_pending()
