"""``plugin-host accept``: the histogram on the terminal, the report and record on disk, one
line on stderr for a refusal."""

from __future__ import annotations

import signal
import xml.etree.ElementTree as ET

import pytest

from plugin_host.artifacts import TrustStore, load_public_key, write_keypair
from plugin_host.artifacts.acceptance_record import ACCEPTANCE_ROLE, verify_record
from plugin_host.cli import main
from plugin_host.errors import AcceptanceFailedError

from tests.signals import signalled_before, stop_signals_at_defaults

from .conftest import build_signed


@pytest.fixture
def ws(tmp_path, signer, acceptor):
    write_keypair(tmp_path / "keys", signer, name="signing")
    write_keypair(tmp_path / "keys", acceptor, name="accept")
    return tmp_path


def _accept(capsys, ws, artifact, *extra):
    code = main(["accept", str(artifact), "--backend", "numpy", "--trust",
                 str(ws / "keys" / "signing.pub"), "--state-dir", str(ws / "state"), *extra])
    out, err = capsys.readouterr()
    return code, out, err


def _trust(ws) -> TrustStore:
    store = TrustStore()
    store.add_key(load_public_key(ws / "keys" / "accept.pub"), roles=(ACCEPTANCE_ROLE,))
    return store


def test_accept_prints_the_histogram_and_writes_record_and_report(ws, signer, capsys):
    art = build_signed(ws / "small.pha", signer)
    code, out, err = _accept(capsys, ws, art, "--key", str(ws / "keys" / "accept.key"),
                             "--runs", "30", "--warmup", "3")
    assert code == 0, err
    record = ws / "small.pha.accept-numpy"
    assert out.startswith("accepted: small 1.0.0 on backend 'numpy'")
    assert "latency (30 runs, ms)" in out and "|#" in out and "<p50" in out
    assert f"wrote the signed record {record}" in out
    bars = [line for line in out.splitlines()  # not an output's "max |diff|" line
            if line.count("|") == 2 and set(line.split("|")[1]) <= {"#", " "}]
    assert sum(int(line.split("|")[2].split()[0]) for line in bars) == 30
    assert ET.parse(f"{record}.svg").getroot().tag.endswith("svg")
    assert "PASSED" in (ws / "small.pha.accept-numpy.html").read_text()
    from plugin_host.artifacts import read_manifest_unverified

    info = read_manifest_unverified(art)
    verify_record(record, trust=_trust(ws), backend="numpy", name="small", version="1.0.0",
                  root_digest=info["manifest"]["root_digest"],
                  manifest_sha256=info["manifest_sha256"])
    assert not err  # quiet in a pipe: no progress


def test_without_a_key_only_the_report_is_written(ws, signer, capsys):
    art = build_signed(ws / "small.pha", signer)
    code, out, err = _accept(capsys, ws, art, "--runs", "5", "--out", str(ws / "r" / "rec"))
    assert code == 1 and "cannot write the acceptance report" in err  # no such folder
    (ws / "r").mkdir()
    code, out, err = _accept(capsys, ws, art, "--runs", "5", "--out", str(ws / "r" / "rec"))
    assert code == 0, err
    assert "no record written" in err
    assert not (ws / "r" / "rec").exists() and (ws / "r" / "rec.html").exists()


def test_a_failed_acceptance_exits_1_with_one_line_and_a_failed_record(ws, signer, capsys,
                                                                      monkeypatch):
    import numpy as np

    import plugins.numpy_backend as nb

    real = nb.FACTORIES["tanh"]
    monkeypatch.setitem(nb.FACTORIES, "tanh", lambda *a: (lambda x: real(*a)(x) + np.float32(
        1e-2)))
    art = build_signed(ws / "bad.pha", signer)
    monkeypatch.setitem(nb.FACTORIES, "tanh", real)
    code, out, err = _accept(capsys, ws, art, "--key", str(ws / "keys" / "accept.key"),
                             "--runs", "5")
    assert code == 1
    assert len(err.strip().splitlines()) == 1 and err.startswith("plugin-host accept: ")
    assert "FAILED" in err and "beyond tolerance" in err
    assert out.startswith("NOT accepted") and "FAIL" in out and "latency (5 runs" in out
    record = ws / "bad.pha.accept-numpy"
    assert "FAILED" in (ws / "bad.pha.accept-numpy.html").read_text()
    from plugin_host.artifacts import read_manifest_unverified

    info = read_manifest_unverified(art)
    with pytest.raises(AcceptanceFailedError):
        verify_record(record, trust=_trust(ws), backend="numpy", name="small", version="1.0.0",
                      root_digest=info["manifest"]["root_digest"],
                      manifest_sha256=info["manifest_sha256"])


def test_refusals_are_one_line(ws, signer, capsys):
    art = build_signed(ws / "small.pha", signer)
    for extra, words in ((["--runs", "0"], "--runs 0"),
                         (["--backend", "nope"], "no backend named 'nope'"),
                         (["--key", str(ws / "keys" / "missing.key")], "missing.key")):
        code, out, err = _accept(capsys, ws, art, *extra)
        assert code == 1 and words in err and len(err.strip().splitlines()) == 1, err
    code, out, err = _accept(capsys, ws, ws / "keys" / "signing.pub", "--runs", "1")
    assert code == 1 and len(err.strip().splitlines()) == 1


def test_help_has_an_example(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["accept", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "example" in out and "--backend" in out and "--key" in out and "--runs" in out


@pytest.mark.parametrize("when", ["run_acceptance", "AcceptanceResult"])
def test_a_stop_signal_during_the_run_ends_it_at_the_next_step_and_writes_nothing(
        ws, signer, capsys, monkeypatch, when):
    """Noted as the golden cases start, or after the last latency call (the run goes on to its
    next step), acted on there: the worker closed, no record, no report."""
    from plugin_host.artifacts import acceptance

    art = build_signed(ws / "small.pha", signer)
    went_on: list[str] = []
    monkeypatch.setattr(acceptance, when,
                        signalled_before(getattr(acceptance, when), signal.SIGTERM, went_on))
    with stop_signals_at_defaults():
        code, out, err = _accept(capsys, ws, art, "--key", str(ws / "keys" / "accept.key"),
                                 "--runs", "30")
    assert (code, err, went_on) == (130, "interrupted\n", ["SIGTERM"])
    assert not out and sorted(p.name for p in ws.iterdir()) == ["keys", "small.pha"]


def test_a_stop_signal_during_the_latency_calls_ends_them_after_the_call_under_way(
        ws, signer, capsys, monkeypatch):
    """Not at the next tenth of the calls: the one running when the signal came is the last."""
    from plugin_host.sandbox import SandboxedExecutor

    art = build_signed(ws / "small.pha", signer)
    went_on: list[str] = []  # signalled before the 2nd timed call (a tenth is 3 calls)
    monkeypatch.setattr(SandboxedExecutor, "run", signalled_before(
        SandboxedExecutor.run, signal.SIGINT, went_on, at=2 + 2))
    with stop_signals_at_defaults():
        code, _, err = _accept(capsys, ws, art, "--runs", "30", "--warmup", "0")
    assert (code, err, went_on) == (130, "interrupted\n", ["SIGINT"])
