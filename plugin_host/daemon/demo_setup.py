"""First use of the demo policy: create its signing key, its artifact and its acceptance record.

``plugin-host run --policy policies/demo.toml`` must work right after installing, so when the
policy allows an artifact named ``demo`` whose file does not exist yet, and that file and the
trusted key both live inside the host's state folder (``${STATE_DIR}``, README "Policy
files"), the daemon creates them there before loading anything:

- ``<dir>/signing.key`` (mode 0600) and ``signing.pub``: a new Ed25519 key pair, where ``<dir>``
  is the folder of the policy's ``[[trust.key]] file``, named after it;
- ``<dir>/demo.pha``: the benchmark model (``plugin-host build --demo``, seed 0, version
  :data:`DEMO_VERSION`, declared worst-case latency :data:`DEMO_LATENCY_MS`), signed with it;
- when the policy requires acceptance and the record is missing (also for a demo artifact made
  before records existed): acceptance on the rule's backend through a sandbox worker run under
  the policy (``plugin-host accept``: golden cases, latency), the record
  (``demo.pha.accept-<backend>``, or the rule's ``acceptance``) signed with the demo key, which
  the demo policy trusts for the ``acceptance`` role too, and its report beside it. When only
  the latency failed (a busy development machine), it tries once more, saying so.

It says so on stdout, naming the files. Nothing is created outside the state folder (an
integrator's files are never written) and nothing existing is overwritten; a missing artifact
with an existing public key but no private key next to it is refused (the demo cannot sign).
Everything else about the files (signature, trust, rollback) is then checked as for any
artifact: this module creates, it never vouches.

A first use stopped part-way (a kill, a power loss) leaves nothing the next start cannot
finish: each key file is created whole or not at all (:func:`~abi.artifact.create_new`), a
private key found without its public key gets it written from it, the artifact is built and
signed as ``.demo.pha.first-use`` and renamed into place (the next first use replaces a stale
one), and the acceptance record comes last.

``checkpoint`` (the daemon's: it raises when a stop was asked for) is called before the
acceptance starts its worker and between its calls, so a stop during the first use ends it
there; the record is written only once the acceptance has run, and the next start makes it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from ..errors import AcceptanceFailedError, PluginHostError

__all__ = ["ensure_demo_artifact", "DEMO_NAME", "DEMO_VERSION", "DEMO_LATENCY_MS"]

DEMO_NAME = "demo"
DEMO_VERSION = "1.0.0"
#: the declared worst case of one call; the model takes ~4 ms here, the frame period is 50 ms
DEMO_LATENCY_MS = 40.0


def _inside(path: Path, folder: Path) -> bool:
    try:
        Path(os.path.realpath(path)).relative_to(os.path.realpath(folder))
        return True
    except ValueError:
        return False


def ensure_demo_artifact(policy, state_dir: str | os.PathLike,
                         say: Callable[[str], None] = print,
                         checkpoint: Callable[[], None] = lambda: None) -> bool:
    """Create the demo key, artifact and acceptance record if ``policy`` needs them (see the
    module); True when something was created."""
    created = _ensure_artifact(policy, state_dir, say)
    return _ensure_acceptance(policy, state_dir, say, checkpoint) or created


def _ensure_acceptance(policy, state_dir: str | os.PathLike, say: Callable[[str], None],
                       checkpoint: Callable[[], None]) -> bool:
    """Accept the demo artifact on its backend (in a sandbox worker under the policy) and
    write the record signed by the demo key, when required and missing."""
    rule = policy.artifact(DEMO_NAME)
    if rule is None or not rule.acceptance_required or not Path(rule.file).exists():
        return False
    record = rule.acceptance_record()
    state = Path(state_dir)
    keys = [k for k in policy.trust.keys if "acceptance" in k.roles]
    if record.exists() or not keys or not _inside(record, state) or not _inside(rule.file, state):
        return False  # not the demo layout: the normal refusal names what is missing
    private = Path(keys[0].file).with_suffix(".key")
    if not _inside(private, state) or not private.exists():
        return False
    from ..artifacts import load_private_key
    from ..artifacts.acceptance import accept_artifact
    from ..audit import AuditLog
    from ..sandbox import audit_sinks, sandbox_config_from_policy

    options = {"trust": policy.trust_store(),
               "audited_ops": policy.audited_op_pairs(rule.backend),
               "artifact_limits": policy.limits.artifact_limits(),
               **sandbox_config_from_policy(policy).executor_kwargs()}
    say(f"first use: accepting {rule.file} on backend {rule.backend!r} in a sandbox worker "
        f"(golden cases, latency)")
    keys = [load_private_key(private)]

    def progress(_message: str) -> None:  # the acceptance's steps (a signal: after each call)
        checkpoint()

    # the acceptance worker's start, protections and any tripwire go to the audit log too
    with AuditLog(policy.audit.log, fsync=policy.audit.fsync) as log:
        options.update(audit_sinks(log))
        try:
            result, written = accept_artifact(rule.file, backend=rule.backend,
                                              executor_options=options, keys=keys, out=record,
                                              progress=progress)
        except AcceptanceFailedError as exc:
            failed = exc.context.get("result")
            if failed is None or not failed.numerics_passed:
                raise
            # only the latency: a busy development machine; the demo tries once more (a
            # device's acceptance is `plugin-host accept`, which never retries)
            say(f"first use: acceptance latency p99 {failed.p99_ms:.1f} ms over the declared "
                f"{failed.budget_ms:g} ms (a busy machine?); trying once more")
            result, written = accept_artifact(rule.file, backend=rule.backend,
                                              executor_options=options, keys=keys, out=record,
                                              progress=progress)
    say(f"first use: acceptance passed (p99 {result.p99_ms:.2f} ms of the declared "
        f"{result.budget_ms:g} ms over {result.runs} runs); wrote the record {record}, signed "
        f"with {private}, and the report {written['html']}")
    return True


def _ensure_artifact(policy, state_dir: str | os.PathLike, say: Callable[[str], None]) -> bool:
    rule = policy.artifact(DEMO_NAME)
    if rule is None or Path(rule.file).exists():
        return False
    state = Path(state_dir)
    keys = [k for k in policy.trust.keys if "artifact" in k.roles]
    if not _inside(rule.file, state) or not keys or not all(_inside(k.file, state)
                                                            for k in keys):
        return False  # not the demo layout: the normal "file not found" refusal follows
    key = keys[0]
    pub = Path(key.file)
    private = pub.with_suffix(".key")
    from ..artifacts import (build_artifact, load_private_key, sign_artifact, write_keypair,
                             write_public_key)
    from ..plugins import get_backend, get_plugin_manager, model_builders

    created_key = False
    if not pub.exists():
        if private.exists():  # a first use stopped between the two key files
            write_public_key(pub, load_private_key(private))
            say(f"first use: wrote the public key {pub} of the demo signing key {private}")
        else:
            write_keypair(pub.parent, name=pub.stem)
            created_key = True
    elif not private.exists():
        raise PluginHostError(f"first use of the demo: the artifact {rule.file} is missing and "
                              f"there is no private key {private} to sign a new one; remove "
                              f"{pub.parent} to start over")
    pm = get_plugin_manager()  # the built-in plugins: the demo model builder, numpy backend
    builders = model_builders(pm)
    if DEMO_NAME not in builders:
        raise PluginHostError("first use of the demo: no model builder named 'demo' is "
                              "installed")
    Path(rule.file).parent.mkdir(parents=True, exist_ok=True)
    # built and signed under a name of its own, then renamed: a first use stopped in between
    # leaves no unsigned artifact (which every later start would refuse) but this file, which
    # the next first use replaces
    staging = Path(rule.file).with_name(f".{Path(rule.file).name}.first-use")
    graph = builders[DEMO_NAME](0)
    manifest = build_artifact(graph, staging, name=DEMO_NAME, version=DEMO_VERSION,
                              backends=[rule.backend], reference_backend=get_backend(pm, "numpy"),
                              latency_ms=DEMO_LATENCY_MS, seed=0)
    sign_artifact(staging, load_private_key(private))
    os.replace(staging, rule.file)
    if created_key:
        say(f"first use: created the demo signing key {private} (public key {pub})")
    say(f"first use: built and signed the demo artifact {rule.file} "
        f"({manifest.name} {manifest.version}, declared latency {manifest.latency_ms:g} ms) "
        f"in the state folder {state}; remove {pub.parent} to start over")
    return True
