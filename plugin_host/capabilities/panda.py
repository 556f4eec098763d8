"""``panda.safety``: the panda's safety-mode controller.

A panda is the interface box between the computer and the car's CAN buses; its firmware
enforces a *safety mode* (which messages may be sent, within which limits). The capability
lets a control plugin select the mode, but only one of the modes the policy lists in
``[panda] allowed_modes`` (default: ``silent``, ``no_output``); ``all_output``, which disables
the firmware's checks, is possible only when listed explicitly.

The only provider built in is :class:`SimulatedPanda`: it drives no hardware, remembers the
mode and its history, and says so in its ``repr`` and its ``simulated`` attribute. A hardware
provider implements :class:`PandaProvider`.
"""

from __future__ import annotations

import threading
from typing import Protocol

from ..audit import AuditLog
from ..policy import SAFETY_MODES, PandaSettings
from .base import Capability

__all__ = ["PandaProvider", "SimulatedPanda", "PandaSafety", "make_provider"]


class PandaProvider(Protocol):
    """What a panda provider offers the capability."""

    simulated: bool

    @property
    def safety_mode(self) -> tuple[str, int]: ...

    def set_safety_mode(self, mode: str, param: int = 0) -> None: ...


class SimulatedPanda:
    """A SIMULATED panda: no hardware is touched. Starts in ``silent`` (sends nothing).

    ``history`` lists every ``(mode, param)`` it was set to, for tests and the demo.
    """

    simulated = True

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._mode: tuple[str, int] = ("silent", 0)
        self.history: list[tuple[str, int]] = []

    @property
    def safety_mode(self) -> tuple[str, int]:
        return self._mode

    def set_safety_mode(self, mode: str, param: int = 0) -> None:
        with self._lock:
            self._mode = (mode, param)
            self.history.append(self._mode)

    def __repr__(self) -> str:
        return (f"<SimulatedPanda: simulated, no hardware; safety mode {self._mode[0]!r} "
                f"param {self._mode[1]}>")


def make_provider(settings: PandaSettings) -> PandaProvider:
    if settings.provider == "simulated":
        return SimulatedPanda()
    raise AssertionError(f"unknown panda provider {settings.provider!r}")  # the loader refuses


class PandaSafety(Capability):
    """Sets the panda's safety mode, restricted to the policy's ``allowed_modes``."""

    name = "panda.safety"

    def __init__(self, provider: PandaProvider, settings: PandaSettings, holder: str,
                 audit: AuditLog, policy: str) -> None:
        super().__init__(holder, audit, policy)
        self._provider = provider
        self._allowed = settings.allowed_modes

    @property
    def simulated(self) -> bool:
        """True when no real panda is behind this capability."""
        return bool(self._provider.simulated)

    @property
    def safety_mode(self) -> tuple[str, int]:
        """The current ``(mode, param)``."""
        return self._provider.safety_mode

    @property
    def allowed_modes(self) -> frozenset[str]:
        return self._allowed

    def set_safety_mode(self, mode: str, param: int = 0) -> None:
        """Select a safety mode; one outside ``[panda] allowed_modes`` is denied and audited."""
        if mode not in SAFETY_MODES:
            raise self._bad_argument(f"unknown safety mode {mode!r} (known: "
                                     f"{', '.join(SAFETY_MODES)})")
        if type(param) is not int or not 0 <= param <= 0xFFFF:
            raise self._bad_argument(f"param must be an int in [0, 65535], got {param!r}")
        detail = {"mode": mode, "param": param, "simulated": self.simulated}
        if mode not in self._allowed:
            self._deny(f"safety mode {mode!r} is not in [panda] allowed_modes "
                       f"({', '.join(sorted(self._allowed)) or 'none'})", detail)
        self._use(detail)
        try:
            self._provider.set_safety_mode(mode, param)
        except Exception as exc:
            raise self._fail(detail, exc) from None

    def __repr__(self) -> str:
        what = "simulated panda" if self.simulated else "panda"
        return f"{super().__repr__()[:-1]} ({what})>"
