"""In-host topics: ``model`` (model outputs), ``control`` (control commands), ``camera`` (frames).

A topic delivers every published :class:`Message` to its subscribers, in order. Publishing is
a capability: a plugin publishes only through the ``model.publish``, ``control.publish`` or
``camera.publish`` object the broker handed it (see :mod:`plugin_host.capabilities`), and every
message carries the publishing plugin's name, so a subscriber always knows who said it.
Subscribing is not a capability: the host subscribes its sinks to the model topic, and host
code may read any topic.

Two ways to subscribe:

- ``topic.subscribe(maxlen)`` returns a :class:`Subscriber` queue; ``recv(timeout)`` returns the
  next message or ``None`` on timeout; when the queue is full the oldest message is dropped and
  counted (``dropped``), so a slow reader never blocks a publisher;
- ``topic.connect(callback)`` calls ``callback(message)`` synchronously on publish; an exception
  in one callback is counted and logged and does not stop delivery to the others.

Isolation inside the host process is by construction, not by a boundary: host-side plugins
are trusted code that could reach anything through the interpreter. The boundary is the sandbox
worker, which never holds a topic or a publisher.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["TOPICS", "PUBLISH_CAPABILITY", "Message", "Subscriber", "Connection", "Topic",
           "Topics"]

log = logging.getLogger(__name__)

#: The host's topics and the capability that publishes on each.
PUBLISH_CAPABILITY = {"model": "model.publish", "control": "control.publish",
                      "camera": "camera.publish"}
TOPICS = tuple(PUBLISH_CAPABILITY)


@dataclass(frozen=True)
class Message:
    """One published message: ``seq`` counts from 0 per topic; ``time_ns`` is monotonic."""

    topic: str
    seq: int
    time_ns: int
    publisher: str
    data: Any


class Subscriber:
    """A bounded queue of one topic's messages. ``recv(timeout)`` returns ``None`` on timeout."""

    def __init__(self, topic: str, maxlen: int, unsubscribe: Callable[["Subscriber"], None]
                 ) -> None:
        if maxlen < 1:
            raise ValueError(f"a subscriber queue needs maxlen >= 1, got {maxlen}")
        self.topic = topic
        self.dropped = 0
        self._queue: deque[Message] = deque()
        self._maxlen = maxlen
        self._ready = threading.Condition()
        self._unsubscribe = unsubscribe

    def _deliver(self, message: Message) -> None:
        with self._ready:
            if len(self._queue) >= self._maxlen:
                self._queue.popleft()
                self.dropped += 1
            self._queue.append(message)
            self._ready.notify()

    def recv(self, timeout: float | None = None) -> Message | None:
        """The next message; waits up to ``timeout`` seconds (None: forever, 0: don't wait)."""
        with self._ready:
            if not self._ready.wait_for(lambda: self._queue, timeout):
                return None
            return self._queue.popleft()

    def drain(self) -> list[Message]:
        """Every queued message, without waiting."""
        with self._ready:
            out = list(self._queue)
            self._queue.clear()
            return out

    def close(self) -> None:
        self._unsubscribe(self)

    def __len__(self) -> int:
        return len(self._queue)


class Connection:
    """A callback subscription; ``errors`` counts the exceptions the callback raised."""

    def __init__(self, topic: str, callback: Callable[[Message], Any],
                 unsubscribe: Callable[["Connection"], None]) -> None:
        self.topic, self.callback = topic, callback
        self.errors = 0
        self.last_error: BaseException | None = None
        self._unsubscribe = unsubscribe

    def _deliver(self, message: Message) -> None:
        try:
            self.callback(message)
        except Exception as exc:  # a failing subscriber never stops delivery to the others
            self.errors += 1
            self.last_error = exc
            log.warning("subscriber %r of topic %r failed on message %d: %s",
                        self.callback, self.topic, message.seq, exc)

    def close(self) -> None:
        self._unsubscribe(self)


class Topic:
    """One named topic. Only the host and publisher capabilities call :meth:`publish`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._seq = 0
        self._lock = threading.Lock()
        self._receivers: list[Subscriber | Connection] = []

    def subscribe(self, maxlen: int = 16) -> Subscriber:
        sub = Subscriber(self.name, maxlen, self._remove)
        with self._lock:
            self._receivers.append(sub)
        return sub

    def connect(self, callback: Callable[[Message], Any]) -> Connection:
        conn = Connection(self.name, callback, self._remove)
        with self._lock:
            self._receivers.append(conn)
        return conn

    def _remove(self, receiver: Subscriber | Connection) -> None:
        with self._lock:
            if receiver in self._receivers:
                self._receivers.remove(receiver)

    def publish(self, publisher: str, data: Any) -> Message:
        """Deliver ``data`` from ``publisher`` to every subscriber; returns the message."""
        with self._lock:
            message = Message(self.name, self._seq, time.monotonic_ns(), publisher, data)
            self._seq += 1
            receivers = list(self._receivers)
        for receiver in receivers:
            receiver._deliver(message)
        return message

    @property
    def published(self) -> int:
        """How many messages were published on this topic."""
        return self._seq

    def __repr__(self) -> str:
        return f"Topic({self.name!r}, published={self._seq}, receivers={len(self._receivers)})"


class Topics:
    """The host's topics by name: ``topics["model"]``, ``["control"]``, ``["camera"]``."""

    def __init__(self) -> None:
        self._topics = {name: Topic(name) for name in TOPICS}

    def __getitem__(self, name: str) -> Topic:
        try:
            return self._topics[name]
        except KeyError:
            raise KeyError(f"no topic {name!r}; the host's topics: {', '.join(TOPICS)}") from None

    def __iter__(self):
        return iter(self._topics.values())
