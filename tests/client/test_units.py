"""Pure pieces of the client: heart-beat rules, ACK headers, Message, the flow credit."""

from __future__ import annotations

import pytest

from clients.stomp import Message, ack_headers, negotiate_heartbeat
from clients.stomp.flow import FlowCredit
from clients.stomp.heartbeat import format_heartbeat, parse_heartbeat
from minibroker.frames import Frame

# (client cx,cy), (server sx,sy) -> (client sends every, client expects every)
NEGOTIATION = [
    ((0, 0), (0, 0), (0, 0)),
    ((1000, 0), (0, 0), (0, 0)),  # server does not want beats
    ((1000, 0), (0, 500), (1000, 0)),  # max(cx, sy)
    ((200, 0), (0, 500), (500, 0)),
    ((0, 1000), (300, 0), (0, 1000)),  # max(sx, cy)
    ((0, 100), (300, 0), (0, 300)),
    ((0, 100), (0, 0), (0, 0)),  # server cannot send
    ((100, 200), (300, 400), (400, 300)),
]


@pytest.mark.parametrize("client, server, expected", NEGOTIATION)
def test_negotiate(client, server, expected) -> None:
    assert negotiate_heartbeat(client, server) == expected


@pytest.mark.parametrize("text, expected", [(None, (0, 0)), ("0,0", (0, 0)), ("10, 20", (10, 20))])
def test_parse_heartbeat(text, expected) -> None:
    assert parse_heartbeat(text) == expected


@pytest.mark.parametrize("text", ["", "1", "1,2,3", "a,b", "-1,0"])
def test_parse_heartbeat_refuses(text) -> None:
    with pytest.raises(ValueError):
        parse_heartbeat(text)


def test_format_heartbeat() -> None:
    assert format_heartbeat((10, 0)) == "10,0"
    with pytest.raises(ValueError):
        format_heartbeat((-1, 0))


MSG = Frame(
    "MESSAGE",
    {"destination": "/queue/a", "message-id": "m-7", "subscription": "s1", "ack": "a-7", "redelivered": "true"},
    b"hi",
)

ACKS = [
    ("1.2", None, {"id": "a-7"}),
    ("1.2", "tx1", {"id": "a-7", "transaction": "tx1"}),
    ("1.1", None, {"subscription": "s1", "message-id": "m-7"}),
    ("1.1", "tx1", {"subscription": "s1", "message-id": "m-7", "transaction": "tx1"}),
    ("1.0", None, {"message-id": "m-7"}),
    ("1.0", "tx1", {"message-id": "m-7", "transaction": "tx1"}),
]


@pytest.mark.parametrize("version, tx, expected", ACKS)
def test_ack_headers(version, tx, expected) -> None:
    assert ack_headers(Message(MSG, "s1"), version, tx) == expected


def test_ack_id_falls_back_to_message_id() -> None:
    frame = Frame("MESSAGE", {"message-id": "m-1", "subscription": "s"})
    assert Message(frame, "s").ack_id == "m-1"
    assert ack_headers(Message(frame, "s"), "1.2") == {"id": "m-1"}


def test_message_attributes() -> None:
    m = Message(MSG, "s1")
    assert (m.message_id, m.ack_id, m.destination, m.subscription) == ("m-7", "a-7", "/queue/a", "s1")
    assert m.redelivered is True
    assert m.body == b"hi" and m.text == "hi"
    assert Message(Frame("MESSAGE", {}), "x").redelivered is False


def test_flow_credit_pauses_at_its_limit_and_resumes_at_half() -> None:
    calls: list[bool] = []
    credit = FlowCredit(4, lambda: calls.append(credit.wants_pause(must_read=False)))
    for _ in range(3):
        credit.take()
    assert calls == [] and not credit.exhausted
    credit.take()  # the fourth: the connection is told, and should pause
    assert calls == [True] and credit.exhausted
    credit.paused = True
    credit.give_back()  # 3 held: still paused
    assert calls == [True, True]
    credit.give_back()  # 2 held, half the limit: resume
    assert calls == [True, True, False]
    credit.retake()  # a cancelled get put its message back: no call
    assert credit.held == 3 and len(calls) == 3


def test_flow_credit_never_pauses_while_the_connection_must_read() -> None:
    credit = FlowCredit(2, lambda: None)
    credit.take()
    credit.take()
    assert credit.wants_pause(must_read=False) and not credit.wants_pause(must_read=True)
    credit.paused = True
    assert not credit.wants_pause(must_read=True)  # a RECEIPT awaited: read on
