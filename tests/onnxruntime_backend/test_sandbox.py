"""The onnxruntime backend in the confined sandbox worker: through SandboxedExecutor, through
``plugin-host infer --backend onnxruntime``, and chosen by a policy's [[artifact]] backend."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from plugin_host.artifacts import TrustStore, build_artifact, generate_key, sign_artifact
from plugin_host.builder import GraphBuilder
from plugin_host.cli import main
from plugin_host.executor import Executor
from plugin_host.sandbox import SandboxedExecutor
from plugins.demo_model import build_demo_graph, demo_inputs
from plugins.numpy_backend import NumpyBackend

ROOT = Path(__file__).resolve().parents[2]
RTOL, ATOL = 1e-4, 1e-5


@pytest.fixture(autouse=True)
def _state_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))


def signed(graph, path: Path, backends=("onnxruntime",)) -> TrustStore:
    """``graph`` built at ``path`` for ``backends`` (the numpy backend's golden vectors) and
    signed with a new key; a trust store holding that key."""
    key = generate_key()
    trust = TrustStore()
    trust.add_key(key.public_key())
    build_artifact(graph, path, version="1.0.0", backends=list(backends),
                   reference_backend=NumpyBackend(), latency_ms=50.0, golden_cases=1)
    sign_artifact(path, key)
    return trust


@pytest.fixture(scope="module")
def signed_demo(tmp_path_factory):
    path = tmp_path_factory.mktemp("ort") / "demo.pha"
    return path, signed(build_demo_graph(1), path)


def test_sandboxed_executor_on_onnxruntime(signed_demo):
    path, trust = signed_demo
    local = Executor(build_demo_graph(1), NumpyBackend())
    rng = np.random.default_rng(0)
    with SandboxedExecutor(path, trust=trust, backend="onnxruntime",
                           backend_plugins=("onnxruntime_backend",)) as ex:
        p = ex.protections
        assert p.seccomp and p.landlock_abi >= 6 and p.netns and p.no_new_privs
        assert p.uid != 0 and not p.problems
        first = demo_inputs(rng)
        for feed in (first, demo_inputs(rng)):  # the worker's executor carries h, c
            got, want = ex.run(feed), local.run(feed)
            for name in want:
                np.testing.assert_allclose(got[name], want[name], rtol=RTOL, atol=ATOL)
        ex.reset("explicit")
        local.reset("explicit")
        np.testing.assert_allclose(ex.run(first)["plan"], local.run(first)["plan"], rtol=RTOL,
                                   atol=ATOL)
        # onnxruntime loads confined but before the audit tripwire: no false alarm
        assert list(ex.audit_events) == []


def _quantized_ops_graph():
    """The qlinear element-wise ops on uint8 codes (2, K), K known when the call runs: the
    softmax's table is built then, in the worker; a global pool over K, and over windows of
    K."""
    b = GraphBuilder("quantized_ops")
    xq, sq, mq, aq, yq = ([b.constant(f"{name}.scale", np.float32(scale)),
                           b.constant(f"{name}.zero_point", np.uint8(zero_point))]
                          for name, scale, zero_point in (("x", 0.05, 120), ("s", 1 / 256, 0),
                                                          ("m", 0.03, 90), ("a", 0.07, 100),
                                                          ("y", 1 / 256, 0)))
    x = b.input("x", (2, "K"), "uint8", "ANY")
    s = b.op("qlinear_sigmoid", x, *xq, *sq, name="sigmoid")
    m = b.op("qlinear_mul", x, *xq, s, *sq, *mq, name="mul")
    a = b.op("qlinear_add", m, *mq, x, *xq, *aq, name="add")
    c = b.op("qlinear_concat", *aq, a, *aq, x, *xq, name="concat", axis=0)
    b.output(b.op("qlinear_softmax", c, *aq, *yq, name="softmax", axis=-1), "y", "ANY")
    rows = b.op("unflatten", c, name="rows", axis=0, sizes=[1, 4])
    b.output(b.op("qlinear_global_average_pool", rows, *aq, *yq, name="pool"), "p", "ANY")
    windows = b.op("qlinear_average_pool", rows, *aq, *yq, name="windows", kernel_size=[3],
                   stride=[3], padding=[[1, 1]], ceil_mode=True)
    b.output(b.op("qlinear_global_average_pool", windows, *yq, *aq, name="windows_pool"), "w",
             "ANY")
    return b.build()


@pytest.mark.parametrize("backend", ["numpy", "onnxruntime"])
def test_the_quantized_ops_run_in_the_confined_worker(backend, tmp_path):
    """Their numpy kernels (MLAS's tables, the C library's logf for the softmax's, found
    without opening a file) and onnxruntime's com.microsoft kernels, confined: the outputs of
    the in-process executor, no audit event."""
    graph = _quantized_ops_graph()
    trust = signed(graph, tmp_path / "q.pha", backends=(backend,))
    local = Executor(graph, NumpyBackend())
    rng = np.random.default_rng(4)
    with SandboxedExecutor(tmp_path / "q.pha", trust=trust, backend=backend,
                           backend_plugins=(f"{backend}_backend",)) as ex:
        for k in (5, 300):
            feed = {"x": rng.integers(0, 256, (2, k)).astype(np.uint8)}
            got, want = ex.run(feed), local.run(feed)
            for name in ("y", "p", "w"):
                np.testing.assert_array_equal(got[name], want[name])
        assert list(ex.audit_events) == []


def test_a_model_layer_plugin_beside_onnxruntime_raises_no_audit_event(signed_demo):
    """The daemon's demo policy on the onnxruntime backend: the demo model's plugin imports
    the layer library, which reads numpy.random as it loads. numpy imports that only on first
    use and the onnxruntime backend never uses it, so without its preload the plugin's import
    under the tripwire loaded it there (four false alarms: its code's ``marshal.loads`` ...),
    and where the unprivileged uid cannot read the virtual environment (a checkout under a
    private folder) failed: "No module named 'numpy.random'"."""
    path, trust = signed_demo
    with SandboxedExecutor(path, trust=trust, backend="onnxruntime",
                           backend_plugins=("onnxruntime_backend",),
                           plugin_modules=("plugins.demo_model",)) as ex:
        assert ex.run(demo_inputs(np.random.default_rng(0)))["plan"].shape
        assert list(ex.audit_events) == []


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_build_and_infer_on_onnxruntime(tmp_path, capsys):
    keys, art = tmp_path / "keys", tmp_path / "demo.pha"
    assert main(["keygen", "--out", str(keys)]) == 0
    assert main(["build", "--demo", "--out", str(art), "--backend", "onnxruntime",
                 "--backend", "numpy", "--latency-ms", "40"]) == 0
    assert main(["sign", str(art), "--key", str(keys / "signing.key")]) == 0
    np.savez(tmp_path / "in.npz", **demo_inputs(np.random.default_rng(5)))
    results = {}
    for backend in ("onnxruntime", "numpy"):
        out_file = tmp_path / f"{backend}.npz"
        code, out, err = _run(capsys, "infer", art, "--trust", keys / "signing.pub",
                              "--inputs", tmp_path / "in.npz", "--out", out_file,
                              "--backend", backend, "--state-dir", tmp_path / backend)
        assert code == 0, err
        assert f"on {backend} in sandbox worker" in out and "seccomp" in out
        with np.load(out_file) as f:
            results[backend] = {k: f[k] for k in f.files}
    for name, want in results["numpy"].items():
        np.testing.assert_allclose(results["onnxruntime"][name], want, rtol=RTOL, atol=ATOL)


def test_infer_with_a_policy_whose_artifact_runs_on_onnxruntime(tmp_path, capsys):
    """The policy path the daemon uses: [[artifact]] backend = "onnxruntime", the backend
    plugin allowed as inference-hardware; no --backend flag."""
    state = tmp_path / "state"
    assert main(["keygen", "--out", str(state / "demo")]) == 0
    art = state / "demo" / "demo.pha"
    assert main(["build", "--demo", "--out", str(art), "--backend", "onnxruntime"]) == 0
    assert main(["sign", str(art), "--key", str(state / "demo" / "signing.key")]) == 0
    text = (ROOT / "policies" / "demo.toml").read_text()
    text, n = re.subn(r'(\[\[artifact\]\][^\[]*?backend = )"numpy"', r'\1"onnxruntime"', text,
                      flags=re.S)
    assert n == 1
    # acceptance on onnxruntime is `plugin-host accept`'s to test; here only the backend choice
    text, n = re.subn(r"acceptance_required = true", "acceptance_required = false", text)
    assert n == 1
    text += ('\n[[plugin]]\nname = "onnxruntime_backend"\nkind = "inference-hardware"\n'
             'capabilities = []\n')
    policy = tmp_path / "ort.toml"
    policy.write_text(text)
    np.savez(tmp_path / "in.npz", **demo_inputs(np.random.default_rng(6)))
    code, out, err = _run(capsys, "infer", art, "--policy", policy, "--inputs",
                          tmp_path / "in.npz", "--out", tmp_path / "out.npz", "--state-dir",
                          state)
    assert code == 0, err
    assert "on onnxruntime in sandbox worker" in out


def _new_ops_graph():
    """The ops added for ONNX import, chained: grid_sample, resize, gather, topk, cumsum,
    atan, isnan, cast, expand, log_softmax, einsum's matmul."""
    from plugin_host.builder import GraphBuilder

    b = GraphBuilder("new_ops")
    x = b.input("x", (1, 2, 4, 4), "float32", "NCHW")
    grid = b.input("grid", (1, 3, 3, 2), "float32", "ANY")
    y = b.op("grid_sample", x, grid, name="warp", mode="bilinear", padding_mode="border",
             align_corners=False)
    y = b.op("resize", y, name="up", size=[6, 6], mode="linear", coordinate_mode="half_pixel")
    rows = b.op("reshape", y, name="rows", shape=[2, 36])
    picked = b.op("gather", rows, b.constant("idx", np.array([5, 0, 35], np.int64)),
                  name="pick", axis=1)
    values, indices = b.op("topk", rows, name="top", k=4, axis=1)
    run = b.op("cumsum", b.op("atan", values, name="atan"), name="run", axis=1)
    nan = b.op("cast", b.op("isnan", picked, name="nan"), name="nan_f", dtype="float32")
    first = b.op("reshape", b.op("slice", nan, name="first_row", starts=[0], ends=[1],
                                 axes=[0], steps=[1]), name="row", shape=[3])
    gram = b.op("matmul", b.op("transpose", picked, name="t", perm=[1, 0]), picked,
                name="gram")  # (3, 3)
    soft = b.op("log_softmax", gram, name="soft", axis=-1)
    b.output(run, "run", "ANY")
    b.output(indices, "indices", "ANY")
    b.output(b.op("add", soft, b.op("expand", first, name="wide", shape=[3, 3]), name="mix"),
             "mix", "ANY")
    return b.build()


def _index_ops_graph():
    """More index and integer ops, chained: max_pool_with_indices,
    gather_elements (reading the pooled values back by their indices) and int_div."""
    from plugin_host.builder import GraphBuilder

    b = GraphBuilder("index_ops")
    x = b.input("x", (1, 2, 4, 4), "float32", "NCHW")
    y, where = b.op("max_pool_with_indices", x, name="pool", kernel_size=[2, 2], stride=[2, 2],
                    padding=[[0, 0], [0, 0]], dilation=[1, 1])
    planes = b.op("reshape", x, name="planes", shape=[2, 16])
    picked = b.op("gather_elements", planes, b.op("reshape", where, name="flat", shape=[2, 4]),
                  name="pick", axis=1)
    b.output(b.op("sub", picked, b.op("reshape", y, name="pooled", shape=[2, 4]), name="zero"),
             "zero", "ANY")
    b.output(b.op("int_div", where, b.constant("three", np.array(-3, np.int64)), name="row"),
             "row", "ANY")
    return b.build()


def _feed(graph) -> dict:
    rng = np.random.default_rng(2)
    feed = {"x": rng.standard_normal((1, 2, 4, 4)).astype(np.float32)}
    if graph is _new_ops_graph:
        feed["grid"] = rng.uniform(-1.2, 1.2, (1, 3, 3, 2)).astype(np.float32)
    return feed


@pytest.mark.parametrize("graph", [_new_ops_graph, _index_ops_graph])
@pytest.mark.parametrize("backend", ["numpy", "onnxruntime"])
def test_the_new_ops_run_in_the_confined_worker(backend, graph, tmp_path):
    """Each backend runs them under seccomp, Landlock and the rest with no system call or
    file the worker's confinement refuses, and gives the in-process numpy results."""
    key = generate_key()
    trust = TrustStore()
    trust.add_key(key.public_key())
    path = tmp_path / "new_ops.pha"
    build_artifact(graph(), path, version="1.0.0", backends=["numpy", "onnxruntime"],
                   reference_backend=NumpyBackend(), latency_ms=100.0, golden_cases=1)
    sign_artifact(path, key)
    local = Executor(graph(), NumpyBackend())
    feed = _feed(graph)
    plugins = ("numpy_backend",) if backend == "numpy" else ("onnxruntime_backend",)
    with SandboxedExecutor(path, trust=trust, backend=backend, backend_plugins=plugins) as ex:
        p = ex.protections
        assert p.seccomp and p.landlock_abi >= 6 and p.no_new_privs and not p.problems
        got, want = ex.run(dict(feed)), local.run(dict(feed))
        assert list(ex.audit_events) == []
    assert set(got) == set(want) == {s.name for s in graph().outputs}
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=RTOL, atol=ATOL, err_msg=name)


def test_an_index_along_a_symbolic_dim_is_checked_in_the_confined_worker(tmp_path):
    """The first entry along a run-time dim T (``x[:, 0]`` under a dynamic sequence length):
    onnxruntime reads T from x inside the worker and the guard checks the index against it,
    so T = 0 is the executor's IndexRangeError naming the node, as on numpy."""
    from abi.errors import IndexRangeError
    from plugin_host.builder import GraphBuilder

    b = GraphBuilder("first")
    x = b.input("x", (2, "T"), "float32", "ANY")
    b.output(b.op("gather_elements", x, b.constant("zero", np.zeros((2, 1), np.int64)),
                  name="first", axis=1), "y", "ANY")
    key = generate_key()
    trust = TrustStore()
    trust.add_key(key.public_key())
    path = tmp_path / "first.pha"
    build_artifact(b.build(), path, version="1.0.0", backends=["onnxruntime"],
                   reference_backend=NumpyBackend(), latency_ms=100.0, golden_cases=1)
    sign_artifact(path, key)
    with SandboxedExecutor(path, trust=trust, backend="onnxruntime",
                           backend_plugins=("onnxruntime_backend",)) as ex:
        x = np.arange(10, dtype=np.float32).reshape(2, 5)
        np.testing.assert_array_equal(ex.run({"x": x})["y"], x[:, :1])
        with pytest.raises(IndexRangeError, match=r"node 'first'.* outside \[0, 0\)"):
            ex.run({"x": np.zeros((2, 0), np.float32)})
        np.testing.assert_array_equal(ex.run({"x": x[:, 3:]})["y"], x[:, 3:4])


def test_sizes_onnxruntime_refuses_are_the_abis_refusal_in_the_confined_worker(tmp_path):
    """A conv over run-time sizes shorter than its kernel: onnxruntime fails the run in the
    worker, which asks the graph's rules of the call's sizes: the ABI's ShapeError naming the
    node reaches the host, and the worker goes on."""
    from abi.errors import ShapeError
    from plugin_host.builder import GraphBuilder

    b = GraphBuilder("short")
    x = b.input("x", (1, 2, "h", "w"), "float32", "ANY")
    y = b.op("conv", x, b.constant("w3", np.ones((3, 2, 3, 3), np.float32)), name="node",
             stride=[1, 1], padding=[[0, 0], [0, 0]], dilation=[1, 1])
    b.output(b.op("sum", y, name="total", axes=[2, 3]), "y", "ANY")
    key = generate_key()
    trust = TrustStore()
    trust.add_key(key.public_key())
    path = tmp_path / "short.pha"
    build_artifact(b.build(), path, version="1.0.0", backends=["onnxruntime"],
                   reference_backend=NumpyBackend(), latency_ms=100.0,
                   golden_inputs=[{"x": np.ones((1, 2, 4, 4), np.float32)}])
    sign_artifact(path, key)
    with SandboxedExecutor(path, trust=trust, backend="onnxruntime",
                           backend_plugins=("onnxruntime_backend",)) as ex:
        pid = ex.pid
        with pytest.raises(ShapeError, match=r"^conv: spatial axis 0 of x shape "
                                             r"\(1, 2, 2, 5\) is 2") as info:
            ex.run({"x": np.ones((1, 2, 2, 5), np.float32)})
        assert info.value.context["node"] == "node"
        got = ex.run({"x": np.ones((1, 2, 3, 5), np.float32)})["y"]
        np.testing.assert_array_equal(got, np.full((1, 3), 18 * 3, np.float32))
        assert ex.pid == pid


@pytest.mark.parametrize("backend", ["numpy", "onnxruntime"])
def test_an_unflatten_reads_its_sizes_from_like_in_the_confined_worker(backend, tmp_path):
    """(l*n, 4) back to (l, n, 4), l and n read from like's shape when the call runs: each
    backend in the worker gives x reshaped at every size, an empty like too."""
    from plugin_host.builder import GraphBuilder

    b = GraphBuilder("split")
    x = b.input("x", ("m", 4), "float32", "ANY")
    like = b.input("like", ("l", "n"), "bool", "ANY")
    b.output(b.op("unflatten", x, like, name="split", axis=0, sizes=[-1, -1],
                  like_axes=[0, 1]), "y", "ANY")
    key = generate_key()
    trust = TrustStore()
    trust.add_key(key.public_key())
    path = tmp_path / "split.pha"
    build_artifact(b.build(), path, version="1.0.0", backends=["numpy", "onnxruntime"],
                   reference_backend=NumpyBackend(), latency_ms=100.0, golden_cases=1)
    sign_artifact(path, key)
    plugins = ("numpy_backend",) if backend == "numpy" else ("onnxruntime_backend",)
    with SandboxedExecutor(path, trust=trust, backend=backend, backend_plugins=plugins) as ex:
        for l, n in ((2, 3), (3, 2), (0, 5)):
            x = np.arange(l * n * 4, dtype=np.float32).reshape(l * n, 4)
            got = ex.run({"x": x, "like": np.ones((l, n), bool)})["y"]
            np.testing.assert_array_equal(got, x.reshape(l, n, 4))
        assert list(ex.audit_events) == []


def _raw_plane_graph():
    """A uint16 raw plane and int16 offsets: the offsets wrap-added in int16, clipped and
    scaled in float32; max and matmul of int16, which onnxruntime computes in int32."""
    from plugin_host.builder import GraphBuilder

    b = GraphBuilder("raw_plane")
    raw = b.input("raw", (1, 4, 6), "uint16", "ANY")
    offsets = b.input("offsets", (4, 6), "int16", "ANY")
    shifted = b.op("add", offsets, b.constant("bias", np.array(30000, np.int16)), name="shift")
    peak = b.op("max", shifted, offsets, name="peak")
    b.output(b.op("matmul", peak, b.constant("w", np.arange(-9, 9, dtype=np.int16).reshape(
        6, 3)), name="mix"), "mixed", "ANY")
    plane = b.op("cast", raw, name="to_float", dtype="float32")
    b.output(b.op("mul", plane, b.constant("scale", np.array(1 / 65535, np.float32)),
                  name="norm"), "plane", "ANY")
    return b.build()


def test_an_int16_artifact_runs_on_onnxruntime_in_the_confined_worker(tmp_path):
    """Built for onnxruntime (the build checks the backend can run it), loaded and run by the
    sandbox worker, with the in-process numpy backend's bits."""
    key = generate_key()
    trust = TrustStore()
    trust.add_key(key.public_key())
    path = tmp_path / "raw_plane.pha"
    build_artifact(_raw_plane_graph(), path, version="1.0.0", backends=["onnxruntime"],
                   reference_backend=NumpyBackend(), latency_ms=100.0, golden_cases=1)
    sign_artifact(path, key)
    rng = np.random.default_rng(3)
    feed = {"raw": rng.integers(0, 65536, (1, 4, 6)).astype(np.uint16),
            "offsets": rng.integers(-32768, 32768, (4, 6)).astype(np.int16)}
    want = Executor(_raw_plane_graph(), NumpyBackend()).run(dict(feed))
    with SandboxedExecutor(path, trust=trust, backend="onnxruntime",
                           backend_plugins=("onnxruntime_backend",)) as ex:
        assert ex.protections.seccomp and not ex.protections.problems
        got = ex.run(dict(feed))
        assert list(ex.audit_events) == []
    assert got["mixed"].dtype == np.int16
    np.testing.assert_array_equal(got["mixed"], want["mixed"])
    np.testing.assert_array_equal(got["plane"], want["plane"])


def test_a_quantized_conv_runs_confined(tmp_path):
    """qlinear_conv of uint8 codes by int8 weights: the probe of onnxruntime's u8 x s8 kernels
    (a session of its own) runs in the confined worker, and the codes are the numpy
    backend's bit for bit."""
    from tests.numpy_backend.test_qlinear_conv import random_conv

    conv = random_conv(np.random.default_rng(41), "uint8", "int8", per_channel=True, bias=True)
    graph, feed = conv.graph()
    path = tmp_path / "qconv.pha"
    trust = signed(graph, path)
    with SandboxedExecutor(path, trust=trust, backend="onnxruntime",
                           backend_plugins=("onnxruntime_backend",)) as ex:
        assert not ex.protections.problems
        got = ex.run(feed)["y"]
    np.testing.assert_array_equal(got, Executor(graph, NumpyBackend()).run(feed)["y"])


def test_a_quantized_lstm_of_one_sequence_runs_confined_as_its_kernel(tmp_path):
    """The projected quantized LSTM (fusion.py): its If, onnxruntime's DynamicQuantizeLSTM
    and (values past the sum test's bound: the other branch) DynamicQuantizeMatMul and the
    Scan run in the confined worker, bit for bit the backend in this process."""
    from plugins.onnxruntime_backend import OnnxruntimeBackend
    from tests.onnxruntime_backend.test_fusion import lstm_feed, lstm_graph, model_ops

    graph = lstm_graph(1, peepholes=True)
    assert "If" in model_ops(graph)
    path = tmp_path / "qlstm.pha"
    trust = signed(graph, path)
    feeds = [lstm_feed(1), lstm_feed(1, scale=30), lstm_feed(1, scale=1e36)]
    with SandboxedExecutor(path, trust=trust, backend="onnxruntime",
                           backend_plugins=("onnxruntime_backend",)) as ex:
        assert not ex.protections.problems
        got = [ex.run(feed) for feed in feeds]
        assert list(ex.audit_events) == []
    local = Executor(graph, OnnxruntimeBackend())
    for feed, outputs in zip(feeds, got):
        for name, value in local.run(feed).items():
            np.testing.assert_array_equal(outputs[name], value, err_msg=name)


def test_a_qdq_pair_runs_confined_as_quantize_and_dequantize_linear(tmp_path):
    """The QDQ pair (fusion.py) with its QDQ fusions off (the session's config): QuantizeLinear
    and DequantizeLinear of int8 codes per channel run in the confined worker, bit for bit
    the numpy backend."""
    from tests.onnxruntime_backend.test_fusion_qdq import PAIR_OPS, along, pair_graph
    from tests.onnxruntime_backend.test_ops import model_ops

    graph = pair_graph("int8", scale=along([0.02, 0.5, 3.0], 1), zero_point=along(-5, None))
    assert model_ops(graph) == PAIR_OPS
    path = tmp_path / "qdq.pha"
    trust = signed(graph, path)
    feed = {"x": (np.random.default_rng(43).standard_normal((2, 3, 4, 5)) * 4)
            .astype(np.float32)}
    with SandboxedExecutor(path, trust=trust, backend="onnxruntime",
                           backend_plugins=("onnxruntime_backend",)) as ex:
        assert not ex.protections.problems
        got = ex.run(feed)["y"]
        assert list(ex.audit_events) == []
    np.testing.assert_array_equal(got, Executor(graph, NumpyBackend()).run(feed)["y"])


@pytest.mark.parametrize("before", [None, "silu"])
def test_a_blocked_max_pool_runs_confined(before, tmp_path):
    """The nan-checked max pool in the blocked-channel form (glue's ``_max_pool_by_conv``),
    whose first use creates the HardSigmoid probe's session (after a SiLU the SiLU's and the
    fused Clip's) too: in the confined worker, with no audit event, bit for bit the numpy
    backend over a nan and infinities (after a SiLU, of onnxruntime's SiLU)."""
    from tests.onnxruntime_backend.test_max_pool import (assert_same, attrs_of, numpy_pool_of,
                                                         pool_graph)
    from tests.onnxruntime_backend.test_ops import model_ops

    attrs = attrs_of(5, 5, 1, 1, 2, 2, 1, 1, False)
    graph = pool_graph((1, 16, 9, 9), before=before, **attrs)
    assert {"Clip" if before else "HardSigmoid", "Conv", "Mul"} <= model_ops(graph)
    path = tmp_path / "pool.pha"
    trust = signed(graph, path)
    x = np.random.default_rng(44).standard_normal((1, 16, 9, 9)).astype(np.float32)
    x[0, 3, 4, 4], x[0, 5, 0, 8], x[0, 9, 2, 2] = np.nan, np.inf, -np.inf
    with SandboxedExecutor(path, trust=trust, backend="onnxruntime",
                           backend_plugins=("onnxruntime_backend",)) as ex:
        assert not ex.protections.problems
        got = ex.run({"x": x})["y"]
        assert list(ex.audit_events) == []
    want = numpy_pool_of(x, before, x.shape, attrs)
    assert np.isnan(want).sum() == (50 if before else 25)  # the SiLU of -inf is nan too
    assert_same(got, want)


def test_an_argmax_runs_confined_through_both_branches(tmp_path):
    """argmax's If (glue's ``_arg``): in the confined worker, with no audit event, the branch
    of the op alone (no nan) and the mask's (a nan), each numpy's index."""
    from tests.onnxruntime_backend.test_extremes import arg_graph

    graph = arg_graph("argmax", (4, 19, 6), 1, False)
    path = tmp_path / "argmax.pha"
    trust = signed(graph, path)
    x = np.random.default_rng(45).standard_normal((4, 19, 6)).astype(np.float32)
    with_nan = x.copy()
    with_nan[2, 7, 3] = np.nan
    with SandboxedExecutor(path, trust=trust, backend="onnxruntime",
                           backend_plugins=("onnxruntime_backend",)) as ex:
        assert not ex.protections.problems
        got = [ex.run({"x": v})["y"] for v in (x, with_nan)]
        assert list(ex.audit_events) == []
    np.testing.assert_array_equal(got[0], np.argmax(x, axis=1))
    np.testing.assert_array_equal(got[1], np.argmax(with_nan, axis=1))
    assert got[1][2, 3] == 7
