"""Capabilities: objects that let a plugin do one privileged thing, handed out by the broker.

=================== ============================================== ==========================
capability          object                                         what it does
=================== ============================================== ==========================
``can.send``        :class:`CanSend`                               send a frame (python-can)
``panda.safety``    :class:`PandaSafety`                           select the safety mode
``control.publish`` :class:`Publisher` on the ``control`` topic    publish control commands
``model.publish``   :class:`Publisher` on the ``model`` topic      publish model outputs
``camera.publish``  :class:`Publisher` on the ``camera`` topic     publish frames
=================== ============================================== ==========================

Only :class:`CapabilityBroker` makes them, only for what the policy grants; every grant, use
and denial is appended to the audit log (:mod:`plugin_host.audit`).
"""

from .base import Capability
from .broker import Capabilities, CapabilityBroker
from .can import CanSend, open_bus
from .panda import PandaProvider, PandaSafety, SimulatedPanda
from .publish import Publisher

__all__ = ["Capability", "Capabilities", "CapabilityBroker", "CanSend", "open_bus",
           "PandaProvider", "PandaSafety", "SimulatedPanda", "Publisher"]
