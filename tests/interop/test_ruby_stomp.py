"""Interoperability: Ruby's stomp gem (Debian's ruby-stomp), a client we did not write,
against the real server, over STOMP 1.2 (its CONNECT offers it here).

``make test`` installs the package where it may (root, apt); ``interop.rb`` plays the
scenario of ``interop_scenario`` and prints what it saw as JSON.
"""

from __future__ import annotations

from pathlib import Path

from broker_support import run_client_script
from interop_scenario import check_scenario, skip_unless_installed

SCRIPT = Path(__file__).resolve().parents[1] / "interop" / "ruby" / "interop.rb"


def test_the_ruby_stomp_gem_holds_the_scenario(broker) -> None:  # type: ignore[no-untyped-def]
    skip_unless_installed(
        ["ruby", "-rstomp", "-e", "1"],
        "Ruby's stomp gem is not installed (as root: apt-get install ruby-stomp; make test does it)",
    )
    seen = run_client_script(["ruby", str(SCRIPT), str(broker.port)], "Ruby stomp")
    check_scenario(seen, broker, "1.2")
