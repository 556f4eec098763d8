"""What a loaded policy says: plain frozen dataclasses and the decisions made from them.

A :class:`Policy` is produced only by :func:`plugin_host.policy.load_policy` (or
``parse_policy``), which has already refused every malformed or contradictory file, so the
objects here need no validation of their own. Every rule keeps the ``line`` it came from (and
an entry of an array of tables its ``index`` there), so a decision can say which rule made it.

The authority rules, in one place:

- **default deny**: a plugin not listed in ``[[plugin]]`` is never imported; a capability not
  in a plugin's ``capabilities`` is never granted;
- **deny beats allow**: a plugin named in ``[deny] plugins`` is never imported even when listed;
  a capability in ``[deny] capabilities`` or in the plugin's own ``deny`` is never granted even
  when listed in its ``capabilities``;
- **sandboxed kinds** (``model-layer``, ``inference-hardware``: their code runs in the sandbox
  worker) can never hold ``can.send``, ``panda.safety`` or ``control.publish``; a policy that
  grants one is refused at load, so such a :class:`Policy` cannot exist.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from ..frames.rgb import RgbFormat

__all__ = [
    "FORMAT", "KINDS", "SANDBOXED_KINDS", "HOST_KINDS", "CAPABILITIES", "SANDBOX_FORBIDDEN",
    "PROTECTIONS", "ROLES", "CAN_INTERFACES", "PANDA_PROVIDERS", "SAFETY_MODES",
    "DEFAULT_SAFETY_MODES", "AuditSettings", "TrustKey", "TrustPolicy", "FixedInput",
    "ImageInput", "ArtifactRule", "PluginRule", "AuditedOp", "SandboxRequirements", "Limits",
    "DenyRules", "CanSettings", "PandaSettings", "CameraSettings", "DEFAULT_MAX_SKEW_MS",
    "Decision", "Policy", "expand_path", "freeze_table",
]

#: The policy file format this host reads (the top-level ``format`` key).
FORMAT = 1

#: Plugin kinds. The kind decides which hooks of a plugin are called and where it runs.
KINDS = ("camera", "inference-hardware", "model-layer", "sink", "control")

#: Kinds whose code runs in the sandbox worker (never in the host process).
SANDBOXED_KINDS = frozenset({"model-layer", "inference-hardware"})

#: Kinds whose code runs in the host process.
HOST_KINDS = frozenset(KINDS) - SANDBOXED_KINDS

#: Every capability the broker can hand out.
CAPABILITIES = ("can.send", "panda.safety", "control.publish", "model.publish", "camera.publish")

#: Capabilities a sandboxed kind can never hold, whatever the policy says.
SANDBOX_FORBIDDEN = frozenset({"can.send", "panda.safety", "control.publish"})

#: Protections of the sandbox worker a policy can require (``[sandbox] require``).
PROTECTIONS = ("seccomp", "landlock", "netns", "no_new_privs", "uid", "rlimits")

#: Roles a trusted key can hold. ``artifact``: its signatures on artifacts count;
#: ``acceptance``: its signatures on acceptance records count (``plugin-host accept``).
ROLES = ("artifact", "acceptance")

#: python-can interfaces the ``can.send`` capability may use.
CAN_INTERFACES = ("virtual", "socketcan")

#: Providers of the ``panda.safety`` capability. Only a simulated panda is built in.
PANDA_PROVIDERS = ("simulated",)

#: Safety modes a panda can be put in (openpilot's safety model names, snake_case).
#: ``all_output`` disables the panda's safety checks; it is allowed only when listed.
SAFETY_MODES = ("silent", "no_output", "elm327", "toyota", "honda_nidec", "honda_bosch",
                "hyundai", "gm", "ford", "tesla", "all_output")

#: Safety modes allowed when ``[panda] allowed_modes`` is absent: the ones that send nothing.
DEFAULT_SAFETY_MODES = ("silent", "no_output")


def freeze_table(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    """A read-only deep copy of a TOML table (tables become read-only mappings, lists tuples)."""
    def freeze(value: Any) -> Any:
        if isinstance(value, Mapping):
            return MappingProxyType({k: freeze(v) for k, v in value.items()})
        if isinstance(value, list):
            return tuple(freeze(v) for v in value)
        return value
    return freeze(mapping)


@dataclass(frozen=True)
class AuditSettings:
    """``[audit]``: where the JSONL audit log goes and whether every line is fsynced."""

    log: Path
    fsync: bool = False
    line: int = 0


@dataclass(frozen=True)
class TrustKey:
    """One ``[[trust.key]]``: a public key file trusted for ``roles``."""

    file: Path
    roles: frozenset[str]
    label: str = ""
    line: int = 0
    index: int = 0


@dataclass(frozen=True)
class TrustPolicy:
    """``[trust]``: keys, revoked key ids, the default and per-artifact k-of-n thresholds."""

    keys: tuple[TrustKey, ...] = ()
    revoked: frozenset[str] = frozenset()
    default_threshold: int = 1
    thresholds: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))

    def trust_store(self):
        """A :class:`~plugin_host.artifacts.TrustStore` holding exactly these keys and rules.

        Reads every key file now; a missing or malformed one raises ``KeyFileError``.
        """
        from ..artifacts import TrustStore

        store = TrustStore(default_threshold=self.default_threshold)
        for key in self.keys:
            store.add_key_file(key.file, roles=key.roles)
        for kid in sorted(self.revoked):
            store.revoke(kid)
        for name, k in self.thresholds.items():
            store.set_threshold(name, k)
        return store


@dataclass(frozen=True)
class FixedInput:
    """One value of an ``[[artifact]]``'s ``fixed_inputs``: what the daemon feeds a model input
    no camera makes, checked against the input's shape and dtype when the artifact loads."""

    #: read-only; bool (TOML booleans), int64 (integers) or float64 (any float among them)
    value: np.ndarray
    line: int = 0


@dataclass(frozen=True)
class ImageInput:
    """One value of an ``[[artifact]]``'s ``image_inputs``: an input the daemon makes as a
    colour image of each frame, in this format (checked against the input when the artifact
    loads)."""

    format: RgbFormat
    line: int = 0


@dataclass(frozen=True)
class ArtifactRule:
    """One ``[[artifact]]``: an artifact the host may load, and on what terms."""

    name: str
    file: Path
    backend: str
    min_version: tuple[int, int, int] | None = None
    acceptance_required: bool = True
    line: int = 0
    index: int = 0
    #: the acceptance record's file (``acceptance``); None: ``<file>.accept-<backend>``
    acceptance: Path | None = None
    #: ``fixed_inputs``: input name -> the value the daemon feeds it on every frame
    fixed_inputs: Mapping[str, FixedInput] = field(default_factory=lambda: MappingProxyType({}))
    #: ``camera_inputs``: image input name -> the camera whose frames make it, in the file's
    #: order; empty: the model's one image input, run on each camera of ``[cameras] use``
    camera_inputs: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    camera_inputs_line: int = 0
    #: ``image_inputs``: image input name -> the colour image made of it (the others that
    #: frames make are two-frame YUV stacks)
    image_inputs: Mapping[str, ImageInput] = field(default_factory=lambda: MappingProxyType({}))

    def acceptance_record(self, backend: str | None = None, file: Any = None) -> Path:
        """Where the acceptance record for ``backend`` (default: the rule's) of the artifact
        ``file`` (default: the rule's) is: ``acceptance`` when set and both are the rule's,
        else ``<file>.accept-<backend>`` beside the artifact."""
        backend = self.backend if backend is None else backend
        same = backend == self.backend and (file is None or Path(file) == Path(self.file))
        if self.acceptance is not None and same:
            return self.acceptance
        return Path(f"{os.fspath(self.file if file is None else file)}.accept-{backend}")


@dataclass(frozen=True)
class PluginRule:
    """One ``[[plugin]]``: a plugin the host may import, its kind, grants and configuration.

    ``name`` is the plugin's entry-point name in the group ``plugin_host``. ``capabilities`` is
    what the policy lists; what the plugin actually gets is :meth:`Policy.granted` (deny beats
    allow). ``kernels`` are the ops a model-layer plugin may provide kernels for. ``config`` is
    the free ``[plugin.config]`` table, read-only.
    """

    name: str
    kind: str
    capabilities: frozenset[str] = frozenset()
    deny: frozenset[str] = frozenset()
    kernels: frozenset[str] = frozenset()
    config: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    line: int = 0
    index: int = 0

    @property
    def sandboxed(self) -> bool:
        return self.kind in SANDBOXED_KINDS


@dataclass(frozen=True)
class AuditedOp:
    """One ``[[audited_op]]``: an atomic or custom-kernel op whose audit is on record.

    ``audit`` says where the record is (a document, a ticket); ``backends`` restricts the audit
    to those backends (empty: every backend).
    """

    op: str
    version: int
    audit: str
    backends: frozenset[str] = frozenset()
    line: int = 0
    index: int = 0


@dataclass(frozen=True)
class SandboxRequirements:
    """``[sandbox]``: protections the worker must have in force, or the host refuses to start."""

    require: frozenset[str] = frozenset()
    line: int = 0

    def missing(self, in_force: "set[str] | frozenset[str]") -> list[str]:
        """The required protections not in ``in_force``, in :data:`PROTECTIONS` order."""
        return [p for p in PROTECTIONS if p in self.require and p not in in_force]


@dataclass(frozen=True)
class Limits:
    """``[limits]``: resource limits of the sandbox worker and size caps.

    ``memory_mb`` (address space), ``cpu_seconds`` (CPU time per worker life), ``open_files``,
    ``call_timeout_ms`` (one inference call), ``artifact_max_mb`` (largest artifact file),
    ``cpu`` (co-location, ``plugin_host/sandbox/placement.py``: the CPU number that the
    worker's main thread and the threads calling it share; ``"auto"``, the default: the last
    CPU the host may use, except in a daemon that runs several cameras, where placement is
    left to the kernel; ``"off"``: always left to the kernel).
    """

    memory_mb: int = 4096
    cpu_seconds: int = 86400
    open_files: int = 64
    call_timeout_ms: float = 1000.0
    artifact_max_mb: int = 1024
    cpu: int | str = "auto"
    line: int = 0

    def artifact_limits(self):
        """The artifact reader's size caps with this policy's file cap."""
        from abi.artifact import Limits as ArtifactLimits

        return ArtifactLimits(max_file_bytes=self.artifact_max_mb * 2**20)


@dataclass(frozen=True)
class DenyRules:
    """``[deny]``: plugins never imported and capabilities never granted, whatever else says."""

    plugins: frozenset[str] = frozenset()
    capabilities: frozenset[str] = frozenset()
    line: int = 0


@dataclass(frozen=True)
class CanSettings:
    """``[can]``: the python-can bus behind ``can.send``."""

    interface: str = "virtual"
    channel: str = "plugin-host"
    bitrate: int | None = None
    line: int = 0


@dataclass(frozen=True)
class PandaSettings:
    """``[panda]``: the provider behind ``panda.safety`` and the modes it may be set to."""

    provider: str = "simulated"
    allowed_modes: frozenset[str] = frozenset(DEFAULT_SAFETY_MODES)
    line: int = 0


#: ``[cameras] max_skew_ms`` when absent: openpilot's limit for frames of two cameras to
#: count as one moment (the same value as :data:`plugin_host.frames.sync.DEFAULT_MAX_SKEW_MS`).
DEFAULT_MAX_SKEW_MS = 10.0


def stall_seconds(stall_ms: float | None, rate: float | None) -> float:
    """How long a camera may go without a frame before it is reported stalled: ``stall_ms``
    when the policy sets it, else 1 s or five frame periods at ``rate`` (Hz), the longer."""
    if stall_ms is not None:
        return stall_ms / 1e3
    return max(1.0, 5.0 / rate) if rate else 1.0


@dataclass(frozen=True)
class CameraSettings:
    """``[cameras]``: which cameras the daemon runs the model on, and how they are matched.

    ``use``: camera names (as the camera plugins name them), in order; empty: the one camera
    the allowed camera plugins provide. ``max_skew_ms``: frames of the listed cameras whose
    ``timestamp_sof`` lie within this of each other form one matched set; a frame that cannot
    be matched is dropped and counted. ``stall_ms``: a camera that produces no frame for this
    long is reported stalled (None: :func:`stall_seconds`'s default from its rate).
    ``use_line``: where ``use`` is (for messages).
    """

    use: tuple[str, ...] = ()
    max_skew_ms: float = DEFAULT_MAX_SKEW_MS
    stall_ms: float | None = None
    line: int = 0
    use_line: int = 0


@dataclass(frozen=True)
class Decision:
    """Whether a plugin may hold a capability, and the rule that decided (for messages)."""

    granted: bool
    reason: str
    line: int = 0


@dataclass(frozen=True)
class Policy:
    """A checked policy file. Build it with :func:`plugin_host.policy.load_policy`."""

    path: str
    audit: AuditSettings
    trust: TrustPolicy = TrustPolicy()
    artifacts: tuple[ArtifactRule, ...] = ()
    plugins: tuple[PluginRule, ...] = ()
    audited_ops: tuple[AuditedOp, ...] = ()
    sandbox: SandboxRequirements = SandboxRequirements()
    limits: Limits = Limits()
    deny: DenyRules = DenyRules()
    can: CanSettings = CanSettings()
    panda: PandaSettings = PandaSettings()
    cameras: CameraSettings = CameraSettings()
    format: int = FORMAT

    # -- plugins ------------------------------------------------------------------------------

    def plugin(self, name: str) -> PluginRule | None:
        """The ``[[plugin]]`` rule named ``name`` (allowed or not), or None."""
        for rule in self.plugins:
            if rule.name == name:
                return rule
        return None

    def is_allowed(self, name: str) -> bool:
        """True when the plugin ``name`` may be imported: listed, and not in ``[deny] plugins``."""
        return self.plugin(name) is not None and name not in self.deny.plugins

    def allowed_plugins(self, kinds: "set[str] | frozenset[str] | None" = None
                        ) -> tuple[PluginRule, ...]:
        """The plugins that may be imported, in file order; only ``kinds`` when given."""
        return tuple(r for r in self.plugins if r.name not in self.deny.plugins
                     and (kinds is None or r.kind in kinds))

    # -- capabilities ---------------------------------------------------------------------------

    def decide(self, plugin: str, capability: str) -> Decision:
        """May ``plugin`` hold ``capability``? Default deny; deny beats allow."""
        rule = self.plugin(plugin)
        if plugin in self.deny.plugins:
            return Decision(False, "the plugin is listed in [deny] plugins", self.deny.line)
        if rule is None:
            return Decision(False, "the plugin is not listed in [[plugin]] (default deny)")
        if capability not in CAPABILITIES:
            return Decision(False, f"there is no capability called {capability!r}", rule.line)
        if rule.sandboxed and capability in SANDBOX_FORBIDDEN:  # unreachable from a loaded file
            return Decision(False, f"a {rule.kind} plugin can never hold it", rule.line)
        if capability in self.deny.capabilities:
            return Decision(False, "it is listed in [deny] capabilities", self.deny.line)
        if capability in rule.deny:
            return Decision(False, "it is in the plugin's deny list", rule.line)
        if capability not in rule.capabilities:
            return Decision(False, "it is not in the plugin's capabilities (default deny)",
                            rule.line)
        return Decision(True, "granted by its [[plugin]] entry", rule.line)

    def granted(self, plugin: str) -> frozenset[str]:
        """Every capability ``plugin`` holds."""
        return frozenset(c for c in CAPABILITIES if self.decide(plugin, c).granted)

    def where(self, line: int = 0) -> str:
        """``FILE:LINE`` (or just the file) for messages that cite a rule."""
        return f"{self.path}:{line}" if line else self.path

    # -- artifacts ------------------------------------------------------------------------------

    def artifact(self, name: str) -> ArtifactRule | None:
        for rule in self.artifacts:
            if rule.name == name:
                return rule
        return None

    def call_timeout_problem(self, artifact: str, worst_ms: float):
        """The PolicyProblem when ``[limits] call_timeout_ms`` is below ``worst_ms``, the
        declared worst-case latency of ``artifact`` (every call the artifact allows could be
        cut off and its worker restarted), else None. The daemon refuses it at load,
        ``policy check --check-files`` reports it."""
        from ..errors import PolicyProblem

        timeout = self.limits.call_timeout_ms
        if timeout >= worst_ms:
            return None
        return PolicyProblem(self.path, self.limits.line, "limits.call_timeout_ms",
                             f"{timeout:g} ms is below the declared worst-case latency of "
                             f"artifact {artifact!r} ({worst_ms:g} ms): calls the artifact "
                             f"allows would be cut off and the worker restarted")

    def audited_op_pairs(self, backend: str | None = None) -> frozenset[tuple[str, int]]:
        """``(op, version)`` pairs with a recorded audit (for ``load_verified``'s
        ``audited_ops``); restricted to audits valid on ``backend`` when given."""
        return frozenset((a.op, a.version) for a in self.audited_ops
                         if backend is None or not a.backends or backend in a.backends)

    def trust_store(self):
        """The trust store this policy describes (reads the key files now)."""
        return self.trust.trust_store()


def expand_path(text: str, *, policy_dir: Path, state_dir: Path | None = None) -> Path:
    """A path from a policy file: ``${STATE_DIR}`` and ``${POLICY_DIR}`` expanded, ``~`` too,
    and a relative result taken relative to the policy file's directory.

    ``${STATE_DIR}`` is the host's state directory (``$XDG_STATE_HOME/plugin-host``, else
    ``~/.local/state/plugin-host``). No other variable is expanded, so a policy means the same
    whatever the environment holds; the loader refuses any other ``${...}``.
    """
    if state_dir is None:
        from ..artifacts.rollback import default_state_dir

        state_dir = default_state_dir()
    text = text.replace("${STATE_DIR}", os.fspath(state_dir))
    text = text.replace("${POLICY_DIR}", os.fspath(policy_dir))
    path = Path(os.path.expanduser(text))
    return path if path.is_absolute() else policy_dir / path
