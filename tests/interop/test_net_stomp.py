"""Interoperability: Perl's Net::Stomp (Debian's libnet-stomp-perl), a client we did not
write, against the real server. Net::Stomp speaks STOMP 1.0 (its CONNECT names no
version), so this is also the 1.0 path with a client of its own.

``make test`` installs the package where it may (root, apt); ``interop.pl`` plays the
scenario of ``interop_scenario`` and prints what it saw as JSON; in 1.0 a header value
holding a colon travels unescaped. ``leave_mid_stream.pl`` is a slow consumer that
leaves with a message unacknowledged, after which nothing may be missing.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from broker_support import run_client_script
from interop_scenario import check_scenario, skip_unless_installed
from minibroker.core import TeardownChecker
from minibroker.frames import Frame
from minibroker.protocol import FrameParser, encode

SCRIPT = Path(__file__).resolve().parents[1] / "interop" / "perl" / "interop.pl"
NET_STOMP = (
    ["perl", "-MNet::Stomp", "-e1"],
    "Net::Stomp is not installed (as root: apt-get install libnet-stomp-perl; make test does it)",
)


def test_net_stomp_holds_the_scenario(broker) -> None:  # type: ignore[no-untyped-def]
    skip_unless_installed(*NET_STOMP)
    seen = run_client_script(["perl", str(SCRIPT), str(broker.port)], "Net::Stomp")
    check_scenario(seen, broker, "1.0")
    assert [m["colon"] for m in seen["first"] + seen["second"]] == ["a:b"] * 6  # 1.0: no escaping


LEAVE_SCRIPT = SCRIPT.parent / "leave_mid_stream.pl"
LEAVE_QUEUE = "/queue/perl.leave"


def _drain_auto(port: int, expected: int, deadline: float) -> list[bytes]:
    """An auto-ack consumer at prefetch 500 (STOMP 1.2): the bodies it gets, until ``expected`` came."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=deadline)
    parser = FrameParser(role="client", version="1.2")
    sock.sendall(encode(Frame("CONNECT", {"accept-version": "1.2", "host": "localhost"})))
    sock.sendall(
        encode(
            Frame(
                "SUBSCRIBE", {"destination": LEAVE_QUEUE, "id": "drain", "ack": "auto", "activemq.prefetchSize": "500"}
            ),
            "1.2",
        )
    )
    bodies: list[bytes] = []
    end = time.monotonic() + deadline
    while len(bodies) < expected and time.monotonic() < end:
        data = sock.recv(65536)
        if not data:
            break
        bodies += [f.body for f in parser.feed(data) if f.command == "MESSAGE"]
    sock.sendall(encode(Frame("DISCONNECT", {}), "1.2"))
    sock.close()
    return bodies


@pytest.mark.parametrize("acks", [1, 37, 120])
def test_a_slow_client_ack_consumer_leaving_mid_stream_loses_nothing(broker, acks: int) -> None:  # type: ignore[no-untyped-def]
    """Net::Stomp at client ack and prefetch 1, slow, leaves with one MESSAGE it never
    acknowledged (and a topic subscription made just before): an auto consumer then
    drains the queue. Every message is acknowledged by one or drained by the other,
    once, and the queue's statistics agree; the connection's end left nothing behind."""
    skip_unless_installed(*NET_STOMP)
    core = broker.server.broker
    checker = TeardownChecker()
    core.close_observer = checker  # set before any connection: the core reads it in its own thread
    total = 200
    with socket.create_connection(broker.address) as producer:
        producer.sendall(encode(Frame("CONNECT", {"accept-version": "1.2", "host": "localhost"})))
        for i in range(total):
            headers = {"destination": LEAVE_QUEUE, "persistent": "true"}
            if i == total - 1:
                headers["receipt"] = "all-sent"
            producer.sendall(encode(Frame("SEND", headers, f"m{i}".encode() + b"." * 300), "1.2"))
        parser, frames = FrameParser(role="client", version="1.2"), []
        while not any(f.command == "RECEIPT" for f in frames):
            frames += parser.feed(producer.recv(65536))

    seen = run_client_script(["perl", str(LEAVE_SCRIPT), str(broker.port), str(acks)], "Net::Stomp")
    assert len(seen["acked"]) == acks and len(seen["meanwhile"]) == 1  # the story's shape: one left unacknowledged
    drained = _drain_auto(broker.port, total - acks, deadline=30)

    acked = [b.encode("latin-1") for b in seen["acked"]]
    assert len(acked) + len(drained) == total, f"{total - len(acked) - len(drained)} messages lost"
    assert sorted(acked + drained) == sorted(f"m{i}".encode() + b"." * 300 for i in range(total))
    assert seen["meanwhile"][0].encode("latin-1") in drained  # what it left unacknowledged came back
    queue = core.destinations[LEAVE_QUEUE]
    assert (queue.dequeued, queue.size()) == (total, 0)
    assert checker.violations == [] and checker.checked >= 2


def _leave_mid_stream_bench(*args: str) -> tuple[dict[str, Any], str]:
    bench = Path(__file__).resolve().parents[2] / "bench" / "leave_mid_stream.py"
    run = subprocess.run(
        [sys.executable, str(bench), "--rounds", "1", "--messages", "300", "--seconds", "0.3", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1]), run.stdout


def test_the_leave_mid_stream_bench_counts_every_message() -> None:
    """``bench/leave_mid_stream.py``: the story, its drainer reading until it has every
    message; one small round finds every message acknowledged or drained, even when the
    broker stalls for 3 s as the drainer subscribes (its event loop blocked). A drainer
    that stops after 0.5 s without a frame, as the user's script did, gives up during
    that stall: it misses every message, yet the broker lost none (all still queued)."""
    skip_unless_installed(*NET_STOMP)
    summary, out = _leave_mid_stream_bench("--stall", "3")
    assert (summary["rounds"], summary["missing"], summary["lost"]) == (1, 0, 0), out
    assert "left unacknowledged ['m" in out  # the story's shape: one MESSAGE came meanwhile
    summary, out = _leave_mid_stream_bench("--stall", "3", "--stop", "idle", "--idle", "0.5")
    assert summary["lost"] == 0 and f"of which {summary['missing']} still queued" in out, out
