"""``plugin-host policy check``: exit 0 with a summary, or 1 with one line per problem."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from plugin_host.artifacts import write_keypair
from plugin_host.cli import main

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("name", ["demo.toml", "device.example.toml"])
def test_shipped_policies_pass(name, capsys, tmp_path):
    assert main(["policy", "check", str(REPO / "policies" / name),
                 "--state-dir", str(tmp_path)]) == 0
    out = capsys.readouterr()
    assert out.out.startswith(f"{REPO / 'policies' / name}: ok") and out.err == ""


def test_the_summary_shows_fixed_and_image_inputs(capsys, tmp_path):
    assert main(["policy", "check", str(REPO / "policies" / "device.example.toml")]) == 0
    assert ("acceptance required; fixed input traffic_convention = [1.0, 0.0]\n"
            in capsys.readouterr().out)
    text = (REPO / "policies" / "demo.toml").read_text().replace(
        "# fixed_inputs = { speed = 0.0 }",
        "fixed_inputs = { flags = [true, false], big = [[0.5, 1.5, 2.5, 3.5, 4.5], "
        "[0, 1, 2, 3, 4]] }")
    policy = tmp_path / "demo.toml"
    policy.write_text(text)
    assert main(["policy", "check", str(policy), "--state-dir", str(tmp_path)]) == 0
    assert ("acceptance required; fixed input flags = [true, false]; fixed input big = an "
            "array of shape (2, 5)\n" in capsys.readouterr().out)
    policy.write_text((REPO / "policies" / "demo.toml").read_text().replace(
        "# fixed_inputs = { speed = 0.0 }",
        'image_inputs = { img = { color = "bgr", scale = 0.00392156862745098, mean = [0.5, 0.25, '
        '0], std = [2, 2, 2], fit = "letterbox", resize = "bilinear" } }'))
    assert main(["policy", "check", str(policy), "--state-dir", str(tmp_path)]) == 0
    assert ("acceptance required; input img a colour image (bgr, letterbox (pad 114), "
            "bilinear, (x * 0.00392157 - [0.5, 0.25, 0.0]) / [2.0, 2.0, 2.0])\n"
            in capsys.readouterr().out)
    policy.write_text((REPO / "policies" / "demo.toml").read_text().replace(
        "# fixed_inputs = { speed = 0.0 }",
        'image_inputs = { img = { fit = "crop", crop_fraction = 0.875 } }'))
    assert main(["policy", "check", str(policy), "--state-dir", str(tmp_path)]) == 0
    assert ("acceptance required; input img a colour image (rgb, crop (fraction 0.875))\n"
            in capsys.readouterr().out)


def _demo_artifact(state: Path) -> None:
    """The demo key pair and artifact in ``state``/demo, where the demo policy reads them."""
    write_keypair(state / "demo")
    assert main(["build", "--demo", "--out", str(state / "demo" / "demo.pha"),
                 "--latency-ms", "40"]) == 0


def test_check_files_checks_fixed_inputs_against_the_artifact(capsys, tmp_path):
    _demo_artifact(tmp_path)
    text = (REPO / "policies" / "demo.toml").read_text()
    policy = tmp_path / "demo.toml"
    fixed = "[artifact.fixed_inputs]\ndesire = 9\nh = 0.0\nspeed = 1.5\n"
    policy.write_text(text.replace("\n# --- plugins:", f"\n{fixed}\n# --- plugins:"))
    lines = policy.read_text().splitlines()
    capsys.readouterr()
    args = ["policy", "check", str(policy), "--state-dir", str(tmp_path), "--check-files"]
    assert main(args) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"{policy}:{lines.index('desire = 9') + 1}: artifact[0].fixed_inputs.desire: holds 9, "
        f"which is not an index of an Embedding of 8 rows (0 to 7) (input 'desire' is "
        f"int64(1,))",
        f"{policy}:{lines.index('h = 0.0') + 1}: artifact[0].fixed_inputs.h: is the recurrent "
        f"state, which the executor carries",
        f"{policy}:{lines.index('speed = 1.5') + 1}: artifact[0].fixed_inputs.speed: is not an "
        f"input of model 'demo' (its inputs: img, desire)"]
    assert main(args[:-1]) == 0  # without --check-files, only the values' form is checked
    policy.write_text(text.replace("\n# --- plugins:", "\nfixed_inputs = { desire = 7 }\n"
                                   "# --- plugins:"))
    assert main(args) == 0


def test_check_files_checks_image_inputs_against_the_artifact(capsys, tmp_path):
    _demo_artifact(tmp_path)
    text = (REPO / "policies" / "demo.toml").read_text()
    policy = tmp_path / "demo.toml"
    args = ["policy", "check", str(policy), "--state-dir", str(tmp_path), "--check-files"]
    for name, message in [
            ("img", "input 'img' is float32(1, 12, 128, 256); a colour image is a float32 or "
                    "uint8 (1, 3, h, w) or (1, h, w, 3) of a fixed size"),
            ("desire", "input 'desire' indexes an Embedding"),
            ("h", "is the recurrent state, which the executor carries")]:
        policy.write_text(text.replace("\n# --- plugins:", f'\nimage_inputs = {{ {name} = '
                                       f'"rgb" }}\n# --- plugins:'))
        line = policy.read_text().splitlines().index(f'image_inputs = {{ {name} = "rgb" }}') + 1
        capsys.readouterr()
        assert main(args) == 1
        assert capsys.readouterr().err.splitlines() == [
            f"{policy}:{line}: artifact[0].image_inputs.{name}: {message}"]
        assert main(args[:-1]) == 0  # without --check-files, only the form is checked


def test_installed_command_passes_on_the_demo_policy():
    # the README's command, exactly, through the installed entry point
    result = subprocess.run([str(Path(sys.executable).parent / "plugin-host"), "policy", "check",
                             "policies/demo.toml"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "plugin numpy_backend (inference-hardware): no capabilities" in result.stdout


def test_the_summary_says_where_co_location_puts_the_inference_thread(capsys, tmp_path):
    demo = (REPO / "policies" / "demo.toml").read_text()
    assert main(["policy", "check", str(REPO / "policies" / "demo.toml"),
                 "--state-dir", str(tmp_path)]) == 0
    assert ("co-location: the inference thread and the worker's main thread on the last CPU "
            "(auto; off when the daemon runs several cameras)" in capsys.readouterr().out)
    for value, line in (('"off"', "co-location: off (the kernel places the inference threads)"),
                        ("1", "co-location: the inference thread and the worker's main thread "
                              "on CPU 1")):
        path = tmp_path / "placed.toml"
        assert demo.count('\ncpu = "auto"') == 1
        path.write_text(demo.replace('\ncpu = "auto"', f"\ncpu = {value}", 1))
        assert main(["policy", "check", str(path), "--state-dir", str(tmp_path)]) == 0
        assert line in capsys.readouterr().out


def test_one_line_per_problem(capsys, tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('format = 1\n\n[[plugin]]\nname = "nn"\nkind = "model-layer"\n'
                    'capabilities = ["can.send", "control.publish"]\n\n[limits]\nopen_files = 0\n')
    assert main(["policy", "check", str(path)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"{path}:6: plugin[0].capabilities: plugin 'nn' is a model-layer plugin and can never "
        f"hold 'can.send': its code runs in the sandbox worker, which never gets can.send, "
        f"control.publish, panda.safety",
        f"{path}:6: plugin[0].capabilities: plugin 'nn' is a model-layer plugin and can never "
        f"hold 'control.publish': its code runs in the sandbox worker, which never gets "
        f"can.send, control.publish, panda.safety",
        f"{path}:9: limits.open_files: must be from 1 to 1048576, got 0",
    ]


def test_missing_file(capsys, tmp_path):
    assert main(["policy", "check", str(tmp_path / "nope.toml")]) == 1
    assert "cannot read the policy file" in capsys.readouterr().err


def test_check_files_and_plugins(capsys, tmp_path):
    demo = str(REPO / "policies" / "demo.toml")
    assert main(["policy", "check", demo, "--state-dir", str(tmp_path), "--check-files"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "trust.key[0].file" in err[0] and "artifact[0].file" in err[1]
    write_keypair(tmp_path / "demo")
    artifact = tmp_path / "demo" / "demo.pha"
    artifact.write_bytes(b"")  # not an artifact: its format is read, not its signatures
    assert main(["policy", "check", demo, "--state-dir", str(tmp_path), "--check-files"]) == 1
    assert f"artifact[0].file: {artifact}: file: " in capsys.readouterr().err
    assert main(["build", "--demo", "--out", str(artifact), "--latency-ms", "40"]) == 0
    assert main(["policy", "check", demo, "--state-dir", str(tmp_path), "--check-files",
                 "--check-plugins"]) == 0
    # a call timeout the artifact's declared worst case cannot fit in, as the daemon refuses
    text = Path(demo).read_text()
    assert text.count("\ncall_timeout_ms = 1000 ") == 1
    tight = tmp_path / "tight.toml"
    tight.write_text(text.replace("\ncall_timeout_ms = 1000 ", "\ncall_timeout_ms = 39 ")
                     .replace("${POLICY_DIR}", str(REPO / "policies")))
    capsys.readouterr()
    assert main(["policy", "check", str(tight), "--state-dir", str(tmp_path),
                 "--check-files"]) == 1
    assert ("limits.call_timeout_ms: 39 ms is below the declared worst-case latency of "
            "artifact 'demo' (40 ms)") in capsys.readouterr().err
    device = str(REPO / "policies" / "device.example.toml")
    assert main(["policy", "check", device, "--check-plugins"]) == 1
    err = capsys.readouterr().err
    assert "no installed package provides the entry point 'road_camera'" in err
    assert "numpy_backend" not in err
