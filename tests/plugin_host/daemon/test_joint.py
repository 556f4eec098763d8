"""A model that takes the frames of several cameras in one call (an artifact's
``camera_inputs``, as openpilot's vision model takes the road and the wide camera): one
worker, one run per matched set, each image made from its own camera's frame."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from plugin_host.errors import PluginHostError, PolicyError
from plugin_host.frames.convert import nv12_to_yuv6
from plugin_host.policy import load_policy
from plugins.cameras.synthetic import synthetic_pattern

from .conftest import (build_signed, events, multi_camera_policy, own_artifact, point_at,
                       quiet_daemon, replace_while_running, run_collecting, running,
                       wait_until)

CAMERAS = [{"name": "road"}, {"name": "wide", "width": 256, "height": 128}]


def _graph():
    from plugin_host.builder import GraphBuilder

    b = GraphBuilder("vision")
    for name in ("img", "big_img"):
        x = b.input(name, (1, 12, 16, 32), "uint8", "NCHW")
        b.output(b.op("cast", x, name=f"{name}_f", dtype="float32"), f"{name}_out", "NCHW")
    h = b.state("h", (1, 4), "float32", "NC")
    b.output(b.op("identity", h, name="h_id"), "h_next", "NC", state_of="h")
    return b.build()


@pytest.fixture(scope="module")
def vision(demo_state, tmp_path_factory) -> tuple[Path, Path, Path]:
    """(demo policy copy, state with the demo key, the signed 'vision' artifact)."""
    return own_artifact(demo_state, tmp_path_factory, _graph(), "vision")


def _policy(vision, inputs: str, *, use: list[str] | None = None, name: str) -> Path:
    """The demo policy with two synthetic cameras (road 128 x 64, wide 256 x 128), pointed at
    the 'vision' artifact (no acceptance record) with ``inputs`` as its camera_inputs."""
    policy, _, artifact = vision
    path = multi_camera_policy(policy, CAMERAS, use=use, width=128, height=64, name=name)
    text = point_at(path.read_text(), "vision", artifact, f"camera_inputs = {inputs}")
    path.write_text(text)
    return path


def _daemon(policy: Path, state: Path, **options):
    return quiet_daemon(policy, state, **{"frames": 5, **options})


def _current(layout, frame_id: int) -> np.ndarray:
    """The current frame's half of a (1, 12, 16, 32) stack made from synthetic frame
    ``frame_id`` of a camera of ``layout``."""
    planes = synthetic_pattern(layout, frame_id)
    return nv12_to_yuv6(planes["Y"], planes["UV"], width=64, height=32, dtype=np.uint8)


def test_each_image_is_made_from_its_own_cameras_frame_in_one_worker(vision):
    policy = _policy(vision, '{ img = "road", big_img = "wide" }', name="joint.toml")
    daemon, lines = _daemon(policy, vision[1])

    def one_worker(daemon):
        assert [s.name for s in daemon.streams] == ["road", "wide"]
        assert daemon.streams[0].executor is daemon.streams[1].executor  # one worker

    summary, seen, layouts = run_collecting(daemon, one_worker)
    assert summary["cameras"]["road"]["frames_run"] >= 5
    assert summary["cameras"]["wide"]["frames_run"] == summary["cameras"]["road"]["frames_run"]
    assert len(seen) == summary["matched_sets"] == summary["cameras"]["road"]["frames_run"]
    assert summary["worker_restarts"] == 0 and summary["resets"] == 0
    previous = None
    for message in seen:
        frames, outputs = message["frames"], message["outputs"]
        assert set(frames) == {"road", "wide"} and message["camera"] == "road"
        assert message["image_geometry"] == {}  # YUV stacks only
        road = _current(layouts["road"], frames["road"])
        wide = _current(layouts["wide"], frames["wide"])
        assert not np.array_equal(road, wide)  # the two cameras' frames differ here
        assert np.array_equal(outputs["img_out"][0, 6:], road)
        assert np.array_equal(outputs["big_img_out"][0, 6:], wide)
        # the previous half: the set before's frame (the first set: the frame itself)
        before = road if previous is None else previous
        assert np.array_equal(outputs["img_out"][0, :6], before)
        previous = road
    loaded = events(lines, "loaded")
    assert loaded[0]["cameras"] == ["road", "wide"] and len(loaded[0]["worker_pids"]) == 1


def test_camera_inputs_that_cannot_be_run_are_refused(vision):
    state = vision[1]
    policy = _policy(vision, '{ img = "road", big_img = "rear" }', use=["road", "rear"],
                     name="unknown.toml")
    with pytest.raises(PolicyError, match=r"camera_inputs: no camera named 'rear'; the "
                                          r"allowed camera plugins provide: road, wide"):
        _daemon(policy, state)[0].load()
    policy = _policy(vision, '{ img = "road" }', use=["road"], name="one.toml")
    with pytest.raises(PluginHostError, match=r"big_img uint8\(1, 12, 16, 32\) \(it feeds the "
                                              r"images of camera_inputs"):
        _daemon(policy, state)[0].load()
    policy = _policy(vision, '{ img = "road", h = "wide" }', name="state.toml")
    with pytest.raises(PluginHostError, match=r"camera_inputs.h is the recurrent state"):
        _daemon(policy, state)[0].load()
    policy = _policy(vision, '{ img = "road", big_img = "wide" }', name="cli.toml")
    with pytest.raises(PluginHostError, match=r"runs on the frames of road, wide together "
                                              r"\(its camera_inputs\): --camera cannot"):
        _daemon(policy, state, camera="road")[0].load()


def test_the_policy_check_wants_use_to_list_the_same_cameras(vision):
    policy = _policy(vision, '{ img = "road", big_img = "wide" }', use=["road"],
                     name="use.toml")
    with pytest.raises(PolicyError, match=r"cameras.use: lists road, but artifact 'vision' "
                                          r"runs on the frames of road, wide together"):
        load_policy(policy)


def test_a_reset_for_any_camera_forgets_every_previous_frame(vision):
    policy = _policy(vision, '{ img = "road", big_img = "wide" }', name="reset.toml")
    daemon, _ = _daemon(policy, vision[1], frames=6)
    daemon.load()
    seen = []

    def sink(message):
        seen.append(message.data)
        if len(seen) == 3:
            daemon.streams[1].contract.request_reset("test")  # the wide camera's contract

    try:
        daemon.plugins.broker.topics["model"].connect(sink)
        layouts = {c.name: c.layout for c in daemon.cameras}
        summary = daemon.run()
    finally:
        daemon.close()
    assert summary["resets"] == 1 and len(seen) >= 5
    for i, message in enumerate(seen):
        frames, outputs = message["frames"], message["outputs"]
        for name, camera in (("img_out", "road"), ("big_img_out", "wide")):
            current = _current(layouts[camera], frames[camera])
            stacked_with_itself = np.array_equal(outputs[name][0, :6], current)
            assert stacked_with_itself == (i in (0, 3)), (i, name)


def test_a_worker_killed_restarts_once_for_every_camera(vision):
    from .worker_kill import kill_before_call

    policy = _policy(vision, '{ img = "road", big_img = "wide" }', name="kill.toml")
    daemon, lines = _daemon(policy, vision[1], frames=8)
    daemon.load()
    ex = daemon.streams[0].executor
    old_pid = ex.pid
    # (the model's calls take microseconds, too short to be caught running: the worker is
    # killed while idle, just before the third call)
    kill = kill_before_call(ex, after=3)
    summary = daemon.run()
    assert kill.killed_pid == old_pid and kill.raised and kill.after_kill >= 3
    assert summary["worker_restarts"] == 1
    assert summary["resets_by_reason"] == {"worker restart": 1}
    for camera in ("road", "wide"):
        assert summary["cameras"][camera]["not_run"] == 1
        assert summary["cameras"][camera]["frames_run"] >= 8
    assert summary["leaks_at_stop"] == 0 and summary["leases_outstanding"] == 0
    assert len(events(lines, "worker_died")) == 1


def test_a_new_version_is_swapped_in_for_every_camera_at_once(vision, tmp_path):
    policy_src, state_src, artifact_src = vision
    state, artifact = tmp_path / "state", tmp_path / "vision.pha"
    shutil.copytree(state_src, state)
    shutil.copy(artifact_src, artifact)
    policy = _policy((policy_src, state, artifact), '{ img = "road", big_img = "wide" }',
                     name="swap.toml")
    new = tmp_path / "new.pha"
    build_signed(_graph(), new, state, version="1.1.0")
    daemon, lines = _daemon(policy, state, frames=None, duration=60.0, swap_poll=0.2)
    daemon.load()
    with running(daemon):
        old = daemon.executor
        replace_while_running(daemon, new, artifact, lambda: daemon.artifact_swaps == 1)
        ex = daemon.executor
        assert ex is not old and ex.manifest.version == "1.1.0"
        assert all(s.executor is ex for s in daemon.streams)
        wait_until(lambda: old.pid is None)  # the old worker is closed
    swapped = events(lines, "artifact_swapped")
    assert len(swapped) == 1 and len(swapped[0]["worker_pids"]) == 1
