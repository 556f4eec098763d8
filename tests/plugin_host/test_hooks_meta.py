"""Meta-test: every hook is specified, documented, in the README's hook reference, and tested.

Also runs the README's complete small plugin and its test, so the guide cannot rot.
"""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

from plugin_host import hookspecs
from plugin_host.plugins import KIND_HOOKS, get_plugin_manager

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
THIS = Path(__file__).resolve()

HOOKS = sorted(name for name, obj in vars(hookspecs).items()
               if inspect.isfunction(obj) and obj.__module__ == hookspecs.__name__)


def guide() -> str:
    start = README.index("## Plugin author's guide")
    return README[start:README.index("\n## ", start + 1)]


def test_hookspecs_holds_specs_only():
    pm = get_plugin_manager(load_entrypoints=False)
    assert HOOKS, "no hooks found"
    for name in HOOKS:
        assert name.startswith("plugin_host_"), name
        assert getattr(pm.hook, name).spec is not None, f"{name} is not decorated with @hookspec"


@pytest.mark.parametrize("name", HOOKS)
def test_docstring_says_who_implements_it_and_its_semantics(name):
    doc = " ".join((inspect.getdoc(getattr(hookspecs, name)) or "").split())
    assert "Implemented by" in doc, f"{name}: say who implements it"
    assert "firstresult" in doc, f"{name}: say whether it is firstresult"
    assert "historic" in doc, f"{name}: say whether it is historic"
    # and say it right
    opts = getattr(hookspecs, name).plugin_host_spec
    assert ("not ``firstresult``" in doc.lower()) == (not opts.get("firstresult"))
    assert ("not ``historic``" in doc.lower()) == (not opts.get("historic"))


@pytest.mark.parametrize("name", HOOKS)
def test_in_the_readme_hook_reference_under_its_exact_signature(name):
    params = ", ".join(inspect.signature(getattr(hookspecs, name)).parameters)
    heading = f"#### `{name}({params})`"
    assert heading in guide().splitlines(), f"README hook reference lacks {heading!r}"


def test_readme_documents_no_hook_that_does_not_exist():
    documented = set(re.findall(r"^#### `(plugin_host_\w+)\(", guide(), re.M))
    assert documented == set(HOOKS)


@pytest.mark.parametrize("name", HOOKS)
def test_exercised_by_a_test(name):
    """Some test (not this one) implements the hook, so the host calls it under test."""
    pattern = re.compile(rf"def {name}\(")
    tests = [p for p in (REPO / "tests").rglob("*.py") if p.resolve() != THIS]
    assert any(pattern.search(p.read_text()) for p in tests), f"no test implements {name}"


@pytest.mark.parametrize("name", HOOKS)
def test_every_hook_belongs_to_some_kind(name):
    lifecycle = {"plugin_host_configure", "plugin_host_unconfigure"}
    assert name in lifecycle or any(name in hooks for hooks in KIND_HOOKS.values())


def test_the_guides_plugin_and_its_test_run(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", guide(), re.S)
    plugin = next(b for b in blocks if "plugin = Throttle()" in b)
    test = next(b for b in blocks if "def test_" in b)
    (tmp_path / "my_throttle").mkdir()
    (tmp_path / "my_throttle" / "__init__.py").write_text(plugin)
    (tmp_path / "test_my_throttle.py").write_text(test)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path), "HOME": str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             "test_my_throttle.py"], cwd=tmp_path, capture_output=True,
                            text=True, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout
