"""Errors of the host: the project's one error tree (see ``abi.errors``) plus the host's branches.

Import errors from here in host code; plugin authors may import the same classes from
``abi.errors`` without depending on the host.
"""

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
    "PluginHostError",
    "ShapeError",
    "UsageError",
    # artifacts (the format-level ones come from abi.errors)
    "ArtifactError",
    "ArtifactFormatError",
    "ExpiredArtifactError",
    "GoldenMismatchError",
    "IncompatibleArtifactError",
    "KeyFileError",
    "RevokedKeyError",
    "RollbackError",
    "SignatureError",
    "StateFileError",
    "TensorHashError",
    "ThresholdError",
    "UnauditedOpError",
    "UntrustedKeyError",
]


class UsageError(PluginHostError):
    """The command line or an API was used wrongly (bad flag, missing file)."""


class PluginError(PluginHostError):
    """A plugin is missing, misbehaves, or conflicts with another (e.g. two backends, one name)."""


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
