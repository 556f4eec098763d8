"""A policy configures the sandbox through one function, and the worker's events reach the
policy's audit log."""

from __future__ import annotations

import os
from importlib.metadata import EntryPoint

import numpy as np
import pytest

from plugin_host.audit import SANDBOX_ACTIONS, AuditLog, read_audit_log
from plugin_host.errors import PluginError, PluginHostError, WorkerDiedError
from plugin_host.policy import parse_policy
from plugin_host.sandbox import (SandboxConfig, SandboxedExecutor, SandboxLimits,
                                 SandboxRequirements, audit_sinks, sandbox_config_from_policy)
from plugin_host.sandbox import policy as sandbox_policy
from plugin_host.testing import minimal_policy
from tests.plugins.evil_layer import attack_input

RELU_AUDIT = '[[audited_op]]\nop = "relu"\nversion = 1\naudit = "R-1"\n'
TANH_AUDIT = '[[audited_op]]\nop = "tanh"\nversion = 1\naudit = "T-1"\n'


def _policy(*plugins, extra=""):
    return parse_policy(minimal_policy(*plugins, extra=extra), path="p.toml",
                        state_dir="/nonexistent")


def _fake_entry_points(monkeypatch, **values):
    eps = [EntryPoint(name, value, "plugin_host") for name, value in values.items()]
    monkeypatch.setattr(sandbox_policy, "entry_points", lambda group: list(eps))


def test_requirements_limits_and_plugins_come_from_the_policy():
    pol = _policy({"name": "numpy_backend", "kind": "inference-hardware"},
                  {"name": "demo_model", "kind": "model-layer", "kernels": ["relu"]},
                  {"name": "synthetic", "kind": "camera"},
                  extra=RELU_AUDIT + '[sandbox]\nrequire = ["seccomp", "landlock"]\n'
                        '[limits]\nmemory_mb = 512\ncpu_seconds = 30\nopen_files = 32\n'
                        'call_timeout_ms = 250\n')
    config = sandbox_config_from_policy(pol)
    requirements, limits, backend_plugins, plugin_modules, overrides = config
    assert isinstance(config, SandboxConfig)
    assert requirements == SandboxRequirements.only(["seccomp", "landlock"])
    assert requirements.seccomp and requirements.landlock_abi and not requirements.netns
    assert (limits.address_space, limits.cpu_seconds, limits.open_files) == (512 * 2**20, 30, 32)
    assert limits.call_timeout == pytest.approx(0.25)
    assert limits.tasks == SandboxLimits().tasks  # not in a policy: the default
    assert limits.cpu == "auto"  # co-location unless the policy says "off"
    assert backend_plugins == ("numpy_backend",)  # cameras never reach the worker
    assert plugin_modules == ("plugins.demo_model",)  # the entry point's module, not imported
    assert overrides == {"relu": "plugins.demo_model"}
    kwargs = config.executor_kwargs()
    assert kwargs["kernel_overrides"] == overrides and kwargs["limits"] is limits


def test_denied_plugins_and_empty_requirements():
    pol = _policy({"name": "numpy_backend", "kind": "inference-hardware"},
                  {"name": "demo_model", "kind": "model-layer", "kernels": ["relu"]},
                  extra=RELU_AUDIT + '[deny]\nplugins = ["demo_model"]\n')
    config = sandbox_config_from_policy(pol)
    assert config.plugin_modules == () and config.kernel_overrides == {}
    assert config.requirements == SandboxRequirements.only([])


def test_model_layer_entry_points_are_checked(monkeypatch):
    pol = _policy({"name": "a", "kind": "model-layer", "kernels": ["relu"]},
                  {"name": "b", "kind": "model-layer", "kernels": ["relu", "tanh"]},
                  extra=RELU_AUDIT + TANH_AUDIT)
    _fake_entry_points(monkeypatch, a="pkg_a.kernels")
    with pytest.raises(PluginError, match=r"p.toml:\d+ allows model-layer plugin 'b', and 0"):
        sandbox_config_from_policy(pol)
    _fake_entry_points(monkeypatch, a="pkg_a.kernels", b="pkg_b:plugin")
    with pytest.raises(PluginError, match="'pkg_b:plugin' names an object"):
        sandbox_config_from_policy(pol)
    _fake_entry_points(monkeypatch, a="pkg_a.kernels", b="pkg_b")
    with pytest.raises(PluginError, match="plugins 'a' and 'b' both list op 'relu'"):
        sandbox_config_from_policy(pol)


def test_worker_events_go_to_the_audit_log(tmp_path, redteam_artifact, evil_kwargs):
    path = tmp_path / "audit.jsonl"
    x, ids = np.ones((1, 16), np.float32), np.array([1])
    with AuditLog(path) as log:
        with SandboxedExecutor(redteam_artifact, **evil_kwargs, **audit_sinks(log)) as ex:
            first = ex.pid
            ex.run({"x": x, "ids": ids})
            with pytest.raises(PluginHostError):
                ex.run({"x": attack_input("tcp_connect"), "ids": ids})
            with pytest.raises(WorkerDiedError):
                ex.run({"x": attack_input("exit_worker"), "ids": ids})
            second = ex.pid
    records = list(read_audit_log(path))
    assert {r["plugin"] for r in records} == {"sandbox"}
    assert {r["action"] for r in records} <= set(SANDBOX_ACTIONS)
    by = {}
    for r in records:
        by.setdefault(r["action"], []).append(r["detail"])
    assert [d["pid"] for d in by["start"]] == [first, second]
    assert first != os.getpid() and second != first
    assert by["start"][0]["in_force"] == list(SandboxRequirements.NAMES)
    assert by["start"][0]["artifact"] == "redteam" and "seccomp filter" in \
        by["start"][0]["protections"]
    assert any(d["event"] == "socket.__new__" and d["pid"] == first for d in by["tripwire"])
    assert by["died"][0]["pid"] == first and "status 7" in by["died"][0]["how"]
    assert by["restart"] == [{"artifact": "redteam", "version": "1.0.0", "pid": second,
                              "restarts": 1}]
    # the start is recorded before any plugin code runs: it precedes every tripwire
    assert records[0]["action"] == "start"


def test_an_unrecordable_start_does_not_happen(redteam_artifact, sandbox_trust):
    def on_event(kind, detail):
        raise PluginHostError("audit log full")

    with pytest.raises(PluginHostError, match="audit log full"):
        SandboxedExecutor(redteam_artifact, trust=sandbox_trust, on_event=on_event)


def test_co_location_comes_from_the_policy():
    for value, want in (('"auto"', "auto"), ("0", 0), ('"off"', None)):
        pol = _policy({"name": "numpy_backend", "kind": "inference-hardware"},
                      extra=f"[limits]\ncpu = {value}\n")
        assert sandbox_config_from_policy(pol).limits.cpu == want
