"""Fixtures of the broker tests: a policy granting a bit of everything, and a broker on it."""

from __future__ import annotations

import uuid

import pytest

from plugin_host.audit import AuditLog, read_audit_log
from plugin_host.capabilities import CapabilityBroker
from plugin_host.policy import parse_policy

POLICY = '''\
format = 1

[[plugin]]
name = "steering"
kind = "control"
capabilities = ["control.publish", "can.send", "panda.safety"]

[[plugin]]
name = "cam"
kind = "camera"
capabilities = ["camera.publish", "model.publish"]
deny = ["model.publish"]

[[plugin]]
name = "nn"
kind = "model-layer"
capabilities = ["model.publish"]

[deny]
plugins = ["evil"]

[can]
interface = "virtual"
channel = "CHANNEL"

[panda]
allowed_modes = ["silent", "no_output", "toyota"]
'''


@pytest.fixture
def channel():
    return f"broker-test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def policy(tmp_path, channel):
    path = tmp_path / "policy.toml"
    path.write_text(POLICY.replace("CHANNEL", channel))
    return parse_policy(path.read_text(), path=str(path), state_dir=tmp_path / "state")


@pytest.fixture
def broker(policy, tmp_path):
    with CapabilityBroker(policy, audit=AuditLog(tmp_path / "audit.jsonl")) as b:
        yield b
    b.audit.close()


@pytest.fixture
def audit(tmp_path):
    """The audit records written so far: ``audit(action=..., plugin=...)``."""
    def records(**match):
        path = tmp_path / "audit.jsonl"
        return [r for r in read_audit_log(path) if all(r[k] == v for k, v in match.items())] \
            if path.exists() else []
    return records
