"""The daemon with a policy whose [[artifact]] runs on the onnxruntime backend: first use
builds the demo artifact for onnxruntime, accepts it there in a sandbox worker, and runs
camera frames through it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def onnxruntime_policy(directory: Path) -> Path:
    """The demo policy with backend = "onnxruntime" and the onnxruntime backend's plugin
    allowed in place of the numpy backend's, as an integrator's policy lists the one backend
    it runs on (the numpy backend's plugin in the worker would import what the onnxruntime
    backend does not, and so hide what the worker lacks without it)."""
    text = (ROOT / "policies" / "demo.toml").read_text()
    text, n = re.subn(r'(\[\[artifact\]\][^\[]*?backend = )"numpy"', r'\1"onnxruntime"', text,
                      flags=re.S)
    assert n == 1, "the demo policy's [[artifact]] changed: update this test"
    text, n = re.subn(r'(\[\[plugin\]\]\s*name = )"numpy_backend"', r'\1"onnxruntime_backend"',
                      text)
    assert n == 1, "the demo policy's backend [[plugin]] changed: update this test"
    policy = directory / "ort.toml"
    policy.write_text(text)
    return policy


def test_daemon_runs_frames_on_onnxruntime(tmp_path):
    policy, state = onnxruntime_policy(tmp_path), tmp_path / "state"
    proc = subprocess.run([sys.executable, "-m", "plugin_host.cli", "run", "--policy",
                           str(policy), "--state-dir", str(state), "--frames", "5"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "on backend 'onnxruntime'" in proc.stdout  # accepted on the backend it runs on
    assert (state / "demo" / "demo.pha.accept-onnxruntime").exists()
    assert "frames run 5" in proc.stdout
    # the worker's start-up (and the acceptance's) tripped nothing: no false alarm
    audit = (state / "demo" / "audit.jsonl").read_text()
    assert '"action":"start"' in audit and '"tripwire"' not in audit
