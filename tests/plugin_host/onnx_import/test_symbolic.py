"""Shape arithmetic over a run-time batch: a model exported with a symbolic batch dim computes
its reshape targets and resize sizes from ``x.shape`` (``Shape -> Gather -> Unsqueeze ->
Concat``). The importer evaluates that chain with the batch kept symbolic, so the artifact
takes any batch; what the ABI's ops cannot express is refused naming the node."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from abi.errors import ABIError, BackendError, ShapeError
from plugin_host.errors import ModelFileError, UnsupportedModelError
from plugin_host.executor import Executor
from plugin_host.onnx_import import build_onnx_artifact, import_onnx

from plugins.numpy_backend import NumpyBackend
from plugins.onnxruntime_backend import OnnxruntimeBackend

from .conftest import (Fn, check_against_onnxruntime, check_against_onnxruntime_and_torch,
                       check_on_both_backends, export_dynamic, import_and_load, onnx,
                       onnxruntime_outputs, refused_on_every_side, torch)

F = torch.nn.functional


class _View(torch.nn.Module):
    def forward(self, x):
        return x.view(x.size(0), -1) * 2.0


class _Groups(torch.nn.Module):
    def forward(self, x):
        return x.reshape(x.shape[0], 2, -1).sum(-1)


class _Tokens(torch.nn.Module):
    def forward(self, x):
        return x.permute(0, 2, 3, 1).reshape(x.shape[0], -1, x.shape[1])


class _Rows(torch.nn.Module):
    out_dim = "rows"  # batch * 3

    def forward(self, x):
        return x.reshape(x.shape[0] * 3, 16) + 1.0


class _Numel(torch.nn.Module):
    """x.numel() (Shape -> ReduceProd from the legacy exporter) in a reshape target."""

    out_dim = "rows"  # batch * 3

    def forward(self, x):
        return x.reshape(x.numel() // 16, 16) * 3.0


class _Upsample(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 2, 1)

    def forward(self, x):
        return F.interpolate(self.conv(x), size=(6, 8), mode="bilinear")


class _ClsToken(torch.nn.Module):
    """A class token before the patches, as a ViT writes it: ``cls.expand(x.shape[0], -1,
    -1)``, which the legacy exporter spells as Reshape, Equal and Where over the shape."""

    def __init__(self):
        super().__init__()
        self.cls = torch.nn.Parameter(torch.randn(1, 1, 3))
        self.pos = torch.nn.Parameter(torch.randn(1, 17, 3))

    def forward(self, x):
        patches = x.flatten(2).transpose(1, 2)
        return torch.cat([self.cls.expand(x.shape[0], -1, -1), patches], 1) + self.pos


def _export(module, path, dynamo: bool):
    x = torch.randn(2, 3, 4, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            program = torch.onnx.export(module.eval(), (x,), dynamo=True, verbose=False,
                                        input_names=["x"], output_names=["y"],
                                        dynamic_shapes=({0: torch.export.Dim("batch")},))
            program.save(str(path))
        else:
            torch.onnx.export(module.eval(), (x,), str(path), dynamo=False, input_names=["x"],
                              output_names=["y"],
                              dynamic_axes={"x": {0: "batch"},
                                            "y": {0: getattr(module, "out_dim", "batch")}})
    return path


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
@pytest.mark.parametrize("module", [_View, _Groups, _Tokens, _Rows, _Numel, _Upsample,
                                    _ClsToken],
                         ids=["view", "groups", "tokens", "rows", "numel", "upsample",
                              "cls_token"])
def test_shapes_from_a_run_time_batch_import_and_take_any_batch(module, dynamo, tmp_path,
                                                                 signer):
    model = _export(module(), tmp_path / "m.onnx", dynamo)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert loaded.graph.inputs[0].shape == ("batch", 3, 4, 4)
    rng = np.random.default_rng(0)
    check_against_onnxruntime(model, loaded, [
        {"x": rng.standard_normal((n, 3, 4, 4)).astype(np.float32)} for n in (1, 3, 5)])


class _StdOverBatch(torch.nn.Module):
    """x.std(0): the unbiased variance divides by the batch size - 1, cast to float."""

    def forward(self, x):
        return x.std(0)


class _MeanByCount(torch.nn.Module):
    def forward(self, x):
        return x.sum((0, 2)) / (x.shape[0] * x.shape[2])


class _ScaledByBatch(torch.nn.Module):
    def forward(self, x):
        return x * x.shape[0] + x.numel()


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
@pytest.mark.parametrize("module", [_StdOverBatch, _MeanByCount, _ScaledByBatch],
                         ids=["std", "mean_by_count", "scaled_by_batch"])
def test_a_run_time_shape_cast_to_float_is_computed_when_the_call_runs(module, dynamo, tmp_path,
                                                                       signer):
    """A shape holding the run-time batch cast to float (a count a model divides or multiplies
    by) is the element count of a mask that carries the batch, in int64, then cast."""
    model = _export(module(), tmp_path / "m.onnx", dynamo)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer, golden_dims={"batch": 3})
    assert "cast" in {n.op for n in loaded.graph.nodes}
    rng = np.random.default_rng(4)
    check_on_both_backends(model, loaded, [
        {"x": rng.standard_normal((n, 3, 4, 4)).astype(np.float32)} for n in (1, 2, 7)])


def _chain(tmp_path, tail, outputs):
    """x (batch, 6, 4) -> Shape -> the nodes ``tail`` -> ``outputs``."""
    helper, tp = onnx.helper, onnx.TensorProto

    def ints(name, values):
        return helper.make_node("Constant", [], [name], value=helper.make_tensor(
            name, tp.INT64, [len(values)], values))

    nodes = [helper.make_node("Shape", ["x"], ["shape"]), ints("i0", [0]), ints("i1", [1]),
             ints("minus", [-1]), ints("three", [3]),
             helper.make_node("Gather", ["shape", "i0"], ["b"], axis=0),
             helper.make_node("Gather", ["shape", "i1"], ["c"], axis=0), *tail]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", tp.FLOAT, ["batch", 6, 4])], outputs)
    path = tmp_path / "c.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_arithmetic_on_run_time_and_fixed_dims(tmp_path, signer):
    """(b, c * 4 // 2) with c fixed: the Mul and Div fold to 12, the batch stays the -1."""
    helper, tp = onnx.helper, onnx.TensorProto
    tail = [helper.make_node("Mul", ["c", "three"], ["c3"]),
            helper.make_node("Div", ["c3", "three"], ["c1"]),
            helper.make_node("Mul", ["c1", "three"], ["c9"]),  # 18
            helper.make_node("Concat", ["b", "c9"], ["target"], axis=0),
            helper.make_node("Reshape", ["x", "target"], ["y"], name="r")]
    with pytest.raises(ModelFileError, match=r"cannot reshape \['batch', 6, 4\] to \['batch', "
                       r"18\]: the fixed dims hold 24 elements per run-time one, the target 18"):
        import_onnx(_chain(tmp_path, tail, [helper.make_tensor_value_info(
            "y", tp.FLOAT, ["batch", 18])]))
    tail[2] = helper.make_node("Mul", ["c1", "i1"], ["c9"])  # 6 * 1 ... * 4 // 6 below
    tail.insert(3, helper.make_node("Concat", ["b", "minus", "c9"], ["t3"], axis=0))
    tail[-1] = helper.make_node("Reshape", ["x", "t3"], ["y"], name="r")
    model = _chain(tmp_path, tail, [helper.make_tensor_value_info("y", tp.FLOAT,
                                                                  ["batch", 4, 6])])
    _, loaded = import_and_load(model, tmp_path / "c.pha", signer)
    assert [n.attrs["shape"] for n in loaded.graph.nodes if n.op == "reshape"] == [(-1, 4, 6)]
    rng = np.random.default_rng(1)
    check_against_onnxruntime(model, loaded, [
        {"x": rng.standard_normal((n, 6, 4)).astype(np.float32)} for n in (1, 4)])


def test_a_quotient_of_a_difference_of_dims_truncates_as_onnx(tmp_path, signer):
    """(1 - batch) / 2 in int64, cast to float: a difference may be negative, where ONNX's
    Div truncates and a floor quotient would not, so the Div runs when the call does."""
    helper, tp = onnx.helper, onnx.TensorProto
    tail = [helper.make_node("Constant", [], ["two"], value=helper.make_tensor(
                "two", tp.INT64, [1], [2])),
            helper.make_node("Sub", ["i1", "b"], ["less"]),
            helper.make_node("Div", ["less", "two"], ["half"], name="half"),
            helper.make_node("Cast", ["half"], ["scale"], to=tp.FLOAT),
            helper.make_node("Mul", ["x", "scale"], ["y"])]
    model = _chain(tmp_path, tail, [helper.make_tensor_value_info("y", tp.FLOAT,
                                                                  ["batch", 6, 4])])
    _, loaded = import_and_load(model, tmp_path / "q.pha", signer, golden_dims={"batch": 4})
    assert "int_div" in {n.op for n in loaded.graph.nodes}
    rng = np.random.default_rng(5)
    feeds = [{"x": rng.standard_normal((n, 6, 4)).astype(np.float32)} for n in (1, 2, 4, 7)]
    for got, want in check_against_onnxruntime(model, loaded, feeds):
        n = len(want["y"])
        assert np.array_equal(got["y"], feeds[[1, 2, 4, 7].index(n)]["x"] * -((n - 1) // 2))


#: differences of floor quotients of one length t: (written as the importer writes them,
#: whether negative at some t >= 0)
_DIFFERENCES = [
    ("t-(2*(t//2))", False), ("t-(((t-2)//2+1)*2)", False), ("(t//4)-(2*(t//8))", False),
    ("t//16-2*(t//32)", False), ("(t+1)//2-t//2", False), ("t//3-t//6-t//6", False),
    ("2*((t+2)//3)-((t+2)//3)-((t+2)//3)", False), ("t-(2*((t+1)//2))", True),
    ("t//2-(t+1)//2", True), ("(t//2)-2*(t//2)+(t//2)-1", True), ("t//2-2*(t//4)-1", True),
    ("t//3-2*(t//6)-1", True),
    # min(t, 5) as the ABI names it (a prefix of t): at most t, and not at least t
    ("t-(slice(t,0,5,1))", False), ("slice(t,0,5,1)-t", True), ("t-2*(slice(t,0,5,1))", True)]


@pytest.mark.parametrize("d, negative", _DIFFERENCES, ids=[d for d, _ in _DIFFERENCES])
def test_whether_a_difference_of_quotients_may_be_negative(d, negative):
    """symbolic.maybe_negative against the values at t = 0 to 300 (Python's // is floor, as
    the dims' quotients): a difference it calls not negative is not negative at any of them,
    and each one here that it calls possibly negative is negative at one."""
    from plugin_host.onnx_import.symbolic import maybe_negative

    first = {"slice": lambda x, start, end, step: len(range(x)[start:end:step])}
    values = [eval(d, {"t": t, **first}) for t in range(301)]  # the table's own expressions
    assert min(values) < 0 if negative else min(values) >= 0
    assert maybe_negative(d) is negative


def _halved_remainder_model(s0: int, k: int, s1: int, times: int, divisor: int
                            ) -> onnx.ModelProto:
    """y = x + Cast(3 * ((t // s0 - times * ((t + k) // s1)) / divisor)), t the run-time
    length of x (t,), every quotient an int64 Div as the legacy exporter writes a U-Net's
    pads."""
    helper, tp = onnx.helper, onnx.TensorProto
    nodes = [helper.make_node("Shape", ["x"], ["t"]),
             helper.make_node("Div", ["t", "s0"], ["a"]),
             helper.make_node("Add", ["t", "k"], ["tk"]),
             helper.make_node("Div", ["tk", "s1"], ["q"]),
             helper.make_node("Mul", ["q", "times"], ["q2"]),
             helper.make_node("Sub", ["a", "q2"], ["rest"]),
             helper.make_node("Div", ["rest", "divisor"], ["half"], name="half"),
             helper.make_node("Mul", ["half", "three"], ["thrice"]),
             helper.make_node("Cast", ["thrice"], ["f"], to=tp.FLOAT),
             helper.make_node("Add", ["x", "f"], ["y"])]
    inits = [helper.make_tensor(n, tp.INT64, [1], [v]) for n, v in
             (("s0", s0), ("k", k), ("s1", s1), ("times", times), ("divisor", divisor),
              ("three", 3))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", tp.FLOAT, ["t"])],
                              [helper.make_tensor_value_info("y", tp.FLOAT, ["t"])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("s0, k, s1, times, divisor, at_import", [
    (1, 0, 2, 2, 2, True), (4, 0, 8, 2, 2, True), (16, 0, 32, 2, 2, True),
    (1, 0, 2, 2, 1, True), (1, 0, 4, 2, 2, True), (1, 1, 2, 2, 2, False),
    (2, 0, 2, 2, 2, False), (2, 1, 2, 1, 2, False)],
    ids=["(t-2*(t//2))//2", "(t//4-2*(t//8))//2", "(t//16-2*(t//32))//2", "t-2*(t//2)",
         "(t-2*(t//4))//2", "(t-2*((t+1)//2))//2", "(t//2-2*(t//2))//2",
         "(t//2-(t+1)//2)//2"])
def test_a_quotient_of_a_remainder_is_shape_arithmetic_where_it_is_not_negative(
        s0, k, s1, times, divisor, at_import, tmp_path, signer):
    """A difference of dims that floor quotients show is not negative (``t - 2*(t//2)``,
    ``t//4 - 2*(t//8)``: a remainder by 2, what a U-Net pads its upsampled map by;
    ``t - 2*(t//4)``) is divided at import, and ``(t % 2) // 2`` is 0 (the graph is y = x),
    where a quotient of a sum no tensor has as a dim is counted when the call runs; one that
    may be negative (``t - 2*((t+1)//2)`` and ``t//2 - (t+1)//2``, 0 or -1; ``t//2 - 2*(t//2)``)
    is the Div itself, when the call runs, truncating as ONNX's. Against onnxruntime at
    lengths 0 to 40 on both backends."""
    path = tmp_path / "q.onnx"
    onnx.save(_halved_remainder_model(s0, k, s1, times, divisor), path)
    _, loaded = import_and_load(path, tmp_path / "q.pha", signer, golden_dims={"t": [3, 8]})
    assert any(n.op == "int_div" and n.name == "half" for n in loaded.graph.nodes) \
        is not at_import
    if s1 == 2 * s0 and times == divisor == 2 and k == 0:
        assert [n.op for n in loaded.graph.nodes] == ["add"]  # x + 0
    rng = np.random.default_rng(12)
    check_on_both_backends(path, loaded, [{"x": rng.standard_normal(t).astype(np.float32)}
                                          for t in range(41)])


@pytest.mark.parametrize("count", ["Size", "ReduceProd", "ReduceProd-axes"])
def test_the_element_count_of_a_run_time_shape(count, tmp_path, signer):
    """Size(x), ReduceProd(Shape(x)) and ReduceProd over axes [0]: batch * 24; divided by 6
    it gives the (batch * 4, 6) reshape target."""
    helper, tp = onnx.helper, onnx.TensorProto
    six = helper.make_node("Constant", [], ["six"], value=helper.make_tensor(
        "six", tp.INT64, [1], [6]))
    if count == "Size":
        first = [helper.make_node("Size", ["x"], ["n0"]),
                 helper.make_node("Unsqueeze", ["n0", "i0"], ["n"])]
    else:
        first = [helper.make_node("ReduceProd", ["shape"], ["n"], keepdims=1,
                                  **({"axes": [0]} if count.endswith("axes") else {}))]
    tail = [six, *first,
            helper.make_node("Div", ["n", "six"], ["rows"]),
            helper.make_node("Concat", ["rows", "six"], ["target"], axis=0),
            helper.make_node("Reshape", ["x", "target"], ["y"], name="r")]
    model = _chain(tmp_path, tail, [helper.make_tensor_value_info("y", tp.FLOAT,
                                                                  ["rows", 6])])
    _, loaded = import_and_load(model, tmp_path / "c.pha", signer)
    assert [n.attrs["shape"] for n in loaded.graph.nodes if n.op == "reshape"] == [(-1, 6)]
    rng = np.random.default_rng(2)
    check_against_onnxruntime(model, loaded, [
        {"x": rng.standard_normal((n, 6, 4)).astype(np.float32)} for n in (1, 3)])


def test_a_target_that_folds_fixed_dims_into_the_batch_is_a_flatten_and_unflatten(
        tmp_path, signer):
    """(batch, 6, 4) to (batch * 3, -1): the -1 is 8, and the three axes are flattened and
    unflattened into (3 * batch, 8)."""
    helper, tp = onnx.helper, onnx.TensorProto
    tail = [helper.make_node("Mul", ["b", "three"], ["b3"]),
            helper.make_node("Concat", ["b3", "minus"], ["target"], axis=0),
            helper.make_node("Reshape", ["x", "target"], ["y"], name="rows")]
    model = _chain(tmp_path, tail, [helper.make_tensor_value_info("y", tp.FLOAT, ["n", 8])])
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    assert [n.op for n in loaded.graph.nodes] == ["flatten", "unflatten"]
    rng = np.random.default_rng(11)
    check_against_onnxruntime(model, loaded, [
        {"x": rng.standard_normal((n, 6, 4)).astype(np.float32)} for n in (1, 2, 5)])


@pytest.mark.parametrize("op, axis, opset", [("Flatten", 0, 17), ("Flatten", 2, 17),
                                             ("Flatten", 3, 17), ("Flatten", 4, 17),
                                             ("Softmax", 2, 11), ("LogSoftmax", 3, 11)])
def test_flatten_at_any_axis_over_run_time_dims(op, axis, opset, tmp_path, signer):
    """Flatten at an axis other than 1 of (batch, 3, h, 4): each side's product may hold a
    run-time dim. The version converter writes a Softmax of opset 12 and below as Flatten at
    its axis, Softmax over the last axis and Reshape back (PaddleOCR's recognizer)."""
    helper, tp = onnx.helper, onnx.TensorProto
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"], name="f", axis=axis)], "g",
        [helper.make_tensor_value_info("x", tp.FLOAT, ["batch", 3, "h", 4])],
        [helper.make_tensor_value_info("y", tp.FLOAT, ["rows", "cols"] if op == "Flatten"
                                       else ["batch", 3, "h", 4])])
    model = tmp_path / "f.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), model)
    _, loaded = import_and_load(model, tmp_path / "f.pha", signer,
                                golden_dims={"batch": [1, 2], "h": [2, 5]})
    rng = np.random.default_rng(12)
    check_on_both_backends(model, loaded, [
        {"x": rng.standard_normal((n, 3, h, 4)).astype(np.float32)}
        for n, h in ((1, 1), (2, 5), (3, 2))])


def test_a_target_with_two_run_time_dims_is_refused_naming_the_node(tmp_path):
    """(batch, 6, 4) to (batch, batch): no grouping of the dims gives it."""
    helper, tp = onnx.helper, onnx.TensorProto
    tail = [helper.make_node("Concat", ["b", "b"], ["target"], axis=0),
            helper.make_node("Reshape", ["x", "target"], ["y"], name="rows")]
    model = _chain(tmp_path, tail, [helper.make_tensor_value_info("y", tp.FLOAT, ["n", "n"])])
    with pytest.raises(UnsupportedModelError) as info:
        import_onnx(model)
    assert info.value.node == "rows"
    assert "['batch', 'batch']" in str(info.value) and "run-time dim" in str(info.value)


def _padded_by_the_batch(tmp_path, less: bool):
    """x (batch, 6, 4) padded in front by the batch (``less``: the batch less 1) on axis 0
    and by 6 on axis 1: pads computed from the shape."""
    helper, tp = onnx.helper, onnx.TensorProto
    zeros = helper.make_node("Constant", [], ["zeros"], value=helper.make_tensor(
        "zeros", tp.INT64, [4], [0, 0, 0, 0]))
    tail = [helper.make_node("Sub", ["b", "i1"], ["b1"]), zeros,
            helper.make_node("Concat", ["b1" if less else "b", "c", "zeros"], ["dims"], axis=0),
            helper.make_node("Pad", ["x", "dims"], ["y"], name="pads")]
    return _chain(tmp_path, tail, [helper.make_tensor_value_info("y", tp.FLOAT, ["n", 12, 4])])


def test_pads_holding_a_run_time_dim_match_onnxruntime(tmp_path, signer):
    """Padded by the batch in front: 2 * batch rows, a gather of the positions."""
    model = _padded_by_the_batch(tmp_path, less=False)
    _, loaded = import_and_load(model, tmp_path / "p.pha", signer, golden_dims={"batch": [1, 3]})
    rng = np.random.default_rng(14)
    check_on_both_backends(model, loaded, [
        {"x": rng.standard_normal((n, 6, 4)).astype(np.float32)} for n in (1, 2, 5)])


def test_pads_to_a_size_no_tensor_carries_are_refused_naming_it(tmp_path):
    """Padded by the batch less 1 (``x.size(0) - 1``): 2 * batch - 1 rows, a size no mask of
    the graph carries, refused naming the node, the size and the --dim that fixes it."""
    with pytest.raises(UnsupportedModelError) as info:
        build_onnx_artifact(_padded_by_the_batch(tmp_path, less=True), tmp_path / "no.pha")
    assert info.value.node == "pads" and "run-time dim '2*batch-1' is a dim of no tensor" in \
        str(info.value) and "--dim batch=SIZE" in str(info.value), str(info.value)


@pytest.mark.parametrize("start, end, axis, shape, refused", [
    ("zero", "b", 0, ["batch", 6, 4], False), ("zero", "b", 1, ["batch", "batch", 4], False),
    ("zero", "c", 1, ["batch", 6, 4], False), ("b", "far", 1, ["batch", "n", 4], True)])
def test_a_slice_to_a_run_time_end_is_its_own_dim_or_refused(start, end, axis, shape, refused,
                                                              tmp_path, signer):
    """Slice(x, start, end) along ``axis``: to the batch along the batch's own axis is the
    whole axis; to the batch along a fixed axis is the first batch rows, past the axis refused
    when the call runs; a fixed end is an int; a start at the batch along a fixed axis (a
    length of 6 - batch) is refused naming it."""
    helper, tp = onnx.helper, onnx.TensorProto
    tail = [helper.make_node("Constant", [], ["zero"], value=helper.make_tensor(
                "zero", tp.INT64, [1], [0])),
            helper.make_node("Constant", [], ["far"], value=helper.make_tensor(
                "far", tp.INT64, [1], [1 << 62])),
            helper.make_node("Constant", [], ["axis"], value=helper.make_tensor(
                "axis", tp.INT64, [1], [axis])),
            helper.make_node("Slice", ["x", start, end, "axis"], ["y"], name="cut")]
    model = _chain(tmp_path, tail, [helper.make_tensor_value_info("y", tp.FLOAT, shape)])
    if refused:
        with pytest.raises(UnsupportedModelError) as info:
            import_onnx(model)
        text = str(info.value)
        assert info.value.node == "cut" and "starts ['batch']: 'batch' along axis 1 (of dim " \
            "6) is a run-time dim; a start must be a constant, an end the input's own" in text, \
            text
        return
    _, loaded = import_and_load(model, tmp_path / "s.pha", signer)
    assert loaded.graph.outputs[0].shape == tuple(shape)
    rng = np.random.default_rng(6)
    check_on_both_backends(model, loaded, [
        {"x": rng.standard_normal((n, 6, 4)).astype(np.float32)} for n in (1, 3, 6)])
    if shape[1] == "batch":  # 7 rows of 6: clamped to 6 as onnxruntime does, not the name's 7
        feed = {"x": np.zeros((7, 6, 4), np.float32)}
        assert onnxruntime_outputs(model, feed)["y"].shape == (7, 6, 4)
        for backend in (NumpyBackend(), OnnxruntimeBackend()):
            with pytest.raises(ABIError, match="symbolic dim 'batch' is 7 from the given "
                                               "bindings but 6 from 'y' dim 1"):
                Executor(loaded.graph, backend).run(dict(feed))


class _PaddedTokens(torch.nn.Module):
    """A BERT-style encoder's run-time forms over a run-time batch and sequence length: the
    position ids a buffer's first ``seq`` entries (``position_ids[:, :seq]``), and the padding
    mask read by advanced indexing with broadcast aranges (``mask[b[:, None, None, None],
    k[None, None, None, :]]``, as transformers' attention masks are made), which the legacy
    exporter writes as a Gather from the flattened mask at ``b * seq + k``."""

    def __init__(self, transposed: bool = False):
        super().__init__()
        self.transposed = transposed
        self.words = torch.nn.Embedding(20, 8)
        self.positions = torch.nn.Embedding(10, 8)
        self.register_buffer("position_ids", torch.arange(10)[None])

    def forward(self, ids, mask):
        batch, seq = ids.shape
        h = self.words(ids) + self.positions(self.position_ids[:, :seq])
        b, k = torch.arange(batch)[:, None, None, None], torch.arange(seq)[None, None, None, :]
        keep = mask.bool().t()[k, b] if self.transposed else mask.bool()[b, k]
        scores = (h @ h.transpose(1, 2)).unsqueeze(1).masked_fill(~keep, -1e4)
        return (scores.softmax(-1) @ h.unsqueeze(1)).squeeze(1)


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_a_table_sliced_to_the_length_and_a_mask_read_by_aranges(dynamo, tmp_path, signer):
    torch.manual_seed(3)
    ids, mask = torch.randint(0, 20, (2, 5)), torch.ones(2, 5, dtype=torch.long)
    mask[1, 3:] = 0
    path = export_dynamic(_PaddedTokens(), [ids, mask], tmp_path / "t.onnx", dynamo=dynamo,
                          names=["ids", "mask"], dims=[{0: "batch", 1: "seq"}] * 2,
                          bounds={"seq": (2, 10)})
    _, loaded = import_and_load(path, tmp_path / "t.pha", signer,
                                golden_dims={"batch": [2, 1], "seq": [5, 3]})
    assert "gather_elements" not in {n.op for n in loaded.graph.nodes}
    # not a view: a Gather at run-time indices of a run-time shape (b, 1, 1, k)
    transposed = export_dynamic(_PaddedTokens(transposed=True), [ids, mask],
                                tmp_path / "k.onnx", dynamo=dynamo, names=["ids", "mask"],
                                dims=[{0: "batch", 1: "seq"}] * 2, bounds={"seq": (2, 10)})
    _, gathered = import_and_load(transposed, tmp_path / "k.pha", signer,
                                  golden_dims={"batch": [2, 1], "seq": [5, 3]})
    assert "gather_elements" in {n.op for n in gathered.graph.nodes}
    rng = np.random.default_rng(8)
    feeds = [{"ids": rng.integers(0, 20, (n, s)), "mask": rng.integers(0, 2, (n, s))}
             for n, s in ((1, 1), (3, 4), (2, 10))]
    check_on_both_backends(path, loaded, feeds)
    check_on_both_backends(transposed, gathered, feeds)
    # 11 positions of a table of 10: its 10 rows, which the Add refuses, as onnxruntime does
    refused_on_every_side(path, loaded.graph, {"ids": np.zeros((1, 11), np.int64),
                                               "mask": np.ones((1, 11), np.int64)},
                          onnxruntime_says="broadcast", numpy_says=r"inputs of shapes "
                          r"\(1, 11, 8\), \(1, 10, 8\) do not broadcast", backend_says="Add",
                          rule_refuses=False)


class _CausalForms(torch.nn.Module):
    """Two decoders' forms over a run-time length: GPT-Neo's causal mask, a constant table's
    rows ``key_length - query_length`` to ``key_length`` (``seq - seq``, 0) and first
    ``key_length`` columns; Mamba's causal conv, padded on both sides, cut to the first
    ``seq`` steps and then the last ``seq`` (a start of minus the dim: all of it)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(4, 4, 4, padding=3, groups=4)
        self.register_buffer("bias", torch.tril(torch.ones(16, 16, dtype=torch.bool))[None])

    def forward(self, x):
        seq = x.shape[1]
        h = self.conv(x.transpose(1, 2))[..., :seq][..., -seq:].transpose(1, 2)
        scores = h @ h.transpose(1, 2)
        causal = self.bias[:, seq - seq:seq, :seq]
        return torch.where(causal, scores, -1e4).softmax(-1) @ h


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_a_causal_mask_cut_from_a_table_and_a_causal_conv_cut_to_the_length(dynamo, tmp_path,
                                                                             signer):
    torch.manual_seed(4)
    path = export_dynamic(_CausalForms(), [torch.randn(2, 5, 4)], tmp_path / "c.onnx",
                          dynamo=dynamo, names=["x"], dims=[{0: "batch", 1: "seq"}],
                          bounds={"seq": (2, 16)})
    _, loaded = import_and_load(path, tmp_path / "c.pha", signer,
                                golden_dims={"batch": [2, 1], "seq": [5, 3]})
    rng = np.random.default_rng(9)
    check_on_both_backends(path, loaded, [
        {"x": rng.standard_normal((n, s, 4)).astype(np.float32)} for n, s in ((1, 1), (3, 16))])


class _Cached(torch.nn.Module):
    """A streaming model's positions over its cache and the new steps, both of run-time
    length, computed before anything concatenates them: ``torch.arange(past + seq)``, a sum
    of two dims no tensor has yet."""

    def forward(self, x, cache):
        positions = torch.arange(cache.shape[1] + x.shape[1]).float()
        return torch.cat([cache, x], 1) * positions[None, :, None]


def test_a_range_to_a_sum_of_run_time_dims_that_no_tensor_has_yet(tmp_path, signer):
    path = export_dynamic(_Cached(), [torch.randn(2, 3, 4), torch.randn(2, 5, 4)],
                          tmp_path / "c.onnx", dynamo=False, names=["x", "cache"],
                          dims=[{0: "batch", 1: "seq"}, {0: "batch", 1: "past"}])
    _, loaded = import_and_load(path, tmp_path / "c.pha", signer,
                                golden_dims={"seq": [3, 1], "past": [5, 2]})
    rng = np.random.default_rng(10)
    check_on_both_backends(path, loaded, [
        {"x": rng.standard_normal((n, s, 4)).astype(np.float32),
         "cache": rng.standard_normal((n, p, 4)).astype(np.float32)}
        for n, s, p in ((1, 1, 1), (3, 2, 9))])


class _CachedAttention(torch.nn.Module):
    """One attention step of a decoder with a key-value cache, as transformers writes it:
    the keys are the cache's and the new tokens', and the padding mask, of the cache's length
    plus the new tokens', is read at ``arange(past + seq)`` by broadcast aranges."""

    def __init__(self):
        super().__init__()
        self.words = torch.nn.Embedding(20, 8)

    def forward(self, ids, mask, past):
        h = self.words(ids)
        keys = torch.cat([past, h], 1)
        b = torch.arange(ids.shape[0])[:, None, None]
        k = torch.arange(past.shape[1] + ids.shape[1])[None, None, :]
        scores = (h @ keys.transpose(1, 2)).masked_fill(~mask.bool()[b, k], -1e4)
        return scores.softmax(-1) @ keys


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_a_decoder_step_with_a_cache_of_run_time_length(dynamo, tmp_path, signer):
    """The mask's length is a dim of its own to the ABI (``total``), which the model reads as
    the cache's and the new tokens' (``past+seq``): the mask sliced to that, then reshaped
    (legacy: a Gather from the flattened mask at ``b * total + k``; dynamo: a GatherND of
    ``(b, k)``). A longer mask reads its first entries, as onnxruntime does; a shorter one is
    refused when the call runs. The golden cases draw the mask that long unless told
    otherwise. Fixed by --dim, it imports too."""
    torch.manual_seed(5)
    args = [torch.randint(0, 20, (2, 3)), torch.ones(2, 8, dtype=torch.long),
            torch.randn(2, 5, 8)]
    path = export_dynamic(_CachedAttention(), args, tmp_path / "d.onnx", dynamo=dynamo,
                          names=["ids", "mask", "past"],
                          dims=[{0: "batch", 1: "seq"}, {0: "batch", 1: "total"},
                                {0: "batch", 1: "past"}],
                          bounds={"seq": (1, 16), "past": (1, 16), "total": (2, 32)})
    said = []
    _, loaded = import_and_load(path, tmp_path / "d.pha", signer, report=said.append,
                                golden_dims={"batch": [2, 1], "past": [5, 2], "seq": [3, 1]})
    assert "gather_elements" not in {n.op for n in loaded.graph.nodes}
    assert "golden sizes of 'total': 8/3, as 'past+seq', the entries of it the model reads " \
        "(--golden-dim total=SIZE,... sets others)" in said, said  # what onnxruntime takes
    rng = np.random.default_rng(11)

    def feed(n, past, seq, total):
        return {"ids": rng.integers(0, 20, (n, seq)), "mask": rng.integers(0, 2, (n, total)),
                "past": rng.standard_normal((n, past, 8)).astype(np.float32)}

    check_on_both_backends(path, loaded, [feed(1, 7, 1, 8), feed(3, 2, 4, 6),
                                          feed(2, 3, 2, 7)])  # the last: a longer mask
    short = feed(2, 3, 2, 4)
    with pytest.raises(ShapeError):
        Executor(loaded.graph, NumpyBackend()).run(dict(short))
    with pytest.raises(BackendError):
        Executor(loaded.graph, OnnxruntimeBackend()).run(dict(short))
    _, fixed = import_and_load(path, tmp_path / "f.pha", signer,
                               dims={"past": 7, "seq": 1, "total": 8})
    check_on_both_backends(path, fixed, [feed(n, 7, 1, 8) for n in (1, 3)])


def test_a_mask_flattened_at_a_negative_axis_read_over_fewer_entries(tmp_path, signer):
    """Flatten(mask, axis=-1) of a (batch, total, 2) mask, read at b * total + k for k below a
    run-time seq <= total: the mask's first seq entries of each row."""
    helper, tp = onnx.helper, onnx.TensorProto

    def ints(name, values):
        return helper.make_node("Constant", [], [name], value=helper.make_tensor(
            name, tp.INT64, [len(values)], values))

    nodes = [helper.make_node("Shape", ["mask"], ["ms"]), helper.make_node("Shape", ["ids"],
                                                                            ["is"]),
             ints("i0", [0]), ints("i1", [1]), ints("a123", [1, 2, 3]), ints("a012", [0, 1, 2]),
             helper.make_node("Constant", [], ["zero"], value=helper.make_tensor(
                 "zero", tp.INT64, [], [0])),
             helper.make_node("Constant", [], ["one"], value=helper.make_tensor(
                 "one", tp.INT64, [], [1])),
             helper.make_node("Gather", ["ms", "i0"], ["b1"], axis=0),
             helper.make_node("Gather", ["ms", "i1"], ["t1"], axis=0),
             helper.make_node("Gather", ["is", "i1"], ["s1"], axis=0),
             helper.make_node("Squeeze", ["b1"], ["b"]), helper.make_node("Squeeze", ["s1"],
                                                                          ["s"]),
             helper.make_node("Range", ["zero", "b", "one"], ["rb"]),
             helper.make_node("Range", ["zero", "s", "one"], ["rk"]),
             helper.make_node("Unsqueeze", ["rb", "a123"], ["ub"]),
             helper.make_node("Unsqueeze", ["rk", "a012"], ["uk"]),
             helper.make_node("Mul", ["ub", "t1"], ["rows"]),
             helper.make_node("Add", ["rows", "uk"], ["at"]),
             helper.make_node("Flatten", ["mask"], ["flat"], axis=-1),
             helper.make_node("Gather", ["flat", "at"], ["y"], name="read", axis=0)]
    graph = helper.make_graph(nodes, "g", [
        helper.make_tensor_value_info("mask", tp.FLOAT, ["batch", "total", 2]),
        helper.make_tensor_value_info("ids", tp.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("y", tp.FLOAT, ["batch", 1, 1, "seq", 2])])
    path = tmp_path / "f.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    _, loaded = import_and_load(path, tmp_path / "f.pha", signer,
                                golden_dims={"total": [6, 4], "seq": [4, 4]})
    rng = np.random.default_rng(12)
    check_on_both_backends(path, loaded, [
        {"mask": rng.standard_normal((n, t, 2)).astype(np.float32),
         "ids": np.zeros((n, q), np.int64)} for n, t, q in ((1, 3, 3), (3, 9, 2))])


class _Positions(torch.nn.Module):
    """A learned positional embedding over a run-time sequence length, and each row's index
    over the run-time batch: torch.arange to a run-time dim (Range(0, d, 1))."""

    def __init__(self):
        super().__init__()
        self.pos = torch.nn.Embedding(16, 4)

    def forward(self, x):
        rows = torch.arange(x.shape[0]).float()[:, None, None]
        return x + self.pos(torch.arange(x.shape[1])) + rows


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_a_range_to_a_run_time_dim_takes_any_size(dynamo, tmp_path, signer):
    model = tmp_path / "pos.onnx"
    x = torch.randn(2, 5, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            torch.onnx.export(_Positions().eval(), (x,), dynamo=True, verbose=False,
                              input_names=["x"], output_names=["y"],
                              dynamic_shapes=({0: torch.export.Dim("batch"),
                                               1: torch.export.Dim("seq", max=16)},)
                              ).save(str(model))
        else:
            axes = {0: "batch", 1: "seq"}
            torch.onnx.export(_Positions().eval(), (x,), str(model), dynamo=False,
                              input_names=["x"], output_names=["y"],
                              dynamic_axes={"x": axes, "y": axes})
    _, loaded = import_and_load(model, tmp_path / "pos.pha", signer)
    assert "cumsum" in {n.op for n in loaded.graph.nodes}
    rng = np.random.default_rng(7)
    feeds = [{"x": rng.standard_normal((b, n, 4)).astype(np.float32)}
             for b, n in ((1, 1), (3, 5), (2, 16))]
    check_on_both_backends(model, loaded, feeds)


class _GridFromFlow(torch.nn.Module):
    """A backward warp's sampling grid, as optical-flow models write it: the pixel grid over
    the run-time height and width plus the flow, normalised to [-1, 1] by max(w - 1, 1) and
    max(h - 1, 1): Range to the dims, and Sub, Max and a cast of the dims as numbers."""

    def forward(self, flow):
        h, w = flow.shape[-2:]
        ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
        grid = torch.stack((xs, ys), 0).float()[None] + flow
        return torch.stack((2.0 * grid[:, 0] / max(w - 1, 1) - 1.0,
                            2.0 * grid[:, 1] / max(h - 1, 1) - 1.0), -1)


class _Anchors(torch.nn.Module):
    """A detector's anchor points, the cell centres of a run-time feature map, added to its
    two channels: torch.arange to each dim in float32 (a Range to a dim cast to float)."""

    def forward(self, x):
        h, w = x.shape[-2:]
        yy, xx = torch.meshgrid(torch.arange(h, dtype=torch.float32) + 0.5,
                                torch.arange(w, dtype=torch.float32) + 0.5, indexing="ij")
        return torch.stack((xx, yy), -1).view(-1, 2) + x.flatten(2).transpose(1, 2)


class _CoordChannels(torch.nn.Module):
    """CoordConv's two extra channels, each pixel's x and y in [-1, 1]: torch.linspace over
    the run-time width and height (the legacy exporter: Range to the dim, times 2 / (w - 1);
    the dynamo exporter fixes the dims it spans)."""

    def forward(self, x):
        b, _, h, w = x.shape
        xs = torch.linspace(-1, 1, w).view(1, 1, 1, w).expand(b, 1, h, w)
        ys = torch.linspace(-1, 1, h).view(1, 1, h, 1).expand(b, 1, h, w)
        return torch.cat([x, xs, ys], 1)


class _StrideTable(torch.nn.Module):
    """A detector's stride per anchor, a row per cell of each run-time feature map, as
    ultralytics' YOLO heads write it: ``torch.full((h * w, 1), stride)``, a ConstantOfShape
    of a product of run-time dims, which no tensor has as one dim; and of twice that."""

    def forward(self, x):
        levels = [x, F.max_pool2d(x, 2)]
        strides = torch.cat([torch.full((f.shape[2] * f.shape[3], 1), 8.0 * 2 ** k)
                             for k, f in enumerate(levels)])
        feats = torch.cat([f.flatten(2) for f in levels], 2).transpose(1, 2)
        twice = torch.full((2 * x.shape[2] * x.shape[3],), 3.0)
        return feats * strides, x.flatten(2).repeat(1, 1, 2) * twice


@pytest.mark.parametrize("module, dynamo", [
    (_GridFromFlow, False), (_GridFromFlow, True), (_Anchors, False), (_Anchors, True),
    (_CoordChannels, False), (_StrideTable, False), (_StrideTable, True)],
    ids=["grid-legacy", "grid-dynamo", "anchors-legacy", "anchors-dynamo", "coords-legacy",
         "strides-legacy", "strides-dynamo"])
def test_run_time_dims_used_as_numbers_are_computed_when_the_call_runs(module, dynamo,
                                                                       tmp_path, signer):
    """A shape value that an op other than shape arithmetic reads (Max, a Sub with a float,
    a Div after a cast) is an int64 tensor of the dims' values, computed when the call
    runs; a difference of dims (w - 1) is its terms' values subtracted; a float Range to a
    dim is the dim's running count; a constant of a shape whose dim is a product of dims
    (``h * w``, ``2 * h * w``) reads each factor from a tensor that has it."""
    model = export_dynamic(module(), [torch.randn(2, 2, 6, 8)], tmp_path / "m.onnx",
                           dynamo=dynamo, names=["x"], dims=[{0: "batch", 2: "h", 3: "w"}],
                           bounds={"h": (2, 64), "w": (2, 64)},
                           outputs=("y", "z") if module is _StrideTable else ("y",))
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer,
                                golden_dims={"h": [3, 7], "w": [5, 2]})
    assert loaded.graph.inputs[0].shape == ("batch", 2, "h", "w")
    rng = np.random.default_rng(12)
    check_on_both_backends(model, loaded, [
        {"x": rng.standard_normal(shape).astype(np.float32)}
        for shape in ((1, 2, 2, 2), (3, 2, 5, 9), (2, 2, 16, 3))])


class _Windows(torch.nn.Module):
    """Shifted-window attention's partition of a (b, h, w, c) map into 4 x 4 windows, a
    layer over each, and the way back: views to ``h // 4`` and from ``(h // 4, 4)``."""

    def __init__(self):
        super().__init__()
        self.mix = torch.nn.Linear(16, 16)

    def forward(self, x):
        b, h, w, c = x.shape
        y = x.view(b, h // 4, 4, w // 4, 4, c).permute(0, 1, 3, 5, 2, 4).reshape(-1, c, 16)
        y = self.mix(y).view(b, h // 4, w // 4, c, 4, 4).permute(0, 1, 4, 2, 5, 3)
        return y.reshape(b, h, w, c) + x


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_windows_of_a_run_time_map_take_any_multiple_of_the_window(dynamo, tmp_path, signer):
    """``h // 4`` in a target splits h into (-1, 4); ``(h // 4, 4)`` back is flattened and
    settled as h. A height the window does not divide is refused when the call runs, by
    onnxruntime too."""
    _split_map_checked(_Windows(), (2, 8, 12, 3), {0: "batch", 1: "h", 2: "w"}, 4,
                       {"h": [8, 4], "w": [12, 16]}, ("batch", "h", "w", 3),
                       [(1, 4, 4, 3), (3, 8, 20, 3), (2, 16, 4, 3)], (1, 6, 8, 3), dynamo,
                       tmp_path, signer)


def _split_map_checked(module, example: tuple, dims: dict, least: int, golden: dict,
                       out_shape: tuple, shapes: list, bad_shape: tuple, dynamo: bool,
                       tmp_path, signer) -> None:
    """``module`` exported with the run-time ``dims`` (h and w at least ``least``), built
    with ``golden`` sizes: its output shape is ``out_shape``, it matches onnxruntime on both
    backends at ``shapes``, and an input of ``bad_shape``, which its windows or areas do not
    split, is refused on every side."""
    path = export_dynamic(module, [torch.randn(*example)], tmp_path / "m.onnx", dynamo=dynamo,
                          names=["x"], dims=[dims], bounds={"h": (least, 64), "w": (least, 64)})
    _, loaded = import_and_load(path, tmp_path / "m.pha", signer, golden_dims=golden)
    assert loaded.graph.outputs[0].shape == out_shape
    rng = np.random.default_rng(9)
    check_on_both_backends(path, loaded, [
        {"x": rng.standard_normal(shape).astype(np.float32)} for shape in shapes])
    refused_on_every_side(path, loaded.graph, {"x": np.zeros(bad_shape, np.float32)},
                          onnxruntime_says="Reshape", numpy_says="does not split into sizes",
                          backend_says=r"^unflatten: ")


class _Areas(torch.nn.Module):
    """YOLO12's area attention: a map's h * w tokens split into 4 areas folded into the
    batch, ``(b, h*w, c)`` to ``(b*4, (h*w)//4, c)``, attention within each, and back,
    ``(b*4, (h*w)//4, c)`` to ``(b, h, w, c)``."""

    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Conv2d(8, 24, 1)

    def forward(self, x):
        b, c, h, w = x.shape
        qkv = self.qkv(x).flatten(2).transpose(1, 2).reshape(b * 4, h * w // 4, c * 3)
        b4, n, _ = qkv.shape
        q, k, v = qkv.view(b4, n, 2, 12).permute(0, 2, 3, 1).split([4, 4, 4], dim=2)
        y = v @ (q.transpose(-2, -1) @ k).softmax(-1).transpose(-2, -1)
        y = y.permute(0, 3, 1, 2).reshape(b4 // 4, n * 4, c)
        return y.reshape(b4 // 4, h, w, c).permute(0, 3, 1, 2)


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_areas_of_a_run_time_map_take_any_map_of_a_multiple_of_four_cells(dynamo, tmp_path,
                                                                          signer):
    """``(h*w)//4`` tokens per area are read when the call runs (every fourth of the h * w
    cells); a reshape whose dims fall into no groups of equal products goes through one axis.
    A map of h * w cells that 4 does not divide is refused when the call runs, by
    onnxruntime too."""
    _split_map_checked(_Areas(), (2, 8, 4, 6), {0: "batch", 2: "h", 3: "w"}, 2,
                       {"h": [4, 2], "w": [6, 2]}, ("batch", 8, "h", "w"),
                       [(1, 8, 4, 6), (3, 8, 2, 2), (2, 8, 5, 4)], (1, 8, 3, 3), dynamo,
                       tmp_path, signer)


class _PadToSkip(torch.nn.Module):
    """A U-Net's up step padding the upsampled map to the skip connection's size: pads that
    are differences of run-time dims."""

    def forward(self, low, skip):
        up = F.interpolate(low, scale_factor=2, mode="nearest")
        dy, dx = skip.size(2) - up.size(2), skip.size(3) - up.size(3)
        return torch.cat([skip, F.pad(up, [dx // 2, dx - dx // 2, dy // 2, dy - dy // 2])], 1)


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_pads_computed_from_run_time_dims_are_refused_naming_them(dynamo, tmp_path):
    path = export_dynamic(_PadToSkip(), [torch.randn(1, 2, 4, 5), torch.randn(1, 3, 9, 11)],
                          tmp_path / "u.onnx", dynamo=dynamo, names=["low", "skip"],
                          dims=[{2: "h1", 3: "w1"}, {2: "h", 3: "w"}],
                          bounds={"h1": (2, 32), "w1": (2, 32), "h": (2, 64), "w": (2, 64)})
    with pytest.raises(UnsupportedModelError) as info:
        import_onnx(path)
    text = str(info.value)
    assert info.value.op == "Pad" and "pads" in text and "must be a constant" in text, text
    assert "--dim h=SIZE --dim h1=SIZE --dim w=SIZE --dim w1=SIZE" in text, text


class _RunningMean(torch.nn.Module):
    """The running mean over a run-time length: the running sum over arange(1, t + 1) in
    float32, and each step's position counted from 1 in int64."""

    def forward(self, x):
        t = x.shape[1]
        mean = x.cumsum(1) / torch.arange(1, t + 1, dtype=torch.float32).view(1, -1, 1)
        return mean * torch.arange(1, t + 1).view(1, -1, 1)


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_a_range_from_an_offset_to_a_run_time_dim_plus_it(dynamo, tmp_path, signer):
    """Range(1, t + 1, 1): t entries, arange(t) plus 1, in float32 and in int64."""
    model = export_dynamic(_RunningMean(), [torch.randn(2, 5, 4)], tmp_path / "m.onnx",
                           dynamo=dynamo, names=["x"], dims=[{0: "batch", 1: "seq"}])
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    rng = np.random.default_rng(8)
    check_on_both_backends(model, loaded, [
        {"x": rng.standard_normal((b, n, 4)).astype(np.float32)}
        for b, n in ((1, 1), (3, 5), (2, 16))])


class _HalfSize(torch.nn.Module):
    """A map brought to half its run-time size, interpolate(size=(h // 2, w // 2)), next to
    every other row and column (x[:, :, 1::2, 1::2]), and the counts of the length less two
    beside the rows (torch.arange(h - 2))."""

    def forward(self, x):
        h, w = x.shape[-2:]
        half = F.interpolate(x, size=(h // 2, w // 2), mode="bilinear", align_corners=False)
        rows = torch.arange(h - 2).float().view(1, 1, -1, 1).expand(x.shape[0], 2, -1, w)
        return half + x[:, :, 1::2, 1::2], torch.cat([x, rows], 2)


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_sizes_that_are_quotients_or_differences_of_a_run_time_dim(dynamo, tmp_path, signer):
    """h // 2 and h - 2, which no tensor of the model has as a dim, are read from a mask of h
    sliced from 1 by 2 and from 2: the resize's sizes and the Range's length; the slice
    x[:, :, 1::2] is h // 2 long by name too, so the sum keeps (h//2, w//2)."""
    model = export_dynamic(_HalfSize(), [torch.randn(2, 2, 6, 8)], tmp_path / "m.onnx",
                           dynamo=dynamo, names=["x"], outputs=["y", "z"],
                           dims=[{0: "batch", 2: "h", 3: "w"}],
                           bounds={"h": (4, 64), "w": (4, 64)})
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer,
                                golden_dims={"h": [4, 7], "w": [9, 6]})
    types = loaded.graph.check()
    assert types[loaded.graph.outputs[0].name].shape == ("batch", 2, "h//2", "w//2")
    rng = np.random.default_rng(14)
    check_on_both_backends(model, loaded, [
        {"x": rng.standard_normal(shape).astype(np.float32)}
        for shape in ((1, 2, 4, 4), (3, 2, 9, 5), (2, 2, 16, 11))])


@pytest.mark.parametrize("start, step", [(1, 1), (0, 2)])
def test_a_range_to_a_dim_less_its_start_or_by_another_step(start, step, tmp_path, signer):
    """Range(1, d, 1) has d - 1 entries: a mask of d sliced from 1 carries that length, and
    the Range imports. Range(0, d, 2) has (d+1)//2, a mask of d sliced by 2 (more steps in
    test_range_steps.py)."""
    helper, tp = onnx.helper, onnx.TensorProto
    tail = [helper.make_node("Squeeze", ["b", "i0"], ["n"]),
            helper.make_node("Constant", [], ["start"], value=helper.make_tensor(
                "start", tp.INT64, [], [start])),
            helper.make_node("Constant", [], ["step"], value=helper.make_tensor(
                "step", tp.INT64, [], [step])),
            helper.make_node("Range", ["start", "n", "step"], ["y"], name="steps")]
    model = _chain(tmp_path, tail, [helper.make_tensor_value_info("y", tp.INT64, ["m"])])
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    check_on_both_backends(model, loaded, [
        {"x": np.zeros((n, 6, 4), np.float32)} for n in (1, 2, 7)])


@pytest.mark.parametrize("other, message", [
    ([1], "Equal of 'batch' and 1 in a shape holding run-time dims is known only at run time"),
    ([-1], None),  # a size is never -1: known (False), and the model imports
])
def test_equal_of_a_run_time_dim_is_evaluated_where_it_is_known(other, message, tmp_path):
    helper, tp = onnx.helper, onnx.TensorProto
    tail = [helper.make_node("Constant", [], ["other"], value=helper.make_tensor(
                "other", tp.INT64, [1], other)),
            helper.make_node("Equal", ["b", "other"], ["same"], name="eq"),
            helper.make_node("Where", ["same", "i1", "b"], ["rows"]),
            helper.make_node("Concat", ["rows", "minus"], ["target"], axis=0),
            helper.make_node("Reshape", ["x", "target"], ["y"], name="r")]
    model = _chain(tmp_path, tail, [helper.make_tensor_value_info("y", tp.FLOAT,
                                                                  ["batch", 24])])
    if message is None:
        assert import_onnx(model).graph.outputs[0].shape == ("batch", 24)
        return
    with pytest.raises(UnsupportedModelError) as info:
        import_onnx(model)
    assert info.value.node == "eq" and message in str(info.value)


@pytest.mark.parametrize("op, other, known", [
    ("Max", "b", True),     # tf2onnx's Einsum: the Max of both operands' batch dims
    ("Min", "b", True),
    ("Max", "zero", True),  # a size is never negative: max(batch, 0) is the batch
    ("Max", "three", False),  # max(batch, 3): known only when the call runs
])
def test_max_and_min_of_a_run_time_dim_are_evaluated_where_known(op, other, known, tmp_path,
                                                                  signer):
    """Known at import, the target stays shape arithmetic and the model takes any batch;
    otherwise the Max is computed when the call runs, and the Reshape that needs the target
    at import is refused naming the dim (Max and Min were never evaluated before)."""
    helper, tp = onnx.helper, onnx.TensorProto
    tail = [helper.make_node("Constant", [], ["zero"], value=helper.make_tensor(
                "zero", tp.INT64, [1], [0])),
            helper.make_node(op, ["b", other, "b"], ["rows"], name="m"),
            helper.make_node("Concat", ["rows", "minus"], ["target"], axis=0),
            helper.make_node("Reshape", ["x", "target"], ["y"], name="r")]
    model = _chain(tmp_path, tail, [helper.make_tensor_value_info("y", tp.FLOAT,
                                                                  ["batch", 24])])
    if not known:
        with pytest.raises(UnsupportedModelError) as info:
            import_onnx(model)
        assert info.value.node == "r" and "['batch']" in str(info.value)
        return
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert loaded.graph.outputs[0].shape == ("batch", 24)
    rng = np.random.default_rng(3)
    check_on_both_backends(model, loaded, [
        {"x": rng.standard_normal((n, 6, 4)).astype(np.float32)} for n in (1, 3)])


#: Min of the length and an int, used as a size: a slice's end, a shape, a Range's limit
AT_MOST = {
    "slice": lambda x: x[:, :min(x.shape[1], 5)] * 2,
    "zeros": lambda x: x[:, :4].sum() + torch.zeros(x.shape[0], min(x.shape[1], 4)),
    "arange": lambda x: x[:, :1] * torch.arange(min(x.shape[1], 4)),
}


@pytest.mark.parametrize("name", AT_MOST)
def test_min_of_a_dim_and_an_int_is_its_first_entries(name, tmp_path, signer):
    """``min(t, n)`` (the dynamo exporter's Min of the length and an int) is the ABI's dim of
    the length's first n entries, ``slice(t,0,n,1)``, carried by the length's mask cut to n:
    against onnxruntime on both backends and torch at lengths below, at and above n."""
    fn = AT_MOST[name]
    model = export_dynamic(Fn(fn), [torch.randn(2, 10)], tmp_path / "m.onnx", dynamo=True,
                           names=["x"], dims=[{1: "t"}], bounds={"t": (4, 4096)})
    assert "Min" in {n.op_type for n in onnx.load(model).graph.node}
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer, golden_dims={"t": [4, 9]})
    feeds = [{"x": np.random.default_rng(t).standard_normal((2, t)).astype(np.float32)}
             for t in (2, 3, 4, 5, 6, 11)]
    check_against_onnxruntime_and_torch(model, loaded, feeds, Fn(fn), 1e-6)


def test_max_of_zero_and_a_difference_that_may_be_negative_is_left_to_the_call(tmp_path):
    """``F.pad(x, (0, max(0, 8 - t)))``, a pad to at least 8 steps: ``8 - t`` is negative
    past 8, where the Max is 0. It was taken as ``8 - t`` (the rule for a size, which is
    never negative), which cropped a longer input to 8 steps; now the Max is computed when
    the call runs and the Pad, whose pads must be known at import, is refused naming it."""
    model = export_dynamic(Fn(lambda x: F.pad(x, (0, max(0, 8 - x.shape[1])))),
                           [torch.randn(2, 5)], tmp_path / "p.onnx", dynamo=True, names=["x"],
                           dims=[{1: "t"}])
    assert "Max" in {n.op_type for n in onnx.load(model).graph.node}
    [y] = onnxruntime_outputs(model, {"x": np.ones((2, 12), np.float32)}).values()
    assert y.shape == (2, 12)
    with pytest.raises(UnsupportedModelError) as info:
        import_onnx(model)
    assert "(Pad)" in str(info.value) and "computed at run time" in str(info.value)


def test_shape_arithmetic_is_capped_like_constant_folding(tmp_path):
    """A hostile chain broadcasting the run-time shape against a large constant is refused
    before it builds a huge object array."""
    helper, tp = onnx.helper, onnx.TensorProto
    big = helper.make_tensor("big", tp.INT64, [1, 1 << 12], [1] * (1 << 12))
    tail = [helper.make_node("Unsqueeze", ["shape", "i1"], ["col"]),  # (3, 1)
            helper.make_node("Mul", ["col", "big"], ["y"], name="bomb")]
    model = _chain(tmp_path, tail, [helper.make_tensor_value_info("y", tp.INT64, [3, 1 << 12])])
    m = onnx.load(model)
    m.graph.initializer.append(big)
    onnx.save(m, model)
    from plugin_host.onnx_import import ReadLimits
    with pytest.raises(ModelFileError) as info:
        import_onnx(model, limits=ReadLimits(max_tensor_elements=1 << 12))
    assert info.value.node == "bomb" and "cap" in str(info.value)


def test_a_shape_as_graph_output_is_refused_saying_why(tmp_path):
    helper, tp = onnx.helper, onnx.TensorProto
    tail = [helper.make_node("Identity", ["shape"], ["y"])]
    model = _chain(tmp_path, tail, [helper.make_tensor_value_info("y", tp.INT64, [3])])
    with pytest.raises(UnsupportedModelError, match=r"graph output 'y' is a shape holding "
                       r"run-time dims \(\['batch', 6, 4\]\)"):
        import_onnx(model)


class _Zeros(torch.nn.Module):
    def forward(self, x):
        return x + torch.zeros(x.shape[0], 3, 4, 4) + torch.full((x.shape[0], 1, 1, 4), 2.5)


class _Recurrent(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(4, 5, batch_first=True)

    def forward(self, x):
        h0 = torch.zeros(1, x.size(0), 5)  # the usual way to start from zero state
        out, _ = self.lstm(x.flatten(2)[:, :, :4], (h0, h0))
        return out


class _ExpandAs(torch.nn.Module):
    """expand_as(x) under a run-time batch: Expand(v, Shape(x))."""

    def forward(self, x):
        return torch.arange(4.0).expand_as(x) * x


class _TopkMask(torch.nn.Module):
    """A mask of each row's three largest: the legacy exporter expands the scattered 1.0 to
    the run-time Shape of topk's indices."""

    def forward(self, x):
        x = x.flatten(1)
        return torch.zeros_like(x).scatter(1, torch.topk(x, 3, dim=1).indices, 1.0) * x


class _Pick(torch.nn.Module):
    """Channels and rows by indices given as inputs, under a run-time batch: run-time
    gathers along fixed axes of data whose batch is a run-time dim."""

    def forward(self, x, i, j):
        return x[:, i].sum(1) + x[:, :, j].sum(2)[:, :, None, :1]


def test_run_time_indices_along_fixed_axes_take_any_batch(tmp_path, signer):
    model = tmp_path / "p.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(_Pick().eval(), (torch.randn(2, 3, 4, 4), torch.tensor([2, 0]),
                                           torch.tensor([[3, 1], [0, 0]])),
                          str(model), dynamo=False, input_names=["x", "i", "j"],
                          output_names=["y"], dynamic_axes={"x": {0: "batch"},
                                                            "y": {0: "batch"}})
    _, loaded = import_and_load(model, tmp_path / "p.pha", signer)
    assert loaded.graph.inputs[0].shape == ("batch", 3, 4, 4)
    rng = np.random.default_rng(6)
    feeds = [{"x": rng.standard_normal((n, 3, 4, 4)).astype(np.float32),
              "i": rng.integers(0, 3, 2), "j": rng.integers(0, 4, (2, 2))} for n in (1, 3, 5)]
    check_on_both_backends(model, loaded, feeds)


@pytest.mark.parametrize("module", [_Zeros, _Recurrent, _ExpandAs, _TopkMask],
                         ids=["zeros", "lstm_zero_state", "expand_as", "topk_mask"])
def test_constants_of_a_run_time_shape_take_any_batch(module, tmp_path, signer):
    """torch.zeros / torch.full with a run-time batch (ConstantOfShape of a run-time shape)
    become where(mask, c, c), the mask reading the batch back from the input; an Expand to a
    run-time shape the same over the value expanded on the fixed dims."""
    model = _export(module(), tmp_path / "z.onnx", dynamo=False)
    _, loaded = import_and_load(model, tmp_path / "z.pha", signer)
    assert "where" in {n.op for n in loaded.graph.nodes}
    rng = np.random.default_rng(4)
    feeds = [{"x": rng.standard_normal((n, 3, 4, 4)).astype(np.float32)} for n in (1, 3, 5)]
    if module is _Zeros:
        feeds[1]["x"][0, 0, 0, 0] = np.nan  # the mask is nan-blind: where(m, c, c) is c
    check_against_onnxruntime(model, loaded, feeds)


@pytest.mark.parametrize("module", [_Zeros, _ExpandAs, _TopkMask, _ClsToken],
                         ids=["zeros", "expand_as", "topk_mask", "cls_token"])
def test_the_dynamo_exporter_s_forms_take_any_batch_too(module, tmp_path, signer):
    """torch's default exporter writes these idioms with other ops (its own shape
    arithmetic, ScatterElements at topk's indices); they import and take any batch."""
    model = _export(module(), tmp_path / "d.onnx", dynamo=True)
    _, loaded = import_and_load(model, tmp_path / "d.pha", signer)
    assert loaded.graph.inputs[0].shape[0] == "batch"
    rng = np.random.default_rng(5)
    check_against_onnxruntime(model, loaded, [
        {"x": rng.standard_normal((n, 3, 4, 4)).astype(np.float32)} for n in (1, 3, 5)])


class _FirstToEach(torch.nn.Module):
    """The first step of x (batch, t, 3) added to each of y's p steps: ``x[:, :1]`` (of size
    min(t, 1) along the run-time t) expanded to the run-time p."""

    def forward(self, x, y):
        return x[:, :1].expand(-1, y.shape[1], -1) + y


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_an_expand_of_a_run_time_dim_that_is_one_when_the_call_runs(dynamo, tmp_path, signer):
    """Expand meets a run-time dim that is not the target's: ``where`` broadcasts it when the
    call runs, and an ``unflatten`` settles the axis as the target's dim. An empty x (t = 0)
    does not broadcast: refused on both backends, as by onnxruntime."""
    path = export_dynamic(_FirstToEach(), [torch.randn(2, 5, 3), torch.randn(2, 7, 3)],
                          tmp_path / "e.onnx", dynamo=dynamo, names=["x", "y"],
                          dims=[{0: "batch", 1: "t"}, {0: "batch", 1: "p"}], outputs=["z"])
    _, loaded = import_and_load(path, tmp_path / "e.pha", signer)
    assert loaded.graph.outputs[0].shape == ("batch", "p", 3)
    rng = np.random.default_rng(13)
    check_on_both_backends(path, loaded, [
        {"x": rng.standard_normal((b, t, 3)).astype(np.float32),
         "y": rng.standard_normal((b, p, 3)).astype(np.float32)}
        for b, t, p in ((1, 1, 1), (2, 6, 3), (3, 2, 9))])
    refused_on_every_side(path, loaded.graph, {"x": np.zeros((1, 0, 3), np.float32),
                                               "y": np.ones((1, 4, 3), np.float32)},
                          onnxruntime_says="Expand", numpy_says="do not broadcast",
                          backend_says="broadcast")


@pytest.mark.parametrize("strides, view", [((12, 4, 1), True), ((12, 1, 3), False)])
def test_the_dynamo_exporters_as_strided_is_a_reshape_where_it_is_one(strides, view, tmp_path,
                                                                      signer):
    """aten.as_strided under a run-time batch (ConvNeXt's average pool of a channels-last
    map), as the dynamo exporter writes it: a Gather from x flattened at positions computed
    from Range over the batch times its stride, plus constant ones for the other axes. In
    row-major order that is a reshape of x (batch, 6, 4) to (batch, 2, 3, 4); in another
    order (a transpose) a gather at the positions computed, of a run-time shape."""
    helper, tp = onnx.helper, onnx.TensorProto
    inner = sum(np.arange(n).reshape([-1 if j == i else 1 for j in range(3)]) * s
                for i, (n, s) in enumerate(zip((2, 3, 4), strides))).reshape(1, 2, 3, 4)

    def const(name, value):
        return helper.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(
            np.asarray(value, np.int64), name))

    nodes = [helper.make_node("Shape", ["x"], ["n"], start=0, end=1),
             helper.make_node("Squeeze", ["n"], ["count"]), const("zero", 0), const("one", 1),
             const("stride", 24), const("axes", [1, 2, 3]), const("inner", inner),
             const("minus", [-1]), const("none", np.zeros((1, 1, 1, 1))),
             helper.make_node("Range", ["zero", "count", "one"], ["rows"]),
             helper.make_node("Mul", ["rows", "stride"], ["starts"]),
             helper.make_node("Unsqueeze", ["starts", "axes"], ["starts4"]),
             helper.make_node("Add", ["starts4", "inner"], ["at"]),
             helper.make_node("Add", ["at", "none"], ["index"]),
             helper.make_node("Reshape", ["x", "minus"], ["flat"]),
             helper.make_node("Gather", ["flat", "index"], ["y"], name="as_strided", axis=0)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", tp.FLOAT, ["batch", 6, 4])], [helper.make_tensor_value_info(
            "y", tp.FLOAT, ["batch", 2, 3, 4])])
    model = tmp_path / "s.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    _, loaded = import_and_load(model, tmp_path / "s.pha", signer)
    assert ("gather_elements" in {n.op for n in loaded.graph.nodes}) != view
    rng = np.random.default_rng(14)
    check_on_both_backends(model, loaded, [
        {"x": rng.standard_normal((n, 6, 4)).astype(np.float32)} for n in (1, 3)])


class _Siamese(torch.nn.Module):
    """RAFT's forms under a run-time batch: two images concatenated along the batch, encoded
    together and chunked back apart ((batch+batch+1)//2 is batch), and a coordinate grid of
    batch 1 repeated to the batch (a Tile by a run-time dim)."""

    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.Conv2d(3, 2, 3, padding=1)
        self.register_buffer("grid", torch.arange(2 * 4 * 5, dtype=torch.float32).reshape(
            1, 2, 4, 5))

    def forward(self, a, b):
        f1, f2 = self.encoder(torch.cat([a, b], 0)).chunk(2, dim=0)
        return f1 - f2 + self.grid.repeat(a.shape[0], 1, 1, 1)


def test_a_batch_of_two_inputs_chunked_back_and_a_grid_repeated_to_the_batch(tmp_path, signer):
    """The legacy exporter's forms (the dynamo exporter specializes this batch to the
    example's)."""
    torch.manual_seed(2)
    path = export_dynamic(_Siamese(), [torch.randn(2, 3, 4, 5)] * 2, tmp_path / "s.onnx",
                          dynamo=False, names=["a", "b"], dims=[{0: "batch"}] * 2)
    _, loaded = import_and_load(path, tmp_path / "s.pha", signer, golden_dims={"batch": [1, 3]})
    rng = np.random.default_rng(15)
    check_on_both_backends(path, loaded, [
        {n: rng.standard_normal((k, 3, 4, 5)).astype(np.float32) for n in "ab"} for k in (1, 4)])
