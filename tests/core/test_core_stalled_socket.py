"""The stalled socket's mechanics in the core ("ActiveMQ, STOMP, and network problems
that aren't"): a slow store, a large prefetch, full socket buffers."""

from __future__ import annotations

from pathlib import Path

import pytest

from minibroker.config import parse_config
from minibroker.edge import PartialWrite, VirtualNetwork


def slow_store_net(tmp_path: Path, **transport) -> VirtualNetwork:
    doc = {"store": {"store_latency": 2}, "transport": transport}
    return VirtualNetwork(parse_config(doc), data_dir=tmp_path / "data", trace=True)


def fill(net: VirtualNetwork, n: int) -> None:
    p = net.connected_client("producer")
    for _ in range(n):
        p.send("/queue/jobs", "x" * 200, persistent="true")


def test_an_ack_costs_time_for_every_message_in_flight_and_the_broker_stops_reading(tmp_path: Path) -> None:
    net = slow_store_net(tmp_path)
    fill(net, 500)
    c = net.connected_client("consumer")
    c.subscribe("/queue/jobs", "s", "client-individual")  # default prefetch 1000: all 500 in flight
    c.ack(c.messages()[0])
    session = net.broker.sessions[c.sid]
    assert session.reading.paused and c.reading_paused
    assert session.reading.busy_until - net.now == pytest.approx(0.002 * 500, rel=0.01)
    c.ack(c.messages()[1])  # waits, unread, in the socket buffer
    assert net.broker.destinations["/queue/jobs"].size() == 499
    net.advance(1.1)
    assert net.broker.destinations["/queue/jobs"].size() == 498  # the held ACK was handled...
    assert c.reading_paused  # ... and it, too, keeps the store busy for about a second


def test_with_a_small_send_buffer_the_ack_write_fails_part_way(tmp_path: Path) -> None:
    net = slow_store_net(tmp_path)
    fill(net, 500)
    c = net.client("consumer", send_buffer=300)
    c.connect()
    c.subscribe("/queue/jobs", "s", "client-individual")
    with pytest.raises(PartialWrite) as info:
        for m in c.messages():
            c.ack(m)
    assert info.value.written < info.value.total  # the ACK did not fit: cut short


def test_prefetch_1_keeps_ack_latency_low(tmp_path: Path) -> None:
    net = slow_store_net(tmp_path)
    fill(net, 50)
    c = net.client("consumer", send_buffer=300)
    c.connect()
    c.subscribe("/queue/jobs", "s", "client-individual", **{"activemq.prefetchSize": "1"})
    for _ in range(50):
        c.ack(c.messages()[-1])  # never more than one in flight: each ACK costs 2-4 ms
        net.advance(0.005)
    assert len(c.messages()) == 50
    assert net.broker.destinations["/queue/jobs"].size() == 0


def test_connection_samples_show_the_stall(tmp_path: Path) -> None:
    net = slow_store_net(tmp_path)
    fill(net, 500)
    c = net.client("consumer", recv_buffer=4096, auto_read=False)
    c.connect()
    c.read()
    c.subscribe("/queue/jobs", "s", "client-individual")
    net.advance(3)
    samples = [e for e in net.trace.events("connection") if e["session"] == c.tag]
    assert samples and samples[-1]["pending_bytes"] > 0 and samples[-1]["idle_write"] >= 2.0
    assert samples[-1]["pending"] > 0
