"""A SEND's header lines passed through to the MESSAGE (``message.send_block``).

The fast path must make exactly the message the general path makes: same
headers, same size, the same frame for every consumer version, the same
journal payload. Each case parses a SEND with the real codec (which keeps the
frame's head) and builds its message both ways.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from minibroker.durability import decode_payload, encode_payload
from minibroker.edge import VirtualNetwork
from minibroker.frames import Frame
from minibroker.protocol import FrameParser, encode, send_block

#: Names the broker sets, rewrites or reads, and plain application names.
_NAMES = st.sampled_from(
    [
        "destination",
        "receipt",
        "message-id",
        "subscription",
        "ack",
        "redelivered",
        "persistent",
        "priority",
        "expires",
        "timestamp",
        "reply-to",
        "content-type",
        "correlation-id",
        "JMSType",
        "kind",
        "x",
        "ü-name",
    ]
)
_VALUES = st.one_of(
    st.sampled_from(["true", "TRUE", "false", "7", "0", "abc", "", "a:b", "back\\slash", "ünï", "line\nbreak"]),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\r"), max_size=12),
)


def _net_and_session(version: str):
    net = VirtualNetwork()
    client = net.connected_client("p", version=version)
    return net, net.broker.sessions[client.sid]


def _both_ways(version: str, headers: list[tuple[str, str]], body: bytes = b"hello"):
    """The message built from the parsed SEND (fast path where it applies) and from a plain dict."""
    net, session = _net_and_session(version)
    wire = encode(Frame("SEND", {}, body), version).replace(
        b"SEND\n", b"SEND\n" + b"".join(f"{k}:{v}\n".encode() for k, v in headers), 1
    )
    parser = FrameParser(role="server", version=version)
    (frame,) = parser.feed(wire)
    handlers = net.broker.handlers
    first = handlers.next_message
    fast = handlers._make_message(session, frame, "/queue/q")
    handlers.next_message = first
    slow = handlers._make_message(session, Frame("SEND", dict(frame.headers), frame.body), "/queue/q")
    return frame, fast, slow


def _assert_same(fast, slow) -> None:
    assert dict(fast.headers) == dict(slow.headers)
    assert list(fast.headers) == list(slow.headers)  # the order the consumer sees
    assert fast.size == slow.size
    for version in ("1.0", "1.1", "1.2"):
        assert fast.tail(version) == slow.tail(version)
    assert fast.header_view() == slow.header_view()
    assert fast.wire_headers == slow.wire_headers
    kwargs = dict(persistent=True, priority=fast.priority, expires=fast.expires, timestamp=fast.timestamp)
    assert encode_payload(1, fast.message_id, dict(fast.headers), fast.body, **kwargs) == encode_payload(
        1, slow.message_id, dict(slow.headers), slow.body, **kwargs
    )


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_NAMES, _VALUES), max_size=8), st.sampled_from(["1.1", "1.2"]))
def test_a_passed_through_send_makes_the_message_the_general_path_makes(pairs, version) -> None:
    headers = [
        (
            k,
            str(len(v))
            if k in ("priority", "expires")
            else v.replace("\\", "\\\\").replace("\n", "\\n").replace(":", "\\c"),
        )
        for k, v in pairs
    ]
    _, fast, slow = _both_ways(version, [("destination", "/queue/q"), *headers])
    _assert_same(fast, slow)


def test_the_usual_send_takes_the_fast_path_and_keeps_its_lines_in_order() -> None:
    frame, fast, slow = _both_ways(
        "1.2",
        [
            ("destination", "/queue/q"),
            ("content-type", "text/plain"),
            ("receipt", "r1"),
            ("persistent", "true"),
            ("kind", "x"),
        ],
    )
    assert fast._headers is None  # no dict was built: the lines went through as bytes
    _assert_same(fast, slow)
    assert fast.wire_headers.startswith(b"destination:/queue/q\ncontent-type:text/plain\npersistent:true\nkind:x\n")
    assert b"receipt" not in fast.wire_headers


def test_what_the_broker_rewrites_takes_the_general_path() -> None:
    for name, value in (
        ("priority", "7"),
        ("expires", "0"),
        ("timestamp", "1"),
        ("persistent", "TRUE"),
        ("reply-to", "/queue/r"),
        ("x", "a:b"),
        ("x", "a\\cb"),
    ):
        frame, fast, slow = _both_ways("1.2", [("destination", "/queue/q"), (name, value)])
        assert fast._headers is not None, name
        _assert_same(fast, slow)


def test_a_repeated_header_takes_the_general_path_and_the_first_wins() -> None:
    frame, fast, slow = _both_ways("1.2", [("destination", "/queue/q"), ("k", "first"), ("k", "second")])
    assert fast._headers is not None
    assert fast.headers["k"] == "first"
    _assert_same(fast, slow)


def test_crlf_frames_and_stomp_10_take_the_general_path() -> None:
    parser = FrameParser(role="server", version="1.2")
    (frame,) = parser.feed(b"SEND\r\ndestination:/queue/q\r\nk:v\r\n\r\nbody\x00")
    assert frame.headers.head is None  # type: ignore[attr-defined]
    frame, fast, slow = _both_ways("1.0", [("destination", "/queue/q"), ("k", " spaced ")])
    assert fast._headers is not None
    _assert_same(fast, slow)


def test_send_block_refuses_a_destination_that_would_need_escaping() -> None:
    head = "SEND\ndestination:/queue/q"
    assert send_block(head, {"destination": "/queue/q"}, "/queue/a:b", 1, 0, 4) is None
    block, chars = send_block(head, {"destination": "/queue/q"}, "/queue/q", 1, 0, 4)  # type: ignore[misc]
    assert block == b"destination:/queue/q\ntimestamp:1\nexpires:0\npriority:4\n"
    assert chars == len("destination/queue/qtimestamp1expires0priority4")


def test_a_passed_through_message_is_stored_and_paged_back_unchanged() -> None:
    _, fast, _ = _both_ways("1.2", [("destination", "/queue/q"), ("persistent", "true"), ("kind", "k1")])
    from minibroker.durability import encode_wire_payload

    payload = encode_wire_payload(
        fast.seq,
        fast.message_id_wire("1.2"),
        fast.wire_headers,
        fast.body,
        persistent=True,
        priority=4,
        expires=0,
        timestamp=fast.timestamp,
    )
    stored = decode_payload(payload)
    assert stored.message_id == fast.message_id
    assert stored.headers == dict(fast.headers)
    assert stored.body == b"hello"


def test_the_layouts_worked_out_are_bounded_and_each_gives_its_own_lines() -> None:
    """A client that sends ever new header names cannot grow what send_block keeps; each
    layout still gives its own block, before and after the cache is emptied."""
    from minibroker.protocol import message

    for i in range(message._LAYOUTS_KEPT + 50):
        head = f"SEND\ndestination:/queue/q\nname{i}:v\ncontent-length:1"
        headers = {"destination": "/queue/q", f"name{i}": "v", "content-length": "1"}
        block, _ = send_block(head, headers, "/queue/q", 1, 0, 4)  # type: ignore[misc]
        assert block == f"destination:/queue/q\nname{i}:v\ntimestamp:1\nexpires:0\npriority:4\n".encode()
        assert len(message._LAYOUTS) <= message._LAYOUTS_KEPT
