"""The executor: ABI checks on every call, Embedding validation at entry, state carry and reset."""

import numpy as np
import pytest
import torch

from abi.errors import ABIError, BackendError, IndexRangeError
from bench.torch_demo import torch_demo
from plugin_host.builder import GraphBuilder
from plugin_host.executor import Executor
from plugins import nn
from plugins.demo_model import build_demo_graph, demo_inputs
from plugins.numpy_backend import NumpyBackend


@pytest.fixture(scope="module")
def demo_graph():
    return build_demo_graph(seed=3)


@pytest.fixture
def executor(demo_graph):
    return Executor(demo_graph, NumpyBackend())


@pytest.fixture
def inputs():
    return demo_inputs(np.random.default_rng(7))


class CountingBackend(NumpyBackend):
    """The numpy backend, counting kernel calls."""

    def __init__(self):
        self.calls = 0

    def prepare(self, node, consts, types):
        kernel = super().prepare(node, consts, types)

        def counted(*args):
            self.calls += 1
            return kernel(*args)
        return counted


# --- numbers ---------------------------------------------------------------------------------


def test_demo_matches_torch_over_several_steps(demo_graph, executor):
    model = torch_demo(demo_graph)
    rng = np.random.default_rng(11)
    h = torch.zeros(1, 512)
    c = torch.zeros(1, 512)
    for _ in range(3):
        feed = demo_inputs(rng)
        out = executor.run(feed)
        with torch.no_grad():
            plan, h, c = model(torch.from_numpy(feed["img"]), torch.from_numpy(feed["desire"]), h, c)
        np.testing.assert_allclose(out["plan"], plan.numpy(), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(out["h_next"], h.numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(out["c_next"], c.numpy(), rtol=1e-4, atol=1e-5)


def test_state_is_carried_and_reset(executor, inputs):
    first = executor.run(inputs)
    assert np.abs(executor.state["h"]).sum() > 0
    np.testing.assert_array_equal(executor.state["h"], first["h_next"])
    second = executor.run(inputs)
    assert not np.allclose(first["plan"], second["plan"]), "state must influence the output"
    executor.reset("frame gap")
    assert executor.resets == 1 and executor.resets_by_reason["frame gap"] == 1
    assert not executor.state["h"].any() and not executor.state["c"].any()
    again = executor.run(inputs)
    np.testing.assert_array_equal(again["plan"], first["plan"])


def test_explicit_state_overrides_held_state(executor, inputs):
    executor.run(inputs)
    zeros = {"h": np.zeros((1, 512), np.float32), "c": np.zeros((1, 512), np.float32)}
    a = executor.run({**inputs, **zeros})
    executor.reset()
    b = executor.run(inputs)
    np.testing.assert_array_equal(a["plan"], b["plan"])


def test_returned_state_cannot_corrupt_held_state(executor, inputs):
    out = executor.run(inputs)
    held = executor.state["h"].copy()
    out["h_next"][:] = 1e9
    np.testing.assert_array_equal(executor.state["h"], held)


def test_weights_are_read_only(demo_graph):
    w = demo_graph.tensors["vision.0.conv.weight"]
    with pytest.raises(ValueError):
        w[0, 0, 0, 0] = 1.0
    assert not demo_graph.tensors["vision.0.bn.running_var"].flags.writeable


def test_inputs_not_modified(executor, inputs):
    before = {k: v.copy() for k, v in inputs.items()}
    executor.run(inputs)
    for k in inputs:
        np.testing.assert_array_equal(inputs[k], before[k])


def test_lstm_cell_with_constant_state_runs_on_numpy():
    """``lstm_cell`` with constant h and c (an unrolled LSTM's initial state) runs like one
    with run-time state."""
    torch.manual_seed(0)
    cell = torch.nn.LSTMCell(6, 5)
    b = GraphBuilder("cell")
    x = b.input("x", (2, 6), "float32", "NC")
    params = [b.constant(f"cell.{k}", v.detach().numpy()) for k, v in cell.state_dict().items()]
    h0 = np.random.default_rng(0).standard_normal((2, 5)).astype(np.float32)
    h, c = b.op("lstm_cell", x, b.constant("h0", h0), b.constant("c0", h0 * 2), *params,
                name="cell")
    b.output(h, "h", "NC")
    b.output(c, "c", "NC")
    x_value = np.random.default_rng(1).standard_normal((2, 6)).astype(np.float32)
    got = Executor(b.build(), NumpyBackend()).run({"x": x_value})
    with torch.no_grad():
        want = cell(torch.from_numpy(x_value), (torch.from_numpy(h0), torch.from_numpy(h0 * 2)))
    np.testing.assert_allclose(got["h"], want[0].numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["c"], want[1].numpy(), rtol=1e-5, atol=1e-6)


# --- ABI refusals ----------------------------------------------------------------------------


def test_every_input_problem_reported_at_once(executor):
    bad = {
        "img": np.zeros((1, 12, 64, 256), np.float64),   # dim 2 and dtype wrong
        "desir": np.zeros((1,), np.int64),                # misspelled: desire missing
    }
    with pytest.raises(ABIError) as info:
        executor.run(bad)
    text = str(info.value)
    problems = info.value.problems
    assert len(problems) >= 4, problems
    assert "img" in text and "128" in text and "64" in text
    assert "float32" in text and "float64" in text
    assert "desire" in text and "desir" in text


def test_wrong_rank_named(executor, inputs):
    with pytest.raises(ABIError) as info:
        executor.run({**inputs, "img": inputs["img"][0]})
    assert "img" in str(info.value) and "rank" in str(info.value)


def test_layout_declared_by_caller_is_checked(executor, inputs):
    with pytest.raises(ABIError) as info:
        executor.run(inputs, layouts={"img": "NHWC"})
    assert "NHWC" in str(info.value) and "NCHW" in str(info.value)


@pytest.mark.parametrize("bad", [-1, 8, 1000])
def test_embedding_index_refused_before_any_compute(demo_graph, inputs, bad):
    backend = CountingBackend()
    executor = Executor(demo_graph, backend)
    with pytest.raises(IndexRangeError) as info:
        executor.run({**inputs, "desire": np.array([bad], np.int64)})
    assert backend.calls == 0, "no kernel may run before the indices are validated"
    assert info.value.values == [bad] and info.value.positions == [(0,)]
    assert str(bad) in str(info.value) and "desire" in str(info.value)
    assert executor.calls == 0 and not executor.state["h"].any()


def test_embedding_float_indices_refused(executor, inputs):
    with pytest.raises(ABIError) as info:
        executor.run({**inputs, "desire": np.array([1.0], np.float64)})
    assert "desire" in str(info.value) and "int64" in str(info.value)


def test_embedding_fed_through_reshape_is_checked_at_entry():
    b = GraphBuilder("reshaped")
    ids = b.input("ids", (2, 3), "int64", "ANY")
    flat = b.op("reshape", ids, shape=[6])
    b.output(b.layer("emb", nn.Embedding(5, 4), flat), "y", "NC")
    backend = CountingBackend()
    ex = Executor(b.build(), backend)
    assert ex.index_inputs == {"ids": 5}
    idx = np.array([[0, 1, 2], [3, 9, -2]], np.int64)
    with pytest.raises(IndexRangeError) as info:
        ex.run({"ids": idx})
    assert backend.calls == 0
    assert info.value.positions == [(1, 1), (1, 2)] and info.value.values == [9, -2]


def test_embedding_on_computed_indices_checked_at_the_node():
    b = GraphBuilder("computed")
    ids = b.input("ids", (3,), "int64", "N")
    shifted = b.op("add", ids, b.constant("offset", np.array([5], np.int64)))
    b.output(b.layer("emb", nn.Embedding(6, 2), shifted), "y", "NC")
    ex = Executor(b.build(), NumpyBackend())
    assert ex.index_inputs == {}
    ex.run({"ids": np.array([0, 0, 0], np.int64)})
    with pytest.raises(IndexRangeError) as info:
        ex.run({"ids": np.array([0, 1, 0], np.int64)})
    assert info.value.values == [6] and "emb" in str(info.value)


def test_symbolic_batch_dims_and_conflicts():
    b = GraphBuilder("sym")
    x = b.input("x", ("batch", 4), "float32", "NC")
    ids = b.input("ids", ("batch",), "int64", "N")
    y = b.op("concat", b.layer("fc", nn.Linear(4, 3), x), b.layer("e", nn.Embedding(5, 2), ids),
             axis=1)
    b.output(y, "y", "NC")
    ex = Executor(b.build(), NumpyBackend())
    for n in (1, 3):
        out = ex.run({"x": np.ones((n, 4), np.float32), "ids": np.zeros((n,), np.int64)})
        assert out["y"].shape == (n, 5)
    with pytest.raises(ABIError) as info:
        ex.run({"x": np.ones((2, 4), np.float32), "ids": np.zeros((3,), np.int64)})
    assert "batch" in str(info.value)


# --- outputs and backends --------------------------------------------------------------------


class LyingBackend(NumpyBackend):
    """Returns a plan of the wrong shape: the executor must catch it."""

    def prepare(self, node, consts, types):
        kernel = super().prepare(node, consts, types)
        if node.name == "plan":
            return lambda *a: (np.zeros((1, 65), np.float32),)
        return kernel


def test_outputs_are_checked(demo_graph, inputs):
    ex = Executor(demo_graph, LyingBackend())
    with pytest.raises(ABIError) as info:
        ex.run(inputs)
    assert "plan" in str(info.value) and "66" in str(info.value) and "65" in str(info.value)
    assert info.value.where == "outputs"


class NoLstmBackend(NumpyBackend):
    name = "no-lstm"

    def supported_ops(self):
        ops = dict(super().supported_ops())
        del ops["lstm_cell"]
        return ops


def test_a_kernel_out_of_memory_is_a_backend_error_naming_the_node():
    """A max pool padded by 2^23 on each side of a 7x7 map: the numpy backend's padded copy
    would take 2^50 bytes, past any address space, so no allocator grants it. A MemoryError
    out of a kernel is what the model's values asked for, so it is refused as bad input is,
    naming the node, not a traceback."""
    b = GraphBuilder("wide")
    x = b.input("x", (1, 1, 7, 7), "float32", "NCHW")
    b.output(b.op("max_pool", x, name="pool", kernel_size=[1 << 24] * 2, stride=[1 << 24] * 2,
                  padding=[[1 << 23] * 2] * 2, dilation=[1, 1], ceil_mode=False), "y", "NCHW")
    ex = Executor(b.build(), NumpyBackend())
    with pytest.raises(BackendError, match="node 'pool': out of memory") as info:
        ex.run({"x": np.zeros((1, 1, 7, 7), np.float32)})
    assert info.value.context["node"] == "pool"


def test_backend_without_an_op_refused_at_load(demo_graph):
    with pytest.raises(BackendError) as info:
        Executor(demo_graph, NoLstmBackend())
    assert "lstm" in str(info.value) and "no-lstm" in str(info.value)


class Float16OnlyBackend(NumpyBackend):
    name = "f16"

    def supported_dtypes(self):
        return frozenset({"float16", "int64"})


def test_backend_without_a_dtype_refused_at_load(demo_graph):
    with pytest.raises(BackendError, match="float32"):
        Executor(demo_graph, Float16OnlyBackend())


def test_non_array_input_refused(executor, inputs):
    with pytest.raises(ABIError) as info:
        executor.run({**inputs, "img": inputs["img"].tolist()})
    assert "img" in str(info.value)



# --- fused chains ----------------------------------------------------------------------------


class PlainBackend(NumpyBackend):
    """The numpy backend without fusion (no fuse/prepare_chain)."""

    fuse = None
    prepare_chain = None


def test_fused_and_plain_agree(demo_graph, inputs):
    fused = Executor(demo_graph, NumpyBackend())
    assert ["vision.0.conv", "vision.0.bn", "relu_3"] in fused.fused
    plain = Executor(demo_graph, PlainBackend())
    assert plain.fused == []
    a, b = fused.run(inputs), plain.run(inputs)
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-5)


class BadChainBackend(NumpyBackend):
    def __init__(self, chain):
        self.chain = chain

    def fuse(self, graph):
        return [self.chain]


@pytest.mark.parametrize("chain,why", [
    (["vision.0.conv", "vision.1.conv"], "not consecutive"),
    (["lstm", "plan"], "single output"),           # lstm has two outputs
    (["vision.0.conv"], "two or more"),
    (["vision.0.conv", "nope"], "two or more"),
    (["ln", "lstm"], "exactly the previous"),      # lstm also reads h and c
])
def test_executor_refuses_unsafe_chains(demo_graph, chain, why):
    with pytest.raises(BackendError, match=why):
        Executor(demo_graph, BadChainBackend(chain))


def test_executor_refuses_chain_hiding_a_shared_intermediate():
    b = GraphBuilder("shared")
    x = b.input("x", (1, 4), "float32", "NC")
    y = b.op("relu", x, name="r")
    b.output(b.op("add", b.op("tanh", y, name="t"), y, name="a"), "z", "NC")
    graph = b.build()
    with pytest.raises(BackendError, match="intermediate"):
        Executor(graph, BadChainBackend(["r", "t"]))


def test_entry_index_checks_is_public_and_shared_with_the_sandbox(demo_graph):
    import plugin_host.sandbox as sandbox
    import plugin_host.sandbox.client as client
    from plugin_host.executor import entry_index_checks

    assert entry_index_checks(demo_graph) == [
        ("desire", 8, "input 'desire' (Embedding 'desire_emb')")]
    assert Executor(demo_graph, NumpyBackend()).index_inputs == {"desire": 8}
    # one implementation: the sandbox's host side uses the executor's
    assert client.entry_index_checks is entry_index_checks
    assert sandbox.entry_index_checks is entry_index_checks


def test_run_checked_is_run_after_its_own_abi_check(demo_graph, inputs):
    """check_inputs + run_checked (the sandbox worker's steady state) give run's outputs and
    state; the index values and the outputs are still checked by run_checked."""
    one, two = Executor(demo_graph, NumpyBackend()), Executor(demo_graph, NumpyBackend())
    bindings = two.check_inputs(inputs)
    for _ in range(2):
        want, got = one.run(inputs), two.run_checked(inputs, bindings)
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])
    for name in one.state:
        np.testing.assert_array_equal(two.state[name], one.state[name])
    with pytest.raises(ABIError):
        two.check_inputs({**inputs, "img": inputs["img"][..., :-1]})
    with pytest.raises(IndexRangeError):
        two.run_checked({**inputs, "desire": np.array([99], np.int64)}, bindings)


@pytest.mark.parametrize("given", [[1], ("img",), "img", None, 3])
def test_inputs_that_are_not_a_mapping_are_an_abi_error(executor, given):
    with pytest.raises(ABIError, match="expected a mapping of input name to numpy.ndarray, "
                                       f"got {type(given).__name__}"):
        executor.run(given)
