"""The replay driver against the real broker (asyncio server in a background thread)."""

from __future__ import annotations

import asyncio
import socket
import time
from collections import Counter

import pytest
from replay_tables import consumer, producer

import clients.replay.actor as actor
from clients.replay import Replayer, ReplayOptions, open_table
from clients.stomp import StompClient
from minibroker.trace import MemoryTrace, validate_event

pytestmark = pytest.mark.timeout(60)


def options(broker, **kw) -> ReplayOptions:
    return ReplayOptions(host="127.0.0.1", port=broker.port, **kw)


async def play(path, opts: ReplayOptions, warnings: list[str] | None = None):
    trace = MemoryTrace(time.time, broker="under-test")
    warn = warnings.append if warnings is not None else print
    replayer = Replayer(opts, trace=trace, warn=warn)
    report = await replayer.run(open_table(path).actions())
    return report, trace


def mixed_rows() -> list[dict]:
    """Two producers on a queue with two consumers (client-individual, client);
    one producer on a topic with two auto-ack subscribers."""
    times = [0.3 + i * 0.03 for i in range(20)]
    return [
        *producer("p-0", "/queue/A", times, persistent=True, priority=7, headers={"k": "v"}),
        *producer("p-1", "/queue/A", [t + 0.01 for t in times], size=333),
        *producer("t-0", "/topic/T", [0.4 + i * 0.05 for i in range(10)], start=0.2, size=50),
        *consumer("c-0", "/queue/A", stop=2.0, prefetch=5, process=0.001),
        *consumer("c-1", "/queue/A", stop=2.0, ack="client", prefetch=5),
        *consumer("s-0", "/topic/T", stop=2.0, ack="auto", prefetch=None),
        *consumer("s-1", "/topic/T", stop=2.0, ack="auto", prefetch=None),
    ]


async def test_every_send_is_sent_received_and_acked(broker, table) -> None:
    rows = mixed_rows()
    report, trace = await play(table(rows), options(broker, speed=1.5))

    assert report.ok, report.errors.lines()
    c = report.counters
    assert c.actions == Counter(r["action"] for r in rows)
    assert (c.sent, c.skipped, c.redelivered) == (50, 0, 0)
    events = trace.events()
    assert [p for e in events for p in validate_event(e)] == []
    sent = trace.events("sent")
    assert {e["msg"] for e in sent} == {
        f"{p}-{q}:{i}" for p, q, n in (("p", 0, 20), ("p", 1, 20), ("t", 0, 10)) for i in range(1, n + 1)
    }
    received = trace.events("received")
    on_queue = [e for e in received if e["dest"] == "/queue/A"]
    on_topic = [e for e in received if e["dest"] == "/topic/T"]
    # every queue message exactly once, over both consumers; every topic message to both subscribers
    assert len(on_queue) == len({e["msg"] for e in on_queue}) == 40
    assert sum(e["size"] for e in on_queue) == 20 * 100 + 20 * 333
    assert Counter(e["client"] for e in on_topic) == {"s-0": 10, "s-1": 10}
    assert all(e["latency"] >= 0 for e in received)
    acked = trace.events("acked")
    assert sorted(e["msg"] for e in acked) == sorted(e["msg"] for e in on_queue)
    assert {e["mode"] for e in acked if e["client"] == "c-1"} <= {"client"}
    assert (c.received, c.acked) == (60, 40)
    # connections are traced with the broker's session id; lag covers every action
    connects = trace.events("connect")
    assert len(connects) == 7 and all(e["session"] for e in connects)
    assert len(trace.events("disconnect")) == 7
    assert report.lag.count == len(rows)
    assert 0 <= report.lag.percentile(50) <= report.lag.percentile(99) <= report.lag.max
    assert report.latency.count == 60
    assert report.schedule == pytest.approx(2.0 / 1.5)
    text = report.render(source="t", target="b", speed=1.5, trace=None)
    assert "sent 50" in text and "received 60" in text and "acked 40" in text
    assert "behind schedule" in text and "errors:    none" in text


async def test_sends_carry_the_table_headers_and_sizes(broker, table) -> None:
    rows = [
        *producer("p-0", "/queue/H", [0.05, 0.1], persistent=True, priority=9, headers={"region": "eu"}, size=1234),
        *producer("p-1", "/queue/H", [0.15], priority=None, size=0),
    ]
    report, _ = await play(table(rows), options(broker))
    assert report.ok and report.counters.sent == 3
    client = await StompClient.connect("127.0.0.1", broker.port)
    sub = await client.subscribe("/queue/H", ack="client-individual")
    got = [await sub.get(timeout=10) for _ in range(3)]
    for m in got:
        await client.ack(m)
    await client.disconnect()
    by_id = {m.headers["replay-id"]: m for m in got}
    assert set(by_id) == {"p-0:1", "p-0:2", "p-1:1"}
    first = by_id["p-0:1"]
    assert (first.headers["persistent"], first.headers["priority"], first.headers["region"]) == ("true", "9", "eu")
    assert len(first.body) == 1234 and len(by_id["p-1:1"].body) == 0
    assert "persistent" not in by_id["p-1:1"].headers
    assert abs(float(first.headers["replay-ts"]) - time.time()) < 60


async def test_pace_changes_the_processing_time(broker, table, monkeypatch) -> None:
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr(actor, "_sleep", fake_sleep)
    rows = [
        *producer("p-0", "/queue/P", [0.1, 0.12, 0.14, 2.0, 2.02], stop=2.1),
        *consumer("c-0", "/queue/P", stop=3.0, process=0.5, paces=((1.0, 0.25),)),
    ]
    report, _ = await play(table(rows), options(broker, speed=2))
    assert report.ok and report.counters.acked == 5
    assert slept == [0.25, 0.25, 0.25, 0.125, 0.125]  # process / speed, before and after the pace


async def test_refusals_are_reported_once_and_the_client_skipped(broker, table) -> None:
    rows = [
        *consumer("c-0", "/queue/R", stop=1.0, client_id="same"),
        *consumer("c-1", "/queue/R", start=0.2, stop=1.0, client_id="same"),  # refused: id in use
        *producer("bad-0", "/nowhere/x", [0.3, 0.35]),  # refused: not a destination
        *producer("p-0", "/queue/R", [0.3, 0.4]),
    ]
    warnings: list[str] = []
    report, trace = await play(table(rows), options(broker), warnings)
    assert report.errors.count == 2
    assert any(w.startswith("client c-1: connect: ") and "already connected" in w for w in warnings), warnings
    assert any(w.startswith("client bad-0: ") and "/nowhere/x" in w for w in warnings), warnings
    assert report.counters.acked == 2  # the healthy clients went on
    assert report.counters.skipped >= 4  # c-1's subscribe, unsubscribe, disconnect; bad-0's rest
    codes = [e["code"] for e in trace.events("error")]
    assert len(codes) == 2 and "replay_connect" in codes
    assert all(validate_event(e) == [] for e in trace.events())


async def test_an_unreachable_broker_fails_each_client_with_one_message(table) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rows = [*producer("p-0", "/queue/U", [0.01]), *producer("p-1", "/queue/U", [0.01])]
    warnings: list[str] = []
    replayer = Replayer(ReplayOptions(port=port, connect_timeout=5), warn=warnings.append)
    report = await replayer.run(open_table(table(rows)).actions())
    assert report.errors.count == 2 and len(warnings) == 1  # the same message, printed once
    assert "connection refused" in warnings[0]
    assert report.counters.skipped == 4 and report.counters.sent == 0


async def test_max_clients_caps_open_connections(broker, table) -> None:
    rows = [r for i in range(3) for r in producer(f"p-{i}", "/queue/M", [0.2], stop=0.5)]
    warnings: list[str] = []
    report, _ = await play(table(rows), options(broker, max_clients=2), warnings)
    assert report.counters.peak_connected == 2
    assert report.counters.sent == 2 and report.errors.count == 1
    assert "--max-clients" in warnings[0]


async def test_a_blocked_table_does_not_grow_without_bound(broker, table) -> None:
    """More rows due than max_pending: the scheduler waits for the clients."""
    rows = producer("p-0", "/queue/B", [0.0] * 300)
    report, _ = await play(table(rows), options(broker, max_pending=16))
    assert report.ok and report.counters.sent == 300
    drain = await StompClient.connect("127.0.0.1", broker.port)
    sub = await drain.subscribe("/queue/B")
    for _ in range(300):
        await sub.get(timeout=10)
    await drain.disconnect()
    await asyncio.sleep(0)


async def test_an_interrupted_run_still_reports_and_closes(broker, table) -> None:
    rows = [*producer("p-0", "/queue/I", [0.05, 0.1], stop=60.0), *consumer("c-0", "/queue/I", stop=60.0)]
    trace = MemoryTrace(time.time)
    replayer = Replayer(options(broker), trace=trace)
    run = asyncio.ensure_future(replayer.run(open_table(table(rows)).actions()))
    while replayer.counters.acked < 2:
        await asyncio.sleep(0.01)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    report = replayer.report()
    assert (report.counters.sent, report.counters.acked, report.clients) == (2, 2, 2)
    assert report.elapsed > 0 and report.schedule == pytest.approx(60.0)
    await asyncio.wait_for(asyncio.gather(*(c.client.closed for c in replayer.clients.values())), 10)


async def test_a_client_can_connect_again_after_disconnecting(broker, table) -> None:
    rows = producer("p-0", "/queue/Again", [0.05], stop=0.1)
    rows += [{**r, "seq": r["seq"] + 3, "t": r["t"] + 0.2} for r in rows]  # the same client again
    report, trace = await play(table(rows), options(broker))
    assert report.ok and report.counters.sent == 2
    assert len(trace.events("connect")) == len(trace.events("disconnect")) == 2
    drain = await StompClient.connect("127.0.0.1", broker.port)
    sub = await drain.subscribe("/queue/Again")
    assert {(await sub.get(timeout=10)).headers["replay-id"] for _ in range(2)} == {"p-0:1", "p-0:4"}
    await drain.disconnect()
