"""The lstm, gru and rnn (tanh) ops on the onnxruntime backend: onnxruntime's LSTM, GRU and RNN
kernels where the call's values are finite and moderate, the Scan of element-wise ops
otherwise (a nan, an infinity, values whose gate sums could leave float32), each branch the
numpy backend's numbers; which branch ran is read from onnxruntime's profile of the run."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest

from plugin_host.builder import GraphBuilder

from .test_ops import CASES, assert_same, f32, model_ops, onnx_model


def ran_ops(graph, feed, tmp_path) -> set[str]:
    """The op types onnxruntime ran for ``graph`` on ``feed``, from its profile (nodes inside
    an If's branch and a Scan's body included)."""
    model = onnx_model(graph)
    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = str(tmp_path / "profile")
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    session.run(None, feed)
    with open(session.end_profiling()) as f:
        return {e["args"]["op_name"] for e in json.load(f) if e.get("cat") == "Node"}


KERNEL_CASES = ["lstm", "lstm_reverse", "lstm_peepholes", "lstm_lengths", "lstm_lengths_reverse",
                "lstm_peepholes_lengths_reverse", "gru", "gru_lengths_reverse",
                "gru_reset_after_lengths", "gru_reset_after_reverse", "rnn", "rnn_lengths"]
KERNEL = {"lstm": "LSTM", "gru": "GRU", "rnn": "RNN"}


@pytest.mark.parametrize("case", KERNEL_CASES)
def test_finite_values_run_onnxruntimes_kernel(case, tmp_path):
    """Finite inputs and states: the kernel runs (no Scan), within float32 rounding of the
    numpy backend, at 1 and 7 steps, each sequence from none of its steps to all; a sequence
    of length 0 keeps the states given (onnxruntime's kernels alone give zeros)."""
    graph, feed = CASES[case]()
    kernel = KERNEL[graph.nodes[0].op]
    runs = [(1, [1, 0]), (7, [7, 2]), (7, [0, 5]), (7, [0, 0])] if "lengths" in feed else [
        (1, None), (7, None)]
    for steps, lengths in runs:
        run = {**feed, "x": f32(steps, 2, 6)}
        if lengths is not None:
            run["lengths"] = np.array(lengths, feed["lengths"].dtype)
        ran = ran_ops(graph, dict(run), tmp_path)
        assert kernel in ran and "Scan" not in ran
        got = assert_same(graph, run)
        for k in [] if lengths is None else np.flatnonzero(np.array(lengths) == 0):
            for state in {"h", "c"} & set(run):
                np.testing.assert_array_equal(got[f"{state}_last"][k], run[state][k])


@pytest.mark.parametrize("special", ["nan_x", "inf_x", "nan_h", "inf_state", "huge_x"])
@pytest.mark.parametrize("case", ["lstm", "lstm_peepholes_lengths_reverse",
                                  "gru_reset_after_lengths", "rnn_lengths"])
def test_special_values_run_the_scan(case, special, tmp_path):
    """A nan or an infinity in x within a sequence (or in h, or an LSTM's c), or an x whose
    gate sums could pass float32's range (3e37): the Scan runs, not the kernel (whose
    activations would turn a nan into finite numbers), and the outputs are the numpy
    backend's, nan where it gives nan."""
    graph, feed = CASES[case]()
    run = {**feed, "x": f32(7, 2, 6)}
    if "lengths" in run:
        run["lengths"] = np.array([7, 4], feed["lengths"].dtype)
    name, value = {"nan_x": ("x", np.nan), "inf_x": ("x", -np.inf), "nan_h": ("h", np.nan),
                   "inf_state": ("c" if "c" in run else "h", np.inf),
                   "huge_x": ("x", 3e37)}[special]
    run[name] = run[name].copy()
    run[name].reshape(-1)[1] = value  # in the first sequence, at its first step
    ran = ran_ops(graph, dict(run), tmp_path)
    assert "Scan" in ran and KERNEL[graph.nodes[0].op] not in ran
    with np.errstate(all="ignore"):
        got = assert_same(graph, run)
    if special.startswith("nan"):
        assert np.isnan(got["h_last"][0]).all() and np.isfinite(got["h_last"][1]).all()


@pytest.mark.parametrize("case", ["lstm_runtime_weights", "gru_runtime_weights",
                                  "rnn_runtime_weights", "rnn_relu_reverse"])
def test_what_the_kernels_cannot_take_is_the_scan_alone(case):
    """Run-time weights, an rnn of relu (whose state can grow without bound, and whose kernel
    makes a nan 0): no If, no kernel in the model, the Scan alone."""
    graph, _ = CASES[case]()
    assert "Scan" in model_ops(graph) and not {"If", *KERNEL.values()} & model_ops(graph)


@pytest.mark.parametrize("weight, value", [("w_ih", np.inf), ("w_hh", 1e36)])
def test_a_weight_the_bound_cannot_cover_is_the_scan_alone(weight, value):
    """A constant weight holding an infinity, or one so large that the hidden state's share
    of a gate could leave float32 whatever the inputs: the Scan alone, the numpy backend's
    numbers."""
    b = GraphBuilder("lstm_weights")
    x = b.input("x", ("t", 2, 3), "float32", "ANY")
    h, c = (b.input(n, (2, 2), "float32", "ANY") for n in ("h", "c"))
    weights = {"w_ih": f32(8, 3), "w_hh": f32(8, 2)}
    weights[weight][0, 0] = value
    outs = b.op("lstm", x, h, c, *(b.constant(n, w) for n, w in weights.items()), name="node")
    for out, name in zip(outs, ("y", "h_last", "c_last")):
        b.output(out, name, "ANY")
    graph = b.build()
    assert "Scan" in model_ops(graph) and not {"If", "LSTM"} & model_ops(graph)
    with np.errstate(all="ignore"):
        assert_same(graph, {"x": f32(4, 2, 3), "h": f32(2, 2), "c": f32(2, 2)})


def test_two_recurrences_without_biases_of_two_sizes_have_their_own_zero_biases():
    """Each kernel's bias of zeros is as wide as its hidden size (one was made for the first
    and given to both, which onnxruntime refused)."""
    b = GraphBuilder("two_lstms")
    x = b.input("x", (5, 1, 3), "float32", "ANY")
    feed = {"x": f32(5, 1, 3)}
    for k, hidden in enumerate((4, 6)):
        states = [b.input(f"{n}{k}", (1, hidden), "float32", "ANY") for n in "hc"]
        feed.update({f"{n}{k}": f32(1, hidden) for n in "hc"})
        weights = [b.constant(f"w_ih{k}", f32(4 * hidden, 3, scale=0.3)),
                   b.constant(f"w_hh{k}", f32(4 * hidden, hidden, scale=0.3))]
        b.output(b.op("lstm", x, *states, *weights, name=f"lstm{k}")[0], f"y{k}", "ANY")
    graph = b.build()
    assert "If" in model_ops(graph)
    assert_same(graph, feed)
