"""build -> sign -> load_verified gives back the same graph, zero-copy, running to the same
outputs; the manifest binds everything the issue lists."""

import hashlib
import mmap
import os
import signal
import time

import numpy as np
import pytest

import plugin_host
from abi.artifact import ArtifactFile, decode, encode, graph_digest
from abi.errors import TensorHashError
from plugin_host.artifacts import (build_artifact, load_verified, read_manifest_unverified,
                                   sign_artifact)
from plugin_host.executor import Executor
from plugins.demo_model import build_demo_graph, demo_inputs
from plugins.numpy_backend import NumpyBackend

from .conftest import NOW, build_tiny_graph


def _load(path, trust, **kw):
    kw.setdefault("rollback", None)
    kw.setdefault("backends", {"numpy"})
    kw.setdefault("now", NOW)
    return load_verified(path, trust=trust, **kw)


def _mapped_root(array):
    base = array
    while getattr(base, "base", None) is not None:
        base = base.base
    return base.obj if isinstance(base, memoryview) else base


def test_tiny_round_trip_equals_the_original_graph(tiny_artifact, tiny_graph, trust):
    loaded = _load(tiny_artifact, trust)
    assert loaded.graph.to_dict() == tiny_graph.to_dict()
    assert list(loaded.graph.tensors) == list(tiny_graph.tensors)
    for name, array in tiny_graph.tensors.items():
        got = loaded.graph.tensors[name]
        assert got.dtype == array.dtype and got.shape == array.shape
        assert np.array_equal(got, array)
    rng = np.random.default_rng(5)
    feed = {"x": rng.standard_normal((1, 4)).astype(np.float32), "ids": np.array([3])}
    want = Executor(tiny_graph, NumpyBackend()).run(feed)
    got = Executor(loaded.graph, NumpyBackend()).run(feed)
    assert want.keys() == got.keys()
    for k in want:
        assert np.array_equal(want[k], got[k])
    loaded.check_golden(NumpyBackend())


def test_demo_round_trip_runs_to_the_same_outputs(demo_artifact, trust):
    original = build_demo_graph(seed=0)
    loaded = _load(demo_artifact, trust)
    assert loaded.graph.to_dict() == original.to_dict()
    a, b = Executor(original, NumpyBackend()), Executor(loaded.graph, NumpyBackend())
    rng = np.random.default_rng(11)
    for _ in range(3):  # recurrent state carried the same way
        feed = demo_inputs(rng)
        want, got = a.run(feed), b.run(feed)
        for k in want:
            assert np.array_equal(want[k], got[k]), k
    loaded.check_golden(NumpyBackend())


def test_tensors_are_read_only_views_of_the_mapped_file(demo_artifact, trust):
    loaded = _load(demo_artifact, trust)
    section_bytes = 0
    for name, array in loaded.graph.tensors.items():
        assert not array.flags.writeable, name
        assert not array.flags.owndata, name
        root = _mapped_root(array)
        assert isinstance(root, mmap.mmap), name
        assert np.shares_memory(array, np.frombuffer(root, dtype=np.uint8)), name
        section_bytes += array.nbytes
        with pytest.raises(ValueError):
            array.reshape(-1)[:1] = 0
    assert section_bytes > 18e6
    for array in loaded.tensors.values():  # golden vectors too
        assert not array.flags.writeable


def test_the_manifest_binds_what_the_issue_lists(demo_artifact, trust):
    loaded = _load(demo_artifact, trust)
    m = loaded.manifest
    raw = m.raw
    assert m.name == "demo" and m.version == "1.0.0" and m.abi_version == 1
    assert m.backends == ("numpy",)
    assert [s["name"] for s in raw["graph"]["inputs"]] == ["img", "desire", "h", "c"]
    assert all(n["version"] == 1 and n["atomic"] is False for n in raw["graph"]["nodes"])
    roles = {e.name: e.role for e in m.tensors}
    for i in range(4):
        for k in ("running_mean", "running_var", "num_batches_tracked"):
            assert roles[f"vision.{i}.bn.{k}"] == "state"
        assert roles[f"vision.{i}.bn.weight"] == "weight"
    nbt = loaded.graph.tensors["vision.0.bn.num_batches_tracked"]
    assert nbt.dtype == np.int64 and int(nbt) == 1000
    bn = [entry for entry in m.layers if entry["op"] == "batchnorm"]
    assert len(bn) == 4 and all(e["eps"] == 1e-5 and e["momentum"] == 0.1 and e["affine"]
                                for e in bn)
    assert {e.sha256 for e in m.tensors} and all(len(e.sha256) == 64 for e in m.tensors)
    assert set(m.tolerances) == {"plan", "h_next", "c_next"}
    assert m.state_pairs == {"h": "h_next", "c": "c_next"}
    assert m.reset.frame_gap_ms == 150.0 and m.reset.camera_restart and m.reset.explicit
    assert m.latency_ms == 50.0
    assert m.golden_backend == "numpy" and len(m.golden) == 2
    assert m.builder == f"plugin-host {plugin_host.__version__}"
    assert m.source_digest == graph_digest(loaded.graph.to_dict())
    assert m.expires is None
    # golden case 0 starts from zero state, case 1 from a random one
    (in0, out0), (in1, _) = loaded.golden_cases()
    assert not in0["h"].any() and in1["h"].any()
    fresh = Executor(build_demo_graph(seed=0), NumpyBackend()).run(dict(in0))
    assert np.array_equal(fresh["plan"], out0["plan"])


def test_offsets_are_aligned_and_the_file_has_no_slack(demo_artifact):
    with ArtifactFile(demo_artifact) as f:
        m = decode(f.unverified_manifest_bytes)
        assert f.header.tensor_offset % 64 == 0
        assert f.header.file_size == f.size
    for entry in m["tensors"]:
        assert entry["offset"] % 64 == 0


def test_build_is_deterministic(tmp_path, tiny_graph):
    paths = [tmp_path / "a.pha", tmp_path / "b.pha"]
    for p in paths:
        build_artifact(tiny_graph, p, version="2.0.0", reference_backend=NumpyBackend(),
                       latency_ms=1.0, seed=4)
    assert paths[0].read_bytes() == paths[1].read_bytes()


def test_signing_keeps_the_manifest_and_other_signatures(tiny_artifact, key_a, key_b, trust):
    before = read_manifest_unverified(tiny_artifact)
    sign_artifact(tiny_artifact, key_a)  # renewing the same key changes nothing
    again = read_manifest_unverified(tiny_artifact)
    assert again["signatures"] == before["signatures"]
    kid_b = sign_artifact(tiny_artifact, key_b)
    after = read_manifest_unverified(tiny_artifact)
    assert after["manifest_sha256"] == before["manifest_sha256"]
    assert [s["key_id"] for s in after["signatures"]] == sorted(
        [before["signatures"][0]["key_id"], kid_b])
    trust.add_key(key_b.public_key())
    trust.set_threshold("tiny", 2)
    assert len(_load(tiny_artifact, trust).signers) == 2


def test_sign_refuses_a_file_whose_tensors_do_not_match(tiny_artifact, key_b):
    with ArtifactFile(tiny_artifact) as f:
        first_tensor_byte = f.header.tensor_offset
    data = bytearray(tiny_artifact.read_bytes())
    data[first_tensor_byte] ^= 0x01
    tiny_artifact.write_bytes(bytes(data))
    with pytest.raises(TensorHashError) as info:
        sign_artifact(tiny_artifact, key_b)
    assert info.value.tensors == ["fc.weight"]
    assert tiny_artifact.read_bytes() == bytes(data)  # nothing was written


def test_read_manifest_unverified_reports_without_trust(tiny_artifact, key_a):
    info = read_manifest_unverified(tiny_artifact)
    assert info["manifest"]["name"] == "tiny"
    assert len(info["signatures"]) == 1 and len(info["signatures"][0]["signature"]) == 128
    assert info["header"]["file_size"] == tiny_artifact.stat().st_size
    assert hashlib.sha256(encode(info["manifest"])).hexdigest() == info["manifest_sha256"]


def test_given_golden_inputs_and_per_output_tolerances(tmp_path, key_a, trust):
    graph = build_tiny_graph(seed=1)
    path = tmp_path / "t.pha"
    feed = {"x": np.ones((1, 4), np.float32), "ids": np.array([4])}
    build_artifact(graph, path, reference_backend=NumpyBackend(), latency_ms=2.0,
                   golden_inputs=[feed], tolerances={"y": (1e-3, 1e-4), "h_next": (0.0, 0.0)})
    sign_artifact(path, key_a)
    loaded = _load(path, trust)
    assert len(loaded.manifest.golden) == 1
    assert loaded.manifest.tolerances["y"].rtol == 1e-3
    (inputs, _), = loaded.golden_cases()
    assert np.array_equal(inputs["x"], feed["x"]) and not inputs["h"].any()


def test_a_loaded_file_replaced_by_rename_keeps_its_views(tiny_artifact, trust, key_b):
    loaded = _load(tiny_artifact, trust)
    weights = np.array(loaded.graph.tensors["fc.weight"])
    sign_artifact(tiny_artifact, key_b)  # writes a new file and renames it over the old one
    assert np.array_equal(loaded.graph.tensors["fc.weight"], weights)


def _int16_graph():
    from plugin_host.builder import GraphBuilder

    b = GraphBuilder("counts")
    x = b.input("x", (1, 4), "int16", "NC")
    b.output(b.op("cast", x, name="f", dtype="float32"), "y", "NC")
    return b.build()


def test_a_target_backend_installed_here_must_be_able_to_run_the_graph(tmp_path, monkeypatch):
    pytest.importorskip("onnxruntime")
    from abi.errors import BackendError
    from plugins import onnxruntime_backend

    # the onnxruntime backend takes every dtype the numpy one does: here it lacks int16
    monkeypatch.setattr(onnxruntime_backend, "DTYPES", onnxruntime_backend.DTYPES - {"int16"})

    out = tmp_path / "counts.pha"
    with pytest.raises(BackendError) as info:
        build_artifact(_int16_graph(), out, backends=["numpy", "onnxruntime"],
                       reference_backend=NumpyBackend(), latency_ms=10.0)
    assert str(info.value) == ("cannot build 'counts': target backend 'onnxruntime' cannot run "
                               "it: dtype int16 is not supported")
    assert not out.exists()
    # a target not installed here (a device's own backend) is left to acceptance there
    m = build_artifact(_int16_graph(), out, backends=["numpy", "acme-npu"],
                       reference_backend=NumpyBackend(), latency_ms=10.0)
    assert m.backends == ("numpy", "acme-npu")


def test_a_stop_signal_waits_for_the_hashing_thread(tiny_artifact, trust, monkeypatch):
    """A stop signal raised at once in the wait for the hashing thread (threading's waits are
    not safe to break into) is held until the hashes are done, then raised as the stop."""
    from plugin_host.artifacts import load as load_module
    from plugin_host.stop_signals import StopRequested, StopSignals

    from tests.signals import stop_signals_at_defaults

    real, hashed = load_module.verify_section, []

    def hashing(*args):
        os.kill(os.getpid(), signal.SIGINT)  # reaches the main thread, waiting
        time.sleep(0.2)
        real(*args)
        hashed.append(True)

    monkeypatch.setattr(load_module, "verify_section", hashing)
    with stop_signals_at_defaults():
        stops = StopSignals().install()
        try:
            with pytest.raises(KeyboardInterrupt) as raised:  # any other kind: a failure
                _load(tiny_artifact, trust)
        finally:
            stops.restore()
    assert type(raised.value) is StopRequested and hashed == [True]
