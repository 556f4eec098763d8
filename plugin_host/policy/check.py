"""The semantic checks of a policy: rules that span keys and tables.

Each check reports through ``problem(key_path, message)`` and keeps going, so one run finds
every problem. The checks:

- audited ops and trusted key files are unique (plugin and artifact names are
  checked by the loader);
- a sandboxed plugin (``model-layer``, ``inference-hardware``) never holds ``can.send``,
  ``panda.safety`` or ``control.publish`` (the message names the plugin and the capability);
- ``kernels`` only on a ``model-layer`` plugin, each op known to the op table and with an
  ``[[audited_op]]`` on record (a custom kernel is unaudited code on the inference path);
- every ``[[audited_op]]`` names an op and version this host's op table knows;
- thresholds can be met: each k is at most the number of keys trusted for ``artifact``; a
  per-artifact threshold names a listed ``[[artifact]]``; an artifact list needs a trusted key;
- ``[cameras] use`` needs an allowed ``camera`` plugin to provide the cameras (whether each
  name exists is known only once the plugins are loaded: the daemon checks it at start-up),
  and, when given, lists the very cameras of each ``[[artifact]]``'s ``camera_inputs``.
"""

from __future__ import annotations

from typing import Callable, Collection

from abi.ops import known_ops

from . import model as m

__all__ = ["check_policy"]

Report = Callable[[tuple, str], None]


def check_policy(policy: m.Policy, problem: Report, *, incomplete: Collection[str] = ()
                 ) -> None:
    """Run every semantic check on ``policy``, reporting each problem found.

    ``incomplete`` names sections (``"trust"``, ``"audited_op"``, ``"artifact"``) from which
    the loader dropped an entry for its own problems; checks that count those entries are
    skipped rather than report a consequence of a problem already reported.
    """
    _unique_names(policy, problem)
    _sandboxed_grants(policy, problem)
    _kernels(policy, problem, audits_complete="audited_op" not in incomplete)
    _audited_ops(policy, problem)
    if not {"trust", "artifact"} & set(incomplete):
        _thresholds(policy, problem)
    if "plugin" not in incomplete:
        _cameras(policy, problem)


def _unique_names(policy: m.Policy, problem: Report) -> None:
    # plugin and artifact names are checked on the raw tables by the loader, so that an entry
    # with another problem still counts
    ops: dict[tuple[str, int], m.AuditedOp] = {}
    for audit in policy.audited_ops:
        pair = (audit.op, audit.version)
        if pair in ops:
            problem(("audited_op", audit.index),
                    f"duplicate audit for op {audit.op} v{audit.version} (first at line "
                    f"{ops[pair].line})")
        else:
            ops[pair] = audit
    files: dict[str, m.TrustKey] = {}
    for key in policy.trust.keys:
        if str(key.file) in files:
            problem(("trust", "key", key.index, "file"),
                    f"key file {str(key.file)!r} is listed twice (first at line "
                    f"{files[str(key.file)].line})")
        else:
            files[str(key.file)] = key


def _sandboxed_grants(policy: m.Policy, problem: Report) -> None:
    for rule in policy.plugins:
        if not rule.sandboxed:
            continue
        for cap in m.CAPABILITIES:  # fixed order: deterministic messages
            if cap in rule.capabilities and cap in m.SANDBOX_FORBIDDEN:
                problem(("plugin", rule.index, "capabilities"),
                        f"plugin {rule.name!r} is a {rule.kind} plugin and can never hold "
                        f"{cap!r}: its code runs in the sandbox worker, which never gets "
                        f"{', '.join(sorted(m.SANDBOX_FORBIDDEN))}")


def _kernels(policy: m.Policy, problem: Report, audits_complete: bool) -> None:
    ops = known_ops()
    audited = {a.op for a in policy.audited_ops}
    for rule in policy.plugins:
        if not rule.kernels:
            continue
        key = ("plugin", rule.index, "kernels")
        if rule.kind != "model-layer":
            problem(key, f"plugin {rule.name!r} is a {rule.kind} plugin: only a model-layer "
                         f"plugin may provide kernels")
            continue
        for op in sorted(rule.kernels):
            if op not in ops:
                problem(key, f"plugin {rule.name!r}: unknown op {op!r} in kernels")
            elif op not in audited and audits_complete:
                problem(key, f"plugin {rule.name!r} may provide a kernel for op {op!r}, but no "
                             f"[[audited_op]] records an audit of {op!r} (a custom kernel needs "
                             f"its own audit)")


def _audited_ops(policy: m.Policy, problem: Report) -> None:
    ops = known_ops()
    for audit in policy.audited_ops:
        if audit.op not in ops:
            problem(("audited_op", audit.index, "op"),
                    f"unknown op {audit.op!r} (this host's op table has no such op)")
        elif audit.version not in ops[audit.op]:
            problem(("audited_op", audit.index, "version"),
                    f"op {audit.op!r} has no version {audit.version} here (known: "
                    f"{', '.join(str(v) for v in ops[audit.op])})")


def _thresholds(policy: m.Policy, problem: Report) -> None:
    trust = policy.trust
    signers = sum(1 for k in trust.keys if "artifact" in k.roles)
    if policy.artifacts and signers == 0:
        problem(("trust",), f"{len(policy.artifacts)} artifact(s) are allowed but no key is "
                            f"trusted with the 'artifact' role: none could ever load")
    elif policy.artifacts and trust.default_threshold > signers:
        problem(("trust", "default_threshold"),
                f"default_threshold {trust.default_threshold} can never be met: only {signers} "
                f"key(s) are trusted with the 'artifact' role")
    names = {a.name for a in policy.artifacts}
    for name, k in trust.thresholds.items():
        key = ("trust", "thresholds", name)
        if name not in names:
            problem(key, f"threshold for {name!r}, which is not an allowed [[artifact]]")
        elif k > signers:
            problem(key, f"threshold {k} for {name!r} can never be met: only {signers} key(s) "
                         f"are trusted with the 'artifact' role")


def _cameras(policy: m.Policy, problem: Report) -> None:
    if policy.cameras.use and not policy.allowed_plugins({"camera"}):
        problem(("cameras", "use"), f"lists camera(s) {', '.join(policy.cameras.use)} but no "
                                    f"allowed [[plugin]] of kind 'camera' provides cameras")
    use = set(policy.cameras.use)
    for rule in policy.artifacts:
        wanted = set(rule.camera_inputs.values())
        if use and wanted and wanted != use:
            problem(("cameras", "use"), f"lists {', '.join(sorted(use))}, but artifact "
                                        f"{rule.name!r} runs on the frames of "
                                        f"{', '.join(sorted(wanted))} together (its "
                                        f"camera_inputs): list the same cameras, or leave "
                                        f"use out")
