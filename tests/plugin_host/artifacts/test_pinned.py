"""load_pinned: an artifact from an open descriptor, pinned to digests already verified."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from abi.errors import ArtifactError
from plugin_host.artifacts import load_pinned, load_verified


def test_load_pinned_matches_the_verified_artifact(tiny_artifact, trust):
    verified = load_verified(tiny_artifact, trust=trust, rollback=None, backends={"numpy"})
    fd = os.open(tiny_artifact, os.O_RDONLY)
    try:
        graph, manifest, amap = load_pinned(fd, manifest_sha256=verified.manifest_sha256,
                                            root_digest=verified.manifest.root_digest)
        with pytest.raises(ArtifactError, match="not the one the host verified"):
            load_pinned(fd, manifest_sha256="0" * 64, root_digest=verified.manifest.root_digest)
    finally:
        os.close(fd)
    assert manifest.root_digest == verified.manifest.root_digest
    assert sorted(graph.tensors) == sorted(verified.graph.tensors)
    for name, array in graph.tensors.items():
        assert not array.flags.writeable
        np.testing.assert_array_equal(array, verified.graph.tensors[name])


def test_the_pinned_loader_does_not_import_the_signing_code():
    """The sandbox worker imports it: no keys, no cryptography in the worker."""
    code = ("import sys, plugin_host.artifacts.pinned; "
            "print('cryptography' in sys.modules, 'plugin_host.artifacts.keys' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.split() == ["False", "False"]
