"""ScatterND, ScatterElements and Scatter with indices known at import (torch's ``y[:, 0] = x``,
``index_put``, scatter, scatter_add, scatter_reduce) imported as ``scatter_elements`` at one
constant flat position per update, compared with onnxruntime, reductions combined in the
indices' order; all-constant ones fold; an element written twice without a reduction and malformed
indices or updates are refused naming the node. Run-time indices: test_scatter_runtime.py."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import ModelFileError, UnsupportedModelError

from .conftest import (EXPORTERS, assert_refused, check_against_onnxruntime, export,
                       import_and_load, onnx, torch)

helper, TP = onnx.helper, onnx.TensorProto
RNG = np.random.default_rng(41)
BIG = np.finfo(np.float32).max


def _floats(shape, n: int = 2):
    """Random inputs, the last with float32 extremes, infinities, nan and -0.0 spread in."""
    feeds = [(RNG.standard_normal(shape) * 3).astype(np.float32) for _ in range(n)]
    flat = feeds[-1].reshape(-1)
    picks = RNG.choice(flat.size, size=min(6, flat.size), replace=False)
    flat[picks] = [BIG, -BIG, np.inf, -np.inf, np.nan, -0.0][:picks.size]
    return feeds


class _Assign(torch.nn.Module):
    """Assignments into fixed positions, as models write them (each a ScatterND from the
    legacy exporter, a ScatterElements or an index_put from dynamo)."""

    def forward(self, x, v):
        y = x.clone()
        y[:, 0] = v * 2.0
        y[1:3, :, 2] = x[1:3, :, 3] - 1.0
        z = torch.zeros_like(x)
        z[[0, 2]] = x[[1, 3]]
        return y, z


class _Scatters(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("index", torch.tensor([[0, 2, 1, 2], [3, 0, 0, 0]]))
        self.register_buffer("once", torch.tensor([[0, 2, 1, 4], [3, 0, 1, 2]]))

    def forward(self, x, src):
        return x.scatter(1, self.once, src), x.scatter_add(1, self.index, src)


class _Reduce(_Scatters):
    """scatter_reduce (the legacy exporter writes it with If and Size, which are refused)."""

    def forward(self, x, src):
        return tuple(x.scatter_reduce(1, self.index, src, how) for how in ("amax", "amin",
                                                                            "prod", "sum"))


#: the added value 1e8 makes the order of a sum visible: (x + 1e8) + 1 - 1e8 != x + 0
ORDER = {"x": np.array([[1.0, 2.0, 1e8, 4.0, 5.0], [1e8, 2.0, 3.0, -7.0, 5.0]], np.float32),
         "src": np.array([[3.0, 1.0, -1e8, 1.0], [0.5, -1e8, 1.0, 0.25]], np.float32)}
SIGNED_ZEROS = {"x": np.array([[0.0, -0.0, np.nan, 1.0, 2.0], [-0.0, 0.0, 5.0, 1.0, 2.0]],
                              np.float32),
                "src": np.array([[-0.0, np.nan, 0.0, 1.0], [0.0, -0.0, np.nan, 0.0]],
                                np.float32)}


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_scatter_and_scatter_add_match_onnxruntime(dynamo, fold, optimize, tmp_path, signer):
    model = export(_Scatters(), [torch.randn(2, 5), torch.randn(2, 4)], tmp_path / "s.onnx",
                   dynamo=dynamo, fold=fold, optimize=optimize, input_names=["x", "src"],
                   output_names=["a", "b"])
    assert "ScatterElements" in {n.op_type for n in onnx.load(model).graph.node}
    _, loaded = import_and_load(model, tmp_path / "s.pha", signer)
    check_against_onnxruntime(model, loaded, [
        {"x": x, "src": s} for x, s in zip(_floats((2, 5)), _floats((2, 4)))] + [ORDER])


@pytest.mark.parametrize("backend", ["numpy", "onnxruntime"])
@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS[2:])
def test_scatter_reduce_matches_onnxruntime(dynamo, fold, optimize, backend, tmp_path, signer):
    model = export(_Reduce(), [torch.randn(2, 5), torch.randn(2, 4)], tmp_path / "r.onnx",
                   dynamo=dynamo, fold=fold, optimize=optimize, input_names=["x", "src"],
                   output_names=["max", "min", "prod", "sum"])
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    on = None
    if backend == "onnxruntime":  # the same glue ops, run by the onnxruntime backend plugin
        from plugins.onnxruntime_backend import OnnxruntimeBackend

        on = OnnxruntimeBackend()
    check_against_onnxruntime(model, loaded, [
        {"x": x, "src": s} for x, s in zip(_floats((2, 5)), _floats((2, 4)))]
        + [ORDER, SIGNED_ZEROS], backend=on)


def _model(tmp_path, op: str, data, indices, updates, *, const: str = "indices",
           dtype=TP.FLOAT, name: str = "m", **attrs):
    """A one-node ``op`` named ``node``. ``data`` and ``updates`` are shapes (graph inputs) or
    arrays (initializers); ``indices`` an array, an initializer unless ``const`` is
    "runtime" (then a graph input of its shape). An all-constant node is added to a graph
    input ``z`` of its shape so that it is used."""
    inputs, inits, names = [], [], []
    for tensor, value in (("data", data), ("indices", indices), ("updates", updates)):
        names.append(tensor)
        if tensor == "indices" and const == "runtime":
            inputs.append(helper.make_tensor_value_info(tensor, TP.INT64, list(value.shape)))
        elif isinstance(value, np.ndarray):
            inits.append(onnx.numpy_helper.from_array(value, tensor))
        else:
            inputs.append(helper.make_tensor_value_info(tensor, dtype, list(value)))
    nodes = [helper.make_node(op, names, ["y"], name="node", **attrs)]
    shape = list(data.shape if isinstance(data, np.ndarray) else data)
    out = "y"
    if not inputs:
        inputs.append(helper.make_tensor_value_info("z", dtype, shape))
        nodes.append(helper.make_node("Add", ["y", "z"], ["s"], name="add"))
        out = "s"
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(out, dtype,
                                                                                 shape)],
                              initializer=inits)
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString())
    return path


def _feeds(model, n: int = 3) -> list[dict[str, np.ndarray]]:
    feeds = []
    graph = onnx.load(model).graph
    for k in range(n):
        feed = {}
        for v in graph.input:
            shape = [d.dim_value for d in v.type.tensor_type.shape.dim]
            if v.type.tensor_type.elem_type == TP.INT64:
                feed[v.name] = RNG.integers(-50, 50, size=shape).astype(np.int64)
            else:
                feed[v.name] = _floats(tuple(shape), 1)[0] if k == n - 1 else \
                    (RNG.standard_normal(shape) * 3).astype(np.float32)
        feeds.append(feed)
    return feeds


ND_CASES = {
    "rows": ((4, 3), np.array([[2], [0]]), (2, 3), {}),
    "elements": ((4, 3), np.array([[1, 2], [3, 0], [-1, -2]]), (3,), {}),
    "negative-rows": ((2, 4, 3), np.array([[-1], [0]]), (2, 4, 3), {}),
    "add-duplicates": ((4, 3), np.array([[1], [1], [3], [1]]), (4, 3), {"reduction": "add"}),
    "mul": ((4, 3), np.array([[0, 1], [0, 1], [2, 2]]), (3,), {"reduction": "mul"}),
    "max": ((4, 3), np.array([[3], [3]]), (2, 3), {"reduction": "max"}),
    "min": ((4, 3), np.array([[0], [3], [0]]), (3, 3), {"reduction": "min"}),
    "empty": ((4, 3), np.zeros((0, 1), np.int64), (0, 3), {}),
}
ELEMENT_CASES = {
    "axis0": ((3, 4), np.array([[1, 0, 2, 0], [0, 2, 1, 1]]), {"axis": 0}),
    "axis-1": ((3, 4), np.array([[-1, 0], [2, -4], [1, 3]]), {"axis": -1}),
    "add-duplicates": ((3, 4), np.array([[1, 1, 1], [0, 0, 3]]),
                       {"axis": 1, "reduction": "add"}),
    "max-duplicates": ((3, 4), np.array([[2, 2], [0, 0], [3, 3]]),
                       {"axis": 1, "reduction": "max"}),
}


@pytest.mark.parametrize("case", ND_CASES)
def test_scatter_nd_matches_onnxruntime(case, tmp_path, signer):
    data, indices, updates, attrs = ND_CASES[case]
    model = _model(tmp_path, "ScatterND", data, indices.astype(np.int64), updates, **attrs)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    check_against_onnxruntime(model, loaded, _feeds(model))


@pytest.mark.parametrize("op, case", [
    (op, case) for op in ("ScatterElements", "Scatter") for case in ELEMENT_CASES
    if op == "ScatterElements" or "reduction" not in ELEMENT_CASES[case][2]])  # (Scatter: none)
def test_scatter_elements_matches_onnxruntime(op, case, tmp_path, signer):
    data, indices, attrs = ELEMENT_CASES[case]
    if op == "Scatter":  # (opset 9 to 10)
        path = tmp_path / "m.onnx"
        model = onnx.load(_model(tmp_path, "ScatterElements", data, indices.astype(np.int64),
                                 indices.shape, **attrs))
        model.graph.node[0].op_type = "Scatter"
        del model.opset_import[:]
        model.opset_import.append(helper.make_opsetid("", 10))
        model.ir_version = 5
        path.write_bytes(model.SerializeToString())
    else:
        path = _model(tmp_path, op, data, indices.astype(np.int64), indices.shape, **attrs)
    _, loaded = import_and_load(path, tmp_path / "m.pha", signer)
    check_against_onnxruntime(path, loaded, _feeds(path))


def test_int64_data_and_int32_indices(tmp_path, signer):
    model = _model(tmp_path, "ScatterElements", (3, 4), np.array([[3, 1], [0, 0]], np.int32),
                   (2, 2), dtype=TP.INT64, axis=1, reduction="add")
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    check_against_onnxruntime(model, loaded, _feeds(model))


@pytest.mark.parametrize("op", ["ScatterND", "ScatterElements"])
def test_an_all_constant_scatter_folds(op, tmp_path, signer):
    data = RNG.standard_normal((3, 4)).astype(np.float32)
    if op == "ScatterND":
        indices, updates = np.array([[2], [0], [2]]), RNG.standard_normal((3, 4))
    else:
        indices, updates = np.array([[1, 1], [3, 0], [0, 0]]), RNG.standard_normal((3, 2))
    model = _model(tmp_path, op, data, indices.astype(np.int64), updates.astype(np.float32),
                   reduction="add", **({"axis": 1} if op == "ScatterElements" else {}))
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert [n.op for n in loaded.graph.nodes] == ["add"]
    check_against_onnxruntime(model, loaded, _feeds(model))


def _refusal_cases():
    i64 = np.int64
    return {
        "twice-without-reduction": (dict(op="ScatterND", data=(4, 3),
                                         indices=np.array([[1], [2], [1]], i64), updates=(3, 3)),
                                    UnsupportedModelError,
                                    "write output element(s) [1, 0], [1, 1], [1, 2] more than "
                                    "once with reduction 'none'"),
        "twice-elements": (dict(op="ScatterElements", data=(3, 4),
                                indices=np.array([[1, 1]], i64), updates=(1, 2), axis=1),
                           UnsupportedModelError, "write output element(s) [0, 1] more than"),
        "nd-out-of-range": (dict(op="ScatterND", data=(4, 3), indices=np.array([[4]], i64),
                                 updates=(1, 3)),
                            ModelFileError, "indices [4] are outside the data's dims [4]"),
        "elements-out-of-range": (dict(op="ScatterElements", data=(3, 4),
                                       indices=np.array([[0, -5]], i64), updates=(1, 2),
                                       axis=1),
                                  ModelFileError, "indices [-5] are outside [-4, 4) (axis 1"),
        "nd-updates-shape": (dict(op="ScatterND", data=(4, 3), indices=np.array([[1]], i64),
                                  updates=(1, 2)),
                             ModelFileError, "updates of shape [1, 2] must be of shape [1, 3]"),
        "nd-index-depth": (dict(op="ScatterND", data=(4, 3),
                                indices=np.array([[1, 2, 0]], i64), updates=(1,)),
                           ModelFileError, "the last dim must be between 1 and the data's rank"),
        "elements-shape": (dict(op="ScatterElements", data=(3, 4),
                                indices=np.array([[0, 1]], i64), updates=(1, 3)),
                           ModelFileError, "must be of one shape"),
        "elements-wider": (dict(op="ScatterElements", data=(3, 4),
                                indices=np.zeros((1, 5), i64), updates=(1, 5), axis=0),
                           ModelFileError, "exceed the data's shape [3, 4] on axis 1"),
        "reduction": (dict(op="ScatterND", data=(4, 3), indices=np.array([[1]], i64),
                           updates=(1, 3), reduction="mean"),
                      ModelFileError, "reduction 'mean' is not one of none, add, mul, max, min"),
        "float-indices": (dict(op="ScatterND", data=(4, 3),
                               indices=np.array([[1.0]], np.float32), updates=(1, 3)),
                          ModelFileError, "indices must be integers"),
    }


def assert_case_refused(case: tuple, tmp_path) -> None:
    """A refusal case ``(model arguments with "op", error, message)``: its one-node model is
    refused with ``error`` naming the node and saying ``message``."""
    args, error, message = case
    op = args.pop("op")
    model = _model(tmp_path, op, args.pop("data"), args.pop("indices"), args.pop("updates"),
                   **args)
    assert_refused(model, error, f"node 'node' ({op})", message)


@pytest.mark.parametrize("case", list(_refusal_cases()))
def test_refusals_name_the_node(case, tmp_path):
    assert_case_refused(_refusal_cases()[case], tmp_path)


def test_a_scatter_stores_one_position_per_update(tmp_path, signer):
    """Constant indices become one int64 flat position per update element: no constant of the
    output's size, however large the output and however many updates reach one element."""
    model = _model(tmp_path, "ScatterND", (64, 64), np.array([[1], [1], [2]], np.int64),
                   (3, 64), reduction="add")
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert [n.op for n in loaded.graph.nodes] == ["reshape", "reshape", "scatter_elements",
                                                  "reshape"]
    (positions,) = loaded.graph.tensors.values()
    assert positions.dtype == np.int64 and positions.shape == (3 * 64,)
    assert positions[:3].tolist() == [64, 65, 66] and positions[64] == 64
    check_against_onnxruntime(model, loaded, _feeds(model))