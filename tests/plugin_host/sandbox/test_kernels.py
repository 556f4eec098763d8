"""The kernel rule, in one place: a model-layer kernel for an op is accepted only when the op
is listed for that plugin, whether it adds an op the backend lacks or replaces one."""

from __future__ import annotations

import pytest

from plugin_host.errors import PluginError
from plugin_host.hooks import hookimpl
from plugin_host.plugins import get_plugin_manager, load_plugins
from plugin_host.policy import parse_policy
from plugin_host.sandbox.kernels import accept_kernels, merge_kernels
from plugin_host.testing import minimal_policy
from plugins.numpy_backend import NumpyBackend


def factory(attrs, consts, types, where):
    return lambda x: x


class Provides:
    def __init__(self, *ops):
        self.ops, self.backends = ops, []

    @hookimpl
    def plugin_host_add_kernels(self, backend):
        self.backends.append(backend)
        return {op: factory for op in self.ops}


class WithoutTanh:
    """The numpy backend minus one op: a plugin's tanh would *add* an op."""

    def __init__(self):
        self.base = NumpyBackend()
        self.name = "no-tanh"

    def supported_ops(self):
        return {k: v for k, v in self.base.supported_ops().items() if k != "tanh"}

    def supported_dtypes(self):
        return self.base.supported_dtypes()

    def prepare(self, node, consts, types):
        return self.base.prepare(node, consts, types)


def _pm(**plugins):
    pm = get_plugin_manager(load_entrypoints=False)
    for name, plugin in plugins.items():
        pm.register(plugin, name=name)
    return pm


@pytest.mark.parametrize("backend", [NumpyBackend(), WithoutTanh()], ids=["replace", "add"])
def test_a_kernel_needs_its_op_listed_for_its_plugin(backend):
    plugin = Provides("tanh")
    with pytest.raises(PluginError, match="plugin 'k' provides a kernel for op 'tanh', which "
                                          "the kernel overrides does not list") as info:
        merge_kernels(_pm(k=plugin), backend, {})
    assert info.value.context["op"] == "tanh" and info.value.context["plugin"] == "k"
    with pytest.raises(PluginError, match=r"listed for 'other'"):
        merge_kernels(_pm(k=Provides("tanh")), backend, {"tanh": "other"})
    merged = merge_kernels(_pm(k=Provides("tanh")), backend, {"tanh": "k"})
    assert merged.kernels["tanh"] == ("k", factory) and "tanh" in merged.supported_ops()
    assert plugin.backends == [backend.name]  # the hook gets the backend's name, as specified


def test_no_kernels_leaves_the_backend_alone():
    backend = NumpyBackend()
    assert merge_kernels(_pm(), backend, {"tanh": "k"}) is backend


def test_accept_kernels_refusals():
    with pytest.raises(PluginError, match="not an op of the op table"):
        accept_kernels([("k", {"no_such_op": factory})], {"no_such_op": "k"})
    with pytest.raises(PluginError, match="not callable"):
        accept_kernels([("k", {"tanh": 3})], {"tanh": "k"})
    with pytest.raises(PluginError, match="must return a mapping"):
        accept_kernels([("k", ["tanh"])], {})
    with pytest.raises(PluginError, match="'a' and 'b' both provide a kernel for op 'tanh'"):
        accept_kernels([("a", {"tanh": factory}), ("b", {"tanh": factory})],
                       {"tanh": {"a", "b"}})
    assert accept_kernels([("a", {"tanh": factory}), ("b", None)], {"tanh": {"a", "b"}}) == \
        {"tanh": ("a", factory)}


def test_the_host_side_check_is_the_same_rule(tmp_path):
    """LoadedPlugins.kernels (policy) refuses with the same rule, naming the policy line."""
    audit = '[[audited_op]]\nop = "tanh"\nversion = 1\naudit = "T-1"\n'
    pol = parse_policy(minimal_policy({"name": "k", "kind": "model-layer", "kernels": ["tanh"]},
                                      {"name": "j", "kind": "model-layer"}, extra=audit),
                       path="p.toml", state_dir=str(tmp_path))
    loaded = load_plugins(pol, load_entrypoints=False, configure=False,
                          extra=[("k", Provides("tanh")), ("j", Provides("relu"))])
    try:
        with pytest.raises(PluginError, match=r"plugin 'j' provides a kernel for op 'relu', "
                                              r"which policy p.toml:\d+ does not list for it"):
            loaded.kernels("numpy")
    finally:
        loaded.broker.close()
    loaded = load_plugins(pol, load_entrypoints=False, configure=False,
                          extra=[("k", Provides("tanh"))])
    try:
        assert loaded.kernels("numpy") == {"tanh": factory}
    finally:
        loaded.broker.close()
