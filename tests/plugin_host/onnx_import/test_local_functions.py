"""A model's own functions (ModelProto.functions) are inlined before the import
(plugin_host/onnx_import/local_functions.py): torch's modules exported as functions,
onnxscript's functions, and hand-written ones with attribute references, defaults, nested
calls, an If in a body, omitted inputs and overloads, each compared with onnxruntime running
the model as given on both backends; hostile ones are refused with typed errors."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

from plugin_host.errors import ModelFileError, UnsupportedModelError
from plugin_host.onnx_import import import_onnx, parse_model
from plugin_host.onnx_import.local_functions import MAX_DEPTH, inline_local_functions
from plugin_host.onnx_import.reader import ReadLimits

from .conftest import (assert_refused, check_against_onnxruntime_and_torch,
                       check_on_both_backends, import_and_load, onnx, torch)

onnxscript = pytest.importorskip("onnxscript")
from onnxscript import FLOAT, script  # noqa: E402
from onnxscript import opset18 as op  # noqa: E402

helper, TP = onnx.helper, onnx.TensorProto
F = TP.FLOAT
OPSETS = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]


def _vi(name: str, shape=("n", 3), dtype=F):
    return helper.make_tensor_value_info(name, dtype, list(shape))


def _ref(name: str, refers_to: str, kind=onnx.AttributeProto.FLOAT):
    """An attribute of a body's node that takes the function's attribute ``refers_to``."""
    a = onnx.AttributeProto()
    a.name, a.ref_attr_name, a.type = name, refers_to, kind
    return a


def _function(name: str, inputs, outputs, nodes, attributes=(), defaults=(), overload=""):
    f = helper.make_function("local", name, list(inputs), list(outputs), list(nodes), OPSETS,
                             attributes=list(attributes))
    f.attribute_proto.extend(defaults)
    f.overload = overload
    return f


def _save(path, nodes, functions, inputs=None, outputs=None, inits=(), opsets=OPSETS):
    graph = helper.make_graph(list(nodes), "g", inputs or [_vi("x")], outputs or [_vi("y")],
                              list(inits))
    model = helper.make_model(graph, opset_imports=list(opsets), functions=list(functions))
    model.ir_version = 10
    path.write_bytes(model.SerializeToString())
    return path


def _feeds(*shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal(s).astype(np.float32)} for s in shapes]


def _scale():
    """Scale(x) = x * alpha, alpha an attribute of default 3.0."""
    k = helper.make_node("Constant", [], ["k"])
    k.attribute.append(_ref("value_float", "alpha"))
    return _function("Scale", ["x"], ["y"], [k, helper.make_node("Mul", ["x", "k"], ["y"])],
                     defaults=[helper.make_attribute("alpha", 3.0)])


def _outer():
    """Outer(x, b): an If on b (Relu of x, else Neg of x; the branches read the body's x),
    then Scale with alpha = Outer's beta, then Scale with its default."""
    branch = {name: helper.make_graph([helper.make_node(op, ["x"], [name])], name, [],
                                      [_vi(name)]) for name, op in (("t", "Relu"), ("e", "Neg"))}
    inner = helper.make_node("Scale", ["z"], ["s"], domain="local")
    inner.attribute.append(_ref("alpha", "beta"))
    return _function("Outer", ["x", "b"], ["y"], [
        helper.make_node("If", ["b"], ["z"], then_branch=branch["t"], else_branch=branch["e"]),
        inner, helper.make_node("Scale", ["s"], ["y"], domain="local")], attributes=["beta"])


def test_torch_modules_exported_as_functions(tmp_path, signer):
    """torch's TorchScript exporter writes each module as a function (a Conv1d, two Blocks of
    a Linear and a LayerNorm, the model itself), weights passed in as inputs; over a run-time
    batch, against onnxruntime and torch."""
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear, self.norm = torch.nn.Linear(8, 8), torch.nn.LayerNorm(8)

        def forward(self, x):
            return self.norm(torch.relu(self.linear(x)) + x)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv1d(4, 4, 3, padding=1)
            self.first, self.second = Block(), Block()

        def forward(self, x):
            return self.second(self.first(self.conv(x)))

    torch.manual_seed(0)
    module = Model().eval()
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.randn(2, 4, 8),), buffer, dynamo=False, opset_version=15,
                          export_modules_as_functions=True, input_names=["x"],
                          output_names=["y"], dynamic_axes={"x": {0: "n"}, "y": {0: "n"}})
    proto = onnx.load_from_string(buffer.getvalue())
    assert len(proto.functions) >= 4
    out = proto.graph.output[0]  # the exporter names it after the model's function's output
    proto.graph.node.append(helper.make_node("Identity", [out.name], ["y"]))
    out.name = "y"
    path = tmp_path / "modules.onnx"
    path.write_bytes(proto.SerializeToString())
    notes: list[str] = []
    _, loaded = import_and_load(path, tmp_path / "m.pha", signer, report=notes.append)
    assert any("call(s) of the model's" in n and "inlined" in n for n in notes), notes
    assert {"conv", "linear"} <= {n.op for n in loaded.graph.nodes}
    check_against_onnxruntime_and_torch(path, loaded, _feeds((1, 4, 8), (3, 4, 8)), module,
                                        1e-5)


def test_onnxscript_functions_with_an_attribute_default(tmp_path, signer):
    local = onnxscript.values.Opset("this", 1)

    @script(local, default_opset=op)
    def gelu_tanh(x, alpha: float = 0.5):
        return alpha * x * (op.Tanh(x * 0.79788456) + 1.0)

    @script(local, default_opset=op)
    def block(x, w):
        y = op.MatMul(x, w)
        return gelu_tanh(y, alpha=0.25) + gelu_tanh(y)

    @script(default_opset=op)
    def model(x: FLOAT[2, 4], w: FLOAT[4, 4]) -> FLOAT[2, 4]:
        return block(block(x, w), w)

    proto = model.to_model_proto()
    path = tmp_path / "script.onnx"
    path.write_bytes(proto.SerializeToString())
    _, loaded = import_and_load(path, tmp_path / "s.pha", signer)
    rng = np.random.default_rng(1)
    check_on_both_backends(path, loaded, [{n: rng.standard_normal(s).astype(np.float32)
                                           for n, s in (("x", (2, 4)), ("w", (4, 4)))}])


def test_nested_calls_attribute_references_and_an_if_in_a_body(tmp_path, signer):
    """Outer twice, with beta given and not: the If's branches in the body read the
    function's x; Scale's alpha comes from the call, then through Outer's beta, then from
    Scale's default, and where Outer's beta is not given, from nothing (Constant's value
    left out would be a malformed Constant, so beta is given on one call only: the other
    call's Scale reads the default)."""
    nodes = [helper.make_node("Outer", ["x", "b"], ["h"], domain="local", name="first",
                              beta=0.5),
             helper.make_node("Outer", ["h", "b"], ["y"], domain="local", name="second",
                              beta=-2.0)]
    path = _save(tmp_path / "nested.onnx", nodes, [_scale(), _outer()],
                 inputs=[_vi("x"), _vi("b", (), TP.BOOL)])
    _, loaded = import_and_load(path, tmp_path / "n.pha", signer)
    rng = np.random.default_rng(2)
    check_on_both_backends(path, loaded, [
        {"x": rng.standard_normal((n, 3)).astype(np.float32), "b": np.array(b)}
        for n, b in ((1, True), (4, False))])


def test_an_attribute_neither_given_nor_defaulted_is_left_out(tmp_path, signer):
    """LeakyRelu's alpha refers to the function's slope: given on one call, absent on the
    other, where LeakyRelu's own default (0.01) applies."""
    leaky = helper.make_node("LeakyRelu", ["x"], ["y"])
    leaky.attribute.append(_ref("alpha", "slope"))
    f = _function("Leaky", ["x"], ["y"], [leaky], attributes=["slope"])
    nodes = [helper.make_node("Leaky", ["x"], ["h"], domain="local", slope=0.5),
             helper.make_node("Leaky", ["h"], ["y"], domain="local")]
    path = _save(tmp_path / "leaky.onnx", nodes, [f])
    _, loaded = import_and_load(path, tmp_path / "l.pha", signer)
    check_on_both_backends(path, loaded, _feeds((5, 3), seed=3))


def test_an_omitted_input_is_absent_in_the_body(tmp_path, signer):
    """Clip(x, low, high) in a function of three inputs: one call gives all three, one omits
    high (absent: no upper bound) and one gives high but not low."""
    f = _function("Clamp", ["x", "low", "high"], ["y"],
                  [helper.make_node("Clip", ["x", "low", "high"], ["y"])])
    low, high = (onnx.numpy_helper.from_array(np.array(v, np.float32), n)
                 for n, v in (("lo", -0.5), ("hi", 0.25)))
    nodes = [helper.make_node("Clamp", ["x", "lo", "hi"], ["a"], domain="local"),
             helper.make_node("Clamp", ["x", "lo"], ["b"], domain="local"),
             helper.make_node("Clamp", ["x", "", "hi"], ["c"], domain="local"),
             helper.make_node("Sum", ["a", "b", "c"], ["y"])]
    path = _save(tmp_path / "clamp.onnx", nodes, [f], inits=[low, high])
    _, loaded = import_and_load(path, tmp_path / "c.pha", signer)
    check_on_both_backends(path, loaded, _feeds((6, 3), seed=4))


def test_overloads_and_a_function_named_as_an_onnx_op(tmp_path, signer):
    """Two functions of one name told apart by their overload; a function named Relu in the
    default domain is not called: onnxruntime runs Relu as ONNX's op, and so does the
    import."""
    double = _function("Twice", ["x"], ["y"], [helper.make_node("Add", ["x", "x"], ["y"])],
                       overload="add")
    square = _function("Twice", ["x"], ["y"], [helper.make_node("Mul", ["x", "x"], ["y"])],
                       overload="mul")
    fake = helper.make_function("", "Relu", ["x"], ["y"], [helper.make_node("Neg", ["x"], ["y"])],
                                OPSETS)
    add = helper.make_node("Twice", ["x"], ["a"], domain="local")
    add.overload = "add"
    mul = helper.make_node("Twice", ["a"], ["m"], domain="local")
    mul.overload = "mul"
    nodes = [add, mul, helper.make_node("Relu", ["m"], ["r"]),
             helper.make_node("Sub", ["r", "x"], ["y"])]
    path = _save(tmp_path / "overloads.onnx", nodes, [double, square, fake])
    _, loaded = import_and_load(path, tmp_path / "o.pha", signer)
    ops = [n.op for n in loaded.graph.nodes]
    assert "neg" not in ops and ops.count("relu") == 1, ops
    check_on_both_backends(path, loaded, _feeds((2, 3), seed=5))


def test_an_old_opset_model_is_inlined_then_upgraded(tmp_path, signer):
    """Opset 11: the body's ReduceSum takes its axes as an attribute, which the version
    converter moves to an input once the body is in the graph; onnxruntime runs the original
    functions."""
    f = helper.make_function("local", "RowSum", ["x"], ["y"], [
        helper.make_node("ReduceSum", ["x"], ["s"], axes=[1], keepdims=1),
        helper.make_node("Sub", ["x", "s"], ["y"])],
        [helper.make_opsetid("", 11), helper.make_opsetid("local", 1)])
    path = _save(tmp_path / "old.onnx", [helper.make_node("RowSum", ["x"], ["y"],
                                                          domain="local")], [f],
                 opsets=[helper.make_opsetid("", 11), helper.make_opsetid("local", 1)])
    _, loaded = import_and_load(path, tmp_path / "old.pha", signer)
    check_on_both_backends(path, loaded, _feeds((3, 3), seed=6))


def test_names_made_for_a_call_avoid_the_models_own(tmp_path, signer):
    """The model already has values named as the first call's body would be ("call/fn/...")
    and a function whose body's own names look like a nested call's: every name stays
    distinct."""
    inner = _function("Inner", ["x"], ["y"], [helper.make_node("Neg", ["x"], ["y"])])
    outer = _function("Middle", ["x"], ["y"], [
        helper.make_node("Relu", ["x"], ["call/fn/y"], name="relu"),
        helper.make_node("Inner", ["call/fn/y"], ["y"], domain="local", name="call")])
    nodes = [helper.make_node("Abs", ["x"], ["call/fn/x"], name="abs"),
             helper.make_node("Middle", ["call/fn/x"], ["m"], domain="local", name="call"),
             helper.make_node("Add", ["m", "call/fn/x"], ["y"], name="add")]
    path = _save(tmp_path / "names.onnx", nodes, [inner, outer])
    _, loaded = import_and_load(path, tmp_path / "names.pha", signer)
    check_on_both_backends(path, loaded, _feeds((2, 3), seed=7))


# --- refusals --------------------------------------------------------------------------------


def _chain(depth: int, fanout: int = 1) -> list:
    """Functions L0 .. L{depth}: each calls the next ``fanout`` times (summed), the last is a
    Relu."""
    out = [_function(f"L{depth}", ["x"], ["y"], [helper.make_node("Relu", ["x"], ["y"])])]
    for k in reversed(range(depth)):
        calls = [helper.make_node(f"L{k + 1}", ["x"], [f"c{i}"], domain="local")
                 for i in range(fanout)]
        total = helper.make_node("Sum", [f"c{i}" for i in range(fanout)], ["y"])
        out.append(_function(f"L{k}", ["x"], ["y"], [*calls, total]))
    return out


def test_calls_nested_too_deep_are_refused(tmp_path):
    path = _save(tmp_path / "deep.onnx", [helper.make_node("L0", ["x"], ["y"], domain="local",
                                                          name="top")], _chain(MAX_DEPTH))
    with pytest.raises(UnsupportedModelError, match=f"nested more than {MAX_DEPTH} deep"):
        import_onnx(path)
    ok = _save(tmp_path / "ok.onnx", [helper.make_node("L0", ["x"], ["y"], domain="local")],
               _chain(MAX_DEPTH - 1))
    assert import_onnx(ok).graph.nodes


def test_calls_that_multiply_past_the_node_cap_are_refused_quickly(tmp_path):
    """20 levels each calling the next twice: 2**20 Relus from a file of 21 small functions;
    refused at the node cap, long before they are all written."""
    path = _save(tmp_path / "wide.onnx", [helper.make_node("L0", ["x"], ["y"], domain="local")],
                 _chain(20, fanout=2))
    assert path.stat().st_size < 10_000
    with pytest.raises(ModelFileError, match="functions inlined take more than 100000 nodes"):
        import_onnx(path)


def test_bodies_past_the_byte_cap_are_refused_before_they_are_copied(tmp_path):
    """A body holding a Constant of 40 kB, called 40 times in a model read with a 1 MB cap."""
    big = onnx.numpy_helper.from_array(np.ones(10_000, np.float32), "v")
    f = _function("Big", ["x"], ["y"], [helper.make_node("Constant", [], ["k"], value=big),
                                        helper.make_node("Identity", ["x"], ["y"])])
    nodes = [helper.make_node("Big", ["x" if i == 0 else f"h{i - 1}"],
                              ["y" if i == 39 else f"h{i}"], domain="local") for i in range(40)]
    path = _save(tmp_path / "big.onnx", nodes, [f])
    limits = ReadLimits(max_file_bytes=1 << 20)
    model = parse_model(path.read_bytes(), limits=limits)
    with pytest.raises(ModelFileError, match=f"or {1 << 20} bytes"):
        inline_local_functions(model, limits=limits)
    inlined, calls = inline_local_functions(model, limits=ReadLimits(max_file_bytes=2 << 20))
    assert calls == 40 and not inlined.functions


def test_recursion_and_a_second_definition_are_refused(tmp_path):
    """onnx's checker refuses both in a file; the inliner refuses them itself in a model
    handed to it unchecked."""
    a = _function("A", ["x"], ["y"], [helper.make_node("B", ["x"], ["y"], domain="local")])
    b = _function("B", ["x"], ["y"], [helper.make_node("A", ["x"], ["y"], domain="local")])
    call = [helper.make_node("A", ["x"], ["y"], domain="local", name="top")]
    for functions, message in (([a, b], "calls itself"), ([a, a], "defined twice")):
        path = _save(tmp_path / "bad.onnx", call, functions)
        with pytest.raises(ModelFileError):
            import_onnx(path)
        model = onnx.ModelProto()
        model.ParseFromString(path.read_bytes())
        with pytest.raises(ModelFileError, match=message):
            inline_local_functions(model)


def test_calls_that_do_not_fit_the_function_are_refused(tmp_path):
    f = _function("One", ["x"], ["y"], [helper.make_node("Relu", ["x"], ["y"])])
    model = onnx.ModelProto()
    model.ParseFromString(_save(tmp_path / "m.onnx", [
        helper.make_node("One", ["x", "x"], ["y"], domain="local", name="two_in")],
        [f]).read_bytes())
    with pytest.raises(ModelFileError, match="called with 2 inputs; the model's function "
                                             "takes 1"):
        inline_local_functions(model)

    body = helper.make_graph(  # its carried value named as the function's input w
        [helper.make_node("Identity", ["cond"], ["c2"]), helper.make_node("Neg", ["w"], ["w2"])],
        "body", [_vi("i", (), TP.INT64), _vi("cond", (), TP.BOOL), _vi("w")],
        [_vi("c2", (), TP.BOOL), _vi("w2")])
    hides = _function("Hides", ["x", "b", "w"], ["y"], [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Loop", ["", "b", "r"], ["y"], body=body)])
    path = _save(tmp_path / "hides.onnx", [
        helper.make_node("Hides", ["x", "b"], ["y"], domain="local", name="call")], [hides],
        inputs=[_vi("x"), _vi("b", (), TP.BOOL)])
    assert_refused(path, UnsupportedModelError, "node 'call' (Hides)",
                   "the function's body defines 'w', the name of an input the call omits")
