"""An integrator's path end to end, through the command line only: an ONNX model of their own
(a uint8 camera image converted inside the model, and a ``traffic_convention`` input no camera
makes, as openpilot's vision models take them) built into an artifact, signed, accepted on a
backend, and run by the daemon on camera frames under a policy that trusts their key, requires
the acceptance record and fixes ``traffic_convention``; and a classifier's path, whose input
is a colour image described in the policy's ``image_inputs``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

ROOT = Path(__file__).resolve().parents[2]


class _Vision(torch.nn.Module):
    """img uint8 (1, 12, 16, 32): two YUV frames of a 64 x 32 model frame, as bytes;
    traffic_convention float32 (1, 2)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(12, 4, 3, stride=2, padding=1)
        self.head = torch.nn.Linear(4 * 8 * 16 + 2, 6)

    def forward(self, img, traffic_convention):
        x = torch.relu(self.conv(img.float() / 255.0 - 0.5)).flatten(1)
        return self.head(torch.cat([x, traffic_convention], dim=1))


def _cli(*argv: str, timeout: float = 300) -> tuple[str, str]:
    proc = subprocess.run([sys.executable, "-m", "plugin_host.cli", *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, (argv[0], proc.stdout[-1500:], proc.stderr[-2000:])
    return proc.stdout, proc.stderr


class _Classifier(torch.nn.Module):
    """images float32 (1, 3, 24, 40), normalized as torchvision's models take them."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, images):
        return self.head(torch.relu(self.conv(images)).mean((2, 3)))


def _export(module: type, args: tuple, path: Path, inputs: list[str], outputs: list[str]
            ) -> Path:
    """``module`` (seeded weights) exported to ``path`` by the legacy exporter."""
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module().eval(), args, str(path), dynamo=False, input_names=inputs,
                          output_names=outputs)
    return path


def _build_sign_accept(model: Path, artifact: Path, keys: Path, backend: str) -> str:
    """The integrator's commands: a new key pair in ``keys``, ``model`` built into ``artifact``,
    signed, and accepted on ``backend``; returns what the build printed."""
    _cli("keygen", "--out", str(keys))
    built, _ = _cli("build", "--onnx", str(model), "--out", str(artifact), "--version", "1.0.0",
                    "--latency-ms", "40")
    _cli("sign", "--key", str(keys / "signing.key"), str(artifact))
    _cli("accept", str(artifact), "--backend", backend, "--trust", str(keys / "signing.pub"),
         "--key", str(keys / "signing.key"), "--runs", "20")
    return built


def _policy(folder: Path, artifact: Path, key: Path, backend: str,
            inputs: str = "fixed_inputs = { traffic_convention = [1.0, 0.0] }",
            name: str = "vision") -> Path:
    """The demo policy's shape, pointed at the integrator's artifact and key, camera smaller,
    ``inputs`` in the [[artifact]]."""
    text = (ROOT / "policies" / "demo.toml").read_text()
    text, n = re.subn(r'file = "\$\{STATE_DIR\}/demo/signing.pub"', f'file = "{key}"', text)
    assert n == 1, "the demo policy's trust key changed: update this test"
    text, n = re.subn(r'name = "demo"(\s*file = )"[^"]*"(\s*backend = )"numpy"',
                      rf'name = "{name}"\1"{artifact}"\2"{backend}"', text)
    assert n == 1, "the demo policy's [[artifact]] changed: update this test"
    text = text.replace("width = 1928", "width = 128").replace("height = 1208", "height = 64")
    text = text.replace("# fixed_inputs = { speed = 0.0 }", inputs)
    text += (f'\n[[plugin]]\nname = "{backend}_backend"\nkind = "inference-hardware"\n'
             f'capabilities = []\n') if backend != "numpy" else ""
    policy = folder / f"{name}.toml"
    policy.write_text(text)
    return policy


@pytest.mark.parametrize("backend", ["numpy", "onnxruntime"])
def test_an_onnx_model_with_a_uint8_image_runs_in_the_daemon(backend, tmp_path):
    model = _export(_Vision, (torch.zeros(1, 12, 16, 32, dtype=torch.uint8), torch.zeros(1, 2)),
                    tmp_path / "vision.onnx", ["img", "traffic_convention"], ["plan"])
    keys, artifact = tmp_path / "keys", tmp_path / "vision.pha"
    built = _build_sign_accept(model, artifact, keys, backend)
    assert "built" in built and "cast" in built
    assert Path(f"{artifact}.accept-{backend}").exists()
    policy = _policy(tmp_path, artifact, keys / "signing.pub", backend)
    out, log = _cli("run", "--policy", str(policy), "--state-dir", str(tmp_path / "state"),
                    "--frames", "5")
    assert "running artifact 'vision'" in out and "frames run 5" in out, out[-1500:]
    loaded = [e for e in map(json.loads, log.splitlines()) if e["event"] == "loaded"]
    assert len(loaded) == 1 and loaded[0]["artifact"] == "vision", log[-2000:]
    assert loaded[0]["backend"] == backend and loaded[0]["acceptance"] is True
    assert loaded[0]["fixed_inputs"] == ["traffic_convention"]


@pytest.mark.parametrize("backend", ["numpy", "onnxruntime"])
def test_an_onnx_classifier_of_a_colour_image_runs_in_the_daemon(backend, tmp_path):
    model = _export(_Classifier, (torch.zeros(1, 3, 24, 40),), tmp_path / "classifier.onnx",
                    ["images"], ["logits"])
    keys, artifact = tmp_path / "keys", tmp_path / "classifier.pha"
    _build_sign_accept(model, artifact, keys, backend)
    policy = _policy(tmp_path, artifact, keys / "signing.pub", backend,
                     'image_inputs = { images = { color = "rgb", scale = 0.00392156862745098, '
                     'mean = [0.485, 0.456, 0.406], std = [0.229, 0.224, 0.225] } }',
                     name="classifier")
    out, _ = _cli("policy", "check", str(policy), "--state-dir", str(tmp_path / "state"),
                  "--check-files")
    assert "input images a colour image (rgb, (x * 0.00392157" in out
    out, log = _cli("run", "--policy", str(policy), "--state-dir", str(tmp_path / "state"),
                    "--frames", "5")
    assert "running artifact 'classifier'" in out and "frames run 5" in out, out[-1500:]
    loaded = [e for e in map(json.loads, log.splitlines()) if e["event"] == "loaded"]
    assert loaded[0]["image_inputs"] == {"images": "rgb"} and loaded[0]["fixed_inputs"] == []
