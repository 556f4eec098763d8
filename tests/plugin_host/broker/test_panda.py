"""panda.safety: a simulated panda that says so, and only the policy's safety modes."""

from __future__ import annotations

import pytest

from plugin_host.capabilities import SimulatedPanda
from plugin_host.errors import CapabilityDenied, CapabilityError


def test_the_builtin_provider_is_a_simulated_panda(broker):
    safety = broker.grant("steering")["panda.safety"]
    assert safety.simulated and isinstance(broker.panda, SimulatedPanda)
    assert "simulated" in repr(broker.panda) and "no hardware" in repr(broker.panda)
    assert "simulated panda" in repr(safety)
    assert "SIMULATED" in SimulatedPanda.__doc__
    assert safety.safety_mode == ("silent", 0)


def test_allowed_modes_are_set_and_audited(broker, audit):
    safety = broker.grant("steering")["panda.safety"]
    safety.set_safety_mode("toyota", 73)
    assert safety.safety_mode == ("toyota", 73)
    assert broker.panda.history == [("toyota", 73)]
    (use,) = audit(action="use")
    assert use["detail"] == {"mode": "toyota", "param": 73, "simulated": True}


@pytest.mark.parametrize("mode", ["all_output", "honda_bosch"])
def test_modes_outside_the_policy_are_denied(broker, audit, mode):
    safety = broker.grant("steering")["panda.safety"]
    with pytest.raises(CapabilityDenied) as info:
        safety.set_safety_mode(mode)
    assert info.value.plugin == "steering" and info.value.capability == "panda.safety"
    assert "allowed_modes" in info.value.reason
    assert broker.panda.safety_mode == ("silent", 0)
    (deny,) = audit(action="deny")
    assert deny["detail"]["mode"] == mode


def test_unknown_mode_and_bad_param(broker):
    safety = broker.grant("steering")["panda.safety"]
    with pytest.raises(CapabilityError, match="unknown safety mode"):
        safety.set_safety_mode("turbo")
    with pytest.raises(CapabilityError, match="param"):
        safety.set_safety_mode("silent", -1)
