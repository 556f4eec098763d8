"""``plugin-host accept``: acceptance of an artifact on a backend, through the sandbox worker.

Verification, trust flags and ``--policy`` are exactly ``infer``'s (the same helpers); the run,
the record and the report are :mod:`plugin_host.artifacts.acceptance`.
"""

from __future__ import annotations

import argparse
import contextlib
import sys

from ..errors import AcceptanceFailedError, UsageError
from .artifact import _infer_defaults, _infer_policy, _progress, _trust_arguments
from .common import Formatter, state_folder, stops_between_steps


def register(verbs) -> None:
    p = verbs.add_parser(
        "accept", formatter_class=Formatter,
        help="accept an artifact on a backend: golden outputs and latency, signed record",
        description="Verify the artifact (as infer does; the rollback state is checked, not "
                    "updated), start a sandbox worker on the backend, run every golden case "
                    "and compare each output with the reference within its declared "
                    "tolerance, then time N calls (warm-up excluded) and judge p99 against "
                    "the artifact's declared worst-case latency. Writes a report (RECORD.html "
                    "with the numbers and a latency histogram, RECORD.svg) and, with --key, "
                    "the signed acceptance record RECORD that a policy with "
                    "acceptance_required asks for. A failed acceptance writes both (the record "
                    "says it failed and satisfies no policy) and exits 1. SIGTERM or Ctrl-C "
                    "stops it at its next step, with nothing written; a second one at once.",
        epilog="example:\n  plugin-host accept demo.pha --backend numpy --trust "
               "keys/signing.pub --key keys/accept.key\n  "
               "plugin-host accept demo.pha --backend onnxruntime --trust keys/signing.pub "
               "--key keys/accept.key --runs 1000 --out demo.pha.accept-onnxruntime\n  "
               "plugin-host accept demo.pha --backend numpy --policy device.toml --check")
    _trust_arguments(p, policy=True)
    p.add_argument("--backend", required=True, metavar="NAME",
                   help="the backend to accept the artifact on (the record is bound to it)")
    p.add_argument("--key", action="append", default=[], metavar="KEY",
                   help="private key PEM signing the record (repeatable); without one only "
                        "the report is written")
    p.add_argument("--runs", type=int, default=None, metavar="N",
                   help="timed calls (default: 200)")
    p.add_argument("--warmup", type=int, default=None, metavar="N",
                   help="untimed calls first (default: a tenth of the runs, 5 to 50)")
    p.add_argument("--out", default=None, metavar="RECORD",
                   help="the record file (default: FILE.accept-BACKEND, where a policy "
                        "looks); the report goes to RECORD.html and RECORD.svg")
    p.add_argument("--policy", default=None, metavar="FILE",
                   help="policy file: trust, audited ops, sandbox requirements and limits "
                        "and allowed plugins come from it, as for infer")
    p.add_argument("--check", action="store_true",
                   help="run nothing: verify the artifact and its existing record (RECORD) "
                        "against the policy's keys with the acceptance role (needs --policy)")
    p.set_defaults(func=_cmd_accept)


@stops_between_steps
def _cmd_accept(args: argparse.Namespace) -> int:
    from ..artifacts import RollbackStore, load_private_key
    from ..artifacts.acceptance import DEFAULT_RUNS, accept_artifact
    from ..artifacts.acceptance_report import text_histogram

    if args.check:
        return _cmd_check(args)
    runs = DEFAULT_RUNS if args.runs is None else args.runs
    if runs < 1:
        raise UsageError(f"--runs {runs}: give at least 1")
    if args.warmup is not None and args.warmup < 0:
        raise UsageError(f"--warmup {args.warmup}: give 0 or more")
    keys = [load_private_key(k) for k in args.key]  # before the long run: a bad key fails now
    progress = _progress()
    with contextlib.ExitStack() as stack:
        options = (_infer_defaults(args) if args.policy is None
                   else _infer_policy(args, stack))
        options.pop("policy", None)  # acceptance is what creates the record a policy needs
        backend = options.pop("backend")
        state_dir = state_folder(args.state_dir)
        try:
            result, written = accept_artifact(
                args.file, backend=backend, executor_options=options, keys=keys, out=args.out,
                runs=runs, warmup=args.warmup, progress=progress,
                rollback=RollbackStore(state_dir))
        except AcceptanceFailedError as exc:
            result, written = exc.context.get("result"), exc.context.get("written", {})
            if result is not None:
                _show(result, written, text_histogram(result))
            raise
    _show(result, written, text_histogram(result))
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    """``--check``: the artifact verified (no worker, rollback not consulted) and its record
    verified with the policy's keys, as the daemon would."""
    from ..artifacts import load_verified
    from ..artifacts.acceptance_record import default_record_path, verify_record
    from ..policy import load_policy

    if args.policy is None:
        raise UsageError("--check needs --policy: the keys trusted for acceptance records "
                         "come from it")
    if args.trust or args.key:
        raise UsageError("--check takes no --trust or --key: keys come from the policy")
    state_dir = state_folder(args.state_dir, default=False)
    policy = load_policy(args.policy, state_dir=state_dir)
    trust = policy.trust_store()
    loaded = load_verified(args.file, trust=trust, rollback=None, backends={args.backend},
                           audited_ops=policy.audited_op_pairs(args.backend),
                           limits=policy.limits.artifact_limits())
    rule = policy.artifact(loaded.name)
    path = (args.out if args.out is not None
            else rule.acceptance_record(args.backend, args.file) if rule is not None
            else default_record_path(args.file, args.backend))
    record = verify_record(path, trust=trust, name=loaded.name, version=loaded.version,
                           root_digest=loaded.manifest.root_digest,
                           manifest_sha256=loaded.manifest_sha256, backend=args.backend)
    lat = record.body["latency"]
    print(f"valid acceptance record {path}: {loaded.name} {loaded.version} on backend "
          f"{args.backend!r}, accepted {record.body['date']} by plugin-host "
          f"{record.body['host_version']}, signed by {', '.join(record.signers)}; p50 "
          f"{lat['p50_ms']:.3f} ms, p99 {lat['p99_ms']:.3f} ms, max {lat['max_ms']:.3f} ms "
          f"over {lat['runs']} runs (declared worst case {lat['budget_ms']:g} ms)")
    return 0


def _show(result, written: dict, histogram: str) -> None:
    verdict = "accepted" if result.passed else "NOT accepted"
    print(f"{verdict}: {result.name} {result.version} on backend {result.backend!r} "
          f"(sandbox: {', '.join(result.sandbox) or 'none'})")
    for o in result.outputs:
        print(f"  output {o.name:<12} {'pass' if o.passed else 'FAIL'}  max |diff| "
              f"{o.max_abs_error:.3g}  (rtol {o.rtol:g}, atol {o.atol:g}; "
              f"{o.mismatches}/{o.elements} outside)")
    print(f"  {result.golden_cases} golden case(s); latency p50 {result.p50_ms:.3f} ms, p99 "
          f"{result.p99_ms:.3f} ms, max {result.max_ms:.3f} ms over {result.runs} runs "
          f"(declared worst case {result.budget_ms:g} ms)" if result.runs else
          f"  {result.golden_cases} golden case(s); no latency samples")
    print(histogram)
    if "record" in written:
        print(f"wrote the signed record {written['record']}")
    else:
        print("no --key: no record written (the report only)", file=sys.stderr)
    if "html" in written:
        print(f"wrote the report {written['html']} and {written['svg']}")
