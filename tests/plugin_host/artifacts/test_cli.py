"""The artifact verbs of the plugin-host command: keygen, build, sign, verify, inspect, infer."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from plugin_host.cli import main
from plugins.demo_model import demo_inputs

from tests.signals import signalled_before, stop_signals_at_defaults

VERBS = ("keygen", "build", "sign", "verify", "inspect", "infer")


@pytest.fixture(autouse=True)
def _state_home(tmp_path, monkeypatch):
    """Keep the default rollback state out of the real home directory."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))


def _run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _refusal(capsys, *argv) -> str:
    code, out, err = _run(capsys, *argv)
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 1, (code, err)
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """keygen x2 and build --demo once for the module (the demo build takes about a second)."""
    root = tmp_path_factory.mktemp("cli")
    assert main(["keygen", "--out", str(root / "keys")]) == 0
    assert main(["keygen", "--out", str(root / "keys"), "--name", "second"]) == 0
    assert main(["build", "--demo", "--out", str(root / "demo.pha"), "--version", "1.1.0",
                 "--latency-ms", "40", "--tolerance", "1e-4,1e-5"]) == 0
    return root


@pytest.fixture
def ws(workspace, tmp_path) -> Path:
    for item in workspace.iterdir():
        target = tmp_path / item.name
        if item.is_dir():
            shutil.copytree(item, target)
        else:
            shutil.copy2(item, target)
    return tmp_path


def test_every_verb_has_help_with_an_example(capsys):
    for verb in VERBS:
        with pytest.raises(SystemExit) as info:
            main([verb, "--help"])
        assert info.value.code == 0
        out = capsys.readouterr().out
        assert "example:" in out and f"plugin-host {verb}" in out, verb


def test_help_through_the_console_script():
    out = subprocess.run([sys.executable, "-m", "plugin_host.cli", "verify", "--help"],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    assert "--trust" in out and "example" in out


def test_keygen_writes_a_0600_private_key(tmp_path, capsys):
    code, out, _ = _run(capsys, "keygen", "--out", tmp_path / "k")
    assert code == 0 and "key id:" in out
    assert os.stat(tmp_path / "k" / "signing.key").st_mode & 0o777 == 0o600
    assert "-----BEGIN PUBLIC KEY-----" in (tmp_path / "k" / "signing.pub").read_text()
    assert "already exists" in _refusal(capsys, "keygen", "--out", tmp_path / "k")


def test_sign_verify_inspect(ws, capsys):
    art, keys = ws / "demo.pha", ws / "keys"
    line = _refusal(capsys, "verify", art, "--trust", keys / "signing.pub",
                    "--state-dir", ws / "state")
    assert "no signature" in line
    code, out, _ = _run(capsys, "sign", art, "--key", keys / "signing.key")
    assert code == 0 and "1 signature(s)" in out
    code, out, _ = _run(capsys, "verify", art, "--trust", keys / "signing.pub",
                        "--state-dir", ws / "state")
    assert code == 0 and "verified" in out and "demo 1.1.0" in out
    assert not (ws / "state" / "rollback.json").exists()  # verify does not record

    code, out, _ = _run(capsys, "inspect", art)
    assert code == 0
    for fragment in ("UNVERIFIED", "host ABI version   1", "vision.0.bn: batchnorm v1",
                     "rtol 0.0001 atol 1e-05", "h <- h_next", "frame gap > 150 ms",
                     "sha256 ", "key id ", "golden cases       2"):
        assert fragment in out, fragment
    code, out, _ = _run(capsys, "inspect", art, "--json")
    info = json.loads(out)
    assert info["manifest"]["name"] == "demo" and len(info["signatures"]) == 1
    assert info["manifest"]["tolerances"]["plan"] == {"atol": 1e-5, "rtol": 1e-4}
    assert info["manifest"]["latency_ms"] == 40.0


def test_verify_refusals_are_one_line(ws, capsys):
    art, keys = ws / "demo.pha", ws / "keys"
    assert main(["sign", str(art), "--key", str(keys / "signing.key")]) == 0
    capsys.readouterr()
    assert "not in the trust store" in _refusal(capsys, "verify", art, "--trust",
                                                keys / "second.pub")
    assert "needs 2 of 2" in _refusal(capsys, "verify", art, "--trust", keys / "signing.pub",
                                      keys / "second.pub", "--threshold", "2")
    kid = json.loads(_run(capsys, "inspect", art, "--json")[1])["signatures"][0]["key_id"]
    assert "revoked" in _refusal(capsys, "verify", art, "--trust", keys / "signing.pub",
                                 "--revoke", kid)
    data = bytearray(art.read_bytes())
    data[len(data) // 2] ^= 0xFF
    art.write_bytes(bytes(data))
    line = _refusal(capsys, "verify", art, "--trust", keys / "signing.pub")
    assert "SHA-256 mismatch" in line
    assert "cannot read public key" in _refusal(capsys, "verify", art, "--trust",
                                                ws / "missing.pub")
    assert "cannot open artifact" in _refusal(capsys, "verify", ws / "missing.pha", "--trust",
                                              keys / "signing.pub")


def test_sign_refusals(ws, capsys):
    os.chmod(ws / "keys" / "signing.key", 0o644)
    assert "chmod 600" in _refusal(capsys, "sign", ws / "demo.pha", "--key",
                                   ws / "keys" / "signing.key")
    (ws / "junk.pha").write_bytes(b"not an artifact at all, not at all" * 3)
    assert "magic" in _refusal(capsys, "sign", ws / "junk.pha", "--key",
                               ws / "keys" / "second.key")


def test_build_options_and_refusals(tmp_path, capsys):
    assert "pass --demo" in _refusal(capsys, "build", "--out", tmp_path / "x.pha")
    assert "RTOL,ATOL" in _refusal(capsys, "build", "--demo", "--out", tmp_path / "x.pha",
                                   "--tolerance", "big")
    assert "time zone" in _refusal(capsys, "build", "--demo", "--out", tmp_path / "x.pha",
                                   "--expires", "2030-01-01T00:00:00")
    assert "semantic version" in _refusal(capsys, "build", "--demo", "--out",
                                          tmp_path / "x.pha", "--version", "1.0")
    assert not (tmp_path / "x.pha").exists()


@pytest.mark.parametrize("extra, fragment", [
    (("--seed", "-1"), "seed must be an int >= 0, got -1"),
    (("--golden-cases", "0"), "--golden-cases must be from 1 to 64, got 0"),
    (("--golden-cases", "65"), "--golden-cases must be from 1 to 64, got 65"),
])
def test_build_refuses_bad_numbers_before_any_work(tmp_path, capsys, extra, fragment):
    assert fragment in _refusal(capsys, "build", "--demo", "--out", tmp_path / "x.pha", *extra)
    assert list(tmp_path.iterdir()) == []


def test_build_refuses_an_output_it_cannot_write_before_any_work(tmp_path, capsys,
                                                                  monkeypatch):
    (tmp_path / "folder").mkdir()
    assert "cannot write artifact" in _refusal(capsys, "build", "--demo", "--out",
                                               tmp_path / "folder")
    assert f"no folder {tmp_path / 'missing'}" in _refusal(
        capsys, "build", "--demo", "--out", tmp_path / "missing" / "x.pha")
    assert f"no folder {tmp_path / 'missing'}" in _refusal(
        capsys, "build", "--onnx", tmp_path / "model.onnx", "--out",
        tmp_path / "missing" / "x.pha")
    # a write that fails late (a full disk, say) is one line too, and leaves nothing behind
    def full(path, write, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("plugin_host.artifacts.build.atomic_write", full)
    line = _refusal(capsys, "build", "--demo", "--out", tmp_path / "x.pha")
    assert f"cannot write artifact {tmp_path / 'x.pha'}: No space left on device" in line
    assert not (tmp_path / "x.pha").exists()


def test_sign_and_the_rollback_state_refuse_a_failed_write_in_one_line(ws, capsys,
                                                                        monkeypatch):
    from plugin_host.artifacts import RollbackStore
    from plugin_host.errors import StateFileError

    def full(path, write, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("plugin_host.artifacts.sign.atomic_write", full)
    assert "cannot write the signed artifact" in _refusal(
        capsys, "sign", ws / "demo.pha", "--key", ws / "keys" / "signing.key")
    monkeypatch.setattr("plugin_host.artifacts.rollback.atomic_write", full)
    with pytest.raises(StateFileError, match="cannot write the rollback state .*No space"):
        RollbackStore(ws / "state").accept("demo", "1.0.0", "ab" * 32)


def test_infer_runs_and_refuses_bad_inputs(ws, capsys):
    art, keys, state = ws / "demo.pha", ws / "keys", ws / "state"
    assert main(["sign", str(art), "--key", str(keys / "signing.key")]) == 0
    feed = demo_inputs(np.random.default_rng(3))
    np.savez(ws / "in.npz", **feed)
    code, out, _ = _run(capsys, "infer", art, "--trust", keys / "signing.pub", "--inputs",
                        ws / "in.npz", "--out", ws / "out.npz", "--state-dir", state)
    assert code == 0 and "plan float32(1, 66)" in out
    with np.load(ws / "out.npz") as result:
        assert sorted(result.files) == ["c_next", "h_next", "plan"]
        assert result["plan"].shape == (1, 66) and np.isfinite(result["plan"]).all()
    assert json.loads((state / "rollback.json").read_text())["artifacts"]["demo"]["version"] \
        == "1.1.0"

    bad = dict(feed, desire=np.array([11]))
    np.savez(ws / "bad.npz", **bad)
    line = _refusal(capsys, "infer", art, "--trust", keys / "signing.pub", "--inputs",
                    ws / "bad.npz", "--out", ws / "o.npz", "--state-dir", state)
    assert "'desire'" in line and "=11" in line
    wrong = dict(feed, img=feed["img"][:, :6])
    np.savez(ws / "wrong.npz", **wrong)
    line = _refusal(capsys, "infer", art, "--trust", keys / "signing.pub", "--inputs",
                    ws / "wrong.npz", "--out", ws / "o.npz", "--state-dir", state)
    assert "'img'" in line and "expected 12, got 6" in line
    (ws / "junk.npz").write_bytes(b"junk")
    assert "cannot read inputs" in _refusal(capsys, "infer", art, "--trust",
                                            keys / "signing.pub", "--inputs", ws / "junk.npz",
                                            "--out", ws / "o.npz", "--state-dir", state)
    line = _refusal(capsys, "infer", art, "--trust", keys / "signing.pub", "--inputs",
                    ws / "in.npz", "--out", ws / "o.npz", "--backend", "tpu", "--state-dir", state)
    assert "no backend named 'tpu'" in line and "numpy" in line
    assert not (ws / "o.npz").exists()


def test_infer_records_and_then_refuses_a_rollback(ws, capsys, tmp_path):
    keys, state = ws / "keys", ws / "state"
    older = ws / "older.pha"
    assert main(["build", "--demo", "--out", str(older), "--version", "1.0.9",
                 "--latency-ms", "40", "--golden-cases", "1"]) == 0
    for art in (ws / "demo.pha", older):
        assert main(["sign", str(art), "--key", str(keys / "signing.key")]) == 0
    np.savez(ws / "in.npz", **demo_inputs(np.random.default_rng(0)))
    capsys.readouterr()
    assert _run(capsys, "infer", ws / "demo.pha", "--trust", keys / "signing.pub", "--inputs",
                ws / "in.npz", "--out", ws / "out.npz", "--state-dir", state)[0] == 0
    line = _refusal(capsys, "verify", older, "--trust", keys / "signing.pub", "--state-dir",
                    state)
    assert "1.0.9 is older than the accepted 1.1.0" in line
    (state / "rollback.json").write_text("{broken")
    assert "corrupt" in _refusal(capsys, "verify", ws / "demo.pha", "--trust",
                                 keys / "signing.pub", "--state-dir", state)


def test_default_state_dir_follows_xdg_state_home(ws, capsys, monkeypatch, tmp_path):
    keys = ws / "keys"
    assert main(["sign", str(ws / "demo.pha"), "--key", str(keys / "signing.key")]) == 0
    np.savez(ws / "in.npz", **demo_inputs(np.random.default_rng(0)))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    capsys.readouterr()
    assert _run(capsys, "infer", ws / "demo.pha", "--trust", keys / "signing.pub", "--inputs",
                ws / "in.npz", "--out", ws / "out.npz")[0] == 0
    assert (tmp_path / "xdg" / "plugin-host" / "rollback.json").exists()


def test_inspect_survives_a_hostile_manifest(tmp_path, capsys, tamper, key_c, _tiny_template):
    """inspect reads unverified files: odd-but-schema-valid values must print, not crash."""
    path = tmp_path / "odd.pha"
    shutil.copyfile(_tiny_template, path)

    def odd(m):
        bn = next(n for n in m["graph"]["nodes"] if n["op"] == "batchnorm")
        bn["attrs"].update(eps="tiny", momentum=[1, 2], blob=b"\x00\xff")
        m["expires"] = 2**63 - 1
        m["graph"]["nodes"][0]["name"] = "x" * 200

    tamper.rewrite_manifest(path, odd, key_c)
    code, out, _ = _run(capsys, "inspect", path)
    assert code == 0 and "eps=tiny" in out and "beyond the calendar" in out
    code, out, _ = _run(capsys, "inspect", path, "--json")
    nodes = json.loads(out)["manifest"]["graph"]["nodes"]
    assert code == 0
    assert next(n for n in nodes if n["op"] == "batchnorm")["attrs"]["blob"] == "00ff"


# --- infer runs the model in a sandbox worker --------------------------------------------------


def _ran_in(out: str) -> tuple[int, list[str]]:
    """The worker pid and the protections in force that infer reports."""
    head = out.split("in sandbox worker ", 1)[1]
    pid, rest = head.split(" (", 1)
    return int(pid), rest.split(")", 1)[0].split(", ")


def test_infer_runs_the_kernels_in_a_sandbox_worker(ws, capsys, monkeypatch):
    """Not in-process: the CLI's own Executor and backend kernels are booby-trapped, and the
    run still succeeds, in a worker with another pid and every protection in force."""
    from plugin_host.executor import Executor
    from plugin_host.sandbox import SandboxRequirements
    from plugins.numpy_backend import NumpyBackend

    def trap(*args, **kwargs):
        raise AssertionError("a model ran in the CLI's process")

    monkeypatch.setattr(Executor, "run", trap)
    monkeypatch.setattr(NumpyBackend, "prepare", trap)
    art, keys = ws / "demo.pha", ws / "keys"
    assert main(["sign", str(art), "--key", str(keys / "signing.key")]) == 0
    np.savez(ws / "in.npz", **demo_inputs(np.random.default_rng(3)))
    code, out, err = _run(capsys, "infer", art, "--trust", keys / "signing.pub", "--inputs",
                          ws / "in.npz", "--out", ws / "out.npz", "--state-dir", ws / "state")
    assert code == 0, err
    pid, in_force = _ran_in(out)
    assert pid != os.getpid()
    assert in_force == list(SandboxRequirements.NAMES)  # without a policy: all required
    with np.load(ws / "out.npz") as result:
        assert np.isfinite(result["plan"]).all()


def _policy_file(ws: Path, *, require: str = '["seccomp", "landlock", "netns", "no_new_privs", '
                 '"uid", "rlimits"]', memory_mb: int = 4096) -> Path:
    path = ws / "policy.toml"
    path.write_text(f"""format = 1
[audit]
log = "${{POLICY_DIR}}/audit.jsonl"
[trust]
default_threshold = 1
[[trust.key]]
file = "keys/signing.pub"
roles = ["artifact"]
[[plugin]]
name = "numpy_backend"
kind = "inference-hardware"
[[plugin]]
name = "demo_model"
kind = "model-layer"
[sandbox]
require = {require}
[limits]
memory_mb = {memory_mb}
call_timeout_ms = 5000
""")
    return path


def test_infer_with_a_policy(ws, capsys):
    from plugin_host.audit import read_audit_log

    art, keys, state = ws / "demo.pha", ws / "keys", ws / "state"
    assert main(["sign", str(art), "--key", str(keys / "signing.key")]) == 0
    feed = demo_inputs(np.random.default_rng(3))
    np.savez(ws / "in.npz", **feed)
    policy = _policy_file(ws)
    code, out, err = _run(capsys, "infer", art, "--policy", policy, "--inputs", ws / "in.npz",
                          "--out", ws / "out.npz", "--state-dir", state)
    assert code == 0, err
    pid, in_force = _ran_in(out)
    assert pid != os.getpid() and "seccomp" in in_force
    assert json.loads((state / "rollback.json").read_text())["artifacts"]["demo"]["version"] \
        == "1.1.0"
    starts = [r for r in read_audit_log(ws / "audit.jsonl") if r["action"] == "start"]
    assert [r["detail"]["pid"] for r in starts] == [pid]
    assert starts[0]["plugin"] == "sandbox" and "rlimits AS=4096M" in \
        starts[0]["detail"]["protections"]

    # the policy's limits reach the worker (units converted)
    _policy_file(ws, memory_mb=3072)
    assert _run(capsys, "infer", art, "--policy", policy, "--inputs", ws / "in.npz", "--out",
                ws / "out.npz", "--state-dir", state)[0] == 0
    starts = [r for r in read_audit_log(ws / "audit.jsonl") if r["action"] == "start"]
    assert "rlimits AS=3072M" in starts[-1]["detail"]["protections"]

    bad = dict(feed, desire=np.array([11]))
    np.savez(ws / "bad.npz", **bad)
    line = _refusal(capsys, "infer", art, "--policy", policy, "--inputs", ws / "bad.npz",
                    "--out", ws / "o.npz", "--state-dir", state)
    assert "'desire'" in line and "=11" in line
    line = _refusal(capsys, "infer", art, "--policy", policy, "--trust", keys / "signing.pub",
                    "--inputs", ws / "in.npz", "--out", ws / "o.npz", "--state-dir", state)
    assert "--trust" in line and "come from the policy" in line
    # trust comes from the policy: a key it does not list is not trusted
    (keys / "signing.pub").write_bytes((keys / "second.pub").read_bytes())
    line = _refusal(capsys, "infer", art, "--policy", policy, "--inputs", ws / "in.npz",
                    "--out", ws / "o.npz", "--state-dir", state)
    assert "key" in line.lower()
    assert not (ws / "o.npz").exists()


def test_infer_needs_trust_or_a_policy(ws, capsys):
    np.savez(ws / "in.npz", **demo_inputs(np.random.default_rng(3)))
    line = _refusal(capsys, "infer", ws / "demo.pha", "--inputs", ws / "in.npz", "--out",
                    ws / "o.npz", "--state-dir", ws / "state")
    assert "--trust" in line and "--policy" in line


def test_inputs_are_sized_from_their_headers_before_any_is_read(tmp_path):
    """An .npz whose array declares 2 GiB (a compressed run of zeros would be a few MB) is
    refused from its .npy header, before numpy allocates it; an ordinary one still reads."""
    import io
    import zipfile

    from plugin_host.commands.artifact import MAX_INPUT_BYTES, _read_npz
    from plugin_host.errors import UsageError

    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": (2, 2**28)})
    bomb = tmp_path / "bomb.npz"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("img.npy", header.getvalue() + bytes(64))  # the data cut short
    with pytest.raises(UsageError, match=f"hold {2**31} bytes, more than the cap of "
                                         f"{MAX_INPUT_BYTES}"):
        _read_npz(str(bomb))
    np.savez_compressed(tmp_path / "ok.npz", img=np.ones((1, 3), np.float32))
    assert _read_npz(str(tmp_path / "ok.npz"))["img"].tolist() == [[1.0, 1.0, 1.0]]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_during_a_build_ends_it_at_the_next_step_with_no_file(
        tmp_path, capsys, monkeypatch, sig):
    """Noted (the build goes on to its next step), acted on there: nothing written."""
    import plugin_host.artifacts

    went_on: list[str] = []
    monkeypatch.setattr(plugin_host.artifacts, "build_artifact",
                        signalled_before(plugin_host.artifacts.build_artifact, sig, went_on))
    with stop_signals_at_defaults():
        code, _, err = _run(capsys, "build", "--demo", "--out", tmp_path / "demo.pha")
    assert (code, err, went_on) == (130, "interrupted\n", [sig.name])
    assert not list(tmp_path.iterdir())


def test_a_stop_signal_during_infer_ends_it_before_the_outputs_are_written(ws, capsys,
                                                                          monkeypatch):
    from plugin_host.sandbox import SandboxedExecutor

    art, keys = ws / "demo.pha", ws / "keys"
    assert main(["sign", str(art), "--key", str(keys / "signing.key")]) == 0
    np.savez(ws / "in.npz", **demo_inputs(np.random.default_rng(3)))
    went_on: list[str] = []
    monkeypatch.setattr(SandboxedExecutor, "run",
                        signalled_before(SandboxedExecutor.run, signal.SIGTERM, went_on))
    with stop_signals_at_defaults():
        code, _, err = _run(capsys, "infer", art, "--trust", keys / "signing.pub", "--inputs",
                            ws / "in.npz", "--out", ws / "out.npz", "--state-dir", ws / "state")
    assert (code, err, went_on) == (130, "interrupted\n", ["SIGTERM"])
    assert not (ws / "out.npz").exists()
