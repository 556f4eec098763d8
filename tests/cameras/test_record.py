"""``plugin-host record``: frames of any camera plugin into a recorded-frames file."""

from __future__ import annotations

import json
import sys
import time

import numpy as np
import pytest

from plugin_host.cli import main
from plugin_host.frames import ReplayReader
from plugin_host.testing import minimal_policy
from plugins.cameras.synthetic import synthetic_pattern
from tests.cli_child import running_cli

SMALL = ["--width", "32", "--height", "16", "--rate", "200"]


def test_records_the_synthetic_camera(tmp_path, capsys):
    out = tmp_path / "road.phf"
    assert main(["record", "--camera", "synthetic", *SMALL, "--frames", "5",
                 "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""  # no progress in a pipe
    assert "recorded 5 frame(s) of camera 'synthetic' (32x16 NV12)" in captured.out
    with ReplayReader(out) as reader:
        assert (reader.camera, reader.source, len(reader)) == ("synthetic", "synthetic", 5)
        reader.verify()
        for info, data in reader:
            y = np.frombuffer(data, np.uint8)[:64 * 16].reshape(16, 64)[:, :32]
            assert np.array_equal(y, synthetic_pattern(reader.layout, info.frame_id)["Y"])
        sofs = [r.timestamp_sof for r in reader.records]
        assert sofs == sorted(sofs)


def test_replay_then_record_reproduces_the_file(tmp_path, capsys):
    first, second = tmp_path / "a.phf", tmp_path / "b.phf"
    assert main(["record", "--camera", "synthetic", *SMALL, "--format", "RGB", "--frames", "4",
                 "--out", str(first)]) == 0
    assert main(["record", "--camera", "replay", "--set", f"file={first}", "--set", "pace=fast",
                 "--set", "timestamps=recorded", "--frames", "4", "--out", str(second)]) == 0
    with ReplayReader(first) as a, ReplayReader(second) as b:
        assert [(r.frame_id, r.timestamp_sof, r.timestamp_eof) for r in a.records] == \
            [(r.frame_id, r.timestamp_sof, r.timestamp_eof) for r in b.records]
        assert [d for _, d in a] == [d for _, d in b]
        assert (a.layout, b.camera, b.source) == (b.layout, "synthetic", "replay")


def test_a_source_that_ends_early_keeps_what_it_had(tmp_path, capsys):
    first, second = tmp_path / "a.phf", tmp_path / "b.phf"
    main(["record", "--camera", "synthetic", *SMALL, "--frames", "2", "--out", str(first)])
    assert main(["record", "--camera", "replay", "--set", f"file={first}", "--set", "pace=fast",
                 "--frames", "10", "--out", str(second)]) == 0
    assert "source ended after 2 of 10 frames" in capsys.readouterr().err
    with ReplayReader(second) as reader:
        assert len(reader) == 2


def test_progress_is_shown_on_a_terminal(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(["record", "--camera", "synthetic", *SMALL, "--frames", "3",
                 "--out", str(tmp_path / "a.phf")]) == 0
    assert "\rrecording synthetic: 3/3 frames" in capsys.readouterr().err


def test_with_a_policy_its_config_is_used_and_overridden(tmp_path, capsys):
    policy = tmp_path / "p.toml"
    policy.write_text(minimal_policy(
        {"name": "synthetic", "kind": "camera",
         "config": {"name": "wide", "width": 48, "height": 8, "rate": 200, "format": "GRAY"}})
        + '\n[audit]\nlog = "${POLICY_DIR}/audit.jsonl"\n')
    out = tmp_path / "wide.phf"
    assert main(["record", "--camera", "synthetic:wide", "--policy", str(policy), "--height",
                 "16", "--frames", "2", "--out", str(out)]) == 0
    with ReplayReader(out) as reader:
        assert (reader.camera, reader.layout.describe()) == ("wide", "48x16 GRAY")


@pytest.mark.parametrize("argv, message", [
    (["--camera", "nope"], "no camera plugin named 'nope'; available: replay, synthetic"),
    (["--camera", "synthetic:rear"], "has no camera 'rear'; its cameras: synthetic"),
    (["--camera", "synthetic", "--width", "33"], "NV12 needs an even width"),
    (["--camera", "synthetic", "--set", "colour=1"], "unknown key(s) colour"),
    (["--camera", "synthetic", "--set", "novalue"], "--set needs KEY=VALUE"),
    (["--camera", "replay", "--set", "file=/nonexistent.phf"], "cannot open"),
    (["--camera", "synthetic", "--frames", "0"], "--frames must be at least 1"),
])
def test_refusals_are_one_line_and_exit_1(tmp_path, capsys, argv, message):
    args = ["record", *SMALL[:0], "--frames", "1", "--out", str(tmp_path / "x.phf"), *argv]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("plugin-host record: ") and message in err
    assert not (tmp_path / "x.phf").exists()


def test_an_existing_file_is_kept_unless_forced(tmp_path, capsys):
    out = tmp_path / "a.phf"
    out.write_bytes(b"precious")
    assert main(["record", "--camera", "synthetic", *SMALL, "--frames", "1",
                 "--out", str(out)]) == 1
    assert "already exists" in capsys.readouterr().err and out.read_bytes() == b"precious"
    assert main(["record", "--camera", "synthetic", *SMALL, "--frames", "1", "--out", str(out),
                 "--force"]) == 0
    with ReplayReader(out) as reader:
        assert len(reader) == 1


def test_help_has_an_example(capsys):
    with pytest.raises(SystemExit) as info:
        main(["record", "--help"])
    assert info.value.code == 0
    assert "plugin-host record --camera synthetic --frames 100 --out" in capsys.readouterr().out


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_interrupted_it_keeps_the_frames_recorded_so_far(tmp_path, sig):
    """Ctrl-C or SIGTERM: the loop stops between frames (a flag, not an exception raised in
    the middle of a write), the file keeps every whole frame, exit 130."""
    import signal

    out = tmp_path / "long.phf"
    with running_cli("record", "--camera", "synthetic", *SMALL, "--frames", "1000000",
                     "--out", str(out)) as proc:
        deadline = 50
        while deadline and not list(tmp_path.glob(".long.phf.*.partial")):
            time.sleep(0.1)
            deadline -= 1
        time.sleep(0.3)
        proc.send_signal(getattr(signal, sig))
        stdout, stderr = proc.communicate(timeout=20)
    assert proc.returncode == 130, stderr
    assert "recorded" in stdout and stderr.strip().endswith("interrupted")
    with ReplayReader(out) as reader:
        assert len(reader) > 0
        reader.verify()
    assert not list(tmp_path.glob("*.partial"))


def test_killed_outright_its_frames_are_salvaged(tmp_path):
    """SIGKILL (as a crash, an OOM kill or a power loss) leaves the hidden partial file; the
    next recording to the same name points at it, and --salvage keeps its whole frames."""
    import signal
    import subprocess

    out = tmp_path / "long.phf"
    proc = subprocess.Popen([sys.executable, "-m", "plugin_host.cli", "record", "--camera",
                             "synthetic", *SMALL, "--frames", "1000000", "--out", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            partials = list(tmp_path.glob(".long.phf.*.partial"))
            if partials and partials[0].stat().st_size > 20_000:  # a few dozen frames
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=20)
    finally:
        proc.kill()
    [partial] = tmp_path.glob(".long.phf.*.partial")
    assert not out.exists()

    again = subprocess.run([sys.executable, "-m", "plugin_host.cli", "record", "--camera",
                            "synthetic", *SMALL, "--frames", "2", "--out", str(out)],
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stderr
    assert (f"note: {partial} is left from a recording to {out} that was killed before it "
            f"finished; 'plugin-host record --salvage {partial} --out FILE' keeps its frames"
            in again.stderr)

    saved = tmp_path / "saved.phf"
    done = subprocess.run([sys.executable, "-m", "plugin_host.cli", "record", "--salvage",
                           str(partial), "--out", str(saved)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    with ReplayReader(saved) as reader:
        reader.verify()
        ids = [info.frame_id for info in reader.records]
    assert len(ids) > 10 and ids == list(range(ids[0], ids[0] + len(ids)))
    assert done.stdout.startswith(f"salvaged {len(ids)} frame(s), frame ids {ids[0]}..{ids[-1]}")
    assert partial.exists()  # left for its owner to delete


def test_salvage_refusals_and_progress(tmp_path, capsys, monkeypatch):
    partial = tmp_path / ".a.phf.x.partial"
    assert main(["record", "--camera", "synthetic", *SMALL, "--frames", "3",
                 "--out", str(partial)]) == 0
    capsys.readouterr()
    out = tmp_path / "a.phf"

    def refused(*argv: str) -> str:
        assert main(["record", *argv]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("plugin-host record: "), err
        return err

    assert "--salvage takes only --out and --force, not --camera" in refused(
        "--salvage", str(partial), "--out", str(out), "--camera", "synthetic")
    assert "not --frames, --policy" in refused(
        "--salvage", str(partial), "--out", str(out), "--frames", "2", "--policy", "p.toml")
    out.write_bytes(b"precious")
    assert "already exists (use --force to overwrite it)" in refused(
        "--salvage", str(partial), "--out", str(out))
    assert out.read_bytes() == b"precious"
    assert "--camera and --frames required (or --salvage PARTIAL)" in refused("--out", str(out))
    assert "nope: cannot open" in refused("--salvage", str(tmp_path / "nope"), "--out",
                                          str(out), "--force")
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(["record", "--salvage", str(partial), "--out", str(out), "--force"]) == 0
    captured = capsys.readouterr()
    assert f"\rchecking {partial}: 100 %" in captured.err
    assert captured.out.endswith("; the file was whole\n")
    with ReplayReader(out) as reader:
        assert len(reader) == 3


def test_inspect_shows_what_a_recording_holds(tmp_path, capsys):
    out = tmp_path / "road.phf"
    assert main(["record", "--camera", "synthetic", *SMALL, "--frames", "4",
                 "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0] == (f"{out}: recording of camera 'synthetic' (plugin synthetic) (format and "
                       f"index checked; frame data not checked against its CRCs)")
    assert text[1].startswith("  layout    32x16 NV12, 1536 bytes a frame")
    assert text[2] == "  frames    4, ids 0..3, no gaps"
    assert text[3].startswith("  time      0.015 s from the first frame's start to the last's")
    assert main(["inspect", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["frames"], info["first_id"], info["last_id"]) == (4, 0, 3)
    out.write_bytes(out.read_bytes()[:-1])
    assert main(["inspect", str(out)]) == 1
    assert "'plugin-host record --salvage FILE --out NEW' keeps" in capsys.readouterr().err
