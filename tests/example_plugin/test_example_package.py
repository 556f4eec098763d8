"""The example plugin package (``package/``) builds, installs, is discovered through its entry
point, runs inside a host, and its own tests pass against the installed copy.

The package is copied to a temporary folder (building writes ``build/`` and ``*.egg-info`` next
to the sources) and installed with ``pip install --no-deps --no-build-isolation --target`` into
another temporary folder, which is then put on ``sys.path``: ``importlib.metadata`` discovers
its ``*.dist-info`` there exactly as it would in site-packages.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import numpy as np
import pytest

from plugin_host.errors import PolicyError
from plugin_host.plugins import get_plugin_manager
from plugin_host.policy import parse_policy
from plugin_host.testing import minimal_policy

PACKAGE = Path(__file__).parent / "package"
MODULE = "plugin_host_example_steering"


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The folder the example package is installed into."""
    work = tmp_path_factory.mktemp("example")
    source = work / "src"
    shutil.copytree(PACKAGE, source, ignore=shutil.ignore_patterns("__pycache__", "build",
                                                                   "*.egg-info"))
    target = work / "site"
    result = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                             "--no-build-isolation", "--no-index", "--target", str(target),
                             str(source)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return target


@pytest.fixture
def on_path(installed, monkeypatch):
    monkeypatch.syspath_prepend(str(installed))
    yield installed
    for name in [m for m in sys.modules if m == MODULE or m.startswith(MODULE + ".")]:
        del sys.modules[name]


POLICY = minimal_policy({"name": "example_steering", "kind": "control",
                         "capabilities": ["control.publish", "can.send"],
                         "config": {"gain": 1.0, "can_id": 0x2E4, "max_latency_ms": 40.0}})


def test_installed_with_its_entry_point(installed):
    assert (installed / MODULE / "__init__.py").is_file()
    assert list(installed.glob("plugin_host_example_steering-1.0.0.dist-info"))


def test_discovered_through_the_entry_point_group(on_path):
    (ep,) = [ep for ep in entry_points(group="plugin_host") if ep.name == "example_steering"]
    assert ep.value == f"{MODULE}:plugin" and ep.dist.name == "plugin-host-example-steering"


def test_not_imported_unless_the_policy_allows_it(on_path):
    get_plugin_manager(parse_policy("format = 1\n", path="empty.toml"))
    get_plugin_manager()  # no policy: built-ins only
    assert MODULE not in sys.modules


def test_runs_inside_a_host_loaded_from_its_entry_point(on_path, plugin_host_manager):
    host = plugin_host_manager(POLICY, entry_points=True)
    assert host.loaded.names == ["example_steering"]
    assert MODULE in sys.modules
    control = host.subscribe("control")
    plan = np.zeros((1, 66), np.float32)
    plan[0, 0] = -0.25
    host.publish_model({"plan": plan})
    message = control.recv(timeout=1.0)
    assert message.publisher == "example_steering"
    assert message.data == {"steer": pytest.approx(-0.25), "model_seq": 0}
    (frame,) = host.received_can(timeout=1.0)
    assert frame.arbitration_id == 0x2E4
    assert int.from_bytes(frame.data, "big", signed=True) == round(-0.25 * 32767)

    class Manifest:
        name, latency_ms = "demo", 80.0

    with pytest.raises(Exception, match="declares 80.0 ms worst-case latency"):
        host.loaded.verify_artifact(Manifest(), "demo.pha")
    assert [r["action"] for r in host.audit_records(capability="can.send")] == ["grant", "use"]


def test_its_policy_entry_from_the_readme_is_valid(on_path):
    readme = (PACKAGE / "README.md").read_text()
    entry = readme.split("```toml\n")[1].split("```")[0]
    policy = parse_policy("format = 1\n" + entry, path="README.md")
    assert policy.plugin("example_steering").config["can_id"] == 0x2E4
    with pytest.raises(PolicyError, match="can never hold 'can.send'"):
        parse_policy("format = 1\n" + entry.replace('"control"', '"model-layer"'), path="x")


def test_its_own_tests_pass_against_the_installed_package(installed, tmp_path):
    tests = tmp_path / "tests"
    shutil.copytree(PACKAGE / "tests", tests)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(installed), "HOME": str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             str(tests)], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert " passed" in result.stdout and "failed" not in result.stdout
