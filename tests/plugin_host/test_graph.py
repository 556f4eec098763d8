"""Graphs fail at build or load, naming the node, never at the first call."""

import numpy as np
import pytest

from abi import TensorSpec
from abi.errors import ContractError, GraphError, ShapeError
from plugin_host.builder import GraphBuilder
from plugin_host.graph import Graph, Node
from plugins import nn
from plugins.demo_model import build_demo_graph


def test_demo_graph_shapes():
    g = build_demo_graph(seed=0)
    assert [s.name for s in g.inputs] == ["img", "desire", "h", "c"]
    assert [(s.name, tuple(s.shape)) for s in g.outputs] == [
        ("plan", (1, 66)), ("h_next", (1, 512)), ("c_next", (1, 512))]
    assert dict(g.state) == {"h": "h_next", "c": "c_next"}
    assert [s.name for s in g.feed_inputs] == ["img", "desire"]
    assert g.types["fc"].shape == (1, 512)
    for key in ("vision.3.bn.running_mean", "vision.3.bn.num_batches_tracked",
                "lstm.weight_ih", "desire_emb.weight", "ln.bias", "plan.weight"):
        assert key in g.tensors
    assert g.tensors["lstm.weight_ih"].shape == (2048, 544)


def test_builder_names_the_node_with_a_bad_linear():
    b = GraphBuilder("bad")
    x = b.input("x", (1, 10), "float32", "NC")
    with pytest.raises(GraphError) as info:
        b.layer("head", nn.Linear(11, 3), x)
    assert info.value.node == "head"
    assert "head" in str(info.value) and "10" in str(info.value) and "11" in str(info.value)


def test_builder_names_the_node_with_bad_conv_channels():
    b = GraphBuilder("bad")
    x = b.input("x", (1, 3, 8, 8), "float32", "NCHW")
    with pytest.raises(GraphError) as info:
        b.layer("stem", nn.Conv2d(4, 8, 3), x)
    assert info.value.node == "stem"


def test_builder_refuses_undefined_input_and_unknown_op():
    b = GraphBuilder("bad")
    with pytest.raises(GraphError, match="nowhere"):
        b.op("relu", "nowhere", name="r")
    x = b.input("x", (2,), "float32", "N")
    with pytest.raises(GraphError) as info:
        b.op("frobnicate", x, name="f")
    assert info.value.node == "f" and "frobnicate" in str(info.value)


def test_builder_refuses_bad_attrs():
    b = GraphBuilder("bad")
    x = b.input("x", (2, 3), "float32", "NC")
    with pytest.raises(GraphError) as info:
        b.op("softmax", x, name="sm", axis="last")
    assert info.value.node == "sm" and "axis" in str(info.value)
    with pytest.raises(GraphError):
        b.op("relu", x, name="r2", negative_slope=0.1)


def test_unpaired_state_refused():
    b = GraphBuilder("bad")
    h = b.state("h", (1, 4), "float32", "NC")
    b.output(b.op("relu", h), "y", "NC")
    with pytest.raises(GraphError, match="state"):
        b.build()


def _tiny(**overrides):
    x = TensorSpec("x", (1, 4), "float32", "NC")
    y = TensorSpec("y", (1, 2), "float32", "NC")
    parts = dict(
        inputs=[x], outputs=[y],
        nodes=[Node("fc", "linear", 1, ("x", "fc.weight", None), ("y",), {})],
        tensors={"fc.weight": np.ones((2, 4), np.float32)})
    parts.update(overrides)
    return Graph("tiny", **parts)


def test_graph_loaded_from_parts_is_checked():
    assert _tiny().types["y"].shape == (1, 2)
    with pytest.raises(GraphError) as info:
        _tiny(tensors={"fc.weight": np.ones((2, 5), np.float32)})
    assert info.value.node == "fc"
    with pytest.raises(GraphError, match="not defined before"):
        _tiny(nodes=[Node("fc", "linear", 1, ("z", "fc.weight", None), ("y",), {})])
    with pytest.raises(GraphError, match="not produced"):
        _tiny(outputs=[TensorSpec("w", (1, 2), "float32", "NC")])
    with pytest.raises(GraphError, match="declared"):
        _tiny(outputs=[TensorSpec("y", (1, 3), "float32", "NC")])
    with pytest.raises(GraphError, match="version|v9"):
        _tiny(nodes=[Node("fc", "linear", 9, ("x", "fc.weight", None), ("y",), {})])


def test_graph_refuses_duplicates_and_bad_state():
    node = Node("fc", "linear", 1, ("x", "fc.weight", None), ("y",), {})
    with pytest.raises(GraphError, match="duplicate"):
        _tiny(nodes=[node, Node("fc", "relu", 1, ("y",), ("z",), {})])
    with pytest.raises(GraphError, match="twice"):
        _tiny(nodes=[node, Node("r", "relu", 1, ("y",), ("y",), {})])
    with pytest.raises(GraphError, match="state"):
        _tiny(state={"x": "y"})


@pytest.mark.parametrize("op, attrs", [
    ("resize", {"size": [100000, 100000]}),
    ("pad", {"pads": [[0, 0], [0, 0], [0, 0], [0, 1 << 28]]}),
])
def test_a_node_output_above_the_value_cap_is_refused_before_anything_allocates(op, attrs):
    b = GraphBuilder("bomb")
    x = b.input("x", ("batch", 1, 2, 2), "float32", "ANY")  # symbolic dims count as 1
    with pytest.raises(GraphError, match=r"above the 268435456 one value may hold") as info:
        b.op(op, x, name="big", **attrs)
        b.build()
    assert info.value.node == "big"


def test_a_value_at_the_cap_is_allowed():
    b = GraphBuilder("edge")
    x = b.input("x", (1, 4), "float32", "ANY")
    b.output(b.op("pad", x, name="wide", pads=[[0, 0], [0, (1 << 28) - 4]]), "y", "ANY")
    assert b.build().types["y"].shape == (1, 1 << 28)


def test_a_description_written_before_an_attribute_was_added_still_loads():
    """resize's cubic_coeff_a and exclude_outside came after artifacts with resize nodes were
    written: at their defaults they are not stored, so those descriptions stay normalized."""
    b = GraphBuilder("r")
    x = b.input("x", (1, 3, 4, 5), "float32", "ANY")
    b.output(b.op("resize", x, name="lin", size=[8, 10], mode="linear"), "a", "ANY")
    b.output(b.op("resize", x, name="cub", size=[8, 10], mode="cubic", cubic_coeff_a=-0.5),
             "c", "ANY")
    description = b.build().to_dict()
    lin, cub = description["nodes"]
    assert lin["attrs"] == {"size": [8, 10], "scales": None, "mode": "linear",
                            "coordinate_mode": "half_pixel", "nearest_mode": "round_prefer_floor"}
    assert cub["attrs"]["cubic_coeff_a"] == -0.5 and "exclude_outside" not in cub["attrs"]
    graph = Graph.from_dict(description, {})
    assert graph.nodes[0].attrs["cubic_coeff_a"] == -0.75
    assert graph.nodes[1].attrs["exclude_outside"] is False
    lin["attrs"]["exclude_outside"] = False  # the default written out: not the stored form
    with pytest.raises(GraphError, match="attributes are not in normalized form"):
        Graph.from_dict(description, {})


def test_an_unflatten_written_before_like_axes_still_loads():
    """unflatten's like_axes (with its like input) came after artifacts with unflatten nodes
    were written: without like it is not stored, so those descriptions stay normalized."""
    b = GraphBuilder("u")
    x = b.input("x", ("n", 12), "float32", "ANY")
    b.output(b.op("unflatten", x, name="split", axis=1, sizes=[3, 4]), "y", "ANY")
    description = b.build().to_dict()
    assert description["nodes"][0]["attrs"] == {"axis": 1, "sizes": [3, 4]}
    assert Graph.from_dict(description, {}).nodes[0].attrs["like_axes"] is None


def _conv_over_run_time_sizes():
    b = GraphBuilder("short")
    x = b.input("x", (1, 2, "h", "w"), "float32", "ANY")
    y = b.op("conv", x, b.constant("k", np.ones((3, 2, 3, 3), np.float32)), name="cv",
             stride=[1, 1], padding=[[0, 0], [0, 0]], dilation=[1, 1])
    b.output(b.op("sum", y, name="total", axes=[2, 3]), "y", "ANY")
    return b.build()


def test_check_sizes_asks_the_rules_of_a_calls_sizes():
    """The first rule that refuses a call's sizes raises its ShapeError naming the node;
    sizes every rule takes pass."""
    graph = _conv_over_run_time_sizes()
    assert graph.check_sizes({"x": (1, 2, 3, 5)}) is None
    with pytest.raises(ShapeError, match=r"^conv: spatial axis 0 of x shape \(1, 2, 2, 5\)") \
            as info:
        graph.check_sizes({"x": (1, 2, 2, 5)})
    assert info.value.context["node"] == "cv"


def test_check_sizes_stops_at_a_rule_that_refuses_otherwise(monkeypatch):
    """A rule that refuses the sizes for another reason than their size (it read a dim's
    name, which a size replaced) ends the search without an answer."""
    import plugin_host.graph as graph_module

    graph = _conv_over_run_time_sizes()

    def refuses(opdef, *args):
        raise ContractError(f"{opdef.name}: needs a symbolic axis")
    monkeypatch.setattr(graph_module, "infer_shapes", refuses)
    assert graph.check_sizes({"x": (1, 2, 2, 5)}) is None
    assert graph_module.sizes_checked(graph.nodes[0], [None]) is None
