"""The capability broker: the only place capability objects are made.

The broker holds the policy, the audit log, the host topics, the CAN bus and the panda
provider. :meth:`CapabilityBroker.grant` gives one plugin a :class:`Capabilities` mapping
holding an object for each capability its policy grants (each grant audited);
``plugin_host_configure`` passes that mapping as ``config["capabilities"]``. Asking the mapping
for a capability that was not granted raises :class:`~plugin_host.errors.CapabilityDenied`
(naming the plugin, the capability and the policy rule) and audits the denial. At shutdown
:meth:`CapabilityBroker.close` revokes every object handed out and shuts the bus down.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterator, Mapping

from ..audit import AuditLog
from ..errors import CapabilityDenied
from ..policy import CAPABILITIES, CanSettings, Policy
from ..topics import PUBLISH_CAPABILITY, Topics
from .base import Capability
from .can import CanSend, open_bus
from .panda import PandaProvider, PandaSafety, make_provider
from .publish import Publisher

__all__ = ["CapabilityBroker", "Capabilities"]

_TOPIC_OF = {cap: topic for topic, cap in PUBLISH_CAPABILITY.items()}


class Capabilities(Mapping[str, Capability]):
    """The capabilities granted to one plugin, by name.

    ``caps["can.send"]`` returns the object when granted and otherwise raises (and audits)
    CapabilityDenied; ``"can.send" in caps`` and ``caps.get("can.send")`` only ask, without an
    audit record, and iteration lists the granted names.
    """

    def __init__(self, plugin: str, granted: Mapping[str, Capability],
                 deny: Callable[[str], CapabilityDenied]) -> None:
        self._plugin = plugin
        self._granted = dict(granted)
        self._deny = deny

    def __getitem__(self, name: str) -> Capability:
        try:
            return self._granted[name]
        except KeyError:
            raise self._deny(name) from None

    def get(self, name: str, default: Any = None) -> Any:
        return self._granted.get(name, default)

    def __contains__(self, name: object) -> bool:
        return name in self._granted

    def __iter__(self) -> Iterator[str]:
        return iter(self._granted)

    def __len__(self) -> int:
        return len(self._granted)

    def __repr__(self) -> str:
        return f"<Capabilities of {self._plugin!r}: {', '.join(self._granted) or 'none'}>"


class CapabilityBroker:
    """Makes capability objects for plugins exactly as ``policy`` grants them.

    ``audit`` is the audit log (default: the policy's ``[audit] log``). ``topics``,
    ``can_bus_factory`` (``f(CanSettings) -> python-can bus``, called once, when ``can.send``
    is first granted; the broker shuts the bus down) and ``panda`` (a provider) replace the
    defaults: new topics, :func:`~plugin_host.capabilities.can.open_bus` on ``[can]``, a
    simulated panda.
    """

    def __init__(self, policy: Policy, *, audit: AuditLog | None = None,
                 topics: Topics | None = None,
                 can_bus_factory: Callable[[CanSettings], Any] | None = None,
                 panda: PandaProvider | None = None) -> None:
        self.policy = policy
        self._owns_audit = audit is None
        self.audit = audit if audit is not None else AuditLog(policy.audit.log,
                                                              fsync=policy.audit.fsync)
        self.topics = topics if topics is not None else Topics()
        self.panda = panda if panda is not None else make_provider(policy.panda)
        self._open_bus = can_bus_factory if can_bus_factory is not None else open_bus
        self._bus: Any = None
        self._issued: list[Capability] = []
        self._lock = threading.Lock()
        self._closed = False

    # -- granting -------------------------------------------------------------------------------

    def grant(self, plugin: str) -> Capabilities:
        """Every capability ``plugin`` holds under the policy, each grant audited."""
        granted: dict[str, Capability] = {}
        for name in CAPABILITIES:
            decision = self.policy.decide(plugin, name)
            if decision.granted:
                cap = self._make(plugin, name)
                self.audit.record(plugin, name, "grant",
                                  {"policy": self.policy.where(decision.line)})
                granted[name] = cap
        return Capabilities(plugin, granted, lambda name: self._denied(plugin, name))

    def request(self, plugin: str, capability: str) -> Capability:
        """One capability for ``plugin``, or CapabilityDenied (audited) when not granted."""
        decision = self.policy.decide(plugin, capability)
        if not decision.granted:
            raise self._denied(plugin, capability)
        cap = self._make(plugin, capability)
        self.audit.record(plugin, capability, "grant",
                          {"policy": self.policy.where(decision.line)})
        return cap

    def _denied(self, plugin: str, capability: str) -> CapabilityDenied:
        decision = self.policy.decide(plugin, capability)
        where = self.policy.where(decision.line)
        self.audit.record(plugin, capability, "deny", {"reason": decision.reason,
                                                       "policy": where})
        return CapabilityDenied(plugin=plugin, capability=capability, policy=where,
                                reason=decision.reason)

    def _make(self, plugin: str, name: str) -> Capability:
        with self._lock:
            if self._closed:
                raise CapabilityDenied(plugin=plugin, capability=name,
                                       policy=self.policy.path, reason="the broker is closed")
            where = self.policy.path
            cap: Capability
            if name == "can.send":
                cap = CanSend(self._can_bus(), self.policy.can, plugin, self.audit, where)
            elif name == "panda.safety":
                cap = PandaSafety(self.panda, self.policy.panda, plugin, self.audit, where)
            else:
                cap = Publisher(name, self.topics[_TOPIC_OF[name]], plugin, self.audit, where)
            self._issued.append(cap)
            return cap

    def _can_bus(self) -> Any:
        if self._bus is None:
            self._bus = self._open_bus(self.policy.can)
        return self._bus

    # -- shutdown -------------------------------------------------------------------------------

    def close(self) -> None:
        """Revoke every capability handed out, shut down the bus the broker opened."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            issued, self._issued = self._issued, []
        for cap in issued:
            cap.revoke()
        if self._bus is not None:
            self._bus.shutdown()
        self._bus = None
        if self._owns_audit:
            self.audit.close()

    def __enter__(self) -> "CapabilityBroker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
