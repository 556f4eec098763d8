"""Loop with a trip count and condition known at import (torch.jit.script's loops under the
legacy exporter, torch's while_loop under the dynamo one, tf2onnx's) unrolled, compared with
onnxruntime: carried values and scan outputs, a body reading outer values and holding
initializers, a Loop and an If nested in a body, early exits computed from the iteration
number, a while loop, zero iterations and scripted torch modules (a literal ``range(3)`` the
exporter unrolls itself; a list appended to in the loop, its sequence ops lists at import).
A run-time trip count, condition or condition output, a loop without end, loops beyond the
iteration cap, the node cap or the nesting cap, and malformed bodies are refused naming the
node."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from plugin_host.errors import ModelFileError, UnsupportedModelError
from plugin_host.onnx_import import ReadLimits, convert, import_onnx, loop, onnx_to_graph

from .conftest import (assert_refused, check_against_onnxruntime, export, import_and_load, onnx,
                       torch)

helper, TP = onnx.helper, onnx.TensorProto
RNG = np.random.default_rng(11)
SHAPE = (3, 4)


def _const(name: str, value) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(
        np.asarray(value), name))


def _vi(name: str, dtype=TP.FLOAT, shape=SHAPE):
    return helper.make_tensor_value_info(name, dtype, None if shape is None else list(shape))


def _body(nodes, inputs, outputs, *, inits=(), name="body", ranks=(0, 0)):
    """A Loop body: iteration number ``i``, condition ``ci`` (of the given ranks), then
    ``inputs`` (float, SHAPE); ``outputs``: (name, dtype, shape) after the condition ``co``."""
    ins = [_vi("i", TP.INT64, [1] * ranks[0]), _vi("ci", TP.BOOL, [1] * ranks[1])]
    ins += [_vi(n) for n in inputs]
    outs = [_vi("co", TP.BOOL, [])] + [_vi(n, t, s) for n, t, s in outputs]
    return helper.make_graph(nodes, name, ins, outs, initializer=list(inits))


def _save(tmp_path, nodes, outputs, *, name="m", inits=(), check=True, x_shape=SHAPE):
    graph = helper.make_graph(nodes, "g", [_vi("x", shape=x_shape)], outputs,
                              initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    if check:
        onnx.checker.check_model(model, full_check=True)
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def _feeds():
    feeds = [{"x": RNG.standard_normal(SHAPE).astype(np.float32)} for _ in range(2)]
    feeds[1]["x"].reshape(-1)[:3] = [np.inf, np.nan, -0.0]
    return feeds


def _ops(loaded) -> list[str]:
    return [n.op for n in loaded.graph.nodes]


def _step() -> list:
    """v2 = tanh(v * x + f), f = float(i), s = v2 - x, g = f + 0 * min(x) (s and g: scan
    rows, g the iteration number where x is finite); co = ci."""
    return [helper.make_node("Cast", ["i"], ["f"], to=TP.FLOAT),
            helper.make_node("ReduceMin", ["x"], ["low"], keepdims=0),
            _const("nought", np.float32(0.0)),
            helper.make_node("Mul", ["low", "nought"], ["z"]),
            helper.make_node("Add", ["f", "z"], ["g"]),
            helper.make_node("Mul", ["v", "x"], ["m"]),
            helper.make_node("Add", ["m", "f"], ["a"]),
            helper.make_node("Tanh", ["a"], ["v2"]),
            helper.make_node("Sub", ["v2", "x"], ["s"]),
            helper.make_node("Identity", ["ci"], ["co"])]


@pytest.mark.parametrize("ranks", [(0, 0), (1, 0)], ids=["scalars", "rank-1"])
def test_carried_values_and_a_scan_output_match_onnxruntime(ranks, tmp_path, signer):
    """Three iterations of _step: the last carried value and the rows stacked on axis 0; the
    iteration number of the rank the body declares, as onnxruntime feeds it (onnx's shape
    inference wants it 0-d, so the rank-1 model is not checked here)."""
    its = [1] * ranks[0]
    body = _body(_step(), ["v"], [("v2", TP.FLOAT, SHAPE), ("s", TP.FLOAT, SHAPE),
                                  ("g", TP.FLOAT, its)], ranks=ranks)
    nodes = [_const("M", np.int64(3)), _const("c", np.array(True)),
             helper.make_node("Loop", ["M", "c", "x"], ["y", "rows", "its"], name="loop",
                              body=body)]
    model = _save(tmp_path, nodes, [_vi("y"), _vi("rows", shape=(3, *SHAPE)),
                                    _vi("its", shape=(3, *its))],
                  check=ranks == (0, 0))
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    ops = _ops(loaded)
    assert ops.count("tanh") == 3 and ops.count("concat") == 2, ops
    [(got, want)] = check_against_onnxruntime(model, loaded, _feeds()[:1])
    assert want["its"].shape == (3, *its) and want["its"].reshape(-1).tolist() == [0, 1, 2]


def test_a_body_reading_outer_values_and_holding_initializers(tmp_path, signer):
    """The body reads an outer computed value (relu(x)) and an outer initializer, and holds an
    initializer of its own; two Loops called alike (one by its name, one by its output) share
    one body (the same names inside), the first's iteration 0 folding (it starts from the
    initializer), the second's not."""
    w = onnx.numpy_helper.from_array(np.full(SHAPE, 0.5, np.float32), "w")
    b = onnx.numpy_helper.from_array(np.linspace(-1, 1, 12, dtype=np.float32).reshape(SHAPE),
                                     "b")
    body = _body([helper.make_node("Add", ["v", "b"], ["q"]),
                  helper.make_node("Mul", ["q", "r"], ["p"]),
                  helper.make_node("Mul", ["p", "w"], ["v2"]),
                  helper.make_node("Identity", ["ci"], ["co"])],
                 ["v"], [("v2", TP.FLOAT, SHAPE)], inits=[b])
    nodes = [helper.make_node("Relu", ["x"], ["r"]), _const("M", np.int64(4)),
             helper.make_node("Loop", ["M", "", "w"], ["y1"], name="loop", body=body),
             helper.make_node("Loop", ["M", "", "y1"], ["loop"], body=body),
             helper.make_node("Add", ["y1", "loop"], ["y"])]
    model = _save(tmp_path, nodes, [_vi("y")], inits=[w])
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert _ops(loaded).count("relu") == 1
    check_against_onnxruntime(model, loaded, _feeds())


def test_constant_carried_values_fold(tmp_path, signer):
    """A carried shape counter (Shape arithmetic in the body) stays a constant: the Reshape
    after the Loop folds its target, and no node of the loop reaches the graph."""
    body = helper.make_graph(
        [_const("two", np.int64(2)), helper.make_node("Mul", ["n", "two"], ["n2"]),
         helper.make_node("Identity", ["n2"], ["s"]),
         helper.make_node("Identity", ["ci"], ["co"])], "body",
        [_vi("i", TP.INT64, []), _vi("ci", TP.BOOL, []), _vi("n", TP.INT64, [])],
        [_vi("co", TP.BOOL, []), _vi("n2", TP.INT64, []), _vi("s", TP.INT64, [])])
    nodes = [_const("M", np.int64(2)), _const("one", np.int64(1)),
             helper.make_node("Loop", ["M", "", "one"], ["four", "twos"], name="loop",
                              body=body),
             _const("minus", np.array([-1], np.int64)), _const("zero", np.array([0], np.int64)),
             helper.make_node("Unsqueeze", ["four", "zero"], ["four1"]),
             helper.make_node("Concat", ["four1", "minus"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["r"]),
             helper.make_node("Gather", ["twos", "one"], ["last"]),
             helper.make_node("Cast", ["last"], ["k"], to=TP.FLOAT),
             helper.make_node("Mul", ["r", "k"], ["y"])]
    model = _save(tmp_path, nodes, [_vi("y", shape=(4, 3))])
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert _ops(loaded) == ["reshape", "mul"], _ops(loaded)
    check_against_onnxruntime(model, loaded, _feeds())


def test_a_loop_and_an_if_nested_in_a_body(tmp_path, signer):
    """Outer Loop of 2 over an inner Loop of 3 (reading the outer carried value and the outer
    iteration number) and an If on ``i == 1`` (a constant each iteration: both branches taken,
    one per iteration)."""
    inner = helper.make_graph(
        [helper.make_node("Cast", ["j"], ["jf"], to=TP.FLOAT),
         helper.make_node("Cast", ["i"], ["if_"], to=TP.FLOAT),
         helper.make_node("Add", ["jf", "if_"], ["ij"]),
         helper.make_node("Mul", ["u", "ij"], ["um"]),
         helper.make_node("Add", ["um", "v"], ["ua"]),
         helper.make_node("Sin", ["ua"], ["u2"]),
         helper.make_node("Identity", ["cj"], ["cjo"])], "inner",
        [_vi("j", TP.INT64, []), _vi("cj", TP.BOOL, []), _vi("u")],
        [_vi("cjo", TP.BOOL, []), _vi("u2")])
    then = helper.make_graph([helper.make_node("Neg", ["w"], ["t"])], "then", [], [_vi("t")])
    other = helper.make_graph([helper.make_node("Cos", ["w"], ["e"])], "else", [], [_vi("e")])
    body = _body([_const("three", np.int64(3)), _const("yes", np.array(True)),
                  helper.make_node("Loop", ["three", "yes", "x"], ["w"], name="inner",
                                   body=inner),
                  _const("one", np.int64(1)),
                  helper.make_node("Equal", ["i", "one"], ["is1"]),
                  helper.make_node("If", ["is1"], ["v2"], name="if", then_branch=then,
                                   else_branch=other),
                  helper.make_node("Identity", ["ci"], ["co"])],
                 ["v"], [("v2", TP.FLOAT, SHAPE)])
    nodes = [_const("M", np.int64(2)),
             helper.make_node("Loop", ["M", "", "x"], ["y"], name="outer", body=body)]
    model = _save(tmp_path, nodes, [_vi("y")])
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    ops = _ops(loaded)
    assert ops.count("sin") == 6 and ops.count("cos") == 1 and ops.count("neg") == 1, ops
    # the inner Loop's copy in outer iteration 1 is a Loop of its own: one stem per level
    names = [n.name for n in loaded.graph.nodes]
    assert names[:3] == ["inner.i0/outer.i0/um", "inner.i0/outer.i0/ua", "inner.i0/outer.i0/u2"]
    assert "inner_2.i2/outer.i1/u2" in names, names
    check_against_onnxruntime(model, loaded, _feeds())


def _counting(limit, cond, *, stop: int | None = None):
    """Loop nodes and body: v2 = v + x, s = v2 (a scan row); co = i + 1 < ``stop`` (a
    constant each iteration), else ci."""
    check = ([_const("stop", np.int64(stop)), _const("one", np.int64(1)),
              helper.make_node("Add", ["i", "one"], ["next"]),
              helper.make_node("Less", ["next", "stop"], ["co"])] if stop is not None else
             [helper.make_node("Identity", ["ci"], ["co"])])
    body = _body([helper.make_node("Add", ["v", "x"], ["v2"]),
                  helper.make_node("Identity", ["v2"], ["s"])] + check,
                 ["v"], [("v2", TP.FLOAT, SHAPE), ("s", TP.FLOAT, SHAPE)])
    nodes = []
    if limit is not None:
        nodes.append(_const("M", np.int64(limit)))
    if cond is not None:
        nodes.append(_const("c", np.array(cond)))
    nodes.append(helper.make_node("Loop", ["M" if limit is not None else "",
                                           "c" if cond is not None else "", "x"],
                                  ["y", "scan"], name="loop", body=body))
    # the rows and x after them: a graph output computed at run time even for zero rows
    nodes += [_const("axes", np.array([0], np.int64)),
              helper.make_node("Unsqueeze", ["x", "axes"], ["last"]),
              helper.make_node("Concat", ["scan", "last"], ["rows"], axis=0)]
    return nodes


@pytest.mark.parametrize("limit, cond, stop, runs", [
    (10, True, 3, 3),      # early exit: the condition output false after iteration 2
    (None, True, 2, 2),    # a while loop: no trip count
    (3, None, 1, 1),       # no cond input: onnxruntime still stops on the condition output
    (2, True, None, 2),    # the condition output passes the condition through
    (5, False, None, 0),   # the condition false from the start: zero iterations
    (0, True, None, 0),    # a trip count of 0
    (-3, None, None, 0),   # a negative trip count
], ids=["early-exit", "while", "no-cond", "for", "cond-false", "zero", "negative"])
def test_the_iterations_onnxruntime_runs(limit, cond, stop, runs, tmp_path, signer):
    """The scan output has one row per iteration run; zero iterations leave the initial value
    and an empty scan output of the shape the body declares."""
    model = _save(tmp_path, _counting(limit, cond, stop=stop),
                  [_vi("y"), _vi("rows", shape=("n", *SHAPE))])
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert _ops(loaded).count("add") == runs
    got = check_against_onnxruntime(model, loaded, _feeds())
    assert got[0][1]["rows"].shape == (runs + 1, *SHAPE)


def test_conditions_that_fold_through_and_or_and_comparisons(tmp_path, signer):
    """tf2onnx writes a Keras LSTM or GRU as a Loop whose first condition is an And of Less
    of constants and whose condition output is an And of comparisons of the iteration number
    and a carried counter: they fold each iteration (they were refused as run-time values)."""
    check = [helper.make_node("Cast", ["i"], ["f"], to=TP.FLOAT),
             _const("one", np.float32(1.0)), _const("lim", np.float32(3.0)),
             helper.make_node("Add", ["f", "one"], ["next"]),
             helper.make_node("Less", ["next", "lim"], ["below"]),
             helper.make_node("LessOrEqual", ["next", "lim"], ["le"]),
             helper.make_node("GreaterOrEqual", ["next", "lim"], ["ge"]),
             helper.make_node("Or", ["le", "ge"], ["either"]),
             helper.make_node("And", ["below", "either"], ["co"])]
    body = _body([helper.make_node("Add", ["v", "x"], ["v2"]),
                  helper.make_node("Identity", ["v2"], ["s"])] + check,
                 ["v"], [("v2", TP.FLOAT, SHAPE), ("s", TP.FLOAT, SHAPE)])
    nodes = [_const("M", np.int64(10)), _const("z", np.float32(0.0)),
             _const("ten", np.float32(10.0)),
             helper.make_node("Less", ["z", "ten"], ["first"]),
             helper.make_node("And", ["first", "first"], ["c"]),
             helper.make_node("Loop", ["M", "c", "x"], ["y", "scan"], name="loop", body=body)]
    model = _save(tmp_path, nodes, [_vi("y"), _vi("scan", shape=("n", *SHAPE))])
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert _ops(loaded).count("add") == 3
    got = check_against_onnxruntime(model, loaded, _feeds())
    assert got[0][1]["scan"].shape == (3, *SHAPE)


def test_a_scan_output_of_zero_iterations_without_a_static_shape_is_refused(tmp_path):
    nodes = _counting(0, None)
    body = nodes[-4].attribute[0].g
    body.output[2].type.tensor_type.shape.dim[0].dim_param = "d"
    model = _save(tmp_path, nodes, [_vi("y"), _vi("rows", shape=("n", *SHAPE))])
    assert_refused(model, UnsupportedModelError, "node 'loop' (Loop)",
                   "the Loop runs zero iterations and the body declares no static shape and "
                   "ABI dtype for scan output 'scan'")


class _Scripted(torch.nn.Module):
    """A ``for`` over a static dim: torch.jit.script keeps it a loop, the legacy exporter
    writes a Loop of trip count x.size(0) (folded) whose condition output is a constant."""

    def forward(self, x):
        acc = torch.zeros_like(x[0])
        for i in range(x.size(0)):
            acc = acc * 0.5 + torch.relu(x[i]) * i
        return acc


@pytest.mark.parametrize("fold", [True, False], ids=["fold", "nofold"])
def test_a_scripted_for_loop_from_the_legacy_exporter(fold, tmp_path, signer):
    """The dynamo exporter traces a Python loop unrolled (no Loop): only the legacy one
    writes it, from torch.jit.script."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.script is deprecated
        scripted = torch.jit.script(_Scripted())
    model = export(scripted, [torch.randn(*SHAPE)], tmp_path / "s.onnx", dynamo=False,
                   fold=fold, input_names=["x"], output_names=["y"])
    assert "Loop" in {n.op_type for n in onnx.load(model).graph.node}
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert _ops(loaded).count("relu") == SHAPE[0], _ops(loaded)
    check_against_onnxruntime(model, loaded, _feeds())


class _ScriptedRange3(torch.nn.Module):
    def forward(self, x):
        y = x
        for i in range(3):
            y = torch.tanh(y * 2 + x[i])
        return y


class _ScriptedList(torch.nn.Module):
    def forward(self, x):
        rows = []
        for i in range(x.size(0)):
            rows.append(torch.relu(x[i]) * i)
        return torch.stack(rows)


def _scripted(module, path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.script is deprecated
        scripted = torch.jit.script(module)
    return export(scripted, [torch.randn(*SHAPE)], path, dynamo=False, input_names=["x"],
                  output_names=["y"])


def test_a_scripted_loop_of_a_literal_count_is_unrolled_by_the_exporter(tmp_path, signer):
    """``for i in range(3)``: the legacy exporter unrolls it itself (no Loop is written)."""
    model = _scripted(_ScriptedRange3(), tmp_path / "r.onnx")
    assert "Loop" not in {n.op_type for n in onnx.load(model).graph.node}
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert _ops(loaded).count("tanh") == 3
    check_against_onnxruntime(model, loaded, _feeds())


def test_a_scripted_loop_appending_to_a_list(tmp_path, signer):
    """A list built in the loop becomes SequenceEmpty, SequenceInsert in the body and
    ConcatFromSequence: the sequence, a carried value, is a list at import (:mod:`.sequence`);
    the rows are stacked by one concat."""
    model = _scripted(_ScriptedList(), tmp_path / "l.onnx")
    assert {"Loop", "SequenceEmpty", "ConcatFromSequence"} <= {
        n.op_type for n in onnx.load(model).graph.node}
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    ops = _ops(loaded)
    assert ops.count("relu") == SHAPE[0] and ops.count("concat") == 1, ops
    check_against_onnxruntime(model, loaded, _feeds())


class _WhileLoop(torch.nn.Module):
    """torch's while_loop over a counter: the dynamo exporter writes a Loop without a trip
    count, the counter a carried value, the condition output ``counter + 1 < 3``."""

    def forward(self, x):
        from torch._higher_order_ops.while_loop import while_loop

        def cond(i, acc):
            return i < 3

        def body(i, acc):
            return i + 1, torch.tanh(acc * 0.5 + x)

        return while_loop(cond, body, (torch.tensor(0), torch.zeros_like(x)))[1]


@pytest.mark.parametrize("optimize", [True, False], ids=["dynamo", "dynamo-noopt"])
def test_a_while_loop_from_the_dynamo_exporter(optimize, tmp_path, signer):
    model = export(_WhileLoop(), [torch.randn(*SHAPE)], tmp_path / "w.onnx", dynamo=True,
                   optimize=optimize, fold=optimize, input_names=["x"], output_names=["y"])
    loops = [n for n in onnx.load(model).graph.node if n.op_type == "Loop"]
    assert len(loops) == 1 and loops[0].input[0] == "", loops
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert _ops(loaded).count("tanh") == 3, _ops(loaded)
    check_against_onnxruntime(model, loaded, _feeds())


def test_an_optional_output_read_inside_the_body_is_computed(tmp_path, signer):
    """MaxPool's Indices read only by the body's next node: the mapper must see it read."""
    body = _body([_const("shape4", np.array([1, 1, *SHAPE], np.int64)),
                  helper.make_node("Reshape", ["v", "shape4"], ["v4"]),
                  helper.make_node("MaxPool", ["v4"], ["p", "idx"], kernel_shape=[2, 2]),
                  helper.make_node("Cast", ["idx"], ["s"], to=TP.FLOAT),
                  helper.make_node("Add", ["v", "x"], ["v1"]),
                  helper.make_node("Sin", ["v1"], ["v2"]),
                  helper.make_node("Identity", ["ci"], ["co"])],
                 ["v"], [("v2", TP.FLOAT, SHAPE), ("s", TP.FLOAT, [1, 1, 2, 3])])
    nodes = [_const("M", np.int64(2)),
             helper.make_node("Loop", ["M", "", "x"], ["y", "where"], name="loop", body=body)]
    model = _save(tmp_path, nodes, [_vi("y"), _vi("where", shape=(2, 1, 1, 2, 3))])
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    check_against_onnxruntime(model, loaded, _feeds()[:1])  # a nan's index is not compared


# --- refusals --------------------------------------------------------------------------------

RULE = "only a Loop whose trip count and condition are known at import"


def _run_time(tmp_path, what: str):
    """A Loop whose trip count (of x's values, or x.size(0) of a run-time batch), condition
    or condition output is computed at run time."""
    nodes = _counting(3, True)
    loop_node = nodes[-4]
    body = loop_node.attribute[0].g
    shape = SHAPE
    if what == "dims":  # x.size(0) of a run-time batch
        shape = ("batch", SHAPE[1])
        nodes[:0] = [helper.make_node("Shape", ["x"], ["shape"]), _const("first", np.int64(0)),
                     helper.make_node("Gather", ["shape", "first"], ["batch"])]
        loop_node.input[0] = "batch"
    nodes[:0] = [helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
                 _const("zero", np.float32(0.0)),
                 helper.make_node("Greater", ["total", "zero"], ["positive"]),
                 helper.make_node("Cast", ["total"], ["n"], to=TP.INT64)]
    if what == "trip count":
        loop_node.input[0] = "n"
    elif what == "condition":
        loop_node.input[1] = "positive"
    elif what == "output":
        body.node[-1].CopyFrom(helper.make_node("Identity", ["positive"], ["co"]))
    return _save(tmp_path, nodes, [_vi("y", shape=shape), _vi("rows", shape=("n", *shape))],
                 x_shape=shape)


@pytest.mark.parametrize("what, message", [
    ("trip count", f"trip count 'n' is computed at run time; {RULE}"),
    ("dims", f"trip count 'batch' is computed at run time (it holds the run-time dims "
             f"['batch']); {RULE}"),
    ("condition", f"condition 'positive' is computed at run time; {RULE}"),
    ("output", f"the body's condition output 'loop.i0/co' of iteration 0 is computed at run "
               f"time; {RULE}"),
])
def test_a_run_time_trip_count_or_condition_is_refused(what, message, tmp_path):
    assert_refused(_run_time(tmp_path, what), UnsupportedModelError, "node 'loop' (Loop)",
                   message)


def test_a_loop_is_not_listed_with_the_unsupported_ops(tmp_path):
    nodes = [helper.make_node("RandomNormalLike", ["x"], ["nz"], name="nz"),
             *_counting(2, True)]
    model = _save(tmp_path, nodes, [_vi("y"), _vi("rows", shape=("n", *SHAPE))])
    with pytest.raises(UnsupportedModelError) as info:
        import_onnx(model)
    text = str(info.value)
    assert "node 'nz' (RandomNormalLike): op 'RandomNormalLike' is not supported" in text
    assert "Loop" not in text


def test_a_loop_without_end_is_refused(tmp_path):
    model = _save(tmp_path, _counting(None, None), [_vi("y"), _vi("rows", shape=("n", *SHAPE))])
    assert_refused(model, UnsupportedModelError, "node 'loop' (Loop)",
                   "the Loop has neither a trip count nor a condition, so it never ends")


def test_iterations_over_the_cap_are_refused(tmp_path):
    """A trip count above the cap at once; nested Loops within it each, beyond it together."""
    cap = loop.MAX_LOOP_ITERATIONS
    model = _save(tmp_path, _counting(cap + 1, None),
                  [_vi("y"), _vi("rows", shape=("n", *SHAPE))], name="over")
    assert_refused(model, UnsupportedModelError, "node 'loop' (Loop)",
                   f"trip count {cap + 1} is above the {cap} Loop iterations left of the cap")
    half = cap // 2 + 1
    body = _body([helper.make_node("Identity", ["v"], ["v2"]),
                  helper.make_node("Identity", ["ci"], ["co"])], ["v"], [("v2", TP.FLOAT, SHAPE)])
    nodes = [_const("M", np.int64(half)), _const("c", np.array(True)),
             helper.make_node("Loop", ["M", "c", "x"], ["y1"], name="a", body=body),
             helper.make_node("Loop", ["M", "c", "y1"], ["y"], name="b", body=body)]
    assert_refused(_save(tmp_path, nodes, [_vi("y")], name="two"), UnsupportedModelError,
                   "node 'b' (Loop)", f"more than {cap} Loop and Scan iterations, the cap")


def test_iterations_count_against_the_node_cap(tmp_path):
    """6 nodes in the model, 3 per iteration: the second iteration passes a cap of 11."""
    model = _save(tmp_path, _counting(3, True), [_vi("y"), _vi("rows", shape=("n", *SHAPE))])
    with pytest.raises(ModelFileError) as info:
        import_onnx(model, limits=ReadLimits(max_nodes=11))
    text = str(info.value)
    assert "node 'loop' (Loop)" in text and "unrolling iteration 1 of the body brings the " \
        "model to more than 11 nodes, the cap" in text, text


def test_nesting_beyond_the_cap_is_refused(tmp_path, signer):
    depth = convert.MAX_IF_DEPTH
    graphs = {}
    for count in (depth, depth + 1):
        body = _body([helper.make_node("Relu", ["v"], ["v0"]),
                      helper.make_node("Identity", ["ci"], ["co"])],
                     ["v"], [("v0", TP.FLOAT, SHAPE)], name="b0")
        for level in range(1, count):
            node = helper.make_node("Loop", ["one", "", "v"], [f"v{level}"], name=f"l{level}",
                                    body=body)
            body = _body([node, helper.make_node("Identity", ["ci"], ["co"])], ["v"],
                         [(f"v{level}", TP.FLOAT, SHAPE)], name=f"b{level}")
        graphs[count] = _save(tmp_path, [_const("one", np.int64(1)), helper.make_node(
            "Loop", ["one", "", "x"], ["y"], name="top", body=body)], [_vi("y")],
            name=f"n{count}")
    _, loaded = import_and_load(graphs[depth], tmp_path / "m.pha", signer)
    assert _ops(loaded) == ["relu"]
    with pytest.raises(UnsupportedModelError) as info:
        import_onnx(graphs[depth + 1])
    assert f"Loop bodies and If branches nested more than {depth} deep" in str(info.value)


@pytest.mark.parametrize("change, message", [
    ("input", "the body takes 2 input(s); a Loop of 1 carried value(s) needs 3 (iteration "
              "number, condition, carried values)"),
    ("output", "the body yields 2 output(s); a Loop of 2 output(s) needs 3 (condition, 1 "
               "carried value(s), 1 scan output(s))"),
    ("outputs", "the Loop has 0 output(s) for its 1 carried value(s)"),
])
def test_a_malformed_body_is_refused(change, message, tmp_path):
    """onnx's checker lets these through; the import names the node and the mismatch."""
    nodes = _counting(3, True)
    node = nodes[-4]
    body = node.attribute[0].g
    outputs = [_vi("y"), _vi("rows", shape=("n", *SHAPE))]
    if change == "input":
        body.input.pop()
    elif change == "output":
        body.output.pop()
    else:
        del node.output[:]
        outputs = [_vi("x2")]
        nodes.append(helper.make_node("Identity", ["x"], ["x2"]))
    model = _save(tmp_path, nodes, outputs, check=False)
    with pytest.raises(ModelFileError) as info:
        onnx_to_graph(onnx.load(model), name="m")
    assert type(info.value) is ModelFileError
    assert "node 'loop' (Loop)" in str(info.value) and message in str(info.value), info.value


def test_an_outer_value_keeps_its_name_where_a_nested_body_hides_it(tmp_path, signer):
    """The body reads the graph's ``x``; a Loop nested in it carries a value of its own named
    ``x`` (legal in ONNX: a subgraph's names hide the enclosing ones). Each iteration's copy
    renames the nested ``x`` and not the outer read, as onnxruntime scopes them."""
    inner = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["x2"]), helper.make_node("Identity", ["c"], ["c2"])],
        "inner", [_vi("j", TP.INT64, ()), _vi("c", TP.BOOL, ()), _vi("x")],
        [_vi("c2", TP.BOOL, ()), _vi("x2")])
    body = helper.make_graph(
        [helper.make_node("Loop", ["one", "", "acc"], ["negated"], body=inner),
         helper.make_node("Add", ["negated", "x"], ["acc2"]),
         helper.make_node("Identity", ["c"], ["c2"])],
        "body", [_vi("i", TP.INT64, ()), _vi("c", TP.BOOL, ()), _vi("acc")],
        [_vi("c2", TP.BOOL, ()), _vi("acc2")])
    nodes = [helper.make_node("Loop", ["three", "", "x"], ["y"], name="loop", body=body)]
    inits = [onnx.numpy_helper.from_array(np.array(v, np.int64), n)
             for n, v in (("one", 1), ("three", 3))]
    model = _save(tmp_path, nodes, [_vi("y")], inits=inits)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    check_against_onnxruntime(model, loaded, _feeds())
