"""First use of the demo policy: create its signing key and its artifact.

``plugin-host run --policy policies/demo.toml`` must work right after installing, so when the
policy allows an artifact named ``demo`` whose file does not exist yet, and that file and the
trusted key both live inside the host's state folder (``${STATE_DIR}``, README "Policy
files"), the daemon creates them there before loading anything:

- ``<dir>/signing.key`` (mode 0600) and ``signing.pub``: a new Ed25519 key pair, where ``<dir>``
  is the folder of the policy's ``[[trust.key]] file``, named after it;
- ``<dir>/demo.pha``: the benchmark model (``plugin-host build --demo``, seed 0, version
  :data:`DEMO_VERSION`, declared worst-case latency :data:`DEMO_LATENCY_MS`), signed with it.

It says so on stdout, naming both files. Nothing is created outside the state folder (an
integrator's files are never written) and nothing existing is overwritten; a missing artifact
with an existing public key but no private key next to it is refused (the demo cannot sign).
Everything else about the files (signature, trust, rollback) is then checked as for any
artifact: this module creates, it never vouches.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from ..errors import PluginHostError

__all__ = ["ensure_demo_artifact", "DEMO_NAME", "DEMO_VERSION", "DEMO_LATENCY_MS"]

DEMO_NAME = "demo"
DEMO_VERSION = "1.0.0"
#: the declared worst case of one call; the model takes ~4 ms here, the frame period is 50 ms
DEMO_LATENCY_MS = 40.0


def _inside(path: Path, folder: Path) -> bool:
    try:
        Path(os.path.realpath(path)).relative_to(os.path.realpath(folder))
        return True
    except ValueError:
        return False


def ensure_demo_artifact(policy, state_dir: str | os.PathLike,
                         say: Callable[[str], None] = print) -> bool:
    """Create the demo key and artifact if ``policy`` needs them (see the module); True when
    something was created."""
    rule = policy.artifact(DEMO_NAME)
    if rule is None or Path(rule.file).exists():
        return False
    state = Path(state_dir)
    keys = [k for k in policy.trust.keys if "artifact" in k.roles]
    if not _inside(rule.file, state) or not keys or not all(_inside(k.file, state)
                                                            for k in keys):
        return False  # not the demo layout: the normal "file not found" refusal follows
    key = keys[0]
    pub = Path(key.file)
    private = pub.with_suffix(".key")
    from ..artifacts import build_artifact, load_private_key, sign_artifact, write_keypair
    from ..plugins import get_backend, get_plugin_manager, model_builders

    created_key = False
    if not pub.exists():
        if private.exists():
            raise PluginHostError(f"first use of the demo: {private} exists without {pub}; "
                                  f"remove {pub.parent} to start over")
        write_keypair(pub.parent, name=pub.stem)
        created_key = True
    elif not private.exists():
        raise PluginHostError(f"first use of the demo: the artifact {rule.file} is missing and "
                              f"there is no private key {private} to sign a new one; remove "
                              f"{pub.parent} to start over")
    pm = get_plugin_manager()  # the built-in plugins: the demo model builder, numpy backend
    builders = model_builders(pm)
    if DEMO_NAME not in builders:
        raise PluginHostError("first use of the demo: no model builder named 'demo' is "
                              "installed")
    Path(rule.file).parent.mkdir(parents=True, exist_ok=True)
    graph = builders[DEMO_NAME](0)
    manifest = build_artifact(graph, rule.file, name=DEMO_NAME, version=DEMO_VERSION,
                              backends=[rule.backend], reference_backend=get_backend(pm, "numpy"),
                              latency_ms=DEMO_LATENCY_MS, seed=0)
    sign_artifact(rule.file, load_private_key(private))
    if created_key:
        say(f"first use: created the demo signing key {private} (public key {pub})")
    say(f"first use: built and signed the demo artifact {rule.file} "
        f"({manifest.name} {manifest.version}, declared latency {manifest.latency_ms:g} ms) "
        f"in the state folder {state}; remove {pub.parent} to start over")
    return True
