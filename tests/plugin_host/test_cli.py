"""The plugin-host command: run, exit codes, one-line refusals."""

import subprocess
import sys

from plugin_host.cli import main


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
