"""Lab 04: its verdicts, and the refused enqueue as stomp.py sees it on the real server."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_support import RunningBroker
from clients.cli import main as cli
from clients.labs import RunResult, labs_directory
from minibroker.config import load_config
from minibroker.edge import VirtualNetwork
from stomp_py_support import close, connect, wait_for

LAB = labs_directory() / "04-journal-threshold"
QUEUE = "/queue/Durable"
REFUSAL = 'Enqueue capacity threshold exceeded on queue "Durable".'
BODY = "x" * 200


def test_every_verdict_is_as_promised(results: dict[str, RunResult]) -> None:
    verdicts = {name: r.outcome.verdict for name, r in results.items()}
    assert verdicts == {
        "priority": "pathology",
        "selector": "pathology",
        "client-ack": "pathology",
        "all-consumed": "healthy",
        "compacted": "healthy",
        "growing": "healthy",
    }
    assert all(r.as_promised for r in results.values())


@pytest.mark.parametrize("name", ["priority", "selector", "client-ack"])
def test_a_handful_of_messages_fill_the_ring(results: dict[str, RunResult], name: str) -> None:
    outcome = results[name].outcome
    m = outcome.metrics
    assert m["live"] <= 8 and m["sent"] > 100 * m["live"]  # nearly empty, after lots of traffic
    assert m["live_bytes"] * 100 < m["ring_bytes"]  # under 1% of the ring is live
    assert m["journal_full_events"] >= 1
    evidence = "\n".join(outcome.evidence)
    assert REFUSAL in evidence and "connection is still open" in evidence and "refused again" in evidence
    pinned = [line for line in outcome.evidence if "JournalData." in line and "live=1 pinned by" in line]
    assert len(pinned) == m["live"]  # journal inspect: each message alone in its own file


def test_the_same_traffic_with_nothing_left_behind_is_never_refused(results: dict[str, RunResult]) -> None:
    m = results["all-consumed"].outcome.metrics
    assert m["live"] == 0 and m["rolls"] >= 3 * 8


def test_compaction_cures_the_ring_and_keeps_every_message_once(results: dict[str, RunResult]) -> None:
    outcome = results["compacted"].outcome
    m = outcome.metrics
    assert m["accepted_after"] > 300 and m["drained"] == m["pins_after"] > m["pins_before"]
    evidence = "\n".join(outcome.evidence)
    assert "exit status 0" in evidence and "moved 7 message(s)" in evidence
    assert "missing 0, duplicated 0, unexpected 0" in evidence


def test_the_growing_layout_refuses_nothing_and_grows_instead(results: dict[str, RunResult]) -> None:
    m = results["growing"].outcome.metrics
    assert m["files"] > 2 * 8 and m["live"] == 16
    assert m["files_one_left"] > 8  # one old message and the acks chained to it
    assert m["files_after"] == 1


def test_a_virtual_restart_can_run_an_offline_tool_while_the_broker_is_down(tmp_path: Path) -> None:
    data = tmp_path / "data"
    net = VirtualNetwork(load_config(LAB / "ring.toml"), data_dir=data)
    net.connected_client().send(QUEUE, "kept", persistent="true")
    statuses: list[int] = []
    net.restart(while_down=lambda: statuses.append(cli(["journal", "compact", str(data)])))  # type: ignore[call-arg]
    assert statuses == [0]
    c = net.connected_client()
    c.subscribe(QUEUE)
    assert c.bodies() == [b"kept"]


# -- stomp.py against the real server with the lab's ring.toml ---------------------------


def test_stomp_py_producer_gets_the_error_frame_and_keeps_its_connection(tmp_path: Path) -> None:
    rb = RunningBroker(load_config(LAB / "ring.toml"), str(tmp_path / "data")).start()
    producer, p = connect(rb)
    consumer, c = connect(rb)
    broker = rb.server.broker
    receipts = iter(range(1_000_000))

    def send(body: str, **headers: str) -> bool:
        """A persistent message with a receipt; False when the broker refuses it."""
        rid = f"r{next(receipts)}"
        producer.send(QUEUE, body, headers={"persistent": "true", "receipt": rid, **headers})
        assert wait_for(lambda: rid in p.receipts or any(e.headers.get("receipt-id") == rid for e in p.errors))
        return rid in p.receipts

    def depth() -> int:
        return rb.call(lambda: broker.destinations[QUEUE].size())

    try:
        # The journal-threshold trap's selector case: the only consumer never takes kind=audit.
        consumer.subscribe(QUEUE, id="c", ack="auto", headers={"selector": "kind = 'order'", "receipt": "sub"})
        assert wait_for(lambda: "sub" in c.receipts)
        pins = sent = 0
        refused = False
        while not refused and pins < 16:
            refused = not send(f"pin-{pins}".ljust(200, "."), kind="audit")
            if refused:
                break
            pins += 1
            start = rb.call(lambda: broker.store.journal_for(QUEUE).current_file_id)
            while not refused and rb.call(lambda: broker.store.journal_for(QUEUE).current_file_id) == start:
                for _ in range(49):
                    producer.send(QUEUE, BODY, headers={"persistent": "true", "kind": "order"})
                refused = not send(BODY, kind="order") or bool(p.errors)
                sent += 50
                assert wait_for(
                    lambda pins=pins: depth() == pins
                )  # the consumer took the batch (or what was accepted of it)
        assert refused, "the ring never refused"
        error = p.errors[0]
        assert error.headers["message"] == REFUSAL
        assert producer.is_connected() and not p.disconnected.is_set()
        assert depth() == pins <= 8 and sent > 100 * pins  # a handful of messages after hundreds
        assert not send(f"pin-{pins}".ljust(200, "."), kind="audit")  # refused again, now with a receipt-id
        assert p.errors[-1].headers["receipt-id"] and p.errors[-1].headers["message"] == REFUSAL
        files = rb.call(lambda: broker.store.journal_for(QUEUE).files())
        assert sum(f.live for f in files) == pins and max(f.live for f in files) <= 2
        assert send("a non-persistent message is not journaled", persistent="false")  # the connection still works
    finally:
        close(consumer)
        close(producer)
        rb.stop()
