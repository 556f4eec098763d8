"""load_allowed_artifact: an artifact loads only on the policy's terms."""

from __future__ import annotations

import dataclasses

import pytest

from abi.errors import IncompatibleArtifactError, PluginHostError
from plugin_host.artifacts import (RollbackStore, build_artifact, load_private_key,
                                   sign_artifact, write_keypair)
from plugin_host.builder import GraphBuilder
from plugin_host.errors import ArtifactNotAllowedError, RevokedKeyError, ThresholdError
from plugin_host.policy import load_allowed_artifact, parse_policy


@pytest.fixture(scope="module")
def signed(tmp_path_factory):
    """``(dir, key id)``: keys/a.{key,pub}, keys/b.pub and model-1.0.0.pha / model-2.0.0.pha
    signed by a."""
    d = tmp_path_factory.mktemp("allowed")
    _, _, kid = write_keypair(d / "keys", name="a")
    write_keypair(d / "keys", name="b")
    for version in ("1.0.0", "2.0.0"):
        b = GraphBuilder("model")
        x = b.input("x", (1, 4), "float32", "NC")
        b.output(b.op("relu", x), "y", "NC")
        path = d / f"model-{version}.pha"
        build_artifact(b.build(), path, version=version, latency_ms=5.0)
        sign_artifact(path, load_private_key(d / "keys" / "a.key"))
    return d, kid


def policy(d, *, version="2.0.0", extra="", trust="", min_version="1.5.0", name="model"):
    return parse_policy(f'''format = 1
[trust]
default_threshold = 1
{trust}
[[trust.key]]
file = "keys/a.pub"
roles = ["artifact"]
[[trust.key]]
file = "keys/b.pub"
roles = ["artifact"]
[[artifact]]
name = "{name}"
file = "model-{version}.pha"
backend = "numpy"
min_version = "{min_version}"
{extra}''', path=str(d / "policy.toml"))


def test_loads_and_records(signed, tmp_path):
    d, _ = signed
    rollback = RollbackStore(tmp_path)
    loaded = load_allowed_artifact(policy(d), "model", rollback=rollback,
                                   available_backends={"numpy", "other"})
    assert (loaded.name, loaded.version) == ("model", "2.0.0")
    assert loaded.graph.outputs[0].name == "y"
    assert rollback.accepted("model")["version"] == "2.0.0"


def test_unlisted_name(signed, tmp_path):
    d, _ = signed
    with pytest.raises(ArtifactNotAllowedError, match="allows no artifact named 'other'"):
        load_allowed_artifact(policy(d), "other", rollback=None, available_backends={"numpy"})


def test_below_min_version_is_refused_and_not_recorded(signed, tmp_path):
    d, _ = signed
    rollback = RollbackStore(tmp_path)
    with pytest.raises(ArtifactNotAllowedError, match="1.0.0 is below the minimum version 1.5.0"):
        load_allowed_artifact(policy(d, version="1.0.0"), "model", rollback=rollback,
                              available_backends={"numpy"})
    assert rollback.accepted("model") is None


def test_file_holding_another_artifact(signed):
    d, _ = signed
    with pytest.raises(ArtifactNotAllowedError, match="holds artifact 'model'"):
        load_allowed_artifact(policy(d, name="driving"), "driving", rollback=None,
                              available_backends={"numpy"})


def test_only_the_rules_backend(signed):
    d, _ = signed
    with pytest.raises(IncompatibleArtifactError):
        load_allowed_artifact(policy(d), "model", rollback=None, available_backends={"other"})


def test_trust_comes_from_the_policy(signed):
    d, kid = signed
    with pytest.raises(ThresholdError, match="needs 2 of 2"):
        load_allowed_artifact(policy(d, trust="thresholds = { model = 2 }"), "model",
                              rollback=None, available_backends={"numpy"})
    with pytest.raises(RevokedKeyError):
        load_allowed_artifact(policy(d, trust=f'revoked = ["{kid}"]'), "model",
                              rollback=None, available_backends={"numpy"})


def test_plugins_extra_checks_run(signed):
    d, _ = signed

    class Plugins:
        def verify_artifact(self, manifest, path):
            raise PluginHostError(f"{manifest.name}: refused by a plugin")

    with pytest.raises(PluginHostError, match="refused by a plugin"):
        load_allowed_artifact(policy(d), "model", rollback=None, available_backends={"numpy"},
                              plugins=Plugins())


def test_size_cap_comes_from_the_policy(signed):
    d, _ = signed
    pol = policy(d)
    tiny = dataclasses.replace(pol, limits=dataclasses.replace(pol.limits, artifact_max_mb=1))
    assert tiny.limits.artifact_limits().max_file_bytes == 2**20
    load_allowed_artifact(tiny, "model", rollback=None, available_backends={"numpy"})
