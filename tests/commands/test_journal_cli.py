"""``minibroker journal inspect|compact|repair`` on a broker's data directory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from clients.cli import main as cli
from minibroker.config import parse_config
from minibroker.durability import MessageStore
from minibroker.edge import VirtualNetwork, open_store
from minibroker.errors import StoreOpenError

RING = {
    "store": {"layout": "ring", "file_count": 8, "file_size": "64 kb"},
    "destination_policy": [{"queue": ">", "prioritized_messages": True}],
}


def pinned_ring(data: Path, rounds: int = 3) -> VirtualNetwork:
    """Qpid's enqueue threshold in small: one low-priority message left behind in each of several files."""
    net = VirtualNetwork(parse_config(RING), data_dir=data)
    p = net.connected_client("p")
    c = net.connected_client("c")
    c.subscribe(
        "/queue/Durable", "s", "client-individual", selector="JMSPriority > 1", **{"activemq.prefetchSize": "1000"}
    )
    for _ in range(rounds):
        p.send("/queue/Durable", "pin", persistent="true", priority="1")
        for _ in range(220):  # about one file's worth
            p.send("/queue/Durable", "x" * 200, persistent="true", priority="2")
        for m in c.messages():
            c.ack(m)
        c.clear()
    return net


def test_inspect_shows_which_messages_pin_which_files(tmp_path: Path, capsys) -> None:
    net = pinned_ring(tmp_path / "data")
    assert cli(["journal", "inspect", str(tmp_path / "data")]) == 0  # works while the broker runs: read-only
    out = capsys.readouterr().out
    assert "Journal 'queue.Durable'" in out and "(ring, 8 files of 65536 bytes" in out
    pinned = [line for line in out.splitlines() if "pinned by:" in line and "pinned by: -" not in line]
    assert len(pinned) >= 2
    assert "Totals: 8 files" in out and "3 live enqueues" in out
    net.broker.close()


def test_compact_moves_the_stranded_messages_together_and_loses_none(tmp_path: Path, capsys) -> None:
    data = tmp_path / "data"
    net = pinned_ring(data)
    assert cli(["journal", "compact", str(data)]) == 2  # the broker still holds the data directory
    assert "a running broker holds" in capsys.readouterr().err
    net.broker.close()
    assert cli(["journal", "compact", str(data)]) == 0
    out = capsys.readouterr().out
    assert "moved 3 message(s); 3 live" in out
    pinned = [line for line in out.splitlines() if "pinned by:" in line and "pinned by: -" not in line]
    assert len(pinned) == 1
    again = VirtualNetwork(parse_config(RING), data_dir=data)
    c = again.connected_client()
    c.subscribe("/queue/Durable")
    assert c.bodies() == [b"pin", b"pin", b"pin"]


def test_a_corrupt_journal_stops_the_start_and_repair_fixes_it(tmp_path: Path, capsys) -> None:
    data = tmp_path / "data"
    config = parse_config({"store": {"journal_max_file_length": "64 kb"}, "broker": {"data_dir": str(data)}})
    net = VirtualNetwork(config, data_dir=data)
    p = net.connected_client()
    for _ in range(400):  # several 64 KB files
        p.send("/queue/q", "y" * 300, persistent="true")
    net.broker.close()
    files = sorted((data / "journal").glob("db-*.log"))
    assert len(files) >= 3
    victim = files[0]
    raw = bytearray(victim.read_bytes())
    raw[4000] ^= 0xFF  # a flipped byte in the middle of the log
    victim.write_bytes(bytes(raw))
    with pytest.raises(StoreOpenError) as info:
        open_store(config)
    message = str(info.value)
    assert victim.name in message and "offset" in message and "minibroker journal repair" in message
    result = subprocess.run(
        [sys.executable, "-m", "clients.cli", "serve", "--data-dir", str(data), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and victim.name in result.stderr and "Traceback" not in result.stderr
    assert cli(["journal", "repair", str(data)]) == 0
    out = capsys.readouterr().out
    assert f"cut {victim}" in out or f"cut {victim.name}" in out
    assert (victim.parent / (victim.name + ".broken")).exists()
    store = open_store(config)
    assert isinstance(store, MessageStore)
    store.close()


def test_journal_commands_name_a_bad_directory(tmp_path: Path, capsys) -> None:
    assert cli(["journal", "inspect", str(tmp_path / "nowhere")]) == 2
    assert "no such directory" in capsys.readouterr().err
    assert cli(["journal", "inspect", str(tmp_path)]) == 2
    assert "no journal files under" in capsys.readouterr().err
