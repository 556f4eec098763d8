"""Discovery and loading: entry points, policy-gated imports, kinds, and every hook's contract.

Fixture plugins are small packages written to ``tmp_path`` with a ``*.dist-info`` folder, put
on ``sys.path``, so ``importlib.metadata`` discovers their entry points exactly as it does an
installed package's.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from abi.errors import PluginHostError
from plugin_host.errors import CapabilityDenied, PluginError
from plugin_host.hooks import hookimpl
from plugin_host.plugins import (ENTRY_POINT_GROUP, KIND_HOOKS, builtin_entry_points,
                                 get_plugin_manager, load_plugins)
from plugin_host.policy import HOST_KINDS, SANDBOXED_KINDS, parse_policy
from plugin_host.testing import minimal_policy

LOUD = "raise RuntimeError('loud_plugin was imported: the policy never allowed that')\n"


def install_fake(tmp_path: Path, dist: str, entry_points: dict[str, str],
                 modules: dict[str, str]) -> Path:
    """A fake installed distribution in ``tmp_path/site`` (put that folder on sys.path)."""
    site = tmp_path / "site"
    info = site / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\n" + "".join(f"{k} = {v}\n" for k, v in entry_points.items()))
    for name, source in modules.items():
        (site / f"{name}.py").write_text(textwrap.dedent(source))
    return site


@pytest.fixture
def loud(tmp_path, monkeypatch):
    """An installed plugin 'loud' whose module raises the moment it is imported."""
    site = install_fake(tmp_path, "loud-plugin", {"loud": "loud_plugin"}, {"loud_plugin": LOUD})
    monkeypatch.syspath_prepend(str(site))
    yield "loud_plugin"
    sys.modules.pop("loud_plugin", None)


def policy(*plugins, extra=""):
    return parse_policy(minimal_policy(*plugins, extra=extra), path="test-policy.toml",
                        state_dir="/nonexistent")


BUILTINS = ({"name": "numpy_backend", "kind": "inference-hardware"},
            {"name": "demo_model", "kind": "model-layer"})


# --- discovery ---------------------------------------------------------------------------------


def test_builtins_are_entry_points_of_this_distribution():
    assert {ep.name for ep in builtin_entry_points()} >= {"numpy_backend", "demo_model"}


def test_a_plugin_the_policy_does_not_allow_is_never_imported(loud):
    pm = get_plugin_manager(policy(*BUILTINS))
    assert loud not in sys.modules
    assert sorted(n for n, _ in pm.list_name_plugin()) == ["demo_model", "numpy_backend"]


def test_without_a_policy_only_builtins_are_imported(loud):
    pm = get_plugin_manager()
    assert loud not in sys.modules
    assert "loud" not in {n for n, _ in pm.list_name_plugin()}


def test_denied_plugins_are_never_imported_even_when_listed(loud):
    pm = get_plugin_manager(policy(*BUILTINS, {"name": "loud", "kind": "sink"},
                                   extra='[deny]\nplugins = ["loud"]\n'))
    assert loud not in sys.modules
    with pytest.raises(PluginError, match="not allowed"):
        pm.register(object(), name="loud")


def test_the_loud_fixture_really_is_loud(loud):
    # the same entry point, allowed: imported, and its failure is a typed refusal
    with pytest.raises(PluginError, match="'loud' .* failed to import: RuntimeError"):
        get_plugin_manager(policy({"name": "loud", "kind": "sink"}))


def test_kinds_limit_what_a_process_imports(loud):
    host = get_plugin_manager(policy(*BUILTINS), kinds=HOST_KINDS)
    worker = get_plugin_manager(policy(*BUILTINS), kinds=SANDBOXED_KINDS)
    assert [n for n, _ in host.list_name_plugin()] == []
    assert sorted(n for n, _ in worker.list_name_plugin()) == ["demo_model", "numpy_backend"]


def test_a_listed_plugin_must_be_installed_once():
    with pytest.raises(PluginError, match="no installed package provides the entry point "
                                          "'ghost'") as info:
        get_plugin_manager(policy({"name": "ghost", "kind": "sink"}))
    assert "test-policy.toml:3" in str(info.value)


def test_two_packages_with_one_entry_point_name_are_refused(tmp_path, monkeypatch):
    for dist in ("twin-a", "twin-b"):
        site = install_fake(tmp_path / dist, dist, {"twin": f"twin_{dist[-1]}"},
                            {f"twin_{dist[-1]}": ""})
        monkeypatch.syspath_prepend(str(site))
    with pytest.raises(PluginError, match="2 installed packages provide it"):
        get_plugin_manager(policy({"name": "twin", "kind": "sink"}))


def test_unknown_hook_names_are_rejected_at_load(tmp_path, monkeypatch):
    source = """
        from plugin_host.hooks import hookimpl

        @hookimpl
        def plugin_host_add_sink(config):  # missing the final s
            return []
    """
    site = install_fake(tmp_path, "typo-plugin", {"typo": "typo_plugin"},
                        {"typo_plugin": source})
    monkeypatch.syspath_prepend(str(site))
    try:
        with pytest.raises(PluginError, match="'typo'.*plugin_host_add_sink"):
            get_plugin_manager(policy({"name": "typo", "kind": "sink"}))
    finally:
        sys.modules.pop("typo_plugin", None)


def test_a_third_party_plugin_loads_through_its_entry_point(tmp_path, monkeypatch):
    source = """
        from plugin_host.hooks import hookimpl

        @hookimpl
        def plugin_host_add_sinks():
            return [print]
    """
    site = install_fake(tmp_path, "printer-plugin", {"printer": "printer_plugin"},
                        {"printer_plugin": source})
    monkeypatch.syspath_prepend(str(site))
    try:
        loaded = load_plugins(policy({"name": "printer", "kind": "sink"}),
                              broker=_broker(policy({"name": "printer", "kind": "sink"}),
                                             tmp_path))
        assert loaded.sinks() == [("printer", print)]
        loaded.unconfigure()
    finally:
        sys.modules.pop("printer_plugin", None)


def _broker(pol, tmp_path):
    from plugin_host.audit import AuditLog
    from plugin_host.capabilities import CapabilityBroker

    return CapabilityBroker(pol, audit=AuditLog(tmp_path / "audit.jsonl"))


# --- registration under a policy ---------------------------------------------------------------


class CameraHooks:
    @hookimpl
    def plugin_host_add_cameras(self):
        return []


@pytest.mark.parametrize("kind", sorted(set(KIND_HOOKS) - {"camera"}))
def test_a_plugin_implements_only_the_hooks_of_its_kind(kind):
    pm = get_plugin_manager(policy({"name": "p", "kind": kind}), load_entrypoints=False)
    with pytest.raises(PluginError, match=f"is a {kind} plugin .* may not implement "
                                          f"plugin_host_add_cameras"):
        pm.register(CameraHooks(), name="p")


def test_registration_needs_an_allowed_name():
    pm = get_plugin_manager(policy({"name": "p", "kind": "camera"}), load_entrypoints=False)
    with pytest.raises(PluginError, match="registered by its"):
        pm.register(CameraHooks())
    with pytest.raises(PluginError, match="'q' is not allowed by policy test-policy.toml"):
        pm.register(CameraHooks(), name="q")
    pm.register(CameraHooks(), name="p")
    with pytest.raises(PluginError, match="'p'"):
        pm.register(CameraHooks(), name="p")


# --- the hooks, one by one ---------------------------------------------------------------------


class Recorder:
    """A plugin of any host-side kind that records its lifecycle."""

    def __init__(self, log):
        self.log = log

    @hookimpl
    def plugin_host_configure(self, config):
        self.log.append(("configure", config["name"], dict(config["config"]),
                         sorted(config["capabilities"])))

    @hookimpl
    def plugin_host_unconfigure(self):
        self.log.append(("unconfigure",))


def test_configure_gets_each_plugin_its_own_section_and_unconfigure_runs_in_reverse(tmp_path):
    log = []
    pol = policy({"name": "a", "kind": "control", "capabilities": ["control.publish"],
                  "config": {"gain": 2}},
                 {"name": "b", "kind": "sink", "config": {"path": "x"}})

    class B(Recorder):
        @hookimpl
        def plugin_host_unconfigure(self):
            self.log.append(("unconfigure b",))

    loaded = load_plugins(pol, broker=_broker(pol, tmp_path), load_entrypoints=False,
                          extra=[("a", Recorder(log)), ("b", B(log))])
    assert log == [("configure", "a", {"gain": 2}, ["control.publish"]),
                   ("configure", "b", {"path": "x"}, [])]
    config = loaded.config("a")
    assert config["kind"] == "control"
    with pytest.raises(TypeError):
        config["kind"] = "camera"
    loaded.unconfigure()
    assert log[2:] == [("unconfigure b",), ("unconfigure",)]


def test_a_failing_configure_stops_the_start_and_unconfigures_the_others(tmp_path):
    log = []

    class Greedy:
        @hookimpl
        def plugin_host_configure(self, config):
            config["capabilities"]["can.send"]

    pol = policy({"name": "ok", "kind": "sink"}, {"name": "greedy", "kind": "control"})
    broker = _broker(pol, tmp_path)
    with pytest.raises(CapabilityDenied) as info:
        load_plugins(pol, broker=broker, load_entrypoints=False,
                     extra=[("ok", Recorder(log)), ("greedy", Greedy())])
    assert (info.value.plugin, info.value.capability) == ("greedy", "can.send")
    assert log[-1] == ("unconfigure",)


def test_add_cameras_per_plugin_config_and_unique_names(tmp_path):
    class Cam:
        def __init__(self, name):
            self.name = name

    class CamPlugin:
        @hookimpl
        def plugin_host_add_cameras(self, config):
            assert "camera.publish" in config["capabilities"]
            return [Cam(n) for n in config["config"]["names"].split(",")]

    pol = policy({"name": "front", "kind": "camera", "capabilities": ["camera.publish"],
                  "config": {"names": "road,wide"}},
                 {"name": "rear", "kind": "camera", "capabilities": ["camera.publish"],
                  "config": {"names": "rear"}})
    loaded = load_plugins(pol, broker=_broker(pol, tmp_path), load_entrypoints=False,
                          extra=[("front", CamPlugin()), ("rear", CamPlugin())])
    assert [c.name for c in loaded.cameras()] == ["road", "wide", "rear"]
    loaded.unconfigure()
    pol = policy({"name": "front", "kind": "camera", "capabilities": ["camera.publish"],
                  "config": {"names": "road"}},
                 {"name": "rear", "kind": "camera", "capabilities": ["camera.publish"],
                  "config": {"names": "road"}})
    loaded = load_plugins(pol, broker=_broker(pol, tmp_path), load_entrypoints=False,
                          extra=[("front", CamPlugin()), ("rear", CamPlugin())])
    with pytest.raises(PluginError, match="two cameras are named 'road'"):
        loaded.cameras()
    loaded.unconfigure()


def test_add_sinks_receive_model_outputs(tmp_path):
    got = []

    class SinkPlugin:
        @hookimpl
        def plugin_host_add_sinks(self, config):
            return [lambda message: got.append((config["name"], message.data))]

    pol = policy({"name": "s", "kind": "sink"})
    loaded = load_plugins(pol, broker=_broker(pol, tmp_path), load_entrypoints=False,
                          extra=[("s", SinkPlugin())])
    loaded.connect_sinks()
    loaded.broker.topics["model"].publish("host", {"plan": 1})
    assert got == [("s", {"plan": 1})]
    loaded.unconfigure()


def test_add_kernels_only_for_listed_audited_ops(tmp_path):
    def factory(attrs, consts, types, where):
        return lambda x: x

    class Kernels:
        def __init__(self, ops):
            self.ops = ops

        @hookimpl
        def plugin_host_add_kernels(self, backend):
            assert backend == "numpy"
            return {op: factory for op in self.ops}

    audit = '[[audited_op]]\nop = "embedding"\nversion = 1\naudit = "A-1"\n'
    pol = policy({"name": "k", "kind": "model-layer", "kernels": ["embedding"]}, extra=audit)
    loaded = load_plugins(pol, broker=_broker(pol, tmp_path), load_entrypoints=False,
                          extra=[("k", Kernels(["embedding"]))])
    assert loaded.kernels("numpy") == {"embedding": factory}
    loaded.unconfigure()
    loaded = load_plugins(pol, broker=_broker(pol, tmp_path), load_entrypoints=False,
                          extra=[("k", Kernels(["embedding", "linear"]))])
    with pytest.raises(PluginError, match="kernel for op 'linear', which policy "
                                          "test-policy.toml:3 does not list"):
        loaded.kernels("numpy")
    loaded.unconfigure()
    pol = policy({"name": "k", "kind": "model-layer", "kernels": ["embedding"]},
                 {"name": "k2", "kind": "model-layer", "kernels": ["embedding"]}, extra=audit)
    loaded = load_plugins(pol, broker=_broker(pol, tmp_path), load_entrypoints=False,
                          extra=[("k", Kernels(["embedding"])), ("k2", Kernels(["embedding"]))])
    with pytest.raises(PluginError, match="both provide a kernel for op 'embedding'"):
        loaded.kernels("numpy")
    loaded.unconfigure()


def test_verify_artifact_can_refuse(tmp_path):
    class Strict:
        @hookimpl
        def plugin_host_verify_artifact(self, manifest, path):
            if manifest["latency_ms"] > 50:
                raise PluginHostError(f"{path}: too slow")

    class Buggy:
        @hookimpl
        def plugin_host_verify_artifact(self, manifest):
            return manifest["missing"]

    pol = policy({"name": "strict", "kind": "control"}, {"name": "buggy", "kind": "sink"})
    loaded = load_plugins(pol, broker=_broker(pol, tmp_path), load_entrypoints=False,
                          extra=[("strict", Strict())])
    loaded.verify_artifact({"latency_ms": 10}, "a.pha")
    with pytest.raises(PluginHostError, match="a.pha: too slow"):
        loaded.verify_artifact({"latency_ms": 80}, "a.pha")
    loaded.pm.register(Buggy(), name="buggy")
    with pytest.raises(PluginError, match="'buggy': plugin_host_verify_artifact failed: "
                                          "KeyError"):
        loaded.verify_artifact({"latency_ms": 10}, "a.pha")
    loaded.unconfigure()


def test_builtin_backends_and_builders_under_the_demo_policy(tmp_path):
    pol = policy(*BUILTINS)
    loaded = load_plugins(pol, broker=_broker(pol, tmp_path))
    assert list(loaded.backends()) == ["numpy"] and "demo" in loaded.model_builders()
    assert loaded.names == ["numpy_backend", "demo_model"]
    loaded.unconfigure()
