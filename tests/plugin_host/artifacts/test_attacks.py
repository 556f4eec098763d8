"""Every refusal of load_verified, each triggered by a deliberate attack, each its own type with
a one-line message that says what differed."""

from __future__ import annotations

import os
import shutil
import time

import numpy as np
import pytest

from abi.artifact import ArtifactFile, decode
from abi.errors import (ArtifactError, ArtifactFormatError, GraphError, IncompatibleArtifactError,
                        PluginHostError, TensorHashError)
from abi.ops import OpDef, table
from abi.ops.glue import OPS as GLUE_OPS
from plugin_host.artifacts import (RollbackStore, TrustStore, build_artifact, key_id,
                                   load_verified, sign_artifact)
from plugin_host.builder import GraphBuilder
from plugin_host.errors import (ExpiredArtifactError, RevokedKeyError, RollbackError,
                                SignatureError, StateFileError, ThresholdError,
                                UnauditedOpError, UntrustedKeyError)
from plugins.numpy_backend import NumpyBackend, layers
from plugins.numpy_backend import glue as numpy_glue

from .conftest import NOW, build_tiny_graph


def _load(path, trust, **kw):
    kw.setdefault("rollback", None)
    kw.setdefault("backends", {"numpy"})
    kw.setdefault("now", NOW)
    return load_verified(path, trust=trust, **kw)


def _refused(error_type, path, trust, **kw) -> PluginHostError:
    with pytest.raises(error_type) as info:
        _load(path, trust, **kw)
    message = str(info.value)
    assert message and "\n" not in message, message
    return info.value


def _section_offset(path) -> int:
    with ArtifactFile(path) as f:
        return f.header.tensor_offset


def _entry(path, name):
    with ArtifactFile(path) as f:
        manifest = decode(f.unverified_manifest_bytes)
    return next(e for e in manifest["tensors"] if e["name"] == name)


def _flip(path, offset, mask=0x01):
    data = bytearray(path.read_bytes())
    data[offset] ^= mask
    path.write_bytes(bytes(data))


# --- signatures and trust ----------------------------------------------------------------------


def test_wrong_key_is_untrusted(tiny_artifact, key_a, key_b):
    other = TrustStore()
    other.add_key(key_b.public_key())
    err = _refused(UntrustedKeyError, tiny_artifact, other)
    assert key_id(key_a) in str(err) and err.path == str(tiny_artifact)


def test_empty_trust_store_accepts_nothing(tiny_artifact):
    _refused(UntrustedKeyError, tiny_artifact, TrustStore())


def test_revoked_key(tiny_artifact, trust, key_a):
    trust.revoke(key_id(key_a))
    assert key_id(key_a) in str(_refused(RevokedKeyError, tiny_artifact, trust))


def test_key_without_the_signer_role(tiny_artifact, key_a):
    store = TrustStore()
    store.add_key(key_a.public_key(), roles=("policy",))
    assert "policy" in str(_refused(UntrustedKeyError, tiny_artifact, store))


def test_threshold_two_with_one_signature(tiny_artifact, trust, key_b):
    trust.add_key(key_b.public_key())
    trust.set_threshold("tiny", 2)
    err = _refused(ThresholdError, tiny_artifact, trust)
    assert "needs 2 of 2" in str(err) and "got 1" in str(err)
    assert err.context["required"] == 2 and len(err.context["valid"]) == 1
    sign_artifact(tiny_artifact, key_b)
    assert len(_load(tiny_artifact, trust).signers) == 2


def test_default_threshold_applies_to_every_name(tiny_artifact, key_a, key_b, key_c):
    store = TrustStore(default_threshold=2)
    for k in (key_a, key_b, key_c):
        store.add_key(k.public_key())
    assert "needs 2 of 3" in str(_refused(ThresholdError, tiny_artifact, store))


def test_unsigned_artifact(tmp_path, tiny_graph, trust):
    path = tmp_path / "unsigned.pha"
    build_artifact(tiny_graph, path, reference_backend=NumpyBackend(), latency_ms=1.0)
    assert "no signature" in str(_refused(ThresholdError, path, trust))


def test_an_extra_signature_by_an_unknown_key_is_refused(tiny_artifact, trust, key_c):
    sign_artifact(tiny_artifact, key_c)  # the file now carries a signature nobody checks
    _refused(UntrustedKeyError, tiny_artifact, trust)


def test_tampered_signature(tiny_artifact, trust):
    with ArtifactFile(tiny_artifact) as f:
        offset = f.header.padding_offset - 10  # inside the 64 signature bytes
    _flip(tiny_artifact, offset)
    _refused(SignatureError, tiny_artifact, trust)


def test_tampered_manifest_byte(tiny_artifact, trust):
    with ArtifactFile(tiny_artifact) as f:
        manifest = f.unverified_manifest_bytes
    offset = 64 + manifest.index(b"1.0.0")
    _flip(tiny_artifact, offset + 4)  # "1.0.0" -> "1.0.1": still a valid manifest
    _refused(SignatureError, tiny_artifact, trust)


def test_resigned_manifest_by_an_attacker_key(tiny_artifact, trust, key_c, tamper):
    tamper.rewrite_manifest(tiny_artifact, lambda m: m.update(version="9.9.9"), key_c)
    _refused(UntrustedKeyError, tiny_artifact, trust)


# --- tensor bytes ------------------------------------------------------------------------------


def test_tampered_tensor_byte_names_the_tensor(demo_artifact, trust, tmp_path):
    path = tmp_path / "demo.pha"
    shutil.copyfile(demo_artifact, path)
    start = _section_offset(path)
    fc, running = _entry(path, "fc.weight"), _entry(path, "vision.2.bn.running_var")
    _flip(path, start + fc["offset"] + fc["nbytes"] // 2)
    err = _refused(TensorHashError, path, trust)
    assert err.tensors == ["fc.weight"] and "fc.weight" in str(err)
    _flip(path, start + running["offset"])
    err = _refused(TensorHashError, path, trust)
    assert err.tensors == ["vision.2.bn.running_var", "fc.weight"]


def test_tampered_golden_vector(tiny_artifact, trust):
    entry = _entry(tiny_artifact, "@golden/1/output/y")
    _flip(tiny_artifact, _section_offset(tiny_artifact) + entry["offset"])
    assert _refused(TensorHashError, tiny_artifact, trust).tensors == ["@golden/1/output/y"]


def test_nonzero_padding_between_tensors(tiny_artifact, trust):
    entry = _entry(tiny_artifact, "fc.weight")  # 48 bytes: 16 bytes of padding follow
    _flip(tiny_artifact, _section_offset(tiny_artifact) + entry["offset"] + entry["nbytes"])
    assert "padding" in str(_refused(ArtifactFormatError, tiny_artifact, trust))


def test_nonzero_padding_before_the_section(tiny_artifact, trust):
    with ArtifactFile(tiny_artifact) as f:
        h = f.header
    assert h.tensor_offset > h.padding_offset
    _flip(tiny_artifact, h.tensor_offset - 1)
    assert "padding" in str(_refused(ArtifactFormatError, tiny_artifact, trust))


def test_trailing_and_missing_bytes(tiny_artifact, trust):
    data = tiny_artifact.read_bytes()
    tiny_artifact.write_bytes(data + b"\0")
    assert "trailing" in str(_refused(ArtifactFormatError, tiny_artifact, trust))
    tiny_artifact.write_bytes(data[:-1])
    assert "truncated" in str(_refused(ArtifactFormatError, tiny_artifact, trust))
    tiny_artifact.write_bytes(data[:10])
    _refused(ArtifactFormatError, tiny_artifact, trust)
    tiny_artifact.write_bytes(b"")
    _refused(ArtifactFormatError, tiny_artifact, trust)


def test_header_fields(tiny_artifact, trust):
    data = tiny_artifact.read_bytes()
    for offset, what in ((0, "magic"), (8, "format version"), (12, "reserved"),
                         (16, "manifest"), (24, "signatures"), (32, "offset"),
                         (40, "tensor section"), (63, "reserved"), (23, "manifest length"),
                         (47, "tensor section")):
        mutant = bytearray(data)
        mutant[offset] ^= 0x40
        tiny_artifact.write_bytes(bytes(mutant))
        message = str(_refused(ArtifactFormatError, tiny_artifact, trust))
        # the refusal names the file, then the part
        assert message.startswith(f"{tiny_artifact}: header: ") and what in message, \
            (offset, message)


def test_resigned_manifest_with_inconsistent_tensor_table(tiny_artifact, trust, key_a, tamper):
    data = tiny_artifact.read_bytes()

    def shape(m):
        m["tensors"][0]["shape"] = [3, 4]  # same bytes, different shape

    def offset(m):
        m["tensors"][1]["offset"] += 64

    def dtype(m):
        m["tensors"][0]["dtype"] = "int32"

    def sha(m):
        m["tensors"][2]["sha256"] = "0" * 64

    for mutate, error in ((shape, ArtifactFormatError), (offset, ArtifactFormatError),
                          (dtype, ArtifactFormatError), (sha, TensorHashError)):
        tiny_artifact.write_bytes(data)
        tamper.rewrite_manifest(tiny_artifact, mutate, key_a)
        _refused(error, tiny_artifact, trust)


def test_resigned_manifest_with_a_wrong_root_digest(tiny_artifact, trust, key_a, tamper):
    tamper.rewrite_manifest(tiny_artifact, lambda m: m.update(root_digest="ab" * 32), key_a)
    err = _refused(TensorHashError, tiny_artifact, trust)
    assert "root digest" in str(err)


def test_resigned_manifest_with_a_source_digest_that_does_not_match(tiny_artifact, trust,
                                                                    key_a, tamper):
    def swap(m):
        m["graph"]["nodes"][0]["name"] = "renamed"

    tamper.rewrite_manifest(tiny_artifact, swap, key_a, rederive=False)
    assert "source_digest" in str(_refused(ArtifactFormatError, tiny_artifact, trust))


def test_resigned_graph_that_breaks_a_shape_contract(tiny_artifact, trust, key_a, tamper):
    def rewire(m):
        m["graph"]["nodes"][0]["inputs"] = ["x", "fc.bias"]  # matmul (1,4) @ (3,)

    tamper.rewrite_manifest(tiny_artifact, rewire, key_a)
    err = _refused(GraphError, tiny_artifact, trust)
    assert err.node == "fc.matmul"


def test_resigned_graph_with_a_node_output_too_large_to_allocate(tiny_artifact, trust, key_a,
                                                                   tamper):
    """A node that would compute 10**10 elements (40 GB) is refused at load, naming it; no
    backend prepares it and nothing allocates."""
    def bomb(m):
        m["graph"]["nodes"].append({"name": "bomb", "op": "pad", "version": 1,
                                    "inputs": ["recur"], "outputs": ["bomb"],
                                    "attrs": {"mode": "constant", "pads": [[0, 0], [0, 10**10]],
                                              "value": 0.0}, "atomic": False})

    tamper.rewrite_manifest(tiny_artifact, bomb, key_a)
    err = _refused(GraphError, tiny_artifact, trust)
    assert err.node == "bomb" and "10000000003 elements" in str(err)


# --- compatibility -----------------------------------------------------------------------------


def test_other_host_abi_version(tiny_artifact, trust, key_a, tamper):
    tamper.rewrite_manifest(tiny_artifact, lambda m: m.update(abi_version=2), key_a)
    err = _refused(IncompatibleArtifactError, tiny_artifact, trust)
    assert "ABI version 2" in str(err) and "version 1" in str(err)


def test_missing_backend(tiny_artifact, trust):
    err = _refused(IncompatibleArtifactError, tiny_artifact, trust, backends={"onnxruntime"})
    assert "numpy" in str(err) and "onnxruntime" in str(err)


def _patched_table(monkeypatch, *extra: OpDef) -> None:
    """Register extra op versions in the op table for one test (it has no registration API)."""
    base = table._table()
    versions = {name: dict(v) for name, v in base.items()}
    for op in extra:
        versions.setdefault(op.name, {})[op.version] = op
    monkeypatch.setattr(table, "_table", lambda: versions)


class _ExtraOpsBackend(NumpyBackend):
    """The numpy backend plus the test's extra ops (mapped onto existing kernels)."""

    name = "numpy"

    def __init__(self, extra: dict[tuple[str, int], object]):
        self.extra = extra

    def supported_ops(self):
        ops = {k: set(v) for k, v in super().supported_ops().items()}
        for op, version in self.extra:
            ops.setdefault(op, set()).add(version)
        return {k: frozenset(v) for k, v in ops.items()}

    def prepare(self, node, consts, types):
        fn = self.extra.get((node.op, node.version))
        if fn is None:
            return super().prepare(node, consts, types)
        kernel = layers.generic(fn)(dict(node.attrs), list(consts), list(types), node.name)
        return lambda *dyn: (kernel(*dyn),)


def _graph_with(op: str, version: int):
    b = GraphBuilder("custom")
    x = b.input("x", (1, 4), "float32", "NC")
    y = b.op(op, b.op("add", x, b.constant("bias", np.ones(4, np.float32))), version=version,
             name="custom_node")
    b.output(y, "y", "NC")
    return b.build()


def test_unknown_op_version_from_a_newer_host(tmp_path, trust, key_a, monkeypatch):
    relu = next(op for op in GLUE_OPS if op.name == "relu")
    relu_v2 = OpDef("relu", 2, relu.inputs, relu.outputs, {}, relu.infer)
    path = tmp_path / "newer.pha"
    with monkeypatch.context() as patch:
        _patched_table(patch, relu_v2)
        build_artifact(_graph_with("relu", 2), path, latency_ms=1.0,
                       reference_backend=_ExtraOpsBackend({("relu", 2): numpy_glue.relu}))
    sign_artifact(path, key_a)
    err = _refused(IncompatibleArtifactError, path, trust)
    assert "relu v2" in str(err) and "custom_node" in str(err) and "[1]" in str(err)


def _atomic_op() -> OpDef:
    relu = next(op for op in GLUE_OPS if op.name == "relu")
    return OpDef("scatter_relu", 1, relu.inputs, relu.outputs, {}, relu.infer, atomic=True,
                 doc="A test op standing in for one whose kernel uses atomics.")


def test_unaudited_atomic_op(tmp_path, trust, key_a, monkeypatch):
    _patched_table(monkeypatch, _atomic_op())
    path = tmp_path / "atomic.pha"
    build_artifact(_graph_with("scatter_relu", 1), path, latency_ms=1.0,
                   reference_backend=_ExtraOpsBackend({("scatter_relu", 1): numpy_glue.relu}))
    sign_artifact(path, key_a)
    assert decode_manifest(path)["graph"]["nodes"][1]["atomic"] is True
    err = _refused(UnauditedOpError, path, trust)
    assert "scatter_relu v1" in str(err) and "custom_node" in str(err)
    _refused(UnauditedOpError, path, trust, audited_ops={("scatter_relu", 2)})
    loaded = _load(path, trust, audited_ops={("scatter_relu", 1)})
    assert loaded.audited_ops == (("custom_node", "scatter_relu", 1),)


def test_manifest_hiding_an_atomic_flag(tmp_path, trust, key_a, monkeypatch, tamper):
    _patched_table(monkeypatch, _atomic_op())
    path = tmp_path / "atomic.pha"
    build_artifact(_graph_with("scatter_relu", 1), path, latency_ms=1.0,
                   reference_backend=_ExtraOpsBackend({("scatter_relu", 1): numpy_glue.relu}))

    def hide(m):
        m["graph"]["nodes"][1]["atomic"] = False

    tamper.rewrite_manifest(path, hide, key_a)
    err = _refused(IncompatibleArtifactError, path, trust)
    assert "atomic" in str(err)


def decode_manifest(path):
    with ArtifactFile(path) as f:
        return decode(f.unverified_manifest_bytes)


# --- expiry and rollback -----------------------------------------------------------------------


def test_expired(tmp_path, tiny_graph, trust, key_a):
    path = tmp_path / "exp.pha"
    build_artifact(tiny_graph, path, reference_backend=NumpyBackend(), latency_ms=1.0,
                   expires=int(NOW) + 60)
    sign_artifact(path, key_a)
    _load(path, trust, now=NOW + 59)
    err = _refused(ExpiredArtifactError, path, trust, now=NOW + 60)
    assert "expired at" in str(err)

    past = tmp_path / "past.pha"  # judged by the real clock when now is not given
    build_artifact(tiny_graph, past, reference_backend=NumpyBackend(), latency_ms=1.0,
                   expires=int(time.time()) - 1)
    sign_artifact(past, key_a)
    with pytest.raises(ExpiredArtifactError):
        load_verified(past, trust=trust, rollback=None, backends={"numpy"})


def _versioned(tmp_path, graph, key, version, name="v"):
    path = tmp_path / f"{name}-{version}.pha"
    build_artifact(graph, path, version=version, reference_backend=NumpyBackend(),
                   latency_ms=1.0)
    sign_artifact(path, key)
    return path


def test_rollback_to_an_older_version(tmp_path, trust, key_a):
    graph = build_tiny_graph()
    store = RollbackStore(tmp_path / "state")
    new, old = (_versioned(tmp_path, graph, key_a, v) for v in ("1.10.0", "1.9.3"))
    _load(new, trust, rollback=store)
    assert store.accepted("tiny") == {"version": "1.10.0",
                                      "manifest_sha256": store.accepted("tiny")["manifest_sha256"]}
    err = _refused(RollbackError, old, trust, rollback=RollbackStore(tmp_path / "state"))
    assert "1.9.3" in str(err) and "1.10.0" in str(err)  # compared numerically
    _load(new, trust, rollback=store)  # the same file again is fine
    _load(old, trust, rollback=None)  # explicitly without rollback protection


def test_same_version_with_other_content_is_a_rollback(tmp_path, trust, key_a):
    store = RollbackStore(tmp_path / "state")
    first = _versioned(tmp_path, build_tiny_graph(seed=1), key_a, "2.0.0", "first")
    second = _versioned(tmp_path, build_tiny_graph(seed=2), key_a, "2.0.0", "second")
    _load(first, trust, rollback=store)
    assert "different manifest" in str(_refused(RollbackError, second, trust, rollback=store))


def test_verify_only_does_not_record(tmp_path, trust, key_a):
    store = RollbackStore(tmp_path / "state")
    path = _versioned(tmp_path, build_tiny_graph(), key_a, "3.0.0")
    _load(path, trust, rollback=store, record=False)
    assert store.accepted("tiny") is None and not store.path.exists()


def test_rollback_state_is_persisted_atomically(tmp_path, trust, key_a):
    state = tmp_path / "state"
    _load(_versioned(tmp_path, build_tiny_graph(), key_a, "1.0.0"), trust,
          rollback=RollbackStore(state))
    names = sorted(p.name for p in state.iterdir())
    assert names == ["rollback.json", "rollback.json.lock"]  # no temporary file left
    assert os.stat(state / "rollback.json").st_mode & 0o777 == 0o600


@pytest.mark.parametrize("content", [b"", b"{", b"[]", b'{"format": 1}', b'{"format": 2, '
                                     b'"artifacts": {}}', b'{"format": 1, "artifacts": {"x": '
                                     b'{"version": "1.0", "manifest_sha256": "00"}}}', b"\xff"])
def test_corrupt_rollback_state_is_never_reset(tmp_path, trust, tiny_artifact, content):
    state = tmp_path / "state"
    state.mkdir()
    (state / "rollback.json").write_bytes(content)
    err = _refused(StateFileError, tiny_artifact, trust, rollback=RollbackStore(state))
    assert "corrupt" in str(err)
    assert (state / "rollback.json").read_bytes() == content


# --- files that are not artifacts --------------------------------------------------------------


def test_missing_file(tmp_path, trust):
    err = _refused(ArtifactError, tmp_path / "nope.pha", trust)
    assert "cannot open" in str(err)


def test_a_fifo_is_refused_without_blocking(tmp_path, trust):
    fifo = tmp_path / "fifo.pha"
    os.mkfifo(fifo)
    assert "regular file" in str(_refused(ArtifactFormatError, fifo, trust))


def test_a_directory_is_refused(tmp_path, trust):
    _refused(ArtifactError, tmp_path, trust)


def test_file_size_cap(tiny_artifact, trust):
    from abi.artifact import Limits

    err = _refused(ArtifactFormatError, tiny_artifact, trust, limits=Limits(max_file_bytes=100))
    assert "cap" in str(err)


def test_every_header_bit_of_a_real_file_is_refused(tiny_artifact, trust):
    data = tiny_artifact.read_bytes()
    for i in range(64):
        for bit in range(8):
            mutant = bytearray(data)
            mutant[i] ^= 1 << bit
            tiny_artifact.write_bytes(bytes(mutant))
            with pytest.raises(ArtifactError):
                _load(tiny_artifact, trust)
