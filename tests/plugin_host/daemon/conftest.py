"""Fixtures of the daemon tests: a copy of the demo policy with its own state folder, test
models signed with its key, a quiet daemon whose event lines a test reads, and a daemon run in
a thread while a test changes things under it."""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DEMO_POLICY = ROOT / "policies" / "demo.toml"


@pytest.fixture
def first_use(tmp_path) -> tuple[Path, Path]:
    """``(policy copy, state dir)`` before the demo's first use: nothing in the state dir."""
    policy = tmp_path / "demo.toml"
    shutil.copy(DEMO_POLICY, policy)
    return policy, tmp_path / "state"


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


def build_signed(graph, path: Path, state: Path, version: str = "1.0.0") -> None:
    """``graph`` built into the artifact ``path`` for numpy (worst case 50 ms) and signed with
    the demo key of ``state``."""
    from plugin_host.artifacts import build_artifact, load_private_key, sign_artifact
    from plugin_host.plugins import get_backend, get_plugin_manager

    build_artifact(graph, path, version=version, backends=["numpy"],
                   reference_backend=get_backend(get_plugin_manager(), "numpy"),
                   latency_ms=50.0)
    sign_artifact(path, load_private_key(state / "demo" / "signing.key"))


def own_artifact(demo_state, tmp_path_factory, graph, name: str) -> tuple[Path, Path, Path]:
    """(the demo policy copy, a copy of the demo state of its own, ``graph`` built into
    ``NAME.pha`` beside it and signed with the demo key)."""
    policy, state = demo_state
    folder = tmp_path_factory.mktemp(name)
    mine = folder / "state"
    shutil.copytree(state, mine)
    artifact = folder / f"{name}.pha"
    build_signed(graph, artifact, mine)
    return policy, mine, artifact


def point_at(text: str, name: str, artifact: Path, extra: str) -> str:
    """The demo policy's ``text`` with its [[artifact]] renamed ``name``, read from
    ``artifact``, no acceptance record required, and ``extra`` as its last lines."""
    text, n = re.subn(r'name = "demo"(\s*file = )"[^"]*"', rf'name = "{name}"\1"{artifact}"',
                      text)
    assert n == 1, "the demo policy's [[artifact]] changed: update point_at"
    text, n = re.subn("acceptance_required = true", "acceptance_required = false", text)
    assert n == 1, "the demo policy's acceptance_required changed: update point_at"
    text, n = re.subn(r"\n# --- plugins", f"\n{extra}\n\n# --- plugins", text)
    assert n == 1, "the demo policy's plugin section changed: update point_at"
    return text


def quiet_daemon(policy: Path, state: Path, **options):
    """``(daemon, its event lines)``: nothing printed, stats every 0.5 s, ``options`` as
    DaemonOptions."""
    from plugin_host.daemon import Daemon, DaemonOptions, EventLog, LineSink
    from plugin_host.policy import load_policy

    sink = LineSink()
    daemon = Daemon(load_policy(policy, state_dir=state), state_dir=state,
                    events=EventLog(sink), say=lambda _: None,
                    options=DaemonOptions(**{"stats_interval": 0.5, **options}))
    return daemon, sink.lines


def run_collecting(daemon, loaded=None) -> tuple[dict, list[dict], dict]:
    """Load ``daemon``, call ``loaded(daemon)`` (checks on the loaded daemon) if given, run it
    to its end collecting every model message, close it (also when a check fails); returns
    ``(summary, the messages' data, each camera's layout by name)``."""
    daemon.load()
    try:
        if loaded is not None:
            loaded(daemon)
        seen: list[dict] = []
        daemon.plugins.broker.topics["model"].connect(lambda m: seen.append(m.data))
        layouts = {c.name: c.layout for c in daemon.cameras}
        summary = daemon.run()
    finally:
        daemon.close()
    return summary, seen, layouts


def events(lines: list[str], kind: str) -> list[dict]:
    """The events of ``kind`` among the daemon's event ``lines``."""
    return [json.loads(line) for line in lines if f'"event":"{kind}"' in line]


def multi_camera_policy(policy: Path, cameras: list[dict], *, use: list[str] | None = None,
                        max_skew_ms: float = 10.0, width: int = 512, height: int = 256,
                        name: str = "cameras.toml") -> Path:
    """A copy of the demo ``policy`` beside it whose synthetic camera plugin provides
    ``cameras`` (each a table of the plugin's keys, e.g. ``{"name": "wide", "phase_ms": 5}``)
    at ``width`` x ``height`` NV12 20 Hz, and whose ``[cameras]`` runs ``use`` (default: all)
    matched within ``max_skew_ms``."""
    text = policy.read_text()
    entries = ", ".join("{" + ", ".join(f"{k} = {v!r}" if not isinstance(v, str)
                                        else f'{k} = "{v}"' for k, v in c.items()) + "}"
                        for c in cameras)
    config = (f'[plugin.config]\nwidth = {width}\nheight = {height}\nformat = "NV12"\n'
              f"rate = 20.0\ncameras = [{entries}]\n")
    text, n = re.subn(r'\[plugin\.config\]\nname = "road".*?\nrate = 20\.0\n', config, text,
                      flags=re.S)
    assert n == 1, "the demo policy's camera config changed: update multi_camera_policy"
    names = use if use is not None else [c["name"] for c in cameras]
    section = (f"[cameras]\nuse = [{', '.join(repr(n).replace(chr(39), chr(34)) for n in names)}]"
               f"\nmax_skew_ms = {max_skew_ms!r}\n")
    text, n = re.subn(r"\[cameras\]\n(#[^\n]*\n)*use = [^\n]*\nmax_skew_ms = [^\n]*\n", section,
                      text)
    assert n == 1, "the demo policy's [cameras] section changed: update multi_camera_policy"
    out = policy.parent / name
    out.write_text(text)
    return out


def wait_until(cond, timeout: float = 30.0) -> None:
    """Poll ``cond()`` every 20 ms until it is true; fail the test after ``timeout`` s."""
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, f"timed out after {timeout} s"
        time.sleep(0.02)


def replace_while_running(daemon, new: Path, artifact: Path, until, frames: int = 3) -> None:
    """With ``daemon`` running: once ``frames`` frames have run, ``new`` replaces ``artifact``
    (atomically, as an updater would); then wait for ``until()`` and ``frames`` frames more."""
    wait_until(lambda: daemon.stats.frames_run >= frames)
    os.replace(new, artifact)
    wait_until(until)
    at = daemon.stats.frames_run
    wait_until(lambda: daemon.stats.frames_run >= at + frames)  # frames keep flowing


@contextmanager
def running(daemon):
    """Run the loaded ``daemon`` in a thread for the ``with`` block; yields the dict that gets
    its summary once it has stopped (asked to stop on leaving the block)."""
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(daemon.run()), name="test-daemon")
    thread.start()
    try:
        yield result
    finally:
        daemon.request_stop("test")
        thread.join(timeout=60)
        assert not thread.is_alive(), "the daemon did not stop within 60 s of being asked"
