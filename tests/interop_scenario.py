"""The one conversation every third-party client holds with the real server, and its check.

Each client's script (``tests/interop/<language>/``) or test plays the same scenario and
reports what it saw as one dict (JSON from a script); ``check_scenario`` holds them all to
the same outcome:

1. five SENDs to ``QUEUE`` (header ``n``) and one to ``BINARY_QUEUE`` whose body holds a NUL
   and UTF-8, each with a receipt (``receipts``: six true);
2. a consumer at client ack and prefetch 1 takes three in order, acknowledges the first
   two and DISCONNECTs with a receipt (``first``);
3. a second connection, at client ack and the default prefetch (the three arrive back
   to back), gets the third again and the last two, acknowledging each (``second``): the
   acknowledgements stuck across the reconnect; it takes the binary message, byte for
   byte (``binary``: hex, and its content-length);
4. two connections subscribe to ``TOPIC`` (each with a receipt) and both get the one
   message sent there (``topic_receipts``, ``topic``);
5. both DISCONNECT with a receipt (``disconnect_receipts``: three true, with step 2's).

Afterwards the broker holds nothing on either queue: every message was acknowledged.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import pytest

from broker_support import RunningBroker

QUEUE = "/queue/interop.q"
BINARY_QUEUE = "/queue/interop.bin"
TOPIC = "/topic/interop.t"
#: A body with a NUL inside and UTF-8 around it (é, 日本).
BINARY = "nul\0inside \u00e9t\u00e9 \u65e5\u672c".encode()


def skip_unless_installed(check: list[str], missing: str) -> None:
    """Skip the calling test, saying ``missing``, unless the command ``check`` succeeds."""
    if shutil.which(check[0]) is None or subprocess.run(check, capture_output=True).returncode != 0:
        pytest.skip(missing)


def queue_size(broker: RunningBroker, address: str) -> int:
    """Messages the broker still holds on ``address`` (pending, in flight or on disk)."""

    def size() -> int:
        destination = broker.server.broker.registry.get(address)
        return 0 if destination is None else destination.size()

    return int(broker.call(size))


def check_scenario(seen: dict[str, Any], broker: RunningBroker, version: str | None) -> None:
    """Assert that ``seen`` is the scenario's outcome, the session speaking ``version``
    (None: the client does not say which)."""
    assert "error" not in seen, seen["error"]
    if version is not None:
        assert seen["connected"]["version"] == version
    assert seen["connected"]["session"]
    assert seen["receipts"] == [True] * 6
    assert [(m["command"], m["n"], m["body"]) for m in seen["first"]] == [
        ("MESSAGE", str(i), f"m{i}") for i in range(3)
    ]
    assert [(m["command"], m["n"], m["body"]) for m in seen["second"]] == [
        ("MESSAGE", str(i), f"m{i}") for i in (2, 3, 4)
    ]
    assert all(m["destination"] == QUEUE for m in seen["first"] + seen["second"])
    assert bytes.fromhex(seen["binary"]["hex"]) == BINARY
    assert str(seen["binary"]["content_length"]) == str(len(BINARY))
    assert seen["topic_receipts"] == [True, True]
    assert seen["topic"] == ["to all", "to all"]
    assert seen["disconnect_receipts"] == [True] * 3
    # The last DISCONNECT's receipt came after every ACK was handled: nothing is left.
    assert queue_size(broker, QUEUE) == 0
    assert queue_size(broker, BINARY_QUEUE) == 0
