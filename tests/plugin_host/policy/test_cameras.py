"""The policy's ``[cameras]`` section: which cameras the daemon runs, and the sync limit."""

from __future__ import annotations

import subprocess
import sys

import pytest

from plugin_host.errors import PolicyError
from plugin_host.policy import CameraSettings, parse_policy
from plugin_host.policy.model import stall_seconds
from plugin_host.frames.sync import DEFAULT_MAX_SKEW_MS

PATH = "/etc/ph/policy.toml"

BASE = '''\
format = 1

[[plugin]]
name = "synthetic"
kind = "camera"
[plugin.config]
cameras = [{name = "road"}, {name = "wide"}]
'''


def problems(text: str) -> list[str]:
    with pytest.raises(PolicyError) as info:
        parse_policy(text, path=PATH)
    return [str(p) for p in info.value.problems]


def test_absent_section_means_the_one_camera_and_openpilots_limit():
    policy = parse_policy(BASE, path=PATH)
    assert policy.cameras == CameraSettings()
    assert policy.cameras.use == () and policy.cameras.max_skew_ms == DEFAULT_MAX_SKEW_MS


def test_cameras_read_in_order_with_their_line():
    policy = parse_policy(BASE + '\n[cameras]\nuse = ["wide", "road"]\nmax_skew_ms = 4\n',
                          path=PATH)
    assert policy.cameras.use == ("wide", "road")
    assert policy.cameras.max_skew_ms == 4.0 and type(policy.cameras.max_skew_ms) is float
    assert policy.cameras.use_line == 10 and policy.cameras.line == 9


@pytest.mark.parametrize("section, want", [
    ('use = ["road", "road"]', f"{PATH}:10: cameras.use: camera name 'road' is listed twice"),
    ("use = []", f"{PATH}:10: cameras.use: must list at least one camera"),
    ('use = "road"', f"{PATH}:10: cameras.use: must be an array, got a string"),
    ('use = ["no spaces"]', f"{PATH}:10: cameras.use: 'no spaces' is not a valid camera name"),
    ("max_skew_ms = -1", f"{PATH}:10: cameras.max_skew_ms: must be 0 or a positive number"),
    ("max_skew_ms = inf", f"{PATH}:10: cameras.max_skew_ms: must be 0 or a positive number"),
    ('max_skew_ms = "10"', f"{PATH}:10: cameras.max_skew_ms: must be a number, got a string"),
    ("skew = 3", f"{PATH}:10: cameras.skew: unknown key 'skew'"),
    ("stall_ms = 0", f"{PATH}:10: cameras.stall_ms: must be a positive number of milliseconds"),
    ("stall_ms = nan", f"{PATH}:10: cameras.stall_ms: must be a positive number of"),
    ("stall_ms = 3600001", f"{PATH}:10: cameras.stall_ms: must be a positive number of"),
    ('stall_ms = "1s"', f"{PATH}:10: cameras.stall_ms: must be a number, got a string"),
])
def test_every_refusal_names_file_line_and_key(section, want):
    found = problems(BASE + f"\n[cameras]\n{section}\n")
    assert len(found) == 1 and found[0].startswith(want), found


def test_the_stall_time_is_the_policys_or_follows_the_cameras_rate():
    assert parse_policy(BASE, path=PATH).cameras.stall_ms is None
    policy = parse_policy(BASE + "\n[cameras]\nstall_ms = 250\n", path=PATH)
    assert policy.cameras.stall_ms == 250.0
    assert stall_seconds(250.0, 20.0) == 0.25 and stall_seconds(250.0, None) == 0.25
    assert stall_seconds(None, 20.0) == 1.0  # at least a second...
    assert stall_seconds(None, 2.0) == 2.5  # ...or five frame periods of a slow camera
    assert stall_seconds(None, None) == 1.0 and stall_seconds(None, 0) == 1.0


def test_cameras_without_a_camera_plugin_are_refused():
    text = 'format = 1\n\n[cameras]\nuse = ["road"]\n'
    assert problems(text) == [f"{PATH}:4: cameras.use: lists camera(s) road but no allowed "
                              f"[[plugin]] of kind 'camera' provides cameras"]
    denied = BASE + '\n[deny]\nplugins = ["synthetic"]\n\n[cameras]\nuse = ["road"]\n'
    assert any("no allowed [[plugin]] of kind 'camera'" in p for p in problems(denied))


def test_policy_check_prints_and_refuses_the_cameras(tmp_path):
    good = tmp_path / "good.toml"
    good.write_text(BASE + '\n[cameras]\nuse = ["road", "wide"]\nmax_skew_ms = 5\n'
                    'stall_ms = 250\n')
    bad = tmp_path / "bad.toml"
    bad.write_text(BASE + '\n[cameras]\nuse = ["road"]\nmax_skew_ms = -2\n')
    cli = [sys.executable, "-m", "plugin_host.cli", "policy", "check"]
    ok = subprocess.run([*cli, str(good)], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert ("cameras: road, wide, matched within 5 ms, stalled after 250 ms without a frame"
            in ok.stdout)
    refused = subprocess.run([*cli, str(bad)], capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0
    assert f"{bad}:11: cameras.max_skew_ms: must be 0 or a positive number" in refused.stderr \
        + refused.stdout
