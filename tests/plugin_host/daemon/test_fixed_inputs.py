"""The daemon feeds the values of the policy's ``fixed_inputs`` to a model's inputs no camera
makes (openpilot's vision models take ``traffic_convention`` and ``desire`` beside the images),
on every frame, and refuses at load a model input left without one or a value that does not
fit, naming the policy line."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from plugin_host.errors import PluginHostError

from .conftest import (build_signed, events, own_artifact, point_at, quiet_daemon,
                       replace_while_running, run_collecting, running)

EMBEDDING = np.arange(32, dtype=np.float32).reshape(8, 4) / 8


def _graph(tc_width: int):
    from plugins import nn
    from plugin_host.builder import GraphBuilder

    b = GraphBuilder("driving")
    img = b.input("img", (1, 12, 16, 32), "uint8", "NCHW")
    tc = b.input("traffic_convention", (1, tc_width), "float32", "NC")
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
    return own_artifact(demo_state, tmp_path_factory, _graph(2), "driving")


def _policy(driving, fixed: str) -> Path:
    """The demo policy pointed at the 'driving' artifact (no acceptance record), a 128 x 64
    camera, and ``fixed`` as the artifact's last lines."""
    policy, _, artifact = driving
    text = point_at(policy.read_text(), "driving", artifact, fixed)
    text = text.replace("width = 1928", "width = 128").replace("height = 1208", "height = 64")
    out = artifact.parent / f"policy-{abs(hash(fixed))}.toml"
    out.write_text(text)
    return out


def _daemon(policy: Path, state: Path, **options):
    return quiet_daemon(policy, state, **{"frames": 4, **options})


def test_fixed_values_reach_the_model_on_every_frame(driving):
    policy = _policy(driving, "fixed_inputs = { traffic_convention = [1.0, 0.5], desire = 3 }")
    daemon, lines = _daemon(policy, driving[1])
    summary, seen, _ = run_collecting(daemon)
    assert summary["frames_run"] >= 4 and len(seen) == summary["frames_run"]
    for outputs in (m["outputs"] for m in seen):
        assert outputs["tc"].tolist() == [[1.0, 0.5]]
        assert np.array_equal(outputs["emb"], EMBEDDING[3:4])
        assert outputs["pixels"].max() > 0  # the image still comes from the camera
    assert all(m["image_geometry"] == {} for m in seen)  # a YUV stack: no colour image
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


def test_a_new_version_the_value_does_not_fit_is_refused_and_the_old_kept(driving, tmp_path):
    policy_src, state_src, artifact_src = driving
    state, artifact = tmp_path / "state", tmp_path / "driving.pha"
    shutil.copytree(state_src, state)
    shutil.copy(artifact_src, artifact)
    policy = _policy((policy_src, state, artifact),
                     "fixed_inputs = { traffic_convention = [1.0, 0.5], desire = 3 }")
    new = tmp_path / "new.pha"
    build_signed(_graph(3), new, state, version="1.1.0")
    daemon, lines = _daemon(policy, state, frames=None, duration=60.0, swap_poll=0.2)
    daemon.load()
    with running(daemon):
        old = daemon.executor
        replace_while_running(daemon, new, artifact, lambda: daemon.artifact_swaps_refused == 1)
        assert daemon.executor is old
    refused = events(lines, "swap_refused")
    assert len(refused) == 1 and refused[0]["kept_version"] == "1.0.0"
    assert ("fixed_inputs.traffic_convention has shape (2,), which does not fill (1, 3)"
            in refused[0]["error"])
    assert daemon.artifact_swaps == 0
