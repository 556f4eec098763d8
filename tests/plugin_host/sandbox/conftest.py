"""Fixtures of the sandbox tests: a key, small signed artifacts, secrets the worker must not
reach, and the malicious plugin's configuration."""

from __future__ import annotations

import shutil
import socket
import tempfile
from pathlib import Path

import numpy as np
import pytest

from plugin_host.artifacts import TrustStore, build_artifact, generate_key, sign_artifact
from plugin_host.builder import GraphBuilder
from plugin_host.graph import Graph
from plugins.numpy_backend import NumpyBackend

EVIL_MODULES = ("tests.plugins.evil_layer", "tests.plugins.evil_import")
#: the standard-library modules the malicious plugins import (this machine's Python lives
#: under a 0700 /root, which the unprivileged worker cannot read)
EVIL_PRELOAD = ("socket", "subprocess", "ctypes", "mmap", "signal", "resource", "gc", "json",
                "stat")


def build_redteam_graph(seed: int = 0, width: int = 16) -> Graph:
    """relu(x) (the op the malicious plugin replaces) -> linear -> + Embedding(ids) -> + h ->
    tanh; outputs ``y`` and the recurrent ``h_next``."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder("redteam")
    x = b.input("x", (1, width), "float32", "NC")
    ids = b.input("ids", (1,), "int64", "N")
    h = b.state("h", (1, 8), "float32", "NC")
    w = b.constant("fc.weight", rng.standard_normal((width, 8)).astype(np.float32))
    bias = b.constant("fc.bias", rng.standard_normal(8).astype(np.float32))
    emb = b.constant("emb.weight", rng.standard_normal((5, 8)).astype(np.float32))
    y = b.op("relu", x, name="act")
    y = b.op("add", b.op("matmul", y, w, name="fc.matmul"), bias, name="fc.add")
    y = b.op("add", y, b.op("embedding", ids, emb, name="emb"), name="mix")
    y = b.op("add", y, h, name="recur")
    b.output(b.op("tanh", y, name="out"), "y", "NC")
    b.output(b.op("tanh", y, name="h_tanh"), "h_next", "NC", state_of="h")
    return b.build()


def build_batch_graph(seed: int = 0) -> Graph:
    """A graph with a symbolic batch dim, for growing the shared regions."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder("batched")
    x = b.input("x", ("batch", 32), "float32", "NC")
    w = b.constant("fc.weight", rng.standard_normal((32, 4)).astype(np.float32))
    b.output(b.op("matmul", b.op("relu", x, name="act"), w, name="fc"), "y", "NC")
    return b.build()


@pytest.fixture(scope="session")
def sandbox_key():
    return generate_key()


@pytest.fixture(scope="session")
def sandbox_trust(sandbox_key) -> TrustStore:
    store = TrustStore()
    store.add_key(sandbox_key.public_key())
    return store


def _signed(path: Path, graph: Graph, key) -> Path:
    build_artifact(graph, path, version="1.0.0", reference_backend=NumpyBackend(),
                   latency_ms=5.0)
    sign_artifact(path, key)
    return path


@pytest.fixture(scope="session")
def redteam_artifact(tmp_path_factory, sandbox_key) -> Path:
    return _signed(tmp_path_factory.mktemp("redteam") / "redteam.pha", build_redteam_graph(),
                   sandbox_key)


@pytest.fixture(scope="session")
def batch_artifact(tmp_path_factory, sandbox_key) -> Path:
    return _signed(tmp_path_factory.mktemp("batched") / "batched.pha", build_batch_graph(),
                   sandbox_key)


@pytest.fixture(scope="session")
def secrets(tmp_path_factory, sandbox_key):
    """What the malicious plugin goes after: a root-only private key outside the worker's
    allowlist, a world-writable directory (so only Landlock stands in the way of a write), and
    a listening unix socket anyone may connect to (so only seccomp stands in the way)."""
    from cryptography.hazmat.primitives import serialization

    keydir = tmp_path_factory.mktemp("keys")
    key_path = keydir / "signing.key"
    key_path.write_bytes(sandbox_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    key_path.chmod(0o600)
    open_dir = Path(tempfile.mkdtemp(prefix="plugin-host-redteam-", dir="/tmp"))
    open_dir.chmod(0o1777)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock_path = open_dir / "host.sock"
    listener.bind(str(sock_path))
    sock_path.chmod(0o777)
    listener.listen(8)
    try:
        yield {"key": key_path, "open_dir": open_dir, "unix_socket": sock_path}
    finally:
        listener.close()
        shutil.rmtree(open_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def redteam_graph() -> Graph:
    return build_redteam_graph()


@pytest.fixture(scope="session")
def evil_kwargs(secrets, redteam_artifact, sandbox_trust) -> dict:
    """SandboxedExecutor arguments that load the malicious plugins, with relu allowed to be
    replaced by the first, and the attack targets in the worker's environment."""
    env = {"EVIL_KEY_PATH": str(secrets["key"]), "EVIL_UNIX_SOCKET": str(secrets["unix_socket"]),
           "EVIL_ARTIFACT_PATH": str(redteam_artifact), "EVIL_WRITE_DIR": str(secrets["open_dir"])}
    return dict(trust=sandbox_trust, plugin_modules=EVIL_MODULES,
                kernel_overrides={"relu": EVIL_MODULES[0]}, preload_modules=EVIL_PRELOAD, env=env)
