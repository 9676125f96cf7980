"""What an ActiveMQ STOMP user reaches for, in the core on a virtual clock:
dead letters, expiry, priorities, exclusive and durable subscriptions,
temporary queues, browsing and security."""

from __future__ import annotations

from itertools import pairwise

import pytest

from minibroker.config import parse_config
from minibroker.connection import hash_password, verify_password
from minibroker.edge import VirtualNetwork


def policy_net(**policy) -> VirtualNetwork:
    return VirtualNetwork(parse_config({"destination_policy": [{"queue": ">", **policy}, {"topic": ">", **policy}]}))


def nack_until_gone(client, max_rounds: int = 20) -> int:
    """NACK whatever arrives until nothing more comes; returns deliveries seen."""
    seen = 0
    for _ in range(max_rounds):
        msgs = client.messages()
        if len(msgs) == seen:
            break
        new = msgs[seen:]
        seen = len(msgs)
        for m in new:
            client.nack(m)
    return seen


class TestDeadLetters:
    def test_after_maximum_redeliveries_a_persistent_message_goes_to_the_dlq(self) -> None:
        net = VirtualNetwork()
        c = net.connected_client()
        c.subscribe("/queue/orders", "s", "client-individual")
        net.connected_client().send("/queue/orders", "poison", persistent="true", custom="kept")
        deliveries = nack_until_gone(c)
        assert deliveries == 7  # the first delivery and maximum_redeliveries=6 more
        dlq = net.connected_client()
        dlq.subscribe("/queue/ActiveMQ.DLQ")
        [msg] = dlq.messages()
        assert msg.body == b"poison"
        assert msg.headers["original-destination"] == "/queue/orders"
        assert "maximum_redeliveries=6" in msg.headers["dlqDeliveryFailureCause"]
        assert msg.headers["custom"] == "kept"
        assert msg.headers["message-id"] == c.messages()[0].headers["message-id"]

    def test_non_persistent_messages_are_dropped_not_dead_lettered(self) -> None:
        net = VirtualNetwork()
        c = net.connected_client()
        c.subscribe("/queue/np", "s", "client-individual")
        net.connected_client().send("/queue/np", "transient")
        assert nack_until_gone(c) == 7
        assert "/queue/ActiveMQ.DLQ" not in net.broker.destinations
        assert net.broker.destinations["/queue/np"].size() == 0

    def test_process_non_persistent(self) -> None:
        net = policy_net(process_non_persistent=True, maximum_redeliveries=1)
        c = net.connected_client()
        c.subscribe("/queue/np", "s", "client-individual")
        net.connected_client().send("/queue/np", "transient")
        assert nack_until_gone(c) == 2
        assert net.broker.destinations["/queue/ActiveMQ.DLQ"].size() == 1

    def test_nack_dead_letters_at_once_like_activemq_stomp(self) -> None:
        net = policy_net(dead_letter_on_nack=True)
        c = net.connected_client()
        c.subscribe("/queue/q", "s", "client-individual")
        net.connected_client().send("/queue/q", "once", persistent="true")
        assert nack_until_gone(c) == 1
        assert net.broker.destinations["/queue/ActiveMQ.DLQ"].size() == 1

    def test_individual_dead_letter_strategy(self) -> None:
        net = policy_net(dead_letter_strategy="individual", maximum_redeliveries=0)
        c = net.connected_client()
        c.subscribe("/queue/billing", "s", "client-individual")
        net.connected_client().send("/queue/billing", "x", persistent="true")
        nack_until_gone(c)
        assert net.broker.destinations["/queue/ActiveMQ.DLQ.Queue.billing"].size() == 1

    def test_rollback_counts_a_delivery(self) -> None:
        net = policy_net(maximum_redeliveries=2)
        c = net.connected_client()
        c.subscribe("/queue/tx", "s", "client-individual")
        net.connected_client().send("/queue/tx", "m", persistent="true")
        for i in range(3):
            msg = c.messages()[-1]
            c.send_frame("BEGIN", {"transaction": f"t{i}"})
            c.ack(msg, transaction=f"t{i}")
            c.send_frame("ABORT", {"transaction": f"t{i}"})
        assert len(c.messages()) == 3
        assert net.broker.destinations["/queue/ActiveMQ.DLQ"].size() == 1

    def test_a_dlq_does_not_dead_letter_into_itself(self) -> None:
        net = policy_net(maximum_redeliveries=0)
        c = net.connected_client()
        c.subscribe("/queue/src", "s", "client-individual")
        net.connected_client().send("/queue/src", "m", persistent="true")
        nack_until_gone(c)
        d = net.connected_client()
        d.subscribe("/queue/ActiveMQ.DLQ", "d", "client-individual")
        nack_until_gone(d)
        assert net.broker.destinations["/queue/ActiveMQ.DLQ"].size() == 0

    def test_topic_subscriptions_dead_letter_too(self) -> None:
        net = policy_net(maximum_redeliveries=1)
        c = net.connected_client()
        c.subscribe("/topic/t", "s", "client-individual")
        net.connected_client().send("/topic/t", "m", persistent="true")
        assert nack_until_gone(c) == 2
        assert net.broker.destinations["/queue/ActiveMQ.DLQ"].size() == 1


class TestExpiry:
    def test_expired_messages_are_never_delivered(self) -> None:
        net = VirtualNetwork()
        p = net.connected_client()
        now = net.clock.wall_ms()
        p.send("/queue/e", "stale", expires=str(now + 1000), persistent="true")
        p.send("/queue/e", "fresh", expires="0")
        net.advance(2)
        c = net.connected_client()
        c.subscribe("/queue/e")
        assert c.bodies() == [b"fresh"]
        dlq = net.connected_client()
        dlq.subscribe("/queue/ActiveMQ.DLQ")
        assert dlq.bodies() == [b"stale"]
        assert dlq.messages()[0].headers["dlqDeliveryFailureCause"] == "expired"

    def test_the_periodic_sweep_moves_expired_messages_without_a_consumer(self) -> None:
        net = policy_net(expire_messages_period=1000)
        p = net.connected_client()
        p.send("/queue/sweep", "soon", expires=str(net.clock.wall_ms() + 500), persistent="true")
        queue = net.broker.destinations["/queue/sweep"]
        assert queue.size() == 1
        net.advance(1.5)
        assert queue.size() == 0 and queue.expired == 1
        assert net.broker.destinations["/queue/ActiveMQ.DLQ"].size() == 1

    def test_process_expired_off_drops_them(self) -> None:
        net = policy_net(process_expired=False)
        p = net.connected_client()
        p.send("/queue/e", "x", expires=str(net.clock.wall_ms() + 1), persistent="true")
        net.advance(1)
        c = net.connected_client()
        c.subscribe("/queue/e")
        assert c.bodies() == [] and "/queue/ActiveMQ.DLQ" not in net.broker.destinations

    def test_expired_topic_messages_are_not_delivered(self) -> None:
        net = VirtualNetwork()
        c = net.client("slow", recv_buffer=1, auto_read=False)
        c.connect()
        c.read()
        c.subscribe("/topic/e", "s")
        p = net.connected_client()
        p.send("/topic/e", "a", expires=str(net.clock.wall_ms() + 100))
        p.send("/topic/e", "b", expires=str(net.clock.wall_ms() + 100))
        net.advance(1)
        c.auto_read = True
        c.read()
        assert b"b" not in c.bodies()


class TestPriority:
    def test_prioritized_queue_dispatches_higher_first_fifo_within(self) -> None:
        net = policy_net(prioritized_messages=True)
        p = net.connected_client()
        for body, prio in [("l1", 1), ("h1", 9), ("n1", 4), ("h2", 9), ("l2", 1), ("n2", 4)]:
            p.send("/queue/p", body, priority=str(prio))
        c = net.connected_client()
        c.subscribe("/queue/p")
        assert c.bodies() == [b"h1", b"h2", b"n1", b"n2", b"l1", b"l2"]

    def test_without_the_policy_order_is_fifo(self) -> None:
        net = VirtualNetwork()
        p = net.connected_client()
        for body, prio in [("a", 1), ("b", 9)]:
            p.send("/queue/p", body, priority=str(prio))
        c = net.connected_client()
        c.subscribe("/queue/p")
        assert c.bodies() == [b"a", b"b"]

    def test_redelivered_message_keeps_its_priority_place(self) -> None:
        net = policy_net(prioritized_messages=True)
        c = net.connected_client()
        c.subscribe("/queue/p", "s", "client-individual", **{"activemq.prefetchSize": "1"})
        p = net.connected_client()
        p.send("/queue/p", "high", priority="8")
        p.send("/queue/p", "low", priority="2")
        c.nack(c.messages()[0])
        assert c.bodies() == [b"high", b"high"]

    def test_consumer_priority_serves_the_higher_first(self) -> None:
        net = VirtualNetwork()
        low = net.connected_client("low")
        high = net.connected_client("high")
        low.subscribe("/queue/cp", "s", "client-individual", **{"activemq.prefetchSize": "2", "activemq.priority": "0"})
        high.subscribe(
            "/queue/cp", "s", "client-individual", **{"activemq.prefetchSize": "2", "activemq.priority": "10"}
        )
        p = net.connected_client()
        for i in range(3):
            p.send("/queue/cp", f"m{i}")
        assert high.bodies() == [b"m0", b"m1"]
        assert low.bodies() == [b"m2"]  # only what the higher one had no room for


class TestExclusive:
    def test_one_consumer_gets_everything_and_the_next_takes_over_in_order(self) -> None:
        net = VirtualNetwork()
        first = net.connected_client("first")
        second = net.connected_client("second")
        first.subscribe(
            "/queue/x", "s", "client-individual", **{"activemq.exclusive": "true", "activemq.prefetchSize": "2"}
        )
        second.subscribe("/queue/x", "s", "client-individual", **{"activemq.exclusive": "true"})
        p = net.connected_client()
        for i in range(5):
            p.send("/queue/x", f"m{i}")
        assert first.bodies() == [b"m0", b"m1"]
        assert second.bodies() == []
        first.ack(first.messages()[0])
        first.drop()  # m1 was delivered but not acknowledged
        assert second.bodies() == [b"m1", b"m2", b"m3", b"m4"]
        assert second.messages()[0].headers["redelivered"] == "true"

    def test_a_plain_consumer_waits_while_an_exclusive_one_exists(self) -> None:
        net = VirtualNetwork()
        plain = net.connected_client("plain")
        plain.subscribe("/queue/x")
        excl = net.connected_client("excl")
        excl.subscribe("/queue/x", "s", **{"activemq.exclusive": "true"})
        p = net.connected_client()
        for i in range(3):
            p.send("/queue/x", f"m{i}")
        assert excl.bodies() == [b"m0", b"m1", b"m2"] and plain.bodies() == []


class TestDurable:
    def connect(self, net: VirtualNetwork, client_id: str = "app"):
        c = net.client(client_id)
        assert c.connect(client_id=client_id).command == "CONNECTED"
        return c

    def test_messages_wait_for_an_offline_durable_subscriber(self) -> None:
        net = VirtualNetwork()
        c = self.connect(net)
        c.subscribe("/topic/news", "d", **{"activemq.subscriptionName": "reader"})
        p = net.connected_client()
        p.send("/topic/news", "while online")
        c.disconnect()
        p.send("/topic/news", "while away 1")
        p.send("/topic/news", "while away 2")
        back = self.connect(net)
        back.subscribe("/topic/news", "d", **{"activemq.subscriptionName": "reader"})
        assert back.bodies() == [b"while away 1", b"while away 2"]

    def test_unacked_messages_come_back_redelivered(self) -> None:
        net = VirtualNetwork()
        c = self.connect(net)
        c.subscribe("/topic/n", "d", "client-individual", **{"activemq.subscriptionName": "r"})
        net.connected_client().send("/topic/n", "m")
        c.drop()
        back = self.connect(net)
        back.subscribe("/topic/n", "d", "client-individual", **{"activemq.subscriptionName": "r"})
        assert back.bodies() == [b"m"]
        assert back.messages()[0].headers["redelivered"] == "true"

    def test_unsubscribe_with_the_name_removes_it(self) -> None:
        net = VirtualNetwork()
        c = self.connect(net)
        c.subscribe("/topic/n", "d", **{"activemq.subscriptionName": "r"})
        c.send_frame("UNSUBSCRIBE", {"id": "d", "activemq.subscriptionName": "r", "receipt": "gone"})
        assert c.last().command == "RECEIPT"
        net.connected_client().send("/topic/n", "nobody keeps this")
        c.subscribe("/topic/n", "d2", **{"activemq.subscriptionName": "r"})
        assert c.bodies() == []
        assert (
            net.broker.destinations["/topic/n"].durables[("app", "r")].pending
            == type(net.broker.destinations["/topic/n"].durables[("app", "r")].pending)()
        )

    def test_a_plain_unsubscribe_keeps_the_durable_subscription(self) -> None:
        net = VirtualNetwork()
        c = self.connect(net)
        c.subscribe("/topic/n", "d", **{"activemq.subscriptionName": "r"})
        c.send_frame("UNSUBSCRIBE", {"id": "d"})
        net.connected_client().send("/topic/n", "kept")
        c.subscribe("/topic/n", "d", **{"activemq.subscriptionName": "r"})
        assert c.bodies() == [b"kept"]

    def test_durable_needs_a_client_id(self) -> None:
        net = VirtualNetwork()
        c = net.connected_client()
        c.subscribe("/topic/n", "d", **{"activemq.subscriptionName": "r"})
        assert "needs a client-id" in c.last().headers["message"]

    def test_durable_default_prefetch_is_100(self) -> None:
        net = VirtualNetwork()
        c = self.connect(net)
        c.subscribe("/topic/many", "d", "client", **{"activemq.subscriptionName": "r"})
        p = net.connected_client()
        for i in range(150):
            p.send("/topic/many", str(i))
        assert len(c.messages()) == 100


class TestTemporaryQueues:
    def test_request_reply_through_a_temp_queue(self) -> None:
        net = VirtualNetwork()
        server = net.connected_client("server")
        server.subscribe("/queue/requests")
        client = net.connected_client("client")
        client.subscribe("/temp-queue/replies", "r")
        client.send("/queue/requests", "ping", **{"reply-to": "/temp-queue/replies"})
        request = server.messages()[0]
        reply_to = request.headers["reply-to"]
        assert reply_to.startswith("/remote-temp-queue/")
        server.send(reply_to, "pong")
        assert client.bodies() == [b"pong"]

    def test_only_the_owner_consumes_and_it_goes_away_with_its_connection(self) -> None:
        net = VirtualNetwork()
        owner = net.connected_client("owner")
        owner.send("/queue/where", "x", **{"reply-to": "/temp-queue/mine"})
        other = net.connected_client("other")
        other.subscribe("/queue/where")
        address = other.messages()[0].headers["reply-to"]
        other.subscribe(address, "steal")
        assert "only the connection that created" in other.last().headers["message"]
        owner.disconnect()
        late = net.connected_client("late")
        late.send(address, "too late")
        assert "does not exist" in late.last().headers["message"]

    def test_two_connections_have_separate_temp_queues_of_the_same_name(self) -> None:
        net = VirtualNetwork()
        a = net.connected_client("a")
        b = net.connected_client("b")
        a.subscribe("/temp-queue/t", "s")
        b.subscribe("/temp-queue/t", "s")
        a.send("/temp-queue/t", "for a")
        assert a.bodies() == [b"for a"] and b.bodies() == []


class TestBrowse:
    def test_browser_sees_without_consuming_then_end(self) -> None:
        net = VirtualNetwork()
        p = net.connected_client()
        for i in range(3):
            p.send("/queue/b", f"m{i}")
        browser = net.connected_client()
        browser.subscribe("/queue/b", "br", browser="true")
        msgs = browser.messages()
        assert [m.body for m in msgs[:3]] == [b"m0", b"m1", b"m2"]
        assert msgs[3].headers["browser"] == "end" and msgs[3].body == b""
        assert len(msgs) == 4
        consumer = net.connected_client()
        consumer.subscribe("/queue/b")
        assert consumer.bodies() == [b"m0", b"m1", b"m2"]

    def test_browsing_spilled_messages_leaves_them_for_the_consumer(self, tmp_path) -> None:
        """A browse reads the messages a file cursor spilled to the temp store without
        taking them: a consumer then gets every one (a browse used to free the temp
        entries it read, and the next page-in failed on them)."""
        net = VirtualNetwork(
            parse_config(
                {
                    "system_usage": {"memory_limit": "64 kb"},
                    "destination_policy": [{"queue": ">", "pending_cursor": "file"}],
                }
            )
        )
        net.broker.temp_dir = str(tmp_path / "tmp")
        p = net.connected_client()
        bodies = [f"m{i}".encode() + b"x" * 2000 for i in range(60)]
        for body in bodies:
            p.send("/queue/spilled", body.decode())
        queue = net.broker.destinations["/queue/spilled"]
        assert queue.cursor.spilled > 20
        browser = net.connected_client()
        browser.subscribe("/queue/spilled", "br", browser="true")
        assert [m.body for m in browser.messages()][:-1] == bodies
        consumer = net.connected_client()
        consumer.subscribe("/queue/spilled", "s", "client-individual", **{"activemq.prefetchSize": "5"})
        got = []
        while len(got) < len(bodies):
            batch = consumer.messages()[len(got) :]
            assert batch, f"stalled after {len(got)}"
            got += batch
            for m in batch:
                consumer.ack(m)
        assert [m.body for m in got] == bodies
        assert not consumer.frames("ERROR") and net.broker.storehooks.temp_store().entries == 0

    def test_browsing_an_empty_queue_ends_at_once(self) -> None:
        net = VirtualNetwork()
        browser = net.connected_client()
        browser.subscribe("/queue/empty", "br", browser="true")
        assert [m.headers.get("browser") for m in browser.messages()] == ["end"]

    def test_browse_needs_a_queue(self) -> None:
        net = VirtualNetwork()
        c = net.connected_client()
        c.subscribe("/topic/t", "br", browser="true")
        assert "needs a queue" in c.last().headers["message"]


def secure_net() -> VirtualNetwork:
    return VirtualNetwork(
        parse_config(
            {
                "users": [
                    {
                        "name": "alice",
                        "password_hash": hash_password("wonderland", iterations=1000),
                        "groups": ["admins"],
                    },
                    {
                        "name": "bob",
                        "password_hash": hash_password("builder", iterations=1000),
                        "groups": ["producers"],
                    },
                    {
                        "name": "carol",
                        "password_hash": hash_password("singer", iterations=1000),
                        "groups": ["consumers"],
                    },
                ],
                "authorization": [
                    {"queue": ">", "read": ["admins"], "write": ["admins"], "admin": ["admins"]},
                    {
                        "queue": "orders.>",
                        "read": ["consumers", "admins"],
                        "write": ["producers", "admins"],
                        "admin": ["producers", "admins"],
                    },
                ],
            }
        )
    )


class TestSecurity:
    def test_password_hashes(self) -> None:
        h = hash_password("s3cret", iterations=1000)
        assert h.startswith("pbkdf2_sha256$1000$")
        assert verify_password("s3cret", h) and not verify_password("S3cret", h)
        assert hash_password("s3cret", iterations=1000) != h  # salted
        assert not verify_password("x", "garbage")

    @pytest.mark.parametrize(
        "login,passcode", [("alice", "wrong"), ("mallory", "wonderland"), (None, None), ("alice", None)]
    )
    def test_bad_logins_are_refused_without_saying_which_part(self, login, passcode) -> None:
        net = secure_net()
        c = net.client()
        headers = {k: v for k, v in {"login": login, "passcode": passcode}.items() if v is not None}
        reply = c.connect(**headers)
        assert reply.command == "ERROR"
        assert reply.headers["message"] == f"User name [{login or ''}] or password is invalid."
        assert c.closed

    def test_rights_follow_the_most_specific_entry(self) -> None:
        net = secure_net()
        bob = net.client("bob")
        assert bob.connect(login="bob", passcode="builder").command == "CONNECTED"
        bob.send("/queue/orders.eu", "order 1", receipt="ok")
        assert bob.last().command == "RECEIPT"
        carol = net.client("carol")
        carol.connect(login="carol", passcode="singer")
        carol.subscribe("/queue/orders.eu")
        assert carol.bodies() == [b"order 1"]
        carol.send("/queue/orders.eu", "nope")
        assert carol.last().headers["message"] == "User carol is not authorized to write to: queue://orders.eu"

    def test_creating_a_destination_needs_admin(self) -> None:
        net = secure_net()
        carol = net.client()
        carol.connect(login="carol", passcode="singer")
        carol.subscribe("/queue/orders.new")
        assert carol.last().headers["message"] == "User carol is not authorized to create: queue://orders.new"

    def test_no_entry_means_no_access(self) -> None:
        net = secure_net()
        bob = net.client()
        bob.connect(login="bob", passcode="builder")
        bob.send("/topic/anything", "x")
        assert "not authorized to write to: topic://anything" in bob.last().headers["message"]

    def test_anonymous_only_without_users(self) -> None:
        assert VirtualNetwork().client().connect().command == "CONNECTED"

    def test_temp_queues_are_open_to_their_owner(self) -> None:
        net = secure_net()
        carol = net.client()
        carol.connect(login="carol", passcode="singer")
        carol.subscribe("/temp-queue/mine", "t", receipt="r")
        assert carol.last().command == "RECEIPT"


class TestSelectors:
    def test_a_refused_message_stays_for_another_consumer(self) -> None:
        net = VirtualNetwork()
        red = net.connected_client("red")
        red.subscribe("/queue/colors", "s", selector="color = 'red'")
        p = net.connected_client()
        for color in ["red", "blue", "red", "green"]:
            p.send("/queue/colors", color, color=color)
        assert red.bodies() == [b"red", b"red"]
        anyone = net.connected_client("anyone")
        anyone.subscribe("/queue/colors")
        assert anyone.bodies() == [b"blue", b"green"]

    def test_numeric_comparison_on_string_headers_and_jms_priority(self) -> None:
        net = VirtualNetwork()
        c = net.connected_client()
        c.subscribe("/topic/w", "s", selector="weight > 2.5 AND JMSPriority >= 7")
        p = net.connected_client()
        p.send("/topic/w", "light", weight="1", priority="9")
        p.send("/topic/w", "heavy-low", weight="3", priority="4")
        p.send("/topic/w", "heavy-high", weight="3", priority="8")
        assert c.bodies() == [b"heavy-high"]

    def test_a_malformed_selector_is_refused_with_its_position(self) -> None:
        net = VirtualNetwork()
        c = net.connected_client()
        c.subscribe("/queue/q", "s", selector="color = 'red' AND )", receipt="r")
        err = c.last()
        assert err.command == "ERROR"
        assert err.headers["message"].startswith("invalid selector: selector: unexpected ')' at position 18")
        assert err.headers["receipt-id"] == "r"

    def test_a_durable_subscription_keeps_its_selector_offline(self) -> None:
        net = VirtualNetwork()
        c = net.client("x")
        c.connect(client_id="app")
        c.subscribe("/topic/t", "d", selector="kind = 'keep'", **{"activemq.subscriptionName": "n"})
        c.disconnect()
        p = net.connected_client()
        p.send("/topic/t", "kept", kind="keep")
        p.send("/topic/t", "skipped", kind="skip")
        back = net.client("y")
        back.connect(client_id="app")
        back.subscribe("/topic/t", "d", selector="kind = 'keep'", **{"activemq.subscriptionName": "n"})
        assert back.bodies() == [b"kept"]


class TestRedeliveryDelay:
    """A redelivery policy's delay and back-off (ActiveMQ's RedeliveryPolicy), on the virtual clock."""

    def test_a_nacked_message_waits_out_the_delay_and_counts_as_queued(self) -> None:
        net = policy_net(initial_redelivery_delay=1000)
        c = net.connected_client()
        c.subscribe("/queue/orders", "s", "client-individual")
        net.connected_client().send("/queue/orders", "poison", persistent="true")
        c.nack(c.messages()[0])
        queue = net.broker.destinations["/queue/orders"]
        net.advance(0.9)
        assert len(c.messages()) == 1 and queue.size() == 1  # waiting, still on the queue
        net.advance(0.2)
        assert len(c.messages()) == 2 and c.messages()[1].headers["redelivered"] == "true"

    def test_exponential_back_off_multiplies_each_wait_up_to_the_cap(self) -> None:
        net = policy_net(
            initial_redelivery_delay=100,
            use_exponential_back_off=True,
            back_off_multiplier=2.0,
            maximum_redelivery_delay=500,
            maximum_redeliveries=-1,
        )
        c = net.connected_client()
        c.subscribe("/queue/orders", "s", "client-individual")
        net.connected_client().send("/queue/orders", "poison")
        arrived = [net.now]
        for _ in range(5):
            c.nack(c.messages()[-1])
            seen = len(c.messages())
            while len(c.messages()) == seen:
                net.advance(0.001)
            arrived.append(net.now)
        waits = [round(b - a, 2) for a, b in pairwise(arrived)]
        assert waits == [0.1, 0.2, 0.4, 0.5, 0.5]

    def test_the_delays_count_as_activemq_counts_them(self) -> None:
        policy = parse_config(
            {
                "destination_policy": [
                    {"queue": ">", "initial_redelivery_delay": 1000, "redelivery_delay": 3000},
                    {"queue": "b", "initial_redelivery_delay": 1000, "use_exponential_back_off": True},
                ]
            }
        )
        plain, backoff = policy.policy_for("queue", "a"), policy.policy_for("queue", "b")
        assert [plain.redelivery_delay_ms(n) for n in (1, 2, 3)] == [1000, 3000, 3000]
        assert [backoff.redelivery_delay_ms(n) for n in (1, 2, 3)] == [1000, 5000, 25000]  # multiplier 5

    def test_a_purge_drops_a_message_waiting_for_its_redelivery(self) -> None:
        net = policy_net(initial_redelivery_delay=1000)
        c = net.connected_client()
        c.subscribe("/queue/orders", "s", "client-individual")
        net.connected_client().send("/queue/orders", "poison")
        c.nack(c.messages()[0])
        queue = net.broker.destinations["/queue/orders"]
        assert queue.purge() == 1 and queue.size() == 0
        net.advance(2.0)
        assert len(c.messages()) == 1  # it does not come back

    def test_a_bad_multiplier_is_refused(self) -> None:
        with pytest.raises(Exception, match="back_off_multiplier"):
            parse_config({"destination_policy": [{"queue": ">", "back_off_multiplier": 0.5}]})


class TestOfflineDurableSubscriberTimeout:
    """``offline_durable_subscriber_timeout``: an abandoned durable subscription goes, with its messages."""

    @staticmethod
    def durable_net(timeout: int) -> VirtualNetwork:
        return VirtualNetwork(
            parse_config(
                {
                    "broker": {
                        "offline_durable_subscriber_timeout": timeout,
                        "offline_durable_subscriber_task_schedule": 1000,
                    }
                }
            )
        )

    @staticmethod
    def reporting(net: VirtualNetwork):
        c = net.client("reporting")
        assert c.connect(client_id="reporting").command == "CONNECTED"
        return c

    def subscribe_and_leave(self, net: VirtualNetwork) -> None:
        sub = self.reporting(net)
        sub.subscribe("/topic/events", "r", "auto", **{"activemq.subscriptionName": "daily"})
        sub.disconnect()

    def test_an_offline_subscription_is_removed_after_the_timeout_with_what_it_held(self) -> None:
        net = self.durable_net(5000)
        self.subscribe_and_leave(net)
        net.connected_client().send("/topic/events", "e1", persistent="true")
        topic = net.broker.destinations["/topic/events"]
        net.advance(4.0)
        assert list(topic.durables) == [("reporting", "daily")] and topic.size() == 1
        net.advance(2.5)
        assert topic.durables == {} and topic.size() == 0

    def test_a_subscriber_that_comes_back_in_time_keeps_it(self) -> None:
        net = self.durable_net(5000)
        self.subscribe_and_leave(net)
        net.connected_client().send("/topic/events", "e1", persistent="true")
        net.advance(3.0)
        back = self.reporting(net)
        back.subscribe("/topic/events", "r", "auto", **{"activemq.subscriptionName": "daily"})
        net.advance(10.0)
        assert back.bodies() == [b"e1"] and ("reporting", "daily") in net.broker.destinations["/topic/events"].durables

    def test_by_default_an_offline_subscription_is_kept_for_ever(self) -> None:
        net = VirtualNetwork()
        self.subscribe_and_leave(net)
        net.advance(3600.0)
        assert ("reporting", "daily") in net.broker.destinations["/topic/events"].durables
