"""Sessions on the virtual network: CONNECT, versions, receipts, errors, heart-beats."""

from __future__ import annotations

import pytest

from minibroker.config import BrokerConfig
from minibroker.edge import VirtualNetwork


@pytest.fixture
def net() -> VirtualNetwork:
    return VirtualNetwork()


@pytest.mark.parametrize(
    "offered,chosen",
    [("1.0", "1.0"), ("1.1", "1.1"), ("1.2", "1.2"), ("1.0,1.1,1.2", "1.2"), ("1.1,1.0", "1.1"), ("1.2,2.0", "1.2")],
)
def test_version_negotiation_picks_the_highest_common(net: VirtualNetwork, offered: str, chosen: str) -> None:
    c = net.client()
    reply = c.connect(offered)
    assert reply.command == "CONNECTED"
    assert reply.headers["version"] == chosen
    assert reply.headers["server"].startswith("minibroker/")
    assert reply.headers["session"]
    if chosen != "1.0":
        assert reply.headers["heart-beat"] == "0,0"


def test_connect_without_accept_version_is_1_0(net: VirtualNetwork) -> None:
    c = net.client()
    c.send_frame("CONNECT", {})
    assert c.last().headers["version"] == "1.0"


def test_a_1_0_connect_with_an_eol_body_is_accepted(net: VirtualNetwork) -> None:
    """As RabbitMQ's own tests send it over a raw socket (ActiveMQ and RabbitMQ answer CONNECTED)."""
    c = net.client()
    c.send_raw(b"CONNECT\nlogin:guest\npasscode:guest\n\n\n\x00")
    assert c.last().command == "CONNECTED" and c.last().headers["version"] == "1.0"
    c.version = c.parser.version = "1.0"
    c.send_raw(b"SUBSCRIBE\ndestination:/queue/eol\n\nignored in 1.0\x00")  # 1.0: any body, dropped
    c.send("/queue/eol", "after")
    assert c.bodies() == [b"after"] and not c.closed


@pytest.mark.parametrize("version", ["1.1", "1.2"])
def test_bodies_on_bodiless_frames_are_eols_only_from_1_1(net: VirtualNetwork, version: str) -> None:
    c = net.connected_client(version=version)
    c.send_raw(b"SUBSCRIBE\ndestination:/queue/eols\nid:s\n\n\r\n\n\x00")  # EOLs: dropped
    c.send("/queue/eols", "m")
    assert c.bodies() == [b"m"] and not c.closed
    c.send_raw(b"UNSUBSCRIBE\nid:s\nreceipt:r\n\ncontent\x00")
    assert c.last().command == "ERROR" and c.closed
    assert c.last().headers["message"].startswith("a UNSUBSCRIBE frame must not have a body")


def test_a_stray_nul_between_frames_is_skipped(net: VirtualNetwork) -> None:
    c = net.connected_client()
    c.send_raw(b"\n\x00SUBSCRIBE\ndestination:/queue/nul\nid:s\n\n\x00\x00")
    c.send("/queue/nul", "m")
    assert c.bodies() == [b"m"] and not c.closed


def test_stomp_command_connects_too(net: VirtualNetwork) -> None:
    c = net.client()
    c.send_frame("STOMP", {"accept-version": "1.2", "host": "anything.example"})
    assert c.last().command == "CONNECTED"


def test_no_common_version_is_an_error_then_close(net: VirtualNetwork) -> None:
    c = net.client()
    c.send_frame("CONNECT", {"accept-version": "2.0,3.1", "host": "h"})
    err = c.last()
    assert err.command == "ERROR"
    assert err.headers["version"] == "1.0,1.1,1.2"
    assert "2.0,3.1" in err.headers["message"]
    assert c.closed


@pytest.mark.parametrize("command", ["SEND", "SUBSCRIBE", "ACK", "DISCONNECT"])
def test_a_frame_before_connect_is_refused(net: VirtualNetwork, command: str) -> None:
    c = net.client()
    c.send_frame(command, {"destination": "/queue/a", "receipt": "r9"})
    err = c.last()
    assert err.command == "ERROR"
    assert "not connected" in err.headers["message"]
    assert err.headers["receipt-id"] == "r9"
    assert c.closed


def test_a_second_connect_is_refused(net: VirtualNetwork) -> None:
    c = net.connected_client()
    c.send_frame("CONNECT", {"accept-version": "1.2", "host": "h"})
    assert c.last().command == "ERROR"
    assert "already connected" in c.last().headers["message"]
    assert c.closed


def test_receipt_on_every_frame(net: VirtualNetwork) -> None:
    c = net.connected_client()
    c.subscribe("/queue/r", "s1", "client", receipt="1")
    c.send("/queue/r", "x", receipt="2")
    msg = c.messages()[0]
    c.ack(msg, receipt="3")
    c.send_frame("BEGIN", {"transaction": "t", "receipt": "4"})
    c.send_frame("COMMIT", {"transaction": "t", "receipt": "5"})
    c.send_frame("BEGIN", {"transaction": "u", "receipt": "6"})
    c.send_frame("ABORT", {"transaction": "u", "receipt": "7"})
    c.send_frame("UNSUBSCRIBE", {"id": "s1", "receipt": "8"})
    c.disconnect(receipt="9")
    receipts = [f.headers["receipt-id"] for f in c.frames("RECEIPT")]
    assert receipts == [str(i) for i in range(1, 10)]
    assert c.closed


def test_subscribe_receipt_comes_before_the_first_message(net: VirtualNetwork) -> None:
    p = net.connected_client()
    p.send("/queue/early", "waiting")
    c = net.connected_client()
    c.subscribe("/queue/early", receipt="sub")
    commands = [f.command for f in c.received[1:]]
    assert commands == ["RECEIPT", "MESSAGE"]


def test_disconnect_closes_after_the_receipt(net: VirtualNetwork) -> None:
    c = net.connected_client()
    c.disconnect(receipt="bye")
    assert c.last().command == "RECEIPT"
    assert c.closed


@pytest.mark.parametrize(
    "headers,fragment",
    [
        ({}, "no destination"),
        ({"destination": "/nowhere/x"}, "unknown destination"),
        ({"destination": "/queue/a", "priority": "high"}, "priority must be an integer"),
        ({"destination": "/queue/a", "expires": "-5"}, "expires must be an integer"),
    ],
)
def test_bad_send_is_an_error_with_receipt_id_then_close(net: VirtualNetwork, headers: dict, fragment: str) -> None:
    c = net.connected_client()
    c.send_frame("SEND", {**headers, "receipt": "r1"}, b"body")
    err = c.last()
    assert err.command == "ERROR"
    assert fragment in err.headers["message"]
    assert err.headers["receipt-id"] == "r1"
    assert c.closed


@pytest.mark.parametrize(
    "headers,fragment",
    [
        ({"destination": "/queue/a"}, "no id header"),
        ({"id": "1"}, "no destination"),
        ({"destination": "/queue/a", "id": "1", "ack": "sometimes"}, "unknown ack mode"),
        ({"destination": "/queue/a", "id": "1", "activemq.prefetchSize": "0"}, "prefetchSize must be"),
        ({"destination": "/queue/a", "id": "1", "activemq.prefetchSize": "lots"}, "prefetchSize must be an integer"),
    ],
)
def test_bad_subscribe_is_an_error(net: VirtualNetwork, headers: dict, fragment: str) -> None:
    c = net.connected_client()
    c.send_frame("SUBSCRIBE", headers)
    assert c.last().command == "ERROR"
    assert fragment in c.last().headers["message"]
    assert c.closed


def test_duplicate_subscription_id_is_an_error(net: VirtualNetwork) -> None:
    c = net.connected_client()
    c.subscribe("/queue/a", "s")
    c.subscribe("/queue/b", "s")
    assert "already in use" in c.last().headers["message"]


def test_malformed_frame_is_an_error_and_others_are_unaffected(net: VirtualNetwork) -> None:
    good = net.connected_client("good")
    good.subscribe("/queue/work", "w")
    bad = net.connected_client("bad")
    bad.send_raw(b"SEND\ndestination:/queue/work\nbroken-header-without-colon\n\nx\x00")
    assert bad.last().command == "ERROR"
    assert "without ':'" in bad.last().headers["message"]
    assert bad.closed
    producer = net.connected_client("producer")
    producer.send("/queue/work", "still fine")
    assert good.bodies() == [b"still fine"]


def test_the_1_0_dialect_is_unescaped_and_trimmed(net: VirtualNetwork) -> None:
    c = net.connected_client(version="1.0")
    c.send_raw(b"SUBSCRIBE\ndestination: /queue/old \n\n\x00")
    c.send_raw(b"SEND\ndestination:/queue/old\nodd:a\\b\n\nv1.0\x00")
    msg = c.messages()[0]
    assert msg.headers["subscription"] == "/queue/old"
    assert msg.headers["odd"] == "a\\b"


class TestHeartBeats:
    def config(self) -> BrokerConfig:
        return BrokerConfig().replace(transport={"hb_grace_period_multiplier": 1.5})

    def test_broker_answers_cy_cx_and_beats_at_cy(self) -> None:
        net = VirtualNetwork(self.config())
        c = net.client()
        c.send_frame("CONNECT", {"accept-version": "1.2", "host": "h", "heart-beat": "0,1000"})
        assert c.last().headers["heart-beat"] == "1000,0"
        net.advance(5.5)
        assert c.parser.heartbeats == 5  # one EOL a second, nothing else
        assert not c.closed

    def test_a_silent_client_is_disconnected_after_the_grace_period(self) -> None:
        net = VirtualNetwork(self.config())
        c = net.client()
        c.send_frame("CONNECT", {"accept-version": "1.2", "host": "h", "heart-beat": "1000,0"})
        net.advance(1.4)
        assert not c.closed
        net.advance(0.2)
        assert c.closed
        assert "heart-beat timeout" in c.last().headers["message"]

    def test_beats_from_the_client_keep_it_alive(self) -> None:
        net = VirtualNetwork(self.config())
        c = net.client()
        c.send_frame("CONNECT", {"accept-version": "1.2", "host": "h", "heart-beat": "1000,0"})
        net.every(1.0, lambda: c.send_raw(b"\n"), until=10.0)
        net.advance(10.0)
        assert not c.closed
        net.advance(2.0)
        assert c.closed

    def test_malformed_heart_beat_is_an_error(self) -> None:
        net = VirtualNetwork()
        c = net.client()
        c.send_frame("CONNECT", {"accept-version": "1.2", "host": "h", "heart-beat": "fast"})
        assert c.last().command == "ERROR"
        assert "heart-beat" in c.last().headers["message"]

    def test_no_heart_beats_in_1_0(self) -> None:
        net = VirtualNetwork()
        c = net.client()
        c.send_frame("CONNECT", {"heart-beat": "1000,1000"})
        assert "heart-beat" not in c.last().headers
        net.advance(10)
        assert not c.closed and c.parser.heartbeats == 0


def test_a_connection_that_never_connects_is_closed() -> None:
    net = VirtualNetwork(BrokerConfig().replace(transport={"connect_timeout": 2000}))
    c = net.client()
    net.advance(1.9)
    assert not c.closed
    net.advance(0.2)
    assert c.closed
    assert "no CONNECT frame within 2000 ms" in c.last().headers["message"]


def test_client_id_is_unique() -> None:
    net = VirtualNetwork()
    first = net.client()
    first.connect(client_id="app-1")
    second = net.client()
    reply = second.connect(client_id="app-1")
    assert reply.command == "ERROR"
    assert "app-1 already connected" in reply.headers["message"]
    assert second.closed and not first.closed
    first.disconnect()
    third = net.client()
    assert third.connect(client_id="app-1").command == "CONNECTED"


def test_link_stealing_closes_the_old_connection() -> None:
    net = VirtualNetwork(BrokerConfig().replace(transport={"allow_link_stealing": True}))
    first = net.client()
    first.connect(client_id="app-1")
    second = net.client()
    assert second.connect(client_id="app-1").command == "CONNECTED"
    assert first.closed
    assert "taken over" in first.last().headers["message"]


def test_frames_sent_with_connect_use_the_negotiated_version() -> None:
    net = VirtualNetwork()
    c = net.client()
    c.send_raw(
        b"CONNECT\naccept-version:1.2\nhost:h\n\n\x00"
        b"SUBSCRIBE\nid:s\ndestination:/queue/esc\n\n\x00"
        b"SEND\ndestination:/queue/esc\nk:a\\cb \n\n\x00"
    )
    msg = c.messages()[0]
    assert msg.headers["k"] == "a:b "


def test_a_1_1_header_with_a_newline_reaches_a_1_0_consumer_flattened() -> None:
    net = VirtualNetwork()
    old = net.connected_client("old", version="1.0")
    old.subscribe("/queue/mixed")
    new = net.connected_client("new", version="1.1")
    new.send("/queue/mixed", "x", note="two\nlines")
    assert old.messages()[0].headers["note"] == "two lines"
