"""ONNX LSTM, GRU and RNN, unrolled over time: torch's nn.LSTM, nn.GRU and nn.RNN (tanh and
relu) exported with both exporters (batch_first or not, 1 and 2 layers, one and two
directions, with and without initial states, sequence lengths 1 and 5) match onnxruntime;
hand-written ones cover what torch never writes (layout 1, reverse, linear_before_reset=0,
sequence_lens constant or given when the call runs, as torch's packed sequences under the
legacy exporter give it); the weights are stored once whatever the length; state carried by
the executor across calls continues the sequence; and what is not unrolled is refused naming
the node and the attribute. An LSTM, GRU or RNN over a sequence whose length is known only at
run time is one ABI ``lstm``, ``gru`` or ``rnn`` per direction instead, checked against
onnxruntime on both backends and against torch at several lengths, with sequence_lens (the
op's lengths) too."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from plugin_host.errors import ModelFileError, UnsupportedModelError
from plugin_host.executor import Executor
from plugin_host.onnx_import import import_onnx, recurrent
from plugins.numpy_backend import NumpyBackend
from plugins.onnxruntime_backend import OnnxruntimeBackend

from .conftest import (EXPORTERS, check_against_onnxruntime, check_on_both_backends, export,
                       export_dynamic, import_and_load, index_refused_on_both_backends, onnx,
                       onnxruntime_outputs, torch)

nn = torch.nn
helper, TP = onnx.helper, onnx.TensorProto
INPUT, HIDDEN, BATCH = 7, 5, 2
#: the import's own threshold (the fixture below raises it for the module's tests)
DEFAULT_UNROLLED_STEPS = recurrent.UNROLLED_STEPS


@pytest.fixture(autouse=True)
def unrolled_up_to_64_steps(monkeypatch):
    """These tests hold the unrolled steps over short static lengths (5 steps, 2, ...) to
    onnxruntime and to their structure: the import unrolls up to 64 steps here, as it did by
    default before the ABI ops became faster from 2 steps on (a test that sets its own
    threshold sets it after; test_short_static_lengths_are_one_op_by_default checks the
    default)."""
    monkeypatch.setattr(recurrent, "UNROLLED_STEPS", 64)


class _Rnn(nn.Module):
    """``nn.LSTM``, ``nn.GRU`` or ``nn.RNN`` (``RNN-relu``: its relu nonlinearity) returning
    ``y`` and the final state(s) as separate outputs."""

    def __init__(self, kind: str, batch_first: bool, layers: int, state: bool,
                 bidirectional: bool = False):
        super().__init__()
        self.state = state
        extra = {"nonlinearity": "relu"} if kind == "RNN-relu" else {}
        self.rnn = getattr(nn, kind.split("-")[0])(INPUT, HIDDEN, num_layers=layers,
                                                   batch_first=batch_first,
                                                   bidirectional=bidirectional, **extra)

    def forward(self, x, *state):
        if self.state:
            y, final = self.rnn(x, state if len(state) > 1 else state[0])
        else:
            y, final = self.rnn(x)
        return (y, *final) if isinstance(final, tuple) else (y, final)


def _names(kind: str, state: bool) -> tuple[list[str], list[str]]:
    outs = ["y", "h", "c"] if kind == "LSTM" else ["y", "h"]
    return (["x", "h0", "c0"][:len(outs)] if state else ["x"]), outs


def _shapes(kind, batch_first, layers, state, steps, dirs) -> list[tuple]:
    x = (BATCH, steps, INPUT) if batch_first else (steps, BATCH, INPUT)
    return [x] + [(layers * dirs, BATCH, HIDDEN)] * (len(_names(kind, state)[0]) - 1)


def _feeds(names, shapes, rng) -> list[dict]:
    """Three feeds: unit normal, small, and large enough to saturate every gate."""
    return [{n: (rng.standard_normal(s) * scale).astype(np.float32)
             for n, s in zip(names, shapes)} for scale in (1.0, 0.01, 40.0)]


# (kind, batch_first, layers, initial state given, sequence length, bidirectional)
CASES = [
    ("LSTM", False, 1, False, 5, False),
    ("LSTM", True, 2, True, 5, False),
    ("LSTM", False, 2, True, 1, False),
    ("LSTM", True, 1, False, 5, True),
    ("GRU", False, 1, False, 5, False),
    ("GRU", True, 2, True, 5, False),
    ("GRU", True, 1, False, 1, False),
    ("GRU", False, 2, True, 5, True),
    ("RNN", False, 1, False, 5, False),
    ("RNN", True, 2, True, 1, False),
    ("RNN-relu", True, 2, True, 5, True),
]


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: "{}-bf{:d}-l{}-s{:d}-t{}{}".format(
    *c[:5], "-bi" if c[5] else ""))
def test_torch_rnn_matches_onnxruntime(case, dynamo, fold, optimize, tmp_path, signer):
    kind, batch_first, layers, state, steps, bidirectional = case
    torch.manual_seed(0)
    module = _Rnn(kind, batch_first, layers, state, bidirectional)
    dirs = 2 if bidirectional else 1
    names, outs = _names(kind, state)
    shapes = _shapes(kind, batch_first, layers, state, steps, dirs)
    rng = np.random.default_rng(1)
    args = [torch.from_numpy(rng.standard_normal(s).astype(np.float32)) for s in shapes]
    model = export(module, args, tmp_path / "m.onnx", dynamo=dynamo, fold=fold,
                   optimize=optimize, input_names=names, output_names=outs)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer)
    nodes = loaded.graph.nodes
    cells = [n for n in nodes if n.op == "lstm_cell"]
    if kind == "LSTM":
        assert len(cells) == steps * layers * dirs
        assert {n.name.rsplit(".", 1)[1] for n in cells} == {f"t{t}" for t in range(steps)}
        assert sum(n.name.endswith(".reverse.t0") for n in cells) == layers * (dirs - 1)
    else:
        assert not cells
        act = "relu" if kind == "RNN-relu" else "tanh"
        assert sum(n.op == act for n in nodes) == steps * layers * dirs
    check_against_onnxruntime(model, loaded, _feeds(names, shapes, rng))


@pytest.mark.parametrize("bidirectional", [False, True], ids=["forward", "bidirectional"])
@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN", "RNN-relu"])
def test_short_static_lengths_are_one_op_by_default(kind, bidirectional, tmp_path, signer,
                                                     monkeypatch):
    """With the import's own threshold one step is unrolled and two or more are one ABI op
    per layer and direction (faster on both backends from 2 steps); against onnxruntime on
    both backends and against torch."""
    monkeypatch.setattr(recurrent, "UNROLLED_STEPS", DEFAULT_UNROLLED_STEPS)
    assert DEFAULT_UNROLLED_STEPS == 1
    torch.manual_seed(5)
    module = _Rnn(kind, True, 2, False, bidirectional=bidirectional).eval()
    names, outs = _names(kind, False)
    for steps in (1, 2, 8):
        x = torch.randn(BATCH, steps, INPUT)
        path = export(module, [x], tmp_path / f"m{steps}.onnx", dynamo=False,
                      input_names=names, output_names=outs)
        _, loaded = import_and_load(path, tmp_path / f"m{steps}.pha", signer)
        ops = [n.op for n in loaded.graph.nodes]
        assert ops.count(SEQUENCE_OP[kind]) == (0 if steps == 1 else 2 * (1 + bidirectional))
        feeds = [{"x": np.random.default_rng(k).standard_normal((BATCH, steps, INPUT))
                  .astype(np.float32)} for k in range(2)]
        _as_torch_and_onnxruntime(path, loaded, feeds, module, names, outs)


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_weights_are_stored_once_whatever_the_length(kind, tmp_path, signer):
    sizes = {}
    for steps in (2, 30):
        torch.manual_seed(0)
        module = _Rnn(kind, False, 1, False)
        module.rnn = getattr(nn, kind)(96, 128)
        x = torch.randn(steps, 1, 96)
        model = export(module, [x], tmp_path / f"m{steps}.onnx", dynamo=False,
                       input_names=["x"], output_names=_names(kind, False)[1])
        path = tmp_path / f"m{steps}.pha"
        _, loaded = import_and_load(model, path, signer, golden_cases=1)
        params = sum(p.numel() * 4 for p in module.parameters())
        stored = sum(a.nbytes for a in loaded.graph.tensors.values())
        assert params <= stored < params + 4096, (steps, stored, params)
        sizes[steps] = path.stat().st_size
        if kind == "LSTM":  # every step reads the same four constants
            cells = [n for n in loaded.graph.nodes if n.op == "lstm_cell"]
            assert len(cells) == steps and len({n.inputs[3:] for n in cells}) == 1
    # 28 more steps add nodes and longer golden vectors, not 28 more copies of the weights
    assert sizes[30] - sizes[2] < params / 2, (sizes, params)


class _Stateful(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(INPUT, HIDDEN, batch_first=True)

    def forward(self, x, h0, c0):
        y, (h, c) = self.lstm(x, (h0, c0))
        return y, h, c


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_state_carried_between_calls_continues_the_sequence(dynamo, tmp_path, signer):
    torch.manual_seed(0)
    module = _Stateful().eval()
    rng = np.random.default_rng(3)
    chunks = [rng.standard_normal((1, 4, INPUT)).astype(np.float32) for _ in range(3)]
    state = [torch.zeros(1, 1, HIDDEN), torch.zeros(1, 1, HIDDEN)]  # two tensors, not one twice
    model = export(module, [torch.from_numpy(chunks[0]), *state], tmp_path / "s.onnx",
                   dynamo=dynamo, input_names=["x", "h0", "c0"], output_names=["y", "h", "c"])
    _, loaded = import_and_load(model, tmp_path / "s.pha", signer,
                                state={"h0": "h", "c0": "c"})
    assert [s.name for s in loaded.graph.feed_inputs] == ["x"]
    executor = Executor(loaded.graph, NumpyBackend())
    with torch.no_grad():
        whole, _ = module.lstm(torch.from_numpy(np.concatenate(chunks, axis=1)))
    for i, chunk in enumerate(chunks):
        got = executor.run({"x": chunk})
        np.testing.assert_allclose(got["y"], whole[:, 4 * i:4 * (i + 1)].numpy(), rtol=1e-4,
                                   atol=1e-5, err_msg=f"call {i}")
    np.testing.assert_allclose(executor.state["h0"][0], whole[:, -1].numpy(), rtol=1e-4,
                               atol=1e-5)


# --- hand-written models: what torch never writes, and the refusals ---------------------------


def _rnn_model(path, op="LSTM", *, steps=3, batch=2, hidden=3, size=4, layout=0,
               direction="forward", inputs=("X", "W", "R", "B"), seq_dim=None, extra=(),
               outputs=("Y", "Y_h"), **attrs):
    """One LSTM/GRU/RNN node with random weights; ``inputs`` names the node's inputs in order
    ('' omits one), graph inputs for X and any initial state, initializers for the rest."""
    rng = np.random.default_rng(0)
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    dirs = 2 if direction == "bidirectional" else 1
    seq = seq_dim or steps
    x_shape = [seq, batch, size] if layout == 0 else [batch, seq, size]
    state = [dirs, batch, hidden] if layout == 0 else [batch, dirs, hidden]
    values = {"W": (dirs, gates * hidden, size), "R": (dirs, gates * hidden, hidden),
              "B": (dirs, 2 * gates * hidden), "P": (dirs, 3 * hidden)}
    inits = [helper.make_tensor(n, TP.FLOAT, s, rng.standard_normal(s).astype(np.float32)
                                .ravel().tolist()) for n, s in values.items() if n in inputs]
    inits += list(extra)
    graph_inputs = [helper.make_tensor_value_info("X", TP.FLOAT, x_shape)]
    graph_inputs += [helper.make_tensor_value_info(n, TP.FLOAT, state)
                     for n in ("initial_h", "initial_c") if n in inputs]
    y = [seq, dirs, batch, hidden] if layout == 0 else [batch, seq, dirs, hidden]
    shapes = {"Y": y, "Y_h": state, "Y_c": state}
    node_outputs = ["Y", "Y_h", "Y_c"][:3 if op == "LSTM" else 2]
    node = helper.make_node(op, list(inputs), node_outputs, name="rnn", hidden_size=hidden,
                            direction=direction, layout=layout, **attrs)
    graph = helper.make_graph([node], "g", graph_inputs,
                              [helper.make_tensor_value_info(o, TP.FLOAT, shapes[o])
                               for o in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path.write_bytes(model.SerializeToString())
    return path


@pytest.mark.parametrize("op, kwargs", [
    ("LSTM", {"layout": 1, "outputs": ("Y", "Y_h", "Y_c")}),
    ("LSTM", {"direction": "reverse", "outputs": ("Y", "Y_h", "Y_c")}),
    ("LSTM", {"direction": "bidirectional", "layout": 1,
              "inputs": ("X", "W", "R", "B", "", "initial_h", "initial_c")}),
    ("LSTM", {"inputs": ("X", "W", "R", "", "lens"), "outputs": ("Y_h",)}),
    ("GRU", {"layout": 1, "linear_before_reset": 1}),
    ("GRU", {"direction": "reverse", "linear_before_reset": 0}),
    ("GRU", {"direction": "bidirectional", "layout": 1, "linear_before_reset": 0,
             "inputs": ("X", "W", "R", "B", "", "initial_h")}),
    ("GRU", {"inputs": ("X", "W", "R"), "outputs": ("Y",),
             "activations": ["Sigmoid", "Tanh"]}),
    ("LSTM", {"batch": "n", "inputs": ("X", "W", "R", "B", "", "initial_h", "initial_c")}),
    ("GRU", {"batch": "n", "direction": "bidirectional", "linear_before_reset": 1,
             "inputs": ("X", "W", "R", "B", "", "initial_h")}),
    ("RNN", {"layout": 1}),
    ("RNN", {"direction": "reverse", "inputs": ("X", "W", "R"), "activations": ["Relu"]}),
    ("RNN", {"direction": "bidirectional", "activations": ["Tanh", "Relu"],
             "inputs": ("X", "W", "R", "B", "", "initial_h")}),
    ("RNN", {"batch": "n", "inputs": ("X", "W", "R", "B", "", "initial_h")}),
], ids=["lstm-layout1", "lstm-reverse", "lstm-bi-layout1-state", "lstm-lens-nobias",
        "gru-layout1", "gru-reverse-lbr0", "gru-bi-layout1-lbr0-state", "gru-nobias-acts",
        "lstm-runtime-batch", "gru-bi-runtime-batch", "rnn-layout1", "rnn-reverse-relu-nobias",
        "rnn-bi-tanh-relu-state", "rnn-runtime-batch"])
def test_hand_written_rnn_matches_onnxruntime(op, kwargs, tmp_path, signer):
    """onnxruntime runs no layout 1 (batch first) RNN: a layout-1 model is compared with its
    layout-0 twin (same weights) on transposed inputs, the outputs transposed back."""
    lens = helper.make_tensor("lens", TP.INT32, [2], [3, 3])
    extra = [lens] if "lens" in kwargs.get("inputs", ()) else []
    path = _rnn_model(tmp_path / "m.onnx", op, extra=extra, **kwargs)
    rng = np.random.default_rng(5)
    if kwargs.get("layout", 0) == 0:
        _, loaded = import_and_load(path, tmp_path / "m.pha", signer)
        assert all(type(d) is int for s in loaded.graph.inputs for d in s.shape) == \
            ("batch" not in kwargs)
        feeds = _feeds([s.name for s in loaded.graph.inputs],  # a run-time batch of 3
                       [[d if type(d) is int else 3 for d in s.shape]
                        for s in loaded.graph.inputs], rng)
        check_against_onnxruntime(path, loaded, feeds)
        return
    graph = import_onnx(path).graph
    twin = _rnn_model(tmp_path / "twin.onnx", op, extra=extra, **{**kwargs, "layout": 0})
    executor = Executor(graph, NumpyBackend())
    back = {"Y": (2, 0, 1, 3), "Y_h": (1, 0, 2), "Y_c": (1, 0, 2)}
    for feed in _feeds([s.name for s in graph.inputs], [s.shape for s in graph.inputs], rng):
        got = executor.run(dict(feed))
        want = onnxruntime_outputs(twin, {k: v.transpose(1, 0, 2) for k, v in feed.items()})
        assert set(got) == set(want)
        for name, value in want.items():
            np.testing.assert_allclose(got[name], value.transpose(back[name]), rtol=1e-4,
                                       atol=1e-5, err_msg=name)


def _with_lengths(path, batch):
    """The model at ``path`` with sequence_lens 'lens' a graph input: int32, one per sequence."""
    model = onnx.load(path)
    model.graph.input.append(helper.make_tensor_value_info("lens", TP.INT32, [batch]))
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("seq_dim", [None, "t", "long"], ids=["static", "run-time",
                                                               "static-op"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_sequence_lens_matches_onnxruntime(op, direction, seq_dim, tmp_path, signer,
                                           monkeypatch):
    """Each sequence of the batch its own length (0 to the whole 4 steps), given when the
    call runs: past it the output is 0 and the states stay, the final states each
    sequence's last valid ones, and the reverse direction starts at each sequence's own last
    step; against onnxruntime on both backends. A length outside [0, 4] is refused by
    onnxruntime and, naming the node, by both backends. Over a run-time length (the ABI op's
    lengths) the same at 4 steps, and at 1 and 7 steps; and over a static length longer than
    the import unrolls (here 4 steps beyond 3), the ABI op at 4 steps."""
    if seq_dim == "long":
        monkeypatch.setattr(recurrent, "UNROLLED_STEPS", 3)
        seq_dim = None
        one_op = True
    else:
        one_op = bool(seq_dim)
    outputs = ("Y", "Y_h", "Y_c") if op == "LSTM" else ("Y", "Y_h")
    path = _with_lengths(_rnn_model(tmp_path / "m.onnx", op, steps=4, batch=3,
                                    direction=direction, inputs=("X", "W", "R", "B", "lens"),
                                    outputs=outputs, seq_dim=seq_dim), 3)
    _, loaded = import_and_load(path, tmp_path / "m.pha", signer,
                                golden_dims={"t": (4, 2)} if seq_dim else None)
    ops = [n.op for n in loaded.graph.nodes]
    assert (op.lower() in ops) == one_op  # one ABI op over a run-time or long length
    rng = np.random.default_rng(5)
    feeds = [{"X": rng.standard_normal((4, 3, 4)).astype(np.float32),
              "lens": np.array(lens, np.int32)}
             for lens in ([4, 2, 1], [0, 4, 3], [4, 4, 4], [0, 0, 0])]
    if seq_dim:
        feeds += [{"X": rng.standard_normal((steps, 3, 4)).astype(np.float32),
                   "lens": np.array(lens, np.int32)}
                  for steps, lens in ((1, [1, 0, 1]), (7, [7, 3, 0]), (7, [1, 6, 7]))]
    check_on_both_backends(path, loaded, feeds)
    for bad in ([5, 1, 1], [2, -1, 1]):
        feed = {"X": feeds[0]["X"], "lens": np.array(bad, np.int32)}
        with pytest.raises(Exception) as info:
            onnxruntime_outputs(path, feed)
        assert type(info.value).__module__.startswith("onnxruntime")
        index_refused_on_both_backends(loaded.graph, feed, r"node 'rnn.*outside \[0, 5\)")


@pytest.mark.parametrize("op, direction, seq_dim", [
    ("LSTM", "forward", None), ("LSTM", "bidirectional", None), ("LSTM", "forward", "t"),
    ("LSTM", "bidirectional", "t"), ("LSTM-peepholes", "reverse", None),
    ("GRU", "reverse", None), ("GRU", "reverse", "t"), ("RNN", "bidirectional", None),
    ("RNN", "bidirectional", "t")])
def test_sequence_of_length_0_ends_with_zero_states(op, direction, seq_dim, tmp_path, signer):
    """A sequence of length 0 beside an initial state (given when the call runs, or a
    constant not all zero): onnxruntime's final states Y_h and Y_c are 0 for it, not the
    initial state, which its steps never read; so are the artifact's, on both backends
    (the run-time length's ABI op keeps the state, its lengths' rule)."""
    peepholes = op.endswith("-peepholes")
    op = op.split("-")[0]
    states = ("initial_h", "initial_c") if op == "LSTM" else ("initial_h",)
    inputs = ("X", "W", "R", "B", "lens", *states, *(("P",) if peepholes else ()))
    outputs = ("Y", "Y_h", "Y_c") if op == "LSTM" else ("Y", "Y_h")
    path = _with_lengths(_rnn_model(tmp_path / "m.onnx", op, steps=4, batch=3, inputs=inputs,
                                    direction=direction, outputs=outputs, seq_dim=seq_dim), 3)
    dirs = 2 if direction == "bidirectional" else 1
    rng = np.random.default_rng(7)
    initial = {n: rng.standard_normal((dirs, 3, 3)).astype(np.float32) for n in states}
    feeds = [{"X": rng.standard_normal((4, 3, 4)).astype(np.float32),
              "lens": np.array(lens, np.int32), **initial}
             for lens in ([0, 2, 4], [4, 0, 0], [0, 0, 0], [1, 3, 4])]
    golden = {"golden_dims": {"t": (4, 2)}} if seq_dim else {}
    _, loaded = import_and_load(path, tmp_path / "m.pha", signer, **golden)
    check_on_both_backends(path, loaded, feeds)
    got = Executor(loaded.graph, NumpyBackend()).run(dict(feeds[0]))
    assert np.all(got["Y_h"][:, 0] == 0) and np.all(got["Y_h"][:, 1:] != 0)
    # the same initial states as constants
    model = onnx.load(path)
    kept = [i for i in model.graph.input if i.name not in initial]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    model.graph.initializer.extend(onnx.numpy_helper.from_array(v, n)
                                   for n, v in initial.items())
    onnx.save(model, tmp_path / "constant.onnx")
    _, loaded = import_and_load(tmp_path / "constant.onnx", tmp_path / "c.pha", signer,
                                **golden)
    check_on_both_backends(tmp_path / "constant.onnx", loaded,
                           [{k: v for k, v in f.items() if k not in initial} for f in feeds])


@pytest.mark.parametrize("unrolled", [True, False], ids=["unrolled", "static-op"])
def test_constant_sequence_lens_matches_onnxruntime(unrolled, tmp_path, signer, monkeypatch):
    """Constant lengths, unrolled and over a static length one ABI op computes (3 steps
    beyond 2 unrolled): a length past the sequence's is refused at import on both."""
    if not unrolled:
        monkeypatch.setattr(recurrent, "UNROLLED_STEPS", 2)
    lens = helper.make_tensor("lens", TP.INT32, [2], [3, 1])
    path = _rnn_model(tmp_path / "m.onnx", "GRU", direction="bidirectional", extra=[lens],
                      inputs=("X", "W", "R", "B", "lens"))
    _, loaded = import_and_load(path, tmp_path / "m.pha", signer)
    assert ("gru" in [n.op for n in loaded.graph.nodes]) != unrolled
    rng = np.random.default_rng(6)
    check_on_both_backends(path, loaded, _feeds(["X"], [(3, 2, 4)], rng))
    long = helper.make_tensor("lens", TP.INT32, [2], [3, 4])
    path = _rnn_model(tmp_path / "long.onnx", "GRU", extra=[long],
                      inputs=("X", "W", "R", "B", "lens"))
    with pytest.raises(ModelFileError, match=r"node 'rnn' \(GRU\): sequence_lens \[3, 4\] "
                       r"must be in \[0, 3\]"):
        import_onnx(path)


def test_constant_sequence_lens_over_a_run_time_length(tmp_path, signer):
    """Constant lengths [3, 2] over a run-time sequence length: the ABI op's lengths, checked
    when the call runs; against onnxruntime on both backends at 3 and 5 steps; at 2 steps,
    shorter than a length, refused by onnxruntime and, naming the node, by both backends; a
    negative constant length refused at import."""
    lens = helper.make_tensor("lens", TP.INT32, [2], [3, 2])
    path = _rnn_model(tmp_path / "m.onnx", "GRU", direction="bidirectional", extra=[lens],
                      inputs=("X", "W", "R", "B", "lens"), seq_dim="t")
    _, loaded = import_and_load(path, tmp_path / "m.pha", signer, golden_dims={"t": (3, 5)})
    assert [n.op for n in loaded.graph.nodes].count("gru") == 2
    rng = np.random.default_rng(6)
    for steps in (3, 5):
        check_on_both_backends(path, loaded, _feeds(["X"], [(steps, 2, 4)], rng))
    feed = _feeds(["X"], [(2, 2, 4)], rng)[0]
    with pytest.raises(Exception) as info:
        onnxruntime_outputs(path, feed)
    assert type(info.value).__module__.startswith("onnxruntime")
    index_refused_on_both_backends(loaded.graph, feed, r"node 'rnn.*outside \[0, 3\)")
    negative = helper.make_tensor("lens", TP.INT32, [2], [3, -1])
    path = _rnn_model(tmp_path / "negative.onnx", "GRU", extra=[negative], seq_dim="t",
                      inputs=("X", "W", "R", "B", "lens"))
    with pytest.raises(ModelFileError, match=r"node 'rnn' \(GRU\): sequence_lens \[3, -1\] "
                       r"must be in \[0, t\], the sequence length"):
        import_onnx(path)


class _Packed(nn.Module):
    """A bidirectional LSTM over padded sequences of their own lengths (torch's packed
    sequences), padded back to the input's length."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(INPUT, HIDDEN, batch_first=True, bidirectional=True)

    def forward(self, x, lengths):
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True,
                                                   enforce_sorted=False)
        y, (h, _) = self.lstm(packed)
        y, _ = nn.utils.rnn.pad_packed_sequence(y, batch_first=True, total_length=x.shape[1])
        return y, h


@pytest.mark.parametrize("run_time_length", [False, True], ids=["static", "run-time"])
def test_torch_packed_sequences_match_onnxruntime_and_torch(run_time_length, tmp_path, signer):
    """The legacy exporter's packed LSTM (the batch sorted by length with a TopK, the LSTM's
    sequence_lens, the order restored), under a run-time batch, and a run-time length too:
    against onnxruntime on both backends and torch."""
    lengths = torch.tensor([6, 2, 4])
    module = _Packed().eval()
    dims = {0: "batch", 1: "t"} if run_time_length else {0: "batch"}
    model = export_dynamic(module, [torch.randn(3, 6, INPUT), lengths], tmp_path / "p.onnx",
                           dynamo=False, names=["x", "lengths"],
                           dims=[dims, {0: "batch"}], outputs=("y", "h"))
    _, loaded = import_and_load(model, tmp_path / "p.pha", signer,
                                golden_dims={"t": (6, 3)} if run_time_length else None)
    assert ("lstm" in [n.op for n in loaded.graph.nodes]) == run_time_length
    rng = np.random.default_rng(8)
    cases = [(6, [6, 2, 4]), (6, [1, 1]), (6, [6, 6, 6, 3]), (6, [5])]
    if run_time_length:
        cases += [(1, [1, 1]), (9, [9, 2, 5]), (3, [2])]
    feeds = [{"x": rng.standard_normal((len(lens), steps, INPUT)).astype(np.float32),
              "lengths": np.array(lens, np.int64)} for steps, lens in cases]
    check_on_both_backends(model, loaded, feeds)
    executor = Executor(loaded.graph, NumpyBackend())
    for feed in feeds:
        got = executor.run(dict(feed))
        with torch.no_grad():
            y, h = module(torch.from_numpy(feed["x"]), torch.from_numpy(feed["lengths"]))
        np.testing.assert_allclose(got["y"], y.numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got["h"], h.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kwargs, message", [
    ({"steps": 0}, r"sequence length 0: a static sequence needs at least 1 step"),
    ({"clip": 3.0}, r"attribute clip=3\.0"),
    ({"activations": ["Sigmoid", "Relu", "Tanh"]}, r"attribute activations=\['Sigmoid', "
                                                   r"'Relu', 'Tanh'\]"),
    ({"input_forget": 1}, r"attribute input_forget=1"),
    ({"layout": 2}, r"attribute layout=2"),
    ({"direction": "sideways"}, r"attribute direction='sideways'"),
    ({"inputs": ("X", "W", "R", "B", "lensf")}, r"sequence_lens 'lensf' of float32 \[2\]: "
                                                r"needs one integer per sequence"),
    ({"op": "GRU", "linear_before_reset": 2}, r"attribute linear_before_reset=2"),
    ({"op": "GRU", "batch": "n"}, r"initial_h is absent \(zeros\) but the batch 'n'"),
    ({"inputs": ("Xc", "W", "R")}, r"input X 'Xc' is a constant"),
    ({"op": "RNN", "activations": ["Sigmoid"]}, r"attribute activations=\['Sigmoid'\] is not "
                                                r"supported \(one per direction, each Tanh or "
                                                r"Relu\)"),
    ({"op": "RNN", "direction": "bidirectional", "activations": ["Tanh"]},
     r"attribute activations=\['Tanh'\]"),
    ({"op": "RNN", "clip": 1.0}, r"attribute clip=1\.0"),
], ids=["no-steps", "clip", "activations", "input-forget",
        "layout", "direction", "lens-float", "linear-before-reset", "zeros-symbolic-batch",
        "constant-x", "rnn-activation", "rnn-activations-per-direction", "rnn-clip"])
def test_refused_naming_node_and_attribute(kwargs, message, tmp_path):
    kwargs = dict(kwargs)
    op = kwargs.pop("op", "LSTM")
    lens = helper.make_tensor("lens", TP.INT32, [2], [3, 2])
    lensf = helper.make_tensor("lensf", TP.FLOAT, [2], [3, 2])
    xc = helper.make_tensor("Xc", TP.FLOAT, [3, 2, 4], [0.5] * 24)
    path = _rnn_model(tmp_path / "m.onnx", op, extra=[lens, lensf, xc], **kwargs)
    with pytest.raises(UnsupportedModelError, match=message) as info:
        import_onnx(path)
    assert info.value.node == "rnn" and info.value.op == op
    assert f"node 'rnn' ({op})" in str(info.value)


@pytest.mark.parametrize("kwargs", [
    {"inputs": ("X", "W", "R", "B", "", "initial_h", "initial_c", "P")},
    {"direction": "bidirectional", "inputs": ("X", "W", "R", "B", "", "", "", "P")},
    {"direction": "reverse", "batch": "n", "inputs": ("X", "W", "R", "", "", "initial_h",
                                                      "initial_c", "P")},
    {"layout": 1, "direction": "bidirectional", "inputs": ("X", "W", "R", "B", "", "", "",
                                                           "P")},
    {"direction": "bidirectional", "inputs": ("X", "W", "R", "B", "lens", "", "", "P")},
], ids=["state", "bidirectional", "reverse-run-time-batch-nobias", "layout1", "lengths"])
def test_peepholes_match_onnxruntime(kwargs, tmp_path, signer):
    """ONNX's LSTM with P (Pi and Pf times the previous cell, Po times the new one), unrolled
    as glue ops; on both backends against onnxruntime (layout 1 against its layout-0 twin on
    transposed inputs); sequence_lens as a graph input, each sequence its own length."""
    lengths, kwargs = "lens" in kwargs["inputs"], {"batch": 3, **kwargs}
    path = _rnn_model(tmp_path / "m.onnx", steps=4, outputs=("Y", "Y_h", "Y_c"), **kwargs)
    if lengths:
        _with_lengths(path, 3)
    layout = kwargs.get("layout", 0)
    graph = import_and_load(path, tmp_path / "m.pha", signer)[1].graph if layout == 0 else \
        import_onnx(path).graph  # onnxruntime runs no layout 1: no golden vectors
    assert "lstm_cell" not in {n.op for n in graph.nodes}
    rng = np.random.default_rng(11)
    shapes = [[d if type(d) is int else 2 for d in i.shape] for i in graph.inputs]
    feeds = _feeds([i.name for i in graph.inputs], shapes, rng)
    if lengths:
        for feed, lens in zip(feeds, ([4, 2, 0], [1, 4, 3], [0, 0, 4])):
            feed["lens"] = np.array(lens, np.int32)
    twin = path if layout == 0 else _rnn_model(
        tmp_path / "twin.onnx", steps=4, outputs=("Y", "Y_h", "Y_c"), **{**kwargs, "layout": 0})
    back = {"Y": (2, 0, 1, 3), "Y_h": (1, 0, 2), "Y_c": (1, 0, 2)}
    for backend in (NumpyBackend(), OnnxruntimeBackend()):
        for feed in feeds:
            got = Executor(graph, backend).run(dict(feed))
            want = onnxruntime_outputs(twin, {k: v.transpose(1, 0, 2) if layout and v.ndim == 3
                                              else v for k, v in feed.items()})
            assert set(got) == set(want)
            for name, value in want.items():
                np.testing.assert_allclose(got[name], value.transpose(back[name]) if layout
                                           else value, rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("kwargs", [
    {"direction": "bidirectional", "inputs": ("X", "W", "R", "B", "", "initial_h", "initial_c",
                                              "P")},
    {"direction": "reverse", "inputs": ("X", "W", "R", "", "lens", "", "", "P")},
], ids=["bidirectional-state", "reverse-lengths-nobias"])
def test_peepholes_over_a_run_time_length_match_onnxruntime(kwargs, tmp_path, signer):
    """Over a length known only at run time, one ABI ``lstm`` per direction with its
    peepholes (ONNX's P in the op's order i, f, o); on both backends against onnxruntime at
    4, 1 and 7 steps."""
    lengths, d = "lens" in kwargs["inputs"], 2 if kwargs["direction"] == "bidirectional" else 1
    path = _rnn_model(tmp_path / "m.onnx", steps=4, batch=3, seq_dim="t",
                      outputs=("Y", "Y_h", "Y_c"), **kwargs)
    if lengths:
        _with_lengths(path, 3)
    _, loaded = import_and_load(path, tmp_path / "m.pha", signer, golden_dims={"t": (4, 2)})
    assert [n.op for n in loaded.graph.nodes].count("lstm") == d
    rng = np.random.default_rng(12)
    feeds = []
    for steps, lens in ((4, [4, 2, 0]), (1, [1, 0, 1]), (7, [7, 3, 5])):
        feed = {"X": rng.standard_normal((steps, 3, 4)).astype(np.float32)}
        if "initial_h" in kwargs["inputs"]:
            feed |= {n: rng.standard_normal((d, 3, 3)).astype(np.float32)
                     for n in ("initial_h", "initial_c")}
        if lengths:
            feed["lens"] = np.array(lens, np.int32)
        feeds.append(feed)
    check_on_both_backends(path, loaded, feeds)


def test_all_zero_peepholes_are_none(tmp_path, signer):
    """As exporters write P when the model has none: the cell op, as without P."""
    path = _rnn_model(tmp_path / "m.onnx", inputs=("X", "W", "R", "B", "", "", "", "P"))
    model = onnx.load(path)
    p = next(t for t in model.graph.initializer if t.name == "P")
    p.CopyFrom(helper.make_tensor("P", TP.FLOAT, [1, 9], [0.0] * 9))
    onnx.save(model, path)
    _, loaded = import_and_load(path, tmp_path / "m.pha", signer)
    assert "lstm_cell" in {n.op for n in loaded.graph.nodes}


def test_beyond_the_models_unrolled_steps_a_node_is_one_op(tmp_path, monkeypatch):
    """Many nodes each under the per-node length still cannot unroll without bound: the one
    that would bring the model past MAX_TOTAL_STEPS is one ABI op per direction instead."""
    monkeypatch.setattr(recurrent, "MAX_TOTAL_STEPS", 5)
    path = _rnn_model(tmp_path / "m.onnx", direction="bidirectional")  # 2 x 3 steps
    ops = [n.op for n in import_onnx(path).graph.nodes]
    assert ops.count("lstm") == 2 and "lstm_cell" not in ops
    monkeypatch.setattr(recurrent, "MAX_TOTAL_STEPS", 6)
    ops = [n.op for n in import_onnx(path).graph.nodes]
    assert ops.count("lstm_cell") == 6 and "lstm" not in ops


def test_the_models_unrolled_steps_add_up_over_its_nodes(tmp_path, signer, monkeypatch):
    """torch's two-layer nn.LSTM over 3 steps is two LSTM nodes: with room for 4 unrolled
    steps the first layer unrolls (3) and the second, which would bring the model to 6, is
    one ABI op; the model matches onnxruntime on both backends."""
    monkeypatch.setattr(recurrent, "MAX_TOTAL_STEPS", 4)
    torch.manual_seed(2)
    module = _Rnn("LSTM", True, 2, False).eval()
    path = export(module, [torch.randn(BATCH, 3, INPUT)], tmp_path / "m.onnx", dynamo=False,
                  input_names=["x"], output_names=_names("LSTM", False)[1])
    _, loaded = import_and_load(path, tmp_path / "m.pha", signer)
    ops = [n.op for n in loaded.graph.nodes]
    assert ops.count("lstm_cell") == 3 and ops.count("lstm") == 1, ops
    check_on_both_backends(path, loaded, _feeds(["x"], [(BATCH, 3, INPUT)],
                                                np.random.default_rng(1)))


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN-relu"])
def test_a_static_sequence_longer_than_the_import_unrolls_is_one_op(kind, tmp_path, signer):
    """torch's two-layer bidirectional batch-first nn.LSTM, nn.GRU and nn.RNN over a fixed
    300 steps (beyond UNROLLED_STEPS), then 1,100 (more than a node could unroll to, refused
    before): one ABI op per layer and direction, not a node per step; against onnxruntime on
    both backends and against torch."""
    assert recurrent.UNROLLED_STEPS < 300
    torch.manual_seed(4)
    module = _Rnn(kind, True, 2, False, bidirectional=True).eval()
    x = torch.randn(BATCH, 300, INPUT)
    path = export(module, [x], tmp_path / "m.onnx", dynamo=False, input_names=["x"],
                  output_names=_names(kind, False)[1])
    _, loaded = import_and_load(path, tmp_path / "m.pha", signer)
    ops = [n.op for n in loaded.graph.nodes]
    assert ops.count(SEQUENCE_OP[kind]) == 4 and len(ops) < 60, ops
    feeds = [{"x": np.random.default_rng(k).standard_normal((BATCH, 300, INPUT))
              .astype(np.float32)} for k in range(2)]
    _as_torch_and_onnxruntime(path, loaded, feeds, module, *_names(kind, False))

    long = torch.randn(1, 1100, INPUT)
    path = export(module, [long], tmp_path / "long.onnx", dynamo=False, input_names=["x"],
                  output_names=_names(kind, False)[1])
    _, loaded = import_and_load(path, tmp_path / "long.pha", signer)
    _as_torch_and_onnxruntime(path, loaded, [{"x": long.numpy()}], module,
                              *_names(kind, False))


def _as_torch_and_onnxruntime(path, loaded, feeds, module, names, outs) -> None:
    """Every output against onnxruntime on both backends, and on the first feed against
    torch's ``module`` (its inputs ``names``, its outputs ``outs``)."""
    check_on_both_backends(path, loaded, feeds)
    got = Executor(loaded.graph, NumpyBackend()).run(dict(feeds[0]))
    with torch.no_grad():
        want = module(*(torch.from_numpy(feeds[0][n]) for n in names))
    for name, value in zip(outs, want):
        np.testing.assert_allclose(got[name], value.numpy(), rtol=1e-4, atol=1e-5,
                                   err_msg=name)


def test_a_long_static_lstm_with_peepholes_and_states_is_one_op(tmp_path, signer,
                                                                monkeypatch):
    """The ABI op's peepholes and initial states over a static length past the unrolled
    steps, bidirectional, layout 0; against onnxruntime on both backends."""
    monkeypatch.setattr(recurrent, "UNROLLED_STEPS", 4)
    path = _rnn_model(tmp_path / "m.onnx", steps=6, direction="bidirectional",
                      inputs=("X", "W", "R", "B", "", "initial_h", "initial_c", "P"),
                      outputs=("Y", "Y_h", "Y_c"))
    _, loaded = import_and_load(path, tmp_path / "m.pha", signer)
    ops = [n.op for n in loaded.graph.nodes]
    assert ops.count("lstm") == 2 and "lstm_cell" not in ops and "sigmoid" not in ops
    rng = np.random.default_rng(3)
    check_on_both_backends(path, loaded, _feeds([s.name for s in loaded.graph.inputs],
                                                [s.shape for s in loaded.graph.inputs], rng))


def test_onnxruntime_reference_is_what_torch_computes(tmp_path):
    """The exported model itself is right (the comparisons above are against onnxruntime)."""
    torch.manual_seed(0)
    module = _Rnn("GRU", True, 2, False, True).eval()
    x = torch.randn(BATCH, 5, INPUT)
    model = export(module, [x], tmp_path / "m.onnx", dynamo=False, input_names=["x"],
                   output_names=["y", "h"])
    with torch.no_grad():
        y, h = module(x)
    got = onnxruntime_outputs(model, {"x": x.numpy()})
    np.testing.assert_allclose(got["y"], y.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got["h"], h.numpy(), rtol=1e-4, atol=1e-5)


# --- an LSTM over a run-time length: one lstm op per direction --------------------------------


_DYNAMO_EXPORT = """
import json, logging, sys, warnings
import torch
warnings.simplefilter("ignore")
logging.disable(logging.WARNING)
folder, spec = sys.argv[1], json.loads(sys.argv[2])
rnn = getattr(torch.nn, spec["kind"])(**spec["module"])
rnn.load_state_dict(torch.load(folder + "/weights.pt"))
args = torch.load(folder + "/args.pt")
class Named(torch.nn.Module):  # its inputs by name, as torch.export's dynamic shapes take them
    def __init__(self):
        super().__init__()
        self.rnn = rnn
    def forward(self, x, h0=None, c0=None):
        state = [v for v in (h0, c0) if v is not None]
        y, final = self.rnn(x, *([tuple(state)] if len(state) == 2 else state))
        return (y, *final) if isinstance(final, tuple) else (y, final)
t = torch.export.Dim("t")
torch.onnx.export(Named().eval(), tuple(args), dynamo=True, verbose=False,
                  input_names=spec["names"], output_names=spec["outs"],
                  dynamic_shapes=tuple({spec["axis"]: t} if i == 0 else None
                                       for i in range(len(args)))).save(folder + "/m.onnx")
"""


def _dynamo_export_in_a_fresh_interpreter(rnn, args, folder, axis, names, outs):
    """The dynamo exporter's ONNX of the ``nn.LSTM``, ``nn.GRU`` or ``nn.RNN`` ``rnn``
    (returning y and the final states) on ``args``, their axis ``axis`` the run-time dim t,
    exported in a fresh interpreter: torch 2.13's exporter keeps an nn.LSTM's sequence length
    dynamic in the first export of a process only, and fixes it to the traced size in every
    later one (torch.export itself refuses it: "Constraints violated (t)")."""
    torch.save(rnn.state_dict(), folder / "weights.pt")
    torch.save(list(args), folder / "args.pt")
    module = {"input_size": rnn.input_size, "hidden_size": rnn.hidden_size,
              "num_layers": rnn.num_layers, "batch_first": rnn.batch_first,
              "bidirectional": rnn.bidirectional}
    if isinstance(rnn, nn.RNN):
        module["nonlinearity"] = rnn.nonlinearity
    spec = {"kind": type(rnn).__name__, "module": module, "axis": axis, "names": names,
            "outs": outs}
    subprocess.run([sys.executable, "-c", _DYNAMO_EXPORT, str(folder), json.dumps(spec)],
                   check=True, timeout=600, capture_output=True)
    return folder / "m.onnx"


# (kind, dynamo, batch_first, layers, initial state given, bidirectional). torch 2.13's dynamo
# exporter writes the length it traced into a Reshape of a batch-second LSTM's y, which
# onnxruntime then refuses at any other length: that exporter is taken batch first only. It
# writes an nn.RNN as the ops of each step, fixing the length: RNNs come from the legacy one.
RUN_TIME_LENGTH = [
    ("LSTM", False, True, 2, True, True), ("LSTM", False, False, 1, False, False),
    ("LSTM", False, True, 1, False, True), ("LSTM", False, False, 2, True, False),
    ("LSTM", True, True, 2, True, True), ("LSTM", True, True, 1, False, True),
    ("LSTM", True, True, 1, True, False),
    ("GRU", False, True, 2, True, True), ("GRU", False, False, 1, False, False),
    ("GRU", True, True, 1, True, True),
    ("RNN", False, False, 2, True, False), ("RNN-relu", False, True, 1, False, True),
    ("RNN", False, True, 2, True, True),
]
#: the ABI op of each kind
SEQUENCE_OP = {"LSTM": "lstm", "GRU": "gru", "RNN": "rnn", "RNN-relu": "rnn"}


@pytest.mark.parametrize("kind, dynamo, batch_first, layers, state, bidirectional",
                         RUN_TIME_LENGTH, ids=["-".join(filter(None, (
                             c[0], "dynamo" if c[1] else "legacy", "bf" if c[2] else "",
                             f"l{c[3]}", "state" if c[4] else "", "bi" if c[5] else "")))
                             for c in RUN_TIME_LENGTH])
def test_torch_rnn_over_a_run_time_length(kind, dynamo, batch_first, layers, state,
                                          bidirectional, tmp_path, signer):
    """nn.LSTM, nn.GRU and nn.RNN exported with the sequence's length a run-time dim: no step
    is unrolled, and the artifact matches onnxruntime on both backends, and torch itself, at
    lengths 1 (2 from the dynamo exporter, which takes a dim of size 1 for a constant), 4 and
    11."""
    torch.manual_seed(0)
    module = _Rnn(kind, batch_first, layers, state, bidirectional).eval()
    dirs = 2 if bidirectional else 1
    names, outs = _names(kind, state)
    rng = np.random.default_rng(3)
    shapes = _shapes(kind, batch_first, layers, state, 6, dirs)
    args = [torch.from_numpy(rng.standard_normal(s).astype(np.float32)) for s in shapes]
    axis = 1 if batch_first else 0
    if dynamo:
        model = _dynamo_export_in_a_fresh_interpreter(module.rnn, args, tmp_path, axis, names,
                                                      outs)
    else:
        model = export_dynamic(module, args, tmp_path / "m.onnx", dynamo=False, names=names,
                               dims=[{axis: "t"}] + [{}] * (len(names) - 1), outputs=outs)
    lengths = (2, 4, 11) if dynamo else (1, 4, 11)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer,
                                golden_dims={"t": lengths[:2]})
    ops = [n.op for n in loaded.graph.nodes]
    assert ops.count(SEQUENCE_OP[kind]) == layers * dirs
    assert not {"lstm_cell", "tanh", "relu", "sigmoid"} & set(ops)  # no step unrolled
    assert loaded.graph.inputs[0].shape[axis] == "t"
    for steps in lengths:
        feeds = _feeds(names, _shapes(kind, batch_first, layers, state, steps, dirs), rng)
        _as_torch_and_onnxruntime(model, loaded, feeds, module, names, outs)


@pytest.mark.parametrize("op, kwargs", [
    ("LSTM", {"direction": "reverse", "outputs": ("Y", "Y_h", "Y_c")}),
    ("LSTM", {"direction": "bidirectional", "outputs": ("Y", "Y_h", "Y_c"),
              "inputs": ("X", "W", "R", "B", "", "initial_h", "initial_c")}),
    ("LSTM", {"batch": "n", "inputs": ("X", "W", "R", "", "", "initial_h", "initial_c"),
              "outputs": ("Y_c",)}),
    ("LSTM", {"layout": 1, "direction": "bidirectional", "outputs": ("Y", "Y_h", "Y_c")}),
    ("GRU", {"linear_before_reset": 0, "direction": "bidirectional",
             "inputs": ("X", "W", "R", "B", "", "initial_h")}),
    ("GRU", {"linear_before_reset": 1, "direction": "reverse", "inputs": ("X", "W", "R")}),
    ("GRU", {"layout": 1, "linear_before_reset": 0, "batch": "n",
             "inputs": ("X", "W", "R", "B", "", "initial_h")}),
    ("RNN", {"direction": "bidirectional", "activations": ["Relu", "Tanh"]}),
    ("RNN", {"layout": 1, "direction": "reverse", "activations": ["Relu"],
             "inputs": ("X", "W", "R", "B", "", "initial_h")}),
], ids=["lstm-reverse", "lstm-bi-state", "lstm-run-time-batch-nobias", "lstm-layout1-bi",
        "gru-lbr0-bi-state", "gru-lbr1-reverse-nobias", "gru-layout1-lbr0-run-time-batch",
        "rnn-bi-relu-tanh", "rnn-layout1-reverse-relu-state"])
def test_hand_written_rnn_over_a_run_time_length(op, kwargs, tmp_path, signer):
    """What torch does not write: reverse alone, no bias, a run-time batch too, a GRU's
    linear_before_reset 0, an RNN's activation per direction, layout 1 (compared, as
    onnxruntime runs no layout 1, with its layout-0 twin on transposed inputs); onnxruntime's
    own LSTM, GRU and RNN kernels the reference."""
    path = _rnn_model(tmp_path / "m.onnx", op, seq_dim="t", **kwargs)
    graph = import_onnx(path).graph
    assert [n.op for n in graph.nodes].count(op.lower()) == \
        (2 if kwargs.get("direction") == "bidirectional" else 1)
    layout = kwargs.get("layout", 0)
    twin = _rnn_model(tmp_path / "twin.onnx", op, seq_dim="t", **{**kwargs, "layout": 0})
    executors = [Executor(graph, NumpyBackend()), Executor(graph, OnnxruntimeBackend())]
    back = {"Y": (2, 0, 1, 3), "Y_h": (1, 0, 2), "Y_c": (1, 0, 2)}
    rng = np.random.default_rng(9)
    for steps in (1, 3, 8):
        shapes = [[steps if d == "t" else 4 if d == "n" else d for d in s.shape]
                  for s in graph.inputs]
        for feed in _feeds([s.name for s in graph.inputs], shapes, rng):
            runs = [executor.run(dict(feed)) for executor in executors]
            if layout:
                feed = {k: v.transpose(1, 0, 2) for k, v in feed.items()}
            want = onnxruntime_outputs(twin, feed, optimized=False)
            for got in runs:
                assert set(got) == set(want)
                for name, value in want.items():
                    np.testing.assert_allclose(got[name], value.transpose(back[name]) if layout
                                               else value, rtol=1e-4, atol=1e-5, err_msg=name)
