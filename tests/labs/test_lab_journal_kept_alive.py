"""Lab 06: its verdicts and numbers, and the held producer as stomp.py sees it on the real server."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from broker_support import RunningBroker
from clients.labs import RunResult, labs_directory
from minibroker.config import load_config
from stomp_py_support import close, connect

LAB = labs_directory() / "06-journal-kept-alive"
BODY = "x" * 1000


def test_every_verdict_is_as_promised(results: dict[str, RunResult]) -> None:
    verdicts = {name: r.outcome.verdict for name, r in results.items()}
    assert verdicts == {
        "old-message": "pathology",
        "offline-durable": "pathology",
        "drained": "healthy",
        "subscriber-timeout": "healthy",
        "ack-compaction": "healthy",
    }


def test_ack_compaction_frees_the_chain_but_not_the_unread_messages_file(results: dict[str, RunResult]) -> None:
    """The unread message stays, and its file with it; the acks that chained every later file
    to it are written again, so those files go and the shop is never held."""
    m = results["ack-compaction"].outcome.metrics
    assert m["held"] == 1 and m["flow_blocks"] == 0 and m["waited"] == 0.0, m
    assert m["files"] <= 4 and m["store_pct"] < 50, m


@pytest.mark.parametrize("run", ["old-message", "offline-durable"])
def test_one_live_message_keeps_the_store_full(results: dict[str, RunResult], run: str) -> None:
    m = results[run].outcome.metrics
    assert m["held"] == 1 and m["pinned_files"] == 1 and m["files"] == 16  # 16 files of 64 KiB: the 1 MiB limit
    assert m["store_pct"] >= 100 and m["flow_blocks"] == 1 and m["waited"] > 30


def test_journal_inspect_names_what_pins_the_files(results: dict[str, RunResult]) -> None:
    assert 'pinned by: 2 "/queue/audit" (file 1)' in "\n".join(results["old-message"].outcome.evidence)
    assert '"durable:/topic/events|reporting|daily" (file 1)' in "\n".join(results["offline-durable"].outcome.evidence)


def test_draining_frees_the_files_and_the_shop_goes_on(results: dict[str, RunResult]) -> None:
    m = results["drained"].outcome.metrics
    assert m["flow_blocks"] == 1 and m["waited"] < 1 and m["held"] == 0 and m["files"] <= 3
    assert m["receipted"] > results["old-message"].outcome.metrics["receipted"]


def test_the_subscriber_timeout_never_lets_the_journal_grow(results: dict[str, RunResult]) -> None:
    m = results["subscriber-timeout"].outcome.metrics
    assert m["flow_blocks"] == 0 and m["held"] == 0 and m["files"] <= 3 and m["store_pct"] < 50


# -- stomp.py against the real server -------------------------------------------------------------


@pytest.mark.parametrize("drain", [False, True])
def test_stomp_py_producer_held_by_one_old_message(tmp_path: Path, drain: bool) -> None:
    """A stomp.py producer sends persistent messages, each waiting for its RECEIPT, while one
    message on /queue/audit is never read and the consumer acknowledges each message late (so
    every file holds acks of the one before): the store fills and the producer is held with
    one message and a second's worth in the broker; draining /queue/audit lets it go on."""
    rb = RunningBroker(load_config(LAB / "kahadb.toml"), str(tmp_path / "data")).start()
    producer, pl = connect(rb)
    consumer, cl = connect(rb)
    try:
        producer.send("/queue/audit", "audit record", headers={"persistent": "true", "receipt": "audit"})
        consumer.subscribe("/queue/orders", id="o", ack="client-individual")
        held_acks: list[str] = []
        held = False
        for i in range(2000):
            producer.send("/queue/orders", BODY, headers={"persistent": "true", "receipt": f"o{i}"})
            deadline = time.monotonic() + 1.0
            while f"o{i}" not in pl.receipts and time.monotonic() < deadline:
                time.sleep(0.001)
            while not cl.messages.empty():
                held_acks.append(cl.messages.get().headers["ack"])
            while len(held_acks) > 100:  # a hundred messages behind: each file holds acks of the one before
                consumer.ack(held_acks.pop(0))
            if f"o{i}" not in pl.receipts:
                held = True
                break
        assert held  # the store is full
        assert rb.call(lambda: rb.server.broker.store_usage.percent) >= 100
        for ack in held_acks:
            consumer.ack(ack)
        if drain:
            consumer.subscribe("/queue/audit", id="a", ack="auto")
        deadline = time.monotonic() + 10
        while f"o{i}" not in pl.receipts and time.monotonic() < deadline:
            time.sleep(0.01)
        assert (f"o{i}" in pl.receipts) == drain
    finally:
        rb.stop()
        close(producer)
        close(consumer)
