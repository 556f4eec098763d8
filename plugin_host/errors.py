"""Errors of the host: the project's one error tree (see ``abi.errors``) plus the host's branches.

Import errors from here in host code; plugin authors may import the same classes from
``abi.errors`` without depending on the host.
"""

from typing import Any, Sequence

from abi.errors import (  # noqa: F401  (re-exported)
    ABIError,
    ArtifactError,
    ArtifactFormatError,
    BackendError,
    ContractError,
    DomainError,
    DTypeError,
    GraphError,
    IncompatibleArtifactError,
    IndexRangeError,
    OpError,
    PluginHostError,
    ShapeError,
    TensorHashError,
)

__all__ = [
    "ABIError",
    "BackendError",
    "ContractError",
    "DomainError",
    "DTypeError",
    "GraphError",
    "IndexRangeError",
    "OpError",
    "PluginError",
    "ModelImportError",
    "ModelFileError",
    "UnsupportedModelError",
    "PluginHostError",
    # policy and capabilities
    "ArtifactNotAllowedError",
    "AuditLogError",
    "CapabilityDenied",
    "CapabilityError",
    "PolicyError",
    "PolicyProblem",
    "ShapeError",
    "UsageError",
    # artifacts (the format-level ones come from abi.errors)
    "ArtifactError",
    "ArtifactFormatError",
    "ExpiredArtifactError",
    "GoldenMismatchError",
    "IncompatibleArtifactError",
    "AcceptanceError",
    "AcceptanceFailedError",
    "AcceptanceMismatchError",
    "AcceptanceRecordError",
    "KeyFileError",
    "RevokedKeyError",
    "RollbackError",
    "SignatureError",
    "StateFileError",
    "TensorHashError",
    "ThresholdError",
    "UnauditedOpError",
    "UntrustedKeyError",
    # frames and cameras
    "CameraConfigError",
    "CameraError",
    "FrameError",
    "FrameFormatError",
    "FrameOverwrittenError",
    "LeaseError",
    "LeaseReleasedError",
    "PoolClosedError",
    "ReplayFormatError",
    # the sandbox worker
    "ProtectionUnavailableError",
    "SandboxError",
    "SandboxProtocolError",
    "WorkerCallError",
    "WorkerDiedError",
    "WorkerTimeoutError",
]


class UsageError(PluginHostError):
    """The command line or an API was used wrongly (bad flag, missing file)."""


class PluginError(PluginHostError):
    """A plugin is missing, misbehaves, or conflicts with another (e.g. two backends, one name)."""


class ModelImportError(PluginHostError, ValueError):
    """A foreign model (an ONNX file) cannot be imported; ``node``/``op`` name the culprit,
    ``detail`` is the message without them."""

    def __init__(self, message: str, *, node: str | None = None, op: str | None = None,
                 **context: Any) -> None:
        where = f"node {node!r} ({op}): " if node is not None else (f"{op}: " if op else "")
        super().__init__(where + message, node=node, op=op, **context)
        self.node, self.op, self.detail = node, op, message


class UnsupportedModelError(ModelImportError):
    """The model uses an op, attribute, dtype or construct the importer does not map."""


class ModelFileError(ModelImportError):
    """The model file is malformed, too large, or refers to data outside its folder."""


# --- policy and capabilities -------------------------------------------------------------------


class PolicyProblem:
    """One problem in a policy file: where it is (file, line, key path) and what is wrong.

    ``key`` is the TOML key path as a string (``plugin[1].capabilities``; ``""`` for the file
    itself). ``str()`` is the one line ``FILE:LINE: KEY: message`` that ``policy check`` prints.
    """

    __slots__ = ("file", "line", "key", "message")

    def __init__(self, file: str, line: int, key: str, message: str) -> None:
        self.file, self.line, self.key, self.message = file, line, key, message

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.key}: {self.message}" if self.key else f"{where}: {self.message}"

    def __repr__(self) -> str:
        return f"PolicyProblem({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, PolicyProblem) and (self.file, self.line, self.key, self.message)
                == (other.file, other.line, other.key, other.message))

    def __hash__(self) -> int:
        return hash((self.file, self.line, self.key, self.message))


class PolicyError(PluginHostError, ValueError):
    """A policy file was refused; ``problems`` lists every problem found (all at once).

    Each problem names the file, the line and the key. ``str()`` is one line: the problem
    itself when there is one, else a count followed by every problem joined with ``"; "``.
    """

    def __init__(self, problems: Sequence[PolicyProblem], *, path: str | None = None) -> None:
        self.problems = list(problems)
        self.path = path if path is not None else (self.problems[0].file if self.problems
                                                    else None)
        if len(self.problems) == 1:
            message = str(self.problems[0])
        else:
            message = (f"{len(self.problems)} problems in policy {self.path}: "
                       + "; ".join(str(p) for p in self.problems))
        super().__init__(message, path=self.path, problems=self.problems)


class CapabilityError(PluginHostError):
    """A capability could not be used: a bad argument, a closed capability, a bus failure."""

    def __init__(self, message: str, *, plugin: str | None = None,
                 capability: str | None = None, **context: Any) -> None:
        super().__init__(message, plugin=plugin, capability=capability, **context)
        self.plugin, self.capability = plugin, capability


class CapabilityDenied(CapabilityError, PermissionError):
    """A plugin used (or asked for) a capability its policy does not grant it.

    ``plugin``, ``capability`` and ``policy`` (the policy file, with the line of the rule that
    decided when there is one) say who, what and by whose rule; ``reason`` says why.
    """

    def __init__(self, *, plugin: str, capability: str, policy: str, reason: str) -> None:
        message = (f"plugin {plugin!r} may not use {capability!r} (policy {policy}): {reason}")
        super().__init__(message, plugin=plugin, capability=capability, policy=policy,
                         reason=reason)
        self.policy, self.reason = policy, reason


class AuditLogError(PluginHostError):
    """The audit log cannot be written; the action it would have recorded is refused."""


class ArtifactNotAllowedError(ArtifactError):
    """The policy does not allow this artifact: its name is not an ``[[artifact]]``, the file
    holds another artifact than the rule names, or its version is below ``min_version``."""


# --- artifacts: authority ----------------------------------------------------------------------
# The format-level artifact errors (ArtifactFormatError, TensorHashError,
# IncompatibleArtifactError) live in abi.errors and are re-exported above.


class SignatureError(ArtifactError):
    """A signature by a trusted key does not verify over the manifest bytes."""


class UntrustedKeyError(ArtifactError):
    """A signature is by a key the trust store does not hold (or holds without the signer role)."""


class RevokedKeyError(ArtifactError):
    """A signature is by a key the trust store lists as revoked."""


class ThresholdError(ArtifactError):
    """Fewer valid signatures from trusted keys than the artifact's k-of-n threshold.

    ``required`` (k), ``trusted`` (n, the trusted signer keys) and ``valid`` (the key ids that
    signed) say by how much.
    """


class UnauditedOpError(ArtifactError):
    """The artifact uses an op marked atomic in the op table, and no audit is recorded for it."""


class ExpiredArtifactError(ArtifactError):
    """The artifact's expiry time has passed."""


class RollbackError(ArtifactError):
    """An older version than one already accepted for the same artifact name (or the same
    version with different content)."""


class StateFileError(PluginHostError):
    """The persisted rollback state is unreadable or corrupt; it is never silently reset."""


class KeyFileError(PluginHostError):
    """A key file is missing, malformed, not Ed25519, or (a private key) readable by others."""


class GoldenMismatchError(ArtifactError):
    """A backend's outputs on the artifact's golden inputs differ beyond the declared tolerance."""


class AcceptanceError(ArtifactError):
    """An artifact has no valid acceptance record for a backend (see the subclasses; a record
    signed by an untrusted or revoked key, or with a bad signature, raises UntrustedKeyError,
    RevokedKeyError or SignatureError). ``path`` is the record, ``artifact`` and ``backend``
    say for what."""


class AcceptanceRecordError(AcceptanceError):
    """An acceptance record file is missing, over its size cap, or malformed (not canonical
    msgpack, wrong schema); ``where`` names the part refused."""


class AcceptanceMismatchError(AcceptanceError):
    """A valid acceptance record for something else: another artifact (digest, name, version),
    another backend, or another host major version. ``field``, ``expected`` and ``got`` say
    what differs."""


class AcceptanceFailedError(AcceptanceError):
    """Acceptance failed: a golden output beyond its tolerance or the latency over the budget
    (raised by the run, and by a record that says it failed)."""


# --- the sandbox worker ------------------------------------------------------------------------


class SandboxError(PluginHostError):
    """The sandbox worker could not be started or failed while serving (see the subclasses)."""


class ProtectionUnavailableError(SandboxError):
    """A protection the sandbox requirements name is not in force, so the worker was refused
    before any plugin code ran in it. ``protection`` names it (``seccomp``, ``landlock``,
    ``netns``, ``no_new_privs``, ``uid``, ``rlimits``); ``missing`` maps every
    missing protection to the reason."""

    def __init__(self, message: str, *, protection: str, missing: dict | None = None,
                 **context) -> None:
        super().__init__(message, protection=protection, missing=dict(missing or {}), **context)
        self.protection = protection
        self.missing = dict(missing or {})


class WorkerDiedError(SandboxError):
    """The worker died (crash, signal, resource limit) before answering a call.

    ``pid``, ``returncode`` (negative: the signal number) and ``during`` (what the host was
    waiting for) say what happened. The host has restarted the worker (or will at the next
    call) and reset the recurrent state with reason ``"worker restart"``.
    """

    def __init__(self, message: str, *, pid: int | None = None, returncode: int | None = None,
                 during: str | None = None, **context) -> None:
        super().__init__(message, pid=pid, returncode=returncode, during=during, **context)
        self.pid, self.returncode, self.during = pid, returncode, during


class WorkerTimeoutError(WorkerDiedError):
    """A call took longer than the per-call timeout; the worker was killed and restarted."""


class SandboxProtocolError(SandboxError):
    """A malformed control message: the worker sent one (it is then killed and restarted), or
    the worker refused one the host sent."""


class WorkerCallError(SandboxError):
    """Code in the worker (a plugin's kernel) raised an exception outside the project's error
    tree. ``remote_type`` is its class name, ``errno`` its errno for an OSError (else None),
    ``remote_traceback`` the worker's traceback text (untrusted, length-capped)."""

    def __init__(self, message: str, *, remote_type: str, errno: int | None = None,
                 remote_traceback: str = "", **context) -> None:
        super().__init__(message, remote_type=remote_type, errno=errno, **context)
        self.remote_type, self.errno, self.remote_traceback = remote_type, errno, remote_traceback


# --- frames and cameras ------------------------------------------------------------------------


class FrameError(PluginHostError):
    """The frame path refused something: a lease misused, a frame overwritten, a bad layout,
    a camera that cannot start, a hostile recording (see the subclasses)."""


class FrameFormatError(FrameError, ValueError):
    """Frame metadata or a frame layout is malformed: unknown format, sizes out of range,
    strides shorter than a row, planes overlapping or outside the buffer, wrong types."""


class LeaseError(FrameError):
    """A lease on a frame buffer was used against the ownership rules."""


class LeaseReleasedError(LeaseError):
    """A lease was used or released after it was released (``operation`` says which:
    ``"release"`` for a double release, else the method that was called). ``camera``,
    ``frame_id`` and ``slot`` name the frame."""

    def __init__(self, message: str, *, operation: str, camera: str | None = None,
                 frame_id: int | None = None, slot: int | None = None) -> None:
        super().__init__(message, operation=operation, camera=camera, frame_id=frame_id,
                         slot=slot)
        self.operation, self.camera, self.frame_id, self.slot = operation, camera, frame_id, slot


class FrameOverwrittenError(FrameError):
    """A frame's buffer was refilled while the frame was in use: the slot's generation id in
    shared memory is no longer the frame's (``expected``: the frame's generation, ``got``: the
    slot's now; ``writing``: the slot was being refilled at the check). The bytes read from it
    may be a mix of two frames and must be discarded."""

    def __init__(self, message: str, *, camera: str | None = None, frame_id: int | None = None,
                 slot: int | None = None, expected: int | None = None, got: int | None = None,
                 writing: bool = False) -> None:
        super().__init__(message, camera=camera, frame_id=frame_id, slot=slot,
                         expected=expected, got=got, writing=writing)
        self.camera, self.frame_id, self.slot = camera, frame_id, slot
        self.expected, self.got, self.writing = expected, got, writing


class PoolClosedError(FrameError):
    """A frame pool was used after it was closed (a camera stopped or restarted)."""


class CameraError(FrameError):
    """A camera failed to start, produce or stop; ``camera`` names it."""

    def __init__(self, message: str, *, camera: str | None = None, **context: Any) -> None:
        super().__init__(message, camera=camera, **context)
        self.camera = camera


class CameraConfigError(CameraError, ValueError):
    """A camera plugin's configuration (its ``[plugin.config]`` table or command-line
    options) is invalid: an unknown key, a wrong type, a value out of range."""


class ReplayFormatError(FrameError, ValueError):
    """A recorded-frames file was refused: bad magic or version, a size over its cap, a
    non-canonical or malformed metadata map, a record that disagrees with the file's layout,
    frame ids or timestamps out of order, a checksum mismatch, a truncated or trailing record.
    ``path`` is the file, ``offset`` the byte offset of the part refused, ``where`` names it."""

    def __init__(self, message: str, *, path: str | None = None, offset: int | None = None,
                 where: str | None = None) -> None:
        text = message
        if where:
            text = f"{where}: {text}"
        if offset is not None:
            text = f"at byte {offset}: {text}"
        if path:
            text = f"{path}: {text}"
        super().__init__(text, path=path, offset=offset, where=where)
        self.path, self.offset, self.where = path, offset, where
