"""The plugin-host command: run, exit codes, one-line refusals."""

import subprocess
import sys

from plugin_host.cli import main


def test_run_prints_outputs_and_timings(capsys):
    assert main(["run", "--frames", "3"]) == 0
    out = capsys.readouterr().out
    assert "frame    0" in out and "frame    2" in out and "plan[:4]" in out
    assert "p50" in out and "p99" in out


def test_run_unknown_model_is_one_line(capsys):
    assert main(["run", "--model", "nope", "--frames", "1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nope" in err[0] and "demo" in err[0]


def test_run_unknown_backend_is_one_line(capsys):
    assert main(["run", "--backend", "tpu", "--frames", "1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "tpu" in err[0] and "numpy" in err[0]


def test_console_script_help_has_an_example():
    out = subprocess.run([sys.executable, "-m", "plugin_host.cli", "run", "--help"],
                         capture_output=True, text=True, check=True).stdout
    assert "example" in out and "--frames" in out
