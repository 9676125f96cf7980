"""The statistics destinations in the core, on the virtual clock: rates, the
ready/unacked split, timestamps, consumer lists and connection details."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from minibroker.config import parse_config
from minibroker.connection import hash_password
from minibroker.edge import VirtualClient, VirtualNetwork
from minibroker.ops import RateMeter


def statistics(client: VirtualClient, what: str) -> list[dict[str, Any]]:
    """Ask ``ActiveMQ.Statistics.<what>``; the JSON replies."""
    if not any(r.headers["receipt-id"] == "stats-sub" for r in client.frames("RECEIPT")):
        client.subscribe("/temp-queue/stats", "stats", receipt="stats-sub")
    before = len(client.messages())
    client.send(f"/queue/ActiveMQ.Statistics.{what}", "", **{"reply-to": "/temp-queue/stats"})
    replies = client.messages()[before:]
    assert replies and len(replies) == (int(replies[0].headers["statistics-total"]) or 1)
    return [json.loads(r.body) for r in replies]


def destination(client: VirtualClient, address: str) -> dict[str, Any]:
    [found] = [d for d in statistics(client, "Destination.>") if d["destinationName"] == address]
    return found


class TestRates:
    def test_rates_are_messages_per_second_over_the_last_seconds_of_the_broker_clock(self) -> None:
        net = VirtualNetwork()
        producer = net.connected_client()
        consumer = net.connected_client()
        consumer.subscribe("/queue/flow", "s", "client-individual", **{"activemq.prefetchSize": "1000"})
        net.every(0.1, lambda: producer.send("/queue/flow", "x"), until=20)  # 10 a second in
        net.every(0.5, lambda: [consumer.ack(m) for m in consumer.messages()] and consumer.clear(), until=20)
        net.advance(10.05)
        watcher = net.connected_client()
        stats = destination(watcher, "/queue/flow")
        # 50 in and out since the oldest sample kept (at 5 s), over 5.05 s
        assert stats["enqueueRate"] == stats["dequeueRate"] == round(50 / 5.05, 3)
        assert stats["timestamp"] == net.clock.wall_ms()
        broker = statistics(watcher, "Broker")[0]
        assert broker["enqueueRate"] >= stats["enqueueRate"] and broker["timestamp"] == net.clock.wall_ms()
        net.advance(20)  # the producer stopped at 20 s: nothing in, nothing out
        stats = destination(watcher, "/queue/flow")
        assert stats["enqueueRate"] == 0.0 and stats["dequeueRate"] == 0.0 and stats["size"] == 0

    def test_a_new_destination_has_no_rate_until_sampled(self) -> None:
        net = VirtualNetwork()
        c = net.connected_client()
        for _ in range(5):
            c.send("/queue/new", "x")
        assert destination(c, "/queue/new")["enqueueRate"] == 0.0
        net.advance(1.0)
        for _ in range(5):
            c.send("/queue/new", "x")
        net.advance(1.0)
        assert destination(c, "/queue/new")["enqueueRate"] == 5.0  # 5 more in the second since the first sample

    def test_the_meter_reads_a_counter_that_started_again_as_zero(self) -> None:
        meter = RateMeter(window=5)
        meter.sample(0.0, [("/queue/q", 100, 50)])
        assert meter.rates("/queue/q", 2.0, 110, 60) == (5.0, 5.0)
        assert meter.rates("/queue/q", 2.0, 3, 1) == (0.0, 0.0)  # deleted and made again
        meter.sample(1.0, [])
        assert meter.rates("/queue/q", 2.0, 3, 1) == (0.0, 0.0)  # forgotten once gone


class TestSplitAndConsumers:
    def test_ready_and_unacked_and_the_consumer_list(self) -> None:
        net = VirtualNetwork()
        producer = net.connected_client()
        for i in range(5):
            producer.send("/queue/work", f"m{i}", colour="red")
        worker = net.client("worker")
        worker.connect(client_id="w1")
        worker.subscribe(
            "/queue/work", "s1", "client-individual", selector="colour = 'red'", **{"activemq.prefetchSize": "2"}
        )
        stats = destination(producer, "/queue/work")
        assert (stats["size"], stats["readyCount"], stats["inflightCount"]) == (5, 3, 2)
        assert stats["consumers"] == [
            {
                "connection": worker.sid,
                "subscription": "s1",
                "clientId": "w1",
                "user": "anonymous",
                "ack": "client-individual",
                "prefetchSize": 2,
                "outstanding": 2,
                "pending": 0,
                "slowConsumer": False,
                "swapped": 0,
                "selector": "colour = 'red'",
            }
        ]
        broker = statistics(producer, "Broker")[0]
        assert (broker["readyCount"], broker["inflightCount"]) == (3, 2)
        [sub] = [s for s in statistics(producer, "Subscription") if s["subscription"] == "s1"]
        assert sub["timestamp"] == net.clock.wall_ms() and sub["dispatchedQueueSize"] == 2

    def test_a_topic_subscriptions_backlog_is_its_pending(self) -> None:
        net = VirtualNetwork()
        sub = net.connected_client()
        sub.subscribe("/topic/news", "n", "client", **{"activemq.prefetchSize": "1"})
        p = net.connected_client()
        for _ in range(3):
            p.send("/topic/news", "x")
        stats = destination(p, "/topic/news")
        assert (stats["readyCount"], stats["inflightCount"]) == (2, 1)
        assert [(c["outstanding"], c["pending"]) for c in stats["consumers"]] == [(1, 2)]
        assert (stats["pendingCount"], stats["swappedCount"]) == (2, 0)

    def test_a_file_cursor_shows_what_it_swapped_to_disk(self, tmp_path: Path) -> None:
        net = VirtualNetwork(
            parse_config(
                {
                    "system_usage": {"memory_limit": "200 kb"},
                    "destination_policy": [{"topic": ">", "pending_cursor": "file"}],
                }
            ),
            data_dir=tmp_path / "data",
        )
        slow = net.connected_client()
        slow.subscribe("/topic/prices", "s", "client-individual", **{"activemq.prefetchSize": "10"})
        p = net.connected_client()
        for i in range(300):
            p.send("/topic/prices", "x" * 1000, receipt=f"r{i}")
        stats = destination(p, "/topic/prices")
        [consumer] = stats["consumers"]
        assert consumer["pending"] == stats["pendingCount"] == 290
        assert consumer["swapped"] == stats["swappedCount"] > 200  # the whole memory list went to disk at the mark


class TestConnections:
    def test_a_connection_shows_its_user_protocol_and_subscriptions(self) -> None:
        net = VirtualNetwork(
            parse_config(
                {"users": [{"name": "alice", "password_hash": hash_password("w", iterations=1000), "groups": ["a"]}]}
            )
        )
        alice = net.client("10.0.0.7:4242")
        alice.connect(login="alice", passcode="w", client_id="app")
        alice.subscribe("/queue/in", "one", "client", **{"activemq.prefetchSize": "7"})
        monitor = net.client("10.0.0.8:4343")
        monitor.connect(login="alice", passcode="w")
        [mine] = statistics(monitor, "Connection")  # the asking connection is not among them
        assert mine["user"] == "alice" and mine["clientId"] == "app" and mine["protocol"] == "tcp"
        assert mine["remoteAddress"] == "10.0.0.7:4242" and mine["timestamp"] == net.clock.wall_ms()
        assert mine["subscriptionList"][0] == {
            "subscription": "one",
            "destinationName": "/queue/in",
            "ack": "client",
            "prefetchSize": 7,
            "outstanding": 0,
        }
        assert mine["subscriptions"] == 1
        assert "outboundQueuedBytes" in mine

    def test_the_edge_names_the_protocol(self) -> None:
        net = VirtualNetwork()
        sid = net.broker.open_session("browser", protocol="websocket")
        assert net.broker.sessions[sid].protocol == "websocket"


def test_a_non_admin_sees_only_its_own_consumers_in_a_destination_it_may_read() -> None:
    """The consumer list names connections, users and client-ids: a user without
    the admin right on the statistics sees the count, and only its own entries."""

    def user(name: str, group: str) -> dict[str, Any]:
        return {"name": name, "password_hash": hash_password(name, iterations=1000), "groups": [group]}

    net = VirtualNetwork(
        parse_config(
            {
                "users": [user("alice", "admins"), user("carol", "consumers")],
                "authorization": [
                    {"queue": ">", "read": ["admins"], "write": ["admins"], "admin": ["admins"]},
                    {"queue": "orders.>", "read": ["admins", "consumers"], "write": ["admins"], "admin": ["admins"]},
                    {"queue": "ActiveMQ.Statistics.>", "write": ["admins", "consumers"], "admin": ["admins"]},
                ],
            }
        )
    )
    alice = net.client("a")
    alice.connect(login="alice", passcode="alice", client_id="alice-app")
    alice.send("/queue/orders.eu", "o")
    alice.subscribe("/queue/orders.eu", "alice-sub")
    carol = net.client("c")
    carol.connect(login="carol", passcode="carol", client_id="carol-app")
    carol.subscribe("/queue/orders.eu", "carol-sub")
    seen = destination(carol, "/queue/orders.eu")
    assert seen["consumerCount"] == 2
    assert [(c["user"], c["clientId"]) for c in seen["consumers"]] == [("carol", "carol-app")]
    assert "alice" not in json.dumps(seen)
    everything = destination(alice, "/queue/orders.eu")
    assert {c["clientId"] for c in everything["consumers"]} == {"alice-app", "carol-app"}


class TestToolsOwnTraffic:
    """A tool's own requests and replies (stat, the console) are not the broker's traffic:
    the temporary queue a statistics or admin request names as its reply-to is the tool's
    own, neither listed nor counted."""

    def test_an_idle_broker_polled_by_the_statistics_protocol_shows_no_traffic(self) -> None:
        net = VirtualNetwork()
        console = net.connected_client()
        net.every(
            0.1, lambda: [statistics(console, what) for what in ("Broker", "Destination.>", "Connection")], until=10
        )
        statistics(console, "Broker")
        console.send("/queue/ActiveMQ.Admin.Whoami", "", **{"reply-to": "/temp-queue/stats"})
        net.advance(10.05)
        [broker] = statistics(console, "Broker")
        assert (broker["enqueueRate"], broker["dequeueRate"]) == (0.0, 0.0)
        assert (broker["enqueueCount"], broker["dequeueCount"], broker["dispatchCount"]) == (0, 0, 0)
        assert broker["size"] == broker["consumerCount"] == 0

    def test_the_destination_count_agrees_with_the_list(self) -> None:
        net = VirtualNetwork()
        user = net.connected_client()
        user.send("/queue/orders", "x")
        user.subscribe("/temp-queue/mine", "mine")  # a user's own temporary queue is a user destination
        user.send("/temp-queue/mine", "to myself")
        tools = [net.connected_client() for _ in range(3)]
        for tool in tools:
            statistics(tool, "Broker")
        for tool in tools:
            [broker] = statistics(tool, "Broker")
            listed = [d["destinationName"] for d in statistics(tool, "Destination.>")]
            assert broker["destinationCount"] == len(listed) == 2
            assert "/queue/orders" in listed and not any(name.endswith(".stats") for name in listed)

    def test_the_asking_connection_is_neither_counted_nor_listed(self) -> None:
        net = VirtualNetwork()
        app = net.connected_client()
        app.subscribe("/queue/orders", "orders")
        other_tool = net.connected_client()
        statistics(other_tool, "Broker")  # another tool's reply subscription is listed nowhere either
        stat = net.connected_client()
        [broker] = statistics(stat, "Broker")
        assert broker["connectionCount"] == 2  # the application and the other tool, not the asker
        assert {c["connection"] for c in statistics(stat, "Connection")} == {app.sid, other_tool.sid}
        assert [(s["connection"], s["destinationName"]) for s in statistics(stat, "Subscription")] == [
            (app.sid, "/queue/orders")
        ]
        [listed_tool] = [c for c in statistics(stat, "Connection") if c["connection"] == other_tool.sid]
        assert (listed_tool["subscriptions"], listed_tool["subscriptionList"]) == (0, [])
