"""From a policy to the sandbox: one function decides how a policy configures the worker.

:func:`sandbox_config_from_policy` is the only place that turns a
:class:`~plugin_host.policy.Policy` into :class:`~plugin_host.sandbox.SandboxedExecutor`
arguments; :func:`audit_sinks` routes the worker's events into the policy's audit log.

=====================  =============================================================================
SandboxedExecutor      from the policy
=====================  =============================================================================
``requirements``       ``[sandbox] require`` (:meth:`SandboxRequirements.only`): exactly the listed
                       protections; an empty list requires none
``limits``             ``[limits]``: ``memory_mb`` x 2**20 -> ``address_space`` (bytes),
                       ``cpu_seconds`` -> ``cpu_seconds``, ``open_files`` -> ``open_files``,
                       ``call_timeout_ms`` / 1000 -> ``call_timeout`` (seconds), ``cpu`` ->
                       ``cpu`` (``"off"`` -> None); the rest are the :class:`SandboxLimits`
                       defaults (the daemon turns ``"auto"`` off when it runs several cameras)
``backend_plugins``    the allowed ``inference-hardware`` plugins (entry-point names; the worker
                       imports them as trusted code before it confines itself)
``plugin_modules``     the module of each allowed ``model-layer`` plugin's entry point (imported
                       only in the worker, after it is confined; never in the host)
``kernel_overrides``   ``{op: module}`` from each allowed model-layer plugin's ``kernels``: the
                       kernel rule's list (see :func:`plugin_host.sandbox.kernels.accept_kernels`)
=====================  =============================================================================

Trust, audited ops and artifact caps come from the policy too, through its own methods
(``trust_store()``, ``audited_op_pairs(backend)``, ``limits.artifact_limits()``).
Looking up the entry points reads package metadata only: no plugin is imported here.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any, Callable, Mapping, NamedTuple

from ..errors import PluginError
from ..policy import Policy
from ..policy.model import Limits
from . import placement
from .config import SandboxLimits, SandboxRequirements

__all__ = ["SandboxConfig", "sandbox_config_from_policy", "sandbox_limits", "audit_sinks"]

ENTRY_POINT_GROUP = "plugin_host"


class SandboxConfig(NamedTuple):
    """What a policy says about the sandbox worker (unpacks as a 5-tuple)."""

    requirements: SandboxRequirements
    limits: SandboxLimits
    backend_plugins: tuple[str, ...]
    plugin_modules: tuple[str, ...]
    kernel_overrides: Mapping[str, str]

    def executor_kwargs(self) -> dict[str, Any]:
        """The matching keyword arguments of :class:`SandboxedExecutor`."""
        return {"requirements": self.requirements, "limits": self.limits,
                "backend_plugins": self.backend_plugins, "plugin_modules": self.plugin_modules,
                "kernel_overrides": dict(self.kernel_overrides)}


def sandbox_limits(limits: Limits) -> SandboxLimits:
    """The worker's :class:`SandboxLimits` from a policy's ``[limits]``, with units converted."""
    return SandboxLimits(address_space=limits.memory_mb * 2**20, cpu_seconds=limits.cpu_seconds,
                         open_files=limits.open_files,
                         call_timeout=limits.call_timeout_ms / 1000,
                         cpu=None if limits.cpu == placement.OFF else limits.cpu)


def sandbox_config_from_policy(policy: Policy) -> SandboxConfig:
    """``(requirements, limits, backend_plugins, plugin_modules, kernel_overrides)`` for a
    sandbox worker run under ``policy`` (see the module docstring for each mapping).

    Raises PluginError when an allowed model-layer plugin has no installed entry point (or
    several), or its entry point names an object inside a module (``module:attr``: the worker
    registers modules), or two allowed model-layer plugins list the same op in ``kernels``.
    """
    requirements = SandboxRequirements.only(policy.sandbox.require)
    backend_plugins = tuple(r.name for r in policy.allowed_plugins({"inference-hardware"}))
    installed: dict[str, list] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        installed.setdefault(ep.name, []).append(ep)
    modules: list[str] = []
    overrides: dict[str, str] = {}
    owner: dict[str, str] = {}
    for rule in policy.allowed_plugins({"model-layer"}):
        where = policy.where(rule.line)
        found = installed.get(rule.name, [])
        if len(found) != 1:
            raise PluginError(f"policy {where} allows model-layer plugin {rule.name!r}, and "
                              f"{len(found)} installed packages provide the entry point "
                              f"{rule.name!r} in the group {ENTRY_POINT_GROUP!r} (need exactly "
                              f"one)", plugin=rule.name)
        ep = found[0]
        if ep.attr:
            raise PluginError(f"model-layer plugin {rule.name!r} ({where}): its entry point "
                              f"{ep.value!r} names an object in a module; the sandbox worker "
                              f"registers plugin modules, so the entry point must name a "
                              f"module", plugin=rule.name)
        modules.append(ep.module)
        for op in sorted(rule.kernels):
            if op in owner:
                raise PluginError(f"policy {where}: plugins {owner[op]!r} and {rule.name!r} "
                                  f"both list op {op!r} in kernels; one op has one kernel",
                                  plugin=rule.name, op=op)
            owner[op] = rule.name
            overrides[op] = ep.module
    return SandboxConfig(requirements, sandbox_limits(policy.limits), backend_plugins,
                         tuple(dict.fromkeys(modules)), overrides)


def audit_sinks(log: Any) -> dict[str, Callable[..., None]]:
    """``on_audit`` and ``on_event`` for :class:`SandboxedExecutor` that append each worker
    event to ``log`` (a :class:`~plugin_host.audit.AuditLog`) as a sandbox record:
    ``plugin`` and ``capability`` are ``"sandbox"``, ``action`` one of
    :data:`~plugin_host.audit.SANDBOX_ACTIONS` (``tripwire`` for the audit hook's events).
    Use as ``SandboxedExecutor(..., **audit_sinks(log))``."""

    def on_audit(record: dict[str, Any]) -> None:
        log.record("sandbox", "sandbox", "tripwire", record)

    def on_event(kind: str, detail: dict[str, Any]) -> None:
        log.record("sandbox", "sandbox", kind, detail)

    return {"on_audit": on_audit, "on_event": on_event}
