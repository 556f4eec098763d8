"""Graph.to_dict / Graph.from_dict: the graph description an artifact stores."""

import copy

import numpy as np
import pytest

from abi.artifact import decode, encode
from abi.errors import GraphError
from plugin_host.graph import Graph

from .conftest import build_tiny_graph


@pytest.fixture
def graph():
    return build_tiny_graph()


def test_round_trip_through_canonical_msgpack(graph):
    d = graph.to_dict()
    again = Graph.from_dict(decode(encode(d)), dict(graph.tensors))
    assert again.to_dict() == d
    assert list(again.tensors) == list(graph.tensors)
    assert dict(again.state) == {"h": "h_next"}


def test_description_is_plain_data(graph):
    d = graph.to_dict()
    bn = next(n for n in d["nodes"] if n["op"] == "batchnorm")
    assert bn["attrs"] == {"eps": 1e-3, "momentum": 0.2, "track_running_stats": True}
    assert bn["atomic"] is False
    assert d["constants"][0] == {"name": "fc.weight", "dtype": "float32", "shape": [4, 3]}
    encode(d)  # only msgpack-friendly types


def _refused(graph, mutate, tensors=None, match=None):
    d = copy.deepcopy(graph.to_dict())
    mutate(d)
    with pytest.raises(GraphError, match=match):
        Graph.from_dict(d, dict(graph.tensors) if tensors is None else tensors)


def test_refuses_attributes_not_in_normalized_form(graph):
    def drop_eps(d):
        del next(n for n in d["nodes"] if n["op"] == "batchnorm")["attrs"]["eps"]

    def int_eps(d):
        next(n for n in d["nodes"] if n["op"] == "batchnorm")["attrs"]["momentum"] = 0

    _refused(graph, drop_eps, match="normalized")
    _refused(graph, int_eps, match="normalized")


def test_refuses_a_wrong_atomic_flag(graph):
    _refused(graph, lambda d: d["nodes"][0].update(atomic=True), match="atomic")


def test_refuses_constants_that_do_not_match(graph):
    tensors = dict(graph.tensors)
    _refused(graph, lambda d: None, {k: v for k, v in tensors.items() if k != "fc.bias"},
             match="missing")
    _refused(graph, lambda d: None, {**tensors, "extra": np.zeros(1, np.float32)},
             match="undeclared")
    _refused(graph, lambda d: None, {**tensors, "fc.bias": np.zeros(3, np.float64)},
             match="float64")
    _refused(graph, lambda d: None, {**tensors, "fc.bias": np.zeros((1, 3), np.float32)})


@pytest.mark.parametrize("mutate", [
    lambda d: d.pop("state"),
    lambda d: d.update(extra=1),
    lambda d: d.update(nodes={}),
    lambda d: d["nodes"][0].update(version="1"),
    lambda d: d["nodes"][0].update(op="no such op!"),
    lambda d: d["inputs"][0].update(dtype="complex64"),
    lambda d: d["inputs"].append(d["inputs"][0]),
    lambda d: d["constants"].append(d["constants"][0]),
    lambda d: d["state"].update({1: "x"}),
    lambda d: d["nodes"][0].update(inputs=["x", 3]),
])
def test_refuses_malformed_descriptions(graph, mutate):
    _refused(graph, mutate)


def test_graph_checks_still_run(graph):
    def rewire(d):
        d["nodes"][0]["inputs"] = ["x", "fc.bias"]

    _refused(graph, rewire, match="fc.matmul")
