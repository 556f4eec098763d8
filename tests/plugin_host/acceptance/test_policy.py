"""The policy's acceptance rule: infer --policy and the daemon refuse an artifact on a backend
without a valid record, and load it with one; the ``acceptance`` key and the ``acceptance``
role."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from plugin_host.artifacts import RollbackStore, write_keypair
from plugin_host.artifacts.acceptance import accept_artifact
from plugin_host.cli import main
from plugin_host.errors import (AcceptanceRecordError, PolicyError, SignatureError,
                                UntrustedKeyError)
from plugin_host.policy import load_allowed_artifact, load_policy, require_acceptance

from .conftest import build_signed

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def ws(tmp_path, signer, acceptor):
    write_keypair(tmp_path / "keys", signer, name="signing")
    write_keypair(tmp_path / "keys", acceptor, name="accept")
    build_signed(tmp_path / "small.pha", signer)
    return tmp_path


def _policy(ws: Path, *, extra: str = "", accept_role: bool = True) -> Path:
    path = ws / "policy.toml"
    path.write_text(f"""format = 1
[audit]
log = "${{POLICY_DIR}}/audit.jsonl"
[[trust.key]]
file = "keys/signing.pub"
roles = ["artifact"]
[[trust.key]]
file = "keys/accept.pub"
roles = {'["acceptance"]' if accept_role else '["artifact"]'}
[[artifact]]
name = "small"
file = "small.pha"
backend = "numpy"
{extra}
[[plugin]]
name = "numpy_backend"
kind = "inference-hardware"
[sandbox]
require = ["seccomp", "no_new_privs"]
""")
    return path


def _loaded(policy):
    return load_allowed_artifact(policy, "small", rollback=None, available_backends={"numpy"})


def _accept(ws: Path, policy, acceptor, out=None):
    return accept_artifact(ws / "small.pha", backend="numpy",
                           executor_options={"trust": policy.trust_store()}, keys=[acceptor],
                           out=out, runs=10)


def test_required_acceptance_refuses_without_a_record_and_loads_with_one(ws, acceptor):
    policy = load_policy(_policy(ws))
    artifact = _loaded(policy)
    with pytest.raises(AcceptanceRecordError) as exc:
        require_acceptance(policy, artifact, backend="numpy")
    line = str(exc.value)
    assert "\n" not in line and "artifact 'small' on backend 'numpy' is not accepted" in line
    assert f"no acceptance record at {ws / 'small.pha.accept-numpy'}" in line
    assert "plugin-host accept" in line and f"{policy.path}:" in line
    _accept(ws, policy, acceptor)
    record = require_acceptance(policy, artifact, backend="numpy")
    assert record.passed and record.backend == "numpy"
    # the record is for numpy: the same artifact on another backend needs its own
    with pytest.raises(AcceptanceRecordError, match="accept-onnxruntime"):
        require_acceptance(policy, artifact, backend="onnxruntime")


def test_the_acceptance_key_names_the_record(ws, acceptor):
    policy = load_policy(_policy(ws, extra='acceptance = "records/small.rec"'))
    artifact = _loaded(policy)
    (ws / "records").mkdir()
    _accept(ws, policy, acceptor)  # at the default place: not where the policy looks
    with pytest.raises(AcceptanceRecordError, match=str(ws / "records" / "small.rec")):
        require_acceptance(policy, artifact, backend="numpy")
    _accept(ws, policy, acceptor, out=ws / "records" / "small.rec")
    assert require_acceptance(policy, artifact, backend="numpy").passed


def test_not_required_means_no_record_is_looked_for(ws):
    policy = load_policy(_policy(ws, extra="acceptance_required = false"))
    assert require_acceptance(policy, _loaded(policy), backend="numpy") is None


def test_records_count_only_from_keys_with_the_acceptance_role(ws, acceptor):
    policy = load_policy(_policy(ws, accept_role=False))
    _accept(ws, policy, acceptor)
    with pytest.raises(UntrustedKeyError, match="role 'acceptance'"):
        require_acceptance(policy, _loaded(policy), backend="numpy")


def test_a_bad_acceptance_key_names_file_line_and_key(ws):
    path = _policy(ws, extra="acceptance = 3")
    with pytest.raises(PolicyError) as exc:
        load_policy(path)
    assert str(exc.value).startswith(f"{path}:") and "artifact[0].acceptance" in str(exc.value)
    line = int(str(exc.value).split(":")[1])
    assert "acceptance = 3" in path.read_text().splitlines()[line - 1]


def test_infer_with_a_policy_refuses_without_a_record(ws, acceptor, capsys):
    policy_path = _policy(ws)
    np.savez(ws / "in.npz", x=np.ones((1, 16), np.float32))
    argv = ["infer", str(ws / "small.pha"), "--policy", str(policy_path), "--inputs",
            str(ws / "in.npz"), "--out", str(ws / "out.npz"), "--state-dir", str(ws / "state")]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "artifact 'small' on backend 'numpy' is not accepted" in err
    assert not (ws / "out.npz").exists()
    # a refused artifact is not recorded as the highest accepted version
    assert RollbackStore(ws / "state").accepted("small") is None
    _accept(ws, load_policy(policy_path), acceptor)
    assert main(argv) == 0, capsys.readouterr().err
    assert (ws / "out.npz").exists()
    assert RollbackStore(ws / "state").accepted("small")["version"] == "1.0.0"


def test_the_daemon_refuses_without_a_record_and_first_use_creates_one(tmp_path):
    from plugin_host.daemon import Daemon, DaemonOptions, EventLog, LineSink
    from plugin_host.daemon.demo_setup import ensure_demo_artifact

    policy_path = tmp_path / "demo.toml"
    shutil.copy(ROOT / "policies" / "demo.toml", policy_path)
    state = tmp_path / "state"
    said: list[str] = []
    assert ensure_demo_artifact(load_policy(policy_path, state_dir=state), state, said.append)
    record = state / "demo" / "demo.pha.accept-numpy"
    assert any("acceptance passed" in s and str(record) in s for s in said)
    assert record.exists() and Path(f"{record}.html").exists()
    audit = load_policy(policy_path, state_dir=state).audit.log  # the acceptance worker's
    starts = [r for r in map(json.loads, Path(audit).read_text().splitlines())
              if r["plugin"] == "sandbox" and r["action"] == "start"]
    assert starts and starts[0]["detail"]["artifact"] == "demo"

    def load():
        daemon = Daemon(load_policy(policy_path, state_dir=state), state_dir=state,
                        events=EventLog(LineSink()), say=lambda _: None,
                        options=DaemonOptions(frames=1))
        try:
            daemon.load()
        finally:
            daemon.close()

    load()  # with the record
    saved = record.read_bytes()
    record.unlink()
    load()  # the demo's first use accepts again when its record is missing (and it can sign)
    assert record.exists() and record.read_bytes() != saved
    record.unlink()
    key = state / "demo" / "signing.key"
    key.rename(tmp_path / "away.key")  # cannot sign: nothing is created, the load refuses
    with pytest.raises(AcceptanceRecordError, match="artifact 'demo' on backend 'numpy' is "
                                                    "not accepted"):
        load()
    record.write_bytes(saved[:-1] + bytes([saved[-1] ^ 1]))  # one bit of the signature
    with pytest.raises(SignatureError, match="does not verify"):
        load()


def test_make_run_from_a_fresh_state_accepts_the_demo_and_says_so(tmp_path):
    import os
    import subprocess
    import sys

    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "xdg"))
    proc = subprocess.run([sys.executable, "-m", "plugin_host.cli", "run", "--policy",
                           str(ROOT / "policies" / "demo.toml"), "--duration", "3"],
                          capture_output=True, text=True, timeout=180, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = tmp_path / "xdg" / "plugin-host" / "demo" / "demo.pha.accept-numpy"
    assert "first use: accepting" in proc.stdout and "acceptance passed" in proc.stdout
    assert f"wrote the record {record}" in proc.stdout and "stopped by duration" in proc.stdout
    assert Path(f"{record}.svg").exists() and Path(f"{record}.html").exists()


def test_accept_check_verifies_a_record_against_the_policy(ws, acceptor, capsys):
    policy_path = _policy(ws)
    argv = ["accept", str(ws / "small.pha"), "--backend", "numpy", "--policy",
            str(policy_path), "--check"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "no acceptance record" in err
    _accept(ws, load_policy(policy_path), acceptor)
    assert main(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert out.startswith(f"valid acceptance record {ws / 'small.pha.accept-numpy'}: small "
                          f"1.0.0 on backend 'numpy'")
    assert main(argv[:-1] + ["--backend", "onnxruntime", "--check", "--out",
                             str(ws / "small.pha.accept-numpy")]) == 1
    err = capsys.readouterr().err  # the artifact targets numpy only
    assert len(err.strip().splitlines()) == 1 and "targets backend(s) numpy" in err
    assert main(["accept", str(ws / "small.pha"), "--backend", "numpy", "--check"]) == 1
    assert "--check needs --policy" in capsys.readouterr().err
