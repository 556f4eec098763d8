"""The base of every capability object: who holds it, where its uses are audited, revocation."""

from __future__ import annotations

from typing import Any, Mapping

from ..audit import AuditLog
from ..errors import CapabilityDenied, CapabilityError

__all__ = ["Capability"]


class Capability:
    """An object that lets one plugin do one thing the policy granted it.

    Made only by :class:`~plugin_host.capabilities.CapabilityBroker` for the plugin named
    ``holder``. Every use is written to the audit log *before* it happens (a use that cannot be
    audited does not happen). After :meth:`revoke` (at shutdown) every use is denied.
    """

    #: The capability's name, e.g. ``"can.send"``.
    name: str = ""

    def __init__(self, holder: str, audit: AuditLog, policy: str) -> None:
        self.holder = holder
        self._audit = audit
        self._policy = policy
        self._revoked = False

    @property
    def revoked(self) -> bool:
        return self._revoked

    def revoke(self) -> None:
        """Deny every later use (audited once)."""
        if not self._revoked:
            self._revoked = True
            self._audit.record(self.holder, self.name, "revoke", {})

    # -- for subclasses -------------------------------------------------------------------------

    def _use(self, detail: Mapping[str, Any]) -> None:
        """Audit one use, or audit a denial and raise if the capability was revoked."""
        if self._revoked:
            self._deny("the capability was revoked (the host is shutting down)", detail)
        self._audit.record(self.holder, self.name, "use", detail)

    def _deny(self, reason: str, detail: Mapping[str, Any]) -> None:
        self._audit.record(self.holder, self.name, "deny", {**detail, "reason": reason})
        raise CapabilityDenied(plugin=self.holder, capability=self.name, policy=self._policy,
                               reason=reason)

    def _fail(self, detail: Mapping[str, Any], exc: BaseException) -> CapabilityError:
        """Audit a use that failed after it was recorded; returns the error to raise."""
        self._audit.record(self.holder, self.name, "fail", {**detail, "error": str(exc)})
        return CapabilityError(f"{self.name} for plugin {self.holder!r} failed: {exc}",
                               plugin=self.holder, capability=self.name)

    def _bad_argument(self, message: str) -> CapabilityError:
        return CapabilityError(f"{self.name} (plugin {self.holder!r}): {message}",
                               plugin=self.holder, capability=self.name)

    def __repr__(self) -> str:
        state = ", revoked" if self._revoked else ""
        return f"<{type(self).__name__} {self.name!r} held by {self.holder!r}{state}>"
