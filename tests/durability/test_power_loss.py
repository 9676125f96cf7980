"""What a power loss leaves: receipted work survives it, on a simulated disk.

The disk (``disk_faults.PowerLossDisk``, through storage's file seam) keeps
every write in a page cache until its fsync, and every create, rename and
unlink until its directory's fsync; ``cut`` is what a power loss leaves.
These tests lose everything that was not durable: a RECEIPT must mean on disk.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from disk_faults import PowerLossDisk
from minibroker.config import parse_config
from minibroker.edge import VirtualClient, VirtualNetwork
from storage.fileio import using

LAYOUTS = ["growing", "ring"]


def network(disk: PowerLossDisk, layout: str, **store: object) -> VirtualNetwork:
    return VirtualNetwork(parse_config({"store": {"layout": layout, **store}}), data_dir=disk.root)


def power_loss(net: VirtualNetwork, disk: PowerLossDisk) -> None:
    """The power goes: only what was durable stays; the broker starts again on it."""
    image = disk.cut()
    net.restart(while_down=lambda: disk.restore(image))


def client(net: VirtualNetwork, client_id: str | None = None) -> VirtualClient:
    c = net.client()
    reply = c.connect("1.2", **({"client-id": client_id} if client_id else {}))
    assert reply.command == "CONNECTED", reply
    return c


def receipts(c: VirtualClient) -> set[str]:
    return {f.headers["receipt-id"] for f in c.frames("RECEIPT")}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_receipted_send_to_a_topic_with_a_durable_subscriber_survives(tmp_path: Path, layout: str) -> None:
    disk = PowerLossDisk(tmp_path / "data")
    with using(disk):
        net = network(disk, layout)
        sub = client(net, "reader")
        durable = {"activemq.subscriptionName": "keep", "receipt": "sub"}
        sub.subscribe("/topic/news", "s", "client-individual", **durable)
        assert receipts(sub) == {"sub"}
        sub.send_frame("UNSUBSCRIBE", {"id": "s"})  # inactive: the topic keeps its messages
        producer = client(net)
        for i in range(100):
            producer.send("/topic/news", f"n{i}", persistent="true", receipt=f"r{i}")
        assert receipts(producer) == {f"r{i}" for i in range(100)}
        power_loss(net, disk)
        again = client(net, "reader")
        again.subscribe("/topic/news", "s", "client-individual", **{"activemq.subscriptionName": "keep"})
        assert again.bodies() == [f"n{i}".encode() for i in range(100)]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_receipted_ack_is_not_undone(tmp_path: Path, layout: str) -> None:
    disk = PowerLossDisk(tmp_path / "data")
    with using(disk):
        net = network(disk, layout)
        producer = client(net)
        for i in range(20):
            producer.send("/queue/work", f"m{i}", persistent="true", receipt=f"r{i}")
        assert len(receipts(producer)) == 20
        consumer = client(net)
        consumer.subscribe("/queue/work", "s", "client-individual", **{"activemq.prefetchSize": "20"})
        delivered = consumer.messages()
        assert len(delivered) == 20
        for n, message in enumerate(delivered[:15]):
            consumer.ack(message, receipt=f"a{n}")
        assert receipts(consumer) == {f"a{n}" for n in range(15)}
        power_loss(net, disk)
        again = client(net)
        again.subscribe("/queue/work", "s", "client-individual", **{"activemq.prefetchSize": "100"})
        assert again.bodies() == [f"m{i}".encode() for i in range(15, 20)]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_directories_the_store_makes_survive(tmp_path: Path, layout: str) -> None:
    """The journal's directory is made durable (its parent fsynced) before anything is promised in it."""
    disk = PowerLossDisk(tmp_path / "data")
    with using(disk):
        net = network(disk, layout)
        producer = client(net)
        producer.send("/queue/one", "kept", persistent="true", receipt="r")
        assert receipts(producer) == {"r"}
        power_loss(net, disk)
        again = client(net)
        again.subscribe("/queue/one")
        assert again.bodies() == [b"kept"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_receipted_durable_subscription_that_replaces_one_does_not_inherit_its_messages(
    tmp_path: Path, layout: str
) -> None:
    """Subscribing again with another selector replaces the subscription and drops what
    it held (as in ActiveMQ): its RECEIPT waits for those dequeues' fsync."""
    disk = PowerLossDisk(tmp_path / "data")
    with using(disk):
        net = network(disk, layout)
        sub = client(net, "reader")
        sub.subscribe("/topic/news", "s", "client-individual", **{"activemq.subscriptionName": "keep"})
        sub.send_frame("UNSUBSCRIBE", {"id": "s"})
        producer = client(net)
        for i in range(10):
            producer.send("/topic/news", f"old{i}", persistent="true", receipt=f"r{i}")
        assert len(receipts(producer)) == 10
        replaced = {"activemq.subscriptionName": "keep", "selector": "kind = 'new'", "receipt": "again"}
        sub.subscribe("/topic/news", "s2", "client-individual", **replaced)
        assert receipts(sub) == {"again"}
        power_loss(net, disk)
        again = client(net, "reader")
        again.subscribe(
            "/topic/news", "s", "client-individual", **{"activemq.subscriptionName": "keep", "selector": "kind = 'new'"}
        )
        assert again.bodies() == []
