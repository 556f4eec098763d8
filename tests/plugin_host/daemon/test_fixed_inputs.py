"""The daemon feeds the values of the policy's ``fixed_inputs`` to a model's inputs no camera
makes (openpilot's vision models take ``traffic_convention`` and ``desire`` beside the images),
on every frame, and refuses at load a model input left without one or a value that does not
fit, naming the policy line."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from plugin_host.daemon import Daemon, DaemonOptions, EventLog, LineSink
from plugin_host.errors import PluginHostError
from plugin_host.policy import load_policy

EMBEDDING = np.arange(32, dtype=np.float32).reshape(8, 4) / 8


def _graph():
    from plugins import nn
    from plugin_host.builder import GraphBuilder

    b = GraphBuilder("driving")
    img = b.input("img", (1, 12, 16, 32), "uint8", "NCHW")
    tc = b.input("traffic_convention", (1, 2), "float32", "NC")
    desire = b.input("desire", (1,), "int64", "N")
    emb = nn.Embedding(8, 4)
    emb.weight = EMBEDDING.copy()
    b.output(b.op("cast", img, name="pixels", dtype="float32"), "pixels", "NCHW")
    b.output(b.op("relu", tc, name="tc"), "tc", "NC")
    b.output(b.layer("desire_emb", emb, desire), "emb", "NC")
    return b.build()


@pytest.fixture(scope="module")
def driving(demo_state, tmp_path_factory) -> tuple[Path, Path, Path]:
    """(demo policy copy, state with the demo key, the signed 'driving' artifact)."""
    from plugin_host.artifacts import build_artifact, load_private_key, sign_artifact
    from plugin_host.plugins import get_backend, get_plugin_manager

    policy, state = demo_state
    folder = tmp_path_factory.mktemp("fixed")
    mine = folder / "state"
    shutil.copytree(state, mine)
    artifact = folder / "driving.pha"
    build_artifact(_graph(), artifact, version="1.0.0", backends=["numpy"],
                   reference_backend=get_backend(get_plugin_manager(), "numpy"),
                   latency_ms=50.0)
    sign_artifact(artifact, load_private_key(mine / "demo" / "signing.key"))
    return policy, mine, artifact


def _policy(driving, fixed: str) -> Path:
    """The demo policy pointed at the 'driving' artifact (no acceptance record), a 128 x 64
    camera, and ``fixed`` as the artifact's last lines."""
    policy, _, artifact = driving
    text = policy.read_text()
    text, n = re.subn(r'name = "demo"(\s*file = )"[^"]*"', rf'name = "driving"\1"{artifact}"',
                      text)
    assert n == 1, "the demo policy's [[artifact]] changed: update this test"
    text, n = re.subn(r"acceptance_required = true", "acceptance_required = false", text)
    assert n == 1
    text, n = re.subn(r"\n# --- plugins", f"\n{fixed}\n\n# --- plugins", text)
    assert n == 1, "the demo policy's plugin section changed: update this test"
    text = text.replace("width = 1928", "width = 128").replace("height = 1208", "height = 64")
    out = artifact.parent / f"policy-{abs(hash(fixed))}.toml"
    out.write_text(text)
    return out


def _daemon(policy: Path, state: Path, frames: int = 4):
    sink = LineSink()
    daemon = Daemon(load_policy(policy, state_dir=state), state_dir=state,
                    events=EventLog(sink), say=lambda _: None,
                    options=DaemonOptions(frames=frames, stats_interval=0.5))
    return daemon, sink.lines


def test_fixed_values_reach_the_model_on_every_frame(driving):
    policy = _policy(driving, "fixed_inputs = { traffic_convention = [1.0, 0.5], desire = 3 }")
    daemon, lines = _daemon(policy, driving[1])
    daemon.load()
    try:
        seen = []
        daemon.plugins.broker.topics["model"].connect(lambda m: seen.append(m.data["outputs"]))
        summary = daemon.run()
    finally:
        daemon.close()
    assert summary["frames_run"] >= 4 and len(seen) == summary["frames_run"]
    for outputs in seen:
        assert outputs["tc"].tolist() == [[1.0, 0.5]]
        assert np.array_equal(outputs["emb"], EMBEDDING[3:4])
        assert outputs["pixels"].max() > 0  # the image still comes from the camera
    assert any('"fixed_inputs":["traffic_convention","desire"]' in line for line in lines)


def test_an_input_without_a_value_is_refused_at_load(driving):
    daemon, _ = _daemon(_policy(driving, "fixed_inputs = { desire = 3 }"), driving[1])
    with pytest.raises(PluginHostError, match=r"traffic_convention float32\(1, 2\) .*any "
                                              r"other input needs a value in the policy's "
                                              r"fixed_inputs"):
        daemon.load()
    daemon.close()


def test_a_value_that_does_not_fit_is_refused_naming_the_policy_line(driving):
    policy = _policy(driving, "[artifact.fixed_inputs]\ntraffic_convention = [1.0, 0.5]\n"
                              "desire = 9")
    line = policy.read_text().splitlines().index("desire = 9") + 1
    daemon, _ = _daemon(policy, driving[1])
    with pytest.raises(PluginHostError) as info:
        daemon.load()
    daemon.close()
    assert str(info.value).startswith(f"{policy}:{line}: fixed_inputs.desire holds 9, which is "
                                      f"not an index of an Embedding of 8 rows (0 to 7)")
