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


def multi_camera_policy(policy: Path, cameras: list[dict], *, use: list[str] | None = None,
                        max_skew_ms: float = 10.0, width: int = 512, height: int = 256,
                        name: str = "cameras.toml") -> Path:
    """A copy of the demo ``policy`` beside it whose synthetic camera plugin provides
    ``cameras`` (each a table of the plugin's keys, e.g. ``{"name": "wide", "phase_ms": 5}``)
    at ``width`` x ``height`` NV12 20 Hz, and whose ``[cameras]`` runs ``use`` (default: all)
    matched within ``max_skew_ms``."""
    import re

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
