"""stomp.js (the ``@stomp/stompjs`` npm package, its browser bundle) in a real headless
Chromium, against the broker's STOMP over WebSocket listener: it connects (choosing
the v12.stomp subprotocol), subscribes at client-individual with a prefetch of 1,
sends text and binary bodies, acks each message, waits for a receipt, and gets an
ERROR for a bad frame."""

from __future__ import annotations

from pathlib import Path

import pytest

from browser_support import console_messages, start_chromium, wait_for
from minibroker.config import ANY_PORT

HERE = Path(__file__).resolve().parents[1] / "interop" / "stompjs"


def test_stompjs_in_chromium_over_websocket(broker_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    if not (HERE / "node_modules" / "@stomp" / "stompjs" / "bundles" / "stomp.umd.min.js").is_file():
        pytest.fail("stomp.js is not installed: `make test` runs `npm ci` in tests/interop/stompjs")
    broker = broker_factory(transport={"websocket_port": ANY_PORT})
    driver = start_chromium(tmp_path / "profile")
    try:
        driver.get(f"{(HERE / 'browser.html').as_uri()}?port={broker.server.websocket_port}")
        seen = wait_for(driver, "return window.seen && window.seen.done && window.seen", "the conversation's end")
        driver.save_screenshot(str(tmp_path / "stompjs.png"))
        console = console_messages(driver)
    finally:
        driver.quit()

    assert seen["connected"]["version"] == "1.2" and seen["connected"]["server"].startswith("minibroker/")
    assert seen["protocol"] == "v12.stomp"
    assert [(m["n"], m["body"]) for m in seen["queue"][:3]] == [("0", "m0 é"), ("1", "m1 é"), ("2", "m2 é")]
    assert seen["queue"][3]["binary"] == [0, 1, 0, 255]  # content-length carries the NULs, in a binary message
    assert all(m["hasAck"] for m in seen["queue"])
    assert seen["receipts"] == ["r-1"]
    assert [e["message"] for e in seen["errors"]] == ["SEND frame has no destination header"]

    # Every message was acknowledged: nothing is left on the queue or unacknowledged.
    def queue_state() -> tuple[int, int, int]:
        queue = broker.server.broker.destinations["/queue/browser.q"]
        return queue.size(), queue.dequeued, len(queue.subscriptions)

    assert broker.call(queue_state) == (0, 4, 0)
    assert not [m for m in console if m["level"] == "SEVERE" and "ws://" not in m["message"]], console
