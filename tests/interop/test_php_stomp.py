"""Interoperability: PHP's PECL stomp extension (Debian's php-stomp), a client we did not
write, against the real server. It speaks STOMP 1.0 (its CONNECT names no version) and
reads one byte past every frame's NUL, expecting the EOL ActiveMQ sends there: against
frames that ended at the NUL it swallowed the first byte of the next frame.

``make test`` installs php-cli and php-stomp where it may (root, apt); ``interop.php``
plays the scenario of ``interop_scenario`` and prints what it saw as JSON.
"""

from __future__ import annotations

from pathlib import Path

from broker_support import run_client_script
from interop_scenario import check_scenario, skip_unless_installed

SCRIPT = Path(__file__).resolve().parents[1] / "interop" / "php" / "interop.php"


def test_the_php_stomp_extension_holds_the_scenario(broker) -> None:  # type: ignore[no-untyped-def]
    skip_unless_installed(
        ["php", "-r", "exit(class_exists('Stomp') ? 0 : 1);"],
        "PHP's stomp extension is not installed (as root: apt-get install php-cli php-stomp; make test does it)",
    )
    seen = run_client_script(["php", str(SCRIPT), str(broker.port)], "PHP stomp")
    check_scenario(seen, broker, None)  # the extension does not show the CONNECTED frame
