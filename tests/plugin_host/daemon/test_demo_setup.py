"""The demo's first use stopped part-way (a kill, a power loss): the next start finishes it."""

from __future__ import annotations

import pytest

import plugin_host.artifacts
from plugin_host.daemon.demo_setup import ensure_demo_artifact
from plugin_host.policy import load_allowed_artifact, load_policy


class _Killed(BaseException):
    """The process ending at this point (nothing after it runs)."""


def _loaded(first_use):
    policy, state = first_use
    return load_policy(policy, state_dir=state), state


def test_stopped_between_build_and_signature_it_leaves_no_unsigned_artifact(first_use,
                                                                              monkeypatch):
    policy, state = _loaded(first_use)

    def killed(path, key, **kwargs):
        raise _Killed()

    # where demo_setup imports it from (the package keeps what it imported lazily)
    monkeypatch.setattr(plugin_host.artifacts, "sign_artifact", killed, raising=False)
    with pytest.raises(_Killed):
        ensure_demo_artifact(policy, state, lambda _text: None)
    demo = state / "demo"
    assert not (demo / "demo.pha").exists()  # an unsigned one would be refused at every start
    assert (demo / ".demo.pha.first-use").exists()

    monkeypatch.undo()
    said: list[str] = []
    assert ensure_demo_artifact(policy, state, said.append)
    assert not (demo / ".demo.pha.first-use").exists()
    assert any(line.startswith("first use: built and signed") for line in said)
    checked = load_allowed_artifact(policy, "demo", rollback=None, available_backends={"numpy"},
                                    record=False)
    assert checked.manifest.name == "demo" and checked.signers


def test_stopped_between_the_key_files_it_writes_the_public_key_from_the_private(first_use):
    from plugin_host.artifacts import write_keypair

    policy, state = _loaded(first_use)
    private, public, _ = write_keypair(state / "demo", name="signing")
    expected = public.read_bytes()
    public.unlink()
    said: list[str] = []
    assert ensure_demo_artifact(policy, state, said.append)
    assert public.read_bytes() == expected and public.stat().st_mode & 0o777 == 0o644
    assert said[0] == f"first use: wrote the public key {public} of the demo signing key {private}"
    assert not any("created the demo signing key" in line for line in said)
