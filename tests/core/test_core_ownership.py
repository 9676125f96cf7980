"""Ownership and authorization with users configured, in the core on a virtual clock:
durable subscriptions belong to their user, temporary destinations to their
connection, and statistics show a non-admin only what it may read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from minibroker.config import parse_config
from minibroker.connection import hash_password
from minibroker.edge import VirtualClient, VirtualNetwork

DURABLE = {"activemq.subscriptionName": "feed"}


def secure_doc(**extra: Any) -> dict[str, Any]:
    """alice (admins), bob (readers of topic news.>), carol (readers of queue orders.>, statistics)."""
    return {
        "users": [
            {"name": "alice", "password_hash": hash_password("wonderland", iterations=1000), "groups": ["admins"]},
            {"name": "bob", "password_hash": hash_password("builder", iterations=1000), "groups": ["readers"]},
            {"name": "carol", "password_hash": hash_password("singer", iterations=1000), "groups": ["consumers"]},
            {"name": "dave", "password_hash": hash_password("diver", iterations=1000), "groups": ["services"]},
        ],
        "authorization": [
            {"queue": ">", "read": ["admins"], "write": ["admins"], "admin": ["admins"]},
            {"topic": ">", "read": ["admins"], "write": ["admins"], "admin": ["admins"]},
            {"topic": "news.>", "read": ["admins", "readers"], "write": ["admins"], "admin": ["admins", "readers"]},
            {"queue": "orders.>", "read": ["admins", "consumers"], "write": ["admins"], "admin": ["admins"]},
            {
                "queue": "ActiveMQ.Statistics.>",
                "read": ["admins"],
                "write": ["admins", "consumers"],
                "admin": ["admins"],
            },
        ],
        **extra,
    }


PASSWORDS = {"alice": "wonderland", "bob": "builder", "carol": "singer", "dave": "diver"}


def login(net: VirtualNetwork, user: str, **headers: str) -> VirtualClient:
    client = net.client(user)
    reply = client.connect(login=user, passcode=PASSWORDS[user], **headers)
    assert reply.command == "CONNECTED", reply
    return client


def alice_with_a_durable_backlog(net: VirtualNetwork, topic: str) -> None:
    """alice makes a durable subscription on ``topic``, leaves, and two messages wait for her."""
    alice = login(net, "alice", client_id="alice-app")
    alice.subscribe(topic, "d", **DURABLE)
    alice.disconnect()
    producer = login(net, "alice")
    producer.send(topic, "one", persistent="true")
    producer.send(topic, "two", persistent="true", receipt="sent")
    assert producer.last().command == "RECEIPT"


def alice_receives(net: VirtualNetwork, topic: str) -> list[bytes]:
    alice = login(net, "alice", client_id="alice-app")
    alice.subscribe(topic, "d", **DURABLE)
    return alice.bodies()


class TestDurableSubscriptionsBelongToTheirUser:
    def test_another_user_cannot_remove_it_under_the_same_client_id(self) -> None:
        net = VirtualNetwork(parse_config(secure_doc()))
        alice_with_a_durable_backlog(net, "/topic/payroll")
        bob = login(net, "bob", client_id="alice-app")
        bob.send_frame("UNSUBSCRIBE", {"activemq.subscriptionName": "feed", "receipt": "gone"})
        error = bob.last()
        assert error.command == "ERROR" and error.headers["receipt-id"] == "gone"
        assert "belongs to another user" in error.headers["message"]
        assert alice_receives(net, "/topic/payroll") == [b"one", b"two"]

    def test_another_user_cannot_drain_it_on_a_topic_it_may_read(self) -> None:
        net = VirtualNetwork(parse_config(secure_doc()))
        alice_with_a_durable_backlog(net, "/topic/news.eu")
        bob = login(net, "bob", client_id="alice-app")
        bob.subscribe("/topic/news.eu", "d", **DURABLE)
        assert bob.messages() == []
        assert "belongs to another user" in bob.last().headers["message"]
        bob_own = login(net, "bob", client_id="bob-app")
        bob_own.subscribe("/topic/news.eu", "mine", receipt="ok", **DURABLE)  # his own is his to make
        assert bob_own.last().command == "RECEIPT"
        assert alice_receives(net, "/topic/news.eu") == [b"one", b"two"]

    def test_its_owner_is_kept_across_a_restart(self, tmp_path: Path) -> None:
        net = VirtualNetwork(parse_config(secure_doc()), data_dir=tmp_path / "data")
        alice_with_a_durable_backlog(net, "/topic/news.eu")
        net.restart()
        bob = login(net, "bob", client_id="alice-app")
        bob.subscribe("/topic/news.eu", "d", **DURABLE)
        assert "belongs to another user" in bob.last().headers["message"]
        assert alice_receives(net, "/topic/news.eu") == [b"one", b"two"]

    def test_without_users_anyone_with_the_client_id_may_use_it(self) -> None:
        net = VirtualNetwork()
        first = net.client("first")
        first.connect(client_id="app")
        first.subscribe("/topic/t", "d", **DURABLE)
        first.disconnect()
        second = net.client("second")
        second.connect(client_id="app")
        second.send_frame("UNSUBSCRIBE", {"activemq.subscriptionName": "feed", "receipt": "gone"})
        assert second.last().command == "RECEIPT"


def alices_temp_queue(net: VirtualNetwork) -> tuple[VirtualClient, str]:
    """alice listens on a temporary queue; returns her and its address as others see it."""
    alice = login(net, "alice")
    alice.subscribe("/temp-queue/replies", "r", receipt="listening")
    assert alice.last().command == "RECEIPT"
    alice.send("/queue/orders.jobs", "job", **{"reply-to": "/temp-queue/replies"})
    # The address carol would derive from alice's CONNECTED session header, or read in reply-to.
    remote = f"/remote-temp-queue/{net.broker.boot}.{alice.sid}.replies"
    return alice, remote


class TestTemporaryDestinations:
    def test_no_one_without_the_temp_write_right_may_send_to_another_s(self) -> None:
        net = VirtualNetwork(parse_config(secure_doc()))
        alice, remote = alices_temp_queue(net)
        carol = login(net, "carol")
        carol.subscribe("/queue/orders.jobs")
        [job] = carol.messages()
        assert job.headers["reply-to"] == remote
        carol.send(remote, "forged", receipt="r")
        error = carol.last()
        assert error.command == "ERROR"
        assert error.headers["message"].startswith(f"User carol is not authorized to write to: {remote}")
        assert alice.messages() == []

    def test_the_temp_write_right_is_granted_by_configuration(self) -> None:
        doc = secure_doc(temp_destination_authorization={"write": ["services"]})
        net = VirtualNetwork(parse_config(doc))
        alice, remote = alices_temp_queue(net)
        dave = login(net, "dave")
        dave.send(remote, "the answer", receipt="r")
        assert dave.last().command == "RECEIPT"
        assert alice.bodies() == [b"the answer"]
        dave.subscribe(remote, "steal")
        assert "only the connection that created" in dave.last().headers["message"]

    def test_the_owner_always_reads_and_writes_its_own(self) -> None:
        net = VirtualNetwork(parse_config(secure_doc()))
        carol = login(net, "carol")
        carol.subscribe("/temp-queue/mine", "t")
        carol.send("/temp-queue/mine", "to myself", receipt="r")
        assert carol.bodies() == [b"to myself"]


def statistics(client: VirtualClient, what: str) -> list[dict[str, Any]]:
    """Ask ``/queue/ActiveMQ.Statistics.<what>`` and read every reply."""
    client.clear()
    client.subscribe("/temp-queue/stats", f"s-{what}")
    client.send(f"/queue/ActiveMQ.Statistics.{what}", "", **{"reply-to": "/temp-queue/stats"})
    client.send_frame("UNSUBSCRIBE", {"id": f"s-{what}"})
    replies = [json.loads(m.body) for m in client.messages()]
    return [r for r in replies if r]


class TestStatisticsShowANonAdminOnlyWhatItMayRead:
    def busy_broker(self) -> VirtualNetwork:
        net = VirtualNetwork(parse_config(secure_doc()))
        alice = login(net, "alice", client_id="alice-app")
        alice.send("/queue/payroll", "secret")
        alice.send("/queue/orders.eu", "order")
        alice.subscribe("/queue/payroll", "p")
        return net

    def test_destinations(self) -> None:
        net = self.busy_broker()
        carol = login(net, "carol")
        names = {d["destinationName"] for d in statistics(carol, "Destination.>")}
        assert "/queue/orders.eu" in names
        assert "/queue/payroll" not in names
        alice = login(net, "alice")
        assert "/queue/payroll" in {d["destinationName"] for d in statistics(alice, "Destination.>")}

    def test_connections_and_subscriptions(self) -> None:
        net = self.busy_broker()
        app = login(net, "carol", client_id="carol-app")
        app.subscribe("/queue/orders.eu", "mine")
        carol = login(net, "carol")  # the asking connection sees carol's others, not itself
        connections = statistics(carol, "Connection")
        assert [c["clientId"] for c in connections] == ["carol-app"]
        assert all(c["connection"] == app.sid for c in connections)
        subscriptions = statistics(carol, "Subscription")
        assert [s["clientId"] for s in subscriptions] == ["carol-app"]
        assert "alice-app" not in json.dumps(statistics(carol, "Broker"))
        alice = login(net, "alice")
        assert "alice-app" in {c["clientId"] for c in statistics(alice, "Connection")}
        assert "/queue/payroll" in {s["destinationName"] for s in statistics(alice, "Subscription")}
