"""The onnxruntime reference runs in a child process: a model that crashes onnxruntime or keeps
it busy is a typed refusal of the build, never the builder's own death or hang, and the next
build gets a new child."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from plugin_host.errors import ModelImportError
from plugin_host.onnx_import import reference
from plugin_host.stop_signals import StopRequested, StopSignals

from .conftest import onnx

#: a stand-in for onnxruntime (or the version converter) meeting a hostile model: reads the
#: request, then dies, stalls or answers status O with the bytes of the file in argv[2] (and
#: ends with its stdin)
_BAD_CHILD = """\
import os, signal, struct, sys, time
n = struct.unpack('<Q', sys.stdin.buffer.read(8))[0]
sys.stdin.buffer.read(n)
if sys.argv[1] == 'crash':
    os.kill(os.getpid(), signal.SIGSEGV)
if sys.argv[1] == 'answer':
    data = open(sys.argv[2], 'rb').read()
    sys.stdout.buffer.write(b'O' + struct.pack('<Q', len(data)) + data)
    sys.stdout.buffer.flush()
    sys.exit(sys.stdin.buffer.read() and 0)
time.sleep(600)
"""


class _Scripted(reference.ReferenceProcess):
    """The reference process, its first child replaced by ``_BAD_CHILD`` run with ``argv``
    (``crash``, ``stall`` or ``answer FILE``)."""

    def __init__(self, *argv: str) -> None:
        super().__init__()
        self.argv, self.started = argv, 0

    def _start(self) -> subprocess.Popen:
        self.started += 1
        if self.started > 1:
            return super()._start()
        return subprocess.Popen([sys.executable, "-c", _BAD_CHILD, *self.argv],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def _model(x: str = "x", y: str = "y") -> bytes:
    helper = onnx.helper
    graph = helper.make_graph(
        [helper.make_node("Relu", [x], [y], name="r")], "g",
        [helper.make_tensor_value_info(x, onnx.TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info(y, onnx.TensorProto.FLOAT, [2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]) \
        .SerializeToString()


CASES = [{"x": np.array([-1.0, 2.0], np.float32)}, {"x": np.array([3.0, -4.0], np.float32)}]


@pytest.mark.parametrize("mode, message", [
    ("crash", r"onnxruntime crashed on the model \(killed by SIGSEGV\)"),
    ("stall", r"onnxruntime did not finish the reference run in 0.5 s"),
])
def test_a_crash_or_a_stall_is_a_typed_refusal_and_the_next_run_works(mode, message):
    process = _Scripted(mode)
    try:
        with pytest.raises(ModelImportError, match=message):
            process.run(_model(), ["y"], CASES, timeout=0.5)
        out = process.run(_model(), ["y"], CASES)  # a new child, the real one
    finally:
        process.close()
    assert process.started == 2
    assert [o["y"].tolist() for o in out] == [[0.0, 2.0], [3.0, 0.0]]


def test_a_run_interrupted_by_a_signal_ends_its_child_and_the_next_run_gets_its_own_answer():
    """An exception from a signal handler (a caller's own time limit) or Ctrl-C leaves a
    request whose answer would be read as the next request's: the child is stopped with it."""

    class Interrupted(Exception):
        pass

    def interrupt(signum, frame):
        raise Interrupted

    process = _Scripted("stall")
    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(Interrupted):
            process.run(_model(), ["y"], CASES)
        signal.setitimer(signal.ITIMER_REAL, 0)
        assert process._proc is None
        out = process.run(_model(), ["y"], CASES, timeout=30)  # a new child, the real one
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        process.close()
    assert process.started == 2
    assert [o["y"].tolist() for o in out] == [[0.0, 2.0], [3.0, 0.0]]


def test_a_stop_signal_the_command_defers_ends_the_wait_and_the_child():
    """Within the wait's poll interval, not at the run's timeout (plugin_host/stop_signals.py:
    build notes a first stop signal and acts on it at its next step)."""
    process = _Scripted("stall")
    stops = StopSignals().install()
    try:
        with stops.deferred():
            stops(signal.SIGTERM, None)  # noted, as the signal would be
            started = time.monotonic()
            with pytest.raises(StopRequested):
                process.run(_model(), ["y"], CASES, timeout=30)
            waited = time.monotonic() - started
        assert process._proc is None  # the child killed: its answer is never read
    finally:
        stops.restore()
        process.close()
    assert waited < 10


def test_the_child_has_its_own_session():
    """A Ctrl-C typed at the terminal reaches the command, which kills the child when it acts
    on it; reaching the child, its death would read as a crash on the model."""
    process = reference.ReferenceProcess()
    child = process._start()
    try:
        assert os.getsid(child.pid) == child.pid != os.getsid(0)
    finally:
        process._proc = child
        process.close()


def test_a_refusal_by_onnxruntime_is_its_first_line_and_the_child_stays():
    process = reference.ReferenceProcess()
    try:
        with pytest.raises(ModelImportError, match="onnxruntime cannot load the model: "):
            process.run(b"not a model", ["y"], CASES)
        first = process._proc
        with pytest.raises(ModelImportError, match="onnxruntime cannot run the model: "):
            process.run(_model(), ["y"], [{"x": np.zeros(3, np.float64)}])
        assert process._proc is first and first.poll() is None  # one child for every build
        status = open(f"/proc/{first.pid}/status").read()
        limits = open(f"/proc/{first.pid}/limits").read()
        assert "NoNewPrivs:\t1" in status and "Seccomp:\t2" in status  # filter mode
        assert [line.split()[-3:-1] for line in limits.splitlines()
                if line.startswith(("Max core file size", "Max file size"))] == [["0", "0"]] * 2
        assert process.run(_model(), ["y"], CASES)[1]["y"].tolist() == [3.0, 0.0]
    finally:
        process.close()
    assert first.poll() is not None  # closed: the child has ended


def test_any_name_crosses_to_the_child_and_back():
    x, y = "in/0\x00é", "../out/1\x00"
    process = reference.ReferenceProcess()
    try:
        out = process.run(_model(x, y), [y], [{x: case["x"]} for case in CASES])
    finally:
        process.close()
    assert [o[y].tolist() for o in out] == [[0.0, 2.0], [3.0, 0.0]]


def test_com_microsoft_outputs_are_typed_from_onnxruntime_s_schema():
    """onnx's type inference knows no com.microsoft op: their outputs, and what is computed
    from them, are typed from onnxruntime's schema of the op (a type parameter bound by an
    input, or one allowed type: SkipLayerNormalization's mean is float32 whatever its input),
    and the inference runs again after each of them."""
    helper, TP = onnx.helper, onnx.TensorProto
    bf = TP.BFLOAT16
    nodes = [helper.make_node("FastGelu", ["x"], ["g"], domain="com.microsoft"),
             helper.make_node("Relu", ["g"], ["r"]),
             helper.make_node("SkipLayerNormalization", ["r", "x", "gamma"], ["n", "mean"],
                              domain="com.microsoft"),
             helper.make_node("Cast", ["n"], ["y"], to=TP.FLOAT)]
    model = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", bf, [2, 4])],
        [helper.make_tensor_value_info("y", TP.FLOAT, [2, 4])],
        [helper.make_tensor("gamma", bf, [4], [1.0] * 4)]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    assert "g" not in {v.name for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
    process = reference.ReferenceProcess()
    try:
        types = process.value_types(model.SerializeToString())
    finally:
        process.close()
    assert {k: types.get(k) for k in ("g", "r", "n", "mean", "y")} == {
        "g": bf, "r": bf, "n": bf, "mean": TP.FLOAT, "y": TP.FLOAT}


def test_the_type_inference_runs_in_the_child_and_says_why_it_fails():
    """onnx's type inference is native code on hostile input too: it runs in the hardened
    child, which answers each value's element type, or the first line of onnx's refusal."""
    helper, TP = onnx.helper, onnx.TensorProto
    nodes = [helper.make_node("Cast", ["x"], ["b"], to=TP.BFLOAT16),
             helper.make_node("Relu", ["b"], ["r"]),
             helper.make_node("Cast", ["r"], ["y"], to=TP.FLOAT)]
    model = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TP.FLOAT, [2])]),
        opset_imports=[helper.make_opsetid("", 17)])
    process = reference.ReferenceProcess()
    try:
        assert process.value_types(model.SerializeToString()) == {
            "x": TP.FLOAT, "b": TP.BFLOAT16, "r": TP.BFLOAT16, "y": TP.FLOAT}
        # the values of an If's branch (a body holding Relu's chain) are answered too
        inner = helper.make_graph(nodes[1:], "then", [],
                                  [helper.make_tensor_value_info("y", TP.FLOAT, [2])])
        branch = helper.make_graph(
            [nodes[0], helper.make_node("If", ["c"], ["z"], then_branch=inner,
                                        else_branch=inner)], "g",
            [helper.make_tensor_value_info("x", TP.FLOAT, [2]),
             helper.make_tensor_value_info("c", TP.BOOL, [])],
            [helper.make_tensor_value_info("z", TP.FLOAT, [2])])
        types = process.value_types(helper.make_model(
            branch, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
        assert types["r"] == TP.BFLOAT16 and types["z"] == TP.FLOAT
        first = process._proc
        with pytest.raises(ModelImportError) as refused:
            process.value_types(b"\x08\x07\x12\xff")  # a length past the end
        assert str(refused.value).startswith("onnx cannot infer its value types: ")
        assert "\n" not in str(refused.value)
        assert process._proc is first and first.poll() is None
    finally:
        process.close()
