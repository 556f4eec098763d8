"""If with a condition known at import (torch's legacy exporter writes such checks on static
shapes, e.g. for torch.diagonal: test_masks.py) is imported as the branch it takes, compared
with onnxruntime: branches reading outer values, holding initializers, nested, yielding constants;
an outer value read only inside a branch still counts as read. A run-time condition runs both
branches and picks between them with a ``where``. A condition of several values, branches of
other shapes under a run-time condition, nesting beyond the cap and a branch beyond the node
cap are refused naming the node."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import ModelFileError, UnsupportedModelError
from plugin_host.onnx_import import ReadLimits, convert, import_onnx, recurrent

from .conftest import assert_refused, check_against_onnxruntime, import_and_load, onnx

helper, TP = onnx.helper, onnx.TensorProto
RNG = np.random.default_rng(7)


def _const(name: str, value) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(
        np.asarray(value), name))


def _branch(name: str, nodes, outputs, inits=()) -> onnx.GraphProto:
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(o, TP.FLOAT, None)
                                               for o in outputs], initializer=list(inits))


def _save(tmp_path, nodes, inputs, outputs, *, name="m"):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    return path


def _x(shape=(3, 4)):
    return helper.make_tensor_value_info("x", TP.FLOAT, list(shape))


def _y(shape=(3, 4)):
    return helper.make_tensor_value_info("y", TP.FLOAT, list(shape))


def _feeds(shape=(3, 4)):
    feeds = [{"x": (RNG.standard_normal(shape) * 3).astype(np.float32)} for _ in range(2)]
    feeds[1]["x"].reshape(-1)[:3] = [np.inf, np.nan, -0.0]
    return feeds


def _if_model(tmp_path, cond: bool):
    """y = If(cond) then: relu(x) * w (w a branch initializer) else: x - 1 (a Constant)."""
    w = onnx.numpy_helper.from_array(np.full((3, 4), 2.0, np.float32), "w")
    then = _branch("then", [helper.make_node("Relu", ["x"], ["r"]),
                            helper.make_node("Mul", ["r", "w"], ["t"])], ["t"], [w])
    other = _branch("else", [_const("one", np.float32(1.0)),
                             helper.make_node("Sub", ["x", "one"], ["e"])], ["e"])
    nodes = [_const("c", np.array(cond)),
             helper.make_node("If", ["c"], ["y"], name="if", then_branch=then,
                              else_branch=other)]
    return _save(tmp_path, nodes, [_x()], [_y()])


@pytest.mark.parametrize("cond", [True, False])
def test_the_branch_a_constant_condition_takes_matches_onnxruntime(cond, tmp_path, signer):
    model = _if_model(tmp_path, cond)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    ops = [n.op for n in loaded.graph.nodes]
    assert ops == (["relu", "mul"] if cond else ["sub"]), ops
    check_against_onnxruntime(model, loaded, _feeds())


def test_a_condition_on_a_static_shape_and_nested_ifs(tmp_path, signer):
    """If(Size(x) == 12) then: If(false) then: x else: (tanh(x), a constant 5) -> y + k."""
    inner = helper.make_node(
        "If", ["f"], ["a", "k"], name="inner",
        then_branch=_branch("t2", [helper.make_node("Identity", ["x"], ["i"]),
                                   _const("kt", np.full((3, 4), 7.0, np.float32))], ["i", "kt"]),
        else_branch=_branch("e2", [helper.make_node("Tanh", ["x"], ["h"]),
                                   _const("ke", np.full((3, 4), 5.0, np.float32))], ["h", "ke"]))
    then = _branch("then", [_const("f", np.array(False)), inner], ["a", "k"])
    other = _branch("else", [helper.make_node("Identity", ["x"], ["o"]),
                             helper.make_node("Identity", ["x"], ["o2"])], ["o", "o2"])
    nodes = [helper.make_node("Size", ["x"], ["n"]), _const("twelve", np.int64(12)),
             helper.make_node("Equal", ["n", "twelve"], ["c"]),
             helper.make_node("If", ["c"], ["b", "k5"], name="outer", then_branch=then,
                              else_branch=other),
             helper.make_node("Add", ["b", "k5"], ["y"])]
    model = _save(tmp_path, nodes, [_x()], [_y()])
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert [n.op for n in loaded.graph.nodes] == ["tanh", "add"]
    check_against_onnxruntime(model, loaded, _feeds())


@pytest.mark.parametrize("unrolled", [False, True], ids=["op", "unrolled"])
def test_an_outer_value_read_only_inside_a_branch_is_computed(unrolled, tmp_path, signer,
                                                             monkeypatch):
    """An LSTM's Y_h read only inside the branch: the LSTM mapper must still bind it, as one
    lstm op (2 steps, the import's default) and unrolled."""
    if unrolled:
        monkeypatch.setattr(recurrent, "UNROLLED_STEPS", 2)
    hidden, size, steps = 3, 4, 2
    weights = [onnx.numpy_helper.from_array(
        (RNG.standard_normal(shape) * 0.5).astype(np.float32), name)
        for name, shape in (("W", (1, 4 * hidden, size)), ("R", (1, 4 * hidden, hidden)))]
    then = _branch("then", [helper.make_node("Identity", ["yh"], ["t"])], ["t"])
    other = _branch("else", [helper.make_node("Neg", ["yh"], ["e"])], ["e"])
    nodes = [helper.make_node("LSTM", ["x", "W", "R"], ["", "yh"], name="lstm",
                              hidden_size=hidden),
             _const("c", np.array(True)),
             helper.make_node("If", ["c"], ["y"], name="if", then_branch=then,
                              else_branch=other)]
    graph = helper.make_graph(nodes, "g", [_x((steps, 1, size))], [_y((1, 1, hidden))],
                              initializer=weights)
    model = tmp_path / "lstm.onnx"
    model.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert sum(n.op == "lstm_cell" for n in loaded.graph.nodes) == (steps if unrolled else 0)
    assert sum(n.op == "lstm" for n in loaded.graph.nodes) == (0 if unrolled else 1)
    check_against_onnxruntime(model, loaded, _feeds((steps, 1, size))[:1])


def _run_time_if(tmp_path, then_nodes, then_out, *, cond_shape=(), inits=()):
    """y = If(sum(x) > 0) then: ``then_nodes`` yielding ``then_out`` else: neg(x); the
    condition of shape ``cond_shape`` (a 1-element one)."""
    then = _branch("then", then_nodes, [then_out], inits)
    other = _branch("else", [helper.make_node("Neg", ["x"], ["e"])], ["e"])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=1 if cond_shape else 0),
             _const("zero", np.float32(0.0)),
             helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], name="if", then_branch=then,
                              else_branch=other)]
    return _save(tmp_path, nodes, [_x()], [_y()])


@pytest.mark.parametrize("cond_shape", [(), (1, 1)])
def test_a_run_time_condition_runs_both_branches_and_picks_one(cond_shape, tmp_path, signer):
    """Both branches are mapped and y is a ``where`` of the condition between them: each
    feed takes the branch its sum picks, as in onnxruntime; a constant yielded by a branch
    is a tensor there."""
    w = onnx.numpy_helper.from_array(np.full((3, 4), 2.0, np.float32), "w")
    model = _run_time_if(tmp_path, [helper.make_node("Relu", ["x"], ["r"]),
                                    helper.make_node("Mul", ["r", "w"], ["t"])], "t",
                         cond_shape=cond_shape, inits=[w])
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert "where" in {n.op for n in loaded.graph.nodes}
    feeds = [{"x": np.abs(RNG.standard_normal((3, 4))).astype(np.float32) * sign}
             for sign in (1, -1, 1, -1)]
    check_against_onnxruntime(model, loaded, feeds)
    constant = _run_time_if(tmp_path, [_const("t", np.full((3, 4), 5.0, np.float32))], "t")
    _, loaded = import_and_load(constant, tmp_path / "c.pha", signer)
    check_against_onnxruntime(constant, loaded, feeds)


def test_run_time_branches_of_other_shapes_or_a_float_condition_are_refused(tmp_path):
    model = _run_time_if(tmp_path, [_const("k", np.array([0, 2], np.int64)),
                                    helper.make_node("Gather", ["x", "k"], ["t"])], "t")
    assert_refused(model, UnsupportedModelError, "node 'if' (If)",
                   "output 'y' is float32 [2, 4] from then_branch and float32 [3, 4] from "
                   "else_branch; an If whose condition is computed at run time needs one dtype "
                   "and shape from both")
    then = _branch("then", [helper.make_node("Relu", ["x"], ["t"])], ["t"])
    other = _branch("else", [helper.make_node("Neg", ["x"], ["e"])], ["e"])
    nodes = [helper.make_node("ReduceSum", ["x"], ["c"], keepdims=0),
             helper.make_node("If", ["c"], ["y"], name="if", then_branch=then,
                              else_branch=other)]
    assert_refused(_save(tmp_path, nodes, [_x()], [_y()], name="f"), UnsupportedModelError,
                   "node 'if' (If)", "condition 'c' is computed at run time and is not a bool")


def test_a_condition_of_several_values_is_refused(tmp_path):
    then = _branch("then", [helper.make_node("Relu", ["x"], ["t"])], ["t"])
    other = _branch("else", [helper.make_node("Neg", ["x"], ["e"])], ["e"])
    nodes = [_const("c", np.array([True, False])),
             helper.make_node("If", ["c"], ["y"], name="if", then_branch=then,
                              else_branch=other)]
    assert_refused(_save(tmp_path, nodes, [_x()], [_y()]), ModelFileError, "node 'if' (If)",
                   "condition 'c' has 2 elements")


def _nested(tmp_path, depth: int):
    """``depth`` Ifs, each the then-branch of the one around it (else: neg(x)), the innermost
    yielding relu(x)."""
    branch = _branch("b0", [helper.make_node("Relu", ["x"], ["r0"])], ["r0"])
    for i in range(1, depth + 1):
        leaf = _branch(f"e{i}", [helper.make_node("Neg", ["x"], [f"n{i}"])], [f"n{i}"])
        node = helper.make_node("If", ["c"], [f"r{i}"], name=f"if{i}", then_branch=branch,
                                else_branch=leaf)
        branch = _branch(f"b{i}", [node], [f"r{i}"])
    outer = branch.node[0]
    outer.output[0] = "y"
    return _save(tmp_path, [_const("c", np.array(True)), outer], [_x()], [_y()],
                 name=f"nested{depth}")


def test_nesting_up_to_the_cap_imports_and_beyond_it_is_refused(tmp_path, signer):
    depth = convert.MAX_IF_DEPTH
    _, loaded = import_and_load(_nested(tmp_path, depth), tmp_path / "m.pha", signer)
    assert [n.op for n in loaded.graph.nodes] == ["relu"]
    with pytest.raises(UnsupportedModelError) as info:
        import_onnx(_nested(tmp_path, depth + 1))
    assert f"If branches nested more than {depth} deep" in str(info.value)


def test_branches_count_against_the_node_cap(tmp_path):
    then = _branch("then", [helper.make_node("Relu", ["x"], [f"t{i}"]) for i in range(4)] +
                   [helper.make_node("Identity", ["t3"], ["t"])], ["t"])
    nodes = [_const("c", np.array(True)),
             helper.make_node("If", ["c"], ["y"], name="if", then_branch=then,
                              else_branch=then)]
    with pytest.raises(ModelFileError) as info:
        import_onnx(_save(tmp_path, nodes, [_x()], [_y()]), limits=ReadLimits(max_nodes=6))
    assert "node 'if' (If)" in str(info.value) and "more than 6 nodes, the cap" \
        in str(info.value)
