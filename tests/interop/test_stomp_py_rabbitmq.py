"""RabbitMQ's STOMP dialect through stomp.py, as a RabbitMQ user's client code uses it.

Each test plays against our real server and, the same test, against a real RabbitMQ 3.10
node of ours (``clients.rabbitmq``; slow: one node for the module): the headers and
destinations behave alike on both. Where minibroker departs from RabbitMQ on purpose
(a SEND to a queue that does not exist) the test says so."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import stomp

from clients import rabbitmq
from clients.rabbitmq import RabbitMQ
from stomp_py_support import WAIT, Collector, close, wait_for

NOT_INSTALLED = rabbitmq.installed_problem()
#: The xdist group of the tests against the module's RabbitMQ node.
RABBITMQ_GROUP = "tests/interop/test_stomp_py_rabbitmq.py"


@pytest.fixture(scope="module")
def rabbitmq_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RabbitMQ]:
    node = RabbitMQ(Path(tmp_path_factory.mktemp("rabbitmq")), quick_stop=True)
    try:
        node.start()
        yield node
    finally:
        node.stop()


@pytest.fixture(
    params=[
        "minibroker",
        pytest.param(
            "rabbitmq",
            marks=[
                pytest.mark.slow,
                pytest.mark.skipif(NOT_INSTALLED is not None, reason=f"RabbitMQ is needed: {NOT_INSTALLED}"),
                # One node for the module, so one worker: the fixture is asked for by name below,
                # which the suite's grouping by module-scoped fixtures (tests/conftest.py) cannot see.
                pytest.mark.xdist_group(RABBITMQ_GROUP),
            ],
        ),
    ]
)
def server(request: pytest.FixtureRequest) -> Any:
    """Our real server, or the real RabbitMQ (``address``: its STOMP listener)."""
    if request.param == "minibroker":
        return request.getfixturevalue("broker")
    return request.getfixturevalue("rabbitmq_node")


def connect(server: Any, version: str = "1.2") -> tuple[Any, Collector]:
    """As a RabbitMQ user connects: ``host`` names the virtual host ``/``."""
    if version == "1.0":
        conn = stomp.Connection10([server.address])
    else:
        conn = stomp.Connection12([server.address], vhost="/", heartbeats=(0, 0))
    listener = Collector()
    conn.set_listener("collector", listener)
    conn.connect(wait=True)
    return conn, listener


def subscribe(conn: Any, listener: Collector, destination: str, sub_id: str, **headers: str) -> None:
    """SUBSCRIBE and wait for its RECEIPT (the subscription is in place)."""
    receipt = f"sub-{sub_id}-{time.monotonic_ns()}"
    conn.send_frame("SUBSCRIBE", {"destination": destination, "id": sub_id, "receipt": receipt, **headers})
    assert wait_for(lambda: receipt in listener.receipts), listener.errors


def send(conn: Any, listener: Collector, destination: str, *bodies: str, **headers: str) -> None:
    """SEND each body, then wait for the last one's RECEIPT."""
    for i, body in enumerate(bodies):
        receipt = f"send-{time.monotonic_ns()}" if i == len(bodies) - 1 else None
        conn.send(destination, body, headers=dict(headers, **({"receipt": receipt} if receipt else {})))
    assert wait_for(lambda: receipt in listener.receipts), listener.errors


def bodies(listener: Collector, n: int) -> list[str]:
    return [frame.body for frame in listener.take(n)]


def unique(name: str) -> str:
    return f"{name}-{time.monotonic_ns()}"


def test_prefetch_count_bounds_the_unacknowledged(server: Any) -> None:
    queue = f"/queue/{unique('prefetch')}"
    conn, listener = connect(server)
    try:
        subscribe(conn, listener, queue, "s", ack="client-individual", **{"prefetch-count": "2"})
        send(conn, listener, queue, *"abcde")
        first = listener.take(2)
        assert [f.body for f in first] == ["a", "b"]
        assert listener.nothing_more(0.5)  # the default (1000 here, no limit on RabbitMQ) would send all five
        conn.ack(first[0].headers["ack"])
        assert bodies(listener, 1) == ["c"]
        assert listener.nothing_more(0.3)
    finally:
        close(conn)


@pytest.mark.parametrize("flag", ["durable", "persistent"])
def test_a_durable_subscription_named_by_its_id_keeps_messages_while_away(server: Any, flag: str) -> None:
    topic, name = f"/topic/{unique('news')}", unique("reader")
    headers = {flag: "true", "auto-delete": "false"}
    conn, listener = connect(server)
    subscribe(conn, listener, topic, name, **headers)
    close(conn)
    producer, sent = connect(server)
    try:
        send(producer, sent, topic, "while away 1", "while away 2")
        again, listener = connect(server)  # another connection, no client-id: the id alone names it
        subscribe(again, listener, topic, name, **headers)
        assert bodies(listener, 2) == ["while away 1", "while away 2"]
        again.send_frame("UNSUBSCRIBE", {"id": name, **headers})  # RabbitMQ's way to remove it
        send(producer, sent, topic, "after removal")
        close(again)
        last, listener = connect(server)
        subscribe(last, listener, topic, name, **headers)
        assert listener.nothing_more(0.5)
        last.send_frame("UNSUBSCRIBE", {"id": name, **headers})
        close(last)
    finally:
        close(producer)


def test_two_consumers_with_one_durable_id_share_its_messages(server: Any) -> None:
    topic, name = f"/topic/{unique('jobs')}", unique("workers")
    headers = {"durable": "true", "auto-delete": "false", "ack": "client-individual", "prefetch-count": "1"}
    (a, la), (b, lb) = connect(server), connect(server)
    producer, sent = connect(server)
    try:
        subscribe(a, la, topic, name, **headers)
        subscribe(b, lb, topic, name, **headers)
        send(producer, sent, topic, "1", "2", "3", "4")
        got_a, got_b = la.take(1), lb.take(1)
        assert {got_a[0].body, got_b[0].body} == {"1", "2"}  # one each: one queue, two consumers
        assert la.nothing_more(0.3) and lb.nothing_more(0.1)
        a.ack(got_a[0].headers["ack"])
        b.ack(got_b[0].headers["ack"])
        rest = la.take(1) + lb.take(1)
        assert sorted(f.body for f in rest) == ["3", "4"]
        for conn, frame in ((a, rest[0]), (b, rest[1])):
            conn.ack(frame.headers["ack"])
        a.send_frame("UNSUBSCRIBE", {"id": name})
        b.send_frame("UNSUBSCRIBE", {"id": name, "durable": "true", "auto-delete": "false"})
        assert wait_for(lambda: not lb.errors and not la.errors)
    finally:
        for conn in (a, b, producer):
            close(conn)


def test_when_one_consumer_of_a_durable_subscription_leaves_another_gets_its_messages(server: Any) -> None:
    topic, name = f"/topic/{unique('shifts')}", unique("crew")
    headers = {"durable": "true", "auto-delete": "false", "ack": "client-individual", "prefetch-count": "2"}
    (a, la), (b, lb) = connect(server), connect(server)
    producer, sent = connect(server)
    try:
        subscribe(a, la, topic, name, **headers)
        subscribe(b, lb, topic, name, **headers)
        send(producer, sent, topic, *"123456")
        held_by_a = sorted(f.body for f in la.take(2))
        taken_by_b = lb.take(2)
        close(a)  # leaves two unacknowledged
        for frame in taken_by_b:
            b.ack(frame.headers["ack"])
        rest = []
        for _ in range(2):  # at prefetch 2: two, acknowledged, then two more
            rest += lb.take(2)
            for frame in rest[-2:]:
                b.ack(frame.headers["ack"])
        assert sorted(f.body for f in taken_by_b + rest) == list("123456")
        assert held_by_a == sorted(f.body for f in rest if f.headers.get("redelivered") == "true")
        b.send_frame("UNSUBSCRIBE", {"id": name, "durable": "true", "auto-delete": "false"})
        assert wait_for(lambda: not lb.errors)
    finally:
        for conn in (b, producer):
            close(conn)


def test_a_durable_subscription_without_auto_delete_false_ends_with_its_last_consumer(server: Any) -> None:
    topic, name = f"/topic/{unique('brief')}", unique("brief-reader")
    conn, listener = connect(server)
    subscribe(conn, listener, topic, name, durable="true")
    close(conn)
    producer, sent = connect(server)
    try:
        send(producer, sent, topic, "nobody keeps this")
        again, listener = connect(server)
        subscribe(again, listener, topic, name, durable="true")
        assert listener.nothing_more(0.5)
        close(again)
    finally:
        close(producer)


def test_a_durable_subscription_without_an_id_is_refused(server: Any) -> None:
    conn, listener = connect(server, "1.0")  # STOMP 1.0: SUBSCRIBE may omit its id
    try:
        conn.send_frame("SUBSCRIBE", {"destination": "/topic/no-id", "durable": "true", "auto-delete": "false"})
        assert wait_for(lambda: listener.errors)
        error = listener.errors[0]
        assert "'id' is required for durable subscriptions" in error.headers["message"] + error.body
    finally:
        close(conn)


def test_nack_with_requeue_false_is_not_redelivered(server: Any) -> None:
    queue = f"/queue/{unique('poison')}"
    conn, listener = connect(server)
    try:
        subscribe(conn, listener, queue, "s", ack="client-individual")
        send(conn, listener, queue, "poison", "good")
        poison, good = listener.take(2)
        conn.send_frame("NACK", {"id": poison.headers["ack"], "requeue": "false"})
        conn.nack(good.headers["ack"])  # the default requeues
        again = listener.take(1)[0]
        assert again.body == "good" and again.headers["redelivered"] == "true"
        conn.ack(again.headers["ack"])
        assert listener.nothing_more(0.5)
    finally:
        close(conn)


def test_nack_with_requeue_false_dead_letters_a_persistent_message(broker) -> None:
    """minibroker's dead letter policy applies (ActiveMQ.DLQ by default); RabbitMQ drops
    it unless its queue names a dead letter exchange."""
    queue = f"/queue/{unique('poison')}"
    conn, listener = connect(broker)
    try:
        subscribe(conn, listener, queue, "s", ack="client-individual")
        send(conn, listener, queue, "poison", persistent="true")
        conn.send_frame("NACK", {"id": listener.take(1)[0].headers["ack"], "requeue": "false"})
        subscribe(conn, listener, "/queue/ActiveMQ.DLQ", "dlq")
        dead = listener.take(1)[0]
        assert dead.body == "poison" and dead.headers["original-destination"] == queue
        assert "requeue:false" in dead.headers["dlqDeliveryFailureCause"]
    finally:
        close(conn)


def test_rabbitmqs_destinations(server: Any) -> None:
    name, key = unique("orders"), unique("prices.eu")
    conn, listener = connect(server)
    try:
        conn.send_frame("SUBSCRIBE", {"destination": f"/amq/queue/{name}", "id": "missing"})
        assert wait_for(lambda: listener.errors)  # /amq/queue/ names an existing queue
        assert f"no queue '{name}'" in listener.errors[0].headers["message"] + listener.errors[0].body
    finally:
        close(conn)
    conn, listener = connect(server)
    try:
        subscribe(conn, listener, f"/queue/{name}", "made")  # makes the queue
        conn.send_frame("UNSUBSCRIBE", {"id": "made"})
        subscribe(conn, listener, f"/amq/queue/{name}", "q")
        send(conn, listener, f"/amq/queue/{name}", "to the queue")
        frame = listener.take(1)[0]
        assert frame.body == "to the queue" and frame.headers["destination"] == f"/queue/{name}"

        subscribe(conn, listener, f"/exchange/amq.topic/{key}", "by-exchange")
        subscribe(conn, listener, f"/topic/{key}", "by-topic")
        send(conn, listener, f"/exchange/amq.topic/{key}", "via the exchange")
        send(conn, listener, f"/topic/{key}", "via the topic")
        got = [(f.headers["subscription"], f.body, f.headers["destination"]) for f in listener.take(4)]
        for sub in ("by-exchange", "by-topic"):
            assert [(b, d) for s, b, d in got if s == sub] == [
                ("via the exchange", f"/topic/{key}"),
                ("via the topic", f"/topic/{key}"),
            ]

        subscribe(conn, listener, "/exchange/amq.fanout", "fan")
        send(conn, listener, "/exchange/amq.fanout", "to all")
        send(conn, listener, f"/exchange/amq.fanout/{key}", "to all, a key ignored")
        assert bodies(listener, 2) == ["to all", "to all, a key ignored"]
        assert listener.nothing_more(0.3)
    finally:
        close(conn)


def test_a_send_to_a_queue_that_does_not_exist_is_refused(broker) -> None:
    """RabbitMQ drops it unroutable and still sends the RECEIPT; a RECEIPT here means the
    message is kept, so minibroker refuses it with an ERROR instead."""
    conn, listener = connect(broker)
    try:
        conn.send("/amq/queue/nowhere", "lost?", headers={"receipt": "r"})
        assert wait_for(lambda: listener.errors)
        assert "no queue 'nowhere'" in listener.errors[0].headers["message"]
        assert "r" not in listener.receipts
    finally:
        close(conn)


def test_headers_of_another_dialect_not_honoured_are_named_once(broker, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="minibroker.dialects")
    conn, listener = connect(broker)
    try:
        unhonoured = {"x-queue-name": "mine", "x-max-length": "10", "activemq.retroactive": "true"}
        for sub_id in ("a", "b"):
            subscribe(conn, listener, "/queue/dialects", sub_id, durable="true", **unhonoured)
        subscribe(conn, listener, "/topic/dialects", "c", **{"prefetch-count": "5", "app-header": "x"})
        named = [r.getMessage() for r in caplog.records if r.name == "minibroker.dialects"]
        for header in (*unhonoured, "durable"):  # durable means nothing for a queue here
            assert sum(f"'{header}'" in line for line in named) == 1, named
        assert not any("prefetch-count" in line or "app-header" in line for line in named)
    finally:
        close(conn)


def test_an_unreadable_prefetch_count_is_refused(server: Any) -> None:
    conn, listener = connect(server)
    try:
        conn.send_frame("SUBSCRIBE", {"destination": "/queue/pf", "id": "s", "prefetch-count": "many"})
        assert wait_for(lambda: listener.errors, WAIT)
    finally:
        close(conn)
