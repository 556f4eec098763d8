"""Sequences whose structure is known at import (lists of tensor names, never in the artifact),
compared with onnxruntime: each sequence op in hand-built graphs (positions given, defaulted and
negative; SplitToSequence of each form; ConcatFromSequence with and without new_axis; all
constants folded), a sequence through an If and through nested Loops, and torch.jit.script's
list appended to in a loop, stacked and concatenated, under the legacy exporter. A sequence
that is a graph output, a graph input or the input of another op, a run-time position, a
position out of range, the concatenation of an empty sequence and mixed dtypes are refused
naming the node."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from plugin_host.errors import ModelFileError, UnsupportedModelError
from plugin_host.onnx_import import onnx_to_graph

from .conftest import (assert_refused, check_against_onnxruntime, export, import_and_load, onnx,
                       torch)
from .test_loop import SHAPE, _const, _feeds, _ops, _save, _vi

helper, TP = onnx.helper, onnx.TensorProto
ONLY_HERE = "a sequence is supported only within the import"


def _dims(name: str, rank: int = 2):
    """A float output of ``rank`` run-time dims (the shape onnxruntime gives it is compared)."""
    return _vi(name, shape=[f"{name}_d{j}" for j in range(rank)])


def _seq_vi(name: str, dtype=TP.FLOAT):
    return helper.make_tensor_sequence_value_info(name, dtype, None)


def _three() -> list:
    """r = relu(x), s = sin(x), t = tanh(x): three elements to build sequences of."""
    return [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Sin", ["x"], ["s"]),
            helper.make_node("Tanh", ["x"], ["t"])]


def test_construct_at_and_length(tmp_path, signer):
    """SequenceAt at a positive position and a negative int32 one; SequenceLength a constant
    scaling an element. The third element (tanh) is read by nothing, so it is left out."""
    nodes = _three() + [
        helper.make_node("SequenceConstruct", ["r", "s", "t"], ["seq"], name="construct"),
        _const("one", np.int64(1)), _const("minus3", np.int32(-3)),
        helper.make_node("SequenceAt", ["seq", "one"], ["at1"]),
        helper.make_node("SequenceAt", ["seq", "minus3"], ["first"]),
        helper.make_node("SequenceLength", ["seq"], ["n"]),
        helper.make_node("Cast", ["n"], ["nf"], to=TP.FLOAT),
        helper.make_node("Mul", ["first", "nf"], ["y1"]),
        helper.make_node("Add", ["at1", "x"], ["y2"])]
    model = _save(tmp_path, nodes, [_vi("y1"), _vi("y2")])
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert _ops(loaded) == ["relu", "sin", "mul", "add"], _ops(loaded)
    check_against_onnxruntime(model, loaded, _feeds())


def test_insert_and_erase_at_given_defaulted_and_negative_positions(tmp_path, signer):
    """[] -> [x] -> [r, x] -> [r, s, x] -> [r, s, t, x] -> erase 1: [r, t, x] -> erase last:
    [r, t] -> erase -2: [t] ... concatenated on axis 1 after inserting x again at 0."""
    nodes = _three() + [
        helper.make_node("SequenceEmpty", [], ["e"], dtype=TP.FLOAT),
        _const("zero", np.int64(0)), _const("minus1", np.int64(-1)), _const("two", np.int64(2)),
        _const("minus2", np.int64(-2)), _const("one", np.int64(1)),
        helper.make_node("SequenceInsert", ["e", "x"], ["q1"]),
        helper.make_node("SequenceInsert", ["q1", "r", "zero"], ["q2"]),
        helper.make_node("SequenceInsert", ["q2", "s", "minus1"], ["q3"]),
        helper.make_node("SequenceInsert", ["q3", "t", "two"], ["q4"]),
        helper.make_node("SequenceErase", ["q4", "one"], ["q5"]),
        helper.make_node("SequenceErase", ["q5"], ["q6"]),
        helper.make_node("SequenceInsert", ["q6", "x", "zero"], ["q7"]),
        helper.make_node("SequenceErase", ["q7", "minus2"], ["q8"]),
        helper.make_node("ConcatFromSequence", ["q8"], ["y"], axis=1),
        helper.make_node("ConcatFromSequence", ["q4"], ["all"], axis=0)]
    model = _save(tmp_path, nodes, [_vi("y", shape=(3, 8)), _vi("all", shape=(12, 4))])
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert _ops(loaded).count("concat") == 2, _ops(loaded)
    check_against_onnxruntime(model, loaded, _feeds())


@pytest.mark.parametrize("split, attrs, sizes", [
    (None, {}, [1, 1, 1]),                                   # pieces of 1 along axis 0, kept
    (None, {"keepdims": 0}, [1, 1, 1]),                      # ... squeezed
    (None, {"axis": -1, "keepdims": 0}, [1, 1, 1, 1]),       # along the last axis
    (np.int64(3), {"axis": 1}, [3, 1]),                      # chunks of 3: 3 and 1
    (np.array([1, 0, 3], np.int64), {"axis": 1}, [1, 0, 3]),  # sizes, one of them 0
    (np.int32(5), {}, [3]),                                  # one chunk larger than the axis
], ids=["default", "squeezed", "last-axis", "chunks", "sizes", "one-chunk"])
def test_split_to_sequence(split, attrs, sizes, tmp_path, signer):
    """The pieces (of ``sizes``) concatenated back (new_axis where they were squeezed), the
    last one read by SequenceAt and scaled by SequenceLength."""
    squeezed = split is None and attrs.get("keepdims", 1) == 0
    axis = attrs.get("axis", 0)
    nodes = [helper.make_node("Relu", ["x"], ["r"])]
    ins = ["r"]
    if split is not None:
        nodes.append(_const("split", split))
        ins.append("split")
    nodes += [helper.make_node("SplitToSequence", ins, ["seq"], name="split_seq", **attrs),
              _const("last", np.int64(-1)),
              helper.make_node("SequenceAt", ["seq", "last"], ["piece"]),
              helper.make_node("SequenceLength", ["seq"], ["n"]),
              helper.make_node("Cast", ["n"], ["nf"], to=TP.FLOAT),
              helper.make_node("Mul", ["piece", "nf"], ["y1"]),
              helper.make_node("ConcatFromSequence", ["seq"], ["y2"], axis=axis,
                               new_axis=int(squeezed))]
    model = _save(tmp_path, nodes, [_dims("y1", 2 - squeezed), _dims("y2")])
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert _ops(loaded).count("split") == 1, _ops(loaded)
    [(got, want)] = check_against_onnxruntime(model, loaded, _feeds()[:1])
    piece = np.split(want["y2"], np.cumsum(sizes)[:-1], axis=axis)[-1]
    piece = piece.squeeze(axis) if squeezed else piece
    assert want["y2"].shape == SHAPE and want["y1"].shape == piece.shape
    np.testing.assert_array_equal(want["y1"], piece * np.float32(len(sizes)))


def test_concat_from_sequence_with_a_new_axis(tmp_path, signer):
    """new_axis=1 stacks: at axis 0, at the new last axis (2) and at -1 (the same)."""
    nodes = _three() + [helper.make_node("SequenceConstruct", ["r", "s", "t"], ["seq"])] + [
        helper.make_node("ConcatFromSequence", ["seq"], [f"y{a}"], axis=a, new_axis=1)
        for a in (0, 2, -1)]
    model = _save(tmp_path, nodes, [_vi("y0", shape=(3, *SHAPE)), _vi("y2", shape=(*SHAPE, 3)),
                                    _vi("y-1", shape=(*SHAPE, 3))])
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    check_against_onnxruntime(model, loaded, _feeds())


def test_a_sequence_of_constants_folds(tmp_path, signer):
    """Constants stay constants: the concatenation folds, only the Add reaches the graph; a
    sequence passed on by Identity is the same sequence."""
    a, b, c = (np.random.default_rng(k).standard_normal((1, 4)).astype(np.float32)
               for k in range(3))
    nodes = [_const("a", a), _const("b", b), _const("c", c), _const("zero", np.int64(0)),
             helper.make_node("SequenceConstruct", ["a", "b"], ["seq"]),
             helper.make_node("SequenceInsert", ["seq", "c", "zero"], ["seq2"]),
             helper.make_node("Identity", ["seq2"], ["same"]),
             helper.make_node("ConcatFromSequence", ["same"], ["rows"], axis=0),
             helper.make_node("Add", ["x", "rows"], ["y"])]
    model = _save(tmp_path, nodes, [_vi("y")])
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert _ops(loaded) == ["add"], _ops(loaded)
    check_against_onnxruntime(model, loaded, _feeds())


def test_a_sequence_out_of_an_if(tmp_path, signer):
    """The If's condition folds; the branch it takes yields a sequence (its other one a
    sequence of another length)."""
    then = helper.make_graph([helper.make_node("SequenceConstruct", ["r", "s"], ["p"])],
                             "then", [], [_seq_vi("p")])
    other = helper.make_graph([helper.make_node("SequenceConstruct", ["s"], ["q"])],
                              "else", [], [_seq_vi("q")])
    nodes = _three() + [_const("yes", np.array(True)),
                        helper.make_node("If", ["yes"], ["seq"], name="if", then_branch=then,
                                         else_branch=other),
                        helper.make_node("ConcatFromSequence", ["seq"], ["y"], axis=0)]
    model = _save(tmp_path, nodes, [_vi("y", shape=(6, 4))])
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    check_against_onnxruntime(model, loaded, _feeds())


def _loop_body(nodes, carried, outputs, name):
    ins = [_vi(f"{name}_i", TP.INT64, []), _vi(f"{name}_c", TP.BOOL, [])] + carried
    outs = [_vi(f"{name}_co", TP.BOOL, [])] + outputs
    return helper.make_graph(nodes + [helper.make_node("Identity", [f"{name}_c"],
                                                       [f"{name}_co"])], name, ins, outs)


def test_a_sequence_carried_through_nested_loops(tmp_path, signer):
    """An outer Loop of 2 carries a sequence into an inner Loop of 3, which appends
    x * (i + 2 j) each iteration and carries it back: 6 rows, stacked."""
    inner = _loop_body([helper.make_node("Cast", ["inner_i"], ["jf"], to=TP.FLOAT),
                        helper.make_node("Cast", ["outer_i"], ["if_"], to=TP.FLOAT),
                        _const("two", np.float32(2.0)),
                        helper.make_node("Mul", ["if_", "two"], ["i2"]),
                        helper.make_node("Add", ["jf", "i2"], ["k"]),
                        helper.make_node("Mul", ["x", "k"], ["row"]),
                        helper.make_node("SequenceInsert", ["inner_seq", "row"],
                                         ["inner_seq2"])],
                       [_seq_vi("inner_seq")], [_seq_vi("inner_seq2")], "inner")
    outer = _loop_body([_const("three", np.int64(3)),
                        helper.make_node("Loop", ["three", "", "outer_seq"], ["outer_seq2"],
                                         name="inner", body=inner)],
                       [_seq_vi("outer_seq")], [_seq_vi("outer_seq2")], "outer")
    nodes = [helper.make_node("SequenceEmpty", [], ["empty"]), _const("M", np.int64(2)),
             helper.make_node("Loop", ["M", "", "empty"], ["seq"], name="outer", body=outer),
             helper.make_node("SequenceLength", ["seq"], ["n"]),
             helper.make_node("Cast", ["n"], ["nf"], to=TP.FLOAT),
             helper.make_node("ConcatFromSequence", ["seq"], ["rows"], axis=0, new_axis=1),
             helper.make_node("Mul", ["rows", "nf"], ["y"])]
    model = _save(tmp_path, nodes, [_vi("y", shape=(6, *SHAPE))])
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert _ops(loaded).count("mul") == 6 + 1, _ops(loaded)
    check_against_onnxruntime(model, loaded, _feeds())


class _ScriptedList(torch.nn.Module):
    """``rows.append`` in a ``for`` over a static dim: SequenceEmpty, a SequenceInsert in the
    Loop body, ConcatFromSequence with new_axis 1 (torch.stack) and 0 (torch.cat)."""

    def forward(self, x):
        rows = []
        for i in range(x.size(0)):
            rows.append(torch.relu(x[i]) * i - x[-1 - i])
        return torch.stack(rows, 1), torch.cat(rows)


@pytest.mark.parametrize("fold", [True, False], ids=["fold", "nofold"])
def test_a_scripted_list_stacked_and_concatenated(fold, tmp_path, signer):
    """The dynamo exporter traces the Python loop unrolled (no sequence): only the legacy one
    writes the sequence ops, from torch.jit.script."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.script is deprecated
        scripted = torch.jit.script(_ScriptedList())
    model = export(scripted, [torch.randn(*SHAPE)], tmp_path / "l.onnx", dynamo=False,
                   fold=fold, input_names=["x"], output_names=["stacked", "cat"])
    kinds = {n.op_type for n in onnx.load(model).graph.node}
    assert {"Loop", "SequenceEmpty", "ConcatFromSequence"} <= kinds, kinds
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    ops = _ops(loaded)
    assert ops.count("relu") == SHAPE[0] and ops.count("concat") == 2, ops
    [(got, want), _] = check_against_onnxruntime(model, loaded, _feeds())
    assert want["stacked"].shape == (SHAPE[1], SHAPE[0]) and want["cat"].shape == (12,)


# --- refusals --------------------------------------------------------------------------------


def test_a_sequence_as_a_graph_output_is_refused(tmp_path):
    nodes = _three() + [helper.make_node("SequenceConstruct", ["r", "s"], ["seq"],
                                         name="construct")]
    model = _save(tmp_path, nodes, [_seq_vi("seq")])
    assert_refused(model, UnsupportedModelError, "node 'construct' (SequenceConstruct)",
                   f"graph output 'seq' is a sequence; {ONLY_HERE}")


def test_a_sequence_out_of_a_loop_as_a_graph_output_is_refused(tmp_path):
    body = _loop_body([helper.make_node("SequenceInsert", ["b_seq", "x"], ["b_seq2"])],
                      [_seq_vi("b_seq")], [_seq_vi("b_seq2")], "b")
    nodes = [helper.make_node("SequenceEmpty", [], ["empty"]), _const("M", np.int64(2)),
             helper.make_node("Loop", ["M", "", "empty"], ["seq"], name="loop", body=body)]
    model = _save(tmp_path, nodes, [_seq_vi("seq")])
    assert_refused(model, UnsupportedModelError, "node 'loop' (Loop)",
                   f"graph output 'seq' is a sequence; {ONLY_HERE}")


def test_a_sequence_as_a_graph_input_is_refused(tmp_path):
    nodes = [helper.make_node("ConcatFromSequence", ["xs"], ["y"], name="cat", axis=0)]
    graph = helper.make_graph(nodes, "g", [_seq_vi("xs")], [_dims("y")])
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    assert_refused(model, UnsupportedModelError, "node 'cat' (ConcatFromSequence)",
                   f"graph input 'xs' is a sequence; {ONLY_HERE}")


def test_a_sequence_into_another_op_is_refused(tmp_path):
    """onnx's checker lets a sequence into Relu through (shape inference has no type for
    it); the import names the node."""
    nodes = _three() + [helper.make_node("SequenceConstruct", ["r", "s"], ["seq"]),
                        helper.make_node("Relu", ["seq"], ["y"], name="relu_seq")]
    model = _save(tmp_path, nodes, [_vi("y")], check=False)
    with pytest.raises(UnsupportedModelError) as info:
        onnx_to_graph(onnx.load(model), name="m")
    text = str(info.value)
    assert "node 'relu_seq' (Relu)" in text and "input 'seq' is a sequence, which Relu does " \
        f"not take; {ONLY_HERE}" in text, text


def test_a_run_time_position_is_refused(tmp_path):
    nodes = _three() + [helper.make_node("SequenceConstruct", ["r", "s"], ["seq"]),
                        helper.make_node("ArgMax", ["x"], ["where"], keepdims=0, axis=1),
                        _const("zero", np.int64(0)),
                        helper.make_node("Gather", ["where", "zero"], ["pos"]),
                        helper.make_node("SequenceAt", ["seq", "pos"], ["y"], name="at")]
    model = _save(tmp_path, nodes, [_vi("y")])
    assert_refused(model, UnsupportedModelError, "node 'at' (SequenceAt)",
                   "position 'pos' is computed at run time; only a constant position")


@pytest.mark.parametrize("op, position, message", [
    ("SequenceAt", 2, "position 2 is out of range for a sequence of 2 element(s) ([-2, 1])"),
    ("SequenceAt", -3, "position -3 is out of range for a sequence of 2 element(s) ([-2, 1])"),
    ("SequenceErase", 2, "position 2 is out of range for a sequence of 2 element(s)"),
    ("SequenceInsert", 3, "position 3 is out of range for a sequence of 2 element(s) ([-2, 2])"),
], ids=["at", "at-negative", "erase", "insert"])
def test_a_position_out_of_range_is_refused(op, position, message, tmp_path):
    ins = ["seq", "x", "pos"] if op == "SequenceInsert" else ["seq", "pos"]
    nodes = _three() + [helper.make_node("SequenceConstruct", ["r", "s"], ["seq"]),
                        _const("pos", np.int64(position)),
                        helper.make_node(op, ins, ["out"], name="op")]
    if op == "SequenceAt":
        outputs = [_vi("out")]
    else:
        nodes.append(helper.make_node("ConcatFromSequence", ["out"], ["y"], axis=0))
        outputs = [_dims("y")]
    model = _save(tmp_path, nodes, outputs)
    assert_refused(model, ModelFileError, f"node 'op' ({op})", message)


def test_erasing_from_an_empty_sequence_is_refused(tmp_path):
    nodes = [helper.make_node("SequenceEmpty", [], ["e"]),
             helper.make_node("SequenceErase", ["e"], ["e2"], name="erase"),
             helper.make_node("SequenceLength", ["e2"], ["n"]),
             helper.make_node("Cast", ["n"], ["nf"], to=TP.FLOAT),
             helper.make_node("Mul", ["x", "nf"], ["y"])]
    model = _save(tmp_path, nodes, [_vi("y")])
    assert_refused(model, ModelFileError, "node 'erase' (SequenceErase)",
                   "the sequence is empty: there is no last element")


def test_concatenating_an_empty_sequence_is_refused(tmp_path):
    nodes = [helper.make_node("SequenceEmpty", [], ["e"]),
             helper.make_node("ConcatFromSequence", ["e"], ["rows"], name="cat", axis=0),
             helper.make_node("Add", ["x", "rows"], ["y"])]
    model = _save(tmp_path, nodes, [_vi("y")])
    assert_refused(model, UnsupportedModelError, "node 'cat' (ConcatFromSequence)",
                   "sequence 'e' is empty: the shape of its concatenation is unknown")


@pytest.mark.parametrize("op", ["SequenceConstruct", "SequenceInsert"])
def test_elements_of_mixed_dtypes_are_refused(op, tmp_path):
    """onnx's checker refuses these too: the import names the node where it runs alone."""
    nodes = [helper.make_node("Cast", ["x"], ["xi"], to=TP.INT64)]
    if op == "SequenceConstruct":
        nodes.append(helper.make_node(op, ["x", "xi"], ["seq"], name="mixed"))
    else:
        nodes += [helper.make_node("SequenceConstruct", ["x"], ["one"]),
                  helper.make_node(op, ["one", "xi"], ["seq"], name="mixed")]
    nodes.append(helper.make_node("ConcatFromSequence", ["seq"], ["y"], axis=0))
    model = _save(tmp_path, nodes, [_dims("y")], check=False)
    with pytest.raises(ModelFileError) as info:
        onnx_to_graph(onnx.load(model), name="m")
    text = str(info.value)
    assert f"node 'mixed' ({op})" in text and "the elements of a sequence must share a " \
        "dtype, got float32 ('x'), int64 ('xi')" in text, text


@pytest.mark.parametrize("what, message", [
    ("split", "split 'sizes' is computed at run time; only constant sizes"),
    ("dim", "axis 0 of 'x' ['batch', 4] has a run-time length"),
])
def test_a_split_not_known_at_import_is_refused(what, message, tmp_path):
    nodes = [helper.make_node("ArgMax", ["x"], ["sizes"], axis=1, keepdims=0)] \
        if what == "split" else []
    nodes += [helper.make_node("SplitToSequence", ["x", "sizes"] if what == "split" else ["x"],
                               ["seq"], name="split_seq"),
              helper.make_node("ConcatFromSequence", ["seq"], ["y"], axis=0)]
    model = _save(tmp_path, nodes, [_dims("y")], x_shape=("batch", 4) if what == "dim" else (4, 4))
    assert_refused(model, UnsupportedModelError, "node 'split_seq' (SplitToSequence)", message)
