"""Interoperability: Perl's Net::Stomp (Debian's libnet-stomp-perl), a client we did not
write, against the real server. Net::Stomp speaks STOMP 1.0 (its CONNECT names no
version), so this is also the 1.0 path with a client of its own.

``make test`` installs the package where it may (root, apt); ``interop.pl`` plays the
scenario of ``interop_scenario`` and prints what it saw as JSON; in 1.0 a header value
holding a colon travels unescaped.
"""
from __future__ import annotations

from pathlib import Path

from broker_support import run_client_script
from interop_scenario import check_scenario, skip_unless_installed

SCRIPT = Path(__file__).resolve().parent / "interop" / "perl" / "interop.pl"


def test_net_stomp_holds_the_scenario(broker) -> None:  # type: ignore[no-untyped-def]
    skip_unless_installed(["perl", "-MNet::Stomp", "-e1"],
                          "Net::Stomp is not installed (as root: apt-get install libnet-stomp-perl; make test does it)")
    seen = run_client_script(["perl", str(SCRIPT), str(broker.port)], "Net::Stomp")
    check_scenario(seen, broker, "1.0")
    assert [m["colon"] for m in seen["first"] + seen["second"]] == ["a:b"] * 6  # 1.0: no escaping
