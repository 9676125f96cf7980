"""``/metrics`` on the console port: scraped over HTTP and parsed with prometheus_client's
own parser; the figures are the broker's statistics at that moment."""

from __future__ import annotations

import queue
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
import stomp
from prometheus_client.parser import text_string_to_metric_families

from minibroker.config import ANY_PORT

WAIT = 10.0


def scrape(broker) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:  # type: ignore[no-untyped-def]
    url = f"http://127.0.0.1:{broker.server.console_port}/metrics"
    with urllib.request.urlopen(url, timeout=WAIT) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=")
        text = response.read().decode("utf-8")
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def test_metrics_scrape(broker_factory) -> None:  # type: ignore[no-untyped-def]
    broker = broker_factory(console={"port": ANY_PORT}, system_usage={"memory_limit": 1024 * 1024})
    conn = stomp.Connection12([broker.address])
    receipts: queue.Queue[str] = queue.Queue()
    listener = stomp.ConnectionListener()
    listener.on_receipt = lambda frame: receipts.put(frame.headers["receipt-id"])  # type: ignore[method-assign]
    conn.set_listener("receipts", listener)
    conn.connect(wait=True)
    try:
        for _ in range(5):
            conn.send("/queue/metrics.q", "x" * 1000, headers={"persistent": "true"})
        conn.send("/topic/metrics.t", "to nobody", receipt="last")
        assert receipts.get(timeout=WAIT) == "last"  # everything before it was handled
        samples = scrape(broker)
    finally:
        conn.disconnect()

    q = (("destination", "/queue/metrics.q"), ("kind", "queue"))
    assert samples[("minibroker_destination_size", q)] == 5
    assert (
        samples[("minibroker_destination_ready", q)] == 5 and samples[("minibroker_destination_unacknowledged", q)] == 0
    )
    assert ("minibroker_destination_enqueue_rate", q) in samples and (
        "minibroker_destination_dequeue_rate",
        q,
    ) in samples
    assert samples[("minibroker_destination_enqueued_total", q)] == 5
    assert samples[("minibroker_destination_consumers", q)] == 0
    assert samples[("minibroker_destination_memory_usage_bytes", q)] > 5000
    assert samples[("minibroker_memory_limit_bytes", ())] == 1024 * 1024
    assert samples[("minibroker_memory_usage_bytes", ())] >= samples[("minibroker_destination_memory_usage_bytes", q)]
    assert samples[("minibroker_connections", ())] == 1  # the STOMP client; a scrape is no connection
    assert samples[("minibroker_blocked_producers", ())] == 0
    assert samples[("minibroker_journal_files", ())] >= 1
    assert samples[("minibroker_journal_used_bytes", ())] > 5000
    assert samples[("minibroker_journal_bytes", ())] >= samples[("minibroker_journal_used_bytes", ())]
    assert ("minibroker_destination_size", (("destination", "/topic/metrics.t"), ("kind", "topic"))) in samples


def test_console_port_serves_the_page_and_refuses_the_rest(broker_factory) -> None:  # type: ignore[no-untyped-def]
    broker = broker_factory(console={"port": ANY_PORT})
    base = f"http://127.0.0.1:{broker.server.console_port}"
    with urllib.request.urlopen(base + "/", timeout=WAIT) as response:
        assert response.headers["Content-Type"] == "text/html; charset=utf-8"
        assert b"<title>minibroker" in response.read()
    for path in ("/nothing", "/static/../web.py", "/static/"):
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(base + path, timeout=WAIT)
        assert missing.value.code == 404


def test_the_console_stomp_endpoint_takes_only_its_own_pages(broker_factory) -> None:  # type: ignore[no-untyped-def]
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    broker = broker_factory(console={"port": ANY_PORT})
    port = broker.server.console_port
    with pytest.raises(InvalidStatus) as refused:  # a page from elsewhere, in the user's browser
        connect(f"ws://127.0.0.1:{port}/stomp", origin="http://elsewhere.example", open_timeout=WAIT)
    assert refused.value.response.status_code == 403
    with connect(f"ws://127.0.0.1:{port}/stomp", origin=f"http://127.0.0.1:{port}", open_timeout=WAIT) as ws:
        ws.send("CONNECT\naccept-version:1.2\n\n\x00")
        assert ws.recv(timeout=WAIT).startswith("CONNECTED\n")
        assert broker.call(lambda: [s.protocol for s in broker.server.broker.sessions.values()]) == ["websocket"]


def test_a_destinations_statistics_name_its_high_water_mark(broker_factory) -> None:  # type: ignore[no-untyped-def]
    """What the console draws on a memory bar: the destination policy's high-water mark."""
    from minibroker.config import PolicyEntry
    from minibroker.ops import STATISTICS_PREFIX, statistics_replies

    broker = broker_factory(destination_policy=(PolicyEntry(queue="low.>", cursor_memory_high_water_mark=40),))
    conn = stomp.Connection12([broker.address])
    conn.connect(wait=True)
    try:
        for name in ("/queue/low.a", "/queue/other"):
            conn.send(name, "x")
        conn.send("/queue/other", "x", headers={"receipt": "r"})
        marks = {}
        deadline = time.monotonic() + WAIT
        while len(marks) < 2 and time.monotonic() < deadline:
            replies = broker.call(lambda: statistics_replies(broker.server.broker, STATISTICS_PREFIX + "Destination.>"))
            marks = {d["destinationName"]: d["cursorMemoryHighWaterMark"] for d in replies}
    finally:
        conn.disconnect()
    assert marks == {"/queue/low.a": 40, "/queue/other": 70}


def test_a_tools_reply_queue_is_no_destination_of_the_metrics(broker_factory) -> None:  # type: ignore[no-untyped-def]
    """Each console page and each `minibroker stat` has its own reply queue: none of them
    is a series of /metrics, and the destination count is that of the series."""
    broker = broker_factory(console={"port": ANY_PORT})
    replies: queue.Queue[Any] = queue.Queue()
    conn = stomp.Connection12([broker.address])
    listener = stomp.ConnectionListener()
    listener.on_message = replies.put  # type: ignore[method-assign,assignment]
    conn.set_listener("replies", listener)
    conn.connect(wait=True)
    try:
        conn.send("/queue/user.q", "x")
        conn.subscribe("/temp-queue/console", id="console")
        conn.send("/queue/ActiveMQ.Statistics.Broker", "", headers={"reply-to": "/temp-queue/console"})
        replies.get(timeout=WAIT)  # the request was answered: its reply queue is the tool's
        samples = scrape(broker)
    finally:
        conn.disconnect()
    destinations = {dict(labels)["destination"] for (name, labels) in samples if name == "minibroker_destination_size"}
    assert destinations == {"/queue/user.q"}
    assert samples[("minibroker_destinations", ())] == 1


def test_a_failure_inside_the_handler_is_logged_and_answered_with_a_500(broker_factory, caplog) -> None:  # type: ignore[no-untyped-def]
    broker = broker_factory(console={"port": ANY_PORT})

    def broken(*args: Any) -> None:
        raise RuntimeError("statistics out of order")

    broker.call(lambda: setattr(broker.server.broker, "statistics_source", broken))  # the broker's own seam
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"http://127.0.0.1:{broker.server.console_port}/metrics", timeout=WAIT)
    assert err.value.code == 500
    assert b"its log says why" in err.value.read()
    [record] = [r for r in caplog.records if r.name == "minibroker.console"]
    assert "GET /metrics failed" in record.getMessage()
    assert record.exc_info is not None and "statistics out of order" in str(record.exc_info[1])
