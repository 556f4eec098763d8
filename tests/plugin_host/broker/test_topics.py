"""Host topics: ordered delivery, publisher stamped, slow readers drop, bad callbacks isolated."""

from __future__ import annotations

import threading

import pytest

from plugin_host.topics import TOPICS, Topics


def test_the_three_topics():
    topics = Topics()
    assert TOPICS == ("model", "control", "camera")
    assert [t.name for t in topics] == list(TOPICS)
    with pytest.raises(KeyError, match="no topic 'debug'"):
        topics["debug"]


def test_subscribers_get_every_message_in_order_with_the_publisher():
    topic = Topics()["control"]
    a, b = topic.subscribe(), topic.subscribe()
    for i in range(3):
        topic.publish("steering", {"steer": i})
    got = [a.recv(0) for _ in range(3)]
    assert [m.data["steer"] for m in got] == [0, 1, 2]
    assert [m.seq for m in got] == [0, 1, 2] and {m.publisher for m in got} == {"steering"}
    assert got[0].time_ns <= got[2].time_ns
    assert len(b.drain()) == 3 and topic.published == 3


def test_recv_times_out_with_none():
    sub = Topics()["model"].subscribe()
    assert sub.recv(timeout=0.01) is None


def test_recv_wakes_on_publish():
    topic = Topics()["model"]
    sub = topic.subscribe()
    timer = threading.Timer(0.05, topic.publish, args=("host", 1))
    timer.start()
    assert sub.recv(timeout=5).data == 1
    timer.join()


def test_a_full_queue_drops_the_oldest():
    topic = Topics()["camera"]
    sub = topic.subscribe(maxlen=2)
    for i in range(5):
        topic.publish("cam", i)
    assert [m.data for m in sub.drain()] == [3, 4] and sub.dropped == 3


def test_callbacks_are_isolated():
    topic = Topics()["model"]
    seen = []

    def broken(message):
        raise RuntimeError("sink bug")

    bad = topic.connect(broken)
    topic.connect(seen.append)
    topic.publish("host", "x")
    assert [m.data for m in seen] == ["x"]
    assert bad.errors == 1 and isinstance(bad.last_error, RuntimeError)


def test_closed_receivers_get_nothing():
    topic = Topics()["model"]
    sub = topic.subscribe()
    conn = topic.connect(lambda m: pytest.fail("closed"))
    sub.close()
    conn.close()
    topic.publish("host", 1)
    assert sub.recv(0) is None
    with pytest.raises(ValueError):
        topic.subscribe(maxlen=0)
