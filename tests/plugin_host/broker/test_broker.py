"""The broker: capabilities only when granted, typed denials, everything audited."""

from __future__ import annotations

import pytest

from plugin_host.capabilities import CanSend, Capability, PandaSafety, Publisher
from plugin_host.errors import CapabilityDenied


def test_grant_hands_out_exactly_the_granted_capabilities(broker, audit):
    caps = broker.grant("steering")
    assert sorted(caps) == ["can.send", "control.publish", "panda.safety"]
    assert isinstance(caps["can.send"], CanSend)
    assert isinstance(caps["panda.safety"], PandaSafety)
    assert isinstance(caps["control.publish"], Publisher)
    assert all(isinstance(c, Capability) and c.holder == "steering" for c in caps.values())
    grants = audit(action="grant")
    assert [(r["plugin"], r["capability"]) for r in grants] == [
        ("steering", "can.send"), ("steering", "panda.safety"), ("steering", "control.publish")]
    assert grants[0]["detail"]["policy"].endswith("policy.toml:3")


def test_deny_beats_allow_in_the_grant(broker):
    assert list(broker.grant("cam")) == ["camera.publish"]


@pytest.mark.parametrize("plugin, capability, reason", [
    ("cam", "can.send", "not in the plugin's capabilities"),
    ("cam", "model.publish", "in the plugin's deny list"),
    ("nn", "control.publish", "a model-layer plugin can never hold it"),
    ("evil", "can.send", "[deny] plugins"),
    ("stranger", "model.publish", "not listed in [[plugin]]"),
    ("steering", "can.receive", "no capability called 'can.receive'"),
])
def test_denied_use_is_typed_named_and_audited(broker, audit, policy, plugin, capability,
                                               reason):
    caps = broker.grant(plugin)
    assert capability not in caps and caps.get(capability) is None  # asking is not a use
    assert audit(action="deny") == []
    with pytest.raises(CapabilityDenied) as info:
        caps[capability]
    error = info.value
    assert (error.plugin, error.capability) == (plugin, capability)
    assert error.policy.startswith(policy.path) and reason in error.reason
    assert isinstance(error, PermissionError)
    assert f"plugin {plugin!r} may not use {capability!r} (policy {policy.path}" in str(error)
    (record,) = audit(action="deny")
    assert (record["plugin"], record["capability"]) == (plugin, capability)
    assert reason in record["detail"]["reason"]


def test_request_one_capability(broker, audit):
    assert broker.request("steering", "control.publish").name == "control.publish"
    with pytest.raises(CapabilityDenied):
        broker.request("nn", "can.send")
    assert [r["action"] for r in audit()] == ["grant", "deny"]


def test_close_revokes_everything_handed_out(broker, audit):
    publisher = broker.grant("steering")["control.publish"]
    publisher.publish({"steer": 0.0})
    broker.close()
    assert publisher.revoked
    with pytest.raises(CapabilityDenied, match="revoked"):
        publisher.publish({"steer": 1.0})
    assert [r["action"] for r in audit(capability="control.publish")] == [
        "grant", "use", "revoke", "deny"]
    with pytest.raises(CapabilityDenied, match="closed"):
        broker.grant("steering")


def test_publishers_stamp_the_holder_and_audit_each_use(broker, audit):
    sub = broker.topics["control"].subscribe()
    control = broker.grant("steering")["control.publish"]
    control.publish({"steer": 0.25})
    message = sub.recv(0)
    assert (message.publisher, message.data) == ("steering", {"steer": 0.25})
    (use,) = audit(action="use")
    assert use["detail"] == {"topic": "control", "seq": 0}


def test_no_can_bus_is_opened_without_a_can_grant(policy, tmp_path):
    from plugin_host.audit import AuditLog
    from plugin_host.capabilities import CapabilityBroker

    opened = []
    with CapabilityBroker(policy, audit=AuditLog(tmp_path / "a.jsonl"),
                          can_bus_factory=opened.append) as broker:
        broker.grant("cam")
    assert opened == []


def test_default_audit_log_is_the_policys(policy):
    from plugin_host.audit import read_audit_log
    from plugin_host.capabilities import CapabilityBroker

    with CapabilityBroker(policy) as broker:
        broker.grant("cam")
    assert [r["action"] for r in read_audit_log(policy.audit.log)] == ["grant", "revoke"]
