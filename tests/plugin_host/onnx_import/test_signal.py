"""Compress of a constant condition, the window functions, MelWeightMatrix, DFT (opsets 17
and 20) and STFT imported onto glue ops and compared with onnxruntime: hand-built models of
every attribute variant, and torch's dynamo exports of hann_window, fft.fft, fft.rfft and
stft. The windows and mel matrices are onnxruntime's bit for bit; a DFT within a tolerance
that grows with the signal length (:func:`_dft_tolerance`). Run-time sizes, conditions,
lengths and axes, attribute values onnxruntime refuses and matrices over the tensor cap are
refused naming the node."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import ModelFileError, UnsupportedModelError
from plugin_host.executor import Executor
from plugin_host.onnx_import import ReadLimits, import_onnx
from plugin_host.onnx_import.signal import mel_weight_matrix, window
from plugins.numpy_backend import NumpyBackend
from plugins.onnxruntime_backend import OnnxruntimeBackend

from .conftest import (Fn, assert_refused, check_against_onnxruntime,
                       check_against_onnxruntime_and_torch, check_on_both_backends, export,
                       export_dynamic, import_and_load, index_refused_on_both_backends, onnx,
                       onnxruntime_outputs, torch)

helper, TP = onnx.helper, onnx.TensorProto
RNG = np.random.default_rng(17)
EPS32 = float(np.finfo(np.float32).eps)


def _save(tmp_path, nodes, inputs, outputs, inits=(), *, opset: int = 20, name: str = "m"):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString())
    return path


def _vi(name, shape, dtype=TP.FLOAT):
    """A value info; ``shape`` an int is a rank, its dims left to the import."""
    if isinstance(shape, int):
        shape = [f"{name}{i}" for i in range(shape)]
    return helper.make_tensor_value_info(name, dtype, list(shape))


def _int(name, value, dtype=np.int64):
    return onnx.numpy_helper.from_array(np.asarray(value, dtype), name)


def _ops(loaded) -> list[str]:
    return [n.op for n in loaded.graph.nodes]


def _onnxruntime_refuses(model, feed) -> None:
    with pytest.raises(Exception) as info:
        onnxruntime_outputs(model, feed)
    assert type(info.value).__module__.startswith("onnxruntime"), info.value


# --- Compress ------------------------------------------------------------------------------------


def _compress_model(tmp_path, shape, condition, *, axis=None, const_input=False, x=None,
                    name="c"):
    """y = Compress(x, cond) or, with ``const_input``, x + Compress(data, cond) (data of
    ``shape``, x of shape ``x``)."""
    attrs = {} if axis is None else {"axis": axis}
    cond = onnx.numpy_helper.from_array(np.asarray(condition, bool), "cond")
    inits = [cond]
    inputs = [_vi("x", x or shape)]
    if const_input:
        inits.append(onnx.numpy_helper.from_array(
            np.arange(np.prod(shape), dtype=np.float32).reshape(shape), "data"))
        nodes = [helper.make_node("Compress", ["data", "cond"], ["k"], name="node", **attrs),
                 helper.make_node("Add", ["x", "k"], ["y"], name="add")]
    else:
        nodes = [helper.make_node("Compress", ["x", "cond"], ["y"], name="node", **attrs)]
    rank = len(x) if x else 1 if axis is None else len(shape)
    return _save(tmp_path, nodes, inputs, [_vi("y", rank)], inits, opset=18, name=name)


@pytest.mark.parametrize("axis, condition", [
    (0, [1, 0, 1]), (1, [0, 1, 1, 0]), (-1, [1, 1, 0, 0, 0]), (2, [1]),
    (1, [1, 0]),                       # shorter than the axis: the rest dropped
    (0, [0, 1, 1, 1, 0, 1]),           # longer: entries past the dim ignored, as onnxruntime
    (1, [1, 1, 1, 1]), (None, [1, 0, 0, 1, 1, 0, 1]), (None, [0] * 59 + [1])])
def test_compress_of_a_constant_condition_matches_onnxruntime(axis, condition, tmp_path,
                                                               signer):
    shape = (3, 4, 5)
    model = _compress_model(tmp_path, shape, condition, axis=axis)
    _, loaded = import_and_load(model, tmp_path / "c.pha", signer)
    assert "gather" in _ops(loaded) and ("reshape" in _ops(loaded)) == (axis is None)
    feeds = [{"x": RNG.standard_normal(shape).astype(np.float32)} for _ in range(2)]
    feeds[1]["x"].reshape(-1)[:3] = [np.nan, np.inf, -0.0]
    check_against_onnxruntime(model, loaded, feeds)


def test_compress_with_a_run_time_batch_matches_onnxruntime(tmp_path, signer):
    model = _compress_model(tmp_path, ("n", 6), [1, 0, 0, 1, 1], axis=1)
    _, loaded = import_and_load(model, tmp_path / "c.pha", signer)
    check_against_onnxruntime(model, loaded, [{"x": RNG.standard_normal((n, 6)).astype(
        np.float32)} for n in (1, 4)])


@pytest.mark.parametrize("axis, shape, condition, out", [(None, (2, 3), [0, 1, 0, 0, 1], (2,)),
                                                      (1, (2, 3), [1, 0, 1], (2, 2))])
def test_compress_of_a_constant_input_is_folded(axis, shape, condition, out, tmp_path, signer):
    model = _compress_model(tmp_path, shape, condition, axis=axis, const_input=True, x=out)
    _, loaded = import_and_load(model, tmp_path / "c.pha", signer)
    assert _ops(loaded) == ["add"]
    check_against_onnxruntime(model, loaded, [{"x": RNG.standard_normal(out).astype(
        np.float32)}])


def test_compress_refusals_name_the_node(tmp_path):
    runtime = _save(tmp_path, [helper.make_node("Compress", ["x", "c"], ["y"], name="node",
                                                axis=0)],
                    [_vi("x", (3, 4)), _vi("c", (3,), TP.BOOL)], [_vi("y", 2)], opset=18)
    assert_refused(runtime, UnsupportedModelError, "node 'node' (Compress)",
                   "condition 'c' is computed at run time: the output's shape would depend on "
                   "its values")
    assert_refused(_compress_model(tmp_path, (3, 4), [0, 0, 0], axis=0),
                   UnsupportedModelError, "node 'node' (Compress)",
                   "condition 'cond' keeps nothing: an empty output is not supported")
    assert_refused(_compress_model(tmp_path, ("n", 4), [1, 0], axis=0), UnsupportedModelError,
                   "node 'node' (Compress)", "axis 0 of input shape ['n', 4] is a run-time dim")
    assert_refused(_compress_model(tmp_path, ("n", 4), [1, 0]), UnsupportedModelError,
                   "node 'node' (Compress)", "Compress without an axis flattens the input, "
                   "which needs every dim static")
    assert_refused(_compress_model(tmp_path, (3, 4), [1, 0], axis=2), ModelFileError,
                   "node 'node' (Compress)", "axis 2 is out of range for rank 2")


# --- window functions ----------------------------------------------------------------------------

WINDOWS = ["HannWindow", "HammingWindow", "BlackmanWindow"]


def _window_model(tmp_path, op, size, *, size_input=False, dtype=TP.FLOAT, n=None, **attrs):
    """y = x * op(size): x of the window's length unless ``n`` (a window alone has no graph
    input)."""
    n = n or (size if size > 0 else 1)
    inits = [] if size_input else [_int("size", size, np.int32 if size == 7 else np.int64)]
    inputs = [_vi("x", (n,), dtype)] + ([_vi("size", (), TP.INT64)] if size_input else [])
    nodes = [helper.make_node(op, ["size"], ["w"], name="node", **attrs),
             helper.make_node("Mul", ["x", "w"], ["y"], name="mul")]
    return _save(tmp_path, nodes, inputs, [_vi("y", 1, dtype)], inits, opset=17)


@pytest.mark.parametrize("size", [1, 2, 5, 7, 16, 63, 400])
@pytest.mark.parametrize("periodic", [None, 0, 1])
@pytest.mark.parametrize("op", WINDOWS)
def test_windows_are_onnxruntimes_bit_for_bit(op, periodic, size, tmp_path, signer):
    attrs = {} if periodic is None else {"periodic": periodic}
    model = _window_model(tmp_path, op, size, **attrs)
    _, loaded = import_and_load(model, tmp_path / "w.pha", signer)
    assert _ops(loaded) == ["mul"]
    x = np.ones(size, np.float32)
    [got] = check_against_onnxruntime(model, loaded, [{"x": x}])
    np.testing.assert_array_equal(got[0]["y"], got[1]["y"])  # nan (size 1, symmetric) too


@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("op", WINDOWS)
def test_windows_of_output_datatype_float64_and_int32_are_onnxruntimes(op, periodic, tmp_path):
    """The folded value itself (the numpy backend has no float64): onnxruntime's window of
    the same node, bit for bit."""
    for code, dtype in ((TP.DOUBLE, np.float64), (TP.INT32, np.int32)):
        node = helper.make_node(op, ["size"], ["y"], output_datatype=code, periodic=periodic)
        model = _save(tmp_path, [node], [_vi("size", (), TP.INT64)], [_vi("y", 1, code)],
                      opset=17)
        for n in (1, 2, 9, 100):
            if n == 1 and not periodic and code == TP.INT32:
                continue  # nan: refused (test_window_refusals_name_the_node)
            want = onnxruntime_outputs(model, {"size": np.array(n, np.int64)})["y"]
            got = window(op, np.array(n, np.int64), {"output_datatype": code,
                                                     "periodic": periodic}, 1 << 20)
            assert got.dtype == want.dtype == dtype
            np.testing.assert_array_equal(got, want)


class _Hann(torch.nn.Module):
    def __init__(self, periodic: bool | None) -> None:
        super().__init__()
        self.periodic = periodic

    def forward(self, x):
        if self.periodic is None:
            return x * torch.hann_window(12)
        return x * torch.hann_window(12, periodic=self.periodic)


@pytest.mark.parametrize("periodic", [None, True, False])
def test_torch_hann_window_from_the_dynamo_exporter_matches_onnxruntime(periodic, tmp_path,
                                                                       signer):
    """Unoptimized, the dynamo exporter writes torch.hann_window(n) as HannWindow, bit for bit
    onnxruntime's here; with ``periodic`` given, as Range and Cos (glue ops, within the
    tolerance). hamming_window and blackman_window do not export under dynamo."""
    model = export(_Hann(periodic), (torch.randn(3, 12),), tmp_path / "w.onnx", dynamo=True,
                   fold=False, optimize=False, input_names=["x"])
    written = "HannWindow" in {n.op_type for n in onnx.load(model).graph.node}
    assert written == (periodic is None)
    _, loaded = import_and_load(model, tmp_path / "w.pha", signer)
    [(got, want)] = check_against_onnxruntime(model, loaded,
                                              [{"x": np.ones((3, 12), np.float32)}])
    [name] = want
    if written:
        np.testing.assert_array_equal(got[name], want[name])
    window_ = torch.hann_window(12, periodic=periodic is not False).numpy()
    np.testing.assert_allclose(got[name][0], window_, atol=1e-6)


@pytest.mark.parametrize("op", WINDOWS)
def test_window_refusals_name_the_node(op, tmp_path):
    assert_refused(_window_model(tmp_path, op, 4, size_input=True), UnsupportedModelError,
                   f"node 'node' ({op})", "is supported only on constant inputs (folded at "
                   "import), but ['size'] are computed at run time")
    assert_refused(_window_model(tmp_path, op, 0), ModelFileError, f"node 'node' ({op})",
                   "size 0: a window needs a size >= 1")
    assert_refused(_window_model(tmp_path, op, 1, dtype=TP.INT64, output_datatype=TP.INT64,
                                 periodic=0), ModelFileError, f"node 'node' ({op})",
                   "a symmetric window of size 1 is nan (0 / 0), which int64 cannot hold")
    with pytest.raises(ModelFileError) as info:
        import_onnx(_window_model(tmp_path, op, 64, n=1),
                    limits=ReadLimits(max_tensor_elements=50))
    assert f"node 'node' ({op})" in str(info.value) and "above the cap of 50" in str(info.value)


# --- MelWeightMatrix -----------------------------------------------------------------------------


_MEL_INPUTS = (("bins", TP.INT64), ("length", TP.INT64), ("rate", TP.INT64),
               ("low", TP.FLOAT), ("high", TP.FLOAT))


def _mel_feed(bins, length, rate, low, high) -> dict:
    return {"bins": np.array(bins, np.int64), "length": np.array(length, np.int64),
            "rate": np.array(rate, np.int64), "low": np.array(low, np.float32),
            "high": np.array(high, np.float32)}


def test_mel_weight_matrices_are_onnxruntimes_bit_for_bit(tmp_path):
    """The folded matrix against onnxruntime's MelWeightMatrix over 400 drawn settings (edges
    at and past Nyquist, equal and inverted among them): the same float32 bits, or a
    ModelFileError where onnxruntime refuses the call."""
    node = helper.make_node("MelWeightMatrix", [n for n, _ in _MEL_INPUTS], ["y"])
    model = _save(tmp_path, [node], [_vi(n, (), t) for n, t in _MEL_INPUTS], [_vi("y", 2)],
                  opset=17)
    rng, refused = np.random.default_rng(5), 0
    for _ in range(400):
        rate = int(rng.choice([8000, 8192, 16000, 22050, 44100]))
        low = float(rng.choice([0.0, 20.0, 125.5, rng.uniform(0, rate / 2)]))
        high = float(rng.choice([rng.uniform(low, rate / 2), rate / 2 + rng.uniform(-40, 40),
                                 low, rng.uniform(0, rate / 2)]))
        feed = _mel_feed(int(rng.integers(1, 64)), int(rng.choice([8, 64, 400, 512, 2048])),
                         rate, low, high)
        try:
            want = onnxruntime_outputs(model, feed)["y"]
        except Exception as exc:  # onnxruntime's refusal: the fold refuses it too
            assert type(exc).__module__.startswith("onnxruntime"), exc
            with pytest.raises(ModelFileError, match="upper_edge_hertz .* reaches spectrogram "
                                                     "bin"):
                mel_weight_matrix(list(feed.values()), {}, 1 << 24)
            refused += 1
            continue
        got = mel_weight_matrix(list(feed.values()), {}, 1 << 24)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    assert 0 < refused < 200


def test_a_mel_spectrogram_matches_onnxruntime(tmp_path, signer):
    """tf2onnx's mel spectrogram: a spectrogram (frames, bins) times the matrix of constant
    settings, folded at import to a linear's weight."""
    node = helper.make_node("MelWeightMatrix", [n for n, _ in _MEL_INPUTS], ["m"], name="node")
    mul = helper.make_node("MatMul", ["x", "m"], ["y"], name="mm")
    inits = [onnx.numpy_helper.from_array(v, n)
             for n, v in _mel_feed(20, 512, 16000, 80.0, 7600.0).items()]
    model = _save(tmp_path, [node, mul], [_vi("x", ("t", 257))], [_vi("y", 2)], inits,
                  opset=17)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer, golden_dims={"t": [3, 7]})
    assert _ops(loaded) == ["linear"]
    check_on_both_backends(model, loaded, [
        {"x": np.abs(RNG.standard_normal((t, 257))).astype(np.float32)} for t in (1, 5)])


def test_mel_weight_matrix_refusals_name_the_node(tmp_path):
    node = helper.make_node("MelWeightMatrix", [n for n, _ in _MEL_INPUTS], ["y"], name="node")
    feed = _mel_feed(8, 16, 8000, 0.0, 4000.0)
    runtime = _save(tmp_path, [node], [_vi("bins", (), TP.INT64)], [_vi("y", 2)], [
        onnx.numpy_helper.from_array(v, n) for n, v in feed.items() if n != "bins"], opset=17)
    assert_refused(runtime, UnsupportedModelError, "node 'node' (MelWeightMatrix)",
                   "is supported only on constant inputs (folded at import), but ['bins'] are "
                   "computed at run time")
    for change, message in (({"bins": np.array(0, np.int64)}, "num_mel_bins 0"),
                            ({"high": np.array(4300.0, np.float32)},
                             "upper_edge_hertz 4300.0 reaches spectrogram bin 9, past the 9 of "
                             "a DFT of length 16 at sample_rate 8000")):
        inits = [onnx.numpy_helper.from_array(v, n) for n, v in {**feed, **change}.items()]
        model = _save(tmp_path, [node, helper.make_node("Identity", ["y"], ["z"])],
                      [], [_vi("z", 2)], inits, opset=17, name="c")
        assert_refused(model, ModelFileError, "node 'node' (MelWeightMatrix)", message)


# --- DFT -----------------------------------------------------------------------------------------


def _dft_tolerance(length: int, x: np.ndarray) -> tuple[float, float]:
    """(rtol, atol) for a float32 DFT of ``length`` against onnxruntime's: each output is a sum
    of ``length`` products, so its error grows with the length times the largest input;
    onnxruntime's own transform of a length that is not a power of two drifts from the exact
    one by up to about 10 * length * eps * max|x| at the lengths tested here (70 at length
    1000), the matmul by far less. atol = 64 * length * eps * max|x| leaves room for both."""
    finite = np.abs(x[np.isfinite(x)])
    return 1e-4, 64 * length * EPS32 * float(finite.max() if finite.size else 1.0)


def _dft_model(tmp_path, shape, *, opset=20, dft_length=None, axis=None, runtime=(),
               name="d", **attrs):
    """y = DFT(x, dft_length, axis): the optional inputs initializers unless in ``runtime``."""
    ins, inits, extra = ["x", "", ""], [], []
    for i, (key, value) in enumerate((("dft_length", dft_length), ("axis", axis)), start=1):
        if value is None or (key == "axis" and opset < 20):
            continue
        ins[i] = key
        if key in runtime:
            extra.append(_vi(key, (), TP.INT64))
        else:
            inits.append(_int(key, value))
    if opset < 20 and axis is not None:
        attrs["axis"] = axis
    while ins[-1] == "":
        ins.pop()
    node = helper.make_node("DFT", ins, ["y"], name="node", **attrs)
    return _save(tmp_path, [node], [_vi("x", shape)] + extra, [_vi("y", len(shape))], inits,
                 opset=opset, name=name)


def _signals(shape):
    """A random signal, one far from zero on average and one of wide range."""
    return [RNG.standard_normal(shape).astype(np.float32),
            (RNG.standard_normal(shape) + 20).astype(np.float32),
            (RNG.standard_normal(shape) * np.exp(RNG.uniform(-8, 8, shape))).astype(np.float32)]


def _check_dft(model, shape, length, tmp_path, signer, *, feeds=None):
    feeds = feeds or _signals(shape)
    tol = _dft_tolerance(length, np.concatenate([f.reshape(-1) for f in feeds]))
    _, loaded = import_and_load(model, tmp_path / "d.pha", signer, tolerances=tol)
    assert _ops(loaded).count("matmul") == 2
    check_against_onnxruntime(model, loaded, [{"x": f} for f in feeds])
    return loaded


def _check_run_time_dft(model, feeds, longest, golden, tmp_path, signer):
    """Build ``model`` (a signal length 't' known when the call runs, drawn at ``golden``
    for the golden cases) within the tolerance of a transform of ``longest`` samples and
    check ``feeds`` against onnxruntime on both backends: the loaded artifact and the
    tolerance."""
    tol = _dft_tolerance(longest, np.concatenate([f.reshape(-1) for f in feeds]))
    _, loaded = import_and_load(model, tmp_path / "d.pha", signer, tolerances=tol,
                                golden_dims={"t": golden})
    check_on_both_backends(model, loaded, [{"x": f} for f in feeds])
    return loaded, tol


@pytest.mark.parametrize("inverse", [0, 1])
@pytest.mark.parametrize("c", [1, 2])
@pytest.mark.parametrize("n, dft_length", [(8, None), (7, None), (12, 5), (5, 12), (1, None),
                                           (16, 31), (64, None)])
def test_dft_matches_onnxruntime(n, dft_length, c, inverse, tmp_path, signer):
    shape = (2, n, c)
    model = _dft_model(tmp_path, shape, dft_length=dft_length, inverse=inverse)
    _check_dft(model, shape, dft_length or n, tmp_path, signer)


@pytest.mark.parametrize("n, dft_length", [(8, None), (9, None), (16, 7), (6, 11)])
def test_onesided_real_dft_matches_onnxruntime(n, dft_length, tmp_path, signer):
    shape = (3, n, 1)
    model = _dft_model(tmp_path, shape, dft_length=dft_length, onesided=1)
    _check_dft(model, shape, dft_length or n, tmp_path, signer)


@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize("axis", [None, 0, 1, 2, -2, -3, -4])
def test_dft_along_any_axis_matches_onnxruntime(axis, opset, tmp_path, signer):
    shape = (2, 5, 3, 2)
    model = _dft_model(tmp_path, shape, opset=opset, axis=axis, dft_length=4)
    loaded = _check_dft(model, shape, 5, tmp_path, signer)
    default = 1 if opset < 20 else -2
    moved = (default if axis is None else axis) % 4 != 2
    assert ("transpose" in _ops(loaded)) == moved


def test_dft_with_a_run_time_batch_matches_onnxruntime(tmp_path, signer):
    model = _dft_model(tmp_path, ("n", 10, 1), onesided=1)
    tol = _dft_tolerance(10, np.full(1, 4.0))
    _, loaded = import_and_load(model, tmp_path / "d.pha", signer, tolerances=tol)
    check_against_onnxruntime(model, loaded, [{"x": np.clip(RNG.standard_normal((n, 10, 1)),
                                                            -4, 4).astype(np.float32)}
                                              for n in (1, 3)])


def test_dft_of_inf_and_nan_matches_onnxruntime(tmp_path, signer):
    """A nan spreads to every bin, as there."""
    shape = (3, 8, 1)
    model = _dft_model(tmp_path, shape)
    x = RNG.standard_normal(shape).astype(np.float32)
    x[1, 3, 0] = np.nan
    _check_dft(model, shape, 8, tmp_path, signer, feeds=[x])


class _Rfft(torch.nn.Module):
    def forward(self, x):
        return torch.view_as_real(torch.fft.rfft(x, dim=-1))


class _Fft(torch.nn.Module):
    def forward(self, x):
        return torch.view_as_real(torch.fft.fft(torch.view_as_complex(x), dim=1))


@pytest.mark.parametrize("module, shape", [(_Rfft, (3, 20)), (_Fft, (2, 6, 2))])
@pytest.mark.parametrize("optimize", [True, False])
def test_torch_fft_from_the_dynamo_exporter_matches_onnxruntime_and_torch(module, shape,
                                                                          optimize, tmp_path,
                                                                          signer):
    x = torch.randn(*shape)
    model = export(module(), (x,), tmp_path / "f.onnx", dynamo=True, fold=optimize,
                   optimize=optimize, input_names=["x"])
    assert "DFT" in {n.op_type for n in onnx.load(model).graph.node}
    feeds = [x.numpy()]
    tol = _dft_tolerance(shape[1], feeds[0])
    _, loaded = import_and_load(model, tmp_path / "f.pha", signer, tolerances=tol)
    [(got, _)] = check_against_onnxruntime(model, loaded, [{"x": f} for f in feeds])
    np.testing.assert_allclose(next(iter(got.values())), module()(x).numpy(), rtol=tol[0],
                               atol=tol[1])


@pytest.mark.parametrize("n, dft_length", [(6, None), (6, 10), (6, 11), (5, 8), (2, 3),
                                           (33, 64)])
def test_inverse_of_a_half_spectrum_matches_onnxruntime_and_numpy(n, dft_length, tmp_path,
                                                                  signer):
    """inverse=1 with onesided=1 on a complex half spectrum (torch.fft.irfft): the real signal
    of dft_length samples (absent: 2 * (n - 1)), against onnxruntime on both backends and
    numpy's irfft."""
    shape = (3, n, 2)
    model = _dft_model(tmp_path, shape, dft_length=dft_length, inverse=1, onesided=1)
    feeds = _signals(shape)
    length = dft_length or 2 * (n - 1)
    tol = _dft_tolerance(length, np.concatenate([f.reshape(-1) for f in feeds]))
    _, loaded = import_and_load(model, tmp_path / "d.pha", signer, tolerances=tol)
    assert loaded.graph.outputs[0].shape == (3, length, 1)
    check_on_both_backends(model, loaded, [{"x": f} for f in feeds])
    executor = Executor(loaded.graph, NumpyBackend())
    for f in feeds:
        want = np.fft.irfft(f[..., 0].astype(np.float64) + 1j * f[..., 1], n=length, axis=1)
        np.testing.assert_allclose(executor.run({"x": f})["y"][..., 0], want, rtol=tol[0],
                                   atol=tol[1])


def test_half_spectrum_of_another_length_is_refused(tmp_path):
    """A half spectrum whose bins are not dft_length // 2 + 1: onnxruntime's answer is not
    numpy's inverse there, so the import refuses it naming both."""
    model = _dft_model(tmp_path, (1, 6, 2), dft_length=7, inverse=1, onesided=1)
    x = RNG.standard_normal((1, 6, 2)).astype(np.float32)
    [got] = onnxruntime_outputs(model, {"x": x}).values()
    want = np.fft.irfft(x[..., 0] + 1j * x[..., 1], n=7, axis=1)
    assert np.abs(got[..., 0] - want).max() > 0.01
    assert_refused(model, UnsupportedModelError, "node 'node' (DFT)",
                   "dft_length 7 of a half spectrum of 6 bins: a transform of length L takes "
                   "L // 2 + 1 bins")
    assert_refused(_dft_model(tmp_path, (1, 1, 2), inverse=1, onesided=1),
                   UnsupportedModelError, "node 'node' (DFT)",
                   "a half spectrum of 1 bin: the inverse's default length 2 * (1 - 1) is 0")


@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize("c, attrs", [(1, {}), (2, {}), (1, dict(inverse=1)),
                                      (2, dict(inverse=1)), (1, dict(onesided=1))],
                         ids=["real", "complex", "real-inverse", "complex-inverse", "onesided"])
def test_dft_of_a_run_time_length_matches_onnxruntime(c, attrs, opset, tmp_path, signer):
    """The signal length a run-time dim, the matrices computed when the call runs, at lengths
    1 to 33 (0 too where onnxruntime takes it: an empty transform)."""
    shape = ("b", "t", c)
    model = _dft_model(tmp_path, shape, opset=opset, axis=1, **attrs)
    feeds = [RNG.standard_normal((b, t, c)).astype(np.float32)
             for b, t in ((2, 1), (1, 2), (3, 7), (2, 8), (1, 33))]
    loaded, _ = _check_run_time_dft(model, feeds, 33, [5, 16], tmp_path, signer)
    assert "cos" in _ops(loaded) and _ops(loaded).count("matmul") == 2
    empty = {"x": np.zeros((2, 0, c), np.float32)}
    if attrs.get("onesided"):  # one bin of nothing: onnxruntime refuses the call
        _onnxruntime_refuses(model, empty)
        index_refused_on_both_backends(loaded.graph, empty, r"node 'node/.* outside \[0, 0\)")
    else:
        check_on_both_backends(model, loaded, [empty])


@pytest.mark.parametrize("c, attrs", [(1, {}), (2, {}), (2, dict(inverse=1)),
                                      (1, dict(onesided=1))],
                         ids=["real", "complex", "complex-inverse", "onesided"])
def test_dft_of_a_fixed_length_along_a_run_time_signal_matches_onnxruntime(c, attrs, tmp_path,
                                                                           signer):
    """dft_length 12 along a run-time signal length: the signal cut to its first 12 samples
    (a slice), a shorter one zero-padded (the matrices' columns computed when the call runs,
    as many as it has): from 1 sample to longer than the transform. An empty signal, which
    onnxruntime refuses, is refused on both backends."""
    model = _dft_model(tmp_path, ("b", "t", c), axis=1, dft_length=12, **attrs)
    feeds = [RNG.standard_normal((b, t, c)).astype(np.float32)
             for b, t in ((2, 1), (1, 5), (3, 12), (2, 13), (1, 40))]
    loaded, _ = _check_run_time_dft(model, feeds, 40, [7, 20], tmp_path, signer)
    assert "slice" in _ops(loaded) and _ops(loaded).count("matmul") == 2
    assert loaded.graph.outputs[0].shape == ("b", 7 if attrs.get("onesided") else 12, 2)
    empty = {"x": np.zeros((2, 0, c), np.float32)}
    _onnxruntime_refuses(model, empty)
    index_refused_on_both_backends(loaded.graph, empty, r"node 'node/.* outside \[0, 0\)")


def test_torch_rfft_of_a_fixed_length_along_a_run_time_signal(tmp_path, signer):
    """torch.fft.rfft(x, n=16) over a run-time length (the dynamo exporter slices the signal
    to 16 samples, then a DFT of length 16): against onnxruntime on both backends and torch,
    shorter and longer signals."""
    fn = lambda x: torch.view_as_real(torch.fft.rfft(x, n=16, dim=-1))  # noqa: E731
    model = export_dynamic(Fn(fn), [torch.randn(2, 20)], tmp_path / "f.onnx", dynamo=True,
                           names=["x"], dims=[{1: "t"}], bounds={"t": (2, 4096)})
    feeds = [RNG.standard_normal((2, t)).astype(np.float32) for t in (2, 9, 16, 17, 50)]
    tol = _dft_tolerance(16, np.concatenate([f.reshape(-1) for f in feeds]))
    _, loaded = import_and_load(model, tmp_path / "f.pha", signer, tolerances=tol,
                                golden_dims={"t": [20, 7]})
    check_against_onnxruntime_and_torch(model, loaded, [{"x": f} for f in feeds], Fn(fn), tol)


def test_inverse_of_a_run_time_half_spectrum_matches_onnxruntime(tmp_path, signer):
    """A half spectrum of a run-time count of bins t and its default length 2 * (t - 1):
    against onnxruntime on both backends and numpy's irfft; one bin is an empty signal on
    every side, no bins refused by onnxruntime and by both backends."""
    model = _dft_model(tmp_path, (2, "t", 2), inverse=1, onesided=1)
    feeds = [RNG.standard_normal((2, t, 2)).astype(np.float32) for t in (1, 2, 3, 6, 17)]
    loaded, tol = _check_run_time_dft(model, feeds, 32, [4, 9], tmp_path, signer)
    executor = Executor(loaded.graph, NumpyBackend())
    for f in feeds[1:]:
        want = np.fft.irfft(f[..., 0].astype(np.float64) + 1j * f[..., 1], axis=1)
        np.testing.assert_allclose(executor.run({"x": f})["y"][..., 0], want, rtol=tol[0],
                                   atol=tol[1])
    empty = {"x": np.zeros((2, 0, 2), np.float32)}
    _onnxruntime_refuses(model, empty)
    index_refused_on_both_backends(loaded.graph, empty, r"node 'node/.* outside \[0, 0\)")


def test_dft_of_a_run_time_length_along_the_first_axis(tmp_path, signer):
    """A run-time signal axis that is not second to last: moved there and back."""
    model = _dft_model(tmp_path, ("t", 3, 2), axis=0)
    feeds = [RNG.standard_normal((t, 3, 2)).astype(np.float32) for t in (1, 6, 13)]
    loaded, _ = _check_run_time_dft(model, feeds, 13, [4, 9], tmp_path, signer)
    assert "transpose" in _ops(loaded)


SPECTRA = {
    "rfft": lambda x: torch.view_as_real(torch.fft.rfft(x, dim=-1)),
    "rfft-ortho-magnitude": lambda x: torch.fft.rfft(x, dim=-1, norm="ortho").abs(),
    "fft": lambda x: torch.view_as_real(torch.fft.fft(x, dim=-1)),
    "irfft": lambda x: torch.fft.irfft(torch.fft.rfft(x, dim=-1), dim=-1),
    "power": lambda x: torch.view_as_real(torch.fft.rfft(x, dim=1)).pow(2).sum(-1),
}


@pytest.mark.parametrize("name", SPECTRA)
def test_torch_fft_of_a_run_time_length_from_the_dynamo_exporter(name, tmp_path, signer):
    """torch.fft.rfft, fft and irfft over a run-time batch and length (the dynamo exporter
    passes the length, and irfft's 2 * (n // 2), as dft_length from the input's Shape):
    against onnxruntime on both backends and torch, odd and even lengths."""
    fn = SPECTRA[name]
    model = export_dynamic(Fn(fn), [torch.randn(2, 10)], tmp_path / "f.onnx", dynamo=True,
                           names=["x"], dims=[{0: "batch", 1: "t"}], bounds={"t": (2, 4096)})
    assert "DFT" in {n.op_type for n in onnx.load(model).graph.node}
    feeds = [RNG.standard_normal((b, t)).astype(np.float32) for b, t in ((1, 2), (3, 7),
                                                                         (2, 16), (1, 45))]
    tol = _dft_tolerance(45, np.concatenate([f.reshape(-1) for f in feeds]))
    if name == "power":  # squares: the tolerance of a product of two sums
        tol = (tol[0], tol[1] * 45 * 4)
    _, loaded = import_and_load(model, tmp_path / "f.pha", signer, tolerances=tol,
                                golden_dims={"t": [10, 21]})
    check_against_onnxruntime_and_torch(model, loaded, [{"x": f} for f in feeds], Fn(fn), tol)
    if name == "irfft":  # one sample: a half spectrum of 1 bin, a transform of length 0
        one = np.ones((2, 1), np.float32)
        with pytest.raises(RuntimeError):
            fn(torch.from_numpy(one))
        _onnxruntime_refuses(model, {"x": one})
        index_refused_on_both_backends(loaded.graph, {"x": one}, r"outside \[0, 0\)")


def test_dft_refusals_name_the_node(tmp_path):
    where = "node 'node' (DFT)"
    x = np.ones((2, 8, 1), np.float32)
    model = _dft_model(tmp_path, (2, 8, 1), dft_length=4, runtime=("dft_length",))
    assert_refused(model, UnsupportedModelError, where,
                   "dft_length 'dft_length' must be a constant (known at import)")
    model = _dft_model(tmp_path, (2, 8, 1), axis=1, runtime=("axis",))
    assert_refused(model, UnsupportedModelError, where, "axis 'axis' must be a constant")
    model = _dft_model(tmp_path, (2, 8, 2), onesided=1)
    _onnxruntime_refuses(model, {"x": np.ones((2, 8, 2), np.float32)})
    assert_refused(model, UnsupportedModelError, where, "onesided=1 with complex input: only "
                   "a real forward transform or the inverse of a complex half spectrum is "
                   "one-sided")
    model = _dft_model(tmp_path, (2, 8, 1), onesided=1, inverse=1)
    _onnxruntime_refuses(model, {"x": x})
    assert_refused(model, UnsupportedModelError, where, "onesided=1 with inverse=1: only")
    model = _dft_model(tmp_path, (2, 8, 1), dft_length=0)
    _onnxruntime_refuses(model, {"x": x})
    assert_refused(model, UnsupportedModelError, where, "dft_length 0 must be >= 1")
    model = _dft_model(tmp_path, (2, 8, 1), axis=-1)
    _onnxruntime_refuses(model, {"x": x})
    assert_refused(model, ModelFileError, where, "axis 2 is the last dim of input shape "
                   "[2, 8, 1], which holds the real and imaginary parts")
    other = _save(tmp_path, [helper.make_node("Shape", ["z"], ["n"]),
                             helper.make_node("DFT", ["x", "n"], ["y"], name="node")],
                  [_vi("x", (2, "t", 1)), _vi("z", ("s",))], [_vi("y", 3)])
    assert_refused(other, UnsupportedModelError, where, "dft_length 's' along a run-time signal "
                   "length 't': supported as the signal's own length or a fixed one only")
    assert_refused(_dft_model(tmp_path, (2, 8, 3)), UnsupportedModelError, where,
                   "input shape [2, 8, 3]: the last dim must be 1 (real) or 2 (complex)")
    ints = _dft_model(tmp_path, (2, 8, 1))
    model = onnx.load(ints)
    model.graph.input[0].type.tensor_type.elem_type = TP.INT32
    onnx.save(model, ints)
    assert_refused(ints, UnsupportedModelError, where,
                   "input 'x' of dtype int32: needs float32 or float64")
    assert_refused(_dft_model(tmp_path, (2, 8, 1), opset=17, onesided=2), UnsupportedModelError,
                   where, "attribute onesided=2 must be 0 or 1")
    with pytest.raises(ModelFileError) as info:
        import_onnx(_dft_model(tmp_path, (1, 8, 1), dft_length=64),
                    limits=ReadLimits(max_tensor_elements=1000))
    text = str(info.value)
    assert where in text and "its DFT cos and sin matrices of shape (2, 64, 8) would have 1024 " \
        "elements, above the cap of 1000" in text, text


# --- STFT ----------------------------------------------------------------------------------------


def _stft_model(tmp_path, shape, *, step=4, window=None, frame_length=None, runtime=(),
                **attrs):
    ins, inits, extra = ["x", "step", "", ""], [_int("step", step)], []
    if window is not None:
        ins[2] = "window"
        if "window" in runtime:
            extra.append(_vi("window", (window,)))
        else:
            inits.append(onnx.numpy_helper.from_array(np.hanning(window + 1)[:-1].astype(
                np.float32), "window"))
    if frame_length is not None:
        ins[3] = "frame_length"
        inits.append(_int("frame_length", frame_length))
    while ins[-1] == "":
        ins.pop()
    node = helper.make_node("STFT", ins, ["y"], name="node", **attrs)
    return _save(tmp_path, [node], [_vi("x", shape)] + extra, [_vi("y", 4)], inits,
                 opset=17, name="s")


@pytest.mark.parametrize("kwargs", [dict(window=16), dict(frame_length=10, step=3),
                                    dict(window=8, frame_length=8, onesided=0),
                                    dict(window=9, onesided=1, step=5)])
@pytest.mark.parametrize("c", [1, 2])
def test_stft_matches_onnxruntime(kwargs, c, tmp_path, signer):
    if c == 2 and kwargs.get("onesided", 1):
        kwargs = {**kwargs, "onesided": 0}
    shape = (2, 50, c)
    model = _stft_model(tmp_path, shape, **kwargs)
    feeds = _signals(shape)
    length = kwargs.get("window") or kwargs["frame_length"]
    tol = _dft_tolerance(length, np.concatenate([f.reshape(-1) for f in feeds]))
    _, loaded = import_and_load(model, tmp_path / "s.pha", signer, tolerances=tol)
    assert _ops(loaded)[0] == "gather"
    check_against_onnxruntime(model, loaded, [{"x": f} for f in feeds])


def test_stft_of_a_signal_without_its_last_axis_is_real(tmp_path, signer):
    """[batch, length], as onnx-asr's preprocessors feed it and onnxruntime takes it: a real
    signal."""
    model = _stft_model(tmp_path, (2, 50), window=16)
    feeds = [f[..., 0] for f in _signals((2, 50, 1))]
    tol = _dft_tolerance(16, np.concatenate([f.reshape(-1) for f in feeds]))
    _, loaded = import_and_load(model, tmp_path / "s.pha", signer, tolerances=tol)
    check_against_onnxruntime(model, loaded, [{"x": f} for f in feeds])


def test_stft_with_a_run_time_window_matches_onnxruntime(tmp_path, signer):
    model = _stft_model(tmp_path, (1, 40, 1), window=12, runtime=("window",))
    x = RNG.standard_normal((1, 40, 1)).astype(np.float32)
    w = RNG.uniform(0, 1, 12).astype(np.float32)
    _, loaded = import_and_load(model, tmp_path / "s.pha", signer,
                                tolerances=_dft_tolerance(12, x))
    check_against_onnxruntime(model, loaded, [{"x": x, "window": w}])


@pytest.mark.parametrize("shape, kwargs", [
    ((1, "t", 1), dict(window=16)), (("b", "t", 2), dict(window=16, onesided=0)),
    (("b", "t"), dict(frame_length=10, step=3))], ids=["real", "complex", "batch-by-length"])
def test_stft_of_a_run_time_length_matches_onnxruntime(shape, kwargs, tmp_path, signer):
    """Frames of a run-time length, their positions computed when the call runs, at lengths
    the frame fits (its own, one step more, many); a shorter signal is refused on every side,
    as onnxruntime refuses it."""
    model = _stft_model(tmp_path, shape, **kwargs)
    width = kwargs.get("window") or kwargs["frame_length"]
    golden = {d: [width + 4, 40] for d in shape if type(d) is str}
    feeds = [RNG.standard_normal([3 if d == "b" else t if d == "t" else d for d in shape])
             .astype(np.float32) for t in (width, width + 1, width + 3, 50)]
    tol = _dft_tolerance(width, np.concatenate([f.reshape(-1) for f in feeds]))
    _, loaded = import_and_load(model, tmp_path / "s.pha", signer, tolerances=tol,
                                golden_dims=golden)
    check_on_both_backends(model, loaded, [{"x": f} for f in feeds])
    short = np.zeros([1 if d == "b" else width - 1 if d == "t" else d for d in shape],
                     np.float32)
    with pytest.raises(Exception, match="window_size <= signal_size"):
        onnxruntime_outputs(model, {"x": short})
    index_refused_on_both_backends(loaded.graph, {"x": short},
                                   rf"node 'node/.* outside \[0, {width - 1}\)")


class _Stft(torch.nn.Module):
    def forward(self, x):
        return torch.view_as_real(torch.stft(x, 16, hop_length=4, window=torch.hann_window(16),
                                             center=False, return_complex=True))


def test_torch_stft_from_the_dynamo_exporter_matches_onnxruntime_and_torch(tmp_path, signer):
    x = torch.randn(2, 64)
    model = export(_Stft(), (x,), tmp_path / "s.onnx", dynamo=True, input_names=["x"])
    assert "STFT" in {n.op_type for n in onnx.load(model).graph.node}
    tol = _dft_tolerance(16, x.numpy())
    _, loaded = import_and_load(model, tmp_path / "s.pha", signer, tolerances=tol)
    [(got, _)] = check_against_onnxruntime(model, loaded, [{"x": x.numpy()}])
    np.testing.assert_allclose(next(iter(got.values())), _Stft()(x).numpy(), rtol=tol[0],
                               atol=tol[1])


def test_torch_stft_of_a_run_time_length_from_the_dynamo_exporter(tmp_path, signer):
    """torch.stft of a run-time batch and length against onnxruntime on both backends and
    torch."""
    x = torch.randn(2, 64)
    model = export_dynamic(_Stft(), [x], tmp_path / "s.onnx", dynamo=True, names=["x"],
                           dims=[{0: "batch", 1: "t"}], bounds={"t": (16, 4096)})
    feeds = [RNG.standard_normal((b, t)).astype(np.float32) for b, t in ((1, 16), (3, 23),
                                                                         (2, 100))]
    tol = _dft_tolerance(16, np.concatenate([f.reshape(-1) for f in feeds]))
    _, loaded = import_and_load(model, tmp_path / "s.pha", signer, tolerances=tol,
                                golden_dims={"t": [20, 64]})
    for backend in (None, OnnxruntimeBackend()):
        runs = check_against_onnxruntime(model, loaded, [{"x": f} for f in feeds],
                                         backend=backend)
        for f, (got, _) in zip(feeds, runs):
            np.testing.assert_allclose(next(iter(got.values())),
                                       _Stft()(torch.from_numpy(f)).numpy(), rtol=tol[0],
                                       atol=tol[1])


def test_stft_refusals_name_the_node(tmp_path):
    where = "node 'node' (STFT)"
    assert_refused(_stft_model(tmp_path, (1, 8, 1), window=16), UnsupportedModelError, where,
                   "frame_length 16 is longer than the signal (8)")
    assert_refused(_stft_model(tmp_path, (1, 40, 2), window=16), UnsupportedModelError, where,
                   "onesided=1 with a complex signal")
    assert_refused(_stft_model(tmp_path, (1, 40, 1), window=16, frame_length=8),
                   ModelFileError, where, "frame_length 8 differs from the window's length 16")
    assert_refused(_stft_model(tmp_path, (1, 40, 1)), ModelFileError, where,
                   "STFT needs a window or a frame_length")
    assert_refused(_stft_model(tmp_path, (1, 40, 1), window=8, step=0), UnsupportedModelError,
                   where, "frame_step 0 must be >= 1")
    assert_refused(_stft_model(tmp_path, (2, 40, 1, 1), window=8), UnsupportedModelError,
                   where, "signal shape [2, 40, 1, 1]: needs [batch, length, 1 or 2] (or "
                   "[batch, length], real)")
    assert_refused(_stft_model(tmp_path, (40, 1), window=8), UnsupportedModelError, where,
                   "frame_length 8 is longer than the signal (1)")  # [batch 40, length 1]
    runtime_step = _stft_model(tmp_path, (1, 40, 1), window=8)
    model = onnx.load(runtime_step)
    del model.graph.initializer[0]  # the step, now a graph input
    model.graph.input.append(_vi("step", (), TP.INT64))
    onnx.save(model, runtime_step)
    assert_refused(runtime_step, UnsupportedModelError, where,
                   "frame_step 'step' must be a constant (known at import)")
    with pytest.raises(ModelFileError) as info:
        import_onnx(_stft_model(tmp_path, (1, 40, 1), window=16, step=1),
                    limits=ReadLimits(max_tensor_elements=300))
    assert where in str(info.value) and "its frame index of shape (25, 16)" in str(info.value)
