"""Scan over a length known at import (tf2onnx's and older converters' recurrences, ONNX's
own functions) unrolled, compared with onnxruntime: state values and scan outputs over several
scan inputs, each direction and axis (negative ones too), a body reading outer values and
holding initializers, a constant scan input, a Scan nested in a Scan and in a Loop, opset 9's
Scan upgraded, opset 8's Scan over its batch axis rewritten as Loops before the upgrade
(LinearAttention, whose ONNX function is a Scan, is test_functions.py's). A run-time length,
unequal lengths, zero steps, steps beyond the cap, axes and directions out of range, malformed
bodies and opset 8's sequence_lens are refused naming the node."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import ModelFileError, UnsupportedModelError
from plugin_host.onnx_import import ReadLimits, import_onnx, loop

from plugins.onnxruntime_backend import OnnxruntimeBackend

from .conftest import assert_refused, check_against_onnxruntime, import_and_load, onnx

helper, TP = onnx.helper, onnx.TensorProto
RNG = np.random.default_rng(23)


def _vi(name: str, shape, dtype=TP.FLOAT):
    return helper.make_tensor_value_info(name, dtype, None if shape is None else list(shape))


def _save(tmp_path, nodes, inputs, outputs, *, name="m", inits=(), opset=17, check=True):
    graph = helper.make_graph(nodes, "g", [_vi(n, s) for n, s in inputs],
                              [_vi(n, s) for n, s in outputs], initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    if check:
        onnx.checker.check_model(model, full_check=True)
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def _feeds(inputs, count=2):
    feeds = [{n: RNG.standard_normal(s).astype(np.float32) for n, s in inputs}
             for _ in range(count)]
    first = next(iter(feeds[-1].values()))
    first.reshape(-1)[:3] = [np.inf, np.nan, -0.0]
    return feeds


def _ops(loaded) -> list[str]:
    return [n.op for n in loaded.graph.nodes]


def _rnn_body(name="body"):
    """h2 = tanh(h @ w + a + b), o = h2 * b (a: (2, 4), b: (4,), h: (2, 4)); outputs h2, o
    and a's row sum (a scan output of another shape)."""
    w = onnx.numpy_helper.from_array(
        np.linspace(-0.5, 0.5, 16, dtype=np.float32).reshape(4, 4), "w")
    nodes = [helper.make_node("MatMul", ["h", "w"], ["hw"]),
             helper.make_node("Add", ["hw", "a"], ["s"]),
             helper.make_node("Add", ["s", "b"], ["t"]),
             helper.make_node("Tanh", ["t"], ["h2"]),
             helper.make_node("Mul", ["h2", "b"], ["o"]),
             helper.make_node("ReduceSum", ["a"], ["r"], keepdims=0)]
    return helper.make_graph(nodes, name, [_vi("h", (2, 4)), _vi("a", (2, 4)), _vi("b", (4,))],
                             [_vi("h2", (2, 4)), _vi("o", (2, 4)), _vi("r", ())],
                             initializer=[w])


@pytest.mark.parametrize("in_dirs, in_axes, out_dirs, out_axes", [
    ([0, 0], [0, 0], [0, 0], [0, 0]),
    ([1, 0], [1, -1], [0, 1], [2, 0]),
    ([0, 1], [-2, 0], [1, 0], [-1, -1]),
], ids=["forward", "reversed-input-axes", "reversed-output-axes"])
def test_states_and_scan_outputs_match_onnxruntime(in_dirs, in_axes, out_dirs, out_axes,
                                                    tmp_path, signer):
    """Five steps over two scan inputs, sliced along the axes given and in the directions
    given, two scan outputs stacked along theirs (prepended where reversed)."""
    steps = 5
    a_shape = [2, 4]
    a_shape.insert(in_axes[0] % 3, steps)
    b_shape = [4]
    b_shape.insert(in_axes[1] % 2, steps)
    o_shape = [2, 4]
    o_shape.insert(out_axes[0] % 3, steps)
    scan = helper.make_node("Scan", ["h0", "a", "b"], ["h", "o", "r"], name="scan",
                            body=_rnn_body(), num_scan_inputs=2,
                            scan_input_directions=in_dirs, scan_input_axes=in_axes,
                            scan_output_directions=out_dirs, scan_output_axes=out_axes)
    inputs = [("h0", (2, 4)), ("a", a_shape), ("b", b_shape)]
    model = _save(tmp_path, [scan], inputs,
                  [("h", (2, 4)), ("o", o_shape), ("r", (steps,))])
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert _ops(loaded).count("tanh") == steps
    check_against_onnxruntime(model, loaded, _feeds(inputs, 1))


def test_outer_values_initializers_and_a_constant_scan_input(tmp_path, signer):
    """The body reads an outer computed value (relu(x)) and holds an initializer; its scan
    input is an initializer, so each step's slice folds; two Scans called alike (one by its
    name, one by its output) share one body."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["s", "c"], ["p"]),
         helper.make_node("Add", ["p", "r"], ["q"]),
         helper.make_node("Add", ["q", "bias"], ["s2"]),
         helper.make_node("Sigmoid", ["s2"], ["y"])], "body",
        [_vi("s", (3,)), _vi("c", (3,))], [_vi("s2", (3,)), _vi("y", (3,))],
        initializer=[onnx.numpy_helper.from_array(np.float32([0.1, -0.2, 0.3]), "bias")])
    table = onnx.numpy_helper.from_array(
        np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3), "table")
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Scan", ["x", "table"], ["s1", "y1"], name="scan", body=body,
                              num_scan_inputs=1),
             helper.make_node("Scan", ["s1", "table"], ["scan", "y2"], body=body,
                              num_scan_inputs=1, scan_input_directions=[1]),
             helper.make_node("Identity", ["scan"], ["s"]),
             helper.make_node("Concat", ["y1", "y2"], ["y"], axis=0)]
    inputs = [("x", (3,))]
    model = _save(tmp_path, nodes, inputs, [("s", (3,)), ("y", (8, 3))], inits=[table])
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    ops = _ops(loaded)
    assert ops.count("relu") == 1 and ops.count("sigmoid") == 8 and "gather" not in ops, ops
    check_against_onnxruntime(model, loaded, _feeds(inputs))


def test_one_value_scanned_in_both_directions(tmp_path, signer):
    """x is both scan inputs, forward and reversed: each step pairs row t with row 4 - t."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["fwd", "rev"], ["p"]),
         helper.make_node("Add", ["s", "p"], ["s2"]),
         helper.make_node("Identity", ["p"], ["o"])], "body",
        [_vi("s", (3,)), _vi("fwd", (3,)), _vi("rev", (3,))], [_vi("s2", (3,)), _vi("o", (3,))])
    scan = helper.make_node("Scan", ["s0", "x", "x"], ["s", "o"], name="scan", body=body,
                            num_scan_inputs=2, scan_input_directions=[0, 1])
    inputs = [("x", (5, 3)), ("s0", (3,))]
    model = _save(tmp_path, [scan], inputs, [("s", (3,)), ("o", (5, 3))])
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    check_against_onnxruntime(model, loaded, _feeds(inputs))


def test_a_scan_nested_in_a_scan_and_in_a_loop(tmp_path, signer):
    """A Loop of 2 iterations whose body is a Scan over x's rows whose body is a Scan over
    each row's entries (a running sum): 2 * 3 * 4 steps."""
    inner = helper.make_graph([helper.make_node("Add", ["acc", "e"], ["acc2"]),
                               helper.make_node("Identity", ["acc2"], ["out"])], "inner",
                              [_vi("acc", ()), _vi("e", ())], [_vi("acc2", ()), _vi("out", ())])
    middle = helper.make_graph(
        [helper.make_node("Scan", ["t", "row"], ["t2", "sums"], name="inner", body=inner,
                          num_scan_inputs=1),
         helper.make_node("Add", ["row", "sums"], ["row2"])], "middle",
        [_vi("t", ()), _vi("row", (4,))], [_vi("t2", ()), _vi("row2", (4,))])
    outer = helper.make_graph(
        [helper.make_node("Scan", ["t0", "v"], ["t", "v2"], name="middle", body=middle,
                          num_scan_inputs=1),
         helper.make_node("Identity", ["ci"], ["co"])], "outer",
        [_vi("i", (), TP.INT64), _vi("ci", (), TP.BOOL), _vi("v", (3, 4))],
        [_vi("co", (), TP.BOOL), _vi("v2", (3, 4))])
    nodes = [helper.make_node("Constant", [], ["M"], value=onnx.numpy_helper.from_array(
                 np.array(2, np.int64), "M")),
             helper.make_node("Constant", [], ["t0"], value=onnx.numpy_helper.from_array(
                 np.float32(0.0), "t0")),
             helper.make_node("Loop", ["M", "", "x"], ["y"], name="loop", body=outer)]
    inputs = [("x", (3, 4))]
    model = _save(tmp_path, nodes, inputs, [("y", (3, 4))])
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert _ops(loaded).count("add") >= 2 * 3 * 4
    check_against_onnxruntime(model, loaded, _feeds(inputs))


def _simple(tmp_path, *, a_shape=(3, 2), b_shape=None, name="m", check=True, **attrs):
    """A Scan summing the rows of ``a`` (and adding ``b``'s where given) into a state."""
    scanned = ["a"] + (["b"] if b_shape else [])
    nodes = [helper.make_node("Add", ["s", "ai"], ["s1"])]
    if b_shape:
        nodes.append(helper.make_node("Add", ["s1", "bi"], ["s2"]))
    nodes.append(helper.make_node("Identity", ["s2" if b_shape else "s1"], ["s3"]))
    nodes.append(helper.make_node("Identity", ["s3"], ["o"]))
    body = helper.make_graph(nodes, "body",
                             [_vi("s", (2,)), _vi("ai", (2,))] + ([_vi("bi", (2,))] if b_shape
                                                                  else []),
                             [_vi("s3", (2,)), _vi("o", (2,))])
    attrs.setdefault("num_scan_inputs", len(scanned))
    scan = helper.make_node("Scan", ["s0", *scanned], ["s", "o"], name="scan", body=body,
                            **attrs)
    inputs = [("s0", (2,)), ("a", a_shape)] + ([("b", b_shape)] if b_shape else [])
    return _save(tmp_path, [scan], inputs, [("s", (2,)), ("o", (a_shape[0], 2))], name=name,
                 check=check)


def test_a_run_time_length_is_refused_naming_the_dim(tmp_path):
    model = _simple(tmp_path, a_shape=("steps", 2))
    assert_refused(model, UnsupportedModelError, "node 'scan' (Scan)",
                   "scan input 'a' has the run-time length 'steps' along axis 0; only a Scan "
                   "over a length known at import is imported, unrolled")


def test_a_run_time_length_fixed_at_build_imports(tmp_path, signer):
    """``--dim steps=3`` (dims=) makes the length known, and the Scan unrolls."""
    model = _simple(tmp_path, a_shape=("steps", 2))
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer, dims={"steps": 3})
    assert _ops(loaded).count("add") == 3


@pytest.mark.parametrize("edit, error, message", [
    ({"b_shape": (4, 2)}, ModelFileError,
     "the scan inputs ['a', 'b'] have different lengths [3, 4] along their scan axes"),
    ({"a_shape": (0, 2)}, UnsupportedModelError,
     "scan input 'a' is empty along its scan axis: a Scan of zero steps, on which "
     "onnxruntime's Scan fails"),
    ({"scan_input_axes": [2]}, ModelFileError,
     "scan input 'a' of shape [3, 2]: axis 2 is out of range for rank 2"),
    ({"scan_output_axes": [-3]}, ModelFileError,
     "scan output 'o' (rank 2 stacked): axis -3 is out of range for rank 2"),
    ({"scan_input_directions": [2]}, ModelFileError,
     "attribute scan_input_directions holds 2: a direction is 0 (forward) or 1 (reverse)"),
    ({"scan_output_axes": [0, 0]}, ModelFileError,
     "attribute scan_output_axes has 2 entries for 1 scan outputs"),
    ({"num_scan_inputs": 0}, ModelFileError,
     "num_scan_inputs is 0, for a Scan of 2 input(s): it must be at least 1"),
], ids=["unequal", "zero", "input-axis", "output-axis", "direction", "entries", "no-scan"])
def test_bad_scans_are_refused_naming_the_node(edit, error, message, tmp_path):
    """onnx's checker lets these through (it is skipped here for the ones it does not)."""
    model = _simple(tmp_path, check=False, **edit)
    assert_refused(model, error, "node 'scan' (Scan)", message)


@pytest.mark.parametrize("field, message", [
    ("input", "the body takes 3 input(s); a Scan of 1 state value(s) and 1 scan input(s) "
              "needs 2"),
    ("output", "the body yields 1 output(s); a Scan of 1 state value(s) and 1 scan "
               "output(s) needs 2"),
])
def test_a_malformed_body_is_refused(field, message, tmp_path):
    model = _simple(tmp_path, check=False)
    m = onnx.load(model)
    body = m.graph.node[0].attribute[0].g
    if field == "input":  # one more (one fewer: the checker sees a value never defined)
        body.input.append(_vi("unused", (2,)))
    else:
        body.output.pop()
    model.write_bytes(m.SerializeToString())
    assert_refused(model, ModelFileError, "node 'scan' (Scan)", message)


def test_steps_count_against_the_loop_cap_and_the_node_cap(tmp_path):
    """A Scan longer than the iterations left of the cap is refused at once; its body's
    nodes count against the node cap as it unrolls."""
    cap = loop.MAX_LOOP_ITERATIONS
    model = _simple(tmp_path, a_shape=(cap + 1, 2), name="long")
    assert_refused(model, UnsupportedModelError, "node 'scan' (Scan)",
                   f"its {cap + 1} steps are above the {cap} Loop and Scan iterations left of "
                   f"the cap")
    model = _simple(tmp_path, a_shape=(4, 2))
    with pytest.raises(ModelFileError) as info:
        import_onnx(model, limits=ReadLimits(max_nodes=8))
    text = str(info.value)
    assert "node 'scan' (Scan)" in text and "unrolling iteration 2 of the body brings the " \
        "model to more than 8 nodes, the cap" in text, text


def test_a_scan_is_not_listed_with_the_unsupported_ops(tmp_path):
    body = helper.make_graph([helper.make_node("Identity", ["e"], ["o"])], "body",
                             [_vi("e", (2,))], [_vi("o", (2,))])
    nodes = [helper.make_node("Scan", ["x"], ["ys"], name="scan", body=body,
                              num_scan_inputs=1),
             helper.make_node("StringNormalizer", ["ys"], ["y"], name="u")]
    model = _save(tmp_path, nodes, [("x", (3, 2))], [("y", ("k",))], check=False)
    with pytest.raises(UnsupportedModelError) as info:
        import_onnx(model)
    text = str(info.value)
    assert text.startswith("node 'u' (StringNormalizer)") and "Scan" not in text, text


def test_an_opset_9_scan_is_upgraded(tmp_path, signer):
    """Opset 9's Scan is later opsets' (upgraded to 13 with the model)."""
    model = _simple(tmp_path, name="nine", check=False)
    m = onnx.load(model)
    m.opset_import[0].version = 9
    onnx.checker.check_model(m, full_check=True)
    model.write_bytes(m.SerializeToString())
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    check_against_onnxruntime(model, loaded, _feeds([("a", (3, 2)), ("s0", (2,))]))


def _scan8(tmp_path, nodes, inputs, outputs, name="eight"):
    return _save(tmp_path, nodes, inputs, outputs, name=name, opset=8)


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("directions", [None, [1, 0], [0, 1]])
def test_an_opset_8_scan_over_its_batch_axis_matches_onnxruntime(directions, batch, tmp_path,
                                                                   signer):
    """Opset 8's Scan takes a batch axis (0) before the sequence axis (1) of its scan inputs
    and its states; directions per scan input; scan outputs stacked in the order of the
    steps. Rewritten as a Loop over the batch around a Loop over the sequence before the
    upgrade; onnxruntime runs the Scan itself (its golden vectors, and here). Both
    backends."""
    steps = 4
    attrs = {} if directions is None else {"directions": directions}
    scan = helper.make_node("Scan", ["", "h0", "a", "b"], ["h", "o", "r"], name="scan",
                            body=_rnn_body(), num_scan_inputs=2, **attrs)
    inputs = [("h0", (batch, 2, 4)), ("a", (batch, steps, 2, 4)), ("b", (batch, steps, 4))]
    model = _scan8(tmp_path, [scan], inputs,
                   [("h", (batch, 2, 4)), ("o", (batch, steps, 2, 4)), ("r", (batch, steps))])
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert _ops(loaded).count("tanh") == batch * steps
    feeds = _feeds(inputs, 1)
    feeds.append({k: v.copy() for k, v in feeds[0].items()})
    feeds[1]["b"][:, 0] = 5.0  # the first step stands out: which end a direction starts from
    for backend in (None, OnnxruntimeBackend()):
        check_against_onnxruntime(model, loaded, feeds, backend=backend)


def test_an_opset_8_scan_in_an_opset_8_scan_matches_onnxruntime(tmp_path, signer):
    """The outer Scan's body runs a Scan of its own over each step's (2, 3) slice, read as a
    batch of 2 sequences of 3: a running sum. Both are rewritten, the inner one first, under
    names of their own."""
    inner = helper.make_graph([helper.make_node("Add", ["s", "e"], ["s2"]),
                               helper.make_node("Identity", ["s2"], ["out"])], "inner",
                              [_vi("s", ()), _vi("e", ())], [_vi("s2", ()), _vi("out", ())])
    outer = helper.make_graph(
        [helper.make_node("Scan", ["", "acc", "row"], ["acc2", "sums"], name="inner",
                          body=inner, num_scan_inputs=1, directions=[1])],
        "outer", [_vi("acc", (2,)), _vi("row", (2, 3))], [_vi("acc2", (2,)),
                                                          _vi("sums", (2, 3))])
    scan = helper.make_node("Scan", ["", "acc0", "x"], ["acc", "sums"], name="outer",
                            body=outer, num_scan_inputs=1)
    inputs = [("acc0", (2, 2)), ("x", (2, 5, 2, 3))]
    model = _scan8(tmp_path, [scan], inputs, [("acc", (2, 2)), ("sums", (2, 5, 2, 3))])
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    assert _ops(loaded).count("add") >= 2 * 5 * 2 * 3
    for backend in (None, OnnxruntimeBackend()):
        check_against_onnxruntime(model, loaded, _feeds(inputs), backend=backend)


def test_an_opset_8_scans_body_read_in_its_own_subgraphs_matches_onnxruntime(tmp_path, signer):
    """The body's scan input ``e`` (renamed by the rewrite) is read inside a Loop of the body
    from the outer scope, and another Loop of the body carries a value of its own named ``e``
    (which hides it, so stays as it is)."""
    one = onnx.numpy_helper.from_array(np.array(1, np.int64), "one")
    reads = helper.make_graph(
        [helper.make_node("Add", ["e", "e"], ["twice"]),
         helper.make_node("Identity", ["c"], ["c2"]), helper.make_node("Identity", ["a"], ["a2"])],
        "reads", [_vi("i", (), TP.INT64), _vi("c", (), TP.BOOL), _vi("a", (2,))],
        [_vi("c2", (), TP.BOOL), _vi("a2", (2,)), _vi("twice", (2,))])
    hides = helper.make_graph(
        [helper.make_node("Neg", ["e"], ["e2"]), helper.make_node("Identity", ["c"], ["c2"])],
        "hides", [_vi("i", (), TP.INT64), _vi("c", (), TP.BOOL), _vi("e", (2,))],
        [_vi("c2", (), TP.BOOL), _vi("e2", (2,))])
    body = helper.make_graph(
        [helper.make_node("Loop", ["one", "", "s"], ["kept", "doubled"], body=reads),
         helper.make_node("Loop", ["one", "", "s"], ["negated"], body=hides),
         helper.make_node("Squeeze", ["doubled"], ["d"], axes=[0]),
         helper.make_node("Add", ["d", "negated"], ["s2"])], "body",
        [_vi("s", (2,)), _vi("e", (2,))], [_vi("s2", (2,))], initializer=[one])
    scan = helper.make_node("Scan", ["", "s0", "e"], ["s"], name="scan", body=body,
                            num_scan_inputs=1)
    inputs = [("s0", (2, 2)), ("e", (2, 3, 2))]
    model = _scan8(tmp_path, [scan], inputs, [("s", (2, 2))])
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    for backend in (None, OnnxruntimeBackend()):
        check_against_onnxruntime(model, loaded, _feeds(inputs), backend=backend)


def test_an_opset_8_scan_over_a_run_time_batch_is_fixed_by_dim(tmp_path, signer):
    """A run-time batch is the outer Loop's run-time trip count: refused naming it, and
    imported once ``--dim`` fixes it."""
    scan = helper.make_node("Scan", ["", "h0", "a", "b"], ["h", "o", "r"], name="scan",
                            body=_rnn_body(), num_scan_inputs=2)
    inputs = [("h0", ("n", 2, 4)), ("a", ("n", 3, 2, 4)), ("b", ("n", 3, 4))]
    model = _scan8(tmp_path, [scan], inputs,
                   [("h", ("n", 2, 4)), ("o", ("n", 3, 2, 4)), ("r", ("n", 3))])
    assert_refused(model, UnsupportedModelError, "node 'scan' (Loop)",
                   "trip count 'scan/batch' is computed at run time (it holds the run-time dims "
                   "['n'])")
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer, dims={"n": 2})
    check_against_onnxruntime(model, loaded, _feeds([(k, (2, *s[1:])) for k, s in inputs], 1))


@pytest.mark.parametrize("edit, error, message", [
    (lambda n: n.input.__setitem__(0, "lens"), UnsupportedModelError,
     "sequence_lens 'lens' is not supported: each sequence is scanned whole"),
    (lambda n: n.attribute.append(helper.make_attribute("directions", [0, 1])), ModelFileError,
     "directions [0, 1] do not fit together"),
    (lambda n: n.attribute.append(helper.make_attribute("directions", [2])), ModelFileError,
     "directions [2] do not fit together"),
])
def test_an_opset_8_scan_the_rewrite_cannot_take_is_refused(edit, error, message, tmp_path):
    body = helper.make_graph([helper.make_node("Add", ["s", "e"], ["s2"])], "body",
                             [_vi("s", (2,)), _vi("e", (2,))], [_vi("s2", (2,))])
    scan = helper.make_node("Scan", ["", "s0", "x"], ["s"], name="scan", body=body,
                            num_scan_inputs=1)
    edit(scan)
    inputs = [("s0", (1, 2)), ("x", (1, 3, 2))] + ([("lens", (1,))] if scan.input[0] else [])
    model = _save(tmp_path, [scan], inputs, [("s", (1, 2))], opset=8, check=False)
    if scan.input[0]:
        m = onnx.load(model)
        m.graph.input[2].type.tensor_type.elem_type = TP.INT32
        model.write_bytes(m.SerializeToString())
    assert_refused(model, error, "node 'scan' (Scan)", message)
