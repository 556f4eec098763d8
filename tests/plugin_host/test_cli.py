"""The plugin-host command: run, exit codes, one-line refusals."""

import os
import subprocess
import sys
from pathlib import Path

from plugin_host.cli import main

from .test_files import no_hang


def test_run_needs_a_policy(capsys):
    import pytest

    with pytest.raises(SystemExit) as exc:
        main(["run", "--duration", "1"])
    assert exc.value.code == 2 and "--policy" in capsys.readouterr().err


def test_run_missing_policy_file_is_one_line(capsys, tmp_path):
    assert main(["run", "--policy", str(tmp_path / "nope.toml"), "--duration", "1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nope.toml" in err[0]


def test_console_script_help_has_an_example():
    out = subprocess.run([sys.executable, "-m", "plugin_host.cli", "run", "--help"],
                         capture_output=True, text=True, check=True).stdout
    assert "example" in out and "--policy" in out and "--duration" in out


def _one_line(capsys, argv) -> str:
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


def test_run_refuses_a_log_or_state_folder_it_cannot_use(capsys, tmp_path):
    demo = str(Path(__file__).resolve().parents[2] / "policies" / "demo.toml")
    (tmp_path / "a-file").write_text("")
    line = _one_line(capsys, ["run", "--policy", demo, "--frames", "1", "--state-dir",
                              str(tmp_path / "a-file")])
    assert line == f"plugin-host run: --state-dir {tmp_path / 'a-file'}: not a folder"
    line = _one_line(capsys, ["run", "--policy", demo, "--frames", "1", "--state-dir",
                              str(tmp_path / "state"), "--log", str(tmp_path)])
    assert line == f"plugin-host run: --log {tmp_path}: cannot open: Is a directory"
    os.mkfifo(tmp_path / "fifo")  # refused at once, not waited on
    with no_hang():
        line = _one_line(capsys, ["run", "--policy", demo, "--frames", "1", "--state-dir",
                                  str(tmp_path / "state"), "--log", str(tmp_path / "fifo")])
    assert line == f"plugin-host run: --log {tmp_path / 'fifo'}: cannot open: not a regular file"


def test_a_relative_state_dir_is_relative_to_the_working_folder(capsys, tmp_path,
                                                                monkeypatch):
    demo = str(Path(__file__).resolve().parents[2] / "policies" / "demo.toml")
    monkeypatch.chdir(tmp_path)
    assert main(["policy", "check", demo, "--state-dir", "rel"]) == 0
    # not relative to the policy file's folder, as the policy's own relative paths are
    assert f"audit log: {tmp_path / 'rel' / 'demo' / 'audit.jsonl'}" in capsys.readouterr().out


def test_metrics_on_a_unix_socket_in_a_missing_folder_is_refused(tmp_path):
    import pytest

    from plugin_host.daemon.metrics import MetricsServer
    from plugin_host.errors import PluginHostError

    with pytest.raises(PluginHostError, match="cannot listen"):
        MetricsServer(None, f"unix:{tmp_path / 'missing' / 'metrics.sock'}")
