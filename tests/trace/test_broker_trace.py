"""The broker's trace follows the schema (docs/trace-schema.md), on both edges."""

from __future__ import annotations

import json
import time
from itertools import pairwise
from pathlib import Path

from minibroker.config import parse_config
from minibroker.edge import VirtualNetwork
from minibroker.trace import EVENTS, validate_event
from stomp_py_support import close, connect

BODY = "x" * 1000


def busy_network(tmp_path: Path) -> VirtualNetwork:
    """A run that touches most of what the broker traces."""
    config = parse_config(
        {
            "system_usage": {"memory_limit": "200 kb"},
            "store": {"layout": "ring", "file_count": 4, "file_size": "64 kb"},
            "destination_policy": [
                {"queue": ">", "maximum_redeliveries": 1, "space_check": "legacy", "pending_cursor": "vm"}
            ],
        }
    )
    net = VirtualNetwork(config, data_dir=tmp_path / "data", trace=True)
    p = net.connected_client("producer")
    for i in range(5):
        p.send("/queue/A", f"a{i}", persistent="true")
    net.restart()
    p = net.connected_client("producer")
    c = net.connected_client("consumer")
    c.subscribe("/queue/work", "s", "client-individual", **{"activemq.prefetchSize": "2"})
    p.send("/queue/work", "m1", persistent="true", expires=str(net.clock.wall_ms() + 5))
    p.send("/queue/work", "m2", persistent="true")
    c.ack(c.messages()[0])
    c.nack(c.messages()[1])
    c.nack(c.messages()[2])  # past maximum_redeliveries: dead-lettered
    p.send("/queue/gone", "stale", expires=str(net.clock.wall_ms() + 1))
    net.advance(1)
    late = net.connected_client("late")
    late.subscribe("/queue/gone")
    for i in range(400):  # roll the ring, then fill it (journal_full)
        p.send("/queue/backlog", BODY, persistent="true", receipt=f"r{i}")
    for i in range(300):  # fill memory: flow control
        p.send("/queue/np", BODY, receipt=f"n{i}")
    a = net.connected_client("a-consumer")
    a.subscribe("/queue/A")  # legacy space check: page-in blocked
    drain = net.connected_client("drain")
    drain.subscribe("/queue/backlog")
    drain.subscribe("/queue/np", "np")
    c.send_frame("SUBSCRIBE", {"destination": "/nowhere/x", "id": "bad"})  # an error
    net.advance(1)
    return net


def test_every_event_the_broker_writes_is_valid(tmp_path: Path) -> None:
    net = busy_network(tmp_path)
    events = net.trace.events()
    problems = {(e["event"], p) for e in events for p in validate_event(e)}
    assert not problems
    seen = {e["event"] for e in events}
    expected = {
        "connect",
        "disconnect",
        "subscribe",
        "unsubscribe",
        "send",
        "enqueue",
        "recover",
        "page_in",
        "page_in_blocked",
        "dispatch",
        "ack",
        "nack",
        "redeliver",
        "expire",
        "dlq",
        "usage",
        "flow_block",
        "flow_unblock",
        "journal_roll",
        "journal_full",
        "error",
        "connection",
    }
    assert expected <= seen, f"never traced: {sorted(expected - seen)}"
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert all(e["event"] in EVENTS for e in events)


def test_every_session_field_is_the_session_id_connected_announced(tmp_path: Path) -> None:
    net = busy_network(tmp_path)
    announced = {e["session"] for e in net.trace.events("connect")}
    events = net.trace.events()
    tagged = [e for e in events if "session" in e]
    assert {e["event"] for e in tagged} >= {"send", "enqueue", "dispatch", "ack", "connect", "flow_block"}
    strays = {(e["event"], e["session"]) for e in tagged if e["session"] not in announced}
    assert not strays


def test_usage_events_carry_broker_wide_values_and_change_only_on_percent_changes(tmp_path: Path) -> None:
    net = busy_network(tmp_path)
    usage = net.trace.events("usage")
    assert usage
    broker_wide = [e for e in usage if "dest" not in e]
    assert all(
        a["mem_pct"] != b["mem_pct"] or a["store_pct"] != b["store_pct"] or a["temp_pct"] != b["temp_pct"]
        for a, b in pairwise(broker_wide)
    )
    assert any(e.get("dest") == "/queue/np" and e["dest_mem_pct"] >= 90 for e in usage)


def _serve_one_message(broker_factory, trace_file: Path, **options: str) -> None:
    """A real server with a trace: one persistent message sent and received."""
    rb = broker_factory(broker={"trace": str(trace_file), **options})
    conn, listener = connect(rb)
    try:
        conn.subscribe("/queue/traced", id="s", ack="auto")
        conn.send("/queue/traced", "hello", headers={"persistent": "true"})
        listener.take(1)
    finally:
        close(conn)
    rb.stop()  # closing the broker closes (and completes) the trace


def test_serve_writes_a_trace_file(broker_factory, tmp_path: Path) -> None:
    trace_file = tmp_path / "broker-trace.jsonl"
    _serve_one_message(broker_factory, trace_file)
    lines = [json.loads(line) for line in trace_file.read_text().splitlines()]
    assert [e["seq"] for e in lines] == list(range(1, len(lines) + 1))
    assert all(not validate_event(e) for e in lines)
    kinds = [e["event"] for e in lines]
    for event in ("connect", "subscribe", "send", "enqueue", "dispatch", "ack", "disconnect"):
        assert event in kinds
    assert abs(lines[0]["ts"] - time.time()) < 600  # epoch seconds on a real server


def test_serve_writes_the_parquet_twin_of_its_trace(broker_factory, tmp_path: Path) -> None:
    """broker.trace_format = "both": the segments hold the same events as the file."""
    from minibroker.trace.parquet import read_events
    from minibroker.trace.segments import twin_dir

    trace_file = tmp_path / "broker-trace.jsonl"
    _serve_one_message(broker_factory, trace_file, trace_format="both")
    lines = [json.loads(line) for line in trace_file.read_text().splitlines()]
    assert "dispatch" in [e["event"] for e in lines]
    assert list(read_events(twin_dir(trace_file))) == lines
