"""Test fixtures for plugin authors: run a plugin inside a host, or against recording fakes.

This module is a pytest plugin, registered through the ``pytest11`` entry point of
plugin-host, so its fixtures are available in every test run of an environment where
plugin-host is installed (nothing to import or add to ``conftest.py``):

``plugin_host_manager``
    A factory: ``plugin_host_manager(policy_text, plugins={"name": plugin}, entry_points=False)``
    loads the plugins under the policy, exactly as the host does (policy checks, kind/hook
    checks, capabilities from a real broker, audit log, per-plugin configure), and returns a
    :class:`HostHarness`. CAN goes to a private python-can virtual channel that the harness
    listens on; the audit log is a file in ``tmp_path``; everything is unconfigured and closed
    at teardown. ``entry_points=True`` also loads the allowed plugins from the installed entry
    points (to test your packaging).

``plugin_host_policy``
    ``plugin_host_policy(text, name="policy.toml") -> Path``: writes a policy file in
    ``tmp_path``. :func:`minimal_policy` writes the text for you.

``plugin_host_capabilities``
    ``plugin_host_capabilities("can.send", "control.publish", plugin="mine")`` returns
    :class:`FakeCapabilities`: recording fakes with the real capabilities' methods, for unit
    tests of code that takes capabilities, with no bus and no host. :func:`fake_config` builds a
    whole ``config`` mapping around them.

Example::

    from plugin_host.testing import minimal_policy
    import my_plugin

    def test_publishes_control(plugin_host_manager):
        host = plugin_host_manager(
            minimal_policy({"name": "my_plugin", "kind": "control",
                            "capabilities": ["control.publish"]}),
            plugins={"my_plugin": my_plugin})
        control = host.subscribe("control")
        host.publish_model({"plan": np.zeros((1, 66), np.float32)})
        assert control.recv(timeout=1).publisher == "my_plugin"
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping

import pytest

from .audit import AuditLog, read_audit_log
from .capabilities import CapabilityBroker, SimulatedPanda
from .errors import CapabilityDenied, CapabilityError
from .plugins import LoadedPlugins, load_plugins
from .policy import CAPABILITIES, SAFETY_MODES, parse_policy
from .topics import Message, Subscriber, Topic

__all__ = ["HostHarness", "minimal_policy", "FakeCapabilities", "FakeCanSend",
           "FakePandaSafety", "FakePublisher", "fake_config"]


# --- policy text --------------------------------------------------------------------------------


def minimal_policy(*plugins: Mapping[str, Any], extra: str = "") -> str:
    """A policy allowing exactly ``plugins``, each a mapping with ``name``, ``kind`` and
    optionally ``capabilities``, ``deny``, ``kernels`` and ``config`` (a flat table of strings,
    numbers and booleans). ``extra`` is appended verbatim (``[[audited_op]]``, ``[panda]``, ...).
    """
    lines = ["format = 1", ""]
    for p in plugins:
        lines.append("[[plugin]]")
        for key in ("name", "kind"):
            lines.append(f"{key} = {json.dumps(p[key])}")
        for key in ("capabilities", "deny", "kernels"):
            if key in p:
                lines.append(f"{key} = {json.dumps(list(p[key]))}")
        if p.get("config"):
            lines.append("[plugin.config]")
            for k, v in p["config"].items():
                lines.append(f"{k} = {json.dumps(v)}")
        lines.append("")
    return "\n".join(lines) + ("\n" + extra if extra else "")


# --- a host around the plugins under test -------------------------------------------------------


class HostHarness:
    """Plugins loaded under a policy with a real broker, for tests.

    ``loaded`` is the :class:`~plugin_host.plugins.LoadedPlugins` (``pm``, ``config(name)``,
    ``cameras()``, ``sinks()``, ``kernels(backend)``, ``backends()``, ``verify_artifact()``).
    The sinks are connected to the model topic; :meth:`publish_model` plays the host's part
    of publishing model outputs.
    """

    def __init__(self, loaded: LoadedPlugins, audit_path: Path, can_listener: Any,
                 can_channel: str) -> None:
        self.loaded = loaded
        self.audit_path = audit_path
        self.can_channel = can_channel
        self._can_listener = can_listener
        self._subscribers: list[Subscriber] = []
        self.connections = loaded.connect_sinks() if _has_sinks(loaded) else []

    # -- what the host holds --------------------------------------------------------------------

    @property
    def pm(self):
        return self.loaded.pm

    @property
    def hook(self):
        return self.loaded.pm.hook

    @property
    def policy(self):
        return self.loaded.policy

    @property
    def broker(self) -> CapabilityBroker:
        return self.loaded.broker

    @property
    def panda(self) -> SimulatedPanda:
        return self.loaded.broker.panda

    def topic(self, name: str) -> Topic:
        return self.loaded.broker.topics[name]

    def config(self, plugin: str) -> Mapping[str, Any]:
        return self.loaded.config(plugin)

    def capabilities(self, plugin: str):
        return self.loaded.config(plugin)["capabilities"]

    # -- observing ------------------------------------------------------------------------------

    def subscribe(self, topic: str, maxlen: int = 256) -> Subscriber:
        """A queue of every later message on ``topic`` (``recv(timeout)``, ``drain()``)."""
        sub = self.topic(topic).subscribe(maxlen)
        self._subscribers.append(sub)
        return sub

    def publish_model(self, outputs: Mapping[str, Any], publisher: str = "host") -> Message:
        """Publish model outputs on the model topic as the host does after an inference."""
        return self.topic("model").publish(publisher, dict(outputs))

    def received_can(self, timeout: float = 0.2) -> list[Any]:
        """Every CAN frame sent on the harness's virtual channel since the last call."""
        if self._can_listener is None:
            return []
        frames = []
        frame = self._can_listener.recv(timeout)
        while frame is not None:
            frames.append(frame)
            frame = self._can_listener.recv(0)
        return frames

    def audit_records(self, **match: Any) -> list[dict[str, Any]]:
        """Audit records, optionally only those whose fields equal ``match``
        (``plugin=``, ``capability=``, ``action=``)."""
        if not self.audit_path.exists():
            return []
        return [r for r in read_audit_log(self.audit_path)
                if all(r.get(k) == v for k, v in match.items())]

    def close(self) -> None:
        for conn in self.connections:
            conn.close()
        for sub in self._subscribers:
            sub.close()
        try:
            self.loaded.unconfigure()
        finally:
            if self._can_listener is not None:
                self._can_listener.shutdown()
                self._can_listener = None


def _has_sinks(loaded: LoadedPlugins) -> bool:
    return bool(loaded.pm.hook.plugin_host_add_sinks.get_hookimpls())


@pytest.fixture
def plugin_host_policy(tmp_path: Path) -> Callable[..., Path]:
    """Write a policy file in ``tmp_path``: ``plugin_host_policy(text, name="policy.toml")``."""
    def write(text: str, name: str = "policy.toml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path
    return write


@pytest.fixture
def plugin_host_manager(tmp_path: Path) -> Iterable[Callable[..., HostHarness]]:
    """Load plugins inside a host under a policy; see :class:`HostHarness`.

    ``plugin_host_manager(policy_text, plugins={name: plugin} or [(name, plugin)],
    entry_points=False, kinds=None, configure=True)``.
    """
    harnesses: list[HostHarness] = []

    def make(policy_text: str, plugins: Mapping[str, object] | Iterable[tuple[str, object]] = (),
             *, entry_points: bool = False, kinds: Iterable[str] | None = None,
             configure: bool = True) -> HostHarness:
        index = len(harnesses)
        policy_path = tmp_path / f"policy-{index}.toml"
        policy_path.write_text(policy_text, encoding="utf-8")
        policy = parse_policy(policy_text, path=str(policy_path),
                              state_dir=tmp_path / "state")
        audit_path = tmp_path / f"audit-{index}.jsonl"
        channel = f"plugin-host-test-{uuid.uuid4().hex[:12]}"
        listener = None
        if any(policy.decide(r.name, "can.send").granted for r in policy.plugins):
            listener = _virtual_bus(channel)

        broker = CapabilityBroker(policy, audit=AuditLog(audit_path), panda=SimulatedPanda(),
                                  can_bus_factory=lambda settings: _virtual_bus(channel))
        extra = list(plugins.items()) if isinstance(plugins, Mapping) else list(plugins)
        try:
            loaded = load_plugins(policy, broker=broker, kinds=kinds, extra=extra,
                                  load_entrypoints=entry_points, configure=configure)
        except BaseException:
            broker.close()
            broker.audit.close()
            if listener is not None:
                listener.shutdown()
            raise
        harness = HostHarness(loaded, audit_path, listener, channel)
        harnesses.append(harness)
        return harness

    yield make
    for harness in reversed(harnesses):
        harness.close()
        harness.broker.audit.close()


def _virtual_bus(channel: str) -> Any:
    import can

    return can.Bus(interface="virtual", channel=channel, receive_own_messages=False)


# --- recording fakes ------------------------------------------------------------------------------


class _Fake:
    name = ""

    def __init__(self, holder: str, log: list[tuple[str, str, dict[str, Any]]]) -> None:
        self.holder = holder
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self._log = log

    def _record(self, method: str, **args: Any) -> None:
        self.calls.append((method, args))
        self._log.append((self.name, method, args))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} held by {self.holder!r} (fake)>"


class FakeCanSend(_Fake):
    """Records ``send`` calls (checking arguments like the real ``can.send``); sends nothing."""

    name = "can.send"

    def send(self, arbitration_id: int, data: bytes | bytearray | list[int] = b"", *,
             extended: bool = False, timeout: float | None = None) -> None:
        limit = 0x1FFFFFFF if extended else 0x7FF
        if type(arbitration_id) is not int or not 0 <= arbitration_id <= limit:
            raise CapabilityError(f"can.send: arbitration id must be an int in [0, {limit:#x}]",
                                  plugin=self.holder, capability=self.name)
        payload = bytes(data)
        if len(payload) > 8:
            raise CapabilityError("can.send: classic CAN carries at most 8 data bytes",
                                  plugin=self.holder, capability=self.name)
        self._record("send", arbitration_id=arbitration_id, data=payload, extended=extended)

    @property
    def sent(self) -> list[tuple[int, bytes]]:
        """``(arbitration_id, data)`` of every frame sent."""
        return [(a["arbitration_id"], a["data"]) for _, a in self.calls]


class FakePandaSafety(_Fake):
    """Records ``set_safety_mode`` calls; denies modes outside ``allowed_modes`` like the real
    one. ``simulated`` is True."""

    name = "panda.safety"
    simulated = True

    def __init__(self, holder: str, log: list, allowed_modes: Iterable[str]) -> None:
        super().__init__(holder, log)
        self.allowed_modes = frozenset(allowed_modes)
        self.safety_mode: tuple[str, int] = ("silent", 0)

    def set_safety_mode(self, mode: str, param: int = 0) -> None:
        if mode not in SAFETY_MODES:
            raise CapabilityError(f"panda.safety: unknown safety mode {mode!r}",
                                  plugin=self.holder, capability=self.name)
        if mode not in self.allowed_modes:
            raise CapabilityDenied(plugin=self.holder, capability=self.name, policy="(fake)",
                                   reason=f"safety mode {mode!r} is not in allowed_modes")
        self._record("set_safety_mode", mode=mode, param=param)
        self.safety_mode = (mode, param)


class FakePublisher(_Fake):
    """Records ``publish`` calls (``published`` lists the data); delivers to nobody."""

    def __init__(self, name: str, holder: str, log: list) -> None:
        super().__init__(holder, log)
        self.name = name
        self.topic = name.split(".")[0]

    def publish(self, data: Any) -> Message:
        seq = len(self.calls)
        self._record("publish", data=data)
        return Message(self.topic, seq, 0, self.holder, data)

    @property
    def published(self) -> list[Any]:
        return [a["data"] for _, a in self.calls]


class FakeCapabilities(Mapping[str, Any]):
    """Recording fakes for ``names``, shaped like the host's capabilities mapping: asking for a
    capability not in ``names`` raises CapabilityDenied (and is recorded in ``denied``)."""

    def __init__(self, names: Iterable[str], *, plugin: str = "plugin-under-test",
                 allowed_modes: Iterable[str] = ("silent", "no_output")) -> None:
        self.plugin = plugin
        #: every call on every fake, in order: ``(capability, method, args)``
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        #: every capability asked for and denied
        self.denied: list[str] = []
        fakes: dict[str, Any] = {}
        for name in names:
            if name not in CAPABILITIES:
                raise ValueError(f"unknown capability {name!r} (known: {', '.join(CAPABILITIES)})")
            if name == "can.send":
                fakes[name] = FakeCanSend(plugin, self.calls)
            elif name == "panda.safety":
                fakes[name] = FakePandaSafety(plugin, self.calls, allowed_modes)
            else:
                fakes[name] = FakePublisher(name, plugin, self.calls)
        self._fakes = fakes

    def __getitem__(self, name: str) -> Any:
        if name in self._fakes:
            return self._fakes[name]
        self.denied.append(name)
        raise CapabilityDenied(plugin=self.plugin, capability=name, policy="(fake)",
                               reason="not granted to the fake")

    def get(self, name: str, default: Any = None) -> Any:
        return self._fakes.get(name, default)

    def __contains__(self, name: object) -> bool:
        return name in self._fakes

    def __iter__(self):
        return iter(self._fakes)

    def __len__(self) -> int:
        return len(self._fakes)


def fake_config(name: str, kind: str, capabilities: FakeCapabilities | Iterable[str] = (),
                config: Mapping[str, Any] | None = None,
                kernels: Iterable[str] = ()) -> Mapping[str, Any]:
    """A ``config`` mapping shaped like the one ``plugin_host_configure`` gets from the host."""
    caps = (capabilities if isinstance(capabilities, FakeCapabilities)
            else FakeCapabilities(capabilities, plugin=name))
    return MappingProxyType({"name": name, "kind": kind, "kernels": tuple(sorted(kernels)),
                             "config": MappingProxyType(dict(config or {})),
                             "capabilities": caps})


@pytest.fixture
def plugin_host_capabilities() -> Callable[..., FakeCapabilities]:
    """``plugin_host_capabilities(*names, plugin="plugin-under-test")`` -> FakeCapabilities."""
    def make(*names: str, plugin: str = "plugin-under-test",
             allowed_modes: Iterable[str] = ("silent", "no_output")) -> FakeCapabilities:
        return FakeCapabilities(names, plugin=plugin, allowed_modes=allowed_modes)
    return make

