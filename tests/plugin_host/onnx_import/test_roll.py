"""torch.roll along a run-time dim: the dynamo exporter takes the shift modulo the dim when
the call runs (``Mod``) and concatenates the two Slices at that bound, ``Concat(x[m:],
x[:m])``, which maps to one gather along the axis. Compared with onnxruntime on both backends
and with torch, at sizes below the shift too; a Slice bound computed at run time anywhere else
is refused naming the node, and so are concatenations that only look like a roll."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import UnsupportedModelError

from .conftest import (assert_refused, check_against_onnxruntime,
                       check_against_onnxruntime_and_torch, export_dynamic, import_and_load, onnx,
                       torch)
from .test_scatter_runtime import BACKENDS

helper, TP = onnx.helper, onnx.TensorProto
RNG = np.random.default_rng(67)


class _Roll(torch.nn.Module):
    def __init__(self, shifts, dims):
        super().__init__()
        self.shifts, self.dims = shifts, dims

    def forward(self, x):
        return torch.roll(x, self.shifts, self.dims) * 2.0


#: name: (shifts, dims, example shape, run-time dims, feed shapes)
CASES = {
    "by-2-along-t": (2, 1, (2, 5, 4), {1: "t"}, [(2, 1, 4), (2, 2, 4), (2, 3, 4), (2, 17, 4)]),
    "back-by-3": (-3, 2, (2, 4, 6), {2: "t"}, [(2, 4, 1), (2, 4, 2), (2, 4, 4), (2, 4, 9)]),
    "two-dims": ((1, 4), (1, 2), (1, 5, 6), {1: "h", 2: "w"},
                 [(1, 1, 3), (1, 4, 2), (1, 7, 5), (1, 3, 11)]),
    "run-time-batch": (3, 1, (2, 5, 4), {0: "b", 1: "t"}, [(1, 2, 4), (3, 7, 4), (2, 3, 4)]),
    "flattened": (5, None, (2, 3, 4), {1: "t"}, [(2, 1, 4), (2, 2, 4), (2, 6, 4)]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_roll_along_a_run_time_dim_matches_onnxruntime_and_torch(case, tmp_path, signer):
    shifts, dims, example, run_time, shapes = CASES[case]
    module = _Roll(shifts, dims)
    model = export_dynamic(module, [torch.randn(*example)], tmp_path / "r.onnx", dynamo=True,
                           names=["x"], dims=[run_time],
                           bounds={n: (2, 64) for n in run_time.values()})
    assert "Mod" in {n.op_type for n in onnx.load(model).graph.node}
    golden = {n: [3, 8] for n in run_time.values()}
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer, golden_dims=golden)
    assert "gather_elements" in {n.op for n in loaded.graph.nodes}
    feeds = [{"x": RNG.standard_normal(s).astype(np.float32)} for s in shapes]
    check_against_onnxruntime_and_torch(model, loaded, feeds, module, 0)


def _sliced(*, fed=False, order=("head", "tail"), head_end=None, tail_start=0,
            m_dtype=TP.INT64) -> onnx.ModelProto:
    """``Concat`` of two Slices of x (2, t, 3) along axis 1 at a bound m computed at run
    time, ``x[m:head_end]`` and ``x[tail_start:m]`` in ``order``: m = -2 mod t, or (``fed``)
    a graph input "m" of ``m_dtype`` (the other bounds' too); head_end None is x's Shape
    there."""
    nodes = [helper.make_node("Shape", ["x"], ["s"], start=1, end=2)]
    if not fed:
        nodes += [helper.make_node("Mod", ["k", "s"], ["m"])]
    far = "s" if head_end is None else "e"
    nodes += [helper.make_node("Slice", ["x", "m", far, "ax"], ["head"]),
              helper.make_node("Slice", ["x", "z", "m", "ax"], ["tail"]),
              helper.make_node("Concat", list(order), ["y"], axis=1)]
    inits = [helper.make_tensor("k", TP.INT64, [1], [-2])] + [  # Slice's bounds of one dtype
        helper.make_tensor(name, m_dtype, [1], [value])
        for name, value in (("ax", 1), ("z", tail_start), ("e", head_end or 0))]
    inputs = [helper.make_tensor_value_info("x", TP.FLOAT, [2, "t", 3])]
    if fed:
        inputs.append(helper.make_tensor_value_info("m", m_dtype, [1]))
    graph = helper.make_graph(nodes, "g", inputs,
                              [helper.make_tensor_value_info("y", TP.FLOAT, [2, "t", 3])],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("fed, m_dtype, head_end", [
    (False, TP.INT64, None), (False, TP.INT64, 2 ** 63 - 1),
    (True, TP.INT64, None), (True, TP.INT32, 2 ** 31 - 1)],
    ids=["mod", "mod-to-int64-max", "fed", "fed-int32"])
def test_a_run_time_bound_is_counted_from_the_end_and_clamped_as_slice_reads_it(
        fed, m_dtype, head_end, tmp_path, signer):
    """m = -2 mod t, or fed: negative (counted from the end), below -t and above t (clamped),
    0 and t; the head's end the dim itself or a constant past any size: as onnxruntime."""
    path = tmp_path / "s.onnx"
    onnx.save(_sliced(fed=fed, m_dtype=m_dtype, head_end=head_end), path)
    golden = {"t": [3, 8]}
    _, loaded = import_and_load(path, tmp_path / "s.pha", signer, golden_dims=golden)
    assert "gather_elements" in {n.op for n in loaded.graph.nodes}
    shifts = [-2, -9, 7, 0, 5, 1] if fed else [None]
    feeds = [{"x": RNG.standard_normal((2, t, 3)).astype(np.float32),
              **({"m": np.array([m], np.int32 if m_dtype == TP.INT32 else np.int64)}
                 if fed else {})} for t in (1, 2, 5) for m in shifts]
    for backend in BACKENDS.values():
        check_against_onnxruntime(path, loaded, feeds, backend=backend())


@pytest.mark.parametrize("change", [{"order": ("tail", "head")}, {"head_end": 4},
                                    {"tail_start": 1}],
                         ids=["not-swapped", "end-short-of-the-dim", "tail-not-from-0"])
def test_concatenations_that_are_no_roll_are_refused_naming_the_slice(change, tmp_path):
    path = tmp_path / "n.onnx"
    onnx.save(_sliced(**change), path)
    assert_refused(path, UnsupportedModelError, "(Slice)", "computed at run time")
