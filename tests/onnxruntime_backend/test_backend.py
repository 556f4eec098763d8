"""The onnxruntime backend on the benchmark model: the numpy backend's numbers, recurrent state
carried and reset by the executor, Embedding indices refused at entry, and the plugin's
registration and its refusal when onnxruntime is missing."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from abi.errors import IndexRangeError
from plugin_host.executor import Executor
from plugin_host.plugins import backends, get_plugin_manager
from plugins.demo_model import build_demo_graph, demo_inputs
from plugins.numpy_backend import NumpyBackend
from plugins.onnxruntime_backend import OnnxruntimeBackend

#: float32 results of two different BLAS/MLAS summation orders over the 4096-wide GEMV
RTOL, ATOL = 1e-4, 1e-5


@pytest.fixture(scope="module")
def demo_graph():
    return build_demo_graph(seed=5)


@pytest.fixture
def pair(demo_graph):
    return Executor(demo_graph, NumpyBackend()), Executor(demo_graph, OnnxruntimeBackend())


def assert_close(got, want):
    assert set(got) == set(want)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=RTOL, atol=ATOL, err_msg=name)


def test_registered_as_a_backend_plugin():
    found = backends(get_plugin_manager())
    assert isinstance(found["onnxruntime"], OnnxruntimeBackend)
    assert "numpy" in found


def test_demo_model_matches_numpy_with_state_carried(pair):
    numpy_ex, ort_ex = pair
    assert ort_ex.whole_graph and not numpy_ex.whole_graph
    rng = np.random.default_rng(1)
    for _ in range(4):
        feed = demo_inputs(rng)
        assert_close(ort_ex.run(feed), numpy_ex.run(feed))
        assert_close(ort_ex.state, numpy_ex.state)
    assert np.abs(ort_ex.state["h"]).max() > 0.01  # the state really moved
    assert ort_ex.calls == 4


def test_state_reset_zeroes_and_counts(pair, demo_graph):
    _, ort_ex = pair
    rng = np.random.default_rng(2)
    first = demo_inputs(rng)
    fresh = ort_ex.run(first)
    ort_ex.run(demo_inputs(rng))
    assert not np.allclose(ort_ex.run(first)["plan"], fresh["plan"], atol=1e-6)
    ort_ex.reset("camera_restart")
    assert all(not v.any() for v in ort_ex.state.values())
    assert ort_ex.resets_by_reason["camera_restart"] == 1
    np.testing.assert_allclose(ort_ex.run(first)["plan"], fresh["plan"], rtol=1e-6, atol=1e-7)


def test_explicit_state_input_overrides_the_held_state(pair):
    numpy_ex, ort_ex = pair
    rng = np.random.default_rng(3)
    feed = dict(demo_inputs(rng), h=np.full((1, 512), 0.3, np.float32))
    assert_close(ort_ex.run(feed), numpy_ex.run(feed))


def test_desire_out_of_range_refused_at_entry(pair):
    _, ort_ex = pair
    feed = dict(demo_inputs(np.random.default_rng(4)), desire=np.array([8]))
    before = ort_ex.state
    with pytest.raises(IndexRangeError) as info:
        ort_ex.run(feed)
    assert "'desire'" in str(info.value) and info.value.context["values"] == [8]
    assert ort_ex.calls == 0
    assert all(np.array_equal(before[k], v) for k, v in ort_ex.state.items())


_WITHOUT = """
import sys
sys.modules[{module!r}] = None  # as if it were not installed
import numpy as np
from abi.errors import BackendError
from plugin_host.executor import Executor
from plugin_host.plugins import backends, get_plugin_manager
from plugins.demo_model import build_demo_graph, demo_inputs

found = backends(get_plugin_manager())
graph = build_demo_graph(0)
try:
    Executor(graph, found["onnxruntime"])
except BackendError as exc:
    print("refused:", exc)
out = Executor(graph, found["numpy"]).run(demo_inputs(np.random.default_rng(0)))
print("numpy still runs:", out["plan"].shape)
"""


@pytest.mark.parametrize("module", ["onnxruntime", "onnx"])
def test_missing_dependency_is_a_clear_refusal(module):
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(_WITHOUT.format(
        module=module))], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert (f"refused: backend 'onnxruntime' is not available: the Python package "
            f"'{module}' is not installed") in result.stdout
    assert "numpy still runs: (1, 66)" in result.stdout
