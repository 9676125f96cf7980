"""Messaging on the virtual network: queues, topics, ack modes, prefetch, redelivery."""

from __future__ import annotations

import pytest

from minibroker.config import BrokerConfig
from minibroker.edge import VirtualNetwork
from minibroker.frames import Frame
from minibroker.protocol import encode


@pytest.fixture
def net() -> VirtualNetwork:
    return VirtualNetwork()


def send_many(client, dest: str, n: int, **headers: str) -> None:
    for i in range(n):
        client.send(dest, f"m{i}", **headers)


def test_queue_competing_consumers_round_robin(net: VirtualNetwork) -> None:
    a = net.connected_client("a")
    b = net.connected_client("b")
    a.subscribe("/queue/work")
    b.subscribe("/queue/work")
    p = net.connected_client("p")
    send_many(p, "/queue/work", 6)
    assert a.bodies() == [b"m0", b"m2", b"m4"]
    assert b.bodies() == [b"m1", b"m3", b"m5"]


def test_queue_keeps_a_backlog_until_a_consumer_comes(net: VirtualNetwork) -> None:
    p = net.connected_client()
    send_many(p, "/queue/later", 3)
    c = net.connected_client()
    c.subscribe("/queue/later")
    assert c.bodies() == [b"m0", b"m1", b"m2"]


def test_order_is_kept_per_producer(net: VirtualNetwork) -> None:
    p1 = net.connected_client()
    p2 = net.connected_client()
    c = net.connected_client()
    for i in range(20):
        (p1 if i % 3 else p2).send("/queue/o", f"{'p1' if i % 3 else 'p2'}-{i}")
    c.subscribe("/queue/o")
    got = [b.decode() for b in c.bodies()]
    for prefix in ("p1", "p2"):
        mine = [int(x.split("-")[1]) for x in got if x.startswith(prefix)]
        assert mine == sorted(mine)
    assert len(got) == 20


def test_topic_fans_out_to_every_current_subscriber(net: VirtualNetwork) -> None:
    subs = [net.connected_client(f"s{i}") for i in range(3)]
    for i, s in enumerate(subs):
        s.subscribe("/topic/news", f"t{i}")
    p = net.connected_client()
    send_many(p, "/topic/news", 4)
    for s in subs:
        assert s.bodies() == [b"m0", b"m1", b"m2", b"m3"]
    late = net.connected_client("late")
    late.subscribe("/topic/news")
    assert late.bodies() == []  # non-durable: nothing from before


def test_message_headers(net: VirtualNetwork) -> None:
    c = net.connected_client()
    c.subscribe("/queue/h", "sub-7", "client-individual")
    p = net.connected_client()
    p.send(
        "/queue/h",
        "body",
        **{
            "custom": "value: with colon",
            "reply-to": "/queue/replies",
            "message-id": "forged",
            "persistent": "true",
            "priority": "7",
        },
    )
    msg = c.messages()[0]
    h = msg.headers
    assert h["subscription"] == "sub-7"
    assert h["destination"] == "/queue/h"
    assert h["message-id"].startswith("ID:") and h["message-id"] != "forged"
    assert h["custom"] == "value: with colon"
    assert h["reply-to"] == "/queue/replies"
    assert h["persistent"] == "true"
    assert h["priority"] == "7"
    assert h["expires"] == "0"
    assert int(h["timestamp"]) == net.clock.wall_ms()
    assert "ack" in h
    assert msg.body == b"body"


def test_binary_bodies_with_nul_survive(net: VirtualNetwork) -> None:
    c = net.connected_client()
    c.subscribe("/queue/bin")
    body = bytes(range(256)) * 4
    net.connected_client().send("/queue/bin", body)
    assert c.bodies() == [body]


def test_auto_ack_needs_no_ack(net: VirtualNetwork) -> None:
    c = net.connected_client()
    c.subscribe("/queue/auto")
    p = net.connected_client()
    send_many(p, "/queue/auto", 5)
    assert "ack" not in c.messages()[0].headers
    c.drop()
    again = net.connected_client()
    again.subscribe("/queue/auto")
    assert again.bodies() == []


def test_client_individual_acks_one_message(net: VirtualNetwork) -> None:
    c = net.connected_client()
    c.subscribe("/queue/ci", "s", "client-individual")
    send_many(net.connected_client(), "/queue/ci", 3)
    msgs = c.messages()
    c.ack(msgs[1])
    c.drop()
    again = net.connected_client()
    again.subscribe("/queue/ci")
    assert again.bodies() == [b"m0", b"m2"]
    assert all(m.headers.get("redelivered") == "true" for m in again.messages())


def test_client_ack_is_cumulative(net: VirtualNetwork) -> None:
    c = net.connected_client()
    c.subscribe("/queue/cum", "s", "client")
    send_many(net.connected_client(), "/queue/cum", 4)
    c.ack(c.messages()[2])
    c.drop()
    again = net.connected_client()
    again.subscribe("/queue/cum")
    assert again.bodies() == [b"m3"]


@pytest.mark.parametrize("ack", ["client", "client-individual"])
def test_prefetch_bounds_unacked_messages(net: VirtualNetwork, ack: str) -> None:
    c = net.connected_client()
    c.subscribe("/queue/pf", "s", ack, **{"activemq.prefetchSize": "2"})
    send_many(net.connected_client(), "/queue/pf", 5)
    assert c.bodies() == [b"m0", b"m1"]
    c.ack(c.messages()[0])
    assert c.bodies() == [b"m0", b"m1", b"m2"]
    c.ack(c.messages()[2])  # cumulative in client mode, one in client-individual
    expected = [b"m0", b"m1", b"m2", b"m3", b"m4"] if ack == "client" else [b"m0", b"m1", b"m2", b"m3"]
    assert c.bodies() == expected


@pytest.mark.parametrize("ack", ["client", "client-individual"])
def test_an_ack_read_with_the_disconnect_sends_nothing_more(net: VirtualNetwork, ack: str) -> None:
    """A consumer that takes exactly its prefetch, then ACKs and DISCONNECTs in
    one write: the ACK frees room, but a client that says goodbye reads
    nothing more, so nothing is dispatched to it; the rest stay on the queue
    untouched (not flagged redelivered, their redelivery count 0)."""
    send_many(net.connected_client(), "/queue/exact", 5)
    c = net.connected_client()
    c.subscribe("/queue/exact", "s", ack, **{"activemq.prefetchSize": "2"})
    got = c.messages()
    assert [m.body for m in got] == [b"m0", b"m1"]
    acks = [got[-1]] if ack == "client" else got
    ack_frames = [Frame("ACK", {"id": m.headers["ack"]}) for m in acks]
    c.send_raw(b"".join(encode(f) for f in [*ack_frames, Frame("DISCONNECT", {"receipt": "bye"})]))
    assert [f.command for f in c.frames()][-1] == "RECEIPT"
    assert c.bodies() == [b"m0", b"m1"]
    queue = net.broker.destinations["/queue/exact"]
    assert [(m.body, m.redeliveries) for m in queue.pending] == [(b"m2", 0), (b"m3", 0), (b"m4", 0)]
    again = net.connected_client()
    again.subscribe("/queue/exact")
    assert [(m.body, "redelivered" in m.headers) for m in again.messages()] == [
        (b"m2", False),
        (b"m3", False),
        (b"m4", False),
    ]


def test_default_prefetch_is_activemq_s(net: VirtualNetwork) -> None:
    c = net.connected_client()
    c.subscribe("/queue/big", "s", "client")
    send_many(net.connected_client(), "/queue/big", 1005)
    assert len(c.messages()) == 1000


def test_prefetch_spreads_work_between_consumers(net: VirtualNetwork) -> None:
    slow = net.connected_client("slow")
    fast = net.connected_client("fast")
    slow.subscribe("/queue/share", "s", "client-individual", **{"activemq.prefetchSize": "1"})
    fast.subscribe("/queue/share", "f", "client-individual", **{"activemq.prefetchSize": "1"})
    send_many(net.connected_client(), "/queue/share", 10)
    assert len(slow.messages()) == 1 and len(fast.messages()) == 1
    for _ in range(8):
        fast.ack(fast.messages()[-1])
    assert len(slow.messages()) == 1
    assert len(fast.messages()) == 9


def test_nack_redelivers_to_the_head_in_order(net: VirtualNetwork) -> None:
    c = net.connected_client()
    c.subscribe("/queue/n", "s", "client-individual", **{"activemq.prefetchSize": "2"})
    send_many(net.connected_client(), "/queue/n", 4)
    first, second = c.messages()
    c.nack(second)  # m1 goes back to the head, before m2 and m3, and comes straight back
    c.nack(first)
    assert c.bodies() == [b"m0", b"m1", b"m1", b"m0"]
    assert [m.headers.get("redelivered") for m in c.messages()[2:]] == ["true", "true"]
    for m in c.messages()[2:]:
        c.ack(m)
    assert c.bodies()[4:] == [b"m2", b"m3"]


def test_client_mode_nack_covers_earlier_messages(net: VirtualNetwork) -> None:
    c = net.connected_client()
    c.subscribe("/queue/cn", "s", "client", **{"activemq.prefetchSize": "3"})
    send_many(net.connected_client(), "/queue/cn", 3)
    c.nack(c.messages()[1])
    assert c.bodies()[3:] == [b"m0", b"m1"]


def test_unsubscribe_returns_unacked_messages_in_order(net: VirtualNetwork) -> None:
    a = net.connected_client()
    a.subscribe("/queue/u", "s", "client-individual", **{"activemq.prefetchSize": "3"})
    send_many(net.connected_client(), "/queue/u", 5)
    a.send_frame("UNSUBSCRIBE", {"id": "s"})
    b = net.connected_client()
    b.subscribe("/queue/u")
    assert b.bodies() == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert [m.headers.get("redelivered") for m in b.messages()] == ["true"] * 3 + [None] * 2


def test_redelivery_goes_to_the_other_consumer(net: VirtualNetwork) -> None:
    a = net.connected_client("a")
    a.subscribe("/queue/r", "s", "client-individual", **{"activemq.prefetchSize": "1"})
    b = net.connected_client("b")
    b.subscribe("/queue/r", "s", "client-individual", **{"activemq.prefetchSize": "1"})
    send_many(net.connected_client(), "/queue/r", 2)
    assert a.bodies() == [b"m0"] and b.bodies() == [b"m1"]
    a.drop()
    b.ack(b.messages()[0])
    assert b.bodies() == [b"m1", b"m0"]
    assert b.messages()[1].headers["redelivered"] == "true"


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_ack_headers_per_version(version: str) -> None:
    net = VirtualNetwork()
    c = net.connected_client(version=version)
    c.subscribe("/queue/v", "s", "client-individual")
    send_many(net.connected_client(), "/queue/v", 2)
    msgs = c.messages()
    assert ("ack" in msgs[0].headers) == (version == "1.2")
    c.ack(msgs[0], receipt="ok")
    assert c.last().command == "RECEIPT"
    c.drop()
    again = net.connected_client()
    again.subscribe("/queue/v")
    assert again.bodies() == [b"m1"]


@pytest.mark.parametrize(
    "headers,fragment",
    [
        ({"id": "999-999"}, "unknown ack id"),
        ({"id": "garbage"}, "unknown ack id"),
        ({}, "no id header"),
    ],
)
def test_bad_ack_is_an_error(net: VirtualNetwork, headers: dict, fragment: str) -> None:
    c = net.connected_client()
    c.subscribe("/queue/b", "s", "client")
    c.send_frame("ACK", headers)
    assert c.last().command == "ERROR"
    assert fragment in c.last().headers["message"]


@pytest.mark.parametrize("header", ["message-id", "ack"])
def test_a_1_2_ack_without_an_id_header_names_the_missing_header(net: VirtualNetwork, header: str) -> None:
    """The MESSAGE's ack id (or its message-id) under the wrong name: the ERROR says
    which header 1.2 needs, not that the message is not awaiting acknowledgement."""
    c = net.connected_client()
    c.subscribe("/queue/noid", "s", "client-individual")
    net.connected_client().send("/queue/noid", "m")
    msg = c.messages()[0]
    c.send_frame("ACK", {"message-id": msg.headers[header], "subscription": "s"})
    assert c.last().command == "ERROR"
    assert c.last().headers["message"].startswith("ACK frame has no id header")


def test_ack_on_an_auto_subscription_is_an_error(net: VirtualNetwork) -> None:
    c = net.connected_client(version="1.1")
    c.subscribe("/queue/x", "s", "auto")
    net.connected_client().send("/queue/x", "m")
    msg = c.messages()[0]
    c.send_frame("ACK", {"message-id": msg.headers["message-id"], "subscription": "s"})
    assert c.last().command == "ERROR"


def test_acking_twice_is_an_error(net: VirtualNetwork) -> None:
    c = net.connected_client()
    c.subscribe("/queue/t", "s", "client-individual")
    net.connected_client().send("/queue/t", "m")
    msg = c.messages()[0]
    c.ack(msg)
    c.ack(msg)
    assert c.last().command == "ERROR"
    assert "not awaiting" in c.last().headers["message"] or "unknown ack id" in c.last().headers["message"]


def test_nack_is_not_1_0(net: VirtualNetwork) -> None:
    c = net.connected_client(version="1.0")
    c.send_frame("NACK", {"message-id": "x"})
    assert "NACK is not part of STOMP 1.0" in c.last().headers["message"]


class TestTransactions:
    def test_sends_are_invisible_until_commit(self, net: VirtualNetwork) -> None:
        c = net.connected_client()
        c.subscribe("/queue/tx")
        p = net.connected_client()
        p.send_frame("BEGIN", {"transaction": "t1"})
        p.send("/queue/tx", "a", transaction="t1")
        p.send("/queue/tx", "b", transaction="t1")
        assert c.bodies() == []
        p.send_frame("COMMIT", {"transaction": "t1"})
        assert c.bodies() == [b"a", b"b"]

    def test_abort_drops_sends_and_returns_acked_messages(self, net: VirtualNetwork) -> None:
        c = net.connected_client()
        c.subscribe("/queue/tx2", "s", "client-individual")
        p = net.connected_client()
        p.send("/queue/tx2", "kept")
        c.send_frame("BEGIN", {"transaction": "t"})
        c.ack(c.messages()[0], transaction="t")
        p.send_frame("BEGIN", {"transaction": "t"})
        p.send("/queue/tx2", "dropped", transaction="t")
        p.send_frame("ABORT", {"transaction": "t"})
        c.send_frame("ABORT", {"transaction": "t"})
        assert c.bodies() == [b"kept", b"kept"]
        assert c.messages()[1].headers["redelivered"] == "true"

    def test_a_persistent_commit_may_deliver_to_an_auto_consumer_at_once(self, tmp_path) -> None:
        """The COMMIT routes its sends while its journal transaction is still open: an
        auto-ack consumer consumes one before the TX_COMMIT is written (the journal lets a
        transaction dequeue its own enqueue; this raised KeyError in the broker before)."""
        net = VirtualNetwork(data_dir=tmp_path)
        c = net.connected_client()
        c.subscribe("/queue/txp")
        p = net.connected_client()
        p.send_frame("BEGIN", {"transaction": "t"})
        p.send("/queue/txp", "a", transaction="t", persistent="true")
        p.send_frame("COMMIT", {"transaction": "t", "receipt": "done"})
        assert c.bodies() == [b"a"]
        assert p.last() is not None and p.last().headers.get("receipt-id") == "done"
        net.restart()  # consumed for good: nothing comes back
        again = net.connected_client()
        again.subscribe("/queue/txp")
        assert again.bodies() == []
        net.stop()

    def test_lost_connection_rolls_back(self, net: VirtualNetwork) -> None:
        c = net.connected_client()
        c.subscribe("/queue/tx3", "s", "client-individual")
        net.connected_client().send("/queue/tx3", "m")
        c.send_frame("BEGIN", {"transaction": "t"})
        c.ack(c.messages()[0], transaction="t")
        c.drop()
        again = net.connected_client()
        again.subscribe("/queue/tx3")
        assert again.bodies() == [b"m"]

    @pytest.mark.parametrize(
        "frames,fragment",
        [
            ([("COMMIT", {"transaction": "nope"})], "unknown transaction"),
            ([("ABORT", {"transaction": "nope"})], "unknown transaction"),
            ([("BEGIN", {"transaction": "t"}), ("BEGIN", {"transaction": "t"})], "already in progress"),
            ([("SEND", {"destination": "/queue/a", "transaction": "none"})], "unknown transaction"),
            ([("BEGIN", {})], "no transaction header"),
        ],
    )
    def test_transaction_errors(self, net: VirtualNetwork, frames: list, fragment: str) -> None:
        c = net.connected_client()
        for command, headers in frames:
            c.send_frame(command, headers)
        assert c.last().command == "ERROR"
        assert fragment in c.last().headers["message"]


class TestOutboundBuffer:
    """A consumer that does not read cannot make the broker buffer without bound."""

    def test_dispatch_stops_while_the_socket_is_full(self) -> None:
        config = BrokerConfig().replace(transport={"write_buffer_limit": 4096})
        net = VirtualNetwork(config)
        slow = net.client("slow", recv_buffer=8192, auto_read=False)
        slow.connect()
        slow.read()
        slow.subscribe("/queue/flood")
        p = net.connected_client("p")
        send_many(p, "/queue/flood", 2000)
        queue = net.broker.destinations["/queue/flood"]
        unread = len(slow.inbound)
        assert unread < 8192 + 4096 + 1024  # socket buffer plus one outbox at most
        assert len(queue.pending) > 1500  # the rest waits in the queue, not in buffers
        while len(slow.received) < 2002:
            before = len(slow.received)
            slow.read(4096)
            assert len(slow.inbound) < 8192 + 4096 + 1024
            if len(slow.received) == before and not slow.inbound:
                break
        assert len(slow.messages()) == 2000
        assert [m.body for m in slow.messages()][:3] == [b"m0", b"m1", b"m2"]

    def test_a_stuck_consumer_does_not_stop_others(self) -> None:
        net = VirtualNetwork(BrokerConfig().replace(transport={"write_buffer_limit": 2048}))
        stuck = net.client("stuck", recv_buffer=4096, auto_read=False)
        stuck.connect()
        stuck.read()
        stuck.subscribe("/topic/t", "a")
        ok = net.connected_client("ok")
        ok.subscribe("/queue/q")
        p = net.connected_client("p")
        send_many(p, "/topic/t", 500)
        send_many(p, "/queue/q", 100)
        assert len(ok.messages()) == 100
