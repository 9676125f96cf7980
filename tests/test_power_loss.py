"""What a power loss leaves: receipted work survives it, on a simulated disk.

The disk (``disk_faults.PowerLossDisk``, through storage's file seam) keeps
every write in a page cache until its fsync, and every create, rename and
unlink until its directory's fsync; ``cut`` is what a power loss leaves.
These tests lose everything that was not durable: a RECEIPT must mean on disk.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from minibroker.config import parse_config
from minibroker.sim import VirtualClient, VirtualNetwork
from storage.fileio import using

from disk_faults import PowerLossDisk

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
