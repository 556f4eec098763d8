"""The abi package boundary: what it exports, what it imports, and that importing does nothing."""

import subprocess
import sys
from pathlib import Path

import abi
import abi.ops

ROOT = Path(__file__).resolve().parents[2]


def test_all_names_exist():
    for module in (abi, abi.ops):
        assert module.__all__, module
        for name in module.__all__:
            assert hasattr(module, name), (module.__name__, name)


def test_abi_imports_nothing_from_the_host_and_has_no_import_time_side_effects():
    code = """
import sys
import abi, abi.ops
from abi.ops import table
assert table._table.cache_info().currsize == 0, "op table built at import"
abi.known_ops()
bad = sorted(m for m in sys.modules if m.split('.')[0] in
             {'plugin_host', 'plugins', 'torch', 'hypothesis', 'pytest'})
print(','.join(bad))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=ROOT, env={"PYTHONPATH": str(ROOT)}, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""
