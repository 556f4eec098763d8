"""An example control plugin: the model's plan in, a steering command out.

Hooks: ``plugin_host_configure`` (keeps its capabilities and settings),
``plugin_host_add_sinks`` (one sink on the model topic), ``plugin_host_verify_artifact``
(refuses a model too slow for the control loop), ``plugin_host_unconfigure`` (drops them).
"""

from __future__ import annotations

import numpy as np

from abi.errors import PluginHostError
from plugin_host.hooks import hookimpl

__all__ = ["SteeringPlugin", "plugin", "steer_from_plan"]


def steer_from_plan(plan: np.ndarray, gain: float, max_steer: float) -> float:
    """The steering command for one plan: its first value scaled by ``gain``, clipped."""
    return float(np.clip(gain * float(np.asarray(plan).reshape(-1)[0]), -max_steer, max_steer))


class SteeringPlugin:
    """One instance per host. Settings come from the policy's ``[plugin.config]``."""

    def __init__(self) -> None:
        self.control = None        # the control.publish capability
        self.can = None            # can.send, only if the policy grants it
        self.settings: dict = {}
        self.commands = 0

    @hookimpl
    def plugin_host_configure(self, config):
        caps = config["capabilities"]
        self.control = caps["control.publish"]   # required: CapabilityDenied if not granted
        self.can = caps.get("can.send")          # optional
        self.settings = {"gain": 0.5, "max_steer": 1.0, "can_id": 0x2E4,
                         "max_latency_ms": 50.0, **config["config"]}

    @hookimpl
    def plugin_host_add_sinks(self):
        return [self.on_model_output]

    @hookimpl
    def plugin_host_verify_artifact(self, manifest):
        limit = float(self.settings.get("max_latency_ms", 50.0))
        if manifest.latency_ms > limit:
            raise PluginHostError(f"example_steering: artifact {manifest.name!r} declares "
                                  f"{manifest.latency_ms} ms worst-case latency, above the "
                                  f"control period of {limit} ms")

    @hookimpl
    def plugin_host_unconfigure(self):
        self.control = self.can = None

    def on_model_output(self, message):
        s = self.settings
        steer = steer_from_plan(message.data["plan"], s["gain"], s["max_steer"])
        self.control.publish({"steer": steer, "model_seq": message.seq})
        if self.can is not None:
            raw = int(round(steer / s["max_steer"] * 32767))
            self.can.send(s["can_id"], raw.to_bytes(2, "big", signed=True))
        self.commands += 1


#: The instance the entry point names.
plugin = SteeringPlugin()
