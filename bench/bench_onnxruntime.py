"""The onnxruntime backend through the host vs bare onnxruntime on the same ONNX model.

Builds the design's benchmark model as a signed artifact (an ephemeral key) targeting the
onnxruntime backend, then times one inference per call on the same inputs:

* ``host``: the real path, SandboxedExecutor with ``backend="onnxruntime"`` (what the daemon
  and ``plugin-host infer`` use): host-side ABI and Embedding checks, the inputs copied into
  the shared region, one message each way, the worker's executor checking the index values
  and running the backend's one session, outputs copied out;
* ``bare``: onnxruntime alone, ``InferenceSession.run`` on the same ONNX model (the backend's
  conversion of the same verified graph: same weights, same nodes) with the same session
  options (threads, sequential, all optimizations, no spinning);
* ``host-zero-copy``: the host with the inputs written once into the shared region's input
  buffers (the frame path: no copy per call), also held to the target;
* ``host-colocated``: that, with co-location (``SandboxLimits.cpu = "auto"``: the calling
  thread and the worker's main thread pinned to one CPU, the worker's onnxruntime pool to the
  other; ``plugin_host/sandbox/placement.py``), also held to the target;
* ``floor``: bare onnxruntime in a plain child process, woken by one socket message and
  answering with one (no sandbox, no checks, no shared memory): what crossing a process
  boundary at all costs on this machine, for reading the sides above; ``floor-colocated``:
  the same with the child's main thread and the calling thread on one CPU and the child's
  onnxruntime pool on the other (what ``host-colocated`` should be read against);
* ``bare-pinned``: bare onnxruntime with its threads placed as co-location places a
  worker's (the thread calling ``run`` on the last CPU, the onnxruntime pool on the others):
  what the placement alone does, without the process boundary;
* breakdown: ``inproc``, the Executor on the onnxruntime backend in the calling process (no
  sandbox); ``bare-spin`` and ``host-spin``, the same with onnxruntime's intra-op threads
  spin-waiting between calls (onnxruntime's default, which the backend turns off: a spinning
  pool competes with the host process for the two cores; see the README).

Then, for reading the ratios: the host's time per call on the input-buffer path split in two,
with default placement and co-located: the worker's own time (its executor with the model's
run, and writing the outputs; ``last_worker_seconds``) and everything outside it (the host's
share, both switches between the processes, the worker's receive and answer), against the
5 % the target leaves.

Then the same comparison at the daemon's pace, one call every 50 ms (a 20 Hz camera): bare,
bare placed, the host on input buffers with default placement and co-located, and the
co-located floor, in paced blocks (``--paced-rounds``; 0 leaves it out). Between frames the
CPUs go idle and the caches cold, which costs every side, and the placement of onnxruntime's
threads then matters far more than back to back.

With ``--spin``, last, the spinning question at the daemon's real pace: one call every 50 ms
(20 Hz) through the host with and without spinning, printing the median and the worker's CPU
time per frame (``/proc/<pid>/stat``): back-to-back calls favour spinning, but between frames
a spinning pool keeps burning a core that the host's cameras and IPC need.

Target (issue 6): the host's median at most 1.05x bare onnxruntime's. DESIGN.md's general rule
for host overhead, at most +5 % or +150 us whichever is larger, is printed beside it for the
input-buffer sides.

Each side runs in its own child process; the parent asks them in turn for blocks of timed
calls with a pause between blocks, and starts the children afresh several times
(bench/alternate.py), so drift in the machine's load, and a process's own luck, fall on every
side alike.

    .venv/bin/python bench/bench_onnxruntime.py [--runs 20] [--rounds 16] [--generations 4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.alternate import alternate_script, serve_side, side_parser  # noqa: E402
from bench.fixtures import demo_step_inputs as _inputs  # noqa: E402
from bench.fixtures import in_input_buffers, signed_demo, trust_store  # noqa: E402

#: seconds between blocks: a spinning onnxruntime pool spins for a while after its last call
PAUSE = 0.25
TARGET = 1.05
#: DESIGN.md "Targets": host overhead at most +5 % or +150 us, whichever is larger (the
#: rule bench_sandbox judges by); printed beside the issue's 1.05x for reference
DESIGN_FLOOR_MS = 0.150


def _verified_graph(artifact: str, pub: str):
    from plugin_host.artifacts import load_verified

    return load_verified(artifact, trust=trust_store(pub), rollback=None,
                         backends={"onnxruntime"}).graph


def _bare(artifact: str, pub: str, *, spinning: bool = False):
    from plugin_host.executor import entry_index_checks
    from plugins.onnxruntime_backend import convert, session

    graph = _verified_graph(artifact, pub)
    model, _ = convert.to_onnx(
        graph.name, inputs=[(s.name, graph.types[s.name]) for s in graph.inputs],
        outputs=[(s.name, graph.types[s.name]) for s in graph.outputs], nodes=graph.nodes,
        consts=graph.tensors, types=graph.types,
        checked_indices=frozenset(name for name, _, _ in entry_index_checks(graph)))
    ort = session.load()
    sess = ort.InferenceSession(model.SerializeToString(),
                                session.session_options(spinning=spinning),
                                providers=["CPUExecutionProvider"])
    inputs = _inputs()
    return (lambda: sess.run(None, inputs)), (lambda: None)


def _bare_pinned(artifact: str, pub: str):
    """Bare onnxruntime, its threads placed as ``SandboxLimits(cpu="auto")`` places a
    worker's: this thread (the one calling ``run``) on the last CPU, the pool on the rest."""
    import os

    from plugin_host.sandbox import placement

    call, close = _bare(artifact, pub)
    call()  # the pool's threads exist
    cpus = placement.usable_cpus()
    placement.pin_worker(os.getpid(), max(cpus), cpus)
    return call, close


def _floor(artifact: str, pub: str, *, colocate: bool = False):
    """Bare onnxruntime in a plain child process (this script, ``--bare-peer``), one byte
    each way over a socketpair per call; ``colocate``: placed as ``SandboxLimits(cpu="auto")``
    places a worker and its caller."""
    import socket
    import subprocess

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    child = subprocess.Popen([sys.executable, __file__, "--bare-peer", str(theirs.fileno()),
                              artifact, pub], pass_fds=(theirs.fileno(),))
    theirs.close()
    if ours.recv(16) != b"ready":
        raise SystemExit("the floor's child failed to start")
    if colocate:  # the child's session (and its thread pool) exists once it said ready
        from plugin_host.sandbox import placement

        cpus = placement.usable_cpus()
        placement.pin_worker(child.pid, max(cpus), cpus)
        placement.pin_thread(max(cpus))

    def call() -> None:
        ours.send(b"c")
        ours.recv(16)

    def close() -> None:
        ours.close()
        child.wait(timeout=30)

    return call, close


def _serve_bare_peer(fd: int, artifact: str, pub: str) -> None:
    import socket

    call, _ = _bare(artifact, pub)
    sock = socket.socket(fileno=fd)
    sock.send(b"ready")
    while sock.recv(16):
        call()
        sock.send(b"r")


def _inproc(artifact: str, pub: str):
    from plugin_host.executor import Executor
    from plugins.onnxruntime_backend import OnnxruntimeBackend

    executor = Executor(_verified_graph(artifact, pub), OnnxruntimeBackend())
    inputs = _inputs()
    return (lambda: executor.run(inputs)), (lambda: None)


def _host(artifact: str, pub: str, *, spinning: bool = False):
    from plugin_host.sandbox import SandboxedExecutor

    trust = trust_store(pub)
    sandboxed = SandboxedExecutor(artifact, trust=trust, backend="onnxruntime",
                                  backend_plugins=("onnxruntime_backend",),
                                  env={"PLUGIN_HOST_ORT_SPIN": "1" if spinning else "0"})
    inputs = _inputs()
    return (lambda: sandboxed.run(inputs)), sandboxed.close


def _host_zero_copy(artifact: str, pub: str, *, colocate: bool = False):
    """The frame path: inputs written once into the shared region's input buffers (as a
    camera writes its frame into shared memory), handed over without a copy; ``colocate``:
    with co-location (``SandboxLimits.cpu = "auto"``)."""
    from plugin_host.sandbox import SandboxedExecutor, SandboxLimits

    sandboxed = SandboxedExecutor(artifact, trust=trust_store(pub), backend="onnxruntime",
                                  backend_plugins=("onnxruntime_backend",),
                                  limits=SandboxLimits(cpu="auto" if colocate else None))
    inputs = in_input_buffers(sandboxed)
    return (lambda: sandboxed.run(inputs)), sandboxed.close


SIDES = {"host": _host, "bare": _bare, "bare-pinned": _bare_pinned, "inproc": _inproc,
         "host-zero-copy": _host_zero_copy,
         "host-colocated": lambda a, p: _host_zero_copy(a, p, colocate=True), "floor": _floor,
         "floor-colocated": lambda a, p: _floor(a, p, colocate=True),
         "bare-spin": lambda a, p: _bare(a, p, spinning=True),
         "host-spin": lambda a, p: _host(a, p, spinning=True)}
#: the sides timed at the daemon's pace, and that pace (s between calls: a 20 Hz camera)
PACED = ("bare", "bare-pinned", "host-zero-copy", "host-colocated", "floor-colocated")
PERIOD = 0.05


def _split(artifact: str, pub: str, *, calls: int) -> dict[str, tuple[float, float]]:
    """Where the host's time goes, on the input-buffer path: per call, the worker's own time
    (``last_worker_seconds``: its executor, the model's run included, and writing the
    outputs) and the rest (the host's share, both switches, the worker's receive and
    answer). Medians in ms, ``{"default"|"co-located": (worker, outside)}``, in blocks
    with pauses as the sides above."""
    import time

    from plugin_host.sandbox import SandboxedExecutor, SandboxLimits

    result = {}
    placements = (("default", SandboxLimits()), ("co-located", SandboxLimits(cpu="auto")))
    for label, limits in placements:
        with SandboxedExecutor(artifact, trust=trust_store(pub), backend="onnxruntime",
                               backend_plugins=("onnxruntime_backend",),
                               limits=limits) as sandboxed:
            inputs = in_input_buffers(sandboxed)
            for _ in range(10):
                sandboxed.run(inputs)
            worker, outside = [], []
            for block in range(0, calls, 40):
                time.sleep(PAUSE)
                sandboxed.run(inputs)
                for _ in range(min(40, calls - block)):
                    start = time.perf_counter()
                    sandboxed.run(inputs)
                    wall = time.perf_counter() - start
                    worker.append(sandboxed.last_worker_seconds * 1e3)
                    outside.append(wall * 1e3 - worker[-1])
            result[label] = (statistics.median(worker), statistics.median(outside))
    return result


def _cadence(artifact: str, pub: str, *, frames: int, period: float) -> dict[str, tuple]:
    """Spinning at the daemon's real pace: one call every ``period`` s (20 Hz), as cameras
    drive it. ``{"spin"|"no spin": (median ms, worker CPU ms per frame)}``."""
    import os
    import time

    from plugin_host.sandbox import SandboxedExecutor

    def worker_cpu(pid: int) -> float:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    trust = trust_store(pub)
    inputs = _inputs()
    result = {}
    for label, spin in (("no spin", "0"), ("spin", "1")):
        with SandboxedExecutor(artifact, trust=trust, backend="onnxruntime",
                               backend_plugins=("onnxruntime_backend",),
                               env={"PLUGIN_HOST_ORT_SPIN": spin}) as sandboxed:
            for _ in range(5):
                sandboxed.run(inputs)
            before, times = worker_cpu(sandboxed.pid), []
            for _ in range(frames):
                time.sleep(period)
                start = time.perf_counter()
                sandboxed.run(inputs)
                times.append((time.perf_counter() - start) * 1e3)
            used = (worker_cpu(sandboxed.pid) - before) / frames * 1e3
            result[label] = (statistics.median(times), used)
    return result


def _verdict(median: float, bare: float) -> str:
    return f"target <= {TARGET:.2f}x {'met' if median <= TARGET * bare else 'NOT met'}"


def _print_paced(paced, labels: dict[str, str], args) -> None:
    medians = {side: statistics.median(s) for side, s in paced.items()}
    bare, placed = medians["bare"], medians["bare-pinned"]
    print(f"  at the daemon's pace, one call per {PERIOD * 1e3:.0f} ms ({args.paced_rounds} "
          f"alternating blocks x {args.runs} calls per side):")
    for side in PACED:
        median = medians[side]
        line = (f"    {labels[side]:38s}: median {median:7.3f} ms, ratio {median / bare:.3f} "
                f"({(median - bare) * 1e3:+5.0f} us)")
        if side.startswith("host"):
            line += f"; {_verdict(median, bare)}"
        if side.endswith("colocated"):  # against bare with the same placement of its threads
            line += f"; {median / placed:.3f}x bare placed the same way"
        print(line)


def main() -> int:
    parser = side_parser(__doc__.split("\n\n")[0], runs=20, rounds=16, warmup=10,
                         generations=4)
    parser.add_argument("--frames", type=int, default=60, help="calls at 20 Hz, per setting")
    parser.add_argument("--paced-rounds", type=int, default=8,
                        help="blocks per side at 20 Hz, alternating (0: none)")
    parser.add_argument("--split", type=int, default=400,
                        help="calls per placement for the split of the host's time")
    parser.add_argument("--spin", action="store_true",
                        help="also time the spinning sides and the 20 Hz spinning comparison "
                             "(a spinning side's idle threads can slow the other sides)")
    parser.add_argument("--bare-peer", nargs=3, metavar=("FD", "ARTIFACT", "PUB"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_peer:
        fd, artifact, pub = args.bare_peer
        _serve_bare_peer(int(fd), artifact, pub)
        return 0
    if args.child:
        serve_side(SIDES, args.child, warmup=args.warmup, scale=1e3)
        return 0

    with tempfile.TemporaryDirectory(prefix="bench-onnxruntime-") as tmp:
        artifact, pub = signed_demo(Path(tmp), backends=["onnxruntime"])
        samples = alternate_script(
            __file__, args, [s for s in SIDES if args.spin or not s.endswith("-spin")],
            artifact, pub, pause=PAUSE)
        paced = alternate_script(__file__, args, PACED, artifact, pub, pause=PAUSE,
                                 period=PERIOD, rounds=args.paced_rounds) \
            if args.paced_rounds > 0 else None
        split = _split(artifact, pub, calls=args.split)
        cadence = _cadence(artifact, pub, frames=args.frames, period=0.05) if args.spin else {}
    medians = {side: statistics.median(s) for side, s in samples.items()}
    bare = medians["bare"]
    print(f"demo model on onnxruntime (CPU), {args.rounds} alternating blocks x {args.runs} "
          f"calls per side, children started afresh {args.generations} times")
    labels = {"bare": "bare onnxruntime (InferenceSession.run)",
              "host": "host: SandboxedExecutor, onnxruntime",
              "host-zero-copy": "host, inputs in shared buffers",
              "host-colocated": "host, shared buffers, co-located",
              "floor": "floor: bare, in a child process",
              "floor-colocated": "floor, co-located",
              "bare-pinned": "bare, threads placed as co-located",
              "inproc": "breakdown: Executor in-process",
              "bare-spin": "breakdown: bare onnxruntime, spinning",
              "host-spin": "breakdown: host, worker spinning"}
    for side, label in labels.items():
        if side not in medians:
            continue
        median = medians[side]
        line = (f"  {label:40s}: median {median:7.3f} ms, ratio {median / bare:.3f} "
                f"({(median - bare) * 1e3:+5.0f} us)")
        if side in ("host", "host-zero-copy", "host-colocated"):
            line += f"; {_verdict(median, bare)}"
            if side != "host":  # DESIGN.md's general host-overhead rule, for reference
                allowed = max((TARGET - 1) * bare, DESIGN_FLOOR_MS)
                line += (f"; <= +max(5 %, 150 us) "
                         f"{'met' if median - bare <= allowed else 'NOT met'}")
        print(line)
    print(f"  the host's time per call, input buffers ({args.split} calls each; the target "
          f"leaves {(TARGET - 1) * bare * 1e3:.0f} us above bare):")
    for label, (worker, outside) in split.items():
        print(f"    {label:10s}: the worker's own {worker:6.3f} ms "
              f"(bare {(worker - bare) * 1e3:+4.0f} us), "
              f"outside it {outside * 1e3:4.0f} us (host, both switches)")
    if paced:
        _print_paced(paced, labels, args)
    if cadence:
        print(f"  at 20 Hz ({args.frames} frames, one call per 50 ms, as the daemon runs it):")
    for label, (median, used) in cadence.items():
        print(f"    host, worker {label:8s}: median {median:7.3f} ms, worker CPU {used:6.2f} ms "
              f"per frame ({used / 50 * 100:.0f} % of a core)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
