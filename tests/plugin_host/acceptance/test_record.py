"""Acceptance through the sandbox worker, and verification of the signed record: every way a
record can be wrong is refused with its typed error."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET

import msgpack
import numpy as np
import pytest

from abi.artifact import decode, encode
from plugin_host import __version__
from plugin_host.artifacts import TrustStore, key_id
from plugin_host.artifacts.acceptance import accept_artifact, record_body, run_acceptance
from plugin_host.artifacts.acceptance_record import (ACCEPTANCE_ROLE, MAX_RECORD_BYTES,
                                                     SIGNED_CONTEXT, read_record, verify_record,
                                                     write_record)
from plugin_host.errors import (AcceptanceFailedError, AcceptanceMismatchError,
                                AcceptanceRecordError, PluginHostError, RevokedKeyError,
                                SignatureError, UntrustedKeyError)
from plugin_host.sandbox import SandboxedExecutor

from .conftest import WRONG, build_signed, ident


def test_accept_passes_and_the_record_verifies(accepted, trust, acceptor):
    path, result, files = accepted
    assert result.passed and result.reason == ""
    assert files["record"] == f"{path}.accept-numpy"
    assert result.runs == 40 and result.golden_cases == 2
    assert {o.name for o in result.outputs} == {"y", "h_next"}
    assert all(o.passed and o.mismatches == 0 and o.elements == 16 for o in result.outputs)
    assert result.min_ms <= result.p50_ms <= result.p99_ms <= result.max_ms
    assert "seccomp" in result.sandbox  # it ran in a confined worker
    record = verify_record(files["record"], trust=trust, backend="numpy", **ident(result))
    body = record.body
    assert record.signers == (key_id(acceptor),)
    assert body["backend"] == "numpy" and body["host_version"] == __version__
    assert body["artifact"]["root_digest"] == result.root_digest and body["passed"] is True
    assert len(body["latency"]["samples_us"]) == 40 and body["latency"]["criterion"] == "p99"
    assert body["latency"]["p99_ms"] == pytest.approx(result.p99_ms)
    assert body["date"].endswith("Z")


def test_the_comparison_matches_numpy_on_the_worker_outputs(accepted, trust):
    # the max errors recorded are the ones numpy gives on outputs taken from the worker
    path, result, _ = accepted
    with SandboxedExecutor(path, trust=trust) as ex:
        cases = ex.artifact.golden_cases()
        got = [ex.run(dict(inputs)) for inputs, _ in cases]
        want = [expected for _, expected in cases]
    for o in result.outputs:
        top = max(float(np.max(np.abs(g[o.name].astype(np.float64) - w[o.name])))
                  for g, w in zip(got, want))
        assert o.max_abs_error == pytest.approx(top, abs=1e-12)


def test_the_report_has_a_well_formed_svg_histogram(accepted):
    _, result, files = accepted
    svg = ET.parse(files["svg"]).getroot()
    assert svg.tag == "{http://www.w3.org/2000/svg}svg"
    bars = [r for r in svg.iter("{http://www.w3.org/2000/svg}rect") if r.find(
        "{http://www.w3.org/2000/svg}title") is not None]
    counts = [int(b.find("{http://www.w3.org/2000/svg}title").text.rsplit(": ", 1)[1])
              for b in bars]
    assert sum(counts) == result.runs
    page = open(files["html"], encoding="utf-8").read()
    assert "PASSED" in page and "<svg" in page and result.root_digest in page
    assert f"p99 {result.p99_ms:.3f} ms" in page


def _envelope(path):
    return decode(open(path, "rb").read())


def _write_envelope(path, envelope):
    with open(path, "wb") as f:
        f.write(encode(envelope))


def test_a_tampered_record_is_refused(accepted, trust, tmp_path):
    _, result, files = accepted
    env = _envelope(files["record"])
    body = decode(env["body"])
    body["latency"]["p99_ms"] = 0.001  # a better number, with the old signature
    env["body"] = encode(body)
    forged = tmp_path / "forged"
    _write_envelope(forged, env)
    with pytest.raises(SignatureError, match="does not verify"):
        verify_record(forged, trust=trust, backend="numpy", **ident(result))


def test_a_record_for_another_artifact_is_refused(accepted, trust):
    _, result, files = accepted
    for field in ("root_digest", "manifest_sha256", "name", "version"):
        other = dict(ident(result), **{field: "0" * 64 if "sha" in field or "digest" in field
                                       else "2.0.0" if field == "version" else "other"})
        with pytest.raises(AcceptanceMismatchError, match="another artifact") as exc:
            verify_record(files["record"], trust=trust, backend="numpy", **other)
        assert exc.value.context["field"] == field


def test_a_record_for_another_backend_is_refused(accepted, trust):
    _, result, files = accepted
    with pytest.raises(AcceptanceMismatchError, match="backend 'numpy', not 'onnxruntime'"):
        verify_record(files["record"], trust=trust, backend="onnxruntime", **ident(result))


def test_a_record_of_another_host_major_version_is_refused(accepted, trust):
    _, result, files = accepted
    major = int(__version__.split(".")[0])
    with pytest.raises(AcceptanceMismatchError, match="major version"):
        verify_record(files["record"], trust=trust, backend="numpy",
                      host_version=f"{major + 1}.0.0", **ident(result))
    # another minor version of the same major is fine
    verify_record(files["record"], trust=trust, backend="numpy",
                  host_version=f"{major}.99.0", **ident(result))


def test_untrusted_wrong_role_and_revoked_keys_are_refused(accepted, signer, acceptor):
    _, result, files = accepted
    nobody = TrustStore()
    nobody.add_key(signer.public_key())
    with pytest.raises(UntrustedKeyError, match="not trusted"):
        verify_record(files["record"], trust=nobody, backend="numpy", **ident(result))
    artifact_only = TrustStore()
    artifact_only.add_key(acceptor.public_key())  # the artifact role only
    with pytest.raises(UntrustedKeyError, match="'acceptance'"):
        verify_record(files["record"], trust=artifact_only, backend="numpy", **ident(result))
    revoked = TrustStore()
    kid = revoked.add_key(acceptor.public_key(), roles=(ACCEPTANCE_ROLE,))
    revoked.revoke(kid)
    with pytest.raises(RevokedKeyError, match=kid):
        verify_record(files["record"], trust=revoked, backend="numpy", **ident(result))


def test_an_unsigned_record_is_refused(accepted, trust, tmp_path):
    _, result, files = accepted
    body = decode(read_record(files["record"])[0])
    path = tmp_path / "unsigned"
    write_record(path, body, [])
    with pytest.raises(SignatureError, match="not signed"):
        verify_record(path, trust=trust, backend="numpy", **ident(result))


def test_malformed_and_hostile_files_are_refused(accepted, trust, acceptor, tmp_path):
    _, result, files = accepted
    path = tmp_path / "bad"

    def refused(data: bytes, match: str):
        path.write_bytes(data)
        with pytest.raises(AcceptanceRecordError, match=match):
            verify_record(path, trust=trust, backend="numpy", **ident(result))

    with pytest.raises(AcceptanceRecordError, match="no acceptance record"):
        verify_record(tmp_path / "missing", trust=trust, backend="numpy", **ident(result))
    refused(b"", "empty")
    with pytest.raises(AcceptanceRecordError, match="not a regular file"):
        verify_record("/dev/zero", trust=trust, backend="numpy", **ident(result))
    refused(b"\x00" * (MAX_RECORD_BYTES + 1), "cap")
    refused(b"not msgpack at all", "record")
    # a second spelling of the same map (unsorted keys) is not canonical
    env = _envelope(files["record"])
    refused(msgpack.packb(dict(reversed(list(env.items()))), use_bin_type=True), "record")
    refused(encode({"format": "something else", "format_version": 1, "body": b"",
                    "signatures": []}), "format")
    refused(encode(dict(env, signatures=[{"key_id": "zz", "signature": b"x"}])),
            r"signatures\[0\]")
    # validly signed, but not the record schema
    path.write_bytes(_signed_raw({"hello": 1}, acceptor))
    with pytest.raises(AcceptanceRecordError, match="wrong keys"):
        verify_record(path, trust=trust, backend="numpy", **ident(result))


def _signed_raw(body: dict, key) -> bytes:
    """A validly signed envelope around any body (sign_record checks the schema first)."""
    raw = encode(body)
    return encode({"format": "plugin-host acceptance record", "format_version": 1, "body": raw,
                   "signatures": [{"key_id": key_id(key),
                                   "signature": key.sign(SIGNED_CONTEXT + raw)}]})


def test_random_corruption_is_always_a_typed_refusal(accepted, trust, tmp_path):
    _, result, files = accepted
    data = open(files["record"], "rb").read()
    rng = np.random.default_rng(7)
    path = tmp_path / "mutant"
    for _ in range(150):
        mutant = bytearray(data)
        for at in rng.integers(0, len(data), size=int(rng.integers(1, 4))):
            mutant[at] = int(rng.integers(0, 256))
        if rng.random() < 0.2:
            mutant = mutant[: int(rng.integers(0, len(mutant)))]
        path.write_bytes(bytes(mutant))
        if bytes(mutant) == data:
            continue
        with pytest.raises(PluginHostError):
            verify_record(path, trust=trust, backend="numpy", **ident(result))


def test_a_backend_beyond_tolerance_fails_and_its_record_never_verifies(signer, acceptor, trust,
                                                                       tmp_path):
    path = build_signed(tmp_path / "small.pha", signer)
    options = {"trust": trust, "plugin_modules": [WRONG], "kernel_overrides": {"relu": WRONG}}
    with pytest.raises(AcceptanceFailedError, match="beyond tolerance") as exc:
        accept_artifact(path, backend="numpy", executor_options=options, keys=[acceptor],
                        runs=10)
    result, written = exc.value.context["result"], exc.value.context["written"]
    assert not result.numerics_passed and not result.passed
    assert {o.name for o in result.outputs if not o.passed} == {"y", "h_next"}
    assert "FAILED" in open(written["html"], encoding="utf-8").read()
    with pytest.raises(AcceptanceFailedError, match="FAILED"):
        verify_record(written["record"], trust=trust, backend="numpy", **ident(result))


def test_golden_outputs_altered_before_signing_fail(signer, acceptor, trust, tmp_path,
                                                    monkeypatch):
    # the reference that computed the goldens was wrong (tanh shifted by 1e-3): the honest
    # backend in the worker cannot reproduce them within the declared tolerance
    import plugins.numpy_backend as nb

    real = nb.FACTORIES["tanh"]
    monkeypatch.setitem(nb.FACTORIES, "tanh", lambda *a: (lambda x: real(*a)(x) + 1e-3))
    path = build_signed(tmp_path / "altered.pha", signer)
    monkeypatch.setitem(nb.FACTORIES, "tanh", real)
    with pytest.raises(AcceptanceFailedError, match="beyond tolerance") as exc:
        accept_artifact(path, backend="numpy", executor_options={"trust": trust},
                        keys=[acceptor], runs=5)
    worst = max(o.max_abs_error for o in exc.value.context["result"].outputs)
    assert worst == pytest.approx(1e-3, rel=1e-2)


def test_a_tolerance_of_zero_on_a_case_that_differs_fails(signer, trust, tmp_path,
                                                         monkeypatch):
    import plugins.numpy_backend as nb

    real = nb.FACTORIES["tanh"]
    monkeypatch.setitem(nb.FACTORIES, "tanh", lambda *a: (lambda x: np.nextafter(
        real(*a)(x), np.float32(2))))  # one ulp up: the smallest possible difference
    path = build_signed(tmp_path / "zero.pha", signer, tolerance=(0.0, 0.0))
    monkeypatch.setitem(nb.FACTORIES, "tanh", real)
    with SandboxedExecutor(path, trust=trust) as ex:
        result = run_acceptance(ex, runs=3)
    assert not result.passed and "rtol 0 atol 0" in result.reason
    assert all(0 < o.max_abs_error < 1e-6 for o in result.outputs)


def test_latency_over_the_budget_fails(accepted, trust):
    path, _, _ = accepted
    ticks = iter(range(0, 10**12, 60_000_000))  # every call "takes" 60 ms; the budget is 50
    with SandboxedExecutor(path, trust=trust) as ex:
        result = run_acceptance(ex, runs=8, warmup=2, clock=lambda: next(ticks))
    assert result.numerics_passed and not result.latency_passed
    assert result.p99_ms == pytest.approx(60.0) and result.budget_ms == 50.0
    assert "over the declared worst case 50 ms" in result.reason
    assert record_body(result)["passed"] is False


def test_the_record_is_canonical_and_bound_to_the_host_version(accepted):
    _, _, files = accepted
    data = open(files["record"], "rb").read()
    assert encode(decode(data)) == data  # one spelling
    body_bytes, signatures = read_record(files["record"])
    assert len(signatures) == 1 and encode(decode(body_bytes)) == body_bytes
    assert os.path.getsize(files["record"]) < MAX_RECORD_BYTES
