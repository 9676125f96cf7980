"""Interoperability: Perl's Net::Stomp (Debian's libnet-stomp-perl), a third client we did
not write, against the real server. Net::Stomp speaks STOMP 1.0 (its CONNECT names no
version), so this is also the 1.0 path with a client of its own.

``make test`` installs the package where it may (root, apt); ``interop.pl`` runs one
conversation and prints what it saw as JSON, which this test checks: a 1.0 CONNECTED,
SENDs with a header value holding a colon and a body holding a NUL (content-length), a
receipt, a consumer at client ack and prefetch 1 acknowledging each message, a topic.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from broker_support import run_client_script

SCRIPT = Path(__file__).resolve().parent / "interop" / "perl" / "interop.pl"


def _net_stomp_missing() -> str | None:
    if shutil.which("perl") is None:
        return "perl is not installed"
    if subprocess.run(["perl", "-MNet::Stomp", "-e1"], capture_output=True).returncode != 0:
        return "Net::Stomp is not installed (as root: apt-get install libnet-stomp-perl; make test does it)"
    return None


def test_net_stomp_speaks_to_the_broker(broker) -> None:  # type: ignore[no-untyped-def]
    missing = _net_stomp_missing()
    if missing is not None:
        pytest.skip(missing)
    seen = run_client_script(["perl", str(SCRIPT), str(broker.port)], "Net::Stomp")

    assert seen["connected"]["command"] == "CONNECTED" and seen["connected"]["version"] == "1.0"
    assert seen["send_with_receipt"] is True
    assert [(m["command"], m["n"], m["body"]) for m in seen["queue"]] == [
        ("MESSAGE", "0", "m0"), ("MESSAGE", "1", "m1"), ("MESSAGE", "2", "m2"),
        ("MESSAGE", "bin", "nul\0inside"), ("MESSAGE", "last", "last")]
    assert all(m["destination"] == "/queue/perl.q" and m["has_id"] for m in seen["queue"])
    assert [m["colon"] for m in seen["queue"][:3]] == ["a:b"] * 3  # 1.0: no escaping, the colon as it is
    assert seen["topic"] == ["to all"]
    assert seen["can_read_after"] is False  # every message acknowledged: nothing more comes
