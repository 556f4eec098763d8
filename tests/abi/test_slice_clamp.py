"""The ABI's slice clamps its bounds as ONNX Slice does (:func:`abi.ops.dims.slice_range`),
checked against onnxruntime's Slice over every small case, and both backends take those
positions along a fixed and a symbolic dim. Python's slicing differs there: a negative step
from a start before the dim's first position takes nothing in Python, position 0 in ONNX."""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import onnxruntime
import pytest

from abi.ops import dims
from plugin_host.builder import GraphBuilder
from plugin_host.executor import Executor
from plugins.numpy_backend import NumpyBackend
from plugins.onnxruntime_backend import OnnxruntimeBackend

helper, TP = onnx.helper, onnx.TensorProto

BOUNDS = [-2 ** 63, -2 ** 31, -7, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 7, 2 ** 31 - 1,
          2 ** 63 - 1]
STEPS = [-3, -2, -1, 1, 2, 3]
SIZES = range(5)


@pytest.fixture(scope="module")
def onnxruntime_slice():
    """onnxruntime's Slice of a 1-D int64 x at run-time starts, ends and steps."""
    ins = [helper.make_tensor_value_info(n, TP.INT64, [d]) for n, d in
           (("x", "n"), ("starts", 1), ("ends", 1), ("axes", 1), ("steps", 1))]
    graph = helper.make_graph(
        [helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["y"])], "g", ins,
        [helper.make_tensor_value_info("y", TP.INT64, ["m"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])

    def run(size, start, end, step):
        feed = {"x": np.arange(size, dtype=np.int64), "axes": np.array([0]),
                **{k: np.array([v], np.int64) for k, v in
                   (("starts", start), ("ends", end), ("steps", step))}}
        return session.run(None, feed)[0].tolist()
    return run


#: onnxruntime's sentinels: an end of INT32_MAX or INT64_MAX by a negative step runs to the
#: first position there, where ONNX's Slice clamps it to the last (the importer refuses it)
SENTINELS = (2 ** 31 - 1, 2 ** 63 - 1)


def test_slice_range_takes_onnxruntime_s_positions(onnxruntime_slice):
    """Every size 0..4, start and end among the extremes and small values, step +-1..3, but
    for onnxruntime's sentinels."""
    differ = []
    for size, start, end, step in itertools.product(SIZES, BOUNDS, BOUNDS, STEPS):
        if step < 0 and end in SENTINELS:
            continue
        want = onnxruntime_slice(size, start, end, step)
        if list(dims.slice_range(size, start, end, step)) != want or \
                dims.slice_len(size, start, end, step) != len(want):
            differ.append((size, start, end, step))
    assert not differ, f"{len(differ)} cases differ, first {differ[:5]}"


@pytest.mark.parametrize("start, end, step", [(0, dims.TO_THE_END, 1), (2, dims.TO_THE_END, 3),
                                              (-1, -dims.TO_THE_END, -1),
                                              (-1, -dims.TO_THE_END, -2)])
def test_the_length_of_a_slice_of_a_run_time_dim_is_onnxruntime_s_at_every_size(
        onnxruntime_slice, start, end, step):
    """From a start to the end, or from the last position back to the first: the length
    written over the symbol t, t given each size 0..9, is the count onnxruntime takes."""
    length = dims.slice_len("t", start, end, step)
    assert type(length) is str and "slice(" not in length, length
    for size in range(10):
        got = eval(length, {}, {"t": size})
        assert got == len(onnxruntime_slice(size, start, end, step)), (length, size)


@pytest.mark.parametrize("start, end, step", [(0, -1, 1), (1, -1, 1), (2, -3, 2), (0, -2, 3),
                                              (3, -1, 4)])
def test_the_length_of_a_slice_to_an_end_counted_from_the_end_is_onnxruntime_s(
        onnxruntime_slice, start, end, step):
    """From a start >= 0 to an end -e by a step >= 1 (``x[:, :-1]``): the length written over
    t is onnxruntime's count wherever t is at least start + e, and the slice is empty below
    (as a slice from a start past the size is, the convention of ``t-2`` for ``x[:, 2:]``);
    ``x[:, :-1]`` and ``x[:, 1:]`` have one name."""
    length = dims.slice_len("t", start, end, step)
    assert type(length) is str and "slice(" not in length, length
    for size in range(20):
        want = onnxruntime_slice(size, start, end, step)
        if size >= start - end:
            assert eval(length, {}, {"t": size}) == len(want), (length, size)
        else:
            assert want == [], size
    assert dims.slice_len("t", 0, -1, 1) == dims.slice_len("t", 1, dims.TO_THE_END, 1) == "t-1"


def test_onnxruntime_s_sentinels_are_what_the_spec_clamps(onnxruntime_slice):
    """Why the importer refuses them (tests/plugin_host/onnx_import/test_slice_bounds.py):
    onnxruntime's x[3:INT64_MAX:-1] of 4 positions is all four, the spec's is none."""
    for end in SENTINELS:
        assert onnxruntime_slice(4, 3, end, -1) == [3, 2, 1, 0]
        assert list(dims.slice_range(4, 3, end, -1)) == []
        assert onnxruntime_slice(4, 3, end - 1, -1) == []


def test_python_slicing_differs_where_a_negative_step_starts_before_the_first_position(
        onnxruntime_slice):
    """The case the ABI spells out: x[-5::-1] of 3 positions."""
    assert onnxruntime_slice(3, -5, -2 ** 63, -1) == [0]
    assert list(range(3)[-5::-1]) == []
    assert list(dims.slice_range(3, -5, -2 ** 63, -1)) == [0]


#: (start, end, step): where Python and ONNX part, and a few where they agree
CASES = [(-5, -2 ** 62, -1), (-4, -2 ** 62, -2), (-9, 1, -1), (-9, -9, -1), (-1, -9, -1),
         (1, 2 ** 62, 2), (-2, 2 ** 62, 1)]


@pytest.mark.parametrize("backend", [NumpyBackend, OnnxruntimeBackend],
                         ids=["numpy", "onnxruntime"])
def test_both_backends_slice_a_fixed_dim_at_those_positions(backend, onnxruntime_slice):
    """A graph's slice along a fixed dim, its output shape inferred by the ABI."""
    for size, (start, end, step) in itertools.product((0, 1, 3), CASES):
        b = GraphBuilder("s")
        x = b.input("x", (size,), "int64", "N")
        b.output(b.op("slice", x, name="slice", starts=[start], ends=[end], axes=[0],
                      steps=[step]), "y", "N")
        got = Executor(b.build(), backend()).run({"x": np.arange(size, dtype=np.int64)})["y"]
        assert got.tolist() == onnxruntime_slice(size, start, end, step), \
            (size, start, end, step)


@pytest.mark.parametrize("backend", [NumpyBackend, OnnxruntimeBackend],
                         ids=["numpy", "onnxruntime"])
def test_both_backends_slice_a_symbolic_dim_at_those_positions(backend, onnxruntime_slice):
    """Along a symbolic dim, whose sliced length has no name an output could declare: x is
    2 ** position, so the sum of the slice names the positions it took."""
    for start, end, step in CASES:
        b = GraphBuilder("s")
        x = b.input("x", ("n",), "int64", "N")
        y = b.op("slice", x, name="slice", starts=[start], ends=[end], axes=[0], steps=[step])
        b.output(b.op("sum", y, name="total", axes=[0]), "y", "ANY")
        executor = Executor(b.build(), backend())
        for size in SIZES:
            got = executor.run({"x": 1 << np.arange(size, dtype=np.int64)})["y"]
            want = sum(1 << p for p in onnxruntime_slice(size, start, end, step))
            assert int(got) == want, (size, start, end, step)
