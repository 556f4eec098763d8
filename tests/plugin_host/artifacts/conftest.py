"""Fixtures of the artifact tests: keys, a tiny model, built and signed artifacts, and a tool
that rewrites an artifact's manifest (re-signed or not) the way an attacker would."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

from abi.artifact import (ArtifactFile, SignatureEntry, decode, encode, encode_signatures,
                          file_prefix, graph_digest, layers_summary, signed_message)
from plugin_host.artifacts import (TrustStore, build_artifact, generate_key, key_id,
                                   sign_artifact)
from plugin_host.builder import GraphBuilder
from plugin_host.graph import Graph
from plugins.numpy_backend import NumpyBackend

NOW = 1_800_000_000.0  # a fixed "now" for expiry checks


def build_tiny_graph(seed: int = 0) -> Graph:
    """A small model touching every kind of tensor: weights, BatchNorm running state, an
    Embedding fed from an input, and a recurrent state pair."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder("tiny")
    x = b.input("x", (1, 4), "float32", "NC")
    ids = b.input("ids", (1,), "int64", "N")
    h = b.state("h", (1, 3), "float32", "NC")
    w = b.constant("fc.weight", rng.standard_normal((4, 3)).astype(np.float32))
    bias = b.constant("fc.bias", rng.standard_normal(3).astype(np.float32))
    emb = b.constant("emb.weight", rng.standard_normal((5, 3)).astype(np.float32))
    y = b.op("add", b.op("matmul", x, w, name="fc.matmul"), bias, name="fc.add")
    y = b.op("add", y, b.op("embedding", ids, emb, name="emb"), name="mix")
    y = b.op("add", y, h, name="recur")
    bn = [b.constant(f"bn.{k}", v) for k, v in (
        ("weight", rng.uniform(0.5, 1.5, 3).astype(np.float32)),
        ("bias", rng.normal(0, 0.2, 3).astype(np.float32)),
        ("running_mean", rng.normal(0, 0.5, 3).astype(np.float32)),
        ("running_var", rng.uniform(0.5, 2.0, 3).astype(np.float32)),
        ("num_batches_tracked", np.array(100, dtype=np.int64)))]
    out = b.op("relu", b.op("batchnorm", y, *bn, name="bn", eps=1e-3, momentum=0.2), name="act")
    b.output(out, "y", "NC")
    b.output(b.op("tanh", y, name="h_tanh"), "h_next", "NC", state_of="h")
    return b.build()


@pytest.fixture(scope="session")
def key_a():
    return generate_key()


@pytest.fixture(scope="session")
def key_b():
    return generate_key()


@pytest.fixture(scope="session")
def key_c():
    return generate_key()


@pytest.fixture
def trust(key_a) -> TrustStore:
    store = TrustStore()
    store.add_key(key_a.public_key())
    return store


@pytest.fixture(scope="session")
def tiny_graph() -> Graph:
    return build_tiny_graph()


@pytest.fixture(scope="session")
def _tiny_template(tmp_path_factory, tiny_graph, key_a) -> Path:
    path = tmp_path_factory.mktemp("tiny") / "tiny.pha"
    build_artifact(tiny_graph, path, version="1.0.0", reference_backend=NumpyBackend(),
                   latency_ms=5.0)
    sign_artifact(path, key_a)
    return path


@pytest.fixture
def tiny_artifact(tmp_path, _tiny_template) -> Path:
    """A fresh copy of the tiny model's artifact, version 1.0.0, signed by key_a."""
    path = tmp_path / "tiny.pha"
    shutil.copyfile(_tiny_template, path)
    return path


@pytest.fixture(scope="session")
def demo_artifact(tmp_path_factory, key_a) -> Path:
    """The benchmark model of the design, signed by key_a (read-only: copy before mutating)."""
    from plugins.demo_model import build_demo_graph

    path = tmp_path_factory.mktemp("demo") / "demo.pha"
    build_artifact(build_demo_graph(seed=0), path, version="1.0.0",
                   reference_backend=NumpyBackend(), latency_ms=50.0)
    sign_artifact(path, key_a)
    return path


# --- tampering ---------------------------------------------------------------------------------


def read_parts(path: Path) -> tuple[bytes, tuple[SignatureEntry, ...], bytes]:
    """(manifest bytes, signature entries, tensor section bytes) of an artifact."""
    with ArtifactFile(path) as f:
        section = f.section()
        try:
            return f.unverified_manifest_bytes, f.unverified_signatures(), bytes(section)
        finally:
            section.release()


def write_parts(path: Path, manifest_bytes: bytes, signatures: list[SignatureEntry] | bytes,
                section: bytes, tensor_length: int | None = None) -> None:
    block = signatures if isinstance(signatures, bytes) else encode_signatures(signatures)
    length = len(section) if tensor_length is None else tensor_length
    path.write_bytes(file_prefix(manifest_bytes, block, length) + section)


def sign_bytes(manifest_bytes: bytes, *keys) -> list[SignatureEntry]:
    return [SignatureEntry(key_id(k), k.sign(signed_message(manifest_bytes))) for k in keys]


def rewrite_manifest(path: Path, mutate: Callable[[dict[str, Any]], Any], *keys,
                     rederive: bool = True) -> None:
    """Apply ``mutate`` to the decoded manifest, re-encode it and sign it with ``keys`` (none:
    keep the old signatures). With ``rederive`` the derived fields (source digest, layers) are
    recomputed, as a dishonest but careful builder would."""
    manifest_bytes, signatures, section = read_parts(path)
    manifest = decode(manifest_bytes)
    mutate(manifest)
    if rederive:
        manifest["provenance"]["source_digest"] = graph_digest(manifest["graph"])
        manifest["layers"] = layers_summary(manifest["graph"])
    new_bytes = encode(manifest)
    write_parts(path, new_bytes, sign_bytes(new_bytes, *keys) if keys else list(signatures),
                section)


@pytest.fixture
def tamper():
    """The tampering helpers, as one namespace."""
    class Tamper:
        read_parts = staticmethod(read_parts)
        write_parts = staticmethod(write_parts)
        sign_bytes = staticmethod(sign_bytes)
        rewrite_manifest = staticmethod(rewrite_manifest)
    return Tamper
