"""The integrator's artifact verbs: keygen, build, sign, verify, inspect, infer.

Each verb exits 0 on success; a refusal is a PluginHostError, which ``plugin_host.cli``
prints as one line on stderr with exit status 1. Progress goes to stderr only on a terminal;
the long verbs (build, infer) act on SIGTERM or Ctrl-C at their next progress step
(:func:`.common.stops_between_steps`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import zipfile
from datetime import datetime, timezone
from typing import Any

import numpy as np

from ..errors import BackendError, UsageError
from ..stop_signals import check_stop
from .common import Formatter, state_folder, stops_between_steps

_STATE_HELP = ("directory of the rollback state (highest accepted version per artifact name); "
               "default $XDG_STATE_HOME/plugin-host, else ~/.local/state/plugin-host")


class _ListOnnxOps(argparse.Action):
    """``build --list-onnx-ops``: print the op types the ONNX import maps and exit, as
    ``--version`` does (no other option is needed)."""

    def __init__(self, option_strings, dest, help=None):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from ..onnx_import.ops import supported_ops

        mapped, folded = supported_ops()
        print(f"mapped ({len(mapped)}): {', '.join(mapped)}")
        print(f"on constants only, folded at import ({len(folded)}): {', '.join(folded)}")
        print("also: ops ONNX defines as functions of these, and a model's own functions "
              "(see 'Importing ONNX models' in README.md)")
        parser.exit()


def register(verbs) -> None:
    p = verbs.add_parser(
        "keygen", formatter_class=Formatter, help="create an Ed25519 signing key pair",
        description="Create an Ed25519 key pair as PEM files: DIR/NAME.key (private, mode "
                    "0600, unencrypted: keep it safe) and DIR/NAME.pub (public, for --trust). "
                    "Prints the key id (first 16 bytes of SHA-256 of the public key, hex). "
                    "Existing files are never overwritten.",
        epilog="example:\n  plugin-host keygen --out keys/\n  "
               "plugin-host keygen --out keys/ --name release-2")
    p.add_argument("--out", required=True, metavar="DIR", help="directory for the key files")
    p.add_argument("--name", default="signing", help="file name stem (default: signing)")
    p.set_defaults(func=_cmd_keygen)

    p = verbs.add_parser(
        "build", formatter_class=Formatter, help="build an unsigned artifact",
        description="Build an unsigned artifact: the model's graph, weights and running "
                    "statistics, op versions, tensor ABI, golden inputs and outputs computed "
                    "on the numpy reference backend, tolerances, state contract and latency. "
                    "Sign it with 'plugin-host sign' before a host will load it. SIGTERM or "
                    "Ctrl-C stops it at its next step, with nothing written; a second one at "
                    "once.",
        epilog="example:\n  plugin-host build --demo --out demo.pha\n  "
               "plugin-host build --demo --out demo.pha --seed 3 --version 1.2.0 "
               "--tolerance 1e-4,1e-5 --latency-ms 40 --expires 2027-01-01T00:00:00Z\n  "
               "plugin-host build --onnx model.onnx --out model.pha --state h=h_next "
               "--state c=c_next --rtol 1e-4 --atol 1e-5")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--demo", action="store_true",
                        help="build the benchmark model of the design (random weights)")
    source.add_argument("--onnx", default=None, metavar="MODEL.onnx",
                        help="import an ONNX model; golden outputs computed with onnxruntime "
                             "(see 'Importing ONNX models' in README.md)")
    p.add_argument("--state", action="append", default=[], metavar="IN=OUT",
                   help="with --onnx: output OUT is the next value of recurrent-state input IN "
                        "(repeatable)")
    p.add_argument("--layout", action="append", default=[], metavar="NAME=LAYOUT",
                   help="with --onnx: layout of an input or output (repeatable; default by "
                        "rank: NCHW, NCL, NC, N)")
    p.add_argument("--dim", action="append", default=[], metavar="NAME=SIZE",
                   help="with --onnx: fix the inputs' run-time dim NAME (its ONNX dim_param, "
                        "or INPUT_dAXIS for one without a name) to SIZE, as the device feeds "
                        "it (repeatable; golden cases and the latency budget draw a dim left "
                        "at run time at 1, or at its --golden-dim sizes)")
    p.add_argument("--input-value", action="append", default=[],
                   metavar="NAME=VALUE[,VALUE...]",
                   help="with --onnx: fix graph input NAME to VALUE (one value fills it, else "
                        "one per element), as the device always feeds it: the artifact has no "
                        "such input, and what it decides (an If on a sample rate) is folded "
                        "(repeatable)")
    p.add_argument("--golden-dim", action="append", default=[], metavar="NAME=SIZE[,SIZE...]",
                   help="with --onnx: draw the inputs' run-time dim NAME at these sizes in the "
                        "golden cases (case k takes the k-th, cycling; see --golden-cases) and "
                        "so in the latency budget, keeping it run-time in the ABI (repeatable; "
                        "default 1)")
    p.add_argument("--golden-range", action="append", default=[], metavar="NAME=LOW,HIGH",
                   help="with --onnx: draw input NAME's golden values from [LOW, HIGH) "
                        "(integers LOW to HIGH - 1), where the model takes only some: "
                        "integers are otherwise drawn from 0 and 1, floats from a normal "
                        "distribution (repeatable)")
    p.add_argument("--rtol", type=float, default=None,
                   help="relative tolerance for every output (overrides --tolerance's)")
    p.add_argument("--atol", type=float, default=None,
                   help="absolute tolerance for every output (overrides --tolerance's)")
    p.add_argument("--allow-external-data", action="store_true",
                   help="with --onnx: read external tensor data from any file inside the "
                        "model's folder (by default only from the model's own data file "
                        "beside it, MODEL.onnx.data, where torch's exporter writes it)")
    p.add_argument("--upcast-float16", action="store_true",
                   help="with --onnx: import a float16 model as float32 (refused by default): "
                        "inputs, outputs, weights, constants and casts become float32, so "
                        "does the artifact's ABI; the float16 model runs on onnxruntime too "
                        "and its largest deviation per output is reported")
    p.add_argument("--upcast-bfloat16", action="store_true",
                   help="with --onnx: import a bfloat16 model as float32 (refused by "
                        "default), as --upcast-float16 does a float16 one; where onnxruntime "
                        "cannot run the bfloat16 model (most of its ops have no bfloat16 "
                        "kernel), the deviation is measured on its emulation: each op in "
                        "float32, its result rounded to bfloat16")
    p.add_argument("--onnxruntime-optimized", action="store_true",
                   help="with --onnx: import what onnxruntime's graph optimizations (extended "
                        "level) make of the model, as an optimized session runs it: a QDQ "
                        "model's convs and matmuls as integer QLinearConv and QLinearMatMul, "
                        "its sigmoids, products, sums, concats, softmaxes and average pools "
                        "as com.microsoft's "
                        "QLinearSigmoid, QLinearMul, ... (onnxruntime's speed, its roundings; "
                        "by default the import keeps "
                        "the file's float fake quantization), activations fused; the golden "
                        "outputs come from the rewritten model")
    p.add_argument("--upcast-tolerance", default=None, metavar="RTOL,ATOL",
                   help="with --upcast-float16 or --upcast-bfloat16: the largest deviation "
                        "from the float16 or bfloat16 model accepted (default: 1e-2,1e-2 "
                        "from float16, 1e-1,1e-1 from bfloat16)")
    p.add_argument("--downcast-float64", action="store_true",
                   help="with --onnx: import a float64 model as float32 (refused by default): "
                        "inputs, outputs, weights, constants and casts become float32, values "
                        "rounded, so does the artifact's ABI; the float64 model runs on "
                        "onnxruntime too and its largest deviation per output is reported")
    p.add_argument("--downcast-tolerance", default=None, metavar="RTOL,ATOL",
                   help="with --downcast-float64: the largest deviation from the float64 model "
                        "accepted (default: 1e-4,1e-5)")
    p.add_argument("--out", required=True, metavar="FILE", help="artifact file to write")
    p.add_argument("--seed", type=int, default=0, help="seed for weights and golden inputs")
    p.add_argument("--name", default=None, help="artifact name (default: the model's name)")
    p.add_argument("--version", default="0.1.0", help="semantic version MAJOR.MINOR.PATCH "
                   "(default: 0.1.0)")
    p.add_argument("--tolerance", default=None, metavar="RTOL,ATOL",
                   help="numerical tolerance for every output (default: 1e-4,1e-5; with "
                        "--onnx and none of --tolerance, --rtol, --atol, an output's atol "
                        "widens where the model's own float32 rounding, or a quantized "
                        "model's rounding to integer steps, is coarser: see README.md)")
    p.add_argument("--latency-ms", type=float, default=None,
                   help="declared worst-case latency (default: 2x the slowest golden run)")
    p.add_argument("--expires", default=None, metavar="WHEN",
                   help="expiry as ISO 8601 with a zone (2027-01-01T00:00:00Z) or Unix seconds")
    p.add_argument("--backend", action="append", default=None, metavar="NAME",
                   help="target backend (repeatable; default: numpy, and with --onnx numpy "
                        "and onnxruntime)")
    p.add_argument("--golden-cases", type=int, default=2,
                   help="golden cases, 1 to 64 (default: 2)")
    p.add_argument("--list-onnx-ops", action=_ListOnnxOps,
                   help="print the ONNX op types --onnx maps, and those it folds on constants "
                        "only, then exit")
    p.set_defaults(func=_cmd_build)

    p = verbs.add_parser(
        "sign", formatter_class=Formatter, help="add a signature to an artifact",
        description="Check the artifact's format, manifest and every tensor hash, then add an "
                    "Ed25519 signature over its manifest (a signature by the same key is "
                    "renewed; others are kept). The file is replaced atomically.",
        epilog="example:\n  plugin-host sign demo.pha --key keys/signing.key")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--key", required=True, metavar="KEY", help="private key PEM (mode 0600)")
    p.set_defaults(func=_cmd_sign)

    p = verbs.add_parser(
        "verify", formatter_class=Formatter, help="verify an artifact against trusted keys",
        description="Verify an artifact exactly as the host does before loading it: size "
                    "caps, header, signatures against the trusted keys (revocation, k-of-n "
                    "threshold), manifest, host ABI and op versions, audits of atomic ops, "
                    "target backend, expiry, rollback, every tensor hash and padding byte. "
                    "Read-only: the rollback state is checked, not updated (infer records).",
        epilog="example:\n  plugin-host verify demo.pha --trust keys/signing.pub\n  "
               "plugin-host verify demo.pha --trust a.pub b.pub c.pub --threshold 2")
    _trust_arguments(p)
    p.set_defaults(func=_cmd_verify)

    p = verbs.add_parser(
        "inspect", formatter_class=Formatter,
        help="show an artifact's manifest (unverified), or what a recording holds",
        description="Show the manifest without tensor bytes: ABI version, ops and op "
                    "versions, tensor hashes, signatures with key ids, tolerances, state "
                    "contract, golden cases, provenance. The format is checked; signatures "
                    "and tensor bytes are NOT verified (use verify). Given a recording "
                    "(plugin-host record), show its camera, layout, frames, frame-id gaps, "
                    "time span, frame rate and exposure, from its checked index.",
        epilog="example:\n  plugin-host inspect demo.pha\n  plugin-host inspect demo.pha --json"
               "\n  plugin-host inspect road.phf")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--json", action="store_true",
                   help="print the manifest (or the recording's summary) as JSON")
    p.set_defaults(func=_cmd_inspect)

    p = verbs.add_parser(
        "infer", formatter_class=Formatter, help="verify an artifact and run it once",
        description="Verify the artifact (as verify does, and record its version as "
                    "accepted), run it once in a sandbox worker on the inputs in IN.npz "
                    "(arrays by input name; recurrent state may be given, else zero) and write "
                    "every output by name to OUT.npz. A bad input (name, shape, dtype, "
                    "Embedding index) is refused naming the input, before it reaches the "
                    "worker. With --policy, trust, thresholds, revoked keys, audited ops, the "
                    "sandbox's required protections and limits, the artifact size cap and the "
                    "plugins loaded in the worker come from the policy (and the worker's "
                    "events go to its audit log); without one, every sandbox protection is "
                    "required, the limits are the defaults and only the built-in backends "
                    "are loaded. SIGTERM or Ctrl-C stops it at its next step, with nothing "
                    "written; a second one at once.",
        epilog="example:\n  plugin-host infer demo.pha --trust keys/signing.pub "
               "--inputs in.npz --out out.npz\n  "
               "plugin-host infer demo.pha --policy policies/demo.toml --inputs in.npz "
               "--out out.npz")
    _trust_arguments(p, policy=True)
    p.add_argument("--inputs", required=True, metavar="IN.npz", help="input arrays by name")
    p.add_argument("--out", required=True, metavar="OUT.npz", help="file for the outputs")
    p.add_argument("--backend", default=None, metavar="NAME",
                   help="backend to run on (default: the artifact's first available target; "
                        "with --policy, the backend of the policy's [[artifact]] of that name, "
                        "else the artifact's first target)")
    p.add_argument("--policy", default=None, metavar="FILE",
                   help="policy file: trust, audited ops, sandbox requirements and limits, "
                        "allowed plugins and the audit log come from it (excludes --trust, "
                        "--threshold, --revoke, --audited-op)")
    p.set_defaults(func=_cmd_infer)


def _trust_arguments(p: argparse.ArgumentParser, *, policy: bool = False) -> None:
    """The trust flags; ``policy``: a --policy may replace them (so --trust is optional)."""
    p.add_argument("file", metavar="FILE")
    p.add_argument("--trust", required=not policy, nargs="+", metavar="PUBKEY",
                   help="trusted public key PEM files (there is no default trust)"
                        + ("; required without --policy" if policy else ""))
    p.add_argument("--threshold", type=int, default=None if policy else 1, metavar="K",
                   help="valid signatures required from the trusted keys (default: 1)")
    p.add_argument("--revoke", action="append", default=[], metavar="KEY_ID",
                   help="refuse any artifact signed by this key id (repeatable)")
    p.add_argument("--audited-op", action="append", default=[], metavar="OP:VERSION",
                   help="an atomic op with a recorded audit (repeatable)")
    p.add_argument("--state-dir", default=None, metavar="DIR", help=_STATE_HELP)


# --- helpers -----------------------------------------------------------------------------------


def _progress():
    """Each step of a long verb: where a stop signal received meanwhile is acted on
    (:func:`~plugin_host.stop_signals.check_stop`), and a line on stderr on a terminal."""
    shown = sys.stderr.isatty()

    def progress(message: str) -> None:
        check_stop()
        if shown:
            print(f"... {message}", file=sys.stderr, flush=True)
    return progress


def _plugin_manager():
    from ..plugins import get_plugin_manager

    return get_plugin_manager()


def _trust(args: argparse.Namespace):
    """The trust store and audited ops the trust flags describe."""
    from ..artifacts import TrustStore

    trust = TrustStore(default_threshold=args.threshold if args.threshold is not None else 1)
    for path in args.trust:
        trust.add_key_file(path)
    for key_id in args.revoke:
        trust.revoke(key_id)
    audited = []
    for item in args.audited_op:
        op, _, version = item.rpartition(":")
        if not op or not version.isdigit():
            raise UsageError(f"--audited-op {item!r}: expected OP:VERSION, e.g. scatter_add:1")
        audited.append((op, int(version)))
    return trust, audited


def _available_backends(args: argparse.Namespace, pm) -> set[str]:
    """The backends of ``pm`` (only ``--backend`` when given, which must be one of them)."""
    from ..plugins import backends

    available = set(backends(pm))
    chosen = getattr(args, "backend", None)
    if chosen is not None:
        if chosen not in available:
            raise BackendError(f"no backend named {chosen!r}; available: "
                               f"{', '.join(sorted(available)) or 'none'}", backend=chosen)
        available = {chosen}  # the artifact must target it
    return available


def _load(args: argparse.Namespace, pm, *, record: bool):
    from ..artifacts import RollbackStore, load_verified

    trust, audited = _trust(args)
    state_dir = state_folder(args.state_dir)
    return load_verified(args.file, trust=trust, rollback=RollbackStore(state_dir),
                         backends=_available_backends(args, pm), audited_ops=audited,
                         record=record)


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


# --- verbs -------------------------------------------------------------------------------------


def _cmd_keygen(args: argparse.Namespace) -> int:
    from ..artifacts import write_keypair

    private, public, kid = write_keypair(args.out, name=args.name)
    print(f"private key: {private} (mode 0600)")
    print(f"public key:  {public}")
    print(f"key id:      {kid}")
    return 0


@stops_between_steps
def _cmd_build(args: argparse.Namespace) -> int:
    from ..artifacts import build_artifact
    from ..artifacts.build import (DEFAULT_TOLERANCE, check_golden_cases, check_output_path,
                                   check_seed)
    from ..plugins import get_backend, model_builders

    if not args.demo and args.onnx is None:
        raise UsageError("nothing to build: pass --demo (the benchmark model) or --onnx MODEL")
    # refused before any work: the build and its golden runs can take a while
    check_output_path(args.out)
    check_seed(args.seed)
    check_golden_cases(args.golden_cases, "--golden-cases")
    tolerance = DEFAULT_TOLERANCE
    if args.tolerance is not None:
        try:
            rtol, atol = (float(v) for v in args.tolerance.split(","))
        except ValueError:
            raise UsageError(f"--tolerance {args.tolerance!r}: expected RTOL,ATOL, e.g. "
                             f"1e-4,1e-5") from None
        tolerance = (rtol, atol)
    given = args.tolerance is not None or args.rtol is not None or args.atol is not None
    tolerance = (tolerance[0] if args.rtol is None else args.rtol,
                 tolerance[1] if args.atol is None else args.atol)
    progress = _progress()
    if args.onnx is not None:  # none given: the import's default, widened where it must be
        from ..onnx_import.command import build_onnx
        return build_onnx(args, tolerance if given else None, _parse_expiry(args.expires),
                          progress)
    if args.state or args.layout or args.dim or args.golden_dim or args.golden_range \
            or args.input_value or args.allow_external_data or args.upcast_float16 \
            or args.upcast_bfloat16 or args.upcast_tolerance is not None \
            or args.downcast_float64 or args.downcast_tolerance is not None \
            or args.onnxruntime_optimized:
        raise UsageError("--state, --layout, --dim, --golden-dim, --golden-range, "
                         "--input-value, --allow-external-data, --upcast-float16, "
                         "--upcast-bfloat16, --upcast-tolerance, --downcast-float64, "
                         "--downcast-tolerance and --onnxruntime-optimized go with --onnx")
    pm = _plugin_manager()
    builders = model_builders(pm)
    if "demo" not in builders:
        raise UsageError(f"no model builder named 'demo'; available: {sorted(builders)}")
    progress(f"building the demo model (seed {args.seed})")
    graph = builders["demo"](args.seed)
    manifest = build_artifact(
        graph, args.out, name=args.name, version=args.version,
        backends=args.backend or ["numpy"], reference_backend=get_backend(pm, "numpy"),
        tolerances=tolerance, latency_ms=args.latency_ms, golden_cases=args.golden_cases,
        seed=args.seed, expires=_parse_expiry(args.expires), progress=progress)
    weights = sum(e.nbytes for e in manifest.tensors if e.role != "golden")
    print(f"built {args.out}: {manifest.name} {manifest.version} (unsigned), "
          f"{len(manifest.graph['nodes'])} nodes, {len(manifest.tensors)} tensors "
          f"({_mb(weights)} weights and state), {len(manifest.golden)} golden case(s), "
          f"latency {manifest.latency_ms:g} ms, root digest {manifest.root_digest[:16]}...")
    return 0


def _parse_expiry(text: str | None) -> int | None:
    if text is None:
        return None
    if text.isdigit():
        return int(text)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--expires {text!r}: expected ISO 8601 with a zone, e.g. "
                         f"2027-01-01T00:00:00Z, or Unix seconds") from None
    if when.tzinfo is None:
        raise UsageError(f"--expires {text!r}: give a time zone (e.g. a trailing Z)")
    return int(when.timestamp())


def _cmd_sign(args: argparse.Namespace) -> int:
    from ..artifacts import load_private_key, read_manifest_unverified, sign_artifact

    kid = sign_artifact(args.file, load_private_key(args.key))
    count = len(read_manifest_unverified(args.file)["signatures"])
    print(f"signed {args.file} with key {kid} ({count} signature(s))")
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    loaded = _load(args, _plugin_manager(), record=False)
    m = loaded.manifest
    print(f"verified {args.file}: {m.name} {m.version}, signed by "
          f"{', '.join(loaded.signers)} ({len(loaded.signers)} of threshold "
          f"{args.threshold}), {len(m.tensors)} tensors ({_mb(m.section_length)}) hashed, "
          f"root digest {m.root_digest[:16]}..., backend(s) {', '.join(loaded.backends)}")
    return 0


@stops_between_steps
def _cmd_infer(args: argparse.Namespace) -> int:
    """Verify, then run once in a sandbox worker (never in this process)."""
    from ..artifacts import RollbackStore
    from ..sandbox import SandboxedExecutor

    state_dir = state_folder(args.state_dir)
    progress = _progress()
    with contextlib.ExitStack() as stack:
        if args.policy is None:
            options = _infer_defaults(args)
        else:
            options = _infer_policy(args, stack)
        policy = options.pop("policy", None)
        inputs = _read_npz(args.inputs)
        progress(f"verifying {args.file} and starting a sandbox worker")
        rollback = RollbackStore(state_dir)
        # with a policy, the version is recorded only once the acceptance rule is met too
        ex = stack.enter_context(SandboxedExecutor(
            args.file, rollback=rollback if policy is None else None, **options))
        if policy is not None:  # acceptance_required: a valid record for this backend
            from ..policy import require_acceptance

            m = ex.manifest
            rollback.check(m.name, m.version, ex.artifact.manifest_sha256)
            require_acceptance(policy, ex.artifact, backend=options["backend"], file=args.file)
            rollback.accept(m.name, m.version, ex.artifact.manifest_sha256)
        outputs = ex.run(inputs)
        pid, protections = ex.pid, ex.protections
    progress(f"writing {args.out}")
    _write_npz(args.out, outputs)
    shown = ", ".join(f"{k} {v.dtype}{tuple(v.shape)}" for k, v in outputs.items())
    in_force = ", ".join(protections.in_force(options["limits"])) if protections else "none"
    print(f"ran {ex.manifest.name} {ex.manifest.version} on {options['backend']} in sandbox "
          f"worker {pid} ({in_force}): wrote {shown} to {args.out}")
    return 0


def _infer_defaults(args: argparse.Namespace) -> dict[str, Any]:
    """SandboxedExecutor options without a policy: the trust flags, the built-in backends
    (their names are read here from the built-in plugins; their kernels run in the worker),
    every protection required, the default limits, no model-layer plugins."""
    from ..sandbox import SandboxLimits, SandboxRequirements

    if not args.trust:
        raise UsageError("give the trusted keys with --trust, or a policy with --policy")
    trust, audited = _trust(args)
    pm = _plugin_manager()
    available = _available_backends(args, pm)
    backend = args.backend or _first_target(args.file, available)
    backend_plugins = [impl.plugin_name
                       for impl in pm.hook.plugin_host_add_backends.get_hookimpls()]
    return {"trust": trust, "audited_ops": audited, "backend": backend,
            "backend_plugins": backend_plugins, "requirements": SandboxRequirements(),
            "limits": SandboxLimits()}


def _infer_policy(args: argparse.Namespace, stack: contextlib.ExitStack) -> dict[str, Any]:
    """SandboxedExecutor options from ``--policy`` (see sandbox_config_from_policy); the
    worker's events go to the policy's audit log. No plugin is imported in this process."""
    from ..audit import AuditLog
    from ..policy import load_policy
    from ..sandbox import audit_sinks, sandbox_config_from_policy

    given = [flag for flag, value in (("--trust", args.trust), ("--threshold", args.threshold),
                                      ("--revoke", args.revoke),
                                      ("--audited-op", args.audited_op)) if value]
    if given:
        raise UsageError(f"{', '.join(given)}: with --policy, trust and audited ops come from "
                         f"the policy")
    state_dir = state_folder(args.state_dir, default=False)
    policy = load_policy(args.policy, state_dir=state_dir)
    backend = args.backend
    if backend is None:
        name = _unverified_manifest(args.file).get("name")
        rule = policy.artifact(name) if isinstance(name, str) else None
        backend = rule.backend if rule is not None else _first_target(args.file, None)
    config = sandbox_config_from_policy(policy)
    trust = policy.trust_store()
    log = stack.enter_context(AuditLog(policy.audit.log, fsync=policy.audit.fsync))
    return {"trust": trust, "audited_ops": policy.audited_op_pairs(backend), "policy": policy,
            "backend": backend, "artifact_limits": policy.limits.artifact_limits(),
            **config.executor_kwargs(), **audit_sinks(log)}


def _unverified_manifest(path: str) -> dict[str, Any]:
    """The manifest as the file claims it, only to pick a default backend: the verification
    that follows is what counts (a lie there is refused)."""
    from ..artifacts import read_manifest_unverified

    return read_manifest_unverified(path)["manifest"]


def _first_target(path: str, available: set[str] | None) -> str:
    """The artifact's first target backend, among ``available`` when given. When none fits,
    an available backend, so that verification refuses the artifact with its own message
    (no target backend available); without ``available`` the worker decides."""
    unverified_targets = [b for b in _unverified_manifest(path).get("backends") or ()
                          if isinstance(b, str)]
    for name in unverified_targets:
        if available is None or name in available:
            return name
    if available:
        return sorted(available)[0]
    return unverified_targets[0] if unverified_targets else "numpy"


#: the most bytes ``--inputs`` may hold once decompressed (an .npz of zeros compresses a
#: thousandfold: its arrays are sized from their headers before any is read)
MAX_INPUT_BYTES = 2**30


def _read_npz(path: str) -> dict[str, np.ndarray]:
    from ..files import open_regular

    try:
        with open_regular(path) as f, np.load(f, allow_pickle=False) as data:
            if not isinstance(data, np.lib.npyio.NpzFile):  # pragma: no cover - np.load of .npy
                raise ValueError("not an .npz archive")
            total = sum(_npy_bytes(data.zip, member) for member in data.zip.namelist())
            if total > MAX_INPUT_BYTES:
                raise ValueError(f"its arrays hold {total} bytes, more than the cap of "
                                 f"{MAX_INPUT_BYTES}")
            return {k: data[k] for k in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(f"cannot read inputs {path}: {reason}") from None
    except AttributeError:
        raise UsageError(f"cannot read inputs {path}: not an .npz archive") from None


def _npy_bytes(archive: zipfile.ZipFile, member: str) -> int:
    """The bytes the array stored as ``member`` holds, from its .npy header alone."""
    with archive.open(member) as fp:
        version = np.lib.format.read_magic(fp)
        read = {(1, 0): np.lib.format.read_array_header_1_0,
                (2, 0): np.lib.format.read_array_header_2_0}.get(version)
        if read is None:
            raise ValueError(f"{member}: .npy format {version[0]}.{version[1]} is not read here")
        shape, _, dtype = read(fp)
    return math.prod(shape) * dtype.itemsize


def _write_npz(path: str, arrays: dict[str, np.ndarray]) -> None:
    from abi.artifact import atomic_write

    try:
        atomic_write(path, lambda f: np.savez(f, **arrays))
    except OSError as exc:
        raise UsageError(f"cannot write outputs {path}: {exc.strerror}") from None


def _is_recording(path: str) -> bool:
    """Whether ``path`` starts with the recorded-frames magic (any failure: not known to)."""
    from ..files import open_regular
    from ..frames.replay_format import FILE_MAGIC

    try:
        with open_regular(path) as f:
            return f.read(len(FILE_MAGIC)) == FILE_MAGIC
    except OSError:
        return False


def _cmd_inspect(args: argparse.Namespace) -> int:
    from ..artifacts import read_manifest_unverified

    if _is_recording(args.file):
        return _inspect_recording(args)
    info = read_manifest_unverified(args.file)
    if args.json:  # bin values (only in a hostile manifest) print as hex
        print(json.dumps(info, indent=1, sort_keys=True,
                         default=lambda v: v.hex() if isinstance(v, bytes) else repr(v)))
        return 0
    print(_describe(info))
    return 0


def _inspect_recording(args: argparse.Namespace) -> int:
    from ..frames import FrameLayout, ReplayReader

    with ReplayReader(args.file) as reader:
        info = reader.summary()
    if args.json:
        print(json.dumps(info, indent=1, sort_keys=True))
        return 0
    layout = FrameLayout.from_dict(info["layout"])
    n = info["frames"]
    lines = [f"{args.file}: recording of camera {info['camera']!r}"
             + (f" (plugin {info['source']})" if info["source"] else "")
             + " (format and index checked; frame data not checked against its CRCs)",
             f"  layout    {layout.describe()}, {layout.nbytes} bytes a frame (strides "
             f"{list(layout.strides)}, offsets {list(layout.offsets)})"]
    if n:
        gaps = ("no gaps" if not info["gaps"] else
                f"{info['missing_ids']} id(s) missing in {info['gaps']} gap(s), the largest "
                f"{info['largest_gap']}")
        lines.append(f"  frames    {n}, ids {info['first_id']}..{info['last_id']}, {gaps}")
    else:
        lines.append("  frames    none")
    if info["span_s"]:
        interval = info["interval_ms"]
        lines.append(f"  time      {info['span_s']:.3f} s from the first frame's start to the "
                     f"last's, {info['rate_hz']:.2f} frames/s (interval median "
                     f"{interval['median']:.2f} ms, max {interval['max']:.2f} ms)")
    if info["exposure_ms"] is not None:
        lines.append(f"  exposure  median {info['exposure_ms']:.3f} ms (timestamp_eof - "
                     f"timestamp_sof)")
    lines.append(f"  file      {info['file_bytes']} bytes")
    print("\n".join(lines))
    return 0


def _describe(info: dict[str, Any]) -> str:
    m = info["manifest"]
    g = m["graph"]
    lines = [f"{info['path']}: artifact {m['name']} {m['version']} (UNVERIFIED: format checked, "
             f"signatures and tensor bytes not; use verify)",
             f"  host ABI version   {m['abi_version']}",
             f"  target backends    {', '.join(m['backends'])}",
             f"  expires            {_when(m['expires'])}",
             f"  worst-case latency {m['latency_ms']:g} ms",
             f"  provenance         {m['provenance']['builder']}, source digest "
             f"{m['provenance']['source_digest']}",
             f"  manifest sha256    {info['manifest_sha256']}",
             f"  root digest        {m['root_digest']}",
             f"  signatures         {len(info['signatures'])}"]
    lines += [f"    key id {s['key_id']}" for s in info["signatures"]]
    lines.append("  inputs")
    lines += [f"    {_spec(s)}" for s in g["inputs"]]
    lines.append("  outputs (tolerance)")
    for s in g["outputs"]:
        t = m["tolerances"][s["name"]]
        lines.append(f"    {_spec(s)}  rtol {t['rtol']:g} atol {t['atol']:g}")
    reset = m["state_contract"]["reset"]
    pairs = m["state_contract"]["pairs"]
    lines.append("  recurrent state    " + (", ".join(f"{k} <- {v}" for k, v in pairs.items())
                                            or "none"))
    gap = reset["frame_gap_ms"]
    conditions = ([f"frame gap > {gap:g} ms"] if gap is not None else []) + [
        k.replace("_", " ") for k in ("camera_restart", "timestamp_backwards", "artifact_swap",
                                      "explicit") if reset[k]]
    lines.append(f"  reset on           {', '.join(conditions) or 'nothing'}")
    lines.append(f"  nodes              {len(g['nodes'])}")
    for n in g["nodes"]:
        attrs = ", ".join(f"{k}={v}" for k, v in n["attrs"].items())
        atomic = "  ATOMIC" if n["atomic"] else ""
        lines.append(f"    {n['name']}: {n['op']} v{n['version']}"
                     + (f" ({attrs})" if attrs else "") + atomic)
    if m["layers"]:
        lines.append("  normalization layers")
        for entry in m["layers"]:
            extra = "" if entry["momentum"] is None else f" momentum={entry['momentum']}"
            lines.append(f"    {entry['node']}: {entry['op']} eps={entry['eps']}{extra} "
                         f"affine={entry['affine']} state={entry['state']}")
    golden = m["golden"]
    lines.append(f"  golden cases       {len(golden['cases'])} (reference backend "
                 f"{golden['reference_backend']})")
    lines.append(f"  tensors            {len(m['tensors'])}, section "
                 f"{m['tensor_section']['length']} bytes")
    for t in m["tensors"]:
        lines.append(f"    {t['name']}  {t['role']} {t['dtype']} {tuple(t['shape'])} "
                     f"@{t['offset']} sha256 {t['sha256']}")
    return "\n".join(lines)


def _spec(s: dict[str, Any]) -> str:
    return f"{s['name']}: {s['dtype']} {tuple(s['shape'])} {s['layout']}"


def _when(t: int | None) -> str:
    if t is None:
        return "never"
    try:
        return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return f"Unix time {t} (beyond the calendar)"
