"""The worker's steady lane (``Worker._serve_steady``) in this process, over a real socket
pair and a real output mapping, with a stand-in executor: every way out of the lane."""

from __future__ import annotations

import mmap
import socket

import numpy as np
import pytest

from abi.errors import IndexRangeError
from plugin_host.errors import SandboxProtocolError
from plugin_host.sandbox import ipc
from plugin_host.sandbox.worker import Worker


class StandIn:
    """``run_checked`` returns (or raises) what the test queued."""

    def __init__(self) -> None:
        self.queue: list = []
        self.calls = 0

    def run_checked(self, feed, bindings):
        self.calls += 1
        item = self.queue.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item


def outputs(value: float, n: int = 3) -> dict[str, np.ndarray]:
    return {"y": np.full((1, n), value, np.float32), "h": np.full((1, 2), -value, np.float32)}


@pytest.fixture
def lane():
    host_sock, worker_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    worker = Worker(ipc.Channel(worker_sock, 2**16), artifact_fd=-1)
    worker.executor = StandIn()
    worker.out_map = mmap.mmap(-1, 4096)
    worker._feed = {"x": np.zeros((1, 4), np.float32)}
    worker._feed_checked = (None, {})
    first = worker._write_outputs(1, outputs(0.0))  # as a first msgpack run places them
    host = ipc.Channel(host_sock, 2**16)
    yield worker, host, first
    host.close()
    worker.chan.close()


def view(worker: Worker, item: list) -> np.ndarray:
    name, dtype, shape, offset, count = ipc.placement(item, "output", len(worker.out_map))
    return np.frombuffer(worker.out_map, dtype, count, offset).reshape(shape)


def test_binary_runs_are_answered_in_place_until_another_message_comes(lane):
    worker, host, first = lane
    worker.executor.queue += [outputs(1.0), outputs(2.0)]
    host.send_packed(ipc.pack_call(ipc.RUN, 7))
    host.send_packed(ipc.pack_call(ipc.RUN, 8))
    host.send({"op": "ping", "id": 9})
    assert worker._serve_steady() is None  # left the ping held
    assert host.recv_result(7, 1.0) is not None and host.recv_result(8, 1.0) is not None
    y, h = (view(worker, item) for item in first["out"])
    assert (y == 2.0).all() and (h == -2.0).all()
    assert worker.chan.recv() == ({"op": "ping", "id": 9}, [])


def test_a_framed_run_goes_back_to_the_general_path(lane):
    worker, host, _ = lane
    host.send_packed(ipc.pack_call(ipc.RUN, 5, (1, 2, 3, 4, 5)))
    assert worker._serve_steady() == (5, (1, 2, 3, 4, 5))
    assert worker.executor.calls == 0


def test_errors_are_answered_with_the_call_id_and_the_lane_goes_on(lane):
    worker, host, _ = lane
    worker.executor.queue += [IndexRangeError(where="input 'ids'", vocab_size=5,
                                              positions=[(0,)], values=[-1]),
                              SandboxProtocolError("forged"), outputs(3.0)]
    for call_id in (11, 12, 13):
        host.send_packed(ipc.pack_call(ipc.RUN, call_id))
    host.send({"op": "ping", "id": 14})
    assert worker._serve_steady() is None
    refused, _ = host.recv()
    assert (refused["op"], refused["id"], refused["ok"]) == ("result", 11, False)
    assert refused["error"]["type"] == "IndexRangeError"
    error, _ = host.recv()
    assert (error["op"], error["id"]) == ("error", 12) and "forged" in str(error["error"])
    assert host.recv_result(13, 1.0) is not None


def test_outputs_of_a_new_shape_are_placed_anew_and_the_host_told_where(lane):
    worker, host, first = lane
    worker.executor.queue += [outputs(4.0, n=5)]
    host.send_packed(ipc.pack_call(ipc.RUN, 21))
    assert worker._serve_steady() is None  # the plan changed: back to the general path
    reply, _ = host.recv()
    assert (reply["op"], reply["id"], reply["ok"]) == ("result", 21, True)
    assert reply["out"] != first["out"] and type(reply["us"]) is int
    assert (view(worker, reply["out"][0]) == 4.0).all()
    assert view(worker, reply["out"][0]).shape == (1, 5)


def test_end_of_file_leaves_the_lane(lane):
    worker, host, _ = lane
    host.close()
    assert worker._serve_steady() is None
    assert worker.chan.recv() == (None, [])
