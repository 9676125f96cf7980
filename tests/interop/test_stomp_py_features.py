"""ActiveMQ-style features through stomp.py against the real server."""

from __future__ import annotations

import time

import pytest
import stomp

from minibroker.config import parse_config
from minibroker.connection import hash_password
from stomp_py_support import Collector, close, connect, subscribe_sync, wait_for


def test_transaction_commit_and_abort(broker) -> None:
    conn, listener = connect(broker)
    try:
        subscribe_sync(conn, listener, "/queue/tx", "s", ack="client-individual")
        tx = conn.begin()
        conn.send("/queue/tx", "in tx", transaction=tx)
        assert listener.nothing_more(0.3)
        conn.commit(tx)
        msg = listener.take(1)[0]
        assert msg.body == "in tx"
        tx2 = conn.begin()
        conn.ack(msg.headers["ack"], transaction=tx2)
        conn.abort(tx2)
        again = listener.take(1)[0]
        assert again.body == "in tx" and again.headers["redelivered"] == "true"
    finally:
        close(conn)


def test_dead_letter_queue_after_redeliveries(broker_factory) -> None:
    rb = broker_factory(parse_config({"destination_policy": [{"queue": ">", "maximum_redeliveries": 2}]}))
    conn, listener = connect(rb)
    try:
        subscribe_sync(conn, listener, "/queue/work", "s", ack="client-individual")
        conn.send("/queue/work", "poison", headers={"persistent": "true"})
        for _ in range(3):
            conn.nack(listener.take(1)[0].headers["ack"])
        assert listener.nothing_more()
        subscribe_sync(conn, listener, "/queue/ActiveMQ.DLQ", "dlq", ack="auto")
        dead = listener.take(1)[0]
        assert dead.body == "poison"
        assert dead.headers["original-destination"] == "/queue/work"
    finally:
        close(conn)


def test_expired_messages_are_not_delivered(broker) -> None:
    conn, listener = connect(broker)
    try:
        past = int(time.time() * 1000) - 1000
        conn.send("/queue/exp", "old", headers={"expires": str(past)})
        conn.send("/queue/exp", "new", headers={"expires": str(past + 3_600_000)})
        subscribe_sync(conn, listener, "/queue/exp", "s")
        assert [f.body for f in listener.take(1)] == ["new"]
        assert listener.nothing_more()
    finally:
        close(conn)


def test_selectors(broker) -> None:
    conn, listener = connect(broker)
    try:
        subscribe_sync(conn, listener, "/queue/sel", "big", headers={"selector": "size > 10 AND region LIKE 'eu-%'"})
        for size, region in [(5, "eu-west"), (50, "eu-north"), (50, "us-east"), (11, "eu-")]:
            conn.send("/queue/sel", f"{size}/{region}", headers={"size": str(size), "region": region})
        assert [f.body for f in listener.take(2)] == ["50/eu-north", "11/eu-"]
        assert listener.nothing_more()
        bad, bad_listener = connect(broker)
        bad.subscribe("/queue/sel", id="x", headers={"selector": "size >"})
        assert wait_for(lambda: bad_listener.errors)
        assert "invalid selector" in bad_listener.errors[0].headers["message"]
    finally:
        close(conn)


def test_message_and_consumer_priority(broker_factory) -> None:
    rb = broker_factory(parse_config({"destination_policy": [{"queue": ">", "prioritized_messages": True}]}))
    producer, sent = connect(rb)
    conn, listener = connect(rb)
    try:
        for body, prio in [("low", "1"), ("high", "9"), ("normal", "4")]:
            producer.send("/queue/prio", body, headers={"priority": prio, "receipt": body})
        assert wait_for(lambda: len(sent.receipts) == 3)  # all three are queued
        subscribe_sync(conn, listener, "/queue/prio", "s")
        assert [f.body for f in listener.take(3)] == ["high", "normal", "low"]
    finally:
        close(producer)
        close(conn)


def test_exclusive_consumer(broker) -> None:
    (a, la), (b, lb) = connect(broker), connect(broker)
    producer, _ = connect(broker)
    try:
        subscribe_sync(a, la, "/queue/ex", "s", headers={"activemq.exclusive": "true"})
        subscribe_sync(b, lb, "/queue/ex", "s", headers={"activemq.exclusive": "true"})
        for i in range(4):
            producer.send("/queue/ex", str(i))
        assert [f.body for f in la.take(4)] == ["0", "1", "2", "3"]
        assert lb.nothing_more()
        a.disconnect()
        producer.send("/queue/ex", "4")
        assert [f.body for f in lb.take(1)] == ["4"]
    finally:
        for c in (a, b, producer):
            close(c)


def test_durable_subscription(broker) -> None:
    conn, listener = connect(broker, headers={"client-id": "durable-app"})
    producer, sent = connect(broker)
    subscribe_sync(conn, listener, "/topic/d", "d", headers={"activemq.subscriptionName": "mine"})
    conn.disconnect()
    producer.send("/topic/d", "missed you", headers={"receipt": "p"})
    assert wait_for(lambda: "p" in sent.receipts)  # kept for the absent subscriber
    back, l2 = connect(broker, headers={"client-id": "durable-app"})
    try:
        subscribe_sync(back, l2, "/topic/d", "d", headers={"activemq.subscriptionName": "mine"})
        assert [f.body for f in l2.take(1)] == ["missed you"]
        back.unsubscribe("d", headers={"activemq.subscriptionName": "mine"})
    finally:
        close(back)
        close(producer)


def test_duplicate_client_id_is_refused(broker) -> None:
    first, _ = connect(broker, headers={"client-id": "only-one"})
    try:
        second = stomp.Connection12([broker.address])
        l2 = Collector()
        second.set_listener("c", l2)
        with pytest.raises(stomp.exception.ConnectFailedException):
            second.connect(wait=True, headers={"client-id": "only-one"})
        assert "only-one already connected" in l2.errors[0].headers["message"]
        assert first.is_connected()
    finally:
        close(first)


def test_temp_queue_request_reply(broker) -> None:
    server, sl = connect(broker)
    client, cl = connect(broker)
    try:
        subscribe_sync(server, sl, "/queue/service", "s")
        subscribe_sync(client, cl, "/temp-queue/answers", "t")
        client.send("/queue/service", "what time is it?", headers={"reply-to": "/temp-queue/answers"})
        request = sl.take(1)[0]
        server.send(request.headers["reply-to"], "tea time")
        assert [f.body for f in cl.take(1)] == ["tea time"]
    finally:
        close(server)
        close(client)


def test_queue_browser(broker) -> None:
    conn, listener = connect(broker)
    try:
        for i in range(3):
            conn.send("/queue/browse", str(i))
        subscribe_sync(conn, listener, "/queue/browse", "b", headers={"browser": "true"})
        frames = listener.take(4)
        assert [f.body for f in frames[:3]] == ["0", "1", "2"]
        assert frames[3].headers["browser"] == "end"
        subscribe_sync(conn, listener, "/queue/browse", "c")
        assert [f.body for f in listener.take(3)] == ["0", "1", "2"]
    finally:
        close(conn)


def test_security(broker_factory) -> None:
    config = parse_config(
        {
            "users": [
                {"name": "app", "password_hash": hash_password("secret", iterations=1000), "groups": ["apps"]},
                {"name": "viewer", "password_hash": hash_password("look", iterations=1000), "groups": ["viewers"]},
            ],
            "authorization": [
                {"queue": "app.>", "read": ["apps", "viewers"], "write": ["apps"], "admin": ["apps"]},
            ],
        }
    )
    rb = broker_factory(config)
    refused = stomp.Connection12([rb.address])
    rl = Collector()
    refused.set_listener("c", rl)
    with pytest.raises(stomp.exception.ConnectFailedException):
        refused.connect("app", "wrong", wait=True)
    assert rl.errors[0].headers["message"] == "User name [app] or password is invalid."
    app, al = connect(rb, username="app", passcode="secret")
    viewer, vl = connect(rb, username="viewer", passcode="look")
    try:
        subscribe_sync(app, al, "/queue/app.jobs", "s")
        app.send("/queue/app.jobs", "allowed")
        assert al.take(1)[0].body == "allowed"
        viewer.send("/queue/app.jobs", "not allowed")
        assert wait_for(lambda: vl.errors)
        assert vl.errors[0].headers["message"] == "User viewer is not authorized to write to: queue://app.jobs"
    finally:
        close(app)
        close(viewer)
