"""``can.send``: sending frames on a CAN bus through python-can.

The bus is the one the policy's ``[can]`` table names: python-can's ``virtual`` interface by
default (an in-process bus: frames sent on one bus object arrive on every other bus object
opened on the same channel, which is how tests and the demo observe them), or ``socketcan`` on
a device. One bus is opened per broker, when the first ``can.send`` is granted, and shut down
with the broker. Classic CAN only: 11-bit or 29-bit identifiers, at most 8 data bytes.
"""

from __future__ import annotations

from typing import Any

from ..audit import AuditLog
from ..policy import CanSettings
from .base import Capability

__all__ = ["CanSend", "open_bus"]


def open_bus(settings: CanSettings) -> Any:
    """A python-can bus for ``settings`` (imported here: only a CAN grant needs python-can)."""
    import can

    kwargs: dict[str, Any] = {"interface": settings.interface, "channel": settings.channel}
    if settings.bitrate is not None:
        kwargs["bitrate"] = settings.bitrate
    if settings.interface == "virtual":
        kwargs["receive_own_messages"] = False
    return can.Bus(**kwargs)


class CanSend(Capability):
    """Sends CAN frames on the policy's bus, each one audited."""

    name = "can.send"

    def __init__(self, bus: Any, settings: CanSettings, holder: str, audit: AuditLog,
                 policy: str) -> None:
        super().__init__(holder, audit, policy)
        self._bus = bus
        self._settings = settings

    @property
    def channel(self) -> str:
        return f"{self._settings.interface}:{self._settings.channel}"

    def send(self, arbitration_id: int, data: bytes | bytearray | list[int] = b"", *,
             extended: bool = False, timeout: float | None = None) -> None:
        """Send one frame. ``data`` is at most 8 bytes; ``extended`` selects a 29-bit id."""
        import can

        limit = 0x1FFFFFFF if extended else 0x7FF
        if type(arbitration_id) is not int or not 0 <= arbitration_id <= limit:
            raise self._bad_argument(f"arbitration id must be an int in [0, {limit:#x}], got "
                                     f"{arbitration_id!r}")
        try:
            payload = bytes(data)
        except (TypeError, ValueError):
            raise self._bad_argument(f"data must be bytes, got {type(data).__name__}") from None
        if len(payload) > 8:
            raise self._bad_argument(f"classic CAN carries at most 8 data bytes, got "
                                     f"{len(payload)}")
        detail = {"bus": self.channel, "id": f"{arbitration_id:#x}", "extended": extended,
                  "data": payload.hex()}
        self._use(detail)
        message = can.Message(arbitration_id=arbitration_id, data=payload,
                              is_extended_id=extended)
        try:
            self._bus.send(message, timeout=timeout)
        except can.CanError as exc:
            raise self._fail(detail, exc) from None
