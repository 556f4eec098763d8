"""Every module of the ONNX import imports on its own, first, in a fresh interpreter: the op
table and the mapping modules import each other, and a newcomer reaching for one of them
(``from plugin_host.onnx_import.dynamic import INT32_MAX``) must not find it half made."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import plugin_host.onnx_import as package

_MODULES = sorted(m.name for m in pkgutil.iter_modules(package.__path__))


def test_each_module_imports_first_in_a_fresh_interpreter():
    """One interpreter, the package's modules dropped from sys.modules before each import."""
    script = (
        "import importlib, sys\n"
        "failed = []\n"
        f"for name in {_MODULES!r}:\n"
        "    for key in [k for k in sys.modules if k.startswith('plugin_host')]:\n"
        "        del sys.modules[key]\n"
        "    try:\n"
        "        importlib.import_module('plugin_host.onnx_import.' + name)\n"
        "    except Exception as exc:\n"
        "        failed.append(f'{name}: {type(exc).__name__}: {exc}')\n"
        "print('\\n'.join(failed))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, check=True)
    assert len(_MODULES) > 30
    assert done.stdout.strip() == ""
