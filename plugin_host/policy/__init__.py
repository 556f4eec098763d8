"""Policy files: what an integrator allows the host and its plugins to do.

A policy is a TOML file (see ``policies/demo.toml`` and README "Policy files"). Load it with
:func:`load_policy`, which refuses a malformed or contradictory file with one
:class:`~plugin_host.errors.PolicyError` listing every problem (file, line, key). The loaded
:class:`Policy` answers the host's questions: which plugins may be imported, which
capabilities each holds, which artifacts may load and on what terms
(:func:`load_allowed_artifact`), which atomic or
custom-kernel ops are audited, which sandbox protections are required, and the limits.
"""

from .acceptance import require_acceptance
from .artifacts import load_allowed_artifact
from .load import MAX_POLICY_BYTES, load_policy, parse_policy
from .locate import Locator, format_key
from .model import (CAN_INTERFACES, CAPABILITIES, FORMAT, HOST_KINDS, KINDS, PANDA_PROVIDERS,
                    PROTECTIONS, ROLES, SAFETY_MODES, SANDBOX_FORBIDDEN, SANDBOXED_KINDS,
                    ArtifactRule, AuditedOp, AuditSettings, CameraSettings, CanSettings,
                    Decision, DenyRules, Limits, PandaSettings, PluginRule, Policy, SandboxRequirements, TrustKey,
                    TrustPolicy, expand_path)

__all__ = [
    "load_policy", "parse_policy", "load_allowed_artifact", "require_acceptance", "MAX_POLICY_BYTES", "Locator", "format_key", "Policy",
    "PluginRule", "ArtifactRule", "AuditedOp", "AuditSettings", "TrustKey", "TrustPolicy",
    "SandboxRequirements", "Limits", "DenyRules", "CanSettings", "CameraSettings",
    "PandaSettings", "Decision",
    "expand_path", "FORMAT", "KINDS", "SANDBOXED_KINDS", "HOST_KINDS", "CAPABILITIES",
    "SANDBOX_FORBIDDEN", "PROTECTIONS", "ROLES", "CAN_INTERFACES", "PANDA_PROVIDERS",
    "SAFETY_MODES",
]
