"""An integrator's path end to end, through the command line only: an ONNX model of their own
(a uint8 camera image converted inside the model, and a ``traffic_convention`` input no camera
makes, as openpilot's vision models take them) built into an artifact, signed, accepted on a
backend, and run by the daemon on camera frames under a policy that trusts their key, requires
the acceptance record and fixes ``traffic_convention``."""

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


def _policy(folder: Path, artifact: Path, key: Path, backend: str) -> Path:
    """The demo policy's shape, pointed at the integrator's artifact and key, camera smaller."""
    text = (ROOT / "policies" / "demo.toml").read_text()
    text, n = re.subn(r'file = "\$\{STATE_DIR\}/demo/signing.pub"', f'file = "{key}"', text)
    assert n == 1, "the demo policy's trust key changed: update this test"
    text, n = re.subn(r'name = "demo"(\s*file = )"[^"]*"(\s*backend = )"numpy"',
                      rf'name = "vision"\1"{artifact}"\2"{backend}"', text)
    assert n == 1, "the demo policy's [[artifact]] changed: update this test"
    text = text.replace("width = 1928", "width = 128").replace("height = 1208", "height = 64")
    text = text.replace("# fixed_inputs = { speed = 0.0 }",
                        "fixed_inputs = { traffic_convention = [1.0, 0.0] }")
    text += (f'\n[[plugin]]\nname = "{backend}_backend"\nkind = "inference-hardware"\n'
             f'capabilities = []\n') if backend != "numpy" else ""
    policy = folder / "vision.toml"
    policy.write_text(text)
    return policy


@pytest.mark.parametrize("backend", ["numpy", "onnxruntime"])
def test_an_onnx_model_with_a_uint8_image_runs_in_the_daemon(backend, tmp_path):
    model = tmp_path / "vision.onnx"
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(_Vision().eval(), (torch.zeros(1, 12, 16, 32, dtype=torch.uint8),
                                             torch.zeros(1, 2)),
                          str(model), dynamo=False, input_names=["img", "traffic_convention"],
                          output_names=["plan"])
    keys, artifact = tmp_path / "keys", tmp_path / "vision.pha"
    _cli("keygen", "--out", str(keys))
    built, _ = _cli("build", "--onnx", str(model), "--out", str(artifact), "--version", "1.0.0",
                 "--latency-ms", "40")
    assert "built" in built and "cast" in built
    _cli("sign", "--key", str(keys / "signing.key"), str(artifact))
    _cli("accept", str(artifact), "--backend", backend, "--trust", str(keys / "signing.pub"),
         "--key", str(keys / "signing.key"), "--runs", "20")
    assert Path(f"{artifact}.accept-{backend}").exists()
    policy = _policy(tmp_path, artifact, keys / "signing.pub", backend)
    out, log = _cli("run", "--policy", str(policy), "--state-dir", str(tmp_path / "state"),
                    "--frames", "5")
    assert "running artifact 'vision'" in out and "frames run 5" in out, out[-1500:]
    loaded = [e for e in map(json.loads, log.splitlines()) if e["event"] == "loaded"]
    assert len(loaded) == 1 and loaded[0]["artifact"] == "vision", log[-2000:]
    assert loaded[0]["backend"] == backend and loaded[0]["acceptance"] is True
    assert loaded[0]["fixed_inputs"] == ["traffic_convention"]
