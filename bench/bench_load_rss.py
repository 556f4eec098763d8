"""Resident memory growth when loading an artifact, against its tensor bytes (zero-copy check).

Builds and signs the benchmark model's artifact and a tiny warm-up artifact in a temporary
directory, then starts a fresh Python process that imports the host, loads the tiny artifact
(so code paths, caches and the op table are warm), reads VmRSS from /proc/self/status, loads
the benchmark artifact with ``load_verified``, keeps it, and reads VmRSS again. Hashing
touches every tensor page, so the mapped file is resident; a copy would double that.

Prints the tensor bytes, the RSS growth (and its anonymous / file-backed split) and the ratio
(target: <= 1.1x).

    .venv/bin/python bench/bench_load_rss.py
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGET = 1.1


def _status() -> dict[str, int]:
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
                fields[key] = int(value.split()[0]) * 1024
    return fields


def child(demo: str, tiny: str, public_key: str) -> None:
    from plugin_host.artifacts import TrustStore, load_verified

    trust = TrustStore()
    trust.add_key_file(public_key)
    warm = load_verified(tiny, trust=trust, rollback=None, backends={"numpy"})
    gc.collect()
    before = _status()
    loaded = load_verified(demo, trust=trust, rollback=None, backends={"numpy"})
    gc.collect()
    after = _status()
    tensor_bytes = loaded.manifest.section_length
    print(json.dumps({"before": before, "after": after, "tensor_bytes": tensor_bytes,
                      "tensors": len(loaded.tensors), "warm": warm.name}))


def _tiny_graph():
    import numpy as np

    from plugin_host.builder import GraphBuilder

    b = GraphBuilder("warmup")
    x = b.input("x", (1, 8), "float32", "NC")
    w = b.constant("w", np.ones((8, 8), np.float32))
    b.output(b.op("relu", b.op("matmul", x, w)), "y", "NC")
    return b.build()


def main() -> int:
    from cryptography.hazmat.primitives import serialization

    from plugin_host.artifacts import build_artifact, generate_key, sign_artifact
    from plugins.demo_model import build_demo_graph
    from plugins.numpy_backend import NumpyBackend

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        key = generate_key()
        (tmp / "key.pub").write_bytes(key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
        for graph, name in ((build_demo_graph(seed=0), "demo.pha"), (_tiny_graph(), "tiny.pha")):
            build_artifact(graph, tmp / name, version="1.0.0", reference_backend=NumpyBackend(),
                           latency_ms=50.0)
            sign_artifact(tmp / name, key)
        result = subprocess.run(
            [sys.executable, __file__, "--child", str(tmp / "demo.pha"), str(tmp / "tiny.pha"),
             str(tmp / "key.pub")], capture_output=True, text=True, check=True, cwd=ROOT)
    r = json.loads(result.stdout)
    growth = {k: r["after"][k] - r["before"][k] for k in r["after"]}
    n = r["tensor_bytes"]
    ratio = growth["VmRSS"] / n
    print(f"tensor bytes of the artifact: {n / 1e6:.2f} MB ({r['tensors']} tensors)")
    print(f"RSS growth on load_verified:  {growth['VmRSS'] / 1e6:.2f} MB "
          f"(anonymous {growth['RssAnon'] / 1e6:+.2f} MB, file-backed "
          f"{growth['RssFile'] / 1e6:+.2f} MB)")
    verdict = "meets" if ratio <= TARGET else "MISSES"
    print(f"RSS growth / tensor bytes: {ratio:.3f}x ({verdict} the target of <= {TARGET}x)")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        child(*sys.argv[2:])
        sys.exit(0)
    sys.exit(main())
