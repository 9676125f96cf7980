"""Lab 07: its verdicts and numbers, and the redelivery back-off as stomp.py sees it on the real server."""

from __future__ import annotations

import time
from itertools import pairwise
from pathlib import Path

import pytest

from broker_support import RunningBroker
from clients.labs import RunResult, labs_directory
from minibroker.config import load_config
from stomp_py_support import close, connect

LAB = labs_directory() / "07-poison-message"


def test_every_verdict_is_as_promised(results: dict[str, RunResult]) -> None:
    verdicts = {name: r.outcome.verdict for name, r in results.items()}
    assert verdicts == {
        "requeue-forever": "pathology",
        "activemq-defaults": "pathology",
        "individual-dlq": "healthy",
        "back-off": "healthy",
    }


def test_without_a_limit_the_poison_message_loops_to_the_end(results: dict[str, RunResult]) -> None:
    m = results["requeue-forever"].outcome.metrics
    assert m["poison_deliveries"] > 1000 and m["depth_max"] <= 2  # the queue's length does not move
    assert m["handled"] == m["sent"] == 200  # the prefetch lets the good orders past
    assert m["dlq_messages"] == {"/queue/ActiveMQ.DLQ": 50}  # only the expired quotes


def test_activemqs_defaults_hide_the_poison_message_among_expired_quotes(results: dict[str, RunResult]) -> None:
    m = results["activemq-defaults"].outcome.metrics
    assert m["poison_deliveries"] == 7 and m["poison_seconds"] < 0.1  # six redeliveries, one after another
    assert m["dlq_messages"] == {"/queue/ActiveMQ.DLQ": 51}
    assert "from /queue/orders 1, /queue/prices 50 (expired 50, redelivered 1)" in "\n".join(
        results["activemq-defaults"].outcome.evidence
    )


@pytest.mark.parametrize("run", ["individual-dlq", "back-off"])
def test_the_cures_leave_the_poison_message_alone_in_its_queues_dlq(results: dict[str, RunResult], run: str) -> None:
    m = results[run].outcome.metrics
    assert m["poison_deliveries"] == 7 and m["dlq_messages"] == {"/queue/ActiveMQ.DLQ.Queue.orders": 1}
    assert m["expired"] == 50  # expired, and dropped


def test_the_back_off_spreads_the_redeliveries(results: dict[str, RunResult]) -> None:
    m = results["back-off"].outcome.metrics
    assert 31.5 <= m["poison_seconds"] < 31.6  # 0.5 + 1 + 2 + 4 + 8 + 16 s, and the service's reaction times


# -- stomp.py against the real server -------------------------------------------------------------


def test_stomp_py_nacked_message_comes_back_after_the_back_off(tmp_path: Path) -> None:
    """A stomp.py consumer NACKs the same message again and again under back-off.toml: the
    waits between its deliveries grow (0.5, 1, 2 s ...), and the broker counts it queued while it waits."""
    rb = RunningBroker(load_config(LAB / "back-off.toml"), str(tmp_path / "data")).start()
    conn, listener = connect(rb)
    try:
        conn.subscribe("/queue/orders", id="orders", ack="client-individual", headers={"receipt": "sub"})
        deadline = time.monotonic() + 10
        while "sub" not in listener.receipts and time.monotonic() < deadline:
            time.sleep(0.005)
        conn.send("/queue/orders", "poison", headers={"persistent": "true"})
        arrived = []
        for _ in range(3):
            frame = listener.messages.get(timeout=10)
            arrived.append(time.monotonic())
            conn.nack(frame.headers["ack"])
        queued = rb.call(lambda: rb.server.broker.destinations["/queue/orders"].size())
        gaps = [b - a for a, b in pairwise(arrived)]
        assert 0.45 <= gaps[0] < gaps[1] and gaps[1] >= 0.95  # 0.5 s, then 1 s
        assert queued == 1  # waiting for its third redelivery, still on the queue
    finally:
        rb.stop()
        close(conn)
