"""plugin_host.testing: the fixtures plugin authors get through the pytest11 entry point."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from plugin_host.errors import CapabilityDenied, CapabilityError, PluginError
from plugin_host.hooks import hookimpl
from plugin_host.policy import load_policy
from plugin_host.testing import FakeCapabilities, fake_config, minimal_policy


def test_registered_as_a_pytest_plugin(pytestconfig):
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert pyproject["project"]["entry-points"]["pytest11"] == {
        "plugin_host": "plugin_host.testing"}
    # loaded by pytest from the installed entry point, not from a conftest
    assert pytestconfig.pluginmanager.has_plugin("plugin_host")


class Control:
    def __init__(self):
        self.caps = None
        self.closed = False

    @hookimpl
    def plugin_host_configure(self, config):
        self.caps = config["capabilities"]
        self.gain = config["config"]["gain"]

    @hookimpl
    def plugin_host_add_sinks(self):
        def sink(message):
            self.caps["control.publish"].publish({"steer": message.data["plan"] * self.gain})
            self.caps["can.send"].send(0x100, bytes([int(message.data["plan"])]))
        return [sink]

    @hookimpl
    def plugin_host_unconfigure(self):
        self.closed = True


POLICY = minimal_policy({"name": "control", "kind": "control",
                         "capabilities": ["control.publish", "can.send"],
                         "config": {"gain": 2}})


def test_manager_runs_a_plugin_inside_a_host(plugin_host_manager):
    plugin = Control()
    host = plugin_host_manager(POLICY, plugins={"control": plugin})
    control = host.subscribe("control")
    host.publish_model({"plan": 3})
    assert control.recv(timeout=1).data == {"steer": 6}
    assert [(f.arbitration_id, bytes(f.data)) for f in host.received_can(1.0)] == \
        [(0x100, b"\x03")]
    assert host.received_can(0.01) == []
    assert [(r["capability"], r["action"]) for r in host.audit_records(plugin="control")] == [
        ("can.send", "grant"), ("control.publish", "grant"), ("control.publish", "use"),
        ("can.send", "use")]
    with pytest.raises(CapabilityDenied):
        host.capabilities("control")["panda.safety"]
    assert host.audit_records(action="deny")[0]["capability"] == "panda.safety"
    assert host.panda.simulated and host.config("control")["config"]["gain"] == 2


@pytest.fixture
def closed_after_teardown():
    """Set up before plugin_host_manager, so this checks after its teardown."""
    plugins = []
    yield plugins
    assert plugins and all(p.closed and p.caps["control.publish"].revoked for p in plugins)


def test_manager_unconfigures_at_teardown(closed_after_teardown, plugin_host_manager):
    plugin = Control()
    plugin_host_manager(POLICY, plugins=[("control", plugin)])
    closed_after_teardown.append(plugin)
    assert not plugin.closed


def test_manager_applies_the_policy(plugin_host_manager):
    with pytest.raises(PluginError, match="not allowed"):
        plugin_host_manager(POLICY, plugins={"other": Control()})


def test_policy_writer(plugin_host_policy, tmp_path):
    path = plugin_host_policy(POLICY)
    assert path.parent == tmp_path and load_policy(path).plugin("control").kind == "control"


def test_recording_fakes(plugin_host_capabilities):
    caps = plugin_host_capabilities("can.send", "control.publish", "panda.safety",
                                    plugin="mine", allowed_modes=["silent", "toyota"])
    caps["can.send"].send(0x10, b"\x01")
    caps["control.publish"].publish({"steer": 1})
    caps["panda.safety"].set_safety_mode("toyota")
    assert caps.calls == [("can.send", "send", {"arbitration_id": 0x10, "data": b"\x01",
                                                "extended": False}),
                          ("control.publish", "publish", {"data": {"steer": 1}}),
                          ("panda.safety", "set_safety_mode", {"mode": "toyota", "param": 0})]
    assert caps["can.send"].sent == [(0x10, b"\x01")]
    assert caps["control.publish"].published == [{"steer": 1}]
    with pytest.raises(CapabilityDenied):
        caps["panda.safety"].set_safety_mode("all_output")
    with pytest.raises(CapabilityError):
        caps["can.send"].send(0x800)
    with pytest.raises(CapabilityDenied):
        caps["model.publish"]
    assert caps.denied == ["model.publish"]


def test_fake_config_drives_configure():
    plugin = Control()
    caps = FakeCapabilities(["control.publish"], plugin="control")
    plugin.plugin_host_configure(config=fake_config("control", "control", caps,
                                                    config={"gain": 5}))
    assert plugin.gain == 5 and plugin.caps is caps
    with pytest.raises(ValueError):
        FakeCapabilities(["can.receive"])
