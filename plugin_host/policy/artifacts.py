"""Loading an artifact the way a policy allows it.

:func:`load_allowed_artifact` is :func:`~plugin_host.artifacts.load_verified` with every input
taken from the policy: the file, the trust store (keys, revocations, thresholds), the audited
ops valid on the rule's backend, the artifact size cap, and the one backend the rule names (no
other backend, even if the artifact targets several). On top it refuses a file holding another
artifact than the rule names and a version below ``min_version``, and runs the plugins' extra
checks (``plugin_host_verify_artifact``). Only when all passed is the version recorded in the
rollback state. Acceptance (``acceptance_required``: the golden cases within tolerance on the
target backend) runs a model, so it is the caller's step, in the sandbox worker.
"""

from __future__ import annotations

from typing import Any, Iterable

from abi.artifact import parse_version

from ..errors import ArtifactNotAllowedError
from .model import Policy

__all__ = ["load_allowed_artifact"]


def load_allowed_artifact(policy: Policy, name: str, *, rollback: Any,
                          available_backends: Iterable[str], plugins: Any = None,
                          now: float | None = None, record: bool = True):
    """Verify and load the ``[[artifact]]`` called ``name``; return the VerifiedArtifact.

    ``rollback`` is a RollbackStore (or None to skip rollback protection deliberately),
    ``available_backends`` the backend names this host has, ``plugins`` a LoadedPlugins whose
    ``verify_artifact`` hooks run on the manifest. ``record`` writes the accepted version.
    """
    from ..artifacts import load_verified

    rule = policy.artifact(name)
    if rule is None:
        allowed = ", ".join(a.name for a in policy.artifacts) or "none"
        raise ArtifactNotAllowedError(f"policy {policy.path} allows no artifact named {name!r} "
                                      f"(allowed: {allowed})")
    where = policy.where(rule.line)
    backends = {rule.backend} & set(available_backends)
    loaded = load_verified(rule.file, trust=policy.trust_store(), rollback=rollback,
                           backends=backends, audited_ops=policy.audited_op_pairs(rule.backend),
                           now=now, limits=policy.limits.artifact_limits(), record=False)
    try:
        if loaded.name != rule.name:
            raise ArtifactNotAllowedError(f"{rule.file} holds artifact {loaded.name!r}, but "
                                          f"policy {where} expects {rule.name!r} there",
                                          path=str(rule.file))
        if rule.min_version is not None and parse_version(loaded.version) < rule.min_version:
            minimum = ".".join(map(str, rule.min_version))
            raise ArtifactNotAllowedError(f"artifact {rule.name!r} {loaded.version} is below "
                                          f"the minimum version {minimum} of policy {where}",
                                          path=str(rule.file))
        if plugins is not None:
            plugins.verify_artifact(loaded.manifest, str(rule.file))
        if rollback is not None and record:
            rollback.accept(loaded.name, loaded.version, loaded.manifest_sha256)
    except BaseException:
        close = getattr(loaded, "close", None)
        if close is not None:
            close()
        raise
    return loaded
