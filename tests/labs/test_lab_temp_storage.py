"""Lab 01: its verdicts and numbers, and the hung producer as stomp.py sees it on the real server."""

from __future__ import annotations

import queue
import re
import time
from pathlib import Path
from typing import Any

import pytest

from broker_support import RunningBroker
from clients.labs import RunResult, labs_directory, load_lab
from minibroker.config import load_config
from minibroker.edge import VirtualNetwork
from stomp_py_support import close, connect, wait_for

LAB = labs_directory() / "01-temp-storage-deadlock"
TOPIC = "/topic/prices"
BODY = "x" * 1000


def test_every_verdict_is_as_promised(results: dict[str, RunResult]) -> None:
    verdicts = {name: r.outcome.verdict for name, r in results.items()}
    assert verdicts == {"deadlock": "pathology", "limit-above-file": "healthy", "vm-cursor": "healthy"}
    assert all(r.as_promised for r in results.values())


def test_deadlock_temp_stays_full_with_nothing_pending(results: dict[str, RunResult]) -> None:
    outcome = results["deadlock"].outcome
    m = outcome.metrics
    assert m["pending"] == 0 and m["temp_pct"] >= 100 and m["temp_peak_pct"] >= 100
    assert m["receipted"] == m["sent"] - 1 < 650  # one SEND waits for its RECEIPT for good
    assert m["flow_blocks"] == m["flow_unblocks"] + 1  # the last block is never lifted
    assert m["blocked_for"] > 30
    evidence = "\n".join(outcome.evidence)
    assert "the current write file (never deleted)" in evidence and "0 entries still referenced" in evidence
    assert "tempPercentUsage 113, blockedProducers 1" in evidence and "size 0" in evidence


def test_deadlock_swaps_whole_lists_and_logs_the_articles_line(results: dict[str, RunResult]) -> None:
    evidence = "\n".join(results["deadlock"].outcome.evidence)
    swapped = re.search(r"in one go \(slow-1 (\d+), slow-2 (\d+) messages\); temp usage 0% -> (\d+)%", evidence)
    assert swapped, evidence
    assert int(swapped[1]) > 50 and int(swapped[2]) > 50 and int(swapped[3]) >= 100
    assert re.search(
        r"Pending message cursor \[FilePendingMessageCursor\] is full, temp usage \(1\d\d%\) or memory "
        r"usage \(\d+%\) limit reached, blocking message add\(\) pending the release of resources",
        evidence,
    )


def test_a_limit_above_the_file_size_never_holds_the_producer(results: dict[str, RunResult]) -> None:
    m = results["limit-above-file"].outcome.metrics
    assert m["receipted"] == m["sent"] == 650 and m["pending"] == 0
    assert m["swap_outs"] >= 1 and m["flow_blocks"] == 0
    assert 0 < m["temp_pct"] < 100 and m["temp_peak_pct"] < 100
    assert m["burst_seconds"] == 12.0  # the producer's own pace


def test_the_vm_cursor_never_swaps_but_paces_the_producer(results: dict[str, RunResult]) -> None:
    m = results["vm-cursor"].outcome.metrics
    assert m["receipted"] == m["sent"] == 650 and m["pending"] == 0
    assert m["swap_outs"] == 0 and m["temp_peak_pct"] == 0
    assert m["flow_blocks"] == m["flow_unblocks"] > 100  # many short blocks, each lifted
    assert m["burst_seconds"] > 18  # held to the slow subscribers' pace, not 12 s
    assert "VMPendingMessageCursor] is full, temp usage (0%) or memory usage (100%)" in "\n".join(
        results["vm-cursor"].outcome.evidence
    )


# -- gaps found while building the lab, now fixed in the broker and the framework --------------


def test_a_scenario_module_may_define_dataclasses(tmp_path: Path) -> None:
    lab_dir = tmp_path / "99-dataclass"
    lab_dir.mkdir()
    (lab_dir / "cfg.toml").write_text("")
    (lab_dir / "lab.toml").write_text(
        'name = "dataclass"\ntitle = "t"\nsource = "temp-storage"\n'
        '[[run]]\nname = "r"\nconfig = "cfg.toml"\nexpect = "healthy"\n'
    )
    (lab_dir / "scenario.py").write_text(
        "from __future__ import annotations\nfrom dataclasses import dataclass\n\n"
        "@dataclass\nclass Point:\n    x: int\n\n"
        "def run(lab):\n    from clients.labs import Outcome\n    return Outcome(False, str(Point(1)))\n"
    )
    assert load_lab(lab_dir).scenario().Point(2).x == 2


def test_flow_unblock_names_the_usage_that_held_the_producer(tmp_path: Path) -> None:
    net = VirtualNetwork(load_config(LAB / "deadlock.toml"), data_dir=tmp_path / "data", trace=True)
    slow = [net.connected_client(f"slow-{i}") for i in (1, 2)]
    for i, c in enumerate(slow):
        c.subscribe(TOPIC, f"s{i}", "client-individual", **{"activemq.prefetchSize": "10"})
    p = net.connected_client("p")
    for i in range(200):  # a synchronous producer: it stops at the first RECEIPT withheld
        p.send(TOPIC, BODY, receipt=f"r{i}")
        if len(p.frames("RECEIPT")) <= i:
            break
    for c in slow:  # drain: the producer held at the full cursor goes on once
        done = 0
        while done < len(c.messages()):
            c.ack(c.messages()[done])
            done += 1
    flow = net.trace.events("flow_block", "flow_unblock")
    block, unblock = flow[0], next(e for e in flow if e["event"] == "flow_unblock")
    assert block["usage"] == "temp"
    assert unblock["usage"] == block["usage"]


# -- stomp.py against the real server -------------------------------------------------------------


@pytest.mark.parametrize("config, hangs", [("deadlock.toml", True), ("cure.toml", False)])
def test_stomp_py_producer_hangs_after_the_subscribers_drained(tmp_path: Path, config: str, hangs: bool) -> None:
    rb = RunningBroker(load_config(LAB / config), str(tmp_path / "data")).start()
    broker = rb.server.broker
    conns: list[Any] = []
    try:
        slow = []
        for i in (1, 2):
            conn, listener = connect(rb)
            conns.append(conn)
            conn.subscribe(
                TOPIC,
                id=f"slow-{i}",
                ack="client-individual",
                headers={"activemq.prefetchSize": "10", "receipt": "sub"},
            )
            slow.append((conn, listener))
        fast, fast_listener = connect(rb)
        conns.append(fast)
        fast.subscribe(TOPIC, id="fast", ack="auto", headers={"receipt": "sub"})
        producer, p = connect(rb)
        conns.append(producer)
        assert wait_for(lambda: all("sub" in lst.receipts for _, lst in slow) and "sub" in fast_listener.receipts)

        def send(i: int, wait: float) -> bool:
            producer.send(TOPIC, BODY, headers={"receipt": f"r{i}"})
            return wait_for(lambda: f"r{i}" in p.receipts, wait)

        sent = 0
        while sent < 300 and send(sent, 0.5):  # the slow subscribers acknowledge nothing yet
            sent += 1

        def pending() -> int:
            return rb.call(lambda: sum(len(s.pending) + len(s.dispatched) for s in broker.destinations[TOPIC].subs))

        def drain_slow() -> bool:
            """The slow subscribers acknowledge everything, until nothing is pending."""
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                took = False
                for conn, listener in slow:
                    while True:
                        try:
                            frame = listener.messages.get_nowait()
                        except queue.Empty:
                            break
                        conn.ack(frame.headers["ack"])
                        took = True
                if not took:
                    if pending() == 0:
                        return True
                    time.sleep(0.01)
            return False

        assert drain_slow()
        got_receipt = send(10_000, 1.5)
        temp_pct = rb.call(lambda: broker.temp_usage.percent)
        blocked = rb.call(lambda: sum(len(s.producing.parked) for s in broker.sessions.values()))
        if hangs:
            assert sent < 300  # held once the subscriptions swapped
            assert not got_receipt and blocked == 1 and pending() == 0
            assert temp_pct >= 100
            assert producer.is_connected() and not p.errors  # hung, not refused
        else:
            assert sent == 300 and got_receipt and blocked == 0
            assert 0 < temp_pct < 100
    finally:
        for conn in conns:
            close(conn)
        rb.stop()
