"""Bad input, generated: whatever a client sends, the broker answers it and goes on.

Hypothesis writes a connection's worth of frames from STOMP's commands and the
headers the broker reads (with good values, edge values and garbage), plus raw
bytes. Whatever comes, the core must not raise: it answers with frames (an
ERROR says in its ``message`` header what was wrong; when it closes the
connection, the next frames come on a new one), and a bystander client on the
same broker still sends and receives. The same runs with persistent messages
on a journal. Queue browsers, transactions and temporary destinations are in
the mix, and whenever a connection ends nothing of it may be left behind
(``minibroker.core.invariants``: no subscription, unacknowledged message,
transaction, temporary destination or flow-control wait; what it held is back
on its queue).
"""

from __future__ import annotations

import shutil
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minibroker.config import parse_config
from minibroker.connection import hash_password
from minibroker.edge import VirtualNetwork
from minibroker.frames import Frame
from minibroker.protocol import encode

COMMANDS = [
    "CONNECT",
    "STOMP",
    "SEND",
    "SUBSCRIBE",
    "UNSUBSCRIBE",
    "ACK",
    "NACK",
    "BEGIN",
    "COMMIT",
    "ABORT",
    "DISCONNECT",
    "SEND",
    "SEND",
    "SUBSCRIBE",
    "ACK",
]
# Numbers as clients get them wrong: other scripts' digits (which str.isdigit takes), huge ones, CR inside.
NUMBERS = st.sampled_from(
    [
        "0",
        "1",
        "2",
        "10",
        "-1",
        "99999999999999999999",
        "x",
        "",
        " 5",
        "1.5",
        "\u0663",
        "\u00b2",
        "9223372036854775808",
        "1" * 5000,
        "0" * 5000,
        "1\r",
        "+5",
        "1_0",
    ]
)
VALUES = {
    "destination": st.sampled_from(
        [
            "/queue/f",
            "/topic/f",
            "/queue/",
            "/bogus/x",
            "",
            "/queue/ActiveMQ.DLQ",
            "/queue/f,/topic/g",
            "/topic/>",
            "/queue/a b",
            "/queue/\u00e9",
            "/queue/f",
            "/temp-queue/t",
            "/temp-topic/t",
            "/remote-temp-queue/x",
        ]
    ),
    "browser": st.sampled_from(["true", "true", "false", "yes"]),
    "id": st.sampled_from(
        ["0", "1", "s", "", "1-1", "99-1", "0-0", "1-\u00b2", "\u00b2-1", "1-" + "9" * 5000, "1-1\r"]
    ),
    "ack": st.sampled_from(["auto", "client", "client-individual", "bogus", ""]),
    "receipt": st.sampled_from(["r1", "", "r:2", "r\r3"]),
    "transaction": st.sampled_from(["t1", "t2", ""]),
    "message-id": st.sampled_from(["ID:x-1-1", "nope", "", "ID:x-1-\u00b2", "ID:x-1-" + "9" * 5000]),
    "subscription": st.sampled_from(["0", "1", "s", ""]),
    "selector": st.sampled_from(["color = 'red'", "a >", "x IN ('a')", "JMSPriority > 4", "((", "", "x > 5"]),
    "x": NUMBERS,  # a property a selector compares as a number
    "activemq.prefetchSize": NUMBERS,
    "activemq.subscriptionName": st.sampled_from(["d", ""]),
    "activemq.exclusive": st.sampled_from(["true", "false", "maybe"]),
    "persistent": st.sampled_from(["true", "false", "yes"]),
    "priority": NUMBERS,
    "expires": NUMBERS,
    "reply-to": st.sampled_from(["/queue/r", "/temp-queue/x", "nowhere"]),
    "heart-beat": st.sampled_from(
        ["0,0", "10,10", "x", "1,2,3", "-1,5", "\u00b2,0", "0,99999999999999999999", "0," + "0" * 5000, "10\r,10"]
    ),
    "login": st.sampled_from(["fuzz", "fuzz\r", "a\rb", "a\nb", "", "nobody"]),
    "passcode": st.sampled_from(["secret", "", "x\r"]),
    "accept-version": st.sampled_from(["1.0", "1.1", "1.2", "1.0,1.1,1.2", "2.0", ""]),
    "host": st.sampled_from(["localhost", ""]),
    "client-id": st.sampled_from(["c", ""]),
}
REQUIRED = {
    "SEND": ("destination",),
    "SUBSCRIBE": ("destination", "id"),
    "UNSUBSCRIBE": ("id",),
    "ACK": ("id", "message-id", "subscription"),
    "NACK": ("id", "message-id", "subscription"),
    "BEGIN": ("transaction",),
    "COMMIT": ("transaction",),
    "ABORT": ("transaction",),
}
HEADERS = st.dictionaries(st.sampled_from(sorted(VALUES)), st.just(None), max_size=5).flatmap(
    lambda names: st.fixed_dictionaries({name: VALUES[name] for name in names})
)


class Handshake(bytes):
    """A chunk that opens a new connection: its first bytes (a CONNECT or STOMP, well formed or not)."""


class TooBigForAJournalFile(bytes):
    """A persistent SEND larger than a journal file: sent only in the journal run (without
    a journal it is simply a big message in memory, and memory is the labs' business)."""


@st.composite
def chunk(draw: st.DrawFn) -> bytes:
    """One frame (well formed or not) or raw bytes."""
    kind = draw(
        st.sampled_from(
            ["frame"] * 8 + ["raw", "body-on-bodiless", "browse", "handshake", "long-length", "big-persistent"]
        )
    )
    if kind == "raw":
        return draw(st.binary(max_size=40))
    if kind == "handshake":  # a new connection's CONNECT: versions, heart-beats, logins with CR in them
        names = draw(
            st.lists(st.sampled_from(["accept-version", "heart-beat", "login", "passcode", "host"]), unique=True)
        )
        headers = {name: draw(VALUES[name]) for name in names}
        lines = [draw(st.sampled_from(["CONNECT", "STOMP"]))] + [f"{k}:{v}" for k, v in headers.items()]
        return Handshake(("\n".join(lines) + "\n\n").encode() + b"\x00")
    if kind == "long-length":  # a content-length of thousands of digits
        digits = draw(st.sampled_from([b"0" * 5000, b"9" * 5000, b"0" * 4999 + b"3", b"\xc2\xb2"]))
        return b"SEND\ndestination:/queue/f\ncontent-length:" + digits + b"\n\nabc\x00"
    if kind == "big-persistent":  # larger than a journal file of the journal run
        return TooBigForAJournalFile(
            encode(
                Frame(
                    "SEND",
                    {
                        "destination": draw(st.sampled_from(["/queue/f", "/topic/f"])),
                        "persistent": "true",
                        "receipt": "big",
                    },
                    b"x" * 70_000,
                ),
                "1.2",
            )
        )
    if kind == "browse":  # a queue browser beside whatever else the connection does
        sub_id = draw(st.sampled_from(["b", "0", "1"]))
        return encode(
            Frame(
                "SUBSCRIBE",
                {
                    "destination": draw(st.sampled_from(["/queue/f", "/queue/ok", "/temp-queue/t"])),
                    "id": sub_id,
                    "browser": "true",
                },
            ),
            "1.2",
        )
    command = draw(st.sampled_from(COMMANDS))
    headers = draw(HEADERS)
    if draw(st.integers(0, 9)) < 8:  # mostly with the headers the command needs, so that it gets somewhere
        for name in REQUIRED.get(command, ()):
            headers.setdefault(name, draw(VALUES[name]))
    if kind == "body-on-bodiless":
        return command.encode() + b"\n\nbody\x00"
    body = draw(st.binary(max_size=20)) if command == "SEND" else b""
    try:
        return encode(Frame(command, headers, body), draw(st.sampled_from(["1.0", "1.2"])))
    except ValueError:  # not encodable as asked (a raw colon in a 1.0 header ...): send it as it is
        lines = [command] + [f"{k}:{v}" for k, v in headers.items()]
        return ("\n".join(lines) + "\n\n").encode() + body + b"\x00"


def _run(config_doc: dict, persistent: bool, connect_version: str, chunks: list[bytes]) -> None:
    data_dir = tempfile.mkdtemp(prefix="minibroker-fuzz-") if persistent else None
    net = VirtualNetwork(parse_config(config_doc), data_dir=data_dir, check_teardown=True)
    try:
        bystander = net.client("bystander")
        assert bystander.connect("1.2", login="fuzz", passcode="secret").command == "CONNECTED"
        bystander.subscribe("/queue/ok", "b", "client-individual")
        fuzzers = []
        for data in chunks:
            if isinstance(data, TooBigForAJournalFile) and not persistent:
                continue
            if isinstance(data, Handshake):  # a connection of its own, whose first bytes these are
                fuzzers.append(net.client(f"fuzz{len(fuzzers)}"))
            elif not fuzzers or fuzzers[-1].closed:  # an ERROR closed the last one: the next connects
                fuzzers.append(net.client(f"fuzz{len(fuzzers)}"))
                fuzzers[-1].send_raw(
                    encode(
                        Frame(
                            "CONNECT",
                            {"accept-version": connect_version, "host": "h", "login": "fuzz", "passcode": "secret"},
                        )
                    )
                )
            fuzzers[-1].write(data)  # any exception from the core fails the test
            net.advance(0.05)
        for fuzz in fuzzers:
            for error in fuzz.frames("ERROR"):
                assert error.headers.get("message"), f"an ERROR without a message header: {error}"
            fuzz.drop()  # every connection ends here, if it has not already
        assert net.teardown is not None
        assert net.teardown.violations == [], net.teardown.violations
        headers = {"persistent": "true"} if persistent else {}
        bystander.send("/queue/ok", "still here", **headers)
        assert bystander.bodies()[-1:] == [b"still here"], bystander.frames()
        bystander.ack(bystander.messages()[-1])
        assert not bystander.frames("ERROR")
        net.stop()
    finally:
        if data_dir is not None:
            shutil.rmtree(data_dir, ignore_errors=True)


#: One user, so that logins are checked (a CR in one once made the ERROR itself fail).
USERS = [{"name": "fuzz", "password_hash": hash_password("secret", iterations=1000)}]
_SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(version=st.sampled_from(["1.0", "1.1", "1.2"]), chunks=st.lists(chunk(), min_size=1, max_size=20))
def test_any_input_is_answered_and_leaves_other_clients_alone(version: str, chunks: list[bytes]) -> None:
    _run({"system_usage": {"memory_limit": "32 kb"}, "users": USERS}, False, version, chunks)


@_SETTINGS
@given(version=st.sampled_from(["1.0", "1.1", "1.2"]), chunks=st.lists(chunk(), min_size=1, max_size=20))
def test_any_input_with_a_journal(version: str, chunks: list[bytes]) -> None:
    _run(
        {"system_usage": {"memory_limit": "32 kb"}, "store": {"fsync": "never", "journal_max_file_length": "64 kb"}},
        True,
        version,
        chunks,
    )
