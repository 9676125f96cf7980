"""Interoperability: stomp.js (``@stomp/stompjs`` over ``@stomp/tcp-wrapper``, in Node.js),
a second client we did not write, in another language, against the real server.

``make test`` installs the two npm packages (``tests/interop/stompjs/package-lock.json``);
``interop.mjs`` runs one conversation and prints what it saw as JSON, which this test
checks: negotiation, a queue at client-individual with prefetch 1 (ACK, and NACK with
redelivery), escaped header values, a body with NUL bytes, a topic, a receipt,
heart-beats over an idle spell, and an ERROR for a bad frame.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from broker_support import run_client_script

HERE = Path(__file__).resolve().parents[1] / "interop" / "stompjs"


def _stompjs_ready() -> str | None:
    """Why stomp.js cannot run here, or None."""
    if shutil.which("node") is None:
        return "node is not installed (Node.js 18 or later runs stomp.js)"
    if not (HERE / "node_modules" / "@stomp" / "stompjs").is_dir():
        return "stomp.js is not installed: `make test` runs `npm ci` in tests/interop/stompjs"
    return None


def test_stompjs_speaks_to_the_broker(broker) -> None:  # type: ignore[no-untyped-def]
    missing = _stompjs_ready()
    if missing is not None:
        pytest.fail(missing)
    seen = run_client_script(["node", str(HERE / "interop.mjs"), str(broker.port)], "stomp.js")

    assert seen["connected"]["version"] == "1.2"
    assert seen["connected"]["server"].startswith("minibroker/")
    assert seen["connected"]["heartBeat"] == "500,500"  # both sides asked for 500 ms

    by_order = [(m["n"], m["redelivered"]) for m in seen["queue"]]
    # Prefetch 1: one at a time, in order; the NACKed third comes back first, redelivered.
    assert by_order == [("0", None), ("1", None), ("2", None), ("2", "true"), ("bin", None)]
    for m in seen["queue"][:4]:
        assert (m["odd"], m["slash"], m["body"]) == ("a:b\nc", "x\\y", f"m{m['n']}")
        assert m["subscription"] == "q1" and m["hasAck"]
    assert seen["queue"][4]["binary"] == [0, 1, 0, 255]  # content-length carries the NULs

    assert seen["topic"] == ["to all"]
    assert seen["receipts"] == ["r-1"]
    assert seen["stillConnected"] is True  # heart-beats kept an idle connection alive
    assert [e["message"] for e in seen["errors"]] == ["SEND frame has no destination header"]
