"""GatherElements (torch.gather, take_along_dim, gathering by topk's indices) imported as
gather_elements and compared with onnxruntime: run-time and constant indices, int32 ones too;
a constant index out of range is refused at import, a run-time one when it arrives."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import IndexRangeError, UnsupportedModelError
from plugin_host.executor import Executor
from plugin_host.onnx_import import import_onnx
from plugins.numpy_backend import NumpyBackend

from .conftest import (EXPORTERS, assert_refused, check_against_onnxruntime, export,
                       import_and_load, onnx, torch)

RNG = np.random.default_rng(37)


class _Gathers(torch.nn.Module):
    def forward(self, x, i):
        top = torch.topk(x, 2, dim=1).indices
        return (torch.gather(x, 1, i), torch.gather(x, 0, i[:2, :3] % 3),
                torch.gather(x * 2, 1, top), torch.gather(x, -1, i[:, :1]))


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_torch_gather_matches_onnxruntime(dynamo, fold, optimize, tmp_path, signer):
    model = export(_Gathers(), [torch.randn(3, 5), torch.randint(0, 5, (3, 7))],
                   tmp_path / "g.onnx", dynamo=dynamo, fold=fold, optimize=optimize,
                   input_names=["x", "i"], output_names=["a", "b", "c", "d"])
    _, loaded = import_and_load(model, tmp_path / "g.pha", signer)
    assert sum(n.op == "gather_elements" for n in loaded.graph.nodes) == 4
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    x[0, :4] = [np.nan, np.inf, -np.inf, np.finfo(np.float32).max]
    check_against_onnxruntime(model, loaded, [
        {"x": x, "i": RNG.integers(0, 5, (3, 7))},
        {"x": -x, "i": np.resize(np.arange(5), (3, 7))}])


def _model(tmp_path, x_shape, idx, axis=0, runtime=False, idx_dtype=np.int64):
    """One GatherElements named ``node``; the indices a constant, or a run-time input of
    ``idx``'s shape."""
    helper, TP = onnx.helper, onnx.TensorProto
    idx = np.asarray(idx, idx_dtype)
    elem = helper.np_dtype_to_tensor_dtype(idx.dtype)
    inputs = [helper.make_tensor_value_info("x", TP.FLOAT, list(x_shape))]
    inits = []
    if runtime:
        inputs.append(helper.make_tensor_value_info("i", elem, list(idx.shape)))
    else:
        inits.append(onnx.numpy_helper.from_array(idx, "i"))
    node = helper.make_node("GatherElements", ["x", "i"], ["y"], name="node", axis=axis)
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info(
        "y", TP.FLOAT, list(idx.shape))], initializer=inits)
    path = tmp_path / "ge.onnx"
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString())
    return path


@pytest.mark.parametrize("idx_dtype", [np.int64, np.int32])
@pytest.mark.parametrize("runtime", [False, True])
def test_onnx_gather_elements_matches_onnxruntime(runtime, idx_dtype, tmp_path, signer):
    idx = [[0, -1, 2], [-4, 3, 1]]  # negative ones count from the end when constant
    if runtime:
        idx = np.abs(idx) % 4
    model = _model(tmp_path, (2, 4), idx, axis=1, runtime=runtime, idx_dtype=idx_dtype)
    _, loaded = import_and_load(model, tmp_path / "ge.pha", signer)
    feed = {"x": RNG.standard_normal((2, 4)).astype(np.float32)}
    if runtime:
        feed["i"] = np.asarray(idx, idx_dtype)
    check_against_onnxruntime(model, loaded, [feed])


def test_a_run_time_index_out_of_range_is_refused_when_it_arrives(tmp_path):
    model = _model(tmp_path, (2, 4), [[0, 1], [2, 3]], axis=1, runtime=True)
    executor = Executor(import_onnx(model).graph, NumpyBackend())
    x = np.zeros((2, 4), np.float32)
    # outside [-4, 4), as onnxruntime refuses them; a negative one named from the end (-5: -1)
    for bad, named in ((4, 4), (-5, -1)):
        with pytest.raises(IndexRangeError, match=rf"\(1, 0\)={named}"):
            executor.run({"x": x, "i": np.array([[0, 1], [bad, 3]])})


@pytest.mark.parametrize("idx, message", [
    ([[0, 4]], "constant indices [0, 4] must be integers in [-4, 4) for axis 1 of shape [2, 4]"),
    ([[-5, 0]], "constant indices [-5, 0] must be integers in [-4, 4)"),
])
def test_what_gather_elements_refuses_names_node_and_value(idx, message, tmp_path):
    assert_refused(_model(tmp_path, (2, 4), idx, axis=1), UnsupportedModelError,
                   "node 'node' (GatherElements)", message)


class _Selects(torch.nn.Module):
    """Gather with run-time indices into a run-time value (and a constant 1-D lookup table)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.tensor([0.5, -1.0, 2.0, 8.0, -0.0]))

    def forward(self, x, i, m, s):
        return (torch.index_select(x, 1, i), x[m], x[:, s], self.table[m])


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_run_time_gather_indices_match_onnxruntime(dynamo, fold, optimize, tmp_path, signer):
    args = [torch.randn(3, 5), torch.tensor([4, 0, 4]), torch.tensor([[2, 0], [1, 1]]),
            torch.tensor(3)]
    model = export(_Selects(), args, tmp_path / "s.onnx", dynamo=dynamo, fold=fold,
                   optimize=optimize, input_names=["x", "i", "m", "s"],
                   output_names=["a", "b", "c", "d"])
    _, loaded = import_and_load(model, tmp_path / "s.pha", signer)
    assert "gather_elements" in {n.op for n in loaded.graph.nodes}
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    x[1, :3] = [np.nan, np.inf, -np.finfo(np.float32).max]
    check_against_onnxruntime(model, loaded, [
        {"x": x, "i": np.array([1, 2, 1]), "m": np.array([[1, 2], [0, 0]]), "s": np.array(0)},
        {"x": -x, "i": np.array([4, 3, 0]), "m": np.array([[2, 2], [2, 1]]), "s": np.array(4)}])
