"""can.send over python-can: the virtual interface by default, socketcan configurable."""

from __future__ import annotations

import can
import pytest

from plugin_host.audit import AuditLog
from plugin_host.capabilities import CapabilityBroker, open_bus
from plugin_host.errors import CapabilityError
from plugin_host.policy import CanSettings


def test_frames_sent_arrive_on_another_bus_on_the_same_virtual_channel(broker, channel, audit):
    listener = can.Bus(interface="virtual", channel=channel)
    try:
        send = broker.grant("steering")["can.send"]
        send.send(0x2E4, b"\x01\x02")
        send.send(0x18DAF110, [3, 4, 5], extended=True)
        first, second = listener.recv(1.0), listener.recv(1.0)
    finally:
        listener.shutdown()
    assert (first.arbitration_id, bytes(first.data), first.is_extended_id) == \
        (0x2E4, b"\x01\x02", False)
    assert (second.arbitration_id, bytes(second.data), second.is_extended_id) == \
        (0x18DAF110, b"\x03\x04\x05", True)
    uses = audit(action="use", capability="can.send")
    assert [u["detail"] for u in uses] == [
        {"bus": f"virtual:{channel}", "id": "0x2e4", "extended": False, "data": "0102"},
        {"bus": f"virtual:{channel}", "id": "0x18daf110", "extended": True, "data": "030405"}]


@pytest.mark.parametrize("args, kwargs, fragment", [
    ((0x800, b""), {}, "arbitration id"),
    ((-1, b""), {}, "arbitration id"),
    (("0x10", b""), {}, "arbitration id"),
    ((0x10, b"123456789"), {}, "at most 8 data bytes"),
    ((0x10, 3.5), {}, "data must be bytes"),
])
def test_bad_frames_are_refused_before_any_use(broker, audit, args, kwargs, fragment):
    send = broker.grant("steering")["can.send"]
    with pytest.raises(CapabilityError, match=fragment):
        send.send(*args, **kwargs)
    assert audit(action="use") == []


def test_a_bus_error_is_audited_as_a_failure(policy, tmp_path, audit):
    class BrokenBus:
        def send(self, message, timeout=None):
            raise can.CanOperationError("bus off")

        def shutdown(self):
            pass

    with CapabilityBroker(policy, audit=AuditLog(tmp_path / "audit.jsonl"),
                          can_bus_factory=lambda settings: BrokenBus()) as broker:
        send = broker.grant("steering")["can.send"]
        with pytest.raises(CapabilityError, match="bus off"):
            send.send(0x10, b"\x00")
    assert [r["action"] for r in audit(capability="can.send")] == ["grant", "use", "fail",
                                                                   "revoke"]


def test_socketcan_is_configurable(monkeypatch):
    seen = {}
    monkeypatch.setattr(can, "Bus", lambda **kwargs: seen.update(kwargs) or "bus")
    assert open_bus(CanSettings(interface="socketcan", channel="can0", bitrate=500000)) == "bus"
    assert seen == {"interface": "socketcan", "channel": "can0", "bitrate": 500000}
    seen.clear()
    open_bus(CanSettings())
    assert seen == {"interface": "virtual", "channel": "plugin-host",
                    "receive_own_messages": False}


def test_one_bus_per_broker_shut_down_with_it(policy, tmp_path):
    buses = []

    class Bus:
        def __init__(self, settings):
            self.settings, self.closed = settings, False
            buses.append(self)

        def send(self, message, timeout=None):
            pass

        def shutdown(self):
            self.closed = True

    with CapabilityBroker(policy, audit=AuditLog(tmp_path / "a.jsonl"),
                          can_bus_factory=Bus) as broker:
        broker.grant("steering")["can.send"].send(1, b"")
        broker.request("steering", "can.send").send(2, b"")
    assert len(buses) == 1 and buses[0].closed and buses[0].settings.channel.startswith("broker")
