"""Bad input always gets an ERROR saying what was wrong, never an internal error.

Numbers on the wire are ASCII digits (``minibroker.digits``): digits of other
scripts, which ``str.isdigit`` takes, and numbers of thousands of digits, which
``int`` refuses, are answered like any other bad number. A CR a client puts in
a value that comes back in an ERROR's ``message`` does not break the ERROR.
A message is checked before it goes anywhere: one that could never be
journalled reaches no subscriber.
"""

from __future__ import annotations

import pytest

from minibroker.config import parse_config
from minibroker.connection import hash_password
from minibroker.digits import parse_decimal
from minibroker.edge import VirtualClient, VirtualNetwork


def _answers(client: VirtualClient) -> list[tuple[str, str | None]]:
    return [(f.command, f.headers.get("message")) for f in client.frames() if f.command in ("RECEIPT", "ERROR")]


@pytest.mark.parametrize("text,value", [("0", 0), ("0005", 5), ("0" * 5000, 0), ("9" * 30, 10**30 - 1)])
def test_decimals_in_ascii_digits(text: str, value: int) -> None:
    assert parse_decimal(text) == value


@pytest.mark.parametrize("text", ["", "\u00b2", "\u0663", " 5", "+5", "1_0", "-1", "1\r", "9" * 31, "9" * 5000])
def test_anything_else_is_refused_with_a_reason(text: str) -> None:
    with pytest.raises(ValueError, match="ASCII digits|too large"):
        parse_decimal(text)


def test_a_sign_where_one_is_allowed() -> None:
    assert parse_decimal("-128", signed=True) == -128
    with pytest.raises(ValueError):
        parse_decimal("--1", signed=True)


def test_a_heart_beat_in_other_digits_is_an_error() -> None:
    net = VirtualNetwork()
    c = net.client("c")
    c.send_raw("CONNECT\naccept-version:1.2\nheart-beat:\u00b2,0\n\n\x00".encode())
    [(command, message)] = _answers(c)
    assert command == "ERROR" and message is not None and message.startswith("heart-beat header must be")
    assert c.closed


def test_a_content_length_of_five_thousand_zeros_is_zero() -> None:
    net = VirtualNetwork()
    c = net.connected_client("c")
    c.subscribe("/queue/q", "s")
    c.send_raw(b"SEND\ndestination:/queue/q\nreceipt:r\ncontent-length:" + b"0" * 5000 + b"\n\n\x00")
    assert _answers(c) == [("RECEIPT", None)] and c.bodies() == [b""]


def test_a_content_length_of_five_thousand_digits_is_an_error() -> None:
    net = VirtualNetwork()
    c = net.connected_client("c")
    c.send_raw(b"SEND\ndestination:/queue/q\ncontent-length:" + b"9" * 5000 + b"\n\nabc\x00")
    [(command, message)] = _answers(c)
    assert command == "ERROR" and message is not None and "content-length is not a number of bytes" in message
    assert "5000 digits, too large" in message


@pytest.mark.parametrize("ack_id", ["1-\u00b2", "\u00b2-1", "1-" + "9" * 5000])
def test_an_ack_id_in_other_digits_is_an_error(ack_id: str) -> None:
    net = VirtualNetwork()
    c = net.connected_client("c")
    c.send_frame("ACK", {"id": ack_id})
    [(command, message)] = _answers(c)
    assert command == "ERROR" and message is not None and message.startswith("ACK for unknown ack id")


@pytest.mark.parametrize("version", ["1.0", "1.2"])
def test_a_carriage_return_in_the_login_is_refused_like_a_wrong_password(version: str) -> None:
    net = VirtualNetwork(parse_config({"users": [{"name": "a", "password_hash": hash_password("p", iterations=1000)}]}))
    c = net.client("c")
    c.send_raw(f"CONNECT\naccept-version:{version}\nlogin:a\rb\npasscode:p\n\n\x00".encode())
    [(command, message)] = _answers(c)
    assert command == "ERROR" and message is not None and message.endswith("or password is invalid.")
    assert c.closed


@pytest.mark.parametrize("layout,option", [("growing", "store.journal_max_file_length"), ("ring", "store.file_size")])
def test_a_persistent_send_larger_than_a_journal_file_is_refused_before_it_goes_anywhere(
    tmp_path, layout: str, option: str
) -> None:  # type: ignore[no-untyped-def]
    store = {"layout": layout, "fsync": "never", "journal_max_file_length": "64 kb", "file_size": "64 kb"}
    net = VirtualNetwork(parse_config({"store": store}), data_dir=tmp_path)
    try:
        subscriber = net.connected_client("subscriber")
        subscriber.subscribe("/topic/t", "t")
        subscriber.subscribe("/queue/q", "q")
        for address in ("/queue/q", "/topic/t"):
            producer = net.connected_client("producer")
            producer.send(address, b"x" * 70_000, persistent="true", receipt="r")
            [(command, message)] = _answers(producer)
            assert command == "ERROR" and message is not None
            assert "does not fit in one journal file of 65536 bytes" in message and option in message
        producer = net.connected_client("producer")
        producer.send("/queue/q", b"x" * 60_000, persistent="true", receipt="r")  # one that fits goes through
        assert _answers(producer) == [("RECEIPT", None)]
        assert [len(b) for b in subscriber.bodies()] == [60_000]
    finally:
        net.stop()


def test_an_expiry_past_the_journal_s_range_is_refused_before_any_subscriber_gets_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    net = VirtualNetwork(parse_config({"store": {"fsync": "never"}}), data_dir=tmp_path)
    try:
        online = net.client("online")
        online.connect("1.2", client_id="online")
        online.subscribe("/topic/t", "plain")
        online.subscribe("/topic/t", "durable", **{"activemq.subscriptionName": "d"})
        producer = net.connected_client("producer")
        producer.send("/topic/t", b"too late", persistent="true", expires=str(2**63), receipt="r")
        [(command, message)] = _answers(producer)
        assert command == "ERROR" and message == (
            "header expires must be an integer from 0 to 9223372036854775807, not '9223372036854775808'"
        )
        assert online.bodies() == []
        producer = net.connected_client("producer")
        producer.send("/topic/t", b"the last", persistent="true", expires=str(2**63 - 1), receipt="r")
        assert _answers(producer) == [("RECEIPT", None)]
        assert online.bodies() == [b"the last", b"the last"]
    finally:
        net.stop()


@pytest.mark.parametrize("value,selected", [("9" * 5000, False), ("0" * 5000 + "7", True), ("\u00b2", False)])
def test_a_header_of_thousands_of_digits_under_a_numeric_selector(value: str, selected: bool) -> None:
    """A property compared as a number by another client's selector: never an error in
    that dispatch, only selected or not (a number too long for a long is not one)."""
    net = VirtualNetwork()
    consumer = net.connected_client("consumer")
    consumer.subscribe("/queue/q", "s", selector="x > 5")
    producer = net.connected_client("producer")
    producer.send("/queue/q", b"m", x=value, receipt="r")
    assert _answers(producer) == [("RECEIPT", None)]
    assert consumer.bodies() == ([b"m"] if selected else [])


def test_a_carriage_return_in_a_1_0_receipt_is_an_error() -> None:
    """STOMP 1.0 escapes nothing, so the RECEIPT could not carry it back: an ERROR says so."""
    net = VirtualNetwork()
    c = net.connected_client("c", version="1.0")
    c.send_raw(b"SEND\ndestination:/queue/a\nreceipt:a\rb\n\nx\x00")
    [(command, message)] = _answers(c)
    assert (command, message) == ("ERROR", "a receipt header cannot hold a carriage return in STOMP 1.0")
    assert c.frames("ERROR")[0].headers["receipt-id"] == "a\\rb"  # shown, not sent raw


def test_a_content_length_with_spaces_around_it_is_read_as_activemq_reads_it() -> None:
    """Strict digits, but the spaces around them trimmed, as ActiveMQ's parseInt(trim())."""
    net = VirtualNetwork()
    c = net.connected_client("c")
    c.subscribe("/queue/q", "s")
    c.send_raw(b"SEND\ndestination:/queue/q\nreceipt:r\ncontent-length: 3 \n\nabc\x00")
    assert _answers(c) == [("RECEIPT", None)] and c.bodies() == [b"abc"]
