"""Lab 05: its verdicts and numbers, and the shared connection's deadlock as stomp.py sees it
on the real server."""

from __future__ import annotations

import queue
import time
from pathlib import Path
from typing import Any

import pytest

from broker_support import RunningBroker
from clients.labs import RunResult, labs_directory
from minibroker.config import load_config
from stomp_py_support import close, connect, wait_for

LAB = labs_directory() / "05-shared-connection-deadlock"
BODY = "x" * 1000


def test_every_verdict_is_as_promised(results: dict[str, RunResult]) -> None:
    verdicts = {name: r.outcome.verdict for name, r in results.items()}
    assert verdicts == {
        "shared-connection": "pathology",
        "separate-connections": "healthy",
        "send-fail-if-no-space": "healthy",
        "destination-limit": "healthy",
    }


def test_the_shared_connection_is_held_with_its_acks_behind_the_send(results: dict[str, RunResult]) -> None:
    m = results["shared-connection"].outcome.metrics
    assert m["worker_blocks"] == 1 and m["held_unacked"] > 0 and m["handled"] < m["fed"]
    assert m["mem_pct"] == 100 and m["blocked_producers"] == 2  # the feeder and the worker
    evidence = "\n".join(results["shared-connection"].outcome.evidence)
    assert "no flow_unblock followed" in evidence and "waits unread in the socket" in evidence


@pytest.mark.parametrize("run", ["separate-connections", "send-fail-if-no-space", "destination-limit"])
def test_each_cure_handles_every_request(results: dict[str, RunResult], run: str) -> None:
    m = results[run].outcome.metrics
    assert m["handled"] == m["replies"] == m["fed"] == 3000 and m["held_unacked"] == 0


def test_what_each_cure_does_is_what_it_says(results: dict[str, RunResult]) -> None:
    assert results["separate-connections"].outcome.metrics["worker_blocks"] > 0  # held, released each time
    assert results["send-fail-if-no-space"].outcome.metrics["refused"] > 0  # ERRORs, not a stall
    assert results["send-fail-if-no-space"].outcome.metrics["worker_blocks"] == 0
    assert results["destination-limit"].outcome.metrics["worker_blocks"] == 0  # the broker never filled


# -- stomp.py against the real server -------------------------------------------------------------


@pytest.mark.parametrize("config, stuck", [("shared.toml", True), ("destination-limit.toml", False)])
def test_stomp_py_worker_on_one_connection(tmp_path: Path, config: str, stuck: bool) -> None:
    """One stomp.py connection consumes requests and sends replies; a feeder fills the broker.
    Under shared.toml the worker's ACKs stop reaching the broker: the messages it holds stay
    unacknowledged however long it waits; under the destination limit every ACK arrives."""
    rb = RunningBroker(load_config(LAB / config), str(tmp_path / "data")).start()
    broker = rb.server.broker
    conns: list[Any] = []
    try:
        worker, wl = connect(rb)
        feeder, _ = connect(rb)
        auditor, al = connect(rb)
        conns += [worker, feeder, auditor]
        auditor.subscribe("/queue/replies", id="replies", ack="auto", headers={"receipt": "sub"})
        assert wait_for(lambda: "sub" in al.receipts)
        worker.subscribe("/queue/requests", id="requests", ack="client-individual", headers={"receipt": "sub"})
        assert wait_for(lambda: "sub" in wl.receipts)
        for i in range(400):  # more than the 256 KB the broker has; no RECEIPTs (asynchronous sends)
            feeder.send("/queue/requests", BODY, headers={"seq": str(i)})
        handled = 0
        deadline = time.monotonic() + 10
        while handled < 400 and time.monotonic() < deadline:
            try:
                frame = wl.messages.get(timeout=1.0)
            except queue.Empty:
                break  # nothing more comes: every request the broker will give the worker is handled
            worker.send("/queue/replies", BODY)
            worker.ack(frame.headers["ack"])
            handled += 1

        def acked() -> int:
            return rb.call(lambda: broker.destinations["/queue/requests"].dequeued)

        if stuck:
            held = rb.call(lambda: sum(len(s.dispatched) for s in broker.destinations["/queue/requests"].subscriptions))
            before = acked()
            time.sleep(0.5)  # nothing the broker could do in this time: it reads none of the worker's ACKs
            assert held > 0 and acked() == before < handled
            assert rb.call(lambda: broker.memory.percent) >= 100
        else:
            assert handled == 400 and wait_for(lambda: acked() == 400)
    finally:
        rb.stop()  # first: a DISCONNECT on a connection the broker no longer reads would wait for its RECEIPT
        for c in conns:
            close(c)
