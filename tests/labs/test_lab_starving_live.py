"""Lab 00 with stomp.py clients against the real server: both symptoms, legacy and cure.

The broker runs with the lab's ``legacy.toml`` or ``cure.toml``; it is restarted
by stopping it and starting a new one on the same data directory. The evidence
is the broker's statistics as any STOMP client reads them
(``/queue/ActiveMQ.Statistics.*`` with a reply-to).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from broker_support import RunningBroker, patches_a_core_object
from clients.labs import labs_directory
from minibroker.config import BrokerConfig, load_config
from stomp_py_support import Collector, close, connect, wait_for

LAB = labs_directory() / "00-starving-consumers"
BODY = "x" * 1000


def config(name: str) -> BrokerConfig:
    return load_config(LAB / name)


def send_all(conn: Any, listener: Collector, destination: str, count: int, body: str = BODY) -> None:
    """``count`` persistent messages, the last with a receipt (so all are in)."""
    for _ in range(count - 1):
        conn.send(destination, body, headers={"persistent": "true"})
    rid = f"{destination}-last"
    conn.send(destination, body, headers={"persistent": "true", "receipt": rid})
    assert wait_for(lambda: rid in listener.receipts)


class Statistics:
    """ActiveMQ's statistics plugin over STOMP: a request with a reply-to, JSON replies."""

    def __init__(self, broker: RunningBroker) -> None:
        self.conn, self.listener = connect(broker)
        self.conn.subscribe("/temp-queue/stats", id="stats")

    def ask(self, what: str) -> list[dict[str, Any]]:
        self.conn.send(f"/queue/ActiveMQ.Statistics.{what}", "", headers={"reply-to": "/temp-queue/stats"})
        first = self.listener.take(1)[0]
        more = self.listener.take(int(first.headers["statistics-total"]) - 1)
        return [json.loads(m.body) for m in (first, *more)]

    def destination(self, name: str) -> dict[str, Any]:
        [data] = self.ask(f"Destination.{name}")
        return data

    def broker(self) -> dict[str, Any]:
        return self.ask("Broker")[0]

    def close(self) -> None:
        close(self.conn)


@pytest.mark.parametrize("name, starved", [("legacy.toml", True), ("cure.toml", False)])
def test_symptom_1_a_consumer_starves_after_a_restart(tmp_path: Path, name: str, starved: bool) -> None:
    data = str(tmp_path / "data")
    rb = RunningBroker(config(name), data).start()
    try:
        conn, listener = connect(rb)
        send_all(conn, listener, "/queue/A", 50, "a")
        close(conn)
    finally:
        rb.stop()
    rb = RunningBroker(config(name), data).start()  # the restart: A's messages stay in the store
    producer = consumer = stats = None
    try:
        producer, p = connect(rb)
        backlogs = ["B.1"] if starved else ["B.1", "B.2"]  # the cure holds even with two backlogs
        for queue in backlogs:
            send_all(producer, p, f"/queue/{queue}", 1800)
        consumer, c = connect(rb)
        consumer.subscribe("/queue/A", id="a", ack="auto", headers={"receipt": "a"})
        assert wait_for(lambda: "a" in c.receipts)  # the broker tried to page A in before this RECEIPT
        stats = Statistics(rb)
        if starved:
            assert c.nothing_more(wait=1.0)
            a, b, broker = stats.destination("A"), stats.destination("B.1"), stats.broker()
            assert a["consumerCount"] == 1 and a["storeOnlyCount"] == 50 and a["memoryPercentUsage"] == 0
            assert b["consumerCount"] == 0 and b["storeOnlyCount"] > 0
            assert broker["memoryPercentUsage"] >= 70
            [finding] = broker["diagnosis"]
            assert "/queue/A" in finding["summary"] and "/queue/B.1" in finding["cure"]
        else:
            assert len(c.take(50)) == 50
            a, broker = stats.destination("A"), stats.broker()
            assert a["storeOnlyCount"] == 0 and a["dequeueCount"] == 50
            assert broker["memoryPercentUsage"] < 70 and broker["diagnosis"] == []
            assert all(stats.destination(q)["memoryLimit"] == 256 * 1024 for q in backlogs)
    finally:
        for conn in (producer, consumer):
            if conn is not None:
                close(conn)
        if stats is not None:
            stats.close()
        rb.stop()


@pytest.mark.parametrize("name, held_back", [("legacy.toml", True), ("cure.toml", False)])
def test_symptom_2_slow_consumers_hold_a_fast_one_back(tmp_path: Path, name: str, held_back: bool) -> None:
    rb = RunningBroker(config(name), str(tmp_path / "data")).start()
    conns: list[Any] = []
    try:
        producer, p = connect(rb)
        conns.append(producer)
        slow: list[tuple[Any, Collector]] = []
        for queue in ("S.1", "S.2"):
            send_all(producer, p, f"/queue/{queue}", 900)
            conn, listener = connect(rb)
            conns.append(conn)
            conn.subscribe(f"/queue/{queue}", id="s", ack="client-individual", headers={"activemq.prefetchSize": "800"})
            slow.append((conn, listener))
        stats = Statistics(rb)
        conns.append(stats.conn)

        def holding() -> bool:  # each slow consumer has what the broker dispatched to it
            subs = {s["destinationName"]: s["dispatchedQueueSize"] for s in stats.ask("Subscription")}
            return all(
                subs.get(f"/queue/{q}") == listener.messages.qsize()
                for q, (_, listener) in zip(("S.1", "S.2"), slow, strict=True)
            )

        assert wait_for(lambda: holding() and holding())  # twice in a row: the dispatch has settled
        fast, f = connect(rb)
        conns.append(fast)
        fast.subscribe("/queue/F", id="f", ack="auto", headers={"receipt": "f"})
        assert wait_for(lambda: "f" in f.receipts)
        sent = 100
        # F at about 50 msg/s; each slow consumer acks one message every 0.5 s (every 25 sent to F).
        # Under legacy F gets what was stored before the first acks let its cursor page in once;
        # then S.2's cursor pages in 200 messages and the broker stays over 70%.
        for i in range(sent):
            producer.send(
                "/queue/F", BODY, headers={"persistent": "true", **({"receipt": "F-last"} if i == sent - 1 else {})}
            )
            if i % 25 == 24:
                for conn, listener in slow:
                    message = listener.messages.get(timeout=10)
                    conn.ack(message.headers["ack"])
            time.sleep(0.02)
        assert wait_for(lambda: "F-last" in p.receipts)  # every message for F is in
        if held_back:

            def settled() -> bool:  # the fast consumer has what the broker dispatched to F
                return stats.destination("F")["dispatchCount"] == f.messages.qsize()

            assert wait_for(lambda: settled() and settled())  # twice in a row: the dispatch has settled
            received = f.messages.qsize()
            assert received < sent // 2  # held to the slow consumers' pace
            data, broker = stats.destination("F"), stats.broker()
            assert data["storeOnlyCount"] > 0 and data["memoryPercentUsage"] < 70
            assert broker["memoryPercentUsage"] >= 70
        else:
            assert len(f.take(sent)) == sent  # kept up
            assert stats.destination("F")["storeOnlyCount"] == 0 and stats.broker()["memoryPercentUsage"] < 70
    finally:
        for conn in conns:
            close(conn)
        rb.stop()


# -- the same runs must give the same numbers -------------------------------------------


@patches_a_core_object
def test_blocked_cursors_retry_in_the_order_they_blocked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """When memory frees, the cursors that could not page in retry first come, first served.

    (A set would iterate in the order of its members' hashes, which vary from process to
    process; the hash given here would make that order fixed, and wrong.)
    """
    from minibroker.destinations import Queue
    from minibroker.edge import VirtualNetwork

    monkeypatch.setattr(Queue, "__hash__", lambda self: {"/queue/X": 1, "/queue/Y": 0}.get(self.address, 2))
    net = VirtualNetwork(config("legacy.toml"), data_dir=tmp_path / "data", trace=True)
    producer = net.connected_client("producer")
    for _ in range(1800):  # a consumer-less backlog takes the broker to 70%
        producer.send("/queue/Z", BODY, persistent="true")
    for name in ("X", "Y"):  # these go to the store only
        for i in range(10):
            producer.send(f"/queue/{name}", f"{name}{i}", persistent="true")
    for name in ("X", "Y"):  # X's cursor blocks first, then Y's
        net.connected_client(name).subscribe(f"/queue/{name}")
    assert [e["dest"] for e in net.trace.events("page_in_blocked")] == ["/queue/X", "/queue/Y"]
    z = net.connected_client("z")
    z.subscribe("/queue/Z", "z", "client-individual", **{"activemq.prefetchSize": "5"})
    for message in z.messages():
        z.ack(message)  # frees memory: the blocked cursors retry
    first = next(e["dest"] for e in net.trace.events("dispatch") if e["dest"] in ("/queue/X", "/queue/Y"))
    assert first == "/queue/X"
