"""The STOMP codec, tested as h11 tests its readers and writers.

One table of (version, frame, bytes) runs both ways: ``encode(frame)`` must
give the bytes (ending ``NUL LF``, as ActiveMQ's do) and parsing the bytes must give the frame, fed whole, one byte
at a time, and followed by trailing bytes of a next frame that must stay
buffered. A second table holds inputs that only parse (CR LF, repeats,
heart-beats); a third maps malformed input to the error it must raise.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minibroker.errors import ProtocolError
from minibroker.frames import Frame
from minibroker.protocol import FrameParser, encode, escape, unescape

# (version, role the parser plays, frame, exact wire bytes)
ROUND_TRIP = [
    (
        "1.2",
        "server",
        Frame("CONNECT", {"accept-version": "1.2", "host": "h"}),
        b"CONNECT\naccept-version:1.2\nhost:h\n\n\x00\n",
    ),
    (
        "1.2",
        "server",
        Frame("STOMP", {"accept-version": "1.0,1.1,1.2", "host": "a:b"}),
        b"STOMP\naccept-version:1.0,1.1,1.2\nhost:a:b\n\n\x00\n",
    ),
    (
        "1.2",
        "client",
        Frame("CONNECTED", {"version": "1.2", "session": "s:1"}),
        b"CONNECTED\nversion:1.2\nsession:s:1\n\n\x00\n",
    ),
    (
        "1.2",
        "server",
        Frame("SEND", {"destination": "/queue/a", "content-length": "5"}, b"hello"),
        b"SEND\ndestination:/queue/a\ncontent-length:5\n\nhello\x00\n",
    ),
    (
        "1.2",
        "server",
        Frame("SEND", {"destination": "/queue/a", "content-length": "3"}, b"a\x00b"),
        b"SEND\ndestination:/queue/a\ncontent-length:3\n\na\x00b\x00\n",
    ),
    (
        "1.2",
        "server",
        Frame("SEND", {"destination": "/queue/a", "content-length": "0"}),
        b"SEND\ndestination:/queue/a\ncontent-length:0\n\n\x00\n",
    ),
    (
        "1.2",
        "server",
        Frame("SEND", {"destination": "/q", "k:ey": "v\nal\\ue\r", "content-length": "0"}),
        b"SEND\ndestination:/q\nk\\cey:v\\nal\\\\ue\\r\ncontent-length:0\n\n\x00\n",
    ),
    (
        "1.1",
        "server",
        Frame("SEND", {"destination": "/q", "k:ey": "v\nal\\ue", "content-length": "0"}),
        b"SEND\ndestination:/q\nk\\cey:v\\nal\\\\ue\ncontent-length:0\n\n\x00\n",
    ),
    (
        "1.0",
        "server",
        Frame("SEND", {"destination": "/q", "x": "a\\b", "content-length": "1"}, b"z"),
        b"SEND\ndestination:/q\nx:a\\b\ncontent-length:1\n\nz\x00\n",
    ),
    (
        "1.2",
        "server",
        Frame("SUBSCRIBE", {"destination": "/topic/t", "id": "0", "ack": "client-individual"}),
        b"SUBSCRIBE\ndestination:/topic/t\nid:0\nack:client-individual\n\n\x00\n",
    ),
    ("1.2", "server", Frame("ACK", {"id": "m-1"}), b"ACK\nid:m-1\n\n\x00\n"),
    ("1.2", "server", Frame("DISCONNECT", {"receipt": "77"}), b"DISCONNECT\nreceipt:77\n\n\x00\n"),
    ("1.2", "server", Frame("BEGIN", {"transaction": "tx1"}), b"BEGIN\ntransaction:tx1\n\n\x00\n"),
    (
        "1.2",
        "client",
        Frame(
            "MESSAGE",
            {"subscription": "0", "message-id": "ID:1", "destination": "/queue/a", "content-length": "2"},
            b"hi",
        ),
        b"MESSAGE\nsubscription:0\nmessage-id:ID\\c1\ndestination:/queue/a\ncontent-length:2\n\nhi\x00\n",
    ),
    ("1.2", "client", Frame("RECEIPT", {"receipt-id": "r"}), b"RECEIPT\nreceipt-id:r\n\n\x00\n"),
    (
        "1.2",
        "client",
        Frame("ERROR", {"message": "bad: thing", "content-length": "3"}, b"why"),
        b"ERROR\nmessage:bad\\c thing\ncontent-length:3\n\nwhy\x00\n",
    ),
    (
        "1.2",
        "server",
        Frame("SEND", {"destination": "/queue/\u00e9t\u00e9", "content-length": "4"}, "\u00e9t\u00e9".encode()[:4]),
        "SEND\ndestination:/queue/\u00e9t\u00e9\ncontent-length:4\n\n".encode()
        + "\u00e9t\u00e9".encode()[:4]
        + b"\x00\n",
    ),
]

# Inputs that parse but are not what encode() writes.
PARSE_ONLY = [
    ("1.2", b"SEND\r\ndestination:/queue/a\r\n\r\nhello\x00", Frame("SEND", {"destination": "/queue/a"}, b"hello")),
    (
        "1.2",
        b"SEND\ndestination:/a\r\nfoo:bar\n\nbody\x00",
        Frame("SEND", {"destination": "/a", "foo": "bar"}, b"body"),
    ),
    ("1.2", b"SEND\ndestination:/a\ndestination:/b\n\n\x00", Frame("SEND", {"destination": "/a"})),
    ("1.2", b"SEND\ndestination:/a\nx:\n\n\x00", Frame("SEND", {"destination": "/a", "x": ""})),
    ("1.2", b"SEND\ndestination:/a\nx: spaced \n\n\x00", Frame("SEND", {"destination": "/a", "x": " spaced "})),
    ("1.0", b"SEND\ndestination: /a \n\n\x00", Frame("SEND", {"destination": "/a"})),
    (
        "1.2",
        b"SEND\ndestination:/a\ncontent-length:3\n\nabc\x00\n\r\n\n",
        Frame("SEND", {"destination": "/a", "content-length": "3"}, b"abc"),
    ),
    ("1.2", b"\n\n\r\nSEND\ndestination:/a\n\n\x00", Frame("SEND", {"destination": "/a"})),
    ("1.2", b"CONNECT\nlogin:a\\cb\nhost:x\n\n\x00", Frame("CONNECT", {"login": "a\\cb", "host": "x"})),
    ("1.2", b"SEND\ndestination:/a\nv:a:b:c\n\n\x00", Frame("SEND", {"destination": "/a", "v": "a:b:c"})),
    # A body of EOLs on a frame that carries none is dropped (RabbitMQ's tests send a 1.0 CONNECT so) ...
    (
        "1.2",
        b"CONNECT\nlogin:guest\npasscode:guest\n\n\n\x00",
        Frame("CONNECT", {"login": "guest", "passcode": "guest"}),
    ),
    ("1.2", b"STOMP\naccept-version:1.2\nhost:h\n\n\r\n\n\x00", Frame("STOMP", {"accept-version": "1.2", "host": "h"})),
    ("1.2", b"SUBSCRIBE\ndestination:/a\nid:1\n\n\n\x00", Frame("SUBSCRIBE", {"destination": "/a", "id": "1"})),
    ("1.1", b"ACK\nid:1\ncontent-length:2\n\n\r\n\x00", Frame("ACK", {"id": "1", "content-length": "2"})),
    # ... and so is any body on a STOMP 1.0 frame, as ActiveMQ does.
    ("1.0", b"DISCONNECT\nreceipt:r\n\nbye\x00", Frame("DISCONNECT", {"receipt": "r"})),
    (
        "1.2",
        b"CONNECT\naccept-version:1.0\nhost:h\n\nhello\x00",
        Frame("CONNECT", {"accept-version": "1.0", "host": "h"}),
    ),
    ("1.2", b"CONNECT\nlogin:u\n\nhello\x00", Frame("CONNECT", {"login": "u"})),
    # A stray NUL between frames is skipped like an EOL, as ActiveMQ skips it.
    ("1.2", b"\n\x00SUBSCRIBE\ndestination:/a\nid:1\n\n\x00", Frame("SUBSCRIBE", {"destination": "/a", "id": "1"})),
    ("1.0", b"\x00\x00\r\nSEND\ndestination:/a\n\nb\x00\n\x00\n", Frame("SEND", {"destination": "/a"}, b"b")),
]

# Malformed input -> a fragment of the ProtocolError's message.
ERRORS = [
    ("1.2", b"BOGUS\n\n\x00", "unknown command"),
    ("1.2", b"MESSAGE\n\n\x00", "unknown command"),  # a server command sent to the server
    ("1.2", b"SEND\ndestination\n\n\x00", "without ':'"),
    ("1.2", b"SEND\ndestination:/a\nx:\\t\n\n\x00", "undefined escape"),
    ("1.1", b"SEND\ndestination:/a\nx:\\r\n\n\x00", "undefined escape"),
    ("1.2", b"SEND\ndestination:/a\nx:abc\\\n\n\x00", "undefined escape"),
    ("1.2", b"SEND\ndestination:/a\ncontent-length:abc\n\n\x00", "not a number"),
    ("1.2", b"SEND\ndestination:/a\ncontent-length:-1\n\n\x00", "negative"),
    ("1.2", b"SEND\ndestination:/a\ncontent-length:2\n\nabc\x00", "not followed by NUL"),
    ("1.2", b"SUBSCRIBE\ndestination:/a\nid:1\n\nbody\x00", "must not have a body"),
    ("1.1", b"UNSUBSCRIBE\nid:1\n\n\n\r\x00", "must not have a body"),  # a CR alone is no EOL
    ("1.2", b"CONNECT\naccept-version:1.0,1.2\nhost:h\n\n\nhello\x00", "must not have a body"),
    ("1.2", b"SEND\n:value\n\n\x00", "empty name"),
    ("1.2", b"SEND\ndestination:/a\n\xff\xfe:x\n\n\x00", "not UTF-8"),
    ("1.2", b"\rSEND\n\n\x00", "CR between frames"),
]


def feed_whole(parser: FrameParser, data: bytes) -> list[Frame]:
    return parser.feed(data)


def feed_bytewise(parser: FrameParser, data: bytes) -> list[Frame]:
    frames: list[Frame] = []
    for i in range(len(data)):
        got = parser.feed(data[i : i + 1])
        if i < len(data) - 1:
            # Only the final byte (the NUL, or a trailing EOL) may complete it.
            assert got == [] or data[i] == 0, (i, got)
        frames += got
    return frames


@pytest.mark.parametrize("version,role,frame,wire", ROUND_TRIP)
def test_encode(version: str, role: str, frame: Frame, wire: bytes) -> None:
    assert encode(frame, version) == wire


@pytest.mark.parametrize("feeder", [feed_whole, feed_bytewise])
@pytest.mark.parametrize("version,role,frame,wire", ROUND_TRIP)
def test_parse_round_trip(feeder, version: str, role: str, frame: Frame, wire: bytes) -> None:
    parser = FrameParser(role=role, version=version)
    assert feeder(parser, wire) == [frame]
    assert parser.buffered == 0
    assert parser.heartbeats == 0  # the EOL after the NUL ends the frame: it is no heart-beat


@pytest.mark.parametrize("version,role,frame,wire", ROUND_TRIP)
def test_trailing_bytes_stay_buffered(version: str, role: str, frame: Frame, wire: bytes) -> None:
    parser = FrameParser(role=role, version=version)
    trailing = wire[: len(wire) // 2]
    assert parser.feed(wire + trailing) == [frame]
    assert parser.buffered == len(trailing.lstrip(b"\r\n")) or parser.buffered == len(trailing)
    # ... and the rest of that second frame completes it.
    assert parser.feed(wire[len(wire) // 2 :]) == [frame]
    assert parser.buffered == 0


@pytest.mark.parametrize("feeder", [feed_whole, feed_bytewise])
@pytest.mark.parametrize("version,wire,frame", PARSE_ONLY)
def test_parse_only(feeder, version: str, wire: bytes, frame: Frame) -> None:
    assert feeder(FrameParser(version=version), wire) == [frame]


@pytest.mark.parametrize("version,wire,fragment", ERRORS)
def test_errors(version: str, wire: bytes, fragment: str) -> None:
    parser = FrameParser(version=version)
    with pytest.raises(ProtocolError, match=fragment):
        parser.feed(wire)
    # The error is sticky: the parser never re-synchronises on garbage.
    with pytest.raises(ProtocolError):
        parser.feed(b"SEND\ndestination:/a\n\n\x00")


@pytest.mark.parametrize("version,wire,fragment", ERRORS)
def test_errors_bytewise(version: str, wire: bytes, fragment: str) -> None:
    parser = FrameParser(version=version)
    with pytest.raises(ProtocolError, match=fragment):
        feed_bytewise(parser, wire)


def test_frames_before_a_fault_come_with_the_error() -> None:
    good = b"SEND\ndestination:/a\n\nok\x00"
    parser = FrameParser()
    with pytest.raises(ProtocolError) as info:
        parser.feed(good + good + b"SEND\nno colon\n\n\x00" + good)
    assert info.value.frames == [Frame("SEND", {"destination": "/a"}, b"ok")] * 2


def test_heartbeats_are_counted_and_skipped() -> None:
    parser = FrameParser()
    assert parser.feed(b"\n\r\n\n") == []
    assert parser.heartbeats == 3
    assert parser.buffered == 0
    assert parser.feed(b"\r") == []  # a CR may start a CR LF
    assert parser.feed(b"\n") == []
    assert parser.heartbeats == 4


@pytest.mark.parametrize("feeder", [feed_whole, feed_bytewise])
def test_the_eol_after_a_nul_ends_the_frame_and_later_ones_are_heart_beats(feeder) -> None:
    frame = Frame("SEND", {"destination": "/a", "content-length": "1"}, b"x")
    parser = FrameParser(version="1.2")
    assert feeder(parser, encode(frame) + b"\n\r\n" + encode(frame) + encode(frame) + b"\n") == [frame] * 3
    assert parser.heartbeats == 3
    assert parser.buffered == 0


def test_several_frames_in_one_feed_keep_order() -> None:
    frames = [Frame("SEND", {"destination": f"/queue/{i}", "content-length": "1"}, b"%d" % (i % 10)) for i in range(50)]
    data = b"\n".join(encode(f) for f in frames)
    assert FrameParser().feed(data) == frames


@pytest.mark.parametrize(
    "limits,wire,fragment",
    [
        ({"max_command_length": 8}, b"SUBSCRIBE\nid:1\n\n\x00", "command longer"),
        ({"max_command_length": 8}, b"X" * 20, "command longer"),
        ({"max_header_line_length": 10}, b"SEND\ndestination:/queue/long\n\n\x00", "header line longer"),
        ({"max_headers": 2}, b"SEND\na:1\nb:2\nc:3\n\n\x00", "more than 2 headers"),
        ({"max_body_length": 4}, b"SEND\ncontent-length:5\n\n12345\x00", "exceeds the limit of 4"),
        ({"max_body_length": 4}, b"SEND\n\n12345", "exceeds the limit of 4"),
        ({"max_body_length": 4}, b"SEND\n\n12345\x00", "exceeds the limit of 4"),  # whole, without content-length
        ({"max_frame_size": 20}, b"SEND\ndestination:/q\n\n0123456789\x00", "frame exceeds"),
        ({"max_frame_size": 20}, b"SEND\ncontent-length:100\n\n", "frame exceeds"),
        (
            {"max_command_length": 8, "max_headers": 2, "max_header_line_length": 8},
            b"SEND\n" + b"a:1\n" * 10,
            "more than 2 headers",
        ),
    ],
)
@pytest.mark.parametrize("version", ["1.0", "1.2"])  # 1.2: a whole frame may take the one-step read
def test_limits(limits: dict, wire: bytes, fragment: str, version: str) -> None:
    with pytest.raises(ProtocolError, match=fragment):
        FrameParser(version=version, **limits).feed(wire)


def _outcome(parser: FrameParser, pieces: list[bytes]) -> tuple[list[tuple[str, dict, bytes, str | None]], str | None]:
    """The frames (with the head each kept) and the error, if any, from feeding ``pieces``."""
    frames: list[Frame] = []
    try:
        for piece in pieces:
            frames += parser.feed(piece)
            while parser.awaiting_version:  # after CONNECT: the broker sets the version, then reads on
                parser.version = "1.2"
                frames += parser.feed(b"")
        error = None
    except ProtocolError as exc:
        frames += exc.frames
        error = exc.message
    return [(f.command, dict(f.headers), f.body, getattr(f.headers, "head", None)) for f in frames], error


_LINE_PIECES = st.sampled_from(
    [
        "destination",
        "id",
        "ack",
        ":",
        "\\",
        "\\c",
        "\\t",
        "\r",
        "a",
        "1",
        " ",
        "\u00e9",
        "content-length:",
        "content-length:3",
        "content-length:\u00b2",
        "content-length:99",
    ]
)
_COMMANDS = st.sampled_from(["SEND"] * 4 + ["ACK", "SUBSCRIBE", "MESSAGE", "BOGUS", "CONNECT", "DISCONNECT", ""])


@st.composite
def _frame_bytes(draw: st.DrawFn) -> bytes:
    eol = draw(st.sampled_from([b"\n"] * 4 + [b"\r\n"]))
    plain_line = st.builds(
        "{}:{}".format,
        st.sampled_from(["destination", "id", "receipt", "x", "content-length"]),
        st.sampled_from(["/queue/a", "1", "", "a:b", "0", "3", "99", "\u00e9"]),
    )
    messy_line = st.lists(_LINE_PIECES, max_size=4).map("".join)
    lines = [draw(_COMMANDS)] + draw(st.lists(st.one_of(plain_line, plain_line, plain_line, messy_line), max_size=4))
    body = draw(st.one_of(st.just(b""), st.just(b"abc"), st.binary(max_size=6)))
    between = draw(st.sampled_from([b"", b"", b"\n", b"\n\n", b"\r\n", b"\x00"]))  # a frame's end, heart-beats
    return between + eol.join(line.encode() for line in lines) + eol + eol + body + b"\x00"


@given(
    frames=st.lists(_frame_bytes(), min_size=1, max_size=3),
    version=st.sampled_from(["1.1", "1.2"]),
    limits=st.fixed_dictionaries(
        {},
        optional={
            "max_header_line_length": st.integers(4, 40),
            "max_headers": st.integers(0, 3),
            "max_body_length": st.integers(0, 8),
            "max_frame_size": st.integers(8, 60),
        },
    ),
)
@settings(max_examples=400, deadline=None)
def test_a_whole_frame_reads_exactly_as_the_two_phases_read_it(frames: list[bytes], version: str, limits: dict) -> None:
    """Fed whole, plain frames take the one-step read (``_whole_frames``); fed a byte at a
    time, every frame takes the two phases. Frames and kept heads must agree, and both
    must fail or neither (fed a byte at a time, a frame over two limits may cross the
    other one first: both messages are right)."""
    wire = b"".join(frames)
    whole_parser, bytewise_parser = FrameParser(version=version, **limits), FrameParser(version=version, **limits)
    whole, whole_error = _outcome(whole_parser, [wire])
    bytewise, bytewise_error = _outcome(bytewise_parser, [wire[i : i + 1] for i in range(len(wire))])
    assert whole == bytewise
    assert (whole_error is None) == (bytewise_error is None), (whole_error, bytewise_error)
    if whole_error is None:  # the EOLs between frames: each frame's own, and heart-beats
        assert whole_parser.heartbeats == bytewise_parser.heartbeats
        assert whole_parser.buffered == bytewise_parser.buffered


def test_large_body_fed_in_chunks_is_scanned_once() -> None:
    body = b"x" * 1_000_000
    wire = b"SEND\ndestination:/a\n\n" + body + b"\x00"
    parser = FrameParser()
    frames: list[Frame] = []
    for i in range(0, len(wire), 4096):
        frames += parser.feed(wire[i : i + 4096])
    assert frames == [Frame("SEND", {"destination": "/a"}, body)]


def test_encode_replaces_a_wrong_content_length() -> None:
    frame = Frame("SEND", {"destination": "/a", "content-length": "99"}, b"abc")
    assert encode(frame) == b"SEND\ndestination:/a\ncontent-length:3\n\nabc\x00\n"


def test_encode_refuses_a_body_on_a_bodiless_command() -> None:
    with pytest.raises(ValueError):
        encode(Frame("SUBSCRIBE", {"id": "1"}, b"x"))


@pytest.mark.parametrize("version", ["1.1", "1.2"])
@given(text=st.text())
@settings(max_examples=200, deadline=None)
def test_escape_round_trip(version: str, text: str) -> None:
    if version == "1.1":
        text = text.replace("\r", "")
    assert unescape(escape(text, version), version) == text


header_text = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20)


@given(
    headers=st.dictionaries(
        header_text.filter(lambda k: k != "content-length"),
        st.text(st.characters(blacklist_categories=("Cs",)), max_size=20),
        max_size=5,
    ),
    body=st.binary(max_size=100),
    cut=st.integers(min_value=0, max_value=400),
)
@settings(max_examples=300, deadline=None)
def test_any_send_frame_round_trips_when_split_anywhere(headers: dict, body: bytes, cut: int) -> None:
    frame = Frame("SEND", headers, body)
    wire = encode(frame, "1.2")
    expected = Frame("SEND", {**headers, "content-length": str(len(body))}, body)
    assert "content-length" in FrameParser(version="1.2").feed(wire)[0].headers
    parser = FrameParser(version="1.2")
    cut = min(cut, len(wire))
    got = parser.feed(wire[:cut]) + parser.feed(wire[cut:])
    assert got == [expected]


def test_parser_stops_after_a_handshake_frame_so_the_version_can_change() -> None:
    parser = FrameParser(role="server")
    data = encode(Frame("CONNECT", {"accept-version": "1.2"})) + b"SEND\ndestination:/a\nk:a\\cb \n\n\x00"
    assert [f.command for f in parser.feed(data)] == ["CONNECT"]
    assert parser.awaiting_version
    parser.version = "1.2"
    assert parser.feed(b"") == [Frame("SEND", {"destination": "/a", "k": "a:b "})]
    assert not parser.awaiting_version


def test_client_parser_switches_to_the_version_connected_announces() -> None:
    parser = FrameParser(role="client")
    data = encode(Frame("CONNECTED", {"version": "1.2"})) + encode(Frame("ERROR", {"message": "a:b "}), "1.2")
    frames = parser.feed(data)
    assert [f.command for f in frames] == ["CONNECTED", "ERROR"]
    assert frames[1].headers["message"] == "a:b "
    assert parser.version == "1.2" and not parser.awaiting_version


@pytest.mark.parametrize(
    "frame,version",
    [
        (Frame("SEND", {"destination": "/q", "x": "a\nb"}), "1.0"),
        (Frame("SEND", {"destination": "/q", "x": "a\rb"}), "1.0"),
        (Frame("SEND", {"destination": "/q", "na:me": "v"}), "1.0"),
        (Frame("CONNECT", {"login": "u\npasscode:x"}), "1.2"),
    ],
)
def test_encode_refuses_unescapable_headers(frame: Frame, version: str) -> None:
    with pytest.raises(ValueError, match="cannot be sent unescaped"):
        encode(frame, version)


@pytest.mark.parametrize(
    "text, decoded",
    [
        ("ID\\cb-1\\c7", "ID:b-1:7"),  # only colons: the fast path
        ("a\\\\cb", "a\\cb"),  # an escaped backslash before a c is not a colon
        ("\\\\\\c", "\\:"),
        ("x\\c\\ny", "x:\ny"),
    ],
)
def test_unescape_of_colons_and_of_everything_else(text: str, decoded: str) -> None:
    assert unescape(text, "1.2") == decoded


@pytest.mark.parametrize("text", ["a\\cb\\x", "ab\\", "\\c\\"])
def test_unescape_refuses_undefined_escapes_even_beside_colons(text: str) -> None:
    with pytest.raises(ProtocolError, match="undefined escape"):
        unescape(text, "1.2")


# ---------------------------------------------------------------- limits enforced while the bytes arrive
def _fed_until_refused(parser: FrameParser, data: bytes) -> int:
    """Feed ``data`` a byte at a time; how many bytes the parser took before refusing."""
    for i in range(len(data)):
        try:
            parser.feed(data[i : i + 1])
        except ProtocolError:
            return i + 1
    raise AssertionError("the parser never refused")


def test_a_long_header_line_is_refused_while_it_arrives() -> None:
    parser = FrameParser(version="1.2", max_header_line_length=64)
    taken = _fed_until_refused(parser, b"SEND\ndestination:/q\nx:" + b"y" * 10_000)
    assert taken <= len(b"SEND\ndestination:/q\n") + 64 + 2
    with pytest.raises(ProtocolError, match="header line longer than 64 bytes"):
        parser.feed(b"")


@pytest.mark.parametrize("eol", [b"\n", b"\r\n"])
def test_a_long_header_line_already_ended_is_refused_before_the_block_ends(eol: bytes) -> None:
    parser = FrameParser(version="1.2", max_header_line_length=64)
    with pytest.raises(ProtocolError, match="header line longer than 64 bytes"):
        parser.feed(b"SEND" + eol + b"x:" + b"y" * 63 + eol + b"destination:/q" + eol)


@pytest.mark.parametrize("eol", [b"\n", b"\r\n"])
def test_header_lines_at_the_limit_pass_fed_a_byte_at_a_time(eol: bytes) -> None:
    wire = b"SEND" + eol + b"x:" + b"y" * 62 + eol + b"destination:/q" + eol + eol + b"\x00"
    frames = feed_bytewise(FrameParser(version="1.2", max_header_line_length=64), wire)
    assert [f.headers["x"] for f in frames] == ["y" * 62]


def test_before_the_handshake_a_frame_is_held_to_the_handshake_limit() -> None:
    # A CONNECT announcing a 100 MB body is refused at its header block, before any body is held.
    parser = FrameParser(max_handshake_frame_size=4096)
    with pytest.raises(ProtocolError, match="limit of 4096 bytes before the CONNECT is accepted"):
        parser.feed(b"CONNECT\naccept-version:1.2\ncontent-length:104857600\n\n" + b"x" * 1000)
    # A header block that never ends is refused once it passes the limit.
    parser = FrameParser(max_handshake_frame_size=4096)
    taken = _fed_until_refused(parser, b"CONNECT\n" + (b"h:" + b"v" * 100 + b"\n") * 500)
    assert 4096 < taken <= 4096 + 1
    # So is any frame before CONNECT (the session refuses it, but only once it is whole).
    with pytest.raises(ProtocolError, match="before the CONNECT is accepted"):
        FrameParser(max_handshake_frame_size=4096).feed(b"SEND\ndestination:/q\n\n" + b"x" * 5000 + b"\x00")


def test_after_the_handshake_frames_may_be_as_large_as_max_frame_size() -> None:
    parser = FrameParser(max_handshake_frame_size=4096)
    assert [f.command for f in parser.feed(b"CONNECT\naccept-version:1.2\n\n\x00")] == ["CONNECT"]
    parser.version = "1.2"
    parser.handshake_complete = True
    body = b"x" * 100_000
    [send] = feed_whole(parser, b"SEND\ndestination:/q\ncontent-length:100000\n\n" + body + b"\x00")
    assert send.body == body


def test_too_many_headers_are_refused_while_they_arrive() -> None:
    parser = FrameParser(version="1.2", max_headers=10)
    taken = _fed_until_refused(parser, b"SEND\n" + b"h:v\n" * 1000)
    assert taken <= len(b"SEND\n") + 11 * len(b"h:v\n")
    with pytest.raises(ProtocolError, match="more than 10 headers"):
        parser.feed(b"")
