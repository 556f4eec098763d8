"""Fixtures of the daemon tests: a copy of the demo policy with its own state folder."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DEMO_POLICY = ROOT / "policies" / "demo.toml"


@pytest.fixture(scope="session")
def demo_state(tmp_path_factory) -> tuple[Path, Path]:
    """``(policy copy, state dir)`` whose demo key and artifact exist (created once)."""
    from plugin_host.daemon.demo_setup import ensure_demo_artifact
    from plugin_host.policy import load_policy

    base = tmp_path_factory.mktemp("daemon")
    policy = base / "demo.toml"
    shutil.copy(DEMO_POLICY, policy)
    state = base / "state"
    assert ensure_demo_artifact(load_policy(policy, state_dir=state), state, lambda _: None)
    return policy, state
