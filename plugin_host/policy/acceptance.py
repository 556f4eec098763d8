"""The policy's acceptance rule: with ``acceptance_required`` (the default), an artifact loads
on a backend only with a valid acceptance record for exactly that artifact and backend.

The record is the ``[[artifact]]``'s ``acceptance = PATH``, else ``<artifact file>.accept-
<backend>`` beside the artifact (what ``plugin-host accept`` writes by default). It must be
signed by keys of the policy's ``[[trust.key]]`` with the ``acceptance`` role (revocations
apply), bound to the artifact's root digest and manifest SHA-256, name and version, for the
backend, by a host of this major version, and record a pass
(:func:`~plugin_host.artifacts.acceptance_record.verify_record`).
"""

from __future__ import annotations

import os
from typing import Any

from ..errors import AcceptanceError, ArtifactError, UntrustedKeyError
from .model import Policy

__all__ = ["require_acceptance"]


def require_acceptance(policy: Policy, artifact: Any, *, backend: str,
                       file: str | os.PathLike | None = None):
    """Refuse ``artifact`` (a VerifiedArtifact) on ``backend`` unless the policy's acceptance
    rule is met; return the verified AcceptanceRecord, or None when the policy does not require
    one (no ``[[artifact]]`` of that name, or ``acceptance_required = false``). ``file`` is the
    artifact file (default: the rule's). Every refusal is one line naming the artifact, the
    backend and why (an AcceptanceError, or the signature errors of the trust store's)."""
    from ..artifacts.acceptance_record import ACCEPTANCE_ROLE, verify_record

    rule = policy.artifact(artifact.name)
    if rule is None or not rule.acceptance_required:
        return None
    path = rule.acceptance_record(backend, file)
    where = policy.where(rule.line)
    trust = policy.trust_store()
    if not any(ACCEPTANCE_ROLE in k.roles for k in policy.trust.keys):
        raise UntrustedKeyError(f"artifact {artifact.name!r} on backend {backend!r} needs an "
                                f"acceptance record (policy {where}), but no [[trust.key]] of "
                                f"the policy has the role {ACCEPTANCE_ROLE!r}",
                                path=os.fspath(path))
    try:
        return verify_record(path, trust=trust, name=artifact.name, version=artifact.version,
                             root_digest=artifact.manifest.root_digest,
                             manifest_sha256=artifact.manifest_sha256, backend=backend)
    except ArtifactError as exc:
        exc.message = (f"artifact {artifact.name!r} on backend {backend!r} is not accepted "
                       f"(required by policy {where}): {exc.message}"
                       + (f"; run plugin-host accept {rule.file if file is None else file} "
                          f"--backend {backend} ... --out {path}"
                          if isinstance(exc, AcceptanceError) and exc.context.get("where") == "file"
                          else ""))
        exc.args = (exc.message,)
        raise
