"""Fixtures of the acceptance tests: keys, a small signed artifact, a helper that accepts it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from plugin_host.artifacts import TrustStore, build_artifact, generate_key, sign_artifact
from plugin_host.artifacts.acceptance_record import ACCEPTANCE_ROLE
from plugin_host.builder import GraphBuilder
from plugin_host.graph import Graph
from plugins.numpy_backend import NumpyBackend

WRONG = "tests.plugins.wrong_layer"  # relu replaced by the identity


def small_graph(seed: int = 0) -> Graph:
    """relu -> linear -> tanh, with a recurrent ``h``: outputs ``y`` and ``h_next``."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder("small")
    x = b.input("x", (1, 16), "float32", "NC")
    h = b.state("h", (1, 8), "float32", "NC")
    w = b.constant("fc.weight", rng.standard_normal((16, 8)).astype(np.float32))
    y = b.op("add", b.op("matmul", b.op("relu", x, name="act"), w, name="fc"), h, name="recur")
    b.output(b.op("tanh", y, name="out"), "y", "NC")
    b.output(b.op("tanh", y, name="h_tanh"), "h_next", "NC", state_of="h")
    return b.build()


def build_signed(path: Path, key, *, seed: int = 0, version: str = "1.0.0",
                 latency_ms: float = 50.0, tolerance=(1e-4, 1e-5)) -> Path:
    build_artifact(small_graph(seed), path, name="small", version=version,
                   reference_backend=NumpyBackend(), latency_ms=latency_ms, seed=seed,
                   tolerances=tolerance)
    sign_artifact(path, key)
    return path


@pytest.fixture(scope="session")
def signer():
    """The artifact signing key."""
    return generate_key()


@pytest.fixture(scope="session")
def acceptor():
    """The acceptance bench key (signs records only)."""
    return generate_key()


@pytest.fixture(scope="session")
def trust(signer, acceptor) -> TrustStore:
    store = TrustStore()
    store.add_key(signer.public_key())
    store.add_key(acceptor.public_key(), roles=(ACCEPTANCE_ROLE,))
    return store


@pytest.fixture(scope="session")
def accepted(tmp_path_factory, signer, acceptor, trust):
    """``(artifact path, result, files)`` of one passing acceptance with a signed record."""
    from plugin_host.artifacts.acceptance import accept_artifact

    path = build_signed(tmp_path_factory.mktemp("accepted") / "small.pha", signer)
    result, files = accept_artifact(path, backend="numpy", executor_options={"trust": trust},
                                    keys=[acceptor], runs=40)
    return path, result, files


def ident(result) -> dict:
    """``verify_record``'s identification of the artifact of ``result``."""
    return {"name": result.name, "version": result.version, "root_digest": result.root_digest,
            "manifest_sha256": result.manifest_sha256}
