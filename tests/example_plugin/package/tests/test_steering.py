"""The example plugin's own tests, as its author would write them.

They use the fixtures plugin-host ships (``plugin_host_manager``, ``plugin_host_capabilities``),
which pytest loads through plugin-host's ``pytest11`` entry point.
"""

import numpy as np
import pytest

from plugin_host.errors import CapabilityDenied, PluginError
from plugin_host.testing import fake_config, minimal_policy
from plugin_host_example_steering import SteeringPlugin, steer_from_plan

PLAN = np.zeros((1, 66), np.float32)
PLAN[0, 0] = 0.8


def policy(*capabilities, **config):
    return minimal_policy({"name": "example_steering", "kind": "control",
                           "capabilities": list(capabilities), "config": config})


def test_steer_is_clipped():
    assert steer_from_plan(np.array([10.0]), gain=1.0, max_steer=0.5) == 0.5


def test_unit_with_recording_fakes(plugin_host_capabilities):
    caps = plugin_host_capabilities("control.publish", plugin="example_steering")
    plugin = SteeringPlugin()
    plugin.plugin_host_configure(config=fake_config("example_steering", "control", caps,
                                                    config={"gain": 1.0}))
    from plugin_host.topics import Message
    plugin.on_model_output(Message("model", 7, 0, "host", {"plan": PLAN}))
    assert caps["control.publish"].published == [{"steer": pytest.approx(0.8),
                                                  "model_seq": 7}]
    assert plugin.can is None  # not granted, so never used


def test_in_a_host_publishes_control_and_sends_can(plugin_host_manager):
    host = plugin_host_manager(policy("control.publish", "can.send", gain=1.0, can_id=0x2E4),
                               plugins={"example_steering": SteeringPlugin()})
    control = host.subscribe("control")
    host.publish_model({"plan": PLAN})
    message = control.recv(timeout=1.0)
    assert message.publisher == "example_steering"
    assert message.data["steer"] == pytest.approx(0.8)
    frames = host.received_can(timeout=1.0)
    assert [(f.arbitration_id, int.from_bytes(f.data, "big", signed=True)) for f in frames] == \
        [(0x2E4, round(0.8 * 32767))]
    assert {r["capability"] for r in host.audit_records(action="use")} == \
        {"control.publish", "can.send"}


def test_without_control_publish_the_host_refuses_to_start(plugin_host_manager):
    with pytest.raises(CapabilityDenied) as info:
        plugin_host_manager(policy("can.send"), plugins={"example_steering": SteeringPlugin()})
    assert (info.value.plugin, info.value.capability) == ("example_steering", "control.publish")


def test_a_model_layer_entry_cannot_load_it(plugin_host_manager):
    # a control plugin registered under the wrong kind is refused: its hooks are not a
    # model-layer plugin's
    with pytest.raises(PluginError, match="may not implement"):
        plugin_host_manager(minimal_policy({"name": "example_steering", "kind": "model-layer"}),
                            plugins={"example_steering": SteeringPlugin()})
