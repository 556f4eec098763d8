"""``plugin-host policy check FILE``: validate a policy file.

Exit 0 and a summary of what the policy allows on stdout; or exit 1 with one line per problem
on stderr, each ``FILE:LINE: KEY: message``.
"""

from __future__ import annotations

import argparse
import sys

from ..cli import EXIT_REFUSED
from ..errors import PolicyError, PolicyProblem
from .common import Formatter, state_folder


def register(verbs) -> None:
    policy = verbs.add_parser(
        "policy", formatter_class=Formatter, help="work with policy files",
        description="Policy files say which plugins may load, which capabilities each holds, "
                    "which artifacts and keys are trusted, what the sandbox must enforce.",
        epilog="example:\n  plugin-host policy check policies/demo.toml")
    sub = policy.add_subparsers(dest="policy_verb", metavar="ACTION", required=True)
    check = sub.add_parser(
        "check", formatter_class=Formatter, help="validate a policy file",
        description="Validate a policy file: TOML syntax, every key and type, kinds and "
                    "capabilities, default deny and deny-beats-allow, the rule that a "
                    "model-layer or inference-hardware plugin never holds can.send, "
                    "panda.safety or control.publish, audits of custom kernels, thresholds. "
                    "Prints what the policy allows, or one line per problem (FILE:LINE: KEY: "
                    "message) and exits 1.",
        epilog="example:\n  plugin-host policy check policies/demo.toml\n"
               "  plugin-host policy check policies/device.toml --check-files --check-plugins")
    check.add_argument("file", metavar="FILE")
    check.add_argument("--check-files", action="store_true",
                       help="also read every trusted key file and every artifact's manifest "
                            "(its format; a call timeout below its worst-case latency and a "
                            "fixed_inputs value that does not fit its input are problems)")
    check.add_argument("--check-plugins", action="store_true",
                       help="also require exactly one installed entry point per allowed plugin "
                            "(nothing is imported)")
    check.add_argument("--state-dir", default=None, metavar="DIR",
                       help="what ${STATE_DIR} expands to (default: $XDG_STATE_HOME/"
                            "plugin-host, else ~/.local/state/plugin-host)")
    check.set_defaults(func=_cmd_check)


def _cmd_check(args: argparse.Namespace) -> int:
    from ..policy import load_policy

    try:
        policy = load_policy(args.file, state_dir=state_folder(args.state_dir, default=False))
    except PolicyError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return EXIT_REFUSED
    problems: list[PolicyProblem] = []
    if args.check_files:
        problems += _check_files(policy)
    if args.check_plugins:
        problems += _check_plugins(policy)
    if problems:
        for problem in problems:
            print(problem, file=sys.stderr)
        return EXIT_REFUSED
    for line in _summary(policy):
        print(line)
    return 0


def _check_files(policy) -> list[PolicyProblem]:
    from ..artifacts import load_public_key, read_manifest_unverified
    from ..errors import ArtifactError, KeyFileError

    out = []
    for key in policy.trust.keys:
        try:
            load_public_key(key.file)
        except KeyFileError as exc:
            out.append(PolicyProblem(policy.path, key.line, f"trust.key[{key.index}].file",
                                     str(exc)))
    for art in policy.artifacts:
        key = f"artifact[{art.index}].file"
        if not art.file.is_file():
            out.append(PolicyProblem(policy.path, art.line, key,
                                     f"no artifact file at {art.file}"))
            continue
        try:  # the format only: signatures and trust are the daemon's to check at load
            manifest = read_manifest_unverified(
                art.file, limits=policy.limits.artifact_limits())["manifest"]
        except ArtifactError as exc:
            out.append(PolicyProblem(policy.path, art.line, key, str(exc)))
            continue
        # what the daemon refuses at load
        problem = policy.call_timeout_problem(art.name, manifest["latency_ms"])
        if problem is not None:
            out.append(problem)
        out += _model_input_problems(policy, art, manifest)
    return out


def _model_input_problems(policy, art, manifest) -> list[PolicyProblem]:
    """The daemon's checks of ``art``'s ``fixed_inputs`` and ``image_inputs`` against the
    artifact's inputs, made on its graph description with stand-ins for the weights (nothing
    of them is read)."""
    import numpy as np

    from abi import dtypes
    from abi.artifact import check_graph_dict

    from ..daemon.feed import colour_image_formats
    from ..daemon.fixed_inputs import fixed_input_values
    from ..errors import PluginHostError
    from ..executor import entry_index_checks
    from ..graph import Graph

    if not art.fixed_inputs and not art.image_inputs:
        return []
    try:
        described = check_graph_dict(manifest["graph"])
        stand_ins = {c["name"]: np.broadcast_to(np.zeros((), dtypes.to_numpy(c["dtype"])),
                                                c["shape"]) for c in described["constants"]}
        graph = Graph.from_dict(described, stand_ins)
    except PluginHostError as exc:
        return [PolicyProblem(policy.path, art.line, f"artifact[{art.index}].file",
                              f"{art.file}: the model's description: {exc}")]
    index_inputs = {name: vocab for name, vocab, _ in entry_index_checks(graph)}
    _, problems = fixed_input_values(graph, index_inputs, art.fixed_inputs)
    _, colour = colour_image_formats(graph, index_inputs, art.image_inputs)
    return [PolicyProblem(policy.path, p.line or art.line,
                          f"artifact[{art.index}].fixed_inputs.{p.name}", p.message)
            for p in problems] + [
        PolicyProblem(policy.path, line or art.line, f"artifact[{art.index}].image_inputs."
                                                     f"{name}", message)
        for name, line, message in colour]


def _check_plugins(policy) -> list[PolicyProblem]:
    from importlib.metadata import entry_points

    from ..plugins import ENTRY_POINT_GROUP

    names: dict[str, int] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        names[ep.name] = names.get(ep.name, 0) + 1
    out = []
    for rule in policy.allowed_plugins():
        count = names.get(rule.name, 0)
        if count != 1:
            what = "no installed package provides" if count == 0 else f"{count} packages provide"
            out.append(PolicyProblem(policy.path, rule.line, f"plugin[{rule.index}].name",
                                     f"{what} the entry point {rule.name!r} in the group "
                                     f"{ENTRY_POINT_GROUP!r}"))
    return out


def _summary(policy) -> list[str]:
    lines = [f"{policy.path}: ok"]
    for rule in policy.plugins:
        if not policy.is_allowed(rule.name):
            lines.append(f"  plugin {rule.name} ({rule.kind}): denied, never imported")
            continue
        granted = sorted(policy.granted(rule.name))
        extra = f"; kernels: {', '.join(sorted(rule.kernels))}" if rule.kernels else ""
        lines.append(f"  plugin {rule.name} ({rule.kind}): "
                     f"{', '.join(granted) if granted else 'no capabilities'}{extra}")
    for art in policy.artifacts:
        version = ".".join(map(str, art.min_version)) if art.min_version else "any"
        k = policy.trust.thresholds.get(art.name, policy.trust.default_threshold)
        lines.append(f"  artifact {art.name}: {art.file} on {art.backend}, version >= {version}, "
                     f"{k} signature(s), acceptance "
                     f"{'required' if art.acceptance_required else 'not required'}"
                     + "".join(f"; fixed input {name} = {_value(fixed.value)}"
                               for name, fixed in art.fixed_inputs.items())
                     + "".join(f"; input {name} from camera {camera}"
                               for name, camera in art.camera_inputs.items())
                     + "".join(f"; input {name} a colour image ({_colour(entry.format)})"
                               for name, entry in art.image_inputs.items()))
    lines.append(f"  trust: {len(policy.trust.keys)} key(s), {len(policy.trust.revoked)} "
                 f"revoked")
    if policy.audited_ops:
        lines.append("  audited ops: " + ", ".join(f"{a.op} v{a.version}"
                                                  for a in policy.audited_ops))
    lines.append("  sandbox requires: " + (", ".join(sorted(policy.sandbox.require)) or "nothing"))
    cpu = policy.limits.cpu
    if cpu == "off":
        lines.append("  co-location: off (the kernel places the inference threads)")
    elif cpu == "auto":
        lines.append("  co-location: the inference thread and the worker's main thread on the "
                     "last CPU (auto; off when the daemon runs several cameras)")
    else:
        lines.append(f"  co-location: the inference thread and the worker's main thread on CPU "
                     f"{cpu}")
    lines.append(f"  audit log: {policy.audit.log}")
    lines.append("  cameras: " + (", ".join(policy.cameras.use) or "the one provided")
                 + f", matched within {policy.cameras.max_skew_ms:g} ms, stalled after "
                 + (f"{policy.cameras.stall_ms:g} ms" if policy.cameras.stall_ms is not None
                    else "1 s or five frame periods") + " without a frame")
    return lines


def _colour(fmt) -> str:
    """An image format as the summary shows it: "rgb", "rgb, letterbox (pad 114), bilinear",
    "rgb, crop (fraction 0.875)", "rgb, (x * 0.5 - mean) / std"."""
    parts = [fmt.color]
    if fmt.fit == "letterbox":
        parts.append(f"letterbox (pad {fmt.pad})")
    elif fmt.fit == "crop":
        parts.append("crop" + (f" (fraction {fmt.crop_fraction:g})" if fmt.crop_fraction != 1
                               else ""))
    if fmt.resize != "nearest":
        parts.append(fmt.resize)
    if fmt.normalizes:
        mean, std = ([float(f"{v:.6g}") for v in values] for values in (fmt.mean, fmt.std))
        parts.append(f"(x * {fmt.scale:.6g} - {mean}) / {std}")
    return ", ".join(parts)


def _value(array) -> str:
    """A fixed input's value as written, or its shape when it is long."""
    if array.size <= 8:
        return str(array.tolist()).replace("True", "true").replace("False", "false")
    return f"an array of shape {array.shape}"
