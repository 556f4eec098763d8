"""com.microsoft's DynamicQuantizeLSTM, what ``quantize_dynamic`` writes for every LSTM: torch's
nn.LSTM (batch first or not, one and two layers, one and two directions; both exporters)
quantized with int8 and uint8 weights, per tensor and per column, built at the default
tolerance and giving onnxruntime's outputs bit for bit on the onnxruntime backend and within
the artifact's tolerance on the numpy backend; hand-made nodes for what torch never writes
(peepholes, the reverse direction, no bias, initial states given, uint8 zero points, a
run-time length fixed by ``--dim``); a batch known only at run time; sequence_lens (hand-made,
and torch's packed sequences quantized); the same nodes as one ABI ``quantized_lstm`` per
direction (a longer or run-time length), bit for bit with the unrolled steps; and what is
refused, naming the node."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import IndexRangeError, ModelFileError, UnsupportedModelError
from plugin_host.onnx_import import import_onnx, quantized_lstm, recurrent, saturation
from plugin_host.executor import Executor
from plugins.numpy_backend import NumpyBackend
from plugins.onnxruntime_backend import OnnxruntimeBackend

from .conftest import (assert_refused, export, export_dynamic, import_and_load, onnx,
                       onnxruntime_outputs, torch)
from .test_quantize_dynamic import _build
from .test_quantized import _check, _vi
from .test_recurrent import _Packed

quantization = pytest.importorskip("onnxruntime.quantization")
helper, TP, numpy_helper = onnx.helper, onnx.TensorProto, onnx.numpy_helper
_Q = quantization.QuantType
_MS = "com.microsoft"


class _Tagger(torch.nn.Module):
    """A batch-first LSTM over a sequence, then a linear head per step."""

    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(6, 8, batch_first=True)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x):
        return self.head(self.lstm(x)[0])


class _Stacked(torch.nn.Module):
    """Two bidirectional layers, sequence first; the output and both final states."""

    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(6, 12, num_layers=2, bidirectional=True)

    def forward(self, x):
        y, (h, c) = self.lstm(x)
        return y, h, c


_MODELS = {"tagger": (_Tagger, (2, 4, 6), ["y"]),
           "stacked": (_Stacked, (5, 3, 6), ["y", "h", "c"])}
_CONFIGS = [pytest.param(False, _Q.QInt8, id="default"),
            pytest.param(False, _Q.QUInt8, id="per-tensor-u8"),
            pytest.param(True, _Q.QInt8, id="per-channel-s8"),
            pytest.param(True, _Q.QUInt8, id="per-channel-u8")]


def _feeds(shape, rng) -> list[dict]:
    return [{"x": (rng.standard_normal(shape) * s).astype(np.float32)} for s in (1, 1, 3, 0.1)]


@pytest.mark.parametrize("per_channel, weights", _CONFIGS)
@pytest.mark.parametrize("model", list(_MODELS))
@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_quantize_dynamic_lstms_match_onnxruntime(model, dynamo, per_channel, weights, tmp_path,
                                                  signer):
    make, shape, outputs = _MODELS[model]
    torch.manual_seed(5)
    float_model = export(make(), [torch.randn(*shape)], tmp_path / "float.onnx", dynamo=dynamo,
                         input_names=["x"], output_names=outputs)
    path = tmp_path / "dynamic.onnx"
    quantization.quantize_dynamic(str(float_model), str(path), per_channel=per_channel,
                                  weight_type=weights)
    nodes = [n for n in onnx.load(str(path)).graph.node if n.op_type == "DynamicQuantizeLSTM"]
    assert len(nodes) == (1 if model == "tagger" else 2)
    loaded = _build(path, tmp_path, signer, weights == _Q.QInt8)  # the golden vectors agree
    if loaded is None:
        return
    assert "lstm_cell" not in {n.op for n in loaded.graph.nodes}  # unrolled, quantized steps
    rng = np.random.default_rng(11)
    _check(path, loaded, _feeds(shape, rng), exact=True, backend=OnnxruntimeBackend())
    _check(path, loaded, _feeds(shape, rng))


class _Both(torch.nn.Module):
    """A batch-first bidirectional LSTM (6 inputs and 8 hidden units unless given); its y."""

    def __init__(self, inputs: int = 6, hidden: int = 8):
        super().__init__()
        self.lstm = torch.nn.LSTM(inputs, hidden, batch_first=True, bidirectional=True)

    def forward(self, x):
        return self.lstm(x)[0]


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_a_run_time_batch_is_quantized_whole_at_every_step(dynamo, tmp_path, signer):
    """The hidden state's min and max over a batch known only when the call runs (uint8
    weights: exact on every CPU's onnxruntime)."""
    torch.manual_seed(5)
    float_model = export_dynamic(_Both(), [torch.randn(2, 4, 6)], tmp_path / "float.onnx",
                                 dynamo=dynamo, names=["x"], dims=[{0: "batch"}])
    path = tmp_path / "dynamic.onnx"
    quantization.quantize_dynamic(str(float_model), str(path), weight_type=_Q.QUInt8)
    _, loaded = import_and_load(path, tmp_path / "q.pha", signer)
    assert loaded.graph.inputs[0].shape[0] == "batch"
    rng = np.random.default_rng(8)
    feeds = [{"x": rng.standard_normal((n, 4, 6)).astype(np.float32)} for n in (1, 3, 7)]
    _check(path, loaded, feeds, exact=True, backend=OnnxruntimeBackend())
    _check(path, loaded, feeds)


def test_saturation_names_the_quantized_lstm(tmp_path):
    """Where onnxruntime saturates u8 x s8 sums (x86-64 without VNNI), the refusal names a
    DynamicQuantizeLSTM of int8 weights: its kernel multiplies with the same MLAS GEMM."""
    torch.manual_seed(5)
    float_model = export(_Stacked(), [torch.randn(5, 3, 6)], tmp_path / "float.onnx",
                         dynamo=False, input_names=["x"], output_names=["y", "h", "c"])
    path = tmp_path / "dynamic.onnx"
    quantization.quantize_dynamic(str(float_model), str(path))
    assert saturation.int8_weight_node(onnx.load(str(path))) == ("/lstm/LSTM_quant",
                                                                  "DynamicQuantizeLSTM")


def test_an_lstm_left_in_float32_imports_beside_quantized_matmuls(tmp_path, signer):
    """``op_types_to_quantize=['MatMul']`` keeps the LSTM an ONNX LSTM and quantizes the
    head."""
    torch.manual_seed(5)
    float_model = export(_Tagger(), [torch.randn(2, 4, 6)], tmp_path / "float.onnx",
                         dynamo=False, input_names=["x"], output_names=["y"])
    path = tmp_path / "dynamic.onnx"
    quantization.quantize_dynamic(str(float_model), str(path), op_types_to_quantize=["MatMul"],
                                  weight_type=_Q.QUInt8)  # exact on every CPU's onnxruntime
    assert {"LSTM", "MatMulInteger"} <= {n.op_type for n in onnx.load(str(path)).graph.node}
    _, loaded = import_and_load(path, tmp_path / "q.pha", signer)
    _check(path, loaded, _feeds((2, 4, 6), np.random.default_rng(4)))


# --- hand-made nodes -------------------------------------------------------------------------

HIDDEN, INPUT, STEPS, BATCH = 4, 3, 6, 2


def _lstm(tmp_path, *, direction="forward", weights=np.int8, per_column=False, bias=True,
          peepholes=False, states=False, zero_point=None, attrs=None, lens=None,
          steps=STEPS, batch=BATCH, y=True):
    """X (steps, batch, input) -> DynamicQuantizeLSTM (node "lstm") -> Y, Y_h, Y_c; quantized
    W and R of random codes with scales near what quantize_dynamic gives; ``states``: initial
    h and c as graph inputs; ``lens``: sequence_lens, a constant, or "input" for a graph input
    'lens'; ``y=False``: no Y (the node's first output unnamed)."""
    rng = np.random.default_rng(3)
    d = 2 if direction == "bidirectional" else 1
    info = np.iinfo(weights)

    def codes(k):
        return rng.integers(info.min, info.max + 1, (d, k, 4 * HIDDEN)).astype(weights)

    columns = 4 * HIDDEN if per_column else None
    inits = [numpy_helper.from_array(codes(INPUT), "W"), numpy_helper.from_array(codes(HIDDEN),
                                                                                "R")]
    for name in ("W", "R"):
        scale = rng.uniform(0.002, 0.01, (d,) if columns is None else (d, columns))
        zp = np.zeros(scale.shape, weights) if zero_point is None else np.full(
            scale.shape, zero_point, weights)
        inits += [numpy_helper.from_array(scale.astype(np.float32), f"{name}_scale"),
                  numpy_helper.from_array(zp, f"{name}_zp")]
    ins = ["x", "W", "R", "", "", "", "", "", "W_scale", "W_zp", "R_scale", "R_zp"]
    graph_inputs = [_vi("x", shape=(steps, batch, INPUT))]
    if bias:
        inits.append(numpy_helper.from_array(
            rng.standard_normal((d, 8 * HIDDEN)).astype(np.float32), "B"))
        ins[3] = "B"
    if isinstance(lens, str):
        graph_inputs.append(_vi("lens", TP.INT32, (batch,)))
        ins[4] = "lens"
    elif lens is not None:
        inits.append(numpy_helper.from_array(np.asarray(lens, np.int32), "lens"))
        ins[4] = "lens"
    if states:
        ins[5:7] = ["h0", "c0"]
        graph_inputs += [_vi(n, shape=(d, batch, HIDDEN)) for n in ("h0", "c0")]
    if peepholes:
        inits.append(numpy_helper.from_array(
            rng.standard_normal((d, 3 * HIDDEN)).astype(np.float32), "P"))
        ins[7] = "P"
    node = helper.make_node("DynamicQuantizeLSTM", ins, ["y" if y else "", "y_h", "y_c"],
                            name="lstm", domain=_MS, hidden_size=HIDDEN, direction=direction,
                            **(attrs or {}))
    outputs = [_vi("y", shape=(steps, d, batch, HIDDEN))] if y else []
    outputs += [_vi("y_h", shape=(d, batch, HIDDEN)), _vi("y_c", shape=(d, batch, HIDDEN))]
    graph = helper.make_graph([node], "g", graph_inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid(_MS, 1)])
    path = tmp_path / "lstm.onnx"
    path.write_bytes(model.SerializeToString())
    return path


@pytest.fixture(params=["steps", "op"])
def over(request, monkeypatch):
    """How the import runs a hand-made node's 6 steps: unrolled ("steps", up to 64 here), or
    as one ABI ``quantized_lstm`` per direction ("op", as it runs a length past the unrolled
    ones, as it runs these 6 by default)."""
    monkeypatch.setattr(quantized_lstm, "QUANTIZED_UNROLLED_STEPS",
                        64 if request.param == "steps" else 0)
    return request.param


def _hand_feeds(states: bool, d: int, rng) -> list[dict]:
    feeds = []
    for scale in (1.0, 4.0, 0.05):
        feed = {"x": (rng.standard_normal((STEPS, BATCH, INPUT)) * scale).astype(np.float32)}
        if states:
            feed |= {n: rng.standard_normal((d, BATCH, HIDDEN)).astype(np.float32)
                     for n in ("h0", "c0")}
        feeds.append(feed)
    return feeds


@pytest.mark.parametrize("options", [
    pytest.param({}, id="forward"),
    pytest.param({"direction": "reverse", "peepholes": True}, id="reverse-peepholes"),
    pytest.param({"direction": "bidirectional", "states": True, "per_column": True},
                 id="bidirectional-states-per-column"),
    pytest.param({"weights": np.uint8, "zero_point": 128, "bias": False}, id="uint8-no-bias"),
    pytest.param({"zero_point": 3}, id="int8-zero-point"),  # one per tensor: taken as it is
    pytest.param({"direction": "bidirectional", "peepholes": True, "weights": np.uint8,
                  "zero_point": 100, "per_column": True, "states": True}, id="everything"),
])
def test_hand_made_quantized_lstms_match_onnxruntime(options, over, tmp_path, signer):
    path = _lstm(tmp_path, **options)
    loaded = _build(path, tmp_path, signer, options.get("weights", np.int8) == np.int8)
    if loaded is None:
        return
    d = 2 if options.get("direction") == "bidirectional" else 1
    names = {n.name for n in loaded.graph.nodes}  # each step's quantization named after it
    s = ".reverse" if options.get("direction") == "reverse" else ""
    if over == "steps":
        assert {f"lstm{s}.x/dynamic_quantize", f"lstm{s}.t0.h/dynamic_quantize",
                f"lstm{s}.t{STEPS - 1}.h/integer_linear"} <= names
    else:  # one op per direction, named after it
        ops = [n.name for n in loaded.graph.nodes if n.op == "quantized_lstm"]
        assert ops == ([f"lstm{s}"] if d == 1 else ["lstm", "lstm.reverse"])
        assert f"lstm{s}.t0.h/dynamic_quantize" not in names
    rng = np.random.default_rng(17)
    feeds = _hand_feeds(options.get("states", False), d, rng)
    _check(path, loaded, feeds, exact=True, backend=OnnxruntimeBackend())
    _check(path, loaded, feeds)


_LENGTHS = ([STEPS, 2, 4], [1, STEPS, 0], [3, 3, 3], [0, 0, 0], [STEPS] * 3, [2, 0, 5],
            [5, 1, 1])


@pytest.mark.parametrize("options", [
    pytest.param({}, id="forward"),
    pytest.param({"direction": "reverse", "peepholes": True, "states": True},
                 id="reverse-peepholes-states"),
    pytest.param({"direction": "bidirectional", "states": True, "per_column": True,
                  "weights": np.uint8, "zero_point": 128}, id="bidirectional-states-u8"),
    pytest.param({"direction": "bidirectional", "states": True, "y": False},
                 id="bidirectional-states-no-y"),
])
def test_sequence_lens_match_onnxruntime(options, over, tmp_path, signer):
    """sequence_lens given when the call runs, three sequences of 0 to all 6 steps, bit for
    bit on the onnxruntime backend and within the tolerance on numpy: onnxruntime quantizes X
    over the steps before the longest length only, runs the reverse direction forward over
    each sequence reversed within its length (so a step quantizes together the states of
    the sequences at that many steps from their own ends), and at each step quantizes the
    previous step's output, 0 for a sequence that has ended; without Y, its kept state.
    Without Y, where a sequence has length 0, onnxruntime reads memory it never wrote (the
    import's note): those lengths are left out there."""
    path = _lstm(tmp_path, lens="input", batch=3, **options)
    loaded = _build(path, tmp_path, signer, options.get("weights", np.int8) == np.int8)
    if loaded is None:
        return
    d = 2 if options.get("direction") == "bidirectional" else 1
    rng = np.random.default_rng(23)
    feeds = []
    for lens in _LENGTHS:
        if not options.get("y", True) and 0 in lens and max(lens) > 1:
            continue
        feed = {"x": rng.standard_normal((STEPS, 3, INPUT)).astype(np.float32),
                "lens": np.array(lens, np.int32)}
        if options.get("states"):
            feed |= {n: rng.standard_normal((d, 3, HIDDEN)).astype(np.float32)
                     for n in ("h0", "c0")}
        feeds.append(feed)
    _check(path, loaded, feeds, exact=True, backend=OnnxruntimeBackend())
    _check(path, loaded, feeds)


def test_constant_sequence_lens_match_onnxruntime(over, tmp_path, signer):
    path = _lstm(tmp_path, lens=[STEPS, 3], direction="reverse", weights=np.uint8,
                 zero_point=128)
    _, loaded = import_and_load(path, tmp_path / "q.pha", signer)
    feeds = _hand_feeds(False, 1, np.random.default_rng(9))
    _check(path, loaded, feeds, exact=True, backend=OnnxruntimeBackend())
    _check(path, loaded, feeds)


def test_without_y_a_note_says_what_sequence_lens_cannot_reproduce(tmp_path):
    notes = import_onnx(_lstm(tmp_path, lens="input", y=False)).notes
    assert notes == ["node 'lstm' (DynamicQuantizeLSTM) has sequence_lens and no Y: where a "
                     "sequence has length 0, onnxruntime quantizes the others' hidden states "
                     "with memory it never wrote (where it writes Y_h), taken as the initial "
                     "state here (0 without one): the outputs can differ there; with Y as an "
                     "output they cannot"]
    assert import_onnx(_lstm(tmp_path, lens="input")).notes == []


def test_torch_packed_sequences_quantized_match_onnxruntime(tmp_path, signer):
    """torch's packed sequences (the legacy exporter: the LSTM's sequence_lens) quantized by
    quantize_dynamic, under a run-time batch (uint8 weights: exact on every CPU's
    onnxruntime)."""
    torch.manual_seed(3)
    float_model = export_dynamic(_Packed(), [torch.randn(3, 5, 7), torch.tensor([5, 2, 4])],
                                 tmp_path / "float.onnx", dynamo=False,
                                 names=["x", "lengths"], dims=[{0: "batch"}, {0: "batch"}],
                                 outputs=("y", "h"))
    path = tmp_path / "dynamic.onnx"
    quantization.quantize_dynamic(str(float_model), str(path), weight_type=_Q.QUInt8)
    assert "DynamicQuantizeLSTM" in {n.op_type for n in onnx.load(str(path)).graph.node}
    _, loaded = import_and_load(path, tmp_path / "q.pha", signer,
                                golden_ranges={"lengths": (1, 6)})
    rng = np.random.default_rng(4)
    feeds = [{"x": rng.standard_normal((len(lens), 5, 7)).astype(np.float32),
              "lengths": np.array(lens, np.int64)}
             for lens in ([5, 2, 4], [1, 1], [5, 5, 5, 3], [4])]
    _check(path, loaded, feeds, exact=True, backend=OnnxruntimeBackend())
    _check(path, loaded, feeds)


def test_a_run_time_length_fixed_with_dim_imports(tmp_path, signer):
    """``--dim`` fixes a run-time length: the steps then unroll (uint8 weights: exact on
    every CPU's onnxruntime)."""
    path = _lstm(tmp_path, steps="seq", weights=np.uint8, zero_point=128)
    _, loaded = import_and_load(path, tmp_path / "q.pha", signer, dims={"seq": STEPS})
    assert loaded.graph.inputs[0].shape == (STEPS, BATCH, INPUT)
    feeds = _hand_feeds(False, 1, np.random.default_rng(6))
    _check(path, loaded, feeds, exact=True, backend=OnnxruntimeBackend())


def test_the_hidden_state_is_quantized_at_every_step(tmp_path):
    """The premise of the tests above: onnxruntime's outputs differ from the same LSTM
    computed in float32 with the dequantized weights (measured: 4.4e-4 on outputs up to 0.5)
    by far more than float32 rounding, so matching them bit for bit means reproducing each
    step's quantization."""
    path = _lstm(tmp_path)
    model = onnx.load(str(path))
    init = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    w = init["W"][0].astype(np.float32) * init["W_scale"][0]
    r = init["R"][0].astype(np.float32) * init["R_scale"][0]
    x = np.random.default_rng(2).standard_normal((STEPS, BATCH, INPUT)).astype(np.float32)
    h = c = np.zeros((BATCH, HIDDEN), np.float32)
    b = init["B"][0, :4 * HIDDEN] + init["B"][0, 4 * HIDDEN:]

    def sigmoid(v):
        return 1 / (1 + np.exp(-v))

    for t in range(STEPS):
        g = x[t] @ w + h @ r + b
        i, o, f, cc = np.split(g, 4, axis=1)
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(cc)
        h = sigmoid(o) * np.tanh(c)
    want = onnxruntime_outputs(path, {"x": x}, optimized=False)["y_h"][0]
    assert np.max(np.abs(want - h)) > 1e-4


@pytest.mark.parametrize("options, error, message", [
    ({"attrs": {"clip": 3.0}}, UnsupportedModelError, "attribute clip=3.0 is not supported"),
    ({"attrs": {"activations": ["Tanh", "Tanh", "Tanh"]}}, UnsupportedModelError,
     "attribute activations=['Tanh', 'Tanh', 'Tanh'] is not supported"),
    ({"attrs": {"input_forget": 1}}, UnsupportedModelError, "attribute input_forget=1"),
    ({"zero_point": 3, "per_column": True}, ModelFileError,
     "W_zero_point [[3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3]]: onnxruntime refuses a "
     "zero point per column that varies, or is not 0 for int8 weights"),
])
def test_what_is_refused_names_the_node(options, error, message, tmp_path):
    assert_refused(_lstm(tmp_path, **options), error, "node 'lstm' (DynamicQuantizeLSTM)",
                   message)


def test_a_length_past_what_unrolls_is_one_op_per_direction(tmp_path, signer, monkeypatch):
    """Past QUANTIZED_UNROLLED_STEPS in the node, or past the model's MAX_TOTAL_STEPS, each
    direction is one ABI quantized_lstm (before, it was refused): onnxruntime's outputs bit
    for bit."""
    monkeypatch.setattr(quantized_lstm, "QUANTIZED_UNROLLED_STEPS", STEPS - 1)
    graph = import_onnx(_lstm(tmp_path)).graph
    assert [n.op for n in graph.nodes].count("quantized_lstm") == 1
    monkeypatch.setattr(quantized_lstm, "QUANTIZED_UNROLLED_STEPS", STEPS)
    monkeypatch.setattr(recurrent, "MAX_TOTAL_STEPS", 2 * STEPS - 1)
    path = _lstm(tmp_path, direction="bidirectional", weights=np.uint8, zero_point=128)
    _, loaded = import_and_load(path, tmp_path / "q.pha", signer)
    assert [n.op for n in loaded.graph.nodes].count("quantized_lstm") == 2
    feeds = _hand_feeds(False, 2, np.random.default_rng(12))
    _check(path, loaded, feeds, exact=True, backend=OnnxruntimeBackend())
    _check(path, loaded, feeds)


@pytest.mark.parametrize("steps, op", [(4, False), (5, True), (6, True)])
def test_past_four_steps_the_default_is_one_op_per_direction(steps, op, tmp_path, signer):
    """The import's own threshold: up to 4 steps unrolled, more one ABI quantized_lstm per
    direction (faster from some 8 steps on the onnxruntime backend, at every length on the
    numpy one); onnxruntime's outputs bit for bit either way."""
    assert quantized_lstm.QUANTIZED_UNROLLED_STEPS == 4
    path = _lstm(tmp_path, steps=steps, direction="bidirectional", weights=np.uint8,
                 zero_point=128)
    _, loaded = import_and_load(path, tmp_path / "q.pha", signer)
    ops = [n.op for n in loaded.graph.nodes]
    assert ops.count("quantized_lstm") == (2 if op else 0)
    rng = np.random.default_rng(16)
    feeds = [{"x": rng.standard_normal((steps, BATCH, INPUT)).astype(np.float32)}
             for _ in range(2)]
    _check(path, loaded, feeds, exact=True, backend=OnnxruntimeBackend())
    _check(path, loaded, feeds)


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_a_run_time_length_is_one_op_per_direction(direction, tmp_path, signer):
    """A sequence length known only when the call runs (before, refused without ``--dim``):
    onnxruntime's outputs bit for bit at 1, 6 and 40 steps (uint8 weights: exact on every
    CPU's onnxruntime)."""
    path = _lstm(tmp_path, steps="seq", weights=np.uint8, zero_point=100, direction=direction,
                 states=True)
    _, loaded = import_and_load(path, tmp_path / "q.pha", signer)
    assert loaded.graph.inputs[0].shape == ("seq", BATCH, INPUT)
    d = 2 if direction == "bidirectional" else 1
    rng = np.random.default_rng(13)
    feeds = [{"x": rng.standard_normal((steps, BATCH, INPUT)).astype(np.float32),
              **{n: rng.standard_normal((d, BATCH, HIDDEN)).astype(np.float32)
                 for n in ("h0", "c0")}} for steps in (1, 6, 40)]
    _check(path, loaded, feeds, exact=True, backend=OnnxruntimeBackend())
    _check(path, loaded, feeds)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_sequence_lens_beside_a_run_time_length(direction, tmp_path, signer):
    """sequence_lens and a length known only when the call runs (before, refused without
    ``--dim``): X is quantized over the steps before the longest length, counted when the call
    runs; onnxruntime's outputs bit for bit at 1, 6 and 40 steps, the longest length short of
    the whole sequence or not (uint8 weights: exact on every CPU's onnxruntime)."""
    path = _lstm(tmp_path, steps="seq", weights=np.uint8, zero_point=100, direction=direction,
                 states=True, lens="input", batch=3)
    _, loaded = import_and_load(path, tmp_path / "q.pha", signer)
    assert loaded.graph.inputs[0].shape == ("seq", 3, INPUT)
    d = 2 if direction == "bidirectional" else 1
    rng = np.random.default_rng(15)
    feeds = []
    for steps, lens in ((1, [1, 0, 1]), (6, [2, 5, 0]), (6, [6, 1, 3]), (40, [7, 39, 12]),
                        (40, [40, 40, 40])):
        x = rng.standard_normal((steps, 3, INPUT)).astype(np.float32)
        x[max(lens):] *= 50  # past the longest length: a range that would change every code
        feeds.append({"x": x, "lens": np.array(lens, np.int32),
                      **{n: rng.standard_normal((d, 3, HIDDEN)).astype(np.float32)
                         for n in ("h0", "c0")}})
    _check(path, loaded, feeds, exact=True, backend=OnnxruntimeBackend())
    _check(path, loaded, feeds)


def test_a_length_past_a_run_time_sequence_is_refused_when_the_call_runs(tmp_path, signer):
    """A sequence_lens entry outside [0, steps] beside a run-time length: the op refuses the
    call naming the node, on both backends (onnxruntime's kernel refuses it too)."""
    path = _lstm(tmp_path, steps="seq", weights=np.uint8, zero_point=100, lens="input",
                 batch=3)
    _, loaded = import_and_load(path, tmp_path / "q.pha", signer)
    x = np.ones((4, 3, INPUT), np.float32)
    for lens in ([5, 1, 1], [-1, 2, 2]):
        for backend in (NumpyBackend, OnnxruntimeBackend):
            with pytest.raises(IndexRangeError, match="lstm"):
                Executor(loaded.graph, backend()).run({"x": x, "lens": np.array(lens, np.int32)})


@pytest.mark.parametrize("options", [
    pytest.param({"direction": "bidirectional", "peepholes": True, "states": True},
                 id="bidirectional-peepholes-states"),
    pytest.param({"direction": "reverse", "lens": "input", "batch": 3, "y": False},
                 id="reverse-lengths-no-y"),
    pytest.param({"direction": "bidirectional", "lens": "input", "batch": 3, "states": True},
                 id="bidirectional-lengths"),
])
def test_the_op_gives_the_unrolled_steps_bits_on_both_backends(options, tmp_path,
                                                               monkeypatch):
    """The numpy backend's op computes each step with the numpy operations the unrolled glue
    ops run, in their order; the onnxruntime backend's runs the same onnxruntime kernels in a
    Scan: the two paths agree bit for bit on each backend."""
    path = _lstm(tmp_path, **options)
    monkeypatch.setattr(quantized_lstm, "QUANTIZED_UNROLLED_STEPS", 64)
    unrolled = import_onnx(path).graph
    monkeypatch.setattr(quantized_lstm, "QUANTIZED_UNROLLED_STEPS", 0)
    op = import_onnx(path).graph
    assert "quantized_lstm" in {n.op for n in op.nodes}
    assert "quantized_lstm" not in {n.op for n in unrolled.nodes}
    rng = np.random.default_rng(14)
    batch, d = options.get("batch", BATCH), 2 if options["direction"] == "bidirectional" else 1
    for lens in ([6, 0, 3], [2, 5, 6]) if "lens" in options else [None]:
        feed = {"x": rng.standard_normal((STEPS, batch, INPUT)).astype(np.float32)}
        if lens is not None:
            feed["lens"] = np.array(lens, np.int32)
        if options.get("states"):
            feed |= {n: rng.standard_normal((d, batch, HIDDEN)).astype(np.float32)
                     for n in ("h0", "c0")}
        for backend in (NumpyBackend, OnnxruntimeBackend):
            want = Executor(unrolled, backend()).run(dict(feed))
            got = Executor(op, backend()).run(dict(feed))
            for name, value in want.items():
                np.testing.assert_array_equal(got[name], value, err_msg=name)


def _replaced(path, name: str, value: np.ndarray) -> None:
    """The initializer ``name`` of the model at ``path`` replaced by ``value``."""
    model = onnx.load(str(path))
    for t in model.graph.initializer:
        if t.name == name:
            t.CopyFrom(numpy_helper.from_array(value, name))
    path.write_bytes(model.SerializeToString())


def test_a_bidirectional_zero_point_of_another_shape_than_its_scale_is_refused(tmp_path):
    """onnxruntime finds the reverse direction's zero point at its scale's offset, which is
    past the end of one zero point per direction beside a scale per column."""
    path = _lstm(tmp_path, direction="bidirectional", per_column=True)
    _replaced(path, "W_zp", np.zeros(2, np.int8))
    assert_refused(path, UnsupportedModelError, "node 'lstm' (DynamicQuantizeLSTM)",
                   "W_zero_point of shape [2] beside W_scale of shape [2, 16]: onnxruntime "
                   "reads the reverse direction's zero point where its scale is")


def test_a_varying_uint8_zero_point_is_refused_as_onnxruntime_refuses_it(tmp_path):
    path = _lstm(tmp_path, weights=np.uint8, zero_point=128, per_column=True)
    zp = np.full((1, 4 * HIDDEN), 128, np.uint8)
    zp[0, 5] = 127
    _replaced(path, "R_zp", zp)
    assert_refused(path, ModelFileError, "node 'lstm' (DynamicQuantizeLSTM)",
                   "R_zero_point [[128, 128, 128, 128, 128, 127")
