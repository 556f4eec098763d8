"""Artifact hot-swap: a newly accepted version replaces the running one between two frames
(at most one frame dropped, state reset "artifact swap", rollback state updated); a file that
fails verification is refused and the running artifact kept, with the reason logged."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from .conftest import events, quiet_daemon, replace_while_running, running, wait_until


@pytest.fixture
def own_state(demo_state, tmp_path) -> tuple[Path, Path]:
    """A private copy of the demo state: these tests replace the artifact and move the
    rollback state forward."""
    policy, state = demo_state
    mine = tmp_path / "state"
    shutil.copytree(state, mine)
    return policy, mine


def _build(path: Path, state: Path, version: str, seed: int) -> None:
    from plugin_host.artifacts import build_artifact, load_private_key, sign_artifact
    from plugin_host.daemon.demo_setup import DEMO_LATENCY_MS
    from plugin_host.plugins import get_backend, get_plugin_manager, model_builders

    pm = get_plugin_manager()
    graph = model_builders(pm)["demo"](seed)
    build_artifact(graph, path, name="demo", version=version, backends=["numpy"],
                   reference_backend=get_backend(pm, "numpy"), latency_ms=DEMO_LATENCY_MS,
                   seed=seed)
    sign_artifact(path, load_private_key(state / "demo" / "signing.key"))


def _accept(path: Path, state: Path, artifact: Path) -> None:
    """Acceptance of ``path`` on numpy, its record written where the policy looks for
    ``artifact``'s (``plugin-host accept --out``)."""
    from plugin_host.artifacts import TrustStore, load_private_key, load_public_key
    from plugin_host.artifacts.acceptance import accept_artifact

    trust = TrustStore()
    trust.add_key(load_public_key(state / "demo" / "signing.pub"))
    accept_artifact(path, backend="numpy", executor_options={"trust": trust}, runs=20,
                    keys=[load_private_key(state / "demo" / "signing.key")],
                    out=f"{artifact}.accept-numpy")


def _started(policy_path: Path, state: Path):
    """(loaded daemon that polls for a new artifact every 0.2 s, its event lines)."""
    daemon, lines = quiet_daemon(policy_path, state, duration=60.0, swap_poll=0.2)
    daemon.load()
    return daemon, lines


def test_new_version_swapped_in_with_at_most_one_frame_dropped(own_state, tmp_path):
    policy_path, state = own_state
    artifact = state / "demo" / "demo.pha"
    new = tmp_path / "demo-1.1.0.pha"
    _build(new, state, "1.1.0", seed=1)
    daemon, lines = _started(policy_path, state)
    with running(daemon) as result:
        old_ex = daemon.executor
        old_pid = old_ex.pid
        wait_until(lambda: daemon.stats.frames_run >= 10)
        dropped_before = daemon.stats.dropped
        _accept(new, state, artifact)  # the policy requires the new version's record too
        os.replace(new, artifact)  # atomically, as an updater would
        wait_until(lambda: daemon.artifact_swaps == 1)
        run_at_swap = daemon.stats.frames_run
        wait_until(lambda: daemon.stats.frames_run >= run_at_swap + 10)
        dropped_across = daemon.stats.dropped - dropped_before
        assert daemon.executor is not old_ex and daemon.executor.manifest.version == "1.1.0"
        wait_until(lambda: old_ex.pid is None or not Path(f"/proc/{old_pid}").exists(), 30)
    assert dropped_across <= 1, dropped_across
    assert result["resets_by_reason"].get("artifact swap") == 1
    assert result["worker_restarts"] == 0 and result["leaks_at_stop"] == 0
    swapped = events(lines, "artifact_swapped")
    assert len(swapped) == 1 and swapped[0]["old_version"] == "1.0.0" \
        and swapped[0]["version"] == "1.1.0"
    resets = [e for e in events(lines, "reset") if e["reason"] == "artifact swap"]
    assert len(resets) == 1
    assert not events(lines, "swap_refused")
    from plugin_host.artifacts import RollbackStore

    assert RollbackStore(state).accepted("demo")["version"] == "1.1.0"
    # the published outputs after the swap come from the new artifact
    assert daemon.artifact_swaps == 1 and daemon.artifact_swaps_refused == 0


@pytest.mark.parametrize("bad", ["tampered", "unsigned_garbage", "older_version"])
def test_bad_new_file_refused_and_old_kept(own_state, tmp_path, bad):
    policy_path, state = own_state
    artifact = state / "demo" / "demo.pha"
    new = tmp_path / "bad.pha"
    if bad == "tampered":
        _build(new, state, "1.2.0", seed=2)
        data = bytearray(new.read_bytes())
        data[len(data) // 2] ^= 0xFF  # one flipped byte in the middle of the weights
        new.write_bytes(bytes(data))
    elif bad == "unsigned_garbage":
        new.write_bytes(b"not an artifact at all\n" * 100)
    else:
        _build(new, state, "0.5.0", seed=3)  # above min_version, below 1.0.0: a rollback
    daemon, lines = _started(policy_path, state)
    with running(daemon) as result:
        old_ex = daemon.executor
        replace_while_running(daemon, new, artifact, lambda: daemon.artifact_swaps_refused == 1,
                              frames=5)
        assert daemon.executor is old_ex and daemon.executor.manifest.version == "1.0.0"
    refused = events(lines, "swap_refused")
    assert len(refused) == 1 and refused[0]["kept_version"] == "1.0.0"
    assert refused[0]["error"] and refused[0]["why"] == "file changed"
    assert daemon.artifact_swaps == 0
    assert "artifact swap" not in result["resets_by_reason"]
    assert result["worker_restarts"] == 0 and result["leaks_at_stop"] == 0
    from plugin_host.artifacts import RollbackStore

    assert RollbackStore(state).accepted("demo")["version"] == "1.0.0"


def test_request_swap_with_the_same_file_changes_nothing(own_state):
    policy_path, state = own_state
    daemon, lines = _started(policy_path, state)
    with running(daemon):
        old_ex = daemon.executor
        wait_until(lambda: daemon.stats.frames_run >= 3)
        daemon.request_swap("SIGHUP")
        wait_until(lambda: events(lines, "swap_unchanged"))
        assert daemon.executor is old_ex
    assert daemon.artifact_swaps == 0 and daemon.artifact_swaps_refused == 0


def test_sighup_rechecks_the_artifact_in_the_cli(own_state):
    import signal

    from tests.cli_child import running_cli

    policy, state = own_state
    with running_cli("run", "--policy", str(policy), "--state-dir", str(state),
                     "--swap-poll", "0", "--duration", "4") as proc:
        assert proc.stdout.readline().startswith("running artifact")
        time.sleep(0.5)
        proc.send_signal(signal.SIGHUP)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-2000:]
    assert '"event":"swap_check","why":"SIGHUP"' in err
    assert '"event":"swap_unchanged"' in err and "stopped by duration" in out
