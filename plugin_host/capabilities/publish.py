"""``model.publish``, ``control.publish``, ``camera.publish``: publishing on a host topic."""

from __future__ import annotations

from typing import Any

from ..audit import AuditLog
from ..topics import Message, Topic
from .base import Capability

__all__ = ["Publisher"]


class Publisher(Capability):
    """Publishes on one host topic under the holder's name (every message says who sent it)."""

    def __init__(self, name: str, topic: Topic, holder: str, audit: AuditLog,
                 policy: str) -> None:
        super().__init__(holder, audit, policy)
        self.name = name
        self._topic = topic

    @property
    def topic(self) -> str:
        return self._topic.name

    def publish(self, data: Any) -> Message:
        """Publish ``data``; returns the message as delivered (with its ``seq``)."""
        self._use({"topic": self._topic.name, "seq": self._topic.published})
        return self._topic.publish(self.holder, data)
